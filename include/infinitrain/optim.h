/* Optimizers over a model's flat parameter/gradient buffers, learning-rate schedules and
 * gradient clipping. */
#ifndef INFINITRAIN_OPTIM_H
#define INFINITRAIN_OPTIM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum it_optim_kind { IT_OPTIM_SGD = 0, IT_OPTIM_ADAM = 1, IT_OPTIM_ADAMW = 2 } it_optim_kind;

typedef struct it_optim_config {
    it_optim_kind kind;
    float beta1, beta2, eps; /* 0.9, 0.999, 1e-8 as torch */
    float weight_decay;      /* adam: L2 added to the gradient; adamw: decoupled; sgd: unused */
} it_optim_config;

IT_API it_status it_optim_kind_from_name(const char *name, it_optim_kind *out);
IT_API const char *it_optim_kind_name(it_optim_kind kind);

typedef struct it_optimizer it_optimizer;
/* params and grads: flat tensors of equal length on one device. Moments are allocated here
 * (Adam/AdamW), zero-initialized. */
IT_API it_status it_optimizer_new(const it_optim_config *cfg, it_tensor *params, it_tensor *grads,
                                  it_optimizer **out);
IT_API void it_optimizer_free(it_optimizer *o);
/* One update with learning rate lr; grad_scale multiplies the gradient first (clipping). */
IT_API it_status it_optimizer_step(it_optimizer *o, float lr, float grad_scale);
IT_API size_t it_optimizer_state_bytes(const it_optimizer *o);
IT_API it_optim_kind it_optimizer_kind(const it_optimizer *o);
/* The state a checkpoint saves and restores: Adam's moments (flat, like the parameters; NULL
 * for SGD) and the step count (the bias corrections' t), all owned by the optimizer. */
IT_API it_status it_optimizer_state(it_optimizer *o, it_tensor **m, it_tensor **v, int64_t **step);

/* Global L2 norm of a flat gradient (synchronizing host read). */
IT_API it_status it_grad_norm(it_tensor *grads, double *norm);
/* torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)). */
IT_API float it_clip_scale(double norm, float max_norm);

typedef enum it_lr_decay { IT_LR_NONE = 0, IT_LR_LINEAR = 1, IT_LR_COSINE = 2 } it_lr_decay;
typedef struct it_lr_schedule {
    float lr, min_lr;
    int warmup_iters, total_iters;
    it_lr_decay decay;
} it_lr_schedule;
IT_API it_status it_lr_decay_from_name(const char *name, it_lr_decay *out);
/* Learning rate at step (1-based): linear warmup lr*step/warmup over the first warmup
 * steps, then constant (none), or decay to min_lr at total_iters (linear or cosine). */
IT_API float it_lr_at(const it_lr_schedule *s, int step);

#ifdef __cplusplus
}
#endif
#endif
