/* Row-major it_gemm_args -> one cuBLAS strided-batched call (see gemm_plan.h). */
#include "gemm_plan.h"

#include <limits.h>

/* A stored matrix (rows x cols, strides rs and cs) as cuBLAS sees it: `tr` true when the
 * column-major matrix with leading dimension *ld is the stored matrix's transpose (unit column
 * stride: row-major), false when it is the matrix itself (unit row stride). A size-1 dimension
 * takes any stride. False when neither works. */
static bool as_column_major(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *tr, int64_t *ld) {
    int64_t rmin = cols > 1 ? cols : 1, cmin = rows > 1 ? rows : 1;
    if ((cols == 1 || cs == 1) && (rows == 1 || rs >= rmin)) {
        *tr = true;
        *ld = rows == 1 ? rmin : rs;
        return true;
    }
    if ((rows == 1 || rs == 1) && (cols == 1 || cs >= cmin)) {
        *tr = false;
        *ld = cols == 1 ? cmin : cs;
        return true;
    }
    return false;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

it_status cu_gemm_plan_make(const it_gemm_args *g, cu_gemm_plan *p) {
    const it_tdesc *a = &g->a, *b = &g->b, *c = &g->c;
    if (a->ndim != 3 || b->ndim != 3 || c->ndim != 3)
        return it_error(IT_ERR_INVALID_ARG, "cuda gemm: descriptors must be 3-D (batch, rows, cols), got %d, %d, %d",
                        a->ndim, b->ndim, c->ndim);
    int64_t M = g->trans_a ? a->shape[2] : a->shape[1], K = g->trans_a ? a->shape[1] : a->shape[2];
    int64_t Kb = g->trans_b ? b->shape[2] : b->shape[1], N = g->trans_b ? b->shape[1] : b->shape[2];
    int64_t batch = c->shape[0];
    if (Kb != K || c->shape[1] != M || c->shape[2] != N)
        return it_error(IT_ERR_INVALID_ARG, "cuda gemm: op(A) %lld x %lld, op(B) %lld x %lld, C %lld x %lld",
                        (long long)M, (long long)K, (long long)Kb, (long long)N, (long long)c->shape[1],
                        (long long)c->shape[2]);
    if ((a->shape[0] != batch && a->shape[0] != 1) || (b->shape[0] != batch && b->shape[0] != 1))
        return it_error(IT_ERR_INVALID_ARG, "cuda gemm: batches of A (%lld) and B (%lld) do not match C's (%lld)",
                        (long long)a->shape[0], (long long)b->shape[0], (long long)batch);
    *p = (cu_gemm_plan){.alpha = g->alpha, .beta = g->beta, .batch = batch};
    if (M == 0 || N == 0 || batch == 0) {
        p->empty = true;
        return IT_OK;
    }
    if (K == 0) return it_error(IT_ERR_UNSUPPORTED, "cuda gemm: K = 0 (C = beta C) is left to the CPU fallback");
    bool ta, tb, tc;
    int64_t lda, ldb, ldc;
    if (!as_column_major(a->shape[1], a->shape[2], a->strides[1], a->strides[2], &ta, &lda) ||
        !as_column_major(b->shape[1], b->shape[2], b->strides[1], b->strides[2], &tb, &ldb) ||
        !as_column_major(c->shape[1], c->shape[2], c->strides[1], c->strides[2], &tc, &ldc))
        return it_error(IT_ERR_UNSUPPORTED, "cuda gemm: an operand cuBLAS cannot take (no unit stride, or rows that "
                                            "overlap) is left to the CPU fallback");
    /* A batch stride of a single-entry batch is never used; a written C must not be shared. */
    int64_t sa = a->shape[0] == 1 ? 0 : a->strides[0], sb = b->shape[0] == 1 ? 0 : b->strides[0];
    int64_t sc = batch == 1 ? 0 : c->strides[0];
    if (batch > 1 && sc == 0)
        return it_error(IT_ERR_UNSUPPORTED, "cuda gemm: C shared by %lld batch entries", (long long)batch);
    if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(batch) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc))
        return it_error(IT_ERR_UNSUPPORTED, "cuda gemm: a size beyond cuBLAS's int is left to the CPU fallback");
    /* Stored X is "transposed" in cuBLAS's matrix when tX; op(X) transposes X when trans_x.
     * cuBLAS must apply op = T exactly when the matrix it holds differs from the one it needs. */
    cu_gemm_operand A = {.data = a->data, .ld = lda, .stride = sa};
    cu_gemm_operand B = {.data = b->data, .ld = ldb, .stride = sb};
    if (tc) {
        /* C row-major: C^T (N x M) = op(B)^T (N x K) @ op(A)^T (K x M). op(B)^T is B^T when
         * !trans_b; the matrix held is B^T when tb. */
        p->m = N, p->n = M;
        B.trans = (!g->trans_b) != tb;
        A.trans = (!g->trans_a) != ta;
        p->a = B, p->b = A;
    } else {
        /* C column-major: C (M x N) = op(A) @ op(B). */
        p->m = M, p->n = N;
        A.trans = g->trans_a != ta;
        B.trans = g->trans_b != tb;
        p->a = A, p->b = B;
    }
    p->k = K;
    p->c = c->data;
    p->ldc = ldc;
    p->stride_c = sc;
    return IT_OK;
}
