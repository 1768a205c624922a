/* The generic model object behind include/infinitrain/models.h. */
#ifndef IT_MODEL_IMPL_H
#define IT_MODEL_IMPL_H

#include "core/internal.h"
#include "infinitrain/models.h"

#define IT_MAX_CHUNKS 64

struct it__layout;

typedef struct it_model_vtable {
    it_tensor *(*forward)(it_model *m, it_tensor *idx);
    it_status (*save)(const it_model *m, const char *path);
    double (*flops_per_token)(const it_model *m, int64_t T);
    void (*free_impl)(void *impl);
    /* Optional, NULL for a model without experts (it_model_set_aux_loss_coeff is then a no-op
     * and it_model_expert_tokens returns 0). */
    void (*set_aux_loss_coeff)(it_model *m, float coeff);
    int (*expert_tokens)(it_model *m, int64_t *counts, int max, bool reset);
    /* The whole model's layout walk with lo->visit (counting only: no views are made, m is
     * left as it is): every tensor, held by this rank or not (LoRA's draws and its file under
     * PP). */
    void (*walk_all)(const it_model *m, struct it__layout *lo);
} it_model_vtable;

/* One entry of the layout walk. An alias entry's views are its own (Mixtral's packed c_attn
 * over the Q, K and V leaves); an ordinary entry borrows its leaf and the leaf's gradient. */
typedef struct it__param_entry {
    it_model_param_info info;
    bool alias;
} it__param_entry;

struct it_model {
    const it_model_vtable *vt;
    it_model_info info;
    it_device dev;
    it_tensor *params, *grads; /* flat, owned */
    it_tensor **leaves;        /* every parameter view it__model_param made (owned) */
    int n_leaves, cap_leaves;
    it__param_entry *entries; /* the layout walk, in flat order (owned, names included) */
    int n_entries, cap_entries;
    /* An auxiliary loss the last forward produced (MoE load balancing), owned by that
     * forward's scope; it_model_loss adds it and clears it. */
    it_tensor *aux_loss;
    it_tensor *stage_aux; /* a non-last pipeline chunk's auxiliary loss (it_model_take_stage_aux) */
    float loss_scale;     /* it_model_set_loss_scale's (1 until set) */
    /* True during it_model_loss's forward: the LM head may then leave the logits in the
     * autocast dtype (it__lm_head), since cross entropy is all that reads them. */
    bool loss_forward;
    /* During it_model_loss's forward, its targets and valid vocabulary: where the LM head and
     * the loss can run as one op (it__lm_head, ops/linear_ce.c), the head returns the loss
     * itself and sets loss_fused. */
    it_tensor *loss_targets;
    int64_t loss_valid;
    bool loss_fused;
    struct it__lora *lora; /* NULL: no adapters (src/models/lora.c) */
    /* Tensor parallelism (it_model_parallel): the TP group (NULL: none), its size (1: none) and
     * this rank's place in it; sp: sequence parallel. Set before the layout walk, which then
     * cuts each parameter by its split (model.c). */
    it_dist *tp;
    int tp_size, tp_rank;
    bool sp;
    /* Context parallelism (it_model_parallel): the CP group (NULL: none), its size (1: none),
     * this rank's place, the comm type and the balanced chunks (src/models/context.c). */
    it_dist *cp;
    int cp_size, cp_rank, cp_comm;
    bool cp_balance;
    /* Pipeline parallelism: this rank's stage of pp_size (1: none), the layers [l0, l1) it
     * holds, whether it is the first (embedding) or last (final norm, head, loss) stage; the PP
     * group; mp: the model-parallel group (TP x PP: every rank holding part of one model), over
     * which the gradient norm is summed; stage_in: a non-first stage's input activation for the
     * next forward (it_model_set_stage_input). */
    it_dist *pp, *mp;
    int pp_size, pp_rank, l0, l1;
    bool first, last;
    it_tensor *stage_in;
    /* Virtual stages: the stage's nchunk chunks of layers [chunk_l0[v], chunk_l1[v]) (global
     * chunk v*P + p); l0, l1, first and last above are the current chunk's (it_model_set_chunk);
     * stage_first/stage_last: the stage holds the embedding / the final norm and head. */
    int nchunk, chunk_l0[IT_MAX_CHUNKS], chunk_l1[IT_MAX_CHUNKS];
    bool stage_first, stage_last;
    /* Activation recomputation (it_model_set_recompute): the method and its layer count. */
    it_recompute recompute;
    int recompute_layers;
    /* During it_model_forward_cached: the cache the layers extend and attend against
     * (kv_cache.c); NULL otherwise. */
    struct it_kv_cache *kv;
    void *impl;
};

/* The KV cache's side of a layer (kv_cache.c), each a no-op without one (m->kv NULL):
 * it__kv_pos: the position of this forward's first token (0 without a cache);
 * it__kv_extend: layer l's new keys and values (B, T, nkv, hd) written at the cache's
 * positions, *k and *v replaced by views of every position so far (B, pos + T, nkv, hd);
 * it__kv_last: x (B, T, C) cut to its last position when only that one's logits are wanted. */
int64_t it__kv_pos(const it_model *m);
it_status it__kv_extend(it_model *m, int l, it_tensor **k, it_tensor **v);
it_tensor *it__kv_last(it_model *m, it_tensor *x);

/* A model's block l on x (the residual stream), for it__run_layers. */
typedef it_tensor *(*it__layer_fn)(it_model *m, int l, it_tensor *x);
/* Blocks l0 .. l1-1 on x in turn, as m's recomputation setting places its checkpoints: each
 * checkpointed region's graph is recorded again only at its backward (it_checkpoint). The
 * layers are counted within [l0, l1) (a pipeline chunk's own, as InfiniTrain counts them). */
it_tensor *it__run_layers(it_model *m, it_tensor *x, int l0, int l1, it__layer_fn fn);

/* GetStageInfo: stage p's chunks of n_layer layers over P stages with V chunks each; there are
 * P*V chunks, chunk g = v*P + p is stage p's v-th, and chunk g holds layers
 * [g*(q+1), ...) with q+1 layers when g < n_layer % (P*V), else q, q = n_layer / (P*V). */
void it__model_set_stages(it_model *m, int n_layer);

/* Context parallelism's side of a model (src/models/context.c), each the plain thing without
 * CP (m->cp NULL):
 * it__cp_rows: rows of a per-position table (GPT-2's wpe, LLaMA's RoPE cos/sin) for rows
 *   [lo, lo + n) of this rank's part of a sequence whose rank part is Tl rows, differentiable;
 *   without CP rows lo .. lo + n - 1 (plus `pos`, a cached forward's first position);
 * it__cp_attend: attention of this rank's rows, q (B, Tl, H, D), k, v (B, Tl, Hkv, D), over
 *   the CP group (keep: the output left in the autocast dtype, as it__attention_low's);
 * it__cp_length: the whole sequence's length for a rank part of Tl rows. */
it_tensor *it__cp_rows(it_model *m, it_tensor *table, int64_t pos, int64_t Tl, int64_t lo, int64_t n);
it_tensor *it__cp_attend(it_model *m, it_tensor *q, it_tensor *k, it_tensor *v, bool keep);
int64_t it__cp_length(const it_model *m, int64_t Tl);

/* Set m's tensor parallelism from par (NULL: none). */
void it__model_set_parallel(it_model *m, const it_model_parallel *par);
/* The forward's TP pieces: each the identity (or the plain op) when m has no TP.
 * it__tp_enter: a column-parallel layer's input (copy to the region, or SP's all-gather);
 * it__tp_leave: a row-parallel layer's output (all-reduce, or SP's reduce-scatter), then its
 * replicated bias (NULL: none) added;
 * it__tp_row_linear: x W^T (+ b): a row-parallel layer, whole (it__linear) without TP;
 * it__tp_embed: the token embedding, summed over the group (SP: this rank's rows). */
it_tensor *it__tp_enter(it_model *m, it_tensor *x);
it_tensor *it__tp_leave(it_model *m, it_tensor *x, it_tensor *bias);
it_tensor *it__tp_row_linear(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b);
it_tensor *it__tp_embed(it_model *m, it_tensor *idx, it_tensor *wte);
/* The TP checks every model shares: n_head, the padded vocabulary (and SP's nothing more:
 * the sequence length is checked at the forward). Message prefix `what` ("GPT-2"). */
it_status it__tp_check(const it_model_parallel *par, const char *what, int n_head, int n_kv_head, int64_t ffn,
                       int64_t vocab);
/* The contiguous runs that map parameter p's slice on TP rank r (of tp) onto the whole tensor:
 * fn(ctx, element in the whole flat buffer, element in the rank's, count). */
typedef void (*it__run_fn)(void *ctx, int64_t full_at, int64_t local_at, int64_t n);
void it__param_runs(const it_model_param_info *p, int tp, int r, it__run_fn fn, void *ctx);
/* This rank's slices from the whole (one-rank) flat parameters on the host. */
it_status it__model_from_full(it_model *m, const float *full);
/* This rank's slices read from an llm.c file's parameters (offset 1024). */
it_status it__model_read_sliced(it_model *m, const char *path);
/* The same from another source (a Hugging Face model): for each entry, fn gives elements
 * [at, at + n) of the entry's whole (one-rank) tensor in this project's layout, for this
 * rank's slices only; each entry is read into a buffer of its own size and copied in, so no
 * second copy of the whole model is made. */
typedef it_status (*it__entry_read_fn)(void *ctx, const it_model_param_info *p, int64_t at, int64_t n, float *dst);
it_status it__model_read_entries(it_model *m, it__entry_read_fn fn, void *ctx);

/* Models built from a configuration rather than an llm.c header (src/hf/): GPT-2 as
 * it_gpt2_new_tp without the initialization, LLaMA-3 / Mixtral with every value given (the
 * FFN width as is, the RoPE scaling's numbers). Parameters are left unread. The header
 * it_model_save writes is made from the configuration (docs/formats.md). */
typedef struct it__llama_config {
    bool moe;
    bool qwen3, tied; /* Qwen3 (q_norm/k_norm, half-split RoPE); its head tied to wte */
    int head_dim;     /* Qwen3: its own (0: n_embd / n_head); the others n_embd / n_head */
    int block_size, vocab_size, n_layer, n_head, n_kv_head, n_embd, ffn_hidden, n_expert, router_topk;
    float norm_eps, rope_theta;
    bool scaled_rope;
    float rope_factor, rope_low, rope_high, rope_old_ctx;
} it__llama_config;
IT_API it_status it__llama_build(const it__llama_config *c, it_device dev, const it_model_parallel *par,
                                 const char *what, it_model **out);
it_status it__gpt2_build(const it_gpt2_config *cfg, it_device dev, const it_model_parallel *par, it_model **out);
/* The adapters as other formats see them (PEFT, src/hf/hf_peft.c): the whole model's adapter
 * tensors ("<module>.lora_A" (r, in), ".lora_B" (out, r)) at their offsets in the one-rank
 * adapter buffer; that buffer gathered (collective over TP and PP, as it_model_lora_save) or
 * set (each rank keeping its slices). */
int it__lora_whole_count(const it_model *m);
const char *it__lora_whole_at(const it_model *m, int i, int64_t shape[2], int64_t *offset, bool *is_b);
int64_t it__lora_full_numel(const it_model *m);
int it__lora_rank(const it_model *m);
float it__lora_alpha(const it_model *m);
it_status it__lora_get_full(const it_model *m, float *full);
it_status it__lora_set_full(it_model *m, float *full);

/* A LLaMA-3 or Mixtral model's configuration (IT_ERR_INVALID_ARG for another family). */
it_status it__llama_config_of(const it_model *m, it__llama_config *c);
/* The whole flat parameters (full_num_params floats, malloc'd) gathered over the TP group on
 * every rank of it. */
it_status it__model_gather_full(const it_model *m, float **full, int64_t *full_num_params);

/* Allocate the flat parameter and gradient buffers (grads zeroed). */
it_status it__model_init(it_model *m, const it_model_vtable *vt, it_device dev, int64_t num_params);
/* A leaf parameter: a view of `shape` at `offset` into the flat params, with its gradient a
 * view at the same offset into the flat grads. Owned by the model (freed with it). */
it_tensor *it__model_param(it_model *m, int64_t offset, int ndim, const int64_t *shape);

/* What the walk says of one parameter; the name is printf(fmt, ...). */
typedef struct it__param_spec {
    it_param_role role;
    bool is_bias;
    int layer, expert; /* -1: none */
    int ndim;
    int64_t shape[2];
    const char *tied_name; /* a static string or NULL */
    /* ATTN_QKV only: the K (= V) rows and the head size, for the TP cut (kv heads cut when TP
     * divides them, else each rank keeps the one its query heads use; model.c) */
    int64_t kv_rows, head_dim;
} it__param_spec;

/* The layout walk. A model lists each parameter once, in flat order, through it__layout_take;
 * the same walk counts (m NULL: only `off` advances) and builds (views and named entries).
 * Building needs m->info's n_head, n_kv_head and n_embd set (c_attn's Q/K/V rows). */
typedef struct it__layout {
    it_model *m;         /* NULL: count only */
    int64_t off;         /* elements walked so far (this rank's, under TP/PP) */
    it_status st;        /* the first failure while building */
    const it_model *par; /* counting only: whose TP cut and PP stage to count (NULL: the whole
                            model); building uses m's */
    int64_t full_off;    /* elements of the whole (uncut) tensors walked so far */
    /* Called for every tensor of the whole model, held here or not, with its place in the
     * one-rank layout (a new model's initialization draws the whole model's values). */
    void (*visit)(void *ctx, const struct it__param_spec *spec, int64_t full_off, const char *name);
    void *visit_ctx;
    bool leaves_elsewhere; /* the last alias is another pipeline stage's: so are its leaves */
} it__layout;
/* Under PP: whether lo's stage holds a parameter of this spec (its layer, or the embedding on
 * the first stage and the final norm and head on the last). */
bool it__layout_owns(const it__layout *lo, const it__param_spec *spec);
/* GPT-2 under PP: the last stage's copy of the tied wte as its lm_head ("lm_head.weight", the
 * file's wte rows), whose gradient is summed with the first stage's (it_model_tp_sync_grads). */
it_tensor *it__layout_tied_copy(it__layout *lo, it__param_spec spec, const char *name, int64_t full_offset);

/* The next parameter: a leaf view at lo->off (NULL when counting or after a failure), named. */
it_tensor *it__layout_take(it__layout *lo, it__param_spec spec, const char *fmt, ...) IT_PRINTF(3, 4);
/* A named entry over the next `spec` elements that the model keeps as several leaves of its
 * own: the entry gets views of its own and lo->off does not move (take the leaves next with
 * it__layout_leaf, which must cover this rank's cut of the entry exactly; a c_attn's leaves
 * Q, K and V take it__layout_qkv_rows's rows). */
it_tensor *it__layout_alias(it__layout *lo, it__param_spec spec, const char *fmt, ...) IT_PRINTF(3, 4);
/* The Q and the K (= V) rows of a c_attn that lo's TP rank keeps: q_rows / TP, and its share
 * of kv_rows (or the one kv head its queries use when TP is a multiple of the kv heads). */
void it__layout_qkv_rows(const it__layout *lo, int64_t q_rows, int64_t kv_rows, int64_t head_dim, int64_t *q,
                         int64_t *kv);
/* An unnamed leaf under the last alias: a view at lo->off, which moves past it (nothing, and
 * NULL, when the alias is another pipeline stage's). */
it_tensor *it__layout_leaf(it__layout *lo, int ndim, int64_t a, int64_t b);

/* x W^T + b, plus (alpha/r) B (A x) when W has a LoRA adapter: every linear layer of a model's
 * forward goes through it. */
it_tensor *it__linear(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b);
/* (alpha/r) B (A x) for W's adapter, or NULL with *none set when W has none (for a forward
 * that splits one adapted weight over several products, Mixtral's Q, K, V). */
it_tensor *it__lora_delta(it_model *m, it_tensor *x, it_tensor *w, bool *none);
/* it__linear, except that under autocast, when w has no adapter, y stays in the autocast
 * dtype the product gives it (it__linear_low) for a consumer that reads it so: GPT-2's
 * attention, whose own first step would round a widened copy back. */
it_tensor *it__linear_keep(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b);
/* Whether w has a LoRA adapter: its input then feeds two products (the base and the
 * adapter's A), whose bf16 gradients must be summed in fp32 and rounded once, as they are
 * when that input is an fp32 tensor each product rounds; so an input kept in bf16 for w
 * (it__attention_low's y) is only for an unadapted w. */
bool it__lora_adapts(const it_model *m, const it_tensor *w);
/* Whether an MLP over these n weights keeps its products in the autocast dtype (LLaMA's
 * SwiGLU): under autocast with the products kept low, none of them adapted by LoRA (whose
 * two products' gradients would then be summed in bf16), and the precision checker off (it
 * reports the widened modules' outputs). */
bool it__mlp_keeps_low(const it_model *m, it_tensor *const *w, int n);
/* The LM head's logits, x w^T (it__linear). In it_model_loss's forward without TP, with no
 * adapter on w, under autocast they stay in the autocast dtype the product gives them:
 * it_cross_entropy reads them widened, so no fp32 copy of them (nor of their gradient) is
 * made. TP's vocabulary-parallel loss takes fp32 logits, as before. */
it_tensor *it__lm_head(it_model *m, it_tensor *x, it_tensor *w);
void it__lora_free(struct it__lora *l);
/* Adapter t described as a parameter (its views included), for it__param_runs and the TP
 * gradient rules: B of a column-parallel layer is cut as its weight's rows are (c_attn's
 * [Q_r|K_r|V_r] included, hence the base's role and q/kv rows), A of a row-parallel one by
 * columns; the rest whole. */
it_model_param_info it__lora_param_view(const it_lora_tensor_info *t);

/* Deterministic normal samples (splitmix64 + Box-Muller), for initialization. */
typedef struct it_rng {
    uint64_t state;
} it_rng;
double it__rng_normal(it_rng *r);
double it__rng_uniform(it_rng *r); /* [0, 1) */

/* Read a checkpoint's 1024-byte header and check the file length; names the file. */
it_status it__read_header(const char *path, int32_t header[256], size_t *file_bytes);
/* Read n fp32 values at byte offset 1024 into the flat params. */
it_status it__read_params(const char *path, it_tensor *params, int64_t n);
/* Write header + the flat params atomically. */
it_status it__write_checkpoint(const char *path, const int32_t header[256], it_tensor *params);
/* A model's llm.c file: it__write_checkpoint, or under TP the slices gathered (a collective
 * over the group) and written by the group's rank 0. */
it_status it__save_checkpoint(const it_model *m, const char *path, const int32_t header[256]);
/* The same with the whole buffer's elements [tail_at, tail_at + tail_n) written again after it
 * (a tied Qwen3's lm_head: wte's rows). */
it_status it__save_checkpoint_tail(const it_model *m, const char *path, const int32_t header[256], int64_t tail_at,
                                   int64_t tail_n);

#endif
