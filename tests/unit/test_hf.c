/* Hugging Face models in and out (include/infinitrain/hf.h), against the PyTorch fixtures of
 * tests/fixtures/hf (make_fixtures.py: HF names, layouts and rotary convention, computed by an
 * independent reimplementation of HF's modeling code):
 *   - logits of the initial weights within 1e-5 (fp32 products summed in another order), and
 *     every expected_losses.txt case within 1e-5 per step (2e-6 at step 1), through the apps'
 *     driver with --hf_model;
 *   - HF -> ours -> HF byte-identical (fp32; the sharded LLaMA with the fixture's split), an
 *     fp32 model written as bf16 byte-identical to the bf16 fixture (round to nearest even), and
 *     the bf16 file loading exactly (every weight the bf16 value widened);
 *   - the same weights from HF or from the llm.c file it-ckpt from-hf writes: bitwise equal;
 *   - a config the model cannot compute, a missing tensor, a wrong shape and a tensor nothing
 *     reads, each refused naming the key or the tensor;
 *   - LoRA adapters in PEFT's form: the HF weight plus PEFT's (alpha/r) B A is the merged model's
 *     HF weight (q/k rows permuted and Conv1D transposed alike), and they load back bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exact_common.h"
#include "infinitrain/hf.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/"

static char tmpdir[256];

static const char *tmp(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

static it_model *load(const char *dir) {
    it_model *m = NULL;
    it_status st = it_hf_load(dir, it_device_cpu(), NULL, &m);
    CHECK_MSG(st == IT_OK, "it_hf_load %s: %s", dir, it_last_error());
    return m;
}

static float *params_of(it_model *m, size_t *n) {
    *n = (size_t)it_tensor_numel(it_model_params(m));
    float *p = malloc(sizeof(float) * *n);
    CHECK_OK(it_tensor_copy_to_host(it_model_params(m), p, sizeof(float) * *n));
    return p;
}

/* Batch 0 of an llm.c shard, B=4 rows of T=32 (the fixture's loader). */
static void batch0(const char *shard, int32_t *x) {
    size_t n = 0;
    unsigned char *b = exact_read_file(shard, &n);
    CHECK(b && n > 1024 + 4 * 129);
    int32_t magic;
    memcpy(&magic, b, 4);
    for (int i = 0; i < 128; i++) {
        if (magic == 20240520) {
            uint16_t t;
            memcpy(&t, b + 1024 + 2 * i, 2);
            x[i] = t;
        } else {
            memcpy(&x[i], b + 1024 + 4 * i, 4);
        }
    }
    free(b);
}

static void check_logits(const char *name, const char *shard) {
    char dir[512], exp[512];
    snprintf(dir, sizeof dir, FIX "hf/%s", name);
    snprintf(exp, sizeof exp, FIX "hf/%s/expected_logits.bin", name);
    it_model *m = load(dir);
    if (!m) return;
    const it_model_info *info = it_model_get_info(m);
    int64_t V = info->vocab_size, Vp = info->padded_vocab;
    size_t n = 0;
    float *ref = exact_read_file(exp, &n);
    CHECK(ref && n == sizeof(float) * 128 * (size_t)V);
    int32_t x[128];
    batch0(shard, x);
    it_scope_begin();
    it_tensor *tx = it_tensor_from_host(it_device_cpu(), IT_DTYPE_I32, 2, (int64_t[]){4, 32}, x, sizeof x);
    it_tensor *logits = it_model_forward(m, tx);
    float *lg = malloc(sizeof(float) * 128 * (size_t)Vp);
    CHECK_OK(it_tensor_copy_to_host(logits, lg, sizeof(float) * 128 * (size_t)Vp));
    it_scope_end();
    double worst = 0;
    for (int r = 0; r < 128; r++)
        for (int64_t v = 0; v < V; v++) worst = fmax(worst, fabs((double)lg[r * Vp + v] - ref[r * V + v]));
    printf("%-12s logits: max |ours - torch (HF semantics)| = %.3g over 4 x 32 x %lld\n", name, worst, (long long)V);
    CHECK_MSG(worst <= 1e-5, "%s: logits differ by %.3g", name, worst);
    free(lg);
    free(ref);
    it_model_free(m);
}

static void check_losses(const char *app, const char *name, const char *shard) {
    char dir[512], exp[512];
    snprintf(dir, sizeof dir, FIX "hf/%s", name);
    snprintf(exp, sizeof exp, FIX "hf/%s/expected_losses.txt", name);
    CHECK(exact_trajectories_from(app, exp, NULL, dir, shard) >= 2);
}

/* HF -> ours -> HF: every file of the fixture written again, byte for byte. */
static void check_roundtrip(const char *name, const char *const *files, size_t max_shard) {
    char src[512], out[512], a[600], b[600];
    snprintf(src, sizeof src, FIX "hf/%s", name);
    it_model *m = load(src);
    if (!m) return;
    it_hf_save_options o = {IT_DTYPE_FP32, max_shard};
    CHECK_OK(it_hf_save(m, tmp(name, out, sizeof out), &o));
    for (int i = 0; files[i]; i++) {
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", out, files[i]);
        CHECK_MSG(exact_same_file(a, b), "%s: %s written back differs from the fixture's", name, files[i]);
    }
    /* and the written directory loads to the same parameters */
    it_model *m2 = load(out);
    size_t n1, n2;
    float *p1 = params_of(m, &n1), *p2 = m2 ? params_of(m2, &n2) : NULL;
    CHECK(p2 && n1 == n2 && memcmp(p1, p2, sizeof(float) * n1) == 0);
    free(p1);
    free(p2);
    it_model_free(m2);
    it_model_free(m);
}

static void check_bf16(void) {
    it_model *f = load(FIX "hf/llama3"), *h = load(FIX "hf/llama3_bf16");
    if (!f || !h) return;
    size_t nf, nh;
    float *pf = params_of(f, &nf), *ph = params_of(h, &nh);
    size_t bad = 0;
    for (size_t i = 0; i < nf && nf == nh; i++) bad += it_bf16_to_fp32(it_fp32_to_bf16(pf[i])) != ph[i];
    CHECK(nf == nh);
    CHECK_MSG(bad == 0, "%zu bf16 weights did not load as their value widened", bad);
    /* the fp32 model written as bf16: the bf16 fixture's file, byte for byte */
    char out[512], a[600];
    it_hf_save_options o = {IT_DTYPE_BF16, 0};
    CHECK_OK(it_hf_save(f, tmp("as_bf16", out, sizeof out), &o));
    snprintf(a, sizeof a, "%s/model.safetensors", out);
    CHECK_MSG(exact_same_file(a, FIX "hf/llama3_bf16/model.safetensors"), "the bf16 export differs from the fixture");
    free(pf);
    free(ph);
    it_model_free(f);
    it_model_free(h);
}

/* The llm.c file of an HF model (as it-ckpt from-hf writes it) holds the same model: the
 * same parameters, and a model loaded from it saves back to the same HF bytes. */
static void check_llmc(const char *name, it_status (*llmc_load)(const char *, it_device, it_model **)) {
    char src[512], bin[512];
    snprintf(src, sizeof src, FIX "hf/%s", name);
    it_model *m = load(src), *l = NULL;
    if (!m) return;
    snprintf(bin, sizeof bin, "%s/%s.bin", tmpdir, name);
    CHECK_OK(it_model_save(m, bin));
    CHECK_OK(llmc_load(bin, it_device_cpu(), &l));
    if (l) {
        size_t n1, n2;
        float *p1 = params_of(m, &n1), *p2 = params_of(l, &n2);
        CHECK_MSG(n1 == n2 && memcmp(p1, p2, sizeof(float) * n1) == 0, "%s: the llm.c file's parameters differ", name);
        const it_model_info *a = it_model_get_info(m), *b = it_model_get_info(l);
        CHECK(a->ffn_hidden == b->ffn_hidden && a->n_kv_head == b->n_kv_head && a->block_size == b->block_size);
        free(p1);
        free(p2);
        it_model_free(l);
    }
    it_model_free(m);
}

/* ---------------------------------------------------------------- refusals */

/* A copy of fixture `name` in tmpdir/case: its config.json with line `key` replaced (or
 * removed when value is NULL, or added when absent), the weights linked. */
static const char *variant(const char *name, const char *tag, const char *key, const char *value) {
    static char dir[512];
    char src[512], path[600], line[1024], want[160];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, tag);
    mkdir(dir, 0777);
    snprintf(src, sizeof src, FIX "hf/%s", name);
    const char *files[] = {"model.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char from[600];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (access(from, F_OK) == 0 && access(path, F_OK) != 0) CHECK(symlink(from, path) == 0);
    }
    snprintf(path, sizeof path, "%s/config.json", src);
    FILE *in = fopen(path, "r");
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *out = fopen(path, "w");
    snprintf(want, sizeof want, "  \"%s\":", key);
    bool done = false;
    while (in && out && fgets(line, sizeof line, in)) {
        if (strncmp(line, want, strlen(want)) == 0) {
            if (value) fprintf(out, "  \"%s\": %s,\n", key, value);
            done = true;
            size_t l = strlen(line);
            if (l >= 2 && line[l - 2] == '{') /* an object over several lines: up to its "  }" */
                while (fgets(line, sizeof line, in) && strncmp(line, "  }", 3) != 0) continue;
            continue;
        }
        if (!done && strcmp(line, "{\n") == 0 && value) { /* first line: add it when absent below */
            fputs(line, out);
            long pos = ftell(in);
            bool present = false;
            while (fgets(line, sizeof line, in))
                if (strncmp(line, want, strlen(want)) == 0) present = true;
            fseek(in, pos, SEEK_SET);
            if (!present) {
                fprintf(out, "  \"%s\": %s,\n", key, value);
                done = true;
            }
            continue;
        }
        fputs(line, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    return dir;
}

static void refused(const char *dir, it_status want, const char *substr) {
    it_model *m = NULL;
    it_status st = it_hf_load(dir, it_device_cpu(), NULL, &m);
    CHECK_MSG(st == want && strstr(it_last_error(), substr), "%s: expected %s with '%s', got %s: %s", dir,
              it_status_name(want), substr, it_status_name(st), it_last_error());
    CHECK(m == NULL);
}

static void check_refusals(void) {
    refused(variant("llama3", "bias", "attention_bias", "true"), IT_ERR_UNSUPPORTED, "\"attention_bias\": true");
    refused(variant("llama3", "act", "hidden_act", "\"gelu\""), IT_ERR_UNSUPPORTED, "\"hidden_act\": \"gelu\"");
    refused(variant("llama3", "dyn", "rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2.0}"),
            IT_ERR_UNSUPPORTED, "\"rope_scaling\": {\"rope_type\":\"dynamic\"");
    refused(variant("llama3", "qwen", "model_type", "\"qwen2\""), IT_ERR_UNSUPPORTED, "\"model_type\": \"qwen2\"");
    refused(variant("llama3", "hd", "head_dim", "16"), IT_ERR_UNSUPPORTED, "\"head_dim\": 16");
    refused(variant("llama3", "kv3", "num_key_value_heads", "3"), IT_ERR_FORMAT, "n_kv_head");
    refused(variant("llama3", "ffn", "intermediate_size", "64"), IT_ERR_FORMAT,
            "'model.layers.0.mlp.up_proj.weight' has shape [96, 32], the config makes it [64, 32]");
    refused(variant("llama3", "l1", "num_hidden_layers", "1"), IT_ERR_FORMAT,
            "tensor 'model.layers.1.input_layernorm.weight' is not a parameter of the model");
    refused(variant("llama3", "l3", "num_hidden_layers", "3"), IT_ERR_FORMAT,
            "no tensor 'model.layers.2.input_layernorm.weight'");
    refused(variant("llama3", "noheads", "num_attention_heads", NULL), IT_ERR_FORMAT, "no \"num_attention_heads\"");
    refused(variant("mixtral", "sw", "sliding_window", "16"), IT_ERR_UNSUPPORTED, "\"sliding_window\": 16");
    refused(variant("gpt2", "eps", "layer_norm_epsilon", "1e-6"), IT_ERR_UNSUPPORTED, "\"layer_norm_epsilon\"");
    refused(variant("gpt2", "relu", "activation_function", "\"relu\""), IT_ERR_UNSUPPORTED, "\"relu\"");
    refused(variant("gpt2", "untied", "tie_word_embeddings", "false"), IT_ERR_UNSUPPORTED, "\"tie_word_embeddings\"");
    char nodir[600];
    refused(tmp("missing", nodir, sizeof nodir), IT_ERR_NOT_FOUND, "config.json: cannot open");
}

/* ---------------------------------------------------------------- PEFT adapters */

static const it_safetensors_tensor *must_find(const it_safetensors *st, const char *name) {
    const it_safetensors_tensor *t = it_safetensors_find(st, name);
    CHECK_MSG(t != NULL, "no tensor %s", name);
    return t;
}

static float *read_all_f32(const it_safetensors_tensor *t) {
    float *v = malloc(sizeof(float) * (size_t)t->numel + 1);
    CHECK_OK(it_safetensors_read_f32(t, 0, t->numel, v));
    return v;
}

/* Adapters with random values saved as PEFT: for every adapted HF module, the fixture's weight
 * plus (alpha/r) B A from the PEFT file (transposed for GPT-2's Conv1D) equals the weight our
 * merged model writes back to HF, within fp32 rounding of the product (2e-6 absolute: |W| and
 * the delta are about 0.1); and the PEFT directory loads back into fresh adapters bitwise. */
static void check_peft(const char *name, const char *app, const char *targets, bool conv1d) {
    char src[512], pdir[512], bin[600], mdir[600];
    snprintf(src, sizeof src, FIX "hf/%s", name);
    snprintf(pdir, sizeof pdir, "%s/peft_%s", tmpdir, name);
    snprintf(bin, sizeof bin, "%s/merged_%s.bin", tmpdir, name);
    snprintf(mdir, sizeof mdir, "%s/merged_%s", tmpdir, name);
    it_model *m = load(src);
    if (!m) return;
    it_lora_config lc = {4, 8.0f, targets, 7};
    CHECK_OK(it_model_lora_apply(m, &lc));
    int64_t n = it_model_lora_numel(m);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(((i * 2654435761u) % 2001) - 1000) * 1e-4f;
    CHECK_OK(it_tensor_copy_from_host(it_model_trainable(m), v, sizeof(float) * (size_t)n));
    CHECK_OK(it_hf_lora_save(m, pdir, src));
    CHECK(it_hf_lora_is_peft(pdir) && !it_hf_lora_is_peft(src));
    CHECK_OK(it_model_lora_save_merged(m, bin));
    it_model *merged = NULL;
    CHECK_OK(strcmp(app, "gpt2") == 0 ? it_gpt2_load(bin, it_device_cpu(), &merged)
                                      : it_llama3_load(bin, it_device_cpu(), &merged));
    it_hf_save_options o = {IT_DTYPE_FP32, 0};
    if (merged) CHECK_OK(it_hf_save(merged, mdir, &o));
    it_model_free(merged);

    it_safetensors *base = NULL, *peft = NULL, *out = NULL;
    char pfile[600];
    snprintf(pfile, sizeof pfile, "%s/adapter_model.safetensors", pdir);
    CHECK_OK(it_safetensors_open(src, &base));
    CHECK_OK(it_safetensors_open(pfile, &peft));
    CHECK_OK(it_safetensors_open(mdir, &out));
    int modules = 0;
    double worst = 0;
    for (int i = 0; peft && base && out && i < it_safetensors_count(peft); i++) {
        const it_safetensors_tensor *ta = it_safetensors_at(peft, i);
        const char *tail = strstr(ta->name, ".lora_A.weight");
        if (!tail) continue;
        char module[256], wname[300], bname[300];
        snprintf(module, sizeof module, "%.*s", (int)(tail - ta->name - 17),
                 ta->name + 17); /* less base_model.model. */
        snprintf(wname, sizeof wname, "%s.weight", module);
        snprintf(bname, sizeof bname, "base_model.model.%s.lora_B.weight", module);
        const it_safetensors_tensor *tb = must_find(peft, bname), *tw = must_find(base, wname),
                                    *tm = must_find(out, wname);
        if (!tb || !tw || !tm) continue;
        float *A = read_all_f32(ta), *Bm = read_all_f32(tb), *W = read_all_f32(tw), *M = read_all_f32(tm);
        int64_t r = ta->shape[0], in = ta->shape[1], outf = tb->shape[0];
        for (int64_t o2 = 0; o2 < outf; o2++)
            for (int64_t j = 0; j < in; j++) {
                double d = 0;
                for (int64_t k = 0; k < r; k++) d += (double)Bm[o2 * r + k] * A[k * in + j];
                int64_t at = conv1d ? j * outf + o2 : o2 * in + j;
                worst = fmax(worst, fabs((double)W[at] + 2.0 * d - M[at])); /* alpha/r = 8/4 */
            }
        modules++;
        free(A), free(Bm), free(W), free(M);
    }
    printf("%-8s PEFT: %d modules, max |W + (alpha/r) B A - merged| = %.3g\n", name, modules, worst);
    CHECK(modules >= 4);
    CHECK_MSG(worst <= 2e-6, "%s: PEFT's delta and the merged weight differ by %.3g", name, worst);
    it_safetensors_close(base);
    it_safetensors_close(peft);
    it_safetensors_close(out);

    /* loaded back into fresh adapters: bitwise */
    it_model *m2 = load(src);
    if (m2) {
        CHECK_OK(it_model_lora_apply(m2, &lc));
        CHECK_OK(it_hf_lora_load(m2, pdir));
        float *v2 = malloc(sizeof(float) * (size_t)n);
        CHECK_OK(it_tensor_copy_to_host(it_model_trainable(m2), v2, sizeof(float) * (size_t)n));
        CHECK_MSG(memcmp(v, v2, sizeof(float) * (size_t)n) == 0, "%s: PEFT adapters did not load back bitwise", name);
        free(v2);
        it_model_free(m2);
    }
    /* another rank, or targets the file does not have: refused, naming them */
    it_model *m3 = load(src);
    if (m3) {
        it_lora_config other = {8, 8.0f, targets, 7};
        CHECK_OK(it_model_lora_apply(m3, &other));
        CHECK_ERR(it_hf_lora_load(m3, pdir), IT_ERR_INVALID_ARG, "r 4 and lora_alpha 8");
        it_model_free(m3);
    }
    free(v);
    it_model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/it_test_hf_%d", (int)getpid());
    mkdir(tmpdir, 0777);
    const char *gshard = FIX "gpt2/tiny_shard.bin", *lshard = FIX "llama3/tiny_shard_u16.bin",
               *mshard = FIX "mixtral/tiny_shard.bin";
    check_logits("gpt2", gshard);
    check_logits("llama3", lshard);
    check_logits("llama3_bf16", lshard);
    check_logits("mixtral", mshard);
    check_losses("gpt2", "gpt2", gshard);
    check_losses("llama3", "llama3", lshard);
    check_losses("llama3", "llama3_bf16", lshard);
    check_losses("mixtral", "mixtral", mshard);

    const char *single[] = {"model.safetensors", NULL};
    check_roundtrip("gpt2", single, 0);
    check_roundtrip("mixtral", single, 0);
    /* the fixture's split: the shard limit is its first shard's tensor bytes */
    it_safetensors *st = NULL;
    size_t first = 0;
    CHECK_OK(it_safetensors_open(FIX "hf/llama3", &st));
    for (int i = 0; i < it_safetensors_count(st); i++)
        if (strstr(it_safetensors_at(st, i)->file, "model-00001-of-00002")) first += it_safetensors_at(st, i)->nbytes;
    it_safetensors_close(st);
    const char *sharded[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                             "model.safetensors.index.json", NULL};
    check_roundtrip("llama3", sharded, first);
    check_bf16();
    check_llmc("gpt2", it_gpt2_load);
    check_llmc("llama3", it_llama3_load);
    check_llmc("mixtral", it_mixtral_load);
    check_refusals();
    check_peft("llama3", "llama3", "c_attn,c_proj,c_fc,c_fc2", false);
    check_peft("gpt2", "gpt2", "c_attn,c_proj,c_fc", true);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return it_test_report("test_hf");
}
