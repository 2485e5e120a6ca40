#!/usr/bin/env bash
# keel train with the GPT blocks split over the mesh axis "model" (tensor parallelism, issue 50):
#   - model = 2 equals one process within rounding (a row-parallel product splits its sum): the
#     metrics and every tensor of both checkpoint files within a relative 1e-4 of the largest;
#   - at a fixed model size the data axis changes no bit: data=2 x model=2 equals data=1 x
#     model=2 with twice the accumulation (metrics, and cmp of both checkpoint files);
#   - nor does ZeRO over data beside it: stages 1 and 3 on data=2 x model=2 equal stage 0;
#   - checkpoints are global: a model=2 run resumes on one process, and a one-process run at
#     model=2 and at data=2 x model=2 with ZeRO stage 3, each continuing as the run that never
#     stopped does;
#   - record.json gives each split tensor's global and local shape, and the state bytes each
#     process holds; the state pre-check counts the split;
#   - sharding.rules chooses the split: heads alone, on a model with MoE layers (experts whole),
#     equals one process too; the default rules split an all-MoE model's attention alone;
#   - issue 51's blocks: a sparse attention layer and a Mamba-2 mixer split their heads (the
#     indexer whole), an n-gram memory stays whole unless the memory rule splits its table's
#     rows, and model = 2 equals one process within rounding either way;
#   - the experts rule splits the MoE layers' routed experts, the vocab rule the tied embedding's
#     rows: model = 2 equals one process within rounding (unrolled, scanned and in a split step),
#     and the data axis with ZeRO stage 3 changes no bit;
#   - a scanned layout: stacked shards, equal to one process within rounding, bitwise across
#     data sizes and ZeRO stages, its checkpoint resumed unrolled;
#   - a split step (split:1): equal to one process within rounding, bitwise across data sizes
#     and ZeRO stages;
#   - a model size that does not divide the kv heads, and any other axis over more than one
#     device are refused in one line.
# Usage: tp_train_test.sh KEEL
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tiny_run_inputs "$tmp"  # code-s's flavour: 4 heads over 2 kv heads, SwiGLU, no biases
base=(--config "$tmp/tiny.json" --data "$tmp/corpus" --cache-dir "$tmp/cache" --eval-batches 2
  --log-every 1 --ckpt-every 2 --eval-every 2 --total-steps 6)
common=("${base[@]}" --sample-bytes 0)
one() { "$keel" train "${common[@]}" --set launch.threads=1 "$@"; }
# mesh DATA MODEL ARGS...: data x model over DATA * MODEL processes.
mesh() {
  local d=$1 m=$2
  shift 2
  mpirun --allow-run-as-root --oversubscribe -np $((d * m)) "$keel" train "${common[@]}" \
    --set spmd.enabled=true --set spmd.mesh_axes=data,model --set "spmd.mesh_shape=$d,$m" "$@"
}
# near_run NAME A B STEP: metrics and both checkpoint files of step STEP within 1e-4 (relative to
# each tensor's largest element).
near_run() {
  local name=$1 a=$2 b=$3 step=$4 out
  out=$(python3 - "$a" "$b" "$step" <<'PY'
import array, json, struct, sys
a, b, step = sys.argv[1], sys.argv[2], sys.argv[3]
def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = {}
    for k, v in head.items():
        if k != '__metadata__':
            x = array.array('f'); x.frombytes(data[v['data_offsets'][0]:v['data_offsets'][1]])
            out[k] = (v['shape'], x)
    return out
worst = (0.0, '')
for f in ('model.safetensors', 'optimizer.safetensors'):
    x = tensors(f'{a}/checkpoints/step-{step}/{f}'); y = tensors(f'{b}/checkpoints/step-{step}/{f}')
    if x.keys() != y.keys(): sys.exit(f'{f}: tensors {sorted(set(x) ^ set(y))} in one only')
    for k in x:
        if x[k][0] != y[k][0]: sys.exit(f'{f}: {k} is {x[k][0]} and {y[k][0]}')
        big = max(abs(v) for v in x[k][1]) or 1.0
        d = max(abs(p - q) for p, q in zip(x[k][1], y[k][1])) / big
        worst = max(worst, (d, f'{f} {k}'))
def metrics(run):
    return [[l.get(k) for k in ('step', 'loss', 'grad_norm', 'val_loss')]
            for l in map(json.loads, open(f'{run}/metrics.jsonl')) if 'loss' in l or 'val_loss' in l]
ma, mb = metrics(a), metrics(b)
if len(ma) != len(mb) or not ma: sys.exit(f'metrics: {len(ma)} and {len(mb)} lines')
for p, q in zip(ma, mb):
    for u, v in zip(p, q):
        if (u is None) != (v is None) or (u is not None and abs(u - v) > 1e-4 * max(abs(u), 1)):
            sys.exit(f'metrics: {p} and {q}')
if worst[0] > 1e-4: sys.exit(f'{worst[1]} off by {worst[0]:.3g} of its largest element')
print(f'near: worst {worst[0]:.2g} ({worst[1]})')
PY
  2>&1) && { passes=$((passes + 1)); echo "$name: $out"; return; }
  echo "FAIL $name: $out"
  fails=$((fails + 1))
}

check whole 0 'done: steps 1\.\.4' -- one --steps 4 --accum 2 --run-dir "$tmp/whole"
check model2 0 'done: steps 1\.\.4' -- mesh 1 2 --steps 4 --accum 2 --run-dir "$tmp/model2"
near_run "model2~whole" "$tmp/whole" "$tmp/model2" 4
# sharding.rules with heads alone, on a model with an MoE layer and an MTP head: the attention
# split, the dense MLPs and the experts whole on every process.
cat >"$tmp/moe.json" <<'JSON'
{"name": "code-s", "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2, "moe_every": 2, "moe": {"experts": 4, "top_k": 2, "hidden": 16},
 "mtp_weights": [0.3]}
JSON
# A tenth of the learning rate: AdamW's first steps move a weight whose gradient is near zero by
# about lr whatever the gradient's size, so a sign that rounding flips shows as lr (6.5e-5 of the
# largest element at 4e-3, 7.1e-6 at 4e-4).
moe=("${common[@]/#$tmp\/tiny.json/$tmp/moe.json}" --steps 4 --accum 2 --lr 4e-4)
check moe-whole 0 'done: steps 1\.\.4' -- "$keel" train "${moe[@]}" --set launch.threads=1 \
  --run-dir "$tmp/moe-whole"
check moe-heads 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${moe[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --set sharding.rules=heads=model --run-dir "$tmp/moe-heads"
near_run "moe-heads~whole" "$tmp/moe-whole" "$tmp/moe-heads" 4
check heads-only-explain 0 'h\.0\.attn\.c_attn\.weight +\[32, 64\] +model/2 \[32, 32\]' -- "$keel" explain "$tmp/moe-heads"
check heads-only-mlp-whole 0 'h\.0\.mlp\.c_fc\.weight +\[32, 128\] +whole +whole +whole' -- "$keel" explain "$tmp/moe-heads"
check heads-only-experts-whole 0 'h\.1\.moe\.[a-z_.]+ +\[[0-9, ]+\] +whole +whole +whole' -- "$keel" explain "$tmp/moe-heads"
# The experts rule splits the MoE layer's routed experts: each process runs its two of the four
# on the tokens routed to them, and the outputs are all-reduced over "model". Beside it, data=2
# with ZeRO stage 3 slices each process's experts further.
check moe-experts 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${moe[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --set 'sharding.rules=["heads=model", "mlp=model", "experts=model"]' \
  --run-dir "$tmp/moe-experts"
near_run "moe-experts~whole" "$tmp/moe-whole" "$tmp/moe-experts" 4
check experts-explain 0 'h\.1\.moe\.experts\.c_fc\.weight +\[4, 32, 32\] +model/2 \[2, 32, 32\]' -- \
  "$keel" explain "$tmp/moe-experts"
check experts-router-whole 0 'h\.1\.moe\.router\.weight +\[32, 4\] +whole +whole +whole' -- \
  "$keel" explain "$tmp/moe-experts"
moe_data2=("${common[@]/#$tmp\/tiny.json/$tmp/moe.json}" --steps 4 --lr 4e-4)
check moe-experts-data2-zero3 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 4 "$keel" train "${moe_data2[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=2,2 --set sharding.zero=3 \
  --set 'sharding.rules=["heads=model", "mlp=model", "experts=model"]' \
  --run-dir "$tmp/moe-experts-data2"
same_run "experts: data2 x model2 zero 3 = data1 x model2 x accum 2" "$tmp/moe-experts" \
  "$tmp/moe-experts-data2" 4
# The vocab rule splits the tied embedding's rows: each process reads the tokens' rows it holds,
# computes its block of the logits, and the losses (the MTP head's too) all-reduce the softmax's
# max, sum and target logit over "model".
check moe-vocab 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${moe[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --set 'sharding.rules=["heads=model", "vocab=model"]' \
  --run-dir "$tmp/moe-vocab"
near_run "moe-vocab~whole" "$tmp/moe-whole" "$tmp/moe-vocab" 4
check vocab-explain 0 'wte\.weight +\[256, 32\] +model/2 \[128, 32\]' -- "$keel" explain "$tmp/moe-vocab"
# Evaluation too: its nats come from each process's block of the logits (the train step's
# losses), so neither program gathers anything over "model".
check vocab-no-gather 0 '^ok$' -- python3 -c "
import glob, json, re
seen = set()
for f in glob.glob('$tmp/moe-vocab/programs/*.json'):
    r = json.load(open(f))
    if r['function'] in ('eval_step', 'train_step'):
        seen.add(r['function'])
        assert not re.search(r'all_gather[^\n]*axis=\"model\"', r['graph']), r['function']
assert seen == {'eval_step', 'train_step'}, seen
print('ok')"
# Both rules on a scanned stack of 2 x [dense, MoE]: the stacked experts split one dimension in.
sed 's/"layers": 2/"layers": 4/' "$tmp/moe.json" >"$tmp/moe4.json"
moe4=("${moe[@]/#$tmp\/moe.json/$tmp/moe4.json}" --set launch.layer_layout=scanned)
check moe4-whole 0 'done: steps 1\.\.4' -- "$keel" train "${moe4[@]}" --set launch.threads=1 \
  --run-dir "$tmp/moe4-whole"
check moe4-experts-vocab 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${moe4[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 \
  --set 'sharding.rules=["heads=model", "mlp=model", "experts=model", "vocab=model"]' \
  --run-dir "$tmp/moe4-model2"
near_run "scanned: experts vocab model2~whole" "$tmp/moe4-whole" "$tmp/moe4-model2" 4
check scanned-experts-explain 0 'scan\.0\.1\.moe\.experts\.c_fc\.weight +\[2, 4, 32, 32\] +model/2 \[2, 2, 32, 32\]' -- \
  "$keel" explain "$tmp/moe4-model2"
# Issue 51's blocks: layer 0's sparse attention splits its heads (its indexer whole, learning from
# the heads' mean weights all-reduced over "model"); layer 1's Mamba-2 mixer splits its heads
# and state columns; its n-gram memory and experts are whole on every process. Both runs start with DSA's dense warm-up (its dense
# attention split over "model" too, its target all-reduced), in the checkpoints' indexers.
sed 's/"mtp_weights": \[0.3\]}/"mtp_weights": [0.3], "sparse_attention_layers": [0], "sparse_attention": {"keys": 8, "window": 4, "indexer_heads": 2, "indexer_dim": 8}, "engram_layers": [1], "engram": {"heads": 2, "rows": 509, "dim": 16}, "mamba_layers": [1], "mamba": {"state": 16, "head_dim": 16, "chunk": 16}}/' \
  "$tmp/moe.json" >"$tmp/hybrid.json"
# A quarter of moe's learning rate: AdamW's first steps move a memory row whose gradient is
# near zero by about lr whatever its sign, so a sign that rounding flips shows as lr.
hybrid_lr=("${moe[@]/#4e-4/1e-4}")
hybrid=("${hybrid_lr[@]/#$tmp\/moe.json/$tmp/hybrid.json}" --indexer-warmup 2)
check hybrid-whole 0 'done: steps 1\.\.4' -- "$keel" train "${hybrid[@]}" --set launch.threads=1 \
  --run-dir "$tmp/hybrid-whole"
check hybrid-model2 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${hybrid[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --run-dir "$tmp/hybrid-model2"
near_run "hybrid-model2~whole" "$tmp/hybrid-whole" "$tmp/hybrid-model2" 4
# The same blocks in a split step (no warm-up: a split step refuses it): the MoE sums, the MTP
# head's split MLP and the memory's tokens cross the segment programs.
hybrid_split=("${hybrid_lr[@]/#$tmp\/moe.json/$tmp/hybrid.json}" --set launch.layer_layout=split:1)
check hybrid-split-whole 0 'done: steps 1\.\.4' -- "$keel" train "${hybrid_split[@]}" \
  --set launch.threads=1 --run-dir "$tmp/hybrid-split-whole"
check hybrid-split-model2 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${hybrid_split[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --run-dir "$tmp/hybrid-split-model2"
near_run "hybrid-split-model2~whole" "$tmp/hybrid-split-whole" "$tmp/hybrid-split-model2" 4
check hybrid-indexer-whole 0 'h\.0\.attn\.indexer\.query\.weight +\[32, 16\] +whole +whole +whole' -- "$keel" explain "$tmp/hybrid-model2"
check hybrid-split-attention 0 'h\.0\.attn\.c_attn\.weight +\[32, 64\] +model/2 \[32, 32\]' -- "$keel" explain "$tmp/hybrid-model2"
check hybrid-mamba-split 0 'h\.1\.mamba\.in_proj\.weight +\[32, 164\] +model/2 \[32, 82\]' -- "$keel" explain "$tmp/hybrid-model2"
check hybrid-engram-whole 0 'h\.1\.engram\.table +\[2036, 16\] +whole +whole +whole' -- "$keel" explain "$tmp/hybrid-model2"
# The memory rule splits the n-gram memory's table by rows: each process reads the rows it holds
# and the reads are all-reduced over "model".
check hybrid-memory-model2 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${hybrid[@]}" --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=1,2 --set 'sharding.rules=["heads=model", "mlp=model", "memory=model"]' \
  --run-dir "$tmp/hybrid-memory-model2"
near_run "hybrid-memory-model2~whole" "$tmp/hybrid-whole" "$tmp/hybrid-memory-model2" 4
check hybrid-engram-split 0 'h\.1\.engram\.table +\[2036, 16\] +model/2 \[1018, 16\]' -- \
  "$keel" explain "$tmp/hybrid-memory-model2"
check memory-nothing 2 "sharding\.rules maps memory to mesh axis 'model', which shards nothing here: the model has no n-gram memory layer" \
  -- mesh 1 2 --steps 1 --set 'sharding.rules=["heads=model", "memory=model"]' --run-dir "$tmp/bad-memory"
check experts-nothing 2 "sharding\.rules maps experts to mesh axis 'model', which shards nothing here: the model has no MoE layer" \
  -- mesh 1 2 --steps 1 --set 'sharding.rules=["heads=model", "experts=model"]' --run-dir "$tmp/bad-experts"
check data2-model2 0 'done: steps 1\.\.4' -- mesh 2 2 --steps 4 --run-dir "$tmp/data2"
same_run "data2 x model2 = data1 x model2 x accum 2" "$tmp/model2" "$tmp/data2" 4
# ZeRO over data splits each process's shards further (stage 1 the moments, 3 the reduced
# gradients and the parameters too; stage 2's sliced norm is stage 3's): the same bits.
for z in 1 3; do
  check "data2-model2-zero$z" 0 'done: steps 1\.\.4' -- mesh 2 2 --steps 4 --set sharding.zero=$z \
    --run-dir "$tmp/zero$z"
  same_run "zero $z = zero 0 on data2 x model2" "$tmp/data2" "$tmp/zero$z" 4
done
# --init-from: each process takes its shards over model and its slices over data of the
# checkpoint's parameters, so data2 x model2 at stage 3 starts as one process does.
check init-from-one 0 'init from .*step-2: [0-9]+ parameters copied' -- one --steps 2 --accum 2 \
  --init-from "$tmp/whole/checkpoints/step-2" --run-dir "$tmp/init-one"
check init-from-data2-model2 0 'init from .*step-2: [0-9]+ parameters copied' -- mesh 2 2 \
  --steps 2 --set sharding.zero=3 --init-from "$tmp/whole/checkpoints/step-2" \
  --run-dir "$tmp/init-zero3"
near_run "init-from: data2 x model2 zero 3 ~ one" "$tmp/init-one" "$tmp/init-zero3" 2

# The state each process holds: the split tensors' shards (code-s: every block matrix).
check record-split 0 '^\[32,128\] \[32,64\] 2 2 whole$' -- jq -r '.state as $s |
  ($s.tensors[] | select(.name == "h.0.mlp.c_fc.weight")) as $t |
  ($s.tensors[] | select(.name == "wte.weight")) as $e |
  "\($t.shape | tojson) \($t.parameter.local_shape | tojson) \($s.model_processes) \($t.moments.processes) \($e.parameter.split)"' \
  "$tmp/model2/record.json"
check record-bytes 0 '^true$' -- jq \
  '.state.bytes_per_process == ([.state.tensors[].bytes_per_process] | add) and .ranks[1].state_bytes.total == .state.bytes_per_process and ([.ranks[].state_bytes | .held == {parameters, optimizer}] | all)' \
  "$tmp/model2/record.json"
check explain-split 0 'h\.0\.mlp\.c_fc\.weight +\[32, 128\] +model/2 \[32, 64\] +model/2 \[32, 64\] +model/2 \[32, 64\] +32768' \
  -- "$keel" explain "$tmp/model2"
check explain-header 0 'the data axis of 1 processes, the blocks split over 2 processes of model\): 0\.206 MB a process' \
  -- "$keel" explain "$tmp/model2"
# With ZeRO 3 beside it each process holds the flat half of its shard; the norms (not split over
# "model") half of the whole tensor.
check explain-zero3 0 'h\.0\.mlp\.c_fc\.weight +\[32, 128\] +model,data/4 \[1024\] +model,data/4 \[1024\] +model,data/4 \[1024\] +16384' \
  -- "$keel" explain "$tmp/zero3"
check explain-zero3-norm 0 'h\.0\.ln_1\.weight +\[32\] +data/2 \[16\] +data/2 \[16\] +data/2 \[16\] +256' \
  -- "$keel" explain "$tmp/zero3"
check record-bytes-zero3 0 '^true$' -- jq \
  '.state.bytes_per_process == ([.state.tensors[].bytes_per_process] | add) and .ranks[3].state_bytes.total == .state.bytes_per_process and ([.ranks[].state_bytes | .held == {parameters, optimizer}] | all)' \
  "$tmp/zero3/record.json"

# Global checkpoints: model=2 resumed on one process, one process resumed at model=2.
check straight 0 'done: steps 1\.\.6' -- one --steps 6 --accum 2 --run-dir "$tmp/straight"
cp -r "$tmp/model2" "$tmp/tp-to-one"
check tp-to-one 0 'resumed from .*step-4 \(step 4\)' -- one --steps 6 --accum 2 --resume \
  --run-dir "$tmp/tp-to-one"
near_run "tp-to-one~straight" "$tmp/straight" "$tmp/tp-to-one" 6
cp -r "$tmp/whole" "$tmp/one-to-tp"
check one-to-tp 0 'resumed from .*step-4 \(step 4\)' -- mesh 1 2 --steps 6 --accum 2 --resume \
  --run-dir "$tmp/one-to-tp"
near_run "one-to-tp~straight" "$tmp/straight" "$tmp/one-to-tp" 6
# data=2 x --accum 1 is data=1 x --accum 2 (above): the same checkpoint resumed with every part
# split over both axes.
cp -r "$tmp/whole" "$tmp/one-to-zero3"
check one-to-zero3 0 'resumed from .*step-4 \(step 4\)' -- mesh 2 2 --steps 6 --resume \
  --set sharding.zero=3 --run-dir "$tmp/one-to-zero3"
near_run "one-to-zero3~straight" "$tmp/straight" "$tmp/one-to-zero3" 6
# The final sample: every process samples from its slices and shards, gathered over "data"
# (ZeRO 3) inside the program, its blocks split over "model".
check sample 0 '^8$' -- bash -c "mpirun --allow-run-as-root --oversubscribe -np 4 '$keel' train \
  ${base[*]} --steps 1 --sample-bytes 8 --set spmd.enabled=true --set spmd.mesh_axes=data,model \
  --set spmd.mesh_shape=2,2 --set sharding.zero=3 --run-dir '$tmp/sample' >/dev/null 2>&1 &&
  jq -r '.sample | length' '$tmp/sample/record.json'"
# Without ZeRO too every process samples (a program that exchanges data is agreed on by the whole
# launch, so a group sampling alone would wait for the others).
check sample-model-group 0 '^8$' -- bash -c "mpirun --allow-run-as-root --oversubscribe -np 4 \
  '$keel' train ${base[*]} --steps 1 --sample-bytes 8 --set spmd.enabled=true \
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=2,2 --run-dir '$tmp/sample-group' \
  >/dev/null 2>&1 && jq -r '.sample | length' '$tmp/sample-group/record.json'"
# With the vocab rule the sampler gathers each process's block of the logits.
check sample-vocab 0 '^8$' -- bash -c "mpirun --allow-run-as-root --oversubscribe -np 4 \
  '$keel' train ${base[*]} --steps 1 --sample-bytes 8 --set spmd.enabled=true \
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=2,2 --set sharding.zero=3 \
  --set 'sharding.rules=[\"heads=model\", \"vocab=model\"]' --run-dir '$tmp/sample-vocab' \
  >/dev/null 2>&1 && jq -r '.sample | length' '$tmp/sample-vocab/record.json'"
# The state pre-check counts the split: under a budget of 500,000 bytes for 2 processes, the
# whole state (280,064 bytes each) is refused before tracing; model=2 (206,336 each) passes it,
# to the programs' own check.
check budget-data2 2 'above 0\.5 MiB \(launch\.memory_budget_bytes\); stopped before tracing' -- \
  mesh 2 1 --steps 1 --set launch.memory_budget_bytes=500000 --run-dir "$tmp/budget1"
check budget-model2 1 "'[a-z_]+' is predicted to need .* launch\.memory_budget_bytes is 500000 per host" -- \
  mesh 1 2 --steps 1 --set launch.memory_budget_bytes=500000 --run-dir "$tmp/budget2"

# A scanned stack (launch.layer_layout = scanned) of 4 layers: the stacked tensors of split
# layers split one dimension further in ([4, 32, 64] as [4, 32, 32]). model=2 equals one
# process within rounding; data=2 beside it with ZeRO 3 changes no bit; its global checkpoint
# resumes unrolled on one process; the sample gathers the stack whole.
sed 's/"layers": 1,/"layers": 4,/' "$tmp/tiny.json" >"$tmp/deep.json"
deep_base=("${base[@]/#$tmp\/tiny.json/$tmp/deep.json}")
deep=("${deep_base[@]}" --sample-bytes 0)
check deep-whole 0 'done: steps 1\.\.4' -- "$keel" train "${deep[@]}" --steps 4 --accum 2 \
  --set launch.threads=1 --run-dir "$tmp/deep-whole"
check deep-model2-scanned 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${deep[@]}" --steps 4 --accum 2 --set spmd.enabled=true \
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=1,2 --set launch.layer_layout=scanned \
  --run-dir "$tmp/deep-scanned"
near_run "model2-scanned~whole" "$tmp/deep-whole" "$tmp/deep-scanned" 4
check deep-scanned-explain 0 'scan\.0\.0\.attn\.c_attn\.weight +\[4, 32, 64\] +model/2 \[4, 32, 32\]' \
  -- "$keel" explain "$tmp/deep-scanned"
check deep-data2-zero3-scanned 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root \
  --oversubscribe -np 4 "$keel" train "${deep_base[@]}" --steps 4 --set spmd.enabled=true \
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=2,2 --set launch.layer_layout=scanned \
  --set sharding.zero=3 --sample-bytes 8 --run-dir "$tmp/deep-zero3"
same_run "scanned: data2 x model2, ZeRO 3 = data1 x model2 x accum 2" "$tmp/deep-scanned" \
  "$tmp/deep-zero3" 4
check deep-sample 0 '^8$' -- jq -r '.sample | length' "$tmp/deep-zero3/record.json"
check deep-straight 0 'done: steps 1\.\.6' -- "$keel" train "${deep[@]}" --steps 6 --accum 2 \
  --set launch.threads=1 --run-dir "$tmp/deep-straight"
cp -r "$tmp/deep-scanned" "$tmp/deep-to-one"
check deep-scanned-to-one 0 'resumed from .*step-4 \(step 4\)' -- "$keel" train \
  "${deep[@]}" --steps 6 --accum 2 --resume --set launch.threads=1 --run-dir "$tmp/deep-to-one"
near_run "scanned-to-one~straight" "$tmp/deep-straight" "$tmp/deep-to-one" 6
cp -r "$tmp/deep-whole" "$tmp/deep-to-zero3"
check deep-one-to-scanned-zero3 0 'resumed from .*step-4 \(step 4\)' -- mpirun \
  --allow-run-as-root --oversubscribe -np 4 "$keel" train "${deep[@]}" --steps 6 --resume \
  --set spmd.enabled=true --set spmd.mesh_axes=data,model --set spmd.mesh_shape=2,2 \
  --set launch.layer_layout=scanned --set sharding.zero=3 --run-dir "$tmp/deep-to-zero3"
near_run "one-to-scanned-zero3~straight" "$tmp/deep-straight" "$tmp/deep-to-zero3" 6

# A split step (launch.layer_layout = split:1): each segment's programs take this process's
# shards and the update sums the norm's squares over model; model = 2 equals the one-program
# step on one process within rounding, and the data axis changes no bit.
split=(--steps 4 --set launch.layer_layout=split:1)
check split-model2 0 'done: steps 1\.\.4' -- mesh 1 2 "${split[@]}" --accum 2 \
  --run-dir "$tmp/split-model2"
near_run "split: model2~whole" "$tmp/whole" "$tmp/split-model2" 4
check split-data2-model2 0 'done: steps 1\.\.4' -- mesh 2 2 "${split[@]}" --run-dir "$tmp/split-data2"
same_run "split: data2 x model2 = data1 x model2 x accum 2" "$tmp/split-model2" \
  "$tmp/split-data2" 4
check split-data2-model2-zero3 0 'done: steps 1\.\.4' -- mesh 2 2 "${split[@]}" \
  --set sharding.zero=3 --run-dir "$tmp/split-zero3"
# The experts and vocab rules in a split step, on the model with an MoE layer and an MTP head:
# the segments run their block of experts, the embedding's and the head's programs take wte's
# rows.
check split-experts-vocab 0 'done: steps 1\.\.4' -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${moe[@]}" --set launch.layer_layout=split:1 --set spmd.enabled=true \
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=1,2 \
  --set 'sharding.rules=["heads=model", "mlp=model", "experts=model", "vocab=model"]' \
  --run-dir "$tmp/split-experts-vocab"
near_run "split: experts vocab model2~whole" "$tmp/moe-whole" "$tmp/split-experts-vocab" 4
same_run "split: zero 3 = zero 0 on data2 x model2" "$tmp/split-data2" "$tmp/split-zero3" 4

# What is refused, in one line, before anything compiles.
check kv-heads 2 "h\.0\.attn\.c_attn\.weight: dimension heads \(4 query heads, 2 kv heads\) does not split over 4 processes of mesh axis 'model'" \
  -- mesh 1 4 --steps 1 --run-dir "$tmp/bad3"
check other-axis 2 "the mesh data=1,pipe=2 splits axis 'pipe' over 2 devices, but keel train splits the batch over 'data' and the blocks over 'model' only" \
  -- mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" --steps 1 \
  --set spmd.enabled=true --set spmd.mesh_axes=data,pipe --set spmd.mesh_shape=1,2 --run-dir "$tmp/bad4"

# sharding.rules: a dimension whose split is not built, a 'model' axis no rule uses, a rule over
# another axis of more than one device, and an entry that is not dimension=axis.
check rule-embed 2 "sharding\.rules embed=model: splitting embed over 'model' is not built \(heads, mlp, memory, experts and vocab are\)" \
  -- mesh 1 2 --steps 1 --set sharding.rules=embed=model --run-dir "$tmp/bad5"
check rule-unused-axis 2 "the mesh data=1,model=2 has 2 devices on 'model', and no rule of sharding\.rules maps a dimension to it" \
  -- mesh 1 2 --steps 1 --set sharding.rules=heads=data --run-dir "$tmp/bad6"
check rule-other-axis 2 "sharding\.rules heads=data: the mesh data=2,model=1 has 2 devices on 'data', and keel train splits parameters over 'model' only" \
  -- mesh 2 1 --steps 1 --set sharding.rules=heads=data --run-dir "$tmp/bad7"
check rule-form 2 "sharding\.rules entry 'heads' is not dimension=axis" \
  -- one --steps 1 --set sharding.rules=heads --run-dir "$tmp/bad8"
check rule-axis-typo 2 "sharding\.rules heads=modle: 'modle' is not a mesh axis \(spmd\.mesh_axes: data\)" \
  -- one --steps 1 --set sharding.rules=heads=modle --run-dir "$tmp/bad9"
# A model whose every feed-forward is MoE: the default rules split its attention alone; an mlp
# rule the launch gives shards nothing and is refused.
cat >"$tmp/all-moe.json" <<'JSON'
{"name": "code-s", "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2, "moe_every": 1, "moe": {"experts": 4, "top_k": 2, "hidden": 16}}
JSON
all_moe=("${common[@]/#$tmp\/tiny.json/$tmp/all-moe.json}" --steps 1 --set spmd.enabled=true
  --set spmd.mesh_axes=data,model --set spmd.mesh_shape=1,2)
check all-moe-default 0 'done: steps 1\.\.1' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${all_moe[@]}" --run-dir "$tmp/all-moe"
check all-moe-mlp-rule 2 "sharding\.rules maps mlp to mesh axis 'model', which shards nothing here" \
  -- mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${all_moe[@]}" \
  --set sharding.rules=heads=model,mlp=model --run-dir "$tmp/bad10"

# A model whose every layer mixes with Mamba-2 (no MTP head): the default rules split its
# mixers by their heads and its MLPs; with every feed-forward MoE too, the heads rule still
# splits the mixers (the experts whole).
sed 's/"batch": 2}/"batch": 2, "mamba_layers": [0], "mamba": {"state": 16, "head_dim": 16, "chunk": 16}}/' \
  "$tmp/tiny.json" >"$tmp/all-mamba.json"
all_mamba=("${all_moe[@]/#$tmp\/all-moe.json/$tmp/all-mamba.json}")
check all-mamba-default 0 'done: steps 1\.\.1' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${all_mamba[@]}" --run-dir "$tmp/all-mamba"
check all-mamba-mlp-split 0 'h\.0\.mlp\.c_fc\.weight +\[[0-9]+, [0-9]+\] +model/2' -- "$keel" explain "$tmp/all-mamba"
check all-mamba-mixer-split 0 'h\.0\.mamba\.out_proj\.weight +\[64, 32\] +model/2 \[32, 32\]' -- "$keel" explain "$tmp/all-mamba"
sed 's/"mamba_layers"/"moe_every": 1, "moe": {"experts": 4, "top_k": 2, "hidden": 16}, "mamba_layers"/' \
  "$tmp/all-mamba.json" >"$tmp/mamba-moe.json"
check mamba-moe-heads 0 'done: steps 1\.\.1' -- mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$keel" train "${all_mamba[@]/#$tmp\/all-mamba.json/$tmp/mamba-moe.json}" --run-dir "$tmp/mamba-moe"

echo "tp_train_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
