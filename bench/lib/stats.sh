# Sourced by bench/*.sh (bench/run.sh runs only bench/*.sh, not this folder).
# median: the median of the numbers on stdin, one per line.
# No number is an error (exit 1), not a median of 0.
median() {
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) exit 1; print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}
# pair_ratio_median A B: the median of A[i] / B[i] over the lines of files A and B
# (pairs measured back to back share the machine's mood; medians taken per side need not).
pair_ratio_median() { paste "$1" "$2" | awk '{print $1 / $2}' | median; }
# pair_ratio_orders A B: for pairs whose first side alternates (pair 1 A first, pair 2 B
# first, ...), the median of A[i] / B[i] over the pairs where A went first, then over those
# where B went first, on one line. Going first can favour either side (a disk's cache, a
# CPU's clock, the other side's file just deleted): the median of all pairs then leans to
# whichever order has more pairs, whereas the geometric mean of these two medians cancels
# an effect that scales every ratio of one order alike. Needs two pairs or more.
pair_ratio_orders() {
  local r a b
  (($(wc -l <"$1") == $(wc -l <"$2"))) || { echo "stats: $1 and $2 hold different numbers of pairs" >&2; return 1; }
  r=$(paste "$1" "$2" | awk '$2 == 0 {exit 1} {print NR % 2, $1 / $2}') ||
    { echo "stats: a zero in $2" >&2; return 1; }
  a=$(awk '$1 == 1 {print $2}' <<<"$r" | median) && b=$(awk '$1 == 0 {print $2}' <<<"$r" | median) ||
    { echo "stats: $1 and $2 need two pairs or more" >&2; return 1; }
  echo "$a $b"
}
