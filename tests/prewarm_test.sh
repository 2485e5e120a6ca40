#!/usr/bin/env bash
# keel cache prewarm and a sealed cache: a recorded run's programs compiled without data or a
# step; a sealed run on that cache compiles nothing; a sealed run that needs another program
# stops before step 1 naming the program, its signature and why it was needed. Then keel sample
# with prompts of many lengths: bucketed programs, never more than the budget. Last, signed
# caches: keel cache keygen and sign, and launches that require signatures.
set -u
keel="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
tiny_run_inputs "$tmp"
run=(--config "$tmp/tiny.json" --data "$tmp/corpus" --eval-batches 2 --sample-bytes 4)

check record 0 'compiles 4, disk loads 0' -- \
  "$keel" train "${run[@]}" --steps 2 --run-dir "$tmp/run" --cache-dir "$tmp/first"
check records-written 0 '^4$' -- sh -c "ls '$tmp/run/programs' | grep -c '\.json$'"
check prewarm 0 'prewarmed 4 programs into .*/warm/v1: 4 compiled, 0 already cached' -- \
  "$keel" cache prewarm "$tmp/run" --cache-dir "$tmp/warm"
check prewarm-names 0 '^compiled train_step \([0-9]+ inputs\) key [0-9a-f]{12} in ' -- \
  "$keel" cache prewarm "$tmp/run/record.json" --cache-dir "$tmp/warm2"
check prewarm-again 0 '4 programs .*: 0 compiled, 4 already cached' -- \
  "$keel" cache prewarm "$tmp/run" --cache-dir "$tmp/warm"
check sealed-run 0 'compiles 0, disk loads 4' -- \
  "$keel" train "${run[@]}" --steps 2 --run-dir "$tmp/sealed" --cache-dir "$tmp/warm" \
  --set compile_cache.mode=sealed
out=$("$keel" train "${run[@]}" --steps 2 --batch-size 1 --run-dir "$tmp/miss" \
  --cache-dir "$tmp/warm" --set compile_cache.mode=sealed 2>&1)
code=$?
check sealed-miss-exit 0 '^1$' -- echo "$code"
check sealed-miss-program 0 "sealed cache has no entry for 'train_step' with inputs \(f32\[" -- echo "$out"
check sealed-miss-reason 0 'needed a new program because: input [0-9]+ \(batch leaf .tokens.\) shape i64\[1,2,32\] -> i64\[1,1,32\]' -- echo "$out"
check sealed-miss-before-step-1 0 '^0$' -- bash -c 'grep -cE "step +1/" <<<"$1" || true' _ "$out"
check sealed-miss-report 0 "report of the failed run $tmp/miss/report.html" -- echo "$out"
# A run recorded with its own codegen choice is prewarmed with it, without repeating the --set:
# its sealed relaunch then compiles nothing. A --set given to prewarm still wins. The compiler's
# flags (like the compiler and the BLAS library) are never taken from a record: it is data.
check record-o1 0 'compiles 4, disk loads 0' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/run-o1" --cache-dir "$tmp/first-o1" --set cpu.opt_level=1 \
  --set cpu.flags=-march=native,-fopenmp
prewarmed=$("$keel" cache prewarm "$tmp/run-o1" --cache-dir "$tmp/warm-o1" 2>&1)
check prewarm-as-recorded 0 '^as the recorded run: cpu\.opt_level = 1$' -- echo "$prewarmed"
check prewarm-flags-not-taken 0 '^not taken from the record: cpu\.flags = \["-march=native", "-fopenmp"\] \(a record does not choose the compiler' -- \
  echo "$prewarmed"
check prewarm-print-config 0 "^opt_level = 1 +# $tmp/run-o1/record\.json$" -- \
  "$keel" cache prewarm "$tmp/run-o1" --cache-dir "$tmp/warm-o1" --print-config
# Its notes are comments, and a sealed launch's settings are shown too (prewarm itself refuses it).
check prewarm-print-config-sealed 0 "^# as the recorded run: cpu\.opt_level = 1$" -- \
  "$keel" cache prewarm "$tmp/run-o1" --cache-dir "$tmp/warm-o1" --print-config \
  --set compile_cache.mode=sealed
check sealed-as-recorded 0 'compiles 0, disk loads 4' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/sealed-o1" --cache-dir "$tmp/warm-o1" --set cpu.opt_level=1 \
  --set compile_cache.mode=sealed
check prewarm-set-wins 0 "note: the recorded run's key was" -- "$keel" cache prewarm "$tmp/run-o1" \
  --cache-dir "$tmp/warm-o3" --set cpu.opt_level=3
# Bad input is one line and exit 2.
check prewarm-no-programs 2 '^\[cache\] .*/nope has no programs/ directory' -- \
  "$keel" cache prewarm "$tmp/nope" --cache-dir "$tmp/warm"
cp -r "$tmp/run" "$tmp/damaged"
f=$(ls "$tmp/damaged/programs/"*.json | head -1)
printf '{"function": "f"}' >"$f"
check prewarm-damaged 2 "^\[cache\] $f: field \"key\" is missing or not a string" -- \
  "$keel" cache prewarm "$tmp/damaged" --cache-dir "$tmp/warm"
cp -r "$tmp/run" "$tmp/bad-record"
printf '{"policy": ' >"$tmp/bad-record/record.json"
check prewarm-bad-record 2 '^\[cache\] .*/bad-record/record\.json: not JSON \(damaged or cut short\); delete it' -- \
  "$keel" cache prewarm "$tmp/bad-record" --cache-dir "$tmp/warm"
printf '{"steps": 2}' >"$tmp/bad-record/record.json"
check prewarm-record-without-policy 2 '^\[cache\] .*/bad-record/record\.json: no "policy" object' -- \
  "$keel" cache prewarm "$tmp/bad-record" --cache-dir "$tmp/warm"
check prewarm-sealed 2 '^\[cache\] prewarm stores entries, but compile_cache.mode is sealed' -- \
  "$keel" cache prewarm "$tmp/run" --cache-dir "$tmp/warm" --set compile_cache.mode=sealed

# keel sample --prompts-file: 30 prompts of 30 lengths, at most max_programs_per_function programs.
for i in $(seq 1 30); do head -c $((i * 2)) /usr/include/c++/12/vector | tr '\n' ' '; echo; done \
  >"$tmp/prompts.txt"
ckpt="$tmp/run/checkpoints/step-2"
check sample-buckets 0 '^sample_prompts: [1-8] programs for 30 prompts \(context lengths [0-9, ]+, 31\); [0-9.]+% of positions were padding$' -- \
  "$keel" sample --checkpoint "$ckpt" --prompts-file "$tmp/prompts.txt" --bytes 4 --cache-dir "$tmp/first"
check sample-budget-3 0 '^sample_prompts: [1-3] programs for 30 prompts' -- \
  "$keel" sample --checkpoint "$ckpt" --prompts-file "$tmp/prompts.txt" --bytes 4 --cache-dir "$tmp/first" \
  --set shape_guard.max_programs_per_function=3
check sample-no-drift-warning 0 '^0 0$' -- bash -c 'out=$("$@" 2>&1); echo "$? $(grep -c shape_guard <<<"$out")"' _ \
  "$keel" sample --checkpoint "$ckpt" --prompts-file "$tmp/prompts.txt" --bytes 4 --cache-dir "$tmp/first"
: >"$tmp/empty.txt"
check sample-empty-prompts 2 '^\[sample\] .*empty.txt holds no prompts' -- \
  "$keel" sample --checkpoint "$ckpt" --prompts-file "$tmp/empty.txt" --cache-dir "$tmp/first"

# keel eval: whole validation documents of any length, windows bucketed within the budget.
check eval-whole-documents 0 '^validation loss [0-9.]+, [0-9.]+ bits/byte over 2 whole documents \(the validation split; [0-9]+ bytes, [0-9]+ windows\); [1-8] programs \(lengths [0-9, ]*32\)' -- \
  "$keel" eval --checkpoint "$ckpt" --data "$tmp/corpus" --cache-dir "$tmp/first"
# --split all scores held-out text whole: every one of the corpus's 30 documents.
check eval-split-all 0 '^held-out loss [0-9.]+, [0-9.]+ bits/byte over 30 whole documents \(every document; [0-9]+ bytes, [0-9]+ windows\)' -- \
  "$keel" eval --checkpoint "$ckpt" --data "$tmp/corpus" --cache-dir "$tmp/first" --split all

# Signed caches (issue 17): a writer signs with its key; a launch that requires signatures
# loads only what a trusted key signed, compiles the rest here or refuses it.
check keygen 0 '^public key ed25519:[0-9a-f]{64}$' -- "$keel" cache keygen --out "$tmp/writer.key"
pub=$(sed -n 's/^public key //p' < <("$keel" cache keygen --out "$tmp/other.key"))
mine=$(sed -n 's/^public key //p' < <("$keel" cache keygen --out "$tmp/mine.key" 2>&1))
check keygen-never-overwrites 2 '^\[cache\] .*writer.key exists; keygen never overwrites a key$' -- \
  "$keel" cache keygen --out "$tmp/writer.key"
check keygen-no-file 2 "^\[cache\] keel cache keygen --out '' names no file" -- "$keel" cache keygen --out ""
check keygen-no-dir 2 '^\[cache\] cannot write the key .*/nodir/k: its directory .*/nodir does not exist' -- \
  "$keel" cache keygen --out "$tmp/nodir/k"
signed=(--set compile_cache.signatures=refuse --set "compile_cache.trusted_keys=$mine")
check signed-write 0 'compiles 4, disk loads 0' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/signed" --cache-dir "$tmp/signed-cache" --set "compile_cache.signing_key=$tmp/mine.key"
check signed-load 0 'compiles 0, disk loads 4' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/signed2" --cache-dir "$tmp/signed-cache" "${signed[@]}"
check signed-verify 0 '^ok: 4 entries verified$' -- "$keel" cache verify --cache-dir "$tmp/signed-cache" "${signed[@]}"
# The unsigned cache of the first run: refused under refuse, compiled here under recompile.
check unsigned-refused 1 "^\[cache\] entry [0-9a-f]{32} \('init'\): it is not signed; refused, never loaded" -- \
  "$keel" train "${run[@]}" --steps 2 --run-dir "$tmp/refused" --cache-dir "$tmp/first" "${signed[@]}"
check untrusted-recompiled 0 'compiles 4, disk loads 0' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/recompiled" --cache-dir "$tmp/signed-cache" --set compile_cache.signatures=recompile \
  --set "compile_cache.trusted_keys=$pub"
check unsigned-verify 1 'it is not signed; intact, left in place' -- \
  "$keel" cache verify --cache-dir "$tmp/first" "${signed[@]}"
check sign 0 '^signed [0-9]+ entries in .*/first/v1 with ed25519:' -- \
  "$keel" cache sign --key "$tmp/mine.key" --cache-dir "$tmp/first"
check signed-after-sign 0 'compiles 0, disk loads 4' -- "$keel" train "${run[@]}" --steps 2 \
  --run-dir "$tmp/refused2" --cache-dir "$tmp/first" "${signed[@]}"
check bad-trusted-key 2 '^\[policy\] --set compile_cache.trusted_keys=ed25519:xyz: compile_cache.trusted_keys: "ed25519:xyz" is not a public key' -- \
  "$keel" cache verify --cache-dir "$tmp/first" --set compile_cache.signatures=refuse \
  --set compile_cache.trusted_keys=ed25519:xyz

echo "prewarm_test: $passes passed, $fails failed"
((fails == 0))
