/* The 13 element types, with InfiniTrain's enum values, and fp16/bf16 conversion.
 *
 * fp16 (IEEE binary16) and bf16 (the top half of a binary32) are storage types: kernels
 * convert to fp32, compute, and round back. Every float -> half/bf16 conversion rounds to
 * nearest, ties to even; NaN stays NaN (quiet, sign kept), +-Inf stays Inf, values past the
 * largest finite half become Inf, and subnormals are produced and read exactly. */
#ifndef INFINITRAIN_DTYPE_H
#define INFINITRAIN_DTYPE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum it_dtype {
    IT_DTYPE_BOOL = 0,
    IT_DTYPE_U8 = 1,
    IT_DTYPE_I8 = 2,
    IT_DTYPE_U16 = 3,
    IT_DTYPE_I16 = 4,
    IT_DTYPE_U32 = 5,
    IT_DTYPE_I32 = 6,
    IT_DTYPE_U64 = 7,
    IT_DTYPE_I64 = 8,
    IT_DTYPE_BF16 = 9,
    IT_DTYPE_FP16 = 10,
    IT_DTYPE_FP32 = 11,
    IT_DTYPE_FP64 = 12,
} it_dtype;

#define IT_DTYPE_COUNT 13

/* Size in bytes of one element; 0 for a value outside the enum. */
IT_API size_t it_dtype_size(it_dtype dtype);
/* "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
 * "bfloat16", "float16", "float32", "float64"; "invalid" outside the enum. */
IT_API const char *it_dtype_name(it_dtype dtype);
/* Accepts the names above and the short forms (u8, i32, bf16, fp16, fp32, f32, float, ...).
 * Returns IT_ERR_INVALID_ARG (with a message listing the accepted names) otherwise. */
IT_API it_status it_dtype_from_name(const char *name, it_dtype *out);
IT_API bool it_dtype_valid(int dtype);
IT_API bool it_dtype_is_float(it_dtype dtype);  /* bf16, fp16, fp32, fp64 */
IT_API bool it_dtype_is_signed(it_dtype dtype); /* signed integers and floats */

/* Conversions with the rounding rules above; widening to fp32 is exact except that a
 * signalling NaN comes back quiet (as hardware conversions do). */
IT_API float it_fp16_to_fp32(uint16_t h);
IT_API uint16_t it_fp32_to_fp16(float f);
IT_API float it_bf16_to_fp32(uint16_t b);
IT_API uint16_t it_fp32_to_bf16(float f);
/* The shortest decimal that rounds to f, as a double: 0.9f -> 0.9, 3e-4f -> 3e-4. Python
 * callers wrote those decimals, and torch forms 1 - beta1, beta1^step and lr / bc1 from them
 * in double; starting from the float itself would differ in the last bit. The optimizer
 * kernels of every backend read their float hyperparameters through it. */
IT_API double it_f32_as_decimal(float f);

/* A fill value that carries any element exactly: int64/uint64 without going through a
 * double, floating values as double. */
typedef enum it_scalar_kind { IT_SCALAR_F64 = 0, IT_SCALAR_I64 = 1, IT_SCALAR_U64 = 2 } it_scalar_kind;
typedef struct it_scalar {
    it_scalar_kind kind;
    union {
        double f64;
        int64_t i64;
        uint64_t u64;
    } v;
} it_scalar;

static inline it_scalar it_scalar_f64(double x) {
    it_scalar s;
    s.kind = IT_SCALAR_F64;
    s.v.f64 = x;
    return s;
}
static inline it_scalar it_scalar_i64(int64_t x) {
    it_scalar s;
    s.kind = IT_SCALAR_I64;
    s.v.i64 = x;
    return s;
}
static inline it_scalar it_scalar_u64(uint64_t x) {
    it_scalar s;
    s.kind = IT_SCALAR_U64;
    s.v.u64 = x;
    return s;
}

#ifdef __cplusplus
}
#endif
#endif
