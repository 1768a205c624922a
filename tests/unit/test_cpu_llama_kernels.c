/* CPU kernels for LLaMA-3 / Mixtral: rmsnorm fwd/bwd, rope and topk, through it_cpu_kernels().
 *
 * rmsnorm's forward is checked against a double reference, its backward against central
 * differences of the fp64 forward (h = 1e-6: truncation ~h^2 = 1e-12, rounding ~1e-16 * |L|
 * / h ~ 1e-9 for the |L| <= 100 losses used, so 1e-7 relative plus 1e-8 absolute flags any
 * wrong term). rope is checked against Meta's complex product in double and, for fp32, bit
 * for bit against PyTorch's rounding (each product rounded, then one add: no FMA). topk
 * against a full sort in the kernel's documented order. */
#include <complex.h>
#include <float.h>
#include <stdio.h>

#include "test_cpu_util.h"

#define FD_H 1e-6
#define FD_TOL(x) (1e-7 * fabs(x) + 1e-8)
#define U32 (FLT_EPSILON / 2) /* unit roundoff, fp32 */
#define U64 (DBL_EPSILON / 2)

/* dL/dp by central differences of step h at element i of the fp64 buffer p. */
static double fd_at(double *p, int64_t i, double h, double (*loss)(void *), void *ctx) {
    double keep = p[i];
    p[i] = keep + h;
    double lp = loss(ctx);
    p[i] = keep - h;
    double lm = loss(ctx);
    p[i] = keep;
    return (lp - lm) / (2 * h);
}

static bool same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* ====================================================================== rmsnorm */

/* Row r of x (R, C) in double: y (C) and rstd. */
static void rms_ref(const it_tdesc *x, const it_tdesc *w, double eps, int64_t r, int64_t C, double *y, double *rstd) {
    double ms = 0;
    for (int64_t c = 0; c < C; c++) ms += get(x, r * C + c) * get(x, r * C + c);
    double s = 1.0 / sqrt(ms / (double)C + eps);
    for (int64_t c = 0; c < C; c++) y[c] = get(x, r * C + c) * s * get(w, c);
    *rstd = s;
}

/* Forward of x (any view, last dim C) into fresh outputs against rms_ref.
 * Tolerance: the sum of C squares (all terms >= 0, so no cancellation) in 8 lanes of C/8
 * terms plus a 3-level combine and the tail is within (C/8 + 11) u relative; rstd adds
 * half of that plus the sqrt and divide, y two more products. (C/8 + 16) u relative bounds
 * it (fp32 u = 2^-24, fp64 2^-53). The forward is also checked bit for bit to be
 * (x * rstd) * w in x's type with the kernel's rstd (PyTorch's multiplication order). */
static void rms_fwd_check(const it_tdesc *x, const it_tdesc *w, float eps, const char *what) {
    it_dtype dt = x->dtype;
    int64_t C = x->shape[x->ndim - 1], R = t_numel(x) / (C ? C : 1);
    it_tdesc y = mk(NULL, dt, x->ndim, x->shape, NULL), rstd = mk(NULL, dt, 1, (int64_t[]){R}, NULL);
    void *py = alloc_fill(&y, NAN), *pr = alloc_fill(&rstd, NAN);
    CHECK_OK(K->rmsnorm_fwd(NULL, x, w, eps, &y, &rstd));
    double tol = ((double)C / 8 + 16) * (dt == IT_DTYPE_FP32 ? U32 : U64);
    double *ry = malloc((size_t)(C + 1) * sizeof(double));
    int bad = 0, order = 0;
    for (int64_t r = 0; r < R; r++) {
        double s;
        rms_ref(x, w, (double)eps, r, C, ry, &s);
        bad += !(fabs(get(&rstd, r) - s) <= tol * s);
        for (int64_t c = 0; c < C; c++) {
            double got = get(&y, r * C + c);
            bad += !(fabs(got - ry[c]) <= tol * fabs(ry[c]));
            if (dt == IT_DTYPE_FP32) {
                float e = ((float)get(x, r * C + c) * (float)get(&rstd, r)) * (float)get(w, c);
                order += got != (double)e;
            } else {
                double e = (get(x, r * C + c) * get(&rstd, r)) * get(w, c);
                order += got != e;
            }
        }
    }
    CHECK_MSG(bad == 0, "rmsnorm_fwd %s %s: %d wrong (tol %.3g relative)", what, it_dtype_name(dt), bad, tol);
    CHECK_MSG(order == 0, "rmsnorm_fwd %s %s: %d outputs not (x * rstd) * w", what, it_dtype_name(dt), order);
    free(ry);
    free(py);
    free(pr);
}

typedef struct rms_ctx {
    it_tdesc x, w;
    const double *G;
    int64_t R, C;
    float eps;
} rms_ctx;

/* L = sum(y * G), the fp64 forward through the kernel. */
static double rms_loss(void *p) {
    rms_ctx *c = p;
    double *y = malloc((size_t)(c->R * c->C) * sizeof(double)), *s = malloc((size_t)c->R * sizeof(double));
    it_tdesc ty = mk(y, IT_DTYPE_FP64, c->x.ndim, c->x.shape, NULL), ts = mk(s, IT_DTYPE_FP64, 1, &c->R, NULL);
    CHECK_OK(K->rmsnorm_fwd(NULL, &c->x, &c->w, c->eps, &ty, &ts));
    double L = 0;
    for (int64_t i = 0; i < c->R * c->C; i++) L += y[i] * c->G[i];
    free(y);
    free(s);
    return L;
}

/* fp64 backward of an (R, C) problem against finite differences (every `step`-th element
 * of x, all of w), then the fp32 backward against the fp64 one. Step h = FD_H, except for
 * long rows: L sums R*C terms, so its rounding noise grows to ~sqrt(RC) 1e-16 |L| and is
 * divided by h; there h = 1e-4 (the truncation error h^2 f''' stays tiny: one element moves
 * rstd by O(1/C)). */
static void rms_bwd_fd(int64_t R, int64_t C, int64_t step, float eps) {
    double h = R * C > 1000 ? 1e-4 : FD_H;
    rms_ctx c;
    c.R = R, c.C = C, c.eps = eps;
    c.x = mk(NULL, IT_DTYPE_FP64, 2, (int64_t[]){R, C}, NULL);
    c.w = mk(NULL, IT_DTYPE_FP64, 1, (int64_t[]){C}, NULL);
    double *x = alloc_rand(&c.x, -2, 2), *w = alloc_rand(&c.w, 0.5, 1.5);
    it_tdesc tg = mk(NULL, IT_DTYPE_FP64, 2, (int64_t[]){R, C}, NULL), tdx = tg, ty = tg;
    it_tdesc tdw = mk(NULL, IT_DTYPE_FP64, 1, (int64_t[]){C}, NULL), ts = mk(NULL, IT_DTYPE_FP64, 1, &R, NULL);
    double *G = alloc_rand(&tg, -1, 1), *dx = alloc_fill(&tdx, NAN), *dw = alloc_fill(&tdw, NAN);
    double *y = alloc_fill(&ty, NAN), *s = alloc_fill(&ts, NAN);
    c.G = G;
    /* fp32-representable inputs, so that the fp32 run below sees the very same problem */
    for (int64_t i = 0; i < R * C; i++) x[i] = (float)x[i], G[i] = (float)G[i];
    for (int64_t i = 0; i < C; i++) w[i] = (float)w[i];
    CHECK_OK(K->rmsnorm_fwd(NULL, &c.x, &c.w, eps, &ty, &ts));
    CHECK_OK(K->rmsnorm_bwd(NULL, &tg, &c.x, &c.w, &ts, &tdx, &tdw));
    int bad = 0;
    for (int64_t i = 0; i < R * C; i += step) {
        double fd = fd_at(x, i, h, rms_loss, &c);
        if (!(fabs(dx[i] - fd) <= FD_TOL(fd)) && bad++ == 0)
            fprintf(stderr, "rms dx[%lld] %.12g fd %.12g\n", (long long)i, dx[i], fd);
    }
    for (int64_t i = 0; i < C; i++) {
        double fd = fd_at(w, i, h, rms_loss, &c);
        if (!(fabs(dw[i] - fd) <= FD_TOL(fd)) && bad++ == 0)
            fprintf(stderr, "rms dw[%lld] %.12g fd %.12g\n", (long long)i, dw[i], fd);
    }
    CHECK_MSG(bad == 0, "rmsnorm_bwd (%lld, %lld) vs finite differences: %d wrong", (long long)R, (long long)C, bad);

    /* fp32 backward on the same inputs rounded to fp32, against the fp64 one: the row dot
     * over C terms and the dw sum over R terms in fp32, on terms of order 1 with results of
     * order 1: (C/8 + R + 16) u relative to 1 + |value| (a loose bound; errors are ~sqrt). */
    it_tdesc fx = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, NULL), fg = fx, fy = fx, fdx = fx;
    it_tdesc fw = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){C}, NULL), fdw = fw, fs = mk(NULL, IT_DTYPE_FP32, 1, &R, NULL);
    void *bufs[] = {alloc_fill(&fx, 0), alloc_fill(&fg, 0),  alloc_fill(&fy, 0), alloc_fill(&fdx, 0),
                    alloc_fill(&fw, 0), alloc_fill(&fdw, 0), alloc_fill(&fs, 0)};
    for (int64_t i = 0; i < R * C; i++) set(&fx, i, x[i]), set(&fg, i, G[i]);
    for (int64_t i = 0; i < C; i++) set(&fw, i, w[i]);
    CHECK_OK(K->rmsnorm_fwd(NULL, &fx, &fw, eps, &fy, &fs));
    CHECK_OK(K->rmsnorm_bwd(NULL, &fg, &fx, &fw, &fs, &fdx, &fdw));
    double tol = ((double)C / 8 + (double)R + 16) * U32 * 4;
    bad = 0;
    for (int64_t i = 0; i < R * C; i++) bad += !(fabs(get(&fdx, i) - dx[i]) <= tol * (1 + fabs(dx[i])));
    for (int64_t i = 0; i < C; i++) bad += !(fabs(get(&fdw, i) - dw[i]) <= tol * (1 + fabs(dw[i])));
    CHECK_MSG(bad == 0, "rmsnorm_bwd fp32 vs fp64 (%lld, %lld): %d wrong", (long long)R, (long long)C, bad);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(x), free(w), free(G), free(dx), free(dw), free(y), free(s);
}

static void test_rmsnorm(void) {
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    const int64_t sizes[][2] = {{7, 13}, {1, 1}, {1, 4099}, {5, 8}, {3, 64}};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            int64_t R = sizes[z][0], C = sizes[z][1];
            it_tdesc x = mk(NULL, dt, 2, (int64_t[]){R, C}, NULL), w = mk(NULL, dt, 1, (int64_t[]){C}, NULL);
            void *px = alloc_rand(&x, -3, 3), *pw = alloc_rand(&w, 0.5, 1.5);
            rms_fwd_check(&x, &w, 1e-5f, "contiguous");
            free(px), free(pw);
        }
        /* Strided rows (a (7, 13) slice of a (7, 20) buffer), strided columns and weight, and
         * 3-D x with rstd as (2, 4): the same values as a contiguous run, bit for bit. */
        it_tdesc xs = mk(NULL, dt, 2, (int64_t[]){7, 13}, (int64_t[]){20, 1});
        it_tdesc ws = mk(NULL, dt, 1, (int64_t[]){13}, (int64_t[]){3});
        void *pxs = alloc_rand(&xs, -2, 2), *pws = alloc_rand(&ws, 0.5, 1.5);
        rms_fwd_check(&xs, &ws, 1e-6f, "strided rows, strided w");
        it_tdesc xc = mk(NULL, dt, 2, (int64_t[]){7, 13}, NULL), wc = mk(NULL, dt, 1, (int64_t[]){13}, NULL);
        void *pxc = alloc_fill(&xc, 0), *pwc = alloc_fill(&wc, 0);
        for (int64_t i = 0; i < 91; i++) set(&xc, i, get(&xs, i));
        for (int64_t i = 0; i < 13; i++) set(&wc, i, get(&ws, i));
        it_tdesc y1 = mk(NULL, dt, 2, (int64_t[]){7, 13}, (int64_t[]){1, 7}), y2 = xc; /* y1 transposed */
        it_tdesc r1 = mk(NULL, dt, 1, (int64_t[]){7}, (int64_t[]){2}), r2 = mk(NULL, dt, 1, (int64_t[]){7}, NULL);
        void *py1 = alloc_fill(&y1, NAN), *py2 = alloc_fill(&y2, NAN), *pr1 = alloc_fill(&r1, NAN),
             *pr2 = alloc_fill(&r2, NAN);
        CHECK_OK(K->rmsnorm_fwd(NULL, &xs, &ws, 1e-6f, &y1, &r1));
        CHECK_OK(K->rmsnorm_fwd(NULL, &xc, &wc, 1e-6f, &y2, &r2));
        int diff = 0;
        for (int64_t i = 0; i < 91; i++) diff += get(&y1, i) != get(&y2, i);
        for (int64_t i = 0; i < 7; i++) diff += get(&r1, i) != get(&r2, i);
        CHECK_MSG(diff == 0, "rmsnorm_fwd %s strided != contiguous: %d", it_dtype_name(dt), diff);
        /* in place: y = x */
        CHECK_OK(K->rmsnorm_fwd(NULL, &xc, &wc, 1e-6f, &xc, &r2));
        diff = 0;
        for (int64_t i = 0; i < 91; i++) diff += get(&xc, i) != get(&y2, i);
        CHECK_MSG(diff == 0, "rmsnorm_fwd %s in place: %d differ", it_dtype_name(dt), diff);
        it_tdesc x3 = mk(pxs, dt, 3, (int64_t[]){2, 4, 5}, (int64_t[]){60, 15, 2});
        it_tdesc w5 = mk(pws, dt, 1, (int64_t[]){5}, NULL);
        rms_fwd_check(&x3, &w5, 1e-5f, "3-D strided");
        free(pxs), free(pws), free(pxc), free(pwc), free(py1), free(py2), free(pr1), free(pr2);
    }
    /* eps matters: x = 0 gives rstd = 1/sqrt(eps), y = 0 */
    {
        float x0[4] = {0}, w[4] = {1, 2, 3, 4}, y[4], r;
        it_tdesc tx = mk(x0, IT_DTYPE_FP32, 2, (int64_t[]){1, 4}, NULL),
                 tw = mk(w, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
        it_tdesc ty = mk(y, IT_DTYPE_FP32, 2, (int64_t[]){1, 4}, NULL),
                 tr = mk(&r, IT_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
        CHECK_OK(K->rmsnorm_fwd(NULL, &tx, &tw, 0.25f, &ty, &tr));
        CHECK(r == 2.0f && y[0] == 0.0f && y[3] == 0.0f);
    }

    /* Backward against finite differences: (7, 13), (1, 1), a row of 4099 (every 41st x). */
    rms_bwd_fd(7, 13, 1, 1e-5f);
    rms_bwd_fd(1, 1, 1, 1e-5f);
    rms_bwd_fd(1, 4099, 41, 1e-5f);
    rms_bwd_fd(40, 33, 7, 1e-6f); /* R > the 32-row chunk of the dw reduction */

    /* Backward on strided views = backward on contiguous copies, bit for bit; and in place
     * (dx written over dy). */
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        const int64_t R = 9, C = 21;
        it_tdesc xs = mk(NULL, dt, 2, (int64_t[]){R, C}, (int64_t[]){C + 4, 1});
        it_tdesc gs = mk(NULL, dt, 2, (int64_t[]){R, C}, (int64_t[]){1, R}); /* dy transposed */
        it_tdesc w = mk(NULL, dt, 1, (int64_t[]){C}, NULL), rs = mk(NULL, dt, 1, (int64_t[]){R}, NULL);
        it_tdesc xc = mk(NULL, dt, 2, (int64_t[]){R, C}, NULL), gc = xc, dx1 = xc, dx2 = xc, yc = xc;
        it_tdesc dxs = mk(NULL, dt, 2, (int64_t[]){R, C}, (int64_t[]){2 * C, 2});
        it_tdesc dw1 = w, dw2 = w, dw3 = w;
        void *bufs[] = {alloc_rand(&xs, -2, 2), alloc_rand(&gs, -1, 1), alloc_rand(&w, 0.5, 1.5), alloc_fill(&rs, 0),
                        alloc_fill(&xc, 0),     alloc_fill(&gc, 0),     alloc_fill(&dx1, 0),      alloc_fill(&dx2, 0),
                        alloc_fill(&yc, 0),     alloc_fill(&dxs, 0),    alloc_fill(&dw1, 0),      alloc_fill(&dw2, 0),
                        alloc_fill(&dw3, 0)};
        for (int64_t i = 0; i < R * C; i++) set(&xc, i, get(&xs, i)), set(&gc, i, get(&gs, i));
        CHECK_OK(K->rmsnorm_fwd(NULL, &xc, &w, 1e-5f, &yc, &rs));
        CHECK_OK(K->rmsnorm_bwd(NULL, &gc, &xc, &w, &rs, &dx1, &dw1));
        CHECK_OK(K->rmsnorm_bwd(NULL, &gs, &xs, &w, &rs, &dxs, &dw2));
        int diff = 0;
        for (int64_t i = 0; i < R * C; i++) diff += get(&dx1, i) != get(&dxs, i);
        for (int64_t i = 0; i < C; i++) diff += get(&dw1, i) != get(&dw2, i);
        CHECK_MSG(diff == 0, "rmsnorm_bwd %s strided != contiguous: %d differ", it_dtype_name(dt), diff);
        CHECK_OK(K->rmsnorm_bwd(NULL, &gc, &xc, &w, &rs, &gc, &dw3)); /* dx over dy */
        diff = 0;
        for (int64_t i = 0; i < R * C; i++) diff += get(&gc, i) != get(&dx1, i);
        for (int64_t i = 0; i < C; i++) diff += get(&dw3, i) != get(&dw1, i);
        CHECK_MSG(diff == 0, "rmsnorm_bwd %s in place (dx = dy): %d differ", it_dtype_name(dt), diff);
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }

    /* Results do not depend on the thread count (1000 x 64 fp32: parallel rows, 4 dw tasks). */
    if (have_omp()) {
        const int64_t R = 1000, C = 64;
        it_tdesc x = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){R, C}, NULL), g = x, y1 = x, y2 = x, dx1 = x, dx2 = x;
        it_tdesc w = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){C}, NULL), dw1 = w, dw2 = w;
        it_tdesc r1 = mk(NULL, IT_DTYPE_FP32, 1, (int64_t[]){R}, NULL), r2 = r1;
        void *bufs[] = {alloc_rand(&x, -1, 1), alloc_rand(&g, -1, 1), alloc_rand(&w, 0.5, 1.5), alloc_fill(&y1, 0),
                        alloc_fill(&y2, 0),    alloc_fill(&dx1, 0),   alloc_fill(&dx2, 0),      alloc_fill(&dw1, 0),
                        alloc_fill(&dw2, 0),   alloc_fill(&r1, 0),    alloc_fill(&r2, 0)};
        int saved = max_threads();
        set_threads(1);
        CHECK_OK(K->rmsnorm_fwd(NULL, &x, &w, 1e-5f, &y1, &r1));
        CHECK_OK(K->rmsnorm_bwd(NULL, &g, &x, &w, &r1, &dx1, &dw1));
        set_threads(2);
        CHECK_OK(K->rmsnorm_fwd(NULL, &x, &w, 1e-5f, &y2, &r2));
        CHECK_OK(K->rmsnorm_bwd(NULL, &g, &x, &w, &r2, &dx2, &dw2));
        set_threads(saved);
        CHECK(same_bits(y1.data, y2.data, (size_t)(R * C) * sizeof(float)));
        CHECK(same_bits(r1.data, r2.data, (size_t)R * sizeof(float)));
        CHECK(same_bits(dx1.data, dx2.data, (size_t)(R * C) * sizeof(float)));
        CHECK(same_bits(dw1.data, dw2.data, (size_t)C * sizeof(float)));
        double ref = 0;
        for (int64_t r = 0; r < R; r++) ref += get(&g, r * C + 5) * get(&x, r * C + 5) * get(&r1, r);
        CHECK_NEAR(get(&dw1, 5), ref, 1e-3); /* 1000 fp32 terms of magnitude <= ~2 */
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    }

    /* Size 0 and errors. */
    float buf[64] = {0}, ob[64];
    it_tdesc x0 = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL),
             w4 = mk(buf, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    it_tdesc y0 = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){0, 4}, NULL),
             r0 = mk(ob, IT_DTYPE_FP32, 1, (int64_t[]){0}, NULL);
    CHECK_OK(K->rmsnorm_fwd(NULL, &x0, &w4, 1e-5f, &y0, &r0));
    float dwz[4] = {1, 1, 1, 1};
    it_tdesc dwt = mk(dwz, IT_DTYPE_FP32, 1, (int64_t[]){4}, NULL);
    CHECK_OK(K->rmsnorm_bwd(NULL, &x0, &x0, &w4, &r0, &y0, &dwt));
    CHECK(dwz[0] == 0.0f && dwz[3] == 0.0f); /* a sum over no rows */
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){3, 4}, NULL),
             y = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 4}, NULL);
    it_tdesc r3 = mk(ob + 30, IT_DTYPE_FP32, 1, (int64_t[]){3}, NULL),
             w5 = mk(buf, IT_DTYPE_FP32, 1, (int64_t[]){5}, NULL);
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, &w5, 1e-5f, &y, &r3), IT_ERR_INVALID_ARG, "rmsnorm_fwd: w must be (4)");
    it_tdesc r2 = mk(ob + 30, IT_DTYPE_FP32, 1, (int64_t[]){2}, NULL);
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, &w4, 1e-5f, &y, &r2), IT_ERR_INVALID_ARG, "rstd has 2 elements, expected R = 3");
    it_tdesc rd = mk(ob + 30, IT_DTYPE_FP64, 1, (int64_t[]){3}, NULL);
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, &w4, 1e-5f, &y, &rd), IT_ERR_INVALID_ARG,
              "rstd dtype float64, expected float32");
    it_tdesc yb = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 5}, NULL);
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, &w4, 1e-5f, &yb, &r3), IT_ERR_INVALID_ARG, "y.shape[1] = 5 != x.shape[1] = 4");
    it_tdesc yz = mk(ob, IT_DTYPE_FP32, 2, (int64_t[]){3, 4}, (int64_t[]){0, 1});
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, &w4, 1e-5f, &yz, &r3), IT_ERR_INVALID_ARG, "y.strides[0] is 0");
    CHECK_ERR(K->rmsnorm_fwd(NULL, &x, NULL, 1e-5f, &y, &r3), IT_ERR_INVALID_ARG, "rmsnorm_fwd: w is NULL");
    CHECK_ERR(K->rmsnorm_bwd(NULL, &x, &x, &w4, &r3, &y, &w5), IT_ERR_INVALID_ARG, "rmsnorm_bwd: dw must be (4)");
    CHECK_ERR(K->rmsnorm_bwd(NULL, &yb, &x, &w4, &r3, &y, &dwt), IT_ERR_INVALID_ARG, "rmsnorm_bwd: dy.shape[1] = 5");
    CHECK_ERR(K->rmsnorm_bwd(NULL, &x, &x, &w4, &r2, &y, &dwt), IT_ERR_INVALID_ARG, "rstd has 2 elements");
    it_tdesc xh = mk(buf, IT_DTYPE_FP16, 2, (int64_t[]){3, 4}, NULL);
    CHECK_ERR(K->rmsnorm_fwd(NULL, &xh, &w4, 1e-5f, &y, &r3), IT_ERR_UNSUPPORTED, "dtype float16 not supported");
}

/* ====================================================================== rope */

/* cos/sin (T, P) as Meta's precompute_freqs_cis: angle = t * theta^(-2i/D), in double, then
 * stored in dt. */
static void rope_tables(it_tdesc *cs, it_tdesc *sn, it_dtype dt, int64_t T, int64_t P, const int64_t *strides) {
    *cs = mk(NULL, dt, 2, (int64_t[]){T, P}, strides);
    *sn = mk(NULL, dt, 2, (int64_t[]){T, P}, strides);
    alloc_fill(cs, NAN);
    alloc_fill(sn, NAN);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < P; i++) {
            double a = (double)t * pow(500000.0, -(double)(2 * i) / (double)(2 * P));
            set(cs, t * P + i, cos(a));
            set(sn, t * P + i, sin(a));
        }
}

/* Element (b, t, h, d) of a 4-D descriptor. */
static inline int64_t at4(const it_tdesc *t, int64_t b, int64_t tt, int64_t h, int64_t d) {
    return b * t->strides[0] + tt * t->strides[1] + h * t->strides[2] + d * t->strides[3];
}

/* rope(x) in a fresh contiguous y, checked against (x0 + i x1)(c + i s) in double (s -> -s
 * for the inverse), with the stored cos/sin values. fp32: each of the two products and the
 * add round once, so |y - exact| <= 2u (|x0 c| + |x1 s|) (+ tiny); and the fp32 result must
 * be exactly PyTorch's rounding: fl(fl(x0 c) - fl(x1 s)), computed here through double
 * (exact for products of floats; a double add rounded to float is the float add, as 53 >=
 * 2*24 + 2). fp64: 2u as well. */
static void rope_check(const it_tdesc *x, const it_tdesc *cs, const it_tdesc *sn, bool inverse, const char *what) {
    it_dtype dt = x->dtype;
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3], P = D / 2;
    it_tdesc y = mk(NULL, dt, 4, x->shape, NULL);
    void *py = alloc_fill(&y, NAN);
    CHECK_OK(K->rope(NULL, x, cs, sn, inverse, &y));
    double u = dt == IT_DTYPE_FP32 ? U32 : U64;
    int bad = 0, bits = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < P; i++) {
                    double x0 = raw_get(x->data, dt, at4(x, b, t, h, 2 * i));
                    double x1 = raw_get(x->data, dt, at4(x, b, t, h, 2 * i + 1));
                    double c = raw_get(cs->data, dt, t * cs->strides[0] + i * cs->strides[1]);
                    double s = raw_get(sn->data, dt, t * sn->strides[0] + i * sn->strides[1]);
                    if (inverse) s = -s;
                    double complex z = (x0 + I * x1) * (c + I * s);
                    double y0 = raw_get(y.data, dt, at4(&y, b, t, h, 2 * i));
                    double y1 = raw_get(y.data, dt, at4(&y, b, t, h, 2 * i + 1));
                    double m0 = fabs(x0 * c) + fabs(x1 * s), m1 = fabs(x0 * s) + fabs(x1 * c);
                    bad +=
                        !(fabs(y0 - creal(z)) <= 2 * u * m0 + 1e-300) + !(fabs(y1 - cimag(z)) <= 2 * u * m1 + 1e-300);
                    if (dt == IT_DTYPE_FP32) {
                        float p00 = (float)(x0 * c), p11 = (float)(x1 * s), p01 = (float)(x0 * s),
                              p10 = (float)(x1 * c);
                        float e0 = (float)((double)p00 - (double)p11), e1 = (float)((double)p01 + (double)p10);
                        bits += (float)y0 != e0 || (float)y1 != e1;
                    }
                }
    CHECK_MSG(bad == 0, "rope %s %s inverse %d: %d wrong", what, it_dtype_name(dt), inverse, bad);
    CHECK_MSG(bits == 0, "rope %s %s inverse %d: %d pairs not rounded as fl(fl(a b) - fl(c d)) (FMA contraction?)",
              what, it_dtype_name(dt), inverse, bits);
    free(py);
}

/* <a, b> over two 4-D descriptors of the same shape, in double. */
static double dot4(const it_tdesc *a, const it_tdesc *b) {
    double s = 0;
    for (int64_t i = 0; i < t_numel(a); i++) s += get(a, i) * get(b, i);
    return s;
}

static void test_rope(void) {
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    const int64_t shapes[][4] = {{2, 5, 3, 8}, {1, 1, 1, 2}, {1, 7, 2, 2}, {3, 4, 1, 66}};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        for (size_t z = 0; z < sizeof shapes / sizeof shapes[0]; z++) {
            const int64_t *sh = shapes[z];
            it_tdesc x = mk(NULL, dt, 4, sh, NULL), cs, sn;
            void *px = alloc_rand(&x, -1, 1);
            rope_tables(&cs, &sn, dt, sh[1], sh[3] / 2, NULL);
            rope_check(&x, &cs, &sn, false, "contiguous");
            rope_check(&x, &cs, &sn, true, "contiguous");

            /* inverse(rope(x)) == x: two rotations of |x| <= sqrt(2) pairs, with cos^2 + sin^2
             * = 1 + O(u) for the stored tables: a few u. */
            it_tdesc y = mk(NULL, dt, 4, sh, NULL), back = y;
            void *py = alloc_fill(&y, NAN), *pb = alloc_fill(&back, NAN);
            CHECK_OK(K->rope(NULL, &x, &cs, &sn, false, &y));
            CHECK_OK(K->rope(NULL, &y, &cs, &sn, true, &back));
            double tol = dt == IT_DTYPE_FP32 ? 1e-6 : 1e-14, err = 0;
            for (int64_t i = 0; i < t_numel(&x); i++) err = fmax(err, fabs(get(&back, i) - get(&x, i)));
            CHECK_MSG(err <= tol, "rope %s inverse(rope(x)) off by %.3g", it_dtype_name(dt), err);

            /* in place: y is x's memory */
            it_tdesc xi = mk(NULL, dt, 4, sh, NULL);
            void *pxi = alloc_fill(&xi, 0);
            memcpy(pxi, px, (size_t)t_numel(&x) * it_dtype_size(dt));
            CHECK_OK(K->rope(NULL, &xi, &cs, &sn, false, &xi));
            CHECK(same_bits(pxi, py, (size_t)t_numel(&x) * it_dtype_size(dt)));
            free(px), free(py), free(pb), free(pxi), free(cs.data), free(sn.data);
        }

        /* The backward is the transpose: <rope(x), g> == <x, rope_inv(g)> (fp64; fp32 to its
         * rounding). */
        {
            const int64_t sh[4] = {2, 6, 3, 10};
            it_tdesc x = mk(NULL, dt, 4, sh, NULL), g = x, rx = x, rg = x, cs, sn;
            void *bufs[] = {alloc_rand(&x, -1, 1), alloc_rand(&g, -1, 1), alloc_fill(&rx, 0), alloc_fill(&rg, 0)};
            rope_tables(&cs, &sn, dt, 6, 5, NULL);
            CHECK_OK(K->rope(NULL, &x, &cs, &sn, false, &rx));
            CHECK_OK(K->rope(NULL, &g, &cs, &sn, true, &rg));
            double l = dot4(&rx, &g), r = dot4(&x, &rg);
            CHECK_NEAR(l, r, (dt == IT_DTYPE_FP64 ? 1e-13 : 1e-5) * (1 + fabs(l)));
            for (size_t i = 0; i < 4; i++) free(bufs[i]);
            free(cs.data), free(sn.data);
        }

        /* q and k as views of a fused qkv (B, T, 3C), C = H*D: strides (T*3C, 3C, D, 1); tables
         * transposed in memory; the output into strided views too, and in place. */
        {
            const int64_t B = 2, T = 5, H = 3, D = 6, C = H * D;
            it_tdesc qkv = mk(NULL, dt, 3, (int64_t[]){B, T, 3 * C}, NULL);
            void *pq = alloc_rand(&qkv, -2, 2);
            size_t es = it_dtype_size(dt);
            int64_t vs[4] = {T * 3 * C, 3 * C, D, 1};
            it_tdesc q = mk(pq, dt, 4, (int64_t[]){B, T, H, D}, vs);
            it_tdesc k = mk((char *)pq + (size_t)C * es, dt, 4, (int64_t[]){B, T, H, D}, vs);
            it_tdesc cs, sn;
            rope_tables(&cs, &sn, dt, T, D / 2, (int64_t[]){1, T});
            rope_check(&q, &cs, &sn, false, "q of qkv");
            rope_check(&k, &cs, &sn, true, "k of qkv");
            /* against a contiguous copy of k */
            it_tdesc kc = mk(NULL, dt, 4, k.shape, NULL), yc = kc;
            void *pkc = alloc_fill(&kc, 0), *pyc = alloc_fill(&yc, 0);
            for (int64_t i = 0; i < t_numel(&k); i++) set(&kc, i, get(&k, i));
            CHECK_OK(K->rope(NULL, &kc, &cs, &sn, false, &yc));
            it_tdesc out = mk(NULL, dt, 3, (int64_t[]){B, T, 3 * C}, NULL);
            void *po = alloc_fill(&out, NAN);
            it_tdesc ko = mk((char *)po + (size_t)C * es, dt, 4, k.shape, vs);
            CHECK_OK(K->rope(NULL, &k, &cs, &sn, false, &ko));
            int diff = 0;
            for (int64_t i = 0; i < t_numel(&k); i++) diff += get(&ko, i) != get(&yc, i);
            CHECK_OK(K->rope(NULL, &k, &cs, &sn, false, &k)); /* in place on the k slice */
            for (int64_t i = 0; i < t_numel(&k); i++) diff += get(&k, i) != get(&yc, i);
            CHECK_MSG(diff == 0, "rope %s on qkv views != contiguous: %d differ", it_dtype_name(dt), diff);
            /* q's and v's slots of `out` untouched */
            int touched = 0;
            for (int64_t r = 0; r < B * T; r++)
                for (int64_t c = 0; c < 3 * C; c++)
                    touched += (c < C || c >= 2 * C) && !isnan(get(&out, r * 3 * C + c));
            CHECK(touched == 0);
            free(pq), free(pkc), free(pyc), free(po), free(cs.data), free(sn.data);
        }
    }

    /* bf16 / fp16: the fp32 computation on the widened values, rounded once. */
    for (int hdt = 0; hdt < 2; hdt++) {
        it_dtype dt = hdt ? IT_DTYPE_FP16 : IT_DTYPE_BF16;
        const int64_t sh[4] = {2, 3, 2, 8};
        it_tdesc x = mk(NULL, dt, 4, sh, NULL), y = x, xf = mk(NULL, IT_DTYPE_FP32, 4, sh, NULL), yf = xf, cs, sn, cf,
                 sf;
        void *bufs[] = {alloc_rand(&x, -2, 2), alloc_fill(&y, 0), alloc_fill(&xf, 0), alloc_fill(&yf, 0)};
        rope_tables(&cs, &sn, dt, 3, 4, NULL);
        rope_tables(&cf, &sf, IT_DTYPE_FP32, 3, 4, NULL);
        for (int64_t i = 0; i < 12; i++) set(&cf, i, get(&cs, i)), set(&sf, i, get(&sn, i));
        for (int64_t i = 0; i < t_numel(&x); i++) set(&xf, i, get(&x, i));
        for (int inv = 0; inv < 2; inv++) {
            CHECK_OK(K->rope(NULL, &x, &cs, &sn, inv, &y));
            CHECK_OK(K->rope(NULL, &xf, &cf, &sf, inv, &yf));
            int diff = 0;
            for (int64_t i = 0; i < t_numel(&x); i++) {
                float f = (float)get(&yf, i);
                uint16_t want = hdt ? it_fp32_to_fp16(f) : it_fp32_to_bf16(f);
                diff += ((uint16_t *)y.data)[i] != want;
            }
            CHECK_MSG(diff == 0, "rope %s inverse %d: %d differ from fp32 rounded once", it_dtype_name(dt), inv, diff);
        }
        for (size_t i = 0; i < 4; i++) free(bufs[i]);
        free(cs.data), free(sn.data), free(cf.data), free(sf.data);
    }

    /* Results do not depend on the thread count (2*64*4 rows of 32 pairs: parallel). */
    if (have_omp()) {
        const int64_t sh[4] = {2, 64, 4, 64};
        it_tdesc x = mk(NULL, IT_DTYPE_FP32, 4, sh, NULL), y1 = x, y2 = x, cs, sn;
        void *bufs[] = {alloc_rand(&x, -1, 1), alloc_fill(&y1, 0), alloc_fill(&y2, 0)};
        rope_tables(&cs, &sn, IT_DTYPE_FP32, 64, 32, NULL);
        int saved = max_threads();
        set_threads(1);
        CHECK_OK(K->rope(NULL, &x, &cs, &sn, false, &y1));
        set_threads(2);
        CHECK_OK(K->rope(NULL, &x, &cs, &sn, false, &y2));
        set_threads(saved);
        CHECK(same_bits(y1.data, y2.data, (size_t)t_numel(&x) * sizeof(float)));
        rope_check(&x, &cs, &sn, false, "large");
        for (size_t i = 0; i < 3; i++) free(bufs[i]);
        free(cs.data), free(sn.data);
    }

    /* Size 0 and errors. */
    float buf[256] = {0}, ob[256];
    it_tdesc cs = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL), sn = cs;
    it_tdesc x0 = mk(buf, IT_DTYPE_FP32, 4, (int64_t[]){0, 3, 2, 4}, NULL), y0 = x0;
    y0.data = ob;
    CHECK_OK(K->rope(NULL, &x0, &cs, &sn, false, &y0));
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 4, (int64_t[]){2, 3, 2, 4}, NULL), y = mk(ob, IT_DTYPE_FP32, 4, x.shape, NULL);
    CHECK_OK(K->rope(NULL, &x, &cs, &sn, false, &y));
    it_tdesc x5 = mk(buf, IT_DTYPE_FP32, 4, (int64_t[]){2, 3, 2, 5}, NULL),
             y5 = mk(ob, IT_DTYPE_FP32, 4, x5.shape, NULL);
    CHECK_ERR(K->rope(NULL, &x5, &cs, &sn, false, &y5), IT_ERR_INVALID_ARG,
              "rope: head dim D = x.shape[3] = 5 must be even");
    it_tdesc cbad = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL);
    CHECK_ERR(K->rope(NULL, &x, &cbad, &sn, false, &y), IT_ERR_INVALID_ARG,
              "rope: cos must be (T, D/2) = (3, 2), got (4, 2)");
    it_tdesc sd = mk(buf, IT_DTYPE_FP64, 2, (int64_t[]){3, 2}, NULL);
    CHECK_ERR(K->rope(NULL, &x, &cs, &sd, false, &y), IT_ERR_INVALID_ARG, "sin dtype float64 != x dtype float32");
    it_tdesc yb = mk(ob, IT_DTYPE_FP32, 4, (int64_t[]){2, 3, 3, 4}, NULL);
    CHECK_ERR(K->rope(NULL, &x, &cs, &sn, false, &yb), IT_ERR_INVALID_ARG, "y.shape[2] = 3 != x.shape[2] = 2");
    it_tdesc x3 = mk(buf, IT_DTYPE_FP32, 3, (int64_t[]){3, 2, 4}, NULL);
    CHECK_ERR(K->rope(NULL, &x3, &cs, &sn, false, &y), IT_ERR_INVALID_ARG, "rope: x.ndim = 3, expected 4");
    it_tdesc xi = mk(buf, IT_DTYPE_I32, 4, x.shape, NULL);
    CHECK_ERR(K->rope(NULL, &xi, &cs, &sn, false, &y), IT_ERR_UNSUPPORTED, "rope: dtype int32 not supported");
    CHECK_ERR(K->rope(NULL, &x, NULL, &sn, false, &y), IT_ERR_INVALID_ARG, "rope: cos is NULL");
}

/* ====================================================================== topk */

/* a comes before b: larger first, NaN above everything, ties by lower index. */
static bool before(double a, int64_t ia, double b, int64_t ib) {
    if (isnan(a) || isnan(b)) return isnan(a) && (!isnan(b) || ia < ib);
    return a > b || (a == b && ia < ib);
}

/* topk of x (any view, last dim E) checked against a full insertion sort of every row:
 * indices equal, values the very bits of x at those indices. */
static void topk_check(const it_tdesc *x, int64_t k, const char *what) {
    it_dtype dt = x->dtype;
    int nd = x->ndim;
    int64_t E = x->shape[nd - 1], N = t_numel(x) / E;
    int64_t osh[IT_MAX_DIMS];
    memcpy(osh, x->shape, sizeof osh);
    osh[nd - 1] = k;
    it_tdesc v = mk(NULL, dt, nd, osh, NULL), ix = mk(NULL, IT_DTYPE_I32, nd, osh, NULL);
    void *pv = alloc_fill(&v, -7), *pi = alloc_fill(&ix, -7);
    CHECK_OK(K->topk(NULL, x, k, &v, &ix));
    int64_t *ord = malloc((size_t)E * sizeof(int64_t));
    int bad = 0;
    size_t es = it_dtype_size(dt);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t e = 0; e < E; e++) {
            int64_t j = e;
            for (; j > 0 && before(get(x, n * E + e), e, get(x, n * E + ord[j - 1]), ord[j - 1]); j--)
                ord[j] = ord[j - 1];
            ord[j] = e;
        }
        for (int64_t j = 0; j < k; j++) {
            int64_t got = (int64_t)get(&ix, n * k + j);
            const char *src = (const char *)x->data + (size_t)t_off(x, n * E + ord[j]) * es;
            const char *val = (const char *)v.data + (size_t)(n * k + j) * es;
            if ((got != ord[j] || memcmp(src, val, es) != 0) && bad++ == 0)
                fprintf(stderr, "topk %s row %lld slot %lld: index %lld value %g, expected %lld %g\n", what,
                        (long long)n, (long long)j, (long long)got, get(&v, n * k + j), (long long)ord[j],
                        get(x, n * E + ord[j]));
        }
    }
    CHECK_MSG(bad == 0, "topk %s %s k %lld: %d wrong", what, it_dtype_name(dt), (long long)k, bad);
    free(ord);
    free(pv);
    free(pi);
}

static void test_topk(void) {
    it_dtype dts[2] = {IT_DTYPE_FP32, IT_DTYPE_FP64};
    for (int d = 0; d < 2; d++) {
        it_dtype dt = dts[d];
        /* random rows: the router's E = 8 and 64, and a wide row through both selection paths */
        const int64_t cases[][3] = {{37, 8, 1},    {37, 8, 2},      {37, 8, 8},   {11, 64, 1},
                                    {11, 64, 16},  {11, 64, 17},    {11, 64, 64}, {3, 1000, 1},
                                    {3, 1000, 40}, {3, 1000, 1000}, {5, 1, 1}};
        for (size_t z = 0; z < sizeof cases / sizeof cases[0]; z++) {
            it_tdesc x = mk(NULL, dt, 2, (int64_t[]){cases[z][0], cases[z][1]}, NULL);
            void *px = alloc_rand(&x, -5, 5);
            topk_check(&x, cases[z][2], "random");
            free(px);
        }
        /* ties: few distinct values (and +0 / -0), lower index first */
        {
            it_tdesc x = mk(NULL, dt, 2, (int64_t[]){50, 24}, NULL);
            void *px = alloc_fill(&x, 0);
            for (int64_t i = 0; i < 50 * 24; i++) {
                int r = (int)floor((urand() + 1) * 2.5); /* 0..4 */
                set(&x, i, r == 4 ? -0.0 : (double)r - 1);
            }
            for (int64_t k = 1; k <= 24; k += 5) topk_check(&x, k, "ties");
            topk_check(&x, 24, "ties");
            float e[6] = {1, 3, 3, 2, 3, 1};
            double e64[6] = {1, 3, 3, 2, 3, 1};
            it_tdesc te = mk(dt == IT_DTYPE_FP32 ? (void *)e : (void *)e64, dt, 2, (int64_t[]){1, 6}, NULL);
            int32_t ix[6];
            double vals[6];
            it_tdesc tv = mk(vals, dt, 2, (int64_t[]){1, 6}, NULL),
                     ti = mk(ix, IT_DTYPE_I32, 2, (int64_t[]){1, 6}, NULL);
            CHECK_OK(K->topk(NULL, &te, 6, &tv, &ti));
            CHECK(ix[0] == 1 && ix[1] == 2 && ix[2] == 4 && ix[3] == 3 && ix[4] == 0 && ix[5] == 5);
            CHECK(get(&tv, 0) == 3 && get(&tv, 3) == 2 && get(&tv, 5) == 1);
            free(px);
        }
        /* NaN (above +inf, lower index first among NaNs), inf, -inf */
        {
            double row[10] = {1, NAN, INFINITY, -INFINITY, NAN, 2, -0.0, 0.0, INFINITY, -1};
            it_tdesc x = mk(NULL, dt, 2, (int64_t[]){3, 10}, NULL);
            void *px = alloc_fill(&x, 0);
            for (int64_t r = 0; r < 3; r++)
                for (int64_t i = 0; i < 10; i++) set(&x, r * 10 + i, row[(i + 3 * r) % 10]);
            for (int64_t k = 1; k <= 10; k++) topk_check(&x, k, "nan/inf");
            int32_t ix[4];
            double vals[4];
            it_tdesc x1 = mk(px, dt, 2, (int64_t[]){1, 10}, NULL), tv = mk(vals, dt, 2, (int64_t[]){1, 4}, NULL),
                     ti = mk(ix, IT_DTYPE_I32, 2, (int64_t[]){1, 4}, NULL);
            CHECK_OK(K->topk(NULL, &x1, 4, &tv, &ti));
            CHECK(ix[0] == 1 && ix[1] == 4 && ix[2] == 2 && ix[3] == 8);
            CHECK(isnan(get(&tv, 0)) && isnan(get(&tv, 1)) && get(&tv, 2) == INFINITY);
            /* a row of NaNs through the heap path (k > 16) */
            it_tdesc xn = mk(NULL, dt, 2, (int64_t[]){2, 40}, NULL);
            void *pn = alloc_rand(&xn, -1, 1);
            for (int64_t i = 0; i < 80; i += 3) set(&xn, i, NAN);
            topk_check(&xn, 30, "nan heap");
            topk_check(&xn, 5, "nan insert");
            free(px), free(pn);
        }
        /* strided x (a transposed buffer), 3-D x, strided outputs */
        {
            it_tdesc xt = mk(NULL, dt, 2, (int64_t[]){9, 8}, (int64_t[]){1, 9});
            void *px = alloc_rand(&xt, -1, 1);
            topk_check(&xt, 3, "transposed x");
            topk_check(&xt, 8, "transposed x");
            it_tdesc x3 = mk(px, dt, 3, (int64_t[]){2, 3, 12}, NULL);
            topk_check(&x3, 2, "3-D x");
            topk_check(&x3, 12, "3-D x");
            it_tdesc x2 = mk(px, dt, 2, (int64_t[]){6, 12}, NULL);
            double vs[6 * 2 * 5];
            int32_t is[6 * 3 * 5];
            it_tdesc tv = mk(vs, dt, 2, (int64_t[]){6, 5}, (int64_t[]){10, 1}),
                     ti = mk(is, IT_DTYPE_I32, 2, (int64_t[]){6, 5}, (int64_t[]){1, 18});
            CHECK_OK(K->topk(NULL, &x2, 5, &tv, &ti));
            it_tdesc cv = mk(NULL, dt, 2, (int64_t[]){6, 5}, NULL),
                     ci = mk(NULL, IT_DTYPE_I32, 2, (int64_t[]){6, 5}, NULL);
            void *pcv = alloc_fill(&cv, 0), *pci = alloc_fill(&ci, 0);
            CHECK_OK(K->topk(NULL, &x2, 5, &cv, &ci));
            int diff = 0;
            for (int64_t i = 0; i < 30; i++) diff += get(&tv, i) != get(&cv, i) || get(&ti, i) != get(&ci, i);
            CHECK_MSG(diff == 0, "topk %s strided outputs: %d differ", it_dtype_name(dt), diff);
            free(px), free(pcv), free(pci);
        }
    }

    /* Results do not depend on the thread count (4096 rows of 8, k = 2, and 64 rows of 300, k = 50). */
    if (have_omp()) {
        const int64_t cases[][3] = {{4096, 8, 2}, {64, 300, 50}};
        for (int z = 0; z < 2; z++) {
            int64_t N = cases[z][0], E = cases[z][1], k = cases[z][2];
            it_tdesc x = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){N, E}, NULL);
            it_tdesc v1 = mk(NULL, IT_DTYPE_FP32, 2, (int64_t[]){N, k}, NULL), v2 = v1;
            it_tdesc i1 = mk(NULL, IT_DTYPE_I32, 2, (int64_t[]){N, k}, NULL), i2 = i1;
            void *bufs[] = {alloc_rand(&x, -1, 1), alloc_fill(&v1, 0), alloc_fill(&v2, 0), alloc_fill(&i1, 0),
                            alloc_fill(&i2, 0)};
            int saved = max_threads();
            set_threads(1);
            CHECK_OK(K->topk(NULL, &x, k, &v1, &i1));
            set_threads(2);
            CHECK_OK(K->topk(NULL, &x, k, &v2, &i2));
            set_threads(saved);
            CHECK(same_bits(v1.data, v2.data, (size_t)(N * k) * sizeof(float)));
            CHECK(same_bits(i1.data, i2.data, (size_t)(N * k) * sizeof(int32_t)));
            topk_check(&x, k, "threads");
            for (size_t i = 0; i < 5; i++) free(bufs[i]);
        }
    }

    /* Size 0 and errors. */
    float buf[64] = {0}, vb[64];
    int32_t ib[64];
    it_tdesc x0 = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){0, 8}, NULL);
    it_tdesc v0 = mk(vb, IT_DTYPE_FP32, 2, (int64_t[]){0, 2}, NULL),
             i0 = mk(ib, IT_DTYPE_I32, 2, (int64_t[]){0, 2}, NULL);
    CHECK_OK(K->topk(NULL, &x0, 2, &v0, &i0));
    it_tdesc x = mk(buf, IT_DTYPE_FP32, 2, (int64_t[]){4, 8}, NULL);
    it_tdesc v = mk(vb, IT_DTYPE_FP32, 2, (int64_t[]){4, 2}, NULL),
             ix = mk(ib, IT_DTYPE_I32, 2, (int64_t[]){4, 2}, NULL);
    CHECK_ERR(K->topk(NULL, &x, 0, &v, &ix), IT_ERR_INVALID_ARG, "topk: k = 0 outside [1, E = 8]");
    CHECK_ERR(K->topk(NULL, &x, 9, &v, &ix), IT_ERR_INVALID_ARG, "topk: k = 9 outside [1, E = 8]");
    CHECK_ERR(K->topk(NULL, &x, 3, &v, &ix), IT_ERR_INVALID_ARG, "topk: values.shape[1] = 2, expected 3");
    it_tdesc i64 = mk(ib, IT_DTYPE_I64, 2, (int64_t[]){4, 2}, NULL);
    CHECK_ERR(K->topk(NULL, &x, 2, &v, &i64), IT_ERR_INVALID_ARG, "topk: indices dtype int64, expected int32");
    it_tdesc vd = mk(vb, IT_DTYPE_FP64, 2, (int64_t[]){4, 2}, NULL);
    CHECK_ERR(K->topk(NULL, &x, 2, &vd, &ix), IT_ERR_INVALID_ARG, "topk: values dtype float64, expected float32");
    it_tdesc vr = mk(vb, IT_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    CHECK_ERR(K->topk(NULL, &x, 2, &vr, &ix), IT_ERR_INVALID_ARG, "topk: values.shape[0] = 3, expected 4");
    it_tdesc vz = mk(vb, IT_DTYPE_FP32, 2, (int64_t[]){4, 2}, (int64_t[]){0, 1});
    CHECK_ERR(K->topk(NULL, &x, 2, &vz, &ix), IT_ERR_INVALID_ARG, "topk: values.strides[0] is 0");
    it_tdesc xb = mk(buf, IT_DTYPE_BF16, 2, (int64_t[]){4, 8}, NULL);
    CHECK_ERR(K->topk(NULL, &xb, 2, &v, &ix), IT_ERR_UNSUPPORTED, "topk: dtype bfloat16 not supported");
    CHECK_ERR(K->topk(NULL, &x, 2, &v, NULL), IT_ERR_INVALID_ARG, "topk: indices is NULL");
}

int main(void) {
    K = it_cpu_kernels();
    test_rmsnorm();
    test_rope();
    test_topk();
    return it_test_report("test_cpu_llama_kernels");
}
