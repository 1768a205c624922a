/* Helpers shared by the benchmarks: a monotonic clock, host buffers, contiguous descriptors
 * and the machine's fp32 GEMM peak measured through the CPU backend's gemm slot (the same
 * OpenBLAS, with the same OpenMP threads, that training uses). Header-only: each benchmark
 * is one executable. */
#ifndef IT_BENCH_UTIL_H
#define IT_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "cpu/sgemm_select.h"
#include "infinitrain/backend.h"

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* CPU time of the whole process (all threads), for the share of the cores a step got. */
static inline double bench_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* A field of /proc/self/status in MiB ("VmRSS", "VmHWM"); -1 when unreadable. */
static inline double bench_proc_mib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtod(line + n + 1, NULL) / 1024.0; /* kB */
            break;
        }
    fclose(f);
    return v;
}

/* Resets the process's peak RSS (VmHWM) to its current RSS (Linux: clear_refs 5). */
static inline bool bench_reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts v in place). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* splitmix64: a small, seedable stream for benchmark inputs. */
static inline uint64_t bench_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float bench_rng_sym(uint64_t *s) {
    return (float)((double)(bench_rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* n floats, 64-byte aligned, filled with scale * U[-1, 1) (every page touched once, so no
 * first-touch fault lands in a timed call). NULL on failure. */
static inline float *bench_alloc_floats(size_t n, float scale, uint64_t seed) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (!p) return NULL;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) p[i] = scale * bench_rng_sym(&s);
    return p;
}

/* A contiguous row-major descriptor over host memory. */
static inline it_tdesc bench_desc(void *data, it_dtype dt, int ndim, const int64_t *shape) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = data;
    d.dtype = dt;
    d.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        d.shape[i] = shape[i];
        d.strides[i] = stride;
        stride *= shape[i];
    }
    return d;
}

/* Best-of-`reps` GFLOP/s of one n x n x n sgemm (C = A B, row-major) through the CPU
 * backend's gemm slot, after one untimed call. Returns 0 on failure (message printed). */
static inline double bench_gemm_peak(int64_t n, int reps, double *best_ms) {
    float *a = bench_alloc_floats((size_t)(n * n), 1.0f, 1), *b = bench_alloc_floats((size_t)(n * n), 1.0f, 2);
    float *c = bench_alloc_floats((size_t)(n * n), 0.0f, 3);
    double best = 1e300;
    if (a && b && c) {
        int64_t sh[3] = {1, n, n};
        it_gemm_args g;
        memset(&g, 0, sizeof g);
        g.a = bench_desc(a, IT_DTYPE_FP32, 3, sh);
        g.b = bench_desc(b, IT_DTYPE_FP32, 3, sh);
        g.c = bench_desc(c, IT_DTYPE_FP32, 3, sh);
        g.alpha = 1.0f;
        const it_kernels *k = it_cpu_kernels();
        for (int r = 0; r <= reps; r++) {
            double t0 = bench_now_ms();
            if (k->gemm(NULL, &g)) {
                fprintf(stderr, "gemm peak: %s\n", it_last_error());
                best = 1e300;
                break;
            }
            double ms = bench_now_ms() - t0;
            if (r > 0 && ms < best) best = ms;
        }
    }
    free(a);
    free(b);
    free(c);
    if (best >= 1e300) return 0.0;
    if (best_ms) *best_ms = best;
    return 2.0 * (double)n * (double)n * (double)n / (best * 1e-3) / 1e9;
}

/* Which sgemm the CPU backend's gemm slot runs for fp32. */
static inline const char *bench_sgemm_name(void) {
    switch (it_cpu_sgemm_isa()) {
    case IT_CPU_SGEMM_AVX512: return "the CPU backend's AVX-512 sgemm (small products unpacked)";
    case IT_CPU_SGEMM_AVX2: return "the CPU backend's AVX2 sgemm (small products unpacked)";
    default: return "OpenBLAS";
    }
}

/* The machine's fp32 GEMM peak as this run sees it: with the training's thread count, the
 * best of a 2048^3 sgemm (5 calls) and a 1024^3 one (20 calls: on a busy machine a shorter
 * call is likelier to find every core free); and with one thread (1024^3, 10 calls), whose
 * figure times the thread count is the ceiling the cores would give a process that had them
 * to itself. Returns 0 on failure. */
static inline double bench_gemm_peaks(double *one_thread) {
    double ms, p = bench_gemm_peak(2048, 5, &ms), q = bench_gemm_peak(1024, 20, &ms);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* OpenBLAS's OpenMP build follows omp_get_max_threads() per call */
    *one_thread = bench_gemm_peak(1024, 10, &ms);
    omp_set_num_threads(threads);
    if (p <= 0 || q <= 0) return 0;
    return p > q ? p : q;
}

/* The 1-minute load average (from /proc/loadavg), or -1. */
static inline double bench_loadavg(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

#endif
