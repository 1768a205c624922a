/* Element conversions: fp16 / bf16 <-> fp32, fp64 and integers -> fp16 / bf16, and one
 * element of cast() for every (source, destination) pair of the 13 dtypes. The CPU backend
 * (cast.c and every kernel that reads or writes fp16 / bf16), the core's exported
 * it_fp16_to_fp32() & co. (dtype.c) and the CUDA kernels (cu_math.h, kernels_ew.cu) all
 * compile this text (it_scalar.h says how).
 *
 * Rounding rules (dtype.h): round to nearest, ties to even; NaN stays NaN, made quiet, sign
 * kept (the top payload bits are kept too); +-Inf stays Inf; finite values at or past the
 * overflow threshold (largest finite + half an ulp) become Inf; subnormals are read and
 * produced exactly. Everything is integer bit manipulation on the IEEE encodings, so there
 * is no undefined behaviour for any input and the result does not depend on the FPU's
 * rounding mode or flush-to-zero settings.
 *
 * Formats: fp16 = 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 *          bf16 = 1 sign, 8 exponent (bias 127), 7 mantissa bits (the top half of an fp32).
 *
 * cast() (backend.h): x -> bool is x != 0 (NaN is true); float -> integer truncates toward
 * zero, saturates at the target's range, NaN -> 0; integer -> integer wraps modulo 2^bits
 * (two's complement); integer -> float rounds to nearest even; bool -> anything is 0 / 1 (any
 * nonzero bool byte counts as true). fp16 / bf16 are read exactly as fp32; every conversion
 * to them rounds once: fp64 and 64-bit integers are rounded directly, never through an fp32
 * that would round a second time. fp64 <-> fp32 is C's conversion (IEEE 754, Annex F: round
 * to nearest, overflow to Inf, NaN quiet with its top payload bits), spelled out for NaN on
 * the device, which would return its canonical NaN. No input reaches a C conversion whose
 * result is out of range (the float -> integer comparisons run first). */
#ifndef INFINITRAIN_SCALAR_IT_SCALAR_CAST_H
#define INFINITRAIN_SCALAR_IT_SCALAR_CAST_H

#include "infinitrain/scalar/it_scalar.h"

/* ---------------------------------------------------------------- fp16 / bf16 */

/* fp16 -> fp32, exact. */
IT_SC_FN float it_sc_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        /* Inf (man == 0) or NaN: payload moves to the top of the fp32 mantissa, made quiet. */
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
    } else if (exp != 0) {
        bits = sign | ((exp + (127 - 15)) << 23) | (man << 13); /* normal: rebias */
    } else if (man == 0) {
        bits = sign; /* +-0 */
    } else {
        /* subnormal: man * 2^-24 with man's highest bit p in 0..9 is 1.f * 2^(p-24), normal
         * in fp32 (biased exponent p - 24 + 127). */
        int p = it_sc_highest_bit64(man);
        bits = sign | ((uint32_t)(p + 103) << 23) | ((man << (23 - p)) & 0x7fffffu);
    }
    return it_sc_bits_f32(bits);
}

/* fp32 -> fp16, round to nearest even. */
IT_SC_FN uint16_t it_sc_fp32_to_fp16(float f) {
    uint32_t x = it_sc_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep sign and top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp (ties go to even = 2^16): Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        /* >= 2^-14: normal half. Rebias the exponent (127 -> 15), then drop 13 mantissa bits
         * rounding to nearest even; a carry out of the mantissa correctly bumps the
         * exponent, and the Inf test above keeps the result below 0x7c00. */
        uint32_t r = ax - ((uint32_t)(127 - 15) << 23);
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: ties to even = 0 */
        return sign;
    /* (2^-25, 2^-14): subnormal half q * 2^-24, q = round(|f| * 2^24). |f| = m * 2^(e-150)
     * with m the 24-bit significand, so q = m >> (126 - e), shift in 14..24. q may round up
     * to 1024 = 0x400, the smallest normal, which is the right encoding. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* bf16 -> fp32, exact (NaN made quiet). */
IT_SC_FN float it_sc_bf16_to_fp32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;
    return it_sc_bits_f32(bits);
}

/* fp32 -> bf16, round to nearest even. Adding 0x7fff + lsb rounds the low 16 bits away:
 * values past the largest finite bf16 by half an ulp or more carry into the exponent and
 * become 0x7f80 (Inf); subnormals round the same way as normals. */
IT_SC_FN uint16_t it_sc_fp32_to_bf16(float f) {
    uint32_t x = it_sc_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* NaN, quiet */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* fp64 -> a small binary format with `ebits` exponent and `mbits` mantissa bits (fp16:
 * 5/10, bf16: 8/7), with one correct rounding to nearest even (no detour through fp32,
 * which would round twice). */
IT_SC_FN uint16_t it_sc_fp64_to_small(double d, int ebits, int mbits) {
    const uint64_t man_mask = (UINT64_C(1) << 52) - 1;
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t inf = ((1u << ebits) - 1u) << mbits;
    uint64_t x = it_sc_f64_bits(d);
    uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
    uint64_t ax = x & ~(UINT64_C(1) << 63);
    if (ax > UINT64_C(0x7ff0000000000000)) /* NaN: quiet, keep sign and top payload bits */
        return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint32_t)((ax >> (52 - mbits)) & ((1u << mbits) - 1u)));
    int te = (int)(ax >> 52) - 1023 + bias;                    /* target biased exponent before rounding */
    if (te >= (1 << ebits) - 1) return (uint16_t)(sign | inf); /* >= 2^(emax+1), Inf included */
    if (te >= 1) {
        /* normal in the target: rebias, then round away 52 - mbits bits; a carry may bump
         * the exponent, up to Inf, which is the correct result past the threshold. */
        const int shift = 52 - mbits;
        uint64_t r = ((uint64_t)te << 52) | (ax & man_mask);
        r += (UINT64_C(1) << (shift - 1)) - 1 + ((r >> shift) & 1u);
        return (uint16_t)(sign | (uint32_t)(r >> shift));
    }
    /* subnormal or zero in the target: q = round(|d| / 2^(1 - bias - mbits)). With
     * |d| = m * 2^(e - 1075) (m the 53-bit significand), q = m >> (53 - mbits - te). Once the
     * shift reaches 54, |d| < 2^53 * 2^-54 units = half the smallest subnormal: 0. Double
     * subnormals (e == 0) are far below every target's range and land there too. */
    int shift = 53 - mbits - te;
    if (shift >= 54 || (ax >> 52) == 0) return (uint16_t)sign;
    uint64_t m = (ax & man_mask) | (UINT64_C(1) << 52);
    uint64_t q = m >> shift;
    uint64_t rem = m & ((UINT64_C(1) << shift) - 1);
    uint64_t halfway = UINT64_C(1) << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | (uint32_t)q);
}

IT_SC_FN uint16_t it_sc_fp64_to_fp16(double d) { return it_sc_fp64_to_small(d, 5, 10); }
IT_SC_FN uint16_t it_sc_fp64_to_bf16(double d) { return it_sc_fp64_to_small(d, 8, 7); }

/* An integer magnitude (with its sign) -> bf16 with one correct rounding. Up to 2^24 the
 * value is exact in fp32; above, it is first rounded to 24 bits *to odd* (truncate, then
 * set the last bit when anything was dropped), which keeps the sticky information, so the
 * final fp32 -> bf16 rounding (8 bits <= 24 - 2) is the correctly rounded result. */
IT_SC_FN uint16_t it_sc_int_to_bf16(uint64_t mag, int negative) {
    uint32_t bits;
    if (mag < (UINT64_C(1) << 24)) {
        bits = it_sc_f32_bits((float)(uint32_t)mag);
    } else {
        int shift = it_sc_highest_bit64(mag) - 23; /* 1..40 */
        uint64_t top = mag >> shift;
        if (mag & ((UINT64_C(1) << shift) - 1)) top |= 1u;
        bits = ((uint32_t)(127 + 23 + shift) << 23) | ((uint32_t)top & 0x7fffffu);
    }
    if (negative) bits |= 0x80000000u;
    return it_sc_fp32_to_bf16(it_sc_bits_f32(bits));
}

/* fp64 NaN -> fp32 NaN and back as x86's cvtsd2ss / cvtss2sd: quiet, sign and the top
 * payload bits kept. The host's C conversions do this themselves; the device's give a
 * canonical NaN, so its conversions call these (test_cuda_math.c compares them with C's). */
IT_SC_FN float it_sc_fp64_nan_to_fp32(double v) {
    uint64_t b = it_sc_f64_bits(v);
    return it_sc_bits_f32((uint32_t)(b >> 32 & 0x80000000u) | 0x7fc00000u | (uint32_t)((b >> 29) & 0x7fffffu));
}
IT_SC_FN double it_sc_fp32_nan_to_fp64(float v) {
    uint32_t b = it_sc_f32_bits(v);
    return it_sc_bits_f64((uint64_t)(b & 0x80000000u) << 32 | UINT64_C(0x7ff8000000000000) |
                          (uint64_t)(b & 0x7fffffu) << 29);
}
/* fp64 -> fp32 rounded to nearest (overflow to Inf), fp32 -> fp64 exact. */
IT_SC_FN float it_sc_fp64_to_fp32(double v) {
#if defined(__CUDA_ARCH__)
    if (v != v) return it_sc_fp64_nan_to_fp32(v);
#endif
    return (float)v;
}
IT_SC_FN double it_sc_fp32_to_fp64(float v) {
#if defined(__CUDA_ARCH__)
    if (v != v) return it_sc_fp32_nan_to_fp64(v);
#endif
    return (double)v;
}

/* ---------------------------------------------------------------- cast(), element by element
 * Every source is first read as one of five kinds: b (bool), u (uint64_t: unsigned
 * integers), i (int64_t: signed integers), f (float: bf16, fp16, fp32), d (double: fp64).
 * Then it_sc_to_<dst>_<kind>() converts a kind to the destination's storage, and
 * it_sc_cvt_<src>_<dst>() is the two in a row. */

IT_SC_FN bool it_sc_ld_boolean(uint8_t v) { return v != 0; }
IT_SC_FN uint64_t it_sc_ld_u8(uint8_t v) { return v; }
IT_SC_FN int64_t it_sc_ld_i8(int8_t v) { return v; }
IT_SC_FN uint64_t it_sc_ld_u16(uint16_t v) { return v; }
IT_SC_FN int64_t it_sc_ld_i16(int16_t v) { return v; }
IT_SC_FN uint64_t it_sc_ld_u32(uint32_t v) { return v; }
IT_SC_FN int64_t it_sc_ld_i32(int32_t v) { return v; }
IT_SC_FN uint64_t it_sc_ld_u64(uint64_t v) { return v; }
IT_SC_FN int64_t it_sc_ld_i64(int64_t v) { return v; }
IT_SC_FN float it_sc_ld_bf16(uint16_t v) { return it_sc_bf16_to_fp32(v); }
IT_SC_FN float it_sc_ld_fp16(uint16_t v) { return it_sc_fp16_to_fp32(v); }
IT_SC_FN float it_sc_ld_fp32(float v) { return v; }
IT_SC_FN double it_sc_ld_fp64(double v) { return v; }

/* Two's complement reinterpretation of the low bits, written without implementation-defined
 * out-of-range conversions (compilers reduce each to a plain truncation). */
IT_SC_FN int8_t it_sc_wrap_i8(uint64_t u) {
    uint8_t v = (uint8_t)u;
    return v <= INT8_MAX ? (int8_t)v : (int8_t)((int)v - 256);
}
IT_SC_FN int16_t it_sc_wrap_i16(uint64_t u) {
    uint16_t v = (uint16_t)u;
    return v <= INT16_MAX ? (int16_t)v : (int16_t)((int32_t)v - 65536);
}
IT_SC_FN int32_t it_sc_wrap_i32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return v <= (uint32_t)INT32_MAX ? (int32_t)v : (int32_t)(v - UINT32_C(0x80000000)) + INT32_MIN;
}
IT_SC_FN int64_t it_sc_wrap_i64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : (int64_t)(u - UINT64_C(0x8000000000000000)) + INT64_MIN;
}

/* Unsigned integer targets; HI1 = 2^bits, exact in float and double. A float is converted by
 * C only inside (-1, 2^bits), where truncation is in range; NaN fails `v > -1` and gives 0. */
#define IT_SC_UINT_CONVS(N, T, TMAX, HI1)                                                                              \
    IT_SC_FN T it_sc_to_##N##_b(bool v) { return (T)v; }                                                               \
    IT_SC_FN T it_sc_to_##N##_u(uint64_t v) { return (T)v; }                                                           \
    IT_SC_FN T it_sc_to_##N##_i(int64_t v) { return (T)(uint64_t)v; }                                                  \
    IT_SC_FN T it_sc_to_##N##_f(float v) { return v > -1.0f ? (v < (float)(HI1) ? (T)v : (TMAX)) : 0; }                \
    IT_SC_FN T it_sc_to_##N##_d(double v) { return v > -1.0 ? (v < (HI1) ? (T)v : (TMAX)) : 0; }

/* Signed integer targets; the range is [TMIN, -TMIN), both bounds exact powers of two. A
 * float is converted by C only inside it (truncation stays in range); below TMIN saturates
 * to TMIN (anything in (TMIN - 1, TMIN) would truncate to TMIN anyway). */
#define IT_SC_SINT_CONVS(N, T, TMIN, TMAX, WRAP)                                                                       \
    IT_SC_FN T it_sc_to_##N##_b(bool v) { return (T)v; }                                                               \
    IT_SC_FN T it_sc_to_##N##_u(uint64_t v) { return WRAP(v); }                                                        \
    IT_SC_FN T it_sc_to_##N##_i(int64_t v) { return WRAP((uint64_t)v); }                                               \
    IT_SC_FN T it_sc_to_##N##_f(float v) {                                                                             \
        return v != v ? 0 : v >= -(float)(TMIN) ? (TMAX) : v < (float)(TMIN) ? (TMIN) : (T)v;                          \
    }                                                                                                                  \
    IT_SC_FN T it_sc_to_##N##_d(double v) {                                                                            \
        return v != v ? 0 : v >= -(double)(TMIN) ? (TMAX) : v < (double)(TMIN) ? (TMIN) : (T)v;                        \
    }

IT_SC_FN uint8_t it_sc_to_boolean_b(bool v) { return v; }
IT_SC_FN uint8_t it_sc_to_boolean_u(uint64_t v) { return v != 0; }
IT_SC_FN uint8_t it_sc_to_boolean_i(int64_t v) { return v != 0; }
IT_SC_FN uint8_t it_sc_to_boolean_f(float v) { return v != 0.0f; } /* NaN != 0 is true */
IT_SC_FN uint8_t it_sc_to_boolean_d(double v) { return v != 0.0; }

IT_SC_UINT_CONVS(u8, uint8_t, UINT8_MAX, 256.0)
IT_SC_SINT_CONVS(i8, int8_t, INT8_MIN, INT8_MAX, it_sc_wrap_i8)
IT_SC_UINT_CONVS(u16, uint16_t, UINT16_MAX, 65536.0)
IT_SC_SINT_CONVS(i16, int16_t, INT16_MIN, INT16_MAX, it_sc_wrap_i16)
IT_SC_UINT_CONVS(u32, uint32_t, UINT32_MAX, 4294967296.0)
IT_SC_SINT_CONVS(i32, int32_t, INT32_MIN, INT32_MAX, it_sc_wrap_i32)
IT_SC_UINT_CONVS(u64, uint64_t, UINT64_MAX, 18446744073709551616.0)
IT_SC_SINT_CONVS(i64, int64_t, INT64_MIN, INT64_MAX, it_sc_wrap_i64)

/* bf16: 64-bit integers need it_sc_int_to_bf16's single rounding (an int -> fp32 -> bf16
 * chain rounds twice once |v| > 2^24). */
IT_SC_FN uint16_t it_sc_to_bf16_b(bool v) { return v ? 0x3f80u : 0u; }
IT_SC_FN uint16_t it_sc_to_bf16_u(uint64_t v) { return it_sc_int_to_bf16(v, 0); }
IT_SC_FN uint16_t it_sc_to_bf16_i(int64_t v) { return it_sc_int_to_bf16(v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0); }
IT_SC_FN uint16_t it_sc_to_bf16_f(float v) { return it_sc_fp32_to_bf16(v); }
IT_SC_FN uint16_t it_sc_to_bf16_d(double v) { return it_sc_fp64_to_bf16(v); }

/* fp16: integers go through fp32 without double rounding: below 65520 they are exact in
 * fp32, and from 65520 up fp32 rounding cannot drop below 65520, so they become Inf. */
IT_SC_FN uint16_t it_sc_to_fp16_b(bool v) { return v ? 0x3c00u : 0u; }
IT_SC_FN uint16_t it_sc_to_fp16_u(uint64_t v) { return it_sc_fp32_to_fp16((float)v); }
IT_SC_FN uint16_t it_sc_to_fp16_i(int64_t v) { return it_sc_fp32_to_fp16((float)v); }
IT_SC_FN uint16_t it_sc_to_fp16_f(float v) { return it_sc_fp32_to_fp16(v); }
IT_SC_FN uint16_t it_sc_to_fp16_d(double v) { return it_sc_fp64_to_fp16(v); }

IT_SC_FN float it_sc_to_fp32_b(bool v) { return v ? 1.0f : 0.0f; }
IT_SC_FN float it_sc_to_fp32_u(uint64_t v) { return (float)v; }
IT_SC_FN float it_sc_to_fp32_i(int64_t v) { return (float)v; }
IT_SC_FN float it_sc_to_fp32_f(float v) { return v; }
IT_SC_FN float it_sc_to_fp32_d(double v) { return it_sc_fp64_to_fp32(v); }

IT_SC_FN double it_sc_to_fp64_b(bool v) { return v ? 1.0 : 0.0; }
IT_SC_FN double it_sc_to_fp64_u(uint64_t v) { return (double)v; }
IT_SC_FN double it_sc_to_fp64_i(int64_t v) { return (double)v; }
IT_SC_FN double it_sc_to_fp64_f(float v) { return it_sc_fp32_to_fp64(v); }
IT_SC_FN double it_sc_to_fp64_d(double v) { return v; }

/* The 13 dtypes in enum order: X(name, enum, storage type, kind, extra...) ("boolean": the
 * token bool is a macro). Two copies, because a list macro cannot expand itself from inside
 * its own expansion. */
#define IT_SC_FOR_SRC(X, ...)                                                                                          \
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
#define IT_SC_FOR_DST(X, ...)                                                                                          \
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

/* it_sc_cvt_<src>_<dst>(x): one element of cast(), src storage -> dst storage. */
#define IT_SC_DEF_CVT(SN, SE, ST, SK, DN, DT, DK)                                                                      \
    IT_SC_FN DT it_sc_cvt_##SN##_##DN(ST x) { return it_sc_to_##DN##_##SK(it_sc_ld_##SN(x)); }
#define IT_SC_DEF_CVTS_TO(DN, DE, DT, DK, unused) IT_SC_FOR_SRC(IT_SC_DEF_CVT, DN, DT, DK)
IT_SC_FOR_DST(IT_SC_DEF_CVTS_TO, 0)

#endif
