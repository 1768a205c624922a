/* Tensors on the cpu and on the testplug plugin (an accelerator as far as the core knows:
 * host_memory = false, and it refuses any memcpy or kernel whose pointers are not its own
 * device blocks): creation, host round trips, views sharing storage, copies across devices
 * and dtypes, fill, item, print, scopes, and the caching allocator's statistics, limit and
 * failure messages. Every check compares numbers read back through the public API. */
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>

#include "infinitrain/tensor.h"
#include "it_test.h"

#define CHECK_HAS(s) CHECK_MSG(strstr(it_last_error(), (s)) != NULL, "message lacks \"%s\": %s", (s), it_last_error())

/* Mirror of the stats record tests/plugin/testplug.c exports. */
typedef struct testplug_stats_rec {
    uint64_t init_calls;
    uint64_t memcpy_calls[4];
    uint64_t mallocs, frees;
    uint64_t live_blocks;
    size_t live_bytes;
    uint64_t kernel_calls;
} testplug_stats_rec;

static it_device cpu, tp0, tp1;
static it_device devs[3];
static const char *dev_names[3] = {"cpu", "testplug:0", "testplug:1"};

static testplug_stats_rec tp_stats(int device) {
    testplug_stats_rec s;
    memset(&s, 0, sizeof s);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/test-plugins/libit_backend_testplug.so", IT_BINARY_DIR);
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return s;
    union {
        void *p;
        void (*fn)(int, testplug_stats_rec *);
    } sym;
    sym.p = dlsym(h, "testplug_stats");
    if (sym.p) sym.fn(device, &s);
    dlclose(h);
    return s;
}

/* Values of a float32 tensor (any view) as doubles, read through copy_to_host. */
static bool read_f32(it_tensor *t, float *out, size_t n) {
    if (!t || (size_t)it_tensor_numel(t) != n || it_tensor_dtype(t) != IT_DTYPE_FP32) return false;
    return it_tensor_copy_to_host(t, out, n * sizeof(float)) == IT_OK;
}

/* A float32 tensor holding 0, 1, 2, ... in row-major order. */
static it_tensor *arange(it_device dev, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    it_tensor *t = it_tensor_from_host(dev, IT_DTYPE_FP32, ndim, shape, v, (size_t)n * sizeof *v);
    free(v);
    return t;
}

static size_t used_bytes(it_device dev) {
    it_mem_stats s;
    memset(&s, 0, sizeof s);
    it_mem_stats_get(dev, &s);
    return s.used;
}

/* ------------------------------------------------------------------ creation */

static void test_create(void) {
    for (int d = 0; d < 3; d++) {
        it_device dev = devs[d];
        int64_t shape[2] = {2, 3};
        it_tensor *t = it_tensor_new(dev, IT_DTYPE_FP32, 2, shape);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(it_tensor_ndim(t) == 2);
        CHECK(it_tensor_shape(t)[0] == 2 && it_tensor_shape(t)[1] == 3);
        CHECK(it_tensor_strides(t)[0] == 3 && it_tensor_strides(t)[1] == 1);
        CHECK(it_tensor_dim(t, -1) == 3 && it_tensor_dim(t, 0) == 2 && it_tensor_dim(t, 2) == -1);
        CHECK(it_tensor_numel(t) == 6 && it_tensor_nbytes(t) == 24 && it_tensor_offset(t) == 0);
        CHECK(it_tensor_dtype(t) == IT_DTYPE_FP32);
        CHECK(it_device_equal(it_tensor_device(t), dev));
        CHECK(it_tensor_is_contiguous(t));
        it_tdesc desc = it_tensor_desc(t);
        CHECK(desc.ndim == 2 && desc.shape[1] == 3 && desc.strides[0] == 3 && desc.dtype == IT_DTYPE_FP32);
        it_tensor_release(t);

        it_tensor *z = it_tensor_zeros(dev, IT_DTYPE_FP32, 2, shape);
        float v[6] = {1, 1, 1, 1, 1, 1};
        CHECK(read_f32(z, v, 6));
        for (int i = 0; i < 6; i++) CHECK_MSG(v[i] == 0.0f, "%s zeros[%d] = %g", dev_names[d], i, v[i]);
        it_tensor_release(z);

        int64_t s1[1] = {5};
        it_tensor *f = it_tensor_full(dev, IT_DTYPE_I32, 1, s1, it_scalar_f64(-7.9));
        int32_t iv[5] = {0};
        CHECK(f && it_tensor_copy_to_host(f, iv, sizeof iv) == IT_OK);
        for (int i = 0; i < 5; i++) CHECK_MSG(iv[i] == -7, "%s full int32(-7.9)[%d] = %d", dev_names[d], i, iv[i]);
        it_tensor_release(f);

        /* A 0-D tensor holds one element. */
        it_tensor *s = it_tensor_full(dev, IT_DTYPE_FP64, 0, NULL, it_scalar_f64(2.5));
        double x = 0;
        CHECK(s && it_tensor_numel(s) == 1 && it_tensor_nbytes(s) == 8);
        CHECK_OK(it_tensor_item(s, NULL, &x));
        CHECK(x == 2.5);
        it_tensor_release(s);
    }
}

/* ------------------------------------------------------------------ host round trips */

static void test_host_round_trip(void) {
    unsigned char in[7 * 8], out[7 * 8];
    for (int dt = 0; dt < IT_DTYPE_COUNT; dt++) {
        size_t es = it_dtype_size((it_dtype)dt);
        /* Any byte pattern survives (bool: 0/1 bytes, as a bool tensor holds). */
        for (size_t i = 0; i < sizeof in; i++)
            in[i] = dt == IT_DTYPE_BOOL ? (unsigned char)(i % 3 == 0) : (unsigned char)(i * 37 + 11 + dt);
        for (int d = 0; d < 3; d++) {
            int64_t shape[2] = {7, 1};
            it_tensor *t = it_tensor_from_host(devs[d], (it_dtype)dt, 2, shape, in, 7 * es);
            memset(out, 0xAB, sizeof out);
            CHECK(t && it_tensor_copy_to_host(t, out, 7 * es) == IT_OK);
            CHECK_MSG(memcmp(in, out, 7 * es) == 0, "%s %s round trip differs", dev_names[d],
                      it_dtype_name((it_dtype)dt));
            /* copy_from_host into an existing tensor, then back. */
            for (size_t i = 0; i < 7 * es; i++)
                in[i] = dt == IT_DTYPE_BOOL ? (unsigned char)(i % 2) : (unsigned char)(255 - in[i]);
            CHECK_OK(it_tensor_copy_from_host(t, in, 7 * es));
            CHECK_OK(it_tensor_copy_to_host(t, out, 7 * es));
            CHECK_MSG(memcmp(in, out, 7 * es) == 0, "%s %s copy_from_host differs", dev_names[d],
                      it_dtype_name((it_dtype)dt));
            CHECK_ERR(it_tensor_copy_to_host(t, out, 7 * es - 1), IT_ERR_INVALID_ARG, "the tensor needs");
            CHECK_ERR(it_tensor_copy_from_host(t, in, 7 * es + 1), IT_ERR_INVALID_ARG, "buffer has");
            it_tensor_release(t);
        }
    }
    /* Exact values, not only bytes: a few int64 and fp16 elements. */
    int64_t big[3] = {INT64_MIN, -1, INT64_MAX}, back[3] = {0};
    int64_t s3[1] = {3};
    it_tensor *t = it_tensor_from_host(tp1, IT_DTYPE_I64, 1, s3, big, sizeof big);
    CHECK(t && it_tensor_copy_to_host(t, back, sizeof back) == IT_OK);
    CHECK(back[0] == INT64_MIN && back[1] == -1 && back[2] == INT64_MAX);
    it_tensor_release(t);
    CHECK(it_tensor_from_host(tp0, IT_DTYPE_I64, 1, s3, big, sizeof big - 8) == NULL);
    CHECK_HAS("buffer has 16 bytes, the tensor needs 24");
}

/* ------------------------------------------------------------------ views */

/* base = arange(24) viewed as (2, 3, 4): base[i][j][k] = 12i + 4j + k. */
static void test_views(it_device dev, const char *dn) {
    int64_t shape[3] = {2, 3, 4};
    it_tensor *base = arange(dev, 3, shape);
    CHECK(base != NULL);
    if (!base) return;
    float v[24];

    /* view / reshape with -1 */
    int64_t s2[2] = {4, -1};
    it_tensor *r = it_tensor_view(base, 2, s2);
    CHECK(r && it_tensor_dim(r, 0) == 4 && it_tensor_dim(r, 1) == 6);
    CHECK(it_tensor_shares_storage(r, base));
    CHECK(read_f32(r, v, 24));
    for (int i = 0; i < 24; i++) CHECK_MSG(v[i] == (float)i, "%s view[%d] = %g", dn, i, v[i]);
    int64_t bad2[2] = {-1, -1}, bad3[2] = {5, -1}, bad4[2] = {5, 5}, bad5[2] = {-2, 12};
    CHECK(it_tensor_view(base, 2, bad2) == NULL);
    CHECK_HAS("more than one -1");
    CHECK(it_tensor_view(base, 2, bad3) == NULL);
    CHECK_HAS("cannot infer");
    CHECK(it_tensor_view(base, 2, bad4) == NULL);
    CHECK_HAS("24 elements cannot be viewed as 25");
    CHECK(it_tensor_view(base, 2, bad5) == NULL);
    CHECK_HAS("negative size -2");
    int64_t bad6[3] = {INT64_MAX, 2, -1}; /* the element count would overflow int64 */
    CHECK(it_tensor_view(base, 3, bad6) == NULL);
    CHECK_HAS("overflows");

    /* permute (2, 0, 1): p[k][i][j] = base[i][j][k] */
    int perm[3] = {2, 0, 1};
    it_tensor *p = it_tensor_permute(base, perm);
    CHECK(p && it_tensor_dim(p, 0) == 4 && it_tensor_dim(p, 1) == 2 && it_tensor_dim(p, 2) == 3);
    CHECK(p && it_tensor_strides(p)[0] == 1 && it_tensor_strides(p)[1] == 12 && it_tensor_strides(p)[2] == 4);
    CHECK(it_tensor_shares_storage(p, base) && !it_tensor_is_contiguous(p));
    CHECK(read_f32(p, v, 24));
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                CHECK_MSG(v[(k * 2 + i) * 3 + j] == (float)(12 * i + 4 * j + k), "%s permute[%d][%d][%d] = %g", dn, k,
                          i, j, v[(k * 2 + i) * 3 + j]);
    int64_t idx[3] = {3, 1, 2};
    double x = 0;
    CHECK_OK(it_tensor_item(p, idx, &x));
    CHECK(x == 12 * 1 + 4 * 2 + 3);
    int dup[3] = {0, 0, 1}, oob[3] = {0, 1, 3};
    CHECK(it_tensor_permute(base, dup) == NULL);
    CHECK_HAS("not a permutation");
    CHECK(it_tensor_permute(base, oob) == NULL);

    /* contiguous of the permuted view: a new, dense copy with the same values */
    it_tensor *c = it_tensor_contiguous(p);
    CHECK(c && it_tensor_is_contiguous(c) && !it_tensor_shares_storage(c, base));
    float w[24];
    CHECK(read_f32(c, w, 24));
    CHECK(memcmp(v, w, sizeof v) == 0);
    it_tensor *same = it_tensor_contiguous(base); /* already contiguous: itself */
    CHECK(same == base);
    it_tensor_release(same);
    /* viewing a permuted (non-contiguous) tensor gives a copy in its row-major order */
    int64_t flat[1] = {-1};
    it_tensor *pf = it_tensor_view(p, 1, flat);
    CHECK(pf && !it_tensor_shares_storage(pf, base) && it_tensor_dim(pf, 0) == 24);
    CHECK(read_f32(pf, w, 24));
    CHECK(memcmp(v, w, sizeof v) == 0);

    /* transpose(0, -1): t[k][j][i] = base[i][j][k] */
    it_tensor *t = it_tensor_transpose(base, 0, -1);
    CHECK(t && it_tensor_dim(t, 0) == 4 && it_tensor_dim(t, 1) == 3 && it_tensor_dim(t, 2) == 2);
    CHECK(read_f32(t, v, 24));
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++)
                CHECK_MSG(v[(k * 3 + j) * 2 + i] == (float)(12 * i + 4 * j + k), "%s transpose[%d][%d][%d]", dn, k, j,
                          i);
    CHECK(it_tensor_transpose(base, 0, 3) == NULL);
    CHECK_HAS("out of range");

    /* slice dim 2 [1, 4) step 2 -> k in {1, 3}; then dim 1 [1, 3) */
    it_tensor *sl = it_tensor_slice(base, 2, 1, 4, 2);
    CHECK(sl && it_tensor_dim(sl, 2) == 2 && it_tensor_offset(sl) == 1 && it_tensor_strides(sl)[2] == 2);
    CHECK(it_tensor_shares_storage(sl, base));
    CHECK(read_f32(sl, v, 12));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int kk = 0; kk < 2; kk++)
                CHECK_MSG(v[(i * 3 + j) * 2 + kk] == (float)(12 * i + 4 * j + 1 + 2 * kk), "%s slice[%d][%d][%d]", dn,
                          i, j, kk);
    it_tensor *sl2 = it_tensor_slice(sl, -2, 1, 3, 1);
    CHECK(sl2 && it_tensor_dim(sl2, 1) == 2 && it_tensor_offset(sl2) == 5);
    int64_t i3[3] = {1, 1, 1};
    CHECK_OK(it_tensor_item(sl2, i3, &x));
    CHECK(x == 12 + 4 * 2 + 3);
    it_tensor *first = it_tensor_slice(base, 2, 0, 4, INT64_MAX); /* a step past the end: one element */
    CHECK(first && it_tensor_dim(first, 2) == 1);
    CHECK(read_f32(first, v, 6));
    for (int i = 0; i < 6; i++) CHECK_MSG(v[i] == (float)(4 * i), "%s slice step INT64_MAX [%d] = %g", dn, i, v[i]);
    it_tensor_release(first);
    it_tensor *empty = it_tensor_slice(base, 0, 2, 2, 1);
    CHECK(empty && it_tensor_numel(empty) == 0);
    CHECK(it_tensor_slice(base, 2, 0, 5, 1) == NULL);
    CHECK_HAS("dimension 2 of size 4");
    CHECK(it_tensor_slice(base, 0, 0, 1, 0) == NULL);
    CHECK(it_tensor_slice(base, 3, 0, 1, 1) == NULL);

    /* writing through a view changes the base: fill the slice with -1 */
    CHECK_OK(it_tensor_fill(sl2, it_scalar_f64(-1)));
    CHECK(read_f32(base, v, 24));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                bool hit = j >= 1 && (k == 1 || k == 3);
                float want = hit ? -1.0f : (float)(12 * i + 4 * j + k);
                CHECK_MSG(v[(i * 3 + j) * 4 + k] == want, "%s base after slice fill [%d][%d][%d] = %g", dn, i, j, k,
                          v[(i * 3 + j) * 4 + k]);
            }

    /* expand (3, 1) -> (2, 3, 4): e[a][j][k] = col[j] */
    float colv[3] = {10, 20, 30};
    int64_t cs[2] = {3, 1};
    it_tensor *col = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, cs, colv, sizeof colv);
    int64_t es[3] = {2, -1, 4};
    it_tensor *e = it_tensor_expand(col, 3, es);
    CHECK(e && it_tensor_dim(e, 0) == 2 && it_tensor_dim(e, 1) == 3 && it_tensor_dim(e, 2) == 4);
    CHECK(e && it_tensor_strides(e)[0] == 0 && it_tensor_strides(e)[1] == 1 && it_tensor_strides(e)[2] == 0);
    CHECK(it_tensor_shares_storage(e, col));
    CHECK(read_f32(e, v, 24));
    for (int i = 0; i < 24; i++) CHECK_MSG(v[i] == colv[(i / 4) % 3], "%s expand[%d] = %g", dn, i, v[i]);
    int64_t bad_e[2] = {4, 4}, neg_e[2] = {3, -5};
    CHECK(it_tensor_expand(col, 2, bad_e) == NULL);
    CHECK_HAS("dimension 0 of size 3 cannot become 4");
    CHECK(it_tensor_expand(col, 2, neg_e) == NULL);
    CHECK_HAS("negative");
    int64_t huge_e[3] = {INT64_MAX, 3, 4};
    CHECK(it_tensor_expand(col, 3, huge_e) == NULL);
    CHECK_HAS("too large");
    CHECK(it_tensor_expand(col, 1, es) == NULL);

    /* A view keeps the storage alive after the base is released. */
    it_tensor_release(base);
    CHECK(read_f32(r, v, 24));
    CHECK(v[0] == 0 && v[22] == 22 && v[23] == -1 && v[5] == -1);

    it_tensor *all[] = {r, p, c, pf, t, sl, sl2, empty, col, e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) it_tensor_release(all[i]);

    /* NULL inputs chain through without a new message. */
    it_error(IT_ERR_INVALID_ARG, "earlier failure");
    CHECK(it_tensor_view(NULL, 1, flat) == NULL);
    CHECK(it_tensor_permute(NULL, perm) == NULL && it_tensor_slice(NULL, 0, 0, 1, 1) == NULL);
    CHECK(it_tensor_contiguous(NULL) == NULL && it_tensor_to_device(NULL, cpu) == NULL);
    CHECK(strcmp(it_last_error(), "earlier failure") == 0);
    CHECK(it_tensor_fill(NULL, it_scalar_f64(0)) == IT_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ across devices */

static void test_to_device(void) {
    int64_t shape[2] = {3, 5};
    it_tensor *a = arange(cpu, 2, shape);
    it_tensor *b = it_tensor_to_device(a, tp1);
    it_tensor *c = it_tensor_to_device(b, tp0);
    it_tensor *d = it_tensor_to_device(c, cpu);
    CHECK(b && c && d);
    if (!(b && c && d)) return;
    CHECK(it_device_equal(it_tensor_device(b), tp1) && it_device_equal(it_tensor_device(c), tp0));
    CHECK(it_device_equal(it_tensor_device(d), cpu));
    CHECK(!it_tensor_shares_storage(a, d));
    float v[15];
    CHECK(read_f32(d, v, 15));
    for (int i = 0; i < 15; i++) CHECK_MSG(v[i] == (float)i, "cpu->tp1->tp0->cpu [%d] = %g", i, v[i]);
    CHECK(read_f32(c, v, 15) && v[14] == 14);

    /* tp1 -> tp0 goes through host staging: one D2H on device 1 and one H2D on device 0. */
    testplug_stats_rec s0 = tp_stats(0), s1 = tp_stats(1);
    it_tensor *c2 = it_tensor_to_device(b, tp0);
    testplug_stats_rec t0 = tp_stats(0), t1 = tp_stats(1);
    CHECK(c2 != NULL);
    CHECK(t1.memcpy_calls[IT_MEMCPY_D2H] == s1.memcpy_calls[IT_MEMCPY_D2H] + 1);
    CHECK(t0.memcpy_calls[IT_MEMCPY_H2D] == s0.memcpy_calls[IT_MEMCPY_H2D] + 1);
    CHECK(t0.init_calls == 1);
    it_tensor_release(c2);

    /* Strided source and strided destination across devices. */
    it_tensor *bt = it_tensor_transpose(b, 0, 1); /* (5, 3) on tp1, bt[j][i] = 5i + j */
    it_tensor *ct = it_tensor_to_device(bt, cpu);
    CHECK(ct && it_tensor_is_contiguous(ct) && it_tensor_dim(ct, 0) == 5);
    CHECK(read_f32(ct, v, 15));
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 3; i++) CHECK_MSG(v[j * 3 + i] == (float)(5 * i + j), "transposed to cpu [%d][%d]", j, i);
    it_tensor *z = it_tensor_zeros(tp0, IT_DTYPE_FP32, 2, shape);
    it_tensor *zt = it_tensor_transpose(z, 0, 1);
    CHECK_OK(it_tensor_copy_(zt, ct)); /* cpu contiguous -> tp0 strided */
    CHECK(read_f32(z, v, 15));
    for (int i = 0; i < 15; i++) CHECK_MSG(v[i] == (float)i, "strided dst on tp0 [%d] = %g", i, v[i]);
    it_tensor *z1 = it_tensor_zeros(tp1, IT_DTYPE_FP32, 2, shape);
    it_tensor *z1t = it_tensor_transpose(z1, 0, 1);
    CHECK_OK(it_tensor_copy_(z1t, zt)); /* tp0 strided -> tp1 strided */
    CHECK(read_f32(z1, v, 15));
    for (int i = 0; i < 15; i++) CHECK_MSG(v[i] == (float)i, "strided tp0 -> strided tp1 [%d] = %g", i, v[i]);

    it_tensor *all[] = {a, b, c, d, bt, ct, z, zt, z1, z1t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) it_tensor_release(all[i]);
}

/* ------------------------------------------------------------------ dtypes, fill, copy_ */

static void test_to_dtype(void) {
    float in[6] = {1.5f, -2.5f, 3.75f, 1e10f, NAN, 65519.0f};
    int64_t s[1] = {6};
    for (int d = 0; d < 3; d++) {
        it_tensor *f = it_tensor_from_host(devs[d], IT_DTYPE_FP32, 1, s, in, sizeof in);
        it_tensor *i = it_tensor_to_dtype(f, IT_DTYPE_I32);
        int32_t iv[6] = {0};
        CHECK(i && it_tensor_dtype(i) == IT_DTYPE_I32 && it_tensor_copy_to_host(i, iv, sizeof iv) == IT_OK);
        CHECK_MSG(iv[0] == 1 && iv[1] == -2 && iv[2] == 3 && iv[3] == INT32_MAX && iv[4] == 0 && iv[5] == 65519,
                  "%s fp32->int32: %d %d %d %d %d %d", dev_names[d], iv[0], iv[1], iv[2], iv[3], iv[4], iv[5]);
        it_tensor *h = it_tensor_to_dtype(f, IT_DTYPE_FP16);
        uint16_t hv[6] = {0};
        CHECK(h && it_tensor_copy_to_host(h, hv, sizeof hv) == IT_OK);
        CHECK(hv[0] == it_fp32_to_fp16(1.5f) && hv[1] == it_fp32_to_fp16(-2.5f) && hv[3] == 0x7C00 /* +Inf */);
        CHECK(hv[5] == 0x7BFF); /* 65519 rounds down to the largest half, 65504 */
        it_tensor *b = it_tensor_to_dtype(f, IT_DTYPE_BOOL);
        uint8_t bv[6] = {0};
        CHECK(b && it_tensor_copy_to_host(b, bv, sizeof bv) == IT_OK);
        for (int k = 0; k < 6; k++) CHECK(bv[k] == 1); /* all nonzero (NaN included) */
        it_tensor *back = it_tensor_to_dtype(h, IT_DTYPE_FP64);
        double dv[6] = {0};
        CHECK(back && it_tensor_copy_to_host(back, dv, sizeof dv) == IT_OK);
        CHECK(dv[0] == 1.5 && dv[1] == -2.5 && dv[2] == 3.75 && isinf(dv[3]) && isnan(dv[4]) && dv[5] == 65504.0);
        CHECK(it_device_equal(it_tensor_device(back), devs[d]));
        it_tensor *all[] = {f, i, h, b, back};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) it_tensor_release(all[k]);
    }
}

/* testplug's fill declines bool (IT_ERR_UNSUPPORTED): the core runs that call on the CPU
 * fallback, the result is right, and the coverage report counts it as a CPU call of a
 * native slot. Other dtypes stay native. */
static void test_declined_call(void) {
    const it_backend *tp = devs[1].backend;
    it_backend_stats_reset(tp);
    it_tensor *b = it_tensor_new(devs[1], IT_DTYPE_BOOL, 1, (int64_t[]){5});
    CHECK_OK(it_tensor_fill(b, it_scalar_f64(2.0)));
    uint8_t v[5] = {0};
    CHECK_OK(it_tensor_copy_to_host(b, v, sizeof v));
    for (int i = 0; i < 5; i++) CHECK_MSG(v[i] == 1, "declined fill of bool: [%d] = %u", i, v[i]);
    it_tensor *f = it_tensor_new(devs[1], IT_DTYPE_FP32, 1, (int64_t[]){5});
    CHECK_OK(it_tensor_fill(f, it_scalar_f64(2.0)));
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    CHECK_OK(it_backend_kernel_stats(tp, st));
    size_t fill = 1; /* slot order: cast, fill, ... */
    CHECK(strcmp(st[fill].slot, "fill") == 0);
    CHECK(st[fill].native);
    CHECK_MSG(st[fill].calls == 2 && st[fill].fallback_calls == 1, "fill: %llu calls, %llu on the CPU",
              (unsigned long long)st[fill].calls, (unsigned long long)st[fill].fallback_calls);
    CHECK_MSG(st[fill].bytes_moved == 5, "fill: the fallback moved %llu bytes, expected 5 (the bool span back)",
              (unsigned long long)st[fill].bytes_moved);
    char *buf = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&buf, &len);
    CHECK_OK(it_backend_report(tp, mf));
    fclose(mf);
    CHECK_MSG(buf && strstr(buf, "native+cpu"), "report should mark fill native+cpu:\n%s", buf ? buf : "");
    free(buf);
    it_tensor_release(b);
    it_tensor_release(f);
}

static void test_fill(void) {
    int64_t s[2] = {2, 3};
    for (int d = 0; d < 3; d++) {
        it_tensor *t = it_tensor_new(devs[d], IT_DTYPE_I64, 2, s);
        int64_t v[6];
        CHECK_OK(it_tensor_fill(t, it_scalar_i64(INT64_MIN)));
        CHECK_OK(it_tensor_copy_to_host(t, v, sizeof v));
        for (int i = 0; i < 6; i++)
            CHECK_MSG(v[i] == INT64_MIN, "%s fill INT64_MIN [%d] = %lld", dev_names[d], i, (long long)v[i]);
        CHECK_OK(it_tensor_fill(t, it_scalar_i64(INT64_MAX)));
        CHECK_OK(it_tensor_copy_to_host(t, v, sizeof v));
        for (int i = 0; i < 6; i++) CHECK(v[i] == INT64_MAX);
        /* INT64_MAX - 1 is not a double: a double path would give INT64_MAX or 2^63. */
        CHECK_OK(it_tensor_fill(t, it_scalar_i64(INT64_MAX - 1)));
        CHECK_OK(it_tensor_copy_to_host(t, v, sizeof v));
        CHECK(v[0] == INT64_MAX - 1 && v[5] == INT64_MAX - 1);
        it_tensor_release(t);

        it_tensor *u = it_tensor_new(devs[d], IT_DTYPE_U64, 2, s);
        uint64_t uv[6];
        CHECK_OK(it_tensor_fill(u, it_scalar_u64(UINT64_MAX)));
        CHECK_OK(it_tensor_copy_to_host(u, uv, sizeof uv));
        for (int i = 0; i < 6; i++) CHECK(uv[i] == UINT64_MAX);
        it_tensor_release(u);

        it_tensor *b = it_tensor_new(devs[d], IT_DTYPE_I8, 2, s);
        int8_t bv[6];
        CHECK_OK(it_tensor_fill(b, it_scalar_i64(300))); /* wraps modulo 2^8 */
        CHECK_OK(it_tensor_copy_to_host(b, bv, sizeof bv));
        CHECK(bv[0] == 44 && bv[5] == 44);
        CHECK_OK(it_tensor_fill(b, it_scalar_f64(-1e9))); /* saturates */
        CHECK_OK(it_tensor_copy_to_host(b, bv, sizeof bv));
        CHECK(bv[0] == INT8_MIN && bv[5] == INT8_MIN);
        it_tensor_release(b);

        /* filling a strided column only touches that column */
        it_tensor *m = it_tensor_zeros(devs[d], IT_DTYPE_I32, 2, s);
        it_tensor *col = it_tensor_slice(m, 1, 1, 2, 1);
        CHECK_OK(it_tensor_fill(col, it_scalar_i64(9)));
        int32_t mv[6];
        CHECK_OK(it_tensor_copy_to_host(m, mv, sizeof mv));
        CHECK(mv[0] == 0 && mv[1] == 9 && mv[2] == 0 && mv[3] == 0 && mv[4] == 9 && mv[5] == 0);
        it_tensor_release(col);
        it_tensor_release(m);
    }
}

static void test_copy(void) {
    int64_t s[2] = {2, 2};
    float fv[4] = {1.9f, -1.9f, 300.5f, -0.0f};
    it_tensor *src = it_tensor_from_host(cpu, IT_DTYPE_FP32, 2, s, fv, sizeof fv);
    /* cpu fp32 -> tp1 int64 (truncation toward zero) */
    it_tensor *dst = it_tensor_zeros(tp1, IT_DTYPE_I64, 2, s);
    CHECK_OK(it_tensor_copy_(dst, src));
    int64_t iv[4];
    CHECK_OK(it_tensor_copy_to_host(dst, iv, sizeof iv));
    CHECK(iv[0] == 1 && iv[1] == -1 && iv[2] == 300 && iv[3] == 0);
    /* tp1 int64 -> tp0 fp16 -> cpu fp64 */
    it_tensor *h = it_tensor_zeros(tp0, IT_DTYPE_FP16, 2, s);
    CHECK_OK(it_tensor_copy_(h, dst));
    it_tensor *d64 = it_tensor_zeros(cpu, IT_DTYPE_FP64, 2, s);
    CHECK_OK(it_tensor_copy_(d64, h));
    double dv[4];
    CHECK_OK(it_tensor_copy_to_host(d64, dv, sizeof dv));
    CHECK(dv[0] == 1 && dv[1] == -1 && dv[2] == 300 && dv[3] == 0);
    /* tp0 -> tp0, u8 from fp32 transposed (same device, cast with strides) */
    it_tensor *on0 = it_tensor_to_device(src, tp0);
    it_tensor *tr = it_tensor_transpose(on0, 0, 1);
    it_tensor *u8 = it_tensor_zeros(tp0, IT_DTYPE_U8, 2, s);
    CHECK_OK(it_tensor_copy_(u8, tr));
    uint8_t uv[4];
    CHECK_OK(it_tensor_copy_to_host(u8, uv, sizeof uv));
    CHECK_MSG(uv[0] == 1 && uv[1] == 255 && uv[2] == 0 && uv[3] == 0, "u8: %d %d %d %d", uv[0], uv[1], uv[2], uv[3]);
    /* shape mismatch */
    int64_t s3[2] = {2, 3};
    it_tensor *wrong = it_tensor_zeros(tp1, IT_DTYPE_FP32, 2, s3);
    CHECK_ERR(it_tensor_copy_(wrong, src), IT_ERR_INVALID_ARG, "shapes differ");
    it_tensor *clone = it_tensor_clone(tr);
    CHECK(clone && it_tensor_is_contiguous(clone) && !it_tensor_shares_storage(clone, on0));
    double x = 0;
    int64_t ix[2] = {0, 1};
    CHECK_OK(it_tensor_item(clone, ix, &x));
    CHECK_NEAR(x, 300.5, 0);
    it_tensor *all[] = {src, dst, h, d64, on0, tr, u8, wrong, clone};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) it_tensor_release(all[i]);
}

static void test_item_and_print(void) {
    int64_t s[2] = {2, 3};
    int32_t v[6] = {1, 2, 3, -4, 5, 6};
    it_tensor *t = it_tensor_from_host(tp1, IT_DTYPE_I32, 2, s, v, sizeof v);
    double x = 0;
    int64_t i0[2] = {1, 0}, bad[2] = {2, 0}, neg[2] = {0, -1};
    CHECK_OK(it_tensor_item(t, i0, &x));
    CHECK(x == -4);
    CHECK_ERR(it_tensor_item(t, bad, &x), IT_ERR_INVALID_ARG, "index 2 out of range for dimension 0 of size 2");
    CHECK_ERR(it_tensor_item(t, neg, &x), IT_ERR_INVALID_ARG, "index -1");

    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    CHECK_OK(it_tensor_print(t, f, "x"));
    it_tensor *tt = it_tensor_transpose(t, 0, 1);
    CHECK_OK(it_tensor_print(tt, f, NULL));
    int64_t bs[2] = {10, 20};
    it_tensor *big = arange(tp0, 2, bs);
    CHECK_OK(it_tensor_print(big, f, "big"));
    char text[4096];
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    CHECK_MSG(strstr(text, "x: tensor(shape=[2, 3], dtype=int32, device=testplug:1)\n  [1, 2, 3]\n  [-4, 5, 6]\n"),
              "print output:\n%s", text);
    CHECK_MSG(strstr(text, "tensor: tensor(shape=[3, 2], dtype=int32, device=testplug:1, strided)\n  [1, -4]\n"),
              "print output:\n%s", text);
    CHECK_MSG(strstr(text, "big: tensor(shape=[10, 20], dtype=float32, device=testplug:0)\n  [0, 1, 2, 3 ..., 16, 17, "
                           "18, 19]\n"),
              "print output:\n%s", text);
    CHECK_MSG(strstr(text, "  ... (4 rows)\n  [140, 141, 142, 143 ..., 156, 157, 158, 159]\n"), "print output:\n%s",
              text);
    CHECK_MSG(strstr(text, "[180, 181, 182, 183 ..., 196, 197, 198, 199]\n"), "print output:\n%s", text);
    it_tensor_release(t);
    it_tensor_release(tt);
    it_tensor_release(big);
}

/* ------------------------------------------------------------------ scopes */

static void test_scopes(void) {
    for (int d = 0; d < 3; d++) {
        it_device dev = devs[d];
        size_t before = used_bytes(dev);
        int64_t s[1] = {1000};
        it_scope_begin();
        it_tensor *a = it_tensor_zeros(dev, IT_DTYPE_FP32, 1, s);
        it_tensor *b = it_tensor_to_dtype(a, IT_DTYPE_FP64);
        it_tensor *v = it_tensor_slice(b, 0, 0, 10, 2);
        CHECK(a && b && v);
        CHECK(used_bytes(dev) >= before + 4000 + 8000);
        it_scope_begin(); /* nested: only its own tensors go at its end */
        it_tensor *inner = it_tensor_zeros(dev, IT_DTYPE_U8, 1, s);
        size_t with_inner = used_bytes(dev);
        CHECK(inner && with_inner > before);
        it_scope_end();
        CHECK(used_bytes(dev) == with_inner - 1024); /* 1000 B rounds to a 1024 B block */
        it_tensor *kept = it_scope_keep(b);
        CHECK(kept == b);
        it_scope_end();
        /* b survives (its storage, 8000 B -> an 8192 B block); a and the view are gone. */
        CHECK_MSG(used_bytes(dev) == before + 8192, "%s: used %zu, expected %zu", dev_names[d], used_bytes(dev),
                  before + 8192);
        double x = 1;
        int64_t i[1] = {999};
        CHECK_OK(it_tensor_item(b, i, &x));
        CHECK(x == 0);
        it_tensor_release(b);
        CHECK(used_bytes(dev) == before);

        /* keep of a tensor not in the innermost scope: a new reference */
        it_tensor *outer = it_tensor_zeros(dev, IT_DTYPE_FP32, 1, s); /* no scope open: ours */
        it_scope_begin();
        CHECK(it_scope_keep(outer) == outer);
        it_scope_end();
        it_tensor_release(outer);
        CHECK(used_bytes(dev) > before); /* one reference left */
        it_tensor_release(outer);
        CHECK(used_bytes(dev) == before);
        it_scope_end(); /* unbalanced end: harmless */
        CHECK(it_scope_keep(NULL) == NULL);
    }
}

/* ------------------------------------------------------------------ the caching allocator */

static void test_allocator(it_device dev, const char *dn) {
    it_mem_empty_cache(dev);
    it_mem_stats s0, s1, s2;
    CHECK_OK(it_mem_stats_get(dev, &s0));
    CHECK(s0.reserved == s0.used); /* nothing cached after empty_cache */
    int64_t n[1] = {250000};       /* 1 000 000 B */
    it_tensor *a = it_tensor_new(dev, IT_DTYPE_FP32, 1, n);
    CHECK(a != NULL);
    it_tensor_release(a);
    a = it_tensor_new(dev, IT_DTYPE_FP32, 1, n);
    it_tensor_release(a);
    int64_t n2[1] = {240000}; /* 960 000 B: a little smaller, still served by the cached block */
    a = it_tensor_new(dev, IT_DTYPE_FP32, 1, n2);
    it_tensor_release(a);
    CHECK_OK(it_mem_stats_get(dev, &s1));
    CHECK_MSG(s1.backend_mallocs == s0.backend_mallocs + 1, "%s: %llu backend mallocs for one size", dn,
              (unsigned long long)(s1.backend_mallocs - s0.backend_mallocs));
    CHECK(s1.used == s0.used && s1.reserved > s0.reserved);
    CHECK(s1.peak_used >= s0.used + 1000000);

    /* peaks: two live 4 MB tensors, then reset */
    it_mem_stats_reset_peak(dev);
    CHECK_OK(it_mem_stats_get(dev, &s1));
    CHECK(s1.peak_used == s1.used && s1.peak_reserved == s1.reserved);
    int64_t m[1] = {1 << 20};
    it_tensor *x = it_tensor_new(dev, IT_DTYPE_FP32, 1, m);
    it_tensor *y = it_tensor_new(dev, IT_DTYPE_FP32, 1, m);
    CHECK(x && y);
    it_tensor_release(x);
    it_tensor_release(y);
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK(s2.used == s1.used);
    CHECK_MSG(s2.peak_used == s1.used + 2 * (4u << 20), "%s: peak_used %zu, used %zu", dn, s2.peak_used, s1.used);
    CHECK(s2.peak_reserved >= s1.reserved + 2 * (4u << 20) - (1u << 20)); /* one block may come from the cache */
    CHECK(s2.reserved >= s2.used);
    it_mem_stats_reset_peak(dev);
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK(s2.peak_used == s2.used && s2.peak_reserved == s2.reserved);

    /* empty_cache gives every cached block back */
    uint64_t frees = s2.backend_frees;
    it_mem_empty_cache(dev);
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK(s2.reserved == s2.used && s2.backend_frees > frees);

    /* a limit on reserved bytes: past it, OOM naming the request and the device */
    it_mem_set_limit(dev, 8u << 20);
    int64_t big[1] = {4 << 20}; /* 16 MiB of fp32 */
    CHECK(it_tensor_new(dev, IT_DTYPE_FP32, 1, big) == NULL);
    CHECK(it_last_status() == IT_ERR_OOM);
    CHECK_HAS("requested 16777216 bytes");
    CHECK_HAS(dn);
    CHECK_HAS("the limit is 8 MiB");
    int64_t ok[1] = {1 << 20}; /* 4 MiB: fits */
    it_tensor *fits = it_tensor_new(dev, IT_DTYPE_FP32, 1, ok);
    CHECK(fits != NULL);
    it_tensor_release(fits);
    it_mem_set_limit(dev, 0);
    it_tensor *now = it_tensor_new(dev, IT_DTYPE_FP32, 1, big);
    CHECK(now != NULL);
    it_tensor_release(now);

    /* lowering the limit below what the cache holds gives the cached blocks back, so the
     * next allocation under the new limit is not refused because of free memory */
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK_MSG(s2.reserved >= s2.used + (16u << 20), "%s: the 16 MiB block should be cached", dn);
    it_mem_set_limit(dev, s2.used + (8u << 20));
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK_MSG(s2.reserved == s2.used, "%s: set_limit kept %zu cached bytes over the limit", dn, s2.reserved - s2.used);
    fits = it_tensor_new(dev, IT_DTYPE_FP32, 1, ok);
    CHECK(fits != NULL);
    it_tensor_release(fits);
    /* raising it keeps the cache */
    it_mem_set_limit(dev, 0);
    CHECK_OK(it_mem_stats_get(dev, &s2));
    CHECK(s2.reserved >= s2.used + (4u << 20));
    it_mem_empty_cache(dev);
}

/* testplug's devices hold 4 GiB: a larger request is the backend's OOM, reported the same way. */
static void test_backend_oom(void) {
    testplug_stats_rec before = tp_stats(0);
    int64_t s[2] = {1 << 20, 1 << 12}; /* 2^32 fp32 = 16 GiB */
    CHECK(it_tensor_new(tp0, IT_DTYPE_FP32, 2, s) == NULL);
    CHECK(it_last_status() == IT_ERR_OOM);
    CHECK_HAS("out of memory on testplug:0: requested 17179869184 bytes");
    CHECK_HAS("device free");
    testplug_stats_rec after = tp_stats(0);
    CHECK(after.mallocs == before.mallocs); /* no block was obtained */
}

/* ------------------------------------------------------------------ bad and edge inputs */

static void test_bad_inputs(void) {
    for (int d = 0; d < 3; d++) {
        it_device dev = devs[d];
        int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        CHECK(it_tensor_new(dev, IT_DTYPE_FP32, 9, s9) == NULL);
        CHECK(it_last_status() == IT_ERR_INVALID_ARG);
        CHECK_HAS("ndim 9 out of range 0..8");
        CHECK(it_tensor_zeros(dev, IT_DTYPE_FP32, -1, s9) == NULL);
        CHECK(it_last_status() == IT_ERR_INVALID_ARG);
        int64_t neg[2] = {2, -3};
        CHECK(it_tensor_new(dev, IT_DTYPE_FP32, 2, neg) == NULL);
        CHECK(it_last_status() == IT_ERR_INVALID_ARG);
        CHECK_HAS("dimension 1 has negative size -3");
        int64_t ok[1] = {4};
        CHECK(it_tensor_new(dev, (it_dtype)13, 1, ok) == NULL);
        CHECK(it_last_status() == IT_ERR_INVALID_ARG);
        CHECK_HAS("invalid dtype 13");
        CHECK(it_tensor_full(dev, (it_dtype)-1, 1, ok, it_scalar_f64(0)) == NULL);
        CHECK(it_last_status() == IT_ERR_INVALID_ARG);

        /* impossible sizes fail cleanly, before any allocation */
        int64_t huge[2] = {INT64_MAX, 2}, wide[3] = {1 << 30, 1 << 30, 1 << 30};
        CHECK(it_tensor_new(dev, IT_DTYPE_FP32, 2, huge) == NULL);
        CHECK_HAS("too large");
        CHECK(it_tensor_new(dev, IT_DTYPE_U8, 3, wide) == NULL);
        CHECK_HAS("too large");
        CHECK(it_last_status() != IT_OK);
        float dummy = 0;
        CHECK(it_tensor_from_host(dev, IT_DTYPE_FP32, 2, huge, &dummy, sizeof dummy) == NULL);
    }
    it_device nodev = {NULL, 0};
    int64_t s[1] = {1};
    CHECK(it_tensor_new(nodev, IT_DTYPE_FP32, 1, s) == NULL);
    CHECK_HAS("no device");
    it_device d9 = {tp0.backend, 7};
    CHECK(it_tensor_new(d9, IT_DTYPE_FP32, 1, s) == NULL);
    CHECK_HAS("index 7 out of range");
    it_mem_stats ms;
    CHECK_ERR(it_mem_stats_get(d9, &ms), IT_ERR_INVALID_ARG, "index 7 out of range (backend 'testplug' has 2 devices)");
}

static void test_zero_size(void) {
    for (int d = 0; d < 3; d++) {
        it_device dev = devs[d];
        int64_t s[3] = {2, 0, 3};
        it_tensor *t = it_tensor_zeros(dev, IT_DTYPE_FP32, 3, s);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(it_tensor_numel(t) == 0 && it_tensor_nbytes(t) == 0);
        CHECK_MSG(it_tensor_is_contiguous(t), "%s: a fresh (2, 0, 3) tensor is not contiguous", dev_names[d]);
        CHECK_OK(it_tensor_fill(t, it_scalar_f64(1)));
        CHECK_OK(it_tensor_copy_to_host(t, NULL, 0));
        CHECK_OK(it_tensor_copy_from_host(t, NULL, 0));
        it_tensor *o = it_tensor_to_device(t, devs[(d + 1) % 3]);
        CHECK(o && it_tensor_numel(o) == 0 && it_tensor_dim(o, 2) == 3);
        it_tensor *h = it_tensor_to_dtype(t, IT_DTYPE_FP16);
        CHECK(h && it_tensor_numel(h) == 0);
        it_tensor *p = it_tensor_transpose(t, 0, 2);
        it_tensor *c = it_tensor_contiguous(p);
        CHECK(c && it_tensor_dim(c, 0) == 3 && it_tensor_numel(c) == 0);
        int64_t v[2] = {0, -1};
        CHECK(it_tensor_view(t, 2, v) == NULL); /* -1 cannot be inferred next to a 0 */
        int64_t v2[2] = {6, 0};
        it_tensor *r = it_tensor_view(t, 2, v2);
        CHECK(r && it_tensor_dim(r, 0) == 6);
        int64_t i[3] = {0, 0, 0};
        double x;
        CHECK_ERR(it_tensor_item(t, i, &x), IT_ERR_INVALID_ARG, "out of range");
        FILE *f = tmpfile();
        if (f) {
            CHECK_OK(it_tensor_print(t, f, "e"));
            char text[256];
            rewind(f);
            size_t n = fread(text, 1, sizeof text - 1, f);
            text[n] = '\0';
            CHECK(strstr(text, "e: tensor(shape=[2, 0, 3], dtype=float32") != NULL);
            fclose(f);
        }
        it_tensor *all[] = {t, o, h, p, c, r};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) it_tensor_release(all[k]);
    }
}

/* Nothing leaked: every tensor above was released, so no block is in use on any device. */
/* The CPU backend puts blocks of 2 MiB or more on a huge-page boundary and advises the
 * kernel to back them with transparent huge pages (see backends/cpu/runtime.c): the block
 * starts on 2 MiB, and where THP is not switched off the kernel lists its mapping as
 * THP-eligible. */
static void test_cpu_huge_pages(void) {
    if (getenv("IT_CPU_NO_HUGEPAGES")) {
        printf("cpu huge pages: IT_CPU_NO_HUGEPAGES is set, not checked\n");
        return;
    }
    it_scope_begin();
    const size_t huge = (size_t)2 << 20;
    it_tensor *t = it_tensor_new(cpu, IT_DTYPE_FP32, 1, (int64_t[]){(int64_t)(3 * huge / 4 + 1000)}); /* 6 MiB + */
    CHECK_MSG(t != NULL, "6 MiB tensor: %s", it_last_error());
    if (!t) {
        it_scope_end();
        return;
    }
    CHECK_OK(it_tensor_fill(t, it_scalar_f64(1.0)));
    uintptr_t p = (uintptr_t)it_tensor_desc(t).data;
    CHECK_MSG(p % huge == 0, "a 6 MiB CPU block starts at %#lx, not on a 2 MiB boundary", (unsigned long)p);
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = '\0';
        mode[strcspn(mode, "\n")] = '\0';
        fclose(f);
    }
    FILE *sm = fopen("/proc/self/smaps", "r");
    if (!mode[0] || strstr(mode, "[never]") || !sm) {
        printf("cpu huge pages: THP %s on this kernel; alignment checked only\n", mode[0] ? "is off" : "not reported");
    } else {
        char line[512];
        bool inside = false;
        int eligible = -1;
        while (fgets(line, sizeof line, sm)) {
            unsigned long lo, hi;
            if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
                inside = p >= lo && p < hi;
            } else if (inside && sscanf(line, "THPeligible: %d", &eligible) == 1) {
                break;
            }
        }
        if (eligible < 0)
            printf("cpu huge pages: this kernel's smaps has no THPeligible field; alignment checked only\n");
        else
            CHECK_MSG(eligible == 1, "the 6 MiB block's mapping is not THP-eligible (THP mode: %s)", mode);
    }
    if (sm) fclose(sm);
    it_scope_end();
}

static void test_no_leaks(void) {
    for (int d = 0; d < 3; d++) {
        it_mem_empty_cache(devs[d]);
        it_mem_stats s;
        CHECK_OK(it_mem_stats_get(devs[d], &s));
        CHECK_MSG(s.used == 0 && s.reserved == 0, "%s: used %zu, reserved %zu at exit", dev_names[d], s.used,
                  s.reserved);
    }
    for (int d = 0; d < 2; d++) {
        testplug_stats_rec s = tp_stats(d);
        CHECK_MSG(s.live_blocks == 0 && s.mallocs == s.frees, "testplug:%d: %llu live blocks", d,
                  (unsigned long long)s.live_blocks);
        CHECK(s.kernel_calls > 0);
    }
}

int main(void) {
    cpu = it_device_cpu();
    if (it_device_parse("testplug:0", &tp0) || it_device_parse("testplug:1", &tp1)) {
        fprintf(stderr, "cannot load the testplug plugin: %s\n", it_last_error());
        return 1;
    }
    devs[0] = cpu;
    devs[1] = tp0;
    devs[2] = tp1;
    test_create();
    test_host_round_trip();
    for (int d = 0; d < 3; d++) test_views(devs[d], dev_names[d]);
    test_to_device();
    test_to_dtype();
    test_fill();
    test_declined_call();
    test_copy();
    test_item_and_print();
    test_scopes();
    for (int d = 0; d < 3; d++) test_allocator(devs[d], dev_names[d]);
    test_backend_oom();
    test_bad_inputs();
    test_zero_size();
    test_cpu_huge_pages();
    test_no_leaks();
    return it_test_report("test_tensor");
}
