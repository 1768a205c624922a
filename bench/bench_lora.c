/* LoRA against full fine-tuning in the same run: GPT-2 124M (random init, vocab 50257 padded to
 * 50304), B=4 T=64, AdamW, one micro-step per step; LoRA r=8 on c_attn,attn.c_proj.
 *
 * Prints, for each, the median step time over the measured steps and the peak memory the device
 * allocator held during a step (weights, their gradients and AdamW's moments, which live across
 * steps, plus the step's activations), then the LoRA / full ratios. Assert nothing (tests never
 * assert on time).
 *
 *   bench_lora [--warmup N] [--steps N]        (defaults 2 and 5) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infinitrain/autograd.h"
#include "infinitrain/models.h"
#include "infinitrain/optim.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct result {
    double ms, loss;
    size_t peak_used, peak_reserved;
    int64_t trainable;
} result;

static it_status run(bool lora, int warmup, int steps, result *r) {
    enum { B = 4, T = 64 };
    it_device dev = it_device_cpu();
    it_gpt2_config cfg;
    it_model *m = NULL;
    it_optimizer *opt = NULL;
    it_status st = it_mem_empty_cache(dev); /* the other run's cached blocks are not this one's */
    if (!st) st = it_gpt2_preset("d12", &cfg);
    if (!st) st = it_gpt2_new(&cfg, dev, 42, &m);
    it_lora_config lc = {8, 16.0f, "c_attn,attn.c_proj", 42};
    if (!st && lora) st = it_model_lora_apply(m, &lc);
    it_optim_config oc = {IT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.0f};
    if (!st) st = it_optimizer_new(&oc, it_model_trainable(m), it_model_grads(m), &opt);
    int32_t x[B * T], y[B * T];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    double *ms = calloc((size_t)steps, sizeof *ms);
    memset(r, 0, sizeof *r);
    r->trainable = st ? 0 : it_tensor_numel(it_model_trainable(m));
    for (int i = 0; !st && i < warmup + steps; i++) {
        for (int j = 0; j < B * T; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (int32_t)((s >> 33) % 50257);
            y[j] = (int32_t)((s >> 13) % 50257);
        }
        it_mem_stats_reset_peak(dev);
        double t0 = now_ms();
        int64_t shape[2] = {B, T};
        st = it_model_zero_grad(m);
        it_scope_begin();
        it_tensor *l = st ? NULL
                          : it_model_loss(m, it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof x),
                                          it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof y));
        if (!st) st = l ? it_tensor_item(l, NULL, &r->loss) : it_last_status();
        if (!st) st = it_backward(l);
        it_scope_end();
        it_tape_clear();
        if (!st) st = it_model_grads_final(m);
        if (!st) st = it_optimizer_step(opt, 1e-4f, 1.0f);
        if (!st) st = it_device_synchronize(dev);
        double dt = now_ms() - t0;
        it_mem_stats mem;
        it_mem_stats_get(dev, &mem);
        if (i >= warmup) {
            ms[i - warmup] = dt;
            if (mem.peak_used > r->peak_used) r->peak_used = mem.peak_used;
            if (mem.peak_reserved > r->peak_reserved) r->peak_reserved = mem.peak_reserved;
        }
    }
    if (!st) {
        qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
        r->ms = ms[steps / 2];
    }
    free(ms);
    it_optimizer_free(opt);
    it_model_free(m);
    return st;
}

int main(int argc, char **argv) {
    int warmup = 2, steps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--warmup") == 0) warmup = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    }
    if (steps < 1) steps = 1;
    result full, lora;
    it_status st = run(false, warmup, steps, &full);
    if (!st) st = run(true, warmup, steps, &lora);
    if (st) {
        fprintf(stderr, "bench_lora: %s\n", it_last_error());
        return 1;
    }
    printf("== LoRA vs full fine-tuning: GPT-2 124M, B=4 T=64, AdamW, %d steps after %d warmup ==\n", steps, warmup);
    printf("  full   %10lld trainable | %8.1f ms/step median | peak used %6zu MB, reserved %6zu MB\n",
           (long long)full.trainable, full.ms, full.peak_used >> 20, full.peak_reserved >> 20);
    printf("  lora   %10lld trainable | %8.1f ms/step median | peak used %6zu MB, reserved %6zu MB  (r=8, "
           "c_attn,attn.c_proj)\n",
           (long long)lora.trainable, lora.ms, lora.peak_used >> 20, lora.peak_reserved >> 20);
    printf("  lora / full: step time %.1f%%, peak memory used %.1f%%, reserved %.1f%%\n", 100.0 * lora.ms / full.ms,
           100.0 * (double)lora.peak_used / (double)full.peak_used,
           100.0 * (double)lora.peak_reserved / (double)full.peak_reserved);
    return 0;
}
