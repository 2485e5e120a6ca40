#!/usr/bin/env bash
# scripts/idle-priority, which make test runs the sanitizer build under: nice 19, the scheduler
# autogroup's nice 19 too where the kernel has autogroups (else nice 19 inside a new session
# weighs nothing against other sessions), and a session and process group whose id is its pid.
set -u
root="$1"
source "$(dirname "$0")/check.sh"
run="$root/scripts/idle-priority"

check "idle-priority usage" 2 "^usage: scripts/idle-priority COMMAND" -- "$run"
check "idle-priority nice" 0 "^19$" -- "$run" nice
if [[ -e /proc/self/autogroup ]]; then
  check "idle-priority autogroup" 0 "nice 19$" -- "$run" cat /proc/self/autogroup
fi
out=$("$run" bash -c 'echo "$$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$)"' &
  wait)
read -r pid pgid sid <<<"$out"
check "idle-priority own group" 0 "^ok$" -- bash -c "[[ $pid == $pgid && $pid == $sid ]] && echo ok"
# The pid a background run reports is the group's, so make-test's kill -- -PID stops it whole.
"$run" sleep 30 &
bg=$!
sleep 0.2
check "idle-priority background pid is the group" 0 "^ *$bg$" -- ps -o pgid= -p "$bg"
kill -TERM -- "-$bg"
wait "$bg" 2>/dev/null

echo "idle-priority: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
