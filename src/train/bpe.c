/*
 * GPT-2's byte-level BPE, as OpenAI's encoder.py does it, over token ids.
 *
 * Loading. encoder.json maps tokens, spelt in GPT-2's byte alphabet (bytes_to_unicode:
 * the printable bytes stand for themselves, the other 68 for U+0100..U+0143), to ids;
 * each token is stored as the bytes it stands for. vocab.bpe lists merges "A B", best
 * first (a "#version" first line is skipped); merge number r of A and B becomes the
 * pair (id A, id B) -> (rank r, id of AB) in a hash. Every byte must have a token,
 * and both halves of a merge and its result must be tokens; anything else is an error
 * with the file and line, since a vocabulary that cannot encode every input is of no
 * use.
 *
 * Encoding. The text is cut into pre-tokens (bpe_pretok.c); each starts as the ids of
 * its bytes, and encoder.py's loop (take the pair of lowest rank, merge each
 * occurrence of it left to right, repeat until no pair is a merge) runs with a heap of
 * (rank, position) over a linked list of symbols, O(m log m) for a piece of m bytes,
 * so a megabyte of spaces costs no more than a megabyte of words. All the occurrences
 * of one rank are merged before any pair those merges made is pushed, which is
 * encoder.py's order even for merge lists that are not in training order. A stale
 * heap entry (one of its symbols merged since) fails the check of its two ids, which
 * only grow. Pieces up to 255 bytes go through a cache (cleared when full), which
 * holds most words of a corpus after the first few hundred kilobytes.
 */
#include "bpe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define BPE_MAX_FILE ((size_t)256 << 20) /* decompressed; GPT-2's are 1 MB and 0.5 MB */
#define BPE_MAX_MERGES ((size_t)1 << 22)
#define CACHE_SLOTS ((size_t)1 << 18)
#define CACHE_MAX_PIECE 255

/* ---- GPT-2's byte alphabet ---- */

/* byte -> code point of its symbol, and back (code points < 324; -1: none) */
struct alphabet {
    uint32_t sym_of_byte[256];
    int16_t byte_of_sym[324];
};

static void alphabet_init(struct alphabet *al)
{
    for (int c = 0; c < 324; c++)
        al->byte_of_sym[c] = -1;
    uint32_t extra = 256;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
                        (c >= 0xAE && c <= 0xFF);
        uint32_t s = printable ? (uint32_t)c : extra++;
        al->sym_of_byte[c] = s;
        al->byte_of_sym[s] = (int16_t)c;
    }
}

/* the bytes a token spelt in the alphabet stands for, into out (room for n bytes):
 * their number, or -1 when s is not valid UTF-8 of alphabet symbols */
static long spelling_to_bytes(const struct alphabet *al, const char *s, size_t n,
                              uint8_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t b0 = (uint8_t)s[i];
        uint32_t c;
        if (b0 < 0x80) {
            c = b0;
            i++;
        } else if ((b0 & 0xE0) == 0xC0 && i + 1 < n && ((uint8_t)s[i + 1] & 0xC0) == 0x80) {
            c = (uint32_t)(b0 & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F);
            if (c < 0x80)
                return -1;
            i += 2;
        } else {
            return -1; /* 3- and 4-byte sequences are beyond the alphabet */
        }
        if (c >= 324 || al->byte_of_sym[c] < 0)
            return -1;
        out[k++] = (uint8_t)al->byte_of_sym[c];
    }
    return (long)k;
}

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* ---- the token table while loading: bytes -> id ---- */

struct strtab {
    uint32_t *slot; /* id + 1, 0: empty */
    size_t cap;
};

static long strtab_find(const struct strtab *t, const struct dsl_bpe *b, const uint8_t *p,
                        size_t n, size_t *where)
{
    size_t i = (size_t)fnv(p, n) & (t->cap - 1);
    for (;; i = (i + 1) & (t->cap - 1)) {
        uint32_t v = t->slot[i];
        if (!v) {
            if (where)
                *where = i;
            return -1;
        }
        if (b->len[v - 1] == n && memcmp(b->bytes + b->off[v - 1], p, n) == 0)
            return (long)(v - 1);
    }
}

/* ---- merges: (left, right) -> rank, result ---- */

static size_t mslot(const struct dsl_bpe *b, uint32_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (b->mcap - 1);
}

/* the rank of pair (l, r), its result in *res; UINT32_MAX: no merge */
static uint32_t merge_find(const struct dsl_bpe *b, uint16_t l, uint16_t r, uint16_t *res)
{
    uint32_t key = (uint32_t)l << 16 | r;
    for (size_t i = mslot(b, key);; i = (i + 1) & (b->mcap - 1)) {
        if (b->mrank[i] == UINT32_MAX)
            return UINT32_MAX;
        if (b->mkey[i] == key) {
            *res = b->mres[i];
            return b->mrank[i];
        }
    }
}

/* ---- loading ---- */

/* a spelling for messages: at most 40 bytes, as it is in the file */
static void show(char *dst, size_t cap, const char *s, size_t n)
{
    size_t k = n < 40 ? n : 40;
    snprintf(dst, cap, "%.*s%s", (int)k, s, n > 40 ? "..." : "");
}

static int parse_encoder(struct dsl_bpe *b, const struct alphabet *al, struct strtab *t, const char *enc, size_t enc_len,
                         const char *name, char *err)
{
    cJSON *root = cJSON_ParseWithLength(enc, enc_len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dsl_seterr(err, DSL_EDATA, "%s: not a JSON object of tokens and ids", name);
    }
    int r = 0;
    size_t n = 0, total = 0;
    for (cJSON *c = root->child; c; c = c->next) {
        n++;
        total += c->string ? strlen(c->string) : 0;
    }
    if (n == 0 || n > 65536) {
        r = dsl_seterr(err, DSL_EDATA, "%s: %zu tokens; a vocabulary has 256 to 65536", name,
                       n);
        goto out;
    }
    b->bytes = dsl_xmalloc(total + 1);
    b->nvocab = 65536;
    b->off = dsl_xmalloc(65536 * sizeof(uint32_t));
    b->len = dsl_xmalloc(65536 * sizeof(uint32_t));
    for (size_t i = 0; i < 65536; i++)
        b->len[i] = UINT32_MAX;
    t->cap = 1;
    while (t->cap < 2 * n)
        t->cap <<= 1;
    t->slot = dsl_xcalloc(t->cap, sizeof(uint32_t));
    size_t used = 0, maxid = 0;
    char sh[64];
    for (cJSON *c = root->child; c; c = c->next) {
        size_t kl = strlen(c->string);
        show(sh, sizeof(sh), c->string, kl);
        long nb = spelling_to_bytes(al, c->string, kl, b->bytes + used);
        if (nb <= 0) {
            r = dsl_seterr(err, DSL_EDATA, "%s: token '%s' is %s", name, sh,
                           nb == 0 ? "empty" : "not spelt in GPT-2's byte alphabet");
            goto out;
        }
        double v = cJSON_IsNumber(c) ? c->valuedouble : -1.0;
        if (!(v >= 0.0 && v <= 65535.0) || v != (double)(size_t)v) {
            r = dsl_seterr(err, DSL_EDATA,
                           "%s: token '%s' has id %s, not a whole number from 0 to 65535",
                           name, sh, cJSON_IsNumber(c) ? "out of range" : "that is no number");
            goto out;
        }
        size_t id = (size_t)v, where;
        if (b->len[id] != UINT32_MAX) {
            r = dsl_seterr(err, DSL_EDATA, "%s: id %zu is given to two tokens (one is '%s')",
                           name, id, sh);
            goto out;
        }
        if (strtab_find(t, b, b->bytes + used, (size_t)nb, &where) >= 0) {
            r = dsl_seterr(err, DSL_EDATA, "%s: token '%s' appears twice", name, sh);
            goto out;
        }
        b->off[id] = (uint32_t)used;
        b->len[id] = (uint32_t)nb;
        t->slot[where] = (uint32_t)id + 1;
        used += (size_t)nb;
        maxid = id > maxid ? id : maxid;
    }
    b->ntokens = n;
    b->nvocab = maxid + 1;
    for (int c = 0; c < 256; c++) {
        uint8_t one = (uint8_t)c;
        long id = strtab_find(t, b, &one, 1, NULL);
        if (id < 0) {
            r = dsl_seterr(err, DSL_EDATA, "%s: byte 0x%02x has no token (its symbol U+%04X)",
                           name, c, (unsigned)al->sym_of_byte[c]);
            goto out;
        }
        b->byte_id[c] = (uint16_t)id;
    }
    b->eot = strtab_find(t, b, (const uint8_t *)"<|endoftext|>", 13, NULL);
out:
    cJSON_Delete(root);
    return r;
}

static int parse_merges(struct dsl_bpe *b, const struct alphabet *al, const struct strtab *t, const char *m, size_t mlen,
                        const char *name, char *err)
{
    size_t lines = 1;
    for (size_t i = 0; i < mlen; i++)
        lines += m[i] == '\n';
    size_t cap = 1;
    while (cap < 2 * lines)
        cap <<= 1;
    b->mcap = cap;
    b->mkey = dsl_xmalloc(cap * sizeof(uint32_t));
    b->mrank = dsl_xmalloc(cap * sizeof(uint32_t));
    b->mres = dsl_xmalloc(cap * sizeof(uint16_t));
    for (size_t i = 0; i < cap; i++)
        b->mrank[i] = UINT32_MAX;
    uint32_t *line_of = dsl_xmalloc(lines * sizeof(uint32_t)); /* rank -> line */
    uint8_t *buf = dsl_xmalloc(mlen + 1);
    int r = 0;
    size_t lineno = 0, rank = 0;
    char sh[64];
    for (size_t i = 0; i < mlen;) {
        const char *s = m + i, *e = memchr(s, '\n', mlen - i);
        size_t n = e ? (size_t)(e - s) : mlen - i;
        i += n + 1;
        lineno++;
        if (n && s[n - 1] == '\r')
            n--;
        if (n == 0 || (lineno == 1 && s[0] == '#'))
            continue;
        show(sh, sizeof(sh), s, n);
        const char *sp = memchr(s, ' ', n);
        size_t la = sp ? (size_t)(sp - s) : 0, lb = sp ? n - la - 1 : 0;
        if (!sp || la == 0 || lb == 0 || memchr(sp + 1, ' ', lb) || memchr(s, '\t', n)) {
            r = dsl_seterr(err, DSL_EDATA, "%s:%zu: bad merge line '%s': want two tokens "
                           "with one space between", name, lineno, sh);
            goto out;
        }
        if (rank >= BPE_MAX_MERGES) {
            r = dsl_seterr(err, DSL_EDATA, "%s:%zu: more than %zu merges", name, lineno,
                           BPE_MAX_MERGES);
            goto out;
        }
        long na = spelling_to_bytes(al, s, la, buf), nb = na < 0 ? -1
                                                    : spelling_to_bytes(al, sp + 1, lb, buf + na);
        long ida = na < 0 ? -1 : strtab_find(t, b, buf, (size_t)na, NULL);
        long idb = nb < 0 ? -1 : strtab_find(t, b, buf + na, (size_t)nb, NULL);
        if (ida < 0 || idb < 0) {
            r = dsl_seterr(err, DSL_EDATA, "%s:%zu: merge '%s': '%.*s' is not a token of the "
                           "encoder", name, lineno, sh,
                           ida < 0 ? (int)(la < 40 ? la : 40) : (int)(lb < 40 ? lb : 40),
                           ida < 0 ? s : sp + 1);
            goto out;
        }
        long idr = strtab_find(t, b, buf, (size_t)(na + nb), NULL);
        if (idr < 0) {
            r = dsl_seterr(err, DSL_EDATA, "%s:%zu: merge '%s' makes a token the encoder "
                           "lacks", name, lineno, sh);
            goto out;
        }
        uint32_t key = (uint32_t)ida << 16 | (uint32_t)idb;
        size_t k = mslot(b, key);
        for (; b->mrank[k] != UINT32_MAX; k = (k + 1) & (cap - 1))
            if (b->mkey[k] == key) {
                r = dsl_seterr(err, DSL_EDATA, "%s:%zu: merge '%s' repeats line %u", name,
                               lineno, sh, line_of[b->mrank[k]]);
                goto out;
            }
        b->mkey[k] = key;
        b->mrank[k] = (uint32_t)rank;
        b->mres[k] = (uint16_t)idr;
        line_of[rank++] = (uint32_t)lineno;
    }
    b->nmerges = rank;
out:
    free(buf);
    free(line_of);
    return r;
}

int dsl_bpe_parse(struct dsl_bpe *b, const char *enc, size_t enc_len, const char *enc_name,
                  const char *merges, size_t merges_len, const char *merges_name, char *err)
{
    struct alphabet al;
    alphabet_init(&al);
    memset(b, 0, sizeof(*b));
    b->eot = -1;
    struct strtab t = {NULL, 0};
    int r = parse_encoder(b, &al, &t, enc, enc_len, enc_name, err);
    if (r == 0)
        r = parse_merges(b, &al, &t, merges, merges_len, merges_name, err);
    free(t.slot);
    if (r < 0)
        dsl_bpe_release(b);
    return r;
}

/* a file's contents, through zlib (a plain file reads as it is) */
static int read_file(const char *path, char **out, size_t *len, char *err)
{
    size_t size;
    int fd = dsl_file_open_regular(path, &size, err);
    if (fd < 0)
        return fd;
    gzFile g = gzdopen(fd, "rb");
    if (!g) {
        close(fd);
        return dsl_seterr(err, -ENOMEM, "cannot read '%s': out of memory", path);
    }
    size_t cap = size + 1, n = 0;
    char *buf = dsl_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > BPE_MAX_FILE) {
                free(buf);
                gzclose(g);
                return dsl_seterr(err, DSL_EDATA, "'%s': more than %zu bytes", path,
                                  BPE_MAX_FILE);
            }
            cap *= 2;
            buf = dsl_xrealloc(buf, cap);
        }
        size_t want = cap - 1 - n;
        int got = gzread(g, buf + n, (unsigned)(want < (1u << 30) ? want : (1u << 30)));
        if (got < 0) {
            int ez;
            const char *msg = gzerror(g, &ez);
            int r = dsl_seterr(err, DSL_EDATA, "cannot read '%s': %s", path, msg);
            free(buf);
            gzclose(g);
            return r;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    gzclose(g);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int dsl_bpe_load(struct dsl_bpe *b, const char *encoder_path, const char *merges_path,
                 char *err)
{
    char *enc = NULL, *mer = NULL;
    size_t el, ml;
    int r = read_file(encoder_path, &enc, &el, err);
    if (r == 0 && (r = read_file(merges_path, &mer, &ml, err)) == 0)
        r = dsl_bpe_parse(b, enc, el, encoder_path, mer, ml, merges_path, err);
    free(enc);
    free(mer);
    return r;
}

/* ---- the cache: piece bytes -> ids ---- */

struct cache_slot {
    uint64_t h;
    uint32_t koff, ioff;
    uint16_t klen, nids; /* klen 0: empty */
};

struct bpe_cache {
    struct cache_slot *slot;
    size_t used;
    uint8_t *keys;
    uint16_t *ids;
    size_t nkeys, nids;
};

static struct bpe_cache *cache_new(void)
{
    struct bpe_cache *c = dsl_xcalloc(1, sizeof(*c));
    c->slot = dsl_xcalloc(CACHE_SLOTS, sizeof(*c->slot));
    /* at most CACHE_SLOTS/2 pieces of at most CACHE_MAX_PIECE bytes and ids */
    c->keys = dsl_xmalloc(CACHE_SLOTS / 2 * 16);
    c->ids = dsl_xmalloc(CACHE_SLOTS / 2 * 16 * sizeof(uint16_t));
    return c;
}

static void cache_free(struct bpe_cache *c)
{
    if (!c)
        return;
    free(c->slot);
    free(c->keys);
    free(c->ids);
    free(c);
}

/* ---- encoding ---- */

struct heap_ent {
    uint32_t rank, pos;
    uint16_t a, b, res;
};

struct work {
    uint16_t *id;
    int32_t *nxt, *prv;
    uint8_t *dead;
    struct heap_ent *heap, *pend;
    size_t nheap, npend, cap;
};

static int ent_less(const struct heap_ent *x, const struct heap_ent *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(struct work *w, struct heap_ent e)
{
    size_t i = w->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(&e, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = e;
}

static struct heap_ent heap_pop(struct work *w)
{
    struct heap_ent top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ent_less(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!ent_less(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static void work_fit(struct work *w, size_t m)
{
    if (m <= w->cap)
        return;
    w->cap = m;
    w->id = dsl_xreallocarray(w->id, m, sizeof(*w->id));
    w->nxt = dsl_xreallocarray(w->nxt, m, sizeof(*w->nxt));
    w->prv = dsl_xreallocarray(w->prv, m, sizeof(*w->prv));
    w->dead = dsl_xreallocarray(w->dead, m, sizeof(*w->dead));
    /* a piece of m symbols has fewer than 2m live and stale pairs at any time: m - 1
     * at first, and each merge adds at most two */
    w->heap = dsl_xreallocarray(w->heap, 3 * m, sizeof(*w->heap));
    w->pend = dsl_xreallocarray(w->pend, 2 * m, sizeof(*w->pend));
}

static void work_release(struct work *w)
{
    free(w->id);
    free(w->nxt);
    free(w->prv);
    free(w->dead);
    free(w->heap);
    free(w->pend);
}

/* queue the pair that starts at symbol p, if it is a merge, into the pending list */
static void pair_at(const struct dsl_bpe *b, struct work *w, int32_t p, int pend)
{
    if (p < 0 || w->nxt[p] < 0)
        return;
    struct heap_ent e = {0, (uint32_t)p, w->id[p], w->id[w->nxt[p]], 0};
    if ((e.rank = merge_find(b, e.a, e.b, &e.res)) == UINT32_MAX)
        return;
    if (pend)
        w->pend[w->npend++] = e;
    else
        heap_push(w, e);
}

/* BPE of one piece of m bytes: its ids appended at out; their number */
static size_t bpe_piece(const struct dsl_bpe *b, struct work *w, const uint8_t *p, size_t m,
                        uint16_t *out)
{
    if (m == 1) {
        out[0] = b->byte_id[p[0]];
        return 1;
    }
    work_fit(w, m);
    for (size_t k = 0; k < m; k++) {
        w->id[k] = b->byte_id[p[k]];
        w->prv[k] = (int32_t)k - 1;
        w->nxt[k] = k + 1 < m ? (int32_t)k + 1 : -1;
        w->dead[k] = 0;
    }
    w->nheap = 0;
    for (size_t k = 0; k + 1 < m; k++)
        pair_at(b, w, (int32_t)k, 0);
    while (w->nheap) {
        uint32_t rank = w->heap[0].rank;
        w->npend = 0;
        while (w->nheap && w->heap[0].rank == rank) {
            struct heap_ent e = heap_pop(w);
            int32_t pos = (int32_t)e.pos, q = w->nxt[pos];
            if (w->dead[pos] || q < 0 || w->id[pos] != e.a || w->id[q] != e.b)
                continue; /* stale */
            w->id[pos] = e.res;
            w->dead[q] = 1;
            w->nxt[pos] = w->nxt[q];
            if (w->nxt[q] >= 0)
                w->prv[w->nxt[q]] = pos;
            pair_at(b, w, w->prv[pos], 1);
            pair_at(b, w, pos, 1);
        }
        for (size_t k = 0; k < w->npend; k++)
            heap_push(w, w->pend[k]);
    }
    size_t n = 0;
    for (int32_t k = 0; k >= 0; k = w->nxt[k])
        out[n++] = w->id[k];
    return n;
}

static size_t encode_piece(struct dsl_bpe *b, struct work *w, const uint8_t *p, size_t m,
                           uint16_t *out)
{
    if (m == 1 || m > CACHE_MAX_PIECE)
        return bpe_piece(b, w, p, m, out);
    struct bpe_cache *c = b->cache;
    uint64_t h = fnv(p, m);
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (; c->slot[i].klen; i = (i + 1) & (CACHE_SLOTS - 1)) {
        struct cache_slot *s = &c->slot[i];
        if (s->h == h && s->klen == m && memcmp(c->keys + s->koff, p, m) == 0) {
            memcpy(out, c->ids + s->ioff, s->nids * sizeof(uint16_t));
            return s->nids;
        }
    }
    size_t n = bpe_piece(b, w, p, m, out);
    if (c->used + 1 > CACHE_SLOTS / 2 || c->nkeys + m > CACHE_SLOTS / 2 * 16 ||
        c->nids + n > CACHE_SLOTS / 2 * 16) {
        memset(c->slot, 0, CACHE_SLOTS * sizeof(*c->slot));
        c->used = c->nkeys = c->nids = 0;
        for (i = (size_t)h & (CACHE_SLOTS - 1); c->slot[i].klen; i = (i + 1) & (CACHE_SLOTS - 1))
            ;
    }
    struct cache_slot *s = &c->slot[i];
    s->h = h;
    s->klen = (uint16_t)m;
    s->nids = (uint16_t)n;
    s->koff = (uint32_t)c->nkeys;
    s->ioff = (uint32_t)c->nids;
    memcpy(c->keys + c->nkeys, p, m);
    memcpy(c->ids + c->nids, out, n * sizeof(uint16_t));
    c->nkeys += m;
    c->nids += n;
    c->used++;
    return n;
}

uint16_t *dsl_bpe_encode(struct dsl_bpe *b, const uint8_t *text, size_t n, size_t *count)
{
    if (!b->cache)
        b->cache = cache_new();
    uint16_t *out = dsl_xmalloc((n ? n : 1) * sizeof(uint16_t));
    struct work w;
    memset(&w, 0, sizeof(w));
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = dsl_bpe_pretok_next(text, n, i);
        k += encode_piece(b, &w, text + i, j - i, out + k);
        i = j;
    }
    work_release(&w);
    *count = k;
    return out;
}

const uint8_t *dsl_bpe_token(const struct dsl_bpe *b, size_t id, size_t *len)
{
    if (id >= b->nvocab || b->len[id] == UINT32_MAX)
        return NULL;
    *len = b->len[id];
    return b->bytes + b->off[id];
}

void dsl_bpe_release(struct dsl_bpe *b)
{
    free(b->bytes);
    free(b->off);
    free(b->len);
    free(b->mkey);
    free(b->mrank);
    free(b->mres);
    cache_free(b->cache);
    memset(b, 0, sizeof(*b));
    b->eot = -1;
}
