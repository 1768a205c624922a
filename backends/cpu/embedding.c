/* Embedding lookup and its scatter-add backward.
 *
 *   fwd: idx (N) int32/int64, weight (V, C) -> out (N, C),   out[n, :] = weight[idx[n], :]
 *   bwd: dweight (V, C) += dout[n, :] at row idx[n], for n = 0..N-1 in order
 *
 * Every index is checked against [0, V) before anything is written. The backward is
 * parallel over blocks of columns: each dweight element is updated by one thread, in
 * increasing n, so the result is the sequential one for any thread count (no atomics). */
#include "cpu/cpu_util.h"

#define PAR_MIN 32768 /* elements below which the kernel stays on the calling thread */
#define COL_BLOCK 16  /* columns per backward task (one 64-byte line of fp32) */

static it_status check_desc(const char *kernel, const char *name, const it_tdesc *t, int ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim != ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be %d-D, got ndim %d", kernel, name, ndim, t->ndim);
    return it_cpu_check_layout(kernel, name, t);
}

static inline int64_t index_at(const it_tdesc *idx, int64_t n) {
    int64_t off = n * idx->strides[0];
    return idx->dtype == IT_DTYPE_I32 ? (int64_t)((const int32_t *)idx->data)[off] : ((const int64_t *)idx->data)[off];
}

/* idx (N) int32/int64 with every value in [0, V). */
static it_status check_idx(const char *kernel, const it_tdesc *idx, int64_t V) {
    if (idx->dtype != IT_DTYPE_I32 && idx->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "%s: idx dtype %s is not int32 or int64", kernel,
                        it_dtype_name(idx->dtype));
    for (int64_t n = 0; n < idx->shape[0]; n++) {
        int64_t v = index_at(idx, n);
        if (v < 0 || v >= V)
            return it_error(IT_ERR_INVALID_ARG, "%s: idx[%lld] = %lld outside [0, %lld)", kernel, (long long)n,
                            (long long)v, (long long)V);
    }
    return IT_OK;
}

/* Common checks: table (V, C), rows (N, C) with N = idx's length, same dtype. */
static it_status check_args(const char *kernel, const it_tdesc *idx, const it_tdesc *table, const char *tname,
                            const it_tdesc *rows, const char *rname) {
    it_status st;
    if ((st = check_desc(kernel, "idx", idx, 1)) || (st = check_desc(kernel, tname, table, 2)) ||
        (st = check_desc(kernel, rname, rows, 2)))
        return st;
    if (rows->shape[0] != idx->shape[0] || rows->shape[1] != table->shape[1])
        return it_error(IT_ERR_INVALID_ARG,
                        "%s: %s is (%lld, %lld), expected (%lld, %lld) from idx (%lld) and %s (%lld, %lld)", kernel,
                        rname, (long long)rows->shape[0], (long long)rows->shape[1], (long long)idx->shape[0],
                        (long long)table->shape[1], (long long)idx->shape[0], tname, (long long)table->shape[0],
                        (long long)table->shape[1]);
    return it_cpu_check_dtype(kernel, rname, rows, tname, table->dtype);
}

/* idx (N), weight (V, C) -> out (N, C): a row gather (any element type of 2, 4 or 8 bytes
 * that is a float: fp32, fp64, bf16, fp16). */
it_status it_cpu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    (void)s;
    it_status st;
    if ((st = check_args("embedding_fwd", idx, weight, "weight", out, "out"))) return st;
    it_dtype dt = weight->dtype;
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_FP64 && dt != IT_DTYPE_BF16 && dt != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "embedding_fwd: dtype %s not supported", it_dtype_name(dt));
    if ((st = check_idx("embedding_fwd", idx, weight->shape[0]))) return st;
    int64_t N = out->shape[0], C = out->shape[1];
    if (N == 0 || C == 0) return IT_OK;
    size_t es = it_dtype_size(dt);
    const char *w = weight->data;
    char *o = out->data;
    int64_t wr = weight->strides[0], wc = weight->strides[1], orow = out->strides[0], oc = out->strides[1];
#pragma omp parallel for schedule(static) if (N * C >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const char *src = w + (size_t)(index_at(idx, n) * wr) * es;
        char *dst = o + (size_t)(n * orow) * es;
        if ((wc == 1 || C == 1) && (oc == 1 || C == 1)) {
            memcpy(dst, src, (size_t)C * es);
        } else {
            for (int64_t c = 0; c < C; c++) memcpy(dst + (size_t)(c * oc) * es, src + (size_t)(c * wc) * es, es);
        }
    }
    return IT_OK;
}

#define DEFINE_BWD(T, SFX)                                                                                             \
    static void bwd_##SFX(const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {                              \
        int64_t N = dout->shape[0], C = dout->shape[1], blocks = (C + COL_BLOCK - 1) / COL_BLOCK;                      \
        const T *g = dout->data;                                                                                       \
        T *dw = dweight->data;                                                                                         \
        int64_t gr = dout->strides[0], gc = dout->strides[1], wr = dweight->strides[0], wc = dweight->strides[1];      \
        _Pragma("omp parallel for schedule(static) if (N * C >= PAR_MIN)") for (int64_t b = 0; b < blocks; b++) {      \
            int64_t c0 = b * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;                                  \
            for (int64_t n = 0; n < N; n++) {                                                                          \
                const T *src = g + n * gr;                                                                             \
                T *dst = dw + index_at(idx, n) * wr;                                                                   \
                if (gc == 1 && wc == 1) {                                                                              \
                    _Pragma("omp simd") for (int64_t c = c0; c < c1; c++) dst[c] += src[c];                            \
                } else {                                                                                               \
                    for (int64_t c = c0; c < c1; c++) dst[c * wc] += src[c * gc];                                      \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }

DEFINE_BWD(float, f32)
DEFINE_BWD(double, f64)

/* dweight (V, C) += scatter of dout (N, C) rows by idx (N), in increasing n. */
it_status it_cpu_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {
    (void)s;
    it_status st;
    if ((st = check_args("embedding_bwd", idx, dweight, "dweight", dout, "dout"))) return st;
    it_dtype dt = dweight->dtype;
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "embedding_bwd: dtype %s not supported", it_dtype_name(dt));
    if ((st = it_cpu_check_writable("embedding_bwd", "dweight", dweight)) ||
        (st = check_idx("embedding_bwd", idx, dweight->shape[0])))
        return st;
    if (dout->shape[0] == 0 || dout->shape[1] == 0) return IT_OK;
    if (dt == IT_DTYPE_FP32)
        bwd_f32(idx, dout, dweight);
    else
        bwd_f64(idx, dout, dweight);
    return IT_OK;
}
