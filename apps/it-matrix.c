/* it-matrix: run InfiniTrain-Test's matrix (scripts/test_config.json, format unchanged) on one
 * device with this project's apps, as InfiniTrain's scripts/run_models_and_profile.bash does.
 *
 *   it-matrix CONFIG --device NAME [--only-run tag,...] [--log-dir DIR] [--var NAME=VALUE]...
 *             [--baseline DIR [--no-tps] [--threshold-fp32 X] [--threshold-bf16 X]] [--list]
 *
 * For each test group, each test and each model whose *_TEST_GROUPS selects the group (gpt2, then
 * llama3, mixtral, qwen3), the case's args become the app's flags; nthread_per_process N becomes N
 * ranks under mpirun. A flag the app does not list in --help, or a value outside the choices its
 * help names ("--zero_stage 0|1"), makes the case "unsupported" (reported, never skipped); so does
 * a run the app stops with exit 2 and a line saying a combination is "not supported". Logs go
 * to DIR/<tag>/<model>_<id>.log with InfiniTrain's header lines. With --baseline, each case that
 * ran is judged against the same-named log there by it-compare (InfiniTrain's compare_loss.py and
 * compare_tps.py rules), and a difference fails it with the first differing step.
 * docs/it-matrix.md has the details.
 *
 * Exit status: 0 no case failed, 1 a case failed, 2 bad arguments or a bad config. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- small utilities ---------------------------------------------------------------------- */

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("it-matrix: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    if (!d) die("out of memory");
    return d;
}

/* A growable NUL-terminated string. */
typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) die("format error");
    if ((size_t)n < sizeof tmp) {
        sb_addn(b, tmp, (size_t)n);
        return;
    }
    char *big = xrealloc(NULL, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_addn(b, big, (size_t)n);
    free(big);
}

static char *sb_take(sbuf *b) { return b->s ? b->s : xstrdup(""); }

/* A list of owned strings (an argv under construction, NULL-terminated when used). */
typedef struct {
    char **v;
    size_t n, cap;
} strv;

static void sv_push(strv *a, const char *s) {
    if (a->n + 2 > a->cap) {
        a->cap = (a->n + 2) * 2;
        a->v = xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = s ? xstrdup(s) : NULL;
    a->v[a->n] = NULL;
}

static void sv_free(strv *a) {
    for (size_t i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(buf, 0777) != 0 && errno != EEXIST) ? -1 : 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

/* ---- variables: the config's "variables", then --var overrides; @NAME@ substitution --------- */

typedef struct {
    char *name, *value;
} var;

typedef struct {
    var *v;
    size_t n;
} var_list;

static void var_set(var_list *vl, const char *name, const char *value) {
    for (size_t i = 0; i < vl->n; i++)
        if (strcmp(vl->v[i].name, name) == 0) {
            free(vl->v[i].value);
            vl->v[i].value = xstrdup(value);
            return;
        }
    vl->v = xrealloc(vl->v, (vl->n + 1) * sizeof *vl->v);
    vl->v[vl->n].name = xstrdup(name);
    vl->v[vl->n].value = xstrdup(value);
    vl->n++;
}

static void var_list_free(var_list *vl) {
    for (size_t i = 0; i < vl->n; i++) {
        free(vl->v[i].name);
        free(vl->v[i].value);
    }
    free(vl->v);
    vl->v = NULL;
    vl->n = 0;
}

static const char *var_get(const var_list *vl, const char *name) {
    for (size_t i = 0; i < vl->n; i++)
        if (strcmp(vl->v[i].name, name) == 0) return vl->v[i].value;
    return NULL;
}

/* Replaces each @NAME@ (NAME: [A-Za-z_][A-Za-z0-9_]*) by the variable's value, itself substituted
 * (depth-limited, so a cycle is an error rather than a hang). Any other '@' stays as it is. */
static char *subst(const var_list *vl, const char *s, int depth) {
    if (depth > 16) die("variables refer to each other in a cycle near \"%s\"", s);
    sbuf b = {0};
    sb_add(&b, "");
    for (const char *p = s; *p;) {
        if (*p == '@' && (isalpha((unsigned char)p[1]) || p[1] == '_')) {
            const char *q = p + 1;
            while (isalnum((unsigned char)*q) || *q == '_') q++;
            if (*q == '@') {
                char name[128];
                size_t len = (size_t)(q - p - 1);
                if (len >= sizeof name) die("variable name too long in \"%s\"", s);
                memcpy(name, p + 1, len);
                name[len] = '\0';
                const char *val = var_get(vl, name);
                if (!val) die("\"%s\" uses @%s@, which is not defined (set it with --var %s=VALUE)", s, name, name);
                char *r = subst(vl, val, depth + 1);
                sb_add(&b, r);
                free(r);
                p = q + 1;
                continue;
            }
        }
        sb_addn(&b, p, 1);
        p++;
    }
    return sb_take(&b);
}

/* ---- the apps' flags, read once from their --help ----------------------------------------- */

typedef struct {
    char name[64];
    char choices[64]; /* "0|1" when the help's placeholder names the accepted values, else "" */
} flag_info;

typedef struct {
    const char *model;      /* InfiniTrain's model name, used in the save/load namespacing */
    const char *app;        /* the executable next to it-matrix */
    const char *log_prefix; /* InfiniTrain's log name prefix */
    const char *groups_var, *groups_default, *input_var, *llmc_var;
    flag_info *flags;
    size_t nflags;
    long seq_len_default; /* --sequence_length's default, for Mixtral's global_batch_size */
    int loaded;
} model_def;

static model_def MODELS[] = {
    {"gpt2", "gpt2", "gpt2", "GPT2_TEST_GROUPS", "basic,zero,lora,checkpoint", "GPT2_INPUT_BIN", "GPT2_LLMC_FILEPATH",
     NULL, 0, 0, 0},
    {"llama3", "llama3", "llama3", "LLAMA3_TEST_GROUPS", "basic,zero,lora,checkpoint", "LLAMA3_INPUT_BIN",
     "LLAMA3_LLMC_FILEPATH", NULL, 0, 0, 0},
    {"mixtral", "mixtral", "tiny_mixtral", "MIXTRAL_TEST_GROUPS", "moe", "MIXTRAL_INPUT_BIN", "MIXTRAL_LLMC_FILEPATH",
     NULL, 0, 0, 0},
    /* InfiniTrain's run script (PR #208) leaves QWEN3_TEST_GROUPS empty unless the config sets it */
    {"qwen3", "qwen3", "qwen3", "QWEN3_TEST_GROUPS", "", "QWEN3_INPUT_BIN", "QWEN3_LLMC_FILEPATH", NULL, 0, 0, 0},
};
enum { NMODELS = sizeof MODELS / sizeof MODELS[0] };

static char g_bin_dir[PATH_MAX]; /* where it-matrix and the apps live */

static char *app_path(const model_def *m) {
    sbuf b = {0};
    sb_printf(&b, "%s/%s", g_bin_dir, m->app);
    return sb_take(&b);
}

/* Flag lines in --help start with spaces then "--name"; the next word is the value's
 * placeholder, which lists the accepted values when it holds a '|'. */
static void load_flags(model_def *m) {
    if (m->loaded) return;
    m->loaded = 1;
    char *path = app_path(m);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", path);
    FILE *f = popen(cmd, "r");
    if (!f) die("cannot run %s --help: %s", path, strerror(errno));
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        if (*p != ' ') continue;
        while (*p == ' ') p++;
        if (p[0] != '-' || p[1] != '-') continue;
        p += 2;
        flag_info fi = {{0}, {0}};
        size_t k = 0;
        while ((isalnum((unsigned char)*p) || *p == '_') && k + 1 < sizeof fi.name) fi.name[k++] = *p++;
        if (k == 0) continue;
        while (*p == ' ') p++;
        size_t w = strcspn(p, " \n");
        if (memchr(p, '|', w) && w < sizeof fi.choices) memcpy(fi.choices, p, w);
        if (strcmp(fi.name, "sequence_length") == 0) {
            const char *open = strrchr(p, '(');
            if (open) m->seq_len_default = strtol(open + 1, NULL, 10);
        }
        m->flags = xrealloc(m->flags, (m->nflags + 1) * sizeof *m->flags);
        m->flags[m->nflags++] = fi;
    }
    int rc = pclose(f);
    if (m->nflags == 0 || rc != 0) die("%s --help listed no flags (exit %d): is the build complete?", path, rc);
    free(path);
}

static const flag_info *find_flag(const model_def *m, const char *name) {
    for (size_t i = 0; i < m->nflags; i++)
        if (strcmp(m->flags[i].name, name) == 0) return &m->flags[i];
    return NULL;
}

static int choice_ok(const char *choices, const char *value) {
    size_t vl = strlen(value);
    for (const char *p = choices; *p;) {
        size_t w = strcspn(p, "|");
        if (w == vl && strncmp(p, value, w) == 0) return 1;
        p += w;
        if (*p == '|') p++;
    }
    return 0;
}

/* ---- cases -------------------------------------------------------------------------------- */

typedef enum { ST_PENDING, ST_PASSED, ST_FAILED, ST_UNSUPPORTED, ST_INTERRUPTED } case_status;

typedef struct {
    const char *tag;
    char *name;        /* <log_prefix>_<id> */
    strv argv;         /* the full command, mpirun included */
    char *command;     /* argv as a shell line, for [COMMAND] */
    char *unsupported; /* why the build cannot run it, or NULL */
    char *ckpt_root;   /* CKPT_ROOT_DIR, removed after each group as InfiniTrain does */
    size_t group;      /* index in test_groups */
    int uses_ckpt;     /* the args have save or load */
    case_status status;
    char *detail; /* failed: "exit N: last error line" */
    double seconds;
} matrix_case;

/* A JSON scalar as InfiniTrain's jq `tostring` writes it (reals in the shortest form that reads
 * back to the same double, so 1e-05 stays 1e-05 and 16.0 becomes 16). */
static char *json_scalar(const json_t *v, const var_list *vl, const char *where) {
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: return subst(vl, json_string_value(v), 0);
    case JSON_INTEGER: snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v)); return xstrdup(buf);
    case JSON_REAL:
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, json_real_value(v));
            if (strtod(buf, NULL) == json_real_value(v)) break;
        }
        return xstrdup(buf);
    case JSON_TRUE: return xstrdup("true");
    case JSON_FALSE: return xstrdup("false");
    default: die("%s: a value must be a string, number or boolean", where);
    }
    return NULL;
}

/* InfiniTrain keeps the models' and runs' checkpoints apart: save becomes <save>/<model>/<mode>
 * (mode "resume" when the test loads, else "no_resume"), and load <prefix>/checkpoint_step_N[/...]
 * becomes <prefix>/<model>/<src>/checkpoint_step_N[/...] (src "no_resume" when the path holds
 * "no_resume", else "resume"). */
static char *namespaced(const char *p, const char *model, const char *mode) {
    const char *split = NULL;
    for (const char *q = strstr(p, "/checkpoint_step_"); q; q = strstr(q + 1, "/checkpoint_step_")) {
        const char *d = q + strlen("/checkpoint_step_");
        if (!isdigit((unsigned char)*d)) continue;
        while (isdigit((unsigned char)*d)) d++;
        if (*d == '\0' || *d == '/') split = q;
    }
    sbuf b = {0};
    if (split)
        sb_printf(&b, "%.*s/%s/%s%s", (int)(split - p), p, model, mode, split);
    else
        sb_printf(&b, "%s/%s/%s", p, model, mode);
    return sb_take(&b);
}

static char *shell_line(const strv *a) {
    sbuf b = {0};
    sb_add(&b, "");
    for (size_t i = 0; i < a->n; i++) {
        const char *s = a->v[i];
        if (i) sb_add(&b, " ");
        if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%") == strlen(s)) {
            sb_add(&b, s);
            continue;
        }
        sb_add(&b, "'");
        for (const char *c = s; *c; c++)
            if (*c == '\'')
                sb_add(&b, "'\\''");
            else
                sb_addn(&b, c, 1);
        sb_add(&b, "'");
    }
    return sb_take(&b);
}

static void add_reason(sbuf *why, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(why, why->n ? ", " : "");
    sb_add(why, tmp);
}

static matrix_case make_case(model_def *m, const char *tag, const char *id, const json_t *args, const var_list *vl,
                             const char *device, const char *where) {
    matrix_case c = {0};
    c.tag = tag;
    sbuf name = {0};
    sb_printf(&name, "%s_%s", m->log_prefix, id);
    c.name = sb_take(&name);

    const char *input = var_get(vl, m->input_var), *llmc = var_get(vl, m->llmc_var);
    strv flags = {0};
    char *app = app_path(m);
    sv_push(&flags, app);
    free(app);
    if (input) {
        char *s = subst(vl, input, 0);
        sv_push(&flags, "--input_bin");
        sv_push(&flags, s);
        free(s);
    }
    if (llmc && *llmc) {
        char *s = subst(vl, llmc, 0);
        sv_push(&flags, "--llmc_filepath");
        sv_push(&flags, s);
        free(s);
    }
    sv_push(&flags, "--device");
    sv_push(&flags, device);

    sbuf why = {0};
    long long nproc = 1, global_batch = -1, micro_batch = -1, seq_len = m->seq_len_default;
    int has_load = json_object_get(args, "load") != NULL;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)args, key, val) {
        char *v = json_scalar(val, vl, where);
        if (strcmp(key, "nthread_per_process") == 0 || strcmp(key, "global_batch_size") == 0 ||
            strcmp(key, "micro_batch_size") == 0) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (*end || n < 1) die("%s: %s must be a positive integer, not %s", where, key, v);
            if (key[0] == 'n')
                nproc = n;
            else if (key[0] == 'g')
                global_batch = n;
            else
                micro_batch = n;
            free(v);
            continue;
        }
        if (strcmp(key, "sequence_length") == 0) seq_len = strtoll(v, NULL, 10);
        if (strcmp(key, "save") == 0 || strcmp(key, "load") == 0) {
            const char *mode =
                key[0] == 's' ? (has_load ? "resume" : "no_resume") : (strstr(v, "no_resume") ? "no_resume" : "resume");
            c.uses_ckpt = 1;
            char *ns = namespaced(v, m->model, mode);
            free(v);
            v = ns;
        }
        const flag_info *fi = find_flag(m, key);
        if (!fi)
            add_reason(&why, "--%s", key);
        else if (fi->choices[0] && !choice_ok(fi->choices, v))
            add_reason(&why, "--%s %s (supported: %s)", key, v, fi->choices);
        char opt[80];
        if (json_is_boolean(val)) {
            /* --name=true: InfiniTrain's "--name true" relies on gflags leaving "true" as a stray
             * argument, and would read "--name false" as true. */
            snprintf(opt, sizeof opt, "--%s=%s", key, v);
            sv_push(&flags, opt);
        } else {
            snprintf(opt, sizeof opt, "--%s", key);
            sv_push(&flags, opt);
            sv_push(&flags, v);
        }
        free(v);
    }
    /* Mixtral's example counts its batch in sequences: global_batch_size sequences per step
     * (our --total_batch_size counts tokens), micro_batch_size per micro-step. */
    char num[32];
    if (global_batch > 0) {
        if (seq_len <= 0) die("%s: global_batch_size needs the sequence length", where);
        snprintf(num, sizeof num, "%lld", global_batch * seq_len);
        sv_push(&flags, "--total_batch_size");
        sv_push(&flags, num);
    }
    if (micro_batch > 0) {
        snprintf(num, sizeof num, "%lld", micro_batch);
        sv_push(&flags, "--batch_size");
        sv_push(&flags, num);
    }
    if (nproc > 1) {
        const char *pre[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np"};
        for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) sv_push(&c.argv, pre[i]);
        snprintf(num, sizeof num, "%lld", nproc);
        sv_push(&c.argv, num);
    }
    for (size_t i = 0; i < flags.n; i++) sv_push(&c.argv, flags.v[i]);
    sv_free(&flags);
    c.command = shell_line(&c.argv);
    if (why.n) {
        c.unsupported = sb_take(&why);
        c.status = ST_UNSUPPORTED;
    }
    const char *ckpt = var_get(vl, "CKPT_ROOT_DIR");
    if (ckpt && *ckpt) c.ckpt_root = subst(vl, ckpt, 0);
    return c;
}

/* Whether a comma list ("*" = all) names tag, ignoring spaces around names. */
static int list_has(const char *list, const char *tag) {
    if (strcmp(list, "*") == 0) return 1;
    size_t tl = strlen(tag);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        size_t w = strcspn(p, ",");
        size_t e = w;
        while (e > 0 && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
        if (e == tl && strncmp(p, tag, tl) == 0) return 1;
        p += w;
        if (*p == ',') p++;
    }
    return 0;
}

/* ---- running ------------------------------------------------------------------------------ */

static char *run_git(const char *args) {
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "git -C '%s/..' %s 2>/dev/null", g_bin_dir, args);
    FILE *f = popen(cmd, "r");
    char line[256] = "";
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = '\0';
        pclose(f);
    }
    line[strcspn(line, "\r\n")] = '\0';
    return xstrdup(line[0] ? line : "unknown");
}

static int contains_ci(const char *s, const char *needle) {
    size_t n = strlen(needle);
    for (; *s; s++)
        if (strncasecmp(s, needle, n) == 0) return 1;
    return 0;
}

/* An app's line refusing a flag it does not know or a combination it does not support yet
 * ("... is not supported with pipeline parallelism"). A file's unsupported version or the
 * like ("..., not supported") is an error of the case, not a refusal. */
static bool refusal_line(const char *line) {
    return strstr(line, "unknown flag") || strstr(line, "is not supported") || strstr(line, "not supported with") ||
           strstr(line, "not supported for") || strstr(line, "not supported yet");
}

/* mpirun's own lines: "[host:pid] ..." (ORTE's logs and help-aggregation notes) and its
 * help boxes between lines of dashes. They follow a failed rank's message and are never it. */
static bool mpirun_line(const char *line, bool *in_box) {
    if (strncmp(line, "-----", 5) == 0 && strspn(line, "-") == strlen(line)) {
        *in_box = !*in_box;
        return true;
    }
    if (*in_box) return true;
    const char *close = line[0] == '[' ? strchr(line, ']') : NULL, *colon = strchr(line, ':');
    return close && colon && colon < close && close[1] == ' ' &&
           strspn(colon + 1, "0123456789") == (size_t)(close - colon - 1);
}

/* The app's last line that mentions an error, else its last line of its own ("gpt2: ...",
 * the apps' form for errors; under mpirun stdout's buffered lines may come after it), else its
 * last non-empty line; mpirun's lines and indented continuation lines (a message's detail,
 * e.g. the paths a plugin was sought in) are passed over when there is another. */
static char *last_error_line(const char *log, long from, const char *app, int *unknown_flag) {
    FILE *f = fopen(log, "r");
    char line[1024], err[1024] = "", last[1024] = "", refused[1024] = "", any[1024] = "", own[1024] = "";
    size_t app_len = app ? strlen(app) : 0;
    bool in_box = false;
    *unknown_flag = 0;
    if (f && fseek(f, from, SEEK_SET) == 0) {
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (!line[0]) continue;
            snprintf(any, sizeof any, "%s", line);
            if (mpirun_line(line, &in_box) || line[0] == ' ' || line[0] == '\t') continue;
            if (app_len && strncmp(line, app, app_len) == 0 && strncmp(line + app_len, ": ", 2) == 0)
                snprintf(own, sizeof own, "%s", line);
            snprintf(last, sizeof last, "%s", line);
            if (contains_ci(line, "error") || contains_ci(line, "unknown flag")) snprintf(err, sizeof err, "%s", line);
            /* a flag the app does not know, or a combination it refuses as not supported yet:
             * that line, whatever mpirun prints after it */
            if (!refused[0] && refusal_line(line)) {
                *unknown_flag = 1;
                snprintf(refused, sizeof refused, "%s", line);
            }
        }
    }
    if (f) fclose(f);
    return xstrdup(refused[0] ? refused : err[0] ? err : own[0] ? own : last[0] ? last : any);
}

typedef struct {
    char *started_at, *branch, *commit;
} run_meta;

/* ---- Ctrl-C (SIGINT), SIGTERM or SIGHUP: the running case is asked to stop after its step
 * (the trainers stop on SIGINT; a case under mpirun gets SIGUSR1, which mpirun forwards to its
 * ranks and which stops them too, where SIGINT would make mpirun kill the job), no further case
 * starts, and the table of what ran is printed before it-matrix ends by the signal. Each case
 * runs in its own process group, so a terminal's signals reach it only through here: the
 * handler passes the first one on itself (no window before the wait), and on a second one
 * ends the case (SIGKILL to its group; SIGTERM to mpirun, which then kills its job) and then
 * it-matrix. A case whose parent dies is sent SIGTERM (PR_SET_PDEATHSIG). */
static volatile sig_atomic_t g_interrupt; /* the first signal, else 0 */
static volatile sig_atomic_t g_child;     /* the running case's pid (= its group), else 0 */
static volatile sig_atomic_t g_child_mpi; /* it is mpirun */
static volatile sig_atomic_t g_passed_on; /* the signal sent to it, else 0 */

static void pass_on(void) { /* (with the signals blocked, or from the handler) */
    if (g_child > 0 && !g_passed_on) {
        int sig = g_child_mpi ? SIGUSR1 : SIGINT;
        kill((pid_t)g_child, sig);
        g_passed_on = sig;
    }
}

static void on_interrupt(int sig) {
    if (g_interrupt) { /* the second: the case and it-matrix end now */
        if (g_child > 0) {
            if (g_child_mpi)
                kill((pid_t)g_child, SIGTERM);
            else
                kill(-(pid_t)g_child, SIGKILL);
        }
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupt = sig;
    pass_on();
}

static const int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};

static void stop_signals_mask(int how) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0]; i++) sigaddset(&set, STOP_SIGNALS[i]);
    sigprocmask(how, &set, NULL);
}

static void interrupt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0]; i++) sigaddset(&sa.sa_mask, STOP_SIGNALS[i]);
    sa.sa_flags = 0; /* no SA_RESTART: waitpid returns EINTR */
    for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0]; i++) sigaction(STOP_SIGNALS[i], &sa, NULL);
}

static void run_case(matrix_case *c, const char *log_dir, const run_meta *meta) {
    char dir[PATH_MAX], log[PATH_MAX + 512];
    snprintf(dir, sizeof dir, "%s/%s", log_dir, c->tag);
    if (mkdir_p(dir) != 0) die("cannot create %s: %s", dir, strerror(errno));
    snprintf(log, sizeof log, "%s/%s.log", dir, c->name);
    FILE *f = fopen(log, "w");
    if (!f) die("cannot write %s: %s", log, strerror(errno));
    fprintf(f, "[RUN_STARTED_AT] %s\n[GIT_BRANCH] %s\n[GIT_COMMIT] %s\n[GIT_COMMIT_SHORT] %.7s\n[COMMAND] %s\n",
            meta->started_at, meta->branch, meta->commit, meta->commit, c->command);
    fflush(f);
    long header_end = ftell(f);
    double t0 = now_s();
    pid_t parent = getpid();
    stop_signals_mask(SIG_BLOCK); /* until the child is known to the handler (see on_interrupt) */
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0]; i++) signal(STOP_SIGNALS[i], SIG_DFL);
        stop_signals_mask(SIG_UNBLOCK);
        setpgid(0, 0); /* its own process group (see on_interrupt) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1); /* it-matrix died before the line above */
        /* No terminal input: a background process group that reads the terminal is stopped
         * (SIGTTIN), and mpirun reads its stdin to pass it to rank 0. */
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        int fd = fileno(f);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(c->argv.v[0], c->argv.v);
        fprintf(stderr, "it-matrix: error: cannot run %s: %s\n", c->argv.v[0], strerror(errno));
        _exit(127);
    }
    fclose(f);
    setpgid(pid, pid); /* (also here: whichever runs first) */
    g_child_mpi = strstr(c->argv.v[0], "mpirun") != NULL;
    g_passed_on = 0;
    g_child = pid;
    if (g_interrupt) pass_on(); /* (a signal between the loop's check and the fork) */
    stop_signals_mask(SIG_UNBLOCK);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    stop_signals_mask(SIG_BLOCK);
    g_child = 0;
    int sent = g_passed_on;
    stop_signals_mask(SIG_UNBLOCK);
    c->seconds = now_s() - t0;
    /* Interrupted: it ended by what it was sent (or by the second signal's kill), or exited with
     * that signal's shell code (mpirun: 128 + SIGUSR1). Otherwise it is judged as it ended. */
    if (sent && ((WIFSIGNALED(ws) && (WTERMSIG(ws) == sent || WTERMSIG(ws) == SIGKILL || WTERMSIG(ws) == SIGTERM)) ||
                 (WIFEXITED(ws) && WEXITSTATUS(ws) == 128 + sent))) {
        c->status = ST_INTERRUPTED;
        return;
    }
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
        c->status = ST_PASSED;
        return;
    }
    int unknown_flag = 0;
    const char *app = NULL; /* the app's name: its executable is the one beside it-matrix */
    size_t bl = strlen(g_bin_dir);
    for (size_t i = 0; i < c->argv.n && !app; i++)
        if (c->argv.v[i] && strncmp(c->argv.v[i], g_bin_dir, bl) == 0 && c->argv.v[i][bl] == '/')
            app = c->argv.v[i] + bl + 1;
    char *line = last_error_line(log, header_end, app, &unknown_flag);
    sbuf d = {0};
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 2 && unknown_flag) {
        /* The app refused a flag its --help lists, or a combination: still a capability gap, not
         * a wrong result. Like a case refused before it runs, it leaves no log (no steps to
         * compare); the table keeps the app's line. */
        c->status = ST_UNSUPPORTED;
        unlink(log);
        sb_printf(&d, "%s", line);
        c->unsupported = sb_take(&d);
        free(line);
        return;
    }
    c->status = ST_FAILED;
    if (WIFEXITED(ws))
        sb_printf(&d, "exit %d: %s", WEXITSTATUS(ws), line);
    else
        sb_printf(&d, "signal %d: %s", WIFSIGNALED(ws) ? WTERMSIG(ws) : 0, line);
    c->detail = sb_take(&d);
    free(line);
}

/* How each case that ran is judged against a baseline run (--baseline): it-compare, next to
 * it-matrix, on the two logs, so the verdict and its thresholds are exactly it-compare's. */
typedef struct {
    const char *dir; /* NULL: no baseline, a case passes when its app exits 0 */
    int no_tps;
    const char *threshold_fp32, *threshold_bf16;
} baseline_opts;

/* Runs argv with stdout+stderr captured into *out; returns the exit status (-1 if it died). */
static int capture(char *const argv[], char **out) {
    int fds[2];
    if (pipe(fds) != 0) die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* a short run (it-compare): a terminal's Ctrl-C is it-matrix's to act on */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        close(fds[0]);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    sbuf b = {0};
    sb_add(&b, "");
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) sb_addn(&b, buf, (size_t)n);
    close(fds[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    *out = sb_take(&b);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* A passed case fails when its log differs from the baseline's: the detail is it-compare's
 * reason line ("step 4: 5.140535 vs 5.140555 (diff 2.00e-05 > 1e-05); 7 of 10 steps fail"). */
static void compare_case(matrix_case *c, const char *log_dir, const baseline_opts *bo) {
    char base[PATH_MAX + 512], test[PATH_MAX + 512];
    snprintf(base, sizeof base, "%s/%s/%s.log", bo->dir, c->tag, c->name);
    snprintf(test, sizeof test, "%s/%s/%s.log", log_dir, c->tag, c->name);
    sbuf d = {0};
    if (access(base, R_OK) != 0) {
        c->status = ST_FAILED;
        sb_printf(&d, "no baseline log %s", base);
        c->detail = sb_take(&d);
        return;
    }
    char *tool = NULL;
    sbuf t = {0};
    sb_printf(&t, "%s/it-compare", g_bin_dir);
    tool = sb_take(&t);
    char *argv[12];
    int k = 0;
    argv[k++] = tool;
    argv[k++] = base;
    argv[k++] = test;
    if (bo->no_tps) argv[k++] = "--no-tps";
    if (bo->threshold_fp32) argv[k++] = "--threshold-fp32", argv[k++] = (char *)bo->threshold_fp32;
    if (bo->threshold_bf16) argv[k++] = "--threshold-bf16", argv[k++] = (char *)bo->threshold_bf16;
    argv[k] = NULL;
    char *out = NULL;
    int rc = capture(argv, &out);
    if (rc != 0) {
        /* The reason: the line it-compare starts with the case's name ("<name>.log: ..."), else
         * its last non-empty line (an error). */
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s.log: ", c->name);
        const char *reason = NULL, *last = NULL;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            if (strncmp(line, prefix, strlen(prefix)) == 0) reason = line + strlen(prefix);
            if (*line) last = line;
        }
        c->status = ST_FAILED;
        if (rc == 1 && reason)
            sb_printf(&d, "differs from baseline: %s", reason);
        else
            sb_printf(&d, "it-compare exit %d: %s", rc, reason ? reason : last ? last : "(no output)");
        c->detail = sb_take(&d);
    }
    free(out);
    free(tool);
}

static void free_case(matrix_case *c) {
    free(c->name);
    sv_free(&c->argv);
    free(c->command);
    free(c->unsupported);
    free(c->ckpt_root);
    free(c->detail);
}

static void remove_tree(const char *path) {
    if (!path || !*path || strcmp(path, "/") == 0) return;
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "it-matrix: warning: could not remove all of %s: %s\n", path, strerror(errno));
}

static const char *status_text(const matrix_case *c, char *buf, size_t n) {
    switch (c->status) {
    case ST_PASSED: return "passed";
    case ST_FAILED: snprintf(buf, n, "failed: %s", c->detail); return buf;
    case ST_UNSUPPORTED: snprintf(buf, n, "unsupported: %s", c->unsupported); return buf;
    case ST_INTERRUPTED: return "interrupted (its log has the steps it took)";
    default: return "not run";
    }
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fputs("usage: it-matrix CONFIG --device NAME [--only-run tag,...] [--log-dir DIR] [--var NAME=VALUE]... [--list]\n"
          "  CONFIG              InfiniTrain's test_config.json format (scripts/matrix/ holds two)\n"
          "  --device NAME       passed to every app: cpu, sim, cuda, mlu, ...\n"
          "  --only-run TAGS     run only these test groups (comma-separated tags)\n"
          "  --log-dir DIR       logs go to DIR/<tag>/<model>_<id>.log (the config's LOG_DIR, else logs);\n"
          "                      it is also the variable LOG_DIR\n"
          "  --var NAME=VALUE    set or override a config variable (@NAME@ in values)\n"
          "  --baseline DIR      judge each case by it-compare against DIR/<tag>/<model>_<id>.log\n"
          "  --no-tps, --threshold-fp32 X, --threshold-bf16 X\n"
          "                      passed to it-compare with --baseline (defaults: 1e-5, 1e-2)\n"
          "  --list              print each case with its resolved command; run nothing\n"
          "exit status: 0 no case failed, 1 a case failed, 2 bad arguments or config\n",
          f);
}

/* The command line. */
typedef struct cli_args {
    const char *config, *device, *only, *log_dir;
    int list;
    var_list vars; /* --var NAME=VALUE */
    baseline_opts bo;
} cli_args;

static void parse_args(cli_args *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--list") == 0) {
            c->list = 1;
        } else if (strcmp(a, "--no-tps") == 0) {
            c->bo.no_tps = 1;
        } else if (strcmp(a, "--baseline") == 0 || strcmp(a, "--threshold-fp32") == 0 ||
                   strcmp(a, "--threshold-bf16") == 0) {
            if (i + 1 >= argc) die("%s needs a value", a);
            const char *v = argv[++i];
            if (a[2] == 'b') {
                struct stat st;
                if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode)) die("--baseline %s: not a directory", v);
                c->bo.dir = v;
            } else {
                char *end;
                double x = strtod(v, &end);
                if (*end || !(x >= 0)) die("%s wants a non-negative number, not \"%s\"", a, v);
                if (a[12] == 'f')
                    c->bo.threshold_fp32 = v;
                else
                    c->bo.threshold_bf16 = v;
            }
        } else if (strcmp(a, "--device") == 0 || strcmp(a, "--only-run") == 0 || strcmp(a, "--log-dir") == 0 ||
                   strcmp(a, "--var") == 0) {
            if (i + 1 >= argc) die("%s needs a value", a);
            const char *v = argv[++i];
            if (a[2] == 'd')
                c->device = v;
            else if (a[2] == 'o')
                c->only = v;
            else if (a[2] == 'l')
                c->log_dir = v;
            else {
                const char *eq = strchr(v, '=');
                if (!eq || eq == v) die("--var wants NAME=VALUE, not \"%s\"", v);
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(eq - v), v);
                var_set(&c->vars, name, eq + 1);
            }
        } else if (a[0] == '-') {
            usage(stderr);
            die("unknown option %s", a);
        } else if (!c->config) {
            c->config = a;
        } else {
            die("one CONFIG only (got \"%s\" and \"%s\")", c->config, a);
        }
    }
    if (!c->config || !c->device) {
        usage(stderr);
        die("CONFIG and --device are required");
    }
    if (!c->bo.dir && (c->bo.no_tps || c->bo.threshold_fp32 || c->bo.threshold_bf16))
        die("--no-tps and --threshold-* judge against a baseline: give --baseline DIR");
}

/* g_bin_dir: the directory of this executable, where the apps the cases run are. */
static void find_bin_dir(void) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) die("cannot find my own executable: %s", strerror(errno));
    exe[n] = '\0';
    snprintf(g_bin_dir, sizeof g_bin_dir, "%s", dirname(exe));
}

/* test_config.json, its "variables" (then --var's and --log-dir over them) into *vl, each
 * exported into the environment as InfiniTrain does; returns the parsed root. */
static json_t *read_config(const cli_args *c, var_list *vl, char **log_dir) {
    struct stat cst; /* jansson reads a directory as an empty text, and a missing file as line -1 */
    if (stat(c->config, &cst) != 0) die("%s: cannot open: %s", c->config, strerror(errno));
    if (S_ISDIR(cst.st_mode)) die("%s: is a directory (expected a test_config.json file)", c->config);
    json_error_t jerr;
    json_t *root = json_load_file(c->config, 0, &jerr);
    if (!root) die("%s:%d:%d: %s", c->config, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) die("%s: the top level must be an object", c->config);
    json_t *vars = json_object_get(root, "variables");
    if (vars) {
        if (!json_is_object(vars)) die("%s: \"variables\" must be an object", c->config);
        const char *k;
        json_t *v;
        json_object_foreach(vars, k, v) {
            if (!json_is_string(v)) die("%s: variable %s must be a string", c->config, k);
            var_set(vl, k, json_string_value(v));
        }
    }
    for (size_t i = 0; i < c->vars.n; i++) var_set(vl, c->vars.v[i].name, c->vars.v[i].value);
    if (c->log_dir) var_set(vl, "LOG_DIR", c->log_dir);
    const char *ld = var_get(vl, "LOG_DIR");
    *log_dir = subst(vl, ld && *ld ? ld : "logs", 0);
    /* InfiniTrain exports every variable into the environment; do the same. */
    for (size_t i = 0; i < vl->n; i++) {
        char *v = subst(vl, vl->v[i].value, 0);
        setenv(vl->v[i].name, v, 1);
        free(v);
    }
    json_t *builds = json_object_get(root, "basic_compile_commands");
    if (builds && !json_is_array(builds)) die("%s: \"basic_compile_commands\" must be an array", c->config);
    if (builds && json_array_size(builds) && !c->list)
        fprintf(stderr, "it-matrix: %zu basic_compile_commands not run: the apps are those in %s\n",
                json_array_size(builds), g_bin_dir);
    return root;
}

/* Every case of the selected groups, for each model whose groups list the group's tag. */
static matrix_case *make_cases(const cli_args *c, json_t *root, var_list *vl, size_t *ncases) {
    json_t *groups = json_object_get(root, "test_groups");
    if (!json_is_array(groups)) die("%s: \"test_groups\" must be an array", c->config);
    for (const char *p = c->only; p && *p;) { /* a tag no group has is a typo, not an empty selection */
        size_t w = strcspn(p, ",");
        char tag[128];
        snprintf(tag, sizeof tag, "%.*s", (int)w, p);
        int found = 0;
        for (size_t gi = 0; gi < json_array_size(groups); gi++) {
            const char *t = json_string_value(json_object_get(json_array_get(groups, gi), "tag"));
            if (t && list_has(tag, t)) found = 1;
        }
        if (w && !found) die("--only-run: no test group has the tag \"%s\"", tag);
        p += w;
        if (*p == ',') p++;
    }
    matrix_case *cases = NULL;
    *ncases = 0;
    for (size_t gi = 0; gi < json_array_size(groups); gi++) {
        json_t *g = json_array_get(groups, gi);
        const char *tag = json_string_value(json_object_get(g, "tag"));
        json_t *tests = json_object_get(g, "tests");
        if (!json_is_object(g) || !tag || !json_is_array(tests))
            die("%s: test_groups[%zu] needs a string \"tag\" and an array \"tests\"", c->config, gi);
        if (c->only && !list_has(c->only, tag)) continue;
        for (size_t ti = 0; ti < json_array_size(tests); ti++) {
            json_t *t = json_array_get(tests, ti);
            json_t *idv = json_object_get(t, "id"), *args = json_object_get(t, "args");
            char where[256];
            snprintf(where, sizeof where, "%s: test_groups[%zu] (%s) tests[%zu]", c->config, gi, tag, ti);
            if (!json_is_object(t) || !idv || (args && !json_is_object(args)))
                die("%s needs an \"id\" and an object \"args\"", where);
            json_t *empty = json_object();
            char *id = json_scalar(idv, vl, where);
            for (size_t mi = 0; mi < NMODELS; mi++) {
                model_def *m = &MODELS[mi];
                const char *sel = var_get(vl, m->groups_var);
                if (!list_has(sel ? sel : m->groups_default, tag)) continue;
                load_flags(m);
                cases = xrealloc(cases, (*ncases + 1) * sizeof *cases);
                cases[*ncases] = make_case(m, tag, id, args ? args : empty, vl, c->device, where);
                cases[(*ncases)++].group = gi;
            }
            free(id);
            json_decref(empty);
        }
    }
    return cases;
}

static size_t count_runnable(const matrix_case *cases, size_t n) {
    size_t r = 0;
    for (size_t i = 0; i < n; i++) r += cases[i].status != ST_UNSUPPORTED;
    return r;
}

/* --list: each case, runnable or why not, and its command. */
static void list_cases(const matrix_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++)
        printf("%s/%s\t%s%s\t%s\n", cases[i].tag, cases[i].name, cases[i].unsupported ? "unsupported: " : "runnable",
               cases[i].unsupported ? cases[i].unsupported : "", cases[i].command);
    size_t runnable = count_runnable(cases, n);
    printf("it-matrix: %zu cases: %zu runnable, %zu unsupported\n", n, runnable, n - runnable);
}

/* Every runnable case in order (until an interrupt), each judged against the baseline when
 * one is given, with a progress line and ETA; each group's checkpoint root removed after it. */
static void run_cases(matrix_case *cases, size_t ncases, const char *log_dir, const baseline_opts *bo) {
    run_meta meta;
    char stamp[32];
    time_t tnow = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&tnow));
    meta.started_at = stamp;
    meta.branch = run_git("rev-parse --abbrev-ref HEAD");
    meta.commit = run_git("rev-parse HEAD");
    size_t runnable = count_runnable(cases, ncases), done_run = 0;
    double t_start = now_s(), t_run = 0;
    interrupt_install();
    for (size_t i = 0; i < ncases && !g_interrupt; i++) {
        matrix_case *c = &cases[i];
        if (c->status != ST_UNSUPPORTED) {
            run_case(c, log_dir, &meta);
            if (c->status == ST_PASSED && bo->dir && !g_interrupt) compare_case(c, log_dir, bo);
            t_run += c->seconds;
            done_run++;
        }
        char st[512], eta[64] = "";
        if (done_run) {
            double left = t_run / (double)done_run * (double)(runnable - done_run);
            snprintf(eta, sizeof eta, ", ETA %.0f s", left);
        }
        fprintf(stderr, "it-matrix [%zu/%zu] %s/%s: %s", i + 1, ncases, c->tag, c->name, status_text(c, st, sizeof st));
        if (c->status != ST_UNSUPPORTED) fprintf(stderr, " (%.1f s)", c->seconds);
        fprintf(stderr, " | elapsed %.0f s%s\n", now_s() - t_start, eta);
        /* InfiniTrain removes the checkpoint root after each group, so groups never share state;
         * only a group whose cases save or load touches it here. */
        if (i + 1 == ncases || cases[i + 1].group != c->group) {
            for (size_t j = i + 1; j-- > 0 && cases[j].group == c->group;)
                if (cases[j].uses_ckpt && cases[j].ckpt_root) {
                    remove_tree(cases[j].ckpt_root);
                    break;
                }
        }
    }
    free(meta.branch);
    free(meta.commit);
}

/* The table of every case's status and time, the counts; after an interrupt, what was not run,
 * and the process ends by that signal. Returns the exit status. */
static int print_summary(const matrix_case *cases, size_t ncases) {
    size_t wcase = strlen("case"), wstat = strlen("status");
    char st[512];
    for (size_t i = 0; i < ncases; i++) {
        size_t l = strlen(cases[i].tag) + 1 + strlen(cases[i].name);
        if (l > wcase) wcase = l;
        l = strlen(status_text(&cases[i], st, sizeof st));
        if (l > wstat) wstat = l;
    }
    if (wstat > 100) wstat = 100;
    printf("\n%-*s  %-*s  %s\n", (int)wcase, "case", (int)wstat, "status", "time");
    size_t npass = 0, nfail = 0, nunsup = 0;
    for (size_t i = 0; i < ncases; i++) {
        const matrix_case *c = &cases[i];
        char name[512], tm[32] = "-";
        snprintf(name, sizeof name, "%s/%s", c->tag, c->name);
        if (c->status != ST_UNSUPPORTED) snprintf(tm, sizeof tm, "%.1f s", c->seconds);
        printf("%-*s  %-*s  %s\n", (int)wcase, name, (int)wstat, status_text(c, st, sizeof st), tm);
        npass += c->status == ST_PASSED;
        nfail += c->status == ST_FAILED;
        nunsup += c->status == ST_UNSUPPORTED;
    }
    printf("it-matrix: %zu passed, %zu failed, %zu unsupported\n", npass, nfail, nunsup);
    if (g_interrupt) {
        size_t nleft = 0;
        for (size_t i = 0; i < ncases; i++) nleft += cases[i].status == ST_PENDING;
        printf("it-matrix: interrupted by %s: %zu case%s not run\n",
               g_interrupt == SIGINT    ? "SIGINT"
               : g_interrupt == SIGTERM ? "SIGTERM"
                                        : "SIGHUP",
               nleft, nleft == 1 ? "" : "s");
        fflush(NULL);
        signal(g_interrupt, SIG_DFL); /* end by the signal, as a shell expects (see on_interrupt) */
        raise(g_interrupt);
    }
    return nfail ? 1 : 0;
}

int main(int argc, char **argv) {
    cli_args c = {0};
    parse_args(&c, argc, argv);
    find_bin_dir();
    var_list vl = {0};
    char *log_dir = NULL;
    json_t *root = read_config(&c, &vl, &log_dir);
    size_t ncases = 0;
    matrix_case *cases = make_cases(&c, root, &vl, &ncases);
    int rc = 0;
    if (c.list) {
        list_cases(cases, ncases);
    } else {
        run_cases(cases, ncases, log_dir, &c.bo);
        rc = print_summary(cases, ncases);
    }
    for (size_t i = 0; i < ncases; i++) free_case(&cases[i]);
    free(cases);
    for (size_t mi = 0; mi < NMODELS; mi++) free(MODELS[mi].flags);
    var_list_free(&vl);
    var_list_free(&c.vars);
    free(log_dir);
    json_decref(root);
    return rc;
}
