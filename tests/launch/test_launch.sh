#!/usr/bin/env bash
# Tests of scripts/launch with the built tributary-agent/-observer as real
# processes on ports chosen at run time:
#   test_launch.sh CASE LAUNCH BUILD_DIR
# CASE: local (-n 3 to the end; its logdir refused to a second run, then
# continued with --resume DIR alone), hosts (--hosts into a network namespace
# over a veth pair; needs root and `ip netns`, else 77), slurm (three tasks
# by hand with SLURM_* variables, with a key), sigint (Ctrl-C mid-run;
# SIGTERM during the rendezvous), lost (an observer killed -9 mid-run is
# reported), keys (--hosts through a stand-in ssh that runs here: a run key
# made and handed over stdin, or --keys DIR, or --insecure; no key on any
# command line), hostlist (--hostnames and --hosts refuse what is no host
# name or too many hosts, at once however long the list, and a newline;
# ssh gets "--" before the host).
# Cluster cases (ctest label "cluster"; root and network namespaces, else
# 77): sshd (a real OpenSSH sshd on each of 3 namespace hosts: a run over
# real ssh, one host's link cut mid-run survived as a lost observer, Ctrl-C
# leaving nothing on any host), slurmd (a real slurmctld and a slurmd per
# namespace host: srun and sbatch run the launcher with --slurm; a node
# of the job set DOWN is survived as a lost observer; scancel of the job
# leaves only the daemons), netem (delay and loss on every link, both
# ways: the run goes on, nobody lost; then the partition below; 77 without
# the kernel's sch_netem), partition (one
# host cut off until the agent declares its observer lost and the observer
# gives up, the others training on; healed, a new observer of that rank on
# that host rejoins the running job).
# Every case checks that none of its processes is left.
set -uo pipefail
case_=${1:?case} launch=${2:?launch script} build=${3:?build dir}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_launch.XXXXXX")
declare -a bg=()           # launchers and tasks this test started
on_exit() {
  local p
  exec 2>/dev/null            # (no "Killed" notices for what it kills)
  for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "${ns_cleanup:-}" ] && eval "$ns_cleanup"
  wait
  rm -rf "$tmp"
}
trap on_exit EXIT

fail() { echo "FAIL ($case_): $*" >&2; for f in "$tmp"/*.out "$tmp"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done >&2; exit 1; }
skip() { echo "SKIP ($case_): $*"; exit 77; }

for b in agent/tributary-agent observer/tributary-observer; do
  [ -x "$build/$b" ] || fail "no $build/$b (build the programs first)"
done

# free_port: a port in 20000..32767 (below Linux's ephemeral range) no socket uses.
free_port() {
  local p used i
  used=$(ss -Htan | awk '{ n = split($4, a, ":"); print ":" a[n] ":" }' | tr -d '\n')
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 12768))
    [[ $used == *":$p:"* ]] || break
  done
  echo "$p"
}

# A wait that lasts says so ("WHO: waiting for WHAT (N s so far)", the
# agent's for its observers and its first update, an observer's for its
# agent): on a loaded box (ASan, other tests beside this one) a rendezvous
# can take that long. The stderr checks below pass such lines over.
wait_line='^[A-Za-z0-9_-]*: waiting for .* s so far)$'

# summary FILE: the JSON summary line of an agent's stdout.
summary() { grep '^{"solved":' "$1" | tail -n 1; }

# expect_summary FILE OBSERVERS LOST: a summary with these counts.
expect_summary() {
  local s
  s=$(summary "$1")
  [ -n "$s" ] || fail "no JSON summary in $1"
  [[ $s == *"\"observers\":$2,"* ]] || fail "summary without \"observers\":$2: $s"
  [[ $s == *"\"observers_lost\":$3}"* ]] || fail "summary without \"observers_lost\":$3: $s"
}

# no_leftovers MARKER PID...: none of the PIDs lives and no tributary
# process has MARKER (its rendezvous address) on its command line.
no_leftovers() {
  local marker=$1 p i left
  shift
  for ((i = 0; i < 50; i++)); do        # a reaped child's exit can lag its parent's by a moment
    left=""
    for p in "$@"; do kill -0 "$p" 2>/dev/null && left+=" $p"; done
    left+=$(pgrep -f "tributary-.*$marker" | tr '\n' ' ')
    [ -z "${left// /}" ] && return 0
    sleep 0.1
  done
  fail "processes left over:$left ($(ps -o pid,args -p "${left// /,}" 2>/dev/null | tail -n +2))"
}

# wait_for FILE REGEX SECONDS: until a line of FILE matches.
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "no line matching '$2' in $1 after $3 s"
}

# start_launcher OUT ERR ARGS...: runs the launcher in the background as a
# terminal would (SIGINT not ignored: a shell's plain `&` ignores it, and
# bash cannot trap a signal ignored at entry); sets L to its pid.
start_launcher() {
  local out=$1 err=$2
  shift 2
  set -m
  "${launch_pre[@]}" "$launch" "$@" >"$out" 2>"$err" &
  L=$!
  set +m
  bg+=("$L")
}

launch_pre=()               # the command words the launcher runs under (host_cmd head)

# --- a cluster of network namespaces on this machine ------------------------
# cluster_up N: a head (where the launcher, the agent and slurmctld run) and
# hosts h1..hN, each a network namespace of its own joined to the head by a
# veth pair (a /30 each; the head's address 10.A.B.1 on its loopback; a
# host's default route goes to the head). Every process started through
# in_host sees its host's name (a UTS namespace) and an /etc/hosts of its
# own naming them all (a mount namespace with a private file bound over
# /etc/hosts), as on real machines. Sets cl_net (10.A.B) and cl_ns_of[NAME];
# everything is removed on exit (cluster_down). Skips (77) without root,
# ip(8), unshare(1) or network namespaces.
declare -A cl_ns_of=()
cluster_up() {
  local n=$1 k ns
  [ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces (ip netns)"
  command -v ip >/dev/null || skip "no ip(8) (Debian iproute2)"
  command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare(1) or nsenter(1)"
  cl_net="10.$((200 + RANDOM % 50)).$((RANDOM % 256))"
  cl_pre=tc$$
  ns_cleanup=cluster_down
  ip netns add "$cl_pre-head" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"
  cl_ns_of[head]=$cl_pre-head
  ip -n "$cl_pre-head" link set lo up && ip -n "$cl_pre-head" addr add "$cl_net.1/32" dev lo ||
    fail "the head's address"
  # the head routes between the hosts, as a switch would
  nsenter --net="/run/netns/$cl_pre-head" sysctl -qw net.ipv4.ip_forward=1 || fail "ip_forward on the head"
  printf '127.0.0.1 localhost\n%s head\n' "$cl_net.1" >"$tmp/hosts"
  for ((k = 1; k <= n; k++)); do
    ns=$cl_pre-h$k
    ip netns add "$ns" || fail "ip netns add $ns"
    cl_ns_of[h$k]=$ns
    ip -n "$cl_pre-head" link add "c$$h$k" type veth peer name eth0 netns "$ns" || fail "veth to h$k"
    ip -n "$cl_pre-head" addr add "$cl_net.$((4 * k + 1))/30" dev "c$$h$k" && ip -n "$cl_pre-head" link set "c$$h$k" up &&
      ip -n "$ns" link set lo up && ip -n "$ns" addr add "$cl_net.$((4 * k + 2))/30" dev eth0 &&
      ip -n "$ns" link set eth0 up && ip -n "$ns" route add default via "$cl_net.$((4 * k + 1))" || fail "h$k's network"
    printf '%s h%s\n' "$cl_net.$((4 * k + 2))" "$k" >>"$tmp/hosts"
  done
}
# host_addr NAME: a cluster host's address
host_addr() { if [ "$1" = head ]; then echo "$cl_net.1"; else echo "$cl_net.$((4 * ${1#h} + 2))"; fi; }
# in_host NAME CMD...: CMD on cluster host NAME, exec'd (nsenter and unshare
# replace themselves, unlike `ip netns exec`, which waits in a parent: a
# signal to the pid started this way reaches CMD)
in_host() {
  local h=$1
  shift
  host_cmd "$h"
  "${hc[@]}" "$@"
}
# start_on NAME LOG CMD...: daemon CMD on host NAME in the background, its
# output in LOG; its pid (CMD's own: nothing waits in between) goes to bg
start_on() {
  local h=$1 log=$2
  shift 2
  host_cmd "$h"
  "${hc[@]}" "$@" >"$log" 2>&1 &
  bg+=($!)
}
# host_cmd NAME: the command words of in_host NAME into the array hc
host_cmd() {
  hc=(nsenter --net="/run/netns/${cl_ns_of[$1]}" -- unshare --mount --uts --
      sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' in_host "$tmp/hosts" "$1")
}
# cluster_down: every process in the cluster's namespaces killed, the namespaces removed
cluster_down() {
  local ns p
  for ns in "${cl_ns_of[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  for ns in "${cl_ns_of[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
# cluster_procs NAME...: the processes in these hosts' namespaces, as "pid args" lines
cluster_procs() {
  local h p
  for h in "$@"; do
    for p in $(ip netns pids "${cl_ns_of[$h]}" 2>/dev/null); do echo "$h: $p $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")"; done
  done
}

# agent_port LAUNCHER_PID: the port of the agent the launcher started.
agent_port() {
  local i a
  for ((i = 0; i < 100; i++)); do
    a=$(pgrep -P "$1" -f tributary-agent | head -n 1)
    [ -n "$a" ] && tr '\0' '\n' <"/proc/$a/cmdline" | sed -n 's|^tcp://[0-9.]*:\([0-9]*\)$|\1|p' | head -n 1 && return 0
    sleep 0.1
  done
  fail "the launcher started no agent"
}

progress_line='^ *[0-9.]+s +steps +[0-9]+'
start=$SECONDS
case $case_ in
local)
  port=$(free_port)
  "$launch" -n 3 --port "$port" --build-dir "$build" -- --preset ppo-fast --max-steps 20000 --quiet \
    --logdir "$tmp/run" >"$tmp/l.out" 2>"$tmp/l.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "exit status $rc, not 0 or 1"
  expect_summary "$tmp/l.out" 3 0
  [ "$(tail -n 1 "$tmp/l.out")" = "$(summary "$tmp/l.out")" ] || fail "the summary is not the last stdout line"
  # the agent says where it listens, each observer when it joined; nothing else
  ! grep -v -e '^tributary-agent: listening on tcp://' -e '^observer[0-9]*: joined the agent at tcp://' -e "$wait_line" "$tmp/l.err" |
    grep -q . || fail "stderr not empty"
  [ "$(grep -c '^observer[0-9]*: joined the agent at tcp://' "$tmp/l.err")" -eq 3 ] || fail "not 3 observers said they joined"
  no_leftovers "tcp://127.0.0.1:$port"
  # the run's directory: another run there is refused; --resume DIR alone
  # continues it with its 3 observers and its flags, the budget extended
  "$launch" -n 3 --build-dir "$build" -- --max-steps 20000 --logdir "$tmp/run" >/dev/null 2>"$tmp/u.err"
  rc=$?
  grep -q "^tributary-agent: --logdir $tmp/run already holds a run (config.json); continue it with --resume $tmp/run, write this run to a new directory, or pass --overwrite to replace it" "$tmp/u.err" ||
    fail "a second run into the logdir: status $rc, $(cat "$tmp/u.err")"
  [ $rc -eq 2 ] || fail "a second run into the logdir: status $rc, not 2"
  "$launch" --port "$port" --build-dir "$build" -- --resume "$tmp/run" --max-steps 30000 >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "resume: exit status $rc"
  grep -q "^tributary: resumed from $tmp/run/checkpoints/ckpt-" "$tmp/r.out" || fail "resume: no 'resumed from' line"
  expect_summary "$tmp/r.out" 3 0
  no_leftovers "tcp://127.0.0.1:$port"
  # usage errors: status 2 and a message
  "$launch" -n 3 --build-dir "$build" -- --observers 2 >/dev/null 2>"$tmp/u.err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q 'the launcher sets --observers itself' "$tmp/u.err"; then
    fail "--observers in the trainer flags: status $rc"
  fi
  "$launch" -n 2 --hosts a --build-dir "$build" >/dev/null 2>"$tmp/u.err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q 'exactly one of' "$tmp/u.err"; then fail "-n with --hosts: status $rc"; fi
  ;;

hosts)
  [ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
  command -v ip >/dev/null || skip "no ip(8)"
  ns=trib-launch-$$-$RANDOM
  ip netns add "$ns" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"
  veth=vlh$$ peer=vln$$
  ns_cleanup="ip link del $veth 2>/dev/null; ip netns del $ns 2>/dev/null"
  x=$((200 + $$ % 50)) y=$(($$ / 50 % 256))
  for ((i = 0; i < 256; i++)); do     # a /24 no interface here has yet
    ip -4 -o addr show | grep -q " 10\.$x\.$y\." || break
    y=$(((y + 1) % 256))
  done
  ip link add "$veth" type veth peer name "$peer" || fail "ip link add veth"
  ip link set "$peer" netns "$ns" || fail "moving the veth into $ns"
  ip addr add "10.$x.$y.1/24" dev "$veth" || fail "ip addr add on $veth"
  ip link set "$veth" up || fail "ip link set $veth up"
  ip netns exec "$ns" sh -c "ip addr add 10.$x.$y.2/24 dev $peer && ip link set $peer up && ip link set lo up" ||
    fail "namespace side of the veth"
  # a stand-in for ssh: host ns-host is the namespace; options are ignored
  cat >"$tmp/fake-ssh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac; done
host=\$1; shift; [ "\${1:-}" = -- ] && shift
[ "\$host" = ns-host ] || { echo "fake-ssh: unknown host \$host" >&2; exit 255; }
exec ip netns exec $ns sh -c "\$*"
EOF
  chmod +x "$tmp/fake-ssh"
  LAUNCH_SSH="$tmp/fake-ssh -o BatchMode=yes" "$launch" --hosts "ns-host=10.$x.$y.2,ns-host=10.$x.$y.2" \
    --master-addr "10.$x.$y.1" --build-dir "$build" -- --preset ppo-fast --max-steps 20000 --quiet \
    >"$tmp/h.out" 2>"$tmp/h.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "exit status $rc, not 0 or 1"
  expect_summary "$tmp/h.out" 2 0
  ! grep -v -e '^tributary-agent: listening on tcp://' -e '^observer[0-9]*: joined the agent at tcp://' -e "$wait_line" "$tmp/h.err" |
    grep -q . || fail "stderr not empty"
  no_leftovers "tcp://10.$x.$y.1:"
  ;;

slurm)
  [ "$("$launch" --hostnames 'node[01-03],other,r[1-2]-n[8,10]' | tr '\n' ' ')" = \
    "node01 node02 node03 other r1-n8 r1-n10 r2-n8 r2-n10 " ] || fail "--hostnames expands wrongly"
  port=$(free_port)
  unset SLURM_JOB_NODELIST SLURM_JOB_ID MASTER_ADDR
  export SLURM_NTASKS=3 SLURM_STEP_NODELIST=localhost MASTER_PORT=$port
  # a key on the "shared" file system, or --insecure, is required
  SLURM_PROCID=1 "$launch" --dry-run --build-dir "$build" >/dev/null 2>"$tmp/u.err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q '^launch: --slurm runs are encrypted: pass --keys DIR' "$tmp/u.err"; then
    fail "--slurm without --keys or --insecure: status $rc"
  fi
  "$build/agent/tributary-agent" --make-keys "$tmp/keys" >/dev/null || fail "--make-keys"
  dry=$(SLURM_PROCID=2 "$launch" --keys "$tmp/keys" --dry-run --build-dir "$build" -- --heartbeat-timeout 4000)
  [[ $dry == *"/tributary-observer --rank 2 --world-size 3 --master tcp://127.0.0.1:$port --bind-host 127.0.0.1 --keys $tmp/keys --heartbeat-timeout 4000" ]] ||
    fail "the Slurm task 2 would run: $dry"
  dry=$(SLURM_PROCID=0 "$launch" --insecure --dry-run --build-dir "$build")
  [[ $dry == *"/tributary-agent --observers 2 --master tcp://127.0.0.1:$port --insecure" ]] ||
    fail "the Slurm task 0 would run: $dry"
  pids=()
  for r in 0 1 2; do
    # task 0 says --slurm; the others find SLURM_PROCID on their own
    flag=(); [ $r -eq 0 ] && flag=(--slurm)
    SLURM_PROCID=$r "$launch" "${flag[@]}" --keys "$tmp/keys" --build-dir "$build" -- --preset ppo-fast \
      --max-steps 20000 --quiet >"$tmp/s$r.out" 2>"$tmp/s$r.err" &
    pids+=($!); bg+=($!)
  done
  for r in 0 1 2; do wait "${pids[r]}"; st[r]=$?; done
  [ "${st[0]}" -eq 0 ] || [ "${st[0]}" -eq 1 ] || fail "task 0 (agent) exit status ${st[0]}"
  if [ "${st[1]}" -ne 0 ] || [ "${st[2]}" -ne 0 ]; then fail "observer tasks exit status ${st[1]} ${st[2]}, not 0"; fi
  expect_summary "$tmp/s0.out" 2 0
  no_leftovers "tcp://127.0.0.1:$port" "${pids[@]}"
  ;;

sigint)
  start_launcher "$tmp/i.out" "$tmp/i.err" -n 2 --build-dir "$build" -- --preset ppo-fast --max-steps 100000000 --target 1000 --log-every 0.5
  port=$(agent_port "$L")
  wait_for "$tmp/i.out" "$progress_line" 60
  kids=$(pgrep -P "$L" | tr '\n' ' ')
  kill -INT "$L"
  wait "$L"
  rc=$?
  # The launcher passes SIGINT on; the agent stops gracefully with 130, which is the launcher's status.
  [ $rc -eq 130 ] || fail "exit status $rc after SIGINT, not 130"
  [[ $(summary "$tmp/i.out") == *'"stopped_by":"SIGINT"'* ]] || fail "summary without \"stopped_by\":\"SIGINT\""
  grep -q '^launch: SIGINT: stopping the agent' "$tmp/i.err" || fail "no notice of the SIGINT on stderr"
  if grep -v -e '^launch: SIGINT: stopping the agent' -e '^tributary-agent: listening on tcp://' \
       -e '^observer[0-9]*: joined the agent at tcp://' -e "$wait_line" "$tmp/i.err" | grep -q .; then
    fail "unexpected stderr"
  fi
  # shellcheck disable=SC2086
  no_leftovers "tcp://127.0.0.1:$port" "$L" $kids

  # SIGTERM while the agent still waits for an observer whose "ssh" failed:
  # the agent does not stop during the rendezvous, so after --grace it gets
  # a second SIGTERM and exits 143 at once.
  printf '#!/bin/sh\nexit 255\n' >"$tmp/no-ssh"
  chmod +x "$tmp/no-ssh"
  port=$(free_port)
  LAUNCH_SSH=$tmp/no-ssh start_launcher "$tmp/t.out" "$tmp/t.err" --hosts nohost --master-addr 127.0.0.1 --port "$port" \
    --grace 1 --build-dir "$build" -- --preset ppo-fast
  wait_for "$tmp/t.err" '^launch: observer rank 1 on nohost exited with status 255' 30
  kids=$(pgrep -P "$L" | tr '\n' ' ')
  t0=$SECONDS
  kill -TERM "$L"
  wait "$L"
  rc=$?
  [ $rc -eq 143 ] || fail "exit status $rc after SIGTERM in the rendezvous, not 143"
  [ $((SECONDS - t0)) -le 8 ] || fail "the launcher took $((SECONDS - t0)) s to stop"
  # shellcheck disable=SC2086
  no_leftovers "tcp://127.0.0.1:$port" "$L" $kids
  ;;

lost)
  start_launcher "$tmp/o.out" "$tmp/o.err" -n 3 --build-dir "$build" -- --preset ppo-fast --heartbeat-timeout 1500 \
    --max-steps 100000000 --max-seconds 8 --target 1000 --log-every 0.5
  port=$(agent_port "$L")
  wait_for "$tmp/o.out" "$progress_line" 60
  victim=$(pgrep -f -- "tributary-observer --rank 2 --world-size 4 --master tcp://127.0.0.1:$port( |$)")
  [ -n "$victim" ] || fail "no observer rank 2 on port $port"
  kids=$(pgrep -P "$L" | tr '\n' ' ')
  kill -KILL "$victim"
  wait_for "$tmp/o.err" '^launch: observer rank 2 on localhost killed by signal 9$' 10
  wait "$L"
  rc=$?
  [ $rc -eq 1 ] || fail "exit status $rc, not 1 (out of --max-seconds)"
  expect_summary "$tmp/o.out" 3 1
  [[ $(summary "$tmp/o.out") == *'"stopped_by":"budget"'* ]] || fail "the run did not go on to its budget"
  grep -q 'lost observer2' "$tmp/o.err" || fail "the agent did not report observer2 lost"
  # shellcheck disable=SC2086
  no_leftovers "tcp://127.0.0.1:$port" "$L" $kids
  ;;

keys)
  "$build/agent/tributary-agent" --make-keys "$tmp/keys" >/dev/null || fail "--make-keys"
  pub=$(sed -n 's/^public = //p' "$tmp/keys/tributary.key")
  sec=$(sed -n 's/^secret = //p' "$tmp/keys/tributary.key")
  [ ${#pub} -eq 40 ] && [ ${#sec} -eq 40 ] || fail "no key in $tmp/keys"
  # no_key FILE: FILE holds neither half of the key, nor any line of a key file
  no_key() { ! grep -qF -e "$pub" -e "$sec" -e 'secret = ' "$1" || fail "a key in $1: $(cat "$1")"; }
  # a stand-in for ssh: every host is this one; it logs the command it got
  cat >"$tmp/here-ssh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac; done
host=\$1; shift; [ "\${1:-}" = -- ] && shift
printf '%s\n' "\$host \$*" >>"$tmp/ssh.log"
exec sh -c "\$*"
EOF
  chmod +x "$tmp/here-ssh"

  # dry runs: where the key goes, never what it is
  "$launch" --hosts a,b --master-addr 10.9.9.9 --port 5555 --build-dir "$build" --dry-run >"$tmp/d1.out" ||
    fail "--dry-run"
  grep -q "/tributary-agent --observers 2 --master tcp://10.9.9.9:5555 --keys ${TMPDIR:-/tmp}/launch.XXXXXX/keys\$" \
    "$tmp/d1.out" || fail "the agent gets no per-run key: $(cat "$tmp/d1.out")"
  [ "$(grep -c -- '--bind-host [ab] --keys "$d" & p=' "$tmp/d1.out")" -eq 2 ] ||
    fail "the observers get no key: $(cat "$tmp/d1.out")"
  "$launch" --hosts a --keys "$tmp/keys" --port 5555 --build-dir "$build" --dry-run >"$tmp/d2.out" || fail "--dry-run --keys"
  grep -q -- "--keys $tmp/keys\$" "$tmp/d2.out" || fail "the agent does not get --keys $tmp/keys: $(cat "$tmp/d2.out")"
  no_key "$tmp/d1.out"
  no_key "$tmp/d2.out"
  "$launch" --hosts a --insecure --port 5555 --build-dir "$build" --dry-run >"$tmp/d3.out" || fail "--dry-run --insecure"
  [ "$(grep -c -- '--insecure' "$tmp/d3.out")" -eq 2 ] && ! grep -q -e '--keys' -e mktemp "$tmp/d3.out" ||
    fail "--insecure: $(cat "$tmp/d3.out")"
  "$launch" -n 1 --port 5555 --build-dir "$build" --dry-run >"$tmp/d4.out" || fail "--dry-run -n"
  ! grep -q -e '--keys' -e '--insecure' "$tmp/d4.out" || fail "-n: $(cat "$tmp/d4.out")"
  "$launch" -n 1 --keys "$tmp/keys" --port 5555 --build-dir "$build" --dry-run >"$tmp/d5.out" || fail "--dry-run -n --keys"
  [ "$(grep -c -- "--keys $tmp/keys" "$tmp/d5.out")" -eq 2 ] || fail "-n --keys: $(cat "$tmp/d5.out")"
  # usage errors
  for bad in "--keys $tmp/keys --insecure|--keys and --insecure exclude each other" \
             "--keys $tmp/nokeys|--keys $tmp/nokeys: no $tmp/nokeys/tributary.key" \
             "-- --keys $tmp/keys|give --keys to the launcher, before --" \
             "-- --insecure|give --insecure to the launcher, before --"; do
    read -ra a <<<"${bad%%|*}"
    "$launch" --hosts a --dry-run --build-dir "$build" "${a[@]}" >/dev/null 2>"$tmp/u.err"
    rc=$?
    [ $rc -eq 2 ] && grep -qF "launch: ${bad#*|}" "$tmp/u.err" || fail "${bad%%|*}: status $rc, $(cat "$tmp/u.err")"
  done

  # a run with a key made for it: the observers get it over stdin, and it is
  # gone (here and "there") when the launcher ends
  mkdir -m 700 "$tmp/t"
  TMPDIR=$tmp/t LAUNCH_SSH="$tmp/here-ssh -o BatchMode=yes" "$launch" --hosts localhost,localhost \
    --master-addr 127.0.0.1 --build-dir "$build" -- --preset ppo-fast --max-updates 2 --quiet \
    >"$tmp/k.out" 2>"$tmp/k.err"
  rc=$?
  [ $rc -eq 1 ] || fail "exit status $rc, not 1 (out of --max-updates)"
  expect_summary "$tmp/k.out" 2 0
  grep -q "^tributary-agent: listening on tcp://127.0.0.1:[0-9]* (encrypted: $tmp/t/launch\.[A-Za-z0-9]*/keys/tributary.key, public key " \
    "$tmp/k.err" || fail "the agent did not use a per-run key: $(cat "$tmp/k.err")"
  [ "$(grep -c -- '--keys "$d"' "$tmp/ssh.log")" -eq 2 ] || fail "the observers got no --keys: $(cat "$tmp/ssh.log")"
  [ -z "$(ls -A "$tmp/t")" ] || fail "left behind: $(ls -lAR "$tmp/t")"
  no_key "$tmp/ssh.log"

  # --keys DIR: the same key here and over stdin; no command line shows it
  : >"$tmp/ssh.log"
  LAUNCH_SSH="$tmp/here-ssh" start_launcher "$tmp/k2.out" "$tmp/k2.err" --hosts localhost --master-addr 127.0.0.1 \
    --keys "$tmp/keys" --build-dir "$build" -- --preset ppo-fast --max-updates 2 --quiet
  : >"$tmp/ps.out"
  while kill -0 "$L" 2>/dev/null; do ps -eo args >>"$tmp/ps.out"; sleep 0.05; done
  wait "$L"
  rc=$?
  [ $rc -eq 1 ] || fail "--keys: exit status $rc, not 1"
  expect_summary "$tmp/k2.out" 1 0
  grep -qF "encrypted: $tmp/keys/tributary.key, public key ${pub:0:8}...)" "$tmp/k2.err" ||
    fail "the agent did not use --keys $tmp/keys: $(cat "$tmp/k2.err")"
  grep -q 'tributary-observer --rank 1 .*--keys' "$tmp/ps.out" || fail "ps never saw the observer"
  no_key "$tmp/ps.out"
  no_key "$tmp/ssh.log"
  ;;

hostlist)
  # refused_list WANT LIST...: each --hostnames LIST exits 2 within 10 s with
  # WANT on stderr (was: garbage exited 0 naming no host, and a huge range
  # expanded without end)
  refused_list() {
    local want=$1 l s rc
    shift
    for l in "$@"; do
      s=$l; [ ${#l} -le 80 ] || s="${l:0:60}... (${#l} characters)"   # what the messages show
      timeout 10 "$launch" --hostnames "$l" >"$tmp/h.out" 2>"$tmp/h.err"
      rc=$?
      [ $rc -eq 2 ] || fail "--hostnames '$s': status $rc (not 2), $(wc -l <"$tmp/h.out") hosts"
      grep -qF -- "$want" "$tmp/h.err" || fail "--hostnames '$s': no '$want' in: $(cat "$tmp/h.err")"
      [ ! -s "$tmp/h.out" ] || fail "--hostnames '$s' printed hosts"
    done
  }
  refused_list "is not a number or a range N-M (at most 9 digits each)" 'n[1-99999999999999999999]' 'n[a-b]' 'n[1-]'
  refused_list "has more than 4096 hosts" 'n[1-4097]' 'n[1-100]-x[1-100]' 'a[1-4000],b[1-97]'
  # the bound before the parse, which is linear: 60,000 items are refused
  # at once (was: parsed in quadratic time first, 4,097 items took 22 s and
  # these would take minutes), 4,096 parsed quickly
  big=$(printf 'a,%.0s' $(seq 60000))
  t0=$SECONDS
  refused_list "has more than 4096 hosts" "${big%,}" "${big:0:8193}[1-2]" "${big:0:16001}"
  [ $((SECONDS - t0)) -le 5 ] || fail "refusing three over-long node lists took $((SECONDS - t0)) s"
  t0=$SECONDS
  [ "$(timeout 30 "$launch" --hostnames "${big:0:8191}" | wc -l)" -eq 4096 ] || fail "4,096 items do not give 4096 hosts"
  [ "$(timeout 30 "$launch" --hostnames "$(printf 'n[1-2]x[01-02],%.0s' $(seq 1023))m[1-4]" | wc -l)" -eq 4096 ] ||
    fail "1,024 bracketed items do not give 4096 hosts"
  [ $((SECONDS - t0)) -le 20 ] || fail "expanding 2 x 4,096 hosts took $((SECONDS - t0)) s"
  # a newline is refused, not the list cut at it (was: read took the first line)
  refused_list "has a newline (one list, its hosts separated by ',')" $'h\nx' $'n[1-2]\nx' $'n[1,\n2]' $'h\n'
  refused_list "brackets do not match" ']]' 'n[1-3' 'n1-3]' 'n[[1]]'
  refused_list "has an empty item" '' ',' 'a,,b'
  refused_list "goes down" 'n[3-1]'
  refused_list "is not a host name" '-oProxyCommand=x' 'a b' 'a;b' 'n[1-2]$x'
  [ "$("$launch" --hostnames 'n[1-4096]' | wc -l)" -eq 4096 ] || fail "--hostnames 'n[1-4096]' does not give 4096 hosts"
  [ "$("$launch" --hostnames 'n[0098-0100]x,y' | tr '\n' ' ')" = "n0098x n0099x n0100x y " ] ||
    fail "--hostnames 'n[0098-0100]x,y' expands wrongly"
  # --hosts: no entry that ssh could read as an option reaches it, and the
  # host comes after "--" (ssh's own options end there)
  printf '#!/bin/sh\nprintf "%%s\\n" "$*" >>"%s"\nexit 255\n' "$tmp/ssh.log" >"$tmp/log-ssh"
  chmod +x "$tmp/log-ssh"
  for h in '-oProxyCommand=touch /tmp/pwned' '-F/dev/null' 'a b' 'a;b' 'user@-x' 'ok,-oX=y'; do
    : >"$tmp/ssh.log"
    LAUNCH_SSH="$tmp/log-ssh -o BatchMode=yes" timeout 30 "$launch" --hosts "$h" --master-addr 127.0.0.1 --insecure \
      --build-dir "$build" -- --quiet >"$tmp/s.out" 2>"$tmp/s.err"
    rc=$?
    [ $rc -eq 2 ] || fail "--hosts '$h': status $rc (not 2): $(cat "$tmp/s.err")"
    grep -q "^launch: --hosts entry [12]: '.*' is not a host name" "$tmp/s.err" || fail "--hosts '$h': $(cat "$tmp/s.err")"
    [ ! -s "$tmp/ssh.log" ] || fail "--hosts '$h' ran ssh: $(cat "$tmp/ssh.log")"
  done
  # --hosts with a newline: refused, no ssh run (was: 'x' dropped silently,
  # a run with the hosts before the newline)
  for h in $'h\nx' $'h,g\n' $'h=10.0.0.2\n,x'; do
    : >"$tmp/ssh.log"
    LAUNCH_SSH="$tmp/log-ssh" timeout 30 "$launch" --hosts "$h" --master-addr 127.0.0.1 --insecure \
      --build-dir "$build" -- --quiet >"$tmp/s.out" 2>"$tmp/s.err"
    rc=$?
    [ $rc -eq 2 ] && grep -qF "launch: --hosts has a newline; the hosts are one list separated by ','" "$tmp/s.err" ||
      fail "--hosts with a newline: status $rc, $(cat "$tmp/s.err")"
    [ ! -s "$tmp/ssh.log" ] || fail "--hosts with a newline ran ssh: $(cat "$tmp/ssh.log")"
  done
  LAUNCH_SSH=$'ssh\n-oProxyCommand=x' "$launch" --hosts a --insecure --build-dir "$build" --dry-run >/dev/null 2>"$tmp/s.err"
  rc=$?
  [ $rc -eq 2 ] && grep -qF "launch: LAUNCH_SSH has a newline" "$tmp/s.err" || fail "LAUNCH_SSH with a newline: status $rc"
  "$launch" --hosts 'a,u@b=10.0.0.2' --master-addr 127.0.0.1 --port 5555 --insecure --build-dir "$build" --dry-run \
    >"$tmp/d.out" || fail "--dry-run"
  grep -q "^ssh -o BatchMode=yes -- a '" "$tmp/d.out" && grep -q "^ssh -o BatchMode=yes -- u@b '.*--bind-host 10.0.0.2 " \
    "$tmp/d.out" || fail "ssh does not get -- before the host: $(cat "$tmp/d.out")"
  # a resumed run's config.json is read as the agent reads it: a FIFO is
  # not waited on, a link not followed
  mkdir -p "$tmp/run"
  mkfifo "$tmp/run/config.json"
  timeout 10 "$launch" --build-dir "$build" -- --resume "$tmp/run" >/dev/null 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq 2 ] && grep -qF "launch: --resume $tmp/run: $tmp/run/config.json is a symbolic link or not a regular file" \
    "$tmp/r.err" || fail "--resume with a FIFO config.json: status $rc: $(cat "$tmp/r.err")"
  for a in --agent-host --master-addr; do
    "$launch" --hosts a $a -oX=y --insecure --build-dir "$build" --dry-run >/dev/null 2>"$tmp/a.err"
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "launch: $a: '-oX=y' is not a host name" "$tmp/a.err" || fail "$a -oX=y: status $rc: $(cat "$tmp/a.err")"
  done
  ;;

sshd)
  # a real OpenSSH server on each of 3 namespace hosts, the launcher on the
  # head reaching them by name with a test key
  for b in /usr/sbin/sshd ssh ssh-keygen; do command -v "$b" >/dev/null || skip "no $b (Debian openssh-server, openssh-client)"; done
  cluster_up 3
  mkdir -m 700 "$tmp/ssh"
  ssh-keygen -q -t ed25519 -N '' -f "$tmp/ssh/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$tmp/ssh/id" ||
    fail "ssh-keygen"
  cp "$tmp/ssh/id.pub" "$tmp/ssh/authorized_keys"
  [ -d /run/sshd ] || install -d -m 755 /run/sshd         # sshd's privilege separation directory
  sshport=$(free_port)
  for h in h1 h2 h3; do
    printf '%s\n' "ListenAddress $(host_addr $h)" "Port $sshport" "HostKey $tmp/ssh/host_key" \
      "AuthorizedKeysFile $tmp/ssh/authorized_keys" "PidFile $tmp/ssh/$h.pid" "StrictModes no" "UsePAM no" \
      "PermitRootLogin prohibit-password" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
      "ClientAliveInterval 2" "ClientAliveCountMax 3" >"$tmp/ssh/sshd_$h"
    start_on $h "$tmp/sshd_$h.err" /usr/sbin/sshd -D -e -f "$tmp/ssh/sshd_$h"
  done
  printf '%s\n' "Host h1 h2 h3" "  Port $sshport" "  User root" "  IdentityFile $tmp/ssh/id" "  IdentitiesOnly yes" \
    "  StrictHostKeyChecking no" "  UserKnownHostsFile /dev/null" "  LogLevel ERROR" "  BatchMode yes" \
    "  ConnectTimeout 10" "  ServerAliveInterval 2" "  ServerAliveCountMax 3" >"$tmp/ssh/config"
  export LAUNCH_SSH="ssh -F $tmp/ssh/config"
  for h in h1 h2 h3; do      # each sshd answers, on its host, under its name
    for ((i = 0; i < 100; i++)); do
      got=$(in_host head $LAUNCH_SSH -- $h hostname 2>"$tmp/ssh.err") && break
      sleep 0.2
    done
    [ "$got" = "$h" ] || fail "ssh to $h: '$got' $(cat "$tmp/ssh.err" "$tmp/sshd_$h.err")"
  done
  host_cmd head
  launch_pre=("${hc[@]}")
  # a run to its end: the agent on the head, an observer on each host over real ssh
  in_host head "$launch" --hosts h1,h2,h3 --master-addr head --build-dir "$build" -- --preset ppo-fast \
    --max-steps 20000 --quiet >"$tmp/h.out" 2>"$tmp/h.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "exit status $rc, not 0 or 1"
  expect_summary "$tmp/h.out" 3 0
  grep -q "^tributary-agent: listening on tcp://$cl_net.1:[0-9]* (encrypted: " "$tmp/h.err" || fail "the agent was not encrypted on the head"
  [ "$(grep -c '^observer[0-9]*: joined the agent at tcp://' "$tmp/h.err")" -eq 3 ] || fail "not 3 observers joined"
  no_leftovers "tcp://$cl_net.1:"
  # one host's network cut (its link down) mid-run: the agent loses that
  # observer and trains on to its budget
  start_launcher "$tmp/c.out" "$tmp/c.err" --hosts h1,h2,h3 --master-addr head --grace 3 --build-dir "$build" -- \
    --preset ppo-fast --heartbeat-timeout 1500 --max-steps 100000000 --max-seconds 12 --target 1000 --log-every 0.5
  wait_for "$tmp/c.out" "$progress_line" 60
  ip -n "${cl_ns_of[head]}" link set "c$$h2" down || fail "link down"
  wait_for "$tmp/c.err" 'lost observer2' 20
  wait "$L"
  rc=$?
  [ $rc -eq 1 ] || fail "link down: exit status $rc, not 1 (out of --max-seconds)"
  expect_summary "$tmp/c.out" 3 1
  [[ $(summary "$tmp/c.out") == *'"stopped_by":"budget"'* ]] || fail "the run did not go on to its budget"
  ip -n "${cl_ns_of[head]}" link set "c$$h2" up || fail "link up"
  # the cut-off host's observer ends on its own (its agent is gone) and sshd's session with it
  for ((i = 0; i < 300; i++)); do
    left=$(cluster_procs head h1 h2 h3 | grep -v -e ' /usr/sbin/sshd -D -e -f ' -e '^head: .* /usr/sbin/sshd -D')
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || fail "after the cut: processes left on the hosts: $left"
  no_leftovers "tcp://$cl_net.1:"
  # Ctrl-C on the launcher: nothing is left on any host
  start_launcher "$tmp/i.out" "$tmp/i.err" --hosts h1,h2,h3 --master-addr head --build-dir "$build" -- \
    --preset ppo-fast --max-steps 100000000 --target 1000 --log-every 0.5
  wait_for "$tmp/i.out" "$progress_line" 60
  [ "$(cluster_procs h1 h2 h3 | grep -c 'tributary-observer --rank')" -ge 3 ] || fail "no observer on each host: $(cluster_procs h1 h2 h3)"
  kill -INT "$L"
  for ((i = 0; i < 300; i++)); do kill -0 "$L" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$L" 2>/dev/null && fail "the launcher still runs 30 s after SIGINT"
  wait "$L"
  rc=$?
  [ $rc -eq 130 ] || fail "exit status $rc after SIGINT, not 130"
  [[ $(summary "$tmp/i.out") == *'"stopped_by":"SIGINT"'* ]] || fail "summary without \"stopped_by\":\"SIGINT\""
  for ((i = 0; i < 100; i++)); do
    left=$(cluster_procs head h1 h2 h3 | grep -v ' /usr/sbin/sshd -D -e -f ')
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || fail "after Ctrl-C: processes left on the hosts: $left"
  no_leftovers "tcp://$cl_net.1:"
  ;;

slurmd)
  # a real Slurm cluster: munged, slurmctld on the head, a slurmd on each
  # of 4 namespace hosts (its own name, address and /etc/hosts)
  for b in slurmctld slurmd srun sbatch scancel squeue sinfo munged mungekey; do
    command -v "$b" >/dev/null || skip "no $b (Debian slurm-wlm, munge)"
  done
  cluster_up 4
  mkdir -m 700 "$tmp/munge" "$tmp/slurm" "$tmp/slurm/state" "$tmp/slurm/spool.h1" "$tmp/slurm/spool.h2" \
    "$tmp/slurm/spool.h3" "$tmp/slurm/spool.h4"
  mungekey -c -k "$tmp/munge/key" || fail "mungekey"
  munged -F --force --socket="$tmp/munge/sock" --key-file="$tmp/munge/key" --pid-file="$tmp/munge/pid" \
    --seed-file="$tmp/munge/seed" >"$tmp/munged.log" 2>&1 &
  bg+=($!)
  ctlport=$(free_port) dport=$(free_port)
  export SLURM_CONF=$tmp/slurm/slurm.conf
  { printf '%s\n' ClusterName=trib "SlurmctldHost=head($cl_net.1)" "SlurmctldPort=$ctlport" "SlurmdPort=$dport" \
      SlurmUser=root SlurmdUser=root AuthType=auth/munge CredType=cred/munge "AuthInfo=socket=$tmp/munge/sock" \
      "StateSaveLocation=$tmp/slurm/state" "SlurmdSpoolDir=$tmp/slurm/spool.%n" \
      "SlurmctldPidFile=$tmp/slurm/slurmctld.pid" "SlurmdPidFile=$tmp/slurm/slurmd.%n.pid" \
      "SlurmctldLogFile=$tmp/slurm/slurmctld.log" "SlurmdLogFile=$tmp/slurm/slurmd.%n.log" \
      ProctrackType=proctrack/pgid TaskPlugin=task/none SelectType=select/cons_tres SelectTypeParameters=CR_Core \
      MpiDefault=none ReturnToService=2 SchedulerType=sched/builtin JobAcctGatherType=jobacct_gather/none \
      AccountingStorageType=accounting_storage/none SwitchType=switch/none KillWait=5 MessageTimeout=20 \
      SlurmdTimeout=30 InactiveLimit=0 MinJobAge=5
    for k in 1 2 3 4; do echo "NodeName=h$k NodeAddr=$(host_addr h$k) CPUs=2 State=UNKNOWN"; done
    echo "PartitionName=trib Nodes=h[1-4] Default=YES MaxTime=INFINITE State=UP"
  } >"$SLURM_CONF"
  start_on head "$tmp/slurmctld.err" slurmctld -D -i
  for k in 1 2 3 4; do start_on h$k "$tmp/slurmd_h$k.err" slurmd -D -N h$k; done
  for ((i = 0; i < 300; i++)); do
    idle=$(in_host head sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq 4 ] && break
    sleep 0.2
  done
  [ "$idle" -eq 4 ] || fail "not 4 idle Slurm nodes after 60 s: $(in_host head sinfo -N 2>&1; tail -n 5 "$tmp/slurm/slurmctld.log")"
  "$build/agent/tributary-agent" --make-keys "$tmp/keys" >/dev/null || fail "--make-keys"
  MASTER_PORT=$(free_port); export MASTER_PORT
  # srun: the agent on h1, an observer on each of h2..h4, encrypted with the shared key
  in_host head timeout 120 srun -N 4 -n 4 --ntasks-per-node=1 "$launch" --slurm --keys "$tmp/keys" --build-dir "$build" -- \
    --preset ppo-fast --max-steps 20000 --quiet >"$tmp/s.out" 2>"$tmp/s.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || fail "srun: exit status $rc"
  expect_summary "$tmp/s.out" 3 0
  [ "$(grep -c '^observer[0-9]*: joined the agent at tcp://' "$tmp/s.err")" -eq 3 ] || fail "srun: not 3 observers joined"
  grep -q "^tributary-agent: listening on tcp://$(host_addr h1):$MASTER_PORT (encrypted: $tmp/keys/tributary.key" "$tmp/s.err" ||
    fail "srun: the agent is not on h1, encrypted: $(cat "$tmp/s.err")"
  no_leftovers "tcp://$cl_net."

  # sbatch_run OUT FLAGS...: submits a batch job (4 nodes, run with --no-kill so that a
  # node's loss leaves the others running) whose srun runs the launcher; sets JID
  sbatch_run() {
    local out=$1
    shift
    MASTER_PORT=$(free_port); export MASTER_PORT
    JID=$(in_host head sbatch --parsable -N 4 -n 4 --ntasks-per-node=1 --no-kill -o "$out" --wrap \
      "srun --no-kill $(printf '%q ' "$launch" --slurm --keys "$tmp/keys" --build-dir "$build" -- "$@")") ||
      fail "sbatch: $JID"
    [[ $JID =~ ^[0-9]+$ ]] || fail "sbatch said '$JID', not a job id"
  }
  # job_gone SECONDS: until squeue no longer lists JID
  job_gone() {
    local i
    for ((i = 0; i < $1 * 5; i++)); do
      [ -z "$(in_host head squeue -h -j "$JID" 2>/dev/null)" ] && return 0
      sleep 0.2
    done
    fail "job $JID still in squeue after $1 s: $(in_host head squeue)"
  }
  # only_daemons_left WHEN: until the hosts run nothing but their slurmd
  # (and the head its slurmctld and slurmscriptd), 30 s
  only_daemons_left() {
    local i left
    for ((i = 0; i < 300; i++)); do
      left=$(cluster_procs head h1 h2 h3 h4 | grep -v -E '^(head: [0-9]+ (slurmctld -D -i|: slurmscriptd)|h[1-4]: [0-9]+ slurmd -D -N h[1-4]) *$')
      [ -z "$left" ] && return 0
      sleep 0.1
    done
    fail "$1: left on the hosts: $left"
  }
  # sbatch: the same run as a batch job
  sbatch_run "$tmp/b.out" --preset ppo-fast --max-steps 20000 --quiet
  job_gone 120
  expect_summary "$tmp/b.out" 3 0
  only_daemons_left "after the batch job"
  no_leftovers "tcp://$cl_net."

  # a node of the job lost mid-run (set DOWN: Slurm kills its task, rank 2
  # on h3): the agent goes on with 2 observers to its budget
  sbatch_run "$tmp/n.out" --preset ppo-fast --heartbeat-timeout 1500 --max-steps 100000000 --max-seconds 12 \
    --target 1000 --log-every 0.5
  wait_for "$tmp/n.out" "$progress_line" 60
  in_host head scontrol update NodeName=h3 State=DOWN Reason=test-lost-task || fail "scontrol: h3 DOWN"
  wait_for "$tmp/n.out" 'lost observer2' 20
  job_gone 60
  expect_summary "$tmp/n.out" 3 1
  [[ $(summary "$tmp/n.out") == *'"stopped_by":"budget"'* ]] || fail "the run did not go on to its budget"
  only_daemons_left "after a node's loss"
  no_leftovers "tcp://$cl_net."
  in_host head scontrol update NodeName=h3 State=RESUME >/dev/null 2>&1
  for ((i = 0; i < 300; i++)); do
    idle=$(in_host head sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq 4 ] && break
    sleep 0.2
  done
  [ "$idle" -eq 4 ] || fail "h3 not back (idle) 60 s after its loss: $(in_host head sinfo -N 2>&1)"

  # scancel of the job mid-run: everything ends, on every host
  sbatch_run "$tmp/x.out" --preset ppo-fast --max-steps 100000000 --target 1000 --log-every 0.5
  wait_for "$tmp/x.out" "$progress_line" 60
  [ "$(cluster_procs h2 h3 h4 | grep -c 'tributary-observer --rank')" -eq 3 ] || fail "no observer on each of h2..h4: $(cluster_procs h1 h2 h3 h4)"
  in_host head scancel "$JID" || fail "scancel $JID"
  job_gone 60
  only_daemons_left "after scancel"
  no_leftovers "tcp://$cl_net."
  ;;

netem|partition)
  # network faults between hosts: the agent on the head, an observer on
  # each of 3 namespace hosts (as README "Observers on other hosts" starts
  # them by hand, with a run key)
  cluster_up 3
  if [ "$case_" = netem ]; then
    command -v tc >/dev/null || skip "no tc(8) (Debian iproute2)"
    in_host h1 tc qdisc add dev eth0 root netem delay 1ms 2>"$tmp/tc.err" ||
      skip "tc netem does not work here (the kernel's sch_netem): $(cat "$tmp/tc.err")"
    in_host h1 tc qdisc del dev eth0 root
  fi
  "$build/agent/tributary-agent" --make-keys "$tmp/keys" >/dev/null || fail "--make-keys"
  port=$(free_port)
  master=tcp://$cl_net.1:$port
  budget=20; [ "$case_" = netem ] && budget=35         # netem trains under delay and loss first
  start_on head "$tmp/a.err" "$build/agent/tributary-agent" --observers 3 --master "$master" --keys "$tmp/keys" \
    --preset ppo-fast --heartbeat-timeout 3000 --max-steps 100000000 --max-seconds "$budget" \
    --target 1000 --log-every 0.5
  agent=${bg[-1]}
  # observer HOST RANK: an observer of rank RANK on HOST; its pid in obs[RANK]
  declare -a obs=()
  observer() {
    start_on "$1" "$tmp/o$2.$1.$SECONDS.err" "$build/observer/tributary-observer" --rank "$2" --world-size 4 \
      --master "$master" --bind-host "$(host_addr "$1")" --keys "$tmp/keys" --heartbeat-timeout 3000
    obs[$2]=${bg[-1]}
  }
  # steps_now: the env steps of the agent's last progress line
  steps_now() { grep -E "$progress_line" "$tmp/a.err" | tail -n 1 | awk '{ print $3 }'; }
  # trains_on WHAT: until the steps grow by 3000 past what they are now (30 s)
  trains_on() {
    local s0 i
    s0=$(steps_now)
    for ((i = 0; i < 300; i++)); do
      [ "$(steps_now)" -ge $((${s0:-0} + 3000)) ] 2>/dev/null && return 0
      sleep 0.1
    done
    fail "no training $1 (steps ${s0:-none}, then $(steps_now))"
  }
  for k in 1 2 3; do observer h$k $k; done
  wait_for "$tmp/a.err" "$progress_line" 60
  if [ "$case_" = netem ]; then
    # delay and loss on every link, both ways: the run goes on, nobody lost
    # (TCP resends what is lost; 4 losses of one segment in a row, the
    # 3 s heartbeat timeout's worth of resend backoff, are not expected)
    for k in 1 2 3; do
      in_host h$k tc qdisc add dev eth0 root netem delay $((10 * k))ms 5ms loss "$k%" &&
        ip -n "${cl_ns_of[head]}" link show "c$$h$k" >/dev/null &&
        nsenter --net="/run/netns/${cl_ns_of[head]}" tc qdisc add dev "c$$h$k" root netem delay 10ms loss 0.5% ||
        fail "netem on h$k"
    done
    trains_on "under netem delay and loss"
    trains_on "under netem delay and loss (again)"
    for k in 1 2 3; do
      in_host h$k tc qdisc del dev eth0 root && nsenter --net="/run/netns/${cl_ns_of[head]}" tc qdisc del dev "c$$h$k" root ||
        fail "netem off on h$k"
    done
    ! grep -q 'lost observer' "$tmp/a.err" || fail "an observer was lost to delay and loss: $(grep 'lost observer' "$tmp/a.err")"
  fi
  # a partition: h3 cut off (its link down) until the agent and h3's
  # observer have each given the other up; the others train on; the link
  # heals and an observer of rank 3 on h3 rejoins the running job
  ip -n "${cl_ns_of[head]}" link set "c$$h3" down || fail "link down"
  wait_for "$tmp/a.err" 'lost observer3' 20
  trains_on "during the partition"
  for ((i = 0; i < 300; i++)); do kill -0 "${obs[3]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${obs[3]}" 2>/dev/null && fail "h3's observer still runs 30 s after the partition"
  wait "${obs[3]}"
  rc=$?
  [ $rc -eq 1 ] || fail "h3's cut-off observer exited with $rc, not 1 (it lost the agent)"
  ip -n "${cl_ns_of[head]}" link set "c$$h3" up || fail "link up"
  observer h3 3
  wait_for "$tmp/a.err" '^agent: observer3 rejoined \(rank 3\)' 30
  trains_on "after the rejoin"
  for ((i = 0; i < 600; i++)); do kill -0 "$agent" 2>/dev/null || break; sleep 0.1; done
  wait "$agent"
  rc=$?
  [ $rc -eq 1 ] || fail "the agent exited with $rc, not 1 (out of --max-seconds)"
  grep -E '^\{"solved":' "$tmp/a.err" >"$tmp/a.out" || fail "no summary: $(tail -n 20 "$tmp/a.err")"
  expect_summary "$tmp/a.out" 3 1
  [[ $(summary "$tmp/a.out") == *'"stopped_by":"budget"'* && $(summary "$tmp/a.out") == *'"observers_rejoined":1,'* ]] ||
    fail "not a run to its budget with one rejoin: $(summary "$tmp/a.out")"
  for k in 1 2 3; do
    for ((i = 0; i < 100; i++)); do kill -0 "${obs[k]}" 2>/dev/null || break; sleep 0.1; done
    wait "${obs[k]}"
    rc=$?
    [ $rc -eq 0 ] || fail "observer $k ended with $rc, not 0"
  done
  no_leftovers "$master"
  ;;

*) echo "test_launch.sh: unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_) in $((SECONDS - start)) s"
