/* CPU kernels, part 2: layernorm, softmax and cross entropy. Forwards against double
 * references written here; backwards against central differences of the fp64 forward
 * (h = 1e-6: truncation ~h^2 = 1e-12, rounding ~1e-16 * |L| / h ~ 1e-9 for the |L| ~ 10
 * losses used, so a 1e-7 relative tolerance (plus 1e-8 absolute) flags any wrong term). */
#include <float.h>
#include <stdio.h>

#include "test_cpu_util.h"

#define FD_H 1e-6
#define FD_TOL(x) (1e-7 * fabs(x) + 1e-8)

/* ====================================================================== layernorm */

/* y, mean, rstd of one row in double. */
static void ln_ref(const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, double eps, int64_t r, int64_t C, double *y,
                   double *mean, double *rstd) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++) m += get(x, r * C + c);
    m /= (double)C;
    for (int64_t c = 0; c < C; c++) v += (get(x, r * C + c) - m) * (get(x, r * C + c) - m);
    v /= (double)C;
    double s = 1.0 / sqrt(v + eps);
    for (int64_t c = 0; c < C; c++) y[c] = (get(x, r * C + c) - m) * s * get(w, c) + (b ? get(b, c) : 0.0);
    *mean = m;
    *rstd = s;
}

/* Forward of x (R, C) as given (any view) into fresh outputs, checked against ln_ref.
 * fp32 tolerance: two-pass sums over C terms in fp32 give ~C u relative error in mean and
 * var; y = norm * w + b with |norm| <= sqrt(C): 1e-5 (1 + |y|) for the C <= 64 used. */
static void ln_fwd_check(it_tdesc *x, it_tdesc *w, it_tdesc *b, float eps, int64_t R, int64_t C, const char *what) {
    it_dtype dt = x->dtype;
    it_tdesc y = mk(NULL, dt, x->ndim, x->shape, NULL), mean = mk(NULL, dt, 1, (int64_t[]){R}, NULL), rstd = mean;
    void *py = alloc_fill(&y, 0), *pm = alloc_fill(&mean, 0), *pr = alloc_fill(&rstd, 0);
    CHECK_OK(K->layernorm_fwd(NULL, x, w, b, eps, &y, &mean, &rstd));
    double tol = dt == IT_DTYPE_FP32 ? 1e-5 : 1e-13;
    double *ry = malloc((size_t)(C + 1) * sizeof(double));
    int bad = 0;
    for (int64_t r = 0; r < R; r++) {
        double m, s;
        ln_ref(x, w, b, (double)eps, r, C, ry, &m, &s);
        bad += !(fabs(get(&mean, r) - m) <= tol * (1 + fabs(m)));
        bad += !(fabs(get(&rstd, r) - s) <= tol * (1 + fabs(s)));
        for (int64_t c = 0; c < C; c++) bad += !(fabs(get(&y, r * C + c) - ry[c]) <= tol * (1 + fabs(ry[c])));
    }
    CHECK_MSG(bad == 0, "layernorm_fwd %s %s: %d wrong", what, it_dtype_name(dt), bad);
    free(ry);
    free(py);
    free(pm);
    free(pr);
}

/* L = sum(y * G) in fp64 through the kernel. */
static double ln_loss(it_tdesc *x, it_tdesc *w, it_tdesc *b, const double *G, int64_t R, int64_t C) {
    double *y = malloc((size_t)(R * C) * sizeof(double)), *m = malloc((size_t)R * sizeof(double)),
           *s = malloc((size_t)R * sizeof(double));
    it_tdesc ty = mk(y, IT_DTYPE_FP64, x->ndim, x->shape, NULL);
    it_tdesc tm = mk(m, IT_DTYPE_FP64, 1, (int64_t[]){R}, NULL), ts = mk(s, IT_DTYPE_FP64, 1, (int64_t[]){R}, NULL);
    CHECK_OK(K->layernorm_fwd(NULL, x, w, b, 1e-5f, &ty, &tm, &ts));
    double L = 0;
    for (int64_t i = 0; i < R * C; i++) L += y[i] * G[i];
    free(y);
    free(m);
    free(s);
    return L;
}

/* dL/dp by central differences at element i of the fp64 buffer p. */
static double fd_at(double *p, int64_t i, double (*loss)(void *), void *ctx) {
    double keep = p[i];
    p[i] = keep + FD_H;
    double lp = loss(ctx);
    p[i] = keep - FD_H;
    double lm = loss(ctx);
    p[i] = keep;
    return (lp - lm) / (2 * FD_H);
}

typedef struct ln_ctx {
    it_tdesc x, w, b;
    const double *G;
    int64_t R, C;
} ln_ctx;
static double ln_loss_ctx(void *p) {
    ln_ctx *c = p;
    return ln_loss(&c->x, &c->w, &c->b, c->G, c->R, c->C);
}

static void test_layernorm(void) {
    const int64_t R = 7, C = 13;
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        it_tdesc x = mk(NULL, dt, 2, (int64_t[]){R, C}, NULL), w = mk(NULL, dt, 1, (int64_t[]){C}, NULL), b = w;
        void *px = alloc_rand(&x, -2, 3), *pw = alloc_rand(&w, 0.5, 1.5), *pb = alloc_rand(&b, -1, 1);
        ln_fwd_check(&x, &w, &b, 1e-5f, R, C, "contiguous");
        ln_fwd_check(&x, &w, NULL, 1e-5f, R, C, "no bias");
        /* 3-D x as a strided view (every other column of a (2, 4, 2C) buffer) */
        it_tdesc x3 = mk(NULL, dt, 3, (int64_t[]){2, 4, C}, (int64_t[]){8 * C, 2 * C, 2});
        void *px3 = alloc_rand(&x3, -1, 1);
        it_tdesc ws = mk(px, dt, 1, (int64_t[]){C}, (int64_t[]){3}); /* strided weight */
        ln_fwd_check(&x3, &ws, &b, 1e-5f, 8, C, "3-D strided");
        /* C = 1: var 0, y = b; R = 1 */
        it_tdesc x1 = mk(px, dt, 2, (int64_t[]){R, 1}, NULL), w1 = mk(pw, dt, 1, (int64_t[]){1}, NULL);
        it_tdesc b1 = mk(pb, dt, 1, (int64_t[]){1}, NULL);
        ln_fwd_check(&x1, &w1, &b1, 1e-5f, R, 1, "C = 1");
        it_tdesc xr1 = mk(px, dt, 2, (int64_t[]){1, C}, NULL);
        ln_fwd_check(&xr1, &w, &b, 1e-5f, 1, C, "R = 1");
        free(px3);
        free(px);
        free(pw);
        free(pb);
    }

    /* Backward against finite differences, fp64, on a 3-D input (2, 3, 7). */
    {
        const int64_t R2 = 6, C2 = 7;
        ln_ctx c;
        c.R = R2, c.C = C2;
        c.x = mk(NULL, IT_DTYPE_FP64, 3, (int64_t[]){2, 3, C2}, NULL);
        c.w = mk(NULL, IT_DTYPE_FP64, 1, (int64_t[]){C2}, NULL);
        c.b = c.w;
        double *x = alloc_rand(&c.x, -2, 2), *w = alloc_rand(&c.w, 0.5, 1.5), *b = alloc_rand(&c.b, -1, 1);
        double G[42];
        for (int i = 0; i < 42; i++) G[i] = urand();
        c.G = G;
        double y[42], m[6], s[6], dx[42], dw[7], db[7];
        it_tdesc ty = mk(y, IT_DTYPE_FP64, 3, (int64_t[]){2, 3, C2}, NULL),
                 tm = mk(m, IT_DTYPE_FP64, 2, (int64_t[]){2, 3}, NULL);
        it_tdesc ts = mk(s, IT_DTYPE_FP64, 2, (int64_t[]){2, 3}, NULL),
                 tg = mk(G, IT_DTYPE_FP64, 3, (int64_t[]){2, 3, C2}, NULL);
        it_tdesc tdx = mk(dx, IT_DTYPE_FP64, 3, (int64_t[]){2, 3, C2}, NULL),
                 tdw = mk(dw, IT_DTYPE_FP64, 1, (int64_t[]){C2}, NULL);
        it_tdesc tdb = mk(db, IT_DTYPE_FP64, 1, (int64_t[]){C2}, NULL);
        CHECK_OK(K->layernorm_fwd(NULL, &c.x, &c.w, &c.b, 1e-5f, &ty, &tm, &ts));
        CHECK_OK(K->layernorm_bwd(NULL, &tg, &c.x, &c.w, &tm, &ts, &tdx, &tdw, &tdb));
        int bad = 0;
        for (int64_t i = 0; i < R2 * C2; i++) {
            double fd = fd_at(x, i, ln_loss_ctx, &c);
            if (!(fabs(dx[i] - fd) <= FD_TOL(fd)) && bad++ == 0)
                fprintf(stderr, "ln dx[%lld] %.12g fd %.12g\n", (long long)i, dx[i], fd);
        }
        for (int64_t i = 0; i < C2; i++) {
            double fw = fd_at(w, i, ln_loss_ctx, &c), fb = fd_at(b, i, ln_loss_ctx, &c);
            bad += !(fabs(dw[i] - fw) <= FD_TOL(fw)) + !(fabs(db[i] - fb) <= FD_TOL(fb));
        }
        CHECK_MSG(bad == 0, "layernorm_bwd vs finite differences: %d wrong", bad);
        /* db may be NULL; dw and dx are the same */
        double dx2[42], dw2[7];
        it_tdesc tdx2 = mk(dx2, IT_DTYPE_FP64, 3, (int64_t[]){2, 3, C2}, NULL),
                 tdw2 = mk(dw2, IT_DTYPE_FP64, 1, (int64_t[]){C2}, NULL);
        CHECK_OK(K->layernorm_bwd(NULL, &tg, &c.x, &c.w, &tm, &ts, &tdx2, &tdw2, NULL));
        CHECK(memcmp(dx, dx2, sizeof dx) == 0 && memcmp(dw, dw2, sizeof dw) == 0);

        /* fp32 backward against this fp64 one (same inputs rounded to fp32): sums over C = 7
         * and R = 6 terms in fp32, 1e-5 relative. */
        float xf[42], wf[7], gf[42], mf[6], sf[6], yf[42], dxf[42], dwf[7], dbf[7];
        for (int i = 0; i < 42; i++) xf[i] = (float)x[i], gf[i] = (float)G[i];
        for (int i = 0; i < 7; i++) wf[i] = (float)w[i];
        it_tdesc fx = mk(xf, IT_DTYPE_FP32, 2, (int64_t[]){R2, C2}, NULL),
                 fw = mk(wf, IT_DTYPE_FP32, 1, (int64_t[]){C2}, NULL);
        it_tdesc fy = mk(yf, IT_DTYPE_FP32, 2, (int64_t[]){R2, C2}, NULL),
                 fg = mk(gf, IT_DTYPE_FP32, 2, (int64_t[]){R2, C2}, NULL);
        it_tdesc fm = mk(mf, IT_DTYPE_FP32, 1, (int64_t[]){R2}, NULL),
                 fs = mk(sf, IT_DTYPE_FP32, 1, (int64_t[]){R2}, NULL);
        it_tdesc fdx = mk(dxf, IT_DTYPE_FP32, 2, (int64_t[]){R2, C2}, NULL),
                 fdw = mk(dwf, IT_DTYPE_FP32, 1, (int64_t[]){C2}, NULL);
        it_tdesc fdb = mk(dbf, IT_DTYPE_FP32, 1, (int64_t[]){C2}, NULL);
        CHECK_OK(K->layernorm_fwd(NULL, &fx, &fw, NULL, 1e-5f, &fy, &fm, &fs));
        CHECK_OK(K->layernorm_bwd(NULL, &fg, &fx, &fw, &fm, &fs, &fdx, &fdw, &fdb));
        bad = 0;
        for (int i = 0; i < 42; i++) bad += !(fabs(dxf[i] - dx[i]) <= 1e-5 * (1 + fabs(dx[i])));
        for (int i = 0; i < 7; i++)
            bad += !(fabs(dwf[i] - dw[i]) <= 1e-5 * (1 + fabs(dw[i]))) +
                   !(fabs(dbf[i] - db[i]) <= 1e-5 * (1 + fabs(db[i])));
        CHECK_MSG(bad == 0, "layernorm_bwd fp32 vs fp64: %d wrong", bad);
        free(x);
        free(w);
        free(b);
    }

    /* dw/db do not depend on the thread count (R = 1000 rows, 64 columns = 4 column tasks). */
    {
        const int64_t R3 = 1000, C3 = 64;
        it_tdesc x = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R3, C3}, NULL), g = x, dx = x;
        it_tdesc w = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){C3}, NULL), dw1 = w, db1 = w, dw3 = w, db3 = w;
        it_tdesc m = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){R3}, NULL), s = m;
        void *bufs[] = {alloc_rand(&x, -1, 1),     alloc_rand(&g, -1, 1),   alloc_fill(&dx, 0),  alloc_rand(&w, -1, 1),
                        alloc_fill(&dw1, 0),       alloc_fill(&db1, 0),     alloc_fill(&dw3, 0), alloc_fill(&db3, 0),
                        alloc_rand(&m, -0.1, 0.1), alloc_rand(&s, 0.9, 1.1)};
        int saved = max_threads();
        set_threads(1);
        CHECK_OK(K->layernorm_bwd(NULL, &g, &x, &w, &m, &s, &dx, &dw1, &db1));
        set_threads(3);
        CHECK_OK(K->layernorm_bwd(NULL, &g, &x, &w, &m, &s, &dx, &dw3, &db3));
        set_threads(saved);
        CHECK(memcmp(dw1.data, dw3.data, (size_t)C3 * sizeof(float)) == 0);
        CHECK(memcmp(db1.data, db3.data, (size_t)C3 * sizeof(float)) == 0);
        double ref = 0;
        for (int64_t r = 0; r < R3; r++) ref += get(&g, r * C3 + 5);
        CHECK_NEAR(get(&db1, 5), ref, 1e-4); /* 1000 fp32 terms in [-1, 1] */
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }

    /* Size 0 and errors. */
    float buf[64] = {0}, ob[64];
    it_tdesc x0 = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL),
             w4 = mk(buf, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    it_tdesc y0 = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL),
             m0 = mk(ob, IT_DTYPE_FP32, 1, (int64_t[]){0}, NULL);
    CHECK_OK(K->layernorm_fwd(NULL, &x0, &w4, NULL, 1e-5f, &y0, &m0, &m0));
    float dwz[4] = {1, 1, 1, 1};
    it_tdesc dwt = mk(dwz, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    CHECK_OK(K->layernorm_bwd(NULL, &x0, &x0, &w4, &m0, &m0, &y0, &dwt, NULL));
    CHECK(dwz[0] == 0.0f && dwz[3] == 0.0f); /* a sum over no rows */
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){3, 4}, NULL),
             y = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 4}, NULL);
    it_tdesc m3 = mk(ob + 20, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL),
             r3 = mk(ob + 30, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL);
    it_tdesc w5 = mk(buf, IT_DTYPE_FP32, 1, (int64_t[]){5}, NULL);
    CHECK_ERR(K->layernorm_fwd(NULL, &x, &w5, NULL, 1e-5f, &y, &m3, &r3), IT_ERR_INVALID_ARG,
              "layernorm_fwd: w must be (4)");
    it_tdesc m2 = mk(ob + 20, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_ERR(K->layernorm_fwd(NULL, &x, &w4, NULL, 1e-5f, &y, &m2, &r3), IT_ERR_INVALID_ARG,
              "mean has 2 elements, expected R = 3");
    it_tdesc md = mk(ob + 20, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL);
    CHECK_ERR(K->layernorm_fwd(NULL, &x, &w4, NULL, 1e-5f, &y, &m3, &md), IT_ERR_INVALID_ARG,
              "rstd dtype float64, expected float32");
    it_tdesc yb = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 5}, NULL);
    CHECK_ERR(K->layernorm_fwd(NULL, &x, &w4, NULL, 1e-5f, &yb, &m3, &r3), IT_ERR_INVALID_ARG,
              "y.shape[1] = 5 != x.shape[1] = 4");
    CHECK_ERR(K->layernorm_bwd(NULL, &x, &x, &w4, &m3, &r3, &y, &w5, NULL), IT_ERR_INVALID_ARG,
              "layernorm_bwd: dw must be (4)");
    it_tdesc xh = mk(buf, IT_DTYPE_FP16, 2, (int64_t[]){3, 4}, NULL);
    CHECK_ERR(K->layernorm_fwd(NULL, &xh, &w4, NULL, 1e-5f, &y, &m3, &r3), IT_ERR_UNSUPPORTED,
              "dtype float16 not supported");
}

/* ====================================================================== softmax */

static void softmax_ref_row(const it_tdesc *x, int64_t r, int64_t S, int64_t nvalid, double scale, double *y) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s < nvalid; s++) mx = fmax(mx, scale * get(x, r * S + s));
    for (int64_t s = 0; s < S; s++) {
        y[s] = s < nvalid ? exp(scale * get(x, r * S + s) - mx) : 0.0;
        sum += y[s];
    }
    for (int64_t s = 0; s < S; s++) y[s] /= sum;
}

/* fp32: exp within a few ulp, sums of S <= 16 terms: 1e-6 absolute on values <= 1. */
static void softmax_fwd_check(it_tdesc *x, float scale, bool causal, const char *what) {
    int nd = x->ndim;
    int64_t S = x->shape[nd - 1], T = nd > 1 ? x->shape[nd - 2] : 1, R = t_numel(x) / (S ? S : 1);
    it_tdesc y = mk(NULL, x->dtype, nd, x->shape, NULL);
    void *py = alloc_fill(&y, NAN);
    it_softmax_args a = {scale, causal};
    CHECK_OK(K->softmax_fwd(NULL, &a, x, &y));
    double tol = x->dtype == IT_DTYPE_FP32 ? 1e-6 : 1e-15;
    double *ry = malloc((size_t)(S + 1) * sizeof(double));
    int bad = 0, masked_nonzero = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t nv = causal ? r % T + (S - T) + 1 : S;
        softmax_ref_row(x, r, S, nv, scale, ry);
        for (int64_t s = 0; s < S; s++) {
            double got = get(&y, r * S + s);
            bad += !(fabs(got - ry[s]) <= tol);
            masked_nonzero += s >= nv && got != 0.0;
        }
    }
    CHECK_MSG(bad == 0 && masked_nonzero == 0, "softmax_fwd %s %s: %d wrong, %d masked not 0", what,
              it_dtype_name(x->dtype), bad, masked_nonzero);
    free(ry);
    free(py);
}

typedef struct sm_ctx {
    it_tdesc x;
    it_softmax_args a;
    const double *G;
    int64_t n;
} sm_ctx;
static double sm_loss(void *p) {
    sm_ctx *c = p;
    double *y = malloc((size_t)c->n * sizeof(double));
    it_tdesc ty = mk(y, IT_DTYPE_FP64, c->x.ndim, c->x.shape, NULL);
    CHECK_OK(K->softmax_fwd(NULL, &c->a, &c->x, &ty));
    double L = 0;
    for (int64_t i = 0; i < c->n; i++) L += y[i] * c->G[i];
    free(y);
    return L;
}

static void test_softmax(void) {
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        it_tdesc x = mk(NULL, dt, 3, (int64_t[]){3, 5, 7}, NULL);
        void *px = alloc_rand(&x, -4, 4);
        softmax_fwd_check(&x, 1.0f, false, "plain");
        softmax_fwd_check(&x, 0.37f, true, "causal, cols > rows");
        it_tdesc xs = mk(px, dt, 3, (int64_t[]){3, 7, 7}, (int64_t[]){0, 1, 7}); /* transposed, broadcast batch */
        softmax_fwd_check(&xs, 2.0f, true, "causal square, strided");
        it_tdesc x1 = mk(px, dt, 1, (int64_t[]){13}, NULL);
        softmax_fwd_check(&x1, 1.0f, true, "1-D");
        it_tdesc xc1 = mk(px, dt, 2, (int64_t[]){4, 1}, NULL);
        softmax_fwd_check(&xc1, 1.0f, false, "one column");
        free(px);
    }
    /* large logits do not overflow (max subtracted) */
    float big[3] = {1000.0f, 1000.0f, -1000.0f}, yb[3];
    it_tdesc tb = mk(big, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL), tyb = mk(yb, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL);
    it_softmax_args plain = {1.0f, false};
    CHECK_OK(K->softmax_fwd(NULL, &plain, &tb, &tyb));
    CHECK(yb[0] == 0.5f && yb[1] == 0.5f && yb[2] == 0.0f);

    /* Backward against finite differences (fp64), plain and causal with a scale. */
    for (int causal = 0; causal < 2; causal++) {
        sm_ctx c;
        c.x = mk(NULL, IT_DTYPE_FP64, 3, (int64_t[]){2, 4, 6}, NULL);
        c.n = 48;
        c.a.scale = causal ? 0.6f : 1.0f;
        c.a.causal = causal;
        double *x = alloc_rand(&c.x, -2, 2), G[48], y[48], dx[48];
        for (int i = 0; i < 48; i++) G[i] = urand();
        c.G = G;
        it_tdesc ty = mk(y, IT_DTYPE_FP64, 3, c.x.shape, NULL), tg = mk(G, IT_DTYPE_FP64, 3, c.x.shape, NULL);
        it_tdesc tdx = mk(dx, IT_DTYPE_FP64, 3, c.x.shape, NULL);
        CHECK_OK(K->softmax_fwd(NULL, &c.a, &c.x, &ty));
        CHECK_OK(K->softmax_bwd(NULL, &c.a, &ty, &tg, &tdx));
        int bad = 0;
        for (int i = 0; i < 48; i++) {
            double fd = fd_at(x, i, sm_loss, &c);
            if (!(fabs(dx[i] - fd) <= FD_TOL(fd)) && bad++ == 0)
                fprintf(stderr, "softmax dx[%d] %.12g fd %.12g\n", i, dx[i], fd);
        }
        CHECK_MSG(bad == 0, "softmax_bwd causal %d vs finite differences: %d wrong", causal, bad);
        /* fp32 backward, strided dy, against the fp64 one: 1e-6 on values of order 1 */
        float yf[48], gf[96], dxf[48];
        for (int i = 0; i < 48; i++) yf[i] = (float)y[i], gf[2 * i] = (float)G[i], gf[2 * i + 1] = NAN;
        it_tdesc fy = mk(yf, IT_DTYPE_FP32, 3, c.x.shape, NULL), fdx = mk(dxf, IT_DTYPE_FP32, 3, c.x.shape, NULL);
        it_tdesc fg = mk(gf, IT_DTYPE_FP32, 3, c.x.shape, (int64_t[]){48, 12, 2});
        CHECK_OK(K->softmax_bwd(NULL, &c.a, &fy, &fg, &fdx));
        bad = 0;
        for (int i = 0; i < 48; i++) bad += !(fabs(dxf[i] - dx[i]) <= 1e-6);
        CHECK_MSG(bad == 0, "softmax_bwd fp32 causal %d: %d wrong", causal, bad);
        free(x);
    }

    /* Size 0 and errors. */
    float buf[64] = {0}, ob[64];
    it_tdesc x0 = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL),
             y0 = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL);
    CHECK_OK(K->softmax_fwd(NULL, &plain, &x0, &y0));
    CHECK_OK(K->softmax_bwd(NULL, &plain, &x0, &x0, &y0));
    it_softmax_args causal = {1.0f, true};
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){5, 4}, NULL),
             y = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){5, 4}, NULL);
    CHECK_ERR(K->softmax_fwd(NULL, &causal, &x, &y), IT_ERR_INVALID_ARG,
              "causal mask needs cols >= rows, got rows 5, cols 4");
    it_tdesc y2 = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){5, 3}, NULL);
    CHECK_ERR(K->softmax_fwd(NULL, &plain, &x, &y2), IT_ERR_INVALID_ARG, "y.shape[1] = 3 != x.shape[1] = 4");
    CHECK_ERR(K->softmax_bwd(NULL, &plain, &x, &y2, &y), IT_ERR_INVALID_ARG, "softmax_bwd: dy.shape[1] = 3");
    CHECK_ERR(K->softmax_fwd(NULL, NULL, &x, &y), IT_ERR_INVALID_ARG, "args is NULL");
    it_tdesc xi = mk(buf, IT_DTYPE_I64, 2, (int64_t[]){5, 4}, NULL);
    CHECK_ERR(K->softmax_fwd(NULL, &plain, &xi, &y), IT_ERR_UNSUPPORTED, "softmax_fwd: dtype int64 not supported");
}

/* ====================================================================== cross entropy */

typedef struct ce_ctx {
    it_tdesc logits, targets;
    int64_t valid, N;
    const double *dl;
} ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    double losses[16];
    it_tdesc tl = mk(losses, IT_DTYPE_FP64, 1, (int64_t[]){c->N}, NULL);
    CHECK_OK(K->cross_entropy_fwd(NULL, &c->logits, &c->targets, c->valid, &tl));
    double L = 0;
    for (int64_t n = 0; n < c->N; n++) L += losses[n] * c->dl[n];
    return L;
}

static void test_cross_entropy(void) {
    const int64_t N = 6, Vp = 10, V = 7;
    int64_t t64[6] = {0, 6, 3, 3, 1, 5};
    int32_t t32[6];
    for (int i = 0; i < 6; i++) t32[i] = (int32_t)t64[i];
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++) {
            it_dtype dt = dts[d];
            /* logits as every other column of an (N, 2 Vp) buffer; padded columns hold junk */
            it_tdesc lg = mk(NULL, dt, 2, (int64_t[]){N, Vp}, (int64_t[]){2 * Vp, 2});
            void *pl = alloc_rand(&lg, -5, 5);
            for (int64_t n = 0; n < N; n++) set(&lg, n * Vp + V, 1e30); /* must not take part */
            it_tdesc tt =
                k ? mk(t32, IT_DTYPE_I32, 1, (int64_t[]){N}, NULL) : mk(t64, IT_DTYPE_I64, 1, (int64_t[]){N}, NULL);
            it_tdesc loss = mk(NULL, dt, 1, (int64_t[]){N}, NULL);
            void *pls = alloc_fill(&loss, NAN);
            CHECK_OK(K->cross_entropy_fwd(NULL, &lg, &tt, V, &loss));
            /* fp32: logsumexp of 7 terms and a subtraction of values ~5: 1e-5 absolute */
            double tol = dt == IT_DTYPE_FP32 ? 1e-5 : 1e-13;
            int bad = 0;
            for (int64_t n = 0; n < N; n++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t v = 0; v < V; v++) mx = fmax(mx, get(&lg, n * Vp + v));
                for (int64_t v = 0; v < V; v++) sum += exp(get(&lg, n * Vp + v) - mx);
                double ref = mx + log(sum) - get(&lg, n * Vp + t64[n]);
                bad += !(fabs(get(&loss, n) - ref) <= tol);
            }
            CHECK_MSG(bad == 0, "cross_entropy_fwd %s: %d wrong", it_dtype_name(dt), bad);

            /* bwd: (softmax - onehot) * dloss, padded columns exactly 0 */
            it_tdesc dl = mk(NULL, dt, 1, (int64_t[]){N}, NULL), dlg = mk(NULL, dt, 2, (int64_t[]){N, Vp}, NULL);
            void *pdl = alloc_rand(&dl, -1, 1), *pdg = alloc_fill(&dlg, NAN);
            CHECK_OK(K->cross_entropy_bwd(NULL, &lg, &tt, V, &dl, &dlg));
            bad = 0;
            int pad_nonzero = 0;
            for (int64_t n = 0; n < N; n++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t v = 0; v < V; v++) mx = fmax(mx, get(&lg, n * Vp + v));
                for (int64_t v = 0; v < V; v++) sum += exp(get(&lg, n * Vp + v) - mx);
                for (int64_t v = 0; v < Vp; v++) {
                    double got = get(&dlg, n * Vp + v);
                    if (v >= V) {
                        pad_nonzero += got != 0.0;
                        continue;
                    }
                    double ref = (exp(get(&lg, n * Vp + v) - mx) / sum - (v == t64[n])) * get(&dl, n);
                    bad += !(fabs(got - ref) <= (dt == IT_DTYPE_FP32 ? 1e-6 : 1e-15));
                }
            }
            CHECK_MSG(bad == 0 && pad_nonzero == 0, "cross_entropy_bwd %s: %d wrong, %d padded nonzero",
                      it_dtype_name(dt), bad, pad_nonzero);
            free(pl);
            free(pls);
            free(pdl);
            free(pdg);
        }

    /* Backward against finite differences (fp64). */
    {
        ce_ctx c;
        c.N = N, c.valid = V;
        c.logits = mk(NULL, IT_DTYPE_FP64, 2, (int64_t[]){N, Vp}, NULL);
        c.targets = mk(t64, IT_DTYPE_I64, 1, (int64_t[]){N}, NULL);
        double *x = alloc_rand(&c.logits, -3, 3), dl[6], dx[60];
        for (int i = 0; i < 6; i++) dl[i] = urand();
        c.dl = dl;
        it_tdesc tdl = mk(dl, IT_DTYPE_FP64, 1, (int64_t[]){N}, NULL),
                 tdx = mk(dx, IT_DTYPE_FP64, 2, (int64_t[]){N, Vp}, NULL);
        CHECK_OK(K->cross_entropy_bwd(NULL, &c.logits, &c.targets, V, &tdl, &tdx));
        int bad = 0;
        for (int i = 0; i < N * Vp; i++) {
            double fd = fd_at(x, i, ce_loss, &c);
            if (!(fabs(dx[i] - fd) <= FD_TOL(fd)) && bad++ == 0)
                fprintf(stderr, "ce dx[%d] %.12g fd %.12g\n", i, dx[i], fd);
        }
        CHECK_MSG(bad == 0, "cross_entropy_bwd vs finite differences: %d wrong", bad);
        free(x);
    }

    /* Size 0 and errors naming the row and value. */
    float lb[40] = {0}, ls[4], dlb[40];
    int64_t tz = 0;
    it_tdesc l0 = mk(lb, IT_DTYPE_FP32, 2, (int64_t[]){0, 10}, NULL),
             t0 = mk(&tz, IT_DTYPE_I64, 1, (int64_t[]){0}, NULL);
    it_tdesc s0 = mk(ls, IT_DTYPE_FP32, 1, (int64_t[]){0}, NULL);
    CHECK_OK(K->cross_entropy_fwd(NULL, &l0, &t0, 7, &s0));
    it_tdesc lg = mk(lb, IT_DTYPE_FP32, 2, (int64_t[]){4, 10}, NULL),
             loss = mk(ls, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    int64_t bad_t[4] = {0, 1, 2, 7}, neg_t[4] = {0, -3, 2, 1};
    it_tdesc tb = mk(bad_t, IT_DTYPE_I64, 1, (int64_t[]){4}, NULL),
             tn = mk(neg_t, IT_DTYPE_I64, 1, (int64_t[]){4}, NULL);
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tb, 7, &loss), IT_ERR_INVALID_ARG, "targets[3] = 7 outside [0, 7)");
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tn, 7, &loss), IT_ERR_INVALID_ARG, "targets[1] = -3 outside [0, 7)");
    it_tdesc dlg = mk(dlb, IT_DTYPE_FP32, 2, (int64_t[]){4, 10}, NULL);
    CHECK_ERR(K->cross_entropy_bwd(NULL, &lg, &tb, 7, &loss, &dlg), IT_ERR_INVALID_ARG,
              "cross_entropy_bwd: targets[3] = 7");
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tn, 11, &loss), IT_ERR_INVALID_ARG, "valid = 11 outside [1, Vp = 10]");
    it_tdesc loss3 = mk(ls, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL);
    int64_t ok_t[4] = {0, 1, 2, 3};
    it_tdesc tok = mk(ok_t, IT_DTYPE_I64, 1, (int64_t[]){4}, NULL);
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tok, 7, &loss3), IT_ERR_INVALID_ARG,
              "losses has 3 elements, expected N = 4");
    it_tdesc lossd = mk(ls, IT_DTYPE_FP64, 1, (int64_t[]){4}, NULL);
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tok, 7, &lossd), IT_ERR_INVALID_ARG, "losses dtype float64");
    it_tdesc tf = mk(ls, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    CHECK_ERR(K->cross_entropy_fwd(NULL, &lg, &tf, 7, &loss), IT_ERR_INVALID_ARG,
              "targets dtype float32 is not int32 or int64");
    it_tdesc dlg9 = mk(dlb, IT_DTYPE_FP32, 2, (int64_t[]){4, 9}, NULL);
    CHECK_ERR(K->cross_entropy_bwd(NULL, &lg, &tok, 7, &loss, &dlg9), IT_ERR_INVALID_ARG, "dlogits.shape[1] = 9");
}

int main(void) {
    K = it_cpu_kernels();
    test_layernorm();
    test_softmax();
    test_cross_entropy();
    return it_test_report("test_cpu_nn");
}
