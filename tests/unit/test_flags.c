/* The flag table (src/train/flags.c): --help lists exactly the flags the parser accepts, every
 * default parses, both value forms and gflags' boolean forms, --flagfile (and that the command
 * line overrides it), "did you mean", the per-app defaults, the ranks' agreement hashes and
 * the one status -> exit code mapping. */
#include <stdlib.h>
#include <unistd.h>

#include "infinitrain/train.h"
#include "it_test.h"
#include "train/train_internal.h"

static char tmpdir[] = "/tmp/it_test_flags_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Parse a NULL-terminated argument list (argv[0] added) into *c, fresh defaults for `app`. */
static it_status parse(it_train_config *c, const char *app, const char *const *args, bool *help) {
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)app;
    for (; *args && argc < 63; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    it_train_config_defaults(c, app);
    bool h = false;
    it_status st = it_train_parse_args(c, argc, argv, help ? help : &h);
    return st;
}
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static char help_text[16384];

static void test_help_matches_table(void) {
    FILE *f = fmemopen(help_text, sizeof help_text - 1, "w");
    CHECK(f != NULL);
    if (!f) return;
    it_train_print_help("gpt2", f);
    fclose(f);
    size_t n;
    const it_train_flag *flags = it_train_flags(&n);
    CHECK(n >= 30);
    /* every flag of the table is in --help, on a line of its own */
    for (size_t i = 0; i < n; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "\n  --%s ", flags[i].name);
        CHECK_MSG(strstr(help_text, needle) != NULL, "--%s is missing from --help", flags[i].name);
        CHECK_MSG(flags[i].help && *flags[i].help, "--%s has no help text", flags[i].name);
        CHECK(it_train_flag_find(flags[i].name) == &flags[i]);
    }
    /* every flag --help lists is one the parser accepts */
    int listed = 0;
    for (const char *p = strstr(help_text, "\n  --"); p; p = strstr(p + 1, "\n  --")) {
        char name[64];
        if (sscanf(p + 5, "%63[a-z0-9_]", name) != 1) continue;
        listed++;
        CHECK_MSG(it_train_flag_find(name) != NULL, "--help lists --%s, which the table lacks", name);
    }
    CHECK(listed == (int)n);
    /* each group's flags are contiguous (--help prints a group's heading once) */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 2; j < n; j++)
            if (strcmp(flags[i].group, flags[j].group) == 0)
                for (size_t k = i + 1; k < j; k++)
                    CHECK_MSG(strcmp(flags[k].group, flags[i].group) == 0, "group %s is split by --%s", flags[i].group,
                              flags[k].name);
    /* the defaults as --help shows them */
    CHECK(strstr(help_text, "--batch_size B") && strstr(help_text, "sequences per micro-step (4)"));
    CHECK(strstr(help_text, "(25600)") && strstr(help_text, "(B*T*ranks)"));
    CHECK(strstr(help_text, "--quiet ") != NULL); /* was parsed but not listed */
}

/* Each flag takes its own default as a value, in both forms, and leaves the field as the
 * defaults left it. */
static void test_defaults_parse(void) {
    size_t n;
    const it_train_flag *flags = it_train_flags(&n);
    it_train_config d;
    it_train_config_defaults(&d, "gpt2");
    CHECK(d.batch_size == 4 && d.sequence_length == 64 && d.num_iteration == 10 && d.total_batch_size == 0);
    CHECK(d.learning_rate == 1e-4f && d.optimizer == IT_OPTIM_SGD && d.lr_decay == IT_LR_CONSTANT);
    CHECK(d.dtype == IT_DTYPE_FP32 && d.text_length == 64 && d.seed == 42 && d.log_interval == 10);
    CHECK(d.ddp_bucket_kb == 25600 && d.zero_stage == 0 && !d.quiet && !d.backend_report);
    CHECK(strcmp(d.device, "cpu") == 0 && strcmp(d.model, "d12") == 0 && d.input_bin == NULL);
    for (size_t i = 0; i < n; i++) {
        if (!flags[i].def) continue;
        char eq[128];
        snprintf(eq, sizeof eq, "--%s=%s", flags[i].name, flags[i].def);
        char name[80];
        snprintf(name, sizeof name, "--%s", flags[i].name);
        it_train_config a, b;
        CHECK_OK(parse(&a, "gpt2", ARGS(eq), NULL));
        if (flags[i].kind == IT_FLAG_BOOL) /* a boolean never takes the next argument: bare is true */
            CHECK_OK(parse(&b, "gpt2", strcmp(flags[i].def, "true") == 0 ? ARGS(name) : ARGS(eq), NULL));
        else
            CHECK_OK(parse(&b, "gpt2", ARGS(name, flags[i].def), NULL));
        /* whole configs: the defaults memset them, so padding compares equal too */
        CHECK_MSG(memcmp(&a, &d, sizeof d) == 0, "--%s=%s differs from the default", flags[i].name, flags[i].def);
        CHECK(memcmp(&a, &b, sizeof d) == 0);
    }
}

static void test_forms(void) {
    it_train_config c;
    CHECK_OK(parse(&c, "gpt2",
                   ARGS("--batch_size", "8", "--sequence_length=16", "--learning_rate", "3e-4", "--optimizer=adamw",
                        "--lr_decay_style", "cosine", "--dtype=bf16", "--seed", "7", "--input_bin", "x.bin"),
                   NULL));
    CHECK(c.batch_size == 8 && c.sequence_length == 16 && c.learning_rate == 3e-4f);
    CHECK(c.optimizer == IT_OPTIM_ADAMW && c.lr_decay == IT_LR_COSINE && c.dtype == IT_DTYPE_BF16 && c.seed == 7);
    CHECK(c.input_bin && strcmp(c.input_bin, "x.bin") == 0);
    /* booleans: bare, =true|false (and gflags' other spellings), --noname; never the next argument */
    CHECK_OK(parse(&c, "gpt2", ARGS("--quiet"), NULL));
    CHECK(c.quiet);
    CHECK_OK(parse(&c, "gpt2", ARGS("--quiet", "--quiet=false"), NULL));
    CHECK(!c.quiet);
    CHECK_OK(parse(&c, "gpt2", ARGS("--backend_report=TRUE", "--quiet=1"), NULL));
    CHECK(c.backend_report && c.quiet);
    CHECK_OK(parse(&c, "gpt2", ARGS("--quiet=yes", "--noquiet"), NULL));
    CHECK(!c.quiet);
    CHECK_ERR(parse(&c, "gpt2", ARGS("--quiet", "false"), NULL), IT_ERR_INVALID_ARG, "unexpected argument 'false'");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--quiet=maybe"), NULL), IT_ERR_INVALID_ARG, "--quiet: 'maybe' is not a boolean");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--noquiet=1"), NULL), IT_ERR_INVALID_ARG, "--noquiet takes no value");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--nobatch_size"), NULL), IT_ERR_INVALID_ARG, "unknown flag --nobatch_size");
    /* values */
    CHECK_ERR(parse(&c, "gpt2", ARGS("--batch_size"), NULL), IT_ERR_INVALID_ARG, "--batch_size: missing value");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--zero_stage", "3"), NULL), IT_ERR_INVALID_ARG, "out of range 0..2");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--grad_clip=inf"), NULL), IT_ERR_INVALID_ARG, "not a finite number");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--optimizer", "lion"), NULL), IT_ERR_INVALID_ARG,
              "--optimizer: 'lion' is not an optimizer (sgd, adam, adamw)");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--dtype", "fp16"), NULL), IT_ERR_UNSUPPORTED, "loss scaling");
    bool help = false;
    CHECK_OK(parse(&c, "gpt2", ARGS("--batch_size=2", "--help"), &help));
    CHECK(help);
}

static void test_did_you_mean(void) {
    it_train_config c;
    CHECK_ERR(parse(&c, "gpt2", ARGS("--batchsize", "4"), NULL), IT_ERR_INVALID_ARG,
              "unknown flag --batchsize (did you mean --batch_size?)");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--learnng_rat=1"), NULL), IT_ERR_INVALID_ARG, "did you mean --learning_rate?");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--lr=1"), NULL), IT_ERR_INVALID_ARG, "unknown flag --lr (see --help)");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--colour"), NULL), IT_ERR_INVALID_ARG, "unknown flag --colour (see --help)");
}

static void test_flagfile(void) {
    const char *inner = tmp_path("inner.flags"), *outer = tmp_path("outer.flags");
    write_file(inner, "--text_length=99\n");
    char text[1024];
    snprintf(text, sizeof text,
             "# InfiniTrain-style flagfile\n"
             "\n"
             "--batch_size=8\n"
             "  --loss_log=from_file.txt   \r\n"
             "--quiet\n"
             "--nobackend_report\n"
             "--optimizer=adamw\n"
             "--flagfile=%s\n",
             inner);
    write_file(outer, text);
    it_train_config c;
    /* the command line overrides the file wherever it stands */
    CHECK_OK(parse(&c, "gpt2", ARGS("--batch_size", "2", "--flagfile", outer, "--backend_report"), NULL));
    CHECK(c.batch_size == 2 && c.quiet && c.backend_report && c.optimizer == IT_OPTIM_ADAMW && c.text_length == 99);
    CHECK(c.loss_log && strcmp(c.loss_log, "from_file.txt") == 0);
    CHECK(c.storage != NULL);
    it_train_config_release(&c);
    CHECK(c.storage == NULL);
    /* errors name the file and line */
    const char *bad = tmp_path("bad.flags");
    write_file(bad, "--batch_size=4\n\n--batch_size=zero\n");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", bad), NULL), IT_ERR_INVALID_ARG,
              "bad.flags:3: --batch_size: 'zero'");
    it_train_config_release(&c);
    write_file(bad, "--batch_size 4\n");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", bad), NULL), IT_ERR_INVALID_ARG,
              "bad.flags:1: '--batch_size 4': a flagfile line is --name=value");
    it_train_config_release(&c);
    write_file(bad, "batch_size=4\n");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", bad), NULL), IT_ERR_INVALID_ARG,
              "unexpected argument 'batch_size=4'");
    it_train_config_release(&c);
    write_file(bad, "--batchsize=4\n");
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", bad), NULL), IT_ERR_INVALID_ARG, "did you mean --batch_size?");
    it_train_config_release(&c);
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", tmp_path("missing.flags")), NULL), IT_ERR_INVALID_ARG,
              "--flagfile: cannot open");
    it_train_config_release(&c);
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile=/dev/null"), NULL), IT_ERR_INVALID_ARG, "not a regular file");
    it_train_config_release(&c);
    /* a flagfile that names itself */
    const char *loop = tmp_path("loop.flags");
    snprintf(text, sizeof text, "--flagfile=%s\n", loop);
    write_file(loop, text);
    CHECK_ERR(parse(&c, "gpt2", ARGS("--flagfile", loop), NULL), IT_ERR_INVALID_ARG, "nest deeper than");
    it_train_config_release(&c);
}

static void test_app_defaults(void) {
    it_train_config c;
    it_train_config_defaults(&c, "llama3");
    CHECK(c.optimizer == IT_OPTIM_ADAM && c.learning_rate == 1e-5f);
    it_train_config_defaults(&c, "mixtral");
    CHECK(c.optimizer == IT_OPTIM_ADAM && c.learning_rate == 1e-4f);
    FILE *f = fmemopen(help_text, sizeof help_text - 1, "w");
    it_train_print_help("llama3", f);
    fclose(f);
    CHECK(strstr(help_text, "sgd, adam or adamw (adam)") && strstr(help_text, "peak learning rate (1e-05)"));
}

/* Two ranks given different values of an `agree` flag differ in that flag's hash alone. */
static void test_agree_hashes(void) {
    enum { MAX = 64 };
    uint64_t ha[MAX], hb[MAX];
    const char *na[MAX], *nb[MAX];
    it_train_config a, b;
    CHECK_OK(parse(&a, "gpt2", ARGS("--input_bin", "x.bin", "--device", "sim:0", "--loss_log", "a.txt"), NULL));
    CHECK_OK(parse(&b, "gpt2", ARGS("--input_bin", "x.bin", "--device", "sim:1", "--loss_log", "b.txt"), NULL));
    int n = it_train_flags_agree_hashes(&a, ha, na, MAX);
    CHECK(n == it_train_flags_agree_hashes(&b, hb, nb, MAX) && n > 20);
    for (int i = 0; i < n; i++) CHECK_MSG(ha[i] == hb[i], "--%s differs", na[i]);
    CHECK_OK(parse(&b, "gpt2", ARGS("--input_bin", "x.bin", "--learning_rate", "2e-4"), NULL));
    it_train_flags_agree_hashes(&b, hb, nb, MAX);
    int differ = 0;
    for (int i = 0; i < n; i++)
        if (ha[i] != hb[i]) {
            differ++;
            CHECK(strcmp(na[i], "learning_rate") == 0);
        }
    CHECK(differ == 1);
    CHECK_OK(parse(&b, "gpt2", ARGS("--learning_rate", "2e-4"), NULL)); /* input_bin NULL vs "x.bin" */
    it_train_flags_agree_hashes(&b, hb, nb, MAX);
    differ = 0;
    for (int i = 0; i < n; i++) differ += ha[i] != hb[i];
    CHECK(differ == 2);
}

static void test_exit_codes(void) {
    CHECK(it_train_exit_code(IT_OK) == 0);
    CHECK(it_train_exit_code(IT_ERR_INVALID_ARG) == 2 && it_train_exit_code(IT_ERR_FORMAT) == 2);
    CHECK(it_train_exit_code(IT_ERR_IO) == 2 && it_train_exit_code(IT_ERR_NOT_FOUND) == 2);
    CHECK(it_train_exit_code(IT_ERR_OOM) == 1 && it_train_exit_code(IT_ERR_INTERNAL) == 1);
    CHECK(it_train_exit_code(IT_ERR_UNSUPPORTED) == 1 && it_train_exit_code(IT_ERR_BACKEND) == 1);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_help_matches_table();
    test_defaults_parse();
    test_forms();
    test_did_you_mean();
    test_flagfile();
    test_app_defaults();
    test_agree_hashes();
    test_exit_codes();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return it_test_report("test_flags");
}
