/* The CUDA backend's flash attention: the flash_attention_fwd / _bwd slots (backend.h), in
 * the FlashAttention-2 form (Dao 2023). flash_plan.h describes the kernels, their tiles and
 * what they decline; flash_plan.c validates a call and plans the launches, and is unit-tested
 * on any machine (tests/unit/test_cuda_flash_plan.c, which also runs the planned block loops
 * of the three kernels on the host and compares them with fp64 attention).
 *
 * Plain CUDA C++: the two block products of each step (S = Q K^T, then O += P V; in the
 * backward also dP = dY V^T and the dQ, dK, dV updates) are fp32 fused multiply-adds from
 * shared memory, one score or one accumulator column per thread at a time. q, k, v (dy) are
 * read as fp32, bf16 or fp16 and widened exactly when staged; everything after is fp32 and
 * the outputs are rounded once. Deterministic: no atomics, fixed orders.
 *
 * What would make it faster (not done here; correctness and clarity first):
 *  - the block products on the tensor cores: WMMA / mma.sync (sm_80: m16n8k16 bf16 / fp16
 *    with fp32 accumulators; tf32 for fp32 inputs would change fp32 results) or wgmma on
 *    sm_90, with the tiles kept in the input dtype in shared memory (half the bytes, larger
 *    tiles) and swizzled instead of padded;
 *  - cp.async (TMA on sm_90) double buffering of the K / V tiles, so that the next block
 *    loads while this one computes; 16-byte vector loads when rows are aligned;
 *  - register blocking of the score product (each thread several rows by several keys) so
 *    that a shared-memory load feeds more than one multiply-add;
 *  - a per-row delta buffer computed once (the slot has no workspace: both backward kernels
 *    recompute delta = rowsum(dy * y) for the query rows they stage). */
#include <math.h>

#include "cu_device.cuh"
#include "flash_plan.h"

/* ---------------------------------------------------------------- device helpers */

__device__ static inline int64_t fl_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* Sum and max over the TPR consecutive lanes of a row (one warp holds whole rows). Every lane
 * of the warp calls them; each gets the same bits (the xor butterfly adds the same pairs). */
template <int TPR> __device__ static inline float fl_row_sum(float x) {
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
template <int TPR> __device__ static inline float fl_row_max(float x) {
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Rows [0, n) of a view (row stride sr from base) into R rows of shared memory at pitch ld,
 * widened to fp32; rows n..R-1 zero. All threads of the CTA take part (coalesced along d). */
template <typename T>
__device__ static inline void fl_stage(float *sm, int ld, const T *base, int64_t sr, int n, int R, int D) {
    for (int e = threadIdx.x; e < R * D; e += blockDim.x) {
        int r = e / D, d = e - r * D;
        sm[r * ld + d] = r < n ? cu_ld(base + (int64_t)r * sr + d) : 0.0f;
    }
}

/* a . b over D columns of two shared rows, in column order. */
__device__ static inline float fl_dot(const float *a, const float *b, int D) {
    float acc = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d++) acc = fmaf(a[d], b[d], acc);
    return acc;
}

/* lse of row t of head h of batch b (contiguous (B, H, T)). */
__device__ static inline int64_t fl_lse_at(const cu_flash_plan &p, int64_t b, int64_t h, int64_t t) {
    return (b * p.H + h) * p.T + t;
}

/* ---------------------------------------------------------------- forward */

/* CTA (query block, h, b); thread row r = threadIdx.x / TPR, lane = threadIdx.x % TPR. */
template <typename T, int DM>
__global__ void __launch_bounds__(CU_FLASH_THREADS) flash_fwd_kernel(const __grid_constant__ cu_flash_plan p) {
    constexpr int BR = CU_FLASH_FWD_BR(DM), BC = CU_FLASH_FWD_BC(DM), TPR = CU_FLASH_FWD_TPR(DM);
    constexpr int NS = (BC + TPR - 1) / TPR, NO = DM / TPR;
    static_assert(BR * TPR == CU_FLASH_THREADS && 32 % TPR == 0, "forward tile");
    extern __shared__ float fl_smem[];
    const int ld = (int)p.ld, D = (int)p.D;
    float *sQ = fl_smem, *sK = sQ + BR * ld, *sV = sK + BC * ld, *sP = sV + BC * ld; /* sP: BR x (BC + 1) */
    const int r = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    const int64_t qb = cu_flash_query_block(&p, &p.launch_fwd, blockIdx.x), h = blockIdx.y, b = blockIdx.z;
    const int64_t t0 = qb * BR, t = t0 + r, hk = h / p.group;
    const int rows = (int)fl_min(BR, p.T - t0);
    const T *k = (const T *)p.k.data + cu_flash_at(&p.k, b, hk, 0);
    const T *v = (const T *)p.v.data + cu_flash_at(&p.v, b, hk, 0);
    fl_stage(sQ, ld, (const T *)p.q.data + cu_flash_at(&p.q, b, h, t0), p.q.sr, rows, BR, D);

    float m = -INFINITY, l = 0.0f, o[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) o[i] = 0.0f;
    const int64_t nkb = cu_flash_key_blocks(&p, t0, rows, BC); /* masked blocks past it skipped */
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * BC;
        const int cols = (int)fl_min(BC, p.S - j0);
        __syncthreads(); /* the previous block's K, V, P are read (and Q staged) */
        fl_stage(sK, ld, k + j0 * p.k.sr, p.k.sr, cols, BC, D);
        fl_stage(sV, ld, v + j0 * p.v.sr, p.v.sr, cols, BC, D);
        __syncthreads();
        /* scores of this lane's keys; masked ones -inf (p = 0 below) */
        float s[NS], mb = -INFINITY;
#pragma unroll
        for (int c = 0; c < NS; c++) {
            const int jj = lane + c * TPR;
            const float acc = jj < BC ? fl_dot(sQ + r * ld, sK + jj * ld, D) : 0.0f;
            const bool vis = r < rows && jj < cols && cu_flash_visible(&p, t, j0 + jj);
            s[c] = vis ? acc * p.scale : -INFINITY;
            mb = fmaxf(mb, s[c]); /* fmaxf skips a NaN score: p = NaN carries it below */
        }
        /* online softmax: new running max, the old sums rescaled by alpha */
        const float mn = fmaxf(m, fl_row_max<TPR>(mb));
        const float mu = mn == -INFINITY ? 0.0f : mn; /* no key seen yet: any finite value */
        const float alpha = expf(m - mu);
        float ls = 0.0f;
#pragma unroll
        for (int c = 0; c < NS; c++) {
            const int jj = lane + c * TPR;
            const float pr = expf(s[c] - mu);
            ls += pr;
            if (jj < BC) sP[r * (BC + 1) + jj] = pr;
        }
        l = l * alpha + fl_row_sum<TPR>(ls);
        m = mn;
        __syncwarp(); /* row r's P is written by its own lanes, in this warp */
#pragma unroll
        for (int i = 0; i < NO; i++) o[i] *= alpha;
        for (int jj = 0; jj < cols; jj++) {
            const float pj = sP[r * (BC + 1) + jj];
#pragma unroll
            for (int i = 0; i < NO; i++) {
                const int d = lane + i * TPR;
                if (d < D) o[i] = fmaf(pj, sV[jj * ld + d], o[i]);
            }
        }
    }
    if (r < rows) {
        const bool none = l == 0.0f; /* no key seen: y = 0, lse = -inf */
        T *y = (T *)p.y.data + cu_flash_at(&p.y, b, h, t);
#pragma unroll
        for (int i = 0; i < NO; i++) {
            const int d = lane + i * TPR;
            if (d < D) cu_st(y + d, none ? 0.0f : o[i] / l);
        }
        if (lane == 0) p.lse[fl_lse_at(p, b, h, t)] = none ? -INFINITY : (m == -INFINITY ? 0.0f : m) + logf(l);
    }
}

/* ---------------------------------------------------------------- backward: dq */

/* CTA (query block, h, b), threads as the forward's. */
template <typename T, int DM>
__global__ void __launch_bounds__(CU_FLASH_THREADS) flash_dq_kernel(const __grid_constant__ cu_flash_plan p) {
    constexpr int BR = CU_FLASH_DQ_BR(DM), BC = CU_FLASH_DQ_BC(DM), TPR = CU_FLASH_DQ_TPR(DM);
    constexpr int NS = (BC + TPR - 1) / TPR, NO = DM / TPR;
    static_assert(BR * TPR == CU_FLASH_THREADS && 32 % TPR == 0, "dq tile");
    extern __shared__ float fl_smem[];
    const int ld = (int)p.ld, D = (int)p.D;
    float *sQ = fl_smem, *sdY = sQ + BR * ld, *sK = sdY + BR * ld, *sV = sK + BC * ld, *sS = sV + BC * ld;
    const int r = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    const int64_t qb = cu_flash_query_block(&p, &p.launch_dq, blockIdx.x), h = blockIdx.y, b = blockIdx.z;
    const int64_t t0 = qb * BR, t = t0 + r, hk = h / p.group;
    const int rows = (int)fl_min(BR, p.T - t0);
    const T *k = (const T *)p.k.data + cu_flash_at(&p.k, b, hk, 0);
    const T *v = (const T *)p.v.data + cu_flash_at(&p.v, b, hk, 0);
    fl_stage(sQ, ld, (const T *)p.q.data + cu_flash_at(&p.q, b, h, t0), p.q.sr, rows, BR, D);
    fl_stage(sdY, ld, (const T *)p.dy.data + cu_flash_at(&p.dy, b, h, t0), p.dy.sr, rows, BR, D);
    __syncthreads();
    /* this row's lse and delta = dy . y */
    float part = 0.0f, lse = 0.0f;
    if (r < rows) {
        const T *y = (const T *)p.y.data + cu_flash_at(&p.y, b, h, t);
        for (int d = lane; d < D; d += TPR) part = fmaf(sdY[r * ld + d], cu_ld(y + d), part);
        lse = p.lse[fl_lse_at(p, b, h, t)];
    }
    const float delta = fl_row_sum<TPR>(part);

    float dq[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) dq[i] = 0.0f;
    const int64_t nkb = cu_flash_key_blocks(&p, t0, rows, BC);
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t j0 = kb * BC;
        const int cols = (int)fl_min(BC, p.S - j0);
        __syncthreads();
        fl_stage(sK, ld, k + j0 * p.k.sr, p.k.sr, cols, BC, D);
        fl_stage(sV, ld, v + j0 * p.v.sr, p.v.sr, cols, BC, D);
        __syncthreads();
        /* dS = P (dP - delta), P = exp(s - lse) recomputed, dP = dY V^T */
#pragma unroll
        for (int c = 0; c < NS; c++) {
            const int jj = lane + c * TPR;
            if (jj < BC) {
                const bool vis = r < rows && jj < cols && cu_flash_visible(&p, t, j0 + jj);
                float ds = 0.0f;
                if (vis) {
                    const float sc = fl_dot(sQ + r * ld, sK + jj * ld, D) * p.scale;
                    const float dp = fl_dot(sdY + r * ld, sV + jj * ld, D);
                    ds = expf(sc - lse) * (dp - delta);
                }
                sS[r * (BC + 1) + jj] = ds;
            }
        }
        __syncwarp();
        for (int jj = 0; jj < cols; jj++) {
            const float dsj = sS[r * (BC + 1) + jj];
#pragma unroll
            for (int i = 0; i < NO; i++) {
                const int d = lane + i * TPR;
                if (d < D) dq[i] = fmaf(dsj, sK[jj * ld + d], dq[i]);
            }
        }
    }
    if (r < rows) {
        T *out = (T *)p.dq.data + cu_flash_at(&p.dq, b, h, t);
#pragma unroll
        for (int i = 0; i < NO; i++) {
            const int d = lane + i * TPR;
            if (d < D) cu_st(out + d, dq[i] * p.scale);
        }
    }
}

/* ---------------------------------------------------------------- backward: dk, dv */

/* CTA (key block, kv head, b); thread key row c = threadIdx.x / TPR, lane = threadIdx.x % TPR.
 * Loops over the group's query heads and their query blocks that see the key block. */
template <typename T, int DM>
__global__ void __launch_bounds__(CU_FLASH_THREADS) flash_kv_kernel(const __grid_constant__ cu_flash_plan p) {
    constexpr int BC = CU_FLASH_KV_BC(DM), BR = CU_FLASH_KV_BR(DM), TPR = CU_FLASH_KV_TPR(DM);
    constexpr int NS = (BR + TPR - 1) / TPR, NO = DM / TPR;
    static_assert(BC * TPR == CU_FLASH_THREADS && 32 % TPR == 0 && BR <= BC, "dk/dv tile");
    extern __shared__ float fl_smem[];
    const int ld = (int)p.ld, D = (int)p.D;
    float *sK = fl_smem, *sV = sK + BC * ld, *sQ = sV + BC * ld, *sdY = sQ + BR * ld;
    float *sP = sdY + BR * ld, *sdS = sP + BC * (BR + 1), *sL = sdS + BC * (BR + 1), *sD = sL + BR;
    const int c = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    const int64_t kb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int64_t j0 = kb * BC, j = j0 + c;
    const int cols = (int)fl_min(BC, p.S - j0);
    fl_stage(sK, ld, (const T *)p.k.data + cu_flash_at(&p.k, b, hk, j0), p.k.sr, cols, BC, D);
    fl_stage(sV, ld, (const T *)p.v.data + cu_flash_at(&p.v, b, hk, j0), p.v.sr, cols, BC, D);

    float dk[NO], dv[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) dk[i] = dv[i] = 0.0f;
    const int64_t qb0 = cu_flash_first_query_block(&p, j0, BR), nqb = (p.T + BR - 1) / BR;
    for (int64_t g = 0; g < p.group; g++) {
        const int64_t h = hk * p.group + g;
        for (int64_t qb = qb0; qb < nqb; qb++) {
            const int64_t t0 = qb * BR;
            const int rows = (int)fl_min(BR, p.T - t0);
            __syncthreads(); /* the previous block's tiles are read (and K, V staged) */
            fl_stage(sQ, ld, (const T *)p.q.data + cu_flash_at(&p.q, b, h, t0), p.q.sr, rows, BR, D);
            fl_stage(sdY, ld, (const T *)p.dy.data + cu_flash_at(&p.dy, b, h, t0), p.dy.sr, rows, BR, D);
            __syncthreads();
            /* lse and delta = dy . y of the block's rows: row i by the lanes of thread row i */
            float part = 0.0f;
            if (c < rows) {
                const T *y = (const T *)p.y.data + cu_flash_at(&p.y, b, h, t0 + c);
                for (int d = lane; d < D; d += TPR) part = fmaf(sdY[c * ld + d], cu_ld(y + d), part);
            }
            part = fl_row_sum<TPR>(part);
            if (c < BR && lane == 0) {
                sD[c] = part;
                sL[c] = c < rows ? p.lse[fl_lse_at(p, b, h, t0 + c)] : 0.0f;
            }
            __syncthreads();
            /* P^T and dS^T of this key against the lane's query rows */
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const int i = lane + n * TPR;
                if (i < BR) {
                    const bool vis = c < cols && i < rows && cu_flash_visible(&p, t0 + i, j);
                    float pr = 0.0f, ds = 0.0f;
                    if (vis) {
                        const float sc = fl_dot(sK + c * ld, sQ + i * ld, D) * p.scale;
                        const float dp = fl_dot(sV + c * ld, sdY + i * ld, D);
                        pr = expf(sc - sL[i]);
                        ds = pr * (dp - sD[i]);
                    }
                    sP[c * (BR + 1) + i] = pr;
                    sdS[c * (BR + 1) + i] = ds;
                }
            }
            __syncwarp();
            for (int i = 0; i < rows; i++) {
                const float pi = sP[c * (BR + 1) + i], dsi = sdS[c * (BR + 1) + i];
#pragma unroll
                for (int n = 0; n < NO; n++) {
                    const int d = lane + n * TPR;
                    if (d < D) {
                        dv[n] = fmaf(pi, sdY[i * ld + d], dv[n]);
                        dk[n] = fmaf(dsi, sQ[i * ld + d], dk[n]);
                    }
                }
            }
        }
    }
    if (c < cols) {
        T *ok = (T *)p.dk.data + cu_flash_at(&p.dk, b, hk, j), *ov = (T *)p.dv.data + cu_flash_at(&p.dv, b, hk, j);
#pragma unroll
        for (int n = 0; n < NO; n++) {
            const int d = lane + n * TPR;
            if (d < D) {
                cu_st(ok + d, dk[n] * p.scale);
                cu_st(ov + d, dv[n]);
            }
        }
    }
}

/* ---------------------------------------------------------------- host: launches */

/* One planned launch of `kernel` (tile constants rows x cols x tpr, checked against the
 * plan's); grid.x 0 launches nothing. Above 48 KiB of shared memory the kernel opts in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize; the planner checked the device's limit). */
template <typename K>
static it_status fl_go(K kernel, const cu_flash_launch &l, int rows, int cols, int tpr, const cu_flash_plan &p,
                       cudaStream_t s, const char *name) {
    if (l.rows != rows || l.cols != cols || l.tpr != tpr || l.threads != CU_FLASH_THREADS)
        return it_error(IT_ERR_BACKEND, "cuda: %s: plan tile %dx%dx%d differs from the kernel's %dx%dx%d", name, l.rows,
                        l.cols, l.tpr, rows, cols, tpr);
    if (l.grid_x == 0) return IT_OK;
    if (l.opt_in) {
        it_status st = cu_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)l.smem),
                                "%s: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %zu)", name, l.smem);
        if (st) return st;
    }
    kernel<<<dim3(l.grid_x, l.grid_y, l.grid_z), dim3((unsigned)l.threads), l.smem, s>>>(p);
    return cu_launch_check(name);
}

template <typename T, int DM> static it_status fl_fwd(const cu_flash_plan &p, cudaStream_t s) {
    return fl_go(flash_fwd_kernel<T, DM>, p.launch_fwd, CU_FLASH_FWD_BR(DM), CU_FLASH_FWD_BC(DM), CU_FLASH_FWD_TPR(DM),
                 p, s, "flash_attention_fwd");
}

template <typename T, int DM> static it_status fl_bwd(const cu_flash_plan &p, cudaStream_t s) {
    it_status st = fl_go(flash_kv_kernel<T, DM>, p.launch_kv, CU_FLASH_KV_BC(DM), CU_FLASH_KV_BR(DM),
                         CU_FLASH_KV_TPR(DM), p, s, "flash_attention_bwd (dk/dv)");
    if (st) return st;
    return fl_go(flash_dq_kernel<T, DM>, p.launch_dq, CU_FLASH_DQ_BR(DM), CU_FLASH_DQ_BC(DM), CU_FLASH_DQ_TPR(DM), p, s,
                 "flash_attention_bwd (dq)");
}

/* The bucket's instantiation of F (fl_fwd or fl_bwd). */
#define FL_BUCKETS(F, T, p, s)                                                                                         \
    ((p).dmax == 64 ? F<T, 64>((p), (s)) : (p).dmax == 128 ? F<T, 128>((p), (s)) : F<T, 256>((p), (s)))

/* The device's shared memory per block with opt-in. */
static it_status fl_smem_limit(const char *kn, int device, size_t *out) {
    int v = 0;
    it_status st = cu_check(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                            "%s: cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin, device %d)", kn, device);
    *out = st || v < 0 ? 0 : (size_t)v;
    return st;
}

extern "C" it_status cu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q,
                                            const it_tdesc *k, const it_tdesc *v, it_tdesc *y, it_tdesc *lse) {
    const char *kn = "flash_attention_fwd";
    it_status st = cu_stream_resolve(kn, s, &s);
    size_t limit = 0;
    if (!st) st = fl_smem_limit(kn, s->device, &limit);
    cu_flash_plan p;
    if (!st) st = cu_flash_plan_fwd(args, q, k, v, y, lse, limit, &p);
    if (st) return st;
    cudaStream_t cs = s->stream;
    return cu_float_dispatch(p.dtype, kn, [&](auto tag) -> it_status {
        using T = decltype(tag);
        return FL_BUCKETS(fl_fwd, T, p, cs);
    });
}

extern "C" it_status cu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q,
                                            const it_tdesc *k, const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy,
                                            const it_tdesc *lse, it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    const char *kn = "flash_attention_bwd";
    it_status st = cu_stream_resolve(kn, s, &s);
    size_t limit = 0;
    if (!st) st = fl_smem_limit(kn, s->device, &limit);
    cu_flash_plan p;
    if (!st) st = cu_flash_plan_bwd(args, q, k, v, y, dy, lse, dq, dk, dv, limit, &p);
    if (st) return st;
    cudaStream_t cs = s->stream;
    return cu_float_dispatch(p.dtype, kn, [&](auto tag) -> it_status {
        using T = decltype(tag);
        return FL_BUCKETS(fl_bwd, T, p, cs);
    });
}
