/* Host-side logic of the MLU backend, tested on every build machine (no SDK, no device):
 * the dtype map, the 13x13 cast plan (every pair has a chain of known CNNL casts and byte
 * moves, never HALF <-> BFLOAT16, and each plan marked exact reproduces the CPU cast bit for
 * bit when its steps are emulated with CPU semantics), descriptor narrowing, softmax's 3-D
 * rule, the planning of softmax (scale, causal), rope, topk and embedding_bwd, workspace
 * layout and sizing, the elementwise / reduce / cross-entropy / optimizer planning (host_ew.c)
 * and the BANG kernels' scalar math (bang/it_bang_math.h) checked bit for bit against the CPU
 * backend, error text, the library search, and loading the plugin here:
 * it_device_parse("mlu") must fail with one message naming the libraries and paths.
 *
 * The backend's source files are compiled into this test directly. */
#include <dlfcn.h>
#include <stdlib.h>

#include "infinitrain/tensor.h"
#include "it_test.h"
#include "mlu/host.c"
#include "mlu/host_ew.c"
#include "mlu/loader.c"

static void test_dtype_map(void) {
    int seen[64] = {0};
    for (int t = 0; t < IT_DTYPE_COUNT; t++) {
        int c = mlu_cnnl_dtype((it_dtype)t);
        CHECK_MSG(c != MLU_CNNL_DTYPE_INVALID && c < 64, "dtype %s", it_dtype_name((it_dtype)t));
        CHECK_MSG(!seen[c]++, "dtype %s maps to a taken CNNL dtype", it_dtype_name((it_dtype)t));
        CHECK(strncmp(mlu_cnnl_dtype_name(c), "CNNL_DTYPE_", 11) == 0);
    }
    CHECK(mlu_cnnl_dtype(IT_DTYPE_FP16) == 1 && mlu_cnnl_dtype(IT_DTYPE_FP32) == 2); /* public binding */
    CHECK(strcmp(mlu_cnnl_dtype_name(mlu_cnnl_dtype(IT_DTYPE_BF16)), "CNNL_DTYPE_BFLOAT16") == 0);
}

/* Emulate one step on host memory with CPU semantics: what the plan assumes of each call. */
static void emulate(const mlu_cast_step *s, int64_t n, const void *in, void *out) {
    size_t wi = it_dtype_size(s->from), wo = it_dtype_size(s->to);
    const unsigned char *a = in;
    unsigned char *b = out;
    switch (s->kind) {
    case MLU_STEP_REINTERPRET: memmove(out, in, (size_t)n * wi); break;
    case MLU_STEP_LOW:
        for (int64_t i = 0; i < n; i++) memcpy(b + i * wo, a + i * wi, wo);
        break;
    case MLU_STEP_ZEXT:
        memset(out, 0, (size_t)n * wo);
        for (int64_t i = 0; i < n; i++) memcpy(b + i * wo, a + i * wi, wi);
        break;
    case MLU_STEP_CNNL: {
        if (s->from == IT_DTYPE_I32 && s->to == IT_DTYPE_FP32) {
            /* cnnl.h: CNNL_CAST_INT32_TO_FLOAT rounds toward zero, unlike the CPU's cast */
            for (int64_t i = 0; i < n; i++) {
                int32_t v;
                memcpy(&v, a + i * 4, 4);
                float f = (float)v;
                if ((double)f - (double)v > 0 && v > 0) f = nextafterf(f, 0.0f);
                if ((double)f - (double)v < 0 && v < 0) f = nextafterf(f, 0.0f);
                memcpy(b + i * 4, &f, 4);
            }
            break;
        }
        it_tdesc x = {0}, y = {0};
        x.data = (void *)in, x.dtype = s->from, x.ndim = 1, x.shape[0] = n, x.strides[0] = 1;
        y = x, y.data = out, y.dtype = s->to;
        it_cpu_kernels()->cast(NULL, &x, &y);
        break;
    }
    }
}

static bool same_elem(it_dtype dt, const unsigned char *a, const unsigned char *b) {
    size_t w = it_dtype_size(dt);
    if (memcmp(a, b, w) == 0) return true;
    if (dt == IT_DTYPE_FP32) {
        float x, y;
        memcpy(&x, a, 4), memcpy(&y, b, 4);
        return x != x && y != y;
    }
    if (dt == IT_DTYPE_FP64) {
        double x, y;
        memcpy(&x, a, 8), memcpy(&y, b, 8);
        return x != x && y != y;
    }
    if (dt == IT_DTYPE_FP16 || dt == IT_DTYPE_BF16) {
        uint16_t x, y;
        memcpy(&x, a, 2), memcpy(&y, b, 2);
        float fx = dt == IT_DTYPE_FP16 ? it_fp16_to_fp32(x) : it_bf16_to_fp32(x);
        float fy = dt == IT_DTYPE_FP16 ? it_fp16_to_fp32(y) : it_bf16_to_fp32(y);
        return fx != fx && fy != fy;
    }
    return false;
}

#define NV 48
static void test_cast_plans(void) {
    /* edge values as fp64 and raw int64, converted into each source dtype by the CPU cast */
    static const double f[] = {0.0,        -0.0,         0.5,          -0.5,         1.0,
                               -1.0,       1.5,          127.0,        128.0,        255.0,
                               256.0,      -129.0,       32767.0,      65535.0,      65536.0,
                               16777217.0, 2147483647.0, 2147483648.0, 4294967295.0, -2147483649.0,
                               1e30,       -1e30,        3.4e38,       1e-40,        9007199254740993.0,
                               0.1,        1.0 / 3.0,    70000.5};
    static const int64_t k[] = {0,
                                1,
                                -1,
                                255,
                                256,
                                -128,
                                65535,
                                65536,
                                INT32_MAX,
                                INT32_MIN,
                                4294967295LL,
                                4294967296LL,
                                INT64_MAX,
                                INT64_MIN,
                                16777217,
                                123456789012345LL,
                                -70000,
                                0x100000001LL,
                                0x8000,
                                0x80000000LL};
    int exact = 0, inexact = 0;
    for (int s = 0; s < IT_DTYPE_COUNT; s++) {
        /* source values: the float edges and the integer edges, each cast into dtype s */
        unsigned char src[NV * 8];
        {
            double fv[NV];
            int64_t iv[NV];
            for (int i = 0; i < NV; i++) fv[i] = f[i % (int)(sizeof f / sizeof f[0])];
            for (int i = 0; i < NV; i++) iv[i] = k[i % (int)(sizeof k / sizeof k[0])];
            it_tdesc x = {0}, y = {0};
            x.ndim = 1, x.shape[0] = NV / 2, x.strides[0] = 1;
            y = x, y.dtype = (it_dtype)s;
            x.data = fv, x.dtype = IT_DTYPE_FP64, y.data = src;
            it_cpu_kernels()->cast(NULL, &x, &y);
            x.data = iv, x.dtype = IT_DTYPE_I64, y.data = src + (NV / 2) * it_dtype_size((it_dtype)s);
            it_cpu_kernels()->cast(NULL, &x, &y);
        }
        for (int d = 0; d < IT_DTYPE_COUNT; d++) {
            mlu_cast_plan p;
            it_status st = mlu_cast_plan_for((it_dtype)s, (it_dtype)d, &p);
            CHECK_MSG(st == IT_OK, "%s -> %s has no plan: %s", it_dtype_name((it_dtype)s), it_dtype_name((it_dtype)d),
                      it_last_error());
            if (st) continue;
            CHECK(p.nsteps >= 1 && p.nsteps <= MLU_CAST_MAX_STEPS);
            CHECK(p.steps[0].from == (it_dtype)s && p.steps[p.nsteps - 1].to == (it_dtype)d);
            CHECK(p.exact == (p.note == NULL));
            for (int i = 0; i < p.nsteps; i++) {
                const mlu_cast_step *q = &p.steps[i];
                if (i) CHECK(q->from == p.steps[i - 1].to);
                if (q->kind == MLU_STEP_CNNL) {
                    char name[48];
                    CHECK_MSG(mlu_cast_direct(q->from, q->to), "%s -> %s uses %s, not a known CNNL cast",
                              it_dtype_name((it_dtype)s), it_dtype_name((it_dtype)d),
                              mlu_cast_enum_name(q->from, q->to, name, sizeof name));
                    bool hb = (q->from == IT_DTYPE_FP16 && q->to == IT_DTYPE_BF16) ||
                              (q->from == IT_DTYPE_BF16 && q->to == IT_DTYPE_FP16);
                    CHECK_MSG(!hb, "%s -> %s casts HALF <-> BFLOAT16 directly", it_dtype_name((it_dtype)s),
                              it_dtype_name((it_dtype)d));
                } else if (q->kind == MLU_STEP_LOW) {
                    CHECK(it_dtype_size(q->to) < it_dtype_size(q->from));
                } else if (q->kind == MLU_STEP_ZEXT) {
                    CHECK(it_dtype_size(q->to) > it_dtype_size(q->from));
                    CHECK(q->from == IT_DTYPE_U8 || q->from == IT_DTYPE_U16 || q->from == IT_DTYPE_U32);
                } else {
                    CHECK(it_dtype_size(q->to) == it_dtype_size(q->from));
                }
            }
            if (!p.exact) {
                inexact++;
                continue;
            }
            exact++;
            /* an exact plan, emulated step by step, equals the CPU's one cast */
            unsigned char a[NV * 8], b[NV * 8], ref[NV * 8];
            memcpy(a, src, sizeof a);
            for (int i = 0; i < p.nsteps; i++) {
                emulate(&p.steps[i], NV, a, b);
                memcpy(a, b, sizeof a);
            }
            it_tdesc x = {0}, y = {0};
            x.data = src, x.dtype = (it_dtype)s, x.ndim = 1, x.shape[0] = NV, x.strides[0] = 1;
            y = x, y.data = ref, y.dtype = (it_dtype)d;
            it_cpu_kernels()->cast(NULL, &x, &y);
            size_t w = it_dtype_size((it_dtype)d);
            for (int i = 0; i < NV; i++)
                CHECK_MSG(same_elem((it_dtype)d, a + i * w, ref + i * w), "%s -> %s element %d differs from cpu",
                          it_dtype_name((it_dtype)s), it_dtype_name((it_dtype)d), i);
        }
    }
    CHECK(exact + inexact == 169);
    printf("cast plans: %d exact, %d with a documented difference\n", exact, inexact);
    /* the rules named in the issue */
    mlu_cast_plan p;
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_FP16, IT_DTYPE_BF16, &p));
    CHECK(p.nsteps == 2 && p.steps[0].to == IT_DTYPE_FP32 && p.exact);
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_I8, IT_DTYPE_I64, &p));
    CHECK(p.nsteps == 2 && p.steps[0].to == IT_DTYPE_I32 && p.steps[1].to == IT_DTYPE_I64);
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_I32, IT_DTYPE_U8, &p));
    CHECK(p.nsteps == 1 && p.steps[0].kind == MLU_STEP_LOW && p.exact);
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_FP64, IT_DTYPE_BF16, &p));
    CHECK(!p.exact && strstr(p.note, "rounds twice"));
    char name[48];
    CHECK(strcmp(mlu_cast_enum_name(IT_DTYPE_FP32, IT_DTYPE_FP16, name, sizeof name), "CNNL_CAST_FLOAT_TO_HALF") == 0);
    CHECK(!mlu_cast_direct(IT_DTYPE_FP16, IT_DTYPE_BF16) && !mlu_cast_direct(IT_DTYPE_BF16, IT_DTYPE_FP16));
    int v;
    CHECK(mlu_cnnl_cast_value(IT_DTYPE_FP32, IT_DTYPE_FP16, &v) && v == 210); /* cnnl.h's CNNL_CAST_FLOAT_TO_HALF */
    CHECK(mlu_cnnl_cast_value(IT_DTYPE_I32, IT_DTYPE_FP32, &v) && v == 620);
    CHECK(!mlu_cnnl_cast_value(IT_DTYPE_FP16, IT_DTYPE_BF16, &v));
    /* int32 -> float never uses CNNL_CAST_INT32_TO_FLOAT (it rounds toward zero) */
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_I32, IT_DTYPE_FP32, &p));
    CHECK(p.exact && p.nsteps == 3 && p.steps[0].to == IT_DTYPE_I64 && p.steps[1].to == IT_DTYPE_FP64);
    CHECK_ERR(mlu_cast_plan_for((it_dtype)13, IT_DTYPE_FP32, &p), IT_ERR_INVALID_ARG, "invalid dtype pair");
}

static void test_descriptors(void) {
    it_tdesc d = {0};
    mlu_dims m;
    d.ndim = 0;
    CHECK_OK(mlu_dims_from_desc("cast", "x", &d, &m));
    CHECK(m.ndim == 1 && m.dims[0] == 1 && m.strides[0] == 1);
    d.ndim = 3, d.shape[0] = 2, d.shape[1] = 3, d.shape[2] = 5, d.strides[0] = 0, d.strides[1] = 10, d.strides[2] = 2;
    CHECK_OK(mlu_dims_from_desc("cast", "x", &d, &m));
    CHECK(m.ndim == 3 && m.dims[2] == 5 && m.strides[0] == 0 && m.strides[1] == 10 && m.strides[2] == 2);
    CHECK(!mlu_desc_contiguous(&d) && mlu_desc_numel(&d) == 30);
    d.shape[1] = (int64_t)1 << 31;
    CHECK_ERR(mlu_dims_from_desc("gemm", "a", &d, &m), IT_ERR_UNSUPPORTED, "dim 1 of 'a' is 2147483648, outside int32");
    d.shape[1] = 3, d.strides[0] = (int64_t)3 << 30;
    CHECK_ERR(mlu_dims_from_desc("gemm", "a", &d, &m), IT_ERR_UNSUPPORTED, "stride 0 of 'a'");
    int64_t shape[2] = {4, 6};
    CHECK_OK(mlu_dims_contiguous("x", "y", 2, shape, &m));
    CHECK(m.strides[0] == 6 && m.strides[1] == 1);
    /* softmax: {1, product of leading dims, last} for any rank */
    int d3[3];
    it_tdesc x = {0};
    x.ndim = 4, x.shape[0] = 2, x.shape[1] = 3, x.shape[2] = 7, x.shape[3] = 5;
    CHECK_OK(mlu_softmax_dims("softmax_fwd", &x, d3));
    CHECK(d3[0] == 1 && d3[1] == 42 && d3[2] == 5);
    x.ndim = 1, x.shape[0] = 9;
    CHECK_OK(mlu_softmax_dims("softmax_fwd", &x, d3));
    CHECK(d3[0] == 1 && d3[1] == 1 && d3[2] == 9);
    x.ndim = 2, x.shape[0] = 0, x.shape[1] = 4;
    CHECK_OK(mlu_softmax_dims("softmax_fwd", &x, d3));
    CHECK(d3[1] == 0 && d3[2] == 4);
    x.ndim = 3, x.shape[0] = 1 << 16, x.shape[1] = 1 << 16, x.shape[2] = 2;
    CHECK_ERR(mlu_softmax_dims("softmax_fwd", &x, d3), IT_ERR_UNSUPPORTED, "outside int32");
}

static void test_workspace(void) {
    const size_t M = MLU_WORKSPACE_ALIGN;
    CHECK(mlu_workspace_grow(0, 0) == 0);
    CHECK(mlu_workspace_grow(0, 1) == M);
    CHECK(mlu_workspace_grow(M, M) == M);
    CHECK(mlu_workspace_grow(M, M + 1) == 2 * M);
    CHECK(mlu_workspace_grow(2 * M, M) == 2 * M);
    CHECK(mlu_workspace_grow(M, 5 * M + 1) == 6 * M);
    mlu_cast_plan p;
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_FP16, IT_DTYPE_BF16, &p));
    CHECK(mlu_cast_workspace_bytes(&p, 10, true, true) == 40);   /* one fp32 intermediate */
    CHECK(mlu_cast_workspace_bytes(&p, 10, false, true) == 60);  /* + gathered fp16 src */
    CHECK(mlu_cast_workspace_bytes(&p, 10, false, false) == 80); /* + bf16 dst staging */
    CHECK(mlu_cast_workspace_bytes(&p, 0, false, false) == 0);
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_FP32, IT_DTYPE_FP16, &p));
    CHECK(mlu_cast_workspace_bytes(&p, 10, true, true) == 0);          /* direct: none */
    CHECK_OK(mlu_cast_plan_for(IT_DTYPE_U16, IT_DTYPE_FP64, &p));      /* ZEXT, I32->I64, I64->F64 */
    CHECK(mlu_cast_workspace_bytes(&p, 10, true, true) == 2 * 10 * 8); /* ping + pong at 8 bytes */
}

/* softmax planning: rows, mask rows, columns; the causal valid-column rule equals the CPU
 * backend's mask (checked against the CPU kernel: exactly the masked entries are 0). */
static void test_softmax_geometry(void) {
    it_softmax_args a = {1.0f, true};
    mlu_softmax_geo g;
    it_tdesc x = {0};
    x.dtype = IT_DTYPE_FP32, x.ndim = 4, x.shape[0] = 2, x.shape[1] = 3, x.shape[2] = 4, x.shape[3] = 6;
    CHECK_OK(mlu_softmax_geometry("softmax_fwd", &a, &x, &g));
    CHECK(g.R == 24 && g.T == 4 && g.S == 6);
    /* row r is query t = r % T; key s is kept iff s <= t + (S - T) */
    CHECK(mlu_softmax_valid_cols(&g, true, 0) == 3 && mlu_softmax_valid_cols(&g, true, 3) == 6);
    CHECK(mlu_softmax_valid_cols(&g, true, 5) == 4 && mlu_softmax_valid_cols(&g, false, 5) == 6);
    x.shape[3] = 3; /* S < T */
    CHECK_ERR(mlu_softmax_geometry("softmax_fwd", &a, &x, &g), IT_ERR_INVALID_ARG, "causal mask needs cols >= rows");
    a.causal = false;
    CHECK_OK(mlu_softmax_geometry("softmax_fwd", &a, &x, &g));
    x.shape[0] = 0, a.causal = true; /* no rows: the geometry is not checked, as the CPU */
    CHECK_OK(mlu_softmax_geometry("softmax_fwd", &a, &x, &g));
    CHECK(g.R == 0);
    x.ndim = 1, x.shape[0] = 7;
    CHECK_OK(mlu_softmax_geometry("softmax_bwd", &a, &x, &g));
    CHECK(g.R == 1 && g.T == 1 && g.S == 7 && mlu_softmax_valid_cols(&g, true, 0) == 7);
    x.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_softmax_geometry("softmax_fwd", &a, &x, &g), IT_ERR_UNSUPPORTED, "float32");
    CHECK_ERR(mlu_softmax_geometry("softmax_fwd", NULL, &x, &g), IT_ERR_INVALID_ARG, "args is NULL");

    /* the CPU kernel's mask is the rule above */
    enum { B = 2, T = 3, S = 5 };
    float xv[B * T * S], yv[B * T * S];
    for (int i = 0; i < B * T * S; i++) xv[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
    it_tdesc xd = {0}, yd;
    xd.data = xv, xd.dtype = IT_DTYPE_FP32, xd.ndim = 3, xd.shape[0] = B, xd.shape[1] = T, xd.shape[2] = S;
    xd.strides[0] = T * S, xd.strides[1] = S, xd.strides[2] = 1;
    yd = xd, yd.data = yv;
    it_softmax_args ca = {0.5f, true};
    CHECK_OK(it_cpu_kernels()->softmax_fwd(NULL, &ca, &xd, &yd));
    CHECK_OK(mlu_softmax_geometry("softmax_fwd", &ca, &xd, &g));
    for (int64_t r = 0; r < g.R; r++) {
        int64_t n = mlu_softmax_valid_cols(&g, true, r);
        for (int64_t c = 0; c < S; c++)
            CHECK_MSG(c < n ? yv[r * S + c] > 0.0f : yv[r * S + c] == 0.0f, "row %lld col %lld: y %g, valid %lld",
                      (long long)r, (long long)c, (double)yv[r * S + c], (long long)n);
    }
}

static it_tdesc dense4(it_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
    it_tdesc t = {0};
    t.dtype = dt, t.ndim = 4, t.shape[0] = a, t.shape[1] = b, t.shape[2] = c, t.shape[3] = d;
    t.strides[3] = 1, t.strides[2] = d, t.strides[1] = c * d, t.strides[0] = b * c * d;
    return t;
}
static it_tdesc dense2(it_dtype dt, int64_t a, int64_t b) {
    it_tdesc t = {0};
    t.dtype = dt, t.ndim = 2, t.shape[0] = a, t.shape[1] = b, t.strides[0] = b, t.strides[1] = 1;
    return t;
}

static void test_rope_geometry(void) {
    /* q as a slice of a fused qkv (B, T, 3C) with C = H * D: strides (T*3C, 3C, D, 1) */
    it_tdesc x = dense4(IT_DTYPE_BF16, 2, 5, 4, 8), y = dense4(IT_DTYPE_BF16, 2, 5, 4, 8);
    x.strides[0] = 5 * 96, x.strides[1] = 96, x.strides[2] = 8;
    it_tdesc c = dense2(IT_DTYPE_BF16, 5, 4), s = dense2(IT_DTYPE_BF16, 5, 4);
    mlu_rope_geo g;
    CHECK_OK(mlu_rope_geometry(&x, &c, &s, &y, &g));
    CHECK(g.B == 2 && g.T == 5 && g.H == 4 && g.P == 4);
    CHECK(g.sx[0] == 480 && g.sx[1] == 96 && g.sx[2] == 8 && g.sx[3] == 1 && g.sy[1] == 32 && g.sc[0] == 4);
    CHECK_OK(mlu_rope_geometry(&x, &c, &s, &x, &g)); /* in place */
    it_tdesc bad = c;
    bad.shape[1] = 3;
    CHECK_ERR(mlu_rope_geometry(&x, &bad, &s, &y, &g), IT_ERR_INVALID_ARG, "cos must be (T, D/2) = (5, 4)");
    bad = s, bad.dtype = IT_DTYPE_FP32;
    CHECK_ERR(mlu_rope_geometry(&x, &c, &bad, &y, &g), IT_ERR_INVALID_ARG, "x's dtype");
    it_tdesc odd = dense4(IT_DTYPE_FP32, 1, 5, 1, 7), oc = dense2(IT_DTYPE_FP32, 5, 3);
    CHECK_ERR(mlu_rope_geometry(&odd, &oc, &oc, &odd, &g), IT_ERR_INVALID_ARG, "must be even");
    it_tdesc big = dense4(IT_DTYPE_FP32, 1, 1, 1, MLU_ROPE_MAX_D + 2),
             bc = dense2(IT_DTYPE_FP32, 1, MLU_ROPE_MAX_D / 2 + 1);
    CHECK_ERR(mlu_rope_geometry(&big, &bc, &bc, &big, &g), IT_ERR_UNSUPPORTED, "above the BANG kernel's 4096");
    it_tdesc d64 = dense4(IT_DTYPE_FP64, 1, 5, 1, 8), c64 = dense2(IT_DTYPE_FP64, 5, 4);
    CHECK_ERR(mlu_rope_geometry(&d64, &c64, &c64, &d64, &g), IT_ERR_UNSUPPORTED, "float32, float16, bfloat16");
    it_tdesc far = x;
    far.strides[3] = (int64_t)1 << 30; /* 2^30 bf16 elements = 2^31 bytes: beyond int32 */
    CHECK_ERR(mlu_rope_geometry(&far, &c, &s, &y, &g), IT_ERR_UNSUPPORTED, "stride 3 of 'x'");
    far.strides[3] = ((int64_t)1 << 30) - 1;
    CHECK_OK(mlu_rope_geometry(&far, &c, &s, &y, &g));
}

static void test_topk_geometry(void) {
    it_tdesc x = {0}, v, ix;
    x.dtype = IT_DTYPE_FP32, x.ndim = 3, x.shape[0] = 2, x.shape[1] = 3, x.shape[2] = 8;
    x.strides[0] = 0, x.strides[1] = 8, x.strides[2] = 1; /* inputs may broadcast */
    v = x, v.shape[2] = 2, v.strides[0] = 6, v.strides[1] = 2;
    ix = v, ix.dtype = IT_DTYPE_I32;
    int64_t N, E;
    CHECK_OK(mlu_topk_geometry(&x, 2, &v, &ix, &N, &E));
    CHECK(N == 6 && E == 8);
    CHECK_ERR(mlu_topk_geometry(&x, 0, &v, &ix, &N, &E), IT_ERR_INVALID_ARG, "k = 0 outside [1, E = 8]");
    CHECK_ERR(mlu_topk_geometry(&x, 9, &v, &ix, &N, &E), IT_ERR_INVALID_ARG, "k = 9 outside");
    CHECK_ERR(mlu_topk_geometry(&x, 3, &v, &ix, &N, &E), IT_ERR_INVALID_ARG, "values.shape[2] = 2, expected 3");
    it_tdesc i64 = ix;
    i64.dtype = IT_DTYPE_I64;
    CHECK_ERR(mlu_topk_geometry(&x, 2, &v, &i64, &N, &E), IT_ERR_INVALID_ARG, "indices dtype int64, expected int32");
    it_tdesc vs = v;
    vs.strides[1] = 4; /* rows of 2 values padded to 4 */
    CHECK_ERR(mlu_topk_geometry(&x, 2, &vs, &ix, &N, &E), IT_ERR_UNSUPPORTED, "values is not contiguous");
    it_tdesc x64 = x, v64 = v;
    x64.dtype = v64.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_topk_geometry(&x64, 2, &v64, &ix, &N, &E), IT_ERR_UNSUPPORTED, "float32");
}

static void test_embedding_bwd_geometry(void) {
    it_tdesc idx = {0};
    idx.dtype = IT_DTYPE_I64, idx.ndim = 1, idx.shape[0] = 5, idx.strides[0] = 1;
    it_tdesc g = dense2(IT_DTYPE_FP32, 5, 300), w = dense2(IT_DTYPE_FP32, 50, 300);
    CHECK_OK(mlu_embedding_bwd_geometry(&idx, &g, &w));
    idx.dtype = IT_DTYPE_I16;
    CHECK_ERR(mlu_embedding_bwd_geometry(&idx, &g, &w), IT_ERR_INVALID_ARG, "not int32 or int64");
    idx.dtype = IT_DTYPE_I32;
    it_tdesc g2 = dense2(IT_DTYPE_FP32, 4, 300);
    CHECK_ERR(mlu_embedding_bwd_geometry(&idx, &g2, &w), IT_ERR_INVALID_ARG, "dout is (4, 300), expected (5, 300)");
    it_tdesc w64 = dense2(IT_DTYPE_FP64, 50, 300);
    CHECK_ERR(mlu_embedding_bwd_geometry(&idx, &g, &w64), IT_ERR_UNSUPPORTED, "float32");
    /* column blocks and tasks: 300 columns = blocks of 256 + 44 */
    CHECK(mlu_col_blocks(300, MLU_EMB_BLOCK) == 2 && mlu_col_blocks(256, 256) == 1 && mlu_col_blocks(0, 256) == 0);
    CHECK(mlu_col_blocks(257, 256) == 2);
    CHECK(mlu_bang_tasks(0, MLU_BANG_MAX_TASKS) == 1 && mlu_bang_tasks(2, MLU_BANG_MAX_TASKS) == 2);
    CHECK(mlu_bang_tasks((int64_t)1 << 40, MLU_BANG_MAX_TASKS) == MLU_BANG_MAX_TASKS);
}

static void test_ws_layout(void) {
    size_t off[5];
    size_t a[4] = {10, 0, 300, 1};
    size_t total = mlu_ws_layout(a, 4, off);
    CHECK(off[0] == 0 && off[1] == 10 && off[2] == 256 && off[3] == 768 && total == 769);
    for (int i = 0; i < 4; i++) CHECK(a[i] == 0 || off[i] % MLU_WS_PART_ALIGN == 0);
    size_t z[2] = {0, 0};
    CHECK(mlu_ws_layout(z, 2, off) == 0 && off[0] == 0 && off[1] == 0);
    size_t one[2] = {0, 512};
    CHECK(mlu_ws_layout(one, 2, off) == 512 && off[1] == 0);
    /* rmsnorm_bwd with a strided x (R = 3, C = 100 fp32) and 1000 bytes of CNNL scratch */
    size_t r[5] = {0, 1200, 0, 0, 1000};
    CHECK(mlu_ws_layout(r, 5, off) == 1280 + 1000 && off[1] == 0 && off[4] == 1280);
}

static void test_errors_and_loader(void) {
    char buf[256];
    mlu_format_error(buf, sizeof buf, "cnrtMalloc", "nbytes=64, dev=0", "out of memory", 13);
    CHECK(strcmp(buf, "cnrtMalloc(nbytes=64, dev=0) failed: out of memory (13)") == 0);
    mlu_format_error(buf, sizeof buf, "cnnlCopy", NULL, NULL, 3);
    CHECK(strcmp(buf, "cnnlCopy() failed: unknown error (3)") == 0);

    char paths[4][512];
    setenv("NEUWARE_HOME", "/nonexistent/neuware", 1);
    CHECK(mlu_library_candidates("libcnrt.so", paths, 4) == 2);
    CHECK(strcmp(paths[0], "/nonexistent/neuware/lib64/libcnrt.so") == 0 && strcmp(paths[1], "libcnrt.so") == 0);
    void *real = dlopen("libcnrt.so", RTLD_NOW | RTLD_LOCAL);
    if (!real) {
        mlu_api api;
        char note[256];
        it_status st = mlu_api_load(&api, note, sizeof note);
        CHECK(st == IT_ERR_NOT_FOUND);
        const char *m = it_last_error();
        CHECK_MSG(strstr(m, "libcnrt.so") && strstr(m, "libcnnl.so") && strstr(m, "libcncl.so") &&
                      strstr(m, "/nonexistent/neuware/lib64") && strstr(m, "library path") && strlen(m) < 450,
                  "message: %s", m);
    } else {
        dlclose(real);
    }
    unsetenv("NEUWARE_HOME");
    mlu_library_candidates("libcncl.so", paths, 4);
    CHECK(strcmp(paths[0], "/usr/local/neuware/lib64/libcncl.so") == 0);
}

static void test_plugin_here(void) {
    const it_backend *b = NULL;
    CHECK_OK(it_backend_find("mlu", &b));
    if (!b) return;
    CHECK(strcmp(b->name, "mlu") == 0 && b->default_autocast_dtype == IT_DTYPE_BF16 && !b->host_memory);
    CHECK(b->kernels->cast && b->kernels->fill && b->kernels->copy_strided && b->kernels->gemm && b->ccl);
    CHECK(b->runtime->malloc_async && b->runtime->free_async); /* cnrtMemAllocAsync, or cnrtMalloc without it */
    /* CNNL slots always; the BANG slots all together (a build with cncc) or none */
    CHECK(b->kernels->rmsnorm_fwd && b->kernels->rmsnorm_bwd && b->kernels->topk && b->kernels->embedding_fwd);
    bool bang = b->kernels->softmax_fwd != NULL;
    CHECK(!!b->kernels->softmax_bwd == bang && !!b->kernels->rope == bang && !!b->kernels->embedding_bwd == bang);
    CHECK(!b->kernels->unary && !b->kernels->cross_entropy_fwd && !b->kernels->adam_step);
    void *real = dlopen("libcnrt.so", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        printf("libcnrt.so present: skipping the absent-runtime checks\n");
        return;
    }
    it_device dev;
    CHECK_ERR(it_device_parse("mlu", &dev), IT_ERR_NOT_FOUND, "Cambricon runtime not found");
    CHECK_ERR(it_device_parse("mlu:0", &dev), IT_ERR_NOT_FOUND, "libcnrt.so, libcnnl.so");
    CHECK(strstr(it_last_error(), "/usr/local/neuware/lib64") && strstr(it_last_error(), "library path"));
}

/* ---------------------------------------------------------------- host_ew.c, it_bang_math.h */

static it_tdesc flat_f32(float *p, int64_t n) {
    it_tdesc t = {0};
    t.data = p, t.dtype = IT_DTYPE_FP32, t.ndim = 1, t.shape[0] = n, t.strides[0] = 1;
    return t;
}
static bool same_f32(float a, float b) { return memcmp(&a, &b, 4) == 0 || (a != a && b != b); }

/* Values over the float range: specials, small, around GELU/tanh/exp break points, large. */
static int ew_values(float *v, int max) {
    static const float sp[] = {0.0f,    -0.0f,    1.0f,        -1.0f,        0.5f,       0.625f, -0.625f,
                               88.7f,   89.5f,    -103.9f,     -104.5f,      1e-30f,     1e-40f, -1e-40f,
                               3.0e38f, -3.0e38f, 1.0f / 0.0f, -1.0f / 0.0f, 0.0f / 0.0f};
    int n = 0;
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) v[n++] = sp[i];
    uint32_t r = 12345;
    while (n < max) {
        r = r * 1664525u + 1013904223u;
        float x = ((float)(r >> 8) / 16777216.0f - 0.5f) * (n % 3 == 0 ? 40.0f : n % 3 == 1 ? 4.0f : 400.0f);
        v[n++] = x;
    }
    return n;
}

static void test_bang_math(void) {
    enum { NVAL = 4000 };
    static float x[NVAL], y[NVAL], ref[NVAL], z[NVAL];
    int n = ew_values(x, NVAL);
    it_tdesc xd = flat_f32(x, n), rd = flat_f32(ref, n);
    CHECK(IT_BANG_GELU_K == sqrtf((float)(2.0 / M_PI)));
    for (int op = 0; op < IT_UNARY_COUNT; op++) {
        CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, 0.75f, &xd, &rd));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float in = (op == IT_UNARY_SQRT || op == IT_UNARY_RSQRT) ? sqrtf(x[i]) : x[i]; /* __bang_sqrt's part */
            float got = it_bang_unary(op, 0.75f, in);
            if (op == IT_UNARY_LOG) { /* Cephes logf: within 1 ulp of libm */
                if (same_f32(got, ref[i])) continue;
                float lo = nextafterf(ref[i], -INFINITY), hi = nextafterf(ref[i], INFINITY);
                if (!(got >= lo && got <= hi) && bad++ < 3)
                    CHECK_MSG(false, "log(%a): %a, cpu %a", (double)x[i], (double)got, (double)ref[i]);
            } else if (!same_f32(got, ref[i]) && bad++ < 3) {
                CHECK_MSG(false, "unary op %d at %a: %a, cpu %a", op, (double)x[i], (double)got, (double)ref[i]);
            }
        }
    }
    /* log over positive subnormals, normals and the [0.5, 2] range around the split point */
    for (int i = 0; i < 20000; i++) {
        float v = i < 10000 ? ldexpf(1.0f + (float)i / 10000.0f, i % 300 - 149) : 0.5f + (float)(i - 10000) / 6666.0f;
        float got = it_bang_logf(v), want = logf(v);
        CHECK_MSG(got == want || got == nextafterf(want, -INFINITY) || got == nextafterf(want, INFINITY),
                  "log(%a): %a, libm %a", (double)v, (double)got, (double)want);
    }
    CHECK(isnan(it_bang_logf(-1.0f)) && it_bang_logf(0.0f) == -INFINITY && it_bang_logf(INFINITY) == INFINITY);
    for (int i = 0; i < n; i++) y[i] = x[(i * 7 + 3) % n] * 0.5f;
    it_tdesc yd = flat_f32(y, n);
    for (int op = 0; op < IT_BINARY_COUNT; op++) {
        CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)op, &xd, &yd, &rd));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            z[i] = it_bang_binary(op, x[i], y[i]);
            if (!same_f32(z[i], ref[i]) && bad++ < 3)
                CHECK_MSG(false, "binary op %d at (%a, %a): %a, cpu %a", op, (double)x[i], (double)y[i], (double)z[i],
                          (double)ref[i]);
        }
    }
}

/* it_bang_math.h is a copy (cncc cannot be run here): its exp / tanh / GELU / SiLU and backward
 * terms against the CPU over 2^21 random 32-bit patterns (NaNs, infinities, subnormals in
 * their natural share; a quarter in |x| < 128, where the formulas switch), bit for bit. LOG
 * (Cephes', not bitwise) is test_bang_math's. */
static uint32_t dense_rng = 2463534242u;
static uint32_t dense_rnd(void) {
    dense_rng ^= dense_rng << 13, dense_rng ^= dense_rng >> 17, dense_rng ^= dense_rng << 5;
    return dense_rng;
}
static float dense_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void test_bang_math_dense(void) {
    enum { N = 1 << 21 };
    static float x[N], y[N], ref[N];
    for (int i = 0; i < N; i++) x[i] = dense_bits(dense_rnd()), y[i] = dense_bits(dense_rnd());
    for (int i = 0; i < N / 4; i++) x[i] = dense_bits(dense_rnd() % 0x43000000u | (dense_rnd() & 0x80000000u));
    it_tdesc xd = flat_f32(x, N), yd = flat_f32(y, N), rd = flat_f32(ref, N);
    for (int op = 0; op < IT_UNARY_COUNT + IT_BINARY_COUNT; op++) {
        bool un = op < IT_UNARY_COUNT;
        if (op == IT_UNARY_LOG) continue;
        if (un)
            CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, 0.75f, &xd, &rd));
        else
            CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)(op - IT_UNARY_COUNT), &xd, &yd, &rd));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float in = (op == IT_UNARY_SQRT || op == IT_UNARY_RSQRT) ? sqrtf(x[i]) : x[i]; /* __bang_sqrt's part */
            float got = un ? it_bang_unary(op, 0.75f, in) : it_bang_binary(op - IT_UNARY_COUNT, x[i], y[i]);
            if (!same_f32(got, ref[i]) && bad++ < 3)
                CHECK_MSG(false, "%s op %d at (%a, %a): %a, cpu %a", un ? "unary" : "binary",
                          un ? op : op - IT_UNARY_COUNT, (double)x[i], (double)y[i], (double)got, (double)ref[i]);
        }
        CHECK_MSG(bad == 0, "op %d: %d of %d differ", op, bad, N);
    }
}

/* A random float of any sign with exponent in [lo, hi] (biased), any mantissa. */
static float dense_float(int lo, int hi) {
    uint32_t e = (uint32_t)lo + dense_rnd() % (uint32_t)(hi - lo + 1);
    return dense_bits((dense_rnd() & 0x80000000u) | e << 23 | (dense_rnd() & 0x7fffffu));
}

/* optim.mlu's element code (it_bang_adam_moments / it_bang_adam_param / it_bang_sgd_elem,
 * copies) against the shared one the CPU and CUDA run (it_scalar_adam.h), bit for bit, over
 * 2^20 random elements per case: p, g, m of every magnitude from 2^-40 to 2^40, v >= 0, zeros. */
static void test_bang_optim_dense(void) {
    enum { N = 1 << 20 };
    const it_adam_args cases[] = {{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, true},
                                  {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 7, false},
                                  {6e-4f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f, 1000, false},
                                  {1e-2f, 0.5f, 0.9f, 1e-3f, 0.0f, 3.0f, 2, true}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        it_bang_adam_coef c;
        CHECK_OK(mlu_adam_coef(&cases[k], &c));
        it_sc_adam_f64c d = it_sc_adam_make(&cases[k]);
        it_sc_adam_f32c f = it_sc_adam_to_f32(&d);
        CHECK(c.b1 == f.b1 && c.omb1 == f.omb1 && c.b2 == f.b2 && c.omb2 == f.omb2 && c.eps == f.eps && c.wd == f.wd &&
              c.decay == f.decay && c.nss == f.nss && c.bc2s == f.bc2s && c.gs == f.gs);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float p = dense_float(87, 167), g = dense_float(87, 167), m = dense_float(87, 167);
            float v = fabsf(dense_float(47, 207));
            if (i % 17 == 0) g = 0.0f, m = 0.0f, v = 0.0f;
            float pb = p, mb = m, vb = v, ps = p, ms = m, vs = v;
            it_bang_adam_moments(&c, &pb, g, &mb, &vb);
            pb = it_bang_adam_param(&c, pb, mb, sqrtf(vb));
            it_sc_adam_f32(f, f.mode, &ps, g, &ms, &vs);
            if ((!same_f32(pb, ps) || !same_f32(mb, ms) || !same_f32(vb, vs)) && bad++ < 3)
                CHECK_MSG(false, "adam case %zu: p %a g %a m %a v %a: %a %a %a, shared %a %a %a", k, (double)p,
                          (double)g, (double)m, (double)v, (double)pb, (double)mb, (double)vb, (double)ps, (double)ms,
                          (double)vs);
        }
        CHECK_MSG(bad == 0, "adam case %zu: %d of %d differ", k, bad, N);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float p = dense_bits(dense_rnd()), g = dense_bits(dense_rnd()), gs = dense_float(100, 154);
        float nlr = -fabsf(dense_float(100, 130));
        if (!same_f32(it_bang_sgd_elem(p, g, gs, nlr), it_sc_sgd_f32(p, g, gs, nlr)) && bad++ < 3)
            CHECK_MSG(false, "sgd (%a, %a, %a, %a)", (double)p, (double)g, (double)gs, (double)nlr);
    }
    CHECK(bad == 0);
}

static it_tdesc dense_f32(int nd, const int64_t *shape, float *p) {
    it_tdesc t = {0};
    t.data = p, t.dtype = IT_DTYPE_FP32, t.ndim = nd;
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) t.shape[d] = shape[d], t.strides[d] = st, st *= shape[d];
    return t;
}

static void test_ew_plan(void) {
    it_bang_ew_args g;
    int64_t s3[3] = {4, 5, 6};
    it_tdesc out = dense_f32(3, s3, NULL), a = out, b = out;
    CHECK_OK(mlu_ew_plan("binary", &out, &a, &b, &g));
    CHECK(g.nd == 1 && g.shape[0] == 120 && g.sa[0] == 1 && g.sb[0] == 1 && g.total == 120 && g.binary);
    CHECK(mlu_ew_pieces(&g) == 1);
    /* bias add: b (1 -> stride 0, 1 -> 0, 6) */
    b.strides[0] = 0, b.strides[1] = 0;
    CHECK_OK(mlu_ew_plan("binary", &out, &a, &b, &g));
    CHECK(g.nd == 2 && g.shape[0] == 20 && g.shape[1] == 6 && g.sa[0] == 6 && g.sb[0] == 0 && g.sb[1] == 1);
    CHECK(mlu_ew_row_offset(&g, g.sa, 7) == 42 && mlu_ew_row_offset(&g, g.sb, 7) == 0);
    /* a transposed view (6 x 5 stored, read as 5 x 6 in the last two dims): inner stride 5 */
    a.strides[1] = 1, a.strides[2] = 5;
    b = out;
    CHECK_OK(mlu_ew_plan("binary", &out, &a, &b, &g));
    CHECK(g.nd == 3 && g.sa[2] == 5 && g.sb[2] == 1 && g.sa[1] == 1 && g.sb[1] == 6);
    for (int64_t row = 0; row < 20; row++) /* row (i, j) of (4, 5): a at i*30 + j, b at i*30 + j*6 */
        CHECK(mlu_ew_row_offset(&g, g.sa, row) == (row / 5) * 30 + row % 5 &&
              mlu_ew_row_offset(&g, g.sb, row) == (row / 5) * 30 + (row % 5) * 6);
    /* long rows are cut into pieces of IT_BANG_EW_CHUNK */
    int64_t s2[2] = {3, IT_BANG_EW_CHUNK + 1};
    it_tdesc o2 = dense_f32(2, s2, NULL), x2 = o2;
    x2.strides[0] = 0; /* broadcast rows */
    CHECK_OK(mlu_ew_plan("unary", &o2, &x2, NULL, &g));
    CHECK(g.nd == 2 && mlu_ew_pieces(&g) == 6 && !g.binary);
    /* a scalar */
    it_tdesc o0 = dense_f32(0, NULL, NULL);
    CHECK_OK(mlu_ew_plan("unary", &o0, &o0, NULL, &g));
    CHECK(g.nd == 1 && g.shape[0] == 1 && g.total == 1 && mlu_ew_pieces(&g) == 1);
    /* declined: non-dense out, other dtypes, strides beyond int32 bytes; refused: shapes */
    it_tdesc bad = out;
    bad.strides[0] = 31;
    CHECK_ERR(mlu_ew_plan("unary", &bad, &out, NULL, &g), IT_ERR_UNSUPPORTED, "not contiguous");
    it_tdesc f64 = out, f64b = out;
    f64.dtype = f64b.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_ew_plan("unary", &f64, &f64b, NULL, &g), IT_ERR_UNSUPPORTED, "float32");
    CHECK_ERR(mlu_ew_plan("unary", &out, &f64b, NULL, &g), IT_ERR_INVALID_ARG, "float64");
    it_tdesc wide = out;
    wide.strides[2] = (int64_t)1 << 40;
    CHECK_ERR(mlu_ew_plan("unary", &out, &wide, NULL, &g), IT_ERR_UNSUPPORTED, "int32 byte stride");
    it_tdesc other = out;
    other.shape[1] = 7;
    CHECK_ERR(mlu_ew_plan("binary", &out, &a, &other, &g), IT_ERR_INVALID_ARG, "b.shape[1] = 7");
}

/* reduce.mlu's two loops, on the host: the tree over leaves of x as (O, R, I) */
static void emulate_reduce(const float *x, float *out, const it_bang_reduce_args *g) {
    int op = g->op == IT_REDUCE_MEAN ? IT_REDUCE_SUM : g->op;
    static float slot[IT_BANG_TREE_DEPTH][IT_BANG_RED_COLS], leaf[IT_BANG_LEAF * IT_BANG_RED_COLS];
    for (int64_t o = 0; o < g->O; o++)
        for (int64_t c0 = 0; c0 < g->I; c0 += IT_BANG_RED_COLS) {
            int w = (int)(g->I - c0 < IT_BANG_RED_COLS ? g->I - c0 : IT_BANG_RED_COLS);
            it_bang_tree t;
            int d, act;
            int64_t lo, cnt;
            it_bang_tree_init(&t, g->R);
            while ((act = it_bang_tree_step(&t, &d, &lo, &cnt)) != IT_BANG_TREE_DONE) {
                if (act == IT_BANG_TREE_LEAF) {
                    for (int64_t r = 0; r < cnt; r++)
                        for (int c = 0; c < w; c++)
                            leaf[r * w + c] = x[o * g->xo + (lo + r) * g->xr + (c0 + c) * g->xi];
                    for (int c = 0; c < w; c++) slot[d][c] = it_bang_leaf(leaf + c, cnt, w, op);
                } else {
                    for (int c = 0; c < w; c++)
                        slot[d][c] =
                            act == IT_BANG_TREE_MOVE ? slot[d + 1][c] : it_bang_join(slot[d][c], slot[d + 1][c], op);
                }
            }
            for (int c = 0; c < w; c++)
                out[o * g->I + c0 + c] = g->op == IT_REDUCE_MEAN ? slot[0][c] / (float)g->R : slot[0][c];
        }
}

static void test_reduce_plan_and_tree(void) {
    enum { MAXN = 70000 };
    static float x[MAXN], ref[MAXN], got[MAXN];
    for (int i = 0; i < MAXN; i++) x[i] = (float)((i * 2654435761u) % 1000003u) / 1000003.0f - 0.3f;
    x[4321] = 0.0f / 0.0f; /* seen by the MAX cases that cover it */
    /* (shape, reduced mask) cases: whole tensor, rows, columns, middle dim, nothing, empty */
    struct {
        int nd;
        int64_t shape[3];
        int red[3];
    } cs[] = {{1, {1}, {1}},
              {1, {7}, {1}},
              {1, {129}, {1}},
              {1, {5000}, {1}},
              {1, {65537}, {1}},
              {2, {3, 1000}, {0, 1}},
              {2, {1000, 70}, {1, 0}},
              {2, {300, 200}, {1, 0}},
              {3, {4, 300, 9}, {0, 1, 0}},
              {3, {2, 3, 5}, {1, 1, 0}},
              {2, {6, 5}, {0, 0}},
              {2, {0, 5}, {1, 0}},
              {2, {4, 0}, {0, 1}}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        for (int op = 0; op < IT_REDUCE_COUNT; op++) {
            it_tdesc xd = dense_f32(cs[k].nd, cs[k].shape, x + (op == IT_REDUCE_MAX && k == 3 ? 4000 : 0));
            int64_t os[3];
            for (int d = 0; d < cs[k].nd; d++) os[d] = cs[k].red[d] ? 1 : cs[k].shape[d];
            it_tdesc rd = dense_f32(cs[k].nd, os, ref), od = dense_f32(cs[k].nd, os, got);
            it_bang_reduce_args g;
            CHECK_OK(mlu_reduce_plan(op, &xd, &od, &g));
            int64_t nout = mlu_desc_numel(&od);
            CHECK_OK(it_cpu_kernels()->reduce(NULL, (it_reduce_op)op, &xd, &rd));
            CHECK_MSG(g.O * g.I == nout, "case %zu: O %lld * I %lld != %lld outputs", k, (long long)g.O, (long long)g.I,
                      (long long)nout);
            emulate_reduce(xd.data, got, &g);
            for (int64_t i = 0; i < nout; i++)
                CHECK_MSG(same_f32(got[i], ref[i]), "case %zu op %d out %lld: %a, cpu %a", k, op, (long long)i,
                          (double)got[i], (double)ref[i]);
        }
    it_bang_reduce_args g;
    int64_t s3[3] = {4, 5, 6}, o3[3] = {1, 5, 1};
    it_tdesc xd = dense_f32(3, s3, x), od = dense_f32(3, o3, got);
    CHECK_ERR(mlu_reduce_plan(IT_REDUCE_SUM, &xd, &od, &g), IT_ERR_UNSUPPORTED, "do not coalesce into one");
    int64_t o4[3] = {4, 1, 6};
    od = dense_f32(3, o4, got);
    CHECK_OK(mlu_reduce_plan(IT_REDUCE_SUM, &xd, &od, &g));
    CHECK(g.O == 4 && g.R == 5 && g.I == 6 && g.xo == 30 && g.xr == 6 && g.xi == 1 && mlu_reduce_items(&g) == 4);
    xd.strides[2] = 2, xd.strides[1] = 12, xd.strides[0] = 60; /* inner kept dim strided */
    CHECK_ERR(mlu_reduce_plan(IT_REDUCE_SUM, &xd, &od, &g), IT_ERR_UNSUPPORTED, "stride 2");
    xd = dense_f32(3, s3, x), xd.dtype = IT_DTYPE_FP64, od.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_reduce_plan(IT_REDUCE_SUM, &xd, &od, &g), IT_ERR_UNSUPPORTED, "float32");
    CHECK_ERR(mlu_reduce_plan(9, &xd, &od, &g), IT_ERR_INVALID_ARG, "op 9");
    /* the tree never needs more than IT_BANG_TREE_DEPTH slots */
    it_bang_tree t;
    int d, act, maxd = 0;
    int64_t lo, cnt, next = 0, leaves = 0;
    it_bang_tree_init(&t, (int64_t)1 << 40);
    while ((act = it_bang_tree_step(&t, &d, &lo, &cnt)) != IT_BANG_TREE_DONE && leaves < 100000) {
        maxd = d > maxd ? d : maxd;
        if (act == IT_BANG_TREE_LEAF) {
            CHECK(lo == next && cnt <= IT_BANG_LEAF);
            next = lo + cnt, leaves++;
        }
    }
    CHECK(maxd < IT_BANG_TREE_DEPTH && maxd > 30);
}

static void test_ce_plan(void) {
    int64_t N, Vp, ts, rs;
    int64_t ls[3] = {2, 3, 10}, ns[2] = {2, 3};
    it_tdesc lg = dense_f32(3, ls, NULL), loss = dense_f32(2, ns, NULL), dl = lg;
    it_tdesc tg = loss;
    tg.dtype = IT_DTYPE_I32;
    CHECK_OK(mlu_ce_plan("cross_entropy_fwd", &lg, &tg, 8, &loss, "losses", true, NULL, &N, &Vp, &ts, &rs));
    CHECK(N == 6 && Vp == 10 && ts == 1 && rs == 1);
    it_tdesc dls = loss;
    dls.strides[1] = 2, dls.strides[0] = 6;          /* a strided per-row vector */
    tg.strides[0] = 0, tg.shape[0] = 1, tg.ndim = 2; /* (1, 3): 3 elements, not 6 */
    CHECK_ERR(mlu_ce_plan("cross_entropy_bwd", &lg, &tg, 8, &dls, "dlosses", false, &dl, &N, &Vp, &ts, &rs),
              IT_ERR_INVALID_ARG, "targets has 3 elements");
    tg = loss, tg.dtype = IT_DTYPE_I64;
    CHECK_OK(mlu_ce_plan("cross_entropy_bwd", &lg, &tg, 10, &dls, "dlosses", false, &dl, &N, &Vp, &ts, &rs));
    CHECK(rs == 2 && ts == 1);
    CHECK_ERR(mlu_ce_plan("cross_entropy_fwd", &lg, &tg, 11, &loss, "losses", true, NULL, &N, &Vp, &ts, &rs),
              IT_ERR_INVALID_ARG, "valid = 11");
    CHECK_ERR(mlu_ce_plan("cross_entropy_fwd", &lg, &tg, 8, &dls, "losses", true, NULL, &N, &Vp, &ts, &rs),
              IT_ERR_UNSUPPORTED, "'losses' is not contiguous");
    dls.strides[0] = 7; /* no single stride */
    CHECK_ERR(mlu_ce_plan("cross_entropy_bwd", &lg, &tg, 8, &dls, "dlosses", false, &dl, &N, &Vp, &ts, &rs),
              IT_ERR_UNSUPPORTED, "dlosses do not have one element stride");
    it_tdesc lt = lg;
    lt.strides[2] = 2;
    CHECK_ERR(mlu_ce_plan("cross_entropy_fwd", &lt, &tg, 8, &loss, "losses", true, NULL, &N, &Vp, &ts, &rs),
              IT_ERR_UNSUPPORTED, "logits not contiguous");
    it_tdesc l64 = lg, o64 = loss;
    l64.dtype = o64.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_ce_plan("cross_entropy_fwd", &l64, &tg, 8, &o64, "losses", true, NULL, &N, &Vp, &ts, &rs),
              IT_ERR_UNSUPPORTED, "float64");
    tg.dtype = IT_DTYPE_FP32;
    CHECK_ERR(mlu_ce_plan("cross_entropy_fwd", &lg, &tg, 8, &loss, "losses", true, NULL, &N, &Vp, &ts, &rs),
              IT_ERR_INVALID_ARG, "not int32 or int64");
}

/* optim.mlu's per-element code with the host's scalars reproduces the CPU kernel bit for bit */
static void test_optim(void) {
    enum { N = 3000 };
    static float p0[N], g[N], m0[N], v0[N], pc[N], mc[N], vc[N], pb[N], mb[N], vb[N];
    for (int i = 0; i < N; i++) {
        p0[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        g[i] = (float)((i * 53) % 97) / 40.0f - 1.2f;
        m0[i] = g[i] * 0.1f, v0[i] = g[i] * g[i] * 0.01f;
    }
    it_adam_args cases[] = {{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, true},
                            {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 7, false},
                            {6e-4f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f, 1000, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(pc, p0, sizeof pc), memcpy(mc, m0, sizeof mc), memcpy(vc, v0, sizeof vc);
        memcpy(pb, p0, sizeof pb), memcpy(mb, m0, sizeof mb), memcpy(vb, v0, sizeof vb);
        it_tdesc P = flat_f32(pc, N), G = flat_f32(g, N), M = flat_f32(mc, N), V = flat_f32(vc, N);
        CHECK_OK(it_cpu_kernels()->adam_step(NULL, &cases[k], &P, &G, &M, &V));
        it_bang_adam_coef c;
        CHECK_OK(mlu_adam_coef(&cases[k], &c));
        CHECK(c.mode == (k == 0 ? IT_BANG_WD_DECOUPLED : k == 1 ? IT_BANG_WD_COUPLED : IT_BANG_WD_NONE));
        for (int i = 0; i < N; i++) {
            it_bang_adam_moments(&c, &pb[i], g[i], &mb[i], &vb[i]);
            pb[i] = it_bang_adam_param(&c, pb[i], mb[i], sqrtf(vb[i]));
        }
        int bad = 0;
        for (int i = 0; i < N; i++)
            if ((!same_f32(pb[i], pc[i]) || !same_f32(mb[i], mc[i]) || !same_f32(vb[i], vc[i])) && bad++ < 3)
                CHECK_MSG(false, "adam case %zu elem %d: p %a/%a m %a/%a v %a/%a", k, i, (double)pb[i], (double)pc[i],
                          (double)mb[i], (double)mc[i], (double)vb[i], (double)vc[i]);
    }
    memcpy(pc, p0, sizeof pc), memcpy(pb, p0, sizeof pb);
    it_tdesc P = flat_f32(pc, N), G = flat_f32(g, N);
    CHECK_OK(it_cpu_kernels()->sgd_step(NULL, 0.1f, 0.7f, &P, &G));
    float nlr = mlu_sgd_neg_lr(0.1f);
    CHECK(nlr == -0.1f && it_f32_as_decimal(0.9f) == 0.9 && it_f32_as_decimal(3e-4f) == 3e-4);
    for (int i = 0; i < N; i++) pb[i] = it_bang_sgd_elem(pb[i], g[i], 0.7f, nlr);
    CHECK(memcmp(pb, pc, sizeof pb) == 0);
    /* plans */
    int64_t n;
    it_tdesc M = flat_f32(mc, N), Vv = flat_f32(vc, N);
    CHECK_OK(mlu_optim_plan("adam_step", &P, &G, &M, &Vv, &n));
    CHECK(n == N);
    it_tdesc short_g = flat_f32(g, N - 1);
    CHECK_ERR(mlu_optim_plan("sgd_step", &P, &short_g, NULL, NULL, &n), IT_ERR_INVALID_ARG, "grad has 2999");
    it_tdesc p64 = P, g64 = G;
    p64.dtype = g64.dtype = IT_DTYPE_FP64;
    CHECK_ERR(mlu_optim_plan("sgd_step", &p64, &g64, NULL, NULL, &n), IT_ERR_UNSUPPORTED, "float32");
    it_adam_args a0 = cases[0];
    a0.step = 0;
    it_bang_adam_coef c;
    CHECK_ERR(mlu_adam_coef(&a0, &c), IT_ERR_INVALID_ARG, "step = 0");
}

/* Every flash attention call is declined, naming the first CNNL limit it meets. */
static void test_flash_decline(void) {
    it_flash_args a = {0.125f, true, 0};
    it_tdesc q = {0}, k = {0};
    q.dtype = k.dtype = IT_DTYPE_FP32, q.ndim = k.ndim = 4;
    q.shape[0] = k.shape[0] = 2, q.shape[1] = 6, k.shape[1] = 2, q.shape[2] = k.shape[2] = 64;
    q.shape[3] = k.shape[3] = 64;
    CHECK_ERR(mlu_flash_decline("flash_attention_fwd", &a, &q, &k), IT_ERR_UNSUPPORTED,
              "dtype float32: cnnlFlashAttentionForward_v2 takes half and bfloat16 only");
    q.dtype = k.dtype = IT_DTYPE_BF16;
    q.shape[3] = k.shape[3] = 640;
    CHECK_ERR(mlu_flash_decline("flash_attention_bwd", &a, &q, &k), IT_ERR_UNSUPPORTED, "head size 640 outside");
    q.shape[3] = k.shape[3] = 64, a.scale = 2.0f;
    CHECK_ERR(mlu_flash_decline("flash_attention_fwd", &a, &q, &k), IT_ERR_UNSUPPORTED, "qk_scale (0, 1]");
    a.scale = 0.125f, a.q_offset = 7, k.shape[2] = 128;
    CHECK_ERR(mlu_flash_decline("flash_attention_fwd", &a, &q, &k), IT_ERR_UNSUPPORTED,
              "query offset 7 with T = 64, S = 128");
    a.q_offset = 64; /* bottom-right: inside CNNL's limits, still declined, saying why */
    CHECK_ERR(mlu_flash_decline("flash_attention_fwd", &a, &q, &k), IT_ERR_UNSUPPORTED, "is not wired");
    q.dtype = k.dtype = IT_DTYPE_FP16, a.q_offset = 0, a.causal = false;
    CHECK_ERR(mlu_flash_decline("flash_attention_fwd", &a, &q, &k), IT_ERR_UNSUPPORTED, "is not wired");
}

int main(void) {
    test_dtype_map();
    test_cast_plans();
    test_descriptors();
    test_workspace();
    test_softmax_geometry();
    test_rope_geometry();
    test_topk_geometry();
    test_embedding_bwd_geometry();
    test_flash_decline();
    test_ws_layout();
    test_bang_math();
    test_bang_math_dense();
    test_bang_optim_dense();
    test_ew_plan();
    test_reduce_plan_and_tree();
    test_ce_plan();
    test_optim();
    test_errors_and_loader();
    test_plugin_here();
    return it_test_report("test_mlu_host");
}
