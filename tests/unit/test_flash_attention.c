/* The CPU backend's flash attention (it_kernels.flash_attention_fwd / _bwd) against a
 * reference in double written plainly here (the whole softmax of each row, then the
 * gradients from the probabilities as backend.h defines them: p = exp(s - lse) with the lse
 * and delta = dy . y with the y the backward is given).
 *
 * Cases: causal and not; T == S and T != S with q_offset 0, positive, and negative enough to
 * leave rows with no key; T = 1; T and S off the 64-row blocks; H = Hkv, GQA (6 heads on 2) and
 * one kv head; D in {8, 64, 80, 128, 256} (and 0); q, k, v read from GPT-2's (B, T, 3, H, D)
 * qkv buffer and outputs written into its layout; rows padded with NaN (never read) and
 * outputs' pads (never written); fp32, bf16 and fp16; a NaN in one key or value; T = 1100;
 * no keys and no queries.
 * Then: the bits do not depend on the thread count or on the ISA path (IT_CPU_FLASH); the
 * results agree with the fused attention that keeps the (T, S) probabilities; T = S = 8192
 * runs without memory growing with T x S; calls the kernel does not take are declined
 * before anything is written.
 *
 * Tolerances. Each output element is compared with rel * mag + u_out * |ref|, where mag is
 * the largest over the element's row of the sum of the magnitudes of the terms that make it
 * (y_td: sum_j p_tj |v_jd|; dv_jd: sum_t p_tj |dy_td|; dq_td: scale sum_j p_tj (|dp_tj| +
 * sum_d |dy_td y_td|) |k_jd|, and dk likewise with q): what the fp32 errors are relative to,
 * whatever cancels in the sum. The kernel's fp32 errors: each score is a D-term FMA chain
 * (relative error up to D u of sum |q k|, with u = 2^-24, ~4e-6 at D = 64 for the scores
 * here, ~u sqrt(D) typically), exp within 1 ulp, and the sums over keys (y, l) or queries
 * (dk, dv) are chains of up to 1100 terms (bound 1100 u = 7e-5, typically u sqrt(n) ~ 2e-6).
 * Observed: at most 1.3e-6 of mag over the fp32 cases (REL32 below leaves a margin of 15 for
 * other draws and summation orders; a wrong mask, block edge or rescaling is off by O(1) of
 * mag). bf16 and fp16 round each output once (half an ulp: 2^-8 and 2^-11 of the value) on
 * top of the same fp32 errors; fp16 also has subnormals, spaced 2^-24. lse is compared
 * absolutely within REL32 (1 + max |s| + log n): its error is the max's rounding plus the
 * relative error of l. FA_VERBOSE=1 prints each comparison's largest err / tol. */
#include <sys/resource.h>

#include "test_cpu_util.h"

#define REL32 2e-5
#define U_BF16 0x1p-8
#define U_FP16 0x1p-11

typedef enum { L_CONTIG = 0, L_QKV = 1, L_PADDED = 2 } layout;

typedef struct prob {
    const char *what;
    it_dtype dt;
    int64_t B, H, Hkv, T, S, D;
    bool causal;
    int64_t off;
    float scale; /* 0: 1 / sqrt(D) */
    layout lay;
} prob;

/* The kernel's operands over buffers this test owns. */
typedef struct bufs {
    it_tdesc q, k, v, y, dy, lse, dq, dk, dv;
    void *mem[12];
    int n;
} bufs;

static double worst_ratio; /* largest err / tol of the comparison under way (FA_VERBOSE prints it) */

static float scale_of(const prob *p) { return p->scale != 0 ? p->scale : 1.0f / sqrtf((float)(p->D > 0 ? p->D : 1)); }

static void *own(bufs *x, size_t bytes, int fill) {
    void *m = malloc(bytes ? bytes : 1);
    memset(m, fill, bytes ? bytes : 1);
    x->mem[x->n++] = m;
    return m;
}

static void bufs_free(bufs *x) {
    for (int i = 0; i < x->n; i++) free(x->mem[i]);
    x->n = 0;
}

/* A (B, H, R, D) view at data with the given strides. */
static it_tdesc view4(void *data, it_dtype dt, int64_t B, int64_t H, int64_t R, int64_t D, const int64_t *st) {
    int64_t shape[4] = {B, H, R, D};
    return mk(data, dt, 4, shape, st);
}

/* A (B, H, R, D) tensor in its own buffer: contiguous, or (padded) rows of D + 3 and heads 5
 * elements further apart, the gaps holding NaN for an input (never read) and 0xA5 bytes for
 * an output (never written). */
static it_tdesc own_view(bufs *x, it_dtype dt, int64_t B, int64_t H, int64_t R, int64_t D, bool padded, bool output) {
    size_t es = it_dtype_size(dt);
    int64_t rs = padded ? D + 3 : D, hs = R * rs + (padded ? 5 : 0), bs = H * hs, n = B * bs;
    int64_t st[4] = {bs, hs, rs, 1};
    void *m = own(x, (size_t)n * es, 0xA5);
    if (!output)
        for (int64_t i = 0; i < n; i++) raw_set(m, dt, i, NAN);
    return view4(m, dt, B, H, R, D, st);
}

static void fill_rand(const it_tdesc *t, double amp) {
    int64_t n = t_numel(t);
    for (int64_t i = 0; i < n; i++) set(t, i, amp * urand());
}

/* The operands of p: q, k, v and dy random (q larger, so that the softmax is not flat). */
static void make_bufs(const prob *p, bufs *x) {
    memset(x, 0, sizeof *x);
    it_dtype dt = p->dt;
    size_t es = it_dtype_size(dt);
    int64_t B = p->B, H = p->H, T = p->T, D = p->D;
    if (p->lay == L_QKV) { /* GPT-2: qkv (B, T, 3, H, D), y and dy (B, T, H, D) */
        int64_t st[4] = {T * 3 * H * D, D, 3 * H * D, 1}, sy[4] = {T * H * D, D, H * D, 1};
        char *qkv = own(x, (size_t)(B * T * 3 * H * D) * es, 0), *dqkv = own(x, (size_t)(B * T * 3 * H * D) * es, 0xA5);
        x->q = view4(qkv, dt, B, H, T, D, st);
        x->k = view4(qkv + H * D * es, dt, B, H, T, D, st);
        x->v = view4(qkv + 2 * H * D * es, dt, B, H, T, D, st);
        x->dq = view4(dqkv, dt, B, H, T, D, st);
        x->dk = view4(dqkv + H * D * es, dt, B, H, T, D, st);
        x->dv = view4(dqkv + 2 * H * D * es, dt, B, H, T, D, st);
        x->y = view4(own(x, (size_t)(B * T * H * D) * es, 0xA5), dt, B, H, T, D, sy);
        x->dy = view4(own(x, (size_t)(B * T * H * D) * es, 0), dt, B, H, T, D, sy);
    } else {
        bool pad = p->lay == L_PADDED;
        x->q = own_view(x, dt, B, H, T, D, pad, false);
        x->k = own_view(x, dt, B, p->Hkv, p->S, D, pad, false);
        x->v = own_view(x, dt, B, p->Hkv, p->S, D, pad, false);
        x->dy = own_view(x, dt, B, H, T, D, pad, false);
        x->y = own_view(x, dt, B, H, T, D, pad, true);
        x->dq = own_view(x, dt, B, H, T, D, pad, true);
        x->dk = own_view(x, dt, B, p->Hkv, p->S, D, pad, true);
        x->dv = own_view(x, dt, B, p->Hkv, p->S, D, pad, true);
    }
    x->lse = mk(own(x, (size_t)(B * H * T) * sizeof(float), 0xA5), IT_DTYPE_FP32, 3, (int64_t[]){B, H, T}, NULL);
    fill_rand(&x->q, 3.0);
    fill_rand(&x->k, 1.0);
    fill_rand(&x->v, 1.0);
    fill_rand(&x->dy, 1.0);
}

/* t's elements in double, row-major. */
static double *gather(const it_tdesc *t) {
    int64_t n = t_numel(t);
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = get(t, i);
    return d;
}

/* t's elements' bytes, row-major (for bitwise comparisons). */
static unsigned char *raw_bytes(const it_tdesc *t, size_t *size) {
    size_t es = it_dtype_size(t->dtype);
    int64_t n = t_numel(t);
    *size = (size_t)n * es;
    unsigned char *b = malloc(*size ? *size : 1);
    for (int64_t i = 0; i < n; i++) memcpy(b + (size_t)i * es, (char *)t->data + t_off(t, i) * (int64_t)es, es);
    return b;
}

/* The number of elements of t's buffer outside the view whose bytes are no longer 0xA5. */
static int64_t pads_touched(const it_tdesc *t) {
    size_t es = it_dtype_size(t->dtype);
    int64_t span = t_span(t), n = t_numel(t), bad = 0;
    char *in = calloc((size_t)(span ? span : 1), 1);
    for (int64_t i = 0; i < n; i++) in[t_off(t, i)] = 1;
    for (int64_t e = 0; e < span; e++) {
        if (in[e]) continue;
        for (size_t b = 0; b < es; b++)
            if (((unsigned char *)t->data)[(size_t)e * es + b] != 0xA5) {
                bad++;
                break;
            }
    }
    free(in);
    return bad;
}

static it_status run_fwd(const prob *p, bufs *x) {
    it_flash_args a = {scale_of(p), p->causal, p->off};
    return K->flash_attention_fwd(NULL, &a, &x->q, &x->k, &x->v, &x->y, &x->lse);
}

static it_status run_bwd(const prob *p, bufs *x) {
    it_flash_args a = {scale_of(p), p->causal, p->off};
    return K->flash_attention_bwd(NULL, &a, &x->q, &x->k, &x->v, &x->y, &x->dy, &x->lse, &x->dq, &x->dk, &x->dv);
}

/* ---------------------------------------------------------------- the reference, in double */

/* Row t sees keys [0, ref_vis). */
static int64_t ref_vis(const prob *p, int64_t t) {
    if (!p->causal) return p->S;
    int64_t n = t + p->off + 1;
    return n < 0 ? 0 : n > p->S ? p->S : n;
}

/* Forward of row (b, h, t): y and ymag (D), lse, and *smax = max |s| (for lse's tolerance);
 * s is scratch of S doubles. q (B, H, T, D), k and v (B, Hkv, S, D) row-major. */
static void ref_fwd_row(const prob *p, const double *q, const double *k, const double *v, int64_t b, int64_t h,
                        int64_t t, double *s, double *y, double *ymag, double *lse, double *smax) {
    int64_t D = p->D, S = p->S, g = h / (p->H / p->Hkv), n = ref_vis(p, t);
    const double *qt = q + ((b * p->H + h) * p->T + t) * D, *kh = k + (b * p->Hkv + g) * S * D,
                 *vh = v + (b * p->Hkv + g) * S * D;
    double sc = scale_of(p), m = -INFINITY, l = 0;
    for (int64_t d = 0; d < D; d++) y[d] = ymag[d] = 0;
    *smax = 0;
    for (int64_t j = 0; j < n; j++) {
        double a = 0;
        for (int64_t d = 0; d < D; d++) a += qt[d] * kh[j * D + d];
        s[j] = sc * a;
        if (s[j] > m) m = s[j];
        if (fabs(s[j]) > *smax) *smax = fabs(s[j]);
    }
    if (n == 0) {
        *lse = -INFINITY;
        return;
    }
    for (int64_t j = 0; j < n; j++) l += s[j] = exp(s[j] - m);
    *lse = m + log(l);
    for (int64_t j = 0; j < n; j++) {
        double pj = s[j] / l;
        for (int64_t d = 0; d < D; d++) y[d] += pj * vh[j * D + d], ymag[d] += pj * fabs(vh[j * D + d]);
    }
}

/* The backward as backend.h states it, from the given y and lse: dq (B, H, T, D), dk and dv
 * (B, Hkv, S, D) and their magnitudes (see the top comment). */
typedef struct ref_grads {
    double *dq, *dk, *dv, *mq, *mk, *mv;
} ref_grads;

static ref_grads ref_bwd(const prob *p, const double *q, const double *k, const double *v, const double *y,
                         const double *dy, const double *lse) {
    int64_t B = p->B, H = p->H, T = p->T, S = p->S, D = p->D, r = H / p->Hkv;
    size_t nq = (size_t)(B * H * T * D + 1), nk = (size_t)(B * p->Hkv * S * D + 1);
    ref_grads o = {calloc(nq, 8), calloc(nk, 8), calloc(nk, 8), calloc(nq, 8), calloc(nk, 8), calloc(nk, 8)};
    double sc = scale_of(p);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t row = (b * H + h) * T + t, kv = (b * p->Hkv + h / r) * S, n = ref_vis(p, t);
                const double *qt = q + row * D, *yt = y + row * D, *dyt = dy + row * D;
                double delta = 0, adelta = 0;
                for (int64_t d = 0; d < D; d++) delta += dyt[d] * yt[d], adelta += fabs(dyt[d] * yt[d]);
                for (int64_t j = 0; j < n; j++) {
                    const double *kj = k + (kv + j) * D, *vj = v + (kv + j) * D;
                    double a = 0, dp = 0;
                    for (int64_t d = 0; d < D; d++) a += qt[d] * kj[d], dp += dyt[d] * vj[d];
                    double pj = exp(sc * a - lse[row]), ds = pj * (dp - delta), w = sc * pj * (fabs(dp) + adelta);
                    double *dqt = o.dq + row * D, *mqt = o.mq + row * D;
                    double *dkj = o.dk + (kv + j) * D, *mkj = o.mk + (kv + j) * D;
                    double *dvj = o.dv + (kv + j) * D, *mvj = o.mv + (kv + j) * D;
                    for (int64_t d = 0; d < D; d++) {
                        dqt[d] += sc * ds * kj[d], mqt[d] += w * fabs(kj[d]);
                        dkj[d] += sc * ds * qt[d], mkj[d] += w * fabs(qt[d]);
                        dvj[d] += pj * dyt[d], mvj[d] += pj * fabs(dyt[d]);
                    }
                }
            }
    return o;
}

static void ref_free(ref_grads *o) { free(o->dq), free(o->dk), free(o->dv), free(o->mq), free(o->mk), free(o->mv); }

/* ---------------------------------------------------------------- comparisons */

static double u_out(it_dtype dt) { return dt == IT_DTYPE_BF16 ? U_BF16 : dt == IT_DTYPE_FP16 ? U_FP16 : 0.0; }

/* One element: NaN where ref is NaN, the same infinity, else within tol. */
static bool close_to(double got, double ref, double tol) {
    if (isnan(ref)) return isnan(got);
    if (isinf(ref)) return got == ref;
    if (!isfinite(got)) return false;
    double err = fabs(got - ref);
    if (tol > 0 && err / tol > worst_ratio) worst_ratio = err / tol;
    return err <= tol;
}

/* got (a view of `rows` rows of D) against ref and mag (rows x D, row-major); rows with
 * skip[r] set are not compared. Reports the first few misses. */
static void cmp_rows(const char *what, const char *name, const it_tdesc *got, const double *ref, const double *mag,
                     int64_t rows, int64_t D, const bool *skip) {
    double uo = u_out(got->dtype), tiny = got->dtype == IT_DTYPE_FP16 ? 0x1p-24 : 0.0;
    int64_t bad = 0;
    worst_ratio = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (skip && skip[r]) continue;
        double rm = 0;
        for (int64_t d = 0; d < D; d++) rm = mag[r * D + d] > rm ? mag[r * D + d] : rm;
        for (int64_t d = 0; d < D; d++) {
            double g = get(got, r * D + d), e = ref[r * D + d];
            if (close_to(g, e, REL32 * rm * (1 + uo) + uo * fabs(e) + tiny)) continue;
            if (bad++ < 4)
                fprintf(stderr, "%s: %s row %lld col %lld: %.9g, reference %.9g (row magnitude %.3g)\n", what, name,
                        (long long)r, (long long)d, g, e, rm);
        }
    }
    CHECK_MSG(bad == 0, "%s: %s: %lld elements out of tolerance", what, name, (long long)bad);
    if (getenv("FA_VERBOSE")) printf("  %-70s %-3s worst err/tol %.3g\n", what, name, worst_ratio);
}

/* The forward of p on x against the reference; the rows of skip (B H T, or NULL) unchecked. */
static void check_fwd(const prob *p, bufs *x, const bool *skip) {
    int64_t B = p->B, H = p->H, T = p->T, D = p->D, rows = B * H * T;
    double *q = gather(&x->q), *k = gather(&x->k), *v = gather(&x->v);
    double *y = malloc((size_t)(rows * D + 1) * 8), *mag = malloc((size_t)(rows * D + 1) * 8);
    double *lse = malloc((size_t)(rows + 1) * 8), *smax = malloc((size_t)(rows + 1) * 8);
    double *s = malloc((size_t)(p->S + 1) * 8);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t row = (b * H + h) * T + t;
                ref_fwd_row(p, q, k, v, b, h, t, s, y + row * D, mag + row * D, lse + row, smax + row);
            }
    cmp_rows(p->what, "y", &x->y, y, mag, rows, D, skip);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (skip && skip[r]) continue;
        double g = ((const float *)x->lse.data)[r], n = (double)ref_vis(p, r % T);
        if (!close_to(g, lse[r], REL32 * (1 + smax[r] + log(n > 1 ? n : 1))) && bad++ < 4)
            fprintf(stderr, "%s: lse row %lld: %.9g, reference %.9g\n", p->what, (long long)r, g, lse[r]);
    }
    CHECK_MSG(bad == 0, "%s: lse: %lld rows out of tolerance", p->what, (long long)bad);
    free(q), free(k), free(v), free(y), free(mag), free(lse), free(smax), free(s);
}

/* The backward of p on x (y and lse as the forward left them) against the reference. */
static void check_bwd(const prob *p, bufs *x) {
    double *q = gather(&x->q), *k = gather(&x->k), *v = gather(&x->v), *y = gather(&x->y), *dy = gather(&x->dy);
    double *lse = gather(&x->lse);
    ref_grads o = ref_bwd(p, q, k, v, y, dy, lse);
    cmp_rows(p->what, "dq", &x->dq, o.dq, o.mq, p->B * p->H * p->T, p->D, NULL);
    cmp_rows(p->what, "dk", &x->dk, o.dk, o.mk, p->B * p->Hkv * p->S, p->D, NULL);
    cmp_rows(p->what, "dv", &x->dv, o.dv, o.mv, p->B * p->Hkv * p->S, p->D, NULL);
    ref_free(&o);
    free(q), free(k), free(v), free(y), free(dy), free(lse);
}

static void check_pads(const prob *p, bufs *x) {
    if (p->lay != L_PADDED) return;
    const it_tdesc *outs[4] = {&x->y, &x->dq, &x->dk, &x->dv};
    static const char *names[4] = {"y", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(pads_touched(outs[i]) == 0, "%s: %s's padding was written", p->what, names[i]);
}

/* Forward and backward of p against the reference. */
static void test_case(const prob *p) {
    bufs x;
    make_bufs(p, &x);
    CHECK_OK(run_fwd(p, &x));
    check_fwd(p, &x, NULL);
    CHECK_OK(run_bwd(p, &x));
    check_bwd(p, &x);
    check_pads(p, &x);
    bufs_free(&x);
}

static void test_cases(void) {
    static const it_dtype dts[3] = {IT_DTYPE_FP32, IT_DTYPE_BF16, IT_DTYPE_FP16};
    /* what, dtype (set below), B, H, Hkv, T, S, D, causal, q_offset, scale, layout */
    const prob cases[] = {
        {"causal self-attention, T = S = 100", 0, 2, 4, 4, 100, 100, 64, true, 0, 0, L_CONTIG},
        {"not causal, T = 70 < S = 130, D = 8", 0, 1, 2, 2, 70, 130, 8, false, 0, 0, L_CONTIG},
        {"not causal, T = 130 > S = 70, D = 80, scale 0.3", 0, 1, 2, 1, 130, 70, 80, false, 0, 0.3f, L_PADDED},
        {"causal, T = 50, S = 130, q_offset 80 (the last queries)", 0, 1, 2, 2, 50, 130, 64, true, 80, 0, L_CONTIG},
        {"causal, T = 90, S = 200, q_offset 37", 0, 2, 3, 3, 90, 200, 128, true, 37, 0, L_PADDED},
        {"causal, T = 100, S = 90, q_offset -20 (rows 0-19 see no key)", 0, 1, 2, 2, 100, 90, 64, true, -20, 0,
         L_CONTIG},
        {"causal, T = 130, S = 130, q_offset -70 (whole blocks see no key)", 0, 1, 1, 1, 130, 130, 8, true, -70, 0,
         L_CONTIG},
        {"causal, q_offset -1000 (no row sees a key)", 0, 1, 1, 1, 20, 30, 8, true, -1000, 0, L_CONTIG},
        {"T = 1, S = 77, q_offset 76 (decoding)", 0, 2, 4, 2, 1, 77, 64, true, 76, 0, L_CONTIG},
        {"T = 1, S = 77, q_offset 0 (sees key 0)", 0, 1, 2, 2, 1, 77, 80, true, 0, 0, L_CONTIG},
        {"T = 1, S = 1", 0, 1, 1, 1, 1, 1, 64, false, 0, 0, L_CONTIG},
        {"GQA H = 6 on Hkv = 2, D = 80, causal, T = S = 130", 0, 2, 6, 2, 130, 130, 80, true, 0, 0, L_CONTIG},
        {"one kv head, H = 4, D = 128, T = S = 65", 0, 1, 4, 1, 65, 65, 128, true, 0, 0, L_PADDED},
        {"one kv head, not causal, D = 256", 0, 1, 3, 1, 33, 70, 256, false, 0, 0, L_CONTIG},
        {"GPT-2's qkv layout, causal, T = S = 129, D = 64", 0, 2, 3, 3, 129, 129, 64, true, 0, 0, L_QKV},
        {"GPT-2's qkv layout, D = 80", 0, 1, 2, 2, 64, 64, 80, true, 0, 0, L_QKV},
    };
    for (int di = 0; di < 3; di++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            /* under the sanitizers one case per mechanism: each case in one dtype, each dtype
             * on a third of the cases (the release build runs every case in every dtype) */
            if (UNDER_SANITIZER && (int)(i % 3) != di) continue;
            prob p = cases[i];
            p.dt = dts[di];
            char what[160];
            snprintf(what, sizeof what, "%s (%s)", p.what, it_dtype_name(p.dt));
            p.what = what;
            test_case(&p);
        }
    /* a long causal sequence: sums over 1100 keys and queries, 18 blocks */
    prob lng = {"long causal sequence T = S = 1100", IT_DTYPE_FP32, 1, 2, 2, 1100, 1100, 64, true, 0, 0, L_QKV};
    test_case(&lng);
    prob lng16 = {
        "long causal sequence T = S = 1100 (bf16)", IT_DTYPE_BF16, 1, 2, 1, 1100, 1100, 64, true, 0, 0, L_CONTIG};
    test_case(&lng16);
}

/* A NaN in key j0 (in k, then in v) reaches every row that sees it: with causal, rows t >= j0
 * get NaN y and (for k) NaN lse; the earlier rows keep their values (this kernel masks the
 * scores before they are used, so a NaN in a masked k is never read; a NaN in a masked v may
 * still reach rows of its query block, which backend.h allows: those are not checked). */
static void test_nan(void) {
    for (int in_v = 0; in_v < 2; in_v++)
        for (int causal = 0; causal < 2; causal++) {
            prob p = {in_v ? "NaN in one value" : "NaN in one key",
                      IT_DTYPE_FP32,
                      1,
                      2,
                      1,
                      100,
                      100,
                      64,
                      causal,
                      0,
                      0,
                      L_CONTIG};
            const int64_t j0 = 70;
            bufs x;
            make_bufs(&p, &x);
            set(in_v ? &x.v : &x.k, j0 * p.D + 5, NAN);
            CHECK_OK(run_fwd(&p, &x));
            bool skip[200] = {0};
            int64_t nan_rows = 0, rows = p.B * p.H * p.T;
            for (int64_t r = 0; r < rows; r++) {
                int64_t t = r % p.T;
                bool sees = ref_vis(&p, t) > j0;
                skip[r] = in_v && !sees && t / 64 == j0 / 64; /* may or may not be NaN */
                if (!sees) continue;
                /* a NaN score spoils the whole row; a NaN value only its own column of y */
                bool all = in_v ? isnan(get(&x.y, r * p.D + 5)) : isnan(((float *)x.lse.data)[r]);
                for (int64_t d = 0; d < p.D && !in_v; d++) all = all && isnan(get(&x.y, r * p.D + d));
                nan_rows += all;
            }
            int64_t want = 0;
            for (int64_t r = 0; r < rows; r++) want += ref_vis(&p, r % p.T) > j0;
            CHECK_MSG(nan_rows == want, "%s (causal %d): %lld of the %lld rows that see key %lld are NaN", p.what,
                      causal, (long long)nan_rows, (long long)want, (long long)j0);
            check_fwd(&p, &x, skip); /* the reference's NaNs are where the kernel's must be */
            /* backward: the gradients of the rows that see the key are NaN */
            CHECK_OK(run_bwd(&p, &x));
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++)
                if (ref_vis(&p, r % p.T) > j0 && !isnan(get(&x.dq, r * p.D))) bad++;
            CHECK_MSG(bad == 0, "%s (causal %d): %lld rows that see the key have a finite dq", p.what, causal,
                      (long long)bad);
            CHECK_MSG(isnan(get(in_v ? &x.dk : &x.dv, j0 * p.D)), "%s (causal %d): the key's own %s is finite", p.what,
                      causal, in_v ? "dk" : "dv");
            bufs_free(&x);
        }
}

/* No keys: y = 0 and lse = -inf, dq = 0. No queries: dk = dv = 0 (written, not left). A head
 * size of 0: every score is 0, so lse_t = log(the keys row t sees). */
static void test_empty(void) {
    prob z = {"head size 0", IT_DTYPE_FP32, 1, 2, 1, 5, 7, 0, true, 1, 0, L_CONTIG};
    bufs x;
    make_bufs(&z, &x);
    CHECK_OK(run_fwd(&z, &x));
    check_fwd(&z, &x, NULL);
    CHECK_OK(run_bwd(&z, &x));
    bufs_free(&x);
    prob p = {"no keys (S = 0)", IT_DTYPE_FP32, 1, 2, 1, 5, 0, 8, false, 0, 0, L_CONTIG};
    make_bufs(&p, &x);
    CHECK_OK(run_fwd(&p, &x));
    check_fwd(&p, &x, NULL);
    CHECK_OK(run_bwd(&p, &x));
    int64_t nz = 0;
    for (int64_t i = 0; i < t_numel(&x.dq); i++) nz += get(&x.dq, i) != 0.0;
    CHECK_MSG(nz == 0, "no keys: %lld elements of dq are not 0", (long long)nz);
    bufs_free(&x);
    prob e = {"no queries (T = 0)", IT_DTYPE_BF16, 1, 2, 2, 0, 9, 8, true, 0, 0, L_CONTIG};
    make_bufs(&e, &x);
    CHECK_OK(run_fwd(&e, &x));
    CHECK_OK(run_bwd(&e, &x));
    nz = 0;
    for (int64_t i = 0; i < t_numel(&x.dk); i++) nz += get(&x.dk, i) != 0.0 || get(&x.dv, i) != 0.0;
    CHECK_MSG(nz == 0, "no queries: %lld elements of dk, dv are not 0", (long long)nz);
    bufs_free(&x);
}

/* ---------------------------------------------------------------- determinism */

typedef struct outs {
    unsigned char *b[5];
    size_t n[5];
} outs;

static outs run_both(const prob *p, bufs *x) {
    outs o;
    CHECK_OK(run_fwd(p, x));
    CHECK_OK(run_bwd(p, x));
    const it_tdesc *t[5] = {&x->y, &x->lse, &x->dq, &x->dk, &x->dv};
    for (int i = 0; i < 5; i++) o.b[i] = raw_bytes(t[i], &o.n[i]);
    return o;
}

static void same_outs(const char *what, outs *a, outs *b) {
    static const char *names[5] = {"y", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        CHECK_MSG(a->n[i] == b->n[i] && memcmp(a->b[i], b->b[i], a->n[i]) == 0, "%s: %s differs", what, names[i]);
        free(b->b[i]);
    }
}

/* The bits do not depend on the thread count (every element is summed by one task in a
 * fixed order, and how many blocks a task takes, which follows the thread count, changes no
 * sum) nor on the ISA path (every path sums in the same order: IT_CPU_FLASH). The second case
 * has few heads, so that one thread takes two blocks a task and two or three take one. */
static void test_bits(void) {
    const prob cases[3] = {
        {"GQA causal", IT_DTYPE_FP32, 2, 6, 2, 200, 230, 80, true, 30, 0, L_CONTIG},
        {"GQA causal", IT_DTYPE_BF16, 2, 6, 2, 200, 230, 80, true, 30, 0, L_CONTIG},
        {"two heads, GPT-2's layout", IT_DTYPE_FP32, 1, 2, 2, 250, 250, 64, true, 0, 0, L_QKV},
    };
    for (int ci = 0; ci < 3; ci++) {
        prob p = cases[ci];
        if (UNDER_SANITIZER) { /* a quarter of the work; still several blocks of 64 per head */
            p.T /= 2, p.S /= 2, p.off /= 2;
        }
        bufs x;
        make_bufs(&p, &x);
        int saved = max_threads();
        char what[96];
        set_threads(1);
        outs one = run_both(&p, &x);
        if (have_omp()) {
            for (int nt = 2; nt <= 3; nt++) {
                set_threads(nt);
                outs more = run_both(&p, &x);
                snprintf(what, sizeof what, "%s %s: %d threads against 1", p.what, it_dtype_name(p.dt), nt);
                same_outs(what, &one, &more);
            }
        }
        set_threads(saved);
        static const char *isas[3] = {"scalar", "avx2", "avx512"};
        for (int i = 0; i < 3; i++) {
            setenv("IT_CPU_FLASH", isas[i], 1);
            outs o = run_both(&p, &x);
            snprintf(what, sizeof what, "%s %s: IT_CPU_FLASH=%s against the default", p.what, it_dtype_name(p.dt),
                     isas[i]);
            same_outs(what, &one, &o);
        }
        unsetenv("IT_CPU_FLASH");
        for (int i = 0; i < 5; i++) free(one.b[i]);
        bufs_free(&x);
    }
}

/* ---------------------------------------------------------------- against the fused attention */

/* it_kernels.attention_fwd / _bwd (the CPU's fused kernel, which keeps the (T, S)
 * probabilities; its causal mask is q_offset = S - T) on the same fp32 operands: y within
 * twice REL32 of the row's magnitude (each is within REL32 of the exact values), and dq, dk
 * and dv (its dk and dv are per query head: summed over each group here, in double). */
static void test_vs_fused(void) {
    const prob cases[] = {
        {"vs fused: causal T = S = 150", IT_DTYPE_FP32, 2, 4, 4, 150, 150, 64, true, 0, 0, L_CONTIG},
        {"vs fused: causal T = 70 S = 200 GQA", IT_DTYPE_FP32, 1, 6, 2, 70, 200, 80, true, 130, 0, L_CONTIG},
        {"vs fused: not causal D = 8", IT_DTYPE_FP32, 1, 2, 1, 33, 90, 8, false, 0, 0, L_CONTIG},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const prob *p = &cases[c];
        int64_t B = p->B, H = p->H, T = p->T, S = p->S, D = p->D, r = H / p->Hkv;
        bufs x;
        make_bufs(p, &x);
        CHECK_OK(run_fwd(p, &x));
        CHECK_OK(run_bwd(p, &x));
        float *att = malloc((size_t)(B * H * T * S) * 4), *datt = malloc((size_t)(B * H * T * S) * 4);
        it_tdesc a = mk(att, IT_DTYPE_FP32, 4, (int64_t[]){B, H, T, S}, NULL);
        it_tdesc da = mk(datt, IT_DTYPE_FP32, 4, (int64_t[]){B, H, T, S}, NULL);
        it_tdesc y = mk(malloc((size_t)(B * H * T * D) * 4), IT_DTYPE_FP32, 4, (int64_t[]){B, H, T, D}, NULL);
        it_tdesc dq = mk(malloc((size_t)(B * H * T * D) * 4), IT_DTYPE_FP32, 4, (int64_t[]){B, H, T, D}, NULL);
        it_tdesc dk = mk(malloc((size_t)(B * H * S * D) * 4), IT_DTYPE_FP32, 4, (int64_t[]){B, H, S, D}, NULL);
        it_tdesc dv = mk(malloc((size_t)(B * H * S * D) * 4), IT_DTYPE_FP32, 4, (int64_t[]){B, H, S, D}, NULL);
        it_softmax_args sm = {scale_of(p), p->causal};
        CHECK_OK(K->attention_fwd(NULL, &sm, &x.q, &x.k, &x.v, &a, &y));
        CHECK_OK(K->attention_bwd(NULL, &sm, &x.q, &x.k, &x.v, &a, &x.dy, &dq, &dk, &dv, &da));
        /* the reference's magnitudes, for the tolerances */
        double *q = gather(&x.q), *k = gather(&x.k), *v = gather(&x.v), *yy = gather(&x.y), *dy = gather(&x.dy);
        double *lse = gather(&x.lse), *ym = malloc((size_t)(B * H * T * D) * 8);
        double *s = malloc((size_t)(S + 1) * 8), yr[256], l0, sm0;
        for (int64_t row = 0; row < B * H * T; row++)
            ref_fwd_row(p, q, k, v, row / (H * T), row / T % H, row % T, s, yr, ym + row * D, &l0, &sm0);
        ref_grads o = ref_bwd(p, q, k, v, yy, dy, lse);
        /* the fused kernel's results as the "reference", with twice the tolerance */
        double *fy = gather(&y), *fq = gather(&dq), *fk = calloc((size_t)(B * p->Hkv * S * D), 8),
               *fv = calloc((size_t)(B * p->Hkv * S * D), 8);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S * D; i++) {
                    int64_t src = (b * H + h) * S * D + i, dst = (b * p->Hkv + h / r) * S * D + i;
                    fk[dst] += get(&dk, src), fv[dst] += get(&dv, src);
                }
        for (int64_t i = 0; i < B * H * T * D; i++) ym[i] *= 2, o.mq[i] *= 2;
        for (int64_t i = 0; i < B * p->Hkv * S * D; i++) o.mk[i] *= 2, o.mv[i] *= 2;
        cmp_rows(p->what, "y", &x.y, fy, ym, B * H * T, D, NULL);
        cmp_rows(p->what, "dq", &x.dq, fq, o.mq, B * H * T, D, NULL);
        cmp_rows(p->what, "dk", &x.dk, fk, o.mk, B * p->Hkv * S, D, NULL);
        cmp_rows(p->what, "dv", &x.dv, fv, o.mv, B * p->Hkv * S, D, NULL);
        ref_free(&o);
        free(q), free(k), free(v), free(yy), free(dy), free(lse), free(ym), free(s), free(fy), free(fq), free(fk);
        free(fv), free(att), free(datt), free(y.data), free(dq.data), free(dk.data), free(dv.data);
        bufs_free(&x);
    }
}

/* ---------------------------------------------------------------- memory */

static long maxrss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* T = S = 8192: the (T, S) fp32 scores would be 256 MB. The peak resident size may grow by
 * less than 64 MB over the calls (the operands, 2 MB each, are allocated and touched before);
 * a few rows of each output are checked against the reference. Runs first, before the other
 * tests raise the peak. */
static void test_memory(void) {
    prob p = {"T = S = 8192", IT_DTYPE_FP32, 1, 1, 1, 8192, 8192, 64, true, 0, 0, L_CONTIG};
    bufs x;
    make_bufs(&p, &x);
    prob small = {"warm-up", IT_DTYPE_FP32, 1, 2, 2, 130, 130, 64, true, 0, 0, L_CONTIG};
    bufs w; /* the threads' stacks and the scratch of a small call */
    make_bufs(&small, &w);
    CHECK_OK(run_fwd(&small, &w));
    CHECK_OK(run_bwd(&small, &w));
    bufs_free(&w);
    long before = maxrss_kb();
    CHECK_OK(run_fwd(&p, &x));
    CHECK_OK(run_bwd(&p, &x));
    long grew = maxrss_kb() - before;
    CHECK_MSG(grew < 64 * 1024, "T = S = 8192: peak RSS grew by %ld KB (the scores would be 262144 KB)", grew);
    if (getenv("FA_VERBOSE")) printf("T = S = 8192: peak RSS grew by %ld KB over the calls\n", grew);
    double *q = gather(&x.q), *k = gather(&x.k), *v = gather(&x.v), *s = malloc((size_t)p.S * 8);
    double y[64], mag[64], lse, smax;
    const int64_t rows[4] = {0, 63, 4097, 8191};
    for (int i = 0; i < 4; i++) {
        ref_fwd_row(&p, q, k, v, 0, 0, rows[i], s, y, mag, &lse, &smax);
        it_tdesc yr = x.y;
        yr.data = (float *)x.y.data + rows[i] * p.D;
        cmp_rows("T = S = 8192", "y", &yr, y, mag, 1, p.D, NULL);
        CHECK_NEAR(((float *)x.lse.data)[rows[i]], lse, REL32 * (1 + smax + log(rows[i] + 1.0)));
    }
    /* the backward at the same rows and keys (a reference of every row would be O(T^2 D)) */
    double *yy = gather(&x.y), *dy = gather(&x.dy), *ls = gather(&x.lse);
    double sc = scale_of(&p);
    int64_t D = p.D;
    for (int i = 0; i < 4; i++) { /* dq_t from the keys row t sees */
        int64_t t = rows[i];
        double delta = 0, ad = 0, dq[64] = {0}, mq[64] = {0};
        for (int64_t d = 0; d < D; d++)
            delta += dy[t * D + d] * yy[t * D + d], ad += fabs(dy[t * D + d] * yy[t * D + d]);
        for (int64_t j = 0; j <= t; j++) {
            double a = 0, dp = 0;
            for (int64_t d = 0; d < D; d++) a += q[t * D + d] * k[j * D + d], dp += dy[t * D + d] * v[j * D + d];
            double pj = exp(sc * a - ls[t]), ds = pj * (dp - delta);
            for (int64_t d = 0; d < D; d++)
                dq[d] += sc * ds * k[j * D + d], mq[d] += sc * pj * (fabs(dp) + ad) * fabs(k[j * D + d]);
        }
        it_tdesc r = x.dq;
        r.data = (float *)x.dq.data + t * D;
        cmp_rows("T = S = 8192", "dq", &r, dq, mq, 1, D, NULL);
    }
    for (int i = 0; i < 4; i++) { /* dk_j, dv_j from the rows that see key j */
        int64_t j = rows[i];
        double dk[64] = {0}, dv[64] = {0}, mk_[64] = {0}, mv[64] = {0};
        for (int64_t t = j; t < p.T; t++) {
            double a = 0, dp = 0, delta = 0, ad = 0;
            for (int64_t d = 0; d < D; d++) {
                a += q[t * D + d] * k[j * D + d], dp += dy[t * D + d] * v[j * D + d];
                delta += dy[t * D + d] * yy[t * D + d], ad += fabs(dy[t * D + d] * yy[t * D + d]);
            }
            double pj = exp(sc * a - ls[t]), ds = pj * (dp - delta), wgt = sc * pj * (fabs(dp) + ad);
            for (int64_t d = 0; d < D; d++) {
                dk[d] += sc * ds * q[t * D + d], mk_[d] += wgt * fabs(q[t * D + d]);
                dv[d] += pj * dy[t * D + d], mv[d] += pj * fabs(dy[t * D + d]);
            }
        }
        it_tdesc rk = x.dk, rv = x.dv;
        rk.data = (float *)x.dk.data + j * D;
        rv.data = (float *)x.dv.data + j * D;
        cmp_rows("T = S = 8192", "dk", &rk, dk, mk_, 1, D, NULL);
        cmp_rows("T = S = 8192", "dv", &rv, dv, mv, 1, D, NULL);
    }
    free(q), free(k), free(v), free(s), free(yy), free(dy), free(ls);
    bufs_free(&x);
}

/* ---------------------------------------------------------------- declined and invalid calls */

/* Each bad call returns its status with a message naming the problem, and writes nothing. */
static void test_declines(void) {
    prob p = {"declines", IT_DTYPE_FP32, 1, 4, 2, 10, 12, 8, true, 0, 0, L_CONTIG};
    bufs x;
    make_bufs(&p, &x);
    it_flash_args a = {0.25f, true, 0};
    const it_kernels *k = K;
#define BOTH(status, substr, ...)                                                                                      \
    do {                                                                                                               \
        CHECK_ERR(k->flash_attention_fwd(NULL, &a, __VA_ARGS__, &x.y, &x.lse), status, substr);                        \
        CHECK_ERR(k->flash_attention_bwd(NULL, &a, __VA_ARGS__, &x.y, &x.dy, &x.lse, &x.dq, &x.dk, &x.dv), status,     \
                  substr);                                                                                             \
    } while (0)
    /* the head size */
    it_tdesc q2 = x.q, k2 = x.k, v2 = x.v;
    q2.shape[3] = k2.shape[3] = v2.shape[3] = 257;
    it_tdesc y2 = x.y, dy2 = x.dy, dq2 = x.dq, dk2 = x.dk, dv2 = x.dv;
    y2.shape[3] = dy2.shape[3] = dq2.shape[3] = dk2.shape[3] = dv2.shape[3] = 257;
    /* (the shapes only: nothing is read before the check declines) */
    CHECK_ERR(k->flash_attention_fwd(NULL, &a, &q2, &k2, &v2, &y2, &x.lse), IT_ERR_UNSUPPORTED, "head size 257");
    CHECK_ERR(k->flash_attention_bwd(NULL, &a, &q2, &k2, &v2, &y2, &dy2, &x.lse, &dq2, &dk2, &dv2), IT_ERR_UNSUPPORTED,
              "head size 257");
    /* fp64 */
    it_tdesc q3 = x.q, k3 = x.k, v3 = x.v;
    q3.dtype = k3.dtype = v3.dtype = IT_DTYPE_FP64;
    BOTH(IT_ERR_UNSUPPORTED, "float64", &q3, &k3, &v3);
    /* a last stride other than 1 */
    it_tdesc q4 = x.q;
    q4.strides[3] = 2;
    BOTH(IT_ERR_UNSUPPORTED, "last stride", &q4, &x.k, &x.v);
    /* kv heads that do not divide the query heads */
    it_tdesc k5 = x.k, v5 = x.v;
    k5.shape[1] = v5.shape[1] = 3;
    BOTH(IT_ERR_INVALID_ARG, "must divide", &x.q, &k5, &v5);
    /* mixed dtypes, a wrong shape */
    it_tdesc v6 = x.v;
    v6.dtype = IT_DTYPE_BF16;
    BOTH(IT_ERR_INVALID_ARG, "one dtype", &x.q, &x.k, &v6);
    it_tdesc v7 = x.v;
    v7.shape[2] = 11;
    BOTH(IT_ERR_INVALID_ARG, "v must be", &x.q, &x.k, &v7);
    /* lse: fp32 and contiguous */
    it_tdesc l8 = x.lse;
    l8.dtype = IT_DTYPE_BF16;
    CHECK_ERR(k->flash_attention_fwd(NULL, &a, &x.q, &x.k, &x.v, &x.y, &l8), IT_ERR_INVALID_ARG, "lse is");
    it_tdesc l9 = x.lse;
    l9.strides[1] = 11;
    CHECK_ERR(k->flash_attention_fwd(NULL, &a, &x.q, &x.k, &x.v, &x.y, &l9), IT_ERR_INVALID_ARG, "contiguous");
    CHECK_ERR(k->flash_attention_fwd(NULL, NULL, &x.q, &x.k, &x.v, &x.y, &x.lse), IT_ERR_INVALID_ARG, "args");
    /* an output that writes an element twice */
    it_tdesc y10 = x.y;
    y10.strides[2] = 0;
    CHECK_ERR(k->flash_attention_fwd(NULL, &a, &x.q, &x.k, &x.v, &y10, &x.lse), IT_ERR_INVALID_ARG, "strides[2]");
#undef BOTH
    /* it_cpu_flash_attention_check: the kernels' checks alone (for backends that queue the
     * CPU kernel), with the caller's name in the message */
    CHECK_OK(it_cpu_flash_attention_check("x", &a, &x.q, &x.k, &x.v, &x.y, NULL, &x.lse, NULL, NULL, NULL));
    CHECK_OK(it_cpu_flash_attention_check("x", &a, &x.q, &x.k, &x.v, &x.y, &x.dy, &x.lse, &x.dq, &x.dk, &x.dv));
    CHECK_ERR(it_cpu_flash_attention_check("sim: fwd", &a, &q2, &k2, &v2, &y2, NULL, &x.lse, NULL, NULL, NULL),
              IT_ERR_UNSUPPORTED, "sim: fwd: head size 257");
    CHECK_ERR(it_cpu_flash_attention_check("sim: fwd", &a, &x.q, &x.k, &x.v, &y10, NULL, &x.lse, NULL, NULL, NULL),
              IT_ERR_INVALID_ARG, "strides[2]");
    CHECK_ERR(it_cpu_flash_attention_check("sim: bwd", &a, &x.q, &x.k, &x.v, &x.y, &x.dy, &x.lse, &x.dq, NULL, &x.dv),
              IT_ERR_INVALID_ARG, "dk is NULL");
    /* nothing was written: the outputs keep their 0xA5 bytes */
    const it_tdesc *outs[5] = {&x.y, &x.lse, &x.dq, &x.dk, &x.dv};
    for (int i = 0; i < 5; i++) {
        size_t n;
        unsigned char *b = raw_bytes(outs[i], &n), same = 1;
        for (size_t j = 0; j < n; j++) same &= b[j] == 0xA5;
        CHECK_MSG(same, "declines: output %d was written", i);
        free(b);
    }
    bufs_free(&x);
}

int main(void) {
    K = it_cpu_kernels();
    CHECK(K->flash_attention_fwd != NULL && K->flash_attention_bwd != NULL);
    if (K->flash_attention_fwd == NULL || K->flash_attention_bwd == NULL) return it_test_report("test_flash_attention");
    test_memory();
    test_cases();
    test_nan();
    test_empty();
    test_bits();
    test_vs_fused();
    test_declines();
    return it_test_report("test_flash_attention");
}
