/* TEST DOUBLE. The CPU stand-in of Cambricon's CNRT, CNNL and CNCL: the declarations it
 * defines, in the real libraries' names, values and prototypes.
 *
 * The stand-in is built only for the tests (tests/cambricon_standin/CMakeLists.txt), never
 * installed, and says what it is wherever it is seen (it_cambricon_test_double, its version
 * and error strings). It lets the MLU backend run end to end where there is no MLU; it proves
 * nothing about the device's rounding, BANG code or speed (docs/backends/mlu.md).
 *
 * The facts below were read from the SDK headers CNRT 6.14.1 (cnrt.h), CNNL 1.28.6 (cnnl.h)
 * and CNCL 1.25.0 (cncl.h); this file is written for the stand-in and copies none of them.
 * Where those headers are present (IT_STANDIN_REAL_HEADERS, set by CMake when
 * $NEUWARE_HOME/include has all three), the stand-in is compiled against the real headers
 * instead, so the compiler checks every definition here against Cambricon's prototype. */
#ifndef IT_CAMBRICON_STANDIN_API_H
#define IT_CAMBRICON_STANDIN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef IT_STANDIN_REAL_HEADERS
#include <cncl.h>
#include <cnnl.h>
#include <cnrt.h>
#else

/* ================================================================ CNRT (cnrt.h) */
typedef enum {
    cnrtSuccess = 0,
    cnrtErrorNotReady = 1,
    cnrtErrorInit = 100002,
    cnrtErrorNoDevice = 100004,
    cnrtErrorDeviceInvalid = 100005,
    cnrtErrorArgsInvalid = 100006,
    cnrtErrorSys = 100007,
    cnrtErrorSysNoMem = 100010,
    cnrtErrorInvalidResourceHandle = 100014,
    cnrtErrorIllegalState = 100015,
    cnrtErrorNotSupport = 100050,
    cnrtErrorOpsNotPermitted = 100051,
    cnrtErrorQueue = 100060,
    cnrtErrorNoMem = 100100,
    cnrtErrorNotFound = 100301,
    cnrtErrorDevice = 632006,
    cnrtErrorMemcpyDirectionInvalid = 632013,
    cnrtErrorBusy = 632014,
    cnrtErrorCndrvFuncCall = 632015,
} cnrtRet_t;

typedef enum {
    cnrtMemcpyHostToDev = 0,
    cnrtMemcpyDevToDev,
    cnrtMemcpyDevToHost,
    cnrtMemcpyHostToHost,
    cnrtMemcpyPeerToPeer,
    cnrtMemcpyNoDirection,
} cnrtMemTransDir_t;

/* cnrtDeviceAttr_t: the attributes the stand-in answers. */
typedef enum {
    cnrtAttrComputeCapabilityMajor = 0x01,
    cnrtAttrComputeCapabilityMinor = 0x02,
    cnrtAttrClusterCount = 0x205,
    cnrtAttrMcorePerCluster = 0x206,
} cnrtDeviceAttr_t;

typedef struct cnrtQueue *cnrtQueue_t;
/* The implicit queues a handle may name instead of a created one. */
#define cnrtQueuePerThread ((cnrtQueue_t)1)
#define cnrtQueueLegacy ((cnrtQueue_t)2)
typedef struct cnrtNotifier *cnrtNotifier_t;

cnrtRet_t cnrtGetDeviceCount(unsigned int *pCount);
cnrtRet_t cnrtSetDevice(int ordinal);
cnrtRet_t cnrtGetDevice(int *pOrdinal);
cnrtRet_t cnrtDeviceGetAttribute(int *pValue, cnrtDeviceAttr_t attr, int device);
cnrtRet_t cnrtSyncDevice(void);
const char *cnrtGetErrorStr(cnrtRet_t error);
const char *cnrtGetErrorName(cnrtRet_t error);
cnrtRet_t cnrtGetLastError(void);
cnrtRet_t cnrtPeekAtLastError(void);
cnrtRet_t cnrtGetLibVersion(int *major, int *minor, int *patch);
cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue);
cnrtRet_t cnrtQueueCreateWithPriority(cnrtQueue_t *pQueue, unsigned int flags, int priority);
cnrtRet_t cnrtDeviceGetQueuePriorityRange(int *pMinPriority, int *pMaxPriority);
cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue);
cnrtRet_t cnrtQueueSync(cnrtQueue_t queue);
cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue);
cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *pNotifier);
cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier);
cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue);
cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag);
cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float *ms);
cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes);
cnrtRet_t cnrtFree(void *ptr);
cnrtRet_t cnrtHostMalloc(void **pPtr, size_t bytes);
cnrtRet_t cnrtFreeHost(void *ptr);
cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync_V2(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync_V3(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes, cnrtQueue_t queue);
cnrtRet_t cnrtMemGetInfo(size_t *free, size_t *total);
cnrtRet_t cnrtMemAllocAsync(void **pPtr, size_t byteSize, cnrtQueue_t queue);
cnrtRet_t cnrtMemFreeAsync(void *mluAddr, cnrtQueue_t hqueue);

/* ================================================================ CNNL (cnnl.h) */
typedef enum {
    CNNL_STATUS_SUCCESS = 0,
    CNNL_STATUS_NOT_INITIALIZED = 1,
    CNNL_STATUS_ALLOC_FAILED = 2,
    CNNL_STATUS_BAD_PARAM = 3,
    CNNL_STATUS_INTERNAL_ERROR = 4,
    CNNL_STATUS_ARCH_MISMATCH = 5,
    CNNL_STATUS_EXECUTION_FAILED = 6,
    CNNL_STATUS_NOT_SUPPORTED = 7,
    CNNL_STATUS_NUMERICAL_OVERFLOW = 8,
} cnnlStatus_t;

typedef enum {
    CNNL_LAYOUT_NCHW = 0,
    CNNL_LAYOUT_NHWC = 1,
    CNNL_LAYOUT_HWCN = 2,
    CNNL_LAYOUT_NDHWC = 3,
    CNNL_LAYOUT_ARRAY = 4,
    CNNL_LAYOUT_NCDHW = 5,
    CNNL_LAYOUT_TNC = 6,
    CNNL_LAYOUT_NTC = 7,
    CNNL_LAYOUT_NC = 8,
    CNNL_LAYOUT_NLC = 9,
    CNNL_LAYOUT_NCL = 10,
    CNNL_LAYOUT_GNC = 11,
    CNNL_LAYOUT_NGC = 12,
} cnnlTensorLayout_t;

typedef enum {
    CNNL_DTYPE_INVALID = 0,
    CNNL_DTYPE_HALF = 1,
    CNNL_DTYPE_FLOAT = 2,
    CNNL_DTYPE_INT8 = 3,
    CNNL_DTYPE_INT16 = 4,
    CNNL_DTYPE_INT31 = 5,
    CNNL_DTYPE_INT32 = 6,
    CNNL_DTYPE_UINT8 = 7,
    CNNL_DTYPE_BOOL = 8,
    CNNL_DTYPE_INT64 = 9,
    CNNL_DTYPE_UINT32 = 11,
    CNNL_DTYPE_UINT64 = 12,
    CNNL_DTYPE_UINT16 = 13,
    CNNL_DTYPE_DOUBLE = 14,
    CNNL_DTYPE_COMPLEX_HALF = 15,
    CNNL_DTYPE_COMPLEX_FLOAT = 16,
    CNNL_DTYPE_BFLOAT16 = 17,
    CNNL_DTYPE_COMPLEX_DOUBLE = 18,
    CNNL_DTYPE_INT4X2 = 19,
    CNNL_DTYPE_FLOAT8_E4M3FN = 20,
    CNNL_DTYPE_FLOAT8_E5M2 = 21,
} cnnlDataType_t;

typedef enum { CNNL_SOFTMAX_FAST = 0, CNNL_SOFTMAX_ACCURATE = 1, CNNL_SOFTMAX_LOG = 2 } cnnlSoftmaxAlgorithm_t;
typedef enum {
    CNNL_SOFTMAX_MODE_HIGH_DIMENSION = 0,
    CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION = 1,
    CNNL_SOFTMAX_MODE_LOW_DIMENSION = 2,
} cnnlSoftmaxMode_t;

typedef enum {
    CNNL_MATMUL_DESC_COMPUTE_TYPE = 0,
    CNNL_MATMUL_DESC_SCALE_TYPE = 1,
    CNNL_MATMUL_DESC_TRANSA = 3,
    CNNL_MATMUL_DESC_TRANSB = 4,
    CNNL_MATMUL_DESC_TRANSC = 5,
    CNNL_MATMUL_ALLOW_TF32 = 10,
    CNNL_MATMUL_USE_BETA = 11,
    CNNL_MATMUL_USE_STRIDE = 13,
} cnnlMatMulDescAttribute_t;

/* cnnlCastDataType_t: the conversions the stand-in serves (a subset of cnnl.h's list). */
typedef enum {
    CNNL_CAST_FLOAT_TO_HALF = 210,
    CNNL_CAST_FLOAT_TO_INT32 = 260,
    CNNL_CAST_FLOAT_TO_INT16 = 240,
    CNNL_CAST_FLOAT_TO_INT8 = 230,
    CNNL_CAST_FLOAT_TO_UINT8 = 270,
    CNNL_CAST_FLOAT_TO_BOOL = 280,
    CNNL_CAST_FLOAT_TO_INT64 = 290,
    CNNL_CAST_FLOAT_TO_DOUBLE = 202,
    CNNL_CAST_FLOAT_TO_BFLOAT16 = 272,
    CNNL_CAST_HALF_TO_FLOAT = 120,
    CNNL_CAST_HALF_TO_INT32 = 160,
    CNNL_CAST_HALF_TO_INT16 = 140,
    CNNL_CAST_HALF_TO_INT8 = 130,
    CNNL_CAST_HALF_TO_UINT8 = 170,
    CNNL_CAST_HALF_TO_BOOL = 180,
    CNNL_CAST_HALF_TO_INT64 = 190,
    CNNL_CAST_INT32_TO_FLOAT = 620,
    CNNL_CAST_INT32_TO_HALF = 610,
    CNNL_CAST_INT32_TO_BFLOAT16 = 617,
    CNNL_CAST_INT32_TO_INT8 = 630,
    CNNL_CAST_INT32_TO_INT16 = 640,
    CNNL_CAST_INT32_TO_UINT8 = 670,
    CNNL_CAST_INT32_TO_BOOL = 680,
    CNNL_CAST_INT32_TO_INT64 = 690,
    CNNL_CAST_INT16_TO_FLOAT = 420,
    CNNL_CAST_INT16_TO_HALF = 410,
    CNNL_CAST_INT16_TO_BFLOAT16 = 417,
    CNNL_CAST_INT16_TO_INT32 = 460,
    CNNL_CAST_INT16_TO_INT8 = 430,
    CNNL_CAST_INT16_TO_INT64 = 490,
    CNNL_CAST_INT8_TO_FLOAT = 320,
    CNNL_CAST_INT8_TO_HALF = 310,
    CNNL_CAST_INT8_TO_BFLOAT16 = 317,
    CNNL_CAST_INT8_TO_INT32 = 360,
    CNNL_CAST_INT8_TO_INT16 = 340,
    CNNL_CAST_UINT8_TO_FLOAT = 720,
    CNNL_CAST_UINT8_TO_HALF = 710,
    CNNL_CAST_UINT8_TO_BFLOAT16 = 717,
    CNNL_CAST_UINT8_TO_INT32 = 760,
    CNNL_CAST_UINT8_TO_INT64 = 790,
    CNNL_CAST_BOOL_TO_FLOAT = 820,
    CNNL_CAST_BOOL_TO_HALF = 810,
    CNNL_CAST_BOOL_TO_BFLOAT16 = 817,
    CNNL_CAST_BOOL_TO_INT32 = 860,
    CNNL_CAST_BOOL_TO_INT64 = 890,
    CNNL_CAST_INT64_TO_INT32 = 960,
    CNNL_CAST_INT64_TO_INT16 = 940,
    CNNL_CAST_INT64_TO_BOOL = 980,
    CNNL_CAST_INT64_TO_FLOAT = 920,
    CNNL_CAST_INT64_TO_HALF = 910,
    CNNL_CAST_INT64_TO_BFLOAT16 = 917,
    CNNL_CAST_INT64_TO_DOUBLE = 914,
    CNNL_CAST_BFLOAT16_TO_FLOAT = 721,
    CNNL_CAST_BFLOAT16_TO_INT8 = 173,
    CNNL_CAST_BFLOAT16_TO_UINT8 = 177,
    CNNL_CAST_BFLOAT16_TO_INT16 = 174,
    CNNL_CAST_BFLOAT16_TO_INT32 = 176,
    CNNL_CAST_BFLOAT16_TO_INT64 = 179,
    CNNL_CAST_BFLOAT16_TO_BOOL = 178,
    CNNL_CAST_DOUBLE_TO_FLOAT = 21,
    CNNL_CAST_DOUBLE_TO_INT64 = 149,
} cnnlCastDataType_t;

typedef struct cnnlContext *cnnlHandle_t;
typedef struct cnnlTensorStruct *cnnlTensorDescriptor_t;
typedef struct cnnlMatMulStruct *cnnlMatMulDescriptor_t;
typedef struct cnnlMatMulHeuristicResult *cnnlMatMulHeuristicResult_t;
typedef struct cnnlMatMulPrefer *cnnlMatMulPrefer_t;
typedef struct cnnlMatMulAlgoStruct *cnnlMatMulAlgo_t;

const char *cnnlGetErrorString(cnnlStatus_t status);
void cnnlGetLibVersion(int *major, int *minor, int *patch);
cnnlStatus_t cnnlCreate(cnnlHandle_t *handle);
cnnlStatus_t cnnlDestroy(cnnlHandle_t handle);
cnnlStatus_t cnnlSetQueue(cnnlHandle_t handle, cnrtQueue_t queue);
cnnlStatus_t cnnlGetQueue(cnnlHandle_t handle, cnrtQueue_t *queue);
cnnlStatus_t cnnlCreateTensorDescriptor(cnnlTensorDescriptor_t *desc);
cnnlStatus_t cnnlDestroyTensorDescriptor(cnnlTensorDescriptor_t desc);
cnnlStatus_t cnnlSetTensorDescriptorEx(cnnlTensorDescriptor_t desc, cnnlTensorLayout_t layout, cnnlDataType_t dtype,
                                       int dimNb, const int dimSize[], const int dimStride[]);
cnnlStatus_t cnnlCastDataType(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc, const void *input,
                              const cnnlCastDataType_t cast_type, const cnnlTensorDescriptor_t output_desc,
                              void *output);
cnnlStatus_t cnnlCopy(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc, const void *input,
                      const cnnlTensorDescriptor_t output_desc, void *output);
cnnlStatus_t cnnlMatMulDescCreate(cnnlMatMulDescriptor_t *matmul_desc);
cnnlStatus_t cnnlMatMulDescDestroy(cnnlMatMulDescriptor_t matmul_desc);
cnnlStatus_t cnnlSetMatMulDescAttr(cnnlMatMulDescriptor_t matmul_desc, cnnlMatMulDescAttribute_t attr, const void *buf,
                                   size_t size_in_bytes);
cnnlStatus_t cnnlMatMulAlgoCreate(cnnlMatMulAlgo_t *algo);
cnnlStatus_t cnnlMatMulAlgoDestroy(cnnlMatMulAlgo_t algo);
cnnlStatus_t cnnlCreateMatMulHeuristicResult(cnnlMatMulHeuristicResult_t *result);
cnnlStatus_t cnnlDestroyMatMulHeuristicResult(cnnlMatMulHeuristicResult_t result);
cnnlStatus_t cnnlGetBatchMatMulAlgoHeuristic(cnnlHandle_t handle, const cnnlMatMulDescriptor_t bmm_bcast_desc,
                                             const cnnlTensorDescriptor_t a_desc, const cnnlTensorDescriptor_t b_desc,
                                             const cnnlTensorDescriptor_t c_desc, const cnnlMatMulPrefer_t preference,
                                             int requested_algo_count, cnnlMatMulHeuristicResult_t *result_array,
                                             int *return_algo_count);
cnnlStatus_t cnnlGetBatchMatMulHeuristicResult(cnnlMatMulHeuristicResult_t result, cnnlMatMulAlgo_t algo,
                                               size_t *workspace_size);
cnnlStatus_t cnnlBatchMatMulBCast_v2(cnnlHandle_t handle, const cnnlMatMulDescriptor_t bmm_bcast_desc,
                                     cnnlMatMulAlgo_t algo, const void *alpha, const cnnlTensorDescriptor_t a_desc,
                                     const void *a, const cnnlTensorDescriptor_t b_desc, const void *b,
                                     const void *beta, const cnnlTensorDescriptor_t c_desc, void *c, void *workspace,
                                     size_t workspace_size);
cnnlStatus_t cnnlSoftmaxForward(cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm, cnnlSoftmaxMode_t mode,
                                const void *alpha, const cnnlTensorDescriptor_t x_desc, const void *x, const void *beta,
                                const cnnlTensorDescriptor_t y_desc, void *y);
cnnlStatus_t cnnlSoftmaxBackward(cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm, cnnlSoftmaxMode_t mode,
                                 const void *alpha, const cnnlTensorDescriptor_t y_desc, const void *y,
                                 const cnnlTensorDescriptor_t diff_y_desc, const void *diff_y, const void *beta,
                                 const cnnlTensorDescriptor_t diff_x_desc, void *diff_x);
cnnlStatus_t cnnlGetLayerNormOpWorkspaceSize(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,
                                             size_t *size);
cnnlStatus_t cnnlLayerNormForward(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, const void *x, int axis,
                                  const cnnlTensorDescriptor_t filter_bias_desc, const void *filter, const void *bias,
                                  float eps, void *workspace, size_t workspace_size,
                                  const cnnlTensorDescriptor_t y_desc, void *y,
                                  const cnnlTensorDescriptor_t mean_rstd_desc, void *saved_mean, void *saved_rstd);
cnnlStatus_t cnnlGetLayerNormBackwardWorkspaceSize(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, int axis,
                                                   size_t *workspace_size);
cnnlStatus_t cnnlLayerNormBackward_v2(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, const void *x, int axis,
                                      const cnnlTensorDescriptor_t diff_z_desc, const void *diff_z,
                                      const cnnlTensorDescriptor_t filter_bias_desc, const void *filter,
                                      const cnnlTensorDescriptor_t mean_rstd_desc, const void *saved_mean,
                                      const void *saved_rstd, void *workspace, size_t workspace_size,
                                      const cnnlTensorDescriptor_t diff_x_desc, void *diff_x, void *diff_filter,
                                      void *diff_bias);
cnnlStatus_t cnnlEmbeddingForward_v2(cnnlHandle_t handle, const cnnlTensorDescriptor_t filter_desc, const void *filter,
                                     const cnnlTensorDescriptor_t indices_desc, const void *indices,
                                     const int padding_idx, const float *max_norm, const float *norm_type,
                                     const cnnlTensorDescriptor_t output_desc, void *output);
cnnlStatus_t cnnlGetRmsNormOpWorkspaceSize(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,
                                           size_t *workspace_size);
cnnlStatus_t cnnlRmsNormForward(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc, const void *x,
                                const cnnlTensorDescriptor_t scale_bias_desc, const void *scale, const void *bias,
                                float eps, void *workspace, size_t workspace_size, const cnnlTensorDescriptor_t y_desc,
                                void *y, const cnnlTensorDescriptor_t rms_desc, void *saved_rms);
cnnlStatus_t cnnlGetRmsNormBackwardWorkspaceSize(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, int axis,
                                                 size_t *workspace_size);
cnnlStatus_t cnnlRmsNormBackward(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc, const void *x,
                                 const cnnlTensorDescriptor_t diff_z_desc, const void *diff_z,
                                 const cnnlTensorDescriptor_t scale_desc, const void *scale,
                                 const cnnlTensorDescriptor_t rms_desc, const void *saved_rms, void *workspace,
                                 size_t workspace_size, const cnnlTensorDescriptor_t diff_x_desc, void *diff_x,
                                 const cnnlTensorDescriptor_t diff_scale_bias_desc, void *diff_scale, void *diff_bias);
cnnlStatus_t cnnlGetTopKTensorWorkspaceSize(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc, const int k,
                                            const int dim, const bool largest, const cnnlTensorDescriptor_t output_desc,
                                            const cnnlTensorDescriptor_t index_desc, size_t *workspace_size);
cnnlStatus_t cnnlTopKTensor_v3(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc, const void *input,
                               const int k, const int dim, const bool largest, const bool sorted,
                               const bool lower_index_first, void *workspace, const size_t workspace_size,
                               const cnnlTensorDescriptor_t output_desc, void *output,
                               const cnnlTensorDescriptor_t index_desc, void *index);

/* ================================================================ CNCL (cncl.h) */
typedef enum {
    CNCL_RET_SUCCESS = 0x0,
    CNCL_RET_ERR_INTERNAL = 0x01,
    CNCL_RET_ERR_UNSUPPORTED = 0x11,
    CNCL_RET_ERR_NULL_POINTER = 0x21,
    CNCL_RET_ERR_INIT = 0x51,
    CNCL_RET_ERR_NOT_INIT = 0x61,
    CNCL_RET_ERR_SYSTEM = 0x02,
    CNCL_RET_ERR_SYS_MALLOC = 0x12,
    CNCL_RET_ERR_MLU_RUNTIME = 0x03,
    CNCL_RET_ERR_ARGUMENTS = 0x07,
} cnclResult_t;

typedef enum {
    cnclInvalid = 0x0,
    cnclHalf = 0x10,
    cnclFloat16 = 0x10,
    cnclBfloat16 = 0x11,
    cnclFloat = 0x12,
    cnclFloat32 = 0x12,
    cnclInt8 = 0x20,
    cnclChar = 0x20,
    cnclInt16 = 0x21,
    cnclInt = 0x22,
    cnclInt32 = 0x22,
    cnclInt64 = 0x23,
    cnclUint8 = 0x30,
    cnclUint16 = 0x31,
    cnclUint32 = 0x32,
    cnclUint64 = 0x33,
} cnclDataType_t;

typedef enum { cnclSum = 0, cnclProd = 1, cnclMax = 2, cnclMin = 3 } cnclReduceOp_t;

typedef struct cnclComm *cnclComm_t;
#define CNCL_CLIQUE_ID_BYTES_SIZE 128
struct cnclCliqueId {
    char data[CNCL_CLIQUE_ID_BYTES_SIZE];
    uint64_t hash;
};
typedef struct cnclCliqueId *cnclCliqueId_t;

cnclResult_t cnclGetCliqueId(cnclCliqueId_t clique_id);
cnclResult_t cnclInitComms(cnclComm_t *comms, int num_comm, const int *dev_list, const int *rank_list, int nrank,
                           const cnclCliqueId_t clique_id);
cnclResult_t cnclFreeComm(cnclComm_t comm);
const char *cnclGetErrorStr(cnclResult_t ret);
cnclResult_t cnclGetLibVersion(int *major, int *minor, int *patch);
cnclResult_t cnclAllReduce(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type,
                           cnclReduceOp_t reduce_op, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclAllGather(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type,
                           cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclReduceScatter(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type,
                               cnclReduceOp_t reduce_op, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclBroadcast(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, int root,
                           cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclSend(void *buffer, const size_t count, cnclDataType_t data_type, const int dest, const cnclComm_t comm,
                      cnrtQueue_t queue);
cnclResult_t cnclRecv(void *buffer, const size_t count, cnclDataType_t data_type, const int source,
                      const cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclGroupStart(void);
cnclResult_t cnclGroupEnd(void);

#endif /* IT_STANDIN_REAL_HEADERS */

/* Exported by every stand-in library and by no real one: the backend looks it up to say,
 * in it-info and its start-up line, that it runs on the test double. */
extern const char it_cambricon_test_double[];

#endif
