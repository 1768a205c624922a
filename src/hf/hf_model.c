/* Hugging Face weights in and out: each of this project's parameters (its one-rank layout,
 * named as InfiniTrain names them) maps to rows of one or more HF tensors:
 *
 *   GPT-2    the same names (with or without GPT2LMHeadModel's "transformer." prefix); Conv1D
 *            weights stored [in, out] are transposed; wte's padded rows (50257 -> 50304) are
 *            zeros in and dropped out; lm_head is wte (tied); attn.bias buffers are skipped.
 *   LLaMA    c_attn = q_proj | k_proj | v_proj rows, q and k un-permuted from HF's half-split
 *            rotary order to the interleaved pairs our RoPE rotates (row h*hd + 2i + j here is
 *            row h*hd + j*hd/2 + i there, k with the kv heads); c_fc = up_proj, c_fc2 =
 *            gate_proj, mlp.c_proj = down_proj; lm_head from embed_tokens when tied.
 *   Mixtral  attention as LLaMA; router = block_sparse_moe.gate, experts' c_fc2 / c_fc /
 *            c_proj = w1 / w3 / w2.
 *   Qwen3    as LLaMA, but q and k keep HF's rows (its RoPE turns the half-split pairs, as
 *            HF's does); attn.q_norm / k_norm = self_attn.q_norm / k_norm; a tied model has no
 *            lm_head (a pipeline's last-stage copy reads embed_tokens).
 *
 * A load reads, for each of this rank's parameters, only its slices, converting from the
 * mapped file (F32, BF16, F16) element by element; a save gathers the whole model to the group's
 * first rank and writes each HF tensor from it. docs/hf.md. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf/hf_internal.h"

static void add(tmap *t, int64_t rows, map_kind kind, int heads, const char *fmt, int a, int b) {
    seg *s = &t->s[t->ns];
    s->row0 = t->ns ? t->s[t->ns - 1].row0 + t->s[t->ns - 1].rows : 0;
    s->rows = rows, s->kind = kind, s->heads = heads;
    snprintf(s->hf, sizeof s->hf, fmt, a, b);
    t->ns++;
}

/* The map of our tensor `name` of whole shape (rows, cols); IT_ERR_INTERNAL for a name the
 * model family does not have (a bug: the models name their parameters). */
it_status hf_map_of(const hf_config *c, const char *name, int64_t rows, int64_t cols, tmap *t) {
    memset(t, 0, sizeof *t);
    t->rows = rows, t->cols = cols;
    int l, e;
    char rest[160];
    if (c->arch == HF_GPT2) {
        if (strcmp(name, "transformer.wte.weight") == 0 || strcmp(name, "lm_head.weight") == 0) {
            add(t, c->gpt2.vocab_size, MAP_COPY, 0, "transformer.wte.weight", 0, 0);
            if (rows > c->gpt2.vocab_size) add(t, rows - c->gpt2.vocab_size, MAP_ZERO, 0, "", 0, 0);
            return IT_OK;
        }
        bool linear = cols > 1 && (strstr(name, ".c_attn.weight") || strstr(name, ".c_proj.weight") ||
                                   strstr(name, ".c_fc.weight"));
        add(t, rows, linear ? MAP_TRANSPOSE : MAP_COPY, 0, "", 0, 0);
        snprintf(t->s[0].hf, sizeof t->s[0].hf, "%s", name);
        return IT_OK;
    }
    const it__llama_config *m = &c->llama;
    int64_t hd = m->head_dim ? m->head_dim : m->n_embd / m->n_head, kvd = (int64_t)m->n_kv_head * hd;
    map_kind rope = c->arch == HF_QWEN3 ? MAP_COPY : MAP_UNPERMUTE; /* Qwen3's RoPE is HF's */
    if (strcmp(name, "transformer.wte.weight") == 0) {
        add(t, rows, MAP_COPY, 0, "model.embed_tokens.weight", 0, 0);
    } else if (strcmp(name, "lm_head.weight") == 0) {
        add(t, rows, MAP_COPY, 0, c->tied ? "model.embed_tokens.weight" : "lm_head.weight", 0, 0);
    } else if (strcmp(name, "transformer.ln_f.weight") == 0) {
        add(t, rows, MAP_COPY, 0, "model.norm.weight", 0, 0);
    } else if (sscanf(name, "transformer.h.%d.mlp.experts.expert_%d.%159s", &l, &e, rest) == 3) {
        const char *w = strcmp(rest, "c_fc2.weight") == 0    ? "w1"
                        : strcmp(rest, "c_fc.weight") == 0   ? "w3"
                        : strcmp(rest, "c_proj.weight") == 0 ? "w2"
                                                             : NULL;
        if (!w) goto unknown;
        char fmt[128];
        snprintf(fmt, sizeof fmt, "model.layers.%%d.block_sparse_moe.experts.%%d.%s.weight", w);
        add(t, rows, MAP_COPY, 0, fmt, l, e);
    } else if (sscanf(name, "transformer.h.%d.%159s", &l, rest) == 2) {
        static const struct {
            const char *ours, *hf;
        } same[] = {{"ln_1.weight", "input_layernorm.weight"},
                    {"ln_2.weight", "post_attention_layernorm.weight"},
                    {"attn.c_proj.weight", "self_attn.o_proj.weight"},
                    {"mlp.c_fc.weight", "mlp.up_proj.weight"},
                    {"mlp.c_fc2.weight", "mlp.gate_proj.weight"},
                    {"mlp.c_proj.weight", "mlp.down_proj.weight"},
                    {"mlp.router.weight", "block_sparse_moe.gate.weight"},
                    {"attn.q_norm.weight", "self_attn.q_norm.weight"},
                    {"attn.k_norm.weight", "self_attn.k_norm.weight"}};
        if (strcmp(rest, "attn.c_attn.weight") == 0) {
            add(t, (int64_t)m->n_head * hd, rope, m->n_head, "model.layers.%d.self_attn.q_proj.weight", l, 0);
            add(t, kvd, rope, m->n_kv_head, "model.layers.%d.self_attn.k_proj.weight", l, 0);
            add(t, kvd, MAP_COPY, 0, "model.layers.%d.self_attn.v_proj.weight", l, 0);
            return IT_OK;
        }
        for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
            if (strcmp(rest, same[i].ours) == 0) {
                char fmt[128];
                snprintf(fmt, sizeof fmt, "model.layers.%%d.%s", same[i].hf);
                add(t, rows, MAP_COPY, 0, fmt, l, 0);
                return IT_OK;
            }
        goto unknown;
    } else {
        goto unknown;
    }
    return IT_OK;
unknown:
    return it_error(IT_ERR_INTERNAL, "hf: no Hugging Face name for parameter '%s'", name);
}

/* Row r of a rotary-permuted tensor (heads of hd rows): ours r = h*hd + 2i + j is HF's
 * h*hd + j*hd/2 + i. */
int64_t hf_row(const seg *s, int64_t r) {
    if (s->kind != MAP_UNPERMUTE) return r;
    int64_t hd = s->rows / s->heads, h = r / hd, w = r % hd;
    return h * hd + (w % 2) * (hd / 2) + w / 2;
}

/* ---------------------------------------------------------------- load */

typedef struct loader {
    const hf_config *c;
    it_safetensors *st;
    const char *dir;
    /* the map of the entry last asked about (entries are read in order) */
    const it_model_param_info *p;
    tmap tm;
    const it_safetensors_tensor *t[3];
} loader;

static const it_safetensors_tensor *find_hf(const loader *ld, const char *name) {
    const it_safetensors_tensor *t = it_safetensors_find(ld->st, name);
    if (!t && ld->c->arch == HF_GPT2 && strncmp(name, "transformer.", 12) == 0) /* GPT2Model's names */
        t = it_safetensors_find(ld->st, name + 12);
    return t;
}

/* The entry's map, its HF tensors found and their shapes and dtypes checked. */
static it_status prepare(loader *ld, const it_model_param_info *p) {
    if (ld->p == p) return IT_OK;
    /* the last entry is read: its tensors' pages leave the process (entries are read in order,
     * each HF tensor by one of them but GPT-2's wte, which a pipeline's last stage reads again) */
    for (int i = 0; ld->p && i < ld->tm.ns; i++) it_safetensors_drop(ld->t[i]);
    ld->p = NULL;
    int64_t rows = p->full_shape[0], cols = p->ndim == 2 ? p->full_shape[1] : 1;
    it_status st = hf_map_of(ld->c, p->name, rows, cols, &ld->tm);
    if (st) return st;
    for (int i = 0; i < ld->tm.ns; i++) {
        const seg *s = &ld->tm.s[i];
        ld->t[i] = NULL;
        if (s->kind == MAP_ZERO) continue;
        const it_safetensors_tensor *t = find_hf(ld, s->hf);
        if (!t) return it_error(IT_ERR_FORMAT, "%s: no tensor '%s' (for %s)", ld->dir, s->hf, p->name);
        int64_t want0 = s->kind == MAP_TRANSPOSE ? cols : s->rows, want1 = s->kind == MAP_TRANSPOSE ? s->rows : cols;
        bool ok = p->ndim == 1 ? t->ndim == 1 && t->shape[0] == s->rows
                               : t->ndim == 2 && t->shape[0] == want0 && t->shape[1] == want1;
        if (!ok) {
            char got[96] = "";
            for (int d = 0; d < t->ndim && d < 4; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            if (p->ndim == 1)
                return it_error(IT_ERR_FORMAT, "%s: tensor '%s' has shape [%s], the config makes it [%lld]", t->file,
                                s->hf, got, (long long)s->rows);
            return it_error(IT_ERR_FORMAT, "%s: tensor '%s' has shape [%s], the config makes it [%lld, %lld]", t->file,
                            s->hf, got, (long long)want0, (long long)want1);
        }
        if (t->dtype != IT_DTYPE_FP32 && t->dtype != IT_DTYPE_BF16 && t->dtype != IT_DTYPE_FP16 &&
            t->dtype != IT_DTYPE_FP64)
            return it_error(IT_ERR_FORMAT, "%s: tensor '%s' has dtype %s; a weight must be F32, BF16, F16 or F64",
                            t->file, s->hf, t->dtype_name);
        ld->t[i] = t;
    }
    ld->p = p;
    return IT_OK;
}

static it_status read_entry(void *ctx, const it_model_param_info *p, int64_t at, int64_t n, float *dst) {
    loader *ld = ctx;
    it_status st = prepare(ld, p);
    const tmap *tm = &ld->tm;
    while (!st && n > 0) {
        int64_t row = at / tm->cols, col = at % tm->cols, len = tm->cols - col < n ? tm->cols - col : n;
        int k = 0;
        while (k + 1 < tm->ns && row >= tm->s[k].row0 + tm->s[k].rows) k++;
        const seg *s = &tm->s[k];
        int64_t r = hf_row(s, row - s->row0);
        switch (s->kind) {
        case MAP_ZERO: memset(dst, 0, sizeof(float) * (size_t)len); break;
        case MAP_TRANSPOSE: /* HF [cols, rows]: element (col + j, r) */
            for (int64_t j = 0; j < len && !st; j++)
                st = it_safetensors_read_f32(ld->t[k], (col + j) * s->rows + r, 1, dst + j);
            break;
        default: st = it_safetensors_read_f32(ld->t[k], r * tm->cols + col, len, dst); break;
        }
        at += len, dst += len, n -= len;
    }
    return st;
}

/* Every HF tensor must be used by some parameter of the whole model: one that is not (a bias
 * LLaMA has none of, an extra layer) is refused, since its values would be silently lost. */
typedef struct usage {
    const hf_config *c;
    loader *ld;
    bool *used;
    it_status st;
} usage;

static void mark_used(void *ctx, const it__param_spec *spec, int64_t full_off, const char *name) {
    usage *u = ctx;
    (void)full_off;
    if (u->st) return;
    tmap tm;
    u->st = hf_map_of(u->c, name, spec->shape[0], spec->ndim == 2 ? spec->shape[1] : 1, &tm);
    for (int i = 0; i < tm.ns && !u->st; i++) {
        if (tm.s[i].kind == MAP_ZERO) continue;
        const it_safetensors_tensor *t = find_hf(u->ld, tm.s[i].hf);
        if (t) u->used[t - it_safetensors_at(u->ld->st, 0)] = true;
    }
}

static bool ignorable(const hf_config *c, const char *name) {
    size_t n = strlen(name);
    if (c->arch == HF_GPT2) /* the causal-mask buffers of older files; the tied head */
        return (n > 9 && strcmp(name + n - 9, ".attn.bias") == 0) ||
               (n > 16 && strcmp(name + n - 16, ".attn.masked_bias") == 0) || strcmp(name, "lm_head.weight") == 0;
    if (c->arch == HF_QWEN3 && c->llama.tied && strcmp(name, "lm_head.weight") == 0)
        return true;                                    /* a tied model's file may hold the head it ties */
    return strstr(name, "rotary_emb.inv_freq") != NULL; /* a buffer some older LLaMA files hold */
}

static it_status check_all_used(it_model *m, loader *ld) {
    int n = it_safetensors_count(ld->st);
    usage u = {ld->c, ld, calloc((size_t)n + 1, sizeof(bool)), IT_OK};
    if (!u.used) return it_error(IT_ERR_OOM, "hf: out of host memory");
    it__layout lo = {.visit = mark_used, .visit_ctx = &u};
    m->vt->walk_all(m, &lo);
    for (int i = 0; i < n && !u.st; i++) {
        const it_safetensors_tensor *t = it_safetensors_at(ld->st, i);
        if (!u.used[i] && !ignorable(ld->c, t->name))
            u.st = it_error(IT_ERR_FORMAT,
                            "%s: tensor '%s' is not a parameter of the model config.json describes "
                            "(nothing here would read it)",
                            t->file, t->name);
    }
    free(u.used);
    return u.st;
}

it_status it_hf_load(const char *dir, it_device dev, const it_model_parallel *par, it_model **out) {
    *out = NULL;
    hf_config c;
    it_status st = hf_config_read(dir, &c);
    if (st) return st;
    it_safetensors *sf = NULL;
    st = it_safetensors_open(dir, &sf);
    if (st) return st;
    it_model *m = NULL;
    if (c.arch == HF_GPT2)
        st = it__gpt2_build(&c.gpt2, dev, par, &m);
    else
        st = it__llama_build(&c.llama, dev, par, dir, &m);
    if (st) {
        it_safetensors_close(sf);
        return it_error_context("%s/config.json: ", dir);
    }
    loader ld = {.c = &c, .st = sf, .dir = dir};
    st = check_all_used(m, &ld);
    if (!st) st = it__model_read_entries(m, read_entry, &ld);
    it_safetensors_close(sf);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}

it_status it_hf_family(const char *dir, const char **family) {
    hf_config c;
    it_status st = hf_config_read(dir, &c);
    if (st) return st;
    *family = c.arch == HF_GPT2 ? "gpt2" : c.arch == HF_LLAMA ? "llama3" : c.arch == HF_QWEN3 ? "qwen3" : "mixtral";
    return IT_OK;
}

/* ---------------------------------------------------------------- save */

/* One of our whole tensors: its map and place in the gathered flat parameters. */
typedef struct ours {
    tmap tm;
    int64_t full_off;
} ours;

typedef struct saver {
    const hf_config *c;
    const float *full;
    ours *o;
    int n_o, cap_o;
    it_safetensors_spec *spec;
    int n_spec, cap_spec;
    it_status st;
    float *tmp;
    size_t tmp_n;
} saver;

static int spec_index(saver *sv, const char *name) {
    for (int i = 0; i < sv->n_spec; i++)
        if (strcmp(sv->spec[i].name, name) == 0) return i;
    return -1;
}

static void collect(void *ctx, const it__param_spec *spec, int64_t full_off, const char *name) {
    saver *sv = ctx;
    if (sv->st) return;
    if (sv->n_o == sv->cap_o) {
        sv->cap_o = sv->cap_o ? 2 * sv->cap_o : 64;
        ours *o = realloc(sv->o, sizeof *o * (size_t)sv->cap_o);
        if (!o) {
            sv->st = it_error(IT_ERR_OOM, "hf: out of host memory");
            return;
        }
        sv->o = o;
    }
    ours *o = &sv->o[sv->n_o];
    int64_t rows = spec->shape[0], cols = spec->ndim == 2 ? spec->shape[1] : 1;
    sv->st = hf_map_of(sv->c, name, rows, cols, &o->tm);
    if (sv->st) return;
    o->full_off = full_off;
    sv->n_o++;
    for (int i = 0; i < o->tm.ns; i++) {
        const seg *s = &o->tm.s[i];
        if (s->kind == MAP_ZERO || spec_index(sv, s->hf) >= 0) continue;
        if (sv->n_spec == sv->cap_spec) {
            sv->cap_spec = sv->cap_spec ? 2 * sv->cap_spec : 64;
            it_safetensors_spec *sp = realloc(sv->spec, sizeof *sp * (size_t)sv->cap_spec);
            if (!sp) {
                sv->st = it_error(IT_ERR_OOM, "hf: out of host memory");
                return;
            }
            sv->spec = sp;
        }
        it_safetensors_spec *sp = &sv->spec[sv->n_spec++];
        memset(sp, 0, sizeof *sp);
        char *nm = strdup(s->hf);
        if (!nm) {
            sv->st = it_error(IT_ERR_OOM, "hf: out of host memory");
            sv->n_spec--;
            return;
        }
        sp->name = nm;
        sp->ndim = cols > 1 || spec->ndim == 2 ? 2 : 1;
        sp->shape[0] = s->kind == MAP_TRANSPOSE ? cols : s->rows;
        sp->shape[1] = s->kind == MAP_TRANSPOSE ? s->rows : cols;
    }
}

/* HF tensor i: every segment that maps to it, scattered from the gathered parameters. */
static it_status fill(void *ctx, int i, void *dst, size_t nbytes) {
    saver *sv = ctx;
    const it_safetensors_spec *sp = &sv->spec[i];
    size_t n = nbytes / it_dtype_size(sp->dtype);
    if (n > sv->tmp_n) {
        float *t = realloc(sv->tmp, sizeof(float) * n);
        if (!t) return it_error(IT_ERR_OOM, "hf: %zu floats of host memory for '%s'", n, sp->name);
        sv->tmp = t, sv->tmp_n = n;
    }
    float *v = sp->dtype == IT_DTYPE_FP32 ? dst : sv->tmp;
    for (int k = 0; k < sv->n_o; k++) {
        const ours *o = &sv->o[k];
        for (int q = 0; q < o->tm.ns; q++) {
            const seg *s = &o->tm.s[q];
            if (s->kind == MAP_ZERO || strcmp(s->hf, sp->name) != 0) continue;
            /* lm_head of a tied GPT-2 maps to wte too: the wte entry wrote it already */
            const float *src = sv->full + o->full_off + s->row0 * o->tm.cols;
            int64_t cols = o->tm.cols;
            for (int64_t r = 0; r < s->rows; r++) {
                int64_t hr = hf_row(s, r);
                if (s->kind == MAP_TRANSPOSE)
                    for (int64_t c = 0; c < cols; c++) v[c * s->rows + r] = src[r * cols + c];
                else
                    memcpy(v + hr * cols, src + r * cols, sizeof(float) * (size_t)cols);
            }
        }
    }
    if (sp->dtype == IT_DTYPE_BF16)
        for (size_t j = 0; j < n; j++) {
            uint16_t b = it_fp32_to_bf16(v[j]);
            memcpy((char *)dst + 2 * j, &b, 2);
        }
    else if (sp->dtype == IT_DTYPE_FP16)
        for (size_t j = 0; j < n; j++) {
            uint16_t h = it_fp32_to_fp16(v[j]);
            memcpy((char *)dst + 2 * j, &h, 2);
        }
    return IT_OK;
}

it_status it_hf_save(it_model *m, const char *dir, const it_hf_save_options *opt) {
    it_dtype dtype = opt ? opt->dtype : IT_DTYPE_FP32;
    if (dtype != IT_DTYPE_FP32 && dtype != IT_DTYPE_BF16 && dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_INVALID_ARG, "--output_hf dtype %s: float32, bfloat16 or float16", it_dtype_name(dtype));
    hf_config c;
    it_status st = hf_config_of_model(m, &c);
    if (st) return st;
    if (it_model_has_lora(m))
        return it_error(IT_ERR_UNSUPPORTED,
                        "--output_hf: the model has LoRA adapters; write them with --lora_save_path "
                        "(PEFT's form), or merge them first");
    float *full = NULL;
    int64_t n = 0;
    st = it__model_gather_full(m, &full, &n); /* collective over the TP and PP groups */
    if (st || m->tp_rank != 0 || m->pp_rank != 0) {
        free(full);
        return st;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        free(full);
        return it_error(IT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    }
    saver sv = {.c = &c, .full = full};
    it__layout lo = {.visit = collect, .visit_ctx = &sv};
    m->vt->walk_all(m, &lo);
    st = sv.st;
    for (int i = 0; i < sv.n_spec; i++) sv.spec[i].dtype = dtype;
    if (!st) st = it_safetensors_write_dir(dir, sv.spec, sv.n_spec, opt ? opt->max_shard_bytes : 0, fill, &sv, NULL);
    if (!st) st = hf_config_write(m, dir, dtype);
    for (int i = 0; i < sv.n_spec; i++) free((char *)sv.spec[i].name);
    free(sv.spec);
    free(sv.o);
    free(sv.tmp);
    free(full);
    return st;
}
