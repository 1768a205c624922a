/* Learning-rate schedules: InfiniTrain's CreateLRScheduler (LambdaLR, LinearLR and SequentialLR
 * over one optimizer) replayed on a plain value.
 *
 * Exactness: InfiniTrain computes every LR in float, one IEEE operation at a time, from the
 * same inputs. Each operation below is its own statement in InfiniTrain's order, so that no
 * compiler fuses a multiply and an add into an FMA (-march=native has FMA): GCC in ISO C mode
 * (-std=c11) does not contract at all, clang contracts only within one expression, and the
 * pragma turns that off too. tests/unit/test_lr_schedule.c recomputes the values through
 * volatile floats and compares bits. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "infinitrain/optim.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* std::numbers::pi_v<float> */
static const float pi_f = 3.14159265358979323846f;

static const char *const decay_names[] = {
    [IT_LR_NONE] = "none",
    [IT_LR_LINEAR] = "linear",
    [IT_LR_COSINE] = "cosine",
    [IT_LR_CONSTANT] = "constant",
    [IT_LR_INVERSE_SQRT] = "inverse-square-root",
};
#define N_DECAY ((int)(sizeof decay_names / sizeof decay_names[0]))

it_status it_lr_decay_from_name(const char *name, it_lr_decay *out) {
    for (int i = 0; i < N_DECAY; i++)
        if (strcmp(name, decay_names[i]) == 0) {
            *out = (it_lr_decay)i;
            return IT_OK;
        }
    return it_error(IT_ERR_INVALID_ARG,
                    "--lr_decay_style: unknown style '%s' (expected none, constant, linear, cosine or "
                    "inverse-square-root)",
                    name);
}

const char *it_lr_decay_name(it_lr_decay style) {
    return (int)style >= 0 && (int)style < N_DECAY ? decay_names[style] : "?";
}

/* ---- the schedules' formulas, as InfiniTrain's lambdas and LinearLR compute them ---- */

/* Iterations the main schedule decays over (its LinearLR total_iters), > 0 after validation. */
static int64_t decay_span(const it_lr_scheduler_config *c) { return c->decay_iters - c->warmup_iters; }

/* Warmup LambdaLR: (warmup_init + (max_lr - warmup_init) * step / W) / max_lr. */
static float warmup_lambda(const it_lr_scheduler_config *c, int64_t step) {
    float ratio = (float)step / (float)c->warmup_iters;
    float span = c->lr - c->warmup_init;
    float rise = span * ratio;
    float v = c->warmup_init + rise;
    return v / c->lr;
}

/* The main LambdaLR's lambda (constant, cosine, inverse-square-root). */
static float main_lambda(const it_lr_scheduler_config *c, int64_t step) {
    const float max_lr = c->lr, min_lr = c->min_lr;
    if (c->style == IT_LR_COSINE) {
        int64_t d = decay_span(c);
        if (step > d) return min_lr / max_lr;
        float ratio = (float)step / (float)d;
        float arg = pi_f * ratio;
        float cs = cosf(arg);
        float cs1 = cs + 1.0f;
        float coeff = 0.5f * cs1;
        float span = max_lr - min_lr;
        float part = coeff * span;
        float v = min_lr + part;
        return v / max_lr;
    }
    if (c->style == IT_LR_INVERSE_SQRT) {
        int64_t global = step + c->warmup_iters;
        if (global > c->decay_iters) return min_lr / max_lr;
        float warm = (float)(c->warmup_iters > 1 ? c->warmup_iters : 1);
        float cur = (float)(global > 1 ? global : 1);
        float sw = sqrtf(warm);
        float num = max_lr * sw;
        float sc = sqrtf(cur);
        float v = num / sc;
        float m = min_lr < v ? v : min_lr; /* std::max(min_lr, v) */
        return m / max_lr;
    }
    return 1.0f;
}

/* LinearLR(start 1, end min_lr / max_lr, total decay_span) closed form at last_step ls. */
static float linear_closed(const it_lr_scheduler_config *c, float base_lr, int64_t ls) {
    const float start = 1.0f, end = c->min_lr / c->lr;
    int64_t total = decay_span(c);
    if (ls >= total) return base_lr * end;
    float diff = end - start;
    float prod = diff * (float)ls;
    float q = prod / (float)total;
    float f = start + q;
    return base_lr * f;
}

/* LinearLR chained form: the next LR from the optimizer's current one. */
static float linear_chained(const it_lr_scheduler_config *c, float lr, int64_t ls, bool initial) {
    const float start = 1.0f, end = c->min_lr / c->lr;
    int64_t total = decay_span(c);
    if (ls == 0) return lr * start;
    if (ls > total || initial) return lr;
    if (ls == total) {
        float diff = end - start;
        float prod = diff * (float)(total - 1);
        float q = prod / (float)total;
        float prev = start + q;
        float r = end / prev;
        return lr * r;
    }
    float num = end - start;
    float a = start * (float)total;
    float b = (float)(ls - 1) * num;
    float den = a + b;
    float r = num / den;
    float g = 1.0f + r;
    return lr * g;
}

/* ---- the scheduler objects' Step / Step(epoch) / InitialStep ---- */

/* The main scheduler: LRScheduler::Step() (++last_step, chained form). */
static void main_step(it_lr_scheduler *s, it_lr_sched_node *n, bool initial) {
    n->last_step++;
    if (s->cfg.style == IT_LR_LINEAR)
        s->lr = linear_chained(&s->cfg, s->lr, n->last_step, initial);
    else
        s->lr = n->base_lr * main_lambda(&s->cfg, n->last_step);
}

/* The main scheduler: LRScheduler::Step(epoch) (closed form), as SequentialLR calls it at
 * its milestone. */
static void main_step_to(it_lr_scheduler *s, it_lr_sched_node *n, int64_t epoch) {
    n->last_step = epoch;
    if (s->cfg.style == IT_LR_LINEAR)
        s->lr = linear_closed(&s->cfg, n->base_lr, n->last_step);
    else
        s->lr = n->base_lr * main_lambda(&s->cfg, n->last_step);
}

static void warmup_step(it_lr_scheduler *s, it_lr_sched_node *n) {
    n->last_step++;
    s->lr = n->base_lr * warmup_lambda(&s->cfg, n->last_step);
}

it_status it_lr_scheduler_init(it_lr_scheduler *s, const it_lr_scheduler_config *cfg) {
    memset(s, 0, sizeof *s);
    it_lr_scheduler_config c = *cfg;
    if ((int)c.style < 0 || (int)c.style >= N_DECAY)
        return it_error(IT_ERR_INVALID_ARG, "--lr_decay_style: unknown style %d", (int)c.style);
    if (c.style == IT_LR_NONE) { /* no scheduler object: the flag LR throughout */
        s->cfg = c;
        s->lr = c.lr;
        s->top.base_lr = c.lr;
        return IT_OK;
    }
    const char *style = decay_names[c.style];
    if (!(c.lr > 0))
        return it_error(IT_ERR_INVALID_ARG, "--learning_rate: %g must be > 0 with --lr_decay_style %s", (double)c.lr,
                        style);
    if (!(c.warmup_init >= 0))
        return it_error(IT_ERR_INVALID_ARG, "--lr_warmup_init: %g must be >= 0", (double)c.warmup_init);
    if (!(c.min_lr >= 0)) return it_error(IT_ERR_INVALID_ARG, "--min_lr: %g must be >= 0", (double)c.min_lr);
    if (!(c.lr >= c.min_lr))
        return it_error(IT_ERR_INVALID_ARG, "--min_lr: %g must be <= --learning_rate %g", (double)c.min_lr,
                        (double)c.lr);
    if (!(c.warmup_init <= c.lr))
        return it_error(IT_ERR_INVALID_ARG, "--lr_warmup_init: %g must be <= --learning_rate %g", (double)c.warmup_init,
                        (double)c.lr);
    if (c.warmup_iters < 0)
        return it_error(IT_ERR_INVALID_ARG, "--lr_warmup_iters: %" PRId64 " must be >= 0", c.warmup_iters);
    if (c.decay_iters < 0)
        return it_error(IT_ERR_INVALID_ARG, "--lr_decay_iters: %" PRId64 " must be >= 0 (0 = --num_iteration)",
                        c.decay_iters);
    bool from_total = c.decay_iters == 0;
    if (from_total) c.decay_iters = c.total_iters;
    if (c.decay_iters <= 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "--lr_decay_iters: 0 means --num_iteration, which is %" PRId64 "; it must be > 0",
                        c.total_iters);
    if (c.warmup_iters >= c.decay_iters)
        return it_error(IT_ERR_INVALID_ARG, "--lr_warmup_iters: %" PRId64 " must be < --lr_decay_iters %" PRId64 "%s",
                        c.warmup_iters, c.decay_iters,
                        from_total ? " (--num_iteration, as --lr_decay_iters is 0)" : "");
    s->cfg = c;

    /* Replay CreateLRScheduler's constructions. Every LRScheduler takes base_lr from the
     * optimizer's initial LR, which the first one sets once to the flag LR. */
    const it_lr_sched_node fresh = {-1, c.lr};
    s->lr = c.lr;
    if (c.warmup_iters == 0) {
        s->top = fresh;
        main_step(s, &s->top, true); /* Create<>: InitialStep */
        return IT_OK;
    }
    s->child[1] = fresh;
    main_step(s, &s->child[1], true);
    s->child[0] = fresh;
    warmup_step(s, &s->child[0]);
    s->top = fresh;
    /* SequentialLR::InitialStep: back to the initial LR, undo the children's initial steps,
     * then only the warmup's */
    s->lr = s->child[0].base_lr;
    s->child[0].last_step--;
    s->child[1].last_step--;
    s->top.last_step++;
    warmup_step(s, &s->child[0]);
    return IT_OK;
}

void it_lr_scheduler_step(it_lr_scheduler *s) {
    if (s->cfg.style == IT_LR_NONE) {
        s->top.last_step++;
        return;
    }
    if (s->cfg.warmup_iters == 0) {
        main_step(s, &s->top, false);
        return;
    }
    /* SequentialLR::Step with milestones {W} */
    s->top.last_step++;
    if (s->top.last_step < s->cfg.warmup_iters)
        warmup_step(s, &s->child[0]);
    else if (s->top.last_step == s->cfg.warmup_iters)
        main_step_to(s, &s->child[1], 0);
    else
        main_step(s, &s->child[1], false);
}

void it_lr_scheduler_advance(it_lr_scheduler *s, int64_t n) {
    /* Past decay_iters every branch of it_lr_scheduler_step keeps the LR: the chained
     * LinearLR returns it unchanged once last_step > its total, the lambdas return min_lr / lr
     * (constant 1), the warmup is behind the milestone. One step of margin beyond that. */
    const int64_t flat = s->cfg.style == IT_LR_NONE ? 0 : s->cfg.decay_iters + 2;
    for (; n > 0 && s->top.last_step < flat; n--) it_lr_scheduler_step(s);
    if (n <= 0) return;
    s->top.last_step += n;
    if (s->cfg.style != IT_LR_NONE && s->cfg.warmup_iters > 0) s->child[1].last_step += n;
}

/* ---- state, with InfiniTrain's StateDict keys ---- */

static int node_keys(const it_lr_scheduler *s, const char *prefix, const it_lr_sched_node *n, it_lr_state_entry *out) {
    snprintf(out[0].key, sizeof out[0].key, "%slast_step", prefix);
    out[0].is_int = true, out[0].i = n->last_step, out[0].f = 0;
    snprintf(out[1].key, sizeof out[1].key, "%srecover_lr", prefix);
    out[1].is_int = false, out[1].i = 0, out[1].f = s->lr;
    snprintf(out[2].key, sizeof out[2].key, "%sbase_lr", prefix);
    out[2].is_int = false, out[2].i = 0, out[2].f = n->base_lr;
    return 3;
}

int it_lr_scheduler_state(const it_lr_scheduler *s, it_lr_state_entry out[IT_LR_STATE_MAX]) {
    if (s->cfg.style == IT_LR_NONE) return 0;
    int n = node_keys(s, "", &s->top, out);
    if (s->cfg.warmup_iters > 0) {
        n += node_keys(s, "scheduler_0.", &s->child[0], out + n);
        n += node_keys(s, "scheduler_1.", &s->child[1], out + n);
    }
    return n;
}

static const it_lr_state_entry *find_key(const it_lr_state_entry *in, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strncmp(in[i].key, key, sizeof in[i].key) == 0) return &in[i];
    return NULL;
}

it_status it_lr_scheduler_load_state(it_lr_scheduler *s, const it_lr_state_entry *in, int n) {
    it_lr_state_entry want[IT_LR_STATE_MAX];
    int nw = it_lr_scheduler_state(s, want);
    char what[96];
    snprintf(what, sizeof what, "--lr_decay_style %s with --lr_warmup_iters %" PRId64, decay_names[s->cfg.style],
             s->cfg.warmup_iters);
    for (int i = 0; i < n; i++)
        if (!find_key(want, nw, in[i].key))
            return it_error(IT_ERR_INVALID_ARG, "lr scheduler state: unexpected key '%.24s' for %s", in[i].key, what);
    it_lr_scheduler t = *s;
    it_lr_sched_node *nodes[3] = {&t.top, &t.child[0], &t.child[1]};
    for (int i = 0; i < nw; i++) {
        const it_lr_state_entry *e = find_key(in, n, want[i].key);
        if (!e) return it_error(IT_ERR_INVALID_ARG, "lr scheduler state: key '%s' missing for %s", want[i].key, what);
        if (e->is_int != want[i].is_int)
            return it_error(IT_ERR_INVALID_ARG, "lr scheduler state: key '%s' is %s, expected %s", e->key,
                            e->is_int ? "int64" : "float", want[i].is_int ? "int64" : "float");
        it_lr_sched_node *node = nodes[i / 3];
        int64_t min_step = i / 3 == 0 ? 0 : -1; /* a child not yet stepped is at -1 */
        if (e->is_int && e->i < min_step)
            return it_error(IT_ERR_INVALID_ARG, "lr scheduler state: %s is %" PRId64 ", expected >= %" PRId64, e->key,
                            e->i, min_step);
        if (!e->is_int && !(isfinite(e->f) && e->f >= 0))
            return it_error(IT_ERR_INVALID_ARG, "lr scheduler state: %s is %g, expected a finite LR >= 0", e->key,
                            (double)e->f);
        switch (i % 3) {
        case 0: node->last_step = e->i; break;
        case 1:
            if (i == 1) t.lr = e->f; /* LoadState ends with the top scheduler's recover_lr */
            break;
        default: node->base_lr = e->f; break;
        }
    }
    *s = t;
    return IT_OK;
}
