#!/usr/bin/env bash
# scripts/plot on a two-run fixture: the PNG exists and starts with the PNG
# signature; by default it goes next to the first run, the 9 panels with
# data in 3 rows (eval_return and running_reward left out), each panel's runs
# counted; a missing file and a missing column fail with their messages.
# Exits 77 (skip) without gnuplot.
#   test_plot.sh PATH/TO/scripts/plot
set -euo pipefail
plot=$1
command -v gnuplot >/dev/null || { echo "test_plot: gnuplot is not installed: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-plot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_plot: FAILED: $*" >&2; exit 1; }

mkdir "$tmp/sync" "$tmp/async"
for run in sync async; do
  {
    echo "env_steps,wall_s,return_mean,policy_lag"
    for i in $(seq 0 20); do
      echo "$((i * 500)),$i.5,$((i * i + ${#run})),"
    done
    echo "11000,22.5,,3"   # "not applicable" return: skipped
  } >"$tmp/$run/metrics.csv"
done
"$plot" -o "$tmp/out.png" "$tmp/sync" "$tmp/async/" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "plot exited non-zero"; }
[ -s "$tmp/out.png" ] || fail "no out.png"
[ "$(head -c 8 "$tmp/out.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "out.png is not a PNG"

# the learning signals in panels; by default the PNG goes next to the first run
{
  echo "env_steps,wall_s,sps,return_mean,policy_loss,value_loss,entropy,approx_kl,explained_variance,lag_mean"
  for i in $(seq 1 20); do echo "$((i * 500)),$i.5,$((1000 + i)),$((i * 3)),0.0$i,$i.5,0.6,0.00$i,0.$i,$((i % 5))"; done
} >"$tmp/async/metrics.csv"
(cd "$tmp" && "$plot" sync async) >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "plot exited non-zero"; }
grep -qxF "scripts/plot: wrote sync/plot.png (9 panels, 1500 x 1210)" "$tmp/log" || { cat "$tmp/log"; fail "not written next to the run"; }
[ "$(head -c 8 "$tmp/sync/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "plot.png is not a PNG"
# 1500 x 1210: 9 panels with data, 3 rows of 3 (IHDR width and height, bytes 17-24)
[ "$(head -c 24 "$tmp/sync/plot.png" | tail -c 8 | od -An -tx1 | tr -d ' \n')" = 000005dc000004ba ] || fail "not 1500x1210"
for want in "panel 1: return_mean vs env steps: 2 of 2 runs" "panel 2: return_mean vs wall: 2 of 2 runs" \
            "panel 3: sps vs env steps: 1 of 2 runs" "panel 4: policy_loss vs env steps: 1 of 2 runs" \
            "panel 5: value_loss vs env steps: 1 of 2 runs" "panel 6: entropy vs env steps: 1 of 2 runs" \
            "panel 7: approx_kl vs env steps: 1 of 2 runs" "panel 8: explained_variance vs env steps: 1 of 2 runs" \
            "panel 9: lag_mean vs env steps: 1 of 2 runs"; do
  grep -qF "scripts/plot: $want; x ticks: " "$tmp/log" || { cat "$tmp/log"; fail "want: $want"; }
done
grep -qxF "scripts/plot: left out (no run has data): eval_return running_reward" "$tmp/log" || { cat "$tmp/log"; fail "left out"; }

expect_error() {
  local want=$1; shift
  if "$plot" -o "$tmp/bad.png" "$@" >"$tmp/log" 2>&1; then fail "plot $* succeeded"; fi
  grep -qxF "$want" "$tmp/log" || { cat "$tmp/log"; fail "want the message: $want"; }
}
expect_error "scripts/plot: $tmp/none/metrics.csv: no such file" "$tmp/sync" "$tmp/none"
mkdir "$tmp/nowall"
printf 'env_steps,return_mean\n1,2\n' >"$tmp/nowall/metrics.csv"
expect_error "scripts/plot: $tmp/nowall/metrics.csv: no column 'wall_s' (columns: env_steps,return_mean)" "$tmp/nowall"
[ ! -e "$tmp/bad.png" ] || fail "a failed plot left bad.png"
echo "test_plot: passed"
