#!/usr/bin/env bash
# examples/ddp_rpc built out of tree from the installed SDK and run (4
# processes on loopback, both builds): on a fixed seed both trainers' loss
# falls over the 100 iterations (the mean of the last 10 below 3/4 of the
# first 10), the PS's embedding table changes, the two trainers' Linear
# weights end bit-identical, and it prints ok.
. "$(dirname "$0")/sdk_lib.sh"
build_example ddp_rpc
for b in pc cmake; do
  run_example $b ddp_rpc 1
  out=$work/$b.out
  for t in trainer0 trainer1; do
    line=$(grep -E "^$t loss first10 [0-9.]+ last10 [0-9.]+\$" "$out") || fail "$b: no loss line for $t"
    read -r _ _ _ first _ last <<<"$line"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.75 * f) }' || fail "$b: $t loss $first -> $last did not fall"
  done
  change=$(sed -nE 's/^ps embedding table max change ([0-9.]+)$/\1/p' "$out")
  awk -v c="${change:-0}" 'BEGIN { exit !(c > 0) }' || fail "$b: the embedding table did not change"
  grep -qx "trainers' Linear weights bit-identical: yes" "$out" || fail "$b: Linear weights differ"
  grep -qx "ok" "$out" || fail "$b: no ok"
done
echo "ok: ddp_rpc"
