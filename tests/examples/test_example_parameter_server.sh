#!/usr/bin/env bash
# examples/parameter_server built out of tree from the installed SDK and run:
# both trainers' losses fall, both classify their data, and the PS applied
# every step of both (2 trainers x 8 epochs x 6 batches).
. "$(dirname "$0")/sdk_lib.sh"
build_example parameter_server
for b in pc cmake; do
  run_example $b parameter_server
  out=$work/$b.out
  for t in trainer1 trainer2; do
    read -r first last < <(first_last "$out" "^$t epoch [0-9]+ loss ([0-9.]+)\$") || fail "$b: no $t loss lines"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 4) }' || fail "$b: $t loss $first -> $last did not fall 4x"
    acc=$(sed -nE "s/^$t accuracy ([0-9.]+)\$/\\1/p" "$out")
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.9) }' || fail "$b: $t accuracy '${acc}'"
  done
  grep -qx "ps: 2 trainers done, 96 optimizer steps applied" "$out" || fail "$b: PS summary"
done
echo "ok: parameter_server"
