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

it_status it_optimizer_step(it_optimizer *o, float lr, float grad_scale) {
    it_device dev = it_tensor_device(o->params);
    it_tdesc p = it_tensor_desc(o->params), g = it_tensor_desc(o->grads);
    o->step++;
    it__weights_written(); /* autocast's rounded copies of the parameters are stale from here */
    if (o->cfg.kind == IT_OPTIM_SGD) return KCALL(dev, sgd_step, lr, grad_scale, &p, &g);
    it_adam_args a = {lr,
                      o->cfg.beta1,
                      o->cfg.beta2,
                      o->cfg.eps,
                      o->cfg.weight_decay,
                      grad_scale,
                      o->step,
                      o->cfg.kind == IT_OPTIM_ADAMW};
    it_tdesc m = it_tensor_desc(o->m), v = it_tensor_desc(o->v);
    return KCALL(dev, adam_step, &a, &p, &g, &m, &v);
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
