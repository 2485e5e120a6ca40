#!/usr/bin/env bash
# bf16 matmuls against f32 in training: the same code-s run (same seed, data and schedule) with
# codegen.matmul_precision = f32 and = bf16; at every logged step the two training losses must
# stay within TOL nats. Usage: bf16_train.sh KEEL [STEPS [BATCH [TOL]]]
# make test runs 30 steps of batch 8, make stress 200 of the preset's batch 16. TOL = 0.05: the
# measured gap was at most 0.012 nats over 200 steps (0.004 over 30), the loss moving from 5.6
# to 2.4 meanwhile, so 0.05 catches a broken rounding or accumulation (which shows as a gap of
# tenths of a nat within 20 steps) without failing on the noise bf16 operands add.
set -euo pipefail
keel="$1"
steps="${2:-30}"
batch="${3:-8}"
tol="${4:-0.05}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if ! "$keel" features | grep -Eq '^bf16_matmul +available'; then
  echo "SKIP bf16_train: bf16_matmul is unavailable here ($("$keel" features | grep '^bf16_matmul'))"
  exit 0
fi

run() {
  "$keel" train --preset code-s --steps "$steps" --batch-size "$batch" --log-every 5 \
    --eval-every 0 --eval-batches 1 --sample-bytes 0 --run-dir "$tmp/$1" \
    --cache-dir "$tmp/cache" --set "codegen.matmul_precision=$1" >"$tmp/$1.out" 2>&1 ||
    { echo "FAIL bf16_train: keel train ($1) failed:"; cat "$tmp/$1.out"; exit 1; }
  # step and loss of every training log line of metrics.jsonl
  grep '"loss"' "$tmp/$1/metrics.jsonl" | sed -E 's/.*"step":([0-9]+).*"loss":([-0-9.e+]+).*/\1 \2/'
}

run f32 >"$tmp/f32.loss"
run bf16 >"$tmp/bf16.loss"
[[ -s "$tmp/f32.loss" ]] || { echo "FAIL bf16_train: no losses logged"; exit 1; }
paste "$tmp/f32.loss" "$tmp/bf16.loss" | awk -v tol="$tol" '
  { if ($1 != $3) { print "FAIL bf16_train: step " $1 " vs " $3; bad = 1; exit }
    d = $2 - $4; if (d < 0) d = -d; if (d > max) max = d
    printf "step %4d  f32 %.4f  bf16 %.4f  |diff| %.4f\n", $1, $2, $4, d
    if (d >= tol) bad = 1 }
  END { printf "max |loss_bf16 - loss_f32| = %.4f nats (tolerance %s)\n", max, tol
        if (bad) { print "FAIL bf16_train"; exit 1 } print "PASS bf16_train" }'
