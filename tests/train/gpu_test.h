/*
 * What the tests of the train side against a CUDA device share (test_gpu_gpt.c,
 * test_gpu_trainer.c): device 0 opened before the tests and checked after them, and
 * the exit status 77 (skipped) where there is no device.
 */
#ifndef DSLAUNCH_TESTS_GPU_TEST_H
#define DSLAUNCH_TESTS_GPU_TEST_H

#include <cuda_runtime.h>
#include <stdio.h>

#include "dslaunch/common/error.h"
#include "dslaunch/device/device.h"

static struct dsl_device gdev; /* the CUDA device, opened by gpu_test_open() */

/* Open device 0 into gdev: 0, or the exit status of a test binary that cannot (77 where
 * there is no device, 1 where it fails to open). */
static inline int gpu_test_open(void)
{
    int ndev = 0;
    char err[DSL_ERR_LEN] = "";
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "# no CUDA device: skipped\n");
        return 77;
    }
    if (dsl_device_cuda_open(&gdev, 0, err) < 0) {
        fprintf(stderr, "cuda device: %s\n", err);
        return 1;
    }
    fprintf(stderr, "# device %s\n", gdev.name);
    return 0;
}

/* The exit status of the tests that returned r: 1 where the device failed on the way (an
 * error no test caught); gdev is released. */
static inline int gpu_test_close(int r)
{
    if (gdev.failed) {
        fprintf(stderr, "device error: %s\n", gdev.err);
        r = 1;
    }
    dsl_device_release(&gdev);
    return r;
}

#endif
