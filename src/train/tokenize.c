/*
 * `dstrain tokenize`: text files into llm.c token shards (data.h), so that a corpus
 * is prepared once and trains as dataset "tokens", here or in llm.c itself.
 *
 *   dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F] PATH...
 *
 * Every PATH is a text file or a directory of them (dsl_text_read: regular files, no
 * links, no fortune ".dat" indexes, in name order); their bytes, concatenated in the
 * order given, are the tokens (the byte-level vocabulary of 256). The last F of them
 * (0.1) go to DIR/NAME_val.bin, the rest to DIR/NAME_train.bin, the split that dataset
 * "text" makes of the same files. GPT-2's BPE is not implemented.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/data.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/banned.h"

struct tokenize_args {
    char *out, *name, *val;
};

static const struct dsl_opt tokenize_opts[] = {
    {"out", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, out), "DIR",
     "the directory to write the shards to", ".", 0, 0, NULL, 0, NULL},
    {"name", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, name), "NAME",
     "the shards' names: NAME_train.bin and NAME_val.bin", "text", 0, 0, NULL, 0, NULL},
    {"val_fraction", 0, DSL_OPT_STRING, offsetof(struct tokenize_args, val), "F",
     "the last fraction of the bytes that is validation", "0.1", 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser tokenize_parser = {
    .prog = "dstrain tokenize",
    .opts = tokenize_opts,
    .nopts = sizeof(tokenize_opts) / sizeof(tokenize_opts[0]),
};

static int run(const struct tokenize_args *a, const struct dsl_strvec *paths, char *err)
{
    double frac = 0.1;
    if (a->val && (dsl_parse_double(a->val, &frac) < 0 || !(frac > 0.0 && frac < 1.0)))
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--val_fraction' must be a number between 0 and 1, got '%s'",
                          a->val);
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
    uint16_t *tok = dsl_xmalloc((n + 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        tok[i] = all[i];
    size_t split = (size_t)((double)n * (1.0 - frac));
    const char *dir = a->out ? a->out : ".", *name = a->name ? a->name : "text";
    char *ptr = dsl_xasprintf("%s/%s_train.bin", dir, name);
    char *pva = dsl_xasprintf("%s/%s_val.bin", dir, name);
    if ((r = dsl_tokens_write(ptr, tok, split, err)) >= 0 &&
        (r = dsl_tokens_write(pva, tok + split, n - split, err)) >= 0)
        printf("dstrain: %zu bytes of %zu files: wrote '%s' (%zu tokens) and '%s' (%zu "
               "tokens), byte-level vocabulary 256\n",
               n, files, ptr, split, pva, n - split);
    free(ptr);
    free(pva);
    free(tok);
out:
    free(all);
    return r;
}

int dsl_train_tokenize_main(int argc, char **argv, char *err)
{
    struct tokenize_args a = {NULL, NULL, NULL};
    struct dsl_strvec paths;
    dsl_strvec_init(&paths);
    int r = dsl_opt_parse(&tokenize_parser, &a, argc, argv, &paths, err);
    if (r == 0 && paths.nr == 0)
        r = dsl_seterr(err, DSL_EUSAGE,
                       "usage: dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F] "
                       "PATH...");
    if (r == 0)
        r = run(&a, &paths, err);
    free(a.out);
    free(a.name);
    free(a.val);
    dsl_strvec_release(&paths);
    return r;
}
