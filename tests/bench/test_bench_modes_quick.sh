#!/usr/bin/env bash
# scripts/bench modes --quick end to end with the binaries of $BUILD_DIR: every
# output file exists and parses (results.csv's header and one row per run,
# summary.csv and summary.md with its reading in words, PNG signatures, a log
# per run). No timing is asserted. The namespace (delay) runs happen only as root with ip netns and
# tc; elsewhere the script skips them with a message and so does this check.
# Exits 77 (skip) without gnuplot.
#   BUILD_DIR=build test_bench_modes_quick.sh PATH/TO/scripts/bench-modes
set -uo pipefail
bm=$1
command -v gnuplot >/dev/null || { echo "test_bench_modes_quick: gnuplot is not installed (scripts/setup installs gnuplot-nox): skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-bench-modes-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_bench_modes_quick: FAILED: $*" >&2; exit 1; }
HEADER=network,delay_ms,delay_method,algo,preset,mode,observers,envs_per_observer,seed,budget_s,exit_code,solved,stopped_by,env_steps,wall_s,proc_s,sps,sps_steady,startup_s,updates,updates_per_s,episodes,return_mean,running_reward,time_to_solve_s,steps_to_solve,lag_mean,lag_p95,lag_max,agent_busy_frac,agent_cpu_frac,rpc_msgs_per_step,rpc_bytes_per_step,wire_pkts_per_step,wire_bytes_per_step,observers_lost,load1,lag_hist,log

out=$tmp/out
start=$(date +%s)
"$bm" --quick --no-build --out "$out" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "scripts/bench modes --quick exited non-zero"; }
echo "test_bench_modes_quick: --quick took $(( $(date +%s) - start )) s"
grep 'skipped' "$tmp/log" || true

# quick: PPO in 3 modes (sync, async, async-vtrace) x observers 2 8 x 1 seed, on loopback.
rows=6 configs=6
[ "$(head -n 1 "$out/results.csv")" = "$HEADER" ] || fail "results.csv: unexpected header"
n=$(($(wc -l <"$out/results.csv") - 1))
[ "$n" -eq "$rows" ] || { cat "$tmp/log"; fail "results.csv: $n rows, want $rows"; }
awk -F, 'NR > 1 && (NF != 39 || $11 !~ /^[0-9]+$/ || $12 !~ /^(true|false)$/ || $17 !~ /^[0-9.e+-]*$/) { print "bad row " NR ": " $0; bad = 1 }
         END { exit bad }' "$out/results.csv" || fail "results.csv: malformed rows"
awk -F, 'NR > 1 && $13 == "no-summary" { print "no summary: " $0; bad = 1 } END { exit bad }' "$out/results.csv" ||
  { cat "$tmp/log"; fail "a run printed no summary"; }
while IFS=, read -r log; do
  [ -s "$out/$log" ] || fail "$log: missing or empty"
done < <(awk -F, 'NR > 1 { print $39 }' "$out/results.csv")

n=$(($(wc -l <"$out/summary.csv") - 1))
[ "$n" -eq "$configs" ] || fail "summary.csv: $n rows, want $configs"
n=$(grep -cE '^\| (loopback|netns)' "$out/summary.md")
[ "$n" -eq "$configs" ] || fail "summary.md: $n table rows, want $configs"
for png in sps_vs_observers return_vs_time lag_hist_async; do
  f=$out/$png.png
  [ -s "$f" ] || fail "$png.png: missing"
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png.png is not a PNG"
done
# the summary answers its question in words: a mode named per configuration
n=$(grep -cE '^- \*\*loopback, PPO, [28] observers: (sync|async|async-vtrace)\*\* ' "$out/summary.md")
[ "$n" -eq 2 ] || { cat "$out/summary.md"; fail "summary.md: $n configurations read in words, want 2"; }
awk -F, 'NR > 1 && $6 !~ /^(sync|async|async-vtrace)$/ { print "bad mode: " $0; bad = 1 } END { exit bad }' \
  "$out/results.csv" || fail "results.csv: a row without its bench mode"
# equal update budgets: ppo-fast's 2 minibatches with 2 observers, 8 with 8
# (every mode), so an async update has the samples of a sync one
grep -qxF "    PPO minibatches: ppo-fast's 2 where the observers divide them, else --minibatches 8 with 8 observers, in every mode: an async update has sync's samples" \
  "$out/summary.md" || { cat "$out/machine.txt"; fail "machine.txt: PPO's minibatches"; }
for m in sync async async-vtrace; do
  head -n 1 "$out/runs/loopback-ppo-$m-o8-s1.log" | grep -q "4 epochs x 8 minibatches" || fail "$m, 8 observers: not 8 minibatches"
  head -n 1 "$out/runs/loopback-ppo-$m-o2-s1.log" | grep -q "4 epochs x 2 minibatches" || fail "$m, 2 observers: not 2 minibatches"
done
echo "test_bench_modes_quick: passed ($rows runs)"
