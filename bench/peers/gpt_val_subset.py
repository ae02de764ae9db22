#!/usr/bin/python3
"""The validation loss of a consolidated dstrain GPT checkpoint (safetensors, Hugging
Face's GPT-2 names) on exactly the windows torch_gpt_text.py evaluates on: 20 batches of
16 random windows of the fortunes validation split from torch.Generator seed 99. The
forward is an independent PyTorch GPT-2, so bench/gpt.sh compares the two trainers'
validation losses on the same windows.

    gpt_val_subset.py MODEL.safetensors
"""
import os, sys
import numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_ref
W = gpt_ref.load(sys.argv[1])
L, C, NH, T = 4, 128, 4, 128  # the benchmark's model
d = "/usr/share/games/fortunes"
names = sorted(x for x in os.listdir(d) if not x.endswith(".dat") and not os.path.islink(os.path.join(d, x)) and os.path.isfile(os.path.join(d, x)))
raw = b"".join(open(os.path.join(d, x), "rb").read() for x in names)
data = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).astype(np.int64))
val = data[int(len(data) * 0.9):]
def fwd(X, Y):
    return gpt_ref.loss(W, X, Y, L, C, NH)
def batch(data, gen, n, ctx):
    ix = torch.randint(len(data) - ctx - 1, (n,), generator=gen)
    return torch.stack([data[i:i + ctx] for i in ix]), torch.stack([data[i + 1:i + 1 + ctx] for i in ix])
with torch.no_grad():
    vg = torch.Generator().manual_seed(99)
    print("peer's 20 val batches: %.4f" % (sum(fwd(*batch(val, vg, 16, T)) for _ in range(20)) / 20))
