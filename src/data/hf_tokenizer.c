/* Hugging Face tokenizer.json, byte-level BPE (GPT-2, LLaMA-3, Qwen2/2.5/3), encoded as the
 * tokenizers library does:
 *
 *   1. added_tokens' text is split out of the input (leftmost, then longest: special_match.c);
 *   2. each piece between them is pre-tokenized by the file's pattern, recognized by its exact
 *      string and run by a hand-written matcher (pretok.c, bpe.c's GPT-2 one);
 *   3. each pre-token's UTF-8 bytes are byte symbols (the vocabulary spells them through GPT-2's
 *      bytes_to_unicode; on load every token is mapped back to raw bytes, so all here is bytes),
 *      and adjacent symbols are merged by rank, the lowest first and the leftmost of equal ones,
 *      with a heap (tokenizers' Word::merge_all) -- O(n log n) in the pre-token's length;
 *      model.ignore_merges takes a pre-token that is itself a token whole.
 *
 * A pair merges to the token of its concatenation, checked on load (tokenizers refuses a merge
 * whose parts or result are not in the vocabulary; so do we). A repeated merge takes its later
 * rank, as tokenizers' map from the merges list does. Tokenizers sees text as Rust strings, so
 * it never meets invalid UTF-8; here each invalid byte is one character of no class to the
 * pre-tokenizer and then simply its byte symbol: the tokens' bytes are the input's, always. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "data/file_util.h"
#include "data/pretok.h"
#include "data/special_match.h"
#include "infinitrain/data.h"

#define HF_MAX_VOCAB (1 << 24) /* ids 0 .. 2^24-1, as bpe.c bounds encoder.json's */

enum { PAT_GPT2, PAT_CL100K, PAT_QWEN2, PAT_COUNT };

/* The regexes as tokenizer.json spells them (JSON-decoded). */
static const char *const PATTERN[PAT_COUNT] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const PATTERN_NAME[PAT_COUNT] = {"gpt2", "cl100k", "qwen2"};
#define SUPPORTED_PATTERNS                                                                                             \
    "ByteLevel with use_regex (GPT-2's pattern), or Split with GPT-2's, cl100k_base's (LLaMA-3) or Qwen2's "           \
    "regex then ByteLevel without use_regex"

typedef struct added {
    char *content;
    size_t len;
    uint32_t id;
    bool special;
} added;

typedef struct merge_slot {
    uint64_t key; /* left id << 32 | right id */
    uint32_t rank, result;
} merge_slot; /* rank UINT32_MAX: empty */

#define NOT_MODEL UINT32_MAX /* len[] of an id model.vocab does not have */

struct it_hf_tokenizer {
    int64_t vocab;    /* max id + 1, added tokens included */
    size_t max_len;   /* the longest model.vocab token's raw bytes */
    char *blob;       /* model.vocab tokens' raw bytes, back to back */
    size_t *off;      /* id -> offset in blob */
    uint32_t *len;    /* id -> length, NOT_MODEL */
    int32_t *added_i; /* id -> index in added[], or -1 */
    uint32_t *slot;   /* raw bytes -> id: open addressing, id + 1, 0 empty */
    size_t mask;
    merge_slot *merges;
    size_t merge_mask;
    uint32_t byte_id[256];
    added *added;
    int n_added;
    it_special_match *match;
    int pattern;
    bool ignore_merges;
    bool nfc; /* normalizer NFC (Qwen's): the text between added tokens composed first */
    int64_t bos, doc;
};

/* ---- errors -------------------------------------------------------------------------------- */

/* "tokenizer.json PATH: " + the message. */
static it_status hf_error(it_status st, const char *path, const char *fmt, ...) IT_PRINTF(3, 4);
static it_status hf_error(it_status st, const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return it_error(st, "tokenizer.json %s: %s", path, msg);
}

/* A JSON value, compact and cut to fit a message (malloc'd; "?" when out of memory). */
static char *show(const json_t *v) {
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : strdup("(absent)");
    if (s && strlen(s) > 80) strcpy(s + 74, "[...]");
    return s ? s : strdup("?");
}

/* s for a message, one line: its first 60 bytes, control characters escaped (\xNN). */
static const char *quoted(const char *s, char out[256]) {
    size_t o = 0;
    for (size_t i = 0; s[i] && i < 60; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = 0;
    return out;
}

static const char *type_of(const json_t *obj) {
    const char *s = json_string_value(json_object_get(obj, "type"));
    return s ? s : "";
}

/* ---- bytes_to_unicode ---------------------------------------------------------------------- */

/* code point (< 324) -> byte + 1 (0 = none), as GPT-2's bytes_to_unicode() inverted. */
static void unicode_to_byte(uint16_t u2b[324]) {
    memset(u2b, 0, 324 * sizeof u2b[0]);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        u2b[printable ? b : 256 + n++] = (uint16_t)(b + 1);
    }
}

/* s[0..n) spelled in bytes_to_unicode -> raw bytes in out (never longer). Returns 0, or the
 * first code point outside the map + 1 (U+FFFD + 1 for a byte that is not UTF-8). */
static uint32_t unmap(const uint16_t u2b[324], const char *s, size_t n, char *out, size_t *out_len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0xFFFD;
        size_t k = 1;
        if (u[i] < 0x80) {
            cp = u[i];
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F);
            k = 2;
        } else if ((u[i] & 0xF0) == 0xE0 && i + 2 < n) { /* only to name it: every mapped one is < U+0800 */
            cp = (uint32_t)(u[i] & 0x0F) << 12 | (uint32_t)(u[i + 1] & 0x3F) << 6 | (u[i + 2] & 0x3F);
        }
        if (cp >= 324 || !u2b[cp]) return cp + 1;
        out[o++] = (char)(u2b[cp] - 1);
        i += k;
    }
    *out_len = o;
    return 0;
}

/* ---- lookups ------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

/* The model.vocab id of raw bytes p[0..n), or -1. */
static int64_t vocab_find(const it_hf_tokenizer *t, const unsigned char *p, size_t n) {
    for (size_t h = hash_bytes(p, n) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slot[h];
        if (!v) return -1;
        uint32_t id = v - 1;
        if (t->len[id] == n && memcmp(t->blob + t->off[id], p, n) == 0) return id;
    }
}

static const merge_slot *merge_find(const it_hf_tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    for (size_t i = hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *m = &t->merges[i];
        if (m->rank == UINT32_MAX) return NULL;
        if (m->key == key) return m;
    }
}

/* ---- loading ------------------------------------------------------------------------------- */

/* An id field: an integer 0..HF_MAX_VOCAB-1, else -1. */
static int64_t id_value(const json_t *v) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x >= 0 && x < HF_MAX_VOCAB ? (int64_t)x : -1;
}

/* model.vocab -> t->blob/off/len/slot (t->vocab, len[] allocated by the caller for every id). */
static it_status load_vocab(it_hf_tokenizer *t, const char *path, const json_t *vocab, const uint16_t u2b[324]) {
    char q[256]; /* quoted() */
    size_t total = 0, count = json_object_size(vocab), cap = 1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) total += strlen(key);
    while (cap < 2 * count + 2) cap <<= 1;
    t->blob = malloc(total + 1);
    t->slot = calloc(cap, sizeof *t->slot);
    if (!t->blob || !t->slot) return hf_error(IT_ERR_OOM, path, "out of host memory for model.vocab");
    t->mask = cap - 1;
    size_t o = 0;
    json_object_foreach((json_t *)vocab, key, v) {
        uint32_t id = (uint32_t)id_value(v), bad;
        size_t n = 0;
        if ((bad = unmap(u2b, key, strlen(key), t->blob + o, &n)))
            return hf_error(IT_ERR_FORMAT, path,
                            "model.vocab: token \"%s\" has U+%04X, not a character of the byte-level alphabet "
                            "(GPT-2's bytes_to_unicode)",
                            quoted(key, q), bad - 1);
        if (t->len[id] != NOT_MODEL) {
            char *a = strndup(t->blob + t->off[id], t->len[id]);
            char q2[256];
            it_status st = hf_error(IT_ERR_FORMAT, path, "model.vocab: id %u is given twice (\"%s\" and \"%s\")", id,
                                    quoted(key, q), quoted(a ? a : "?", q2));
            free(a);
            return st;
        }
        t->off[id] = o, t->len[id] = (uint32_t)n;
        if (n > t->max_len) t->max_len = n;
        size_t h = hash_bytes((const unsigned char *)t->blob + o, n) & t->mask;
        while (t->slot[h]) h = (h + 1) & t->mask; /* distinct keys are distinct bytes: the map is 1:1 */
        t->slot[h] = id + 1;
        o += n;
    }
    return IT_OK;
}

/* The id of a merge part (bytes_to_unicode spelling), or -1 (buf: scratch of max_len bytes). */
static int64_t part_id(const it_hf_tokenizer *t, const uint16_t u2b[324], const char *s, size_t n, char *buf,
                       size_t *raw) {
    *raw = 0;
    if (n > 2 * t->max_len || unmap(u2b, s, n, buf, raw) || *raw > t->max_len) return -1; /* (2 bytes a char at most) */
    return vocab_find(t, (const unsigned char *)buf, *raw);
}

static it_status load_merges(it_hf_tokenizer *t, const char *path, const json_t *merges, const uint16_t u2b[324]) {
    size_t count = json_array_size(merges), cap = 1024;
    while (cap < 2 * count + 2) cap <<= 1;
    t->merges = malloc(cap * sizeof *t->merges);
    char *buf = malloc(4 * t->max_len + 2); /* two parts, unmapped: each up to twice max_len before the check */
    if (!t->merges || !buf) {
        free(buf);
        return hf_error(IT_ERR_OOM, path, "out of host memory for %zu merges", count);
    }
    for (size_t i = 0; i < cap; i++) t->merges[i] = (merge_slot){0, UINT32_MAX, 0};
    t->merge_mask = cap - 1;
    it_status st = IT_OK;
    for (size_t i = 0; i < count && !st; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        if (json_is_string(m)) { /* "a b": exactly one space, as tokenizers splits it */
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (sp && !strchr(sp + 1, ' ')) an = (size_t)(sp - a), b = sp + 1, bn = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), an = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), bn = json_string_length(json_array_get(m, 1));
        }
        if (!b || !an || !bn) {
            char *s = show(m);
            st = hf_error(IT_ERR_FORMAT, path, "model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"], found %s", i, s);
            free(s);
            break;
        }
        size_t ra = 0, rb = 0;
        int64_t ia = part_id(t, u2b, a, an, buf, &ra), ib = part_id(t, u2b, b, bn, buf + ra, &rb);
        int64_t ir = ia >= 0 && ib >= 0 ? vocab_find(t, (const unsigned char *)buf, ra + rb) : -1;
        if (ir < 0) {
            char *s = show(m);
            st = hf_error(IT_ERR_FORMAT, path, "model.merges[%zu] %s: %s is not in model.vocab", i, s,
                          ia < 0   ? "the first part"
                          : ib < 0 ? "the second part"
                                   : "the merged token");
            free(s);
            break;
        }
        uint64_t key = (uint64_t)ia << 32 | (uint64_t)ib;
        size_t h = hash_u64(key) & t->merge_mask;
        while (t->merges[h].rank != UINT32_MAX && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
        t->merges[h] = (merge_slot){key, (uint32_t)i, (uint32_t)ir};
    }
    free(buf);
    return st;
}

/* added_tokens -> t->added (ids checked, vocabulary size raised). */
static it_status load_added(it_hf_tokenizer *t, const char *path, const json_t *arr) {
    char q[256]; /* quoted() */
    size_t n = json_array_size(arr);
    if (n > INT32_MAX / 2) return hf_error(IT_ERR_FORMAT, path, "added_tokens: %zu entries", n);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return hf_error(IT_ERR_OOM, path, "out of host memory for added_tokens");
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(arr, i), *content = json_object_get(a, "content");
        int64_t id = id_value(json_object_get(a, "id"));
        if (!json_is_object(a) || id < 0 || !json_is_string(content) || !json_string_length(content)) {
            char *s = show(a);
            it_status st =
                hf_error(IT_ERR_FORMAT, path,
                         "added_tokens[%zu]: expected {\"id\": 0..%d, \"content\": a non-empty string, ...}, "
                         "found %s",
                         i, HF_MAX_VOCAB - 1, s);
            free(s);
            return st;
        }
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (json_is_true(json_object_get(a, unsupported[k])))
                return hf_error(IT_ERR_UNSUPPORTED, path,
                                "added_tokens[%zu] (\"%s\"): \"%s\": true is not supported (only false)", i,
                                quoted(json_string_value(content), q), unsupported[k]);
        added *d = &t->added[t->n_added++];
        d->len = json_string_length(content);
        d->content = malloc(d->len + 1);
        if (!d->content) return hf_error(IT_ERR_OOM, path, "out of host memory for added_tokens");
        memcpy(d->content, json_string_value(content), d->len + 1);
        d->id = (uint32_t)id;
        d->special = json_is_true(json_object_get(a, "special"));
        if (id + 1 > t->vocab) t->vocab = id + 1;
    }
    return IT_OK;
}

/* The pattern of a ByteLevel pre-tokenizer, or of a Sequence [Split(regex), ByteLevel]. */
static it_status load_pre_tokenizer(it_hf_tokenizer *t, const char *path, const json_t *pre) {
    const char *type = type_of(pre);
    const json_t *split = NULL, *byte_level = NULL;
    if (strcmp(type, "ByteLevel") == 0) {
        byte_level = pre;
    } else if (strcmp(type, "Sequence") == 0) {
        const json_t *seq = json_object_get(pre, "pretokenizers");
        if (json_array_size(seq) == 2 && strcmp(type_of(json_array_get(seq, 0)), "Split") == 0 &&
            strcmp(type_of(json_array_get(seq, 1)), "ByteLevel") == 0)
            split = json_array_get(seq, 0), byte_level = json_array_get(seq, 1);
    }
    if (!byte_level) {
        char *s = show(pre);
        it_status st =
            hf_error(IT_ERR_UNSUPPORTED, path, "pre_tokenizer %s: not supported; supported: " SUPPORTED_PATTERNS, s);
        free(s);
        return st;
    }
    if (json_is_true(json_object_get(byte_level, "add_prefix_space")))
        return hf_error(IT_ERR_UNSUPPORTED, path,
                        "pre_tokenizer: ByteLevel \"add_prefix_space\": true is not supported (only false)");
    const json_t *use_regex = json_object_get(byte_level, "use_regex");
    bool regex = !use_regex || json_is_true(use_regex); /* tokenizers' default: true */
    if (!split) {
        if (!regex)
            return hf_error(IT_ERR_UNSUPPORTED, path,
                            "pre_tokenizer: ByteLevel with \"use_regex\": false and no Split is not supported; "
                            "supported: " SUPPORTED_PATTERNS);
        t->pattern = PAT_GPT2;
        return IT_OK;
    }
    if (regex)
        return hf_error(IT_ERR_UNSUPPORTED, path,
                        "pre_tokenizer: Split then ByteLevel with \"use_regex\": true (two patterns) is not supported; "
                        "supported: " SUPPORTED_PATTERNS);
    const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    if (!behavior || strcmp(behavior, "Isolated") != 0 || json_is_true(json_object_get(split, "invert")))
        return hf_error(IT_ERR_UNSUPPORTED, path,
                        "pre_tokenizer: Split \"behavior\" \"%s\"%s is not supported (only \"Isolated\", not inverted)",
                        behavior ? behavior : "(absent)",
                        json_is_true(json_object_get(split, "invert")) ? " inverted" : "");
    for (int p = 0; re && p < PAT_COUNT; p++)
        if (strcmp(re, PATTERN[p]) == 0) {
            t->pattern = p;
            return IT_OK;
        }
    char *s = show(json_object_get(split, "pattern"));
    it_status st = hf_error(IT_ERR_UNSUPPORTED, path,
                            "pre_tokenizer: Split pattern %s is not one of the patterns supported (" SUPPORTED_PATTERNS
                            "); another regex is not compiled here",
                            s);
    free(s);
    return st;
}

/* TemplateProcessing (alone or in a Sequence): the special token before $A in "single".
 * Sets *found when the file has a TemplateProcessing. */
static it_status load_post_processor(it_hf_tokenizer *t, const char *path, const json_t *pp, bool *found) {
    char q[256]; /* quoted() */
    const char *type = type_of(pp);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *seq = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(seq); i++) {
            it_status st = load_post_processor(t, path, json_array_get(seq, i), found);
            if (st) return st;
        }
        return IT_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return IT_OK;
    *found = true;
    const json_t *single = json_object_get(pp, "single");
    for (size_t i = 0; i < json_array_size(single); i++) {
        const json_t *item = json_array_get(single, i);
        if (json_object_get(item, "Sequence")) break; /* $A: what follows it is no BOS */
        const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        if (!name) continue;
        const json_t *ids = json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name), "ids");
        int64_t id = id_value(json_array_get(ids, 0));
        if (id < 0 || id >= t->vocab)
            return hf_error(IT_ERR_FORMAT, path,
                            "post_processor: TemplateProcessing special_tokens[\"%s\"].ids: expected a token id "
                            "0..%lld, found none or another",
                            quoted(name, q), (long long)t->vocab - 1);
        t->bos = id;
        return IT_OK;
    }
    return IT_OK;
}

/* Whether a normalizer is NFC, alone or as the one member of a Sequence. */
static bool is_nfc(const json_t *v) {
    if (strcmp(type_of(v), "Sequence") == 0) {
        const json_t *list = json_object_get(v, "normalizers");
        return json_array_size(list) == 1 && strcmp(type_of(json_array_get(list, 0)), "NFC") == 0;
    }
    return strcmp(type_of(v), "NFC") == 0;
}

/* The rest of the fields: model's options, normalizer (NFC sets *nfc), decoder. */
static it_status check_options(const char *path, const json_t *root, const json_t *model, bool *nfc) {
    const json_t *v = json_object_get(model, "type");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "BPE") != 0)) {
        char *s = show(v);
        it_status st = hf_error(IT_ERR_UNSUPPORTED, path, "model.type %s: only \"BPE\" is supported", s);
        free(s);
        return st;
    }
    v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
        return hf_error(IT_ERR_UNSUPPORTED, path, "model.dropout: %g is not supported (only null)",
                        json_number_value(v));
    static const char *const empty[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(model, empty[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return hf_error(IT_ERR_UNSUPPORTED, path, "model.%s: \"%.40s\" is not supported (only null or \"\")",
                            empty[k], json_string_value(v) ? json_string_value(v) : "?");
    }
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return hf_error(IT_ERR_UNSUPPORTED, path, "model.byte_fallback: true is not supported (a byte-level BPE)");
    v = json_object_get(root, "normalizer");
    *nfc = v && is_nfc(v);
    if (v && !json_is_null(v) && !*nfc &&
        !(strcmp(type_of(v), "Sequence") == 0 && json_array_size(json_object_get(v, "normalizers")) == 0)) {
        char *s = show(v);
        it_status st = hf_error(IT_ERR_UNSUPPORTED, path, "normalizer %s: not supported (only null or NFC)", s);
        free(s);
        return st;
    }
    v = json_object_get(root, "decoder");
    if (v && !json_is_null(v) && strcmp(type_of(v), "ByteLevel") != 0) {
        char *s = show(v);
        it_status st = hf_error(IT_ERR_UNSUPPORTED, path,
                                "decoder %s: not supported (only ByteLevel: tokens decode to their bytes)", s);
        free(s);
        return st;
    }
    return IT_OK;
}

static it_status load_json(it_hf_tokenizer *t, const char *path, const json_t *root) {
    char q[256]; /* quoted() */
    uint16_t u2b[324];
    unicode_to_byte(u2b);
    if (!json_is_object(root)) return hf_error(IT_ERR_FORMAT, path, "expected a JSON object at the top");
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return hf_error(IT_ERR_FORMAT, path, "model: expected an object");
    it_status st = check_options(path, root, model, &t->nfc);
    if (st) return st;
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return hf_error(IT_ERR_FORMAT, path, "model.vocab: expected an object of token -> id, found %s",
                        json_is_object(vocab) ? "an empty one" : "none");
    if (!json_is_array(merges)) return hf_error(IT_ERR_FORMAT, path, "model.merges: expected an array");
    const json_t *ignore = json_object_get(model, "ignore_merges");
    if (ignore && !json_is_boolean(ignore) && !json_is_null(ignore))
        return hf_error(IT_ERR_FORMAT, path, "model.ignore_merges: expected true or false");
    t->ignore_merges = json_is_true(ignore);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        int64_t id = id_value(v);
        if (id < 0) {
            char *s = show(v);
            st = hf_error(IT_ERR_FORMAT, path, "model.vocab[\"%s\"]: expected an id 0..%d, found %s", quoted(key, q),
                          HF_MAX_VOCAB - 1, s);
            free(s);
            return st;
        }
        if (id + 1 > t->vocab) t->vocab = id + 1;
    }
    const json_t *added_tokens = json_object_get(root, "added_tokens");
    if (added_tokens && !json_is_null(added_tokens) && !json_is_array(added_tokens))
        return hf_error(IT_ERR_FORMAT, path, "added_tokens: expected an array");
    if ((st = load_added(t, path, added_tokens))) return st;
    size_t nv = (size_t)t->vocab;
    t->off = malloc(nv * sizeof *t->off);
    t->len = malloc(nv * sizeof *t->len);
    t->added_i = malloc(nv * sizeof *t->added_i);
    if (!t->off || !t->len || !t->added_i) return hf_error(IT_ERR_OOM, path, "out of host memory for %zu ids", nv);
    for (size_t i = 0; i < nv; i++) t->len[i] = NOT_MODEL, t->added_i[i] = -1;
    if ((st = load_vocab(t, path, vocab, u2b))) return st;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        int64_t id = vocab_find(t, &c, 1);
        if (id < 0)
            return hf_error(IT_ERR_FORMAT, path,
                            "model.vocab: no token for byte 0x%02x (a byte-level vocabulary has all 256)", b);
        t->byte_id[b] = (uint32_t)id;
    }
    if ((st = load_merges(t, path, merges, u2b))) return st;
    if (!(t->match = it_special_match_new())) return hf_error(IT_ERR_OOM, path, "out of host memory");
    for (int i = 0; i < t->n_added; i++) {
        added *d = &t->added[i];
        if (t->added_i[d->id] >= 0) {
            added *o = &t->added[t->added_i[d->id]];
            return hf_error(IT_ERR_FORMAT, path, "added_tokens[%d]: id %u is also added_tokens[%d]'s (\"%s\")", i,
                            d->id, t->added_i[d->id], quoted(o->content, q));
        }
        if (t->len[d->id] != NOT_MODEL &&
            (t->len[d->id] != d->len || memcmp(t->blob + t->off[d->id], d->content, d->len) != 0)) {
            char q2[256];
            char *m = strndup(t->blob + t->off[d->id], t->len[d->id]);
            it_status st2 =
                hf_error(IT_ERR_FORMAT, path, "added_tokens[%d] (\"%s\"): id %u is model.vocab's \"%s\", other bytes",
                         i, quoted(d->content, q), d->id, quoted(m ? m : "?", q2));
            free(m);
            return st2;
        }
        t->added_i[d->id] = i;
        if (it_special_match_add(t->match, d->content, d->len, d->id))
            return hf_error(IT_ERR_OOM, path, "out of host memory");
    }
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    if ((st = load_pre_tokenizer(t, path, pre))) return st;
    bool template = false;
    t->bos = -1;
    if ((st = load_post_processor(t, path, json_object_get(root, "post_processor"), &template))) return st;
    if (!template) { /* LLaMA-3's first tokenizer.json: Meta's tokenizer still starts texts with it */
        int64_t b = it_hf_tokenizer_token_id(t, "<|begin_of_text|>", 17);
        if (b >= 0 && t->added_i[b] >= 0) t->bos = b;
    }
    t->doc = t->bos >= 0 ? t->bos : it_hf_tokenizer_token_id(t, "<|endoftext|>", 13);
    return IT_OK;
}

it_status it_hf_tokenizer_load(const char *path, it_hf_tokenizer **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_hf_tokenizer_load: out is NULL");
    *out = NULL;
    char *buf;
    size_t len;
    it_status st = it_data_read_file(path, "tokenizer.json", &buf, &len);
    if (st) return st;
    json_error_t err;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    free(buf);
    if (!root) {
        for (char *c = err.text; *c; c++) /* it quotes the text near the error: keep the message one line */
            if ((unsigned char)*c < 0x20) *c = ' ';
        return hf_error(IT_ERR_FORMAT, path, "not valid JSON: line %d, column %d: %s", err.line, err.column, err.text);
    }
    it_hf_tokenizer *t = calloc(1, sizeof *t);
    st = t ? load_json(t, path, root) : hf_error(IT_ERR_OOM, path, "out of host memory");
    json_decref(root);
    if (st) {
        it_hf_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IT_OK;
}

void it_hf_tokenizer_free(it_hf_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    it_special_match_free(t->match);
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->added_i);
    free(t->slot);
    free(t->merges);
    free(t);
}

int64_t it_hf_tokenizer_vocab_size(const it_hf_tokenizer *t) { return t ? t->vocab : 0; }
int64_t it_hf_tokenizer_bos(const it_hf_tokenizer *t) { return t ? t->bos : -1; }
int64_t it_hf_tokenizer_doc_separator(const it_hf_tokenizer *t) { return t ? t->doc : -1; }
int it_hf_tokenizer_special_count(const it_hf_tokenizer *t) { return t ? t->n_added : 0; }
const char *it_hf_tokenizer_pattern_name(const it_hf_tokenizer *t) { return t ? PATTERN_NAME[t->pattern] : NULL; }

const char *it_hf_tokenizer_special_at(const it_hf_tokenizer *t, int i, uint32_t *id, bool *special) {
    if (!t || i < 0 || i >= t->n_added) return NULL;
    if (id) *id = t->added[i].id;
    if (special) *special = t->added[i].special;
    return t->added[i].content;
}

const char *it_hf_tokenizer_token_bytes(const it_hf_tokenizer *t, uint32_t id, size_t *len) {
    if (!t || (int64_t)id >= t->vocab) return NULL;
    if (t->added_i[id] >= 0) {
        if (len) *len = t->added[t->added_i[id]].len;
        return t->added[t->added_i[id]].content;
    }
    if (t->len[id] == NOT_MODEL) return NULL;
    if (len) *len = t->len[id];
    return t->blob + t->off[id];
}

int64_t it_hf_tokenizer_token_id(const it_hf_tokenizer *t, const char *bytes, size_t len) {
    if (!t || (!bytes && len)) return -1;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].content, bytes, len) == 0) return t->added[i].id;
    return vocab_find(t, (const unsigned char *)(bytes ? bytes : ""), len);
}

/* ---- encoding ------------------------------------------------------------------------------ */

typedef struct entry {
    uint32_t rank, pos, result; /* the pair starting at part pos merges, at rank, into result */
} entry;

#define DEAD UINT32_MAX

/* Scratch for one pre-token of up to cap bytes: parts as a linked list over byte positions. */
typedef struct work {
    uint32_t *id, *next, *prev;
    entry *heap; /* n - 1 pairs at first, at most 2 more per merge: 3n */
    size_t nheap, cap;
} work;

typedef struct out {
    uint32_t *ids;
    size_t n, cap;
} out;

static int out_push(out *o, uint32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 1024;
        uint32_t *ids = realloc(o->ids, cap * sizeof *ids);
        if (!ids) return -1;
        o->ids = ids, o->cap = cap;
    }
    o->ids[o->n++] = id;
    return 0;
}

static int entry_less(const entry *a, const entry *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(work *w, entry e) {
    size_t i = w->nheap++;
    while (i) {
        size_t up = (i - 1) / 2;
        if (!entry_less(&e, &w->heap[up])) break;
        w->heap[i] = w->heap[up];
        i = up;
    }
    w->heap[i] = e;
}

static entry heap_pop(work *w) {
    entry top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && entry_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!entry_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int work_reserve(work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *id = realloc(w->id, cap * sizeof *id);
    if (id) w->id = id;
    uint32_t *next = id ? realloc(w->next, cap * sizeof *next) : NULL;
    if (next) w->next = next;
    uint32_t *prev = next ? realloc(w->prev, cap * sizeof *prev) : NULL;
    if (prev) w->prev = prev;
    entry *heap = prev ? realloc(w->heap, 3 * cap * sizeof *heap) : NULL;
    if (!heap) return -1;
    w->heap = heap;
    w->cap = cap;
    return 0;
}

/* Pushes the pair starting at part p, if it merges. */
static void push_pair(const it_hf_tokenizer *t, work *w, uint32_t p, uint32_t n) {
    if (p == DEAD || w->next[p] >= n) return;
    const merge_slot *m = merge_find(t, w->id[p], w->id[w->next[p]]);
    if (m) heap_push(w, (entry){m->rank, p, m->result});
}

/* The tokens of pre-token s[0..n) appended to o. */
static int encode_piece(const it_hf_tokenizer *t, work *w, const unsigned char *s, size_t n, out *o) {
    if (n == 1) return out_push(o, t->byte_id[s[0]]);
    if (t->ignore_merges) {
        int64_t whole = vocab_find(t, s, n);
        if (whole >= 0) return out_push(o, (uint32_t)whole);
    }
    if (n > UINT32_MAX / 4 || work_reserve(w, n)) return -1;
    uint32_t m = (uint32_t)n;
    for (uint32_t i = 0; i < m; i++) w->id[i] = t->byte_id[s[i]], w->next[i] = i + 1, w->prev[i] = i ? i - 1 : DEAD;
    w->nheap = 0;
    for (uint32_t i = 0; i + 1 < m; i++) push_pair(t, w, i, m);
    while (w->nheap) {
        entry e = heap_pop(w);
        uint32_t a = e.pos, b = w->next[a];
        /* stale when a part changed since: a changed pair concatenates to a longer token */
        if (w->id[a] == DEAD || b >= m) continue;
        const merge_slot *cur = merge_find(t, w->id[a], w->id[b]);
        if (!cur || cur->result != e.result) continue;
        w->id[a] = e.result;
        w->next[a] = w->next[b];
        if (w->next[b] < m) w->prev[w->next[b]] = a;
        w->id[b] = DEAD;
        push_pair(t, w, w->prev[a], m);
        push_pair(t, w, a, m);
    }
    for (uint32_t a = 0; a < m; a = w->next[a])
        if (out_push(o, w->id[a])) return -1;
    return 0;
}

/* NFC of seg[0..len) into *buf (grown as needed; *cap its size), as Hugging Face's NFC
 * normalizer composes a text: each maximal run of valid UTF-8 composed by utf8proc
 * (canonical decomposition, then composition; Unicode's stable NFC), an invalid byte kept as
 * it is (HF's text is always valid UTF-8; here such a byte stays its own byte symbol).
 * Returns the length, or (size_t)-1 out of memory. */
static size_t nfc_into(const char *seg, size_t len, char **buf, size_t *cap) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        bool ascii = true;
        while (j < len) { /* the valid run from i */
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)seg + j, (utf8proc_ssize_t)(len - j), &cp);
            if (k <= 0) break;
            ascii &= cp < 0x80;
            j += (size_t)k;
        }
        utf8proc_uint8_t *composed = NULL;
        utf8proc_ssize_t m = 0;
        const char *src = seg + i;
        size_t run = j - i;
        if (run && !ascii) { /* ASCII is its own NFC */
            m = utf8proc_map((const utf8proc_uint8_t *)src, (utf8proc_ssize_t)run, &composed,
                             UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) return (size_t)-1;
            src = (const char *)composed, run = (size_t)m;
        }
        size_t extra = j < len ? 1 : 0; /* the invalid byte after the run */
        if (n + run + extra > *cap) {
            size_t c = (n + run + extra) * 2 + 64;
            char *b = realloc(*buf, c);
            if (!b) {
                free(composed);
                return (size_t)-1;
            }
            *buf = b, *cap = c;
        }
        memcpy(*buf + n, src, run);
        n += run;
        free(composed);
        if (extra) (*buf)[n++] = seg[j];
        i = j + extra;
    }
    return n;
}

it_status it_hf_tokenizer_encode(const it_hf_tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n) {
    if (!ids || !n) return it_error(IT_ERR_INVALID_ARG, "it_hf_tokenizer_encode: ids or n is NULL");
    *ids = NULL;
    *n = 0;
    if (!t) return it_error(IT_ERR_INVALID_ARG, "it_hf_tokenizer_encode: no tokenizer");
    if (len && !text) return it_error(IT_ERR_INVALID_ARG, "it_hf_tokenizer_encode: text is NULL");
    size_t (*pretok)(const char *, size_t, size_t) = t->pattern == PAT_GPT2    ? it_bpe_pretoken_end
                                                     : t->pattern == PAT_QWEN2 ? it_pretok_qwen2_end
                                                                               : it_tiktoken_pretoken_end;
    work w = {0};
    out o = {0};
    int rc = 0;
    char *norm = NULL; /* NFC's output (t->nfc) */
    size_t norm_cap = 0;
    for (size_t pos = 0; pos < len && !rc;) {
        size_t start = len, end = len;
        uint32_t special = 0;
        bool found = it_special_match_next(t->match, text, len, pos, &start, &end, &special);
        /* the text before it, pre-tokenized on its own (a pattern's look-ahead stops at its end) */
        const char *seg = text + pos;
        size_t seg_len = start - pos;
        if (t->nfc && seg_len) { /* the normalizer runs on the text between added tokens */
            seg_len = nfc_into(seg, seg_len, &norm, &norm_cap);
            seg = norm;
            if (seg_len == (size_t)-1) {
                rc = 1;
                break;
            }
        }
        for (size_t p = 0; p < seg_len && !rc;) {
            size_t e = pretok(seg, seg_len, p);
            rc = encode_piece(t, &w, (const unsigned char *)seg + p, e - p, &o);
            p = e;
        }
        if (found && !rc) rc = out_push(&o, special);
        pos = end;
    }
    free(w.id), free(w.next), free(w.prev), free(w.heap);
    free(norm);
    if (rc) {
        free(o.ids);
        return it_error(IT_ERR_OOM, "it_hf_tokenizer_encode: out of host memory (a text of %zu bytes)", len);
    }
    *ids = o.ids;
    *n = o.n;
    return IT_OK;
}
