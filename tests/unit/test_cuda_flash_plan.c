/* The CUDA backend's flash attention planner (backends/cuda/flash_plan.c), on any machine (no
 * GPU, no CUDA toolkit needed), and the algorithm of its kernels:
 *  - plans for the layouts the core passes (GPT-2's q, k, v strided inside a (B, T, 3, H, D)
 *    buffer, LLaMA's (B, T, H, D) and (B, T, Hkv, D) with grouped kv heads, y into
 *    (B, T, H, D)), their views, tiles and grids;
 *  - every grid covers every query row (forward, dq) and every key (dk/dv) exactly once, and
 *    the blocks the kernels skip are fully masked;
 *  - shared memory within the smallest opt-in limit of the GPUs built for, at every head size
 *    1..256, opting in exactly above 48 KiB; what a device with less declines;
 *  - every decline, with its status and message;
 *  - a host executor that runs the three planned kernels' block loops as the device code does
 *    (a CTA's phases between barriers, thread by thread: the plan's tiles, the same shared
 *    memory carve-up in a buffer of exactly the planned bytes, the lanes' interleaved columns,
 *    the xor-butterfly row reductions, the online softmax, fmaf in the kernels' order), and
 *    compares y, lse, dq, dk, dv with straightforward fp64 attention: fp32, bf16, fp16; causal
 *    or not; q_offset positive, negative, past either end; T = 1, T not a multiple of the
 *    tile, S = 0, D = 0; a NaN reaching exactly the rows that see it. */
#include "cuda/flash_plan.c"

#include <stdint.h>

#include "infinitrain/backend.h"
#include "infinitrain/scalar/it_scalar_cast.h"
#include "it_test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ---------------------------------------------------------------- elements of the three dtypes */

static size_t esize(it_dtype dt) { return dt == IT_DTYPE_FP32 ? 4 : 2; }

static float ld_el(it_dtype dt, const void *base, int64_t off) {
    switch (dt) {
    case IT_DTYPE_BF16: return it_sc_bf16_to_fp32(((const uint16_t *)base)[off]);
    case IT_DTYPE_FP16: return it_sc_fp16_to_fp32(((const uint16_t *)base)[off]);
    default: return ((const float *)base)[off];
    }
}

static void st_el(it_dtype dt, void *base, int64_t off, float v) {
    switch (dt) {
    case IT_DTYPE_BF16: ((uint16_t *)base)[off] = it_sc_fp32_to_bf16(v); break;
    case IT_DTYPE_FP16: ((uint16_t *)base)[off] = it_sc_fp32_to_fp16(v); break;
    default: ((float *)base)[off] = v;
    }
}

static float ld_view(it_dtype dt, const cu_flash_view *v, int64_t b, int64_t h, int64_t r, int64_t d) {
    return ld_el(dt, v->data, cu_flash_at(v, b, h, r) + d);
}

/* ---------------------------------------------------------------- the host executor
 * Each kernel's CTA runs as the phases between its barriers, every thread of a phase in turn;
 * per-thread registers are arrays indexed by thread. */

/* __shfl_xor_sync over the TPR lanes of each row: every lane gets the same sum (max). */
static void row_reduce(float *x, int nt, int tpr, bool max) {
    float tmp[CU_FLASH_THREADS];
    for (int o = tpr / 2; o > 0; o >>= 1) {
        for (int i = 0; i < nt; i++) tmp[i] = max ? fmaxf(x[i], x[i ^ o]) : x[i] + x[i ^ o];
        memcpy(x, tmp, (size_t)nt * sizeof *x);
    }
}

/* fl_stage: rows [r0, r0 + n) of head h of batch b into R rows at pitch ld; the rest zero. */
static void stage(float *sm, int ld, it_dtype dt, const cu_flash_view *v, int64_t b, int64_t h, int64_t r0, int n,
                  int R, int D) {
    for (int e = 0; e < R * D; e++) {
        int r = e / D, d = e - r * D;
        sm[r * ld + d] = r < n ? ld_view(dt, v, b, h, r0 + r, d) : 0.0f;
    }
}

static float dot(const float *a, const float *b, int D) {
    float acc = 0.0f;
    for (int d = 0; d < D; d++) acc = fmaf(a[d], b[d], acc);
    return acc;
}

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t lse_at(const cu_flash_plan *p, int64_t b, int64_t h, int64_t t) { return (b * p->H + h) * p->T + t; }

/* Shared memory of exactly the planned bytes: a carve-up past them is an ASan error. */
static float *smem_of(const cu_flash_launch *l) { return malloc(l->smem > 0 ? l->smem : 1); }

static void exec_fwd(const cu_flash_plan *p) {
    const cu_flash_launch *L = &p->launch_fwd;
    if (!L->grid_x) return;
    const int BR = L->rows, BC = L->cols, TPR = L->tpr, NT = L->threads, NS = (BC + TPR - 1) / TPR;
    const int NO = p->dmax / TPR, ld = (int)p->ld, D = (int)p->D;
    float *smem = smem_of(L);
    float *sQ = smem, *sK = sQ + BR * ld, *sV = sK + BC * ld, *sP = sV + BC * ld;
    float *m = malloc(NT * sizeof *m), *l = malloc(NT * sizeof *l), *o = malloc((size_t)NT * NO * sizeof *o);
    float *s = malloc((size_t)NT * NS * sizeof *s), *red = malloc(NT * sizeof *red), *mn = malloc(NT * sizeof *mn);
    for (unsigned bz = 0; bz < L->grid_z; bz++)
        for (unsigned by = 0; by < L->grid_y; by++)
            for (unsigned bx = 0; bx < L->grid_x; bx++) {
                const int64_t qb = cu_flash_query_block(p, L, bx), h = by, b = bz, t0 = qb * BR, hk = h / p->group;
                const int rows = (int)imin(BR, p->T - t0);
                stage(sQ, ld, p->dtype, &p->q, b, h, t0, rows, BR, D);
                for (int i = 0; i < NT; i++) m[i] = -INFINITY, l[i] = 0.0f;
                for (int i = 0; i < NT * NO; i++) o[i] = 0.0f;
                const int64_t nkb = cu_flash_key_blocks(p, t0, rows, BC);
                for (int64_t kb = 0; kb < nkb; kb++) {
                    const int64_t j0 = kb * BC;
                    const int cols = (int)imin(BC, p->S - j0);
                    stage(sK, ld, p->dtype, &p->k, b, hk, j0, cols, BC, D);
                    stage(sV, ld, p->dtype, &p->v, b, hk, j0, cols, BC, D);
                    for (int tid = 0; tid < NT; tid++) {
                        const int r = tid / TPR, lane = tid % TPR;
                        float mb = -INFINITY;
                        for (int c = 0; c < NS; c++) {
                            const int jj = lane + c * TPR;
                            const float acc = jj < BC ? dot(sQ + r * ld, sK + jj * ld, D) : 0.0f;
                            const bool vis = r < rows && jj < cols && cu_flash_visible(p, t0 + r, j0 + jj);
                            s[tid * NS + c] = vis ? acc * p->scale : -INFINITY;
                            mb = fmaxf(mb, s[tid * NS + c]);
                        }
                        red[tid] = mb;
                    }
                    row_reduce(red, NT, TPR, true);
                    for (int tid = 0; tid < NT; tid++) {
                        const int r = tid / TPR, lane = tid % TPR;
                        mn[tid] = fmaxf(m[tid], red[tid]);
                        const float mu = mn[tid] == -INFINITY ? 0.0f : mn[tid];
                        float ls = 0.0f;
                        for (int c = 0; c < NS; c++) {
                            const int jj = lane + c * TPR;
                            const float pr = expf(s[tid * NS + c] - mu);
                            ls += pr;
                            if (jj < BC) sP[r * (BC + 1) + jj] = pr;
                        }
                        red[tid] = ls;
                    }
                    row_reduce(red, NT, TPR, false);
                    for (int tid = 0; tid < NT; tid++) {
                        const int r = tid / TPR, lane = tid % TPR;
                        const float alpha = expf(m[tid] - (mn[tid] == -INFINITY ? 0.0f : mn[tid]));
                        l[tid] = l[tid] * alpha + red[tid];
                        m[tid] = mn[tid];
                        float *oi = o + (size_t)tid * NO;
                        for (int i = 0; i < NO; i++) oi[i] *= alpha;
                        for (int jj = 0; jj < cols; jj++) {
                            const float pj = sP[r * (BC + 1) + jj];
                            for (int i = 0; i < NO; i++) {
                                const int d = lane + i * TPR;
                                if (d < D) oi[i] = fmaf(pj, sV[jj * ld + d], oi[i]);
                            }
                        }
                    }
                }
                for (int tid = 0; tid < NT; tid++) {
                    const int r = tid / TPR, lane = tid % TPR;
                    if (r >= rows) continue;
                    const int64_t t = t0 + r;
                    const bool none = l[tid] == 0.0f;
                    for (int i = 0; i < NO; i++) {
                        const int d = lane + i * TPR;
                        if (d < D)
                            st_el(p->dtype, p->y.data, cu_flash_at(&p->y, b, h, t) + d,
                                  none ? 0.0f : o[(size_t)tid * NO + i] / l[tid]);
                    }
                    if (lane == 0)
                        p->lse[lse_at(p, b, h, t)] =
                            none ? -INFINITY : (m[tid] == -INFINITY ? 0.0f : m[tid]) + logf(l[tid]);
                }
            }
    free(smem), free(m), free(l), free(o), free(s), free(red), free(mn);
}

static void exec_dq(const cu_flash_plan *p) {
    const cu_flash_launch *L = &p->launch_dq;
    if (!L->grid_x) return;
    const int BR = L->rows, BC = L->cols, TPR = L->tpr, NT = L->threads, NS = (BC + TPR - 1) / TPR;
    const int NO = p->dmax / TPR, ld = (int)p->ld, D = (int)p->D;
    float *smem = smem_of(L);
    float *sQ = smem, *sdY = sQ + BR * ld, *sK = sdY + BR * ld, *sV = sK + BC * ld, *sS = sV + BC * ld;
    float *lse = malloc(NT * sizeof *lse), *delta = malloc(NT * sizeof *delta);
    float *dq = malloc((size_t)NT * NO * sizeof *dq);
    for (unsigned bz = 0; bz < L->grid_z; bz++)
        for (unsigned by = 0; by < L->grid_y; by++)
            for (unsigned bx = 0; bx < L->grid_x; bx++) {
                const int64_t qb = cu_flash_query_block(p, L, bx), h = by, b = bz, t0 = qb * BR, hk = h / p->group;
                const int rows = (int)imin(BR, p->T - t0);
                stage(sQ, ld, p->dtype, &p->q, b, h, t0, rows, BR, D);
                stage(sdY, ld, p->dtype, &p->dy, b, h, t0, rows, BR, D);
                for (int tid = 0; tid < NT; tid++) {
                    const int r = tid / TPR, lane = tid % TPR;
                    float part = 0.0f;
                    lse[tid] = 0.0f;
                    if (r < rows) {
                        for (int d = lane; d < D; d += TPR)
                            part = fmaf(sdY[r * ld + d], ld_view(p->dtype, &p->y, b, h, t0 + r, d), part);
                        lse[tid] = p->lse[lse_at(p, b, h, t0 + r)];
                    }
                    delta[tid] = part;
                }
                row_reduce(delta, NT, TPR, false);
                for (int i = 0; i < NT * NO; i++) dq[i] = 0.0f;
                const int64_t nkb = cu_flash_key_blocks(p, t0, rows, BC);
                for (int64_t kb = 0; kb < nkb; kb++) {
                    const int64_t j0 = kb * BC;
                    const int cols = (int)imin(BC, p->S - j0);
                    stage(sK, ld, p->dtype, &p->k, b, hk, j0, cols, BC, D);
                    stage(sV, ld, p->dtype, &p->v, b, hk, j0, cols, BC, D);
                    for (int tid = 0; tid < NT; tid++) {
                        const int r = tid / TPR, lane = tid % TPR;
                        for (int c = 0; c < NS; c++) {
                            const int jj = lane + c * TPR;
                            if (jj >= BC) continue;
                            const bool vis = r < rows && jj < cols && cu_flash_visible(p, t0 + r, j0 + jj);
                            float ds = 0.0f;
                            if (vis) {
                                const float sc = dot(sQ + r * ld, sK + jj * ld, D) * p->scale;
                                const float dp = dot(sdY + r * ld, sV + jj * ld, D);
                                ds = expf(sc - lse[tid]) * (dp - delta[tid]);
                            }
                            sS[r * (BC + 1) + jj] = ds;
                        }
                    }
                    for (int tid = 0; tid < NT; tid++) {
                        const int r = tid / TPR, lane = tid % TPR;
                        for (int jj = 0; jj < cols; jj++) {
                            const float dsj = sS[r * (BC + 1) + jj];
                            for (int i = 0; i < NO; i++) {
                                const int d = lane + i * TPR;
                                if (d < D)
                                    dq[(size_t)tid * NO + i] = fmaf(dsj, sK[jj * ld + d], dq[(size_t)tid * NO + i]);
                            }
                        }
                    }
                }
                for (int tid = 0; tid < NT; tid++) {
                    const int r = tid / TPR, lane = tid % TPR;
                    if (r >= rows) continue;
                    for (int i = 0; i < NO; i++) {
                        const int d = lane + i * TPR;
                        if (d < D)
                            st_el(p->dtype, p->dq.data, cu_flash_at(&p->dq, b, h, t0 + r) + d,
                                  dq[(size_t)tid * NO + i] * p->scale);
                    }
                }
            }
    free(smem), free(lse), free(delta), free(dq);
}

static void exec_kv(const cu_flash_plan *p) {
    const cu_flash_launch *L = &p->launch_kv;
    if (!L->grid_x) return;
    const int BC = L->rows, BR = L->cols, TPR = L->tpr, NT = L->threads, NS = (BR + TPR - 1) / TPR;
    const int NO = p->dmax / TPR, ld = (int)p->ld, D = (int)p->D;
    float *smem = smem_of(L);
    float *sK = smem, *sV = sK + BC * ld, *sQ = sV + BC * ld, *sdY = sQ + BR * ld;
    float *sP = sdY + BR * ld, *sdS = sP + BC * (BR + 1), *sL = sdS + BC * (BR + 1), *sD = sL + BR;
    float *part = malloc(NT * sizeof *part), *dk = malloc((size_t)NT * NO * sizeof *dk);
    float *dv = malloc((size_t)NT * NO * sizeof *dv);
    for (unsigned bz = 0; bz < L->grid_z; bz++)
        for (unsigned by = 0; by < L->grid_y; by++)
            for (unsigned bx = 0; bx < L->grid_x; bx++) {
                const int64_t kb = bx, hk = by, b = bz, j0 = kb * BC;
                const int cols = (int)imin(BC, p->S - j0);
                stage(sK, ld, p->dtype, &p->k, b, hk, j0, cols, BC, D);
                stage(sV, ld, p->dtype, &p->v, b, hk, j0, cols, BC, D);
                for (int i = 0; i < NT * NO; i++) dk[i] = dv[i] = 0.0f;
                const int64_t qb0 = cu_flash_first_query_block(p, j0, BR), nqb = (p->T + BR - 1) / BR;
                for (int64_t g = 0; g < p->group; g++) {
                    const int64_t h = hk * p->group + g;
                    for (int64_t qb = qb0; qb < nqb; qb++) {
                        const int64_t t0 = qb * BR;
                        const int rows = (int)imin(BR, p->T - t0);
                        stage(sQ, ld, p->dtype, &p->q, b, h, t0, rows, BR, D);
                        stage(sdY, ld, p->dtype, &p->dy, b, h, t0, rows, BR, D);
                        for (int tid = 0; tid < NT; tid++) {
                            const int c = tid / TPR, lane = tid % TPR;
                            part[tid] = 0.0f;
                            if (c < rows)
                                for (int d = lane; d < D; d += TPR)
                                    part[tid] =
                                        fmaf(sdY[c * ld + d], ld_view(p->dtype, &p->y, b, h, t0 + c, d), part[tid]);
                        }
                        row_reduce(part, NT, TPR, false);
                        for (int tid = 0; tid < NT; tid++) {
                            const int c = tid / TPR, lane = tid % TPR;
                            if (c < BR && lane == 0) {
                                sD[c] = part[tid];
                                sL[c] = c < rows ? p->lse[lse_at(p, b, h, t0 + c)] : 0.0f;
                            }
                        }
                        for (int tid = 0; tid < NT; tid++) {
                            const int c = tid / TPR, lane = tid % TPR;
                            for (int n = 0; n < NS; n++) {
                                const int i = lane + n * TPR;
                                if (i >= BR) continue;
                                const bool vis = c < cols && i < rows && cu_flash_visible(p, t0 + i, j0 + c);
                                float pr = 0.0f, ds = 0.0f;
                                if (vis) {
                                    const float sc = dot(sK + c * ld, sQ + i * ld, D) * p->scale;
                                    const float dp = dot(sV + c * ld, sdY + i * ld, D);
                                    pr = expf(sc - sL[i]);
                                    ds = pr * (dp - sD[i]);
                                }
                                sP[c * (BR + 1) + i] = pr;
                                sdS[c * (BR + 1) + i] = ds;
                            }
                        }
                        for (int tid = 0; tid < NT; tid++) {
                            const int c = tid / TPR, lane = tid % TPR;
                            for (int i = 0; i < rows; i++) {
                                const float pi = sP[c * (BR + 1) + i], dsi = sdS[c * (BR + 1) + i];
                                for (int n = 0; n < NO; n++) {
                                    const int d = lane + n * TPR;
                                    if (d < D) {
                                        size_t at = (size_t)tid * NO + n;
                                        dv[at] = fmaf(pi, sdY[i * ld + d], dv[at]);
                                        dk[at] = fmaf(dsi, sQ[i * ld + d], dk[at]);
                                    }
                                }
                            }
                        }
                    }
                }
                for (int tid = 0; tid < NT; tid++) {
                    const int c = tid / TPR, lane = tid % TPR;
                    if (c >= cols) continue;
                    for (int n = 0; n < NO; n++) {
                        const int d = lane + n * TPR;
                        if (d >= D) continue;
                        st_el(p->dtype, p->dk.data, cu_flash_at(&p->dk, b, hk, j0 + c) + d,
                              dk[(size_t)tid * NO + n] * p->scale);
                        st_el(p->dtype, p->dv.data, cu_flash_at(&p->dv, b, hk, j0 + c) + d, dv[(size_t)tid * NO + n]);
                    }
                }
            }
    free(smem), free(part), free(dk), free(dv);
}

/* ---------------------------------------------------------------- cases: buffers in the core's layouts */

enum { LAYOUT_GPT2, LAYOUT_BTHD, LAYOUT_BHTD };

typedef struct fcase {
    const char *name;
    int64_t B, H, Hkv, T, S, D;
    it_dtype dt;
    int layout; /* GPT2: q, k, v inside (B, T, 3, H, D) (Hkv == H, S == T); BTHD: (B, T, H, D) each;
                   BHTD: contiguous (B, H, T, D) each. y and dy (B, T, H, D) but for BHTD. */
    bool causal;
    int64_t q_offset;
} fcase;

typedef struct fbufs {
    void *qkv, *k_buf, *v_buf, *y, *dy, *dqkv, *dk_buf, *dv_buf;
    float *lse;
    it_tdesc q, k, v, y_d, dy_d, dq, dk, dv, lse_d;
    it_flash_args args;
} fbufs;

static it_tdesc view4(void *data, it_dtype dt, int64_t B, int64_t Hh, int64_t R, int64_t D, int64_t sb, int64_t sh,
                      int64_t sr) {
    return (it_tdesc){.data = data, .dtype = dt, .ndim = 4, .shape = {B, Hh, R, D}, .strides = {sb, sh, sr, 1}};
}

static void *alloc_el(it_dtype dt, int64_t n) { return calloc((size_t)(n > 0 ? n : 1), esize(dt)); }

/* q, k, v views of a case inside its buffers (base + element offset) */
static void layout_views(const fcase *c, void *qbuf, void *kbuf, void *vbuf, it_tdesc *q, it_tdesc *k, it_tdesc *v) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, T = c->T, S = c->S, D = c->D;
    size_t es = esize(c->dt);
    switch (c->layout) {
    case LAYOUT_GPT2:
        *q = view4(qbuf, c->dt, B, H, T, D, T * 3 * H * D, D, 3 * H * D);
        *k = view4((char *)qbuf + (size_t)(H * D) * es, c->dt, B, H, T, D, T * 3 * H * D, D, 3 * H * D);
        *v = view4((char *)qbuf + (size_t)(2 * H * D) * es, c->dt, B, H, T, D, T * 3 * H * D, D, 3 * H * D);
        break;
    case LAYOUT_BTHD:
        *q = view4(qbuf, c->dt, B, H, T, D, T * H * D, D, H * D);
        *k = view4(kbuf, c->dt, B, Hkv, S, D, S * Hkv * D, D, Hkv * D);
        *v = view4(vbuf, c->dt, B, Hkv, S, D, S * Hkv * D, D, Hkv * D);
        break;
    default:
        *q = view4(qbuf, c->dt, B, H, T, D, H * T * D, T * D, D);
        *k = view4(kbuf, c->dt, B, Hkv, S, D, Hkv * S * D, S * D, D);
        *v = view4(vbuf, c->dt, B, Hkv, S, D, Hkv * S * D, S * D, D);
    }
}

static const float SENTINEL = -12345.0f; /* outputs start as it: every element must be written */

static void fill(it_dtype dt, void *buf, int64_t n, bool random) {
    for (int64_t i = 0; i < n; i++) st_el(dt, buf, i, random ? frand() : SENTINEL);
}

static void bufs_make(const fcase *c, fbufs *f, float scale) {
    memset(f, 0, sizeof *f);
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, T = c->T, S = c->S, D = c->D;
    int64_t nq = c->layout == LAYOUT_GPT2 ? B * T * 3 * H * D : B * H * T * D, nkv = B * Hkv * S * D,
            ny = B * H * T * D;
    f->qkv = alloc_el(c->dt, nq), f->dqkv = alloc_el(c->dt, nq);
    f->k_buf = alloc_el(c->dt, nkv), f->v_buf = alloc_el(c->dt, nkv);
    f->dk_buf = alloc_el(c->dt, nkv), f->dv_buf = alloc_el(c->dt, nkv);
    f->y = alloc_el(c->dt, ny), f->dy = alloc_el(c->dt, ny);
    f->lse = calloc((size_t)(B * H * T > 0 ? B * H * T : 1), sizeof(float));
    fill(c->dt, f->qkv, nq, true), fill(c->dt, f->k_buf, nkv, true), fill(c->dt, f->v_buf, nkv, true);
    fill(c->dt, f->dy, ny, true);
    fill(c->dt, f->y, ny, false), fill(c->dt, f->dqkv, nq, false);
    fill(c->dt, f->dk_buf, nkv, false), fill(c->dt, f->dv_buf, nkv, false);
    for (int64_t i = 0; i < B * H * T; i++) f->lse[i] = SENTINEL;
    layout_views(c, f->qkv, f->k_buf, f->v_buf, &f->q, &f->k, &f->v);
    layout_views(c, f->dqkv, f->dk_buf, f->dv_buf, &f->dq, &f->dk, &f->dv);
    if (c->layout == LAYOUT_BHTD) {
        f->y_d = view4(f->y, c->dt, B, H, T, D, H * T * D, T * D, D);
        f->dy_d = view4(f->dy, c->dt, B, H, T, D, H * T * D, T * D, D);
    } else {
        f->y_d = view4(f->y, c->dt, B, H, T, D, T * H * D, D, H * D);
        f->dy_d = view4(f->dy, c->dt, B, H, T, D, T * H * D, D, H * D);
    }
    f->lse_d =
        (it_tdesc){.data = f->lse, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {B, H, T}, .strides = {H * T, T, 1}};
    f->args = (it_flash_args){.scale = scale, .causal = c->causal, .q_offset = c->q_offset};
}

static void bufs_free(fbufs *f) {
    free(f->qkv), free(f->dqkv), free(f->k_buf), free(f->v_buf), free(f->dk_buf), free(f->dv_buf);
    free(f->y), free(f->dy), free(f->lse);
}

/* ---------------------------------------------------------------- the fp64 reference */

static double dld(const it_tdesc *t, int64_t b, int64_t h, int64_t r, int64_t d) {
    return ld_el(t->dtype, t->data, b * t->strides[0] + h * t->strides[1] + r * t->strides[2] + d);
}

/* Straight from backend.h's formulas, on the inputs as stored, with the unclamped q_offset. */
typedef struct fref {
    double *y, *lse, *dq, *dk, *dv; /* contiguous (B, H, T, D), (B, H, T), (B, Hkv, S, D) */
} fref;

static bool ref_sees(const fbufs *f, int64_t t, int64_t j) {
    if (!f->args.causal) return true;
    return j - t <= f->args.q_offset; /* j <= t + q_offset, without overflow for any q_offset */
}

static void reference(const fcase *c, const fbufs *f, fref *R) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, T = c->T, S = c->S, D = c->D, G = Hkv ? H / Hkv : 1;
    R->y = calloc((size_t)(B * H * T * D + 1), sizeof(double));
    R->lse = calloc((size_t)(B * H * T + 1), sizeof(double));
    R->dq = calloc((size_t)(B * H * T * D + 1), sizeof(double));
    R->dk = calloc((size_t)(B * Hkv * S * D + 1), sizeof(double));
    R->dv = calloc((size_t)(B * Hkv * S * D + 1), sizeof(double));
    double *s = malloc((size_t)(S + 1) * sizeof *s), *dp = malloc((size_t)(S + 1) * sizeof *dp);
    double scale = f->args.scale;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t hk = h / G;
            for (int64_t t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++) acc += dld(&f->q, b, h, t, d) * dld(&f->k, b, hk, j, d);
                    s[j] = scale * acc;
                    if (ref_sees(f, t, j) && s[j] > mx) mx = s[j];
                }
                double sum = 0;
                for (int64_t j = 0; j < S; j++) sum += ref_sees(f, t, j) ? exp(s[j] - mx) : 0.0;
                int64_t row = (b * H + h) * T + t;
                R->lse[row] = sum > 0 ? mx + log(sum) : -INFINITY;
                double *y = R->y + row * D, *dq = R->dq + row * D;
                if (sum == 0) continue; /* no key: y = 0, no gradient */
                for (int64_t j = 0; j < S; j++) s[j] = ref_sees(f, t, j) ? exp(s[j] - mx) / sum : 0.0;
                for (int64_t j = 0; j < S; j++)
                    if (ref_sees(f, t, j))
                        for (int64_t d = 0; d < D; d++) y[d] += s[j] * dld(&f->v, b, hk, j, d);
                /* backward: delta = dy . y = sum_j p_j (dy . v_j) */
                double delta = 0;
                for (int64_t j = 0; j < S; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++) acc += dld(&f->dy_d, b, h, t, d) * dld(&f->v, b, hk, j, d);
                    dp[j] = acc;
                    delta += s[j] * acc;
                }
                for (int64_t j = 0; j < S; j++) {
                    if (!ref_sees(f, t, j)) continue;
                    double ds = s[j] * (dp[j] - delta);
                    double *dk = R->dk + ((b * Hkv + hk) * S + j) * D, *dv = R->dv + ((b * Hkv + hk) * S + j) * D;
                    for (int64_t d = 0; d < D; d++) {
                        dq[d] += scale * ds * dld(&f->k, b, hk, j, d);
                        dk[d] += scale * ds * dld(&f->q, b, h, t, d);
                        dv[d] += s[j] * dld(&f->dy_d, b, h, t, d);
                    }
                }
            }
        }
    free(s), free(dp);
}

static void ref_free(fref *R) { free(R->y), free(R->lse), free(R->dq), free(R->dk), free(R->dv); }

/* got (a (B, Hh, R, D) view) against ref (contiguous): |got - ref| <= tol (1 + |ref|); every
 * element written (no sentinel left). Returns the largest error. */
static double compare(const char *cname, const char *what, const it_tdesc *got, const double *ref, double tol) {
    int64_t B = got->shape[0], Hh = got->shape[1], R = got->shape[2], D = got->shape[3];
    double worst = 0;
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hh; h++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t d = 0; d < D; d++) {
                    double g = dld(got, b, h, r, d), e = ref[((b * Hh + h) * R + r) * D + d];
                    double err = fabs(g - e);
                    bool ok = g != (double)SENTINEL && err <= tol * (1 + fabs(e));
                    if (err > worst) worst = err;
                    if (!ok && bad++ < 3)
                        fprintf(stderr, "  %s: %s[%lld, %lld, %lld, %lld] = %.9g, fp64 %.9g\n", cname, what,
                                (long long)b, (long long)h, (long long)r, (long long)d, g, e);
                }
    CHECK_MSG(bad == 0, "%s: %d elements of %s differ (tolerance %g)", cname, bad, what, tol);
    return worst;
}

static double compare_lse(const char *cname, const fcase *c, const float *lse, const double *ref, double tol) {
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < c->B * c->H * c->T; i++) {
        bool ok;
        if (isinf(ref[i]))
            ok = isinf(lse[i]) && lse[i] < 0;
        else {
            double err = fabs(lse[i] - ref[i]);
            if (err > worst) worst = err;
            ok = err <= tol * (1 + fabs(ref[i]));
        }
        if (!ok && bad++ < 3)
            fprintf(stderr, "  %s: lse[%lld] = %.9g, fp64 %.9g\n", cname, (long long)i, lse[i], ref[i]);
    }
    CHECK_MSG(bad == 0, "%s: %d lse differ", cname, bad);
    return worst;
}

static double tol_of(it_dtype dt) { return dt == IT_DTYPE_FP32 ? 2e-5 : dt == IT_DTYPE_FP16 ? 4e-3 : 2e-2; }

static int cases_run;

/* Plan, execute forward then backward on the host, compare all five outputs with fp64. */
static void run_case(const fcase *c) {
    fbufs f;
    bufs_make(c, &f, c->D > 0 ? 1.0f / sqrtf((float)c->D) : 1.0f);
    cu_flash_plan p;
    it_status st = cu_flash_plan_fwd(&f.args, &f.q, &f.k, &f.v, &f.y_d, &f.lse_d, CU_FLASH_SMEM_MIN_OPTIN, &p);
    CHECK_MSG(st == IT_OK, "%s: forward plan: %s", c->name, it_last_error());
    if (st == IT_OK) {
        exec_fwd(&p);
        cu_flash_plan pb;
        st = cu_flash_plan_bwd(&f.args, &f.q, &f.k, &f.v, &f.y_d, &f.dy_d, &f.lse_d, &f.dq, &f.dk, &f.dv,
                               CU_FLASH_SMEM_MIN_OPTIN, &pb);
        CHECK_MSG(st == IT_OK, "%s: backward plan: %s", c->name, it_last_error());
        if (st == IT_OK) {
            exec_kv(&pb);
            exec_dq(&pb);
            fref R;
            reference(c, &f, &R);
            double tol = tol_of(c->dt);
            double e[5] = {compare(c->name, "y", &f.y_d, R.y, tol), compare_lse(c->name, c, f.lse, R.lse, tol),
                           compare(c->name, "dq", &f.dq, R.dq, tol), compare(c->name, "dk", &f.dk, R.dk, tol),
                           compare(c->name, "dv", &f.dv, R.dv, tol)};
            printf("  %-34s %s D=%-3lld max |err| y %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", c->name,
                   it_dtype_name(c->dt), (long long)c->D, e[0], e[1], e[2], e[3], e[4]);
            ref_free(&R);
            cases_run++;
        }
    }
    bufs_free(&f);
}

static void executor_cases(void) {
    const it_dtype F = IT_DTYPE_FP32, BF = IT_DTYPE_BF16, H16 = IT_DTYPE_FP16;
    const fcase cases[] = {
        /* GPT-2: q, k, v inside (B, T, 3, H, D), causal; T = 37 below one query tile */
        {"gpt2 (B,T,3,H,D) causal", 2, 3, 3, 37, 37, 16, F, LAYOUT_GPT2, true, 0},
        {"gpt2 D=64 T=70", 1, 2, 2, 70, 70, 64, F, LAYOUT_GPT2, true, 0},
        {"gpt2 bf16", 2, 2, 2, 45, 45, 32, BF, LAYOUT_GPT2, true, 0},
        /* LLaMA: grouped kv heads H = 6, Hkv = 2, (B, T, H, D); T over two tiles, not a multiple */
        {"llama gqa 6/2 causal", 2, 6, 2, 70, 70, 32, F, LAYOUT_BTHD, true, 0},
        {"llama gqa 6/2 bf16", 1, 6, 2, 70, 70, 32, BF, LAYOUT_BTHD, true, 0},
        {"llama gqa 6/2 fp16", 1, 6, 2, 33, 33, 32, H16, LAYOUT_BTHD, true, 0},
        {"llama gqa 4/1 D=128", 1, 4, 1, 40, 40, 128, F, LAYOUT_BTHD, true, 0},
        /* T = 1: one row (decoding); sees every key (q_offset = S - 1) or a prefix */
        {"T=1 q_offset=S-1", 2, 4, 2, 1, 9, 16, F, LAYOUT_BTHD, true, 8},
        {"T=1 q_offset=3", 1, 2, 1, 1, 9, 16, F, LAYOUT_BTHD, true, 3},
        {"T=1 S=1", 1, 1, 1, 1, 1, 8, F, LAYOUT_BHTD, true, 0},
        /* q_offset: a later slice of queries; negative (first rows see nothing); past the ends */
        {"q_offset=30 T=20 S=50", 1, 2, 2, 20, 50, 16, F, LAYOUT_BHTD, true, 30},
        {"q_offset=-5", 1, 2, 1, 40, 40, 16, F, LAYOUT_BHTD, true, -5},
        {"q_offset=-70 (nothing seen)", 1, 2, 1, 40, 70, 16, F, LAYOUT_BHTD, true, -70},
        {"q_offset=INT64_MAX", 1, 2, 1, 30, 40, 16, F, LAYOUT_BHTD, true, INT64_MAX},
        {"q_offset=INT64_MIN", 1, 2, 1, 30, 40, 16, F, LAYOUT_BHTD, true, INT64_MIN},
        /* not causal, T != S */
        {"not causal T=50 S=77", 2, 2, 1, 50, 77, 24, F, LAYOUT_BTHD, false, 0},
        {"not causal bf16", 1, 3, 3, 20, 35, 48, BF, LAYOUT_BHTD, false, 0},
        /* the head-size buckets: 64 (D <= 64), 128, 256 and sizes that are not powers of two */
        {"D=1", 1, 2, 2, 19, 19, 1, F, LAYOUT_BHTD, true, 0},
        {"D=100 (bucket 128)", 1, 2, 1, 40, 40, 100, F, LAYOUT_BTHD, true, 0},
        {"D=160 (bucket 256)", 1, 2, 2, 21, 21, 160, F, LAYOUT_BTHD, true, 0},
        {"D=256", 1, 2, 1, 35, 35, 256, F, LAYOUT_BTHD, true, 0},
        {"D=256 fp16 not causal", 1, 1, 1, 17, 20, 256, H16, LAYOUT_BHTD, false, 0},
        /* edges: no key at all (y = 0, lse = -inf), head size 0 (lse only), no query */
        {"S=0", 1, 2, 1, 5, 0, 8, F, LAYOUT_BHTD, false, 0},
        {"D=0", 1, 2, 1, 5, 7, 0, F, LAYOUT_BHTD, false, 0},
        {"T=0", 1, 2, 1, 0, 7, 8, F, LAYOUT_BHTD, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    CHECK_MSG(cases_run == (int)(sizeof cases / sizeof cases[0]), "%d of %zu executor cases ran", cases_run,
              sizeof cases / sizeof cases[0]);
}

/* A NaN reaches the rows that see it. Causal T = S = 80, v[70, 3] and k[75, 0] NaN: rows of
 * the first query tile (0..63) never stage the key block holding them and are exact; rows
 * 70..74 see v[70] (column 3 NaN, the others exact: k[75] is masked for them); rows 75.. see
 * k[75] (all NaN, lse NaN). Rows 64..69 share a key block with them: column 3 may be NaN
 * through 0 * NaN (backend.h: a masked key's NaN need not reach, and may), the rest exact. */
static void nan_reaches_its_rows(void) {
    fcase c = {"nan", 1, 1, 1, 80, 80, 16, IT_DTYPE_FP32, LAYOUT_BHTD, true, 0};
    fbufs f;
    bufs_make(&c, &f, 0.25f);
    st_el(c.dt, f.v_buf, 70 * c.D + 3, NAN);
    st_el(c.dt, f.k_buf, 75 * c.D + 0, NAN);
    cu_flash_plan p;
    CHECK_OK(cu_flash_plan_fwd(&f.args, &f.q, &f.k, &f.v, &f.y_d, &f.lse_d, CU_FLASH_SMEM_MIN_OPTIN, &p));
    CHECK(p.launch_fwd.rows == 64 && p.launch_fwd.cols == 32);
    exec_fwd(&p);
    fref R;
    reference(&c, &f, &R);
    int bad = 0;
    for (int64_t t = 0; t < c.T; t++) {
        bool all_nan = t >= 75;
        if (all_nan ? !isnan(f.lse[t]) : !(fabs(f.lse[t] - R.lse[t]) <= 1e-5 * (1 + fabs(R.lse[t])))) bad++;
        for (int64_t d = 0; d < c.D; d++) {
            double g = dld(&f.y_d, 0, 0, t, d), e = R.y[t * c.D + d];
            bool wrong;
            if (all_nan || (t >= 70 && d == 3))
                wrong = !isnan(g);
            else if (t >= 64 && d == 3)
                wrong = !isnan(g) && !(fabs(g - e) <= 1e-5 * (1 + fabs(e)));
            else
                wrong = !(fabs(g - e) <= 1e-5 * (1 + fabs(e)));
            if (wrong && bad++ < 3)
                fprintf(stderr, "  nan: y[%lld, %lld] = %g, fp64 %g\n", (long long)t, (long long)d, g, e);
        }
    }
    CHECK_MSG(bad == 0, "%d elements of y or lse wrong around a NaN", bad);
    ref_free(&R);
    bufs_free(&f);
}

/* ---------------------------------------------------------------- the plan itself */

/* A well-formed (B, H, T, D) / (B, Hkv, S, D) call on dummy buffers (never read: planning only). */
static char dummy[64];
typedef struct call {
    it_tdesc q, k, v, y, dy, dq, dk, dv, lse;
    it_flash_args a;
} call;

static call call_of(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S, int64_t D, it_dtype dt) {
    call c;
    c.q = view4(dummy, dt, B, H, T, D, H * T * D, T * D, D);
    c.k = view4(dummy, dt, B, Hkv, S, D, Hkv * S * D, S * D, D);
    c.v = c.k, c.y = c.q, c.dy = c.q, c.dq = c.q, c.dk = c.k, c.dv = c.k;
    c.lse = (it_tdesc){.data = dummy, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {B, H, T}, .strides = {H * T, T, 1}};
    c.a = (it_flash_args){.scale = 0.125f, .causal = true, .q_offset = 0};
    return c;
}

static it_status plan_fwd(const call *c, size_t limit, cu_flash_plan *p) {
    return cu_flash_plan_fwd(&c->a, &c->q, &c->k, &c->v, &c->y, &c->lse, limit, p);
}
static it_status plan_bwd(const call *c, size_t limit, cu_flash_plan *p) {
    return cu_flash_plan_bwd(&c->a, &c->q, &c->k, &c->v, &c->y, &c->dy, &c->lse, &c->dq, &c->dk, &c->dv, limit, p);
}

/* GPT-2 124M's call: B = 4, T = 1024, H = 12, D = 64 inside (B, T, 3, H, D). */
static void gpt2_plan(void) {
    fcase c = {"gpt2", 4, 12, 12, 1024, 1024, 64, IT_DTYPE_BF16, LAYOUT_GPT2, true, 0};
    it_tdesc q, k, v;
    char *base = (char *)dummy;
    layout_views(&c, base, NULL, NULL, &q, &k, &v);
    it_tdesc y = view4(base, c.dt, 4, 12, 1024, 64, 1024 * 768, 64, 768);
    it_tdesc lse = {
        .data = base, .dtype = IT_DTYPE_FP32, .ndim = 3, .shape = {4, 12, 1024}, .strides = {12288, 1024, 1}};
    it_flash_args a = {.scale = 0.125f, .causal = true};
    cu_flash_plan p;
    CHECK_OK(cu_flash_plan_fwd(&a, &q, &k, &v, &y, &lse, 232448, &p)); /* H100's 227 KiB */
    CHECK(p.B == 4 && p.H == 12 && p.Hkv == 12 && p.group == 1 && p.T == 1024 && p.S == 1024 && p.D == 64);
    CHECK(p.dmax == 64 && p.ld == 65 && p.dtype == IT_DTYPE_BF16);
    /* k is q + C elements, v q + 2C; rows 3C apart, heads D, batches T * 3C */
    CHECK((char *)p.k.data - (char *)p.q.data == 768 * 2 && (char *)p.v.data - (char *)p.q.data == 1536 * 2);
    CHECK(p.q.sb == 1024 * 2304 && p.q.sh == 64 && p.q.sr == 2304 && p.k.sr == 2304 && p.v.sh == 64);
    CHECK(cu_flash_at(&p.k, 1, 2, 3) == 1024 * 2304 + 2 * 64 + 3 * 2304);
    CHECK(p.y.sb == 1024 * 768 && p.y.sh == 64 && p.y.sr == 768);
    /* forward 64 x 32 tiles, 4 lanes a row: 16 x 12 x 4 CTAs of 256 threads; 41728 bytes */
    CHECK(p.launch_fwd.rows == 64 && p.launch_fwd.cols == 32 && p.launch_fwd.tpr == 4 && p.launch_fwd.threads == 256);
    CHECK(p.launch_fwd.grid_x == 16 && p.launch_fwd.grid_y == 12 && p.launch_fwd.grid_z == 4);
    CHECK(p.launch_fwd.smem == 4 * (64 * 65 + 2 * 32 * 65 + 64 * 33) && !p.launch_fwd.opt_in);
    /* dk/dv: 64 keys per CTA over 1024 / 64 key blocks; dq 64 rows per CTA */
    CHECK(p.launch_kv.rows == 64 && p.launch_kv.cols == 32 && p.launch_kv.grid_x == 16 && p.launch_kv.grid_y == 12);
    CHECK(p.launch_dq.rows == 64 && p.launch_dq.grid_x == 16 && p.launch_kv.opt_in && p.launch_dq.opt_in);
    /* causal: the longest query block first */
    CHECK(cu_flash_query_block(&p, &p.launch_fwd, 0) == 15 && cu_flash_query_block(&p, &p.launch_fwd, 15) == 0);
    /* query block 0 sees key blocks 0, 1 (keys 0..63) only; block 15 all 32 */
    CHECK(cu_flash_key_blocks(&p, 0, 64, 32) == 2 && cu_flash_key_blocks(&p, 960, 64, 32) == 32);
}

/* LLaMA-3-like GQA: q (B, T, H, D), k and v (B, T, Hkv, D), H = 6, Hkv = 2. */
static void llama_plan(void) {
    fcase c = {"llama", 2, 6, 2, 100, 100, 128, IT_DTYPE_BF16, LAYOUT_BTHD, true, 0};
    it_tdesc q, k, v;
    layout_views(&c, dummy, dummy + 8, dummy + 16, &q, &k, &v);
    call cl = call_of(2, 6, 2, 100, 100, 128, IT_DTYPE_BF16);
    cl.q = q, cl.k = k, cl.v = v;
    cl.y = cl.dy = cl.dq = q, cl.dk = k, cl.dv = v;
    cu_flash_plan p;
    CHECK_OK(plan_bwd(&cl, CU_FLASH_SMEM_MIN_OPTIN, &p));
    CHECK(p.group == 3 && p.dmax == 128 && p.k.sr == 2 * 128 && p.k.sh == 128 && p.q.sr == 6 * 128);
    /* kv grid over Hkv, q grids over H */
    CHECK(p.launch_kv.grid_y == 2 && p.launch_dq.grid_y == 6 && p.launch_fwd.grid_y == 6);
    CHECK(p.launch_kv.grid_x == 4 && p.launch_kv.rows == 32 && p.launch_dq.grid_x == 4 && p.launch_fwd.grid_x == 2);
    CHECK(p.launch_fwd.opt_in && p.launch_fwd.smem == 4 * (64 * 129 + 2 * 32 * 129 + 64 * 33));
}

/* Every query row in exactly one forward / dq CTA, every key in exactly one dk/dv CTA; the
 * key blocks past cu_flash_key_blocks and the query blocks before cu_flash_first_query_block
 * are fully masked, the ones visited are not. */
static void grids_cover(void) {
    const int64_t Ts[] = {1, 2, 31, 32, 33, 63, 64, 65, 100, 130};
    const int64_t Ds[] = {16, 64, 65, 128, 200, 256};
    const int64_t offs[] = {0, 5, -3, -40, 200};
    int plans = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++)
            for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
                for (int causal = 0; causal < 2; causal++) {
                    int64_t T = Ts[ti], S = Ts[(ti + 3) % 10], B = 2, H = 4, Hkv = 2, D = Ds[di];
                    call c = call_of(B, H, Hkv, T, S, D, IT_DTYPE_FP32);
                    c.a.causal = causal, c.a.q_offset = offs[oi];
                    cu_flash_plan p;
                    it_status st = plan_bwd(&c, CU_FLASH_SMEM_MIN_OPTIN, &p);
                    CHECK_MSG(st == IT_OK, "T %lld S %lld D %lld: %s", (long long)T, (long long)S, (long long)D,
                              it_last_error());
                    if (st) continue;
                    plans++;
                    const cu_flash_launch *ls[2] = {&p.launch_fwd, &p.launch_dq};
                    int bad = 0;
                    for (int li = 0; li < 2; li++) {
                        const cu_flash_launch *l = ls[li];
                        int *seen = calloc((size_t)(B * H * T), sizeof *seen);
                        if (l->grid_y != H || l->grid_z != B) bad++;
                        for (unsigned bz = 0; bz < l->grid_z; bz++)
                            for (unsigned by = 0; by < l->grid_y; by++)
                                for (unsigned bx = 0; bx < l->grid_x; bx++) {
                                    int64_t qb = cu_flash_query_block(&p, l, bx), t0 = qb * l->rows;
                                    int64_t rows = imin(l->rows, T - t0);
                                    if (qb < 0 || rows <= 0) bad++;
                                    for (int64_t r = 0; r < rows; r++) seen[(bz * H + by) * T + t0 + r]++;
                                    /* key blocks past the visited ones: masked for every row */
                                    int64_t nkb = cu_flash_key_blocks(&p, t0, rows, l->cols);
                                    for (int64_t j = nkb * l->cols; j < S; j++)
                                        for (int64_t r = 0; r < rows; r++) bad += cu_flash_visible(&p, t0 + r, j);
                                    /* the last visited block has a key some row sees */
                                    if (nkb > 0) {
                                        bool any = false;
                                        for (int64_t j = (nkb - 1) * l->cols; j < imin(nkb * l->cols, S); j++)
                                            for (int64_t r = 0; r < rows; r++) any |= cu_flash_visible(&p, t0 + r, j);
                                        bad += !any;
                                    }
                                }
                        for (int64_t i = 0; i < B * H * T; i++) bad += seen[i] != 1;
                        free(seen);
                    }
                    const cu_flash_launch *l = &p.launch_kv;
                    int *seen = calloc((size_t)(B * Hkv * S + 1), sizeof *seen);
                    if (S > 0 && (l->grid_y != Hkv || l->grid_z != B)) bad++;
                    for (unsigned bz = 0; bz < l->grid_z; bz++)
                        for (unsigned by = 0; by < l->grid_y; by++)
                            for (unsigned bx = 0; bx < l->grid_x; bx++) {
                                int64_t j0 = (int64_t)bx * l->rows, cols = imin(l->rows, S - j0);
                                if (cols <= 0) bad++;
                                for (int64_t c2 = 0; c2 < cols; c2++) seen[(bz * Hkv + by) * S + j0 + c2]++;
                                /* query rows before the first visited block see none of these keys */
                                int64_t qb0 = cu_flash_first_query_block(&p, j0, l->cols);
                                for (int64_t t = 0; t < imin(qb0 * l->cols, T); t++)
                                    for (int64_t c2 = 0; c2 < cols; c2++) bad += cu_flash_visible(&p, t, j0 + c2);
                                /* the first visited block has a row that sees key j0 */
                                if (qb0 * l->cols < T) {
                                    bool any = false;
                                    for (int64_t t = qb0 * l->cols; t < imin((qb0 + 1) * l->cols, T); t++)
                                        any |= cu_flash_visible(&p, t, j0);
                                    bad += !any;
                                }
                            }
                    for (int64_t i = 0; i < B * Hkv * S; i++) bad += seen[i] != 1;
                    free(seen);
                    CHECK_MSG(bad == 0, "T %lld S %lld D %lld causal %d q_offset %lld: %d coverage errors",
                              (long long)T, (long long)S, (long long)D, causal, (long long)offs[oi], bad);
                }
    CHECK(plans == 10 * 6 * 5 * 2);
}

/* Shared memory at every head size: within the smallest opt-in limit of sm_80+ GPUs (99 KiB),
 * opting in exactly above the 48 KiB default; 256 threads; the bucket's tiles. A device that
 * allows only 48 KiB still takes the small head sizes and declines the others by name. */
static void smem_every_d(void) {
    int opt_in_from = -1, fit48 = 0, fit48_max = -1;
    for (int64_t D = 0; D <= CU_FLASH_MAX_D; D++) {
        call c = call_of(1, 2, 1, 300, 300, D, IT_DTYPE_BF16);
        cu_flash_plan p;
        it_status st = plan_bwd(&c, CU_FLASH_SMEM_MIN_OPTIN, &p);
        CHECK_MSG(st == IT_OK, "D = %lld: %s", (long long)D, it_last_error());
        if (st) continue;
        const cu_flash_launch *ls[3] = {&p.launch_fwd, &p.launch_kv, &p.launch_dq};
        bool within48 = true;
        for (int i = 0; i < 3; i++) {
            CHECK_MSG(ls[i]->smem <= CU_FLASH_SMEM_MIN_OPTIN && ls[i]->opt_in == (ls[i]->smem > CU_FLASH_SMEM_DEFAULT),
                      "D = %lld kernel %d: %zu bytes", (long long)D, i, ls[i]->smem);
            CHECK(ls[i]->threads == CU_FLASH_THREADS && 32 % ls[i]->tpr == 0);
            if (ls[i]->opt_in && opt_in_from < 0) opt_in_from = (int)D;
            within48 = within48 && !ls[i]->opt_in;
        }
        CHECK(p.dmax >= D && (D <= 64 || p.dmax / 2 < D));
        /* the smem the kernels carve, from the plan's tiles */
        CHECK(p.launch_fwd.smem == 4 * (size_t)cu_flash_fwd_smem_floats(p.launch_fwd.rows, p.launch_fwd.cols, D + 1));
        CHECK(p.launch_dq.smem == 4 * (size_t)cu_flash_dq_smem_floats(p.launch_dq.rows, p.launch_dq.cols, D + 1));
        CHECK(p.launch_kv.smem == 4 * (size_t)cu_flash_kv_smem_floats(p.launch_kv.cols, p.launch_kv.rows, D + 1));
        /* a device with no opt-in (48 KiB) takes exactly the calls whose tiles fit it */
        st = plan_fwd(&c, CU_FLASH_SMEM_DEFAULT, &p);
        if (within48) {
            CHECK_OK(st);
            fit48++;
            fit48_max = (int)D;
        } else
            CHECK_ERR(st, IT_ERR_UNSUPPORTED, "bytes of shared memory per block, the device allows 49152");
    }
    printf("  shared memory: opt-in from D = %d; a 48 KiB device takes %d head sizes, D <= 40 and up to %d\n",
           opt_in_from, fit48, fit48_max);
    CHECK(opt_in_from == 41 && fit48_max >= 64); /* the small heads need no opt-in at all */
    /* a device below the tiles: declined with the numbers */
    call c = call_of(1, 2, 1, 8, 8, 256, IT_DTYPE_FP32);
    cu_flash_plan p;
    CHECK_ERR(plan_fwd(&c, 65536, &p), IT_ERR_UNSUPPORTED, "kernel needs");
}

/* Every decline and refusal, with its status and message. */
static void declines(void) {
    cu_flash_plan p;
    call ok = call_of(2, 6, 2, 10, 12, 32, IT_DTYPE_FP32), c;
    CHECK_OK(plan_fwd(&ok, CU_FLASH_SMEM_MIN_OPTIN, &p));
    CHECK_OK(plan_bwd(&ok, CU_FLASH_SMEM_MIN_OPTIN, &p));
    const size_t L = CU_FLASH_SMEM_MIN_OPTIN;

    /* D too large */
    c = call_of(1, 2, 2, 4, 4, 257, IT_DTYPE_FP32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "head size D = 257 is larger than the kernels' 256");
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "head size D = 257");
    /* Hkv not dividing H */
    c = call_of(1, 6, 4, 4, 4, 8, IT_DTYPE_FP32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "Hkv = 4 kv heads do not divide H = 6");
    c = call_of(1, 6, 0, 4, 4, 8, IT_DTYPE_FP32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "Hkv = 0 kv heads");
    /* a non-unit last stride, input or output */
    c = ok, c.k.strides[3] = 2;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "k has last stride 2");
    c = ok, c.y.strides[3] = 3;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "y has last stride 3");
    c = ok, c.dq.strides[3] = 0;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "dq has last stride 0");
    c = ok, c.dy.strides[3] = 2;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "dy has last stride 2");
    /* D = 1 takes any last stride */
    c = call_of(1, 2, 2, 4, 4, 1, IT_DTYPE_FP32), c.q.strides[3] = 7;
    CHECK_OK(plan_fwd(&c, L, &p));
    /* lse: dtype, contiguity */
    c = ok, c.lse.dtype = IT_DTYPE_BF16;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "lse dtype bfloat16, expected float32");
    c = ok, c.lse.dtype = IT_DTYPE_FP64;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "lse dtype float64, expected float32");
    c = ok, c.lse.strides[2] = 2;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "is not contiguous");
    c = ok, c.lse.strides[0] = 0;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "is not contiguous");
    /* mixed dtypes; dtypes the kernels do not take */
    c = ok, c.k.dtype = IT_DTYPE_BF16;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "k dtype bfloat16 differs from q's float32");
    c = ok, c.y.dtype = IT_DTYPE_FP16;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "y dtype float16 differs from q's float32");
    c = ok, c.dv.dtype = IT_DTYPE_BF16;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "dv dtype bfloat16 differs");
    c = call_of(1, 2, 2, 4, 4, 8, IT_DTYPE_FP64);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "dtype float64 (the kernels take float32, bfloat16, float16)");
    c = call_of(1, 2, 2, 4, 4, 8, IT_DTYPE_I32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "dtype int32");
    /* an output written twice through a 0 stride */
    c = ok, c.y.strides[1] = 0;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "output y has stride 0 on dim 1");
    c = ok, c.dk.strides[2] = 0;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_UNSUPPORTED, "output dk has stride 0 on dim 2");
    /* an input may broadcast (k shared by the batch) */
    c = ok, c.k.strides[0] = 0, c.v.strides[0] = 0;
    CHECK_OK(plan_fwd(&c, L, &p));
    /* beyond CUDA's grid: 65536 batches */
    c = call_of(65536, 1, 1, 4, 4, 8, IT_DTYPE_FP32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "grid (1, 1, 65536) is beyond CUDA's");
    c = call_of(1, 70000, 70000, 4, 4, 8, IT_DTYPE_FP32);
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_UNSUPPORTED, "the forward grid (1, 70000, 1)");
    /* malformed calls: refused, not declined */
    CHECK_ERR(cu_flash_plan_fwd(NULL, &ok.q, &ok.k, &ok.v, &ok.y, &ok.lse, L, &p), IT_ERR_INVALID_ARG, "args is NULL");
    CHECK_ERR(cu_flash_plan_fwd(&ok.a, &ok.q, NULL, &ok.v, &ok.y, &ok.lse, L, &p), IT_ERR_INVALID_ARG, "k is NULL");
    c = ok, c.q.ndim = 3;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "q must be 4-D, got ndim 3");
    c = ok, c.lse.ndim = 4;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "lse must be 3-D");
    c = ok, c.v.shape[2] = 11;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "v is (2, 2, 11, 32), expected k's (B, Hkv, S, D)");
    c = ok, c.k.shape[3] = 16, c.v.shape[3] = 16;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "k is (2, 2, 12, 16)");
    c = ok, c.y.shape[2] = 9;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "y is (2, 6, 9, 32)");
    c = ok, c.lse.shape[1] = 2;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "lse is (2, 2, 10)");
    c = ok, c.dk.shape[1] = 6;
    CHECK_ERR(plan_bwd(&c, L, &p), IT_ERR_INVALID_ARG, "dk is (2, 6, 12, 32)");
    c = ok, c.q.strides[1] = -1;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "negative");
    c = ok, c.q.data = NULL;
    CHECK_ERR(plan_fwd(&c, L, &p), IT_ERR_INVALID_ARG, "q.data is NULL");
    /* empty tensors may have no data */
    c = call_of(1, 2, 1, 0, 0, 8, IT_DTYPE_FP32);
    c.q.data = c.k.data = c.v.data = c.y.data = c.lse.data = NULL;
    CHECK_OK(plan_fwd(&c, L, &p));
    CHECK(p.launch_fwd.grid_x == 0 && p.launch_kv.grid_x == 0 && p.launch_dq.grid_x == 0);
    /* q_offset clamped to [-T, S] */
    c = ok, c.a.q_offset = INT64_MAX;
    CHECK_OK(plan_fwd(&c, L, &p));
    CHECK(p.q_offset == 12);
    c.a.q_offset = INT64_MIN;
    CHECK_OK(plan_fwd(&c, L, &p));
    CHECK(p.q_offset == -10);
}

int main(void) {
    gpt2_plan();
    llama_plan();
    grids_cover();
    smem_every_d();
    declines();
    executor_cases();
    nan_reaches_its_rows();
    return it_test_report("test_cuda_flash_plan");
}
