/* tiktoken rank files (src/data/tiktoken.c) and cl100k_base's pre-tokenizer (pretok.c):
 *   - merging against a plain re-implementation of tiktoken's byte_pair_merge (rescan for the
 *     lowest rank, leftmost of equal ones) on random pieces over random tables: the same ids;
 *   - hand-checked merges (ties, a merge that makes a lower-ranked pair), pre-token splits of
 *     each alternative of the pattern, and a megabyte-long pre-token;
 *   - decode(encode(x)) == x for any bytes, invalid UTF-8 included;
 *   - every malformed rank file refused with a message naming the file and the line or rank.
 * The real cl100k_base table against npm's tiktoken is tests/e2e/tiktoken.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void b64(const unsigned char *s, size_t n, char *out) {
    static const char *A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[o++] = A[w >> 18 & 63];
        out[o++] = A[w >> 12 & 63];
        out[o++] = i + 1 < n ? A[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? A[w & 63] : '=';
    }
    out[o] = 0;
}

/* A table: the 256 bytes (rank = byte value), then `extra` multi-byte tokens in order. */
static const char *write_table(const char *name, const char *const *extra, int n_extra) {
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    char enc[256];
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        b64(&c, 1, enc);
        fprintf(f, "%s %d\n", enc, b);
    }
    for (int i = 0; i < n_extra; i++) {
        b64((const unsigned char *)extra[i], strlen(extra[i]), enc);
        fprintf(f, "%s %d\n", enc, 256 + i);
    }
    fclose(f);
    return p;
}

/* tiktoken's encode of one pre-token as written: the piece itself when it is a token, else
 * byte_pair_merge rescanning all pairs for the lowest rank each round. */
static size_t naive_merge(const it_tiktoken *t, const char *s, size_t n, uint32_t *out) {
    int64_t whole = it_tiktoken_token_id(t, s, n);
    if (whole >= 0) {
        out[0] = (uint32_t)whole;
        return 1;
    }
    size_t cut[4096], k = n + 1; /* part i is [cut[i], cut[i+1]) */
    for (size_t i = 0; i <= n; i++) cut[i] = i;
    for (;;) {
        int64_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 2 < k; i++) {
            int64_t r = it_tiktoken_token_id(t, s + cut[i], cut[i + 2] - cut[i]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) break;
        memmove(cut + at + 1, cut + at + 2, (k - at - 2) * sizeof cut[0]);
        k--;
    }
    for (size_t i = 0; i + 1 < k; i++) out[i] = (uint32_t)it_tiktoken_token_id(t, s + cut[i], cut[i + 1] - cut[i]);
    return k - 1;
}

static void test_merges(void) {
    const char *extra[] = {"ab", "bc", "abc", "aa", "aaa"};
    it_tiktoken *t = NULL;
    CHECK_OK(it_tiktoken_load(write_table("small.tiktoken", extra, 5), &t));
    if (!t) return;
    CHECK(it_tiktoken_vocab_size(t) == 261 && it_tiktoken_special_count(t) == 0 && it_tiktoken_doc_separator(t) == -1);
    static const struct {
        const char *text;
        uint32_t ids[4];
        size_t n;
    } cases[] = {
        {"abc", {258}, 1},           /* a whole token */
        {"abcd", {258, 'd'}, 2},     /* ab first (256), then ab+c is abc (258) */
        {"aaaa", {259, 259}, 2},     /* aa at 0, leftmost; then a+a (259) before aa+a (260) */
        {"aaa", {260}, 1},           /* whole */
        {"bcab", {257, 256}, 2},     /* two independent pairs */
        {"xyz", {'x', 'y', 'z'}, 3}, /* nothing to merge */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(it_tiktoken_encode(t, cases[i].text, strlen(cases[i].text), &ids, &n));
        CHECK_MSG(n == cases[i].n && memcmp(ids, cases[i].ids, n * sizeof *ids) == 0, "'%s': %zu ids", cases[i].text,
                  n);
        free(ids);
    }
    it_tiktoken_free(t);

    /* random tables over {a, b, c, d}: all strings of 2..5 letters in a random order of ranks */
    srand(7);
    for (int trial = 0; trial < 20; trial++) {
        static char words[1400][6];
        const char *ptr[1400];
        int nw = 0;
        for (int len = 2; len <= 5; len++)
            for (int x = 0; x < 1 << (2 * len); x++) {
                if (rand() % 3) continue; /* a sparse table: not every pair merges */
                for (int c = 0; c < len; c++) words[nw][c] = (char)('a' + (x >> (2 * c) & 3));
                words[nw][len] = 0;
                ptr[nw] = words[nw];
                nw++;
            }
        for (int i = nw - 1; i > 0; i--) { /* shuffle the ranks */
            int j = rand() % (i + 1);
            const char *tmp = ptr[i];
            ptr[i] = ptr[j], ptr[j] = tmp;
        }
        CHECK_OK(it_tiktoken_load(write_table("rand.tiktoken", ptr, nw), &t));
        if (!t) return;
        for (int k = 0; k < 50; k++) {
            char s[64];
            size_t n = 1 + (size_t)(rand() % 60);
            for (size_t i = 0; i < n; i++) s[i] = (char)('a' + rand() % 4);
            uint32_t want[64], *ids = NULL;
            size_t m = 0, w = naive_merge(t, s, n, want);
            CHECK_OK(it_tiktoken_encode(t, s, n, &ids, &m));
            CHECK_MSG(m == w && memcmp(ids, want, m * sizeof *ids) == 0, "trial %d: '%.*s': %zu ids, naive %zu", trial,
                      (int)n, s, m, w);
            free(ids);
        }
        it_tiktoken_free(t);
    }
}

/* Pre-token lengths of text under a pattern's pre-tokenizer. */
typedef size_t (*pretok_fn)(const char *, size_t, size_t);

static void splits_by(pretok_fn end_of, const char *pattern, const char *text, size_t len, const size_t *want,
                      size_t n) {
    size_t pos = 0, k = 0;
    int ok = 1;
    while (pos < len) {
        size_t e = end_of(text, len, pos);
        if (k >= n || e - pos != want[k]) ok = 0;
        k++;
        pos = e;
    }
    CHECK_MSG(ok && k == n, "%s pre-tokens of \"%s\"", pattern, text);
}

static void splits(const char *text, size_t len, const size_t *want, size_t n) {
    splits_by(it_tiktoken_pretoken_end, "cl100k", text, len, want, n);
}

static void test_pretok(void) {
    /* contractions (any case, U+017F for s), letters with one leading non-letter, numbers by 3 */
    splits("I'M don'T'ſ", 12, (size_t[]){1, 2, 4, 2, 3}, 5);
    splits("x 'ſ", 5, (size_t[]){1, 2, 2}, 3); /* ' ?other+' takes the space and the apostrophe first */
    splits("hello world!", 12, (size_t[]){5, 6, 1}, 3);
    splits("(hello", 6, (size_t[]){6}, 1);
    splits("12345 678", 9, (size_t[]){3, 2, 1, 3}, 4);
    /* ' ?other+' takes CR and LF after it; '\s*[\r\n]+' ends at the last newline of a run */
    splits("a!!\r\nb", 6, (size_t[]){1, 4, 1}, 3);
    splits("a \n\n  b", 7, (size_t[]){1, 3, 1, 2}, 4);
    /* '\s+(?!\S)': a run less its last character before a non-space; all of it at the end */
    splits("a   b  ", 7, (size_t[]){1, 2, 2, 2}, 4);
    /* U+0085 is white space here, U+FEFF is not: two NELs before a letter are a one-NEL run and
     * the other NEL as the letters' prefix; the BOM is "other" after the optional space */
    splits("a\xc2\x85\xc2\x85x \xef\xbb\xbfy", 11, (size_t[]){1, 2, 3, 4, 1}, 5);
    /* invalid bytes: one "other" character each */
    splits("\xff\xfe a", 4, (size_t[]){2, 2}, 2);
}

/* The same for o200k_base's pattern (the expected splits are what JavaScript's regex engine
 * gives for the pattern, its (?i:) group spelled out by hand). */
static void splits_o200k(const char *text, size_t len, const size_t *want, size_t n) {
    splits_by(it_tiktoken_pretoken_end_o200k, "o200k", text, len, want, n);
}

static void test_pretok_o200k(void) {
    /* cased words split before an upper case letter that follows lower case ones */
    splits_o200k("HelloWorld iPhone", 17, (size_t[]){5, 5, 2, 5}, 4);
    /* upper case then lower: one word, the contraction riding along; all upper: the second
     * alternative */
    splits_o200k("HTTPServer's", 12, (size_t[]){12}, 1);
    splits_o200k("HTTP SERVER", 11, (size_t[]){4, 7}, 2);
    /* Lo (CJK) is in both sets: ABC+\u65e5 is one word; \u65e5 then ABC two */
    splits_o200k("ABC\u65e5 \u65e5ABC", 13, (size_t[]){6, 4, 3}, 3);
    /* a combining mark joins the word; alone after a space it is the space's word */
    splits_o200k("e\xcc\x81x \xcc\x81", 7, (size_t[]){4, 3}, 2);
    /* '/' after punctuation, numbers by three */
    splits_o200k("a.//b 12345", 11, (size_t[]){1, 3, 1, 1, 3, 2}, 6);
}

static void test_roundtrip(void) {
    const char *extra[] = {"th", "the", " the", "in", "ing", " a"};
    it_tiktoken *t = NULL;
    CHECK_OK(it_tiktoken_load(write_table("rt.tiktoken", extra, 6), &t));
    if (!t) return;
    srand(11);
    for (int k = 0; k < 200; k++) {
        char s[300];
        size_t n = (size_t)(rand() % 300);
        for (size_t i = 0; i < n; i++) s[i] = (char)(k % 2 ? rand() % 256 : " thenig\n\t1!"[rand() % 11]);
        uint32_t *ids = NULL;
        size_t m = 0, off = 0;
        CHECK_OK(it_tiktoken_encode(t, s, n, &ids, &m));
        int ok = 1;
        for (size_t i = 0; i < m && ok; i++) {
            size_t l;
            const char *b = it_tiktoken_token_bytes(t, ids[i], &l);
            ok = b && off + l <= n && memcmp(s + off, b, l) == 0;
            off += l;
        }
        CHECK_MSG(ok && off == n, "case %d: the tokens' bytes are not the text", k);
        free(ids);
    }
    /* the apps' decoding table made from it: every id's bytes */
    it_tokenizer *dec = NULL;
    CHECK_OK(it_tokenizer_from_tiktoken(t, &dec));
    CHECK(dec && it_tokenizer_vocab_size(dec) == it_tiktoken_vocab_size(t) && it_tokenizer_eot(dec) == -1);
    for (uint32_t id = 0; dec && id < (uint32_t)it_tiktoken_vocab_size(t); id++) {
        size_t a, b;
        const char *x = it_tokenizer_decode(dec, id, &a), *y = it_tiktoken_token_bytes(t, id, &b);
        CHECK_MSG(x && y && a == b && memcmp(x, y, a) == 0, "id %u decodes differently", id);
    }
    it_tokenizer_free(dec);
    /* a megabyte-long pre-token (white space): merged in O(n log n) */
    size_t n = 1 << 20;
    char *big = malloc(n);
    memset(big, ' ', n);
    uint32_t *ids = NULL;
    size_t m = 0;
    CHECK_OK(it_tiktoken_encode(t, big, n, &ids, &m));
    CHECK(m == n); /* no multi-space token in this table */
    free(ids);
    free(big);
    it_tiktoken_free(t);
}

static void refused(const char *name, const char *content, const char *why) {
    const char *p = path_of(name);
    FILE *f = fopen(p, "w");
    fputs(content, f);
    fclose(f);
    it_tiktoken *t = (it_tiktoken *)&t;
    it_status st = it_tiktoken_load(p, &t);
    CHECK_MSG(st == IT_ERR_FORMAT && strstr(it_last_error(), p) && strstr(it_last_error(), why),
              "%s: expected a refusal with '%s', got %s: %s", name, why, it_status_name(st), it_last_error());
    CHECK(t == NULL);
}

static void test_refusals(void) {
    refused("empty", "", "no tokens");
    refused("nospace", "QQ==\n", "line 1: expected 'base64-token rank'");
    refused("badb64", "Q!== 0\n", "line 1: expected");
    refused("badrank", "QQ== x\n", "line 1: expected");
    refused("gap", "QQ== 0\nQg== 2\n", "rank 2");
    refused("twice", "QQ== 0\nQg== 0\n", "rank 0 appears twice");
    refused("samebytes", "QQ== 0\nQQ== 1\n", "ranks 0 and 1 are the same bytes");
    refused("nobytes", "QQ== 0\nQg== 1\n", "byte 0x00 has no rank");
    it_tiktoken *t = NULL;
    CHECK(it_tiktoken_load(path_of("missing"), &t) == IT_ERR_IO);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/it_test_tiktoken_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    test_merges();
    test_pretok();
    test_pretok_o200k();
    test_roundtrip();
    test_refusals();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return it_test_report("test_tiktoken");
}
