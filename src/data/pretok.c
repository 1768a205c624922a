/* GPT-2's pre-tokenizer, by hand: the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * as JavaScript runs it with the u flag (npm gpt-3-encoder), over UTF-8 bytes.
 *
 * The character classes come from unicode_tables.h, generated from node's own Unicode data, so
 * they are exact for that Unicode version (node 20: Unicode 15.1) -- Latin, Greek, Cyrillic, CJK,
 * and every other script alike. What differs from JavaScript: (1) a text that is not valid
 * UTF-8 -- JS would never see the bad bytes (TextDecoder turns them into U+FFFD); here each bad
 * byte is one "other" character, so it still lands, byte-exact, in a pre-token; (2) \s is
 * JavaScript's (it includes U+FEFF and excludes U+001C..U+001F and U+0085, unlike Python's). */
#include "data/pretok.h"
#include "data/unicode_tables.h"
#include "infinitrain/data.h"

enum { UC_OTHER, UC_LETTER, UC_NUMBER, UC_SPACE };

static int in_ranges(const it_uc_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) {
            hi = mid;
        } else if (cp > r[mid].hi) {
            lo = mid + 1;
        } else {
            return 1;
        }
    }
    return 0;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int uc_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return UC_LETTER;
        if (cp >= '0' && cp <= '9') return UC_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return UC_SPACE;
        return UC_OTHER;
    }
    if (in_ranges(it_uc_letter, COUNT(it_uc_letter), cp)) return UC_LETTER;
    if (in_ranges(it_uc_number, COUNT(it_uc_number), cp)) return UC_NUMBER;
    if (in_ranges(it_uc_space, COUNT(it_uc_space), cp)) return UC_SPACE;
    return UC_OTHER;
}

/* Decodes the character at s[pos] (pos < len): returns its class, *n its length in bytes.
 * Overlong forms, surrogates, values past U+10FFFF and truncated sequences are invalid: one
 * byte of class "other". */
static int char_at(const unsigned char *s, size_t len, size_t pos, size_t *n) {
    unsigned c = s[pos];
    uint32_t cp;
    size_t k;
    *n = 1;
    if (c < 0x80) return uc_class(c);
    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        cp = c & 0x07;
    } else {
        return UC_OTHER;
    }
    if (len - pos < k) return UC_OTHER;
    for (size_t i = 1; i < k; i++) {
        unsigned d = s[pos + i];
        if ((d & 0xC0) != 0x80) return UC_OTHER;
        cp = cp << 6 | (d & 0x3F);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return UC_OTHER;
    *n = k;
    return uc_class(cp);
}

/* End of the run of characters of class `cls` starting at pos. */
static size_t run_end(const unsigned char *s, size_t len, size_t pos, int cls) {
    size_t n;
    while (pos < len && char_at(s, len, pos, &n) == cls) pos += n;
    return pos;
}

size_t it_bpe_pretoken_end(const char *text, size_t len, size_t pos) {
    const unsigned char *s = (const unsigned char *)text;
    if (!s || pos >= len) return len;
    /* 's|'t|'re|'ve|'m|'ll|'d (ASCII apostrophe, lower case only) */
    if (s[pos] == '\'' && pos + 1 < len) {
        unsigned c1 = s[pos + 1], c2 = pos + 2 < len ? s[pos + 2] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
    }
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of one class.
     * Without the space the space itself (class \s) could start none of them, so the class of
     * the character after the optional space decides which alternative matches. */
    size_t q = s[pos] == ' ' ? pos + 1 : pos, n;
    if (q < len) {
        int cls = char_at(s, len, q, &n);
        if (cls != UC_SPACE) return run_end(s, len, q, cls);
    }
    /* Here s[pos] starts a run of white space. '\s+(?!\S)': the greedy run, backed off by one
     * character when a non-space follows it (and the run is longer than one character);
     * otherwise '\s+' takes the whole run. */
    size_t e = pos, last = pos;
    while (e < len && char_at(s, len, e, &n) == UC_SPACE) {
        last = e;
        e += n;
    }
    if (e < len && last > pos) return last;
    return e;
}

/* ---- cl100k_base's pattern (tiktoken; LLaMA-3's tokenizer.model uses it) ----------------------
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * as tiktoken's Rust regex engine runs it (the npm package is that code in WebAssembly). Its \s
 * is Unicode's White_Space: JavaScript's less U+FEFF, plus U+0085. (?i:) folds 's' with U+017F
 * LATIN SMALL LETTER LONG S as well as 'S'; the other letters of the contractions have no fold
 * beyond their ASCII case. Invalid UTF-8 bytes are one "other" character each, as in GPT-2's. */

/* The class of the character at pos in cl100k's terms, *n its length, *cp its code point (or
 * the byte for an invalid one). */
static int tt_char_at(const unsigned char *s, size_t len, size_t pos, size_t *n, uint32_t *cp) {
    int cls = char_at(s, len, pos, n);
    uint32_t c = s[pos];
    if (*n == 2)
        c = (uint32_t)(s[pos] & 0x1F) << 6 | (s[pos + 1] & 0x3F);
    else if (*n == 3)
        c = (uint32_t)(s[pos] & 0x0F) << 12 | (uint32_t)(s[pos + 1] & 0x3F) << 6 | (s[pos + 2] & 0x3F);
    else if (*n == 4)
        c = (uint32_t)(s[pos] & 0x07) << 18 | (uint32_t)(s[pos + 1] & 0x3F) << 12 | (uint32_t)(s[pos + 2] & 0x3F) << 6 |
            (s[pos + 3] & 0x3F);
    *cp = c;
    if (*n > 1 && c == 0xFEFF) return UC_OTHER; /* not White_Space */
    if (*n > 1 && c == 0x85) return UC_SPACE;   /* NEL is */
    return cls;
}

static int is_crlf(const unsigned char *s, size_t pos) { return s[pos] == '\r' || s[pos] == '\n'; }

/* The contraction at pos (after the apostrophe), case-insensitive: its end, or 0. */
static size_t contraction_end(const unsigned char *s, size_t len, size_t pos) {
    size_t p = pos + 1;
    if (p >= len) return 0;
    unsigned c = s[p] | 0x20, d = p + 1 < len ? (unsigned)(s[p + 1] | 0x20) : 0;
    if (s[p] == 0xC5 && p + 1 < len && s[p + 1] == 0xBF) return p + 2; /* U+017F folds to s */
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return p + 1;
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return p + 2;
    return 0;
}

/* cl100k's pattern with \p{N}{1,max_digits} (Qwen2's pattern is the same with \p{N}: 1). */
static size_t cl100k_end(const char *text, size_t len, size_t pos, int max_digits) {
    const unsigned char *s = (const unsigned char *)text;
    if (!s || pos >= len) return len;
    size_t n, m, e;
    uint32_t cp;
    if (s[pos] == '\'' && (e = contraction_end(s, len, pos))) return e;
    int c0 = tt_char_at(s, len, pos, &n, &cp);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 == UC_LETTER) return run_end(s, len, pos, UC_LETTER);
    if (c0 != UC_NUMBER && !is_crlf(s, pos) && pos + n < len && tt_char_at(s, len, pos + n, &m, &cp) == UC_LETTER) {
        e = pos + n;
        while (e < len && tt_char_at(s, len, e, &m, &cp) == UC_LETTER) e += m;
        return e;
    }
    /* \p{N}{1,3} */
    if (c0 == UC_NUMBER) {
        e = pos;
        for (int k = 0; k < max_digits && e < len && tt_char_at(s, len, e, &m, &cp) == UC_NUMBER; k++) e += m;
        return e;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*': the optional space, a run of "other", then CR and LF */
    size_t q = s[pos] == ' ' ? pos + 1 : pos;
    if (q < len && tt_char_at(s, len, q, &m, &cp) == UC_OTHER) {
        e = q;
        while (e < len && tt_char_at(s, len, e, &m, &cp) == UC_OTHER) e += m;
        while (e < len && is_crlf(s, e)) e++;
        return e;
    }
    /* Here a run of white space starts at pos: W = [pos, e). '\s*[\r\n]+' ends after the last
     * CR or LF in W; '\s+(?!\S)' is W less its last character when a non-space follows it
     * (W longer than one character), all of W at the end of the text; else '\s+' is W. */
    size_t last = pos, after_nl = 0;
    e = pos;
    while (e < len && tt_char_at(s, len, e, &m, &cp) == UC_SPACE) {
        last = e;
        if (is_crlf(s, e)) after_nl = e + 1;
        e += m;
    }
    if (after_nl) return after_nl;
    if (e < len && last > pos) return last;
    return e;
}

size_t it_tiktoken_pretoken_end(const char *text, size_t len, size_t pos) { return cl100k_end(text, len, pos, 3); }

/* Qwen2's pattern (Qwen2, Qwen2.5, Qwen3 tokenizer.json):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 *   \s+(?!\S)|\s+
 * cl100k's but for single digits, with the same Rust-regex semantics (Hugging Face's tokenizers
 * runs it with onig, whose \s is White_Space too). */
size_t it_pretok_qwen2_end(const char *text, size_t len, size_t pos) { return cl100k_end(text, len, pos, 1); }

/* ---- o200k_base's pattern ------------------------------------------------------------------------
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *  |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * In a run R of letters and marks, each character is "upper" (Lu, Lt: only in the first set),
 * "lower" (Ll: only in the second) or "both" (Lm, Lo, M). The first alternative's backtracking
 * comes to: when R has a lower character, the upper set's greedy run stops at the first one and
 * the lower set's run goes on to the next upper character; otherwise its match ends after R's
 * last "both" character (fails without one). The second: R's first character must be upper or
 * both, then the same end as the first's lower case. Marks are not \p{L}: they may be the
 * optional first character, and are "other" in ' ?[^\s\p{L}\p{N}]+'. */
enum { O2_UPPER = 16, O2_LOWER, O2_BOTH, O2_MARK };

/* cl100k's class, letters and marks refined. */
static int o2_class(const unsigned char *s, size_t len, size_t pos, size_t *n) {
    uint32_t cp;
    int cls = tt_char_at(s, len, pos, n, &cp);
    if (cls == UC_LETTER) {
        if (cp < 0x80) return cp >= 'a' ? O2_LOWER : O2_UPPER;
        if (in_ranges(it_uc_lower, COUNT(it_uc_lower), cp)) return O2_LOWER;
        if (in_ranges(it_uc_upper, COUNT(it_uc_upper), cp)) return O2_UPPER;
        return O2_BOTH;
    }
    if (cls == UC_OTHER && cp >= 0x300 && in_ranges(it_uc_mark, COUNT(it_uc_mark), cp)) return O2_MARK;
    return cls;
}

static int o2_in_run(int c) { return c == O2_UPPER || c == O2_LOWER || c == O2_BOTH || c == O2_MARK; }

/* The end of the first or second alternative's letters from q, or 0 when it does not match. */
static size_t o2_letters(const unsigned char *s, size_t len, size_t q, int second) {
    size_t n, e = q, first_lower = 0, last_both_end = 0, end_after_lower = 0;
    int c, seen_lower = 0, first = -1;
    while (e < len && o2_in_run(c = o2_class(s, len, e, &n))) {
        if (first < 0) first = c;
        if (c == O2_LOWER && !seen_lower) seen_lower = 1, first_lower = e;
        if (seen_lower && !end_after_lower && c == O2_UPPER) end_after_lower = e;
        if (c == O2_BOTH || c == O2_MARK) last_both_end = e + n;
        e += n;
    }
    if (first < 0) return 0;
    (void)first_lower;
    size_t lower_end = seen_lower ? (end_after_lower ? end_after_lower : e) : 0;
    if (!second) return seen_lower ? lower_end : last_both_end;
    if (first == O2_LOWER) return 0; /* the upper set's run needs one character */
    /* the upper run stops at the first lower character, the lower run at the next upper one */
    return seen_lower ? lower_end : e;
}

static size_t o2_contraction(const unsigned char *s, size_t len, size_t e) {
    size_t c;
    return e < len && s[e] == '\'' && (c = contraction_end(s, len, e)) ? c : e;
}

size_t it_tiktoken_pretoken_end_o200k(const char *text, size_t len, size_t pos) {
    const unsigned char *s = (const unsigned char *)text;
    if (!s || pos >= len) return len;
    size_t n, m, e;
    int c0 = o2_class(s, len, pos, &n);
    /* may c0 be the optional first character: not CR, LF, a letter or a number */
    int prefix = !is_crlf(s, pos) && c0 != UC_NUMBER && c0 != O2_UPPER && c0 != O2_LOWER && c0 != O2_BOTH;
    for (int alt = 0; alt < 2; alt++) {
        if (prefix && pos + n < len && (e = o2_letters(s, len, pos + n, alt))) return o2_contraction(s, len, e);
        if ((e = o2_letters(s, len, pos, alt))) return o2_contraction(s, len, e);
    }
    if (c0 == UC_NUMBER) {
        e = pos;
        for (int k = 0; k < 3 && e < len && o2_class(s, len, e, &m) == UC_NUMBER; k++) e += m;
        return e;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n/]*': marks and "other" alike */
    size_t q = s[pos] == ' ' ? pos + 1 : pos;
    int cq = q < len ? o2_class(s, len, q, &m) : -1;
    if (cq == UC_OTHER || cq == O2_MARK) {
        e = q;
        while (e < len && ((cq = o2_class(s, len, e, &m)) == UC_OTHER || cq == O2_MARK)) e += m;
        while (e < len && (is_crlf(s, e) || s[e] == '/')) e++;
        return e;
    }
    return it_tiktoken_pretoken_end(text, len, pos); /* white space: as cl100k's */
}
