/* fp32 GEMM with AVX2 and FMA, the CPU backend's own on CPUs without AVX-512 (gemm.c
 * decides; IT_CPU_SGEMM=blas turns it off, =avx2 chooses it on an AVX-512 CPU too).
 *
 *   C (m, n) row-major, ldc  =  alpha * op(A) (m, k) @ op(B) (k, n)  +  beta * C
 *   op(A) = ta ? A^T : A with A row-major (lda), op(B) likewise (ldb): cblas_sgemm's
 *   CblasRowMajor contract; beta == 0 never reads C.
 *
 * The structure is sgemm_avx512.c's, and the loop nests and threads are the same code
 * (sgemm_driver.h): each thread takes whole 16-column or 6-row panels of C, an untransposed
 * A is read where it lies, a batch's rows times a weight stored (out, in) is computed as
 * C^T = W X^T so that the weight is the A side, rows are shared with stealing. What differs
 * is the tile: 16 ymm registers hold a 6 x 16 block of C in 12 accumulators, with two for B
 * and one for the broadcast element of A. A k step loads two vectors of B and broadcasts six
 * elements of A for twelve FMAs. On a Zen 3 core (two 256-bit FMA pipes, 102.5 GFLOP/s
 * measured with independent FMAs) this tile, B from L2 and A in place, ran at 100-101.6
 * GFLOP/s in a standalone loop, where OpenBLAS's Haswell kernel gives 93 on a 2048^3
 * product; a 4 x 24 tile (three vectors of B, four broadcasts) ran at 73.
 *
 * The blocks fit a 512 KB L2: KC x NC of op(B) is 256 KB. GPT-2 124M's step (B=4 T=64),
 * alternating runs: 512 x 128 blocks 1239 and 1236 ms, 256 x 256 ones 1326 and 1278.
 * Products up to KC1 = 768 deep are one k block (768 x 128, 384 KB), so that a layer's
 * forward (k = 768) writes each tile of C once instead of writing it, reading it back and
 * writing it again: the step's forwards 367-379 -> 348-354 ms, the step 1219-1241 -> 1195-1198
 * (three alternating pairs); the deeper input gradients keep 512-deep blocks, which ran
 * 10% faster than 768-deep ones for 256 x 768 x 3072, and the other cases did not move
 * beyond the host's noise.
 *
 * Determinism: each element of C is computed by one thread, summing k in the same order (k
 * blocks in turn, k in order within each; the blocks depend on k alone, sgemm_driver.h's
 * k_block) whatever the thread count, so results are bitwise
 * the same for every number of threads. They are not the AVX-512 kernel's bits: the k
 * blocks differ. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/sgemm_select.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

enum {
    MR = 6,    /* rows of the micro-kernel's C tile */
    NR = 16,   /* columns: two ymm vectors */
    KC = 512,  /* depth of a packed block: a B panel is 32 KB */
    NC = 128,  /* columns of a packed B block: KC x NC x 4 = 256 KB */
    KC1 = 768, /* products up to this deep are one k block, of up to KC1 x NC (384 KB) */
    KCB = 768, /* max(KC, KC1) */
    MA = 512,  /* up to this many rows, a transposed op(A) is packed whole per k block: 1 MB */
};

#define SGEMM_TARGET AVX2
#include "cpu/sgemm_pack.h"

/* The (mr <= 6, kc) panel of op(A) at rows i0, depth k0 -> pa[k * 6 + r], rows past mr zero. */
AVX2 static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc, float *pa) {
    if (!ta) { /* op(A)[i][k] = a[i * lda + k] */
        for (int64_t k = 0; k < kc; k++)
            for (int r = 0; r < MR; r++) pa[k * MR + r] = r < mr ? a[(i0 + r) * lda + k0 + k] : 0.0f;
        return;
    }
    /* op(A)[i][k] = a[k * lda + i]: each k is a contiguous run of mr */
    for (int64_t k = 0; k < kc; k++) {
        const float *s = a + (k0 + k) * lda + i0;
        float *d = pa + k * MR;
        if (mr == MR) {
            _mm_storeu_ps(d, _mm_loadu_ps(s));
            _mm_storel_pi((__m64 *)(d + 4), _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(s + 4)));
        } else {
            for (int r = 0; r < MR; r++) d[r] = r < mr ? s[r] : 0.0f;
        }
    }
}

/* The (kc, nr <= 16) panel of op(B) at depth k0, columns j0 -> pb[k * 16 + j], columns past
 * nr zero. */
AVX2 static void pack_b(bool tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr, float *pb) {
    if (tb) { /* op(B)[k][j] = b[j * ldb + k]: groups of 8 rows of B, transposed */
        for (int g = 0; g < NR / 8; g++) {
            int rows = nr - g * 8;
            rows = rows < 0 ? 0 : rows > 8 ? 8 : rows;
            if (rows == 0) {
                for (int64_t k = 0; k < kc; k++) _mm256_store_ps(pb + k * NR + g * 8, _mm256_setzero_ps());
                continue;
            }
            pack_rows8(b + (j0 + g * 8) * ldb + k0, ldb, rows, kc, pb + g * 8, NR);
        }
        return;
    }
    /* op(B)[k][j] = b[k * ldb + j]: each k is a contiguous run of nr */
    for (int64_t k = 0; k < kc; k++) {
        const float *s = b + (k0 + k) * ldb + j0;
        float *d = pb + k * NR;
        if (nr == NR) {
            _mm256_store_ps(d, _mm256_loadu_ps(s));
            _mm256_store_ps(d + 8, _mm256_loadu_ps(s + 8));
        } else {
            for (int j = 0; j < NR; j++) d[j] = j < nr ? s[j] : 0.0f;
        }
    }
}

/* ------------------------------------------------------------------ micro-kernel */

/* The (mr, nr) corner of a tile's accumulators to C through memory, element by element:
 * alpha * acc, then + bb * C in one FMA when read (the two roundings of the vector
 * epilogues, so a partial tile has the bits of a whole one). tc: the tile is C^T's, element
 * (r, j) at c[j * ldc + r]. For partial tiles, and the transposed form's short panels. */
AVX2 static void store_tile_slow(__m256 acc[MR][2], float *c, int64_t ldc, bool tc, int mr, int nr, float alpha,
                                 float bb, bool read) {
    float t[MR][NR];
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(t[r], acc[r][0]);
        _mm256_storeu_ps(t[r] + 8, acc[r][1]);
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float *p = tc ? c + j * ldc + r : c + r * ldc + j;
            float x = alpha * t[r][j];
            *p = read ? fmaf(bb, *p, x) : x;
        }
}

/* C tile (mr <= 6, nr <= 8 * nv) at c = alpha * A-panel (6, kc) @ pb (kc, 16) + beta_eff * C,
 * where beta_eff is beta for the first k block (C not read when it is 0) and 1 after. nv (1
 * or 2, a constant in each instance) is how many of the panel's two 8-wide vectors the tile
 * uses. The A panel is read one element at a time (broadcast): ars == 0 means packed
 * k-major (pa[k * 6 + r]), otherwise six rows ars apart (pa[r * ars + k]), an untransposed A
 * where it lies. tc: the tile is C^T's, element (r, j) at c[j * ldc + r] (the swapped form).
 *
 * Every element is alpha * acc, then + beta_eff * C with one FMA, in every branch of the
 * epilogue, so that a partial tile has the bits of a whole one. */
AVX2 static inline __attribute__((always_inline)) void
kernel_tile(int nv, bool rows, bool tc, int64_t kc, const float *restrict pa, int64_t ars, const float *restrict pb,
            float *c, int64_t ldc, int mr, int nr, float alpha, float beta, bool first) {
    /* alpha and beta wait in memory: the k loop needs all 16 vector registers, and held in
     * two of them they pushed one B vector out to be loaded again for every FMA (80 against
     * 100 GFLOP/s on a core) */
    volatile float ab[2] = {alpha, beta};
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    /* C's first lines, fetched while the k loop runs */
    if (tc)
        for (int j = 0; j < nr; j++) _mm_prefetch((const char *)(c + j * ldc), _MM_HINT_T0);
    else
        for (int r = 0; r < mr; r++) _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
#define IT_ROW(r)                                                                                                      \
    do {                                                                                                               \
        __m256 av = _mm256_broadcast_ss(rows ? pa + r * ars + k : pa + r);                                             \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                                    \
        if (nv > 1) c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                        \
    } while (0)
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(pb), b1 = nv > 1 ? _mm256_load_ps(pb + 8) : b0;
        IT_ROW(0);
        IT_ROW(1);
        IT_ROW(2);
        IT_ROW(3);
        IT_ROW(4);
        IT_ROW(5);
        if (!rows) pa += MR;
        pb += NR;
    }
#undef IT_ROW
    __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    alpha = ab[0];
    beta = ab[1];
    bool read = !first || beta != 0.0f;
    float bb = first ? beta : 1.0f;
    if (tc && mr == MR) {
        /* each 8-column vector of accumulators (six rows, two zero rows below) goes through
         * an 8x8 register transpose into eight columns of C^T, i.e. eight rows of C, six long */
        __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(bb);
        for (int v = 0; v < nv; v++) {
            int cnt = nr - 8 * v;
            __m256 t[8] = {acc[0][v], acc[1][v], acc[2][v],           acc[3][v],
                           acc[4][v], acc[5][v], _mm256_setzero_ps(), _mm256_setzero_ps()};
            transpose8(t);
            for (int l = 0; l < 8 && l < cnt; l++) {
                float *row = c + (8 * v + l) * ldc;
                __m128 lo = _mm_mul_ps(va, _mm256_castps256_ps128(t[l]));
                __m128 hi = _mm_mul_ps(va, _mm256_extractf128_ps(t[l], 1));
                if (read) {
                    lo = _mm_fmadd_ps(vb, _mm_loadu_ps(row), lo);
                    hi = _mm_fmadd_ps(vb, _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(row + 4)), hi);
                }
                _mm_storeu_ps(row, lo);
                _mm_storel_pi((__m64 *)(row + 4), hi);
            }
        }
        return;
    }
    if (tc || nr < 8 * nv) {
        store_tile_slow(acc, c, ldc, tc, mr, nr, alpha, bb, read); /* a short tile */
        return;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(bb);
    for (int r = 0; r < mr; r++) {
        float *row = c + r * ldc;
        for (int v = 0; v < nv; v++) {
            __m256 x = _mm256_mul_ps(va, acc[r][v]);
            if (read) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row + 8 * v), x);
            _mm256_storeu_ps(row + 8 * v, x);
        }
    }
}

#define IT_KERNEL(name, nv, rows, tc)                                                                                  \
    AVX2 static void name(int64_t kc, const float *pa, int64_t ars, const float *pb, float *c, int64_t ldc, int mr,    \
                          int nr, float alpha, float beta, bool first) {                                               \
        kernel_tile(nv, rows, tc, kc, pa, ars, pb, c, ldc, mr, nr, alpha, beta, first);                                \
    }
/* the two widths of one A layout (rows) and one C layout (tc) */
#define IT_KERNELS(sfx, rows, tc)                                                                                      \
    IT_KERNEL(kernel_6x8##sfx, 1, rows, tc)                                                                            \
    IT_KERNEL(kernel_6x16##sfx, 2, rows, tc)
IT_KERNELS(, false, false)
IT_KERNELS(_rows, true, false)
IT_KERNELS(_tc, false, true)
IT_KERNELS(_rows_tc, true, true)
#undef IT_KERNELS
#undef IT_KERNEL

typedef void (*kernel_fn)(int64_t, const float *, int64_t, const float *, float *, int64_t, int, int, float, float,
                          bool);

/* [tc][rows][nv - 1] */
static const kernel_fn g_kernels[2][2][2] = {
    {{kernel_6x8, kernel_6x16}, {kernel_6x8_rows, kernel_6x16_rows}},
    {{kernel_6x8_tc, kernel_6x16_tc}, {kernel_6x8_rows_tc, kernel_6x16_rows_tc}},
};

/* One tile; tc: C is stored transposed (the tile at c is C^T's, see kernel_tile). */
static inline void kernel(bool tc, int64_t kc, const float *pa, int64_t ars, const float *pb, float *c, int64_t ldc,
                          int mr, int nr, float alpha, float beta, bool first) {
    g_kernels[tc][ars != 0][nr > 8 ? 1 : 0](kc, pa, ars, pb, c, ldc, mr, nr, alpha, beta, first);
}

/* ------------------------------------------------------------------ small products */

/* Attention's per-head products (48 of 64 x 64 x 64 per call at GPT-2's T = 64, one per
 * thread at a time) are too small for packing to pay. As sgemm_avx512.c's sgemm_small: no
 * operand is packed, a 6 x 16 tile of C reads op(A) where it lies (one broadcast per row and
 * k, A[i][k] or A[k][i] alike) and op(B)'s rows where they lie; only a transposed B goes
 * through a transpose, 16 columns at a time, into a (k, 16) block on the stack.
 *
 * The bits are the packed path's: each element of C is one accumulator summing k in order
 * from zero with FMAs, then alpha * acc (+ beta * C, an FMA), as kernel_tile does when k
 * fits one block (SMALL_K <= KC). test_sgemm_forms_avx2 holds the two to that. */
enum {
    SMALL_K = 256, /* deepest product taken here */
    SNR = 64,      /* widest product that always takes this path on one thread (as sgemm_avx512.c) */
};
_Static_assert((int)SMALL_K <= (int)KC, "one k block, as the packed path sums");

/* C tile (mr <= 6, nr <= 16) at c: op(A)'s rows at a (row r at a + r * rs, its k-th element
 * ks further), op(B)'s k-th row of 16 at b + k * ldb (nr of them read). */
AVX2 static void small_tile(int64_t k, const float *restrict a, int64_t rs, int64_t ks, const float *restrict b,
                            int64_t ldb, float *c, int64_t ldc, int mr, int nr, float alpha, float beta) {
    volatile float ab[2] = {alpha, beta}; /* off the registers during the k loop, see kernel_tile */
    /* rows past mr read the last real row again (their sums are not stored) */
    const float *a0 = a, *a1 = a + (mr > 1 ? 1 : 0) * rs, *a2 = a + (mr > 2 ? 2 : mr - 1) * rs,
                *a3 = a + (mr > 3 ? 3 : mr - 1) * rs, *a4 = a + (mr > 4 ? 4 : mr - 1) * rs,
                *a5 = a + (mr > 5 ? 5 : mr - 1) * rs;
    /* the columns past nr are not read: masked loads, lanes past nr zero */
    static const int32_t ones[24] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                     -1, -1, -1, -1, 0,  0,  0,  0,  0,  0,  0,  0};
    __m256i m0 = _mm256_loadu_si256((const __m256i *)(ones + 16 - (nr < 8 ? nr : 8)));
    __m256i m1 = _mm256_loadu_si256((const __m256i *)(ones + 16 - (nr > 8 ? nr - 8 : 0)));
    bool full = nr == 16;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#define IT_SROW(r)                                                                                                     \
    do {                                                                                                               \
        __m256 av = _mm256_broadcast_ss(a##r + kk * ks);                                                               \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                                    \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                                    \
    } while (0)
    for (int64_t kk = 0; kk < k; kk++) {
        const float *pb = b + kk * ldb;
        __m256 b0 = full ? _mm256_loadu_ps(pb) : _mm256_maskload_ps(pb, m0);
        __m256 b1 = full ? _mm256_loadu_ps(pb + 8) : _mm256_maskload_ps(pb + 8, m1);
        IT_SROW(0);
        IT_SROW(1);
        IT_SROW(2);
        IT_SROW(3);
        IT_SROW(4);
        IT_SROW(5);
    }
#undef IT_SROW
    __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    alpha = ab[0];
    beta = ab[1];
    if (full) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < 2; v++) {
                float *row = c + r * ldc + 8 * v;
                __m256 x = _mm256_mul_ps(va, acc[r][v]);
                if (beta != 0.0f) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row), x);
                _mm256_storeu_ps(row, x);
            }
        return;
    }
    store_tile_slow(acc, c, ldc, false, mr, nr, alpha, beta, beta != 0.0f);
}

/* C (m, n) = alpha op(A) op(B) + beta C on this thread, k <= SMALL_K: 16-column strips of C,
 * 6-row tiles down each. */
AVX2 static void sgemm_small(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    float bt[SMALL_K * NR] __attribute__((aligned(32)));
    int64_t ks = ta ? lda : 1, rs = ta ? 1 : lda;
    for (int64_t j = 0; j < n; j += NR) {
        int nr = (int)(n - j < NR ? n - j : NR);
        const float *pb = b + j;
        int64_t lb = ldb;
        if (tb) { /* op(B)[k][j] = b[j * ldb + k]: eight rows of B at a time become columns */
            for (int g = 0; g < nr; g += 8) pack_rows8(b + (j + g) * ldb, ldb, nr - g < 8 ? nr - g : 8, k, bt + g, NR);
            pb = bt;
            lb = NR;
        }
        for (int64_t i = 0; i < m; i += MR)
            small_tile(k, ta ? a + i : a + i * lda, rs, ks, pb, lb, c + i * ldc + j, ldc,
                       (int)(m - i < MR ? m - i : MR), nr, alpha, beta);
    }
}

/* ------------------------------------------------------------------ driver */

/* The swapped form (sgemm_product) while the batch fits two blocks of columns, so that W is
 * read at most twice (once from DRAM, the second time from L3 for a layer's weight). GPT-2
 * 124M's step, B x T = 256: the forwards went from 158-164 to 170-177 GFLOP/s with it, the
 * step from 1278 to 1227-1239 ms. */
#define SGEMM_SWAP_ROWS (2 * NC)
#define SGEMM_ISA IT_CPU_SGEMM_AVX2
#include "cpu/sgemm_driver.h"

bool it_cpu_sgemm_avx2_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return sgemm_product(swap, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool it_cpu_sgemm_avx2(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return sgemm_product(-1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool it_cpu_sgemm_avx2_usable(void) { return sgemm_mode() != 0; }

#else /* not x86-64 with GCC or Clang */

bool it_cpu_sgemm_avx2(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
        (void)c, (void)ldc;
    return false;
}

bool it_cpu_sgemm_avx2_usable(void) { return false; }

bool it_cpu_sgemm_avx2_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)swap;
    return it_cpu_sgemm_avx2(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif
