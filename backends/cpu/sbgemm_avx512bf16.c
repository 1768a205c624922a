/* bf16 GEMM on AVX512_BF16 (vdpbf16ps), the CPU backend's gemm for bf16 operands on CPUs
 * that have it (gemm.c decides; IT_CPU_SBGEMM, sgemm_select.h, forces either path).
 *
 *   C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C
 *   A, B bf16, row-major with lda / ldb (op(X) = tx ? X^T : X); C fp32 or bf16, row-major
 *   with ldc; beta == 0 never reads C.
 *
 * Each element of C is summed in fp32 from zero per k block (KC deep, in order), k taken in
 * pairs: vdpbf16ps adds, per fp32 lane, the exact products of the pair's odd element and
 * then of its even element, each rounded to nearest even. Then x = alpha * acc (+ beta * C
 * or, after the first k block, + 1 * C: an FMA), as the fp32 kernels do. A bf16 C is
 * rounded once, to nearest even (it_sc_fp32_to_bf16's rule, NaN kept quiet), at the end:
 * a product deeper than one k block sums its blocks in an fp32 copy of its block of C.
 * vdpbf16ps treats denormal inputs and results as zero (the widening fp32 path does not).
 *
 * Structure (Goto/BLIS): C is cut into units (a block of rows by a block of columns), each
 * computed by one thread; per unit and k block, op(B)'s block is packed into 48-wide panels
 * of k pairs (pb[p][j] = op(B)[2p][j] | op(B)[2p+1][j] << 16), and for each 8-row panel of
 * op(A) the micro-kernel (8 x 48, 24 zmm accumulators) broadcasts op(A)'s pairs. An
 * untransposed A is read in place (its k pairs are adjacent); a transposed one is packed.
 * When several row blocks would each pack the same op(B), it is packed once, whole, first.
 * A transposed op(B) is packed with 16-row gathers (a pair is one dword of a row of B). A
 * product with both operands transposed is computed as C^T = op(B)^T op(A)^T, which has
 * none; its tiles are stored into C transposed (gathered from the tile by columns). Which
 * thread computes a unit, and the units' shapes, do not change the bits: results are the
 * same for every thread count. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/sgemm_select.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define BF16T __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma")))

enum {
    MR = 8,   /* rows of the micro-kernel's C tile */
    NR = 48,  /* columns: three zmm vectors of fp32 accumulators */
    KC = 768, /* depth of a k block (even): GPT-2's 768-deep products are one block */
    NC = 384, /* widest block of columns of a unit: a packed B block is KC x NC x 2 = 576 KB */
    MB = 256, /* most rows of a unit */
};

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ scratch */

/* Buffers kept between calls (cpu_scratch.h); concurrent callers are gemm.c's batch loop. */
#include "cpu/cpu_scratch.h"

/* ------------------------------------------------------------------ rounding */

/* fp32 -> bf16 in each lane's low half, as it_sc_fp32_to_bf16: to nearest even, NaN quiet. */
BF16T static inline __m512i round_bf16(__m512 v) {
    __m512i x = _mm512_castps_si512(v), hi = _mm512_srli_epi32(x, 16);
    __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ------------------------------------------------------------------ packing */

/* The (kc, nr <= 48) block of op(B) at depth k0 (even), columns j0, as pairs:
 * pb[p * NR + j] = op(B)[k0 + 2p][j0 + j] | op(B)[k0 + 2p + 1][j0 + j] << 16, zero past kc
 * and nr. */
BF16T static void pack_b(bool tb, const uint16_t *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                         uint32_t *pb) {
    int64_t kp = (kc + 1) / 2;
    if (tb && (int64_t)NR * ldb <= INT_MAX / 2) {
        /* op(B)[k][j] = b[j * ldb + k]: a pair is one dword of B's row j, 16 rows gathered
         * at a time (indices in bf16 units, scale 2); the pair past an odd kc by hand */
        __m512i idx[3];
        __mmask16 mk[3];
        for (int v = 0; v < 3; v++) {
            int cnt = nr - 16 * v;
            mk[v] = (__mmask16)(cnt >= 16 ? 0xffff : cnt <= 0 ? 0 : (1u << cnt) - 1u);
            idx[v] = _mm512_mullo_epi32(
                _mm512_add_epi32(_mm512_set1_epi32(16 * v),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                _mm512_set1_epi32((int)ldb));
        }
        const uint16_t *base = b + j0 * ldb + k0;
        int64_t full = kc / 2;
        for (int64_t p = 0; p < full; p++)
            for (int v = 0; v < 3; v++)
                _mm512_store_si512((void *)(pb + p * NR + 16 * v),
                                   _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk[v], idx[v],
                                                               (const void *)(base + 2 * p), 2));
        if (full < kp)
            for (int j = 0; j < NR; j++) pb[full * NR + j] = j < nr ? base[j * ldb + 2 * full] : 0;
        return;
    }
    if (tb) { /* (leading dimensions too long for 32-bit gather indices) */
        for (int j = 0; j < NR; j++) {
            if (j >= nr) {
                for (int64_t p = 0; p < kp; p++) pb[p * NR + j] = 0;
                continue;
            }
            const uint16_t *row = b + (j0 + j) * ldb + k0;
            int64_t p = 0;
            for (; 2 * p + 1 < kc; p++) {
                uint32_t w;
                memcpy(&w, row + 2 * p, sizeof w);
                pb[p * NR + j] = w;
            }
            if (p < kp) pb[p * NR + j] = row[2 * p];
        }
        return;
    }
    /* op(B)[k][j] = b[k * ldb + j]: two rows of B interleaved */
    __mmask16 mk[3];
    for (int v = 0; v < 3; v++) {
        int cnt = nr - 16 * v;
        mk[v] = (__mmask16)(cnt >= 16 ? 0xffff : cnt <= 0 ? 0 : (1u << cnt) - 1u);
    }
    for (int64_t p = 0; p < kp; p++) {
        const uint16_t *r0 = b + (k0 + 2 * p) * ldb + j0, *r1 = r0 + ldb;
        bool has1 = 2 * p + 1 < kc;
        for (int v = 0; v < 3; v++) {
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk[v], r0 + 16 * v));
            __m512i hi =
                has1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk[v], r1 + 16 * v)) : _mm512_setzero_si512();
            _mm512_store_si512((void *)(pb + p * NR + 16 * v), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* A transposed op(A)'s (mr <= 8, kc) panel at rows i0, depth k0 (even), as pairs:
 * pa[p * 8 + r] = op(A)[i0 + r][k0 + 2p] | op(A)[i0 + r][k0 + 2p + 1] << 16 (a[k * lda + i]);
 * rows past mr and the pair past an odd kc are zero. */
BF16T static void pack_a_t(const uint16_t *a, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc, uint32_t *pa) {
    __mmask8 mk = (__mmask8)((1u << mr) - 1u);
    for (int64_t p = 0; p < (kc + 1) / 2; p++) {
        const uint16_t *r0 = a + (k0 + 2 * p) * lda + i0;
        __m256i lo = _mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(mk, r0));
        __m256i hi =
            2 * p + 1 < kc ? _mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(mk, r0 + lda)) : _mm256_setzero_si256();
        _mm256_store_si256((__m256i *)(pa + p * MR), _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)));
    }
}

/* An untransposed A's panel whose last pair would run past kc (odd): rows copied, one zero
 * after each, so that nothing past A is read (and no NaN past it meets B's zero pad). */
static void copy_rows_even(const uint16_t *a, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc, uint16_t *dst,
                           int64_t kce) {
    for (int r = 0; r < mr; r++) {
        memcpy(dst + r * kce, a + (i0 + r) * lda + k0, (size_t)kc * sizeof(uint16_t));
        for (int64_t q = kc; q < kce; q++) dst[r * kce + q] = 0;
    }
}

/* ------------------------------------------------------------------ micro-kernel */

/* tile[r][j] = sum over the kp pairs of op(A)[r][pair] . pb[pair][j], for an 8 x 16nv tile.
 * op(A)'s row r pair p is the dword at a + min(r, mr - 1) * rs + p * ps (bf16 units): rows
 * past mr repeat the last real row (their sums are not stored). */
BF16T static inline __attribute__((always_inline)) void dot_tile(int nv, int64_t kp, const uint16_t *a, int64_t rs,
                                                                 int64_t ps, int mr, const uint32_t *restrict pb,
                                                                 float *restrict tile) {
    const uint16_t *ar[MR];
    for (int r = 0; r < MR; r++) ar[r] = a + (r < mr ? r : mr - 1) * rs;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    __m512 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    __m512 c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
#define IT_ROW(r)                                                                                                      \
    do {                                                                                                               \
        uint32_t w;                                                                                                    \
        memcpy(&w, ar[r] + off, sizeof w);                                                                             \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)w);                                                             \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                                                   \
        if (nv > 1) c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                                       \
        if (nv > 2) c##r##2 = _mm512_dpbf16_ps(c##r##2, av, b2);                                                       \
    } while (0)
    for (int64_t p = 0, off = 0; p < kp; p++, off += ps) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)pb);
        __m512bh b1 = nv > 1 ? (__m512bh)_mm512_load_si512((const void *)(pb + 16)) : b0;
        __m512bh b2 = nv > 2 ? (__m512bh)_mm512_load_si512((const void *)(pb + 32)) : b0;
        IT_ROW(0);
        IT_ROW(1);
        IT_ROW(2);
        IT_ROW(3);
        IT_ROW(4);
        IT_ROW(5);
        IT_ROW(6);
        IT_ROW(7);
        pb += NR;
    }
#undef IT_ROW
    __m512 acc[MR][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
                         {c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < nv; v++) _mm512_store_ps(tile + r * NR + 16 * v, acc[r][v]);
}

#define IT_DOT(nv)                                                                                                     \
    BF16T static void dot_tile##nv(int64_t kp, const uint16_t *a, int64_t rs, int64_t ps, int mr, const uint32_t *pb,  \
                                   float *tile) {                                                                      \
        dot_tile(nv, kp, a, rs, ps, mr, pb, tile);                                                                     \
    }
IT_DOT(1)
IT_DOT(2)
IT_DOT(3)
#undef IT_DOT

typedef void (*dot_fn)(int64_t, const uint16_t *, int64_t, int64_t, int, const uint32_t *, float *);
static const dot_fn g_dot[3] = {dot_tile1, dot_tile2, dot_tile3};

/* Where a tile's results go: C at c (fp32 or bf16), element (i, j) at c[i * ldc + j], or at
 * c[j * ldc + i] when tc (the swapped form). */
typedef struct out_view {
    void *c;
    int64_t ldc;
    bool bf16, tc;
} out_view;

/* The (mr, nr) tile at row i, column j of the view: x = alpha * acc (+ beta_eff * C). */
BF16T static void store_tile(const out_view *o, int64_t i, int64_t j, int mr, int nr, const float *tile, float alpha,
                             float beta_eff, bool read) {
    if (o->tc) {
        /* column q of the tile (8 rows, stride NR) is mr adjacent elements of C's row j + q */
        __m256i rows = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(NR));
        __mmask8 mk = (__mmask8)((1u << mr) - 1u);
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta_eff);
        for (int q = 0; q < nr; q++) {
            int64_t off = (j + q) * o->ldc + i;
            __m256 x = _mm256_mul_ps(va, _mm256_i32gather_ps(tile + q, rows, 4));
            if (o->bf16) {
                uint16_t *p = (uint16_t *)o->c + off;
                if (read) {
                    __m256i h = _mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(mk, p));
                    x = _mm256_fmadd_ps(vb, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), x);
                }
                __m256i r = _mm512_castsi512_si256(round_bf16(_mm512_castps256_ps512(x)));
                _mm_mask_storeu_epi16(p, mk, _mm256_cvtepi32_epi16(r));
            } else {
                float *p = (float *)o->c + off;
                if (read) x = _mm256_fmadd_ps(vb, _mm256_maskz_loadu_ps(mk, p), x);
                _mm256_mask_storeu_ps(p, mk, x);
            }
        }
        return;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta_eff);
    for (int r = 0; r < mr; r++)
        for (int v = 0; v * 16 < nr; v++) {
            int cnt = nr - 16 * v;
            __mmask16 mk = (__mmask16)(cnt >= 16 ? 0xffff : (1u << cnt) - 1u);
            int64_t off = (i + r) * o->ldc + j + 16 * v;
            __m512 x = _mm512_mul_ps(va, _mm512_load_ps(tile + r * NR + 16 * v));
            if (o->bf16) {
                uint16_t *p = (uint16_t *)o->c + off;
                if (read) {
                    __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p));
                    x = _mm512_fmadd_ps(vb, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), x);
                }
                _mm256_mask_storeu_epi16(p, mk, _mm512_cvtepi32_epi16(round_bf16(x)));
            } else {
                float *p = (float *)o->c + off;
                if (read) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, p), x);
                _mm512_mask_storeu_ps(p, mk, x);
            }
        }
}

/* ------------------------------------------------------------------ driver */

typedef struct product {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const uint16_t *a, *b;
    int64_t lda, ldb;
    out_view out;
    const uint32_t *bpre; /* op(B) packed whole (panel q at bpre + q * kpt * NR), or NULL */
    int64_t kpt;          /* (k + 1) / 2 */
} product;

/* Bytes of a thread's buffers: a B block, an A panel, and an fp32 block of C (up to 2 MB
 * rows) for a bf16 C deeper than one k block. */
static size_t thread_bytes(bool deep_bf16) {
    size_t a = ((size_t)MR * (KC + 2) * 2 + 63) / 64 * 64; /* each part, and so each thread's, 64-byte aligned */
    return (size_t)KC / 2 * NC * 4 + a + (deep_bf16 ? (size_t)2 * MB * NC * 4 : 0);
}

/* Unit: rows [i0, i0 + mu), columns [j0, j0 + nu) of C. */
BF16T static void run_unit(const product *pr, int64_t i0, int64_t mu, int64_t j0, int64_t nu, char *buf) {
    uint32_t *bbuf = (uint32_t *)buf;
    uint32_t *abuf = (uint32_t *)(buf + (size_t)KC / 2 * NC * 4);
    float *cbuf = (float *)(buf + (size_t)KC / 2 * NC * 4 + ((size_t)MR * (KC + 2) * 2 + 63) / 64 * 64);
    _Alignas(64) float tile[MR * NR];
    bool deep = pr->k > KC, via = deep && pr->out.bf16;
    /* a bf16 C deeper than one k block: summed in cbuf (mu, nu) fp32, rounded at the end */
    out_view ov = pr->out;
    int64_t ci = i0, cj = j0;
    if (via) {
        ov = (out_view){cbuf, nu, false, false};
        ci = cj = 0;
        if (pr->beta != 0.0f)
            for (int64_t r = 0; r < mu; r++)
                for (int64_t q = 0; q < nu; q++) {
                    int64_t off = pr->out.tc ? (j0 + q) * pr->out.ldc + i0 + r : (i0 + r) * pr->out.ldc + j0 + q;
                    cbuf[r * nu + q] = bf16_to_f32(((const uint16_t *)pr->out.c)[off]);
                }
    }
    int64_t npan = (nu + NR - 1) / NR;
    for (int64_t pc = 0; pc < pr->k; pc += KC) {
        int64_t kc = min64(KC, pr->k - pc), kp = (kc + 1) / 2;
        const uint32_t *pb;
        int64_t pstride; /* dwords between panels */
        if (pr->bpre) {
            pb = pr->bpre + (j0 / NR) * pr->kpt * NR + pc / 2 * NR;
            pstride = pr->kpt * NR;
        } else {
            for (int64_t q = 0; q < npan; q++)
                pack_b(pr->tb, pr->b, pr->ldb, pc, kc, j0 + q * NR, (int)min64(NR, nu - q * NR), bbuf + q * kp * NR);
            pb = bbuf;
            pstride = kp * NR;
        }
        bool first = pc == 0, read = !first || pr->beta != 0.0f;
        float beta_eff = first ? pr->beta : 1.0f;
        for (int64_t i = i0; i < i0 + mu; i += MR) {
            int mr = (int)min64(MR, i0 + mu - i);
            const uint16_t *pa;
            int64_t rs, ps;
            if (pr->ta) {
                pack_a_t(pr->a, pr->lda, i, mr, pc, kc, abuf);
                pa = (const uint16_t *)abuf, rs = 2, ps = 2 * MR;
            } else if (kc % 2 == 0) {
                pa = pr->a + i * pr->lda + pc, rs = pr->lda, ps = 2;
            } else {
                copy_rows_even(pr->a, pr->lda, i, mr, pc, kc, (uint16_t *)abuf, kc + 1);
                pa = (const uint16_t *)abuf, rs = kc + 1, ps = 2;
            }
            for (int64_t q = 0; q < npan; q++) {
                int nr = (int)min64(NR, nu - q * NR);
                g_dot[(nr + 15) / 16 - 1](kp, pa, rs, ps, mr, pb + q * pstride, tile);
                store_tile(&ov, ci + (i - i0), cj + q * NR, mr, nr, tile, pr->alpha, beta_eff, read);
            }
        }
    }
    if (via)
        for (int64_t r = 0; r < mu; r++)
            for (int64_t q = 0; q < nu; q++) {
                int64_t off = pr->out.tc ? (j0 + q) * pr->out.ldc + i0 + r : (i0 + r) * pr->out.ldc + j0 + q;
                ((uint16_t *)pr->out.c)[off] = f32_to_bf16(cbuf[r * nu + q]);
            }
}

/* The product (not swapped: C's view given), on every thread unless inside a parallel
 * region or small. */
static bool sbgemm_run(product *pr) {
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if ((double)pr->m * (double)pr->n * (double)pr->k < 2.0e6 || threads < 1) threads = 1;
    /* units: rows cut to MB (all of them up to 2 MB), columns to NC, then finer until every
     * thread has two (dynamic: a core the host slows does fewer) */
    int64_t mb = pr->m <= 2 * MB ? (pr->m + MR - 1) / MR * MR : MB, nb = NC;
    for (;;) {
        int64_t units = ((pr->m + mb - 1) / mb) * ((pr->n + nb - 1) / nb);
        if (units >= 2 * threads || threads == 1) break;
        /* narrower first: each unit then reads its own part of op(B), which is read once */
        if (nb > 2 * NR)
            nb -= NR;
        else if (mb > 64)
            mb = (mb / 2 + MR - 1) / MR * MR;
        else
            break;
    }
    int64_t nrb = (pr->m + mb - 1) / mb, ncb = (pr->n + nb - 1) / nb, units = nrb * ncb;
    pr->kpt = (pr->k + 1) / 2;
    int64_t npan_all = (pr->n + NR - 1) / NR;
    size_t pre_bytes = (size_t)npan_all * (size_t)pr->kpt * NR * 4;
    bool pre = nrb > 1 && pre_bytes <= ((size_t)32 << 20);
    bool deep_bf16 = pr->k > KC && pr->out.bf16;
    size_t per = thread_bytes(deep_bf16);
    int slot, pslot = -1;
    char *buf = scratch_take(per * (size_t)threads, &slot);
    uint32_t *bpre = pre ? scratch_take(pre_bytes, &pslot) : NULL;
    if (buf == NULL || (pre && bpre == NULL)) {
        if (buf) scratch_give(buf, slot);
        if (bpre) scratch_give(bpre, pslot);
        return false;
    }
    pr->bpre = NULL;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        if (pre) {
#pragma omp for schedule(static)
            for (int64_t q = 0; q < npan_all; q++)
                pack_b(pr->tb, pr->b, pr->ldb, 0, pr->k, q * NR, (int)min64(NR, pr->n - q * NR),
                       bpre + q * pr->kpt * NR);
#pragma omp single
            pr->bpre = bpre; /* (implied barrier) */
        }
        char *mine = buf + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            int64_t ib = u / ncb, jb = u % ncb;
            int64_t i0 = ib * mb, j0 = jb * nb;
            run_unit(pr, i0, min64(mb, pr->m - i0), j0, min64(nb, pr->n - j0), mine);
        }
    }
    if (bpre) scratch_give(bpre, pslot);
    scratch_give(buf, slot);
    return true;
}

/* swap > 0: computed as C^T = op(B)^T op(A)^T (tiles stored transposed), 0: as asked,
 * < 0: swapped when both operands are transposed (so that neither is), else as asked: the
 * transposed store costs more than the gathered packing of a transposed B. */
bool it_cpu_sbgemm_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                      int64_t lda, const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc) {
    if (m <= 0 || n <= 0 || k <= 0) return false;
    bool swapped = swap > 0 || (swap < 0 && tb && ta);
    product pr;
    memset(&pr, 0, sizeof pr);
    pr.k = k, pr.alpha = alpha, pr.beta = beta;
    pr.out = (out_view){c, ldc, c_bf16, swapped};
    if (swapped) {
        pr.ta = !tb, pr.tb = !ta, pr.m = n, pr.n = m, pr.a = b, pr.lda = ldb, pr.b = a, pr.ldb = lda;
    } else {
        pr.ta = ta, pr.tb = tb, pr.m = m, pr.n = n, pr.a = a, pr.lda = lda, pr.b = b, pr.ldb = ldb;
    }
    return sbgemm_run(&pr);
}

bool it_cpu_sbgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                   const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc) {
    return it_cpu_sbgemm_ex(-1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, c_bf16, ldc);
}

static int g_usable = -1;
static pthread_once_t g_usable_once = PTHREAD_ONCE_INIT;
static void usable_init(void) { g_usable = it_cpu_has_avx512_bf16() && !it_cpu_sbgemm_env_is("fp32"); }

bool it_cpu_sbgemm_usable(void) {
    pthread_once(&g_usable_once, usable_init);
    return g_usable == 1;
}

#else /* not x86-64 with GCC or Clang */

bool it_cpu_sbgemm_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                      int64_t lda, const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc) {
    (void)swap, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
        (void)beta, (void)c, (void)c_bf16, (void)ldc;
    return false;
}

bool it_cpu_sbgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                   const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc) {
    return it_cpu_sbgemm_ex(-1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, c_bf16, ldc);
}

bool it_cpu_sbgemm_usable(void) { return false; }

#endif
