/* SGD, Adam and AdamW over flat buffers (one kernel call per step), the global gradient norm
 * and the clipping factor. Learning-rate schedules are in lr_schedule.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "core/internal.h"
#include "infinitrain/optim.h"

struct it_optimizer {
    it_optim_config cfg;
    it_tensor *params, *grads; /* retained */
    it_tensor *m, *v;          /* Adam moments (owned), NULL for SGD */
    it_tensor *low;            /* params rounded for autocast's products (owned), while it reads them */
    int64_t step;
};

it_status it_optim_kind_from_name(const char *name, it_optim_kind *out) {
    if (strcmp(name, "sgd") == 0)
        *out = IT_OPTIM_SGD;
    else if (strcmp(name, "adam") == 0)
        *out = IT_OPTIM_ADAM;
    else if (strcmp(name, "adamw") == 0)
        *out = IT_OPTIM_ADAMW;
    else
        return it_error(IT_ERR_INVALID_ARG, "unknown optimizer '%s' (expected sgd, adam or adamw)", name);
    return IT_OK;
}

const char *it_optim_kind_name(it_optim_kind kind) {
    return kind == IT_OPTIM_SGD ? "sgd" : kind == IT_OPTIM_ADAM ? "adam" : kind == IT_OPTIM_ADAMW ? "adamw" : "?";
}

it_status it_optimizer_new(const it_optim_config *cfg, it_tensor *params, it_tensor *grads, it_optimizer **out) {
    if (!params || !grads || it_tensor_numel(params) != it_tensor_numel(grads) || it_tensor_ndim(params) != 1 ||
        !it_device_equal(it_tensor_device(params), it_tensor_device(grads)))
        return it_error(IT_ERR_INVALID_ARG,
                        "optimizer: params and grads must be flat tensors of one length on one device");
    it_optimizer *o = calloc(1, sizeof *o);
    if (!o) return it_error(IT_ERR_OOM, "optimizer: out of host memory");
    o->cfg = *cfg;
    o->params = it_tensor_retain(params);
    o->grads = it_tensor_retain(grads);
    if (cfg->kind != IT_OPTIM_SGD) {
        int64_t n[1] = {it_tensor_numel(params)};
        o->m = it__tensor_new_owned(it_tensor_device(params), it_tensor_dtype(params), 1, n);
        o->v = it__tensor_new_owned(it_tensor_device(params), it_tensor_dtype(params), 1, n);
        if (!o->m || !o->v || it_tensor_fill(o->m, it_scalar_f64(0)) || it_tensor_fill(o->v, it_scalar_f64(0))) {
            it_status st = it_last_status();
            it_optimizer_free(o);
            return st;
        }
    }
    *out = o;
    return IT_OK;
}

void it_optimizer_free(it_optimizer *o) {
    if (!o) return;
    it_tensor_release(o->params);
    it_tensor_release(o->grads);
    it_tensor_release(o->m);
    it_tensor_release(o->v);
    it__autocast_forget(o->params);
    it_tensor_release(o->low);
    free(o);
}

size_t it_optimizer_state_bytes(const it_optimizer *o) {
    return (o->m ? it_tensor_nbytes(o->m) : 0) + (o->v ? it_tensor_nbytes(o->v) : 0);
}

it_optim_kind it_optimizer_kind(const it_optimizer *o) { return o->cfg.kind; }

it_status it_optimizer_state(it_optimizer *o, it_tensor **m, it_tensor **v, int64_t **step) {
    if (m) *m = o->m;
    if (v) *v = o->v;
    if (step) *step = &o->step;
    return IT_OK;
}

/* The copy of the parameters autocast reads in low precision, when it read one of them since
 * the last step: made in this step's pass (adam_step_round where the backend has it, else the
 * step then one cast of the whole buffer), so that no product rounds its weight itself. The
 * same bits as the per-use cast (cast() rounds either way). NULL: no copy wanted. */
static it_tensor *wanted_copy(it_optimizer *o) {
    it_dtype dt;
    /* IT_AUTOCAST_OPTIMIZER_COPY=0: no copy, every product's weight cast at its first use
     * after the step (the same bits; to compare the two, as test_autocast_copy does) */
    const char *env = getenv("IT_AUTOCAST_OPTIMIZER_COPY");
    bool off = env && strcmp(env, "0") == 0;
    if (!it__autocast_wants_copy(o->params, &dt) || off) {
        it_tensor_release(o->low);
        o->low = NULL;
        return NULL;
    }
    if (o->low && o->low->dtype != dt) {
        it_tensor_release(o->low);
        o->low = NULL;
    }
    if (!o->low) {
        int64_t n[1] = {it_tensor_numel(o->params)};
        o->low = it__tensor_new_owned(it_tensor_device(o->params), dt, 1, n);
        if (!o->low) it_error_clear(); /* out of memory for it: the products cast per use, as before */
    }
    return o->low;
}

it_status it_optimizer_step(it_optimizer *o, float lr, float grad_scale) {
    it_device dev = it_tensor_device(o->params);
    it_tdesc p = it_tensor_desc(o->params), g = it_tensor_desc(o->grads);
    o->step++;
    it__weights_written(); /* autocast's rounded copies of the parameters are stale from here */
    it_tensor *low = wanted_copy(o);
    it_tdesc ld = low ? it_tensor_desc(low) : p;
    it_status st;
    if (o->cfg.kind == IT_OPTIM_SGD) {
        st = KCALL(dev, sgd_step, lr, grad_scale, &p, &g);
        if (!st && low) st = KCALL(dev, cast, &p, &ld);
    } else {
        it_adam_args a = {lr,
                          o->cfg.beta1,
                          o->cfg.beta2,
                          o->cfg.eps,
                          o->cfg.weight_decay,
                          grad_scale,
                          o->step,
                          o->cfg.kind == IT_OPTIM_ADAMW};
        it_tdesc m = it_tensor_desc(o->m), v = it_tensor_desc(o->v);
        st = IT_ERR_UNSUPPORTED;
        if (low && it__kernel_native(dev, IT_SLOT(adam_step_round))) {
            st = KCALL(dev, adam_step_round, &a, &p, &g, &m, &v, &ld);
            if (st == IT_ERR_UNSUPPORTED) it_error_clear(); /* declined before writing: composed below */
        }
        if (st == IT_ERR_UNSUPPORTED) {
            st = KCALL(dev, adam_step, &a, &p, &g, &m, &v);
            if (!st && low) st = KCALL(dev, cast, &p, &ld);
        }
    }
    return st ? st : it__autocast_stepped(o->params, low);
}

it_status it_grad_norm(it_tensor *grads, double *norm) {
    it_device dev = it_tensor_device(grads);
    int64_t one[1] = {1};
    it_tensor *r = it__tensor_new_owned(dev, it_tensor_dtype(grads), 1, one);
    if (!r) return it_last_status();
    it_tdesc g = it_tensor_desc(grads), o = it_tensor_desc(r);
    it_status st = KCALL(dev, reduce, IT_REDUCE_SUMSQ, &g, &o);
    double sumsq = 0;
    if (!st) st = it_tensor_item(r, (int64_t[]){0}, &sumsq);
    it_tensor_release(r);
    if (!st) *norm = sqrt(sumsq);
    return st;
}

float it_clip_scale(double norm, float max_norm) {
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, in fp32 */
    float coef = max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}
