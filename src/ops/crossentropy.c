/* Mean cross entropy over rows, with llm.c's padded vocabulary (only the first `valid`
 * logits of a row take part). Half-precision logits (bf16, fp16: autocast's LM head) are
 * computed in fp32, as autocast runs cross entropy: read widened by the backend's fused
 * cross_entropy_low_* slots where it has both, else cast to an fp32 copy first (the same
 * bits either way); the loss is fp32 and their gradient comes back in their dtype. */
#include <stdlib.h>

#include "ops/ops_common.h"

static bool is_low(it_dtype dt) { return dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16; }

/* dlogits in half logits' dtype, composed: the fp32 kernel on the logits widened, its
 * result rounded once (what the fused slot gives in one pass). */
static it_status low_bwd_composed(it_device dev, it_tensor *logits, const it_tdesc *dt, int64_t valid,
                                  const it_tdesc *ddl, it_tdesc *dg) {
    it_tensor *wide = it_tensor_to_dtype(logits, IT_DTYPE_FP32);
    it_tensor *gw = wide ? it__empty_like(wide) : NULL;
    if (!gw) return it_last_status();
    it_tdesc dw = it_tensor_desc(wide), dgw = it_tensor_desc(gw);
    it_status st = KCALL(dev, cross_entropy_bwd, &dw, dt, valid, ddl, &dgw);
    return st ? st : KCALL(dev, cast, &dgw, dg);
}

/* One backward call of rows [.., ..) of the logits into dg, through the fused half slot
 * where the logits are half (composed when it declines before writing), else the fp32 slot. */
static it_status bwd_rows(it_device dev, it_tensor *logits, it_tensor *targets, int64_t valid, it_tensor *dls,
                          it_tdesc *dg) {
    it_tdesc dlg = it_tensor_desc(logits), dt = it_tensor_desc(targets), ddl = it_tensor_desc(dls);
    if (!is_low(logits->dtype)) return KCALL(dev, cross_entropy_bwd, &dlg, &dt, valid, &ddl, dg);
    it_status st = KCALL(dev, cross_entropy_low_bwd, &dlg, &dt, valid, &ddl, dg);
    if (st != IT_ERR_UNSUPPORTED) return st;
    it_error_clear(); /* declined before writing: composed */
    return low_bwd_composed(dev, logits, &dt, valid, &ddl, dg);
}

/* Rows of dlogits to compute at a time into the scratch buffer when they are written over the
 * logits: 32 MB of them (at least one row). IT_CE_OVERWRITE_ROWS in the environment sets the
 * count (0: never write over the logits, a second buffer of their size as it_cross_entropy
 * takes), for the tests and the bench that compare both; a malformed value is ignored. */
static int64_t overwrite_rows(const it_tensor *l2) {
    int64_t row = l2->shape[1] * (int64_t)it_dtype_size(l2->dtype);
    int64_t r = row > 0 ? ((int64_t)32 << 20) / row : 1;
    const char *env = getenv("IT_CE_OVERWRITE_ROWS");
    char *end = NULL;
    long long v = env && *env ? strtoll(env, &end, 10) : -1;
    if (end && *end == '\0' && v >= 0) r = (int64_t)v;
    return r < 0 ? 0 : r > l2->shape[0] ? l2->shape[0] : r;
}

/* dlogits written over the logits themselves (their last use, it__cross_entropy_last_use):
 * rows computed a chunk at a time into a scratch buffer, then copied over the rows they came
 * from, so that no kernel is ever handed an output aliasing its input and the memory of a
 * second (N, Vp) buffer is never taken. The gradient is then a view of the logits' storage,
 * taken over as their gradient (nothing reads the logits after this). */
static it_status backward_over_logits(it_node *n, it_tensor *dl) {
    it_tensor *logits = n->saved[0], *targets = n->saved[1];
    it_device dev = it_tensor_device(logits);
    int64_t rows = logits->shape[0], step = n->i[1];
    int64_t sshape[2] = {step, logits->shape[1]};
    it_tensor *scratch = it_tensor_new(dev, logits->dtype, 2, sshape);
    if (!scratch) return it_last_status();
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t r1 = r0 + step < rows ? r0 + step : rows;
        it_tensor *lc = it_tensor_slice(logits, 0, r0, r1, 1), *tc = it_tensor_slice(targets, 0, r0, r1, 1);
        it_tensor *dc = it_tensor_slice(dl, 0, r0, r1, 1), *sc = it_tensor_slice(scratch, 0, 0, r1 - r0, 1);
        if (!lc || !tc || !dc || !sc) return it_last_status();
        it_tdesc ds = it_tensor_desc(sc);
        it_status st = bwd_rows(dev, lc, tc, n->i[0], dc, &ds);
        if (st || (st = it_tensor_copy_(lc, sc))) return st;
    }
    it_tensor *in = n->in[0];
    it_tensor *g = it_tensor_view(logits, in->ndim, in->shape);
    if (!g) return it_last_status();
    return it__accum_grad_taken(in, g);
}

/* dlogits = (softmax - onehot) * dloss / N, through the kernel with per-row weights dloss/N
 * (dy is the 0-D gradient of the mean, broadcast to N rows without a host read). */
static it_status cross_entropy_backward(it_node *n, it_tensor *dy) {
    it_tensor *logits = n->saved[0], *targets = n->saved[1];
    int64_t rows = logits->shape[0];
    int64_t one[1] = {1}, shape[1] = {rows};
    it_tensor *e = it_tensor_expand(it_tensor_view(dy, 1, one), 1, shape);
    it_tensor *dl = it_tensor_new(it_tensor_device(dy), dy->dtype, 1, shape);
    if (!e || !dl) return it_last_status();
    it_tdesc de = it_tensor_desc(e), ddl = it_tensor_desc(dl);
    it_device dev = it_tensor_device(logits);
    it_status st = KCALL(dev, unary, IT_UNARY_SCALE, (float)n->f[0], &de, &ddl);
    if (st) return st;
    if (n->i[1]) return backward_over_logits(n, dl);
    /* The gradient in the input's own shape, seen by the kernel as (rows, Vp): a view
     * tensor would share g's storage, and accumulation would then copy g instead of taking
     * it over (a full extra pass over the logits). */
    it_tensor *g = it__empty_like(n->in[0]);
    if (!g) return it_last_status();
    it_tdesc dg = it_tensor_desc(g);
    dg.ndim = 2;
    dg.shape[0] = rows;
    dg.shape[1] = logits->shape[1];
    dg.strides[0] = logits->shape[1];
    dg.strides[1] = 1;
    if ((st = bwd_rows(dev, logits, targets, n->i[0], dl, &dg))) return st;
    return it__accum_grad(n->in[0], g);
}

static it_tensor *cross_entropy(it_tensor *logits, it_tensor *targets, int64_t valid, bool last_use) {
    OP_REQUIRE(logits && targets);
    int64_t vp = logits->ndim ? logits->shape[logits->ndim - 1] : 0;
    if (logits->ndim < 1 || targets->ndim != logits->ndim - 1 ||
        it_tensor_numel(targets) * vp != it_tensor_numel(logits)) {
        it_error(IT_ERR_INVALID_ARG, "cross_entropy: targets must have the logits' shape without the last dimension");
        return NULL;
    }
    if (valid < 1 || valid > vp) {
        it_error(IT_ERR_INVALID_ARG, "cross_entropy: valid vocabulary %lld outside 1..%lld", (long long)valid,
                 (long long)vp);
        return NULL;
    }
    if (targets->dtype != IT_DTYPE_I32 && targets->dtype != IT_DTYPE_I64) {
        it_error(IT_ERR_INVALID_ARG, "cross_entropy: targets must be int32 or int64, got %s",
                 it_dtype_name(targets->dtype));
        return NULL;
    }
    it_device dev = it_tensor_device(logits);
    bool low = is_low(logits->dtype);
    if (low && !(it__kernel_native(dev, IT_SLOT(cross_entropy_low_fwd)) &&
                 it__kernel_native(dev, IT_SLOT(cross_entropy_low_bwd))))
        return cross_entropy(it_cast(logits, IT_DTYPE_FP32), targets, valid, last_use);
    int64_t rows = it_tensor_numel(targets);
    int64_t s2[2] = {rows, vp}, s1[1] = {rows};
    it_tensor *l2 = it_tensor_view(it_tensor_contiguous(logits), 2, s2);
    it_tensor *t1 = it_tensor_view(it_tensor_contiguous(targets), 1, s1);
    it_dtype ldt = logits->dtype == IT_DTYPE_FP64 ? IT_DTYPE_FP64 : IT_DTYPE_FP32;
    it_tensor *losses = it_tensor_new(dev, ldt, 1, s1);
    OP_REQUIRE(l2 && t1 && losses);
    it_tdesc dl = it_tensor_desc(l2), dt = it_tensor_desc(t1), dls = it_tensor_desc(losses);
    it_status st = low ? KCALL(dev, cross_entropy_low_fwd, &dl, &dt, valid, &dls)
                       : KCALL(dev, cross_entropy_fwd, &dl, &dt, valid, &dls);
    if (low && st == IT_ERR_UNSUPPORTED) { /* declined before writing: the fp32 copy after all */
        it_error_clear();
        return cross_entropy(it_cast(logits, IT_DTYPE_FP32), targets, valid, last_use);
    }
    if (st) return NULL;
    /* The mean: a plain (no-grad) reduction; the node below differentiates the whole op. */
    int64_t none[1] = {1};
    it_tensor *m = it_tensor_new(dev, ldt, 1, none);
    OP_REQUIRE(m);
    it_tdesc dm = it_tensor_desc(m);
    if (KCALL(dev, reduce, IT_REDUCE_MEAN, &dls, &dm)) return NULL;
    it_tensor *out = it_tensor_view(m, 0, none);
    OP_REQUIRE(out);
    if (it__needs_grad(1, &logits)) {
        it_node *n = it__node_record("cross_entropy", cross_entropy_backward, out, 1, &logits);
        OP_REQUIRE(n);
        it__node_save(n, l2);
        it__node_save(n, t1);
        n->i[0] = valid;
        /* The logits' last use, and a contiguous (rows, Vp) the loss may write over: l2 is
         * then the logits themselves, or an fp32 copy made for this loss alone. */
        n->i[1] = last_use && it_tensor_is_contiguous(l2) && rows ? overwrite_rows(l2) : 0;
        n->f[0] = rows ? 1.0 / (double)rows : 0.0;
    }
    return out;
}

it_tensor *it_cross_entropy(it_tensor *logits, it_tensor *targets, int64_t valid) {
    return cross_entropy(logits, targets, valid, false);
}

it_tensor *it__cross_entropy_last_use(it_tensor *logits, it_tensor *targets, int64_t valid) {
    return cross_entropy(logits, targets, valid, true);
}
