/* it-precision-compare DIR1 DIR2 [--atol A] [--rtol R]
 *
 * Two --precision_check runs (save_tensors=true) in, the first op whose output differs out.
 * Each DIR is a run directory (PATH/YYYYMMDD_HHMMSS, with precision_check_rank_R.tsv) or a
 * PATH holding exactly one. For every rank of DIR1, both indexes are walked in execution
 * order; the records must name the same tensors (kind, op or module, step, micro-step,
 * shape), and the first output record (an op's forward output or input gradient, a
 * module's output or output gradient) whose values differ beyond |a - b| <= atol +
 * rtol * |b| (numpy.allclose, b from DIR2) is reported with its place in the run and the
 * differences of its inputs, so one sees whether they already differed.
 *
 * Exit status: 0 all match, 1 a difference (printed), 2 bad input (a missing directory or
 * file, a malformed index or .npy, or runs whose records do not line up: which is said). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infinitrain/precision.h"

#define NFIELDS 17

typedef struct rec {
    long long seq, call;
    int step, gas, layer, tensor;
    char kind[8], name[160], file[300], dtype[16], shape[200];
} rec;

typedef struct run {
    char dir[PATH_MAX], tsv[PATH_MAX + 64];
    rec *r;
    size_t n;
} run;

static int bad_input(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "it-precision-compare: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The run directory for `dir` and rank 0: dir itself or its one child that is a run. */
static int resolve(const char *dir, char *out) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bad_input("%s: no such directory%s", dir, "");
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/precision_check_rank_0.tsv", dir);
    if (is_file(p)) {
        snprintf(out, PATH_MAX, "%s", dir);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) return bad_input("%s: cannot list: %s", dir, strerror(errno));
    int found = 0;
    char first[PATH_MAX] = "", second[PATH_MAX] = "";
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s/precision_check_rank_0.tsv", dir, e->d_name);
        if (!is_file(p)) continue;
        if (found++ == 0)
            snprintf(first, sizeof first, "%s/%s", dir, e->d_name);
        else
            snprintf(second, sizeof second, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (found == 0)
        return bad_input("%s: no precision check here (no precision_check_rank_0.tsv in it or in a run directory "
                         "under it)%s",
                         dir, "");
    if (found > 1) {
        fprintf(stderr, "it-precision-compare: %s holds %d runs (%s, %s, ...): name one\n", dir, found, first, second);
        return 2;
    }
    snprintf(out, PATH_MAX, "%s", first);
    return 0;
}

static int load_index(run *u, int rank) {
    snprintf(u->tsv, sizeof u->tsv, "%s/precision_check_rank_%d.tsv", u->dir, rank);
    FILE *f = fopen(u->tsv, "r");
    if (!f) return bad_input("%s: cannot open: %s", u->tsv, strerror(errno));
    char line[4096];
    size_t cap = 0, lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1 && strncmp(line, "# infinitrain precision check v1", 32) != 0) {
            rc = bad_input("%s: not a precision check index (its first line is not '# infinitrain precision check "
                           "v1 ...')%s",
                           u->tsv, "");
            break;
        }
        if (line[0] == '#') continue;
        char *fld[NFIELDS];
        int nf = 0;
        line[strcspn(line, "\n")] = 0;
        for (char *s = line; nf < NFIELDS;) {
            fld[nf++] = s;
            char *t = strchr(s, '\t');
            if (!t) break;
            *t = 0;
            s = t + 1;
        }
        if (nf != NFIELDS) {
            fprintf(stderr, "it-precision-compare: %s:%zu: %d fields, expected %d\n", u->tsv, lineno, nf, NFIELDS);
            rc = 2;
            break;
        }
        if (u->n == cap) {
            cap = cap ? 2 * cap : 1024;
            rec *r = realloc(u->r, cap * sizeof *r);
            if (!r) {
                rc = bad_input("%s: out of memory%s", u->tsv, "");
                break;
            }
            u->r = r;
        }
        rec *r = &u->r[u->n++];
        char *end;
        r->seq = strtoll(fld[0], &end, 10);
        bool ok = *end == 0;
        r->step = (int)strtol(fld[1], &end, 10);
        ok &= *end == 0;
        r->gas = (int)strtol(fld[2], &end, 10);
        ok &= *end == 0;
        r->layer = (int)strtol(fld[3], &end, 10);
        ok &= *end == 0;
        r->call = strtoll(fld[4], &end, 10);
        ok &= *end == 0;
        r->tensor = (int)strtol(fld[6], &end, 10);
        ok &= *end == 0;
        ok &= strlen(fld[5]) < sizeof r->kind && strlen(fld[7]) < sizeof r->name && strlen(fld[8]) < sizeof r->file &&
              strlen(fld[9]) < sizeof r->dtype && strlen(fld[10]) < sizeof r->shape;
        if (!ok) {
            fprintf(stderr, "it-precision-compare: %s:%zu: malformed record\n", u->tsv, lineno);
            rc = 2;
            break;
        }
        snprintf(r->kind, sizeof r->kind, "%s", fld[5]);
        snprintf(r->name, sizeof r->name, "%s", fld[7]);
        snprintf(r->file, sizeof r->file, "%s", fld[8]);
        snprintf(r->dtype, sizeof r->dtype, "%s", fld[9]);
        snprintf(r->shape, sizeof r->shape, "%s", fld[10]);
    }
    if (!rc && lineno == 0) rc = bad_input("%s: empty file%s", u->tsv, "");
    fclose(f);
    return rc;
}

static bool is_output(const rec *r) { return strcmp(r->kind, "fwd_in") != 0 && strcmp(r->kind, "bwd_in") != 0; }

static const char *what(const rec *r) {
    if (!strcmp(r->kind, "fwd_in")) return "forward input";
    if (!strcmp(r->kind, "fwd_out")) return "forward output";
    if (!strcmp(r->kind, "bwd_in")) return "backward input (gradient of its output)";
    if (!strcmp(r->kind, "bwd_out")) return "backward output (gradient of its input)";
    if (!strcmp(r->kind, "mod_fwd")) return "module forward output";
    return "module backward (gradient of its output)";
}

/* The file's name without directory and extension. */
static void base_of(const rec *r, char *out, size_t n) {
    const char *s = strrchr(r->file, '/');
    snprintf(out, n, "%s", s ? s + 1 : r->file);
    char *dot = strrchr(out, '.');
    if (dot) *dot = 0;
}

typedef struct diff {
    int64_t n, bad, worst;
    double max_abs, max_rel;
    float a, b;
} diff;

static bool close_enough(float a, float b, double atol, double rtol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs((double)a - (double)b) <= atol + rtol * fabs((double)b);
}

/* Read both .npy files of record i and compare them. 0 ok, 2 bad input. */
static int compare_rec(const run *u1, const run *u2, size_t i, double atol, double rtol, diff *d) {
    const rec *r1 = &u1->r[i], *r2 = &u2->r[i];
    if (!strcmp(r1->file, "-") || !strcmp(r2->file, "-"))
        return bad_input("%s: written without save_tensors=true: nothing to compare (run with "
                         "--precision_check \"level=2,save_tensors=true,...\")%s",
                         !strcmp(r1->file, "-") ? u1->tsv : u2->tsv, "");
    char p1[PATH_MAX * 2], p2[PATH_MAX * 2];
    snprintf(p1, sizeof p1, "%s/%s", u1->dir, r1->file);
    snprintf(p2, sizeof p2, "%s/%s", u2->dir, r2->file);
    it_npy a, b;
    if (it_npy_read_f32(p1, &a)) return bad_input("%s%s", it_last_error(), "");
    if (it_npy_read_f32(p2, &b)) {
        it_npy_free(&a);
        return bad_input("%s%s", it_last_error(), "");
    }
    int rc = 0;
    if (a.numel != b.numel || a.ndim != b.ndim || memcmp(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim)) {
        fprintf(stderr, "it-precision-compare: %s and %s have different shapes\n", p1, p2);
        rc = 2;
    }
    memset(d, 0, sizeof *d);
    d->worst = -1;
    bool worst_bad = false; /* the value shown: the largest difference among those beyond tolerance */
    double worst_ad = -1;
    for (int64_t k = 0; !rc && k < a.numel; k++) {
        float x = a.data[k], y = b.data[k];
        d->n++;
        bool bad = !close_enough(x, y, atol, rtol);
        double ad = x == y || (isnan(x) && isnan(y)) ? 0
                    : isnan(x) || isnan(y)           ? INFINITY
                                                     : fabs((double)x - (double)y);
        double rd = ad / (fabs((double)y) + 1e-12);
        d->bad += bad;
        if (ad > d->max_abs) d->max_abs = ad;
        if (rd > d->max_rel && isfinite(rd)) d->max_rel = rd;
        if (bad > worst_bad || (bad == worst_bad && ad > worst_ad)) {
            worst_bad = bad;
            worst_ad = ad;
            d->worst = k;
            d->a = x;
            d->b = y;
        }
    }
    it_npy_free(&a);
    it_npy_free(&b);
    return rc;
}

/* "[i,j,k]" of flat index k in a shape like "(2,8,32)". */
static void index_str(const char *shape, int64_t k, char *out, size_t n) {
    int64_t dims[16];
    int nd = 0;
    for (const char *s = shape + 1; *s && *s != ')' && nd < 16;) {
        dims[nd++] = strtoll(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    int64_t idx[16];
    for (int i = nd; i-- > 0;) {
        idx[i] = dims[i] ? k % dims[i] : 0;
        k = dims[i] ? k / dims[i] : 0;
    }
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < nd && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? "," : "", (long long)idx[i]);
    if (len < n) snprintf(out + len, n - len, "]");
}

static void print_diff(const rec *r, const diff *d, const char *indent) {
    char at[128];
    index_str(r->shape, d->worst < 0 ? 0 : d->worst, at, sizeof at);
    if (d->max_abs == 0 && d->bad == 0) {
        printf("%sidentical (%lld values)\n", indent, (long long)d->n);
        return;
    }
    printf("%smax_abs %.3e at %s (DIR1 %.9g, DIR2 %.9g), max_rel %.3e, %lld of %lld values beyond tolerance\n", indent,
           d->max_abs, at, (double)d->a, (double)d->b, d->max_rel, (long long)d->bad, (long long)d->n);
}

static int usage(void) {
    fprintf(stderr, "usage: it-precision-compare DIR1 DIR2 [--atol A] [--rtol R]\n"
                    "  DIR: a --precision_check run directory (PATH/YYYYMMDD_HHMMSS) or a PATH holding one;\n"
                    "  both written with save_tensors=true. Defaults: --atol 1e-5 --rtol 1e-3.\n");
    return 2;
}

static int compare_rank(const char *d1, const char *d2, int rank, double atol, double rtol) {
    run u1 = {0}, u2 = {0};
    snprintf(u1.dir, sizeof u1.dir, "%s", d1);
    snprintf(u2.dir, sizeof u2.dir, "%s", d2);
    int rc = load_index(&u1, rank);
    if (!rc) rc = load_index(&u2, rank);
    size_t n = u1.n < u2.n ? u1.n : u2.n, outputs = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        const rec *a = &u1.r[i], *b = &u2.r[i];
        if (strcmp(a->kind, b->kind) || strcmp(a->name, b->name) || a->tensor != b->tensor || a->step != b->step ||
            a->gas != b->gas || strcmp(a->shape, b->shape)) {
            fprintf(stderr,
                    "it-precision-compare: rank %d: the runs do not line up at record %zu: DIR1 has %s %s tensor[%d] "
                    "%s (step %d, micro-step %d), DIR2 has %s %s tensor[%d] %s (step %d, micro-step %d); compare runs "
                    "of the same model, batch, steps and --precision_check level\n",
                    rank, i, a->kind, a->name, a->tensor, a->shape, a->step, a->gas, b->kind, b->name, b->tensor,
                    b->shape, b->step, b->gas);
            rc = 2;
            break;
        }
        if (!is_output(a)) continue;
        diff d;
        if ((rc = compare_rec(&u1, &u2, i, atol, rtol, &d))) break;
        outputs++;
        if (!d.bad) continue;
        char base[320];
        base_of(a, base, sizeof base);
        bool op = a->kind[0] != 'm', fwd = a->kind[0] == 'f' || !strcmp(a->kind, "mod_fwd");
        printf("rank %d: first difference (atol %g, rtol %g): %s %s %s", rank, atol, rtol, op ? "op" : "module",
               a->name, fwd ? "forward" : "backward");
        if (a->layer >= 0)
            printf(", layer %d (transformer.h.%d)", a->layer, a->layer);
        else
            printf(", outside the blocks");
        printf(", step %d, micro-step %d\n", a->step, a->gas);
        printf("  record %zu of %zu: %s tensor[%d], %s, shape %s, %s (%s)\n", i, u1.n, base, a->tensor, what(a),
               a->shape, a->dtype, a->file);
        print_diff(a, &d, "    ");
        if (op) {
            const char *in_kind = fwd ? "fwd_in" : "bwd_in";
            printf("  its inputs:\n");
            int shown = 0;
            for (size_t k = i; k-- > 0 && u1.r[k].call == a->call;) {
                if (strcmp(u1.r[k].kind, in_kind)) continue;
                diff di;
                if ((rc = compare_rec(&u1, &u2, k, atol, rtol, &di))) break;
                base_of(&u1.r[k], base, sizeof base);
                printf("    %s tensor[%d] %s: ", base, u1.r[k].tensor, u1.r[k].shape);
                print_diff(&u1.r[k], &di, "");
                shown++;
            }
            if (!rc && !shown) printf("    (none logged)\n");
            if (rc) break;
        } else {
            printf("  (a module record: its inputs are logged at level=2, which names the op)\n");
        }
        rc = 1;
        break;
    }
    if (!rc && u1.n != u2.n) {
        fprintf(stderr,
                "it-precision-compare: rank %d: DIR1 has %zu records, DIR2 %zu (the first %zu match): the runs "
                "differ in steps or configuration\n",
                rank, u1.n, u2.n, n);
        rc = 2;
    }
    if (!rc)
        printf("rank %d: all %zu output records match (atol %g, rtol %g; %zu records)\n", rank, outputs, atol, rtol, n);
    free(u1.r);
    free(u2.r);
    return rc;
}

int main(int argc, char **argv) {
    const char *dirs[2] = {NULL, NULL};
    double atol = 1e-5, rtol = 1e-3; /* InfiniTrain's precision_compare.py defaults */
    int nd = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--atol") || !strcmp(argv[i], "--rtol")) {
            char *end;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || !(v >= 0)) {
                fprintf(stderr, "it-precision-compare: %s needs a number >= 0\n", argv[i]);
                return 2;
            }
            if (argv[i][2] == 'a')
                atol = v;
            else
                rtol = v;
            i++;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else if (argv[i][0] == '-' || nd == 2) {
            fprintf(stderr, "it-precision-compare: unexpected argument '%s'\n", argv[i]);
            return usage();
        } else {
            dirs[nd++] = argv[i];
        }
    }
    if (nd != 2) return usage();
    char r1[PATH_MAX], r2[PATH_MAX];
    int rc = resolve(dirs[0], r1);
    if (!rc) rc = resolve(dirs[1], r2);
    if (rc) return rc;
    printf("DIR1 %s\nDIR2 %s\n", r1, r2);
    int worst = 0;
    for (int rank = 0;; rank++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/precision_check_rank_%d.tsv", r1, rank);
        if (rank > 0 && !is_file(p)) {
            snprintf(p, sizeof p, "%s/precision_check_rank_%d.tsv", r2, rank);
            if (is_file(p)) return bad_input("%s has rank %s, DIR1 has not", r2, strrchr(p, '_') + 1);
            break;
        }
        rc = compare_rank(r1, r2, rank, atol, rtol);
        if (rc == 2) return 2;
        if (rc > worst) worst = rc;
    }
    return worst;
}
