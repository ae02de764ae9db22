/*
 * GPU time per kernel class from CUDA events, and the launch counter (gpuprof.h).
 *
 * Theory of operation. One process-wide state, driven by the thread that queues work
 * on the compute stream. A step's events go into ring step % NRING: each
 * dsl_gpuprof_mark() that changes the class records the next event of the ring on the
 * stream (created on first use, cudaEventDefault: timing on), and launches count into
 * the ring's per-class counters. dsl_gpuprof_step_end() records the closing event.
 * Reading: a ring is read when its closing event has completed (cudaEventQuery, which
 * never waits); steps are read at every step's beginning and by
 * dsl_gpuprof_collect(), and a ring that a new step needs before its events completed
 * is dropped (counted in no total) rather than waited for, so timing adds no host
 * synchronisation. With the trainer's one host wait per step, a ring reused three
 * steps later is always complete. A step with more than MAXEV class changes keeps its
 * last class for the rest (its time is not lost, only merged).
 *
 * The profiler window: DSTRAIN_PROFILE_STEP=S (read at enable) calls cudaProfilerStart
 * at step S's beginning and cudaProfilerStop at its end, for `ncu --profile-from-start
 * off` (scripts/gpu-check.sh, step "profile").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/banned.h"

static const char *const class_names[DSL_PROF_NCLASS] = {
    "other",         "fwd_matmul", "fwd_attention", "fwd_norm", "fwd_elementwise",
    "lm_head_loss",  "bwd_matmul", "bwd_attention", "bwd_norm", "bwd_elementwise",
    "grad",          "comm_wait",  "gather_wait",   "loss_norm_reduction", "optimizer",
    "idle",
};

static const char *const phase_names[DSL_PHASE_N] = {
    "forward", "attention", "lm_head_loss", "backward", "comm_wait", "loss_norm",
    "optimizer", "idle",
};

const char *dsl_gpuprof_class_name(enum dsl_prof_class c)
{
    return (unsigned)c < DSL_PROF_NCLASS ? class_names[c] : "?";
}

const char *dsl_gpuprof_phase_name(enum dsl_prof_phase p)
{
    return (unsigned)p < DSL_PHASE_N ? phase_names[p] : "?";
}

enum dsl_prof_phase dsl_gpuprof_phase_of(enum dsl_prof_class c)
{
    switch (c) {
    case DSL_PROF_FWD_MATMUL:
    case DSL_PROF_FWD_NORM:
    case DSL_PROF_FWD_ELEM:
        return DSL_PHASE_FORWARD;
    case DSL_PROF_FWD_ATTN:
    case DSL_PROF_BWD_ATTN:
        return DSL_PHASE_ATTENTION;
    case DSL_PROF_HEAD:
        return DSL_PHASE_HEAD;
    case DSL_PROF_BWD_MATMUL:
    case DSL_PROF_BWD_NORM:
    case DSL_PROF_BWD_ELEM:
    case DSL_PROF_GRAD:
        return DSL_PHASE_BACKWARD;
    case DSL_PROF_COMM_WAIT:
    case DSL_PROF_GATHER_WAIT:
        return DSL_PHASE_COMM;
    case DSL_PROF_SCALARS:
        return DSL_PHASE_SCALARS;
    case DSL_PROF_OPTIM:
        return DSL_PHASE_OPTIM;
    case DSL_PROF_OTHER:
    case DSL_PROF_IDLE:
    case DSL_PROF_NCLASS:
        break;
    }
    return DSL_PHASE_IDLE;
}

/* the launch counter, with or without CUDA */
static struct {
    int counting;
    uint64_t launches;          /* every launch counted */
    uint64_t step_first;        /* launches before the current step began */
    uint64_t last_before, last_in; /* the last step that ended */
    uint64_t direct[DSL_PROF_NCLASS]; /* counting without timing: per class */
    enum dsl_prof_class cur;
} L;

int dsl_gpuprof_counting(void) { return L.counting; }

void dsl_gpuprof_step_launches(uint64_t *before, uint64_t *in_step)
{
    *before = L.last_before;
    *in_step = L.last_in;
}

#ifdef DSL_HAVE_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#define NRING 3
#define MAXEV 2048

struct ring {
    cudaEvent_t ev[MAXEV];
    unsigned char cls[MAXEV];
    int n;        /* events recorded this step (the last one closes it) */
    int made;     /* events created so far (reused across steps) */
    int state;    /* 0 free, 1 recording, 2 closed and unread */
    uint64_t launches[DSL_PROF_NCLASS];
};

static struct {
    int on;
    cudaStream_t stream;
    struct ring *r;  /* NRING of them */
    int cur_ring;    /* -1 outside a step */
    uint64_t profile_step, step;
    int profiling;
    struct dsl_gpuprof_totals tot;
} P = {.cur_ring = -1};

static void read_profile_step(void)
{
    const char *s = getenv("DSTRAIN_PROFILE_STEP");
    long v = 0;
    if (s && *s && dsl_parse_long(s, 1, 1L << 40, &v) == 0)
        P.profile_step = (uint64_t)v;
}

int dsl_gpuprof_enable(void *stream, char *err)
{
    if (P.on)
        return 0;
    P.r = calloc(NRING, sizeof(struct ring));
    if (!P.r)
        return dsl_seterr(err, -ENOMEM, "gpu timers: out of memory");
    P.stream = (cudaStream_t)stream;
    P.on = 1;
    P.cur_ring = -1;
    L.counting = 1;
    read_profile_step();
    return 0;
}

void dsl_gpuprof_count_launches(void)
{
    L.counting = 1;
    read_profile_step();
}

int dsl_gpuprof_enabled(void) { return P.on; }

void dsl_gpuprof_disable(void)
{
    if (!P.on)
        return;
    for (int k = 0; k < NRING; k++)
        for (int i = 0; i < P.r[k].made; i++)
            cudaEventDestroy(P.r[k].ev[i]);
    free(P.r);
    P.r = NULL;
    P.on = 0;
    P.cur_ring = -1;
}

/* the next event of the current ring on the stream, of class c; 0 or -1 */
static int record(enum dsl_prof_class c)
{
    struct ring *g = &P.r[P.cur_ring];
    if (g->n >= MAXEV)
        return -1;
    if (g->n == g->made) {
        if (cudaEventCreate(&g->ev[g->n]) != cudaSuccess) {
            (void)cudaGetLastError(); /* not the model's error */
            return -1;
        }
        g->made++;
    }
    if (cudaEventRecord(g->ev[g->n], P.stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    g->cls[g->n++] = (unsigned char)c;
    return 0;
}

/* ring k into the totals if its closing event completed; 1 if read, 0 if not yet */
static int read_ring(int k)
{
    struct ring *g = &P.r[k];
    if (g->state != 2)
        return 0;
    if (g->n < 1 || cudaEventQuery(g->ev[g->n - 1]) != cudaSuccess) {
        (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
        return 0;
    }
    for (int i = 0; i + 1 < g->n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, g->ev[i], g->ev[i + 1]) == cudaSuccess)
            P.tot.ms[g->cls[i]] += (double)ms;
        else
            (void)cudaGetLastError();
    }
    for (int c = 0; c < DSL_PROF_NCLASS; c++)
        P.tot.launches[c] += g->launches[c];
    P.tot.steps++;
    g->state = 0;
    return 1;
}

void dsl_gpuprof_collect(void)
{
    if (!P.on)
        return;
    for (int k = 0; k < NRING; k++)
        read_ring(k);
}

void dsl_gpuprof_step_begin(uint64_t step)
{
    P.step = step;
    L.step_first = L.launches;
    L.cur = DSL_PROF_OTHER;
    if (L.counting && P.profile_step && step == P.profile_step && !P.profiling) {
        if (cudaProfilerStart() == cudaSuccess)
            P.profiling = 1;
        else
            (void)cudaGetLastError();
    }
    if (!P.on)
        return;
    dsl_gpuprof_collect();
    int k = (int)(step % NRING);
    struct ring *g = &P.r[k];
    /* still unread: its events have not completed three steps later; drop it rather
     * than wait */
    g->state = 1;
    g->n = 0;
    memset(g->launches, 0, sizeof(g->launches));
    P.cur_ring = k;
    record(DSL_PROF_OTHER);
}

void dsl_gpuprof_step_end(void)
{
    L.last_before = L.step_first;
    L.last_in = L.launches - L.step_first;
    if (P.on && P.cur_ring >= 0) {
        struct ring *g = &P.r[P.cur_ring];
        if (g->n >= MAXEV)
            g->n = MAXEV - 1; /* the closing event replaces the last one */
        if (record(DSL_PROF_OTHER) == 0)
            g->state = 2;
        else
            g->state = 0;
        P.cur_ring = -1;
    }
    if (P.profiling) {
        (void)cudaProfilerStop();
        (void)cudaGetLastError();
        P.profiling = 0;
    }
    L.cur = DSL_PROF_OTHER;
}

void dsl_gpuprof_mark(enum dsl_prof_class c)
{
    if (c == L.cur || (unsigned)c >= DSL_PROF_NCLASS)
        return;
    L.cur = c;
    if (P.on && P.cur_ring >= 0)
        record(c);
}

void dsl_gpuprof_launch(const char *what)
{
    if (!L.counting || strncmp(what, "launching", 9) != 0)
        return;
    L.launches++;
    if (P.on && P.cur_ring >= 0)
        P.r[P.cur_ring].launches[L.cur]++;
    else
        L.direct[L.cur]++;
}

void dsl_gpuprof_take(struct dsl_gpuprof_totals *out, int reset)
{
    *out = P.tot;
    for (int c = 0; c < DSL_PROF_NCLASS; c++)
        out->launches[c] += L.direct[c];
    out->launches_counted = L.launches;
    if (reset) {
        memset(&P.tot, 0, sizeof(P.tot));
        memset(L.direct, 0, sizeof(L.direct));
    }
}

#else /* no CUDA: the counter only (nothing launches) */

int dsl_gpuprof_enable(void *stream, char *err)
{
    (void)stream;
    return dsl_seterr(err, DSL_ENOTSUP, "gpu timers: built without CUDA");
}

void dsl_gpuprof_count_launches(void) { L.counting = 1; }
int dsl_gpuprof_enabled(void) { return 0; }
void dsl_gpuprof_disable(void) {}

void dsl_gpuprof_step_begin(uint64_t step)
{
    (void)step;
    L.step_first = L.launches;
}

void dsl_gpuprof_step_end(void)
{
    L.last_before = L.step_first;
    L.last_in = L.launches - L.step_first;
}

void dsl_gpuprof_mark(enum dsl_prof_class c) { L.cur = c; }

void dsl_gpuprof_launch(const char *what)
{
    if (L.counting && strncmp(what, "launching", 9) == 0) {
        L.launches++;
        L.direct[L.cur]++;
    }
}

void dsl_gpuprof_collect(void) {}

void dsl_gpuprof_take(struct dsl_gpuprof_totals *out, int reset)
{
    memset(out, 0, sizeof(*out));
    for (int c = 0; c < DSL_PROF_NCLASS; c++)
        out->launches[c] = L.direct[c];
    out->launches_counted = L.launches;
    if (reset)
        memset(L.direct, 0, sizeof(L.direct));
}
#endif
