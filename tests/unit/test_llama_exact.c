/* LLaMA-3 and Mixtral on the CPU backend against PyTorch (fixtures made by
 * tests/fixtures/{llama3,mixtral}/make_fixtures.py): step-1 logits, loss and every gradient,
 * Mixtral's routing of the debug batch, the 10-step trajectories with SGD and Adam through
 * the apps' driver, byte-identical checkpoint round trips, uint16 and uint32 shards, and
 * the loaders' refusals of malformed headers. Tolerances: tests/exact_common.h. */
#include "exact_common.h"
#include "infinitrain/data.h"

#define LFIX IT_SOURCE_DIR "/tests/fixtures/llama3/"
#define MFIX IT_SOURCE_DIR "/tests/fixtures/mixtral/"

static void test_llama3(void) {
    it_model *m = NULL;
    CHECK_OK(it_llama3_load(LFIX "tiny_llama3.bin", it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int64_t L = in->n_layer, C = in->n_embd, V = in->vocab_size, H = in->ffn_hidden;
    int64_t kvd = (int64_t)in->n_kv_head * (C / in->n_head);
    CHECK(H == 112); /* 4*32=128 -> 85 -> llround(85*1.3f)=110 -> up to a multiple of 16 */
    CHECK(it_llama3_ffn_hidden(32, 1.3f, 16) == 112);
    CHECK(it_llama3_ffn_hidden(4096, 1.3f, 1024) == 14336); /* LLaMA-3 8B */
    exact_segment segs[] = {{"wte", V * C},
                            {"ln_1.w", L * C},
                            {"c_attn.w", L * (C + 2 * kvd) * C},
                            {"attn.c_proj.w", L * C * C},
                            {"ln_2.w", L * C},
                            {"c_fc.w (up)", L * H * C},
                            {"c_fc2.w (gate)", L * H * C},
                            {"mlp.c_proj.w", L * C * H},
                            {"ln_f.w", C},
                            {"lm_head.w", V * C}};
    exact_debug_state(m, LFIX "debug_state.bin", segs, (int)(sizeof segs / sizeof segs[0]));
    exact_roundtrip(m, LFIX "tiny_llama3.bin");
    it_model_free(m);
    CHECK(exact_trajectories("llama3", LFIX "expected_losses.txt", LFIX "tiny_llama3.bin", LFIX "tiny_shard_u32.bin") >=
          4);
    /* The uint16 shard holds the same tokens: identical training. */
    double a[3], b[3];
    const char *shards[2] = {LFIX "tiny_shard_u32.bin", LFIX "tiny_shard_u16.bin"};
    for (int s = 0; s < 2; s++) {
        it_train_config c;
        it_train_config_defaults(&c, "llama3");
        c.llmc_filepath = LFIX "tiny_llama3.bin";
        c.input_bin = shards[s];
        c.batch_size = 4;
        c.sequence_length = 32;
        c.num_iteration = 3;
        c.learning_rate = 1e-3f;
        c.quiet = true;
        it_train_result r = {.losses = s ? b : a};
        CHECK_OK(it_train_run(&c, &r));
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
}

static void test_mixtral(void) {
    it_model *m = NULL;
    CHECK_OK(it_mixtral_load(MFIX "tiny_mixtral.bin", it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int64_t C = in->n_embd, V = in->vocab_size, H = in->ffn_hidden, E = in->n_expert;
    int64_t kvd = (int64_t)in->n_kv_head * (C / in->n_head);
    CHECK(E == 4 && in->router_topk == 2 && H == 48);
    exact_segment segs[2 + 64 * 20];
    int ns = 0;
    segs[ns++] = (exact_segment){"wte", V * C};
    for (int l = 0; l < in->n_layer; l++) {
        const char *names[7] = {"ln_1.w", "q", "k", "v", "attn.c_proj", "ln_2.w", "router"};
        int64_t sizes[7] = {C, C * C, kvd * C, kvd * C, C * C, C, E * C};
        for (int i = 0; i < 7; i++) {
            snprintf(segs[ns].name, sizeof segs[ns].name, "h%d.%s", l, names[i]);
            segs[ns++].n = sizes[i];
        }
        for (int e = 0; e < E; e++) {
            const char *en[3] = {"gate", "up", "down"};
            for (int i = 0; i < 3; i++) {
                snprintf(segs[ns].name, sizeof segs[ns].name, "h%d.expert%d.%s", l, e, en[i]);
                segs[ns++].n = H * C;
            }
        }
    }
    segs[ns++] = (exact_segment){"ln_f.w", C};
    segs[ns++] = (exact_segment){"lm_head", V * C};
    int64_t counts[64];
    it_model_expert_tokens(m, counts, 64, true);
    exact_debug_state(m, MFIX "debug_state.bin", segs, ns);
    /* Routing of the debug batch against PyTorch's. */
    int n = it_model_expert_tokens(m, counts, 64, true);
    CHECK(n == in->n_layer * E);
    FILE *f = fopen(MFIX "routing_step1.txt", "r");
    CHECK(f != NULL);
    char line[256];
    int matched = 0;
    while (f && fgets(line, sizeof line, f)) {
        int l, e;
        long long tok;
        if (sscanf(line, "layer %d expert %d tokens %lld", &l, &e, &tok) == 3 && l < in->n_layer && e < E) {
            CHECK_MSG(counts[l * E + e] == tok, "layer %d expert %d: %lld tokens, torch %lld", l, e,
                      (long long)counts[l * E + e], tok);
            matched++;
        }
    }
    if (f) fclose(f);
    CHECK(matched == n);
    exact_roundtrip(m, MFIX "tiny_mixtral.bin");
    it_model_free(m);
    CHECK(exact_trajectories("mixtral", MFIX "expected_losses.txt", MFIX "tiny_mixtral.bin", MFIX "tiny_shard.bin") >=
          3);
}

/* Copy `src` to a temp file with header int `field` set to `value` (and `extra` bytes
 * appended); returns the path (static buffer). */
static const char *patched(const char *src, int field, int32_t value, int extra) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/it_llama_bad_XXXXXX");
    int fd = mkstemp(path);
    close(fd);
    size_t n = 0;
    unsigned char *buf = exact_read_file(src, &n);
    if (field >= 0) memcpy(buf + 4 * field, &value, 4);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    for (int i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
    free(buf);
    return path;
}

static void expect_load_error(bool moe, const char *path, const char *substr) {
    it_model *m = NULL;
    CHECK_ERR(moe ? it_mixtral_load(path, it_device_cpu(), &m) : it_llama3_load(path, it_device_cpu(), &m),
              IT_ERR_FORMAT, substr);
    CHECK(m == NULL);
    unlink(path);
}

static void test_bad_input(void) {
    expect_load_error(false, patched(LFIX "tiny_llama3.bin", 6, 3, 0), "n_kv_head"); /* 4 heads, 3 kv heads */
    expect_load_error(false, patched(LFIX "tiny_llama3.bin", 0, 20240326, 0), "magic: expected 20240803");
    expect_load_error(false, patched(LFIX "tiny_llama3.bin", -1, 0, 4), "found 189060 bytes");
    expect_load_error(true, patched(MFIX "tiny_mixtral.bin", 15, 5, 0), "router_topk"); /* top-5 of 4 experts */
    expect_load_error(true, patched(MFIX "tiny_mixtral.bin", -1, 0, 1), "file size");   /* trailing byte */
    expect_load_error(true, patched(MFIX "tiny_mixtral.bin", 1, 1, 0), "version: expected 2");
    /* A token id >= vocab_size in a shard is caught before training. */
    uint32_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (uint32_t)(i % 7);
    toks[150] = 300; /* V = 300 */
    char shard[] = "/tmp/it_llama_shard_XXXXXX";
    int fd = mkstemp(shard);
    close(fd);
    CHECK_OK(it_shard_write(shard, toks, 200, true));
    it_train_config c;
    it_train_config_defaults(&c, "llama3");
    c.llmc_filepath = LFIX "tiny_llama3.bin";
    c.input_bin = shard;
    c.batch_size = 1;
    c.sequence_length = 16;
    c.quiet = true;
    it_status st = it_train_run(&c, NULL);
    CHECK(st != IT_OK && strstr(it_last_error(), "300") != NULL);
    printf("token id beyond the vocabulary: %s\n", it_last_error());
    unlink(shard);
}

int main(void) {
    test_llama3();
    test_mixtral();
    test_bad_input();
    return it_test_report("test_llama_exact");
}
