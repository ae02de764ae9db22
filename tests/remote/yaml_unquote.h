/*
 * The test oracle of dsl_yaml_quote() (remote/emit.h): a reader of YAML double-quoted
 * scalars with the escapes YAML 1.1 and 1.2 share (\\, \", \n, \t, \xNN, \uNNNN,
 * \UNNNNNNNN) and Kubernetes' "$$" -> "$", written from the YAML spec independently of
 * the quoting code. Used by the unit test and the fuzz target.
 */
#ifndef DSL_TEST_YAML_UNQUOTE_H
#define DSL_TEST_YAML_UNQUOTE_H

#include <stddef.h>
#include <stdint.h>

static int yq_hex(const char *s, int n, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

static size_t yq_utf8(uint32_t c, char *o)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    } else if (c < 0x800) {
        o[0] = (char)(0xc0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    } else if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* q[0..n) is one double-quoted scalar; its value into out (room for n bytes), its length
 * into *len. Only printable ASCII is allowed inside. 0, or -1 when q is malformed. */
static int yaml_unquote(const char *q, size_t n, int dollars, char *out, size_t *len)
{
    size_t o = 0;
    if (n < 2 || q[0] != '"' || q[n - 1] != '"')
        return -1;
    for (size_t i = 1; i < n - 1;) {
        char c = q[i];
        if (c < 0x20 || c > 0x7e)
            return -1;
        if (c == '"')
            return -1; /* an unescaped quote ends the scalar early */
        if (dollars && c == '$') {
            if (i + 1 >= n - 1 || q[i + 1] != '$')
                return -1; /* a lone '$' would be Kubernetes' to expand */
            out[o++] = '$';
            i += 2;
            continue;
        }
        if (c != '\\') {
            out[o++] = c;
            i++;
            continue;
        }
        if (i + 1 >= n - 1)
            return -1;
        char e = q[i + 1];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v;
            if (i + 2 + (size_t)digits > n - 1 || yq_hex(q + i + 2, digits, &v) < 0 ||
                v > 0x10ffff)
                return -1;
            o += yq_utf8(v, out + o);
            i += 2 + (size_t)digits;
            continue;
        }
        if (e == '\\' || e == '"')
            out[o++] = e;
        else if (e == 'n')
            out[o++] = '\n';
        else if (e == 't')
            out[o++] = '\t';
        else
            return -1;
        i += 2;
    }
    *len = o;
    return 0;
}

#endif
