/* The CPU backend's bf16 GEMM (backends/cpu/sbgemm_avx512bf16.c, vdpbf16ps) against a scalar
 * reference that sums in the kernel's defined order: per k block (KC = 768 deep) from zero,
 * k in pairs, each pair's odd product added before its even one, each addition rounded to
 * fp32 (the products of two bf16 values are exact in fp32); then alpha * acc, + beta * C
 * (first block) or + C (later blocks) as one FMA; a bf16 C rounded once at the end, to
 * nearest even. Inputs are normal bf16 values, so vdpbf16ps's flushing of denormals does
 * not arise, and the comparison is bitwise.
 *
 * Every transpose, both forms (as asked and swapped, C stored transposed), C fp32 and bf16,
 * sizes one short of, at and past the tile (8 x 48, and 16-column vectors) and block (768
 * deep, odd depths that end in a half pair, 384 wide, 256-row units) edges, beta 0 over
 * NaN, 1 and another value, alpha != 1, on 1 and 2 threads (the same bits), nothing
 * outside C written. Then oneDNN's path (sbgemm_onednn.c, where it is ready): against an
 * fp64 reference within the bound of fp32 sums and one bf16 rounding (its summation order is
 * its own), the same bits on a second run, batches with a broadcast operand, nothing outside
 * C written. Then the gemm slot's bf16 products are the chosen path's, and the IT_CPU_SBGEMM
 * choice. It includes both sources (their entry points are internal). */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "cpu/sbgemm_avx512bf16.c"
#include "cpu/sbgemm_onednn.c"
#include "infinitrain/scalar/it_scalar_cast.h"
#include "it_test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n random bf16 values in [-1, 1], none denormal (zero allowed) */
static uint16_t *rand_bf16(size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        float f = frand();
        p[i] = fabsf(f) < 1e-30f ? 0 : it_sc_fp32_to_bf16(f);
    }
    return p;
}

static float at(const uint16_t *x, bool t, int64_t ld, int64_t i, int64_t j) {
    return it_sc_bf16_to_fp32(t ? x[j * ld + i] : x[i * ld + j]);
}

/* Element (i, j) in the kernel's order; c0 is C's value before (as fp32). */
static float reference(bool ta, bool tb, int64_t i, int64_t j, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                       const uint16_t *b, int64_t ldb, float beta, float c0) {
    float c = c0;
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t kc = k - k0 < KC ? k - k0 : KC;
        float acc = 0.0f;
        for (int64_t p = 0; p < kc; p += 2) {
            if (p + 1 < kc) {
                volatile float t = at(a, ta, lda, i, k0 + p + 1) * at(b, tb, ldb, k0 + p + 1, j);
                acc = acc + t;
            }
            volatile float t = at(a, ta, lda, i, k0 + p) * at(b, tb, ldb, k0 + p, j);
            acc = acc + t;
        }
        float x = alpha * acc;
        bool first = k0 == 0;
        if (!first || beta != 0.0f) x = fmaf(first ? beta : 1.0f, c, x);
        c = x;
    }
    return c;
}

static int n_checked;

/* C at an offset into a buffer with a guard row before and after and padding after each
 * row; c_bf16 picks C's type. Checks both forms against the reference and each other. */
static void one_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, bool c_bf16,
                     int threads) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 1;
    uint16_t *a = rand_bf16((size_t)((ta ? k : m) * lda)), *b = rand_bf16((size_t)((tb ? n : k) * ldb));
    size_t es = c_bf16 ? 2 : 4, cnt = (size_t)((m + 2) * ldc), bytes = cnt * es;
    char *g0 = malloc(bytes);
    for (size_t e = 0; e < cnt; e++) {
        float f = frand();
        if (c_bf16)
            ((uint16_t *)g0)[e] = it_sc_fp32_to_bf16(f);
        else
            ((float *)g0)[e] = f;
    }
    if (beta == 0.0f) /* beta == 0 never reads C */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                size_t e = (size_t)((i + 1) * ldc + j);
                if (c_bf16)
                    ((uint16_t *)g0)[e] = 0x7fc0;
                else
                    ((float *)g0)[e] = NAN;
            }
    char *g[2] = {malloc(bytes), malloc(bytes)};
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    bool ok = true;
    for (int form = 0; form < 2; form++) {
        memcpy(g[form], g0, bytes);
        ok = it_cpu_sbgemm_ex(form, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, g[form] + (size_t)ldc * es, c_bf16,
                              ldc) &&
             ok;
    }
    omp_set_num_threads(saved);
    CHECK(ok);
    char what[160];
    snprintf(what, sizeof what, "sbgemm ta%d tb%d m%lld n%lld k%lld alpha %g beta %g C %s, %d thread(s)", ta, tb,
             (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta, c_bf16 ? "bf16" : "fp32", threads);
    int64_t bad = -1, stray = -1;
    int bad_form = 0;
    double got_bad = 0, want_bad = 0;
    for (int form = 0; form < 2; form++)
        for (int64_t e = 0; e < (m + 2) * ldc; e++) {
            int64_t row = e / ldc - 1, col = e % ldc;
            bool inside = row >= 0 && row < m && col < n;
            if (!inside) {
                if (stray < 0 && memcmp(g[form] + e * (int64_t)es, g0 + e * (int64_t)es, es) != 0) stray = e;
                continue;
            }
            if (bad >= 0) continue;
            float c0 = c_bf16 ? it_sc_bf16_to_fp32(((uint16_t *)g0)[e]) : ((float *)g0)[e];
            float want = reference(ta, tb, row, col, k, alpha, a, lda, b, ldb, beta, c0);
            bool same;
            if (c_bf16) {
                uint16_t w = it_sc_fp32_to_bf16(want), got = ((uint16_t *)g[form])[e];
                same = w == got;
                got_bad = it_sc_bf16_to_fp32(got), want_bad = it_sc_bf16_to_fp32(w);
            } else {
                float got = ((float *)g[form])[e];
                same = memcmp(&got, &want, sizeof got) == 0;
                got_bad = got, want_bad = want;
            }
            if (!same) bad = e, bad_form = form;
        }
    CHECK_MSG(bad < 0, "%s: the %s form differs from the reference at (%lld, %lld): %.9g against %.9g", what,
              bad_form ? "swapped" : "plain", bad < 0 ? 0LL : (long long)(bad / ldc - 1),
              bad < 0 ? 0LL : (long long)(bad % ldc), got_bad, want_bad);
    CHECK_MSG(stray < 0, "%s: wrote outside C, at row %lld column %lld", what,
              stray < 0 ? 0LL : (long long)(stray / ldc - 1), stray < 0 ? 0LL : (long long)(stray % ldc));
    n_checked++;
    free(a);
    free(b);
    free(g0);
    free(g[0]);
    free(g[1]);
}

/* oneDNN's path: C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for `batch` matrices (A or B
 * broadcast when bcast is 1 or 2), C with padded rows and guard rows. Each element within
 *   |c - ref| <= 2^-8 |ref| + 2^-20 (sum_k |a b| + |beta c0|)
 * of the fp64 reference: one bf16 rounding of the result (half an ulp, 2^-9 relative; 2^-8
 * allows for the fp32 value rounding to the other side) plus fp32 sums of up to 2^4 * 2^-24
 * per unit of magnitude (k <= 1537: oneDNN sums in blocks, so the depth error grows with the
 * blocks' count, far below 2^-20 here). A second run gives the same bits. */
static int n_onednn;
static void onednn_case(int64_t batch, int bcast, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        float beta) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    int64_t ra = ta ? k : m, rb = tb ? n : k;
    int64_t sa = bcast == 1 ? 0 : ra * lda, sb = bcast == 2 ? 0 : rb * ldb, sc = (m + 1) * ldc;
    int64_t nba = bcast == 1 ? 1 : batch, nbb = bcast == 2 ? 1 : batch;
    uint16_t *a = rand_bf16((size_t)(nba * ra * lda)), *b = rand_bf16((size_t)(nbb * rb * ldb));
    size_t cnt = (size_t)(batch * sc + ldc);
    uint16_t *c0 = rand_bf16(cnt), *c1 = malloc(cnt * 2), *c2 = malloc(cnt * 2);
    if (beta == 0.0f)
        for (int64_t q = 0; q < batch; q++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) c0[ldc + q * sc + i * ldc + j] = 0x7fc0; /* NaN: never read */
    memcpy(c1, c0, cnt * 2);
    memcpy(c2, c0, cnt * 2);
    CHECK(it_cpu_sbgemm_onednn(batch, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c1 + ldc, ldc, sc));
    CHECK(it_cpu_sbgemm_onednn(batch, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c2 + ldc, ldc, sc));
    char what[160];
    snprintf(what, sizeof what, "onednn batch %lld bcast %d ta%d tb%d m%lld n%lld k%lld alpha %g beta %g",
             (long long)batch, bcast, ta, tb, (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta);
    CHECK_MSG(memcmp(c1, c2, cnt * 2) == 0, "%s: two runs differ", what);
    int64_t bad = -1, stray = -1;
    double got_bad = 0, want_bad = 0;
    for (size_t e = 0; e < cnt; e++) {
        int64_t off = (int64_t)e - ldc, q = off / sc, i = (off % sc) / ldc, j = (off % sc) % ldc;
        bool inside = off >= 0 && q < batch && i < m && j < n;
        if (!inside) {
            if (stray < 0 && c1[e] != c0[e]) stray = (int64_t)e;
            continue;
        }
        const uint16_t *aq = a + (bcast == 1 ? 0 : q * sa), *bq = b + (bcast == 2 ? 0 : q * sb);
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < k; p++) {
            double t = (double)at(aq, ta, lda, i, p) * (double)at(bq, tb, ldb, p, j);
            ref += t, mag += fabs(t);
        }
        ref *= alpha, mag *= fabs(alpha);
        if (beta != 0.0f) {
            double old = it_sc_bf16_to_fp32(c0[e]);
            ref += beta * old, mag += fabs(beta * old);
        }
        double got = it_sc_bf16_to_fp32(c1[e]);
        if (bad < 0 && !(fabs(got - ref) <= ldexp(fabs(ref), -8) + ldexp(mag, -20)))
            bad = (int64_t)e, got_bad = got, want_bad = ref;
    }
    CHECK_MSG(bad < 0, "%s: element %lld is %.9g, the fp64 reference %.9g", what, (long long)bad, got_bad, want_bad);
    CHECK_MSG(stray < 0, "%s: wrote outside C, at element %lld", what, (long long)stray);
    n_onednn++;
    free(a);
    free(b);
    free(c0);
    free(c1);
    free(c2);
}

static void onednn_cases(void) {
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t >> 1;
        onednn_case(1, 0, ta, tb, 1, 1, 1, 1.0f, 0.0f);
        onednn_case(1, 0, ta, tb, 37, 70, 801, 1.0f, 0.0f);
        onednn_case(1, 0, ta, tb, 64, 97, 768, 0.75f, 1.0f);
        onednn_case(1, 0, ta, tb, 130, 49, 1537, 1.0f, -0.7f);
        onednn_case(3, 0, ta, tb, 17, 33, 64, 0.125f, 0.0f);
        onednn_case(4, 1, ta, tb, 9, 48, 65, 1.0f, 1.0f);
        onednn_case(4, 2, ta, tb, 48, 9, 63, 1.0f, 0.0f);
    }
}

/* The gemm slot on bf16 tensors gives the chosen path's bits (column-major C included). */
static void slot_case(void) {
    int64_t M = 37, N = 70, K = 801;
    uint16_t *a = rand_bf16((size_t)(M * K)), *b = rand_bf16((size_t)(K * N));
    uint16_t *c = calloc((size_t)(M * N), 2), *ct = calloc((size_t)(M * N), 2), *want = calloc((size_t)(M * N), 2);
    if (it_cpu_sbgemm_isa() == IT_CPU_SBGEMM_ONEDNN)
        CHECK(it_cpu_sbgemm_onednn(1, false, false, M, N, K, 1.0f, a, K, 0, b, N, 0, 0.0f, want, N, 0));
    else
        CHECK(it_cpu_sbgemm(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, want, true, N));
    it_gemm_args g;
    memset(&g, 0, sizeof g);
    g.a = (it_tdesc){.data = a, .dtype = IT_DTYPE_BF16, .ndim = 3, .shape = {1, M, K}, .strides = {M * K, K, 1}};
    g.b = (it_tdesc){.data = b, .dtype = IT_DTYPE_BF16, .ndim = 3, .shape = {1, K, N}, .strides = {K * N, N, 1}};
    g.c = (it_tdesc){.data = c, .dtype = IT_DTYPE_BF16, .ndim = 3, .shape = {1, M, N}, .strides = {M * N, N, 1}};
    g.alpha = 1.0f;
    CHECK_OK(it_cpu_kernels()->gemm(NULL, &g));
    CHECK_MSG(memcmp(c, want, (size_t)(M * N) * 2) == 0, "the gemm slot's bf16 product is not the %s path's",
              it_cpu_sbgemm_name(it_cpu_sbgemm_isa()));
    g.c = (it_tdesc){.data = ct, .dtype = IT_DTYPE_BF16, .ndim = 3, .shape = {1, M, N}, .strides = {M * N, 1, M}};
    CHECK_OK(it_cpu_kernels()->gemm(NULL, &g));
    int64_t bad = -1;
    for (int64_t i = 0; i < M && bad < 0; i++)
        for (int64_t j = 0; j < N; j++)
            if (ct[j * M + i] != want[i * N + j]) {
                bad = i * N + j;
                break;
            }
    CHECK_MSG(bad < 0, "the gemm slot's bf16 product into a column-major C differs at %lld", (long long)bad);
    free(a);
    free(b);
    free(c);
    free(ct);
    free(want);
}

int main(void) {
    /* the choice: IT_CPU_SBGEMM=fp32 forces the widening path; otherwise the CPU decides */
    setenv("IT_CPU_SBGEMM", "fp32", 1);
    CHECK(it_cpu_sbgemm_isa() == IT_CPU_SBGEMM_FP32);
    setenv("IT_CPU_SBGEMM", "avx512bf16", 1);
    CHECK(it_cpu_sbgemm_isa() == (it_cpu_has_avx512_bf16() ? IT_CPU_SBGEMM_AVX512BF16 : IT_CPU_SBGEMM_FP32));
    setenv("IT_CPU_SBGEMM", "onednn", 1);
    int dflt = it_cpu_onednn_bf16_ready() ? IT_CPU_SBGEMM_ONEDNN
               : it_cpu_has_avx512_bf16() ? IT_CPU_SBGEMM_AVX512BF16
                                          : IT_CPU_SBGEMM_FP32;
    CHECK(it_cpu_sbgemm_isa() == dflt);
    unsetenv("IT_CPU_SBGEMM");
    CHECK(it_cpu_sbgemm_isa() == dflt);
    CHECK(it_cpu_sbgemm_usable() == it_cpu_has_avx512_bf16());
#ifdef IT_HAVE_ONEDNN
    /* oneDNN built in: ready exactly where the CPU has bf16 units (its kernel named so) */
    CHECK(it_cpu_onednn_bf16_ready() == (it_cpu_has_avx512_bf16() || it_cpu_has_amx_bf16()));
#else
    CHECK(!it_cpu_onednn_bf16_ready());
#endif
    printf("test_sbgemm: bf16 products take the %s path (oneDNN: %s)\n", it_cpu_sbgemm_name(dflt),
           it_cpu_onednn_bf16_impl());
    if (it_cpu_onednn_bf16_ready()) {
        onednn_cases();
#ifdef IT_HAVE_ONEDNN
        /* and asked shaped, as on AMX (this copy of the source's own state) */
        int mode = g_mode;
        g_mode = MODE_SHAPED;
        onednn_cases();
        g_mode = mode;
#endif
    }
    if (!it_cpu_has_avx512_bf16()) {
        printf("test_sbgemm: this CPU lacks AVX512_BF16: the kernel is not used here, only the choice was checked\n");
        return it_test_report("test_sbgemm");
    }
    const int64_t ms[] = {1, 7, 8, 9, 48, 49}, ns[] = {1, 15, 16, 17, 47, 48, 49, 97, 385};
    const int64_t ks[] = {1, 2, 3, 64, 767, 768, 769, 1537};
    int idx = 0;
    for (int t = 0; t < 4; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++, idx++) {
                    if (idx % 3 != 0 && ks[ki] > 768) continue; /* a third of the deep ones: time */
                    /* under the sanitizers each shape in one of the four forms (the release build
                     * runs every form) */
                    if (UNDER_SANITIZER && (int)((mi + ni + ki) % 4) != t) continue;
                    float beta = idx % 3 == 0 ? 0.0f : idx % 3 == 1 ? 1.0f : -0.7f;
                    one_case(t & 1, t >> 1, ms[mi], ns[ni], ks[ki], (ni % 2) ? 1.0f : 0.75f, beta, idx % 2 == 0, 1);
                }
    /* several units (256-row and 384-column blocks), op(B) packed whole first, both thread
     * counts: the same bits */
    for (int t = 0; t < 4; t++) {
        one_case(t & 1, t >> 1, 600, 130, 300, 1.0f, 0.0f, t & 1, 1);
        one_case(t & 1, t >> 1, 600, 130, 300, 1.0f, 0.0f, t & 1, 2);
        one_case(t & 1, t >> 1, 70, 800, 1601, 0.5f, 1.0f, !(t & 1), 2);
        one_case(t & 1, t >> 1, 513, 400, 77, 1.0f, -0.7f, true, 2);
    }
    slot_case();
    CHECK(n_checked > (UNDER_SANITIZER ? 150 : 600));
    printf("test_sbgemm: %d products bitwise equal to the scalar reference in both forms; %d through oneDNN within "
           "the bound\n",
           n_checked, n_onednn);
    return it_test_report("test_sbgemm");
}
