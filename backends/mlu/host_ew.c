/* Pure host planning of the MLU elementwise, reduce, cross-entropy and optimizer kernels
 * (bang/elementwise.mlu, reduce.mlu, crossentropy.mlu, optim.mlu; launched by kernels_ew.c):
 * argument checks, stride coalescing, the (O, R, I) view of a reduction, and the optimizer
 * scalars formed as the CPU backend forms them. No driver call; unit-tested everywhere
 * (tests/unit/test_mlu_host.c includes this file).
 *
 * What the kernels take, and what is declined (IT_ERR_UNSUPPORTED before anything is written,
 * so the core runs that call on the CPU fallback):
 *   - float32 only (float64 / bfloat16 / float16 declined);
 *   - outputs dense (row-major contiguous), as backend.h states for outputs;
 *   - elementwise inputs: any strides (0 = broadcast) once dims are coalesced, provided a
 *     non-unit inner stride fits __memcpy's int32 byte stride;
 *   - reduce: the reduced dims must coalesce into one (x viewed as (O, R, I): kept dims before,
 *     reduced, kept dims after, each group one stride), with a dense inner group;
 *   - cross entropy: dense logits; targets / losses / dlosses any single element stride;
 *   - optimizers: dense flat tensors (the CPU backend requires the same). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bang/it_bang_math.h"
#include "infinitrain/scalar/it_scalar_adam.h"
#include "mlu.h"

static bool byte_stride_ok(int64_t st) { return st >= 0 && st <= INT_MAX / 4; }

/* elements of t, which must hold `n` elements at linear index i * stride; false when its
 * dims do not collapse into one stride */
bool mlu_flat_stride(const it_tdesc *t, int64_t *n, int64_t *stride) {
    int64_t cnt = 1, st = 1;
    bool have = false;
    for (int d = t->ndim - 1; d >= 0; d--) cnt *= t->shape[d];
    *n = cnt;
    if (cnt == 0) {
        *stride = 1;
        return true;
    }
    int64_t inner = 1; /* elements spanned by the dims after d */
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (!have) {
            st = t->strides[d];
            have = true;
        } else if (t->strides[d] != st * inner) {
            return false;
        }
        inner *= t->shape[d];
    }
    *stride = have ? st : 1;
    return true;
}

/* ---------------------------------------------------------------- unary / binary */

it_status mlu_ew_plan(const char *fn, const it_tdesc *out, const it_tdesc *a, const it_tdesc *b, it_bang_ew_args *g) {
    const it_tdesc *in[2] = {a, b};
    const char *names[2] = {b ? "a" : "x", "b"};
    int nin = b ? 2 : 1;
    if (!out || !a) return it_error(IT_ERR_INVALID_ARG, "mlu %s: NULL operand", fn);
    if (out->ndim < 0 || out->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: out.ndim = %d outside [0, %d]", fn, out->ndim, IT_MAX_DIMS);
    for (int k = 0; k < nin; k++) {
        if (in[k]->dtype != out->dtype)
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s is %s, out is %s", fn, names[k],
                            it_dtype_name(in[k]->dtype), it_dtype_name(out->dtype));
        if (in[k]->ndim != out->ndim)
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s.ndim %d != out.ndim %d", fn, names[k], in[k]->ndim,
                            out->ndim);
        for (int d = 0; d < out->ndim; d++)
            if (in[k]->shape[d] != out->shape[d])
                return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s.shape[%d] = %lld, out's is %lld", fn, names[k], d,
                                (long long)in[k]->shape[d], (long long)out->shape[d]);
    }
    if (out->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the BANG kernel takes float32)", fn,
                        it_dtype_name(out->dtype));
    if (!mlu_desc_contiguous(out))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: output 'out' is not contiguous (the BANG kernel writes dense)",
                        fn);
    memset(g, 0, sizeof *g);
    g->total = mlu_desc_numel(out);
    /* coalesce as the CPU's iter_build: drop size-1 dims, merge a dim into the previous one
     * when every operand steps through both as through one */
    int nd = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t n = out->shape[d];
        if (n == 1) continue;
        int64_t sa = a->strides[d], sb = b ? b->strides[d] : 0;
        if (nd > 0 && g->sa[nd - 1] == sa * n && g->sb[nd - 1] == sb * n) {
            g->shape[nd - 1] *= n;
            g->sa[nd - 1] = sa, g->sb[nd - 1] = sb;
        } else {
            g->shape[nd] = n, g->sa[nd] = sa, g->sb[nd] = sb;
            nd++;
        }
    }
    if (nd == 0) { /* one element */
        g->shape[0] = 1, g->sa[0] = 1, g->sb[0] = b ? 1 : 0;
        nd = 1;
    }
    g->nd = nd;
    int64_t sa = g->sa[nd - 1], sb = g->sb[nd - 1];
    if (!byte_stride_ok(sa) || (b && !byte_stride_ok(sb)))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: inner stride %lld elements exceeds __memcpy's int32 byte stride",
                        fn, (long long)(byte_stride_ok(sa) ? sb : sa));
    g->binary = b != NULL;
    return IT_OK;
}

int64_t mlu_ew_pieces(const it_bang_ew_args *g) {
    if (g->total == 0) return 0;
    int64_t inner = g->shape[g->nd - 1];
    return g->total / inner * ((inner + IT_BANG_EW_CHUNK - 1) / IT_BANG_EW_CHUNK);
}

/* element offset of row `row` (an index over dims 0..nd-2, row-major) in an operand with
 * strides st; elementwise.mlu computes the same */
int64_t mlu_ew_row_offset(const it_bang_ew_args *g, const int64_t *st, int64_t row) {
    int64_t off = 0;
    for (int d = g->nd - 2; d >= 0; d--) {
        off += (row % g->shape[d]) * st[d];
        row /= g->shape[d];
    }
    return off;
}

/* ---------------------------------------------------------------- reduce */

it_status mlu_reduce_plan(int op, const it_tdesc *x, const it_tdesc *out, it_bang_reduce_args *g) {
    const char *fn = "reduce";
    if ((int)op < 0 || op >= IT_REDUCE_COUNT) return it_error(IT_ERR_INVALID_ARG, "mlu reduce: op %d out of range", op);
    if (x->ndim != out->ndim)
        return it_error(IT_ERR_INVALID_ARG, "mlu reduce: out.ndim %d != x.ndim %d", out->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (out->shape[d] != x->shape[d] && out->shape[d] != 1)
            return it_error(IT_ERR_INVALID_ARG, "mlu reduce: out.shape[%d] = %lld is neither x's %lld nor 1", d,
                            (long long)out->shape[d], (long long)x->shape[d]);
    if (x->dtype != out->dtype)
        return it_error(IT_ERR_INVALID_ARG, "mlu reduce: out is %s, x is %s", it_dtype_name(out->dtype),
                        it_dtype_name(x->dtype));
    if (x->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu reduce: dtype %s (the BANG kernel takes float32)",
                        it_dtype_name(x->dtype));
    if (!mlu_desc_contiguous(out))
        return it_error(IT_ERR_UNSUPPORTED,
                        "mlu reduce: output 'out' is not contiguous (the BANG kernel writes dense)");
    /* groups of adjacent non-1 dims of the same kind (kept / reduced), coalesced on x's strides */
    int kind[IT_MAX_DIMS], ng = 0;
    int64_t size[IT_MAX_DIMS], st[IT_MAX_DIMS];
    int64_t nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t n = x->shape[d];
        int red = out->shape[d] == 1 && n != 1;
        if (red) nred *= n;
        if (n == 1) continue;
        if (ng > 0 && kind[ng - 1] == red && st[ng - 1] == x->strides[d] * n) {
            size[ng - 1] *= n;
            st[ng - 1] = x->strides[d];
        } else {
            kind[ng] = red, size[ng] = n, st[ng] = x->strides[d];
            ng++;
        }
    }
    memset(g, 0, sizeof *g);
    g->op = op;
    g->O = 1, g->R = 1, g->I = 1, g->xo = 0, g->xr = 1, g->xi = 1;
    int r = -1;
    for (int i = 0; i < ng; i++)
        if (kind[i]) {
            if (r >= 0)
                return it_error(IT_ERR_UNSUPPORTED,
                                "mlu %s: the reduced dims do not coalesce into one (x strided or reduced dims apart)",
                                fn);
            r = i;
        }
    if (r < 0) { /* nothing reduced: every kept group is "outer", summed over one element */
        if (ng > 1) return it_error(IT_ERR_UNSUPPORTED, "mlu %s: x's kept dims do not coalesce into one stride", fn);
        if (ng == 1) g->O = size[0], g->xo = st[0];
    } else {
        if (r > 1 || ng - r - 1 > 1)
            return it_error(IT_ERR_UNSUPPORTED, "mlu %s: x's kept dims do not coalesce into one stride on each side",
                            fn);
        g->R = size[r], g->xr = st[r];
        if (r == 1) g->O = size[0], g->xo = st[0];
        if (r + 1 < ng) {
            g->I = size[r + 1], g->xi = st[r + 1];
            if (g->xi != 1)
                return it_error(IT_ERR_UNSUPPORTED,
                                "mlu %s: x's innermost kept dim has stride %lld (the kernel needs 1)", fn,
                                (long long)g->xi);
        }
    }
    if (nred == 0) g->R = 0; /* an empty reduction: the identity (the kernel's tree of no leaves) */
    if (g->I == 1 && g->R > 1 && !byte_stride_ok(g->xr))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: reduced stride %lld exceeds __memcpy's int32 byte stride", fn,
                        (long long)g->xr);
    if (g->I > 1 && !byte_stride_ok(g->xr))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: row stride %lld exceeds __memcpy's int32 byte stride", fn,
                        (long long)g->xr);
    return IT_OK;
}

/* work items of the reduce kernel: outputs (I = 1) or (output row, column block) pairs */
int64_t mlu_reduce_items(const it_bang_reduce_args *g) {
    if (g->I == 1) return g->O;
    return g->O * ((g->I + IT_BANG_RED_COLS - 1) / IT_BANG_RED_COLS);
}

/* ---------------------------------------------------------------- cross entropy */

it_status mlu_ce_plan(const char *fn, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                      const it_tdesc *rowvec, const char *rowvec_name, bool rowvec_dense, const it_tdesc *dlogits,
                      int64_t *N, int64_t *Vp, int64_t *ts, int64_t *rs) {
    if (logits->ndim < 2)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: logits must be (N, Vp), got ndim %d", fn, logits->ndim);
    if (targets->dtype != IT_DTYPE_I32 && targets->dtype != IT_DTYPE_I64)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: targets dtype %s is not int32 or int64", fn,
                        it_dtype_name(targets->dtype));
    *Vp = logits->shape[logits->ndim - 1];
    *N = *Vp == 0 ? 0 : mlu_desc_numel(logits) / *Vp;
    if (*Vp == 0) { /* rows of no columns: N is the product of the leading dims */
        int64_t n = 1;
        for (int d = 0; d < logits->ndim - 1; d++) n *= logits->shape[d];
        *N = n;
    }
    int64_t tn, rn;
    bool tflat = mlu_flat_stride(targets, &tn, ts), rflat = mlu_flat_stride(rowvec, &rn, rs);
    if (tn != *N || rn != *N)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s has %lld elements, %s %lld, logits have N = %lld rows", fn,
                        "targets", (long long)tn, rowvec_name, (long long)rn, (long long)*N);
    if (valid < 0 || valid > *Vp || (valid == 0 && *N > 0))
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: valid = %lld outside [1, Vp = %lld]", fn, (long long)valid,
                        (long long)*Vp);
    if (rowvec->dtype != logits->dtype || (dlogits && dlogits->dtype != logits->dtype))
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s%s dtype differs from the logits' %s", fn, rowvec_name,
                        dlogits ? " or dlogits" : "", it_dtype_name(logits->dtype));
    if (dlogits) {
        if (dlogits->ndim != logits->ndim)
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: dlogits.ndim %d != logits.ndim %d", fn, dlogits->ndim,
                            logits->ndim);
        for (int d = 0; d < logits->ndim; d++)
            if (dlogits->shape[d] != logits->shape[d])
                return it_error(IT_ERR_INVALID_ARG, "mlu %s: dlogits.shape[%d] = %lld, logits' is %lld", fn, d,
                                (long long)dlogits->shape[d], (long long)logits->shape[d]);
    }
    if (logits->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the BANG kernel takes float32)", fn,
                        it_dtype_name(logits->dtype));
    if (!mlu_desc_contiguous(logits))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: logits not contiguous (the BANG kernel streams dense rows)", fn);
    if (dlogits && !mlu_desc_contiguous(dlogits))
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: output 'dlogits' is not contiguous", fn);
    if (!tflat || !rflat)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: %s do not have one element stride", fn,
                        !tflat ? "targets" : rowvec_name);
    if (rowvec_dense && *rs != 1 && *N > 1)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: output '%s' is not contiguous", fn, rowvec_name);
    return IT_OK;
}

/* ---------------------------------------------------------------- optimizers */

/* param (and grad, m, v when given) dense float32 of one length n */
it_status mlu_optim_plan(const char *fn, const it_tdesc *param, const it_tdesc *grad, const it_tdesc *m,
                         const it_tdesc *v, int64_t *n) {
    const it_tdesc *t[4] = {param, grad, m, v};
    const char *names[4] = {"param", "grad", "m", "v"};
    *n = mlu_desc_numel(param);
    for (int i = 0; i < 4; i++) {
        if (!t[i]) {
            if (i < 2) return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s is NULL", fn, names[i]);
            continue;
        }
        if (t[i]->dtype != param->dtype)
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s is %s, param is %s", fn, names[i],
                            it_dtype_name(t[i]->dtype), it_dtype_name(param->dtype));
        if (mlu_desc_numel(t[i]) != *n)
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s has %lld elements, param has %lld", fn, names[i],
                            (long long)mlu_desc_numel(t[i]), (long long)*n);
    }
    if (param->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: dtype %s (the BANG kernel takes float32)", fn,
                        it_dtype_name(param->dtype));
    for (int i = 0; i < 4; i++)
        if (t[i] && !mlu_desc_contiguous(t[i]))
            return it_error(IT_ERR_INVALID_ARG, "mlu %s: %s is not contiguous", fn, names[i]);
    return IT_OK;
}

float mlu_sgd_neg_lr(float lr) { return (float)-it_f32_as_decimal(lr); }

/* The scalars of it_scalar_adam.h (the CPU's and CUDA's), rounded once to float; the BANG
 * kernel's struct holds them under the same names. */
it_status mlu_adam_coef(const it_adam_args *a, it_bang_adam_coef *c) {
    if (a == NULL) return it_error(IT_ERR_INVALID_ARG, "mlu adam_step: args is NULL");
    if (a->step < 1)
        return it_error(IT_ERR_INVALID_ARG, "mlu adam_step: step = %lld, must be >= 1", (long long)a->step);
    it_sc_adam_f64c d = it_sc_adam_make(a);
    it_sc_adam_f32c f = it_sc_adam_to_f32(&d);
    c->b1 = f.b1, c->omb1 = f.omb1, c->b2 = f.b2, c->omb2 = f.omb2;
    c->eps = f.eps, c->wd = f.wd, c->decay = f.decay, c->nss = f.nss, c->bc2s = f.bc2s, c->gs = f.gs;
    c->mode = f.mode == IT_SC_WD_DECOUPLED ? IT_BANG_WD_DECOUPLED
              : f.mode == IT_SC_WD_COUPLED ? IT_BANG_WD_COUPLED
                                           : IT_BANG_WD_NONE;
    return IT_OK;
}
