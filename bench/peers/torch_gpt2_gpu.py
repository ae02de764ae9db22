#!/usr/bin/env python3
"""Peer of bench/gpt_gpu.sh: GPT-2 124M training throughput in PyTorch on one GPU.

What it measures: the steady training speed (tokens/s and MFU) of GPT-2 124M's shapes
(12 layers, width 768, 12 heads, context 1024, vocabulary 50257) at world 1, micro batch
16 by default, on random tokens, with what a PyTorch user gets without writing kernels:
bf16 autocast over fp32 master weights, flash attention through
F.scaled_dot_product_attention, the LM head tied to the token embedding, gradient
clipping at norm 1.0 and fused AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8, no weight
decay), as dstrain's bench/gpt_gpu.sh configures it. Mode "eager" runs the module as
written; "compile" runs it through torch.compile (the first steps compile: they fall
in the warm-up and are not timed).

Each step is timed between two torch.cuda.synchronize() calls; the figure is the
median of the steps after the first quarter. MFU uses bench/gpt_gpu.sh's FLOP count
per token, 6 (12 L C^2 + V C) + 12 L T C, against PEAK_TFLOPS (dense bf16, default
989: H100 SXM and H200).

    python3 bench/peers/torch_gpt2_gpu.py [eager|compile] [steps] [micro batch]
        (defaults: eager, 40, 16; LAYERS=n changes the depth for a per-layer sweep)

Prints one line "torch MODE: ... N tokens/s ..." on stdout. Exits 77 (skip) without
PyTorch or without a CUDA device.
"""
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_gpt2_gpu: no PyTorch: skipped", file=sys.stderr)
    sys.exit(77)

MODE = sys.argv[1] if len(sys.argv) > 1 else "eager"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
B = int(sys.argv[3]) if len(sys.argv) > 3 else 16
L, C, H, T, V = int(os.environ.get("LAYERS", "12")), 768, 12, 1024, 50257
PEAK = float(os.environ.get("PEAK_TFLOPS", "989"))
if MODE not in ("eager", "compile") or STEPS < 2 or B < 1:
    sys.exit(f"usage: {sys.argv[0]} [eager|compile] [steps >= 2] [micro batch]")
if not torch.cuda.is_available():
    print("torch_gpt2_gpu: no CUDA device: skipped", file=sys.stderr)
    sys.exit(77)

torch.manual_seed(1)
torch.backends.cuda.matmul.allow_tf32 = True


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, 0, 0.02)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))


dev = "cuda"
model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                        weight_decay=0.0, fused=True)
step_fn = torch.compile(model) if MODE == "compile" else model
data = torch.randint(0, V, (STEPS, B, T + 1), device=dev)
flops_tok = 6 * (12 * L * C * C + V * C) + 12 * L * T * C
times = []
for i in range(STEPS):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    x, y = data[i, :, :-1], data[i, :, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_fn(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
timed = sorted(times[STEPS // 4:])
steady = timed[len(timed) // 2]
tps = B * T / steady
print(f"torch {MODE}: GPT-2 124M shapes (L={L}) bf16 mb {B}: median step {steady * 1e3:.1f} ms, "
      f"{tps:.0f} tokens/s, MFU {tps * flops_tok / PEAK / 1e12 * 100:.1f}% of {PEAK:g} "
      f"TFLOP/s, first step {times[0]:.1f} s, last loss {loss.item():.3f}, "
      f"peak mem {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
