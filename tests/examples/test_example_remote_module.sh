#!/usr/bin/env bash
# examples/remote_module built out of tree from the installed SDK (pkg-config
# and CMake) and run: the module lives on worker1, forward and forward_async
# agree, and training it from worker0 brings the loss down.
. "$(dirname "$0")/sdk_lib.sh"
build_example remote_module
for b in pc cmake; do
  run_example $b remote_module
  out=$work/$b.out
  grep -qx "forward: \[128,30\] on worker1" "$out" || fail "$b: no forward line"
  grep -qx "forward_async equals forward: yes" "$out" || fail "$b: forward_async differs"
  read -r first last < <(first_last "$out" '^step +[0-9]+ loss ([0-9.]+)$') || fail "$b: no loss lines"
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 20) }' || fail "$b: loss $first -> $last did not fall 20x"
done
echo "ok: remote_module (loss $first -> $last)"
