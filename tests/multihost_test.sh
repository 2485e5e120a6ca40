#!/usr/bin/env bash
# Hosts made real (issue 15): two network namespaces with their own host names, joined by a
# bridge, and Open MPI over TCP between them (an rsh agent that enters the namespace instead of
# ssh). On 2 hosts x 2 ranks: data-parallel training equals one process bit for bit and records
# each rank's host; ranks launched differently on the two hosts stop before any step, each
# naming the other host's ranks; a rank stopped on the second host is named with its host by
# every other rank. Skips (exit 77) where namespaces cannot be created. Usage:
# multihost_test.sh KEEL
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
id=$(($$ % 200))
net="10.79.$id"
bridge="kb$id"
hosts=("k${id}h0" "k${id}h1")

cleanup() {
  pkill -KILL -f "$tmp/" 2>/dev/null
  for h in "${hosts[@]}"; do ip netns del "$h" 2>/dev/null; done
  ip link del "$bridge" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# Two "hosts": a namespace each, a veth pair into one bridge, an address on $net.0/24.
make_hosts() {
  ip link add "$bridge" type bridge || return 1
  ip addr add "$net.254/24" dev "$bridge" && ip link set "$bridge" up || return 1
  local i=0 h
  for h in "${hosts[@]}"; do
    i=$((i + 1))
    ip netns add "$h" || return 1
    ip link add "v$h" type veth peer name "p$h" || return 1
    ip link set "p$h" master "$bridge" && ip link set "p$h" up || return 1
    ip link set "v$h" netns "$h" || return 1
    ip netns exec "$h" ip addr add "$net.$i/24" dev "v$h" || return 1
    ip netns exec "$h" ip link set "v$h" up && ip netns exec "$h" ip link set lo up || return 1
  done
}
if ! command -v ip >/dev/null || ! make_hosts 2>"$tmp/netns.err"; then
  echo "SKIP multihost: cannot create network namespaces here ($(head -1 "$tmp/netns.err"));" \
    "they need root and iproute2 (scripts/install-deps installs it)"
  exit 77
fi
cat >"$tmp/agent" <<'EOF'
#!/bin/sh
h="$1"
shift
exec ip netns exec "$h" unshare --uts sh -c "hostname $h; exec $*"
EOF
chmod +x "$tmp/agent"
printf '%s slots=2\n' "${hosts[@]}" >"$tmp/hostfile"
mpi=(mpirun --allow-run-as-root --mca plm_rsh_agent "$tmp/agent" --mca pml ob1 --mca btl tcp,self
  --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24")
check two-hosts-reachable 0 "${hosts[1]}" -- timeout 60 "${mpi[@]}" --hostfile "$tmp/hostfile" \
  -np 4 hostname

tiny_run_inputs "$tmp"
inputs=(--config "$tmp/tiny.json" --data "$tmp/corpus" --cache-dir "$tmp/cache" --sample-bytes 0
  --eval-batches 3)
common=("${inputs[@]}" --log-every 1)
figures() { sed -E 's/,"ms_per_step":.*$//' "$1/metrics.jsonl"; }

# 2 hosts x 2 ranks x --accum 1 = 1 process x --accum 4, bit for bit; record.json has the hosts.
check one-process 0 'done: steps 1\.\.3' -- "$keel" train "${common[@]}" --steps 3 --accum 4 \
  --set launch.threads=1 --run-dir "$tmp/one"
check two-hosts-train 0 'done: steps 1\.\.3' -- timeout 300 "${mpi[@]}" --hostfile "$tmp/hostfile" \
  -np 4 "$keel" train "${common[@]}" --steps 3 --run-dir "$tmp/mh"
check two-hosts-same-figures 0 '' -- diff <(figures "$tmp/one") <(figures "$tmp/mh")
check two-hosts-same-state 0 '' -- cmp "$tmp/one/checkpoints/step-3/model.safetensors" \
  "$tmp/mh/checkpoints/step-3/model.safetensors"
check two-hosts-recorded 0 "\"host\": ?\"${hosts[1]}\", ?\"local_rank\": ?1" -- \
  python3 -c "import json; print(json.dumps(json.load(open('$tmp/mh/record.json'))['ranks']))"

# The second host's ranks launched with another batch size: every rank stops before a step.
out=$(timeout 120 "${mpi[@]}" -np 2 --host "${hosts[0]}:2" "$keel" train "${common[@]}" --steps 3 \
  --run-dir "$tmp/mismatch" : -np 2 --host "${hosts[1]}:2" "$keel" train "${common[@]}" \
  --steps 3 --run-dir "$tmp/mismatch" --batch-size 4 2>&1)
code=$?
lines=$(grep -oE "\[dist\] the processes disagree on program 'train_step' before its first run .*ranks 2 \(host ${hosts[1]}\), 3 \(host ${hosts[1]}\) differ from rank 0: input [0-9]+ shape i64\[1,2,32\] -> i64\[1,4,32\]" <<<"$out" | wc -l)
if [[ $code -eq 0 ]] || [[ $code -eq 124 ]] || [[ $lines -ne 4 ]] || [[ -s "$tmp/mismatch/metrics.jsonl" ]]; then
  echo "FAIL two-hosts-mismatch: exit $code, $lines of 4 ranks named the difference:"
  grep -v "step [0-9]*/" <<<"$out" | tail -6
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi

# Rank 2 (the second host's first) stopped mid-run: each other rank names it and its host.
timeout 300 "${mpi[@]}" --hostfile "$tmp/hostfile" -np 4 "$keel" \
  --set spmd.collective_timeout_s=3 train "${inputs[@]}" --steps 1000000 --log-every 1000 \
  --eval-every 0 --ckpt-every 100 --total-steps 1000000 --run-dir "$tmp/stop" \
  >"$tmp/stop.out" 2>&1 &
launch=$!
waited=0
until compgen -G "$tmp/stop/checkpoints/step-*" >/dev/null || [[ $waited -ge 240 ]] ||
  ! kill -0 $launch 2>/dev/null; do
  sleep 0.5
  waited=$((waited + 1))
done
victim=$(pid_of_rank 2 "$tmp/stop")
start=$SECONDS
[[ -n "$victim" ]] && kill -STOP "$victim"
wait $launch
code=$?
took=$((SECONDS - start))
named=$(grep -oE "\[dist\] (rank [0-9]+ \(host [a-z0-9]+\), )*rank 2 \(host ${hosts[1]}\)(, rank [0-9]+ \(host [a-z0-9]+\))* did not arrive within 3 s: rank [0-9]+ \(host k[0-9]+h[01]\) was waiting in all_reduce over 'data' in program 'train_step'" "$tmp/stop.out" | sed -E 's/.*: rank ([0-9]+) .*/\1/' | sort -u | grep -vc '^2$')
if [[ -z "$victim" ]] || [[ $code -eq 0 ]] || [[ $took -gt 25 ]] || [[ $named -ne 3 ]]; then
  echo "FAIL two-hosts-stop: victim '$victim', exit $code after $took s, $named of 3 ranks named it:"
  grep -av "step [0-9]*/" "$tmp/stop.out" | tail -6
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi

echo "multihost: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
