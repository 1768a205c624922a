/* The CPU backend's AVX-512 sgemm computes a product in one of three forms: as asked, or
 * swapped (C^T = op(B)^T op(A)^T, the tiles stored into C transposed), which it picks for
 * a batch times a weight stored (out, in) so that the weight is read in place instead of
 * through the transposing pack, or, for small products (k <= SMALL_K), unpacked
 * (sgemm_small: attention's per-head products). The promise of the other two forms is that
 * the bits do not change: the same products are summed in the same order. This test holds
 * them to that for every transpose, at sizes one short of, at and past the tile (8 x 48 and
 * 16; 4 x 64 for the small form) and block (512-deep, 384-wide) edges, short (m <= 512 per
 * thread) and tall products, beta 0 over NaN, 1 and another value, alpha != 1, and on 1 and
 * 2 threads. Each result is also checked against a double-precision reference (bound:
 * (K + 2) * 2^-24 * sum |terms|, x4 margin), so that two equally wrong forms cannot pass,
 * and nothing outside C's m x n block may be written.
 *
 * It includes the kernel's source (its entry points are not exported from the library).
 * test_sgemm_forms_avx2.c includes this file with SGEMM_AVX2 defined, and so runs the same
 * checks on the AVX2 kernel (sgemm_avx2.c: 6 x 16 tiles, 512 x 128 blocks, 6 x 16 small
 * tiles). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

#ifdef SGEMM_AVX2
#include "cpu/sgemm_avx2.c"
#define SGEMM_EX it_cpu_sgemm_avx2_ex
#define SGEMM_HAS it_cpu_has_avx2_fma
#define SGEMM_ENV "avx2"
#define SGEMM_TEST "test_sgemm_forms_avx2"
#define SGEMM_SMALL sgemm_small
#else
#include "cpu/sgemm_avx512.c"
#define SGEMM_EX it_cpu_sgemm_avx512_ex
#define SGEMM_HAS it_cpu_has_avx512
#define SGEMM_ENV "avx512"
#define SGEMM_TEST "test_sgemm_forms"
#define SGEMM_SMALL sgemm_small
#endif
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

static int n_checked, n_small;

/* |got - ref| for element (i, j) of alpha op(A) op(B) + beta c0, over its bound
 * ((K + 2) * 2^-24 * sum |terms|, x4 margin); NaN when got is NaN */
static double ref_error(bool ta, bool tb, int64_t i, int64_t j, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float c0, float got) {
    double s = 0.0, mag = 0.0;
    for (int64_t p = 0; p < k; p++) {
        double t = at(a, ta, lda, i, p) * at(b, tb, ldb, p, j);
        s += t;
        mag += fabs(t);
    }
    double ref = (double)alpha * s, bound = (double)(k + 2) * 0x1p-24 * fabs((double)alpha) * mag;
    if (beta != 0.0f) {
        ref += (double)beta * c0;
        bound += 0x1p-24 * fabs((double)beta * c0) * 2;
    }
    return fabs((double)got - ref) / (4 * bound + 1e-30);
}

static void one_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, int threads) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 1; /* padded rows */
    float *a = rand_buf((size_t)((ta ? k : m) * lda)), *b = rand_buf((size_t)((tb ? n : k) * ldb));
    /* C's m rows start one row into the buffer: a guard row before, one after, and the
     * padding float after each row must come out as they went in, in both forms */
    size_t bytes = (size_t)((m + 2) * ldc) * sizeof(float);
    float *g0 = rand_buf((size_t)((m + 2) * ldc)), *c0 = g0 + ldc;
    if (beta == 0.0f)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c0[i * ldc + j] = NAN; /* beta == 0 never reads C */
    bool small = k <= SMALL_K;                                     /* the unpacked form takes these */
    float *g_plain = malloc(bytes), *g_swap = malloc(bytes), *g_small = malloc(bytes);
    float *c_plain = g_plain + ldc, *c_swap = g_swap + ldc, *c_small = g_small + ldc;
    memcpy(g_plain, g0, bytes);
    memcpy(g_swap, g0, bytes);
    memcpy(g_small, g0, bytes);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    bool ok1 = SGEMM_EX(0, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_plain, ldc);
    bool ok2 = SGEMM_EX(1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_swap, ldc);
    omp_set_num_threads(saved);
    if (small) SGEMM_SMALL(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_small, ldc);
    CHECK(ok1 && ok2);
    char what[128];
    snprintf(what, sizeof what, "sgemm ta%d tb%d m%lld n%lld k%lld alpha %g beta %g, %d thread(s)", ta, tb,
             (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta, threads);
    static const char *const form_name[3] = {"plain", "swapped", "small"};
    for (int form = 1; form < (small ? 3 : 2); form++) {
        const float *c_form = form == 1 ? c_swap : c_small;
        int64_t bad = -1;
        for (int64_t i = 0; i < m && bad < 0; i++)
            for (int64_t j = 0; j < n; j++)
                if (memcmp(&c_plain[i * ldc + j], &c_form[i * ldc + j], sizeof(float)) != 0) {
                    bad = i * ldc + j;
                    break;
                }
        CHECK_MSG(bad < 0, "%s: the %s form differs at element %lld: %.9g against %.9g", what, form_name[form],
                  (long long)bad, bad < 0 ? 0.0 : (double)c_form[bad], bad < 0 ? 0.0 : (double)c_plain[bad]);
    }
    /* nothing outside the m x n block is written: the guard rows and each row's padding */
    for (int form = 0; form < (small ? 3 : 2); form++) {
        const float *g = form == 0 ? g_plain : form == 1 ? g_swap : g_small;
        int64_t stray = -1;
        for (int64_t e = 0; e < (m + 2) * ldc && stray < 0; e++) {
            int64_t row = e / ldc - 1, col = e % ldc;
            bool inside = row >= 0 && row < m && col < n;
            if (!inside && memcmp(&g[e], &g0[e], sizeof(float)) != 0) stray = e;
        }
        CHECK_MSG(stray < 0, "%s: the %s form wrote outside C, at row %lld column %lld", what, form_name[form],
                  stray < 0 ? 0LL : (long long)(stray / ldc - 1), stray < 0 ? 0LL : (long long)(stray % ldc));
    }
    double worst = 0.0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double err = ref_error(ta, tb, i, j, k, alpha, a, lda, b, ldb, beta, c0[i * ldc + j], c_swap[i * ldc + j]);
            if (!(err <= worst)) worst = err; /* NaN counts as the worst */
        }
    CHECK_MSG(worst <= 1.0, "%s: error %.3g of the bound", what, worst);
    n_checked++;
    n_small += small;
    free(a);
    free(b);
    free(g0);
    free(g_plain);
    free(g_swap);
    free(g_small);
}

/* thread 1 of a sharing team starts 20 ms late */
static void hold_thread1(int thread) {
    if (thread == 1) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* One product on 1, 2, 3 and 4 threads: every count gives the bits of one thread, within
 * the double reference's bound. */
static void team_case(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
    float *a = rand_buf((size_t)((ta ? k : m) * lda)), *b = rand_buf((size_t)((tb ? n : k) * ldb));
    size_t bytes = (size_t)(m * ldc) * sizeof(float);
    float *c1 = malloc(bytes), *c = malloc(bytes);
    int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 4; threads++) {
        omp_set_num_threads(threads);
        float *out = threads == 1 ? c1 : c;
        CHECK(SGEMM_EX(-1, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, ldc));
        if (threads > 1)
            CHECK_MSG(memcmp(c1, c, bytes) == 0, "sgemm ta%d tb%d %lldx%lldx%lld: %d threads differ from 1", ta, tb,
                      (long long)m, (long long)n, (long long)k, threads);
    }
    omp_set_num_threads(saved);
    double worst = 0.0;
    for (int64_t i = 0; i < m; i += 7) /* a sample of rows: the bits match one thread's already */
        for (int64_t j = 0; j < n; j++) {
            double err = ref_error(ta, tb, i, j, k, 1.0f, a, lda, b, ldb, 0.0f, 0.0f, c1[i * ldc + j]);
            if (!(err <= worst)) worst = err;
        }
    CHECK_MSG(worst <= 1.0, "sgemm ta%d tb%d %lldx%lldx%lld: error %.3g of the bound", ta, tb, (long long)m,
              (long long)n, (long long)k, worst);
    free(a);
    free(b);
    free(c1);
    free(c);
}

int main(void) {
    /* every size through the packed path (by default small products are unpacked; sgemm_small
     * is called directly below) */
    setenv("IT_CPU_SGEMM", SGEMM_ENV, 1);
    if (!SGEMM_HAS()) {
        printf(SGEMM_TEST ": this CPU lacks the kernel's instructions: it is not used here, nothing to check\n");
        return 0;
    }
    /* every transpose, around the tile and block edges; m and n both ways round, since the
     * swapped form turns one into the other */
    const int64_t ms[] = {1, 5, 6, 7, 8, 9, 17, 48, 49, 100}, ns[] = {7, 15, 16, 17, 47, 48, 49, 97, 129, 385};
    /* k blocks: 511 and 513 around KC (one block and two on AVX-512, one on AVX2, whose
     * products up to KC1 = 768 deep are one block), 769 past KC1 (512 + 257 on AVX2) */
    const int64_t ks[] = {1, 9, 511, 513, 769};
    for (int t = 0; t < 4; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                    if (ks[ki] > 9 && ns[ni] > 49 && ms[mi] > 17) continue; /* keep the long ones few */
                    float beta = (mi + ni + ki) % 3 == 0 ? 0.0f : (mi + ni + ki) % 3 == 1 ? 1.0f : -0.7f;
                    one_case(t & 1, t >> 1, ms[mi], ns[ni], ks[ki], (ni % 2) ? 1.0f : 1.5f, beta, 1 + (int)(ki % 2));
                }
    /* the shapes the swap is chosen for: a batch (m <= 384) times a weight stored (out, in),
     * as GPT-2's qkv forward; more than 512 output rows per thread once swapped (the tall
     * path, whose B block is wider than 384 when k < 512); k exactly one block, and three
     * blocks with a short last one */
    one_case(false, true, 256, 2304, 768, 1.0f, 1.0f, 2);
    one_case(false, true, 96, 1030, 300, 1.0f, 0.0f, 2);
    one_case(false, true, 40, 2100, 200, 2.0f, 1.0f, 2);
    one_case(true, true, 64, 1500, 130, 1.0f, -0.5f, 2);
    one_case(false, true, 64, 300, 512, 1.0f, 0.5f, 2);
    one_case(false, true, 72, 400, 1100, 1.0f, 1.0f, 2);
    /* tall products with k < 512 and more than one widened B block: k = 200 makes the block
     * 960 wide. 1100 x 1000 on two threads shares rows out (550 each: tall, all 1000
     * columns, two blocks); on one thread both forms (1100 x 1000 and 1000 x 1100) have two */
    one_case(true, false, 1100, 1000, 200, 1.0f, 0.5f, 2);
    one_case(false, false, 1100, 1000, 200, 1.0f, 0.0f, 1);
    one_case(true, false, 1100, 1700, 30, 1.0f, 0.0f, 2);
    /* the swapped form through the dynamic column blocks (the 'fine' path: A of at most 1M
     * elements, read in place), with C transposed */
    one_case(false, true, 1200, 100, 300, 1.0f, 0.0f, 2);
    one_case(false, true, 1200, 100, 300, 1.5f, 1.0f, 2);
    /* the small form's own edges: its tiles (4 rows and 64-wide blocks with AVX-512, 6 x 16
     * with AVX2; n one short of, at and past 16, 32, 48, 64 and two blocks), transposed B
     * blocks of 1 to 8 rows past the last whole group of eight, and k up to SMALL_K;
     * attention's products at T = 64 and 256 */
    const int64_t sm[] = {1, 3, 4, 5, 6, 7, 64}, sn[] = {1, 8, 15, 16, 17, 31, 33, 63, 64, 65, 129},
                  sk[] = {2, 64, SMALL_K};
    for (int t = 0; t < 4; t++)
        for (size_t mi = 0; mi < sizeof sm / sizeof *sm; mi++)
            for (size_t ni = 0; ni < sizeof sn / sizeof *sn; ni++)
                for (size_t ki = 0; ki < sizeof sk / sizeof *sk; ki++) {
                    float beta = (mi + ni + ki) % 3 == 0 ? 0.0f : (mi + ni + ki) % 3 == 1 ? 1.0f : -0.7f;
                    one_case(t & 1, t >> 1, sm[mi], sn[ni], sk[ki], (ni % 2) ? 1.0f : 0.75f, beta, 1);
                }
    for (int t = 0; t < 4; t++) {
        one_case(t & 1, t >> 1, 64, 64, 64, 1.0f, t == 3 ? 1.0f : 0.0f, 2);
        one_case(t & 1, t >> 1, 256, 64, 256, 1.0f, 0.0f, 2);
    }
    /* Rows shared by a team with stealing (sgemm_threads' struct share): the same bits on
     * 1 to 4 threads, for an untransposed A (read in place, several B blocks each way) and a
     * transposed one (packed per panel), the swapped form, and a short last panel; then
     * again with thread 1 held back at the start, so that the others take its panels. */
    static const struct {
        bool ta, tb;
        int64_t m, n, k;
    } team[] = {
        {false, false, 1203, 500, 1100}, {true, false, 1500, 700, 200}, {false, true, 200, 2400, 600},
        {true, true, 999, 96, 64},       {true, false, 1300, 500, 700},
    };
    uint64_t stolen0 = g_stolen;
    for (int hold = 0; hold < 2; hold++) {
        g_share_hook = hold ? hold_thread1 : NULL;
        for (size_t i = 0; i < sizeof team / sizeof *team; i++)
            team_case(team[i].ta, team[i].tb, team[i].m, team[i].n, team[i].k);
    }
    g_share_hook = NULL;
    CHECK_MSG(g_stolen > stolen0, "no panel was taken from another thread's share, even with thread 1 held back");
    printf(SGEMM_TEST ": %llu row panels taken from another thread's share\n",
           (unsigned long long)(g_stolen - stolen0));
    CHECK(n_checked > 400 && n_small > 400);
    printf(SGEMM_TEST ": %d products, the swapped form bitwise equal to the plain one; %d of them also in "
                      "the small form, bitwise equal\n",
           n_checked, n_small);
    return it_test_report(SGEMM_TEST);
}
