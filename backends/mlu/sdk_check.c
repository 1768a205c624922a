/* Built only when $NEUWARE_HOME/include/{cnrt,cnnl,cncl}.h exist (CMakeLists.txt).
 * 1. Static-asserts every enum value mlu_api.h declares against the SDK's headers: a wrong
 *    value stops the build here, naming the constant, instead of miscomputing on device.
 * 2. Supplies the cnnlCastDataType_t values of the direct cast table from cnnl.h. */
#include <cncl.h>
#include <cnnl.h>
#include <cnrt.h>

#include "mlu.h"

#define SAME(ours, theirs) _Static_assert((ours) == (int)(theirs), #ours " != " #theirs " (fix mlu_api.h)")
SAME(MLU_cnrtSuccess, cnrtSuccess);
SAME(MLU_cnrtErrorNotReady, cnrtErrorNotReady);
SAME(MLU_cnrtMemcpyHostToDev, cnrtMemcpyHostToDev);
SAME(MLU_cnrtMemcpyDevToDev, cnrtMemcpyDevToDev);
SAME(MLU_cnrtMemcpyDevToHost, cnrtMemcpyDevToHost);
SAME(MLU_cnrtMemcpyHostToHost, cnrtMemcpyHostToHost);
SAME(MLU_CNNL_STATUS_SUCCESS, CNNL_STATUS_SUCCESS);
SAME(MLU_CNNL_LAYOUT_ARRAY, CNNL_LAYOUT_ARRAY);
SAME(MLU_CNNL_DTYPE_HALF, CNNL_DTYPE_HALF);
SAME(MLU_CNNL_DTYPE_FLOAT, CNNL_DTYPE_FLOAT);
SAME(MLU_CNNL_DTYPE_INT8, CNNL_DTYPE_INT8);
SAME(MLU_CNNL_DTYPE_INT16, CNNL_DTYPE_INT16);
SAME(MLU_CNNL_DTYPE_INT32, CNNL_DTYPE_INT32);
SAME(MLU_CNNL_DTYPE_UINT8, CNNL_DTYPE_UINT8);
SAME(MLU_CNNL_DTYPE_BOOL, CNNL_DTYPE_BOOL);
SAME(MLU_CNNL_DTYPE_INT64, CNNL_DTYPE_INT64);
SAME(MLU_CNNL_DTYPE_DOUBLE, CNNL_DTYPE_DOUBLE);
SAME(MLU_CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_BFLOAT16);
SAME(MLU_CNNL_MATMUL_DESC_TRANSA, CNNL_MATMUL_DESC_TRANSA);
SAME(MLU_CNNL_MATMUL_DESC_TRANSB, CNNL_MATMUL_DESC_TRANSB);
SAME(MLU_CNNL_MATMUL_USE_BETA, CNNL_MATMUL_USE_BETA);
SAME(MLU_CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_ACCURATE);
SAME(MLU_CNNL_SOFTMAX_MODE_LOW_DIMENSION, CNNL_SOFTMAX_MODE_LOW_DIMENSION);
SAME(MLU_CNCL_RET_SUCCESS, CNCL_RET_SUCCESS);
SAME(MLU_cnclFloat32, cnclFloat32);
SAME(MLU_cnclFloat16, cnclFloat16);
SAME(MLU_cnclBfloat16, cnclBfloat16);
SAME(MLU_cnclInt32, cnclInt32);
SAME(MLU_cnclInt64, cnclInt64);
SAME(MLU_cnclSum, cnclSum);
SAME(MLU_cnclMax, cnclMax);
_Static_assert(sizeof(cnclCliqueId) <= sizeof(mlu_cnclCliqueId), "cnclCliqueId larger than mlu_cnclCliqueId");

bool mlu_cnnl_cast_value(it_dtype from, it_dtype to, int *value) {
    static const struct {
        it_dtype from, to;
        int value;
    } casts[] = {
        {IT_DTYPE_FP32, IT_DTYPE_FP16, (int)CNNL_CAST_FLOAT_TO_HALF},
        {IT_DTYPE_FP32, IT_DTYPE_BF16, (int)CNNL_CAST_FLOAT_TO_BFLOAT16},
        {IT_DTYPE_FP32, IT_DTYPE_I32, (int)CNNL_CAST_FLOAT_TO_INT32},
        {IT_DTYPE_FP32, IT_DTYPE_I16, (int)CNNL_CAST_FLOAT_TO_INT16},
        {IT_DTYPE_FP32, IT_DTYPE_I8, (int)CNNL_CAST_FLOAT_TO_INT8},
        {IT_DTYPE_FP32, IT_DTYPE_U8, (int)CNNL_CAST_FLOAT_TO_UINT8},
        {IT_DTYPE_FP32, IT_DTYPE_BOOL, (int)CNNL_CAST_FLOAT_TO_BOOL},
        {IT_DTYPE_FP32, IT_DTYPE_I64, (int)CNNL_CAST_FLOAT_TO_INT64},
        {IT_DTYPE_FP32, IT_DTYPE_FP64, (int)CNNL_CAST_FLOAT_TO_DOUBLE},
        {IT_DTYPE_FP16, IT_DTYPE_FP32, (int)CNNL_CAST_HALF_TO_FLOAT},
        {IT_DTYPE_FP16, IT_DTYPE_I32, (int)CNNL_CAST_HALF_TO_INT32},
        {IT_DTYPE_FP16, IT_DTYPE_I16, (int)CNNL_CAST_HALF_TO_INT16},
        {IT_DTYPE_FP16, IT_DTYPE_I8, (int)CNNL_CAST_HALF_TO_INT8},
        {IT_DTYPE_FP16, IT_DTYPE_U8, (int)CNNL_CAST_HALF_TO_UINT8},
        {IT_DTYPE_FP16, IT_DTYPE_BOOL, (int)CNNL_CAST_HALF_TO_BOOL},
        {IT_DTYPE_FP16, IT_DTYPE_I64, (int)CNNL_CAST_HALF_TO_INT64},
        {IT_DTYPE_BF16, IT_DTYPE_FP32, (int)CNNL_CAST_BFLOAT16_TO_FLOAT},
        {IT_DTYPE_BF16, IT_DTYPE_BOOL, (int)CNNL_CAST_BFLOAT16_TO_BOOL},
        {IT_DTYPE_I32, IT_DTYPE_FP32, (int)CNNL_CAST_INT32_TO_FLOAT},
        {IT_DTYPE_I32, IT_DTYPE_FP16, (int)CNNL_CAST_INT32_TO_HALF},
        {IT_DTYPE_I32, IT_DTYPE_BF16, (int)CNNL_CAST_INT32_TO_BFLOAT16},
        {IT_DTYPE_I32, IT_DTYPE_I8, (int)CNNL_CAST_INT32_TO_INT8},
        {IT_DTYPE_I32, IT_DTYPE_I16, (int)CNNL_CAST_INT32_TO_INT16},
        {IT_DTYPE_I32, IT_DTYPE_BOOL, (int)CNNL_CAST_INT32_TO_BOOL},
        {IT_DTYPE_I32, IT_DTYPE_U8, (int)CNNL_CAST_INT32_TO_UINT8},
        {IT_DTYPE_I32, IT_DTYPE_I64, (int)CNNL_CAST_INT32_TO_INT64},
        {IT_DTYPE_I16, IT_DTYPE_FP32, (int)CNNL_CAST_INT16_TO_FLOAT},
        {IT_DTYPE_I16, IT_DTYPE_FP16, (int)CNNL_CAST_INT16_TO_HALF},
        {IT_DTYPE_I16, IT_DTYPE_I32, (int)CNNL_CAST_INT16_TO_INT32},
        {IT_DTYPE_I8, IT_DTYPE_FP32, (int)CNNL_CAST_INT8_TO_FLOAT},
        {IT_DTYPE_I8, IT_DTYPE_FP16, (int)CNNL_CAST_INT8_TO_HALF},
        {IT_DTYPE_I8, IT_DTYPE_I32, (int)CNNL_CAST_INT8_TO_INT32},
        {IT_DTYPE_I8, IT_DTYPE_I16, (int)CNNL_CAST_INT8_TO_INT16},
        {IT_DTYPE_U8, IT_DTYPE_FP32, (int)CNNL_CAST_UINT8_TO_FLOAT},
        {IT_DTYPE_U8, IT_DTYPE_FP16, (int)CNNL_CAST_UINT8_TO_HALF},
        {IT_DTYPE_U8, IT_DTYPE_I32, (int)CNNL_CAST_UINT8_TO_INT32},
        {IT_DTYPE_U8, IT_DTYPE_I64, (int)CNNL_CAST_UINT8_TO_INT64},
        {IT_DTYPE_BOOL, IT_DTYPE_FP32, (int)CNNL_CAST_BOOL_TO_FLOAT},
        {IT_DTYPE_BOOL, IT_DTYPE_FP16, (int)CNNL_CAST_BOOL_TO_HALF},
        {IT_DTYPE_BOOL, IT_DTYPE_I32, (int)CNNL_CAST_BOOL_TO_INT32},
        {IT_DTYPE_BOOL, IT_DTYPE_BF16, (int)CNNL_CAST_BOOL_TO_BFLOAT16},
        {IT_DTYPE_I64, IT_DTYPE_I32, (int)CNNL_CAST_INT64_TO_INT32},
        {IT_DTYPE_I64, IT_DTYPE_FP32, (int)CNNL_CAST_INT64_TO_FLOAT},
        {IT_DTYPE_I64, IT_DTYPE_FP16, (int)CNNL_CAST_INT64_TO_HALF},
        {IT_DTYPE_FP64, IT_DTYPE_FP32, (int)CNNL_CAST_DOUBLE_TO_FLOAT},
    };
    for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++)
        if (casts[i].from == from && casts[i].to == to) return *value = casts[i].value, true;
    return false;
}
