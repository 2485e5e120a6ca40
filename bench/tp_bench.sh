#!/usr/bin/env bash
# make bench: what each sharding rule over "model" buys the hybrid preset nam-s on this host, in
# one run. The same 2-process run (mpirun, mesh data=1 x model=2) with the default rules (heads,
# mlp), then adding experts, then vocab and memory too: each process's training state
# (record.json's state_bytes), its predicted and observed peaks, tokens/s (median step), and the
# ratios to the default rules; then what each run's train step exchanges (calls and bytes per
# collective). Usage: tp_bench.sh KEEL [PRESET] [STEPS]
set -euo pipefail
keel=$1
preset=${2:-nam-s}
steps=${3:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--preset "$preset" --steps "$steps" --eval-batches 1 --sample-bytes 0
  --cache-dir "$tmp/cache" --set spmd.enabled=true --set spmd.mesh_axes=data,model
  --set spmd.mesh_shape=1,2)
rules=('["heads=model", "mlp=model"]'
  '["heads=model", "mlp=model", "experts=model"]'
  '["heads=model", "mlp=model", "experts=model", "vocab=model", "memory=model"]')
for i in 0 1 2; do
  if ! mpirun --allow-run-as-root --oversubscribe -np 2 "$keel" train "${common[@]}" \
    --set "sharding.rules=${rules[$i]}" --run-dir "$tmp/rules$i" >/dev/null 2>"$tmp/rules$i.log"; then
    echo "tp_bench: the run with sharding.rules=${rules[$i]} failed:" >&2
    tail -5 "$tmp/rules$i.log" >&2
    exit 1
  fi
done
host=$(sed -n '/^model name/{s/^[^:]*: //p;q}' /proc/cpuinfo)  # the first only: no pipe to close
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$(dirname "$0")" \
  python3 - "$tmp" "$preset" "$host" "${rules[@]}" <<'PY'
import sys
from run_figures import figures as run_figures, step_collectives
tmp, preset, host, *rules = sys.argv[1:]
figures = lambda i: run_figures(f"{tmp}/rules{i}")
t0, s0, q0, p0 = figures(0)
print(f"tp {preset}, data=1 x model=2 ({host}): rules {rules[0]}: {t0:.0f} tok/s, state "
      f"{s0 / 1e6:.1f} MB, predicted peak {q0 / 1e6:.0f} MB, observed peak {p0 / 1e6:.0f} MB a "
      f"process")
for i in (1, 2):
    t, s, q, p = figures(i)
    print(f"  rules {rules[i]}: {t:.0f} tok/s ({t / t0:.2f}x), state {s / 1e6:.1f} MB "
          f"({s / s0:.2f}x), predicted {q / 1e6:.0f} MB ({q / q0:.2f}x), observed "
          f"{p / 1e6:.0f} MB ({p / p0:.2f}x)")
for i in (0, 1, 2):
    print(f"  rules {i} train_step collectives: " + step_collectives(f"{tmp}/rules{i}"))
PY
