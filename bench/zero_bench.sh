#!/usr/bin/env bash
# make bench: ZeRO stages 1, 2 and 3 against stage 0 on this host, in one run. The same 2-process
# run (mpirun, --accum 1) at sharding.zero = 0, 1, 2 and 3: tokens/s (median step), each
# process's training state (record.json's state_bytes), its predicted and observed peaks, and
# the ratios to stage 0; then what each stage's train step exchanges (calls and bytes per
# collective); and the step split at every layer, and the scanned step, at stages 0 and 3.
# Usage: zero_bench.sh KEEL [PRESET | CONFIG.json] [STEPS]
set -euo pipefail
keel=$1
preset=${2:-gpt2-m}
steps=${3:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--preset "$preset")
[[ $preset == *.json ]] && model=(--config "$preset")
common=("${model[@]}" --steps "$steps" --eval-batches 1 --sample-bytes 0 --cache-dir "$tmp/cache")
for zero in 0 1 2 3; do
  mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" --accum 1 \
    --set sharding.zero=$zero --run-dir "$tmp/zero$zero" >/dev/null 2>"$tmp/zero$zero.log"
done
# The step split at every layer (split:1), at stages 0 and 3: each segment's programs gather
# their own layers' slices.
for zero in 0 3; do
  mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" --accum 1 \
    --set launch.layer_layout=split:1 --set sharding.zero=$zero --run-dir "$tmp/split$zero" \
    >/dev/null 2>"$tmp/split$zero.log"
done
# Scanned layers (launch.layer_layout = scanned) at stages 0 and 3: at 3 the scan reads each
# stacked layer inside its body.
for zero in 0 3; do
  mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" --accum 1 \
    --set launch.layer_layout=scanned --set sharding.zero=$zero --run-dir "$tmp/scanned$zero" \
    >/dev/null 2>"$tmp/scanned$zero.log"
done
host=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)  # the first only: no pipe to close
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$(dirname "$0")" \
  python3 - "$tmp" "$preset" "$host" <<'PY'
import sys
from run_figures import figures as run_figures, step_collectives
tmp, preset, host = sys.argv[1:]
figures = lambda zero, run="zero": run_figures(f"{tmp}/{run}{zero}")
t0, s0, q0, p0 = figures(0)
line = (f"zero {preset}, 2 processes x --accum 1 ({host}): stage 0 {t0:.0f} tok/s, state "
        f"{s0 / 1e6:.0f} MB, predicted peak {q0 / 1e6:.0f} MB, observed peak {p0 / 1e6:.0f} MB "
        f"a process")
for zero in (1, 2, 3):
    t, s, q, p = figures(zero)
    line += (f"; stage {zero} {t:.0f} tok/s ({t / t0:.2f}x), state {s / 1e6:.0f} MB "
             f"({s / s0:.2f}x), predicted {q / 1e6:.0f} MB ({q / q0:.2f}x), observed "
             f"{p / 1e6:.0f} MB ({p / p0:.2f}x)")
print(line)
for layout in ("split", "scanned"):
    t0, s0, q0, p0 = figures(0, layout)
    t, s, q, p = figures(3, layout)
    name = "split:1" if layout == "split" else layout
    print(f"{name} {preset}, 2 processes: stage 0 {t0:.0f} tok/s, state {s0 / 1e6:.0f} MB, "
          f"predicted {q0 / 1e6:.0f} MB, observed {p0 / 1e6:.0f} MB; stage 3 {t:.0f} tok/s "
          f"({t / t0:.2f}x), state {s / 1e6:.0f} MB ({s / s0:.2f}x), predicted {q / 1e6:.0f} MB "
          f"({q / q0:.2f}x), observed {p / 1e6:.0f} MB ({p / p0:.2f}x)")
# What one train step exchanges per process (programs/<key>.json), per stage.
for zero in (0, 1, 2, 3):
    print(f"  stage {zero} train_step collectives: " + step_collectives(f"{tmp}/zero{zero}"))
PY
