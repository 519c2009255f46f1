#!/usr/bin/env bash
# scripts/plot --curves on recorded runs: two envs x two configurations, the
# seeds of each (NAME-sN) one group; the PNG (a row of two panels per env:
# 1400 x 780), the groups and their run counts as printed (a run with no
# returns yet counts in "of N" only), the default output beside the first run's
# folder, each panel's x ticks (env steps as 10k, no run of digits), and the
# messages of a missing file and a missing column. The band's
# arithmetic is checked on a copy of its awk: two runs on different x grids give
# the mean and the population std of the interpolated values.
# Exits 77 (skip) without gnuplot.
#   test_plot_curves.sh PATH/TO/scripts/plot
set -uo pipefail
plot=$1
command -v gnuplot >/dev/null || { echo "test_plot_curves: gnuplot is not installed: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-plot-curves-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_plot_curves: FAILED: $*" >&2; exit 1; }

# run DIR ENV SLOPE: a run's config.json and metrics.csv (first row: no return yet)
run() {
  mkdir -p "$1"
  printf '{\n\t"env":\t"%s",\n\t"preset":\t"x"\n}\n' "$2" >"$1/config.json"
  { echo "env_steps,wall_s,return_mean"; echo "0,0.4,"
    for i in $(seq 1 30); do echo "$((i * 2048)),$i.5,$((i * $3))"; done; } >"$1/metrics.csv"
}
for e in Hopper-v4 Walker2d-v4; do
  for s in 1 2 3; do run "$tmp/$e/mujoco-s$s" "$e" "$s"; run "$tmp/$e/mujoco-fast-s$s" "$e" $((s + 5)); done
done
run "$tmp/Walker2d-v4/mujoco-fast-s4" Walker2d-v4 1   # started, no returns yet
printf 'env_steps,wall_s,return_mean\n0,0.3,\n' >"$tmp/Walker2d-v4/mujoco-fast-s4/metrics.csv"
"$plot" --curves -o "$tmp/c.png" "$tmp"/*/*-s* >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "exited non-zero"; }
[ "$(head -c 8 "$tmp/c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "c.png is not a PNG"
s=$(head -c 24 "$tmp/c.png" | tail -c 8 | od -An -tx1 | tr -d " \n")
[ "$s" = 000005780000030c ] || fail "not 1400x780: $s"
cat >"$tmp/want" <<W
scripts/plot: wrote $tmp/c.png
scripts/plot: Hopper-v4: mujoco-fast: 3 of 3 runs with returns
scripts/plot: Hopper-v4: mujoco: 3 of 3 runs with returns
scripts/plot: Walker2d-v4: mujoco-fast: 3 of 4 runs with returns
scripts/plot: Walker2d-v4: mujoco: 3 of 3 runs with returns
scripts/plot: Hopper-v4: env steps: x ticks: 0 10k 20k 30k 40k 50k 60k (97 px apart, widest 3 chars)
scripts/plot: Hopper-v4: wall time (s): x ticks: 0 5 10 15 20 25 30 (97 px apart, widest 2 chars)
scripts/plot: Walker2d-v4: env steps: x ticks: 0 10k 20k 30k 40k 50k 60k (97 px apart, widest 3 chars)
scripts/plot: Walker2d-v4: wall time (s): x ticks: 0 5 10 15 20 25 30 (97 px apart, widest 2 chars)
W
diff "$tmp/want" "$tmp/log" || fail "unexpected output"
(cd "$tmp" && "$plot" --curves Hopper-v4/mujoco-s1 Hopper-v4/mujoco-s2) >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "exited non-zero"; }
grep -qxF "scripts/plot: wrote Hopper-v4/curves.png" "$tmp/log" || { cat "$tmp/log"; fail "not written beside the first run"; }
[ -s "$tmp/Hopper-v4/curves.png" ] || fail "no Hopper-v4/curves.png"

# the band: run a = (0,0) (10,10) (20,20), run b = (5,0) (15,20) (25,40): over
# [5, 20] (where both have rows); at x = 5: a 5, b 0; at 11: a 11, b 12; at 20: a 20, b 30
awk '/^band\(\) \{/,/^\}/' "$(command -v "$plot" || echo "$plot")" >"$tmp/band.sh"
[ -s "$tmp/band.sh" ] || fail "no band() in scripts/plot"
source "$tmp/band.sh"
printf '0 0\n10 10\n20 20\n' >"$tmp/a"; printf '5 0\n15 20\n25 40\n' >"$tmp/b"
band "$tmp/a" "$tmp/b" >"$tmp/band"
[ "$(wc -l <"$tmp/band")" -eq 201 ] || fail "band: $(wc -l <"$tmp/band") points, want 201"
[ "$(head -n 1 "$tmp/band")" = "5 2.5 2.5 2" ] || fail "band at 5: $(head -n 1 "$tmp/band")"
[ "$(sed -n 81p "$tmp/band")" = "11 11.5 0.5 2" ] || fail "band at 11: $(sed -n 81p "$tmp/band")"
[ "$(tail -n 1 "$tmp/band")" = "20 25 5 2" ] || fail "band at 20: $(tail -n 1 "$tmp/band")"

expect_error() {
  local want=$1; shift
  if "$plot" --curves -o "$tmp/bad.png" "$@" >"$tmp/log" 2>&1; then fail "plot --curves $* succeeded"; fi
  grep -qxF "$want" "$tmp/log" || { cat "$tmp/log"; fail "want the message: $want"; }
}
expect_error "scripts/plot: $tmp/none/metrics.csv: no such file" "$tmp/Hopper-v4/mujoco-s1" "$tmp/none"
mkdir "$tmp/nowall"; printf 'env_steps,return_mean\n1,2\n' >"$tmp/nowall/metrics.csv"
expect_error "scripts/plot: $tmp/nowall/metrics.csv: no column 'wall_s' (columns: env_steps,return_mean)" "$tmp/nowall"
[ ! -e "$tmp/bad.png" ] || fail "a failed plot left bad.png"
echo "test_plot_curves: passed"
