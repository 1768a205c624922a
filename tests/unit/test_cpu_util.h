/* Helpers shared by the CPU kernel tests: descriptors, element access in double, a fixed
 * random source and the OpenMP thread count (found at run time: the tests do not link
 * OpenMP themselves, but libinfinitrain loads it). */
#ifndef TEST_CPU_UTIL_H
#define TEST_CPU_UTIL_H

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/backend.h"
#include "it_test.h"

static const it_kernels *K;

/* xorshift64*: the same numbers on every run and platform. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline double urand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* A descriptor; strides NULL = contiguous. */
static inline it_tdesc mk(void *p, it_dtype dt, int nd, const int64_t *shape, const int64_t *strides) {
    it_tdesc t;
    memset(&t, 0, sizeof t);
    t.data = p;
    t.dtype = dt;
    t.ndim = nd;
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = strides ? strides[d] : s;
        s *= shape[d];
    }
    return t;
}

static inline int64_t t_numel(const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Elements the buffer behind t must hold (1 + the largest offset). */
static inline int64_t t_span(const it_tdesc *t) {
    int64_t s = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) return 0;
        s += (t->shape[d] - 1) * t->strides[d];
    }
    return s;
}

/* Offset of the row-major linear index `lin`. */
static inline int64_t t_off(const it_tdesc *t, int64_t lin) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (lin % t->shape[d]) * t->strides[d];
        lin /= t->shape[d];
    }
    return off;
}

static inline double raw_get(const void *p, it_dtype dt, int64_t off) {
    switch (dt) {
    case IT_DTYPE_FP32: return ((const float *)p)[off];
    case IT_DTYPE_FP64: return ((const double *)p)[off];
    case IT_DTYPE_BF16: return it_bf16_to_fp32(((const uint16_t *)p)[off]);
    case IT_DTYPE_FP16: return it_fp16_to_fp32(((const uint16_t *)p)[off]);
    case IT_DTYPE_I32: return ((const int32_t *)p)[off];
    case IT_DTYPE_I64: return (double)((const int64_t *)p)[off];
    default: return NAN;
    }
}

static inline void raw_set(void *p, it_dtype dt, int64_t off, double v) {
    switch (dt) {
    case IT_DTYPE_FP32: ((float *)p)[off] = (float)v; break;
    case IT_DTYPE_FP64: ((double *)p)[off] = v; break;
    case IT_DTYPE_BF16: ((uint16_t *)p)[off] = it_fp32_to_bf16((float)v); break;
    case IT_DTYPE_FP16: ((uint16_t *)p)[off] = it_fp32_to_fp16((float)v); break;
    case IT_DTYPE_I32: ((int32_t *)p)[off] = (int32_t)v; break;
    case IT_DTYPE_I64: ((int64_t *)p)[off] = (int64_t)v; break;
    default: break;
    }
}

/* Element `lin` (row-major over t's shape) as a double. */
static inline double get(const it_tdesc *t, int64_t lin) { return raw_get(t->data, t->dtype, t_off(t, lin)); }
static inline void set(const it_tdesc *t, int64_t lin, double v) { raw_set(t->data, t->dtype, t_off(t, lin), v); }

/* A buffer for t (its whole span), every slot random in [lo, hi); t->data is set. */
static inline void *alloc_rand(it_tdesc *t, double lo, double hi) {
    int64_t n = t_span(t);
    size_t es = it_dtype_size(t->dtype);
    void *p = malloc((size_t)(n > 0 ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) raw_set(p, t->dtype, i, lo + (urand() + 1.0) * 0.5 * (hi - lo));
    t->data = p;
    return p;
}

static inline void *alloc_fill(it_tdesc *t, double v) {
    int64_t n = t_span(t);
    size_t es = it_dtype_size(t->dtype);
    void *p = malloc((size_t)(n > 0 ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) raw_set(p, t->dtype, i, v);
    t->data = p;
    return p;
}

/* omp_set_num_threads / omp_get_max_threads from the OpenMP runtime libinfinitrain loaded. */
static inline void set_threads(int n) {
    void (*fn)(int) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    memcpy(&fn, &sym, sizeof fn);
    if (fn) fn(n);
}
static inline int max_threads(void) {
    int (*fn)(void) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    memcpy(&fn, &sym, sizeof fn);
    return fn ? fn() : 1;
}
static inline bool have_omp(void) { return dlsym(RTLD_DEFAULT, "omp_set_num_threads") != NULL; }

#endif
