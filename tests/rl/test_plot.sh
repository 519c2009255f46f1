#!/usr/bin/env bash
# scripts/plot on a two-run fixture: the PNG exists and starts with the PNG
# signature; a missing file and a missing column fail with their messages.
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
