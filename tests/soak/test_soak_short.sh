#!/usr/bin/env bash
# The 60-second soak: scripts/soak with 8 observers in async mode (every
# observer updates on its own: the most concurrency) for 60 s, sampled at 20,
# 30, 40, 50 and 60 s, with this build's binaries. Asserts:
#   - the run ended by its time budget: scripts/soak exits 0, the trainer
#     exited 1 with stopped_by "budget" (tributary-train --help);
#   - no accepted work dropped: the agent's rpc_dropped = 0, observers_lost = 0,
#     every sample saw the agent and its 8 observers alive, and every observer
#     stepped envs after the warm sample (metrics.csv's sps_observerK);
#   - work continued: the agent's env steps grew from each sample to the next;
#   - RSS of each process grew by at most GROWTH_PCT % + GROWTH_MIB MiB from
#     the warm sample (20 s) to the last (60 s); see the bound below;
#   - every process of the run is gone afterwards.
# Release builds only: under ASan the allocator's quarantine grows RSS by
# design, and TSan's shadow memory does too, so a sanitizer build exits 77.
#   BUILD_DIR=build SANITIZED=OFF test_soak_short.sh PATH/TO/scripts/soak
set -uo pipefail
soak=${1:?path of scripts/soak}
name=test_soak_short
case ${SANITIZED:-OFF} in
  OFF|"") ;;
  *) echo "$name: skipped: a sanitizer build ($SANITIZED) grows RSS by design; the bound holds for release builds only"
     exit 77 ;;
esac
[ -x "${BUILD_DIR:?}/agent/tributary-train" ] || { echo "$name: FAILED: no $BUILD_DIR/agent/tributary-train" >&2; exit 1; }

# The bound: growth <= GROWTH_PCT % of the warm sample + GROWTH_MIB MiB, for
# every process. Measured (release build, 2-core VM at load 15-35 with other
# builds and tests running; 8 runs): from 20 s to 60 s the agent (~21 MiB)
# grew 0.40-0.88 MiB and the observers (~8.7 MiB) 0.14-0.22 MiB. That is not
# a leak: in a 6-minute run the agent's malloc'd bytes in use (mallinfo2)
# stayed at 6.6-7.1 MiB from 1 minute on while its RSS rose from 21.9 to 24.6
# MiB, the free bytes glibc's arenas keep growing from 3.0 to 5.5 MiB, at
# times by 1.3 MiB within 30 s. So the agent's bound (10% + 2 MiB = 4.1 MiB)
# is 4.7x the largest growth seen and 3x that jump; an observer's (2.9 MiB)
# is 13x. Over the 40 s window it catches a leak of 105 KiB/s in the agent,
# at the measured ~4000 messages/s, ~20k env steps/s and ~300 updates/s
# about 27 B per message, 5 B per env step or 350 B per update, and of 74
# KiB/s in an observer (~500 messages/s, ~2500 env steps/s each: 150 B per
# message, 30 B per env step); on a slower (more loaded) run the per-message
# sizes caught are larger in proportion. Checked by injecting leaks (an
# LD_PRELOAD thread touching 4 KiB mallocs): 160 KiB/s in the agent grew it
# 6.1 MiB (bound 4.4: fails); 80 KiB/s in every observer grew each 3.05-3.09
# MiB, at its bound (3.07, the warm sample holding 20 s of the leak): about
# the smallest observer leak it catches.
GROWTH_PCT=${GROWTH_PCT:-10}
GROWTH_MIB=${GROWTH_MIB:-2}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "$name: FAILED: $*" >&2
  for f in "$tmp/soak.out" "$tmp"/out/runs/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done >&2
  exit 1
}

start=$(date +%s)
"$soak" --observers 8 --minutes 1 --mode async --sample-every 10 --warm-at 20 --no-build --out "$tmp/out" \
  >"$tmp/soak.out" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$tmp/soak.out"
echo "$name: scripts/soak took $took s"
[ $rc -eq 0 ] || fail "scripts/soak exited $rc, want 0 (the run ended by its time budget)"

runs=$tmp/out/runs.csv samples=$tmp/out/samples.csv
[ "$(wc -l <"$runs")" -eq 2 ] || fail "runs.csv: want one run"
# The run's row of runs.csv as FIELD[column name].
declare -A FIELD
while IFS='=' read -r k v; do FIELD[$k]=$v; done < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i; next }
  { for (i = 1; i <= NF; i++) print h[i] "=" $i }' "$runs")
[ "${FIELD[exit_code]:-}" = 1 ] || fail "the trainer exited ${FIELD[exit_code]:-}, want 1 (out of --max-seconds)"
[ "${FIELD[stopped_by]:-}" = budget ] || fail "stopped_by ${FIELD[stopped_by]:-}, want budget"
[ "${FIELD[observers_lost]:-}" = 0 ] || fail "observers_lost ${FIELD[observers_lost]:-}, want 0"
[ "${FIELD[rpc_dropped]:-}" = 0 ] || fail "rpc_dropped ${FIELD[rpc_dropped]:-}, want 0"

# samples.csv: mode,observers,t_s,process,pid,rss_kib,anon_kib,env_steps,load1
awk -F, -v pct="$GROWTH_PCT" -v mib="$GROWTH_MIB" '
  NR == 1 { next }
  {
    if (!($3 in seen)) { seen[$3] = 1; ts[++nt] = $3; steps[$3] = $8; procs[$3] = 0 }
    if ($6 == "") { printf "%s (pid %s) not running at %s s\n", $4, $5, $3; bad = 1; next }
    procs[$3]++
    if (!($4 in first)) first[$4] = $6
    last[$4] = $6; n[$4]++; name[$4] = 1
  }
  END {
    want = "20 30 40 50 60"; got = ""
    for (j = 1; j <= nt; j++) got = got (j > 1 ? " " : "") ts[j]
    if (got != want) { printf "samples at %s s, want %s\n", got, want; bad = 1 }
    for (j = 1; j <= nt; j++) if (procs[ts[j]] != 9) { printf "%d processes at %s s, want 9\n", procs[ts[j]], ts[j]; bad = 1 }
    for (j = 2; j <= nt; j++)
      if (steps[ts[j]] + 0 <= steps[ts[j - 1]] + 0) { printf "env steps did not grow from %s s (%s) to %s s (%s)\n", ts[j - 1], steps[ts[j - 1]], ts[j], steps[ts[j]]; bad = 1 }
    for (p in name) {
      g = last[p] - first[p]; lim = first[p] * pct / 100 + mib * 1024
      printf "  %-6s %7.1f -> %7.1f MiB  growth %+6.2f MiB (bound %.2f)\n", p, first[p] / 1024, last[p] / 1024, g / 1024, lim / 1024
      if (g > lim) { printf "%s grew %.2f MiB from %s s to %s s, over the bound %.2f MiB\n", p, g / 1024, ts[1], ts[nt], lim / 1024; bad = 1 }
    }
    exit bad
  }' "$samples" >"$tmp/check" 2>&1 || { cat "$tmp/check"; fail "see above"; }
cat "$tmp/check"

# Every observer stepped envs after the warm sample (the agent counts each
# observer's steps per progress interval).
metrics=$tmp/out/runs/async-o8/metrics.csv
[ -s "$metrics" ] || fail "no $metrics"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^sps_observer[0-9]+$/) obs[i] = $i; if (!("wall_s" == $2)) { print "metrics.csv: no wall_s"; exit 1 } next }
         $2 + 0 >= 20 { for (i in obs) sum[i] += $i }
         END { k = 0; for (i in obs) { k++; if (!(sum[i] > 0)) { printf "%s did no env steps after 20 s\n", obs[i]; bad = 1 } }
               if (k != 8) { printf "metrics.csv: %d sps_observer columns, want 8\n", k; bad = 1 }
               exit bad }' "$metrics" || fail "an observer stopped working"

# Every process of the run is gone.
left="" line=""
for p in $(awk -F, 'NR > 1 { print $5 }' "$samples" | sort -u); do
  read -r line 2>/dev/null <"/proc/$p/stat" || continue
  line=${line##*) }
  [ "${line%% *}" != Z ] && [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == *tributary* ]] && left+=" $p"
done
[ -z "$left" ] || fail "processes left over:$left"
echo "$name: passed in $(($(date +%s) - start)) s"
