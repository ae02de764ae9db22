#!/bin/sh
# GPT-2 BPE end to end (docs/gpt.md, "GPT-2 BPE"), with GPT-2's real encoder.json and
# vocab.bpe (tests/data/gpt2, read compressed):
#   reference  `dstrain tokenize --encoder --bpe` writes the ids GPT-2's encoder.py
#              (bpe_ref.py, Python's regex module) gives for a varied text (words,
#              contractions, digits, letters beyond ASCII, combining marks, emoji, runs of
#              spaces and newlines, invalid UTF-8, characters from all over Unicode, random
#              bytes) and an excerpt of fortunes when installed
#   train      a model left at vocabulary 256 refuses the shards with the size to set; at
#              50257 a tiny GPT learns a sentence in 80 steps and `dstrain sample
#              --encoder --bpe` continues it as text; the options' and files' errors
#
#   bpe.sh <dstrain> <test>       exit 0 pass, 1 fail, 77 skip
set -u
DSTRAIN=$1
TEST=$2
HERE=$(cd "$(dirname "$0")" && pwd)
GPT2=$HERE/../../data/gpt2
ENC=$GPT2/encoder.json.gz
BPE=$GPT2/vocab.bpe.gz
. "$(dirname "$0")/scratch.sh"
scratch bpe
unset CUDA_VISIBLE_DEVICES
[ -x "$DSTRAIN" ] || skip "no dstrain"

case $TEST in
reference)
    python3 -c 'import regex' 2>/dev/null || skip "no Python regex module (python3-regex)"
    python3 - "$TMP/text" <<'PY'
import os, random, sys
rnd = random.Random(19)
atoms = ["the", " quick", "Brown", " fox", "Don't", " we'll", " I'M", " they're", "'s",
         "''", " 'quoted'", "3.14159", " 1,000,000", "²", " ١٢٣", " Ⅻ", "2024-05-20",
         " ", "  ", "   ", "\n", "\n\n", "\n  ", "\t", "\t\t", "\r\n", "\u00a0", "\u3000",
         " naïve", " café", " Zürich", " Москва", " 東京", " ἀλήθεια", " e\u0301t\u0301e",
         " 😀", "👍🏽", " 👨\u200d👩\u200d👧", "!!!", " --", "...", "<|endoftext|>", "\x00",
         "\x1c", "\x7f", "\ufeff"]
bad = [b"\xff", b"\xfe\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80",
       b"\xf4\x90\x80\x80", b"\xf0\x9f\x98"]
out = bytearray()
while len(out) < 60000:
    out += rnd.choice(bad) if rnd.random() < 0.05 else rnd.choice(atoms).encode()
# the class table across Unicode: characters assigned in Python's unicodedata (Unicode
# 14 in Debian 12, not newer than its regex module's), in words and alone; random bytes
import unicodedata
cps = [c for c in range(0x30000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
for _ in range(3000):
    out += "".join(chr(rnd.choice(cps)) for _ in range(rnd.randrange(1, 4))).encode()
    out += rnd.choice([b" ", b"", b"\n", b"'s", b"1"])
out += bytes(rnd.randrange(256) for _ in range(8000))
d = "/usr/share/games/fortunes"
if os.path.isdir(d):  # the start of what dataset "text" reads there, to 300 KB in all
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if len(out) < 300000 and not name.endswith(".dat") and os.path.isfile(p) \
                and not os.path.islink(p):
            out += open(p, "rb").read()[:300000 - len(out)]
open(sys.argv[1], "wb").write(bytes(out))
PY
    "$DSTRAIN" tokenize --encoder "$ENC" --bpe "$BPE" --out "$TMP" --name t "$TMP/text" \
        >"$TMP/tok.out" 2>&1 || fail "tokenize failed: $(cat "$TMP/tok.out")"
    grep -q "GPT-2 BPE vocabulary 50257" "$TMP/tok.out" || fail "tokenize: $(cat "$TMP/tok.out")"
    cat "$TMP/tok.out"
    python3 "$HERE/bpe_ref.py" check "$ENC" "$BPE" "$TMP/text" "$TMP/t_train.bin" \
        "$TMP/t_val.bin" 0.1 || fail "dstrain's ids differ from GPT-2's encoder.py"
    ;;
train)
    seq 1 600 | awk '{ print $1 % 7, "the quick brown fox jumps over the lazy dog" }' \
        >"$TMP/text"
    "$DSTRAIN" tokenize --encoder "$ENC" --bpe "$BPE" --out "$TMP" --name s "$TMP/text" \
        >"$TMP/tok.out" 2>&1 || fail "tokenize failed: $(cat "$TMP/tok.out")"
    GPT="--backend tcp --model gpt --layers 2 --dim 32 --heads 4 --context 16 --data tokens
         --data-path $TMP --stride 1 --train-batch 8 --micro-batch 8 --lr 0.01
         --steps-per-print 0 --steps 80 --eval-interval 80"
    # shellcheck disable=SC2086 # GPT is words
    "$DSTRAIN" $GPT --vocab 256 >"$TMP/v.out" 2>&1 && fail "vocabulary 256 took BPE shards"
    grep -q "outside the vocabulary of 256: the largest id is .*GPT-2 BPE shards: 50257" \
        "$TMP/v.out" || fail "vocabulary error: $(cat "$TMP/v.out")"
    # shellcheck disable=SC2086
    "$DSTRAIN" $GPT --vocab 50257 --checkpoint-dir "$TMP/ck" >"$TMP/t.out" 2>&1 ||
        fail "training failed: $(tail -n 20 "$TMP/t.out")"
    grep "^summary" "$TMP/t.out"
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --prompt "3 the quick" --tokens 8 \
        --temperature 0 --encoder "$ENC" --bpe "$BPE" >"$TMP/s.out" 2>&1 ||
        fail "sample failed: $(cat "$TMP/s.out")"
    cat "$TMP/s.out"
    grep -q "^3 the quick brown fox jumps over the lazy dog" "$TMP/s.out" ||
        fail "sample does not continue the sentence: $(cat "$TMP/s.out")"
    # errors: a BPE checkpoint without the files, half of the files, a bad merge line
    "$DSTRAIN" sample --checkpoint "$TMP/ck" >"$TMP/e1" 2>&1 && fail "sample without files"
    grep -q "its GPT's vocabulary is 50257, not bytes: give --encoder and --bpe" "$TMP/e1" ||
        fail "sample error: $(cat "$TMP/e1")"
    "$DSTRAIN" tokenize --encoder "$ENC" "$TMP/text" >"$TMP/e2" 2>&1 && fail "--encoder alone"
    grep -q "needs both --encoder encoder.json and --bpe vocab.bpe" "$TMP/e2" ||
        fail "tokenize error: $(cat "$TMP/e2")"
    { gzip -dc "$BPE" | head -n 11; echo "Ġt"; } >"$TMP/vocab.bpe"
    "$DSTRAIN" tokenize --encoder "$ENC" --bpe "$TMP/vocab.bpe" --out "$TMP" "$TMP/text" \
        >"$TMP/e3" 2>&1 && fail "a bad vocab.bpe was accepted"
    grep -q "$TMP/vocab.bpe:12: bad merge line 'Ġt'" "$TMP/e3" ||
        fail "vocab.bpe error: $(cat "$TMP/e3")"
    ;;
*)
    fail "unknown test '$TEST'"
    ;;
esac
exit 0
