/*
 * `dstrain sample`: what a trained GPT has learned, as text.
 *
 *   dstrain sample --checkpoint DIR|FILE [--tag T] [--prompt TEXT] [--tokens N]
 *                  [--temperature X] [--seed S] [--encoder F --bpe F]
 *
 * DIR is the checkpoint directory or one tag's directory in it (ck/global_step40);
 * FILE is `dstrain consolidate`'s output, which carries the same metadata.
 *
 * Loads the checkpoint's parameters (the shape from its "gpt" metadata: layers, dim,
 * heads, context, vocab), feeds the prompt's tokens and draws N tokens one at a time
 * from softmax(logits / X) (X 0: the most likely one), the last `context` tokens as
 * the window. Prints the prompt and the continuation, bytes as they are. A seed makes
 * the draw repeatable.
 *
 * Tokens are bytes (the byte-level vocabulary), or GPT-2 BPE ids when --encoder and
 * --bpe name the files the training shards were made with (bpe.c): the checkpoint
 * does not record its data's tokenizer, so a vocabulary beyond 256 without them is an
 * error rather than a page of question marks. A model trained on bytes (text data,
 * byte shards) says so in its metadata (gpt_tokens=bytes), whatever its vocabulary:
 * then bytes are drawn and the BPE files refused.
 */
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "checkpoint.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/banned.h"

struct sample_args {
    char *dir, *tag, *prompt, *temp, *encoder, *bpe;
    int tokens, seed, allow_unverified;
};

static const struct dsl_opt sample_opts[] = {
    {"checkpoint", 0, DSL_OPT_STRING, offsetof(struct sample_args, dir), "DIR|FILE",
     "the checkpoint directory (dstrain.checkpoint_dir), one tag's directory in it, or "
     "dstrain consolidate's file", NULL, 0, 0, NULL, 0, NULL},
    {"tag", 0, DSL_OPT_STRING, offsetof(struct sample_args, tag), "TAG",
     "the checkpoint to read", "latest", 0, 0, NULL, 0, NULL},
    {"prompt", 0, DSL_OPT_STRING, offsetof(struct sample_args, prompt), "TEXT",
     "the text to continue", "a newline", 0, 0, NULL, 0, NULL},
    {"tokens", 0, DSL_OPT_INT, offsetof(struct sample_args, tokens), "N",
     "tokens to draw", "200", 1, 1000000, NULL, 0, NULL},
    {"temperature", 0, DSL_OPT_STRING, offsetof(struct sample_args, temp), "X",
     "softmax temperature (0: always the most likely token)", "0.8", 0, 0, NULL, 0, NULL},
    {"seed", 0, DSL_OPT_INT, offsetof(struct sample_args, seed), "S", "random seed", "1",
     0, 1000000000, NULL, 0, NULL},
    {"encoder", 0, DSL_OPT_STRING, offsetof(struct sample_args, encoder), "FILE",
     "GPT-2's encoder.json (or .gz) the shards were made with: BPE ids, with --bpe", NULL,
     0, 0, NULL, 0, NULL},
    {"bpe", 0, DSL_OPT_STRING, offsetof(struct sample_args, bpe), "FILE",
     "GPT-2's vocab.bpe (or .gz), with --encoder", NULL, 0, 0, NULL, 0, NULL},
    {"allow_unverified_checkpoint", 0, DSL_OPT_FLAG,
     offsetof(struct sample_args, allow_unverified), NULL,
     "read a checkpoint whose files carry no checksums", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser sample_parser = {
    .prog = "dstrain sample",
    .opts = sample_opts,
    .nopts = sizeof(sample_opts) / sizeof(sample_opts[0]),
};

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* the next token from logits (V of them) at temperature temp */
static int32_t draw(const float *logits, size_t V, double temp, uint64_t *s)
{
    size_t am = 0;
    for (size_t k = 1; k < V; k++)
        if (logits[k] > logits[am])
            am = k;
    if (temp <= 0.0)
        return (int32_t)am;
    double sum = 0.0, u = (double)(rng(s) >> 11) / 9007199254740992.0;
    for (size_t k = 0; k < V; k++)
        sum += exp(((double)logits[k] - logits[am]) / temp);
    double acc = 0.0;
    for (size_t k = 0; k < V; k++) {
        acc += exp(((double)logits[k] - logits[am]) / temp) / sum;
        if (u < acc)
            return (int32_t)k;
    }
    return (int32_t)am;
}

/* Opens a->dir with its caveat warned; on an error c is released (or never loaded). */
static int open_ckpt(const struct sample_args *a, struct dsl_ckpt *c, char *err)
{
    unsigned fl = a->allow_unverified ? DSL_CKPT_ALLOW_UNVERIFIED : 0;
    struct stat st;
    int r;
    /* the checkpoint directory, one tag's directory in it, or one file of parameters
       (`dstrain consolidate`'s model.safetensors) */
    if (stat(a->dir, &st) == 0 && S_ISREG(st.st_mode)) {
        if (a->tag)
            return dsl_seterr(err, DSL_EUSAGE,
                              "dstrain sample: '%s' is a file of parameters, not a checkpoint "
                              "directory: leave out --tag",
                              a->dir);
        r = dsl_ckpt_load_file(c, a->dir, fl, err);
    } else {
        r = dsl_ckpt_load_params(c, a->dir, a->tag, fl | DSL_CKPT_STEP_DIR, err);
    }
    if (r < 0) {
        dsl_ckpt_release(c);
        return r;
    }
    char why[DSL_ERR_LEN];
    if (dsl_ckpt_caveat(c, why, sizeof(why)))
        dsl_warn("%s", why);
    return r;
}

/* The prompt's tokens, then a->tokens more drawn one by one, printed as they come. */
static int generate(const struct sample_args *a, struct dsl_model *m, const struct dsl_ckpt *c,
                    const struct dsl_model_spec *sp, struct dsl_bpe *bpe, int bytes,
                    double temp, char *err)
{
    int r = 0;
    const char *prompt = a->prompt && *a->prompt ? a->prompt : "\n";
    size_t np = strlen(prompt), T = sp->gpt.context;
    uint16_t *ptok = NULL;
    if (bpe)
        ptok = dsl_bpe_encode(bpe, (const uint8_t *)prompt, np, &np);
    for (size_t i = 0; !ptok && i < np; i++)
        if ((unsigned char)prompt[i] >= sp->out_dim) { /* bytes, a vocabulary below 256 */
            r = dsl_seterr(err, DSL_EUSAGE,
                           "dstrain sample: the prompt's byte 0x%02x at offset %zu is outside "
                           "the vocabulary of %zu of checkpoint '%s': give a prompt of the "
                           "bytes below %zu, the ids it was trained on",
                           (unsigned char)prompt[i], i, sp->out_dim, c->path, sp->out_dim);
            return r;
        }
    size_t total = np + (size_t)a->tokens;
    int32_t *tok = dsl_xmalloc(total * sizeof(int32_t));
    float *logits = dsl_xmalloc(sp->out_dim * sizeof(float));
    for (size_t i = 0; i < np; i++)
        tok[i] = ptok ? ptok[i] : (unsigned char)prompt[i];
    free(ptok);
    uint64_t s = (uint64_t)a->seed;
    fputs(prompt, stdout);
    for (size_t n = np; n < total; n++) {
        size_t w = n < T ? n : T;
        if ((r = dsl_model_next_logits(m, c->params, tok + n - w, w, logits)) < 0) {
            dsl_seterr(err, r, "%s", m->err);
            break;
        }
        /* bytes: only the ids the data had (a larger vocabulary's rest never occurs) */
        tok[n] = draw(logits, bytes && sp->out_dim > 256 ? 256 : sp->out_dim, temp, &s);
        if (bpe) {
            size_t l;
            const uint8_t *p = dsl_bpe_token(bpe, (size_t)tok[n], &l);
            if (p) /* an id beyond encoder.json (a padded vocabulary) prints nothing */
                fwrite(p, 1, l, stdout);
        } else {
            putchar(tok[n]);
        }
        fflush(stdout);
    }
    putchar('\n');
    free(tok);
    free(logits);
    return r;
}

static int run(const struct sample_args *a, char *err)
{
    double temp = 0.8;
    if (!a->dir)
        return dsl_seterr(err, DSL_EUSAGE, "dstrain sample: --checkpoint DIR is required");
    if (!a->encoder != !a->bpe)
        return dsl_seterr(err, DSL_EUSAGE, "dstrain sample: GPT-2's BPE needs both --encoder "
                          "encoder.json and --bpe vocab.bpe");
    if (a->temp && (dsl_parse_double(a->temp, &temp) < 0 || !(temp >= 0.0 && temp <= 100.0)))
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--temperature' must be a number from 0 to 100, got '%s'",
                          a->temp);
    struct dsl_ckpt c;
    int r;
    if ((r = open_ckpt(a, &c, err)) < 0)
        return r;
    struct dsl_model_spec sp = {.type = "gpt", .max_batch = 1};
    size_t g[5];
    if (dsl_ckpt_meta_sizes(&c, "gpt", g, 5, NULL) < 0) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint '%s' holds no GPT (no \"gpt\" metadata): sample needs a "
                       "checkpoint of dstrain.model.type \"gpt\"",
                       c.path);
        dsl_ckpt_release(&c);
        return r;
    }
    sp.gpt.layers = g[0];
    sp.gpt.dim = g[1];
    sp.gpt.heads = g[2];
    sp.gpt.context = g[3];
    sp.out_dim = g[4];
    sp.in_dim = sp.gpt.context + 1;
    struct dsl_bpe bpe;
    int have_bpe = 0;
    /* trained on bytes (text, byte shards): recorded since the vocabulary can be larger */
    const char *kind = dsl_ckpt_meta(&c, "gpt_tokens");
    int bytes = kind && !strcmp(kind, "bytes");
    struct dsl_model m;
    if ((r = dsl_model_create(&m, &sp, err)) < 0) {
        dsl_ckpt_release(&c);
        return r;
    }
    if (m.nparams != c.numel) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s': %zu parameters, its GPT has %zu",
                       c.path, c.numel, m.nparams);
        goto out;
    }
    if (a->encoder && bytes) {
        r = dsl_seterr(err, DSL_EUSAGE,
                       "checkpoint '%s' was trained on bytes (its data was text or byte "
                       "shards): leave out --encoder and --bpe",
                       c.path);
        goto out;
    }
    if (a->encoder) {
        if ((r = dsl_bpe_load(&bpe, a->encoder, a->bpe, err)) < 0)
            goto out;
        have_bpe = 1;
        if (bpe.nvocab > sp.out_dim) {
            r = dsl_seterr(err, DSL_EUSAGE,
                           "checkpoint '%s': its GPT's vocabulary is %zu, but '%s' has ids up "
                           "to %zu: it was not trained on shards of these files",
                           c.path, sp.out_dim, a->encoder, bpe.nvocab - 1);
            goto out;
        }
    } else if (sp.out_dim > 256 && !bytes) {
        r = dsl_seterr(err, DSL_EUSAGE,
                       "checkpoint '%s': its GPT's vocabulary is %zu, not bytes: give "
                       "--encoder and --bpe, the files its token shards were made with "
                       "(dstrain tokenize --encoder --bpe)",
                       c.path, sp.out_dim);
        goto out;
    }
    r = generate(a, &m, &c, &sp, have_bpe ? &bpe : NULL, bytes, temp, err);
out:
    if (have_bpe)
        dsl_bpe_release(&bpe);
    dsl_model_release(&m);
    dsl_ckpt_release(&c);
    return r < 0 ? r : 0;
}

int dsl_train_sample_main(int argc, char **argv, char *err)
{
    struct sample_args a = {NULL, NULL, NULL, NULL, NULL, NULL, 200, 1, 0};
    if (dsl_opt_help_if_asked(&sample_parser,
                              "usage: dstrain sample --checkpoint DIR|FILE [--prompt TEXT] "
                              "[--tokens N] [--temperature X] [--encoder encoder.json --bpe "
                              "vocab.bpe]",
                              argc, argv, stdout))
        return 0;
    int r = dsl_opt_parse(&sample_parser, &a, argc, argv, NULL, err);
    if (r == 0)
        r = run(&a, err);
    free(a.dir);
    free(a.tag);
    free(a.prompt);
    free(a.temp);
    free(a.encoder);
    free(a.bpe);
    return r;
}
