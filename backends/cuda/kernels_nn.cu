/* The CUDA backend's neural-network kernels: embedding, layernorm, rmsnorm, softmax, cross
 * entropy, rope (the slots of backend.h; the CPU reference is backends/cpu/<name>.c).
 *
 * Conventions:
 *  - dtypes fp32, bf16, fp16 (loads widened to float, one rounding on store); anything else
 *    is declined (IT_ERR_UNSUPPORTED, before anything is written) and runs on the CPU
 *    fallback. embedding_fwd is a plain gather and also takes fp64.
 *  - every sum runs in float, as the CPU's fp32 kernels (they sum fp32 in fp32); bf16/fp16
 *    inputs are widened and summed in float too. mean/rstd/losses/dlosses are fp32.
 *  - the row kernels run one thread block per row (blockDim a multiple of 32, at most 512 or
 *    1024), rows longer than the block looped over; block reductions by warp shuffles and a
 *    32-slot shared array, in a fixed order: results are deterministic (no atomics).
 *  - inputs and outputs may be any strided view the CPU kernels take (the leading dims are
 *    addressed through cu_offset, collapsed on the host where they allow); offsets are
 *    int64_t.
 *  - indices (embedding idx, cross entropy targets) live on the device, so they are checked
 *    there: an index outside its range is never used to read or write; the kernel prints
 *    what it found (device printf) and stops with __trap(), which the stream reports at its
 *    next synchronizing call (backend.h's asynchronous failure; as PyTorch's device-side
 *    assert, the CUDA context is unusable after it). The CPU checks them on the host and
 *    returns IT_ERR_INVALID_ARG before writing; a host check here would need a copy and a
 *    stream synchronization per call.
 *  - rope (and softmax's scale * x) keep the CPU's roundings (no fused multiply-add where the
 *    CPU rounds a product before adding), so rope's fp32 results are the CPU's bits. */
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "cu_device.cuh"

/* ---------------------------------------------------------------- host: checks
 * The CPU kernels' checks (backends/cpu/cpu_util.c), with their messages after "cuda: ". */

static bool nn_float(it_dtype dt) { return dt == IT_DTYPE_FP32 || dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16; }

static it_status nn_decline(const char *k, const char *name, it_dtype dt) {
    return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: %s dtype %s is served by the CPU fallback", k, name,
                    it_dtype_name(dt));
}

static int64_t nn_numel(const it_tdesc *t) { return cu_numel(t); }

/* No negative shape or stride, data non-NULL when t has elements. */
static it_status nn_layout(const char *k, const char *name, const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.shape[%d] = %lld is negative", k, name, d,
                            (long long)t->shape[d]);
        if (t->strides[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.strides[%d] = %lld is negative", k, name, d,
                            (long long)t->strides[d]);
        n *= t->shape[d];
    }
    if (n > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.data is NULL", k, name);
    return IT_OK;
}

/* t non-NULL, ndim in [min_ndim, IT_MAX_DIMS], then nn_layout. */
static it_status nn_desc(const char *k, const char *name, const it_tdesc *t, int min_ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is NULL", k, name);
    if (t->ndim < min_ndim || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.ndim = %d outside [%d, %d]", k, name, t->ndim, min_ndim,
                        IT_MAX_DIMS);
    return nn_layout(k, name, t);
}

/* t non-NULL with exactly ndim dims, then nn_layout. */
static it_status nn_desc_nd(const char *k, const char *name, const it_tdesc *t, int ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is NULL", k, name);
    if (t->ndim != ndim)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s must be %d-D, got ndim %d", k, name, ndim, t->ndim);
    return nn_layout(k, name, t);
}

static it_status nn_dtype(const char *k, const char *name, const it_tdesc *t, const char *rname, it_dtype dt) {
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s dtype %s != %s dtype %s", k, name, it_dtype_name(t->dtype),
                        rname, it_dtype_name(dt));
    return IT_OK;
}

/* An output: no stride 0 on a dim longer than 1 (it would write one element twice). */
static it_status nn_writable(const char *k, const char *name, const it_tdesc *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.strides[%d] is 0 on a dim of size %lld", k, name, d,
                            (long long)t->shape[d]);
    return IT_OK;
}

/* t (checked) has ref's ndim, shape and dtype; an output is writable. */
static it_status nn_same(const char *k, const char *name, const it_tdesc *t, const char *rname, const it_tdesc *ref,
                         bool output) {
    if (t->ndim != ref->ndim)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.ndim %d != %s.ndim %d", k, name, t->ndim, rname, ref->ndim);
    for (int d = 0; d < ref->ndim; d++)
        if (t->shape[d] != ref->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.shape[%d] = %lld != %s.shape[%d] = %lld", k, name, d,
                            (long long)t->shape[d], rname, d, (long long)ref->shape[d]);
    it_status st = output ? nn_writable(k, name, t) : IT_OK;
    return st ? st : nn_dtype(k, name, t, rname, ref->dtype);
}

static it_status nn_like(const char *k, const char *name, const it_tdesc *t, int min_ndim, const char *rname,
                         const it_tdesc *ref, bool output) {
    it_status st = nn_desc(k, name, t, min_ndim);
    return st ? st : nn_same(k, name, t, rname, ref, output);
}

/* A per-row vector: n elements (any shape) of dtype dt; an output is writable. */
static it_status nn_per_row(const char *k, const char *name, const it_tdesc *t, const char *sym, int64_t n, it_dtype dt,
                            bool output) {
    it_status st = nn_desc(k, name, t, 0);
    if (st) return st;
    if (nn_numel(t) != n)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s has %lld elements, expected %s = %lld", k, name,
                        (long long)nn_numel(t), sym, (long long)n);
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s dtype %s, expected %s", k, name, it_dtype_name(t->dtype),
                        it_dtype_name(dt));
    return output ? nn_writable(k, name, t) : IT_OK;
}

/* layernorm/rmsnorm: x (R, C), ndim >= 1, a dtype served here (else declined). */
static it_status nn_norm_x(const char *k, const it_tdesc *x, int64_t *R, int64_t *C) {
    it_status st = nn_desc(k, "x", x, 0);
    if (st) return st;
    if (x->ndim < 1) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: x must have at least 1 dim, got ndim 0", k);
    if (!nn_float(x->dtype)) return nn_decline(k, "x", x->dtype);
    *C = x->shape[x->ndim - 1];
    *R = 1;
    for (int d = 0; d < x->ndim - 1; d++) *R *= x->shape[d];
    return IT_OK;
}

/* layernorm/rmsnorm: t is (C) of x's dtype dt (w, b, dw, db). */
static it_status nn_norm_vec(const char *k, const char *name, const it_tdesc *t, int64_t C, it_dtype dt, bool output) {
    it_status st = nn_desc(k, name, t, 0);
    if (st) return st;
    if (t->ndim != 1 || t->shape[0] != C)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s must be (%lld), got ndim %d shape[0] %lld", k, name,
                        (long long)C, t->ndim, t->ndim > 0 ? (long long)t->shape[0] : -1LL);
    if ((st = nn_dtype(k, name, t, "x", dt))) return st;
    if (output && t->strides[0] == 0 && C > 1)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.strides[0] is 0", k, name);
    return IT_OK;
}

/* ---------------------------------------------------------------- host: views, launch sizes */

/* The first nd dims of t as a row-major view, with size-1 dims dropped and dims merged where
 * the strides allow (the same offsets as the full view, cheaper to compute on the device). */
static cu_nd nn_view(const it_tdesc *t, int nd) {
    cu_nd n;
    n.ndim = 0;
    for (int i = 0; i < IT_MAX_DIMS; i++) n.shape[i] = 1, n.strides[i] = 0;
    for (int d = 0; d < nd; d++) {
        if (t->shape[d] == 1) continue;
        if (n.ndim > 0 && n.strides[n.ndim - 1] == t->strides[d] * t->shape[d]) {
            n.shape[n.ndim - 1] *= t->shape[d];
            n.strides[n.ndim - 1] = t->strides[d];
        } else {
            n.shape[n.ndim] = t->shape[d];
            n.strides[n.ndim] = t->strides[d];
            n.ndim++;
        }
    }
    return n;
}
/* Rows of t: its leading dims (all but the last). */
static cu_nd nn_rows(const it_tdesc *t) { return nn_view(t, t->ndim - 1); }
/* Every element of t (a per-row vector of any shape). */
static cu_nd nn_all(const it_tdesc *t) { return nn_view(t, t->ndim); }
/* The stride of t's last dim. */
static int64_t nn_last(const it_tdesc *t) { return t->strides[t->ndim - 1]; }

/* Threads of a row kernel: cols rounded up to whole warps, in [32, max_threads]. */
static unsigned nn_row_threads(int64_t cols, unsigned max_threads) {
    int64_t t = (cols + 31) / 32 * 32;
    if (t < 32) t = 32;
    if (t > (int64_t)max_threads) t = max_threads;
    return (unsigned)t;
}
/* Blocks of a row kernel (one per row; the kernels loop over rows past the cap). */
#define NN_MAX_ROW_BLOCKS (65535u * 32u)
static unsigned nn_row_blocks(int64_t rows) {
    return rows > (int64_t)NN_MAX_ROW_BLOCKS ? NN_MAX_ROW_BLOCKS : (unsigned)(rows < 1 ? 1 : rows);
}

/* Dispatch on an index dtype (int32 / int64; the caller has checked it is one of them). */
template <typename F> static inline it_status nn_index_dispatch(it_dtype dt, F f) {
    return dt == IT_DTYPE_I32 ? f(int32_t()) : f(int64_t());
}

/* ---------------------------------------------------------------- device helpers */

/* Offset of the i-th element of a collapsed view (nn_view). */
__device__ static inline int64_t nn_off(const cu_nd &n, int64_t i) {
    if (n.ndim == 0) return 0;
    if (n.ndim == 1) return i * n.strides[0];
    return cu_offset(n, i);
}

struct nn_sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};
/* max that never lets a NaN in from b (the CPU's `v > mx ? v : mx`; a is never NaN here) */
struct nn_max {
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

/* Reduce over the 32 lanes of a warp (all active). The butterfly leaves every lane with the
 * same bits (each step combines two equal-bit partials of the pair, op commutative). */
template <typename Op> __device__ static inline float nn_warp_reduce(float v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Reduce v over the block (blockDim.x a multiple of 32, at most 1024; called by every
 * thread): every thread gets the same result. sh holds 32 floats; the first __syncthreads
 * makes sure the previous call's readers are done before it is overwritten. The second
 * level reads the warps' partials in order (slots past the last warp are the identity), so
 * any warp count (not only powers of two) works. */
template <typename Op> __device__ static inline float nn_block_reduce(float v, Op op, float identity, float *sh) {
    v = nn_warp_reduce(v, op);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < (blockDim.x >> 5) ? sh[lane] : identity;
    return nn_warp_reduce(v, op);
}

/* An index outside [0, hi): say so and stop the kernel (see the header comment). */
__device__ __noinline__ static void nn_bad_index(const char *kernel, const char *what, long long at, long long val,
                                                 long long hi, bool print) {
    if (print)
        printf("infinitrain cuda %s: %s[%lld] = %lld outside [0, %lld): kernel stopped\n", kernel, what, at, val, hi);
    __trap();
}

/* ---------------------------------------------------------------- embedding */

/* out (N, C) = rows of weight (V, C) gathered by idx (N):  out[n, c] = weight[idx[n], c].
 * E is an unsigned integer of the element's size (a bit copy). One thread per element. */
template <typename E, typename I>
__global__ static void __launch_bounds__(CU_THREADS)
    embedding_fwd_kernel(const I *idx, int64_t si, const E *w, int64_t sw0, int64_t sw1, int64_t V, E *out, int64_t so0,
                         int64_t so1, int64_t N, int64_t C) {
    const int64_t total = N * C, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const int64_t n = i / C, c = i - n * C;
        const int64_t v = (int64_t)idx[n * si];
        if (v < 0 || v >= V) {
            nn_bad_index("embedding_fwd", "idx", n, v, V, c == 0);
            return;
        }
        out[n * so0 + c * so1] = w[v * sw0 + c * sw1];
    }
}

/* Columns per thread of the embedding backward (registers of partial sums), the most
 * threads of its blocks, and the blockDim-wide pieces of idx a block scans per barrier. */
#define EMB_COLS 4
#define EMB_THREADS 256
#define EMB_SCAN 4

/* dweight (V, C) += scatter of dout (N, C) rows by idx (N):
 *   dweight[v, c] += dout[n, c] for n = 0 .. N-1 with idx[n] == v, in increasing n.
 * Block x = n owns row v = idx[n] when n is v's first occurrence in idx (blocks of later
 * occurrences return); it walks idx[n .. N) in chunks of EMB_SCAN * blockDim (a ballot per
 * warp and piece gives the matches of a chunk, read back in increasing order) and adds those
 * dout rows, in increasing order, to dweight[v, :] loaded into float registers, then stores
 * once. Blocks y split the columns (EMB_COLS per thread). Deterministic, no atomics, and for
 * fp32 the CPU's bits (the same additions in the same order). Work: O(N^2 / blockDim) index
 * compares per column block, O(N C) row reads. */
template <typename T, typename I>
__global__ static void __launch_bounds__(EMB_THREADS)
    embedding_bwd_kernel(const I *idx, int64_t si, const T *dout, int64_t sd0, int64_t sd1, T *dw, int64_t sw0,
                         int64_t sw1, int64_t V, int64_t N, int64_t C) {
    __shared__ unsigned masks[EMB_SCAN][32];
    const int64_t n = blockIdx.x, chunk = (int64_t)EMB_SCAN * blockDim.x;
    const int64_t v = (int64_t)idx[n * si];
    if (v < 0 || v >= V) {
        nn_bad_index("embedding_bwd", "idx", n, v, V, threadIdx.x == 0 && blockIdx.y == 0);
        return;
    }
    /* an earlier occurrence of v owns the row */
    for (int64_t m0 = 0; m0 < n; m0 += chunk) {
        int dup = 0;
#pragma unroll
        for (int j = 0; j < EMB_SCAN; j++) {
            const int64_t m = m0 + (int64_t)j * blockDim.x + threadIdx.x;
            dup |= m < n && (int64_t)idx[m * si] == v;
        }
        if (__syncthreads_or(dup)) return; /* the same answer in every thread */
    }
    const int64_t c0 = (int64_t)blockIdx.y * blockDim.x * EMB_COLS + threadIdx.x;
    T *row = dw + v * sw0;
    float acc[EMB_COLS];
#pragma unroll
    for (int k = 0; k < EMB_COLS; k++) {
        const int64_t c = c0 + (int64_t)k * blockDim.x;
        acc[k] = c < C ? cu_ld(row + c * sw1) : 0.0f;
    }
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t m0 = n; m0 < N; m0 += chunk) {
#pragma unroll
        for (int j = 0; j < EMB_SCAN; j++) {
            const int64_t m = m0 + (int64_t)j * blockDim.x + threadIdx.x;
            const unsigned b = __ballot_sync(0xffffffffu, m < N && (int64_t)idx[m * si] == v);
            if (lane == 0) masks[j][warp] = b;
        }
        __syncthreads();
        for (int j = 0; j < EMB_SCAN; j++) {
            for (unsigned w = 0; w < nw; w++) {
                unsigned bits = masks[j][w];
                while (bits) {
                    const int bit = __ffs((int)bits) - 1;
                    bits &= bits - 1u;
                    const int64_t m = m0 + (int64_t)j * blockDim.x + (int64_t)w * 32 + bit;
                    const T *src = dout + m * sd0;
#pragma unroll
                    for (int k = 0; k < EMB_COLS; k++) {
                        const int64_t c = c0 + (int64_t)k * blockDim.x;
                        if (c < C) acc[k] += cu_ld(src + c * sd1);
                    }
                }
            }
        }
        __syncthreads(); /* every thread has read masks before the next chunk writes them */
    }
#pragma unroll
    for (int k = 0; k < EMB_COLS; k++) {
        const int64_t c = c0 + (int64_t)k * blockDim.x;
        if (c < C) cu_st(row + c * sw1, acc[k]);
    }
}

/* Common checks: idx (N) int32/int64, table (V, C), rows (N, C), rows' dtype = table's. */
static it_status emb_check(const char *k, const it_tdesc *idx, const it_tdesc *table, const char *tname,
                           const it_tdesc *rows, const char *rname) {
    it_status st;
    if ((st = nn_desc_nd(k, "idx", idx, 1)) || (st = nn_desc_nd(k, tname, table, 2)) ||
        (st = nn_desc_nd(k, rname, rows, 2)))
        return st;
    if (rows->shape[0] != idx->shape[0] || rows->shape[1] != table->shape[1])
        return it_error(IT_ERR_INVALID_ARG,
                        "cuda: %s: %s is (%lld, %lld), expected (%lld, %lld) from idx (%lld) and %s (%lld, %lld)", k,
                        rname, (long long)rows->shape[0], (long long)rows->shape[1], (long long)idx->shape[0],
                        (long long)table->shape[1], (long long)idx->shape[0], tname, (long long)table->shape[0],
                        (long long)table->shape[1]);
    if ((st = nn_dtype(k, rname, rows, tname, table->dtype))) return st;
    if (idx->dtype != IT_DTYPE_I32 && idx->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: idx dtype %s is not int32 or int64", k,
                        it_dtype_name(idx->dtype));
    return IT_OK;
}

template <typename E>
static void emb_fwd_launch(it_stream *s, const it_tdesc *idx, const it_tdesc *w, it_tdesc *out, int64_t N, int64_t C) {
    const unsigned blocks = cu_blocks(N * C);
    if (idx->dtype == IT_DTYPE_I32)
        embedding_fwd_kernel<E, int32_t><<<blocks, CU_THREADS, 0, s->stream>>>(
            (const int32_t *)idx->data, idx->strides[0], (const E *)w->data, w->strides[0], w->strides[1], w->shape[0],
            (E *)out->data, out->strides[0], out->strides[1], N, C);
    else
        embedding_fwd_kernel<E, int64_t><<<blocks, CU_THREADS, 0, s->stream>>>(
            (const int64_t *)idx->data, idx->strides[0], (const E *)w->data, w->strides[0], w->strides[1], w->shape[0],
            (E *)out->data, out->strides[0], out->strides[1], N, C);
}

/* idx (N), weight (V, C) -> out (N, C). fp32, bf16, fp16 and fp64 (a bit copy). An output
 * with a stride 0 (which the CPU writes in order) is declined. */
extern "C" it_status cu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    const char *k = "embedding_fwd";
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = emb_check(k, idx, weight, "weight", out, "out"))) return st;
    const it_dtype dt = weight->dtype;
    if (!nn_float(dt) && dt != IT_DTYPE_FP64) return nn_decline(k, "weight", dt);
    const int64_t N = out->shape[0], C = out->shape[1];
    if (N == 0 || C == 0) return IT_OK;
    if ((out->strides[0] == 0 && N > 1) || (out->strides[1] == 0 && C > 1))
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: out has a stride 0 (served by the CPU fallback)", k);
    switch (it_dtype_size(dt)) {
    case 2: emb_fwd_launch<uint16_t>(s, idx, weight, out, N, C); break;
    case 4: emb_fwd_launch<uint32_t>(s, idx, weight, out, N, C); break;
    default: emb_fwd_launch<uint64_t>(s, idx, weight, out, N, C); break;
    }
    return cu_launch_check(k);
}

/* idx (N), dout (N, C) -> dweight (V, C) += scatter; fp32, bf16, fp16 (sums in float, one
 * rounding per dweight element). */
extern "C" it_status cu_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {
    const char *k = "embedding_bwd";
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = emb_check(k, idx, dweight, "dweight", dout, "dout"))) return st;
    if (!nn_float(dweight->dtype)) return nn_decline(k, "dweight", dweight->dtype);
    if ((st = nn_writable(k, "dweight", dweight))) return st;
    const int64_t N = dout->shape[0], C = dout->shape[1], V = dweight->shape[0];
    if (N == 0 || C == 0) return IT_OK;
    const unsigned threads = nn_row_threads((C + EMB_COLS - 1) / EMB_COLS, EMB_THREADS);
    const int64_t per_block = (int64_t)threads * EMB_COLS, ycount = (C + per_block - 1) / per_block;
    if (N > INT_MAX || ycount > 65535)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: (N, C) = (%lld, %lld) exceeds the grid (CPU fallback)", k,
                        (long long)N, (long long)C);
    const dim3 grid((unsigned)N, (unsigned)ycount);
    st = cu_float_dispatch(dweight->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        return nn_index_dispatch(idx->dtype, [&](auto itag) -> it_status {
            using I = decltype(itag);
            (void)itag;
            embedding_bwd_kernel<T, I><<<grid, threads, 0, s->stream>>>(
                (const I *)idx->data, idx->strides[0], (const T *)dout->data, dout->strides[0], dout->strides[1],
                (T *)dweight->data, dweight->strides[0], dweight->strides[1], V, N, C);
            return IT_OK;
        });
    });
    return st ? st : cu_launch_check(k);
}

/* ---------------------------------------------------------------- layernorm, rmsnorm */

#define NORM_THREADS 512 /* most threads of a norm row block */

/* LayerNorm forward, x (R, C), w, b (C) (b may be NULL) -> y (R, C), mean, rstd (R) fp32:
 *   mean[r] = sum_c x[r, c] / C;  var = sum_c (x[r, c] - mean)^2 / C;  rstd[r] = 1/sqrt(var + eps)
 *   y[r, c] = (rstd * (x[r, c] - mean)) * w[c] + b[c]
 * One block per row (xl/yl address rows, sx/sy the last dim's strides). */
template <typename T>
__global__ static void __launch_bounds__(NORM_THREADS)
    layernorm_fwd_kernel(const T *x, cu_nd xl, int64_t sx, const T *w, int64_t sw, const T *b, int64_t sb, float eps,
                         T *y, cu_nd yl, int64_t sy, float *mean, cu_nd ml, float *rstd, cu_nd rl, int64_t R,
                         int64_t C) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const T *xr = x + nn_off(xl, r);
        float a = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) a += cu_ld(xr + i * sx);
        const float m = nn_block_reduce(a, nn_sum(), 0.0f, sh) / (float)C;
        float q = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            const float d = cu_ld(xr + i * sx) - m;
            q += d * d;
        }
        const float var = nn_block_reduce(q, nn_sum(), 0.0f, sh) / (float)C;
        const float s = 1.0f / sqrtf(var + eps);
        T *yr = y + nn_off(yl, r);
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            float o = (s * (cu_ld(xr + i * sx) - m)) * cu_ld(w + i * sw);
            if (b != NULL) o += cu_ld(b + i * sb);
            cu_st(yr + i * sy, o);
        }
        if (threadIdx.x == 0) {
            mean[nn_off(ml, r)] = m;
            rstd[nn_off(rl, r)] = s;
        }
    }
}

/* LayerNorm backward, dx part: dy, x (R, C), w (C), mean, rstd (R) -> dx (R, C):
 *   norm = (x - mean[r]) * rstd[r];  dnorm = w * dy
 *   dx[r, c] = ((dnorm - mean_c(dnorm)) - norm * mean_c(dnorm * norm)) * rstd[r]
 * One block per row; each element is read and written by one thread after the row's sums. */
template <typename T>
__global__ static void __launch_bounds__(NORM_THREADS)
    layernorm_bwd_dx_kernel(const T *dy, cu_nd dyl, int64_t sdy, const T *x, cu_nd xl, int64_t sx, const T *w,
                            int64_t sw, const float *mean, cu_nd ml, const float *rstd, cu_nd rl, T *dx, cu_nd dxl,
                            int64_t sdx, int64_t R, int64_t C) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const T *xr = x + nn_off(xl, r), *dyr = dy + nn_off(dyl, r);
        const float m = mean[nn_off(ml, r)], s = rstd[nn_off(rl, r)];
        float a = 0.0f, b = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            const float dn = cu_ld(w + i * sw) * cu_ld(dyr + i * sdy);
            a += dn;
            b += dn * ((cu_ld(xr + i * sx) - m) * s);
        }
        const float dn_mean = nn_block_reduce(a, nn_sum(), 0.0f, sh) / (float)C;
        const float dnn_mean = nn_block_reduce(b, nn_sum(), 0.0f, sh) / (float)C;
        T *dxr = dx + nn_off(dxl, r);
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            const float nrm = (cu_ld(xr + i * sx) - m) * s;
            const float dn = cu_ld(w + i * sw) * cu_ld(dyr + i * sdy);
            cu_st(dxr + i * sdx, ((dn - dn_mean) - nrm * dnn_mean) * s);
        }
    }
}

#define PG_ROWS 16  /* row lanes (blockDim.y) of the parameter-gradient kernel; blockDim.x = 32 columns */
#define PG_CHUNK 32 /* rows a thread sums into a partial before it joins the thread's total */

/* Norm parameter gradients, dy, x (R, C), rstd (R) and for layernorm (LN) mean (R) ->
 *   LN:   dw[c] = sum_r ((x[r, c] - mean[r]) * rstd[r]) * dy[r, c],  db[c] = sum_r dy[r, c] (db may be NULL)
 *   RMS:  dw[c] = sum_r dy[r, c] * (x[r, c] * rstd[r])
 * written, not accumulated (R = 0 writes zeros). Block x owns 32 columns (threadIdx.x); its
 * PG_ROWS row lanes (threadIdx.y) sum rows y, y + PG_ROWS, ... in increasing order (in
 * partials of PG_CHUNK rows), then thread row 0 adds the lanes' sums in lane order: the
 * first pass over registers, the second over shared memory. Fixed order, no atomics. */
template <typename T, bool LN>
__global__ static void __launch_bounds__(32 * PG_ROWS)
    norm_param_grads_kernel(const T *dy, cu_nd dyl, int64_t sdy, const T *x, cu_nd xl, int64_t sx, const float *mean,
                            cu_nd ml, const float *rstd, cu_nd rl, T *dw, int64_t sdw, T *db, int64_t sdb, int64_t R,
                            int64_t C) {
    __shared__ float pw[PG_ROWS][32], pb[PG_ROWS][32];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float tw = 0.0f, tb = 0.0f;
    if (c < C) {
        int64_t r = threadIdx.y;
        while (r < R) {
            float cw = 0.0f, cb = 0.0f;
            for (int k = 0; k < PG_CHUNK && r < R; k++, r += PG_ROWS) {
                const float s = rstd[nn_off(rl, r)];
                const float d = cu_ld(dy + nn_off(dyl, r) + c * sdy);
                const float xv = cu_ld(x + nn_off(xl, r) + c * sx);
                if (LN) {
                    cw += ((xv - mean[nn_off(ml, r)]) * s) * d;
                    cb += d;
                } else {
                    cw += d * (xv * s);
                }
            }
            tw += cw;
            tb += cb;
        }
    }
    pw[threadIdx.y][threadIdx.x] = tw;
    pb[threadIdx.y][threadIdx.x] = tb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < PG_ROWS; k++) {
            sw += pw[k][threadIdx.x];
            sb += pb[k][threadIdx.x];
        }
        cu_st(dw + c * sdw, sw);
        if (LN && db != NULL) cu_st(db + c * sdb, sb);
    }
}

/* x (R, C), w (C), b (C) or NULL -> y (R, C), mean, rstd (R) fp32. */
extern "C" it_status cu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                      it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    const char *k = "layernorm_fwd";
    int64_t R = 0, C = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = nn_norm_x(k, x, &R, &C)) || (st = nn_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (b && (st = nn_norm_vec(k, "b", b, C, x->dtype, false))) || (st = nn_like(k, "y", y, 0, "x", x, true)) ||
        (st = nn_per_row(k, "mean", mean, "R", R, IT_DTYPE_FP32, true)) ||
        (st = nn_per_row(k, "rstd", rstd, "R", R, IT_DTYPE_FP32, true)))
        return st;
    if (R == 0) return IT_OK; /* C == 0 with R > 0 writes NaN mean and rstd, as the CPU */
    const unsigned threads = nn_row_threads(C, NORM_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        layernorm_fwd_kernel<T><<<blocks, threads, 0, s->stream>>>(
            (const T *)x->data, nn_rows(x), nn_last(x), (const T *)w->data, w->strides[0],
            b ? (const T *)b->data : (const T *)NULL, b ? b->strides[0] : 0, eps, (T *)y->data, nn_rows(y), nn_last(y),
            (float *)mean->data, nn_all(mean), (float *)rstd->data, nn_all(rstd), R, C);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* dy, x (R, C), w (C), mean, rstd (R) -> dx (R, C), dw (C), db (C) or NULL. dw/db are
 * computed first, so dx may also be dy's or x's very memory. */
extern "C" it_status cu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                      const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                      it_tdesc *db) {
    const char *k = "layernorm_bwd";
    int64_t R = 0, C = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = nn_norm_x(k, x, &R, &C)) || (st = nn_like(k, "dy", dy, 0, "x", x, false)) ||
        (st = nn_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = nn_per_row(k, "mean", mean, "R", R, IT_DTYPE_FP32, false)) ||
        (st = nn_per_row(k, "rstd", rstd, "R", R, IT_DTYPE_FP32, false)) ||
        (st = nn_like(k, "dx", dx, 0, "x", x, true)) || (st = nn_norm_vec(k, "dw", dw, C, x->dtype, true)) ||
        (db && (st = nn_norm_vec(k, "db", db, C, x->dtype, true))))
        return st;
    if (C == 0) return IT_OK; /* R == 0 still writes dw = db = 0 */
    if ((C + 31) / 32 > INT_MAX)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: C = %lld exceeds the grid (CPU fallback)", k, (long long)C);
    const dim3 pg_block(32, PG_ROWS), pg_grid((unsigned)((C + 31) / 32));
    const unsigned threads = nn_row_threads(C, NORM_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        norm_param_grads_kernel<T, true><<<pg_grid, pg_block, 0, s->stream>>>(
            (const T *)dy->data, nn_rows(dy), nn_last(dy), (const T *)x->data, nn_rows(x), nn_last(x),
            (const float *)mean->data, nn_all(mean), (const float *)rstd->data, nn_all(rstd), (T *)dw->data,
            dw->strides[0], db ? (T *)db->data : (T *)NULL, db ? db->strides[0] : 0, R, C);
        if (R > 0)
            layernorm_bwd_dx_kernel<T><<<blocks, threads, 0, s->stream>>>(
                (const T *)dy->data, nn_rows(dy), nn_last(dy), (const T *)x->data, nn_rows(x), nn_last(x),
                (const T *)w->data, w->strides[0], (const float *)mean->data, nn_all(mean), (const float *)rstd->data,
                nn_all(rstd), (T *)dx->data, nn_rows(dx), nn_last(dx), R, C);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* RMSNorm forward, x (R, C), w (C) -> y (R, C), rstd (R) fp32:
 *   rstd[r] = 1/sqrt(sum_c x[r, c]^2 / C + eps);  y[r, c] = (x[r, c] * rstd[r]) * w[c]
 * One block per row. */
template <typename T>
__global__ static void __launch_bounds__(NORM_THREADS)
    rmsnorm_fwd_kernel(const T *x, cu_nd xl, int64_t sx, const T *w, int64_t sw, float eps, T *y, cu_nd yl, int64_t sy,
                       float *rstd, cu_nd rl, int64_t R, int64_t C) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const T *xr = x + nn_off(xl, r);
        float a = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            const float v = cu_ld(xr + i * sx);
            a += v * v;
        }
        const float ms = nn_block_reduce(a, nn_sum(), 0.0f, sh) / (float)C;
        const float s = 1.0f / sqrtf(ms + eps);
        T *yr = y + nn_off(yl, r);
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
            cu_st(yr + i * sy, (cu_ld(xr + i * sx) * s) * cu_ld(w + i * sw));
        if (threadIdx.x == 0) rstd[nn_off(rl, r)] = s;
    }
}

/* RMSNorm backward, dx part: dy, x (R, C), w (C), rstd (R) -> dx (R, C):
 *   xhat = x * rstd[r];  g = dy * w;  dx[r, c] = rstd[r] * (g - xhat * mean_c(g * xhat))
 * One block per row; each element is read and written by one thread after the row's sum. */
template <typename T>
__global__ static void __launch_bounds__(NORM_THREADS)
    rmsnorm_bwd_dx_kernel(const T *dy, cu_nd dyl, int64_t sdy, const T *x, cu_nd xl, int64_t sx, const T *w, int64_t sw,
                          const float *rstd, cu_nd rl, T *dx, cu_nd dxl, int64_t sdx, int64_t R, int64_t C) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const T *xr = x + nn_off(xl, r), *dyr = dy + nn_off(dyl, r);
        const float s = rstd[nn_off(rl, r)];
        float a = 0.0f;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
            a += (cu_ld(dyr + i * sdy) * cu_ld(w + i * sw)) * (cu_ld(xr + i * sx) * s);
        const float dot = nn_block_reduce(a, nn_sum(), 0.0f, sh) / (float)C;
        T *dxr = dx + nn_off(dxl, r);
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
            const float xhat = cu_ld(xr + i * sx) * s;
            const float g = cu_ld(dyr + i * sdy) * cu_ld(w + i * sw);
            cu_st(dxr + i * sdx, s * (g - xhat * dot));
        }
    }
}

/* x (R, C), w (C) -> y (R, C), rstd (R) fp32. */
extern "C" it_status cu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                                    it_tdesc *rstd) {
    const char *k = "rmsnorm_fwd";
    int64_t R = 0, C = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = nn_norm_x(k, x, &R, &C)) || (st = nn_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = nn_like(k, "y", y, 0, "x", x, true)) || (st = nn_per_row(k, "rstd", rstd, "R", R, IT_DTYPE_FP32, true)))
        return st;
    if (R == 0) return IT_OK; /* C == 0 with R > 0 writes NaN rstd, as the CPU (a mean over nothing) */
    const unsigned threads = nn_row_threads(C, NORM_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        rmsnorm_fwd_kernel<T><<<blocks, threads, 0, s->stream>>>(
            (const T *)x->data, nn_rows(x), nn_last(x), (const T *)w->data, w->strides[0], eps, (T *)y->data,
            nn_rows(y), nn_last(y), (float *)rstd->data, nn_all(rstd), R, C);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* dy, x (R, C), w (C), rstd (R) -> dx (R, C), dw (C). dw first: dx may be dy's or x's memory. */
extern "C" it_status cu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                    const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    const char *k = "rmsnorm_bwd";
    int64_t R = 0, C = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = nn_norm_x(k, x, &R, &C)) || (st = nn_like(k, "dy", dy, 0, "x", x, false)) ||
        (st = nn_norm_vec(k, "w", w, C, x->dtype, false)) ||
        (st = nn_per_row(k, "rstd", rstd, "R", R, IT_DTYPE_FP32, false)) ||
        (st = nn_like(k, "dx", dx, 0, "x", x, true)) || (st = nn_norm_vec(k, "dw", dw, C, x->dtype, true)))
        return st;
    if (C == 0) return IT_OK; /* R == 0 still writes dw = 0 */
    if ((C + 31) / 32 > INT_MAX)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: C = %lld exceeds the grid (CPU fallback)", k, (long long)C);
    const dim3 pg_block(32, PG_ROWS), pg_grid((unsigned)((C + 31) / 32));
    const unsigned threads = nn_row_threads(C, NORM_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        norm_param_grads_kernel<T, false><<<pg_grid, pg_block, 0, s->stream>>>(
            (const T *)dy->data, nn_rows(dy), nn_last(dy), (const T *)x->data, nn_rows(x), nn_last(x),
            (const float *)NULL, nn_all(rstd), (const float *)rstd->data, nn_all(rstd), (T *)dw->data, dw->strides[0],
            (T *)NULL, 0, R, C);
        if (R > 0)
            rmsnorm_bwd_dx_kernel<T><<<blocks, threads, 0, s->stream>>>(
                (const T *)dy->data, nn_rows(dy), nn_last(dy), (const T *)x->data, nn_rows(x), nn_last(x),
                (const T *)w->data, w->strides[0], (const float *)rstd->data, nn_all(rstd), (T *)dx->data, nn_rows(dx),
                nn_last(dx), R, C);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* ---------------------------------------------------------------- softmax */

#define SOFTMAX_THREADS 512

/* Softmax forward over the last dim, x (R, S) (rows r of a (..., T, S) view) -> y (R, S):
 *   n = S, or with causal (r % T) + (S - T) + 1 (key s of query t is masked when s > t + S - T)
 *   z = scale * x;  m = max_{s<n} z[r, s]
 *   y[r, s] = exp(z[r, s] - m) * (1 / sum_{s'<n} exp(z[r, s'] - m))   for s < n
 *   y[r, s] = 0                                                        for s >= n
 * One block per row; y may be x's memory (each element is read, then written, by one thread
 * after the row's sums). The product scale * x is rounded before the subtraction (no FMA),
 * as the CPU. */
template <typename T>
__global__ static void __launch_bounds__(SOFTMAX_THREADS)
    softmax_fwd_kernel(const T *x, cu_nd xl, int64_t sx, T *y, cu_nd yl, int64_t sy, float scale, bool causal,
                       int64_t R, int64_t Tq, int64_t S) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const int64_t n = causal ? (r % Tq) + (S - Tq) + 1 : S;
        const T *xr = x + nn_off(xl, r);
        float mx = -INFINITY;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = __fmul_rn(scale, cu_ld(xr + i * sx));
            mx = v > mx ? v : mx;
        }
        mx = nn_block_reduce(mx, nn_max(), -INFINITY, sh);
        float a = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a += expf(__fmul_rn(scale, cu_ld(xr + i * sx)) - mx);
        const float inv = 1.0f / nn_block_reduce(a, nn_sum(), 0.0f, sh);
        T *yr = y + nn_off(yl, r);
        for (int64_t i = threadIdx.x; i < S; i += blockDim.x)
            cu_st(yr + i * sy, i < n ? expf(__fmul_rn(scale, cu_ld(xr + i * sx)) - mx) * inv : 0.0f);
    }
}

/* Softmax backward, y, dy (R, S) -> dx (R, S), with n as in the forward:
 *   dx[r, s] = scale * y[r, s] * (dy[r, s] - sum_{s'<n} dy[r, s'] * y[r, s'])   for s < n
 *   dx[r, s] = 0                                                                 for s >= n
 * One block per row; dx may be dy's or y's memory (each element read, then written, by one
 * thread after the row's sum). */
template <typename T>
__global__ static void __launch_bounds__(SOFTMAX_THREADS)
    softmax_bwd_kernel(const T *y, cu_nd yl, int64_t sy, const T *dy, cu_nd dyl, int64_t sdy, T *dx, cu_nd dxl,
                       int64_t sdx, float scale, bool causal, int64_t R, int64_t Tq, int64_t S) {
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const int64_t n = causal ? (r % Tq) + (S - Tq) + 1 : S;
        const T *yr = y + nn_off(yl, r), *dyr = dy + nn_off(dyl, r);
        float a = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a += cu_ld(dyr + i * sdy) * cu_ld(yr + i * sy);
        const float dot = nn_block_reduce(a, nn_sum(), 0.0f, sh);
        T *dxr = dx + nn_off(dxl, r);
        for (int64_t i = threadIdx.x; i < S; i += blockDim.x)
            cu_st(dxr + i * sdx, i < n ? scale * cu_ld(yr + i * sy) * (cu_ld(dyr + i * sdy) - dot) : 0.0f);
    }
}

/* Rows R, the mask's T and columns S of x (..., T, S); dtype, causal geometry. */
static it_status softmax_check(const char *k, const it_softmax_args *args, const char *name, const it_tdesc *x,
                               int64_t *R, int64_t *T, int64_t *S) {
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: args is NULL", k);
    it_status st = nn_desc(k, name, x, 1);
    if (st) return st;
    if (!nn_float(x->dtype)) return nn_decline(k, name, x->dtype);
    *S = x->shape[x->ndim - 1];
    *T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    *R = 1;
    for (int d = 0; d < x->ndim - 1; d++) *R *= x->shape[d];
    const int64_t rows = *R, tq = *T, cols = *S;
    if (args->causal && cols < tq && rows > 0)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: causal mask needs cols >= rows, got rows %lld, cols %lld", k,
                        (long long)tq, (long long)cols);
    return IT_OK;
}

/* x (..., T, S) -> y = softmax(scale * x) over S, causal-masked if asked. */
extern "C" it_status cu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    const char *k = "softmax_fwd";
    int64_t R = 0, T = 0, S = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = softmax_check(k, args, "x", x, &R, &T, &S)) || (st = nn_like(k, "y", y, 1, "x", x, true)))
        return st;
    if (R == 0 || S == 0) return IT_OK;
    const unsigned threads = nn_row_threads(S, SOFTMAX_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using TY = decltype(tag);
        (void)tag;
        softmax_fwd_kernel<TY><<<blocks, threads, 0, s->stream>>>((const TY *)x->data, nn_rows(x), nn_last(x),
                                                                  (TY *)y->data, nn_rows(y), nn_last(y), args->scale,
                                                                  args->causal, R, T, S);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* y, dy (..., T, S) -> dx = scale * y * (dy - sum(dy * y)), 0 where masked. */
extern "C" it_status cu_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                                    it_tdesc *dx) {
    const char *k = "softmax_bwd";
    int64_t R = 0, T = 0, S = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = softmax_check(k, args, "y", y, &R, &T, &S)) || (st = nn_like(k, "dy", dy, 1, "y", y, false)) ||
        (st = nn_like(k, "dx", dx, 1, "y", y, true)))
        return st;
    if (R == 0 || S == 0) return IT_OK;
    const unsigned threads = nn_row_threads(S, SOFTMAX_THREADS), blocks = nn_row_blocks(R);
    st = cu_float_dispatch(y->dtype, k, [&](auto tag) -> it_status {
        using TY = decltype(tag);
        (void)tag;
        softmax_bwd_kernel<TY><<<blocks, threads, 0, s->stream>>>(
            (const TY *)y->data, nn_rows(y), nn_last(y), (const TY *)dy->data, nn_rows(dy), nn_last(dy), (TY *)dx->data,
            nn_rows(dx), nn_last(dx), args->scale, args->causal, R, T, S);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}

/* ---------------------------------------------------------------- cross entropy */

#define CE_THREADS 1024

/* The two sums of a cross-entropy row, over its first V columns (every thread of the block
 * calls it and gets both): *mx = max_v x[v], *sum = sum_v exp(x[v] - mx). */
template <typename T>
__device__ static inline void ce_row_max_sumexp(const T *xr, int64_t sx, int64_t V, float *sh, float *mx, float *sum) {
    float m = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float e = cu_ld(xr + v * sx);
        m = e > m ? e : m;
    }
    m = nn_block_reduce(m, nn_max(), -INFINITY, sh);
    float a = 0.0f;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) a += expf(cu_ld(xr + v * sx) - m);
    *mx = m;
    *sum = nn_block_reduce(a, nn_sum(), 0.0f, sh);
}

/* Cross entropy forward, logits (N, Vp), targets (N) in [0, V) -> losses (N) fp32, V = valid:
 *   m = max_{v<V} x[n, v];  losses[n] = log(sum_{v<V} exp(x[n, v] - m)) - (x[n, t] - m),  t = targets[n]
 * One block per row (columns V .. Vp are not read). A target outside [0, V) stops the kernel
 * before it is used. */
template <typename T, typename I>
__global__ static void __launch_bounds__(CE_THREADS)
    ce_fwd_kernel(const T *x, cu_nd xl, int64_t sx, const I *tg, cu_nd tl, int64_t V, float *loss, cu_nd ll,
                  int64_t N) {
    __shared__ float sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const int64_t t = (int64_t)tg[nn_off(tl, n)];
        if (t < 0 || t >= V) {
            nn_bad_index("cross_entropy_fwd", "targets", n, t, V, threadIdx.x == 0);
            return;
        }
        const T *xr = x + nn_off(xl, n);
        float mx, sum;
        ce_row_max_sumexp(xr, sx, V, sh, &mx, &sum);
        if (threadIdx.x == 0) loss[nn_off(ll, n)] = logf(sum) - (cu_ld(xr + t * sx) - mx);
    }
}

/* Cross entropy backward, logits (N, Vp), targets (N), dlosses (N) fp32 -> dlogits (N, Vp):
 *   p = exp(x[n, v] - m) * (1 / sum_{v'<V} exp(x[n, v'] - m))
 *   dlogits[n, v] = (p - [v == t]) * dlosses[n]   for v < V;   0 for V <= v < Vp
 * One block per row; dlogits may be the logits' memory (each element is read, then written,
 * by one thread after the row's sums). */
template <typename T, typename I>
__global__ static void __launch_bounds__(CE_THREADS)
    ce_bwd_kernel(const T *x, cu_nd xl, int64_t sx, const I *tg, cu_nd tl, int64_t V, const float *dl, cu_nd dll, T *dx,
                  cu_nd dxl, int64_t sdx, int64_t N, int64_t Vp) {
    __shared__ float sh[32];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const int64_t t = (int64_t)tg[nn_off(tl, n)];
        if (t < 0 || t >= V) {
            nn_bad_index("cross_entropy_bwd", "targets", n, t, V, threadIdx.x == 0);
            return;
        }
        const T *xr = x + nn_off(xl, n);
        float mx, sum;
        ce_row_max_sumexp(xr, sx, V, sh, &mx, &sum);
        const float inv = 1.0f / sum;
        const float g = dl[nn_off(dll, n)];
        T *dxr = dx + nn_off(dxl, n);
        for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
            float o = 0.0f;
            if (v < V) {
                const float p = expf(cu_ld(xr + v * sx) - mx) * inv;
                o = v == t ? (p - 1.0f) * g : p * g;
            }
            cu_st(dxr + v * sdx, o);
        }
    }
}

/* logits (N, Vp) (leading dims flattened), targets (N) int32/int64, valid in [1, Vp]. */
static it_status ce_check(const char *k, const it_tdesc *logits, const it_tdesc *targets, int64_t valid, int64_t *N,
                          int64_t *Vp) {
    it_status st;
    if ((st = nn_desc(k, "logits", logits, 0)) || (st = nn_desc(k, "targets", targets, 0))) return st;
    if (logits->ndim < 2)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: logits must be (N, Vp), got ndim %d", k, logits->ndim);
    if (!nn_float(logits->dtype)) return nn_decline(k, "logits", logits->dtype);
    *Vp = logits->shape[logits->ndim - 1];
    *N = 1;
    for (int d = 0; d < logits->ndim - 1; d++) *N *= logits->shape[d];
    if (nn_numel(targets) != *N)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: targets has %lld elements, expected N = %lld", k,
                        (long long)nn_numel(targets), (long long)*N);
    if (targets->dtype != IT_DTYPE_I32 && targets->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: targets dtype %s is not int32 or int64", k,
                        it_dtype_name(targets->dtype));
    if (valid < 0 || valid > *Vp || (valid == 0 && *N > 0))
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: valid = %lld outside [1, Vp = %lld]", k, (long long)valid,
                        (long long)*Vp);
    return IT_OK;
}

/* logits (N, Vp), targets (N) -> losses (N) fp32. */
extern "C" it_status cu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                          it_tdesc *losses) {
    const char *k = "cross_entropy_fwd";
    int64_t N = 0, Vp = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = ce_check(k, logits, targets, valid, &N, &Vp)) ||
        (st = nn_per_row(k, "losses", losses, "N", N, IT_DTYPE_FP32, true)))
        return st;
    if (N == 0) return IT_OK;
    const unsigned threads = nn_row_threads(valid, CE_THREADS), blocks = nn_row_blocks(N);
    st = cu_float_dispatch(logits->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        return nn_index_dispatch(targets->dtype, [&](auto itag) -> it_status {
            using I = decltype(itag);
            (void)itag;
            ce_fwd_kernel<T, I><<<blocks, threads, 0, s->stream>>>(
                (const T *)logits->data, nn_rows(logits), nn_last(logits), (const I *)targets->data, nn_all(targets),
                valid, (float *)losses->data, nn_all(losses), N);
            return IT_OK;
        });
    });
    return st ? st : cu_launch_check(k);
}

/* logits (N, Vp), targets (N), dlosses (N) fp32 -> dlogits (N, Vp) (written, padding = 0). */
extern "C" it_status cu_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                          const it_tdesc *dlosses, it_tdesc *dlogits) {
    const char *k = "cross_entropy_bwd";
    int64_t N = 0, Vp = 0;
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = ce_check(k, logits, targets, valid, &N, &Vp)) ||
        (st = nn_per_row(k, "dlosses", dlosses, "N", N, IT_DTYPE_FP32, false)) ||
        (st = nn_desc(k, "dlogits", dlogits, 0)))
        return st;
    if (dlogits->ndim != logits->ndim || dlogits->dtype != logits->dtype)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: dlogits (ndim %d, %s) differs from logits (ndim %d, %s)", k,
                        dlogits->ndim, it_dtype_name(dlogits->dtype), logits->ndim, it_dtype_name(logits->dtype));
    if ((st = nn_same(k, "dlogits", dlogits, "logits", logits, true))) return st;
    if (N == 0 || Vp == 0) return IT_OK;
    const unsigned threads = nn_row_threads(Vp, CE_THREADS), blocks = nn_row_blocks(N);
    st = cu_float_dispatch(logits->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        return nn_index_dispatch(targets->dtype, [&](auto itag) -> it_status {
            using I = decltype(itag);
            (void)itag;
            ce_bwd_kernel<T, I><<<blocks, threads, 0, s->stream>>>(
                (const T *)logits->data, nn_rows(logits), nn_last(logits), (const I *)targets->data, nn_all(targets),
                valid, (const float *)dlosses->data, nn_all(dlosses), (T *)dlogits->data, nn_rows(dlogits),
                nn_last(dlogits), N, Vp);
            return IT_OK;
        });
    });
    return st ? st : cu_launch_check(k);
}

/* ---------------------------------------------------------------- rope */

/* Strides of one rope call: x, y (B, T, H, D), cos, sin (T, D/2). */
struct rope_strides {
    int64_t x[4], y[4], c[2], s[2];
};

/* Rotary embedding on interleaved pairs, x, y (B, T, H, D), cos, sin (T, P = D/2):
 *   x0 = x[b, t, h, 2i], x1 = x[b, t, h, 2i+1], c = cos[t, i], s = sgn * sin[t, i] (sgn = -1 inverse)
 *   y[b, t, h, 2i] = x0*c - x1*s;  y[b, t, h, 2i+1] = x0*s + x1*c
 * One thread per pair; each product rounded, then one add (no FMA: the CPU's and PyTorch's
 * roundings, so fp32 gives the CPU's bits). y may be x's memory (a pair is read, then
 * written, by one thread). */
template <typename T>
__global__ static void __launch_bounds__(CU_THREADS)
    rope_kernel(const T *x, const T *cs, const T *sn, T *y, rope_strides st, int64_t Tn, int64_t H, int64_t P,
                int64_t total, float sgn) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += step) {
        const int64_t i = k % P, r = k / P;
        const int64_t h = r % H, t = (r / H) % Tn, b = r / (H * Tn);
        const T *xp = x + b * st.x[0] + t * st.x[1] + h * st.x[2];
        T *yp = y + b * st.y[0] + t * st.y[1] + h * st.y[2];
        const float x0 = cu_ld(xp + (2 * i) * st.x[3]), x1 = cu_ld(xp + (2 * i + 1) * st.x[3]);
        const float c = cu_ld(cs + t * st.c[0] + i * st.c[1]);
        const float s = sgn * cu_ld(sn + t * st.s[0] + i * st.s[1]);
        const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        const float y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        cu_st(yp + (2 * i) * st.y[3], y0);
        cu_st(yp + (2 * i + 1) * st.y[3], y1);
    }
}

/* cos or sin: (T, D/2) of x's dtype. */
static it_status rope_table(const char *k, const char *name, const it_tdesc *t, const it_tdesc *x) {
    it_status st = nn_desc_nd(k, name, t, 2);
    if (st) return st;
    if (t->shape[0] != x->shape[1] || t->shape[1] != x->shape[3] / 2)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s must be (T, D/2) = (%lld, %lld), got (%lld, %lld)", k, name,
                        (long long)x->shape[1], (long long)(x->shape[3] / 2), (long long)t->shape[0],
                        (long long)t->shape[1]);
    return nn_dtype(k, name, t, "x", x->dtype);
}

/* x (B, T, H, D), cos, sin (T, D/2) -> y (B, T, H, D). */
extern "C" it_status cu_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                             it_tdesc *y) {
    const char *k = "rope";
    it_status st = cu_stream_resolve(k, s, &s);
    if (st || (st = nn_desc_nd(k, "x", x, 4))) return st;
    if (!nn_float(x->dtype)) return nn_decline(k, "x", x->dtype);
    if (x->shape[3] % 2 != 0)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: head dim D = x.shape[3] = %lld must be even", k,
                        (long long)x->shape[3]);
    if ((st = rope_table(k, "cos", cos, x)) || (st = rope_table(k, "sin", sin, x)) || (st = nn_desc_nd(k, "y", y, 4)) ||
        (st = nn_same(k, "y", y, "x", x, true)))
        return st;
    const int64_t Tn = x->shape[1], H = x->shape[2], P = x->shape[3] / 2;
    const int64_t total = x->shape[0] * Tn * H * P;
    if (total == 0) return IT_OK;
    rope_strides rs;
    for (int d = 0; d < 4; d++) rs.x[d] = x->strides[d], rs.y[d] = y->strides[d];
    for (int d = 0; d < 2; d++) rs.c[d] = cos->strides[d], rs.s[d] = sin->strides[d];
    const float sgn = inverse ? -1.0f : 1.0f;
    st = cu_float_dispatch(x->dtype, k, [&](auto tag) -> it_status {
        using T = decltype(tag);
        (void)tag;
        rope_kernel<T><<<cu_blocks(total), CU_THREADS, 0, s->stream>>>(
            (const T *)x->data, (const T *)cos->data, (const T *)sin->data, (T *)y->data, rs, Tn, H, P, total, sgn);
        return IT_OK;
    });
    return st ? st : cu_launch_check(k);
}
