/*
 * Checkpoints, what a load checks of each file besides its own checksums: values that
 * are not finite (named by tensor and index), files without any checksum, files larger
 * than a checkpoint of the model can be, metadata numbers.
 *
 * Theory of operation. Pure functions over loaded files and the caller's flags: a file
 * without any checksum stops the load unless the caller allows it
 * (DSL_CKPT_ALLOW_UNVERIFIED), and every value is checked to be finite as it is copied
 * in, which nothing allows.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/parse.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

int dsl_ckpt_meta_num(const struct dsl_st_file *f, const char *key, uint64_t *out, char *err)
{
    const char *v = dsl_env_get(&f->meta, key);
    long x;
    if (!v || dsl_parse_long(v, 0, LONG_MAX, &x) < 0)
        return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': %s metadata '%s'",
                          f->path, v ? "bad" : "missing", key);
    *out = (uint64_t)x;
    return 0;
}

/* the view that holds flat element i, or NULL */
const struct dsl_ckpt_param *dsl_ckpt_view_of(const struct dsl_ckpt *c, size_t i)
{
    const struct dsl_ckpt_param *v = NULL;
    for (size_t k = 0; k < c->nviews; k++)
        if (c->views[k].offset <= i)
            v = &c->views[k];
    return v;
}

const char *dsl_ckpt_nonfinite_word(float x)
{
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

int dsl_ckpt_nonfinite_hint(unsigned flags, char *err)
{
    size_t n = err ? strlen(err) : 0;
    if (err)
        snprintf(err + n, DSL_ERR_LEN - n, "%s",
                 flags & CKPT_SAVING
                     ? ": the training has diverged; nothing was saved, and 'latest' (if "
                       "any) still names the last good checkpoint (a lower learning rate, "
                       "warmup or gradient clipping may help)"
                     : ": the run that saved it had diverged, or the file was edited; load "
                       "an earlier checkpoint by its tag instead (no option loads this one)");
    return DSL_ECHECKPOINT;
}

/* The first element of v[0..n) that is not a finite number, or n; *count: how many. */
size_t dsl_ckpt_first_nonfinite(const float *v, size_t n, size_t *count)
{
    size_t first = n, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            if (first == n)
                first = i;
            k++;
        }
    }
    *count = k;
    return first;
}

/* "[3, 17]": element i of a tensor of that shape, row-major */
void dsl_ckpt_index_text(const struct dsl_ckpt_param *v, size_t i, char *buf, size_t len)
{
    size_t idx[4] = {0, 0, 0, 0}, rest = i, at = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        uint64_t sz = v->shape[d] ? v->shape[d] : 1;
        idx[d] = (size_t)(rest % sz);
        rest = (size_t)(rest / sz);
    }
    at += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%zu", d ? ", " : "", idx[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* Every parameter finite: the first that is not is named by tensor and index. */
int dsl_ckpt_params_finite(const struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    for (size_t k = 0; k < c->nviews; k++) {
        const struct dsl_ckpt_param *v = &c->views[k];
        size_t n = (k + 1 < c->nviews ? c->views[k + 1].offset : c->numel) - v->offset, cnt;
        size_t i = dsl_ckpt_first_nonfinite(c->params + v->offset, n, &cnt);
        if (i == n)
            continue;
        char at[96];
        dsl_ckpt_index_text(v, i, at, sizeof(at));
        dsl_seterr(err, DSL_ECHECKPOINT,
                   "checkpoint file '%s': parameter '%s' element %s is %s (not finite: %zu "
                   "of its %zu elements)",
                   file, v->name, at, dsl_ckpt_nonfinite_word(c->params[v->offset + i]), cnt, n);
        return dsl_ckpt_nonfinite_hint(flags, err);
    }
    return 0;
}

/*
 * A file without any checksum (no dsl.sha256, dsl.data_sha256 or dsl.crc32): another
 * tool's, or ours with the checksums cut out, so nothing tells its bytes from what was
 * saved. Refused unless DSL_CKPT_ALLOW_UNVERIFIED; allowed, the first such file is
 * noted in c->unverified for the caller's warning.
 */
int dsl_ckpt_unverified(struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    if (!(flags & DSL_CKPT_ALLOW_UNVERIFIED))
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint file '%s' has no checksums (no dsl.sha256 or "
                          "dsl.data_sha256: written by another tool, or they were removed), "
                          "so corrupt or edited data cannot be detected; pass "
                          "--allow-unverified-checkpoint to load it anyway",
                          file);
    if (!c->unverified)
        c->unverified = dsl_xstrdup(file);
    return 0;
}

/* The safetensors flags of a load: files without checksums refused from their header,
 * before their data is read, unless the caller allows them. */
unsigned dsl_ckpt_st_flags(unsigned flags)
{
    return DSL_ST_HEADER_SUM_LATER |
           (flags & DSL_CKPT_ALLOW_UNVERIFIED ? 0u : (unsigned)DSL_ST_NEED_SUM);
}

/*
 * A file larger than any checkpoint file of a model of numel parameters can be (the
 * header's limit plus nstate fp32 vectors of numel), when the caller knows numel (0:
 * not known): refused from its size alone, before it is opened for reading, so a
 * huge or sparse file whose header agrees with its size costs nothing either. A file
 * that cannot be stat'ed is left to the load, which names the reason.
 */
int dsl_ckpt_too_large(const char *file, size_t numel, size_t nstate, char *err)
{
    struct stat st;
    if (numel == 0 || stat(file, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    uint64_t max = 8 + (uint64_t)DSL_ST_MAX_HEADER + (uint64_t)nstate * numel * sizeof(float);
    if ((uint64_t)st.st_size <= max)
        return 0;
    return dsl_seterr(err, DSL_ECHECKPOINT,
                      "checkpoint file '%s' is %" PRIu64 " bytes, more than a checkpoint of "
                      "this model (%zu parameters) can hold (%" PRIu64 " bytes at most): not a "
                      "checkpoint of this model, or damaged",
                      file, (uint64_t)st.st_size, numel, max);
}

/* A decimal number of at most 19 digits, no sign or leading zero, at *p; advances *p. */
static int read_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    size_t k = 0;
    while (s[k] >= '0' && s[k] <= '9' && k < 20)
        v = v * 10 + (uint64_t)(s[k++] - '0');
    if (k == 0 || k > 19 || (s[0] == '0' && k > 1))
        return -1;
    *out = v;
    *p = s + k;
    return 0;
}

int dsl_ckpt_ranges_parse(const char *v, uint64_t numel, uint64_t (**out)[2], size_t *n,
                          uint64_t *total)
{
    uint64_t (*rg)[2] = NULL, sum = 0;
    size_t k = 0, alloc = 0;
    const char *p = v;
    while (*p) {
        uint64_t off, len;
        if (read_u64(&p, &off) < 0 || *p++ != '+' || read_u64(&p, &len) < 0 || len == 0 ||
            off > numel || len > numel - off || sum > numel - len || (*p && *p++ != ',') ||
            (!*p && p[-1] == ','))
            goto bad;
        if (k == alloc) {
            alloc = alloc ? 2 * alloc : 16;
            rg = dsl_xreallocarray(rg, alloc, sizeof(*rg));
        }
        rg[k][0] = off;
        rg[k][1] = len;
        sum += len;
        k++;
    }
    *out = rg;
    *n = k;
    *total = sum;
    return 0;
bad:
    free(rg);
    return -1;
}

int dsl_ckpt_views_parse(const char *v, size_t numel, struct dsl_ckpt_param **out, size_t *n)
{
    struct dsl_ckpt_param *pv = NULL;
    size_t k = 0, alloc = 0, pos = 0;
    const char *p = v;
    while (*p) {
        const char *b = strchr(p, '[');
        uint64_t shape[4], sz = 1;
        int nd = 0;
        if (!b || b == p || memchr(p, ';', (size_t)(b - p)))
            goto bad;
        const char *q = b + 1;
        while (*q != ']') {
            if (nd == 4 || read_u64(&q, &shape[nd]) < 0 || (*q != ',' && *q != ']') ||
                (shape[nd] && sz > numel / shape[nd]))
                goto bad;
            sz *= shape[nd++];
            if (*q == ',' && *++q == ']')
                goto bad;
        }
        if (sz > numel - pos || (q[1] && q[1] != ';') || (q[1] == ';' && !q[2]))
            goto bad;
        if (k == alloc) {
            alloc = alloc ? 2 * alloc : 16;
            pv = dsl_xreallocarray(pv, alloc, sizeof(*pv));
        }
        memset(&pv[k], 0, sizeof(pv[k]));
        pv[k].name = dsl_xstrndup(p, (size_t)(b - p));
        pv[k].offset = pos;
        pv[k].ndim = nd;
        memcpy(pv[k].shape, shape, (size_t)nd * sizeof(shape[0]));
        pos += (size_t)sz;
        k++;
        p = q[1] ? q + 2 : q + 1;
    }
    if (pos != numel)
        goto bad;
    *out = pv;
    *n = k;
    return 0;
bad:
    for (size_t i = 0; i < k; i++)
        free((char *)(uintptr_t)pv[i].name);
    free(pv);
    return -1;
}
