#!/usr/bin/env bash
# Launches that go wrong (issue 15). Ranks launched differently on purpose (batch size, codegen
# option, model config) are stopped before any step, every one of them with the reason. No
# collective waits forever: a rank stopped (kill -STOP) or killed (kill -9) in the middle of a
# data-parallel run makes every other rank exit non-zero within the deadline plus a margin,
# naming the rank that did not arrive and what it was waited for in; the last complete
# checkpoint then resumes at another number of processes. Usage: dp_fault_test.sh KEEL
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/check.sh"
tmp=$(mktemp -d)
trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT

tiny_run_inputs "$tmp"
data="$tmp/corpus"
deadline=3
cfg=(--config "$tmp/tiny.json")
common=(--data "$data" --cache-dir "$tmp/cache" --sample-bytes 0
  --eval-batches 2 --eval-every 0 --log-every 1000 --ckpt-every 50 --keep 3
  --total-steps 1000000)
host=$(hostname)

# disagree NAME REASON [ARGS OF RANK 0] -- [ARGS OF RANK 1]: a launch of two differently
# configured ranks stops before its first step, each rank printing the disagreement and REASON.
disagree() {
  local name=$1 reason=$2 a=() b=()
  shift 2
  while [[ $1 != -- ]]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local dir="$tmp/run-$name"
  local run=(train "${common[@]}" --steps 3 --run-dir "$dir")
  [[ " ${b[*]} " == *" --config "* ]] || b+=("${cfg[@]}")
  a+=("${cfg[@]}")
  local out code
  out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 "$keel" "${run[@]}" "${a[@]}" \
    : -np 1 "$keel" "${run[@]}" "${b[@]}" 2>&1)
  code=$?
  local lines
  lines=$(grep -oE "\[dist\] the processes disagree on program '[a-z_]+' before its first run .*rank 1 \(host $host\) differs from rank 0: .*$reason" <<<"$out" | wc -l)
  if [[ $code -eq 0 ]] || [[ $code -eq 124 ]] || [[ $lines -ne 2 ]] || [[ -s "$dir/metrics.jsonl" ]]; then
    echo "FAIL $name: exit $code, $lines of 2 ranks named the difference, output:"
    grep -v "step [0-9]*/" <<<"$out" | tail -8
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
disagree batch-size 'input [0-9]+ \(batch leaf .tokens.\) shape i64\[1,2,32\] -> i64\[1,4,32\]' --batch-size 2 -- --batch-size 4
disagree opt-level 'codegen option flags changed: .*-O2.* -> .*-O1' -- --set cpu.opt_level=1
# Programs that exchange nothing need no agreement, so one that only some ranks run (the
# leader's sampling; an evaluation share that leaves rank 3 of 4 without a batch) runs at once.
check leader-only-programs 0 'done: steps 1\.\.2' -- timeout 120 mpirun --allow-run-as-root \
  --oversubscribe -np 4 "$keel" train "${cfg[@]}" --data "$data" --cache-dir "$tmp/cache" \
  --sample-bytes 32 --eval-batches 3 --steps 2 --run-dir "$tmp/run-leader"
# The first evaluation's gather waits out a compile: with one validation batch, rank 1 has none
# and gathers at once while rank 0 compiles code-s's eval_step (seconds; the deadline is 1 s).
check first-eval-waits-for-compile 0 'done: steps 1\.\.1' -- timeout 180 mpirun \
  --allow-run-as-root --oversubscribe -np 2 "$keel" --set spmd.collective_timeout_s=1 train \
  --preset code-s --batch-size 1 --data "$data" --cache-dir "$tmp/cold" --sample-bytes 0 \
  --eval-batches 1 --steps 1 --run-dir "$tmp/run-first-eval"
cat >"$tmp/wider.json" <<'JSON'
{"name": "code-s", "layers": 1, "width": 32, "heads": 4, "kv_heads": 4, "mlp_hidden": 64,
 "seq": 32, "batch": 2}
JSON
disagree model-config "input 0 \\(params leaf 'h\\.0\\.attn\\.c_attn\\.weight'\\) shape f32\\[32,64\\] -> f32\\[32,96\\]" -- \
  --config "$tmp/wider.json"

# A diverged run: the loss and gradient norm are global, so every rank stops at the same log point
# with the same line (exit 1, no hang, no checkpoint of the diverged state).
out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${cfg[@]}" \
  --data "$data" --cache-dir "$tmp/cache" --sample-bytes 0 --steps 6 --log-every 1 --lr 1e30 \
  --run-dir "$tmp/run-nan" 2>&1)
code=$?
lines=$(grep -oE "^\[train\] step [0-9]+: the loss is .*: training diverged" <<<"$out" | sort | uniq -c)
if [[ $code -ne 1 ]] || [[ $(wc -l <<<"$lines") -ne 1 ]] || [[ $lines != *" 2 [train]"* ]] ||
  [[ -e "$tmp/run-nan/checkpoints" ]]; then
  echo "FAIL diverged: exit $code (want 1), want one line from both ranks: $lines"
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi

# A checkpoint the leader cannot finish: at ZeRO 3 the other rank is sending its slices into the
# leader's gathers when the optimizer file's first tensor fails to write (call 4: the open, the
# header's two writes, then it). The leader's line ends the launch at once, not the other rank's
# deadline (60 s).
shim="$(dirname "$keel")/tests/libkeel_fault.so"
if [[ -e $shim ]]; then
  start=$EPOCHREALTIME
  check failed-streamed-checkpoint 1 "^\[checkpoint\] step 2 was not saved \(\[safetensors\] cannot write .*optimizer\.safetensors.*: No space left on device\)" -- \
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$shim" \
    -x KEEL_FAULT_ROOT="$tmp/run-enospc" -x KEEL_FAULT_SCOPE=optimizer.safetensors -x KEEL_FAULT_AT=4 \
    -x KEEL_FAULT_MODE=enospc -x KEEL_FAULT_REPORT="$tmp/enospc.report" "$keel" \
    --set sharding.zero=3 --set spmd.collective_timeout_s=60 train "${cfg[@]}" --data "$data" \
    --cache-dir "$tmp/cache" --sample-bytes 0 --steps 2 --ckpt-every 2 --run-dir "$tmp/run-enospc"
  took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }')
  if [[ $took -ge 45 ]] || ! grep -q "^fired 4 write .*optimizer" "$tmp/enospc.report"; then
    echo "FAIL failed-streamed-checkpoint: ended after $took s, fault report: $(head -2 "$tmp/enospc.report")"
    fails=$((fails + 1))
  fi
fi

# stopped_launch NAME SIGNAL WHO: two ranks train until a checkpoint exists, then SIGNAL goes to
# WHO (rank1, or mpirun); waits a minute at most for the launch to end. Sets `code` (its exit
# code) and `n` (the step it stopped after, from its output in $tmp/NAME.out).
stopped_launch() {
  local name=$1 sig=$2 who=$3 dir="$tmp/run-$1"
  mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${cfg[@]}" "${common[@]}" \
    --steps 1000000 --run-dir "$dir" >"$tmp/$name.out" 2>&1 &
  local launch=$! target
  for _ in $(seq 480); do compgen -G "$dir/checkpoints/step-*" >/dev/null && break; sleep 0.5; done
  target=$launch
  [[ $who == rank1 ]] && target=$(pid_of_rank 1 "$dir")
  [[ -n $target ]] && kill -"$sig" "$target"
  timeout 60 tail --pid=$launch -f /dev/null
  kill -0 $launch 2>/dev/null && pkill -KILL -f -- "--run-dir $dir"  # no stop within a minute
  wait $launch
  code=$?
  n=$(tr '\r' '\n' <"$tmp/$name.out" | sed -n 's/^stopped after step \([0-9]*\) of 1000000 (signal [0-9]*).*/\1/p')
}

# SIGTERM to one rank (a preempted host): every rank stops after the same step, the leader
# checkpoints it, the launch exits 143 without an abort, and the run resumes from that
# checkpoint. No progress bar is drawn under mpirun (its pty is not the user's terminal).
stopped_launch term TERM rank1
dir="$tmp/run-term"
if [[ $code -ne 143 || -z $n || ! -e "$dir/checkpoints/step-$n/trainer.json" ]] ||
  ! grep -q '(signal 15)' "$tmp/term.out" || grep -q -e '\] step [0-9]*/' -e 'MPI_ABORT' "$tmp/term.out"; then
  echo "FAIL term-one-rank: exit $code (want 143, no MPI_ABORT), stopped after step '$n'"
  tr '\r' '\n' <"$tmp/term.out" | grep -v '^\[#' | tail -5
  fails=$((fails + 1))
else
  passes=$((passes + 1))
  check term-resume 0 "resumed from .*step-$n \\(step $n\\)" -- mpirun --allow-run-as-root \
    --oversubscribe -np 2 "$keel" train "${cfg[@]}" "${common[@]}" --steps $((n + 2)) --run-dir "$dir" --resume
fi

# SIGUSR1 to mpirun itself (a batch system's warning before preemption): mpirun forwards it
# to every rank and kills none, so they stop after one step, checkpointed, and the launch exits
# 138 (SIGTERM to mpirun kills the ranks a second later, before they can checkpoint).
stopped_launch usr1 USR1 mpirun
dir="$tmp/run-usr1"
if [[ $code -ne 138 || -z $n || ! -e "$dir/checkpoints/step-$n/trainer.json" ]] ||
  ! grep -q '"stopped_by_signal": 10' "$dir/record.json" || grep -q 'MPI_ABORT' "$tmp/usr1.out"; then
  echo "FAIL usr1-to-mpirun: exit $code (want 138, no MPI_ABORT), stopped after step '$n'"
  tr '\r' '\n' <"$tmp/usr1.out" | grep -v '^\[#' | tail -5
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi

# fault NAME N SIGNAL: N ranks train until a checkpoint exists, then rank 1 gets SIGNAL; the
# launch must end non-zero within the deadline plus a margin.
fault() {
  local name=$1 n=$2 sig=$3 dir="$tmp/run-$1"
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$keel" \
    --set spmd.collective_timeout_s=$deadline train "${cfg[@]}" "${common[@]}" --steps 1000000 \
    --run-dir "$dir" >"$tmp/$name.out" 2>&1 &
  local launch=$! waited=0 victim=""
  until compgen -G "$dir/checkpoints/step-*" >/dev/null || [[ $waited -ge 240 ]]; do
    sleep 0.5
    waited=$((waited + 1))
  done
  victim=$(pid_of_rank 1 "$dir")
  if [[ -z "$victim" ]]; then
    echo "FAIL $name: rank 1 never wrote a checkpoint"
    tail -5 "$tmp/$name.out"
    fails=$((fails + 1))
    kill -KILL $launch 2>/dev/null
    return
  fi
  local start=$SECONDS
  echo "$(date +%T) $name: rank 1 gets SIG$sig after $((waited / 2)) s" >&2
  kill "-$sig" "$victim"
  wait $launch
  local code=$? took=$((SECONDS - start))
  echo "$(date +%T) $name: launch ended $took s later" >&2
  if [[ $code -eq 0 ]] || [[ $took -gt $((deadline + 20)) ]]; then
    echo "FAIL $name: exit $code after $took s (want non-zero within $((deadline + 20)) s)"
    tail -5 "$tmp/$name.out"
    fails=$((fails + 1))
    return
  fi
  passes=$((passes + 1))
}

# Stopped: every live rank names rank 1 among the ranks it did not hear from (a live rank still
# waiting for rank 1 may be missing too), and the collective and program it waited in.
for n in 2 4; do
  fault "stop-$n" $n STOP
  lines=$(grep -oE "\[dist\] (rank [0-9]+ \(host $host\), )*rank 1 \(host $host\)(, rank [0-9]+ \(host $host\))* did not arrive within $deadline s: rank [0-9]+ \(host $host\) was waiting in (all_reduce over 'data' in program 'train_step'|the stop check after step [0-9]+)" "$tmp/stop-$n.out" | sed -E 's/.*: rank ([0-9]+) .*/\1/' | sort -u | grep -vc '^1$')
  if [[ $lines -ne $((n - 1)) ]]; then
    echo "FAIL stop-$n: $lines of the $((n - 1)) live ranks named rank 1; output:"
    grep -v "step [0-9]*/" "$tmp/stop-$n.out" | tail -12
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
done
# Killed: the launcher ends the job at once and names the rank.
fault kill-2 2 KILL
check kill-2-named 0 'rank 1 with PID [0-9]+ on node .* exited on signal 9' -- cat "$tmp/kill-2.out"

# The newest complete checkpoint of the stopped 4-rank run resumes at 1 and at 2 processes
# (global batch 4 either way), and its files are whole.
dir="$tmp/run-stop-4"
last=$(ls "$dir/checkpoints" | sed 's/step-//' | sort -n | tail -1)
for f in model.safetensors optimizer.safetensors trainer.json; do
  check "checkpoint-$f" 0 '' -- test -s "$dir/checkpoints/step-$last/$f"
done
cp -r "$dir" "$tmp/run-resume-2"
check resume-at-1 0 "resumed from .*step-$last" -- "$keel" train "${cfg[@]}" "${common[@]}" --accum 4 \
  --steps $((last + 2)) --run-dir "$dir" --resume
check resume-at-2 0 "resumed from .*step-$last" -- mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$keel" train "${cfg[@]}" "${common[@]}" --accum 2 --steps $((last + 2)) --run-dir "$tmp/run-resume-2" \
  --resume

# A rank that stalls (stopped 3 s, twice) is named in that step's log line as the slowest, with
# its busy time: the others' waits for it are not counted as theirs. A SIGTERM to rank 0 ends it.
dir="$tmp/run-slow"
mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${cfg[@]}" --data "$data" \
  --cache-dir "$tmp/cache" --sample-bytes 0 --eval-batches 2 --eval-every 0 --log-every 1 \
  --ckpt-every 50 --keep 1 --total-steps 1000000 --steps 1000000 --run-dir "$dir" \
  >"$tmp/slow.out" 2>&1 &
launch=$!
waited=0
until [[ -s "$dir/metrics.jsonl" ]] || [[ $waited -ge 240 ]]; do
  sleep 0.5
  waited=$((waited + 1))
done
slow=$(pid_of_rank 1 "$dir")
leader=$(pid_of_rank 0 "$dir")
if [[ -z "$slow" || -z "$leader" ]]; then
  echo "FAIL straggler: the run never logged a step"
  tail -5 "$tmp/slow.out"
  fails=$((fails + 1))
  kill -KILL $launch 2>/dev/null
else
  for i in 1 2; do
    kill -STOP "$slow"
    sleep 3
    kill -CONT "$slow"
    sleep 1
  done
  kill -TERM "$leader"
  timeout 60 tail --pid=$launch -f /dev/null
  kill -0 $launch 2>/dev/null && pkill -KILL -f -- "--run-dir $dir"  # no stop within a minute
  wait $launch
  code=$?
  if [[ $code -ne 143 ]] ||
    ! grep -qE "^step +[0-9]+/[0-9]+ .*  slowest: rank 1 \(host $host\), busy [0-9]{4,} ms a step, [0-9.]+x the others$" "$tmp/slow.out"; then
    echo "FAIL straggler: exit $code (want 143), no line naming rank 1 as the slowest:"
    grep -E "slowest|stopped" "$tmp/slow.out" | tail -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
fi

echo "dp_fault: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
