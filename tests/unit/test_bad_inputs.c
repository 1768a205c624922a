/* Every entry point against the files and flags real users feed it (issue 7): each loader
 * (GPT-2, LLaMA-3, Mixtral checkpoints, token shards, tokenizer files, encoder.json/vocab.bpe)
 * refuses each malformed header field, short, long, empty, garbage, directory, FIFO and missing
 * inputs with IT_ERR_FORMAT/IT_ERR_IO and a one-line message naming the file, the field and the
 * value; headers that claim gigabytes in a tiny file are refused before anything is allocated;
 * token ids >= vocab_size are caught; bad flags end it_train_main with exit status 2 and one
 * line naming the flag; an allocator limit makes training fail cleanly with IT_ERR_OOM; and the
 * inputs the fuzzers found (tests/fuzz/corpus/<harness>/regress-*) load with a clean error.
 *
 * Not repeated here: the GPT-2 wrong magic / version 5 / truncated / directory checkpoints and
 * the CLI flag cases of tests/e2e/gpt2_cli.sh, and the LLaMA-3/Mixtral header cases of
 * test_llama_exact.c; test_data.c has the shard and tokenizer messages in detail. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "infinitrain/autograd.h"
#include "infinitrain/data.h"
#include "infinitrain/train.h"
#include "it_test.h"
#include "test_data_util.h"
#include "train/ckpt_file.h"

#define GFIX IT_SOURCE_DIR "/tests/fixtures/gpt2/"
#define LFIX IT_SOURCE_DIR "/tests/fixtures/llama3/"
#define MFIX IT_SOURCE_DIR "/tests/fixtures/mixtral/"
#define CORPUS IT_SOURCE_DIR "/tests/fuzz/corpus/"

/* ---- a loader behind one signature ------------------------------------------------------------ */

typedef struct loader {
    const char *what;
    it_status (*load)(const char *path, void **out);
    void (*release)(void *obj);
} loader;

static it_status load_gpt2(const char *p, void **o) {
    it_model *m = NULL;
    it_status st = it_gpt2_load(p, it_device_cpu(), &m);
    *o = m;
    return st;
}
static it_status load_llama3(const char *p, void **o) {
    it_model *m = NULL;
    it_status st = it_llama3_load(p, it_device_cpu(), &m);
    *o = m;
    return st;
}
static it_status load_mixtral(const char *p, void **o) {
    it_model *m = NULL;
    it_status st = it_mixtral_load(p, it_device_cpu(), &m);
    *o = m;
    return st;
}
static it_status load_shard(const char *p, void **o) {
    it_shard *s = NULL;
    it_status st = it_shard_open(p, &s);
    *o = s;
    return st;
}
static it_status load_tokenizer(const char *p, void **o) {
    it_tokenizer *t = NULL;
    it_status st = it_tokenizer_load(p, &t);
    *o = t;
    return st;
}
/* encoder.json under test, with a valid vocab.bpe */
static const char *good_merges;
static it_status load_encoder(const char *p, void **o) {
    it_bpe *b = NULL;
    it_status st = it_bpe_load(p, good_merges, &b);
    *o = b;
    return st;
}
/* vocab.bpe under test, with a valid encoder.json */
static const char *good_encoder;
static it_status load_merges(const char *p, void **o) {
    it_bpe *b = NULL;
    it_status st = it_bpe_load(good_encoder, p, &b);
    *o = b;
    return st;
}
static void free_model(void *m) { it_model_free(m); }
static void free_shard(void *s) { it_shard_free(s); }
static void free_tokenizer(void *t) { it_tokenizer_free(t); }
static void free_bpe(void *b) { it_bpe_free(b); }

static it_status load_ckpt_file(const char *p, void **o) { return it_ckpt_open(p, (it_ckpt **)o); }
static void free_ckpt_file(void *c) { it_ckpt_close(c); }
static const loader CKPT_FILE = {"InfiniTrain .ckpt", load_ckpt_file, free_ckpt_file};
static const loader GPT2 = {"GPT-2 checkpoint", load_gpt2, free_model};
static const loader LLAMA3 = {"LLaMA-3 checkpoint", load_llama3, free_model};
static const loader MIXTRAL = {"Mixtral checkpoint", load_mixtral, free_model};
static const loader SHARD = {"token shard", load_shard, free_shard};
static const loader TOKENIZER = {"tokenizer", load_tokenizer, free_tokenizer};
static const loader ENCODER = {"encoder.json", load_encoder, free_bpe};
static const loader MERGES = {"vocab.bpe", load_merges, free_bpe};

/* The first of the NULL-terminated strings in ap that msg does not contain, or NULL. */
static const char *first_missing(const char *msg, va_list ap) {
    const char *missing = NULL;
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!missing && !strstr(msg, s)) missing = s;
    return missing;
}

/* The table case being run, for failure messages. */
static const char *current_case = "";

/* Loading `path` fails with `want`, a one-line message naming the path and every listed string,
 * and leaves the out-param NULL. */
static void expect_refusal(int line, const loader *l, const char *path, int want, ...) {
    void *obj = (void *)&obj;
    it_error_clear();
    it_status st = l->load(path, &obj);
    const char *msg = it_last_error();
    va_list ap;
    va_start(ap, want);
    const char *missing = first_missing(msg, ap);
    va_end(ap);
    int ok = (int)st == want && strstr(msg, path) != NULL && strchr(msg, '\n') == NULL && obj == NULL && !missing;
    it_test_checks++;
    if (!ok) {
        it_test_failures++;
        fprintf(stderr, "%s:%d: %s%s%s %s: expected %s naming the file%s%s, got %s: \"%s\"%s\n", __FILE__, line,
                current_case, *current_case ? ": " : "", l->what, path, it_status_name((it_status)want),
                missing ? " and " : "", missing ? missing : "", it_status_name(st), msg, obj ? " (out-param set)" : "");
    }
    if (st == IT_OK && obj) l->release(obj);
}
#define REFUSE(l, path, status, ...) expect_refusal(__LINE__, &(l), (path), (status), __VA_ARGS__, NULL)

/* ---- files ------------------------------------------------------------------------------------ */

/* A copy of `src` as tmpdir/name: int32 header field `field` set to `value` (field < 0: none),
 * then cut to `keep` bytes (keep < 0: all) and `extra` zero bytes appended. */
static const char *variant(const char *name, const char *src, int field, int32_t value, long keep, size_t extra) {
    size_t n = 0;
    unsigned char *b = read_bytes(src, &n);
    if (!b) {
        fprintf(stderr, "cannot read %s\n", src);
        exit(1);
    }
    if (field >= 0) put32(b + 4 * field, value);
    if (keep >= 0 && (size_t)keep < n) n = (size_t)keep;
    unsigned char *out = calloc(1, n + extra + 1);
    memcpy(out, b, n);
    const char *p = tmp_path(name);
    write_bytes(p, out, n + extra);
    free(out);
    free(b);
    return p;
}
static const char *with_field(const char *name, const char *src, int field, int32_t value) {
    return variant(name, src, field, value, -1, 0);
}

static int32_t f32_bits(float f) {
    int32_t i;
    memcpy(&i, &f, 4);
    return i;
}

/* A header of 256 int32 (fields given as index, value pairs ending at -1) and `payload` bytes. */
static const char *header_file(const char *name, size_t payload, ...) {
    unsigned char *b = calloc(1, 1024 + payload);
    va_list ap;
    va_start(ap, payload);
    for (int i; (i = va_arg(ap, int)) >= 0;) put32(b + 4 * i, va_arg(ap, int32_t));
    va_end(ap);
    const char *p = tmp_path(name);
    write_bytes(p, b, 1024 + payload);
    free(b);
    return p;
}

static const char *garbage_file(const char *name, size_t n, uint32_t seed) {
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        b[i] = (unsigned char)(seed >> 24);
    }
    const char *p = tmp_path(name);
    write_bytes(p, b, n);
    free(b);
    return p;
}

/* Runs `l` on a FIFO in a child: a loader that opens it blocks until a writer comes, so a child
 * still running after 5 s hung. Passes when the child got IT_ERR_IO naming the path. */
static void expect_fifo_refused(const loader *l) {
    const char *p = tmp_path("a_fifo");
    unlink(p);
    if (mkfifo(p, 0600) != 0) {
        fprintf(stderr, "mkfifo %s: %s (FIFO case skipped)\n", p, strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        void *obj = NULL;
        it_status st = l->load(p, &obj);
        _exit(st == IT_ERR_IO && strstr(it_last_error(), p) ? 0 : 1);
    }
    int status = 0, waited = 0;
    for (int i = 0; i < 500 && !(waited = waitpid(pid, &status, WNOHANG)); i++) usleep(10000);
    if (!waited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK_MSG(waited && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s on a FIFO: %s", l->what,
              waited ? "not refused with IT_ERR_IO naming it" : "hung (still blocked after 5 s)");
    unlink(p);
}

/* The cases every loader shares: no file, a directory, a FIFO, a character device, an empty
 * file, 100 bytes, garbage. `empty_says`: what the message says about an empty file. */
static void common_cases(const loader *l, const char *empty_says, bool skip_directory) {
    REFUSE(*l, tmp_path("no_such_file.bin"), IT_ERR_IO, "No such file");
    if (!skip_directory) REFUSE(*l, tmpdir, IT_ERR_IO, "not a regular file");
    REFUSE(*l, "/dev/null", IT_ERR_IO, "not a regular file");
    expect_fifo_refused(l);
    const char *p = tmp_path("empty.bin");
    write_bytes(p, NULL, 0);
    REFUSE(*l, p, IT_ERR_FORMAT, empty_says);
    for (uint32_t seed = 1; seed <= 3; seed++) {
        char name[32];
        snprintf(name, sizeof name, "garbage%u.bin", seed);
        REFUSE(*l, garbage_file(name, 100 + 2000 * (seed - 1), seed), IT_ERR_FORMAT, "");
    }
}

/* ---- GPT-2 checkpoints: fixture T=32 V=257 L=2 heads=4 C=32 Vp=320 ----------------------------- */

static void test_gpt2_checkpoint(void) {
    const char *src = GFIX "tiny_gpt2.bin";
    void *m = NULL;
    CHECK_OK(GPT2.load(src, &m));
    free_model(m);
    common_cases(&GPT2, "0 bytes", true); /* the directory case is gpt2_cli.sh's */
    static const struct {
        const char *name;
        int field;
        int32_t value;
        const char *says;
    } cases[] = {
        {"version 1", 1, 1, "version: expected 3"},
        {"version -3", 1, -3, "found -3"},
        {"block_size 0", 2, 0, "block_size = 0"},
        {"block_size -32", 2, -32, "block_size = -32"},
        {"block_size 2^30", 2, 1 << 30, "block_size = 1073741824"},
        {"vocab_size 0", 3, 0, "vocab_size = 0"},
        {"vocab_size -1", 3, -1, "vocab_size = -1"},
        {"vocab_size 2^31-1", 3, INT32_MAX, "vocab_size = 2147483647"},
        {"n_layer 0", 4, 0, "n_layer = 0"},
        {"n_layer -2", 4, -2, "n_layer = -2"},
        {"n_layer 2^20", 4, 1 << 20, "n_layer = 1048576"},
        {"n_head 0", 5, 0, "n_head = 0"},
        {"n_head -4", 5, -4, "n_head = -4"},
        {"n_head 3 (C=32)", 5, 3, "not divisible by n_head 3"},
        {"n_embd 30 (4 heads)", 6, 30, "n_embd 30 is not divisible"},
        {"n_embd 0", 6, 0, "n_embd = 0"},
        {"n_embd 2^31-1", 6, INT32_MAX, "n_embd = 2147483647"},
        {"padded 256 < vocab 257", 7, 256, "padded_vocab_size = 256"},
        {"padded 0", 7, 0, "padded_vocab_size = 0"},
        {"n_layer 3: size", 4, 3, "file size"}, /* in range, but the file holds 2 layers */
        {"LLaMA-3 magic", 0, 20240803, "found 20240803"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = with_field("gpt2_field.bin", src, cases[i].field, cases[i].value);
        current_case = cases[i].name;
        expect_refusal(__LINE__, &GPT2, p, IT_ERR_FORMAT, cases[i].says, NULL);
    }
    current_case = "";
    /* Every field's message names the field with what was expected. */
    REFUSE(GPT2, with_field("gpt2_vp.bin", src, 7, 100), IT_ERR_FORMAT, "header", "padded_vocab_size",
           "expected 257..");
    REFUSE(GPT2, variant("gpt2_100.bin", src, -1, 0, 100, 0), IT_ERR_FORMAT, "100 bytes", "1024-byte header");
    REFUSE(GPT2, variant("gpt2_hdr.bin", src, -1, 0, 1024, 0), IT_ERR_FORMAT, "file size", "found 1024 bytes");
    REFUSE(GPT2, variant("gpt2_minus4.bin", src, -1, 0, 147964, 0), IT_ERR_FORMAT, "147968 bytes", "found 147964");
    REFUSE(GPT2, variant("gpt2_plus1.bin", src, -1, 0, -1, 1), IT_ERR_FORMAT, "147968 bytes", "found 147969");
}

/* ---- LLaMA-3: fixture T=32 V=300 L=2 heads=4 kv=2 C=32 mult=1.3 multiple_of=16 ---------------- */

static void test_llama3_checkpoint(void) {
    const char *src = LFIX "tiny_llama3.bin";
    common_cases(&LLAMA3, "0 bytes", false);
    const struct {
        const char *name;
        int field;
        int32_t value;
        const char *field_name, *says;
    } cases[] = {
        {"version 2", 1, 2, "version", "expected 3"},
        {"block_size 0", 2, 0, "block_size", "found 0"},
        {"block_size -1", 2, -1, "block_size", "found -1"},
        {"block_size 2^30", 2, 1 << 30, "block_size", "found 1073741824"},
        {"vocab_size 0", 3, 0, "vocab_size", "found 0"},
        {"vocab_size 2^31-1", 3, INT32_MAX, "vocab_size", "found 2147483647"},
        {"n_layer 0", 4, 0, "n_layer", "found 0"},
        {"n_layer -1", 4, -1, "n_layer", "found -1"},
        {"n_layer 2^20", 4, 1 << 20, "n_layer", "found 1048576"},
        {"n_head 0", 5, 0, "n_head", "found 0"},
        {"n_head 6: C=32 not divisible", 5, 6, "n_embd", "divisible by n_head 6"},
        {"n_head 2^30", 5, 1 << 30, "n_head", "found 1073741824"},
        {"n_kv_head 0", 6, 0, "n_kv_head", "found 0"},
        {"n_kv_head -2", 6, -2, "n_kv_head", "found -2"},
        {"n_kv_head 8 > n_head", 6, 8, "n_kv_head", "found 8"},
        {"n_embd 0", 7, 0, "n_embd", "found 0"},
        {"n_embd 36: odd head size 9", 7, 36, "n_embd", "even head size"},
        {"n_embd 2^20", 7, 1 << 20, "n_embd", "found 1048576"},
        {"ffn_dim_multiplier 0", 8, 0, "ffn_dim_multiplier", "found 0"},
        {"ffn_dim_multiplier -1", 8, f32_bits(-1.0f), "ffn_dim_multiplier", "found -1"},
        {"ffn_dim_multiplier NaN", 8, 0x7FC00000, "ffn_dim_multiplier", "nan"},
        {"ffn_dim_multiplier 1e30", 8, f32_bits(1e30f), "ffn_dim_multiplier", "found 1e+30"},
        {"multiple_of 0", 9, 0, "multiple_of", "and 0"},
        {"multiple_of -16", 9, -16, "multiple_of", "and -16"},
        {"multiple_of 2^30", 9, 1 << 30, "multiple_of", "and 1073741824"},
        {"norm_eps 0", 10, 0, "norm_eps", "found 0"},
        {"norm_eps -1e-5", 10, f32_bits(-1e-5f), "norm_eps", "found -1e-05"},
        {"norm_eps inf", 10, 0x7F800000, "norm_eps", "inf"},
        {"rope_theta 0", 11, 0, "rope_theta", "found 0"},
        {"rope_theta NaN", 11, 0x7FC00000, "rope_theta", "nan"},
        {"use_scaled_rope 2", 12, 2, "use_scaled_rope", "found 2"},
        {"n_layer 3: size", 4, 3, "file size", "found 189056 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = with_field("llama_field.bin", src, cases[i].field, cases[i].value);
        current_case = cases[i].name;
        expect_refusal(__LINE__, &LLAMA3, p, IT_ERR_FORMAT, cases[i].field_name, cases[i].says, NULL);
    }
    current_case = "";
    REFUSE(LLAMA3, variant("llama_100.bin", src, -1, 0, 100, 0), IT_ERR_FORMAT, "100 bytes");
    REFUSE(LLAMA3, variant("llama_hdr.bin", src, -1, 0, 1024, 0), IT_ERR_FORMAT, "file size", "found 1024 bytes");
    REFUSE(LLAMA3, variant("llama_minus4.bin", src, -1, 0, 189052, 0), IT_ERR_FORMAT, "189056 bytes", "found 189052");
    /* A GPT-2 checkpoint handed to the LLaMA-3 loader. */
    REFUSE(LLAMA3, GFIX "tiny_gpt2.bin", IT_ERR_FORMAT, "magic", "expected 20240803", "found 20240326");
}

/* ---- Mixtral: fixture T=32 V=300 L=2 heads=4 kv=2 C=32 E=4 top-2 H=48 --------------------------- */

static void test_mixtral_checkpoint(void) {
    const char *src = MFIX "tiny_mixtral.bin";
    common_cases(&MIXTRAL, "0 bytes", false);
    const struct {
        const char *name;
        int field;
        int32_t value;
        const char *field_name, *says;
    } cases[] = {
        {"block_size 0", 2, 0, "block_size", "found 0"},
        {"vocab_size -5", 3, -5, "vocab_size", "found -5"},
        {"n_layer 0", 4, 0, "n_layer", "found 0"},
        {"n_head 0", 5, 0, "n_head", "found 0"},
        {"n_kv_head 3", 6, 3, "n_kv_head", "a divisor of n_head 4"},
        {"n_embd 30", 7, 30, "n_embd", "divisible by n_head 4"},
        {"num_experts 0", 8, 0, "num_experts", "found 0"},
        {"num_experts -4", 8, -4, "num_experts", "found -4"},
        {"num_experts 257", 8, 257, "num_experts", "found 257"},
        {"num_experts 2^31-1", 8, INT32_MAX, "num_experts", "found 2147483647"},
        {"norm_eps NaN", 12, 0x7FC00000, "norm_eps", "nan"},
        {"rope_theta -1", 13, f32_bits(-1.0f), "rope_theta", "found -1"},
        {"router_topk 0", 15, 0, "router_topk", "found 0"},
        {"router_topk -1", 15, -1, "router_topk", "found -1"},
        {"router_topk 2^31-1", 15, INT32_MAX, "router_topk", "found 2147483647"},
        {"moe hidden 0", 16, 0, "ffn hidden size", "found 0"},
        {"moe hidden -48", 16, -48, "ffn hidden size", "found -48"},
        {"moe hidden 2^30", 16, 1 << 30, "ffn hidden size", "found 1073741824"},
        {"num_experts 5: size", 8, 5, "file size", "found 251520 bytes"},
        {"LLaMA-3 magic", 0, 20240803, "magic", "expected 20260513"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = with_field("mixtral_field.bin", src, cases[i].field, cases[i].value);
        current_case = cases[i].name;
        expect_refusal(__LINE__, &MIXTRAL, p, IT_ERR_FORMAT, cases[i].field_name, cases[i].says, NULL);
    }
    current_case = "";
    REFUSE(MIXTRAL, variant("mixtral_hdr.bin", src, -1, 0, 1024, 0), IT_ERR_FORMAT, "file size", "found 1024 bytes");
    REFUSE(MIXTRAL, variant("mixtral_cut.bin", src, -1, 0, 251519, 0), IT_ERR_FORMAT, "251520 bytes", "found 251519");
}

/* ---- shards, tokenizer files, encoder.json and vocab.bpe -------------------------------------- */

static void test_shard_files(void) {
    common_cases(&SHARD, "empty file", false);
    REFUSE(SHARD, header_file("shard_hdr.bin", 0, 0, 20240520, 1, 1, 2, 64, -1), IT_ERR_FORMAT, "n_tokens 64",
           "found 1024 bytes");
    REFUSE(SHARD, header_file("shard_v0.bin", 0, 0, 20240801, 1, 0, 2, 0, -1), IT_ERR_FORMAT, "version", "found 0");
    REFUSE(SHARD, header_file("shard_2g.bin", 64, 0, 20240801, 1, 1, 2, INT32_MAX, -1), IT_ERR_FORMAT,
           "n_tokens 2147483647", "found 1088 bytes");
    REFUSE(SHARD, header_file("shard_min.bin", 0, 0, 20240520, 1, 1, 2, INT32_MIN, -1), IT_ERR_FORMAT, "n_tokens",
           "found -2147483648");
    REFUSE(SHARD, GFIX "tiny_gpt2.bin", IT_ERR_FORMAT, "magic", "found 20240326");
}

static void test_tokenizer_files(void) {
    common_cases(&TOKENIZER, "empty file", false);
    REFUSE(TOKENIZER, header_file("tok_v0.bin", 4, 0, 20240328, 1, 0, 2, 2, 3, 0, -1), IT_ERR_FORMAT, "version",
           "found 0");
    REFUSE(TOKENIZER, header_file("tok_vocab0.bin", 4, 0, 20240328, 1, 2, 2, 0, -1), IT_ERR_FORMAT, "vocab_size",
           "found 0");
    REFUSE(TOKENIZER, header_file("tok_vocabneg.bin", 4, 0, 20240328, 1, 2, 2, -7, -1), IT_ERR_FORMAT, "vocab_size",
           "found -7");
    REFUSE(TOKENIZER, header_file("tok_2g.bin", 4, 0, 20240328, 1, 2, 2, INT32_MAX, -1), IT_ERR_FORMAT,
           "vocab_size 2147483647", "found 4");
    REFUSE(TOKENIZER, header_file("tok_eotneg.bin", 4, 0, 20240328, 1, 2, 2, 2, 3, -1, -1), IT_ERR_FORMAT, "eot_token",
           "found -1");
    /* Version 1 of a LLaMA-3 tokenizer implies end-of-text 128001: outside a 2-token vocabulary. */
    const char *p = header_file("tok_v1_llama.bin", 4, 0, 20240801, 1, 1, 2, 2, -1);
    REFUSE(TOKENIZER, p, IT_ERR_FORMAT, "version-1 implied eot_token", "found 128001");
}

static void test_bpe_files(void) {
    const char *enc = tmp_path("good_encoder.json"), *mer = tmp_path("good_vocab.bpe");
    static char enc_path[512], mer_path[512];
    snprintf(enc_path, sizeof enc_path, "%s", enc);
    snprintf(mer_path, sizeof mer_path, "%s", mer);
    const char *ej = "{\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3}";
    const char *mb = "#version: 0.2\na b\n";
    write_bytes(enc_path, ej, strlen(ej));
    write_bytes(mer_path, mb, strlen(mb));
    good_encoder = enc_path;
    good_merges = mer_path;
    void *b = NULL;
    CHECK_OK(ENCODER.load(enc_path, &b));
    free_bpe(b);
    common_cases(&ENCODER, "end of file", false);
    /* vocab.bpe: an empty file is no merges (valid); garbage fails on its first bad line */
    REFUSE(MERGES, tmp_path("no_such.bpe"), IT_ERR_IO, "No such file");
    REFUSE(MERGES, tmpdir, IT_ERR_IO, "not a regular file");
    REFUSE(MERGES, "/dev/null", IT_ERR_IO, "not a regular file");
    expect_fifo_refused(&MERGES);
    REFUSE(MERGES, garbage_file("garbage.bpe", 4000, 7), IT_ERR_FORMAT, "vocab.bpe");
    /* Found by fuzz_bpe (corpus/bpe/regress-huge-id): one key with id 2^31-2 made load_encoder
     * allocate 8 GiB for the id table. Ids are now bounded like the models' vocab_size. */
    const char *p = tmp_path("huge_id.json");
    write_bytes(p, "{\"a\": 2147483646}", 17);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "token id 0..16777215", "found 2147483646");
    write_bytes(p, "{\"a\": 16777216}", 15);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "found 16777216");
    write_bytes(p, "{\"a\": 99999999999999999999}", 27);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "token id");
    write_bytes(p, "{\"a\": 1e3}", 10);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "token id", "found '1e3}'");
    write_bytes(p, "[\"a\", 1]", 8);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "start of an object", "found '['");
    write_bytes(p, "{\"a\": 1", 7);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "end of file");
    write_bytes(p, "{\"\\u12\": 1}", 11);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "hex digits");
    write_bytes(p, "{\"a\\", 4);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "closing");
    /* the largest id allowed loads, with a table of 2^24 entries */
    write_bytes(p, "{\"a\": 16777215}", 15);
    CHECK_OK(ENCODER.load(p, &b));
    if (b) CHECK(it_bpe_vocab_size(b) == 1 << 24 && it_bpe_token_bytes(b, 0, NULL) == NULL);
    free_bpe(b);
}

/* ---- sizes claimed by a header are refused before any allocation ------------------------------ */

typedef void (*child_fn)(void);
static child_fn child_body(const char *name);

static size_t vm_size_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

/* Runs body() in a child whose address space may grow by at most 256 MiB more: an attempt to
 * allocate the gigabytes a header claims fails there with IT_ERR_OOM instead of succeeding
 * lazily, so a refusal with IT_ERR_FORMAT shows the check came first. The child is this program
 * re-executed (--child NAME TMPDIR): a child that only forked would inherit the OpenMP runtime
 * without its threads. Not under ASan, whose shadow memory needs terabytes of address space:
 * there body() runs here, for its statuses and messages. */
static void in_small_address_space(const char *name) {
    void (*body)(void) = child_body(name);
    if (UNDER_SANITIZER) {
        printf("%s: no address-space limit under ASan\n", name);
        body();
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"test_bad_inputs", "--child", (char *)name, tmpdir, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = 0, waited = 0;
    for (int i = 0; i < 12000 && !(waited = waitpid(pid, &status, WNOHANG)); i++) usleep(10000);
    if (!waited) { /* 120 s: hung */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK_MSG(waited && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child %s (status %d)", name,
              waited ? "failed" : "hung", status);
}

static int child_main(const char *name, const char *dir) {
    snprintf(tmpdir, sizeof tmpdir, "%s", dir);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = vm_size_bytes() + ((size_t)256 << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 3;
    child_body(name)();
    fflush(NULL);
    return it_test_failures ? 1 : 0;
}

static void huge_claims(void) {
    /* 2^31-1 tokens in a 1088-byte shard; 2^31-1 tokens in a 1028-byte tokenizer */
    REFUSE(SHARD, header_file("big_shard.bin", 64, 0, 20240801, 1, 1, 2, INT32_MAX, -1), IT_ERR_FORMAT,
           "n_tokens 2147483647");
    REFUSE(TOKENIZER, header_file("big_tok.bin", 4, 0, 20240328, 1, 2, 2, INT32_MAX, 3, 0, -1), IT_ERR_FORMAT,
           "vocab_size 2147483647");
    /* every dimension at its largest accepted value in a header-only file */
    REFUSE(GPT2,
           header_file("big_gpt2.bin", 0, 0, 20240326, 1, 3, 2, 1 << 20, 3, 1 << 24, 4, 1024, 5, 1, 6, 1 << 16, 7,
                       1 << 24, -1),
           IT_ERR_FORMAT, "file size", "found 1024 bytes");
    REFUSE(LLAMA3,
           header_file("big_llama.bin", 0, 0, 20240803, 1, 3, 2, 1 << 20, 3, 1 << 24, 4, 1024, 5, 1, 6, 1, 7, 1 << 16,
                       8, f32_bits(1.0f), 9, 1, 10, f32_bits(1e-5f), 11, f32_bits(10000.0f), -1),
           IT_ERR_FORMAT, "file size", "found 1024 bytes");
    REFUSE(MIXTRAL,
           header_file("big_mixtral.bin", 0, 0, 20260513, 1, 2, 2, 1 << 20, 3, 1 << 24, 4, 1024, 5, 1, 6, 1, 7, 1 << 16,
                       8, 256, 12, f32_bits(1e-5f), 13, f32_bits(10000.0f), 15, 256, 16, 1 << 20, -1),
           IT_ERR_FORMAT, "file size", "found 1024 bytes");
    const char *p = tmp_path("big_id.json");
    write_bytes(p, "{\"a\": 2147483646}", 17);
    REFUSE(ENCODER, p, IT_ERR_FORMAT, "found 2147483646");

    /* A valid 200 KB LLaMA-3 checkpoint with block_size 2^20 and head size 64: the loader used to
     * build RoPE tables for all 2^20 positions (~1 GB, seconds; found by fuzz_llama3_ckpt). They
     * are now built for the positions a forward uses. */
    const int C = 64;
    int64_t H = it_llama3_ffn_hidden(C, 1.0f, 1);
    int64_t n = 1 * C + (C + (C + 2 * C) * C + C * C + C + 3 * H * C) + C + 1 * C;
    p = header_file("long_context.bin", 4 * (size_t)n, 0, 20240803, 1, 3, 2, 1 << 20, 3, 1, 4, 1, 5, 1, 6, 1, 7, C, 8,
                    f32_bits(1.0f), 9, 1, 10, f32_bits(1e-5f), 11, f32_bits(10000.0f), -1);
    it_model *m = NULL;
    CHECK_OK(it_llama3_load(p, it_device_cpu(), &m));
    if (m) {
        it_scope_begin();
        int32_t ids[4] = {0, 0, 0, 0};
        it_tensor *idx = it_tensor_from_host(it_device_cpu(), IT_DTYPE_I32, 2, (int64_t[]){1, 4}, ids, sizeof ids);
        it_tensor *logits = it_model_forward(m, idx);
        CHECK(logits && it_tensor_dim(logits, 1) == 4 && it_tensor_dim(logits, 2) == 1);
        it_scope_end();
        it_tape_clear();
        it_model_free(m);
    }
}

static void test_huge_claims(void) { in_small_address_space("huge_claims"); }

/* ---- the fuzzers' findings: every committed regress-* input fails cleanly or loads ------------- */

static void test_fuzz_regressions(void) {
    static const struct {
        const char *dir;
        const loader *l;
    } dirs[] = {{"gpt2_ckpt", &GPT2}, {"llama3_ckpt", &LLAMA3},  {"mixtral_ckpt", &MIXTRAL},
                {"shard", &SHARD},    {"tokenizer", &TOKENIZER}, {"ckpt_file", &CKPT_FILE}};
    int n = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char dir[512];
        snprintf(dir, sizeof dir, CORPUS "%s", dirs[d].dir);
        DIR *dp = opendir(dir);
        for (struct dirent *e; dp && (e = readdir(dp));) {
            if (strncmp(e->d_name, "regress-", 8) != 0) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            void *obj = NULL;
            it_error_clear();
            it_status st = dirs[d].l->load(path, &obj);
            CHECK_MSG(st == IT_OK || ((st == IT_ERR_FORMAT || st == IT_ERR_IO) && strstr(it_last_error(), path)),
                      "%s: %s: %s", path, it_status_name(st), it_last_error());
            if (obj) dirs[d].l->release(obj);
            n++;
        }
        if (dp) closedir(dp);
    }
    /* fuzz_bpe's inputs: a mode byte ('0' encoder.json, '1' vocab.bpe, '2' text), then the file */
    DIR *dp = opendir(CORPUS "bpe");
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (strncmp(e->d_name, "regress-", 8) != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, CORPUS "bpe/%s", e->d_name);
        size_t len = 0;
        unsigned char *b = read_bytes(path, &len);
        if (b && len > 0 && b[0] % 3 != 2) {
            const char *in = tmp_path("regress_input");
            write_bytes(in, b + 1, len - 1);
            const loader *l = b[0] % 3 == 0 ? &ENCODER : &MERGES;
            void *obj = NULL;
            it_error_clear();
            it_status st = l->load(in, &obj);
            CHECK_MSG(st == IT_OK || (st == IT_ERR_FORMAT && strstr(it_last_error(), in)), "%s: %s: %s", path,
                      it_status_name(st), it_last_error());
            if (obj) l->release(obj);
            n++;
        }
        free(b);
    }
    if (dp) closedir(dp);
    printf("fuzz regressions: %d inputs\n", n);
}

/* ---- training: token ids beyond the vocabulary, flags, the allocator limit ---------------------- */

static char out_text[1 << 16], err_text[1 << 16];

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* it_train_main(argv) with stdout and stderr captured into out_text/err_text. */
static int run_main(const char *app, const char *const *args) {
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)app;
    for (; *args && argc < 63; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(tmp_path("main_out.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(tmp_path("main_err.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    close(fo);
    close(fe);
    int rc = it_train_main(argc, argv, app);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    slurp(tmp_path("main_out.txt"), out_text, sizeof out_text);
    slurp(tmp_path("main_err.txt"), err_text, sizeof err_text);
    return rc;
}

static bool one_line(const char *s) { return *s && strchr(s, '\n') == s + strlen(s) - 1; }

/* Exit status 2, one line on stderr containing every listed string, no training step. */
static void expect_usage_error(int line, const char *const *args, ...) {
    int rc = run_main("gpt2", args);
    va_list ap;
    va_start(ap, args);
    const char *missing = first_missing(err_text, ap);
    va_end(ap);
    int ok = rc == 2 && one_line(err_text) && !strstr(out_text, "step ") && !missing;
    it_test_checks++;
    if (!ok) {
        it_test_failures++;
        fprintf(stderr, "%s:%d: gpt2 %s ...: exit %d, expected 2 with one line%s%s; stderr: \"%s\"\n", __FILE__, line,
                args[0], rc, missing ? " containing " : "", missing ? missing : "", err_text);
    }
}
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define USAGE_ERROR(args, ...) expect_usage_error(__LINE__, args, __VA_ARGS__, NULL)

#define CK "--llmc_filepath", GFIX "tiny_gpt2.bin", "--input_bin", GFIX "tiny_shard.bin"

static void test_flags(void) {
    USAGE_ERROR(ARGS(CK, "--batchsize", "4"), "unknown flag --batchsize");
    USAGE_ERROR(ARGS(CK, "--batch_size", ""), "--batch_size", "''");
    USAGE_ERROR(ARGS(CK, "--learning_rate", "1e999"), "--learning_rate", "1e999");
    USAGE_ERROR(ARGS(CK, "--learning_rate", "nan"), "--learning_rate", "nan");
    USAGE_ERROR(ARGS(CK, "--num_iteration", "-1"), "--num_iteration", "-1");
    USAGE_ERROR(ARGS(CK, "--batch_size", "-1"), "--batch_size", "-1");
    USAGE_ERROR(ARGS(CK, "--sequence_length", "0x20"), "--sequence_length", "0x20");
    USAGE_ERROR(ARGS(CK, "--seed", "18446744073709551616"), "--seed", "18446744073709551616");
    USAGE_ERROR(ARGS(CK, "--sequence_length", "2000000"), "--sequence_length", "out of range");
    USAGE_ERROR(ARGS(CK, "--learning_rate=-0.5"), "--learning_rate", "out of range");
    USAGE_ERROR(ARGS(CK, "--max_memory_mb", "-5"), "--max_memory_mb", "-5");
    USAGE_ERROR(ARGS(CK, "--text_length", "0"), "--text_length", "out of range");
    USAGE_ERROR(ARGS(CK, "batch_size=4"), "batch_size=4");
    USAGE_ERROR(ARGS(CK, "--"), "'--'");
    /* combinations: T against the model's block size (32), the total batch against B*T, the
     * device index against the backend's devices, the head count against the width */
    USAGE_ERROR(ARGS(CK, "--sequence_length", "33"), "--sequence_length", "33", "block_size 32");
    USAGE_ERROR(ARGS(CK, "--batch_size", "4", "--sequence_length", "32", "--total_batch_size", "257"),
                "--total_batch_size", "257");
    USAGE_ERROR(ARGS(CK, "--device", "cpu:9"), "--device", "cpu:9");
    USAGE_ERROR(ARGS("--input_bin", GFIX "tiny_shard.bin", "--n_layer", "1", "--n_embd", "30", "--n_head", "4",
                     "--block_size", "16", "--vocab_size", "257", "--sequence_length", "8"),
                "n_embd", "n_head");
    /* Files written after the last step: a path they cannot go to is refused before the first
     * step, not after the whole run, and no temporary file is left beside it. */
#define SHORT "--sequence_length", "16", "--batch_size", "2", "--num_iteration", "2"
    char no_dir[512], under_file[512]; /* copies: tmp_path's buffers are reused */
    snprintf(no_dir, sizeof no_dir, "%s", tmp_path("no/dir/out.bin"));
    snprintf(under_file, sizeof under_file, "%s", tmp_path("no_dir_file/out.bin"));
    USAGE_ERROR(ARGS(CK, SHORT, "--output_checkpoint", no_dir), "--output_checkpoint", no_dir, "No such file");
    USAGE_ERROR(ARGS(CK, SHORT, "--output_checkpoint", tmpdir), "--output_checkpoint", tmpdir, "is a directory");
    USAGE_ERROR(ARGS(CK, SHORT, "--lora_rank", "2", "--lora_save_path", no_dir), "--lora_save_path", no_dir);
    USAGE_ERROR(ARGS(CK, SHORT, "--lora_rank", "2", "--lora_merge_output", no_dir), "--lora_merge_output", no_dir);
    write_bytes(tmp_path("no_dir_file"), "x", 1);
    USAGE_ERROR(ARGS(CK, SHORT, "--output_checkpoint", under_file), "--output_checkpoint", under_file);
    DIR *left = opendir(tmpdir);
    for (struct dirent *e; left && (e = readdir(left));)
        CHECK_MSG(!strstr(e->d_name, ".tmp."), "a temporary file was left in %s: %s", tmpdir, e->d_name);
    if (left) closedir(left);
    /* An output on a file the run reads is refused (it would be replaced after the last step),
     * and so are two outputs on one file; the inputs are left as they were. */
    size_t shard_len = 0, model_len = 0;
    unsigned char *shard_bytes = read_bytes(GFIX "tiny_shard.bin", &shard_len),
                  *model_bytes = read_bytes(GFIX "tiny_gpt2.bin", &model_len);
    char in_shard[512], in_model[512], out_a[512];
    snprintf(in_shard, sizeof in_shard, "%s", tmp_path("in_shard.bin"));
    snprintf(in_model, sizeof in_model, "%s", tmp_path("in_model.bin"));
    snprintf(out_a, sizeof out_a, "%s", tmp_path("out_a.bin"));
    CHECK(shard_bytes && model_bytes);
    if (shard_bytes && model_bytes) {
        write_bytes(in_shard, shard_bytes, shard_len);
        write_bytes(in_model, model_bytes, model_len);
#define MINE "--llmc_filepath", in_model, "--input_bin", in_shard, SHORT
        USAGE_ERROR(ARGS(MINE, "--output_checkpoint", in_shard), "--output_checkpoint", "--input_bin", "overwritten");
        USAGE_ERROR(ARGS(MINE, "--loss_log", in_model), "--loss_log", "--llmc_filepath");
        USAGE_ERROR(ARGS(MINE, "--output_checkpoint", out_a, "--loss_log", out_a), "--loss_log", "--output_checkpoint",
                    "two outputs");
        USAGE_ERROR(ARGS(MINE, "--input_val_bin", out_a, "--val_loss_every", "1", "--output_checkpoint", out_a),
                    "--output_checkpoint", "--input_val_bin");
        size_t n1 = 0, n2 = 0;
        unsigned char *s2 = read_bytes(in_shard, &n1), *m2 = read_bytes(in_model, &n2);
        CHECK(s2 && n1 == shard_len && !memcmp(s2, shard_bytes, shard_len));
        CHECK(m2 && n2 == model_len && !memcmp(m2, model_bytes, model_len));
        free(s2);
        free(m2);
        /* the checkpoint may replace the model it started from */
        CHECK(run_main("gpt2", ARGS(MINE, "--output_checkpoint", in_model)) == 0);
        m2 = read_bytes(in_model, &n2);
        CHECK(m2 && n2 == model_len && memcmp(m2, model_bytes, model_len)); /* the trained weights */
        free(m2);
#undef MINE
    }
    free(shard_bytes);
    free(model_bytes);
    /* The flags' own refusals come before the model is read: with a model that does not
     * exist, the schedule's and the outputs' errors are what is reported. */
    USAGE_ERROR(ARGS("--llmc_filepath", tmp_path("absent.bin"), "--input_bin", GFIX "tiny_shard.bin", SHORT,
                     "--num_iteration", "0"),
                "--lr_decay_iters");
    USAGE_ERROR(ARGS("--llmc_filepath", tmp_path("absent.bin"), "--input_bin", GFIX "tiny_shard.bin", SHORT,
                     "--output_checkpoint", no_dir),
                "--output_checkpoint", no_dir);
#undef SHORT
    /* Token ids >= vocab_size: an id of the padded rows (257..319) is no token. */
    uint32_t toks[400];
    for (int i = 0; i < 400; i++) toks[i] = (uint32_t)(i * 7 % 257);
    toks[321] = 300;
    const char *shard = tmp_path("beyond_vocab.bin");
    CHECK_OK(it_shard_write(shard, toks, 400, false));
    USAGE_ERROR(ARGS("--llmc_filepath", GFIX "tiny_gpt2.bin", "--input_bin", shard, "--batch_size", "2",
                     "--sequence_length", "16"),
                shard, "position 321", "vocab size 257", "found 300");
    it_train_config c;
    it_train_config_defaults(&c, "gpt2");
    c.llmc_filepath = GFIX "tiny_gpt2.bin";
    c.input_bin = shard;
    c.batch_size = 2;
    c.sequence_length = 16;
    c.quiet = true;
    CHECK_ERR_ALL(it_train_run(&c, NULL), IT_ERR_FORMAT, shard, "position 321", "found 300");
}

/* A shape error found only once the model is known must still come before the model is built:
 * d12 (124M parameters, 1 GB with its gradients) must not be allocated to learn that
 * --sequence_length 2048 exceeds its block size 1024. */
static void check_before_heavy_work(void) {
    USAGE_ERROR(ARGS("--model", "d12", "--input_bin", GFIX "tiny_shard.bin", "--sequence_length", "2048"),
                "--sequence_length", "2048", "1024");
}
static void test_before_heavy_work(void) {
    if (UNDER_SANITIZER) {
        printf("before heavy work: skipped under ASan (needs an address-space limit)\n");
        return;
    }
    in_small_address_space("before_heavy_work");
}

static child_fn child_body(const char *name) {
    return strcmp(name, "huge_claims") == 0 ? huge_claims : check_before_heavy_work;
}

/* An allocator limit makes training fail with IT_ERR_OOM naming the request, the device and its
 * free/total memory; the process reports and ends cleanly (under ASan: no leak). */
static void test_oom(void) {
    it_train_config c;
    it_train_config_defaults(&c, "gpt2");
    c.llmc_filepath = GFIX "tiny_gpt2.bin";
    c.input_bin = GFIX "tiny_shard.bin";
    c.batch_size = 4;
    c.sequence_length = 32;
    c.num_iteration = 2;
    c.quiet = true;
    c.max_memory_mb = 1; /* a step of the tiny model reserves about 2 MiB */
    CHECK_ERR_ALL(it_train_run(&c, NULL), IT_ERR_OOM, "out of memory on cpu", "requested", "bytes", "limit is 1 MiB",
                  "--max_memory_mb", "free", "MiB of");
    it_mem_set_limit(it_device_cpu(), 0);
    CHECK_OK(it_mem_empty_cache(it_device_cpu()));
    c.max_memory_mb = 64; /* enough: the same run trains */
    CHECK_OK(it_train_run(&c, NULL));
    it_mem_set_limit(it_device_cpu(), 0);

    CHECK_OK(it_mem_empty_cache(it_device_cpu())); /* a limit applies to new reservations */
    /* Through the CLI: exit status 1 (a failure during training, not a usage error), one line. */
    int rc = run_main("gpt2", (const char *const[]){CK, "--batch_size", "4", "--sequence_length", "32",
                                                    "--max_memory_mb", "1", NULL});
    it_mem_set_limit(it_device_cpu(), 0);
    CHECK_MSG(rc == 1 && one_line(err_text) && strstr(err_text, "out of memory on cpu") &&
                  strstr(err_text, "requested"),
              "--max_memory_mb 1: exit %d, stderr \"%s\"", rc, err_text);

    /* IT_MAX_MEMORY_MB is read when the device's allocator starts: a fresh process. Under ASan a
     * leak on this path would change the exit status (LeakSanitizer exits 23). */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "IT_MAX_MEMORY_MB=1 OMP_NUM_THREADS=1 '%s/gpt2' --llmc_filepath '%s' --input_bin '%s' --batch_size 4 "
             "--sequence_length 32 --num_iteration 2 >'%s' 2>'%s'",
             IT_BINARY_DIR, GFIX "tiny_gpt2.bin", GFIX "tiny_shard.bin", tmp_path("env_out.txt"),
             tmp_path("env_err.txt"));
    int status = system(cmd);
    slurp(tmp_path("env_err.txt"), err_text, sizeof err_text);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1 && one_line(err_text) &&
                  strstr(err_text, "IT_MAX_MEMORY_MB") && strstr(err_text, "out of memory on cpu"),
              "IT_MAX_MEMORY_MB=1: status %d, stderr \"%s\"", status, err_text);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3]);
    make_tmpdir("it_test_bad_inputs");
    test_gpt2_checkpoint();
    test_llama3_checkpoint();
    test_mixtral_checkpoint();
    test_shard_files();
    test_tokenizer_files();
    test_bpe_files();
    test_huge_claims();
    test_fuzz_regressions();
    test_flags();
    test_before_heavy_work();
    test_oom();
    remove_tmpdir();
    return it_test_report("test_bad_inputs");
}
