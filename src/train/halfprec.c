/*
 * The ZeRO model-state formula of halfprec.h. Pure arithmetic: no state, nothing
 * concurrent. The 16-bit conversions declared beside it live in halfconv.c (library
 * dslcomm, which the host collectives' fp16/bf16 reductions need).
 * NEEDSWORK: the formula alone is left in this file; it belongs with the trainer's
 * mixed-precision code (trainer_mixed.c) once trainer.cmake can drop this source.
 */
#include "dslaunch/halfprec.h"
#include "common/banned.h"

double dsl_zero_state_formula(int stage, size_t P, int N, size_t spp, size_t hsz)
{
    double p = (double)P, n = (double)N, h = (double)hsz;
    /* the optimizer's fp32 vectors per parameter: its state, plus the master copy in
     * mixed precision */
    double opt = 4.0 * (double)spp + (hsz < 4 ? 4.0 : 0.0);
    switch (stage) {
    case 0: return (2.0 * h + opt) * p;
    case 1: return 2.0 * h * p + opt * p / n;
    default: return h * p + (h + opt) * p / n;
    }
}
