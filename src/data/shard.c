/* llm.c token shards: 1024-byte header of 256 little-endian int32 ([0] magic, [1] version,
 * [2] n tokens), then n uint16 (magic 20240520) or uint32 (magic 20240801) tokens, nothing after.
 * Held in memory widened to uint32. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "data/file_util.h"
#include "infinitrain/data.h"

struct it_shard {
    char *path;
    uint32_t *tokens;
    int64_t n;
    uint32_t max_token;
};

void it_shard_free(it_shard *s) {
    if (!s) return;
    free(s->path);
    free(s->tokens);
    free(s);
}

int64_t it_shard_num_tokens(const it_shard *s) { return s ? s->n : 0; }
const uint32_t *it_shard_tokens(const it_shard *s) { return s ? s->tokens : NULL; }
uint32_t it_shard_max_token(const it_shard *s) { return s ? s->max_token : 0; }
const char *it_shard_path(const it_shard *s) { return s ? s->path : NULL; }

/* Checks the header against the file size; on success *width is 2 or 4 and *n the count. */
static it_status check_header(const char *path, const unsigned char *h, int64_t size, int *width, int64_t *n) {
    int32_t magic = it_data_le_i32(h), version = it_data_le_i32(h + 4), count = it_data_le_i32(h + 8);
    if (magic == IT_SHARD_MAGIC_U16) {
        *width = 2;
    } else if (magic == IT_SHARD_MAGIC_U32) {
        *width = 4;
    } else {
        return it_error(IT_ERR_FORMAT,
                        "token shard %s: header field magic: expected %d (uint16 tokens) or %d (uint32 tokens), "
                        "found %d",
                        path, IT_SHARD_MAGIC_U16, IT_SHARD_MAGIC_U32, magic);
    }
    /* uint32: llm.c writes 7 (dev/data/data_common.py); this project wrote 1 before, InfiniTrain
     * reads either (it keys on the magic) */
    if (*width == 2 ? version != IT_SHARD_VERSION : version != IT_SHARD_VERSION_U32 && version != IT_SHARD_VERSION)
        return it_error(IT_ERR_FORMAT, "token shard %s: header field version: expected %s, found %d", path,
                        *width == 2 ? "1 (uint16 tokens)" : "7 or 1 (uint32 tokens)", version);
    if (count < 0)
        return it_error(IT_ERR_FORMAT, "token shard %s: header field n_tokens: expected >= 0, found %d", path, count);
    int64_t expected = IT_SHARD_HEADER_BYTES + (int64_t)count * *width;
    if (size < expected)
        return it_error(IT_ERR_FORMAT,
                        "token shard %s: header field n_tokens %d (uint%d) needs a file of %lld bytes, found %lld "
                        "bytes (%lld tokens): truncated or wrong count",
                        path, count, *width * 8, (long long)expected, (long long)size,
                        (long long)((size - IT_SHARD_HEADER_BYTES) / *width));
    if (size > expected)
        return it_error(IT_ERR_FORMAT,
                        "token shard %s: file size: expected %lld bytes (header + %d uint%d tokens), found %lld "
                        "(%lld trailing bytes)",
                        path, (long long)expected, count, *width * 8, (long long)size, (long long)(size - expected));
    *n = count;
    return IT_OK;
}

it_status it_shard_open(const char *path, it_shard **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_shard_open: out is NULL");
    *out = NULL;
    FILE *fp;
    int64_t size;
    it_status st = it_data_open_regular(path, "token shard", &fp, &size);
    if (st) return st;
    if (size < IT_SHARD_HEADER_BYTES) {
        fclose(fp);
        return it_error(IT_ERR_FORMAT, "token shard %s: header: expected %d bytes, found a file of %lld bytes%s", path,
                        IT_SHARD_HEADER_BYTES, (long long)size, size == 0 ? " (empty file)" : " (truncated header)");
    }
    unsigned char h[IT_SHARD_HEADER_BYTES];
    int width = 0;
    int64_t n = 0;
    st = it_data_read_exact(fp, path, h, sizeof h, 0);
    if (!st) st = check_header(path, h, size, &width, &n);
    if (st) {
        fclose(fp);
        return st;
    }

    it_shard *s = calloc(1, sizeof *s);
    size_t plen = strlen(path);
    if (s) {
        s->path = malloc(plen + 1);
        s->tokens = malloc(n > 0 ? (size_t)n * sizeof(uint32_t) : 1);
    }
    if (!s || !s->path || !s->tokens) {
        fclose(fp);
        it_shard_free(s);
        return it_error(IT_ERR_OOM, "token shard %s: out of memory for %lld tokens", path, (long long)n);
    }
    memcpy(s->path, path, plen + 1);
    s->n = n;
    /* Read the raw tokens into the front of the uint32 array, then widen in place from the
     * back: element i is read from bytes [w*i, w*i+w) before bytes [4i, 4i+4) are written, and
     * w*j+w <= 4i for every j < i, so nothing is overwritten before it is read. */
    unsigned char *raw = (unsigned char *)s->tokens;
    st = it_data_read_exact(fp, path, raw, (size_t)n * (size_t)width, IT_SHARD_HEADER_BYTES);
    fclose(fp);
    if (st) {
        it_shard_free(s);
        return st;
    }
    uint32_t mx = 0;
    for (int64_t i = n - 1; i >= 0; i--) {
        const unsigned char *p = raw + (size_t)i * (size_t)width;
        uint32_t v = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)it_data_le_i32(p);
        s->tokens[i] = v;
        if (v > mx) mx = v;
    }
    s->max_token = mx;
    *out = s;
    return IT_OK;
}

it_status it_shard_write(const char *path, const uint32_t *tokens, int64_t n, bool wide) {
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "it_shard_write: empty path");
    if (n < 0 || n > INT32_MAX)
        return it_error(IT_ERR_INVALID_ARG,
                        "token shard %s: n_tokens: expected 0..%d (the header field is int32), found %lld", path,
                        INT32_MAX, (long long)n);
    if (n > 0 && !tokens) return it_error(IT_ERR_INVALID_ARG, "token shard %s: tokens is NULL", path);
    if (!wide) {
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] > 65535)
                return it_error(IT_ERR_INVALID_ARG,
                                "token shard %s: token at position %lld: expected <= 65535 for the uint16 format "
                                "(magic %d), found %u; write the uint32 format (magic %d)",
                                path, (long long)i, IT_SHARD_MAGIC_U16, tokens[i], IT_SHARD_MAGIC_U32);
    }
    unsigned char h[IT_SHARD_HEADER_BYTES] = {0};
    it_data_put_le_i32(h, wide ? IT_SHARD_MAGIC_U32 : IT_SHARD_MAGIC_U16);
    it_data_put_le_i32(h + 4, wide ? IT_SHARD_VERSION_U32 : IT_SHARD_VERSION);
    it_data_put_le_i32(h + 8, (int32_t)n);

    it_afile *f;
    it_status st = it_afile_open(path, &f);
    if (st) return st;
    st = it_afile_write(f, h, sizeof h);
    enum { CHUNK = 16384 };
    unsigned char buf[CHUNK * 4];
    int width = wide ? 4 : 2;
    for (int64_t i = 0; !st && i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        for (int64_t j = 0; j < m; j++) {
            uint32_t v = tokens[i + j];
            unsigned char *p = buf + j * width;
            p[0] = (unsigned char)v;
            p[1] = (unsigned char)(v >> 8);
            if (wide) {
                p[2] = (unsigned char)(v >> 16);
                p[3] = (unsigned char)(v >> 24);
            }
        }
        st = it_afile_write(f, buf, (size_t)m * (size_t)width);
    }
    if (st) {
        it_afile_abort(f);
        return st;
    }
    return it_afile_commit(f);
}
