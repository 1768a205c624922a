/* Pipeline parallelism's micro-step loop (ctx->forward_backward under --pipeline_parallel).
 *
 * Each stage holds its layers (src/models/model.c: it__stage_layers). A micro-batch's forward
 * F(i) on stage p receives the previous stage's output (B, T/SP, C) as a leaf, runs the
 * stage's layers, and sends its output on; the last stage computes the loss. The backward
 * B(i) receives the gradient of that output, runs the backward of F(i)'s own segment of the
 * tape (it_backward_range: several micro-batches' graphs are recorded at once) and sends the
 * input's gradient back. The schedules (InfiniTrain's pipeline_schedule.cc):
 *   gpipe  F0 .. F(M-1), then B(M-1) .. B0 (InfiniTrain's active schedule)
 *   1f1b   min(P-p-1, M) warm-up forwards, then F and B in turn, then the remaining B
 * with M = the accumulation steps. Sends are staged through host memory and never wait
 * (it_dist_send), so a stage sending to its neighbour while the neighbour sends back cannot
 * deadlock; every receive matches a send of the same tag in order.
 *
 * Each micro-batch's gradient is computed alone and added to the earlier ones' sum in the
 * order the backwards run, as the ordinary micro-step loop does: 1F1B's backwards run
 * B0 .. B(M-1), the order of one rank with accumulation M, so its sums are that run's;
 * GPipe's run B(M-1) .. B0, the same sums in the other order (equal within rounding). */
#include <stdlib.h>

#include "infinitrain/precision.h"
#include "train/train_internal.h"

enum { TAG_ACT = 11, TAG_GRAD = 12 };

typedef struct pp_mb {
    size_t lo, hi;         /* its forward's segment of the tape */
    it_tensor *root, *in;  /* the stage's output (or the scaled loss); its input leaf (NULL: first stage) */
} pp_mb;

/* grads = acc + grads, elementwise (in place), as step.c's add_into. */
static it_status add_into(it_tensor *grads, it_tensor *acc) {
    it_device dev = it_tensor_device(grads);
    it_tdesc a = it_tensor_desc(acc), g = it_tensor_desc(grads);
    return KCALL(dev, binary, IT_BINARY_ADD, &a, &g, &g);
}

static it_status pp_forward(it_train_ctx *ctx, pp_mb *mb, double *loss_sum) {
    it_model *m = ctx->model;
    int p = it_model_pp_rank(m), P = it_model_pp_size(m);
    it_status st = it_loader_next(ctx->loader, ctx->hx, ctx->hy);
    if (st) return st;
    int64_t parts = ctx->accum * ctx->world, shape[2] = {ctx->B, ctx->T};
    size_t bytes = sizeof(int32_t) * (size_t)(ctx->B * ctx->T);
    it_scope_begin();
    it_tensor *x = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hx, bytes);
    it_tensor *y = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, ctx->hy, bytes);
    st = x && y ? IT_OK : it_last_status();
    if (!st && p > 0) { /* the previous stage's output, a leaf whose gradient goes back */
        int64_t a[3] = {ctx->B, ctx->cfg->sequence_parallel ? ctx->T / ctx->tp_size : ctx->T, ctx->info->n_embd};
        mb->in = it_scope_keep(it_tensor_new(ctx->dev, IT_DTYPE_FP32, 3, a));
        st = mb->in ? it_dist_recv(ctx->pp, mb->in, p - 1, TAG_ACT) : it_last_status();
        if (!st) st = it_tensor_set_requires_grad(mb->in, true);
        it_model_set_stage_input(m, mb->in);
    }
    mb->lo = it_tape_size();
    if (!st && p == P - 1) {
        double loss = 0;
        it_tensor *l = it_model_loss(m, x, y);
        st = l ? it_tensor_item(l, NULL, &loss) : it_last_status();
        *loss_sum += loss;
        mb->root = it_scope_keep(l && parts > 1 ? it_scale(l, 1.0f / (float)parts) : l);
    } else if (!st) {
        mb->root = it_scope_keep(it_model_forward(m, x));
        st = mb->root ? it_dist_send(ctx->pp, mb->root, p + 1, TAG_ACT) : it_last_status();
    }
    mb->hi = it_tape_size();
    it_model_set_stage_input(m, NULL);
    it_scope_end();
    return st;
}

/* B(i) of the n micro-batches: the earlier backwards' sum is in ctx->acc (first: none). */
static it_status pp_backward(it_train_ctx *ctx, pp_mb *all, int n, int i, bool first) {
    it_model *m = ctx->model;
    pp_mb *mb = &all[i];
    int p = it_model_pp_rank(m), P = it_model_pp_size(m);
    it_status st = IT_OK;
    if (!first && ((st = it_tensor_copy_(ctx->acc, it_model_grads(m))) || (st = it_model_zero_grad(m)))) return st;
    it_scope_begin();
    it_tensor *dy = NULL;
    if (p < P - 1) {
        dy = it_tensor_new(ctx->dev, it_tensor_dtype(mb->root), it_tensor_ndim(mb->root), it_tensor_shape(mb->root));
        st = dy ? it_dist_recv(ctx->pp, dy, p + 1, TAG_GRAD) : it_last_status();
    }
    if (!st) st = it_backward_range(mb->root, dy, mb->lo, mb->hi);
    it_scope_end();
    size_t len = mb->hi - mb->lo;
    for (int k = 0; k < n; k++) /* the segments recorded after this one moved down */
        if (k != i && all[k].root && all[k].lo >= mb->hi) all[k].lo -= len, all[k].hi -= len;
    if (!st && mb->in) {
        it_tensor *g = it_tensor_grad(mb->in);
        st = g ? it_dist_send(ctx->pp, g, p - 1, TAG_GRAD)
               : it_error(IT_ERR_INTERNAL, "pipeline: stage %d's input got no gradient", p);
    }
    it_tensor_release(mb->root);
    it_tensor_release(mb->in);
    mb->root = mb->in = NULL;
    if (!st) st = it_model_grads_final(m);
    if (!st && !first) st = add_into(it_model_grads(m), ctx->acc);
    return st;
}

it_status train_pipeline_steps(it_train_ctx *ctx, double *loss_sum) {
    int M = (int)ctx->accum, p = it_model_pp_rank(ctx->model), P = it_model_pp_size(ctx->model);
    pp_mb *mbs = calloc((size_t)M, sizeof *mbs);
    if (!mbs) return it_error(IT_ERR_OOM, "pipeline: out of host memory");
    it_status st = IT_OK;
    if (M > 1 && !ctx->acc) { /* ZeRO-2 let it go after the last step */
        it_tensor *g = it_model_grads(ctx->model);
        it_scope_begin();
        ctx->acc = it_scope_keep(it_tensor_new(ctx->dev, it_tensor_dtype(g), 1, (int64_t[]){it_tensor_numel(g)}));
        it_scope_end();
        if (!ctx->acc) st = it_last_status();
    }
    int done = 0; /* backwards run */
    if (ctx->cfg->pipeline_schedule == IT_PP_1F1B) {
        int warm = P - p - 1 < M ? P - p - 1 : M;
        for (int i = 0; i < warm && !st; i++) st = pp_forward(ctx, &mbs[i], loss_sum);
        for (int i = 0; i < M && !st; i++) {
            if (warm + i < M) st = pp_forward(ctx, &mbs[warm + i], loss_sum);
            if (!st) st = pp_backward(ctx, mbs, M, i, done++ == 0);
        }
    } else {
        for (int i = 0; i < M && !st; i++) st = pp_forward(ctx, &mbs[i], loss_sum);
        for (int i = M - 1; i >= 0 && !st; i--) st = pp_backward(ctx, mbs, M, i, done++ == 0);
    }
    it_status ws = it_dist_send_wait(ctx->pp);
    if (!st) st = ws;
    for (int i = 0; i < M; i++) {
        it_tensor_release(mbs[i].root);
        it_tensor_release(mbs[i].in);
    }
    free(mbs);
    if (st) it_tape_clear();
    return st;
}
