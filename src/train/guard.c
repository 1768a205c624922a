/* The bad-step guard (train_guard_check, called by step.c between the gradient reduction and
 * the update): a step whose loss is not finite, or whose gradient norm is not finite where the
 * step computes one (--grad_clip > 0), or, opt-in, whose loss is more than --loss_spike_zscore
 * standard deviations above the mean of the last GUARD_WINDOW updated steps (llm.c's -sl, with
 * its window of 128, checked once the window is full), is not applied: no parameter, optimizer
 * moment, optimizer step count or schedule changes, and the batch is spent. Every rank sees the
 * same reduced loss and norm, so every rank decides alike without a collective.
 * --skip_nonfinite false turns the non-finite check off (the update then runs on whatever the
 * gradients hold, InfiniTrain's behaviour); --max_skipped_steps K skips in a row stop the run
 * (driver.c: a checkpoint with --save, exit status 1). */
#include <math.h>
#include <stdio.h>

#include "train/train_internal.h"

/* mean and (population) standard deviation of the window, as llm.c's OutlierDetector */
static void window_stats(const it_train_guard *g, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < GUARD_WINDOW; i++) s += g->win[i];
    *mean = s / GUARD_WINDOW;
    for (int i = 0; i < GUARD_WINDOW; i++) ss += (g->win[i] - *mean) * (g->win[i] - *mean);
    *sd = sqrt(ss / GUARD_WINDOW);
}

bool train_guard_check(it_train_ctx *ctx, double loss, const double *norm) {
    const it_train_config *c = ctx->cfg;
    it_train_guard *g = &ctx->guard;
    char why[160] = "";
    if (c->skip_nonfinite && !isfinite(loss))
        snprintf(why, sizeof why, "the loss is %g", loss);
    else if (c->skip_nonfinite && norm && !isfinite(*norm))
        snprintf(why, sizeof why, "the gradient norm is %g", *norm);
    else if (c->loss_spike_zscore > 0 && g->n >= GUARD_WINDOW) {
        double mean, sd;
        window_stats(g, &mean, &sd);
        double z = sd > 0 ? (loss - mean) / sd : 0;
        if (z > c->loss_spike_zscore)
            snprintf(why, sizeof why,
                     "the loss %.6f is %.1f standard deviations above the mean %.6f of the last %d steps", loss, z,
                     mean, GUARD_WINDOW);
    }
    ctx->skipped = *why != 0;
    if (!ctx->skipped) {
        g->run = 0;
        if (isfinite(loss)) {
            g->win[g->at] = loss;
            g->at = (g->at + 1) % GUARD_WINDOW;
            if (g->n < GUARD_WINDOW) g->n++;
        }
        return false;
    }
    g->run++;
    g->total++;
    if (!ctx->quiet) {
        printf("step %d: update skipped: %s (%d skipped so far, %d in a row)\n", ctx->step, why, g->total, g->run);
        fflush(stdout);
    }
    return true;
}

bool train_guard_exhausted(const it_train_ctx *ctx) {
    return ctx->cfg->max_skipped_steps > 0 && ctx->guard.run >= ctx->cfg->max_skipped_steps;
}
