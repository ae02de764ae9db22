/*
 * libFuzzer target: a whole checkpoint directory as dstrain's resume reads it
 * (dsl_ckpt_load with the tag of `latest`). The input is cut at every "\n--8<--\n" into
 * the files of <dir>: `latest`, then global_step1/mp_rank_00_model_states.safetensors,
 * then global_step1/zero_pp_rank_<r>_mp_rank_00_optim_states.safetensors for r = 0, 1,
 * ...(at most 4); a file the input stops before is missing. Files without checksums
 * load with DSL_CKPT_ALLOW_UNVERIFIED, so the fuzzer reaches the checks across files:
 * the tag, the metadata every file must share, the world size, the shards' coverage,
 * the values' finiteness. Without the flag the same input loads only if every file
 * carried a checksum, and then to the same checkpoint.
 * A load either fails with a message or gives a checkpoint that agrees with itself:
 * its views tile its parameters (dsl_ckpt_check_params with its own views), every
 * state vector is there. The metadata the trainer reads back when it resumes goes
 * through its readers too: the step and global batch (dsl_ckpt_meta_u64), dstrain
 * sample's GPT sizes (dsl_ckpt_meta_sizes: what parses prints back the same) and the loss
 * scaler's state (dsl_lossscale_restore), which, when it reads, formats and reads back
 * to the same state. The same files are then read as `dstrain sample` and `consolidate`
 * may: the tag's directory named itself (DSL_CKPT_STEP_DIR), and the model file alone
 * (dsl_ckpt_load_file, as for consolidate's output). Nothing leaks, whatever fails where.
 */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "train/checkpoint.h"
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NFILES 6 /* latest, the model file, 4 shards */

static char dir[64], tagdir[96], files[NFILES][200];

static void remove_all(void)
{
    for (int i = 0; i < NFILES; i++)
        unlink(files[i]);
    rmdir(tagdir);
    rmdir(dir);
}

static void setup(void)
{
    fuzz_ckpt_dirs("ckpt", dir, sizeof(dir), tagdir, sizeof(tagdir));
    snprintf(files[0], sizeof(files[0]), "%s/latest", dir);
    snprintf(files[1], sizeof(files[1]), "%s/" DSL_CKPT_MODEL_FILE, tagdir);
    for (int r = 0; r < NFILES - 2; r++)
        snprintf(files[2 + r], sizeof(files[2 + r]),
                 "%s/zero_pp_rank_%d_mp_rank_00_optim_states.safetensors", tagdir, r);
    atexit(remove_all);
}

/* what the trainer reads from a loaded checkpoint's metadata when it resumes */
static void resume_meta(const struct dsl_ckpt *c)
{
    char err[DSL_ERR_LEN] = "", buf[256];
    uint64_t u;
    if (dsl_ckpt_meta_u64(c, "step", &u, err) < 0 && !err[0])
        abort();
    (void)dsl_ckpt_meta_u64(c, "global_batch", &u, NULL);
    size_t gpt[5];
    if (dsl_ckpt_meta_sizes(c, "gpt", gpt, 5, NULL) == 0) { /* dstrain sample's model */
        int n = snprintf(buf, sizeof(buf), "%zu,%zu,%zu,%zu,%zu", gpt[0], gpt[1], gpt[2],
                         gpt[3], gpt[4]);
        if (n < 0 || (size_t)n >= sizeof(buf) || strcmp(buf, dsl_ckpt_meta(c, "gpt")) != 0)
            abort(); /* what parses is exactly its numbers, written as the trainer does */
    }
    const char *v = dsl_ckpt_meta(c, "lossscale");
    struct dsl_lossscale a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (!v || dsl_lossscale_restore(&a, v, err) < 0)
        return;
    if (dsl_lossscale_format(&a, buf, sizeof(buf)) >= (int)sizeof(buf) ||
        dsl_lossscale_restore(&b, buf, err) < 0 || a.cur_scale != b.cur_scale ||
        a.cur_iter != b.cur_iter || a.last_overflow_iter != b.last_overflow_iter ||
        a.cur_hysteresis != b.cur_hysteresis || a.skipped != b.skipped)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    fuzz_write_parts(data, size, files[0], sizeof(files[0]), NFILES);
    struct dsl_ckpt c;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_ckpt_load(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err);
    if (r < 0 && !err[0])
        abort();
    struct dsl_ckpt strict;
    char err2[DSL_ERR_LEN] = "";
    int r2 = dsl_ckpt_load(&strict, dir, NULL, 0, err2);
    if (r2 < 0 && !err2[0])
        abort();
    if (r < 0 ? r2 == 0 : (r2 == 0) != (c.unverified == NULL))
        abort(); /* the flag only adds files without checksums */
    if (r2 == 0 && (strict.numel != c.numel ||
                    (c.numel && memcmp(strict.params, c.params, c.numel * sizeof(float)))))
        abort();
    dsl_ckpt_release(&strict);
    if (r == 0) {
        if (!c.params || !c.tag || c.saved_world < 1 || c.nstate > DSL_CKPT_MAX_STATE)
            abort();
        for (size_t i = 0; i < c.numel; i++)
            if (!isfinite(c.params[i]))
                abort(); /* never loaded */
        if (dsl_ckpt_check_params(&c, c.views, c.nviews, c.numel, err) != 0)
            abort();
        for (size_t i = 0; i < c.nstate; i++)
            if (!c.state_names[i] || !c.state[i])
                abort();
        resume_meta(&c);
    }
    dsl_ckpt_release(&c);
    /* the readers of a finished checkpoint: the tag's directory named itself (read as
     * that tag of its parent, as `latest` names it or not), and the model file on its
     * own as `dstrain sample` reads consolidate's output */
    struct dsl_ckpt d;
    char err3[DSL_ERR_LEN] = "";
    r = dsl_ckpt_load_params(&d, tagdir, NULL, DSL_CKPT_ALLOW_UNVERIFIED | DSL_CKPT_STEP_DIR,
                             err3);
    if (r < 0 && !err3[0])
        abort();
    dsl_ckpt_release(&d);
    err3[0] = '\0';
    r = dsl_ckpt_load_file(&d, files[1], DSL_CKPT_ALLOW_UNVERIFIED, err3);
    if (r < 0 && !err3[0])
        abort();
    if (r == 0) {
        for (size_t i = 0; i < d.numel; i++)
            if (!isfinite(d.params[i]))
                abort();
        if (dsl_ckpt_check_params(&d, d.views, d.nviews, d.numel, err3) != 0)
            abort();
        resume_meta(&d);
    }
    dsl_ckpt_release(&d);
    return 0;
}
