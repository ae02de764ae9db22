"""An independent PyTorch GPT-2 forward over a consolidated dstrain GPT checkpoint
(safetensors with Hugging Face's GPT-2 names), for checking dstrain's validation loss:
bench/peers/gpt_val_subset.py and the GPT test (tests/e2e/train/gpt.sh) import it.

    W = load(path)                      # name -> fp32 tensor
    loss(W, X, Y, layers, dim, heads)   # mean cross-entropy (nats) of targets Y given X
"""
import json, math, struct
import numpy as np, torch, torch.nn.functional as F


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h, base = json.loads(b[8:8 + n]), 8 + n
    return {k: torch.from_numpy(np.frombuffer(b[base + v["data_offsets"][0]:base + v["data_offsets"][1]],
                                              dtype=np.float32).reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__"}


def loss(W, X, Y, L, C, NH):
    nw, T = X.shape
    vocab = W["wte.weight"].shape[0]
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
    return F.cross_entropy(logits.reshape(-1, vocab), Y.reshape(-1)).item()
