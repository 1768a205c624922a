/* Element types: sizes, names, classification, and the exported fp16/bf16 conversions (the
 * bit manipulation itself is it_scalar_cast.h's, which every backend's kernels inline). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "infinitrain/dtype.h"
#include "infinitrain/scalar/it_scalar_cast.h"

/* Indexed by it_dtype; the enum values are InfiniTrain's and fixed (dtype.h). */
static const struct {
    size_t size;
    const char *name;
    const char *aliases[4]; /* short forms accepted by it_dtype_from_name, NULL-terminated */
    bool is_float, is_signed;
} dtype_info[IT_DTYPE_COUNT] = {
    [IT_DTYPE_BOOL] = {1, "bool", {NULL}, false, false},
    [IT_DTYPE_U8] = {1, "uint8", {"u8", NULL}, false, false},
    [IT_DTYPE_I8] = {1, "int8", {"i8", NULL}, false, true},
    [IT_DTYPE_U16] = {2, "uint16", {"u16", NULL}, false, false},
    [IT_DTYPE_I16] = {2, "int16", {"i16", "short", NULL}, false, true},
    [IT_DTYPE_U32] = {4, "uint32", {"u32", NULL}, false, false},
    [IT_DTYPE_I32] = {4, "int32", {"i32", "int", NULL}, false, true},
    [IT_DTYPE_U64] = {8, "uint64", {"u64", NULL}, false, false},
    [IT_DTYPE_I64] = {8, "int64", {"i64", "long", NULL}, false, true},
    [IT_DTYPE_BF16] = {2, "bfloat16", {"bf16", NULL}, true, true},
    [IT_DTYPE_FP16] = {2, "float16", {"fp16", "f16", "half", NULL}, true, true},
    [IT_DTYPE_FP32] = {4, "float32", {"fp32", "f32", "float", NULL}, true, true},
    [IT_DTYPE_FP64] = {8, "float64", {"fp64", "f64", "double", NULL}, true, true},
};

bool it_dtype_valid(int dtype) { return dtype >= 0 && dtype < IT_DTYPE_COUNT; }

size_t it_dtype_size(it_dtype dtype) { return it_dtype_valid((int)dtype) ? dtype_info[dtype].size : 0; }

const char *it_dtype_name(it_dtype dtype) { return it_dtype_valid((int)dtype) ? dtype_info[dtype].name : "invalid"; }

bool it_dtype_is_float(it_dtype dtype) { return it_dtype_valid((int)dtype) && dtype_info[dtype].is_float; }

bool it_dtype_is_signed(it_dtype dtype) { return it_dtype_valid((int)dtype) && dtype_info[dtype].is_signed; }

/* ASCII case-insensitive equality, so "BF16" and "Float32" from config files are accepted. */
static bool name_equal(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

it_status it_dtype_from_name(const char *name, it_dtype *out) {
    static const char accepted[] = "bool, uint8 (u8), int8 (i8), uint16 (u16), int16 (i16, short), uint32 (u32), "
                                   "int32 (i32, int), uint64 (u64), int64 (i64, long), bfloat16 (bf16), "
                                   "float16 (fp16, f16, half), float32 (fp32, f32, float), "
                                   "float64 (fp64, f64, double)";
    if (out == NULL) return it_error(IT_ERR_INVALID_ARG, "it_dtype_from_name: out is NULL");
    if (name == NULL) return it_error(IT_ERR_INVALID_ARG, "it_dtype_from_name: name is NULL; accepted: %s", accepted);
    for (int d = 0; d < IT_DTYPE_COUNT; d++) {
        bool hit = name_equal(name, dtype_info[d].name);
        for (int a = 0; !hit && dtype_info[d].aliases[a] != NULL; a++) hit = name_equal(name, dtype_info[d].aliases[a]);
        if (hit) {
            *out = (it_dtype)d;
            return IT_OK;
        }
    }
    return it_error(IT_ERR_INVALID_ARG, "it_dtype_from_name: unknown dtype \"%s\"; accepted (case-insensitive): %s",
                    name, accepted);
}

float it_fp16_to_fp32(uint16_t h) { return it_sc_fp16_to_fp32(h); }
uint16_t it_fp32_to_fp16(float f) { return it_sc_fp32_to_fp16(f); }
float it_bf16_to_fp32(uint16_t b) { return it_sc_bf16_to_fp32(b); }
uint16_t it_fp32_to_bf16(float f) { return it_sc_fp32_to_bf16(f); }

double it_f32_as_decimal(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}
