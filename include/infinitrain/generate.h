/* Text generation: a model continues token sequences, one token at a time, over a KV cache
 * (models.h, it_kv_cache) so that each new token costs one position's forward, not the
 * whole sequence's. Tokenizer-agnostic: ids in, ids out; apps/it-generate.c puts text on
 * both sides. */
#ifndef INFINITRAIN_GENERATE_H
#define INFINITRAIN_GENERATE_H

#include "models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the next token is chosen from a row of logits over the valid vocabulary, in
 * Hugging Face's order: temperature, then top-k, then top-p.
 *   temperature <= 0: greedy, the argmax (the lowest id among equal maxima); top_k, top_p
 *     and the seed do not matter.
 *   else p = softmax(logits / temperature) restricted to
 *     top_k > 0: the k most probable ids (ties: lower id first),
 *     0 < top_p < 1: then the fewest most probable ids whose probabilities sum to >= top_p
 *       (at least one),
 *   renormalized, and one id drawn with the generator seeded by `seed` (the same seed and
 *   logits give the same tokens on every machine: the draw is a 53-bit uniform of SplitMix64). */
typedef struct it_sampling {
    float temperature;
    int top_k;   /* 0: off */
    float top_p; /* 1 (or <= 0): off */
    uint64_t seed;
} it_sampling;

/* The sampler's state: the generator and the work space of one vocabulary row. */
typedef struct it_sampler it_sampler;
IT_API it_status it_sampler_new(const it_sampling *s, int64_t vocab, it_sampler **out);
IT_API void it_sampler_free(it_sampler *s);
/* The next id from logits[0 .. vocab) (fp32 on the host). A NaN logit is an error
 * (IT_ERR_INVALID_ARG naming its id): no token is drawn from a broken model. */
IT_API it_status it_sampler_pick(it_sampler *s, const float *logits, int64_t *id);

/* Called for each new token of each row still going, in row order, as the token is chosen
 * (streaming); step counts the row's new tokens from 0. Return true to end that row there
 * (an end-of-text id, a stop string): the token is kept in the output. */
typedef bool (*it_generate_token_fn)(void *ctx, int64_t row, int64_t step, uint32_t token);

typedef struct it_generate_options {
    int64_t max_new_tokens; /* per row; the model's block_size stops it earlier */
    it_sampling sampling;
    it_generate_token_fn on_token; /* may be NULL */
    void *ctx;
    /* Optional, max_new_tokens entries: seconds of each decoding step (step 0: the prompt's
     * forward, which also yields the first token). */
    double *step_seconds;
} it_generate_options;

typedef struct it_generate_result {
    int64_t steps;         /* forward passes after the prompt's (tokens per row at most, minus 1) */
    int64_t new_tokens;    /* new tokens over every row */
    double prompt_seconds; /* the prompt's forward (prefill), first token included */
    double decode_seconds; /* every later step */
    bool hit_block_size;   /* stopped by the model's context, not by max_new_tokens or the rows */
} it_generate_result;

/* Continue B prompts of T tokens each (prompts row-major, B x T, ids < vocab_size): out
 * (B x max_new_tokens) gets each row's new tokens, n_out[b] how many (a row ends at
 * max_new_tokens, when on_token says so, or at block_size). Grad mode is off inside; the
 * model must be on one rank (it_kv_cache_new). */
IT_API it_status it_generate(it_model *m, const uint32_t *prompts, int64_t B, int64_t T, const it_generate_options *o,
                             uint32_t *out, int64_t *n_out, it_generate_result *res);

#ifdef __cplusplus
}
#endif
#endif
