/* tokenize: text files -> an llm.c token shard (and a tokenizer file).
 *
 *   tokenize --input FILE [--input FILE ...] --output SHARD.bin [--tokenizer_out TOK.bin]
 *            [--encoder encoder.json --vocab vocab.bpe | --tokenizer tokenizer.model|tokenizer.json]
 *            [--eot none|ID] [--pattern cl100k|o200k] [--val_output VAL.bin --val_fraction 0.1]
 *            [--max_bytes N]
 *   tokenize --tokenizer tokenizer.model|tokenizer.json --list-special | --decode ID,ID,...
 *
 * Without --encoder/--vocab the tokens are bytes (id = byte value, end-of-text 256, vocab 257);
 * with them, GPT-2 BPE (vocab 50257, end-of-text 50256); with --tokenizer, a tiktoken rank file
 * (LLaMA-3's tokenizer.model: vocab 128256) or a Hugging Face tokenizer.json (told by its
 * content; a model directory means its tokenizer.json, else its tokenizer.model), whose added
 * tokens' text in the input becomes those tokens, as Hugging Face encodes. Every input file's
 * text is preceded by the document separator, as llm.c's data scripts start each document with
 * one (GPT-2's end-of-text, LLaMA-3's <|begin_of_text|> 128000); --eot none adds nothing, --eot
 * ID that id. With --val_output the first round(n * val_fraction) tokens go to the validation
 * shard and the rest to --output (llm.c's tinyshakespeare split also takes validation from the
 * front). The shard is uint16 when every id fits, else uint32.
 *
 * Exit status: 0 ok, 1 an input/output/format error, 2 a usage error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "infinitrain/data.h"

#define BYTE_VOCAB 257
#define BYTE_EOT 256
#define CHUNK (1u << 20) /* bytes read and encoded at a time */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} tokvec;

static int tokvec_push(tokvec *t, const uint32_t *ids, size_t n) {
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 1 << 16;
        while (cap < t->n + n) cap *= 2;
        uint32_t *v = realloc(t->v, cap * sizeof *v);
        if (!v) return -1;
        t->v = v;
        t->cap = cap;
    }
    memcpy(t->v + t->n, ids, n * sizeof *ids);
    t->n += n;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tokenize --input FILE [--input FILE ...] --output SHARD.bin [--tokenizer_out TOK.bin]\n"
               "                [--encoder encoder.json --vocab vocab.bpe | --tokenizer tokenizer.model|.json]\n"
               "                [--eot none|ID] [--pattern cl100k|o200k] [--val_output VAL.bin --val_fraction F]\n"
               "                [--max_bytes N]\n"
               "\n"
               "Writes an llm.c token shard (uint16 when every id <= 65535, else uint32).\n"
               "  --input FILE         a text file; repeatable. Each file's text is preceded by end-of-text.\n"
               "  --output SHARD.bin   the (training) shard\n"
               "  --tokenizer_out F    also write the llm.c tokenizer file (magic 20240328, version 2)\n"
               "  --encoder, --vocab   GPT-2 BPE from encoder.json + vocab.bpe (vocab 50257, end-of-text 50256);\n"
               "                       without them tokens are bytes: id = byte, end-of-text 256, vocab 257\n"
               "  --tokenizer F        a tiktoken rank file (LLaMA-3's tokenizer.model, cl100k_base.tiktoken),\n"
               "                       a Hugging Face tokenizer.json (byte-level BPE: GPT-2, LLaMA-3, Qwen2), or a\n"
               "                       model directory holding one of them\n"
               "  --eot none|ID        the token before each file: none, or an id (default: the tokenizer's\n"
               "                       document separator, as llm.c's data scripts place it)\n"
               "  --pattern NAME       with --tokenizer: cl100k (the default; LLaMA-3's) or o200k (the default\n"
               "                       for a table of o200k_base's size)\n"
               "  --list-special       with --tokenizer: print each special token's id and text, and exit\n"
               "  --decode ID,ID,...   with --tokenizer: print the tokens' bytes, and exit\n"
               "  --val_output F       validation shard: the first round(n * val_fraction) tokens\n"
               "  --val_fraction F     0 < F < 1, default 0.1 (needs --val_output)\n"
               "  --max_bytes N        read at most N bytes of input in all\n"
               "  --help               this text\n");
}

/* Usage error: one line naming the flag, exit status 2. */
#define USAGE_ERROR(...)                                                                                               \
    do {                                                                                                               \
        fprintf(stderr, "tokenize: " __VA_ARGS__);                                                                     \
        fprintf(stderr, " (see tokenize --help)\n");                                                                   \
        exit(2);                                                                                                       \
    } while (0)

/* A split point for streaming BPE: p such that text[p] is an ASCII space or newline and
 * text[p-1] a printable ASCII non-space. No pre-token crosses it (runs of letters, numbers or
 * other characters stop at white space, and a white-space run cannot contain text[p-1]), and
 * the regex needs no context before p, so encoding the halves apart equals encoding the whole.
 * Returns 0 when there is none. */
static size_t safe_split(const char *s, size_t n) {
    for (size_t p = n; p-- > 1;)
        if ((s[p] == ' ' || s[p] == '\n') && s[p - 1] > ' ' && s[p - 1] < 0x7F) return p;
    return 0;
}

typedef struct {         /* the tokenizers are owned (main frees them) */
    it_bpe *bpe;         /* NULL: bytes (or tiktoken, or tokenizer.json) */
    it_tiktoken *tk;     /* a tiktoken rank file */
    it_hf_tokenizer *hf; /* a tokenizer.json */
    int split;           /* a tokenizer.json's: no added token contains a split point's byte */
    tokvec *out;
} encoder;

/* For cl100k's pattern: before an ASCII space that follows a printable ASCII non-space. Its
 * "other" runs take the CR and LF after them, so a newline is no split point there; a space
 * is (no pre-token but a white-space run holds one after a non-space). */
static size_t safe_split_tiktoken(const char *s, size_t n) {
    for (size_t p = n; p-- > 1;)
        if (s[p] == ' ' && s[p - 1] > ' ' && s[p - 1] < 0x7F) return p;
    return 0;
}

static int encode(const encoder *e, const char *text, size_t n) {
    if (e->tk || e->hf) {
        uint32_t *ids;
        size_t m;
        if (e->tk ? it_tiktoken_encode(e->tk, text, n, &ids, &m) : it_hf_tokenizer_encode(e->hf, text, n, &ids, &m)) {
            fprintf(stderr, "tokenize: %s\n", it_last_error());
            return -1;
        }
        int rc = tokvec_push(e->out, ids, m);
        free(ids);
        return rc;
    }
    if (!e->bpe) {
        for (size_t i = 0; i < n; i++) {
            uint32_t id = (unsigned char)text[i];
            if (tokvec_push(e->out, &id, 1)) return -1;
        }
        return 0;
    }
    uint32_t *ids;
    size_t m;
    if (it_bpe_encode(e->bpe, text, n, &ids, &m)) {
        fprintf(stderr, "tokenize: %s\n", it_last_error());
        return -1;
    }
    int rc = tokvec_push(e->out, ids, m);
    free(ids);
    return rc;
}

/* Reads and encodes one file in CHUNK pieces, split at safe points. *budget: bytes still
 * allowed (--max_bytes), decremented. Returns bytes read, or -1 (message printed). */
static long long encode_file(const encoder *e, const char *path, long long *budget, int progress) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenize: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st = {0};
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        int err = errno;
        fprintf(stderr, "tokenize: cannot read %s: %s\n", path, strerror(S_ISDIR(st.st_mode) ? EISDIR : err));
        fclose(f);
        return -1;
    }
    size_t cap = 2 * CHUNK, have = 0;
    char *buf = malloc(cap);
    long long total = 0, next_report = 1 << 20;
    int rc = buf ? 0 : -1;
    while (rc == 0) {
        size_t want = CHUNK;
        if (*budget >= 0 && (long long)want > *budget) want = (size_t)*budget;
        if (have + want > cap) {
            char *nb = realloc(buf, cap = have + want);
            if (!nb) {
                rc = -1;
                break;
            }
            buf = nb;
        }
        size_t got = want ? fread(buf + have, 1, want, f) : 0;
        if (got < want && ferror(f)) {
            fprintf(stderr, "tokenize: cannot read %s: %s\n", path, strerror(errno));
            rc = -2;
            break;
        }
        have += got;
        total += (long long)got;
        if (*budget >= 0) *budget -= (long long)got;
        int last = got < want || want == 0;
        if (last && *budget == 0 && (e->bpe || e->tk || e->hf)) {
            /* --max_bytes cut the text: do not split a UTF-8 character. */
            size_t keep = have;
            while (keep > 0 && ((unsigned char)buf[keep - 1] & 0xC0) == 0x80) keep--;
            if (keep > 0 && (unsigned char)buf[keep - 1] >= 0xC0) {
                unsigned char lead = (unsigned char)buf[keep - 1];
                size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
                if (have - (keep - 1) < need) have = keep - 1;
            }
        }
        size_t cut = last                                                                ? have
                     : e->hf && !e->split                                                ? 0
                     : e->hf && strcmp(it_hf_tokenizer_pattern_name(e->hf), "gpt2") == 0 ? safe_split(buf, have)
                     : e->tk || e->hf ? safe_split_tiktoken(buf, have)
                                      : safe_split(buf, have);
        if (cut) {
            if (encode(e, buf, cut)) {
                rc = -1;
                break;
            }
            memmove(buf, buf + cut, have - cut);
            have -= cut;
        }
        if (progress && total >= next_report) {
            fprintf(stderr, "tokenize: %s: %.1f of %.1f MB read, %zu tokens so far\n", path, total / 1048576.0,
                    (double)st.st_size / 1048576.0, e->out->n);
            next_report += 1 << 20;
        }
        if (last) break;
    }
    if (rc == -1) fprintf(stderr, "tokenize: encoding %s failed\n", path);
    free(buf);
    fclose(f);
    return rc ? -1 : total;
}

static int write_shard(const char *path, const uint32_t *t, size_t n, int *wide) {
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] > mx) mx = t[i];
    *wide = mx > 65535;
    if (it_shard_write(path, t, (int64_t)n, *wide)) {
        fprintf(stderr, "tokenize: %s\n", it_last_error());
        return -1;
    }
    return 0;
}

/* A tiktoken table or a tokenizer.json as llm.c's tokenizer file (magic 20240801, GPT-2's
 * 20240328 for a vocabulary that fits uint16): every id's bytes; an id that is no token (cl100k's
 * 100256) gets the text "<|unused_ID|>", since the format has no empty entry. */
static int write_tokenizer_table(const char *path, const it_tiktoken *tk, const it_hf_tokenizer *hf, int64_t eot) {
    int64_t vocab = tk ? it_tiktoken_vocab_size(tk) : it_hf_tokenizer_vocab_size(hf);
    int32_t magic = tk || vocab > 65536 ? IT_TOKENIZER_MAGIC_LLAMA3 : IT_TOKENIZER_MAGIC_GPT2;
    const char **toks = malloc((size_t)vocab * sizeof *toks);
    size_t *lens = malloc((size_t)vocab * sizeof *lens);
    char(*unused)[32] = calloc((size_t)vocab, 32);
    int rc = toks && lens && unused ? 0 : -1;
    for (int64_t i = 0; rc == 0 && i < vocab; i++) {
        toks[i] = tk ? it_tiktoken_token_bytes(tk, (uint32_t)i, &lens[i])
                     : it_hf_tokenizer_token_bytes(hf, (uint32_t)i, &lens[i]);
        if (!toks[i] || lens[i] > 255) {
            lens[i] = (size_t)snprintf(unused[i], 32, "<|unused_%lld|>", (long long)i);
            toks[i] = unused[i];
        }
    }
    if (rc == 0 && it_tokenizer_write(path, magic, vocab, eot < 0 ? 0 : eot, toks, lens)) {
        fprintf(stderr, "tokenize: %s\n", it_last_error());
        rc = -1;
    } else if (rc) {
        fprintf(stderr, "tokenize: out of memory writing %s\n", path);
    }
    free(toks);
    free(lens);
    free(unused);
    return rc;
}

static int write_tokenizer(const char *path, const it_bpe *bpe, int64_t eot) {
    int64_t vocab = bpe ? it_bpe_vocab_size(bpe) : BYTE_VOCAB;
    const char **toks = malloc((size_t)vocab * sizeof *toks);
    size_t *lens = malloc((size_t)vocab * sizeof *lens);
    static char bytes[256];
    int rc = 0;
    if (!toks || !lens) {
        fprintf(stderr, "tokenize: out of memory writing %s\n", path);
        rc = -1;
    }
    for (int64_t i = 0; rc == 0 && i < vocab; i++) {
        if (bpe) {
            toks[i] = it_bpe_token_bytes(bpe, (uint32_t)i, &lens[i]);
            if (!toks[i]) {
                fprintf(stderr, "tokenize: %s: token id %lld is not in encoder.json; a tokenizer file needs every id\n",
                        path, (long long)i);
                rc = -1;
            }
        } else if (i < 256) {
            bytes[i] = (char)i;
            toks[i] = &bytes[i];
            lens[i] = 1;
        } else {
            toks[i] = "<|endoftext|>";
            lens[i] = 13;
        }
    }
    if (rc == 0 && it_tokenizer_write(path, IT_TOKENIZER_MAGIC_GPT2, vocab, eot, toks, lens)) {
        fprintf(stderr, "tokenize: %s\n", it_last_error());
        rc = -1;
    }
    free(toks);
    free(lens);
    return rc;
}

/* Whether a and b name one file: the same path, or (both existing) the same inode. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (strcmp(a, b) == 0) return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* An output's path can be written: not a directory, and a temporary file can be made beside
 * it (the write's own first step; removed at once). Prints the reason and returns -1 if not. */
static int check_writable(const char *flag, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tokenize: %s %s: is a directory\n", flag, path);
        return -1;
    }
    it_afile *f;
    if (it_afile_open(path, &f)) {
        fprintf(stderr, "tokenize: %s: %s\n", flag, it_last_error());
        return -1;
    }
    it_afile_abort(f);
    return 0;
}

/* --tokenizer's file: a directory's tokenizer.json, else its tokenizer.model (in buf). */
static const char *tokenizer_file(const char *path, char *buf, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return path;
    snprintf(buf, cap, "%s/tokenizer.json", path);
    if (stat(buf, &st) == 0) return buf;
    snprintf(buf, cap, "%s/tokenizer.model", path);
    return buf;
}

/* Whether a file is a tokenizer.json (a JSON object) rather than a rank file. */
static int is_json(const char *path) {
    FILE *f = fopen(path, "rb");
    int c = ' ';
    while (f && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) c = fgetc(f);
    if (f) fclose(f);
    return c == '{';
}

/* Loads --tokenizer: a tokenizer.json into *hf or a rank file into *tk. Prints why not. */
static int load_tokenizer(const char *path, it_tiktoken **tk, it_hf_tokenizer **hf) {
    if (is_json(path) ? it_hf_tokenizer_load(path, hf) : it_tiktoken_load(path, tk)) {
        fprintf(stderr, "tokenize: %s\n", it_last_error());
        return -1;
    }
    return 0;
}

/* --list-special (each special token's id and text) or --decode ID,ID,... (the tokens' bytes,
 * written as they are) with --tokenizer: no input, no shard. */
static int tiktoken_query(const char *tk_path, int list_special, const char *ids) {
    if (!tk_path) USAGE_ERROR("%s needs --tokenizer", list_special ? "--list-special" : "--decode");
    it_tiktoken *tk = NULL;
    it_hf_tokenizer *hf = NULL;
    if (load_tokenizer(tk_path, &tk, &hf)) return 1;
    int rc = 0;
    if (list_special) {
        uint32_t id;
        int count = tk ? it_tiktoken_special_count(tk) : it_hf_tokenizer_special_count(hf);
        for (int i = 0; i < count; i++) {
            const char *name = tk ? it_tiktoken_special_at(tk, i, &id) : it_hf_tokenizer_special_at(hf, i, &id, NULL);
            printf("%u %s\n", id, name);
        }
    }
    /* every id checked before any is written */
    for (int pass = 0; pass < 2 && ids && rc == 0; pass++)
        for (const char *p = ids; *p && rc == 0;) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p, &end, 10);
            size_t len = 0;
            const char *b = end > p && !errno && v <= 0xffffffffull
                                ? tk ? it_tiktoken_token_bytes(tk, (uint32_t)v, &len)
                                     : it_hf_tokenizer_token_bytes(hf, (uint32_t)v, &len)
                                : NULL;
            if (!b) {
                fprintf(stderr, "tokenize: --decode: '%.*s' is not a token id of %s (vocabulary %lld)\n",
                        (int)strcspn(p, ","), p, tk_path,
                        (long long)(tk ? it_tiktoken_vocab_size(tk) : it_hf_tokenizer_vocab_size(hf)));
                rc = 2;
            } else if (*end && *end != ',') {
                fprintf(stderr, "tokenize: --decode: expected ids separated by commas, found '%s'\n", end);
                rc = 2;
            } else if (pass == 1) {
                fwrite(b, 1, len, stdout);
            }
            p = *end == ',' ? end + 1 : end;
        }
    if (ids && rc == 0) putchar('\n');
    it_tiktoken_free(tk);
    it_hf_tokenizer_free(hf);
    return rc;
}

static const char *flag_value(int argc, char **argv, int *i, const char *flag) {
    const char *a = argv[*i];
    size_t fl = strlen(flag);
    if (a[fl] == '=') return a + fl + 1;
    if (*i + 1 >= argc) USAGE_ERROR("flag %s needs a value", flag);
    return argv[++*i];
}

/* The command line. eot_id: -2 the tokenizer's own document separator, -1 none. */
typedef struct args {
    const char **inputs;
    int ninputs;
    const char *output, *tok_out, *enc_path, *vocab_path, *val_out, *tk_path, *eot_flag, *decode_ids, *pattern;
    int list_special;
    double val_fraction;
    long long max_bytes, eot_id;
    char tk_buf[4096];
} args;

/* Every flag into *a (a usage error exits 2); --help prints and exits 0. */
static void parse_args(args *a, int argc, char **argv) {
    a->inputs = calloc((size_t)argc, sizeof *a->inputs);
    a->val_fraction = -1, a->max_bytes = -1, a->eot_id = -2;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *eq = strchr(f, '=');
        size_t name_len = eq ? (size_t)(eq - f) : strlen(f);
#define IS(flag) (name_len == strlen(flag) && strncmp(f, flag, name_len) == 0)
        if (IS("--help") || IS("-h")) {
            usage(stdout);
            exit(0);
        } else if (IS("--input")) {
            a->inputs[a->ninputs++] = flag_value(argc, argv, &i, "--input");
        } else if (IS("--output")) {
            a->output = flag_value(argc, argv, &i, "--output");
        } else if (IS("--tokenizer_out")) {
            a->tok_out = flag_value(argc, argv, &i, "--tokenizer_out");
        } else if (IS("--encoder")) {
            a->enc_path = flag_value(argc, argv, &i, "--encoder");
        } else if (IS("--vocab")) {
            a->vocab_path = flag_value(argc, argv, &i, "--vocab");
        } else if (IS("--tokenizer")) {
            a->tk_path = flag_value(argc, argv, &i, "--tokenizer");
        } else if (IS("--pattern")) {
            a->pattern = flag_value(argc, argv, &i, "--pattern");
        } else if (IS("--list-special")) {
            a->list_special = 1;
        } else if (IS("--decode")) {
            a->decode_ids = flag_value(argc, argv, &i, "--decode");
        } else if (IS("--eot")) {
            a->eot_flag = flag_value(argc, argv, &i, "--eot");
        } else if (IS("--val_output")) {
            a->val_out = flag_value(argc, argv, &i, "--val_output");
        } else if (IS("--val_fraction")) {
            const char *v = flag_value(argc, argv, &i, "--val_fraction");
            char *end;
            a->val_fraction = strtod(v, &end);
            if (end == v || *end || !(a->val_fraction > 0 && a->val_fraction < 1))
                USAGE_ERROR("--val_fraction: expected a number in (0, 1), found '%s'", v);
        } else if (IS("--max_bytes")) {
            const char *v = flag_value(argc, argv, &i, "--max_bytes");
            char *end;
            errno = 0;
            a->max_bytes = strtoll(v, &end, 10);
            if (end == v || *end || errno || a->max_bytes < 1)
                USAGE_ERROR("--max_bytes: expected a positive integer, found '%s'", v);
        } else {
            USAGE_ERROR("unknown flag '%s'", f);
        }
#undef IS
    }
    if (a->tk_path) a->tk_path = tokenizer_file(a->tk_path, a->tk_buf, sizeof a->tk_buf);
}

/* The flags that must go together, and the --eot value (a usage error exits 2). */
static void check_args(args *a) {
    if (!a->ninputs) USAGE_ERROR("missing --input FILE");
    if (!a->output) USAGE_ERROR("missing --output SHARD.bin");
    if (!a->enc_path != !a->vocab_path)
        USAGE_ERROR("%s needs %s too", a->enc_path ? "--encoder" : "--vocab", a->enc_path ? "--vocab" : "--encoder");
    if (a->tk_path && a->enc_path) USAGE_ERROR("--tokenizer and --encoder/--vocab: give one tokenizer");
    if (a->pattern && !a->tk_path) USAGE_ERROR("--pattern needs --tokenizer");
    if (a->eot_flag && strcmp(a->eot_flag, "none") == 0) {
        a->eot_id = -1;
    } else if (a->eot_flag) {
        char *end;
        errno = 0;
        a->eot_id = strtoll(a->eot_flag, &end, 10);
        if (end == a->eot_flag || *end || errno || a->eot_id < 0 || a->eot_id > 0xffffffffll)
            USAGE_ERROR("--eot: expected none or a token id, found '%s'", a->eot_flag);
    }
    if (a->val_fraction > 0 && !a->val_out) USAGE_ERROR("--val_fraction needs --val_output");
    if (a->val_out && a->val_fraction < 0) a->val_fraction = 0.1;
}

/* Before any work: no output may overwrite an input or another output, and each must be
 * writable (else a failed tokenizer file would come after the shard was already written).
 * Returns 0, or the exit status 1 (a usage error exits 2). */
static int check_outputs(const args *a) {
    const char *out_flag[3] = {"--output", "--tokenizer_out", "--val_output"},
               *out_path[3] = {a->output, a->tok_out, a->val_out};
    for (int k = 0; k < 3; k++) {
        if (!out_path[k]) continue;
        for (int j = 0; j < k; j++)
            if (out_path[j] && same_file(out_path[j], out_path[k]))
                USAGE_ERROR("%s and %s are the same file '%s'", out_flag[j], out_flag[k], out_path[k]);
        const char *in_flag = NULL, *in_path = NULL;
        for (int j = 0; j < a->ninputs && !in_flag; j++)
            if (same_file(a->inputs[j], out_path[k])) in_flag = "--input", in_path = a->inputs[j];
        if (!in_flag && a->enc_path && same_file(a->enc_path, out_path[k]))
            in_flag = "--encoder", in_path = a->enc_path;
        if (!in_flag && a->vocab_path && same_file(a->vocab_path, out_path[k]))
            in_flag = "--vocab", in_path = a->vocab_path;
        if (!in_flag && a->tk_path && same_file(a->tk_path, out_path[k])) in_flag = "--tokenizer", in_path = a->tk_path;
        if (in_flag)
            USAGE_ERROR("%s '%s' is the %s file '%s': writing it would destroy the input", out_flag[k], out_path[k],
                        in_flag, in_path);
    }
    for (int k = 0; k < 3; k++)
        if (out_path[k] && check_writable(out_flag[k], out_path[k])) return 1;
    return 0;
}

/* The tokenizer the flags name (GPT-2's BPE, a rank file, a tokenizer.json, or bytes), its
 * vocabulary size and the token put before each file. Returns 0, or the exit status. */
static int open_encoder(const args *a, encoder *e, int64_t *eot, int64_t *vocab_n) {
    *eot = BYTE_EOT;
    if (a->enc_path) {
        if (it_bpe_load(a->enc_path, a->vocab_path, &e->bpe)) {
            fprintf(stderr, "tokenize: %s\n", it_last_error());
            return 1;
        }
        *eot = it_bpe_token_id(e->bpe, "<|endoftext|>", 13);
        if (*eot < 0) {
            fprintf(stderr, "tokenize: encoder.json %s: expected a token \"<|endoftext|>\", found none\n", a->enc_path);
            return 1;
        }
    }
    if (a->tk_path && load_tokenizer(a->tk_path, &e->tk, &e->hf)) return 1;
    if (e->hf) {
        if (a->pattern) /* (exits) */
            USAGE_ERROR("--pattern: a tokenizer.json names its own pattern (here %s)",
                        it_hf_tokenizer_pattern_name(e->hf));
        *eot = it_hf_tokenizer_doc_separator(e->hf);
        if (*eot < 0 && a->eot_id == -2) {
            fprintf(stderr,
                    "tokenize: --tokenizer %s: no BOS and no <|endoftext|> to put before each document: give --eot ID "
                    "or --eot none\n",
                    a->tk_path);
            return 1;
        }
        for (int i = 0; i < it_hf_tokenizer_special_count(e->hf); i++) { /* can a split point cut one? */
            const char *name = it_hf_tokenizer_special_at(e->hf, i, NULL, NULL);
            if (strchr(name, ' ') || strchr(name, '\n')) e->split = 0;
        }
    }
    if (e->tk) {
        if (a->pattern && it_tiktoken_set_pattern(e->tk, a->pattern)) {
            fprintf(stderr, "tokenize: --pattern: %s\n", it_last_error());
            return 2;
        }
        *eot = it_tiktoken_doc_separator(e->tk);
        if (*eot < 0 && a->eot_id == -2) {
            fprintf(stderr,
                    "tokenize: --tokenizer %s: %lld ranks, not a table whose document separator is known "
                    "(LLaMA-3, cl100k_base, o200k_base): give --eot ID or --eot none\n",
                    a->tk_path, (long long)it_tiktoken_rank_count(e->tk));
            return 1;
        }
    }
    *vocab_n = e->tk    ? it_tiktoken_vocab_size(e->tk)
               : e->hf  ? it_hf_tokenizer_vocab_size(e->hf)
               : e->bpe ? it_bpe_vocab_size(e->bpe)
                        : BYTE_VOCAB;
    if (a->eot_id >= 0 && a->eot_id >= *vocab_n) {
        fprintf(stderr, "tokenize: --eot %lld: outside the vocabulary of %lld\n", a->eot_id, (long long)*vocab_n);
        return 1;
    }
    if (a->eot_id != -2) *eot = a->eot_id;
    return 0;
}

/* Every input, each after the document separator (eot < 0: none), into e->out; *bytes_in
 * read. Returns 0, or the exit status 1. */
static int encode_inputs(const args *a, encoder *e, int64_t eot, long long *bytes_in) {
    long long budget = a->max_bytes;
    *bytes_in = 0;
    for (int k = 0; k < a->ninputs; k++) {
        if (budget == 0) break;
        uint32_t id = (uint32_t)eot;
        if (eot >= 0 && tokvec_push(e->out, &id, 1)) {
            fprintf(stderr, "tokenize: out of memory\n");
            return 1;
        }
        struct stat st;
        int progress = stat(a->inputs[k], &st) == 0 && st.st_size > 2 * (1 << 20);
        long long got = encode_file(e, a->inputs[k], &budget, progress);
        if (got < 0) return 1;
        *bytes_in += got;
    }
    if (*bytes_in == 0 && budget != 0) { /* (a --max_bytes of 0 asked for nothing) */
        fprintf(stderr, "tokenize: %s%s: no text (0 bytes): nothing to tokenize, no shard written\n", a->inputs[0],
                a->ninputs > 1 ? " and the other inputs" : "");
        return 1;
    }
    return 0;
}

/* The validation shard (the first tokens), the training shard, the tokenizer file, and what
 * was written. Returns 0, or the exit status 1. */
static int write_outputs(const args *a, const encoder *e, int64_t eot, int64_t vocab_n, long long bytes_in) {
    const tokvec *toks = e->out;
    size_t n_val = 0;
    int wide = 0, wide_val = 0;
    if (a->val_out) {
        n_val = (size_t)llround((double)toks->n * a->val_fraction);
        if (write_shard(a->val_out, toks->v, n_val, &wide_val)) return 1;
    }
    if (write_shard(a->output, toks->v + n_val, toks->n - n_val, &wide)) return 1;
    if (a->tok_out && (e->tk || e->hf ? write_tokenizer_table(a->tok_out, e->tk, e->hf, eot)
                                      : write_tokenizer(a->tok_out, e->bpe, eot)))
        return 1;
    printf("tokenize: %s tokens (vocab %lld, document separator %lld): %zu tokens from %lld bytes of %d file%s, "
           "%.4f tokens/byte\n",
           e->tk    ? "tiktoken"
           : e->hf  ? "tokenizer.json"
           : e->bpe ? "GPT-2 BPE"
                    : "byte",
           (long long)vocab_n, (long long)eot, toks->n, bytes_in, a->ninputs, a->ninputs == 1 ? "" : "s",
           bytes_in ? (double)toks->n / (double)bytes_in : 0.0);
    printf("tokenize: wrote %zu tokens to %s (uint%d)\n", toks->n - n_val, a->output, wide ? 32 : 16);
    if (a->val_out) printf("tokenize: wrote %zu tokens to %s (uint%d)\n", n_val, a->val_out, wide_val ? 32 : 16);
    if (a->tok_out) printf("tokenize: wrote tokenizer %s\n", a->tok_out);
    return 0;
}

int main(int argc, char **argv) {
    static args a;
    parse_args(&a, argc, argv);
    if (a.list_special || a.decode_ids) {
        int rc = tiktoken_query(a.tk_path, a.list_special, a.decode_ids);
        free(a.inputs);
        return rc;
    }
    check_args(&a);
    tokvec toks = {0};
    encoder e = {NULL, NULL, NULL, 1, &toks};
    int64_t eot = -1, vocab_n = 0;
    long long bytes_in = 0;
    int rc = check_outputs(&a);
    if (!rc) rc = open_encoder(&a, &e, &eot, &vocab_n);
    if (!rc) rc = encode_inputs(&a, &e, eot, &bytes_in);
    if (!rc) rc = write_outputs(&a, &e, eot, vocab_n, bytes_in);
    free(toks.v);
    free(a.inputs);
    it_bpe_free(e.bpe);
    it_tiktoken_free(e.tk);
    it_hf_tokenizer_free(e.hf);
    return rc;
}
