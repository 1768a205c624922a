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
IT_API it_status it_optimizer_new(const it_optim_config *cfg, it_tensor *params, it_tensor *grads, it_optimizer **out);
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

/* --lr_decay_style. NONE, LINEAR and COSINE keep their numbers (flag tables store them). */
typedef enum it_lr_decay {
    IT_LR_NONE = 0,
    IT_LR_LINEAR = 1,
    IT_LR_COSINE = 2,
    IT_LR_CONSTANT = 3,
    IT_LR_INVERSE_SQRT = 4
} it_lr_decay;
/* none, constant, linear, cosine, inverse-square-root. */
IT_API it_status it_lr_decay_from_name(const char *name, it_lr_decay *out);
IT_API const char *it_lr_decay_name(it_lr_decay style);

/* InfiniTrain's CreateLRScheduler (infini_train/src/lr_scheduler.cc), step for step and in its
 * float arithmetic:
 *   none      no scheduler: every step uses lr; the other fields are ignored, nothing validated.
 *   constant  LambdaLR(1).
 *   linear    LinearLR(start 1, end min_lr/lr, over D = decay_iters - warmup_iters), chained
 *             form (each step multiplies the previous LR).
 *   cosine    LambdaLR: min_lr + 0.5 (cos(pi s/D) + 1) (lr - min_lr), min_lr after D.
 *   inverse-square-root  LambdaLR: max(min_lr, lr sqrt(max(W,1)) / sqrt(max(s+W,1))), min_lr
 *             once s + W > decay_iters.
 * warmup_iters W > 0 puts a LambdaLR warmup_init + (lr - warmup_init) s/W in front, as a
 * SequentialLR with milestone W. Training step k (1-based) uses the LR after k-1 scheduler
 * steps: step 1 gets warmup_init (or the main schedule's value at 0), step W+1 the main
 * schedule's first value. */
typedef struct it_lr_scheduler_config {
    it_lr_decay style;
    float lr;             /* --learning_rate: the peak LR, > 0 unless style is none */
    float min_lr;         /* --min_lr: 0 <= min_lr <= lr */
    float warmup_init;    /* --lr_warmup_init: 0 <= warmup_init <= lr */
    int64_t warmup_iters; /* --lr_warmup_iters: 0 <= W < decay iterations */
    int64_t decay_iters;  /* --lr_decay_iters: >= 0, 0 = total_iters */
    int64_t total_iters;  /* --num_iteration */
} it_lr_scheduler_config;

/* One of InfiniTrain's LRScheduler objects: StateDict keys last_step and base_lr (recover_lr
 * is the optimizer's LR, shared by all of them: it_lr_scheduler.lr). */
typedef struct it_lr_sched_node {
    int64_t last_step;
    float base_lr;
} it_lr_sched_node;

/* A value (no heap): copy it to snapshot, assign it back to restore. With warmup_iters > 0,
 * top is the SequentialLR and child[0] / child[1] the warmup / main schedulers; without,
 * top is the main scheduler and the children are unused. */
typedef struct it_lr_scheduler {
    it_lr_scheduler_config cfg; /* as validated, decay_iters resolved (> 0) */
    float lr;                   /* the LR the coming optimizer step uses (recover_lr) */
    it_lr_sched_node top, child[2];
} it_lr_scheduler;

/* Validates cfg (one-line IT_ERR_INVALID_ARG naming the flag, in InfiniTrain's order of
 * checks) and builds the schedule as InfiniTrain constructs it (its InitialStep calls). */
IT_API it_status it_lr_scheduler_init(it_lr_scheduler *s, const it_lr_scheduler_config *cfg);
/* The LR for the coming optimizer step, which the step line prints. */
static inline float it_lr_scheduler_lr(const it_lr_scheduler *s) { return s->lr; }
/* Advance once, after the optimizer step (InfiniTrain's scheduler->Step()). */
IT_API void it_lr_scheduler_step(it_lr_scheduler *s);
/* Advance n times, exactly as n calls of it_lr_scheduler_step, in time bounded by the
 * schedule's length rather than n: once the scheduler is past decay_iters its LR no longer
 * changes, so only the counters move (a resume to step 2e9 costs decay_iters steps). */
IT_API void it_lr_scheduler_advance(it_lr_scheduler *s, int64_t n);

/* The scheduler's state as InfiniTrain's StateDict: last_step (int64), recover_lr and base_lr
 * (float), and with warmup scheduler_0.* and scheduler_1.* for the children, in that order.
 * style none has no state (0 entries; InfiniTrain writes no lr_scheduler.ckpt). */
#define IT_LR_STATE_MAX 9
typedef struct it_lr_state_entry {
    char key[24];
    bool is_int; /* int64 i, else float f */
    int64_t i;
    float f;
} it_lr_state_entry;
IT_API int it_lr_scheduler_state(const it_lr_scheduler *s, it_lr_state_entry out[IT_LR_STATE_MAX]);
/* Restore state into a scheduler initialized with the same config: every key of
 * it_lr_scheduler_state must be present with its type, no other key; the LR becomes the
 * top recover_lr, as InfiniTrain's LoadState sets it. Then stepping continues bitwise as if
 * never stopped. */
IT_API it_status it_lr_scheduler_load_state(it_lr_scheduler *s, const it_lr_state_entry *in, int n);

#ifdef __cplusplus
}
#endif
#endif
