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
 * with M = the accumulation steps. With V virtual stages (--virtual_pipeline_parallel), stage p
 * holds chunks g = v*P + p of P*V; F(i, g) runs at step g + i and, GPipe, B(i, g) at
 * S + (S - 1 - g - i) with S = M + P*V - 1 (each rank's tasks by step, then chunk), or,
 * interleaved 1F1B (--pipeline_schedule 1f1b), B(i, g) at 2(P*V - 1) - g + i (by step, then
 * micro-batch, F before B): InfiniTrain's two rules. Every message goes from a task of step s
 * to a task of step s + 1 (a chunk's output to the next chunk, a gradient to the previous),
 * so before each of its steps a rank receives what that step's tasks need, in one exchange
 * with the sends of its previous step (it_dist_exchange): when every rank does, each step's
 * exchanges match among themselves and no rank waits in a cycle, also with a device ccl
 * whose sends wait for their receives (NCCL's rendezvous). A chunk's output goes to the next
 * stage, from the last stage to stage 0's next chunk; messages are tagged by micro-batch and
 * chunk, and between two stages both sides order them alike (every receive matches a send of
 * the same tag in order), as a device ccl, which matches by order, needs. Megatron's 1F1B
 * (V = 1) receives inside each task, the held sends going out with each receive: its
 * send-forward-receive-backward pairs. Both were checked free of deadlock, with sends that
 * wait for their receives, for P 2..8, V 1..4, M 1..16 (docs/parallelism.md).
 *
 * Each micro-batch's gradient is computed alone and added to the earlier ones' sum in the
 * order the backwards run, as the ordinary micro-step loop does: 1F1B's backwards run
 * B0 .. B(M-1), the order of one rank with accumulation M, so its sums are that run's;
 * GPipe's run B(M-1) .. B0, the same sums in the other order (equal within rounding). */
#include <stdio.h>
#include <stdlib.h>

#include "infinitrain/precision.h"
#include "train/train_internal.h"

/* Tags: the receiving task's (micro-batch, global chunk), activations even, gradients odd. */
static int tag_of(int mb, int g, int chunks, bool grad) { return 2 * (mb * chunks + g) + (grad ? 1 : 0); }

typedef struct pp_mb {
    size_t lo, hi;        /* its forward's segment of the tape */
    it_tensor *root, *in; /* the chunk's output (or the scaled loss); its input leaf (NULL: first chunk) */
    it_tensor *dy;        /* the output's gradient when received ahead of the backward (NULL: not yet) */
} pp_mb;

/* IT_PP_STATS=1: each stage's time blocked in receives (its share of the bubble) over the
 * run, printed by every stage after the last step (train_pipeline_report). */
static struct {
    double wait_ms, total_ms;
    int steps;
    size_t peak; /* the largest step's peak of used device memory */
} g_stats;

static it_status timed_exchange(it_dist *d, int n, it_tensor *const *t, const int *peer, const int *tag) {
    double t0 = train_now_ms();
    it_status st = it_dist_exchange(d, n, t, peer, tag);
    g_stats.wait_ms += train_now_ms() - t0;
    return st;
}
static it_status timed_recv(it_dist *d, it_tensor *t, int peer, int tag) {
    return timed_exchange(d, 1, &t, &peer, &tag);
}

typedef struct pp_run {
    it_train_ctx *ctx;
    int M, V, P, p;
    pp_mb *mbs; /* [mb * V + v] */
    int done;   /* backwards run */
} pp_run;

/* Where chunk v of this stage gets its input from (prev) and sends its output to (next), as
 * PP group ranks; -1: none (the first chunk of all, the last). */
static int prev_stage(const pp_run *r, int v) { return r->p > 0 ? r->p - 1 : v > 0 ? r->P - 1 : -1; }
static int next_stage(const pp_run *r, int v) { return r->p < r->P - 1 ? r->p + 1 : v < r->V - 1 ? 0 : -1; }

/* A buffer for a stage's input, (B, T/SP, C) in fp32 as InfiniTrain sends it. */
static it_tensor *stage_input(const it_train_ctx *ctx) {
    /* T/CP/SP rows (InfiniTrain's boundary shape under context parallelism) */
    int64_t a[3] = {ctx->B, ctx->cfg->sequence_parallel ? ctx->Tl / ctx->tp_size : ctx->Tl, ctx->info->n_embd};
    return it_tensor_new(ctx->dev, IT_DTYPE_FP32, 3, a);
}

static it_status pp_forward(pp_run *r, int i, int v, double *loss_sum) {
    it_train_ctx *ctx = r->ctx;
    it_model *m = ctx->model;
    pp_mb *mb = &r->mbs[i * r->V + v];
    int g = v * r->P + r->p, chunks = r->P * r->V, from = prev_stage(r, v), to = next_stage(r, v);
    /* every chunk's forward of micro-batch i reads its batch (the loader's position is the
     * micro-batch's: it_loader_next for chunk 0, the same batch again for the later chunks) */
    it_status st = IT_OK;
    if (v == 0) {
        int32_t *x = ctx->hx + (size_t)i * ctx->B * ctx->T, *y = ctx->hy + (size_t)i * ctx->B * ctx->T;
        if ((st = it_loader_next(ctx->loader, x, y))) return st;
        train_cp_rows(ctx, x, y);
    }
    const int32_t *hx = ctx->hx + (size_t)i * ctx->B * ctx->T, *hy = ctx->hy + (size_t)i * ctx->B * ctx->T;
    int64_t parts = ctx->accum * ctx->world, shape[2] = {ctx->B, ctx->Tl};
    size_t bytes = sizeof(int32_t) * (size_t)(ctx->B * ctx->Tl);
    it_model_set_chunk(m, v);
    it_model_set_loss_scale(m, parts > 1 ? 1.0f / (float)parts : 1.0f); /* recomputed auxiliary losses' */
    it_precision_pipeline_micro_step(i);                                /* no-op unless --precision_check */
    it_scope_begin();
    it_tensor *x = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, hx, bytes);
    it_tensor *y = it_tensor_from_host(ctx->dev, IT_DTYPE_I32, 2, shape, hy, bytes);
    st = x && y ? IT_OK : it_last_status();
    if (!st && from >= 0) { /* the previous chunk's output, a leaf whose gradient goes back */
        if (!mb->in) {      /* not received ahead (pp_receive_ahead) */
            mb->in = it_scope_keep(stage_input(ctx));
            st = mb->in ? timed_recv(ctx->pp, mb->in, from, tag_of(i, g, chunks, false)) : it_last_status();
        }
        if (!st) st = it_tensor_set_requires_grad(mb->in, true);
        it_model_set_stage_input(m, mb->in);
    }
    mb->lo = it_tape_size();
    if (!st && to < 0) {
        double loss = 0;
        it_tensor *l = it_model_loss(m, x, y);
        st = l ? it_tensor_item(l, NULL, &loss) : it_last_status();
        *loss_sum += loss;
        mb->root = it_scope_keep(l && parts > 1 ? it_scale(l, 1.0f / (float)parts) : l);
    } else if (!st) {
        it_tensor *out = it_model_forward(m, x), *aux = it_model_take_stage_aux(m);
        if (out && aux) { /* Mixtral: this chunk's layers' auxiliary loss joins the step's loss */
            double a = 0;
            st = it_tensor_item(aux, NULL, &a);
            *loss_sum += a;
            out = it_attach_loss(out, parts > 1 ? it_scale(aux, 1.0f / (float)parts) : aux);
        }
        mb->root = it_scope_keep(out);
        if (!st)
            st = mb->root ? it_dist_send(ctx->pp, mb->root, to, tag_of(i, g + 1, chunks, false)) : it_last_status();
    }
    mb->hi = it_tape_size();
    it_model_set_stage_input(m, NULL);
    it_scope_end();
    return st;
}

/* B(i, v): the earlier backwards' sum is in ctx->acc (the first: none). */
static it_status pp_backward(pp_run *r, int i, int v) {
    it_train_ctx *ctx = r->ctx;
    it_model *m = ctx->model;
    pp_mb *mb = &r->mbs[i * r->V + v];
    int g = v * r->P + r->p, chunks = r->P * r->V, from = prev_stage(r, v), to = next_stage(r, v), n = r->M * r->V;
    bool first = r->done++ == 0;
    it_status st = IT_OK;
    if (!first && ((st = it_tensor_copy_(ctx->acc, it_model_grads(m))) || (st = it_model_zero_grad(m)))) return st;
    it_precision_pipeline_micro_step(i);
    it_scope_begin();
    it_tensor *dy = mb->dy, *ahead = mb->dy; /* received ahead (pp_receive_ahead): ours to release */
    mb->dy = NULL;
    if (!dy && to >= 0) {
        dy = it_tensor_new(ctx->dev, it_tensor_dtype(mb->root), it_tensor_ndim(mb->root), it_tensor_shape(mb->root));
        st = dy ? timed_recv(ctx->pp, dy, to, tag_of(i, g, chunks, true)) : it_last_status();
    }
    if (!st) st = it_backward_range(mb->root, dy, mb->lo, mb->hi);
    it_scope_end();
    it_tensor_release(ahead);
    size_t len = mb->hi - mb->lo;
    for (int k = 0; k < n; k++) /* the segments recorded after this one moved down */
        if (&r->mbs[k] != mb && r->mbs[k].root && r->mbs[k].lo >= mb->hi) r->mbs[k].lo -= len, r->mbs[k].hi -= len;
    if (!st && mb->in) {
        it_tensor *gi = it_tensor_grad(mb->in);
        st = gi ? it_dist_send(ctx->pp, gi, from, tag_of(i, g - 1, chunks, true))
                : it_error(IT_ERR_INTERNAL, "pipeline: stage %d chunk %d's input got no gradient", r->p, v);
    }
    it_tensor_release(mb->root);
    it_tensor_release(mb->in);
    mb->root = mb->in = NULL;
    if (!st) st = it_model_grads_final(m);
    if (!st && !first) st = train_add_into(it_model_grads(m), ctx->acc);
    return st;
}

typedef struct pp_task {
    long step;
    int mb, v;
    bool bwd;
} pp_task;

static int gpipe_order(const void *a, const void *b) { /* by step, then chunk */
    const pp_task *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->v - y->v;
}

static int interleaved_order(const void *a, const void *b) { /* by step, micro-batch, F before B */
    const pp_task *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->mb != y->mb) return x->mb - y->mb;
    return (int)x->bwd - (int)y->bwd;
}

/* Before the n tasks of one step run: receive every input and output gradient they need, in
 * one exchange with the previous step's sends (the file's comment says why). */
static it_status pp_receive_ahead(pp_run *r, const pp_task *t, int n) {
    it_train_ctx *ctx = r->ctx;
    int chunks = r->P * r->V, k = 0;
    it_tensor **buf = calloc((size_t)n, sizeof *buf);
    int *peer = calloc((size_t)n, sizeof *peer), *tag = calloc((size_t)n, sizeof *tag);
    it_status st = buf && peer && tag ? IT_OK : it_error(IT_ERR_OOM, "pipeline: out of host memory");
    for (int j = 0; j < n && !st; j++) {
        pp_mb *mb = &r->mbs[t[j].mb * r->V + t[j].v];
        int g = t[j].v * r->P + r->p, from = prev_stage(r, t[j].v), to = next_stage(r, t[j].v);
        it_tensor *b = NULL;
        it_scope_begin();
        if (!t[j].bwd && from >= 0) {
            b = mb->in = it_scope_keep(stage_input(ctx));
            peer[k] = from, tag[k] = tag_of(t[j].mb, g, chunks, false);
        } else if (t[j].bwd && to >= 0 && mb->root) {
            b = mb->dy = it_scope_keep(it_tensor_new(ctx->dev, it_tensor_dtype(mb->root), it_tensor_ndim(mb->root),
                                                     it_tensor_shape(mb->root)));
            peer[k] = to, tag[k] = tag_of(t[j].mb, g, chunks, true);
        } else if (t[j].bwd && to >= 0) {
            st = it_error(IT_ERR_INTERNAL,
                          "pipeline: stage %d's backward of micro-batch %d chunk %d precedes its forward", r->p,
                          t[j].mb, t[j].v);
        }
        it_scope_end();
        if (!st && (!t[j].bwd ? from >= 0 : to >= 0)) {
            if (!b) st = it_last_status();
            buf[k++] = b;
        }
    }
    if (!st) st = timed_exchange(ctx->pp, k, buf, peer, tag);
    free(buf);
    free(peer);
    free(tag);
    return st;
}

/* InfiniTrain's rules over this stage's 2*M*V tasks, run in order, step by step. */
static it_status run_rules(pp_run *r, bool interleaved, double *loss_sum) {
    int M = r->M, V = r->V, T = r->P * r->V;
    long S = M + T - 1;
    pp_task *t = calloc((size_t)(2 * M * V), sizeof *t);
    if (!t) return it_error(IT_ERR_OOM, "pipeline: out of host memory");
    int n = 0;
    for (int i = 0; i < M; i++)
        for (int v = 0; v < V; v++) {
            long g = (long)v * r->P + r->p;
            t[n++] = (pp_task){g + i, i, v, false};
            t[n++] = (pp_task){interleaved ? 2 * (T - 1) - g + i : S + (S - 1 - g - i), i, v, true};
        }
    qsort(t, (size_t)n, sizeof *t, interleaved ? interleaved_order : gpipe_order);
    it_status st = IT_OK;
    for (int k = 0; k < n && !st;) {
        int e = k + 1;
        while (e < n && t[e].step == t[k].step) e++;
        st = pp_receive_ahead(r, t + k, e - k);
        for (; k < e && !st; k++)
            st = t[k].bwd ? pp_backward(r, t[k].mb, t[k].v) : pp_forward(r, t[k].mb, t[k].v, loss_sum);
    }
    free(t);
    return st;
}

static it_status pipeline_steps(it_train_ctx *ctx, double *loss_sum);

/* Evaluation: one batch's forward through every chunk in turn (no graph), the loss from the
 * last stage's last chunk plus the other chunks' auxiliary losses (Mixtral), summed over PP so
 * every stage has it. */
it_status train_pipeline_loss(it_train_ctx *ctx, it_tensor *x, it_tensor *y, double *loss) {
    pp_run r = {.ctx = ctx,
                .M = 1,
                .V = ctx->cfg->virtual_pipeline_parallel > 1 ? ctx->cfg->virtual_pipeline_parallel : 1,
                .P = it_model_pp_size(ctx->model),
                .p = it_model_pp_rank(ctx->model)};
    int chunks = r.P * r.V;
    it_model *m = ctx->model;
    it_status st = IT_OK;
    *loss = 0;
    for (int v = 0; v < r.V && !st; v++) {
        int g = v * r.P + r.p, from = prev_stage(&r, v), to = next_stage(&r, v);
        it_model_set_chunk(m, v);
        it_scope_begin();
        if (from >= 0) {
            it_tensor *in = stage_input(ctx);
            st = in ? it_dist_recv(ctx->pp, in, from, tag_of(0, g, chunks, false)) : it_last_status();
            it_model_set_stage_input(m, in);
        }
        double part = 0;
        if (!st && to < 0) {
            it_tensor *l = it_model_loss(m, x, y);
            st = l ? it_tensor_item(l, NULL, &part) : it_last_status();
        } else if (!st) {
            it_tensor *out = it_model_forward(m, x), *aux = it_model_take_stage_aux(m);
            if (out && aux) st = it_tensor_item(aux, NULL, &part); /* Mixtral: its layers' auxiliary loss */
            if (!st) st = out ? it_dist_send(ctx->pp, out, to, tag_of(0, g + 1, chunks, false)) : it_last_status();
        }
        *loss += part;
        it_model_set_stage_input(m, NULL);
        it_scope_end();
    }
    it_model_set_chunk(m, 0);
    it_status ws = it_dist_send_wait(ctx->pp);
    if (!st) st = ws;
    if (!st) st = it_dist_all_reduce_host(ctx->pp, loss, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    return st;
}

void train_pipeline_report(const it_train_ctx *ctx) {
    const char *v = getenv("IT_PP_STATS");
    if (!ctx->pp || !v || !*v || *v == '0' || g_stats.steps < 2) return;
    int P = ctx->pp_size, M = (int)ctx->accum,
        V = ctx->cfg->virtual_pipeline_parallel > 1 ? ctx->cfg->virtual_pipeline_parallel : 1;
    /* GPipe's and 1F1B's bubble: (P-1)/(M+P-1) of a step; interleaved: (P-1)/(V*M+P-1) */
    double theory = (double)(P - 1) / (double)(V * M + P - 1);
    fprintf(stderr,
            "pipeline stats: stage %d of %d: blocked in receives %.1f%% of %d steps' time (%.1f of %.1f ms); "
            "the schedule's bubble (P-1)/(%sM+P-1) = %.1f%%; peak used %.1f MB\n",
            it_model_pp_rank(ctx->model), P, 100.0 * g_stats.wait_ms / g_stats.total_ms, g_stats.steps - 1,
            g_stats.wait_ms, g_stats.total_ms, V > 1 ? "V*" : "", 100.0 * theory, (double)g_stats.peak / 1048576.0);
}

it_status train_pipeline_steps(it_train_ctx *ctx, double *loss_sum) {
    /* the first step (start-up, allocation) is left out of the figures */
    double t0 = train_now_ms(), w0 = g_stats.wait_ms;
    if (g_stats.steps++ == 0) w0 = -1;
    it_status st = pipeline_steps(ctx, loss_sum);
    if (w0 < 0)
        g_stats.wait_ms = 0;
    else
        g_stats.total_ms += train_now_ms() - t0;
    it_mem_stats mem;
    if (!it_mem_stats_get(ctx->dev, &mem) && mem.peak_used > g_stats.peak) g_stats.peak = mem.peak_used;
    return st;
}

static it_status pipeline_steps(it_train_ctx *ctx, double *loss_sum) {
    pp_run r = {.ctx = ctx,
                .M = (int)ctx->accum,
                .V = ctx->cfg->virtual_pipeline_parallel > 1 ? ctx->cfg->virtual_pipeline_parallel : 1,
                .P = it_model_pp_size(ctx->model),
                .p = it_model_pp_rank(ctx->model)};
    int M = r.M, V = r.V, P = r.P, p = r.p;
    it_status st = IT_OK;
    r.mbs = calloc((size_t)(M * V), sizeof *r.mbs);
    if (!r.mbs) return it_error(IT_ERR_OOM, "pipeline: out of host memory");
    if (M * V > 1 && !ctx->acc) { /* ZeRO-2 let it go after the last step; V > 1 needs it too */
        it_tensor *g = it_model_grads(ctx->model);
        it_scope_begin();
        ctx->acc = it_scope_keep(it_tensor_new(ctx->dev, it_tensor_dtype(g), 1, (int64_t[]){it_tensor_numel(g)}));
        it_scope_end();
        if (!ctx->acc) st = it_last_status();
    }
    if (!st && V == 1 && ctx->cfg->pipeline_schedule == IT_PP_1F1B) { /* Megatron's 1F1B */
        int warm = P - p - 1 < M ? P - p - 1 : M;
        for (int i = 0; i < warm && !st; i++) st = pp_forward(&r, i, 0, loss_sum);
        for (int i = 0; i < M && !st; i++) {
            if (warm + i < M) st = pp_forward(&r, warm + i, 0, loss_sum);
            if (!st) st = pp_backward(&r, i, 0);
        }
    } else if (!st) {
        st = run_rules(&r, ctx->cfg->pipeline_schedule == IT_PP_1F1B, loss_sum);
    }
    it_status ws = it_dist_send_wait(ctx->pp);
    if (!st) st = ws;
    for (int i = 0; i < M * V; i++) {
        it_tensor_release(r.mbs[i].root);
        it_tensor_release(r.mbs[i].in);
        it_tensor_release(r.mbs[i].dy);
    }
    free(r.mbs);
    it_model_set_chunk(ctx->model, 0);
    if (st) it_tape_clear();
    return st;
}
