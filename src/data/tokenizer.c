/* llm.c tokenizer files: 1024-byte header of 256 little-endian int32 ([0] magic 20240328 GPT-2 or
 * 20240801 LLaMA-3, [1] version 1 or 2, [2] vocab size, v2: [3] eot id), then per token one
 * length byte (1..255, llm.c asserts > 0) and the bytes, nothing after the last token. */
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "data/file_util.h"
#include "infinitrain/data.h"

struct it_tokenizer {
    int64_t vocab_size, eot;
    uint32_t *offset; /* token i = blob[offset[i] .. offset[i] + len[i]), NUL after it */
    uint8_t *len;
    char *blob;
};

void it_tokenizer_free(it_tokenizer *t) {
    if (!t) return;
    free(t->offset);
    free(t->len);
    free(t->blob);
    free(t);
}

int64_t it_tokenizer_vocab_size(const it_tokenizer *t) { return t ? t->vocab_size : 0; }
int64_t it_tokenizer_eot(const it_tokenizer *t) { return t ? t->eot : -1; }

const char *it_tokenizer_decode(const it_tokenizer *t, uint32_t id, size_t *len) {
    if (!t || (int64_t)id >= t->vocab_size) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return t->blob + t->offset[id];
}

it_status it_tokenizer_load(const char *path, it_tokenizer **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_load: out is NULL");
    *out = NULL;
    char *buf;
    size_t size;
    /* Tokenizer files are small (GPT-2: ~0.4 MB): read whole, then parse from memory. */
    it_status st = it_data_read_file(path, "tokenizer", &buf, &size);
    if (st) return st;
    const unsigned char *u = (const unsigned char *)buf;
    it_tokenizer *t = NULL;
    if (size < 1024) {
        st = it_error(IT_ERR_FORMAT, "tokenizer %s: header: expected 1024 bytes, found a file of %zu bytes%s", path,
                      size, size == 0 ? " (empty file)" : " (truncated header)");
        goto done;
    }
    int32_t magic = it_data_le_i32(u), version = it_data_le_i32(u + 4), vocab = it_data_le_i32(u + 8);
    int64_t eot;
    if (magic != IT_TOKENIZER_MAGIC_GPT2 && magic != IT_TOKENIZER_MAGIC_LLAMA3) {
        st = it_error(IT_ERR_FORMAT, "tokenizer %s: header field magic: expected %d (GPT-2) or %d (LLaMA-3), found %d",
                      path, IT_TOKENIZER_MAGIC_GPT2, IT_TOKENIZER_MAGIC_LLAMA3, magic);
        goto done;
    }
    if (version != 1 && version != 2) {
        st = it_error(IT_ERR_FORMAT, "tokenizer %s: header field version: expected 1 or 2, found %d", path, version);
        goto done;
    }
    if (vocab < 1) {
        st = it_error(IT_ERR_FORMAT, "tokenizer %s: header field vocab_size: expected >= 1, found %d", path, vocab);
        goto done;
    }
    /* Every token takes at least 2 bytes: bound the vocab by the file before allocating. */
    if ((int64_t)vocab > (int64_t)(size - 1024) / 2) {
        st = it_error(IT_ERR_FORMAT,
                      "tokenizer %s: header field vocab_size %d needs at least %lld bytes of tokens, found %zu", path,
                      vocab, 2 * (long long)vocab, size - 1024);
        goto done;
    }
    eot = version == 2 ? it_data_le_i32(u + 12) : magic == IT_TOKENIZER_MAGIC_GPT2 ? 50256 : 128001;
    if (eot < 0 || eot >= vocab) {
        st = it_error(IT_ERR_FORMAT, "tokenizer %s: %s eot_token: expected 0..%d, found %lld", path,
                      version == 2 ? "header field" : "version-1 implied", vocab - 1, (long long)eot);
        goto done;
    }
    t = calloc(1, sizeof *t);
    if (t) {
        t->offset = malloc((size_t)vocab * sizeof *t->offset);
        t->len = malloc((size_t)vocab);
        /* The blob is at most the token area plus one NUL per token. */
        t->blob = malloc(size - 1024 + (size_t)vocab);
    }
    if (!t || !t->offset || !t->len || !t->blob) {
        st = it_error(IT_ERR_OOM, "tokenizer %s: out of memory for %d tokens", path, vocab);
        goto done;
    }
    t->vocab_size = vocab;
    t->eot = eot;
    size_t pos = 1024, bo = 0;
    for (int32_t i = 0; i < vocab; i++) {
        if (pos >= size) {
            st = it_error(IT_ERR_FORMAT,
                          "tokenizer %s: token %d: expected a length byte at offset %zu, found end of file (header "
                          "field vocab_size is %d)",
                          path, i, pos, vocab);
            goto done;
        }
        size_t n = u[pos++];
        if (n == 0) {
            st = it_error(IT_ERR_FORMAT, "tokenizer %s: token %d length byte at offset %zu: expected 1..255, found 0",
                          path, i, pos - 1);
            goto done;
        }
        if (n > size - pos) {
            st = it_error(IT_ERR_FORMAT, "tokenizer %s: token %d at offset %zu: expected %zu bytes, found %zu", path, i,
                          pos, n, size - pos);
            goto done;
        }
        t->offset[i] = (uint32_t)bo;
        t->len[i] = (uint8_t)n;
        memcpy(t->blob + bo, buf + pos, n);
        t->blob[bo + n] = '\0';
        bo += n + 1;
        pos += n;
    }
    if (pos != size) {
        st =
            it_error(IT_ERR_FORMAT,
                     "tokenizer %s: file size: expected %zu bytes (header + %d tokens), found %zu (%zu trailing bytes)",
                     path, pos, vocab, size, size - pos);
        goto done;
    }
done:
    free(buf);
    if (st) {
        it_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IT_OK;
}

static it_status tokenizer_write(const char *path, int version, int32_t magic, int64_t vocab_size, int64_t eot,
                                 const char *const *tokens, const size_t *lens) {
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_write: empty path");
    if (magic != IT_TOKENIZER_MAGIC_GPT2 && magic != IT_TOKENIZER_MAGIC_LLAMA3)
        return it_error(IT_ERR_INVALID_ARG, "tokenizer %s: magic: expected %d (GPT-2) or %d (LLaMA-3), found %d", path,
                        IT_TOKENIZER_MAGIC_GPT2, IT_TOKENIZER_MAGIC_LLAMA3, magic);
    if (vocab_size < 1 || vocab_size > INT32_MAX)
        return it_error(IT_ERR_INVALID_ARG, "tokenizer %s: vocab_size: expected 1..%d, found %lld", path, INT32_MAX,
                        (long long)vocab_size);
    if (eot < 0 || eot >= vocab_size)
        return it_error(IT_ERR_INVALID_ARG, "tokenizer %s: eot_token: expected 0..%lld, found %lld", path,
                        (long long)vocab_size - 1, (long long)eot);
    if (!tokens || !lens) return it_error(IT_ERR_INVALID_ARG, "tokenizer %s: tokens or lens is NULL", path);
    for (int64_t i = 0; i < vocab_size; i++)
        if (lens[i] < 1 || lens[i] > 255 || !tokens[i])
            return it_error(IT_ERR_INVALID_ARG, "tokenizer %s: token %lld length: expected 1..255 bytes, found %zu%s",
                            path, (long long)i, lens[i], tokens[i] ? "" : " (NULL)");
    unsigned char h[1024] = {0};
    it_data_put_le_i32(h, magic);
    it_data_put_le_i32(h + 4, version);
    it_data_put_le_i32(h + 8, (int32_t)vocab_size);
    if (version == 2) it_data_put_le_i32(h + 12, (int32_t)eot);
    it_afile *f;
    it_status st = it_afile_open(path, &f);
    if (st) return st;
    st = it_afile_write(f, h, sizeof h);
    for (int64_t i = 0; !st && i < vocab_size; i++) {
        unsigned char n = (unsigned char)lens[i];
        st = it_afile_write(f, &n, 1);
        if (!st) st = it_afile_write(f, tokens[i], lens[i]);
    }
    if (st) {
        it_afile_abort(f);
        return st;
    }
    return it_afile_commit(f);
}

it_status it_tokenizer_write(const char *path, int32_t magic, int64_t vocab_size, int64_t eot,
                             const char *const *tokens, const size_t *lens) {
    return tokenizer_write(path, 2, magic, vocab_size, eot, tokens, lens);
}

it_status it_tokenizer_write_v1(const char *path, int32_t magic, int64_t vocab_size, const char *const *tokens,
                                const size_t *lens) {
    int64_t eot = magic == IT_TOKENIZER_MAGIC_LLAMA3 ? 128001 : 50256;
    if (eot >= vocab_size)
        return it_error(IT_ERR_INVALID_ARG,
                        "tokenizer %s: vocab_size: a version-1 file implies eot %lld, so expected > %lld, found %lld",
                        path ? path : "(null)", (long long)eot, (long long)eot, (long long)vocab_size);
    return tokenizer_write(path, 1, magic, vocab_size, eot, tokens, lens);
}

it_status it_tokenizer_from_tiktoken(const it_tiktoken *tk, it_tokenizer **out) {
    if (!out || !tk) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_from_tiktoken: NULL argument");
    *out = NULL;
    int64_t vocab = it_tiktoken_vocab_size(tk);
    size_t total = 0;
    for (int64_t i = 0; i < vocab; i++) {
        size_t l = 0;
        if (it_tiktoken_token_bytes(tk, (uint32_t)i, &l)) total += l;
    }
    it_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        t->offset = malloc(sizeof *t->offset * (size_t)vocab);
        t->len = malloc((size_t)vocab);
        t->blob = malloc(total + (size_t)vocab);
    }
    if (!t || !t->offset || !t->len || !t->blob) {
        it_tokenizer_free(t);
        return it_error(IT_ERR_OOM, "it_tokenizer_from_tiktoken: out of host memory");
    }
    size_t o = 0;
    for (int64_t i = 0; i < vocab; i++) {
        size_t l = 0;
        const char *b = it_tiktoken_token_bytes(tk, (uint32_t)i, &l);
        if (!b || l > 255) l = 0; /* an unused id decodes to nothing; no table has a token past 255 bytes */
        t->offset[i] = (uint32_t)o;
        t->len[i] = (uint8_t)l;
        if (l) memcpy(t->blob + o, b, l);
        o += l;
        t->blob[o++] = 0;
    }
    t->vocab_size = vocab;
    t->eot = it_tiktoken_doc_separator(tk);
    *out = t;
    return IT_OK;
}
