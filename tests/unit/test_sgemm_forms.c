/* The CPU backend's AVX-512 sgemm computes a product in one of two forms: as asked, or
 * swapped (C^T = op(B)^T op(A)^T, the tiles stored into C transposed), which it picks for
 * a batch times a weight stored (out, in) so that the weight is read in place instead of
 * through the transposing pack. The swap's promise is that the bits do not change: the
 * same products are summed in the same order. This test holds it to that for every
 * transpose, at sizes one short of, at and past the tile (8 x 48 and 16) and block
 * (512-deep, 384-wide) edges, short (m <= 512 per thread) and tall products, beta 0 over
 * NaN, 1 and another value, alpha != 1, and on 1 and 2 threads. Each result is also checked
 * against a double-precision reference (bound: (K + 2) * 2^-24 * sum |terms|, x4 margin),
 * so that two equally wrong forms cannot pass.
 *
 * It includes the kernel's source (its entry points are not exported from the library). */
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "cpu/sgemm_avx512.c"
#include "it_test.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_buf(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* op(A) (m, k) from a row-major A with lda, likewise B */
static double at(const float *x, bool t, int64_t ld, int64_t i, int64_t j) { return t ? x[j * ld + i] : x[i * ld + j]; }

static int n_checked;

static void one_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int threads) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 1; /* padded rows */
    float *a = rand_buf((size_t)((ta ? k : m) * lda)), *b = rand_buf((size_t)((tb ? n : k) * ldb));
    float *c0 = rand_buf((size_t)(m * ldc));
    if (beta == 0.0f)
        for (int64_t i = 0; i < m * ldc; i++) c0[i] = NAN; /* beta == 0 never reads C */
    size_t bytes = (size_t)(m * ldc) * sizeof(float);
    float *c_plain = malloc(bytes), *c_swap = malloc(bytes);
    memcpy(c_plain, c0, bytes);
    memcpy(c_swap, c0, bytes);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    bool ok1 = it_cpu_sgemm_avx512_ex(0, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_plain, ldc);
    bool ok2 = it_cpu_sgemm_avx512_ex(1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_swap, ldc);
    omp_set_num_threads(saved);
    CHECK(ok1 && ok2);
    char what[128];
    snprintf(what, sizeof what, "sgemm ta%d tb%d m%lld n%lld k%lld alpha %g beta %g, %d thread(s)", ta, tb,
             (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta, threads);
    int64_t bad = -1;
    for (int64_t i = 0; i < m && bad < 0; i++)
        for (int64_t j = 0; j < n; j++)
            if (memcmp(&c_plain[i * ldc + j], &c_swap[i * ldc + j], sizeof(float)) != 0) {
                bad = i * ldc + j;
                break;
            }
    CHECK_MSG(bad < 0, "%s: the swapped form differs at element %lld: %.9g against %.9g", what, (long long)bad,
              bad < 0 ? 0.0 : (double)c_swap[bad], bad < 0 ? 0.0 : (double)c_plain[bad]);
    /* the padding past each row of C is untouched */
    for (int64_t i = 0; i < m; i++) {
        float pad = c0[i * ldc + n];
        CHECK_MSG(memcmp(&c_swap[i * ldc + n], &pad, sizeof pad) == 0, "%s: row %lld's padding was written", what,
                  (long long)i);
    }
    double worst = 0.0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double t = at(a, ta, lda, i, p) * at(b, tb, ldb, p, j);
                s += t;
                mag += fabs(t);
            }
            double ref = (double)alpha * s, bound = (double)(k + 2) * 0x1p-24 * fabs((double)alpha) * mag;
            if (beta != 0.0f) {
                ref += (double)beta * c0[i * ldc + j];
                bound += 0x1p-24 * fabs((double)beta * c0[i * ldc + j]) * 2;
            }
            double err = fabs((double)c_swap[i * ldc + j] - ref) / (4 * bound + 1e-30);
            if (!(err <= worst)) worst = err; /* NaN counts as the worst */
        }
    CHECK_MSG(worst <= 1.0, "%s: error %.3g of the bound", what, worst);
    n_checked++;
    free(a);
    free(b);
    free(c0);
    free(c_plain);
    free(c_swap);
}

int main(void) {
    /* every size through the kernel (by default products up to 64^3 go to the BLAS) */
    setenv("IT_CPU_SGEMM", "avx512", 1);
    if (!it_cpu_has_avx512()) {
        printf("test_sgemm_forms: this CPU has no AVX-512F/VL: the kernel is not used here, nothing to check\n");
        return 0;
    }
    /* every transpose, around the tile and block edges; m and n both ways round, since the
     * swapped form turns one into the other */
    const int64_t ms[] = {1, 7, 8, 9, 17, 48, 49, 100}, ns[] = {15, 16, 17, 47, 48, 49, 97, 385};
    const int64_t ks[] = {1, 9, 511, 513};
    for (int t = 0; t < 4; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    if (ks[ki] > 9 && ns[ni] > 49 && ms[mi] > 17) continue; /* keep the long ones few */
                    float beta = (mi + ni + ki) % 3 == 0 ? 0.0f : (mi + ni + ki) % 3 == 1 ? 1.0f : -0.5f;
                    one_case(t & 1, t >> 1, ms[mi], ns[ni], ks[ki], (ni % 2) ? 1.0f : 1.5f, beta, 1 + (int)(ki % 2));
                }
    /* the shapes the swap is chosen for: a batch (m <= 384) times a weight stored (out, in),
     * lm_head-like wide, and one more than 512 output rows per thread once swapped (the
     * tall path, with a B block wider than 384 since k < 512) */
    one_case(false, true, 256, 2304, 768, 1.0f, 1.0f, 2);
    one_case(false, true, 96, 1030, 300, 1.0f, 0.0f, 2);
    one_case(false, true, 40, 2100, 200, 2.0f, 1.0f, 2);
    one_case(true, true, 64, 1500, 130, 1.0f, -0.5f, 2);
    /* tall products with k < 512: more than one of the widened B blocks */
    one_case(true, false, 1100, 1700, 30, 1.0f, 0.0f, 2);
    one_case(false, false, 1030, 900, 200, 1.0f, 1.0f, 1);
    CHECK(n_checked > 400);
    printf("test_sgemm_forms: %d products, the swapped form bitwise equal to the plain one\n", n_checked);
    return it_test_report("test_sgemm_forms");
}
