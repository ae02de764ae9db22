/*
 * `dstrain tokenize`: text files into llm.c token shards (data.h), so that a corpus
 * is prepared once and trains as dataset "tokens", here or in llm.c itself.
 *
 *   dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F]
 *                    [--encoder encoder.json --bpe vocab.bpe] PATH...
 *
 * Every PATH is a text file or a directory of them (dsl_text_read: regular files, no
 * links, no fortune ".dat" indexes, in name order); their bytes are concatenated in the
 * order given, with nothing between files. The last F of the bytes (0.1) are the
 * validation split, the split that dataset "text" makes of the same files. Without
 * --encoder the bytes are the tokens (the byte-level vocabulary of 256); with
 * --encoder and --bpe each split is encoded with GPT-2's BPE (bpe.c) on its own.
 * The splits go to DIR/NAME_val.bin and DIR/NAME_train.bin (DIR made if missing);
 * text too short to give both splits a byte is refused and nothing is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bpe.h"

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/data.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/banned.h"

struct tokenize_args {
    char *out, *name, *val, *encoder, *bpe;
};

static const struct dsl_opt tokenize_opts[] = {
    {"out", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, out), "DIR",
     "the directory to write the shards to", ".", 0, 0, NULL, 0, NULL},
    {"name", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, name), "NAME",
     "the shards' names: NAME_train.bin and NAME_val.bin", "text", 0, 0, NULL, 0, NULL},
    {"val_fraction", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, val), "F",
     "the last fraction of the bytes that is validation", "0.1", 0, 0, NULL, 0, NULL},
    {"encoder", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, encoder), "FILE",
     "GPT-2's encoder.json (or .json.gz): BPE instead of bytes, with --bpe", NULL, 0, 0,
     NULL, 0, NULL},
    {"bpe", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, bpe), "FILE",
     "GPT-2's vocab.bpe (or .bpe.gz), with --encoder", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser tokenize_parser = {
    .prog = "dstrain tokenize",
    .opts = tokenize_opts,
    .nopts = sizeof(tokenize_opts) / sizeof(tokenize_opts[0]),
};

static int run(const struct tokenize_args *a, const struct dsl_strvec *paths, char *err)
{
    double frac = DSL_CFG_VAL_FRACTION;
    if (a->val && (dsl_parse_double(a->val, &frac) < 0 || !(frac > 0.0 && frac < 1.0)))
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--val_fraction' must be a number above 0 and below 1, got '%s'",
                          a->val);
    const char *dir = a->out ? a->out : ".", *name = a->name ? a->name : "text";
    for (int k = 0; k < 2; k++) { /* the names must say their split to dataset "tokens" */
        const char *want = k ? "val" : "train", *got;
        char *base = dsl_xasprintf("%s_%s.bin", name, want);
        const char *slash = strrchr(base, '/');
        int amb;
        got = dsl_tokens_split_of(slash ? slash + 1 : base, &amb);
        if (!got || strcmp(got, want)) {
            int e = dsl_seterr(err, DSL_EUSAGE,
                               "dstrain tokenize: --name '%s' makes '%s', which dataset "
                               "\"tokens\" would not read as the %s split: choose a name "
                               "without \"train\" or \"val\" as a word",
                               name, base, k ? "validation" : "training");
            free(base);
            return e;
        }
        free(base);
    }
    struct stat so, sp;
    for (size_t i = 0; stat(dir, &so) == 0 && i < paths->nr; i++)
        if (stat(paths->v[i], &sp) == 0 && S_ISDIR(sp.st_mode) && sp.st_dev == so.st_dev &&
            sp.st_ino == so.st_ino) /* every regular file of it is text: shards too */
            return dsl_seterr(err, DSL_EUSAGE,
                              "dstrain tokenize: --out '%s' is the directory '%s' it reads: its "
                              "shards would be read as text the next time; give --out another "
                              "directory",
                              dir, paths->v[i]);
    uint8_t *all = NULL;
    size_t n = 0, files = 0;
    int r = 0;
    for (size_t i = 0; i < paths->nr; i++) {
        uint8_t *b;
        size_t len, nf;
        if ((r = dsl_text_read(paths->v[i], &b, &len, &nf, err)) < 0)
            goto out;
        all = dsl_xrealloc(all, n + len + 1);
        memcpy(all + n, b, len);
        free(b);
        n += len;
        files += nf;
    }
    size_t split = (size_t)((double)n * (1.0 - frac)), ntr = split, nva = n - split;
    if (n == 0) {
        r = dsl_seterr(err, DSL_EDATA, "dstrain tokenize: no text: %zu file%s of 0 bytes",
                       files, files == 1 ? "" : "s");
        goto out;
    }
    if (split == 0 || split == n) {
        r = dsl_seterr(err, DSL_EDATA,
                       "dstrain tokenize: %zu byte%s of text: too few to split into training "
                       "and validation at --val_fraction %s",
                       n, n == 1 ? "" : "s", a->val ? a->val : "0.1");
        goto out;
    }
    uint16_t *tr = NULL, *va = NULL;
    struct dsl_bpe bpe;
    char vocab[160];
    if (a->encoder) {
        if ((r = dsl_bpe_load(&bpe, a->encoder, a->bpe, err)) < 0)
            goto out;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tr = dsl_bpe_encode(&bpe, all, split, &ntr);
        va = dsl_bpe_encode(&bpe, all + split, n - split, &nva);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        snprintf(vocab, sizeof(vocab),
                 "GPT-2 BPE vocabulary %zu (%.2f bytes/token, encoded at %.1f MB/s)",
                 bpe.nvocab, (double)n / (double)(ntr + nva ? ntr + nva : 1),
                 s > 0 ? (double)n / s / 1e6 : 0.0);
        dsl_bpe_release(&bpe);
    } else {
        tr = dsl_xmalloc((split + 1) * sizeof(uint16_t));
        va = dsl_xmalloc((n - split + 1) * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++)
            (i < split ? tr : va)[i < split ? i : i - split] = all[i];
        snprintf(vocab, sizeof(vocab), "byte-level vocabulary 256");
    }
    if ((r = dsl_dir_make_all(dir)) < 0) {
        dsl_seterr(err, r, "dstrain tokenize: cannot make the directory '%s' (--out): %s", dir,
                   strerror(-r));
        free(tr);
        free(va);
        goto out;
    }
    char *ptr = dsl_xasprintf("%s/%s_train.bin", dir, name);
    char *pva = dsl_xasprintf("%s/%s_val.bin", dir, name);
    if ((r = dsl_tokens_write(ptr, tr, ntr, err)) >= 0 &&
        (r = dsl_tokens_write(pva, va, nva, err)) >= 0)
        printf("dstrain: %zu bytes of %zu file%s: wrote '%s' (%zu token%s) and '%s' (%zu "
               "token%s), %s\n",
               n, files, files == 1 ? "" : "s", ptr, ntr, ntr == 1 ? "" : "s", pva, nva,
               nva == 1 ? "" : "s", vocab);
    free(ptr);
    free(pva);
    free(tr);
    free(va);
out:
    free(all);
    return r;
}

int dsl_train_tokenize_main(int argc, char **argv, char *err)
{
    struct tokenize_args a = {NULL, NULL, NULL, NULL, NULL};
    struct dsl_strvec paths;
    dsl_strvec_init(&paths);
    static const char usage[] = "usage: dstrain tokenize [--out DIR] [--name NAME] "
                                "[--val_fraction F] [--encoder encoder.json --bpe vocab.bpe] "
                                "PATH...";
    if (dsl_opt_help_if_asked(&tokenize_parser, usage, argc, argv, stdout))
        return 0;
    int r = dsl_opt_parse(&tokenize_parser, &a, argc, argv, &paths, err);
    if (r == 0 && paths.nr == 0)
        r = dsl_seterr(err, DSL_EUSAGE, "%s", usage);
    else if (r == 0 && !a.encoder != !a.bpe)
        r = dsl_seterr(err, DSL_EUSAGE, "dstrain tokenize: GPT-2's BPE needs both --encoder "
                       "encoder.json and --bpe vocab.bpe");
    if (r == 0)
        r = run(&a, &paths, err);
    free(a.out);
    free(a.name);
    free(a.val);
    free(a.encoder);
    free(a.bpe);
    dsl_strvec_release(&paths);
    return r;
}
