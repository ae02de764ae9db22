/*
 * OpenBLAS sgemm rate on the shapes of the MLP's training step, for the trainer
 * benchmark (bench/train.sh): the peak a training FLOP rate is compared with.
 *
 *   sgemm [threads] [batch] [in hidden... out]
 *
 * Times C = A B^T (forward), C = dZ^T A (weight gradient) and C = dZ W (input
 * gradient) for every layer at the given batch, as the trainer runs them, and prints
 * "# sgemm GFLOP/s <rate>" for the whole set (2 x M x N x K per call).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1;
    int batch = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 128;
    int dims[16] = {784, 1024, 1024, 10}, nd = 4;
    if (argc > 4) {
        nd = 0;
        for (int i = 3; i < argc && nd < 16; i++)
            dims[nd++] = (int)strtol(argv[i], NULL, 10);
    }
    openblas_set_num_threads(threads);
    size_t maxd = 0;
    for (int i = 0; i < nd; i++)
        maxd = (size_t)dims[i] > maxd ? (size_t)dims[i] : maxd;
    float *a = malloc(sizeof(float) * (size_t)batch * maxd);
    float *w = malloc(sizeof(float) * maxd * maxd);
    float *c = malloc(sizeof(float) * (size_t)batch * maxd);
    float *dw = malloc(sizeof(float) * maxd * maxd);
    for (size_t i = 0; i < (size_t)batch * maxd; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < maxd * maxd; i++)
        w[i] = (float)(i % 5) * 0.01f;
    double flops = 0.0, t0 = 0.0;
    int iters = 0;
    for (int rep = 0; rep < 2; rep++) { /* rep 0 warms up */
        double fl = 0.0, t = now();
        int it = 0;
        do {
            for (int l = 0; l + 1 < nd; l++) {
                int in = dims[l], out = dims[l + 1];
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, a,
                            in, w, in, 0.0f, c, out);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, c,
                            out, a, in, 0.0f, dw, in);
                fl += 4.0 * batch * in * out;
                if (l > 0) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out,
                                1.0f, c, out, w, in, 0.0f, a, in);
                    fl += 2.0 * batch * in * out;
                }
            }
            it++;
        } while (now() - t < (rep ? 2.0 : 0.3));
        flops = fl;
        t0 = now() - t;
        iters = it;
    }
    printf("# sgemm threads=%d batch=%d iterations=%d time=%.3f s\n", threads, batch, iters,
           t0);
    printf("# sgemm GFLOP/s %.2f\n", flops / t0 * 1e-9);
    free(a);
    free(w);
    free(c);
    free(dw);
    return 0;
}
