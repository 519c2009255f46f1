#!/usr/bin/env bash
# examples/pipeline built out of tree from the installed SDK and run: the
# pipelined split model's gradients equal the unsplit model's (rel 1e-5);
# training is bit-reproducible and its loss falls; a run checkpointed
# midway and resumed ends bit-identical to the uninterrupted one (CPU); a
# missing shard is refused by name. The pipelined vs unpipelined time is
# printed, not asserted (take figures on a quiet machine).
. "$(dirname "$0")/sdk_lib.sh"
build_example pipeline

run_example pc pipeline --check-grads
rel=$(sed -nE 's/^gradients vs the unsplit model: max rel diff ([0-9.e+-]+) over 8 tensors .*/\1/p' "$work/pc.out")
awk -v r="${rel:-1}" 'BEGIN { exit !(r < 1e-5) }' || fail "gradients differ from the unsplit model's: '${rel}'"

run_example pc pipeline --iters 12
hash=$(sed -nE 's/^final parameters fnv1a ([0-9a-f]{16})$/\1/p' "$work/pc.out")
[ -n "$hash" ] || fail "no final parameters line"
read -r first last < <(first_last "$work/pc.out" '^iter +[0-9]+ loss ([0-9.]+)$') || fail "no loss lines"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 2) }' || fail "loss $first -> $last did not halve"

ck=$work/ckpt
run_example pc pipeline --iters 12 --ckpt "$ck" --save-at 5
grep -qx "checkpoint after iteration 5 in $ck" "$work/pc.out" || fail "no checkpoint line"
grep -qx "final parameters fnv1a $hash" "$work/pc.out" || fail "saving a checkpoint changed the run"
[ -f "$ck/MANIFEST" ] && [ -f "$ck/shard-1-worker1.bin" ] && [ -f "$ck/shard-1-worker2.bin" ] || fail "checkpoint files: $(ls "$ck")"
run_example cmake pipeline --iters 12 --resume "$ck"
grep -qx "resumed from $ck after iteration 5" "$work/cmake.out" || fail "no resume line"
grep -qx "final parameters fnv1a $hash" "$work/cmake.out" || fail "resumed run differs from the uninterrupted one"

rm "$ck/shard-1-worker2.bin"
timeout -k 5 120 "$work/pc/pipeline" --iters 12 --resume "$ck" >"$work/missing.out" 2>&1 && fail "resumed without a shard"
grep -qx "pipeline: dist_ckpt_load: worker2: shard shard-1-worker2.bin is missing" "$work/missing.out" ||
  fail "missing shard: $(cat "$work/missing.out")"

run_example pc pipeline --bench --batch 128 --hidden 256
grep -E '^forward\+backward of a batch of 128 \(hidden 256\): unpipelined [0-9.]+ ms, pipelined \(4 micro-batches\) [0-9.]+ ms' \
  "$work/pc.out" || fail "no bench line"
echo "ok: pipeline (gradients rel $rel, resumed run bit-identical: $hash)"
