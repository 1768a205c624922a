/* Models: a generic handle the training driver works with, and GPT-2.
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

typedef struct it_model_info {
    const char *family;      /* "gpt2" */
    int64_t block_size;      /* max sequence length */
    int64_t vocab_size;      /* valid vocabulary (loss and sampling use these ids) */
    int64_t padded_vocab;    /* logits' width */
    int64_t num_params;
    int n_layer, n_head, n_embd;
    int n_kv_head;   /* LLaMA-3 / Mixtral (0 for GPT-2) */
    int ffn_hidden;  /* MLP width (LLaMA-3), expert width (Mixtral) */
    int n_expert, router_topk; /* Mixtral */
} it_model_info;

IT_API void it_model_free(it_model *m);
IT_API const it_model_info *it_model_get_info(const it_model *m);
IT_API it_device it_model_device(const it_model *m);
IT_API it_tensor *it_model_params(it_model *m); /* flat (num_params) */
IT_API it_tensor *it_model_grads(it_model *m);  /* flat (num_params) */
/* Zero the gradients lazily: nothing is written now; the next backward writes each gradient
 * instead of adding to it (its GEMMs run with beta 0), and it_model_grads_final fills the
 * ones no node wrote. Same values as filling it_model_grads with zeros, without a pass over
 * all the gradient memory and without reading it back in the first GEMMs. */
IT_API it_status it_model_zero_grad(it_model *m);
/* After backward: the gradients still lazily zero are filled; it_model_grads is whole again
 * (call it before reading the flat gradient: optimizer, all-reduce, norm). */
IT_API it_status it_model_grads_final(it_model *m);
/* idx (B, T) int32 -> logits (B, T, padded_vocab). */
IT_API it_tensor *it_model_forward(it_model *m, it_tensor *idx);
/* Mean cross entropy of the forward pass over the valid vocabulary (0-D). */
IT_API it_tensor *it_model_loss(it_model *m, it_tensor *idx, it_tensor *targets);
/* Write the model's checkpoint format (atomically). */
IT_API it_status it_model_save(const it_model *m, const char *path);
/* FLOPs of one training step (forward + backward) per token, for MFU: 6*N + attention. */
IT_API double it_model_flops_per_token(const it_model *m, int64_t T);

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

/* ---- LLaMA-3 (llm.c checkpoint, magic 20240803 version 3) */
IT_API it_status it_llama3_load(const char *path, it_device dev, it_model **out);
/* InfiniTrain's FFN width: h = 4C; h = 2h/3; h = llround(h * multiplier) in fp32; then up
 * to a multiple of multiple_of. */
IT_API int64_t it_llama3_ffn_hidden(int n_embd, float ffn_dim_multiplier, int multiple_of);

/* ---- Mixtral (InfiniTrain tiny-Mixtral checkpoint, magic 20260513 version 2) */
IT_API it_status it_mixtral_load(const char *path, it_device dev, it_model **out);
/* Weight of the load-balancing loss added by it_model_loss (0 = off; mean over layers). */
IT_API void it_model_set_aux_loss_coeff(it_model *m, float coeff);
/* Tokens routed to each expert (n_layer x n_expert, row-major) since the last reset;
 * returns the number of entries (0 for models without experts). */
IT_API int it_model_expert_tokens(it_model *m, int64_t *counts, int max, bool reset);

#ifdef __cplusplus
}
#endif
#endif
