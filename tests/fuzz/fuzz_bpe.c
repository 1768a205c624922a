/* libFuzzer harness for GPT-2's byte-level BPE: encoder.json and vocab.bpe parsing, and encoding.
 *
 * The first input byte picks what the rest is (mod 3; the seeds use '0', '1', '2'):
 *   0: an encoder.json, loaded with a fixed valid vocab.bpe;
 *   1: a vocab.bpe, loaded with a fixed valid encoder.json;
 *   2: a text, encoded with the fixed vocabulary (every byte has an id, so encoding must succeed)
 *      and checked against a plain implementation of encoder.py's merge loop.
 * In modes 0 and 1 the rest of the input is also encoded with whatever loaded. Every successful
 * encoding must decode back to its text, byte for byte. */
#include "fuzz_common.h"
#include "infinitrain/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fixed vocabulary: the 256 bytes (id = byte), these merges by rank (id 256 + rank for the
 * result) and <|endoftext|>. Merge results are distinct; "bc b" ranks before "b c", so a pair
 * formed while merging must wait for its own rank (encoder.py's order). */
static const char *const merges[][2] = {
    {" ", "t"},    {" ", "a"},       {"h", "e"},    {"i", "n"},   {" t", "he"},         {"r", "e"},       {"o", "n"},
    {"e", "r"},    {" ", "s"},       {"a", "t"},    {" ", " "},   {"  ", "  "},         {"e", "n"},       {"o", "r"},
    {"a", "a"},    {"aa", "aa"},     {"bc", "b"},   {"b", "c"},   {"\xc3", "\xa9"},     {"1", "2"},       {"0", "0"},
    {"\n", "\n"},  {"'", "s"},       {",", " "},    {"in", "g"},  {" s", "t"},          {"t", "h"},       {"th", "e"},
    {"the", "re"}, {"\x00", "\xff"}, {"aaaa", "a"}, {"12", "12"}, {"\xe4\xb8", "\xad"}, {"\xe4", "\xb8"},
};
#define NMERGES ((int)(sizeof merges / sizeof merges[0]))

static it_bpe *fixed;
static char fixed_encoder[1 << 16], fixed_merges[1 << 14];
static size_t fixed_encoder_len, fixed_merges_len;

/* GPT-2's bytes_to_unicode, spelled in UTF-8 (with JSON escapes for '"' and '\\' if json). */
static size_t spell(const char *raw, size_t n, int json, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)raw[i], k = 0;
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = b;
        if (!printable) {
            for (unsigned c = 0; c < b; c++) {
                int p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
                k += !p;
            }
            cp = 256 + k;
        }
        if (json && (cp == '"' || cp == '\\')) out[o++] = '\\';
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xC0 | cp >> 6);
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char *e = fixed_encoder, *m = fixed_merges;
    e += sprintf(e, "{");
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        e += sprintf(e, "\"");
        e += spell(&c, 1, 1, e);
        e += sprintf(e, "\": %d, ", b);
    }
    m += sprintf(m, "#version: 0.2\n");
    for (int r = 0; r < NMERGES; r++) {
        char both[16];
        size_t l0 = strlen(merges[r][0]) + (merges[r][0][0] == 0), l1 = strlen(merges[r][1]);
        memcpy(both, merges[r][0], l0);
        memcpy(both + l0, merges[r][1], l1);
        e += sprintf(e, "\"");
        e += spell(both, l0 + l1, 1, e);
        e += sprintf(e, "\": %d, ", 256 + r);
        m += spell(merges[r][0], l0, 0, m);
        *m++ = ' ';
        m += spell(merges[r][1], l1, 0, m);
        *m++ = '\n';
    }
    e += sprintf(e, "\"<|endoftext|>\": %d}\n", 256 + NMERGES);
    fixed_encoder_len = (size_t)(e - fixed_encoder);
    fixed_merges_len = (size_t)(m - fixed_merges);
    const char *ep = fuzz_file(0, (const uint8_t *)fixed_encoder, fixed_encoder_len);
    const char *mp = fuzz_file(1, (const uint8_t *)fixed_merges, fixed_merges_len);
    if (it_bpe_load(ep, mp, &fixed)) {
        fprintf(stderr, "fuzz_bpe: the fixed vocabulary does not load: %s\n", it_last_error());
        abort();
    }
    return 0;
}

/* Raw bytes of merge r's parts. */
static size_t part(int r, int j, const char **p) {
    *p = merges[r][j];
    return j == 0 && merges[r][0][0] == 0 ? 1 : strlen(merges[r][j]);
}

/* encoder.py's loop on one pre-token: the adjacent pair of lowest rank is merged at every
 * non-overlapping occurrence, left to right; repeat. Symbols are spans of s. */
static size_t reference_bpe(const char *s, size_t n, uint32_t *ids) {
    size_t off[256], len[256], k = n;
    for (size_t i = 0; i < n; i++) off[i] = i, len[i] = 1;
    while (k > 1) {
        int best = NMERGES;
        for (size_t i = 0; i + 1 < k; i++) {
            for (int r = 0; r < best; r++) {
                const char *a, *b;
                size_t la = part(r, 0, &a), lb = part(r, 1, &b);
                if (la == len[i] && lb == len[i + 1] && !memcmp(s + off[i], a, la) && !memcmp(s + off[i + 1], b, lb))
                    best = r;
            }
        }
        if (best == NMERGES) break;
        const char *a, *b;
        size_t la = part(best, 0, &a), lb = part(best, 1, &b), o = 0;
        for (size_t i = 0; i < k;) {
            if (i + 1 < k && len[i] == la && len[i + 1] == lb && !memcmp(s + off[i], a, la) &&
                !memcmp(s + off[i + 1], b, lb)) {
                off[o] = off[i], len[o++] = la + lb;
                i += 2;
            } else {
                off[o] = off[i], len[o++] = len[i];
                i++;
            }
        }
        k = o;
    }
    for (size_t i = 0; i < k; i++) {
        if (len[i] == 1) {
            ids[i] = (unsigned char)s[off[i]];
            continue;
        }
        ids[i] = UINT32_MAX;
        for (int r = 0; r < NMERGES; r++) {
            const char *a, *b;
            size_t la = part(r, 0, &a), lb = part(r, 1, &b);
            if (la + lb == len[i] && !memcmp(s + off[i], a, la) && !memcmp(s + off[i] + la, b, lb))
                ids[i] = 256 + (uint32_t)r;
        }
    }
    return k;
}

/* Encode text with b; a failure must be IT_ERR_FORMAT (a symbol without an id) unless
 * must_succeed; a success must decode back to the text. Returns the ids (malloc'd) or NULL. */
static uint32_t *encode_checked(const it_bpe *b, const char *text, size_t n, int must_succeed, size_t *nids) {
    uint32_t *ids = NULL;
    it_error_clear();
    it_status st = it_bpe_encode(b, text, n, &ids, nids);
    if (st) {
        FUZZ_ASSERT(!must_succeed && st == IT_ERR_FORMAT, "encode failed with %s", it_status_name(st));
        FUZZ_ASSERT(ids == NULL && *nids == 0, "a failed encode returned ids");
        return NULL;
    }
    FUZZ_ASSERT((n == 0) == (*nids == 0), "%zu ids for %zu bytes", *nids, n);
    size_t at = 0;
    for (size_t i = 0; i < *nids; i++) {
        size_t len = 0;
        const char *tb = it_bpe_token_bytes(b, ids[i], &len);
        FUZZ_ASSERT(tb && len >= 1 && at + len <= n && memcmp(tb, text + at, len) == 0,
                    "id %zu (%u) does not decode to text byte %zu", i, ids[i], at);
        FUZZ_ASSERT(it_bpe_token_id(b, tb, len) == (int64_t)ids[i], "token_id of id %u's bytes", ids[i]);
        at += len;
    }
    FUZZ_ASSERT(at == n, "ids decode to %zu of %zu bytes", at, n);
    return ids;
}

static void check_load_refusal(it_status st, const char *ep, const char *mp) {
    const char *msg = it_last_error();
    FUZZ_ASSERT(st == IT_ERR_FORMAT || st == IT_ERR_IO, "load failed with %s", it_status_name(st));
    FUZZ_ASSERT(strstr(msg, ep) || strstr(msg, mp), "message names neither file: %s", msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1, nids = 0;
    int mode = data[0] % 3;
    if (mode == 2) {
        uint32_t *ids = encode_checked(fixed, rest, n, 1, &nids);
        /* pre-token by pre-token against the reference */
        size_t k = 0;
        for (size_t pos = 0; pos < n;) {
            size_t end = it_bpe_pretoken_end(rest, n, pos);
            FUZZ_ASSERT(end > pos && end <= n, "pretoken_end(%zu) = %zu of %zu", pos, end, n);
            if (end - pos > 256) break; /* the reference is quadratic */
            uint32_t want[256];
            size_t m = reference_bpe(rest + pos, end - pos, want);
            FUZZ_ASSERT(k + m <= nids, "fewer ids than the reference");
            for (size_t i = 0; i < m; i++)
                FUZZ_ASSERT(ids[k + i] == want[i], "pre-token at %zu: id %zu is %u, encoder.py's loop gives %u", pos, i,
                            ids[k + i], want[i]);
            k += m;
            pos = end;
        }
        free(ids);
        return 0;
    }
    const char *ep, *mp;
    if (mode == 0) {
        ep = fuzz_file(0, (const uint8_t *)rest, n);
        mp = fuzz_file(1, (const uint8_t *)fixed_merges, fixed_merges_len);
    } else {
        ep = fuzz_file(0, (const uint8_t *)fixed_encoder, fixed_encoder_len);
        mp = fuzz_file(1, (const uint8_t *)rest, n);
    }
    it_bpe *b = NULL;
    it_error_clear();
    it_status st = it_bpe_load(ep, mp, &b);
    if (st) {
        check_load_refusal(st, ep, mp);
        FUZZ_ASSERT(b == NULL, "a refused load set *out");
        return 0;
    }
    FUZZ_ASSERT(it_bpe_vocab_size(b) >= 1, "vocab size %lld", (long long)it_bpe_vocab_size(b));
    FUZZ_ASSERT(it_bpe_token_bytes(b, (uint32_t)it_bpe_vocab_size(b), NULL) == NULL, "bytes of id vocab_size");
    free(encode_checked(b, rest, n, 0, &nids));
    static const char sample[] = "the  there's 1212 aaaaa bcbc \xc3\xa9\xe4\xb8\xad\n\n";
    free(encode_checked(b, sample, sizeof sample - 1, 0, &nids));
    it_bpe_free(b);
    return 0;
}
