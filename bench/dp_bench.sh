#!/usr/bin/env bash
# make bench: data-parallel training throughput on this host, in one run. The same global batch
# (2 micro-batches of the preset) as 1 process x 2 threads (--accum 2) and as 2 processes x 1
# thread (mpirun, --accum 1); tokens/s from each run's record.json (median step), and the ratio.
# Usage: dp_bench.sh KEEL [PRESET] [STEPS]
set -euo pipefail
keel=$1
preset=${2:-gpt2-s}
steps=${3:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--preset "$preset" --steps "$steps" --eval-batches 1 --sample-bytes 0
  --cache-dir "$tmp/cache")
tokens() { sed -n 's/^ *"tokens_per_s": \([0-9.e+-]*\),\{0,1\}$/\1/p' "$1/record.json" | head -1; }
"$keel" train "${common[@]}" --accum 2 --set launch.threads=2 --run-dir "$tmp/one" >/dev/null
mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" --accum 1 \
  --run-dir "$tmp/two" >/dev/null 2>"$tmp/two.log"
one=$(tokens "$tmp/one")
two=$(tokens "$tmp/two")
host=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)  # the first only: no pipe to close
awk -v a="$one" -v b="$two" -v p="$preset" -v h="$host" 'BEGIN {
  printf "data parallel %s, global batch of 2 micro-batches (%s): 1 process x 2 threads %.0f tok/s, 2 processes x 1 thread %.0f tok/s (%.2fx)\n", p, h, a, b, b / a }'
