# Sourced by bench/*.sh (bench/run.sh runs only bench/*.sh, not this folder).
# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
# pair_ratio_median A B: the median of A[i] / B[i] over the lines of files A and B
# (pairs measured back to back share the machine's mood; medians taken per side need not).
pair_ratio_median() { paste "$1" "$2" | awk '{print $1 / $2}' | median; }
