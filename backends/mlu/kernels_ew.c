/* Launch sides of the MLU's elementwise, reduce, cross-entropy and optimizer slots, over the
 * BANG kernels of bang/ (no CNNL call for them is known, docs/backends/mlu.md C2):
 *
 *   unary, binary       bang/elementwise.mlu (it_bang_elementwise)
 *   reduce              bang/reduce.mlu      (it_bang_reduce)
 *   cross_entropy_fwd   bang/crossentropy.mlu (it_bang_cross_entropy_fwd)
 *   cross_entropy_bwd   bang/crossentropy.mlu (it_bang_cross_entropy_bwd)
 *   sgd_step, adam_step bang/optim.mlu       (it_bang_sgd, it_bang_adam)
 *
 * Each checks and plans on the host (host_ew.c) and enqueues one cnrtFuncTypeBlock launch of
 * at most MLU_BANG_MAX_TASKS tasks. Calls they do not take (not float32, non-dense outputs,
 * stride patterns listed in host_ew.c) return IT_ERR_UNSUPPORTED before anything is enqueued:
 * the core runs that call on the CPU fallback. Compiled only with cncc (IT_MLU_HAVE_BANG);
 * otherwise the slots stay NULL. */
#include "mlu.h"

#ifdef IT_MLU_HAVE_BANG
#include "bang/it_bang_math.h"

#define SAME_OP(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME_OP(IT_BANG_UNARY_RECIP, IT_UNARY_RECIP) && SAME_OP(IT_BANG_UNARY_COUNT, IT_UNARY_COUNT) &&
                   SAME_OP(IT_BANG_UNARY_GELU, IT_UNARY_GELU) && SAME_OP(IT_BANG_UNARY_SQRT, IT_UNARY_SQRT) &&
                   SAME_OP(IT_BANG_UNARY_RSQRT, IT_UNARY_RSQRT),
               "it_bang_math.h's unary op codes are backend.h's");
_Static_assert(SAME_OP(IT_BANG_BINARY_TANH_BWD, IT_BINARY_TANH_BWD) && SAME_OP(IT_BANG_BINARY_COUNT, IT_BINARY_COUNT),
               "it_bang_math.h's binary op codes are backend.h's");
_Static_assert(SAME_OP(IT_BANG_REDUCE_SUMSQ, IT_REDUCE_SUMSQ) && SAME_OP(IT_BANG_REDUCE_MAX, IT_REDUCE_MAX) &&
                   SAME_OP(IT_BANG_REDUCE_MEAN, IT_REDUCE_MEAN),
               "it_bang_math.h's reduce op codes are backend.h's");

static it_status launched(const char *fn, int ret, const char *kernel) {
    if (ret == MLU_cnrtSuccess) return IT_OK;
    return mlu_cnrt_error(ret, kernel, "kernel %s", fn);
}

/* out = f(x): x's strides (0 = broadcast) planned into coalesced rows; out dense. */
it_status mlu_bang_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    it_bang_ew_args g;
    it_status st = mlu_stream_resolve("unary", s, &s);
    if (st) return st;
    if ((int)op < 0 || op >= IT_UNARY_COUNT) return it_error(IT_ERR_INVALID_ARG, "mlu unary: op %d out of range", op);
    if ((st = mlu_ew_plan("unary", out, x, NULL, &g))) return st;
    if (g.total == 0) return IT_OK;
    g.op = (int)op, g.alpha = alpha;
    int tasks = mlu_bang_tasks(mlu_ew_pieces(&g), MLU_BANG_MAX_TASKS);
    return launched("unary", it_bang_elementwise(s->queue, tasks, x->data, NULL, out->data, &g), "it_bang_elementwise");
}

/* out = f(a, b); out may be a's or b's memory exactly (each piece is read before written). */
it_status mlu_bang_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    it_bang_ew_args g;
    it_status st = mlu_stream_resolve("binary", s, &s);
    if (st) return st;
    if ((int)op < 0 || op >= IT_BINARY_COUNT) return it_error(IT_ERR_INVALID_ARG, "mlu binary: op %d out of range", op);
    if ((st = mlu_ew_plan("binary", out, a, b, &g))) return st;
    if (g.total == 0) return IT_OK;
    g.op = (int)op;
    int tasks = mlu_bang_tasks(mlu_ew_pieces(&g), MLU_BANG_MAX_TASKS);
    return launched("binary", it_bang_elementwise(s->queue, tasks, a->data, b->data, out->data, &g),
                    "it_bang_elementwise");
}

/* out (x with 1 on reduced dims) = the CPU's pairwise tree over the reduced dims. */
it_status mlu_bang_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    it_bang_reduce_args g;
    it_status st = mlu_stream_resolve("reduce", s, &s);
    if (st || (st = mlu_reduce_plan((int)op, x, out, &g))) return st;
    int64_t items = mlu_reduce_items(&g);
    if (items == 0 || g.I == 0) return IT_OK;
    return launched("reduce",
                    it_bang_reduce(s->queue, mlu_bang_tasks(items, MLU_BANG_MAX_TASKS), x->data, out->data, &g),
                    "it_bang_reduce");
}

it_status mlu_bang_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                     it_tdesc *losses) {
    const char *fn = "cross_entropy_fwd";
    int64_t N, Vp, ts, rs;
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st || (st = mlu_ce_plan(fn, logits, targets, valid, losses, "losses", true, NULL, &N, &Vp, &ts, &rs)))
        return st;
    if (N == 0) return IT_OK;
    return launched(fn,
                    it_bang_cross_entropy_fwd(s->queue, mlu_bang_tasks(N, MLU_BANG_MAX_TASKS), logits->data,
                                              targets->data, targets->dtype == IT_DTYPE_I64, ts, losses->data, N, Vp,
                                              valid),
                    "it_bang_cross_entropy_fwd");
}

it_status mlu_bang_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                     const it_tdesc *dlosses, it_tdesc *dlogits) {
    const char *fn = "cross_entropy_bwd";
    int64_t N, Vp, ts, rs;
    it_status st = mlu_stream_resolve(fn, s, &s);
    if (st || (st = mlu_ce_plan(fn, logits, targets, valid, dlosses, "dlosses", false, dlogits, &N, &Vp, &ts, &rs)))
        return st;
    if (N == 0 || Vp == 0) return IT_OK;
    return launched(fn,
                    it_bang_cross_entropy_bwd(s->queue, mlu_bang_tasks(N, MLU_BANG_MAX_TASKS), logits->data,
                                              targets->data, targets->dtype == IT_DTYPE_I64, ts, dlosses->data, rs,
                                              dlogits->data, N, Vp, valid),
                    "it_bang_cross_entropy_bwd");
}

static int optim_tasks(int64_t n) {
    return mlu_bang_tasks((n + IT_BANG_OPT_CHUNK - 1) / IT_BANG_OPT_CHUNK, MLU_BANG_MAX_TASKS);
}

it_status mlu_bang_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    int64_t n;
    it_status st = mlu_stream_resolve("sgd_step", s, &s);
    if (st || (st = mlu_optim_plan("sgd_step", param, grad, NULL, NULL, &n))) return st;
    if (n == 0) return IT_OK;
    return launched("sgd_step",
                    it_bang_sgd(s->queue, optim_tasks(n), param->data, grad->data, n, grad_scale, mlu_sgd_neg_lr(lr)),
                    "it_bang_sgd");
}

it_status mlu_bang_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad, it_tdesc *m,
                             it_tdesc *v) {
    int64_t n;
    it_bang_adam_coef c;
    it_status st = mlu_stream_resolve("adam_step", s, &s);
    if (st || (st = mlu_optim_plan("adam_step", param, grad, m, v, &n)) || (st = mlu_adam_coef(args, &c))) return st;
    if (n == 0) return IT_OK;
    return launched("adam_step",
                    it_bang_adam(s->queue, optim_tasks(n), param->data, grad->data, m->data, v->data, n, &c),
                    "it_bang_adam");
}
#endif
