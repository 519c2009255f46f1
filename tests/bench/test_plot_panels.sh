#!/usr/bin/env bash
# scripts/plot (the grid of panels) as a person reads it, checked on the
# panels it says it drew ("scripts/plot: panel N: COLUMN vs AXIS: ...; x
# ticks: ...; y ticks: ...; y off the panel: B below, A above"):
#  - a real run (CartPole ppo-fast, sync, a few seconds, --eval-every) gets
#    its eval_return panel, and no empty panel: no policy lag (sync), no
#    running reward; the PNG's height is the rows drawn;
#  - every axis's tick labels are short (250k, 1M: no "1e+06", no run
#    of digits), at most 7, increasing, and spaced wider than the widest
#    label at 8 px a character and a 12 px gap;
#  - recorded runs: 1M env steps ticked 0 200k 400k 600k 800k 1M; a first
#    value loss 1000 times the rest is off the panel (said in the line) and
#    the rest fills it; an async run's policy lag gets its panel.
# Exits 77 (skip) without gnuplot.
#   test_plot_panels.sh PATH/TO/scripts/plot PATH/TO/tributary-train
set -uo pipefail
plot=$1 train=$2
command -v gnuplot >/dev/null || { echo "test_plot_panels: gnuplot is not installed: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-plot-panels-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_plot_panels: FAILED: $*" >&2; [ ! -f "$tmp/log" ] || cat "$tmp/log" >&2; exit 1; }

# png_size FILE: "WIDTHxHEIGHT" from the PNG's IHDR
png_size() {
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || { echo "not a PNG"; return; }
  local h; h=$(head -c 24 "$1" | tail -c 8 | od -An -tx1 | tr -d ' \n')
  echo "$((16#${h:0:8}))x$((16#${h:8:8}))"
}

# check_ticks: every panel line of $tmp/log: its x and y tick labels short,
# 2..7 of them, increasing, and as far apart as the line says, wider than
# the widest label
check_ticks() {
  local line n=0
  while IFS= read -r line; do
    n=$((n + 1))
    local ax
    for ax in x y; do
      local part labels px wide
      part=$(sed -n "s/.*; $ax ticks: \([^;]*\) (\([0-9]*\) px apart, widest \([0-9]*\) chars).*/\1|\2|\3/p" <<<"$line")
      [ -n "$part" ] || fail "no $ax ticks in: $line"
      IFS='|' read -r labels px wide <<<"$part"
      awk -v labels="$labels" -v px="$px" -v wide="$wide" -v ax="$ax" '
        function val(s, m) {
          m = 1
          if (s ~ /k$/) m = 1e3; else if (s ~ /M$/) m = 1e6; else if (s ~ /G$/) m = 1e9
          sub(/[kMG]$/, "", s)
          return s * m
        }
        BEGIN {
          n = split(labels, l, " ")
          if (n < 2 || n > 7) { print ax " ticks: " n " labels: " labels; exit 1 }
          w = 0
          for (i = 1; i <= n; i++) {
            if (l[i] !~ /^-?[0-9]+(\.[0-9]+)?[kMG]?$/ || length(l[i]) > 6) { print ax " label \"" l[i] "\""; exit 1 }
            if (length(l[i]) > w) w = length(l[i])
            if (i > 1 && !(val(l[i]) > val(l[i - 1]))) { print ax " labels not increasing: " labels; exit 1 }
          }
          if (w != wide) { print ax " widest " w ", said " wide; exit 1 }
          if (ax == "x" && px < 8 * w + 12) { print "x labels " px " px apart, " w " chars wide: " labels; exit 1 }
          if (ax == "y" && px < 24) { print "y labels " px " px apart: " labels; exit 1 }
        }' || fail "ticks overlap or read badly: $line"
    done
  done < <(grep '^scripts/plot: panel ' "$tmp/log")
  [ $n -gt 0 ] || fail "no panel lines"
}

# panels: the "COLUMN vs AXIS" of each panel line, one a line
panels() { sed -n 's/^scripts\/plot: panel [0-9]*: \([^:]*\): .*/\1/p' "$tmp/log"; }

# 1. a real sync run with evaluations
"$train" --preset ppo-fast --max-steps 40000 --eval-every 20 --eval-episodes 3 --log-every 0.2 \
  --logdir "$tmp/sync" --quiet >"$tmp/train.log" 2>&1
rc=$?
[ $rc -le 1 ] || { cat "$tmp/train.log"; fail "tributary-train exited $rc"; }
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "eval_return") c = i } NR > 1 && $c != "" { n++ }
         END { exit !(n >= 2) }' "$tmp/sync/metrics.csv" || fail "the run logged fewer than 2 evaluations"
"$plot" -o "$tmp/sync.png" "$tmp/sync" >"$tmp/log" 2>&1 || fail "plot exited non-zero"
cat >"$tmp/want" <<W
return_mean vs env steps
eval_return vs env steps
return_mean vs wall
sps vs env steps
policy_loss vs env steps
value_loss vs env steps
entropy vs env steps
approx_kl vs env steps
explained_variance vs env steps
W
panels | diff "$tmp/want" - || fail "the sync run's panels"
grep -qxF "scripts/plot: wrote $tmp/sync.png (9 panels, 1500 x 1210)" "$tmp/log" || fail "no 'wrote' line of 9 panels"
grep -qxF "scripts/plot: left out (no run has data): running_reward lag_mean" "$tmp/log" || fail "the left-out panels"
[ "$(png_size "$tmp/sync.png")" = 1500x1210 ] || fail "sync.png is $(png_size "$tmp/sync.png")"
check_ticks

# 2. recorded runs: 1M env steps, a first value loss 1000 times the rest, policy lag
rec() {   # rec DIR LAG: 51 rows over 1M env steps
  mkdir -p "$1"
  awk -v lag="$2" 'BEGIN {
    print "env_steps,wall_s,return_mean,value_loss,lag_mean"
    for (i = 0; i <= 50; i++)
      printf "%d,%g,%g,%g,%s\n", i * 20000, i * 30, 10 * i, i == 0 ? 4000 : 2 + (i % 3) * 0.5, lag ? 3 + i % 2 : ""
  }' >"$1/metrics.csv"
}
rec "$tmp/mj-sync" 0
rec "$tmp/mj-async" 1
"$plot" -o "$tmp/mj.png" "$tmp/mj-sync" "$tmp/mj-async" >"$tmp/log" 2>&1 || fail "plot of the recorded runs exited non-zero"
printf '%s\n' "return_mean vs env steps" "return_mean vs wall" "value_loss vs env steps" "lag_mean vs env steps" \
  | diff - <(panels) || fail "the recorded runs' panels"
[ "$(png_size "$tmp/mj.png")" = 1500x820 ] || fail "mj.png is $(png_size "$tmp/mj.png") (2 rows: 1500x820)"
check_ticks
grep -q '^scripts/plot: panel 1: return_mean vs env steps: 2 of 2 runs; x ticks: 0 200k 400k 600k 800k 1M (' "$tmp/log" \
  || fail "1M env steps not ticked 0 200k .. 1M"
grep -q '^scripts/plot: panel 2: return_mean vs wall: 2 of 2 runs; x ticks: 0 5 10 15 20 25 (' "$tmp/log" \
  || fail "1500 s of wall time not ticked in minutes 0 5 .. 25"
vl=$(grep '^scripts/plot: panel 3: value_loss' "$tmp/log")
[[ $vl == *"y off the panel: 0 below, 2 above" ]] || fail "the first value losses are not said to be off the panel: $vl"
ymax=$(sed -n 's/.*; y ticks: \([^(]*\) (.*/\1/p' <<<"$vl" | awk '{ print $NF }')
awk -v m="$ymax" 'BEGIN { exit !(m >= 2.5 && m <= 5) }' || fail "the value loss panel's top tick is $ymax, not in 2.5..5: $vl"
echo "test_plot_panels: passed"
