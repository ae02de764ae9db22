/*
 * Line logic for authorized_keys, known_hosts and the managed ~/.ssh/config block.
 *
 * Theory of operation: every function takes the whole current text of a file and the
 * entry to add, and returns either "present" (0, nothing to write) or the complete new
 * text (1). ssh-setup then writes that text to a temporary name and renames it over the
 * file, so a file is rewritten only when something is missing, and a second run leaves
 * every file byte for byte as it was. Keys are compared by type and base64 blob only:
 * options (from="...", command="...") and comments differ between copies of the same
 * key and must not cause duplicates.
 */
#include <stdlib.h>
#include <string.h>

#include "authkeys.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define AUTHKEYS_MAX (64u << 20)

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static int is_key_type(const char *s, size_t n)
{
    static const char *const prefixes[] = {"ssh-", "ecdsa-", "sk-ssh-", "sk-ecdsa-"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t p = strlen(prefixes[i]);
        if (n > p && !strncmp(s, prefixes[i], p))
            return 1;
    }
    return 0;
}

/* The next field of a line starting at *pos: its span, honouring "..." in options. */
static int next_field(const char *line, size_t *pos, const char **f, size_t *flen)
{
    size_t i = *pos;
    while (is_space(line[i]))
        i++;
    if (!line[i] || line[i] == '\n')
        return 0;
    size_t start = i;
    int quoted = 0;
    for (; line[i] && line[i] != '\n'; i++) {
        if (line[i] == '"')
            quoted = !quoted;
        else if (line[i] == '\\' && quoted && line[i + 1] && line[i + 1] != '\n')
            i++;
        else if (!quoted && is_space(line[i]))
            break;
    }
    *f = line + start;
    *flen = i - start;
    *pos = i;
    return 1;
}

int dsl_authkeys_find_key(const char *line, const char **type, size_t *tlen,
                          const char **blob, size_t *blen)
{
    size_t pos = 0;
    const char *f;
    size_t flen;
    if (!next_field(line, &pos, &f, &flen) || f[0] == '#')
        return -1;
    do {
        if (is_key_type(f, flen)) {
            const char *b;
            size_t bl;
            if (!next_field(line, &pos, &b, &bl))
                return -1;
            *type = f;
            *tlen = flen;
            *blob = b;
            *blen = bl;
            return 0;
        }
    } while (next_field(line, &pos, &f, &flen));
    return -1;
}

/* The line after l's, or NULL when l's is the last. */
static const char *next_line(const char *l)
{
    const char *nl = strchr(l, '\n');
    return nl ? nl + 1 : NULL;
}

static int same_key(const char *line, const char *type, size_t tlen, const char *blob,
                    size_t blen)
{
    const char *t, *b;
    size_t tl, bl;
    if (dsl_authkeys_find_key(line, &t, &tl, &b, &bl) < 0)
        return 0;
    return tl == tlen && bl == blen && !memcmp(t, type, tl) && !memcmp(b, blob, bl);
}

/* text + (newline if missing) + line + newline, as a malloc'd string */
static char *append_line(const char *text, const char *line)
{
    size_t tl = text ? strlen(text) : 0, ll = strlen(line);
    while (ll && (line[ll - 1] == '\n' || line[ll - 1] == '\r'))
        ll--;
    int nl = tl > 0 && text[tl - 1] != '\n';
    char *out = dsl_xmalloc(tl + (size_t)nl + ll + 2);
    if (tl)
        memcpy(out, text, tl);
    if (nl)
        out[tl++] = '\n';
    memcpy(out + tl, line, ll);
    out[tl + ll] = '\n';
    out[tl + ll + 1] = '\0';
    return out;
}

int dsl_authkeys_merge(const char *text, const char *keyline, char **out)
{
    const char *type, *blob;
    size_t tlen, blen;
    *out = NULL;
    if (dsl_authkeys_find_key(keyline, &type, &tlen, &blob, &blen) < 0)
        return DSL_EUSAGE;
    for (const char *l = text; l && *l; l = next_line(l)) {
        if (same_key(l, type, tlen, blob, blen))
            return 0;
    }
    *out = append_line(text, keyline);
    return 1;
}

char *dsl_knownhosts_line(const char *const *names, size_t n, int port, const char *type,
                          const char *blob)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, AUTHKEYS_MAX);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !names[i][0])
            continue;
        size_t j;
        for (j = 0; j < i; j++)
            if (names[j] && !strcmp(names[j], names[i]))
                break;
        if (j < i)
            continue;
        if (!first)
            dsl_dynbuf_addstr(&b, ",");
        first = 0;
        if (port > 0 && port != 22)
            dsl_dynbuf_addf(&b, "[%s]:%d", names[i], port);
        else
            dsl_dynbuf_addstr(&b, names[i]);
    }
    dsl_dynbuf_addf(&b, " %s %s", type, blob);
    char *s = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

/* Does the comma-separated host field hf (hlen bytes) list the name nm (nlen bytes)? */
static int field_has(const char *hf, size_t hlen, const char *nm, size_t nlen)
{
    size_t i = 0;
    while (i < hlen) {
        size_t j = i;
        while (j < hlen && hf[j] != ',')
            j++;
        if (j - i == nlen && !memcmp(hf + i, nm, nlen))
            return 1;
        i = j + 1;
    }
    return 0;
}

static int kh_present(const char *l, const char *hosts, size_t hlen, const char *type,
                      size_t tlen, const char *blob, size_t blen)
{
    size_t pos = 0;
    const char *f;
    size_t flen;
    if (!next_field(l, &pos, &f, &flen) || f[0] == '#' || f[0] == '@')
        return 0;
    if (!same_key(l, type, tlen, blob, blen))
        return 0;
    for (size_t i = 0; i < hlen;) {
        size_t j = i;
        while (j < hlen && hosts[j] != ',')
            j++;
        if (j > i && !field_has(f, flen, hosts + i, j - i))
            return 0;
        i = j + 1;
    }
    return 1;
}

int dsl_knownhosts_merge(const char *text, const char *line, char **out)
{
    const char *type, *blob, *hosts;
    size_t tlen, blen, hlen, pos = 0;
    *out = NULL;
    if (!next_field(line, &pos, &hosts, &hlen) || hosts[0] == '#' || hosts[0] == '@' ||
        dsl_authkeys_find_key(line + pos, &type, &tlen, &blob, &blen) < 0)
        return DSL_EUSAGE;
    for (const char *l = text; l && *l; l = next_line(l)) {
        if (kh_present(l, hosts, hlen, type, tlen, blob, blen))
            return 0;
    }
    *out = append_line(text, line);
    return 1;
}

/* Start of the line that is exactly marker (followed by a newline or the end), or NULL. */
static const char *find_marker_line(const char *text, const char *marker)
{
    size_t ml = strlen(marker);
    for (const char *l = text; l && *l; l = next_line(l)) {
        if (!strncmp(l, marker, ml) && (l[ml] == '\n' || l[ml] == '\0' || l[ml] == '\r'))
            return l;
    }
    return NULL;
}

int dsl_sshconfig_merge(const char *text, const char *block, char **out)
{
    struct dsl_dynbuf b;
    const char *beg = text ? find_marker_line(text, DSL_SSHCONFIG_BEGIN) : NULL;
    const char *end = beg ? find_marker_line(beg, DSL_SSHCONFIG_END) : NULL;
    *out = NULL;
    dsl_dynbuf_init(&b, AUTHKEYS_MAX);
    /* the new text: the managed block, "Host *" so that whatever follows is in the
     * scope it had at the top of the file, then the rest without an old block */
    dsl_dynbuf_addf(&b, "%s\n%s%s%s\n", DSL_SSHCONFIG_BEGIN, block, DSL_SSHCONFIG_RESET,
                    DSL_SSHCONFIG_END);
    size_t head = b.len;
    if (beg && end) {
        const char *after = strchr(end, '\n');
        after = after ? after + 1 : end + strlen(end);
        if (beg == text && (size_t)(after - text) == head && !memcmp(text, b.buf, head)) {
            dsl_dynbuf_release(&b);
            return 0;
        }
        dsl_dynbuf_add(&b, text, (size_t)(beg - text));
        dsl_dynbuf_addstr(&b, after);
    } else if (text && *text) {
        dsl_dynbuf_addstr(&b, text);
    }
    if (b.len > head && b.buf[b.len - 1] != '\n')
        dsl_dynbuf_addstr(&b, "\n");
    *out = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return 1;
}

/* What each kind of file must not allow, what it becomes, and why; fix -1 keeps the
 * mode and only takes the forbidden bits away (a home directory's other bits are the
 * user's business). Indexed by enum dsl_sshperm_kind. */
static const struct {
    unsigned int forbidden;
    int fix;
    const char *why;
} sshperm_rules[] = {
    [DSL_SSHPERM_HOME] = {022u, -1,
                          "group/other-writable, so sshd ignores the authorized_keys below it"},
    [DSL_SSHPERM_SSHDIR] = {022u, 0700,
                            "group/other-writable, so sshd ignores the authorized_keys in it"},
    [DSL_SSHPERM_AUTHKEYS] = {022u, 0600, "group/other-writable, so sshd ignores it"},
    [DSL_SSHPERM_PRIVKEY] = {077u, 0600, "readable by group/other, so ssh refuses to use it"},
    [DSL_SSHPERM_CONFIG] = {022u, 0600, "group/other-writable, so ssh refuses to read it"},
};

int dsl_sshperm_fix(enum dsl_sshperm_kind kind, unsigned int mode, const char **why)
{
    const char *w = NULL;
    int fix = -1;
    mode &= 07777u;
    if ((size_t)kind < sizeof sshperm_rules / sizeof sshperm_rules[0] &&
        (mode & sshperm_rules[kind].forbidden)) {
        fix = sshperm_rules[kind].fix;
        if (fix < 0)
            fix = (int)(mode & ~sshperm_rules[kind].forbidden);
        w = sshperm_rules[kind].why;
    }
    if (why)
        *why = w;
    return fix;
}
