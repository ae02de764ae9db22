#!/usr/bin/env python3
"""GPT-2's encoder.py (OpenAI, gpt-2/src/encoder.py), the reference for dstrain's BPE:
the same bytes_to_unicode, pattern, merge loop and lookups, with Python's `regex`
module (Debian python3-regex). Text is decoded with errors="surrogateescape", the
rule docs/gpt.md gives for invalid UTF-8 (each byte of an invalid sequence is one
character of no letter, number or space class), and pieces are encoded back the same
way, so every byte string has an encoding.

    bpe_ref.py check ENCODER BPE TEXT TRAIN.bin VAL.bin FRAC
        the shards `dstrain tokenize` wrote from TEXT hold the reference's ids of
        TEXT's first and last parts (split at int(len * (1 - FRAC)) bytes)
    bpe_ref.py ids ENCODER BPE TEXT      the reference's ids of TEXT, one line

ENCODER and BPE may be gzip-compressed. Exit 0 on agreement, 1 on the first
difference (shown with its context), 77 without the regex module.
"""
import gzip
import json
import struct
import sys

try:
    import regex as re
except ImportError:
    print("SKIP: no Python regex module (Debian python3-regex)", file=sys.stderr)
    sys.exit(77)


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(n) for n in cs]))


def get_pairs(word):
    pairs = set()
    prev = word[0]
    for ch in word[1:]:
        pairs.add((prev, ch))
        prev = ch
    return pairs


class Encoder:
    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = re.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, data):
        text = data.decode("utf-8", "surrogateescape")
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b]
                            for b in token.encode("utf-8", "surrogateescape"))
            bpe_tokens.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return bpe_tokens

    def decode(self, tokens):
        text = "".join([self.decoder[t] for t in tokens])
        return bytes([self.byte_decoder[c] for c in text])


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load(enc_path, bpe_path):
    encoder = json.loads(read(enc_path).decode("utf-8"))
    bpe_data = read(bpe_path).decode("utf-8")
    merges = [tuple(s.split()) for s in bpe_data.split("\n")[1:-1]]
    return Encoder(encoder, merges)


def shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack("<3i", data[:12])
    assert magic == 20240520 and version == 1, path
    return list(struct.unpack("<%dH" % n, data[1024:1024 + 2 * n]))


def compare(enc, got, want, text, what):
    if got == want:
        print("# %s: %d ids agree" % (what, len(want)))
        return True
    k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
             min(len(got), len(want)))
    at = len(enc.decode(want[:k]))
    print("FAIL: %s: id %d of %d/%d differs: dstrain %s, reference %s, text %r" %
          (what, k, len(got), len(want), got[k:k + 6], want[k:k + 6],
           text[max(0, at - 20):at + 40]), file=sys.stderr)
    return False


def main():
    if sys.argv[1] == "ids":
        enc = load(sys.argv[2], sys.argv[3])
        print(" ".join(map(str, enc.encode(read(sys.argv[4])))))
        return 0
    _, _, enc_path, bpe_path, text_path, train, val, frac = sys.argv
    enc = load(enc_path, bpe_path)
    text = open(text_path, "rb").read()
    split = int(len(text) * (1.0 - float(frac)))
    ok = compare(enc, shard(train), enc.encode(text[:split]), text[:split], train)
    ok = compare(enc, shard(val), enc.encode(text[split:]), text[split:], val) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
