#!/usr/bin/python3
"""The figures tests/golden_test.cpp checks keel against, computed by PyTorch (Debian's
python3-torch) from keel's initial parameters and batch (golden_test --write-inputs): gpt2-s
written here op by op (layernorm, learned positions, causal attention kept inside each packed
document, GELU-tanh MLP, tied head), the mean next-token loss over live targets and every
parameter's gradient, then ten steps of torch.optim.AdamW with clip_grad_norm_ and keel's
warm-up + cosine schedule. All in f32. scripts/gen-golden runs it.

Usage: gpt2_s_torch.py INPUTS.safetensors OUT.json
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I64": torch.int64}
PROJECTIONS, SAMPLES = 3, 8


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(body[start:end]), dtype=DTYPES[entry["dtype"]])
        tensors[name] = t.reshape(entry["shape"]).clone()
    return tensors, meta


def figures(t):
    """As golden_test.cpp's figures_of: norm, projections on +-1 vectors over sqrt(n), samples."""
    x = t.detach().reshape(-1).double()
    n = x.numel()
    i = torch.arange(n, dtype=torch.int64)
    out = {"norm": x.norm().item(), "projections": [], "samples": []}
    for k in range(1, PROJECTIONS + 1):
        h = (i * 2654435761 + k * 40503) & 0xFFFFFFFF
        sign = ((h >> 16) & 1).double() * 2 - 1
        out["projections"].append((sign * x).sum().item() / math.sqrt(n))
    for j in range(SAMPLES):
        at = (j * 2654435761 + 12345) % n
        out["samples"].append([at, x[at].item()])
    return out


def fingerprint(t):
    """Sum of (i + 1) * value over the flattened field, as golden_test.cpp's."""
    x = t.reshape(-1).double()
    return (torch.arange(1, x.numel() + 1, dtype=torch.float64) * x).sum().item()


def without_key_bias(name, t, width):
    """As golden_test.cpp's: the key bias (gradient zero in exact arithmetic, so AdamW moves it
    by rounding noise) zeroed in the parameters compared after the steps."""
    if not name.endswith("attn.c_attn.bias"):
        return t
    t = t.detach().clone()
    t[width:2 * width] = 0
    return t


def block(p, pre, x, allowed, heads):
    b, t, c = x.shape
    d = c // heads
    h = F.layer_norm(x, (c,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], eps=1e-5)
    qkv = h @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]
    q, k, v = (z.reshape(b, t, heads, d).transpose(1, 2) for z in qkv.split(c, dim=2))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    att = att.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(b, t, c)
    x = x + y @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
    h = F.layer_norm(x, (c,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], eps=1e-5)
    h = F.gelu(h @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"], approximate="tanh")
    return x + h @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]


def loss_of(p, cfg, batch):
    tokens, targets, mask = batch["tokens"][0], batch["targets"][0], batch["loss_mask"][0]
    positions, docs = batch["positions"][0], batch["doc_ids"][0]
    t = tokens.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    allowed = (causal & (docs[:, :, None] == docs[:, None, :]))[:, None]  # [B, 1, T, T]
    x = p["wte.weight"][tokens] + p["wpe.weight"][positions]
    for layer in range(cfg["layers"]):
        x = block(p, f"h.{layer}.", x, allowed, cfg["heads"])
    x = F.layer_norm(x, (cfg["width"],), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    logits = x @ p["wte.weight"].t()
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                          reduction="none")
    return (nll * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)


def scheduled_lr(h, step):
    """keel's train::scheduled_lr: linear warm-up, then cosine down to lr * min_lr_ratio."""
    if step <= h["warmup_steps"]:
        return h["lr"] * step / max(h["warmup_steps"], 1.0)
    progress = (step - h["warmup_steps"]) / max(h["total_steps"] - h["warmup_steps"], 1.0)
    progress = min(max(progress, 0.0), 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return h["lr"] * (h["min_lr_ratio"] + (1.0 - h["min_lr_ratio"]) * cosine)


def dumps(value, depth=0):
    """JSON with one line per tensor's figures, per step and per setting: short diffs."""
    if not isinstance(value, dict) or not any(isinstance(v, (dict, list)) for v in value.values()):
        if isinstance(value, list) and value and isinstance(value[0], dict):
            pad = " " * (depth + 1)
            return "[\n" + ",\n".join(pad + json.dumps(v, sort_keys=True) for v in value) + "\n" + " " * depth + "]"
        return json.dumps(value, sort_keys=True)
    pad = " " * (depth + 1)
    items = [f"{pad}{json.dumps(k)}: {dumps(v, depth + 1)}" for k, v in sorted(value.items())]
    return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tensors, meta = read_safetensors(sys.argv[1])
    cfg, hyper = json.loads(meta["config"]), json.loads(meta["hyper"])
    batch = {k[len("batch."):]: v for k, v in tensors.items() if k.startswith("batch.")}
    params = {k: v.requires_grad_() for k, v in tensors.items() if not k.startswith("batch.")}
    out = {
        "generator": "tests/golden/gpt2_s_torch.py (scripts/gen-golden)",
        "torch": torch.__version__,
        "config": cfg,
        "hyper": hyper,
        "batch": {k: fingerprint(v) for k, v in batch.items()},
        "init": {k: figures(v) for k, v in params.items()},
    }

    loss = loss_of(params, cfg, batch)
    grads = torch.autograd.grad(loss, list(params.values()))
    out["step0"] = {"loss": loss.item(),
                    "grads": {k: figures(g) for k, g in zip(params.keys(), grads)}}

    # keel's decay rule (optim::default_decays): matrices, not the embeddings.
    decays = [v for k, v in params.items() if v.dim() >= 2 and not k.startswith(("wte", "wpe"))]
    others = [v for k, v in params.items() if not (v.dim() >= 2 and not k.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decays, "weight_decay": hyper["weight_decay"]},
                             {"params": others, "weight_decay": 0.0}],
                            lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]),
                            eps=hyper["eps"])
    steps = []
    for step in range(1, hyper["steps"] + 1):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(params, cfg, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), hyper["clip_norm"])
        lr = scheduled_lr(hyper, step)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        steps.append({"loss": loss.item(), "grad_norm": norm.item(), "lr": lr})
        print(f"step {step}: loss {loss.item():.6f} grad_norm {norm.item():.6f} lr {lr:.3g}")
    out["steps"] = steps
    out["params_after"] = {k: figures(without_key_bias(k, v, cfg["width"]))
                           for k, v in params.items()}
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(dumps(out) + "\n")
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
