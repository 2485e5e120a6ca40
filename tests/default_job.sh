#!/usr/bin/env bash
# The default job (`make run`: keel train on its built-in default) under the training profile,
# whose shape guard is strict: init and train_step at the start, eval_step first at its first
# evaluation, sample_step at the end, each one program compiled once and none a violation.
# Usage: default_job.sh KEEL [STEPS [EVAL_EVERY]]. STEPS defaults to the whole job (600:
# `make stress`, evaluating every 100 steps); `make test` runs 21 evaluating every 10.
set -u
keel="$1"
steps="${2:-}"
eval_every="${3:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--profile train train --cache-dir "$tmp/cache" --run-dir "$tmp/run")
[[ -n $steps ]] && args+=(--steps "$steps")
[[ -n $eval_every ]] && args+=(--eval-every "$eval_every")
if ! out=$("$keel" "${args[@]}" 2>&1); then
  echo "FAIL default job: $(echo "$out" | tail -3)"
  exit 1
fi
field() { sed -n "s/^  \"$1\": \([0-9.e+-]*\),\{0,1\}$/\1/p" "$tmp/run/record.json"; }
fails=0
grep -q "^done: steps 1\.\.${steps:-600}," <<<"$out" || { echo "FAIL default job did not finish: $(echo "$out" | tail -1)"; fails=$((fails + 1)); }
grep -q '\[shape_guard\]' <<<"$out" && { echo "FAIL default job: a shape guard line"; fails=$((fails + 1)); }
[[ $(field programs) -eq 4 && $(field compiles) -eq 4 ]] || { echo "FAIL default job: programs $(field programs), compiles $(field compiles) (want 4 and 4)"; fails=$((fails + 1)); }
# Every program the run needs (train, eval, sample) exists before step 1: the curve is flat after.
[[ $(grep -c '"step":0,' "$tmp/run/compiles.jsonl") -eq 4 ]] || { echo "FAIL default job: not every program was compiled before step 1: $(cat "$tmp/run/compiles.jsonl")"; fails=$((fails + 1)); }
[[ -s "$tmp/run/report.html" && -s "$tmp/run/trace.json" ]] || { echo "FAIL default job: no report.html or trace.json"; fails=$((fails + 1)); }
[[ $fails -eq 0 ]] && echo "default job: ${steps:-600} steps under --profile train, 4 programs, no violation"
[[ $fails -eq 0 ]]
