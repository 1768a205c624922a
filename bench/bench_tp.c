/* Tensor parallelism's per-rank memory and traffic, for bench/tp_bench.sh: on every rank of an
 * mpirun job (all ranks in one TP group, DP = 1) a GPT-2 preset built at TP = ranks with
 * it_gpt2_new_tp and an AdamW optimizer on it, then one training step as the driver takes it
 * (zero grad, loss, backward, gradients final, the SP gradient sum, optimizer step) on random
 * tokens. Measured on each rank, from the objects themselves:
 *   the bytes of this rank's parameters, gradients and optimizer state (it_tensor_nbytes,
 *   it_optimizer_state_bytes), the parameters it holds against the whole model's (full_shape),
 *   the allocator's bytes in use after building (it_mem_stats used) and the step's peak
 *   (peak_used, reset when the step starts, as the driver's step line reports it),
 *   the bytes it sent in the TP group's tensor collectives during the forward (loss included)
 *   and the backward (it_dist_bytes_sent; the vocab-parallel cross entropy's host exchange is
 *   control data and not counted there).
 * Rank 0 prints one TPBENCH line with the largest value over the ranks (and the smallest where
 * ranks could differ). Figures only; nothing is asserted.
 * Usage: mpirun -np N bench_tp [PRESET [B [T [sp]]]]   (default d12 1 64; "sp": --sequence_parallel) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "infinitrain/autograd.h"
#include "infinitrain/dist.h"
#include "infinitrain/models.h"
#include "infinitrain/optim.h"
#include "infinitrain/tensor.h"

enum { F_PARAMS, F_GRADS, F_OPTIM, F_TOTAL, F_LOCAL, F_USED, F_PEAK, F_FWD, F_BWD, F_OTHER, NF };

static int fail(it_dist *d, int rank, const char *what) {
    fprintf(stderr, "bench_tp: rank %d: %s: %s\n", rank, what, it_last_error());
    it_dist_abort(d, 1);
    return 1;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "d12";
    long long B = argc > 2 ? atoll(argv[2]) : 1, T = argc > 3 ? atoll(argv[3]) : 64;
    bool sp = argc > 4 && strcmp(argv[4], "sp") == 0;
    it_gpt2_config cfg;
    if (B < 1 || T < 1 || (argc > 4 && !sp) || it_gpt2_preset(preset, &cfg)) {
        fprintf(stderr, "usage: mpirun -np N %s [PRESET (d12..d48) [B >= 1 [T >= 1 [sp]]]]%s%s\n", argv[0],
                it_last_error()[0] ? ": " : "", it_last_error());
        return 2;
    }
    if (T > cfg.block_size) {
        fprintf(stderr, "bench_tp: T %lld exceeds %s's block size %d\n", T, preset, cfg.block_size);
        return 2;
    }
    it_device dev = it_device_cpu();
    it_dist *world = NULL;
    it_dist_grid *grid = NULL;
    if (it_dist_new(dev, &world)) {
        fprintf(stderr, "bench_tp: %s\n", it_last_error());
        return 1;
    }
    int rank = it_dist_rank(world), N = it_dist_world(world);
    if (it_dist_grid_new(world, 1, N, 1, &grid)) return fail(world, rank, "the TP grid");
    it_dist *tp = it_dist_grid_group(grid, IT_DIST_TP);
    it_model_parallel par = {tp, sp, NULL, NULL, 1, NULL, 0, false};
    it_model *m = NULL;
    it_optimizer *opt = NULL;
    if (it_gpt2_new_tp(&cfg, dev, 42, &par, &m)) return fail(world, rank, "it_gpt2_new_tp");
    it_optim_config ocfg = {IT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.0f};
    if (it_optimizer_new(&ocfg, it_model_trainable(m), it_model_grads(m), &opt))
        return fail(world, rank, "it_optimizer_new");

    double v[NF] = {0}, whole = 0;
    v[F_PARAMS] = (double)it_tensor_nbytes(it_model_params(m));
    v[F_GRADS] = (double)it_tensor_nbytes(it_model_grads(m));
    v[F_OPTIM] = (double)it_optimizer_state_bytes(opt);
    v[F_TOTAL] = v[F_PARAMS] + v[F_GRADS] + v[F_OPTIM];
    for (int i = 0; i < it_model_param_count(m); i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        v[F_LOCAL] += (double)p->numel;
        whole += p->ndim == 1 ? (double)p->full_shape[0] : (double)p->full_shape[0] * (double)p->full_shape[1];
    }
    it_mem_stats mem;
    it_mem_stats_get(dev, &mem);
    v[F_USED] = (double)mem.used;

    /* one step on random tokens (the same on every rank: a TP group sees one batch) */
    size_t n = (size_t)(B * T);
    int32_t *hx = malloc(sizeof(int32_t) * n), *hy = malloc(sizeof(int32_t) * n);
    if (!hx || !hy) return fail(world, rank, "host tokens");
    uint64_t s = 1234;
    for (size_t i = 0; i < n; i++) {
        hx[i] = (int32_t)(bench_rng_next(&s) % (uint64_t)cfg.vocab_size);
        hy[i] = (int32_t)(bench_rng_next(&s) % (uint64_t)cfg.vocab_size);
    }
    it_mem_stats_reset_peak(dev);
    it_dist_bytes_reset(tp);
    it_status st = it_model_zero_grad(m);
    uint64_t after_fwd = 0, after_bwd = 0;
    double loss = 0, t0 = bench_now_ms();
    it_scope_begin();
    int64_t shape[2] = {B, T};
    it_tensor *x = st ? NULL : it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hx, sizeof(int32_t) * n);
    it_tensor *y = x ? it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hy, sizeof(int32_t) * n) : NULL;
    it_tensor *l = y ? it_model_loss(m, x, y) : NULL;
    st = l ? it_tensor_item(l, NULL, &loss) : it_last_status();
    after_fwd = it_dist_bytes_sent(tp);
    if (!st) st = it_backward(l);
    it_scope_end();
    it_tape_clear();
    if (!st) st = it_model_grads_final(m);
    after_bwd = it_dist_bytes_sent(tp);
    if (!st) st = it_model_tp_sync_grads(m);
    if (!st) st = it_optimizer_step(opt, 1e-4f, 1.0f);
    if (!st) st = it_device_synchronize(dev);
    double step_ms = bench_now_ms() - t0;
    if (st) return fail(world, rank, "the training step");
    it_mem_stats_get(dev, &mem);
    v[F_PEAK] = (double)mem.peak_used;
    v[F_FWD] = (double)after_fwd;
    v[F_BWD] = (double)(after_bwd - after_fwd);
    v[F_OTHER] = (double)(it_dist_bytes_sent(tp) - after_bwd);

    double mx[NF], mn[NF];
    for (int i = 0; i < NF; i++) {
        mx[i] = v[i];
        mn[i] = -v[i];
    }
    if (it_dist_all_reduce_host(world, mx, NF, IT_DTYPE_FP64, IT_CCL_MAX) ||
        it_dist_all_reduce_host(world, mn, NF, IT_DTYPE_FP64, IT_CCL_MAX) ||
        it_dist_all_reduce_host(world, &step_ms, 1, IT_DTYPE_FP64, IT_CCL_MAX))
        return fail(world, rank, "gathering the figures");
    if (rank == 0)
        printf("TPBENCH preset=%s tp=%d sp=%d B=%lld T=%lld L=%d C=%d V=%d padded_vocab=%d params_whole=%.0f "
               "params_rank=%.0f params_bytes=%.0f grads_bytes=%.0f optim_bytes=%.0f total_bytes=%.0f "
               "total_bytes_min=%.0f used_after_build=%.0f step_peak_used=%.0f step_peak_used_min=%.0f "
               "sent_fwd=%.0f sent_bwd=%.0f sent_after_bwd=%.0f sent_min=%.0f loss=%.6f step_ms=%.1f\n",
               preset, N, sp, B, T, cfg.n_layer, cfg.n_embd, cfg.vocab_size, cfg.padded_vocab_size, whole, mx[F_LOCAL],
               mx[F_PARAMS], mx[F_GRADS], mx[F_OPTIM], mx[F_TOTAL], -mn[F_TOTAL], mx[F_USED], mx[F_PEAK], -mn[F_PEAK],
               mx[F_FWD], mx[F_BWD], mx[F_OTHER], -(mn[F_FWD] + mn[F_BWD] + mn[F_OTHER]), loss, step_ms);
    free(hx);
    free(hy);
    it_optimizer_free(opt);
    it_model_free(m);
    it_dist_grid_free(grid);
    it_dist_free(world);
    return 0;
}
