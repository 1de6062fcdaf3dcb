# Sourced by bench/*.sh (bench/run.sh runs only bench/*.sh, not this folder).
# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
# pair_ratio_median A B: the median of A[i] / B[i] over the lines of files A and B
# (pairs measured back to back share the machine's mood; medians taken per side need not).
pair_ratio_median() { paste "$1" "$2" | awk '{print $1 / $2}' | median; }
# pair_ratio_orders A B: for pairs whose first side alternates (pair 1 A first, pair 2 B
# first, ...), the median of A[i] / B[i] over the pairs where A went first, then over those
# where B went first, on one line.
pair_ratio_orders() {
  local r
  r=$(paste "$1" "$2" | awk '{print NR % 2, $1 / $2}')
  echo "$(awk '$1 == 1 {print $2}' <<<"$r" | median) $(awk '$1 == 0 {print $2}' <<<"$r" | median)"
}
# pair_ratio_balanced A B: the geometric mean of those two medians. Going first can favour
# either side (a disk's cache, a CPU's clock, the other side's file just deleted): the median
# of all pairs then leans to whichever order has more pairs; this estimate cancels such an
# effect when it multiplies every ratio of one order alike. Needs two pairs or more.
pair_ratio_balanced() { pair_ratio_orders "$1" "$2" | awk '{print sqrt($1 * $2)}'; }
