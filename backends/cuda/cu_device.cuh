/* Device-side helpers shared by the CUDA backend's kernels (kernels_ew.cu, kernels_nn.cu):
 * strided index arithmetic, loads and stores of the floating dtypes through float (or
 * double), launch sizes. C++ for nvcc only. */
#ifndef IT_CU_DEVICE_CUH
#define IT_CU_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_backend.h"

/* A strided view as the kernels take it by value: element i of the view (row-major order
 * over `shape`) lives at data + offset(i) elements. */
struct cu_nd {
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    int64_t strides[IT_MAX_DIMS];
};

static inline cu_nd cu_nd_of(const it_tdesc *d) {
    cu_nd n;
    n.ndim = d->ndim;
    for (int i = 0; i < IT_MAX_DIMS; i++) {
        n.shape[i] = i < d->ndim ? d->shape[i] : 1;
        n.strides[i] = i < d->ndim ? d->strides[i] : 0;
    }
    return n;
}

/* Elements in a descriptor (1 for a 0-d one). */
static inline int64_t cu_numel(const it_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

/* True when d is row-major contiguous (strides of size-1 dims do not matter). */
static inline bool cu_contiguous(const it_tdesc *d) {
    int64_t want = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != want) return false;
        want *= d->shape[i];
    }
    return true;
}

/* Offset in elements of the view's i-th element (row-major order over its shape). */
__host__ __device__ static inline int64_t cu_offset(const cu_nd &n, int64_t i) {
    int64_t off = 0;
    for (int d = n.ndim - 1; d >= 0; d--) {
        int64_t q = i / n.shape[d];
        off += (i - q * n.shape[d]) * n.strides[d];
        i = q;
    }
    return off;
}

/* Loads and stores of the floating dtypes through float: fp32 as is, bf16/fp16 widened
 * exactly, stores rounded to nearest even (as the CPU backend's conversions). */
template <typename T> __device__ static inline float cu_ld(const T *p);
template <> __device__ inline float cu_ld<float>(const float *p) { return *p; }
template <> __device__ inline float cu_ld<__nv_bfloat16>(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
template <> __device__ inline float cu_ld<__half>(const __half *p) { return __half2float(*p); }

template <typename T> __device__ static inline void cu_st(T *p, float v);
template <> __device__ inline void cu_st<float>(float *p, float v) { *p = v; }
template <> __device__ inline void cu_st<__nv_bfloat16>(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
template <> __device__ inline void cu_st<__half>(__half *p, float v) { *p = __float2half_rn(v); }

/* Threads per block for the elementwise kernels, and a grid that covers n elements with a
 * grid-stride loop (capped: the loop does the rest). */
#define CU_THREADS 256
static inline unsigned cu_blocks(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

/* Dispatch a templated launcher over the floating dtypes a kernel takes: fp32, bf16, fp16.
 * F is a generic lambda or functor called with a value of the element type (its value
 * unused). Returns IT_ERR_UNSUPPORTED (no output written: the core then runs the call on
 * the CPU fallback) for any other dtype. */
template <typename F> static inline it_status cu_float_dispatch(it_dtype dt, const char *kernel, F f) {
    switch (dt) {
    case IT_DTYPE_FP32: return f(float());
    case IT_DTYPE_BF16: return f(__nv_bfloat16());
    case IT_DTYPE_FP16: return f(__half());
    default:
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: dtype %s is served by the CPU fallback", kernel,
                        it_dtype_name(dt));
    }
}

#endif
