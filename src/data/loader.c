/* InfiniTrain's data loader over one token shard.
 *
 * sample i: x = t[i*T, i*T+T), y = t[i*T+1, i*T+T+1); num_samples = floor(n/T) - 1 (so the last
 * y never runs past the shard); batch b = samples b*B .. b*B+B-1, i.e. x of batch b is the
 * contiguous run t[b*B*T, b*B*T + B*T) and y the same run shifted by one token;
 * num_batches = floor(num_samples/B). No shuffle. Rank r of `world` reads global batch
 * g = step*world + r at its step-th call, batch index g mod num_batches. */
#include <stdlib.h>

#include "infinitrain/data.h"

struct it_loader {
    it_shard *shard;
    int64_t B, T;
    int rank, world;
    int64_t num_batches;
    int64_t step; /* calls of it_loader_next since new/reset */
};

it_status it_loader_new(const char *path, int64_t B, int64_t T, int rank, int world, it_loader **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_loader_new: out is NULL");
    *out = NULL;
    if (B < 1 || T < 1)
        return it_error(IT_ERR_INVALID_ARG,
                        "data loader %s: batch size B and sequence length T: expected >= 1, found B=%lld T=%lld",
                        path ? path : "(null)", (long long)B, (long long)T);
    if (B > INT32_MAX / T)
        return it_error(IT_ERR_INVALID_ARG, "data loader %s: B*T: expected <= %d, found %lld*%lld",
                        path ? path : "(null)", INT32_MAX, (long long)B, (long long)T);
    if (world < 1 || rank < 0 || rank >= world)
        return it_error(IT_ERR_INVALID_ARG,
                        "data loader %s: rank/world: expected 0 <= rank < world, found rank %d world %d",
                        path ? path : "(null)", rank, world);
    it_shard *s;
    it_status st = it_shard_open(path, &s);
    if (st) return st;
    int64_t n = it_shard_num_tokens(s);
    int64_t num_samples = n / T - 1;
    int64_t num_batches = num_samples >= B ? num_samples / B : 0;
    if (num_batches < 1) {
        it_shard_free(s);
        return it_error(IT_ERR_FORMAT,
                        "data loader %s: number of tokens: expected at least (B+1)*T = %lld for one batch of B=%lld "
                        "sequences of T=%lld, found %lld",
                        path, (long long)((B + 1) * T), (long long)B, (long long)T, (long long)n);
    }
    it_loader *l = calloc(1, sizeof *l);
    if (!l) {
        it_shard_free(s);
        return it_error(IT_ERR_OOM, "data loader %s: out of memory", path);
    }
    l->shard = s;
    l->B = B;
    l->T = T;
    l->rank = rank;
    l->world = world;
    l->num_batches = num_batches;
    *out = l;
    return IT_OK;
}

void it_loader_free(it_loader *l) {
    if (!l) return;
    it_shard_free(l->shard);
    free(l);
}

int64_t it_loader_num_batches(const it_loader *l) { return l ? l->num_batches : 0; }
int64_t it_loader_num_tokens(const it_loader *l) { return l ? it_shard_num_tokens(l->shard) : 0; }
int64_t it_loader_step(const it_loader *l) { return l ? l->step : 0; }
void it_loader_reset(it_loader *l) {
    if (l) l->step = 0;
}
void it_loader_set_step(it_loader *l, int64_t step) {
    if (l) l->step = step < 0 ? 0 : step;
}

it_status it_loader_check_vocab(const it_loader *l, int64_t vocab_size) {
    if (!l) return it_error(IT_ERR_INVALID_ARG, "it_loader_check_vocab: loader is NULL");
    const uint32_t *t = it_shard_tokens(l->shard);
    int64_t n = it_shard_num_tokens(l->shard);
    if ((int64_t)it_shard_max_token(l->shard) < vocab_size) return IT_OK;
    for (int64_t i = 0; i < n; i++)
        if ((int64_t)t[i] >= vocab_size)
            return it_error(IT_ERR_FORMAT,
                            "token shard %s: token at position %lld: expected an id < vocab size %lld, found %u",
                            it_shard_path(l->shard), (long long)i, (long long)vocab_size, t[i]);
    return IT_OK;
}

it_status it_loader_next(it_loader *l, int32_t *x, int32_t *y) {
    if (!l || !x || !y) return it_error(IT_ERR_INVALID_ARG, "it_loader_next: NULL argument");
    /* g mod num_batches without overflowing step*world for very long runs. */
    int64_t g = ((l->step % l->num_batches) * (l->world % l->num_batches) + l->rank) % l->num_batches;
    int64_t bt = l->B * l->T;
    const uint32_t *t = it_shard_tokens(l->shard) + g * bt;
    for (int64_t i = 0; i < bt; i++) {
        x[i] = (int32_t)t[i];
        y[i] = (int32_t)t[i + 1];
    }
    l->step++;
    return IT_OK;
}
