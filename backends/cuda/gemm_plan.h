/* How a row-major it_gemm_args becomes one column-major cuBLAS strided-batched call.
 * Pure host logic with no CUDA header, so that tests/unit/test_cuda_host.c checks it on any
 * machine by running the plan through a reference column-major GEMM.
 *
 * cuBLAS computes, for each batch index i (column-major, element (r, c) at r + c * ld):
 *     C'[i] = alpha * op_a(A'[i]) @ op_b(B'[i]) + beta * C'[i],  op(A') m x k, op(B') k x n
 * Our C (M x N) is stored row-major (C' = C^T, N x M: the call computes C^T = op(B)^T op(A)^T,
 * so our B is its A' and our A its B') or column-major (C' = C). An operand stored with a unit
 * column stride is the column-major transpose of itself with ld = its row stride; one with a
 * unit row stride is column-major as it is, ld = its column stride. */
#ifndef IT_CUDA_GEMM_PLAN_H
#define IT_CUDA_GEMM_PLAN_H

#include "infinitrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cu_gemm_operand {
    const void *data;
    bool trans;     /* cuBLAS's op: true = CUBLAS_OP_T */
    int64_t ld;     /* leading dimension of the column-major matrix as stored */
    int64_t stride; /* elements between batch entries (0 broadcasts) */
} cu_gemm_operand;

typedef struct cu_gemm_plan {
    bool empty;      /* M or N is 0: nothing to compute */
    int64_t m, n, k; /* cuBLAS's m, n, k */
    int64_t batch;
    cu_gemm_operand a, b; /* cuBLAS's A' and B' */
    void *c;
    int64_t ldc, stride_c;
    float alpha, beta;
} cu_gemm_plan;

/* Fills *p for args (all three descriptors 3-D: batch, rows, cols, the same dtype).
 * IT_ERR_INVALID_ARG: shapes that do not multiply or batches that disagree.
 * IT_ERR_UNSUPPORTED (the core then runs the product on the CPU fallback): a layout cuBLAS
 * cannot take (neither stride of a matrix is 1, a leading dimension smaller than its
 * column, a written C shared by batches, a size beyond cuBLAS's int) or K == 0. */
it_status cu_gemm_plan_make(const it_gemm_args *args, cu_gemm_plan *p);

#ifdef __cplusplus
}
#endif
#endif
