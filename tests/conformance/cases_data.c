/* Cases for the data-movement slots: cast, fill, copy_strided, embedding_fwd/bwd.
 *
 * cast, fill, copy_strided and embedding_fwd are exact: the contract fixes every output bit
 * (cast's rounding and saturation rules; a copy and a row gather move bits). The one
 * freedom is a NaN's payload under cast: the contract keeps NaN quiet and its sign only, so
 * two NaNs of the same sign compare equal there (and only there). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "conf.h"

/* ---------------------------------------------------------------- cast */

it_status conf_call_cast(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->cast(s, d[0], d[1]);
}

/* Floating edge values: zeros, halves (truncation), each integer type's range ends and one
 * past them (saturation), fp16's largest finite / rounding-to-Inf boundary, fp32 and fp16
 * subnormals, huge values, NaN of both signs and infinities. */
/* clang-format off */
static const double float_edges[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.99999994, -0.99999994, 1.5, -1.5, 2.5, -2.5,
    127.0, 127.9, 128.0, -128.0, -128.9, -129.0, 255.0, 255.9, 256.0,
    32767.0, 32768.0, -32768.0, -32769.0, 65504.0, 65519.0, 65520.0, 65535.0, 65536.0,
    2147483647.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967295.0, 4294967296.0,
    16777217.0, 9007199254740993.0, 0x1p63, -0x1p63, 0x1p64,
    1e30, -1e30, 3.4028234663852886e38, 1e300, -1e300,
    1e-40, -1e-40, 6e-8, 1e-310, 0.1, 1.0 / 3.0,
    NAN, -NAN, INFINITY, -INFINITY,
    /* just above a bf16 / fp16 rounding tie by less than fp32 keeps: rounding through fp32
     * first lands on the tie and rounds to even, the wrong way */
    1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-11 + 0x1p-40,
};
/* clang-format on */

/* Integer edge values (their low bits land in the source type): every type's min, max and
 * the neighbours that wrap or change sign when narrowed, 2^24 + 1 and 2^53 + 1 (first odd
 * integers fp32 / fp64 cannot hold: round to even). */
/* clang-format off */
static const int64_t int_edges[] = {
    0, 1, -1, 2, -2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535, 65536,
    2147483647, 2147483648LL, -2147483647LL - 1, 4294967295LL, 4294967296LL, 16777217, 16777219,
    9007199254740993LL, INT64_MAX, INT64_MIN, INT64_MIN + 1, 65504, 65520, 1000000007, -1000000007,
    /* 2^60 + 2^36 + 1 and 2^60 + 2^52 + 1: above an fp32 / bf16 tie by less than a double (or
     * fp32) keeps, so int64 -> fp32 / bf16 through a wider float first rounds the wrong way */
    1152921573326323713LL, 1157425104234217473LL,
};
/* clang-format on */

/* Source contents: random bits everywhere (bool: 0/1, the only bool values the contract
 * defines), the edge values on the first view elements. */
static void cast_source(conf_operand *o, conf_rng *r) {
    conf_fill_bits(o, r);
    int64_t n = conf_numel(o), i = 0;
    bool f = o->dtype == IT_DTYPE_FP32 || o->dtype == IT_DTYPE_FP64 || o->dtype == IT_DTYPE_BF16 ||
             o->dtype == IT_DTYPE_FP16;
    if (o->dtype == IT_DTYPE_BOOL) return;
    if (f)
        for (size_t e = 0; e < sizeof float_edges / sizeof float_edges[0] && i < n; e++)
            conf_set(o, i++, float_edges[e]);
    else
        for (size_t e = 0; e < sizeof int_edges / sizeof int_edges[0] && i < n; e++) conf_set_i64(o, i++, int_edges[e]);
}

void conf_cases_cast(conf_ctx *ctx) {
    for (int s = 0; s < IT_DTYPE_COUNT; s++)
        for (int t = 0; t < IT_DTYPE_COUNT; t++) {
            char dl[32];
            snprintf(dl, sizeof dl, "%s->%s", conf_dtype_short((it_dtype)s), conf_dtype_short((it_dtype)t));
            struct {
                const char *label;
                int ndim;
                int64_t shape[2];
                conf_layout ls, ld;
                unsigned bcast;
            } shapes[] = {
                {"96 edge values", 1, {96, 0}, CONF_CONTIG, CONF_CONTIG, 0},
                {"7x13 src^T dst stepped", 2, {7, 13}, CONF_TRANSPOSED, CONF_STEPPED, 0},
                {"4x5 src bcast(0,1)", 2, {4, 5}, CONF_BCAST, CONF_CONTIG, 1},
                {"0x5", 2, {0, 5}, CONF_CONTIG, CONF_CONTIG, 0},
            };
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                conf_case c;
                conf_case_init(&c, dl, "%s", shapes[k].label);
                conf_case_tol(&c, CONF_TOL_EXACT, (it_dtype)t);
                c.cmp = CONF_CMP_CAST;
                conf_operand *src = conf_add(&c, "src", CONF_IN, (it_dtype)s, shapes[k].ndim, shapes[k].shape,
                                             shapes[k].ls, shapes[k].bcast);
                conf_add(&c, "dst", CONF_OUT, (it_dtype)t, shapes[k].ndim, shapes[k].shape, shapes[k].ld, 0);
                conf_rng r = conf_rng_seed(c.label, (uint64_t)(s * 13 + t));
                cast_source(src, &r);
                conf_run(ctx, &c);
                conf_case_free(&c);
            }
        }
}

/* ---------------------------------------------------------------- fill */

it_status conf_call_fill(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    return k->fill(s, d[0], c->value);
}

void conf_cases_fill(conf_ctx *ctx) {
    const struct {
        const char *label;
        it_scalar v;
    } values[] = {
        {"i64:min", {IT_SCALAR_I64, {.i64 = INT64_MIN}}},
        {"i64:max", {IT_SCALAR_I64, {.i64 = INT64_MAX}}},
        {"i64:-1", {IT_SCALAR_I64, {.i64 = -1}}},
        {"i64:0", {IT_SCALAR_I64, {.i64 = 0}}},
        {"i64:1", {IT_SCALAR_I64, {.i64 = 1}}},
        {"i64:-129", {IT_SCALAR_I64, {.i64 = -129}}},
        {"i64:65537", {IT_SCALAR_I64, {.i64 = 65537}}},
        {"i64:2^31", {IT_SCALAR_I64, {.i64 = 2147483648LL}}},
        {"i64:2^53+1", {IT_SCALAR_I64, {.i64 = 9007199254740993LL}}},
        {"i64:16777217", {IT_SCALAR_I64, {.i64 = 16777217}}},
        {"u64:max", {IT_SCALAR_U64, {.u64 = UINT64_MAX}}},
        {"u64:2^63", {IT_SCALAR_U64, {.u64 = 1ull << 63}}},
        {"u64:2^32-1", {IT_SCALAR_U64, {.u64 = 4294967295ull}}},
        {"f64:nan", {IT_SCALAR_F64, {.f64 = NAN}}},
        {"f64:-nan", {IT_SCALAR_F64, {.f64 = -NAN}}},
        {"f64:inf", {IT_SCALAR_F64, {.f64 = INFINITY}}},
        {"f64:-inf", {IT_SCALAR_F64, {.f64 = -INFINITY}}},
        {"f64:-0", {IT_SCALAR_F64, {.f64 = -0.0}}},
        {"f64:-2.5", {IT_SCALAR_F64, {.f64 = -2.5}}},
        {"f64:0.1", {IT_SCALAR_F64, {.f64 = 0.1}}},
        {"f64:65520", {IT_SCALAR_F64, {.f64 = 65520.0}}},
        {"f64:1e300", {IT_SCALAR_F64, {.f64 = 1e300}}},
        {"f64:-1e300", {IT_SCALAR_F64, {.f64 = -1e300}}},
        {"f64:1e-40", {IT_SCALAR_F64, {.f64 = 1e-40}}},
        {"f64:2^63", {IT_SCALAR_F64, {.f64 = 0x1p63}}},
        {"f64:-300.7", {IT_SCALAR_F64, {.f64 = -300.7}}},
        /* double-rounding traps (see float_edges / int_edges above) */
        {"f64:1+2^-8+2^-30", {IT_SCALAR_F64, {.f64 = 1.0 + 0x1p-8 + 0x1p-30}}},
        {"f64:1+2^-11+2^-40", {IT_SCALAR_F64, {.f64 = 1.0 + 0x1p-11 + 0x1p-40}}},
        {"i64:2^60+2^36+1", {IT_SCALAR_I64, {.i64 = 1152921573326323713LL}}},
        {"i64:2^60+2^52+1", {IT_SCALAR_I64, {.i64 = 1157425104234217473LL}}},
    };
    const size_t nv = sizeof values / sizeof values[0];
    for (int t = 0; t < IT_DTYPE_COUNT; t++) {
        /* every value on a contiguous run, two values on the other layouts */
        for (size_t v = 0; v < nv; v++) {
            conf_case c;
            int64_t shape[1] = {37};
            conf_case_init(&c, conf_dtype_short((it_dtype)t), "37 value %s", values[v].label);
            conf_case_tol(&c, CONF_TOL_EXACT, (it_dtype)t);
            c.cmp = CONF_CMP_CAST;
            c.value = values[v].v;
            conf_add(&c, "dst", CONF_OUT, (it_dtype)t, 1, shape, CONF_CONTIG, 0);
            conf_run(ctx, &c);
            conf_case_free(&c);
        }
        const struct {
            const char *label;
            int ndim;
            int64_t shape[2];
            conf_layout l;
        } shapes[] = {
            {"7x13 stepped", 2, {7, 13}, CONF_STEPPED},
            {"7x13 transposed", 2, {7, 13}, CONF_TRANSPOSED},
            {"0x5", 2, {0, 5}, CONF_CONTIG},
            {"scalar (ndim 0)", 0, {0, 0}, CONF_CONTIG},
        };
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (size_t v = 0; v < 2; v++) {
                const char *want = v == 0 ? "i64:-1" : "f64:-2.5";
                size_t vi = 0;
                while (strcmp(values[vi].label, want) != 0) vi++;
                conf_case c;
                conf_case_init(&c, conf_dtype_short((it_dtype)t), "%s value %s", shapes[k].label, values[vi].label);
                conf_case_tol(&c, CONF_TOL_EXACT, (it_dtype)t);
                c.cmp = CONF_CMP_CAST;
                c.value = values[vi].v;
                conf_add(&c, "dst", CONF_OUT, (it_dtype)t, shapes[k].ndim, shapes[k].shape, shapes[k].l, 0);
                conf_run(ctx, &c);
                conf_case_free(&c);
            }
    }
}

/* ---------------------------------------------------------------- copy_strided */

it_status conf_call_copy_strided(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->copy_strided(s, d[0], d[1]);
}

void conf_cases_copy_strided(conf_ctx *ctx) {
    const struct {
        const char *label;
        int ndim;
        int64_t shape[3];
        conf_layout ls, ld;
        unsigned bcast;
    } shapes[] = {
        {"7x13", 2, {7, 13, 0}, CONF_CONTIG, CONF_CONTIG, 0},
        {"7x13 src^T", 2, {7, 13, 0}, CONF_TRANSPOSED, CONF_CONTIG, 0},
        {"7x13 dst stepped", 2, {7, 13, 0}, CONF_CONTIG, CONF_STEPPED, 0},
        {"3x4x5 src^T dst^T", 3, {3, 4, 5}, CONF_TRANSPOSED, CONF_TRANSPOSED, 0},
        {"4x5 src bcast(1,0)", 2, {4, 5, 0}, CONF_BCAST, CONF_CONTIG, 2},
        {"4099 offset", 1, {4099, 0, 0}, CONF_OFFSET, CONF_OFFSET, 0},
        {"1x1", 2, {1, 1, 0}, CONF_CONTIG, CONF_CONTIG, 0},
        {"0x7", 2, {0, 7, 0}, CONF_CONTIG, CONF_CONTIG, 0},
        {"scalar (ndim 0)", 0, {0, 0, 0}, CONF_CONTIG, CONF_CONTIG, 0},
    };
    for (int t = 0; t < IT_DTYPE_COUNT; t++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            conf_case c;
            conf_case_init(&c, conf_dtype_short((it_dtype)t), "%s", shapes[k].label);
            conf_case_tol(&c, CONF_TOL_EXACT, (it_dtype)t); /* a copy keeps every bit, NaN payloads too */
            conf_operand *src = conf_add(&c, "src", CONF_IN, (it_dtype)t, shapes[k].ndim, shapes[k].shape, shapes[k].ls,
                                         shapes[k].bcast);
            conf_rng r = conf_rng_seed(c.label, (uint64_t)t);
            conf_fill_bits(src, &r);
            conf_add(&c, "dst", CONF_OUT, (it_dtype)t, shapes[k].ndim, shapes[k].shape, shapes[k].ld, 0);
            conf_run(ctx, &c);
            conf_case_free(&c);
        }
}

/* ---------------------------------------------------------------- embedding */

it_status conf_call_embedding_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->embedding_fwd(s, d[0], d[1], d[2]);
}

it_status conf_call_embedding_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    (void)c;
    return k->embedding_bwd(s, d[0], d[1], d[2]);
}

typedef struct emb_shape {
    const char *label;
    int64_t N, V, C;
    conf_layout lidx, ltab, lrows; /* idx; weight / dweight; out / dout */
    int idx_mode;                  /* 0 random, 1 all the same row (heavy accumulation) */
} emb_shape;

static const emb_shape emb_shapes[] = {
    {"N7 V13 C5", 7, 13, 5, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
    {"N9 V3 C4 repeats", 9, 3, 4, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
    {"N7 V13 C5 idx stepped tab^T", 7, 13, 5, CONF_STEPPED, CONF_TRANSPOSED, CONF_CONTIG, 0},
    {"N64 V1 C3 one row", 64, 1, 3, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 1},
    {"N3 V5 C4099", 3, 5, 4099, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
    {"N1 V1 C1", 1, 1, 1, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
    {"N0 V4 C3", 0, 4, 3, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
    {"N4 V4 C0", 4, 4, 0, CONF_CONTIG, CONF_CONTIG, CONF_CONTIG, 0},
};

static void emb_indices(conf_operand *idx, const emb_shape *e, const char *label) {
    conf_rng r = conf_rng_seed(label, 17);
    for (int64_t n = 0; n < e->N; n++) conf_set_i64(idx, n, e->idx_mode ? 0 : conf_rng_int(&r, 0, e->V - 1));
}

static void emb_cases(conf_ctx *ctx, bool bwd) {
    const it_dtype idt[2] = {IT_DTYPE_I32, IT_DTYPE_I64};
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (int j = 0; j < 2; j++) {
            bool stop = false;
            char dl[32];
            snprintf(dl, sizeof dl, "%s/idx=%s", conf_dtype_short(dt), conf_dtype_short(idt[j]));
            for (size_t k = 0; k < sizeof emb_shapes / sizeof emb_shapes[0] && !stop; k++) {
                const emb_shape *e = &emb_shapes[k];
                conf_case c;
                conf_case_init(&c, dl, "%s", e->label);
                int64_t ns[1] = {e->N}, tab[2] = {e->V, e->C}, rows[2] = {e->N, e->C};
                conf_operand *idx = conf_add(&c, "idx", CONF_IN, idt[j], 1, ns, e->lidx, 0);
                emb_indices(idx, e, c.label);
                if (!bwd) {
                    /* A row gather moves bits: exact, NaN and Inf rows included. */
                    conf_case_tol(&c, CONF_TOL_EXACT, dt);
                    conf_operand *w = conf_add(&c, "weight", CONF_IN, dt, 2, tab, e->ltab, 0);
                    conf_set(w, 0, NAN);
                    conf_set(w, 1, INFINITY);
                    conf_set(w, 2, -0.0);
                    conf_add(&c, "out", CONF_OUT, dt, 2, rows, e->lrows, 0);
                } else {
                    /* dweight += rows in "deterministic order": the order is the backend's,
                     * duplicates are summed in it. */
                    conf_case_tol(&c, CONF_TOL_SUM, dt);
                    conf_add(&c, "dout", CONF_IN, dt, 2, rows, e->lrows == CONF_CONTIG ? e->ltab : e->lrows, 0);
                    conf_add(&c, "dweight", CONF_INOUT, dt, 2, tab, CONF_CONTIG, 0);
                }
                stop = conf_run(ctx, &c) == CONF_SKIP_NOREF;
                conf_case_free(&c);
            }
        }
    }
}

void conf_cases_embedding_fwd(conf_ctx *ctx) { emb_cases(ctx, false); }
void conf_cases_embedding_bwd(conf_ctx *ctx) { emb_cases(ctx, true); }
