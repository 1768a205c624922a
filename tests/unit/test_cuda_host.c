/* The CUDA backend's host logic, on any machine (no GPU, no CUDA toolkit needed):
 * gemm_plan.c maps a row-major it_gemm_args onto one column-major cuBLAS strided-batched
 * call. Each plan is run here through a reference GEMM with cuBLAS's documented semantics
 * (column-major, op T reads the stored matrix transposed, batch strides in elements), and the
 * result is compared with the CPU backend's gemm on the same descriptors. Covered: both
 * transposes of A and B, each stored row-major or column-major with padded leading dimensions,
 * C row-major or column-major, batches with broadcast operands, size-1 dimensions with odd
 * strides; and the calls that must be declined (to the CPU fallback) or refused. */
#include "cuda/gemm_plan.c"

#include "infinitrain/backend.h"
#include "it_test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* cuBLAS's gemm, as documented: column-major, element (r, c) of a matrix at r + c * ld. */
static void ref_run(const cu_gemm_plan *p) {
    for (int64_t bi = 0; bi < p->batch; bi++) {
        const float *A = (const float *)p->a.data + bi * p->a.stride;
        const float *B = (const float *)p->b.data + bi * p->b.stride;
        float *C = (float *)p->c + bi * p->stride_c;
        for (int64_t i = 0; i < p->m; i++)
            for (int64_t j = 0; j < p->n; j++) {
                double acc = 0;
                for (int64_t l = 0; l < p->k; l++) {
                    double x = p->a.trans ? A[l + i * p->a.ld] : A[i + l * p->a.ld];
                    double y = p->b.trans ? B[j + l * p->b.ld] : B[l + j * p->b.ld];
                    acc += x * y;
                }
                float *c = &C[i + j * p->ldc];
                *c = (float)(p->alpha * acc + (p->beta == 0 ? 0.0 : p->beta * (double)*c));
            }
    }
}

/* A stored (batch, rows, cols) operand: row-major (col stride 1) or column-major (row stride
 * 1), its leading dimension padded by `pad`, batch stride 0 when `bcast`. */
typedef struct layout {
    bool colmajor;
    int pad;
    bool bcast;
} layout;

static float *make(it_tdesc *d, int64_t batch, int64_t rows, int64_t cols, layout l, size_t *n_out) {
    int64_t ld = (l.colmajor ? rows : cols) + l.pad;
    int64_t mat = ld * (l.colmajor ? cols : rows);
    int64_t nb = l.bcast ? 1 : batch;
    size_t n = (size_t)(nb * mat + 1);
    float *buf = malloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = frand();
    *d = (it_tdesc){.data = buf, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {batch, rows, cols}};
    d->strides[0] = l.bcast ? 0 : mat;
    d->strides[1] = l.colmajor ? 1 : ld;
    d->strides[2] = l.colmajor ? ld : 1;
    *n_out = n;
    return buf;
}

static int cases_run;

static void one(int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, layout la, layout lb, layout lc,
                float beta) {
    it_gemm_args g = {.trans_a = ta, .trans_b = tb, .alpha = 0.75f, .beta = beta};
    size_t na, nb, nc;
    float *A = make(&g.a, batch, ta ? K : M, ta ? M : K, la, &na);
    float *B = make(&g.b, batch, tb ? N : K, tb ? K : N, lb, &nb);
    float *C = make(&g.c, batch, M, N, lc, &nc);
    float *C2 = malloc(nc * sizeof *C2);
    if (beta == 0)
        for (size_t i = 0; i < nc; i++) C[i] = NAN; /* beta == 0 ignores C, NaN included */
    memcpy(C2, C, nc * sizeof *C2);
    cu_gemm_plan p;
    it_status st = cu_gemm_plan_make(&g, &p);
    CHECK_MSG(st == IT_OK, "plan b%lld %lldx%lldx%lld ta%d tb%d: %s", (long long)batch, (long long)M, (long long)N,
              (long long)K, ta, tb, it_last_error());
    if (st == IT_OK) {
        ref_run(&p);
        it_tdesc c2 = g.c;
        c2.data = C2;
        it_gemm_args g2 = g;
        g2.c = c2;
        CHECK_OK(it_cpu_kernels()->gemm(NULL, &g2));
        /* Every element of C, padding included: the plan must write exactly the CPU's
         * elements. Tolerance: fp32 sums of K products in another order (the reference sums
         * in double) differ by a few ulps of the sum of |terms| (K <= 7, |x| <= 1). */
        int bad = 0;
        for (size_t i = 0; i < nc; i++) {
            bool same = (isnan(C[i]) && isnan(C2[i])) || fabsf(C[i] - C2[i]) <= 1e-5f;
            if (!same && bad++ < 3)
                fprintf(stderr, "  C[%zu] = %.8g, cpu %.8g (b%lld %lldx%lldx%lld ta%d tb%d A%c B%c C%c)\n", i, C[i],
                        C2[i], (long long)batch, (long long)M, (long long)N, (long long)K, ta, tb,
                        la.colmajor ? 'c' : 'r', lb.colmajor ? 'c' : 'r', lc.colmajor ? 'c' : 'r');
        }
        CHECK_MSG(bad == 0, "%d elements differ", bad);
        cases_run++;
    }
    free(A), free(B), free(C), free(C2);
}

static void layouts(void) {
    const int64_t shapes[][4] = {{1, 3, 4, 5}, {2, 5, 3, 7}, {3, 1, 4, 2}, {2, 4, 1, 3}, {1, 1, 1, 1}, {3, 2, 6, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mask = 0; mask < 64; mask++) {
            bool ta = mask & 1, tb = mask & 2;
            layout la = {.colmajor = mask & 4, .pad = (mask & 8) ? 2 : 0, .bcast = (mask & 16) && shapes[s][0] > 1};
            layout lb = {.colmajor = mask & 8, .pad = (mask & 4) ? 1 : 0, .bcast = (mask & 32) && shapes[s][0] > 1};
            layout lc = {.colmajor = mask & 16, .pad = (mask & 32) ? 3 : 0};
            one(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ta, tb, la, lb, lc, (mask & 1) ? 0.5f : 0);
        }
}

/* Size-1 dimensions take any stride (a view of one row or column): still planned. */
static void odd_unit_dims(void) {
    float a[8], b[8], c[4] = {0}, c2[4] = {0};
    for (int i = 0; i < 8; i++) a[i] = frand(), b[i] = frand();
    /* A is 1 x 4 with row stride 0, B 4 x 1 with column stride 7 (never stepped). */
    it_gemm_args g = {.alpha = 1, .beta = 0};
    g.a = (it_tdesc){.data = a, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {1, 1, 4}, .strides = {0, 0, 1}};
    g.b = (it_tdesc){.data = b, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {1, 4, 1}, .strides = {0, 1, 7}};
    g.c = (it_tdesc){.data = c, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {1, 1, 1}, .strides = {0, 5, 9}};
    cu_gemm_plan p;
    CHECK_OK(cu_gemm_plan_make(&g, &p));
    CHECK(p.a.ld >= 1 && p.b.ld >= 1 && p.ldc >= 1);
    ref_run(&p);
    it_gemm_args g2 = g;
    g2.c.data = c2;
    CHECK_OK(it_cpu_kernels()->gemm(NULL, &g2));
    CHECK_NEAR(c[0], c2[0], 1e-6);
}

static void declined(void) {
    float buf[64] = {0};
    it_gemm_args g = {.alpha = 1, .beta = 0};
    it_tdesc m = {.data = buf, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {1, 2, 2}, .strides = {4, 2, 1}};
    g.a = g.b = g.c = m;
    cu_gemm_plan p;
    CHECK_OK(cu_gemm_plan_make(&g, &p));
    CHECK(!p.empty && p.m == 2 && p.n == 2 && p.k == 2);
    /* no unit stride in A */
    g.a.strides[1] = 4, g.a.strides[2] = 2;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_UNSUPPORTED, "cannot take");
    /* a leading dimension shorter than a row: rows overlap */
    g.a.strides[1] = 1, g.a.strides[2] = 1;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_UNSUPPORTED, "cannot take");
    g.a = m;
    /* C written by 3 batch entries at once */
    g.a.shape[0] = g.b.shape[0] = g.c.shape[0] = 3;
    g.c.strides[0] = 0;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_UNSUPPORTED, "shared by 3");
    g.c.strides[0] = 4;
    CHECK_OK(cu_gemm_plan_make(&g, &p));
    CHECK(p.batch == 3 && p.stride_c == 4);
    /* K == 0 */
    g.a.shape[2] = 0, g.b.shape[1] = 0;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_UNSUPPORTED, "K = 0");
    /* M == 0: nothing to do */
    g.a.shape[2] = 2, g.b.shape[1] = 2, g.a.shape[1] = 0, g.c.shape[1] = 0;
    CHECK_OK(cu_gemm_plan_make(&g, &p));
    CHECK(p.empty);
    /* beyond cuBLAS's int */
    g.a = g.b = g.c = m;
    g.c.shape[2] = g.b.shape[2] = 3000000000LL;
    g.b.strides[1] = 3000000000LL, g.c.strides[1] = 3000000000LL;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_UNSUPPORTED, "beyond cuBLAS's int");
    /* shapes that do not multiply, batches that disagree, wrong rank */
    g.a = g.b = g.c = m;
    g.b.shape[1] = 3;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_INVALID_ARG, "op(B) 3 x 2");
    g.b = m;
    g.a.shape[0] = 2, g.c.shape[0] = 3;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_INVALID_ARG, "batches of A (2)");
    g.a = g.c = m;
    g.c.ndim = 2;
    CHECK_ERR(cu_gemm_plan_make(&g, &p), IT_ERR_INVALID_ARG, "3-D");
}

int main(void) {
    layouts();
    CHECK_MSG(cases_run == 6 * 64, "%d of %d layout cases planned", cases_run, 6 * 64);
    odd_unit_dims();
    declined();
    return it_test_report("test_cuda_host");
}
