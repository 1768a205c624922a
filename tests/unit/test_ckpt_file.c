/* InfiniTrain's .ckpt tensor file (src/train/ckpt_file.h): the writer's exact bytes, a round
 * trip of every kind of entry, it_ckpt_find / it_ckpt_expect, and each refusal of the reader
 * with its message. Malformed files are built byte by byte here, so each case changes one field
 * of an otherwise valid file. */
#include "train/ckpt_file.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "it_test.h"

static char tmp_dir[] = "/tmp/it_ckpt_file_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "%s/%s", tmp_dir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

/* ---- a byte builder: a file in the format, one little-endian field at a time */

typedef struct bytes {
    unsigned char b[8192];
    size_t n;
} bytes;

static void put(bytes *w, const void *p, size_t n) {
    if (w->n + n > sizeof w->b) abort();
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void put_u32(bytes *w, uint32_t x) {
    unsigned char b[4] = {(unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16),
                          (unsigned char)(x >> 24)};
    put(w, b, 4);
}
static void put_u64(bytes *w, uint64_t x) {
    put_u32(w, (uint32_t)x);
    put_u32(w, (uint32_t)(x >> 32));
}
static void put_u8(bytes *w, uint8_t x) { put(w, &x, 1); }

static void header(bytes *w, uint32_t magic, uint32_t version, uint32_t count) {
    w->n = 0;
    put_u32(w, magic);
    put_u32(w, version);
    put_u32(w, count);
}

/* One entry: the name (len bytes of it), dtype, dims, an nbytes field and `data_len` data bytes. */
static void entry(bytes *w, const char *name, uint32_t len, int8_t dtype, uint32_t ndim, const int64_t *dims,
                  uint64_t nbytes, size_t data_len) {
    put_u32(w, len);
    put(w, name, len);
    put_u8(w, (uint8_t)dtype);
    put_u32(w, ndim);
    for (uint32_t d = 0; d < ndim; d++) put_u64(w, (uint64_t)dims[d]);
    put_u64(w, nbytes);
    for (size_t i = 0; i < data_len; i++) put_u8(w, (uint8_t)(i * 7 + 1));
}

/* A valid file of two entries: "b" fp32 [2, 3] and "a" int64 scalar. */
static void valid_two(bytes *w) {
    header(w, IT_CKPT_MAGIC, 1, 2);
    entry(w, "b", 1, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, 24, 24);
    entry(w, "a", 1, IT_DTYPE_I64, 0, NULL, 8, 8);
}

/* Opening `w` must fail with `status` and a message naming the file and holding `substr`. */
static void refused(const char *what, const bytes *w, it_status status, const char *substr) {
    const char *path = tmp_path(what);
    write_bytes(path, w->b, w->n);
    it_ckpt *c = (it_ckpt *)1;
    it_error_clear();
    it_status st = it_ckpt_open(path, &c);
    CHECK_MSG(st == status && strstr(it_last_error(), substr) && strstr(it_last_error(), path),
              "%s: expected %s with \"%s\" naming the file, got %s: \"%s\"", what, it_status_name(status), substr,
              it_status_name(st), it_last_error());
    CHECK_MSG(c == NULL, "%s: *out is not NULL after a refusal", what);
    CHECK_MSG(strchr(it_last_error(), '\n') == NULL, "%s: message spans lines: %s", what, it_last_error());
    if (st == IT_OK) it_ckpt_close(c);
    unlink(path);
}

/* Opening `w` must succeed with `count` entries, each inside the file. */
static void accepted(const char *what, const bytes *w, size_t count) {
    const char *path = tmp_path(what);
    write_bytes(path, w->b, w->n);
    it_ckpt *c = NULL;
    CHECK_OK(it_ckpt_open(path, &c));
    CHECK_MSG(c && it_ckpt_count(c) == count, "%s: %zu entries, expected %zu", what, c ? it_ckpt_count(c) : 0, count);
    for (size_t i = 0; c && i < it_ckpt_count(c); i++)
        CHECK(it_ckpt_at(c, i)->offset + it_ckpt_at(c, i)->nbytes <= w->n);
    it_ckpt_close(c);
    unlink(path);
}

/* ---- round trip */

static void test_round_trip(void) {
    float w2d[2][3] = {{1.5f, -2.0f, 3.25f}, {0.0f, -0.0f, 1e-30f}};
    int64_t t = -1234567890123LL;
    uint16_t bf[4] = {0x3F80, 0xBF80, 0x7F80, 0x0001}; /* 1, -1, +inf, the smallest subnormal */
    it_ckpt_item items[] = {
        {"transformer.wte.weight", IT_DTYPE_FP32, 2, {2, 3}, w2d},
        {"adam.t", IT_DTYPE_I64, 0, {0}, &t},
        {"h.0.bf16", IT_DTYPE_BF16, 1, {4}, bf},
        {"empty", IT_DTYPE_FP32, 3, {3, 0, 5}, NULL},
    };
    const char *path = tmp_path("round_trip.ckpt");
    uint32_t crc = 0, crc2 = 0;
    uint64_t size = 0, size2 = 0;
    CHECK_OK(it_ckpt_write(path, items, 4, &crc, &size));
    /* header 12, entries (4 + L + 1 + 4 + 8 ndim + 8 + data) */
    uint64_t want = 12 + (4 + 22 + 1 + 4 + 16 + 8 + 24) + (4 + 6 + 1 + 4 + 0 + 8 + 8) + (4 + 8 + 1 + 4 + 8 + 8 + 8) +
                    (4 + 5 + 1 + 4 + 24 + 8 + 0);
    CHECK_MSG(size == want, "size %llu, expected %llu", (unsigned long long)size, (unsigned long long)want);
    CHECK_OK(it_file_crc32(path, &crc2, &size2));
    CHECK_MSG(crc == crc2 && size == size2, "writer crc %08x size %llu, the file's %08x %llu", crc,
              (unsigned long long)size, crc2, (unsigned long long)size2);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == size);

    it_ckpt *c = NULL;
    CHECK_OK(it_ckpt_open(path, &c));
    if (!c) return;
    CHECK(strcmp(it_ckpt_path(c), path) == 0);
    CHECK(it_ckpt_count(c) == 4);
    const char *sorted[] = {"adam.t", "empty", "h.0.bf16", "transformer.wte.weight"};
    for (size_t i = 0; i < 4; i++) {
        const it_ckpt_entry *e = it_ckpt_at(c, i);
        CHECK_MSG(e && strcmp(e->name, sorted[i]) == 0, "entry %zu is '%s', expected '%s'", i, e ? e->name : "(none)",
                  sorted[i]);
        if (i) CHECK(e->offset > it_ckpt_at(c, i - 1)->offset); /* written in name order too */
        CHECK(e->offset + e->nbytes <= size);
    }
    CHECK(it_ckpt_at(c, 4) == NULL);

    const it_ckpt_entry *e = it_ckpt_find(c, "transformer.wte.weight");
    CHECK(e && e->dtype == IT_DTYPE_FP32 && e->ndim == 2 && e->dims[0] == 2 && e->dims[1] == 3 && e->nbytes == 24);
    float got2d[2][3];
    if (e) CHECK_OK(it_ckpt_read(c, e, got2d, sizeof got2d));
    CHECK(memcmp(got2d, w2d, sizeof w2d) == 0);
    /* reading a different size is the caller's bug */
    if (e) CHECK_ERR(it_ckpt_read(c, e, got2d, 20), IT_ERR_INTERNAL, "reading 20 bytes of 24");

    e = it_ckpt_find(c, "adam.t");
    CHECK(e && e->dtype == IT_DTYPE_I64 && e->ndim == 0 && e->nbytes == 8);
    int64_t got_t = 0;
    if (e) CHECK_OK(it_ckpt_read(c, e, &got_t, sizeof got_t));
    CHECK(got_t == t);

    e = it_ckpt_find(c, "h.0.bf16");
    CHECK(e && e->dtype == IT_DTYPE_BF16 && e->ndim == 1 && e->dims[0] == 4 && e->nbytes == 8);
    uint16_t got_bf[4] = {0};
    if (e) CHECK_OK(it_ckpt_read(c, e, got_bf, sizeof got_bf));
    CHECK(memcmp(got_bf, bf, sizeof bf) == 0);

    e = it_ckpt_find(c, "empty");
    CHECK(e && e->dtype == IT_DTYPE_FP32 && e->ndim == 3 && e->dims[0] == 3 && e->dims[1] == 0 && e->dims[2] == 5 &&
          e->nbytes == 0);
    if (e) CHECK_OK(it_ckpt_read(c, e, NULL, 0));

    CHECK(it_ckpt_find(c, "missing") == NULL);
    CHECK(it_ckpt_find(c, "adam") == NULL);
    CHECK(it_ckpt_find(c, "") == NULL);

    /* it_ckpt_expect: the entry when dtype and shape agree, else a message naming both */
    const it_ckpt_entry *out = NULL;
    CHECK_OK(it_ckpt_expect(c, "transformer.wte.weight", IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, &out));
    CHECK(out == it_ckpt_find(c, "transformer.wte.weight"));
    CHECK_OK(it_ckpt_expect(c, "adam.t", IT_DTYPE_I64, 0, NULL, NULL));
    CHECK_ERR(it_ckpt_expect(c, "transformer.wte.weight", IT_DTYPE_BF16, 2, (int64_t[]){2, 3}, NULL), IT_ERR_FORMAT,
              "'transformer.wte.weight': dtype is float32, expected bfloat16");
    CHECK_ERR(it_ckpt_expect(c, "transformer.wte.weight", IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL), IT_ERR_FORMAT,
              "'transformer.wte.weight': shape is [2, 3], expected [3, 2]");
    CHECK_ERR(it_ckpt_expect(c, "transformer.wte.weight", IT_DTYPE_FP32, 3, (int64_t[]){2, 3, 1}, NULL), IT_ERR_FORMAT,
              "shape is [2, 3], expected [2, 3, 1]");
    CHECK_ERR(it_ckpt_expect(c, "adam.t", IT_DTYPE_I64, 1, (int64_t[]){1}, NULL), IT_ERR_FORMAT,
              "'adam.t': shape is [], expected [1]");
    CHECK_ERR(it_ckpt_expect(c, "adam.v.0", IT_DTYPE_FP32, 0, NULL, NULL), IT_ERR_FORMAT, "no entry 'adam.v.0'");
    CHECK(strstr(it_last_error(), path) != NULL);
    it_ckpt_close(c);
    it_ckpt_close(NULL);

    /* an empty file of no entries */
    const char *none = tmp_path("none.ckpt");
    CHECK_OK(it_ckpt_write(none, items, 0, NULL, &size)); /* not NULL: the writer qsorts it */
    CHECK(size == 12);
    CHECK_OK(it_ckpt_open(none, &c));
    if (c) CHECK(it_ckpt_count(c) == 0 && it_ckpt_at(c, 0) == NULL && it_ckpt_find(c, "a") == NULL);
    it_ckpt_close(c);
    unlink(none);
    unlink(path);
}

/* The writer refuses what the format cannot say, and leaves no file behind. */
static void test_write_refusals(void) {
    float x = 1;
    const char *path = tmp_path("refused_write.ckpt");
    it_ckpt_item dup[] = {{"w", IT_DTYPE_FP32, 0, {0}, &x}, {"w", IT_DTYPE_FP32, 0, {0}, &x}};
    CHECK_ERR(it_ckpt_write(path, dup, 2, NULL, NULL), IT_ERR_INTERNAL, "entry name 'w' appears twice");
    it_ckpt_item bad_dtype[] = {{"w", (it_dtype)13, 0, {0}, &x}};
    CHECK_ERR(it_ckpt_write(path, bad_dtype, 1, NULL, NULL), IT_ERR_INVALID_ARG, "'w': bad dtype or ndim");
    it_ckpt_item bad_ndim[] = {{"w", IT_DTYPE_FP32, 9, {0}, &x}};
    CHECK_ERR(it_ckpt_write(path, bad_ndim, 1, NULL, NULL), IT_ERR_INVALID_ARG, "'w': bad dtype or ndim");
    it_ckpt_item neg[] = {{"w", IT_DTYPE_FP32, 1, {-1}, &x}};
    CHECK_ERR(it_ckpt_write(path, neg, 1, NULL, NULL), IT_ERR_INVALID_ARG, "'w': negative dim");
    CHECK(access(path, F_OK) != 0);
    CHECK_ERR(it_ckpt_write("/nonexistent-dir/x.ckpt", bad_dtype, 1, NULL, NULL), IT_ERR_IO, "cannot create");
}

/* The exact bytes of a tiny file: two entries given out of order come out sorted. */
static void test_exact_bytes(void) {
    int32_t a[2] = {1, -1};
    uint8_t b = 7;
    it_ckpt_item items[] = {{"b", IT_DTYPE_U8, 0, {0}, &b}, {"ab", IT_DTYPE_I32, 1, {2}, a}};
    static const unsigned char want[] = {
        0x43, 0x4B, 0x50, 0x54,                         /* magic 0x54504B43: "CKPT" */
        0x01, 0x00, 0x00, 0x00,                         /* version 1 */
        0x02, 0x00, 0x00, 0x00,                         /* 2 entries */
        0x02, 0x00, 0x00, 0x00, 'a',  'b',              /* name "ab" */
        0x06,                                           /* dtype int32 */
        0x01, 0x00, 0x00, 0x00,                         /* ndim 1 */
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* dims [2] */
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* nbytes 8 */
        0x01, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, /* 1, -1 */
        0x01, 0x00, 0x00, 0x00, 'b',                    /* name "b" */
        0x01,                                           /* dtype uint8 */
        0x00, 0x00, 0x00, 0x00,                         /* ndim 0: a scalar, no dims */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* nbytes 1 */
        0x07,
    };
    const char *path = tmp_path("exact.ckpt");
    uint32_t crc = 0;
    uint64_t size = 0;
    CHECK_OK(it_ckpt_write(path, items, 2, &crc, &size));
    size_t n = 0;
    unsigned char *got = read_bytes(path, &n);
    CHECK_MSG(got && n == sizeof want && size == sizeof want, "%zu bytes (writer says %llu), expected %zu", n,
              (unsigned long long)size, sizeof want);
    for (size_t i = 0; got && i < n && i < sizeof want; i++)
        CHECK_MSG(got[i] == want[i], "byte %zu is 0x%02X, expected 0x%02X", i, got[i], want[i]);
    free(got);
    /* and the hand-built bytes read back */
    write_bytes(path, want, sizeof want);
    it_ckpt *c = NULL;
    CHECK_OK(it_ckpt_open(path, &c));
    const it_ckpt_entry *e = c ? it_ckpt_find(c, "ab") : NULL;
    CHECK(e && e->offset == 39 && e->nbytes == 8);
    e = c ? it_ckpt_find(c, "b") : NULL;
    CHECK(e && e->offset == 65 && e->nbytes == 1 && e->dtype == IT_DTYPE_U8);
    it_ckpt_close(c);
    unlink(path);
}

/* ---- the reader's refusals */

static void test_refusals(void) {
    bytes w;

    valid_two(&w);
    accepted("valid", &w, 2); /* the base every case below changes */

    header(&w, 0x54504B44, 1, 0);
    refused("bad_magic", &w, IT_ERR_FORMAT, "magic is 0x54504B44, expected 0x54504B43");
    header(&w, 0x434B5054, 1, 0); /* the magic written big-endian */
    refused("big_endian_magic", &w, IT_ERR_FORMAT, "magic is 0x434B5054");
    header(&w, IT_CKPT_MAGIC, 2, 0);
    refused("version2", &w, IT_ERR_FORMAT, "version is 2, expected 1");

    /* two entries of at least 18 bytes each do not fit in 12 + 30 bytes */
    header(&w, IT_CKPT_MAGIC, 1, 2);
    entry(&w, "a", 1, IT_DTYPE_FP32, 1, (int64_t[]){1}, 4, 4);
    refused("count_too_large", &w, IT_ERR_FORMAT, "entry count 2 does not fit in 42 bytes");
    header(&w, IT_CKPT_MAGIC, 1, UINT32_MAX);
    refused("count_uint32_max", &w, IT_ERR_FORMAT, "entry count 4294967295 does not fit in 12 bytes");
    /* fits the count's bound, but the second entry is not there */
    header(&w, IT_CKPT_MAGIC, 1, 2);
    entry(&w, "a", 1, IT_DTYPE_U8, 0, NULL, 1, 1);
    for (int i = 0; i < 18; i++) put_u8(&w, 0);
    refused("count_beyond_entries", &w, IT_ERR_FORMAT, "entry 1: name length 0");

    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "", 0, IT_DTYPE_FP32, 0, NULL, 4, 4);
    refused("name_length_0", &w, IT_ERR_FORMAT, "entry 0: name length 0 (expected 1..4096)");
    static char long_name[4097];
    memset(long_name, 'x', sizeof long_name);
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, long_name, 4096, IT_DTYPE_U8, 0, NULL, 1, 1);
    accepted("name_length_4096", &w, 1); /* the longest name allowed */
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, long_name, 4097, IT_DTYPE_U8, 0, NULL, 1, 1);
    refused("name_length_4097", &w, IT_ERR_FORMAT, "entry 0: name length 4097 (expected 1..4096)");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    put_u32(&w, 0xFFFFFFFFu);
    for (int i = 0; i < 20; i++) put_u8(&w, 0); /* past the count's bound */
    refused("name_length_u32_max", &w, IT_ERR_FORMAT, "name length 4294967295");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "a\0b", 3, IT_DTYPE_FP32, 0, NULL, 4, 4);
    refused("nul_in_name", &w, IT_ERR_FORMAT, "entry 0: the name holds control byte 0x00");

    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, 13, 0, NULL, 4, 4);
    refused("dtype_13", &w, IT_ERR_FORMAT, "entry 0 ('w'): dtype 13 is not a DataType (0..12)");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, -1, 0, NULL, 4, 4);
    refused("dtype_negative", &w, IT_ERR_FORMAT, "dtype -1 is not a DataType");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, 4);
    refused("ndim_9", &w, IT_ERR_FORMAT, "entry 0 ('w'): ndim 9 (expected 0..8)");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2}, 8, 8);
    accepted("ndim_8", &w, 1);
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 2, (int64_t[]){3, -2}, 0, 0);
    refused("negative_dim", &w, IT_ERR_FORMAT, "entry 0 ('w'): dim 1 is -2");
    /* 4 * 2^40 * 2^40 bytes: the product overflows 64 bits */
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 2, (int64_t[]){1LL << 40, 1LL << 40}, 0, 0);
    refused("dims_overflow", &w, IT_ERR_FORMAT, "dim 1 is 1099511627776");
    /* a 0 dim makes the rest harmless, however large */
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP64, 3, (int64_t[]){0, INT64_MAX, INT64_MAX}, 0, 0);
    accepted("zero_dim_then_huge", &w, 1);

    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, 20, 20);
    refused("nbytes_mismatch", &w, IT_ERR_FORMAT, "entry 0 ('w'): nbytes is 20, its dims and float32 need 24");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, 24, 23);
    refused("data_past_end", &w, IT_ERR_FORMAT,
            "truncated: entry 0 ('w') needs 24 data bytes at offset 46, file is 69");
    header(&w, IT_CKPT_MAGIC, 1, 1);
    entry(&w, "w", 1, IT_DTYPE_U8, 1, (int64_t[]){INT64_MAX}, (uint64_t)INT64_MAX, 0);
    refused("data_far_past_end", &w, IT_ERR_FORMAT, "needs 9223372036854775807 data bytes");

    valid_two(&w);
    put_u8(&w, 0);
    refused("trailing_byte", &w, IT_ERR_FORMAT, "1 bytes after the last entry");
    valid_two(&w);
    entry(&w, "c", 1, IT_DTYPE_U8, 0, NULL, 1, 1); /* a whole entry beyond the count */
    refused("trailing_entry", &w, IT_ERR_FORMAT, "19 bytes after the last entry");

    header(&w, IT_CKPT_MAGIC, 1, 3);
    entry(&w, "dup", 3, IT_DTYPE_U8, 0, NULL, 1, 1);
    entry(&w, "other", 5, IT_DTYPE_U8, 0, NULL, 1, 1);
    entry(&w, "dup", 3, IT_DTYPE_FP32, 0, NULL, 4, 4);
    refused("duplicate_names", &w, IT_ERR_FORMAT, "entry 'dup' appears twice");

    /* every proper prefix of a valid file is refused as a format error */
    valid_two(&w);
    bytes cut;
    int refused_all = 1;
    for (size_t k = 0; k < w.n; k++) {
        memcpy(cut.b, w.b, k);
        cut.n = k;
        const char *path = tmp_path("truncated");
        write_bytes(path, cut.b, cut.n);
        it_ckpt *c = NULL;
        it_error_clear();
        it_status st = it_ckpt_open(path, &c);
        bool ok = st == IT_ERR_FORMAT && c == NULL && strstr(it_last_error(), path) &&
                  (strstr(it_last_error(), "truncated") || strstr(it_last_error(), "does not fit"));
        CHECK_MSG(ok, "truncated to %zu of %zu bytes: %s: %s", k, w.n, it_status_name(st), it_last_error());
        refused_all &= ok;
        if (!st) it_ckpt_close(c);
    }
    CHECK(refused_all);
    /* the message says where: the header, then each field of entry 0 */
    cut.n = 11;
    memcpy(cut.b, w.b, 11);
    refused("truncated_header", &cut, IT_ERR_FORMAT, "truncated: entry 0: the header needs 12 bytes at offset 0");
    header(&cut, IT_CKPT_MAGIC, 1, 1); /* one entry, so that the count fits */
    entry(&cut, "b", 1, IT_DTYPE_FP32, 2, (int64_t[]){2, 3}, 24, 24);
    cut.n = 32;
    refused("truncated_dims", &cut, IT_ERR_FORMAT, "truncated: entry 0: the dims needs 16 bytes at offset 22");

    /* files that are not there or not regular */
    it_ckpt *c = (it_ckpt *)1;
    CHECK_ERR(it_ckpt_open(tmp_path("does_not_exist"), &c), IT_ERR_NOT_FOUND, "does_not_exist");
    CHECK(c == NULL);
    c = (it_ckpt *)1;
    CHECK_ERR(it_ckpt_open(tmp_dir, &c), IT_ERR_IO, tmp_dir);
    CHECK(c == NULL);
}

/* zlib's CRC-32 check value, and an empty file. */
static void test_crc32(void) {
    const char *path = tmp_path("crc.txt");
    write_bytes(path, "123456789", 9);
    uint32_t crc = 0;
    uint64_t n = 0;
    CHECK_OK(it_file_crc32(path, &crc, &n));
    CHECK_MSG(crc == 0xCBF43926u && n == 9, "crc %08x over %llu bytes, expected cbf43926 over 9", crc,
              (unsigned long long)n);
    write_bytes(path, "", 0);
    CHECK_OK(it_file_crc32(path, &crc, NULL));
    CHECK(crc == 0);
    unlink(path);
    CHECK_ERR(it_file_crc32(path, &crc, &n), IT_ERR_NOT_FOUND, path);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) {
        perror(tmp_dir);
        return 1;
    }
    test_round_trip();
    test_write_refusals();
    test_exact_bytes();
    test_refusals();
    test_crc32();
    rmdir(tmp_dir);
    return it_test_report("test_ckpt_file");
}
