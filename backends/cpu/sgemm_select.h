/* Which fp32 GEMM the CPU backend runs: its own kernel for the CPU's widest vectors
 * (sgemm_avx512.c on CPUs with AVX-512F and VL, sgemm_avx2.c on CPUs with AVX2 and FMA), else
 * the BLAS. One definition for the backend, the tests that check the kernels' properties and
 * the benchmarks that report them. IT_CPU_SGEMM:
 *   unset, auto  the own kernel, small products as it chooses
 *   blas         the BLAS for every product
 *   avx512       the own kernel for every product, whatever its size (for the tests); the
 *                AVX2 one on a CPU without AVX-512
 *   avx2         the AVX2 kernel for every product, also on an AVX-512 CPU (for the tests) */
#ifndef IT_CPU_SGEMM_SELECT_H
#define IT_CPU_SGEMM_SELECT_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/common.h"

static inline bool it_cpu_has_avx512(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

static inline bool it_cpu_has_avx2_fma(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

enum { IT_CPU_SGEMM_BLAS = 0, IT_CPU_SGEMM_AVX2 = 1, IT_CPU_SGEMM_AVX512 = 2 };

static inline bool it_cpu_sgemm_env_is(const char *value) {
    const char *env = getenv("IT_CPU_SGEMM");
    return env != NULL && strcmp(env, value) == 0;
}

/* The kernel that serves fp32 products (IT_CPU_SGEMM_*). */
static inline int it_cpu_sgemm_isa(void) {
    if (it_cpu_sgemm_env_is("blas")) return IT_CPU_SGEMM_BLAS;
    if (it_cpu_sgemm_env_is("avx2")) return it_cpu_has_avx2_fma() ? IT_CPU_SGEMM_AVX2 : IT_CPU_SGEMM_BLAS;
    if (it_cpu_has_avx512()) return IT_CPU_SGEMM_AVX512;
    return it_cpu_has_avx2_fma() ? IT_CPU_SGEMM_AVX2 : IT_CPU_SGEMM_BLAS;
}

static inline bool it_cpu_has_avx512_bf16(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return it_cpu_has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

/* AMX with bf16 tiles (Sapphire Rapids and later; cpuid leaf 7 EDX bit 22). oneDNN asks the
 * kernel for the tiles' state itself. */
static inline bool it_cpu_has_amx_bf16(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0));
    if (a < 7) return false;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    return (d >> 22) & 1u;
#else
    return false;
#endif
}

/* sbgemm_onednn.c: oneDNN is built in, the CPU has AVX512_BF16 or AMX, and oneDNN's matmul
 * takes bf16 products on them (its implementation's name, _impl: "brg:avx512_core_bf16",
 * "brg:avx512_core_amx"; "none" otherwise). Exported for the benchmarks, which report the
 * choice. */
IT_API bool it_cpu_onednn_bf16_ready(void);
IT_API const char *it_cpu_onednn_bf16_impl(void);

/* Which GEMM serves products of bf16 operands (the gemm slot's, so autocast's). IT_CPU_SBGEMM:
 *   unset, auto  oneDNN's matmul (sbgemm_onednn.c) where it is ready, else sbgemm_avx512bf16.c
 *                on CPUs with AVX512_BF16, else fp32
 *   onednn       as auto
 *   avx512bf16   sbgemm_avx512bf16.c (vdpbf16ps, fp32 sums; fp32 on a CPU without AVX512_BF16)
 *   fp32         the operands widened to fp32, the fp32 GEMM above (IT_CPU_SGEMM), C rounded */
enum { IT_CPU_SBGEMM_FP32 = 0, IT_CPU_SBGEMM_AVX512BF16 = 1, IT_CPU_SBGEMM_ONEDNN = 2 };

static inline bool it_cpu_sbgemm_env_is(const char *value) {
    const char *env = getenv("IT_CPU_SBGEMM");
    return env != NULL && strcmp(env, value) == 0;
}

static inline int it_cpu_sbgemm_isa(void) {
    if (it_cpu_sbgemm_env_is("fp32")) return IT_CPU_SBGEMM_FP32;
    if (!it_cpu_sbgemm_env_is("avx512bf16") && it_cpu_onednn_bf16_ready()) return IT_CPU_SBGEMM_ONEDNN;
    return it_cpu_has_avx512_bf16() ? IT_CPU_SBGEMM_AVX512BF16 : IT_CPU_SBGEMM_FP32;
}

static inline const char *it_cpu_sbgemm_name(int isa) {
    return isa == IT_CPU_SBGEMM_ONEDNN ? "onednn" : isa == IT_CPU_SBGEMM_AVX512BF16 ? "avx512bf16" : "fp32";
}

/* The own kernel takes every product, whatever its size (IT_CPU_SGEMM=avx512 or avx2). */
static inline bool it_cpu_sgemm_every_size(void) {
    return it_cpu_sgemm_env_is("avx512") || it_cpu_sgemm_env_is("avx2");
}

/* IT_CPU_SGEMM is unset or one of the values above (otherwise the choice is as for auto). */
static inline bool it_cpu_sgemm_env_valid(void) {
    const char *env = getenv("IT_CPU_SGEMM");
    return env == NULL || *env == '\0' || it_cpu_sgemm_env_is("auto") || it_cpu_sgemm_env_is("blas") ||
           it_cpu_sgemm_env_is("avx512") || it_cpu_sgemm_env_is("avx2");
}

/* The AVX-512 kernel serves fp32 products (all but a few small deep ones: see cpu_kernels.h). */
static inline bool it_cpu_sgemm_is_avx512(void) { return it_cpu_sgemm_isa() == IT_CPU_SGEMM_AVX512; }

/* One of the own kernels serves fp32 products: results do not depend on the thread count. */
static inline bool it_cpu_sgemm_is_own(void) { return it_cpu_sgemm_isa() != IT_CPU_SGEMM_BLAS; }

#endif
