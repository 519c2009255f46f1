#!/usr/bin/env bash
# scripts/bench modes' parsing and aggregation on recorded inputs: CSV rows
# from recorded run outputs and what the sweep measured (solved, with RPC traffic, out of budget, no summary
# line, an older summary without lag p95/histogram/busy fraction/RPC traffic, a histogram without p95),
# return-vs-time points from progress lines, and medians over seeds with
# unsolved seeds (summary.csv, summary.md). No training runs here.
#   test_bench_modes_parse.sh PATH/TO/scripts/bench-modes
set -uo pipefail
bm=$1
fx=$(cd "$(dirname "$0")/fixtures" && pwd)
tmp=$(mktemp -d /tmp/trib-bench-modes-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "test_bench_modes_parse: FAILED: $*" >&2; failures=$((failures + 1)); }
expect_eq() {   # NAME WANT GOT
  [ "$2" = "$3" ] || fail "$1:"$'\n'"  want: $2"$'\n'"  got:  $3"
}
HEADER=network,delay_ms,delay_method,algo,preset,mode,observers,envs_per_observer,seed,budget_s,exit_code,solved,stopped_by,env_steps,wall_s,proc_s,sps,sps_steady,startup_s,updates,updates_per_s,episodes,return_mean,running_reward,time_to_solve_s,steps_to_solve,lag_mean,lag_p95,lag_max,agent_busy_frac,agent_cpu_frac,rpc_msgs_per_step,rpc_bytes_per_step,wire_pkts_per_step,wire_bytes_per_step,observers_lost,load1,lag_hist,log

# ---- one CSV row per run

got=$("$bm" parse-run "$fx/ppo-sync-solved.log" network=loopback delay_ms=0 delay_method=loopback algo=ppo \
  preset=ppo-fast mode=sync observers=1 seed=1 budget_s=12 exit_code=0 proc_s=16.4 agent_cpu_s=4.1 load1=3.5 log=runs/a.log)
expect_eq "solved PPO run" \
  "loopback,0,loopback,ppo,ppo-fast,sync,1,32,1,12,0,true,solved,163840,16.2002,16.4,10113.5,10312.1,2,2560,158.023,655,476.11,,16.2002,163840,3.5,7,7,0.133133,0.250,0.230713,203.639,,,0,3.5,320;320;320;320;320;320;320;320,runs/a.log" "$got"

got=$("$bm" parse-run "$fx/reinforce-async-budget.log" network=netns-10ms delay_ms=10 delay_method=tun algo=reinforce \
  preset=pytorch-rl-example mode=async observers=2 seed=1 budget_s=4 exit_code=1 proc_s=5.2 load1=7.1 log=runs/b.log \
  wire_bytes=1000000 wire_pkts=7960)
expect_eq "REINFORCE out of budget, wire counters" \
  "netns-10ms,10,tun,reinforce,pytorch-rl-example,async,2,1,1,4,1,false,budget,3980,1.52781,5.2,2605.04,2748.0,0.5,95,62.1805,95,41.8947,68.8337,,,0.894737,3,7,0.0244387,,,,2.000,251.3,0,7.1,41;37;10;4;1;1;0;1,runs/b.log" "$got"

got=$("$bm" parse-run "$fx/no-summary.log" network=loopback delay_ms=0 delay_method=loopback algo=ppo \
  preset=ppo-fast mode=async observers=4 seed=2 budget_s=12 exit_code=124 proc_s=72.1 load1=0.5 log=runs/c.log)
expect_eq "run without a summary" \
  "loopback,0,loopback,ppo,ppo-fast,async,4,,2,12,124,false,no-summary,,,72.1,,,0.5,,,,,,,,,,,,,,,,,,0.5,,runs/c.log" "$got"

got=$("$bm" parse-run "$tmp/does-not-exist.log" network=loopback delay_ms=0 delay_method=loopback algo=reinforce \
  preset=pytorch-rl-example mode=sync observers=1 seed=1 budget_s=12 exit_code=127 proc_s=0.01 load1=1 log=runs/x.log)
expect_eq "run without a log" \
  "loopback,0,loopback,reinforce,pytorch-rl-example,sync,1,,1,12,127,false,no-summary,,,0.01,,,,,,,,,,,,,,,,,,,,,1,,runs/x.log" "$got"

got=$("$bm" parse-run "$fx/old-format.log" network=loopback delay_ms=0 delay_method=loopback algo=reinforce \
  preset=pytorch-rl-example mode=sync observers=4 seed=2 budget_s=12 exit_code=1 proc_s=12.9 load1=2 log=runs/d.log)
expect_eq "summary without lag p95, histogram and busy fraction" \
  "loopback,0,loopback,reinforce,pytorch-rl-example,sync,4,1,2,12,1,false,budget,38929,12.3585,12.9,3149.99,,2,72,5.82597,288,257,155.177,,,0,,0,,,,,,,0,2,,runs/d.log" "$got"

got=$("$bm" parse-run "$fx/hist-no-p95.log" network=netns-0ms delay_ms=0 delay_method=netem algo=ppo \
  preset=ppo-fast mode=async observers=2 seed=3 budget_s=4 exit_code=130 proc_s=1.0 load1=1 log=runs/e.log \
  wire_bytes=0 wire_pkts=0)
expect_eq "p95 from the histogram, null return" \
  "netns-0ms,0,netem,ppo,ppo-fast,async,2,32,3,4,130,false,signal,2048,0.9,1.0,2275.56,,,20,22.2,0,,,,,1.1,3,4,0.05,,,,0.000,0.0,1,1,10;5;3;1;1,runs/e.log" "$got"

# Every row has the header's 36 columns.
for f in ppo-sync-solved reinforce-async-budget no-summary old-format hist-no-p95; do
  n=$("$bm" parse-run "$fx/$f.log" network=loopback | awk -F, '{ print NF }')
  expect_eq "$f: columns" 39 "$n"
done

# ---- return vs wall time from progress lines

expect_eq "progress, running reward" $'0.5 33.84\n1.0 48.84\n1.5 68.83\n1.5 68.83' "$("$bm" progress "$fx/reinforce-async-budget.log")"
expect_eq "progress, return" "0.5 21.50" "$("$bm" progress "$fx/no-summary.log")"
expect_eq "progress, no episode yet" "" "$("$bm" progress "$fx/hist-no-p95.log")"
expect_eq "steady: start-up and steps/s after it" "2 10312.1" "$("$bm" steady "$fx/ppo-sync-solved.log")"
expect_eq "steady: one line with steps" "0.5" "$("$bm" steady "$fx/no-summary.log")"
expect_eq "steady: no steps" "" "$("$bm" steady "$fx/hist-no-p95.log")"

# ---- return vs wall time from --logdir's metrics.csv when the run has one
mkdir -p "$tmp/runs/r1"
cp "$fx/reinforce-async-budget.log" "$tmp/runs/r1.log"
printf 'env_steps,wall_s,sps,episodes,return_mean,running_reward\n801,0.5031,1591.9,42,19.07,9.40\n0,1.0,0,0,,\n2365,1.0072,3102.5,82,28.84,24.10\n' \
  >"$tmp/runs/r1/metrics.csv"
expect_eq "returns from metrics.csv" $'0.50 19.07\n1.01 28.84' "$("$bm" returns "$tmp/runs/r1.log")"
expect_eq "returns from progress lines" "0.5 21.50" "$("$bm" returns "$fx/no-summary.log")"

# ---- medians over seeds

# mkrow KEY=VALUE...: a results.csv row, empty where not given.
mkrow() { awk -v h="$HEADER" 'BEGIN { n = split(h, c, ","); for (i = 1; i < ARGC; i++) { e = index(ARGV[i], "="); v[substr(ARGV[i], 1, e - 1)] = substr(ARGV[i], e + 1) }
                                     for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? "," : ""), v[c[i]]; printf "\n" }' "$@"; }
lp="network=loopback delay_ms=0 delay_method=loopback preset=ppo-fast envs_per_observer=32 budget_s=12"
ns="network=netns-10ms delay_ms=10 delay_method=tun preset=pytorch-rl-example envs_per_observer=1 budget_s=4"
mkdir "$tmp/r"
{
  echo "$HEADER"
  # 2 of 3 seeds solved: the median time and steps are the slower solved seed's.
  mkrow $lp algo=ppo mode=sync observers=1 seed=1 solved=true time_to_solve_s=10 steps_to_solve=100000 sps=100 sps_steady=180 startup_s=1 updates_per_s=5 return_mean=480 lag_mean=3.5 lag_p95=7 lag_max=7 agent_busy_frac=0.1 agent_cpu_frac=0.5 rpc_msgs_per_step=0.2 rpc_bytes_per_step=200
  mkrow $lp algo=ppo mode=sync observers=1 seed=2 solved=true time_to_solve_s=20 steps_to_solve=200000 sps=300 sps_steady=200 startup_s=2 updates_per_s=7 return_mean=476 lag_mean=3.5 lag_p95=7 lag_max=7 agent_busy_frac=0.3 agent_cpu_frac=0.7 rpc_msgs_per_step=0.4 rpc_bytes_per_step=400
  mkrow $lp algo=ppo mode=sync observers=1 seed=3 solved=false sps=200 sps_steady=190 startup_s=1.5 updates_per_s=6 return_mean=300 lag_mean=3.5 lag_p95=7 lag_max=7 agent_busy_frac=0.2 agent_cpu_frac=0.6 rpc_msgs_per_step=0.3 rpc_bytes_per_step=250
  # 1 of 3 solved: not solved.
  mkrow $lp algo=ppo mode=async observers=1 seed=1 solved=true time_to_solve_s=5 steps_to_solve=50000 sps=10 return_mean=490 lag_mean=4 lag_p95=8 lag_max=9
  mkrow $lp algo=ppo mode=async observers=1 seed=2 solved=false sps=30 return_mean=100 lag_mean=5 lag_p95=9 lag_max=20
  mkrow $lp algo=ppo mode=async observers=1 seed=3 solved=false stopped_by=no-summary
  # 2 seeds, both solved: the mean of the two; lag max is the largest.
  mkrow $ns algo=reinforce mode=async observers=2 seed=1 solved=true time_to_solve_s=4 steps_to_solve=40 sps=100 running_reward=480 lag_mean=1 lag_p95=2 lag_max=5 wire_bytes_per_step=100.0 wire_pkts_per_step=2.000
  mkrow $ns algo=reinforce mode=async observers=2 seed=2 solved=true time_to_solve_s=6 steps_to_solve=60 sps=200 running_reward=490 lag_mean=2 lag_p95=3 lag_max=9 wire_bytes_per_step=300.0 wire_pkts_per_step=4.000
  # 2 seeds, one unsolved: not solved.
  mkrow $ns algo=reinforce mode=sync observers=2 seed=1 solved=true time_to_solve_s=4 steps_to_solve=40 sps=50 running_reward=480
  mkrow $ns algo=reinforce mode=sync observers=2 seed=2 solved=false sps=70 running_reward=20
} >"$tmp/r/results.csv"
"$bm" summarize "$tmp/r" --no-plots || fail "summarize exited non-zero"
expect_eq "summary.csv" "network,delay_ms,delay_method,algo,preset,mode,observers,envs_per_observer,budget_s,runs,solved,sps,sps_steady,startup_s,updates_per_s,time_to_solve_s,steps_to_solve,return_mean,running_reward,lag_mean,lag_p95,lag_max,agent_busy_frac,agent_cpu_frac,rpc_msgs_per_step,rpc_bytes_per_step,wire_bytes_per_step,wire_pkts_per_step
loopback,0,loopback,ppo,ppo-fast,sync,1,32,12,3,2,200,190,1.5,6,20,200000,476,,3.5,7,7,0.2,0.6,0.3,250,,
loopback,0,loopback,ppo,ppo-fast,async,1,32,12,3,1,20,,,,,,295,,4.5,8.5,20,,,,,,
netns-10ms,10,tun,reinforce,pytorch-rl-example,async,2,1,4,2,2,150,,,,5,50,,485,1.5,2.5,9,,,,,200,3
netns-10ms,10,tun,reinforce,pytorch-rl-example,sync,2,1,4,2,1,60,,,,,,,250,,,,,,,,," "$(cat "$tmp/r/summary.csv")"
expect_eq "summary.md rows" "| loopback | ppo | sync | 1 | 200 | 190 | 1.5 | 6.0 | 2/3 | 20.0 | 200000 | 476 | 3.5 / 7 / 7 | 20% | 60% | 0.30 | 250 | - | - |
| loopback | ppo | async | 1 | 20 | - | - | - | 1/3 | not solved | not solved | 295 | 4.5 / 8 / 20 | - | - | - | - | - | - |
| netns-10ms | reinforce | async | 2 | 150 | - | - | - | 2/2 | 5.0 | 50 | - (running 485) | 1.5 / 2 / 9 | - | - | - | - | 200 | 3.00 |
| netns-10ms | reinforce | sync | 2 | 60 | - | - | - | 1/2 | not solved | not solved | - (running 250) | - / - / - | - | - | - | - | - | - |" \
  "$(grep -E '^\| (loopback|netns)' "$tmp/r/summary.md")"
expect_eq "summary.md pivot" "| algo | mode | obs | loopback | netns-10ms |
|---|---|--:|--:|--:|
| ppo | sync | 1 | 190 | - |
| ppo | async | 1 | - | - |
| reinforce | async | 2 | - | - |
| reinforce | sync | 2 | - | - |
| algo | mode | obs | loopback | netns-10ms |
|---|---|--:|--:|--:|
| ppo | sync | 1 | 200 | - |
| ppo | async | 1 | 20 | - |
| reinforce | async | 2 | - | 150 |
| reinforce | sync | 2 | - | 60 |" "$(sed -n '/^| algo | mode | obs |/,/^$/p' "$tmp/r/summary.md" | sed '/^$/d')"
grep -q "RPC msgs/step, B/step: messages and bytes" "$tmp/r/summary.md" || fail "summary.md does not explain the RPC columns"

# ---- the MuJoCo verdict: mean +- std over seeds, Welch's t-test at 95%

# mj_dir DIR ROWS...: a MuJoCo sweep's folder (machine.txt naming Hopper-v4,
# the step times) whose results.csv has ROWS ("MODE OBSERVERS RETURN
# UPDATES_PER_S", seeds counted per mode and count), summarized.
mj_dir() {
  local d=$1 mode obs ret ups seed; shift
  mkdir -p "$d"
  echo "env: Hopper-v4 (preset mujoco-fast, PPO, --target 1e9: every run trains for its whole budget)" >"$d/machine.txt"
  cp "$fx/hopper-step-times.json" "$d/env_step_times.json"
  declare -A seeds=()
  {
    echo "$HEADER"
    for r in "$@"; do
      read -r mode obs ret ups <<<"$r"
      seed=$(( ${seeds[$mode$obs]:-0} + 1 )); seeds[$mode$obs]=$seed
      mkrow network=loopback delay_ms=0 delay_method=loopback algo=ppo preset=mujoco-fast envs_per_observer=8 budget_s=60 \
        mode="$mode" observers="$obs" seed="$seed" solved=false return_mean="$ret" sps=4000 sps_steady=4100 updates_per_s="$ups"
    done
  } >"$d/results.csv"
  "$bm" summarize "$d" --no-plots || fail "summarize $d exited non-zero"
}
verdicts() { grep -E '^(- \*\*|\*\*)' "$1/summary.md"; }

# 2 observers: sync far above the others (a real difference); 4: all
# within each other's spread (no difference). 31.25 updates/s at 4000 env
# steps/s: 7.81 updates per 1,000 env steps in every mode (equal budgets).
mj_dir "$tmp/mj" "sync 2 1500 31.25" "sync 2 1520 31.25" "sync 2 1480 31.25" \
  "async 2 900 31.25" "async 2 950 31.25" "async 2 870 31.25" "async-vtrace 2 800 31.25" "async-vtrace 2 820 31.25" "async-vtrace 2 790 31.25" \
  "sync 4 800 31.25" "sync 4 1000 31.25" "sync 4 900 31.25" "async 4 850 31.25" "async 4 950 31.25" "async 4 700 31.25" \
  "async-vtrace 4 880 31.25" "async-vtrace 4 820 31.25" "async-vtrace 4 990 31.25"
expect_eq "MuJoCo: a difference at 2 observers, none at 4" \
"- **2 observers: sync** ended highest beyond the seeds' spread: sync 1500 ± 20, async 907 ± 40, async-vtrace 803 ± 15 (over async t 22.8, df 2.9, critical 4.30; over async-vtrace t 47.9, df 3.7, critical 3.18); steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
- **4 observers: no difference**: sync 900 ± 100, async 833 ± 126, async-vtrace 897 ± 86; the highest mean (sync) is within the spread of async-vtrace (t 0.0 below 3.18 at df 3.9); steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
**At this step cost, no single mode wins** (Welch's t-test, 95%, over 3 seeds): sync at 2 observers, no difference at 4 observers; async stepped 1.00x the steady env steps/s of sync on average over the observer counts." \
  "$(verdicts "$tmp/mj")"
# no CartPole wording in a MuJoCo summary
grep -qE 'solved in no run|solved fastest|mean return of 475|^## Which mode won' "$tmp/mj/summary.md" &&
  fail "MuJoCo summary.md: CartPole wording: $(grep -E 'solved in no run|solved fastest|mean return of 475|^## Which mode won' "$tmp/mj/summary.md")"
grep -qxF "Hopper-v4 runs have --target 1e9: none is solved (the table's solved and time-to-solve columns do" "$tmp/mj/summary.md" ||
  fail "MuJoCo summary.md: no word on the target"

# every count with no difference, one seed's spread far wider than the gap
mj_dir "$tmp/mj-same" "sync 2 1000 31.25" "sync 2 1400 31.25" "sync 2 600 31.25" "async 2 1100 31.25" "async 2 700 31.25" "async 2 1300 31.25"
expect_eq "MuJoCo: no difference anywhere" \
"- **2 observers: no difference**: sync 1000 ± 400, async 1033 ± 306; the highest mean (async) is within the spread of sync (t 0.1 below 3.18 at df 3.7); steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
**At this step cost, no mode wins**: no difference in return at equal wall time beyond the seeds' spread (Welch's t-test, 95%, over 3 seeds) at the one observer count; async stepped 1.00x the steady env steps/s of sync on average over the observer counts." \
  "$(verdicts "$tmp/mj-same")"

# async above sync at both counts, beyond the spread; async made twice the
# updates per sample at 4 observers (unequal budgets, said)
mj_dir "$tmp/mj-async" "sync 2 1000 31.25" "sync 2 1010 31.25" "sync 2 990 31.25" "async 2 2000 31.25" "async 2 2010 31.25" "async 2 1990 31.25" \
  "sync 4 1000 31.25" "sync 4 1010 31.25" "sync 4 990 31.25" "async 4 2000 62.5" "async 4 2010 62.5" "async 4 1990 62.5"
expect_eq "MuJoCo: async wins everywhere" \
"- **2 observers: async** ended highest beyond the seeds' spread: sync 1000 ± 10, async 2000 ± 10 (over sync t 122.5, df 4.0, critical 2.78); steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
- **4 observers: async** ended highest beyond the seeds' spread: sync 1000 ± 10, async 2000 ± 10 (over sync t 122.5, df 4.0, critical 2.78); steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 62.5; updates per 1,000 env steps sync 7.81, async 15.62 (unequal update budgets: async made 2.00x sync's updates per sample).
**At this step cost, async wins**: a higher mean return at equal wall time than every other mode beyond the seeds' spread (Welch's t-test, 95%, over 3 seeds) at all 2 observer counts; async stepped 1.00x the steady env steps/s of sync on average over the observer counts." \
  "$(verdicts "$tmp/mj-async")"

# sync with --overlap (the MuJoCo configuration's fourth mode) above the
# others beyond the spread: the verdict names it, its steps/s beside sync's
mj_dir "$tmp/mj-overlap" "sync 2 1000 31.25" "sync 2 1010 31.25" "sync 2 990 31.25" \
  "sync-overlap 2 2000 31.25" "sync-overlap 2 2010 31.25" "sync-overlap 2 1990 31.25" \
  "async 2 1000 31.25" "async 2 1010 31.25" "async 2 990 31.25"
expect_eq "MuJoCo: sync-overlap wins" \
"- **2 observers: sync-overlap** ended highest beyond the seeds' spread: sync 1000 ± 10, sync-overlap 2000 ± 10, async 1000 ± 10 (over sync t 122.5, df 4.0, critical 2.78; over async t 122.5, df 4.0, critical 2.78); steady env steps/s sync 4100, async 4100 (async 1.00x sync), sync-overlap 4100 (1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
**At this step cost, sync-overlap wins**: a higher mean return at equal wall time than every other mode beyond the seeds' spread (Welch's t-test, 95%, over 3 seeds) at the one observer count; async stepped 1.00x the steady env steps/s of sync on average over the observer counts." \
  "$(verdicts "$tmp/mj-overlap")"

# one seed: no spread, no verdict (was: whichever escaped Hopper's plateau first "won")
mj_dir "$tmp/mj-one" "sync 2 1000 31.25" "async 2 1200 31.25" "async-vtrace 2 900 31.25"
expect_eq "MuJoCo: one seed" \
"- **2 observers: no verdict** (one seed: no spread to judge a difference by): sync 1000, async 1200, async-vtrace 900; steady env steps/s sync 4100, async 4100 (async 1.00x sync); updates/s sync 31.2, async 31.2; updates per 1,000 env steps sync 7.81, async 7.81.
**No verdict at this step cost**: 1 seed per configuration gives no spread to judge a difference by; run with --seeds 3 or more; async stepped 1.00x the steady env steps/s of sync on average over the observer counts." \
  "$(verdicts "$tmp/mj-one")"

# ---- --modes: a subset of the configuration's modes; another is refused, naming them
msg=$("$bm" --mujoco --modes "sync foo" --no-build --out "$tmp/modes-bad" 2>&1) && fail "--modes foo accepted"
expect_eq "--modes refused" "scripts/bench modes: --modes: 'foo' is not a mode of this configuration (sync sync-overlap async async-vtrace)" "$msg"
msg=$("$bm" --modes sync-overlap --no-build --out "$tmp/modes-bad" 2>&1) && fail "--modes sync-overlap accepted for CartPole"
expect_eq "--modes sync-overlap without --mujoco" "scripts/bench modes: --modes: 'sync-overlap' is not a mode of this configuration (sync async async-vtrace)" "$msg"
[ -e "$tmp/modes-bad" ] && fail "a refused --modes left its --out folder"

# ---- PPO's --minibatches per observer count: equal update budgets in both modes
for c in "2 512 1=" "2 512 2=" "2 512 4=4" "2 512 8=8" "8 1024 4=" "3 12 2=4" "8 1024 3=" "4 96 8=8"; do
  expect_eq "equal-minibatches ${c%=*}" "${c#*=}" "$("$bm" equal-minibatches ${c%=*})"
done

# A results.csv with another header is refused.
mkdir "$tmp/bad"
echo "network,sps" >"$tmp/bad/results.csv"
msg=$("$bm" summarize "$tmp/bad" --no-plots 2>&1) && fail "summarize accepted a bad header"
expect_eq "bad header message" "scripts/bench modes: $tmp/bad/results.csv: unexpected header" "$msg"

[ $failures -eq 0 ] || { echo "test_bench_modes_parse: $failures failure(s)"; exit 1; }
echo "test_bench_modes_parse: passed"
