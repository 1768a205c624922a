/* llm.c tokenizer files: 1024-byte header of 256 little-endian int32 ([0] magic 20240328 GPT-2 or
 * 20240801 LLaMA-3, [1] version 1 or 2, [2] vocab size, v2: [3] eot id), then per token one
 * length byte (1..255, llm.c asserts > 0) and the bytes, nothing after the last token.
 *
 * An it_tokenizer is always such a decoding table; one made by it_tokenizer_open from a tiktoken
 * rank file or a tokenizer.json also owns that tokenizer and encodes with it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "data/file_util.h"
#include "data/special_match.h"
#include "infinitrain/data.h"

struct it_tokenizer {
    int64_t vocab_size, eot;
    uint32_t *offset; /* token i = blob[offset[i] .. offset[i] + len[i]), NUL after it */
    uint8_t *len;
    char *blob;
    int32_t magic;                /* an llm.c file's, else 0 */
    int64_t bos;                  /* -1 none */
    it_tiktoken *tk;              /* owned: opened from a rank file */
    it_special_match *tk_special; /* its special tokens' names, for encode */
    it_hf_tokenizer *hf;          /* owned: opened from a tokenizer.json */
};

void it_tokenizer_free(it_tokenizer *t) {
    if (!t) return;
    free(t->offset);
    free(t->len);
    free(t->blob);
    it_tiktoken_free(t->tk);
    it_special_match_free(t->tk_special);
    it_hf_tokenizer_free(t->hf);
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
    t->magic = magic;
    /* llm.c's LLaMA-3 file: Meta's format starts each text with <|begin_of_text|> */
    t->bos = magic == IT_TOKENIZER_MAGIC_LLAMA3 && vocab > 128000 ? 128000 : -1;
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

typedef const char *(*token_bytes_fn)(const void *src, uint32_t id, size_t *len);

/* A decoding table of every id's bytes from src (an id that is none, or longer than the
 * format's 255 bytes -- no known table has one -- decodes to nothing). */
static it_status table_from(const void *src, token_bytes_fn bytes, int64_t vocab, const char *who, it_tokenizer **out) {
    size_t total = 0;
    for (int64_t i = 0; i < vocab; i++) {
        size_t l = 0;
        if (bytes(src, (uint32_t)i, &l)) total += l;
    }
    it_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        t->offset = malloc(sizeof *t->offset * (size_t)vocab);
        t->len = malloc((size_t)vocab);
        t->blob = malloc(total + (size_t)vocab);
    }
    if (!t || !t->offset || !t->len || !t->blob) {
        it_tokenizer_free(t);
        return it_error(IT_ERR_OOM, "%s: out of host memory", who);
    }
    size_t o = 0;
    for (int64_t i = 0; i < vocab; i++) {
        size_t l = 0;
        const char *b = bytes(src, (uint32_t)i, &l);
        if (!b || l > 255) l = 0;
        t->offset[i] = (uint32_t)o;
        t->len[i] = (uint8_t)l;
        if (l) memcpy(t->blob + o, b, l);
        o += l;
        t->blob[o++] = 0;
    }
    t->vocab_size = vocab;
    t->bos = -1;
    *out = t;
    return IT_OK;
}

static const char *tiktoken_bytes(const void *src, uint32_t id, size_t *len) {
    return it_tiktoken_token_bytes(src, id, len);
}

static const char *hf_bytes(const void *src, uint32_t id, size_t *len) {
    return it_hf_tokenizer_token_bytes(src, id, len);
}

it_status it_tokenizer_from_tiktoken(const it_tiktoken *tk, it_tokenizer **out) {
    if (!out || !tk) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_from_tiktoken: NULL argument");
    *out = NULL;
    it_status st = table_from(tk, tiktoken_bytes, it_tiktoken_vocab_size(tk), "it_tokenizer_from_tiktoken", out);
    if (st) return st;
    (*out)->eot = it_tiktoken_doc_separator(tk);
    /* LLaMA-3's table: Meta's format starts each text with <|begin_of_text|> */
    uint32_t id;
    for (int i = 0; i < it_tiktoken_special_count(tk); i++)
        if (strcmp(it_tiktoken_special_at(tk, i, &id), "<|begin_of_text|>") == 0) (*out)->bos = id;
    return IT_OK;
}

it_status it_tokenizer_from_hf(const it_hf_tokenizer *hf, it_tokenizer **out) {
    if (!out || !hf) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_from_hf: NULL argument");
    *out = NULL;
    it_status st = table_from(hf, hf_bytes, it_hf_tokenizer_vocab_size(hf), "it_tokenizer_from_hf", out);
    if (st) return st;
    (*out)->eot = it_hf_tokenizer_doc_separator(hf);
    (*out)->bos = it_hf_tokenizer_bos(hf);
    return IT_OK;
}

/* ---- any tokenizer ----------------------------------------------------------------------------- */

/* A rank file's tokenizer, owning the table and its special tokens' matcher. */
static it_status open_tiktoken(const char *path, it_tokenizer **out) {
    it_tiktoken *tk = NULL;
    it_status st = it_tiktoken_load(path, &tk);
    if (!st) st = it_tokenizer_from_tiktoken(tk, out);
    if (st) {
        it_tiktoken_free(tk);
        return st;
    }
    (*out)->tk = tk;
    it_special_match *m = (*out)->tk_special = it_special_match_new();
    uint32_t id;
    const char *name;
    for (int i = 0; m && (name = it_tiktoken_special_at(tk, i, &id)); i++)
        if (it_special_match_add(m, name, strlen(name), id)) m = NULL;
    if (!m) {
        it_tokenizer_free(*out);
        *out = NULL;
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    return IT_OK;
}

static it_status open_hf(const char *path, it_tokenizer **out) {
    it_hf_tokenizer *hf = NULL;
    it_status st = it_hf_tokenizer_load(path, &hf);
    if (!st) st = it_tokenizer_from_hf(hf, out);
    if (st) {
        it_hf_tokenizer_free(hf);
        return st;
    }
    (*out)->hf = hf;
    return IT_OK;
}

it_status it_tokenizer_open(const char *path, it_tokenizer **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_open: empty path");
    struct stat st;
    if (stat(path, &st) != 0) return it_error(IT_ERR_IO, "tokenizer %s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) { /* a model directory: tokenizer.json, else tokenizer.model */
        size_t n = strlen(path) + sizeof "/tokenizer.model";
        char *p = malloc(n);
        if (!p) return it_error(IT_ERR_OOM, "tokenizer %s: out of host memory", path);
        snprintf(p, n, "%s/tokenizer.json", path);
        it_status s2;
        if (stat(p, &st) == 0) {
            s2 = open_hf(p, out);
        } else {
            snprintf(p, n, "%s/tokenizer.model", path);
            s2 = stat(p, &st) == 0 ? open_tiktoken(p, out)
                                   : it_error(IT_ERR_NOT_FOUND,
                                              "tokenizer %s: a directory with neither tokenizer.json nor "
                                              "tokenizer.model",
                                              path);
        }
        free(p);
        return s2;
    }
    /* the format by its content: llm.c's magic, a JSON object, else a rank file */
    unsigned char head[64] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(IT_ERR_IO, "tokenizer %s: cannot open: %s", path, strerror(errno));
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    int32_t magic = got >= 4 ? it_data_le_i32(head) : 0;
    if (magic == IT_TOKENIZER_MAGIC_GPT2 || magic == IT_TOKENIZER_MAGIC_LLAMA3) return it_tokenizer_load(path, out);
    size_t i = 0;
    while (i < got && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) i++;
    if (i < got && head[i] == '{') return open_hf(path, out);
    return open_tiktoken(path, out);
}

/* An llm.c file is byte-level when its first 256 tokens are the 256 bytes in order (what
 * `tokenize` writes without a BPE, and make run trains on): then a text's encoding is its
 * bytes, with nothing to merge. */
static bool bytewise(const it_tokenizer *t) {
    if (t->tk || t->hf || t->vocab_size < 256) return false;
    for (int b = 0; b < 256; b++)
        if (t->len[b] != 1 || (unsigned char)t->blob[t->offset[b]] != b) return false;
    return true;
}

bool it_tokenizer_can_encode(const it_tokenizer *t) { return t && (t->tk || t->hf || bytewise(t)); }

int64_t it_tokenizer_bos(const it_tokenizer *t) { return t ? t->bos : -1; }

it_status it_tokenizer_encode(const it_tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n) {
    if (!ids || !n) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_encode: ids or n is NULL");
    *ids = NULL;
    *n = 0;
    if (!t) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_encode: no tokenizer");
    if (len && !text) return it_error(IT_ERR_INVALID_ARG, "it_tokenizer_encode: text is NULL");
    if (t->hf) return it_hf_tokenizer_encode(t->hf, text, len, ids, n);
    if (!t->tk && bytewise(t)) {
        *ids = len ? malloc(len * sizeof **ids) : NULL;
        if (len && !*ids) return it_error(IT_ERR_OOM, "it_tokenizer_encode: out of host memory for %zu ids", len);
        for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
        *n = len;
        return IT_OK;
    }
    if (!t->tk)
        return it_error(IT_ERR_UNSUPPORTED,
                        "tokenizer: an llm.c tokenizer file holds the tokens' bytes only: it decodes but cannot "
                        "encode, unless it is byte-level (open a tokenizer.json or a tiktoken tokenizer.model to "
                        "encode)");
    /* tiktoken's encode with allowed_special="all": the text between special tokens' names
     * encoded ordinarily (no name is a prefix of another, so leftmost-longest is tiktoken's
     * leftmost match) */
    uint32_t *all = NULL, *part;
    size_t count = 0, cap = 0, m;
    for (size_t pos = 0; pos < len;) {
        size_t start = len, end = len;
        uint32_t special = 0;
        bool found = it_special_match_next(t->tk_special, text, len, pos, &start, &end, &special);
        it_status st = it_tiktoken_encode(t->tk, text + pos, start - pos, &part, &m);
        if (!st && count + m + 1 > cap) {
            size_t c = cap ? cap : 1024;
            while (c < count + m + 1) c *= 2;
            uint32_t *grown = realloc(all, c * sizeof *grown);
            if (grown)
                all = grown, cap = c;
            else
                st = it_error(IT_ERR_OOM, "it_tokenizer_encode: out of host memory for %zu ids", c);
        }
        if (st) {
            free(part);
            free(all);
            return st;
        }
        if (m) memcpy(all + count, part, m * sizeof *part);
        count += m;
        free(part);
        if (found) all[count++] = special;
        pos = end;
    }
    *ids = all;
    *n = count;
    return IT_OK;
}

int64_t it_tokenizer_token_id(const it_tokenizer *t, const char *text) {
    if (!t || !text) return -1;
    size_t len = strlen(text);
    if (t->hf) return it_hf_tokenizer_token_id(t->hf, text, len);
    if (t->tk) {
        uint32_t id;
        const char *name;
        for (int i = 0; (name = it_tiktoken_special_at(t->tk, i, &id)); i++)
            if (strcmp(name, text) == 0) return id;
        return it_tiktoken_token_id(t->tk, text, len);
    }
    for (int64_t i = 0; i < t->vocab_size; i++) /* llm.c's file: no index; a rare call */
        if (t->len[i] == len && memcmp(t->blob + t->offset[i], text, len) == 0) return i;
    return -1;
}
