/* The CUDA backend's elementwise slots: cast, fill, copy_strided, unary, binary, reduce,
 * sgd_step, adam_step.
 *
 * Semantics are the CPU backend's (backends/cpu/cast.c, elementwise.c, optim.c), and so are
 * the results, bit for bit, wherever the CPU's arithmetic is plain IEEE operations: the
 * per-element math lives in cu_math.h, transcribed operation by operation from the CPU code
 * and unit-tested against it on the host (tests/unit/test_cuda_math.c); here it runs with
 * the unfused _rn intrinsics. Not bitwise: log (CUDA's logf) and fp64 exp/log/tanh/cosh.
 *
 * Layout: the operands' dims are coalesced on the host as the CPU does (size-1 dims dropped,
 * neighbours merged where every operand steps through both as through one), so contiguous
 * tensors of any ndim become one flat run and the kernels' index arithmetic is a multiply.
 * Every kernel is a grid-stride loop over the elements (or outputs) with int64_t indices.
 *
 * Declined (IT_ERR_UNSUPPORTED before anything is written, so the core's CPU fallback runs
 * the call): unary/binary on integer dtypes; reduce, sgd_step, adam_step on anything but
 * fp32/fp64 (the CPU refuses those too); cast / copy_strided into a destination with stride
 * 0 on a dim longer than 1 (several source elements race for one destination element; the
 * CPU defines the last one in index order as the winner); reduce trees deeper than
 * IT_CU_RED_MAX_DEPTH (more than ~2^60 elements, never in practice). */
#include <stdio.h>
#include <string.h>

#include "cu_device.cuh"
#include "cu_math.h"

namespace {

/* ---------------------------------------------------------------------------------- host checks */

void format_shape(char *buf, size_t cap, const it_tdesc *t) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* t is non-NULL with a valid dtype, ndim in [0, IT_MAX_DIMS], no negative shape or stride, an
 * element count and byte extent that fit an int64, data non-NULL when it has elements.
 * *numel gets the element count. */
it_status check_desc(const char *kernel, const char *which, const it_tdesc *t, int64_t *numel) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is NULL", kernel, which);
    if (!it_dtype_valid((int)t->dtype))
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s dtype %d is not a valid it_dtype (0..%d)", kernel, which,
                        (int)t->dtype, IT_DTYPE_COUNT - 1);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.ndim = %d outside [0, %d]", kernel, which, t->ndim,
                        IT_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.shape[%d] = %lld is negative", kernel, which, i,
                            (long long)t->shape[i]);
        if (t->strides[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.strides[%d] = %lld is negative", kernel, which, i,
                            (long long)t->strides[i]);
    }
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            n = 0;
            break;
        }
        if (n > INT64_MAX / t->shape[i])
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s element count overflows int64 at shape[%d] = %lld",
                            kernel, which, i, (long long)t->shape[i]);
        n *= t->shape[i];
    }
    if (n > 0) {
        const int64_t esize = (int64_t)it_dtype_size(t->dtype);
        int64_t span = 0;
        for (int i = 0; i < t->ndim; i++) {
            if (t->shape[i] > 1 && t->strides[i] > 0 && t->shape[i] > (INT64_MAX / esize - span) / t->strides[i])
                return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s byte extent overflows int64 at strides[%d] = %lld",
                                kernel, which, i, (long long)t->strides[i]);
            span += (t->shape[i] - 1) * t->strides[i];
        }
        if (t->data == NULL)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.data is NULL for %lld elements", kernel, which,
                            (long long)n);
    }
    *numel = n;
    return IT_OK;
}

/* t has ref's ndim and shape (messages show both shapes). */
it_status check_same_shape(const char *kernel, const char *tname, const it_tdesc *t, const char *rname,
                           const it_tdesc *ref) {
    bool same = t->ndim == ref->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = t->shape[i] == ref->shape[i];
    if (same) return IT_OK;
    char a[192], b[192];
    format_shape(a, sizeof a, t);
    format_shape(b, sizeof b, ref);
    return it_error(IT_ERR_INVALID_ARG, "cuda: %s: shape mismatch: %s %s (ndim %d), %s %s (ndim %d)", kernel, tname, a,
                    t->ndim, rname, b, ref->ndim);
}

it_status check_dtype(const char *kernel, const char *tname, const it_tdesc *t, const char *rname, it_dtype dt) {
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s dtype %s != %s dtype %s", kernel, tname,
                        it_dtype_name(t->dtype), rname, it_dtype_name(dt));
    return IT_OK;
}

/* True when t has stride 0 on a dim longer than 1 (it would write one element twice). */
bool overlapping(const it_tdesc *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1) return true;
    return false;
}

it_status check_writable(const char *kernel, const char *name, const it_tdesc *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    return IT_OK;
}

/* ---------------------------------------------------------------------------------- coalesced views */

/* Up to three operands over one shape, dims coalesced; st[k] are operand k's strides in
 * elements. nd >= 1 (one element: nd 1, shape 1). */
struct cu_iter {
    int nd;
    int64_t shape[IT_MAX_DIMS];
    int64_t st[3][IT_MAX_DIMS];
};

cu_iter iter_build(int ndim, const int64_t *shape, int nt, const int64_t *const *strides) {
    cu_iter it;
    memset(&it, 0, sizeof it);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        int k = it.nd;
        bool merge = k > 0;
        for (int j = 0; j < nt && merge; j++) merge = it.st[j][k - 1] == strides[j][d] * shape[d];
        if (merge) {
            it.shape[k - 1] *= shape[d];
            for (int j = 0; j < nt; j++) it.st[j][k - 1] = strides[j][d];
        } else {
            it.shape[k] = shape[d];
            for (int j = 0; j < nt; j++) it.st[j][k] = strides[j][d];
            it.nd++;
        }
    }
    if (it.nd == 0) {
        it.nd = 1;
        it.shape[0] = 1;
        for (int j = 0; j < nt; j++) it.st[j][0] = 1;
    }
    return it;
}

/* All operands step by 1 over one flat run. */
bool iter_flat(const cu_iter &it, int nt) {
    if (it.nd != 1) return false;
    for (int j = 0; j < nt; j++)
        if (it.st[j][0] != 1 && it.shape[0] != 1) return false;
    return true;
}

/* Element offsets of the i-th element (row-major over it.shape) in operands 0..K-1. */
template <int K> __device__ __forceinline__ void iter_offsets(const cu_iter &it, int64_t i, int64_t (&off)[K]) {
    if (it.nd == 1) {
#pragma unroll
        for (int k = 0; k < K; k++) off[k] = i * it.st[k][0];
        return;
    }
#pragma unroll
    for (int k = 0; k < K; k++) off[k] = 0;
    for (int d = it.nd - 1; d >= 0; d--) {
        int64_t q = i / it.shape[d], r = i - q * it.shape[d];
#pragma unroll
        for (int k = 0; k < K; k++) off[k] += r * it.st[k][d];
        i = q;
    }
}

#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------------------------- cast, copy, fill */

/* dst[i] = src[i] for elements of U (a same-size unsigned integer: a bit copy, NaN payloads
 * untouched); operand 0 = dst, 1 = src. */
template <typename U> __global__ void copy_kernel(const U *src, U *dst, cu_iter it, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        dst[off[0]] = src[off[1]];
    }
}

/* dst[i] = (dst dtype) src[i] by cast.c's rules: C::S -> C::D through it_sc_cvt_<src>_<dst>. */
template <typename C> __global__ void cast_kernel(const typename C::S *src, typename C::D *dst, cu_iter it, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        dst[off[0]] = C::cvt(src[off[1]]);
    }
}

/* dst[i] = v (the element's bit pattern) */
template <typename U> __global__ void fill_kernel(U *dst, cu_iter it, int64_t n, U v) {
    GRID_STRIDE(i, n) {
        int64_t off[1];
        iter_offsets<1>(it, i, off);
        dst[off[0]] = v;
    }
}

template <typename U> void launch_copy(const void *src, void *dst, const cu_iter &it, int64_t n, cudaStream_t st) {
    copy_kernel<U><<<cu_blocks(n), CU_THREADS, 0, st>>>((const U *)src, (U *)dst, it, n);
}

/* A bit copy of n elements of es bytes (operand 0 = dst, 1 = src): cudaMemcpyAsync when both
 * are one flat run, else the copy kernel. */
it_status copy_elems(const char *kernel, it_stream *s, const void *src, void *dst, size_t es, const cu_iter &it,
                     int64_t n) {
    if (iter_flat(it, 2)) {
        if (src == dst) return IT_OK;
        return cu_check(cudaMemcpyAsync(dst, src, (size_t)n * es, cudaMemcpyDeviceToDevice, s->stream),
                        "%s: cudaMemcpyAsync of %lld bytes", kernel, (long long)((size_t)n * es));
    }
    switch (es) {
    case 1: launch_copy<uint8_t>(src, dst, it, n, s->stream); break;
    case 2: launch_copy<uint16_t>(src, dst, it, n, s->stream); break;
    case 4: launch_copy<uint32_t>(src, dst, it, n, s->stream); break;
    default: launch_copy<uint64_t>(src, dst, it, n, s->stream); break;
    }
    return cu_launch_check(kernel);
}

/* One conversion functor per (src, dst) pair, and the launcher table cast_fns[src][dst]. */
#define CU_DEF_CVT(SN, SE, ST, SK, DN, DT)                                                                             \
    struct cvt_##SN##_##DN {                                                                                           \
        typedef ST S;                                                                                                  \
        typedef DT D;                                                                                                  \
        static __device__ __forceinline__ DT cvt(ST x) { return it_sc_cvt_##SN##_##DN(x); }                            \
    };
#define CU_DEF_CVTS_TO(DN, DE, DT, DK, unused) IT_SC_FOR_SRC(CU_DEF_CVT, DN, DT)
IT_SC_FOR_DST(CU_DEF_CVTS_TO, 0)

typedef void (*cast_fn)(const void *src, void *dst, const cu_iter &it, int64_t n, cudaStream_t st);
template <typename C> void launch_cast(const void *src, void *dst, const cu_iter &it, int64_t n, cudaStream_t st) {
    cast_kernel<C><<<cu_blocks(n), CU_THREADS, 0, st>>>((const typename C::S *)src, (typename C::D *)dst, it, n);
}
#define CU_CAST_ENTRY(DN, DE, DT, DK, SN) launch_cast<cvt_##SN##_##DN>,
#define CU_CAST_ROW(SN, SE, ST, SK, unused) {IT_SC_FOR_DST(CU_CAST_ENTRY, SN)},
const cast_fn cast_fns[IT_DTYPE_COUNT][IT_DTYPE_COUNT] = {IT_SC_FOR_SRC(CU_CAST_ROW, 0)};

/* ---------------------------------------------------------------------------------- unary, binary */

/* Element access of the floating dtypes: storage S, compute type C (float for fp32 / bf16 /
 * fp16, double for fp64). bf16 / fp16 go through it_scalar_cast.h's conversions (the CPU's:
 * exact widening, round to nearest even, NaN payloads as the CPU keeps them). */
template <typename T> struct ew_type;
template <> struct ew_type<float> {
    typedef float S;
    typedef float C;
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float v) { return v; }
};
template <> struct ew_type<__nv_bfloat16> {
    typedef uint16_t S;
    typedef float C;
    static __device__ __forceinline__ float ld(uint16_t v) { return it_sc_bf16_to_fp32(v); }
    static __device__ __forceinline__ uint16_t st(float v) { return it_sc_fp32_to_bf16(v); }
};
template <> struct ew_type<__half> {
    typedef uint16_t S;
    typedef float C;
    static __device__ __forceinline__ float ld(uint16_t v) { return it_sc_fp16_to_fp32(v); }
    static __device__ __forceinline__ uint16_t st(float v) { return it_sc_fp32_to_fp16(v); }
};
template <> struct ew_type<double> {
    typedef double S;
    typedef double C;
    static __device__ __forceinline__ double ld(double v) { return v; }
    static __device__ __forceinline__ double st(double v) { return v; }
};

__device__ __forceinline__ float unary_c(int op, float alpha, float v) { return it_cu_unary_f32(op, alpha, v); }
__device__ __forceinline__ double unary_c(int op, float alpha, double v) {
    return it_cu_unary_f64(op, (double)alpha, v);
}
__device__ __forceinline__ float binary_c(int op, float p, float q) { return it_cu_binary_f32(op, p, q); }
__device__ __forceinline__ double binary_c(int op, double p, double q) { return it_cu_binary_f64(op, p, q); }

/* out[i] = f_OP(x[i]) (see it_unary_op; alpha for SCALE / ADD_SCALAR), computed in E::C;
 * operand 0 = out, 1 = x. */
template <typename E, int OP>
__global__ void unary_kernel(const typename E::S *x, typename E::S *out, cu_iter it, int64_t n, float alpha) {
    GRID_STRIDE(i, n) {
        int64_t off[2];
        iter_offsets<2>(it, i, off);
        out[off[0]] = E::st(unary_c(OP, alpha, E::ld(x[off[1]])));
    }
}

/* out[i] = f_OP(a[i], b[i]) (see it_binary_op), computed in E::C; operands out, a, b. */
template <typename E, int OP>
__global__ void binary_kernel(const typename E::S *a, const typename E::S *b, typename E::S *out, cu_iter it,
                              int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t off[3];
        iter_offsets<3>(it, i, off);
        out[off[0]] = E::st(binary_c(OP, E::ld(a[off[1]]), E::ld(b[off[2]])));
    }
}

template <typename E, int OP>
void launch_unary(const void *x, void *out, const cu_iter &it, int64_t n, float alpha, cudaStream_t st) {
    typedef typename E::S S;
    unary_kernel<E, OP><<<cu_blocks(n), CU_THREADS, 0, st>>>((const S *)x, (S *)out, it, n, alpha);
}
template <typename E, int OP>
void launch_binary(const void *a, const void *b, void *out, const cu_iter &it, int64_t n, cudaStream_t st) {
    typedef typename E::S S;
    binary_kernel<E, OP><<<cu_blocks(n), CU_THREADS, 0, st>>>((const S *)a, (const S *)b, (S *)out, it, n);
}

/* One launch of the op's kernel for element type T (op checked by the caller). */
template <typename T>
void unary_dispatch(int op, const void *x, void *out, const cu_iter &it, int64_t n, float alpha, cudaStream_t st) {
    typedef ew_type<T> E;
    switch (op) {
    case IT_UNARY_NEG: launch_unary<E, IT_UNARY_NEG>(x, out, it, n, alpha, st); break;
    case IT_UNARY_SCALE: launch_unary<E, IT_UNARY_SCALE>(x, out, it, n, alpha, st); break;
    case IT_UNARY_EXP: launch_unary<E, IT_UNARY_EXP>(x, out, it, n, alpha, st); break;
    case IT_UNARY_LOG: launch_unary<E, IT_UNARY_LOG>(x, out, it, n, alpha, st); break;
    case IT_UNARY_SQRT: launch_unary<E, IT_UNARY_SQRT>(x, out, it, n, alpha, st); break;
    case IT_UNARY_RSQRT: launch_unary<E, IT_UNARY_RSQRT>(x, out, it, n, alpha, st); break;
    case IT_UNARY_SQUARE: launch_unary<E, IT_UNARY_SQUARE>(x, out, it, n, alpha, st); break;
    case IT_UNARY_TANH: launch_unary<E, IT_UNARY_TANH>(x, out, it, n, alpha, st); break;
    case IT_UNARY_GELU: launch_unary<E, IT_UNARY_GELU>(x, out, it, n, alpha, st); break;
    case IT_UNARY_SILU: launch_unary<E, IT_UNARY_SILU>(x, out, it, n, alpha, st); break;
    case IT_UNARY_ADD_SCALAR: launch_unary<E, IT_UNARY_ADD_SCALAR>(x, out, it, n, alpha, st); break;
    default: launch_unary<E, IT_UNARY_RECIP>(x, out, it, n, alpha, st); break;
    }
}
template <typename T>
void binary_dispatch(int op, const void *a, const void *b, void *out, const cu_iter &it, int64_t n, cudaStream_t st) {
    typedef ew_type<T> E;
    switch (op) {
    case IT_BINARY_ADD: launch_binary<E, IT_BINARY_ADD>(a, b, out, it, n, st); break;
    case IT_BINARY_SUB: launch_binary<E, IT_BINARY_SUB>(a, b, out, it, n, st); break;
    case IT_BINARY_MUL: launch_binary<E, IT_BINARY_MUL>(a, b, out, it, n, st); break;
    case IT_BINARY_DIV: launch_binary<E, IT_BINARY_DIV>(a, b, out, it, n, st); break;
    case IT_BINARY_MAX: launch_binary<E, IT_BINARY_MAX>(a, b, out, it, n, st); break;
    case IT_BINARY_MIN: launch_binary<E, IT_BINARY_MIN>(a, b, out, it, n, st); break;
    case IT_BINARY_GELU_BWD: launch_binary<E, IT_BINARY_GELU_BWD>(a, b, out, it, n, st); break;
    case IT_BINARY_SILU_BWD: launch_binary<E, IT_BINARY_SILU_BWD>(a, b, out, it, n, st); break;
    default: launch_binary<E, IT_BINARY_TANH_BWD>(a, b, out, it, n, st); break;
    }
}

/* ---------------------------------------------------------------------------------- reduce
 * The CPU's summation tree, evaluated exactly (cu_math.h, elementwise.c's header comment).
 * All outputs share the tree's shape. P = 2^logP threads work on one output: the top logP
 * levels of its tree are split among them (lane bit P/2 picks the right half first), each
 * thread evaluates the subtree it lands on serially, and the halves are joined back up in
 * shared memory, level by level, in the tree's own order. So results are the CPU's bits. */

__device__ __forceinline__ float r_div(float a, float b) { return it_sc_fdiv(a, b); }
__device__ __forceinline__ double r_div(double a, double b) { return it_sc_ddiv(a, b); }
__device__ __forceinline__ float r_join(float l, float r, int op) { return it_cu_red_join_f32(l, r, op); }
__device__ __forceinline__ double r_join(double l, double r, int op) { return it_cu_red_join_f64(l, r, op); }
__device__ __forceinline__ float r_subtree(const it_cu_red_plan &p, const float *x, it_cu_rnode root) {
    return it_cu_red_subtree_f32(&p, x, root);
}
__device__ __forceinline__ double r_subtree(const it_cu_red_plan &p, const double *x, it_cu_rnode root) {
    return it_cu_red_subtree_f64(&p, x, root);
}

/* out[o] = reduce_op over x's reduced dims of output o (mean: the sum / nred), P = 2^logP
 * threads per output, CU_THREADS / P outputs per block: thread t is lane t / G of output
 * t % G of its block's group. */
template <typename T> __global__ void reduce_kernel(const T *x, T *out, it_cu_red_plan p, int mean, T nred) {
    __shared__ T val[CU_THREADS];
    const int t = threadIdx.x, G = CU_THREADS >> p.logP, g = t % G, lane = t / G;
    for (int64_t base = (int64_t)blockIdx.x * G; base < p.nout; base += (int64_t)gridDim.x * G) {
        const int64_t o = base + g;
        const bool active = o < p.nout;
        /* descend the top levels: the group of Pc lanes holding `node` halves at each split */
        it_cu_rnode node = it_cu_red_root(&p);
        unsigned splits = 0;
        int Pc = 1 << p.logP;
        for (int level = 0; Pc > 1 && it_cu_red_split(node); level++) {
            Pc >>= 1;
            node = (lane & Pc) ? it_cu_red_right(&p, node) : it_cu_red_left(&p, node);
            splits |= 1u << level;
        }
        T v = 0;
        if (active && (lane & (Pc - 1)) == 0) v = r_subtree(p, x + it_cu_offset_of(o, p.nk, p.kshape, p.kxs), node);
        __syncthreads(); /* the previous round's readers are done with val */
        val[t] = v;
        /* join back up: at level L the group of P >> L lanes joins its halves if it split there */
        for (int L = p.logP - 1; L >= 0; L--) {
            __syncthreads();
            const int gs = (1 << p.logP) >> L;
            if (((splits >> L) & 1) && (lane & (gs - 1)) == 0) val[t] = r_join(val[t], val[t + (gs / 2) * G], p.op);
        }
        if (active && lane == 0) {
            T r = val[t];
            out[it_cu_offset_of(o, p.nk, p.kshape, p.kos)] = mean ? r_div(r, nred) : r;
        }
    }
}

/* out[i] = v for every output (an empty reduction's identity); operand 0 = out. */
template <typename T> __global__ void red_identity_kernel(T *out, cu_iter it, int64_t n, T v) {
    GRID_STRIDE(i, n) {
        int64_t off[1];
        iter_offsets<1>(it, i, off);
        out[off[0]] = v;
    }
}

template <typename T> it_status launch_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    it_cu_red_plan p = it_cu_red_plan_build(x, out, (int)op);
    if (p.nout == 0) return IT_OK;
    if (p.nred == 0) { /* empty: 0 (SUM, SUMSQ), NaN (MEAN), -Inf (MAX) */
        T v = op == IT_REDUCE_MAX ? (T)-INFINITY : op == IT_REDUCE_MEAN ? (T)NAN : (T)0;
        const int64_t *st[1] = {out->strides};
        cu_iter it = iter_build(out->ndim, out->shape, 1, st);
        red_identity_kernel<T><<<cu_blocks(p.nout), CU_THREADS, 0, s->stream>>>((T *)out->data, it, p.nout, v);
        return cu_launch_check("reduce");
    }
    if (it_cu_red_depth(&p) > IT_CU_RED_MAX_DEPTH)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: reduce: %lld elements per output is past the kernel's tree depth",
                        (long long)p.nred);
    /* lanes per output: about one per 128-element leaf, at most CU_THREADS, and fewer when
     * the outputs alone fill the device (~2^20 threads) */
    int64_t leaves = (p.nred + IT_CU_RED_LEAF - 1) / IT_CU_RED_LEAF;
    int logP = 0;
    while ((1 << logP) < CU_THREADS && ((int64_t)1 << logP) < leaves && p.nout * ((int64_t)2 << logP) <= (1 << 20))
        logP++;
    p.logP = logP;
    int64_t threads = p.nout << logP; /* nout * P, rounded up to whole blocks by cu_blocks */
    reduce_kernel<T><<<cu_blocks(threads), CU_THREADS, 0, s->stream>>>((const T *)x->data, (T *)out->data, p,
                                                                       op == IT_REDUCE_MEAN, (T)p.nred);
    return cu_launch_check("reduce");
}

/* ---------------------------------------------------------------------------------- optimizers */

/* param[i] = fma(grad[i] * gs, -lr, param[i])   (optim.c's sgd; g * 1 is exact) */
__global__ void sgd_kernel_f32(float *p, const float *g, int64_t n, float gs, float neg_lr) {
    GRID_STRIDE(i, n) p[i] = it_sc_sgd_f32(p[i], g[i], gs, neg_lr);
}
/* the same in fp64 */
__global__ void sgd_kernel_f64(double *p, const double *g, int64_t n, double gs, double neg_lr) {
    GRID_STRIDE(i, n) p[i] = it_sc_sgd_f64(p[i], g[i], gs, neg_lr);
}

/* One Adam/AdamW step per element (it_sc_adam_f32: g *= gs; AdamW p *= 1 - lr*wd or Adam
 * g += wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p += -lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)) */
__global__ void adam_kernel_f32(float *p, const float *g, float *m, float *v, int64_t n, it_sc_adam_f32c c) {
    GRID_STRIDE(i, n) {
        float pi = p[i], mi = m[i], vi = v[i];
        it_sc_adam_f32(c, c.mode, &pi, g[i], &mi, &vi);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}
/* the same in fp64, with the double scalars */
__global__ void adam_kernel_f64(double *p, const double *g, double *m, double *v, int64_t n, it_sc_adam_f64c c) {
    GRID_STRIDE(i, n) {
        double pi = p[i], mi = m[i], vi = v[i];
        it_sc_adam_f64(c, c.mode, &pi, g[i], &mi, &vi);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

/* optim.c's checks: t is row-major contiguous (any shape); *n its element count. */
it_status check_flat(const char *kernel, const char *name, const it_tdesc *t, int64_t *n) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is NULL", kernel, name);
    if (t->ndim < 0 || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.ndim = %d outside [0, %d]", kernel, name, t->ndim,
                        IT_MAX_DIMS);
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.shape[%d] = %lld is negative", kernel, name, d,
                            (long long)t->shape[d]);
        if (t->shape[d] != 1 && t->strides[d] != expect)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is not contiguous (strides[%d] = %lld, expected %lld)",
                            kernel, name, d, (long long)t->strides[d], (long long)expect);
        expect *= t->shape[d];
    }
    *n = expect;
    if (expect > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.data is NULL", kernel, name);
    return IT_OK;
}
it_status check_like(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *p, int64_t n) {
    int64_t m;
    it_status st;
    if ((st = check_flat(kernel, name, t, &m))) return st;
    if (m != n) {
        char a[192], b[192];
        format_shape(a, sizeof a, t);
        format_shape(b, sizeof b, p);
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s %s has %lld elements, param %s has %lld", kernel, name, a,
                        (long long)m, b, (long long)n);
    }
    return check_dtype(kernel, name, t, "param", p->dtype);
}
it_status check_fp32_fp64(const char *kernel, const it_tdesc *t) {
    if (t->dtype != IT_DTYPE_FP32 && t->dtype != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: dtype %s is served by the CPU fallback", kernel,
                        it_dtype_name(t->dtype));
    return IT_OK;
}

} // namespace

/* ====================================================================================== slots */

/* dst = (dst.dtype) src elementwise, any strides (src may broadcast), cast.c's rules. */
it_status cu_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st;
    int64_t ns, nd;
    if ((st = cu_stream_resolve("cast", s, &s))) return st;
    if ((st = check_desc("cast", "src", src, &ns)) || (st = check_desc("cast", "dst", dst, &nd)) ||
        (st = check_same_shape("cast", "src", src, "dst", dst)))
        return st;
    if (nd == 0) return IT_OK;
    if (overlapping(dst))
        return it_error(IT_ERR_UNSUPPORTED, "cuda: cast: dst has stride 0 on a dim longer than 1 (CPU fallback)");
    const int64_t *strides[2] = {dst->strides, src->strides};
    cu_iter it = iter_build(dst->ndim, dst->shape, 2, strides);
    /* same dtype: a bit copy (NaN payloads untouched), except bool, normalized to 0 / 1 */
    if (src->dtype == dst->dtype && dst->dtype != IT_DTYPE_BOOL)
        return copy_elems("cast", s, src->data, dst->data, it_dtype_size(dst->dtype), it, nd);
    cast_fns[src->dtype][dst->dtype](src->data, dst->data, it, nd, s->stream);
    return cu_launch_check("cast");
}

/* dst[i] = value converted as cast() converts (the CPU's conversion, on the host), any strides. */
it_status cu_fill(it_stream *s, it_tdesc *dst, it_scalar value) {
    it_status st;
    int64_t nd;
    if ((st = cu_stream_resolve("fill", s, &s))) return st;
    if ((st = check_desc("fill", "dst", dst, &nd))) return st;
    if (value.kind != IT_SCALAR_F64 && value.kind != IT_SCALAR_I64 && value.kind != IT_SCALAR_U64)
        return it_error(IT_ERR_INVALID_ARG, "cuda: fill: value kind %d is not an it_scalar_kind (0..2)",
                        (int)value.kind);
    if (nd == 0) return IT_OK;
    /* the element's bytes, by the CPU's own fill into one host element */
    uint64_t bits = 0;
    it_tdesc h;
    memset(&h, 0, sizeof h);
    h.data = &bits;
    h.dtype = dst->dtype;
    h.ndim = 0;
    if ((st = it_cpu_kernels()->fill(NULL, &h, value))) return st;
    /* stride-0 dims write one place with one value: leave them out */
    int ndim = 0;
    int64_t shape[IT_MAX_DIMS], strides[IT_MAX_DIMS], n = 1;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->strides[i] == 0) continue;
        shape[ndim] = dst->shape[i];
        strides[ndim++] = dst->strides[i];
        n *= dst->shape[i];
    }
    const int64_t *sp[1] = {strides};
    cu_iter it = iter_build(ndim, shape, 1, sp);
    const size_t es = it_dtype_size(dst->dtype);
    unsigned char b[8];
    memcpy(b, &bits, sizeof b);
    bool bytes_equal = true;
    for (size_t i = 1; i < es; i++) bytes_equal = bytes_equal && b[i] == b[0];
    if (iter_flat(it, 1) && bytes_equal) /* 0, all-ones, any byte pattern: a memset */
        return cu_check(cudaMemsetAsync(dst->data, b[0], (size_t)n * es, s->stream),
                        "fill: cudaMemsetAsync of %lld bytes", (long long)((size_t)n * es));
    unsigned blocks = cu_blocks(n);
    switch (es) {
    case 1: fill_kernel<uint8_t><<<blocks, CU_THREADS, 0, s->stream>>>((uint8_t *)dst->data, it, n, b[0]); break;
    case 2: {
        uint16_t v;
        memcpy(&v, b, 2);
        fill_kernel<uint16_t><<<blocks, CU_THREADS, 0, s->stream>>>((uint16_t *)dst->data, it, n, v);
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, b, 4);
        fill_kernel<uint32_t><<<blocks, CU_THREADS, 0, s->stream>>>((uint32_t *)dst->data, it, n, v);
        break;
    }
    default: fill_kernel<uint64_t><<<blocks, CU_THREADS, 0, s->stream>>>((uint64_t *)dst->data, it, n, bits); break;
    }
    return cu_launch_check("fill");
}

/* dst = src, same dtype and shape, any strides (a bit copy; cudaMemcpyAsync when both are flat). */
it_status cu_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st;
    int64_t ns, nd;
    if ((st = cu_stream_resolve("copy_strided", s, &s))) return st;
    if ((st = check_desc("copy_strided", "src", src, &ns)) || (st = check_desc("copy_strided", "dst", dst, &nd)))
        return st;
    if (src->dtype != dst->dtype)
        return it_error(IT_ERR_INVALID_ARG, "cuda: copy_strided: dtype mismatch: src %s, dst %s (use cast to convert)",
                        it_dtype_name(src->dtype), it_dtype_name(dst->dtype));
    if ((st = check_same_shape("copy_strided", "src", src, "dst", dst))) return st;
    if (nd == 0) return IT_OK;
    if (overlapping(dst))
        return it_error(IT_ERR_UNSUPPORTED,
                        "cuda: copy_strided: dst has stride 0 on a dim longer than 1 (CPU fallback)");
    const int64_t *strides[2] = {dst->strides, src->strides};
    cu_iter it = iter_build(dst->ndim, dst->shape, 2, strides);
    return copy_elems("copy_strided", s, src->data, dst->data, it_dtype_size(dst->dtype), it, nd);
}

/* out = f(x) elementwise (it_unary_op), x with out's shape (stride 0 = broadcast); fp32 /
 * bf16 / fp16 computed in fp32, fp64 in fp64. */
it_status cu_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    it_status st;
    int64_t nx, n;
    if ((st = cu_stream_resolve("unary", s, &s))) return st;
    if ((int)op < 0 || op >= IT_UNARY_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "cuda: unary: op %d out of range", (int)op);
    if ((st = check_desc("unary", "x", x, &nx)) || (st = check_desc("unary", "out", out, &n)) ||
        (st = check_same_shape("unary", "x", x, "out", out)) ||
        (st = check_dtype("unary", "x", x, "out", out->dtype)) || (st = check_writable("unary", "out", out)))
        return st;
    const int64_t *strides[2] = {out->strides, x->strides};
    cu_iter it = iter_build(out->ndim, out->shape, 2, strides);
    auto launch = [&](auto t) -> it_status {
        if (n == 0) return IT_OK;
        unary_dispatch<decltype(t)>((int)op, x->data, out->data, it, n, alpha, s->stream);
        return cu_launch_check("unary");
    };
    if (out->dtype == IT_DTYPE_FP64) return launch(double());
    return cu_float_dispatch(out->dtype, "unary", launch);
}

/* out = f(a, b) elementwise (it_binary_op), a and b with out's shape (stride 0 = broadcast). */
it_status cu_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    it_status st;
    int64_t na, nb, n;
    if ((st = cu_stream_resolve("binary", s, &s))) return st;
    if ((int)op < 0 || op >= IT_BINARY_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "cuda: binary: op %d out of range", (int)op);
    if ((st = check_desc("binary", "a", a, &na)) || (st = check_desc("binary", "b", b, &nb)) ||
        (st = check_desc("binary", "out", out, &n)) || (st = check_same_shape("binary", "a", a, "out", out)) ||
        (st = check_same_shape("binary", "b", b, "out", out)) ||
        (st = check_dtype("binary", "a", a, "out", out->dtype)) ||
        (st = check_dtype("binary", "b", b, "out", out->dtype)) || (st = check_writable("binary", "out", out)))
        return st;
    const int64_t *strides[3] = {out->strides, a->strides, b->strides};
    cu_iter it = iter_build(out->ndim, out->shape, 3, strides);
    auto launch = [&](auto t) -> it_status {
        if (n == 0) return IT_OK;
        binary_dispatch<decltype(t)>((int)op, a->data, b->data, out->data, it, n, s->stream);
        return cu_launch_check("binary");
    };
    if (out->dtype == IT_DTYPE_FP64) return launch(double());
    return cu_float_dispatch(out->dtype, "binary", launch);
}

/* out = SUM / MEAN / MAX / SUMSQ of x over the dims where out has size 1, in the CPU's
 * fixed pairwise order (fp32 accumulates in fp32, fp64 in fp64). */
it_status cu_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    it_status st;
    int64_t nx, no;
    if ((st = cu_stream_resolve("reduce", s, &s))) return st;
    if ((int)op < 0 || op >= IT_REDUCE_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "cuda: reduce: op %d out of range", (int)op);
    if ((st = check_desc("reduce", "x", x, &nx)) || (st = check_desc("reduce", "out", out, &no)) ||
        (st = check_writable("reduce", "out", out)))
        return st;
    bool shape_ok = x->ndim == out->ndim;
    for (int d = 0; shape_ok && d < x->ndim; d++) shape_ok = out->shape[d] == x->shape[d] || out->shape[d] == 1;
    if (!shape_ok) {
        char a[192], b[192];
        format_shape(a, sizeof a, x);
        format_shape(b, sizeof b, out);
        return it_error(IT_ERR_INVALID_ARG, "cuda: reduce: out %s must have x %s's ndim with each dim x's or 1", b, a);
    }
    if ((st = check_dtype("reduce", "x", x, "out", out->dtype)) || (st = check_fp32_fp64("reduce", x))) return st;
    if (x->dtype == IT_DTYPE_FP32) return launch_reduce<float>(s, op, x, out);
    return launch_reduce<double>(s, op, x, out);
}

/* param (n) = param - lr * (grad_scale * grad), flat contiguous fp32 / fp64. */
it_status cu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    it_status st;
    int64_t n;
    const char *k = "sgd_step";
    if ((st = cu_stream_resolve(k, s, &s))) return st;
    if ((st = check_flat(k, "param", param, &n)) || (st = check_like(k, "grad", grad, param, n)) ||
        (st = check_fp32_fp64(k, param)))
        return st;
    if (n == 0) return IT_OK;
    double nlr = -it_f32_as_decimal(lr);
    if (param->dtype == IT_DTYPE_FP32)
        sgd_kernel_f32<<<cu_blocks(n), CU_THREADS, 0, s->stream>>>((float *)param->data, (const float *)grad->data, n,
                                                                   grad_scale, (float)nlr);
    else
        sgd_kernel_f64<<<cu_blocks(n), CU_THREADS, 0, s->stream>>>((double *)param->data, (const double *)grad->data, n,
                                                                   (double)grad_scale, nlr);
    return cu_launch_check(k);
}

/* One Adam / AdamW step on flat contiguous param, grad, m, v (fp32 / fp64), optim.c's order;
 * the step's scalars (bias corrections included) formed in double on the host. */
it_status cu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                       it_tdesc *v) {
    it_status st;
    int64_t n;
    const char *k = "adam_step";
    if ((st = cu_stream_resolve(k, s, &s))) return st;
    if (args == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: args is NULL", k);
    if ((st = check_flat(k, "param", param, &n)) || (st = check_like(k, "grad", grad, param, n)) ||
        (st = check_like(k, "m", m, param, n)) || (st = check_like(k, "v", v, param, n)))
        return st;
    if (args->step < 1)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: step = %lld, must be >= 1", k, (long long)args->step);
    if ((st = check_fp32_fp64(k, param))) return st;
    if (n == 0) return IT_OK;
    it_sc_adam_f64c c = it_sc_adam_make(args);
    if (param->dtype == IT_DTYPE_FP32)
        adam_kernel_f32<<<cu_blocks(n), CU_THREADS, 0, s->stream>>>((float *)param->data, (const float *)grad->data,
                                                                    (float *)m->data, (float *)v->data, n,
                                                                    it_sc_adam_to_f32(&c));
    else
        adam_kernel_f64<<<cu_blocks(n), CU_THREADS, 0, s->stream>>>((double *)param->data, (const double *)grad->data,
                                                                    (double *)m->data, (double *)v->data, n, c);
    return cu_launch_check(k);
}
