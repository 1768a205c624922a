/* The validation loss, as llm.c computes it: every --val_loss_every steps and after the last,
 * the mean loss over the first --val_max_steps batches of each rank's share of
 * --input_val_bin (batches r, r+world, ... as in training), averaged over all ranks and
 * printed once as llm.c's `val loss X`, followed by the step it was taken after
 * (`val loss X | step N/TOTAL`). It runs without autograd and reads from its own loader, so
 * the training trajectory is bitwise the same with and without it. */
#include <stdio.h>

#include "train/train_internal.h"

it_status train_val_setup(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st;
    if (c->val_loss_every > 0 && !c->input_val_bin)
        return it_error(IT_ERR_INVALID_ARG, "--val_loss_every: %d needs --input_val_bin PATH", c->val_loss_every);
    if (!c->input_val_bin || c->val_loss_every <= 0) return IT_OK;
    if ((st = it_loader_new(c->input_val_bin, ctx->B, ctx->T, ctx->data_rank, ctx->data_world, &ctx->val_loader)) ||
        (st = it_loader_check_vocab(ctx->val_loader, ctx->info->vocab_size)))
        return it_error_context("--input_val_bin: ");
    int64_t per_rank = it_loader_num_batches(ctx->val_loader) / ctx->data_world;
    ctx->val_steps = per_rank < c->val_max_steps ? (per_rank > 0 ? per_rank : 1) : c->val_max_steps;
    return IT_OK;
}

bool train_val_due(const it_train_ctx *ctx) {
    int every = ctx->cfg->val_loss_every;
    return ctx->val_loader && (ctx->step % every == 0 || ctx->step == ctx->cfg->num_iteration);
}

it_status train_validate(it_train_ctx *ctx) {
    bool was = it_grad_enabled();
    it_grad_set_enabled(false);
    it_loader_reset(ctx->val_loader);
    double sum = 0;
    it_status st = IT_OK;
    int64_t shape[2] = {ctx->B, ctx->Tl};
    size_t bytes = sizeof(int32_t) * (size_t)(ctx->B * ctx->Tl);
    for (int64_t i = 0; i < ctx->val_steps && !st; i++) {
        if ((st = it_loader_next(ctx->val_loader, ctx->hx, ctx->hy))) break;
        train_cp_rows(ctx, ctx->hx, ctx->hy);
        it_scope_begin();
        it_tensor *x = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hx, bytes);
        it_tensor *y = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hy, bytes);
        double v = 0;
        if (ctx->pp) { /* through the stages; each gets the last stage's loss */
            st = x && y ? train_pipeline_loss(ctx, x, y, &v) : it_last_status();
        } else {
            it_tensor *l = it_model_loss(ctx->model, x, y);
            st = l ? it_tensor_item(l, NULL, &v) : it_last_status();
        }
        it_scope_end();
        sum += v;
    }
    it_grad_set_enabled(was);
    if (!st && ctx->world > 1) st = it_dist_all_reduce_host(ctx->dist, &sum, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    if (st) return it_error_context("validation: ");
    ctx->val_loss = sum / (double)(ctx->val_steps * ctx->world);
    ctx->val_step = ctx->step;
    if (!ctx->quiet) {
        printf("val loss %f | step %4d/%d\n", ctx->val_loss, ctx->step, ctx->cfg->num_iteration);
        fflush(stdout);
    }
    if (ctx->result) ctx->result->val_loss = ctx->val_loss;
    return IT_OK;
}
