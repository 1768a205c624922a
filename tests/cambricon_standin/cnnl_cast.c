/* TEST DOUBLE. cnnlCastDataType of the CPU stand-in of libcnnl.so, for the conversions
 * standin_api.h lists. Rounding as cnnl.h's cnnlCastDataType_t documents each one:
 *   - to an integer from a floating type: toward zero;
 *   - CNNL_CAST_INT32_TO_FLOAT: toward zero (keeps the top 24 significant bits);
 *   - every other conversion that can be inexact: to nearest, ties to even, rounding once
 *     from the exact source value (INT64_TO_HALF documents no mode: nearest even too).
 * What cnnl.h leaves unsaid, the stand-in decides, so a caller cannot rely on it unnoticed
 * beyond this: a float out of an integer type's range saturates, NaN becomes 0; an integer
 * narrowed to a smaller integer type saturates; x -> bool is x != 0 (NaN -> true); half
 * overflow is Inf as IEEE 754 says. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"

enum { MLU500_ONLY = 1, TOWARD_ZERO = 2 };

typedef struct cast_rule {
    cnnlCastDataType_t cast;
    cnnlDataType_t from, to;
    int flags;
} cast_rule;

/* MLU500_ONLY: the items cnnl.h's note on cnnlCastDataType lists as supported only on
 * MLU500 series (CNNL_CAST_INT32_TO_BFLOAT16 is not among them). */
static const cast_rule rules[] = {
    {CNNL_CAST_FLOAT_TO_HALF, CNNL_DTYPE_FLOAT, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_FLOAT_TO_INT32, CNNL_DTYPE_FLOAT, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_FLOAT_TO_INT16, CNNL_DTYPE_FLOAT, CNNL_DTYPE_INT16, 0},
    {CNNL_CAST_FLOAT_TO_INT8, CNNL_DTYPE_FLOAT, CNNL_DTYPE_INT8, 0},
    {CNNL_CAST_FLOAT_TO_UINT8, CNNL_DTYPE_FLOAT, CNNL_DTYPE_UINT8, 0},
    {CNNL_CAST_FLOAT_TO_BOOL, CNNL_DTYPE_FLOAT, CNNL_DTYPE_BOOL, 0},
    {CNNL_CAST_FLOAT_TO_INT64, CNNL_DTYPE_FLOAT, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_FLOAT_TO_DOUBLE, CNNL_DTYPE_FLOAT, CNNL_DTYPE_DOUBLE, 0},
    {CNNL_CAST_FLOAT_TO_BFLOAT16, CNNL_DTYPE_FLOAT, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_HALF_TO_FLOAT, CNNL_DTYPE_HALF, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_HALF_TO_INT32, CNNL_DTYPE_HALF, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_HALF_TO_INT16, CNNL_DTYPE_HALF, CNNL_DTYPE_INT16, 0},
    {CNNL_CAST_HALF_TO_INT8, CNNL_DTYPE_HALF, CNNL_DTYPE_INT8, 0},
    {CNNL_CAST_HALF_TO_UINT8, CNNL_DTYPE_HALF, CNNL_DTYPE_UINT8, 0},
    {CNNL_CAST_HALF_TO_BOOL, CNNL_DTYPE_HALF, CNNL_DTYPE_BOOL, 0},
    {CNNL_CAST_HALF_TO_INT64, CNNL_DTYPE_HALF, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_INT32_TO_FLOAT, CNNL_DTYPE_INT32, CNNL_DTYPE_FLOAT, TOWARD_ZERO},
    {CNNL_CAST_INT32_TO_HALF, CNNL_DTYPE_INT32, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_INT32_TO_BFLOAT16, CNNL_DTYPE_INT32, CNNL_DTYPE_BFLOAT16, 0},
    {CNNL_CAST_INT32_TO_INT8, CNNL_DTYPE_INT32, CNNL_DTYPE_INT8, 0},
    {CNNL_CAST_INT32_TO_INT16, CNNL_DTYPE_INT32, CNNL_DTYPE_INT16, 0},
    {CNNL_CAST_INT32_TO_UINT8, CNNL_DTYPE_INT32, CNNL_DTYPE_UINT8, 0},
    {CNNL_CAST_INT32_TO_BOOL, CNNL_DTYPE_INT32, CNNL_DTYPE_BOOL, 0},
    {CNNL_CAST_INT32_TO_INT64, CNNL_DTYPE_INT32, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_INT16_TO_FLOAT, CNNL_DTYPE_INT16, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_INT16_TO_HALF, CNNL_DTYPE_INT16, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_INT16_TO_BFLOAT16, CNNL_DTYPE_INT16, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_INT16_TO_INT32, CNNL_DTYPE_INT16, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_INT16_TO_INT8, CNNL_DTYPE_INT16, CNNL_DTYPE_INT8, 0},
    {CNNL_CAST_INT16_TO_INT64, CNNL_DTYPE_INT16, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_INT8_TO_FLOAT, CNNL_DTYPE_INT8, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_INT8_TO_HALF, CNNL_DTYPE_INT8, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_INT8_TO_BFLOAT16, CNNL_DTYPE_INT8, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_INT8_TO_INT32, CNNL_DTYPE_INT8, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_INT8_TO_INT16, CNNL_DTYPE_INT8, CNNL_DTYPE_INT16, 0},
    {CNNL_CAST_UINT8_TO_FLOAT, CNNL_DTYPE_UINT8, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_UINT8_TO_HALF, CNNL_DTYPE_UINT8, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_UINT8_TO_BFLOAT16, CNNL_DTYPE_UINT8, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_UINT8_TO_INT32, CNNL_DTYPE_UINT8, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_UINT8_TO_INT64, CNNL_DTYPE_UINT8, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_BOOL_TO_FLOAT, CNNL_DTYPE_BOOL, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_BOOL_TO_HALF, CNNL_DTYPE_BOOL, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_BOOL_TO_BFLOAT16, CNNL_DTYPE_BOOL, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_BOOL_TO_INT32, CNNL_DTYPE_BOOL, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_BOOL_TO_INT64, CNNL_DTYPE_BOOL, CNNL_DTYPE_INT64, 0},
    {CNNL_CAST_INT64_TO_INT32, CNNL_DTYPE_INT64, CNNL_DTYPE_INT32, 0},
    {CNNL_CAST_INT64_TO_INT16, CNNL_DTYPE_INT64, CNNL_DTYPE_INT16, 0},
    {CNNL_CAST_INT64_TO_BOOL, CNNL_DTYPE_INT64, CNNL_DTYPE_BOOL, 0},
    {CNNL_CAST_INT64_TO_FLOAT, CNNL_DTYPE_INT64, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_INT64_TO_HALF, CNNL_DTYPE_INT64, CNNL_DTYPE_HALF, 0},
    {CNNL_CAST_INT64_TO_BFLOAT16, CNNL_DTYPE_INT64, CNNL_DTYPE_BFLOAT16, MLU500_ONLY},
    {CNNL_CAST_INT64_TO_DOUBLE, CNNL_DTYPE_INT64, CNNL_DTYPE_DOUBLE, 0},
    {CNNL_CAST_BFLOAT16_TO_FLOAT, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_FLOAT, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_INT8, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_INT8, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_UINT8, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_UINT8, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_INT16, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_INT16, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_INT32, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_INT32, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_INT64, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_INT64, MLU500_ONLY},
    {CNNL_CAST_BFLOAT16_TO_BOOL, CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_BOOL, MLU500_ONLY},
    {CNNL_CAST_DOUBLE_TO_FLOAT, CNNL_DTYPE_DOUBLE, CNNL_DTYPE_FLOAT, 0},
    {CNNL_CAST_DOUBLE_TO_INT64, CNNL_DTYPE_DOUBLE, CNNL_DTYPE_INT64, 0},
};

static const cast_rule *find_rule(cnnlCastDataType_t cast) {
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].cast == cast) return &rules[i];
    return NULL;
}

static bool real_type(cnnlDataType_t dt) { return cs_is_float(dt) || dt == CNNL_DTYPE_DOUBLE; }

/* ---------------------------------------------------------------- element values */

static double load_real(cnnlDataType_t dt, const char *p) {
    if (dt == CNNL_DTYPE_DOUBLE) {
        double d;
        memcpy(&d, p, sizeof d);
        return d;
    }
    return cs_load(dt, p, 0);
}

static int64_t load_int(cnnlDataType_t dt, const char *p) {
    switch (dt) {
    case CNNL_DTYPE_BOOL: return *(const uint8_t *)p != 0;
    case CNNL_DTYPE_UINT8: return *(const uint8_t *)p;
    case CNNL_DTYPE_INT8: return *(const int8_t *)p;
    case CNNL_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case CNNL_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    }
}

/* v already within dt's range */
static void store_int(cnnlDataType_t dt, char *p, int64_t v) {
    int8_t i8 = (int8_t)v;
    int16_t i16 = (int16_t)v;
    int32_t i32 = (int32_t)v;
    switch (dt) {
    case CNNL_DTYPE_BOOL:
    case CNNL_DTYPE_UINT8: *(uint8_t *)p = (uint8_t)v; break;
    case CNNL_DTYPE_INT8: memcpy(p, &i8, 1); break;
    case CNNL_DTYPE_INT16: memcpy(p, &i16, 2); break;
    case CNNL_DTYPE_INT32: memcpy(p, &i32, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static void int_range(cnnlDataType_t dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case CNNL_DTYPE_UINT8: *lo = 0, *hi = UINT8_MAX; break;
    case CNNL_DTYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case CNNL_DTYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case CNNL_DTYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
    }
}

/* Significant bits of a floating type: where an integer source rounds. */
static int mantissa_bits(cnnlDataType_t dt) {
    switch (dt) {
    case CNNL_DTYPE_HALF: return 11;
    case CNNL_DTYPE_BFLOAT16: return 8;
    case CNNL_DTYPE_FLOAT: return 24;
    default: return 53;
    }
}

/* v rounded to `bits` significant bits, exactly representable in the double returned, so
 * the store that follows adds no second rounding. */
static double round_int(int64_t v, int bits, bool toward_zero) {
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    int width = m ? 64 - __builtin_clzll(m) : 0;
    if (width <= bits) return (double)v;
    int s = width - bits;
    uint64_t q = m >> s, rem = m & ((1ull << s) - 1), half = 1ull << (s - 1);
    if (!toward_zero && (rem > half || (rem == half && (q & 1)))) q++;
    double r = (double)(q << s); /* q << s <= 2^63: no overflow */
    return v < 0 ? -r : r;
}

static void store_real(cnnlDataType_t dt, char *p, double v) {
    if (dt == CNNL_DTYPE_DOUBLE) {
        memcpy(p, &v, sizeof v);
        return;
    }
    cs_store(dt, p, 0, (float)v); /* double -> float rounds to nearest even */
}

static void convert(const cast_rule *r, const char *in, char *out) {
    if (real_type(r->from)) {
        double v = load_real(r->from, in);
        if (real_type(r->to)) {
            store_real(r->to, out, v);
        } else if (r->to == CNNL_DTYPE_BOOL) {
            store_int(r->to, out, v != 0);
        } else {
            int64_t lo, hi;
            int_range(r->to, &lo, &hi);
            int64_t i = v != v ? 0 : v <= (double)lo ? lo : v >= (double)hi ? hi : (int64_t)v; /* C truncates */
            store_int(r->to, out, i);
        }
        return;
    }
    int64_t v = load_int(r->from, in);
    if (real_type(r->to)) {
        double x = round_int(v, mantissa_bits(r->to), r->flags & TOWARD_ZERO);
        if (r->to == CNNL_DTYPE_HALF && (x > 65504 || x < -65504)) x = x > 0 ? INFINITY : -INFINITY;
        store_real(r->to, out, x);
    } else if (r->to == CNNL_DTYPE_BOOL) {
        store_int(r->to, out, v != 0);
    } else {
        int64_t lo, hi;
        int_range(r->to, &lo, &hi);
        store_int(r->to, out, v < lo ? lo : v > hi ? hi : v);
    }
}

/* ---------------------------------------------------------------- the call */

typedef struct cast_job {
    cast_rule rule;
    cs_tensor in, out;
    const void *x;
    void *y;
} cast_job;

static bool cast_run(void *arg) {
    cast_job *j = arg;
    if (!cs_open(j->x, &j->in) || !cs_open(j->y, &j->out)) return false;
    int64_t wi = (int64_t)cs_dtype_size(j->in.dtype), wo = (int64_t)cs_dtype_size(j->out.dtype);
    int64_t n = cs_numel(&j->in);
    for (int64_t i = 0; i < n; i++)
        convert(&j->rule, (const char *)j->x + cs_offset(&j->in, i) * wi, (char *)j->y + cs_offset(&j->out, i) * wo);
    return true;
}

STANDIN_EXPORT cnnlStatus_t cnnlCastDataType(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc,
                                             const void *input, const cnnlCastDataType_t cast_type,
                                             const cnnlTensorDescriptor_t output_desc, void *output) {
    const char *fn = "cnnlCastDataType";
    CS_REQUIRE(handle && input_desc && output_desc, CNNL_STATUS_BAD_PARAM, fn, "NULL handle or descriptor");
    const cast_rule *r = find_rule(cast_type);
    CS_REQUIRE(r, CNNL_STATUS_NOT_SUPPORTED, fn, "cast_type is not one the stand-in serves");
    CS_REQUIRE(!(r->flags & MLU500_ONLY) || cs_mlu500(), CNNL_STATUS_ARCH_MISMATCH, fn,
               "this bfloat16 conversion is supported only on MLU500 series");
    CS_REQUIRE(input_desc->dtype == r->from && output_desc->dtype == r->to, CNNL_STATUS_BAD_PARAM, fn,
               "descriptor dtypes do not match cast_type");
    CS_REQUIRE(cs_same_shape(input_desc, output_desc), CNNL_STATUS_BAD_PARAM, fn, "input and output shapes differ");
    CS_REQUIRE(input_desc->ndim < CS_DIM_MAX || (cs_contiguous(input_desc) && cs_contiguous(output_desc)),
               CNNL_STATUS_BAD_PARAM, fn, "a non-contiguous tensor needs fewer than CNNL_DIM_MAX dims");
    if (cs_numel(input_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(input && output, CNNL_STATUS_BAD_PARAM, fn, "input or output is NULL");
    cast_job *j = malloc(sizeof *j);
    if (j) *j = (cast_job){*r, *input_desc, *output_desc, input, output};
    return cs_submit(handle, fn, cast_run, j);
}
