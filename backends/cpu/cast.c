/* CPU cast, fill and strided copy for all 13 dtypes.
 *
 *   cast:         dst[i] = (dst.dtype) src[i]      same shape, any strides (src may broadcast)
 *   fill:         dst[i] = (dst.dtype) value       any strides
 *   copy_strided: dst[i] = src[i]                  same dtype and shape, any strides
 *
 * Conversion rules (backend.h): x -> bool is x != 0 (NaN is true); float -> integer
 * truncates toward zero, saturates at the target's range, NaN -> 0; integer -> integer wraps
 * modulo 2^bits (two's complement); integer -> float rounds to nearest even; bool -> anything
 * is 0 / 1 (any nonzero bool byte counts as true). fp16 / bf16 are read exactly as fp32; every
 * conversion to them rounds once, to nearest even: fp64 and 64-bit integers are rounded
 * directly (core/half.h), never through an fp32 that would round a second time. fp64 -> fp32
 * is C's conversion, which under IEEE 754 (Annex F, as GCC and Clang implement it) rounds to
 * nearest and overflows to Inf. No input reaches a C conversion whose result is out of range
 * (the float -> integer comparisons below run first), so no input has undefined behaviour.
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

#include "core/half.h"
#include "cpu/cpu_kernels.h"

/* Elements per chunk of work; tensors of more than one chunk run in parallel. */
#define IT_CAST_CHUNK ((int64_t)1 << 15)

/* ------------------------------------------------------------------------------------------
 * Element conversions. Every source is first read as one of five kinds: b (bool), u
 * (uint64_t: unsigned integers), i (int64_t: signed integers), f (float: bf16, fp16, fp32),
 * d (double: fp64). Then to_<dst>_<kind>() converts a kind to the destination's storage. */

static inline bool ld_boolean(uint8_t v) { return v != 0; }
static inline uint64_t ld_u8(uint8_t v) { return v; }
static inline int64_t ld_i8(int8_t v) { return v; }
static inline uint64_t ld_u16(uint16_t v) { return v; }
static inline int64_t ld_i16(int16_t v) { return v; }
static inline uint64_t ld_u32(uint32_t v) { return v; }
static inline int64_t ld_i32(int32_t v) { return v; }
static inline uint64_t ld_u64(uint64_t v) { return v; }
static inline int64_t ld_i64(int64_t v) { return v; }
static inline float ld_bf16(uint16_t v) { return it_bfloat_to_float(v); }
static inline float ld_fp16(uint16_t v) { return it_half_to_float(v); }
static inline float ld_fp32(float v) { return v; }
static inline double ld_fp64(double v) { return v; }

/* Two's complement reinterpretation of the low bits, written without implementation-defined
 * out-of-range conversions (compilers reduce each to a plain truncation). */
static inline int8_t wrap_i8(uint64_t u) {
    uint8_t v = (uint8_t)u;
    return v <= INT8_MAX ? (int8_t)v : (int8_t)((int)v - 256);
}
static inline int16_t wrap_i16(uint64_t u) {
    uint16_t v = (uint16_t)u;
    return v <= INT16_MAX ? (int16_t)v : (int16_t)((int32_t)v - 65536);
}
static inline int32_t wrap_i32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return v <= (uint32_t)INT32_MAX ? (int32_t)v : (int32_t)(v - UINT32_C(0x80000000)) + INT32_MIN;
}
static inline int64_t wrap_i64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : (int64_t)(u - UINT64_C(0x8000000000000000)) + INT64_MIN;
}

/* Unsigned integer targets; HI1 = 2^bits, exact in float and double. A float is converted by
 * C only inside (-1, 2^bits), where truncation is in range; NaN fails `v > -1` and gives 0. */
#define IT_UINT_CONVS(N, T, TMAX, HI1)                                                                                 \
    static inline T to_##N##_b(bool v) { return (T)v; }                                                                \
    static inline T to_##N##_u(uint64_t v) { return (T)v; }                                                            \
    static inline T to_##N##_i(int64_t v) { return (T)(uint64_t)v; }                                                   \
    static inline T to_##N##_f(float v) { return v > -1.0f ? (v < (float)(HI1) ? (T)v : (TMAX)) : 0; }                 \
    static inline T to_##N##_d(double v) { return v > -1.0 ? (v < (HI1) ? (T)v : (TMAX)) : 0; }

/* Signed integer targets; the range is [TMIN, -TMIN), both bounds exact powers of two. A
 * float is converted by C only inside it (truncation stays in range); below TMIN saturates
 * to TMIN (anything in (TMIN - 1, TMIN) would truncate to TMIN anyway). */
#define IT_SINT_CONVS(N, T, TMIN, TMAX, WRAP)                                                                          \
    static inline T to_##N##_b(bool v) { return (T)v; }                                                                \
    static inline T to_##N##_u(uint64_t v) { return WRAP(v); }                                                         \
    static inline T to_##N##_i(int64_t v) { return WRAP((uint64_t)v); }                                                \
    static inline T to_##N##_f(float v) {                                                                              \
        return v != v ? 0 : v >= -(float)(TMIN) ? (TMAX) : v < (float)(TMIN) ? (TMIN) : (T)v;                          \
    }                                                                                                                  \
    static inline T to_##N##_d(double v) {                                                                             \
        return v != v ? 0 : v >= -(double)(TMIN) ? (TMAX) : v < (double)(TMIN) ? (TMIN) : (T)v;                        \
    }

static inline uint8_t to_boolean_b(bool v) { return v; }
static inline uint8_t to_boolean_u(uint64_t v) { return v != 0; }
static inline uint8_t to_boolean_i(int64_t v) { return v != 0; }
static inline uint8_t to_boolean_f(float v) { return v != 0.0f; } /* NaN != 0 is true */
static inline uint8_t to_boolean_d(double v) { return v != 0.0; }

IT_UINT_CONVS(u8, uint8_t, UINT8_MAX, 256.0)
IT_SINT_CONVS(i8, int8_t, INT8_MIN, INT8_MAX, wrap_i8)
IT_UINT_CONVS(u16, uint16_t, UINT16_MAX, 65536.0)
IT_SINT_CONVS(i16, int16_t, INT16_MIN, INT16_MAX, wrap_i16)
IT_UINT_CONVS(u32, uint32_t, UINT32_MAX, 4294967296.0)
IT_SINT_CONVS(i32, int32_t, INT32_MIN, INT32_MAX, wrap_i32)
IT_UINT_CONVS(u64, uint64_t, UINT64_MAX, 18446744073709551616.0)
IT_SINT_CONVS(i64, int64_t, INT64_MIN, INT64_MAX, wrap_i64)

/* bf16: 64-bit integers need it_int_to_bfloat's single rounding (an int -> fp32 -> bf16
 * chain rounds twice once |v| > 2^24). */
static inline uint16_t to_bf16_b(bool v) { return v ? 0x3f80u : 0u; }
static inline uint16_t to_bf16_u(uint64_t v) { return it_int_to_bfloat(v, 0); }
static inline uint16_t to_bf16_i(int64_t v) { return it_int_to_bfloat(v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0); }
static inline uint16_t to_bf16_f(float v) { return it_float_to_bfloat(v); }
static inline uint16_t to_bf16_d(double v) { return it_double_to_bfloat(v); }

/* fp16: integers go through fp32 without double rounding: below 65520 they are exact in
 * fp32, and from 65520 up fp32 rounding cannot drop below 65520, so they become Inf. */
static inline uint16_t to_fp16_b(bool v) { return v ? 0x3c00u : 0u; }
static inline uint16_t to_fp16_u(uint64_t v) { return it_float_to_half((float)v); }
static inline uint16_t to_fp16_i(int64_t v) { return it_float_to_half((float)v); }
static inline uint16_t to_fp16_f(float v) { return it_float_to_half(v); }
static inline uint16_t to_fp16_d(double v) { return it_double_to_half(v); }

static inline float to_fp32_b(bool v) { return v ? 1.0f : 0.0f; }
static inline float to_fp32_u(uint64_t v) { return (float)v; }
static inline float to_fp32_i(int64_t v) { return (float)v; }
static inline float to_fp32_f(float v) { return v; }
static inline float to_fp32_d(double v) { return (float)v; }

static inline double to_fp64_b(bool v) { return v ? 1.0 : 0.0; }
static inline double to_fp64_u(uint64_t v) { return (double)v; }
static inline double to_fp64_i(int64_t v) { return (double)v; }
static inline double to_fp64_f(float v) { return v; }
static inline double to_fp64_d(double v) { return v; }

/* The 13 dtypes in enum order: X(name, enum, storage type, kind, extra...) ("boolean": the
 * token bool is a macro). Two copies,
 * because a list macro cannot expand itself from inside its own expansion. */
#define IT_FOR_SRC(X, ...)                                                                                             \
    X(boolean, IT_DTYPE_BOOL, uint8_t, b, __VA_ARGS__)                                                                 \
    X(u8, IT_DTYPE_U8, uint8_t, u, __VA_ARGS__)                                                                        \
    X(i8, IT_DTYPE_I8, int8_t, i, __VA_ARGS__)                                                                         \
    X(u16, IT_DTYPE_U16, uint16_t, u, __VA_ARGS__)                                                                     \
    X(i16, IT_DTYPE_I16, int16_t, i, __VA_ARGS__)                                                                      \
    X(u32, IT_DTYPE_U32, uint32_t, u, __VA_ARGS__)                                                                     \
    X(i32, IT_DTYPE_I32, int32_t, i, __VA_ARGS__)                                                                      \
    X(u64, IT_DTYPE_U64, uint64_t, u, __VA_ARGS__)                                                                     \
    X(i64, IT_DTYPE_I64, int64_t, i, __VA_ARGS__)                                                                      \
    X(bf16, IT_DTYPE_BF16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp16, IT_DTYPE_FP16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp32, IT_DTYPE_FP32, float, f, __VA_ARGS__)                                                                      \
    X(fp64, IT_DTYPE_FP64, double, d, __VA_ARGS__)
#define IT_FOR_DST(X, ...)                                                                                             \
    X(boolean, IT_DTYPE_BOOL, uint8_t, b, __VA_ARGS__)                                                                 \
    X(u8, IT_DTYPE_U8, uint8_t, u, __VA_ARGS__)                                                                        \
    X(i8, IT_DTYPE_I8, int8_t, i, __VA_ARGS__)                                                                         \
    X(u16, IT_DTYPE_U16, uint16_t, u, __VA_ARGS__)                                                                     \
    X(i16, IT_DTYPE_I16, int16_t, i, __VA_ARGS__)                                                                      \
    X(u32, IT_DTYPE_U32, uint32_t, u, __VA_ARGS__)                                                                     \
    X(i32, IT_DTYPE_I32, int32_t, i, __VA_ARGS__)                                                                      \
    X(u64, IT_DTYPE_U64, uint64_t, u, __VA_ARGS__)                                                                     \
    X(i64, IT_DTYPE_I64, int64_t, i, __VA_ARGS__)                                                                      \
    X(bf16, IT_DTYPE_BF16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp16, IT_DTYPE_FP16, uint16_t, f, __VA_ARGS__)                                                                   \
    X(fp32, IT_DTYPE_FP32, float, f, __VA_ARGS__)                                                                      \
    X(fp64, IT_DTYPE_FP64, double, d, __VA_ARGS__)

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
                DT y = to_##DN##_##SK(ld_##SN(x));                                                                     \
                memcpy(d + i * (int64_t)sizeof(DT), &y, sizeof y);                                                     \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ST x;                                                                                                  \
                memcpy(&x, s + i * ss, sizeof x);                                                                      \
                DT y = to_##DN##_##SK(ld_##SN(x));                                                                     \
                memcpy(d + i * ds, &y, sizeof y);                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }
#define IT_DEF_CASTS_TO(DN, DE, DT, DK, unused) IT_FOR_SRC(IT_DEF_CAST, DN, DT)
IT_FOR_DST(IT_DEF_CASTS_TO, 0)

#define IT_CAST_ENTRY(DN, DE, DT, DK, SN) [DE] = cast_##SN##_##DN,
#define IT_CAST_ROW(SN, SE, ST, SK, unused) [SE] = {IT_FOR_DST(IT_CAST_ENTRY, SN)},
/* cast_fns[src][dst] */
static const it_run_fn cast_fns[IT_DTYPE_COUNT][IT_DTYPE_COUNT] = {IT_FOR_SRC(IT_CAST_ROW, 0)};

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
        DT y = value.kind == IT_SCALAR_F64   ? to_##DN##_d(value.v.f64)                                                \
               : value.kind == IT_SCALAR_I64 ? to_##DN##_i(value.v.i64)                                                \
                                             : to_##DN##_u(value.v.u64);                                               \
        memcpy(out, &y, sizeof y);                                                                                     \
        break;                                                                                                         \
    }
static void scalar_to_bytes(it_scalar value, it_dtype dtype, void *out) {
    switch (dtype) { IT_FOR_DST(IT_FILL_CASE, 0) }
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
