/*
 * The CPU GPT's products in fp32 (OpenBLAS sgemm) and in bf16 (oneDNN, --cpu-gemm bf16)
 * through the models' own dsl_gemm_run (dslaunch/device/cpugemm.h), on the shapes of one
 * training step of bench/gpt.sh's model (micro batch 16 x context 128 = 2048 rows,
 * d = 128, vocabulary 256): forward, input gradients and weight gradients. The bf16
 * figures include rounding both inputs to bf16. For bench/cpugemm.sh.
 *
 *   cpugemm [threads] [rounds]
 *
 * Each round times every shape in both precisions, one after the other (a precision's
 * run is the median of 7 calls); the medians over the rounds are printed per shape and
 * for the whole step (its FLOPs over the summed times).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/model/model.h"
#include "dslaunch/device/cpugemm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct shape {
    const char *name;
    int ta, tb, by_rows, times; /* times: calls per training step (4 layers) */
    size_t m, n, k;
};

static const struct shape shapes[] = {
    {"qkv forward", 0, 0, 0, 4, 2048, 384, 128},
    {"out proj forward", 0, 0, 0, 4, 2048, 128, 128},
    {"fc forward", 0, 0, 0, 4, 2048, 512, 128},
    {"fc proj forward", 0, 0, 0, 4, 2048, 128, 512},
    {"lm head logits", 0, 1, 0, 1, 2048, 256, 128},
    {"lm head dx", 0, 0, 0, 1, 2048, 128, 256},
    {"fc proj dx", 0, 1, 0, 4, 2048, 512, 128},
    {"fc dx", 0, 1, 0, 4, 2048, 128, 512},
    {"out proj dx", 0, 1, 0, 4, 2048, 128, 128},
    {"qkv dx", 0, 1, 0, 4, 2048, 128, 384},
    {"qkv dW", 1, 0, 1, 4, 128, 384, 2048},
    {"out proj dW", 1, 0, 1, 4, 128, 128, 2048},
    {"fc dW", 1, 0, 1, 4, 128, 512, 2048},
    {"fc proj dW", 1, 0, 1, 4, 512, 128, 2048},
    {"lm head dW", 1, 0, 1, 1, 256, 128, 2048},
};
#define NS (sizeof(shapes) / sizeof(shapes[0]))

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1, rounds = argc > 2 ? atoi(argv[2]) : 5;
    dsl_blas_set_threads(threads); /* as dstrain: the pool's threads, OpenBLAS on one each */
    char why[200];
    if (!dsl_gemm_bf16_supported(why, sizeof(why))) {
        printf("# no bf16 products: %s\n", why);
        return 77;
    }
    struct dsl_gemm_bf16 *s16 = dsl_gemm_bf16_new();
    static double t[2][NS][64];
    for (int r = 0; r < rounds && r < 64; r++)
        for (size_t i = 0; i < NS; i++) {
            const struct shape *s = &shapes[i];
            size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
            float *a = malloc(s->m * s->k * sizeof(float));
            float *b = malloc(s->k * s->n * sizeof(float));
            float *c = malloc(s->m * s->n * sizeof(float));
            for (size_t j = 0; j < s->m * s->k; j++)
                a[j] = (float)(j % 13) * 0.01f - 0.06f;
            for (size_t j = 0; j < s->k * s->n; j++)
                b[j] = (float)(j % 7) * 0.01f - 0.03f;
            for (int p = 0; p < 2; p++) {
                struct dsl_gemm g = {.ta = s->ta ? CblasTrans : CblasNoTrans,
                                     .tb = s->tb ? CblasTrans : CblasNoTrans, .m = s->m,
                                     .n = s->n, .k = s->k, .a = a, .lda = lda, .b = b,
                                     .ldb = ldb, .alpha = 1.0f, .c = c, .ldc = s->n,
                                     .by_rows = s->by_rows, .bf16 = p ? s16 : NULL};
                double v[7];
                dsl_gemm_run(&g); /* warm: primitives made, pages touched */
                for (int w = 0; w < 7; w++) {
                    double t0 = now();
                    dsl_gemm_run(&g);
                    v[w] = now() - t0;
                }
                t[p][i][r] = median(v, 7);
            }
            free(a);
            free(b);
            free(c);
        }
    printf("| product | M x N x K | per step | fp32 GFLOP/s | bf16 GFLOP/s | bf16 / fp32 |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    double step[2] = {0, 0}, flops = 0;
    for (size_t i = 0; i < NS; i++) {
        const struct shape *s = &shapes[i];
        double f = 2.0 * (double)s->m * (double)s->n * (double)s->k, m[2];
        for (int p = 0; p < 2; p++) {
            m[p] = median(t[p][i], rounds);
            step[p] += m[p] * s->times;
        }
        flops += f * s->times;
        printf("| %s | %zu x %zu x %zu | %d | %.1f | %.1f | %.2fx |\n", s->name, s->m, s->n,
               s->k, s->times, f / m[0] / 1e9, f / m[1] / 1e9, m[0] / m[1]);
    }
    printf("| **the step's products** | | | %.1f | %.1f | **%.2fx** |\n", flops / step[0] / 1e9,
           flops / step[1] / 1e9, step[0] / step[1]);
    printf("# %d thread(s), medians of %d rounds; fp32 %.2f ms, bf16 %.2f ms per step\n", threads,
           rounds, step[0] * 1e3, step[1] * 1e3);
    dsl_gemm_bf16_free(s16);
    return 0;
}
