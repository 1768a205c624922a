/* Flash attention (backend.h's flash_attention_fwd / _bwd): FlashAttention-2 (Dao 2023) on
 * the CPU, keeping nothing of size T x S.
 *
 *   q (B, H, T, D), k, v (B, Hkv, S, D); query head h reads kv head h / (H / Hkv)
 *   s_tj = scale q_t . k_j over the keys row t sees (with causal, j <= t + q_offset)
 *   fwd: lse_t = log sum_j exp(s_tj), y_t = sum_j exp(s_tj - lse_t) v_j
 *   bwd: p_tj = exp(s_tj - lse_t), delta_t = dy_t . y_t, ds_tj = scale p_tj (dy_t . v_j - delta_t)
 *        dq_t = sum_j ds_tj k_j, dk_j = sum_t ds_tj q_t, dv_j = sum_t p_tj dy_t
 *
 * Work is cut into blocks of FA_BR query rows and FA_BC keys. The forward takes tasks of
 * (b, h, up to FA_GMAX query blocks): each block walks the key blocks its rows see (a causal
 * block stops at its last row's last key) with a running max m and sum l per row, rescaling
 * its output accumulator by exp(m_old - m_new) as it adds the key block's P V; the task's
 * blocks share each read of a key block. The backward first forms delta, then runs two
 * passes, so that every output element is summed by one task in a fixed order (no atomics;
 * the bits do not depend on the thread count): tasks of (b, h, query blocks) sum dq over the
 * key blocks their rows see, and tasks of (b, kv head, key blocks) sum dk and dv over the
 * group's query heads and the query blocks that see the keys, each recomputing P (FA2's
 * split: S and dP are computed once more). Working memory is a per-thread scratch of
 * O(FA_BR FA_BC + (FA_BR + FA_BC) D) floats (FA_GMAX blocks' worth), plus delta, B H T floats.
 *
 * The block products are one small GEMM, C (m, n) (+)= A B, with A read an element at a time
 * (broadcast) wherever it lies and B a row-major scratch block whose n (a block's 64 queries
 * or keys) is a multiple of 16, in register tiles with AVX-512 or AVX2 (chosen at run time as
 * the sgemm's are; IT_CPU_FLASH=avx512|avx2|scalar forces one, for the tests). Each element of
 * C is one FMA chain over k in order from its initial value, and the rest is elementwise (the
 * masks, fa_exp, the per-row max and sums taken in key order), so every path gives the same
 * bits. The caller's operands are only ever A: the products are arranged so that the scratch
 * blocks are B and the accumulators are transposed, (D, 64):
 *   fwd, dq pass: S^T = K Q^T, dP^T = V dY^T (q^T, dy^T transposed once per block);
 *                 O^T = O^T diag(al) + V^T P^T, dQ^T += K^T dS^T
 *   dk/dv pass:   S = Q K^T, dP = dY V^T (k^T, v^T transposed once per block);
 *                 dV^T += dY^T P, dK^T += Q^T dS
 * so the softmax's per-row passes run down the columns of S^T (vectorized over the block's
 * rows, no horizontal reductions), and a block of the caller's rows is read once per task
 * and block of the other side: fp32 rows that lie D apart where they are, rows further apart
 * (GPT-2's heads, 3C floats apart in qkv) copied into scratch first, bf16 / fp16 widened
 * (exactly) into it. Outputs are rounded once.
 *
 * On one core of a Xeon with AVX-512 (GPT-2's layout, B1 H12 T2048 D64 causal) the forward
 * ran at 78 GFLOP/s with whole (non-transposed) products and copies of every k and v block,
 * 78-82 with this arrangement and one block per task, 88 with four; the 64^3 products alone
 * run at 160 from L1 (the sgemm: 147 for 1024^3). */
#include <omp.h>
#include <stdint.h>

#include "cpu/cpu_scratch.h"
#include "cpu/cpu_util.h"
#include "cpu/sgemm_select.h"
#include "infinitrain/scalar/it_scalar_cast.h"

/* 64 x 64 blocks: with D = 64 a block's scratch (q^T, the scores, the output accumulator) is
 * 16 KB each, so that the B operand a tile streams stays in L1. Single-thread forward, B1 H12
 * T2048 D64 causal, against 64 x 64 (with the products untransposed): 64 x 32, 128 x 32,
 * 128 x 64, 32 x 64, 96 x 48 and 64 x 128 were 2-20% slower. */
enum {
    FA_BR = 64,    /* query rows per block */
    FA_BC = 64,    /* keys per block */
    FA_VW = 16,    /* the n of every block product is a multiple of this (one zmm, two ymm) */
    FA_DMAX = 256, /* largest head size taken (the scratch grows with it) */
    FA_GMAX = 4    /* blocks per task at most (see fa_group) */
};

static inline int64_t fa_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t fa_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t fa_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }
static inline int64_t fa_pad(int64_t n) { return (n + FA_VW - 1) / FA_VW * FA_VW; }
static inline int64_t fa_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* A (B, H, R, D) view: its data and the element strides of B, H and R (D's is 1). */
typedef struct fa_view {
    char *p;
    int64_t s[3];
} fa_view;

typedef struct fa_ctx {
    it_dtype dt;
    int64_t es;                        /* bytes per element */
    int64_t B, H, Hkv, T, S, D, Dp, r; /* Dp = D padded to FA_VW (fa_dot16); r = H / Hkv */
    int64_t nqb, nkb;                  /* query and key blocks */
    int64_t gq, gk;                    /* query blocks per fwd / dq task, key blocks per dk/dv task */
    float scale;
    bool causal;
    int64_t off; /* q_offset clamped to [-T, S]: the same masks, and no overflow */
    fa_view q, k, v, y, dy, dq, dk, dv;
    float *lse;   /* (B, H, T) */
    float *delta; /* bwd: (B, H, T) */
} fa_ctx;

static inline char *fa_at(const fa_ctx *c, const fa_view *v, int64_t b, int64_t h, int64_t t) {
    return v->p + (b * v->s[0] + h * v->s[1] + t * v->s[2]) * c->es;
}

/* The end of the keys row t sees: [0, vis_end). */
static inline int64_t fa_vis_end(const fa_ctx *c, int64_t t) {
    return c->causal ? fa_clamp(t + c->off + 1, 0, c->S) : c->S;
}

/* ---------------------------------------------------------------- rows in and out
 * ALWAYS_INLINE: inlined into each ISA's tasks, where their loops vectorize for it. */

/* n elements of dt at src, widened exactly (cast()'s rule). */
ALWAYS_INLINE void fa_widen(it_dtype dt, const void *src, float *dst, int64_t n) {
    if (dt == IT_DTYPE_FP32) {
        const float *s = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = s[i];
    } else if (dt == IT_DTYPE_BF16) {
        const uint16_t *s = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] = it_sc_bf16_to_fp32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = it_sc_fp16_to_fp32(s[i]);
    }
}

/* n fp32 values rounded once to dt at dst. */
ALWAYS_INLINE void fa_narrow(it_dtype dt, const float *src, void *dst, int64_t n) {
    if (dt == IT_DTYPE_FP32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == IT_DTYPE_BF16) {
        uint16_t *d = dst;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = it_sc_fp32_to_bf16(src[i]);
    } else {
        uint16_t *d = dst;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = it_sc_fp32_to_fp16(src[i]);
    }
}

/* Rows [t0, t0 + n) of head (b, h) of v as an fp32 block with *ld floats between rows (an A
 * operand: only its D columns are read): contiguous fp32 rows where they lie; rows further
 * apart copied into buf (n x D), which the block's tiles then find in L1 (GPT-2's rows,
 * 9 KB apart, fall into a quarter of its sets); bf16 / fp16 rows widened into buf. */
ALWAYS_INLINE const float *fa_rows(const fa_ctx *c, const fa_view *v, int64_t b, int64_t h, int64_t t0, int64_t n,
                                   float *buf, int64_t *ld) {
    if (c->dt == IT_DTYPE_FP32 && (v->s[2] == c->D || n == 1)) {
        *ld = v->s[2];
        return (const float *)fa_at(c, v, b, h, t0);
    }
    for (int64_t i = 0; i < n; i++) fa_widen(c->dt, fa_at(c, v, b, h, t0 + i), buf + i * c->D, c->D);
    *ld = c->D;
    return buf;
}

/* Column i of a transposed (D, ld) accumulator, rounded into row t of head (b, h) of v; tmp
 * holds D floats. */
ALWAYS_INLINE void fa_store_t(const fa_ctx *c, const float *acc, int64_t ld, int64_t i, const fa_view *v, int64_t b,
                              int64_t h, int64_t t, float *tmp) {
    for (int64_t d = 0; d < c->D; d++) tmp[d] = acc[d * ld + i];
    fa_narrow(c->dt, tmp, fa_at(c, v, b, h, t), c->D);
}

/* e^x with FMAs: vexpf's reduction and polynomial (cpu_util.h) with each multiply-add one
 * fmaf, so that every ISA (and the scalar path) rounds alike, in fewer operations. Within
 * 1.01 ulp on [-87, 88], as vexpf (both against libm's exp in double, every 7th float of the
 * range); 0 below -87 (e^-87 = 1.6e-38 of the largest term of a softmax row: nothing its sums
 * keep), +inf above 88 (the kernels' arguments are at most about 0), NaN for NaN. */
ALWAYS_INLINE float fa_exp(float x) {
    float xc = x > -87.0f ? x : -87.0f; /* NaN too: the result is replaced below */
    xc = xc < 88.0f ? xc : 88.0f;
    float k = fmaf(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f; /* round(x / ln 2) */
    float r = fmaf(k, -0.693359375f, xc);
    r = fmaf(k, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float e = fmaf(p, r * r, r) + 1.0f;
    float y = e * bits_to_f32(((int32_t)k + 127) << 23); /* k in [-126, 127]: a normal 2^k */
    y = x < -87.0f ? 0.0f : x > 88.0f ? INFINITY : y;
    return x == x ? y : x;
}

/* The same rows transposed: dst[d * ld + i] for d < D, i < npad, zero for i >= n. */
ALWAYS_INLINE void fa_rows_t(const fa_ctx *c, const fa_view *v, int64_t b, int64_t h, int64_t t0, int64_t n,
                             int64_t npad, float *dst, int64_t ld, float *tmp) {
    for (int64_t i = 0; i < n; i++) {
        const float *row = tmp;
        if (c->dt == IT_DTYPE_FP32)
            row = (const float *)fa_at(c, v, b, h, t0 + i);
        else
            fa_widen(c->dt, fa_at(c, v, b, h, t0 + i), tmp, c->D);
        for (int64_t d = 0; d < c->D; d++) dst[d * ld + i] = row[d];
    }
    for (int64_t d = 0; d < c->D; d++)
        for (int64_t i = n; i < npad; i++) dst[d * ld + i] = 0.0f;
}

/* sum_d a[d] b[d] over Dp (a multiple of 16) in 16 lanes, lane l taking d = l mod 16 by FMAs
 * in order, then a fixed tree: one order for every ISA. */
ALWAYS_INLINE float fa_dot16(const float *a, const float *b, int64_t Dp) {
    float acc[16] = {0};
    for (int64_t d = 0; d < Dp; d += 16) {
#pragma omp simd
        for (int l = 0; l < 16; l++) acc[l] = fmaf(a[d + l], b[d + l], acc[l]);
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] = acc[l] + acc[l + w];
    return acc[0];
}

/* ---------------------------------------------------------------- block products
 * C (m, n) = init + A (m, k) B (k, n), init 0 (FA_SET, which stores alpha times the sum: the
 * scores' scale), C (FA_ADD) or C times cs[j] per column j (FA_SCALE: the forward's rescaling
 * by exp(m_old - m_new), folded into the load). A(i, kk) = a[i * sam + kk * sak]; B row-major
 * (ldb) with n a multiple of FA_VW; C row-major (ldc). Element (i, j) is fmaf(A(i, kk),
 * B(kk, j), acc) for kk = 0 .. k-1 from init, in every kernel below: their bits are the same. */
enum { FA_SET = 0, FA_ADD = 1, FA_SCALE = 2 };

static void fa_mm_scalar(int mode, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t sam,
                         int64_t sak, const float *b, int64_t ldb, float *c, int64_t ldc, const float *cs) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = mode == FA_SET ? 0.0f : mode == FA_ADD ? c[i * ldc + j] : c[i * ldc + j] * cs[j];
            for (int64_t kk = 0; kk < k; kk++) acc = fmaf(a[i * sam + kk * sak], b[kk * ldb + j], acc);
            c[i * ldc + j] = mode == FA_SET ? alpha * acc : acc;
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* GCC tunes recent Intel cores for 256-bit vectors in the loops it vectorizes itself: the
 * elementwise passes ask for 512 (one core, B1 H12 T2048: forward 80 -> 73 ms, backward 250 ->
 * 235). clang takes no such option in the attribute. */
#if defined(__clang__)
#define FA_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#else
#define FA_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512")))
#endif
#define FA_AVX2 __attribute__((target("avx2,fma")))

/* AVX-512: a tile of 6 rows and nv <= 4 zmm columns, 24 accumulators and four vectors of B
 * in 32 registers; a k step loads nv vectors of B and broadcasts six elements of A (folded
 * into the FMAs). Rows past mr repeat row mr - 1 (computed, not stored). 160 GFLOP/s on one
 * core for 64 x 64 x 64 from L1, against the sgemm's 147 for 1024^3. */
FA_AVX512 static inline __attribute__((always_inline)) void fa_tile512(int nv, int mode, int mr, int64_t k, float alpha,
                                                                       const float *a, int64_t sam, int64_t sak,
                                                                       const float *b, int64_t ldb, float *c,
                                                                       int64_t ldc, const float *cs) {
    const float *a0 = a, *a1 = a + fa_min(1, mr - 1) * sam, *a2 = a + fa_min(2, mr - 1) * sam,
                *a3 = a + fa_min(3, mr - 1) * sam, *a4 = a + fa_min(4, mr - 1) * sam, *a5 = a + fa_min(5, mr - 1) * sam;
    __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z, c20 = z, c21 = z, c22 = z, c23 = z;
    __m512 c30 = z, c31 = z, c32 = z, c33 = z, c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
    __m512 s0 = z, s1 = z, s2 = z, s3 = z;
    if (mode == FA_SCALE) {
        s0 = _mm512_loadu_ps(cs);
        if (nv > 1) s1 = _mm512_loadu_ps(cs + 16);
        if (nv > 2) s2 = _mm512_loadu_ps(cs + 32);
        if (nv > 3) s3 = _mm512_loadu_ps(cs + 48);
    }
#define FA_INIT(r)                                                                                                     \
    if (mode != FA_SET && r < mr) {                                                                                    \
        const float *cr = c + r * ldc;                                                                                 \
        c##r##0 = _mm512_loadu_ps(cr);                                                                                 \
        if (nv > 1) c##r##1 = _mm512_loadu_ps(cr + 16);                                                                \
        if (nv > 2) c##r##2 = _mm512_loadu_ps(cr + 32);                                                                \
        if (nv > 3) c##r##3 = _mm512_loadu_ps(cr + 48);                                                                \
        if (mode == FA_SCALE) {                                                                                        \
            c##r##0 = _mm512_mul_ps(c##r##0, s0);                                                                      \
            if (nv > 1) c##r##1 = _mm512_mul_ps(c##r##1, s1);                                                          \
            if (nv > 2) c##r##2 = _mm512_mul_ps(c##r##2, s2);                                                          \
            if (nv > 3) c##r##3 = _mm512_mul_ps(c##r##3, s3);                                                          \
        }                                                                                                              \
    }
    FA_INIT(0)
    FA_INIT(1)
    FA_INIT(2)
    FA_INIT(3)
    FA_INIT(4)
    FA_INIT(5)
#undef FA_INIT
#define FA_ROW(r)                                                                                                      \
    do {                                                                                                               \
        __m512 av = _mm512_set1_ps(a##r[kk * sak]);                                                                    \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                                    \
        if (nv > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                        \
        if (nv > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                                        \
        if (nv > 3) c##r##3 = _mm512_fmadd_ps(av, b3, c##r##3);                                                        \
    } while (0)
    for (int64_t kk = 0; kk < k; kk++) {
        const float *bp = b + kk * ldb;
        __m512 b0 = _mm512_loadu_ps(bp);
        __m512 b1 = nv > 1 ? _mm512_loadu_ps(bp + 16) : z, b2 = nv > 2 ? _mm512_loadu_ps(bp + 32) : z;
        __m512 b3 = nv > 3 ? _mm512_loadu_ps(bp + 48) : z;
        FA_ROW(0);
        FA_ROW(1);
        FA_ROW(2);
        FA_ROW(3);
        FA_ROW(4);
        FA_ROW(5);
    }
#undef FA_ROW
    __m512 va = _mm512_set1_ps(mode == FA_SET ? alpha : 1.0f);
#define FA_STORE(r)                                                                                                    \
    if (r < mr) {                                                                                                      \
        float *cr = c + r * ldc;                                                                                       \
        _mm512_storeu_ps(cr, mode == FA_SET ? _mm512_mul_ps(va, c##r##0) : c##r##0);                                   \
        if (nv > 1) _mm512_storeu_ps(cr + 16, mode == FA_SET ? _mm512_mul_ps(va, c##r##1) : c##r##1);                  \
        if (nv > 2) _mm512_storeu_ps(cr + 32, mode == FA_SET ? _mm512_mul_ps(va, c##r##2) : c##r##2);                  \
        if (nv > 3) _mm512_storeu_ps(cr + 48, mode == FA_SET ? _mm512_mul_ps(va, c##r##3) : c##r##3);                  \
    }
    FA_STORE(0)
    FA_STORE(1)
    FA_STORE(2)
    FA_STORE(3)
    FA_STORE(4)
    FA_STORE(5)
#undef FA_STORE
}

FA_AVX512 static void fa_mm_avx512(int mode, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t sam,
                                   int64_t sak, const float *b, int64_t ldb, float *c, int64_t ldc, const float *cs) {
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int nv = (int)fa_min(4, (n - j0) / 16);
        const float *bj = b + j0, *csj = cs ? cs + j0 : NULL;
        for (int64_t i0 = 0; i0 < m; i0 += 6) {
            int mr = (int)fa_min(6, m - i0);
            const float *ai = a + i0 * sam;
            float *cij = c + i0 * ldc + j0;
            switch (nv) {
            case 4: fa_tile512(4, mode, mr, k, alpha, ai, sam, sak, bj, ldb, cij, ldc, csj); break;
            case 3: fa_tile512(3, mode, mr, k, alpha, ai, sam, sak, bj, ldb, cij, ldc, csj); break;
            case 2: fa_tile512(2, mode, mr, k, alpha, ai, sam, sak, bj, ldb, cij, ldc, csj); break;
            default: fa_tile512(1, mode, mr, k, alpha, ai, sam, sak, bj, ldb, cij, ldc, csj); break;
            }
        }
    }
}

/* AVX2: a tile of 6 rows and 16 columns (two ymm), 12 accumulators, two vectors of B and a
 * broadcast in 16 registers (sgemm_avx2.c's tile). */
FA_AVX2 static inline __attribute__((always_inline)) void fa_tile256(int mode, int mr, int64_t k, float alpha,
                                                                     const float *a, int64_t sam, int64_t sak,
                                                                     const float *b, int64_t ldb, float *c, int64_t ldc,
                                                                     const float *cs) {
    const float *a0 = a, *a1 = a + fa_min(1, mr - 1) * sam, *a2 = a + fa_min(2, mr - 1) * sam,
                *a3 = a + fa_min(3, mr - 1) * sam, *a4 = a + fa_min(4, mr - 1) * sam, *a5 = a + fa_min(5, mr - 1) * sam;
    __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
#define FA_INIT(r)                                                                                                     \
    if (mode != FA_SET && r < mr) {                                                                                    \
        c##r##0 = _mm256_loadu_ps(c + r * ldc);                                                                        \
        c##r##1 = _mm256_loadu_ps(c + r * ldc + 8);                                                                    \
        if (mode == FA_SCALE) {                                                                                        \
            c##r##0 = _mm256_mul_ps(c##r##0, _mm256_loadu_ps(cs));                                                     \
            c##r##1 = _mm256_mul_ps(c##r##1, _mm256_loadu_ps(cs + 8));                                                 \
        }                                                                                                              \
    }
    FA_INIT(0)
    FA_INIT(1)
    FA_INIT(2)
    FA_INIT(3)
    FA_INIT(4)
    FA_INIT(5)
#undef FA_INIT
#define FA_ROW(r)                                                                                                      \
    do {                                                                                                               \
        __m256 av = _mm256_broadcast_ss(a##r + kk * sak);                                                              \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                                    \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                                    \
    } while (0)
    for (int64_t kk = 0; kk < k; kk++) {
        const float *bp = b + kk * ldb;
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        FA_ROW(0);
        FA_ROW(1);
        FA_ROW(2);
        FA_ROW(3);
        FA_ROW(4);
        FA_ROW(5);
    }
#undef FA_ROW
    __m256 va = _mm256_set1_ps(mode == FA_SET ? alpha : 1.0f);
#define FA_STORE(r)                                                                                                    \
    if (r < mr) {                                                                                                      \
        _mm256_storeu_ps(c + r * ldc, mode == FA_SET ? _mm256_mul_ps(va, c##r##0) : c##r##0);                          \
        _mm256_storeu_ps(c + r * ldc + 8, mode == FA_SET ? _mm256_mul_ps(va, c##r##1) : c##r##1);                      \
    }
    FA_STORE(0)
    FA_STORE(1)
    FA_STORE(2)
    FA_STORE(3)
    FA_STORE(4)
    FA_STORE(5)
#undef FA_STORE
}

FA_AVX2 static void fa_mm_avx2(int mode, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t sam,
                               int64_t sak, const float *b, int64_t ldb, float *c, int64_t ldc, const float *cs) {
    for (int64_t j0 = 0; j0 < n; j0 += 16)
        for (int64_t i0 = 0; i0 < m; i0 += 6)
            fa_tile256(mode, (int)fa_min(6, m - i0), k, alpha, a + i0 * sam, sam, sak, b + j0, ldb, c + i0 * ldc + j0,
                       ldc, cs ? cs + j0 : NULL);
}
#endif

/* ---------------------------------------------------------------- the tasks, once per ISA
 * A task takes up to FA_GMAX blocks (fa_group) that share each read of the other side's
 * blocks: a forward or dq task several query blocks of one head, so that each k and v block
 * is fetched (from L3 when the rows lie far apart) and copied once for all of them; a dk/dv
 * task several key blocks, sharing each q and dy block. Each block keeps its own state. */

/* A query block's state in a forward task: O^T (D, FA_BR), q^T (D, FA_BR), the running max m
 * and sum l, and per key block the max used (mu), the rescaling (al) and the new terms' sum. */
typedef struct fa_fwd_blk {
    float *ot, *qt, *m, *l, *mu, *al, *sum;
    int64_t t0, nr, kend; /* rows [t0, t0 + nr), which see keys [0, kend) at most */
    int nrp;              /* nr padded to FA_VW */
} fa_fwd_blk;

/* A query block's state in a dq task: q^T, dy^T, dQ^T (D, FA_BR), and lse and delta (FA_BR). */
typedef struct fa_dq_blk {
    float *qt, *dyt, *dqt, *ls, *de;
    int64_t t0, nr, kend;
    int nrp;
} fa_dq_blk;

/* A key block's state in a dk/dv task: k^T, v^T, dK^T, dV^T (D, FA_BC). */
typedef struct fa_dkv_blk {
    float *kt, *vt, *dkt, *dvt;
    int64_t s0, nc, first; /* keys [s0, s0 + nc), seen by query rows from first on */
    int ncp;
} fa_dkv_blk;

/* Floats of each block's state (fa_*_blk) and of a task's shared blocks. */
static inline int64_t fa_fwd_blk_floats(int64_t Dp) { return 2 * FA_BR * Dp + 5 * FA_BR; }
static inline int64_t fa_dq_blk_floats(int64_t Dp) { return 3 * FA_BR * Dp + 2 * FA_BR; }
static inline int64_t fa_dkv_blk_floats(int64_t Dp) { return 4 * FA_BC * Dp; }
static inline int64_t fa_fwd_shared(int64_t Dp) { return 2 * FA_BC * Dp + FA_BC * FA_BR + Dp; }
static inline int64_t fa_dq_shared(int64_t Dp) { return 2 * FA_BC * Dp + 2 * FA_BC * FA_BR + Dp; }
static inline int64_t fa_dkv_shared(int64_t Dp) { return 2 * FA_BR * Dp + 2 * FA_BR * FA_BC + Dp; }

#define FA_CAT2(a, b) a##_##b
#define FA_CAT(a, b) FA_CAT2(a, b)

#define FA_TARGET
#define FA_SFX scalar
#define FA_MM fa_mm_scalar
#include "cpu/flash_attention_tasks.h"
#undef FA_TARGET
#undef FA_SFX
#undef FA_MM

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FA_TARGET FA_AVX2
#define FA_SFX avx2
#define FA_MM fa_mm_avx2
#include "cpu/flash_attention_tasks.h"
#undef FA_TARGET
#undef FA_SFX
#undef FA_MM

#define FA_TARGET FA_AVX512
#define FA_SFX avx512
#define FA_MM fa_mm_avx512
#include "cpu/flash_attention_tasks.h"
#undef FA_TARGET
#undef FA_SFX
#undef FA_MM
#endif

typedef void (*fa_task_fn)(const fa_ctx *c, float *ws, int64_t task);
typedef struct fa_isa {
    fa_task_fn fwd, delta, dq, dkv;
} fa_isa;

static const fa_isa fa_isa_scalar = {fwd_task_scalar, delta_task_scalar, dq_task_scalar, dkv_task_scalar};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static const fa_isa fa_isa_avx2 = {fwd_task_avx2, delta_task_avx2, dq_task_avx2, dkv_task_avx2};
static const fa_isa fa_isa_avx512 = {fwd_task_avx512, delta_task_avx512, dq_task_avx512, dkv_task_avx512};
#endif

/* The widest kernels the CPU runs; IT_CPU_FLASH = avx512, avx2 or scalar asks for one (a
 * wider one than the CPU has falls back to what it has). All give the same bits. */
static const fa_isa *fa_pick(void) {
    const char *env = getenv("IT_CPU_FLASH");
    bool any = env == NULL || *env == '\0' || strcmp(env, "auto") == 0 || strcmp(env, "avx512") == 0;
    if (env != NULL && strcmp(env, "scalar") == 0) return &fa_isa_scalar;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (any && it_cpu_has_avx512()) return &fa_isa_avx512;
    if ((any || strcmp(env, "avx2") == 0) && it_cpu_has_avx2_fma()) return &fa_isa_avx2;
#else
    (void)any;
#endif
    return &fa_isa_scalar;
}

/* Floats of one thread's scratch: the largest of the tasks' layouts. */
static int64_t fa_ws_floats(const fa_ctx *c) {
    int64_t Dp = c->Dp, fwd = fa_fwd_shared(Dp) + c->gq * fa_fwd_blk_floats(Dp);
    int64_t dq = fa_dq_shared(Dp) + c->gq * fa_dq_blk_floats(Dp);
    int64_t dkv = fa_dkv_shared(Dp) + c->gk * fa_dkv_blk_floats(Dp);
    return fa_pad(fa_max(fa_max(fwd, dq), fa_max(dkv, 2 * Dp)));
}

/* Blocks per task: as many as FA_GMAX (2 past D = 128, for the scratch's sake) while the
 * tasks still number 4 per thread, for the dynamic schedule to even out. The bits do not
 * depend on it (each block's sums run in the same order), so it may follow the thread count. */
static int64_t fa_group(int64_t heads, int64_t blocks, int nt, int64_t Dp) {
    for (int64_t g = Dp <= 128 ? FA_GMAX : FA_GMAX / 2; g > 1; g /= 2)
        if (heads * ((blocks + g - 1) / g) >= 4 * (int64_t)nt) return g;
    return 1;
}

/* ---------------------------------------------------------------- checks */

/* A (B, H, R, D) view of q's dtype; IT_ERR_UNSUPPORTED for a last stride other than 1. */
static it_status fa_check_view(const char *kn, const char *name, const it_tdesc *t, const int64_t shape[4], it_dtype dt,
                               bool output) {
    it_status st;
    if ((st = it_cpu_check_desc(kn, name, t, 4))) return st;
    if (t->ndim != 4) return it_error(IT_ERR_INVALID_ARG, "%s: %s must be 4-D, got ndim %d", kn, name, t->ndim);
    for (int d = 0; d < 4; d++)
        if (t->shape[d] != shape[d])
            return it_error(IT_ERR_INVALID_ARG, "%s: %s must be (%lld, %lld, %lld, %lld), got shape[%d] = %lld", kn,
                            name, (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3], d,
                            (long long)t->shape[d]);
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s is %s, q is %s (they have one dtype)", kn, name,
                        it_dtype_name(t->dtype), it_dtype_name(dt));
    /* (an empty view's strides say nothing: contiguous ones of a T = 0 view are 0) */
    if (output && shape[0] * shape[1] * shape[2] * shape[3] > 0 && (st = it_cpu_check_writable(kn, name, t))) return st;
    if (shape[3] > 1 && t->strides[3] != 1)
        return it_error(IT_ERR_UNSUPPORTED, "%s: %s's last stride is %lld; this kernel takes a unit one", kn, name,
                        (long long)t->strides[3]);
    return IT_OK;
}

static void fa_set_view(fa_view *v, const it_tdesc *t) {
    v->p = t->data;
    for (int d = 0; d < 3; d++) v->s[d] = t->strides[d];
}

/* What both directions check: args, q, k, v, y (an output when y_out) and lse; fills c. */
static it_status fa_setup(const char *kn, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                          const it_tdesc *v, const it_tdesc *y, bool y_out, const it_tdesc *lse, fa_ctx *c) {
    memset(c, 0, sizeof *c);
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: args is NULL", kn);
    it_status st;
    if ((st = it_cpu_check_desc(kn, "q", q, 4)) || (st = it_cpu_check_desc(kn, "k", k, 4))) return st;
    if (q->ndim != 4 || k->ndim != 4)
        return it_error(IT_ERR_INVALID_ARG, "%s: q and k must be 4-D (B, H, T, D) and (B, Hkv, S, D), got ndim %d, %d",
                        kn, q->ndim, k->ndim);
    it_dtype dt = q->dtype;
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_BF16 && dt != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "%s: q is %s; this kernel takes fp32, bf16 or fp16", kn, it_dtype_name(dt));
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3], Hkv = k->shape[1], S = k->shape[2];
    if (Hkv == 0 ? H != 0 : H % Hkv != 0)
        return it_error(IT_ERR_INVALID_ARG, "%s: k has %lld heads, which must divide q's %lld", kn, (long long)Hkv,
                        (long long)H);
    int64_t sq[4] = {B, H, T, D}, skv[4] = {B, Hkv, S, D};
    if ((st = fa_check_view(kn, "q", q, sq, dt, false)) || (st = fa_check_view(kn, "k", k, skv, dt, false)) ||
        (st = fa_check_view(kn, "v", v, skv, dt, false)) || (st = fa_check_view(kn, "y", y, sq, dt, y_out)))
        return st;
    if ((st = it_cpu_check_desc(kn, "lse", lse, 3))) return st;
    if (lse->ndim != 3 || lse->shape[0] != B || lse->shape[1] != H || lse->shape[2] != T)
        return it_error(IT_ERR_INVALID_ARG, "%s: lse must be (%lld, %lld, %lld)", kn, (long long)B, (long long)H,
                        (long long)T);
    if (lse->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_INVALID_ARG, "%s: lse is %s; it is fp32", kn, it_dtype_name(lse->dtype));
    if ((T > 1 && lse->strides[2] != 1) || (H > 1 && lse->strides[1] != T) || (B > 1 && lse->strides[0] != H * T))
        return it_error(IT_ERR_INVALID_ARG, "%s: lse must be contiguous (strides %lld, %lld, %lld)", kn,
                        (long long)lse->strides[0], (long long)lse->strides[1], (long long)lse->strides[2]);
    if (D > FA_DMAX)
        return it_error(IT_ERR_UNSUPPORTED, "%s: head size %lld; this kernel takes up to %d", kn, (long long)D,
                        FA_DMAX);
    c->dt = dt;
    c->es = (int64_t)it_dtype_size(dt);
    c->B = B, c->H = H, c->Hkv = Hkv, c->T = T, c->S = S, c->D = D, c->Dp = fa_pad(D);
    c->r = Hkv > 0 ? H / Hkv : 0;
    c->nqb = (T + FA_BR - 1) / FA_BR, c->nkb = (S + FA_BC - 1) / FA_BC;
    c->scale = args->scale;
    c->causal = args->causal;
    c->off = fa_clamp(args->q_offset, -T, S);
    fa_set_view(&c->q, q);
    fa_set_view(&c->k, k);
    fa_set_view(&c->v, v);
    fa_set_view(&c->y, y);
    c->lse = lse->data;
    return IT_OK;
}

/* Every check of a call, the forward's when dy, dq, dk and dv are all NULL, else the
 * backward's; fills c for it. */
static it_status fa_prepare(const char *kn, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                            const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                            const it_tdesc *dq, const it_tdesc *dk, const it_tdesc *dv, fa_ctx *c) {
    bool bwd = dy != NULL || dq != NULL || dk != NULL || dv != NULL;
    it_status st = fa_setup(kn, args, q, k, v, y, !bwd, lse, c);
    if (st || !bwd) return st;
    int64_t sq[4] = {c->B, c->H, c->T, c->D}, skv[4] = {c->B, c->Hkv, c->S, c->D};
    if ((st = fa_check_view(kn, "dy", dy, sq, c->dt, false)) || (st = fa_check_view(kn, "dq", dq, sq, c->dt, true)) ||
        (st = fa_check_view(kn, "dk", dk, skv, c->dt, true)) || (st = fa_check_view(kn, "dv", dv, skv, c->dt, true)))
        return st;
    fa_set_view(&c->dy, dy);
    fa_set_view(&c->dq, dq);
    fa_set_view(&c->dk, dk);
    fa_set_view(&c->dv, dv);
    return IT_OK;
}

IT_API it_status it_cpu_flash_attention_check(const char *kernel, const it_flash_args *args, const it_tdesc *q,
                                              const it_tdesc *k, const it_tdesc *v, const it_tdesc *y,
                                              const it_tdesc *dy, const it_tdesc *lse, const it_tdesc *dq,
                                              const it_tdesc *dk, const it_tdesc *dv) {
    fa_ctx c;
    return fa_prepare(kernel, args, q, k, v, y, dy, lse, dq, dk, dv, &c);
}

/* ---------------------------------------------------------------- running the tasks */

/* The threads a call runs on: OpenMP's, for work worth waking them for (T S D per head). */
static int fa_threads(const fa_ctx *c) {
    return c->B * c->H * c->T * fa_max(c->S, 1) * fa_max(c->D, 1) >= 65536 ? omp_get_max_threads() : 1;
}

/* Runs `n` tasks of each of the (up to three) passes, one after the other, on nt threads,
 * each with its own scratch of fa_ws_floats floats after `shared` floats that c->delta points
 * into when shared > 0. Dynamic scheduling: with the tasks numbered heaviest first within a
 * head, causal blocks share out evenly. */
static it_status fa_run(const char *kn, fa_ctx *c, int nt, int64_t shared, int passes, const fa_task_fn fn[3],
                        const int64_t n[3]) {
    int64_t per = fa_ws_floats(c), most = 0;
    for (int p = 0; p < passes; p++) most = fa_max(most, n[p]);
    nt = most > 1 ? nt : 1;
    shared = fa_pad(shared);
    int slot;
    float *ws = scratch_take((size_t)(shared + (int64_t)nt * per) * sizeof(float), &slot);
    if (ws == NULL) return it_error(IT_ERR_OOM, "%s: no memory for %d threads' scratch", kn, nt);
    c->delta = shared > 0 ? ws : NULL;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *mine = ws + shared + (int64_t)omp_get_thread_num() * per;
        for (int p = 0; p < passes; p++) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < n[p]; t++) fn[p](c, mine, t);
        }
    }
    scratch_give(ws, slot);
    return IT_OK;
}

/* ---------------------------------------------------------------- entry points */

it_status it_cpu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, it_tdesc *y, it_tdesc *lse) {
    (void)s;
    const char *kn = "flash_attention_fwd";
    fa_ctx c;
    it_status st = fa_prepare(kn, args, q, k, v, y, NULL, lse, NULL, NULL, NULL, &c);
    if (st || c.B * c.H * c.T == 0) return st;
    const fa_isa *isa = fa_pick();
    int nt = fa_threads(&c);
    c.gq = fa_group(c.B * c.H, c.nqb, nt, c.Dp), c.gk = 1;
    fa_task_fn fn[3] = {isa->fwd, NULL, NULL};
    int64_t n[3] = {c.B * c.H * fa_ceil(c.nqb, c.gq), 0, 0};
    return fa_run(kn, &c, nt, 0, 1, fn, n);
}

it_status it_cpu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                     it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    (void)s;
    const char *kn = "flash_attention_bwd";
    fa_ctx c;
    it_status st = fa_prepare(kn, args, q, k, v, y, dy, lse, dq, dk, dv, &c);
    if (st) return st;
    /* with no query rows, dk and dv are still written: zeros */
    if (c.B * c.Hkv * c.S == 0 && c.B * c.H * c.T == 0) return IT_OK;
    const fa_isa *isa = fa_pick();
    int nt = fa_threads(&c);
    c.gq = fa_group(c.B * c.H, c.nqb, nt, c.Dp), c.gk = fa_group(c.B * c.Hkv, c.nkb, nt, c.Dp);
    fa_task_fn fn[3] = {isa->delta, isa->dq, isa->dkv};
    int64_t n[3] = {c.B * c.H, c.B * c.H * fa_ceil(c.nqb, c.gq), c.B * c.Hkv * fa_ceil(c.nkb, c.gk)};
    return fa_run(kn, &c, nt, c.B * c.H * c.T, 3, fn, n);
}
