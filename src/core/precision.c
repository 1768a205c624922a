/* The precision checker (infinitrain/precision.h): the option string, the run directory and
 * the records the tape's and the models' hooks (core/precision_hooks.h) hand it.
 *
 * Each record copies one tensor to the host (converted to float32 for the statistics, the
 * rounding and the .npy; the unrounded md5 hashes the tensor's own bytes, as InfiniTrain's
 * does) and writes one log line, one index row and optionally one .npy file. Names get a
 * per-step counter per (name, forward|backward), InfiniTrain's `name[_idx]_stage`.
 *
 * All state is the driving thread's; it__prec_on is what other code reads. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "autograd/node.h"
#include "core/precision_hooks.h"
#include "infinitrain/precision.h"

atomic_bool it__prec_on;

typedef struct prec_counter {
    char *key; /* name + "_forward" / "_backward" */
    int n;
} prec_counter;

typedef struct prec_module { /* a module output waiting for its gradient (level 1) */
    const it_tensor *t;
    int layer;
    char name[160];
} prec_module;

typedef struct prec_node { /* a node's forward context, for its backward records (level 2) */
    const it_node *n;
    int layer;
} prec_node;

static struct {
    bool open, in_step;
    it_precision_config cfg;
    int rank, step, gas, layer;
    char run_dir[1100], step_dir[1200]; /* path is under 1024 - 64 characters (it_precision_parse) */
    bool step_dir_made;
    FILE *log, *tsv;
    it_status err;
    char errmsg[768];
    uint64_t seq, call;
    prec_counter *counters;
    size_t ncounters, capcounters;
    prec_module *mods;
    size_t nmods, capmods;
    prec_node *nodes;
    size_t nnodes, capnodes, node_cursor;
} pc;

/* ---------------------------------------------------------------- the option string */

it_status it_precision_parse(const char *spec, it_precision_config *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "./log_precision_check");
    if (!spec) return IT_OK;
    const char *p = spec;
    while (*p) {
        size_t n = strcspn(p, ",");
        char item[1100];
        if (n >= sizeof item) return it_error(IT_ERR_INVALID_ARG, "--precision_check: item '%.40s...' too long", p);
        memcpy(item, p, n);
        item[n] = 0;
        p += n + (p[n] == ',');
        if (!item[0]) continue;
        char *eq = strchr(item, '=');
        if (!eq)
            return it_error(IT_ERR_INVALID_ARG,
                            "--precision_check: '%s' is not key=value (keys: level, path, format, "
                            "save_tensors, md5_tolerance)",
                            item);
        *eq = 0;
        const char *k = item, *v = eq + 1;
        char *end;
        if (!strcmp(k, "level")) {
            long l = strtol(v, &end, 10);
            if (end == v || *end || l < 0 || l > 2)
                return it_error(IT_ERR_INVALID_ARG, "--precision_check: level=%s, expected 0, 1 (module) or 2 (op)", v);
            out->level = (int)l;
        } else if (!strcmp(k, "path")) {
            if (!*v || strlen(v) >= sizeof out->path - 64)
                return it_error(IT_ERR_INVALID_ARG, "--precision_check: path='%.64s' is %s", v,
                                *v ? "too long" : "empty");
            snprintf(out->path, sizeof out->path, "%s", v);
        } else if (!strcmp(k, "format")) {
            if (!strcmp(v, "simple"))
                out->format = IT_PRECISION_SIMPLE;
            else if (!strcmp(v, "md5"))
                out->format = IT_PRECISION_MD5;
            else
                return it_error(IT_ERR_INVALID_ARG, "--precision_check: format=%s, expected simple or md5", v);
        } else if (!strcmp(k, "save_tensors")) {
            if (!strcmp(v, "true") || !strcmp(v, "1"))
                out->save_tensors = true;
            else if (!strcmp(v, "false") || !strcmp(v, "0"))
                out->save_tensors = false;
            else
                return it_error(IT_ERR_INVALID_ARG, "--precision_check: save_tensors=%s, expected true or false", v);
        } else if (!strcmp(k, "md5_tolerance")) {
            errno = 0;
            double t = strtod(v, &end);
            if (end == v || *end || errno || !(t >= 0) || isinf(t))
                return it_error(IT_ERR_INVALID_ARG, "--precision_check: md5_tolerance=%s, expected a number >= 0", v);
            out->md5_tolerance = t;
        } else {
            return it_error(IT_ERR_INVALID_ARG,
                            "--precision_check: unknown key '%s' (keys: level, path, format, "
                            "save_tensors, md5_tolerance)",
                            k);
        }
    }
    return IT_OK;
}

/* ---------------------------------------------------------------- files */

static it_status mkdir_p(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1;; s++) {
        char c = *s;
        if (c == '/' || c == 0) {
            *s = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return it_error(IT_ERR_IO, "--precision_check: cannot create directory %s: %s", buf, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    return IT_OK;
}

/* The first failure stops recording; step_end and end report it. */
static void fail(void) {
    if (pc.err) return;
    pc.err = it_last_status() ? it_last_status() : IT_ERR_INTERNAL;
    snprintf(pc.errmsg, sizeof pc.errmsg, "%s", it_last_error());
    atomic_store(&it__prec_on, false);
}

static void free_lists(void) {
    for (size_t i = 0; i < pc.ncounters; i++) free(pc.counters[i].key);
    free(pc.counters);
    free(pc.mods);
    free(pc.nodes);
    pc.counters = NULL;
    pc.mods = NULL;
    pc.nodes = NULL;
    pc.ncounters = pc.capcounters = pc.nmods = pc.capmods = pc.nnodes = pc.capnodes = pc.node_cursor = 0;
}

it_status it_precision_begin(const it_precision_config *cfg, int rank, int64_t stamp) {
    if (pc.open) return it_error(IT_ERR_INVALID_ARG, "precision check: already open");
    if (!cfg || cfg->level == 0) return IT_OK;
    memset(&pc, 0, sizeof pc);
    pc.cfg = *cfg;
    pc.rank = rank;
    pc.layer = -1;
    time_t t = (time_t)stamp;
    struct tm tm;
    char ts[32] = "00000000_000000";
    if (localtime_r(&t, &tm)) strftime(ts, sizeof ts, "%Y%m%d_%H%M%S", &tm);
    snprintf(pc.run_dir, sizeof pc.run_dir, "%.1000s/%s", cfg->path, ts);
    it_status st = mkdir_p(pc.run_dir);
    if (st) return st;
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/precision_check_rank_%d.log", pc.run_dir, rank);
    pc.log = fopen(p, "w");
    if (!pc.log) return it_error(IT_ERR_IO, "--precision_check: cannot create %s: %s", p, strerror(errno));
    snprintf(p, sizeof p, "%s/precision_check_rank_%d.tsv", pc.run_dir, rank);
    pc.tsv = fopen(p, "w");
    if (!pc.tsv) {
        fclose(pc.log);
        pc.log = NULL;
        return it_error(IT_ERR_IO, "--precision_check: cannot create %s: %s", p, strerror(errno));
    }
    fprintf(pc.tsv, "# infinitrain precision check v1 level=%d format=%s save_tensors=%d md5_tolerance=%.17g\n",
            cfg->level, cfg->format == IT_PRECISION_MD5 ? "md5" : "simple", cfg->save_tensors ? 1 : 0,
            cfg->md5_tolerance);
    fprintf(pc.tsv,
            "# seq\tstep\tgas\tlayer\tcall\tkind\ttensor\tname\tfile\tdtype\tshape\tmin\tmax\tmean\tnan\tinf\tmd5\n");
    pc.open = true;
    if (rank == 0) printf("[PrecisionCheck] Output: %s\n", pc.run_dir);
    return IT_OK;
}

bool it_precision_enabled(void) { return pc.open; }
const char *it_precision_run_dir(void) { return pc.open ? pc.run_dir : ""; }
uint64_t it_precision_record_count(void) { return pc.seq; }

static void clear_micro_step(void) {
    pc.nmods = 0;
    pc.nnodes = 0;
    pc.node_cursor = 0;
    pc.layer = -1;
}

void it_precision_step_begin(int step) {
    if (!pc.open || pc.err) return;
    pc.step = step;
    pc.gas = 0;
    pc.step_dir_made = false;
    snprintf(pc.step_dir, sizeof pc.step_dir, "%s/rank_%d/step_%06d", pc.run_dir, pc.rank, step);
    for (size_t i = 0; i < pc.ncounters; i++) pc.counters[i].n = 0; /* InfiniTrain's ResetCounters */
    clear_micro_step();
    pc.in_step = true;
    atomic_store(&it__prec_on, true);
}

void it_precision_micro_step(int gas) {
    if (!pc.open) return;
    pc.gas = gas;
    clear_micro_step();
}

void it_precision_pipeline_micro_step(int gas) {
    if (!pc.open) return;
    pc.gas = gas;
    pc.layer = -1;
}

static it_status take_error(void) { return pc.err ? it_error(pc.err, "%s", pc.errmsg) : IT_OK; }

it_status it_precision_step_end(void) {
    if (!pc.open) return IT_OK;
    atomic_store(&it__prec_on, false);
    pc.in_step = false;
    clear_micro_step();
    if (!pc.err && (fflush(pc.log) != 0 || fflush(pc.tsv) != 0)) {
        it_error(IT_ERR_IO, "--precision_check: writing %s: %s", pc.run_dir, strerror(errno));
        fail();
    }
    return take_error();
}

it_status it_precision_end(void) {
    if (!pc.open) return IT_OK;
    atomic_store(&it__prec_on, false);
    bool bad = fclose(pc.log) != 0;
    bad |= fclose(pc.tsv) != 0;
    if (bad && !pc.err) {
        it_error(IT_ERR_IO, "--precision_check: closing the files in %s: %s", pc.run_dir, strerror(errno));
        fail();
    }
    it_status st = take_error();
    free_lists();
    pc.open = false;
    return st;
}

/* ---------------------------------------------------------------- one record */

static int next_index(const char *name, bool forward) {
    char key[200];
    snprintf(key, sizeof key, "%s_%s", name, forward ? "forward" : "backward");
    for (size_t i = 0; i < pc.ncounters; i++)
        if (!strcmp(pc.counters[i].key, key)) return pc.counters[i].n++;
    if (pc.ncounters == pc.capcounters) {
        size_t cap = pc.capcounters ? 2 * pc.capcounters : 64;
        prec_counter *c = realloc(pc.counters, cap * sizeof *c);
        if (!c) return -1;
        pc.counters = c;
        pc.capcounters = cap;
    }
    char *k = strdup(key);
    if (!k) return -1;
    pc.counters[pc.ncounters++] = (prec_counter){k, 1};
    return 0;
}

/* The tensor's values as float32 on the host (*raw: its own bytes, for the md5). */
static float *host_values(it_tensor *t, int64_t n, void **raw) {
    it_dtype dt = it_tensor_dtype(t);
    size_t es = it_dtype_size(dt);
    *raw = malloc(es * (size_t)(n ? n : 1));
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!*raw || !f) {
        free(*raw);
        free(f);
        *raw = NULL;
        it_error(IT_ERR_OOM, "--precision_check: out of host memory for %lld values", (long long)n);
        return NULL;
    }
    if (n && it_tensor_copy_to_host(t, *raw, es * (size_t)n)) {
        free(*raw);
        free(f);
        *raw = NULL;
        return NULL;
    }
    const uint8_t *r = *raw;
    for (int64_t i = 0; i < n; i++) {
        const void *e = r + (size_t)i * es;
        switch (dt) {
        case IT_DTYPE_FP32: f[i] = *(const float *)e; break;
        case IT_DTYPE_FP64: f[i] = (float)*(const double *)e; break;
        case IT_DTYPE_BF16: f[i] = it_bf16_to_fp32(*(const uint16_t *)e); break;
        case IT_DTYPE_FP16: f[i] = it_fp16_to_fp32(*(const uint16_t *)e); break;
        case IT_DTYPE_BOOL:
        case IT_DTYPE_U8: f[i] = *(const uint8_t *)e; break;
        case IT_DTYPE_I8: f[i] = *(const int8_t *)e; break;
        case IT_DTYPE_U16: f[i] = *(const uint16_t *)e; break;
        case IT_DTYPE_I16: f[i] = *(const int16_t *)e; break;
        case IT_DTYPE_U32: f[i] = (float)*(const uint32_t *)e; break;
        case IT_DTYPE_I32: f[i] = (float)*(const int32_t *)e; break;
        case IT_DTYPE_U64: f[i] = (float)*(const uint64_t *)e; break;
        case IT_DTYPE_I64: f[i] = (float)*(const int64_t *)e; break;
        default: f[i] = NAN; break;
        }
    }
    return f;
}

/* InfiniTrain's TensorStats: min/max/mean over the finite values (double sum). */
typedef struct prec_stats {
    float min, max, mean;
    int64_t nan, inf;
} prec_stats;

static prec_stats stats_of(const float *v, int64_t n) {
    prec_stats s = {0, 0, 0, 0, 0};
    if (!n) return s;
    s.min = 3.40282347e+38f;
    s.max = -3.40282347e+38f;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i])) {
            s.nan++;
            continue;
        }
        if (isinf(v[i])) {
            s.inf++;
            continue;
        }
        if (v[i] < s.min) s.min = v[i];
        if (v[i] > s.max) s.max = v[i];
        sum += v[i];
    }
    int64_t valid = n - s.nan - s.inf;
    s.mean = valid > 0 ? (float)(sum / (double)valid) : 0.0f;
    return s;
}

static void file_safe(char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '_' || *s == '-'))
            *s = '_';
}

/* kind: fwd_in, fwd_out, bwd_in, bwd_out (level 2: an op's), mod_fwd, mod_bwd (level 1: a
 * module's output and its gradient). */
static void record(const char *kind, const char *name, int tensor_index, it_tensor *t, int layer, uint64_t call) {
    if (pc.err || !t) return;
    bool forward = kind[0] == 'f' || !strcmp(kind, "mod_fwd");
    int ndim = it_tensor_ndim(t);
    const int64_t *shape = it_tensor_shape(t);
    int64_t n = it_tensor_numel(t);
    it_dtype dt = it_tensor_dtype(t);
    void *raw = NULL;
    float *v = host_values(t, n, &raw);
    if (!v) {
        it_error_context("--precision_check: copying %s of %s to the host: ", kind, name);
        fail();
        return;
    }
    char safe[160];
    snprintf(safe, sizeof safe, "%s", name);
    file_safe(safe);
    int idx = next_index(safe, forward);
    if (idx < 0) {
        free(v);
        free(raw);
        it_error(IT_ERR_OOM, "--precision_check: out of host memory");
        fail();
        return;
    }
    char base[200], sidx[16] = "";
    if (idx > 0) snprintf(sidx, sizeof sidx, "_%d", idx);
    snprintf(base, sizeof base, "%s%s_%s", safe, sidx, forward ? "forward" : "backward");
    char shp[IT_MAX_DIMS * 22 + 4];
    int sl = snprintf(shp, sizeof shp, "(");
    for (int i = 0; i < ndim; i++)
        sl += snprintf(shp + sl, sizeof shp - (size_t)sl, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(shp + sl, sizeof shp - (size_t)sl, ")");
    char file[260] = "-";
    if (pc.cfg.save_tensors) {
        if (!pc.step_dir_made) {
            if (mkdir_p(pc.step_dir)) {
                free(v);
                free(raw);
                fail();
                return;
            }
            pc.step_dir_made = true;
        }
        char path[PATH_MAX + 256];
        snprintf(file, sizeof file, "rank_%d/step_%06d/%s.npy", pc.rank, pc.step, base);
        snprintf(path, sizeof path, "%s/%s", pc.run_dir, file);
        if (it_npy_write_f32(path, ndim, shape, v)) {
            free(v);
            free(raw);
            fail();
            return;
        }
    }
    prec_stats s = stats_of(v, n);
    char md5[33] = "-";
    if (pc.cfg.format == IT_PRECISION_MD5) {
        if (pc.cfg.md5_tolerance > 0) {
            it_precision_quantize(v, v, (size_t)n, pc.cfg.md5_tolerance);
            it_md5_hex(v, sizeof(float) * (size_t)n, md5);
        } else {
            it_md5_hex(raw, it_dtype_size(dt) * (size_t)n, md5);
        }
    }
    /* InfiniTrain's context key, with the block's name when inside one */
    fprintf(pc.log, "[GAS-%d] [L-%d]", pc.gas, layer < 0 ? 0 : layer);
    if (layer >= 0) fprintf(pc.log, " transformer.h.%d", layer);
    fprintf(pc.log, " %s tensor[%d]: dtype=%s shape=%s ", base, tensor_index, it_dtype_name(dt), shp);
    if (pc.cfg.format == IT_PRECISION_MD5) {
        fprintf(pc.log, "md5=%s\n", md5);
    } else {
        fprintf(pc.log, "min=%g max=%g mean=%g [", (double)s.min, (double)s.max, (double)s.mean);
        for (int64_t i = 0; i < n && i < 6; i++) fprintf(pc.log, "%s%g", i ? ", " : "", (double)v[i]);
        fprintf(pc.log, "%s] [NaN:%lld Inf:%lld]%s\n", n > 6 ? ", ..." : "", (long long)s.nan, (long long)s.inf,
                s.nan || s.inf ? " <- ERROR" : "");
    }
    fprintf(pc.tsv, "%llu\t%d\t%d\t%d\t%llu\t%s\t%d\t%s\t%s\t%s\t%s\t%.9g\t%.9g\t%.9g\t%lld\t%lld\t%s\n",
            (unsigned long long)pc.seq, pc.step, pc.gas, layer, (unsigned long long)call, kind, tensor_index, name,
            file, it_dtype_name(dt), shp, (double)s.min, (double)s.max, (double)s.mean, (long long)s.nan,
            (long long)s.inf, md5);
    pc.seq++;
    free(v);
    free(raw);
}

/* ---------------------------------------------------------------- the hooks */

void it__prec_layer(int layer) { pc.layer = layer; }

void it__prec_module(it_tensor *t, int layer, const char *name) {
    if (!pc.in_step || pc.err || !t) return;
    char full[160];
    if (layer >= 0)
        snprintf(full, sizeof full, "transformer.h.%d%s%s", layer, *name ? "." : "", name);
    else
        snprintf(full, sizeof full, "%s", name);
    uint64_t call = pc.call++;
    record("mod_fwd", full, 0, t, layer, call);
    if (pc.nmods == pc.capmods) {
        size_t cap = pc.capmods ? 2 * pc.capmods : 64;
        prec_module *m = realloc(pc.mods, cap * sizeof *m);
        if (!m) {
            it_error(IT_ERR_OOM, "--precision_check: out of host memory");
            fail();
            return;
        }
        pc.mods = m;
        pc.capmods = cap;
    }
    prec_module *m = &pc.mods[pc.nmods++];
    m->t = t;
    m->layer = layer;
    snprintf(m->name, sizeof m->name, "%s", full);
}

void it__prec_node_forward(it_node *n) {
    if (!pc.in_step || pc.err || pc.cfg.level < 2) return;
    if (pc.nnodes == pc.capnodes) {
        size_t cap = pc.capnodes ? 2 * pc.capnodes : 256;
        prec_node *p = realloc(pc.nodes, cap * sizeof *p);
        if (!p) {
            it_error(IT_ERR_OOM, "--precision_check: out of host memory");
            fail();
            return;
        }
        pc.nodes = p;
        pc.capnodes = cap;
    }
    pc.nodes[pc.nnodes++] = (prec_node){n, pc.layer};
    pc.node_cursor = pc.nnodes;
    uint64_t call = pc.call++;
    for (int i = 0; i < n->n_in; i++) record("fwd_in", n->name, i, n->in[i], pc.layer, call);
    record("fwd_out", n->name, 0, n->out, pc.layer, call);
}

/* The layer n ran in (backward visits nodes newest first: search down from the cursor). */
static int node_layer(const it_node *n) {
    for (size_t k = pc.node_cursor; k-- > 0;)
        if (pc.nodes[k].n == n) {
            pc.node_cursor = k + 1;
            return pc.nodes[k].layer;
        }
    for (size_t k = pc.nnodes; k-- > pc.node_cursor;)
        if (pc.nodes[k].n == n) return pc.nodes[k].layer;
    return -1;
}

void it__prec_node_free(const it_node *n) {
    /* (usually the node whose backward just ran: the entry below the cursor) */
    if (pc.node_cursor > 0 && pc.node_cursor <= pc.nnodes && pc.nodes[pc.node_cursor - 1].n == n) {
        pc.nodes[pc.node_cursor - 1].n = NULL;
        return;
    }
    for (size_t k = pc.nnodes; k-- > 0;)
        if (pc.nodes[k].n == n) {
            pc.nodes[k].n = NULL;
            return;
        }
}

static _Thread_local uint64_t bwd_call;
static _Thread_local int bwd_layer;

void it__prec_node_backward_pre(it_node *n, it_tensor *dy) {
    if (!pc.in_step || pc.err) return;
    for (size_t k = pc.nmods; k-- > 0;) /* outer modules first: the reverse of forward */
        if (pc.mods[k].t == n->out) {
            record("mod_bwd", pc.mods[k].name, 0, dy, pc.mods[k].layer, pc.call++);
            pc.mods[k].t = NULL; /* recorded once: a later tensor at its address is not it */
        }
    if (pc.cfg.level < 2) return;
    bwd_layer = node_layer(n);
    bwd_call = pc.call++;
    record("bwd_in", n->name, 0, dy, bwd_layer, bwd_call);
}

void it__prec_node_backward_post(it_node *n) {
    if (!pc.in_step || pc.err || pc.cfg.level < 2) return;
    for (int i = 0; i < n->n_in; i++) {
        it_tensor *x = n->in[i];
        /* an input that needs no gradient, or a leaf whose lazily zeroed gradient this node left unwritten */
        if (!x || !x->requires_grad || !x->grad || x->grad_zero) continue;
        record("bwd_out", n->name, i, x->grad, bwd_layer, bwd_call);
    }
}
