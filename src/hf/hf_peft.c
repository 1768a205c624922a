/* LoRA adapters in PEFT's form: adapter_config.json + adapter_model.safetensors, tensors named
 * base_model.model.<HF module>.lora_A.weight (r, in) and .lora_B.weight (out, r), the HF
 * module being the one whose weight the adapted parameter maps to (hf_model.c):
 *
 *   GPT-2    the same module names; A and B as nn.Linear's even for Conv1D (PEFT keeps them so
 *            and sets fan_in_fan_out, which only transposes the merged delta).
 *   LLaMA    our fused c_attn's one adapter is three in PEFT: q_proj, k_proj and v_proj with
 *            the same A and B's rows split, q's and k's un-permuted as the weights' are; so an
 *            adapter made elsewhere loads only if its three A are one (else it is refused:
 *            the fused layer has one A). o_proj, up_proj, gate_proj, down_proj one to one.
 *
 * Written from the gathered adapters by the group's first rank; read by every rank, each
 * keeping its slices. docs/hf.md. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "hf/hf_internal.h"

#define PEFT_PREFIX "base_model.model."

/* The weight a "<module>.lora_A" / ".lora_B" adapts: "<module>.weight". */
static void weight_of(const char *adapter, char *out, size_t n) {
    size_t l = strlen(adapter);
    snprintf(out, n, "%.*s.weight", (int)(l > 7 ? l - 7 : l), adapter);
}

/* "model.layers.0.self_attn.q_proj.weight" -> PEFT's "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
 */
static void peft_name(const char *hf_weight, bool is_b, char *out, size_t n) {
    size_t l = strlen(hf_weight);
    snprintf(out, n, PEFT_PREFIX "%.*s.%s.weight", (int)(l > 7 ? l - 7 : l), hf_weight, is_b ? "lora_B" : "lora_A");
}

/* For adapter i: the map of its rows onto HF modules. A (r, in) goes whole to every module of
 * its weight (one segment per module, each all of A's rows); B (out, r) is split by the
 * weight's row segments. */
static it_status adapter_map(const hf_config *c, const char *name, const int64_t shape[2], bool is_b, tmap *tm) {
    char w[256];
    weight_of(name, w, sizeof w);
    /* the weight's map, with B's width as the columns (A reuses its segments' names) */
    it_status st = hf_map_of(c, w, is_b ? shape[0] : 1, shape[1], tm);
    if (st) return st;
    if (is_b) {
        for (int k = 0; k < tm->ns; k++)
            if (tm->s[k].kind == MAP_TRANSPOSE) tm->s[k].kind = MAP_COPY; /* PEFT's B is (out, r) for Conv1D too */
        return IT_OK;
    }
    /* A: every segment is the whole of A */
    for (int k = 0; k < tm->ns; k++) {
        tm->s[k].row0 = 0, tm->s[k].rows = shape[0], tm->s[k].kind = MAP_COPY;
    }
    tm->rows = shape[0];
    return IT_OK;
}

/* ---------------------------------------------------------------- save */

typedef struct pfill {
    const hf_config *c;
    const it_model *m;
    const float *full;
    it_safetensors_spec *spec;
    int *adapter; /* spec i -> the adapter (whole index) it comes from */
    int *segment; /* ... and which of its segments */
} pfill;

static it_status fill_peft(void *ctx, int i, void *dst, size_t nbytes) {
    pfill *p = ctx;
    int64_t shape[2], off;
    bool is_b;
    const char *name = it__lora_whole_at(p->m, p->adapter[i], shape, &off, &is_b);
    tmap tm;
    it_status st = adapter_map(p->c, name, shape, is_b, &tm);
    if (st) return st;
    const seg *s = &tm.s[p->segment[i]];
    float *v = dst;
    int64_t cols = shape[1];
    (void)nbytes;
    for (int64_t r = 0; r < s->rows; r++)
        memcpy(v + hf_row(s, r) * cols, p->full + off + (s->row0 + r) * cols, sizeof(float) * (size_t)cols);
    return IT_OK;
}

static it_status write_adapter_config(const it_model *m, const hf_config *c, const char *dir, const char *base,
                                      json_t *targets) {
    json_t *o = json_object();
    json_object_set_new(o, "alpha_pattern", json_object());
    json_object_set_new(o, "base_model_name_or_path", base ? json_string(base) : json_null());
    json_object_set_new(o, "bias", json_string("none"));
    json_object_set_new(o, "fan_in_fan_out", json_boolean(c->arch == HF_GPT2));
    json_object_set_new(o, "inference_mode", json_true());
    json_object_set_new(o, "init_lora_weights", json_true());
    json_object_set_new(o, "lora_alpha", json_real(it__lora_alpha(m)));
    json_object_set_new(o, "lora_dropout", json_real(0.0));
    json_object_set_new(o, "modules_to_save", json_null());
    json_object_set_new(o, "peft_type", json_string("LORA"));
    json_object_set_new(o, "r", json_integer(it__lora_rank(m)));
    json_object_set_new(o, "rank_pattern", json_object());
    json_object_set_new(o, "target_modules", json_incref(targets));
    json_object_set_new(o, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(o, "use_rslora", json_false());
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!text) return it_error(IT_ERR_OOM, "adapter_config.json: out of host memory");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    it_afile *f = NULL;
    it_status st = it_afile_open(path, &f);
    if (!st) st = it_afile_write(f, text, strlen(text));
    if (!st) st = it_afile_write(f, "\n", 1);
    if (f) st = st ? (it_afile_abort(f), st) : it_afile_commit(f);
    free(text);
    return st;
}

it_status it_hf_lora_save(const it_model *m, const char *dir, const char *base_model) {
    if (!it_model_has_lora(m)) return it_error(IT_ERR_INVALID_ARG, "%s: the model has no LoRA adapters to save", dir);
    hf_config c;
    it_status st = hf_config_of_model(m, &c);
    if (st) return st;
    int64_t fn = it__lora_full_numel(m);
    float *full = malloc(sizeof(float) * (size_t)fn + 1);
    if (!full) return it_error(IT_ERR_OOM, "%s: out of host memory for the adapters", dir);
    st = it__lora_get_full(m, full); /* collective over TP and PP */
    if (st || it_model_tp_rank(m) != 0 || it_model_pp_rank(m) != 0) {
        free(full);
        return st;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        free(full);
        return it_error(IT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    }
    int nw = it__lora_whole_count(m), cap = 3 * nw;
    it_safetensors_spec *spec = calloc((size_t)cap + 1, sizeof *spec);
    char(*names)[256] = calloc((size_t)cap + 1, sizeof *names);
    int *adapter = calloc((size_t)cap + 1, sizeof(int)), *segment = calloc((size_t)cap + 1, sizeof(int)), n = 0;
    json_t *targets = json_array();
    if (!spec || !names || !adapter || !segment) st = it_error(IT_ERR_OOM, "%s: out of host memory", dir);
    for (int i = 0; i < nw && !st; i++) {
        int64_t shape[2], off;
        bool is_b;
        const char *name = it__lora_whole_at(m, i, shape, &off, &is_b);
        tmap tm;
        st = adapter_map(&c, name, shape, is_b, &tm);
        for (int k = 0; k < tm.ns && !st; k++) {
            peft_name(tm.s[k].hf, is_b, names[n], sizeof names[n]);
            spec[n] = (it_safetensors_spec){names[n], IT_DTYPE_FP32, 2, {tm.s[k].rows, shape[1]}};
            adapter[n] = i, segment[n] = k;
            n++;
            /* target_modules: the modules' last names (PEFT matches suffixes), once each */
            const char *w = tm.s[k].hf, *end = w + strlen(w) - 7, *dot = end;
            while (dot > w && dot[-1] != '.') dot--;
            char mod[64];
            snprintf(mod, sizeof mod, "%.*s", (int)(end - dot), dot);
            bool seen = false;
            for (size_t t = 0; t < json_array_size(targets); t++)
                seen = seen || strcmp(json_string_value(json_array_get(targets, t)), mod) == 0;
            if (!seen) json_array_append_new(targets, json_string(mod));
        }
    }
    pfill pf = {&c, m, full, spec, adapter, segment};
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!st) st = it_safetensors_write(path, spec, n, fill_peft, &pf);
    if (!st) st = write_adapter_config(m, &c, dir, base_model, targets);
    json_decref(targets);
    free(spec);
    free(names);
    free(adapter);
    free(segment);
    free(full);
    return st;
}

/* ---------------------------------------------------------------- load */

it_status it_hf_lora_config(const char *dir, int *r, double *alpha) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t jerr;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) it__one_line(jerr.text);
    if (!o) return it_error(IT_ERR_FORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
    it_status st = IT_OK;
    json_t *type = json_object_get(o, "peft_type"), *rv = json_object_get(o, "r"),
           *av = json_object_get(o, "lora_alpha"), *rs = json_object_get(o, "use_rslora"),
           *bias = json_object_get(o, "bias"), *dora = json_object_get(o, "use_dora"),
           *rp = json_object_get(o, "rank_pattern"), *ap = json_object_get(o, "alpha_pattern");
    if (!json_is_string(type) || strcmp(json_string_value(type), "LORA") != 0)
        st = it_error(IT_ERR_UNSUPPORTED, "%s: \"peft_type\" is not \"LORA\"", path);
    else if (!json_is_integer(rv) || json_integer_value(rv) < 1 || !json_is_number(av))
        st = it_error(IT_ERR_FORMAT, "%s: no integer \"r\" >= 1 or numeric \"lora_alpha\"", path);
    else if (json_is_true(rs))
        st = it_error(IT_ERR_UNSUPPORTED, "%s: \"use_rslora\": true; the scaling here is lora_alpha / r", path);
    else if (json_is_true(dora))
        st = it_error(IT_ERR_UNSUPPORTED, "%s: \"use_dora\": true; DoRA's magnitude vector is not computed here", path);
    else if (json_is_string(bias) && strcmp(json_string_value(bias), "none") != 0)
        st = it_error(IT_ERR_UNSUPPORTED, "%s: \"bias\": \"%s\"; the adapters here train no biases", path,
                      json_string_value(bias));
    else if ((json_is_object(rp) && json_object_size(rp)) || (json_is_object(ap) && json_object_size(ap)))
        st = it_error(IT_ERR_UNSUPPORTED, "%s: per-module \"rank_pattern\" / \"alpha_pattern\"; one r and alpha here",
                      path);
    if (!st) {
        *r = (int)json_integer_value(rv);
        *alpha = json_number_value(av);
    }
    json_decref(o);
    return st;
}

it_status it_hf_lora_load(it_model *m, const char *dir) {
    if (!it_model_has_lora(m))
        return it_error(IT_ERR_INVALID_ARG, "%s: the model has no LoRA adapters to load into", dir);
    hf_config c;
    int r = 0;
    double alpha = 0;
    it_status st = hf_config_of_model(m, &c);
    if (!st) st = it_hf_lora_config(dir, &r, &alpha);
    if (st) return st;
    if (r != it__lora_rank(m) || (float)alpha != it__lora_alpha(m))
        return it_error(IT_ERR_INVALID_ARG,
                        "%s/adapter_config.json: r %d and lora_alpha %g; the run's adapters have --lora_rank %d and "
                        "--lora_alpha %g",
                        dir, r, alpha, it__lora_rank(m), (double)it__lora_alpha(m));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    it_safetensors *sf = NULL;
    if ((st = it_safetensors_open(path, &sf))) return st;
    int64_t fn = it__lora_full_numel(m);
    int nt = it_safetensors_count(sf);
    float *full = malloc(sizeof(float) * (size_t)fn + 1), *row = NULL;
    bool *used = calloc((size_t)nt + 1, sizeof(bool));
    if (!full || !used) st = it_error(IT_ERR_OOM, "%s: out of host memory", dir);
    for (int i = 0; i < it__lora_whole_count(m) && !st; i++) {
        int64_t shape[2], off;
        bool is_b;
        const char *name = it__lora_whole_at(m, i, shape, &off, &is_b);
        tmap tm;
        st = adapter_map(&c, name, shape, is_b, &tm);
        for (int k = 0; k < tm.ns && !st; k++) {
            const seg *s = &tm.s[k];
            char pn[256];
            peft_name(s->hf, is_b, pn, sizeof pn);
            const it_safetensors_tensor *t = it_safetensors_find(sf, pn);
            if (!t) {
                st = it_error(IT_ERR_FORMAT,
                              "%s: no tensor '%s' (the run adapts %s: --lora_target_modules must match "
                              "the adapter's target_modules)",
                              path, pn, name);
                break;
            }
            if (t->ndim != 2 || t->shape[0] != s->rows || t->shape[1] != shape[1]) {
                st = it_error(IT_ERR_FORMAT,
                              "%s: tensor '%s' is [%lld, %lld], the model's adapter makes it [%lld, %lld]", path, pn,
                              t->ndim > 0 ? (long long)t->shape[0] : 0LL, t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                              (long long)s->rows, (long long)shape[1]);
                break;
            }
            used[t - it_safetensors_at(sf, 0)] = true;
            int64_t cols = shape[1];
            if (!is_b && k > 0) { /* a second module of one fused weight: its A must be the first's */
                if (!row && !(row = malloc(sizeof(float) * (size_t)(s->rows * cols) + 1))) {
                    st = it_error(IT_ERR_OOM, "%s: out of host memory", dir);
                    break;
                }
                st = it_safetensors_read_f32(t, 0, s->rows * cols, row);
                if (!st && memcmp(row, full + off, sizeof(float) * (size_t)(s->rows * cols)) != 0) {
                    char first[256];
                    peft_name(tm.s[0].hf, false, first, sizeof first);
                    st = it_error(IT_ERR_UNSUPPORTED,
                                  "%s: '%s' differs from '%s': %s is one fused layer here, with "
                                  "one lora_A for all of its modules",
                                  path, pn, first, name);
                }
                continue;
            }
            for (int64_t q = 0; q < s->rows && !st; q++)
                st = it_safetensors_read_f32(t, hf_row(s, q) * cols, cols, full + off + (s->row0 + q) * cols);
        }
    }
    for (int i = 0; i < nt && !st; i++)
        if (!used[i])
            st = it_error(IT_ERR_FORMAT,
                          "%s: tensor '%s' adapts a module this run has no adapter on (set "
                          "--lora_target_modules to the adapter's target_modules)",
                          path, it_safetensors_at(sf, i)->name);
    if (!st) st = it__lora_set_full(m, full);
    it_safetensors_close(sf);
    free(full);
    free(row);
    free(used);
    return st;
}

bool it_hf_lora_is_peft(const char *path) {
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/adapter_config.json", path);
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(p, &sb) == 0;
}
