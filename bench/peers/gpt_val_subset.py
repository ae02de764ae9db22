#!/usr/bin/python3
"""The validation loss of a consolidated dstrain GPT checkpoint (safetensors, Hugging
Face's GPT-2 names) on exactly the windows torch_gpt_text.py evaluates on: 20 batches of
16 random windows of the fortunes validation split from torch.Generator seed 99. The
forward is an independent PyTorch GPT-2, so bench/gpt.sh compares the two trainers'
validation losses on the same windows.

    gpt_val_subset.py MODEL.safetensors
"""
import json, math, os, struct, sys
import numpy as np, torch, torch.nn.functional as F
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h, base = json.loads(b[8:8 + n]), 8 + n
W = {k: torch.from_numpy(np.frombuffer(b[base + v["data_offsets"][0]:base + v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"]).copy()) for k, v in h.items() if k != "__metadata__"}
L, C, NH, T = 4, 128, 4, 128  # the benchmark's model
d = "/usr/share/games/fortunes"
names = sorted(x for x in os.listdir(d) if not x.endswith(".dat") and not os.path.islink(os.path.join(d, x)) and os.path.isfile(os.path.join(d, x)))
raw = b"".join(open(os.path.join(d, x), "rb").read() for x in names)
data = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).astype(np.int64))
val = data[int(len(data) * 0.9):]
def fwd(X, Y):
    nw = X.shape[0]
    ln = lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5)
    x = W["wte.weight"][X] + W["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T)).bool()
    for l in range(L):
        p = lambda s: W["h.%d.%s" % (l, s)]
        a = ln(x, p("ln_1.weight"), p("ln_1.bias")) @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = [t.view(nw, T, NH, C // NH).transpose(1, 2) for t in a.split(C, dim=2)]
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // NH)).masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(nw, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = ln(x, p("ln_2.weight"), p("ln_2.bias")) @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")
        x = x + F.gelu(m, approximate="tanh") @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    logits = ln(x, W["ln_f.weight"], W["ln_f.bias"]) @ W["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, 256), Y.reshape(-1)).item()
def batch(data, gen, n, ctx):
    ix = torch.randint(len(data) - ctx - 1, (n,), generator=gen)
    return torch.stack([data[i:i + ctx] for i in ix]), torch.stack([data[i + 1:i + 1 + ctx] for i in ix])
with torch.no_grad():
    vg = torch.Generator().manual_seed(99)
    print("peer's 20 val batches: %.4f" % (sum(fwd(*batch(val, vg, 16, T)) for _ in range(20)) / 20))
