/* The CUDA backend's private layouts, shared by its files:
 *
 *   runtime.c      devices, streams (cudaStream_t + a lazily made cuBLAS handle), events,
 *                  memory (cudaMalloc, cudaMemcpy), the runtime table
 *   gemm.c         the gemm slot over cuBLAS (strided batched, fp32/fp64/bf16/fp16)
 *   gemm_plan.c    the pure host logic that maps a row-major it_gemm_args onto cuBLAS's
 *                  column-major call (unit-tested on any machine: tests/unit/test_cuda_host.c)
 *   kernels_ew.cu  cast, fill, copy_strided, unary, binary, reduce, sgd, adam
 *   kernels_nn.cu  embedding, layernorm, rmsnorm, softmax, cross entropy, rope
 *   flash_attention.cu  flash attention forward and backward (FlashAttention-2 style)
 *   flash_plan.c   the pure host logic that validates a flash attention call and plans its
 *                  launches (unit-tested on any machine: tests/unit/test_cuda_flash_plan.c)
 *   ccl.c          collectives over NCCL
 *   backend.c      the it_backend struct and the plugin entry point
 *
 * The .cu files are C++ (nvcc); what they define for the kernel table is extern "C" and
 * declared here. Nothing here is seen by the core; the core sees only backend.h. */
#ifndef IT_CUDA_BACKEND_H
#define IT_CUDA_BACKEND_H

#include <cuda_runtime_api.h>

#include "infinitrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The registry's limit (src/core/registry.c). */
#define CU_MAX_DEVICES 64

/* A stream of the backend: a non-blocking CUDA stream (the default stream of a device too,
 * made on first use), so that no stream serializes with another behind the legacy default
 * stream's back. The synchronous memcpy synchronizes the device first (runtime.c). */
struct it_stream {
    int device;
    int priority;
    bool is_default;
    cudaStream_t stream;
    void *blas; /* cublasHandle_t bound to `stream`, made on first use (runtime.c) */
};

struct it_event {
    int device;
    cudaEvent_t event;
    bool recorded;
};

/* ---------------------------------------------------------------- runtime.c */
extern const it_runtime cu_runtime;
/* IT_OK when e == cudaSuccess; else it_error(IT_ERR_BACKEND, "cuda: <what>: <name> (<string>)")
 * with `what` formatted from fmt. */
it_status cu_check(cudaError_t e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The stream work goes on: `s` itself, or for NULL the current device's default stream.
 * Also makes `s`'s device current on the calling thread (kernels launch there). */
it_status cu_stream_resolve(const char *fn, it_stream *s, it_stream **out);
/* After a kernel launch: cudaGetLastError() as an it_status naming the kernel. */
it_status cu_launch_check(const char *kernel);
/* The cuBLAS handle of `s` (made and bound on first use). */
it_status cu_blas_handle(it_stream *s, void **handle);

/* ---------------------------------------------------------------- gemm.c */
it_status cu_gemm(it_stream *s, const it_gemm_args *args);

/* ---------------------------------------------------------------- kernels_ew.cu */
it_status cu_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst);
it_status cu_fill(it_stream *s, it_tdesc *dst, it_scalar value);
it_status cu_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst);
it_status cu_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out);
it_status cu_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out);
it_status cu_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out);
it_status cu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad);
it_status cu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                       it_tdesc *v);

/* ---------------------------------------------------------------- kernels_nn.cu */
it_status cu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out);
it_status cu_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight);
it_status cu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                           it_tdesc *y, it_tdesc *mean, it_tdesc *rstd);
it_status cu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w, const it_tdesc *mean,
                           const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw, it_tdesc *db);
it_status cu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y);
it_status cu_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                         it_tdesc *dx);
it_status cu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                               it_tdesc *losses);
it_status cu_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                               const it_tdesc *dlosses, it_tdesc *dlogits);
it_status cu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y, it_tdesc *rstd);
it_status cu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w, const it_tdesc *rstd,
                         it_tdesc *dx, it_tdesc *dw);
it_status cu_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse, it_tdesc *y);

/* ---------------------------------------------------------------- flash_attention.cu */
it_status cu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                 const it_tdesc *v, it_tdesc *y, it_tdesc *lse);
it_status cu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                 const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                 it_tdesc *dq, it_tdesc *dk, it_tdesc *dv);

/* ---------------------------------------------------------------- ccl.c */
extern const it_ccl cu_ccl;

#ifdef __cplusplus
}
#endif
#endif
