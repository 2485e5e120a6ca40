# What the sharding benches (zero_bench, tp_bench, ep_bench) read from a finished run directory:
# its record.json's figures and its train step's program record.
import glob
import json


def figures(run):
    """tokens/s (median step) and the largest state, predicted and observed peak of any rank."""
    r = json.load(open(f"{run}/record.json"))
    ranks = r["ranks"]
    return (r["metrics"]["tokens_per_s"], max(k["state_bytes"]["total"] for k in ranks),
            max(k["predicted_peak_bytes"] for k in ranks),
            max(k["observed_peak_bytes"] for k in ranks))


def step_collectives(run):
    """The train step's collectives as one line: "op N calls B MB, ...", by op name."""
    for f in glob.glob(f"{run}/programs/*.json"):
        r = json.load(open(f))
        if r["function"] == "train_step":
            return ", ".join(f"{op} {c['calls']} calls {c['bytes'] / 1e6:.1f} MB"
                             for op, c in sorted(r["collectives"].items()))
    raise SystemExit(f"{run}/programs has no train_step record")
