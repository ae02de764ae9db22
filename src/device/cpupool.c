/*
 * The CPU device's helper threads (cpupool.h).
 *
 * Theory of operation. One job at a time, cut into chunks. All the state that decides
 * who runs what is one 64-bit word, the ticket: the job's generation, its chunk count
 * and the next unclaimed chunk. The caller writes the job (function, argument, length,
 * chunk size), then publishes a ticket with a new generation; every thread (the caller
 * included) claims chunks by compare-and-swap on the ticket and runs them, and counts
 * each finished chunk in `done`; the caller returns when `done` reaches the chunk count.
 * A helper that read an old generation fails its swap, so it never runs a chunk of a
 * job it did not read, and a job's fields do not change while one of its chunks is
 * claimed and unfinished, because the caller waits for all of them first.
 *
 * Waiting. The optimizer calls come in bursts (one per gradient bucket, back to back,
 * once per step), so after a job a helper spins on the ticket for a short while (tens
 * of microseconds, with the pause hint) before it sleeps on a condition variable; the
 * caller broadcasts only when a helper said it sleeps. Between steps the helpers sleep
 * and leave the cores to BLAS. A helper that is not running when a job comes (the
 * cores are busy) simply claims nothing: the caller runs the chunks itself.
 *
 * Helpers block every signal, so SIGTERM and SIGINT reach dstrain's main thread as
 * before. They are never joined: they sleep until the process exits.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dslaunch/device/cpupool.h"
#include "dslaunch/common/banned.h"

#define POOL_MAX 64
#define SPIN_CHECKS 2000 /* pause-hinted checks before sleeping: tens of microseconds */

/* ticket: generation (24 bits) | chunk count (20 bits) | next chunk (20 bits) */
#define T_BITS 20
#define T_MASK ((UINT64_C(1) << T_BITS) - 1)
#define T_GEN(t) ((t) >> (2 * T_BITS))
#define T_COUNT(t) (((t) >> T_BITS) & T_MASK)
#define T_NEXT(t) ((t)&T_MASK)
#define T_MAXCHUNKS T_MASK

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static struct {
    int threads; /* in effect, 1..POOL_MAX */
    int started; /* helpers running, or -1: none could be started */
    void (*fn)(void *arg, size_t lo, size_t hi);
    void *arg;
    size_t n, chunk;
    atomic_uint_fast64_t ticket;
    atomic_size_t done;
    atomic_int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pool = {.threads = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* claim and run chunks of the job whose ticket generation is gen, until none is left or
 * another job has replaced it */
static void run_chunks(uint64_t gen)
{
    uint64_t t = atomic_load(&pool.ticket);
    while (T_GEN(t) == gen && T_NEXT(t) < T_COUNT(t)) {
        if (!atomic_compare_exchange_weak(&pool.ticket, &t, t + 1))
            continue; /* t was reloaded */
        size_t lo = (size_t)T_NEXT(t) * pool.chunk;
        size_t hi = pool.n - lo > pool.chunk ? lo + pool.chunk : pool.n;
        pool.fn(pool.arg, lo, hi);
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
        t = atomic_load(&pool.ticket);
    }
}

static void *helper_main(void *unused)
{
    (void)unused;
    uint64_t seen = 0; /* generation last worked on; generations start at 1 */
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = T_GEN(atomic_load(&pool.ticket))) == seen) {
            if (++spins < SPIN_CHECKS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool.mu);
            /* sleepers before the ticket, both sequentially consistent, against the
             * caller's ticket before sleepers: one of the two sees the other's store */
            atomic_fetch_add(&pool.sleepers, 1);
            while ((g = T_GEN(atomic_load(&pool.ticket))) == seen)
                pthread_cond_wait(&pool.cv, &pool.mu);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.mu);
            break;
        }
        seen = g;
        run_chunks(g);
    }
    return NULL;
}

static void start_helpers(void)
{
    sigset_t all, old;
    pthread_attr_t a;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int n = 0;
    for (int i = 1; i < pool.threads; i++) {
        pthread_t th;
        if (pthread_create(&th, &a, helper_main, NULL) != 0)
            break;
        n++;
    }
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pool.started = n > 0 ? n : -1;
}

int dsl_cpupool_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > POOL_MAX)
        n = POOL_MAX;
    if (!pool.started)
        pool.threads = n;
    return pool.threads;
}

int dsl_cpupool_threads(void)
{
    return pool.threads;
}

void dsl_cpupool_for(size_t n, size_t chunk, void (*fn)(void *arg, size_t lo, size_t hi),
                     void *arg)
{
    if (chunk < 1)
        chunk = 1;
    if (n > chunk * T_MAXCHUNKS) /* keep the count within the ticket's field */
        chunk = n / T_MAXCHUNKS + 1;
    if (pool.threads > 1 && n > chunk && !pool.started)
        start_helpers();
    if (pool.threads <= 1 || n <= chunk || pool.started < 0) {
        fn(arg, 0, n);
        return;
    }
    uint64_t count = (n + chunk - 1) / chunk;
    uint64_t gen = T_GEN(atomic_load(&pool.ticket)) + 1;
    if (gen >> (64 - 2 * T_BITS))
        gen = 1; /* wrapped: a helper asleep on generation 1 since 2^24 jobs is impossible */
    pool.fn = fn;
    pool.arg = arg;
    pool.n = n;
    pool.chunk = chunk;
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store(&pool.ticket, gen << (2 * T_BITS) | count << T_BITS);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
    }
    run_chunks(gen);
    /* a helper may hold a chunk while it shares this thread's core (the scheduler put
     * it there while the other cores were busy): give the core away while waiting */
    while (atomic_load_explicit(&pool.done, memory_order_acquire) < count)
        sched_yield();
}
