/* GPT-2 (llm.c layout): pre-LN blocks, GELU (tanh) MLP, causal attention, tied lm_head.
 *
 *   x = wte[idx] + wpe[0:T]                                   (B, T, C)
 *   for each layer: x += c_proj(attn(ln_1(x)));  x += mlp(ln_2(x))
 *   logits = ln_f(x) @ wte^T                                  (B, T, Vp)
 *
 * Checkpoint: magic 20240326, version 3, fp32; see docs/formats.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "core/precision_hooks.h"
#include "models/model_impl.h"

#define GPT2_MAGIC 20240326
#define GPT2_VERSION 3
#define LN_EPS 1e-5f

/* The parameters of one block, in checkpoint order (each kind is stored for all layers in turn). */
enum { LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, N_BLOCK };

static const struct {
    const char *name; /* after "transformer.h.<l>." */
    it_param_role role;
    bool is_bias;
    int rows, cols; /* shape in units of n_embd; cols 0: 1-D */
} block_kinds[N_BLOCK] = {
    [LN1W] = {"ln_1.weight", IT_PARAM_ROLE_NORM, false, 1, 0},
    [LN1B] = {"ln_1.bias", IT_PARAM_ROLE_NORM, true, 1, 0},
    [QKVW] = {"attn.c_attn.weight", IT_PARAM_ROLE_ATTN_QKV, false, 3, 1},
    [QKVB] = {"attn.c_attn.bias", IT_PARAM_ROLE_ATTN_QKV, true, 3, 0},
    [ATTPROJW] = {"attn.c_proj.weight", IT_PARAM_ROLE_ATTN_OUT, false, 1, 1},
    [ATTPROJB] = {"attn.c_proj.bias", IT_PARAM_ROLE_ATTN_OUT, true, 1, 0},
    [LN2W] = {"ln_2.weight", IT_PARAM_ROLE_NORM, false, 1, 0},
    [LN2B] = {"ln_2.bias", IT_PARAM_ROLE_NORM, true, 1, 0},
    [FCW] = {"mlp.c_fc.weight", IT_PARAM_ROLE_MLP_UP, false, 4, 1},
    [FCB] = {"mlp.c_fc.bias", IT_PARAM_ROLE_MLP_UP, true, 4, 0},
    [FCPROJW] = {"mlp.c_proj.weight", IT_PARAM_ROLE_MLP_DOWN, false, 1, 4},
    [FCPROJB] = {"mlp.c_proj.bias", IT_PARAM_ROLE_MLP_DOWN, true, 1, 0},
};

typedef struct gpt2_block {
    it_tensor *p[N_BLOCK];
} gpt2_block;

typedef struct gpt2 {
    it_gpt2_config cfg;
    int32_t header[256];                /* as read (or made), written back unchanged */
    it_tensor *wte, *wpe, *lnfw, *lnfb; /* borrowed from the model, as are the blocks' */
    it_tensor *lm_head;                 /* PP's last stage: its copy of wte (NULL: wte itself) */
    gpt2_block *h;                      /* n_layer */
} gpt2;

/* The checkpoint layout, InfiniTrain's names. Counting (lo->m NULL) needs only g->cfg; g->h
 * may then be NULL. The lm_head is wte (tied). */
static void gpt2_walk(gpt2 *g, it__layout *lo) {
    const it_gpt2_config *c = &g->cfg;
    int64_t C = c->n_embd;
    it__param_spec wte = {.role = IT_PARAM_ROLE_TOKEN_EMBEDDING,
                          .layer = -1,
                          .expert = -1,
                          .ndim = 2,
                          .shape = {c->padded_vocab_size, C},
                          .tied_name = "lm_head.weight"};
    it__param_spec wpe = {
        .role = IT_PARAM_ROLE_POSITION_EMBEDDING, .layer = -1, .expert = -1, .ndim = 2, .shape = {c->block_size, C}};
    it__param_spec lnf = {.role = IT_PARAM_ROLE_NORM, .layer = -1, .expert = -1, .ndim = 1, .shape = {C}};
    g->wte = it__layout_take(lo, wte, "transformer.wte.weight");
    g->wpe = it__layout_take(lo, wpe, "transformer.wpe.weight");
    for (int k = 0; k < N_BLOCK; k++) {
        it__param_spec spec = {.role = block_kinds[k].role,
                               .is_bias = block_kinds[k].is_bias,
                               .expert = -1,
                               .ndim = block_kinds[k].cols ? 2 : 1,
                               .shape = {block_kinds[k].rows * C, block_kinds[k].cols * C},
                               .kv_rows = k == QKVW || k == QKVB ? C : 0,
                               .head_dim = C / c->n_head};
        for (int l = 0; l < c->n_layer; l++) {
            spec.layer = l;
            it_tensor *t = it__layout_take(lo, spec, "transformer.h.%d.%s", l, block_kinds[k].name);
            if (g->h) g->h[l].p[k] = t;
        }
    }
    g->lnfw = it__layout_take(lo, lnf, "transformer.ln_f.weight");
    lnf.is_bias = true;
    g->lnfb = it__layout_take(lo, lnf, "transformer.ln_f.bias");
    const it_model *par = lo->m ? lo->m : lo->par;
    if (par && par->pp_size > 1 && !par->stage_first) { /* the tied head, at the far end of the pipeline */
        wte.role = IT_PARAM_ROLE_LM_HEAD;
        wte.tied_name = NULL;
        g->lm_head = it__layout_tied_copy(lo, wte, "lm_head.weight", 0);
    }
}

/* Elements of the flat buffer: the whole model's (par NULL), or one rank's of par's TP/PP. */
static int64_t num_params(const it_gpt2_config *c, const it_model *par) {
    gpt2 g = {.cfg = *c};
    it__layout count = {.par = par};
    gpt2_walk(&g, &count);
    return count.off;
}

it_status it_gpt2_preset(const char *name, it_gpt2_config *cfg) {
    static const struct {
        const char *name;
        int L, H, C;
    } presets[] = {{"d12", 12, 12, 768}, {"d24", 24, 16, 1024}, {"d36", 36, 20, 1280}, {"d48", 48, 25, 1600}};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) == 0) {
            cfg->block_size = 1024;
            cfg->vocab_size = 50257;
            cfg->padded_vocab_size = 50304;
            cfg->n_layer = presets[i].L;
            cfg->n_head = presets[i].H;
            cfg->n_embd = presets[i].C;
            return IT_OK;
        }
    }
    return it_error(IT_ERR_INVALID_ARG, "unknown GPT-2 model '%s' (expected d12, d24, d36 or d48)", name);
}

it_status it_gpt2_config_check(const it_gpt2_config *c) {
#define RANGE(field, lo, hi)                                                                                           \
    if (c->field < (lo) || c->field > (hi))                                                                            \
        return it_error(IT_ERR_INVALID_ARG, "GPT-2 config: " #field " = %d, expected %d..%d", c->field, (lo), (hi));
    RANGE(block_size, 1, 1 << 20);
    RANGE(vocab_size, 1, 1 << 24);
    RANGE(padded_vocab_size, c->vocab_size, 1 << 24);
    RANGE(n_layer, 1, 1024);
    RANGE(n_head, 1, 1024);
    RANGE(n_embd, 1, 1 << 16);
#undef RANGE
    if (c->n_embd % c->n_head)
        return it_error(IT_ERR_INVALID_ARG, "GPT-2 config: n_embd %d is not divisible by n_head %d", c->n_embd,
                        c->n_head);
    return IT_OK;
}

/* ---------------------------------------------------------------- forward */

/* qkv (B, T, 3C) of a cached forward's new positions -> (B, T, C): their queries against
 * every key the cache holds, theirs included (kv_cache.c). */
static it_tensor *cached_attention(it_model *m, int l, it_tensor *qkv, int heads) {
    if (!qkv) return NULL;
    int64_t B = it_tensor_dim(qkv, 0), T = it_tensor_dim(qkv, 1), C = it_tensor_dim(qkv, 2) / 3;
    int64_t s4[4] = {B, T, heads, C / heads};
    it_tensor *q = it_reshape(it_slice(qkv, 2, 0, C, 1), 4, s4), *k = it_reshape(it_slice(qkv, 2, C, 2 * C, 1), 4, s4),
              *v = it_reshape(it_slice(qkv, 2, 2 * C, 3 * C, 1), 4, s4);
    if (it__kv_extend(m, l, &k, &v)) return NULL;
    return it_attention(q, k, v);
}

/* qkv (B, T, 3C) of this rank's rows under context parallelism -> (B, T, C), attending over
 * the CP group (context.c). */
static it_tensor *cp_attention(it_model *m, it_tensor *qkv, int heads, bool keep) {
    if (!qkv) return NULL;
    int64_t B = it_tensor_dim(qkv, 0), T = it_tensor_dim(qkv, 1), C = it_tensor_dim(qkv, 2) / 3;
    int64_t s4[4] = {B, T, heads, C / heads};
    it_tensor *q = it_reshape(it_slice(qkv, 2, 0, C, 1), 4, s4), *k = it_reshape(it_slice(qkv, 2, C, 2 * C, 1), 4, s4),
              *v = it_reshape(it_slice(qkv, 2, 2 * C, 3 * C, 1), 4, s4);
    return it__cp_attend(m, q, k, v, keep);
}

/* Block l: x += attn(ln_1(x)); x += mlp(ln_2(x)) (under TP this rank's heads and columns). */
static it_tensor *gpt2_layer(it_model *m, int l, it_tensor *x) {
    gpt2 *g = m->impl;
    it_tensor *const *p = g->h[l].p;
    int heads = g->cfg.n_head / m->tp_size;
    IT_PREC_LAYER(l);
    it_tensor *h = IT_PREC_MODULE(it_layernorm(x, p[LN1W], p[LN1B], LN_EPS), l, "ln_1");
    /* under autocast qkv and y stay bf16 between the products (the same bits as widened) */
    h = IT_PREC_MODULE(it__linear_keep(m, it__tp_enter(m, h), p[QKVW], p[QKVB]), l, "attn.c_attn"); /* (B, T, 3C) */
    h = m->kv                             ? cached_attention(m, l, h, heads)
        : m->cp                           ? cp_attention(m, h, heads, !it__lora_adapts(m, p[ATTPROJW]))
        : it__lora_adapts(m, p[ATTPROJW]) ? it_causal_self_attention(h, heads)
                                          : it__causal_self_attention_low(h, heads); /* (B, T, C) */
    h = IT_PREC_MODULE(it__tp_row_linear(m, h, p[ATTPROJW], p[ATTPROJB]), l, "attn.c_proj");
    x = it_add(x, IT_PREC_MODULE(h, l, "attn"));
    h = IT_PREC_MODULE(it_layernorm(x, p[LN2W], p[LN2B], LN_EPS), l, "ln_2");
    h = IT_PREC_MODULE(it__linear(m, it__tp_enter(m, h), p[FCW], p[FCB]), l, "mlp.c_fc");
    if (m->tp_size <= 1 && !it__lora_adapts(m, p[FCPROJW]) && !IT_PREC_ON() && it__gelu_linear_wanted(h, p[FCPROJW])) {
        h = it__gelu_linear(h, p[FCPROJW], p[FCPROJB]); /* GELU computed again in backward: one (B, T, 4C) kept */
    } else {
        h = IT_PREC_MODULE(it_gelu(h), l, "mlp.gelu"); /* (B, T, 4C) */
        h = IT_PREC_MODULE(it__tp_row_linear(m, h, p[FCPROJW], p[FCPROJB]), l, "mlp.c_proj");
    }
    return IT_PREC_MODULE(it_add(x, IT_PREC_MODULE(h, l, "mlp")), l, "");
}

static it_tensor *gpt2_forward(it_model *m, it_tensor *idx) {
    gpt2 *g = m->impl;
    if (!idx) return NULL;
    if (it_tensor_ndim(idx) != 2) {
        it_error(IT_ERR_INVALID_ARG, "gpt2: input must be (B, T), got %d-D", it_tensor_ndim(idx));
        return NULL;
    }
    int64_t B = it_tensor_dim(idx, 0), T = it_tensor_dim(idx, 1), C = g->cfg.n_embd;
    if (T > g->cfg.block_size || T < 1) {
        it_error(IT_ERR_INVALID_ARG, "gpt2: sequence length %lld outside 1..block_size %d", (long long)T,
                 g->cfg.block_size);
        return NULL;
    }
    if (m->sp && T % m->tp_size) {
        it_error(IT_ERR_INVALID_ARG, "gpt2: sequence parallel: sequence length %lld is not divisible by TP %d",
                 (long long)T, m->tp_size);
        return NULL;
    }
    /* Under tensor parallelism (model_impl.h): wte holds this rank's vocabulary rows, c_attn and
     * c_fc its heads and FFN columns, the c_proj weights the matching input columns; with
     * sequence parallelism x holds this rank's T/N rows between the collectives. */
    /* a cached forward (kv_cache.c): the new tokens sit at positions pos .. pos + T - 1 */
    int64_t pos = it__kv_pos(m), end = pos + it__cp_length(m, T); /* (context parallel: T is this rank's part) */
    if (end > g->cfg.block_size) {
        it_error(IT_ERR_INVALID_ARG, "gpt2: positions %lld..%lld outside block_size %d", (long long)pos,
                 (long long)(end - 1), g->cfg.block_size);
        return NULL;
    }
    int64_t Tl = m->sp ? T / m->tp_size : T, lo = m->sp ? (int64_t)m->tp_rank * Tl : 0;
    it_tensor *x = m->stage_in; /* a later pipeline stage: the previous stage's output (B, Tl, C) */
    if (m->first) {             /* the positions of this rank's rows (SP's within CP's) */
        it_tensor *pos_rows = it__cp_rows(m, g->wpe, pos, T, lo, Tl);
        it_tensor *pos = IT_PREC_MODULE(pos_rows, -1, "transformer.wpe");                     /* (Tl, C) */
        x = it_add(IT_PREC_MODULE(it__tp_embed(m, idx, g->wte), -1, "transformer.wte"), pos); /* (B, Tl, C) */
    } else if (!x) {
        it_error(IT_ERR_INVALID_ARG, "gpt2: pipeline stage %d has no input activation", m->pp_rank);
        return NULL;
    }
    x = it__run_layers(m, x, m->l0, m->l1 < g->cfg.n_layer ? m->l1 : g->cfg.n_layer, gpt2_layer);
    if (!m->last) return x; /* to the next pipeline stage */
    IT_PREC_LAYER(-1);
    x = it__kv_last(m, x); /* generation: the last position's logits alone */
    x = IT_PREC_MODULE(it_layernorm(x, g->lnfw, g->lnfb, LN_EPS), -1, "transformer.ln_f");
    (void)B;
    (void)C;
    /* (B, T, Vp), or this rank's Vp/N columns: tied to the embedding (under PP its copy) */
    return IT_PREC_MODULE(it__lm_head(m, it__tp_enter(m, x), g->lm_head ? g->lm_head : g->wte), -1, "lm_head");
}

/* 6 FLOPs per parameter per token (forward 2, backward 4; the position table is a lookup)
 * plus attention's QK^T and AV: 2 matmuls of 2*T*C each per layer, times 3 for backward,
 * averaged over causal positions as llm.c and nanoGPT count it (12*L*C*T). */
static double gpt2_flops(const it_model *m, int64_t T) {
    const gpt2 *g = m->impl;
    double n = (double)m->info.num_params - (double)g->cfg.block_size * g->cfg.n_embd;
    return 6.0 * n + 12.0 * g->cfg.n_layer * g->cfg.n_embd * (double)T;
}

static it_status gpt2_save(const it_model *m, const char *path) {
    const gpt2 *g = m->impl;
    return it__save_checkpoint(m, path, g->header);
}

static void gpt2_free(void *impl) {
    gpt2 *g = impl;
    if (!g) return;
    free(g->h);
    free(g);
}

static void gpt2_walk_all(const it_model *m, it__layout *lo) {
    gpt2 whole = {.cfg = ((const gpt2 *)m->impl)->cfg};
    gpt2_walk(&whole, lo);
}

static const it_model_vtable gpt2_vtable = {gpt2_forward, gpt2_save, gpt2_flops, gpt2_free, NULL, NULL, gpt2_walk_all};

/* Build the model object and the parameter views over freshly allocated buffers. */
it_status it__gpt2_build(const it_gpt2_config *cfg, it_device dev, const it_model_parallel *par, it_model **out) {
    it_status st = it_gpt2_config_check(cfg);
    if (!st)
        st = it__tp_check(par, "GPT-2", cfg->n_head, cfg->n_head, 4 * (int64_t)cfg->n_embd, cfg->padded_vocab_size);
    if (st) return st;
    it_model *m = calloc(1, sizeof *m);
    gpt2 *g = calloc(1, sizeof *g);
    if (!m || !g) {
        free(m);
        free(g);
        return it_error(IT_ERR_OOM, "gpt2: out of host memory");
    }
    m->impl = g;
    g->cfg = *cfg;
    it__model_set_parallel(m, par);
    if (m->pp_size > 1) it__model_set_stages(m, cfg->n_layer);
    st = it__model_init(m, &gpt2_vtable, dev, num_params(cfg, m));
    if (st) goto fail;
    m->info = (it_model_info){.family = "gpt2",
                              .block_size = cfg->block_size,
                              .vocab_size = cfg->vocab_size,
                              .padded_vocab = cfg->padded_vocab_size,
                              .num_params = m->info.num_params,
                              .n_layer = cfg->n_layer,
                              .n_head = cfg->n_head,
                              .n_embd = cfg->n_embd,
                              .n_kv_head = cfg->n_head,
                              .ffn_hidden = 4 * cfg->n_embd,
                              .head_dim = cfg->n_embd / cfg->n_head,
                              .tied_embeddings = true};
    g->h = calloc((size_t)cfg->n_layer, sizeof *g->h);
    if (!g->h) {
        st = it_error(IT_ERR_OOM, "gpt2: out of host memory");
        goto fail;
    }
    it__layout lo = {.m = m};
    gpt2_walk(g, &lo);
    st = lo.st;
    if (st) goto fail;
    memset(g->header, 0, sizeof g->header);
    g->header[0] = GPT2_MAGIC;
    g->header[1] = GPT2_VERSION;
    g->header[2] = cfg->block_size;
    g->header[3] = cfg->vocab_size;
    g->header[4] = cfg->n_layer;
    g->header[5] = cfg->n_head;
    g->header[6] = cfg->n_embd;
    g->header[7] = cfg->padded_vocab_size;
    *out = m;
    return IT_OK;
fail:
    it_model_free(m);
    return st;
}

it_status it_gpt2_new(const it_gpt2_config *cfg, it_device dev, uint64_t seed, it_model **out) {
    return it_gpt2_new_tp(cfg, dev, seed, NULL, out);
}

typedef struct init_ctx {
    float *host;
    it_rng rng;
    double resid_std;
} init_ctx;

/* One tensor's initial values at its place in the whole model's layout. */
static void init_draw(void *p, const it__param_spec *spec, int64_t full_off, const char *name) {
    init_ctx *c = p;
    (void)name;
    float *dst = c->host + full_off;
    int64_t numel = spec->ndim == 1 ? spec->shape[0] : spec->shape[0] * spec->shape[1];
    if (spec->is_bias || spec->role == IT_PARAM_ROLE_NORM) {
        float v = spec->role == IT_PARAM_ROLE_NORM && !spec->is_bias ? 1.0f : 0.0f;
        for (int64_t j = 0; j < numel; j++) dst[j] = v;
    } else {
        bool resid = spec->role == IT_PARAM_ROLE_ATTN_OUT || spec->role == IT_PARAM_ROLE_MLP_DOWN;
        double std = resid ? c->resid_std : 0.02;
        for (int64_t j = 0; j < numel; j++) dst[j] = (float)(std * it__rng_normal(&c->rng));
    }
}

it_status it_gpt2_new_tp(const it_gpt2_config *cfg, it_device dev, uint64_t seed, const it_model_parallel *par,
                         it_model **out) {
    it_model *m = NULL;
    it_status st = it__gpt2_build(cfg, dev, par, &m);
    if (st) return st;
    int64_t n = num_params(cfg, NULL); /* the whole model's draws, as one rank makes them; then this rank's slices */
    float *host = malloc((size_t)n * sizeof(float));
    if (!host) {
        it_model_free(m);
        return it_error(IT_ERR_OOM, "gpt2: %lld parameters of host memory for initialization", (long long)n);
    }
    /* In flat order, so the draws land where llm.c's do: norms' weights 1, biases 0, the
     * residual projections N(0, 0.02/sqrt(2L)), everything else N(0, 0.02). */
    init_ctx ic = {host, {seed}, 0.02 / sqrt(2.0 * cfg->n_layer)};
    gpt2 whole = {.cfg = *cfg};
    it__layout all = {.visit = init_draw, .visit_ctx = &ic};
    gpt2_walk(&whole, &all);
    st = it__model_from_full(m, host);
    free(host);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}

it_status it_gpt2_load(const char *path, it_device dev, it_model **out) {
    return it_gpt2_load_tp(path, dev, NULL, out);
}

it_status it_gpt2_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out) {
    int32_t h[256];
    size_t file_bytes = 0;
    it_status st = it__read_header(path, h, &file_bytes);
    if (st) return st;
    if (h[0] != GPT2_MAGIC)
        return it_error(IT_ERR_FORMAT, "%s: header[0] magic: expected %d (llm.c GPT-2 checkpoint), found %d", path,
                        GPT2_MAGIC, h[0]);
    if (h[1] != GPT2_VERSION)
        return it_error(IT_ERR_FORMAT, "%s: header[1] version: expected %d (fp32)%s, found %d", path, GPT2_VERSION,
                        h[1] == 5 ? "; version 5 is llm.c's bf16 format, not supported" : "", h[1]);
    it_gpt2_config cfg = {h[2], h[3], h[7], h[4], h[5], h[6]};
    st = it_gpt2_config_check(&cfg);
    if (st) { /* a bad header is a bad file (IT_ERR_FORMAT), not a bad argument */
        char why[1024];
        snprintf(why, sizeof why, "%s", it_last_error());
        return it_error(IT_ERR_FORMAT, "%s: header fields: %s", path, why);
    }
    int64_t n = num_params(&cfg, NULL);
    size_t want = 1024 + (size_t)n * sizeof(float);
    if (file_bytes != want)
        return it_error(IT_ERR_FORMAT,
                        "%s: file size: the header (L=%d, C=%d, Vp=%d, block_size=%d) implies %lld parameters = %zu "
                        "bytes, found %zu bytes",
                        path, cfg.n_layer, cfg.n_embd, cfg.padded_vocab_size, cfg.block_size, (long long)n, want,
                        file_bytes);
    it_model *m = NULL;
    st = it__gpt2_build(&cfg, dev, par, &m);
    if (st) return st;
    memcpy(((gpt2 *)m->impl)->header, h, sizeof h);
    st = m->tp || m->pp ? it__model_read_sliced(m, path) : it__read_params(path, m->params, n);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}
