/* Built only when $NEUWARE_HOME/include/{cnrt,cnnl,cncl}.h exist (CMakeLists.txt). It
 * compares what mlu_api.h declares with the SDK's headers, so that a wrong declaration stops
 * the build on an SDK host, naming what is wrong, instead of miscomputing on the device:
 *   1. every value (enum constant) mlu_api.h defines;
 *   2. every function type of the X-macro tables, with IT_MLU_SDK_TYPES making mlu_api.h's
 *      aliases the SDK's own types (so an int where the SDK has size_t, a missing const on
 *      a pointer, a swapped pair of arguments of different types all fail);
 *   3. the size and layout of the CNCL clique id.
 * Checked against CNRT 6.14.1, CNNL 1.28.6 and CNCL 1.25.0 (docs/backends/mlu.md). */
#include <cncl.h>
#include <cnnl.h>
#include <cnrt.h>

#define IT_MLU_SDK_TYPES 1
#include "mlu.h"

#define SAME(ours, theirs) _Static_assert((ours) == (long long)(theirs), #ours " != " #theirs " (fix mlu_api.h)")
SAME(MLU_cnrtSuccess, cnrtSuccess);
SAME(MLU_cnrtErrorNotReady, cnrtErrorNotReady);
SAME(MLU_cnrtErrorBusy, cnrtErrorBusy);
SAME(MLU_cnrtMemcpyHostToDev, cnrtMemcpyHostToDev);
SAME(MLU_cnrtMemcpyDevToDev, cnrtMemcpyDevToDev);
SAME(MLU_cnrtMemcpyDevToHost, cnrtMemcpyDevToHost);
SAME(MLU_cnrtMemcpyHostToHost, cnrtMemcpyHostToHost);
SAME(MLU_cnrtAttrComputeCapabilityMajor, cnrtAttrComputeCapabilityMajor);
SAME(MLU_cnrtAttrComputeCapabilityMinor, cnrtAttrComputeCapabilityMinor);
SAME(MLU_CNNL_STATUS_SUCCESS, CNNL_STATUS_SUCCESS);
SAME(MLU_CNNL_STATUS_ARCH_MISMATCH, CNNL_STATUS_ARCH_MISMATCH);
SAME(MLU_CNNL_STATUS_NOT_SUPPORTED, CNNL_STATUS_NOT_SUPPORTED);
SAME(MLU_CNNL_LAYOUT_ARRAY, CNNL_LAYOUT_ARRAY);
SAME(MLU_CNNL_DTYPE_INVALID, CNNL_DTYPE_INVALID);
SAME(MLU_CNNL_DTYPE_HALF, CNNL_DTYPE_HALF);
SAME(MLU_CNNL_DTYPE_FLOAT, CNNL_DTYPE_FLOAT);
SAME(MLU_CNNL_DTYPE_INT8, CNNL_DTYPE_INT8);
SAME(MLU_CNNL_DTYPE_INT16, CNNL_DTYPE_INT16);
SAME(MLU_CNNL_DTYPE_INT32, CNNL_DTYPE_INT32);
SAME(MLU_CNNL_DTYPE_UINT8, CNNL_DTYPE_UINT8);
SAME(MLU_CNNL_DTYPE_BOOL, CNNL_DTYPE_BOOL);
SAME(MLU_CNNL_DTYPE_INT64, CNNL_DTYPE_INT64);
SAME(MLU_CNNL_DTYPE_UINT16, CNNL_DTYPE_UINT16);
SAME(MLU_CNNL_DTYPE_UINT32, CNNL_DTYPE_UINT32);
SAME(MLU_CNNL_DTYPE_UINT64, CNNL_DTYPE_UINT64);
SAME(MLU_CNNL_DTYPE_DOUBLE, CNNL_DTYPE_DOUBLE);
SAME(MLU_CNNL_DTYPE_BFLOAT16, CNNL_DTYPE_BFLOAT16);
SAME(MLU_CNNL_MATMUL_DESC_COMPUTE_TYPE, CNNL_MATMUL_DESC_COMPUTE_TYPE);
SAME(MLU_CNNL_MATMUL_DESC_TRANSA, CNNL_MATMUL_DESC_TRANSA);
SAME(MLU_CNNL_MATMUL_DESC_TRANSB, CNNL_MATMUL_DESC_TRANSB);
SAME(MLU_CNNL_MATMUL_ALLOW_TF32, CNNL_MATMUL_ALLOW_TF32);
SAME(MLU_CNNL_MATMUL_USE_BETA, CNNL_MATMUL_USE_BETA);
SAME(MLU_CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_ACCURATE);
SAME(MLU_CNNL_SOFTMAX_MODE_LOW_DIMENSION, CNNL_SOFTMAX_MODE_LOW_DIMENSION);
#define SAME_CAST(from, to, name, value) SAME(value, CNNL_CAST_##name);
MLU_CNNL_CAST_TABLE(SAME_CAST)
SAME(MLU_CNCL_RET_SUCCESS, CNCL_RET_SUCCESS);
SAME(MLU_cnclFloat16, cnclFloat16);
SAME(MLU_cnclBfloat16, cnclBfloat16);
SAME(MLU_cnclFloat32, cnclFloat32);
SAME(MLU_cnclInt8, cnclInt8);
SAME(MLU_cnclInt16, cnclInt16);
SAME(MLU_cnclInt32, cnclInt32);
SAME(MLU_cnclInt64, cnclInt64);
SAME(MLU_cnclUint8, cnclUint8);
SAME(MLU_cnclSum, cnclSum);
SAME(MLU_cnclMax, cnclMax);

/* The clique id crosses the core as bytes (it_ccl_unique_id): all of it must fit. */
_Static_assert(sizeof(struct cnclCliqueId) == 136, "struct cnclCliqueId is no longer 136 bytes");
_Static_assert(sizeof(struct cnclCliqueId) <= IT_CCL_UNIQUE_ID_BYTES, "cnclCliqueId does not fit it_ccl_unique_id");

/* Function types: ours against the SDK's declaration of the same name. */
#define SAME_FN(lib, ret, name, params, req)                                                                           \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params),                                     \
                   #name ": mlu_api.h's prototype differs from " #lib ".h (fix mlu_api.h)");
MLU_CNRT_CALLS(SAME_FN)
MLU_CNNL_CALLS(SAME_FN)
MLU_CNCL_CALLS(SAME_FN)
