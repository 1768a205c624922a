/* fp32 GEMM with AVX-512, the CPU backend's own, used in place of the BLAS's sgemm on CPUs
 * that have AVX-512F (gemm.c decides; IT_CPU_SGEMM=blas turns it off).
 *
 *   C (m, n) row-major, ldc  =  alpha * op(A) (m, k) @ op(B) (k, n)  +  beta * C
 *   op(A) = ta ? A^T : A with A row-major (lda), op(B) likewise (ldb): cblas_sgemm's
 *   CblasRowMajor contract; beta == 0 never reads C.
 *
 * Why our own: the BLAS on these machines is told to run its AVX2 (Haswell) kernel
 * (OPENBLAS_CORETYPE, set because that OpenBLAS predates the CPU), which reaches half of
 * what the CPU's 512-bit FMAs do. This file is the textbook Goto/BLIS structure:
 *
 *   each thread takes a block of C (whole 48-column or 8-row panels) and, for it:
 *   for each block of NC columns of op(B):
 *     for each block of KC rows of op(B) (the k dimension):
 *       pack the (KC, NC) block of op(B) into 48-wide panels (stays in L2)
 *       for each 8-row panel of op(A):
 *         pack the (8, KC) panel of a transposed op(A); an untransposed A is read in place
 *         for each 48-wide panel of the packed B:
 *           8x48 micro-kernel: 24 zmm accumulators, C += A-panel @ B-panel
 *
 * Each thread packs for itself: sharing the packed B would save packing, but the barriers
 * it needs every KC block, with a static split, cost more at these sizes (measured: 237
 * against 300+ GFLOP/s for 256x2304x768 on two threads). Rows are shared with stealing
 * (struct share), whose barrier per B block waits at most for the others' last panel.
 * Small products take an unpacked path instead (sgemm_small).
 *
 * Packing turns every transpose case into the same two panel layouts, so the micro-kernel
 * has one form. The transposing packs go through 8x8 register transposes.
 *
 * Determinism: each element of C is computed by one thread, summing k in the same order
 * (KC blocks in turn, k in order within each) whatever the thread count, so results are
 * bitwise the same for every number of threads. */
#include <limits.h>
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

#define AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))

enum {
    MR = 8,   /* rows of the micro-kernel's C tile */
    NR = 48,  /* columns: three zmm vectors */
    KC = 512, /* depth of a packed block: an A panel is 16 KB, a B panel 96 KB */
    NC = 384, /* columns of a packed B block: KC x NC x 4 = 768 KB */
    KC1 = KC, /* products up to this deep are one k block */
    KCB = KC, /* max(KC, KC1) */
    MA = 512, /* up to this many rows, a transposed op(A) is packed whole per k block: 1 MB */
};

/* ------------------------------------------------------------------ packing */

#define SGEMM_TARGET AVX512
#include "cpu/sgemm_pack.h"

/* The (mr <= 8, kc) panel of op(A) at rows i0, depth k0 -> pa[k * 8 + r]. */
AVX512 static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc, float *pa) {
    if (!ta) { /* op(A)[i][k] = a[i * lda + k]: rows of A become columns of the panel */
        pack_rows8(a + i0 * lda + k0, lda, mr, kc, pa, MR);
        return;
    }
    /* op(A)[i][k] = a[k * lda + i]: each k is a contiguous run of mr */
    __mmask8 mask = (__mmask8)((1u << mr) - 1u);
    for (int64_t k = 0; k < kc; k++) {
        const float *s = a + (k0 + k) * lda + i0;
        __m256 v = mr == MR ? _mm256_loadu_ps(s) : _mm256_maskz_loadu_ps(mask, s);
        _mm256_store_ps(pa + k * MR, v);
    }
}

/* The (kc, nr <= 48) panel of op(B) at depth k0, columns j0 -> pb[k * 48 + j]. */
AVX512 static void pack_b(bool tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr, float *pb) {
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
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1u);
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr <= 16 ? 0 : (1u << (nr - 16)) - 1u);
    __mmask16 m2 = (__mmask16)(nr >= 48 ? 0xffff : nr <= 32 ? 0 : (1u << (nr - 32)) - 1u);
    for (int64_t k = 0; k < kc; k++) {
        const float *s = b + (k0 + k) * ldb + j0;
        float *d = pb + k * NR;
        if (nr == NR) {
            _mm512_store_ps(d, _mm512_loadu_ps(s));
            _mm512_store_ps(d + 16, _mm512_loadu_ps(s + 16));
            _mm512_store_ps(d + 32, _mm512_loadu_ps(s + 32));
        } else {
            _mm512_store_ps(d, _mm512_maskz_loadu_ps(m0, s));
            _mm512_store_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            _mm512_store_ps(d + 32, _mm512_maskz_loadu_ps(m2, s + 32));
        }
    }
}

/* ------------------------------------------------------------------ micro-kernel */

/* C tile (mr <= 8, nr <= 16 * nv) at c = alpha * A-panel (8, kc) @ pb (kc, 48) + beta_eff * C,
 * where beta_eff is beta for the first k block (C not read when it is 0) and 1 after. nv,
 * a constant in each instance below, is how many of the panel's three 16-wide vectors the
 * tile uses: the last panel of a narrow product (64 columns = 48 + 16) does a third of
 * the work instead of all of it.
 *
 * The A panel is read one element at a time (broadcast), so it needs no particular layout:
 * ars == 0 means packed k-major (pa[k * 8 + r], from pack_a), otherwise eight rows ars
 * apart (pa[r * ars + k]): an untransposed A is then used where it lies, unpacked. */
AVX512 static inline __attribute__((always_inline)) void
kernel_tile(int nv, bool rows, bool tc, int64_t kc, const float *restrict pa, int64_t ars, const float *restrict pb,
            float *c, int64_t ldc, int mr, int nr, float alpha, float beta, bool first) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    __m512 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    __m512 c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    /* C's lines are fetched while the k loop runs. A row-major tile row is three or four
     * lines; when the epilogue reads them (beta != 0, or a later k block), all of them are
     * fetched, for writing. A write-only tile fetches only its rows' first lines: fetching
     * all of them there made the weight gradients slower. Measured on GPT-2 124M's step's
     * products replayed, old and new code alternating in one process (three runs, medians):
     * the layers' dX 5-8 ms less per step (of ~135), lm_head's dX 2-5 less (of ~61). */
    if (tc)
        for (int j = 0; j < nr; j++) _mm_prefetch((const char *)(c + j * ldc), _MM_HINT_T0);
    else
        for (int r = 0; r < mr; r++) {
            const char *row = (const char *)(c + r * ldc);
            if (first && beta == 0.0f) {
                _mm_prefetch(row, _MM_HINT_T0);
                continue;
            }
            _mm_prefetch(row, _MM_HINT_ET0);
            if (nv > 1) _mm_prefetch(row + 64, _MM_HINT_ET0);
            if (nv > 2) _mm_prefetch(row + 128, _MM_HINT_ET0);
            _mm_prefetch(row + 4 * (16 * nv) - 4, _MM_HINT_ET0); /* the last line, when the row is not aligned */
        }
#define IT_ROW(r)                                                                                                      \
    do {                                                                                                               \
        __m512 av = _mm512_set1_ps(rows ? pa[r * ars + k] : pa[r]);                                                    \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                                    \
        if (nv > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                        \
        if (nv > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                                        \
    } while (0)
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(pb);
        __m512 b1 = nv > 1 ? _mm512_load_ps(pb + 16) : b0, b2 = nv > 2 ? _mm512_load_ps(pb + 32) : b0;
        IT_ROW(0);
        IT_ROW(1);
        IT_ROW(2);
        IT_ROW(3);
        IT_ROW(4);
        IT_ROW(5);
        IT_ROW(6);
        IT_ROW(7);
        if (!rows) pa += MR;
        pb += NR;
    }
#undef IT_ROW
    __m512 acc[MR][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
                         {c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
    bool read = !first || beta != 0.0f;
    if (tc) {
        /* The tile is C's (nr, mr) block at c, C[j * ldc + r]: each 16-column vector of
         * accumulators goes through two 8x8 register transposes into 16 rows of eight.
         * The arithmetic is the row-major epilogue's, element for element. */
        __m256 va8 = _mm256_set1_ps(alpha), vb8 = _mm256_set1_ps(first ? beta : 1.0f);
        __mmask8 mm = (__mmask8)((1u << mr) - 1u);
        for (int v = 0; v < nv; v++) {
            int cnt = nr - 16 * v;
            if (cnt <= 0) break;
            __m256 lo[8], hi[8];
            for (int r = 0; r < MR; r++) {
                lo[r] = _mm512_castps512_ps256(acc[r][v]);
                hi[r] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][v]), 1));
            }
            transpose8(lo);
            transpose8(hi);
            for (int l = 0; l < 16 && l < cnt; l++) {
                float *row = c + (16 * v + l) * ldc;
                __m256 x = _mm256_mul_ps(va8, l < 8 ? lo[l] : hi[l - 8]);
                if (mr == MR) {
                    if (read) x = _mm256_fmadd_ps(vb8, _mm256_loadu_ps(row), x);
                    _mm256_storeu_ps(row, x);
                } else {
                    if (read) x = _mm256_fmadd_ps(vb8, _mm256_maskz_loadu_ps(mm, row), x);
                    _mm256_mask_storeu_ps(row, mm, x);
                }
            }
        }
        return;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(first ? beta : 1.0f);
    __mmask16 mk[3];
    for (int v = 0; v < 3; v++) {
        int cnt = nr - 16 * v;
        mk[v] = (__mmask16)(cnt >= 16 ? 0xffff : cnt <= 0 ? 0 : (1u << cnt) - 1u);
    }
    for (int r = 0; r < mr; r++) {
        float *row = c + r * ldc;
        for (int v = 0; v < 3; v++) {
            if (mk[v] == 0) break;
            __m512 x = _mm512_mul_ps(va, acc[r][v]);
            if (mk[v] == 0xffff) {
                if (read) x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(row + 16 * v), x);
                _mm512_storeu_ps(row + 16 * v, x);
            } else {
                if (read) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[v], row + 16 * v), x);
                _mm512_mask_storeu_ps(row + 16 * v, mk[v], x);
            }
        }
    }
}

#define IT_KERNEL(name, nv, rows, tc)                                                                                  \
    AVX512 static void name(int64_t kc, const float *pa, int64_t ars, const float *pb, float *c, int64_t ldc, int mr,  \
                            int nr, float alpha, float beta, bool first) {                                             \
        kernel_tile(nv, rows, tc, kc, pa, ars, pb, c, ldc, mr, nr, alpha, beta, first);                                \
    }
/* the three widths of one A layout (rows) and one C layout (tc) */
#define IT_KERNELS(sfx, rows, tc)                                                                                      \
    IT_KERNEL(kernel_8x16##sfx, 1, rows, tc)                                                                           \
    IT_KERNEL(kernel_8x32##sfx, 2, rows, tc)                                                                           \
    IT_KERNEL(kernel_8x48##sfx, 3, rows, tc)
IT_KERNELS(, false, false)
IT_KERNELS(_rows, true, false)
IT_KERNELS(_tc, false, true)
IT_KERNELS(_rows_tc, true, true)
#undef IT_KERNELS
#undef IT_KERNEL

typedef void (*kernel_fn)(int64_t, const float *, int64_t, const float *, float *, int64_t, int, int, float, float,
                          bool);

/* [tc][rows][nv - 1] */
static const kernel_fn g_kernels[2][2][3] = {
    {{kernel_8x16, kernel_8x32, kernel_8x48}, {kernel_8x16_rows, kernel_8x32_rows, kernel_8x48_rows}},
    {{kernel_8x16_tc, kernel_8x32_tc, kernel_8x48_tc}, {kernel_8x16_rows_tc, kernel_8x32_rows_tc, kernel_8x48_rows_tc}},
};

/* One tile; tc: C is stored transposed (the tile at c is C^T's, see kernel_tile). */
static inline void kernel(bool tc, int64_t kc, const float *pa, int64_t ars, const float *pb, float *c, int64_t ldc,
                          int mr, int nr, float alpha, float beta, bool first) {
    g_kernels[tc][ars != 0][nr > 32 ? 2 : nr > 16 ? 1 : 0](kc, pa, ars, pb, c, ldc, mr, nr, alpha, beta, first);
}

/* ------------------------------------------------------------------ small products */

/* Attention's per-head products (48 of 64 x 64 x 64 per call at GPT-2's T = 64, one per
 * thread at a time inside gemm.c's batch loop) are too small for packing to pay: packing
 * both operands, and the 48-wide tiles (64 = 48 + 16), cost more than the FMAs. Here no
 * operand is packed: a 4-row tile of C up to 64 wide (four zmm accumulators per row, 16 in
 * all) reads op(A) where it lies, one broadcast per row and k (A[i][k] or A[k][i] alike),
 * and op(B)'s rows where they lie. Only a transposed B goes through a transpose, into a
 * (k, 64) block on the stack. Measured on 48 such products on two threads, data in cache:
 * 300 GFLOP/s (250 with B transposed), where OpenBLAS's AVX2 kernel gives 140 and the
 * packed path 120-130.
 *
 * The bits are the packed path's: each element of C is one accumulator summing k in order
 * from zero with FMAs, then alpha * acc (+ beta * C, an FMA), as kernel_tile does when k
 * fits one block (SMALL_K <= KC). test_sgemm_forms holds the two to that. */
enum {
    SMR = 4,       /* rows of a small tile */
    SNR = 64,      /* columns: four zmm vectors */
    SMALL_K = 256, /* deepest product taken here: a transposed B's block is SMALL_K x SNR floats */
};
_Static_assert((int)SMALL_K <= (int)KC, "one k block, as the packed path sums");

AVX512 static inline __attribute__((always_inline)) void small_tile(int nv, bool ta, int64_t k, const float *restrict a,
                                                                    int64_t lda, const float *restrict b, int64_t ldb,
                                                                    float *c, int64_t ldc, int mr, int nr, float alpha,
                                                                    float beta) {
    __mmask16 mk[4];
    for (int v = 0; v < 4; v++) {
        int cnt = nr - 16 * v;
        mk[v] = (__mmask16)(cnt >= 16 ? 0xffff : cnt <= 0 ? 0 : (1u << cnt) - 1u);
    }
    /* op(A)'s row r at a + r * rs, its k-th element ks further; rows past mr read the last
     * real row again (their sums are not stored) */
    int64_t ks = ta ? lda : 1, rs = ta ? 1 : lda;
    const float *a0 = a, *a1 = a + (mr > 1 ? 1 : 0) * rs, *a2 = a + (mr > 2 ? 2 : mr - 1) * rs,
                *a3 = a + (mr > 3 ? 3 : mr - 1) * rs;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
#define IT_SROW(r)                                                                                                     \
    do {                                                                                                               \
        __m512 av = _mm512_set1_ps(a##r[kk * ks]);                                                                     \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                                    \
        if (nv > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                        \
        if (nv > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                                        \
        if (nv > 3) c##r##3 = _mm512_fmadd_ps(av, b3, c##r##3);                                                        \
    } while (0)
    for (int64_t kk = 0; kk < k; kk++) {
        /* the last of the nv vectors may be short: masked, so nothing past the row is read */
        const float *pb = b + kk * ldb;
        __m512 b0 = nv == 1 ? _mm512_maskz_loadu_ps(mk[0], pb) : _mm512_loadu_ps(pb);
        __m512 b1 = nv == 2 ? _mm512_maskz_loadu_ps(mk[1], pb + 16) : nv > 2 ? _mm512_loadu_ps(pb + 16) : b0;
        __m512 b2 = nv == 3 ? _mm512_maskz_loadu_ps(mk[2], pb + 32) : nv > 3 ? _mm512_loadu_ps(pb + 32) : b0;
        __m512 b3 = nv == 4 ? _mm512_maskz_loadu_ps(mk[3], pb + 48) : b0;
        IT_SROW(0);
        IT_SROW(1);
        IT_SROW(2);
        IT_SROW(3);
    }
#undef IT_SROW
    __m512 acc[SMR][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}, {c30, c31, c32, c33}};
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) {
            float *row = c + r * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(va, acc[r][v]);
            if (mk[v] == 0xffff) { /* masked stores are slow on some cores: only for the short vector */
                if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(row), x);
                _mm512_storeu_ps(row, x);
            } else {
                if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[v], row), x);
                _mm512_mask_storeu_ps(row, mk[v], x);
            }
        }
}

#define IT_SMALL(nv)                                                                                                   \
    AVX512 static void small_tile##nv(bool ta, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,    \
                                      float *c, int64_t ldc, int mr, int nr, float alpha, float beta) {                \
        small_tile(nv, ta, k, a, lda, b, ldb, c, ldc, mr, nr, alpha, beta);                                            \
    }
IT_SMALL(1)
IT_SMALL(2)
IT_SMALL(3)
IT_SMALL(4)
#undef IT_SMALL

typedef void (*small_fn)(bool, int64_t, const float *, int64_t, const float *, int64_t, float *, int64_t, int, int,
                         float, float);
static const small_fn g_small[4] = {small_tile1, small_tile2, small_tile3, small_tile4};

/* C (m, n) = alpha op(A) op(B) + beta C on this thread, k <= SMALL_K: 64-column blocks of C,
 * 4-row tiles down each. */
AVX512 static void sgemm_small(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    float bt[SMALL_K * SNR] __attribute__((aligned(64)));
    for (int64_t j = 0; j < n; j += SNR) {
        int nr = (int)min64(SNR, n - j);
        const float *pb = b + j;
        int64_t lb = ldb;
        if (tb) { /* op(B)[k][j] = b[j * ldb + k]: eight rows of B at a time become columns */
            for (int g = 0; g < nr; g += 8) pack_rows8(b + (j + g) * ldb, ldb, nr - g < 8 ? nr - g : 8, k, bt + g, SNR);
            pb = bt;
            lb = SNR;
        }
        small_fn tile = g_small[(nr + 15) / 16 - 1];
        for (int64_t i = 0; i < m; i += SMR)
            tile(ta, k, ta ? a + i : a + i * lda, lda, pb, lb, c + i * ldc + j, ldc, (int)min64(SMR, m - i), nr, alpha,
                 beta);
    }
}

/* ------------------------------------------------------------------ driver */

/* The swapped form (sgemm_product) while the batch fits one block of columns (m <= NC: W
 * is read once). Measured on GPT-2 124M's products at B x T = 256, old and new code
 * alternating in one process: lm_head's forward 66-75 -> 63-64 ms; the layers' forwards
 * unchanged (the kernel then waits for W about as long as the pack did). */
#define SGEMM_SWAP_ROWS NC
#define SGEMM_ISA IT_CPU_SGEMM_AVX512
#include "cpu/sgemm_driver.h"

bool it_cpu_sgemm_avx512_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return sgemm_product(swap, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool it_cpu_sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return sgemm_product(-1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

bool it_cpu_sgemm_avx512_usable(void) { return sgemm_mode() != 0; }

#else /* not x86-64 with GCC or Clang */

bool it_cpu_sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
        (void)c, (void)ldc;
    return false;
}

bool it_cpu_sgemm_avx512_usable(void) { return false; }

bool it_cpu_sgemm_avx512_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)swap;
    return it_cpu_sgemm_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif
