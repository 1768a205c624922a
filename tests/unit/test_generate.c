/* Generation over a KV cache (include/infinitrain/generate.h, src/models/kv_cache.c) against
 * the training forward, on the PyTorch-checked fixtures of GPT-2, LLaMA-3, Mixtral and Qwen3
 * (its Hugging Face one: heads 16 wide on a 32-wide model, k cached in its RoPE order):
 *   - the logits of a cached forward (a prompt, then one token at a time, two rows) equal
 *     it_model_forward's on the whole sequence at every position, with flash attention
 *     (q_offset = the cache's length), with the fused attention kernels, and composed;
 *     tolerance 2e-5 of the largest |logit|: the same products in fp32, summed in another
 *     order where a product's row count changes its blocking (the attention's keys are the
 *     same values);
 *   - greedy decoding equals the argmax of the training forward at every position of the
 *     generated sequence (positions whose top two logits are within that tolerance would be
 *     a tie in either order: counted, and none occur here);
 *   - the sampler: greedy = argmax, top_k 1 = argmax, the seed decides the draws, frequencies
 *     within 5 sigma of softmax(logits / temperature), top-k and top-p keep the right ids;
 *   - errors: a full cache, an id outside the vocabulary, NaN logits, a TP model's cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/generate.h"
#include "infinitrain/hf.h"
#include "it_test.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/"

typedef it_status (*load_fn)(const char *, it_device, it_model **);

/* The training forward's logits (1 x N x Vp) of ids[0..N) on host. */
static float *full_logits(it_model *m, const uint32_t *ids, int64_t B, int64_t N) {
    const it_model_info *in = it_model_get_info(m);
    float *out = malloc((size_t)(B * N * in->padded_vocab) * sizeof(float));
    int32_t *x = malloc((size_t)(B * N) * sizeof(int32_t));
    for (int64_t i = 0; i < B * N; i++) x[i] = (int32_t)ids[i];
    it_grad_set_enabled(false);
    it_scope_begin();
    it_tensor *idx =
        it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, (int64_t[]){B, N}, x, (size_t)(B * N) * 4);
    it_tensor *lg = it_model_forward(m, idx);
    CHECK(lg != NULL);
    if (lg) CHECK_OK(it_tensor_copy_to_host(lg, out, (size_t)(B * N * in->padded_vocab) * sizeof(float)));
    it_scope_end();
    it_grad_set_enabled(true);
    free(x);
    return out;
}

/* The cached forward over ids (B x N, row-major): the first P positions at once, then one at
 * a time; every position's logits compared with the whole sequence's. */
static void check_cached(const char *what, it_model *m, const uint32_t *ids, int64_t B, int64_t N, int64_t P) {
    const it_model_info *in = it_model_get_info(m);
    int64_t Vp = in->padded_vocab;
    float *ref = full_logits(m, ids, B, N), *got = malloc((size_t)(B * N * Vp) * sizeof(float));
    it_kv_cache *c = NULL;
    CHECK_OK(it_kv_cache_new(m, B, N, &c));
    if (!c) return;
    int32_t *x = malloc((size_t)(B * N) * sizeof(int32_t));
    for (int64_t t0 = 0; t0 < N;) {
        int64_t n = t0 == 0 ? P : 1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < n; t++) x[b * n + t] = (int32_t)ids[b * N + t0 + t];
        it_scope_begin();
        it_tensor *idx =
            it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, (int64_t[]){B, n}, x, (size_t)(B * n) * 4);
        it_tensor *lg = it_model_forward_cached(m, c, idx, false);
        CHECK(lg != NULL);
        float *h = malloc((size_t)(B * n * Vp) * sizeof(float));
        if (lg) CHECK_OK(it_tensor_copy_to_host(lg, h, (size_t)(B * n * Vp) * sizeof(float)));
        for (int64_t b = 0; b < B; b++)
            memcpy(got + (b * N + t0) * Vp, h + b * n * Vp, (size_t)(n * Vp) * sizeof(float));
        free(h);
        it_scope_end();
        t0 += n;
        CHECK(it_kv_cache_len(c) == t0);
    }
    double amax = 0, err = 0;
    for (int64_t i = 0; i < B * N * Vp; i++) {
        amax = fmax(amax, fabs(ref[i]));
        err = fmax(err, fabs((double)ref[i] - got[i]));
    }
    CHECK_MSG(err <= 2e-5 * amax, "%s: cached logits differ from the training forward's by %g (max |logit| %g)", what,
              err, amax);
    /* the cache is full: one more position is refused */
    it_scope_begin();
    it_tensor *one = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, (int64_t[]){B, 1}, x, (size_t)B * 4);
    CHECK(it_model_forward_cached(m, c, one, true) == NULL);
    CHECK(strstr(it_last_error(), "exceed the cache's") != NULL);
    it_scope_end();
    it_kv_cache_free(c);
    free(x);
    free(ref);
    free(got);
}

static uint64_t lcg(uint64_t *s) { return (*s = *s * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; }

/* Greedy generation from a prompt against the argmax of the training forward on the result. */
static void check_greedy(const char *what, it_model *m, int64_t B, int64_t T, int64_t new_tokens) {
    const it_model_info *in = it_model_get_info(m);
    uint64_t s = 7;
    uint32_t *prompt = malloc((size_t)(B * T) * sizeof(uint32_t)), *out = calloc((size_t)(B * new_tokens), 4);
    int64_t *n_out = calloc((size_t)B, sizeof *n_out);
    for (int64_t i = 0; i < B * T; i++) prompt[i] = (uint32_t)(lcg(&s) % (uint64_t)in->vocab_size);
    it_generate_options o = {.max_new_tokens = new_tokens, .sampling = {.temperature = 0}};
    it_generate_result r;
    CHECK_OK(it_generate(m, prompt, B, T, &o, out, n_out, &r));
    int64_t N = T + new_tokens;
    uint32_t *seq = malloc((size_t)(B * N) * sizeof(uint32_t));
    for (int64_t b = 0; b < B; b++) {
        CHECK(n_out[b] == new_tokens);
        memcpy(seq + b * N, prompt + b * T, (size_t)T * 4);
        memcpy(seq + b * N + T, out + b * new_tokens, (size_t)new_tokens * 4);
    }
    float *ref = full_logits(m, seq, B, N);
    int64_t Vp = in->padded_vocab, mismatches = 0, ties = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < new_tokens; i++) {
            const float *row = ref + (b * N + T - 1 + i) * Vp;
            int64_t best = 0, second = -1;
            for (int64_t v = 1; v < in->vocab_size; v++)
                if (row[v] > row[best])
                    second = best, best = v;
                else if (second < 0 || row[v] > row[second])
                    second = v;
            if (row[best] - row[second] <= 2e-5 * fabs(row[best])) {
                ties++;
                continue;
            }
            mismatches += best != (int64_t)seq[b * N + T + i];
        }
    CHECK_MSG(mismatches == 0, "%s: %lld of %lld greedy tokens differ from the training forward's argmax", what,
              (long long)mismatches, (long long)(B * new_tokens));
    CHECK_MSG(ties == 0, "%s: %lld near-ties", what, (long long)ties);
    CHECK(r.new_tokens == B * new_tokens && r.steps == new_tokens - 1 && !r.hit_block_size);
    free(prompt);
    free(out);
    free(n_out);
    free(seq);
    free(ref);
}

static it_status load_hf(const char *dir, it_device dev, it_model **out) { return it_hf_load(dir, dev, NULL, out); }

static void check_model(const char *what, load_fn load, const char *path) {
    it_model *m = NULL;
    CHECK_OK(load(path, it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int64_t N = in->block_size < 24 ? in->block_size : 24, B = 2;
    uint64_t s = 11;
    uint32_t *ids = malloc((size_t)(B * N) * sizeof(uint32_t));
    for (int64_t i = 0; i < B * N; i++) ids[i] = (uint32_t)(lcg(&s) % (uint64_t)in->vocab_size);
    char name[128];
    /* flash attention (the default), the fused kernels, and the composition */
    snprintf(name, sizeof name, "%s flash", what);
    check_cached(name, m, ids, B, N, 5);
    it_flash_attention_set(false);
    snprintf(name, sizeof name, "%s fused", what);
    check_cached(name, m, ids, B, N, 5);
    setenv("IT_FUSED_KERNELS", "0", 1);
    snprintf(name, sizeof name, "%s composed", what);
    check_cached(name, m, ids, B, N, 1);
    unsetenv("IT_FUSED_KERNELS");
    it_flash_attention_set(true);
    check_greedy(what, m, B, 4, N - 4);
    /* a prompt id outside the vocabulary; a prompt longer than the context */
    uint32_t bad[2] = {1, (uint32_t)in->vocab_size};
    uint32_t out[4];
    int64_t n_out[1];
    it_generate_result r;
    it_generate_options o = {.max_new_tokens = 4};
    CHECK_ERR(it_generate(m, bad, 1, 2, &o, out, n_out, &r), IT_ERR_INVALID_ARG, "outside the vocabulary");
    /* the context ends generation: block_size - 2 prompt tokens leave room for 2 new ones */
    int64_t T = in->block_size - 2;
    uint32_t *p = calloc((size_t)T, 4);
    CHECK_OK(it_generate(m, p, 1, T, &o, out, n_out, &r));
    CHECK(n_out[0] == 3 && r.hit_block_size); /* the last new token needs no position of its own */
    free(p);
    free(ids);
    it_model_free(m);
}

static void check_sampler(void) {
    enum { V = 6 };
    const float logits[V] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
    it_sampler *s;
    int64_t id;
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 0}, V, &s));
    CHECK_OK(it_sampler_pick(s, logits, &id));
    CHECK(id == 1); /* the first of equal maxima */
    it_sampler_free(s);
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 1, .top_k = 1, .seed = 3}, V, &s));
    for (int i = 0; i < 50; i++) {
        CHECK_OK(it_sampler_pick(s, logits, &id));
        CHECK(id == 1);
    }
    it_sampler_free(s);
    /* frequencies at temperature 0.7 against softmax(logits / 0.7) */
    double p[V], z = 0;
    for (int i = 0; i < V; i++) z += p[i] = exp(logits[i] / 0.7);
    enum { DRAWS = 200000 };
    int64_t count[V] = {0};
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 0.7f, .seed = 42}, V, &s));
    for (int i = 0; i < DRAWS; i++) {
        CHECK_OK(it_sampler_pick(s, logits, &id));
        count[id]++;
    }
    it_sampler_free(s);
    for (int i = 0; i < V; i++) {
        double q = p[i] / z, sd = sqrt(DRAWS * q * (1 - q));
        CHECK_MSG(fabs(count[i] - DRAWS * q) <= 5 * sd + 1, "id %d: %lld draws, expected %.0f +- %.0f", i,
                  (long long)count[i], DRAWS * q, sd);
    }
    /* top_k 3 keeps ids 1, 3, 2 (renormalized); top_p 0.5 of softmax(logits): ids 1 and 3 hold
     * 2 * e^3 / z ~ 0.73 together, id 1 alone ~0.36 < 0.5: {1, 3} */
    int64_t seen_k[V] = {0}, seen_p[V] = {0};
    it_sampler *sk, *sp;
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 1, .top_k = 3, .seed = 1}, V, &sk));
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 1, .top_p = 0.5f, .seed = 1}, V, &sp));
    for (int i = 0; i < 20000; i++) {
        CHECK_OK(it_sampler_pick(sk, logits, &id));
        seen_k[id]++;
        CHECK_OK(it_sampler_pick(sp, logits, &id));
        seen_p[id]++;
    }
    CHECK(seen_k[0] == 0 && seen_k[4] == 0 && seen_k[5] == 0 && seen_k[1] > 0 && seen_k[2] > 0 && seen_k[3] > 0);
    CHECK(seen_p[1] > 0 && seen_p[3] > 0 && seen_p[1] + seen_p[3] == 20000);
    /* top-k 3 renormalized: id 2 has e^2 / (2 e^3 + e^2) ~ 0.155 */
    double q2 = exp(2.0) / (2 * exp(3.0) + exp(2.0));
    CHECK_NEAR(seen_k[2] / 20000.0, q2, 5 * sqrt(q2 * (1 - q2) / 20000));
    it_sampler_free(sk);
    it_sampler_free(sp);
    /* the seed decides: the same seed the same draws, another seed others */
    int64_t a[64], b[64], c[64];
    for (int run = 0; run < 3; run++) {
        CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 1.5f, .seed = run == 2 ? 9 : 8}, V, &s));
        for (int i = 0; i < 64; i++) CHECK_OK(it_sampler_pick(s, logits, run == 0 ? &a[i] : run == 1 ? &b[i] : &c[i]));
        it_sampler_free(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) != 0);
    /* NaN logits are refused */
    float nan_logits[V] = {0, 0, NAN, 0, 0, 0};
    CHECK_OK(it_sampler_new(&(it_sampling){.temperature = 1}, V, &s));
    CHECK_ERR(it_sampler_pick(s, nan_logits, &id), IT_ERR_INVALID_ARG, "id 2 is NaN");
    it_sampler_free(s);
}

int main(void) {
    check_sampler();
    check_model("gpt2", it_gpt2_load, FIX "gpt2/tiny_gpt2.bin");
    check_model("llama3", it_llama3_load, FIX "llama3/tiny_llama3.bin");
    check_model("mixtral", it_mixtral_load, FIX "mixtral/tiny_mixtral.bin");
    check_model("qwen3", load_hf, FIX "qwen3/qwen3");
    return it_test_report("test_generate");
}
