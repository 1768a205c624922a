/* dtype enum values, sizes, names, parsing; fp16 / bf16 <-> fp32 conversions checked
 * exhaustively against references built from the IEEE fields with ldexp / rint (never with
 * the code under test), plus the rounding edge cases spelled out by value. */
#include <float.h>
#include <stdint.h>

#include "infinitrain/dtype.h"
#include "infinitrain/scalar/it_scalar_cast.h"
#include "it_test.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------ enum, sizes, names */

static void test_enum_values_match_infinitrain(void) {
    CHECK(IT_DTYPE_BOOL == 0);
    CHECK(IT_DTYPE_U8 == 1);
    CHECK(IT_DTYPE_I8 == 2);
    CHECK(IT_DTYPE_U16 == 3);
    CHECK(IT_DTYPE_I16 == 4);
    CHECK(IT_DTYPE_U32 == 5);
    CHECK(IT_DTYPE_I32 == 6);
    CHECK(IT_DTYPE_U64 == 7);
    CHECK(IT_DTYPE_I64 == 8);
    CHECK(IT_DTYPE_BF16 == 9);
    CHECK(IT_DTYPE_FP16 == 10);
    CHECK(IT_DTYPE_FP32 == 11);
    CHECK(IT_DTYPE_FP64 == 12);
    CHECK(IT_DTYPE_COUNT == 13);
}

static const struct {
    it_dtype dtype;
    size_t size;
    const char *name;
    bool is_float, is_signed;
} expected_info[] = {
    {IT_DTYPE_BOOL, 1, "bool", false, false},  {IT_DTYPE_U8, 1, "uint8", false, false},
    {IT_DTYPE_I8, 1, "int8", false, true},     {IT_DTYPE_U16, 2, "uint16", false, false},
    {IT_DTYPE_I16, 2, "int16", false, true},   {IT_DTYPE_U32, 4, "uint32", false, false},
    {IT_DTYPE_I32, 4, "int32", false, true},   {IT_DTYPE_U64, 8, "uint64", false, false},
    {IT_DTYPE_I64, 8, "int64", false, true},   {IT_DTYPE_BF16, 2, "bfloat16", true, true},
    {IT_DTYPE_FP16, 2, "float16", true, true}, {IT_DTYPE_FP32, 4, "float32", true, true},
    {IT_DTYPE_FP64, 8, "float64", true, true},
};

static void test_sizes_names_and_classes_of_every_dtype(void) {
    for (size_t k = 0; k < sizeof expected_info / sizeof expected_info[0]; k++) {
        it_dtype d = expected_info[k].dtype;
        CHECK_MSG(it_dtype_valid((int)d), "dtype %d", (int)d);
        CHECK_MSG(it_dtype_size(d) == expected_info[k].size, "size of %d: %zu", (int)d, it_dtype_size(d));
        CHECK_MSG(strcmp(it_dtype_name(d), expected_info[k].name) == 0, "name of %d: %s", (int)d, it_dtype_name(d));
        CHECK_MSG(it_dtype_is_float(d) == expected_info[k].is_float, "is_float(%s)", expected_info[k].name);
        CHECK_MSG(it_dtype_is_signed(d) == expected_info[k].is_signed, "is_signed(%s)", expected_info[k].name);
    }
}

static void test_values_outside_the_enum_are_invalid(void) {
    const int bad[] = {-1, 13, 14, 100, INT32_MIN, INT32_MAX};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_MSG(!it_dtype_valid(bad[k]), "valid(%d)", bad[k]);
        CHECK(it_dtype_size((it_dtype)bad[k]) == 0);
        CHECK(strcmp(it_dtype_name((it_dtype)bad[k]), "invalid") == 0);
        CHECK(!it_dtype_is_float((it_dtype)bad[k]));
        CHECK(!it_dtype_is_signed((it_dtype)bad[k]));
    }
}

static void test_from_name_accepts_full_and_short_names(void) {
    for (size_t k = 0; k < sizeof expected_info / sizeof expected_info[0]; k++) {
        it_dtype d = (it_dtype)-1;
        CHECK_OK(it_dtype_from_name(expected_info[k].name, &d));
        CHECK_MSG(d == expected_info[k].dtype, "%s -> %d", expected_info[k].name, (int)d);
    }
    static const struct {
        const char *name;
        it_dtype dtype;
    } shorts[] = {
        {"u8", IT_DTYPE_U8},      {"i8", IT_DTYPE_I8},        {"u16", IT_DTYPE_U16},   {"i16", IT_DTYPE_I16},
        {"u32", IT_DTYPE_U32},    {"i32", IT_DTYPE_I32},      {"int", IT_DTYPE_I32},   {"u64", IT_DTYPE_U64},
        {"i64", IT_DTYPE_I64},    {"long", IT_DTYPE_I64},     {"bf16", IT_DTYPE_BF16}, {"fp16", IT_DTYPE_FP16},
        {"f16", IT_DTYPE_FP16},   {"half", IT_DTYPE_FP16},    {"fp32", IT_DTYPE_FP32}, {"f32", IT_DTYPE_FP32},
        {"float", IT_DTYPE_FP32}, {"fp64", IT_DTYPE_FP64},    {"f64", IT_DTYPE_FP64},  {"double", IT_DTYPE_FP64},
        {"BF16", IT_DTYPE_BF16},  {"Float32", IT_DTYPE_FP32}, {"BOOL", IT_DTYPE_BOOL}, {"short", IT_DTYPE_I16},
    };
    for (size_t k = 0; k < sizeof shorts / sizeof shorts[0]; k++) {
        it_dtype d = (it_dtype)-1;
        CHECK_OK(it_dtype_from_name(shorts[k].name, &d));
        CHECK_MSG(d == shorts[k].dtype, "%s -> %d, expected %d", shorts[k].name, (int)d, (int)shorts[k].dtype);
    }
}

static void test_from_name_rejects_unknown_names_listing_accepted_ones(void) {
    const char *bad[] = {"", "float8", "fp", "int128", "bfloat", "float32 ", " fp32", "u", "uint", "fp322"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        it_dtype d = IT_DTYPE_U8;
        CHECK_ERR(it_dtype_from_name(bad[k], &d), IT_ERR_INVALID_ARG, "float32");
        CHECK(strstr(it_last_error(), "bfloat16") != NULL);
        CHECK(strstr(it_last_error(), "uint8") != NULL);
        CHECK_MSG(d == IT_DTYPE_U8, "out written on failure for \"%s\"", bad[k]);
    }
    it_dtype d;
    CHECK_ERR(it_dtype_from_name("float8", &d), IT_ERR_INVALID_ARG, "unknown dtype \"float8\"");
    CHECK_ERR(it_dtype_from_name(NULL, &d), IT_ERR_INVALID_ARG, "NULL");
    CHECK_ERR(it_dtype_from_name("fp32", NULL), IT_ERR_INVALID_ARG, "NULL");
}

/* ------------------------------------------------------------------ references */

/* Value of a binary16 from its fields. NaN returned as NAN with the sign of h. */
static double ref_fp16_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -24);
    else
        v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

static double ref_bf16_value(uint16_t b) {
    int sign = b >> 15, exp = (b >> 7) & 0xff, man = b & 0x7f;
    double v;
    if (exp == 255)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -133);
    else
        v = ldexp(128 + man, exp - 134);
    return sign ? -v : v;
}

/* Round |x| (finite) to a binary format with p significant bits, minimum normal exponent emin
 * and overflow threshold 2^(emax+1); returns the rounded value (Inf past range), sign kept.
 * rint() rounds to nearest even in the default rounding mode. */
static double ref_round(double x, int p, int emin, int emax) {
    if (x == 0) return x;
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1): leading bit 2^(e-1) */
    int lead = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, lead - (p - 1));
    double r = rint(fabs(x) / ulp) * ulp;
    if (r >= ldexp(1.0, emax + 1)) r = INFINITY;
    return copysign(r, x);
}
static double ref_round_fp16(double x) { return ref_round(x, 11, -14, 15); }
static double ref_round_bf16(double x) { return ref_round(x, 8, -126, 127); }

/* Same value and, for zeros, the same sign. */
static bool same_value(double got, double want) {
    if (isnan(want)) return isnan(got) && !signbit(got) == !signbit(want);
    return got == want && !signbit(got) == !signbit(want);
}

/* ------------------------------------------------------------------ fp16 */

static void test_fp16_to_fp32_exact_for_all_65536_patterns(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = it_fp16_to_fp32((uint16_t)h);
        double want = ref_fp16_value((uint16_t)h);
        bool ok = same_value(f, want);
        if (ok && isnan(want)) ok = (fbits(f) & 0x00400000u) != 0; /* quiet */
        if (!ok && bad++ < 5) CHECK_MSG(ok, "fp16 0x%04x -> %a (0x%08x), expected %a", h, f, fbits(f), want);
    }
    CHECK_MSG(bad == 0, "%d fp16 patterns decoded wrongly", bad);
}

static void test_fp16_round_trip_for_every_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = it_fp32_to_fp16(it_fp16_to_fp32((uint16_t)h));
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        bool ok = is_nan ? ((back & 0x7e00) == 0x7e00 && (back & 0x8000) == (h & 0x8000) &&
                            (back & 0x1ff) == (h & 0x1ff)) /* quiet, sign and payload kept */
                         : back == h;
        if (!ok && bad++ < 5) CHECK_MSG(ok, "fp16 0x%04x -> fp32 -> 0x%04x", h, back);
    }
    CHECK_MSG(bad == 0, "%d fp16 patterns did not round-trip", bad);
}

/* Every midpoint between adjacent halves (ties), one fp32 ulp either side of it, and an
 * evenly spread sample of all fp32 patterns, against ref_round_fp16. */
static void test_fp32_to_fp16_matches_reference_rounding(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = ref_fp16_value((uint16_t)h), hi = ref_fp16_value((uint16_t)(h + 1));
        if (h == 0x7bff) hi = 65536.0;      /* the next "half" past the largest is 2^16 */
        float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
        float probes[] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) {
            for (int sgn = 0; sgn < 2; sgn++) {
                float f = sgn ? -probes[k] : probes[k];
                double got = it_fp16_to_fp32(it_fp32_to_fp16(f)), want = ref_round_fp16(f);
                bool ok = same_value(got, want);
                if (!ok && bad++ < 5) CHECK_MSG(ok, "fp32 %a -> fp16 %a, expected %a", f, got, want);
            }
        }
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
        float f = bitsf((uint32_t)u);
        uint16_t h = it_fp32_to_fp16(f);
        bool ok;
        if (isnan(f))
            ok = (h & 0x7e00) == 0x7e00 && (h >> 15) == (u >> 31);
        else
            ok = same_value(it_fp16_to_fp32(h), ref_round_fp16(f));
        if (!ok && bad++ < 10) CHECK_MSG(ok, "fp32 0x%08x -> fp16 0x%04x", (unsigned)u, h);
    }
    CHECK_MSG(bad == 0, "%d fp32 -> fp16 conversions differ from the reference", bad);
}

static void check_fp16(float f, uint16_t want, const char *what) {
    uint16_t got = it_fp32_to_fp16(f);
    CHECK_MSG(got == want, "%s: fp32 %a -> fp16 0x%04x, expected 0x%04x", what, f, got, want);
}

static void test_fp16_rounding_edge_cases(void) {
    /* ties to even in both directions, at several exponents */
    check_fp16(1.0f + 0x1p-11f, 0x3c00, "1 + half ulp: tie down to even 1");
    check_fp16(1.0f + 3 * 0x1p-11f, 0x3c02, "1 + 1.5 ulp: tie up to even 1+2ulp");
    check_fp16(1.0f + 0x1p-11f + 0x1p-23f, 0x3c01, "just above the tie");
    check_fp16(1.0f + 0x1p-11f - 0x1p-23f, 0x3c00, "just below the tie");
    check_fp16(1024.5f, 0x6400, "1024.5 tie -> 1024");
    check_fp16(1025.5f, 0x6402, "1025.5 tie -> 1026");
    check_fp16(0x1p-10f * (1.0f + 0x1p-11f), 0x1400, "2^-10 (1 + half ulp) -> 2^-10");
    check_fp16(0x1p-10f * (1.0f + 3 * 0x1p-11f), 0x1402, "2^-10 (1 + 1.5 ulp) -> up");
    check_fp16(-2.0f * (1.0f + 0x1p-11f), 0xc000, "-2 (1 + half ulp) -> -2");
    check_fp16(-2.0f * (1.0f + 3 * 0x1p-11f), 0xc002, "-2 (1 + 1.5 ulp) -> away");
    check_fp16(2047.0f + 0.5f, 0x6800, "2047.5 tie -> 2048 (carry into the exponent)");
    /* the top of the range */
    check_fp16(65504.0f, 0x7bff, "largest half");
    check_fp16(65519.0f, 0x7bff, "65519 below the overflow tie");
    check_fp16(65519.99f, 0x7bff, "65519.99");
    check_fp16(nextafterf(65520.0f, 0), 0x7bff, "just below 65520");
    check_fp16(65520.0f, 0x7c00, "65520 ties to even = 2^16 = Inf");
    check_fp16(-65520.0f, 0xfc00, "-65520 -> -Inf");
    check_fp16(1e10f, 0x7c00, "1e10 -> Inf");
    check_fp16(FLT_MAX, 0x7c00, "FLT_MAX -> Inf");
    check_fp16(INFINITY, 0x7c00, "Inf");
    check_fp16(-INFINITY, 0xfc00, "-Inf");
    /* the bottom: subnormals */
    check_fp16(0x1p-24f, 0x0001, "smallest subnormal 2^-24");
    check_fp16(0x1p-25f, 0x0000, "half of it: tie to even 0");
    check_fp16(-0x1p-25f, 0x8000, "-2^-25 -> -0");
    check_fp16(nextafterf(0x1p-25f, 1), 0x0001, "just above 2^-25");
    check_fp16(3 * 0x1p-26f, 0x0001, "0.75 * 2^-24 -> 2^-24");
    check_fp16(3 * 0x1p-25f, 0x0002, "1.5 * 2^-24 tie -> 2 * 2^-24");
    check_fp16(5 * 0x1p-25f, 0x0002, "2.5 * 2^-24 tie -> 2 * 2^-24");
    check_fp16(1023 * 0x1p-24f, 0x03ff, "largest subnormal");
    check_fp16(1023.5f * 0x1p-24f, 0x0400, "largest subnormal + half ulp: tie to 2^-14");
    check_fp16(0x1p-14f, 0x0400, "smallest normal");
    check_fp16(0x1p-149f, 0x0000, "fp32 subnormal -> 0");
    check_fp16(0.0f, 0x0000, "+0");
    check_fp16(-0.0f, 0x8000, "-0 keeps its sign");
    /* NaN */
    check_fp16(bitsf(0x7fc00000u), 0x7e00, "quiet NaN");
    check_fp16(bitsf(0xffc00000u), 0xfe00, "negative quiet NaN keeps the sign");
    check_fp16(bitsf(0x7f800001u), 0x7e00, "signalling NaN with a low payload -> quiet NaN");
    check_fp16(bitsf(0x7fa02000u), 0x7f01, "payload top bits kept, quiet bit set");
    /* decode direction, by value */
    CHECK(it_fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(it_fp16_to_fp32(0x0001) == 0x1p-24f);
    CHECK(it_fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f);
    CHECK(fbits(it_fp16_to_fp32(0x8000)) == 0x80000000u);
    CHECK(it_fp16_to_fp32(0xfc00) == -INFINITY);
    CHECK(fbits(it_fp16_to_fp32(0x7c01)) == 0x7fc02000u); /* sNaN read as a quiet NaN */
}

/* ------------------------------------------------------------------ bf16 */

static void test_bf16_to_fp32_exact_for_all_65536_patterns(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = it_bf16_to_fp32((uint16_t)b);
        double want = ref_bf16_value((uint16_t)b);
        bool ok = same_value(f, want);
        if (ok && isnan(want)) ok = (fbits(f) & 0x00400000u) != 0;
        if (!ok && bad++ < 5) CHECK_MSG(ok, "bf16 0x%04x -> %a, expected %a", b, f, want);
    }
    CHECK_MSG(bad == 0, "%d bf16 patterns decoded wrongly", bad);
}

static void test_bf16_round_trip_for_every_bf16(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t back = it_fp32_to_bf16(it_bf16_to_fp32((uint16_t)b));
        bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
        bool ok = is_nan ? ((back & 0x7fc0) == 0x7fc0 && (back & 0x8000) == (b & 0x8000) && (back & 0x3f) == (b & 0x3f))
                         : back == b;
        if (!ok && bad++ < 5) CHECK_MSG(ok, "bf16 0x%04x -> fp32 -> 0x%04x", b, back);
    }
    CHECK_MSG(bad == 0, "%d bf16 patterns did not round-trip", bad);
}

static void test_fp32_to_bf16_matches_reference_rounding(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 0x7f80; b++) {
        double lo = ref_bf16_value((uint16_t)b), hi = ref_bf16_value((uint16_t)(b + 1));
        if (b == 0x7f7f) hi = ldexp(1.0, 128);
        double midd = (lo + hi) / 2;
        if (midd > FLT_MAX) continue; /* the overflow tie is not an fp32 */
        float mid = (float)midd;
        float probes[] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) {
            for (int sgn = 0; sgn < 2; sgn++) {
                float f = sgn ? -probes[k] : probes[k];
                double got = it_bf16_to_fp32(it_fp32_to_bf16(f)), want = ref_round_bf16(f);
                bool ok = same_value(got, want);
                if (!ok && bad++ < 5) CHECK_MSG(ok, "fp32 %a -> bf16 %a, expected %a", f, got, want);
            }
        }
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
        float f = bitsf((uint32_t)u);
        uint16_t b = it_fp32_to_bf16(f);
        bool ok;
        if (isnan(f))
            ok = (b & 0x7fc0) == 0x7fc0 && (b >> 15) == (u >> 31);
        else
            ok = same_value(it_bf16_to_fp32(b), ref_round_bf16(f));
        if (!ok && bad++ < 10) CHECK_MSG(ok, "fp32 0x%08x -> bf16 0x%04x", (unsigned)u, b);
    }
    CHECK_MSG(bad == 0, "%d fp32 -> bf16 conversions differ from the reference", bad);
}

static void check_bf16(float f, uint16_t want, const char *what) {
    uint16_t got = it_fp32_to_bf16(f);
    CHECK_MSG(got == want, "%s: fp32 %a -> bf16 0x%04x, expected 0x%04x", what, f, got, want);
}

static void test_bf16_rounding_edge_cases(void) {
    check_bf16(1.0f, 0x3f80, "1");
    check_bf16(1.0f + 0x1p-8f, 0x3f80, "1 + 2^-8: tie down to even 1");
    check_bf16(1.0f + 3 * 0x1p-8f, 0x3f82, "1 + 3 2^-8: tie up to even");
    check_bf16(1.0f + 0x1p-8f + 0x1p-23f, 0x3f81, "just above the tie");
    check_bf16(1.0f + 0x1p-8f - 0x1p-23f * 0.5f, 0x3f80, "just below the tie");
    check_bf16(-(1.0f + 0x1p-8f), 0xbf80, "-(1 + 2^-8) -> -1");
    check_bf16(0x1p100f * (1.0f + 3 * 0x1p-8f), 0x7182, "tie at 2^100");
    check_bf16(0x1p-100f * (1.0f + 0x1p-8f), 0x0d80, "tie at 2^-100");
    check_bf16(ldexpf(255.0f / 128, 127), 0x7f7f, "largest bf16");
    check_bf16(FLT_MAX, 0x7f80, "FLT_MAX is past the bf16 overflow tie: Inf");
    check_bf16(ldexpf(2.0f - 0x1p-8f, 127), 0x7f80, "the overflow tie (2 - 2^-8) 2^127 -> Inf");
    check_bf16(ldexpf(2.0f - 0x1p-8f - 0x1p-23f, 127), 0x7f7f, "just below the overflow tie");
    check_bf16(INFINITY, 0x7f80, "Inf");
    check_bf16(-INFINITY, 0xff80, "-Inf");
    check_bf16(0x1p-133f, 0x0001, "smallest bf16 subnormal");
    check_bf16(0x1p-134f, 0x0000, "half of it: tie to even 0");
    check_bf16(3 * 0x1p-135f, 0x0001, "0.75 of it -> up");
    check_bf16(3 * 0x1p-134f, 0x0002, "1.5 of it: tie to even 2");
    check_bf16(0x1p-149f, 0x0000, "smallest fp32 subnormal -> 0");
    check_bf16(-0.0f, 0x8000, "-0");
    check_bf16(bitsf(0x7fc00000u), 0x7fc0, "quiet NaN");
    check_bf16(bitsf(0xff800001u), 0xffc0, "negative signalling NaN, low payload -> quiet, sign kept");
    check_bf16(bitsf(0x7fa10000u), 0x7fe1, "payload kept, quiet bit set");
    CHECK(fbits(it_bf16_to_fp32(0x7f81)) == 0x7fc10000u);
    CHECK(it_bf16_to_fp32(0x3f80) == 1.0f);
    CHECK(it_bf16_to_fp32(0x0001) == 0x1p-133f);
}

/* ------------------------------------------------------------------ fp64 and integers (it_scalar_cast.h) */

static void test_fp64_to_half_and_bf16_round_once(void) {
    /* 1 + 2^-11 + 2^-40: an fp32 detour rounds it to the tie 1 + 2^-11 and then to 1. */
    CHECK(it_sc_fp64_to_fp16(1.0 + 0x1p-11 + 0x1p-40) == 0x3c01);
    CHECK(it_sc_fp64_to_fp16(1.0 + 0x1p-11) == 0x3c00);
    CHECK(it_sc_fp64_to_fp16(1.0 + 3 * 0x1p-11) == 0x3c02);
    CHECK(it_sc_fp64_to_bf16(1.0 + 0x1p-8 + 0x1p-30) == 0x3f81);
    CHECK(it_sc_fp64_to_bf16(1.0 + 0x1p-8) == 0x3f80);
    CHECK(it_sc_fp64_to_fp16(65520.0 - 0x1p-30) == 0x7bff);
    CHECK(it_sc_fp64_to_fp16(65520.0) == 0x7c00);
    CHECK(it_sc_fp64_to_fp16(1e300) == 0x7c00);
    CHECK(it_sc_fp64_to_fp16(-INFINITY) == 0xfc00);
    CHECK(it_sc_fp64_to_fp16(0x1p-25) == 0x0000);
    CHECK(it_sc_fp64_to_fp16(0x1p-25 + 0x1p-60) == 0x0001);
    CHECK(it_sc_fp64_to_fp16(-0x1p-25 - 0x1p-60) == 0x8001);
    CHECK(it_sc_fp64_to_fp16(0x1p-1074) == 0x0000);
    CHECK(it_sc_fp64_to_fp16(-0.0) == 0x8000);
    CHECK(it_sc_fp64_to_bf16(0x1p-134 + 0x1p-180) == 0x0001);
    CHECK(it_sc_fp64_to_bf16(0x1p-134) == 0x0000);
    CHECK(it_sc_fp64_to_bf16(1e300) == 0x7f80);
    CHECK(it_sc_fp64_to_bf16(DBL_MAX) == 0x7f80);
    CHECK(it_sc_fp64_to_bf16(-(double)FLT_MAX) == 0xff80);
    CHECK(it_sc_fp64_to_fp16(NAN) == 0x7e00);
    CHECK(it_sc_fp64_to_fp16(-NAN) == 0xfe00);
    CHECK((it_sc_fp64_to_bf16(-NAN) & 0xffc0) == 0xffc0);
    /* against the reference on a sweep of doubles spread over the whole range */
    int bad = 0;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int k = 0; k < 200000; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* exponents concentrated around the formats' ranges */
        double d = ldexp((double)(x >> 11) * 0x1p-53 + 0.5, (int)(x % 320) - 160);
        if (x & 1) d = -d;
        bool ok = same_value(it_sc_fp16_to_fp32(it_sc_fp64_to_fp16(d)), ref_round_fp16(d)) &&
                  same_value(it_sc_bf16_to_fp32(it_sc_fp64_to_bf16(d)), ref_round_bf16(d));
        if (!ok && bad++ < 5) CHECK_MSG(ok, "fp64 %a", d);
    }
    CHECK_MSG(bad == 0, "%d fp64 conversions differ from the reference", bad);
}

static void test_int_to_bf16_rounds_once(void) {
    /* 2^31 + 2^23 + 1 is just above the tie between 2^31 and 2^31 + 2^24; an fp32 detour
     * drops the +1 and then ties to even (2^31). */
    CHECK(it_sc_int_to_bf16(UINT64_C(0x80800001), 0) == 0x4f01);
    CHECK(it_sc_int_to_bf16(UINT64_C(0x80800000), 0) == 0x4f00);
    CHECK(it_sc_int_to_bf16(UINT64_C(0x81800000), 0) == 0x4f02);
    CHECK(it_sc_int_to_bf16(UINT64_C(0x80800001), 1) == 0xcf01);
    CHECK(it_sc_int_to_bf16(UINT64_MAX, 0) == 0x5f80); /* 2^64 */
    CHECK(it_sc_int_to_bf16(UINT64_C(1) << 63, 1) == 0xdf00);
    CHECK(it_sc_int_to_bf16(257, 0) == 0x4380); /* 257 = 256 (1 + 2^-8): tie to 256 */
    CHECK(it_sc_int_to_bf16(259, 0) == 0x4382);
    CHECK(it_sc_int_to_bf16(0, 0) == 0x0000);
    int bad = 0;
    uint64_t x = 0x243f6a8885a308d3u;
    for (int k = 0; k < 100000; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t m = x >> (x % 64);
        long double exact = (long double)m; /* 64-bit significand: exact */
        int e;
        frexpl(exact, &e);
        long double want = m == 0 ? 0 : rintl(exact / ldexpl(1, e - 8)) * ldexpl(1, e - 8);
        bool ok = (long double)it_sc_bf16_to_fp32(it_sc_int_to_bf16(m, 0)) == want;
        if (!ok && bad++ < 5) CHECK_MSG(ok, "%llu", (unsigned long long)m);
    }
    CHECK_MSG(bad == 0, "%d integer -> bf16 conversions differ from the reference", bad);
}

int main(void) {
    test_enum_values_match_infinitrain();
    test_sizes_names_and_classes_of_every_dtype();
    test_values_outside_the_enum_are_invalid();
    test_from_name_accepts_full_and_short_names();
    test_from_name_rejects_unknown_names_listing_accepted_ones();
    test_fp16_to_fp32_exact_for_all_65536_patterns();
    test_fp16_round_trip_for_every_half();
    test_fp32_to_fp16_matches_reference_rounding();
    test_fp16_rounding_edge_cases();
    test_bf16_to_fp32_exact_for_all_65536_patterns();
    test_bf16_round_trip_for_every_bf16();
    test_fp32_to_bf16_matches_reference_rounding();
    test_bf16_rounding_edge_cases();
    test_fp64_to_half_and_bf16_round_once();
    test_int_to_bf16_rounds_once();
    return it_test_report("test_dtype");
}
