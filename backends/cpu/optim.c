/* Optimizer steps on contiguous flat tensors of equal length (any shape, row-major
 * contiguous): SGD and torch 1.13's Adam / AdamW. The element updates and the scalars of a
 * step (formed in double as torch forms them, from the hyperparameters' shortest decimals,
 * then rounded once to the tensor's type) are include/infinitrain/scalar/it_scalar_adam.h's,
 * which the CUDA backend compiles too; the order of operations is written out there. This
 * file is the checks and the loops. Elements are independent: results do not depend on the
 * thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu_util.h"
#include "infinitrain/scalar/it_scalar_adam.h"
#include "infinitrain/scalar/it_scalar_cast.h"

#define PAR_MIN 32768 /* elements below which the kernel stays on the calling thread */

static it_status check_flat(const char *kernel, const char *name, const it_tdesc *t, int64_t *n) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d outside [0, %d]", kernel, name, t->ndim, IT_MAX_DIMS);
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld is negative", kernel, name, d,
                            (long long)t->shape[d]);
        if (t->shape[d] != 1 && t->strides[d] != expect)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s is not contiguous (strides[%d] = %lld, expected %lld)", kernel,
                            name, d, (long long)t->strides[d], (long long)expect);
        expect *= t->shape[d];
    }
    *n = expect;
    if (expect > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s.data is NULL", kernel, name);
    return IT_OK;
}

/* t is flat, of p's length and dtype. */
static it_status check_like(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *p, int64_t n) {
    int64_t m;
    it_status st;
    if ((st = check_flat(kernel, name, t, &m))) return st;
    if (m != n)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s has %lld elements, param has %lld", kernel, name, (long long)m,
                        (long long)n);
    return it_cpu_check_dtype(kernel, name, t, "param", p->dtype);
}

static it_status check_param(const char *kernel, const it_tdesc *p, int64_t *n) {
    it_status st;
    if ((st = check_flat(kernel, "param", p, n))) return st;
    return it_cpu_check_fp32_fp64(kernel, p);
}

/* param (n) -= lr * grad_scale * grad (n) */
it_status it_cpu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    (void)s;
    int64_t n;
    it_status st;
    if ((st = check_param("sgd_step", param, &n)) || (st = check_like("sgd_step", "grad", grad, param, n))) return st;
    double nlr = -it_f32_as_decimal(lr);
    if (param->dtype == IT_DTYPE_FP32) {
        float *p = param->data, a = (float)nlr, gs = grad_scale;
        const float *g = grad->data;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) p[i] = it_sc_sgd_f32(p[i], g[i], gs, a);
    } else {
        double *p = param->data, a = nlr, gs = (double)grad_scale;
        const double *g = grad->data;
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) p[i] = it_sc_sgd_f64(p[i], g[i], gs, a);
    }
    return IT_OK;
}

#define CHUNK 4096 /* elements per parallel task */

/* Calls CALL(mode, ...) with the step's weight-decay mode as a constant: each mode is its own
 * loop (no branches inside, so the loop vectorizes when the build passes -fno-math-errno;
 * sqrtf stays a call otherwise). */
#define ADAM_BY_MODE(c, fn, ...)                                                                                       \
    do {                                                                                                               \
        if ((c).mode == IT_SC_WD_DECOUPLED)                                                                            \
            fn(c, IT_SC_WD_DECOUPLED, __VA_ARGS__);                                                                    \
        else if ((c).mode == IT_SC_WD_COUPLED)                                                                         \
            fn(c, IT_SC_WD_COUPLED, __VA_ARGS__);                                                                      \
        else                                                                                                           \
            fn(c, IT_SC_WD_NONE, __VA_ARGS__);                                                                         \
    } while (0)

/* Chunks of CHUNK elements in parallel, [i0, i1) each. */
#define FOR_CHUNKS(n, body)                                                                                            \
    do {                                                                                                               \
        int64_t tasks_ = ((n) + CHUNK - 1) / CHUNK;                                                                    \
        _Pragma("omp parallel for schedule(static) if ((n) >= PAR_MIN)") for (int64_t t_ = 0; t_ < tasks_; t_++) {     \
            int64_t i0 = t_ * CHUNK, i1 = i0 + CHUNK < (n) ? i0 + CHUNK : (n);                                         \
            body;                                                                                                      \
        }                                                                                                              \
    } while (0)

#define DEFINE_ADAM(T, SFX, CT)                                                                                        \
    ALWAYS_INLINE void adam_chunk_##SFX(const CT c, int mode, T *p, const T *gr, T *m, T *v, int64_t i0, int64_t i1) { \
        _Pragma("omp simd") for (int64_t i = i0; i < i1; i++) it_sc_adam_##SFX(c, mode, &p[i], gr[i], &m[i], &v[i]);   \
    }                                                                                                                  \
    static void adam_##SFX(const CT c, T *p, const T *gr, T *m, T *v, int64_t n) {                                     \
        FOR_CHUNKS(n, ADAM_BY_MODE(c, adam_chunk_##SFX, p, gr, m, v, i0, i1));                                         \
    }

DEFINE_ADAM(float, f32, it_sc_adam_f32c)
DEFINE_ADAM(double, f64, it_sc_adam_f64c)

/* adam_step_round: each element updated, then rounded into low by cast()'s own conversion of
 * one element, in the same vector loop. */
#define DEFINE_ADAM_ROUND(T, SFX, CT, SN, LN)                                                                          \
    ALWAYS_INLINE void adam_round_chunk_##SFX##_##LN(const CT c, int mode, T *p, const T *gr, T *m, T *v,              \
                                                     uint16_t *low, int64_t i0, int64_t i1) {                          \
        _Pragma("omp simd") for (int64_t i = i0; i < i1; i++) {                                                        \
            it_sc_adam_##SFX(c, mode, &p[i], gr[i], &m[i], &v[i]);                                                     \
            low[i] = it_sc_cvt_##SN##_##LN(p[i]);                                                                      \
        }                                                                                                              \
    }                                                                                                                  \
    static void adam_round_##SFX##_##LN(const CT c, T *p, const T *gr, T *m, T *v, uint16_t *low, int64_t n) {         \
        FOR_CHUNKS(n, ADAM_BY_MODE(c, adam_round_chunk_##SFX##_##LN, p, gr, m, v, low, i0, i1));                       \
    }
DEFINE_ADAM_ROUND(float, f32, it_sc_adam_f32c, fp32, bf16)
DEFINE_ADAM_ROUND(float, f32, it_sc_adam_f32c, fp32, fp16)
DEFINE_ADAM_ROUND(double, f64, it_sc_adam_f64c, fp64, bf16)
DEFINE_ADAM_ROUND(double, f64, it_sc_adam_f64c, fp64, fp16)

/* One Adam/AdamW step on param, grad, m, v (n), in it_scalar_adam.h's order. */
it_status it_cpu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                           it_tdesc *v) {
    (void)s;
    const char *k = "adam_step";
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", k);
    int64_t n;
    it_status st;
    if ((st = check_param(k, param, &n)) || (st = check_like(k, "grad", grad, param, n)) ||
        (st = check_like(k, "m", m, param, n)) || (st = check_like(k, "v", v, param, n)))
        return st;
    if (args->step < 1) return it_error(IT_ERR_INVALID_ARG, "%s: step = %lld, must be >= 1", k, (long long)args->step);
    if (n == 0) return IT_OK;
    it_sc_adam_f64c c = it_sc_adam_make(args);
    if (param->dtype == IT_DTYPE_FP32)
        adam_f32(it_sc_adam_to_f32(&c), param->data, grad->data, m->data, v->data, n);
    else
        adam_f64(c, param->data, grad->data, m->data, v->data, n);
    return IT_OK;
}

/* adam_step, then low = the updated param rounded as cast() rounds it (backend.h). */
it_status it_cpu_adam_step_round(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                 it_tdesc *m, it_tdesc *v, it_tdesc *low) {
    (void)s;
    const char *k = "adam_step_round";
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", k);
    int64_t n, nl;
    it_status st;
    if ((st = check_param(k, param, &n)) || (st = check_like(k, "grad", grad, param, n)) ||
        (st = check_like(k, "m", m, param, n)) || (st = check_like(k, "v", v, param, n)) ||
        (st = check_flat(k, "low", low, &nl)))
        return st;
    if (nl != n)
        return it_error(IT_ERR_INVALID_ARG, "%s: low has %lld elements, param has %lld", k, (long long)nl,
                        (long long)n);
    if (low->dtype != IT_DTYPE_BF16 && low->dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_INVALID_ARG, "%s: low is %s, expected bfloat16 or float16", k,
                        it_dtype_name(low->dtype));
    if (args->step < 1) return it_error(IT_ERR_INVALID_ARG, "%s: step = %lld, must be >= 1", k, (long long)args->step);
    if (n == 0) return IT_OK;
    it_sc_adam_f64c c = it_sc_adam_make(args);
    bool bf = low->dtype == IT_DTYPE_BF16;
    if (param->dtype == IT_DTYPE_FP32) {
        it_sc_adam_f32c c32 = it_sc_adam_to_f32(&c);
        if (bf)
            adam_round_f32_bf16(c32, param->data, grad->data, m->data, v->data, low->data, n);
        else
            adam_round_f32_fp16(c32, param->data, grad->data, m->data, v->data, low->data, n);
    } else if (bf) {
        adam_round_f64_bf16(c, param->data, grad->data, m->data, v->data, low->data, n);
    } else {
        adam_round_f64_fp16(c, param->data, grad->data, m->data, v->data, low->data, n);
    }
    return IT_OK;
}
