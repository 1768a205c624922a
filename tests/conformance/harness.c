/* The conformance harness: operands and their storages, running a case on a target through
 * its runtime only, and comparing with the CPU reference (see conf.h for the model). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

const it_dtype conf_float_dtypes[4] = {IT_DTYPE_FP32, IT_DTYPE_FP64, IT_DTYPE_BF16, IT_DTYPE_FP16};

const char *conf_dtype_short(it_dtype dt) {
    static const char *names[IT_DTYPE_COUNT] = {"bool", "u8",  "i8",   "u16",  "i16",  "u32", "i32",
                                                "u64",  "i64", "bf16", "fp16", "fp32", "fp64"};
    return it_dtype_valid((int)dt) ? names[dt] : "invalid";
}

/* ---------------------------------------------------------------- PRNG (splitmix64) */

conf_rng conf_rng_seed(const char *label, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the label, then n */
    for (const char *p = label; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    conf_rng r = {h ^ (n * 0x9E3779B97F4A7C15ull)};
    return r;
}

uint64_t conf_rng_next(conf_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double conf_rng_uniform(conf_rng *r, double lo, double hi) {
    return lo + (hi - lo) * ((double)(conf_rng_next(r) >> 11) * 0x1.0p-53);
}

int64_t conf_rng_int(conf_rng *r, int64_t lo, int64_t hi_incl) {
    return lo + (int64_t)(conf_rng_next(r) % (uint64_t)(hi_incl - lo + 1));
}

/* ---------------------------------------------------------------- element access */

static bool is_float(it_dtype dt) {
    return dt == IT_DTYPE_FP32 || dt == IT_DTYPE_FP64 || dt == IT_DTYPE_BF16 || dt == IT_DTYPE_FP16;
}

double conf_load(it_dtype dt, const void *p) {
    switch (dt) {
    case IT_DTYPE_BOOL: return *(const uint8_t *)p != 0;
    case IT_DTYPE_U8: return *(const uint8_t *)p;
    case IT_DTYPE_I8: return *(const int8_t *)p;
    case IT_DTYPE_U16: return *(const uint16_t *)p;
    case IT_DTYPE_I16: return *(const int16_t *)p;
    case IT_DTYPE_U32: return *(const uint32_t *)p;
    case IT_DTYPE_I32: return *(const int32_t *)p;
    case IT_DTYPE_U64: return (double)*(const uint64_t *)p;
    case IT_DTYPE_I64: return (double)*(const int64_t *)p;
    case IT_DTYPE_BF16: return it_bf16_to_fp32(*(const uint16_t *)p);
    case IT_DTYPE_FP16: return it_fp16_to_fp32(*(const uint16_t *)p);
    case IT_DTYPE_FP32: return *(const float *)p;
    case IT_DTYPE_FP64: return *(const double *)p;
    }
    return NAN;
}

/* v as float without C's undefined out-of-range conversion: past FLT_MAX is Inf. */
static float to_float(double v) {
    if (isfinite(v) && fabs(v) > FLT_MAX) return v > 0 ? INFINITY : -INFINITY;
    return (float)v;
}

static void store_int(it_dtype dt, void *p, uint64_t u) {
    switch (dt) {
    case IT_DTYPE_BOOL: *(uint8_t *)p = u != 0; break;
    case IT_DTYPE_U8:
    case IT_DTYPE_I8: *(uint8_t *)p = (uint8_t)u; break;
    case IT_DTYPE_U16:
    case IT_DTYPE_I16: *(uint16_t *)p = (uint16_t)u; break;
    case IT_DTYPE_U32:
    case IT_DTYPE_I32: *(uint32_t *)p = (uint32_t)u; break;
    default: memcpy(p, &u, 8); break;
    }
}

void conf_store(it_dtype dt, void *p, double v) {
    switch (dt) {
    case IT_DTYPE_FP32: *(float *)p = to_float(v); return;
    case IT_DTYPE_FP64: *(double *)p = v; return;
    case IT_DTYPE_BF16: *(uint16_t *)p = it_fp32_to_bf16(to_float(v)); return;
    case IT_DTYPE_FP16: *(uint16_t *)p = it_fp32_to_fp16(to_float(v)); return;
    default: break;
    }
    /* integers: truncate toward zero, then keep the low bits (inputs only) */
    if (isnan(v)) v = 0;
    if (v >= 0x1p63) v = 0x1p63 - 1024;
    if (v < -0x1p63) v = -0x1p63;
    store_int(dt, p, (uint64_t)(int64_t)v);
}

/* ---------------------------------------------------------------- cases and operands */

void conf_case_init(conf_case *c, const char *dtype_label, const char *fmt, ...) {
    memset(c, 0, sizeof *c);
    snprintf(c->dtype_label, sizeof c->dtype_label, "%s", dtype_label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->label, sizeof c->label, fmt, ap);
    va_end(ap);
    c->cmp = CONF_CMP_BITS;
    c->why = "exact";
}

void conf_case_free(conf_case *c) {
    for (int i = 0; i < c->nops; i++) {
        free(c->ops[i].init);
        c->ops[i].init = NULL;
    }
    c->nops = 0;
}

/* Bounds on the normalized MSE, with their reasons. eps32 = 2^-24 = 6e-8 (unit roundoff),
 * eps64 = 2^-53 = 1.1e-16. NMSE is a mean squared *relative* error, so k ulp of relative
 * error on every element gives NMSE ~ (k * eps)^2. */
void conf_case_tol(conf_case *c, conf_tol cls, it_dtype dt) {
    if (cls == CONF_TOL_EXACT) {
        c->cmp = CONF_CMP_BITS;
        c->tol = 0;
        c->why = "exact: the contract fixes every output bit";
        return;
    }
    c->cmp = CONF_CMP_NMSE;
    if (dt == IT_DTYPE_BF16) {
        /* Computed in fp32 and rounded once: a last-bit difference in fp32 can flip that
         * rounding by one bf16 ulp, <= 2^-7 relative; on every element (2^-7)^2 = 6.1e-5. */
        c->tol = 1e-4;
        c->why = "bf16: fp32 compute, one rounding; one bf16 ulp flip (2^-7 rel) on every element = 6.1e-5";
        return;
    }
    if (dt == IT_DTYPE_FP16) {
        c->tol = 1e-6; /* as bf16 with fp16's ulp: (2^-10)^2 = 9.5e-7 */
        c->why = "fp16: fp32 compute, one rounding; one fp16 ulp flip (2^-10 rel) on every element = 9.5e-7";
        return;
    }
    bool f64 = dt == IT_DTYPE_FP64;
    if (cls == CONF_TOL_ELEM) {
        /* Each output is a few roundings of its own inputs; libm's exp/log/tanh and FMA
         * contraction may differ between implementations by a few ulp:
         * (4 * 6e-8)^2 = 5.8e-14 for fp32, (4 * 1.1e-16)^2 = 2e-31 for fp64. */
        c->tol = f64 ? 1e-26 : 1e-12;
        c->why = f64 ? "elementwise fp64: a few ulp per element (libm, FMA) = 2e-31; bound with margin"
                     : "elementwise fp32: a few ulp per element (libm, FMA): (4*6e-8)^2 = 5.8e-14";
        return;
    }
    /* Sums whose order the backend chooses (GEMM blocking, reduction trees, row statistics,
     * scatter-adds): a sequential fp32 sum of n terms carries ~sqrt(n) * eps relative error
     * (4e-6 at n = 4099 with growing partial sums), so NMSE ~1e-11 between two orders; fp64
     * the same with eps 1.1e-16 (~1e-27), bounded at 1e-20 for cancellation. */
    c->tol = f64 ? 1e-20 : 1e-10;
    c->why = f64 ? "fp64 sums in a backend-chosen order: ~sqrt(n)*1.1e-16 rel, bound 1e-20 for cancellation"
                 : "fp32 sums in a backend-chosen order: ~sqrt(n)*6e-8 rel (4e-6 at n=4099) -> NMSE ~1e-11";
}

int64_t conf_numel(const conf_operand *o) {
    int64_t n = 1;
    for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
    return n;
}

int64_t conf_view_offset(const conf_operand *o, int64_t i) {
    int64_t off = o->offset;
    for (int d = o->ndim - 1; d >= 0; d--) {
        off += (i % o->shape[d]) * o->strides[d];
        i /= o->shape[d];
    }
    return off;
}

static void poison(conf_operand *o) {
    size_t es = it_dtype_size(o->dtype);
    unsigned char pat[8];
    switch (o->dtype) {
    case IT_DTYPE_FP32: { /* quiet NaNs with a payload: an unwritten element fails the NaN check */
        uint32_t u = 0x7FC0DEADu;
        memcpy(pat, &u, 4);
        break;
    }
    case IT_DTYPE_FP64: {
        uint64_t u = 0x7FF8DEADBEEFDEADull;
        memcpy(pat, &u, 8);
        break;
    }
    case IT_DTYPE_FP16: {
        uint16_t u = 0x7E5A;
        memcpy(pat, &u, 2);
        break;
    }
    case IT_DTYPE_BF16: {
        uint16_t u = 0x7FDA;
        memcpy(pat, &u, 2);
        break;
    }
    default: memset(pat, 0x5A, sizeof pat); break;
    }
    for (int64_t i = 0; i < o->storage; i++) memcpy(o->init + (size_t)i * es, pat, es);
}

static conf_operand *add_raw(conf_case *c, const char *name, conf_role role) {
    if (c->nops >= CONF_MAX_OPS) {
        fprintf(stderr, "it-conformance: case %s has more than %d operands\n", c->label, CONF_MAX_OPS);
        abort(); /* a bug in the suite itself, not in a backend */
    }
    conf_operand *o = &c->ops[c->nops++];
    memset(o, 0, sizeof *o);
    o->name = name;
    o->role = role;
    o->alias = -1;
    return o;
}

conf_operand *conf_add(conf_case *c, const char *name, conf_role role, it_dtype dt, int ndim, const int64_t *shape,
                       conf_layout layout, unsigned bcast_mask) {
    conf_operand *o = add_raw(c, name, role);
    o->dtype = dt;
    o->ndim = ndim;
    for (int d = 0; d < ndim; d++) o->shape[d] = shape[d];
    int64_t n = conf_numel(o);
    if (layout == CONF_TRANSPOSED && ndim < 2) layout = CONF_CONTIG;
    int64_t st = 1;
    /* Strides as the core makes them: a size-0 dim counts as 1, so an empty tensor's strides
     * are never 0 where a kernel may check "no stride 0 on an output". */
#define EXT(x) ((x) > 0 ? (x) : 1)
    switch (layout) {
    case CONF_CONTIG:
    case CONF_OFFSET:
        for (int d = ndim - 1; d >= 0; d--) {
            o->strides[d] = st;
            st *= EXT(shape[d]);
        }
        o->offset = layout == CONF_OFFSET ? 5 : 0;
        break;
    case CONF_TRANSPOSED: {
        /* storage (..., C, R) contiguous, viewed as (..., R, C) */
        int64_t R = shape[ndim - 2], C = shape[ndim - 1];
        o->strides[ndim - 2] = 1;
        o->strides[ndim - 1] = EXT(R);
        st = EXT(R) * EXT(C);
        for (int d = ndim - 3; d >= 0; d--) {
            o->strides[d] = st;
            st *= EXT(shape[d]);
        }
        break;
    }
    case CONF_STEPPED:
        for (int d = ndim - 1; d >= 0; d--) {
            o->strides[d] = d == ndim - 1 ? 2 : o->strides[d + 1] * EXT(shape[d + 1]) + 3;
        }
        o->offset = 3;
        break;
    case CONF_BCAST:
        for (int d = ndim - 1; d >= 0; d--) {
            if (bcast_mask & (1u << d)) {
                o->strides[d] = 0;
            } else {
                o->strides[d] = st;
                st *= EXT(shape[d]);
            }
        }
        break;
    }
#undef EXT
    int64_t last = 0;
    for (int d = 0; d < ndim; d++) last += (shape[d] - 1) * o->strides[d];
    o->storage = n == 0 ? o->offset : o->offset + last + 1;
    size_t bytes = (size_t)o->storage * it_dtype_size(dt);
    o->init = calloc(bytes ? bytes : 1, 1);
    if (!o->init) {
        fprintf(stderr, "it-conformance: out of host memory (%zu bytes)\n", bytes);
        abort();
    }
    if (role == CONF_OUT) {
        poison(o);
    } else {
        conf_rng r = conf_rng_seed(c->label, (uint64_t)c->nops * 7919u + (uint64_t)dt);
        if (is_float(dt))
            conf_fill_uniform(o, &r, -1, 1);
        else
            conf_fill_bits(o, &r);
    }
    return o;
}

conf_operand *conf_add_absent(conf_case *c, const char *name) { return add_raw(c, name, CONF_ABSENT); }

conf_operand *conf_add_alias(conf_case *c, const char *name, int target) {
    conf_operand *o = add_raw(c, name, CONF_ALIAS);
    o->alias = target;
    return o;
}

void conf_fill_uniform(conf_operand *o, conf_rng *r, double lo, double hi) {
    size_t es = it_dtype_size(o->dtype);
    for (int64_t i = 0; i < o->storage; i++)
        conf_store(o->dtype, o->init + (size_t)i * es, conf_rng_uniform(r, lo, hi));
}

void conf_fill_bits(conf_operand *o, conf_rng *r) {
    size_t es = it_dtype_size(o->dtype);
    for (int64_t i = 0; i < o->storage; i++) {
        uint64_t u = conf_rng_next(r);
        if (o->dtype == IT_DTYPE_BOOL) u &= 1;
        memcpy(o->init + (size_t)i * es, &u, es); /* little-endian: the low bytes */
    }
}

void conf_set(conf_operand *o, int64_t i, double v) {
    if (i >= conf_numel(o)) return;
    conf_store(o->dtype, o->init + (size_t)conf_view_offset(o, i) * it_dtype_size(o->dtype), v);
}

void conf_set_i64(conf_operand *o, int64_t i, int64_t v) {
    if (i >= conf_numel(o)) return;
    store_int(o->dtype, o->init + (size_t)conf_view_offset(o, i) * it_dtype_size(o->dtype), (uint64_t)v);
}

void conf_set_raw(conf_operand *o, int64_t i, const void *bytes) {
    if (i >= conf_numel(o)) return;
    size_t es = it_dtype_size(o->dtype);
    memcpy(o->init + (size_t)conf_view_offset(o, i) * es, bytes, es);
}

it_tdesc conf_host_desc(conf_operand *o) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = o->init + (size_t)o->offset * it_dtype_size(o->dtype);
    d.dtype = o->dtype;
    d.ndim = o->ndim;
    for (int i = 0; i < o->ndim; i++) {
        d.shape[i] = o->shape[i];
        d.strides[i] = o->strides[i];
    }
    return d;
}

double conf_get(const conf_operand *o, const unsigned char *storage, int64_t i) {
    return conf_load(o->dtype, storage + (size_t)conf_view_offset(o, i) * it_dtype_size(o->dtype));
}

/* ---------------------------------------------------------------- running on a target */

void conf_exec_free(conf_exec *e) {
    for (int i = 0; i < CONF_MAX_OPS; i++) {
        free(e->out[i]);
        e->out[i] = NULL;
    }
}

/* First overwritten sentinel byte of [p, p + n), or -1. */
static long bad_sentinel(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != CONF_SENTINEL) return (long)i;
    return -1;
}

bool conf_exec_run(const conf_target *t, const it_kernels *k, conf_call_fn call, const conf_case *c, conf_exec *e) {
    memset(e, 0, sizeof *e);
    const it_runtime *rt = t->backend->runtime;
    const size_t SB = CONF_SENTINEL_BYTES;
    void *base[CONF_MAX_OPS] = {0};
    size_t total[CONF_MAX_OPS] = {0};
    it_tdesc desc[CONF_MAX_OPS];
    it_tdesc *dp[CONF_MAX_OPS] = {0};
    bool ok = true, called = false;
    it_status st = rt->set_device(t->index);
    if (st) {
        snprintf(e->msg, sizeof e->msg, "set_device(%d) failed: %s", t->index, it_last_error());
        return false;
    }
    /* Upload: sentinel, storage, sentinel. */
    for (int i = 0; i < c->nops && ok; i++) {
        const conf_operand *o = &c->ops[i];
        if (o->role == CONF_ABSENT || o->role == CONF_ALIAS) continue;
        size_t es = it_dtype_size(o->dtype), bytes = (size_t)o->storage * es;
        total[i] = bytes + 2 * SB;
        unsigned char *img = malloc(total[i]);
        if (!img) {
            snprintf(e->msg, sizeof e->msg, "out of host memory");
            ok = false;
            break;
        }
        memset(img, CONF_SENTINEL, total[i]);
        memcpy(img + SB, o->init, bytes);
        if ((st = rt->malloc(t->index, total[i], &base[i]))) {
            snprintf(e->msg, sizeof e->msg, "runtime malloc(%zu) for %s failed: %s", total[i], o->name,
                     it_last_error());
            base[i] = NULL;
            ok = false;
        } else if ((st = rt->memcpy(t->index, base[i], img, total[i], IT_MEMCPY_H2D))) {
            snprintf(e->msg, sizeof e->msg, "runtime memcpy H2D of %s failed: %s", o->name, it_last_error());
            ok = false;
        }
        free(img);
        if (!ok) break;
        memset(&desc[i], 0, sizeof desc[i]);
        desc[i].data = (char *)base[i] + SB + (size_t)o->offset * es;
        desc[i].dtype = o->dtype;
        desc[i].ndim = o->ndim;
        for (int d = 0; d < o->ndim; d++) {
            desc[i].shape[d] = o->shape[d];
            desc[i].strides[d] = o->strides[d];
        }
        dp[i] = &desc[i];
    }
    if (ok) {
        for (int i = 0; i < c->nops; i++)
            if (c->ops[i].role == CONF_ALIAS) {
                desc[i] = desc[c->ops[i].alias]; /* a separate descriptor for the same memory */
                dp[i] = &desc[i];
            }
        it_error_clear();
        called = true;
        e->st = call(k, t->stream, c, dp);
        if (e->st) snprintf(e->msg, sizeof e->msg, "returned %s: %s", it_status_name(e->st), it_last_error());
        /* The core passes descriptors and argument structs from its stack: a kernel that is
         * still queued when the call returns must have copied them. Clobber ours. */
        memset(desc, 0xEE, sizeof desc);
    }
    if (called && e->st) ok = false;
    /* Always drain the stream before reading or freeing anything. An asynchronous backend
     * reports what its kernel found (an unsupported dtype, bad shapes) here, as CUDA does:
     * after a successful launch that is the slot's status. */
    if ((st = rt->stream_synchronize(t->stream))) {
        if (called && !e->st) {
            e->st = st;
            snprintf(e->msg, sizeof e->msg, "queued, then stream_synchronize returned %s (the kernel's error): %s",
                     it_status_name(st), it_last_error());
            ok = false;
        } else if (ok) {
            snprintf(e->msg, sizeof e->msg, "stream_synchronize failed: %s", it_last_error());
            ok = false;
        }
    }
    for (int i = 0; i < c->nops && ok; i++) {
        const conf_operand *o = &c->ops[i];
        if (!base[i]) continue;
        unsigned char *img = malloc(total[i]);
        if (!img) {
            snprintf(e->msg, sizeof e->msg, "out of host memory");
            ok = false;
            break;
        }
        if ((st = rt->memcpy(t->index, img, base[i], total[i], IT_MEMCPY_D2H))) {
            snprintf(e->msg, sizeof e->msg, "runtime memcpy D2H of %s failed: %s", o->name, it_last_error());
            ok = false;
        } else {
            size_t bytes = total[i] - 2 * SB;
            long b = bad_sentinel(img, SB), a = bad_sentinel(img + SB + bytes, SB);
            if (b >= 0) {
                snprintf(e->msg, sizeof e->msg, "wrote before %s's storage: sentinel byte %ld (0x%02x)", o->name,
                         b - (long)SB, img[b]);
                ok = false;
            } else if (a >= 0) {
                snprintf(e->msg, sizeof e->msg, "wrote past the end of %s's storage: sentinel byte +%ld (0x%02x)",
                         o->name, a, img[SB + bytes + (size_t)a]);
                ok = false;
            } else {
                e->out[i] = malloc(bytes ? bytes : 1);
                if (e->out[i]) {
                    memcpy(e->out[i], img + SB, bytes);
                } else {
                    snprintf(e->msg, sizeof e->msg, "out of host memory");
                    ok = false;
                }
            }
        }
        free(img);
    }
    for (int i = 0; i < c->nops; i++)
        if (base[i] && (st = rt->free(t->index, base[i])) && ok) {
            snprintf(e->msg, sizeof e->msg, "runtime free of %s failed: %s", c->ops[i].name, it_last_error());
            ok = false;
        }
    if (!called) e->st = IT_OK;
    return ok;
}

/* ---------------------------------------------------------------- comparing */

static void index_str(const conf_operand *o, int64_t i, char *buf, size_t n) {
    int64_t idx[IT_MAX_DIMS];
    for (int d = o->ndim - 1; d >= 0; d--) {
        idx[d] = o->shape[d] ? i % o->shape[d] : 0;
        i = o->shape[d] ? i / o->shape[d] : 0;
    }
    size_t off = (size_t)snprintf(buf, n, "%s[", o->name);
    for (int d = 0; d < o->ndim && off < n; d++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static void value_str(it_dtype dt, const unsigned char *p, char *buf, size_t n) {
    uint64_t bits = 0;
    size_t es = it_dtype_size(dt);
    memcpy(&bits, p, es);
    if (is_float(dt))
        snprintf(buf, n, "%.9g (0x%0*llx)", conf_load(dt, p), (int)(2 * es), (unsigned long long)bits);
    else if (dt == IT_DTYPE_I8 || dt == IT_DTYPE_I16 || dt == IT_DTYPE_I32 || dt == IT_DTYPE_I64)
        snprintf(buf, n, "%lld (0x%0*llx)", (long long)conf_load(dt, p), (int)(2 * es), (unsigned long long)bits);
    else
        snprintf(buf, n, "%llu (0x%0*llx)", (unsigned long long)bits, (int)(2 * es), (unsigned long long)bits);
}

static bool nan_bits(it_dtype dt, const unsigned char *p, bool *neg) {
    if (!is_float(dt)) return false;
    double v = conf_load(dt, p);
    *neg = signbit(v) != 0;
    return isnan(v);
}

/* Compare one output operand. Returns false with *why set; *nmse gets the worst NMSE. */
static bool compare_output(const conf_case *c, const conf_operand *o, const unsigned char *dev,
                           const unsigned char *ref, double *nmse, char *why, size_t whyn) {
    size_t es = it_dtype_size(o->dtype);
    int64_t n = conf_numel(o);
    /* Storage elements outside the view must be untouched (the reference leaves them). */
    bool *inview = calloc((size_t)o->storage + 1, 1);
    if (!inview) {
        snprintf(why, whyn, "out of host memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) inview[conf_view_offset(o, i)] = true;
    for (int64_t s = 0; s < o->storage; s++)
        if (!inview[s] && memcmp(dev + (size_t)s * es, ref + (size_t)s * es, es) != 0) {
            snprintf(why, whyn, "%s: storage element %lld outside the view was written", o->name, (long long)s);
            free(inview);
            return false;
        }
    free(inview);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t off = (size_t)conf_view_offset(o, i) * es;
        const unsigned char *a = dev + off, *b = ref + off;
        bool bad = false;
        const char *kind = "differs";
        if (c->cmp == CONF_CMP_BITS || c->cmp == CONF_CMP_CAST) {
            if (memcmp(a, b, es) != 0) {
                bool na, nb, sa = false, sb = false;
                na = nan_bits(o->dtype, a, &sa);
                nb = nan_bits(o->dtype, b, &sb);
                bad = !(c->cmp == CONF_CMP_CAST && na && nb && sa == sb);
                kind = "differs bitwise";
            }
        } else {
            double x = conf_load(o->dtype, a), y = conf_load(o->dtype, b);
            if (isnan(x) || isnan(y)) {
                bad = !(isnan(x) && isnan(y));
                kind = "NaN position differs";
            } else if (isinf(x) || isinf(y)) {
                bad = x != y;
                kind = "Inf position or sign differs";
            } else {
                num += (x - y) * (x - y);
                den += y * y;
            }
        }
        if (bad) {
            char is[96], va[64], vb[64];
            index_str(o, i, is, sizeof is);
            value_str(o->dtype, a, va, sizeof va);
            value_str(o->dtype, b, vb, sizeof vb);
            snprintf(why, whyn, "%s %s: got %s, reference %s", is, kind, va, vb);
            return false;
        }
    }
    if (c->cmp == CONF_CMP_NMSE) {
        double e = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
        if (e > *nmse) *nmse = e;
        if (!(e <= c->tol)) {
            /* Name the worst element to start debugging from. */
            double worst = -1;
            int64_t wi = 0;
            for (int64_t i = 0; i < n; i++) {
                size_t off = (size_t)conf_view_offset(o, i) * es;
                double d = fabs(conf_load(o->dtype, dev + off) - conf_load(o->dtype, ref + off));
                if (d > worst) worst = d, wi = i;
            }
            char is[96], va[64], vb[64];
            size_t off = (size_t)conf_view_offset(o, wi) * es;
            index_str(o, wi, is, sizeof is);
            value_str(o->dtype, dev + off, va, sizeof va);
            value_str(o->dtype, ref + off, vb, sizeof vb);
            snprintf(why, whyn, "%s: nmse %.3g > %.3g (%s); worst %s: got %s, reference %s", o->name, e, c->tol, c->why,
                     is, va, vb);
            return false;
        }
    }
    return true;
}

void conf_line(const conf_ctx *ctx, const char *dtype, const char *label, const char *measure, const char *verdict) {
    printf("%-12s %-21s %-12s %-34s %-24s %s\n", ctx->dev.name, ctx->slot, dtype, label, measure, verdict);
    /* every failure is printed here: note its dtype once for the closing summary */
    conf_slot_stats *st = ctx->stats;
    if (st && !strncmp(verdict, "FAIL", 4) && strcmp(dtype, "-") != 0) {
        const char *p = st->fail_dtypes;
        size_t n = strlen(dtype);
        bool seen = false;
        while (!seen && (p = strstr(p, dtype)) != NULL) {
            seen = (p == st->fail_dtypes || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0');
            p += n;
        }
        size_t used = strlen(st->fail_dtypes);
        if (!seen && used + n + 3 < sizeof st->fail_dtypes)
            snprintf(st->fail_dtypes + used, sizeof st->fail_dtypes - used, "%s%s", used ? ", " : "", dtype);
    }
}

static void describe(const conf_case *c) {
    for (int i = 0; i < c->nops; i++) {
        const conf_operand *o = &c->ops[i];
        static const char *roles[] = {"in", "out", "inout", "absent", "alias"};
        printf("    %-8s %-6s", o->name, roles[o->role]);
        if (o->role == CONF_ABSENT) {
            printf(" NULL\n");
            continue;
        }
        if (o->role == CONF_ALIAS) {
            printf(" = %s\n", c->ops[o->alias].name);
            continue;
        }
        printf(" %-8s shape (", it_dtype_name(o->dtype));
        for (int d = 0; d < o->ndim; d++) printf("%s%lld", d ? "," : "", (long long)o->shape[d]);
        printf(") strides (");
        for (int d = 0; d < o->ndim; d++) printf("%s%lld", d ? "," : "", (long long)o->strides[d]);
        printf(") offset %lld storage %lld\n", (long long)o->offset, (long long)o->storage);
    }
    if (c->cmp == CONF_CMP_NMSE) printf("    bound %.3g: %s\n", c->tol, c->why);
}

conf_outcome conf_run(conf_ctx *ctx, conf_case *c) {
    conf_exec ref, dev;
    char measure[64] = "", why[1024] = "";
    conf_outcome out = CONF_PASS;
    bool ok_ref = conf_exec_run(&ctx->cpu, it_cpu_kernels(), ctx->call, c, &ref);
    if (!ok_ref) {
        if (ref.st == IT_ERR_UNSUPPORTED) {
            conf_line(ctx, c->dtype_label, c->label, "-", "skip: no cpu reference for this dtype");
            ctx->noref++;
            if (ctx->stats) ctx->stats->noref++;
            conf_exec_free(&ref);
            return CONF_SKIP_NOREF;
        }
        conf_line(ctx, c->dtype_label, c->label, "-", "FAIL");
        printf("    -> the cpu reference failed (a bug in the suite or the cpu backend): %s\n", ref.msg);
        ctx->fail++;
        if (ctx->stats) ctx->stats->fail++;
        conf_exec_free(&ref);
        return CONF_FAIL;
    }
    bool ok_dev = conf_exec_run(&ctx->dev, conf_kernels(ctx->dev.backend), ctx->call, c, &dev);
    if (!ok_dev && dev.st == IT_ERR_UNSUPPORTED) {
        out = CONF_SKIP_UNSUPPORTED;
        snprintf(measure, sizeof measure, "-");
        snprintf(why, sizeof why, "%s", dev.msg);
    } else if (!ok_dev) {
        out = CONF_FAIL;
        snprintf(measure, sizeof measure, "-");
        snprintf(why, sizeof why, "%s", dev.msg);
    } else {
        double nmse = 0;
        for (int i = 0; i < c->nops && out == CONF_PASS; i++) {
            const conf_operand *o = &c->ops[i];
            size_t bytes = (size_t)o->storage * it_dtype_size(o->dtype);
            if (o->role == CONF_IN) {
                if (memcmp(dev.out[i], o->init, bytes) != 0) {
                    size_t es = it_dtype_size(o->dtype), b = 0;
                    while (b < bytes && dev.out[i][b] == o->init[b]) b++;
                    snprintf(why, sizeof why, "input %s was modified (storage element %zu)", o->name, b / es);
                    out = CONF_FAIL;
                }
            } else if (o->role == CONF_OUT || o->role == CONF_INOUT) {
                if (!compare_output(c, o, dev.out[i], ref.out[i], &nmse, why, sizeof why)) out = CONF_FAIL;
            }
        }
        if (c->cmp == CONF_CMP_NMSE)
            snprintf(measure, sizeof measure, "nmse=%.2e (%.0e)", nmse, c->tol);
        else
            snprintf(measure, sizeof measure, c->cmp == CONF_CMP_CAST ? "bitwise(nan=nan)" : "bitwise");
    }
    char verdict[sizeof why + 32];
    /* a skip is the backend declining the case: its own message says why */
    if (out == CONF_SKIP_UNSUPPORTED)
        snprintf(verdict, sizeof verdict, "skip: declined: %s", why[0] ? why : "(the backend gave no message)");
    conf_line(ctx, c->dtype_label, c->label, measure, out == CONF_PASS ? "OK" : out == CONF_FAIL ? "FAIL" : verdict);
    if (out == CONF_FAIL) printf("    -> %s\n", why);
    if (ctx->verbose || out == CONF_FAIL) describe(c);
    switch (out) {
    case CONF_PASS: ctx->pass++; break;
    case CONF_FAIL: ctx->fail++; break;
    default: ctx->skip++; break;
    }
    if (ctx->stats) {
        if (out == CONF_PASS)
            ctx->stats->pass++;
        else if (out == CONF_FAIL)
            ctx->stats->fail++;
        else
            ctx->stats->skip++;
    }
    conf_exec_free(&ref);
    conf_exec_free(&dev);
    return out;
}
