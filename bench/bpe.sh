#!/bin/sh
# GPT-2 BPE tokenizing speed: `dstrain tokenize --encoder --bpe` against GPT-2's own
# encoder.py (tests/e2e/train/bpe_ref.py: the same code with Python's regex module,
# Debian python3-regex) on Debian's fortunes (2.5 MB, the files dataset "text" reads,
# concatenated), side by side, alternating, reps rounds; medians count. Both times are
# whole commands (reading the vocabulary included); dstrain also prints its own
# encoding rate. The two outputs' ids are compared once.
#
#   bench/bpe.sh [build dir] [reps]      (default: build, 5 rounds)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
REPS=${2:-5}
DSTRAIN=$BUILD/dstrain
REF=$ROOT/tests/e2e/train/bpe_ref.py
ENC=$ROOT/tests/data/gpt2/encoder.json.gz
BPE=$ROOT/tests/data/gpt2/vocab.bpe.gz
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench-bpe.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first)" >&2; exit 1; }
[ -d /usr/share/games/fortunes ] || { echo "no fortunes (apt-get install fortunes)" >&2; exit 1; }
python3 -c 'import regex' 2>/dev/null || { echo "no python3-regex" >&2; exit 1; }
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | LC_ALL=C sort |
    xargs cat >"$TMP/fortunes.txt"
BYTES=$(wc -c <"$TMP/fortunes.txt")
now() { python3 -c 'import time; print(time.monotonic())'; }
i=1
while [ "$i" -le "$REPS" ]; do
    t0=$(now)
    "$DSTRAIN" tokenize --encoder "$ENC" --bpe "$BPE" --out "$TMP" --name f \
        --val_fraction 0.5 "$TMP/fortunes.txt" >"$TMP/d.out" || exit 1
    t1=$(now)
    python3 "$REF" ids "$ENC" "$BPE" "$TMP/fortunes.txt" >"$TMP/ref.ids" || exit 1
    t2=$(now)
    self=$(sed -n 's/.*encoded at \([0-9.]*\) MB\/s.*/\1/p' "$TMP/d.out")
    echo "$t0 $t1 $t2 $self" >>"$TMP/times"
    echo "$i $t0 $t1 $t2 $self" | awk '{ printf "round %d: dstrain %.3f s (encoding alone %s MB/s), encoder.py %.3f s\n", $1, $3 - $2, $5, $4 - $3 }'
    i=$((i + 1))
done
python3 - "$TMP" "$BYTES" "$REF" <<'PY'
import statistics, struct, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rows = [list(map(float, l.split())) for l in open(tmp + "/times")]
d = statistics.median(r[1] - r[0] for r in rows)
p = statistics.median(r[2] - r[1] for r in rows)
enc = statistics.median(r[3] for r in rows)
ids = []
for part in ("train", "val"):
    data = open("%s/f_%s.bin" % (tmp, part), "rb").read()
    k = struct.unpack("<3i", data[:12])[2]
    ids.append(list(struct.unpack("<%dH" % k, data[1024:1024 + 2 * k])))
ref = list(map(int, open(tmp + "/ref.ids").read().split()))
# dstrain encodes the two halves apart: the ids agree up to the piece the cut splits
k = len(ids[0]) - 4
same = ids[0][:k] == ref[:k]
print("fortunes: %d bytes; medians of %d rounds" % (n, len(rows)))
print("  dstrain tokenize: %.3f s (%.1f MB/s whole command, %.1f MB/s encoding alone)"
      % (d, n / d / 1e6, enc))
print("  GPT-2 encoder.py: %.3f s (%.2f MB/s)" % (p, n / p / 1e6))
print("  ratio (encoder.py time / dstrain time): %.1fx; first half's ids %s" %
      (p / d, "agree" if same else "DIFFER"))
PY
