/* Batched strided GEMM on OpenBLAS.
 *
 *   a (Ba, ra, ca), b (Bb, rb, cb), c (B, M, N), Ba and Bb in {B, 1} (or batch stride 0):
 *   C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i],   op(A) (M, K), op(B) (K, N)
 *
 * Each matrix is handed to cblas_?gemm (CblasRowMajor) without a copy when it has a unit
 * stride in one of its two dims: row-major with ld = row stride, or column-major, which is
 * the row-major transpose with ld = column stride (its trans flag flips). A column-major C
 * is computed as C^T = op(B)^T @ op(A)^T. Anything else (both strides > 1, overlapping
 * rows) goes through a contiguous temporary, as do fp16 and bf16 (widened exactly to fp32 by
 * the cast slot's vectorized loops, computed with sgemm, C rounded back once), except bf16 on
 * CPUs with bf16 units: oneDNN's matmul (sbgemm_onednn.c) or the own vdpbf16ps kernel
 * (sbgemm_avx512bf16.c) takes the operands where they lie (sgemm_select.h says which). The
 * temporaries are kept between calls (cpu_scratch.h): on a CPU without bf16 units a bf16
 * GPT-2 124M step keeps its largest, the LM head's widened weight and logits (~200 MB).
 * beta == 0 never reads C (BLAS's contract; NaN in C ignored).
 *
 * Threads: with at least 2 matrices per thread (or one per thread when they are small)
 * the batch runs as an OpenMP loop with single-threaded BLAS inside (OpenBLAS's OpenMP build
 * does not fork inside a parallel region), each thread with its own temporaries; otherwise
 * the matrices run one after another, each on all of BLAS's threads. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_scratch.h"
#include "cpu/sgemm_select.h"
#include "infinitrain/scalar/it_scalar_cast.h"

enum { LAYOUT_ROW, LAYOUT_COL, LAYOUT_COPY };

/* One operand as BLAS sees it: op(X) = trans ? P^T : P with P row-major at p, leading
 * dimension ld. */
typedef struct operand {
    const it_tdesc *d;
    int64_t rows, cols; /* of the stored matrix */
    int64_t srow, scol; /* element strides of the stored matrix */
    int64_t sbatch;     /* 0 when broadcast over the batch */
    int layout;
    int64_t ld;
    bool trans; /* the caller's flag (op() of the stored matrix) */
} operand;

static it_status check_desc3(const char *name, const it_tdesc *t) {
    if (t->ndim != 3)
        return it_error(IT_ERR_INVALID_ARG, "gemm: %s must be 3-D (batch, rows, cols), got ndim %d", name, t->ndim);
    for (int d = 0; d < 3; d++) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "gemm: %s.shape[%d] = %lld is negative", name, d,
                            (long long)t->shape[d]);
        if (t->strides[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "gemm: %s.strides[%d] = %lld is negative", name, d,
                            (long long)t->strides[d]);
    }
    if (t->data == NULL && t->shape[0] * t->shape[1] * t->shape[2] > 0)
        return it_error(IT_ERR_INVALID_ARG, "gemm: %s.data is NULL", name);
    return IT_OK;
}

/* Row-major (unit column stride), column-major (unit row stride) or neither. Size-1 dims
 * take whatever stride makes the matrix usable: their stride is never followed. */
static void classify(operand *o) {
    int64_t r = o->rows, c = o->cols;
    int64_t sr = r == 1 ? (c > 1 ? c : 1) : o->srow, sc = c == 1 ? 1 : o->scol;
    if (sc == 1 && sr >= (c > 1 ? c : 1) && sr <= INT_MAX) {
        o->layout = LAYOUT_ROW;
        o->ld = sr;
        return;
    }
    sr = r == 1 ? 1 : o->srow;
    sc = c == 1 ? (r > 1 ? r : 1) : o->scol;
    if (sr == 1 && sc >= (r > 1 ? r : 1) && sc <= INT_MAX) {
        o->layout = LAYOUT_COL;
        o->ld = sc;
        return;
    }
    o->layout = LAYOUT_COPY;
    o->ld = c;
}

/* Element (i, j) of matrix `batch` of o as double / into double, for the copy paths. */
static double load(const operand *o, int64_t batch, int64_t i, int64_t j) {
    int64_t off = batch * o->sbatch + i * o->srow + j * o->scol;
    switch (o->d->dtype) {
    case IT_DTYPE_FP32: return ((const float *)o->d->data)[off];
    case IT_DTYPE_FP64: return ((const double *)o->d->data)[off];
    case IT_DTYPE_BF16: return it_sc_bf16_to_fp32(((const uint16_t *)o->d->data)[off]);
    default: return it_sc_fp16_to_fp32(((const uint16_t *)o->d->data)[off]);
    }
}

static void store(const operand *o, int64_t batch, int64_t i, int64_t j, double v) {
    int64_t off = batch * o->sbatch + i * o->srow + j * o->scol;
    switch (o->d->dtype) {
    case IT_DTYPE_FP32: ((float *)o->d->data)[off] = (float)v; break;
    case IT_DTYPE_FP64: ((double *)o->d->data)[off] = v; break;
    case IT_DTYPE_BF16: ((uint16_t *)o->d->data)[off] = it_sc_fp32_to_bf16((float)v); break;
    default: ((uint16_t *)o->d->data)[off] = it_sc_fp32_to_fp16((float)v); break;
    }
}

/* The stored matrix `batch` of o as a 2-D descriptor, and a row-major (rows, cols) buffer
 * of dtype dt at tmp. */
static it_tdesc matrix_desc(const operand *o, int64_t batch) {
    it_tdesc d = {.data = (char *)o->d->data + (size_t)(batch * o->sbatch) * it_dtype_size(o->d->dtype),
                  .dtype = o->d->dtype,
                  .ndim = 2,
                  .shape = {o->rows, o->cols},
                  .strides = {o->srow, o->scol}};
    return d;
}
static it_tdesc tmp_desc(const operand *o, void *tmp, it_dtype dt) {
    it_tdesc d = {.data = tmp, .dtype = dt, .ndim = 2, .shape = {o->rows, o->cols}, .strides = {o->cols, 1}};
    return d;
}

/* tmp (rows, cols) row-major <- stored matrix `batch` of o, widened to fp32 / fp64 (exact),
 * and back, C rounded once (round to nearest even): the cast slot's loops, vectorized and
 * threaded when the matrix is large (a single-thread OpenMP team inside a parallel batch).
 * The descriptors were checked by it_cpu_gemm, so the casts cannot fail. */
static void gather(const operand *o, int64_t batch, void *tmp, it_dtype tdt) {
    it_tdesc src = matrix_desc(o, batch), dst = tmp_desc(o, tmp, tdt);
    (void)it_cpu_cast(NULL, &src, &dst);
}

static void scatter(const operand *o, int64_t batch, const void *tmp, it_dtype tdt) {
    it_tdesc src = tmp_desc(o, (void *)tmp, tdt), dst = matrix_desc(o, batch);
    (void)it_cpu_cast(NULL, &src, &dst);
}

/* The BLAS view of an operand whose matrix lives at p (row-major with o->ld, or the
 * column-major form): returns the trans flag to pass. */
static bool blas_trans(const operand *o) { return o->layout == LAYOUT_COL ? !o->trans : o->trans; }

/* One fp32 product, row-major operands: the own kernel (AVX-512 or AVX2, sgemm_select.h)
 * when it takes it, else the BLAS. The fused attention calls it per head, so that its
 * products are the gemm slot's. */
void it_cpu_sgemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (it_cpu_sgemm_avx512_usable() && it_cpu_sgemm_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        return;
    if (it_cpu_sgemm_avx2_usable() && it_cpu_sgemm_avx2(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* A product as a row-major kernel takes it: C (m, n) = op1(P1) op2(P2). */
typedef struct rowmajor {
    bool ta, tb;
    const void *p1, *p2;
    int64_t ld1, ld2, m, n;
} rowmajor;

/* C (M, N) = op(A) op(B) in row-major form; a column-major C is computed as
 * C^T (N, M) = op(B)^T op(A)^T. */
static rowmajor rowmajor_form(const operand *A, const void *pa, const operand *B, const void *pb, const operand *C,
                              int64_t M, int64_t N) {
    bool ta = blas_trans(A), tb = blas_trans(B);
    if (C->layout == LAYOUT_COL) return (rowmajor){!tb, !ta, pb, pa, B->ld, A->ld, N, M};
    return (rowmajor){ta, tb, pa, pb, A->ld, B->ld, M, N};
}

/* C (M, N) = alpha op(A) op(B) + beta C with every operand already BLAS-usable. */
static void gemm_one(bool f64, const operand *A, const void *pa, const operand *B, const void *pb, const operand *C,
                     void *pc, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    rowmajor r = rowmajor_form(A, pa, B, pb, C, M, N);
    if (!f64) {
        it_cpu_sgemm_rm(r.ta, r.tb, r.m, r.n, K, alpha, r.p1, r.ld1, r.p2, r.ld2, beta, pc, C->ld);
        return;
    }
    cblas_dgemm(CblasRowMajor, r.ta ? CblasTrans : CblasNoTrans, r.tb ? CblasTrans : CblasNoTrans, (int)r.m, (int)r.n,
                (int)K, alpha, r.p1, (int)r.ld1, r.p2, (int)r.ld2, beta, pc, (int)C->ld);
}

/* The same for bf16 operands and C on the bf16 kernel (sbgemm_avx512bf16.c): false when it
 * had no scratch memory. */
static bool gemm_one_bf16(const operand *A, const void *pa, const operand *B, const void *pb, const operand *C,
                          void *pc, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    rowmajor r = rowmajor_form(A, pa, B, pb, C, M, N);
    return it_cpu_sbgemm(r.ta, r.tb, r.m, r.n, K, alpha, r.p1, r.ld1, r.p2, r.ld2, beta, pc, true, C->ld);
}

/* The bf16 products' path (sgemm_select.h), chosen once. */
static int g_bf16_path;
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;
static void bf16_path_init(void) { g_bf16_path = it_cpu_sbgemm_isa(); }
static int bf16_path(void) {
    pthread_once(&g_bf16_once, bf16_path_init);
    return g_bf16_path;
}

static const char *elem(const operand *o, int64_t batch) {
    return (const char *)o->d->data + (size_t)(batch * o->sbatch) * it_dtype_size(o->d->dtype);
}

/* K == 0: C = beta * C (beta == 0 writes zeros without reading C). */
static void scale_c(const operand *C, int64_t batches, float beta) {
    for (int64_t b = 0; b < batches; b++)
        for (int64_t i = 0; i < C->rows; i++)
            for (int64_t j = 0; j < C->cols; j++)
                store(C, b, i, j, beta == 0.0f ? 0.0 : (double)beta * load(C, b, i, j));
}

static void init_operand(operand *o, const it_tdesc *d, bool trans, int64_t batches) {
    o->d = d;
    o->rows = d->shape[1];
    o->cols = d->shape[2];
    o->srow = d->strides[1];
    o->scol = d->strides[2];
    o->sbatch = (d->shape[0] == 1 && batches != 1) ? 0 : d->strides[0];
    o->trans = trans;
    classify(o);
}

/* Whole matrices per thread, single-threaded GEMMs inside, when there are enough of them
 * to share out evenly, or when they are too small for the GEMM's own threading to pay.
 * Forking a team costs microseconds: below ~64K multiply-adds in all it costs more than the
 * work (tiny attention matmuls in tests), so those run on the calling thread. */
static bool batch_per_thread(int64_t batches, int64_t M, int64_t N, int64_t K) {
    int64_t threads = omp_get_max_threads();
    bool small = (double)M * (double)N * (double)K <= 128.0 * 128.0 * 128.0;
    bool worth = (double)batches * (double)M * (double)N * (double)K >= 65536.0;
    return threads > 1 && worth && (batches >= 2 * threads || (small && batches >= threads));
}

/* The copy path's product (it_cpu_gemm): operands as given (A, B, C), as the GEMM sees them
 * (Ac, Bc, Cc: a copied one row-major, ld = its columns), and the temporaries in tmp: the
 * broadcast operands' copies (`shared` elements, A's first), then `own` elements per team
 * member (A's, B's, C's copies, each where it is copied per matrix). */
typedef struct copy_job {
    operand A, B, C, Ac, Bc, Cc;
    int64_t M, N, K;
    float alpha, beta;
    bool f64, shared_a, shared_b;
    it_dtype tdt;
    size_t ts, na, nb, nc, shared, own;
    char *tmp;
} copy_job;

/* Matrix i of the batch on team member `member`'s temporaries. */
static void copy_one(const copy_job *j, int64_t i, int member) {
    char *mine = j->tmp + (j->shared + j->own * (size_t)member) * j->ts;
    char *ta = j->shared_a ? j->tmp : mine;
    char *tb = j->shared_b ? j->tmp + (j->shared_a ? j->na : 0) * j->ts : mine + (j->shared_a ? 0 : j->na) * j->ts;
    char *tc = mine + (j->own - j->nc) * j->ts;
    if (j->na && !j->shared_a) gather(&j->A, i, ta, j->tdt);
    if (j->nb && !j->shared_b) gather(&j->B, i, tb, j->tdt);
    if (j->nc && j->beta != 0.0f) gather(&j->C, i, tc, j->tdt);
    char *pc = j->nc ? tc : (char *)j->C.d->data + (size_t)(i * j->C.sbatch) * it_dtype_size(j->C.d->dtype);
    gemm_one(j->f64, &j->Ac, j->na ? ta : elem(&j->A, i), &j->Bc, j->nb ? tb : elem(&j->B, i), &j->Cc, pc, j->M, j->N,
             j->K, j->alpha, j->beta);
    if (j->nc) scatter(&j->C, i, tc, j->tdt);
}

it_status it_cpu_gemm(it_stream *s, const it_gemm_args *args) {
    (void)s;
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "gemm: args is NULL");
    const it_tdesc *a = &args->a, *b = &args->b, *c = &args->c;
    it_status st;
    if ((st = check_desc3("a", a)) || (st = check_desc3("b", b)) || (st = check_desc3("c", c))) return st;
    it_dtype dt = c->dtype;
    if (a->dtype != dt || b->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "gemm: dtypes differ (a %s, b %s, c %s)", it_dtype_name(a->dtype),
                        it_dtype_name(b->dtype), it_dtype_name(dt));
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_FP64 && dt != IT_DTYPE_BF16 && dt != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "gemm: dtype %s not supported", it_dtype_name(dt));

    int64_t batches = c->shape[0], M = c->shape[1], N = c->shape[2];
    int64_t am = args->trans_a ? a->shape[2] : a->shape[1], ak = args->trans_a ? a->shape[1] : a->shape[2];
    int64_t bk = args->trans_b ? b->shape[2] : b->shape[1], bn = args->trans_b ? b->shape[1] : b->shape[2];
    if (am != M || bn != N || ak != bk)
        return it_error(IT_ERR_INVALID_ARG,
                        "gemm: shapes do not chain: op(a) is (%lld, %lld), op(b) is (%lld, %lld), c is (%lld, %lld)",
                        (long long)am, (long long)ak, (long long)bk, (long long)bn, (long long)M, (long long)N);
    if ((a->shape[0] != batches && a->shape[0] != 1) || (b->shape[0] != batches && b->shape[0] != 1))
        return it_error(IT_ERR_INVALID_ARG, "gemm: batch sizes a %lld, b %lld do not match c's %lld (or 1)",
                        (long long)a->shape[0], (long long)b->shape[0], (long long)batches);
    int64_t K = ak;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return it_error(IT_ERR_UNSUPPORTED, "gemm: dims M %lld, N %lld, K %lld exceed BLAS's int", (long long)M,
                        (long long)N, (long long)K);
    if (batches == 0 || M == 0 || N == 0) return IT_OK;
    if (batches > 1 && c->strides[0] == 0)
        return it_error(IT_ERR_INVALID_ARG, "gemm: c.strides[0] is 0 with %lld batches (outputs would overlap)",
                        (long long)batches);

    operand A, B, C;
    init_operand(&A, a, args->trans_a, batches);
    init_operand(&B, b, args->trans_b, batches);
    init_operand(&C, c, false, batches);
    if (K == 0) { /* BLAS would do the same, but its ld checks reject some valid K == 0 views */
        scale_c(&C, batches, args->beta);
        return IT_OK;
    }

    bool f64 = dt == IT_DTYPE_FP64, half = dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16;
    if (dt == IT_DTYPE_BF16 && bf16_path() == IT_CPU_SBGEMM_ONEDNN && A.layout != LAYOUT_COPY &&
        B.layout != LAYOUT_COPY && C.layout != LAYOUT_COPY) {
        /* the whole batch as one oneDNN matmul (it shares the matrices out itself) */
        rowmajor r = rowmajor_form(&A, a->data, &B, b->data, &C, M, N);
        bool swapped = C.layout == LAYOUT_COL;
        int64_t s1 = swapped ? B.sbatch : A.sbatch, s2 = swapped ? A.sbatch : B.sbatch;
        if (it_cpu_sbgemm_onednn(batches, r.ta, r.tb, r.m, r.n, K, args->alpha, r.p1, r.ld1, s1, r.p2, r.ld2, s2,
                                 args->beta, c->data, C.ld, C.sbatch))
            return IT_OK;
        /* (a layout oneDNN refused: the own kernel below) */
    }
    if (dt == IT_DTYPE_BF16 && it_cpu_sbgemm_usable() && A.layout != LAYOUT_COPY && B.layout != LAYOUT_COPY &&
        C.layout != LAYOUT_COPY) {
        /* bf16 on the bf16 units, operands where they lie; matrices per thread as for fp32 */
        int failed = 0;
        if (batch_per_thread(batches, M, N, K)) {
#pragma omp parallel for schedule(static) reduction(| : failed)
            for (int64_t i = 0; i < batches; i++)
                failed |=
                    !gemm_one_bf16(&A, elem(&A, i), &B, elem(&B, i), &C, (char *)c->data + (size_t)(i * C.sbatch) * 2,
                                   M, N, K, args->alpha, args->beta);
        } else {
            for (int64_t i = 0; i < batches && !failed; i++)
                failed |=
                    !gemm_one_bf16(&A, elem(&A, i), &B, elem(&B, i), &C, (char *)c->data + (size_t)(i * C.sbatch) * 2,
                                   M, N, K, args->alpha, args->beta);
        }
        return failed ? it_error(IT_ERR_OOM, "gemm: no memory for the bf16 kernel's packing buffers") : IT_OK;
    }
    if (half) A.layout = B.layout = C.layout = LAYOUT_COPY;

    if (A.layout != LAYOUT_COPY && B.layout != LAYOUT_COPY && C.layout != LAYOUT_COPY) {
        size_t es = it_dtype_size(dt);
        if (batch_per_thread(batches, M, N, K)) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < batches; i++)
                gemm_one(f64, &A, elem(&A, i), &B, elem(&B, i), &C, (char *)c->data + (size_t)(i * C.sbatch) * es, M, N,
                         K, args->alpha, args->beta);
        } else {
            for (int64_t i = 0; i < batches; i++)
                gemm_one(f64, &A, elem(&A, i), &B, elem(&B, i), &C, (char *)c->data + (size_t)(i * C.sbatch) * es, M, N,
                         K, args->alpha, args->beta);
        }
        return IT_OK;
    }

    /* Copy path: every operand that is not BLAS-usable (or every one, for half types) goes
     * through a contiguous fp32/fp64 temporary, row-major as stored, so the GEMM sees the
     * same operands and flags whichever way the batch is shared out. A broadcast operand is
     * gathered once; the others per matrix, into each thread's own temporaries when the
     * matrices run in parallel (batch_per_thread). Otherwise no parallel region encloses the
     * GEMM: inside even a one-thread region its team would be a nested one, whose new threads
     * compete for the cores with the idle pool's spinning ones. */
    copy_job j = {.A = A,
                  .B = B,
                  .C = C,
                  .Ac = A,
                  .Bc = B,
                  .Cc = C,
                  .M = M,
                  .N = N,
                  .K = K,
                  .alpha = args->alpha,
                  .beta = args->beta,
                  .f64 = f64};
    j.tdt = f64 ? IT_DTYPE_FP64 : IT_DTYPE_FP32;
    j.ts = it_dtype_size(j.tdt);
    j.na = A.layout == LAYOUT_COPY ? (size_t)(A.rows * A.cols) : 0;
    j.nb = B.layout == LAYOUT_COPY ? (size_t)(B.rows * B.cols) : 0;
    j.nc = C.layout == LAYOUT_COPY ? (size_t)(C.rows * C.cols) : 0;
    j.shared_a = j.na && A.sbatch == 0;
    j.shared_b = j.nb && B.sbatch == 0;
    int teams = batch_per_thread(batches, M, N, K) ? omp_get_max_threads() : 1;
    j.shared = (j.shared_a ? j.na : 0) + (j.shared_b ? j.nb : 0);
    j.own = (j.shared_a ? 0 : j.na) + (j.shared_b ? 0 : j.nb) + j.nc;
    size_t total = (j.shared + j.own * (size_t)teams) * j.ts;
    int slot;
    j.tmp = scratch_take(total, &slot);
    if (j.tmp == NULL) return it_error(IT_ERR_OOM, "gemm: no memory for a %zu-byte contiguous copy", total);
    if (j.shared_a) gather(&A, 0, j.tmp, j.tdt);
    if (j.shared_b) gather(&B, 0, j.tmp + (j.shared_a ? j.na : 0) * j.ts, j.tdt);
    if (j.na) j.Ac.layout = LAYOUT_ROW, j.Ac.ld = A.cols;
    if (j.nb) j.Bc.layout = LAYOUT_ROW, j.Bc.ld = B.cols;
    if (j.nc) j.Cc.layout = LAYOUT_ROW, j.Cc.ld = C.cols;
    if (teams > 1) {
#pragma omp parallel for schedule(static) num_threads(teams)
        for (int64_t i = 0; i < batches; i++) copy_one(&j, i, omp_get_thread_num());
    } else {
        for (int64_t i = 0; i < batches; i++) copy_one(&j, i, 0);
    }
    scratch_give(j.tmp, slot);
    return IT_OK;
}
