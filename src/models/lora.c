/* LoRA adapters (InfiniTrain's nn/lora: LoRAConfig, LoRALinear, lora_utils).
 *
 * An adapted linear layer computes y = x W^T + b + s (x A^T) B^T with s = alpha / r,
 * A (r, in) and B (out, r). Every adapter tensor is a view into one flat buffer of their own
 * (and its gradient into another), in layout order: A then B for each adapted layer. The base
 * parameters are frozen: they keep no gradient buffer and autograd records no gradient for
 * them, so a frozen linear's backward is the input gradient's GEMM alone.
 *
 * Initialization is LoRALinear::InitLoRAWeights with LoRAConfig's defaults: A Kaiming-uniform
 * with a = sqrt(5) (fan_in, leaky-ReLU gain sqrt(2 / (1 + a^2)), so the bound is
 * sqrt(3) * gain / sqrt(in) = 1 / sqrt(in)), B zero. InfiniTrain draws A from
 * std::random_device, which no run can reproduce; here the draws come from --seed (splitmix64,
 * a stream of its own), A after A in layout order, row-major. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autograd/node.h"
#include "core/afile.h"
#include "core/precision_hooks.h"
#include "infinitrain/dist.h"
#include "models/model_impl.h"

#define LORA_MAGIC 0x4C4F5241u /* "LORA" */
#define LORA_VERSION 1u
#define LORA_SEED_STREAM 0x4C6F5241ull /* keeps A's draws apart from the model's initialization */
#define LORA_NAME_MAX 1024

struct it__lora {
    int rank;
    float alpha, scale;
    it_tensor *params, *grads; /* flat, owned */
    it_lora_tensor_info *t;    /* 2 per adapted layer: A at 2k, B at 2k+1 (names and views owned) */
    int n;
    int64_t numel;
    int64_t full_numel; /* the one-rank adapter buffer's (= numel without TP or PP) */
    /* The whole model's adapter tensors in layout order (under PP the other stages' too; else
     * this rank's, whole): what the draws, the file and a load go by. */
    struct lora_whole {
        char *name;
        int64_t shape[2], offset; /* in the one-rank adapter buffer */
        bool is_b;
    } * w;
    int nw;
};

/* ---------------------------------------------------------------- tensor parallel slices */

it_model_param_info it__lora_param_view(const it_lora_tensor_info *t) {
    it_model_param_info p = {.role = t->split == IT_PARAM_SPLIT_COLUMN ? t->base->role : IT_PARAM_ROLE_MLP_UP,
                             .split = t->split,
                             .ndim = 2,
                             .shape = {t->shape[0], t->shape[1]},
                             .full_shape = {t->full_shape[0], t->full_shape[1]},
                             .offset = t->offset,
                             .full_offset = t->full_offset,
                             .numel = t->numel,
                             .q_rows = t->base->q_rows,
                             .kv_rows = t->base->kv_rows,
                             .param = t->param,
                             .grad = t->grad};
    return p;
}

typedef struct slice_ctx {
    float *local, *full;
    bool to_full;
} slice_ctx;

static void slice_run(void *p, int64_t full_at, int64_t local_at, int64_t n) {
    slice_ctx *c = p;
    if (c->to_full)
        memcpy(c->full + full_at, c->local + local_at, sizeof(float) * (size_t)n);
    else
        memcpy(c->local + local_at, c->full + full_at, sizeof(float) * (size_t)n);
}

/* local <- rank r's slices of the whole adapter buffer `full` (or the reverse). */
static void slices(const struct it__lora *l, int tp, int r, float *local, float *full, bool to_full) {
    slice_ctx c = {local, full, to_full};
    for (int i = 0; i < l->n; i++) {
        it_model_param_info p = it__lora_param_view(&l->t[i]);
        it__param_runs(&p, tp, r, slice_run, &c);
    }
}

/* ---------------------------------------------------------------- targets */

/* The next comma-separated target, blanks trimmed (LoRAConfig's parse); empty ones skipped.
 * Returns false at the end. */
static bool next_target(const char **p, char *out, size_t cap) {
    while (**p) {
        const char *s = *p, *e = strchr(s, ',');
        if (!e) e = s + strlen(s);
        *p = *e ? e + 1 : e;
        while (s < e && strchr(" \t\r\n", *s)) s++;
        while (e > s && strchr(" \t\r\n", e[-1])) e--;
        if (e == s) continue;
        size_t n = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
        memcpy(out, s, n);
        out[n] = '\0';
        return true;
    }
    return false;
}

static bool is_target(const char *module, const char *targets) {
    char t[256];
    for (const char *p = targets; next_target(&p, t, sizeof t);)
        if (it_model_name_matches(module, t)) return true;
    return false;
}

/* ---------------------------------------------------------------- apply */

static it_tensor *flat_view(it_tensor *flat, int64_t off, const int64_t shape[2]) {
    int64_t strides[2] = {shape[1], 1};
    return it__tensor_view_owned(flat, 2, shape, strides, off);
}

/* Base parameters frozen: no requires_grad, no gradient buffer (the flat one is freed). */
static void freeze_base(it_model *m) {
    for (int i = 0; i < m->n_leaves; i++) {
        it_tensor *t = m->leaves[i];
        t->requires_grad = false;
        it_tensor_release(t->grad);
        t->grad = NULL;
        t->grad_zero = false;
    }
    for (int i = 0; i < m->n_entries; i++) {
        if (m->entries[i].alias) it_tensor_release(m->entries[i].info.grad);
        m->entries[i].info.grad = NULL;
    }
    it_tensor_release(m->grads);
    m->grads = NULL;
}

/* A's draws over the whole tensors in layout order (as one rank makes them), then this rank's
 * slices. */
static it_status init_values(const it_model *m, struct it__lora *l, uint64_t seed) {
    float *full = calloc((size_t)l->full_numel + 1, sizeof(float));
    float *host = calloc((size_t)l->numel + 1, sizeof(float));
    if (!full || !host) {
        free(full);
        free(host);
        return it_error(IT_ERR_OOM, "lora: %lld adapter values of host memory", (long long)l->full_numel);
    }
    it_rng rng = {seed ^ LORA_SEED_STREAM};
    const float a = sqrtf(5.0f);
    for (int i = 0; i < l->nw; i++) {
        const struct lora_whole *A = &l->w[i];
        if (A->is_b) continue; /* B stays zero */
        float gain = sqrtf(2.0f / (1 + a * a));
        float std = (float)(gain / sqrt((double)A->shape[1]));
        float bound = sqrtf(3.0f) * std;
        float *dst = full + A->offset;
        for (int64_t j = 0; j < A->shape[0] * A->shape[1]; j++)
            dst[j] = (float)(2.0 * it__rng_uniform(&rng) - 1.0) * bound;
    }
    slices(l, m->tp_size, m->tp_rank, host, full, false);
    it_status st = it_tensor_copy_from_host(l->params, host, sizeof(float) * (size_t)l->numel);
    it__weights_written(); /* autocast's copies of the parameters are stale */
    free(full);
    free(host);
    return st;
}

/* One whole-list entry: name (owned) and shape; its offset follows the ones before. */
static bool whole_add(struct it__lora *l, const char *module, bool is_b, int64_t rows, int64_t cols) {
    struct lora_whole *w = realloc(l->w, sizeof *w * (size_t)(l->nw + 1));
    if (!w) return false;
    l->w = w;
    size_t len = strlen(module) + sizeof ".lora_A";
    char *name = malloc(len);
    if (!name) return false;
    snprintf(name, len, "%s.lora_%c", module, is_b ? 'B' : 'A');
    l->w[l->nw++] = (struct lora_whole){name, {rows, cols}, l->full_numel, is_b};
    l->full_numel += rows * cols;
    return true;
}

typedef struct whole_ctx {
    struct it__lora *l;
    const char *targets;
    bool failed;
} whole_ctx;

/* walk_all's visit: every adapted linear weight of the whole model, held here or not. */
static void whole_visit(void *p, const it__param_spec *spec, int64_t full_off, const char *name) {
    whole_ctx *c = p;
    (void)full_off;
    bool linear = spec->role != IT_PARAM_ROLE_TOKEN_EMBEDDING && spec->role != IT_PARAM_ROLE_POSITION_EMBEDDING &&
                  spec->role != IT_PARAM_ROLE_NORM && spec->role != IT_PARAM_ROLE_HEAD_NORM &&
                  spec->role != IT_PARAM_ROLE_ROUTER;
    if (!linear || spec->is_bias || spec->ndim != 2 || spec->expert >= 0) return;
    char module[256];
    const char *dot = strrchr(name, '.');
    snprintf(module, sizeof module, "%.*s", dot ? (int)(dot - name) : 0, name);
    if (!is_target(module, c->targets)) return;
    int64_t r = c->l->rank;
    if (!whole_add(c->l, module, false, r, spec->shape[1]) || !whole_add(c->l, module, true, spec->shape[0], r))
        c->failed = true;
}

it_status it_model_lora_apply(it_model *m, const it_lora_config *cfg) {
    if (!m || !cfg) return it_error(IT_ERR_INVALID_ARG, "lora: NULL model or config");
    if (m->lora) return it_error(IT_ERR_INVALID_ARG, "lora: the model already has adapters");
    if (cfg->rank < 1) return it_error(IT_ERR_INVALID_ARG, "--lora_rank: %d, expected >= 1", cfg->rank);
    if (!(isfinite(cfg->alpha)))
        return it_error(IT_ERR_INVALID_ARG, "--lora_alpha: %g is not a finite number", cfg->alpha);
    const char *targets = cfg->targets ? cfg->targets : "";
    int count = 0;
    for (int i = 0; i < m->n_entries; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        if (!p->is_linear || p->is_bias || p->ndim != 2 || !is_target(p->module, targets)) continue;
        if (p->expert >= 0 || p->role == IT_PARAM_ROLE_ROUTER)
            return it_error(IT_ERR_UNSUPPORTED,
                            "--lora_target_modules: '%s' matches %s, a Mixtral %s: LoRA on the experts is not "
                            "supported (target attention projections: c_attn, attn.c_proj)",
                            targets, p->module, p->expert >= 0 ? "expert" : "router");
        count++;
    }
    if (count == 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "--lora_target_modules: '%s' matches no linear layer of this %s model (suffixes of module "
                        "names such as c_attn, attn.c_proj, c_fc, c_fc2, mlp.c_proj)",
                        targets, m->info.family);
    struct it__lora *l = calloc(1, sizeof *l);
    if (!l) return it_error(IT_ERR_OOM, "lora: out of host memory");
    l->t = calloc((size_t)count * 2, sizeof *l->t);
    if (!l->t) {
        free(l);
        return it_error(IT_ERR_OOM, "lora: out of host memory");
    }
    l->rank = cfg->rank;
    l->alpha = cfg->alpha;
    l->scale = cfg->alpha / (float)cfg->rank; /* LoRAConfig::Scaling, in float */
    it_status st = IT_OK;
    int64_t r = cfg->rank;
    for (int i = 0; i < m->n_entries && !st; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        if (!p->is_linear || p->is_bias || p->ndim != 2 || !is_target(p->module, targets)) continue;
        for (int k = 0; k < 2; k++) {
            it_lora_tensor_info *t = &l->t[l->n];
            size_t len = strlen(p->module) + sizeof ".lora_A";
            char *name = malloc(len);
            if (!name) {
                st = it_error(IT_ERR_OOM, "lora: out of host memory");
                break;
            }
            snprintf(name, len, "%s.lora_%c", p->module, k ? 'B' : 'A');
            /* under TP: B follows a column-parallel weight's rows, A a row-parallel one's columns */
            bool cut = m->tp && (k ? p->split == IT_PARAM_SPLIT_COLUMN : p->split == IT_PARAM_SPLIT_ROW);
            *t = (it_lora_tensor_info){.name = name,
                                       .base = p,
                                       .is_b = k == 1,
                                       .shape = {k ? p->shape[0] : r, k ? r : p->shape[1]},
                                       .offset = l->numel,
                                       .split = cut ? p->split : IT_PARAM_SPLIT_NONE,
                                       .full_shape = {k ? p->full_shape[0] : r, k ? r : p->full_shape[1]}};
            t->numel = t->shape[0] * t->shape[1];
            l->numel += t->numel;
            if (!m->pp && !whole_add(l, p->module, k == 1, t->full_shape[0], t->full_shape[1]))
                st = it_error(IT_ERR_OOM, "lora: out of host memory");
            l->n++;
        }
    }
    if (!st && m->pp) { /* the other stages' adapters too: this stage's find their place among them */
        whole_ctx wc = {l, targets, false};
        it__layout all = {.visit = whole_visit, .visit_ctx = &wc};
        m->vt->walk_all(m, &all);
        if (wc.failed) st = it_error(IT_ERR_OOM, "lora: out of host memory");
    }
    for (int i = 0; i < l->n && !st; i++) {
        const struct lora_whole *w = NULL;
        for (int j = 0; j < l->nw && !w; j++)
            if (strcmp(l->w[j].name, l->t[i].name) == 0) w = &l->w[j];
        if (!w)
            st = it_error(IT_ERR_INTERNAL, "lora: %s is not in the whole model's adapter list", l->t[i].name);
        else
            l->t[i].full_offset = w->offset;
    }
    int64_t shape[1] = {l->numel};
    if (!st) {
        l->params = it__tensor_new_owned(m->dev, IT_DTYPE_FP32, 1, shape);
        l->grads = it__tensor_new_owned(m->dev, IT_DTYPE_FP32, 1, shape);
        if (!l->params || !l->grads) st = it_last_status() ? it_last_status() : IT_ERR_OOM;
    }
    for (int i = 0; i < l->n && !st; i++) {
        it_lora_tensor_info *t = &l->t[i];
        t->param = flat_view(l->params, t->offset, t->shape);
        t->grad = flat_view(l->grads, t->offset, t->shape);
        if (!t->param || !t->grad || it_tensor_set_requires_grad(t->param, true) ||
            it_tensor_set_grad(t->param, t->grad))
            st = it_last_status() ? it_last_status() : IT_ERR_OOM;
    }
    if (!st) st = it_tensor_fill(l->grads, it_scalar_f64(0.0));
    if (!st) st = init_values(m, l, cfg->seed);
    if (st) {
        it__lora_free(l);
        return st;
    }
    freeze_base(m);
    m->lora = l;
    m->grads = it_tensor_retain(l->grads);
    /* the base gradient buffer goes back to the backend, not into the cache for the run */
    return it_mem_empty_cache(m->dev);
}

void it__lora_free(struct it__lora *l) {
    if (!l) return;
    for (int i = 0; i < l->nw; i++) free(l->w[i].name);
    free(l->w);
    for (int i = 0; i < l->n; i++) {
        free((char *)l->t[i].name);
        it_tensor_release(l->t[i].param);
        it_tensor_release(l->t[i].grad);
    }
    free(l->t);
    it_tensor_release(l->params);
    it_tensor_release(l->grads);
    free(l);
}

/* ---------------------------------------------------------------- queries */

bool it_model_has_lora(const it_model *m) { return m && m->lora; }
float it_model_lora_scaling(const it_model *m) { return m && m->lora ? m->lora->scale : 0.0f; }
it_tensor *it_model_trainable(it_model *m) { return m->lora ? m->lora->params : m->params; }
int64_t it_model_lora_numel(const it_model *m) { return m && m->lora ? m->lora->numel : 0; }
int it_model_lora_count(const it_model *m) { return m && m->lora ? m->lora->n : 0; }

const it_lora_tensor_info *it_model_lora_at(const it_model *m, int i) {
    return m && m->lora && i >= 0 && i < m->lora->n ? &m->lora->t[i] : NULL;
}

const it_lora_tensor_info *it_model_lora_find(const it_model *m, const char *name) {
    for (int i = 0; name && i < it_model_lora_count(m); i++)
        if (strcmp(m->lora->t[i].name, name) == 0) return &m->lora->t[i];
    return NULL;
}

void it_model_lora_counts(const it_model *m, int64_t *trainable, int64_t *total) {
    int64_t base = m->info.num_params;
    for (int i = 0; i < m->n_entries; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        if (p->role == IT_PARAM_ROLE_TOKEN_EMBEDDING && p->ndim == 2)
            base -= (m->info.padded_vocab - m->info.vocab_size) * p->shape[1];
    }
    *trainable = it_model_lora_numel(m);
    *total = base + *trainable;
}

/* The adapter pair (A, B) of base weight w, or NULL. */
static const it_lora_tensor_info *find_adapter(const it_model *m, const it_tensor *w) {
    for (int i = 0; m->lora && i < m->lora->n; i += 2)
        if (m->lora->t[i].base->param == w) return &m->lora->t[i];
    return NULL;
}

/* ---------------------------------------------------------------- forward */

it_tensor *it__lora_delta(it_model *m, it_tensor *x, it_tensor *w, bool *none) {
    const it_lora_tensor_info *a = find_adapter(m, w);
    *none = a == NULL;
    if (!a || !x) return NULL;
    /* LoRALinear::Forward: hidden = x A^T (.., r); (hidden B^T) * s */
    it_tensor *hidden = it_linear(x, a[0].param, NULL);
    return it_scale(it_linear(hidden, a[1].param, NULL), m->lora->scale);
}

it_tensor *it__linear(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b) {
    it_tensor *y = it_linear(x, w, b);
    if (!m->lora) return y;
    bool none;
    it_tensor *d = it__lora_delta(m, x, w, &none);
    return none ? y : it_add(y, d);
}

bool it__lora_adapts(const it_model *m, const it_tensor *w) { return m->lora && find_adapter(m, w); }

it_tensor *it__linear_keep(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b) {
    return it__lora_adapts(m, w) ? it__linear(m, x, w, b) : it__linear_low(x, w, b);
}

bool it__mlp_keeps_low(const it_model *m, it_tensor *const *w, int n) {
    it_dtype ac;
    if (IT_PREC_ON() || !it__autocast_keep_low() || !it_autocast_enabled(&ac) || ac == IT_DTYPE_FP32) return false;
    for (int i = 0; i < n; i++)
        if (it__lora_adapts(m, w[i])) return false;
    return true;
}

it_tensor *it__lm_head(it_model *m, it_tensor *x, it_tensor *w) {
    if (m->loss_forward && m->tp_size <= 1 && m->loss_targets && !it__lora_adapts(m, w) && !IT_PREC_ON() &&
        it__linear_cross_entropy_wanted(x, w)) {
        m->loss_fused = true; /* the loss, not the logits (it_model_loss) */
        return it__linear_cross_entropy(x, w, m->loss_targets, m->loss_valid);
    }
    if (m->loss_forward && m->tp_size <= 1) return it__linear_keep(m, x, w, NULL);
    return it__linear(m, x, w, NULL);
}

/* ---------------------------------------------------------------- the adapter file */

/* The whole adapter buffer (full_numel floats) on the host: under TP the group's slices
 * gathered (a collective over it). */
static it_status gather_tp(const it_model *m, float *full);

/* Under PP every stage's adapters: each fills its own (zeros elsewhere), and a sum over the
 * PP group is their union (x + 0 = x). */
static it_status gather_full(const it_model *m, float *full) {
    const struct it__lora *l = m->lora;
    if (m->pp) memset(full, 0, sizeof(float) * (size_t)l->full_numel);
    it_status st = gather_tp(m, full);
    for (int64_t at = 0; !st && m->pp && at < l->full_numel; at += 1 << 26) {
        int64_t n = l->full_numel - at < (1 << 26) ? l->full_numel - at : 1 << 26;
        st = it_dist_all_reduce_host(m->pp, full + at, (size_t)n, IT_DTYPE_FP32, IT_CCL_SUM);
    }
    return st;
}

static it_status gather_tp(const it_model *m, float *full) {
    const struct it__lora *l = m->lora;
    if (!m->tp) {
        if (!m->pp) return it_tensor_copy_to_host(l->params, full, sizeof(float) * (size_t)l->numel);
        float *mine = malloc(sizeof(float) * (size_t)l->numel + 1);
        if (!mine) return it_error(IT_ERR_OOM, "lora: out of host memory to gather the adapters");
        it_status st = it_tensor_copy_to_host(l->params, mine, sizeof(float) * (size_t)l->numel);
        if (!st) slices(l, 1, 0, mine, full, true);
        free(mine);
        return st;
    }
    int tp = m->tp_size;
    float *all = malloc(sizeof(float) * (size_t)(l->numel * tp) + 1);
    if (!all) return it_error(IT_ERR_OOM, "lora: out of host memory to gather the adapters");
    it_scope_begin();
    it_tensor *dev = it_tensor_new(m->dev, IT_DTYPE_FP32, 1, (int64_t[]){l->numel * tp});
    it_status st = dev ? it_dist_all_gather(m->tp, l->params, dev) : it_last_status();
    if (!st) st = it_tensor_copy_to_host(dev, all, sizeof(float) * (size_t)(l->numel * tp));
    it_scope_end();
    for (int r = 0; r < tp && !st; r++) slices(l, tp, r, all + (size_t)r * (size_t)l->numel, full, true);
    free(all);
    return st;
}

static int by_whole_name(const void *a, const void *b) {
    return strcmp((*(const struct lora_whole *const *)a)->name, (*(const struct lora_whole *const *)b)->name);
}

it_status it_model_lora_save(const it_model *m, const char *path) {
    if (!m || !m->lora) return it_error(IT_ERR_INVALID_ARG, "%s: the model has no LoRA adapters to save", path);
    const struct it__lora *l = m->lora;
    float *host = malloc(sizeof(float) * (size_t)l->full_numel + 1);
    const struct lora_whole **order = malloc(sizeof *order * (size_t)l->nw + 1);
    if (!host || !order) {
        free(host);
        free(order);
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    for (int i = 0; i < l->nw; i++) order[i] = &l->w[i];
    qsort(order, (size_t)l->nw, sizeof *order, by_whole_name); /* SaveLoRAWeights writes sorted names */
    it_status st = gather_full(m, host);
    if (st || m->tp_rank != 0 || m->pp_rank != 0) { /* under TP/PP the group's first rank writes */
        free(host);
        free(order);
        return st;
    }
    it_afile *f = NULL;
    if (!st) st = it_afile_open(path, &f);
    uint32_t head[3] = {LORA_MAGIC, LORA_VERSION, (uint32_t)l->nw};
    if (!st) st = it_afile_write(f, head, sizeof head);
    for (int i = 0; i < l->nw && !st; i++) {
        const struct lora_whole *t = order[i];
        uint32_t len = (uint32_t)strlen(t->name), nd = 2;
        int64_t dims[2] = {t->shape[0], t->shape[1]};
        if (!st) st = it_afile_write(f, &len, sizeof len);
        if (!st) st = it_afile_write(f, t->name, len);
        if (!st) st = it_afile_write(f, &nd, sizeof nd);
        if (!st) st = it_afile_write(f, dims, sizeof dims);
        if (!st) st = it_afile_write(f, host + t->offset, sizeof(float) * (size_t)(dims[0] * dims[1]));
    }
    if (f) {
        if (st)
            it_afile_abort(f);
        else
            st = it_afile_commit(f);
    }
    free(host);
    free(order);
    return st;
}

/* A cursor over the file's bytes. */
typedef struct reader {
    const unsigned char *p;
    size_t n, at;
} reader;

static bool take(reader *r, void *out, size_t k) {
    if (k > r->n - r->at) return false;
    memcpy(out, r->p + r->at, k);
    r->at += k;
    return true;
}

static it_status read_all(const char *path, unsigned char **buf, size_t *n) {
    struct stat sb;
    if (stat(path, &sb) != 0) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode)) return it_error(IT_ERR_IO, "%s: not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = sb.st_size > 0 ? (size_t)sb.st_size : 4096, len = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return it_error(IT_ERR_OOM, "%s: out of host memory reading the file", path);
        }
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        unsigned char *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb;
        cap *= 2;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return it_error(IT_ERR_IO, "%s: reading failed", path);
    }
    *buf = b;
    *n = len;
    return IT_OK;
}

static bool printable(const char *s, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
    return true;
}

/* Parse the whole file into host (the one-rank adapter buffer's layout, full_numel floats);
 * nothing is written to the model. */
static it_status parse(const it_model *m, const char *path, const unsigned char *buf, size_t n, float *host) {
    const struct it__lora *l = m->lora;
    reader r = {buf, n, 0};
    uint32_t head[3];
    if (!take(&r, head, sizeof head))
        return it_error(IT_ERR_FORMAT, "%s: %zu bytes, shorter than the 12-byte LoRA header", path, n);
    if (head[0] != LORA_MAGIC)
        return it_error(IT_ERR_FORMAT,
                        "%s: magic: expected 0x%08X (\"LORA\", an InfiniTrain adapter file), found 0x%08X", path,
                        LORA_MAGIC, head[0]);
    if (head[1] != LORA_VERSION)
        return it_error(IT_ERR_FORMAT, "%s: version: expected %u, found %u", path, LORA_VERSION, head[1]);
    if (head[2] != (uint32_t)l->nw)
        return it_error(IT_ERR_FORMAT,
                        "%s: holds %u tensors, the model has %d adapter tensors (%d adapted layers; same "
                        "--lora_target_modules as when it was saved?)",
                        path, head[2], l->nw, l->nw / 2);
    bool *seen = calloc((size_t)l->nw + 1, sizeof *seen);
    if (!seen) return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    it_status st = IT_OK;
    char name[LORA_NAME_MAX + 1];
    for (uint32_t i = 0; i < head[2] && !st; i++) {
        uint32_t len, nd;
        if (!take(&r, &len, sizeof len)) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor %u: the file ends before its name length", path, i);
            break;
        }
        if (len == 0 || len > LORA_NAME_MAX) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor %u: name length %u, expected 1..%d", path, i, len, LORA_NAME_MAX);
            break;
        }
        if (!take(&r, name, len)) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor %u: the file ends inside its %u-byte name", path, i, len);
            break;
        }
        name[len] = '\0';
        if (!printable(name, len)) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor %u: the name holds bytes outside printable ASCII", path, i);
            break;
        }
        const struct lora_whole *t = NULL;
        for (int j = 0; j < l->nw && !t; j++)
            if (strcmp(l->w[j].name, name) == 0) t = &l->w[j];
        if (!t) {
            st = it_error(IT_ERR_FORMAT,
                          "%s: tensor '%s' is not an adapter of this model (same --lora_target_modules as when it "
                          "was saved?)",
                          path, name);
            break;
        }
        int idx = (int)(t - l->w);
        if (seen[idx]) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor '%s' appears twice", path, name);
            break;
        }
        seen[idx] = true;
        if (!take(&r, &nd, sizeof nd)) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor '%s': the file ends before its ndim", path, name);
            break;
        }
        if (nd != 2) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor '%s': ndim %u, expected 2", path, name, nd);
            break;
        }
        int64_t dims[2];
        if (!take(&r, dims, sizeof dims)) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor '%s': the file ends inside its dims", path, name);
            break;
        }
        if (dims[0] != t->shape[0] || dims[1] != t->shape[1]) {
            st = it_error(IT_ERR_FORMAT,
                          "%s: tensor '%s': shape [%lld, %lld] in the file, the model's is [%lld, %lld]%s", path, name,
                          (long long)dims[0], (long long)dims[1], (long long)t->shape[0], (long long)t->shape[1],
                          " (same --lora_rank as when it was saved?)");
            break;
        }
        if (!take(&r, host + t->offset, sizeof(float) * (size_t)(dims[0] * dims[1]))) {
            st = it_error(IT_ERR_FORMAT, "%s: tensor '%s': the file ends inside its %lld values", path, name,
                          (long long)(dims[0] * dims[1]));
            break;
        }
    }
    free(seen);
    if (!st && r.at != n)
        st = it_error(IT_ERR_FORMAT, "%s: %zu bytes after the last tensor (a file of %zu bytes)", path, n - r.at, n);
    return st;
}

it_status it_model_lora_load(it_model *m, const char *path) {
    if (!m || !m->lora) return it_error(IT_ERR_INVALID_ARG, "%s: the model has no LoRA adapters to load into", path);
    unsigned char *buf = NULL;
    size_t n = 0;
    it_status st = read_all(path, &buf, &n);
    if (st) return st;
    float *full = malloc(sizeof(float) * (size_t)m->lora->full_numel + 1);
    float *host = malloc(sizeof(float) * (size_t)m->lora->numel + 1);
    if (!full || !host) {
        free(full);
        free(host);
        free(buf);
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    st = parse(m, path, buf, n, full);
    if (!st) slices(m->lora, m->tp_size, m->tp_rank, host, full, false); /* this rank's slices */
    if (!st) st = it_tensor_copy_from_host(m->lora->params, host, sizeof(float) * (size_t)m->lora->numel);
    it__weights_written();
    free(full);
    free(host);
    free(buf);
    return st;
}

/* ---------------------------------------------------------------- merge */

it_status it_model_lora_save_merged(it_model *m, const char *path) {
    if (!m || !m->lora) return it_error(IT_ERR_INVALID_ARG, "%s: the model has no LoRA adapters to merge", path);
    struct it__lora *l = m->lora;
    int pairs = l->n / 2;
    it_tensor **orig = calloc((size_t)pairs, sizeof *orig);
    if (!orig) return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    bool grad = it_grad_enabled();
    it_dtype ac = IT_DTYPE_FP32;
    bool autocast = it_autocast_enabled(&ac);
    it_grad_set_enabled(false);
    it_autocast_set(false, ac); /* the merge is fp32, as the weights are */
    it_status st = IT_OK;
    int done = 0;
    for (; done < pairs && !st; done++) {
        const it_lora_tensor_info *a = &l->t[2 * done];
        it_tensor *w = a->base->param;
        it_scope_begin();
        orig[done] = it_scope_keep(it_tensor_clone(w));
        /* MergeWeights: W + (B @ A) * s */
        it_tensor *merged = it_add(w, it_scale(it_matmul(a[1].param, a[0].param, false, false), l->scale));
        st = orig[done] && merged ? it_tensor_copy_(w, merged) : it_last_status();
        it_scope_end();
        if (st) break;
    }
    if (!st) st = it_model_save(m, path);
    for (int i = 0; i < pairs; i++) { /* back to the unmerged weights, bit for bit */
        if (!orig[i]) continue;
        it_status rs = it_tensor_copy_(l->t[2 * i].base->param, orig[i]);
        if (!st) st = rs;
        it_tensor_release(orig[i]);
    }
    free(orig);
    it_autocast_set(autocast, ac);
    it_grad_set_enabled(grad);
    return st;
}

/* ---------------------------------------------------------------- other adapter formats */

int it__lora_whole_count(const it_model *m) { return m && m->lora ? m->lora->nw : 0; }

const char *it__lora_whole_at(const it_model *m, int i, int64_t shape[2], int64_t *offset, bool *is_b) {
    const struct lora_whole *w = &m->lora->w[i];
    shape[0] = w->shape[0], shape[1] = w->shape[1];
    *offset = w->offset;
    *is_b = w->is_b;
    return w->name;
}

int64_t it__lora_full_numel(const it_model *m) { return m->lora->full_numel; }
int it__lora_rank(const it_model *m) { return m->lora->rank; }
float it__lora_alpha(const it_model *m) { return m->lora->alpha; }

it_status it__lora_get_full(const it_model *m, float *full) { return gather_full(m, full); }

it_status it__lora_set_full(it_model *m, float *full) {
    struct it__lora *l = m->lora;
    float *host = malloc(sizeof(float) * (size_t)l->numel + 1);
    if (!host) return it_error(IT_ERR_OOM, "lora: out of host memory");
    slices(l, m->tp_size, m->tp_rank, host, full, false);
    it_status st = it_tensor_copy_from_host(l->params, host, sizeof(float) * (size_t)l->numel);
    it__weights_written();
    free(host);
    return st;
}
