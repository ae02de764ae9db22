/*
 * libFuzzer target: a ZeRO stage 3 checkpoint directory (checkpoint.h: per-rank
 * parameter shards with dsl.shard_ranges and dsl.views, no model file). The input is
 * cut at every "\n--8<--\n" into the files of <dir>: `latest`, then for r = 0, 1, 2
 * global_step1/zero_pp_rank_<r>_mp_rank_00_model_states.safetensors and
 * ..._optim_states.safetensors; a file the input stops before is missing. The
 * directory is loaded whole as a resume does (dsl_ckpt_load, with and without
 * DSL_CKPT_ALLOW_UNVERIFIED) and consolidated as `dstrain consolidate` streams it,
 * in fp32 and in bf16. Either fails with a message or gives something that agrees with
 * itself: the views tile the parameters, every value finite, and the streamed file,
 * read back, holds exactly the parameters the whole load found. Nothing leaks and no
 * output is left behind by a consolidation that failed.
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
#include "train/checkpoint.h"
#include "fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NFILES 7 /* latest, 3 ranks' model and optimizer shards */

static char dir[64], tagdir[96], out[128], files[NFILES][200];

static void remove_all(void)
{
    for (int i = 0; i < NFILES; i++)
        unlink(files[i]);
    unlink(out);
    rmdir(tagdir);
    rmdir(dir);
}

static void setup(void)
{
    fuzz_ckpt_dirs("z3", dir, sizeof(dir), tagdir, sizeof(tagdir));
    snprintf(out, sizeof(out), "%s/out.safetensors", dir);
    snprintf(files[0], sizeof(files[0]), "%s/latest", dir);
    for (int i = 1; i < NFILES; i++)
        snprintf(files[i], sizeof(files[i]), "%s/zero_pp_rank_%d_mp_rank_00_%s_states.safetensors",
                 tagdir, (i - 1) / 2, (i - 1) % 2 ? "optim" : "model");
    atexit(remove_all);
}

/* consolidate in fp32: a failure leaves no file; a success reads back as whole's
 * parameters (when the whole load succeeded too) */
static void consolidate(const struct dsl_ckpt *whole, int whole_ok)
{
    struct dsl_ckpt c, f;
    char err[DSL_ERR_LEN] = "";
    struct stat st;
    unlink(out);
    int r = dsl_ckpt_consolidate(&c, dir, NULL, out, DSL_CKPT_ALLOW_UNVERIFIED, err);
    if (r < 0 && (!err[0] || stat(out, &st) == 0))
        abort();
    dsl_ckpt_release(&c);
    if (r < 0)
        return;
    if (dsl_ckpt_load_file(&f, out, 0, err) != 0)
        abort(); /* what it writes, it reads */
    if (whole_ok && (f.numel != whole->numel ||
                     memcmp(f.params, whole->params, f.numel * sizeof(float)) != 0))
        abort();
    dsl_ckpt_release(&f);
    unlink(out);
    r = dsl_ckpt_consolidate_zero3(&c, tagdir, "global_step1", out, DSL_ST_BF16,
                                   DSL_CKPT_ALLOW_UNVERIFIED, err);
    if (r < 0 && (!err[0] || stat(out, &st) == 0))
        abort();
    dsl_ckpt_release(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    fuzz_write_parts(data, size, files[0], sizeof(files[0]), NFILES);
    struct dsl_ckpt c, strict;
    char err[DSL_ERR_LEN] = "", err2[DSL_ERR_LEN] = "";
    int r = dsl_ckpt_load(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err);
    if (r < 0 && !err[0])
        abort();
    int r2 = dsl_ckpt_load(&strict, dir, NULL, 0, err2);
    if (r2 < 0 && !err2[0])
        abort();
    if (r < 0 ? r2 == 0 : (r2 == 0) != (c.unverified == NULL))
        abort(); /* the flag only adds files without checksums */
    dsl_ckpt_release(&strict);
    if (r == 0) {
        if (!c.params || c.saved_world < 1 || c.nstate > DSL_CKPT_MAX_STATE)
            abort();
        for (size_t i = 0; i < c.numel; i++)
            if (!isfinite(c.params[i]))
                abort();
        if (dsl_ckpt_check_params(&c, c.views, c.nviews, c.numel, err) != 0)
            abort();
    }
    consolidate(&c, r == 0);
    dsl_ckpt_release(&c);
    return 0;
}
