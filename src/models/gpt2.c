/* GPT-2 (llm.c layout): pre-LN blocks, GELU (tanh) MLP, causal attention, tied lm_head.
 *
 *   x = wte[idx] + wpe[0:T]                                   (B, T, C)
 *   for each layer: x += c_proj(attn(ln_1(x)));  x += mlp(ln_2(x))
 *   logits = ln_f(x) @ wte^T                                  (B, T, Vp)
 *
 * Checkpoint: magic 20240326, version 3, fp32; see ../shared/design/FORMATS.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

#define GPT2_MAGIC 20240326
#define GPT2_VERSION 3
#define LN_EPS 1e-5f

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, NKINDS };

typedef struct gpt2 {
    it_gpt2_config cfg;
    int32_t header[256]; /* as read (or made), written back unchanged */
    it_tensor *wte, *wpe, *lnfw, *lnfb;
    it_tensor **layer[NKINDS]; /* per-layer views for kinds LN1W..FCPROJB */
} gpt2;

/* Element counts of each kind (all layers), in checkpoint order. */
static void kind_sizes(const it_gpt2_config *c, int64_t sizes[NKINDS]) {
    int64_t C = c->n_embd, L = c->n_layer;
    sizes[WTE] = (int64_t)c->padded_vocab_size * C;
    sizes[WPE] = (int64_t)c->block_size * C;
    sizes[LN1W] = L * C;
    sizes[LN1B] = L * C;
    sizes[QKVW] = L * 3 * C * C;
    sizes[QKVB] = L * 3 * C;
    sizes[ATTPROJW] = L * C * C;
    sizes[ATTPROJB] = L * C;
    sizes[LN2W] = L * C;
    sizes[LN2B] = L * C;
    sizes[FCW] = L * 4 * C * C;
    sizes[FCB] = L * 4 * C;
    sizes[FCPROJW] = L * C * 4 * C;
    sizes[FCPROJB] = L * C;
    sizes[LNFW] = C;
    sizes[LNFB] = C;
}

static int64_t num_params(const it_gpt2_config *c) {
    int64_t s[NKINDS], n = 0;
    kind_sizes(c, s);
    for (int k = 0; k < NKINDS; k++) n += s[k];
    return n;
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
#define RANGE(field, lo, hi)                                                                           \
    if (c->field < (lo) || c->field > (hi))                                                            \
        return it_error(IT_ERR_INVALID_ARG, "GPT-2 config: " #field " = %d, expected %d..%d", c->field, (lo), (hi));
    RANGE(block_size, 1, 1 << 20);
    RANGE(vocab_size, 1, 1 << 24);
    RANGE(padded_vocab_size, c->vocab_size, 1 << 24);
    RANGE(n_layer, 1, 1024);
    RANGE(n_head, 1, 1024);
    RANGE(n_embd, 1, 1 << 16);
#undef RANGE
    if (c->n_embd % c->n_head)
        return it_error(IT_ERR_INVALID_ARG, "GPT-2 config: n_embd %d is not divisible by n_head %d", c->n_embd, c->n_head);
    return IT_OK;
}

/* ---------------------------------------------------------------- forward */

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
    it_tensor *pos = it_slice(g->wpe, 0, 0, T, 1);                     /* (T, C) */
    it_tensor *x = it_add(it_embedding(idx, g->wte), pos);              /* (B, T, C) */
    for (int l = 0; l < g->cfg.n_layer; l++) {
        it_tensor *h = it_layernorm(x, g->layer[LN1W][l], g->layer[LN1B][l], LN_EPS);
        h = it_linear(h, g->layer[QKVW][l], g->layer[QKVB][l]);          /* (B, T, 3C) */
        h = it_causal_self_attention(h, g->cfg.n_head);                  /* (B, T, C) */
        h = it_linear(h, g->layer[ATTPROJW][l], g->layer[ATTPROJB][l]);
        x = it_add(x, h);
        h = it_layernorm(x, g->layer[LN2W][l], g->layer[LN2B][l], LN_EPS);
        h = it_gelu(it_linear(h, g->layer[FCW][l], g->layer[FCB][l]));  /* (B, T, 4C) */
        h = it_linear(h, g->layer[FCPROJW][l], g->layer[FCPROJB][l]);
        x = it_add(x, h);
    }
    x = it_layernorm(x, g->lnfw, g->lnfb, LN_EPS);
    (void)B;
    (void)C;
    return it_linear(x, g->wte, NULL); /* (B, T, Vp), tied to the embedding */
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
    return it__write_checkpoint(path, g->header, m->params);
}

static void gpt2_free(void *impl) {
    gpt2 *g = impl;
    if (!g) return;
    it_tensor_release(g->wte);
    it_tensor_release(g->wpe);
    it_tensor_release(g->lnfw);
    it_tensor_release(g->lnfb);
    for (int k = 0; k < NKINDS; k++) {
        if (!g->layer[k]) continue;
        for (int l = 0; l < g->cfg.n_layer; l++) it_tensor_release(g->layer[k][l]);
        free(g->layer[k]);
    }
    free(g);
}

static const it_model_vtable gpt2_vtable = {gpt2_forward, gpt2_save, gpt2_flops, gpt2_free};

/* Build the model object and the parameter views over freshly allocated buffers. */
static it_status gpt2_build(const it_gpt2_config *cfg, it_device dev, it_model **out) {
    it_status st = it_gpt2_config_check(cfg);
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
    st = it__model_init(m, &gpt2_vtable, dev, num_params(cfg));
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
                              .ffn_hidden = 4 * cfg->n_embd};
    int64_t sizes[NKINDS], off = 0, C = cfg->n_embd;
    kind_sizes(cfg, sizes);
    /* per-layer shapes of the kinds that repeat */
    int64_t shapes[NKINDS][2] = {{0}};
    int nd[NKINDS] = {0};
#define SHAPE(k, n, a, b) (nd[k] = (n), shapes[k][0] = (a), shapes[k][1] = (b))
    SHAPE(LN1W, 1, C, 0);
    SHAPE(LN1B, 1, C, 0);
    SHAPE(QKVW, 2, 3 * C, C);
    SHAPE(QKVB, 1, 3 * C, 0);
    SHAPE(ATTPROJW, 2, C, C);
    SHAPE(ATTPROJB, 1, C, 0);
    SHAPE(LN2W, 1, C, 0);
    SHAPE(LN2B, 1, C, 0);
    SHAPE(FCW, 2, 4 * C, C);
    SHAPE(FCB, 1, 4 * C, 0);
    SHAPE(FCPROJW, 2, C, 4 * C);
    SHAPE(FCPROJB, 1, C, 0);
#undef SHAPE
    for (int k = 0; k < NKINDS; k++) {
        if (k == WTE) g->wte = it__model_param(m, off, 2, (int64_t[]){cfg->padded_vocab_size, C});
        else if (k == WPE) g->wpe = it__model_param(m, off, 2, (int64_t[]){cfg->block_size, C});
        else if (k == LNFW) g->lnfw = it__model_param(m, off, 1, (int64_t[]){C});
        else if (k == LNFB) g->lnfb = it__model_param(m, off, 1, (int64_t[]){C});
        else {
            g->layer[k] = calloc((size_t)cfg->n_layer, sizeof(it_tensor *));
            if (!g->layer[k]) {
                st = it_error(IT_ERR_OOM, "gpt2: out of host memory");
                goto fail;
            }
            int64_t per = sizes[k] / cfg->n_layer;
            for (int l = 0; l < cfg->n_layer; l++) {
                g->layer[k][l] = it__model_param(m, off + l * per, nd[k], shapes[k]);
                if (!g->layer[k][l]) {
                    st = it_last_status();
                    goto fail;
                }
            }
        }
        off += sizes[k];
    }
    if (!g->wte || !g->wpe || !g->lnfw || !g->lnfb) {
        st = it_last_status();
        goto fail;
    }
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
    it_model *m = NULL;
    it_status st = gpt2_build(cfg, dev, &m);
    if (st) return st;
    int64_t n = m->info.num_params, sizes[NKINDS];
    kind_sizes(cfg, sizes);
    float *host = malloc((size_t)n * sizeof(float));
    if (!host) {
        it_model_free(m);
        return it_error(IT_ERR_OOM, "gpt2: %lld parameters of host memory for initialization", (long long)n);
    }
    it_rng rng = {seed};
    double resid_std = 0.02 / sqrt(2.0 * cfg->n_layer);
    int64_t off = 0;
    for (int k = 0; k < NKINDS; k++) {
        for (int64_t i = 0; i < sizes[k]; i++) {
            float v;
            switch (k) {
            case LN1W: case LN2W: case LNFW: v = 1.0f; break;
            case LN1B: case LN2B: case LNFB: case QKVB: case ATTPROJB: case FCB: case FCPROJB: v = 0.0f; break;
            case ATTPROJW: case FCPROJW: v = (float)(resid_std * it__rng_normal(&rng)); break;
            default: v = (float)(0.02 * it__rng_normal(&rng)); break;
            }
            host[off + i] = v;
        }
        off += sizes[k];
    }
    st = it_tensor_copy_from_host(m->params, host, (size_t)n * sizeof(float));
    free(host);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}

it_status it_gpt2_load(const char *path, it_device dev, it_model **out) {
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
    int64_t n = num_params(&cfg);
    size_t want = 1024 + (size_t)n * sizeof(float);
    if (file_bytes != want)
        return it_error(IT_ERR_FORMAT,
                        "%s: file size: the header (L=%d, C=%d, Vp=%d, block_size=%d) implies %lld parameters = %zu "
                        "bytes, found %zu bytes",
                        path, cfg.n_layer, cfg.n_embd, cfg.padded_vocab_size, cfg.block_size, (long long)n, want,
                        file_bytes);
    it_model *m = NULL;
    st = gpt2_build(&cfg, dev, &m);
    if (st) return st;
    memcpy(((gpt2 *)m->impl)->header, h, sizeof h);
    st = it__read_params(path, m->params, n);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}
