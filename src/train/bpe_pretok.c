/*
 * GPT-2's pre-tokenisation, by hand: encoder.py splits text with the pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * (Python's regex module, leftmost alternative first, each greedy) and BPE-merges each
 * piece on its own. Every code point is in exactly one of four classes: a letter
 * (\p{L}), a number (\p{N}), white space (\s) or other; bpe_unicode.h, generated from
 * the regex module itself, holds the first three as ranges. At position i the pattern
 * then reduces to:
 *
 * - an apostrophe followed by s, t, m, d, re, ve or ll is that contraction;
 * - a space followed by a letter, number or other character, or such a character
 *   itself, starts a run of characters of that class (with the space in front);
 * - white space: the whole run of it when text ends there or, when more than one
 *   character, all but its last (`\s+(?!\S)` backtracks one, so the last space goes
 *   with the word after it); a single white-space character before a non-space
 *   is a piece of its own (`\s+`).
 *
 * Text is UTF-8. A byte that starts no valid sequence (a stray continuation byte, an
 * overlong form, a surrogate, beyond U+10FFFF, a truncated sequence) is a character of
 * the class other, as Python's decode(errors="surrogateescape") makes it (U+DC80 +
 * byte, category Cs); the pieces are bytes, so every input round-trips.
 */
#include "bpe.h"

#include "dslaunch/common/banned.h"

struct bpe_range {
    uint32_t lo, hi;
    int cls;
};
#include "bpe_unicode.h"

int dsl_bpe_class(uint32_t c)
{
    size_t lo = 0, hi = sizeof(bpe_ranges) / sizeof(bpe_ranges[0]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < bpe_ranges[mid].lo)
            hi = mid;
        else if (c > bpe_ranges[mid].hi)
            lo = mid + 1;
        else
            return bpe_ranges[mid].cls;
    }
    return BPE_O;
}

/* the length of the character at s[j] (j < n; 1 for a byte that starts no valid
 * sequence) and its class in *cls */
static size_t chr_at(const uint8_t *s, size_t n, size_t j, int *cls)
{
    uint32_t b0 = s[j];
    if (b0 < 0x80) {
        *cls = bpe_ascii[b0];
        return 1;
    }
    size_t len;
    uint32_t c, lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        c = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0; /* overlong */
        else if (b0 == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        c = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90; /* overlong */
        else if (b0 == 0xF4)
            hi = 0x8F; /* beyond U+10FFFF */
    } else {
        *cls = BPE_O;
        return 1;
    }
    if (n - j < len || s[j + 1] < lo || s[j + 1] > hi) {
        *cls = BPE_O;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if (k > 1 && (s[j + k] & 0xC0) != 0x80) {
            *cls = BPE_O;
            return 1;
        }
        c = c << 6 | (s[j + k] & 0x3F);
    }
    *cls = dsl_bpe_class(c);
    return len;
}

/* the end of the run of characters of class cls from j */
static size_t run_of(const uint8_t *s, size_t n, size_t j, int cls)
{
    while (j < n) {
        int k;
        size_t l = chr_at(s, n, j, &k);
        if (k != cls)
            break;
        j += l;
    }
    return j;
}

size_t dsl_bpe_pretok_next(const uint8_t *s, size_t n, size_t i)
{
    if (s[i] == '\'' && n - i >= 2) {
        uint8_t c1 = s[i + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return i + 2;
        if (n - i >= 3 && ((c1 == 'r' && s[i + 2] == 'e') || (c1 == 'v' && s[i + 2] == 'e') ||
                           (c1 == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }
    int k0, k1;
    size_t l0 = chr_at(s, n, i, &k0);
    if (s[i] == ' ' && n - i >= 2) {
        chr_at(s, n, i + 1, &k1);
        if (k1 != BPE_S)
            return run_of(s, n, i + 1, k1);
    }
    if (k0 != BPE_S)
        return run_of(s, n, i + l0, k0);
    /* white space: find the run's end and its last character's start */
    size_t j = i, last = i;
    while (j < n) {
        size_t l = chr_at(s, n, j, &k1);
        if (k1 != BPE_S)
            break;
        last = j;
        j += l;
    }
    if (j == n || last == i)
        return j;
    return last;
}
