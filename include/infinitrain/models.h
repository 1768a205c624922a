/* Models: a generic handle the training driver works with; GPT-2, LLaMA-3 and Mixtral.
 *
 * Every model keeps all its parameters in one flat tensor (in its checkpoint's order) and
 * all gradients in another of the same length; each named parameter is a view into them.
 * The optimizer, gradient clipping and checkpoint I/O then work on one buffer each. */
#ifndef INFINITRAIN_MODELS_H
#define INFINITRAIN_MODELS_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct it_model it_model;
typedef struct it_dist it_dist;

/* Activation recomputation (Megatron's full granularity, InfiniTrain's --recompute_method):
 * which transformer blocks run their forward again at backward instead of keeping their
 * activations. Counted per pipeline chunk; the embedding, the final norm and the head never. */
typedef enum it_recompute {
    IT_RECOMPUTE_OFF,     /* keep every activation */
    IT_RECOMPUTE_EACH,    /* full, method none: every block its own region */
    IT_RECOMPUTE_UNIFORM, /* full, uniform k: consecutive groups of k blocks (the last may be shorter) */
    IT_RECOMPUTE_BLOCK,   /* full, block k: the first k blocks of each chunk, one region each; the rest kept */
} it_recompute;

/* Megatron-style tensor parallelism for a model being built (InfiniTrain's layout, see
 * it_param_split): each rank of group `tp` holds its slices of the cut parameters and
 * computes its heads, FFN columns and vocabulary columns; the forward's collectives run over
 * `tp`. sequence_parallel: the norms, residuals and dropout-free elementwise work run on this
 * rank's T/N rows of the sequence (all-gather before column-parallel layers, reduce-scatter
 * after row-parallel ones). tp NULL or of one rank: an ordinary model. */
typedef struct it_model_parallel {
    it_dist *tp;
    bool sequence_parallel;
    /* Pipeline parallelism (NULL or one rank: none): this rank's stage is its rank in `pp`, and
     * it holds that stage's layers (GetStageInfo's split), the embedding on the first stage,
     * the final norm and the head on the last. `mp`: the group of every rank holding part of
     * this model (TP x PP), over which the gradient norm is summed (NULL: tp). */
    it_dist *pp, *mp;
    /* Virtual pipeline stages: chunks per stage (0 or 1: one); stage p holds global chunks
     * v*P + p, v < virtual_stages, of P*virtual_stages (InfiniTrain's GetStageInfo). */
    int virtual_stages;
    /* Context parallelism (NULL or one rank: none): the model's input is this rank's T/CP rows
     * of each sequence (it_cp_slice_host's), positions and RoPE follow them, and attention
     * runs over `cp` by cp_comm (an it_cp_comm) with cp_balance's chunks (dist.h). */
    it_dist *cp;
    int cp_comm;
    bool cp_balance;
} it_model_parallel;

typedef struct it_model_info {
    const char *family;   /* "gpt2" */
    int64_t block_size;   /* max sequence length */
    int64_t vocab_size;   /* valid vocabulary (loss and sampling use these ids) */
    int64_t padded_vocab; /* logits' width */
    int64_t num_params;
    int n_layer, n_head, n_embd;
    int n_kv_head;             /* LLaMA-3 / Mixtral (0 for GPT-2) */
    int ffn_hidden;            /* MLP width (LLaMA-3), expert width (Mixtral) */
    int n_expert, router_topk; /* Mixtral */
    int head_dim;              /* attention head size: n_embd / n_head, except Qwen3's given one */
    bool tied_embeddings;      /* the LM head is the token embedding (GPT-2; Qwen3 when its config ties) */
} it_model_info;

/* Any llm.c model file, its family known from its magic (GPT-2, LLaMA-3, Mixtral or Qwen3). */
IT_API it_status it_model_load(const char *path, it_device dev, it_model **out);
/* An llm.c-style file of the named family ("gpt2", "llama3", "mixtral", "qwen3": the apps'
 * names) under par (NULL: one rank): its loader, which checks the magic; an unknown name is
 * IT_ERR_INVALID_ARG. it_model_family_known: whether the name is one of those. */
IT_API it_status it_model_load_family(const char *family, const char *path, it_device dev, const it_model_parallel *par,
                                      it_model **out);
IT_API bool it_model_family_known(const char *family);
/* InfiniTrain's default --lora_target_modules for a family ("c_attn,c_proj" for an unknown one). */
IT_API const char *it_model_lora_default_targets(const char *family);
IT_API void it_model_free(it_model *m);
IT_API const it_model_info *it_model_get_info(const it_model *m);
IT_API it_device it_model_device(const it_model *m);
IT_API it_tensor *it_model_params(it_model *m); /* flat (num_params) */
/* The flat gradient of the trainable parameters: every parameter's (num_params), or with LoRA
 * applied (it_model_lora_apply) the adapters' alone (it_model_lora_numel); see
 * it_model_trainable. */
IT_API it_tensor *it_model_grads(it_model *m);
/* Zero the gradients lazily: nothing is written now; the next backward writes each gradient
 * instead of adding to it (its GEMMs run with beta 0), and it_model_grads_final fills the
 * ones no node wrote. Same values as filling it_model_grads with zeros, without a pass over
 * all the gradient memory and without reading it back in the first GEMMs. */
IT_API it_status it_model_zero_grad(it_model *m);
/* After backward: the gradients still lazily zero are filled; it_model_grads is whole again
 * (call it before reading the flat gradient: optimizer, all-reduce, norm). */
IT_API it_status it_model_grads_final(it_model *m);
/* ZeRO-2: give the flat gradient's memory back after backward (every gradient view stays a
 * valid object, without bytes), and take new, lazily zero bytes before the next backward.
 * Both no-ops when already in that state. */
IT_API it_status it_model_grads_release(it_model *m);
IT_API it_status it_model_grads_acquire(it_model *m);
IT_API bool it_model_grads_held(const it_model *m);
/* idx (B, T) int32 -> logits (B, T, padded_vocab). */
IT_API it_tensor *it_model_forward(it_model *m, it_tensor *idx);
/* Mean cross entropy of the forward pass over the valid vocabulary (0-D). */
IT_API it_tensor *it_model_loss(it_model *m, it_tensor *idx, it_tensor *targets);
/* Write the model's checkpoint format (atomically). Under tensor parallelism a collective over
 * the TP group: the slices are gathered and the group's rank 0 writes the whole file. */
IT_API it_status it_model_save(const it_model *m, const char *path);
/* Pipeline parallelism: a non-first stage's input (the previous stage's output, B x T x C, or
 * T/TP rows under SP) for the next it_model_forward / it_model_loss, which then ignore idx
 * except for its shape; NULL clears it. A non-last stage's forward returns its last layer's
 * output instead of logits. */
IT_API void it_model_set_stage_input(it_model *m, it_tensor *act);
/* After a non-last stage's forward: the auxiliary loss of its layers (Mixtral's load balancing,
 * already weighted as it_model_loss weights it; NULL when there is none), which the loss on the
 * last stage does not include. The caller adds its value to the step's loss and its gradient
 * to the backward (it_attach_loss). Taken once: a second call returns NULL. */
IT_API it_tensor *it_model_take_stage_aux(it_model *m);
/* The factor the caller's backward root applies to it_model_loss's loss (1 by default; the
 * trainer's 1/(accumulation x DP)). Under activation recomputation a recomputed Mixtral layer
 * gives its auxiliary loss, counted in the loss without a graph when it first ran, the gradient
 * this scale implies. */
IT_API void it_model_set_loss_scale(it_model *m, float scale);
/* Virtual stages: the chunk (0 .. virtual_stages-1) the next forward runs; it embeds on the
 * first stage's chunk 0 and ends in the head on the last stage's last chunk. */
IT_API void it_model_set_chunk(it_model *m, int v);
IT_API int it_model_pp_size(const it_model *m);
IT_API int it_model_pp_rank(const it_model *m);
/* Recompute as `how` says (layers: uniform's and block's k, >= 1); the losses and gradients
 * are bitwise those without, the activations kept fewer. Mixtral: its routing is counted when a
 * layer is recomputed, its auxiliary loss's gradient joins there (it_model_set_loss_scale). */
IT_API it_status it_model_set_recompute(it_model *m, it_recompute how, int layers);
/* Tensor parallelism: the group size (1 without), this rank's place in it, sequence parallel. */
IT_API int it_model_tp_size(const it_model *m);
IT_API int it_model_tp_rank(const it_model *m);
IT_API bool it_model_sequence_parallel(const it_model *m);
/* Switch sequence parallelism off or back on (under TP only; the weights are the same either
 * way); returns the previous setting. Sampling turns it off: its T grows one token at a time. */
IT_API bool it_model_set_sequence_parallel(it_model *m, bool on);
/* After backward under sequence parallelism: the replicated parameters (norms, a row-parallel
 * layer's bias, wpe) saw only this rank's rows, so their gradients are summed over the TP group
 * (Megatron does; InfiniTrain does not). A no-op otherwise. */
IT_API it_status it_model_tp_sync_grads(it_model *m);
/* The L2 norm of the whole model's gradient (it_model_grads): under tensor parallelism the cut
 * parameters' squares summed over the TP group, the replicated ones counted once. */
IT_API it_status it_model_grad_norm(it_model *m, double *norm);
/* For a norm over part of the flat gradient (ZeRO's shard, already reduced): of g's squares
 * (g's first element at flat_lo of it_model_grads' layout), the share other TP ranks count
 * too: an element on c ranks of the group (replicated: all of them; a kept kv head's rows: its
 * copies) adds (1 - 1/c) g^2. 0 without TP. */
IT_API it_status it_model_grad_shared_sumsq(it_model *m, it_tensor *g, int64_t flat_lo, double *over);
/* FLOPs of one training step (forward + backward) per token, for MFU: 6*N + attention. */
IT_API double it_model_flops_per_token(const it_model *m, int64_t T);

/* ---- KV cache: generation without recomputing the prefix (src/models/kv_cache.c) */
typedef struct it_kv_cache it_kv_cache;
/* A cache for `batch` sequences of up to max_len positions (1..block_size): every layer's
 * keys and values, (batch, max_len, n_kv_head, head_dim) each, in the parameters' dtype on
 * the model's device. A model split over TP or PP ranks is refused (IT_ERR_UNSUPPORTED). */
IT_API it_status it_kv_cache_new(it_model *m, int64_t batch, int64_t max_len, it_kv_cache **out);
IT_API void it_kv_cache_free(it_kv_cache *c);
IT_API int64_t it_kv_cache_len(const it_kv_cache *c); /* positions held */
IT_API int64_t it_kv_cache_capacity(const it_kv_cache *c);
IT_API int64_t it_kv_cache_batch(const it_kv_cache *c);
IT_API size_t it_kv_cache_bytes(const it_kv_cache *c);
IT_API void it_kv_cache_reset(it_kv_cache *c); /* forget every position */
/* The model on idx (B, T) as positions len .. len+T-1 of the cache's B sequences, whose keys
 * and values it appends (len += T); grad mode off inside. Returns the logits (B, T, Vp) of
 * it_model_forward on the whole sequence at those positions, or with last_only (B, 1, Vp):
 * the last position's alone (the head runs on that row only). */
IT_API it_tensor *it_model_forward_cached(it_model *m, it_kv_cache *c, it_tensor *idx, bool last_only);

/* ---- The parameters by name
 *
 * Every model describes its parameters with one layout walk, in flat-buffer (= checkpoint)
 * order; the entries below are that walk. Names are InfiniTrain's state-dict names (its
 * Module::StateDict at PP = 1 without DDP's "module." prefix): "transformer.wte.weight",
 * "transformer.h.3.attn.c_attn.weight", "transformer.h.3.mlp.experts.expert_1.c_fc2.weight",
 * "transformer.ln_f.weight", "lm_head.weight". The entries tile the flat buffers exactly once:
 * entry i starts where entry i-1 ends, and the last ends at num_params. */
typedef enum it_param_role {
    IT_PARAM_ROLE_TOKEN_EMBEDDING,    /* transformer.wte (V, C); GPT-2: also its lm_head (tied) */
    IT_PARAM_ROLE_POSITION_EMBEDDING, /* transformer.wpe (block_size, C), GPT-2 */
    IT_PARAM_ROLE_NORM,               /* ln_1, ln_2, ln_f: LayerNorm weight/bias or RMSNorm weight (C) */
    IT_PARAM_ROLE_ATTN_QKV,           /* attn.c_attn: fused Q|K|V rows (see q_rows below) */
    IT_PARAM_ROLE_ATTN_OUT,           /* attn.c_proj */
    IT_PARAM_ROLE_MLP_UP,             /* mlp.c_fc; LLaMA/Mixtral: the factor SiLU(gate) multiplies */
    IT_PARAM_ROLE_MLP_GATE,           /* mlp.c_fc2, LLaMA/Mixtral: SiLU is applied to it */
    IT_PARAM_ROLE_MLP_DOWN,           /* mlp.c_proj */
    IT_PARAM_ROLE_ROUTER,             /* mlp.router (n_expert, C), Mixtral */
    IT_PARAM_ROLE_LM_HEAD,            /* lm_head (V, C), untied (LLaMA-3, Mixtral) */
    IT_PARAM_ROLE_HEAD_NORM,          /* attn.q_norm, attn.k_norm (head_dim), Qwen3: one RMSNorm weight
                                         every head shares; replicated, its gradient summed over TP */
} it_param_role;

/* How Megatron-style tensor parallelism cuts the parameter across TP ranks (InfiniTrain's
 * ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding). */
typedef enum it_param_split {
    IT_PARAM_SPLIT_NONE,   /* replicated: norms, wpe, the router, a row-parallel layer's bias */
    IT_PARAM_SPLIT_COLUMN, /* column-parallel linear: output features (dim 0, rows) cut, bias cut too;
                              c_attn, c_fc, c_fc2 (experts' too), lm_head */
    IT_PARAM_SPLIT_ROW,    /* row-parallel linear weight: input features (dim 1, columns) cut;
                              attn.c_proj, mlp.c_proj (experts' too) */
    IT_PARAM_SPLIT_VOCAB,  /* vocab-parallel embedding: rows (token ids) cut; wte */
} it_param_split;

typedef struct it_model_param_info {
    const char *name;   /* "transformer.h.3.attn.c_proj.weight" */
    const char *module; /* the module the parameter belongs to: name less its last component
                           ("transformer.h.3.attn.c_proj"), as LoRA's target matching sees it */
    /* Another InfiniTrain name of the same tensor, or NULL. GPT-2's lm_head is tied to wte, so
     * InfiniTrain's "lm_head.weight" is the wte entry (no entry of its own is in the buffer). */
    const char *tied_name;
    it_param_role role;
    it_param_split split;
    bool is_bias;     /* a linear's or LayerNorm's bias (1-D); else a weight */
    bool is_linear;   /* the weight or bias of a linear layer (roles ATTN_QKV..MLP_DOWN, ROUTER, LM_HEAD) */
    int layer;        /* 0..n_layer-1 inside transformer.h.<layer>; -1 for wte, wpe, ln_f, lm_head */
    int expert;       /* 0..n_expert-1 inside mlp.experts.expert_<expert>; -1 otherwise */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* (out, in) for a linear weight, (out) for a bias, (C) for a norm */
    int64_t offset;   /* first element in it_model_params / it_model_grads */
    int64_t numel;
    /* Under tensor parallelism (it_model_parallel) shape, numel, offset and the q/kv rows below
     * are this rank's slice; full_shape and full_offset are the whole tensor's, in the
     * one-rank flat buffer (= the llm.c file's order). Without it they equal shape and offset. */
    int64_t full_shape[2];
    int64_t full_offset;
    /* GPT-2 under PP: the last stage's lm_head, a copy of the tied wte (full_offset is wte's);
     * not part of the one-rank layout. */
    bool pp_copy;
    /* Role ATTN_QKV only (0 otherwise): rows [0, q_rows) are Q (n_head heads), then kv_rows of K,
     * then kv_rows of V (n_kv_head heads each), head_dim rows per head, heads in order. Q head h
     * attends with KV head h / (q_rows / kv_rows); head group g is Q rows
     * [g*(q_rows/kv_rows)*head_dim, +(q_rows/kv_rows)*head_dim), K rows q_rows + g*head_dim and
     * V rows q_rows + kv_rows + g*head_dim, head_dim each. A bias (GPT-2) has the same rows. */
    int64_t q_rows, kv_rows, head_dim;
    /* Views (owned by the model, valid until it_model_free) of `shape` at `offset` into the
     * flat params and grads. Mixtral's c_attn view spans the Q, K and V weights its forward uses
     * as three parameters of their own: read and write it, but do not feed it to an op whose
     * backward should reach the model (its gradient view is filled by those three). */
    it_tensor *param, *grad;
} it_model_param_info;

/* Number of entries (0 for NULL). */
IT_API int it_model_param_count(const it_model *m);
/* Entry i in flat order, or NULL when i is outside 0..count-1. */
IT_API const it_model_param_info *it_model_param_at(const it_model *m, int i);
/* The entry named exactly `name`, or NULL. */
IT_API const it_model_param_info *it_model_param_find(const it_model *m, const char *name);
/* InfiniTrain's target rule (LoRA's ShouldApplyLoRA): `name` ends with `suffix` and the suffix
 * is the whole name or follows a '.'. "attn.c_proj" matches "transformer.h.0.attn.c_proj" but
 * not "transformer.h.0.mlp.c_proj"; "c_proj" matches both; "proj" matches neither. */
IT_API bool it_model_name_matches(const char *name, const char *suffix);
/* The entries whose name matches `suffix` (it_model_name_matches), in flat order: writes up to
 * `max` of them to `out` (may be NULL with max 0) and returns how many there are. */
IT_API int it_model_param_match(const it_model *m, const char *suffix, const it_model_param_info **out, int max);

/* ---- LoRA (InfiniTrain's nn/lora): y = W x + b + (alpha/r) B (A x) on the linear layers
 * whose module name matches a target (it_model_name_matches), A (r, in) and B (out, r).
 *
 * Applying LoRA freezes every base parameter: their gradient buffer is freed, autograd computes
 * no gradient for them (a frozen linear's backward computes only its input's gradient), and
 * it_model_trainable / it_model_grads become the adapters' own flat buffers, so an optimizer,
 * DDP and ZeRO-1 built on those hold state for the adapters alone. it_model_params stays the
 * base parameters (what a model checkpoint saves). */
typedef struct it_lora_config {
    int rank;            /* r >= 1 */
    float alpha;         /* scaling = alpha / r */
    const char *targets; /* comma list of module-name suffixes ("c_attn,attn.c_proj"); blanks trimmed */
    uint64_t seed;       /* A's Kaiming-uniform draws; B starts at zero */
} it_lora_config;

/* One adapter tensor: "transformer.h.0.attn.c_attn.lora_A" (r, in) or ".lora_B" (out, r). */
typedef struct it_lora_tensor_info {
    const char *name;
    const it_model_param_info *base; /* the linear weight it adapts */
    bool is_b;
    int64_t shape[2];
    int64_t offset; /* first element in it_model_trainable / it_model_grads */
    int64_t numel;
    it_tensor *param, *grad; /* views, owned by the model */
    /* Under tensor parallelism: A of a column-parallel layer and B of a row-parallel one are
     * whole on every rank (IT_PARAM_SPLIT_NONE, their gradients summed over TP); B of a
     * column-parallel layer is cut by rows as its weight is (COLUMN), A of a row-parallel one
     * by columns (ROW). shape/offset are this rank's; full_shape/full_offset the whole
     * tensor's in the one-rank adapter buffer (what the adapter file holds). */
    it_param_split split;
    int64_t full_shape[2];
    int64_t full_offset;
} it_lora_tensor_info;

/* Apply LoRA once (a second call, a target list matching no linear layer, a Mixtral expert or
 * router, or rank < 1 is refused with a message naming it). */
IT_API it_status it_model_lora_apply(it_model *m, const it_lora_config *cfg);
IT_API bool it_model_has_lora(const it_model *m);
IT_API float it_model_lora_scaling(const it_model *m); /* alpha / r; 0 without LoRA */
/* The flat trainable parameters: it_model_params without LoRA, the adapters with it. */
IT_API it_tensor *it_model_trainable(it_model *m);
IT_API int64_t it_model_lora_numel(const it_model *m);
/* Adapter tensors in flat order (A then B per adapted layer, layers in layout order). */
IT_API int it_model_lora_count(const it_model *m);
IT_API const it_lora_tensor_info *it_model_lora_at(const it_model *m, int i);
IT_API const it_lora_tensor_info *it_model_lora_find(const it_model *m, const char *name);
/* PEFT's print_trainable_parameters count: the adapters, and every parameter of the model
 * (llm.c's padded vocabulary rows of wte excluded: PyTorch's GPT-2 has none). */
IT_API void it_model_lora_counts(const it_model *m, int64_t *trainable, int64_t *total);
/* InfiniTrain's adapter file (SaveLoRAWeights): uint32 magic 0x4C4F5241 "LORA", uint32 version 1,
 * uint32 count, then per tensor in name order: uint32 name length, the name, uint32 ndim, ndim
 * int64 dims, fp32 data; little-endian. Written atomically. */
IT_API it_status it_model_lora_save(const it_model *m, const char *path);
/* Read such a file into the adapters. Every tensor must be an adapter of this model with its
 * shape, and every adapter must be in it; otherwise IT_ERR_FORMAT naming the tensor, and the
 * adapters are left unchanged. */
IT_API it_status it_model_lora_load(it_model *m, const char *path);
/* The model's checkpoint with W + (alpha/r) B A in place of each adapted weight (InfiniTrain's
 * MergeWeights); the model itself is left bitwise unchanged. */
IT_API it_status it_model_lora_save_merged(it_model *m, const char *path);

/* ---- GPT-2 (llm.c checkpoint, magic 20240326 version 3) */
typedef struct it_gpt2_config {
    int block_size, vocab_size, padded_vocab_size, n_layer, n_head, n_embd;
} it_gpt2_config;
/* "d12" (124M), "d24" (350M), "d36" (774M), "d48" (1558M): GPT-2's shapes, vocab 50257
 * padded to 50304, block 1024. */
IT_API it_status it_gpt2_preset(const char *name, it_gpt2_config *cfg);
IT_API it_status it_gpt2_config_check(const it_gpt2_config *cfg);
/* From scratch: weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0,
 * layernorms 1/0 (as GPT-2 and llm.c). */
IT_API it_status it_gpt2_new(const it_gpt2_config *cfg, it_device dev, uint64_t seed, it_model **out);
IT_API it_status it_gpt2_load(const char *path, it_device dev, it_model **out);
/* The same under tensor parallelism (par may be NULL): the initialization draws the whole
 * model's values, as one rank would, and keeps this rank's slices; a load reads only this
 * rank's slices of the file. Refused with a message naming the numbers when the TP size does
 * not divide n_head or the padded vocabulary. */
IT_API it_status it_gpt2_new_tp(const it_gpt2_config *cfg, it_device dev, uint64_t seed, const it_model_parallel *par,
                                it_model **out);
IT_API it_status it_gpt2_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out);

/* ---- LLaMA-3 (llm.c checkpoint, magic 20240803 version 3) */
IT_API it_status it_llama3_load(const char *path, it_device dev, it_model **out);
/* Under tensor parallelism (par may be NULL): the TP size must divide n_head, n_kv_head, the
 * FFN width and the vocabulary (InfiniTrain's checks; kv heads are not replicated). */
IT_API it_status it_llama3_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out);
/* InfiniTrain's FFN width: h = 4C; h = 2h/3; h = llround(h * multiplier) in fp32; then up
 * to a multiple of multiple_of. */
IT_API int64_t it_llama3_ffn_hidden(int n_embd, float ffn_dim_multiplier, int multiple_of);

/* ---- Qwen3 (InfiniTrain-Test's llm.c-style file, magic 20240804 version 4): LLaMA-3's decoder
 * with a per-head RMSNorm on q and k before RoPE, RoPE on half-split pairs (Hugging Face's
 * rotate_half), an explicit intermediate_size, rope_theta from the header. The file has no
 * head_dim slot (head_dim = n_embd / n_head) and always holds lm_head; this project marks a
 * tied model in header[16] (docs/formats.md). TP as LLaMA-3's, q_norm/k_norm replicated. */
IT_API it_status it_qwen3_load(const char *path, it_device dev, it_model **out);
IT_API it_status it_qwen3_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out);

/* ---- Mixtral (InfiniTrain tiny-Mixtral checkpoint, magic 20260513 version 2) */
IT_API it_status it_mixtral_load(const char *path, it_device dev, it_model **out);
/* Under tensor parallelism (par->tp with more than one rank), with or without sequence
 * parallelism: attention cut as LLaMA-3's, each expert's gate and up by columns and down by
 * rows, the router whole on every rank, the vocabulary cut. Under pipeline parallelism a stage
 * holds its layers; a non-last stage's auxiliary loss is it_model_take_stage_aux's. */
IT_API it_status it_mixtral_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out);
/* Weight of the load-balancing loss added by it_model_loss (0 = off; mean over layers); no
 * effect on a model without experts. */
IT_API void it_model_set_aux_loss_coeff(it_model *m, float coeff);
/* Tokens routed to each expert (n_layer x n_expert, row-major) since the last reset;
 * returns the number of entries (0 for models without experts). */
IT_API int it_model_expert_tokens(it_model *m, int64_t *counts, int max, bool reset);

#ifdef __cplusplus
}
#endif
#endif
