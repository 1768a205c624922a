/* The packed sgemm's driver, shared by the CPU backend's own fp32 GEMMs (sgemm_avx512.c,
 * sgemm_avx2.c): the scratch buffers, the loop nests and the threads. Included once by each,
 * after it has defined, for its instruction set:
 *
 *   SGEMM_TARGET                 the function attribute that enables it
 *   MR, NR, KC, NC, MA           the tile (MR x NR), the packed blocks (KC x NC of op(B),
 *                                MA x KC of a transposed op(A))
 *   KC1, KCB                     the deepest product summed in one k block (KC1 >= KC: the
 *                                blocks are then KC1 x NC), max(KC, KC1)
 *   kernel(tc, kc, pa, ars, pb, c, ldc, mr, nr, alpha, beta, first)
 *                                one MR x NR tile of C (see sgemm_avx512.c's kernel_tile)
 *   pack_a(ta, a, lda, i0, mr, k0, kc, pa)   an (mr <= MR, kc) panel of op(A), k-major
 *   pack_b(tb, b, ldb, k0, kc, j0, nr, pb)   a (kc, nr <= NR) panel of op(B), NR wide
 *   copy_tail_rows(a, lda, i0, mr, k0, kc, dst)   a short last panel of an untransposed A
 *   min64(a, b)
 *   sgemm_small(...), SMALL_K, SNR   the unpacked path for small products, its deepest k and
 *                                the width up to which it takes a product on one thread
 *   SGEMM_ISA                    the IT_CPU_SGEMM_* value that selects this kernel
 *   SGEMM_SWAP_ROWS              the most rows a product is swapped with (sgemm_product)
 *
 * Every element of C is summed by one thread, k blocks in order, whatever the number of
 * threads: the results are bitwise the same for every thread count. */
#ifndef IT_CPU_SGEMM_DRIVER_H
#define IT_CPU_SGEMM_DRIVER_H

/* ------------------------------------------------------------------ scratch buffers */

/* Packing buffers are kept between calls (cpu_scratch.h). */
#include "cpu/cpu_scratch.h"

/* ------------------------------------------------------------------ driver */

/* Rows shared by a team (see sgemm_threads): for each thread, the 8-row panels [front,
 * back) of its share that nobody has taken yet, packed in one word so that one
 * compare-and-swap claims panels. The owner takes panels one at a time from the front (it
 * streams its rows in order); a thread with nothing left takes half of what another has
 * left, from the back. Each panel is computed by exactly one thread. */
enum { SHARE_MAX_T = 64 };
typedef struct share {
    int T;
    /* front << 32 | back, per thread, a cache line each; two sets, for k blocks in turn */
    struct {
        _Alignas(64) uint64_t w;
    } left[2][SHARE_MAX_T];
} share;

static uint64_t share_range(int64_t pans, int t, int T) {
    return (uint64_t)(pans * t / T) << 32 | (uint64_t)(pans * (t + 1) / T);
}

/* Claims the next panel from the front of *w; false when none is left. */
static bool take_front(uint64_t *w, int64_t *p) {
    uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t f = v >> 32, b = v & 0xffffffffu;
        if (f >= b) return false;
        if (__atomic_compare_exchange_n(w, &v, v + ((uint64_t)1 << 32), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *p = (int64_t)f;
            return true;
        }
    }
}

/* For the tests: panels taken from another thread's share so far, and a function every
 * thread of a sharing team calls first (test_sgemm_forms delays one to force stealing). */
static uint64_t g_stolen;
static void (*g_share_hook)(int thread);

/* Claims the back half (rounded up) of what is left in *w as [*p0, *p1). */
static bool take_back(uint64_t *w, int64_t *p0, int64_t *p1) {
    uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t f = v >> 32, b = v & 0xffffffffu;
        if (f >= b) return false;
        uint64_t nb = b - (b - f + 1) / 2;
        if (__atomic_compare_exchange_n(w, &v, (f << 32) | nb, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *p0 = (int64_t)nb;
            *p1 = (int64_t)b;
            __atomic_fetch_add(&g_stolen, b - nb, __ATOMIC_RELAXED);
            return true;
        }
    }
}

/* The depth of a product's k blocks: the whole of k up to KC1, else KC. Each block is summed
 * from zero and then added to C, so this fixes the order of summation: it depends on k
 * alone, never on the thread count. */
static int64_t k_block(int64_t k) { return k <= KC1 ? k : KC; }

/* The B block of the tall loop nest: kb (k_block) deep, nb wide, nb * kb within KC1 x NC for
 * a product of one k block and KC x NC for a deeper one (and a multiple of NR). */
static void b_block(int64_t k, int64_t *kb, int64_t *nb) {
    *kb = k_block(k);
    *nb = (k <= KC1 ? KC1 : KC) * NC / *kb / NR * NR;
}

/* One thread's whole product: C (m, n) = alpha op(A) op(B) + beta C, with its own packing
 * buffers bbuf (KCB x NC rounded up to panels) and abuf (MA x KCB). tc: C is stored
 * transposed, element (i, j) at c[j * ldc + i] (the swapped form, see it_cpu_sgemm_avx512).
 *
 * Short products (m <= MA, the rows of a training batch) pack all of a transposed op(A)'s
 * rows for a k block once and keep them for every block of columns; the B block is the
 * inner one. Tall ones (weight gradients: m in the thousands) keep the B block and pack one
 * A panel at a time; when k is shorter than KC1 their B block is as much wider, so that
 * the A panels (packed again for every block of columns) are packed fewer times. An
 * untransposed A is never packed (only its short last panel copied). Either way each
 * operand's k block is packed once per block of the other, and the micro-kernel and the
 * order of summation are the same.
 *
 * sh != NULL: called by every thread of a team for the whole product, whose rows they
 * share (the tall loop nest): each thread packs each B block, computes the panels it
 * claims (see struct share), and waits at a barrier for the others before the next block,
 * so that every element is still summed by one thread, k blocks in order. */
SGEMM_TARGET static void sgemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                                      bool tc, float *bbuf, float *abuf, share *sh) {
    /* op(A)'s 8-row panel i of the k block at pc, as the kernel reads it (pa, ars): an
     * untransposed A in place (its tail copied once into abuf), a transposed one packed */
#define A_PANEL(i, pc, kc, packed, pa, ars)                                                                            \
    do {                                                                                                               \
        if (ta) {                                                                                                      \
            pa = (packed);                                                                                             \
            ars = 0;                                                                                                   \
        } else if ((i) + MR <= m) {                                                                                    \
            pa = a + (i)*lda + (pc);                                                                                   \
            ars = lda;                                                                                                 \
        } else {                                                                                                       \
            pa = abuf;                                                                                                 \
            ars = (kc);                                                                                                \
        }                                                                                                              \
    } while (0)
    /* C's tile at row i, column j */
#define C_AT(i, j) (tc ? c + (j)*ldc + (i) : c + (i)*ldc + (j))
    int64_t tail = m - m % MR, kblk = k_block(k); /* the short panel's first row, if any; the k blocks' depth */
    if (m <= MA && sh == NULL) {
        for (int64_t pc = 0; pc < k; pc += kblk) {
            int64_t kc = min64(kblk, k - pc);
            if (ta)
                for (int64_t i = 0; i < m; i += MR) pack_a(ta, a, lda, i, (int)min64(MR, m - i), pc, kc, abuf + i * kc);
            else if (tail < m)
                copy_tail_rows(a, lda, tail, (int)(m - tail), pc, kc, abuf);
            for (int64_t jc = 0; jc < n; jc += NC) {
                int64_t nc = min64(NC, n - jc), npan = (nc + NR - 1) / NR;
                for (int64_t q = 0; q < npan; q++)
                    pack_b(tb, b, ldb, pc, kc, jc + q * NR, (int)min64(NR, nc - q * NR), bbuf + q * kblk * NR);
                for (int64_t i = 0; i < m; i += MR) {
                    const float *pa;
                    int64_t ars;
                    A_PANEL(i, pc, kc, abuf + i * kc, pa, ars);
                    for (int64_t q = 0; q < npan; q++)
                        kernel(tc, kc, pa, ars, bbuf + q * kblk * NR, C_AT(i, jc + q * NR), ldc, (int)min64(MR, m - i),
                               (int)min64(NR, nc - q * NR), alpha, beta, pc == 0);
                }
            }
        }
        return;
    }
    /* the B block: kb deep (each k block's panels kb * NR apart), nb wide (b_block) */
    int64_t kb, nb, pans = (m + MR - 1) / MR, blk = 0;
    b_block(k, &kb, &nb);
    int me = sh ? omp_get_thread_num() : 0;
    for (int64_t jc = 0; jc < n; jc += nb) {
        int64_t nc = min64(nb, n - jc), npan = (nc + NR - 1) / NR;
        for (int64_t pc = 0; pc < k; pc += kb, blk++) {
            int64_t kc = min64(kb, k - pc);
            for (int64_t q = 0; q < npan; q++)
                pack_b(tb, b, ldb, pc, kc, jc + q * NR, (int)min64(NR, nc - q * NR), bbuf + q * kb * NR);
            /* the rows: all of them, or (shared) this thread's panels, then others' left-overs */
            int set = (int)(blk & 1);
            if (sh && me == 0) /* the other set, last used before the last barrier: for the next block */
                for (int t = 0; t < sh->T; t++) sh->left[(blk + 1) & 1][t].w = share_range(pans, t, sh->T);
            int64_t p0 = 0, p1 = pans;
            for (;;) {
                if (sh) {
                    if (take_front(&sh->left[set][me].w, &p0)) {
                        p1 = p0 + 1;
                    } else {
                        bool got = false;
                        for (int d = 1; d < sh->T && !got; d++)
                            got = take_back(&sh->left[set][(me + d) % sh->T].w, &p0, &p1);
                        if (!got) break;
                    }
                }
                for (int64_t i = p0 * MR; i < p1 * MR; i += MR) {
                    int mr = (int)min64(MR, m - i);
                    if (ta)
                        pack_a(ta, a, lda, i, mr, pc, kc, abuf);
                    else if (mr < MR)
                        copy_tail_rows(a, lda, i, mr, pc, kc, abuf);
                    const float *pa;
                    int64_t ars;
                    A_PANEL(i, pc, kc, abuf, pa, ars);
                    for (int64_t q = 0; q < npan; q++)
                        kernel(tc, kc, pa, ars, bbuf + q * kb * NR, C_AT(i, jc + q * NR), ldc, mr,
                               (int)min64(NR, nc - q * NR), alpha, beta, pc == 0);
                }
                if (!sh) break;
            }
            if (sh) {
                /* every row of this k block is done before any starts the next */
#pragma omp barrier
            }
        }
    }

#undef C_AT
#undef A_PANEL
}

/* The product on every thread; tc as for sgemm_serial. */
static bool sgemm_threads(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                          const float *b, int64_t ldb, float beta, float *c, int64_t ldc, bool tc) {
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* A team costs microseconds to start: below ~2 M multiply-adds one thread is faster. */
    if ((double)m * (double)n * (double)k < 2.0e6) threads = 1;
    if (threads < 1) threads = 1;
    _Static_assert(MA >= MR, "abuf holds a short last A panel too");
    size_t per = (size_t)KCB * ((NC + NR - 1) / NR * NR) + (size_t)MA * KCB; /* floats per thread */
    int slot;
    float *buf = scratch_take(per * (size_t)threads * sizeof(float), &slot);
    if (buf == NULL) return false;
    /* Threads share C out in blocks that need no locks: whole 48-column panels
     * when op(A) is the smaller operand (each thread then reads all of A, and packs its own
     * part of B), whole 8-row panels otherwise (each packs all of B). Column blocks of an
     * untransposed A that stays in cache cost next to nothing to cut finer, so there each
     * thread's share is four blocks handed out as threads come free: a core that the host
     * slows down then does less instead of leaving the other idle at the end. (With A in
     * DRAM, as lm_head's 51 MB gradient, every block would read it again: 329 -> 294
     * GFLOP/s.) Which thread computes a block does not change its bits. */
    bool split_n = m * k < k * n;
    int64_t unit = split_n ? NR : MR, len = split_n ? n : m, pans = (len + unit - 1) / unit;
    /* Rows are shared with stealing (struct share) through the tall loop nest, which packs
     * a transposed A per panel and B block: chosen when that packs A no more often than
     * each thread's own share would (A untransposed, each share tall, or one B block).
     * Measured on GPT-2's step replayed, 2 threads: the threads of a static split waited
     * ~21 ms a step for each other in these products (one core is often slower). */
    int64_t kb0, nb0;
    b_block(k, &kb0, &nb0);
    share sh_state;
    share *sh = !split_n && threads > 1 && threads <= SHARE_MAX_T && (!ta || m > (int64_t)MA * threads || n <= nb0)
                    ? &sh_state
                    : NULL;
    /* the C block of rows (split_n false) or columns [lo, hi) */
#define C_PART(lo) (split_n != tc ? c + (lo) : c + (lo)*ldc)
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        float *bbuf = buf + per * (size_t)t, *abuf = bbuf + (size_t)KCB * ((NC + NR - 1) / NR * NR);
        if (sh != NULL) {
#pragma omp single
            {
                sh->T = T;
                for (int u = 0; u < T; u++) sh->left[0][u].w = share_range(pans, u, T);
            } /* (implied barrier) */
        }
        /* A (<= 4 MB) stays in cache between blocks; blocks of at least four panels, and
         * of whole NC-wide column blocks when there are enough of them */
        bool fine = split_n && !ta && m * k <= (int64_t)1 << 20;
        int64_t g = pans >= (int64_t)T * 4 * (NC / NR) ? NC / NR : 1, gp = (pans + g - 1) / g;
        int64_t blocks = min64(min64(pans / 4, (int64_t)T * 4), gp);
        if (sh != NULL) {
            if (g_share_hook != NULL) g_share_hook(t);
            sgemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, tc, bbuf, abuf, sh);
        } else if (fine && blocks > T) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t blk = 0; blk < blocks; blk++) {
                int64_t lo = gp * blk / blocks * g * unit, hi = min64(gp * (blk + 1) / blocks * g * unit, len);
                if (lo < hi)
                    sgemm_serial(ta, tb, m, hi - lo, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta,
                                 C_PART(lo), ldc, tc, bbuf, abuf, NULL);
            }
        } else {
            int64_t lo = pans * t / T * unit, hi = min64(pans * (t + 1) / T * unit, len);
            if (lo < hi && split_n)
                sgemm_serial(ta, tb, m, hi - lo, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta, C_PART(lo),
                             ldc, tc, bbuf, abuf, NULL);
            else if (lo < hi)
                sgemm_serial(ta, tb, hi - lo, n, k, alpha, ta ? a + lo : a + lo * lda, lda, b, ldb, beta, C_PART(lo),
                             ldc, tc, bbuf, abuf, NULL);
        }
    }
#undef C_PART
    scratch_give(buf, slot);
    return true;
}

/* ------------------------------------------------------------------ entry */

/* This kernel's mode (IT_CPU_SGEMM, sgemm_select.h), read once: 0 it does not serve, 1 it
 * chooses (small products unpacked, a few small deep ones to the BLAS, the rest packed),
 * 2 every product packed whatever its size (the tests use it to run the edge cases). */
static int g_mode;
static pthread_once_t g_mode_once = PTHREAD_ONCE_INIT;

static void mode_init(void) { g_mode = it_cpu_sgemm_isa() == SGEMM_ISA ? it_cpu_sgemm_every_size() ? 2 : 1 : 0; }

static int sgemm_mode(void) {
    pthread_once(&g_mode_once, mode_init);
    return g_mode;
}

/* The product through this kernel, in the form its shape calls for (swap < 0), or swapped
 * (> 0) or as asked (0) for the tests; false when it did nothing (the caller's BLAS then).
 *
 * Small products take the unpacked path (sgemm_small): those up to 64^3, and those at most
 * SNR wide and SMALL_K deep that run on one thread anyway (inside a batch's parallel loop,
 * or below the size where a team pays), as attention's at T = 256 (AVX-512: 256 x 64 x 256
 * on two threads 325 GFLOP/s against 273 packed). Wider ones keep the packed path, whose B
 * block stays in cache (256 x 256 x 64: 253 against 173). Products up to 64^3 deeper than
 * SMALL_K go to the BLAS.
 *
 * A batch's rows times a weight stored (out, in), as every linear layer's forward: op(B) =
 * W^T would go through the transposing pack, W coming from DRAM. Computed as C^T = op(B)^T
 * op(A)^T = W X^T instead, W is the A side, read in place by the micro-kernel, and only the
 * batch (k x m, in cache) is packed; the tiles are written to C transposed. The same
 * products are summed in the same order, so the bits are the same either way. Taken while
 * the batch has at most SGEMM_SWAP_ROWS rows and is the smaller operand (see each kernel). */
static bool sgemm_product(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0 || k <= 0) return false; /* the caller's BLAS handles the degenerate cases */
    double mnk = (double)m * (double)n * (double)k;
    if (sgemm_mode() != 2) {
        if (k <= SMALL_K && (mnk <= 64.0 * 64.0 * 64.0 || (n <= SNR && (mnk < 2.0e6 || omp_in_parallel())))) {
            sgemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            return true;
        }
        if (mnk <= 64.0 * 64.0 * 64.0) return false;
    }
    bool swapped = swap > 0 || (swap < 0 && tb && m >= 32 && m <= SGEMM_SWAP_ROWS && n >= 2 * m);
    if (swapped) return sgemm_threads(!tb, !ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc, true);
    return sgemm_threads(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
}

#endif
