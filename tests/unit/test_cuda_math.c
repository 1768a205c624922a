/* backends/cuda/cu_math.h, compiled as plain C11 on the host, against the CPU backend's
 * kernels: the CUDA kernels (kernels_ew.cu) compute each element with these functions, so
 * agreement here is agreement of the device with the CPU wherever the device's IEEE fp32 /
 * fp64 + - * / sqrt fma round as the host's do (nvcc's defaults; cu_math.h uses the unfused
 * _rn intrinsics on the device).
 *
 * Every comparison is bitwise (NaN payloads included): cu_math.h transcribes the CPU's
 * formulas operation by operation, and on the host both call the same libm for the few
 * library functions (logf; fp64 exp/log/tanh/cosh). On the device those library calls are
 * CUDA's (within 1-2 ulp), which this test cannot see; everything else it pins down. */
#include <float.h>
#include <stdint.h>

#include "cuda/cu_math.h"
#include "infinitrain/backend.h"
#include "it_test.h"

/* ---------------------------------------------------------------- helpers */

static uint32_t rng_state = 12345u;
static uint32_t rnd32(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state;
}
static uint64_t rnd64(void) { return ((uint64_t)rnd32() << 32) ^ (uint64_t)rnd32() ^ ((uint64_t)rnd32() << 16); }
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static bool same_f32(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }
static bool same_f64(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }
/* Two NaNs that differ in the sign bit alone. A formula that negates an operand (SiLU's exp(-x))
 * makes NaNs of both signs from one NaN input, and when two NaNs meet, x86 keeps the first
 * operand's: which one that is, the compiler picks (it may swap a commutative op's operands, and
 * does so differently at -O0, -O1 and -O2). IEEE 754 leaves a NaN result's sign unspecified; the
 * payload is still compared. */
static bool nan_sign_only_f32(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return a != a && b != b && (x & 0x7fffffffu) == (y & 0x7fffffffu);
}
static bool nan_sign_only_16(uint16_t x, uint16_t y, bool fp16) {
    uint16_t e = fp16 ? 0x7c00u : 0x7f80u; /* exponent all ones, mantissa non-zero: a NaN */
    bool nx = (x & e) == e && (x & (uint16_t)~e & 0x7fffu), ny = (y & e) == e && (y & (uint16_t)~e & 0x7fffu);
    return nx && ny && (x & 0x7fffu) == (y & 0x7fffu);
}

static it_tdesc flat(void *p, it_dtype dt, int64_t n) {
    it_tdesc t;
    memset(&t, 0, sizeof t);
    t.data = p, t.dtype = dt, t.ndim = 1, t.shape[0] = n, t.strides[0] = 1;
    return t;
}

/* Inputs over the float range: zeros, +-1, GELU / tanh / exp break points (0.625, the exp
 * clamps 88/89/-87/-104, GELU's clamp near |x| = 10), subnormals, +-large, +-Inf, NaN, then
 * pseudo-random values at three scales. */
enum { NVAL = 600 };
static int ew_values(float *v) {
    static const float sp[] = {0.0f,    -0.0f,  1.0f,    -1.0f,    0.5f,    0.625f,   -0.625f, 0.6249f, 2.0f,
                               -3.0f,   10.0f,  -10.0f,  9.5f,     -9.5f,   11.0f,    -11.0f,  20.0f,   -20.0f,
                               87.0f,   -87.0f, 88.0f,   88.7f,    89.5f,   -103.9f,  -104.5f, 1e-30f,  1e-40f,
                               -1e-40f, 1e-45f, 3.0e38f, -3.0e38f, FLT_MAX, -FLT_MAX, 1e6f,    -1e6f,   0.044715f};
    int n = 0;
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) v[n++] = sp[i];
    v[n++] = (float)INFINITY;
    v[n++] = -(float)INFINITY;
    v[n++] = bits_f32(0x7fc00000u); /* NaN */
    v[n++] = bits_f32(0xffc12345u); /* -NaN with a payload */
    while (n < NVAL) {
        float x = ((float)(rnd32() >> 8) / 16777216.0f - 0.5f) * (n % 3 == 0 ? 40.0f : n % 3 == 1 ? 4.0f : 400.0f);
        v[n++] = x;
    }
    return n;
}

/* ---------------------------------------------------------------- unary / binary, fp32 */

static void test_unary_binary_f32(void) {
    static float x[NVAL], y[NVAL], ref[NVAL];
    int n = ew_values(x);
    for (int i = 0; i < n; i++) y[i] = x[(i * 7 + 3) % n] * 0.5f; /* dy / second operand, specials mixed in */
    it_tdesc xd = flat(x, IT_DTYPE_FP32, n), yd = flat(y, IT_DTYPE_FP32, n), rd = flat(ref, IT_DTYPE_FP32, n);
    /* sqrt(2/pi) as elementwise.c forms it */
    CHECK(same_f32(it_cu_gelu_k(), sqrtf((float)(2.0 / 3.14159265358979323846))));
    const float alphas[] = {0.75f, -3.5f};
    for (int op = 0; op < IT_UNARY_COUNT; op++)
        for (int a = 0; a < 2; a++) {
            CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, alphas[a], &xd, &rd));
            int bad = 0;
            for (int i = 0; i < n; i++) {
                float got = it_cu_unary_f32(op, alphas[a], x[i]);
                it_test_checks++;
                if (!same_f32(got, ref[i]) && bad++ < 3) {
                    it_test_failures++;
                    fprintf(stderr, "unary op %d alpha %g at %a: %a, cpu %a\n", op, (double)alphas[a], (double)x[i],
                            (double)got, (double)ref[i]);
                }
            }
        }
    for (int op = 0; op < IT_BINARY_COUNT; op++) {
        CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)op, &xd, &yd, &rd));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float got = it_cu_binary_f32(op, x[i], y[i]);
            it_test_checks++;
            if (!same_f32(got, ref[i]) && !nan_sign_only_f32(got, ref[i]) && bad++ < 3) {
                it_test_failures++;
                fprintf(stderr, "binary op %d at (%a, %a): %a, cpu %a\n", op, (double)x[i], (double)y[i], (double)got,
                        (double)ref[i]);
            }
        }
    }
    /* the edges backend.h spells out, by value */
    CHECK(isnan(it_cu_gelu(-(float)INFINITY)) && it_cu_gelu((float)INFINITY) == (float)INFINITY);
    CHECK(isnan(it_cu_silu(-(float)INFINITY)) && it_cu_silu((float)INFINITY) == (float)INFINITY);
    CHECK(isnan(it_cu_gelu_bwd((float)INFINITY, 1.0f)) && isnan(it_cu_gelu_bwd(-(float)INFINITY, 1.0f)));
    CHECK(isnan(it_cu_nanmaxf(1.0f, NAN)) && isnan(it_cu_nanmaxf(NAN, 1.0f)));
    CHECK(isnan(it_cu_nanminf(1.0f, NAN)) && isnan(it_cu_nanminf(NAN, 1.0f)));
    CHECK(it_cu_gelu(0.0f) == 0.0f && it_cu_tanhf(0.0f) == 0.0f && it_cu_expf(0.0f) == 1.0f);
    CHECK(it_cu_expf(-(float)INFINITY) == 0.0f && it_cu_expf((float)INFINITY) == (float)INFINITY);
    CHECK(it_cu_tanhf(100.0f) == 1.0f && it_cu_tanhf(-100.0f) == -1.0f);
    CHECK_NEAR(it_cu_gelu(1.0f), 0.841192f, 1e-5);
    CHECK_NEAR(it_cu_silu(1.0f), 0.7310586f, 1e-6);
}

/* ---------------------------------------------------------------- unary / binary, fp64 */

static void test_unary_binary_f64(void) {
    static float xf[NVAL];
    static double x[NVAL], y[NVAL], ref[NVAL];
    int n = ew_values(xf);
    for (int i = 0; i < n; i++) x[i] = (double)xf[i] * (1.0 + 1e-9 * (i % 7)); /* off the float grid */
    for (int i = 0; i < n; i++) y[i] = x[(i * 7 + 3) % n] * 0.5;
    it_tdesc xd = flat(x, IT_DTYPE_FP64, n), yd = flat(y, IT_DTYPE_FP64, n), rd = flat(ref, IT_DTYPE_FP64, n);
    for (int op = 0; op < IT_UNARY_COUNT; op++) {
        CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, 0.75f, &xd, &rd));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            double got = it_cu_unary_f64(op, 0.75, x[i]);
            it_test_checks++;
            if (!same_f64(got, ref[i]) && bad++ < 3) {
                it_test_failures++;
                fprintf(stderr, "unary f64 op %d at %a: %a, cpu %a\n", op, x[i], got, ref[i]);
            }
        }
    }
    for (int op = 0; op < IT_BINARY_COUNT; op++) {
        CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)op, &xd, &yd, &rd));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            double got = it_cu_binary_f64(op, x[i], y[i]);
            it_test_checks++;
            if (!same_f64(got, ref[i]) && bad++ < 3) {
                it_test_failures++;
                fprintf(stderr, "binary f64 op %d at (%a, %a): %a, cpu %a\n", op, x[i], y[i], got, ref[i]);
            }
        }
    }
}

/* ---------------------------------------------------------------- bf16 / fp16 through fp32 */

static void test_half_paths(void) {
    static float xf[NVAL];
    static uint16_t x[NVAL], y[NVAL], ref[NVAL];
    int n = ew_values(xf);
    for (int h = 0; h < 2; h++) {
        it_dtype dt = h ? IT_DTYPE_FP16 : IT_DTYPE_BF16;
        for (int i = 0; i < n; i++) x[i] = h ? it_sc_fp32_to_fp16(xf[i]) : it_sc_fp32_to_bf16(xf[i]);
        for (int i = 0; i < n; i++) y[i] = x[(i * 7 + 3) % n];
        it_tdesc xd = flat(x, dt, n), yd = flat(y, dt, n), rd = flat(ref, dt, n);
        for (int op = 0; op < IT_UNARY_COUNT + IT_BINARY_COUNT; op++) {
            bool un = op < IT_UNARY_COUNT;
            if (un)
                CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, 0.75f, &xd, &rd));
            else
                CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)(op - IT_UNARY_COUNT), &xd, &yd, &rd));
            int bad = 0;
            for (int i = 0; i < n; i++) {
                float a = h ? it_sc_fp16_to_fp32(x[i]) : it_sc_bf16_to_fp32(x[i]);
                float b = h ? it_sc_fp16_to_fp32(y[i]) : it_sc_bf16_to_fp32(y[i]);
                float r = un ? it_cu_unary_f32(op, 0.75f, a) : it_cu_binary_f32(op - IT_UNARY_COUNT, a, b);
                uint16_t got = h ? it_sc_fp32_to_fp16(r) : it_sc_fp32_to_bf16(r);
                it_test_checks++;
                if (got != ref[i] && !nan_sign_only_16(got, ref[i], h) && bad++ < 3) {
                    it_test_failures++;
                    fprintf(stderr, "%s op %d at 0x%04x, 0x%04x: 0x%04x, cpu 0x%04x\n", it_dtype_name(dt), op, x[i],
                            y[i], got, ref[i]);
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- sgd, adam */

static void fill_optim(float *p, float *g, float *m, float *v, int n) {
    for (int i = 0; i < n; i++) {
        p[i] = ((float)(rnd32() >> 8) / 16777216.0f - 0.5f) * 2.0f;
        g[i] = ((float)(rnd32() >> 8) / 16777216.0f - 0.5f) * (i % 5 == 0 ? 1e-6f : i % 5 == 1 ? 100.0f : 0.1f);
        m[i] = ((float)(rnd32() >> 8) / 16777216.0f - 0.5f) * 0.01f;
        v[i] = (float)(rnd32() >> 8) / 16777216.0f * 1e-4f;
    }
    g[0] = 0.0f, m[0] = 0.0f, v[0] = 0.0f; /* a fresh element: denom = eps */
    g[1] = -0.0f, p[1] = 0.0f;
    g[2] = 1e30f; /* g^2 overflows fp32: v = inf, p moves by 0 */
}

static void test_optim(void) {
    enum { N = 300 };
    static float p[N], g[N], m[N], v[N], pc[N], mc[N], vc[N];
    static double pd[N], gd[N], md[N], vd[N], pdc[N], mdc[N], vdc[N];
    const it_adam_args cases[] = {
        {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, true},     /* AdamW, GPT-2's */
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 7, false},  /* Adam with L2, clipped grads */
        {1e-2f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f, 1000, false}, /* Adam without decay */
        {6e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.25f, 3, true},    /* AdamW with wd 0 still multiplies by 1 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fill_optim(p, g, m, v, N);
        memcpy(pc, p, sizeof p), memcpy(mc, m, sizeof m), memcpy(vc, v, sizeof v);
        for (int i = 0; i < N; i++) pd[i] = p[i], gd[i] = (double)g[i] * 1.1, md[i] = m[i], vd[i] = v[i];
        memcpy(pdc, pd, sizeof pd), memcpy(mdc, md, sizeof md), memcpy(vdc, vd, sizeof vd);
        it_adam_args a = cases[k];
        const float p5 = p[5];
        for (int step = 0; step < 3; step++, a.step++) {
            it_tdesc P = flat(pc, IT_DTYPE_FP32, N), G = flat(g, IT_DTYPE_FP32, N), M = flat(mc, IT_DTYPE_FP32, N),
                     V = flat(vc, IT_DTYPE_FP32, N);
            CHECK_OK(it_cpu_kernels()->adam_step(NULL, &a, &P, &G, &M, &V));
            it_sc_adam_f64c c = it_sc_adam_make(&a);
            it_sc_adam_f32c cf = it_sc_adam_to_f32(&c);
            CHECK(cf.mode == (a.decoupled ? IT_SC_WD_DECOUPLED : a.weight_decay != 0.0f ? IT_SC_WD_COUPLED : 0));
            int bad = 0;
            for (int i = 0; i < N; i++) {
                it_sc_adam_f32(cf, cf.mode, &p[i], g[i], &m[i], &v[i]);
                it_test_checks++;
                if (!(same_f32(p[i], pc[i]) && same_f32(m[i], mc[i]) && same_f32(v[i], vc[i])) && bad++ < 3) {
                    it_test_failures++;
                    fprintf(stderr, "adam f32 case %zu step %lld elem %d: p %a/%a m %a/%a v %a/%a\n", k,
                            (long long)a.step, i, (double)p[i], (double)pc[i], (double)m[i], (double)mc[i],
                            (double)v[i], (double)vc[i]);
                }
            }
            it_tdesc Pd = flat(pdc, IT_DTYPE_FP64, N), Gd = flat(gd, IT_DTYPE_FP64, N),
                     Md = flat(mdc, IT_DTYPE_FP64, N), Vd = flat(vdc, IT_DTYPE_FP64, N);
            CHECK_OK(it_cpu_kernels()->adam_step(NULL, &a, &Pd, &Gd, &Md, &Vd));
            bad = 0;
            for (int i = 0; i < N; i++) {
                it_sc_adam_f64(c, c.mode, &pd[i], gd[i], &md[i], &vd[i]);
                it_test_checks++;
                if (!(same_f64(pd[i], pdc[i]) && same_f64(md[i], mdc[i]) && same_f64(vd[i], vdc[i])) && bad++ < 3) {
                    it_test_failures++;
                    fprintf(stderr, "adam f64 case %zu step %lld elem %d: p %a/%a\n", k, (long long)a.step, i, pd[i],
                            pdc[i]);
                }
            }
        }
        /* the update moved the parameter; g = 1e30 made v = inf in fp32 */
        CHECK(p[5] != p5);
        CHECK(isinf(v[2]));
    }
    /* sgd */
    const float lrs[] = {0.01f, 3e-4f}, gss[] = {1.0f, 0.3f};
    for (int k = 0; k < 2; k++) {
        fill_optim(p, g, m, v, N);
        memcpy(pc, p, sizeof p);
        for (int i = 0; i < N; i++) pd[i] = pdc[i] = p[i], gd[i] = g[i];
        it_tdesc P = flat(pc, IT_DTYPE_FP32, N), G = flat(g, IT_DTYPE_FP32, N);
        it_tdesc Pd = flat(pdc, IT_DTYPE_FP64, N), Gd = flat(gd, IT_DTYPE_FP64, N);
        CHECK_OK(it_cpu_kernels()->sgd_step(NULL, lrs[k], gss[k], &P, &G));
        CHECK_OK(it_cpu_kernels()->sgd_step(NULL, lrs[k], gss[k], &Pd, &Gd));
        float nlr = (float)-it_f32_as_decimal(lrs[k]);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float got = it_sc_sgd_f32(p[i], g[i], gss[k], nlr);
            double gotd = it_sc_sgd_f64(pd[i], gd[i], (double)gss[k], -it_f32_as_decimal(lrs[k]));
            it_test_checks++;
            if (!(same_f32(got, pc[i]) && same_f64(gotd, pdc[i])) && bad++ < 3) {
                it_test_failures++;
                fprintf(stderr, "sgd %d elem %d: %a/%a %a/%a\n", k, i, (double)got, (double)pc[i], gotd, pdc[i]);
            }
        }
    }
}

/* ---------------------------------------------------------------- cast: all 13 x 13 pairs */

typedef void (*cvt_fn)(const void *s, void *d);
#define W_CVT(SN, SE, ST, SK, DN, DT, DK)                                                                              \
    static void w_##SN##_##DN(const void *s, void *d) {                                                                \
        ST x;                                                                                                          \
        memcpy(&x, s, sizeof x);                                                                                       \
        DT y = it_sc_cvt_##SN##_##DN(x);                                                                               \
        memcpy(d, &y, sizeof y);                                                                                       \
    }
#define W_CVTS_TO(DN, DE, DT, DK, unused) IT_SC_FOR_SRC(W_CVT, DN, DT, DK)
IT_SC_FOR_DST(W_CVTS_TO, 0)
#define W_ENTRY(DN, DE, DT, DK, SN) w_##SN##_##DN,
#define W_ROW(SN, SE, ST, SK, unused) {IT_SC_FOR_DST(W_ENTRY, SN)},
static const cvt_fn cvt_table[IT_DTYPE_COUNT][IT_DTYPE_COUNT] = {IT_SC_FOR_SRC(W_ROW, 0)};

/* Values that sit on every conversion's edges: the integer ranges' ends and their
 * neighbours, the fp16 overflow threshold 65520, 2^24 + 1 (fp32 rounding), 2^63 / 2^64,
 * halfway cases, subnormals of every format, +-Inf, NaNs with payloads. */
static const double edge_f[] = {0.0,
                                -0.0,
                                0.5,
                                -0.5,
                                0.99,
                                -0.99,
                                -1.0,
                                -1.0000001,
                                1.5,
                                2.5,
                                127.9,
                                128.0,
                                -128.5,
                                -129.0,
                                255.5,
                                256.0,
                                32767.5,
                                32768.0,
                                -32768.9,
                                65504.0,
                                65519.99,
                                65520.0,
                                65535.9,
                                65536.0,
                                16777217.0,
                                2147483647.5,
                                2147483648.0,
                                -2147483648.5,
                                -2147483649.0,
                                4294967295.5,
                                4294967296.0,
                                9007199254740993.0,
                                9223372036854775807.0,
                                -9223372036854775808.0,
                                -9223372036854777856.0,
                                18446744073709551615.0,
                                18446744073709551616.0,
                                1e30,
                                -1e30,
                                3.4028235677973366e38,
                                3.4028235677973366e38 * 1.0000001,
                                1e300,
                                -1e300,
                                1.00390625,           /* 1 + 2^-8: bf16 tie to even (down) */
                                1.01171875,           /* 1 + 3 * 2^-8: bf16 tie to even (up) */
                                1.0009765625 + 1e-12, /* fp16: just above a tie */
                                5.9604644775390625e-8,
                                2.98023223876953125e-8,
                                2.98023223876953126e-8,
                                1e-40,
                                1.4e-45,
                                9.18e-41,
                                1e-310,
                                5e-324};

static int src_values(it_dtype dt, unsigned char *buf, int max) {
    int n = 0;
    size_t es = it_dtype_size(dt);
#define PUT(T, val)                                                                                                    \
    do {                                                                                                               \
        T v_ = (val);                                                                                                  \
        if (n < max) memcpy(buf + (size_t)n++ * es, &v_, sizeof v_);                                                   \
    } while (0)
    switch (dt) {
    case IT_DTYPE_BOOL: {
        const uint8_t b[] = {0, 1, 2, 255, 128};
        for (size_t i = 0; i < sizeof b; i++) PUT(uint8_t, b[i]);
        break;
    }
    case IT_DTYPE_U8:
    case IT_DTYPE_I8:
        for (int i = 0; i < 256; i++) PUT(uint8_t, (uint8_t)i);
        break;
    case IT_DTYPE_U16:
    case IT_DTYPE_I16:
    case IT_DTYPE_BF16:
    case IT_DTYPE_FP16:
        for (int i = 0; i < 65536; i++) PUT(uint16_t, (uint16_t)i); /* every pattern */
        break;
    case IT_DTYPE_FP32:
        for (size_t i = 0; i < sizeof edge_f / sizeof edge_f[0]; i++) {
            PUT(float, (float)edge_f[i]);
            PUT(float, -(float)edge_f[i]);
            PUT(float, nextafterf((float)edge_f[i], 0.0f));
            PUT(float, nextafterf((float)edge_f[i], INFINITY));
        }
        PUT(uint32_t, 0x7f800000u);
        PUT(uint32_t, 0xff800000u);
        PUT(uint32_t, 0x7fc00000u);
        PUT(uint32_t, 0xffc12345u);
        PUT(uint32_t, 0x7f812345u); /* signalling */
        PUT(uint32_t, 0x7fbfffffu);
        while (n < max) PUT(uint32_t, rnd32());
        break;
    case IT_DTYPE_FP64:
        for (size_t i = 0; i < sizeof edge_f / sizeof edge_f[0]; i++) {
            PUT(double, edge_f[i]);
            PUT(double, -edge_f[i]);
            PUT(double, nextafter(edge_f[i], 0.0));
            PUT(double, nextafter(edge_f[i], INFINITY));
        }
        PUT(uint64_t, 0x7ff0000000000000ull);
        PUT(uint64_t, 0xfff0000000000000ull);
        PUT(uint64_t, 0x7ff8000000000000ull);
        PUT(uint64_t, 0xfff8123456789abcull);
        PUT(uint64_t, 0x7ff0000000000001ull); /* signalling */
        PUT(uint64_t, 0x7ff4000020000000ull);
        while (n < max) {
            /* random sign and mantissa, exponents around every target's range */
            uint64_t e = (uint64_t)(1023 - 160 + (int)(rnd32() % 240)) << 52;
            PUT(uint64_t, (rnd64() & 0x800fffffffffffffull) | e);
        }
        break;
    default: { /* 32- and 64-bit integers: range ends and neighbours, then random */
        const uint64_t sp[] = {0,
                               1,
                               UINT64_MAX,
                               2,
                               127,
                               128,
                               255,
                               256,
                               (uint64_t)-128,
                               (uint64_t)-129,
                               32767,
                               32768,
                               65519,
                               65520,
                               65535,
                               65536,
                               (uint64_t)-65520,
                               INT32_MAX,
                               (uint64_t)INT32_MIN,
                               (uint64_t)INT32_MAX + 1,
                               UINT32_MAX,
                               (uint64_t)UINT32_MAX + 1,
                               (1ull << 24) + 1,
                               (1ull << 24) + 3,
                               (1ull << 53) + 1,
                               INT64_MAX,
                               (uint64_t)INT64_MIN,
                               0x8000008000000000ull,
                               0x0000018000000001ull,
                               0x0000018000000000ull,
                               (uint64_t) - (int64_t)0x0000018000000001ll,
                               0x80800001ull,         /* bf16 tie only without the sticky bit */
                               0x0000008080000001ull, /* the same, 64-bit */
                               (uint64_t) - (int64_t)0x0000008080000001ll};
        for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
            if (es == 4)
                PUT(uint32_t, (uint32_t)sp[i]);
            else
                PUT(uint64_t, sp[i]);
        }
        while (n < max) {
            uint64_t r = rnd64() >> (rnd32() % 64);
            if (es == 4)
                PUT(uint32_t, (uint32_t)r);
            else
                PUT(uint64_t, r);
        }
        break;
    }
    }
#undef PUT
    return n;
}

static void test_cast(void) {
    enum { MAXN = 65536 };
    static unsigned char src[MAXN * 8], ref[MAXN * 8];
    int pairs = 0;
    for (int s = 0; s < IT_DTYPE_COUNT; s++) {
        int n = src_values((it_dtype)s, src, it_dtype_size((it_dtype)s) == 2 ? MAXN : 4000);
        if (s == IT_DTYPE_U16 || s == IT_DTYPE_I16 || s == IT_DTYPE_BF16 || s == IT_DTYPE_FP16) CHECK(n == 65536);
        for (int d = 0; d < IT_DTYPE_COUNT; d++) {
            /* same dtype (but bool) is a bit copy in both backends, never a conversion */
            if (s == d && s != IT_DTYPE_BOOL) continue;
            size_t ss = it_dtype_size((it_dtype)s), ds = it_dtype_size((it_dtype)d);
            it_tdesc sd = flat(src, (it_dtype)s, n), dd = flat(ref, (it_dtype)d, n);
            CHECK_OK(it_cpu_kernels()->cast(NULL, &sd, &dd));
            int bad = 0;
            for (int i = 0; i < n; i++) {
                unsigned char got[8] = {0};
                cvt_table[s][d](src + (size_t)i * ss, got);
                if (memcmp(got, ref + (size_t)i * ds, ds) != 0 && bad++ < 3) {
                    uint64_t in = 0, g = 0, r = 0;
                    memcpy(&in, src + (size_t)i * ss, ss), memcpy(&g, got, ds), memcpy(&r, ref + (size_t)i * ds, ds);
                    CHECK_MSG(false, "cast %s -> %s of 0x%llx: 0x%llx, cpu 0x%llx", it_dtype_name((it_dtype)s),
                              it_dtype_name((it_dtype)d), (unsigned long long)in, (unsigned long long)g,
                              (unsigned long long)r);
                }
            }
            CHECK_MSG(bad == 0, "cast %s -> %s: %d of %d differ", it_dtype_name((it_dtype)s),
                      it_dtype_name((it_dtype)d), bad, n);
            pairs++;
        }
    }
    CHECK(pairs == IT_DTYPE_COUNT * IT_DTYPE_COUNT - (IT_DTYPE_COUNT - 1));
    /* a few values spelled out (backend.h's rules) */
    CHECK(it_sc_cvt_fp32_i32(-2.9f) == -2 && it_sc_cvt_fp32_i32(3e9f) == INT32_MAX && it_sc_cvt_fp32_i32(NAN) == 0);
    CHECK(it_sc_cvt_fp32_u8(-0.5f) == 0 && it_sc_cvt_fp32_u8(-7.0f) == 0 && it_sc_cvt_fp32_u8(300.0f) == 255);
    CHECK(it_sc_cvt_i32_u8(-1) == 255 && it_sc_cvt_u64_i8(0x1ff) == -1 && it_sc_cvt_fp32_boolean(NAN) == 1);
    CHECK(it_sc_cvt_fp64_fp16(65520.0) == 0x7c00 && it_sc_cvt_fp64_fp16(65519.99) == 0x7bff);
    CHECK(it_sc_cvt_u64_bf16((1ull << 24) + 1) == 0x4b80 && it_sc_cvt_i64_bf16(-1) == 0xbf80);
}

/* ---------------------------------------------------------------- reduce: the kernel's tree walk */

/* What reduce_kernel computes for output o with 2^logP lanes (kernels_ew.cu), step by step:
 * each lane descends the top levels by its bits, the leaders evaluate their subtrees, the
 * halves join back up level by level. */
#define DEF_SIM(T, SFX, DIV)                                                                                           \
    static T sim_##SFX(const it_cu_red_plan *p, const T *x, int64_t o, int logP, bool mean) {                          \
        T val[256];                                                                                                    \
        unsigned splits[256];                                                                                          \
        const int P = 1 << logP;                                                                                       \
        const T *xo = x + it_cu_offset_of(o, p->nk, p->kshape, p->kxs);                                                \
        for (int lane = 0; lane < P; lane++) {                                                                         \
            it_cu_rnode node = it_cu_red_root(p);                                                                      \
            unsigned sp = 0;                                                                                           \
            int Pc = P;                                                                                                \
            for (int level = 0; Pc > 1 && it_cu_red_split(node); level++) {                                            \
                Pc >>= 1;                                                                                              \
                node = (lane & Pc) ? it_cu_red_right(p, node) : it_cu_red_left(p, node);                               \
                sp |= 1u << level;                                                                                     \
            }                                                                                                          \
            splits[lane] = sp;                                                                                         \
            val[lane] = (lane & (Pc - 1)) == 0 ? it_cu_red_subtree_##SFX(p, xo, node) : (T)0;                          \
        }                                                                                                              \
        for (int L = logP - 1; L >= 0; L--) {                                                                          \
            int gs = P >> L;                                                                                           \
            for (int lane = 0; lane < P; lane++)                                                                       \
                if (((splits[lane] >> L) & 1) && (lane & (gs - 1)) == 0)                                               \
                    val[lane] = it_cu_red_join_##SFX(val[lane], val[lane + gs / 2], p->op);                            \
        }                                                                                                              \
        return mean ? DIV(val[0], (T)p->nred) : val[0];                                                                \
    }
DEF_SIM(float, f32, it_sc_fdiv)
DEF_SIM(double, f64, it_sc_ddiv)

typedef struct red_case {
    int ndim;
    int64_t shape[4];
    int perm[4]; /* x's memory order: dim perm[0] outermost (a transposed view when not 0,1,2,...) */
    bool red[4]; /* reduced dims */
} red_case;

static void test_reduce(void) {
    const red_case cases[] = {
        {1, {1000}, {0}, {true}},
        {1, {12293}, {0}, {true}},
        {2, {7, 300}, {0, 1}, {false, true}},
        {2, {7, 300}, {0, 1}, {true, false}},  /* the CPU's column path */
        {2, {1030, 3}, {0, 1}, {true, false}}, /* a long column */
        {2, {64, 130}, {1, 0}, {false, true}}, /* transposed: inner stride 64 */
        {3, {3, 5, 257}, {0, 1, 2}, {true, false, true}},
        {3, {40, 33, 17}, {0, 1, 2}, {true, true, true}},
        {3, {300, 3, 200}, {0, 1, 2}, {true, false, true}}, /* 300 outer rows */
        {3, {2, 1, 3}, {0, 1, 2}, {true, true, false}},     /* size-1 dims */
        {3, {1, 1, 1}, {0, 1, 2}, {true, true, true}},      /* one element */
        {4, {5, 6, 7, 8}, {0, 1, 2, 3}, {false, true, false, true}},
        {4, {9, 4, 3, 70}, {3, 1, 0, 2}, {true, false, true, true}},
        {2, {5, 0}, {0, 1}, {false, true}}, /* empty: checked against backend.h's identities */
    };
    enum { XMAX = 1 << 18 };
    static float xf[XMAX];
    static double xd[XMAX];
    static float outf[4096], simf[4096];
    static double outd[4096];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const red_case *rc = &cases[c];
        it_tdesc x, out;
        memset(&x, 0, sizeof x), memset(&out, 0, sizeof out);
        x.ndim = out.ndim = rc->ndim;
        int64_t n = 1;
        for (int d = 0; d < rc->ndim; d++) {
            x.shape[d] = rc->shape[d];
            out.shape[d] = rc->red[d] ? 1 : rc->shape[d];
        }
        for (int k = rc->ndim - 1; k >= 0; k--) { /* strides in memory order perm */
            x.strides[rc->perm[k]] = n;
            n *= rc->shape[rc->perm[k]];
        }
        int64_t no = 1;
        for (int d = rc->ndim - 1; d >= 0; d--) {
            out.strides[d] = no;
            no *= out.shape[d];
        }
        if (n > XMAX || no > 4096) { /* the buffers below */
            CHECK_MSG(false, "reduce case %zu too large", c);
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            float v = ((float)(rnd32() >> 8) / 16777216.0f - 0.5f) * (i % 11 == 0 ? 1000.0f : 2.0f);
            xf[i] = v;
            xd[i] = (double)v * (1.0 + 1e-10 * (double)(i % 13));
        }
        if (n > 20) xf[n / 3] = -0.0f, xf[n / 2] = 0.0f; /* signed zeros in MAX */
        for (int op = 0; op < IT_REDUCE_COUNT; op++) {
            for (int nan = 0; nan < 2; nan++) {
                if (nan && n > 0) xf[(n * 2) / 3] = NAN, xd[(n * 2) / 3] = NAN;
                x.dtype = out.dtype = IT_DTYPE_FP32;
                x.data = xf, out.data = outf;
                CHECK_OK(it_cpu_kernels()->reduce(NULL, (it_reduce_op)op, &x, &out));
                it_cu_red_plan p = it_cu_red_plan_build(&x, &out, op);
                CHECK(p.nout == no);
                if (p.nred == 0) { /* the kernel writes the identity: 0, NaN (MEAN), -Inf (MAX) */
                    for (int64_t o = 0; o < no; o++)
                        CHECK(op == IT_REDUCE_MAX    ? outf[o] == -(float)INFINITY
                              : op == IT_REDUCE_MEAN ? isnan(outf[o])
                                                     : outf[o] == 0.0f);
                    continue;
                }
                CHECK(it_cu_red_depth(&p) <= IT_CU_RED_MAX_DEPTH);
                for (int logP = 0; logP <= 8; logP += (logP < 2 ? 1 : 3)) {
                    int bad = 0;
                    for (int64_t o = 0; o < no; o++) {
                        simf[o] = sim_f32(&p, xf, o, logP, op == IT_REDUCE_MEAN);
                        it_test_checks++;
                        if (!same_f32(simf[o], outf[o]) && bad++ < 3) {
                            it_test_failures++;
                            fprintf(stderr, "reduce f32 case %zu op %d nan %d P %d out %lld: %a, cpu %a\n", c, op, nan,
                                    1 << logP, (long long)o, (double)simf[o], (double)outf[o]);
                        }
                    }
                }
                x.dtype = out.dtype = IT_DTYPE_FP64;
                x.data = xd, out.data = outd;
                CHECK_OK(it_cpu_kernels()->reduce(NULL, (it_reduce_op)op, &x, &out));
                for (int logP = 0; logP <= 8; logP += 4) {
                    int bad = 0;
                    for (int64_t o = 0; o < no; o++) {
                        double got = sim_f64(&p, xd, o, logP, op == IT_REDUCE_MEAN);
                        it_test_checks++;
                        if (!same_f64(got, outd[o]) && bad++ < 3) {
                            it_test_failures++;
                            fprintf(stderr, "reduce f64 case %zu op %d P %d out %lld: %a, cpu %a\n", c, op, 1 << logP,
                                    (long long)o, got, outd[o]);
                        }
                    }
                }
            }
            if (n > 0) xf[(n * 2) / 3] = 1.0f, xd[(n * 2) / 3] = 1.0;
        }
    }
}

/* max / min where the order of the operands shows: signed zeros and NaN payloads, pairwise
 * in binary and through the reduce tree (which must join left, right as the CPU does). */
static void test_order_sensitive(void) {
    const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u,
                           0x7fc00001u, 0xffc00002u, 0x7f800000u, 0xff800000u};
    enum { K = sizeof sp / sizeof sp[0] };
    float a[K * K], b[K * K], r[K * K];
    for (int i = 0; i < K * K; i++) a[i] = bits_f32(sp[i / K]), b[i] = bits_f32(sp[i % K]);
    it_tdesc ad = flat(a, IT_DTYPE_FP32, K * K), bd = flat(b, IT_DTYPE_FP32, K * K), rd = flat(r, IT_DTYPE_FP32, K * K);
    for (int op = IT_BINARY_MAX; op <= IT_BINARY_MIN; op++) {
        CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)op, &ad, &bd, &rd));
        for (int i = 0; i < K * K; i++)
            CHECK_MSG(same_f32(it_cu_binary_f32(op, a[i], b[i]), r[i]), "op %d (%a, %a)", op, (double)a[i],
                      (double)b[i]);
    }
    /* reduce MAX over signed zeros only, then with two NaNs of different payloads */
    enum { N = 1000 };
    static float x[N];
    for (int trial = 0; trial < 12; trial++) {
        const bool nan = trial >= 8;
        for (int i = 0; i < N; i++) x[i] = (rnd32() & 1) ? 0.0f : -0.0f;
        if (nan) x[137 + 50 * trial] = bits_f32(0x7fc00011u), x[990 - trial] = bits_f32(0xffc00022u);
        for (int len = 1; len <= N; len = len < N / 2 ? len * 2 + 1 : N) {
            float out;
            it_tdesc xd = flat(x, IT_DTYPE_FP32, len), od = flat(&out, IT_DTYPE_FP32, 1);
            CHECK_OK(it_cpu_kernels()->reduce(NULL, IT_REDUCE_MAX, &xd, &od));
            it_cu_red_plan p = it_cu_red_plan_build(&xd, &od, IT_REDUCE_MAX);
            for (int logP = 0; logP <= 8; logP++)
                CHECK_MSG(same_f32(sim_f32(&p, x, 0, logP, false), out), "max of %d zeros, P %d: %a vs cpu %a", len,
                          1 << logP, (double)sim_f32(&p, x, 0, logP, false), (double)out);
            if (len == N) break;
        }
    }
}

/* ---------------------------------------------------------------- dense sampling of the copies
 * cu_math.h's exp / tanh / GELU / SiLU and their backwards are copies of the CPU's (written
 * with the unfused device operations, where the CPU's are plain arithmetic inside its
 * vectorized loops): every unary and binary op over 2^21 random 32-bit patterns (NaNs,
 * infinities and subnormals included, in their natural share), a quarter of them in
 * |x| < 128, where the formulas switch, bit for bit. */
static void test_dense_f32(void) {
    enum { N = 1 << 21 };
    static float x[N], y[N], ref[N];
    for (int i = 0; i < N; i++) x[i] = bits_f32(rnd32()), y[i] = bits_f32(rnd32());
    for (int i = 0; i < N / 4; i++) x[i] = bits_f32(rnd32() % 0x43000000u | (rnd32() & 0x80000000u));
    it_tdesc xd = flat(x, IT_DTYPE_FP32, N), yd = flat(y, IT_DTYPE_FP32, N), rd = flat(ref, IT_DTYPE_FP32, N);
    for (int op = 0; op < IT_UNARY_COUNT + IT_BINARY_COUNT; op++) {
        bool un = op < IT_UNARY_COUNT;
        if (un)
            CHECK_OK(it_cpu_kernels()->unary(NULL, (it_unary_op)op, 0.75f, &xd, &rd));
        else
            CHECK_OK(it_cpu_kernels()->binary(NULL, (it_binary_op)(op - IT_UNARY_COUNT), &xd, &yd, &rd));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float got = un ? it_cu_unary_f32(op, 0.75f, x[i]) : it_cu_binary_f32(op - IT_UNARY_COUNT, x[i], y[i]);
            /* two NaN operands: IEEE leaves open whose payload the result carries (x86 keeps
             * the first, and the CPU's compiler may swap a commutative op's operands) */
            if (!un && x[i] != x[i] && y[i] != y[i] && got != got && ref[i] != ref[i]) continue;
            if (!same_f32(got, ref[i]) && !nan_sign_only_f32(got, ref[i]) && bad++ < 3)
                CHECK_MSG(false, "%s op %d at (%a, %a): %a, cpu %a", un ? "unary" : "binary",
                          un ? op : op - IT_UNARY_COUNT, (double)x[i], (double)y[i], (double)got, (double)ref[i]);
        }
        CHECK_MSG(bad == 0, "op %d: %d of %d differ", op, bad, N);
    }
}

/* The device's fp64 <-> fp32 conversions spell NaN out (it_sc_fp64_nan_to_fp32 and back);
 * the host's are C's: every fp32 NaN, and 2^22 random fp64 NaN payloads, bit for bit. */
static void test_nan_conversions(void) {
    int bad = 0;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t man = 1; man < 0x800000u; man++) {
            float f = bits_f32(sign << 31 | 0x7f800000u | man);
            if (!same_f64(it_sc_fp32_nan_to_fp64(f), (double)f) && bad++ < 3)
                CHECK_MSG(false, "fp32 NaN 0x%08x -> fp64", (unsigned)it_sc_f32_bits(f));
        }
    for (int i = 0; i < (1 << 22); i++) {
        uint64_t man = rnd64() & ((UINT64_C(1) << 52) - 1);
        double d = it_sc_bits_f64((rnd64() & UINT64_C(0x8000000000000000)) | UINT64_C(0x7ff0000000000000) | man);
        if (man == 0) continue; /* Inf */
        if (!same_f32(it_sc_fp64_nan_to_fp32(d), (float)d) && bad++ < 3)
            CHECK_MSG(false, "fp64 NaN 0x%016llx -> fp32", (unsigned long long)it_sc_f64_bits(d));
        if (!same_f32(it_sc_cvt_fp64_fp32(d), (float)d) && bad++ < 3) CHECK_MSG(false, "cvt fp64 -> fp32 of a NaN");
    }
    CHECK(bad == 0);
}

int main(void) {
    test_unary_binary_f32();
    test_unary_binary_f64();
    test_half_paths();
    test_optim();
    test_cast();
    test_reduce();
    test_order_sensitive();
    test_dense_f32();
    test_nan_conversions();
    return it_test_report("test_cuda_math");
}
