/* The base of the scalar headers (it_scalar_cast.h, it_scalar_adam.h): the per-element
 * semantics every backend must reproduce bit for bit, written once in the subset of C that a
 * C11 compiler and nvcc both take, so that the CPU backend and the CUDA kernels compile the
 * same text. Internal to the library and its backends (not part of the API).
 *
 *   IT_SC_FN   the qualifiers of every function here: `__host__ __device__ static inline`
 *              under nvcc, else `static inline`, always inlined by GCC / Clang (the CPU's
 *              `omp simd` loops call these per element and must stay vectorizable).
 *   it_sc_fadd / fsub / fmul / fdiv / fsqrt / ffma, and the d- forms for double: one IEEE
 *              operation each, rounded to nearest even, never fused with another. On the
 *              device they are the _rn intrinsics, which nvcc does not contract (its default
 *              --fmad=true would fuse a plain a * b + c); on the host they are plain
 *              operators, unfused because the C code is compiled as ISO C11 (GCC then
 *              implies -ffp-contract=off, also under -march=native), and fmaf / fma where
 *              a fused multiply-add is meant.
 *   it_sc_f32_bits / bits_f32 / f64_bits / bits_f64 / highest_bit64: bit moves without
 *              undefined behaviour (memcpy on the host, the reinterpret intrinsics on the
 *              device).
 *
 * The BANG kernels (backends/mlu/bang) do not include these headers: cncc cannot be run where
 * this project is built and tested, and its device side is only known to take the union bit
 * moves it_bang_math.h uses. That file keeps its copies, compared with these (and with the
 * CPU's) bit for bit by tests/unit/test_mlu_host.c. */
#ifndef INFINITRAIN_SCALAR_IT_SCALAR_H
#define INFINITRAIN_SCALAR_IT_SCALAR_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define IT_SC_FN __host__ __device__ static inline
#elif defined(__GNUC__)
#define IT_SC_FN static inline __attribute__((always_inline))
#else
#define IT_SC_FN static inline
#endif

/* ---------------------------------------------------------------- IEEE operations, unfused */
IT_SC_FN float it_sc_fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
IT_SC_FN float it_sc_fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
IT_SC_FN float it_sc_fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
IT_SC_FN float it_sc_fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
IT_SC_FN float it_sc_fsqrt(float a) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
IT_SC_FN float it_sc_ffma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
IT_SC_FN double it_sc_dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
IT_SC_FN double it_sc_dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
IT_SC_FN double it_sc_dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
IT_SC_FN double it_sc_ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
IT_SC_FN double it_sc_dsqrt(double a) {
#if defined(__CUDA_ARCH__)
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}
IT_SC_FN double it_sc_dfma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
    return __fma_rn(a, b, c);
#else
    return fma(a, b, c);
#endif
}

/* ---------------------------------------------------------------- bits */
IT_SC_FN uint32_t it_sc_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}
IT_SC_FN float it_sc_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
IT_SC_FN uint64_t it_sc_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
#endif
}
IT_SC_FN double it_sc_bits_f64(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}
/* Index of the highest set bit of x (x != 0). */
IT_SC_FN int it_sc_highest_bit64(uint64_t x) {
#if defined(__CUDA_ARCH__)
    return 63 - __clzll((long long)x);
#elif defined(__GNUC__)
    return 63 - __builtin_clzll(x);
#else
    int n = 0;
    while (x >>= 1) n++;
    return n;
#endif
}

#endif
