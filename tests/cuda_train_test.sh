#!/usr/bin/env bash
# keel train on the CUDA backend without a GPU (cuda.emulate: its client, allocator, graph cache
# and executable cache as on a device, kernels on the host shim): the same losses as the CPU
# backend to the printed digit, the CUDA bundle in the record, and a warm restart that loads
# every program from the cache and compiles none, with no host read of the device between log
# points; keel probe compiles, runs and reloads there.
# make device-check runs the same on a GPU.
set -u
keel="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
tiny_run_inputs "$tmp"
run=(train --config "$tmp/tiny.json" --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0)
cuda=(--set launch.backend=cuda --set cuda.emulate=true --set cuda.arch=sm_90)
losses() { grep -E '^(step|eval) ' "$1" | sed -E 's/ +[0-9]+ ms\/step.*//'; }

"$keel" "${run[@]}" --steps 2 --run-dir "$tmp/cpu" --cache-dir "$tmp/cache-cpu" >"$tmp/cpu.out" 2>&1
"$keel" "${cuda[@]}" "${run[@]}" --steps 2 --run-dir "$tmp/cold" --cache-dir "$tmp/cache" \
  >"$tmp/cold.out" 2>&1
check cold-exit 0 '^0$' -- echo $?
check cold 0 'compiles 3, disk loads 0' -- cat "$tmp/cold.out"
check losses-equal 0 '^$' -- diff <(losses "$tmp/cpu.out") <(losses "$tmp/cold.out")
check losses-printed 0 '^3$' -- sh -c "grep -cE '^(step|eval) ' '$tmp/cold.out'"
check bundle 0 '"cuda.arch": "sm_90"' -- cat "$tmp/cold/record.json"
# Twice the steps, the same log points (the first and the last), evaluation and checkpoint: as
# many host reads of the device, so the steps between log points read none.
"$keel" "${cuda[@]}" "${run[@]}" --steps 4 --run-dir "$tmp/warm" --cache-dir "$tmp/cache" \
  >"$tmp/warm.out" 2>&1
check warm 0 'compiles 0, disk loads 3' -- cat "$tmp/warm.out"
reads() { grep -oE 'host_reads [0-9]+' "$1"; }
check host-reads-counted 0 '^host_reads [1-9]' -- reads "$tmp/cold.out"
check no-reads-between-log-points 0 '^$' -- diff <(reads "$tmp/cold.out") <(reads "$tmp/warm.out")
check probe-emulated 0 'PASS  cuda.warm_restart +serialized .*reloaded without compiling' -- \
  "$keel" "${cuda[@]}" probe
check no-device 1 'no CUDA device here: .*train on launch.backend = cpu meanwhile' -- \
  "$keel" --set launch.backend=cuda --set cuda.arch=sm_90 "${run[@]}" --steps 2 --run-dir "$tmp/none"

echo "cuda_train_test: $passes passed, $fails failed"
((fails == 0))
