/* libFuzzer harness: the input is an llm.c tokenizer file for it_tokenizer_load. An accepted file
 * must decode every id to exactly the bytes the file spells for it (NUL-terminated), with the
 * end-of-text id inside the vocabulary, and nothing for ids past it. */
#include "fuzz_common.h"
#include "infinitrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    it_tokenizer *t = NULL;
    it_error_clear();
    it_status st = it_tokenizer_load(path, &t);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(t == NULL, "a refused load set *out");
        return 0;
    }
    int64_t V = it_tokenizer_vocab_size(t), eot = it_tokenizer_eot(t);
    int32_t magic = fuzz_le32(data), version = fuzz_le32(data + 4);
    FUZZ_ASSERT(magic == IT_TOKENIZER_MAGIC_GPT2 || magic == IT_TOKENIZER_MAGIC_LLAMA3, "accepted magic %d", magic);
    FUZZ_ASSERT(version == 1 || version == 2, "accepted version %d", version);
    FUZZ_ASSERT(V == fuzz_le32(data + 8) && V >= 1, "vocab %lld", (long long)V);
    FUZZ_ASSERT(eot >= 0 && eot < V, "eot %lld of %lld", (long long)eot, (long long)V);
    size_t pos = 1024;
    for (int64_t i = 0; i < V; i++) {
        size_t len = 0;
        const char *s = it_tokenizer_decode(t, (uint32_t)i, &len);
        FUZZ_ASSERT(s && pos < size && len == data[pos] && len >= 1, "token %lld", (long long)i);
        FUZZ_ASSERT(pos + 1 + len <= size && memcmp(s, data + pos + 1, len) == 0 && s[len] == '\0', "token %lld bytes",
                    (long long)i);
        pos += 1 + len;
    }
    FUZZ_ASSERT(pos == size, "accepted %zu trailing bytes", size - pos);
    size_t len = 1;
    FUZZ_ASSERT(it_tokenizer_decode(t, (uint32_t)V, &len) == NULL && len == 0, "decode of id %lld", (long long)V);
    FUZZ_ASSERT(it_tokenizer_decode(t, UINT32_MAX, NULL) == NULL, "decode of id 2^32-1");
    it_tokenizer_free(t);
    return 0;
}
