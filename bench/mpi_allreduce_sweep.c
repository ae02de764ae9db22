/*
 * Open MPI peer for bench/allreduce.sh: an MPI_Allreduce loop (same timing
 * method: one warm-up call, barrier, mean of `iters` calls, nccl-tests busbw) swept over
 * the sizes dsbench uses, 1 KiB .. 512 MiB by factors of 2.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t maxb = (size_t)512 << 20;
    if (argc > 1)
        maxb = (size_t)strtoull(argv[1], NULL, 10);
    for (size_t bytes = 1024; bytes <= maxb; bytes *= 2) {
        size_t cnt = bytes / 4;
        float *a = malloc(bytes), *b = malloc(bytes);
        for (size_t i = 0; i < cnt; i++)
            a[i] = 1.0f;
        int iters = bytes >= (16 << 20) ? 5 : 50;
        MPI_Allreduce(a, b, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(a, b, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t = (MPI_Wtime() - t) / iters;
        double alg = bytes / t / 1e9, bus = alg * 2.0 * (n - 1) / n;
        if (rank == 0)
            printf("mpi n=%d bytes=%zu time_us=%.1f algbw=%.3f GB/s busbw=%.3f GB/s check=%g\n",
                   n, bytes, t * 1e6, alg, bus, b[0]);
        fflush(stdout);
        free(a);
        free(b);
    }
    MPI_Finalize();
    return 0;
}
