#!/usr/bin/env bash
# scripts/bench modes --mujoco end to end with the binaries of $BUILD_DIR, tiny:
# PRESET (the argument) on Hopper-v4, 2 observers, one seed, runs of 5 s, in
# the four modes (sync, sync with --overlap, async, async with V-trace).
# Checks the rows (one per mode, each run's summary naming
# Hopper-v4), the step times (env_step_times.json), and that summary.md names
# the env and answers in words from the figures: the step cost against
# 0.1-0.3 ms, each mode's return for the observer count and, with one seed,
# no verdict; the minibatches PPO took; the PNGs. --env without --mujoco is refused with its message.
# No timing is asserted. Exits 77 (skip) without gnuplot or without MuJoCo.
#   BUILD_DIR=build test_bench_modes_mujoco.sh PATH/TO/scripts/bench-modes PRESET
set -uo pipefail
bm=$1 preset=$2
command -v gnuplot >/dev/null || { echo "test_bench_modes_mujoco: gnuplot is not installed: skipped"; exit 77; }
"$BUILD_DIR/envs/trib-env" --list 2>/dev/null | grep -qw Hopper-v4 ||
  { echo "test_bench_modes_mujoco: this build has no Hopper-v4 (MuJoCo): skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-bench-modes-mj-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_bench_modes_mujoco: FAILED: $*" >&2; exit 1; }

msg=$("$bm" --env Hopper-v4 --no-build --out "$tmp/x" 2>&1) && fail "--env without --mujoco accepted"
[ "$msg" = "scripts/bench modes: --env and --preset choose the MuJoCo configuration: give them with --mujoco" ] ||
  fail "--env without --mujoco: $msg"

out=$tmp/out
"$bm" --mujoco --preset "$preset" --observers 2 --seeds 1 --max-seconds 5 --no-build --out "$out" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; fail "scripts/bench modes --mujoco exited non-zero"; }
[ "$(($(wc -l <"$out/results.csv") - 1))" -eq 4 ] || { cat "$tmp/log"; fail "results.csv: want 4 rows"; }
[ "$(awk -F, 'NR > 1 { print $6 }' "$out/results.csv" | tr '\n' ' ')" = "sync sync-overlap async async-vtrace " ] ||
  fail "results.csv: the modes"
# sync-overlap ran sync with --overlap (its legend has the lag, which a sync
# run without overlap does not report)
for m in sync sync-overlap; do
  log=$(awk -F, -v m=$m 'NR > 1 && $6 == m { print $39 }' "$out/results.csv")
  grep '^{' "$out/$log" | tail -n 1 | grep -q '"mode":"sync"' || fail "$log: not a sync run"
  lag=0; grep -q 'lag: mean/max policy versions between a rollout and its updates' "$out/$log" && lag=1
  [ $lag = "$([ $m = sync-overlap ] && echo 1 || echo 0)" ] || fail "$log: lag legend $lag for mode $m"
done
awk -F, 'NR > 1 && ($5 != "'"$preset"'" || $13 == "no-summary") { bad = 1 } END { exit bad }' "$out/results.csv" ||
  { cat "$out/results.csv"; fail "results.csv: a row without its preset or summary"; }
while IFS=, read -r log; do
  grep '^{' "$out/$log" | tail -n 1 | grep -q '"env":"Hopper-v4"' || fail "$log: its summary does not name Hopper-v4"
done < <(awk -F, 'NR > 1 { print $39 }' "$out/results.csv")
grep -Eq '^\{"bench":"env_step_times","env":"Hopper-v4","steps":[1-9][0-9]*,.*"mean_us":[0-9.]+,.*"p90_us":[0-9.]+,' \
  "$out/env_step_times.json" || fail "env_step_times.json: $(cat "$out/env_step_times.json")"
grep -qxF "    env: Hopper-v4 (preset $preset, PPO, --target 1e9: every run trains for its whole budget)" "$out/summary.md" ||
  fail "summary.md: no env line"
grep -qxF "# scripts/bench modes: sync vs async on Hopper-v4" "$out/summary.md" || fail "summary.md: title"
grep -qxF "## Which mode wins when env steps cost 0.1-0.3 ms and vary (Hopper-v4)" "$out/summary.md" || fail "summary.md: no MuJoCo section"
grep -Eq '^Measured here .*a step costs [0-9.]+ ms on average.* That is (below|inside|above) the 0.1-0.3 ms of the question' \
  "$out/summary.md" || { cat "$out/summary.md"; fail "summary.md: no step cost in words"; }
# one seed: no spread, so no winner is named (issue 35: one seed's "winner" was noise)
grep -Eq '^- \*\*2 observers: no verdict\*\* \(one seed: no spread to judge a difference by\): sync -?[0-9]+, sync-overlap -?[0-9]+, async -?[0-9]+, async-vtrace -?[0-9]+; .*updates per 1,000 env steps sync [0-9.]+, async [0-9.]+' \
  "$out/summary.md" || { cat "$out/summary.md"; fail "summary.md: no line for 2 observers"; }
grep -Eq '^\*\*No verdict at this step cost\*\*: 1 seed per configuration gives no spread to judge a difference by; run with --seeds 3 or more' \
  "$out/summary.md" || { cat "$out/summary.md"; fail "summary.md: no verdict line"; }
grep -Eq '^## Which mode won|solved in no run' "$out/summary.md" && fail "summary.md: CartPole wording"
grep -qxF "    PPO minibatches: $preset's 4, which every observer count divides: an async update has sync's samples" "$out/summary.md" ||
  { cat "$out/machine.txt"; fail "machine.txt: no line on PPO's minibatches"; }
for png in sps_vs_observers return_vs_time lag_hist_async; do
  [ "$(head -c 8 "$out/$png.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png.png missing or not a PNG"
done
# a sweep without async (--modes sync-overlap, say) still draws its plots:
# the empty lag panel says so (gnuplot refused it: "all points y value undefined")
mkdir "$tmp/noasync" && cp -r "$out/runs" "$out/machine.txt" "$out/env_step_times.json" "$tmp/noasync/"
awk -F, 'NR == 1 || ($6 != "async" && $6 != "async-vtrace")' "$out/results.csv" >"$tmp/noasync/results.csv"
"$bm" summarize "$tmp/noasync" >"$tmp/noasync.log" 2>&1 || { cat "$tmp/noasync.log"; fail "summarize without async rows failed"; }
[ "$(head -c 8 "$tmp/noasync/lag_hist_async.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "no lag panel without async"
echo "test_bench_modes_mujoco: passed"
