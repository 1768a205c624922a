/* safetensors read and write (include/infinitrain/hf.h): the canonical bytes the writer makes,
 * the reader's values and conversions, sharded directories with their index, and one named
 * refusal for each way a file can be wrong. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infinitrain/hf.h"
#include "it_test.h"

static char tmpdir[256];

static const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* A file of header `json` (its length as given) followed by `data_n` bytes of data. */
static const char *raw(const char *name, const char *json, size_t data_n) {
    const char *path = tmp(name);
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(json);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(json, 1, n, f);
    for (size_t i = 0; i < data_n; i++) fputc((int)(i * 7 % 251), f);
    fclose(f);
    return path;
}

/* ---------------------------------------------------------------- writing, then reading */

static const float vb[6] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-3f};
static const uint16_t va[4] = {0x3f80, 0xc000, 0x0001, 0x7f80}; /* bf16 1, -2, the smallest subnormal, +inf */
static const uint16_t vc[2] = {0x3c00, 0xfbff};                 /* fp16 1, -65504 */

static it_status fill3(void *ctx, int i, void *dst, size_t nbytes) {
    (void)ctx;
    const void *src = i == 0 ? (const void *)vb : i == 1 ? (const void *)va : (const void *)vc;
    memcpy(dst, src, nbytes);
    return IT_OK;
}

static void test_write_read(void) {
    it_safetensors_spec t[3] = {
        {"b.weight", IT_DTYPE_FP32, 2, {2, 3}}, {"a", IT_DTYPE_BF16, 1, {4}}, {"c", IT_DTYPE_FP16, 2, {1, 2}}};
    const char *path = tmp("one.safetensors");
    CHECK_OK(it_safetensors_write(path, t, 3, fill3, NULL));
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | b[i];
    /* the canonical header: __metadata__ first, names in byte order, data in that order */
    const char *want =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
        "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
        "\"c\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[32,36]}}";
    CHECK((8 + h) % 8 == 0);
    CHECK(h >= strlen(want) && memcmp(b + 8, want, strlen(want)) == 0);
    for (size_t i = strlen(want); i < h; i++) CHECK(b[8 + i] == ' ');
    CHECK(n == 8 + h + 36);
    CHECK(memcmp(b + 8 + h, va, 8) == 0 && memcmp(b + 8 + h + 8, vb, 24) == 0 && memcmp(b + 8 + h + 32, vc, 4) == 0);
    free(b);

    it_safetensors *st = NULL;
    CHECK_OK(it_safetensors_open(path, &st));
    CHECK(it_safetensors_count(st) == 3);
    CHECK(strcmp(it_safetensors_at(st, 0)->name, "a") == 0 && strcmp(it_safetensors_at(st, 2)->name, "c") == 0);
    CHECK(it_safetensors_metadata(st, "format") && strcmp(it_safetensors_metadata(st, "format"), "pt") == 0);
    const it_safetensors_tensor *tb = it_safetensors_find(st, "b.weight");
    CHECK(tb && tb->dtype == IT_DTYPE_FP32 && tb->ndim == 2 && tb->shape[0] == 2 && tb->shape[1] == 3 &&
          tb->numel == 6);
    float got[6];
    CHECK_OK(it_safetensors_read_f32(tb, 0, 6, got));
    CHECK(memcmp(got, vb, sizeof vb) == 0);
    CHECK_OK(it_safetensors_read_f32(it_safetensors_find(st, "a"), 0, 4, got));
    CHECK(got[0] == 1.0f && got[1] == -2.0f && got[2] == 9.18354962e-41f && isinf(got[3]) && got[3] > 0);
    CHECK_OK(it_safetensors_read_f32(it_safetensors_find(st, "c"), 1, 1, got));
    CHECK(got[0] == -65504.0f);
    CHECK_ERR(it_safetensors_read_f32(tb, 4, 3, got), IT_ERR_INVALID_ARG, "outside its 6");
    CHECK(it_safetensors_find(st, "missing") == NULL);
    it_safetensors_close(st);

    /* written again from the same specs: the same bytes */
    const char *again = tmp("again.safetensors");
    CHECK_OK(it_safetensors_write(again, t, 3, fill3, NULL));
    size_t n2;
    b = slurp(path, &n);
    unsigned char *b2 = slurp(again, &n2);
    CHECK(n == n2 && memcmp(b, b2, n) == 0);
    free(b);
    free(b2);

    it_safetensors_spec dup[2] = {{"x", IT_DTYPE_FP32, 1, {1}}, {"x", IT_DTYPE_FP32, 1, {1}}};
    CHECK_ERR(it_safetensors_write(tmp("dup.safetensors"), dup, 2, fill3, NULL), IT_ERR_INVALID_ARG, "named twice");
}

/* ---------------------------------------------------------------- directories */

static it_status fill_seq(void *ctx, int i, void *dst, size_t nbytes) {
    (void)ctx;
    float *f = dst;
    for (size_t j = 0; j < nbytes / 4; j++) f[j] = (float)(100 * i + (int)j);
    return IT_OK;
}

static void test_dir(void) {
    it_safetensors_spec t[5];
    char names[5][16];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "t%d", 4 - i); /* written out of order */
        t[i] = (it_safetensors_spec){names[i], IT_DTYPE_FP32, 1, {10}};
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp("sharded"));
    int shards = 0;
    /* 40 bytes each, 100 per shard: two per shard, then one */
    CHECK_OK(it_safetensors_write_dir(dir, t, 5, 100, fill_seq, NULL, &shards));
    CHECK(shards == 3);
    size_t n;
    unsigned char *idx = slurp(tmp("sharded/model.safetensors.index.json"), &n);
    CHECK(idx && strstr((char *)idx, "\"total_size\": 200") &&
          strstr((char *)idx, "\"t0\": \"model-00001-of-00003.safetensors\"") &&
          strstr((char *)idx, "\"t4\": \"model-00003-of-00003.safetensors\""));
    free(idx);
    it_safetensors *st = NULL;
    CHECK_OK(it_safetensors_open(dir, &st));
    CHECK(it_safetensors_count(st) == 5);
    float v[10];
    const it_safetensors_tensor *t2 = it_safetensors_find(st, "t2"); /* names[2], written as tensor 2 */
    CHECK(t2 && strstr(t2->file, "model-00002-of-00003.safetensors"));
    CHECK_OK(it_safetensors_read_f32(t2, 0, 10, v));
    CHECK(v[0] == 200.0f && v[9] == 209.0f);
    it_safetensors_close(st);

    /* the index wins over nothing else: a missing shard is named */
    CHECK(rename(tmp("sharded/model-00002-of-00003.safetensors"), tmp("moved")) == 0);
    CHECK_ERR(it_safetensors_open(dir, &st), IT_ERR_NOT_FOUND,
              "names shard 'model-00002-of-00003.safetensors', which is missing");
    CHECK(rename(tmp("moved"), tmp("sharded/model-00002-of-00003.safetensors")) == 0);

    /* an index naming a tensor its shard lacks */
    FILE *f = fopen(tmp("sharded/model.safetensors.index.json"), "w");
    fputs("{\"weight_map\": {\"t0\": \"model-00001-of-00003.safetensors\", \"nope\": "
          "\"model-00001-of-00003.safetensors\"}}",
          f);
    fclose(f);
    CHECK_ERR(it_safetensors_open(dir, &st), IT_ERR_FORMAT, "'nope' is in the weight_map but in no shard");
    f = fopen(tmp("sharded/model.safetensors.index.json"), "w");
    fputs("{\"weight_map\": {\"t0\": \"../x.safetensors\"}}", f);
    fclose(f);
    CHECK_ERR(it_safetensors_open(dir, &st), IT_ERR_FORMAT, "is not a file name in the directory");

    /* rewritten unsharded: model.safetensors, and the stale index removed */
    CHECK_OK(it_safetensors_write_dir(dir, t, 5, 0, fill_seq, NULL, &shards));
    CHECK(shards == 1 && access(tmp("sharded/model.safetensors.index.json"), F_OK) != 0);
    CHECK(access(tmp("sharded/model-00001-of-00003.safetensors"), F_OK) != 0); /* old shards removed */
    CHECK_OK(it_safetensors_open(dir, &st));
    CHECK(it_safetensors_count(st) == 5);
    it_safetensors_close(st);
    CHECK_ERR(it_safetensors_open(tmp("no-such-dir-or-file"), &st), IT_ERR_IO, "cannot open");
    mkdir(tmp("empty"), 0777);
    CHECK_ERR(it_safetensors_open(tmp("empty"), &st), IT_ERR_NOT_FOUND, "no model.safetensors");
}

/* ---------------------------------------------------------------- refusals */

static void test_refusals(void) {
    it_safetensors *st = NULL;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CHECK_OK(it_safetensors_open(raw("ok", ok, 8), &st));
    it_safetensors_close(st);
    st = NULL;
    static const struct {
        const char *json;
        size_t data;
        const char *why;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "truncated: the tensors need 8 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "4 bytes of data after the last"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "make 12 bytes, data_offsets [0, 8]"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "dtype \"Q4\" is not a safetensors dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[8,16]}}",
         16, "duplicate object key"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[4,12]}}",
         12, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[12,20]}}",
         20, "a gap of 4 bytes before tensor 'b'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0] is not a size"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         "overflows"},
        {"{\"a\":[1,2]}", 0, "not a JSON object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "is not a string"},
        {"[1]", 0, "header: not a JSON object"},
        {"{\"a\":", 0, "header JSON"},
        {"{}x", 0, "bytes after the JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        const char *p = raw(name, bad[i].json, bad[i].data);
        it_status s = it_safetensors_open(p, &st);
        CHECK_MSG(s == IT_ERR_FORMAT && strstr(it_last_error(), bad[i].why), "case %zu: status %d, '%s'", i, s,
                  it_last_error());
        CHECK(st == NULL);
    }
    /* a header length past the end of the file, and a file shorter than the length itself */
    const char *p = tmp("long");
    FILE *f = fopen(p, "wb");
    unsigned char len[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    fwrite(len, 1, 8, f);
    fputs("{}", f);
    fclose(f);
    CHECK_ERR(it_safetensors_open(p, &st), IT_ERR_FORMAT, "header length 65535 runs past the file's 10 bytes");
    f = fopen(p, "wb");
    fputs("abc", f);
    fclose(f);
    CHECK_ERR(it_safetensors_open(p, &st), IT_ERR_FORMAT, "shorter than the 8-byte header length");
}

static void test_sizes(void) {
    size_t b = 0;
    CHECK_OK(it_hf_parse_size("5GB", &b));
    CHECK(b == 5000000000u);
    CHECK_OK(it_hf_parse_size("500MB", &b));
    CHECK(b == 500000000u);
    CHECK_OK(it_hf_parse_size("2GiB", &b));
    CHECK(b == 2147483648u);
    CHECK_OK(it_hf_parse_size("1000", &b));
    CHECK(b == 1000);
    CHECK_ERR(it_hf_parse_size("5 parsecs", &b), IT_ERR_INVALID_ARG, "unknown unit");
    CHECK_ERR(it_hf_parse_size("GB", &b), IT_ERR_INVALID_ARG, "expected a number");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/it_test_safetensors_%d", (int)getpid());
    mkdir(tmpdir, 0777);
    test_write_read();
    test_dir();
    test_refusals();
    test_sizes();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return it_test_report("test_safetensors");
}
