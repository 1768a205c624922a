/* LLaMA-3 (llm.c checkpoint, magic 20240803), tiny Mixtral (InfiniTrain, magic 20260513) and
 * Qwen3 (InfiniTrain-Test's llm.c-style file, magic 20240804, or Hugging Face): the same
 * decoder, RMSNorm + RoPE + grouped-query attention, with a SwiGLU MLP (LLaMA-3, Qwen3) or a
 * mixture of SwiGLU experts (Mixtral). No biases; lm_head untied, except a Qwen3 whose config
 * ties it to wte.
 *
 *   x = wte[idx]
 *   for each layer: x += c_proj(attn(rope(q), rope(k), v)) of rmsnorm_1(x)
 *                   x += mlp(rmsnorm_2(x))
 *   logits = rmsnorm_f(x) @ lm_head^T                      (B, T, V)
 *
 * Qwen3 differs in three places: q and k each pass a per-head RMSNorm (q_norm, k_norm, one
 * head_dim weight every head shares) before RoPE; RoPE turns the half-split pairs (i, i + hd/2)
 * of Hugging Face's rotate_half rather than LLaMA's adjacent (2i, 2i+1); head_dim is its own
 * (Qwen3-0.6B: 16 heads of 128 on a 1024-wide model). The half-split pairs go through the same
 * RoPE op: after its norm each head of q and k is reordered so that pair (i, i + hd/2) sits at
 * (2i, 2i+1) (half_pairs), which the op then turns as Hugging Face turns the pair. q and k
 * stay in that order into attention: q.k sums the same products, and v is not reordered, so
 * the output is the model's. One copy of q and of k per layer, no kernel of its own.
 *
 * Layouts: docs/formats.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "core/precision_hooks.h"
#include "infinitrain/dist.h"
#include "models/model_impl.h"

#define LLAMA3_MAGIC 20240803
#define LLAMA3_VERSION 3
#define MIXTRAL_MAGIC 20260513
#define MIXTRAL_VERSION 2
#define QWEN3_MAGIC 20240804
#define QWEN3_VERSION 4
#define QWEN3_TIED_SLOT 16 /* this project's mark of a tied Qwen3 in its llm.c-style header */

typedef struct llama {
    bool moe;
    bool qwen3;                              /* q_norm/k_norm, half-split RoPE, head_dim of its own */
    bool tied;                               /* lm_head is wte (Qwen3 only) */
    int L, nh, nkv, C, hd, F, V, T, E, topk; /* F: FFN width (LLaMA-3 MLP, each Mixtral expert) */
    float eps, theta;
    bool scaled_rope;
    float rope_factor, rope_low, rope_high, rope_old_ctx; /* LLaMA-3.1 scaling: 8, 1, 4, 8192 in llm.c */
    int32_t header[256];
    it_tensor *cos, *sin; /* owned */
    int rope_T;           /* positions cos/sin hold: built by the first forward for its T, grown on demand */
    /* The parameters, borrowed from the model. Per layer: qkv is LLaMA-3's fused c_attn;
     * Mixtral's forward uses q, k, v and its qkv is the c_attn entry's view over them. */
    it_tensor *wte, *lnf, *lm_head; /* tied: lm_head NULL, or under PP the last stage's copy of wte */
    it_tensor **ln1, **ln2, **qkv, **q, **k, **v, **proj, **fc, **fc2, **fc_proj, **router;
    it_tensor **qn, **kn;           /* Qwen3's q_norm, k_norm */
    it_tensor **gate, **up, **down; /* [l * E + e] */
    float aux_coeff;
    int64_t *expert_tokens; /* L * E routed assignments since the last read */
    it_tensor *aux_total;   /* during a forward: the experts' auxiliary losses so far */
    /* ... and those of layers that ran without autograd, as a value: a recomputed layer's first
     * forward runs inside the checkpoint's own scope, which its tensors do not outlive. Summed
     * in fp32 in layer order, as aux_total's adds would (the same bits), and folded into
     * aux_total before the next layer's tensor joins it or when the forward ends. */
    float aux_value;
    bool aux_pending;
    int64_t B, Tcur; /* the forward's batch and (whole) sequence length */
} llama;

static float f32(int32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* InfiniTrain's FFN width: h = 4C; h = 2h/3; h = llround(h * multiplier) in fp32; round up
 * to a multiple of multiple_of. */
static int64_t llama3_ffn_hidden(int C, float multiplier, int multiple_of) {
    int64_t h = 4 * (int64_t)C;
    h = 2 * h / 3;
    float prod = (float)h * multiplier;
    h = llroundf(prod);
    return (h + multiple_of - 1) / multiple_of * multiple_of;
}

/* ---------------------------------------------------------------- RoPE tables */

/* cos/sin (T, hd/2) of t * freq_i, freq_i = theta^(-2i/hd) in fp32, optionally with the
 * LLaMA-3.1 scaling (llm.c's factor 8, low 1, high 4, original context 8192, or a Hugging Face
 * config's rope_scaling). Row t depends on t alone,
 * so tables for the T a forward uses equal the first T rows of tables for block_size; they are
 * built for the T asked, not for block_size, since a header may say block_size 2^20 (about
 * 1 GB of tables) for a file of under a megabyte. */
static it_status rope_tables(llama *g, it_device dev, int T) {
    int half = g->hd / 2;
    float *freq = malloc(sizeof(float) * (size_t)half);
    float *c = malloc(sizeof(float) * (size_t)T * (size_t)half), *s = malloc(sizeof(float) * (size_t)T * (size_t)half);
    if (!freq || !c || !s) {
        free(freq);
        free(c);
        free(s);
        return it_error(IT_ERR_OOM, "rope tables: out of host memory");
    }
    for (int i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)g->hd;
        float f = 1.0f / powf(g->theta, expo);
        if (g->scaled_rope) {
            const float factor = g->rope_factor, low = g->rope_low, high = g->rope_high, old_ctx = g->rope_old_ctx;
            float low_wl = old_ctx / low, high_wl = old_ctx / high;
            float wavelen = (float)(2.0 * M_PI) / f;
            if (wavelen < high_wl) {
                /* unchanged */
            } else if (wavelen > low_wl) {
                f = f / factor;
            } else {
                float smooth = (old_ctx / wavelen - low) / (high - low);
                f = (1.0f - smooth) * f / factor + smooth * f;
            }
        }
        freq[i] = f;
    }
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)t * freq[i];
            c[t * half + i] = (float)cos((double)ang);
            s[t * half + i] = (float)sin((double)ang);
        }
    }
    int64_t shape[2] = {T, half};
    size_t bytes = sizeof(float) * (size_t)T * (size_t)half;
    it_tensor_release(g->cos);
    it_tensor_release(g->sin);
    g->rope_T = 0;
    g->cos = it__tensor_new_owned(dev, IT_DTYPE_FP32, 2, shape);
    g->sin = it__tensor_new_owned(dev, IT_DTYPE_FP32, 2, shape);
    it_status st = g->cos && g->sin ? IT_OK : it_last_status();
    if (!st) st = it_tensor_copy_from_host(g->cos, c, bytes);
    if (!st) st = it_tensor_copy_from_host(g->sin, s, bytes);
    if (!st) g->rope_T = T;
    free(freq);
    free(c);
    free(s);
    return st;
}

/* ---------------------------------------------------------------- forward */

/* aux_total with the pending value (the earlier layers that ran without autograd) folded in. */
static it_tensor *aux_fold(it_model *m) {
    llama *g = m->impl;
    if (!g->aux_pending) return g->aux_total;
    g->aux_pending = false;
    it_tensor *v = it_tensor_from_host(m->dev, IT_DTYPE_FP32, 0, NULL, &g->aux_value, sizeof(float));
    g->aux_total = g->aux_total ? it_add(g->aux_total, v) : v;
    return g->aux_total;
}

/* it__moe's hook under TP: the (N*k, C) partial down products summed over the TP ranks
 * (forward all-reduce, backward identity). */
static it_tensor *moe_tp_sum(void *ctx, it_tensor *partial) { return it_tp_reduce(((it_model *)ctx)->tp, partial); }

/* x (B, T, H, hd) with each head's elements reordered i -> 2i, i + hd/2 -> 2i + 1 (i < hd/2):
 * the half-split RoPE pairs made adjacent, for it_rope (the header comment says why). */
static it_tensor *half_pairs(it_tensor *x) {
    if (!x) return NULL;
    int64_t B = it_tensor_dim(x, 0), T = it_tensor_dim(x, 1), H = it_tensor_dim(x, 2), hd = it_tensor_dim(x, 3);
    it_tensor *y = it_transpose(it_reshape(x, 5, (int64_t[]){B, T, H, 2, hd / 2}), 3, 4);
    return it_reshape(it_contiguous(y), 4, (int64_t[]){B, T, H, hd});
}

/* Block l on x (the residual stream, B x T x C or T/TP rows under SP): attention, then the
 * SwiGLU MLP or the experts, each added to x. The batch shape and the RoPE tables are the
 * forward's (g->B, g->Tcur; recomputation at backward finds them unchanged). */
static it_tensor *llama_layer(it_model *m, int l, it_tensor *x) {
    llama *g = m->impl;
    int nh = g->nh / m->tp_size, nkv = g->nkv % m->tp_size ? 1 : g->nkv / m->tp_size; /* 1: kept, not cut */
    int64_t B = g->B, T = g->Tcur, C = (int64_t)nh * g->hd, kvd = (int64_t)nkv * g->hd;
    int64_t pos = it__kv_pos(m); /* a cached forward's first position (kv_cache.c) */
    /* the rows' positions: pos .. pos + T - 1, or this context-parallel rank's (context.c) */
    it_tensor *cos = it__cp_rows(m, g->cos, pos, T, 0, T), *sin = it__cp_rows(m, g->sin, pos, T, 0, T);
    IT_PREC_LAYER(l);
    it_tensor *h = IT_PREC_MODULE(it_rmsnorm(x, g->ln1[l], g->eps), l, "ln_1");
    it_tensor *q, *k, *v;
    if (g->moe) {
        it_tensor *ha = it__tp_enter(m, h); /* one entry into the TP region for Q, K and V */
        q = it_linear(ha, g->q[l], NULL);
        k = it_linear(ha, g->k[l], NULL);
        v = it_linear(ha, g->v[l], NULL);
        bool none; /* an adapter on the packed c_attn: its rows Q|K|V added to each */
        it_tensor *d = it__lora_delta(m, ha, g->qkv[l], &none);
        if (!none) {
            q = it_add(q, it_slice(d, 2, 0, C, 1));
            k = it_add(k, it_slice(d, 2, C, C + kvd, 1));
            v = it_add(v, it_slice(d, 2, C + kvd, C + 2 * kvd, 1));
        }
    } else { /* fused c_attn, rows Q|K|V */
        it_tensor *qkv = IT_PREC_MODULE(it__linear(m, it__tp_enter(m, h), g->qkv[l], NULL), l, "attn.c_attn");
        q = it_slice(qkv, 2, 0, C, 1);
        k = it_slice(qkv, 2, C, C + kvd, 1);
        v = it_slice(qkv, 2, C + kvd, C + 2 * kvd, 1);
    }
    q = it_reshape(q, 4, (int64_t[]){B, T, nh, g->hd});
    k = it_reshape(k, 4, (int64_t[]){B, T, nkv, g->hd});
    if (g->qwen3) {
        q = half_pairs(IT_PREC_MODULE(it_rmsnorm(q, g->qn[l], g->eps), l, "attn.q_norm"));
        k = half_pairs(IT_PREC_MODULE(it_rmsnorm(k, g->kn[l], g->eps), l, "attn.k_norm"));
    }
    q = it_rope(q, cos, sin);
    k = it_rope(k, cos, sin);
    v = it_reshape(v, 4, (int64_t[]){B, T, nkv, g->hd});
    if (m->kv && it__kv_extend(m, l, &k, &v)) return NULL; /* generation: every position's keys */
    /* under autocast y stays bf16 into an unadapted projection (the same bits as widened) */
    it_tensor *y = it__cp_attend(m, q, k, v, !it__lora_adapts(m, g->proj[l]));
    it_tensor *att = IT_PREC_MODULE(it__tp_row_linear(m, y, g->proj[l], NULL), l, "attn.c_proj");
    x = it_add(x, IT_PREC_MODULE(att, l, "attn"));
    h = IT_PREC_MODULE(it_rmsnorm(x, g->ln2[l], g->eps), l, "ln_2");
    if (g->moe) {
        int64_t counts[256];
        it_tensor *aux = NULL;
        /* Under TP each expert is cut as the dense MLP is (gate and up by columns, down by rows)
         * and the router is whole on every rank: the experts read h through the TP region's
         * entry, the router reads it as it is (its gradient is the same on every rank and is
         * added once), and each assignment's partial down product is summed over the ranks
         * before its routing weight scales it, so the router's gradient is the same on every
         * rank too. Under SP h is this rank's rows: the router reads the gathered sequence
         * (its gradient split back without a sum), the experts read that through the copy
         * region (their partial gradients summed), and the output, the same on every rank,
         * is split back to this rank's rows (docs/parallelism.md). */
        it_tensor *hr = m->sp ? it_sp_gather_split(m->tp, h) : h; /* SP: every token, for the router */
        it_tensor *y = it__moe(hr, m->sp ? it_tp_copy(m->tp, hr) : it__tp_enter(m, h), m->tp ? moe_tp_sum : NULL, m,
                               g->router[l], g->E, g->gate + (size_t)l * g->E, g->up + (size_t)l * g->E,
                               g->down + (size_t)l * g->E, g->topk, counts, g->aux_coeff > 0 ? &aux : NULL);
        if (m->sp) y = it_sp_split(m->tp, y); /* the same on every rank: this rank's rows */
        /* training tokens only: validation and sampling run without autograd, and so does a
         * recomputed layer's first forward (it is counted when it runs again, at backward) */
        if (y && g->expert_tokens && it_grad_enabled())
            for (int e = 0; e < g->E; e++) g->expert_tokens[l * g->E + e] += counts[e];
        bool again = it__recomputing();
        if (aux && !again && !it_grad_enabled()) {
            double v = 0;
            if (it_tensor_item(aux, NULL, &v)) return NULL;
            g->aux_value = g->aux_pending ? g->aux_value + (float)v : (float)v;
            g->aux_pending = true;
        } else if (aux && !again) {
            it_tensor *before = aux_fold(m);
            g->aux_total = before ? it_add(before, aux) : aux;
        }
        x = it_add(x, IT_PREC_MODULE(y, l, "mlp"));
        /* Recomputed: the loss counted this layer's auxiliary loss as a value when it first ran
         * without a graph; its gradient joins here, as the loss's would have reached it (the
         * same two factors, in the same order). */
        if (aux && again) x = it_attach_loss(x, it_scale(it_scale(aux, g->aux_coeff / (float)g->L), m->loss_scale));
    } else {                    /* c_proj(c_fc(x) * silu(c_fc2(x))) */
        h = it__tp_enter(m, h); /* one gather for both column-parallel inputs (InfiniTrain gathers twice) */
        it_tensor *y;
        if (it__mlp_keeps_low(m, (it_tensor *[]){g->fc[l], g->fc2[l], g->fc_proj[l]}, 3)) {
            /* under autocast: h rounded once for both products, whose outputs stay bf16 into
             * the fused SwiGLU (the same bits as widened; no module outputs to report) */
            it_tensor *hl[2] = {NULL, NULL};
            y = it__autocast_share(h, 2, hl)
                    ? it__swiglu_low(it__linear_low(hl[1], g->fc2[l], NULL), it__linear_low(hl[0], g->fc[l], NULL))
                    : NULL;
            y = it__tp_row_linear(m, y, g->fc_proj[l], NULL);
        } else {
            it_tensor *fc = IT_PREC_MODULE(it__linear(m, h, g->fc[l], NULL), l, "mlp.c_fc");
            it_tensor *fc2 = IT_PREC_MODULE(it__linear(m, h, g->fc2[l], NULL), l, "mlp.c_fc2");
            fc2 = IT_PREC_MODULE(it_silu(fc2), l, "mlp.silu");
            y = IT_PREC_MODULE(it__tp_row_linear(m, it_mul(fc, fc2), g->fc_proj[l], NULL), l, "mlp.c_proj");
        }
        x = it_add(x, IT_PREC_MODULE(y, l, "mlp"));
    }
    return IT_PREC_MODULE(x, l, "");
}

static it_tensor *llama_forward(it_model *m, it_tensor *idx) {
    llama *g = m->impl;
    if (!idx) return NULL;
    if (it_tensor_ndim(idx) != 2) {
        it_error(IT_ERR_INVALID_ARG, "%s: input must be (B, T), got %d-D", m->info.family, it_tensor_ndim(idx));
        return NULL;
    }
    /* Under tensor parallelism this rank's heads (nh/N of Q, nkv/N of K and V), FFN columns and
     * vocabulary rows (llama_layer); with sequence parallelism x holds T/N rows between the
     * collectives. */
    int64_t B = it_tensor_dim(idx, 0), T = it_tensor_dim(idx, 1);
    if (T < 1 || T > g->T) {
        it_error(IT_ERR_INVALID_ARG, "%s: sequence length %lld outside 1..block_size %d", m->info.family, (long long)T,
                 g->T);
        return NULL;
    }
    if (m->sp && T % m->tp_size) {
        it_error(IT_ERR_INVALID_ARG, "%s: sequence parallel: sequence length %lld is not divisible by TP %d",
                 m->info.family, (long long)T, m->tp_size);
        return NULL;
    }
    /* a cached forward's tokens sit at positions end - T .. end - 1; a context-parallel rank's
     * T rows are part of a sequence of CP times as many */
    int64_t end = it__kv_pos(m) + it__cp_length(m, T);
    if (end > g->T) {
        it_error(IT_ERR_INVALID_ARG, "%s: positions %lld..%lld outside block_size %d", m->info.family,
                 (long long)(end - it__cp_length(m, T)), (long long)(end - 1), g->T);
        return NULL;
    }
    if (end > g->rope_T) { /* grow geometrically: generation asks for 1, 2, 3, ... positions */
        int64_t want = end > 2 * (int64_t)g->rope_T ? end : 2 * (int64_t)g->rope_T;
        if (rope_tables(g, m->dev, (int)(want < g->T ? want : g->T))) return NULL;
    }
    it_tensor *x = m->stage_in; /* a later pipeline stage: the previous stage's output */
    if (m->first) {
        x = IT_PREC_MODULE(it__tp_embed(m, idx, g->wte), -1, "transformer.wte"); /* (B, T, C) */
    } else if (!x) {
        it_error(IT_ERR_INVALID_ARG, "%s: pipeline stage %d has no input activation", m->info.family, m->pp_rank);
        return NULL;
    }
    g->aux_total = NULL;
    g->aux_pending = false;
    g->B = B;
    g->Tcur = T;
    x = it__run_layers(m, x, m->l0, m->l1 < g->L ? m->l1 : g->L, llama_layer);
    it_tensor *aux_total = aux_fold(m);
    g->aux_total = NULL;
    if (!m->last) { /* to the next pipeline stage; its layers' auxiliary loss for the pipeline */
        m->stage_aux = aux_total ? it_scale(aux_total, g->aux_coeff / (float)g->L) : NULL;
        return x;
    }
    IT_PREC_LAYER(-1);
    x = it__kv_last(m, x); /* generation: the last position's logits alone */
    x = IT_PREC_MODULE(it_rmsnorm(x, g->lnf, g->eps), -1, "transformer.ln_f");
    it_tensor *head = g->lm_head ? g->lm_head : g->wte; /* tied: wte (under PP the last stage's copy) */
    it_tensor *logits = IT_PREC_MODULE(it__lm_head(m, it__tp_enter(m, x), head), -1, "lm_head");
    if (logits && aux_total) m->aux_loss = it_scale(aux_total, g->aux_coeff / (float)g->L);
    return logits;
}

static double llama_flops(const it_model *m, int64_t T) {
    const llama *g = m->impl;
    double n = (double)m->info.num_params; /* less the embedding, a lookup (unless it is the head too) */
    if (!g->tied) n -= (double)g->V * g->C;
    if (g->moe) { /* only k of E experts run per token */
        double expert = 3.0 * g->F * g->C;
        n -= (double)g->L * (g->E - g->topk) * expert;
    }
    return 6.0 * n + 12.0 * g->L * ((double)g->nh * g->hd) * (double)T;
}

/* A tied Qwen3's file holds lm_head after ln_f all the same (InfiniTrain-Test's converter
 * writes it, InfiniTrain reads it): wte's rows again. */
static it_status llama_save(const it_model *m, const char *path) {
    const llama *g = m->impl;
    if (g->qwen3 && (int64_t)g->nh * g->hd != g->C)
        return it_error(IT_ERR_UNSUPPORTED,
                        "%s: Qwen3's llm.c-style file has no head_dim slot (it holds n_embd / n_head = %d), and this "
                        "model's heads are %d wide; keep it in Hugging Face form (--output_hf)",
                        path, g->C / g->nh, g->hd);
    return it__save_checkpoint_tail(m, path, g->header, 0, g->tied ? (int64_t)g->V * g->C : 0);
}

static void llama_free(void *impl) {
    llama *g = impl;
    if (!g) return;
    it_tensor_release(g->cos);
    it_tensor_release(g->sin);
    it_tensor **per[] = {g->ln1, g->ln2,     g->qkv,    g->q,    g->k,  g->v,    g->proj, g->fc,
                         g->fc2, g->fc_proj, g->router, g->gate, g->up, g->down, g->qn,   g->kn};
    for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) free(per[i]);
    free(g->expert_tokens);
    free(g);
}

static void mixtral_set_aux_loss_coeff(it_model *m, float coeff) { ((llama *)m->impl)->aux_coeff = coeff; }

static int mixtral_expert_tokens(it_model *m, int64_t *counts, int max, bool reset) {
    llama *g = m->impl;
    if (!g->expert_tokens) return 0;
    int n = g->L * g->E;
    for (int i = 0; i < n && i < max; i++) counts[i] = g->expert_tokens[i];
    if (reset) memset(g->expert_tokens, 0, sizeof(int64_t) * (size_t)n);
    return n;
}

static it_status llama_walk(llama *g, it__layout *lo);

static void llama_walk_all(const it_model *m, it__layout *lo) {
    llama whole = *(const llama *)m->impl; /* a copy: the counting walk sets its arrays to NULL */
    llama_walk(&whole, lo);
}

static const it_model_vtable llama3_vtable = {llama_forward, llama_save, llama_flops,   llama_free,
                                              NULL,          NULL,       llama_walk_all};
static const it_model_vtable mixtral_vtable = {
    llama_forward,         llama_save,    llama_flops, llama_free, mixtral_set_aux_loss_coeff,
    mixtral_expert_tokens, llama_walk_all};

/* ---------------------------------------------------------------- layout */

/* Per-layer arrays are made only when building (lo->m set); counting leaves them NULL. */
static it_tensor **per_layer(const it__layout *lo, int count, bool *failed) {
    if (!lo->m) return NULL;
    it_tensor **a = calloc((size_t)count, sizeof *a);
    if (!a) *failed = true;
    return a;
}

static void put(it_tensor **arr, int i, it_tensor *t) {
    if (arr) arr[i] = t;
}

static it__param_spec spec1(it_param_role role, int layer, int64_t n) {
    return (it__param_spec){role, false, layer, -1, 1, {n, 0}, NULL, 0, 0};
}

static it__param_spec spec2(it_param_role role, int layer, int expert, int64_t rows, int64_t cols) {
    return (it__param_spec){role, false, layer, expert, 2, {rows, cols}, NULL, 0, 0};
}

/* The checkpoint layout with InfiniTrain's names (example/llama3 and example/tiny_mixtral).
 * LLaMA-3: each kind for all layers in turn. Mixtral: layer by layer; its file stores Q, K and
 * V as three matrices one after the other, which InfiniTrain reads into one packed c_attn:
 * the entry is that packed c_attn over the three leaves. Each expert: gate (c_fc2), up (c_fc),
 * down (c_proj), Mixtral's w1, w3, w2. */
static it_status qwen3_walk(llama *g, it__layout *lo);

static it_status llama_walk(llama *g, it__layout *lo) {
    if (g->qwen3) return qwen3_walk(g, lo);
    int64_t C = g->C, kvd = (int64_t)g->nkv * g->hd, F = g->F;
    bool failed = false;
    g->wte = it__layout_take(lo, spec2(IT_PARAM_ROLE_TOKEN_EMBEDDING, -1, -1, g->V, C), "transformer.wte.weight");
    g->ln1 = per_layer(lo, g->L, &failed);
    g->proj = per_layer(lo, g->L, &failed);
    g->ln2 = per_layer(lo, g->L, &failed);
    g->qkv = per_layer(lo, g->L, &failed);
    if (!g->moe) {
        g->fc = per_layer(lo, g->L, &failed);
        g->fc2 = per_layer(lo, g->L, &failed);
        g->fc_proj = per_layer(lo, g->L, &failed);
        if (failed) return it_error(IT_ERR_OOM, "llama3: out of host memory");
        it__param_spec qkv_spec = spec2(IT_PARAM_ROLE_ATTN_QKV, -1, -1, C + 2 * kvd, C);
        qkv_spec.kv_rows = kvd;
        qkv_spec.head_dim = g->hd;
        for (int l = 0; l < g->L; l++)
            put(g->ln1, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_1.weight", l));
        for (int l = 0; l < g->L; l++)
            put(g->qkv, l,
                it__layout_take(lo, (qkv_spec.layer = l, qkv_spec), "transformer.h.%d.attn.c_attn.weight", l));
        for (int l = 0; l < g->L; l++)
            put(g->proj, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_ATTN_OUT, l, -1, C, C), "transformer.h.%d.attn.c_proj.weight",
                                l));
        for (int l = 0; l < g->L; l++)
            put(g->ln2, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_2.weight", l));
        for (int l = 0; l < g->L; l++)
            put(g->fc, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_UP, l, -1, F, C), "transformer.h.%d.mlp.c_fc.weight", l));
        for (int l = 0; l < g->L; l++)
            put(g->fc2, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_GATE, l, -1, F, C), "transformer.h.%d.mlp.c_fc2.weight",
                                l));
        for (int l = 0; l < g->L; l++)
            put(g->fc_proj, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_DOWN, l, -1, C, F), "transformer.h.%d.mlp.c_proj.weight",
                                l));
    } else {
        g->q = per_layer(lo, g->L, &failed);
        g->k = per_layer(lo, g->L, &failed);
        g->v = per_layer(lo, g->L, &failed);
        g->router = per_layer(lo, g->L, &failed);
        g->gate = per_layer(lo, g->L * g->E, &failed);
        g->up = per_layer(lo, g->L * g->E, &failed);
        g->down = per_layer(lo, g->L * g->E, &failed);
        if (failed) return it_error(IT_ERR_OOM, "mixtral: out of host memory");
        /* under TP the alias and its leaves are this rank's heads: [Q_r | K_r | V_r] */
        it__param_spec qkv_spec = spec2(IT_PARAM_ROLE_ATTN_QKV, -1, -1, C + 2 * kvd, C);
        qkv_spec.kv_rows = kvd;
        qkv_spec.head_dim = g->hd;
        int64_t q_r, kv_r;
        it__layout_qkv_rows(lo, C, kvd, g->hd, &q_r, &kv_r);
        for (int l = 0; l < g->L; l++) {
            put(g->ln1, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_1.weight", l));
            put(g->qkv, l,
                it__layout_alias(lo, (qkv_spec.layer = l, qkv_spec), "transformer.h.%d.attn.c_attn.weight", l));
            put(g->q, l, it__layout_leaf(lo, 2, q_r, C));
            put(g->k, l, it__layout_leaf(lo, 2, kv_r, C));
            put(g->v, l, it__layout_leaf(lo, 2, kv_r, C));
            put(g->proj, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_ATTN_OUT, l, -1, C, C), "transformer.h.%d.attn.c_proj.weight",
                                l));
            put(g->ln2, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_2.weight", l));
            put(g->router, l,
                it__layout_take(lo, spec2(IT_PARAM_ROLE_ROUTER, l, -1, g->E, C), "transformer.h.%d.mlp.router.weight",
                                l));
            for (int e = 0; e < g->E; e++) {
                int i = l * g->E + e;
                put(g->gate, i,
                    it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_GATE, l, e, F, C),
                                    "transformer.h.%d.mlp.experts.expert_%d.c_fc2.weight", l, e));
                put(g->up, i,
                    it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_UP, l, e, F, C),
                                    "transformer.h.%d.mlp.experts.expert_%d.c_fc.weight", l, e));
                put(g->down, i,
                    it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_DOWN, l, e, C, F),
                                    "transformer.h.%d.mlp.experts.expert_%d.c_proj.weight", l, e));
            }
        }
    }
    g->lnf = it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, -1, C), "transformer.ln_f.weight");
    g->lm_head = it__layout_take(lo, spec2(IT_PARAM_ROLE_LM_HEAD, -1, -1, g->V, C), "lm_head.weight");
    return lo->st;
}

/* Qwen3, in InfiniTrain-Test's file order (its convert_hf_qwen3_to_llmc.py): wte; ln_1 of every
 * layer; q_norm and k_norm layer by layer; c_attn (rows Q|K|V in Hugging Face's order: no
 * RoPE permutation) of every layer; c_proj; ln_2; the gate (c_fc2), up (c_fc) and down
 * (c_proj) projections, each kind for every layer; ln_f; lm_head. Q is n_head * head_dim
 * rows, which need not be n_embd. Tied: no lm_head here (the file's copy is written at save);
 * under PP the last stage holds a copy of wte as its head, as GPT-2's. */
static it_status qwen3_walk(llama *g, it__layout *lo) {
    int64_t C = g->C, hd = g->hd, qd = (int64_t)g->nh * hd, kvd = (int64_t)g->nkv * hd, F = g->F;
    bool failed = false;
    it__param_spec wte = spec2(IT_PARAM_ROLE_TOKEN_EMBEDDING, -1, -1, g->V, C);
    if (g->tied) wte.tied_name = "lm_head.weight";
    g->wte = it__layout_take(lo, wte, "transformer.wte.weight");
    g->ln1 = per_layer(lo, g->L, &failed);
    g->qn = per_layer(lo, g->L, &failed);
    g->kn = per_layer(lo, g->L, &failed);
    g->qkv = per_layer(lo, g->L, &failed);
    g->proj = per_layer(lo, g->L, &failed);
    g->ln2 = per_layer(lo, g->L, &failed);
    g->fc = per_layer(lo, g->L, &failed);
    g->fc2 = per_layer(lo, g->L, &failed);
    g->fc_proj = per_layer(lo, g->L, &failed);
    if (failed) return it_error(IT_ERR_OOM, "qwen3: out of host memory");
    it__param_spec qkv_spec = spec2(IT_PARAM_ROLE_ATTN_QKV, -1, -1, qd + 2 * kvd, C);
    qkv_spec.kv_rows = kvd;
    qkv_spec.head_dim = hd;
    for (int l = 0; l < g->L; l++)
        put(g->ln1, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_1.weight", l));
    for (int l = 0; l < g->L; l++) {
        put(g->qn, l,
            it__layout_take(lo, spec1(IT_PARAM_ROLE_HEAD_NORM, l, hd), "transformer.h.%d.attn.q_norm.weight", l));
        put(g->kn, l,
            it__layout_take(lo, spec1(IT_PARAM_ROLE_HEAD_NORM, l, hd), "transformer.h.%d.attn.k_norm.weight", l));
    }
    for (int l = 0; l < g->L; l++)
        put(g->qkv, l, it__layout_take(lo, (qkv_spec.layer = l, qkv_spec), "transformer.h.%d.attn.c_attn.weight", l));
    for (int l = 0; l < g->L; l++)
        put(g->proj, l,
            it__layout_take(lo, spec2(IT_PARAM_ROLE_ATTN_OUT, l, -1, C, qd), "transformer.h.%d.attn.c_proj.weight", l));
    for (int l = 0; l < g->L; l++)
        put(g->ln2, l, it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, l, C), "transformer.h.%d.ln_2.weight", l));
    for (int l = 0; l < g->L; l++)
        put(g->fc2, l,
            it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_GATE, l, -1, F, C), "transformer.h.%d.mlp.c_fc2.weight", l));
    for (int l = 0; l < g->L; l++)
        put(g->fc, l,
            it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_UP, l, -1, F, C), "transformer.h.%d.mlp.c_fc.weight", l));
    for (int l = 0; l < g->L; l++)
        put(g->fc_proj, l,
            it__layout_take(lo, spec2(IT_PARAM_ROLE_MLP_DOWN, l, -1, C, F), "transformer.h.%d.mlp.c_proj.weight", l));
    g->lnf = it__layout_take(lo, spec1(IT_PARAM_ROLE_NORM, -1, C), "transformer.ln_f.weight");
    const it_model *par = lo->m ? lo->m : lo->par;
    if (!g->tied) {
        g->lm_head = it__layout_take(lo, spec2(IT_PARAM_ROLE_LM_HEAD, -1, -1, g->V, C), "lm_head.weight");
    } else if (par && par->pp_size > 1 && !par->stage_first) { /* the tied head, at the far end of the pipeline */
        g->lm_head = it__layout_tied_copy(lo, spec2(IT_PARAM_ROLE_LM_HEAD, -1, -1, g->V, C), "lm_head.weight", 0);
    } else {
        g->lm_head = NULL;
    }
    return lo->st;
}

/* Check a header's values; names the file, field, expected and found. */
static it_status check_config(const char *path, const llama *g) {
#define NEED(cond, field, fmt, ...)                                                                                    \
    if (!(cond)) return it_error(IT_ERR_FORMAT, "%s: header field %s: expected " fmt, path, field, __VA_ARGS__);
    NEED(g->T >= 1 && g->T <= (1 << 20), "block_size", "1..%d, found %d", 1 << 20, g->T);
    NEED(g->V >= 1 && g->V <= (1 << 24), "vocab_size", "1..%d, found %d", 1 << 24, g->V);
    NEED(g->L >= 1 && g->L <= 1024, "n_layer", "1..1024, found %d", g->L);
    NEED(g->nh >= 1 && g->nh <= 1024, "n_head", "1..1024, found %d", g->nh);
    NEED(g->nkv >= 1 && g->nh % g->nkv == 0, "n_kv_head", "a divisor of n_head %d, found %d", g->nh, g->nkv);
    if (g->qwen3) { /* head_dim given (Hugging Face) or n_embd / n_head (the llm.c-style file) */
        NEED(g->C >= 1 && g->C <= (1 << 16), "n_embd", "1..65536, found %d", g->C);
        NEED(g->hd >= 2 && g->hd <= 4096 && g->hd % 2 == 0, "head_dim", "an even size 2..4096 for RoPE, found %d",
             g->hd);
    } else {
        NEED(g->C >= 1 && g->C <= (1 << 16) && g->C % g->nh == 0, "n_embd",
             "1..65536 and divisible by n_head %d, found %d", g->nh, g->C);
        NEED(g->hd % 2 == 0, "n_embd", "an even head size n_embd/n_head for RoPE, found %d", g->hd);
    }
    NEED(isfinite(g->eps) && g->eps > 0, "norm_eps", "a positive float, found %g", g->eps);
    NEED(isfinite(g->theta) && g->theta > 0, "rope_theta", "a positive float, found %g", g->theta);
    NEED(g->F >= 1 && g->F <= (1 << 20), "ffn hidden size", "1..%d, found %d", 1 << 20, g->F);
    if (g->scaled_rope) {
        NEED(isfinite(g->rope_factor) && g->rope_factor >= 1, "rope scaling factor", "a float >= 1, found %g",
             g->rope_factor);
        NEED(isfinite(g->rope_low) && isfinite(g->rope_high) && g->rope_low > 0 && g->rope_high > g->rope_low,
             "rope scaling low/high_freq_factor", "0 < low < high, found %g and %g", g->rope_low, g->rope_high);
        NEED(g->rope_old_ctx >= 1, "rope scaling original_max_position_embeddings", ">= 1, found %g", g->rope_old_ctx);
    }
    if (g->moe) {
        NEED(g->E >= 1 && g->E <= 256, "num_experts", "1..256, found %d", g->E);
        NEED(g->topk >= 1 && g->topk <= g->E, "router_topk", "1..num_experts %d, found %d", g->E, g->topk);
    }
#undef NEED
    return IT_OK;
}

/* The model of g (taken over: freed with the model, or here on failure), its parameters not
 * yet read. `what` names the source in messages. */
static it_status llama_make(llama *g, it_device dev, const it_model_parallel *par, const char *what, it_model **out) {
    bool moe = g->moe;
    it_status st = check_config(what, g);
    if (!st) st = it__tp_check(par, moe ? "Mixtral" : g->qwen3 ? "Qwen3" : "LLaMA-3", g->nh, g->nkv, g->F, g->V);
    if (st) {
        free(g);
        return st;
    }
    it_model *m = calloc(1, sizeof *m);
    if (!m) {
        free(g);
        return it_error(IT_ERR_OOM, "%s: out of host memory", what);
    }
    m->impl = g;
    it__model_set_parallel(m, par);
    if (m->pp_size > 1) it__model_set_stages(m, g->L);
    it__layout mine = {.par = m}; /* this rank's elements */
    llama_walk(g, &mine);
    st = it__model_init(m, moe ? &mixtral_vtable : &llama3_vtable, dev, mine.off);
    m->info = (it_model_info){.family = moe        ? "mixtral"
                                        : g->qwen3 ? "qwen3"
                                                   : "llama3",
                              .block_size = g->T,
                              .vocab_size = g->V,
                              .padded_vocab = g->V,
                              .num_params = mine.off,
                              .n_layer = g->L,
                              .n_head = g->nh,
                              .n_embd = g->C,
                              .n_kv_head = g->nkv,
                              .ffn_hidden = g->F,
                              .n_expert = g->E,
                              .router_topk = g->topk,
                              .head_dim = g->hd,
                              .tied_embeddings = g->tied};
    if (!st) {
        it__layout lo = {.m = m};
        st = llama_walk(g, &lo);
    }
    if (!st && moe) {
        g->expert_tokens = calloc((size_t)g->L * (size_t)g->E, sizeof(int64_t));
        if (!g->expert_tokens) st = it_error(IT_ERR_OOM, "%s: out of host memory", what);
    }
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}

static void rope_scaling_llmc(llama *g) {
    g->rope_factor = 8.0f, g->rope_low = 1.0f, g->rope_high = 4.0f, g->rope_old_ctx = 8192.0f;
}

typedef enum family { FAMILY_LLAMA3, FAMILY_MIXTRAL, FAMILY_QWEN3 } family;

/* A Qwen3 header (InfiniTrain-Test's converter): [8] intermediate_size, [10] rms_norm_eps,
 * [11] rope_theta (f32 bits); [9] 1, [12] 0, [13] 4, [14] 1, [15] 0 as it writes them, not read;
 * [16] this project's tied mark (0 or 1). */
static it_status qwen3_header(const char *path, const int32_t *h, llama *g) {
    g->qwen3 = true;
    g->hd = g->nh > 0 && g->C % g->nh == 0 ? g->C / g->nh : 0;
    if (g->nh > 0 && g->C % g->nh)
        return it_error(IT_ERR_FORMAT,
                        "%s: header fields n_embd %d and n_head %d: the file has no head_dim slot, so head_dim is "
                        "n_embd / n_head, which must divide",
                        path, g->C, g->nh);
    g->F = h[8];
    g->eps = f32(h[10]);
    g->theta = f32(h[11]);
    if (h[QWEN3_TIED_SLOT] != 0 && h[QWEN3_TIED_SLOT] != 1)
        return it_error(IT_ERR_FORMAT, "%s: header field [%d] tie_word_embeddings: expected 0 or 1, found %d", path,
                        QWEN3_TIED_SLOT, h[QWEN3_TIED_SLOT]);
    g->tied = h[QWEN3_TIED_SLOT] == 1;
    return IT_OK;
}

static it_status llama_load(const char *path, it_device dev, family fam, const it_model_parallel *par, it_model **out) {
    int32_t h[256];
    size_t file_bytes = 0;
    it_status st = it__read_header(path, h, &file_bytes);
    if (st) return st;
    bool moe = fam == FAMILY_MIXTRAL;
    static const int32_t magics[] = {LLAMA3_MAGIC, MIXTRAL_MAGIC, QWEN3_MAGIC},
                         versions[] = {LLAMA3_VERSION, MIXTRAL_VERSION, QWEN3_VERSION};
    static const char *const kinds[] = {"llm.c LLaMA-3", "InfiniTrain Mixtral", "InfiniTrain Qwen3"};
    if (h[0] != magics[fam])
        return it_error(IT_ERR_FORMAT, "%s: header[0] magic: expected %d (%s checkpoint), found %d", path, magics[fam],
                        kinds[fam], h[0]);
    if (h[1] != versions[fam])
        return it_error(IT_ERR_FORMAT, "%s: header[1] version: expected %d (fp32), found %d", path, versions[fam],
                        h[1]);
    llama *g = calloc(1, sizeof *g);
    if (!g) return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    g->moe = moe;
    memcpy(g->header, h, sizeof h);
    rope_scaling_llmc(g);
    g->T = h[2];
    g->V = h[3];
    g->L = h[4];
    g->nh = h[5];
    g->nkv = h[6];
    g->C = h[7];
    g->hd = g->nh > 0 ? g->C / g->nh : 0;
    if (fam == FAMILY_QWEN3) {
        if ((st = qwen3_header(path, h, g))) {
            free(g);
            return st;
        }
    } else if (!moe) {
        float mult = f32(h[8]);
        int multiple_of = h[9];
        g->eps = f32(h[10]);
        g->theta = f32(h[11]);
        g->scaled_rope = h[12] != 0;
        if (!(isfinite(mult) && mult > 0 && mult < 64) || multiple_of < 1 || multiple_of > (1 << 20)) {
            free(g);
            return it_error(IT_ERR_FORMAT,
                            "%s: header fields ffn_dim_multiplier/multiple_of: expected a float in (0, 64) and 1..%d, "
                            "found %g and %d",
                            path, 1 << 20, mult, multiple_of);
        }
        /* F only from an n_embd in range (no overflow); check_config names a bad n_embd. */
        g->F = g->C >= 1 && g->C <= (1 << 16) ? (int)llama3_ffn_hidden(g->C, mult, multiple_of) : 1;
        if (h[12] != 0 && h[12] != 1) {
            free(g);
            return it_error(IT_ERR_FORMAT, "%s: header field use_scaled_rope: expected 0 or 1, found %d", path, h[12]);
        }
        if (h[12] && h[32]) { /* this project's extension (docs/formats.md): the scaling's own numbers */
            g->rope_factor = f32(h[32]), g->rope_low = f32(h[33]), g->rope_high = f32(h[34]);
            g->rope_old_ctx = (float)h[35];
        }
    } else {
        g->E = h[8];
        g->eps = f32(h[12]);
        g->theta = f32(h[13]);
        g->scaled_rope = h[14] != 0;
        g->topk = h[15];
        g->F = h[16];
    }
    st = check_config(path, g);
    if (st) {
        free(g);
        return st;
    }
    it__layout count = {0};
    llama_walk(g, &count);
    int64_t n = count.off, copy = g->tied ? (int64_t)g->V * g->C : 0; /* a tied Qwen3's lm_head: wte again */
    size_t want = 1024 + (size_t)(n + copy) * sizeof(float);
    if (file_bytes != want) {
        int F = moe || fam == FAMILY_QWEN3 ? g->F : 0;
        free(g);
        return it_error(IT_ERR_FORMAT,
                        "%s: file size: the header (L=%d, C=%d, V=%d, F=%d%s) implies %lld parameters = %zu bytes, "
                        "found %zu bytes",
                        path, h[4], h[7], h[3], F, moe ? ", experts" : "", (long long)(n + copy), want, file_bytes);
    }
    it_model *m = NULL;
    st = llama_make(g, dev, par, path, &m);
    if (st) return st;
    st = m->tp || m->pp ? it__model_read_sliced(m, path) : it__read_params(path, m->params, n);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}

/* ffn_dim_multiplier and multiple_of for the llm.c header that give F by InfiniTrain's
 * formula: a usual pair when one fits (LLaMA-3 8B: 1.3 and 1024), else multiple_of = F with a
 * multiplier that makes the rounded product 1. */
static void ffn_encode(int C, int F, float *mult, int *multiple_of) {
    static const float mults[] = {1.0f, 1.3f, 1.5f, 2.0f};
    static const int multiples[] = {1024, 256};
    for (size_t a = 0; a < sizeof mults / sizeof mults[0]; a++)
        for (size_t b = 0; b < sizeof multiples / sizeof multiples[0]; b++)
            if (llama3_ffn_hidden(C, mults[a], multiples[b]) == F) {
                *mult = mults[a], *multiple_of = multiples[b];
                return;
            }
    *multiple_of = F;
    *mult = 1.0f / (float)(2 * (4 * (int64_t)C) / 3);
}

static int32_t bits(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

it_status it__llama_build(const it__llama_config *c, it_device dev, const it_model_parallel *par, const char *what,
                          it_model **out) {
    llama *g = calloc(1, sizeof *g);
    if (!g) return it_error(IT_ERR_OOM, "%s: out of host memory", what);
    g->moe = c->moe;
    g->qwen3 = c->qwen3, g->tied = c->qwen3 && c->tied;
    g->T = c->block_size, g->V = c->vocab_size, g->L = c->n_layer, g->nh = c->n_head, g->nkv = c->n_kv_head;
    g->C = c->n_embd, g->hd = c->n_head > 0 ? c->n_embd / c->n_head : 0, g->F = c->ffn_hidden;
    if (c->qwen3 && c->head_dim) g->hd = c->head_dim;
    g->E = c->n_expert, g->topk = c->router_topk, g->eps = c->norm_eps, g->theta = c->rope_theta;
    g->scaled_rope = c->scaled_rope;
    g->rope_factor = c->rope_factor, g->rope_low = c->rope_low, g->rope_high = c->rope_high;
    g->rope_old_ctx = c->rope_old_ctx;
    /* the llm.c / InfiniTrain header it_model_save writes */
    int32_t *h = g->header;
    h[0] = c->moe ? MIXTRAL_MAGIC : LLAMA3_MAGIC, h[1] = c->moe ? MIXTRAL_VERSION : LLAMA3_VERSION;
    h[2] = g->T, h[3] = g->V, h[4] = g->L, h[5] = g->nh, h[6] = g->nkv, h[7] = g->C;
    if (c->qwen3) { /* InfiniTrain-Test's header (its converter's values in [9], [12]..[15]) */
        h[0] = QWEN3_MAGIC, h[1] = QWEN3_VERSION;
        h[8] = g->F, h[9] = 1, h[10] = bits(g->eps), h[11] = bits(g->theta), h[12] = 0, h[13] = 4, h[14] = 1;
        h[15] = 0, h[QWEN3_TIED_SLOT] = g->tied;
    } else if (!c->moe) {
        float mult = 1.0f;
        int multiple_of = 1;
        if (g->C >= 1 && g->C <= (1 << 16) && g->F >= 1) ffn_encode(g->C, g->F, &mult, &multiple_of);
        h[8] = bits(mult), h[9] = multiple_of, h[10] = bits(g->eps), h[11] = bits(g->theta);
        h[12] = g->scaled_rope;
        bool llmc = g->rope_factor == 8.0f && g->rope_low == 1.0f && g->rope_high == 4.0f && g->rope_old_ctx == 8192.0f;
        if (g->scaled_rope && !llmc)
            h[32] = bits(g->rope_factor), h[33] = bits(g->rope_low), h[34] = bits(g->rope_high),
            h[35] = (int32_t)g->rope_old_ctx;
    } else {
        h[8] = g->E, h[12] = bits(g->eps), h[13] = bits(g->theta), h[14] = g->scaled_rope, h[15] = g->topk;
        h[16] = g->F;
    }
    return llama_make(g, dev, par, what, out);
}

it_status it_llama3_load(const char *path, it_device dev, it_model **out) {
    return llama_load(path, dev, FAMILY_LLAMA3, NULL, out);
}
it_status it_llama3_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out) {
    return llama_load(path, dev, FAMILY_LLAMA3, par, out);
}
it_status it_mixtral_load(const char *path, it_device dev, it_model **out) {
    return llama_load(path, dev, FAMILY_MIXTRAL, NULL, out);
}
it_status it_mixtral_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out) {
    return llama_load(path, dev, FAMILY_MIXTRAL, par, out);
}
it_status it_qwen3_load(const char *path, it_device dev, it_model **out) {
    return llama_load(path, dev, FAMILY_QWEN3, NULL, out);
}
it_status it_qwen3_load_tp(const char *path, it_device dev, const it_model_parallel *par, it_model **out) {
    return llama_load(path, dev, FAMILY_QWEN3, par, out);
}

int64_t it_llama3_ffn_hidden(int n_embd, float ffn_dim_multiplier, int multiple_of) {
    return llama3_ffn_hidden(n_embd, ffn_dim_multiplier, multiple_of);
}

it_status it__llama_config_of(const it_model *m, it__llama_config *c) {
    const char *fam = m->info.family;
    if (strcmp(fam, "llama3") != 0 && strcmp(fam, "mixtral") != 0 && strcmp(fam, "qwen3") != 0)
        return it_error(IT_ERR_INVALID_ARG, "model family %s is not LLaMA-3, Mixtral or Qwen3", fam);
    const llama *g = m->impl;
    *c = (it__llama_config){.moe = g->moe,
                            .qwen3 = g->qwen3,
                            .tied = g->tied,
                            .head_dim = g->hd,
                            .block_size = g->T,
                            .vocab_size = g->V,
                            .n_layer = g->L,
                            .n_head = g->nh,
                            .n_kv_head = g->nkv,
                            .n_embd = g->C,
                            .ffn_hidden = g->F,
                            .n_expert = g->E,
                            .router_topk = g->topk,
                            .norm_eps = g->eps,
                            .rope_theta = g->theta,
                            .scaled_rope = g->scaled_rope,
                            .rope_factor = g->rope_factor,
                            .rope_low = g->rope_low,
                            .rope_high = g->rope_high,
                            .rope_old_ctx = g->rope_old_ctx};
    return IT_OK;
}
