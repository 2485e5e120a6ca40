#!/usr/bin/env bash
# bf16 matmuls against f32 in training: the same code-s run (same seed, data and schedule) with
# cpu.matmul_precision = f32 and = bf16; at every logged step the two training losses must
# stay within TOL nats, and their mean gap over the logged steps within MEAN_TOL.
# Usage: bf16_train.sh KEEL [STEPS [BATCH [TOL [MEAN_TOL]]]]
# A short run (30 steps of batch 8, TOL 0.05; make test checks bf16 with golden_bf16 instead):
# the runs agree to 0.002
# nats up to step 30 (measured at batch 16), so 0.05 still catches broken rounding or
# accumulation, which shows as tenths of a nat within 20 steps. make stress runs 200 steps of
# the preset's batch 16 with TOL 0.15 and MEAN_TOL 0.06: measured on the libstdc++ corpus, the
# gap was 0.115 at most (step 45, the peak learning rate 0.004) and 0.032 on average, bf16 the
# higher by 0.03-0.05 from step 50 on (2.253 against 2.201 at step 200, from 5.563 at step 1):
# the trajectories part once rounding changes the weights, and a per-batch loss then differs
# by about its own noise, so a 0.05 bound on every step of 200 does not hold.
set -euo pipefail
keel="$1"
steps="${2:-30}"
batch="${3:-8}"
tol="${4:-0.05}"
mean_tol="${5:-0.06}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if ! "$keel" features | grep -Eq '^bf16_matmul +available'; then
  echo "SKIP bf16_train: bf16_matmul is unavailable here ($("$keel" features | grep '^bf16_matmul'))"
  exit 0
fi

run() {
  "$keel" train --preset code-s --steps "$steps" --batch-size "$batch" --log-every 5 \
    --eval-every 0 --eval-batches 1 --sample-bytes 0 --run-dir "$tmp/$1" \
    --cache-dir "$tmp/cache" --set "cpu.matmul_precision=$1" >"$tmp/$1.out" 2>&1 ||
    { echo "FAIL bf16_train: keel train ($1) failed:"; cat "$tmp/$1.out"; exit 1; }
  # step and loss of every training log line of metrics.jsonl
  grep '"loss"' "$tmp/$1/metrics.jsonl" | sed -E 's/.*"step":([0-9]+).*"loss":([-0-9.e+]+).*/\1 \2/'
}

run f32 >"$tmp/f32.loss"
run bf16 >"$tmp/bf16.loss"
[[ -s "$tmp/f32.loss" ]] || { echo "FAIL bf16_train: no losses logged"; exit 1; }
paste "$tmp/f32.loss" "$tmp/bf16.loss" | awk -v tol="$tol" -v mean_tol="$mean_tol" '
  { if ($1 != $3) { print "FAIL bf16_train: step " $1 " vs " $3; bad = 1; exit }
    d = $2 - $4; if (d < 0) d = -d; if (d > max) max = d; sum += d; n++
    printf "step %4d  f32 %.4f  bf16 %.4f  |diff| %.4f\n", $1, $2, $4, d
    if (d >= tol) bad = 1 }
  END { printf "max |loss_bf16 - loss_f32| = %.4f nats (tolerance %s), mean %.4f (tolerance %s)\n",
          max, tol, sum / n, mean_tol
        if (sum / n >= mean_tol) bad = 1
        if (bad) { print "FAIL bf16_train"; exit 1 } print "PASS bf16_train" }'
