/* The training run every app shares: setup, the steps, the end of the run, teardown; and how
 * a failure is reported and becomes the process's exit status. The parts are in setup.c,
 * step.c and log.c (train_internal.h). */
#include <signal.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "infinitrain/hf.h"
#include "infinitrain/precision.h"
#include "infinitrain/profile.h"
#include "train/train_internal.h"

int it_train_exit_code(it_status st) {
    switch (st) {
    case IT_OK: return 0;
    case IT_ERR_INVALID_ARG:
    case IT_ERR_FORMAT:
    case IT_ERR_IO:
    case IT_ERR_NOT_FOUND: return 2; /* bad flags or input files: the user's to fix */
    default: return 1;
    }
}

/* After the last step: the kernel report and the llm.c checkpoint. */
static it_status train_finish(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st = IT_OK;
    train_pipeline_report(ctx);
    if (ctx->rank != 0) return IT_OK; /* DP rank 0: under TP its group saves together */
    if (c->backend_report && ctx->grank == 0 && (st = it_backend_report(ctx->dev.backend, stdout))) return st;
    if (c->output_checkpoint) {
        if ((st = it_model_save(ctx->model, c->output_checkpoint))) return it_error_context("--output_checkpoint: ");
        if (!ctx->quiet) printf("wrote %s\n", c->output_checkpoint);
    }
    if (c->output_hf) {
        it_hf_save_options o = {c->output_hf_dtype, 0};
        if (it_hf_parse_size(c->max_shard_size ? c->max_shard_size : "5GB", &o.max_shard_bytes) ||
            (st = it_hf_save(ctx->model, c->output_hf, &o)))
            return it_error_context("--output_hf: ");
        if (!ctx->quiet && ctx->grank == 0)
            printf("wrote %s (Hugging Face: config.json + safetensors)\n", c->output_hf);
    }
    return train_lora_finish(ctx);
}

/* --precision_check: every rank writes into the directory named by the latest start time. */
static it_status precision_begin(it_train_ctx *ctx) {
    it_precision_config pc;
    it_status st = it_precision_parse(ctx->cfg->precision_check, &pc);
    uint64_t stamp = (uint64_t)time(NULL);
    it_dist *job = ctx->job ? ctx->job : ctx->dist;
    if (!st && ctx->gworld > 1) st = it_dist_all_reduce_host(job, &stamp, 1, IT_DTYPE_U64, IT_CCL_MAX);
    return st ? st : it_precision_begin(&pc, ctx->grank, (int64_t)stamp);
}

/* ---- stopping on a signal: SIGINT (Ctrl-C), SIGTERM (a scheduler's preemption notice) or
 * SIGUSR1 (which mpirun forwards to every rank, where it kills the job on SIGINT and SIGTERM)
 * asks the run to stop after the step in progress; a second one (a second or more later) ends it
 * at once. A signal before the first step ends the run as it always did (nothing to save yet). */
static volatile sig_atomic_t g_stop_signal;
static struct timespec g_stop_first; /* when the first came (written by the handler alone) */

/* Seconds since the first signal (clock_gettime is async-signal-safe). */
static double since_first(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - g_stop_first.tv_sec) + 1e-9 * (double)(t.tv_nsec - g_stop_first.tv_nsec);
}

static void on_stop_signal(int sig) {
    if (g_stop_signal) {
        /* The second one (a step that does not end, a rank stuck): now. Launchers deliver one
         * notice twice within milliseconds (timeout(1) to the child and its group, a scheduler
         * to each task and through srun): a repeat within a second is the same notice. */
        if (since_first() < 1.0) return;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &g_stop_first);
    g_stop_signal = sig;
    it_dist_watchdog_signal(sig); /* a rank stuck in a collective says on whom before it goes */
}

typedef struct saved_handlers {
    struct sigaction intr, term, usr1;
} saved_handlers;

static void stop_signals_install(saved_handlers *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask); /* one handler at a time (g_stop_first) */
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sa.sa_flags = SA_RESTART;
    g_stop_signal = 0;
    sigaction(SIGINT, &sa, &old->intr);
    sigaction(SIGTERM, &sa, &old->term);
    sigaction(SIGUSR1, &sa, &old->usr1);
}

static void stop_signals_restore(const saved_handlers *old) {
    sigaction(SIGINT, &old->intr, NULL);
    sigaction(SIGTERM, &old->term, NULL);
    sigaction(SIGUSR1, &old->usr1, NULL);
}

/* After a step: the signal any rank of the job received (every rank stops after the same
 * step, so a collective decides it), else 0. */
static it_status stop_agreed(it_train_ctx *ctx, int *sig) {
    uint64_t v = (uint64_t)g_stop_signal;
    it_dist *job = ctx->job ? ctx->job : ctx->dist;
    if (ctx->gworld > 1) {
        it_status st = it_dist_all_reduce_host(job, &v, 1, IT_DTYPE_U64, IT_CCL_MAX);
        if (st) return st;
    }
    *sig = (int)v;
    return IT_OK;
}

/* The run stops after ctx->step on `sig`: a checkpoint there with --save (unless the step just
 * wrote one), and one line saying where to resume from. */
static it_status stop_on_signal(it_train_ctx *ctx, int sig) {
    const it_train_config *c = ctx->cfg;
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
    ctx->stopped_by = sig;
    it_status st = c->save && !train_ckpt_due(ctx) ? train_ckpt_save(ctx) : IT_OK;
    if (st || ctx->grank != 0) return st;
    if (c->save)
        fprintf(stderr,
                "%s: stopped by %s after step %d of %d; saved %s/checkpoint_step_%06d (resume with --load "
                "%s/checkpoint_step_%06d)\n",
                c->app, name, ctx->step, c->num_iteration, c->save, ctx->step, c->save, ctx->step);
    else
        fprintf(stderr,
                "%s: stopped by %s after step %d of %d; nothing saved (no --save)%s; the end-of-run outputs "
                "were not written\n",
                c->app, name, ctx->step, c->num_iteration, c->loss_log ? ", the loss log keeps the steps taken" : "");
    fflush(stderr);
    return IT_OK;
}

/* --max_skipped_steps updates in a row were skipped (guard.c): a checkpoint with --save (the
 * parameters are those of the last good step), and the run fails. */
static it_status stop_on_skips(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st = c->save && !train_ckpt_due(ctx) ? train_ckpt_save(ctx) : IT_OK;
    if (st) return st;
    char saved[4200] = "nothing saved (no --save)";
    if (c->save) snprintf(saved, sizeof saved, "saved %s/checkpoint_step_%06d", c->save, ctx->step);
    return it_error(IT_ERR_NUMERIC,
                    "stopped after step %d of %d: %d updates in a row were skipped (--max_skipped_steps %d); the "
                    "weights are the last good step's; %s",
                    ctx->step, c->num_iteration, ctx->guard.run, c->max_skipped_steps, saved);
}

static it_status train_loop(it_train_ctx *ctx) {
    it_status st;
    it_flash_attention_set(ctx->cfg->flash); /* samples, steps and validation alike */
    train_banner(ctx);
    if (ctx->cfg->freq_generate_txt > 0 && !ctx->cfg->quiet && ctx->rank == 0) {
        /* the start-up sample leaves the generator as it found it: a resumed run, which
         * samples at its start too, then draws the uninterrupted run's samples */
        uint64_t rng = ctx->rng;
        st = train_generate(ctx);
        ctx->rng = rng;
        if (st) return st;
    }
    it_backend_stats_reset(ctx->dev.backend); /* the report covers training steps only */
    if (ctx->cfg->profile && (st = it_profile_begin(ctx->cfg->profile, ctx->grank))) return st;
    if (ctx->cfg->precision_check && (st = precision_begin(ctx))) return st;
    it_autocast_set(ctx->cfg->dtype == IT_DTYPE_BF16, IT_DTYPE_BF16);
    st = IT_OK;
    saved_handlers old;
    bool declined_said = false;
    if (ctx->handle_signals) stop_signals_install(&old);
    for (int step = ctx->start_step + 1; step <= ctx->cfg->num_iteration && !st; step++) {
        it_dist_watchdog_step(step);
        if (!(st = train_step(ctx, step)) && !(st = train_log(ctx)) && train_val_due(ctx)) st = train_validate(ctx);
        if (!st && !declined_said && it_flash_attention_declined()) { /* once: why attention composed */
            declined_said = true;
            if (!ctx->cfg->quiet && ctx->rank == 0) {
                printf("attention: flash declined by the %s backend, composed instead: %s\n", ctx->dev.backend->name,
                       it_flash_attention_declined());
                fflush(stdout);
            }
        }
        if (!st && train_ckpt_due(ctx)) st = train_ckpt_save(ctx);
        if (!st && train_guard_exhausted(ctx)) {
            st = stop_on_skips(ctx);
            break;
        }
        int sig = 0;
        if (!st && ctx->handle_signals && step < ctx->cfg->num_iteration && !(st = stop_agreed(ctx, &sig)) && sig) {
            st = stop_on_signal(ctx, sig);
            break;
        }
    }
    int late = ctx->handle_signals && !ctx->stopped_by ? (int)g_stop_signal : 0;
    if (ctx->handle_signals) stop_signals_restore(&old);
    if (ctx->cfg->profile) { /* written also when a step failed */
        it_status pst = it_profile_end();
        if (!st) st = pst;
    }
    it_status pst = it_precision_end(); /* IT_OK when no check is open */
    if (!st) st = pst;
    it_autocast_set(false, IT_DTYPE_BF16);
    if (st && ctx->cfg->backend_report && ctx->rank == 0) {
        /* the report of the steps up to the failure; the failure's message is kept */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", it_last_error());
        printf("kernel report up to the failure:\n");
        it_backend_report(ctx->dev.backend, stdout);
        fflush(stdout);
        it_error(st, "%s", msg);
    }
    if (st || ctx->stopped_by) return st;
    st = train_finish(ctx);
    if (!st) train_summary(ctx);
    if (late && !st) {       /* during the last step: the run is complete; the process still ends by it */
        if (ctx->gworld > 1) /* (only this rank may have had it) */
            fprintf(stderr, "%s: rank %d: signal %d arrived during the last step: the run completed\n", ctx->cfg->app,
                    ctx->grank, late);
        else
            fprintf(stderr, "%s: signal %d arrived during the last step: the run completed\n", ctx->cfg->app, late);
        ctx->stopped_by = late;
    }
    return st;
}

/* Say what failed, once, where it should be said. A failure that one rank of a group meets
 * alone aborts the job (the others may be waiting for it in a collective) and does not
 * return. Returns whether the message was printed. */
static bool report_failure(const it_train_ctx *ctx, it_status st) {
    const char *app = ctx->cfg->app;
    if (ctx->gworld <= 1 || ctx->fail_scope == TRAIN_FAIL_BEFORE_GROUP) return false; /* the caller says it */
    if (ctx->fail_scope == TRAIN_FAIL_THIS_RANK) {
        fprintf(stderr, "%s: rank %d: %s\n", app, ctx->grank, it_last_error());
        fflush(stderr);
        it_dist_abort(ctx->dist, it_train_exit_code(st));
    }
    /* every rank failed alike: rank 0 says so before MPI_Finalize (after it, mpirun may
     * already be tearing the job down because another rank exited non-zero) */
    if (ctx->grank == 0) {
        fprintf(stderr, "%s: %s\n", app, it_last_error());
        fflush(stderr);
    }
    return true;
}

static it_status train_run(const it_train_config *c, it_train_result *result, bool *reported, int *stopped_by) {
    it_train_ctx ctx;
    it_status st = train_setup(&ctx, c, result);
    ctx.handle_signals = stopped_by != NULL;
    if (!st) st = train_loop(&ctx);
    /* The steps logged so far are whole lines: they are kept when training stops on an error. */
    if (ctx.loss_log) {
        it_status cst = it_afile_commit(ctx.loss_log);
        ctx.loss_log = NULL;
        if (cst && !st) st = it_error_context("--loss_log: ");
    }
    *reported = st && report_failure(&ctx, st);
    if (stopped_by) *stopped_by = ctx.stopped_by;
    train_teardown(&ctx);
    return st;
}

it_status it_train_run(const it_train_config *c, it_train_result *result) {
    bool reported;
    return train_run(c, result, &reported, NULL); /* signals stay the embedding program's */
}

int it_train_main(int argc, char **argv, const char *app) {
    it_train_config c;
    it_train_config_defaults(&c, app);
    bool help = false;
    size_t env_limit;
    if (it_train_parse_args(&c, argc, argv, &help) || it_mem_env_limit(&env_limit)) {
        fprintf(stderr, "%s: %s\n", app, it_last_error());
        it_train_config_release(&c);
        return 2;
    }
    if (help) {
        it_train_print_help(app, stdout);
        it_train_config_release(&c);
        return 0;
    }
    bool reported = false;
    int stopped_by = 0;
    it_status st = train_run(&c, NULL, &reported, &stopped_by);
    if (st && !reported) {
        /* Failed before the group formed (every rank alike): no rank can wait for another
         * to print, since mpirun ends the job at the first non-zero exit, so each says it. */
        int rank, world;
        it_dist_env(&rank, &world);
        if (world == 1)
            fprintf(stderr, "%s: %s\n", app, it_last_error());
        else
            fprintf(stderr, "%s: rank %d: %s\n", app, rank, it_last_error());
    }
    it_train_config_release(&c);
    if (!st && stopped_by) {
        /* End by the signal itself, now that everything is written: a shell running this in a
         * loop or a script then stops as it would have if the signal had killed the run (an
         * exit status of 128 + the signal would tell it the program handled the signal). */
        fflush(NULL);
#ifdef __SANITIZE_ADDRESS__
        __lsan_do_leak_check(); /* the exit-time check a death by signal skips (sanitizer builds) */
#endif
        signal(stopped_by, SIG_DFL);
        raise(stopped_by);
        return 128 + stopped_by; /* (the signal is blocked or ignored: its code) */
    }
    return it_train_exit_code(st);
}
