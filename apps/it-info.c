/* it-info: what this build of infinitrain can run on.
 *
 *   it-info              backends (registered and found as plugins), their devices and memory
 *   it-info --coverage   and, per kernel slot, which backends run it natively and which leave
 *                        it to the CPU fallback
 *
 * Every plugin found on the search path is loaded, so a plugin that cannot be used is listed
 * with the loader's reason. A backend whose runtime fails to initialize is listed with no
 * devices and the init error. Exit status: 0, or 2 for a bad command line. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infinitrain/backend.h"
#include "infinitrain/tensor.h"

/* ------------------------------------------------------------------ kernel slots
 * Native or fallback comes from the core's dispatch statistics, so this tool never needs to
 * know the kernel table's layout. */
#define N_SLOTS IT_KERNEL_SLOT_COUNT

static bool slot_native(const it_backend *b, size_t slot) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    return it_backend_kernel_stats(b, st) == IT_OK && st[slot].native;
}

static bool slot_required(size_t slot) { return slot < 3; /* cast, fill, copy_strided */ }

static int native_count(const it_backend *b) {
    int n = 0;
    for (size_t i = 0; i < N_SLOTS; i++) n += slot_native(b, i);
    return n;
}

/* ------------------------------------------------------------------ tables */

#define MAX_ROWS 128
/* The coverage table has a column per backend, MAX_COLS - 2 of them side by side before it
 * continues in another table: room for every in-tree and test backend at once. */
#define MAX_COLS 12
#define CELL 1024

typedef struct table {
    int ncols, nrows;
    char head[MAX_COLS][64];
    char cell[MAX_ROWS][MAX_COLS][CELL];
} table;

static void table_init(table *t, int ncols, const char *const *head) {
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
    for (int c = 0; c < ncols; c++) snprintf(t->head[c], sizeof t->head[c], "%s", head[c]);
}

/* Append a row; returns its index, or -1 when the table is full. */
static int table_row(table *t) { return t->nrows < MAX_ROWS ? t->nrows++ : -1; }

static void table_set(table *t, int row, int col, const char *fmt, ...) IT_PRINTF(4, 5);
static void table_set(table *t, int row, int col, const char *fmt, ...) {
    if (row < 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[row][col], CELL, fmt, ap);
    va_end(ap);
}

/* Columns padded to their widest cell; the last column is not padded. */
static void table_print(const table *t, FILE *f) {
    size_t w[MAX_COLS] = {0};
    for (int c = 0; c < t->ncols; c++) {
        w[c] = strlen(t->head[c]);
        for (int r = 0; r < t->nrows; r++)
            if (strlen(t->cell[r][c]) > w[c]) w[c] = strlen(t->cell[r][c]);
    }
    for (int r = -1; r < t->nrows; r++) {
        int last = t->ncols - 1; /* no trailing blanks: stop at the last non-empty cell */
        while (last > 0 && (r < 0 ? t->head[last] : t->cell[r][last])[0] == '\0') last--;
        fputs("  ", f);
        for (int c = 0; c <= last; c++) {
            const char *s = r < 0 ? t->head[c] : t->cell[r][c];
            if (c == last)
                fputs(s, f);
            else
                fprintf(f, "%-*s  ", (int)w[c], s);
        }
        fputc('\n', f);
    }
}

/* ------------------------------------------------------------------ helpers */

static void human_bytes(size_t n, char *buf, size_t size) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%zu B", n);
    else
        snprintf(buf, size, "%.1f %s", v, unit[u]);
}

/* From the loader's "... searched:\n  PATH: WHY\n  PATH: WHY" message, the first tried path
 * that exists and why it was refused. Falls back to the whole message (one line). */
static void load_failure(const char *msg, char *path, size_t psize, char *why, size_t wsize) {
    path[0] = '\0';
    snprintf(why, wsize, "%s", msg);
    const char *p = strstr(msg, "searched:");
    while (p && (p = strstr(p, "\n  ")) != NULL) {
        p += 3;
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *sep = strstr(p, ".so: ");
        if (sep && (size_t)(sep - p) < len) {
            size_t plen = (size_t)(sep + 3 - p);
            const char *reason = sep + 5;
            size_t rlen = len - (size_t)(reason - p);
            if (!(rlen == 12 && strncmp(reason, "no such file", 12) == 0)) {
                snprintf(path, psize, "%.*s", (int)plen, p);
                snprintf(why, wsize, "%.*s", (int)rlen, reason);
                break;
            }
        }
    }
    for (char *c = why; *c; c++)
        if (*c == '\n') *c = ' ';
}

static int compare_names(const void *a, const void *b) { return strcmp(a, b); }

static void usage(FILE *f) {
    fprintf(f, "usage: it-info [--coverage] [--help]\n"
               "\n"
               "Lists the registered backends and the plugins on the search path (each one is\n"
               "loaded, or its load failure shown), with api version, default autocast dtype,\n"
               "devices and their free/total memory.\n"
               "\n"
               "  --coverage  also print, for every kernel slot, whether each backend runs it\n"
               "              natively or leaves it to the CPU fallback\n"
               "  --help      this text\n"
               "\n"
               "Plugins (libit_backend_NAME.so) are searched beside the executable, then in an\n"
               "installed prefix's lib/infinitrain (for an installed it-info), then in the\n"
               "colon-separated directories of IT_BACKEND_PATH.\n");
}

static table tab; /* large: kept out of the stack */

/* What the listing is made of: the discoverable plugins (each loaded, or why not) and each
 * registered backend's device count (or why it has none). Large: kept out of the stack. */
typedef struct survey {
    char names[64][40];
    int nplug;
    bool loaded[64];
    char fail_path[64][PATH_MAX + 64], fail_why[64][CELL];
    int nb, ndev[64];
    char init_err[64][CELL];
} survey;
static survey sv;

/* Load every discoverable plugin; remember why the refused ones were refused. */
static void load_plugins(survey *v) {
    it_backend_discover(v->names, 64, &v->nplug);
    qsort(v->names, (size_t)v->nplug, sizeof v->names[0], compare_names);
    for (int i = 0; i < v->nplug; i++) {
        const it_backend *b = NULL;
        if (it_backend_find(v->names[i], &b) == IT_OK)
            v->loaded[i] = true;
        else
            load_failure(it_last_error(), v->fail_path[i], sizeof v->fail_path[i], v->fail_why[i],
                         sizeof v->fail_why[i]);
    }
}

static void print_backends(survey *v) {
    v->nb = it_backend_count();
    const char *bh[] = {"BACKEND", "API", "AUTOCAST", "MEMORY", "DEVICES", "KERNELS", "ORIGIN"};
    table_init(&tab, 7, bh);
    for (int i = 0; i < v->nb && i < 64; i++) {
        const it_backend *b = it_backend_at(i);
        int r = table_row(&tab);
        table_set(&tab, r, 0, "%s", b->name);
        table_set(&tab, r, 1, "%d", b->api_version);
        table_set(&tab, r, 2, "%s", it_dtype_name(b->default_autocast_dtype));
        table_set(&tab, r, 3, "%s", b->host_memory ? "host" : "device");
        if (it_device_count(b, &v->ndev[i]) != IT_OK) {
            v->ndev[i] = 0;
            snprintf(v->init_err[i], sizeof v->init_err[i], "%s", it_last_error());
            table_set(&tab, r, 4, "none");
        } else {
            table_set(&tab, r, 4, "%d", v->ndev[i]);
        }
        table_set(&tab, r, 5, "%d/%d native", native_count(b), (int)N_SLOTS);
        table_set(&tab, r, 6, "%s", it_backend_origin(b));
    }
    printf("Registered backends (%d)\n", v->nb);
    table_print(&tab, stdout);
}

static void print_plugins(const survey *v) {
    printf("\nPlugins on the search path (%d)\n", v->nplug);
    if (v->nplug == 0) {
        printf("  none\n");
    } else {
        const char *ph[] = {"PLUGIN", "STATUS", "DETAIL"};
        table_init(&tab, 3, ph);
        for (int i = 0; i < v->nplug; i++) {
            int r = table_row(&tab);
            table_set(&tab, r, 0, "%s", v->names[i]);
            if (v->loaded[i]) {
                const it_backend *b = NULL;
                it_backend_find(v->names[i], &b);
                table_set(&tab, r, 1, "loaded");
                table_set(&tab, r, 2, "%s", b ? it_backend_origin(b) : "");
            } else {
                table_set(&tab, r, 1, "failed");
                if (v->fail_path[i][0])
                    table_set(&tab, r, 2, "%s: %s", v->fail_path[i], v->fail_why[i]);
                else
                    table_set(&tab, r, 2, "%s", v->fail_why[i]);
            }
        }
        table_print(&tab, stdout);
    }
    static char searched[16 * (PATH_MAX + 32)];
    it_backend_search_path(searched, sizeof searched);
    const char *env = getenv("IT_BACKEND_PATH");
    printf("  searched: %s; IT_BACKEND_PATH=%s\n", searched, env && *env ? env : "(unset)");
}

/* A backend's row when it has no device to list. */
static void no_device_row(const it_backend *b, const char *fmt, const char *why) {
    int r = table_row(&tab);
    table_set(&tab, r, 0, "%s", b->name);
    table_set(&tab, r, 1, "-");
    table_set(&tab, r, 2, "-");
    table_set(&tab, r, 3, fmt, why);
}

static void print_devices(const survey *v) {
    printf("\nDevices\n");
    const char *dh[] = {"DEVICE", "FREE", "TOTAL", "NOTE"};
    table_init(&tab, 4, dh);
    for (int i = 0; i < v->nb && i < 64; i++) {
        const it_backend *b = it_backend_at(i);
        if (v->init_err[i][0]) {
            no_device_row(b, "no devices: %s", v->init_err[i]);
            continue;
        }
        if (v->ndev[i] == 0) {
            no_device_row(b, "%s", "no devices (the backend reports 0)");
            continue;
        }
        for (int d = 0; d < v->ndev[i]; d++) {
            it_device dev = {b, d};
            char dn[64], fr[32], tot[32];
            int r = table_row(&tab);
            table_set(&tab, r, 0, "%s", it_device_str(dev, dn, sizeof dn));
            size_t free_b = 0, total_b = 0;
            if (b->runtime->mem_info(d, &free_b, &total_b)) {
                table_set(&tab, r, 1, "-");
                table_set(&tab, r, 2, "-");
                table_set(&tab, r, 3, "mem_info failed: %s", it_last_error());
            } else {
                human_bytes(free_b, fr, sizeof fr);
                human_bytes(total_b, tot, sizeof tot);
                table_set(&tab, r, 1, "%s", fr);
                table_set(&tab, r, 2, "%s", tot);
            }
        }
    }
    table_print(&tab, stdout);
}

/* --coverage: per kernel slot, native, fallback or composed on each backend, in tables of at
 * most MAX_COLS - 2 backends. */
static void print_coverage(int nb) {
    printf("\nKernel coverage (native: the backend's own kernel; fallback: run by the CPU fallback,\n"
           "inputs copied to the host and results back; composed: an optional fused kernel the backend\n"
           "lacks, which the core builds from the other slots on the device)\n");
    const char *ch[MAX_COLS] = {"SLOT", "REQUIRED"};
    int nbc = nb < MAX_COLS - 2 ? nb : MAX_COLS - 2;
    for (int first = 0; first < nb; first += nbc) {
        int cols = nb - first < nbc ? nb - first : nbc;
        for (int i = 0; i < cols; i++) ch[2 + i] = it_backend_at(first + i)->name;
        table_init(&tab, 2 + cols, ch);
        for (size_t s = 0; s < N_SLOTS; s++) {
            int r = table_row(&tab);
            table_set(&tab, r, 0, "%s", it_kernel_slot_name(s));
            table_set(&tab, r, 1, "%s", slot_required(s) ? "yes" : "");
            for (int i = 0; i < cols; i++)
                table_set(&tab, r, 2 + i, "%s",
                          slot_native(it_backend_at(first + i), s) ? "native"
                          : it_kernel_slot_fused(s)                ? "composed"
                                                                   : "fallback");
        }
        int r = table_row(&tab);
        table_set(&tab, r, 0, "native slots");
        for (int i = 0; i < cols; i++)
            table_set(&tab, r, 2 + i, "%d/%d", native_count(it_backend_at(first + i)), (int)N_SLOTS);
        table_print(&tab, stdout);
    }
}

int main(int argc, char **argv) {
    bool coverage = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--coverage") == 0) {
            coverage = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "it-info: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    load_plugins(&sv);
    printf("infinitrain backends (core backend API version %d)\n\n", IT_BACKEND_API_VERSION);
    print_backends(&sv);
    print_plugins(&sv);
    print_devices(&sv);
    if (coverage) print_coverage(sv.nb);
    return 0;
}
