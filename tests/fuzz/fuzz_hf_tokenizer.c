/* libFuzzer harness: byte 0 picks the mode.
 *   'j' + a tokenizer.json for it_hf_tokenizer_load: a refusal must be a clean error naming the
 *       file (fuzz_check_refusal; IT_ERR_UNSUPPORTED too, for what is valid but not implemented);
 *       an accepted file maps every token's bytes back to a token of those bytes, and encodes a
 *       fixed text into tokens whose bytes are the text.
 *   anything else: the rest is text for it_hf_tokenizer_encode over a fixed tokenizer.json (the
 *       256 bytes, a few merges, added tokens of which one is a prefix of another) with GPT-2's,
 *       cl100k's or Qwen2's pattern (byte 0 mod 3): the tokens' bytes must be the text, whatever
 *       its bytes. */
#include "fuzz_common.h"
#include "infinitrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const it_hf_tokenizer *t, const char *s, size_t n) {
    uint32_t *ids = NULL;
    size_t m = 0, off = 0;
    FUZZ_ASSERT(it_hf_tokenizer_encode(t, s, n, &ids, &m) == IT_OK, "encode: %s", it_last_error());
    for (size_t i = 0; i < m; i++) {
        size_t l = 0;
        const char *b = it_hf_tokenizer_token_bytes(t, ids[i], &l);
        FUZZ_ASSERT(b && off + l <= n && memcmp(s + off, b, l) == 0, "token %zu (id %u) is not the text's bytes", i,
                    ids[i]);
        off += l;
    }
    FUZZ_ASSERT(off == n, "the tokens cover %zu of %zu bytes", off, n);
    free(ids);
}

/* Appends raw bytes s[0..n) as a JSON string in bytes_to_unicode spelling (every byte escaped). */
static size_t put_mapped(char *o, const char *s, size_t n) {
    size_t k = 0;
    o[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)s[i], cp = b, u = 0;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            for (unsigned c = 0; c < b; c++) u += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
            cp = 256 + u;
        }
        k += (size_t)sprintf(o + k, "\\u%04X", cp);
    }
    o[k++] = '"';
    return k;
}

static const it_hf_tokenizer *fixed(int pattern) {
    static it_hf_tokenizer *t[3];
    if (t[pattern]) return t[pattern];
    static const char *const pre[3] = {
        "{\"type\": \"ByteLevel\"}",
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
        "\"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
        "\"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
    };
    /* each token is the merge of the two before it in its row */
    static const char *const merges[][3] = {
        {"t", "h", "th"}, {"h", "e", "he"},   {"th", "e", "the"}, {" ", "t", " t"},     {" t", "he", " the"},
        {"i", "n", "in"}, {"in", "g", "ing"}, {" ", " ", "  "},   {"  ", "  ", "    "}, {"\xe6", "\x97", "\xe6\x97"},
        {"a", "b", "ab"}};
    static char text[32768];
    size_t o = (size_t)sprintf(text,
                               "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|e|>\", \"special\": true}, "
                               "{\"id\": 301, \"content\": \"<|e\", \"special\": false}], \"pre_tokenizer\": %s, "
                               "\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {",
                               pre[pattern], pattern == 1 ? "true" : "false");
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        o += put_mapped(text + o, &c, 1);
        o += (size_t)sprintf(text + o, ": %d, ", b);
    }
    int n = (int)(sizeof merges / sizeof merges[0]);
    for (int i = 0; i < n; i++) {
        o += put_mapped(text + o, merges[i][2], strlen(merges[i][2]));
        o += (size_t)sprintf(text + o, ": %d%s", 256 + i, i + 1 < n ? ", " : "}, \"merges\": [");
    }
    for (int i = 0; i < n; i++) {
        text[o++] = '[';
        o += put_mapped(text + o, merges[i][0], strlen(merges[i][0]));
        text[o++] = ',';
        o += put_mapped(text + o, merges[i][1], strlen(merges[i][1]));
        o += (size_t)sprintf(text + o, "]%s", i + 1 < n ? ", " : "]}}");
    }
    const char *path = fuzz_file(1, (const uint8_t *)text, o);
    FUZZ_ASSERT(it_hf_tokenizer_load(path, &t[pattern]) == IT_OK, "the fixed tokenizer.json: %s", it_last_error());
    return t[pattern];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] != 'j') {
        check_roundtrip(fixed(data[0] % 3), (const char *)data + 1, size - 1);
        return 0;
    }
    const char *path = fuzz_file(0, data + 1, size - 1);
    it_hf_tokenizer *t = NULL;
    it_status st = it_hf_tokenizer_load(path, &t);
    if (st) {
        if (st == IT_ERR_UNSUPPORTED) /* valid, not implemented: as clean as a refusal */
            FUZZ_ASSERT(strstr(it_last_error(), path) && !strchr(it_last_error(), '\n'), "message: %s",
                        it_last_error());
        else
            fuzz_check_refusal(st, path);
        FUZZ_ASSERT(t == NULL, "a refused file returned a handle");
        return 0;
    }
    for (int64_t id = 0; id < it_hf_tokenizer_vocab_size(t); id++) {
        size_t l = 0, l2 = 0;
        const char *b = it_hf_tokenizer_token_bytes(t, (uint32_t)id, &l);
        if (!b) continue;
        int64_t back = it_hf_tokenizer_token_id(t, b, l);
        const char *b2 = back >= 0 ? it_hf_tokenizer_token_bytes(t, (uint32_t)back, &l2) : NULL;
        FUZZ_ASSERT(b2 && l2 == l && memcmp(b, b2, l) == 0, "id %lld's bytes map to no token of those bytes",
                    (long long)id);
    }
    static const char text[] = "Hello, world! It's 2026: \xe6\x97\xa5\xe6\x9c\xac  spaces\r\n\tand \xff bytes";
    check_roundtrip(t, text, sizeof text - 1);
    it_hf_tokenizer_free(t);
    return 0;
}
