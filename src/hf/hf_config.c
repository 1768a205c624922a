/* config.json of GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM and Qwen3ForCausalLM, read into this
 * project's model configurations and written back. A key whose value the models cannot
 * compute (another activation, biases in LLaMA's attention, a rope_scaling type other than
 * llama3, a sliding window) is refused with the key and the value; keys that change nothing
 * computed here (dropout probabilities, token ids, initializer_range) are ignored, as
 * docs/hf.md lists. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/afile.h"
#include "hf/hf_internal.h"

#define GPT2_VOCAB_PAD 128 /* llm.c pads GPT-2's 50257 to 50304 */

typedef struct reader {
    const char *path;
    json_t *root;
    it_status st;
} reader;

static json_t *get(reader *r, const char *key) {
    json_t *v = json_object_get(r->root, key);
    return json_is_null(v) ? NULL : v;
}

static int get_int(reader *r, const char *key, bool required, int dflt, int lo, int hi) {
    if (r->st) return dflt;
    json_t *v = get(r, key);
    if (!v) {
        if (required) r->st = it_error(IT_ERR_FORMAT, "%s: no \"%s\"", r->path, key);
        return dflt;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        r->st = it_error(IT_ERR_FORMAT, "%s: \"%s\": %s, expected an integer in [%d, %d]", r->path, key,
                         text ? text : "?", lo, hi);
        free(text);
        return dflt;
    }
    return (int)json_integer_value(v);
}

static double get_num(reader *r, const char *key, bool required, double dflt) {
    if (r->st) return dflt;
    json_t *v = get(r, key);
    if (!v) {
        if (required) r->st = it_error(IT_ERR_FORMAT, "%s: no \"%s\"", r->path, key);
        return dflt;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        r->st = it_error(IT_ERR_FORMAT, "%s: \"%s\" is not a finite number", r->path, key);
        return dflt;
    }
    return json_number_value(v);
}

static bool get_bool(reader *r, const char *key, bool dflt) {
    if (r->st) return dflt;
    json_t *v = get(r, key);
    if (!v) return dflt;
    if (!json_is_boolean(v)) {
        r->st = it_error(IT_ERR_FORMAT, "%s: \"%s\" is not true or false", r->path, key);
        return dflt;
    }
    return json_is_true(v);
}

static const char *get_str(reader *r, const char *key) {
    if (r->st) return NULL;
    json_t *v = get(r, key);
    if (v && !json_is_string(v)) r->st = it_error(IT_ERR_FORMAT, "%s: \"%s\" is not a string", r->path, key);
    return json_string_value(v);
}

/* key must be absent, null or `want` (what the model computes). */
static void need_bool(reader *r, const char *key, bool want, const char *why) {
    if (r->st) return;
    json_t *v = get(r, key);
    if (v && (!json_is_boolean(v) || json_is_true(v) != want))
        r->st = it_error(IT_ERR_UNSUPPORTED, "%s: \"%s\": %s; the model computes %s (%s)", r->path, key,
                         json_is_true(v)    ? "true"
                         : json_is_false(v) ? "false"
                                            : "not a boolean",
                         want ? "true" : "false", why);
}

static void need_str(reader *r, const char *key, const char *const *ok, const char *why) {
    const char *s = get_str(r, key);
    if (r->st || !s) return;
    for (int i = 0; ok[i]; i++)
        if (strcmp(s, ok[i]) == 0) return;
    r->st = it_error(IT_ERR_UNSUPPORTED, "%s: \"%s\": \"%s\" is not one the model computes (%s)", r->path, key, s, why);
}

static void read_gpt2(reader *r, hf_config *c) {
    it_gpt2_config *g = &c->gpt2;
    g->vocab_size = get_int(r, "vocab_size", true, 0, 1, 1 << 24);
    g->block_size = get_int(r, "n_positions", false, 0, 1, 1 << 20);
    if (!g->block_size) g->block_size = get_int(r, "n_ctx", true, 0, 1, 1 << 20);
    g->n_layer = get_int(r, "n_layer", true, 0, 1, 1024);
    g->n_head = get_int(r, "n_head", true, 0, 1, 1024);
    g->n_embd = get_int(r, "n_embd", true, 0, 1, 1 << 16);
    g->padded_vocab_size = (g->vocab_size + GPT2_VOCAB_PAD - 1) / GPT2_VOCAB_PAD * GPT2_VOCAB_PAD;
    static const char *const acts[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    need_str(r, "activation_function", acts, "GELU, tanh form");
    double eps = get_num(r, "layer_norm_epsilon", false, 1e-5);
    if (!r->st && eps != 1e-5)
        r->st = it_error(IT_ERR_UNSUPPORTED, "%s: \"layer_norm_epsilon\": %g; GPT-2 here uses 1e-5", r->path, eps);
    int inner = get_int(r, "n_inner", false, 4 * g->n_embd, 1, INT_MAX);
    if (!r->st && inner != 4 * g->n_embd)
        r->st = it_error(IT_ERR_UNSUPPORTED, "%s: \"n_inner\": %d; GPT-2 here has an MLP of 4 x n_embd = %d", r->path,
                         inner, 4 * g->n_embd);
    need_bool(r, "tie_word_embeddings", true, "GPT-2's lm_head is its wte");
    need_bool(r, "scale_attn_weights", true, "scores scaled by 1/sqrt(head size)");
    need_bool(r, "scale_attn_by_inverse_layer_idx", false, "no per-layer scaling");
    need_bool(r, "add_cross_attention", false, "a decoder only");
    c->tied = true;
}

static void read_llama(reader *r, hf_config *c, bool moe, bool qwen3) {
    it__llama_config *l = &c->llama;
    l->moe = moe;
    l->qwen3 = qwen3;
    l->vocab_size = get_int(r, "vocab_size", true, 0, 1, 1 << 24);
    l->block_size = get_int(r, "max_position_embeddings", true, 0, 1, 1 << 20);
    l->n_layer = get_int(r, "num_hidden_layers", true, 0, 1, 1024);
    l->n_head = get_int(r, "num_attention_heads", true, 0, 1, 1024);
    l->n_kv_head = get_int(r, "num_key_value_heads", false, l->n_head, 1, 1024);
    l->n_embd = get_int(r, "hidden_size", true, 0, 1, 1 << 16);
    l->ffn_hidden = get_int(r, "intermediate_size", true, 0, 1, 1 << 20);
    l->norm_eps = (float)get_num(r, "rms_norm_eps", false, 1e-6);
    l->rope_theta = (float)get_num(r, "rope_theta", false, 10000.0);
    if (qwen3) { /* its own head size (Qwen3-0.6B: 16 heads of 128 on 1024) */
        l->head_dim =
            get_int(r, "head_dim", l->n_head && l->n_embd % l->n_head, l->n_head ? l->n_embd / l->n_head : 0, 2, 4096);
        need_bool(r, "use_sliding_window", false, "attention sees every earlier position");
    } else if (!r->st && l->n_head && l->n_embd % l->n_head == 0) {
        int hd = get_int(r, "head_dim", false, l->n_embd / l->n_head, 1, 1 << 16);
        if (!r->st && hd != l->n_embd / l->n_head)
            r->st =
                it_error(IT_ERR_UNSUPPORTED, "%s: \"head_dim\": %d; the model's head size is hidden_size / heads = %d",
                         r->path, hd, l->n_embd / l->n_head);
    }
    static const char *const acts[] = {"silu", NULL};
    need_str(r, "hidden_act", acts, "SwiGLU with SiLU");
    need_bool(r, "attention_bias", false, "no biases");
    need_bool(r, "mlp_bias", false, "no biases");
    c->tied = get_bool(r, "tie_word_embeddings", false);
    l->tied = qwen3 && c->tied; /* LLaMA's tied head is read from the embedding and trained apart */
    l->rope_factor = 8.0f, l->rope_low = 1.0f, l->rope_high = 4.0f, l->rope_old_ctx = 8192.0f;
    json_t *rs = r->st ? NULL : get(r, "rope_scaling");
    if (rs) {
        json_t *type = json_object_get(rs, "rope_type");
        if (!type) type = json_object_get(rs, "type");
        if (!json_is_object(rs) || !json_is_string(type) || strcmp(json_string_value(type), "llama3") != 0 || moe ||
            qwen3) {
            char *text = json_dumps(rs, JSON_ENCODE_ANY | JSON_COMPACT);
            r->st = it_error(IT_ERR_UNSUPPORTED,
                             "%s: \"rope_scaling\": %s; only LLaMA's {\"rope_type\": \"llama3\", ...} "
                             "is computed%s",
                             r->path, text ? text : "?",
                             moe     ? " (and not for Mixtral)"
                             : qwen3 ? " (and not for Qwen3)"
                                     : "");
            free(text);
            return;
        }
        reader sub = {r->path, rs, IT_OK};
        l->scaled_rope = true;
        l->rope_factor = (float)get_num(&sub, "factor", true, 8.0);
        l->rope_low = (float)get_num(&sub, "low_freq_factor", true, 1.0);
        l->rope_high = (float)get_num(&sub, "high_freq_factor", true, 4.0);
        l->rope_old_ctx = (float)get_int(&sub, "original_max_position_embeddings", true, 8192, 1, 1 << 24);
        if (sub.st) r->st = it_error_context("rope_scaling: ");
    }
    if (moe) {
        l->n_expert = get_int(r, "num_local_experts", true, 0, 1, 256);
        l->router_topk = get_int(r, "num_experts_per_tok", true, 0, 1, 256);
        json_t *sw = get(r, "sliding_window");
        if (!r->st && sw && (!json_is_integer(sw) || json_integer_value(sw) < l->block_size))
            r->st = it_error(IT_ERR_UNSUPPORTED,
                             "%s: \"sliding_window\": %lld; attention here sees every earlier position (a window of at "
                             "least max_position_embeddings %d, or null)",
                             r->path, (long long)json_integer_value(sw), l->block_size);
    }
}

it_status hf_config_read(const char *dir, hf_config *c) {
    memset(c, 0, sizeof *c);
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= 11 && strcmp(dir + n - 11, "config.json") == 0)
        snprintf(path, sizeof path, "%s", dir);
    else
        snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    reader r = {path, json_load_file(path, JSON_REJECT_DUPLICATES, &jerr), IT_OK};
    if (!r.root) {
        FILE *f = fopen(path, "rb");
        if (!f) return it_error(IT_ERR_NOT_FOUND, "%s: cannot open (a Hugging Face model directory has one)", path);
        fclose(f);
        it__one_line(jerr.text);
        return it_error(IT_ERR_FORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
    }
    if (!json_is_object(r.root)) {
        json_decref(r.root);
        return it_error(IT_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const char *type = get_str(&r, "model_type");
    json_t *archs = get(&r, "architectures");
    const char *arch = json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    static const struct {
        const char *type, *arch;
        hf_arch a;
    } known[] = {{"gpt2", "GPT2LMHeadModel", HF_GPT2},
                 {"llama", "LlamaForCausalLM", HF_LLAMA},
                 {"mixtral", "MixtralForCausalLM", HF_MIXTRAL},
                 {"qwen3", "Qwen3ForCausalLM", HF_QWEN3}};
    int k = -1;
    for (int i = 0; i < 4 && !r.st; i++)
        if ((type && strcmp(type, known[i].type) == 0) || (!type && arch && strcmp(arch, known[i].arch) == 0)) k = i;
    if (!r.st && k < 0)
        r.st =
            it_error(IT_ERR_UNSUPPORTED,
                     "%s: \"model_type\": \"%s\" (architectures %s); this project reads gpt2 (GPT2LMHeadModel), llama "
                     "(LlamaForCausalLM), mixtral (MixtralForCausalLM) and qwen3 (Qwen3ForCausalLM)",
                     path, type ? type : "(none)", arch ? arch : "(none)");
    if (!r.st && arch && strcmp(arch, known[k].arch) != 0 && strcmp(arch, "GPT2Model") != 0)
        r.st = it_error(IT_ERR_UNSUPPORTED, "%s: \"architectures\": [\"%s\"]; a %s model is read as %s", path, arch,
                        known[k].type, known[k].arch);
    if (!r.st) {
        c->arch = known[k].a;
        if (c->arch == HF_GPT2)
            read_gpt2(&r, c);
        else
            read_llama(&r, c, c->arch == HF_MIXTRAL, c->arch == HF_QWEN3);
    }
    const char *dt = get_str(&r, "torch_dtype");
    if (dt) snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt);
    json_decref(r.root);
    return r.st;
}

it_status hf_config_of_model(const it_model *m, hf_config *c) {
    memset(c, 0, sizeof *c);
    const it_model_info *info = it_model_get_info(m);
    if (strcmp(info->family, "gpt2") == 0) {
        c->arch = HF_GPT2;
        c->tied = true;
        c->gpt2 = (it_gpt2_config){(int)info->block_size, (int)info->vocab_size, (int)info->padded_vocab,
                                   info->n_layer,         info->n_head,          info->n_embd};
        return IT_OK;
    }
    it_status st = it__llama_config_of(m, &c->llama);
    if (st) return st;
    c->arch = c->llama.moe ? HF_MIXTRAL : c->llama.qwen3 ? HF_QWEN3 : HF_LLAMA;
    c->tied = c->llama.tied;
    return IT_OK;
}

/* A float as the shortest decimal that reads back as the same float (as Python prints it). */
static json_t *real_of(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return json_real(strtod(buf, NULL));
}

it_status hf_config_write(const it_model *m, const char *dir, it_dtype dtype) {
    hf_config c;
    it_status st = hf_config_of_model(m, &c);
    if (st) return st;
    json_t *o = json_object();
    const char *dt = dtype == IT_DTYPE_BF16 ? "bfloat16" : dtype == IT_DTYPE_FP16 ? "float16" : "float32";
    if (c.arch == HF_GPT2) {
        const it_gpt2_config *g = &c.gpt2;
        json_object_set_new(o, "activation_function", json_string("gelu_new"));
        json_object_set_new(o, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
        json_object_set_new(o, "layer_norm_epsilon", json_real(1e-5));
        json_object_set_new(o, "model_type", json_string("gpt2"));
        json_object_set_new(o, "n_ctx", json_integer(g->block_size));
        json_object_set_new(o, "n_embd", json_integer(g->n_embd));
        json_object_set_new(o, "n_head", json_integer(g->n_head));
        json_object_set_new(o, "n_inner", json_null());
        json_object_set_new(o, "n_layer", json_integer(g->n_layer));
        json_object_set_new(o, "n_positions", json_integer(g->block_size));
        json_object_set_new(o, "tie_word_embeddings", json_true());
        json_object_set_new(o, "vocab_size", json_integer(g->vocab_size));
    } else {
        const it__llama_config *l = &c.llama;
        bool moe = c.arch == HF_MIXTRAL, qwen3 = c.arch == HF_QWEN3;
        json_object_set_new(o, "architectures",
                            json_pack("[s]", moe     ? "MixtralForCausalLM"
                                             : qwen3 ? "Qwen3ForCausalLM"
                                                     : "LlamaForCausalLM"));
        json_object_set_new(o, "attention_bias", json_false());
        json_object_set_new(o, "head_dim", json_integer(l->head_dim ? l->head_dim : l->n_embd / l->n_head));
        json_object_set_new(o, "hidden_act", json_string("silu"));
        json_object_set_new(o, "hidden_size", json_integer(l->n_embd));
        json_object_set_new(o, "intermediate_size", json_integer(l->ffn_hidden));
        json_object_set_new(o, "max_position_embeddings", json_integer(l->block_size));
        if (!moe && !qwen3) json_object_set_new(o, "mlp_bias", json_false());
        json_object_set_new(o, "model_type", json_string(moe ? "mixtral" : qwen3 ? "qwen3" : "llama"));
        if (qwen3) json_object_set_new(o, "max_window_layers", json_integer(l->n_layer));
        json_object_set_new(o, "num_attention_heads", json_integer(l->n_head));
        if (moe) json_object_set_new(o, "num_experts_per_tok", json_integer(l->router_topk));
        json_object_set_new(o, "num_hidden_layers", json_integer(l->n_layer));
        json_object_set_new(o, "num_key_value_heads", json_integer(l->n_kv_head));
        if (moe) json_object_set_new(o, "num_local_experts", json_integer(l->n_expert));
        json_object_set_new(o, "rms_norm_eps", real_of(l->norm_eps));
        if (l->scaled_rope)
            json_object_set_new(o, "rope_scaling",
                                json_pack("{s:o,s:o,s:o,s:i,s:s}", "factor", real_of(l->rope_factor),
                                          "high_freq_factor", real_of(l->rope_high), "low_freq_factor",
                                          real_of(l->rope_low), "original_max_position_embeddings",
                                          (int)l->rope_old_ctx, "rope_type", "llama3"));
        else
            json_object_set_new(o, "rope_scaling", json_null());
        json_object_set_new(o, "rope_theta", real_of(l->rope_theta));
        if (moe || qwen3) json_object_set_new(o, "sliding_window", json_null());
        /* LLaMA and Mixtral train lm_head apart from the embedding: written untied */
        json_object_set_new(o, "tie_word_embeddings", json_boolean(qwen3 && l->tied));
        if (qwen3) json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "vocab_size", json_integer(l->vocab_size));
    }
    json_object_set_new(o, "torch_dtype", json_string(dt));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) return it_error(IT_ERR_OOM, "config.json: out of host memory");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    it_afile *f = NULL;
    st = it_afile_open(path, &f);
    if (!st) st = it_afile_write(f, text, strlen(text));
    if (!st) st = it_afile_write(f, "\n", 1);
    if (f) st = st ? (it_afile_abort(f), st) : it_afile_commit(f);
    free(text);
    return st;
}
