#!/usr/bin/env bash
# keel train on the CUDA backend without a GPU (cuda.emulate: its client, allocator, graph cache
# and executable cache as on a device, kernels on the host shim): the same losses as the CPU
# backend to the printed digit (scanned layers and a sparse attention layer too), and the CUDA
# bundle in the record; keel probe compiles, runs and
# reloads there, and a restart of keel train loads and compiles nothing; without a device and
# without cuda.emulate, one line. The host reads between log points are the device check's (make
# device-check-dry runs it emulated).
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
# A restart loads the CUDA executables from the cache (the cubin and launch table, format 5 with
# the step's donation) and compiles nothing; the losses stay the CPU's.
"$keel" "${cuda[@]}" "${run[@]}" --steps 2 --run-dir "$tmp/warm" --cache-dir "$tmp/cache" \
  >"$tmp/warm.out" 2>&1
check warm 0 'compiles 0, disk loads 3' -- cat "$tmp/warm.out"
check warm-losses-equal 0 '^$' -- diff <(losses "$tmp/cpu.out") <(losses "$tmp/warm.out")
# What changes the CUDA code is in the key: another product precision or architecture compiles.
for changed in cuda.matmul_precision=bf16 cuda.arch=sm_80; do
  check "key-${changed%%=*}" 0 'compiles 3, disk loads 0' -- "$keel" "${cuda[@]}" --set "$changed" \
    "${run[@]}" --steps 2 --run-dir "$tmp/changed" --cache-dir "$tmp/cache" --overwrite
done
check probe-emulated 0 'PASS  cuda.warm_restart +serialized .*reloaded without compiling' -- \
  "$keel" "${cuda[@]}" probe
# Scans (two scanned layers inside two scanned micro-batches): the body's launches replayed per
# iteration, carries alternating between two buffers, the same losses as the CPU's.
sed 's/"layers": 1/"layers": 2/' "$tmp/tiny.json" >"$tmp/two.json"
scan=(train --config "$tmp/two.json" --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0
  --steps 2 --accum 2 --set launch.layer_layout=scanned)
"$keel" "${scan[@]}" --run-dir "$tmp/scan-cpu" --cache-dir "$tmp/cache-cpu" >"$tmp/scan-cpu.out" 2>&1
"$keel" "${cuda[@]}" "${scan[@]}" --run-dir "$tmp/scan-cuda" --cache-dir "$tmp/cache" \
  >"$tmp/scan-cuda.out" 2>&1
check scanned-exit 0 '^0$' -- echo $?
check scanned-plan 0 'layers 0..1 as 2 iterations' -- cat "$tmp/scan-cuda.out"
check scanned-losses-equal 0 '^$' -- diff <(losses "$tmp/scan-cpu.out") <(losses "$tmp/scan-cuda.out")
check scanned-losses-printed 0 '^3$' -- sh -c "grep -cE '^(step|eval) ' '$tmp/scan-cuda.out'"
# Sparse attention (issue 51: the indexer, its top-k keys and the five sparse ops' kernels) in
# layer 0 of two: the same losses as the CPU's.
sed 's/"batch": 2}/"batch": 2, "sparse_attention_layers": [0], "sparse_attention": {"keys": 8, "window": 4, "indexer_heads": 2, "indexer_dim": 8}}/' \
  "$tmp/two.json" >"$tmp/sparse.json"
sparse=(train --config "$tmp/sparse.json" --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0
  --steps 2)
"$keel" "${sparse[@]}" --run-dir "$tmp/sparse-cpu" --cache-dir "$tmp/cache-cpu" \
  >"$tmp/sparse-cpu.out" 2>&1
"$keel" "${cuda[@]}" "${sparse[@]}" --run-dir "$tmp/sparse-cuda" --cache-dir "$tmp/cache" \
  >"$tmp/sparse-cuda.out" 2>&1
check sparse-exit 0 '^0$' -- echo $?
check sparse-losses-equal 0 '^$' -- diff <(losses "$tmp/sparse-cpu.out") <(losses "$tmp/sparse-cuda.out")
check sparse-losses-printed 0 '^3$' -- sh -c "grep -cE '^(step|eval) ' '$tmp/sparse-cuda.out'"
check sparse-indexer-kl 0 '"indexer_kl":' -- cat "$tmp/sparse-cuda/metrics.jsonl"
# GPT-2's MLP (GELU after a product plus a bias): its GELU and GELU's gradient as cuBLASLt's
# epilogues (cuda_test's CudaPresets counts them in every layer; these widths take them too: a
# wrong derivative in the emulated epilogue moved step 2's loss), the same losses as the CPU's.
sed 's/"name": "code-s"/"name": "gpt2-s"/' "$tmp/tiny.json" >"$tmp/gpt2.json"
gelu=(train --config "$tmp/gpt2.json" --data "$tmp/corpus" --eval-batches 1 --sample-bytes 0
  --steps 2)
"$keel" "${gelu[@]}" --run-dir "$tmp/gelu-cpu" --cache-dir "$tmp/cache-cpu" >"$tmp/gelu-cpu.out" 2>&1
"$keel" "${cuda[@]}" "${gelu[@]}" --run-dir "$tmp/gelu-cuda" --cache-dir "$tmp/cache" \
  >"$tmp/gelu-cuda.out" 2>&1
check gelu-exit 0 '^0$' -- echo $?
check gelu-losses-equal 0 '^$' -- diff <(losses "$tmp/gelu-cpu.out") <(losses "$tmp/gelu-cuda.out")
check gelu-losses-printed 0 '^3$' -- sh -c "grep -cE '^(step|eval) ' '$tmp/gelu-cuda.out'"
check no-device 1 'no CUDA device here: .*train on launch.backend = cpu meanwhile' -- \
  "$keel" --set launch.backend=cuda --set cuda.arch=sm_90 "${run[@]}" --steps 2 --run-dir "$tmp/none"

echo "cuda_train_test: $passes passed, $fails failed"
((fails == 0))
