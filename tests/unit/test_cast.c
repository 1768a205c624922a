/* cast, fill and copy_strided of the CPU kernel table, for all 13 x 13 dtype pairs, checked
 * element by element against a reference written here: every element is decoded from its
 * IEEE / two's complement fields into an exact value (long double holds every int64, uint64
 * and double exactly; __int128 every integer), and the expected result follows the rules of
 * backend.h spelled out directly (truncate, saturate, wrap modulo 2^bits, round to nearest
 * even with rintl at the target's precision). Outputs sit between sentinel bytes that must
 * stay untouched. */
#include <float.h>
#include <stdint.h>

#include "infinitrain/backend.h"
#include "infinitrain/dtype.h"
#include "it_test.h"

#define NT IT_DTYPE_COUNT
#define SENTINEL 0xa5

static const it_kernels *K;

/* ------------------------------------------------------------------ the reference */

static const struct {
    size_t size;
    int bits; /* integers: width; floats: significand bits p */
    bool is_signed, is_float;
    int emin, emax; /* floats: minimum normal exponent, maximum exponent */
    const char *name;
} T[NT] = {
    [IT_DTYPE_BOOL] = {1, 1, false, false, 0, 0, "bool"},
    [IT_DTYPE_U8] = {1, 8, false, false, 0, 0, "u8"},
    [IT_DTYPE_I8] = {1, 8, true, false, 0, 0, "i8"},
    [IT_DTYPE_U16] = {2, 16, false, false, 0, 0, "u16"},
    [IT_DTYPE_I16] = {2, 16, true, false, 0, 0, "i16"},
    [IT_DTYPE_U32] = {4, 32, false, false, 0, 0, "u32"},
    [IT_DTYPE_I32] = {4, 32, true, false, 0, 0, "i32"},
    [IT_DTYPE_U64] = {8, 64, false, false, 0, 0, "u64"},
    [IT_DTYPE_I64] = {8, 64, true, false, 0, 0, "i64"},
    [IT_DTYPE_BF16] = {2, 8, true, true, -126, 127, "bf16"},
    [IT_DTYPE_FP16] = {2, 11, true, true, -14, 15, "fp16"},
    [IT_DTYPE_FP32] = {4, 24, true, true, -126, 127, "fp32"},
    [IT_DTYPE_FP64] = {8, 53, true, true, -1022, 1023, "fp64"},
};

/* An exact value: an integer, or a float (possibly +-Inf), or NaN with a sign. */
typedef struct aval {
    bool is_int, is_nan, neg_nan;
    __int128 i;
    long double f;
} aval;

static aval a_int(__int128 i) { return (aval){.is_int = true, .i = i}; }
static aval a_float(long double f) {
    if (isnan(f)) return (aval){.is_nan = true, .neg_nan = signbit(f) != 0};
    return (aval){.f = f};
}

/* Fields of a small float (bits: mantissa width, bias) into its value. */
static aval decode_small(uint16_t h, int mbits, int ebits) {
    int bias = (1 << (ebits - 1)) - 1, emax_field = (1 << ebits) - 1;
    int sign = h >> 15, exp = (h >> mbits) & emax_field, man = h & ((1 << mbits) - 1);
    if (exp == emax_field && man) return (aval){.is_nan = true, .neg_nan = sign};
    long double v = exp == emax_field ? INFINITY
                    : exp == 0        ? ldexpl(man, 1 - bias - mbits)
                                      : ldexpl((1 << mbits) + man, exp - bias - mbits);
    return a_float(sign ? -v : v);
}

static aval decode(it_dtype t, const void *p) {
    switch (t) {
    case IT_DTYPE_BOOL: return a_int(*(const uint8_t *)p != 0);
    case IT_DTYPE_U8: return a_int(*(const uint8_t *)p);
    case IT_DTYPE_I8: return a_int(*(const int8_t *)p);
    case IT_DTYPE_U16: return a_int(*(const uint16_t *)p);
    case IT_DTYPE_I16: return a_int(*(const int16_t *)p);
    case IT_DTYPE_U32: return a_int(*(const uint32_t *)p);
    case IT_DTYPE_I32: return a_int(*(const int32_t *)p);
    case IT_DTYPE_U64: return a_int(*(const uint64_t *)p);
    case IT_DTYPE_I64: return a_int(*(const int64_t *)p);
    case IT_DTYPE_BF16: return decode_small(*(const uint16_t *)p, 7, 8);
    case IT_DTYPE_FP16: return decode_small(*(const uint16_t *)p, 10, 5);
    case IT_DTYPE_FP32: return a_float(*(const float *)p);
    case IT_DTYPE_FP64: return a_float(*(const double *)p);
    }
    return a_int(0);
}

/* Round to the float format t, to nearest even; past the range -> Inf. */
static long double ref_round(long double x, it_dtype t) {
    if (x == 0 || isinf(x)) return x;
    int e;
    frexpl(fabsl(x), &e);
    int lead = e - 1 < T[t].emin ? T[t].emin : e - 1;
    long double ulp = ldexpl(1.0L, lead - (T[t].bits - 1));
    long double r = rintl(fabsl(x) / ulp) * ulp;
    if (r >= ldexpl(1.0L, T[t].emax + 1)) r = INFINITY;
    return copysignl(r, x);
}

/* Integer v modulo 2^bits, as t's two's complement value. */
static __int128 wrap(__int128 v, it_dtype t) {
    unsigned __int128 m = (unsigned __int128)1 << T[t].bits;
    unsigned __int128 u = (unsigned __int128)v & (m - 1);
    if (T[t].is_signed && u >= m / 2) return (__int128)u - (__int128)m;
    return (__int128)u;
}

static __int128 int_min(it_dtype t) { return T[t].is_signed ? -((__int128)1 << (T[t].bits - 1)) : 0; }
static __int128 int_max(it_dtype t) {
    return T[t].is_signed ? ((__int128)1 << (T[t].bits - 1)) - 1 : ((__int128)1 << T[t].bits) - 1;
}

/* What dst dtype t must hold for source value v (backend.h's cast rules). */
static aval expect(aval v, it_dtype t) {
    if (t == IT_DTYPE_BOOL) return a_int(v.is_int ? v.i != 0 : (v.is_nan || v.f != 0));
    if (!T[t].is_float) {
        if (v.is_int) return a_int(wrap(v.i, t));
        if (v.is_nan) return a_int(0);
        long double tr = truncl(v.f);
        if (tr >= (long double)int_max(t)) return a_int(int_max(t));
        if (tr <= (long double)int_min(t)) return a_int(int_min(t));
        return a_int((__int128)tr);
    }
    if (v.is_nan) return v;
    return a_float(ref_round(v.is_int ? (long double)v.i : v.f, t));
}

static bool same(aval got, aval want) {
    if (want.is_nan) return got.is_nan && got.neg_nan == want.neg_nan;
    if (got.is_nan) return false;
    if (want.is_int) return got.is_int && got.i == want.i;
    return !got.is_int && got.f == want.f && !signbit(got.f) == !signbit(want.f);
}

static void describe(aval v, char *buf, size_t cap) {
    if (v.is_nan)
        snprintf(buf, cap, "%sNaN", v.neg_nan ? "-" : "");
    else if (v.is_int)
        snprintf(buf, cap, "%.0Lf", (long double)v.i);
    else
        snprintf(buf, cap, "%La (%.21Lg)", v.f, v.f);
}

/* ------------------------------------------------------------------ sources */

/* Store integer v (wrapped) or double d in element p of dtype t; fp16 / bf16 go through the
 * library's fp32 conversions (checked in test_dtype): only the bits matter, the reference
 * decodes whatever they are. */
static void put_int(it_dtype t, void *p, __int128 v) {
    uint64_t u = (uint64_t)(unsigned __int128)wrap(v, t);
    switch (T[t].size) {
    case 1: *(uint8_t *)p = (uint8_t)u; break;
    case 2: *(uint16_t *)p = (uint16_t)u; break;
    case 4: *(uint32_t *)p = (uint32_t)u; break;
    default: *(uint64_t *)p = u; break;
    }
}
static void put_double(it_dtype t, void *p, double d) {
    switch (t) {
    case IT_DTYPE_BF16: *(uint16_t *)p = it_fp32_to_bf16((float)d); break;
    case IT_DTYPE_FP16: *(uint16_t *)p = it_fp32_to_fp16((float)d); break;
    case IT_DTYPE_FP32: *(float *)p = (float)d; break;
    default: *(double *)p = d; break;
    }
}

/* Edge values per source dtype, as an array of n elements of t (returns n). */
static size_t edge_values(it_dtype t, void *out, size_t cap) {
    size_t n = 0;
    char *o = out;
#define PUT_I(v)                                                                                                       \
    do {                                                                                                               \
        if (n < cap) put_int(t, o + (n++) * T[t].size, (v));                                                           \
    } while (0)
#define PUT_D(v)                                                                                                       \
    do {                                                                                                               \
        if (n < cap) put_double(t, o + (n++) * T[t].size, (v));                                                        \
    } while (0)
#define PUT_BITS(v)                                                                                                    \
    do {                                                                                                               \
        uint16_t b_ = (v);                                                                                             \
        if (n < cap) memcpy(o + (n++) * T[t].size, &b_, 2);                                                            \
    } while (0)
    if (t == IT_DTYPE_BOOL) {
        PUT_I(0);
        PUT_I(1);
        uint8_t two = 2, ff = 0xff; /* any nonzero byte is true */
        memcpy(o + (n++), &two, 1);
        memcpy(o + (n++), &ff, 1);
        return n;
    }
    if (!T[t].is_float) {
        const __int128 vals[] = {0,
                                 1,
                                 -1,
                                 2,
                                 127,
                                 128,
                                 255,
                                 256,
                                 -128,
                                 -129,
                                 32767,
                                 32768,
                                 65504,
                                 65519,
                                 65520,
                                 65535,
                                 65536,
                                 (1 << 24) + 1,
                                 INT32_MAX,
                                 (__int128)INT32_MAX + 1,
                                 INT32_MIN,
                                 UINT32_MAX,
                                 (__int128)UINT32_MAX + 1,
                                 0x80800001, /* 2^31 + 2^23 + 1: bf16 double-rounding trap */
                                 ((__int128)1 << 53) + 1,
                                 INT64_MAX,
                                 INT64_MIN,
                                 UINT64_MAX,
                                 ((__int128)1 << 63) + ((__int128)1 << 55) + 1, /* fp32/bf16 trap */
                                 (__int128)INT64_MAX - 511,
                                 -123456789,
                                 0x5555555555555555};
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) PUT_I(vals[k]);
        for (int b = 0; b < T[t].bits; b += 7) PUT_I(int_min(t) + b); /* min and max with neighbours */
        PUT_I(int_max(t));
        PUT_I(int_max(t) - 1);
        PUT_I(int_min(t));
        return n;
    }
    const double vals[] = {0.0,
                           -0.0,
                           1.0,
                           -1.0,
                           0.5,
                           -0.5,
                           1.5,
                           -1.5,
                           2.5,
                           -2.5,
                           0.999,
                           -0.999,
                           255.9,
                           256.0,
                           127.9,
                           128.0,
                           -128.5,
                           -129.0,
                           -128.0,
                           65504.0,
                           65519.0,
                           65520.0,
                           65535.9,
                           65536.0,
                           1e10,
                           -1e10,
                           2147483647.0,
                           2147483647.5,
                           2147483648.0,
                           -2147483648.0,
                           -2147483649.0,
                           4294967295.5,
                           4294967296.0,
                           9223372036854775808.0,
                           -9223372036854775808.0,
                           9223372036854774784.0,
                           18446744073709551616.0,
                           18446744073709549568.0,
                           1.8e19,
                           -1.8e19,
                           3.0e38,
                           (double)FLT_MAX,
                           1e300,
                           -1e300,
                           DBL_MAX,
                           0x1p-14,
                           0x1p-24,
                           0x1p-25,
                           0x1.8p-25,
                           0x1p-126,
                           0x1p-133,
                           0x1p-149,
                           0x1p-1074,
                           -0x1p-1074,
                           1.0 + 0x1p-11 + 0x1p-40, /* fp16 double-rounding trap */
                           1.0 + 0x1p-8 + 0x1p-30,  /* bf16 double-rounding trap */
                           1.0 + 0x1p-24 + 0x1p-50, /* fp32 tie neighbourhood */
                           NAN,
                           -NAN,
                           INFINITY,
                           -INFINITY,
                           3.14159,
                           -2.71828,
                           100.0};
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) PUT_D(vals[k]);
    if (t == IT_DTYPE_FP16) {
        const uint16_t bits[] = {0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c01, 0xfd55, 0x5bff, 0x57f8};
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++) PUT_BITS(bits[k]);
    }
    if (t == IT_DTYPE_BF16) {
        const uint16_t bits[] = {0x0001, 0x8001, 0x007f, 0x7f7f, 0xff7f, 0x7f81, 0xffa5, 0x4f00, 0xcf00,
                                 0x5f00, 0xdf00, 0x5eff, 0x5f80, 0x437f, 0x4f7f, 0x4f80, 0x477f, 0x4780};
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++) PUT_BITS(bits[k]);
    }
    if (t == IT_DTYPE_FP32) {
        const uint32_t bits[] = {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x00000001u, 0x007fffffu, 0x4effffffu,
                                 0x4f000000u, 0x5effffffu, 0x5f000000u, 0x5f7fffffu, 0x5f800000u, 0xdf000000u,
                                 0xdf000001u, 0x477fefffu, 0x477ff000u, 0x3f808000u, 0x3f818000u};
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++)
            if (n < cap) memcpy(o + (n++) * 4, &bits[k], 4);
    }
    if (t == IT_DTYPE_FP64) {
        const uint64_t bits[] = {0x7ff0000000000001u, 0xfff8000000000001u, 0x43e0000000000000u, 0x43dfffffffffffffu,
                                 0xc3e0000000000000u, 0xc3e0000000000001u, 0x43efffffffffffffu, 0x43f0000000000000u,
                                 0x41dfffffffffffffu, 0x41e0000000000000u, 0xc1e0000000200000u, 0x36a0000000000001u};
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++)
            if (n < cap) memcpy(o + (n++) * 8, &bits[k], 8);
    }
    return n;
#undef PUT_I
#undef PUT_D
#undef PUT_BITS
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* n random elements of t: half raw bit patterns, half values of moderate magnitude. */
static void random_values(it_dtype t, void *out, size_t n) {
    char *o = out;
    for (size_t k = 0; k < n; k++) {
        uint64_t r = rng();
        if (t == IT_DTYPE_BOOL) {
            o[k] = (char)(r % 3 == 0 ? (r >> 8) & 0xff : 0);
        } else if (r & 1) {
            uint64_t bits = rng();
            memcpy(o + k * T[t].size, &bits, T[t].size);
        } else if (T[t].is_float) {
            double mag = ldexp((double)(rng() >> 11) * 0x1p-53, (int)((r >> 1) % 80) - 8);
            put_double(t, o + k * T[t].size, (r & 2) ? -mag : mag);
        } else {
            int64_t v = (int64_t)(rng() >> (r >> 1) % 64);
            put_int(t, o + k * T[t].size, (r & 2) ? -(__int128)v : v);
        }
    }
}

/* ------------------------------------------------------------------ descriptors */

static it_tdesc desc(void *data, it_dtype t, int ndim, const int64_t *shape, const int64_t *strides) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = data;
    d.dtype = t;
    d.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        d.shape[i] = shape[i];
        d.strides[i] = strides[i];
    }
    return d;
}

static it_tdesc desc1(void *data, it_dtype t, int64_t n, int64_t stride) { return desc(data, t, 1, &n, &stride); }

static bool untouched(const unsigned char *p, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (p[k] != SENTINEL) return false;
    return true;
}

/* Checks dst element k (at dst_p) against source element (at src_p); counts one check per
 * call, reports the first few failures. */
static int fail_budget = 20;
static bool check_elem(it_dtype s, const void *src_p, it_dtype d, const void *dst_p, const char *what, size_t k) {
    aval v = decode(s, src_p), want = expect(v, d), got = decode(d, dst_p);
    bool ok = same(got, want);
    if (!ok && fail_budget-- > 0) {
        char a[96], b[96], c[96];
        describe(v, a, sizeof a);
        describe(want, b, sizeof b);
        describe(got, c, sizeof c);
        fprintf(stderr, "%s %s -> %s [%zu]: src %s: expected %s, got %s\n", what, T[s].name, T[d].name, k, a, b, c);
    }
    return ok;
}

/* ------------------------------------------------------------------ cast */

#define EDGE_CAP 128

static void test_cast_all_169_pairs_on_edge_values(void) {
    for (int s = 0; s < NT; s++) {
        unsigned char src[EDGE_CAP * 8];
        size_t n = edge_values((it_dtype)s, src, EDGE_CAP);
        for (int d = 0; d < NT; d++) {
            unsigned char dst[EDGE_CAP * 8 + 16];
            memset(dst, SENTINEL, sizeof dst);
            it_tdesc sd = desc1(src, (it_dtype)s, (int64_t)n, 1), dd = desc1(dst + 8, (it_dtype)d, (int64_t)n, 1);
            CHECK_OK(K->cast(NULL, &sd, &dd));
            int bad = 0;
            for (size_t k = 0; k < n; k++)
                bad += !check_elem((it_dtype)s, src + k * T[s].size, (it_dtype)d, dst + 8 + k * T[d].size, "edge", k);
            CHECK_MSG(bad == 0, "%s -> %s: %d of %zu edge values wrong", T[s].name, T[d].name, bad, n);
            CHECK_MSG(untouched(dst, 8) && untouched(dst + 8 + n * T[d].size, 8), "%s -> %s wrote outside dst",
                      T[s].name, T[d].name);
        }
    }
}

/* Source read with step 3, destination written with step 2 (the generic strided path);
 * the gaps in dst must keep their sentinel. */
static void test_cast_all_pairs_with_stepped_source_and_destination(void) {
    for (int s = 0; s < NT; s++) {
        unsigned char vals[EDGE_CAP * 8], src[EDGE_CAP * 8 * 3];
        size_t n = edge_values((it_dtype)s, vals, EDGE_CAP);
        const size_t ss = T[s].size;
        memset(src, 0x5a, sizeof src);
        for (size_t k = 0; k < n; k++) memcpy(src + 3 * k * ss, vals + k * ss, ss);
        for (int d = 0; d < NT; d++) {
            const size_t ds = T[d].size;
            unsigned char dst[EDGE_CAP * 8 * 2];
            memset(dst, SENTINEL, sizeof dst);
            it_tdesc sd = desc1(src, (it_dtype)s, (int64_t)n, 3), dd = desc1(dst, (it_dtype)d, (int64_t)n, 2);
            CHECK_OK(K->cast(NULL, &sd, &dd));
            int bad = 0;
            for (size_t k = 0; k < n; k++) {
                bad += !check_elem((it_dtype)s, vals + k * ss, (it_dtype)d, dst + 2 * k * ds, "stepped", k);
                bad += !untouched(dst + (2 * k + 1) * ds, ds);
            }
            CHECK_MSG(bad == 0, "%s -> %s stepped: %d wrong", T[s].name, T[d].name, bad);
        }
    }
}

/* src (R, C) contiguous -> dst (R, C) view of a (C, R) buffer (transposed), and back. */
static void test_cast_all_pairs_transposed(void) {
    enum { R = 7, C = 9 };
    for (int s = 0; s < NT; s++) {
        unsigned char src[R * C * 8];
        random_values((it_dtype)s, src, R * C);
        for (int d = 0; d < NT; d++) {
            unsigned char dst[R * C * 8], back[R * C * 8];
            const int64_t shape[2] = {R, C}, contig[2] = {C, 1}, trans[2] = {1, R};
            it_tdesc sd = desc(src, (it_dtype)s, 2, shape, contig), dd = desc(dst, (it_dtype)d, 2, shape, trans);
            CHECK_OK(K->cast(NULL, &sd, &dd));
            int bad = 0;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    bad += !check_elem((it_dtype)s, src + (size_t)(r * C + c) * T[s].size, (it_dtype)d,
                                       dst + (size_t)(c * R + r) * T[d].size, "transposed dst", (size_t)(r * C + c));
            /* the transposed view as the source: back (R, C) contiguous in dtype s */
            it_tdesc sv = desc(dst, (it_dtype)d, 2, shape, trans), bd = desc(back, (it_dtype)s, 2, shape, contig);
            CHECK_OK(K->cast(NULL, &sv, &bd));
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    bad += !check_elem((it_dtype)d, dst + (size_t)(c * R + r) * T[d].size, (it_dtype)s,
                                       back + (size_t)(r * C + c) * T[s].size, "transposed src", (size_t)(r * C + c));
            CHECK_MSG(bad == 0, "%s -> %s transposed: %d wrong", T[s].name, T[d].name, bad);
        }
    }
}

/* Every pair over more elements than one parallel chunk (contiguous fast path, OpenMP), and
 * the same source read with step 2 into a 2-D destination with padded rows. */
static void test_cast_all_pairs_large_random_parallel(void) {
    enum { N = 40009, ROWS = 131, COLS = 300 }; /* both > IT_CAST_CHUNK = 32768 elements */
    unsigned char *src = malloc((size_t)N * 2 * 8), *dst = malloc(((size_t)N + ROWS * (COLS + 3)) * 8);
    for (int s = 0; s < NT; s++) {
        random_values((it_dtype)s, src, (size_t)N * 2);
        for (int d = 0; d < NT; d++) {
            const size_t ss = T[s].size, ds = T[d].size;
            it_tdesc sd = desc1(src, (it_dtype)s, N, 1), dd = desc1(dst, (it_dtype)d, N, 1);
            CHECK_OK(K->cast(NULL, &sd, &dd));
            int bad = 0;
            for (size_t k = 0; k < N; k++)
                bad += !check_elem((it_dtype)s, src + k * ss, (it_dtype)d, dst + k * ds, "large", k);
            const int64_t shape[2] = {ROWS, COLS}, sstr[2] = {2 * COLS, 2}, dstr[2] = {COLS + 3, 1};
            sd = desc(src, (it_dtype)s, 2, shape, sstr);
            dd = desc(dst, (it_dtype)d, 2, shape, dstr);
            CHECK_OK(K->cast(NULL, &sd, &dd));
            for (size_t r = 0; r < ROWS; r++)
                for (size_t c = 0; c < COLS; c++)
                    bad += !check_elem((it_dtype)s, src + (r * COLS + c) * 2 * ss, (it_dtype)d,
                                       dst + (r * (COLS + 3) + c) * ds, "large strided", r * COLS + c);
            CHECK_MSG(bad == 0, "%s -> %s large: %d wrong", T[s].name, T[d].name, bad);
        }
    }
    free(src);
    free(dst);
}

static void test_cast_broadcast_source_with_stride_zero(void) {
    float row[3] = {1.5f, -2.75f, 1e10f};
    int32_t out[4][3];
    memset(out, SENTINEL, sizeof out);
    const int64_t shape[2] = {4, 3}, sstr[2] = {0, 1}, dstr[2] = {3, 1};
    it_tdesc sd = desc(row, IT_DTYPE_FP32, 2, shape, sstr), dd = desc(out, IT_DTYPE_I32, 2, shape, dstr);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    for (int r = 0; r < 4; r++) {
        CHECK(out[r][0] == 1);
        CHECK(out[r][1] == -2);
        CHECK(out[r][2] == INT32_MAX);
    }
    /* a single element broadcast to every position of a 3-D destination */
    double one = -7.9;
    uint16_t half[2][3][4];
    const int64_t s3[3] = {2, 3, 4}, z3[3] = {0, 0, 0}, c3[3] = {12, 4, 1};
    sd = desc(&one, IT_DTYPE_FP64, 3, s3, z3);
    dd = desc(half, IT_DTYPE_FP16, 3, s3, c3);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    int bad = 0;
    for (int k = 0; k < 24; k++) bad += (&half[0][0][0])[k] != 0xc7e6; /* -7.9 -> -7.8984375 */
    CHECK_MSG(bad == 0, "%d broadcast fp64 -> fp16 elements wrong", bad);
}

static void test_cast_size_zero_writes_nothing(void) {
    unsigned char dst[16];
    memset(dst, SENTINEL, sizeof dst);
    float src[4] = {1, 2, 3, 4};
    const int64_t shape[2] = {3, 0}, str[2] = {0, 1};
    it_tdesc sd = desc(src, IT_DTYPE_FP32, 2, shape, str), dd = desc(dst, IT_DTYPE_I64, 2, shape, str);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(untouched(dst, sizeof dst));
    /* NULL data is fine when there are no elements */
    sd.data = NULL;
    dd.data = NULL;
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK_OK(K->copy_strided(NULL, &sd, &sd));
    CHECK_OK(K->fill(NULL, &dd, it_scalar_f64(1.0)));
}

static void test_cast_size_one_and_zero_dim_tensors(void) {
    double x = -3.99;
    int8_t y = 0;
    it_tdesc sd = desc(&x, IT_DTYPE_FP64, 0, NULL, NULL), dd = desc(&y, IT_DTYPE_I8, 0, NULL, NULL);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(y == -3);
    /* shape (1, 1, 1) with arbitrary strides: one element */
    uint16_t b = 0;
    const int64_t shape[3] = {1, 1, 1}, s1[3] = {1000, 77, 5}, s2[3] = {3, 9, 1};
    sd = desc(&x, IT_DTYPE_FP64, 3, shape, s1);
    dd = desc(&b, IT_DTYPE_BF16, 3, shape, s2);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(b == 0xc07f); /* -3.99 -> -3.984375 in bf16 */
}

static void test_cast_eight_dims_permuted(void) {
    /* shape (2,1,2,3,1,2,2,3); src contiguous int16, dst a permuted-stride fp32 view */
    const int64_t shape[8] = {2, 1, 2, 3, 1, 2, 2, 3};
    int64_t cstr[8], pstr[8];
    int64_t n = 1;
    for (int i = 7; i >= 0; i--) {
        cstr[i] = n;
        n *= shape[i];
    }
    /* dst layout: dims stored in reverse order (fully transposed) */
    int64_t m = 1;
    for (int i = 0; i < 8; i++) {
        pstr[i] = m;
        m *= shape[i];
    }
    int16_t src[144];
    float dst[144];
    for (int k = 0; k < n; k++) src[k] = (int16_t)(k * 331 - 20000);
    it_tdesc sd = desc(src, IT_DTYPE_I16, 8, shape, cstr), dd = desc(dst, IT_DTYPE_FP32, 8, shape, pstr);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    int bad = 0;
    for (int k = 0; k < n; k++) {
        int64_t rem = k, off = 0;
        for (int i = 7; i >= 0; i--) {
            off += (rem % shape[i]) * pstr[i];
            rem /= shape[i];
        }
        bad += dst[off] != (float)src[k];
    }
    CHECK_MSG(bad == 0, "%d of %lld elements wrong", bad, (long long)n);
}

static void test_cast_same_dtype_is_bit_exact_and_bool_normalizes(void) {
    uint32_t nan_bits[3] = {0x7f800001u, 0xffbfffffu, 0x7fc12345u}, out[3];
    it_tdesc sd = desc1(nan_bits, IT_DTYPE_FP32, 3, 1), dd = desc1(out, IT_DTYPE_FP32, 3, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(memcmp(nan_bits, out, sizeof out) == 0);
    uint16_t hs[2] = {0x7c01, 0xfd55}, ho[2];
    sd = desc1(hs, IT_DTYPE_FP16, 2, 1);
    dd = desc1(ho, IT_DTYPE_FP16, 2, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(ho[0] == 0x7c01 && ho[1] == 0xfd55);
    uint8_t b[4] = {0, 1, 2, 0xff}, bo[4];
    sd = desc1(b, IT_DTYPE_BOOL, 4, 1);
    dd = desc1(bo, IT_DTYPE_BOOL, 4, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 1);
    /* in place (same buffer, same layout) */
    int32_t v[3] = {5, -6, 7};
    sd = desc1(v, IT_DTYPE_I32, 3, 1);
    CHECK_OK(K->cast(NULL, &sd, &sd));
    CHECK(v[0] == 5 && v[1] == -6 && v[2] == 7);
}

/* A few named results, so the rules read in the test as well as in the reference. */
static void test_cast_named_rules(void) {
    double d[6] = {NAN, -0.5, 255.9, -1e10, 3e9, 2.5};
    uint8_t u8[6];
    int32_t i32[6];
    uint8_t bl[6];
    it_tdesc sd = desc1(d, IT_DTYPE_FP64, 6, 1), dd = desc1(u8, IT_DTYPE_U8, 6, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(u8[0] == 0 && u8[1] == 0 && u8[2] == 255 && u8[3] == 0 && u8[4] == 255 && u8[5] == 2);
    dd = desc1(i32, IT_DTYPE_I32, 6, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(i32[0] == 0 && i32[1] == 0 && i32[2] == 255 && i32[3] == INT32_MIN && i32[4] == INT32_MAX && i32[5] == 2);
    dd = desc1(bl, IT_DTYPE_BOOL, 6, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(bl[0] == 1 && bl[1] == 1 && bl[2] == 1); /* NaN and -0.5 are true */
    int64_t big[3] = {-1, 300, INT64_MIN};
    uint16_t u16[3];
    int8_t i8[3];
    sd = desc1(big, IT_DTYPE_I64, 3, 1);
    dd = desc1(u16, IT_DTYPE_U16, 3, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(u16[0] == 65535 && u16[1] == 300 && u16[2] == 0);
    dd = desc1(i8, IT_DTYPE_I8, 3, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(i8[0] == -1 && i8[1] == 44 && i8[2] == 0);
    /* 64-bit integers and fp64 round once to bf16 / fp16 */
    int64_t trap = 0x80800001;
    uint16_t bf;
    sd = desc1(&trap, IT_DTYPE_I64, 1, 1);
    dd = desc1(&bf, IT_DTYPE_BF16, 1, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(bf == 0x4f01);
    double dtrap = 1.0 + 0x1p-11 + 0x1p-40;
    uint16_t h;
    sd = desc1(&dtrap, IT_DTYPE_FP64, 1, 1);
    dd = desc1(&h, IT_DTYPE_FP16, 1, 1);
    CHECK_OK(K->cast(NULL, &sd, &dd));
    CHECK(h == 0x3c01);
}

static void test_cast_rejects_bad_descriptors(void) {
    float a[6] = {0};
    float b[6];
    memset(b, SENTINEL, sizeof b);
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, c23[2] = {3, 1}, c32[2] = {2, 1};
    it_tdesc sd = desc(a, IT_DTYPE_FP32, 2, s23, c23), dd = desc(b, IT_DTYPE_FP32, 2, s32, c32);
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "shape mismatch: src [2, 3] (ndim 2), dst [3, 2]");
    CHECK_ERR(K->copy_strided(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "shape mismatch");
    int64_t six = 6, one = 1;
    dd = desc(b, IT_DTYPE_FP32, 1, &six, &one);
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "(ndim 1)");
    dd = desc(b, IT_DTYPE_FP32, 2, s23, c23);
    dd.dtype = (it_dtype)13;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dst dtype 13");
    dd.dtype = IT_DTYPE_FP32;
    sd.dtype = (it_dtype)-1;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "src dtype -1");
    sd.dtype = IT_DTYPE_FP32;
    sd.ndim = 9;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "src ndim 9");
    sd.ndim = -1;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "src ndim -1");
    sd.ndim = 2;
    sd.strides[1] = -1;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "src strides[1] = -1");
    sd.strides[1] = 1;
    dd.shape[0] = -2;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dst shape[0] = -2");
    dd.shape[0] = 2;
    dd.data = NULL;
    CHECK_ERR(K->cast(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dst data is NULL");
    dd.data = b;
    CHECK_ERR(K->cast(NULL, NULL, &dd), IT_ERR_INVALID_ARG, "src descriptor is NULL");
    /* an extent whose byte offsets overflow int64 */
    const int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, hs[2] = {(int64_t)1 << 40, 1};
    it_tdesc hd = desc(a, IT_DTYPE_FP32, 2, huge, hs);
    CHECK_ERR(K->cast(NULL, &hd, &hd), IT_ERR_INVALID_ARG, "element count overflows");
    const int64_t two[2] = {2, 2}, far[2] = {(int64_t)1 << 62, 1};
    hd = desc(a, IT_DTYPE_FP32, 2, two, far);
    CHECK_ERR(K->cast(NULL, &hd, &hd), IT_ERR_INVALID_ARG, "byte extent overflows int64 at strides[0]");
    CHECK(untouched((unsigned char *)b, sizeof b)); /* nothing was written by a failed call */
}

/* ------------------------------------------------------------------ fill */

static void test_fill_every_dtype_with_exact_64bit_integers_and_doubles(void) {
    const it_scalar scalars[] = {
        it_scalar_i64(0),
        it_scalar_i64(1),
        it_scalar_i64(-1),
        it_scalar_i64(INT64_MAX),
        it_scalar_i64(INT64_MIN),
        it_scalar_i64(255),
        it_scalar_i64(256),
        it_scalar_i64(-129),
        it_scalar_i64(0x80800001),
        it_scalar_i64(INT64_MAX - 1),
        it_scalar_i64(((int64_t)1 << 53) + 1),
        it_scalar_u64(UINT64_MAX),
        it_scalar_u64((uint64_t)1 << 63),
        it_scalar_u64((uint64_t)INT64_MAX + 2),
        it_scalar_u64(0),
        it_scalar_u64(65520),
        it_scalar_f64(0.0),
        it_scalar_f64(-0.0),
        it_scalar_f64(0.5),
        it_scalar_f64(-0.5),
        it_scalar_f64(255.9),
        it_scalar_f64(-1e10),
        it_scalar_f64(1e300),
        it_scalar_f64(NAN),
        it_scalar_f64(-NAN),
        it_scalar_f64(INFINITY),
        it_scalar_f64(-INFINITY),
        it_scalar_f64(1.0 + 0x1p-11 + 0x1p-40),
        it_scalar_f64(9223372036854775808.0),
        it_scalar_f64(18446744073709551616.0),
        it_scalar_f64(0x1p-1074),
        it_scalar_f64(-3.75),
    };
    enum { R = 3, C = 5, LD = 7 }; /* a (3, 5) view with row stride 7 inside a 3 x 7 buffer */
    for (int d = 0; d < NT; d++) {
        for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
            unsigned char buf[R * LD * 8];
            memset(buf, SENTINEL, sizeof buf);
            const int64_t shape[2] = {R, C}, str[2] = {LD, 1};
            it_tdesc dd = desc(buf, (it_dtype)d, 2, shape, str);
            CHECK_OK(K->fill(NULL, &dd, scalars[k]));
            it_scalar sc = scalars[k];
            aval v = sc.kind == IT_SCALAR_F64   ? a_float(sc.v.f64)
                     : sc.kind == IT_SCALAR_I64 ? a_int(sc.v.i64)
                                                : a_int(sc.v.u64);
            aval want = expect(v, (it_dtype)d);
            int bad = 0;
            for (int r = 0; r < R; r++) {
                for (int c = 0; c < LD; c++) {
                    const unsigned char *p = buf + (size_t)(r * LD + c) * T[d].size;
                    if (c < C) {
                        aval got = decode((it_dtype)d, p);
                        if (!same(got, want)) {
                            char a[96], b[96];
                            describe(want, a, sizeof a);
                            describe(got, b, sizeof b);
                            if (bad++ == 0)
                                fprintf(stderr, "fill %s with scalar #%zu: expected %s, got %s\n", T[d].name, k, a, b);
                        }
                    } else {
                        bad += !untouched(p, T[d].size);
                    }
                }
            }
            CHECK_MSG(bad == 0, "fill %s with scalar #%zu: %d wrong", T[d].name, k, bad);
        }
    }
}

static void test_fill_64bit_extremes_are_exact(void) {
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;
    it_tdesc di = desc(&i, IT_DTYPE_I64, 0, NULL, NULL), du = desc(&u, IT_DTYPE_U64, 0, NULL, NULL),
             df = desc(&f, IT_DTYPE_FP64, 0, NULL, NULL);
    CHECK_OK(K->fill(NULL, &di, it_scalar_i64(INT64_MAX)));
    CHECK(i == INT64_MAX);
    CHECK_OK(K->fill(NULL, &di, it_scalar_i64(INT64_MAX - 1)));
    CHECK(i == INT64_MAX - 1); /* a detour through double would give 2^63 -> saturate */
    CHECK_OK(K->fill(NULL, &di, it_scalar_i64(INT64_MIN)));
    CHECK(i == INT64_MIN);
    CHECK_OK(K->fill(NULL, &du, it_scalar_u64(UINT64_MAX)));
    CHECK(u == UINT64_MAX);
    CHECK_OK(K->fill(NULL, &du, it_scalar_u64(UINT64_MAX - 1)));
    CHECK(u == UINT64_MAX - 1);
    CHECK_OK(K->fill(NULL, &di, it_scalar_u64(UINT64_MAX)));
    CHECK(i == -1); /* wraps like integer -> integer */
    CHECK_OK(K->fill(NULL, &di, it_scalar_u64((uint64_t)INT64_MAX + 2)));
    CHECK(i == INT64_MIN + 1);
    CHECK_OK(K->fill(NULL, &du, it_scalar_i64(-1)));
    CHECK(u == UINT64_MAX);
    CHECK_OK(K->fill(NULL, &di, it_scalar_f64(1e300)));
    CHECK(i == INT64_MAX); /* a double saturates */
    CHECK_OK(K->fill(NULL, &du, it_scalar_f64(-5.0)));
    CHECK(u == 0);
    CHECK_OK(K->fill(NULL, &df, it_scalar_i64(INT64_MAX)));
    CHECK(f == 9223372036854775808.0);
}

static void test_fill_large_parallel_and_broadcast_destination(void) {
    enum { N = 100003 };
    float *x = malloc(N * sizeof *x);
    memset(x, SENTINEL, N * sizeof *x);
    it_tdesc dd = desc1(x, IT_DTYPE_FP32, N, 1);
    CHECK_OK(K->fill(NULL, &dd, it_scalar_f64(3.5)));
    int bad = 0;
    for (int k = 0; k < N; k++) bad += x[k] != 3.5f;
    CHECK_MSG(bad == 0, "%d of %d elements not filled", bad, N);
    /* every other element of a large 1-D view */
    dd = desc1(x, IT_DTYPE_FP32, N / 2, 2);
    CHECK_OK(K->fill(NULL, &dd, it_scalar_i64(-2)));
    bad = 0;
    for (int k = 0; k < N; k++) bad += x[k] != ((k % 2 == 0 && k / 2 < N / 2) ? -2.0f : 3.5f);
    CHECK_MSG(bad == 0, "%d elements wrong after a stepped fill", bad);
    free(x);
    /* a destination with stride 0 on its outer dim: 3 distinct elements */
    uint16_t h[4];
    memset(h, SENTINEL, sizeof h);
    const int64_t shape[2] = {4, 3}, str[2] = {0, 1};
    dd = desc(h, IT_DTYPE_FP16, 2, shape, str);
    CHECK_OK(K->fill(NULL, &dd, it_scalar_f64(-2.0)));
    CHECK(h[0] == 0xc000 && h[1] == 0xc000 && h[2] == 0xc000);
    CHECK(untouched((unsigned char *)&h[3], 2));
}

static void test_fill_rejects_bad_arguments(void) {
    float x[4];
    memset(x, SENTINEL, sizeof x);
    it_tdesc dd = desc1(x, IT_DTYPE_FP32, 4, 1);
    it_scalar bad = it_scalar_f64(1.0);
    bad.kind = (it_scalar_kind)7;
    CHECK_ERR(K->fill(NULL, &dd, bad), IT_ERR_INVALID_ARG, "value kind 7");
    dd.dtype = (it_dtype)13;
    CHECK_ERR(K->fill(NULL, &dd, it_scalar_f64(1.0)), IT_ERR_INVALID_ARG, "dst dtype 13");
    dd.dtype = IT_DTYPE_FP32;
    dd.ndim = 9;
    CHECK_ERR(K->fill(NULL, &dd, it_scalar_f64(1.0)), IT_ERR_INVALID_ARG, "dst ndim 9");
    CHECK_ERR(K->fill(NULL, NULL, it_scalar_f64(1.0)), IT_ERR_INVALID_ARG, "NULL");
    CHECK(untouched((unsigned char *)x, sizeof x));
}

/* ------------------------------------------------------------------ copy_strided */

/* Contiguous strides of `shape` laid out in the dim order perm (perm[0] outermost). */
static void permuted_strides(int ndim, const int64_t *shape, const int *perm, int64_t *strides) {
    int64_t m = 1;
    for (int j = ndim - 1; j >= 0; j--) {
        strides[perm[j]] = m;
        m *= shape[perm[j]];
    }
}

static int64_t offset_of(int ndim, const int64_t *shape, const int64_t *strides, int64_t linear) {
    int64_t off = 0;
    for (int i = ndim - 1; i >= 0; i--) {
        off += (linear % shape[i]) * strides[i];
        linear /= shape[i];
    }
    return off;
}

/* Next permutation in lexicographic order; false after the last. */
static bool next_perm(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return false;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) t = p[a], p[a] = p[b], p[b] = t;
    return true;
}

/* For every permutation of a 3-D and a 4-D shape, and element sizes 1, 2, 4, 8: contiguous ->
 * permuted view, then permuted view -> contiguous; both must reproduce the source exactly. */
static void test_copy_strided_permuted_3d_and_4d_views(void) {
    const it_dtype dts[4] = {IT_DTYPE_U8, IT_DTYPE_BF16, IT_DTYPE_FP32, IT_DTYPE_I64};
    const int64_t shape4[4] = {2, 3, 4, 5}, shape3[3] = {3, 1, 7};
    for (int nd = 3; nd <= 4; nd++) {
        const int64_t *shape = nd == 4 ? shape4 : shape3;
        int64_t n = 1, contig[4];
        for (int i = nd - 1; i >= 0; i--) {
            contig[i] = n;
            n *= shape[i];
        }
        for (int t = 0; t < 4; t++) {
            const size_t es = T[dts[t]].size;
            unsigned char src[121 * 8], view[121 * 8], back[121 * 8]; /* one spare element after */
            for (size_t k = 0; k < (size_t)n * es; k++) src[k] = (unsigned char)(k * 37 + 11);
            int perm[4] = {0, 1, 2, 3};
            int bad = 0, perms = 0;
            do {
                int64_t pstr[4];
                permuted_strides(nd, shape, perm, pstr);
                memset(view, SENTINEL, sizeof view);
                memset(back, SENTINEL, sizeof back);
                it_tdesc sd = desc(src, dts[t], nd, shape, contig), vd = desc(view, dts[t], nd, shape, pstr);
                CHECK_OK(K->copy_strided(NULL, &sd, &vd));
                for (int64_t k = 0; k < n; k++)
                    bad += memcmp(view + offset_of(nd, shape, pstr, k) * es, src + k * es, es) != 0;
                it_tdesc bd = desc(back, dts[t], nd, shape, contig);
                CHECK_OK(K->copy_strided(NULL, &vd, &bd));
                bad += memcmp(back, src, (size_t)n * es) != 0;
                bad += !untouched(back + n * es, es);
                perms++;
            } while (next_perm(perm, nd));
            CHECK_MSG(bad == 0, "%d-D %s: %d mismatches over %d permutations", nd, T[dts[t]].name, bad, perms);
        }
    }
}

/* Column slices (innermost contiguous, outer strided) on both sides, and a strided copy that
 * keeps NaN payloads (a copy is bytes, never a conversion). */
static void test_copy_strided_inner_contiguous_slices_and_nan_bits(void) {
    enum { R = 6, C = 10 };
    uint32_t src[R][C], dst[R][C + 2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) src[r][c] = 0x7f800001u + (uint32_t)(r * C + c); /* signalling NaNs */
    memset(dst, SENTINEL, sizeof dst);
    const int64_t shape[2] = {R, 5}, sstr[2] = {C, 1}, dstr[2] = {C + 2, 1};
    it_tdesc sd = desc(&src[0][2], IT_DTYPE_FP32, 2, shape, sstr), dd = desc(&dst[0][1], IT_DTYPE_FP32, 2, shape, dstr);
    CHECK_OK(K->copy_strided(NULL, &sd, &dd));
    int bad = 0;
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C + 2; c++) {
            if (c >= 1 && c < 6)
                bad += dst[r][c] != src[r][c + 1];
            else
                bad += !untouched((unsigned char *)&dst[r][c], 4);
        }
    }
    CHECK_MSG(bad == 0, "%d elements wrong in a column-slice copy", bad);
}

static void test_copy_strided_large_contiguous_and_transposed(void) {
    enum { R = 512, C = 300 };
    double *a = malloc(sizeof(double) * R * C), *b = malloc(sizeof(double) * R * C),
           *c = malloc(sizeof(double) * R * C);
    for (int k = 0; k < R * C; k++) a[k] = k * 0.25 - 7;
    it_tdesc ad = desc1(a, IT_DTYPE_FP64, R * C, 1), bd = desc1(b, IT_DTYPE_FP64, R * C, 1);
    CHECK_OK(K->copy_strided(NULL, &ad, &bd));
    CHECK(memcmp(a, b, sizeof(double) * R * C) == 0);
    const int64_t shape[2] = {R, C}, contig[2] = {C, 1}, trans[2] = {1, R};
    it_tdesc sd = desc(a, IT_DTYPE_FP64, 2, shape, contig), td = desc(c, IT_DTYPE_FP64, 2, shape, trans);
    CHECK_OK(K->copy_strided(NULL, &sd, &td));
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int col = 0; col < C; col++) bad += c[col * R + r] != a[r * C + col];
    CHECK_MSG(bad == 0, "%d elements wrong in a transposed copy", bad);
    free(a);
    free(b);
    free(c);
}

static void test_copy_strided_rejects_dtype_mismatch_and_bad_descriptors(void) {
    float a[4] = {1, 2, 3, 4};
    double b[4];
    memset(b, SENTINEL, sizeof b);
    it_tdesc sd = desc1(a, IT_DTYPE_FP32, 4, 1), dd = desc1(b, IT_DTYPE_FP64, 4, 1);
    CHECK_ERR(K->copy_strided(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dtype mismatch: src float32, dst float64");
    dd.dtype = (it_dtype)13;
    CHECK_ERR(K->copy_strided(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dst dtype 13");
    dd.dtype = IT_DTYPE_FP32;
    dd.ndim = 9;
    CHECK_ERR(K->copy_strided(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "dst ndim 9");
    dd = desc1(b, IT_DTYPE_FP32, 3, 1);
    CHECK_ERR(K->copy_strided(NULL, &sd, &dd), IT_ERR_INVALID_ARG, "shape mismatch: src [4] (ndim 1), dst [3]");
    CHECK(untouched((unsigned char *)b, sizeof b));
}

int main(void) {
    K = it_cpu_kernels();
    CHECK(K != NULL && K->cast != NULL && K->fill != NULL && K->copy_strided != NULL);
    if (K == NULL || K->cast == NULL || K->fill == NULL || K->copy_strided == NULL) return it_test_report("test_cast");
    test_cast_all_169_pairs_on_edge_values();
    test_cast_all_pairs_with_stepped_source_and_destination();
    test_cast_all_pairs_transposed();
    test_cast_all_pairs_large_random_parallel();
    test_cast_broadcast_source_with_stride_zero();
    test_cast_size_zero_writes_nothing();
    test_cast_size_one_and_zero_dim_tensors();
    test_cast_eight_dims_permuted();
    test_cast_same_dtype_is_bit_exact_and_bool_normalizes();
    test_cast_named_rules();
    test_cast_rejects_bad_descriptors();
    test_fill_every_dtype_with_exact_64bit_integers_and_doubles();
    test_fill_64bit_extremes_are_exact();
    test_fill_large_parallel_and_broadcast_destination();
    test_fill_rejects_bad_arguments();
    test_copy_strided_permuted_3d_and_4d_views();
    test_copy_strided_inner_contiguous_slices_and_nan_bits();
    test_copy_strided_large_contiguous_and_transposed();
    test_copy_strided_rejects_dtype_mismatch_and_bad_descriptors();
    return it_test_report("test_cast");
}
