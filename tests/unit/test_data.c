/* Token shards, the data loader, tokenizer files and atomic writes. */
#include "core/afile.h"
#include "infinitrain/data.h"
#include "it_test.h"
#include "test_data_util.h"

/* ---- shards ---------------------------------------------------------------------------------- */

static void test_shard_round_trip(void) {
    const uint32_t narrow[] = {0, 1, 65535, 300, 50256, 7};
    const char *p = tmp_path("narrow.bin");
    CHECK_OK(it_shard_write(p, narrow, 6, false));
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    CHECK(n == 1024 + 6 * 2);
    CHECK(le32(raw) == 20240520 && le32(raw + 4) == 1 && le32(raw + 8) == 6);
    CHECK(raw[1024 + 4] == 0xFF && raw[1024 + 5] == 0xFF); /* 65535 little-endian */
    CHECK(raw[1024 + 6] == 0x2C && raw[1024 + 7] == 0x01); /* 300 = 0x012C */
    free(raw);
    it_shard *s = NULL;
    CHECK_OK(it_shard_open(p, &s));
    CHECK(it_shard_num_tokens(s) == 6);
    CHECK(it_shard_max_token(s) == 65535);
    CHECK(memcmp(it_shard_tokens(s), narrow, sizeof narrow) == 0);
    CHECK(strcmp(it_shard_path(s), p) == 0);
    it_shard_free(s);

    const uint32_t wide[] = {70000, 0, 4294967295u, 65536, 12};
    p = tmp_path("wide.bin");
    CHECK_OK(it_shard_write(p, wide, 5, true));
    raw = read_bytes(p, &n);
    CHECK(n == 1024 + 5 * 4);
    CHECK(le32(raw) == 20240801 && le32(raw + 4) == 7 && le32(raw + 8) == 5); /* llm.c's uint32 version */
    CHECK(le32(raw + 1024) == 70000);
    free(raw);
    CHECK_OK(it_shard_open(p, &s));
    CHECK(it_shard_num_tokens(s) == 5);
    CHECK(it_shard_max_token(s) == 4294967295u);
    CHECK(memcmp(it_shard_tokens(s), wide, sizeof wide) == 0);
    it_shard_free(s);

    /* Small ids in the wide format, and a large shard across the writer's 16384-token chunks. */
    int64_t big = 40000;
    uint32_t *t = malloc((size_t)big * sizeof *t);
    for (int64_t i = 0; i < big; i++) t[i] = (uint32_t)((i * 2654435761u) % 50257);
    for (int w = 0; w < 2; w++) {
        p = tmp_path(w ? "big_wide.bin" : "big_narrow.bin");
        CHECK_OK(it_shard_write(p, t, big, w == 1));
        CHECK_OK(it_shard_open(p, &s));
        CHECK(it_shard_num_tokens(s) == big);
        CHECK(s && memcmp(it_shard_tokens(s), t, (size_t)big * sizeof *t) == 0);
        it_shard_free(s);
    }
    free(t);

    /* Empty shard. */
    p = tmp_path("empty_shard.bin");
    CHECK_OK(it_shard_write(p, NULL, 0, false));
    CHECK_OK(it_shard_open(p, &s));
    CHECK(it_shard_num_tokens(s) == 0);
    CHECK(it_shard_max_token(s) == 0);
    it_shard_free(s);

    /* The uint16 format refuses ids > 65535 and leaves the old file alone. */
    p = tmp_path("narrow.bin");
    const uint32_t too_big[] = {1, 2, 65536, 3};
    CHECK_ERR_ALL(it_shard_write(p, too_big, 4, false), IT_ERR_INVALID_ARG, p, "position 2", "65535", "found 65536");
    CHECK_OK(it_shard_open(p, &s));
    CHECK(it_shard_num_tokens(s) == 6);
    it_shard_free(s);
    CHECK_ERR_ALL(it_shard_write(p, narrow, -1, false), IT_ERR_INVALID_ARG, "n_tokens", "found -1");
    CHECK_ERR_ALL(it_shard_write(tmp_path("no/such/dir/x.bin"), narrow, 6, false), IT_ERR_IO, "no/such/dir/x.bin",
                  "No such file or directory");
}

static void test_shard_malformed(void) {
    it_shard *s = (it_shard *)&s; /* must come back NULL */
    const char *p = tmp_path("bad_magic.bin");
    write_raw_shard(p, 12345, 1, 4, 8);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "magic", "20240520", "20240801", "found 12345");
    CHECK(s == NULL);

    p = tmp_path("bad_version.bin");
    write_raw_shard(p, 20240520, 2, 4, 8);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "version", "expected 1", "found 2");
    /* uint32 shards: llm.c's LLaMA-3 data is version 7, this project's older ones 1; nothing else */
    p = tmp_path("llmc_v7.bin");
    write_raw_shard(p, 20240801, 7, 4, 16);
    CHECK_OK(it_shard_open(p, &s));
    CHECK(s && it_shard_num_tokens(s) == 4);
    it_shard_free(s);
    s = (it_shard *)&s;
    p = tmp_path("u32_v2.bin");
    write_raw_shard(p, 20240801, 2, 4, 16);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "version", "expected 7 or 1", "found 2");
    CHECK(s == NULL);

    /* Count larger than the file: 100 uint16 tokens need 1224 bytes, the file has 1124. */
    p = tmp_path("short.bin");
    write_raw_shard(p, 20240520, 1, 100, 100);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "n_tokens 100", "1224 bytes", "found 1124 bytes");
    p = tmp_path("short32.bin");
    write_raw_shard(p, 20240801, 1, 100, 200);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "n_tokens 100", "uint32", "1424 bytes", "found 1224 bytes");

    p = tmp_path("trailing.bin");
    write_raw_shard(p, 20240520, 1, 10, 21);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "file size", "expected 1044 bytes", "found 1045",
                  "1 trailing");

    p = tmp_path("negative.bin");
    write_raw_shard(p, 20240520, 1, -5, 0);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "n_tokens", "expected >= 0", "found -5");

    p = tmp_path("truncated_header.bin");
    unsigned char half[500] = {0};
    put32(half, 20240520);
    write_bytes(p, half, sizeof half);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "header", "expected 1024 bytes", "500 bytes", "truncated");

    p = tmp_path("empty.bin");
    write_bytes(p, NULL, 0);
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_FORMAT, p, "header", "expected 1024 bytes", "0 bytes", "empty file");

    CHECK_ERR_ALL(it_shard_open(tmpdir, &s), IT_ERR_IO, tmpdir, "not a regular file", "Is a directory");
    p = tmp_path("does_not_exist.bin");
    CHECK_ERR_ALL(it_shard_open(p, &s), IT_ERR_IO, p, "No such file or directory");
    CHECK(s == NULL);
    CHECK_ERR_ALL(it_shard_open("", &s), IT_ERR_INVALID_ARG, "empty path");
}

/* The PyTorch-made fixture shard (tests/fixtures/gpt2/README.md): 4133 uint16 tokens of a
 * 257-token vocabulary. */
static void test_shard_fixture(void) {
    it_shard *s = NULL;
    CHECK_OK(it_shard_open(IT_SOURCE_DIR "/tests/fixtures/gpt2/tiny_shard.bin", &s));
    CHECK(it_shard_num_tokens(s) == 4133);
    CHECK(it_shard_max_token(s) < 257);
    it_shard_free(s);
}

/* ---- loader ---------------------------------------------------------------------------------- */

/* Shard of n tokens t[i] = 3i + 1. */
static const char *ramp_shard(const char *name, int64_t n) {
    uint32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)(3 * i + 1);
    const char *p = tmp_path(name);
    CHECK_OK(it_shard_write(p, t, n, false));
    free(t);
    return p;
}

/* x, y of batch b for B, T over the ramp: x[r][c] = t[(b*B + r)*T + c], y one further. */
static int batch_is(const int32_t *x, const int32_t *y, int64_t b, int64_t B, int64_t T) {
    for (int64_t r = 0; r < B; r++)
        for (int64_t c = 0; c < T; c++) {
            int64_t i = (b * B + r) * T + c;
            if (x[r * T + c] != 3 * i + 1 || y[r * T + c] != 3 * (i + 1) + 1) return 0;
        }
    return 1;
}

static void test_loader(void) {
    /* n = 103, T = 5: floor(103/5) - 1 = 19 samples; B = 2: floor(19/2) = 9 batches. */
    const char *p = ramp_shard("ramp103.bin", 103);
    it_loader *l = NULL;
    CHECK_OK(it_loader_new(p, 2, 5, 0, 1, &l));
    if (!l) return;
    CHECK(it_loader_num_batches(l) == 9);
    CHECK(it_loader_num_tokens(l) == 103);
    int32_t x[10], y[10];
    /* Batch 0 by hand: samples 0, 1 -> x = t[0..10), y = t[1..11). */
    const int32_t x0[10] = {1, 4, 7, 10, 13, 16, 19, 22, 25, 28}, y0[10] = {4, 7, 10, 13, 16, 19, 22, 25, 28, 31};
    CHECK_OK(it_loader_next(l, x, y));
    CHECK(memcmp(x, x0, sizeof x0) == 0 && memcmp(y, y0, sizeof y0) == 0);
    /* Batch 1: samples 2, 3 -> row 1 (sample 3) is t[15..20) = 46, 49, 52, 55, 58; y = 49..61. */
    CHECK_OK(it_loader_next(l, x, y));
    CHECK(x[0] == 31 && x[4] == 43 && x[5] == 46 && x[9] == 58);
    CHECK(y[0] == 34 && y[5] == 49 && y[9] == 61);
    CHECK(it_loader_step(l) == 2);
    for (int64_t b = 2; b < 9; b++) {
        CHECK_OK(it_loader_next(l, x, y));
        CHECK_MSG(batch_is(x, y, b, 2, 5), "batch %lld", (long long)b);
    }
    /* Batch 8 ends at x = t[89] = 268, y = t[90] = 271; then back to batch 0. */
    CHECK(x[9] == 268 && y[9] == 271);
    CHECK_OK(it_loader_next(l, x, y));
    CHECK(memcmp(x, x0, sizeof x0) == 0 && memcmp(y, y0, sizeof y0) == 0);
    it_loader_reset(l);
    CHECK(it_loader_step(l) == 0);
    CHECK_OK(it_loader_next(l, x, y));
    CHECK(x[0] == 1 && y[9] == 31);
    it_loader_set_step(l, 7);
    CHECK_OK(it_loader_next(l, x, y));
    CHECK(batch_is(x, y, 7, 2, 5));

    /* Vocab check: 3i + 1 >= 100 first at i = 33 (id 100). */
    CHECK_OK(it_loader_check_vocab(l, 308)); /* max id 3*102 + 1 = 307 */
    CHECK_ERR_ALL(it_loader_check_vocab(l, 307), IT_ERR_FORMAT, p, "position 102", "found 307", "vocab size 307");
    CHECK_ERR_ALL(it_loader_check_vocab(l, 100), IT_ERR_FORMAT, p, "position 33", "found 100", "vocab size 100");
    it_loader_free(l);

    /* Rank striding: world 2 over 9 batches; g = step*2 + rank, batch g mod 9. */
    it_loader *r0 = NULL, *r1 = NULL;
    CHECK_OK(it_loader_new(p, 2, 5, 0, 2, &r0));
    CHECK_OK(it_loader_new(p, 2, 5, 1, 2, &r1));
    if (r0 && r1) {
        const int64_t want0[] = {0, 2, 4, 6, 8, 1, 3, 5, 7, 0}, want1[] = {1, 3, 5, 7, 0, 2, 4, 6, 8, 1};
        for (int k = 0; k < 10; k++) {
            CHECK_OK(it_loader_next(r0, x, y));
            CHECK_MSG(batch_is(x, y, want0[k], 2, 5), "rank 0 step %d: expected batch %lld, x[0] = %d", k,
                      (long long)want0[k], x[0]);
            CHECK_OK(it_loader_next(r1, x, y));
            CHECK_MSG(batch_is(x, y, want1[k], 2, 5), "rank 1 step %d: expected batch %lld, x[0] = %d", k,
                      (long long)want1[k], x[0]);
        }
    }
    it_loader_free(r0);
    it_loader_free(r1);
    /* world 4, rank 3 over 9 batches: 3, 7, 11 mod 9 = 2, 15 mod 9 = 6. */
    CHECK_OK(it_loader_new(p, 2, 5, 3, 4, &l));
    if (l) {
        const int64_t want[] = {3, 7, 2, 6, 1};
        for (int k = 0; k < 5; k++) {
            CHECK_OK(it_loader_next(l, x, y));
            CHECK_MSG(batch_is(x, y, want[k], 2, 5), "world 4 rank 3 step %d: expected batch %lld", k,
                      (long long)want[k]);
        }
    }
    it_loader_free(l);

    /* T = 1, B = 1: every token but the last is an x. n = 4: 3 samples, 3 batches. */
    p = ramp_shard("ramp4.bin", 4);
    CHECK_OK(it_loader_new(p, 1, 1, 0, 1, &l));
    CHECK(it_loader_num_batches(l) == 3);
    it_loader_free(l);

    /* Exactly one batch: (B+1)*T = 15 tokens; 14 are too few. */
    p = ramp_shard("ramp15.bin", 15);
    CHECK_OK(it_loader_new(p, 2, 5, 0, 1, &l));
    CHECK(it_loader_num_batches(l) == 1);
    if (l) {
        CHECK_OK(it_loader_next(l, x, y));
        CHECK(batch_is(x, y, 0, 2, 5) && y[9] == 31);
        CHECK_OK(it_loader_next(l, x, y));
        CHECK(batch_is(x, y, 0, 2, 5));
    }
    it_loader_free(l);
    p = ramp_shard("ramp14.bin", 14);
    l = (it_loader *)&l;
    CHECK_ERR_ALL(it_loader_new(p, 2, 5, 0, 1, &l), IT_ERR_FORMAT, p, "(B+1)*T = 15", "found 14");
    CHECK(l == NULL);
    /* 19 tokens, T = 5: floor(19/5) - 1 = 2 samples, B = 3 needs 20. */
    p = ramp_shard("ramp19.bin", 19);
    CHECK_ERR_ALL(it_loader_new(p, 3, 5, 0, 1, &l), IT_ERR_FORMAT, p, "(B+1)*T = 20", "found 19");

    CHECK_ERR_ALL(it_loader_new(p, 0, 5, 0, 1, &l), IT_ERR_INVALID_ARG, "B=0");
    CHECK_ERR_ALL(it_loader_new(p, 1, -2, 0, 1, &l), IT_ERR_INVALID_ARG, "T=-2");
    CHECK_ERR_ALL(it_loader_new(p, 1, 1, 2, 2, &l), IT_ERR_INVALID_ARG, "rank 2 world 2");
    CHECK_ERR_ALL(it_loader_new(tmp_path("missing.bin"), 1, 1, 0, 1, &l), IT_ERR_IO, "missing.bin");
}

/* ---- tokenizer files ------------------------------------------------------------------------- */

static void test_tokenizer(void) {
    char long_tok[255];
    memset(long_tok, 'z', sizeof long_tok);
    const char *toks[] = {"a", "bc", "<|endoftext|>", long_tok, "x\0y"};
    const size_t lens[] = {1, 2, 13, 255, 3};
    const char *p = tmp_path("tok_v2.bin");
    CHECK_OK(it_tokenizer_write(p, IT_TOKENIZER_MAGIC_GPT2, 5, 2, toks, lens));
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    CHECK(n == 1024 + 5 + 1 + 2 + 13 + 255 + 3);
    CHECK(le32(raw) == 20240328 && le32(raw + 4) == 2 && le32(raw + 8) == 5 && le32(raw + 12) == 2);
    CHECK(raw[1024] == 1 && raw[1025] == 'a' && raw[1026] == 2);
    free(raw);
    it_tokenizer *t = NULL;
    CHECK_OK(it_tokenizer_load(p, &t));
    CHECK(it_tokenizer_vocab_size(t) == 5);
    CHECK(it_tokenizer_eot(t) == 2);
    for (uint32_t i = 0; i < 5; i++) {
        size_t len = 99;
        const char *d = it_tokenizer_decode(t, i, &len);
        CHECK_MSG(d && len == lens[i] && memcmp(d, toks[i], len) == 0 && d[len] == '\0', "token %u", i);
    }
    size_t len = 7;
    CHECK(it_tokenizer_decode(t, 5, &len) == NULL && len == 0);
    it_tokenizer_free(t);

    /* Version 1: eot implied by the magic (GPT-2 50256, LLaMA-3 128001). */
    int64_t big = 128002;
    const char **bt = malloc((size_t)big * sizeof *bt);
    size_t *bl = malloc((size_t)big * sizeof *bl);
    char *blob = malloc((size_t)big * 8);
    for (int64_t i = 0; i < big; i++) {
        bt[i] = blob + i * 8;
        bl[i] = (size_t)snprintf(blob + i * 8, 8, "%lld", (long long)i);
    }
    p = tmp_path("tok_v1_gpt2.bin");
    CHECK_OK(it_tokenizer_write_v1(p, IT_TOKENIZER_MAGIC_GPT2, 50257, bt, bl));
    raw = read_bytes(p, &n);
    CHECK(le32(raw + 4) == 1 && le32(raw + 12) == 0);
    free(raw);
    CHECK_OK(it_tokenizer_load(p, &t));
    CHECK(it_tokenizer_vocab_size(t) == 50257 && it_tokenizer_eot(t) == 50256);
    const char *d = it_tokenizer_decode(t, 12345, &len);
    CHECK(d && len == 5 && memcmp(d, "12345", 5) == 0);
    it_tokenizer_free(t);
    p = tmp_path("tok_v1_llama3.bin");
    CHECK_OK(it_tokenizer_write_v1(p, IT_TOKENIZER_MAGIC_LLAMA3, big, bt, bl));
    CHECK_OK(it_tokenizer_load(p, &t));
    CHECK(it_tokenizer_vocab_size(t) == 128002 && it_tokenizer_eot(t) == 128001);
    d = it_tokenizer_decode(t, 128001, &len);
    CHECK(d && len == 6 && memcmp(d, "128001", 6) == 0);
    it_tokenizer_free(t);
    /* v2 with the LLaMA-3 magic and its own eot. */
    p = tmp_path("tok_v2_llama3.bin");
    CHECK_OK(it_tokenizer_write(p, IT_TOKENIZER_MAGIC_LLAMA3, 1000, 999, bt, bl));
    CHECK_OK(it_tokenizer_load(p, &t));
    CHECK(it_tokenizer_vocab_size(t) == 1000 && it_tokenizer_eot(t) == 999);
    it_tokenizer_free(t);
    CHECK_ERR_ALL(it_tokenizer_write_v1(p, IT_TOKENIZER_MAGIC_GPT2, 1000, bt, bl), IT_ERR_INVALID_ARG, "50256",
                  "found 1000");
    free(bt);
    free(bl);
    free(blob);

    /* Writer refusals. */
    const size_t bad_lens[] = {1, 0};
    const char *bad_toks[] = {"a", ""};
    p = tmp_path("tok_bad.bin");
    CHECK_ERR_ALL(it_tokenizer_write(p, IT_TOKENIZER_MAGIC_GPT2, 2, 0, bad_toks, bad_lens), IT_ERR_INVALID_ARG, p,
                  "token 1", "1..255", "found 0");
    CHECK_ERR_ALL(it_tokenizer_write(p, IT_TOKENIZER_MAGIC_GPT2, 5, 5, toks, lens), IT_ERR_INVALID_ARG, "eot", "0..4",
                  "found 5");
    CHECK_ERR_ALL(it_tokenizer_write(p, 1234, 5, 2, toks, lens), IT_ERR_INVALID_ARG, "magic", "found 1234");

    /* Malformed files, derived from a good one. */
    unsigned char good[1024 + 8] = {0};
    put32(good, 20240328);
    put32(good + 4, 2);
    put32(good + 8, 3);
    put32(good + 12, 2);
    memcpy(good + 1024, "\1a\2bc\1d", 7); /* 3 tokens, 7 bytes; good[1031] spare for "trailing" */
    unsigned char b[sizeof good];
    t = (it_tokenizer *)&t;
    p = tmp_path("tok_ok.bin");
    write_bytes(p, good, 1031);
    CHECK_OK(it_tokenizer_load(p, &t));
    d = it_tokenizer_decode(t, 2, &len);
    CHECK(d && len == 1 && d[0] == 'd');
    it_tokenizer_free(t);

    memcpy(b, good, sizeof b);
    put32(b, 20240326);
    p = tmp_path("tok_magic.bin");
    write_bytes(p, b, 1031);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "magic", "20240328", "20240801", "found 20240326");
    CHECK(t == NULL);
    memcpy(b, good, sizeof b);
    put32(b + 4, 3);
    p = tmp_path("tok_version.bin");
    write_bytes(p, b, 1031);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "version", "1 or 2", "found 3");
    memcpy(b, good, sizeof b);
    put32(b + 12, 3);
    p = tmp_path("tok_eot.bin");
    write_bytes(p, b, 1031);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "eot_token", "0..2", "found 3");
    p = tmp_path("tok_trunc.bin");
    write_bytes(p, good, 1030); /* last token's byte missing */
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "token 2", "expected 1 bytes", "found 0");
    p = tmp_path("tok_trailing.bin");
    write_bytes(p, good, 1032);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "file size", "expected 1031", "found 1032", "1 trailing");
    memcpy(b, good, sizeof b);
    put32(b + 8, 100);
    p = tmp_path("tok_vocab.bin");
    write_bytes(p, b, 1031);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "vocab_size 100", "found 7");
    memcpy(b, good, sizeof b);
    b[1026] = 0; /* token 1 of length 0 */
    p = tmp_path("tok_zero.bin");
    write_bytes(p, b, 1031);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "token 1", "1..255", "found 0");
    p = tmp_path("tok_header.bin");
    write_bytes(p, good, 100);
    CHECK_ERR_ALL(it_tokenizer_load(p, &t), IT_ERR_FORMAT, p, "header", "expected 1024", "100 bytes");
    CHECK_ERR_ALL(it_tokenizer_load(tmpdir, &t), IT_ERR_IO, tmpdir, "not a regular file");
    CHECK_ERR_ALL(it_tokenizer_load(tmp_path("nope.bin"), &t), IT_ERR_IO, "nope.bin", "No such file");
    CHECK(t == NULL);
}

/* ---- atomic files ---------------------------------------------------------------------------- */

static void test_afile(void) {
    const char *p = tmp_path("atomic.txt");
    write_bytes(p, "old", 3);
    it_afile *f = NULL;
    CHECK_OK(it_afile_open(p, &f));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s", it_afile_temp_path(f));
    char want_prefix[600];
    snprintf(want_prefix, sizeof want_prefix, "%s.tmp.%ld.", p, (long)getpid());
    CHECK(strncmp(tmp, want_prefix, strlen(want_prefix)) == 0);
    CHECK(access(tmp, F_OK) == 0);
    CHECK_OK(it_afile_write(f, "new contents", 12));
    it_afile_abort(f);
    size_t n;
    unsigned char *b = read_bytes(p, &n);
    CHECK(n == 3 && memcmp(b, "old", 3) == 0);
    free(b);
    CHECK(access(tmp, F_OK) != 0); /* temp removed */

    CHECK_OK(it_afile_open(p, &f));
    snprintf(tmp, sizeof tmp, "%s", it_afile_temp_path(f));
    CHECK_OK(it_afile_write(f, "new ", 4));
    CHECK_OK(it_afile_write(f, "contents", 8));
    /* Until the commit, readers see the old file. */
    b = read_bytes(p, &n);
    CHECK(n == 3 && memcmp(b, "old", 3) == 0);
    free(b);
    CHECK_OK(it_afile_commit(f));
    b = read_bytes(p, &n);
    CHECK(n == 12 && memcmp(b, "new contents", 12) == 0);
    free(b);
    CHECK(access(tmp, F_OK) != 0);

    /* Two writers of one file get distinct temp files. */
    it_afile *g = NULL;
    CHECK_OK(it_afile_open(p, &f));
    CHECK_OK(it_afile_open(p, &g));
    if (f && g) CHECK(strcmp(it_afile_temp_path(f), it_afile_temp_path(g)) != 0);
    it_afile_abort(f);
    it_afile_abort(g);

    f = (it_afile *)&f;
    CHECK_ERR_ALL(it_afile_open(tmp_path("nodir/x"), &f), IT_ERR_IO, "nodir/x", "No such file or directory");
    CHECK(f == NULL);
    /* Renaming over a directory fails at commit: the directory stays, the temp goes. */
    const char *dirp = tmp_path("a_dir");
    mkdir(dirp, 0755);
    CHECK_OK(it_afile_open(dirp, &f));
    if (f) {
        snprintf(tmp, sizeof tmp, "%s", it_afile_temp_path(f));
        CHECK_ERR_ALL(it_afile_commit(f), IT_ERR_IO, dirp, "renaming", "Is a directory");
        CHECK(access(tmp, F_OK) != 0);
    }
    struct stat st;
    CHECK(stat(dirp, &st) == 0 && S_ISDIR(st.st_mode));
}

int main(void) {
    make_tmpdir("it_test_data");
    test_shard_round_trip();
    test_shard_malformed();
    test_shard_fixture();
    test_loader();
    test_tokenizer();
    test_afile();
    remove_tmpdir();
    return it_test_report("test_data");
}
