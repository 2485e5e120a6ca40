#!/usr/bin/env bash
# Injected I/O faults and power loss on every writer of a training run (issue 17). A run resumes
# from step 2 and trains to step 4 with a checkpoint at 4, while keel_fault.so (LD_PRELOAD)
# breaks the k-th file-system call of one writer: checkpoint save, cache publish, calibration
# append, run record, metrics and TensorBoard. Each k is tried in four modes (EIO, ENOSPC, a
# short write, a power loss that drops every unsynced write and kills the process). After each:
#   - the run succeeded, or failed with one "[api] ..." line (a power loss: killed, no message);
#   - every complete checkpoint loads (keel sample), and step-2 is still there;
#   - keel cache verify is clean, and the cache entries written before still load, compiling nothing;
#   - metrics.jsonl is whole JSON lines, the TensorBoard records pass their CRCs, record.json
#     parses, keel report reads the run;
#   - --resume to step 6 succeeds, and metrics.jsonl then holds each step's loss, grad norm and
#     lr once, equal to an uninterrupted run's bit for bit, and the same last evaluation.
# Usage: fault_sweep.sh KEEL SHIM quick|full [WRITER...]   (quick: the first and last k, and the
# middle one for short writes and power loss)
set -u
keel=$(realpath "$1")
shim=$(realpath "$2")
depth=${3:-quick}
shift 3
writers=("$@")
[[ ${#writers[@]} -gt 0 ]] || writers=(checkpoint cache calibration record metrics)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/../check.sh"
tiny_run_inputs "$tmp"
# Every run compiles through memo_cxx.sh: a trial of the cache writer compiles the same programs
# as the trials before it, and g++ took most of the sweep's time. ctest gives the suite's memo.
export KEEL_CPU_COMPILER KEEL_MEMO_CXX_DIR="${KEEL_MEMO_CXX_DIR:-$tmp/memo}"
KEEL_CPU_COMPILER=$(realpath "$(dirname "$0")/../memo_cxx.sh")
cd "$tmp" || exit 1

# The cache of the run is w/cache; entries of another batch size are there before the run, so
# the run compiles (and publishes) its own two programs while older entries sit beside them.
train() {
  "$keel" train --config tiny.json --data corpus --sample-bytes 0 --eval-batches 1 --warmup 1 \
    --total-steps 6 --log-every 1 --ckpt-every 2 "$@"
}
train --steps 6 --run-dir ref --cache-dir refcache >/dev/null 2>&1 || { echo "FAIL reference run"; exit 1; }
want_train=$(jq -c 'select(has("loss")) | [.step, .loss, .grad_norm, .lr]' ref/metrics.jsonl)
want_eval=$(jq -c 'select(has("val_loss")) | [.step, .val_loss]' ref/metrics.jsonl | tail -1)
# w0: a run with its step-2 checkpoint, on a cache that also holds the entries of an older run
# of another batch size. The cache writer's trials remove the run's own entries, so the run
# compiles and publishes them beside the older ones; the other writers run on the warm cache.
train --steps 1 --batch-size 1 --run-dir older --cache-dir w0/cache >/dev/null 2>&1 || { echo "FAIL older run"; exit 1; }
ls w0/cache/v1/entries | sort >older.txt
train --steps 2 --run-dir w0/run --cache-dir w0/cache >/dev/null 2>&1 || { echo "FAIL setup run"; exit 1; }
ls w0/cache/v1/entries | sort | comm -13 older.txt - >own.txt
declare -A scope=([checkpoint]=checkpoints/ [cache]=/cache/v1/ [calibration]=calibration.jsonl
  [record]=record.json [metrics]='metrics.jsonl:/tb/')

fresh_copy() {  # fresh_copy WRITER: w as w0 was
  rm -rf w stash report
  cp -a w0 w
  mkdir -p stash
  if [[ $1 == cache ]]; then
    while read -r f; do rm -f "w/cache/v1/entries/$f"; done <own.txt
  fi
}
faulted_run() {  # faulted_run WRITER MODE K: the run under test; its stderr
  KEEL_FAULT_ROOT=w KEEL_FAULT_SCOPE=${scope[$1]} KEEL_FAULT_MODE=$2 KEEL_FAULT_AT=$3 \
    KEEL_FAULT_STASH="$tmp/stash" KEEL_FAULT_REPORT="$tmp/report" LD_PRELOAD="$shim" \
    train --steps 4 --resume --run-dir w/run --cache-dir w/cache 2>&1 >/dev/null
}

trials=0
fired=0
run_trial() {  # run_trial WRITER MODE K
  local writer=$1 mode=$2 k=$3 out code before problems=() c line
  fresh_copy "$writer"
  out=$(faulted_run "$writer" "$mode" "$k")
  code=$?
  trials=$((trials + 1))
  grep -q '^fired' report 2>/dev/null && fired=$((fired + 1))
  if [[ $mode == crash ]] && grep -q '^fired' report; then
    [[ $code -eq 137 ]] || problems+=("a power loss should kill the run (exit 137), got $code")
  elif [[ $code -ne 0 ]]; then
    [[ $(grep -c . <<<"$out") -eq 1 && $out =~ ^\[[a-z_]+\]\  ]] ||
      problems+=("exit $code without one clear line: $(head -c 400 <<<"$out")")
  fi
  [[ -d w/run/checkpoints/step-2 ]] || problems+=("checkpoint step-2 is gone")
  for c in w/run/checkpoints/step-*; do
    "$keel" sample --checkpoint "$c" --prompt x --bytes 1 >/dev/null 2>&1 ||
      problems+=("$c does not load: $("$keel" sample --checkpoint "$c" --prompt x --bytes 1 2>&1 | tail -1)")
  done
  "$keel" cache verify --cache-dir w/cache >/dev/null 2>&1 ||
    problems+=("cache verify: $("$keel" cache verify --cache-dir w/cache 2>&1 | tail -2)")
  train --steps 1 --batch-size 1 --run-dir w/older2 --cache-dir w/cache 2>&1 | grep -q 'compiles 0,' ||
    problems+=("the older cache entries no longer load without compiling")
  if [[ -f w/run/metrics.jsonl ]] && ! jq -c . w/run/metrics.jsonl >/dev/null 2>&1; then
    problems+=("metrics.jsonl has a line that is not JSON")
  fi
  if [[ -f w/run/record.json ]] && ! jq -e . w/run/record.json >/dev/null 2>&1; then
    problems+=("record.json does not parse")
  fi
  # Missing parts are expected after a kill; a damaged metrics line or event record is not.
  out=$("$keel" report w/run -o w/report.html 2>&1) || problems+=("keel report fails: $out")
  grep -qE '^  (tb/|metrics.jsonl)' <<<"$out" && problems+=("keel report: $(grep -E '^  (tb/|metrics)' <<<"$out" | head -2)")
  out=$(train --steps 6 --resume --run-dir w/run --cache-dir w/cache 2>&1)
  if [[ $? -ne 0 ]]; then
    problems+=("the resume failed: $(tail -1 <<<"$out")")
  else
    # The resume dropped what the faulted run logged past its checkpoint: each training step is
    # in metrics.jsonl once, with the uninterrupted run's numbers, and so is the last evaluation.
    local got
    got=$(jq -c 'select(has("loss")) | [.step, .loss, .grad_norm, .lr]' w/run/metrics.jsonl)
    [[ $got == "$want_train" ]] ||
      problems+=("training log points differ from the uninterrupted run: $(diff <(echo "$want_train") <(echo "$got") | head -4 | tr '\n' ' ')")
    got=$(jq -c 'select(has("val_loss")) | [.step, .val_loss]' w/run/metrics.jsonl | tail -1)
    [[ $got == "$want_eval" ]] || problems+=("the last evaluation $got differs from $want_eval")
  fi
  if [[ ${#problems[@]} -gt 0 ]]; then
    echo "FAIL $writer $mode k=$k ($(grep '^fired' report 2>/dev/null | cut -d' ' -f3-4)):"
    printf '  %s\n' "${problems[@]}"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

for writer in "${writers[@]}"; do
  fresh_copy "$writer"
  faulted_run "$writer" count 0 >/dev/null
  read -r calls writes < <(sed -n 's/^calls \([0-9]*\) writes \([0-9]*\)$/\1 \2/p' report)
  if [[ -z ${calls:-} || $calls -lt 1 || $writes -lt 1 ]]; then
    echo "FAIL $writer: the counting run saw no calls ($(cat report 2>/dev/null))"
    fails=$((fails + 1))
    continue
  fi
  before=$((passes + fails))
  for mode in eio enospc short crash; do
    n=$calls
    [[ $mode == short ]] && n=$writes
    if [[ $depth == quick && ($mode == eio || $mode == enospc) ]]; then
      ks=$(printf '%s\n' 1 "$n" | uniq)  # an error: the first and the last call
    elif [[ $depth == quick ]]; then
      ks=$(printf '%s\n' 1 $(((n + 1) / 2)) "$n" | uniq)  # torn: the first, middle and last
    else
      ks=$(seq 1 "$n")
    fi
    for k in $ks; do run_trial "$writer" "$mode" "$k"; done
  done
  echo "$writer: $calls calls ($writes writes), $((passes + fails - before)) trials"
done
echo "fault sweep ($depth): $trials trials, $fired faults fired, $passes passed, $fails failed"
[[ $fails -eq 0 ]]
