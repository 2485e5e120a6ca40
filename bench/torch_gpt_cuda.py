#!/usr/bin/env python3
"""The PyTorch baseline of make device-check (issue 49): keel's gpt2 presets' model (layernorm,
learned positions, causal attention, GELU-tanh MLP 4x wide, biases, output layer tied to the
token embedding, byte vocabulary), trained on the GPU as a PyTorch user writes it: bf16 autocast,
fused causal attention (scaled_dot_product_attention), AdamW, gradient clipping at 1; eager, or
under torch.compile. The same batch shape as keel's run.

Prints one JSON line: {"mode", "ms_per_step" (median after the warm-up), "compile_s" (the
warm-up steps' time), "parameters", "tokens_per_step", "torch"}.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    a = ap.parse_args()
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    model = Gpt(a.layers, a.width, a.heads, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    i = torch.arange(a.batch * a.seq, device=dev).view(a.batch, a.seq)
    tokens, targets = (i * 31) % VOCAB, (i * 31 + 7) % VOCAB
    step_fn = model if a.mode == "eager" else torch.compile(model)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    start = time.perf_counter()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(a.steps):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        step()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    print(json.dumps({
        "mode": a.mode,
        "ms_per_step": statistics.median(times),
        "compile_s": compile_s,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_per_step": a.batch * a.seq,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
