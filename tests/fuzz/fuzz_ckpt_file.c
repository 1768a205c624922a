/* libFuzzer harness: the input is an InfiniTrain .ckpt tensor file for it_ckpt_open
 * (src/train/ckpt_file.h). A refusal must be a clean error (fuzz_check_refusal). An accepted file
 * must be exactly what its index says: each entry's fields in range, nbytes = numel * element
 * size, its data inside the file and read back bit for bit, names sorted and unique, and the
 * index plus the data adding up to the file's size. Writing the entries back with it_ckpt_write
 * must give a file of the same size that opens to the same entries, and the very same bytes when
 * the input's entries were already in name order. */
#include "fuzz_common.h"
#include "train/ckpt_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bytes entry e's index takes in the file: name length, name, dtype, ndim, dims, nbytes. */
static uint64_t index_bytes(const it_ckpt_entry *e) { return 4 + strlen(e->name) + 1 + 4 + 8ull * e->ndim + 8; }

static void check_entry(const it_ckpt *c, const it_ckpt_entry *e, const uint8_t *data, size_t size) {
    size_t len = strlen(e->name);
    FUZZ_ASSERT(len >= 1 && len <= 4096, "name length %zu", len);
    FUZZ_ASSERT((int)e->dtype >= 0 && (int)e->dtype < IT_DTYPE_COUNT, "'%s': dtype %d", e->name, (int)e->dtype);
    FUZZ_ASSERT(e->ndim <= IT_CKPT_MAX_NDIM, "'%s': ndim %u", e->name, e->ndim);
    uint64_t numel = 1;
    bool zero = false;
    for (uint32_t d = 0; d < e->ndim; d++) {
        FUZZ_ASSERT(e->dims[d] >= 0, "'%s': dim %u is %lld", e->name, d, (long long)e->dims[d]);
        zero |= e->dims[d] == 0;
        if (!zero) numel *= (uint64_t)e->dims[d]; /* bounded: nbytes fits in the file */
    }
    if (zero) numel = 0;
    FUZZ_ASSERT(e->nbytes == numel * it_dtype_size(e->dtype), "'%s': nbytes %llu for %llu elements of %s", e->name,
                (unsigned long long)e->nbytes, (unsigned long long)numel, it_dtype_name(e->dtype));
    FUZZ_ASSERT(e->offset >= 12 + index_bytes(e) && e->offset <= size && e->nbytes <= size - e->offset,
                "'%s': data at %llu + %llu, file is %zu bytes", e->name, (unsigned long long)e->offset,
                (unsigned long long)e->nbytes, size);
    FUZZ_ASSERT(it_ckpt_find(c, e->name) == e, "it_ckpt_find('%s') is not the entry", e->name);
    const it_ckpt_entry *x = NULL;
    FUZZ_ASSERT(it_ckpt_expect(c, e->name, e->dtype, e->ndim, e->dims, &x) == IT_OK && x == e,
                "it_ckpt_expect refused '%s' with its own dtype and shape", e->name);
    uint8_t *buf = malloc(e->nbytes ? e->nbytes : 1);
    FUZZ_ASSERT(buf != NULL, "malloc %llu", (unsigned long long)e->nbytes);
    FUZZ_ASSERT(it_ckpt_read(c, e, buf, e->nbytes) == IT_OK, "reading '%s'", e->name);
    FUZZ_ASSERT(memcmp(buf, data + e->offset, e->nbytes) == 0, "'%s': data read back differs from the file", e->name);
    free(buf);
}

/* Write c's entries to in-memory file 1, and check that the copy opens to the same entries. */
static void check_rewrite(const it_ckpt *c, const uint8_t *data, size_t size, bool in_order) {
    size_t n = it_ckpt_count(c);
    it_ckpt_item *items = calloc(n ? n : 1, sizeof *items);
    void **bufs = calloc(n ? n : 1, sizeof *bufs);
    FUZZ_ASSERT(items && bufs, "calloc");
    for (size_t i = 0; i < n; i++) {
        const it_ckpt_entry *e = it_ckpt_at(c, i);
        bufs[i] = malloc(e->nbytes ? e->nbytes : 1);
        FUZZ_ASSERT(bufs[i] != NULL, "malloc");
        memcpy(bufs[i], data + e->offset, e->nbytes);
        items[i] = (it_ckpt_item){e->name, e->dtype, e->ndim, {0}, bufs[i]};
        memcpy(items[i].dims, e->dims, sizeof e->dims);
    }
    const char *copy = fuzz_file(1, NULL, 0);
    uint32_t crc = 0;
    uint64_t bytes = 0;
    FUZZ_ASSERT(it_ckpt_write(copy, items, n, &crc, &bytes) == IT_OK, "writing the entries back");
    FUZZ_ASSERT(bytes == size, "written back: %llu bytes, the input %zu", (unsigned long long)bytes, size);
    uint32_t crc2 = 0;
    uint64_t bytes2 = 0;
    FUZZ_ASSERT(it_file_crc32(copy, &crc2, &bytes2) == IT_OK && crc2 == crc && bytes2 == bytes,
                "it_file_crc32 %08x/%llu, the writer's %08x/%llu", crc2, (unsigned long long)bytes2, crc,
                (unsigned long long)bytes);
    if (in_order) {
        uint8_t *b = malloc(size ? size : 1);
        FUZZ_ASSERT(b != NULL, "malloc");
        FILE *f = fopen(copy, "rb");
        FUZZ_ASSERT(f && fread(b, 1, size, f) == size, "reading the copy back");
        fclose(f);
        FUZZ_ASSERT(memcmp(b, data, size) == 0, "entries in name order written back differ from the input");
        free(b);
    }
    it_ckpt *d = NULL;
    FUZZ_ASSERT(it_ckpt_open(copy, &d) == IT_OK && it_ckpt_count(d) == n, "the copy does not open to %zu entries", n);
    for (size_t i = 0; i < n; i++) {
        const it_ckpt_entry *a = it_ckpt_at(c, i), *b = it_ckpt_at(d, i);
        FUZZ_ASSERT(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim &&
                        memcmp(a->dims, b->dims, sizeof(int64_t) * a->ndim) == 0 && a->nbytes == b->nbytes,
                    "the copy's entry %zu differs", i);
    }
    it_ckpt_close(d);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(items);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    it_ckpt *c = NULL;
    it_error_clear();
    it_status st = it_ckpt_open(path, &c);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(c == NULL, "a refused open set *out");
        return 0;
    }
    FUZZ_ASSERT(size >= 12 && fuzz_le32(data) == (int32_t)IT_CKPT_MAGIC && fuzz_le32(data + 4) == 1,
                "accepted a file without the magic and version 1");
    size_t n = it_ckpt_count(c);
    FUZZ_ASSERT(n == (uint32_t)fuzz_le32(data + 8), "%zu entries, the header says %u", n,
                (uint32_t)fuzz_le32(data + 8));
    uint64_t total = 12;
    bool in_order = true; /* the file's entries are in name order when their offsets are */
    for (size_t i = 0; i < n; i++) {
        const it_ckpt_entry *e = it_ckpt_at(c, i);
        FUZZ_ASSERT(e != NULL, "entry %zu of %zu", i, n);
        check_entry(c, e, data, size);
        if (i) {
            const it_ckpt_entry *p = it_ckpt_at(c, i - 1);
            FUZZ_ASSERT(strcmp(p->name, e->name) < 0, "'%s' before '%s': not sorted and unique", p->name, e->name);
            in_order &= p->offset < e->offset;
        }
        total += index_bytes(e) + e->nbytes;
    }
    FUZZ_ASSERT(it_ckpt_at(c, n) == NULL, "an entry past the count");
    FUZZ_ASSERT(total == size, "index and data take %llu bytes, the file is %zu", (unsigned long long)total, size);
    check_rewrite(c, data, size, in_order);
    it_ckpt_close(c);
    return 0;
}
