/* The subset of the Cambricon CNRT, CNNL and CNCL C APIs this backend calls, declared here so
 * that the plugin builds without the SDK; the libraries are resolved at run time (loader.c).
 *
 * Every value and prototype below was read from the SDK headers CNRT 6.14.1 (cnrt.h), CNNL
 * 1.28.6 (cnnl.h) and CNCL 1.25.0 (cncl.h), cited as [cnrt.h:LINE] etc. Where those headers
 * are found at configure time, sdk_check.c asserts every value and every function type of
 * the tables below against them (a difference stops the build, naming it).
 *
 * Types: without the SDK, handles are opaque struct pointers of the SDK's own tags and enums
 * are int (enums are 4 bytes, passed as int: the same ABI). sdk_check.c defines
 * IT_MLU_SDK_TYPES before including this file, which makes every alias the SDK's own type,
 * so that the compiler compares the prototypes exactly. */
#ifndef IT_MLU_API_H
#define IT_MLU_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef IT_MLU_SDK_TYPES
typedef cnrtRet_t mlu_cnrtRet_t;
typedef cnrtQueue_t mlu_cnrtQueue_t;
typedef cnrtNotifier_t mlu_cnrtNotifier_t;
typedef cnrtMemTransDir_t mlu_cnrtMemTransDir_t;
typedef cnrtDeviceAttr_t mlu_cnrtDeviceAttr_t;
typedef cnnlStatus_t mlu_cnnlStatus_t;
typedef cnnlHandle_t mlu_cnnlHandle_t;
typedef cnnlTensorDescriptor_t mlu_cnnlTensorDescriptor_t;
typedef cnnlMatMulDescriptor_t mlu_cnnlMatMulDescriptor_t;
typedef cnnlMatMulAlgo_t mlu_cnnlMatMulAlgo_t;
typedef cnnlMatMulHeuristicResult_t mlu_cnnlMatMulHeuristicResult_t;
typedef cnnlMatMulPrefer_t mlu_cnnlMatMulPrefer_t;
typedef cnnlTensorLayout_t mlu_cnnlTensorLayout_t;
typedef cnnlDataType_t mlu_cnnlDataType_t;
typedef cnnlCastDataType_t mlu_cnnlCastDataType_t;
typedef cnnlMatMulDescAttribute_t mlu_cnnlMatMulDescAttribute_t;
typedef cnnlSoftmaxAlgorithm_t mlu_cnnlSoftmaxAlgorithm_t;
typedef cnnlSoftmaxMode_t mlu_cnnlSoftmaxMode_t;
typedef cnclResult_t mlu_cnclResult_t;
typedef cnclComm_t mlu_cnclComm_t;
typedef cnclDataType_t mlu_cnclDataType_t;
typedef cnclReduceOp_t mlu_cnclReduceOp_t;
typedef struct cnclCliqueId mlu_cnclCliqueId;
#else
typedef int mlu_cnrtRet_t;
typedef struct cnrtQueue *mlu_cnrtQueue_t;       /* [cnrt.h:839] */
typedef struct cnrtNotifier *mlu_cnrtNotifier_t; /* [cnrt.h:880] */
typedef int mlu_cnrtMemTransDir_t;
typedef int mlu_cnrtDeviceAttr_t;
typedef int mlu_cnnlStatus_t;
typedef struct cnnlContext *mlu_cnnlHandle_t;                              /* [cnnl.h:2141] */
typedef struct cnnlTensorStruct *mlu_cnnlTensorDescriptor_t;               /* [cnnl.h:2500] */
typedef struct cnnlMatMulStruct *mlu_cnnlMatMulDescriptor_t;               /* [cnnl.h:2588] */
typedef struct cnnlMatMulAlgoStruct *mlu_cnnlMatMulAlgo_t;                 /* [cnnl.h:2632] */
typedef struct cnnlMatMulHeuristicResult *mlu_cnnlMatMulHeuristicResult_t; /* [cnnl.h:2614] */
typedef struct cnnlMatMulPrefer *mlu_cnnlMatMulPrefer_t;                   /* [cnnl.h:2618] */
typedef int mlu_cnnlTensorLayout_t;
typedef int mlu_cnnlDataType_t;
typedef int mlu_cnnlCastDataType_t;
typedef int mlu_cnnlMatMulDescAttribute_t;
typedef int mlu_cnnlSoftmaxAlgorithm_t;
typedef int mlu_cnnlSoftmaxMode_t;
typedef int mlu_cnclResult_t;
typedef struct cnclComm *mlu_cnclComm_t; /* [cncl.h:224] */
typedef int mlu_cnclDataType_t;
typedef int mlu_cnclReduceOp_t;
/* struct cnclCliqueId [cncl.h:234-237]: 128 bytes of data, then a 64-bit hash: 136 bytes. */
#define MLU_CNCL_CLIQUE_ID_BYTES_SIZE 128
typedef struct mlu_cnclCliqueId {
    char data[MLU_CNCL_CLIQUE_ID_BYTES_SIZE];
    uint64_t hash;
} mlu_cnclCliqueId;
#endif

/* ---------------------------------------------------------------- CNRT */
#define MLU_cnrtSuccess 0                       /* [cnrt.h:59] */
#define MLU_cnrtErrorNotReady 1                 /* [cnrt.h:61] */
#define MLU_cnrtErrorBusy 632014                /* [cnrt.h:141], deprecated */
#define MLU_cnrtMemcpyHostToDev 0               /* [cnrt.h:416] */
#define MLU_cnrtMemcpyDevToDev 1                /* [cnrt.h:418] */
#define MLU_cnrtMemcpyDevToHost 2               /* [cnrt.h:420] */
#define MLU_cnrtMemcpyHostToHost 3              /* [cnrt.h:422] */
#define MLU_cnrtAttrComputeCapabilityMajor 0x01 /* [cnrt.h:220] */
#define MLU_cnrtAttrComputeCapabilityMinor 0x02 /* [cnrt.h:222] */

/* ---------------------------------------------------------------- CNNL */
#define MLU_CNNL_STATUS_SUCCESS 0       /* [cnnl.h:112] */
#define MLU_CNNL_STATUS_ARCH_MISMATCH 5 /* [cnnl.h:130] */
#define MLU_CNNL_STATUS_NOT_SUPPORTED 7 /* [cnnl.h:137] */
#define MLU_CNNL_LAYOUT_ARRAY 4         /* [cnnl.h:173] */

/* cnnlDataType_t [cnnl.h:218-241] */
#define MLU_CNNL_DTYPE_INVALID 0
#define MLU_CNNL_DTYPE_HALF 1
#define MLU_CNNL_DTYPE_FLOAT 2
#define MLU_CNNL_DTYPE_INT8 3
#define MLU_CNNL_DTYPE_INT16 4
#define MLU_CNNL_DTYPE_INT32 6
#define MLU_CNNL_DTYPE_UINT8 7
#define MLU_CNNL_DTYPE_BOOL 8
#define MLU_CNNL_DTYPE_INT64 9
#define MLU_CNNL_DTYPE_UINT32 11
#define MLU_CNNL_DTYPE_UINT64 12
#define MLU_CNNL_DTYPE_UINT16 13
#define MLU_CNNL_DTYPE_DOUBLE 14
#define MLU_CNNL_DTYPE_BFLOAT16 17

/* cnnlMatMulDescAttribute_t [cnnl.h:1619-1655]. COMPUTE_TYPE "must be set before doing matrix
 * multiplication"; ALLOW_TF32 is on by default (fp32 products then read TF32 inputs). */
#define MLU_CNNL_MATMUL_DESC_COMPUTE_TYPE 0
#define MLU_CNNL_MATMUL_DESC_TRANSA 3
#define MLU_CNNL_MATMUL_DESC_TRANSB 4
#define MLU_CNNL_MATMUL_ALLOW_TF32 10
#define MLU_CNNL_MATMUL_USE_BETA 11
/* cnnlSoftmaxAlgorithm_t [cnnl.h:352], cnnlSoftmaxMode_t [cnnl.h:366] */
#define MLU_CNNL_SOFTMAX_ACCURATE 1
#define MLU_CNNL_SOFTMAX_MODE_LOW_DIMENSION 2

/* cnnlCastDataType_t [cnnl.h:1138-]: the direct conversions the cast plan uses (host.c, mlu_cast_direct). */
#define MLU_CNNL_CAST_TABLE(X)                                                                                         \
    X(FP32, FP16, FLOAT_TO_HALF, 210)                                                                                  \
    X(FP32, BF16, FLOAT_TO_BFLOAT16, 272)                                                                              \
    X(FP32, I32, FLOAT_TO_INT32, 260)                                                                                  \
    X(FP32, I16, FLOAT_TO_INT16, 240)                                                                                  \
    X(FP32, I8, FLOAT_TO_INT8, 230)                                                                                    \
    X(FP32, U8, FLOAT_TO_UINT8, 270)                                                                                   \
    X(FP32, BOOL, FLOAT_TO_BOOL, 280)                                                                                  \
    X(FP32, I64, FLOAT_TO_INT64, 290)                                                                                  \
    X(FP32, FP64, FLOAT_TO_DOUBLE, 202)                                                                                \
    X(FP16, FP32, HALF_TO_FLOAT, 120)                                                                                  \
    X(FP16, I32, HALF_TO_INT32, 160)                                                                                   \
    X(FP16, I16, HALF_TO_INT16, 140)                                                                                   \
    X(FP16, I8, HALF_TO_INT8, 130)                                                                                     \
    X(FP16, U8, HALF_TO_UINT8, 170)                                                                                    \
    X(FP16, BOOL, HALF_TO_BOOL, 180)                                                                                   \
    X(FP16, I64, HALF_TO_INT64, 190)                                                                                   \
    X(BF16, FP32, BFLOAT16_TO_FLOAT, 721)                                                                              \
    X(BF16, BOOL, BFLOAT16_TO_BOOL, 178)                                                                               \
    X(I32, FP32, INT32_TO_FLOAT, 620)                                                                                  \
    X(I32, FP16, INT32_TO_HALF, 610)                                                                                   \
    X(I32, BF16, INT32_TO_BFLOAT16, 617)                                                                               \
    X(I32, I8, INT32_TO_INT8, 630)                                                                                     \
    X(I32, I16, INT32_TO_INT16, 640)                                                                                   \
    X(I32, BOOL, INT32_TO_BOOL, 680)                                                                                   \
    X(I32, U8, INT32_TO_UINT8, 670)                                                                                    \
    X(I32, I64, INT32_TO_INT64, 690)                                                                                   \
    X(I16, FP32, INT16_TO_FLOAT, 420)                                                                                  \
    X(I16, FP16, INT16_TO_HALF, 410)                                                                                   \
    X(I16, I32, INT16_TO_INT32, 460)                                                                                   \
    X(I8, FP32, INT8_TO_FLOAT, 320)                                                                                    \
    X(I8, FP16, INT8_TO_HALF, 310)                                                                                     \
    X(I8, I32, INT8_TO_INT32, 360)                                                                                     \
    X(I8, I16, INT8_TO_INT16, 340)                                                                                     \
    X(U8, FP32, UINT8_TO_FLOAT, 720)                                                                                   \
    X(U8, FP16, UINT8_TO_HALF, 710)                                                                                    \
    X(U8, I32, UINT8_TO_INT32, 760)                                                                                    \
    X(U8, I64, UINT8_TO_INT64, 790)                                                                                    \
    X(BOOL, FP32, BOOL_TO_FLOAT, 820)                                                                                  \
    X(BOOL, FP16, BOOL_TO_HALF, 810)                                                                                   \
    X(BOOL, I32, BOOL_TO_INT32, 860)                                                                                   \
    X(BOOL, BF16, BOOL_TO_BFLOAT16, 817)                                                                               \
    X(I64, I32, INT64_TO_INT32, 960)                                                                                   \
    X(I64, FP32, INT64_TO_FLOAT, 920)                                                                                  \
    X(I64, FP16, INT64_TO_HALF, 910)                                                                                   \
    X(I64, BF16, INT64_TO_BFLOAT16, 917)                                                                               \
    X(I64, FP64, INT64_TO_DOUBLE, 914)                                                                                 \
    X(FP64, FP32, DOUBLE_TO_FLOAT, 21)

/* ---------------------------------------------------------------- CNCL [cncl.h:64-200] */
#define MLU_CNCL_RET_SUCCESS 0
#define MLU_cnclFloat16 0x10
#define MLU_cnclBfloat16 0x11
#define MLU_cnclFloat32 0x12
#define MLU_cnclInt8 0x20
#define MLU_cnclInt16 0x21
#define MLU_cnclInt32 0x22
#define MLU_cnclInt64 0x23
#define MLU_cnclUint8 0x30
#define MLU_cnclSum 0
#define MLU_cnclMax 2 /* 3 is cnclMin */

/* ---------------------------------------------------------------- the call table
 * One X-macro line per function: (library, return type, name, parameter list, required).
 * loader.c fills a struct of pointers from it with dlsym; a required symbol missing from its
 * library fails init naming the symbol and the library; an optional one reads as NULL and
 * its caller takes another way. Prototypes as in the SDK headers (sdk_check.c compares). */
#define MLU_CNRT_CALLS(X)                                                                                              \
    X(cnrt, mlu_cnrtRet_t, cnrtGetDeviceCount, (unsigned int *count), 1)                                               \
    X(cnrt, mlu_cnrtRet_t, cnrtSetDevice, (int dev), 1)                                                                \
    X(cnrt, mlu_cnrtRet_t, cnrtGetDevice, (int *dev), 1)                                                               \
    X(cnrt, mlu_cnrtRet_t, cnrtDeviceGetAttribute, (int *value, mlu_cnrtDeviceAttr_t attr, int dev), 0)                \
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
    X(cnrt, mlu_cnrtRet_t, cnrtMemAllocAsync, (void **p, size_t n, mlu_cnrtQueue_t q), 0)                              \
    X(cnrt, mlu_cnrtRet_t, cnrtMemFreeAsync, (void *p, mlu_cnrtQueue_t q), 0)                                          \
    X(cnrt, mlu_cnrtRet_t, cnrtHostMalloc, (void **p, size_t n), 1)                                                    \
    X(cnrt, mlu_cnrtRet_t, cnrtFreeHost, (void *p), 1)                                                                 \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpy, (void *dst, void *src, size_t n, mlu_cnrtMemTransDir_t dir), 1)                 \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpyAsync,                                                                            \
      (void *dst, void *src, size_t n, mlu_cnrtQueue_t q, mlu_cnrtMemTransDir_t dir), 1)                               \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpyAsync_V2,                                                                         \
      (void *dst, void *src, size_t n, mlu_cnrtQueue_t q, mlu_cnrtMemTransDir_t dir), 0)                               \
    X(cnrt, mlu_cnrtRet_t, cnrtMemcpyAsync_V3,                                                                         \
      (void *dst, void *src, size_t n, mlu_cnrtQueue_t q, mlu_cnrtMemTransDir_t dir), 0)                               \
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
      (mlu_cnnlTensorDescriptor_t d, mlu_cnnlTensorLayout_t layout, mlu_cnnlDataType_t dtype, int ndim,                \
       const int *dims, const int *strides),                                                                           \
      1)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlSetTensorDescriptorOnchipDataType,                                                   \
      (mlu_cnnlTensorDescriptor_t d, mlu_cnnlDataType_t dt), 0)                                                        \
    X(cnnl, mlu_cnnlStatus_t, cnnlCastDataType,                                                                        \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, mlu_cnnlCastDataType_t cast,                  \
       mlu_cnnlTensorDescriptor_t yd, void *y),                                                                        \
      1)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlCopy,                                                                                \
      (mlu_cnnlHandle_t h, mlu_cnnlTensorDescriptor_t xd, const void *x, mlu_cnnlTensorDescriptor_t yd, void *y), 1)   \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulDescCreate, (mlu_cnnlMatMulDescriptor_t * d), 0)                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulDescDestroy, (mlu_cnnlMatMulDescriptor_t d), 0)                                \
    X(cnnl, mlu_cnnlStatus_t, cnnlSetMatMulDescAttr,                                                                   \
      (mlu_cnnlMatMulDescriptor_t d, mlu_cnnlMatMulDescAttribute_t attr, const void *v, size_t n), 0)                  \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulAlgoCreate, (mlu_cnnlMatMulAlgo_t * a), 0)                                     \
    X(cnnl, mlu_cnnlStatus_t, cnnlMatMulAlgoDestroy, (mlu_cnnlMatMulAlgo_t a), 0)                                      \
    X(cnnl, mlu_cnnlStatus_t, cnnlCreateMatMulHeuristicResult, (mlu_cnnlMatMulHeuristicResult_t * r), 0)               \
    X(cnnl, mlu_cnnlStatus_t, cnnlDestroyMatMulHeuristicResult, (mlu_cnnlMatMulHeuristicResult_t r), 0)                \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetBatchMatMulAlgoHeuristic,                                                         \
      (mlu_cnnlHandle_t h, mlu_cnnlMatMulDescriptor_t d, mlu_cnnlTensorDescriptor_t a, mlu_cnnlTensorDescriptor_t b,   \
       mlu_cnnlTensorDescriptor_t c, mlu_cnnlMatMulPrefer_t prefer, int requested, mlu_cnnlMatMulHeuristicResult_t *r, \
       int *ret),                                                                                                      \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlGetBatchMatMulHeuristicResult,                                                       \
      (mlu_cnnlMatMulHeuristicResult_t r, mlu_cnnlMatMulAlgo_t a, size_t * ws), 0)                                     \
    X(cnnl, mlu_cnnlStatus_t, cnnlBatchMatMulBCast_v2,                                                                 \
      (mlu_cnnlHandle_t h, mlu_cnnlMatMulDescriptor_t d, mlu_cnnlMatMulAlgo_t algo, const void *alpha,                 \
       mlu_cnnlTensorDescriptor_t ad, const void *a, mlu_cnnlTensorDescriptor_t bd, const void *b, const void *beta,   \
       mlu_cnnlTensorDescriptor_t cd, void *c, void *ws, size_t ws_size),                                              \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlSoftmaxForward,                                                                      \
      (mlu_cnnlHandle_t h, mlu_cnnlSoftmaxAlgorithm_t algo, mlu_cnnlSoftmaxMode_t mode, const void *alpha,             \
       mlu_cnnlTensorDescriptor_t xd, const void *x, const void *beta, mlu_cnnlTensorDescriptor_t yd, void *y),        \
      0)                                                                                                               \
    X(cnnl, mlu_cnnlStatus_t, cnnlSoftmaxBackward,                                                                     \
      (mlu_cnnlHandle_t h, mlu_cnnlSoftmaxAlgorithm_t algo, mlu_cnnlSoftmaxMode_t mode, const void *alpha,             \
       mlu_cnnlTensorDescriptor_t yd, const void *y, mlu_cnnlTensorDescriptor_t dyd, const void *dy, const void *beta, \
       mlu_cnnlTensorDescriptor_t dxd, void *dx),                                                                      \
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
       const void *idx, int padding_idx, const float *max_norm, const float *norm_type, mlu_cnnlTensorDescriptor_t od, \
       void *out),                                                                                                     \
      0)                                                                                                               \
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
       void *ws, size_t ws_size, mlu_cnnlTensorDescriptor_t dxd, void *dx, mlu_cnnlTensorDescriptor_t dwbd, void *dw,  \
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
      (mlu_cnclComm_t * comms, int n, const int *devs, const int *ranks, int nranks, mlu_cnclCliqueId *id), 1)         \
    X(cncl, mlu_cnclResult_t, cnclFreeComm, (mlu_cnclComm_t c), 1)                                                     \
    X(cncl, const char *, cnclGetErrorStr, (mlu_cnclResult_t r), 1)                                                    \
    X(cncl, mlu_cnclResult_t, cnclAllReduce,                                                                           \
      (const void *send, void *recv, size_t n, mlu_cnclDataType_t dt, mlu_cnclReduceOp_t op, mlu_cnclComm_t c,         \
       mlu_cnrtQueue_t q),                                                                                             \
      1)                                                                                                               \
    X(cncl, mlu_cnclResult_t, cnclAllGather,                                                                           \
      (const void *send, void *recv, size_t n, mlu_cnclDataType_t dt, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)         \
    X(cncl, mlu_cnclResult_t, cnclReduceScatter,                                                                       \
      (const void *send, void *recv, size_t n, mlu_cnclDataType_t dt, mlu_cnclReduceOp_t op, mlu_cnclComm_t c,         \
       mlu_cnrtQueue_t q),                                                                                             \
      1)                                                                                                               \
    X(cncl, mlu_cnclResult_t, cnclBroadcast,                                                                           \
      (const void *send, void *recv, size_t n, mlu_cnclDataType_t dt, int root, mlu_cnclComm_t c, mlu_cnrtQueue_t q),  \
      1)                                                                                                               \
    X(cncl, mlu_cnclResult_t, cnclSend,                                                                                \
      (void *buf, size_t n, mlu_cnclDataType_t dt, int peer, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                  \
    X(cncl, mlu_cnclResult_t, cnclRecv,                                                                                \
      (void *buf, size_t n, mlu_cnclDataType_t dt, int peer, mlu_cnclComm_t c, mlu_cnrtQueue_t q), 1)                  \
    X(cncl, mlu_cnclResult_t, cnclGroupStart, (void), 1)                                                               \
    X(cncl, mlu_cnclResult_t, cnclGroupEnd, (void), 1)

/* The resolved table (loader.c). */
#define MLU_DECLARE_PTR(lib, ret, name, params, req) ret(*name) params;
typedef struct mlu_api {
    MLU_CNRT_CALLS(MLU_DECLARE_PTR)
    MLU_CNNL_CALLS(MLU_DECLARE_PTR)
    MLU_CNCL_CALLS(MLU_DECLARE_PTR)
    int have_cncl; /* libcncl.so loaded with every required symbol */
    /* The tests' CPU stand-in exports this string and Cambricon's libraries do not: when set,
     * the backend says at init that it runs on the test double. */
    const char *test_double;
} mlu_api;
#undef MLU_DECLARE_PTR

#endif
