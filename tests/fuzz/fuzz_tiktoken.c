/* libFuzzer harness: byte 0 picks the mode.
 *   'r' + a tiktoken rank file for it_tiktoken_load: a refusal must be a clean error naming the
 *       file (fuzz_check_refusal); an accepted table maps every rank's bytes back to the rank,
 *       and encodes a fixed text into tokens whose bytes are the text.
 *   anything else: the rest is text for it_tiktoken_encode over a fixed table (the 256 bytes
 *       and a few merges): the tokens' bytes must be the text, whatever its bytes. */
#include "fuzz_common.h"
#include "infinitrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const it_tiktoken *t, const char *s, size_t n) {
    uint32_t *ids = NULL;
    size_t m = 0, off = 0;
    FUZZ_ASSERT(it_tiktoken_encode(t, s, n, &ids, &m) == IT_OK, "encode: %s", it_last_error());
    for (size_t i = 0; i < m; i++) {
        size_t l = 0;
        const char *b = it_tiktoken_token_bytes(t, ids[i], &l);
        FUZZ_ASSERT(b && off + l <= n && memcmp(s + off, b, l) == 0, "token %zu (id %u) is not the text's bytes", i,
                    ids[i]);
        off += l;
    }
    FUZZ_ASSERT(off == n, "the tokens cover %zu of %zu bytes", off, n);
    free(ids);
}

static const it_tiktoken *fixed_table(void) {
    static it_tiktoken *t;
    if (t) return t;
    static const char *const extra[] = {"th", "he", "the", " t", " the", "in", "ing", "  ", "    ", "\xe6\x97", "ab"};
    static const char *A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char text[8192];
    size_t o = 0;
    for (int r = 0; r < 256 + (int)(sizeof extra / sizeof extra[0]); r++) {
        unsigned char one = (unsigned char)r;
        const unsigned char *s = r < 256 ? &one : (const unsigned char *)extra[r - 256];
        size_t n = r < 256 ? 1 : strlen(extra[r - 256]);
        for (size_t i = 0; i < n; i += 3) {
            uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
            text[o++] = A[w >> 18 & 63], text[o++] = A[w >> 12 & 63];
            text[o++] = i + 1 < n ? A[w >> 6 & 63] : '=';
            text[o++] = i + 2 < n ? A[w & 63] : '=';
        }
        o += (size_t)snprintf(text + o, sizeof text - o, " %d\n", r);
    }
    const char *path = fuzz_file(1, (const uint8_t *)text, o);
    FUZZ_ASSERT(it_tiktoken_load(path, &t) == IT_OK, "the fixed table: %s", it_last_error());
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] != 'r') {
        check_roundtrip(fixed_table(), (const char *)data + 1, size - 1);
        return 0;
    }
    const char *path = fuzz_file(0, data + 1, size - 1);
    it_tiktoken *t = NULL;
    it_status st = it_tiktoken_load(path, &t);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(t == NULL, "a refused table returned a handle");
        return 0;
    }
    for (int64_t r = 0; r < it_tiktoken_rank_count(t); r++) {
        size_t l = 0;
        const char *b = it_tiktoken_token_bytes(t, (uint32_t)r, &l);
        FUZZ_ASSERT(b && it_tiktoken_token_id(t, b, l) == r, "rank %lld does not map back", (long long)r);
    }
    static const char text[] = "Hello, world! It's 2026: \xe6\x97\xa5\xe6\x9c\xac  spaces\r\n\tand \xff bytes";
    check_roundtrip(t, text, sizeof text - 1);
    it_tiktoken_free(t);
    return 0;
}
