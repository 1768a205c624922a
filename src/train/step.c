/* One optimizer step.
 *
 *   zero grads; for each of `accum` micro-batches: forward, loss / (accum * ranks), backward
 *   (each micro-step's gradient computed alone, then added in order); the all-rank gradient
 *   sum (DDP's all-reduced buckets or ZeRO-2's reduce-scattered ones during the last
 *   backward, or ZeRO-1's reduce-scatter after it); optional global-norm clipping; the
 *   optimizer's update at this step's learning rate.
 *
 * ZeRO-2 keeps no full-size gradient between steps: the model's flat gradient and the
 * accumulation buffer are released once reduced and taken again at the next step.
 *
 * Everything a micro-step creates lives in a scope that ends with it, so memory returns to
 * the caching allocator and the next micro-step reuses it. */
#include <math.h>
#include <time.h>

#include "infinitrain/precision.h"
#include "infinitrain/profile.h"
#include "train/train_internal.h"

double train_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* grads = acc + grads, elementwise (in place). */
it_status train_add_into(it_tensor *grads, it_tensor *acc) {
    it_device dev = it_tensor_device(grads);
    it_tdesc a = it_tensor_desc(acc), g = it_tensor_desc(grads);
    return KCALL(dev, binary, IT_BINARY_ADD, &a, &g, &g);
}

static bool zero2(const it_train_ctx *ctx) { return ctx->zero && it_zero_stage(ctx->zero) == 2; }

/* One micro-batch: forward, loss, backward. The last one under DDP (ZeRO-2) hands each bucket
 * of the gradient to the all-reduce (reduce-scatter; deterministic, rank order) as soon as it
 * is final; the bucket first gets the earlier micro-steps' sum (acc) added. */
static it_status micro_step(it_train_ctx *ctx, bool first, bool last, double *loss) {
    it_model *m = ctx->model;
    it_status st;
    /* ZeRO-2 reduces during backward unless TP must first sum some gradients over its group
     * (tp_sync_grads): then after it, whole */
    bool hooked = last && (ctx->gsync || (zero2(ctx) && ctx->tp_size == 1)); /* (no pipeline here: pipeline.c) */
    if (!first && !ctx->acc) {                                               /* released after the last step (ZeRO-2) */
        it_tensor *g = it_model_grads(m);
        it_scope_begin();
        ctx->acc = it_scope_keep(it_tensor_new(ctx->dev, it_tensor_dtype(g), 1, (int64_t[]){it_tensor_numel(g)}));
        it_scope_end();
        if (!ctx->acc) return it_last_status();
    }
    if (!first && ((st = it_tensor_copy_(ctx->acc, it_model_grads(m))) || (st = it_model_zero_grad(m)))) return st;
    if ((st = it_loader_next(ctx->loader, ctx->hx, ctx->hy))) return st;
    train_cp_rows(ctx, ctx->hx, ctx->hy);
    /* 1/(accum*world) is a power of two when both are: then the rank-ordered sums reproduce a
     * 1-rank run with accumulation accum*world bitwise (README). */
    int64_t parts = ctx->accum * ctx->world;
    it_scope_begin();
    int64_t shape[2] = {ctx->B, ctx->Tl};
    size_t bytes = sizeof(int32_t) * (size_t)(ctx->B * ctx->Tl);
    it_tensor *x = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hx, bytes);
    it_tensor *y = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hy, bytes);
    it_tensor *l = it_model_loss(m, x, y);
    st = l ? it_tensor_item(l, NULL, loss) : it_last_status();
    it_tensor *root = it_scope_keep(l && parts > 1 ? it_scale(l, 1.0f / (float)parts) : l);
    /* The forward's tensors are now held by the tape alone (as a pipeline's are, pipeline.c):
     * those no backward reads go now, and each saved one as soon as its node has run, instead
     * of every activation of the step living until the end of the backward. */
    it_scope_end();
    it_scope_begin();
    it_model_set_loss_scale(m, parts > 1 ? 1.0f / (float)parts : 1.0f); /* recomputed auxiliary losses' */
    if (!st && last && ctx->gsync && !(st = it_grad_sync_begin(ctx->gsync, first ? NULL : ctx->acc)))
        st = it_backward_hooked(root, it_grad_sync_ready, ctx->gsync);
    else if (!st && hooked && !(st = it_zero_begin(ctx->zero, first ? NULL : ctx->acc)))
        st = it_backward_hooked(root, it_zero_ready, ctx->zero);
    else if (!st)
        st = it_backward(root);
    it_scope_end();
    it_tensor_release(root);
    it_tape_clear();
    if (!st) st = it_model_grads_final(m);                                          /* zeros where no node wrote */
    if (!st && !first && !hooked) st = train_add_into(it_model_grads(m), ctx->acc); /* ((g0 + g1) + g2) ... */
    return st;
}

it_status train_micro_steps(it_train_ctx *ctx, double *loss_sum) {
    for (int64_t i = 0; i < ctx->accum; i++) {
        double loss = 0;
        it_precision_micro_step((int)i); /* no-op unless --precision_check */
        it_status st = micro_step(ctx, i == 0, i == ctx->accum - 1, &loss);
        *loss_sum += loss;
        if (st) return st;
    }
    return IT_OK;
}

/* The all-rank sums: the gradient (DDP's or ZeRO-2's buckets finish, or ZeRO-1
 * reduce-scatters) and the logged loss, which is the mean over every rank's micro-steps.
 * ZeRO-2 then lets the full-size gradient buffers go: its shard holds the reduced gradient. */
static it_status reduce(it_train_ctx *ctx, double *loss_sum) {
    it_status st;
    if (ctx->gsync) {
        int early = 0, buckets = 0;
        /* a pipeline's backwards are not hooked: every bucket is reduced here */
        if (ctx->pp && (st = it_grad_sync_begin(ctx->gsync, NULL))) return st;
        if ((st = it_grad_sync_finish(ctx->gsync, &early, &buckets))) return st;
        if (ctx->step == ctx->start_step + 1 && !ctx->quiet)
            printf("DDP: %d of %d gradient buckets all-reduced while backward ran\n", early, buckets);
    }
    /* sequence parallel, kept kv heads, LoRA under TP: partial gradients summed over TP (after
     * DDP's DP sums: the two commute; before ZeRO's, which read the model's gradient) */
    if ((st = it_model_tp_sync_grads(ctx->model))) return st;
    if (zero2(ctx)) {
        int early = 0, buckets = 0;
        if ((st = it_zero_finish(ctx->zero, &early, &buckets))) return st;
        if (ctx->step == ctx->start_step + 1 && !ctx->quiet)
            printf("ZeRO-2: %d of %d gradient buckets reduce-scattered while backward ran\n", early, buckets);
        if ((st = it_model_grads_release(ctx->model))) return st;
        it_tensor_release(ctx->acc);
        ctx->acc = NULL;
    }
    /* the loss: the last pipeline stage's (the others add 0), then the mean over DP */
    if (ctx->pp && (st = it_dist_all_reduce_host(ctx->pp, loss_sum, 1, IT_DTYPE_FP64, IT_CCL_SUM))) return st;
    if (ctx->world > 1 && (st = it_dist_all_reduce_host(ctx->dist, loss_sum, 1, IT_DTYPE_FP64, IT_CCL_SUM))) return st;
    return ctx->zero && !zero2(ctx) ? it_zero_reduce_grads(ctx->zero) : IT_OK;
}

/* it_zero_shared_fn over the model: the squares a TP peer counts too, in a part of the shard. */
static it_status shared_sumsq(void *model, it_tensor *g, int64_t flat_lo, double *over) {
    return it_model_grad_shared_sumsq(model, g, flat_lo, over);
}

static it_status update(it_train_ctx *ctx) {
    it_status st;
    float scale = 1.0f;
    double norm = 0;
    if (ctx->cfg->grad_clip > 0) {
        it_dist *mp = ctx->mp ? ctx->mp : ctx->tp ? ctx->tp : ctx->pp; /* the model's other ranks */
        if (ctx->zero && mp)
            st = it_zero_grad_norm_shared(ctx->zero, shared_sumsq, ctx->model, mp, &norm);
        else
            st = ctx->zero ? it_zero_grad_norm(ctx->zero, &norm) : it_model_grad_norm(ctx->model, &norm);
        if (st) return st;
        scale = it_clip_scale(norm, ctx->cfg->grad_clip);
    }
    ctx->lr = it_lr_scheduler_lr(&ctx->sched); /* this step's, which the step line prints */
    /* a bad step (guard.c): nothing changes, the batch is spent */
    if (train_guard_check(ctx, ctx->loss, ctx->cfg->grad_clip > 0 ? &norm : NULL)) return IT_OK;
    st = ctx->zero ? it_zero_step(ctx->zero, ctx->lr, scale) : it_optimizer_step(ctx->opt, ctx->lr, scale);
    if (st) return st;
    it_lr_scheduler_step(&ctx->sched); /* InfiniTrain: scheduler->Step() after optimizer->Step() */
    return it_device_synchronize(ctx->dev);
}

it_status train_step(it_train_ctx *ctx, int step) {
    double t0 = train_now_ms(), loss_sum = 0.0, waited0 = it_dist_waited_ms();
    if (step == ctx->start_step + 1) ctx->t_start = t0;
    ctx->step = step;
    it_mem_stats_reset_peak(ctx->dev);
    it_profile_step_begin(step - 1); /* InfiniTrain's tags count from Step_0; no-op unless profiling */
    it_precision_step_begin(step);
    it_status st = it_model_grads_acquire(ctx->model); /* released by the last step (ZeRO-2) */
    if (!st) st = it_model_zero_grad(ctx->model);      /* lazily: the first backward writes them */
    if (!st) st = ctx->forward_backward(ctx, &loss_sum);
    it_status pst = it_precision_step_end(); /* a record that failed fails the step */
    if (!st) st = pst;
    if (!st) st = reduce(ctx, &loss_sum);
    ctx->loss = loss_sum / (double)(ctx->accum * ctx->world); /* the same on every rank */
    if (!st) st = update(ctx);
    it_mem_stats m;
    it_mem_stats_get(ctx->dev, &m);
    it_profile_step_end(step - 1, m.peak_used, m.peak_reserved);
    if (st) return st;
    ctx->step_ms = train_now_ms() - t0;
    ctx->wait_ms = it_dist_waited_ms() - waited0;
    return IT_OK;
}

void train_cp_rows(const it_train_ctx *ctx, int32_t *x, int32_t *y) {
    if (ctx->cp_size == 1) return;
    bool bal = ctx->cfg->cp_load_balance;
    it_cp_slice_host(x, x, ctx->B, ctx->T, ctx->cp_size, ctx->cp_rank, bal);
    it_cp_slice_host(y, y, ctx->B, ctx->T, ctx->cp_size, ctx->cp_rank, bal);
}
