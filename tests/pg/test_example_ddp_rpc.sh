#!/usr/bin/env bash
# examples/ddp_rpc built in tree and run (4 processes on loopback): on a
# fixed seed both trainers' loss falls over the 100 iterations (mean of the
# last 10 below 3/4 of the first 10), the PS's embedding table changes, the
# two trainers' Linear weights end bit-identical, and it exits 0.
set -euo pipefail
bin=${TRIB_BINARY_DIR:?}/pg/ddp_rpc
fail() { echo "FAIL: $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" 1 >"$out" 2>&1 || fail "ddp_rpc exited $?"
for t in trainer0 trainer1; do
  line=$(grep -E "^$t loss first10 [0-9.]+ last10 [0-9.]+\$" "$out") || fail "no loss line for $t"
  read -r _ _ _ first _ last <<<"$line"
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.75 * f) }' || fail "$t loss $first -> $last did not fall"
done
change=$(sed -nE 's/^ps embedding table max change ([0-9.]+)$/\1/p' "$out")
awk -v c="${change:-0}" 'BEGIN { exit !(c > 0) }' || fail "the embedding table did not change"
grep -qx "trainers' Linear weights bit-identical: yes" "$out" || fail "Linear weights differ"
grep -qx "ok" "$out" || fail "no ok"
echo "ok: ddp_rpc"
