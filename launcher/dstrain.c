/*
 * dstrain: the bundled data-parallel trainer (issue 6).
 *
 *   dstrain [--config ds_config.json] [options]     train (alone, or as one rank)
 *   dstrain consolidate <checkpoint dir> [--tag T] [--out FILE]
 *   dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F]
 *                    [--encoder encoder.json --bpe vocab.bpe] PATH...
 *   dstrain sample --checkpoint DIR|FILE [--prompt TEXT] [--tokens N] [--temperature X]
 *                  [--encoder encoder.json --bpe vocab.bpe]
 *   dstrain plot METRICS.jsonl [--width N] [--height N]
 *   dstrain keys [SECTION | --flags]                 the docs' key and flag tables
 *
 * Settings come in layers: built-in defaults, then the DeepSpeed
 * config file with its "dstrain" object, then the flags below (every "dstrain" key has
 * one), then verification. The env contract (RANK, WORLD_SIZE, MASTER_ADDR, ...) is
 * read by the comm; without it dstrain runs alone (world size 1). Started by srun or
 * mpirun instead of dslaunch, their rank variables are first turned into the contract
 * (common/rankenv.h).
 *
 * The backend picks the path: tcp trains on the CPU (OpenBLAS); nccl (or auto on a
 * machine with a GPU per local rank) trains on the CUDA device of the rule in
 * common/gpupick.h (srun's one GPU per task, or LOCAL_RANK) with the CUDA model and the
 * CUDA device, through the same trainer code (docs/trainer.md). A build with CUDA loads
 * the GPU's libraries only then (common/cudalibs.h), so it runs tcp on any node.
 *
 * Die-fast is fine here: the node agent sees the exit status and stops the job. A
 * SIGTERM kills at once, unless --save-on-signal: then SIGTERM, SIGINT and SIGUSR1
 * (Slurm's warning signal) make the ranks agree to stop after the current step, write a
 * checkpoint and exit with 128 + the signal (143, 130, 138; a rank that stopped because
 * another one was signalled: 143); a second SIGTERM or SIGINT exits at once. A repeated
 * SIGUSR1 is the same warning again, not an order: Slurm's warning can reach a rank by
 * two paths at once (the batch shell through dslaunch, and the step's tasks directly,
 * with scancel --full or --signal without B:), and exiting on the second copy left
 * only a partial checkpoint behind while still exiting 138, "saved, requeue me".
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/device/blascore.h"
#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/log.h"
#include "dslaunch/model/model.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/banned.h"

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t stop_sig; /* the first stop signal: the exit code says which */
static const char *blas_note; /* the OpenBLAS kernels were corrected (blascore.h) */

static void on_signal(int sig)
{
    if (stop_flag && sig == SIGUSR1)
        return;
    if (stop_flag)
        _exit(128 + sig);
    stop_sig = sig;
    stop_flag = 1;
}

static int usage(FILE *f)
{
    fprintf(f,
            "usage: dstrain [--config ds_config.json] [options]\n"
            "       dstrain consolidate <checkpoint dir> [--tag TAG] [--out FILE]\n"
            "       dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F]\n"
            "                        [--encoder encoder.json --bpe vocab.bpe] PATH...\n"
            "       dstrain sample --checkpoint DIR|FILE [--prompt TEXT] [--tokens N] "
            "[--temperature X]\n"
            "                      [--encoder encoder.json --bpe vocab.bpe]\n"
            "       dstrain plot METRICS.jsonl [--width N] [--height N]\n"
            "       dstrain keys [SECTION | --flags]\n\n");
    dsl_train_settings_help(f);
    return f == stdout ? 0 : 2;
}

/* OMP_NUM_THREADS if set, else the cores shared fairly among the local ranks */
static int blas_threads(const struct dsl_train_settings *s)
{
    if (s->cfg.dstrain.threads > 0)
        return s->cfg.dstrain.threads;
    if (s->env.omp_threads > 0)
        return s->env.omp_threads;
    return dsl_rankenv_omp_share(sysconf(_SC_NPROCESSORS_ONLN), s->env.local_world_size);
}

/* more compute threads on this node than CPUs: they take turns on the cores, and a
 * step waits for the slowest (once per node, by local rank 0) */
static void warn_oversubscribed(const struct dsl_rankenv *env, int threads)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = env->local_world_size;
    if (env->local_rank != 0)
        return;
    if (cores > 0 && (long)threads * local > cores)
        dsl_warn("%d compute thread%s per rank x %d local rank%s on %ld CPU%s: the threads "
                 "take turns on the cores; --threads 0 (or no OMP_NUM_THREADS) takes a fair "
                 "share", threads, threads == 1 ? "" : "s", local, local == 1 ? "" : "s",
                 cores, cores == 1 ? "" : "s");
}

static int train(struct dsl_train_settings *s)
{
    char err[DSL_ERR_LEN] = "";
    struct dsl_comm *comm = NULL;
    struct dsl_dataset tr = {0}, te = {0};
    struct dsl_model model = {0};
    struct dsl_trainer t = {0};
    struct dsl_run_summary sum;
    struct dsl_device gpu_dev = {0};
    int r, have_trainer = 0, have_gpu = 0;

    const char *backend = dsl_train_settings_backend(s);
    int gpu = s->gpu, device = s->device;
    struct dsl_comm_opts co = {.backend = backend,
                               .deterministic = s->cfg.dstrain.deterministic != 0,
                               .device = gpu ? device : 0,
                               .env = &s->env};
    /* progress heartbeats for the launcher's hang detection (DSLAUNCH_PROGRESS_FILE) */
    if (!dsl_progress_self(err) && *err) {
        dsl_warn("%s; reporting no progress", err);
        *err = '\0';
    }
    if ((r = dsl_comm_open_env(&comm, &co, err)) < 0)
        goto out;
    int rank = dsl_comm_rank(comm), world = dsl_comm_size(comm);
    if ((r = dsl_train_settings_verify(s, rank, world, err)) < 0 ||
        (r = dsl_train_resume_batch(s, rank, err)) < 0)
        goto out;
    int threads = dsl_blas_set_threads(blas_threads(s));
    if ((r = dsl_data_load(&tr, &te, &s->data, err)) < 0)
        goto out;
    dsl_train_settings_bind(s, tr.n, s->to.micro_batch * s->to.grad_accum * (size_t)world);
    if (tr.runs) /* a language model's losses are per token: per byte for text */
        s->ro.token_unit = tr.byte_level ? "byte" : "token";
    s->model.in_dim = tr.dim;
    s->model.out_dim = tr.nclasses;
    if (s->model.max_batch < s->to.micro_batch)
        s->model.max_batch = s->to.micro_batch;
    if (gpu) {
#ifdef DSL_HAVE_CUDA
        if ((r = dsl_device_cuda_open(&gpu_dev, device, err)) < 0)
            goto out;
        have_gpu = 1;
        /* GPU time per phase from CUDA events (common/gpuprof.h), unless
         * DSTRAIN_GPU_TIMERS=0; DSTRAIN_COUNT_LAUNCHES=1 prints launches per step */
        const char *gt = getenv("DSTRAIN_GPU_TIMERS"), *cl = getenv("DSTRAIN_COUNT_LAUNCHES");
        if (cl && !strcmp(cl, "1"))
            dsl_gpuprof_count_launches();
        if (!(gt && !strcmp(gt, "0")) && (r = dsl_gpuprof_enable(gpu_dev.stream, err)) < 0)
            goto out;
        s->to.dev = &gpu_dev;
        s->model.stream = gpu_dev.stream; /* one stream for the model and the device */
        r = dsl_model_create_cuda(&model, &s->model, err);
#else
        r = dsl_seterr(err, DSL_ENOTSUP, "backend 'nccl': built without CUDA");
#endif
    } else {
        r = dsl_model_create(&model, &s->model, err);
    }
    if (r < 0)
        goto out;
    if ((r = dsl_trainer_init(&t, &s->to, comm, &model, err)) < 0)
        goto out;
    have_trainer = 1;
    char where[160];
    if (gpu)
        snprintf(where, sizeof(where), "device %s", gpu_dev.name);
    else
        snprintf(where, sizeof(where), "%d BLAS thread(s) per rank (OpenBLAS %s)", threads,
                 dsl_blas_core());
    if (rank == 0 && blas_note && !gpu)
        printf("dstrain: note: %s\n", blas_note);
    if (!gpu)
        warn_oversubscribed(&s->env, threads);
    if (rank == 0)
        printf("dstrain: %s on %zu samples (test %zu), backend %s, %s, deterministic %s, "
               "optimizer %s lr %g\n",
               s->data.name, tr.n, te.n, dsl_comm_backend(comm), where,
               s->to.deterministic ? "on" : "off",
               dsl_cfg_optim_name(s->cfg.optimizer.type), (double)s->to.optim.lr);
    if (rank == 0 && s->cfg.scheduler.type != DSL_SCHED_NONE)
        printf("dstrain: scheduler %s\n", dsl_sched_type_name(s->cfg.scheduler.type));
    if ((r = dsl_train_resume(s, &t, err)) < 0)
        goto out;
    if (s->ro.save_on_signal) {
        /* SIGUSR1: Slurm's warning signal (--signal=USR1@SECONDS) */
        dsl_signals_set(on_signal, 0, (const int[]){SIGTERM, SIGINT, SIGUSR1, 0});
        s->ro.stop_flag = &stop_flag;
    }
    r = dsl_trainer_run(&t, &s->ro, &tr, &te, &sum, err);
out:
    if (r < 0 && r != DSL_ECANCELED)
        dsl_error("%s", *err ? err : dsl_strerror(r));
    /* a failed GPU run: abort the communicator before any device memory is freed,
     * since cudaFree waits for every kernel, an NCCL kernel stuck on a dead peer too */
    if (r < 0 && r != DSL_ECANCELED && comm && have_gpu)
        dsl_comm_abort(comm);
    if (have_trainer)
        dsl_trainer_release(&t);
    dsl_model_release(&model);
    if (have_gpu) {
        dsl_gpuprof_disable(); /* its events before the device's stream */
        dsl_device_release(&gpu_dev);
    }
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
    if (comm)
        dsl_comm_close(comm);
    if (r == DSL_ECANCELED) /* 138 after SIGUSR1: saved, requeue me (docs/trainer.md) */
        return 128 + (stop_sig ? stop_sig : SIGTERM);
    if (r == DSL_ECONFIG || r == DSL_EUSAGE)
        return 2;
    return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    double t_process = dsl_now(); /* the summary's setup phase starts here */
    char err[DSL_ERR_LEN] = "";
    dsl_log_set_prog("dstrain");
    if (argc > 1 && !strcmp(argv[1], "consolidate")) {
        int r = dsl_train_consolidate_main(argc - 1, argv + 1, err);
        if (r < 0) {
            dsl_error("%s", err);
            return r == DSL_EUSAGE ? 2 : 1;
        }
        return 0;
    }
    if (argc > 1 && (!strcmp(argv[1], "tokenize") || !strcmp(argv[1], "sample") ||
                     !strcmp(argv[1], "plot") || !strcmp(argv[1], "keys"))) {
        int r = !strcmp(argv[1], "sample") ? dsl_train_sample_main(argc - 1, argv + 1, err)
                : !strcmp(argv[1], "plot") ? dsl_train_plot_main(argc - 1, argv + 1, err)
                : !strcmp(argv[1], "keys") ? dsl_train_keys_main(argc - 1, argv + 1, err)
                                           : dsl_train_tokenize_main(argc - 1, argv + 1, err);
        if (r < 0) {
            dsl_error("%s", err);
            return r == DSL_EUSAGE ? 2 : 1;
        }
        return 0;
    }
    struct dsl_train_settings s;
    int r = dsl_train_settings_parse(&s, argc, argv, err);
    if (r == 1) {
        dsl_train_settings_release(&s);
        return usage(stdout);
    }
    if (r < 0) {
        dsl_error("%s", err);
        if (r == DSL_EUSAGE)
            fprintf(stderr,
                    "usage: dstrain [--config ds_config.json] [options] (see --help)\n");
        dsl_train_settings_release(&s);
        return 2;
    }
    /* ranks of srun or mpirun: their environment into the contract, before any reader */
    const char *source;
    if ((r = dsl_rankenv_adopt(&source, err)) < 0) {
        dsl_error("%s", err);
        dsl_train_settings_release(&s);
        return 2;
    }
    if (source)
        dsl_debug("rank environment taken from %s", source);
    /* the contract, read once here and passed down (the comm, the settings) */
    if ((r = dsl_rankenv_load(&s.env, err)) < 0) {
        dsl_error("%s", err);
        dsl_train_settings_release(&s);
        return 2;
    }
    s.have_env = 1;
    /* CPU or GPU, once the contract's LOCAL_RANK and LOCAL_WORLD_SIZE are final; the GPU
     * asked for and not to be had on this node is 3 (docs/exit-codes.md) */
    if ((r = dsl_train_settings_place(&s, err)) < 0) {
        dsl_error("%s", err);
        dsl_train_settings_release(&s);
        return r == DSL_ENOGPU ? 3 : 2;
    }
    /* before any work: may re-execute dstrain with better BLAS kernels */
    if ((r = dsl_blas_check_core(argv, &blas_note, err)) < 0) {
        dsl_error("%s", err);
        dsl_train_settings_release(&s);
        return 2;
    }
    s.ro.t_process = t_process;
    r = train(&s);
    dsl_train_settings_release(&s);
    return r;
}
