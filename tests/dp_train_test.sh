#!/usr/bin/env bash
# Data parallel keel train under mpirun (issue 14): N processes with --accum K compute exactly
# what one process with --accum N*K does (losses, gradient norms, evaluation and checkpoint
# bytes), across thread counts and with the step split at layer barriers, and a checkpoint
# resumes at another number of processes.
# Usage: dp_train_test.sh KEEL
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tiny_run_inputs "$tmp"
data="$tmp/corpus"
cache="$tmp/cache"
common=(--config "$tmp/tiny.json" --data "$data" --cache-dir "$cache" --sample-bytes 0
  --eval-batches 3 --log-every 1)
one() { "$keel" train "${common[@]}" "$@"; }
mp() {
  local n=$1
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$keel" train "${common[@]}" "$@"
}

# The reference runs: one process, one thread, --accum M.
for m in 2 3 4 8 16; do
  check "one-accum-$m" 0 'done: steps 1\.\.3' -- one --steps 3 --accum $m --set launch.threads=1 \
    --run-dir "$tmp/one$m"
done
# N processes x K micro-batches, for N, K in {2, 4} x {1, 4} (2 x 2 is the split job's below).
for n in 2 4; do
  for k in 1 4; do
    check "mp-$n-$k" 0 "batch $((n * k))x2x32 tokens \($n processes" -- mp $n --steps 3 --accum $k \
      --run-dir "$tmp/mp$n-$k"
    same_run "mp-$n-$k=one-$((n * k))" "$tmp/one$((n * k))" "$tmp/mp$n-$k" 3
  done
done
# Three processes: bit for bit at --accum 1, and nothing said; at --accum 2 (each rank's pair
# not a subtree of one process's order over six) the launch says it matches only to rounding.
out=$(mp 3 --steps 3 --accum 1 --run-dir "$tmp/mp3-1" 2>&1)
if grep -q 'only to rounding' <<<"$out" || ! grep -q 'done: steps 1\.\.3' <<<"$out"; then
  echo "FAIL mp-3-1: a warning, or no finished run:"
  tail -5 <<<"$out"
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi
same_run "mp-3-1=one-3" "$tmp/one3" "$tmp/mp3-1" 3
check mp-3-2 0 'with --accum 2: results match one process with --accum 6 only to rounding' \
  -- mp 3 --steps 1 --accum 2 --run-dir "$tmp/mp3-2"
# The default job (code-s on the libstdc++ headers), data parallel: the same losses and state.
check default-one 0 'done: steps 1\.\.2' -- "$keel" train --steps 2 --accum 2 --eval-batches 1 \
  --log-every 1 --sample-bytes 0 --cache-dir "$cache" --run-dir "$tmp/default1"
check default-mp 0 'done: steps 1\.\.2' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train --steps 2 --eval-batches 1 --log-every 1 --sample-bytes 0 --cache-dir "$cache" \
  --run-dir "$tmp/default2"
same_run "default job: 2 processes = --accum 2" "$tmp/default1" "$tmp/default2" 2
# Threads do not change a bit: 1 process x 2 threads = 2 processes x 1 thread.
check one-2-threads 0 'done' -- one --steps 3 --accum 2 --set launch.threads=2 --run-dir "$tmp/thr"
same_run "threads=processes" "$tmp/thr" "$tmp/mp2-1" 3
# And in bf16, where the host has it: gpt2-s's weight gradients run in one-thread AMX tiles, whose
# oneDNN primitives once split their sums over K for the team that created them.
if "$keel" features | grep -Eq '^bf16_matmul +available'; then
  bf16=(--preset gpt2-s --set cpu.matmul_precision=bf16 --steps 2 --eval-batches 1
    --log-every 1 --sample-bytes 0 --cache-dir "$cache")
  check bf16-2-threads 0 'done: steps 1\.\.2' -- "$keel" train "${bf16[@]}" --accum 2 \
    --set launch.threads=2 --run-dir "$tmp/bf16-thr"
  check bf16-2-processes 0 'done: steps 1\.\.2' -- mpirun --allow-run-as-root --oversubscribe \
    -np 2 "$keel" train "${bf16[@]}" --set launch.threads=1 --run-dir "$tmp/bf16-mp"
  same_run "bf16 threads=processes" "$tmp/bf16-thr" "$tmp/bf16-mp" 2
else
  echo "SKIP bf16 threads=processes: $("$keel" features | grep '^bf16_matmul')"
fi
# The step split at layer barriers (two layers, one program each), data parallel: each process's
# micro-batches summed in the same tree, then all-reduced. 2 x 2 (a two-layer MoE model with an
# MTP head: its router loss and expert loads too; and an n-gram memory, whose segment hashes each
# process's own tokens) against --accum 4, and 3 x 1 against --accum 3.
cat >"$tmp/split.json" <<'JSON'
{"name": "code-s", "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2, "moe_every": 2, "moe": {"experts": 4, "top_k": 2, "hidden": 16},
 "mtp_weights": [0.3], "engram_layers": [1], "engram": {"heads": 2, "rows": 509, "dim": 16}}
JSON
split=(train --config "$tmp/split.json" --data "$data" --cache-dir "$cache" --sample-bytes 0
  --eval-batches 3 --log-every 1 --steps 3 --set launch.layer_layout=split:1)
check split-one-4 0 'split at layer barriers every 1 layers: 2 segments' -- "$keel" "${split[@]}" \
  --accum 4 --run-dir "$tmp/split-one4"
check split-mp-2-2 0 'done: steps 1\.\.3' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" "${split[@]}" --accum 2 --run-dir "$tmp/split-mp2"
same_run "split 2 processes x 2 = --accum 4" "$tmp/split-one4" "$tmp/split-mp2" 3
check split-moe-metrics 0 '"aux_loss"' -- grep -h '"step":3,"loss"' "$tmp/split-mp2/metrics.jsonl"
check split-one-3 0 'done: steps 1\.\.3' -- "$keel" "${split[@]}" --accum 3 \
  --run-dir "$tmp/split-one3"
check split-mp-3-1 0 'done: steps 1\.\.3' -- mpirun --allow-run-as-root --oversubscribe -np 3 \
  "$keel" "${split[@]}" --run-dir "$tmp/split-mp3"
same_run "split 3 processes = --accum 3" "$tmp/split-one3" "$tmp/split-mp3" 3

# Sparse attention's indexer KL over 2 processes: each divides by the whole step's query
# positions, so their all-reduced sum is one process's with --accum 2, bit for bit; and so is
# the dense warm-up before step 1 (--indexer-warmup), whose indexers the checkpoints hold, with
# the state whole or (ZeRO 3) in slices.
sed 's/"batch": 2}/"batch": 2, "sparse_attention_layers": [0], "sparse_attention": {"keys": 4, "window": 4}}/' \
  "$tmp/tiny.json" >"$tmp/sparse.json"
sparse=(train --config "$tmp/sparse.json" --data "$data" --cache-dir "$cache" --sample-bytes 0
  --eval-batches 1 --log-every 1 --steps 2 --indexer-warmup 2)
check sparse-one-2 0 'done: steps 1\.\.2' -- "$keel" "${sparse[@]}" --accum 2 --run-dir "$tmp/sparse-one2"
check sparse-mp-2-1 0 'done: steps 1\.\.2' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" "${sparse[@]}" --run-dir "$tmp/sparse-mp2"
same_run "sparse 2 processes = --accum 2" "$tmp/sparse-one2" "$tmp/sparse-mp2" 2
check sparse-zero3 0 'done: steps 1\.\.2' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" "${sparse[@]}" --set sharding.zero=3 --run-dir "$tmp/sparse-zero3"
same_run "sparse, ZeRO 3 over 2 processes = --accum 2" "$tmp/sparse-one2" "$tmp/sparse-zero3" 2
kl() { grep -o '"indexer_kl":[^,}]*' "$1/metrics.jsonl"; }
check sparse-kl-equal 0 '^2 same$' -- bash -c '[[ "$1" == "$2" ]] && echo "$(wc -l <<<"$1") same"' _ \
  "$(kl "$tmp/sparse-one2")" "$(kl "$tmp/sparse-mp2")"

# keel eval under mpirun: the processes split the whole-document windows, and the first prints
# the one-process figures once (the loss, the windows, the programs and the padding).
scored() { grep -E '^validation loss [0-9.]+, [0-9.]+ bits/byte over .* windows\); ' <<<"$1"; }
want=$(scored "$("$keel" --cache-dir "$cache" eval --checkpoint "$tmp/one4" --data "$data" 2>&1)")
for n in 2 3; do
  got=$(scored "$(mpirun --allow-run-as-root --oversubscribe -np $n "$keel" --cache-dir "$cache" \
    eval --checkpoint "$tmp/one4" --data "$data" 2>&1)")
  if [[ -z $want || $got != "$want" ]]; then
    echo "FAIL eval over $n processes: '$got', one process: '$want'"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
done

# keel sample under mpirun: prompts split over the processes, the first prints every sample in
# prompt order and the whole run's bucket figures; one prompt is sampled and printed once.
printf 'int main\n#include <\ntemplate<class T>\nstruct \n// a\n' >"$tmp/prompts.txt"
sample=(--cache-dir "$cache" sample --checkpoint "$tmp/one4" --bytes 12)
"$keel" "${sample[@]}" --prompts-file "$tmp/prompts.txt" >"$tmp/s1.out" 2>"$tmp/s1.err"
"$keel" "${sample[@]}" --prompt 'int ' >"$tmp/p1.out" 2>/dev/null
for n in 2 3; do
  mpirun --allow-run-as-root --oversubscribe -np $n "$keel" "${sample[@]}" \
    --prompts-file "$tmp/prompts.txt" >"$tmp/s$n.out" 2>"$tmp/s$n.err"
  mpirun --allow-run-as-root --oversubscribe -np $n "$keel" "${sample[@]}" --prompt 'int ' \
    >"$tmp/p$n.out" 2>/dev/null
  if cmp -s "$tmp/s1.out" "$tmp/s$n.out" && cmp -s "$tmp/p1.out" "$tmp/p$n.out" &&
    [[ $(grep -c '^sample_prompts:' "$tmp/s$n.err") -eq 1 ]] &&
    [[ $(grep '^sample_prompts:' "$tmp/s$n.err") == "$(grep '^sample_prompts:' "$tmp/s1.err")" ]]; then
    passes=$((passes + 1))
  else
    echo "FAIL sample over $n processes differs from one process's:"
    diff "$tmp/s1.out" "$tmp/s$n.out" | head -4
    diff "$tmp/p1.out" "$tmp/p$n.out" | head -4
    grep '^sample_prompts:' "$tmp/s1.err" "$tmp/s$n.err"
    fails=$((fails + 1))
  fi
done

# Evaluation split over ranks (3 batches over 2 and 4 processes) is the one-process figure.
check eval-agrees 0 'val_bits_per_byte' -- grep -h val_bits_per_byte "$tmp/mp2-1/metrics.jsonl"

# Elastic resume: 2 -> 1, 1 -> 4, 4 -> 2 processes continue the uninterrupted run exactly.
check resume-base 0 'done' -- one --steps 4 --accum 4 --ckpt-every 2 --eval-every 2 \
  --run-dir "$tmp/whole"
resume() {
  local name=$1 first=$2 second=$3
  local dir="$tmp/$name"
  local k1=$((4 / first)) k2=$((4 / second))
  launch() { if [[ $1 -eq 1 ]]; then one "${@:2}"; else mp "$@"; fi; }
  check "$name-first" 0 'done: steps 1\.\.2' -- launch "$first" --steps 2 --total-steps 4 \
    --accum $k1 --ckpt-every 2 --eval-every 2 --run-dir "$dir"
  check "$name-resume" 0 'resumed from .*step-2' -- launch "$second" --steps 4 --accum $k2 \
    --ckpt-every 2 --eval-every 2 --run-dir "$dir" --resume
  same_run "$name" "$tmp/whole" "$dir" 4
}
resume resume-2-1 2 1
resume resume-1-4 1 4
resume resume-4-2 4 2

# The record holds every rank (gathered), and the other ranks' compile logs have their own file.
check record-ranks 0 '"rank": 1' -- cat "$tmp/mp2-1/record.json"
check rank-log 0 'compiles.rank1.jsonl' -- ls "$tmp/mp2-1"
# A fresh run's other ranks start their own logs anew (a host whose run directory is its own
# may hold an earlier run's, which the first process's claim cannot see).
mkdir -p "$tmp/stale-log"
echo '{"stale": true}' >"$tmp/stale-log/compiles.rank1.jsonl"
mp 2 --steps 1 --run-dir "$tmp/stale-log" >/dev/null 2>&1
check rank-log-fresh 0 '"function"' -- cat "$tmp/stale-log/compiles.rank1.jsonl"
[[ $(grep -c stale "$tmp/stale-log/compiles.rank1.jsonl") == 0 ]] ||
  { echo "FAIL rank-log-fresh: a fresh run appended to an earlier run's compiles.rank1.jsonl"; fails=$((fails + 1)); }
# The mesh is in the key, and keel explain names it as the difference.
check explain-mesh 0 'codegen option mesh changed: data=1 -> data=2' -- "$keel" explain "$tmp/mp2-1"
check record-threads 0 '"threads": 1,' -- cat "$tmp/mp2-1/record.json"
check record-mesh 0 '"mesh": "data=4"' -- cat "$tmp/mp4-1/record.json"
# Memory per physical device: the host's entry sums its 4 ranks' peaks, under what a process
# there may use (a cgroup's cap, MemTotal at most).
check record-memory-per-host 0 '^1 \[0, 1, 2, 3\] True True$' -- python3 -c "
import json; r = json.load(open('$tmp/mp4-1/record.json'))
h = r['memory']['hosts']
print(len(h), h[0]['ranks'],
      h[0]['observed_peak_bytes'] == sum(x['observed_peak_bytes'] for x in r['ranks']) > 0,
      h[0]['physical_memory_bytes'] >= h[0]['memory_limit_bytes'] > h[0]['predicted_peak_bytes'] > 0)"
# One trace for the launch: a track group per rank, each with its steps, named after its host.
check trace-per-rank 0 '^\[0, 1, 2, 3\] True$' -- python3 -c "
import json; t = json.load(open('$tmp/mp4-1/trace.json'))['traceEvents']
pids = sorted({e['pid'] for e in t if e.get('cat') == 'step'})
names = [e['args']['name'] for e in t if e['ph'] == 'M' and e['name'] == 'process_name']
print(pids, sorted(names)[3].startswith('rank 3 on '))"
# Every step's line holds each rank's busy time (its step, less its waits for the others); a
# one-process run's lines have none.
check busy-per-rank 0 '^True 0$' -- python3 -c "
import json
mp = [json.loads(l) for l in open('$tmp/mp4-1/metrics.jsonl') if '\"loss\"' in l]
one = [json.loads(l) for l in open('$tmp/one4/metrics.jsonl') if '\"loss\"' in l]
print(len(mp) == 3 and all(len(l['rank_busy_ms']) == 4 and min(l['rank_busy_ms']) > 0 for l in mp),
      sum('rank_busy_ms' in l for l in one))"
# A mesh that does not match the world is refused at init, on every rank.
check mesh-mismatch 2 'mesh data=4 has 4 devices but this launch has 2 process' -- mp 2 \
  --set spmd.enabled=true --set spmd.mesh_shape=4 --steps 1 --run-dir "$tmp/bad"
# A resume that changes the global batch is refused, naming both.
check resume-other-batch 2 'accum 4\) than this run .*accum 2 = --accum 1 x 2 processes' -- mp 2 --steps 6 \
  --accum 1 --run-dir "$tmp/whole" --resume

# One rank failing after MPI started ends the launch at once (MPI_Abort) with its exit code,
# instead of leaving the other rank in a collective.
check one-rank-fails 2 'no such file or directory' -- timeout 120 mpirun --allow-run-as-root \
  --oversubscribe -np 1 "$keel" train "${common[@]}" --steps 2 --run-dir "$tmp/fail" : \
  -np 1 "$keel" train --config "$tmp/tiny.json" --data "$tmp/none" --steps 2 --run-dir "$tmp/fail"

echo "dp_train_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
