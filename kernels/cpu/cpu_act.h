/* cpu_act.h - the CPU backend's Gemma-family activation ops (kernels/cpu/cpu_act.c):
 * gelu_tanh_mul, scale and softcap, each a scalar reference plus the vtable entry that
 * splits the work over the pool. Not for use outside kernels/cpu and its tests. */
#ifndef STRATA_CPU_ACT_H
#define STRATA_CPU_ACT_H

#include <stddef.h>

#include "kernels/backend.h"

/* ---- scalar references: the math of kernels/backend.h, single-threaded ---- */
void cpu_act_gelu_tanh_mul_ref(float *out, const float *gate, const float *up, int m, int n);
void cpu_act_scale_ref(float *x, float alpha, const bk_weight *s, size_t n);
void cpu_act_softcap_ref(float *x, float cap, size_t n);

/* ---- vtable entries ---- */
void cpu_act_gelu_tanh_mul(backend *b, float *out, const float *gate, const float *up, int m,
                           int n);
void cpu_act_scale(backend *b, float *x, float alpha, const bk_weight *s, size_t n);
void cpu_act_softcap(backend *b, float *x, float cap, size_t n);

#endif
