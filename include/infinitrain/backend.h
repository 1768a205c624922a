/* The backend interface: the one contract a device vendor codes against.
 *
 * A backend is a struct of three tables (runtime, kernels, optional collectives) plus a
 * name. It sees tensors only as descriptors (it_tdesc): a data pointer, a dtype, a shape and
 * strides. It never sees refcounts, autograd or models.
 *
 * Built-in backends call it_backend_register(). A plugin is a shared object named
 * libit_backend_<name>.so that exports
 *     IT_BACKEND_EXPORT const it_backend *it_backend_entry(void);
 * and is found beside the executable or on IT_BACKEND_PATH (colon separated).
 *
 * Rules every slot follows:
 *  - a slot's C type is its contract; NULL means "not provided here".
 *  - kernels run asynchronously on the stream they are given and never allocate device
 *    memory behind the caller's back (scratch comes from the caller as a workspace). The
 *    CPU backend's gemm may malloc a host temporary for operands with no unit stride.
 *  - kernels return IT_OK or an it_status after it_error(...) naming the call that failed.
 *    A kernel that fails on the device after it was enqueued (an asynchronous backend) reports
 *    the failure at the next synchronizing call on that stream (stream_synchronize, memcpy,
 *    synchronize_device), once, as CUDA does; the core checks every such call's status.
 *  - the synchronous memcpy is ordered after all work queued on the device (the core also
 *    synchronizes the stream before it reads device memory).
 *  - device pointers inside descriptors are only dereferenced on the device (stream). */
#ifndef INFINITRAIN_BACKEND_H
#define INFINITRAIN_BACKEND_H

#include <stdio.h>

#include "common.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the structs below. A plugin that declares another version is refused at
 * load time, except 5, which is 6 without it_backend.kernels_size and is read as 6 with
 * kernels_size 0 (its table is the 23 slots cast .. attention_bwd).
 *
 * Bump it on any change a plugin built before it would misread:
 *  - removing, reordering or renaming a slot, or inserting one anywhere but at the end of a
 *    table (every later slot moves);
 *  - changing a slot's signature or meaning, or a struct, enum or constant a slot takes
 *    (it_tdesc, it_gemm_args, it_softmax_args, it_adam_args, the op enums, IT_MAX_DIMS...);
 *  - appending a slot to it_runtime or it_ccl (they carry no size: the core would read past
 *    an older plugin's table), or a field to it_backend;
 *  - making an existing optional slot required.
 * Appending an optional slot at the end of it_kernels does not bump it: kernels_size tells
 * the core how much of the table a plugin was built with, and a slot past that reads as NULL
 * (served by the CPU fallback, or composed for the fused ones), as if the plugin left it
 * empty. An appended kernel slot is therefore never required.
 *
 * 3: it_ccl gained all_reduce_start / request_test / request_wait;
 * 4: it_kernels gained the optional fused attention_fwd / attention_bwd;
 * 5: attention_fwd / _bwd take grouped kv heads (k and v with fewer heads than q);
 * 6: it_backend gained kernels_size, so that it_kernels can grow without a bump;
 * 7: it_ccl gained the optional group_start / group_end. A version 6 plugin still loads: its
 *    ccl table ends before them and the core never reads there (no groups: pipeline
 *    activations go through host memory, as for a backend without ccl).
 * 8: it_ccl_unique_id grew from 128 to 256 bytes (CNCL's clique id is 136). The id is only
 *    ever passed by pointer and the core zeroes it before get_unique_id, so a version 5-7
 *    plugin still loads: it writes and reads the first 128 bytes, and the rest stay zero. */
#define IT_BACKEND_API_VERSION 8

#define IT_BACKEND_EXPORT IT_API

typedef struct it_stream it_stream; /* opaque, owned by the backend */
typedef struct it_event it_event;   /* opaque, owned by the backend */

/* What a kernel sees of a tensor. `data` points at element [0,...,0] (offset applied);
 * strides are in elements and may be 0 (broadcast) but never negative. */
typedef struct it_tdesc {
    void *data;
    it_dtype dtype;
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    int64_t strides[IT_MAX_DIMS];
} it_tdesc;

typedef enum it_memcpy_kind {
    IT_MEMCPY_H2H = 0,
    IT_MEMCPY_H2D = 1,
    IT_MEMCPY_D2H = 2,
    IT_MEMCPY_D2D = 3,
} it_memcpy_kind;

/* ---------------------------------------------------------------- runtime (device guard)
 * Device indices run 0..device_count-1. "Current device" is per thread. Optional slots
 * (marked) may be NULL: the core then uses the synchronous form or synchronizes. */
typedef struct it_runtime {
    /* Called once, lazily, the first time the backend is used. May fail (no driver). */
    it_status (*init)(void);
    it_status (*device_count)(int *count);
    it_status (*set_device)(int device);
    it_status (*get_device)(int *device);

    /* Streams. Every device has a default stream (never destroyed by the core). Lower
     * priority numbers run first, as in CUDA; priority_range is optional. */
    it_status (*default_stream)(int device, it_stream **stream);
    it_status (*stream_create)(int device, int priority, it_stream **stream);
    it_status (*stream_destroy)(it_stream *stream);
    it_status (*stream_synchronize)(it_stream *stream);
    it_status (*stream_priority_range)(int *least, int *greatest); /* optional */
    /* Opaque per-stream library handle (cuBLAS, CNNL, ...). Optional. */
    it_status (*stream_handle)(it_stream *stream, void **handle);

    /* Events. query sets *done without blocking; elapsed_ms between two completed events. */
    it_status (*event_create)(int device, it_event **event);
    it_status (*event_destroy)(it_event *event);
    it_status (*event_record)(it_event *event, it_stream *stream);
    it_status (*stream_wait_event)(it_stream *stream, it_event *event);
    it_status (*event_query)(it_event *event, bool *done);
    it_status (*event_synchronize)(it_event *event);
    it_status (*event_elapsed_ms)(it_event *start, it_event *end, float *ms);

    /* Memory. malloc of 0 bytes is never requested by the core. */
    it_status (*malloc)(int device, size_t nbytes, void **ptr);
    it_status (*free)(int device, void *ptr);
    it_status (*malloc_async)(int device, size_t nbytes, it_stream *stream, void **ptr); /* optional */
    it_status (*free_async)(int device, void *ptr, it_stream *stream);                   /* optional */
    /* Synchronous copy: returns when dst holds the data. Host pointers may be pageable. */
    it_status (*memcpy)(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind);
    /* Asynchronous copy ordered on `stream`; the host buffer must stay valid until the
     * stream reaches the copy. Optional. */
    it_status (*memcpy_async)(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                              it_stream *stream);
    it_status (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes);
    it_status (*synchronize_device)(int device);
} it_runtime;

/* ---------------------------------------------------------------- kernel argument types */

typedef enum it_unary_op {
    IT_UNARY_NEG = 0,         /* y = -x */
    IT_UNARY_SCALE = 1,       /* y = alpha * x */
    IT_UNARY_EXP = 2,         /* y = exp(x) */
    IT_UNARY_LOG = 3,         /* y = log(x) */
    IT_UNARY_SQRT = 4,        /* y = sqrt(x) */
    IT_UNARY_RSQRT = 5,       /* y = 1/sqrt(x) */
    IT_UNARY_SQUARE = 6,      /* y = x*x */
    IT_UNARY_TANH = 7,        /* y = tanh(x) */
    IT_UNARY_GELU = 8,        /* y = 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) (GPT-2's tanh form) */
    IT_UNARY_SILU = 9,        /* y = x * sigmoid(x) */
    IT_UNARY_ADD_SCALAR = 10, /* y = x + alpha */
    IT_UNARY_RECIP = 11,      /* y = 1/x */
    IT_UNARY_COUNT
} it_unary_op;

typedef enum it_binary_op {
    IT_BINARY_ADD = 0, /* out = a + b */
    IT_BINARY_SUB = 1, /* out = a - b */
    IT_BINARY_MUL = 2, /* out = a * b */
    IT_BINARY_DIV = 3, /* out = a / b */
    IT_BINARY_MAX = 4, /* out = max(a, b) */
    IT_BINARY_MIN = 5, /* out = min(a, b) */
    /* Backward helpers: a = forward input x, b = upstream gradient dy. */
    IT_BINARY_GELU_BWD = 6, /* out = dy * gelu'(x) */
    IT_BINARY_SILU_BWD = 7, /* out = dy * silu'(x) */
    IT_BINARY_TANH_BWD = 8, /* a = forward output y: out = dy * (1 - y^2) */
    IT_BINARY_COUNT
} it_binary_op;

typedef enum it_reduce_op {
    IT_REDUCE_SUM = 0,
    IT_REDUCE_MEAN = 1,
    IT_REDUCE_MAX = 2,
    IT_REDUCE_SUMSQ = 3, /* sum of squares */
    IT_REDUCE_COUNT
} it_reduce_op;

/* Batched strided GEMM: for every batch index i,
 *     C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i]
 * a, b, c are 3-D descriptors (batch, rows, cols) as stored; op() transposes when the flag
 * is set. op(A) is M x K, op(B) is K x N, C is M x N. A batch stride of 0 broadcasts that
 * operand over the batch. Accumulation in fp32 (fp64 for fp64). beta == 0 ignores C's
 * previous contents (NaN included). */
typedef struct it_gemm_args {
    it_tdesc a, b, c;
    bool trans_a, trans_b;
    float alpha, beta;
} it_gemm_args;

/* Softmax over the last dimension of x (any leading dims), computed on scale*x.
 * With `causal`, the second-to-last dimension is the query position t and the last is the
 * key position s; scores with s > t + (cols - rows) are masked (probability exactly 0). */
typedef struct it_softmax_args {
    float scale;
    bool causal;
} it_softmax_args;

/* Arguments of the flash attention slots (it_kernels.flash_attention_fwd / _bwd). */
typedef struct it_flash_args {
    float scale;      /* multiplies q . k */
    bool causal;      /* query row t sees key j only when j <= t + q_offset */
    int64_t q_offset; /* position of query row 0 counted from key 0: 0 for self-attention;
                         a context-parallel rank's later slice of queries has a positive one */
} it_flash_args;

/* One Adam/AdamW update on a flat parameter. step counts from 1.
 *   adamw:  p -= lr*wd*p;  (decoupled decay, before the moment update as torch)
 *   adam:   g += wd*p;     (L2, coupled, as torch.optim.Adam)
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
 *   p -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps)
 * grad_scale multiplies g first (1 = none; used for clipping without a copy). */
typedef struct it_adam_args {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;
    bool decoupled; /* true = AdamW */
} it_adam_args;

/* ---------------------------------------------------------------- the kernel table
 * Shapes are documented per slot. Unless stated, inputs may be any strided view and
 * outputs are contiguous; dtypes of inputs and outputs match.
 *
 * A slot left NULL is served by the core's CPU fallback (inputs staged to the host, the CPU
 * kernel, outputs copied back). A native kernel may also decline one call: returning
 * IT_ERR_UNSUPPORTED before it has written any output (a dtype or layout it does not
 * handle, say fp64 on a bf16 accelerator) makes the core run that call on the CPU fallback
 * instead; the coverage report counts such calls per slot. */
typedef struct it_kernels {
    /* Required (registration fails without them). */
    /* dst = (dst.dtype) src, same shape, any strides. Semantics: x -> bool is x != 0;
     * float -> integer truncates toward zero and saturates at the target's range, NaN -> 0;
     * integer -> integer wraps modulo 2^bits (two's complement), as C's conversion to an
     * unsigned type then reinterpretation; integer -> float and fp64 -> fp16/bf16 round once,
     * to nearest even. dst must not overlap src unless both have the same layout. */
    it_status (*cast)(it_stream *s, const it_tdesc *src, it_tdesc *dst);
    /* Every element of dst (any strides) = value converted as cast() converts. */
    it_status (*fill)(it_stream *s, it_tdesc *dst, it_scalar value);
    /* dst = src, same dtype and shape, any strides on both sides. */
    it_status (*copy_strided)(it_stream *s, const it_tdesc *src, it_tdesc *dst);

    /* ---- linear algebra */
    it_status (*gemm)(it_stream *s, const it_gemm_args *args);

    /* ---- elementwise: out has the broadcast shape; a/b/x come with out's ndim and shape
     * and stride 0 on broadcast dims. out may alias an input exactly (in-place). */
    it_status (*unary)(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out);
    it_status (*binary)(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out);
    /* Edge semantics (the CPU reference; ports must match): MAX/MIN and the MAX reduction
     * propagate NaN; an empty reduction gives 0 (SUM, SUMSQ), NaN (MEAN), -Inf (MAX); GELU
     * and SiLU follow their formulas (NaN at -Inf). */
    /* out has x's ndim, with size 1 on every reduced dimension; other dims equal x's.
     * Fixed summation order (deterministic). */
    it_status (*reduce)(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out);

    /* ---- embedding: idx (N) int32/int64, weight (V, C), out (N, C) */
    it_status (*embedding_fwd)(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out);
    /* dweight (V, C) += scatter of dout (N, C) rows by idx; deterministic order. */
    it_status (*embedding_bwd)(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight);

    /* ---- layernorm over the last dim C of x (R, C) (leading dims flattened):
     * y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) (biased var); mean, rstd (R)
     * saved for backward, fp32 (fp64 for fp64 x). b may be NULL (no bias). */
    it_status (*layernorm_fwd)(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                               it_tdesc *y, it_tdesc *mean, it_tdesc *rstd);
    /* dx (R, C) written; dw, db (C) written (not accumulated); db may be NULL. */
    it_status (*layernorm_bwd)(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                               const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw, it_tdesc *db);

    /* ---- softmax over the last dim (see it_softmax_args) */
    it_status (*softmax_fwd)(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y);
    /* dx = scale * y * (dy - sum(dy*y)) */
    it_status (*softmax_bwd)(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                             it_tdesc *dx);

    /* ---- cross entropy: logits (N, Vp), targets (N) int32/int64 in [0, V), losses (N) fp32
     * (fp64 for fp64 logits).
     * Only the first `valid` columns take part in the softmax (llm.c's padded vocab). */
    it_status (*cross_entropy_fwd)(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   it_tdesc *losses);
    /* dlogits (N, Vp) = (softmax(logits[:, :valid]) - onehot(target)) * dlosses[n]; padded
     * columns get 0. */
    it_status (*cross_entropy_bwd)(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   const it_tdesc *dlosses, it_tdesc *dlogits);

    /* ---- optimizers, on contiguous flat tensors of equal length */
    /* p -= lr * grad_scale * g */
    it_status (*sgd_step)(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad);
    it_status (*adam_step)(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                           it_tdesc *v);

    /* ---- LLaMA-3 / Mixtral */
    /* RMSNorm over the last dim C of x (R, C): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps)
     * (R), saved for backward, fp32 (fp64 for fp64 x). */
    it_status (*rmsnorm_fwd)(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                             it_tdesc *rstd);
    /* dx (R, C) and dw (C) written (not accumulated). */
    it_status (*rmsnorm_bwd)(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                             const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw);
    /* Rotary embedding on interleaved pairs. x, y (B, T, H, D); cos, sin (T, D/2) in x's dtype.
     * With x0 = x[.., t, h, 2i], x1 = x[.., t, h, 2i+1], c = cos[t, i], s = sin[t, i]:
     *   y[2i] = x0*c - x1*s,  y[2i+1] = x0*s + x1*c          (Meta's complex product)
     * `inverse` rotates by the negative angle (s -> -s): the backward of the forward. */
    it_status (*rope)(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                      it_tdesc *y);
    /* Top-k over the last dim of x (N, E): values (N, k) in descending order, indices (N, k)
     * int32; equal values keep the lower index first; NaN ranks above +Inf (as torch.topk).
     * 1 <= k <= E. */
    it_status (*topk)(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices);

    /* ---- optional fused kernels (it_kernel_slot_fused names them). Unlike the slots
     * above, an empty one is not served by the CPU fallback: the core composes the op from
     * the slots above instead, on the device. A native one may decline a call
     * (IT_ERR_UNSUPPORTED before writing anything: a dtype or layout it does not take); the
     * core then composes that call. */
    /* Multi-head attention, the fused form of the core's composition
     *   att = softmax(args->scale * q k^T, args->causal)   (softmax_fwd's semantics)
     *   y   = att v
     * q (B, H, T, D), k and v (B, Hkv, S, D), y (B, H, T, D) are views with any strides but a
     * unit last one (the core passes the heads where they lie in (B, T, 3, H, D) or
     * (B, T, H, D) buffers, and y into a (B, T, H, D) one); att (B, H, T, S) contiguous, kept
     * for the backward. Hkv divides H: query head h attends with kv head h / (H / Hkv)
     * (grouped-query attention; Hkv == H is plain multi-head). With causal, masked keys need
     * not take part (a kernel may skip them): a NaN or Inf in a masked key's k or v may or may
     * not reach the rows that do not see it. A backend that takes a forward call must take the
     * backward of the same shapes. */
    it_status (*attention_fwd)(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, it_tdesc *att, it_tdesc *y);
    /* From dy (B, H, T, D) (any strides, unit last one) and the forward's q, k, v and att:
     *   dv = att^T dy,  datt = softmax_bwd(att, dy v^T),  dq = datt k,  dk = datt^T q
     * dq (B, H, T, D) and dk, dv (B, H, S, D) written (not accumulated) as views with a unit
     * last stride; dk and dv are per query head even when kv heads are grouped (the core sums
     * each group with the reduce slot, as the composition's expand does); datt (B, H, T, S)
     * contiguous gets the scores' gradient (softmax_bwd's dx). */
    it_status (*attention_bwd)(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                               const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq, it_tdesc *dk,
                               it_tdesc *dv, it_tdesc *datt);

    /* ---- appended after API version 7's first table (kernels_size tells whether a plugin
     * has them); optional and fused like the attention slots: empty, the core composes. */
    /* adam_step on param, grad, m, v, then low (param's length, contiguous, bf16 or fp16) =
     * the updated param rounded once to low's dtype, as cast() rounds it: the copy of the
     * parameters that autocast's products read until the next step, written in the
     * optimizer's pass over them instead of read back afterwards. Composed, it is adam_step
     * then cast; a native kernel gives adam_step's param, m and v and low as their cast (the
     * conformance suite compares all four with the CPU's at low's tolerance, one ulp of low
     * where a last-bit difference in param crosses a rounding tie). */
    it_status (*adam_step_round)(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                 it_tdesc *m, it_tdesc *v, it_tdesc *low);
    /* Cross entropy over half-precision logits (bf16 or fp16: autocast's LM head), the fused
     * form of cast(logits, fp32) then cross_entropy_fwd: losses (N) fp32 as cross_entropy_fwd
     * gives them for the logits widened (exactly) to fp32. Composed, it is that cast and that
     * kernel; a native one saves the fp32 copy of the logits. */
    it_status (*cross_entropy_low_fwd)(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       it_tdesc *losses);
    /* cross_entropy_bwd on the widened logits (dlosses fp32), then each dlogit rounded once
     * to the logits' dtype (cast()'s rule; padded columns 0): dlogits (N, Vp) in the logits'
     * dtype. Composed: the cast, cross_entropy_bwd into an fp32 buffer, a cast back. A backend
     * that takes a forward call must take the backward of the same shapes. */
    it_status (*cross_entropy_low_bwd)(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                       const it_tdesc *dlosses, it_tdesc *dlogits);
    /* SwiGLU over half-precision products (bf16 or fp16: autocast's gate and up projections of
     * LLaMA's MLP and Mixtral's experts): y = silu(a) * b, computed in fp32 on a and b widened
     * (exactly) and rounded once to their dtype (cast()'s rule). a, b and y have one dtype and
     * one shape and are contiguous; y may be a or b. Composed: a and b cast to fp32, unary
     * SILU, binary MUL, a cast back; a native kernel gives those bits (its fp32 silu is the
     * unary slot's, so a last-bit difference there shows as one ulp of y). */
    it_status (*swiglu_low_fwd)(it_stream *s, const it_tdesc *a, const it_tdesc *b, it_tdesc *y);
    /* Its backward, with dy in a's dtype: on the widened a, b, dy in fp32, t = dy * b and
     * da = binary SILU_BWD(a, t), db = dy * silu(a), each rounded once to a's dtype. All five
     * contiguous, of one dtype and shape; da and db are new buffers (never a, b or dy).
     * Composed: the casts, unary SILU, three binary calls, two casts back. A backend that
     * takes a forward call must take the backward of the same shapes. */
    it_status (*swiglu_low_bwd)(it_stream *s, const it_tdesc *a, const it_tdesc *b, const it_tdesc *dy, it_tdesc *da,
                                it_tdesc *db);
    /* ---- appended after API version 8's first table (no version step: kernels_size tells
     * whether a plugin has them); optional and fused: empty, the core composes attention.
     * Flash attention: attention computed block by block with a running softmax, keeping
     * nothing of size T x S (FlashAttention-2, Dao 2023). q (B, H, T, D), k and v (B, Hkv, S, D),
     * y (B, H, T, D) are views with any strides but a unit last one; Hkv divides H and query
     * head h reads kv head h / (H / Hkv). With s_tj = scale * (q_t . k_j) over the keys j row t
     * sees (all of them; with causal, j <= t + q_offset):
     *   lse_t = log(sum_j exp(s_tj))            natural log, fp32, lse (B, H, T) contiguous
     *   y_t   = sum_j exp(s_tj - lse_t) v_j
     * A row that sees no key (causal, t + q_offset < 0) gets y_t = 0 and lse_t = -inf. A NaN
     * in q, k or v reaches every row that sees it (with causal, a masked key's need not). q, k,
     * v and y have one dtype: fp32, or bf16 / fp16 read exactly and accumulated in fp32, y
     * rounded once. A backend that takes a forward call must take the backward of the same
     * shapes; it may decline either (IT_ERR_UNSUPPORTED before writing anything, with the
     * reason: a head size, length or layout it cannot take), and the core then composes. */
    it_status (*flash_attention_fwd)(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, it_tdesc *y, it_tdesc *lse);
    /* Its backward from dy (B, H, T, D) (any strides, unit last one), recomputing the
     * probabilities p_tj = exp(s_tj - lse_t) block by block: with delta_t = dy_t . y_t and
     * ds_tj = p_tj (dy_t . v_j - delta_t),
     *   dq_t = scale * sum_j ds_tj k_j,  dk_j = scale * sum_t ds_tj q_t,  dv_j = sum_t p_tj dy_t
     * dq (B, H, T, D) and dk, dv (B, Hkv, S, D), each kv head's summed over the query heads of
     * its group, written (not accumulated) as views with a unit last stride, in q's dtype
     * (accumulated in fp32, rounded once). */
    it_status (*flash_attention_bwd)(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                     const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                     it_tdesc *dq, it_tdesc *dk, it_tdesc *dv);
} it_kernels;

/* Every kernel slot, in it_kernels order: X(name) once per slot. The core builds its slot
 * names and indices from this list and checks at compile time that entry i is member i of
 * it_kernels, so appending a slot means appending it here too (the build fails otherwise). */
#define IT_KERNEL_SLOTS(X)                                                                                             \
    X(cast)                                                                                                            \
    X(fill)                                                                                                            \
    X(copy_strided)                                                                                                    \
    X(gemm)                                                                                                            \
    X(unary)                                                                                                           \
    X(binary)                                                                                                          \
    X(reduce)                                                                                                          \
    X(embedding_fwd)                                                                                                   \
    X(embedding_bwd)                                                                                                   \
    X(layernorm_fwd)                                                                                                   \
    X(layernorm_bwd)                                                                                                   \
    X(softmax_fwd)                                                                                                     \
    X(softmax_bwd)                                                                                                     \
    X(cross_entropy_fwd)                                                                                               \
    X(cross_entropy_bwd)                                                                                               \
    X(sgd_step)                                                                                                        \
    X(adam_step)                                                                                                       \
    X(rmsnorm_fwd)                                                                                                     \
    X(rmsnorm_bwd)                                                                                                     \
    X(rope)                                                                                                            \
    X(topk)                                                                                                            \
    X(attention_fwd)                                                                                                   \
    X(attention_bwd)                                                                                                   \
    X(adam_step_round)                                                                                                 \
    X(cross_entropy_low_fwd)                                                                                           \
    X(cross_entropy_low_bwd)                                                                                           \
    X(swiglu_low_fwd)                                                                                                  \
    X(swiglu_low_bwd)                                                                                                  \
    X(flash_attention_fwd)                                                                                             \
    X(flash_attention_bwd)

/* The number of kernel slots this header declares (it_kernels holds function pointers only). */
#define IT_KERNEL_SLOT_COUNT (sizeof(it_kernels) / sizeof(void (*)(void)))
/* Names of the kernel slots in table order, for reports ("cast", "fill", ...); NULL past the
 * last. */
IT_API const char *it_kernel_slot_name(size_t slot);
/* True for the optional fused slots (attention_fwd, attention_bwd, adam_step_round,
 * cross_entropy_low_fwd, cross_entropy_low_bwd, swiglu_low_fwd, swiglu_low_bwd): empty, they
 * are composed by the core from the other slots, not served by the CPU fallback. */
IT_API bool it_kernel_slot_fused(size_t slot);

/* ---------------------------------------------------------------- collectives (optional) */
typedef struct it_comm it_comm;               /* opaque, owned by the backend */
typedef struct it_ccl_request it_ccl_request; /* an all-reduce in flight, owned by the backend */

typedef enum it_reduce_kind { IT_CCL_SUM = 0, IT_CCL_AVG = 1, IT_CCL_MAX = 2 } it_reduce_kind;

/* 256 bytes since API version 8 (128 before: see IT_BACKEND_API_VERSION). */
#define IT_CCL_UNIQUE_ID_BYTES 256
typedef struct it_ccl_unique_id {
    unsigned char bytes[IT_CCL_UNIQUE_ID_BYTES];
} it_ccl_unique_id;

typedef struct it_ccl {
    it_status (*get_unique_id)(it_ccl_unique_id *id);
    it_status (*comm_init)(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **comm);
    it_status (*comm_destroy)(it_comm *comm);
    /* AVG may be declined (IT_ERR_UNSUPPORTED, nothing written): the core then runs SUM and
     * divides by the rank count with the binary kernel. Same for reduce_scatter. */
    it_status (*all_reduce)(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt, it_reduce_kind op,
                            it_stream *s);
    it_status (*all_gather)(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt, it_stream *s);
    it_status (*reduce_scatter)(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt,
                                it_reduce_kind op, it_stream *s);
    it_status (*broadcast)(it_comm *c, void *buf, size_t count, it_dtype dt, int root, it_stream *s);
    /* Point to point, enqueued on `s` like the collectives: messages from one rank to another
     * match in the order they are issued (no tags), and a send may wait until its peer has
     * posted the matching receive (NCCL's and CNCL's rendezvous), so the core issues them in
     * groups (below) and moves pipeline activations with them only when the groups are set. */
    it_status (*send)(it_comm *c, const void *buf, size_t count, it_dtype dt, int peer, it_stream *s);
    it_status (*recv)(it_comm *c, void *buf, size_t count, it_dtype dt, int peer, it_stream *s);
    /* Optional, all three or none: an all-reduce that returns before it completes, so that
     * gradient buckets are reduced while backward still runs. The buffers stay in use until
     * request_test reports it done or request_wait returns; the result is bitwise
     * all_reduce's. request_test makes progress without blocking (the core calls it between
     * backward nodes), request_wait blocks; both release the request once it is done, also on
     * error. NULL: the core calls all_reduce where it would have started one (backends whose
     * all_reduce only enqueues on `s`, like NCCL's, overlap that way already). */
    it_status (*all_reduce_start)(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt,
                                  it_reduce_kind op, it_stream *s, it_ccl_request **req);
    it_status (*request_test)(it_ccl_request *req, bool *done);
    it_status (*request_wait)(it_ccl_request *req);
    /* Optional, both or none (API version 7): the sends and receives issued between
     * group_start and group_end are one operation that completes when all of them have
     * (ncclGroupStart / ncclGroupEnd, cnclGroupStart / cnclGroupEnd), so two ranks may send
     * to each other in one group without waiting for each other. The core never nests them
     * and puts only send and recv inside. With both set (and send and recv), a pipeline
     * stage's activations and their gradients move device to device: at each step of the
     * schedule one group holds the step's sends and the next step's receives (docs/parallelism.md);
     * without them they are staged through host memory. */
    it_status (*group_start)(void);
    it_status (*group_end)(void);
} it_ccl;

/* ---------------------------------------------------------------- the backend */
typedef struct it_backend {
    int api_version;                 /* IT_BACKEND_API_VERSION the backend was built against */
    const char *name;                /* lowercase [a-z0-9_]+, unique in the process */
    it_dtype default_autocast_dtype; /* IT_DTYPE_BF16 or IT_DTYPE_FP16 */
    /* True when device memory is the host's own memory (the CPU backend): the core may then
     * hand its pointers to host code. Every accelerator leaves this false. */
    bool host_memory;
    const it_runtime *runtime;
    const it_kernels *kernels;
    const it_ccl *ccl; /* NULL when the backend has no collectives */
    /* sizeof(it_kernels) as the backend was built: set it to exactly that. The core reads
     * that many bytes of *kernels (a whole number of slots, at least cast .. copy_strided)
     * and treats every slot past them as NULL; a table larger than the core's own (a plugin
     * built against a newer header) is accepted and its slots unknown to the core are never
     * called. 0, what a backend written before this field leaves, reads as the 23 slots of
     * API version 6 (cast .. attention_bwd): such a backend keeps working, but sees no slot
     * appended after them until it sets the field. */
    size_t kernels_size;
} it_backend;

/* Signature of the symbol a plugin exports. */
typedef const it_backend *(*it_backend_entry_fn)(void);
#define IT_BACKEND_ENTRY_SYMBOL "it_backend_entry"

/* Register a backend (kept by pointer: it must outlive the process's use of it).
 * Fails with a message when the name is invalid or taken, the api_version differs, a
 * runtime slot the core needs is missing, or required kernels are missing (all named). */
IT_API it_status it_backend_register(const it_backend *backend);

/* Find a registered backend by name; when none is registered under that name, try to load
 * the plugin libit_backend_<name>.so. On failure the message lists the registered backends,
 * the discoverable plugins and, for a plugin that failed, each path tried and why. */
IT_API it_status it_backend_find(const char *name, const it_backend **out);

/* Registered backends, in registration order (the cpu backend is always first). */
IT_API int it_backend_count(void);
IT_API const it_backend *it_backend_at(int i);
/* "built in", "it_backend_register" or the plugin's path. */
IT_API const char *it_backend_origin(const it_backend *backend);
/* Names of plugins found on the search path (loaded or not). */
IT_API it_status it_backend_discover(char names[][40], int max, int *count);
/* The plugin search path, in the order it is searched, as one line for people:
 * "DIR (beside the executable), DIR (installed plugins), DIR (IT_BACKEND_PATH), ..." or
 * "(none)". Truncated to fit buf (size > 0). */
IT_API void it_backend_search_path(char *buf, size_t size);

/* A registered backend's kernel table as the core uses it: all IT_KERNEL_SLOT_COUNT slots,
 * those past the backend's kernels_size NULL. Read this, not backend->kernels, to walk the
 * slots of a backend that may have been built with fewer. NULL (with it_error) for a backend
 * that is not registered. */
IT_API const it_kernels *it_backend_kernels(const it_backend *backend);

/* Whether a backend's ccl can move point-to-point messages in groups (send, recv, group_start
 * and group_end all set, in a table of API version 7 or later; an older table is not read
 * past its end). */
IT_API bool it_backend_ccl_groups(const it_backend *backend);

/* Per-slot dispatch statistics of a backend: whether the slot is native or served by the
 * core's CPU fallback, calls, host-side time, and bytes the fallback copied. */
typedef struct it_kernel_stat {
    const char *slot;
    bool native;
    uint64_t calls; /* all calls, whichever path served them */
    double ms;
    uint64_t bytes_moved;    /* by the CPU fallback */
    uint64_t fallback_calls; /* calls the CPU fallback served (all of them when !native) */
} it_kernel_stat;
/* out has IT_KERNEL_SLOT_COUNT entries. */
IT_API it_status it_backend_kernel_stats(const it_backend *backend, it_kernel_stat *out);
IT_API void it_backend_stats_reset(const it_backend *backend);
/* The coverage report: kernel, native or fallback, calls, time, bytes moved. */
IT_API it_status it_backend_report(const it_backend *backend, FILE *f);

/* CPU kernels, exported so that other backends (sim, fallbacks) can run them on host
 * memory. */
IT_API const it_kernels *it_cpu_kernels(void);
/* What the CPU's flash_attention_fwd (dy, dq, dk and dv NULL) or flash_attention_bwd would
 * return before computing anything: IT_OK when it takes the call, else its error (messages
 * start with `kernel`). A backend that runs the CPU kernel later (sim's queue) declines with
 * it up front. */
IT_API it_status it_cpu_flash_attention_check(const char *kernel, const it_flash_args *args, const it_tdesc *q,
                                              const it_tdesc *k, const it_tdesc *v, const it_tdesc *y,
                                              const it_tdesc *dy, const it_tdesc *lse, const it_tdesc *dq,
                                              const it_tdesc *dk, const it_tdesc *dv);

#ifdef __cplusplus
}
#endif
#endif
