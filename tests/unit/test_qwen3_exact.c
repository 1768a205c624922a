/* Qwen3 on the CPU backend against PyTorch (fixtures made by tests/fixtures/qwen3/make_fixtures.py,
 * Hugging Face's Qwen3ForCausalLM written out): the logits of the first batch and the 10-step
 * trajectories with SGD and Adam of three tiny models, an untied one whose heads are wider than
 * n_embd / n_head (Hugging Face form), a tied one (the same), and InfiniTrain-Test's llm.c-style
 * file; the bf16 autocast trajectory; byte-identical round trips of both forms; the tied mark of
 * the llm.c-style file; the refusals (a version-3 file, n_embd not divisible by n_head, a head
 * size the file cannot hold). Tolerances: tests/exact_common.h (fp32: logits 1e-5, step 1 2e-6,
 * later steps 1e-5); bf16 within 1e-2 per step (InfiniTrain's bf16 tolerance; the reasons are
 * test_lora_exact.c's: one bf16 ulp is 2^-8 relative, and Adam carries a rounding difference on). */
#include <math.h>

#include "exact_common.h"
#include "infinitrain/hf.h"
#include "models/model_impl.h"

#define QFIX IT_SOURCE_DIR "/tests/fixtures/qwen3/"
#define SHARD IT_SOURCE_DIR "/tests/fixtures/llama3/tiny_shard_u16.bin"

static it_model *load_hf(const char *dir) {
    it_model *m = NULL;
    CHECK_OK(it_hf_load(dir, it_device_cpu(), NULL, &m));
    return m;
}

/* The first batch of the shard (B 4, T 32): tokens 0..127. */
static void batch0(int32_t x[128]) {
    size_t n = 0;
    unsigned char *b = exact_read_file(SHARD, &n);
    CHECK(b && n >= 1024 + 2 * 129);
    for (int i = 0; b && i < 128; i++) {
        uint16_t t;
        memcpy(&t, b + 1024 + 2 * i, 2);
        x[i] = t;
    }
    free(b);
}

static void check_logits(it_model *m, const char *expected) {
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int64_t V = in->vocab_size, Vp = in->padded_vocab;
    size_t n = 0;
    float *ref = exact_read_file(expected, &n);
    CHECK_MSG(ref && n == sizeof(float) * 128 * (size_t)V, "%s: %zu bytes", expected, n);
    int32_t x[128];
    batch0(x);
    it_scope_begin();
    it_tensor *tx = it_tensor_from_host(it_device_cpu(), IT_DTYPE_I32, 2, (int64_t[]){4, 32}, x, sizeof x);
    it_tensor *logits = it_model_forward(m, tx);
    float *lg = malloc(sizeof(float) * 128 * (size_t)Vp);
    CHECK(logits != NULL);
    if (logits) CHECK_OK(it_tensor_copy_to_host(logits, lg, sizeof(float) * 128 * (size_t)Vp));
    it_scope_end();
    double worst = 0;
    for (int r = 0; logits && ref && r < 128; r++)
        for (int64_t v = 0; v < V; v++) worst = fmax(worst, fabs((double)lg[r * Vp + v] - ref[r * V + v]));
    printf("%s\n  logits: max |ours - torch| = %.3g over 4 x 32 x %lld\n", expected, worst, (long long)V);
    CHECK_MSG(logits && worst <= 1e-5, "logits differ by %.3g", worst);
    free(lg);
    free(ref);
}

static float *params_of(it_model *m, size_t *n) {
    *n = (size_t)it_tensor_numel(it_model_params(m));
    float *p = malloc(sizeof(float) * *n + 1);
    CHECK_OK(it_tensor_copy_to_host(it_model_params(m), p, sizeof(float) * *n));
    return p;
}

/* HF -> ours -> HF: the weights byte for byte, the config read back to the same model. */
static void check_hf_roundtrip(it_model *m, const char *src) {
    if (!m) return;
    char out[] = "/tmp/it_qwen3_hf_XXXXXX", a[600], b[600];
    CHECK(mkdtemp(out) != NULL);
    it_hf_save_options o = {IT_DTYPE_FP32, 0};
    CHECK_OK(it_hf_save(m, out, &o));
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK_MSG(exact_same_file(a, b), "%s: model.safetensors written back differs", src);
    it_model *m2 = load_hf(out);
    if (m2) {
        const it_model_info *x = it_model_get_info(m), *y = it_model_get_info(m2);
        CHECK(strcmp(y->family, "qwen3") == 0 && y->head_dim == x->head_dim && y->n_kv_head == x->n_kv_head &&
              y->tied_embeddings == x->tied_embeddings && y->ffn_hidden == x->ffn_hidden);
        size_t n1, n2;
        float *p1 = params_of(m, &n1), *p2 = params_of(m2, &n2);
        CHECK(n1 == n2 && memcmp(p1, p2, sizeof(float) * n1) == 0);
        free(p1);
        free(p2);
        it_model_free(m2);
    }
    snprintf(b, sizeof b, "rm -rf %s", out);
    CHECK(system(b) == 0);
}

/* A model read from Hugging Face whose heads are not n_embd / n_head wide cannot go to the
 * llm.c-style file: refused with the reason and the way out. */
static void check_llmc_refused(it_model *m) {
    if (!m) return;
    char path[] = "/tmp/it_qwen3_llmc_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(it_model_save(m, path) == IT_ERR_UNSUPPORTED);
    const char *msg = it_last_error();
    CHECK_MSG(strstr(msg, "no head_dim slot") && strstr(msg, "--output_hf"), "message: %s", msg);
    unlink(path);
}

static void test_hf_untied(void) {
    it_model *m = load_hf(QFIX "qwen3");
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    CHECK(strcmp(in->family, "qwen3") == 0 && in->head_dim == 16 && in->n_embd == 32 && in->n_head == 4 &&
          in->n_kv_head == 2 && in->ffn_hidden == 64 && !in->tied_embeddings);
    CHECK(it_model_param_find(m, "transformer.h.1.attn.q_norm.weight") != NULL);
    const it_model_param_info *qkv = it_model_param_find(m, "transformer.h.0.attn.c_attn.weight");
    CHECK(qkv && qkv->shape[0] == (4 + 2 * 2) * 16 && qkv->shape[1] == 32 && qkv->q_rows == 64 && qkv->head_dim == 16);
    check_logits(m, QFIX "qwen3/expected_logits.bin");
    check_hf_roundtrip(m, QFIX "qwen3");
    check_llmc_refused(m);
    it_model_free(m);
    CHECK(exact_trajectories_from("qwen3", QFIX "qwen3/expected_losses.txt", NULL, QFIX "qwen3", SHARD) >= 2);
    CHECK(exact_trajectories_tol("qwen3", QFIX "qwen3/expected_losses_bf16.txt", NULL, QFIX "qwen3", SHARD, 1e-2,
                                 1e-2) >= 1);
}

static void test_hf_tied(void) {
    it_model *m = load_hf(QFIX "qwen3_tied");
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    CHECK(in->tied_embeddings && in->head_dim == 16);
    CHECK(it_model_param_find(m, "lm_head.weight") == NULL); /* the head is wte */
    const it_model_param_info *wte = it_model_param_find(m, "transformer.wte.weight");
    CHECK(wte && wte->tied_name && strcmp(wte->tied_name, "lm_head.weight") == 0);
    check_logits(m, QFIX "qwen3_tied/expected_logits.bin");
    check_hf_roundtrip(m, QFIX "qwen3_tied");
    it_model_free(m);
    CHECK(exact_trajectories_from("qwen3", QFIX "qwen3_tied/expected_losses.txt", NULL, QFIX "qwen3_tied", SHARD) >= 2);
}

static void test_llmc(void) {
    it_model *m = NULL;
    CHECK_OK(it_qwen3_load(QFIX "tiny_qwen3.bin", it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    CHECK(strcmp(in->family, "qwen3") == 0 && in->head_dim == 8 && in->ffn_hidden == 64 && !in->tied_embeddings);
    exact_roundtrip(m, QFIX "tiny_qwen3.bin");
    it_model_free(m);
    /* it_model_load knows the magic */
    CHECK_OK(it_model_load(QFIX "tiny_qwen3.bin", it_device_cpu(), &m));
    it_model_free(m);
    CHECK(exact_trajectories("qwen3", QFIX "tiny_qwen3_expected_losses.txt", QFIX "tiny_qwen3.bin", SHARD) >= 2);
}

/* The tied mark: a tied model (the llm.c file's shape, built from a configuration) saves wte
 * twice, as InfiniTrain-Test's converter writes a tied checkpoint, with header[16] = 1; it loads
 * back tied, with the same parameters, and saves to the same bytes. */
static void test_llmc_tied(void) {
    it__llama_config c = {.qwen3 = true,
                          .tied = true,
                          .block_size = 32,
                          .vocab_size = 300,
                          .n_layer = 2,
                          .n_head = 4,
                          .n_kv_head = 2,
                          .n_embd = 32,
                          .ffn_hidden = 64,
                          .norm_eps = 1e-6f,
                          .rope_theta = 1e6f};
    it_model *m = NULL;
    CHECK_OK(it__llama_build(&c, it_device_cpu(), NULL, "tied", &m));
    if (!m) return;
    size_t n = 0;
    float *p = params_of(m, &n);
    for (size_t i = 0; i < n; i++) p[i] = (float)sin(0.37 * (double)i); /* any values */
    CHECK_OK(it_tensor_copy_from_host(it_model_params(m), p, sizeof(float) * n));
    char path[] = "/tmp/it_qwen3_tied_XXXXXX", path2[] = "/tmp/it_qwen3_tied2_XXXXXX";
    close(mkstemp(path));
    close(mkstemp(path2));
    CHECK_OK(it_model_save(m, path));
    size_t bytes = 0;
    unsigned char *f = exact_read_file(path, &bytes);
    const int64_t VC = 300 * 32;
    CHECK(f && bytes == 1024 + sizeof(float) * (n + (size_t)VC));
    if (f && bytes == 1024 + sizeof(float) * (n + (size_t)VC)) {
        int32_t *h = (int32_t *)f;
        CHECK(h[0] == 20240804 && h[1] == 4 && h[8] == 64 && h[16] == 1);
        CHECK(memcmp(f + 1024, f + 1024 + sizeof(float) * n, sizeof(float) * (size_t)VC) == 0); /* lm_head = wte */
    }
    free(f);
    it_model *m2 = NULL;
    CHECK_OK(it_qwen3_load(path, it_device_cpu(), &m2));
    if (m2) {
        CHECK(it_model_get_info(m2)->tied_embeddings);
        size_t n2 = 0;
        float *p2 = params_of(m2, &n2);
        CHECK(n2 == n && memcmp(p, p2, sizeof(float) * n) == 0);
        free(p2);
        CHECK_OK(it_model_save(m2, path2));
        CHECK(exact_same_file(path, path2));
        it_model_free(m2);
    }
    free(p);
    it_model_free(m);
    unlink(path);
    unlink(path2);
}

/* A copy of the fixture with header field `field` set to value (extra: bytes appended). */
static const char *patched(int field, int32_t value) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/it_qwen3_bad_%d.bin", field);
    size_t n = 0;
    unsigned char *b = exact_read_file(QFIX "tiny_qwen3.bin", &n);
    CHECK(b != NULL);
    if (!b) return path;
    memcpy(b + 4 * field, &value, 4);
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    free(b);
    return path;
}

static void expect_load_error(const char *path, const char *substr) {
    it_model *m = NULL;
    it_status st = it_qwen3_load(path, it_device_cpu(), &m);
    CHECK(st == IT_ERR_FORMAT && m == NULL);
    CHECK_MSG(strstr(it_last_error(), substr) != NULL, "message '%s' lacks '%s'", it_last_error(), substr);
    printf("refused: %s\n", it_last_error());
    it_model_free(m);
}

static void test_bad_input(void) {
    /* InfiniTrain's first Qwen3 branch wrote version 3 (a multiplier in [8], another order) */
    expect_load_error(patched(1, 3), "header[1] version: expected 4");
    expect_load_error(patched(5, 5), "no head_dim slot");
    expect_load_error(patched(16, 2), "tie_word_embeddings: expected 0 or 1");
    /* marked tied: the file's lm_head is read as the copy of wte it then is, and not used */
    it_model *m = NULL;
    CHECK_OK(it_qwen3_load(patched(16, 1), it_device_cpu(), &m));
    CHECK(m && it_model_get_info(m)->tied_embeddings && !it_model_param_find(m, "lm_head.weight"));
    it_model_free(m);
    expect_load_error(patched(8, 65), "file size");
    expect_load_error(patched(0, 20240803), "header[0] magic: expected 20240804");
    for (int f = 0; f < 17; f++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/it_qwen3_bad_%d.bin", f);
        unlink(path);
    }
}

int main(void) {
    test_llmc();
    test_llmc_tied();
    test_hf_untied();
    test_hf_tied();
    test_bad_input();
    return it_test_report("test_qwen3_exact");
}
