/* CPU kernels, part 1: gemm, unary/binary/reduce, embedding and the optimizers, each
 * against a naive double-precision reference written here. Layernorm, softmax and cross
 * entropy are in test_cpu_nn.c. */
#include <float.h>
#include <stdio.h>

#include "cpu/sgemm_select.h"
#include "test_cpu_util.h"

/* ====================================================================== gemm */

/* Stored-matrix layouts a gemm operand can have. */
enum { L_ROW, L_COL, L_STRIDED, L_PADDED, L_COUNT };

/* (batches, rows, cols) descriptor in a layout; bcast 1 = batch stride 0, 2 = batch dim 1. */
static it_tdesc gemm_desc(it_dtype dt, int64_t B, int64_t r, int64_t c, int layout, int bcast) {
    int64_t st[3];
    switch (layout) {
    case L_ROW: st[0] = r * c, st[1] = c, st[2] = 1; break;
    case L_COL: st[0] = r * c, st[1] = 1, st[2] = r; break;
    case L_STRIDED: st[0] = 2 * r * c, st[1] = 2 * c, st[2] = 2; break;
    default: st[0] = r * (c + 3), st[1] = c + 3, st[2] = 1; break;
    }
    if (bcast == 1) st[0] = 0;
    return mk(NULL, dt, 3, (int64_t[]){bcast == 2 ? 1 : B, r, c}, st);
}

static double op_at(const it_tdesc *t, bool trans, int64_t b, int64_t i, int64_t j) {
    int64_t bb = t->shape[0] == 1 ? 0 : b;
    int64_t r = trans ? j : i, c = trans ? i : j;
    return raw_get(t->data, t->dtype, bb * t->strides[0] + r * t->strides[1] + c * t->strides[2]);
}

/* Runs g and checks C against alpha op(A) op(B) + beta C0 in double. Tolerance: the
 * accumulation error bound (K+2) * u * sum|terms|, u = 2^-24 for fp32 (x4 margin), 2^-53
 * for fp64; bf16/fp16 add the output rounding (2^-8 / 2^-11 relative). */
static void gemm_check(const it_gemm_args *g, const char *what) {
    const it_tdesc *c = &g->c;
    int64_t B = c->shape[0], M = c->shape[1], N = c->shape[2];
    int64_t Kd = g->trans_a ? g->a.shape[1] : g->a.shape[2];
    double *c0 = malloc((size_t)(B * M * N + 1) * sizeof(double));
    for (int64_t i = 0; i < B * M * N; i++) c0[i] = get(c, i);
    CHECK_OK(K->gemm(NULL, g));
    double u = c->dtype == IT_DTYPE_FP64 ? 0x1p-53 : 0x1p-22;
    double out_rel = c->dtype == IT_DTYPE_BF16 ? 0x1p-8 : c->dtype == IT_DTYPE_FP16 ? 0x1p-11 : 0.0;
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < Kd; k++) {
                    double t = op_at(&g->a, g->trans_a, b, i, k) * op_at(&g->b, g->trans_b, b, k, j);
                    acc += t;
                    mag += fabs(t);
                }
                double ref = (double)g->alpha * acc, cv = c0[(b * M + i) * N + j];
                mag *= fabs((double)g->alpha);
                if (g->beta != 0.0f) {
                    ref += (double)g->beta * cv;
                    mag += fabs((double)g->beta * cv);
                }
                double got = get(c, (b * M + i) * N + j);
                double tol = (double)(Kd + 2) * u * mag + out_rel * fabs(ref) + 1e-300;
                if (!(fabs(got - ref) <= tol)) {
                    if (bad++ == 0)
                        fprintf(stderr, "%s: C[%lld,%lld,%lld] = %.10g, expected %.10g (tol %.3g)\n", what,
                                (long long)b, (long long)i, (long long)j, got, ref, tol);
                }
            }
    CHECK_MSG(bad == 0, "%s: %d of %lld elements wrong", what, bad, (long long)(B * M * N));
    free(c0);
}

/* The descriptors (no data yet) of C (B, M, N) = alpha op(A) op(B) + beta C in the given
 * layouts and broadcasts. */
static it_gemm_args gemm_args(it_dtype dt, int64_t B, int64_t M, int64_t N, int64_t Kd, bool ta, bool tb, int la,
                              int lb, int lc, int bca, int bcb, float alpha, float beta) {
    it_gemm_args g;
    memset(&g, 0, sizeof g);
    g.a = gemm_desc(dt, B, ta ? Kd : M, ta ? M : Kd, la, bca);
    g.b = gemm_desc(dt, B, tb ? N : Kd, tb ? Kd : N, lb, bcb);
    g.c = gemm_desc(dt, B, M, N, lc, 0);
    g.trans_a = ta;
    g.trans_b = tb;
    g.alpha = alpha;
    g.beta = beta;
    return g;
}

static void gemm_case(it_dtype dt, int64_t B, int64_t M, int64_t N, int64_t Kd, bool ta, bool tb, int la, int lb,
                      int lc, int bca, int bcb, float alpha, float beta, bool nan_c) {
    it_gemm_args g = gemm_args(dt, B, M, N, Kd, ta, tb, la, lb, lc, bca, bcb, alpha, beta);
    void *pa = alloc_rand(&g.a, -1, 1), *pb = alloc_rand(&g.b, -1, 1);
    void *pc = nan_c ? alloc_fill(&g.c, NAN) : alloc_rand(&g.c, -1, 1);
    char what[160];
    snprintf(what, sizeof what, "gemm %s B%lld M%lld N%lld K%lld ta%d tb%d layouts %d%d%d bcast %d%d a%g b%g",
             it_dtype_name(dt), (long long)B, (long long)M, (long long)N, (long long)Kd, ta, tb, la, lb, lc, bca, bcb,
             (double)alpha, (double)beta);
    gemm_check(&g, what);
    free(pa);
    free(pb);
    free(pc);
}

/* A bf16/fp16 product on the widening path (fp16 always; bf16 where the CPU has no bf16
 * units, or IT_CPU_SBGEMM=fp32) is by definition: the operands widened exactly to fp32, the
 * fp32 gemm slot on row-major copies of the stored matrices with the same transposes, C
 * (widened when beta != 0) rounded once. Checked bitwise against that composition here,
 * for every layout of each operand, broadcast operands, beta 0 over NaN and beta != 0, and
 * batches large enough to be shared out over the threads (each with its own copies) as well
 * as single products whose copies are made by all threads. */
static void half_widening_case(it_dtype dt, int64_t B, int64_t M, int64_t N, int64_t Kd, bool ta, bool tb, int la,
                               int lb, int lc, int bca, int bcb, float beta) {
    it_gemm_args g = gemm_args(dt, B, M, N, Kd, ta, tb, la, lb, lc, bca, bcb, 1.25f, beta);
    void *pa = alloc_rand(&g.a, -1, 1), *pb = alloc_rand(&g.b, -1, 1);
    void *pc = beta == 0.0f ? alloc_fill(&g.c, NAN) : alloc_rand(&g.c, -1, 1);
    /* the composition: contiguous fp32 copies (a broadcast keeps its stride 0 / batch 1) */
    it_gemm_args w = g;
    const it_tdesc *src[3] = {&g.a, &g.b, &g.c};
    it_tdesc *dst[3] = {&w.a, &w.b, &w.c};
    void *wp[3];
    for (int o = 0; o < 3; o++) {
        *dst[o] = mk(NULL, IT_DTYPE_FP32, 3, src[o]->shape, NULL);
        if (src[o]->strides[0] == 0) dst[o]->strides[0] = 0;
        wp[o] = alloc_fill(dst[o], 0.0);
        for (int64_t i = 0; i < t_numel(src[o]); i++) set(dst[o], i, get(src[o], i));
    }
    CHECK_OK(K->gemm(NULL, &w));
    CHECK_OK(K->gemm(NULL, &g));
    int64_t bad = -1;
    for (int64_t i = 0; i < B * M * N && bad < 0; i++) {
        uint16_t want =
            dt == IT_DTYPE_BF16 ? it_fp32_to_bf16((float)get(&w.c, i)) : it_fp32_to_fp16((float)get(&w.c, i));
        if (((const uint16_t *)g.c.data)[t_off(&g.c, i)] != want) bad = i;
    }
    CHECK_MSG(bad < 0,
              "%s gemm B%lld M%lld N%lld K%lld ta%d tb%d layouts %d%d%d bcast %d%d beta %g: element %lld is not "
              "the widened fp32 product rounded once",
              it_dtype_name(dt), (long long)B, (long long)M, (long long)N, (long long)Kd, ta, tb, la, lb, lc, bca, bcb,
              (double)beta, (long long)bad);
    free(pa);
    free(pb);
    free(pc);
    for (int o = 0; o < 3; o++) free(wp[o]);
}

static void test_gemm_half_widening(void) {
    bool bf16_widens = it_cpu_sbgemm_isa() == IT_CPU_SBGEMM_FP32;
    printf("test_cpu_kernels: bf16 gemm through %s\n", it_cpu_sbgemm_name(it_cpu_sbgemm_isa()));
    for (int d = 0; d < 2; d++) {
        it_dtype dt = d ? IT_DTYPE_FP16 : IT_DTYPE_BF16;
        if (dt == IT_DTYPE_BF16 && !bf16_widens) continue; /* test_sbgemm checks the bf16 units' paths */
        for (int t = 0; t < 4; t++)
            for (int l = 0; l < L_COUNT; l++) {
                /* a few small matrices (one thread), many (shared out), one large (threaded copies) */
                half_widening_case(dt, 3, 7, 13, 5, t & 1, t >> 1, l, (l + 1) % L_COUNT, (l + 2) % L_COUNT, 0, 0,
                                   t == 1 ? 0.0f : 0.5f);
                half_widening_case(dt, 48, 16, 24, 20, t & 1, t >> 1, l, (l + 3) % L_COUNT, l, t == 2, t == 3,
                                   t == 0 ? 0.0f : 1.0f);
                half_widening_case(dt, 1, 130, 270, 300, t & 1, t >> 1, (l + 1) % L_COUNT, l, (l + 1) % L_COUNT, 0, 0,
                                   t == 3 ? 0.0f : 1.0f);
            }
    }
}

static void test_gemm(void) {
    /* Every transpose combination x every layout of A, B and C, fp32 and fp64. */
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++)
            for (int la = 0; la < L_COUNT; la++)
                for (int lb = 0; lb < L_COUNT; lb++)
                    for (int lc = 0; lc < L_COUNT; lc++)
                        gemm_case(dts[d], 3, 7, 13, 5, t & 1, t >> 1, la, lb, lc, 0, 0, 1.5f, 0.5f, false);
    for (int d = 0; d < 2; d++) {
        /* batch broadcast: stride 0 and batch dim 1, on either side */
        gemm_case(dts[d], 4, 7, 13, 5, false, false, L_ROW, L_ROW, L_ROW, 1, 0, 1.0f, 0.0f, false);
        gemm_case(dts[d], 4, 7, 13, 5, true, false, L_ROW, L_ROW, L_ROW, 2, 0, 1.0f, 1.0f, false);
        gemm_case(dts[d], 4, 7, 13, 5, false, true, L_COL, L_ROW, L_ROW, 0, 1, 2.0f, 0.0f, false);
        gemm_case(dts[d], 4, 7, 13, 5, false, false, L_ROW, L_STRIDED, L_ROW, 0, 2, 1.0f, 0.0f, false);
        /* beta == 0 ignores NaN in C (also through the copy path for C) */
        gemm_case(dts[d], 2, 7, 13, 5, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.0f, true);
        gemm_case(dts[d], 2, 7, 13, 5, true, true, L_ROW, L_ROW, L_STRIDED, 0, 0, 1.0f, 0.0f, true);
        gemm_case(dts[d], 2, 7, 13, 5, true, false, L_ROW, L_ROW, L_COL, 0, 0, 1.0f, 0.0f, true);
        /* size 1 everywhere, K == 1, and a vector-matrix product */
        gemm_case(dts[d], 1, 1, 1, 1, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.0f, false);
        gemm_case(dts[d], 1, 1, 1, 1, true, true, L_STRIDED, L_COL, L_PADDED, 0, 0, -1.0f, 2.0f, false);
        gemm_case(dts[d], 2, 1, 9, 4, false, true, L_STRIDED, L_COL, L_ROW, 0, 0, 1.0f, 0.0f, false);
        gemm_case(dts[d], 2, 9, 1, 4, true, false, L_COL, L_STRIDED, L_COL, 0, 0, 1.0f, 0.0f, false);
        /* K == 0: C = beta * C, and zeros (never NaN) for beta == 0 */
        gemm_case(dts[d], 2, 3, 4, 0, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.5f, false);
        gemm_case(dts[d], 2, 3, 4, 0, true, true, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.0f, true);
        /* many small matrices: the parallel-over-batches path; one large: threaded BLAS */
        gemm_case(dts[d], 67, 4, 5, 3, false, true, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.5f, false);
        gemm_case(dts[d], 33, 6, 5, 7, true, false, L_ROW, L_COL, L_COL, 0, 1, 1.0f, 0.0f, false);
        gemm_case(dts[d], 1, 150, 170, 190, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.0f, false);
    }
    /* fp32 goes to the CPU backend's own AVX-512 sgemm where the CPU has it (8x48 tiles,
     * 512-deep and 384-wide packed blocks): sizes one short of, equal to and one past each
     * tile and block edge, every transpose, C row- and column-major (the kernel then
     * computes C^T), beta 0 over NaN, beta 1, and alpha != 1. */
    {
        const int64_t ms[] = {1, 7, 8, 9, 17}, ns[] = {1, 15, 16, 17, 47, 48, 49, 97, 385}, ks[] = {1, 9, 511, 513};
        int n_case = 0;
        for (int t = 0; t < 4; t++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                        /* every combination of the hard sizes is cheap except the long ones */
                        if (ks[ki] > 9 && ns[ni] > 49 && ms[mi] > 9) continue;
                        int lc = (int)((mi + ni + ki) % 2) ? L_COL : L_ROW;
                        float beta = (ni + ki) % 3 == 0 ? 0.0f : (ni + ki) % 3 == 1 ? 1.0f : -0.5f;
                        gemm_case(IT_DTYPE_FP32, 1, ms[mi], ns[ni], ks[ki], t & 1, t >> 1, L_ROW, L_PADDED, lc, 0, 0,
                                  (mi % 2) ? 2.0f : 1.0f, beta, beta == 0.0f);
                        n_case++;
                    }
        /* the threaded paths: rows shared out (m >= n) and columns shared out (m < n),
         * with more than one block in each direction */
        gemm_case(IT_DTYPE_FP32, 1, 203, 99, 1100, false, true, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 0.0f, true);
        gemm_case(IT_DTYPE_FP32, 1, 37, 811, 520, true, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 1.0f, false);
        /* tall products (more than 512 rows per thread: one A panel at a time), with a short
         * last panel, A untransposed (read in place) and transposed (packed) */
        gemm_case(IT_DTYPE_FP32, 1, 1100, 40, 30, false, false, L_PADDED, L_ROW, L_ROW, 0, 0, 1.0f, 0.5f, false);
        gemm_case(IT_DTYPE_FP32, 1, 1100, 40, 30, true, true, L_ROW, L_ROW, L_ROW, 0, 0, 2.0f, 0.0f, true);
        CHECK(n_case > 400);
    }
    /* With the own kernels (AVX-512 or AVX2), fp32 results do not depend on the thread count
     * (each element is summed by one thread in a fixed order): 1, 2 and 3 threads give the
     * same bits, one product sharing rows out and one sharing columns. (OpenBLAS only
     * promises the same bits for the same thread count.) */
    bool own_kernel = it_cpu_sgemm_is_own();
    printf("test_cpu_kernels: fp32 gemm through %s\n", !own_kernel                ? "the BLAS"
                                                       : it_cpu_sgemm_is_avx512() ? "the AVX-512 kernel"
                                                                                  : "the AVX2 kernel");
    for (int shape = 0; own_kernel && shape < 2; shape++) {
        int64_t M = shape ? 40 : 300, N = shape ? 1000 : 200, Kd = 700;
        it_gemm_args g;
        memset(&g, 0, sizeof g);
        g.a = gemm_desc(IT_DTYPE_FP32, 1, M, Kd, L_ROW, 0);
        g.b = gemm_desc(IT_DTYPE_FP32, 1, N, Kd, L_ROW, 0);
        g.c = gemm_desc(IT_DTYPE_FP32, 1, M, N, L_ROW, 0);
        g.trans_b = true;
        g.alpha = 1.0f;
        void *pa = alloc_rand(&g.a, -1, 1), *pb = alloc_rand(&g.b, -1, 1), *pc = alloc_fill(&g.c, 0);
        size_t bytes = (size_t)(M * N) * sizeof(float);
        float *first = malloc(bytes);
        int saved = max_threads();
        for (int threads = 1; threads <= 3; threads++) {
            set_threads(threads);
            CHECK_OK(K->gemm(NULL, &g));
            if (threads == 1)
                memcpy(first, pc, bytes);
            else
                CHECK_MSG(memcmp(first, pc, bytes) == 0, "gemm %lldx%lldx%lld: %d threads differ from 1 thread",
                          (long long)M, (long long)N, (long long)Kd, threads);
        }
        set_threads(saved);
        free(first);
        free(pa);
        free(pb);
        free(pc);
    }
    /* M == 0, N == 0, B == 0: no-ops that must not touch memory */
    gemm_case(IT_DTYPE_FP32, 2, 0, 4, 3, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 1.0f, false);
    gemm_case(IT_DTYPE_FP32, 2, 4, 0, 3, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 1.0f, false);
    gemm_case(IT_DTYPE_FP32, 0, 4, 5, 3, false, false, L_ROW, L_ROW, L_ROW, 0, 0, 1.0f, 1.0f, false);
    /* bf16 / fp16: fp32 math on the exact half inputs, one rounding of the output */
    for (int t = 0; t < 4; t++) {
        gemm_case(IT_DTYPE_BF16, 2, 7, 13, 5, t & 1, t >> 1, L_ROW, L_COL, L_ROW, 0, 0, 1.0f, 0.5f, false);
        gemm_case(IT_DTYPE_FP16, 2, 7, 13, 5, t & 1, t >> 1, L_STRIDED, L_ROW, L_ROW, 0, 2, 1.0f, 0.0f, true);
    }

    /* The widening path's bits, whatever the layouts and the batch's sharing (below). */
    test_gemm_half_widening();

    /* Errors. */
    float buf[64] = {0};
    it_gemm_args g;
    memset(&g, 0, sizeof g);
    g.a = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 2, 3}, NULL);
    g.b = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 4, 2}, NULL);
    g.c = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 2, 2}, NULL);
    g.alpha = 1.0f;
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "do not chain");
    g.b = mk(buf, IT_DTYPE_FP64, 3, (int64_t[]){1, 3, 2}, NULL);
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "dtypes differ");
    g.b = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "b must be 3-D");
    g.b = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){2, 3, 2}, NULL);
    g.c = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){3, 2, 2}, NULL);
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "batch sizes");
    g.b = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 3, 2}, NULL);
    g.c = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){3, 2, 2}, (int64_t[]){0, 2, 1});
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "c.strides[0] is 0");
    g.c = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 2, 2}, (int64_t[]){4, -2, 1});
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_INVALID_ARG, "c.strides[1] = -2 is negative");
    g.a.dtype = g.b.dtype = g.c.dtype = IT_DTYPE_I32;
    g.c = mk(buf, IT_DTYPE_I32, 3, (int64_t[]){1, 2, 2}, NULL);
    CHECK_ERR(K->gemm(NULL, &g), IT_ERR_UNSUPPORTED, "dtype int32 not supported");
    CHECK_ERR(K->gemm(NULL, NULL), IT_ERR_INVALID_ARG, "args is NULL");
}

/* ====================================================================== unary / binary */

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

static double unary_ref(it_unary_op op, double alpha, double x) {
    switch (op) {
    case IT_UNARY_NEG: return -x;
    case IT_UNARY_SCALE: return alpha * x;
    case IT_UNARY_EXP: return exp(x);
    case IT_UNARY_LOG: return log(x);
    case IT_UNARY_SQRT: return sqrt(x);
    case IT_UNARY_RSQRT: return 1.0 / sqrt(x);
    case IT_UNARY_SQUARE: return x * x;
    case IT_UNARY_TANH: return tanh(x);
    case IT_UNARY_GELU: return gelu_ref(x);
    case IT_UNARY_SILU: return x * sigmoid_ref(x);
    case IT_UNARY_ADD_SCALAR: return x + alpha;
    case IT_UNARY_RECIP: return 1.0 / x;
    default: return NAN;
    }
}

/* d/dx gelu(x) of the tanh form, written independently of the kernel's llm.c form. */
static double gelu_grad_ref(double x) {
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static double binary_ref(it_binary_op op, double a, double b) {
    switch (op) {
    case IT_BINARY_ADD: return a + b;
    case IT_BINARY_SUB: return a - b;
    case IT_BINARY_MUL: return a * b;
    case IT_BINARY_DIV: return a / b;
    case IT_BINARY_MAX: return a > b ? a : b;
    case IT_BINARY_MIN: return a < b ? a : b;
    case IT_BINARY_GELU_BWD: return b * gelu_grad_ref(a);
    case IT_BINARY_SILU_BWD: {
        double s = sigmoid_ref(a);
        return b * (s + a * s * (1.0 - s));
    }
    case IT_BINARY_TANH_BWD: return b * (1.0 - a * a);
    default: return NAN;
    }
}

/* Inputs in each op's domain. */
static void unary_domain(it_unary_op op, double *lo, double *hi) {
    *lo = -3, *hi = 3;
    if (op == IT_UNARY_LOG || op == IT_UNARY_SQRT || op == IT_UNARY_RSQRT || op == IT_UNARY_RECIP) *lo = 0.1;
}

/* Tolerance for a math result y of input x: fp32 libm functions are within a few ulp, and
 * GELU/SILU lose up to |x| ulp to cancellation in (1 + tanh) / (1 + x(1 - s)): 1e-6 (1 +
 * |x| + |y|) covers both; fp64: 1e-14 in the same units; bf16/fp16 add one output
 * rounding. */
static double ew_tol(it_dtype dt, double x, double y) {
    double m = 1.0 + fabs(x) + fabs(y);
    switch (dt) {
    case IT_DTYPE_FP64: return 1e-14 * m;
    case IT_DTYPE_BF16: return 0x1p-8 * fabs(y) + 1e-6 * m;
    case IT_DTYPE_FP16: return 0x1p-11 * fabs(y) + 1e-6 * m;
    default: return 1e-6 * m;
    }
}

/* out = op(x) with x in the given descriptor, checked element by element. */
static int unary_run(it_unary_op op, float alpha, it_tdesc *x, it_tdesc *out) {
    int64_t n = t_numel(out);
    double *xs = malloc((size_t)(n + 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) xs[i] = get(x, i); /* before a possible in-place write */
    CHECK_OK(K->unary(NULL, op, alpha, x, out));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = unary_ref(op, (double)alpha, xs[i]), got = get(out, i);
        bool ok = isnan(ref) ? isnan(got) : fabs(got - ref) <= ew_tol(out->dtype, xs[i], ref);
        if (!ok && bad++ == 0)
            fprintf(stderr, "unary op %d %s: x %.9g -> %.9g, expected %.9g\n", op, it_dtype_name(out->dtype), xs[i],
                    got, ref);
    }
    free(xs);
    return bad;
}

static void test_unary(void) {
    it_dtype dts[4] = {IT_DTYPE_FP32, IT_DTYPE_FP64, IT_DTYPE_BF16, IT_DTYPE_FP16};
    for (int d = 0; d < 4; d++)
        for (int op = 0; op < IT_UNARY_COUNT; op++) {
            double lo, hi;
            unary_domain(op, &lo, &hi);
            /* contiguous 7x13 */
            it_tdesc x = mk(NULL, dts[d], 2, (int64_t[]){7, 13}, NULL),
                     o = mk(NULL, dts[d], 2, (int64_t[]){7, 13}, NULL);
            void *px = alloc_rand(&x, lo, hi), *po = alloc_fill(&o, 0);
            CHECK_MSG(unary_run(op, 0.75f, &x, &o) == 0, "unary op %d %s contiguous", op, it_dtype_name(dts[d]));
            /* transposed input: x^T of a 13x7 buffer */
            it_tdesc xt = mk(px, dts[d], 2, (int64_t[]){7, 13}, (int64_t[]){1, 7});
            CHECK_MSG(unary_run(op, -1.25f, &xt, &o) == 0, "unary op %d %s transposed", op, it_dtype_name(dts[d]));
            /* broadcast input (stride 0 on dim 0) into a strided output (every other column) */
            it_tdesc xb = mk(px, dts[d], 2, (int64_t[]){7, 6}, (int64_t[]){0, 1});
            it_tdesc os = mk(po, dts[d], 2, (int64_t[]){7, 6}, (int64_t[]){13, 2});
            CHECK_MSG(unary_run(op, 2.0f, &xb, &os) == 0, "unary op %d %s broadcast", op, it_dtype_name(dts[d]));
            /* in place */
            CHECK_MSG(unary_run(op, 0.5f, &x, &x) == 0, "unary op %d %s in place", op, it_dtype_name(dts[d]));
            /* size 1 and size 0 (the size-1 input is fresh: the in-place run above left x
             * outside the domain, e.g. exp(3) whose exp overflows fp16) */
            it_tdesc x1 = mk(NULL, dts[d], 3, (int64_t[]){1, 1, 1}, NULL),
                     o1 = mk(po, dts[d], 3, (int64_t[]){1, 1, 1}, NULL);
            void *px1 = alloc_rand(&x1, lo, hi);
            CHECK_MSG(unary_run(op, 1.0f, &x1, &o1) == 0, "unary op %d size 1", op);
            free(px1);
            it_tdesc x0 = mk(NULL, dts[d], 2, (int64_t[]){0, 5}, NULL),
                     o0 = mk(NULL, dts[d], 2, (int64_t[]){0, 5}, NULL);
            CHECK_OK(K->unary(NULL, op, 1.0f, &x0, &o0));
            free(px);
            free(po);
        }
    /* 0-d tensor */
    double s = 2.0, r = 0;
    it_tdesc x0 = mk(&s, IT_DTYPE_FP64, 0, NULL, NULL), o0 = mk(&r, IT_DTYPE_FP64, 0, NULL, NULL);
    CHECK_OK(K->unary(NULL, IT_UNARY_SQUARE, 1.0f, &x0, &o0));
    CHECK(r == 4.0);

    /* Errors. */
    float buf[16];
    it_tdesc a = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL),
             b = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    CHECK_ERR(K->unary(NULL, IT_UNARY_EXP, 1.0f, &a, &b), IT_ERR_INVALID_ARG, "x.shape[0] = 2 != out.shape[0] = 3");
    CHECK_ERR(K->unary(NULL, (it_unary_op)99, 1.0f, &a, &a), IT_ERR_INVALID_ARG, "op 99 out of range");
    it_tdesc ob = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, (int64_t[]){0, 1});
    CHECK_ERR(K->unary(NULL, IT_UNARY_EXP, 1.0f, &a, &ob), IT_ERR_INVALID_ARG, "out.strides[0] is 0");
    it_tdesc ai = mk(buf, IT_DTYPE_I32, 2, (int64_t[]){2, 3}, NULL);
    CHECK_ERR(K->unary(NULL, IT_UNARY_EXP, 1.0f, &ai, &ai), IT_ERR_UNSUPPORTED, "unary: dtype int32 not supported");
    it_tdesc an = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL);
    CHECK_ERR(K->unary(NULL, IT_UNARY_EXP, 1.0f, &an, &a), IT_ERR_INVALID_ARG, "x.data is NULL");
}

/* fp32 EXP and TANH are the kernels' own vectorizable versions: at most 2 ulp from the
 * correctly rounded value anywhere (1 ulp for exp, 1.5 for tanh measured over all floats),
 * subnormal exps within one subnormal step, and the special values right. */
static double ulp_of(float f) {
    float a = fabsf(f);
    return a < 0x1p-126f ? 0x1p-149 : (double)(nextafterf(a, INFINITY) - a);
}
static void test_exp_tanh_accuracy(void) {
    enum { NPT = 200001 };
    float *x = malloc(NPT * sizeof(float)), *y = malloc(NPT * sizeof(float));
    it_tdesc tx = mk(x, IT_DTYPE_FP32, 1, (int64_t[]){NPT}, NULL), ty = mk(y, IT_DTYPE_FP32, 1, (int64_t[]){NPT}, NULL);
    for (int i = 0; i < NPT; i++) x[i] = (float)(-104.0 + 193.0 * i / (NPT - 1));
    CHECK_OK(K->unary(NULL, IT_UNARY_EXP, 1.0f, &tx, &ty));
    int bad = 0;
    for (int i = 0; i < NPT; i++) {
        double ref = exp((double)x[i]);
        if (ref > 3.4028234663852886e38) {
            bad += !isinf(y[i]);
            continue;
        }
        if (!(fabs(y[i] - ref) <= 2 * ulp_of((float)ref)) && bad++ == 0)
            fprintf(stderr, "exp(%.9g) = %.9g, expected %.9g\n", x[i], y[i], ref);
    }
    CHECK_MSG(bad == 0, "fp32 exp: %d values off by more than 2 ulp", bad);
    for (int i = 0; i < NPT; i++) x[i] = (float)(-12.0 + 24.0 * i / (NPT - 1));
    x[0] = 1e-30f, x[1] = -3e-8f, x[2] = 0.0f;
    CHECK_OK(K->unary(NULL, IT_UNARY_TANH, 1.0f, &tx, &ty));
    bad = 0;
    for (int i = 0; i < NPT; i++) {
        double ref = tanh((double)x[i]);
        if (!(fabs(y[i] - ref) <= 2 * ulp_of((float)ref)) && bad++ == 0)
            fprintf(stderr, "tanh(%.9g) = %.9g, expected %.9g\n", x[i], y[i], ref);
    }
    CHECK_MSG(bad == 0, "fp32 tanh: %d values off by more than 2 ulp", bad);
    float sp[8] = {NAN, INFINITY, -INFINITY, 89.0f, -104.0f, -100.0f, 0.0f, 88.7f}, so[8];
    it_tdesc ts = mk(sp, IT_DTYPE_FP32, 1, (int64_t[]){8}, NULL), tso = mk(so, IT_DTYPE_FP32, 1, (int64_t[]){8}, NULL);
    CHECK_OK(K->unary(NULL, IT_UNARY_EXP, 1.0f, &ts, &tso));
    CHECK(isnan(so[0]) && so[1] == INFINITY && so[2] == 0.0f && so[3] == INFINITY && so[4] == 0.0f);
    CHECK_NEAR(so[5], exp(-100.0), 0x1p-149); /* subnormal */
    CHECK(so[6] == 1.0f);
    CHECK_NEAR(so[7], exp((double)88.7f), 2 * ulp_of(so[7]));
    CHECK_OK(K->unary(NULL, IT_UNARY_TANH, 1.0f, &ts, &tso));
    CHECK(isnan(so[0]) && so[1] == 1.0f && so[2] == -1.0f && so[3] == 1.0f && so[4] == -1.0f && so[6] == 0.0f);
    free(x);
    free(y);
}

/* Backward ops against central differences of the fp64 forward kernels (h = 1e-6; the
 * truncation error h^2 f'''/6 ~ 1e-13 and the rounding error ~ 1e-16/h ~ 1e-10, so 1e-8
 * separates a wrong formula from noise). */
static void test_bwd_ops_fd(void) {
    const double h = 1e-6;
    int bad = 0;
    for (int i = 0; i < 41; i++) {
        double x = -5.0 + 0.25 * i + 0.01, dy = 0.7;
        it_unary_op fops[3] = {IT_UNARY_GELU, IT_UNARY_SILU, IT_UNARY_TANH};
        it_binary_op bops[3] = {IT_BINARY_GELU_BWD, IT_BINARY_SILU_BWD, IT_BINARY_TANH_BWD};
        for (int k = 0; k < 3; k++) {
            double in[3] = {x + h, x - h, x}, outv[3];
            it_tdesc ti = mk(in, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL),
                     to = mk(outv, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL);
            CHECK_OK(K->unary(NULL, fops[k], 1.0f, &ti, &to));
            double fd = dy * (outv[0] - outv[1]) / (2 * h);
            double a = k == 2 ? outv[2] : x, g = 0; /* TANH_BWD takes y = tanh(x) */
            it_tdesc ta = mk(&a, IT_DTYPE_FP64, 1, (int64_t[]){1}, NULL),
                     tb = mk(&dy, IT_DTYPE_FP64, 1, (int64_t[]){1}, NULL);
            it_tdesc tg = mk(&g, IT_DTYPE_FP64, 1, (int64_t[]){1}, NULL);
            CHECK_OK(K->binary(NULL, bops[k], &ta, &tb, &tg));
            if (!(fabs(g - fd) <= 1e-8 * (1 + fabs(fd))) && bad++ < 3)
                fprintf(stderr, "bwd op %d at x = %g: %.12g, finite difference %.12g\n", bops[k], x, g, fd);
        }
    }
    CHECK_MSG(bad == 0, "%d backward-op values differ from finite differences", bad);
}

/* fp32 GELU and its gradient, computed as x s with s = 1 / (1 + e^(-2u)) (elementwise.c):
 *  - over [-12, 12] in steps of 1e-3 against fp64, in units of 2^-24 max(|ref|, 0.01): the
 *    forward within 20 (measured worst 14.3); the gradient within 160 (measured 115: the
 *    terms of s (1 + 2 x u' e s) cancel near the gradient's zero at x ~ -0.75, as llm.c's
 *    form does);
 *  - past the exp's clamp, up to FLT_MAX: the limits, x and -0 (within 1e-38), gradient 1
 *    (within an ulp) and 0 (within 1e-38), never inf or NaN for a finite x;
 *  - the formula's edges: gelu(+inf) = inf, gelu(-inf) = NaN, the gradient NaN at +-inf,
 *    NaN in NaN out. */
static void test_gelu_f32(void) {
    enum { SWEEP = 24001, BIG = 10, N = SWEEP + 2 * BIG + 3 };
    static const float big[BIG] = {10.5f, 11.0f, 20.0f, 1e5f, 1e11f, 1e13f, 3e13f, 1e19f, 1e30f, FLT_MAX};
    static float x[N], y[N], g[N], dy[N];
    for (int i = 0; i < SWEEP; i++) x[i] = -12.0f + 0.001f * (float)i;
    for (int i = 0; i < BIG; i++) x[SWEEP + 2 * i] = big[i], x[SWEEP + 2 * i + 1] = -big[i];
    x[N - 3] = INFINITY, x[N - 2] = -INFINITY, x[N - 1] = NAN;
    for (int i = 0; i < N; i++) dy[i] = 1.0f;
    it_tdesc tx = mk(x, IT_DTYPE_FP32, 1, (int64_t[]){N}, NULL), ty = mk(y, IT_DTYPE_FP32, 1, (int64_t[]){N}, NULL);
    it_tdesc td = mk(dy, IT_DTYPE_FP32, 1, (int64_t[]){N}, NULL), tg = mk(g, IT_DTYPE_FP32, 1, (int64_t[]){N}, NULL);
    CHECK_OK(K->unary(NULL, IT_UNARY_GELU, 1.0f, &tx, &ty));
    CHECK_OK(K->binary(NULL, IT_BINARY_GELU_BWD, &tx, &td, &tg));
    double worst_y = 0, worst_g = 0;
    for (int i = 0; i < SWEEP; i++) {
        double ry = gelu_ref(x[i]), rg = gelu_grad_ref(x[i]);
        double ey = fabs(y[i] - ry) / (0x1p-24 * fmax(fabs(ry), 0.01)),
               eg = fabs(g[i] - rg) / (0x1p-24 * fmax(fabs(rg), 0.01));
        if (!(ey <= worst_y)) worst_y = ey;
        if (!(eg <= worst_g)) worst_g = eg;
    }
    CHECK_MSG(worst_y <= 20.0, "gelu over [-12, 12]: %.1f units of 2^-24 max(|gelu|, 0.01)", worst_y);
    CHECK_MSG(worst_g <= 160.0, "gelu's gradient over [-12, 12]: %.1f units", worst_g);
    for (int i = SWEEP; i < SWEEP + 2 * BIG; i++) {
        float v = x[i];
        if (v > 0)
            CHECK_MSG(y[i] == v && fabsf(g[i] - 1.0f) <= 0x1p-23f, "gelu(%g) = %g, gradient %g", (double)v,
                      (double)y[i], (double)g[i]);
        else
            CHECK_MSG(y[i] <= 0.0f && y[i] >= -1e-38f && fabsf(g[i]) <= 1e-38f, "gelu(%g) = %g, gradient %g", (double)v,
                      (double)y[i], (double)g[i]);
    }
    CHECK(y[N - 3] == INFINITY && isnan(g[N - 3]));
    CHECK(isnan(y[N - 2]) && isnan(g[N - 2]));
    CHECK(isnan(y[N - 1]) && isnan(g[N - 1]));
    printf("test_cpu_kernels: fp32 gelu within %.1f units of fp64 over [-12, 12], its gradient %.1f\n", worst_y,
           worst_g);
}

static int binary_run(it_binary_op op, it_tdesc *a, it_tdesc *b, it_tdesc *out) {
    int64_t n = t_numel(out);
    double *as = malloc((size_t)(2 * n + 1) * sizeof(double)), *bs = as + n;
    for (int64_t i = 0; i < n; i++) as[i] = get(a, i), bs[i] = get(b, i);
    CHECK_OK(K->binary(NULL, op, a, b, out));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = binary_ref(op, as[i], bs[i]), got = get(out, i);
        bool ok = isnan(ref) ? isnan(got) : fabs(got - ref) <= ew_tol(out->dtype, fabs(as[i]) + fabs(bs[i]), ref);
        if (!ok && bad++ == 0)
            fprintf(stderr, "binary op %d %s: (%.9g, %.9g) -> %.9g, expected %.9g\n", op, it_dtype_name(out->dtype),
                    as[i], bs[i], got, ref);
    }
    free(as);
    return bad;
}

static void test_binary(void) {
    it_dtype dts[4] = {IT_DTYPE_FP32, IT_DTYPE_FP64, IT_DTYPE_BF16, IT_DTYPE_FP16};
    for (int d = 0; d < 4; d++)
        for (int op = 0; op < IT_BINARY_COUNT; op++) {
            it_dtype dt = dts[d];
            const char *dn = it_dtype_name(dt);
            double blo = op == IT_BINARY_DIV ? 0.5 : -2; /* keep divisors away from 0 */
            it_tdesc a = mk(NULL, dt, 2, (int64_t[]){7, 13}, NULL), b = mk(NULL, dt, 2, (int64_t[]){7, 13}, NULL);
            it_tdesc o = mk(NULL, dt, 2, (int64_t[]){7, 13}, NULL);
            void *pa = alloc_rand(&a, -2, 2), *pb = alloc_rand(&b, blo, 2), *po = alloc_fill(&o, 0);
            CHECK_MSG(binary_run(op, &a, &b, &o) == 0, "binary %d %s contiguous", op, dn);
            /* row broadcast b (1 -> 7), column broadcast b (1 -> 13), transposed a */
            it_tdesc brow = mk(pb, dt, 2, (int64_t[]){7, 13}, (int64_t[]){0, 1});
            CHECK_MSG(binary_run(op, &a, &brow, &o) == 0, "binary %d %s row broadcast", op, dn);
            it_tdesc bcol = mk(pb, dt, 2, (int64_t[]){7, 13}, (int64_t[]){1, 0});
            CHECK_MSG(binary_run(op, &a, &bcol, &o) == 0, "binary %d %s column broadcast", op, dn);
            it_tdesc at = mk(pa, dt, 2, (int64_t[]){7, 13}, (int64_t[]){1, 7});
            CHECK_MSG(binary_run(op, &at, &brow, &o) == 0, "binary %d %s transposed", op, dn);
            /* 3-D with a broadcast middle dim, strided out */
            it_tdesc a3 = mk(pa, dt, 3, (int64_t[]){3, 4, 5}, (int64_t[]){5, 0, 1});
            it_tdesc b3 = mk(pb, dt, 3, (int64_t[]){3, 4, 5}, (int64_t[]){20, 5, 1});
            it_tdesc o3 = mk(po, dt, 3, (int64_t[]){3, 4, 5}, (int64_t[]){1, 3, 12});
            CHECK_MSG(binary_run(op, &a3, &b3, &o3) == 0, "binary %d %s 3-D", op, dn);
            /* in place, on either operand */
            CHECK_MSG(binary_run(op, &a, &b, &a) == 0, "binary %d %s out = a", op, dn);
            CHECK_MSG(binary_run(op, &a, &b, &b) == 0, "binary %d %s out = b", op, dn);
            free(pa);
            free(pb);
            free(po);
        }

    /* max/min propagate NaN from either side. */
    float na[2] = {NAN, 1.0f}, nb[2] = {1.0f, NAN}, no[2];
    it_tdesc ta = mk(na, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL), tb = mk(nb, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    it_tdesc to = mk(no, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_OK(K->binary(NULL, IT_BINARY_MAX, &ta, &tb, &to));
    CHECK(isnan(no[0]) && isnan(no[1]));
    CHECK_OK(K->binary(NULL, IT_BINARY_MIN, &ta, &tb, &to));
    CHECK(isnan(no[0]) && isnan(no[1]));

    /* Large enough for the threaded path: bit-identical for 1 and 3 threads, and right. */
    int64_t R = 301, C = 257;
    it_tdesc a = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, NULL);
    it_tdesc b = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, (int64_t[]){0, 1});
    it_tdesc o1 = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, NULL), o3 = o1;
    void *pa = alloc_rand(&a, -3, 3), *pb = alloc_rand(&b, -3, 3), *p1 = alloc_fill(&o1, 0), *p3 = alloc_fill(&o3, 0);
    int saved = max_threads();
    set_threads(1);
    CHECK_OK(K->binary(NULL, IT_BINARY_GELU_BWD, &a, &b, &o1));
    set_threads(3);
    CHECK_OK(K->binary(NULL, IT_BINARY_GELU_BWD, &a, &b, &o3));
    set_threads(saved);
    CHECK(memcmp(p1, p3, (size_t)(R * C) * sizeof(float)) == 0);
    CHECK_MSG(binary_run(IT_BINARY_GELU_BWD, &a, &b, &o1) == 0, "large gelu_bwd");
    free(pa);
    free(pb);
    free(p1);
    free(p3);

    /* Errors. */
    float buf[16];
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL),
             y = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 4}, NULL);
    CHECK_ERR(K->binary(NULL, IT_BINARY_ADD, &x, &y, &x), IT_ERR_INVALID_ARG, "b.shape[1] = 4 != out.shape[1] = 3");
    it_tdesc xd = mk(buf, IT_DTYPE_FP64, 2, (int64_t[]){2, 3}, NULL);
    CHECK_ERR(K->binary(NULL, IT_BINARY_ADD, &x, &xd, &x), IT_ERR_INVALID_ARG, "b dtype float64 != out dtype float32");
    it_tdesc x3 = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){1, 2, 3}, NULL);
    CHECK_ERR(K->binary(NULL, IT_BINARY_ADD, &x3, &x, &x), IT_ERR_INVALID_ARG, "a.ndim 3 != out.ndim 2");
    CHECK_ERR(K->binary(NULL, IT_BINARY_ADD, &x, NULL, &x), IT_ERR_INVALID_ARG, "b is NULL");
}

/* ====================================================================== reduce */

/* The documented fp32 pairwise sum of x[0..n) (stride s), to compare bit for bit. */
static float pairwise_ref(const float *x, int64_t n, int64_t s) {
    if (n <= 128) {
        float res = 0;
        int64_t i = 0;
        if (n >= 8) {
            float r[8];
            for (int j = 0; j < 8; j++) r[j] = x[j * s];
            for (i = 8; i + 8 <= n; i += 8)
                for (int j = 0; j < 8; j++) r[j] += x[(i + j) * s];
            res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        }
        for (; i < n; i++) res += x[i * s];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_ref(x, n2, s) + pairwise_ref(x + n2 * s, n - n2, s);
}

/* Reduce x over the dims in `mask` (bit d = dim d) and compare with a double reference.
 * Tolerance: fp32 pairwise summation error <= log2(n) u sum|x| (u = 2^-24), given x4
 * margin; fp64 the same with 2^-53. */
static void reduce_check(it_reduce_op op, it_tdesc *x, unsigned mask) {
    it_tdesc o = *x;
    int64_t on = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask >> d & 1) o.shape[d] = 1;
        on *= o.shape[d];
    }
    o = mk(NULL, x->dtype, x->ndim, o.shape, NULL);
    void *po = alloc_fill(&o, 12345.0);
    CHECK_OK(K->reduce(NULL, op, x, &o));
    int64_t xn = t_numel(x);
    int bad = 0;
    double u = x->dtype == IT_DTYPE_FP64 ? 0x1p-53 : 0x1p-24;
    for (int64_t oi = 0; oi < on; oi++) {
        double acc = op == IT_REDUCE_MAX ? -INFINITY : 0, mag = 0;
        int64_t cnt = 0;
        for (int64_t xi = 0; xi < xn; xi++) {
            /* does x element xi land in output oi? */
            int64_t rem = xi, orem = 0, ostride = 1;
            for (int d = x->ndim - 1; d >= 0; d--) {
                int64_t id = rem % x->shape[d];
                rem /= x->shape[d];
                if (!(mask >> d & 1)) orem += id * ostride, ostride *= x->shape[d];
            }
            if (orem != oi) continue;
            double v = get(x, xi);
            cnt++;
            if (op == IT_REDUCE_MAX)
                acc = v > acc ? v : acc;
            else {
                acc += op == IT_REDUCE_SUMSQ ? v * v : v;
                mag += op == IT_REDUCE_SUMSQ ? v * v : fabs(v);
            }
        }
        if (op == IT_REDUCE_MEAN) acc = cnt ? acc / (double)cnt : NAN, mag = cnt ? mag / (double)cnt : 0;
        double got = get(&o, oi);
        double tol = 4.0 * (log2((double)cnt + 1) + 2) * u * mag;
        bool ok = isnan(acc) ? isnan(got) : (isinf(acc) ? got == acc : fabs(got - acc) <= tol);
        if (!ok && bad++ == 0)
            fprintf(stderr, "reduce op %d mask %u out[%lld] = %.10g, expected %.10g\n", op, mask, (long long)oi, got,
                    acc);
    }
    CHECK_MSG(bad == 0, "reduce op %d %s mask %u: %d wrong", op, it_dtype_name(x->dtype), mask, bad);
    free(po);
}

static void test_reduce(void) {
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++)
        for (int op = 0; op < IT_REDUCE_COUNT; op++) {
            /* every subset of dims of a 4x5x6 tensor, contiguous and permuted */
            it_tdesc x = mk(NULL, dts[d], 3, (int64_t[]){4, 5, 6}, NULL);
            void *px = alloc_rand(&x, -2, 2);
            it_tdesc xp = mk(px, dts[d], 3, (int64_t[]){4, 5, 6}, (int64_t[]){1, 24, 4}); /* a permuted view */
            it_tdesc xb = mk(px, dts[d], 3, (int64_t[]){4, 5, 6}, (int64_t[]){6, 0, 1});  /* broadcast dim 1 */
            for (unsigned mask = 0; mask < 8; mask++) {
                reduce_check(op, &x, mask);
                reduce_check(op, &xp, mask);
                reduce_check(op, &xb, mask);
            }
            /* sizes 1, odd sizes, 4-D with dims 0 and 2 reduced */
            it_tdesc x1 = mk(px, dts[d], 3, (int64_t[]){1, 7, 1}, NULL);
            reduce_check(op, &x1, 7);
            reduce_check(op, &x1, 2);
            it_tdesc x4 = mk(px, dts[d], 4, (int64_t[]){3, 2, 5, 4}, NULL);
            reduce_check(op, &x4, 5);
            reduce_check(op, &x4, 10);
            free(px);
            /* long rows (pairwise tree over several levels), columns, and a full reduction */
            it_tdesc xl = mk(NULL, dts[d], 2, (int64_t[]){37, 1031}, NULL);
            px = alloc_rand(&xl, -1, 1);
            reduce_check(op, &xl, 1);
            reduce_check(op, &xl, 2);
            reduce_check(op, &xl, 3);
            free(px);
        }

    /* Empty reductions: sum = sumsq = 0, mean NaN, max -inf; empty outputs are no-ops. */
    float dummy[4] = {0};
    it_tdesc x0 = mk(dummy, IT_DTYPE_FP32, 2, (int64_t[]){0, 3}, NULL);
    float o0[3];
    it_tdesc t0 = mk(o0, IT_DTYPE_FP32, 2, (int64_t[]){1, 3}, NULL);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &x0, &t0));
    CHECK(o0[0] == 0.0f && o0[2] == 0.0f);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUMSQ, &x0, &t0));
    CHECK(o0[1] == 0.0f);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_MEAN, &x0, &t0));
    CHECK(isnan(o0[0]) && isnan(o0[2]));
    CHECK_OK(K->reduce(NULL, IT_REDUCE_MAX, &x0, &t0));
    CHECK(isinf(o0[1]) && o0[1] < 0);
    it_tdesc te = mk(o0, IT_DTYPE_FP32, 2, (int64_t[]){0, 1}, NULL);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &x0, &te));
    float nanx[3] = {1, NAN, 2}, nano;
    it_tdesc tn = mk(nanx, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL),
             tno = mk(&nano, IT_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_MAX, &tn, &tno));
    CHECK(isnan(nano));

    /* Determinism and the documented order, fp32:
     *  - a full sum of 3M elements (task-parallel) equals the documented pairwise sum bit for
     *    bit, with 1 and with 4 threads;
     *  - a (1000, 300) column reduction over dim 0 (the column kernel) equals the same
     *    reduction of its transpose copy over dim 1 (the row kernel), bit for bit. */
    int64_t n = 3000001;
    it_tdesc big = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){n}, NULL);
    float *pb = alloc_rand(&big, -1, 1);
    float s1 = 0, s4 = 0, sq = 0;
    it_tdesc o1 = mk(&s1, IT_DTYPE_FP32, 1, (int64_t[]){1}, NULL), o4 = mk(&s4, IT_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
    it_tdesc oq = mk(&sq, IT_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
    int saved = max_threads();
    set_threads(1);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &big, &o1));
    set_threads(4);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &big, &o4));
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUMSQ, &big, &oq));
    set_threads(saved);
    CHECK(s1 == s4);
    CHECK(s1 == pairwise_ref(pb, n, 1));
    /* Worst-case bound of this tree: (128/8 lane terms + 3 lane joins + log2(n/128) levels)
     * u sum|x|, u = 2^-24; a naive fp32 loop's bound would be n u sum|x|. */
    double exact = 0, exactsq = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) exact += pb[i], exactsq += (double)pb[i] * pb[i], mag += fabs(pb[i]);
    double levels = 16 + 3 + log2((double)n / 128) + 1;
    CHECK_NEAR(s1, exact, levels * 0x1p-24 * mag);
    CHECK_NEAR(sq, exactsq, levels * 0x1p-24 * exactsq);
    free(pb);

    int64_t R = 1000, C = 300;
    it_tdesc xc = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, NULL),
             xt = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){C, R}, NULL);
    float *pc = alloc_rand(&xc, -1, 1), *pt = alloc_fill(&xt, 0);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) pt[j * R + i] = pc[i * C + j];
    float *rc1 = calloc((size_t)C, sizeof(float)), *rc3 = calloc((size_t)C, sizeof(float)),
          *rt = calloc((size_t)C, sizeof(float));
    it_tdesc oc1 = mk(rc1, IT_DTYPE_FP32, 2, (int64_t[]){1, C}, NULL),
             oc3 = mk(rc3, IT_DTYPE_FP32, 2, (int64_t[]){1, C}, NULL);
    it_tdesc ot = mk(rt, IT_DTYPE_FP32, 2, (int64_t[]){C, 1}, NULL);
    set_threads(1);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &xc, &oc1));
    set_threads(3);
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &xc, &oc3));
    CHECK_OK(K->reduce(NULL, IT_REDUCE_SUM, &xt, &ot));
    set_threads(saved);
    CHECK(memcmp(rc1, rc3, (size_t)C * sizeof(float)) == 0);
    CHECK(memcmp(rc1, rt, (size_t)C * sizeof(float)) == 0);
    CHECK(rc1[17] == pairwise_ref(pc + 17, R, C));
    free(pc);
    free(pt);
    free(rc1);
    free(rc3);
    free(rt);

    /* Errors. */
    float buf[8];
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, NULL),
             o = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){2, 2}, NULL);
    CHECK_ERR(K->reduce(NULL, IT_REDUCE_SUM, &x, &o), IT_ERR_INVALID_ARG, "out.shape[1] = 2 is neither x's 3 nor 1");
    it_tdesc o1d = mk(buf, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_ERR(K->reduce(NULL, IT_REDUCE_SUM, &x, &o1d), IT_ERR_INVALID_ARG, "out.ndim 1 != x.ndim 2");
    it_tdesc xh = mk(buf, IT_DTYPE_BF16, 2, (int64_t[]){2, 3}, NULL),
             oh = mk(buf, IT_DTYPE_BF16, 2, (int64_t[]){1, 3}, NULL);
    CHECK_ERR(K->reduce(NULL, IT_REDUCE_SUM, &xh, &oh), IT_ERR_UNSUPPORTED, "reduce: dtype bfloat16 not supported");
    CHECK_ERR(K->reduce(NULL, (it_reduce_op)7, &x, &x), IT_ERR_INVALID_ARG, "op 7 out of range");
}

/* ====================================================================== embedding */

static void test_embedding(void) {
    const int64_t V = 11, C = 13, N = 9;
    int64_t idx64[9] = {3, 0, 10, 3, 7, 3, 0, 1, 10};
    int32_t idx32[9];
    for (int i = 0; i < 9; i++) idx32[i] = (int32_t)idx64[i];
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        /* weight as a transposed view of a (C, V) buffer: a non-contiguous table */
        it_tdesc w = mk(NULL, dt, 2, (int64_t[]){V, C}, (int64_t[]){1, V});
        void *pw = alloc_rand(&w, -1, 1);
        it_tdesc out = mk(NULL, dt, 2, (int64_t[]){N, C}, NULL);
        void *po = alloc_fill(&out, 0);
        for (int k = 0; k < 2; k++) {
            it_tdesc idx =
                k ? mk(idx32, IT_DTYPE_I32, 1, (int64_t[]){N}, NULL) : mk(idx64, IT_DTYPE_I64, 1, (int64_t[]){N}, NULL);
            CHECK_OK(K->embedding_fwd(NULL, &idx, &w, &out));
            int bad = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) bad += get(&out, n * C + c) != get(&w, idx64[n] * C + c);
            CHECK_MSG(bad == 0, "embedding_fwd %s idx %s: %d wrong", it_dtype_name(dt), k ? "int32" : "int64", bad);

            /* bwd: dweight += rows of dout, repeated indices summed in order n */
            it_tdesc dout = mk(NULL, dt, 2, (int64_t[]){N, C}, NULL), dw = mk(NULL, dt, 2, (int64_t[]){V, C}, NULL);
            void *pg = alloc_rand(&dout, -1, 1), *pd = alloc_rand(&dw, -1, 1);
            double *ref = malloc((size_t)(V * C) * sizeof(double));
            for (int64_t i = 0; i < V * C; i++) ref[i] = get(&dw, i);
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) ref[idx64[n] * C + c] += get(&dout, n * C + c);
            CHECK_OK(K->embedding_bwd(NULL, &idx, &dout, &dw));
            bad = 0;
            /* at most 4 fp32 additions of values in [-1, 1]: 4 * 2 * 2^-24 */
            double tol = dt == IT_DTYPE_FP32 ? 1e-6 : 1e-15;
            for (int64_t i = 0; i < V * C; i++) bad += !(fabs(get(&dw, i) - ref[i]) <= tol);
            CHECK_MSG(bad == 0, "embedding_bwd %s: %d wrong", it_dtype_name(dt), bad);
            free(ref);
            free(pg);
            free(pd);
        }
        free(pw);
        free(po);
    }

    /* Backward determinism with many repeats, threaded: 1 thread == 3 threads, bitwise. */
    int64_t N2 = 4096, V2 = 50, C2 = 96;
    int64_t *ix = malloc((size_t)N2 * sizeof(int64_t));
    for (int64_t n = 0; n < N2; n++) ix[n] = (int64_t)((urand() + 1) * 0.5 * V2) % V2;
    it_tdesc idx = mk(ix, IT_DTYPE_I64, 1, (int64_t[]){N2}, NULL);
    it_tdesc dout = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){N2, C2}, NULL);
    it_tdesc d1 = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){V2, C2}, NULL), d3 = d1;
    void *pg = alloc_rand(&dout, -1, 1), *p1 = alloc_fill(&d1, 0), *p3 = alloc_fill(&d3, 0);
    int saved = max_threads();
    set_threads(1);
    CHECK_OK(K->embedding_bwd(NULL, &idx, &dout, &d1));
    set_threads(3);
    CHECK_OK(K->embedding_bwd(NULL, &idx, &dout, &d3));
    set_threads(saved);
    CHECK(memcmp(p1, p3, (size_t)(V2 * C2) * sizeof(float)) == 0);
    /* and it is the sequential sum in order n */
    float seq = 0;
    for (int64_t n = 0; n < N2; n++)
        if (ix[n] == 7) seq += ((float *)pg)[n * C2 + 5];
    CHECK(((float *)p1)[7 * C2 + 5] == seq);
    free(ix);
    free(pg);
    free(p1);
    free(p3);

    /* Size 0, and errors naming the position and value. */
    float wb[6] = {0}, ob[6];
    int64_t bad_idx[3] = {1, 0, -1}, big_idx[2] = {0, 3};
    it_tdesc w = mk(wb, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL),
             o = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    it_tdesc i0 = mk(NULL, IT_DTYPE_I64, 1, (int64_t[]){0}, NULL),
             o0 = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){0, 2}, NULL);
    CHECK_OK(K->embedding_fwd(NULL, &i0, &w, &o0));
    CHECK_OK(K->embedding_bwd(NULL, &i0, &o0, &w));
    it_tdesc ib = mk(bad_idx, IT_DTYPE_I64, 1, (int64_t[]){3}, NULL);
    CHECK_ERR(K->embedding_fwd(NULL, &ib, &w, &o), IT_ERR_INVALID_ARG, "idx[2] = -1 outside [0, 3)");
    CHECK_ERR(K->embedding_bwd(NULL, &ib, &o, &w), IT_ERR_INVALID_ARG, "idx[2] = -1 outside [0, 3)");
    it_tdesc ig = mk(big_idx, IT_DTYPE_I64, 1, (int64_t[]){2}, NULL),
             o2 = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){2, 2}, NULL);
    CHECK_ERR(K->embedding_fwd(NULL, &ig, &w, &o2), IT_ERR_INVALID_ARG, "idx[1] = 3 outside [0, 3)");
    CHECK_ERR(K->embedding_fwd(NULL, &ig, &w, &o), IT_ERR_INVALID_ARG, "out is (3, 2), expected (2, 2)");
    it_tdesc iff = mk(wb, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_ERR(K->embedding_fwd(NULL, &iff, &w, &o2), IT_ERR_INVALID_ARG, "idx dtype float32 is not int32 or int64");
}

/* ====================================================================== optimizers */

static void test_optim(void) {
    /* Hand-computed 2-step Adam/AdamW (lr 0.1, betas 0.9/0.999, eps 1e-8, wd 0.01), in
     * exact arithmetic (Python floats) from p = [1, -2], g1 = [0.5, 0.1], g2 = [-0.25, 0.3].
     * AdamW step 1, element 0: p = 1 * (1 - 0.001) = 0.999; m = 0.05, v = 0.00025;
     * m^ = 0.5, v^ = 0.25; p = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.899000002. */
    const double adamw_p[2][2] = {{0.899000002, -2.097999990000001}, {0.8714672987058463, -2.1876800978044098}};
    const double adamw_m2[2] = {0.019999999999999997, 0.03899999999999999};
    const double adamw_v2[2] = {0.0003122500000000003, 9.999000000000008e-05};
    const double adam_p[2][2] = {{0.9000000019607843, -2.0999999875000017}, {0.8712293476231743, -2.189994210661293}};
    const double adam_m2[2] = {0.02180000000196078, 0.03510000001249999};
    const double adam_v2[2] = {0.0003179208999905493, 8.423460006975007e-05};
    const double g[2][2] = {{0.5, 0.1}, {-0.25, 0.3}};
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++)
        for (int decoupled = 0; decoupled < 2; decoupled++) {
            it_dtype dt = dts[d];
            /* fp32: each of ~10 float operations rounds (2^-24 relative); the update divides
             * by a sqrt(v) that itself carries that error, so 1e-6 relative; fp64: 1e-14. */
            double tol = dt == IT_DTYPE_FP32 ? 1e-6 : 1e-14;
            double pb[2] = {1.0, -2.0}, gb[2], mb[2] = {0, 0}, vb[2] = {0, 0};
            float pf[2] = {1.0f, -2.0f}, gf[2], mf[2] = {0, 0}, vf[2] = {0, 0};
            bool f32 = dt == IT_DTYPE_FP32;
            it_tdesc tp = mk(f32 ? (void *)pf : (void *)pb, dt, 1, (int64_t[]){2}, NULL);
            it_tdesc tg = mk(f32 ? (void *)gf : (void *)gb, dt, 1, (int64_t[]){2}, NULL);
            it_tdesc tm = mk(f32 ? (void *)mf : (void *)mb, dt, 1, (int64_t[]){2}, NULL);
            it_tdesc tv = mk(f32 ? (void *)vf : (void *)vb, dt, 1, (int64_t[]){2}, NULL);
            it_adam_args a = {0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 0, decoupled != 0};
            for (int step = 1; step <= 2; step++) {
                /* step 2 passes the gradient doubled with grad_scale 0.5 (exact in binary) */
                double scale = step == 2 ? 2.0 : 1.0;
                for (int i = 0; i < 2; i++) gf[i] = (float)(g[step - 1][i] * scale), gb[i] = g[step - 1][i] * scale;
                a.grad_scale = (float)(1.0 / scale);
                a.step = step;
                CHECK_OK(K->adam_step(NULL, &a, &tp, &tg, &tm, &tv));
                const double(*pe)[2] = decoupled ? adamw_p : adam_p;
                for (int i = 0; i < 2; i++) CHECK_NEAR(get(&tp, i), pe[step - 1][i], tol * fabs(pe[step - 1][i]));
            }
            const double *me = decoupled ? adamw_m2 : adam_m2, *ve = decoupled ? adamw_v2 : adam_v2;
            for (int i = 0; i < 2; i++) {
                CHECK_NEAR(get(&tm, i), me[i], 1e2 * tol * fabs(me[i])); /* m2 cancels: 0.045 - 0.025 */
                CHECK_NEAR(get(&tv, i), ve[i], tol * fabs(ve[i]));
            }
        }

    /* Bit-exact fp32 replica of torch 1.13's op order (see optim.c), on many elements and
     * threaded: 1-b1 etc. formed in double from the decimals the float args stand for. */
    int64_t n = 100003;
    float *p = malloc((size_t)n * 4 * sizeof(float)), *gg = p + n, *m = gg + n, *v = m + n;
    float *p2 = malloc((size_t)n * 4 * sizeof(float)), *m2 = p2 + 2 * n, *v2 = p2 + 3 * n;
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)urand(), gg[i] = (float)urand() * 0.1f, m[i] = (float)urand() * 0.01f,
        v[i] = (float)fabs(urand()) * 1e-4f;
    memcpy(p2, p, (size_t)n * 4 * sizeof(float));
    it_tdesc tp = mk(p, IT_DTYPE_FP32, 1, (int64_t[]){n}, NULL), tg = mk(gg, IT_DTYPE_FP32, 1, (int64_t[]){n}, NULL);
    it_tdesc tm = mk(m, IT_DTYPE_FP32, 1, (int64_t[]){n}, NULL), tv = mk(v, IT_DTYPE_FP32, 1, (int64_t[]){n}, NULL);
    it_adam_args aw = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7, true};
    CHECK_OK(K->adam_step(NULL, &aw, &tp, &tg, &tm, &tv));
    double lr = 6e-4, b1 = 0.9, b2 = 0.95, wd = 0.1;
    float decay = (float)(1 - lr * wd), fb1 = (float)b1, fomb1 = (float)(1 - b1), fb2 = (float)b2,
          fomb2 = (float)(1 - b2);
    float nss = (float)-(lr / (1 - pow(b1, 7))), bc2s = (float)sqrt(1 - pow(b2, 7)), eps = 1e-8f;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float gi = gg[i] * 0.5f, pi = p2[i] * decay;
        float mi = fmaf(gi, fomb1, m2[i] * fb1);
        float vi = v2[i] * fb2 + (fomb2 * gi) * gi;
        float den = sqrtf(vi) / bc2s + eps;
        pi = pi + (nss * mi) / den;
        bad += pi != p[i] || mi != m[i] || vi != v[i];
    }
    CHECK_MSG(bad == 0, "adamw fp32: %d of %lld elements differ from the torch-order replica", bad, (long long)n);
    free(p);
    free(p2);

    /* SGD: p -= lr * grad_scale * g */
    float sp[3] = {1, 2, 3}, sg[3] = {0.5f, -1, 2};
    double dp[3] = {1, 2, 3}, dg[3] = {0.5, -1, 2};
    it_tdesc ts = mk(sp, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL), tsg = mk(sg, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL);
    it_tdesc td = mk(dp, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL), tdg = mk(dg, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL);
    CHECK_OK(K->sgd_step(NULL, 0.25f, 2.0f, &ts, &tsg));
    CHECK_OK(K->sgd_step(NULL, 0.25f, 2.0f, &td, &tdg));
    CHECK(sp[0] == 0.75f && sp[1] == 2.5f && sp[2] == 2.0f);
    CHECK_NEAR(dp[0], 0.75, 1e-15);
    CHECK_NEAR(dp[1], 2.5, 1e-15);
    CHECK_NEAR(dp[2], 2.0, 1e-15);
    CHECK_NEAR(sp[0], 0.75, 0); /* exact: all values are dyadic */

    /* Errors. */
    it_tdesc t2 = mk(sg, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_ERR(K->sgd_step(NULL, 0.1f, 1.0f, &ts, &t2), IT_ERR_INVALID_ARG, "grad has 2 elements, param has 3");
    it_tdesc tstr = mk(sp, IT_DTYPE_FP32, 1, (int64_t[]){2}, (int64_t[]){2});
    CHECK_ERR(K->sgd_step(NULL, 0.1f, 1.0f, &tstr, &t2), IT_ERR_INVALID_ARG, "param is not contiguous");
    it_adam_args a0 = {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 0, false};
    CHECK_ERR(K->adam_step(NULL, &a0, &ts, &tsg, &ts, &ts), IT_ERR_INVALID_ARG, "step = 0, must be >= 1");
    a0.step = 1;
    CHECK_ERR(K->adam_step(NULL, &a0, &ts, &tsg, &td, &ts), IT_ERR_INVALID_ARG,
              "m dtype float64 != param dtype float32");
    it_tdesc th = mk(sp, IT_DTYPE_FP16, 1, (int64_t[]){3}, NULL);
    CHECK_ERR(K->sgd_step(NULL, 0.1f, 1.0f, &th, &th), IT_ERR_UNSUPPORTED, "sgd_step: dtype float16 not supported");
}

/* adam_step_round is adam_step, then cast: bitwise, for both parameter dtypes, both copies,
 * every decay mode, threaded (sizes past one chunk and the parallel threshold), with ties,
 * values past the copy's range, NaN and Inf among the parameters. */
static void test_adam_round(void) {
    const it_dtype pdts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64}, ldts[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    const int64_t sizes[3] = {1, 4099, 70001};
    int bad = 0, cases = 0;
    for (int pi = 0; pi < 2; pi++)
        for (int li = 0; li < 2; li++)
            for (int si = 0; si < 3; si++)
                for (int mode = 0; mode < 3; mode++) {
                    it_dtype dt = pdts[pi], lt = ldts[li];
                    int64_t n = sizes[si];
                    size_t es = it_dtype_size(dt);
                    char *a = malloc((size_t)n * es * 4), *b = malloc((size_t)n * es * 4);
                    uint16_t *low = malloc((size_t)n * 2), *ref = malloc((size_t)n * 2);
                    for (int64_t i = 0; i < 4 * n; i++) {
                        /* p: some exact ties (1 + 2^-8 + 2^-9: halfway between bf16 neighbours,
                         * a plain value for fp16), large values, NaN and Inf; g, m, v small */
                        int64_t k = i % n, which = i / n;
                        double x = which == 0   ? urand() * (k % 7 == 0 ? 1e5 : 1.0)
                                   : which == 1 ? urand() * 0.1
                                   : which == 2 ? urand() * 0.01
                                                : fabs(urand()) * 1e-4;
                        if (which == 0 && k % 11 == 3) x = 1.0 + 0x1p-8 + 0x1p-9;
                        if (which == 0 && k % 97 == 5) x = k % 2 ? NAN : -INFINITY;
                        if (dt == IT_DTYPE_FP32)
                            ((float *)a)[i] = (float)x;
                        else
                            ((double *)a)[i] = x;
                    }
                    memcpy(b, a, (size_t)n * es * 4);
                    it_tdesc P[2], G[2], M[2], V[2];
                    char *bufs[2] = {a, b};
                    for (int w = 0; w < 2; w++) {
                        P[w] = mk(bufs[w], dt, 1, (int64_t[]){n}, NULL);
                        G[w] = mk(bufs[w] + (size_t)n * es, dt, 1, (int64_t[]){n}, NULL);
                        M[w] = mk(bufs[w] + 2 * (size_t)n * es, dt, 1, (int64_t[]){n}, NULL);
                        V[w] = mk(bufs[w] + 3 * (size_t)n * es, dt, 1, (int64_t[]){n}, NULL);
                    }
                    it_tdesc L = mk(low, lt, 1, (int64_t[]){n}, NULL), R = mk(ref, lt, 1, (int64_t[]){n}, NULL);
                    it_adam_args ar = {1e-3f, 0.9f, 0.95f, 1e-8f, mode == 0 ? 0.0f : 0.1f, 0.5f, 3, mode == 2};
                    CHECK_OK(K->adam_step_round(NULL, &ar, &P[0], &G[0], &M[0], &V[0], &L));
                    CHECK_OK(K->adam_step(NULL, &ar, &P[1], &G[1], &M[1], &V[1]));
                    CHECK_OK(K->cast(NULL, &P[1], &R));
                    bad += memcmp(a, b, (size_t)n * es * 4) != 0 || memcmp(low, ref, (size_t)n * 2) != 0;
                    cases++;
                    free(a), free(b), free(low), free(ref);
                }
    CHECK_MSG(bad == 0, "adam_step_round: %d of %d cases differ from adam_step then cast", bad, cases);

    float p1[2] = {1, 2}, g1[2] = {0, 0}, m1[2] = {0, 0}, v1[2] = {0, 0};
    uint16_t l1[3];
    it_tdesc tp = mk(p1, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL), tg = mk(g1, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    it_tdesc tm = mk(m1, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL), tv = mk(v1, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    it_tdesc l3 = mk(l1, IT_DTYPE_BF16, 1, (int64_t[]){3}, NULL), li = mk(l1, IT_DTYPE_I16, 1, (int64_t[]){2}, NULL);
    it_adam_args a1 = {0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1, true};
    CHECK_ERR(K->adam_step_round(NULL, &a1, &tp, &tg, &tm, &tv, &l3), IT_ERR_INVALID_ARG,
              "low has 3 elements, param has 2");
    CHECK_ERR(K->adam_step_round(NULL, &a1, &tp, &tg, &tm, &tv, &li), IT_ERR_INVALID_ARG,
              "low is int16, expected bfloat16 or float16");
}

/* cross_entropy_low_fwd / _bwd are cast(logits, fp32), then cross_entropy_fwd / _bwd (and a
 * cast of dlogits back): bitwise, for bf16 and fp16 logits, GPT-2's padded vocabulary, NaN and
 * Inf in the padding, strided rows, threaded sizes, and the backward in place (dlogits over
 * the logits). */
static void test_ce_low(void) {
    const it_dtype ldts[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    struct {
        int64_t N, Vp, valid, step; /* step: elements between a row's logits (1: contiguous) */
        bool garbage, in_place;
    } cs[] = {{3, 50304, 50257, 1, true, false}, {5, 13, 10, 1, true, false},  {1, 1, 1, 1, false, false},
              {40, 4099, 4097, 1, false, false}, {6, 33, 33, 2, false, false}, {40, 4099, 4099, 1, false, true}};
    int bad = 0, cases = 0;
    for (int li = 0; li < 2; li++)
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
            it_dtype lt = ldts[li];
            int64_t N = cs[ci].N, Vp = cs[ci].Vp, valid = cs[ci].valid, st = cs[ci].step;
            int64_t rs = Vp * st + 3, n = N * rs; /* rows padded by 3 elements */
            uint16_t *lg = calloc((size_t)n, 2), *dlow = calloc((size_t)n, 2), *dref = calloc((size_t)n, 2);
            float *wide = calloc((size_t)n, 4), *dw = calloc((size_t)n, 4);
            float loss[2][64], dl[64];
            int32_t tg[64];
            for (int64_t r = 0; r < N; r++) {
                for (int64_t v = 0; v < Vp; v++) {
                    float x = (float)(urand() * 6.0);
                    if (cs[ci].garbage && v >= valid) x = (r + v) % 2 ? NAN : INFINITY;
                    lg[r * rs + v * st] = lt == IT_DTYPE_BF16 ? it_fp32_to_bf16(x) : it_fp32_to_fp16(x);
                }
                tg[r] = (int32_t)(r == 0 ? valid - 1 : (r * 7919) % valid);
                dl[r] = (float)(0.5 + urand()) / (float)N;
            }
            const int64_t sh[2] = {N, Vp}, strd[2] = {rs, st}, sh1[1] = {N};
            it_tdesc L = mk(lg, lt, 2, sh, strd), W = mk(wide, IT_DTYPE_FP32, 2, sh, strd);
            it_tdesc T = mk(tg, IT_DTYPE_I32, 1, sh1, NULL), DL = mk(dl, IT_DTYPE_FP32, 1, sh1, NULL);
            it_tdesc O0 = mk(loss[0], IT_DTYPE_FP32, 1, sh1, NULL), O1 = mk(loss[1], IT_DTYPE_FP32, 1, sh1, NULL);
            it_tdesc DX = mk(cs[ci].in_place ? lg : dlow, lt, 2, sh, strd), DW = mk(dw, IT_DTYPE_FP32, 2, sh, strd);
            it_tdesc DR = mk(dref, lt, 2, sh, strd);
            CHECK_OK(K->cast(NULL, &L, &W));
            CHECK_OK(K->cross_entropy_low_fwd(NULL, &L, &T, valid, &O0));
            CHECK_OK(K->cross_entropy_fwd(NULL, &W, &T, valid, &O1));
            CHECK_OK(K->cross_entropy_bwd(NULL, &W, &T, valid, &DL, &DW));
            CHECK_OK(K->cast(NULL, &DW, &DR));
            CHECK_OK(K->cross_entropy_low_bwd(NULL, &L, &T, valid, &DL, &DX));
            bool same = memcmp(loss[0], loss[1], (size_t)N * 4) == 0;
            const uint16_t *got = cs[ci].in_place ? lg : dlow;
            for (int64_t r = 0; r < N; r++)
                for (int64_t v = 0; v < Vp; v++) same = same && got[r * rs + v * st] == dref[r * rs + v * st];
            bad += !same;
            cases++;
            free(lg), free(dlow), free(dref), free(wide), free(dw);
        }
    CHECK_MSG(bad == 0, "cross_entropy_low: %d of %d cases differ from cast, the fp32 kernel, cast", bad, cases);

    float f[4] = {0};
    uint16_t h[4] = {0};
    int32_t t0[2] = {0, 0};
    const int64_t s22[2] = {2, 2}, s2[1] = {2};
    it_tdesc lf = mk(f, IT_DTYPE_FP32, 2, s22, NULL), lh = mk(h, IT_DTYPE_BF16, 2, s22, NULL);
    it_tdesc tt = mk(t0, IT_DTYPE_I32, 1, s2, NULL), of = mk(f, IT_DTYPE_FP32, 1, s2, NULL);
    it_tdesc ob = mk(h, IT_DTYPE_BF16, 1, s2, NULL), dh = mk(h, IT_DTYPE_FP16, 2, s22, NULL);
    CHECK_ERR(K->cross_entropy_low_fwd(NULL, &lf, &tt, 2, &of), IT_ERR_INVALID_ARG,
              "logits dtype float32 is not bfloat16 or float16");
    CHECK_ERR(K->cross_entropy_low_fwd(NULL, &lh, &tt, 2, &ob), IT_ERR_INVALID_ARG, "losses dtype bfloat16");
    CHECK_ERR(K->cross_entropy_low_bwd(NULL, &lh, &tt, 2, &of, &dh), IT_ERR_INVALID_ARG, "differs from logits");
}

/* swiglu_low_fwd / _bwd against the composition autocast ran before them (widen a, b and dy;
 * unary SILU; binary MUL; binary SILU_BWD; round each result): bitwise, for bf16 and fp16,
 * lengths around the 256-element blocks and past a thread's share, and the edge values
 * (NaN, +-Inf, +-0, the exp's clamps, subnormal halves, the formats' largest). */
static void test_swiglu_low(void) {
    const it_dtype dts[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    const int64_t lens[] = {1, 13, 255, 256, 257, 4099, 70001};
    const float edge[] = {NAN,   INFINITY, -INFINITY, 0.0f,      -0.0f,   88.5f,    -88.5f, 104.0f, -104.0f,
                          1e-7f, -3e-7f,   65504.0f,  -65504.0f, 3.0e38f, -3.0e38f, 1.0f,   -1.0f};
    const size_t ne = sizeof edge / sizeof edge[0];
    int bad = 0, cases = 0;
    for (int di = 0; di < 2; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            it_dtype dt = dts[di];
            int64_t n = lens[li];
            uint16_t *h[8];
            float *w[6];
            for (int i = 0; i < 8; i++) h[i] = calloc((size_t)n, 2);
            for (int i = 0; i < 6; i++) w[i] = calloc((size_t)n, 4);
            for (int64_t i = 0; i < n; i++)
                for (int q = 0; q < 3; q++) { /* a, b, dy */
                    float x = (float)(urand() * (q == 0 ? 16.0 : 6.0) - (q == 0 ? 8.0 : 3.0));
                    if ((i * 7 + q * 3) % 11 == 0) x = edge[(size_t)(i * 5 + q) % ne];
                    h[q][i] = dt == IT_DTYPE_BF16 ? it_fp32_to_bf16(x) : it_fp32_to_fp16(x);
                }
            const int64_t sh[1] = {n};
            it_tdesc A = mk(h[0], dt, 1, sh, NULL), B = mk(h[1], dt, 1, sh, NULL), D = mk(h[2], dt, 1, sh, NULL);
            it_tdesc Y = mk(h[3], dt, 1, sh, NULL), DA = mk(h[4], dt, 1, sh, NULL), DB = mk(h[5], dt, 1, sh, NULL);
            it_tdesc YR = mk(h[6], dt, 1, sh, NULL), DAR = mk(h[7], dt, 1, sh, NULL);
            it_tdesc WA = mk(w[0], IT_DTYPE_FP32, 1, sh, NULL), WB = mk(w[1], IT_DTYPE_FP32, 1, sh, NULL);
            it_tdesc WD = mk(w[2], IT_DTYPE_FP32, 1, sh, NULL), S = mk(w[3], IT_DTYPE_FP32, 1, sh, NULL);
            it_tdesc R = mk(w[4], IT_DTYPE_FP32, 1, sh, NULL), R2 = mk(w[5], IT_DTYPE_FP32, 1, sh, NULL);
            CHECK_OK(K->swiglu_low_fwd(NULL, &A, &B, &Y));
            CHECK_OK(K->swiglu_low_bwd(NULL, &A, &B, &D, &DA, &DB));
            CHECK_OK(K->cast(NULL, &A, &WA));
            CHECK_OK(K->cast(NULL, &B, &WB));
            CHECK_OK(K->cast(NULL, &D, &WD));
            CHECK_OK(K->unary(NULL, IT_UNARY_SILU, 0.0f, &WA, &S));
            CHECK_OK(K->binary(NULL, IT_BINARY_MUL, &S, &WB, &R)); /* y */
            CHECK_OK(K->cast(NULL, &R, &YR));
            bool same = memcmp(h[3], h[6], (size_t)n * 2) == 0;
            CHECK_OK(K->binary(NULL, IT_BINARY_MUL, &WD, &S, &R)); /* db = dy * silu(a) */
            CHECK_OK(K->cast(NULL, &R, &YR));
            same = same && memcmp(h[5], h[6], (size_t)n * 2) == 0;
            CHECK_OK(K->binary(NULL, IT_BINARY_MUL, &WD, &WB, &R)); /* t = dy * b */
            CHECK_OK(K->binary(NULL, IT_BINARY_SILU_BWD, &WA, &R, &R2));
            CHECK_OK(K->cast(NULL, &R2, &DAR));
            same = same && memcmp(h[4], h[7], (size_t)n * 2) == 0;
            /* in place: y over a */
            CHECK_OK(K->swiglu_low_fwd(NULL, &A, &B, &A));
            same = same && memcmp(h[0], h[3], (size_t)n * 2) == 0;
            bad += !same;
            cases++;
            for (int i = 0; i < 8; i++) free(h[i]);
            for (int i = 0; i < 6; i++) free(w[i]);
        }
    CHECK_MSG(bad == 0, "swiglu_low: %d of %d cases differ from the widened silu and mul", bad, cases);

    float f[4] = {0};
    uint16_t g[8] = {0};
    const int64_t s4[1] = {4}, s22[2] = {2, 2}, st2[2] = {4, 1};
    it_tdesc ff = mk(f, IT_DTYPE_FP32, 1, s4, NULL), hb = mk(g, IT_DTYPE_BF16, 1, s4, NULL);
    it_tdesc hh = mk(g, IT_DTYPE_FP16, 1, s4, NULL), hs = mk(g, IT_DTYPE_BF16, 2, s22, st2);
    it_tdesc hb22 = mk(g, IT_DTYPE_BF16, 2, s22, NULL);
    CHECK_ERR(K->swiglu_low_fwd(NULL, &ff, &ff, &ff), IT_ERR_INVALID_ARG, "takes bf16 or fp16");
    CHECK_ERR(K->swiglu_low_fwd(NULL, &hb, &hh, &hb), IT_ERR_INVALID_ARG, "b");
    CHECK_ERR(K->swiglu_low_fwd(NULL, &hs, &hs, &hb22), IT_ERR_INVALID_ARG, "not contiguous");
    CHECK_ERR(K->swiglu_low_bwd(NULL, &hb, &hb, &hb, &hb, &ff), IT_ERR_INVALID_ARG, "db");
}

int main(void) {
    K = it_cpu_kernels();
    CHECK(have_omp());
    test_gemm();
    test_unary();
    test_exp_tanh_accuracy();
    test_bwd_ops_fd();
    test_gelu_f32();
    test_binary();
    test_reduce();
    test_embedding();
    test_optim();
    test_adam_round();
    test_ce_low();
    test_swiglu_low();
    return it_test_report("test_cpu_kernels");
}
