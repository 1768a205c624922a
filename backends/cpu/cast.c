/* CPU cast, fill and strided copy for all 13 dtypes.
 *
 *   cast:         dst[i] = (dst.dtype) src[i]      same shape, any strides (src may broadcast)
 *   fill:         dst[i] = (dst.dtype) value       any strides
 *   copy_strided: dst[i] = src[i]                  same dtype and shape, any strides
 *
 * The conversion of one element (backend.h's rules) is it_sc_cvt_<src>_<dst>, in
 * include/infinitrain/scalar/it_scalar_cast.h, which the CUDA backend compiles too: this file
 * is the loops around it.
 *
 * Loop structure: the descriptors are turned into a byte-strided loop nest with size-1 dims
 * dropped and adjacent dims merged wherever both operands are contiguous across them, so a
 * contiguous tensor becomes one flat run whatever its ndim. The nest is walked in chunks of
 * IT_CAST_CHUNK elements of the linear index, in parallel (OpenMP) when there are several;
 * each chunk calls a per-(src, dst) inner function on runs of the innermost dim, which has a
 * contiguous path (`omp simd`: GCC's -O2 cost model would otherwise leave these loops
 * scalar, 3-6x slower for the fp16 / bf16 conversions) and a strided one. The results do not
 * depend on the thread count (every element is written once, from its own source element). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "infinitrain/scalar/it_scalar_cast.h"

/* Elements per chunk of work; tensors of more than one chunk run in parallel. */
#define IT_CAST_CHUNK ((int64_t)1 << 15)

/* ------------------------------------------------------------------------------------------
 * Inner functions: one run of n elements of the innermost dim; strides in bytes. */
typedef void (*it_run_fn)(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, const void *ctx);

/* cast_<src>_<dst>: loads and stores go through memcpy (plain moves once compiled) so that
 * no access depends on the buffer's alignment. */
#define IT_DEF_CAST(SN, SE, ST, SK, DN, DT)                                                                            \
    static void cast_##SN##_##DN(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, const void *ctx) {         \
        (void)ctx;                                                                                                     \
        if (ds == (int64_t)sizeof(DT) && ss == (int64_t)sizeof(ST)) {                                                  \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                                      \
                ST x;                                                                                                  \
                memcpy(&x, s + i * (int64_t)sizeof(ST), sizeof x);                                                     \
                DT y = it_sc_cvt_##SN##_##DN(x);                                                                       \
                memcpy(d + i * (int64_t)sizeof(DT), &y, sizeof y);                                                     \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ST x;                                                                                                  \
                memcpy(&x, s + i * ss, sizeof x);                                                                      \
                DT y = it_sc_cvt_##SN##_##DN(x);                                                                       \
                memcpy(d + i * ds, &y, sizeof y);                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }
#define IT_DEF_CASTS_TO(DN, DE, DT, DK, unused) IT_SC_FOR_SRC(IT_DEF_CAST, DN, DT)
IT_SC_FOR_DST(IT_DEF_CASTS_TO, 0)

#define IT_CAST_ENTRY(DN, DE, DT, DK, SN) [DE] = cast_##SN##_##DN,
#define IT_CAST_ROW(SN, SE, ST, SK, unused) [SE] = {IT_SC_FOR_DST(IT_CAST_ENTRY, SN)},
/* cast_fns[src][dst] */
static const it_run_fn cast_fns[IT_DTYPE_COUNT][IT_DTYPE_COUNT] = {IT_SC_FOR_SRC(IT_CAST_ROW, 0)};

/* copy_<bytes>: a run of same-size elements. ss == 0 (a broadcast source, or fill's value)
 * hoists the load so the store loop vectorizes. memmove, because an in-place call may pass
 * the same buffer as source and destination. */
#define IT_DEF_COPY(K, T)                                                                                              \
    static void copy_##K(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, const void *ctx) {                 \
        (void)ctx;                                                                                                     \
        if (ds == K && ss == K) {                                                                                      \
            if (d != s) memmove(d, s, (size_t)(n * K));                                                                \
        } else if (ss == 0) {                                                                                          \
            T v;                                                                                                       \
            memcpy(&v, s, K);                                                                                          \
            if (ds == K) {                                                                                             \
                _Pragma("omp simd") for (int64_t i = 0; i < n; i++) memcpy(d + i * K, &v, K);                          \
            } else {                                                                                                   \
                for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, &v, K);                                             \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, K);                                         \
        }                                                                                                              \
    }
IT_DEF_COPY(1, uint8_t)
IT_DEF_COPY(2, uint16_t)
IT_DEF_COPY(4, uint32_t)
IT_DEF_COPY(8, uint64_t)

static it_run_fn copy_fn(size_t esize) {
    switch (esize) {
    case 1: return copy_1;
    case 2: return copy_2;
    case 4: return copy_4;
    default: return copy_8;
    }
}

/* ------------------------------------------------------------------------------------------
 * The loop nest over a destination and a source (strides in bytes, innermost dim last). */
typedef struct it_loop {
    int ndim; /* >= 1 */
    int64_t numel;
    int64_t shape[IT_MAX_DIMS];
    int64_t dstride[IT_MAX_DIMS], sstride[IT_MAX_DIMS];
    char *d;
    const char *s;
    bool parallel;
} it_loop;

/* Build the nest from a shape and element strides of both operands: drop size-1 dims, merge
 * a dim into the next outer one when both operands step contiguously across the pair. */
static void loop_init(it_loop *L, int ndim, const int64_t *shape, char *d, const int64_t *dstrides, size_t dsize,
                      const char *s, const int64_t *sstrides, size_t ssize, int64_t numel) {
    int m = 0;
    bool dst_overlaps = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        int64_t ds = dstrides[i] * (int64_t)dsize, ss = sstrides[i] * (int64_t)ssize;
        if (ds == 0) dst_overlaps = true;
        if (m > 0 && L->dstride[m - 1] == ds * shape[i] && L->sstride[m - 1] == ss * shape[i]) {
            L->shape[m - 1] *= shape[i];
            L->dstride[m - 1] = ds;
            L->sstride[m - 1] = ss;
        } else {
            L->shape[m] = shape[i];
            L->dstride[m] = ds;
            L->sstride[m] = ss;
            m++;
        }
    }
    if (m == 0) { /* one element */
        L->shape[0] = 1;
        L->dstride[0] = (int64_t)dsize;
        L->sstride[0] = (int64_t)ssize;
        m = 1;
    }
    L->ndim = m;
    L->numel = numel;
    L->d = d;
    L->s = s;
    /* A destination with stride 0 on a dim of size > 1 writes some elements more than once
     * (which source wins is the last in index order): keep that serial and deterministic. */
    L->parallel = numel > IT_CAST_CHUNK && !dst_overlaps;
}

/* Elements [begin, end) of the linear (row-major) index. Positions are kept as byte offsets
 * (integers), not pointers: stepping a dim past its end may leave the buffer for a moment,
 * which pointer arithmetic must not do. */
static void loop_run_range(const it_loop *L, int64_t begin, int64_t end, it_run_fn fn, const void *ctx) {
    const int last = L->ndim - 1;
    int64_t idx[IT_MAX_DIMS];
    int64_t doff = 0, soff = 0;
    int64_t rem = begin;
    for (int i = last; i >= 0; i--) {
        idx[i] = rem % L->shape[i];
        rem /= L->shape[i];
        doff += idx[i] * L->dstride[i];
        soff += idx[i] * L->sstride[i];
    }
    int64_t pos = begin;
    for (;;) {
        int64_t len = L->shape[last] - idx[last];
        if (len > end - pos) len = end - pos;
        fn(L->d + doff, L->dstride[last], L->s + soff, L->sstride[last], len, ctx);
        pos += len;
        if (pos >= end) break;
        /* the run ended at the end of the innermost dim: back to its start, carry outward */
        doff -= idx[last] * L->dstride[last];
        soff -= idx[last] * L->sstride[last];
        idx[last] = 0;
        for (int i = last - 1; i >= 0; i--) {
            doff += L->dstride[i];
            soff += L->sstride[i];
            if (++idx[i] < L->shape[i]) break;
            doff -= L->shape[i] * L->dstride[i];
            soff -= L->shape[i] * L->sstride[i];
            idx[i] = 0;
        }
    }
}

static void loop_run(const it_loop *L, it_run_fn fn, const void *ctx) {
    if (!L->parallel) {
        loop_run_range(L, 0, L->numel, fn, ctx);
        return;
    }
    const int64_t nchunks = (L->numel + IT_CAST_CHUNK - 1) / IT_CAST_CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t begin = c * IT_CAST_CHUNK;
        int64_t end = begin + IT_CAST_CHUNK < L->numel ? begin + IT_CAST_CHUNK : L->numel;
        loop_run_range(L, begin, end, fn, ctx);
    }
}

/* ------------------------------------------------------------------------------------------
 * Descriptor checks. */

static void format_shape(char *buf, size_t cap, const it_tdesc *t) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Validates one descriptor (dtype, ndim, shape, strides, extent) and returns its element
 * count in *numel. */
static it_status check_desc(const char *fn, const char *which, const it_tdesc *t, int64_t *numel) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s descriptor is NULL", fn, which);
    if (!it_dtype_valid((int)t->dtype))
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %d is not a valid it_dtype (0..%d)", fn, which, (int)t->dtype,
                        IT_DTYPE_COUNT - 1);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s ndim %d is outside 0..%d", fn, which, t->ndim, IT_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s shape[%d] = %lld is negative", fn, which, i,
                            (long long)t->shape[i]);
        if (t->strides[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s strides[%d] = %lld is negative", fn, which, i,
                            (long long)t->strides[i]);
    }
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            n = 0;
            break;
        }
        if (n > INT64_MAX / t->shape[i])
            return it_error(IT_ERR_INVALID_ARG, "%s: %s element count overflows int64 at shape[%d] = %lld", fn, which,
                            i, (long long)t->shape[i]);
        n *= t->shape[i];
    }
    if (n > 0) {
        /* Byte offsets must fit an int64: the loops compute offset + stride * shape (one
         * past the end of a dim) in bytes, so that is what is bounded. */
        const int64_t esize = (int64_t)it_dtype_size(t->dtype);
        int64_t span = 0;
        for (int i = 0; i < t->ndim; i++) {
            if (t->shape[i] > 1 && t->strides[i] > 0 && t->shape[i] > (INT64_MAX / esize - span) / t->strides[i])
                return it_error(IT_ERR_INVALID_ARG, "%s: %s byte extent overflows int64 at strides[%d] = %lld", fn,
                                which, i, (long long)t->strides[i]);
            span += (t->shape[i] - 1) * t->strides[i];
        }
        if (t->data == NULL)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s data is NULL for %lld elements", fn, which, (long long)n);
    }
    *numel = n;
    return IT_OK;
}

static it_status check_same_shape(const char *fn, const it_tdesc *src, const it_tdesc *dst) {
    bool same = src->ndim == dst->ndim;
    for (int i = 0; same && i < src->ndim; i++) same = src->shape[i] == dst->shape[i];
    if (same) return IT_OK;
    char a[192], b[192];
    format_shape(a, sizeof a, src);
    format_shape(b, sizeof b, dst);
    return it_error(IT_ERR_INVALID_ARG, "%s: shape mismatch: src %s (ndim %d), dst %s (ndim %d)", fn, a, src->ndim, b,
                    dst->ndim);
}

/* ------------------------------------------------------------------------------------------
 * The slots. */

it_status it_cpu_copy_strided(it_stream *stream, const it_tdesc *src, it_tdesc *dst) {
    (void)stream;
    int64_t ns, nd;
    it_status st;
    if ((st = check_desc(__func__, "src", src, &ns)) != IT_OK) return st;
    if ((st = check_desc(__func__, "dst", dst, &nd)) != IT_OK) return st;
    if (src->dtype != dst->dtype)
        return it_error(IT_ERR_INVALID_ARG, "%s: dtype mismatch: src %s, dst %s (use cast to convert)", __func__,
                        it_dtype_name(src->dtype), it_dtype_name(dst->dtype));
    if ((st = check_same_shape(__func__, src, dst)) != IT_OK) return st;
    if (nd == 0) return IT_OK;
    const size_t es = it_dtype_size(dst->dtype);
    it_loop L;
    loop_init(&L, dst->ndim, dst->shape, (char *)dst->data, dst->strides, es, (const char *)src->data, src->strides, es,
              nd);
    loop_run(&L, copy_fn(es), NULL);
    return IT_OK;
}

it_status it_cpu_cast(it_stream *stream, const it_tdesc *src, it_tdesc *dst) {
    (void)stream;
    int64_t ns, nd;
    it_status st;
    if ((st = check_desc(__func__, "src", src, &ns)) != IT_OK) return st;
    if ((st = check_desc(__func__, "dst", dst, &nd)) != IT_OK) return st;
    if ((st = check_same_shape(__func__, src, dst)) != IT_OK) return st;
    if (nd == 0) return IT_OK;
    /* Same dtype is a bit-exact copy (NaN payloads untouched), except bool, whose bytes are
     * normalized to 0 / 1 by the conversion. */
    const bool plain_copy = src->dtype == dst->dtype && dst->dtype != IT_DTYPE_BOOL;
    const size_t ss = it_dtype_size(src->dtype), ds = it_dtype_size(dst->dtype);
    it_loop L;
    loop_init(&L, dst->ndim, dst->shape, (char *)dst->data, dst->strides, ds, (const char *)src->data, src->strides, ss,
              nd);
    loop_run(&L, plain_copy ? copy_fn(ds) : cast_fns[src->dtype][dst->dtype], NULL);
    return IT_OK;
}

/* value converted to dtype's storage, by the same rules as cast (integers exactly). */
#define IT_FILL_CASE(DN, DE, DT, DK, unused)                                                                           \
    case DE: {                                                                                                         \
        DT y = value.kind == IT_SCALAR_F64   ? it_sc_to_##DN##_d(value.v.f64)                                          \
               : value.kind == IT_SCALAR_I64 ? it_sc_to_##DN##_i(value.v.i64)                                          \
                                             : it_sc_to_##DN##_u(value.v.u64);                                         \
        memcpy(out, &y, sizeof y);                                                                                     \
        break;                                                                                                         \
    }
static void scalar_to_bytes(it_scalar value, it_dtype dtype, void *out) {
    switch (dtype) { IT_SC_FOR_DST(IT_FILL_CASE, 0) }
}

it_status it_cpu_fill(it_stream *stream, it_tdesc *dst, it_scalar value) {
    (void)stream;
    int64_t nd;
    it_status st;
    if ((st = check_desc(__func__, "dst", dst, &nd)) != IT_OK) return st;
    if (value.kind != IT_SCALAR_F64 && value.kind != IT_SCALAR_I64 && value.kind != IT_SCALAR_U64)
        return it_error(IT_ERR_INVALID_ARG, "%s: value kind %d is not an it_scalar_kind (0..2)", __func__,
                        (int)value.kind);
    if (nd == 0) return IT_OK;
    uint64_t bytes = 0; /* the element, in dst's storage; aligned for every element size */
    scalar_to_bytes(value, dst->dtype, &bytes);
    /* dst dims with stride 0 write the same place with the same value: leave them out, so
     * that no element is written twice (and the loop may run in parallel). */
    int ndim = 0;
    int64_t shape[IT_MAX_DIMS], strides[IT_MAX_DIMS], n = 1;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->strides[i] == 0) continue;
        shape[ndim] = dst->shape[i];
        strides[ndim++] = dst->strides[i];
        n *= dst->shape[i];
    }
    /* The source: a broadcast (all strides 0) of the converted element. */
    const int64_t zero[IT_MAX_DIMS] = {0};
    const size_t es = it_dtype_size(dst->dtype);
    it_loop L;
    loop_init(&L, ndim, shape, (char *)dst->data, strides, es, (const char *)&bytes, zero, es, n);
    loop_run(&L, copy_fn(es), NULL);
    return IT_OK;
}
