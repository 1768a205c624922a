/* Text generation over a KV cache (include/infinitrain/generate.h).
 *
 *   prefill: logits = forward_cached(prompts (B, T))[:, T-1]     one pass over the prompt
 *   decode:  token = pick(logits); logits = forward_cached(token (B, 1))   per new token
 *
 * The cache (src/models/kv_cache.c) makes each decode step one position's products plus
 * attention over the positions so far. Rows that have ended keep feeding their last token
 * (the batch stays rectangular); their outputs are not read. The sampler works on the host
 * on one row of fp32 logits at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infinitrain/generate.h"

struct it_sampler {
    it_sampling s;
    int64_t vocab;
    uint64_t state; /* SplitMix64 */
    float *p;       /* vocab: probabilities */
    int32_t *order; /* vocab: ids by descending probability */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 bits. */
static double uniform(it_sampler *s) { return (double)(splitmix64(&s->state) >> 11) * 0x1.0p-53; }

it_status it_sampler_new(const it_sampling *s, int64_t vocab, it_sampler **out) {
    *out = NULL;
    if (vocab < 1) return it_error(IT_ERR_INVALID_ARG, "sampler: vocabulary of %lld ids", (long long)vocab);
    if (!(s->temperature == s->temperature) || s->top_k < 0 || !(s->top_p == s->top_p))
        return it_error(IT_ERR_INVALID_ARG, "sampler: temperature %g, top_k %d, top_p %g: expected numbers, top_k >= 0",
                        (double)s->temperature, s->top_k, (double)s->top_p);
    it_sampler *r = calloc(1, sizeof *r);
    if (r) r->p = malloc((size_t)vocab * sizeof *r->p), r->order = malloc((size_t)vocab * sizeof *r->order);
    if (!r || !r->p || !r->order) {
        it_sampler_free(r);
        return it_error(IT_ERR_OOM, "sampler: out of host memory for %lld ids", (long long)vocab);
    }
    r->s = *s;
    r->vocab = vocab;
    r->state = s->seed;
    *out = r;
    return IT_OK;
}

void it_sampler_free(it_sampler *s) {
    if (!s) return;
    free(s->p);
    free(s->order);
    free(s);
}

/* qsort's context (one sort per thread at a time) */
static _Thread_local const float *tl_sort_p;

/* Descending probability, then ascending id. */
static int by_prob(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float pi = tl_sort_p[i], pj = tl_sort_p[j];
    if (pi != pj) return pi > pj ? -1 : 1;
    return i < j ? -1 : i > j;
}

it_status it_sampler_pick(it_sampler *s, const float *logits, int64_t *id) {
    int64_t V = s->vocab, best = 0;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i])) return it_error(IT_ERR_INVALID_ARG, "sampler: logit of id %lld is NaN", (long long)i);
        if (logits[i] > logits[best]) best = i;
    }
    if (!(s->s.temperature > 0) || isinf(logits[best])) { /* greedy (an infinite logit takes all the mass) */
        *id = best;
        return IT_OK;
    }
    /* softmax(logits / temperature), in double for the sum */
    double inv_t = 1.0 / s->s.temperature, mx = logits[best], sum = 0;
    for (int64_t i = 0; i < V; i++) sum += s->p[i] = (float)exp(((double)logits[i] - mx) * inv_t);
    for (int64_t i = 0; i < V; i++) s->p[i] = (float)(s->p[i] / sum);
    int64_t keep = V;
    bool top_k = s->s.top_k > 0 && s->s.top_k<V, top_p = s->s.top_p> 0 && s->s.top_p < 1;
    if (top_k || top_p) {
        for (int64_t i = 0; i < V; i++) s->order[i] = (int32_t)i;
        tl_sort_p = s->p;
        qsort(s->order, (size_t)V, sizeof *s->order, by_prob);
        if (top_k) keep = s->s.top_k;
        if (top_p) {
            double kept = 0, total = 0;
            for (int64_t i = 0; i < keep; i++) total += s->p[s->order[i]];
            int64_t j = 0; /* the fewest ids whose renormalized mass reaches top_p */
            while (j < keep) {
                kept += s->p[s->order[j++]];
                if (kept >= s->s.top_p * total) break;
            }
            keep = j;
        }
        double mass = 0;
        for (int64_t i = 0; i < keep; i++) mass += s->p[s->order[i]];
        double u = uniform(s) * mass, acc = 0;
        for (int64_t i = 0; i < keep; i++) {
            acc += s->p[s->order[i]];
            if (u < acc) {
                *id = s->order[i];
                return IT_OK;
            }
        }
        *id = s->order[keep - 1]; /* u within rounding of the total */
        return IT_OK;
    }
    double u = uniform(s), acc = 0;
    int64_t last = best;
    for (int64_t i = 0; i < V; i++) {
        if (s->p[i] <= 0) continue;
        acc += s->p[i];
        last = i;
        if (u < acc) {
            *id = i;
            return IT_OK;
        }
    }
    *id = last;
    return IT_OK;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last position's logits of each row (B, 1, Vp) -> host fp32 (B x Vp); inside a scope. */
static it_status logits_to_host(it_tensor *logits, float *host, int64_t B, int64_t Vp) {
    it_tensor *l = it_tensor_dtype(logits) == IT_DTYPE_FP32 ? logits : it_tensor_to_dtype(logits, IT_DTYPE_FP32);
    return l ? it_tensor_copy_to_host(l, host, (size_t)(B * Vp) * sizeof(float)) : it_last_status();
}

it_status it_generate(it_model *m, const uint32_t *prompts, int64_t B, int64_t T, const it_generate_options *o,
                      uint32_t *out, int64_t *n_out, it_generate_result *res) {
    memset(res, 0, sizeof *res);
    const it_model_info *in = it_model_get_info(m);
    if (B < 1 || T < 1)
        return it_error(IT_ERR_INVALID_ARG, "generate: %lld prompts of %lld tokens", (long long)B, (long long)T);
    if (T > in->block_size)
        return it_error(IT_ERR_INVALID_ARG, "generate: a prompt of %lld tokens exceeds the model's block_size %lld",
                        (long long)T, (long long)in->block_size);
    for (int64_t i = 0; i < B * T; i++)
        if (prompts[i] >= in->vocab_size)
            return it_error(IT_ERR_INVALID_ARG,
                            "generate: prompt %lld, token %lld: id %u outside the vocabulary (%lld)",
                            (long long)(i / T), (long long)(i % T), prompts[i], (long long)in->vocab_size);
    for (int64_t b = 0; b < B; b++) n_out[b] = 0;
    int64_t want = o->max_new_tokens;
    if (want < 1) return IT_OK;
    /* positions: the prompt, then each new token but the last is fed back */
    int64_t len = T + want - 1 > in->block_size ? in->block_size : T + want - 1;
    int64_t steps_max = len - T + 1;
    it_kv_cache *cache = NULL;
    it_sampler *smp = NULL;
    int64_t Vp = in->padded_vocab;
    float *host = malloc((size_t)(B * Vp) * sizeof(float));
    int32_t *next = malloc((size_t)(B * T) * sizeof(int32_t));
    bool *done = calloc((size_t)B, sizeof *done);
    it_status st = host && next && done ? IT_OK : it_error(IT_ERR_OOM, "generate: out of host memory");
    if (!st) st = it_kv_cache_new(m, B, len, &cache);
    if (!st) st = it_sampler_new(&o->sampling, in->vocab_size, &smp);
    it_device dev = it_model_device(m);
    int64_t live = B;
    for (int64_t step = 0; !st && step < steps_max && live > 0; step++) {
        double t0 = now();
        it_scope_begin();
        int64_t n = step == 0 ? T : 1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < n; t++)
                next[b * n + t] =
                    (int32_t)(step == 0 ? prompts[b * T + t] : out[b * want + (n_out[b] ? n_out[b] - 1 : 0)]);
        it_tensor *idx = it_tensor_from_host(dev, IT_DTYPE_I32, 2, (int64_t[]){B, n}, next, (size_t)(B * n) * 4);
        it_tensor *logits = idx ? it_model_forward_cached(m, cache, idx, true) : NULL;
        st = logits ? logits_to_host(logits, host, B, Vp) : it_last_status();
        it_scope_end();
        for (int64_t b = 0; b < B && !st; b++) {
            if (done[b]) continue;
            int64_t id;
            if ((st = it_sampler_pick(smp, host + b * Vp, &id))) break;
            out[b * want + n_out[b]++] = (uint32_t)id;
            res->new_tokens++;
            bool stop = o->on_token && o->on_token(o->ctx, b, n_out[b] - 1, (uint32_t)id);
            if (stop || n_out[b] == want) done[b] = true, live--;
        }
        double dt = now() - t0;
        if (o->step_seconds) o->step_seconds[step] = dt;
        if (step == 0)
            res->prompt_seconds = dt;
        else
            res->decode_seconds += dt, res->steps++;
    }
    res->hit_block_size = !st && live > 0 && steps_max < want;
    it_sampler_free(smp);
    it_kv_cache_free(cache);
    free(host);
    free(next);
    free(done);
    return st;
}
