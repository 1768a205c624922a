/* The training driver's parts and the context they share.
 *
 *   setup.c   train_setup: validate, build every resource, in stages (each says whether a
 *             failure in it is met by every rank together or by one alone); train_teardown
 *   step.c    train_step: one optimizer step (micro-steps, gradient reduction, clipping,
 *             update); the micro-step loop is ctx->forward_backward, which a pipeline
 *             schedule may replace
 *   log.c     train_banner, train_log (loss log, step line, experts, progress, samples),
 *             train_generate
 *   driver.c  it_train_run / it_train_main: setup, the steps, finish, teardown, and the one
 *             status -> exit code mapping
 *   flags.c   the flag table */
#ifndef IT_TRAIN_INTERNAL_H
#define IT_TRAIN_INTERNAL_H

#include "core/afile.h"
#include "core/internal.h"
#include "infinitrain/data.h"
#include "infinitrain/dist.h"
#include "infinitrain/train.h"

/* Who meets a failure: decides how it is reported and whether the job is aborted. */
typedef enum train_fail_scope {
    TRAIN_FAIL_BEFORE_GROUP, /* before the ranks formed a group: each rank says it, exits */
    TRAIN_FAIL_ALL_RANKS,    /* every rank fails alike (a collective decided it): rank 0 says it */
    TRAIN_FAIL_THIS_RANK     /* this rank alone: it says so and aborts the job (others may wait) */
} train_fail_scope;

typedef struct it_train_ctx it_train_ctx;

/* The bad-step guard's state (guard.c): the losses of the last GUARD_WINDOW updated steps (a
 * ring: n of them, the next at `at`), the skips in a row and in all. */
#define GUARD_WINDOW 128
typedef struct it_train_guard {
    double win[GUARD_WINDOW];
    int n, at, run, total;
} it_train_guard;

struct it_train_ctx {
    const it_train_config *cfg;
    it_train_result *result; /* may be NULL */
    it_device dev;
    /* The data-parallel group, this rank's place in it and its size (under tensor parallelism
     * the DP group of the grid: loader shards, loss means, DDP/ZeRO, checkpoints' ddp_size). */
    it_dist *dist;
    int rank, world;
    /* The whole job: its group (NULL when it is `dist`, without a grid), global rank, size. */
    it_dist *job;
    int grank, gworld;
    it_dist_grid *grid; /* --tensor_parallel > 1: DP x TP (x PP) groups; dist and tp are its */
    it_dist *tp;        /* the TP group (NULL: no tensor parallelism) */
    int tp_size;        /* 1 without */
    it_dist *pp;        /* the PP group (NULL: no pipeline parallelism) */
    int pp_size;        /* 1 without */
    /* Context parallelism: the CP group (NULL: none), its size (1 without) and this rank's
     * place. With it `dist` is the DP x CP group (gradients, ZeRO, loss means) while the data
     * is DP's: data_rank/data_world (the loader's shard, the batch arithmetic, checkpoints'
     * data position; rank/world without CP), and each rank keeps Tl = T/CP rows of every
     * sequence (it_cp_slice_host). */
    it_dist *cp;
    int cp_size, cp_rank;
    int data_rank, data_world;
    int64_t Tl;
    it_dist *mp; /* TP x PP: the ranks holding one model replica (NULL: neither); owned */
    bool quiet;  /* no banner, step lines or samples: --quiet or a rank other than 0 */
    train_fail_scope fail_scope;

    it_model *model;
    const it_model_info *info;
    it_loader *loader;
    it_loader *val_loader; /* --input_val_bin with --val_loss_every */
    int64_t val_steps;     /* batches per rank in one validation */
    double val_loss;       /* the last one */
    int val_step;          /* the step it was taken after (0: none yet) */
    char saved[4096];      /* the last checkpoint directory this run saved ("" none) */
    it_tokenizer *tok;
    it_optimizer *opt;     /* without ZeRO */
    it_zero *zero;         /* --zero_stage 1 or 2 */
    it_grad_sync *gsync;   /* DDP without ZeRO: buckets reduced while backward runs */
    it_tensor *acc;        /* accumulation > 1: the earlier micro-steps' gradient sum */
    it_afile *loss_log;    /* rank 0; written under a temporary name, renamed at the end */
    int32_t *hx, *hy;      /* one micro-batch's inputs and targets, B*T each */
    int64_t B, T, total;   /* total = tokens per step over all ranks */
    int64_t accum;         /* micro-steps per step on each rank */
    it_lr_scheduler sched; /* InfiniTrain's: advanced after each optimizer step */
    uint64_t rng;          /* sampling */
    double t_start;        /* ms, when the first step began */

    /* The micro-steps of one step: forward, loss, backward, gradients in the model's buffer
     * (reduced over the ranks when gsync is set). Adds the micro-steps' losses to *loss_sum. */
    it_status (*forward_backward)(it_train_ctx *ctx, double *loss_sum);

    /* --load: the checkpoint's trainer state (a json_t), the directory read and the real path
     * of the one resumed from (never pruned); the run continues after start_step */
    void *resume;
    char *resume_dir, *resumed_from;
    char *load_dir; /* the checkpoint --load named (latest or a save root resolved: checkpoint.c) */
    int start_step;

    /* SIGINT/SIGTERM (the CLI only): stop after the step, save a checkpoint with --save; the
     * signal that stopped the run, else 0 */
    bool handle_signals;
    int stopped_by;

    /* the bad-step guard (guard.c) and whether the step just taken skipped its update */
    it_train_guard guard;
    bool skipped;

    /* the step just taken */
    int step;
    double loss, step_ms;
    double wait_ms; /* of step_ms, the time spent waiting in collectives and receives */
    float lr;
};

it_status train_setup(it_train_ctx *ctx, const it_train_config *c, it_train_result *result);
/* The ZeRO stage the flags ask for (--zero_stage, or 1 with --use_distributed_optimizer). */
int train_zero_stage(const it_train_config *c);
void train_teardown(it_train_ctx *ctx);
it_status train_micro_steps(it_train_ctx *ctx, double *loss_sum);
/* step.c: context parallelism's cut of one micro-batch's x and y (B x T each), in place: this
 * rank's B x Tl (nothing without CP) */
void train_cp_rows(const it_train_ctx *ctx, int32_t *x, int32_t *y);
/* step.c: grads = acc + grads, elementwise in place (the earlier micro-steps' sum first) */
it_status train_add_into(it_tensor *grads, it_tensor *acc);
/* pipeline.c: the micro-steps as a pipeline schedule (--pipeline_parallel > 1) */
it_status train_pipeline_steps(it_train_ctx *ctx, double *loss_sum);
/* One batch's loss through the pipeline, without autograd (validation); every stage gets it. */
it_status train_pipeline_loss(it_train_ctx *ctx, it_tensor *x, it_tensor *y, double *loss);
/* IT_PP_STATS=1: this stage's time blocked in receives against the schedule's bubble */
void train_pipeline_report(const it_train_ctx *ctx);
it_status train_step(it_train_ctx *ctx, int step);
void train_banner(const it_train_ctx *ctx);
it_status train_log(it_train_ctx *ctx);
it_status train_generate(it_train_ctx *ctx);
/* After a completed run (rank 0): steps, time, the last train and val loss, what was saved and
 * the command that writes text with it. */
void train_summary(const it_train_ctx *ctx);
double train_now_ms(void); /* CLOCK_MONOTONIC */

/* setup.c: --lora_save_path, --lora_merge_output after the last step (rank 0) */
it_status train_lora_finish(it_train_ctx *ctx);
/* setup.c: --lora_target_modules, or the app's default list */
const char *train_lora_targets(const it_train_config *c);

/* guard.c: whether step ctx->step skips its update (loss: the step's mean loss over the ranks;
 * norm: its gradient norm, NULL when the step computes none); says why on stdout (rank 0) */
bool train_guard_check(it_train_ctx *ctx, double loss, const double *norm);
/* --max_skipped_steps skips in a row were reached */
bool train_guard_exhausted(const it_train_ctx *ctx);

/* eval.c */
it_status train_val_setup(it_train_ctx *ctx);
bool train_val_due(const it_train_ctx *ctx);
it_status train_validate(it_train_ctx *ctx);

/* checkpoint.c */
it_status train_ckpt_load_model(it_train_ctx *ctx); /* --load: validate, the parameters */
it_status train_ckpt_load_state(it_train_ctx *ctx); /* --load: optimizer, data position, RNG, step */
it_status train_ckpt_prepare(it_train_ctx *ctx);    /* --save: make the directory, check it */
bool train_ckpt_due(const it_train_ctx *ctx);
it_status train_ckpt_save(it_train_ctx *ctx);
void train_ckpt_release(it_train_ctx *ctx);
/* The parameters from DIR/model.ckpt by name and shape (entries the model lacks: a note). */
IT_API it_status it_ckpt_load_model_dir(it_model *m, const char *dir, bool quiet);
/* A checkpoint directory of the model alone (step 0, no optimizer state); DIR must not exist. */
IT_API it_status it_ckpt_save_model_dir(it_model *m, const char *app, const char *source, const char *dir);
IT_API it_status it_ckpt_origin(const char *dir, char *app, size_t napp, char *source, size_t nsource);
/* The --hf_model the checkpoint's run started from ("" when none). */
IT_API it_status it_ckpt_origin_hf(const char *dir, char *hf, size_t n);
/* The model a checkpoint directory holds, built as its run built it (from the run's
 * --hf_model or --llmc_filepath, or a GPT-2 from its --model and sizing flags), its LoRA
 * adapters applied as trainer_state.json records them, every parameter from model.ckpt. */
IT_API it_status it_ckpt_model_new(const char *dir, it_device dev, it_model **out);

/* flags.c: one hash per flag that every rank must agree on, with its name; returns the count. */
IT_API int it_train_flags_agree_hashes(const it_train_config *c, uint64_t *hashes, const char **names, int max);

#endif
