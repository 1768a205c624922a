/* Tape nodes: what an op records for its backward. Private to the core. */
#ifndef IT_AUTOGRAD_NODE_H
#define IT_AUTOGRAD_NODE_H

#include "core/internal.h"
#include "infinitrain/autograd.h"

#define IT_NODE_INLINE_IN 4
#define IT_NODE_MAX_SAVED 6

typedef struct it_node it_node;
/* Compute the inputs' gradients from dy (the output's gradient) and hand each to
 * it__accum_grad. Runs inside a scope the engine opens, so temporaries are freed after. */
typedef it_status (*it_backward_fn)(it_node *node, it_tensor *dy);

struct it_node {
    const char *name;
    it_backward_fn backward;
    int n_in;
    it_tensor **in;                          /* n_in retained inputs; NULL entries allowed (e.g. no bias) */
    it_tensor *in_inline[IT_NODE_INLINE_IN]; /* `in` for up to IT_NODE_INLINE_IN inputs */
    it_tensor *out;                          /* retained */
    int n_saved;
    it_tensor *saved[IT_NODE_MAX_SAVED]; /* retained, released right after backward */
    double f[4];                         /* op parameters */
    int64_t i[8];
    int64_t *iv; /* a longer host parameter list (it__node_set_ivec), freed with the node */
    size_t n_iv;
    void *ctx;  /* an object the op's backward uses (a process group), not owned */
    void *blob; /* host data for backward (it__node_set_blob), freed with the node */
};

/* True when an op with these inputs must record a node (grad mode on and some input
 * requires grad). */
bool it__needs_grad(int n, it_tensor *const *inputs);
/* Record a node for `out` (marks out as requiring grad). Returns NULL only on OOM. */
it_node *it__node_record(const char *name, it_backward_fn fn, it_tensor *out, int n_in, it_tensor *const *inputs);
/* Keep a tensor for backward. */
void it__node_save(it_node *node, it_tensor *t);
/* Keep a copy of n host integers for backward in node->iv. */
it_status it__node_set_ivec(it_node *node, const int64_t *v, size_t n);
/* Keep a copy of `bytes` bytes of host data for backward in node->blob. */
it_status it__node_set_blob(it_node *node, const void *data, size_t bytes);
/* True when nothing but the caller holds g (one reference to the tensor and to its
 * storage) and it is contiguous: a backward may then write over the dy it was given, and
 * it__accum_grad takes such a g over as t's gradient instead of copying it. */
bool it__grad_owned(const it_tensor *g);
/* t.grad += g (g has t's shape). Takes g over when nothing else holds it (it__grad_owned). */
it_status it__accum_grad(it_tensor *t, it_tensor *g);
/* it__accum_grad for a g whose storage others still hold but none reads again (cross entropy's
 * gradient written over the logits at their last use): taken over as t's first gradient even
 * so; added (as it__accum_grad) when t already has one. */
it_status it__accum_grad_taken(it_tensor *t, it_tensor *g);
/* For kernels that can accumulate themselves (gemm with beta): returns t's gradient buffer
 * to write into, with *beta = 1 if it already holds a gradient to add to, 0 if fresh.
 * NULL when t needs no gradient (or on error: check it_last_status()). */
it_tensor *it__grad_buffer(it_tensor *t, float *beta);
/* Lazy zeroing of a leaf's gradient buffer: flagged now, written by the next backward's first
 * contribution (which overwrites instead of adding) or filled by it__grad_materialize. */
it_status it__grad_zero_lazy(it_tensor *t);
it_status it__grad_materialize(it_tensor *t);
/* The parameters' version: it__weights_written (an optimizer step) bumps it; autocast keeps
 * its rounded copy of a parameter for one version. */
unsigned long long it__weights_version(void);
void it__weights_written(void);
/* The optimizers' rounded copies of their flat parameters (ops/matmul.c, beside autocast's
 * cache). it__autocast_wants_copy: whether autocast asked for a copy of a parameter stored in
 * flat's storage since the last call (which clears the mark); *dt gets the copy's dtype.
 * it__autocast_stepped: flat's optimizer step (one it__weights_written) succeeded, and low
 * (retained) holds flat rounded to low's dtype, or is NULL (no copy: flat's entry goes). Until
 * the next step, autocast's operand for a parameter inside flat is a view of low; the other
 * optimizers' copies stay current (the step wrote flat only). it__autocast_forget drops
 * flat's entry and mark (an optimizer freed). */
bool it__autocast_wants_copy(const it_tensor *flat, it_dtype *dt);
it_status it__autocast_stepped(it_tensor *flat, it_tensor *low);
void it__autocast_forget(const it_tensor *flat);
/* Whether products may stay in the autocast dtype between two that round them anyway (the
 * two entry points below). IT_AUTOCAST_KEEP_LOW=0 in the environment widens every product
 * back to float32, the former dataflow: for tests that check that both give the same bits. */
bool it__autocast_keep_low(void);
/* it_linear, except that under autocast y is returned as the product gives it, in the
 * autocast dtype, not widened to float32: for a consumer that reads it widened itself (cross
 * entropy's fused half-logits slots). Without autocast it is it_linear. */
it_tensor *it__linear_low(it_tensor *x, it_tensor *w, it_tensor *bias);
/* it_cross_entropy at the logits' last use (a model's loss, which hands them to no one else):
 * its backward writes dlogits over the logits, a chunk of rows at a time, instead of into a
 * second buffer of their size (llm.c's memory plan; the same bits). Nothing may read the
 * logits after the backward. */
it_tensor *it__cross_entropy_last_use(it_tensor *logits, it_tensor *targets, int64_t valid);
/* it_cross_entropy(it_linear(x, w, NULL), targets, valid) as one op that never holds the
 * whole (N, Vp) logits (ops/linear_ce.c); x and w float32, w (Vp, C). The 0-D loss. */
it_tensor *it__linear_cross_entropy(it_tensor *x, it_tensor *w, it_tensor *targets, int64_t valid);
/* Whether it__linear_cross_entropy takes these operands: float32, autocast off, and not
 * turned off by IT_LINEAR_CE=0. */
bool it__linear_cross_entropy_wanted(const it_tensor *x, const it_tensor *w);
/* it_linear(it_gelu(x), w, bias) as one op that keeps x alone for its backward and computes
 * gelu(x) again there (ops/gelu_linear.c; llm.c's GELU recompute), x and w float32. */
it_tensor *it__gelu_linear(it_tensor *x, it_tensor *w, it_tensor *bias);
/* Whether it__gelu_linear takes these operands: float32, autocast off, and not turned off by
 * IT_GELU_RECOMPUTE=0. */
bool it__gelu_linear_wanted(const it_tensor *x, const it_tensor *w);
/* it_causal_self_attention and it_attention, except that under autocast y is returned in the
 * autocast dtype, not widened (for a projection that rounds it anyway); GPT-2's qkv may
 * already be in that dtype (it__linear_low's). Without autocast they are the public ops. */
/* ops/flash.c: flash attention's node, or NULL with *declined when the backend declined the
 * call (the caller composes). it__flash_wanted: --flash on and both slots native on x's device. */
bool it__flash_wanted(const it_tensor *x);
/* Record the error just raised as a backend's decline of a flash call (the first one since
 * it_flash_attention_set is kept for it_flash_attention_declined). */
void it__flash_note_declined(void);
/* ops/attention.c: the (B, H, R, D) view of the heads in t (B, R, ...), head h's (r, d) at
 * column col0 + h * hs + d * ds. */
it_tdesc it__heads_of(const it_tensor *t, int64_t H, int64_t D, int64_t col0, int64_t hs, int64_t ds);
it_tensor *it__flash_qkv(it_tensor *qkv, int64_t n_head, bool *declined);
it_tensor *it__flash_qkv3(it_tensor *q, it_tensor *k, it_tensor *v, bool *declined);
it_tensor *it__causal_self_attention_low(it_tensor *qkv, int n_head);
it_tensor *it__attention_low(it_tensor *q, it_tensor *k, it_tensor *v);
/* it_cp_attention (dist.h) over group g, its output left in the autocast dtype with `keep`
 * (as it__attention_low's). */
struct it_dist;
it_tensor *it__cp_attention(struct it_dist *g, int comm, bool balance, it_tensor *q, it_tensor *k, it_tensor *v,
                            bool keep);
/* silu(a) * b over autocast's half-precision gate and up products, in fp32 and rounded once
 * to their dtype (the backend's fused swiglu_low_* slots, else the widened composition: the
 * same bits); fp32 a and b give it_mul(it_silu(a), b). */
it_tensor *it__swiglu_low(it_tensor *a, it_tensor *b);
/* x rounded once for n products that read it under autocast with the products kept low
 * (it__autocast_keep_low): out[0..n) share one rounded copy, each with its own cast node, so
 * that each product's gradient is widened and summed into x's as n it_cast()s would give it.
 * Otherwise every out[i] is x. False on failure. */
bool it__autocast_share(it_tensor *x, int n, it_tensor **out);
/* True while a checkpoint's backward runs its region again (it_checkpoint): the forward that
 * runs then is a recomputation, not a new one (a model counts statistics only once). */
bool it__recomputing(void);
/* it_grouped_linear whose output stays in the autocast dtype (as it__linear_low). */
it_tensor *it__grouped_linear_low(it_tensor *x, int n_group, it_tensor *const *w, const int64_t *offsets);
/* it_moe, with the experts reading x_experts (x's values, a TP region's entry) while the
 * router reads x, and the (N*k, C) down products passed through sum(ctx, .) before their
 * routing weights scale them (a TP all-reduce of the experts' partial products). x_experts ==
 * x and sum == NULL is it_moe. */
it_tensor *it__moe(it_tensor *x, it_tensor *x_experts, it_tensor *(*sum)(void *ctx, it_tensor *partial), void *ctx,
                   it_tensor *router, int n_expert, it_tensor *const *gate, it_tensor *const *up,
                   it_tensor *const *down, int k, int64_t *tokens_per_expert, it_tensor **aux_loss);

#endif
