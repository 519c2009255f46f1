#!/usr/bin/env bash
# examples/parameter_server built out of tree from the installed SDK and run:
# the shared model's loss falls, both trainers classify their data, and the
# PS applied every step of both (2 trainers x 8 epochs x 6 batches).
# The trainers step one model on the PS, so a trainer that starts late starts
# on a trained model (CI once saw trainer2 begin at 0.0038 after trainer1 had
# taken it from 0.87): each trainer's last loss is judged against the larger
# first-epoch loss, the untrained model's.
. "$(dirname "$0")/sdk_lib.sh"
build_example parameter_server
for b in pc cmake; do
  run_example $b parameter_server
  out=$work/$b.out
  untrained=0
  for t in trainer1 trainer2; do
    read -r first _ < <(first_last "$out" "^$t epoch [0-9]+ loss ([0-9.]+)\$") || fail "$b: no $t loss lines"
    untrained=$(awk -v a="$untrained" -v b="$first" 'BEGIN { print (b > a ? b : a) }')
  done
  for t in trainer1 trainer2; do
    read -r _ last < <(first_last "$out" "^$t epoch [0-9]+ loss ([0-9.]+)\$")
    awk -v f="$untrained" -v l="$last" 'BEGIN { exit !(l < f / 4) }' || fail "$b: $t loss ended at $last, not 4x below the untrained model's $untrained"
    acc=$(sed -nE "s/^$t accuracy ([0-9.]+)\$/\\1/p" "$out")
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.9) }' || fail "$b: $t accuracy '${acc}'"
  done
  grep -qx "ps: 2 trainers done, 96 optimizer steps applied" "$out" || fail "$b: PS summary"
done
echo "ok: parameter_server"
