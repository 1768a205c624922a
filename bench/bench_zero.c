/* Memory per rank of DDP, ZeRO-1 and ZeRO-2 (AdamW, fp32), for `make bench`.
 *
 * 1. Computed from the sizes, for GPT-2 124M (d12) at 2 ranks: the bytes a rank holds for
 *    the parameters, the gradients and the optimizer (Adam's m and v, ZeRO's gradient shard)
 *    between steps, and what backward adds on top (the full-size gradient ZeRO-2 releases
 *    after it), with the mirrors of the first ZeRO-1 (two padded full-size copies) for
 *    comparison. P is GPT-2's count, V*C + T*C + L*(12C^2 + 13C) + 2C, checked against the
 *    model built for part 2.
 * 2. Measured (it_mem_stats) on a small GPT-2 under mpirun: the bytes in use between steps
 *    and the peak during a step (activations included), each the largest over the ranks,
 *    beside the formula's figure for that model.
 * Prints figures; asserts nothing.
 *
 *   mpirun -np 2 bench_zero [--steps N]        (default 3; without mpirun: 1 rank) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/autograd.h"
#include "infinitrain/dist.h"
#include "infinitrain/models.h"
#include "infinitrain/optim.h"

static int64_t gpt2_params(const it_gpt2_config *c) {
    int64_t C = c->n_embd;
    return (int64_t)c->padded_vocab_size * C + (int64_t)c->block_size * C +
           (int64_t)c->n_layer * (12 * C * C + 13 * C) + 2 * C;
}

/* Bytes per rank (fp32) between steps, and what backward adds, for stage 0 (DDP), 1, 2. */
typedef struct zero_bytes {
    double params, grads, optim, between, backward;
} zero_bytes;

static zero_bytes bytes_of(int stage, int64_t P, int64_t N) {
    double p = 4.0 * (double)P, S = 4.0 * (double)((P + N - 1) / N);
    zero_bytes b = {p, p, 2 * p, 0, 0};
    if (stage == 1) b.optim = 2 * S + S;                          /* m, v and the reduced gradient's row */
    if (stage == 1 && P % N) b.optim += S;                        /* the short row's parameter copy */
    if (stage == 2) b.grads = 0, b.optim = 3 * S, b.backward = p; /* released after backward */
    b.between = b.params + b.grads + b.optim;
    return b;
}

static const char *stage_name(int stage) { return stage == 0 ? "DDP   " : stage == 1 ? "ZeRO-1" : "ZeRO-2"; }

/* One configuration's steps; *between: bytes in use after the last step, *peak: the largest
 * peak during a step. */
static it_status measure(it_dist *d, int stage, const it_gpt2_config *gc, int steps, size_t *between, size_t *peak,
                         int64_t *nparams) {
    enum { B = 2, T = 32 };
    it_device dev = it_device_cpu();
    it_model *m = NULL;
    it_optimizer *opt = NULL;
    it_zero *z = NULL;
    it_grad_sync *gs = NULL;
    it_optim_config oc = {IT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.0f};
    it_status st = it_mem_empty_cache(dev);
    if (!st) st = it_gpt2_new(gc, dev, 42, &m);
    if (!st) *nparams = it_model_get_info(m)->num_params;
    if (!st && stage) st = it_zero_new(d, stage, 0, &oc, it_model_params(m), it_model_grads(m), &z);
    if (!st && !stage) st = it_optimizer_new(&oc, it_model_params(m), it_model_grads(m), &opt);
    if (!st && !stage) st = it_grad_sync_new(d, it_model_grads(m), 0, &gs);
    int32_t x[B * T], y[B * T];
    uint64_t s = 0x9E3779B97F4A7C15ull + (uint64_t)it_dist_rank(d);
    *peak = 0;
    for (int i = 0; !st && i < steps; i++) {
        for (int j = 0; j < B * T; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (int32_t)((s >> 33) % (uint64_t)gc->vocab_size);
            y[j] = (int32_t)((s >> 13) % (uint64_t)gc->vocab_size);
        }
        it_mem_stats_reset_peak(dev);
        int64_t shape[2] = {B, T};
        st = it_model_grads_acquire(m);
        if (!st) st = it_model_zero_grad(m);
        if (!st && gs) st = it_grad_sync_begin(gs, NULL);
        if (!st && stage == 2) st = it_zero_begin(z, NULL);
        it_scope_begin();
        it_tensor *l = st ? NULL
                          : it_model_loss(m, it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof x),
                                          it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof y));
        if (!st && !l) st = it_last_status();
        if (!st)
            st = gs           ? it_backward_hooked(l, it_grad_sync_ready, gs)
                 : stage == 2 ? it_backward_hooked(l, it_zero_ready, z)
                              : it_backward(l);
        it_scope_end();
        it_tape_clear();
        if (!st) st = it_model_grads_final(m);
        if (!st && gs) st = it_grad_sync_finish(gs, NULL, NULL);
        if (!st && stage == 1) st = it_zero_reduce_grads(z);
        if (!st && stage == 2 && !(st = it_zero_finish(z, NULL, NULL))) st = it_model_grads_release(m);
        if (!st) st = stage ? it_zero_step(z, 1e-4f, 1.0f) : it_optimizer_step(opt, 1e-4f, 1.0f);
        if (!st) st = it_device_synchronize(dev);
        it_mem_stats ms;
        it_mem_stats_get(dev, &ms);
        if (ms.peak_used > *peak) *peak = ms.peak_used;
        *between = ms.used;
    }
    uint64_t v[2] = {*between, *peak};
    if (!st) st = it_dist_all_reduce_host(d, v, 2, IT_DTYPE_U64, IT_CCL_MAX);
    *between = (size_t)v[0];
    *peak = (size_t)v[1];
    it_grad_sync_free(gs);
    it_zero_free(z);
    it_optimizer_free(opt);
    it_model_free(m);
    return st;
}

int main(int argc, char **argv) {
    int steps = 3;
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    if (steps < 1) steps = 1;
    it_dist *d = NULL;
    it_status st = it_dist_new(it_device_cpu(), &d);
    if (st) {
        fprintf(stderr, "bench_zero: %s\n", it_last_error());
        return 1;
    }
    int rank = it_dist_rank(d), N = it_dist_world(d);
    it_gpt2_config d12;
    st = it_gpt2_preset("d12", &d12);
    if (!st && rank == 0) {
        int64_t P = gpt2_params(&d12);
        printf("== ZeRO memory per rank, computed: GPT-2 124M (d12, P = %lld), 2 ranks, AdamW, fp32 ==\n",
               (long long)P);
        printf("  %-8s %10s %10s %12s %12s %14s\n", "", "params MB", "grads MB", "optimizer MB", "between MB",
               "+ backward MB");
        for (int stage = 0; stage <= 2; stage++) {
            zero_bytes b = bytes_of(stage, P, 2);
            printf("  %-8s %10.1f %10.1f %12.1f %12.1f %14.1f\n", stage_name(stage), b.params / 1e6, b.grads / 1e6,
                   b.optim / 1e6, b.between / 1e6, b.backward / 1e6);
        }
        double S = 4.0 * (double)((P + 1) / 2);
        printf("  (the first ZeRO-1, with two padded full-size mirrors: %.1f MB between steps)\n",
               (2 * 4.0 * (double)P + 2 * 2 * S + 3 * S) / 1e6);
        printf("  optimizer: Adam's m and v (ZeRO: this rank's shard) and ZeRO's reduced-gradient shard; "
               "+ backward: the full-size gradient, which ZeRO-2 holds during backward only\n");
    }
    /* part 2: small enough for a 2-core CI machine, with the weights dominating */
    it_gpt2_config small = {
        .block_size = 64, .vocab_size = 8192, .padded_vocab_size = 8192, .n_layer = 4, .n_head = 4, .n_embd = 256};
    size_t between[3] = {0}, peak[3] = {0};
    int64_t P = 0;
    for (int stage = 0; stage <= 2 && !st; stage++)
        st = measure(d, stage, &small, steps, &between[stage], &peak[stage], &P);
    if (!st && rank == 0) {
        printf("== ZeRO memory per rank, measured (it_mem_stats, largest over %d ranks): GPT-2 L=%d C=%d V=%d "
               "(P = %lld; formula %s), B=2 T=32, %d steps ==\n",
               N, small.n_layer, small.n_embd, small.vocab_size, (long long)P,
               P == gpt2_params(&small) ? "agrees" : "DIFFERS", steps);
        for (int stage = 0; stage <= 2; stage++) {
            zero_bytes b = bytes_of(stage, P, N);
            printf("  %s  between steps %8.2f MB (computed %8.2f MB)   peak during a step %8.2f MB\n",
                   stage_name(stage), (double)between[stage] / 1e6, b.between / 1e6, (double)peak[stage] / 1e6);
        }
        printf("  (computed from the tensors' sizes; the allocator rounds each block up, and holds small tensors)\n");
        printf("ZERO_MEM ranks=%d ddp_between_MB=%.2f zero1_between_MB=%.2f zero2_between_MB=%.2f ddp_peak_MB=%.2f "
               "zero1_peak_MB=%.2f zero2_peak_MB=%.2f\n",
               N, (double)between[0] / 1e6, (double)between[1] / 1e6, (double)between[2] / 1e6, (double)peak[0] / 1e6,
               (double)peak[1] / 1e6, (double)peak[2] / 1e6);
    }
    if (st) fprintf(stderr, "bench_zero: %s\n", it_last_error());
    it_dist_free(d);
    return st ? 1 : 0;
}
