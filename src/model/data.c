/*
 * Datasets (Fashion-MNIST idx.gz via zlib, synthetic) and the world-size invariant
 * sampler. See include/dslaunch/model/data.h for the semantics.
 *
 * The idx format: a big-endian magic 0x0000TTNN (TT = 0x08 for unsigned bytes, NN =
 * number of dimensions), NN big-endian uint32 dimensions, then the data. gzread reads
 * both gzip and plain files, so an unpacked copy works too. The header comes from a
 * file, so its dimensions are checked against the file's size before anything is
 * allocated (dsl_idx_read).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dslaunch/model/data.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, n) without modulo bias (n > 0) */
static uint64_t rand_below(uint64_t *s, uint64_t n)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, v;
    do
        v = splitmix(s);
    while (v >= lim);
    return v % n;
}

static int gz_read_all(gzFile f, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        int k = gzread(f, p, chunk);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* deflate's best ratio is 1032:1: a gzip file of s bytes never holds more than this */
static size_t gz_max_plain(size_t s)
{
    return s > SIZE_MAX / 1032 ? SIZE_MAX : s * 1032 + 1024;
}

/*
 * The header's dimensions are trusted only as far as the file can hold them: a plain
 * file must be exactly header + data bytes long, a gzip file at most 1032 times its
 * size (deflate's limit). The data buffer then grows with what is actually read, so a
 * header claiming 4 GB in a truncated file never costs more than twice what is there.
 */
int dsl_idx_read(const char *path, uint8_t **out, size_t *count, size_t dims[4],
                 size_t *ndim, char *err)
{
    *out = NULL;
    size_t fsize;
    int fd = dsl_file_open_regular(path, &fsize, err); /* a FIFO would block gzread */
    if (fd < 0)
        return fd;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dsl_seterr(err, -ENOMEM, "'%s': cannot start reading", path);
    }
    unsigned char hdr[4], d[4];
    int r = DSL_EDATA;
    uint8_t *buf = NULL;
    size_t n = 1, have = 0, cap = 0;
    size_t dn[4];
    if (gz_read_all(f, hdr, 4) < 0 || hdr[0] || hdr[1] || hdr[2] != 0x08 || !hdr[3] ||
        hdr[3] > 4) {
        dsl_seterr(err, r, "'%s': not an idx file of unsigned bytes", path);
        goto out;
    }
    size_t nd = hdr[3];
    for (size_t i = 0; i < nd; i++) {
        if (gz_read_all(f, d, 4) < 0) {
            dsl_seterr(err, r, "'%s': truncated idx header", path);
            goto out;
        }
        dn[i] = (size_t)d[0] << 24 | (size_t)d[1] << 16 | (size_t)d[2] << 8 | d[3];
        if (!dn[i] || n > SIZE_MAX / dn[i] / 2) {
            dsl_seterr(err, r, "'%s': bad idx dimension %zu", path, dn[i]);
            goto out;
        }
        n *= dn[i];
    }
    size_t hlen = 4 + 4 * nd;
    if (gzdirect(f)) {
        if (hlen > fsize || fsize - hlen != n) {
            dsl_seterr(err, r,
                       "'%s': the idx header claims %zu bytes of data, the file holds %lld",
                       path, n, (long long)fsize - (long long)hlen);
            goto out;
        }
    } else if (n > gz_max_plain(fsize)) {
        dsl_seterr(err, r,
                   "'%s': the idx header claims %zu bytes of data, more than a gzip file of "
                   "%lld bytes can hold",
                   path, n, (long long)fsize);
        goto out;
    }
    while (have < n) {
        if (have == cap) {
            cap = cap ? (cap > n / 2 ? n : 2 * cap) : (n < (1u << 20) ? n : 1u << 20);
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                r = dsl_seterr(err, -ENOMEM, "'%s': cannot allocate %zu bytes", path, cap);
                goto out;
            }
            buf = nb;
        }
        size_t want = cap - have;
        int k = gzread(f, buf + have, want > (1u << 30) ? 1u << 30 : (unsigned)want);
        if (k < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            dsl_seterr(err, r, "'%s': cannot read the idx data: %s", path,
                       msg && *msg ? msg : "gzip error");
            goto out;
        }
        if (k == 0) {
            dsl_seterr(err, r, "'%s': truncated idx data (the header claims %zu bytes, the "
                       "file holds %zu)", path, n, have);
            goto out;
        }
        have += (size_t)k;
    }
    memcpy(dims, dn, nd * sizeof(dn[0]));
    *ndim = nd;
    *out = buf;
    *count = n;
    buf = NULL;
    r = 0;
out:
    free(buf);
    gzclose(f);
    return r;
}

static int load_fmnist_split(struct dsl_dataset *d, const char *dir, const char *prefix,
                             char *err)
{
    char pi[4096], pl[4096];
    uint8_t *img = NULL, *lab = NULL;
    size_t ni, nl, di[4], dl[4], ndi, ndl;
    snprintf(pi, sizeof(pi), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(pl, sizeof(pl), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    int r = dsl_idx_read(pi, &img, &ni, di, &ndi, err);
    if (r < 0)
        goto out;
    if ((r = dsl_idx_read(pl, &lab, &nl, dl, &ndl, err)) < 0)
        goto out;
    if (ndi != 3 || ndl != 1 || di[0] != dl[0]) {
        r = dsl_seterr(err, DSL_EDATA, "'%s' and '%s' do not match (%zu images, %zu labels)",
                       pi, pl, di[0], dl[0]);
        goto out;
    }
    d->n = di[0];
    d->dim = di[1] * di[2];
    d->nclasses = 10;
    d->x = malloc(ni * sizeof(float));
    d->y = malloc(nl * sizeof(int32_t));
    if (!d->x || !d->y) {
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu samples of '%s'", d->n, pi);
        goto out;
    }
    for (size_t i = 0; i < ni; i++)
        d->x[i] = (float)img[i] / 255.0f;
    for (size_t i = 0; i < nl; i++) {
        if (lab[i] >= 10) {
            r = dsl_seterr(err, DSL_EDATA, "'%s': label %u at %zu out of range", pl, lab[i],
                           i);
            goto out;
        }
        d->y[i] = lab[i];
    }
    r = 0;
out:
    free(img);
    free(lab);
    return r;
}

static void normalise(struct dsl_dataset *d, float mean, float std)
{
    size_t n = d->n * d->dim;
    for (size_t i = 0; i < n; i++)
        d->x[i] = (d->x[i] - mean) / std;
}

static int load_fmnist(struct dsl_dataset *tr, struct dsl_dataset *te, const char *dir,
                       char *err)
{
    int r = load_fmnist_split(tr, dir, "train", err);
    if (r == -ENOENT)
        dsl_seterr(err, r,
                   "Fashion-MNIST not found in '%s' (apt-get install dataset-fashion-mnist, "
                   "or set \"dstrain\": {\"data\": {\"path\": ...}})",
                   dir);
    if (r < 0)
        return r;
    if ((r = load_fmnist_split(te, dir, "t10k", err)) < 0)
        return r;
    double s = 0.0, s2 = 0.0;
    size_t n = tr->n * tr->dim;
    for (size_t i = 0; i < n; i++)
        s += tr->x[i];
    double mean = s / (double)n;
    for (size_t i = 0; i < n; i++)
        s2 += ((double)tr->x[i] - mean) * ((double)tr->x[i] - mean);
    double std = sqrt(s2 / (double)n);
    normalise(tr, (float)mean, (float)std);
    normalise(te, (float)mean, (float)std);
    return 0;
}

/* n x dim floats (and n labels) for d, or an error with the size: the sizes come from
   the user, so a failed allocation is reported, never an abort */
static int synth_alloc(struct dsl_dataset *d, size_t n, const char *what, char *err)
{
    if (n > SIZE_MAX / sizeof(float) / (d->dim ? d->dim : 1) / 2)
        return dsl_seterr(err, DSL_ECONFIG, "synthetic data: %s samples %zu x features %zu "
                          "is more than this machine can address", what, n, d->dim);
    size_t bytes = n * d->dim * sizeof(float);
    d->x = malloc(bytes ? bytes : 1);
    d->y = malloc(n ? n * sizeof(int32_t) : 1);
    if (!d->x || !d->y)
        return dsl_seterr(err, -ENOMEM,
                          "synthetic data: cannot allocate %zu bytes for %zu %s samples of %zu "
                          "features", bytes + n * sizeof(int32_t), n, what, d->dim);
    d->n = n;
    return 0;
}

/* Class prototypes in [-1, 1]; each sample is its prototype plus uniform noise. */
static void synth_fill(struct dsl_dataset *d, const float *proto, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        size_t c = (size_t)rand_below(&s, d->nclasses);
        d->y[i] = (int32_t)c;
        for (size_t k = 0; k < d->dim; k++) {
            float u = (float)(splitmix(&s) >> 40) * (1.0f / 16777216.0f);
            d->x[i * d->dim + k] = proto[c * d->dim + k] + 3.0f * (u - 0.5f);
        }
    }
}

static int load_synthetic(struct dsl_dataset *tr, struct dsl_dataset *te,
                          const struct dsl_data_opts *o, char *err)
{
    size_t dim = o->synth_dim ? o->synth_dim : 784;
    size_t nc = o->synth_classes ? o->synth_classes : 10;
    size_t ntr = o->synth_train ? o->synth_train : 60000;
    size_t nte = o->synth_test ? o->synth_test : 10000;
    int r;
    if (nc > dim * 1000 || dim > (1u << 24) || nc > (1u << 24))
        return dsl_seterr(err, DSL_ECONFIG, "synthetic data: bad shape %zu x %zu", dim, nc);
    tr->dim = te->dim = dim;
    tr->nclasses = te->nclasses = nc;
    float *proto = malloc(nc * dim * sizeof(float));
    if (!proto)
        return dsl_seterr(err, -ENOMEM,
                          "synthetic data: cannot allocate %zu bytes for %zu class prototypes of "
                          "%zu features", nc * dim * sizeof(float), nc, dim);
    if ((r = synth_alloc(tr, ntr, "training", err)) < 0 ||
        (r = synth_alloc(te, nte, "test", err)) < 0) {
        free(proto);
        return r;
    }
    uint64_t s = o->seed ^ 0x5eedf00dull;
    for (size_t i = 0; i < nc * dim; i++)
        proto[i] = (float)(splitmix(&s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    synth_fill(tr, proto, ntr, o->seed * 2 + 1);
    synth_fill(te, proto, nte, o->seed * 2 + 2);
    free(proto);
    return 0;
}

int dsl_data_load(struct dsl_dataset *train, struct dsl_dataset *test,
                  const struct dsl_data_opts *o, char *err)
{
    memset(train, 0, sizeof(*train));
    memset(test, 0, sizeof(*test));
    const char *name = o->name ? o->name : "fashion_mnist";
    int r;
    if (!strcmp(name, "fashion_mnist") || !strcmp(name, "fashion-mnist"))
        r = load_fmnist(train, test, o->path && *o->path ? o->path : DSL_FMNIST_DIR, err);
    else if (!strcmp(name, "synthetic"))
        r = load_synthetic(train, test, o, err);
    else if (!strcmp(name, "text"))
        r = dsl_data_load_text(train, test, o, err);
    else if (!strcmp(name, "tokens"))
        r = dsl_data_load_tokens(train, test, o, err);
    else
        r = dsl_seterr(err, DSL_ECONFIG,
                       "unknown dataset '%s' (known: fashion_mnist, synthetic, text, tokens)",
                       name);
    if (r < 0) {
        dsl_dataset_release(train);
        dsl_dataset_release(test);
    }
    return r;
}

void dsl_dataset_release(struct dsl_dataset *d)
{
    free(d->x);
    free(d->y);
    dsl_token_runs_release(d->runs, d->nruns);
    memset(d, 0, sizeof(*d));
}

void dsl_dataset_gather(const struct dsl_dataset *d, const size_t *idx, size_t k, float *x,
                        int32_t *y)
{
    for (size_t i = 0; i < k; i++) {
        if (d->runs) { /* a window of token data */
            dsl_tokens_window(d, idx[i] * d->stride, d->dim, x + i * d->dim);
            y[i] = 0;
            continue;
        }
        memcpy(x + i * d->dim, d->x + idx[i] * d->dim, d->dim * sizeof(float));
        y[i] = d->y[idx[i]];
    }
}

int dsl_sampler_init(struct dsl_sampler *s, size_t n, size_t global_batch, uint64_t seed,
                     int shuffle, int drop_last, char *err)
{
    memset(s, 0, sizeof(*s));
    if (!n || !global_batch)
        return dsl_seterr(err, DSL_ECONFIG, "empty dataset or batch");
    if (drop_last && n < global_batch)
        return dsl_seterr(err, DSL_ECONFIG,
                          "dataset of %zu samples is smaller than one global batch (%zu) "
                          "with drop_last",
                          n, global_batch);
    s->n = n;
    s->global_batch = global_batch;
    s->steps_per_epoch = drop_last ? n / global_batch : (n + global_batch - 1) / global_batch;
    s->seed = seed;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->epoch = UINT64_MAX;
    s->idx = dsl_xmalloc(s->steps_per_epoch * global_batch * sizeof(size_t));
    return 0;
}

static void sampler_fill(struct dsl_sampler *s, uint64_t epoch)
{
    size_t *perm = dsl_xmalloc(s->n * sizeof(size_t));
    for (size_t i = 0; i < s->n; i++)
        perm[i] = i;
    if (s->shuffle) {
        uint64_t st = s->seed * 0x100000001B3ull + epoch; /* seed + epoch */
        for (size_t i = s->n - 1; i > 0; i--) {
            size_t j = (size_t)rand_below(&st, i + 1);
            size_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    size_t total = s->steps_per_epoch * s->global_batch;
    for (size_t i = 0; i < total; i++) /* padding repeats the head, as DistributedSampler */
        s->idx[i] = perm[i % s->n];
    free(perm);
    s->epoch = epoch;
}

const size_t *dsl_sampler_step(struct dsl_sampler *s, uint64_t epoch, size_t step)
{
    if (s->epoch != epoch)
        sampler_fill(s, epoch);
    return s->idx + (step % s->steps_per_epoch) * s->global_batch;
}

void dsl_sampler_release(struct dsl_sampler *s)
{
    free(s->idx);
    memset(s, 0, sizeof(*s));
}
