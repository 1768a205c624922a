/* fp16 / bf16 <-> fp32 (and fp64 -> fp16 / bf16) conversions as static inline functions, so
 * that kernels get them inlined; the exported it_fp16_to_fp32() & co. in dtype.c call these.
 *
 * Rules (dtype.h): round to nearest, ties to even; NaN stays NaN, made quiet, sign kept
 * (the top payload bits are kept too); +-Inf stays Inf; finite values at or past the
 * overflow threshold (largest finite + half an ulp) become Inf; subnormals are read and
 * produced exactly. Everything is integer bit manipulation on the IEEE encodings (memcpy to
 * move between float and integer bits), so there is no undefined behaviour for any input
 * and the result does not depend on the FPU's rounding mode or flush-to-zero settings.
 *
 * Formats: fp16 = 1 sign, 5 exponent (bias 15), 10 mantissa bits.
 *          bf16 = 1 sign, 8 exponent (bias 127), 7 mantissa bits (the top half of an fp32). */
#ifndef IT_CORE_HALF_H
#define IT_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t it_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float it_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint64_t it_f64_to_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Index of the highest set bit of x (x != 0). */
static inline int it_highest_bit64(uint64_t x) {
#if defined(__GNUC__)
    return 63 - __builtin_clzll(x);
#else
    int n = 0;
    while (x >>= 1) n++;
    return n;
#endif
}

/* fp16 -> fp32, exact. */
static inline float it_half_to_float(uint16_t h) {
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
        int p = it_highest_bit64(man);
        bits = sign | ((uint32_t)(p + 103) << 23) | ((man << (23 - p)) & 0x7fffffu);
    }
    return it_bits_to_f32(bits);
}

/* fp32 -> fp16, round to nearest even. */
static inline uint16_t it_float_to_half(float f) {
    uint32_t x = it_f32_to_bits(f);
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
static inline float it_bfloat_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;
    return it_bits_to_f32(bits);
}

/* fp32 -> bf16, round to nearest even. Adding 0x7fff + lsb rounds the low 16 bits away:
 * values past the largest finite bf16 by half an ulp or more carry into the exponent and
 * become 0x7f80 (Inf); subnormals round the same way as normals. */
static inline uint16_t it_float_to_bfloat(float f) {
    uint32_t x = it_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* NaN, quiet */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* fp64 -> a small binary format with `ebits` exponent and `mbits` mantissa bits (fp16:
 * 5/10, bf16: 8/7), with one correct rounding to nearest even (no detour through fp32,
 * which would round twice). */
static inline uint16_t it_double_to_small(double d, int ebits, int mbits) {
    const uint64_t man_mask = (UINT64_C(1) << 52) - 1;
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t inf = ((1u << ebits) - 1u) << mbits;
    uint64_t x = it_f64_to_bits(d);
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

static inline uint16_t it_double_to_half(double d) { return it_double_to_small(d, 5, 10); }
static inline uint16_t it_double_to_bfloat(double d) { return it_double_to_small(d, 8, 7); }

/* An integer magnitude (with its sign) -> bf16 with one correct rounding. Up to 2^24 the
 * value is exact in fp32; above, it is first rounded to 24 bits *to odd* (truncate, then
 * set the last bit when anything was dropped), which keeps the sticky information, so the
 * final fp32 -> bf16 rounding (8 bits <= 24 - 2) is the correctly rounded result. */
static inline uint16_t it_int_to_bfloat(uint64_t mag, int negative) {
    uint32_t bits;
    if (mag < (UINT64_C(1) << 24)) {
        bits = it_f32_to_bits((float)(uint32_t)mag);
    } else {
        int shift = it_highest_bit64(mag) - 23; /* 1..40 */
        uint64_t top = mag >> shift;
        if (mag & ((UINT64_C(1) << shift) - 1)) top |= 1u;
        bits = ((uint32_t)(127 + 23 + shift) << 23) | ((uint32_t)top & 0x7fffffu);
    }
    if (negative) bits |= 0x80000000u;
    return it_float_to_bfloat(it_bits_to_f32(bits));
}

#endif
