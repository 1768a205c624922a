/* The subset of the Cambricon CNRT (>= 6), CNNL and CNCL C APIs this backend calls, declared
 * here because no SDK header is available where the plugin is built (docs/backends/mlu.md
 * C6). The libraries are resolved at run time (loader.c).
 *
 * Every handle is an opaque pointer and every enum an int. Values come from:
 *   [h]  a public copy of a CNRT >= 5 cnrt.h (cnrtSuccess = 0, cnrtErrorNotReady = 1,
 *        cnrtMemTransDir_t order HostToDev, DevToDev, DevToHost, HostToHost, PeerToPeer,
 *        NoDirection);
 *   [b]  a public Rust binding of CNNL (CNNL_STATUS_SUCCESS 0, CNNL_LAYOUT_ARRAY 4,
 *        CNNL_DTYPE_HALF 1, CNNL_DTYPE_FLOAT 2);
 *   [?]  TO CONFIRM against the SDK headers: the rest of cnnlDataType_t and the CNCL enums.
 * When the SDK headers are found at configure time, sdk_check.c static-asserts every value
 * below against them and takes the cnnlCastDataType_t values (which no public source shows)
 * from cnnl.h. Without headers the cast kernel refuses to run (see mlu_cnnl_cast_value). */
#ifndef IT_MLU_API_H
#define IT_MLU_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- CNRT */
typedef int mlu_cnrtRet_t;
typedef void *mlu_cnrtQueue_t;
typedef void *mlu_cnrtNotifier_t;
#define MLU_cnrtSuccess 0          /* [h] */
#define MLU_cnrtErrorNotReady 1    /* [h]; cnrtErrorBusy is recognised by name, see runtime.c */
#define MLU_cnrtMemcpyHostToDev 0  /* [h] */
#define MLU_cnrtMemcpyDevToDev 1   /* [h] */
#define MLU_cnrtMemcpyDevToHost 2  /* [h] */
#define MLU_cnrtMemcpyHostToHost 3 /* [h] */

/* ---------------------------------------------------------------- CNNL */
typedef int mlu_cnnlStatus_t;
typedef void *mlu_cnnlHandle_t;
typedef void *mlu_cnnlTensorDescriptor_t;
typedef void *mlu_cnnlMatMulDescriptor_t;
typedef void *mlu_cnnlMatMulAlgo_t;
typedef void *mlu_cnnlMatMulHeuristicResult_t;
#define MLU_CNNL_STATUS_SUCCESS 0 /* [b] */
#define MLU_CNNL_LAYOUT_ARRAY 4   /* [b] */

/* cnnlDataType_t: HALF and FLOAT from [b]; the rest [?] (mlu-ops' mluOpDataType_t order). */
#define MLU_CNNL_DTYPE_INVALID 0
#define MLU_CNNL_DTYPE_HALF 1
#define MLU_CNNL_DTYPE_FLOAT 2
#define MLU_CNNL_DTYPE_INT8 3
#define MLU_CNNL_DTYPE_INT16 4
#define MLU_CNNL_DTYPE_INT32 6
#define MLU_CNNL_DTYPE_UINT8 7
#define MLU_CNNL_DTYPE_BOOL 8
#define MLU_CNNL_DTYPE_INT64 9
#define MLU_CNNL_DTYPE_DOUBLE 10
#define MLU_CNNL_DTYPE_UINT16 11
#define MLU_CNNL_DTYPE_UINT32 12
#define MLU_CNNL_DTYPE_UINT64 13
#define MLU_CNNL_DTYPE_BFLOAT16 16

/* cnnlMatMulDescAttribute_t and softmax enums [?]. */
#define MLU_CNNL_MATMUL_DESC_TRANSA 1
#define MLU_CNNL_MATMUL_DESC_TRANSB 2
#define MLU_CNNL_MATMUL_USE_BETA 5
#define MLU_CNNL_SOFTMAX_ACCURATE 1
#define MLU_CNNL_SOFTMAX_MODE_LOW_DIMENSION 2

/* ---------------------------------------------------------------- CNCL [?] */
typedef int mlu_cnclResult_t;
typedef void *mlu_cnclComm_t;
#define MLU_CNCL_RET_SUCCESS 0
#define MLU_CNCL_CLIQUE_ID_BYTES 128 /* cnclCliqueId is a struct of data[] + hash [?] */
typedef struct mlu_cnclCliqueId {
    char data[MLU_CNCL_CLIQUE_ID_BYTES - 8];
    uint64_t hash;
} mlu_cnclCliqueId;
#define MLU_cnclInt8 0
#define MLU_cnclUint8 1
#define MLU_cnclInt32 2
#define MLU_cnclInt16 4
#define MLU_cnclFloat16 6
#define MLU_cnclFloat32 7
#define MLU_cnclInt64 8
#define MLU_cnclBfloat16 10
#define MLU_cnclSum 0
#define MLU_cnclMax 3

/* ---------------------------------------------------------------- the call table
 * One X-macro line per function: (library, return type, name, parameter list, required).
 * loader.c fills a struct of pointers from it with dlsym; a required symbol missing from its
 * library fails init naming the symbol and the library. Signatures as public code calls them
 * (docs/backends/mlu.md C1-C3). */
#define MLU_CNRT_CALLS(X)                                                                                              \
    X(cnrt, mlu_cnrtRet_t, cnrtGetDeviceCount, (unsigned int *count), 1)                                               \
    X(cnrt, mlu_cnrtRet_t, cnrtSetDevice, (int dev), 1)                                                                \
    X(cnrt, mlu_cnrtRet_t, cnrtGetDevice, (int *dev), 1)                                                               \
    X(cnrt, mlu_cnrtRet_t, cnrtSyncDevice, (void), 1)                                                                  \
    X(cnrt, const char *, cnrtGetErrorStr, (mlu_cnrtRet_t ret), 1)                                                     \
    X(cnrt, const char *, cnrtGetErrorName, (mlu_cnrtRet_t ret), 0)                                                    \
    X(cnrt, mlu_cnrtRet_t, cnrtGetLastError, (void), 0)                                                                \
    X(cnrt, mlu_cnrtRet_t, cnrtGetLibVersion, (int *major, int *minor, int *patch), 0)                                 \
    X(cnrt, mlu_cnrtRet_t, cnrtQueueCreate, (mlu_cnrtQueue_t * q), 1)                                                  \
    X(cnrt, mlu_cnrtRet_t, cnrtQueueCreateWithPriority, (mlu_cnrtQueue_t * q, unsigned int flags, int prio), 0)        \
    X(cnrt, mlu_cnrtRet_t, cnrtDeviceGetQueuePriorityRange, (int *least, int *greatest), 0)                            \
    X(cnrt, mlu_cnrtRet_t, cnrtQueueDestroy, (mlu_cnrtQueue_t q), 1)                                                   \
    X(cnrt, mlu_cnrtRet_t, cnrtQueueSync, (mlu_cnrtQueue_t q), 1)                                                      \
    X(cnrt, mlu_cnrtRet_t, cnrtNotifierCreate, (mlu_cnrtNotifier_t * n), 1)                                            \
    X(cnrt, mlu_cnrtRet_t, cnrtNotifierDestroy, (mlu_cnrtNotifier_t n), 1)                                             \
    X(cnrt, mlu_cnrtRet_t, cnrtPlaceNotifier, (mlu_cnrtNotifier_t n, mlu_cnrtQueue_t q), 1)                            \
    X(cnrt, mlu_cnrtRet_t, cnrtQueueWaitNotifier, (mlu_cnrtNotifier_t n, mlu_cnrtQueue_t q, unsigned int flags), 1)    \
    X(cnrt, mlu_cnrtRet_t, cnrtQueryNotifier, (mlu_cnrtNotifier_t n), 1)                                               \
    X(cnrt, mlu_cnrtRet_t, cnrtWaitNotifier, (mlu_cnrtNotifier_t n), 1)                                                \
    X(cnrt, mlu_cnrtRet_t, cnrtNotifierElapsedTime, (mlu_cnrtNotifier_t a, mlu_cnrtNotifier_t b, float *ms), 0)        \
    X(cnrt, mlu_cnrtRet_t, cnrtMalloc, (void **p, size_t n), 1)                                                        \
    X(cnrt, mlu_cnrtRet_t, cnrtFree, (void *p), 1)                                                                     \
    X(cnrt, mlu_cnrtRet_t, cnrtHostMalloc, (void **p, size_t n), 1)                                                    \
    X(cnrt, mlu_cnrtRet_t, cnrtFreeHost, (void *p), 1)                                                                 \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpy, (void *dst, void *src, size_t n, int dir), 1)                                   \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpyAsync, (void *dst, void *src, size_t n, mlu_cnrtQueue_t q, int dir), 1)           \
    X(cnrt, mlu_cnrtRet_t, cnrtMemsetAsync, (void *p, int value, size_t n, mlu_cnrtQueue_t q), 1)                      \
    X(cnrt, mlu_cnrtRet_t, cnrtMemGetInfo, (size_t * free_bytes, size_t * total_bytes), 1)

#define MLU_CNNL_CALLS(X)                                                                                              \
    X(cnnl, mlu_cnnlStatus_t, cnnlCreate, (mlu_cnnlHandle_t * h), 1)                                                   \
    X(cnnl, mlu_cnnlStatus_t, cnnlDestroy, (mlu_cnnlHandle_t h), 1)                                                    \
    X(cnnl, mlu_cnnlStatus_t, cnnlSetQueue, (mlu_cnnlHandle_t h, mlu_cnrtQueue_t q), 1)                                \
    X(cnnl, const char *, cnnlGetErrorString, (mlu_cnnlStatus_t s), 1)                                                 \
    X(cnnl, mlu_cnnlStatus_t, cnnlCreateTensorDescriptor, (mlu_cnnlTensorDescriptor_t * d), 1)                         \
    X(cnnl, mlu_cnnlStatus_t, cnnlDestroyTensorDescriptor, (mlu_cnnlTensorDescriptor_t d), 1)                          \
    X(cnnl, mlu_cnnlStatus_t, cnnlSetTensorDescriptorEx,                                                               \
      (mlu_cnnlTensorDescriptor_t d, int layout, int dtype, int ndim, const int *dims, const int *strides), 1)         \
    X(cnnl, mlu_cnnlStatus_t, cnnlCastDataType,                                                                        \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, int cast, mlu_cnnlTensorDescriptor_t yd,      \
       void *y),                                                                                                       \
      1)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlCopy,                                                                                \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, mlu_cnnlTensorDescriptor_t yd, void *y), 1)   \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulDescCreate, (mlu_cnnlMatMulDescriptor_t * d), 0)                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulDescDestroy, (mlu_cnnlMatMulDescriptor_t d), 0)                                \
    X(cnnl, mlu_cnnlStatus_t, cnnlSetMatMulDescAttr,                                                                   \
      (mlu_cnnlMatMulDescriptor_t d, int attr, const void *v, size_t n), 0)                                            \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulAlgoCreate, (mlu_cnnlMatMulAlgo_t * a), 0)                                     \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulAlgoDestroy, (mlu_cnnlMatMulAlgo_t a), 0)                                      \
    X(cnnl, mlu_cnnlStatus_t, cnnlCreateMatMulHeuristicResult, (mlu_cnnlMatMulHeuristicResult_t * r), 0)               \
    X(cnnl, mlu_cnnlStatus_t, cnnlDestroyMatMulHeuristicResult, (mlu_cnnlMatMulHeuristicResult_t r), 0)                \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetBatchMatMulAlgoHeuristic,                                                         \
      (mlu_cnnlHandle_t h, mlu_cnnlMatMulDescriptor_t d, mlu_cnnlTensorDescriptor_t a, mlu_cnnlTensorDescriptor_t b,   \
       mlu_cnnlTensorDescriptor_t c, void *prefer, int requested, mlu_cnnlMatMulHeuristicResult_t *r, int *ret),       \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetBatchMatMulHeuristicResult,                                                       \
      (mlu_cnnlMatMulHeuristicResult_t r, mlu_cnnlMatMulAlgo_t a, size_t * ws), 0)                                     \
    X(cnnl, mlu_cnnlStatus_t, cnnlBatchMatMulBCast_v2,                                                                 \
      (mlu_cnnlHandle_t h, mlu_cnnlMatMulDescriptor_t d, mlu_cnnlMatMulAlgo_t algo, const void *alpha,                 \
       mlu_cnnlTensorDescriptor_t ad, const void *a, mlu_cnnlTensorDescriptor_t bd, const void *b, const void *beta,   \
       mlu_cnnlTensorDescriptor_t cd, void *c, void *ws, size_t ws_size),                                              \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlSoftmaxForward,                                                                      \
      (mlu_cnnlHandle_t h, int algo, int mode, const void *alpha, mlu_cnnlTensorDescriptor_t xd, const void *x,        \
       const void *beta, mlu_cnnlTensorDescriptor_t yd, void *y),                                                      \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlSoftmaxBackward,                                                                     \
      (mlu_cnnlHandle_t h, int algo, int mode, const void *alpha, mlu_cnnlTensorDescriptor_t yd, const void *y,        \
       mlu_cnnlTensorDescriptor_t dyd, const void *dy, const void *beta, mlu_cnnlTensorDescriptor_t dxd, void *dx),    \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetLayerNormOpWorkspaceSize,                                                         \
      (mlu_cnnlHandle_t h, int axis, mlu_cnnlTensorDescriptor_t xd, size_t *ws), 0)                                    \
    X(cnnl, mlu_cnnlStatus_t, cnnlLayerNormForward,                                                                    \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, int axis, mlu_cnnlTensorDescriptor_t wbd,     \
       const void *w, const void *b, float eps, void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t yd, void *y,      \
       mlu_cnnlTensorDescriptor_t mrd, void *mean, void *rstd),                                                        \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetLayerNormBackwardWorkspaceSize,                                                   \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, int axis, size_t *ws), 0)                                    \
    X(cnnl, mlu_cnnlStatus_t, cnnlLayerNormBackward_v2,                                                                \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, int axis, mlu_cnnlTensorDescriptor_t dzd,     \
       const void *dz, mlu_cnnlTensorDescriptor_t wbd, const void *w, mlu_cnnlTensorDescriptor_t mrd,                  \
       const void *mean, const void *rstd, void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t dxd, void *dx,         \
       void *dw, void *db),                                                                                            \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlEmbeddingForward_v2,                                                                 \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t wd, const void *w, mlu_cnnlTensorDescriptor_t id,                \
       const void *idx, int padding_idx, const void *max_norm, const void *norm_type, mlu_cnnlTensorDescriptor_t od,   \
       void *out),                                                                                                     \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetEmbeddingBackwardWorkspaceSize,                                                   \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t gd, mlu_cnnlTensorDescriptor_t od, int scale_by_freq,            \
       size_t *ws),                                                                                                    \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlEmbeddingBackward,                                                                   \
      (mlu_cnnlHandle_t h, int padding_idx, int scale_by_freq, mlu_cnnlTensorDescriptor_t id, const void *idx,         \
       mlu_cnnlTensorDescriptor_t gd, const void *grad, void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t od,       \
       void *out),                                                                                                     \
      0)                                                                                                               \
    /* RMSNorm and top-k: signatures as DIOPI impl/camb (functions_ext/rms_norm.cpp, topk.cpp) and OneFlow, */         \
    /* MegEngine, Paddle call them; bool arguments are C++ bool (one byte, same ABI as C11 _Bool). */                  \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetRmsNormOpWorkspaceSize,                                                           \
      (mlu_cnnlHandle_t h, int axis, mlu_cnnlTensorDescriptor_t xd, size_t *ws), 0)                                    \
    X(cnnl, mlu_cnnlStatus_t, cnnlRmsNormForward,                                                                      \
      (mlu_cnnlHandle_t h, int axis, mlu_cnnlTensorDescriptor_t xd, const void *x, mlu_cnnlTensorDescriptor_t wbd,     \
       const void *w, const void *b, float eps, void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t yd, void *y,      \
       mlu_cnnlTensorDescriptor_t rd, void *rstd),                                                                     \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetRmsNormBackwardWorkspaceSize,                                                     \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, int axis, size_t *ws), 0)                                    \
    X(cnnl, mlu_cnnlStatus_t, cnnlRmsNormBackward,                                                                     \
      (mlu_cnnlHandle_t h, int axis, mlu_cnnlTensorDescriptor_t xd, const void *x, mlu_cnnlTensorDescriptor_t dyd,     \
       const void *dy, mlu_cnnlTensorDescriptor_t wd, const void *w, mlu_cnnlTensorDescriptor_t rd, const void *rstd,  \
       void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t dxd, void *dx, mlu_cnnlTensorDescriptor_t dwd, void *dw,   \
       void *db),                                                                                                      \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetTopKTensorWorkspaceSize,                                                          \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, int k, int dim, bool largest, mlu_cnnlTensorDescriptor_t vd, \
       mlu_cnnlTensorDescriptor_t id, size_t *ws),                                                                     \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlTopKTensor_v3,                                                                       \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, int k, int dim, bool largest, bool sorted,    \
       bool lower_index_first, void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t vd, void *values,                  \
       mlu_cnnlTensorDescriptor_t id, void *indices),                                                                  \
      0)

#define MLU_CNCL_CALLS(X)                                                                                              \
    X(cncl, mlu_cnclResult_t, cnclGetCliqueId, (mlu_cnclCliqueId * id), 1)                                             \
    X(cncl, mlu_cnclResult_t, cnclInitComms,                                                                           \
      (mlu_cnclComm_t * comms, int n, const int *devs, const int *ranks, int nranks, const mlu_cnclCliqueId *id), 1)   \
    X(cncl, mlu_cnclResult_t, cnclFreeComm, (mlu_cnclComm_t c), 1)                                                     \
    X(cncl, const char *, cnclGetErrorStr, (mlu_cnclResult_t r), 1)                                                    \
    X(cncl, mlu_cnclResult_t, cnclAllReduce,                                                                           \
      (const void *send, void *recv, size_t n, int dt, int op, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                \
    X(cncl, mlu_cnclResult_t, cnclAllGather,                                                                           \
      (const void *send, void *recv, size_t n, int dt, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                        \
    X(cncl, mlu_cnclResult_t, cnclReduceScatter,                                                                       \
      (const void *send, void *recv, size_t n, int dt, int op, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                \
    X(cncl, mlu_cnclResult_t, cnclBroadcast,                                                                           \
      (const void *send, void *recv, size_t n, int dt, int root, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)              \
    X(cncl, mlu_cnclResult_t, cnclSend,                                                                                \
      (const void *buf, size_t n, int dt, int peer, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                           \
    X(cncl, mlu_cnclResult_t, cnclRecv, (void *buf, size_t n, int dt, int peer, mlu_cnclComm_t c, mlu_cnrtQueue_t q),  \
      1)                                                                                                               \
    X(cncl, mlu_cnclResult_t, cnclGroupStart, (void), 1)                                                               \
    X(cncl, mlu_cnclResult_t, cnclGroupEnd, (void), 1)

/* The resolved table (loader.c). */
#define MLU_DECLARE_PTR(lib, ret, name, params, req) ret(*name) params;
typedef struct mlu_api {
    MLU_CNRT_CALLS(MLU_DECLARE_PTR)
    MLU_CNNL_CALLS(MLU_DECLARE_PTR)
    MLU_CNCL_CALLS(MLU_DECLARE_PTR)
    int have_cncl; /* libcncl.so loaded with every required symbol */
} mlu_api;
#undef MLU_DECLARE_PTR

#endif
