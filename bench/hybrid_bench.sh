#!/usr/bin/env bash
# make bench: the hybrid preset nam-s (sparse attention, experts, Mamba-2 and n-gram memory
# layers) beside code-s, the dense preset of the same width, on their default batch: each one's
# median ms/step over STEPS logged steps (the first left out), the runs taking turns ROUNDS times
# on a warm cache, and the ratio of the medians. Usage: hybrid_bench.sh KEEL [STEPS] [ROUNDS]
set -euo pipefail
shopt -s inherit_errexit
keel=$1
steps=${2:-12}
rounds=${3:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run PRESET NAME STEPS: one run on the shared cache; a failed run fails the benchmark.
run() {
  if ! "$keel" train --preset "$1" --steps "$3" --log-every 1 --eval-every 0 --sample-bytes 0 \
    --cache-dir "$tmp/cache" --run-dir "$tmp/$2" >"$tmp/$2.log" 2>&1; then
    echo "hybrid_bench: run $2 failed:" >&2
    tail -5 "$tmp/$2.log" >&2
    return 1
  fi
}
# The ms/step of every logged step but the first of each of PRESET's runs.
times() { cat "$tmp"/"$1"-*/metrics.jsonl | jq -r 'select(.step > 1 and .ms_per_step) | .ms_per_step'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for preset in code-s nam-s; do run "$preset" "warm-$preset" 1; done
for ((r = 1; r <= rounds; r++)); do
  for preset in code-s nam-s; do run "$preset" "$preset-$r" "$steps"; done
done
code=$(times code-s | median)
nam=$(times nam-s | median)
params() { sed -n "s/^keel train: $1 (\([0-9.]*M\) parameters).*/\1/p" "$tmp/warm-$1.log"; }
awk -v c="$code" -v n="$nam" -v pc="$(params code-s)" -v pn="$(params nam-s)" -v s="$steps" \
  -v r="$rounds" 'BEGIN {
    printf "hybrid nam-s (%s parameters) %.1f ms/step, code-s (%s) %.1f ms/step, 16 x 128 tokens, ", pn, n, pc, c
    printf "median of %d steps x %d rounds each: nam-s/code-s %.2fx\n", s - 1, r, n / c }'
