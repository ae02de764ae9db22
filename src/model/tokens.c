/*
 * Token data of the GPT: llm.c's shard format, byte-level text, and the datasets
 * ("text", "tokens") of windows over them (data.h).
 *
 * The shard format (karpathy/llm.c, dev/data): a header of 256 little-endian int32 —
 * [0] the magic 20240520, [1] the version 1, [2] the number of tokens — then that many
 * little-endian uint16 token ids, nothing after. The header comes from a file, so it is
 * checked against the file's size before anything is allocated, and every message
 * names the file and what is wrong with it.
 *
 * Text: every regular file of a directory that is not a symbolic link and not a
 * fortune(6) ".dat" index, in name order (strcmp, Python's sorted() for the ASCII
 * names of /usr/share/games/fortunes), concatenated as bytes; or one file. A byte is a
 * token (vocabulary 256).
 *
 * Windows: sample i of a split is tokens [i*stride, i*stride + context + 1); the
 * splits are read lazily by dsl_dataset_gather (stride 1 would otherwise hold context
 * + 1 floats per token); the validation split's stride is context, so its windows
 * share one token each and predict every token but the last (n - 1) mod context once.
 *
 * Memory. A split is a list of runs (data.h). The "tokens" dataset maps each shard
 * read-only from its file (on a little-endian machine, where the file's uint16 are
 * the machine's), so the training shards cost page cache, shared by every rank of the
 * node and given back under pressure, not a copy per rank: llm.c's fineweb10B shards
 * (20 GB) need no 20 GB per rank. The vocabulary check reads every token once at load.
 * A shard must not be truncated in place while a run maps it (SIGBUS); tokenize
 * replaces its output by renaming, which leaves a mapped file whole. Text is read
 * into one run of ours.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/data.h"
#include "dslaunch/common/banned.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

int dsl_tokens_check_header(const uint8_t *hdr, size_t have, uint64_t file_size,
                            const char *path, uint64_t *ntok, char *err)
{
    if (have < DSL_TOKENS_HEADER)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': %llu bytes, shorter than the %d-byte header",
                          path, (unsigned long long)have, DSL_TOKENS_HEADER);
    uint32_t magic = le32(hdr), version = le32(hdr + 4), n = le32(hdr + 8);
    if (magic == 20240801) /* llm.c's dev/data/data_common.py, model_desc "llama-3" */
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': magic 20240801 is llm.c's LLaMA 3 format (uint32 "
                          "tokens), which dstrain does not read: write GPT-2 shards (magic "
                          "%u, uint16 tokens)",
                          path, DSL_TOKENS_MAGIC);
    if (magic != DSL_TOKENS_MAGIC)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': bad magic %u (expected %u: llm.c's uint16 "
                          "shards)",
                          path, magic, DSL_TOKENS_MAGIC);
    if (version != 1)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': version %u not supported (expected 1)", path,
                          version);
    if ((int32_t)n < 0)
        return dsl_seterr(err, DSL_EDATA, "token shard '%s': negative token count %d", path,
                          (int32_t)n);
    uint64_t want = DSL_TOKENS_HEADER + 2 * (uint64_t)n;
    if (file_size < want)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': truncated: the header claims %u tokens (%llu "
                          "bytes), the file holds %llu",
                          path, n, (unsigned long long)want, (unsigned long long)file_size);
    if (file_size > want)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': %llu bytes after the %u tokens the header claims",
                          path, (unsigned long long)(file_size - want), n);
    *ntok = n;
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n > (1u << 30) ? 1u << 30 : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : DSL_EDATA;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* open the shard at path and check its header against its size: the descriptor
   (positioned after the header), *fsize and the token count *n; or a negative code */
static int open_shard(const char *path, size_t *fsize, uint64_t *n, char *err)
{
    int fd = dsl_file_open_regular(path, fsize, err);
    if (fd < 0)
        return fd;
    uint8_t hdr[DSL_TOKENS_HEADER];
    size_t have = *fsize < sizeof(hdr) ? *fsize : sizeof(hdr);
    int r = read_full(fd, hdr, have);
    if (r < 0)
        r = dsl_seterr(err, r, "token shard '%s': cannot read the header", path);
    else
        r = dsl_tokens_check_header(hdr, have, *fsize, path, n, err);
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

int dsl_tokens_read(const char *path, uint16_t **out, size_t *count, char *err)
{
    size_t fsize;
    uint64_t n = 0;
    int r;
    *out = NULL;
    int fd = open_shard(path, &fsize, &n, err);
    if (fd < 0)
        return fd;
    uint16_t *t = malloc(n ? n * 2 : 1);
    uint8_t *raw = (uint8_t *)t;
    if (!t) {
        close(fd);
        return dsl_seterr(err, -ENOMEM, "token shard '%s': cannot allocate %llu tokens", path,
                          (unsigned long long)n);
    }
    if ((r = read_full(fd, raw, n * 2)) < 0) {
        close(fd);
        free(t);
        return dsl_seterr(err, r, "token shard '%s': cannot read %llu tokens (%s)", path,
                          (unsigned long long)n,
                          r == DSL_EDATA ? "the file shrank" : dsl_strerror(r));
    }
    close(fd);
    for (size_t i = 0; i < n; i++) /* little-endian on disk, whatever this machine is */
        t[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
    *out = t;
    *count = n;
    return 0;
}

int dsl_tokens_write(const char *path, const uint16_t *tok, size_t n, char *err)
{
    if (n > INT32_MAX)
        return dsl_seterr(err, DSL_EDATA,
                          "token shard '%s': %zu tokens, more than one shard holds (%d)", path,
                          n, INT32_MAX);
    char *tmp = NULL;
    int fd = dsl_file_create_temp(path, 0644, &tmp, err);
    if (fd < 0)
        return fd;
    uint8_t hdr[DSL_TOKENS_HEADER] = {0};
    put_le32(hdr, DSL_TOKENS_MAGIC);
    put_le32(hdr + 4, 1);
    put_le32(hdr + 8, (uint32_t)n);
    FILE *f = fdopen(fd, "wb");
    int bad = !f || fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr);
    for (size_t i = 0; !bad && i < n; i++) {
        uint8_t b[2] = {(uint8_t)tok[i], (uint8_t)(tok[i] >> 8)};
        bad = fwrite(b, 1, 2, f) != 2;
    }
    if (f ? fclose(f) != 0 : close(fd) != 0)
        bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        free(tmp);
        return dsl_seterr(err, -e, "cannot write token shard '%s': %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* the regular files of dir whose names pass keep(), sorted by name; symbolic links
   too with links (whatever they point at: the reader refuses what is not a file) */
static int list_dir(const char *dir, int (*keep)(const char *name, const void *arg),
                    const void *arg, int links, char ***names, size_t *count,
                    size_t *skipped_links, char *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return dsl_seterr(err, -errno, "cannot read directory '%s': %s", dir, strerror(errno));
    char **v = NULL;
    size_t n = 0, nl = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        char *p = dsl_xasprintf("%s/%s", dir, e->d_name);
        int seen = e->d_name[0] != '.' && lstat(p, &st) == 0;
        int ok = seen && (S_ISREG(st.st_mode) || (links && S_ISLNK(st.st_mode))) &&
                 keep(e->d_name, arg);
        nl += seen && !links && S_ISLNK(st.st_mode);
        if (ok) {
            v = dsl_xreallocarray(v, n + 1, sizeof(*v));
            v[n++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
    if (n) /* qsort(NULL, 0) is undefined */
        qsort(v, n, sizeof(*v), by_name);
    *names = v;
    *count = n;
    if (skipped_links)
        *skipped_links = nl;
    return 0;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int keep_text(const char *name, const void *arg)
{
    (void)arg;
    return !ends_with(name, ".dat");
}

int dsl_text_read(const char *path, uint8_t **out, size_t *len, size_t *nfiles, char *err)
{
    struct stat st;
    char **names = NULL;
    size_t n = 0, total = 0, links = 0;
    *out = NULL;
    if (stat(path, &st) != 0)
        return dsl_seterr(err, -errno, "text data '%s': %s", path, strerror(errno));
    int r;
    if (S_ISDIR(st.st_mode)) {
        if ((r = list_dir(path, keep_text, NULL, 0, &names, &n, &links, err)) < 0)
            return r;
    } else {
        names = dsl_xmalloc(sizeof(*names));
        names[n++] = dsl_xstrdup(path);
    }
    if (!n) {
        free_names(names, n);
        if (links)
            return dsl_seterr(err, DSL_EDATA,
                              "text data '%s': no regular files in it (%zu symbolic link%s "
                              "skipped: give a linked file by its own path, or the directory "
                              "it is in)",
                              path, links, links == 1 ? "" : "s");
        return dsl_seterr(err, DSL_EDATA, "text data '%s': no regular files in it", path);
    }
    uint8_t *buf = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t sz;
        int fd = dsl_file_open_regular(names[i], &sz, err);
        if (fd < 0) {
            r = fd;
            goto fail;
        }
        uint8_t *nb = realloc(buf, total + sz + 1);
        if (!nb) {
            close(fd);
            r = dsl_seterr(err, -ENOMEM, "text data: cannot allocate %zu bytes", total + sz);
            goto fail;
        }
        buf = nb;
        r = read_full(fd, buf + total, sz);
        close(fd);
        if (r < 0) {
            dsl_seterr(err, r, "text data '%s': cannot read %zu bytes", names[i], sz);
            goto fail;
        }
        /* a token shard (tokenize's output, llm.c's) is not text: a whole header with
           the magic, as the shard reader would take it */
        if (sz >= DSL_TOKENS_HEADER && le32(buf + total) == DSL_TOKENS_MAGIC) {
            r = dsl_seterr(err, DSL_EDATA,
                           "text data '%s': '%s' is an llm.c token shard, not text: use "
                           "dataset \"tokens\" (--data tokens)",
                           path, names[i]);
            goto fail;
        }
        total += sz;
    }
    free_names(names, n);
    *out = buf ? buf : dsl_xmalloc(1);
    *len = total;
    *nfiles = n;
    return 0;
fail:
    free(buf);
    free_names(names, n);
    return r;
}

/* ---- datasets of windows ------------------------------------------------------------ */

/* the tokens of one run: its file's mapping, or our array */
static void run_release(const struct dsl_token_run *r)
{
    if (r->map)
        munmap(r->map, r->maplen);
    else
        free((void *)r->tok);
}

void dsl_token_runs_release(struct dsl_token_run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_release(&runs[i]);
    free(runs);
}

void dsl_tokens_window(const struct dsl_dataset *d, size_t first, size_t n, float *out)
{
    size_t lo = 0, hi = d->nruns; /* the run that holds first: the last start <= first */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->runs[mid].start <= first)
            lo = mid;
        else
            hi = mid;
    }
    for (size_t k = lo; n && k < d->nruns; k++) {
        const struct dsl_token_run *r = &d->runs[k];
        size_t off = first - r->start, m = r->n - off < n ? r->n - off : n;
        for (size_t j = 0; j < m; j++)
            out[j] = (float)r->tok[off + j];
        out += m;
        first += m;
        n -= m;
    }
}

/* append n tokens at tok (owned: map, or malloc'd) to a split's runs; an empty run
   is released at once, so starts rise strictly */
static void add_run(struct dsl_token_run **runs, size_t *nruns, size_t *total,
                    const struct dsl_token_run *r)
{
    if (!r->n) {
        run_release(r);
        return;
    }
    *runs = dsl_xreallocarray(*runs, *nruns + 1, sizeof(**runs));
    (*runs)[*nruns] = *r;
    (*runs)[*nruns].start = *total;
    (*nruns)++;
    *total += r->n;
}

/* the split's runs (n tokens in all) as a lazy dataset of windows (takes the runs);
   what names the split and ends where the count follows, hint says what to change if
   it is too short */
static int lazy_split(struct dsl_dataset *d, struct dsl_token_run *runs, size_t nruns,
                      size_t n, size_t win, size_t stride, size_t vocab, const char *what,
                      const char *hint, char *err)
{
    if (n < win) {
        dsl_token_runs_release(runs, nruns);
        return dsl_seterr(err, DSL_EDATA,
                          "%s%zu tokens, fewer than one window of context + 1 = %zu: %s", what,
                          n, win, hint);
    }
    d->runs = runs;
    d->nruns = nruns;
    d->ntokens = n;
    d->stride = stride;
    d->dim = win;
    d->nclasses = vocab;
    d->n = (n - win) / stride + 1;
    return 0;
}

/* every token of the runs below vocab; else DSL_EDATA with the first one outside it
   (its position in the split) and the largest id */
static int check_vocab(const struct dsl_token_run *runs, size_t nruns, size_t vocab,
                       const char *what, char *err)
{
    size_t first = SIZE_MAX, top = 0;
    uint16_t bad = 0;
    for (size_t k = 0; k < nruns; k++) {
        const uint16_t *t = runs[k].tok;
        uint16_t hi = 0;
        for (size_t i = 0; i < runs[k].n; i++) /* a max the compiler vectorises */
            hi = t[i] > hi ? t[i] : hi;
        if (hi < vocab)
            continue;
        top = hi > top ? hi : top;
        for (size_t i = 0; first == SIZE_MAX && i < runs[k].n; i++)
            if (t[i] >= vocab) {
                first = runs[k].start + i;
                bad = t[i];
            }
    }
    if (first == SIZE_MAX)
        return 0;
    return dsl_seterr(err, DSL_EDATA,
                      "%s: token %u at position %zu is outside the vocabulary of %zu: the "
                      "largest id is %zu, so the model needs a vocabulary of at least %zu "
                      "(GPT-2 BPE shards: 50257; set \"dstrain\": {\"model\": "
                      "{\"vocab\": N}})",
                      what, bad, first, vocab, top, top + 1);
}

int dsl_data_load_text(struct dsl_dataset *train, struct dsl_dataset *test,
                       const struct dsl_data_opts *o, char *err)
{
    const char *path = o->path && *o->path ? o->path : DSL_TEXT_DIR;
    uint8_t *bytes;
    size_t n, nfiles;
    int r = dsl_text_read(path, &bytes, &n, &nfiles, err);
    if (r == -ENOENT && !strcmp(path, DSL_TEXT_DIR))
        return dsl_seterr(err, r, "text data '%s' not found (apt-get install fortunes, or "
                          "set \"dstrain\": {\"data\": {\"path\": ...}})", path);
    if (r < 0)
        return r;
    if (o->vocab < 256) {
        free(bytes);
        return dsl_seterr(err, DSL_ECONFIG, "text data is bytes: it needs a vocabulary of at "
                          "least 256, the model has %zu", o->vocab);
    }
    /* the last val_fraction for validation, as int(len * 0.9) in Python */
    size_t split = (size_t)((double)n * (1.0 - o->val_fraction));
    uint16_t *tr = malloc((split ? split : 1) * 2), *te = malloc((n - split + 1) * 2);
    if (!tr || !te) {
        free(bytes);
        free(tr);
        free(te);
        return dsl_seterr(err, -ENOMEM, "text data: cannot allocate %zu tokens", n);
    }
    for (size_t i = 0; i < n; i++)
        (i < split ? tr : te)[i < split ? i : i - split] = bytes[i];
    free(bytes);
    size_t win = o->context + 1, stride = o->stride ? o->stride : o->context;
    char what[DSL_ERR_LEN / 2];
    const char *hint = "lower 'dstrain.model.context', raise 'dstrain.data.val_fraction' or "
                       "give more text";
    snprintf(what, sizeof(what), "text data '%s' (%zu file%s): the training split (the first "
             "%g of %zu bytes) has ", path, nfiles, nfiles == 1 ? "" : "s",
             1.0 - o->val_fraction, n);
    struct dsl_token_run *rtr = NULL, *rte = NULL;
    size_t ktr = 0, kte = 0, ntr = 0, nte = 0;
    add_run(&rtr, &ktr, &ntr, &(struct dsl_token_run){.tok = tr, .n = split});
    add_run(&rte, &kte, &nte, &(struct dsl_token_run){.tok = te, .n = n - split});
    if ((r = lazy_split(train, rtr, ktr, ntr, win, stride, o->vocab, what,
                        "lower 'dstrain.model.context', lower 'dstrain.data.val_fraction' or "
                        "give more text", err)) < 0) {
        dsl_token_runs_release(rte, kte);
        return r;
    }
    snprintf(what, sizeof(what), "text data '%s' (%zu file%s): the validation split (the last "
             "%g of %zu bytes) has ", path, nfiles, nfiles == 1 ? "" : "s", o->val_fraction,
             n);
    if ((r = lazy_split(test, rte, kte, nte, win, win - 1, o->vocab, what, hint, err)) < 0)
        return r;
    train->byte_level = test->byte_level = 1;
    return 0;
}

static int keep_bin(const char *name, const void *arg)
{
    (void)arg;
    return ends_with(name, ".bin");
}

/* w occurs in name as a word of its own: no letter just before or after it */
static int has_word(const char *name, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(name, w); p; p = strstr(p + 1, w)) {
        int before = p > name && isalpha((unsigned char)p[-1]);
        int after = isalpha((unsigned char)p[n]);
        if (!before && !after)
            return 1;
    }
    return 0;
}

/* the split a shard's name gives it: "train", "val", NULL for neither; a name holding
   both (interval_train.bin) goes where its word of its own says, and with both or
   neither of them words (trainval.bin) it is ambiguous: *ambiguous set */
const char *dsl_tokens_split_of(const char *name, int *ambiguous)
{
    int tr = strstr(name, "train") != NULL, va = strstr(name, "val") != NULL;
    *ambiguous = 0;
    if (tr != va)
        return tr ? "train" : "val";
    if (!tr)
        return NULL;
    int wt = has_word(name, "train"), wv = has_word(name, "val");
    if (wt != wv)
        return wt ? "train" : "val";
    *ambiguous = 1;
    return NULL;
}

/* the shard at path as a run: mapped read-only where the file's little-endian uint16
   are this machine's, else read and converted (dsl_tokens_read) */
static int map_shard(const char *path, struct dsl_token_run *run, char *err)
{
    memset(run, 0, sizeof(*run));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    size_t fsize;
    uint64_t n = 0;
    int fd = open_shard(path, &fsize, &n, err);
    if (fd < 0)
        return fd;
    if (!n) {
        close(fd);
        return 0;
    }
    void *m = mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return dsl_seterr(err, -e, "token shard '%s': cannot map its %zu bytes: %s", path,
                          fsize, strerror(e));
    run->tok = (const uint16_t *)((const uint8_t *)m + DSL_TOKENS_HEADER);
    run->n = n;
    run->map = m;
    run->maplen = fsize;
    return 0;
#else
    uint16_t *t;
    int r = dsl_tokens_read(path, &t, &run->n, err);
    run->tok = t;
    return r;
#endif
}

/* every shard of dir whose name holds which ("train", "val"), in name order, as runs */
static int read_shards(const char *dir, const char *which, struct dsl_token_run **out,
                       size_t *nruns, size_t *n, size_t *nfiles, char *err)
{
    char **names = NULL;
    size_t k = 0;
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return dsl_seterr(err, DSL_EDATA,
                          "token data '%s' is a file, not a directory: give the directory that "
                          "holds the *train*.bin and *val*.bin shards",
                          dir);
    if (strpbrk(dir, "*?[") && access(dir, F_OK) != 0)
        return dsl_seterr(err, DSL_EDATA,
                          "token data '%s': no such directory (a pattern is not expanded: give "
                          "the directory that holds the *train*.bin and *val*.bin shards)",
                          dir);
    int r = list_dir(dir, keep_bin, NULL, 1, &names, &k, NULL, err);
    if (r < 0)
        return r;
    size_t kept = 0;
    for (size_t i = 0; i < k; i++) {
        int amb;
        const char *base = names[i] + strlen(dir) + 1, *s = dsl_tokens_split_of(base, &amb);
        if (amb) {
            r = dsl_seterr(err, DSL_EDATA,
                           "token data '%s': shard '%s' holds both \"train\" and \"val\" in "
                           "its name, neither as a word of its own (as in llm.c's "
                           "x_train_000001.bin): rename it",
                           dir, base);
            for (size_t j = kept; j < i; j++) /* [0, kept) and [i, k) are still held */
                names[j] = NULL;
            free_names(names, k);
            return r;
        }
        if (s && !strcmp(s, which))
            names[kept++] = names[i];
        else
            free(names[i]);
    }
    k = kept;
    if (!k) {
        free_names(names, k);
        return dsl_seterr(err, DSL_EDATA,
                          "token data '%s': no shard named *%s*.bin (write them with dstrain "
                          "tokenize, or llm.c's dev/data scripts)",
                          dir, which);
    }
    struct dsl_token_run *runs = NULL;
    size_t total = 0, kr = 0;
    for (size_t i = 0; i < k; i++) {
        struct dsl_token_run run;
        if ((r = map_shard(names[i], &run, err)) < 0)
            break;
        add_run(&runs, &kr, &total, &run);
    }
    free_names(names, k);
    if (r < 0) {
        dsl_token_runs_release(runs, kr);
        return r;
    }
    *out = runs;
    *nruns = kr;
    *n = total;
    *nfiles = k;
    return 0;
}

int dsl_data_load_tokens(struct dsl_dataset *train, struct dsl_dataset *test,
                         const struct dsl_data_opts *o, char *err)
{
    if (!o->path || !*o->path)
        return dsl_seterr(err, DSL_ECONFIG, "dataset 'tokens' needs \"dstrain\": {\"data\": "
                          "{\"path\": DIR}}, a directory of *train*.bin and *val*.bin shards");
    struct dsl_token_run *tr = NULL, *te = NULL;
    size_t ktr = 0, kte = 0, ntr, nte, ftr, fte;
    char what[DSL_ERR_LEN / 2];
    const char *hint = "lower 'dstrain.model.context' or give more tokens";
    int r = read_shards(o->path, "train", &tr, &ktr, &ntr, &ftr, err);
    if (r < 0)
        return r;
    if ((r = read_shards(o->path, "val", &te, &kte, &nte, &fte, err)) < 0 ||
        (r = check_vocab(tr, ktr, o->vocab, "training shards", err)) < 0 ||
        (r = check_vocab(te, kte, o->vocab, "validation shards", err)) < 0) {
        dsl_token_runs_release(tr, ktr);
        dsl_token_runs_release(te, kte);
        return r;
    }
    size_t win = o->context + 1, stride = o->stride ? o->stride : o->context;
    snprintf(what, sizeof(what), "training shards of '%s' (%zu file%s): ", o->path, ftr,
             ftr == 1 ? "" : "s");
    if ((r = lazy_split(train, tr, ktr, ntr, win, stride, o->vocab, what, hint, err)) < 0) {
        dsl_token_runs_release(te, kte);
        return r;
    }
    snprintf(what, sizeof(what), "validation shards of '%s' (%zu file%s): ", o->path, fte,
             fte == 1 ? "" : "s");
    if ((r = lazy_split(test, te, kte, nte, win, win - 1, o->vocab, what, hint, err)) < 0)
        return r;
    train->byte_level = test->byte_level = o->vocab == 256;
    return 0;
}
