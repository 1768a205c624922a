/* The gemm slot over cuBLAS: C[i] = alpha op(A[i]) op(B[i]) + beta C[i] as one
 * cublasGemmStridedBatchedEx call (the layout mapping is gemm_plan.c's).
 *  fp32: CUDA_R_32F with CUBLAS_COMPUTE_32F (no TF32: the handle keeps the default math mode)
 *  fp64: CUDA_R_64F with CUBLAS_COMPUTE_64F
 *  bf16, fp16: CUDA_R_16BF / CUDA_R_16F operands, fp32 accumulation (CUBLAS_COMPUTE_32F)
 * Other dtypes, and layouts cuBLAS cannot take, decline: the core runs them on the CPU. */
#include <cublas_v2.h>

#include "cuda_backend.h"
#include "gemm_plan.h"

it_status cu_gemm(it_stream *s, const it_gemm_args *args) {
    it_dtype dt = args->c.dtype;
    if (args->a.dtype != dt || args->b.dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "cuda gemm: dtypes %s, %s, %s differ", it_dtype_name(args->a.dtype),
                        it_dtype_name(args->b.dtype), it_dtype_name(dt));
    cudaDataType_t type;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    switch (dt) {
    case IT_DTYPE_FP32: type = CUDA_R_32F; break;
    case IT_DTYPE_FP64:
        type = CUDA_R_64F;
        compute = CUBLAS_COMPUTE_64F;
        break;
    case IT_DTYPE_BF16: type = CUDA_R_16BF; break;
    case IT_DTYPE_FP16: type = CUDA_R_16F; break;
    default: return it_error(IT_ERR_UNSUPPORTED, "cuda gemm: %s is served by the CPU fallback", it_dtype_name(dt));
    }
    cu_gemm_plan p;
    it_status st = cu_gemm_plan_make(args, &p);
    if (st || p.empty) return st;
    void *h = NULL;
    st = cu_blas_handle(s, &h); /* also makes the stream's device current */
    if (st) return st;
    /* Scalars in the compute type, read from host memory (the default pointer mode). */
    double alpha64 = p.alpha, beta64 = p.beta;
    const void *alpha = compute == CUBLAS_COMPUTE_64F ? (const void *)&alpha64 : (const void *)&p.alpha;
    const void *beta = compute == CUBLAS_COMPUTE_64F ? (const void *)&beta64 : (const void *)&p.beta;
    cublasStatus_t r = cublasGemmStridedBatchedEx(
        (cublasHandle_t)h, p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)p.m,
        (int)p.n, (int)p.k, alpha, p.a.data, type, (int)p.a.ld, p.a.stride, p.b.data, type, (int)p.b.ld, p.b.stride,
        beta, p.c, type, (int)p.ldc, p.stride_c, (int)p.batch, compute, CUBLAS_GEMM_DEFAULT);
    if (r != CUBLAS_STATUS_SUCCESS)
        return it_error(IT_ERR_BACKEND,
                        "cuda gemm: cublasGemmStridedBatchedEx(%s, m=%lld n=%lld k=%lld, batch %lld, op %c%c, "
                        "ld %lld/%lld/%lld): %s (%s)",
                        it_dtype_name(dt), (long long)p.m, (long long)p.n, (long long)p.k, (long long)p.batch,
                        p.a.trans ? 'T' : 'N', p.b.trans ? 'T' : 'N', (long long)p.a.ld, (long long)p.b.ld,
                        (long long)p.ldc, cublasGetStatusName(r), cublasGetStatusString(r));
    return IT_OK;
}
