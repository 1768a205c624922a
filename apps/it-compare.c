/* it-compare: compare two runs' training logs case by case, as InfiniTrain's
 * scripts/compare_loss.py and scripts/compare_tps.py do, in one pass, with pictures.
 *
 *   it-compare BASE TEST [--plots DIR] [--threshold-fp32 X] [--threshold-bf16 X] [--threshold X]
 *              [--tps-threshold X] [--no-tps] [--missing-fails]
 *
 * BASE and TEST are two log directories (searched recursively for *.log, cases paired by file
 * name) or two log files (one case). Per case: the per-step train loss must agree within the
 * threshold (bf16 when the name holds "_bfloat16"), and the mean tok/s over steps > 1 must not be
 * more than --tps-threshold slower than BASE. docs/it-compare.md has the rules and their sources.
 *
 * Exit status: 0 every compared case passed, 1 a case failed, 2 bad arguments or unreadable input. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* One value per step, sorted by step, each step once (the last line for a step wins, as a
 * Python dict assignment does). */
typedef struct {
    long long step;
    double v;
    size_t order; /* line order, to keep the last of equal steps after sorting */
} point;

typedef struct {
    point *p;
    size_t n, cap;
} series;

typedef struct {
    series loss, tps;
} run_log;

enum { SIDE_BOTH, SIDE_BASE_ONLY, SIDE_TEST_ONLY };

typedef struct {
    char *name; /* the file's basename: the case's key */
    char *path;
} log_file;

typedef struct {
    log_file *f;
    size_t n, cap;
} file_list;

typedef struct {
    const char *name;
    const char *base_path, *test_path;
    int side;
    int bf16;
    double thr;
    run_log base, test;
    size_t union_steps, common_steps, over; /* over: steps failing the loss rule */
    long long first_bad;                    /* -1: none */
    int first_bad_missing;                  /* 1 missing in TEST, 2 missing in BASE */
    double first_bad_base, first_bad_test;
    double max_diff;
    int loss_ok;
    int tps_checked, tps_valid, tps_ok;
    double base_tps, test_tps, change;
    size_t base_tps_n, test_tps_n;
    int pass;
    char svg[300];
} case_result;

typedef struct {
    double thr_fp32, thr_bf16, thr_tps;
    int no_tps, missing_fails;
    const char *plots;
} options;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "it-compare: out of memory\n");
        exit(2);
    }
    return q;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

static void series_push(series *s, long long step, double v) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->p = xrealloc(s->p, s->cap * sizeof *s->p);
    }
    s->p[s->n] = (point){step, v, s->n};
    s->n++;
}

static int point_cmp(const void *a, const void *b) {
    const point *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorts by step and keeps the last value read for each step. */
static void series_finish(series *s) {
    if (!s->n) return;
    qsort(s->p, s->n, sizeof *s->p, point_cmp);
    size_t w = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (w && s->p[w - 1].step == s->p[i].step)
            s->p[w - 1] = s->p[i];
        else
            s->p[w++] = s->p[i];
    }
    s->n = w;
}

/* ---- the two regular expressions of InfiniTrain's scripts, matched by hand ----
 * loss: step\s+(\d+)/\d+\s+\|\s+train loss\s+([\d.]+)      (compare_loss.py)
 * tok/s: step\s+(\d+)/\d+.*?\|\s+(\d+)\s+tok/s             (compare_tps.py)
 * Both are searched anywhere in the line (re.search): the leftmost "step" that starts a match
 * wins, so a glog prefix or other text around the step line does not matter. */

static const char *skip_space1(const char *q) { /* \s+ ; NULL if none */
    if (!isspace((unsigned char)*q)) return NULL;
    while (isspace((unsigned char)*q)) q++;
    return q;
}

static const char *skip_digits1(const char *q) { /* \d+ ; NULL if none */
    if (!isdigit((unsigned char)*q)) return NULL;
    while (isdigit((unsigned char)*q)) q++;
    return q;
}

/* step\s+(\d+)/\d+ at p; returns the end and the step. */
static const char *match_step_prefix(const char *p, long long *step) {
    if (strncmp(p, "step", 4)) return NULL;
    const char *q = skip_space1(p + 4), *d;
    if (!q || !(d = skip_digits1(q)) || *d != '/') return NULL;
    *step = strtoll(q, NULL, 10);
    return skip_digits1(d + 1);
}

static int match_loss_at(const char *p, long long *step, double *loss) {
    const char *q = match_step_prefix(p, step);
    if (!q || !(q = skip_space1(q)) || *q != '|' || !(q = skip_space1(q + 1))) return 0;
    if (strncmp(q, "train loss", 10) || !(q = skip_space1(q + 10))) return 0;
    const char *e = q;
    while (isdigit((unsigned char)*e) || *e == '.') e++;
    if (e == q || e - q > 63) return 0;
    char buf[64], *end;
    memcpy(buf, q, (size_t)(e - q));
    buf[e - q] = 0;
    *loss = strtod(buf, &end);
    return *end == 0; /* "1.2.3" matches [\d.]+ but is no number */
}

static int match_tps_at(const char *p, long long *step, double *tps) {
    const char *q = match_step_prefix(p, step);
    if (!q) return 0;
    for (; *q && *q != '\n'; q++) { /* .*? : the first '|' that the rest matches after */
        const char *r, *d;
        if (*q != '|' || !(r = skip_space1(q + 1)) || !(d = skip_digits1(r))) continue;
        const char *s = skip_space1(d);
        if (s && !strncmp(s, "tok/s", 5)) {
            *tps = strtod(r, NULL);
            return 1;
        }
    }
    return 0;
}

static void parse_line(const char *line, run_log *log) {
    long long step;
    double v;
    for (const char *p = strstr(line, "step"); p; p = strstr(p + 1, "step"))
        if (match_loss_at(p, &step, &v)) {
            series_push(&log->loss, step, v);
            break;
        }
    for (const char *p = strstr(line, "step"); p; p = strstr(p + 1, "step"))
        if (match_tps_at(p, &step, &v)) {
            series_push(&log->tps, step, v);
            break;
        }
}

static int read_log(const char *path, run_log *log) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "it-compare: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) parse_line(line, log);
    int err = ferror(f);
    free(line);
    fclose(f);
    if (err) {
        fprintf(stderr, "it-compare: error reading %s\n", path);
        return -1;
    }
    series_finish(&log->loss);
    series_finish(&log->tps);
    return 0;
}

/* ---- finding the logs: compare_utils.collect_log_files ---- */

static int comparable_name(const char *name) {
    size_t n = strlen(name);
    if (n < 4 || strcmp(name + n - 4, ".log")) return 0;
    if (!strncmp(name, "build", 5) || !strncmp(name, "ctest_", 6)) return 0;
    return !(n >= 12 && !strcmp(name + n - 12, "_profile.log"));
}

static int collect(const char *dir, file_list *out) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "it-compare: cannot read directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *path = xrealloc(NULL, n);
        snprintf(path, n, "%s/%s", dir, e->d_name);
        struct stat st;
        /* Directories are entered only when real (not through a link), as rglob does. */
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            rc = collect(path, out);
        } else if (comparable_name(e->d_name) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 32;
                out->f = xrealloc(out->f, out->cap * sizeof *out->f);
            }
            out->f[out->n++] = (log_file){xstrdup(e->d_name), path};
            path = NULL;
        }
        free(path);
    }
    closedir(d);
    return rc;
}

static int file_cmp(const void *a, const void *b) {
    const log_file *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->path, y->path);
}

/* Collects DIR's logs sorted by name; two logs with one name make the pairing ambiguous. */
static int collect_dir(const char *dir, file_list *out) {
    if (collect(dir, out)) return -1;
    if (out->n) qsort(out->f, out->n, sizeof *out->f, file_cmp);
    int dup = 0;
    for (size_t i = 1; i < out->n; i++)
        if (!strcmp(out->f[i].name, out->f[i - 1].name)) {
            fprintf(stderr, "it-compare: %s: two logs named %s (%s, %s): cannot pair them\n", dir, out->f[i].name,
                    out->f[i - 1].path, out->f[i].path);
            dup = 1;
        }
    return dup ? -1 : 0;
}

static void files_free(file_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->f[i].name);
        free(l->f[i].path);
    }
    free(l->f);
}

/* ---- the rules ---- */

static void compare_loss(case_result *c) {
    const series *b = &c->base.loss, *t = &c->test.loss;
    size_t i = 0, j = 0;
    c->first_bad = -1;
    while (i < b->n || j < t->n) {
        long long step;
        int bad = 0, missing = 0;
        double bv = 0, tv = 0;
        if (j >= t->n || (i < b->n && b->p[i].step < t->p[j].step)) {
            step = b->p[i].step, bv = b->p[i++].v, bad = 1, missing = 1;
        } else if (i >= b->n || t->p[j].step < b->p[i].step) {
            step = t->p[j].step, tv = t->p[j++].v, bad = 1, missing = 2;
        } else {
            step = b->p[i].step, bv = b->p[i++].v, tv = t->p[j++].v;
            double d = fabs(bv - tv);
            c->common_steps++;
            if (d > c->max_diff) c->max_diff = d;
            bad = d > c->thr;
        }
        c->union_steps++;
        if (bad) {
            c->over++;
            if (c->first_bad < 0) {
                c->first_bad = step, c->first_bad_missing = missing;
                c->first_bad_base = bv, c->first_bad_test = tv;
            }
        }
    }
    /* No step line at all is a failure, not a vacuous pass (InfiniTrain-Test's comparer). */
    c->loss_ok = c->over == 0 && c->union_steps > 0;
}

static double mean_after_step1(const series *s, size_t *n) {
    double sum = 0;
    *n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->p[i].step > 1) sum += s->p[i].v, (*n)++;
    return *n ? sum / (double)*n : 0;
}

static void compare_tps(case_result *c, double thr) {
    c->tps_checked = 1;
    c->base_tps = mean_after_step1(&c->base.tps, &c->base_tps_n);
    c->test_tps = mean_after_step1(&c->test.tps, &c->test_tps_n);
    c->tps_valid = c->base_tps_n && c->test_tps_n;
    if (!c->tps_valid) {
        c->tps_ok = 0;
        return;
    }
    c->change = c->base_tps > 0 ? (c->test_tps - c->base_tps) / c->base_tps : 0;
    c->tps_ok = !(c->change < 0 && fabs(c->change) > thr); /* faster by any amount passes */
}

/* ---- output ---- */

static const char *verdict(const case_result *c) {
    if (c->side == SIDE_BASE_ONLY) return "missing in TEST";
    if (c->side == SIDE_TEST_ONLY) return "missing in BASE";
    if (c->pass) return "pass";
    if (!c->loss_ok && c->tps_checked && !c->tps_ok) return "FAIL loss, tok/s";
    return c->loss_ok ? "FAIL tok/s" : "FAIL loss";
}

typedef struct {
    char s[10][48];
} row;

static void print_table(const case_result *cs, size_t n, const options *o) {
    static const char *head[10] = {"case",      "dtype",      "steps",      "max |dloss|",  "threshold",
                                   "first bad", "base tok/s", "test tok/s", "tok/s change", "verdict"};
    row *rows = xrealloc(NULL, (n + 1) * sizeof *rows);
    int w[10] = {0};
    size_t namew = strlen(head[0]);
    for (size_t i = 0; i < n; i++)
        if (strlen(cs[i].name) > namew) namew = strlen(cs[i].name);
    for (int k = 0; k < 10; k++) snprintf(rows[0].s[k], 48, "%s", head[k]);
    for (size_t i = 0; i < n; i++) {
        const case_result *c = &cs[i];
        row *r = &rows[i + 1];
        for (int k = 0; k < 10; k++) snprintf(r->s[k], 48, "-");
        snprintf(r->s[1], 48, "%s", c->bf16 ? "bfloat16" : "fp32");
        snprintf(r->s[4], 48, "%.0e", c->thr);
        snprintf(r->s[9], 48, "%s", verdict(c));
        if (c->side != SIDE_BOTH) continue;
        if (c->common_steps == c->union_steps)
            snprintf(r->s[2], 48, "%zu", c->common_steps);
        else
            snprintf(r->s[2], 48, "%zu of %zu", c->common_steps, c->union_steps);
        if (c->common_steps) snprintf(r->s[3], 48, "%.2e", c->max_diff);
        if (c->first_bad >= 0) snprintf(r->s[5], 48, "%lld", c->first_bad);
        if (c->base_tps_n) snprintf(r->s[6], 48, "%.2f", c->base_tps);
        if (c->test_tps_n) snprintf(r->s[7], 48, "%.2f", c->test_tps);
        if (!c->tps_checked)
            snprintf(r->s[8], 48, "not compared");
        else if (c->tps_valid)
            snprintf(r->s[8], 48, "%+.1f%% (x%.3f)", 100 * c->change, c->test_tps / c->base_tps);
    }
    for (size_t i = 0; i <= n; i++)
        for (int k = 1; k < 10; k++)
            if ((int)strlen(rows[i].s[k]) > w[k]) w[k] = (int)strlen(rows[i].s[k]);
    for (size_t i = 0; i <= n; i++) {
        printf("%-*s", (int)namew, i ? cs[i - 1].name : head[0]);
        for (int k = 1; k < 9; k++) printf("  %*s", w[k], rows[i].s[k]);
        printf("  %s\n", rows[i].s[9]);
    }
    free(rows);

    for (size_t i = 0; i < n; i++) {
        const case_result *c = &cs[i];
        if (c->side != SIDE_BOTH) {
            printf("%s: only in %s (%s)%s\n", c->name, c->side == SIDE_BASE_ONLY ? "BASE" : "TEST",
                   c->side == SIDE_BASE_ONLY ? c->base_path : c->test_path,
                   o->missing_fails ? ", counted as failed" : "");
            continue;
        }
        if (c->union_steps == 0)
            printf("%s: no step lines with a train loss in either log\n", c->name);
        else if (c->first_bad_missing)
            printf("%s: step %lld is missing in %s; %zu of %zu steps fail\n", c->name, c->first_bad,
                   c->first_bad_missing == 1 ? "TEST" : "BASE", c->over, c->union_steps);
        else if (c->first_bad >= 0)
            printf("%s: step %lld: %.6f vs %.6f (diff %.2e > %.0e); %zu of %zu steps fail\n", c->name, c->first_bad,
                   c->first_bad_base, c->first_bad_test, fabs(c->first_bad_base - c->first_bad_test), c->thr, c->over,
                   c->union_steps);
        if (c->tps_checked && !c->tps_valid)
            printf("%s: no tok/s after step 1 in %s\n", c->name,
                   !c->base_tps_n && !c->test_tps_n ? "either log"
                   : !c->base_tps_n                 ? "BASE"
                                                    : "TEST");
        else if (c->tps_checked && !c->tps_ok)
            printf("%s: tok/s %.2f (BASE) vs %.2f (TEST), %+.1f%%: slower than the %.0f%% allowed\n", c->name,
                   c->base_tps, c->test_tps, 100 * c->change, 100 * o->thr_tps);
    }
}

/* ---- pictures ---- */

static void xml_escape(FILE *f, const char *s) {
    for (; *s; s++) switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

static double nice_step(double range, int ticks) {
    double raw = range / ticks, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

/* Plot geometry: x maps steps to [X0, X1]; the loss panel spans [LY0, LY1], the difference
 * panel [DY0, DY1] (SVG y grows downwards). */
enum { SVG_W = 860, SVG_H = 664, X0 = 90, X1 = 830, LY0 = 80, LY1 = 330, DY0 = 400, DY1 = 590 };

typedef struct {
    double lo, hi;
    int p0, p1; /* pixel of lo, pixel of hi */
} axis;

static double ax_map(const axis *a, double v) { return a->p0 + (v - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0); }

static void svg_polyline(FILE *f, const char *cls, const char *style, const series *s, const axis *x, const axis *y) {
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" %s points=\"", cls, style);
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", ax_map(x, (double)s->p[i].step), ax_map(y, s->p[i].v));
    fprintf(f, "\"/>\n");
}

static void svg_x_axis(FILE *f, const axis *x, int ybase, int ytop) {
    double st = nice_step(x->hi - x->lo, 8);
    if (st < 1) st = 1;
    for (double v = ceil(x->lo / st) * st; v <= x->hi + 1e-9; v += st) {
        double px = ax_map(x, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>\n", px, ytop, px, ybase);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", px, ybase + 16, v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (X0 + X1) / 2, ybase + 32);
}

static void svg_frame(FILE *f, int y0, int y1) {
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", X0, y0, X1 - X0,
            y1 - y0);
}

static int write_svg(const char *path, const case_result *c) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "it-compare: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    const series *b = &c->base.loss, *t = &c->test.loss;
    axis x = {0, 0, X0, X1}, y = {0, 0, LY1, LY0};
    int have = 0;
    for (int k = 0; k < 2; k++) {
        const series *s = k ? t : b;
        for (size_t i = 0; i < s->n; i++) {
            double sx = (double)s->p[i].step, sy = s->p[i].v;
            if (!have++) x.lo = x.hi = sx, y.lo = y.hi = sy;
            x.lo = fmin(x.lo, sx), x.hi = fmax(x.hi, sx), y.lo = fmin(y.lo, sy), y.hi = fmax(y.hi, sy);
        }
    }
    if (x.hi == x.lo) x.lo -= 1, x.hi += 1;
    if (y.hi == y.lo) {
        double pad = fmax(fabs(y.lo) * 1e-3, 1e-6);
        y.lo -= pad, y.hi += pad;
    }
    double pad = (y.hi - y.lo) * 0.06;
    y.lo -= pad, y.hi += pad;

    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", X0);
    xml_escape(f, c->name);
    fprintf(f, " <tspan fill=\"%s\">%s</tspan></text>\n", c->pass ? "#2e7d32" : "#c62828", verdict(c));
    fprintf(f, "<text x=\"%d\" y=\"44\" fill=\"#444\">%s, threshold %.0e per step; max |diff| %.2e", X0,
            c->bf16 ? "bfloat16" : "fp32", c->thr, c->max_diff);
    if (c->first_bad >= 0) fprintf(f, "; first failing step %lld", c->first_bad);
    if (c->tps_valid)
        fprintf(f, "; tok/s (steps &gt; 1) %.0f vs %.0f (%+.1f%%)", c->base_tps, c->test_tps, 100 * c->change);
    fprintf(f, "</text>\n");

    /* Loss panel: grid, ticks, both curves, legend. */
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">train loss</text>\n", X0, LY0 - 8);
    double st = nice_step(y.hi - y.lo, 6);
    int dec = st >= 1 ? 0 : (int)ceil(-log10(st) - 1e-9);
    for (double v = ceil(y.lo / st) * st; v <= y.hi; v += st) {
        double py = ax_map(&y, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", X0, py, X1, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", X0 - 6, py + 4, dec, v);
    }
    svg_x_axis(f, &x, LY1, LY0);
    svg_frame(f, LY0, LY1);
    svg_polyline(f, "loss-base", "stroke=\"#1f77b4\" stroke-width=\"2.5\"", b, &x, &y);
    svg_polyline(f, "loss-test", "stroke=\"#ff7f0e\" stroke-width=\"1.5\" stroke-dasharray=\"7 4\"", t, &x, &y);
    fprintf(f,
            "<g class=\"legend\"><rect x=\"%d\" y=\"%d\" width=\"170\" height=\"44\" fill=\"white\" "
            "fill-opacity=\"0.85\" stroke=\"#999\"/>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" stroke-width=\"2.5\"/>"
            "<text x=\"%d\" y=\"%d\">BASE</text>\n"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"7 4\"/><text x=\"%d\" y=\"%d\">TEST</text></g>\n",
            X1 - 180, LY0 + 10, X1 - 170, LY0 + 24, X1 - 140, LY0 + 24, X1 - 132, LY0 + 28, X1 - 170, LY0 + 42,
            X1 - 140, LY0 + 42, X1 - 132, LY0 + 46);

    /* Difference panel: |BASE - TEST| per step on a log scale; a zero difference has no place
     * on it and is drawn on the floor. */
    double dmin = c->thr, dmax = c->thr;
    int zeros = 0;
    series d = {0};
    size_t i = 0, j = 0;
    while (i < b->n && j < t->n) {
        if (b->p[i].step < t->p[j].step)
            i++;
        else if (t->p[j].step < b->p[i].step)
            j++;
        else {
            double v = fabs(b->p[i].v - t->p[j].v);
            series_push(&d, b->p[i].step, v);
            if (v > 0)
                dmin = fmin(dmin, v), dmax = fmax(dmax, v);
            else
                zeros = 1;
            i++, j++;
        }
    }
    int hi_e = (int)ceil(log10(dmax) + 1e-9), lo_e = (int)floor(log10(dmin)) - 1;
    if (hi_e <= (int)floor(log10(c->thr))) hi_e = (int)floor(log10(c->thr)) + 1;
    if (lo_e < hi_e - 12) lo_e = hi_e - 12;
    /* A zero difference has no place on a log scale: it gets its own row, labelled 0, half a
     * decade below the lowest decade drawn. */
    double zero_at = lo_e - 0.5;
    axis ly = {zeros ? lo_e - 0.8 : lo_e, hi_e, DY1, DY0};
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">|loss BASE - loss TEST| per step (log scale)</text>\n", X0,
            DY0 - 8);
    int every = hi_e - lo_e > 8 ? 2 : 1;
    for (int e = lo_e; e <= hi_e; e++) {
        double py = ax_map(&ly, e);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", X0, py, X1, py);
        if ((e - lo_e) % every == 0)
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", X0 - 6, py + 4, e);
    }
    if (zeros) {
        double py = ax_map(&ly, zero_at);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\" stroke-dasharray=\"2 3\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">0</text>\n",
                X0, py, X1, py, X0 - 6, py + 4);
    }
    svg_x_axis(f, &x, DY1, DY0);
    svg_frame(f, DY0, DY1);
    double ty = ax_map(&ly, log10(c->thr));
    fprintf(f,
            "<line class=\"threshold\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c62828\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"8 5\"/>\n<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
            "fill=\"#c62828\">threshold %.0e</text>\n",
            X0, ty, X1, ty, X1 - 6, ty + 15, c->thr);
    fprintf(f, "<polyline class=\"diff\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.5\" points=\"");
    for (size_t k = 0; k < d.n; k++)
        fprintf(f, "%s%.1f,%.1f", k ? " " : "", ax_map(&x, (double)d.p[k].step),
                ax_map(&ly, d.p[k].v > 0 ? log10(d.p[k].v) : zero_at));
    fprintf(f, "\"/>\n");
    for (size_t k = 0; k < d.n; k++) {
        double px = ax_map(&x, (double)d.p[k].step), py = ax_map(&ly, d.p[k].v > 0 ? log10(d.p[k].v) : zero_at);
        if (d.p[k].v > c->thr)
            fprintf(f,
                    "<circle class=\"fail-mark\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#c62828\"><title>step "
                    "%lld: diff %.2e</title></circle>\n",
                    px, py, d.p[k].step, d.p[k].v);
        else if (d.n <= 200)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\" stroke=\"#555\"/>\n", px, py,
                    d.p[k].v > 0 ? "#555" : "white");
    }
    /* A step in only one log fails; it has no difference to draw, so it is marked at the top. */
    for (int k = 0; k < 2; k++) {
        const series *s = k ? t : b, *o = k ? b : t;
        for (size_t m = 0, q = 0; m < s->n; m++) {
            while (q < o->n && o->p[q].step < s->p[m].step) q++;
            if (q < o->n && o->p[q].step == s->p[m].step) continue;
            double px = ax_map(&x, (double)s->p[m].step);
            fprintf(f,
                    "<text class=\"fail-mark\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#c62828\" "
                    "font-weight=\"bold\">&#215;<title>step %lld missing in %s</title></text>\n",
                    px, DY0 + 14, s->p[m].step, k ? "BASE" : "TEST");
        }
    }
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" fill=\"#666\">red dots: steps over the threshold; red x at the top: a step in one "
            "log only%s</text>\n",
            X0, SVG_H - 8, zeros ? "; hollow dots on the 0 row: equal losses" : "");
    fprintf(f, "</svg>\n");
    free(d.p);
    int err = ferror(f);
    if (fclose(f) || err) {
        fprintf(stderr, "it-compare: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static int mkdir_p(const char *dir) {
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0777);
            *s = '/';
        }
    int rc = mkdir(p, 0777);
    struct stat st;
    if (rc && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr, "it-compare: cannot create %s: %s\n", dir, strerror(errno));
        free(p);
        return -1;
    }
    free(p);
    return 0;
}

/* The plot's file name: the case name without ".log", with anything unusual replaced; a name
 * that needed replacing gets its index appended so two such cases cannot collide. */
static void svg_name(case_result *c, size_t index) {
    size_t n = strlen(c->name), w = 0, changed = 0;
    if (n >= 4 && !strcmp(c->name + n - 4, ".log")) n -= 4;
    for (size_t k = 0; k < n && w < 200; k++) {
        char ch = c->name[k];
        int ok = isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.';
        c->svg[w++] = ok ? ch : '_';
        changed |= !ok;
    }
    if (changed) w += (size_t)snprintf(c->svg + w, sizeof c->svg - w, "-%zu", index);
    snprintf(c->svg + w, sizeof c->svg - w, ".svg");
}

static int write_plots(const char *dir, case_result *cs, size_t n, size_t passed, size_t failed, const options *o) {
    if (mkdir_p(dir)) return -1;
    size_t len = strlen(dir) + 320;
    char *path = xrealloc(NULL, len);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (cs[i].side != SIDE_BOTH) continue;
        svg_name(&cs[i], i);
        snprintf(path, len, "%s/%s", dir, cs[i].svg);
        rc = write_svg(path, &cs[i]);
    }
    snprintf(path, len, "%s/index.html", dir);
    FILE *f = rc ? NULL : fopen(path, "w");
    if (!rc && !f) fprintf(stderr, "it-compare: cannot write %s: %s\n", path, strerror(errno));
    if (!f) {
        free(path);
        return -1;
    }
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>it-compare</title>\n<style>"
               "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
               ".pass{background:#c8e6c9}.fail{background:#ffcdd2}.missing{background:#e0e0e0}"
               "section{margin-top:2em}</style></head><body>\n<h1>it-compare</h1>\n");
    fprintf(f,
            "<p>it-compare: %zu passed, %zu failed. Loss threshold per step: fp32 %.0e, bfloat16 %.0e; "
            "tok/s: ",
            passed, failed, o->thr_fp32, o->thr_bf16);
    if (o->no_tps)
        fprintf(f, "not compared.</p>\n");
    else
        fprintf(f, "mean over steps &gt; 1 at most %.0f%% slower.</p>\n", 100 * o->thr_tps);
    fprintf(f, "<table><tr><th>case</th><th>verdict</th><th>steps</th><th>max |dloss|</th><th>threshold</th>"
               "<th>first bad step</th><th>tok/s change</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        const case_result *c = &cs[i];
        const char *cls = c->side != SIDE_BOTH ? "missing" : c->pass ? "pass" : "fail";
        fprintf(f, "<tr class=\"%s\"><td><a href=\"#case%zu\">", cls, i);
        xml_escape(f, c->name);
        fprintf(f, "</a></td><td>%s</td>", verdict(c));
        if (c->side != SIDE_BOTH) {
            fprintf(f, "<td>-</td><td>-</td><td>%.0e</td><td>-</td><td>-</td></tr>\n", c->thr);
            continue;
        }
        fprintf(f, "<td>%zu of %zu</td><td>%.2e</td><td>%.0e</td>", c->common_steps, c->union_steps, c->max_diff,
                c->thr);
        if (c->first_bad >= 0)
            fprintf(f, "<td>%lld</td>", c->first_bad);
        else
            fprintf(f, "<td>-</td>");
        if (c->tps_valid)
            fprintf(f, "<td>%+.1f%%</td></tr>\n", 100 * c->change);
        else
            fprintf(f, "<td>%s</td></tr>\n", c->tps_checked ? "no steps &gt; 1" : "not compared");
    }
    fprintf(f, "</table>\n");
    for (size_t i = 0; i < n; i++) {
        const case_result *c = &cs[i];
        const char *cls = c->side != SIDE_BOTH ? "missing" : c->pass ? "pass" : "fail";
        fprintf(f, "<section id=\"case%zu\"><h2 class=\"%s\">", i, cls);
        xml_escape(f, c->name);
        fprintf(f, ": %s</h2>\n", verdict(c));
        if (c->side != SIDE_BOTH) {
            fprintf(f, "<p>No plot: the case is only in %s (", c->side == SIDE_BASE_ONLY ? "BASE" : "TEST");
            xml_escape(f, c->side == SIDE_BASE_ONLY ? c->base_path : c->test_path);
            fprintf(f, ").</p></section>\n");
            continue;
        }
        fprintf(f, "<img src=\"%s\" alt=\"", c->svg);
        xml_escape(f, c->name);
        fprintf(f, "\"></section>\n");
    }
    fprintf(f, "</body></html>\n");
    int err = ferror(f);
    if (fclose(f) || err) {
        fprintf(stderr, "it-compare: error writing %s\n", path);
        rc = -1;
    }
    free(path);
    return rc;
}

/* ---- main ---- */

static int usage(FILE *f) {
    fprintf(f, "usage: it-compare BASE TEST [--plots DIR] [--threshold-fp32 X] [--threshold-bf16 X]\n"
               "                  [--threshold X] [--tps-threshold X] [--no-tps] [--missing-fails]\n"
               "  BASE, TEST         two log directories (cases paired by file name) or two log files\n"
               "  --plots DIR        write DIR/<case>.svg per compared case and DIR/index.html\n"
               "  --threshold-fp32   largest |loss difference| per step for fp32 cases (default 1e-5)\n"
               "  --threshold-bf16   the same for cases named *_bfloat16* (default 1e-2)\n"
               "  --threshold        sets both loss thresholds\n"
               "  --tps-threshold    largest slowdown of mean tok/s over steps > 1 (default 0.20)\n"
               "  --no-tps           judge the loss only\n"
               "  --missing-fails    a case found on one side only counts as failed\n"
               "exit status: 0 all passed, 1 a case failed, 2 bad arguments or unreadable input\n");
    return f == stdout ? 0 : 2;
}

static int parse_threshold(const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < 0) {
        fprintf(stderr, "it-compare: %s wants a number >= 0, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int is_dir(const char *p, int *dir) {
    struct stat st;
    if (stat(p, &st)) {
        fprintf(stderr, "it-compare: cannot read %s: %s\n", p, strerror(errno));
        return -1;
    }
    *dir = S_ISDIR(st.st_mode);
    return 0;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The flags into *o and the two paths into pos; returns -1 to go on, else the exit status. */
static int parse_args(options *o, const char *pos[2], int argc, char **argv) {
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if (!strcmp(a, "--no-tps")) {
            o->no_tps = 1;
            continue;
        }
        if (!strcmp(a, "--missing-fails")) {
            o->missing_fails = 1;
            continue;
        }
        static const char *valued[] = {"--plots", "--threshold-fp32", "--threshold-bf16", "--threshold",
                                       "--tps-threshold"};
        int k = -1;
        const char *val = NULL;
        for (int m = 0; m < 5 && k < 0; m++) {
            size_t n = strlen(valued[m]);
            if (!strncmp(a, valued[m], n) && (a[n] == 0 || a[n] == '=')) {
                k = m;
                if (a[n] == '=')
                    val = a + n + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
            }
        }
        if (k >= 0 && !val) {
            fprintf(stderr, "it-compare: %s needs a value\n", a);
            return 2;
        }
        if (k == 0)
            o->plots = val;
        else if (k == 1 && parse_threshold(a, val, &o->thr_fp32))
            return 2;
        else if (k == 2 && parse_threshold(a, val, &o->thr_bf16))
            return 2;
        else if (k == 3) {
            if (parse_threshold(a, val, &o->thr_fp32)) return 2;
            o->thr_bf16 = o->thr_fp32;
        } else if (k == 4 && parse_threshold(a, val, &o->thr_tps))
            return 2;
        else if (k < 0 && a[0] == '-' && a[1]) {
            fprintf(stderr, "it-compare: unknown option %s\n", a);
            return usage(stderr);
        } else if (k < 0) {
            if (npos == 2) {
                fprintf(stderr, "it-compare: more than two logs or directories given\n");
                return usage(stderr);
            }
            pos[npos++] = a;
        }
    }
    return npos == 2 ? -1 : usage(stderr);
}

/* The logs on each side: a directory's *.log files, or the one file given. Sets *dirs.
 * Returns 0, or the exit status 2. */
static int list_logs(const char *pos[2], int *dirs, file_list *fb, file_list *ft) {
    int dir1;
    if (is_dir(pos[0], dirs) || is_dir(pos[1], &dir1)) return 2;
    if (*dirs != dir1) {
        fprintf(stderr, "it-compare: give two directories or two log files (%s is a %s, %s a %s)\n", pos[0],
                *dirs ? "directory" : "file", pos[1], dir1 ? "directory" : "file");
        return 2;
    }
    if (*dirs) return collect_dir(pos[0], fb) || collect_dir(pos[1], ft) ? 2 : 0;
    fb->f = xrealloc(NULL, sizeof *fb->f);
    ft->f = xrealloc(NULL, sizeof *ft->f);
    fb->f[0] = (log_file){xstrdup(base_name(pos[0])), xstrdup(pos[0])};
    ft->f[0] = (log_file){xstrdup(base_name(pos[1])), xstrdup(pos[1])};
    fb->n = ft->n = 1;
    return 0;
}

/* The two sorted name lists merged into cases (two files: one case); *n of them. */
static case_result *pair_cases(const file_list *fb, const file_list *ft, int dirs, const options *o, size_t *n) {
    case_result *cs = xrealloc(NULL, (fb->n + ft->n) * sizeof *cs);
    size_t i = 0, j = 0;
    *n = 0;
    while (i < fb->n || j < ft->n) {
        case_result *c = &cs[(*n)++];
        memset(c, 0, sizeof *c);
        int cmp = !dirs ? 0 : i >= fb->n ? 1 : j >= ft->n ? -1 : strcmp(fb->f[i].name, ft->f[j].name);
        if (cmp <= 0) c->name = fb->f[i].name, c->base_path = fb->f[i].path;
        if (cmp >= 0) c->test_path = ft->f[j].path, c->name = c->name ? c->name : ft->f[j].name;
        c->side = cmp < 0 ? SIDE_BASE_ONLY : cmp > 0 ? SIDE_TEST_ONLY : SIDE_BOTH;
        /* Two files: either name can carry the dtype, since only one of them may follow the
         * matrix's naming. */
        c->bf16 = (c->base_path && strstr(base_name(c->base_path), "_bfloat16")) ||
                  (c->test_path && strstr(base_name(c->test_path), "_bfloat16"));
        c->thr = c->bf16 ? o->thr_bf16 : o->thr_fp32;
        if (cmp <= 0) i++;
        if (cmp >= 0) j++;
    }
    return cs;
}

typedef struct tally {
    size_t passed, failed, missing;
} tally;

/* Each case on both sides read and compared; returns 0, or 2 on a log that does not read. */
static int compare_cases(case_result *cs, size_t n, const options *o, tally *t) {
    for (size_t k = 0; k < n; k++) {
        case_result *c = &cs[k];
        if (c->side != SIDE_BOTH) {
            t->missing++;
            if (o->missing_fails) t->failed++;
            continue;
        }
        if (read_log(c->base_path, &c->base) || read_log(c->test_path, &c->test)) return 2;
        compare_loss(c);
        if (!o->no_tps) compare_tps(c, o->thr_tps);
        c->pass = c->loss_ok && (o->no_tps || c->tps_ok);
        if (c->pass)
            t->passed++;
        else
            t->failed++;
    }
    return 0;
}

/* The table, the plots and the counts; returns the exit status. */
static int report(const char *pos[2], case_result *cs, size_t n, const options *o, const tally *t) {
    printf("BASE: %s\nTEST: %s\n", pos[0], pos[1]);
    print_table(cs, n, o);
    int rc = 0;
    if (o->plots && write_plots(o->plots, cs, n, t->passed, t->failed, o))
        rc = 2;
    else if (o->plots)
        printf("plots: %s/index.html\n", o->plots);
    if (t->missing)
        printf("%zu case%s on one side only%s\n", t->missing, t->missing == 1 ? "" : "s",
               o->missing_fails ? " (counted as failed)" : " (not counted)");
    printf("it-compare: %zu passed, %zu failed\n", t->passed, t->failed);
    return rc ? rc : t->failed ? 1 : 0;
}

int main(int argc, char **argv) {
    options o = {1e-5, 1e-2, 0.20, 0, 0, NULL};
    const char *pos[2];
    int rc = parse_args(&o, pos, argc, argv), dirs = 0;
    if (rc >= 0) return rc;
    file_list fb = {0}, ft = {0};
    case_result *cs = NULL;
    size_t n = 0;
    tally t = {0};
    rc = list_logs(pos, &dirs, &fb, &ft);
    if (!rc) cs = pair_cases(&fb, &ft, dirs, &o, &n);
    if (!rc) rc = compare_cases(cs, n, &o, &t);
    if (!rc && n == 0) {
        fprintf(stderr, "it-compare: no *.log files in %s or %s\n", pos[0], pos[1]);
        rc = 2;
    }
    if (!rc) rc = report(pos, cs, n, &o, &t);
    for (size_t k = 0; k < n; k++) {
        free(cs[k].base.loss.p);
        free(cs[k].base.tps.p);
        free(cs[k].test.loss.p);
        free(cs[k].test.tps.p);
    }
    free(cs);
    files_free(&fb);
    files_free(&ft);
    return rc;
}
