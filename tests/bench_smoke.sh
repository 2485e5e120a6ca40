#!/usr/bin/env bash
# make bench's short version: every benchmark rejects an unknown option with an error, and runs
# once at its smallest settings and prints its figures (not timed here; speed is make bench's).
# Usage: bench_smoke.sh BENCH_DIR [quick|all]. quick (make test) leaves out the runs that compile
# whole models (step_bench, depth_bench, zero_bench, ep_bench, share_bench, parent_bench's
# rounds: 100 s of the 134 s here, 2 cores, 2026-12-02), which make stress runs with all and make
# bench at size; dp_bench's runs are dp_train's (below).
set -u
bench="$1"
depth=${2:-all}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
source "$(dirname "$0")/check.sh"

for b in gemm_bench step_bench ttfs_bench depth_bench attention_bench block_bench allreduce_bench; do
  check "$b unknown option" 109 "not expected.*--bogus" -- "$bench/$b" --bogus 1
  check "$b help" 0 "^Usage: .*$b \[OPTIONS\]" -- "$bench/$b" --help
done
check "step_bench bad preset" 105 "--presets: code-s not in" -- "$bench/step_bench" --presets code-s
check "step_bench bad precision" 105 "--precisions: f16 not in" -- "$bench/step_bench" --precisions f16
check "step_bench bad batch" 105 "--batch-size: Value -1 not in range 0 to 4096" -- \
  "$bench/step_bench" --batch-size -1
check "attention_bench bad length" 105 "--seqs: Value 0 not in range 1 to 65536" -- \
  "$bench/attention_bench" --seqs 0

check gemm_bench 0 "fc fwd \[BT,in\]x\[in,out\] +1 +2048 +1536 +384 +[0-9.]+ +[0-9.]+ +[0-9.]+" -- \
  "$bench/gemm_bench" --reps 1 --presets gpt2-s
check attention_bench 0 "T=64 B=32: fused [0-9.]+ ms, [0-9]+ MB; unfused [0-9.]+ ms" -- \
  "$bench/attention_bench" --reps 1 --seqs 64
# A host without bf16 products (forced here) refuses the bf16 run in one line and exits 0, so
# make bench goes on to its next benchmark.
check "attention_bench bf16 refused" 0 "T=64 B=32: fused refused: .*bf16_matmul is unavailable" -- \
  env ONEDNN_MAX_CPU_ISA=AVX2 "$bench/attention_bench" --reps 1 --seqs 64 --precision bf16
check block_bench 0 "n-gram memory \(8 tables of 4093 x 32\): gather [0-9.]+ ms, [0-9]+ MB; one-hot [0-9.]+ ms, [0-9]+ MB; gather/one-hot time [0-9.]+x" -- \
  bash -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; exit $rc' "$tmp/block.out" "$bench/block_bench" --reps 1 --seq 16
check block_bench-mamba 0 "^Mamba-2 \(state 64, heads of 32, chunks of 32\): chunked [0-9.]+ ms, [0-9]+ MB; sequential [0-9.]+ ms, [0-9]+ MB; chunked/sequential time [0-9.]+x" -- \
  cat "$tmp/block.out"
check block_bench-sparse 0 "^sparse attention \(16 keys \+ a window of 16\): fused [0-9.]+ ms, [0-9]+ MB; dense masked [0-9.]+ ms, [0-9]+ MB; fused/dense time [0-9.]+x" -- \
  cat "$tmp/block.out"
check ttfs_bench 0 "time_to_first_step code-s: cold [0-9.]+ s, warm [0-9.]+ s" -- \
  "$bench/ttfs_bench" --trials 1 --preset code-s
check allreduce_bench 0 "all_reduce 1\.0 MB f32 over 2 processes .*MPI_Allreduce [0-9.]+ ms, keel program [0-9.]+ ms" -- \
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bench/allreduce_bench" --mb 1 --reps 1
pb="$(dirname "$0")/../bench/parent_bench.sh"
src="$(dirname "$0")/.."
check "parent_bench bad base" 2 "no commit no-such-commit in .*; give --base a commit the clone has" -- \
  "$pb" "$bench/../keel" "$src" --base no-such-commit
check "parent_bench bad rounds" 2 "--rounds must be >= 1 and --steps >= 2 \(got '0', '8'\)" -- \
  "$pb" "$bench/../keel" "$src" --rounds 0
check "parent_bench unknown option" 2 "unknown option --bogus" -- "$pb" "$bench/../keel" "$src" --bogus 1
check "parent_bench no keel" 2 "KEEL $tmp/none is not an executable file" -- "$pb" "$tmp/none" "$src"

# The conformance suite's performance mode (make bench times every op).
conformance="$bench/../tests/conformance_test"
perf=$("$conformance" --perf --reps 3 --ops add,dot_general 2>&1)
check conformance-perf-exit 0 "^0$" -- echo "$?"
check conformance-perf 0 "^op add +ref +[0-9.]+ us \| cpu +[0-9.]+ us \([0-9.]+x ref\), compile [0-9]+ ms" -- \
  echo "$perf"
check conformance-perf-count 0 "^2 ops timed on ref and cpu, 3 calls each" -- echo "$perf"
check conformance-perf-bad-reps 2 "^\[conformance\] --reps: Value 0 not in range 1 to 100000; run 'conformance_test --perf --help'" -- \
  "$conformance" --perf --reps 0
check conformance-perf-bad-op 2 "^\[conformance\] --ops: 'nope' is not an op with a conformance case" -- \
  "$conformance" --perf --ops nope

if [[ $depth == quick ]]; then
  echo "bench smoke (quick): $passes passed, $fails failed"
  [[ $fails -eq 0 ]]
  exit
fi
# The AdamW figure is over the last preset's parameters: gpt2-s here, gpt2-m in make bench.
check step_bench 0 "gpt2-s f32 step of 1 x 256 tokens: [0-9]+ ms/step .* of oneDNN f32 matmul" -- \
  bash -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; exit $rc' "$tmp/step.out" \
  "$bench/step_bench" --steps 3 --presets gpt2-s --batch-size 1 --precisions f32
check step_bench-adamw 0 "^adamw gpt2-s: [0-9.]+ ms per update of [0-9.]+M parameters, in place" -- \
  cat "$tmp/step.out"
# dp_bench is make bench's only: its two runs (the default job as 1 process x 2 threads and as
# 2 processes) are dp_train's default-one and default-mp.
tiny_run_inputs "$tmp"
check zero_bench 0 "zero .*tiny.json, 2 processes x --accum 1 .*: stage 0 [0-9]+ tok/s, state [0-9]+ MB, predicted peak [0-9]+ MB, observed peak [0-9]+ MB a process; stage 1 [0-9]+ tok/s \([0-9.]+x\), state [0-9]+ MB \(0\.75x\), predicted [0-9]+ MB \([0-9.]+x\), observed [0-9]+ MB \([0-9.]+x\); stage 2 .*, state [0-9]+ MB \(0\.6[23]x\).*; stage 3 .*, state [0-9]+ MB \(0\.50x\)" -- \
  "$(dirname "$0")/../bench/zero_bench.sh" "$bench/../keel" "$tmp/tiny.json" 2
# Against a base already built (itself here, so no build): one round of each kind on the
# one-layer config. Its two cold runs compile the same programs: the second
# through the memo.
check parent_bench 0 "^step \(median of the run\) +[0-9]+ ms +[0-9]+ ms +[0-9.]+x$" -- \
  env KEEL_CPU_COMPILER="$src/tests/memo_cxx.sh" KEEL_MEMO_CXX_DIR="$tmp/memo" \
  bash -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; exit $rc' "$tmp/parent.out" "$pb" "$bench/../keel" \
  "$src" --base HEAD --base-keel "$bench/../keel" --rounds 1 --steps 2 --preset "$tmp/tiny.json"
check "parent_bench cold" 0 "^time to first step, cold cache +[0-9.]+ s +[0-9.]+ s +[0-9.]+x$" -- \
  cat "$tmp/parent.out"
check share_bench 0 "shared cores tiny: 2 runs on [0-9]+ cores .*GOMP_SPINCOUNT=1000 \(keel's bounded spin\): together [0-9.]+ s, one after another [0-9.]+ s" -- \
  "$(dirname "$0")/../bench/share_bench.sh" "$bench/../keel" 2 "$tmp/tiny.json" 3
check hybrid_bench 0 "^hybrid nam-s \([0-9.]+M parameters\) [0-9.]+ ms/step, code-s \([0-9.]+M\) [0-9.]+ ms/step, 16 x 128 tokens, median of 2 steps x 1 rounds each: nam-s/code-s [0-9.]+x$" -- \
  "$(dirname "$0")/../bench/hybrid_bench.sh" "$bench/../keel" 3 1
# Each added rule holds less a process: the ratio's first digit is 0.
check tp_bench 0 "rules \[\"heads=model\", \"mlp=model\", \"experts=model\"\]: [0-9]+ tok/s \([0-9.]+x\), state [0-9.]+ MB \(0\.[0-9]+x\)" -- \
  "$(dirname "$0")/../bench/tp_bench.sh" "$bench/../keel" nam-s 2
# Expert parallelism: stage 0 holds twice what stage 3 does, experts=data what stage 3 does (the
# experts are its slices), and the three runs train alike.
cat >"$tmp/moe.json" <<'JSON'
{"name": "code-s", "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2, "moe_every": 2, "moe": {"experts": 4, "top_k": 2, "hidden": 16}}
JSON
check ep_bench 0 "stage 0 [0-9]+ tok/s \([0-9.]+x\), state [0-9.]+ MB \(2\.00x\).*; stage 3 \+ experts=data [0-9]+ tok/s \([0-9.]+x\), state [0-9.]+ MB \(1\.00x\)" -- \
  bash -c '"$@" >"$0" 2>&1; rc=$?; cat "$0"; exit $rc' "$tmp/ep.out" \
  "$(dirname "$0")/../bench/ep_bench.sh" "$bench/../keel" "$tmp/moe.json" 2
check ep_bench-losses 0 "^  last loss: zero0 ([0-9.]+), zero3 \1, experts \1$" -- cat "$tmp/ep.out"
check depth_bench 0 "compile, scanned: +2 layers [0-9.]+ s, 3 layers" -- "$bench/depth_bench" --steps 3 \
  --depths 2 3

echo "bench smoke: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
