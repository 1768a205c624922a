/* TEST DOUBLE's own test: the CPU stand-in of libcnnl.so against straightforward references
 * (long double rounding for casts, float k-order products, double norms and softmax), and
 * its refusals (bad descriptors, too little workspace, MLU500-only types on an MLU370).
 *
 * Run without arguments it first runs itself again as an MLU370
 * (IT_CAMBRICON_STANDIN_ARCH=372, read once per process by the stand-in's CNRT) for the
 * rules that differ there, then runs everything as the default MLU590. Prints
 * "N passed, M failed" last and exits non-zero on any failure. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "standin_internal.h"

static int passed, failed;

static void check(bool ok, int line, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL (line %d): ", line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
#define CHECK(cond, ...) check((cond), __LINE__, __VA_ARGS__)
#define CHECK_ST(call, want) CHECK_ST_((call), (want), #call, __LINE__)
static void CHECK_ST_(cnnlStatus_t got, cnnlStatus_t want, const char *what, int line) {
    check(got == want, line, "%s returned %s, want %s", what, cnnlGetErrorString(got), cnnlGetErrorString(want));
}

/* ---------------------------------------------------------------- fixtures */

static cnrtQueue_t Q;
static cnnlHandle_t H;

#define MAX_OWNED 4096
static void *owned_mem[MAX_OWNED];
static cnnlTensorDescriptor_t owned_desc[MAX_OWNED];
static int n_mem, n_desc;

static void *dev(size_t bytes) {
    void *p = NULL;
    if (cnrtMalloc(&p, bytes ? bytes : 1) != cnrtSuccess || n_mem == MAX_OWNED) abort();
    return owned_mem[n_mem++] = p;
}

static void *up(const void *host, size_t bytes) {
    void *p = dev(bytes);
    if (bytes && cnrtMemcpy(p, (void *)host, bytes, cnrtMemcpyHostToDev) != cnrtSuccess) abort();
    return p;
}

/* Waits for the queue; false (and no copy) when a queued job faulted. */
static bool down(void *host, const void *p, size_t bytes) {
    if (cnrtQueueSync(Q) != cnrtSuccess) return false;
    return cnrtMemcpy(host, (void *)p, bytes, cnrtMemcpyDevToHost) == cnrtSuccess;
}

/* A descriptor; strides NULL: dense. */
static cnnlTensorDescriptor_t desc(cnnlDataType_t dt, int n, const int *dims, const int *strides) {
    int dense[8], s = 1;
    for (int i = n - 1; i >= 0; i--) dense[i] = s, s *= dims[i];
    cnnlTensorDescriptor_t d;
    if (cnnlCreateTensorDescriptor(&d) != CNNL_STATUS_SUCCESS || n_desc == MAX_OWNED) abort();
    if (cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, dt, n, dims, strides ? strides : dense) != CNNL_STATUS_SUCCESS)
        abort();
    return owned_desc[n_desc++] = d;
}
static cnnlTensorDescriptor_t desc1(cnnlDataType_t dt, int n) { return desc(dt, 1, &n, NULL); }
static cnnlTensorDescriptor_t desc2(cnnlDataType_t dt, int a, int b) { return desc(dt, 2, (int[]){a, b}, NULL); }
static cnnlTensorDescriptor_t desc3(cnnlDataType_t dt, int a, int b, int c) {
    return desc(dt, 3, (int[]){a, b, c}, NULL);
}

static void release_all(void) {
    for (int i = 0; i < n_desc; i++) cnnlDestroyTensorDescriptor(owned_desc[i]);
    for (int i = 0; i < n_mem; i++) cnrtFree(owned_mem[i]);
    n_desc = n_mem = 0;
}

static uint32_t rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1 << 23) - 1.0f;
}

static bool is_mlu500(void) { return standin_arch() >= 500; }

/* ---------------------------------------------------------------- reference rounding */

/* x rounded to p significant bits, the unit in the last place at least 2^minexp (subnormals),
 * to nearest even or toward zero; above max: Inf to nearest, max toward zero. */
static long double ref_round(long double x, int p, int minexp, long double max, bool toward_zero) {
    if (x == 0 || isnan(x) || isinf(x)) return x;
    int e;
    frexpl(x, &e); /* 2^(e-1) <= |x| < 2^e */
    long double ulp = ldexpl(1.0L, e - p > minexp ? e - p : minexp);
    long double q = fabsl(x) / ulp, r = floorl(q), frac = q - r;
    if (!toward_zero && (frac > 0.5L || (frac == 0.5L && fmodl(r, 2.0L) == 1.0L))) r += 1;
    long double v = r * ulp;
    if (v > max) v = toward_zero ? max : INFINITY;
    return x < 0 ? -v : v;
}

static const long double HALF_MAX = 65504.0L, BF16_MAX = 0x1.fep127L, TF32_MAX = 0x1.ffcp127L;

static size_t dsize(cnnlDataType_t dt) {
    switch (dt) {
    case CNNL_DTYPE_BOOL:
    case CNNL_DTYPE_INT8:
    case CNNL_DTYPE_UINT8: return 1;
    case CNNL_DTYPE_HALF:
    case CNNL_DTYPE_BFLOAT16:
    case CNNL_DTYPE_INT16: return 2;
    case CNNL_DTYPE_FLOAT:
    case CNNL_DTYPE_INT32: return 4;
    default: return 8;
    }
}

static bool is_real(cnnlDataType_t dt) {
    return dt == CNNL_DTYPE_HALF || dt == CNNL_DTYPE_BFLOAT16 || dt == CNNL_DTYPE_FLOAT || dt == CNNL_DTYPE_DOUBLE;
}

/* IEEE half by arithmetic: 5 exponent bits (bias 15), 10 fraction bits. */
static long double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, f = h & 0x3ff;
    long double m = e == 0x1f ? (f ? NAN : INFINITY) : e ? ldexpl(1024 + f, e - 25) : ldexpl(f, -24);
    return h & 0x8000 ? -m : m;
}

/* The half holding v exactly (v representable, Inf or NaN). */
static uint16_t half_bits(long double v) {
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    long double a = fabsl(v);
    if (isnan(v)) return 0x7e00;
    if (isinf(v)) return sign | 0x7c00;
    if (a < 0x1p-14L) return sign | (uint16_t)(a * 0x1p24L);
    int e;
    long double m = frexpl(a, &e); /* a = m 2^e, m in [0.5, 1) */
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)(m * 2048 - 1024);
}

/* The exact value of an element. */
static long double value_of(cnnlDataType_t dt, const unsigned char *p) {
    switch (dt) {
    case CNNL_DTYPE_BOOL: return *p != 0;
    case CNNL_DTYPE_UINT8: return *p;
    case CNNL_DTYPE_INT8: return (int8_t)*p;
    case CNNL_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case CNNL_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CNNL_DTYPE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    case CNNL_DTYPE_HALF: return half_value((uint16_t)(p[0] | p[1] << 8));
    case CNNL_DTYPE_BFLOAT16: {
        uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case CNNL_DTYPE_FLOAT: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    }
}

/* Stores v, already representable in dt (or NaN), into p. */
static void encode(cnnlDataType_t dt, long double v, unsigned char *p) {
    if (dt == CNNL_DTYPE_HALF) {
        uint16_t h = half_bits(v);
        p[0] = (unsigned char)h, p[1] = (unsigned char)(h >> 8);
    } else if (dt == CNNL_DTYPE_BFLOAT16) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        p[0] = (unsigned char)(u >> 16), p[1] = (unsigned char)(u >> 24);
    } else if (dt == CNNL_DTYPE_FLOAT) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else if (dt == CNNL_DTYPE_DOUBLE) {
        double d = (double)v;
        memcpy(p, &d, 8);
    } else {
        int64_t i = (int64_t)v;
        memcpy(p, &i, dsize(dt)); /* little endian: the low bytes */
    }
}

/* The documented conversion of exact value v to dt: floats round to nearest even (toward
 * zero where the cast says so); to integers truncate, saturate, NaN -> 0; to bool != 0. */
static long double ref_convert(long double v, cnnlDataType_t to, bool toward_zero) {
    switch (to) {
    case CNNL_DTYPE_HALF: return ref_round(v, 11, -24, HALF_MAX, toward_zero);
    case CNNL_DTYPE_BFLOAT16: return ref_round(v, 8, -133, BF16_MAX, toward_zero);
    case CNNL_DTYPE_FLOAT: return ref_round(v, 24, -149, FLT_MAX, toward_zero);
    case CNNL_DTYPE_DOUBLE: return ref_round(v, 53, -1074, DBL_MAX, toward_zero);
    case CNNL_DTYPE_BOOL: return v != 0;
    default: break;
    }
    if (isnan(v)) return 0;
    long double lo = to == CNNL_DTYPE_UINT8   ? 0
                     : to == CNNL_DTYPE_INT8  ? INT8_MIN
                     : to == CNNL_DTYPE_INT16 ? INT16_MIN
                     : to == CNNL_DTYPE_INT32 ? INT32_MIN
                                              : INT64_MIN;
    long double hi = to == CNNL_DTYPE_UINT8   ? UINT8_MAX
                     : to == CNNL_DTYPE_INT8  ? INT8_MAX
                     : to == CNNL_DTYPE_INT16 ? INT16_MAX
                     : to == CNNL_DTYPE_INT32 ? INT32_MAX
                                              : INT64_MAX;
    v = truncl(v);
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---------------------------------------------------------------- basics, descriptors */

static void test_basics(void) {
    int ma = 0, mi = 0, pa = 0;
    cnnlGetLibVersion(&ma, &mi, &pa);
    CHECK(ma == 1 && mi == 28 && pa == 6, "version %d.%d.%d", ma, mi, pa);
    CHECK(!strcmp(cnnlGetErrorString(CNNL_STATUS_SUCCESS), "CNNL_STATUS_SUCCESS"), "SUCCESS string");
    CHECK(!strcmp(cnnlGetErrorString(CNNL_STATUS_ARCH_MISMATCH), "CNNL_STATUS_ARCH_MISMATCH"), "ARCH string");
    CHECK(!strcmp(cnnlGetErrorString((cnnlStatus_t)999), "CNNL_STATUS_BAD_PARAM"), "unknown status string");
    CHECK_ST(cnnlCreate(NULL), CNNL_STATUS_BAD_PARAM);
    cnrtQueue_t q = NULL;
    CHECK_ST(cnnlGetQueue(H, &q), CNNL_STATUS_SUCCESS);
    CHECK(q == Q, "cnnlGetQueue gives the queue set");

    cnnlTensorDescriptor_t d;
    CHECK_ST(cnnlCreateTensorDescriptor(&d), CNNL_STATUS_SUCCESS);
    int dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, str[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, 9, dims, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, -1, dims, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, 8, dims, str), CNNL_STATUS_SUCCESS);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_INVALID, 1, dims, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, (cnnlDataType_t)10, 1, dims, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, (cnnlTensorLayout_t)99, CNNL_DTYPE_FLOAT, 1, dims, str),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, 1, (int[]){-1}, str),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(d, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, 1, NULL, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetTensorDescriptorEx(NULL, CNNL_LAYOUT_ARRAY, CNNL_DTYPE_FLOAT, 1, dims, str), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlDestroyTensorDescriptor(d), CNNL_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------- copy */

static void test_copy(void) {
    float h[12], got[12];
    for (int i = 0; i < 12; i++) h[i] = (float)i;
    void *x = up(h, sizeof h), *y = dev(sizeof h);
    /* x as a (3, 4) matrix read transposed: (4, 3) with strides (1, 4) */
    cnnlTensorDescriptor_t xt = desc(CNNL_DTYPE_FLOAT, 2, (int[]){4, 3}, (int[]){1, 4});
    CHECK_ST(cnnlCopy(H, xt, x, desc2(CNNL_DTYPE_FLOAT, 4, 3), y), CNNL_STATUS_SUCCESS);
    bool ok = down(got, y, sizeof got);
    for (int r = 0; ok && r < 4; r++)
        for (int c = 0; c < 3; c++) ok = got[r * 3 + c] == h[c * 4 + r];
    CHECK(ok, "strided copy transposes");
    CHECK_ST(cnnlCopy(H, desc2(CNNL_DTYPE_FLOAT, 4, 3), x, desc2(CNNL_DTYPE_INT32, 4, 3), y), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlCopy(H, desc2(CNNL_DTYPE_FLOAT, 4, 3), x, desc2(CNNL_DTYPE_FLOAT, 3, 4), y), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlCopy(NULL, desc2(CNNL_DTYPE_FLOAT, 4, 3), x, desc2(CNNL_DTYPE_FLOAT, 4, 3), y), CNNL_STATUS_BAD_PARAM);
    /* a host pointer where device memory belongs faults the queue, as on the device */
    CHECK_ST(cnnlCopy(H, desc2(CNNL_DTYPE_FLOAT, 4, 3), h, desc2(CNNL_DTYPE_FLOAT, 4, 3), y), CNNL_STATUS_SUCCESS);
    CHECK(cnrtQueueSync(Q) == cnrtErrorQueue, "host memory given as device memory faults the queue");
}

/* ---------------------------------------------------------------- casts */

enum { ONLY500 = 1, RTZ = 2 };
typedef struct cast_case {
    cnnlCastDataType_t cast;
    cnnlDataType_t from, to;
    int flags;
    const char *name;
} cast_case;
#define CC(n, f, t, fl)                                                                                                \
    { CNNL_CAST_##n, CNNL_DTYPE_##f, CNNL_DTYPE_##t, fl, #n }
static const cast_case casts[] = {
    CC(FLOAT_TO_HALF, FLOAT, HALF, 0),
    CC(FLOAT_TO_INT32, FLOAT, INT32, 0),
    CC(FLOAT_TO_INT16, FLOAT, INT16, 0),
    CC(FLOAT_TO_INT8, FLOAT, INT8, 0),
    CC(FLOAT_TO_UINT8, FLOAT, UINT8, 0),
    CC(FLOAT_TO_BOOL, FLOAT, BOOL, 0),
    CC(FLOAT_TO_INT64, FLOAT, INT64, 0),
    CC(FLOAT_TO_DOUBLE, FLOAT, DOUBLE, 0),
    CC(FLOAT_TO_BFLOAT16, FLOAT, BFLOAT16, ONLY500),
    CC(HALF_TO_FLOAT, HALF, FLOAT, 0),
    CC(HALF_TO_INT32, HALF, INT32, 0),
    CC(HALF_TO_INT16, HALF, INT16, 0),
    CC(HALF_TO_INT8, HALF, INT8, 0),
    CC(HALF_TO_UINT8, HALF, UINT8, 0),
    CC(HALF_TO_BOOL, HALF, BOOL, 0),
    CC(HALF_TO_INT64, HALF, INT64, 0),
    CC(INT32_TO_FLOAT, INT32, FLOAT, RTZ),
    CC(INT32_TO_HALF, INT32, HALF, 0),
    CC(INT32_TO_BFLOAT16, INT32, BFLOAT16, 0),
    CC(INT32_TO_INT8, INT32, INT8, 0),
    CC(INT32_TO_INT16, INT32, INT16, 0),
    CC(INT32_TO_UINT8, INT32, UINT8, 0),
    CC(INT32_TO_BOOL, INT32, BOOL, 0),
    CC(INT32_TO_INT64, INT32, INT64, 0),
    CC(INT16_TO_FLOAT, INT16, FLOAT, 0),
    CC(INT16_TO_HALF, INT16, HALF, 0),
    CC(INT16_TO_BFLOAT16, INT16, BFLOAT16, ONLY500),
    CC(INT16_TO_INT32, INT16, INT32, 0),
    CC(INT16_TO_INT8, INT16, INT8, 0),
    CC(INT16_TO_INT64, INT16, INT64, 0),
    CC(INT8_TO_FLOAT, INT8, FLOAT, 0),
    CC(INT8_TO_HALF, INT8, HALF, 0),
    CC(INT8_TO_BFLOAT16, INT8, BFLOAT16, ONLY500),
    CC(INT8_TO_INT32, INT8, INT32, 0),
    CC(INT8_TO_INT16, INT8, INT16, 0),
    CC(UINT8_TO_FLOAT, UINT8, FLOAT, 0),
    CC(UINT8_TO_HALF, UINT8, HALF, 0),
    CC(UINT8_TO_BFLOAT16, UINT8, BFLOAT16, ONLY500),
    CC(UINT8_TO_INT32, UINT8, INT32, 0),
    CC(UINT8_TO_INT64, UINT8, INT64, 0),
    CC(BOOL_TO_FLOAT, BOOL, FLOAT, 0),
    CC(BOOL_TO_HALF, BOOL, HALF, 0),
    CC(BOOL_TO_BFLOAT16, BOOL, BFLOAT16, ONLY500),
    CC(BOOL_TO_INT32, BOOL, INT32, 0),
    CC(BOOL_TO_INT64, BOOL, INT64, 0),
    CC(INT64_TO_INT32, INT64, INT32, 0),
    CC(INT64_TO_INT16, INT64, INT16, 0),
    CC(INT64_TO_BOOL, INT64, BOOL, 0),
    CC(INT64_TO_FLOAT, INT64, FLOAT, 0),
    CC(INT64_TO_HALF, INT64, HALF, 0),
    CC(INT64_TO_BFLOAT16, INT64, BFLOAT16, ONLY500),
    CC(INT64_TO_DOUBLE, INT64, DOUBLE, 0),
    CC(BFLOAT16_TO_FLOAT, BFLOAT16, FLOAT, ONLY500),
    CC(BFLOAT16_TO_INT8, BFLOAT16, INT8, ONLY500),
    CC(BFLOAT16_TO_UINT8, BFLOAT16, UINT8, ONLY500),
    CC(BFLOAT16_TO_INT16, BFLOAT16, INT16, ONLY500),
    CC(BFLOAT16_TO_INT32, BFLOAT16, INT32, ONLY500),
    CC(BFLOAT16_TO_INT64, BFLOAT16, INT64, ONLY500),
    CC(BFLOAT16_TO_BOOL, BFLOAT16, BOOL, ONLY500),
    CC(DOUBLE_TO_FLOAT, DOUBLE, FLOAT, 0),
    CC(DOUBLE_TO_INT64, DOUBLE, INT64, 0),
};
#undef CC

/* Edge values: zeros, halfway cases of every target width, range ends, NaN, Inf. */
static const double real_edges[] = {0.0,
                                    -0.0,
                                    1.0,
                                    -1.0,
                                    1.5,
                                    -1.5,
                                    2.5,
                                    -2.5,
                                    0.999,
                                    -0.999,
                                    127.9,
                                    128.0,
                                    -128.9,
                                    -129.0,
                                    255.5,
                                    256.0,
                                    -0.5,
                                    32767.5,
                                    32768.0,
                                    -32768.9,
                                    -32769.0,
                                    2049.0,
                                    2051.0,
                                    65504.0,
                                    65519.0,
                                    65520.0,
                                    65536.0,
                                    -65520.0,
                                    0x1p-24,
                                    0x1p-25,
                                    0x1.8p-25,
                                    0x1.8p-24,
                                    0x1p-26,
                                    0x1.002p0,
                                    0x1.006p0,
                                    0x1.01p0,
                                    0x1.03p0,
                                    0x1.000001p0,
                                    0x1.000003p0,
                                    0x1p-149,
                                    0x1p-150,
                                    0x1.8p-150,
                                    0x1p-126,
                                    2147483520.0,
                                    2147483648.0,
                                    -2147483648.0,
                                    -2147483904.0,
                                    9.2233720368547758e18,
                                    -9.2233720368547758e18,
                                    1e19,
                                    -1e19,
                                    1e30,
                                    -1e30,
                                    0x1.fffffep127,
                                    0x1.ffffffp127,
                                    0x1.fffffe8p127,
                                    1e300,
                                    -1e300,
                                    INFINITY,
                                    -INFINITY,
                                    NAN,
                                    -NAN};
static const int64_t int_edges[] = {0,
                                    1,
                                    -1,
                                    2,
                                    100,
                                    127,
                                    128,
                                    -128,
                                    -129,
                                    255,
                                    256,
                                    257,
                                    2049,
                                    2051,
                                    32767,
                                    32768,
                                    -32768,
                                    -32769,
                                    65504,
                                    65519,
                                    65520,
                                    -65520,
                                    16777217,
                                    16777219,
                                    -16777219,
                                    (1 << 24) + 8 * 3,
                                    2147483520,
                                    2147483647,
                                    -2147483647 - 1,
                                    2147483648LL,
                                    (1LL << 53) + 1,
                                    (1LL << 40) + (1LL << 32) + (1LL << 15),
                                    INT64_MAX,
                                    INT64_MIN,
                                    -(1LL << 62) - 1};

/* Every value of the edge lists dt can hold (all 65536 patterns of a 16-bit float type). */
static int make_source(cnnlDataType_t dt, unsigned char *buf, int cap) {
    int n = 0;
    size_t w = dsize(dt);
    if (dt == CNNL_DTYPE_HALF || dt == CNNL_DTYPE_BFLOAT16) {
        for (uint32_t u = 0; u < 65536 && n < cap; u++, n++)
            buf[2 * n] = (unsigned char)u, buf[2 * n + 1] = (unsigned char)(u >> 8);
        return n;
    }
    if (is_real(dt)) {
        for (size_t i = 0; i < sizeof real_edges / sizeof real_edges[0]; i++) {
            long double v = dt == CNNL_DTYPE_FLOAT ? (long double)(float)real_edges[i] : (long double)real_edges[i];
            encode(dt, v, buf + w * (size_t)n++);
        }
        return n;
    }
    for (size_t i = 0; i < sizeof int_edges / sizeof int_edges[0]; i++) {
        long double v = (long double)int_edges[i];
        if (dt == CNNL_DTYPE_BOOL && v != 0 && v != 1) continue;
        if (ref_convert(v, dt, false) != v) continue; /* out of dt's range */
        encode(dt, v, buf + w * (size_t)n++);
    }
    return n;
}

static bool same_element(cnnlDataType_t dt, const unsigned char *a, const unsigned char *b) {
    if (is_real(dt) && isnan(value_of(dt, a)) && isnan(value_of(dt, b))) return true;
    return !memcmp(a, b, dsize(dt));
}

static void test_cast_case(const cast_case *c) {
    static unsigned char src[65536 * 8], want[65536 * 8], got[65536 * 8];
    int n = make_source(c->from, src, 65536);
    size_t wi = dsize(c->from), wo = dsize(c->to);
    void *x = up(src, (size_t)n * wi), *y = dev((size_t)n * wo);
    cnnlStatus_t st = cnnlCastDataType(H, desc1(c->from, n), x, c->cast, desc1(c->to, n), y);
    if ((c->flags & ONLY500) && !is_mlu500()) {
        CHECK(st == CNNL_STATUS_ARCH_MISMATCH, "%s on an MLU370: %s, want ARCH_MISMATCH", c->name,
              cnnlGetErrorString(st));
        return;
    }
    CHECK(st == CNNL_STATUS_SUCCESS, "%s: %s", c->name, cnnlGetErrorString(st));
    if (!down(got, y, (size_t)n * wo)) {
        CHECK(false, "%s: the queue faulted", c->name);
        return;
    }
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++) {
        long double v = value_of(c->from, src + wi * (size_t)i);
        encode(c->to, ref_convert(v, c->to, c->flags & RTZ), want + wo * (size_t)i);
        if (!same_element(c->to, want + wo * (size_t)i, got + wo * (size_t)i) && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "%s: %d of %d elements differ; first: %.20Lg -> %.20Lg, want %.20Lg", c->name, bad, n,
          first < 0 ? 0.0L : value_of(c->from, src + wi * (size_t)first),
          first < 0 ? 0.0L : value_of(c->to, got + wo * (size_t)first),
          first < 0 ? 0.0L : value_of(c->to, want + wo * (size_t)first));
}

static void test_casts(void) {
    for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++) test_cast_case(&casts[i]);
    /* the documented rounding that differs from the rest: INT32_TO_FLOAT toward zero */
    int32_t v[2] = {16777219, 2147483647};
    float got[2];
    void *x = up(v, sizeof v), *y = dev(sizeof got);
    CHECK_ST(
        cnnlCastDataType(H, desc1(CNNL_DTYPE_INT32, 2), x, CNNL_CAST_INT32_TO_FLOAT, desc1(CNNL_DTYPE_FLOAT, 2), y),
        CNNL_STATUS_SUCCESS);
    CHECK(down(got, y, sizeof got) && got[0] == 16777218.0f && got[1] == 2147483520.0f,
          "INT32_TO_FLOAT truncates: %.1f %.1f", (double)got[0], (double)got[1]);
    /* refusals: a type not matching cast_type, shapes, an unknown cast */
    CHECK_ST(
        cnnlCastDataType(H, desc1(CNNL_DTYPE_INT16, 2), x, CNNL_CAST_INT32_TO_FLOAT, desc1(CNNL_DTYPE_FLOAT, 2), y),
        CNNL_STATUS_BAD_PARAM);
    CHECK_ST(
        cnnlCastDataType(H, desc1(CNNL_DTYPE_INT32, 2), x, CNNL_CAST_INT32_TO_FLOAT, desc1(CNNL_DTYPE_FLOAT, 1), y),
        CNNL_STATUS_BAD_PARAM);
    CHECK_ST(
        cnnlCastDataType(H, desc1(CNNL_DTYPE_INT32, 2), x, (cnnlCastDataType_t)12345, desc1(CNNL_DTYPE_FLOAT, 2), y),
        CNNL_STATUS_NOT_SUPPORTED);
    /* strided input: every other element */
    int32_t w[4] = {1, -5, 3, -7};
    float g2[2];
    void *xs = up(w, sizeof w), *ys = dev(sizeof g2);
    CHECK_ST(cnnlCastDataType(H, desc(CNNL_DTYPE_INT32, 1, (int[]){2}, (int[]){2}), xs, CNNL_CAST_INT32_TO_FLOAT,
                              desc1(CNNL_DTYPE_FLOAT, 2), ys),
             CNNL_STATUS_SUCCESS);
    CHECK(down(g2, ys, sizeof g2) && g2[0] == 1.0f && g2[1] == 3.0f, "strided cast");
}

/* ---------------------------------------------------------------- matmul */

typedef struct mm_setup {
    cnnlMatMulDescriptor_t md;
    cnnlMatMulAlgo_t algo;
    cnnlMatMulHeuristicResult_t res;
} mm_setup;

static void mm_open(mm_setup *m, int ta, int tb, int use_beta, int tf32, int use_stride, bool compute) {
    int32_t ct = CNNL_DTYPE_FLOAT;
    cnnlMatMulDescCreate(&m->md);
    if (compute) cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct);
    cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_USE_BETA, &use_beta, sizeof use_beta);
    if (tf32 >= 0) cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_ALLOW_TF32, &tf32, sizeof tf32);
    cnnlSetMatMulDescAttr(m->md, CNNL_MATMUL_USE_STRIDE, &use_stride, sizeof use_stride);
    cnnlMatMulAlgoCreate(&m->algo);
    cnnlCreateMatMulHeuristicResult(&m->res);
}

static void mm_close(mm_setup *m) {
    cnnlDestroyMatMulHeuristicResult(m->res);
    cnnlMatMulAlgoDestroy(m->algo);
    cnnlMatMulDescDestroy(m->md);
}

/* Heuristic, workspace, product; the status of the product (or of the first call failing). */
static cnnlStatus_t mm_call(mm_setup *m, float alpha, float beta, cnnlTensorDescriptor_t ad, void *a,
                            cnnlTensorDescriptor_t bd, void *b, cnnlTensorDescriptor_t cd, void *c, long ws_delta) {
    int count = 0;
    size_t ws = 0;
    cnnlStatus_t st = cnnlGetBatchMatMulAlgoHeuristic(H, m->md, ad, bd, cd, NULL, 1, &m->res, &count);
    if (st == CNNL_STATUS_SUCCESS) st = cnnlGetBatchMatMulHeuristicResult(m->res, m->algo, &ws);
    if (st != CNNL_STATUS_SUCCESS) return st;
    CHECK(count == 1 && ws > 0, "heuristic: %d algos, workspace %zu", count, ws);
    void *w = dev(ws);
    return cnnlBatchMatMulBCast_v2(H, m->md, m->algo, &alpha, ad, a, bd, b, &beta, cd, c, w,
                                   (size_t)((long)ws + ws_delta));
}

/* fp32 -> TF32 by long double rounding (independent of the stand-in's bit trick) */
static float ref_tf32(float x) { return (float)ref_round(x, 11, -136, TF32_MAX, false); }

/* c (batch, M, N) = alpha * op(a) op(b) + beta * c in float, k in order; a's, b's batch
 * index from c's by `amap`, `bmap` (broadcast). */
static void ref_mm(int batch, int M, int N, int K, const float *a, bool ta, const float *b, bool tb, float *c,
                   float alpha, float beta, bool tf32, int (*amap)(int), int (*bmap)(int)) {
    for (int t = 0; t < batch; t++) {
        const float *A = a + (size_t)amap(t) * M * K, *B = b + (size_t)bmap(t) * K * N;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k++) {
                    float x = ta ? A[k * M + i] : A[i * K + k], y = tb ? B[j * K + k] : B[k * N + j];
                    if (tf32) x = ref_tf32(x), y = ref_tf32(y);
                    acc += x * y;
                }
                float *o = &c[((size_t)t * M + i) * N + j];
                *o = alpha * acc + beta * *o;
            }
    }
}
static int same_batch(int t) { return t; }
static int first_batch(int t) {
    (void)t;
    return 0;
}
static int bcast_a(int t) { return t / 3; } /* a (2, 1, ...) against c (2, 3, ...) */
static int bcast_b(int t) { return t % 3; } /* b (3, ...) */

static void test_matmul_fp32(void) {
    enum { B = 2, M = 5, N = 3, K = 7 };
    float a[B * M * K], b[B * K * N], c0[B * M * N], got[B * M * N], want[B * M * N];
    for (int i = 0; i < B * M * K; i++) a[i] = frand();
    for (int i = 0; i < B * K * N; i++) b[i] = frand();
    for (int i = 0; i < B * M * N; i++) c0[i] = frand();
    void *da = up(a, sizeof a), *db = up(b, sizeof b);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int tf32 = 0; tf32 < 2; tf32++) {
                mm_setup m;
                mm_open(&m, ta, tb, 1, tf32, 0, true);
                void *dc = up(c0, sizeof c0);
                cnnlTensorDescriptor_t ad = ta ? desc3(CNNL_DTYPE_FLOAT, B, K, M) : desc3(CNNL_DTYPE_FLOAT, B, M, K);
                cnnlTensorDescriptor_t bd = tb ? desc3(CNNL_DTYPE_FLOAT, B, N, K) : desc3(CNNL_DTYPE_FLOAT, B, K, N);
                CHECK_ST(mm_call(&m, 1.5f, 0.5f, ad, da, bd, db, desc3(CNNL_DTYPE_FLOAT, B, M, N), dc, 0),
                         CNNL_STATUS_SUCCESS);
                memcpy(want, c0, sizeof c0);
                ref_mm(B, M, N, K, a, ta, b, tb, want, 1.5f, 0.5f, tf32, same_batch, same_batch);
                CHECK(down(got, dc, sizeof got) && !memcmp(got, want, sizeof got),
                      "fp32 product ta=%d tb=%d tf32=%d matches the float k-order reference bitwise", ta, tb, tf32);
                if (tf32) { /* TF32 rounding is visible against exact fp32 products */
                    memcpy(want, c0, sizeof c0);
                    ref_mm(B, M, N, K, a, ta, b, tb, want, 1.5f, 0.5f, false, same_batch, same_batch);
                    CHECK(memcmp(got, want, sizeof got) != 0, "TF32 on differs from fp32 (ta=%d tb=%d)", ta, tb);
                }
                mm_close(&m);
            }
    /* the default is TF32 on */
    mm_setup m;
    mm_open(&m, 0, 0, 0, -1, 0, true);
    void *dc = dev(sizeof c0);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc3(CNNL_DTYPE_FLOAT, B, M, K), da, desc3(CNNL_DTYPE_FLOAT, B, K, N), db,
                     desc3(CNNL_DTYPE_FLOAT, B, M, N), dc, 0),
             CNNL_STATUS_SUCCESS);
    memset(want, 0, sizeof want);
    ref_mm(B, M, N, K, a, false, b, false, want, 1.0f, 0.0f, true, same_batch, same_batch);
    CHECK(down(got, dc, sizeof got) && !memcmp(got, want, sizeof got), "ALLOW_TF32 is on by default");
    mm_close(&m);
}

static void test_matmul_shapes(void) {
    enum { M = 4, N = 6, K = 5 };
    float a[2 * M * K], b[3 * K * N], got[6 * M * N], want[6 * M * N], nan[6 * M * N];
    for (int i = 0; i < 2 * M * K; i++) a[i] = frand();
    for (int i = 0; i < 3 * K * N; i++) b[i] = frand();
    for (int i = 0; i < 6 * M * N; i++) nan[i] = NAN;
    void *da = up(a, sizeof a), *db = up(b, sizeof b);
    mm_setup m;
    /* broadcast: a (2, 1, M, K), b (3, K, N) -> c (2, 3, M, N); USE_BETA off: c only written */
    mm_open(&m, 0, 0, 0, 0, 0, true);
    void *dc = up(nan, sizeof nan);
    CHECK_ST(mm_call(&m, 1.0f, 7.0f, desc(CNNL_DTYPE_FLOAT, 4, (int[]){2, 1, M, K}, NULL), da,
                     desc3(CNNL_DTYPE_FLOAT, 3, K, N), db, desc(CNNL_DTYPE_FLOAT, 4, (int[]){2, 3, M, N}, NULL), dc, 0),
             CNNL_STATUS_SUCCESS);
    memset(want, 0, sizeof want);
    ref_mm(6, M, N, K, a, false, b, false, want, 1.0f, 0.0f, false, bcast_a, bcast_b);
    CHECK(down(got, dc, sizeof got) && !memcmp(got, want, sizeof got), "batch broadcast, USE_BETA off");
    /* a 2-D a against a batched b */
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc2(CNNL_DTYPE_FLOAT, M, K), da, desc3(CNNL_DTYPE_FLOAT, 3, K, N), db,
                     desc3(CNNL_DTYPE_FLOAT, 3, M, N), dc, 0),
             CNNL_STATUS_SUCCESS);
    memset(want, 0, sizeof want);
    ref_mm(3, M, N, K, a, false, b, false, want, 1.0f, 0.0f, false, first_batch, same_batch);
    CHECK(down(got, dc, 3 * M * N * sizeof(float)) && !memcmp(got, want, 3 * M * N * sizeof(float)),
          "a 2-D a broadcast over b's batch");
    /* refusals */
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc(CNNL_DTYPE_FLOAT, 4, (int[]){2, 2, M, K}, NULL), da,
                     desc3(CNNL_DTYPE_FLOAT, 3, K, N), db, desc(CNNL_DTYPE_FLOAT, 4, (int[]){2, 3, M, N}, NULL), dc, 0),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc2(CNNL_DTYPE_FLOAT, M, K + 1), da, desc3(CNNL_DTYPE_FLOAT, 3, K, N), db,
                     desc3(CNNL_DTYPE_FLOAT, 3, M, N), dc, 0),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc2(CNNL_DTYPE_FLOAT, M, K), da, desc3(CNNL_DTYPE_HALF, 3, K, N), db,
                     desc3(CNNL_DTYPE_FLOAT, 3, M, N), dc, 0),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc2(CNNL_DTYPE_FLOAT, M, K), da, desc3(CNNL_DTYPE_FLOAT, 3, K, N), db,
                     desc3(CNNL_DTYPE_FLOAT, 3, M, N), dc, -1),
             CNNL_STATUS_BAD_PARAM);
    float one = 1.0f;
    CHECK_ST(cnnlBatchMatMulBCast_v2(H, m.md, m.algo, &one, desc2(CNNL_DTYPE_FLOAT, M, K), da,
                                     desc2(CNNL_DTYPE_FLOAT, K, N), db, &one, desc2(CNNL_DTYPE_FLOAT, M, N), dc, NULL,
                                     0),
             CNNL_STATUS_BAD_PARAM);
    int count = 0, two = 2, bad = 2;
    CHECK_ST(cnnlGetBatchMatMulAlgoHeuristic(H, m.md, desc2(CNNL_DTYPE_FLOAT, M, K), desc2(CNNL_DTYPE_FLOAT, K, N),
                                             desc2(CNNL_DTYPE_FLOAT, M, N), NULL, two, &m.res, &count),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetMatMulDescAttr(m.md, CNNL_MATMUL_DESC_TRANSA, &bad, sizeof bad), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSetMatMulDescAttr(m.md, CNNL_MATMUL_DESC_TRANSA, &one, 8), CNNL_STATUS_BAD_PARAM);
    mm_close(&m);
    /* without a compute type the product is refused */
    mm_open(&m, 0, 0, 0, 0, 0, false);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc2(CNNL_DTYPE_FLOAT, M, K), da, desc2(CNNL_DTYPE_FLOAT, K, N), db,
                     desc2(CNNL_DTYPE_FLOAT, M, N), dc, 0),
             CNNL_STATUS_BAD_PARAM);
    mm_close(&m);
    /* USE_STRIDE: a stored (K, M) described as (M, K) with strides (1, M); TRANSA ignored */
    mm_open(&m, 1, 0, 0, 0, 1, true);
    CHECK_ST(mm_call(&m, 1.0f, 0.0f, desc(CNNL_DTYPE_FLOAT, 2, (int[]){M, K}, (int[]){1, M}), da,
                     desc2(CNNL_DTYPE_FLOAT, K, N), db, desc2(CNNL_DTYPE_FLOAT, M, N), dc, 0),
             CNNL_STATUS_SUCCESS);
    memset(want, 0, sizeof want);
    ref_mm(1, M, N, K, a, true, b, false, want, 1.0f, 0.0f, false, first_batch, first_batch);
    CHECK(down(got, dc, M * N * sizeof(float)) && !memcmp(got, want, M * N * sizeof(float)), "USE_STRIDE strides");
    mm_close(&m);
}

static void test_matmul_low(cnnlDataType_t dt) {
    enum { M = 3, N = 4, K = 9 };
    uint16_t a[M * K], b[K * N], c[M * N];
    float af[M * K], bf[K * N], want[M * N];
    bool half = dt == CNNL_DTYPE_HALF;
    for (int i = 0; i < M * K; i++) {
        af[i] = frand();
        encode(dt, ref_convert(af[i], dt, false), (unsigned char *)&a[i]);
        af[i] = (float)value_of(dt, (unsigned char *)&a[i]);
    }
    for (int i = 0; i < K * N; i++) {
        bf[i] = frand();
        encode(dt, ref_convert(bf[i], dt, false), (unsigned char *)&b[i]);
        bf[i] = (float)value_of(dt, (unsigned char *)&b[i]);
    }
    mm_setup m;
    mm_open(&m, 0, 0, 0, 1, 0, true);
    void *da = up(a, sizeof a), *db = up(b, sizeof b), *dc = dev(sizeof c);
    cnnlStatus_t st = mm_call(&m, 1.0f, 0.0f, desc2(dt, M, K), da, desc2(dt, K, N), db, desc2(dt, M, N), dc, 0);
    mm_close(&m);
    if (!half && !is_mlu500()) {
        CHECK(st == CNNL_STATUS_ARCH_MISMATCH, "bfloat16 matmul on an MLU370: %s", cnnlGetErrorString(st));
        return;
    }
    CHECK(st == CNNL_STATUS_SUCCESS, "%s matmul: %s", half ? "half" : "bfloat16", cnnlGetErrorString(st));
    memset(want, 0, sizeof want);
    ref_mm(1, M, N, K, af, false, bf, false, want, 1.0f, 0.0f, false, first_batch, first_batch);
    bool ok = down(c, dc, sizeof c);
    for (int i = 0; ok && i < M * N; i++) { /* fp32 accumulation (no TF32 for 16-bit inputs), one rounding */
        uint16_t w;
        encode(dt, ref_convert(want[i], dt, false), (unsigned char *)&w);
        ok = w == c[i];
    }
    CHECK(ok, "%s matmul accumulates in float and rounds once", half ? "half" : "bfloat16");
}

/* ---------------------------------------------------------------- softmax */

static void test_softmax(void) {
    enum { D0 = 2, D1 = 3, D2 = 5, NE = D0 * D1 * D2 };
    float x[NE], y[NE], dy[NE], got[NE];
    for (int i = 0; i < NE; i++) x[i] = 4.0f * frand(), dy[i] = frand();
    int dims[3] = {D0, D1, D2};
    void *dx = up(x, sizeof x), *dyv = up(dy, sizeof dy), *dout = dev(sizeof got), *dyy = dev(sizeof y);
    cnnlTensorDescriptor_t d = desc3(CNNL_DTYPE_FLOAT, D0, D1, D2);
    for (int mode = 0; mode < 3; mode++)
        for (int algo = 0; algo < 3; algo++) {
            CHECK_ST(
                cnnlSoftmaxForward(H, (cnnlSoftmaxAlgorithm_t)algo, (cnnlSoftmaxMode_t)mode, NULL, d, dx, NULL, d, dyy),
                CNNL_STATUS_SUCCESS);
            bool ok = down(y, dyy, sizeof y);
            double err = 0, berr = 0;
            /* reduced dim `mode`; s: its stride */
            int s = mode == 0 ? D1 * D2 : mode == 1 ? D2 : 1, n = dims[mode];
            for (int i = 0; ok && i < NE; i++) {
                if ((i / s) % n != 0) continue; /* i: the first element of a line */
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k < n; k++) mx = fmax(mx, x[i + k * s]);
                for (int k = 0; k < n; k++) sum += exp(x[i + k * s] - mx);
                for (int k = 0; k < n; k++) {
                    double p = exp(x[i + k * s] - mx) / sum;
                    err = fmax(err, fabs((algo == CNNL_SOFTMAX_LOG ? log(p) : p) - y[i + k * s]));
                }
            }
            CHECK(ok && err < 2e-6, "softmax forward mode %d algo %d: max error %g", mode, algo, err);
            CHECK_ST(cnnlSoftmaxBackward(H, (cnnlSoftmaxAlgorithm_t)algo, (cnnlSoftmaxMode_t)mode, NULL, d, dyy, d, dyv,
                                         NULL, d, dout),
                     CNNL_STATUS_SUCCESS);
            ok = down(got, dout, sizeof got);
            for (int i = 0; ok && i < NE; i++) {
                if ((i / s) % n != 0) continue;
                double sum = 0;
                for (int k = 0; k < n; k++)
                    sum += algo == CNNL_SOFTMAX_LOG ? dy[i + k * s] : (double)dy[i + k * s] * y[i + k * s];
                for (int k = 0; k < n; k++) {
                    double yy = y[i + k * s], g = dy[i + k * s];
                    double w = algo == CNNL_SOFTMAX_LOG ? g - exp(yy) * sum : yy * (g - sum);
                    berr = fmax(berr, fabs(w - got[i + k * s]));
                }
            }
            CHECK(ok && berr < 2e-6, "softmax backward mode %d algo %d: max error %g", mode, algo, berr);
        }
    /* cnnl.h's examples */
    float ones[3] = {1, 1, 1}, four[4] = {1, 1, 1, 1}, o[4];
    void *d1 = up(four, sizeof four), *d3 = up(ones, sizeof ones), *dout3 = dev(sizeof o);
    CHECK_ST(cnnlSoftmaxForward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL,
                                desc3(CNNL_DTYPE_FLOAT, 1, 1, 4), d1, NULL, desc3(CNNL_DTYPE_FLOAT, 1, 1, 4), dout3),
             CNNL_STATUS_SUCCESS);
    CHECK(down(o, dout3, sizeof o) && o[0] == 0.25f && o[3] == 0.25f, "softmax of [1, 1, 1, 1]");
    cnnlTensorDescriptor_t d13 = desc3(CNNL_DTYPE_FLOAT, 1, 1, 3);
    CHECK_ST(cnnlSoftmaxBackward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL, d13, d3, d13, d3,
                                 NULL, d13, dout3),
             CNNL_STATUS_SUCCESS);
    CHECK(down(o, dout3, 3 * sizeof(float)) && o[0] == -2.0f, "softmax backward example: %g", (double)o[0]);
    CHECK_ST(cnnlSoftmaxBackward(H, CNNL_SOFTMAX_LOG, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL, d13, d3, d13, d3, NULL,
                                 d13, dout3),
             CNNL_STATUS_SUCCESS);
    CHECK(down(o, dout3, 3 * sizeof(float)) && fabs(o[0] + 7.154) < 1e-3, "log softmax backward example: %g",
          (double)o[0]);
    /* refusals: not 3-D, bfloat16 forward, shapes */
    CHECK_ST(cnnlSoftmaxForward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL,
                                desc2(CNNL_DTYPE_FLOAT, 3, 4), d1, NULL, desc2(CNNL_DTYPE_FLOAT, 3, 4), dout3),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSoftmaxForward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL,
                                desc3(CNNL_DTYPE_BFLOAT16, 1, 1, 4), d1, NULL, desc3(CNNL_DTYPE_BFLOAT16, 1, 1, 4),
                                dout3),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlSoftmaxForward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL,
                                desc3(CNNL_DTYPE_HALF, 1, 1, 4), d1, NULL, desc3(CNNL_DTYPE_FLOAT, 1, 1, 4), dout3),
             CNNL_STATUS_SUCCESS);
    CHECK_ST(cnnlSoftmaxForward(H, CNNL_SOFTMAX_ACCURATE, CNNL_SOFTMAX_MODE_LOW_DIMENSION, NULL,
                                desc3(CNNL_DTYPE_FLOAT, 1, 1, 4), d1, NULL, desc3(CNNL_DTYPE_FLOAT, 1, 2, 2), dout3),
             CNNL_STATUS_BAD_PARAM);
    CHECK(cnrtQueueSync(Q) == cnrtSuccess, "softmax queue clean");
}

/* ---------------------------------------------------------------- layernorm, rmsnorm */

enum { NR = 6, NC = 16 }; /* x (2, 3, NC) normalized over its last dim */

typedef struct norm_data {
    float x[NR * NC], w[NC], b[NC], dz[NR * NC];
    void *dx_, *dw_, *db_, *ddz_;
} norm_data;

static void norm_data_init(norm_data *d) {
    for (int i = 0; i < NR * NC; i++) d->x[i] = 2.0f * frand() + 0.5f, d->dz[i] = frand();
    for (int i = 0; i < NC; i++) d->w[i] = 1.0f + frand(), d->b[i] = frand();
    d->dx_ = up(d->x, sizeof d->x), d->dw_ = up(d->w, sizeof d->w), d->db_ = up(d->b, sizeof d->b);
    d->ddz_ = up(d->dz, sizeof d->dz);
}

/* double reference of one row: mean (0 for rms), rstd, y, dx, and dw/db contributions */
static void ref_norm_row(const norm_data *d, int r, bool rms, bool has_w, float eps, double *mean, double *rstd,
                         double *y, double *dxr, double *dw, double *db) {
    const float *x = d->x + r * NC, *dz = d->dz + r * NC;
    double m = 0, v = 0, sg = 0, sgn = 0;
    for (int c = 0; c < NC; c++) m += x[c];
    m = rms ? 0 : m / NC;
    for (int c = 0; c < NC; c++) v += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(v / NC + eps);
    for (int c = 0; c < NC; c++) {
        double n = (x[c] - m) * s, w = has_w ? d->w[c] : 1.0, g = dz[c] * w;
        y[c] = n * w + (rms || !has_w ? 0.0 : d->b[c]);
        sg += g, sgn += g * n;
        dw[c] += dz[c] * n, db[c] += dz[c];
    }
    sg = rms ? 0 : sg / NC, sgn /= NC;
    for (int c = 0; c < NC; c++) {
        double n = (x[c] - m) * s, g = dz[c] * (has_w ? d->w[c] : 1.0);
        dxr[c] = s * (g - sg - n * sgn);
    }
    *mean = m, *rstd = s;
}

static size_t ln_ws(bool bwd, bool rms, cnnlTensorDescriptor_t xd, int axis) {
    size_t ws = 0;
    cnnlStatus_t st = rms ? (bwd ? cnnlGetRmsNormBackwardWorkspaceSize(H, xd, axis, &ws)
                                 : cnnlGetRmsNormOpWorkspaceSize(H, axis, xd, &ws))
                          : (bwd ? cnnlGetLayerNormBackwardWorkspaceSize(H, xd, axis, &ws)
                                 : cnnlGetLayerNormOpWorkspaceSize(H, axis, xd, &ws));
    CHECK(st == CNNL_STATUS_SUCCESS && ws > 0, "norm workspace size %zu", ws);
    return ws;
}

static void test_norm(bool rms, bool has_w, bool keepdim) {
    const char *what = rms ? "rmsnorm" : "layernorm";
    norm_data d;
    norm_data_init(&d);
    float eps = 1e-5f, y[NR * NC], dx[NR * NC], mean[NR], rstd[NR], dw[NC], db[NC];
    cnnlTensorDescriptor_t xd = desc3(CNNL_DTYPE_FLOAT, 2, 3, NC), wd = desc1(CNNL_DTYPE_FLOAT, NC);
    cnnlTensorDescriptor_t rd = keepdim ? desc3(CNNL_DTYPE_FLOAT, 2, 3, 1) : desc2(CNNL_DTYPE_FLOAT, 2, 3);
    void *dy = dev(sizeof y), *dmean = dev(sizeof mean), *drstd = dev(sizeof rstd), *ddx = dev(sizeof dx);
    float junk[NC];
    for (int i = 0; i < NC; i++) junk[i] = 1e6f;
    void *ddw = up(junk, sizeof junk), *ddb = up(junk, sizeof junk); /* written, not accumulated */
    size_t ws = ln_ws(false, rms, xd, 2);
    void *w = dev(ws);
    const void *pw = has_w ? d.dw_ : NULL;
    cnnlStatus_t st =
        rms ? cnnlRmsNormForward(H, 2, xd, d.dx_, wd, pw, NULL, eps, w, ws, xd, dy, rd, drstd)
            : cnnlLayerNormForward(H, xd, d.dx_, 2, wd, pw, has_w ? d.db_ : NULL, eps, w, ws, xd, dy, rd, dmean, drstd);
    CHECK(st == CNNL_STATUS_SUCCESS, "%s forward: %s", what, cnnlGetErrorString(st));
    bool ok = down(y, dy, sizeof y) && down(rstd, drstd, sizeof rstd) && (rms || down(mean, dmean, sizeof mean));
    ws = ln_ws(true, rms, xd, 2);
    w = dev(ws);
    st = rms ? cnnlRmsNormBackward(H, 2, xd, d.dx_, xd, d.ddz_, wd, pw, rd, drstd, w, ws, xd, ddx, wd,
                                   has_w ? ddw : NULL, NULL)
             : cnnlLayerNormBackward_v2(H, xd, d.dx_, 2, xd, d.ddz_, wd, pw, rd, dmean, drstd, w, ws, xd, ddx,
                                        has_w ? ddw : NULL, has_w ? ddb : NULL);
    CHECK(st == CNNL_STATUS_SUCCESS, "%s backward: %s", what, cnnlGetErrorString(st));
    ok = ok && down(dx, ddx, sizeof dx) && down(dw, ddw, sizeof dw) && down(db, ddb, sizeof db);
    double e_y = 0, e_s = 0, e_dx = 0, e_dw = 0, rdw[NC] = {0}, rdb[NC] = {0};
    for (int r = 0; ok && r < NR; r++) {
        double m, s, ry[NC], rdx[NC];
        ref_norm_row(&d, r, rms, has_w, eps, &m, &s, ry, rdx, rdw, rdb);
        e_s = fmax(e_s, fabs(s - rstd[r]) / s);
        if (!rms) e_s = fmax(e_s, fabs(m - mean[r]));
        for (int c = 0; c < NC; c++)
            e_y = fmax(e_y, fabs(ry[c] - y[r * NC + c])), e_dx = fmax(e_dx, fabs(rdx[c] - dx[r * NC + c]));
    }
    for (int c = 0; ok && has_w && c < NC; c++)
        e_dw = fmax(e_dw, fmax(fabs(rdw[c] - dw[c]), rms ? 0.0 : fabs(rdb[c] - db[c])));
    CHECK(ok && e_y < 1e-5 && e_s < 1e-6 && e_dx < 1e-5 && e_dw < 1e-5,
          "%s (w %d, stats %s): errors y %g, mean/rstd %g, dx %g, dw/db %g", what, has_w, keepdim ? "(2,3,1)" : "(2,3)",
          e_y, e_s, e_dx, e_dw);
}

static void test_norm_refusals(void) {
    norm_data d;
    norm_data_init(&d);
    cnnlTensorDescriptor_t xd = desc3(CNNL_DTYPE_FLOAT, 2, 3, NC), wd = desc1(CNNL_DTYPE_FLOAT, NC);
    cnnlTensorDescriptor_t rd = desc2(CNNL_DTYPE_FLOAT, 2, 3);
    void *y = dev(sizeof d.x), *m = dev(NR * 4), *s = dev(NR * 4);
    size_t ws = ln_ws(false, false, xd, 2);
    void *w = dev(ws);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 2, wd, d.dw_, d.db_, 1e-5f, w, ws - 1, xd, y, rd, m, s),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 2, wd, d.dw_, d.db_, 1e-5f, NULL, ws, xd, y, rd, m, s),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 3, wd, d.dw_, d.db_, 1e-5f, w, ws, xd, y, rd, m, s),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(
        cnnlLayerNormForward(H, xd, d.dx_, 2, wd, d.dw_, d.db_, 1e-5f, w, ws, xd, y, desc1(CNNL_DTYPE_FLOAT, 6), m, s),
        CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 2, desc1(CNNL_DTYPE_FLOAT, NC - 1), d.dw_, d.db_, 1e-5f, w, ws, xd, y,
                                  rd, m, s),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 2, wd, d.dw_, d.db_, 1e-5f, w, ws, xd, y, desc2(CNNL_DTYPE_HALF, 2, 3),
                                  m, s),
             CNNL_STATUS_BAD_PARAM); /* float x with half statistics: no such combination */
    /* normalizing over the last two dims: axis 1, filter (3, NC), statistics (2) */
    size_t ws1 = 0;
    CHECK_ST(cnnlGetLayerNormOpWorkspaceSize(H, 1, xd, &ws1), CNNL_STATUS_SUCCESS);
    CHECK_ST(cnnlLayerNormForward(H, xd, d.dx_, 1, desc2(CNNL_DTYPE_FLOAT, 3, NC), d.dx_, NULL, 1e-5f, dev(ws1), ws1,
                                  xd, y, desc1(CNNL_DTYPE_FLOAT, 2), m, s),
             CNNL_STATUS_SUCCESS);
    CHECK_ST(cnnlRmsNormForward(H, 2, xd, d.dx_, wd, d.dw_, d.db_, 1e-5f, w, ws, xd, y, rd, s), CNNL_STATUS_BAD_PARAM);
    size_t wsb = ln_ws(true, true, xd, 2);
    void *wb = dev(wsb);
    CHECK_ST(cnnlRmsNormBackward(H, 2, xd, d.dx_, xd, d.ddz_, wd, d.dw_, rd, s, wb, wsb, xd, y, wd, m, s),
             CNNL_STATUS_BAD_PARAM); /* diff_bias must be NULL */
    CHECK_ST(cnnlRmsNormBackward(H, 2, xd, d.dx_, xd, d.ddz_, wd, d.dw_, rd, s, wb, wsb, xd, y, wd, NULL, NULL),
             CNNL_STATUS_BAD_PARAM); /* scale without diff_scale */
    CHECK_ST(cnnlRmsNormBackward(H, 2, xd, d.dx_, xd, d.ddz_, wd, d.dw_, rd, s, wb, wsb / 2, xd, y, wd, m, NULL),
             CNNL_STATUS_BAD_PARAM);
    CHECK(cnrtQueueSync(Q) == cnrtSuccess, "norm queue clean");
}

static void test_norm_bf16(void) {
    uint16_t x[4 * 8], w[8];
    for (int i = 0; i < 32; i++) x[i] = 0x3f80 + (uint16_t)i; /* bfloat16 values near 1 */
    for (int i = 0; i < 8; i++) w[i] = 0x3f80;
    cnnlTensorDescriptor_t xd = desc2(CNNL_DTYPE_BFLOAT16, 4, 8), wd = desc1(CNNL_DTYPE_BFLOAT16, 8);
    cnnlTensorDescriptor_t rd = desc1(CNNL_DTYPE_FLOAT, 4);
    void *dx = up(x, sizeof x), *dw = up(w, sizeof w), *y = dev(sizeof x), *m = dev(16), *s = dev(16);
    size_t ws = ln_ws(false, false, xd, 1);
    cnnlStatus_t want = is_mlu500() ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ARCH_MISMATCH;
    CHECK_ST(cnnlLayerNormForward(H, xd, dx, 1, wd, dw, dw, 1e-5f, dev(ws), ws, xd, y, rd, m, s), want);
    CHECK_ST(cnnlRmsNormForward(H, 1, xd, dx, wd, dw, NULL, 1e-5f, dev(ws), ws, xd, y, rd, s), want);
    CHECK(cnrtQueueSync(Q) == cnrtSuccess, "bfloat16 norms ran");
}

/* ---------------------------------------------------------------- embedding */

static void test_embedding(void) {
    enum { V = 5, C = 3 };
    float f[V * C], out[2 * 2 * C];
    for (int i = 0; i < V * C; i++) f[i] = (float)(i + 1);
    int32_t idx32[4] = {0, 4, 2, 4};
    int64_t idx64[4] = {3, 1, 4, 0};
    void *df = up(f, sizeof f), *i32 = up(idx32, sizeof idx32), *i64 = up(idx64, sizeof idx64), *dout = dev(sizeof out);
    cnnlTensorDescriptor_t fd = desc2(CNNL_DTYPE_FLOAT, V, C), od = desc3(CNNL_DTYPE_FLOAT, 2, 2, C);
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT32, 2, 2), i32, 4, NULL, NULL, od, dout),
             CNNL_STATUS_SUCCESS);
    bool ok = down(out, dout, sizeof out);
    for (int p = 0; ok && p < 4; p++)
        for (int c = 0; c < C; c++) ok = out[p * C + c] == (idx32[p] == 4 ? 0.0f : f[idx32[p] * C + c]);
    CHECK(ok, "embedding int32 with padding_idx rows zero");
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT64, 2, 2), i64, -1, NULL, NULL, od, dout),
             CNNL_STATUS_SUCCESS);
    ok = down(out, dout, sizeof out);
    for (int p = 0; ok && p < 4; p++)
        for (int c = 0; c < C; c++) ok = out[p * C + c] == f[idx64[p] * C + c];
    CHECK(ok, "embedding int64");
    float mx = 1.0f;
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT64, 2, 2), i64, -1, &mx, NULL, od, dout),
             CNNL_STATUS_NOT_SUPPORTED);
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT64, 2, 2), i64, V, NULL, NULL, od, dout),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT16, 2, 2), i64, -1, NULL, NULL, od, dout),
             CNNL_STATUS_BAD_PARAM);
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc1(CNNL_DTYPE_INT64, 4), i64, -1, NULL, NULL, od, dout),
             CNNL_STATUS_BAD_PARAM);
    int64_t out_of_range[4] = {0, 1, V, 2};
    void *bad = up(out_of_range, sizeof out_of_range);
    CHECK_ST(cnnlEmbeddingForward_v2(H, fd, df, desc2(CNNL_DTYPE_INT64, 2, 2), bad, -1, NULL, NULL, od, dout),
             CNNL_STATUS_SUCCESS);
    CHECK(cnrtQueueSync(Q) == cnrtErrorQueue, "an index outside the filter's rows faults the queue");
}

/* ---------------------------------------------------------------- top-k */

static cnnlStatus_t topk(cnnlTensorDescriptor_t xd, void *x, int k, int dim, bool largest, bool sorted, bool lower,
                         cnnlTensorDescriptor_t vd, void *v, cnnlTensorDescriptor_t id, void *ix, long ws_delta) {
    size_t ws = 0;
    cnnlStatus_t st = cnnlGetTopKTensorWorkspaceSize(H, xd, k, dim, largest, vd, id, &ws);
    if (st != CNNL_STATUS_SUCCESS) return st;
    return cnnlTopKTensor_v3(H, xd, x, k, dim, largest, sorted, lower, dev(ws), (size_t)((long)ws + ws_delta), vd, v,
                             id, ix);
}

static void test_topk(void) {
    enum { E = 10 };
    float row[E] = {1, 3, NAN, 3, -INFINITY, 7, 7, NAN, 0, -0.0f}, v[5];
    int32_t ix[5];
    void *dx = up(row, sizeof row), *dv = dev(sizeof v), *di = dev(sizeof ix);
    cnnlTensorDescriptor_t xd = desc2(CNNL_DTYPE_FLOAT, 1, E), vd = desc2(CNNL_DTYPE_FLOAT, 1, 5);
    cnnlTensorDescriptor_t id = desc2(CNNL_DTYPE_INT32, 1, 5);
    struct {
        int k;
        bool largest, sorted, lower;
        int32_t want[5];
    } cases[] = {
        {5, true, true, true, {2, 7, 5, 6, 1}},   /* NaN above +Inf, ties lower index first */
        {5, true, true, false, {7, 2, 6, 5, 3}},  /* without lower_index_first: higher first here */
        {4, false, true, true, {4, 8, 9, 0, -1}}, /* smallest: NaN last; 0 and -0 equal */
        {5, true, false, true, {1, 2, 5, 6, 7}},  /* unsorted: the chosen, in index order */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int k = cases[c].k;
        cnnlTensorDescriptor_t vk = desc2(CNNL_DTYPE_FLOAT, 1, k), ik = desc2(CNNL_DTYPE_INT32, 1, k);
        cnnlStatus_t st = topk(xd, dx, k, 1, cases[c].largest, cases[c].sorted, cases[c].lower, vk, dv, ik, di, 0);
        if (!is_mlu500()) { /* NaN is supported only on MLU500: the queue faults */
            CHECK(st == CNNL_STATUS_SUCCESS && cnrtQueueSync(Q) == cnrtErrorQueue, "top-k of NaN on an MLU370 faults");
            return;
        }
        bool ok = st == CNNL_STATUS_SUCCESS && down(ix, di, (size_t)k * 4) && down(v, dv, (size_t)k * 4);
        for (int t = 0; ok && t < k; t++) ok = ix[t] == cases[c].want[t] && !memcmp(&v[t], &row[ix[t]], 4);
        CHECK(ok, "top-k case %zu", c);
    }
    /* dim 0 of a strided (E, 2) view, int64 indices, k = 2 */
    float m[2 * E];
    for (int i = 0; i < E; i++) m[i] = (float)((i * 7) % E), m[E + i] = (float)((i * 3) % E);
    int64_t ix64[4];
    float v2[4];
    void *dm = up(m, sizeof m), *dv2 = dev(sizeof v2), *di2 = dev(sizeof ix64);
    cnnlTensorDescriptor_t md = desc(CNNL_DTYPE_FLOAT, 2, (int[]){E, 2}, (int[]){1, E});
    CHECK_ST(
        topk(md, dm, 2, 0, true, true, true, desc2(CNNL_DTYPE_FLOAT, 2, 2), dv2, desc2(CNNL_DTYPE_INT64, 2, 2), di2, 0),
        CNNL_STATUS_SUCCESS);
    /* column 0 = m[0..E): 0,7,4,1,8,5,2,9,6,3 -> 9 at 7, 8 at 4; column 1: 0,3,6,9,2,5,8,1,4,7 -> 9 at 3, 8 at 6 */
    bool ok = down(ix64, di2, sizeof ix64) && down(v2, dv2, sizeof v2);
    CHECK(ok && ix64[0] == 7 && ix64[1] == 3 && ix64[2] == 4 && ix64[3] == 6 && v2[0] == 9 && v2[2] == 8,
          "top-k along dim 0 of a strided view");
    /* integer input: int32 values, extremes included, int64 indices; largest and smallest */
    int32_t iv[6] = {5, INT32_MIN, 5, INT32_MAX, -7, 0};
    int64_t iix[3];
    int32_t ivals[3];
    void *dxi = up(iv, sizeof iv), *dvi = dev(sizeof ivals), *dii = dev(sizeof iix);
    cnnlTensorDescriptor_t xi = desc1(CNNL_DTYPE_INT32, 6), vi = desc1(CNNL_DTYPE_INT32, 3);
    cnnlTensorDescriptor_t ii = desc1(CNNL_DTYPE_INT64, 3);
    CHECK_ST(topk(xi, dxi, 3, 0, true, true, true, vi, dvi, ii, dii, 0), CNNL_STATUS_SUCCESS);
    ok = down(iix, dii, sizeof iix) && down(ivals, dvi, sizeof ivals);
    CHECK(ok && iix[0] == 3 && iix[1] == 0 && iix[2] == 2 && ivals[0] == INT32_MAX, "top-k of int32, largest");
    CHECK_ST(topk(xi, dxi, 3, 0, false, true, true, vi, dvi, ii, dii, 0), CNNL_STATUS_SUCCESS);
    ok = down(iix, dii, sizeof iix);
    CHECK(ok && iix[0] == 1 && iix[1] == 4 && iix[2] == 5, "top-k of int32, smallest");
    /* refusals */
    CHECK_ST(topk(xd, dx, 5, 1, true, true, true, vd, dv, id, di, -1), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(topk(xd, dx, 5, 2, true, true, true, vd, dv, id, di, 0), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(topk(xd, dx, 11, 1, true, true, true, vd, dv, id, di, 0), CNNL_STATUS_BAD_PARAM);
    CHECK_ST(topk(xd, dx, 5, 1, true, true, true, vd, dv, desc2(CNNL_DTYPE_INT16, 1, 5), di, 0), CNNL_STATUS_BAD_PARAM);
    cnnlStatus_t want = is_mlu500() ? CNNL_STATUS_SUCCESS : CNNL_STATUS_NOT_SUPPORTED;
    CHECK_ST(topk(desc2(CNNL_DTYPE_BFLOAT16, 1, E), dx, 5, 1, true, true, true, desc2(CNNL_DTYPE_BFLOAT16, 1, 5), dv,
                  id, di, 0),
             want);
    CHECK(cnrtQueueSync(Q) == cnrtSuccess, "top-k queue clean");
}

/* ---------------------------------------------------------------- main */

static void run_all(void) {
    test_basics();
    test_copy();
    test_casts();
    test_matmul_fp32();
    test_matmul_shapes();
    test_matmul_low(CNNL_DTYPE_HALF);
    test_matmul_low(CNNL_DTYPE_BFLOAT16);
    test_softmax();
    for (int rms = 0; rms < 2; rms++) {
        test_norm(rms, true, false);
        test_norm(rms, true, true);
        test_norm(rms, false, false);
    }
    test_norm_refusals();
    test_norm_bf16();
    test_embedding();
    test_topk();
    release_all();
}

/* Runs this program again as an MLU370; true when that run passed. */
static bool run_as_mlu370(const char *self) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("IT_CAMBRICON_STANDIN_ARCH", "372", 1);
        execl(self, self, "--as-mlu370", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
    bool child = argc > 1 && !strcmp(argv[1], "--as-mlu370");
    bool child_ok = child || run_as_mlu370("/proc/self/exe"); /* before any thread exists */
    if (cnrtSetDevice(0) != cnrtSuccess || cnrtQueueCreate(&Q) != cnrtSuccess ||
        cnnlCreate(&H) != CNNL_STATUS_SUCCESS || cnnlSetQueue(H, Q) != CNNL_STATUS_SUCCESS) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    CHECK(standin_arch() == (child ? 372 : 592), "the stand-in plays the part asked for (%d)", standin_arch());
    CHECK(child_ok, "the run as an MLU370 passed");
    run_all();
    cnnlDestroy(H);
    cnrtQueueDestroy(Q);
    printf("%s%d passed, %d failed\n", child ? "as MLU370: " : "", passed, failed);
    return failed != 0;
}
