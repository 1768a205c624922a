/* tiktoken rank files (LLaMA-3's tokenizer.model, cl100k_base.tiktoken): one "base64-token rank"
 * a line, ranks 0..n-1 each once. Encoding pre-tokenizes with cl100k_base's pattern (pretok.c)
 * and merges each pre-token's bytes as tiktoken's byte_pair_merge does: while some adjacent
 * pair of parts concatenates to a token, merge the pair of lowest rank, the leftmost of equal
 * ones. A heap of the current pairs keyed (rank, position), with stale entries skipped, makes
 * that O(n log n) in the pre-token's length (tiktoken rescans: O(n^2)) -- the same merges.
 *
 * Special tokens follow the ranks: LLaMA-3's 256 (128,000 ranks; Meta's llama-models
 * tokenizer.py names), cl100k_base's (100,256 ranks), o200k_base's (199,998 ranks, which also
 * take o200k_base's pattern; it_tiktoken_set_pattern chooses another). Encoding is tiktoken's
 * encode_ordinary: a special token's text in the input is plain text. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data/file_util.h"
#include "infinitrain/data.h"

typedef struct special {
    char *name;
    uint32_t id;
} special;

struct it_tiktoken {
    char *blob;     /* every token's bytes, back to back */
    size_t *off;    /* rank -> offset in blob; off[n] = end */
    uint32_t n;     /* ranks */
    uint32_t *slot; /* open addressing: rank + 1, 0 empty */
    size_t mask;
    special *sp;
    int n_sp;
    int64_t vocab; /* max id + 1 */
    int64_t doc;   /* the document separator llm.c's data scripts put before each document, or -1 */
    bool o200k;    /* o200k_base's pattern, else cl100k_base's */
};

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static size_t tok_len(const it_tiktoken *t, uint32_t r) { return t->off[r + 1] - t->off[r]; }

/* The rank of bytes p[0..n), or -1. */
static int64_t rank_of(const it_tiktoken *t, const unsigned char *p, size_t n) {
    for (size_t h = hash_bytes(p, n) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slot[h];
        if (!v) return -1;
        uint32_t r = v - 1;
        if (tok_len(t, r) == n && memcmp(t->blob + t->off[r], p, n) == 0) return r;
    }
}

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_val((unsigned char)s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return (long)o;
}

static int add_special(it_tiktoken *t, const char *name, uint32_t id) {
    special *sp = realloc(t->sp, sizeof *sp * (size_t)(t->n_sp + 1));
    if (!sp) return -1;
    t->sp = sp;
    if (!(sp[t->n_sp].name = strdup(name))) return -1;
    sp[t->n_sp++].id = id;
    if ((int64_t)id + 1 > t->vocab) t->vocab = (int64_t)id + 1;
    return 0;
}

/* The special tokens of the known rank tables, by their size. */
static int add_specials(it_tiktoken *t) {
    char name[64];
    if (t->n == 128000) { /* LLaMA-3.1 / 3.2 (llama-models' tokenizer.py): 256 from 128000 */
        static const char *const named[] = {"<|begin_of_text|>",
                                            "<|end_of_text|>",
                                            "<|reserved_special_token_0|>",
                                            "<|reserved_special_token_1|>",
                                            "<|finetune_right_pad_id|>",
                                            "<|step_id|>",
                                            "<|start_header_id|>",
                                            "<|end_header_id|>",
                                            "<|eom_id|>",
                                            "<|eot_id|>",
                                            "<|python_tag|>"};
        int k = (int)(sizeof named / sizeof named[0]);
        for (int i = 0; i < 256; i++) {
            if (i < k)
                snprintf(name, sizeof name, "%s", named[i]);
            else
                snprintf(name, sizeof name, "<|reserved_special_token_%d|>", 2 + i - k);
            if (add_special(t, name, 128000u + (uint32_t)i)) return -1;
        }
        t->doc = 128000;         /* llm.c's fineweb.py: <|begin_of_text|> before each document */
    } else if (t->n == 100256) { /* cl100k_base */
        if (add_special(t, "<|endoftext|>", 100257) || add_special(t, "<|fim_prefix|>", 100258) ||
            add_special(t, "<|fim_middle|>", 100259) || add_special(t, "<|fim_suffix|>", 100260) ||
            add_special(t, "<|endofprompt|>", 100276))
            return -1;
        t->doc = 100257;
    } else if (t->n == 199998) { /* o200k_base, with its own pattern */
        if (add_special(t, "<|endoftext|>", 199999) || add_special(t, "<|endofprompt|>", 200018)) return -1;
        t->doc = 199999;
        t->o200k = true;
    }
    return 0;
}

it_status it_tiktoken_load(const char *path, it_tiktoken **out) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    it_status st = it_data_read_file(path, "tiktoken rank file", &buf, &len);
    if (st) return st;
    it_tiktoken *t = calloc(1, sizeof *t);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    lines += 1;
    /* base64 never grows: the blob needs at most the file's bytes */
    if (t) t->blob = malloc(len + 1), t->off = malloc(sizeof(size_t) * (lines + 1));
    if (!t || !t->blob || !t->off) {
        it_tiktoken_free(t);
        free(buf);
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    /* pass 1: the tokens in file order with their ranks; then placed by rank */
    uint32_t *rank_at = malloc(sizeof(uint32_t) * lines + 1);
    size_t *line_off = malloc(sizeof(size_t) * (lines + 1)), count = 0, blob_len = 0;
    if (!rank_at || !line_off) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    size_t line_no = 0;
    for (char *p = buf, *end = buf + len; !st && p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
        line_no++;
        size_t ll = (size_t)(eol - p);
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll) {
            char *sp = memchr(p, ' ', ll);
            char *num_end = NULL;
            long long r = sp ? strtoll(sp + 1, &num_end, 10) : -1;
            long got = sp ? b64_decode(p, (size_t)(sp - p), (unsigned char *)t->blob + blob_len) : -1;
            if (!sp || num_end != p + ll || r < 0 || r > 0x7fffffff || got <= 0) {
                st = it_error(IT_ERR_FORMAT, "%s: line %zu: expected 'base64-token rank', found '%.*s'", path, line_no,
                              (int)(ll > 60 ? 60 : ll), p);
                break;
            }
            line_off[count] = blob_len;
            rank_at[count++] = (uint32_t)r;
            blob_len += (size_t)got;
        }
        p = eol + (nl ? 1 : 0);
    }
    line_off[count] = blob_len;
    /* ranks must be 0..count-1, each once */
    uint32_t *line_of = st ? NULL : malloc(sizeof(uint32_t) * (count + 1));
    if (!st && !line_of) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    if (!st) memset(line_of, 0xff, sizeof(uint32_t) * (count + 1));
    for (size_t i = 0; i < count && !st; i++) {
        if (rank_at[i] >= count)
            st = it_error(IT_ERR_FORMAT, "%s: token %zu has rank %u; %zu tokens need ranks 0..%zu, each once", path,
                          i + 1, rank_at[i], count, count - 1);
        else if (line_of[rank_at[i]] != 0xffffffffu)
            st = it_error(IT_ERR_FORMAT, "%s: rank %u appears twice (tokens %u and %zu)", path, rank_at[i],
                          line_of[rank_at[i]] + 1, i + 1);
        else
            line_of[rank_at[i]] = (uint32_t)i;
    }
    if (!st && count == 0) st = it_error(IT_ERR_FORMAT, "%s: no tokens", path);
    char *blob = st ? NULL : malloc(blob_len + 1);
    if (!st && !blob) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    if (!st) { /* by rank */
        size_t o = 0;
        for (size_t r = 0; r < count; r++) {
            size_t i = line_of[r], l = line_off[i + 1] - line_off[i];
            memcpy(blob + o, t->blob + line_off[i], l);
            t->off[r] = o;
            o += l;
        }
        t->off[count] = o;
        free(t->blob);
        t->blob = blob;
        t->n = (uint32_t)count;
        t->vocab = (int64_t)count;
        t->doc = -1;
        size_t cap = 1;
        while (cap < 2 * count) cap <<= 1;
        t->slot = calloc(cap, sizeof *t->slot);
        t->mask = cap - 1;
        if (!t->slot) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    for (uint32_t r = 0; !st && r < t->n; r++) {
        const unsigned char *p = (const unsigned char *)t->blob + t->off[r];
        size_t h = hash_bytes(p, tok_len(t, r)) & t->mask;
        while (t->slot[h]) {
            uint32_t o = t->slot[h] - 1;
            if (tok_len(t, o) == tok_len(t, r) && memcmp(t->blob + t->off[o], p, tok_len(t, r)) == 0) {
                st = it_error(IT_ERR_FORMAT, "%s: ranks %u and %u are the same bytes", path, o, r);
                break;
            }
            h = (h + 1) & t->mask;
        }
        if (!st) t->slot[h] = r + 1;
    }
    for (int b = 0; !st && b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (rank_of(t, &c, 1) < 0)
            st = it_error(IT_ERR_FORMAT, "%s: byte 0x%02x has no rank (a byte-level table has all 256)", path, b);
    }
    if (!st && add_specials(t)) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    free(rank_at);
    free(line_off);
    free(line_of);
    free(buf);
    if (st) {
        it_tiktoken_free(t);
        return st;
    }
    *out = t;
    return IT_OK;
}

void it_tiktoken_free(it_tiktoken *t) {
    if (!t) return;
    for (int i = 0; i < t->n_sp; i++) free(t->sp[i].name);
    free(t->sp);
    free(t->slot);
    free(t->off);
    free(t->blob);
    free(t);
}

it_status it_tiktoken_set_pattern(it_tiktoken *t, const char *name) {
    if (!t || !name) return it_error(IT_ERR_INVALID_ARG, "tiktoken: no tokenizer or pattern");
    if (strcmp(name, "cl100k") == 0 || strcmp(name, "cl100k_base") == 0)
        t->o200k = false;
    else if (strcmp(name, "o200k") == 0 || strcmp(name, "o200k_base") == 0)
        t->o200k = true;
    else
        return it_error(IT_ERR_INVALID_ARG,
                        "pattern '%s': the pre-tokenizer patterns here are cl100k (cl100k_base's, LLaMA-3's) and "
                        "o200k (o200k_base's); another regex is not compiled here",
                        name);
    return IT_OK;
}

const char *it_tiktoken_pattern_name(const it_tiktoken *t) { return t && t->o200k ? "o200k" : "cl100k"; }

int64_t it_tiktoken_vocab_size(const it_tiktoken *t) { return t ? t->vocab : 0; }
int64_t it_tiktoken_rank_count(const it_tiktoken *t) { return t ? t->n : 0; }
int64_t it_tiktoken_doc_separator(const it_tiktoken *t) { return t ? t->doc : -1; }
int it_tiktoken_special_count(const it_tiktoken *t) { return t ? t->n_sp : 0; }

const char *it_tiktoken_special_at(const it_tiktoken *t, int i, uint32_t *id) {
    if (!t || i < 0 || i >= t->n_sp) return NULL;
    if (id) *id = t->sp[i].id;
    return t->sp[i].name;
}

const char *it_tiktoken_token_bytes(const it_tiktoken *t, uint32_t id, size_t *len) {
    if (!t) return NULL;
    if (id < t->n) {
        if (len) *len = tok_len(t, id);
        return t->blob + t->off[id];
    }
    for (int i = 0; i < t->n_sp; i++)
        if (t->sp[i].id == id) {
            if (len) *len = strlen(t->sp[i].name);
            return t->sp[i].name;
        }
    return NULL;
}

int64_t it_tiktoken_token_id(const it_tiktoken *t, const char *bytes, size_t len) {
    return t ? rank_of(t, (const unsigned char *)bytes, len) : -1;
}

/* ---- byte_pair_merge --------------------------------------------------------------------------- */

typedef struct pair {
    uint32_t rank;
    uint32_t pos; /* the left part's first byte */
    uint32_t ver; /* the left part's version when pushed */
} pair;

static int pair_less(const pair *a, const pair *b) { return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos; }

static void heap_push(pair *h, size_t *n, pair p) {
    size_t i = (*n)++;
    while (i) {
        size_t up = (i - 1) / 2;
        if (!pair_less(&p, &h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = p;
}

static pair heap_pop(pair *h, size_t *n) {
    pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_less(&h[c + 1], &h[c])) c++;
        if (!pair_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Scratch for one pre-token of up to cap bytes. */
typedef struct merge_buf {
    uint32_t *next, *prev, *ver;
    pair *heap;
    size_t cap;
} merge_buf;

static int merge_reserve(merge_buf *m, size_t n) {
    if (n <= m->cap) return 0;
    size_t cap = m->cap ? m->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *a = realloc(m->next, sizeof(uint32_t) * (cap + 1)),
             *b = a ? realloc(m->prev, sizeof(uint32_t) * (cap + 1)) : NULL;
    if (a) m->next = a;
    if (b) m->prev = b;
    uint32_t *c = b ? realloc(m->ver, sizeof(uint32_t) * (cap + 1)) : NULL;
    if (c) m->ver = c;
    pair *h = c ? realloc(m->heap, sizeof(pair) * 2 * (cap + 1)) : NULL;
    if (h) m->heap = h;
    if (!h) return -1;
    m->cap = cap;
    return 0;
}

/* The rank of parts [a, next[a]) + [next[a], next[next[a]]), or UINT32_MAX. */
static uint32_t pair_rank(const it_tiktoken *t, const unsigned char *p, const merge_buf *m, uint32_t a, uint32_t n) {
    uint32_t b = m->next[a];
    if (b >= n) return UINT32_MAX;
    int64_t r = rank_of(t, p + a, m->next[b] - a);
    return r < 0 ? UINT32_MAX : (uint32_t)r;
}

/* Appends the tokens of piece p[0..n) to out. */
static int encode_piece(const it_tiktoken *t, const unsigned char *p, uint32_t n, merge_buf *m, uint32_t **out,
                        size_t *len, size_t *cap) {
    int64_t whole = rank_of(t, p, n);
    size_t need = whole >= 0 ? 1 : n;
    if (*len + need > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + need) c *= 2;
        uint32_t *o = realloc(*out, sizeof(uint32_t) * c);
        if (!o) return -1;
        *out = o, *cap = c;
    }
    if (whole >= 0) {
        (*out)[(*len)++] = (uint32_t)whole;
        return 0;
    }
    if (merge_reserve(m, n)) return -1;
    size_t hn = 0;
    for (uint32_t i = 0; i < n; i++) m->next[i] = i + 1, m->prev[i] = i ? i - 1 : UINT32_MAX, m->ver[i] = 0;
    m->next[n] = n;
    for (uint32_t i = 0; i + 1 < n; i++) {
        uint32_t r = pair_rank(t, p, m, i, n);
        if (r != UINT32_MAX) heap_push(m->heap, &hn, (pair){r, i, 0});
    }
    while (hn) {
        pair top = heap_pop(m->heap, &hn);
        uint32_t a = top.pos;
        if (m->ver[a] != top.ver || m->next[a] >= n) continue; /* stale: a changed since */
        uint32_t b = m->next[a];
        /* merge b into a */
        m->next[a] = m->next[b];
        if (m->next[b] < n) m->prev[m->next[b]] = a;
        m->ver[b] = UINT32_MAX; /* b's pairs are gone */
        m->ver[a]++;
        uint32_t r = pair_rank(t, p, m, a, n);
        if (r != UINT32_MAX) heap_push(m->heap, &hn, (pair){r, a, m->ver[a]});
        uint32_t pa = m->prev[a];
        if (pa != UINT32_MAX) {
            m->ver[pa]++;
            r = pair_rank(t, p, m, pa, n);
            if (r != UINT32_MAX) heap_push(m->heap, &hn, (pair){r, pa, m->ver[pa]});
        }
    }
    for (uint32_t a = 0; a < n; a = m->next[a]) (*out)[(*len)++] = (uint32_t)rank_of(t, p + a, m->next[a] - a);
    return 0;
}

it_status it_tiktoken_encode(const it_tiktoken *t, const char *text, size_t len, uint32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (!t) return it_error(IT_ERR_INVALID_ARG, "tiktoken: no tokenizer");
    merge_buf m = {0};
    size_t cap = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end =
            t->o200k ? it_tiktoken_pretoken_end_o200k(text, len, pos) : it_tiktoken_pretoken_end(text, len, pos);
        if (end - pos > UINT32_MAX - 2 ||
            encode_piece(t, (const unsigned char *)text + pos, (uint32_t)(end - pos), &m, ids, n, &cap)) {
            free(*ids), *ids = NULL, *n = 0;
            free(m.next), free(m.prev), free(m.ver), free(m.heap);
            return it_error(IT_ERR_OOM, "tiktoken: out of host memory for a pre-token of %zu bytes", end - pos);
        }
        pos = end;
    }
    free(m.next), free(m.prev), free(m.ver), free(m.heap);
    return IT_OK;
}
