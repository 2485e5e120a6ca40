#!/usr/bin/env bash
# ZeRO stages 1, 2 and 3 over the data axis (issue 50): with sharding.zero = 1, N processes each
# hold 1/N of AdamW's moments, with 2 also 1/N of the reduced gradients (reduce-scattered, the
# norm summed in blocks whatever N is), with 3 also 1/N of the parameters (gathered inside each
# micro-batch where they are read); each computes exactly what one process with N times the
# accumulation does at stage 0 (metrics and checkpoint bytes); checkpoints hold the state whole,
# so a run resumes at another number of processes and another stage, and --init-from starts one
# at any; a step split at layer barriers gathers each segment's slices in its own programs. A
# tensor the processes do not divide is refused in one line; so is stage 0 under a memory budget
# that stage 2 fits, before it compiles. sharding.rules experts=data spreads MoE layers' experts
# over the processes at stage 3 (expert parallelism), bit for bit one process too.
# Usage: zero_train_test.sh KEEL
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tiny_run_inputs "$tmp"
# The model's config comes first: CONFIG names another (two layers, scanned) for those runs.
common=(--data "$tmp/corpus" --cache-dir "$tmp/cache" --sample-bytes 0 --eval-batches 2
  --log-every 1 --ckpt-every 2 --eval-every 2)
config="$tmp/tiny.json"
one() { "$keel" train --config "$config" "${common[@]}" --set launch.threads=1 "$@"; }
mp() {
  local n=$1
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$keel" train --config "$config" \
    "${common[@]}" "$@"
}
launch() { if [[ $1 -eq 1 ]]; then one "${@:2}"; else mp "$@"; fi; }
# The reference: one process, stage 0, --accum 4.
check whole 0 'done: steps 1\.\.4' -- one --steps 4 --accum 4 --run-dir "$tmp/whole"
# Stages 1 and 2 at 4 processes run in the chain and the resumes below.
check zero1-2 0 "AdamW's moments split over 2 processes" -- mp 2 --steps 4 --accum 2 \
  --set sharding.zero=1 --run-dir "$tmp/zero1-2"
same_run "zero1-2=whole" "$tmp/whole" "$tmp/zero1-2" 4
check zero2-2 0 "zero 2, AdamW's moments and the reduced gradients split over 2" -- \
  mp 2 --steps 4 --accum 2 --set sharding.zero=2 --run-dir "$tmp/zero2-2"
same_run "zero2-2=whole" "$tmp/whole" "$tmp/zero2-2" 4
for n in 2 4; do
  check "zero3-$n" 0 "zero 3, AdamW's moments, the reduced gradients and the parameters split" -- \
    mp $n --steps 4 --accum $((4 / n)) --set sharding.zero=3 --run-dir "$tmp/zero3-$n"
  same_run "zero3-$n=whole" "$tmp/whole" "$tmp/zero3-$n" 4
done
# --init-from: each process takes its slices of the checkpoint's parameters, read one tensor at a
# time, so 4 processes at stage 3 start as one process does.
check init-from-1 0 'init from .*step-2: [0-9]+ parameters copied' -- one --steps 2 --accum 4 \
  --init-from "$tmp/whole/checkpoints/step-2" --run-dir "$tmp/init-from-1"
check init-from-4 0 'init from .*step-2: [0-9]+ parameters copied' -- mp 4 --steps 2 --accum 1 \
  --set sharding.zero=3 --init-from "$tmp/whole/checkpoints/step-2" --run-dir "$tmp/init-from-4"
same_run "init-from-4=init-from-1" "$tmp/init-from-1" "$tmp/init-from-4" 2
# Its first step starts from the trained parameters: on the same batch, a lower loss than the
# fresh run's first step.
check init-from-trained 0 '^ok$' -- python3 -c "
import json
first = lambda run: next(l for l in map(json.loads, open('$tmp/%s/metrics.jsonl' % run))
                         if l.get('step') == 1 and 'loss' in l)['loss']
assert first('init-from-1') < first('whole') - 0.05, (first('init-from-1'), first('whole'))
print('ok')"
# The final sample at stage 3: every process runs the sampler on its slices, gathered inside the
# program (no process holds the parameters whole), and the text is one process's.
saved=("${common[@]}")
common=()
for ((i = 0; i < ${#saved[@]}; ++i)); do  # all but --sample-bytes 0
  if [[ ${saved[i]} == --sample-bytes ]]; then i=$((i + 1)); else common+=("${saved[i]}"); fi
done
check sample-one 0 'done: steps 1\.\.1' -- one --steps 1 --accum 2 --sample-bytes 24 \
  --run-dir "$tmp/sample-one"
check sample-zero3 0 'done: steps 1\.\.1' -- mp 2 --steps 1 --accum 1 --set sharding.zero=3 \
  --sample-bytes 24 --run-dir "$tmp/sample-zero3"
common=("${saved[@]}")
check sample-same 0 '^ok$' -- python3 -c "
import glob, json
one, mine = (json.load(open('$tmp/%s/record.json' % r)) for r in ('sample-one', 'sample-zero3'))
assert len(one['sample']) == 24 and mine['sample'] == one['sample'], (one['sample'], mine['sample'])
steps = [json.load(open(f)) for f in glob.glob('$tmp/sample-zero3/programs/*.json')]
gathers = [r['collectives'].get('all_gather', {}).get('calls', 0) for r in steps
           if r['function'] == 'sample_step']
assert gathers and gathers[0] > 0, gathers
print('ok')"
# Without place_collectives each micro-batch gathers each parameter once: the same run, more
# memory (below).
check zero3-unplaced 0 'done: steps 1\.\.4' -- mp 2 --steps 4 --accum 2 --set sharding.zero=3 \
  --set 'passes.disable=["place_collectives"]' --run-dir "$tmp/zero3-unplaced"
same_run "zero3-unplaced=whole" "$tmp/whole" "$tmp/zero3-unplaced" 4
# One process at stage 3 (or 1 or 2: the same StateShards) is stage 0 (nothing to split).
check zero3-1 0 'done: steps 1\.\.4' -- one --steps 4 --accum 4 --set sharding.zero=3 \
  --run-dir "$tmp/zero3-1"
same_run "zero3-1=whole" "$tmp/whole" "$tmp/zero3-1" 4
# record.json: each process's state, its moments (from stage 2 its gradients, at 3 its
# parameters) 1/N of the whole; the parameters and moments its Variables held at the end,
# measured from their buffers, are the arithmetic's.
check state-bytes 0 '^True$' -- python3 -c "
import json
whole = json.load(open('$tmp/whole/record.json'))['ranks'][0]['state_bytes']
assert whole['held'] == {'parameters': whole['parameters'], 'optimizer': whole['optimizer']}, whole
for stage, n in ((1, 2), (2, 2), (3, 2), (3, 4)):
  ranks = json.load(open('$tmp/zero%d-%d/record.json' % (stage, n)))['ranks']
  assert len(ranks) == n
  for r in ranks:
      s = r['state_bytes']
      assert s['optimizer'] * n == whole['optimizer'], (n, s, whole)
      assert s['parameters'] * (n if stage == 3 else 1) == whole['parameters'], (n, s)
      assert s['gradients'] * (n if stage >= 2 else 1) == whole['parameters'], (stage, n, s)
      assert s['total'] == s['parameters'] + s['gradients'] + s['optimizer']
      assert s['held'] == {'parameters': s['parameters'], 'optimizer': s['optimizer']}, (stage, n, s)
print(whole['optimizer'] == 2 * whole['parameters'])"
# keel explain lists each tensor: its shape, how its gradient and moments are split, its bytes on
# each process, which add up to record.json's state_bytes; a damaged "state" is one line.
check explain-zero2 0 'wte\.weight +\[256, 32\] +whole +data/2 \[4096\] +data/2 \[4096\] +81920$' -- \
  "$keel" explain "$tmp/zero2-2"
check explain-zero3 0 'wte\.weight +\[256, 32\] +data/4 \[2048\] +data/4 \[2048\] +data/4 \[2048\] +32768$' -- \
  "$keel" explain "$tmp/zero3-4"
check explain-zero1 0 'wte\.weight +\[256, 32\] +whole +whole +data/2 \[4096\] +98304$' -- \
  "$keel" explain "$tmp/zero1-2"
check explain-whole 0 'training state \(sharding.zero = 0, the data axis of 1 processes\)' -- \
  "$keel" explain "$tmp/whole"
check state-listing 0 '^ok$' -- python3 -c "
import json
for run in ('whole', 'zero1-2', 'zero2-2', 'zero3-2', 'zero3-4'):
    r = json.load(open('$tmp/%s/record.json' % run))
    listed = sum(t['bytes_per_process'] for t in r['state']['tensors'])
    assert listed == r['state']['bytes_per_process'] == r['ranks'][0]['state_bytes']['total'], run
print('ok')"
mkdir -p "$tmp/damaged" && cp "$tmp/zero2-2/compiles.jsonl" "$tmp/damaged/" && python3 -c "
import json
r = json.load(open('$tmp/zero2-2/record.json'))
r['state']['tensors'][0]['gradient'] = 3
json.dump(r, open('$tmp/damaged/record.json', 'w'))"
check explain-damaged 2 'record\.json: field "state" is damaged' -- "$keel" explain "$tmp/damaged"
# The train step's collectives (programs/<key>.json, as the backend runs it), exactly: stage 2
# reduce-scatters each parameter's gradient (all its bytes) where stage 1 all-reduces it,
# gathers each updated parameter slice at both, and at 2 one more gather of the norm's block
# sums. Stage 3 scatters as stage 2 and gathers each parameter in each micro-batch (2 at 2
# processes) instead of after the update; place_collectives gathers again for far readers (the
# backward), which lowers the predicted peak.
check collectives 0 '^ok$' -- python3 -c "
import glob, json, math, struct
def step(run):
    for f in glob.glob(run + '/programs/*.json'):
        r = json.load(open(f))
        if r['function'] == 'train_step':
            return r['collectives']
raw = open('$tmp/whole/checkpoints/step-4/model.safetensors', 'rb').read()
header = json.loads(raw[8:8 + struct.unpack('<Q', raw[:8])[0]])
sizes = [math.prod(t['shape']) for k, t in header.items() if k != '__metadata__']
P, B = len(sizes), 4 * sum(sizes)
assert step('$tmp/whole') == {}, step('$tmp/whole')
for n in (2,):
    s1, s2 = step('$tmp/zero1-%d' % n), step('$tmp/zero2-%d' % n)
    blocks = sum(math.gcd(k, 720720) for k in sizes)
    assert 'reduce_scatter' not in s1, s1
    assert s2['reduce_scatter'] == {'calls': P, 'bytes': B}, (s2, P, B)
    assert s1['all_reduce']['calls'] == s2['all_reduce']['calls'] + P, (s1, s2)
    assert s1['all_reduce']['bytes'] == s2['all_reduce']['bytes'] + B, (s1, s2)
    assert s2['all_reduce']['bytes'] == 4 * s2['all_reduce']['calls'], s2  # scalars only
    assert s1['all_gather'] == {'calls': P, 'bytes': B // n}, (s1, n)
    assert s2['all_gather'] == {'calls': P + 1, 'bytes': (B + 4 * blocks) // n}, (s2, n)
s3, placed = step('$tmp/zero3-unplaced'), step('$tmp/zero3-2')
blocks = sum(math.gcd(k, 720720) for k in sizes)
assert s3['reduce_scatter'] == placed['reduce_scatter'] == {'calls': P, 'bytes': B}, (s3, placed)
assert s3['all_gather'] == {'calls': 2 * P + 1, 'bytes': (2 * B + 4 * blocks) // 2}, s3
assert placed['all_gather']['calls'] > s3['all_gather']['calls'], placed
peak = lambda run: json.load(open(run + '/record.json'))['ranks'][0]['predicted_peak_bytes']
assert peak('$tmp/zero3-2') < peak('$tmp/zero3-unplaced'), (peak('$tmp/zero3-2'), peak('$tmp/zero3-unplaced'))
print('ok')"
# A per-host budget that holds stage 2's programs at 2 processes but not stage 0's train step:
# stage 0 is refused before its compile, naming the budget; stage 2 runs within it. The
# programs' predictions decide (a copy of the cache without the runs' calibration, whose
# observed peaks count the whole process).
budget=$(python3 -c "import json
print(json.load(open('$tmp/zero2-2/record.json'))['memory']['hosts'][0]['predicted_peak_bytes'])")
cp -r "$tmp/cache" "$tmp/budget-cache" && rm -f "$tmp/budget-cache/calibration.jsonl"
saved=("${common[@]}")
common=("${common[@]/#$tmp\/cache/$tmp/budget-cache}")
check budget-zero0 1 "'train_step' is predicted to need .* launch.memory_budget_bytes is $budget per host; refused before compiling it" -- \
  mp 2 --steps 2 --accum 2 --set launch.memory_budget_bytes="$budget" --run-dir "$tmp/budget0"
check budget-zero2 0 'done: steps 1\.\.2' -- mp 2 --steps 2 --accum 2 --set sharding.zero=2 \
  --set launch.memory_budget_bytes="$budget" --run-dir "$tmp/budget2"
common=("${saved[@]}")
# Another number of processes and another stage continue the run exactly: 4 processes at stage 1
# to one at stage 0, and one at stage 0 to 2 at stage 3.
resume() {
  local name=$1 first=$2 zero1=$3 second=$4 zero2=$5
  local dir="$tmp/$name"
  check "$name-first" 0 'done: steps 1\.\.2' -- launch "$first" --steps 2 --total-steps 4 \
    --accum $((4 / first)) --set sharding.zero=$zero1 --run-dir "$dir"
  check "$name-resume" 0 'resumed from .*step-2' -- launch "$second" --steps 4 \
    --accum $((4 / second)) --set sharding.zero=$zero2 --run-dir "$dir" --resume
  same_run "$name" "$tmp/whole" "$dir" 4
}
resume resume-4z1-1z0 4 1 1 0
resume resume-1z0-2z3 1 0 2 3
# One run over four meshes and stages, a step each: 4 processes at stage 3, 2 at stage 1, one at
# stage 0, 4 at stage 2. Each run ends with a checkpoint and an evaluation the reference
# does not have at odd steps, so its training lines and final checkpoint are compared.
chain="$tmp/chain"
hop=0
for leg in 4:3 2:1 1:0 4:2; do
  hop=$((hop + 1))
  n=${leg%:*}
  check "chain-$hop" 0 "done: steps $hop\.\.$hop" -- launch "$n" --steps $hop --total-steps 4 \
    --accum $((4 / n)) --set sharding.zero="${leg#*:}" --run-dir "$chain" \
    $([[ $hop -gt 1 ]] && echo --resume)
done
training_lines() { grep -v val_loss "$1/metrics.jsonl" | sed -E 's/,"ms_per_step":.*$//'; }
chain_equals_whole() {
  diff <(training_lines "$tmp/whole") <(training_lines "$chain") >/dev/null || return 1
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$tmp/whole/checkpoints/step-4/$f" "$chain/checkpoints/step-4/$f" || return 1
  done
  echo same
}
check chain-equals-whole 0 '^same$' -- chain_equals_whole

# Scanned layers: the moments split as stored, [layers, ...] tensors flattened.
sed 's/"layers": 1/"layers": 2/' "$tmp/tiny.json" >"$tmp/two.json"
config="$tmp/two.json"
scanned=(--steps 4 --set launch.layer_layout=scanned)
check scanned-whole 0 'done: steps 1\.\.4' -- one "${scanned[@]}" --accum 2 --run-dir "$tmp/scan-whole"
check scanned-zero1 0 "AdamW's moments split over 2 processes" -- mp 2 "${scanned[@]}" --accum 1 \
  --set sharding.zero=1 --run-dir "$tmp/scan-zero1"
same_run "scanned zero1-2=whole" "$tmp/scan-whole" "$tmp/scan-zero1" 4
check scanned-zero2 0 "AdamW's moments and the reduced gradients split over 2" -- mp 2 \
  "${scanned[@]}" --accum 1 --set sharding.zero=2 --run-dir "$tmp/scan-zero2"
same_run "scanned zero2-2=whole" "$tmp/scan-whole" "$tmp/scan-zero2" 4
check scanned-zero3 0 "the reduced gradients and the parameters split over 2" -- mp 2 \
  "${scanned[@]}" --accum 1 --set sharding.zero=3 --run-dir "$tmp/scan-zero3"
same_run "scanned zero3-2=whole" "$tmp/scan-whole" "$tmp/scan-zero3" 4
# Four processes, each with its quarter of each layer, as one process of 4 micro-batches.
check scanned-whole-4 0 'done: steps 1\.\.4' -- one "${scanned[@]}" --accum 4 \
  --run-dir "$tmp/scan-whole-4"
check scanned-zero3-4 0 "the reduced gradients and the parameters split over 4" -- mp 4 \
  "${scanned[@]}" --accum 1 --set sharding.zero=3 --run-dir "$tmp/scan-zero3-4"
same_run "scanned zero3-4=whole" "$tmp/scan-whole-4" "$tmp/scan-zero3-4" 4
# Resumed at stage 3 from one process's checkpoint: each process takes its part of each layer.
check scanned-resume-first 0 'done: steps 1\.\.2' -- one --steps 2 --total-steps 4 --accum 2 \
  --set launch.layer_layout=scanned --run-dir "$tmp/scan-resume"
check scanned-resume-zero3 0 'resumed from .*step-2' -- mp 2 --steps 4 --accum 1 \
  --set launch.layer_layout=scanned --set sharding.zero=3 --run-dir "$tmp/scan-resume" --resume
same_run "scanned resume 1z0-2z3=whole" "$tmp/scan-whole" "$tmp/scan-resume" 4
# At stage 3 the scan reads each stacked layer inside its body (every process's part of it,
# gathered over data), in the forward and again in the backward; only the unstacked tensors are
# gathered outside it, and nothing inside is summed over data.
check scanned-layer-at-a-time 0 '^ok$' -- python3 -c "
import glob, json, re
for f in glob.glob('$tmp/scan-zero3/programs/*.json'):
    r = json.load(open(f))
    if r['function'] != 'train_step':
        continue
    inside = lambda op: re.findall(r'\n {4,}%\d+ = ' + op + r'\([^\n]*axis=\"data\"', r['graph'])
    assert len(inside('all_gather')) >= 2 and not inside('all_reduce'), r['graph']
    print('ok')"
config="$tmp/tiny.json"

# A step split at layer barriers (split:1): at stage 3 each segment's programs gather their own
# layers' slices where they start (forward, and again in the backward), and the update scatters
# the gradient sums and updates slices as the one program does: equal to one process at stage 0
# split the same way, bit for bit.
split=(--steps 4 --set launch.layer_layout=split:1)
check split-whole 0 'done: steps 1\.\.4' -- one "${split[@]}" --accum 4 --run-dir "$tmp/split-whole"
check split-zero3-2 0 "the reduced gradients and the parameters split over 2" -- mp 2 \
  "${split[@]}" --accum 2 --set sharding.zero=3 --run-dir "$tmp/split-zero3"
same_run "split zero3-2=whole" "$tmp/split-whole" "$tmp/split-zero3" 4
check split-zero1-4 0 "AdamW's moments split over 4 processes" -- mp 4 "${split[@]}" --accum 1 \
  --set sharding.zero=1 --run-dir "$tmp/split-zero1"
same_run "split zero1-4=whole" "$tmp/split-whole" "$tmp/split-zero1" 4
check split-zero2-2 0 "AdamW's moments and the reduced gradients split over 2" -- mp 2 \
  "${split[@]}" --accum 2 --set sharding.zero=2 --run-dir "$tmp/split-zero2"
same_run "split zero2-2=whole" "$tmp/split-whole" "$tmp/split-zero2" 4
check split-gathers 0 '^ok$' -- python3 -c "
import glob, json
def gathers(run):
    out = {}
    for f in glob.glob(run + '/programs/*.json'):
        r = json.load(open(f))
        out[r['function']] = r['collectives'].get('all_gather', {}).get('calls', 0)
    return out
mine, whole = gathers('$tmp/split-zero3'), gathers('$tmp/split-whole')
for program in ('embed_forward', 'head', 'segment_forward_d', 'segment_backward_d'):
    assert mine[program] > 0 and whole[program] == 0, (program, mine, whole)
assert mine['segment_backward_d'] > mine['segment_forward_d'], mine  # gathered again
state = lambda run: json.load(open(run + '/record.json'))['ranks'][0]['state_bytes']
assert 2 * state('$tmp/split-zero3')['parameters'] == state('$tmp/split-whole')['parameters']
print('ok')"
# Expert parallelism (sharding.rules experts=data, on stage 3's slices): each process holds a
# block of every MoE layer's experts and the tokens travel to them by all_to_all (the experts are
# neither gathered nor reduce-scattered: each source's gradient is summed where they are held, in
# the reduce-scatter's order), so N processes compute what one process of N times the
# accumulation does, bit for bit; its checkpoint is the global one.
cat >"$tmp/moe.json" <<'JSON'
{"name": "code-s", "layers": 2, "width": 32, "heads": 4, "kv_heads": 2, "mlp_hidden": 64,
 "seq": 32, "batch": 2, "moe_every": 2, "moe": {"experts": 4, "top_k": 2, "hidden": 16}}
JSON
config="$tmp/moe.json"
experts=(--set sharding.zero=3 --set sharding.rules=experts=data)
check moe-whole 0 'done: steps 1\.\.4' -- one --steps 4 --accum 4 --run-dir "$tmp/moe-whole"
for n in 2 4; do
  check "experts-data-$n" 0 "experts over 'data': each of the $n processes runs $((4 / n)) of every MoE layer's 4 experts" -- \
    mp $n --steps 4 --accum $((4 / n)) "${experts[@]}" --run-dir "$tmp/experts-data-$n"
  same_run "experts-data-$n=whole" "$tmp/moe-whole" "$tmp/experts-data-$n" 4
done
check experts-explain 0 'h\.1\.moe\.experts\.c_fc\.weight +\[4, 32, 32\] +data/2 \[2048\]' -- \
  "$keel" explain "$tmp/experts-data-2"
check experts-held 0 '^ok$' -- python3 -c "
import json
for r in json.load(open('$tmp/experts-data-4/record.json'))['ranks']:
    s = r['state_bytes']
    assert s['held'] == {'parameters': s['parameters'], 'optimizer': s['optimizer']}, s
print('ok')"
check experts-data-unplaced 0 'done: steps 1\.\.1' -- mp 2 --steps 1 --accum 2 "${experts[@]}" \
  --set 'passes.disable=["place_collectives"]' --run-dir "$tmp/experts-unplaced"
check experts-exchange 0 '^ok$' -- python3 -c "
import glob, json, math, struct
def step(run):
    for f in glob.glob(run + '/programs/*.json'):
        r = json.load(open(f))
        if r['function'] == 'train_step':
            return r['collectives']
raw = open('$tmp/moe-whole/checkpoints/step-4/model.safetensors', 'rb').read()
header = json.loads(raw[8:8 + struct.unpack('<Q', raw[:8])[0]])
sizes = {k: math.prod(t['shape']) for k, t in header.items() if k != '__metadata__'}
spread = [k for k in sizes if '.moe.experts.' in k]
P, B = len(sizes), 4 * sum(sizes.values())
X, XB = len(spread), 4 * sum(sizes[k] for k in spread)
blocks = sum(math.gcd(k, 720720) for k in sizes.values())
placed, unplaced = step('$tmp/experts-data-2'), step('$tmp/experts-unplaced')
# One MoE layer, 2 micro-batches: its slots out and back, forward and backward, [2, 80, 32] each.
assert placed['all_to_all'] == {'calls': 8, 'bytes': 8 * 4 * 2 * 80 * 32}, placed
assert placed['reduce_scatter'] == {'calls': P - X, 'bytes': B - XB}, (placed, P, X)
assert unplaced['all_gather'] == {'calls': 2 * (P - X) + 1, 'bytes': (2 * (B - XB) + 4 * blocks) // 2}, unplaced
print('ok')"
check experts-resume-first 0 'done: steps 1\.\.2' -- mp 2 --steps 2 --total-steps 4 --accum 2 \
  "${experts[@]}" --run-dir "$tmp/experts-resume"
check experts-resume-one 0 'resumed from .*step-2' -- one --steps 4 --accum 4 \
  --run-dir "$tmp/experts-resume" --resume
same_run "experts resume 2-1=whole" "$tmp/moe-whole" "$tmp/experts-resume" 4
check experts-need-zero3 2 'sharding.rules experts=data: the experts are held as ZeRO stage 3.s slices of them, and sharding.zero is 2' -- \
  mp 2 --steps 1 --set sharding.zero=2 --set sharding.rules=experts=data --run-dir "$tmp/experts-z2"
check experts-unrolled 2 'expert parallelism runs in the unrolled one-program step, and launch.layer_layout is scanned' -- \
  mp 2 --steps 1 "${experts[@]}" --set launch.layer_layout=scanned --run-dir "$tmp/experts-scan"
sed 's/"experts": 4/"experts": 3/' "$tmp/moe.json" >"$tmp/moe3.json"
config="$tmp/moe3.json"
check experts-divide 2 'h\.1\.moe\.experts\.c_fc\.weight: dimension experts \(3 experts\) does not split over 2 processes' -- \
  mp 2 --steps 1 "${experts[@]}" --run-dir "$tmp/experts-3"
config="$tmp/tiny.json"
check experts-nothing 2 'experts=data: it shards nothing here: the model has no MoE layer' -- \
  mp 2 --steps 1 "${experts[@]}" --run-dir "$tmp/experts-none"
check indivisible 2 'elements, not a multiple of the 3 processes on the data axis' -- mp 3 \
  --steps 1 --set sharding.zero=1 --run-dir "$tmp/three"

echo "zero_train_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
