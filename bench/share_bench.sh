#!/usr/bin/env bash
# make bench: processes sharing the cores. N short training runs of PRESET started together
# against the same N one after another, each way with keel's bounded spin and with libgomp's
# default spin (GOMP_SPINCOUNT=300000, what keel ran with before it bounded it); then one process
# alone, its median ms/step with each spin (alternating runs). Ratios in one run, warm cache.
# Usage: share_bench.sh KEEL [N] [PRESET|CONFIG.json] [STEPS]   (make test: a one-layer config)
set -euo pipefail
shopt -s inherit_errexit
keel=$1
n=${2:-8}
preset=${3:-gpt2-s}
steps=${4:-12}
model=(--preset "$preset")
[[ $preset == *.json ]] && model=(--config "$preset") && preset=$(basename "$preset" .json)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
probe=$(env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$keel" probe --cache-dir "$tmp/cache")
keel_spin=$(sed -n 's/.*idle threads: GOMP_SPINCOUNT=\([0-9]*\) (set by keel).*/\1/p' <<<"$probe")
[[ -n $keel_spin ]] || { echo "share_bench: keel probe did not report keel's spin count" >&2; exit 1; }
libgomp_spin=300000

# run NAME SPIN STEPS: one run on the shared warm cache; its log is $tmp/NAME.log. A run that
# fails fails the benchmark, naming its log's last lines.
run() {
  if ! GOMP_SPINCOUNT=$2 "$keel" train "${model[@]}" --steps "$3" --log-every 1 \
    --eval-every 0 --sample-bytes 0 --cache-dir "$tmp/cache" --run-dir "$tmp/$1" \
    >"$tmp/$1.log" 2>&1; then
    echo "share_bench: run $1 failed:" >&2
    tail -5 "$tmp/$1.log" >&2
    return 1
  fi
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }
run warm "$keel_spin" 1

# apart SPIN / together SPIN: wall seconds of N runs one after another / started together.
apart() {
  local t0 i
  t0=$(now)
  for i in $(seq "$n"); do run "apart-$1-$i" "$1" 1; done
  since "$t0"
}
together() {
  local t0 i p pids=()
  t0=$(now)
  for i in $(seq "$n"); do
    run "together-$1-$i" "$1" 1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  since "$t0"
}
# median_ms LOG...: the median ms/step over every step after the first of each log.
median_ms() {
  grep -h '^step ' "$@" | grep -v '^step *1/' | sed -n 's/.* \([0-9][0-9]*\) ms\/step.*/\1/p' |
    sort -n | awk '{a[NR] = $1} END { if (NR == 0) exit 1; print a[int((NR + 1) / 2)] }'
}

cores=$(nproc)
host=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)
for spin in "$keel_spin" "$libgomp_spin"; do
  a=$(apart "$spin")
  t=$(together "$spin")
  what=$([[ $spin == "$keel_spin" ]] && echo "keel's bounded spin" || echo "libgomp's default spin")
  awk -v a="$a" -v t="$t" -v n="$n" -v c="$cores" -v p="$preset" -v s="$spin" -v w="$what" -v h="$host" \
    'BEGIN { printf "shared cores %s: %d runs on %d cores (%s), GOMP_SPINCOUNT=%s (%s): together %.1f s, one after another %.1f s, together/apart %.2fx (target <= 1.5x)\n", p, n, c, h, s, w, t, a, t / a }'
done

for i in 1 2 3; do
  run "alone-keel-$i" "$keel_spin" "$steps"
  run "alone-libgomp-$i" "$libgomp_spin" "$steps"
done
k=$(median_ms "$tmp"/alone-keel-*.log)
g=$(median_ms "$tmp"/alone-libgomp-*.log)
awk -v k="$k" -v g="$g" -v p="$preset" -v s="$keel_spin" -v l="$libgomp_spin" \
  'BEGIN { r = g > 0 ? sprintf("%.2fx", k / g) : "n/a (under 1 ms/step)"
    printf "one process alone %s: GOMP_SPINCOUNT=%s %d ms/step, GOMP_SPINCOUNT=%s %d ms/step, keel/default %s (medians of 3 runs)\n", p, s, k, l, g, r }'
