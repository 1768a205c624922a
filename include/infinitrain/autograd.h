/* Reverse-mode automatic differentiation over a tape.
 *
 * While grad mode is on (the default), every differentiable op whose inputs require grad
 * appends a node to this thread's tape: its backward function, its inputs, its output and
 * the tensors it saved. it_backward() walks the tape from the newest node to the oldest,
 * accumulates gradients into leaves (tensors marked with it_tensor_set_requires_grad), and
 * releases each node's saved tensors as soon as its backward has run. */
#ifndef INFINITRAIN_AUTOGRAD_H
#define INFINITRAIN_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

IT_API void it_grad_set_enabled(bool enabled); /* per thread */
IT_API bool it_grad_enabled(void);

/* Mark a tensor as a leaf that accumulates a gradient. */
IT_API it_status it_tensor_set_requires_grad(it_tensor *t, bool requires_grad);
IT_API bool it_tensor_requires_grad(const it_tensor *t);
/* The accumulated gradient (borrowed reference; NULL before the first backward). */
IT_API it_tensor *it_tensor_grad(const it_tensor *t);
/* Install `grad` (same shape and dtype, contiguous) as t's gradient buffer, e.g. a view into
 * one flat buffer for all parameters. Retained. */
IT_API it_status it_tensor_set_grad(it_tensor *t, it_tensor *grad);

/* Backpropagate from a tensor with one element (seeded with 1), then clear the tape. */
IT_API it_status it_backward(it_tensor *loss);
/* Autocast (mixed precision) on this thread: while enabled, it_matmul and it_linear with
 * float32 operands compute in `dtype` (bfloat16 or float16): the operands (and a linear's bias)
 * are cast to it, rounded once; the gemm kernel accumulates in float32 and rounds its result
 * to `dtype`; the result is cast back to float32 for what follows (the models keep it in
 * `dtype` where the next op would only round it back: GPT-2's qkv into attention, attention's
 * output into its projection, the gate and up products of LLaMA's and Mixtral's SwiGLU, whose
 * silu and product run in float32 and are rounded once for the down projection, and the
 * logits inside it_model_loss, which it_cross_entropy reads widened; the same bits).
 * Everything else (norms, softmax, the loss, the optimizer and the
 * parameters themselves) stays float32. Gradients flow back through the casts. */
IT_API void it_autocast_set(bool enabled, it_dtype dtype);
/* Whether autocast is on; *dtype (may be NULL) gets its dtype. */
IT_API bool it_autocast_enabled(it_dtype *dtype);
/* x converted to `dtype` as the cast kernel converts, differentiable (the gradient is
 * converted back to x's dtype). x itself when it already has that dtype. */
IT_API it_tensor *it_cast(it_tensor *x, it_dtype dtype);

/* Called by it_backward_hooked when a leaf's gradient is final for this backward (no node
 * left would add to it), and with leaf == NULL after every node so that the callee can make
 * progress on work in flight (gradient all-reduces). An error stops backward. */
typedef it_status (*it_grad_ready_fn)(void *ctx, it_tensor *leaf);
/* it_backward, calling fn(ctx, ...) as each leaf's gradient becomes final. */
IT_API it_status it_backward_hooked(it_tensor *loss, it_grad_ready_fn fn, void *ctx);
/* Drop every recorded node (e.g. after an evaluation pass with grad mode on). */
IT_API void it_tape_clear(void);
IT_API size_t it_tape_size(void);
/* Backward of one segment of the tape: the nodes recorded at positions [lo, hi) (it_tape_size
 * before and after a forward), with root's gradient `grad` (NULL: root must have one element,
 * its gradient 1). Those nodes run in reverse and leave the tape; the nodes after hi move down
 * by hi - lo, the others stay. For a pipeline schedule, where several micro-batches' graphs
 * are recorded before their backwards run (each segment's inputs must be leaves or tensors
 * made outside it). */
IT_API it_status it_backward_range(it_tensor *root, it_tensor *grad, size_t lo, size_t hi);
/* Activation recomputation (a non-reentrant checkpoint): y = fn(ctx, x) computed without
 * recording its graph; backward runs fn again on x with the graph recorded, backpropagates y's
 * gradient through it and hands on x's (fn's other inputs, parameters, get theirs too). fn must
 * compute the same on both calls (no randomness; collectives in the same order on every
 * rank). ctx (ctx_bytes of it) is copied and kept for the backward. y's graph costs only x
 * and y until then. */
typedef it_tensor *(*it_checkpoint_fn)(void *ctx, it_tensor *x);
IT_API it_tensor *it_checkpoint(it_checkpoint_fn fn, const void *ctx, size_t ctx_bytes, it_tensor *x);
/* Zero the gradients of the given leaves (their buffers are kept). */
IT_API it_status it_zero_grad(it_tensor *const *params, int n);

#ifdef __cplusplus
}
#endif
#endif
