/* Hugging Face tokenizer.json (src/data/hf_tokenizer.c) and the "any tokenizer" layer
 * (it_tokenizer_open/encode/token_id/bos in src/data/tokenizer.c), on small tokenizer.json files
 * written here:
 *   - merging against a plain re-implementation of tokenizers' BPE (rescan for the lowest-ranked
 *     pair, leftmost of equal ones) on random words; hand-checked merges (rank order over the
 *     vocabulary, ignore_merges, ties); merges as "a b" strings and as pairs give the same ids;
 *   - added tokens split out first, the longest at the leftmost position; the three patterns;
 *   - the BOS of a TemplateProcessing, of LLaMA-3's first file, none; the document separator;
 *   - decode(encode(x)) == x for any bytes (an invalid UTF-8 byte is its byte's token), a
 *     100,000-byte word and a megabyte of spaces;
 *   - every malformed or unsupported file refused with its status and a message naming the file
 *     and the field;
 *   - it_tokenizer_open of a tokenizer.json, a model directory, a rank file (special tokens'
 *     text encoded as tiktoken's allowed_special="all") and llm.c's file (decode only).
 * The real files of GPT-2, LLaMA-3 and Qwen3 against transformers.js are tests/e2e/hf_tokenizer.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infinitrain/data.h"
#include "it_test.h"

static char dir[64];

static const char *path_of(const char *name) {
    static char p[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* ---- writing tokenizer.json ------------------------------------------------------------------- */

/* Raw bytes s (NUL-terminated) in GPT-2's bytes_to_unicode spelling, JSON-escaped, into out. */
static const char *mapped(const char *s, char *out) {
    size_t o = 0;
    for (; *s; s++) {
        unsigned b = (unsigned char)*s, k = 0;
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!printable) /* the k-th unprintable byte is U+0100 + k */
            for (unsigned c = 0; c < b; c++) k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
        unsigned cp = printable ? b : 256 + k;
        if (cp == '"' || cp == '\\')
            o += (size_t)sprintf(out + o, "\\%c", cp);
        else if (cp < 0x80)
            out[o++] = (char)cp;
        else
            o += (size_t)sprintf(out + o, "\\u%04X", cp);
    }
    out[o] = 0;
    return out;
}

enum { PT_GPT2, PT_CL100K, PT_QWEN2 };
static const char *const PRE[] = {
    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
    "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
    "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
};

typedef struct fixture {
    const char *const *tokens; /* raw bytes, ids 256, 257, ... after the 256 bytes (id = byte) */
    int n_tokens;
    const char *(*merges)[2]; /* raw bytes; rank = index */
    int n_merges;
    bool pairs;             /* merges as ["a", "b"], else "a b" */
    const char *added;      /* the added_tokens array's entries, or NULL */
    const char *pre;        /* pre_tokenizer JSON, NULL: GPT-2's ByteLevel */
    const char *model;      /* more of model's fields ("\"ignore_merges\": true, "), or NULL */
    const char *root;       /* more root fields ("\"normalizer\": ..., "), or NULL */
    const char *raw_merges; /* the merges array's entries as written, instead of merges */
} fixture;

static const char *write_json(const char *name, const fixture *x) {
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"version\": \"1.0\", %s\"added_tokens\": [%s], \"pre_tokenizer\": %s, ", x->root ? x->root : "",
            x->added ? x->added : "", x->pre ? x->pre : PRE[PT_GPT2]);
    fprintf(f,
            "\"decoder\": {\"type\": \"ByteLevel\"},\n\"model\": {\"type\": \"BPE\", \"dropout\": null, %s\"vocab\": {",
            x->model ? x->model : "");
    char a[512], b[512];
    for (int c = 1; c < 256; c++) fprintf(f, "\"%s\": %d, ", mapped((char[]){(char)c, 0}, a), c);
    fputs("\"\\u0100\": 0", f); /* byte 0 (not in a C string) is U+0100 */
    for (int i = 0; i < x->n_tokens; i++) fprintf(f, ", \"%s\": %d", mapped(x->tokens[i], a), 256 + i);
    fprintf(f, "},\n\"merges\": [%s", x->raw_merges ? x->raw_merges : "");
    for (int i = 0; !x->raw_merges && i < x->n_merges; i++) {
        mapped(x->merges[i][0], a), mapped(x->merges[i][1], b);
        /* "a b": the spellings joined by a space (a space byte is spelled U+0120) */
        fprintf(f, x->pairs ? "%s[\"%s\", \"%s\"]" : "%s\"%s %s\"", i ? ", " : "", a, b);
    }
    fputs("]}}\n", f);
    fclose(f);
    return p;
}

static it_hf_tokenizer *load(const char *name, const fixture *x) {
    it_hf_tokenizer *t = NULL;
    CHECK_OK(it_hf_tokenizer_load(write_json(name, x), &t));
    return t;
}

/* The ids of text (its length by strlen), in out (up to cap); returns the count or -1. */
static long enc(const it_hf_tokenizer *t, const char *text, uint32_t *out, size_t cap) {
    uint32_t *ids = NULL;
    size_t n = 0;
    if (it_hf_tokenizer_encode(t, text, strlen(text), &ids, &n)) return -1;
    for (size_t i = 0; i < n && i < cap; i++) out[i] = ids[i];
    free(ids);
    return (long)n;
}

#define IDS(...) ((uint32_t[]){__VA_ARGS__}), (sizeof((uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

static void check_ids(const it_hf_tokenizer *t, const char *text, const uint32_t *want, size_t n) {
    uint32_t got[64] = {0};
    long m = t ? enc(t, text, got, 64) : -1;
    int same = m == (long)n;
    for (size_t i = 0; same && i < n; i++) same = got[i] == want[i];
    CHECK_MSG(same, "\"%s\": %ld tokens [%u %u %u %u ...], expected %zu [%u %u %u ...]", text, m, got[0], got[1],
              got[2], got[3], n, want[0], n > 1 ? want[1] : 0, n > 2 ? want[2] : 0);
}

/* ---- merging -------------------------------------------------------------------------------- */

/* tokenizers' BPE as written: parts start as bytes; while some adjacent pair is a merge, merge
 * the one of lowest rank (the leftmost of equal ones). Token ids by bytes. */
static size_t naive_bpe(const it_hf_tokenizer *t, const fixture *x, const char *s, size_t n, uint32_t *out) {
    size_t cut[512], k = n + 1;
    for (size_t i = 0; i <= n; i++) cut[i] = i;
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 2 < k; i++)
            for (int r = 0; r < x->n_merges && (best < 0 || r < best); r++) {
                size_t la = strlen(x->merges[r][0]), lb = strlen(x->merges[r][1]);
                if (cut[i + 1] - cut[i] == la && cut[i + 2] - cut[i + 1] == lb &&
                    memcmp(s + cut[i], x->merges[r][0], la) == 0 && memcmp(s + cut[i + 1], x->merges[r][1], lb) == 0)
                    best = r, at = i;
            }
        if (best < 0) break;
        memmove(cut + at + 1, cut + at + 2, (k - at - 2) * sizeof cut[0]);
        k--;
    }
    for (size_t i = 0; i + 1 < k; i++) out[i] = (uint32_t)it_hf_tokenizer_token_id(t, s + cut[i], cut[i + 1] - cut[i]);
    return k - 1;
}

static void test_merges(void) {
    /* ids: ab 256, bc 257, abc 258, aa 259, aaaa 260, cab 261 */
    static const char *const toks[] = {"ab", "bc", "abc", "aa", "aaaa", "cab"};
    static const char *merges[][2] = {{"b", "c"}, {"a", "b"}, {"ab", "c"}, {"a", "a"}, {"aa", "aa"}, {"c", "ab"}};
    fixture x = {.tokens = toks, .n_tokens = 6, .merges = merges, .n_merges = 6};
    it_hf_tokenizer *t = load("merges.json", &x);
    if (!t) return;
    /* "abc": b+c (rank 0) first, and no merge takes a + bc: [a, bc], though "abc" is a token */
    check_ids(t, "abc", IDS('a', 257));
    check_ids(t, "ab", IDS(256));
    check_ids(t, "cab", IDS(261));      /* a+b (1) then c+ab (5) */
    check_ids(t, "aaa", IDS(259, 'a')); /* equal ranks: the leftmost */
    check_ids(t, "aaaaa", IDS(260, 'a'));
    check_ids(t, "ab abc", IDS(256, ' ', 'a', 257)); /* GPT-2's pattern: "ab", " abc" */
    CHECK(it_hf_tokenizer_vocab_size(t) == 262 && it_hf_tokenizer_bos(t) == -1 &&
          it_hf_tokenizer_doc_separator(t) == -1);
    CHECK(strcmp(it_hf_tokenizer_pattern_name(t), "gpt2") == 0);
    /* the same merges as pairs: the same ids on random words; both as the plain BPE */
    fixture y = x;
    y.pairs = true;
    it_hf_tokenizer *u = load("merges_pairs.json", &y);
    srand(3);
    for (int k = 0; u && k < 300; k++) {
        char s[200];
        size_t n = 1 + (size_t)(rand() % 199);
        for (size_t i = 0; i < n; i++) s[i] = "abc"[rand() % 3];
        s[n] = 0;
        uint32_t a[200], b[200], want[200];
        long na = enc(t, s, a, 200), nb = enc(u, s, b, 200);
        size_t nw = naive_bpe(t, &x, s, n, want);
        CHECK_MSG(na == (long)nw && nb == na && memcmp(a, want, nw * 4) == 0 && memcmp(b, want, nw * 4) == 0,
                  "\"%s\": %ld and %ld tokens, the plain BPE %zu", s, na, nb, nw);
    }
    it_hf_tokenizer_free(u);
    it_hf_tokenizer_free(t);
    /* ignore_merges: a pre-token that is a token is taken whole */
    x.model = "\"ignore_merges\": true, ";
    t = load("ignore.json", &x);
    check_ids(t, "abc", IDS(258));
    check_ids(t, "abcc", IDS('a', 257, 'c')); /* not a token: merged as before */
    it_hf_tokenizer_free(t);
    /* a merge given twice takes its later rank (tokenizers' map from the list) */
    static const char *twice[][2] = {{"a", "b"}, {"b", "c"}, {"a", "b"}};
    fixture z = {.tokens = toks, .n_tokens = 6, .merges = twice, .n_merges = 3, .pairs = true};
    t = load("twice.json", &z);
    check_ids(t, "abc", IDS('a', 257));
    it_hf_tokenizer_free(t);
}

/* ---- added tokens and patterns ---------------------------------------------------------------- */

static void test_added(void) {
    static const char *const toks[] = {"ab", "123", "45", "12345"};
    static const char *merges[][2] = {{"a", "b"}};
    fixture x = {.tokens = toks,
                 .n_tokens = 4,
                 .merges = merges,
                 .n_merges = 1,
                 .model = "\"ignore_merges\": true, ",
                 .added = "{\"id\": 300, \"content\": \"<|x|>\", \"special\": true}, "
                          "{\"id\": 301, \"content\": \"<|x\", \"special\": true}, "
                          "{\"id\": 256, \"content\": \"ab\", \"special\": false}, "
                          "{\"id\": 310, \"content\": \"<|endoftext|>\", \"special\": true}"};
    it_hf_tokenizer *t = load("added.json", &x);
    if (!t) return;
    check_ids(t, "<|x|>", IDS(300));                           /* the longest at a position */
    check_ids(t, "<|x|", IDS(301, '|'));                       /* the shorter when the longer is not there */
    check_ids(t, "c<|x|>d<|x", IDS('c', 300, 'd', 301));       /* words split around them */
    check_ids(t, "ab ab", IDS(256, ' ', 256));                 /* a non-special added token too */
    check_ids(t, "a<|endoftext|> b", IDS('a', 310, ' ', 'b')); /* the text on each side apart */
    CHECK(it_hf_tokenizer_vocab_size(t) == 311);
    CHECK(it_hf_tokenizer_special_count(t) == 4);
    uint32_t id = 0;
    bool special = true;
    const char *name = it_hf_tokenizer_special_at(t, 2, &id, &special);
    CHECK(name && strcmp(name, "ab") == 0 && id == 256 && !special);
    CHECK(it_hf_tokenizer_special_at(t, 4, NULL, NULL) == NULL);
    CHECK(it_hf_tokenizer_token_id(t, "<|x|>", 5) == 300 && it_hf_tokenizer_token_id(t, "12345", 5) == 259);
    CHECK(it_hf_tokenizer_token_id(t, "<|y|>", 5) == -1);
    size_t len = 0;
    CHECK(it_hf_tokenizer_token_bytes(t, 300, &len) && len == 5 && it_hf_tokenizer_token_bytes(t, 305, NULL) == NULL);
    CHECK(it_hf_tokenizer_doc_separator(t) == 310 && it_hf_tokenizer_bos(t) == -1);
    /* the three patterns on numbers (ignore_merges: a pre-token that is a token is one id) */
    check_ids(t, "12345", IDS(259)); /* GPT-2's: \p{N}+ */
    it_hf_tokenizer_free(t);
    x.pre = PRE[PT_CL100K];
    t = load("cl100k.json", &x);
    check_ids(t, "12345", IDS(257, 258)); /* \p{N}{1,3} */
    check_ids(t, "it's", IDS('i', 't', '\'', 's'));
    CHECK(t && strcmp(it_hf_tokenizer_pattern_name(t), "cl100k") == 0);
    it_hf_tokenizer_free(t);
    x.pre = PRE[PT_QWEN2];
    t = load("qwen2.json", &x);
    check_ids(t, "12345", IDS('1', '2', '3', '4', '5')); /* \p{N} */
    CHECK(t && strcmp(it_hf_tokenizer_pattern_name(t), "qwen2") == 0);
    it_hf_tokenizer_free(t);
}

static void test_bos(void) {
    static const char *const toks[] = {"ab"};
    static const char *merges[][2] = {{"a", "b"}};
    const char *added = "{\"id\": 300, \"content\": \"<|begin_of_text|>\", \"special\": true}, "
                        "{\"id\": 301, \"content\": \"<|s|>\", \"special\": true}";
    /* TemplateProcessing (in a Sequence, as LLaMA-3.1's): the token before $A */
    fixture x = {
        .tokens = toks,
        .n_tokens = 1,
        .merges = merges,
        .n_merges = 1,
        .added = added,
        .root = "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
                "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|s|>\", \"type_id\": "
                "0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": "
                "\"<|begin_of_text|>\", \"type_id\": 0}}], \"special_tokens\": {\"<|s|>\": {\"id\": \"<|s|>\", "
                "\"ids\": [301], \"tokens\": [\"<|s|>\"]}}}]}, "};
    it_hf_tokenizer *t = load("template.json", &x);
    CHECK(t && it_hf_tokenizer_bos(t) == 301 && it_hf_tokenizer_doc_separator(t) == 301);
    check_ids(t, "ab", IDS(256)); /* encode adds none */
    it_tokenizer *dec = NULL;
    CHECK_OK(it_tokenizer_from_hf(t, &dec));
    size_t len = 0;
    const char *b = dec ? it_tokenizer_decode(dec, 300, &len) : NULL;
    CHECK(b && len == 17 && memcmp(b, "<|begin_of_text|>", 17) == 0);
    CHECK(dec && it_tokenizer_eot(dec) == 301 && it_tokenizer_bos(dec) == 301 && it_tokenizer_vocab_size(dec) == 302);
    b = dec ? it_tokenizer_decode(dec, 290, &len) : NULL; /* an id that is none: nothing */
    CHECK(b && len == 0);
    it_tokenizer_free(dec);
    it_hf_tokenizer_free(t);
    /* LLaMA-3's first tokenizer.json: no template, an added <|begin_of_text|> */
    x.root = "\"post_processor\": {\"type\": \"ByteLevel\"}, ";
    t = load("llama3_first.json", &x);
    CHECK(t && it_hf_tokenizer_bos(t) == 300 && it_hf_tokenizer_doc_separator(t) == 300);
    it_hf_tokenizer_free(t);
    /* a template that puts nothing before $A: none */
    x.root = "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\"}}]}, ";
    t = load("no_bos.json", &x);
    CHECK(t && it_hf_tokenizer_bos(t) == -1 && it_hf_tokenizer_doc_separator(t) == -1);
    it_hf_tokenizer_free(t);
}

/* ---- round trip, long words ------------------------------------------------------------------- */

static bool bytes_are_text(const it_hf_tokenizer *t, const char *s, size_t n) {
    uint32_t *ids = NULL;
    size_t m = 0, off = 0;
    if (it_hf_tokenizer_encode(t, s, n, &ids, &m)) return false;
    bool ok = true;
    for (size_t i = 0; i < m && ok; i++) {
        size_t l = 0;
        const char *b = it_hf_tokenizer_token_bytes(t, ids[i], &l);
        ok = b && off + l <= n && memcmp(s + off, b, l) == 0;
        off += l;
    }
    free(ids);
    return ok && off == n;
}

static void test_roundtrip(void) {
    static const char *const toks[] = {"th",       "the", " the", " t",       "\xc3\xa9",
                                       "\xff\xfe", "aa",  "aaaa", "aaaaaaaa", "  "};
    static const char *merges[][2] = {{"t", "h"},       {"th", "e"}, {" ", "t"},   {" ", "the"},     {"\xc3", "\xa9"},
                                      {"\xff", "\xfe"}, {"a", "a"},  {"aa", "aa"}, {"aaaa", "aaaa"}, {" ", " "}};
    for (int p = 0; p < 3; p++) {
        fixture x = {.tokens = toks,
                     .n_tokens = 10,
                     .merges = merges,
                     .n_merges = 10,
                     .pairs = p == 1,
                     .added = "{\"id\": 400, \"content\": \"<|e|>\", \"special\": true}",
                     .pre = PRE[p]};
        it_hf_tokenizer *t = load("roundtrip.json", &x);
        if (!t) return;
        srand(11 + p);
        int bad = 0;
        for (int k = 0; k < 300; k++) {
            char s[300];
            size_t n = (size_t)(rand() % 300);
            for (size_t i = 0; i < n; i++)
                s[i] = (char)(k % 2 ? rand() % 256 : " the\xc3\xa9\xff\xfe<|e>\n\t1!a'"[rand() % 18]);
            bad += !bytes_are_text(t, s, n);
        }
        CHECK_MSG(bad == 0, "pattern %d: %d texts whose tokens' bytes are not the text", p, bad);
        /* an invalid UTF-8 byte is its byte's token; a merge of two makes one token */
        check_ids(t, "\xff", IDS(0xff));
        check_ids(t, "a\x80\xc3", IDS('a', 0x80, 0xc3));
        check_ids(t, "\xff\xfe", IDS(261));
        check_ids(t, "\xc3\xa9t", IDS(260, 't'));
        /* a 100,000-byte word: 12,500 tokens of eight a's (a heap, not rescans) */
        size_t n = 100000;
        char *big = malloc(1 << 20);
        memset(big, 'a', n);
        uint32_t *ids = NULL;
        size_t m = 0;
        CHECK_OK(it_hf_tokenizer_encode(t, big, n, &ids, &m));
        bool all8 = m == n / 8;
        for (size_t i = 0; all8 && i < m; i++) all8 = ids[i] == 264;
        CHECK_MSG(all8, "pattern %d: %zu tokens for 100000 a's, expected 12500 of id 264", p, m);
        free(ids);
        /* a megabyte of spaces: pairs, then a last one or two by the pattern's look-ahead */
        memset(big, ' ', 1 << 20);
        CHECK_OK(it_hf_tokenizer_encode(t, big, 1 << 20, &ids, &m));
        CHECK_MSG(m == (1 << 19) && ids[0] == 265, "pattern %d: %zu tokens for 2^20 spaces", p, m);
        free(ids);
        free(big);
        it_hf_tokenizer_free(t);
    }
}

/* ---- refusals ------------------------------------------------------------------------------- */

static void refused_text(const char *name, const char *content, it_status want, const char *why) {
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    fputs(content, f);
    fclose(f);
    it_hf_tokenizer *t = (it_hf_tokenizer *)&t;
    it_status st = it_hf_tokenizer_load(p, &t);
    CHECK_MSG(st == want && strstr(it_last_error(), p) && strstr(it_last_error(), why),
              "%s: expected %s with '%s', got %s: %s", name, it_status_name(want), why, it_status_name(st),
              it_last_error());
    CHECK_MSG(!strchr(it_last_error(), '\n'), "%s: the message spans lines: %s", name, it_last_error());
    CHECK(t == NULL);
}

static void refused(const char *name, const fixture *x, it_status want, const char *why) {
    it_hf_tokenizer *t = (it_hf_tokenizer *)&t;
    const char *p = write_json(name, x);
    it_status st = it_hf_tokenizer_load(p, &t);
    CHECK_MSG(st == want && strstr(it_last_error(), p) && strstr(it_last_error(), why),
              "%s: expected %s with '%s', got %s: %s", name, it_status_name(want), why, it_status_name(st),
              it_last_error());
    CHECK(t == NULL);
}

static void test_refusals(void) {
    refused_text("empty.json", "", IT_ERR_FORMAT, "not valid JSON: line");
    refused_text("trunc.json", "{\"model\": {\"vocab\": {", IT_ERR_FORMAT, "not valid JSON");
    refused_text("array.json", "[1, 2]", IT_ERR_FORMAT, "expected a JSON object at the top");
    refused_text("nomodel.json", "{\"version\": \"1.0\"}", IT_ERR_FORMAT, "model: expected an object");
    refused_text("wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", IT_ERR_UNSUPPORTED,
                 "model.type \"WordPiece\": only \"BPE\"");
    refused_text("novocab.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}", IT_ERR_FORMAT,
                 "model.vocab: expected an object");
    refused_text("nomerges.json", "{\"model\": {\"vocab\": {\"a\": 0}}}", IT_ERR_FORMAT,
                 "model.merges: expected an array");
    refused_text("badid.json", "{\"model\": {\"vocab\": {\"a\": \"x\"}, \"merges\": []}}", IT_ERR_FORMAT,
                 "model.vocab[\"a\"]: expected an id 0..16777215, found \"x\"");
    refused_text("bigid.json", "{\"model\": {\"vocab\": {\"a\": 16777216}, \"merges\": []}}", IT_ERR_FORMAT,
                 "model.vocab[\"a\"]: expected an id");
    refused_text("dupkey.json", "{\"model\": {\"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}}", IT_ERR_FORMAT,
                 "not valid JSON");
    refused_text("notbyte.json", "{\"model\": {\"vocab\": {\"\\u4e00\": 0}, \"merges\": []}}", IT_ERR_FORMAT,
                 "token \"\xe4\xb8\x80\" has U+4E00, not a character of the byte-level alphabet");
    /* found by fuzz_hf_tokenizer: a newline in a token or near a JSON error went into the message */
    refused_text("newline_key.json", "{\"model\": {\"vocab\": {\"\\n\\u4e00\": 0}, \"merges\": []}}", IT_ERR_FORMAT,
                 "token \"\\x0a\xe4\xb8\x80\" has U+000A");
    refused_text("newline_json.json", "{\"model\": {\"vocab\": {\"\\u010\n\": 0}}}", IT_ERR_FORMAT,
                 "not valid JSON: line 2, column 0: invalid escape");
    refused_text("twoids.json", "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", IT_ERR_FORMAT,
                 "model.vocab: id 0 is given twice");
    refused_text("nobyte.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": null}",
                 IT_ERR_FORMAT, "model.vocab: no token for byte 0x00");

    static const char *const toks[] = {"ab"};
    static const char *ab[][2] = {{"a", "b"}};
    fixture ok = {.tokens = toks, .n_tokens = 1, .merges = ab, .n_merges = 1}, x;
    static const char *merge_bad[][2] = {{"b", "a"}};
    x = ok, x.merges = merge_bad;
    refused("merge_out.json", &x, IT_ERR_FORMAT, "model.merges[0] \"b a\": the merged token is not in model.vocab");
    static const char *merge_part[][2] = {{"xyz", "b"}};
    x = ok, x.merges = merge_part, x.pairs = true;
    refused("merge_part.json", &x, IT_ERR_FORMAT,
            "model.merges[0] [\"xyz\",\"b\"]: the first part is not in model.vocab");
    x = ok, x.raw_merges = "\"a b\", \"a\"";
    refused("merge_form.json", &x, IT_ERR_FORMAT, "model.merges[1]: expected \"A B\" or [\"A\", \"B\"], found \"a\"");
    x = ok, x.raw_merges = "\"a b c\"";
    refused("merge_spaces.json", &x, IT_ERR_FORMAT, "model.merges[0]: expected \"A B\" or [\"A\", \"B\"], found");
    x = ok, x.raw_merges = "[\"a\", \"b\", \"c\"]";
    refused("merge_three.json", &x, IT_ERR_FORMAT, "model.merges[0]: expected");
    x = ok, x.added = "{\"id\": -1, \"content\": \"<s>\"}";
    refused("added_id.json", &x, IT_ERR_FORMAT, "added_tokens[0]: expected {\"id\": 0..16777215");
    x = ok, x.added = "{\"id\": 300, \"content\": \"\"}";
    refused("added_empty.json", &x, IT_ERR_FORMAT, "added_tokens[0]: expected");
    x = ok, x.added = "{\"id\": 300, \"content\": \"<s>\"}, {\"id\": 300, \"content\": \"<t>\"}";
    refused("added_twice.json", &x, IT_ERR_FORMAT, "added_tokens[1]: id 300 is also added_tokens[0]'s (\"<s>\")");
    x = ok, x.added = "{\"id\": 256, \"content\": \"<s>\"}";
    refused("added_vocab.json", &x, IT_ERR_FORMAT,
            "added_tokens[0] (\"<s>\"): id 256 is model.vocab's \"ab\", other bytes");
    x = ok, x.added = "{\"id\": 300, \"content\": \"<mask>\", \"lstrip\": true}";
    refused("lstrip.json", &x, IT_ERR_UNSUPPORTED, "added_tokens[0] (\"<mask>\"): \"lstrip\": true is not supported");
    x = ok, x.root = "\"normalizer\": {\"type\": \"NFKC\"}, ";
    refused("nfkc.json", &x, IT_ERR_UNSUPPORTED, "normalizer {\"type\":\"NFKC\"}: not supported (only null or NFC)");
    /* NFC (Qwen's): the text composed before the BPE, an invalid byte kept */
    x = ok, x.root = "\"normalizer\": {\"type\": \"NFC\"}, ";
    it_hf_tokenizer *nfc = NULL, *raw = NULL;
    CHECK_OK(it_hf_tokenizer_load(write_json("nfc.json", &x), &nfc));
    x = ok;
    CHECK_OK(it_hf_tokenizer_load(write_json("raw.json", &x), &raw));
    if (nfc && raw) {
        uint32_t *a = NULL, *b = NULL, *c = NULL;
        size_t na = 0, nb = 0, nc = 0;
        const char decomposed[] = "cafe\xcc\x81 \xff A\xcc\x8a", composed[] = "caf\xc3\xa9 \xff \xc3\x85";
        CHECK_OK(it_hf_tokenizer_encode(nfc, decomposed, sizeof decomposed - 1, &a, &na));
        CHECK_OK(it_hf_tokenizer_encode(raw, composed, sizeof composed - 1, &b, &nb));
        CHECK_OK(it_hf_tokenizer_encode(raw, decomposed, sizeof decomposed - 1, &c, &nc));
        CHECK(na == nb && na && memcmp(a, b, na * sizeof *a) == 0); /* e + U+0301 -> U+00E9, A + U+030A -> U+00C5 */
        CHECK(nc != na || memcmp(a, c, na * sizeof *a) != 0);       /* and without NFC it is not */
        free(a), free(b), free(c);
    }
    it_hf_tokenizer_free(nfc);
    it_hf_tokenizer_free(raw);
    x = ok, x.root = "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": []}, ";
    it_hf_tokenizer *t = NULL;
    CHECK_OK(it_hf_tokenizer_load(write_json("empty_norm.json", &x), &t)); /* an empty Sequence is none */
    it_hf_tokenizer_free(t);
    refused_text("decoder.json",
                 "{\"decoder\": {\"type\": \"Metaspace\"}, \"model\": {\"vocab\": {\"a\": 0}, "
                 "\"merges\": []}}",
                 IT_ERR_UNSUPPORTED, "decoder {\"type\":\"Metaspace\"}: not supported");
    x = ok, x.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                    "\"\\\\w+\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}";
    refused("regex.json", &x, IT_ERR_UNSUPPORTED,
            "Split pattern {\"Regex\":\"\\\\w+\"} is not one of the patterns supported (ByteLevel with use_regex");
    x = ok, x.pre = "{\"type\": \"Whitespace\"}";
    refused("whitespace.json", &x, IT_ERR_UNSUPPORTED, "pre_tokenizer {\"type\":\"Whitespace\"}: not supported");
    x = ok, x.pre = "null";
    refused("nopre.json", &x, IT_ERR_UNSUPPORTED, "pre_tokenizer null: not supported");
    x = ok, x.pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}";
    refused("prefix.json", &x, IT_ERR_UNSUPPORTED, "\"add_prefix_space\": true is not supported");
    x = ok, x.model = "\"byte_fallback\": true, ";
    refused("fallback.json", &x, IT_ERR_UNSUPPORTED, "model.byte_fallback: true");
    x = ok, x.model = "\"continuing_subword_prefix\": \"##\", ";
    refused("prefix2.json", &x, IT_ERR_UNSUPPORTED, "model.continuing_subword_prefix: \"##\"");
    x = ok, x.model = "\"ignore_merges\": 1, ";
    refused("ignore.json", &x, IT_ERR_FORMAT, "model.ignore_merges: expected true or false");
    x = ok, x.root = "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                     "{\"id\": \"<s>\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [70000]}}}, ";
    refused("template_id.json", &x, IT_ERR_FORMAT,
            "post_processor: TemplateProcessing special_tokens[\"<s>\"].ids: expected a token id 0..256");
    t = (it_hf_tokenizer *)&t;
    CHECK(it_hf_tokenizer_load(path_of("missing.json"), &t) == IT_ERR_IO && t == NULL);
}

/* ---- any tokenizer ---------------------------------------------------------------------------- */

/* A LLaMA-3-sized rank file: the 256 bytes, then 127,744 three-byte tokens 0x80|r>>16, r>>8, r. */
static const char *write_llama3_ranks(const char *name) {
    static const char *A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    for (int r = 0; r < 128000; r++) {
        unsigned char s[3] = {(unsigned char)r, 0, 0};
        size_t n = 1;
        if (r >= 256)
            s[0] = (unsigned char)(0x80 | r >> 16), s[1] = (unsigned char)(r >> 8), s[2] = (unsigned char)r, n = 3;
        uint32_t w = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
        fprintf(f, "%c%c%c%c %d\n", A[w >> 18 & 63], A[w >> 12 & 63], n == 3 ? A[w >> 6 & 63] : '=',
                n == 3 ? A[w & 63] : '=', r);
    }
    fclose(f);
    return p;
}

static void test_open(void) {
    /* a tokenizer.json, by content (any file name), and a model directory holding one */
    static const char *const toks[] = {"ab"};
    static const char *ab[][2] = {{"a", "b"}};
    fixture x = {.tokens = toks,
                 .n_tokens = 1,
                 .merges = ab,
                 .n_merges = 1,
                 .added = "{\"id\": 300, \"content\": \"<|end_of_text|>\", \"special\": true}"};
    write_json("model/tokenizer.json", &x);
    const char *paths[] = {write_json("any_name.txt", &x), path_of("model")};
    for (int k = 0; k < 2; k++) {
        it_tokenizer *t = NULL;
        CHECK_OK(it_tokenizer_open(paths[k], &t));
        if (!t) continue;
        uint32_t *ids = NULL;
        size_t n = 0;
        CHECK(it_tokenizer_can_encode(t));
        CHECK_OK(it_tokenizer_encode(t, "ab<|end_of_text|>a", 18, &ids, &n));
        CHECK(n == 3 && ids[0] == 256 && ids[1] == 300 && ids[2] == 'a');
        free(ids);
        CHECK(it_tokenizer_token_id(t, "<|end_of_text|>") == 300 && it_tokenizer_token_id(t, "ab") == 256);
        CHECK(it_tokenizer_token_id(t, "abc") == -1 && it_tokenizer_bos(t) == -1 && it_tokenizer_vocab_size(t) == 301);
        size_t len = 0;
        const char *b = it_tokenizer_decode(t, 300, &len);
        CHECK(b && len == 15 && memcmp(b, "<|end_of_text|>", 15) == 0);
        it_tokenizer_free(t);
    }
    /* a rank file (a directory's tokenizer.model): special tokens' text becomes them */
    write_llama3_ranks("llama3/tokenizer.model");
    it_tokenizer *t = NULL;
    CHECK_OK(it_tokenizer_open(path_of("llama3"), &t));
    if (t) {
        uint32_t *ids = NULL;
        size_t n = 0;
        const char text[] = "a<|begin_of_text|>b<|eot_id|><|reserved_special_token_10|><|end_of_tex";
        CHECK_OK(it_tokenizer_encode(t, text, sizeof text - 1, &ids, &n));
        CHECK_MSG(n == 17 && ids[0] == 'a' && ids[1] == 128000 && ids[2] == 'b' && ids[3] == 128009 &&
                      ids[4] == 128019 && ids[5] == '<' && ids[16] == 'x',
                  "%zu ids: %u %u %u %u %u %u", n, ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]);
        free(ids);
        CHECK(it_tokenizer_bos(t) == 128000 && it_tokenizer_eot(t) == 128000);
        CHECK(it_tokenizer_token_id(t, "<|end_of_text|>") == 128001 && it_tokenizer_token_id(t, "a") == 'a');
        CHECK(it_tokenizer_vocab_size(t) == 128256);
        it_tokenizer_free(t);
    }
    /* llm.c's file: a byte-level one (the 256 bytes first, in order) encodes byte by byte,
     * invalid UTF-8 included; another decodes only */
    const char *tokens[257];
    size_t lens[257];
    static char bytes[256];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, tokens[i] = &bytes[i], lens[i] = 1;
    tokens[256] = "<|endoftext|>", lens[256] = 13;
    CHECK_OK(it_tokenizer_write(path_of("bytes.bin"), IT_TOKENIZER_MAGIC_GPT2, 257, 256, tokens, lens));
    t = NULL;
    CHECK_OK(it_tokenizer_open(path_of("bytes.bin"), &t));
    if (t) {
        uint32_t *ids = NULL;
        size_t n = 0;
        CHECK(it_tokenizer_can_encode(t));
        CHECK_OK(it_tokenizer_encode(t, "A\xff\0z", 4, &ids, &n));
        CHECK(n == 4 && ids && ids[0] == 'A' && ids[1] == 0xff && ids[2] == 0 && ids[3] == 'z');
        free(ids);
        it_tokenizer_free(t);
    }
    tokens[1] = "ab", lens[1] = 2; /* not byte-level */
    CHECK_OK(it_tokenizer_write(path_of("llmc.bin"), IT_TOKENIZER_MAGIC_GPT2, 257, 256, tokens, lens));
    t = NULL;
    CHECK_OK(it_tokenizer_open(path_of("llmc.bin"), &t));
    if (t) {
        uint32_t *ids = (uint32_t *)&t;
        size_t n = 1;
        CHECK(!it_tokenizer_can_encode(t));
        CHECK_ERR(it_tokenizer_encode(t, "a", 1, &ids, &n), IT_ERR_UNSUPPORTED, "cannot encode");
        CHECK(ids == NULL && n == 0);
        CHECK(it_tokenizer_token_id(t, "<|endoftext|>") == 256 && it_tokenizer_bos(t) == -1);
        it_tokenizer_free(t);
    }
    mkdir(path_of("emptydir"), 0755);
    t = (it_tokenizer *)&t;
    CHECK_ERR(it_tokenizer_open(path_of("emptydir"), &t), IT_ERR_NOT_FOUND,
              "neither tokenizer.json nor tokenizer.model");
    CHECK(t == NULL);
    CHECK_ERR(it_tokenizer_open(path_of("nothing"), &t), IT_ERR_IO, "cannot open");
    /* a broken tokenizer.json says so (not "not a rank file") */
    refused_text("broken.json", "{\"model\": 1}", IT_ERR_FORMAT, "model: expected an object");
    CHECK_ERR(it_tokenizer_open(path_of("broken.json"), &t), IT_ERR_FORMAT, "model: expected an object");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/it_test_hf_tokenizer_%d", (int)getpid());
    char cmd[160];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/model %s/llama3", dir, dir);
    if (system(cmd) != 0) return 1;
    test_merges();
    test_added();
    test_bos();
    test_roundtrip();
    test_refusals();
    test_open();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return it_test_report("test_hf_tokenizer");
}
