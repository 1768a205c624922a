/* Which fp32 GEMM the CPU backend runs: its AVX-512 kernel (sgemm_avx512.c) on CPUs with
 * AVX-512F and VL unless IT_CPU_SGEMM=blas, else the BLAS. One definition for the backend,
 * the tests that check the kernel's properties and the benchmarks that report it. */
#ifndef IT_CPU_SGEMM_SELECT_H
#define IT_CPU_SGEMM_SELECT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline bool it_cpu_has_avx512(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

/* The AVX-512 kernels serve fp32 products (all but a few small deep ones: see cpu_kernels.h). */
static inline bool it_cpu_sgemm_is_avx512(void) {
    const char *env = getenv("IT_CPU_SGEMM");
    return !(env != NULL && strcmp(env, "blas") == 0) && it_cpu_has_avx512();
}

#endif
