/* LoRA adapters (src/models/lora.c): target matching, shapes and names, initialization,
 * frozen base weights (no gradient buffer, no weight gradient), the trainable count, the
 * adapter file round trip and every refusal of a bad one, Mixtral's attention adapters and its
 * refused experts. Exact values against PyTorch: test_lora_exact.c. */
#include <unistd.h>

#include "infinitrain/autograd.h"
#include "infinitrain/train.h"
#include "it_test.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/"

static it_model *gpt2_lora(int rank, const char *targets, uint64_t seed) {
    it_model *m = NULL;
    CHECK_OK(it_gpt2_load(FIX "gpt2/tiny_gpt2.bin", it_device_cpu(), &m));
    it_lora_config lc = {rank, 16.0f, targets, seed};
    if (m) CHECK_OK(it_model_lora_apply(m, &lc));
    return m;
}

static float *host_copy(it_tensor *t) {
    size_t n = it_tensor_nbytes(t);
    float *h = malloc(n);
    CHECK_OK(it_tensor_copy_to_host(t, h, n));
    return h;
}

static double loss_of(it_model *m, bool backward) {
    int64_t shape[2] = {2, 8};
    int32_t x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (i * 37) % 257, y[i] = (i * 53 + 1) % 257;
    it_scope_begin();
    it_tensor *tx = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, x, sizeof x);
    it_tensor *ty = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, y, sizeof y);
    it_tensor *l = it_model_loss(m, tx, ty);
    double v = NAN;
    CHECK_OK(l ? it_tensor_item(l, NULL, &v) : it_last_status());
    if (backward && l) CHECK_OK(it_backward(l));
    it_scope_end();
    it_tape_clear();
    return v;
}

static void test_targets_and_shapes(void) {
    const struct {
        const char *targets;
        int layers;
    } cases[] = {
        {"c_proj", 4}, {"attn.c_proj", 2}, {" c_attn , ,attn.c_proj ", 4}, {"c_fc", 2}, {"mlp.c_fc,c_attn", 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        it_model *m = gpt2_lora(4, cases[i].targets, 1);
        CHECK_MSG(it_model_lora_count(m) == 2 * cases[i].layers, "'%s': %d tensors", cases[i].targets,
                  it_model_lora_count(m));
        it_model_free(m);
    }
    it_model *m = gpt2_lora(4, "c_attn,attn.c_proj", 1);
    const it_lora_tensor_info *a = it_model_lora_at(m, 0), *b = it_model_lora_at(m, 1);
    CHECK(a && strcmp(a->name, "transformer.h.0.attn.c_attn.lora_A") == 0 && a->shape[0] == 4 && a->shape[1] == 32);
    CHECK(b && strcmp(b->name, "transformer.h.0.attn.c_attn.lora_B") == 0 && b->shape[0] == 96 && b->shape[1] == 4);
    CHECK(it_model_lora_find(m, "transformer.h.1.attn.c_proj.lora_B") != NULL);
    CHECK(it_model_lora_find(m, "transformer.h.0.mlp.c_proj.lora_B") == NULL);
    CHECK(it_model_lora_scaling(m) == 4.0f);
    /* per layer: c_attn 4*32 + 96*4, attn.c_proj 4*32 + 32*4 */
    int64_t per_layer = 4 * 32 + 96 * 4 + 4 * 32 + 32 * 4, trainable = 0, total = 0;
    CHECK(it_model_lora_numel(m) == 2 * per_layer);
    it_model_lora_counts(m, &trainable, &total);
    /* all params: the model's 36736 less the padded wte rows (320 - 257) * 32, plus the adapters */
    CHECK(trainable == 2 * per_layer && total == 36736 - 63 * 32 + 2 * per_layer);
    CHECK(it_tensor_numel(it_model_grads(m)) == 2 * per_layer &&
          it_tensor_numel(it_model_trainable(m)) == 2 * per_layer);
    it_model_free(m);

    it_model *base = NULL;
    CHECK_OK(it_gpt2_load(FIX "gpt2/tiny_gpt2.bin", it_device_cpu(), &base));
    it_lora_config bad = {4, 16.0f, "c_fc2,lm_head", 1};
    CHECK_ERR(it_model_lora_apply(base, &bad), IT_ERR_INVALID_ARG, "matches no linear layer");
    bad = (it_lora_config){0, 16.0f, "c_attn", 1};
    CHECK_ERR(it_model_lora_apply(base, &bad), IT_ERR_INVALID_ARG, "--lora_rank");
    CHECK(!it_model_has_lora(base));
    bad = (it_lora_config){4, 16.0f, "c_attn", 1};
    CHECK_OK(it_model_lora_apply(base, &bad));
    CHECK_ERR(it_model_lora_apply(base, &bad), IT_ERR_INVALID_ARG, "already has adapters");
    it_model_free(base);
}

static void test_init_and_frozen(void) {
    it_model *m = gpt2_lora(8, "c_attn,c_proj", 7), *same = gpt2_lora(8, "c_attn,c_proj", 7),
             *other = gpt2_lora(8, "c_attn,c_proj", 8);
    float *a = host_copy(it_model_trainable(m)), *b = host_copy(it_model_trainable(same)),
          *c = host_copy(it_model_trainable(other));
    int64_t n = it_model_lora_numel(m);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0); /* from --seed alone */
    CHECK(memcmp(a, c, sizeof(float) * (size_t)n) != 0);
    for (int i = 0; i < it_model_lora_count(m); i++) {
        const it_lora_tensor_info *t = it_model_lora_at(m, i);
        double bound = 1.0 / sqrt((double)t->shape[1]), mx = 0;
        for (int64_t j = 0; j < t->numel; j++) mx = fmax(mx, fabs(a[t->offset + j]));
        if (t->is_b)
            CHECK_MSG(mx == 0.0, "%s starts at zero", t->name);
        else /* Kaiming-uniform, a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in)) */
            CHECK_MSG(mx > 0.5 * bound && mx <= bound * (1 + 1e-6), "%s: max |A| %g, bound %g", t->name, mx, bound);
    }
    free(a);
    free(b);
    free(c);

    /* with B = 0 the adapted model is the base model, bit for bit */
    it_model *base = NULL;
    CHECK_OK(it_gpt2_load(FIX "gpt2/tiny_gpt2.bin", it_device_cpu(), &base));
    CHECK(loss_of(m, false) == loss_of(base, false));

    /* frozen: no base gradient at all after a backward; the adapters' B gets one */
    CHECK_OK(it_model_zero_grad(m));
    loss_of(m, true);
    CHECK_OK(it_model_grads_final(m));
    bool any_base = false;
    for (int i = 0; i < it_model_param_count(m); i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        any_base |= it_tensor_requires_grad(p->param) || it_tensor_grad(p->param) != NULL || p->grad != NULL;
    }
    CHECK(!any_base);
    float *g = host_copy(it_model_grads(m));
    double gb = 0;
    const it_lora_tensor_info *b0 = it_model_lora_at(m, 1);
    for (int64_t j = 0; j < b0->numel; j++) gb = fmax(gb, fabs(g[b0->offset + j]));
    CHECK(gb > 0);
    free(g);
    it_model_free(base);
    it_model_free(m);
    it_model_free(same);
    it_model_free(other);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_file(void) {
    const char *fixture = FIX "lora/gpt2_1.init.bin";
    it_model *m = gpt2_lora(8, "c_attn,attn.c_proj", 1);
    CHECK_OK(it_model_lora_load(m, fixture));
    char path[] = "/tmp/it_lora_XXXXXX";
    close(mkstemp(path));
    CHECK_OK(it_model_lora_save(m, path));
    size_t n1 = 0, n2 = 0;
    unsigned char *orig = slurp(fixture, &n1), *back = slurp(path, &n2);
    CHECK(orig && back && n1 == n2 && memcmp(orig, back, n1) == 0); /* InfiniTrain's bytes, sorted names */
    free(back);
    it_model *fresh = gpt2_lora(8, "c_attn,attn.c_proj", 99);
    CHECK_OK(it_model_lora_load(fresh, path));
    float *a = host_copy(it_model_trainable(m)), *b = host_copy(it_model_trainable(fresh));
    CHECK(memcmp(a, b, sizeof(float) * (size_t)it_model_lora_numel(m)) == 0);
    free(b);

    /* bad files: each refused with IT_ERR_FORMAT naming what is wrong; the adapters unchanged */
    const char *first = "transformer.h.0.attn.c_attn.lora_A";
    size_t name0 = 12, nlen = strlen(first), dims0 = name0 + 4 + nlen + 4;
    struct {
        const char *what, *expect;
        size_t at, len;
        const void *bytes;
        size_t cut; /* 0: keep the length */
    } bad[] = {
        {"magic", "magic", 0, 4, "XXXX", 0},
        {"version", "version: expected 1, found 2", 4, 4, "\x02\0\0\0", 0},
        {"count", "holds 7 tensors", 8, 4, "\x07\0\0\0", 0},
        {"name", "'transformer.h.0.attn.c_attn.lora_Q' is not an adapter", name0 + 4 + nlen - 1, 1, "Q", 0},
        {"unprintable", "printable", name0 + 4, 1, "\n", 0},
        {"name length", "name length", name0, 4, "\0\0\0\0", 0},
        {"ndim", "ndim 3, expected 2", dims0 - 4, 4, "\x03\0\0\0", 0},
        {"shape", "shape [4, 32] in the file, the model's is [8, 32]", dims0, 8, "\x04\0\0\0\0\0\0\0", 0},
        {"truncated", "the file ends inside", 0, 0, NULL, n1 - 3},
        {"trailing", "bytes after the last tensor", 0, 0, NULL, n1 + 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = bad[i].cut ? bad[i].cut : n1;
        unsigned char *buf = calloc(n, 1);
        memcpy(buf, orig, n < n1 ? n : n1);
        if (bad[i].bytes) memcpy(buf + bad[i].at, bad[i].bytes, bad[i].len);
        spit(path, buf, n);
        CHECK_ERR(it_model_lora_load(fresh, path), IT_ERR_FORMAT, bad[i].expect);
        free(buf);
    }
    /* a duplicate: the second tensor renamed to the first ("..._B" -> "..._A") */
    unsigned char *dup = malloc(n1);
    memcpy(dup, orig, n1);
    size_t second = dims0 + 16 + 4 * 8 * 32;
    dup[second + 4 + nlen - 1] = 'A';
    spit(path, dup, n1);
    CHECK_ERR(it_model_lora_load(fresh, path), IT_ERR_FORMAT, "'transformer.h.0.attn.c_attn.lora_A' appears twice");
    free(dup);
    b = host_copy(it_model_trainable(fresh));
    CHECK(memcmp(a, b, sizeof(float) * (size_t)it_model_lora_numel(m)) == 0);
    CHECK_ERR(it_model_lora_load(fresh, "/nonexistent/adapter.bin"), IT_ERR_IO, "/nonexistent/adapter.bin");
    free(a);
    free(b);
    free(orig);
    unlink(path);
    it_model_free(m);
    it_model_free(fresh);
}

static void test_mixtral(void) {
    it_model *m = NULL, *base = NULL;
    CHECK_OK(it_mixtral_load(FIX "mixtral/tiny_mixtral.bin", it_device_cpu(), &m));
    CHECK_OK(it_mixtral_load(FIX "mixtral/tiny_mixtral.bin", it_device_cpu(), &base));
    if (!m || !base) return;
    it_lora_config lc = {4, 8.0f, "c_fc", 1};
    CHECK_ERR(it_model_lora_apply(m, &lc), IT_ERR_UNSUPPORTED, "experts is not supported");
    lc.targets = "c_attn,attn.c_proj";
    CHECK_OK(it_model_lora_apply(m, &lc));
    CHECK(loss_of(m, false) == loss_of(base, false)); /* B = 0 */
    /* a non-zero B on c_attn moves the loss: the packed Q|K|V adapter reaches the forward */
    const it_lora_tensor_info *b = it_model_lora_at(m, 1);
    CHECK(b && strstr(b->name, "c_attn.lora_B"));
    if (b) CHECK_OK(it_tensor_fill(b->param, it_scalar_f64(0.05)));
    CHECK(fabs(loss_of(m, false) - loss_of(base, false)) > 1e-6);
    it_model_free(m);
    it_model_free(base);
}

int main(void) {
    test_targets_and_shapes();
    test_init_and_frozen();
    test_file();
    test_mixtral();
    return it_test_report("test_lora");
}
