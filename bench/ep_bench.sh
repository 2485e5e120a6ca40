#!/usr/bin/env bash
# make bench: what expert parallelism over "data" (sharding.rules experts=data) buys a MoE preset
# on this host, in one run. The same 2-process run (mpirun, --accum 1, unrolled layers) at
# sharding.zero = 0, at 3, and at 3 with experts=data: tokens/s (median step), each process's
# training state (record.json's state_bytes), its predicted and observed peaks, the ratios to
# stage 3 alone; then what each run's train step exchanges (calls and bytes per collective).
# Usage: ep_bench.sh KEEL [PRESET | CONFIG.json] [STEPS]
set -euo pipefail
keel=$1
preset=${2:-nam-s}
steps=${3:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--preset "$preset")
[[ $preset == *.json ]] && model=(--config "$preset")
common=("${model[@]}" --steps "$steps" --accum 1 --eval-batches 1 --sample-bytes 0
  --cache-dir "$tmp/cache" --set launch.layer_layout=unrolled)
runs=(zero0 zero3 experts)
settings=("--set sharding.zero=0" "--set sharding.zero=3"
  "--set sharding.zero=3 --set sharding.rules=experts=data")
for i in 0 1 2; do
  # shellcheck disable=SC2086  # each setting is two or four words
  if ! mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" \
    ${settings[$i]} --run-dir "$tmp/${runs[$i]}" >/dev/null 2>"$tmp/${runs[$i]}.log"; then
    echo "ep_bench: the run with ${settings[$i]} failed:" >&2
    tail -5 "$tmp/${runs[$i]}.log" >&2
    exit 1
  fi
done
host=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)  # the first only: no pipe to close
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$(dirname "$0")" \
  python3 - "$tmp" "$preset" "$host" <<'PY'
import json, sys
from run_figures import figures, step_collectives
tmp, preset, host = sys.argv[1:]
def loss(run):
    with open(f"{tmp}/{run}/metrics.jsonl") as f:
        steps = [json.loads(l) for l in f if '"loss"' in l]
    return steps[-1]["loss"]
t3, s3, q3, p3 = figures(f"{tmp}/zero3")
line = f"ep {preset}, 2 processes x --accum 1, unrolled ({host}): "
for run, name in (("zero0", "stage 0"), ("zero3", "stage 3"), ("experts", "stage 3 + experts=data")):
    t, s, q, p = figures(f"{tmp}/{run}")
    line += (f"{'; ' if run != 'zero0' else ''}{name} {t:.0f} tok/s ({t / t3:.2f}x), state "
             f"{s / 1e6:.1f} MB ({s / s3:.2f}x), predicted {q / 1e6:.0f} MB ({q / q3:.2f}x), "
             f"observed {p / 1e6:.0f} MB ({p / p3:.2f}x)")
print(line + "; ratios to stage 3")
# The runs train the same model on the same batches: their last losses agree.
print("  last loss: " + ", ".join(f"{run} {loss(run):.6f}" for run in ("zero0", "zero3", "experts")))
for run in ("zero0", "zero3", "experts"):
    print(f"  {run} train_step collectives: " + step_collectives(f"{tmp}/{run}"))
PY
