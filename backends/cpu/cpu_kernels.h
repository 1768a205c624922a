/* The CPU backend's kernels and runtime, one function per slot of backend.h.
 * They run synchronously on the calling thread (the stream argument is accepted and
 * ignored: a CPU stream's work is complete when the call returns), parallelized with
 * OpenMP, deterministic for a given thread count. */
#ifndef IT_CPU_KERNELS_H
#define IT_CPU_KERNELS_H

#include "infinitrain/backend.h"

/* cast.c: conversions, fill and strided copy for all 13 dtypes */
/* threads.c: the OpenMP thread count when OMP_NUM_THREADS is unset (the cores other processes
 * leave free when the backend starts), and what it chose (NULL: libgomp's count kept). */
void it_cpu_threads_default(void);
const char *it_cpu_threads_note(void);

it_status it_cpu_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst);
it_status it_cpu_fill(it_stream *s, it_tdesc *dst, it_scalar value);
it_status it_cpu_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst);

/* gemm.c */
it_status it_cpu_gemm(it_stream *s, const it_gemm_args *args);

/* sgemm_avx512.c: cblas_sgemm's row-major contract (m, n, k > 0) on AVX-512. false when it
 * did nothing (no AVX-512 build, no scratch memory): the caller then uses the BLAS.
 * _usable: the CPU has AVX-512F/VL and IT_CPU_SGEMM is not "blas". Small products (k <= 256,
 * and up to 64^3 or at most 64 wide on one thread) take an unpacked path; the few up to
 * 64^3 that are deeper are declined (false). IT_CPU_SGEMM=avx512 sends every product
 * through the packed path. */
bool it_cpu_sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
bool it_cpu_sgemm_avx512_usable(void);
/* The same with the choice of the packed path's form made by the caller (for the tests):
 * swap > 0 always computes C^T = op(B)^T op(A)^T with transposed stores, 0 never, < 0 as
 * the product's shape says. The bits are the same either way. */
bool it_cpu_sgemm_avx512_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* sgemm_avx2.c: the same contract with AVX2 and FMA, for CPUs without AVX-512 (and for any
 * CPU with IT_CPU_SGEMM=avx2). _usable: it is the kernel sgemm_select.h chooses. As the
 * AVX-512 one, it takes small products unpacked and declines those up to 64^3 that are
 * deeper than 256 (false). */
bool it_cpu_sgemm_avx2(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
bool it_cpu_sgemm_avx2_usable(void);
bool it_cpu_sgemm_avx2_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* sbgemm_avx512bf16.c: C (m, n) = alpha op(A) op(B) + beta C (m, n, k > 0) with bf16 A and
 * B (row-major, lda / ldb; op(X) = tx ? X^T : X) and an fp32 or bf16 (c_bf16) row-major C,
 * summed in fp32 on AVX512_BF16 (vdpbf16ps). false when it did nothing (no such build, no
 * scratch memory). _usable: the CPU has AVX512_BF16 and IT_CPU_SBGEMM is not "fp32". _ex:
 * swap > 0 always computes C^T = op(B)^T op(A)^T with transposed stores, 0 never, < 0 as
 * the shape says; the bits are the same either way. */
bool it_cpu_sbgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                   const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc);
bool it_cpu_sbgemm_ex(int swap, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                      int64_t lda, const uint16_t *b, int64_t ldb, float beta, void *c, bool c_bf16, int64_t ldc);
bool it_cpu_sbgemm_usable(void);

/* sbgemm_onednn.c: C[i] (m, n) = alpha op(A[i]) op(B[i]) + beta C[i] for i < batch, all bf16,
 * row-major with lda / ldb / ldc and batch strides sa / sb / sc (elements; 0: broadcast), on
 * oneDNN's matmul (fp32 sums, C rounded once). false when it did nothing (not built in, not
 * ready, or oneDNN refused the layout): the caller takes another path. */
bool it_cpu_sbgemm_onednn(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const uint16_t *a, int64_t lda, int64_t sa, const uint16_t *b, int64_t ldb, int64_t sb,
                          float beta, uint16_t *c, int64_t ldc, int64_t sc);

/* gemm.c: one fp32 product with row-major operands (cblas_sgemm's CblasRowMajor contract,
 * m, n, k > 0), through the same kernel choice the gemm slot makes for each matrix of a
 * batch; on the calling thread inside a parallel region. */
void it_cpu_sgemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* elementwise.c */
it_status it_cpu_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out);
it_status it_cpu_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out);
/* SwiGLU over half inputs (backend.h's swiglu_low_*), in elementwise.c. */
it_status it_cpu_swiglu_low_fwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, it_tdesc *y);
it_status it_cpu_swiglu_low_bwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, const it_tdesc *dy, it_tdesc *da,
                                it_tdesc *db);
it_status it_cpu_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out);

/* embedding.c */
it_status it_cpu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out);
it_status it_cpu_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight);

/* layernorm.c */
it_status it_cpu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                               it_tdesc *y, it_tdesc *mean, it_tdesc *rstd);
it_status it_cpu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                               const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw, it_tdesc *db);

/* softmax.c */
it_status it_cpu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y);
it_status it_cpu_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                             it_tdesc *dx);
/* the fused attention (it_kernels.attention_fwd / _bwd), fp32 */
it_status it_cpu_attention_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, it_tdesc *att, it_tdesc *y);
it_status it_cpu_attention_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq, it_tdesc *dk,
                               it_tdesc *dv, it_tdesc *datt);
/* flash_attention.c: flash attention (it_kernels.flash_attention_fwd / _bwd), fp32, bf16 and
 * fp16, head sizes up to 256, nothing of size T x S kept */
it_status it_cpu_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, it_tdesc *y, it_tdesc *lse);
it_status it_cpu_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                     it_tdesc *dq, it_tdesc *dk, it_tdesc *dv);

/* crossentropy.c */
it_status it_cpu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   it_tdesc *losses);
it_status it_cpu_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   const it_tdesc *dlosses, it_tdesc *dlogits);
it_status it_cpu_cross_entropy_low_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       it_tdesc *losses);
it_status it_cpu_cross_entropy_low_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       const it_tdesc *dlosses, it_tdesc *dlogits);

/* optim.c */
it_status it_cpu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad);
it_status it_cpu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                           it_tdesc *v);
it_status it_cpu_adam_step_round(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                 it_tdesc *m, it_tdesc *v, it_tdesc *low);

/* rmsnorm.c */
it_status it_cpu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                             it_tdesc *rstd);
it_status it_cpu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                             const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw);

/* rope.c */
it_status it_cpu_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                      it_tdesc *y);

/* topk.c */
it_status it_cpu_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices);

/* runtime.c: the CPU runtime table (one device, "cpu:0"; memory is host memory). */
extern const it_runtime it_cpu_runtime;

#endif
