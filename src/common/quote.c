/*
 * dsl_quote_for_humans() (quote.h): the input is taken one unit at a time (a byte, or
 * a whole UTF-8 sequence), each either copied or written as an escape. A first pass
 * measures whether everything fits; if not, the second keeps room for a closing "..."
 * and writes only whole units, so truncation never splits an escape or a character.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dslaunch/common/quote.h"
#include "dslaunch/common/banned.h"

/* Length of the valid UTF-8 sequence at s[0..n) (2..4) and its code point, or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1fu, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0fu, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* Code points that reorder or hide text, or end lines, on a terminal. */
static int invisible(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
           cp == 0x2028 || cp == 0x2029;
}

/* The unit at u[0..n) as shown: into unit (>= 16 bytes), its length in *ul; returns the
   input bytes it stands for. */
static size_t render(const unsigned char *u, size_t n, char *unit, size_t *ul)
{
    unsigned char c = u[0];
    uint32_t cp = 0;
    size_t used;
    if (c >= 0x20 && c < 0x7f) {
        unit[0] = (char)c;
        *ul = 1;
        return 1;
    }
    if (c == '\n' || c == '\t' || c == '\r') {
        unit[0] = '\\';
        unit[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        *ul = 2;
        return 1;
    }
    if (c < 0x80 || !(used = utf8_seq(u, n, &cp))) {
        snprintf(unit, 16, "\\x%02x", c);
        *ul = 4;
        return 1;
    }
    if (invisible(cp)) {
        snprintf(unit, 16, "\\u%04x", (unsigned)cp);
        *ul = 6;
        return used;
    }
    memcpy(unit, u, used);
    *ul = used;
    return used;
}

size_t dsl_quote_for_humans(char *dst, size_t cap, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    char unit[16];
    size_t o = 0, i, ul, total = 0;
    if (cap == 0)
        return 0;
    for (i = 0; i < n && total < cap; i += render(u + i, n - i, unit, &ul), total += ul)
        ;
    /* all of it fits: no room kept for "..." */
    size_t room = total < cap ? cap - 1 : cap > 4 ? cap - 4 : 0;
    for (i = 0; i < n;) {
        size_t used = render(u + i, n - i, unit, &ul);
        if (o + ul > room)
            break;
        memcpy(dst + o, unit, ul);
        o += ul;
        i += used;
    }
    if (i < n && cap >= 4) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
    return o;
}
