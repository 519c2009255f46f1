#!/usr/bin/env bash
# scripts/bench mujoco end to end with the binaries of $BUILD_DIR, tiny: one
# Hopper-v4 seed of 20k steps with PRESET (the argument; a small one), kept
# in --out. Checks the JSON line's fields and their sanity (finite numbers,
# counts as asked, floor_x > 0, the load pair, CleanRL's figures beside), the
# run's files (logdir with metrics.csv and policy.safetensors, the eval's
# JSON, results.jsonl, curves.png when gnuplot is here), and the messages of
# bad usage (an unknown env, a bad --seeds) and of a preset tributary-train
# refuses (exit 1, no line). No timing is asserted. Exits 77 (skip) when
# this build has no Hopper-v4 (no MuJoCo).
#   BUILD_DIR=build test_bench_mujoco_smoke.sh PATH/TO/scripts/bench-mujoco PRESET
set -uo pipefail
bm=$1 preset=$2
fail() { echo "test_bench_mujoco_smoke: FAILED: $*" >&2; exit 1; }
"$BUILD_DIR/envs/trib-env" --list 2>/dev/null | grep -qw Hopper-v4 ||
  { echo "test_bench_mujoco_smoke: this build has no Hopper-v4 (MuJoCo): skipped"; exit 77; }
tmp=$(mktemp -d /tmp/trib-bench-mujoco-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

out=$tmp/out
"$bm" --no-build --env Hopper-v4 --preset "$preset" --seeds 1 --steps 20000 --eval-episodes 3 --floor-steps 8000 --out "$out" \
  >"$tmp/stdout" 2>"$tmp/stderr" || { cat "$tmp/stderr"; fail "exited non-zero"; }
[ "$(wc -l <"$tmp/stdout")" -eq 1 ] || { cat "$tmp/stdout"; fail "want one JSON line on stdout"; }
line=$(cat "$tmp/stdout")
echo "test_bench_mujoco_smoke: $line"
cmp -s "$tmp/stdout" "$out/results.jsonl" || fail "results.jsonl is not the line printed"
grep -q "seed 1/1: training 20000 steps" "$tmp/stderr" || { cat "$tmp/stderr"; fail "no progress on stderr"; }

# every field, in order, each a string as asked or a finite number
re_num='-?[0-9][0-9.e+-]*'   # one group each: awk checks the values
want="^\\{\"bench\":\"mujoco\",\"env\":\"Hopper-v4\",\"preset\":\"$preset\",\"device\":\"cpu\",\"seeds\":1,\"seeds_ok\":1,\"steps\":20000"
want+=",\"env_steps\":($re_num),\"return_mean\":($re_num),\"return_std\":0,\"episodes_judged_min\":([0-9]+)"
want+=",\"eval_return_mean\":($re_num),\"eval_return_std\":0,\"eval_episodes\":3,\"eval_best_return_mean\":null,\"wall_s\":($re_num),\"sps\":($re_num)"
want+=",\"floor_sps_per_core\":($re_num),\"floor_sps_wall\":($re_num),\"floor_x\":($re_num)"
want+=",\"algo_floor_steps\":([0-9]+),\"algo_floor_cpu_s_per_1m\":($re_num),\"x_limit\":($re_num),\"cpu_x\":($re_num),\"cores\":([0-9]+)"
want+=",\"load\":\\[($re_num),($re_num)\\],\"cleanrl_return_mean\":2383,\"cleanrl_return_std\":272,\"cleanrl_wall_s\":1542"
want+=",\"returns\":\\[($re_num)\\],\"eval_returns\":\\[($re_num)\\],\"eval_best_returns\":\\[null\\]\\}$"
[[ $line =~ $want ]] || fail "the line does not have the fields wanted: $line"
m=("${BASH_REMATCH[@]}")
# one seed: its own figures are the means (printed to 6 significant digits)
same6() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(d <= 1e-5 * m + 1e-9) }'; }
same6 "${m[17]}" "${m[2]}" || fail "returns [${m[17]}] is not the one seed's return_mean ${m[2]}"
same6 "${m[18]}" "${m[4]}" || fail "eval_returns [${m[18]}] is not the one seed's eval_return_mean ${m[4]}"
awk -v steps="${m[1]}" -v ret="${m[2]}" -v judged="${m[3]}" -v ev="${m[4]}" -v wall="${m[5]}" -v sps="${m[6]}" -v floor="${m[7]}" -v fx="${m[9]}" \
    -v afs="${m[10]}" -v afc="${m[11]}" -v xl="${m[12]}" -v cx="${m[13]}" \
    -v cores="${m[14]}" -v l0="${m[15]}" -v l1="${m[16]}" -v np="$(nproc)" 'BEGIN {
  bad = ""
  if (steps < 20000) bad = bad " env_steps<20000"
  if (judged < 1) bad = bad " no-episode-judged"
  if (ret != ret + 0 || ev != ev + 0 || ret < -1e6 || ret > 1e6 || ev < -1e6 || ev > 1e6) bad = bad " returns-not-finite"
  if (l0 < 0 || l1 < 0) bad = bad " load<0"
  if (wall <= 0) bad = bad " wall_s<=0"
  if (sps <= 0) bad = bad " sps<=0"
  if (floor <= 0) bad = bad " floor<=0"
  if (fx <= 0) bad = bad " floor_x<=0"
  if (cores != np) bad = bad " cores!=nproc"
  if (afs < 8000) bad = bad " algo_floor_steps<8000"
  if (afc <= 0) bad = bad " algo_floor_cpu<=0"
  if (xl <= 0 || cx <= 0) bad = bad " x_limit/cpu_x<=0"
  # x_limit is the wall against the algo floor one core would take, spread over the cores
  if (afc > 0 && (xl - wall / (afc / 1e6 * steps / cores)) ^ 2 > 1e-2 * xl * xl) bad = bad " x_limit!=wall/(floor*steps/cores)"
  if (sps * 1 > 0 && floor * cores > 0 && (fx - sps / (cores * floor)) ^ 2 > 1e-6) bad = bad " floor_x!=sps/(cores*floor)"
  if (bad != "") { print bad; exit 1 } }' || fail "insane figures in: $line"

d=$out/Hopper-v4/$preset-s1
for f in "$d/metrics.csv" "$d/policy.safetensors" "$d/config.json" "$d.log" "$d.eval.json"; do
  [ -s "$f" ] || fail "$f: missing or empty"
done
grep -q '"episodes":3,"actions":"greedy"' "$d.eval.json" || fail "the eval was not greedy over 3 episodes: $(cat "$d.eval.json")"
if command -v gnuplot >/dev/null; then
  [ "$(head -c 8 "$out/curves.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "curves.png missing or not a PNG"
fi

# an --out that holds a bench's results is refused
msg=$("$bm" --no-build --env Hopper-v4 --preset "$preset" --seeds 1 --steps 20000 --out "$out" 2>&1) && fail "reused --out accepted"
[ "$msg" = "scripts/bench mujoco: $out/results.jsonl exists: choose another --out" ] || fail "reused --out: $msg"
# bad usage: exit 2 before anything runs
msg=$("$bm" --no-build --env Nope-v9 --seeds 1 2>&1); rc=$?
[ $rc -eq 2 ] || fail "an unknown env: exit $rc, want 2 ($msg)"
[[ $msg == "scripts/bench mujoco: --env Nope-v9: "* ]] || fail "an unknown env: $msg"
msg=$("$bm" --no-build --seeds 0 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$msg" = "scripts/bench mujoco: --seeds wants a count in 1..999, not '0'" ] || fail "--seeds 0: exit $rc: $msg"
msg=$("$bm" --no-build --floor-steps -1 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$msg" = "scripts/bench mujoco: --floor-steps wants a count of env steps (0: none), not '-1'" ] || fail "--floor-steps -1: exit $rc: $msg"
# a preset tributary-train does not know: its reason, no line, exit 1
"$bm" --no-build --env Hopper-v4 --preset no-such-preset --seeds 2 --steps 1000 >"$tmp/stdout" 2>"$tmp/stderr"; rc=$?
[ $rc -eq 1 ] || { cat "$tmp/stderr"; fail "an unknown preset: exit $rc, want 1"; }
[ ! -s "$tmp/stdout" ] || fail "an unknown preset printed a line: $(cat "$tmp/stdout")"
grep -q '^scripts/bench mujoco: Hopper-v4 no-such-preset: tributary-train refused the flags: .*no-such-preset' "$tmp/stderr" ||
  { cat "$tmp/stderr"; fail "an unknown preset: no reason given"; }
[ "$(grep -c 'training 1000 steps' "$tmp/stderr")" -eq 1 ] || fail "an unknown preset: the second seed ran too"
echo "test_bench_mujoco_smoke: passed"
