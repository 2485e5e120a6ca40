#!/usr/bin/env python3
"""The eager PyTorch baseline of step_bench (make bench): the same GPT-2 style model as keel's
presets gpt2-s and gpt2-m (layernorm, learned positions, MHA with a causal mask, GELU-tanh MLP
4x wide, biases, output layer tied to the token embedding), the same batch shape, cross-entropy
over every token, gradient clipping at 1 and AdamW, run op by op as a PyTorch 1.13 user writes it
(Debian's python3-torch; scripts/install-deps --bench installs it). f32, or bf16 autocast.

Prints one line: torch_eager_ms <median ms/step> torch <version> threads <n>
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

PRESETS = {
    "gpt2-s": dict(layers=6, width=384, heads=6, batch=8),
    "gpt2-m": dict(layers=12, width=768, heads=12, batch=4),
}
VOCAB, SEQ = 256, 256


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, width), nn.Embedding(SEQ, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1))

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="gpt2-s", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=0, help="rows per step; 0: the preset's")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (matmuls on oneDNN)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cfg = PRESETS[a.preset]
    model = Gpt(cfg["layers"], cfg["width"], cfg["heads"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    batch = a.batch or cfg["batch"]
    i = torch.arange(batch * SEQ).view(batch, SEQ)  # step_bench's batch
    tokens, targets = (i * 31) % VOCAB, (i * 31 + 7) % VOCAB
    times = []
    for step in range(a.steps + 2):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 2:  # two warm-up steps, as step_bench
            times.append(time.perf_counter() - start)
    print(f"torch_eager_ms {1000 * statistics.median(times):.1f} torch {torch.__version__} "
          f"threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
