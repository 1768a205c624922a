/* The fused attention kernels (it_kernels.attention_fwd / _bwd) against the composition they
 * replace, through the ops and the autograd engine on the cpu device, in fp32.
 *
 * The CPU's fused kernels run the composition's own products (the kernel the gemm slot runs
 * per matrix) and its softmax rows, so the outputs and every gradient must be bitwise equal
 * to those of the composed path (IT_FUSED_KERNELS=0), which test_gradcheck checks against
 * finite differences in fp64 and test_gpt2_exact against PyTorch. Shapes cover GPT-2 124M's
 * (hd 64), head sizes that are not a multiple of the 16-wide vectors (whose last vector is
 * stored masked: a store past a head would overwrite its neighbour in place), one head, one
 * token, and LLaMA's it_attention on non-contiguous inputs, grouped kv heads included (the
 * groups' gradient sums then go through the reduce slot on both paths). The kernel statistics
 * show which path ran. fp64 is declined by the fused kernel and composed: checked too. With
 * the BLAS's fp32 products (test_attention_blas) the comparison allows for their order: see
 * exact_products. The kernels are also called directly with more keys than queries (the
 * causal offset the ops never pass) against an fp64 reference (test_kernel_offset). Under
 * bf16 autocast the ops' composition is compared bitwise with the per-head-cast one written
 * here with public ops (test_autocast). */
#include <math.h>
#include <stdint.h>

#include "cpu/sgemm_select.h"
#include "infinitrain/backend.h"
#include "infinitrain/ops.h"
#include "it_test.h"

static it_device cpu;

static uint64_t lcg = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(lcg >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static int64_t numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* A tensor of dt with the given host values (fp32). */
static it_tensor *from(it_dtype dt, int ndim, const int64_t *shape, const float *v) {
    int64_t n = numel(ndim, shape);
    if (dt == IT_DTYPE_FP32) return it_tensor_from_host(cpu, dt, ndim, shape, v, (size_t)n * sizeof(float));
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = v[i];
    it_tensor *t = it_tensor_from_host(cpu, dt, ndim, shape, d, (size_t)n * sizeof(double));
    free(d);
    return t;
}

/* t's bytes, row-major (any view). */
static unsigned char *bytes_of(it_tensor *t, size_t *size) {
    *size = (size_t)it_tensor_numel(t) * it_dtype_size(it_tensor_dtype(t));
    unsigned char *h = malloc(*size ? *size : 1);
    if (h && it_tensor_copy_to_host(t, h, *size)) {
        free(h);
        return NULL;
    }
    return h;
}

static uint64_t slot_calls(const char *slot) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(cpu.backend, st)) return 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        if (strcmp(st[i].slot, slot) == 0) return st[i].calls;
    return 0;
}

/* The outputs of one run: y and the inputs' gradients, as bytes. */
typedef struct run_out {
    unsigned char *b[4];
    size_t n[4];
    int count;
} run_out;

static void run_free(run_out *r) {
    for (int i = 0; i < r->count; i++) free(r->b[i]);
}

/* it_causal_self_attention on qkv (B, T, 3C) from host values; loss sum(y * R). */
static run_out run_qkv(it_dtype dt, int64_t B, int64_t T, int64_t C, int nh, const float *qkv_h, const float *r_h,
                       bool fused) {
    run_out o = {0};
    if (fused)
        unsetenv("IT_FUSED_KERNELS");
    else
        setenv("IT_FUSED_KERNELS", "0", 1);
    it_scope_begin();
    int64_t sq[3] = {B, T, 3 * C}, sy[3] = {B, T, C};
    it_tensor *qkv = from(dt, 3, sq, qkv_h), *R = from(dt, 3, sy, r_h);
    CHECK_OK(it_tensor_set_requires_grad(qkv, true));
    it_tensor *y = it_causal_self_attention(qkv, nh);
    CHECK_MSG(y != NULL, "attention: %s", it_last_error());
    if (y) {
        CHECK_OK(it_backward(it_sum_all(it_mul(y, R))));
        o.b[0] = bytes_of(y, &o.n[0]);
        o.b[1] = bytes_of(it_tensor_grad(qkv), &o.n[1]);
        o.count = 2;
    }
    it_scope_end(); /* releases what the scope made, the inputs included */
    unsetenv("IT_FUSED_KERNELS");
    return o;
}

/* Whether fp32 products are bitwise independent of how they are threaded. The backend's own
 * sgemms (AVX-512, AVX2) sum each element on one thread in a fixed order; the BLAS
 * (IT_CPU_SGEMM=blas, or a CPU without AVX2) promises the same bits only for the same thread count, and the
 * fused kernel runs each head on one thread where the composition may give one head all of
 * them. There the fp32 runs are compared within FP32_TOL of the tensor's largest magnitude:
 * the same products summed in another order (k <= 256 terms). Seen: 1.1e-6 absolute on
 * magnitudes of about 2 (T = 256), so the bound leaves a margin of about 20. */
#define FP32_TOL 1e-5
static bool exact_products(void) { return it_cpu_sgemm_is_own(); }

static void compare(const char *what, const run_out *a, const run_out *b, bool fp32) {
    CHECK_MSG(a->count == b->count && a->count > 0, "%s: %d against %d outputs", what, a->count, b->count);
    static const char *names[4] = {"y", "grad 0", "grad 1", "grad 2"};
    for (int i = 0; i < a->count && i < b->count; i++) {
        if (fp32 && !exact_products() && a->b[i] && b->b[i] && a->n[i] == b->n[i]) {
            const float *x = (const float *)a->b[i], *y = (const float *)b->b[i];
            size_t n = a->n[i] / sizeof(float), worst = 0;
            double big = 0, err = 0;
            for (size_t j = 0; j < n; j++) big = fabs(y[j]) > big ? fabs(y[j]) : big;
            for (size_t j = 0; j < n; j++)
                if (fabs((double)x[j] - y[j]) > err) err = fabs((double)x[j] - y[j]), worst = j;
            CHECK_MSG(err <= FP32_TOL * big, "%s: %s differs from the composition's by %.3g at %zu (bound %.3g)", what,
                      names[i], err, worst, FP32_TOL * big);
            continue;
        }
        bool same = a->b[i] && b->b[i] && a->n[i] == b->n[i] && memcmp(a->b[i], b->b[i], a->n[i]) == 0;
        size_t first = 0;
        if (!same && a->b[i] && b->b[i] && a->n[i] == b->n[i])
            while (first < a->n[i] && a->b[i][first] == b->b[i][first]) first++;
        CHECK_MSG(same, "%s: %s differs from the composition's (first at byte %zu of %zu)", what, names[i], first,
                  a->n[i]);
    }
}

static void test_qkv(int64_t B, int64_t T, int64_t C, int nh) {
    char what[96];
    snprintf(what, sizeof what, "causal_self_attention B=%lld T=%lld C=%lld nh=%d", (long long)B, (long long)T,
             (long long)C, nh);
    int64_t nq = B * T * 3 * C, ny = B * T * C;
    float *qkv = malloc((size_t)nq * sizeof(float)), *r = malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < nq; i++) qkv[i] = frand() * 2.0f;
    for (int64_t i = 0; i < ny; i++) r[i] = frand();
    uint64_t f0 = slot_calls("attention_fwd"), b0 = slot_calls("attention_bwd");
    run_out fz = run_qkv(IT_DTYPE_FP32, B, T, C, nh, qkv, r, true);
    uint64_t f1 = slot_calls("attention_fwd"), b1 = slot_calls("attention_bwd");
    CHECK_MSG(f1 == f0 + 1 && b1 == b0 + 1, "%s: the fused kernels ran %llu and %llu times, expected once each", what,
              (unsigned long long)(f1 - f0), (unsigned long long)(b1 - b0));
    run_out cp = run_qkv(IT_DTYPE_FP32, B, T, C, nh, qkv, r, false);
    CHECK_MSG(slot_calls("attention_fwd") == f1, "%s: IT_FUSED_KERNELS=0 still ran the fused kernel", what);
    compare(what, &fz, &cp, true);
    run_free(&fz);
    run_free(&cp);
    free(qkv);
    free(r);
}

/* fp64: the fused kernel declines, the op composes; the call is counted, nothing is left behind. */
static void test_fp64_composed(void) {
    int64_t B = 2, T = 5, C = 12;
    float qkv[2 * 5 * 36], r[2 * 5 * 12];
    for (int i = 0; i < 2 * 5 * 36; i++) qkv[i] = frand();
    for (int i = 0; i < 2 * 5 * 12; i++) r[i] = frand();
    uint64_t b0 = slot_calls("attention_bwd");
    run_out a = run_qkv(IT_DTYPE_FP64, B, T, C, 3, qkv, r, true);
    CHECK_MSG(slot_calls("attention_bwd") == b0, "fp64: the fused backward ran");
    run_out b = run_qkv(IT_DTYPE_FP64, B, T, C, 3, qkv, r, false);
    compare("causal_self_attention fp64 (declined, composed)", &a, &b, false);
    CHECK_MSG(it_last_status() == IT_OK, "a declined fused call left an error behind: %s", it_last_error());
    run_free(&a);
    run_free(&b);
}

/* it_attention on q, k, v (B, T, H, D): q a transposed-storage view (not contiguous), k and v
 * slices of one buffer, as LLaMA's RoPE outputs and projections give them. */
static run_out run_qkv3(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, const float *h, const float *r_h,
                        bool fused) {
    run_out o = {0};
    if (!fused) setenv("IT_FUSED_KERNELS", "0", 1);
    it_scope_begin();
    int64_t sq[4] = {B, H, T, D}, skv[4] = {B, T, 2 * Hkv, D}, sy[3] = {B, T, H * D};
    it_tensor *qs = from(IT_DTYPE_FP32, 4, sq, h), *kv = from(IT_DTYPE_FP32, 4, skv, h + B * H * T * D);
    it_tensor *R = from(IT_DTYPE_FP32, 3, sy, r_h);
    CHECK_OK(it_tensor_set_requires_grad(qs, true));
    CHECK_OK(it_tensor_set_requires_grad(kv, true));
    it_tensor *q = it_transpose(qs, 1, 2); /* (B, T, H, D) over (B, H, T, D) storage */
    it_tensor *k = it_slice(kv, 2, 0, Hkv, 1), *v = it_slice(kv, 2, Hkv, 2 * Hkv, 1);
    it_tensor *y = it_attention(q, k, v);
    CHECK_MSG(y != NULL, "it_attention: %s", it_last_error());
    if (y) {
        CHECK_OK(it_backward(it_sum_all(it_mul(y, R))));
        o.b[0] = bytes_of(y, &o.n[0]);
        o.b[1] = bytes_of(it_tensor_grad(qs), &o.n[1]);
        o.b[2] = bytes_of(it_tensor_grad(kv), &o.n[2]);
        o.count = 3;
    }
    it_scope_end();
    unsetenv("IT_FUSED_KERNELS");
    return o;
}

static void test_qkv3(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
    char what[96];
    snprintf(what, sizeof what, "attention B=%lld T=%lld H=%lld Hkv=%lld D=%lld (views)", (long long)B, (long long)T,
             (long long)H, (long long)Hkv, (long long)D);
    int64_t n = B * T * (H + 2 * Hkv) * D, ny = B * T * H * D;
    float *h = malloc((size_t)n * sizeof(float)), *r = malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = frand() * 2.0f;
    for (int64_t i = 0; i < ny; i++) r[i] = frand();
    uint64_t f0 = slot_calls("attention_fwd");
    run_out fz = run_qkv3(B, T, H, Hkv, D, h, r, true);
    CHECK_MSG(slot_calls("attention_fwd") == f0 + 1, "%s: the fused forward did not run", what);
    run_out cp = run_qkv3(B, T, H, Hkv, D, h, r, false);
    compare(what, &fz, &cp, true);
    run_free(&fz);
    run_free(&cp);
    free(h);
    free(r);
}

/* A non-finite value in a masked key: the composition's 0 x Inf makes every row NaN; the
 * fused kernel, which skips masked blocks of keys (backends/cpu/softmax.c, causal_rows), keeps
 * the rows of the first block finite. It does so only where its products are an own
 * sgemm's (exact_products); through the BLAS its products are whole, as the composition's.
 * The last row sees the key and is not finite either way. */
static void test_masked_inf(void) {
    int64_t B = 1, T = 40, C = 16;
    float qkv[40 * 48];
    for (int i = 0; i < 40 * 48; i++) qkv[i] = frand();
    for (int d = 0; d < C; d++) qkv[(T - 1) * 3 * C + 2 * C + d] = INFINITY; /* v of the last token */
    for (int fused = 1; fused >= 0; fused--) {
        if (!fused) setenv("IT_FUSED_KERNELS", "0", 1);
        it_scope_begin();
        it_tensor *x = from(IT_DTYPE_FP32, 3, (int64_t[]){B, T, 3 * C}, qkv);
        it_tensor *y = it_causal_self_attention(x, 1);
        float h[40 * 16];
        CHECK_MSG(y && it_tensor_copy_to_host(y, h, sizeof h) == IT_OK, "attention: %s", it_last_error());
        bool first_finite = true, last_inf = true;
        for (int d = 0; d < C; d++) first_finite &= isfinite(h[d]), last_inf &= !isfinite(h[(T - 1) * C + d]);
        CHECK_MSG(last_inf, "%s: the row that sees the Inf key is finite", fused ? "fused" : "composed");
        CHECK_MSG(first_finite == (fused && exact_products()), "%s: row 0 is %s", fused ? "fused" : "composed",
                  first_finite ? "finite" : "not finite");
        it_scope_end();
        unsetenv("IT_FUSED_KERNELS");
    }
}

/* A contiguous (B, H, R, D) descriptor over p. */
static it_tdesc bhrd(float *p, int64_t B, int64_t H, int64_t R, int64_t D) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = p, d.dtype = IT_DTYPE_FP32, d.ndim = 4;
    int64_t sh[4] = {B, H, R, D}, st[4] = {H * R * D, R * D, D, 1};
    for (int i = 0; i < 4; i++) d.shape[i] = sh[i], d.strides[i] = st[i];
    return d;
}

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* got (fp32) against want (fp64) within tol of want's largest magnitude. */
static void near(const char *what, const float *got, const double *want, int64_t n, double tol) {
    double big = max_abs(want, n), err = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > err) err = fabs(got[i] - want[i]), worst = i;
    CHECK_MSG(err <= tol * big, "%s: off by %.3g at %lld (bound %.3g)", what, err, (long long)worst, tol * big);
}

/* The CPU's fused kernels called directly, with more keys than queries (S > T: the causal
 * mask's offset, which the ops never pass) and grouped kv heads, against an fp64 reference
 * computed here: the causal blocks' offsets are checked against the definition, not against
 * the kernel itself. Tolerance 1e-5 of each output's largest magnitude: fp32 products of at
 * most 37 terms and one softmax (seen: a few 1e-7). */
static void test_kernel_offset(int64_t T, int64_t S, int64_t H, int64_t Hkv, int64_t D) {
    char what[96];
    snprintf(what, sizeof what, "kernels T=%lld S=%lld H=%lld Hkv=%lld D=%lld causal", (long long)T, (long long)S,
             (long long)H, (long long)Hkv, (long long)D);
    int64_t nq = H * T * D, nk = Hkv * S * D, na = H * T * S, ne = H * S * D, r = H / Hkv, o = S - T;
    float *f = calloc((size_t)(3 * nq + 2 * nk + 2 * na + 2 * ne), sizeof(float));
    double *w = calloc((size_t)(2 * nq + 2 * ne + 2 * na), sizeof(double));
    if (!f || !w) {
        CHECK_MSG(false, "%s: out of memory", what);
        free(f), free(w);
        return;
    }
    float *q = f, *dy = q + nq, *y = dy + nq, *k = y + nq, *v = k + nk, *att = v + nk, *datt = att + na;
    float *dk = datt + na, *dv = dk + ne, *dq = y; /* dq overwrites y once y is checked */
    double *ry = w, *rdq = ry + nq, *rdk = rdq + nq, *rdv = rdk + ne, *ra = rdv + ne, *rda = ra + na;
    for (int64_t i = 0; i < nq; i++) q[i] = frand(), dy[i] = frand();
    for (int64_t i = 0; i < nk; i++) k[i] = frand(), v[i] = frand();
    double scale = 1.0 / sqrt((double)D);
    for (int64_t h = 0; h < H; h++) {
        const float *qh = q + h * T * D, *kh = k + h / r * S * D, *vh = v + h / r * S * D, *dyh = dy + h * T * D;
        double *a = ra + h * T * S, *da = rda + h * T * S;
        for (int64_t t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0, dot = 0;
            for (int64_t s = 0; s <= t + o; s++) {
                double z = 0;
                for (int64_t d = 0; d < D; d++) z += (double)qh[t * D + d] * kh[s * D + d];
                a[t * S + s] = z * scale;
                mx = a[t * S + s] > mx ? a[t * S + s] : mx;
            }
            for (int64_t s = 0; s <= t + o; s++) sum += a[t * S + s] = exp(a[t * S + s] - mx);
            for (int64_t s = 0; s <= t + o; s++) a[t * S + s] /= sum;
            for (int64_t s = 0; s <= t + o; s++) {
                double g = 0;
                for (int64_t d = 0; d < D; d++) g += (double)dyh[t * D + d] * vh[s * D + d];
                da[t * S + s] = g;
                dot += g * a[t * S + s];
            }
            for (int64_t s = 0; s <= t + o; s++) da[t * S + s] = scale * a[t * S + s] * (da[t * S + s] - dot);
            for (int64_t d = 0; d < D; d++) {
                double yv = 0, gq = 0;
                for (int64_t s = 0; s <= t + o; s++)
                    yv += a[t * S + s] * vh[s * D + d], gq += da[t * S + s] * kh[s * D + d];
                ry[h * T * D + t * D + d] = yv, rdq[h * T * D + t * D + d] = gq;
            }
        }
        for (int64_t s = 0; s < S; s++)
            for (int64_t d = 0; d < D; d++) {
                double gv = 0, gk = 0;
                for (int64_t t = 0; t < T; t++)
                    gv += a[t * S + s] * dyh[t * D + d], gk += da[t * S + s] * qh[t * D + d];
                rdv[h * S * D + s * D + d] = gv, rdk[h * S * D + s * D + d] = gk;
            }
    }
    const it_kernels *kt = it_cpu_kernels();
    it_softmax_args args = {(float)scale, true};
    it_tdesc dq_ = bhrd(q, 1, H, T, D), dk_ = bhrd(k, 1, Hkv, S, D), dv_ = bhrd(v, 1, Hkv, S, D);
    it_tdesc dy_ = bhrd(dy, 1, H, T, D), y_ = bhrd(y, 1, H, T, D), a_ = bhrd(att, 1, H, T, S);
    it_tdesc da_ = bhrd(datt, 1, H, T, S), gq_ = bhrd(dq, 1, H, T, D), gk_ = bhrd(dk, 1, H, S, D),
             gv_ = bhrd(dv, 1, H, S, D);
    CHECK_OK(kt->attention_fwd(NULL, &args, &dq_, &dk_, &dv_, &a_, &y_));
    char sub[128];
    snprintf(sub, sizeof sub, "%s: y", what);
    near(sub, y, ry, nq, 1e-5);
    snprintf(sub, sizeof sub, "%s: att", what);
    near(sub, att, ra, na, 1e-5);
    CHECK_OK(kt->attention_bwd(NULL, &args, &dq_, &dk_, &dv_, &a_, &dy_, &gq_, &gk_, &gv_, &da_));
    snprintf(sub, sizeof sub, "%s: datt", what);
    near(sub, datt, rda, na, 1e-5);
    snprintf(sub, sizeof sub, "%s: dq", what);
    near(sub, dq, rdq, nq, 1e-5);
    snprintf(sub, sizeof sub, "%s: dk", what);
    near(sub, dk, rdk, ne, 1e-5);
    snprintf(sub, sizeof sub, "%s: dv", what);
    near(sub, dv, rdv, ne, 1e-5);
    free(f);
    free(w);
}

/* Under bf16 autocast the ops round qkv (or q, k, v) once and copy the heads in bf16
 * (attention.c, attend_low). Reference: the composition as it was written before that, with
 * public ops: the heads copied out in fp32, each product's operands rounded by it_matmul's
 * autocast, the softmax in fp32, the merge in fp32. Output and gradients must be bitwise
 * equal: rounding commutes with a copy. `qkv3`: it_attention on (B, T, H, D) views, grouped
 * kv heads expanded in fp32 on both sides. */
static run_out run_autocast(bool qkv3, bool ref, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                            const float *h, const float *r_h) {
    run_out o = {0};
    it_scope_begin();
    int64_t C = H * D, sy[3] = {B, T, C};
    it_tensor *R = from(IT_DTYPE_FP32, 3, sy, r_h), *src = NULL, *kvsrc = NULL, *y = NULL;
    it_autocast_set(true, IT_DTYPE_BF16);
    int perm4[4] = {0, 2, 1, 3};
    if (!qkv3) {
        src = from(IT_DTYPE_FP32, 3, (int64_t[]){B, T, 3 * C}, h);
        CHECK_OK(it_tensor_set_requires_grad(src, true));
        if (!ref) {
            y = it_causal_self_attention(src, (int)H);
        } else {
            int perm5[5] = {2, 0, 3, 1, 4};
            it_tensor *heads = it_contiguous(it_permute(it_reshape(src, 5, (int64_t[]){B, T, 3, H, D}), perm5));
            int64_t s4[4] = {B, H, T, D};
            it_tensor *q = it_reshape(it_slice(heads, 0, 0, 1, 1), 4, s4);
            it_tensor *k = it_reshape(it_slice(heads, 0, 1, 2, 1), 4, s4);
            it_tensor *v = it_reshape(it_slice(heads, 0, 2, 3, 1), 4, s4);
            it_tensor *att = it_softmax(it_matmul(q, k, false, true), 1.0f / sqrtf((float)D), true);
            y = it_reshape(it_contiguous(it_permute(it_matmul(att, v, false, false), perm4)), 3, sy);
        }
    } else {
        src = from(IT_DTYPE_FP32, 4, (int64_t[]){B, H, T, D}, h);
        kvsrc = from(IT_DTYPE_FP32, 4, (int64_t[]){B, T, 2 * Hkv, D}, h + B * H * T * D);
        CHECK_OK(it_tensor_set_requires_grad(src, true));
        CHECK_OK(it_tensor_set_requires_grad(kvsrc, true));
        it_tensor *q = it_transpose(src, 1, 2);
        it_tensor *k = it_slice(kvsrc, 2, 0, Hkv, 1), *v = it_slice(kvsrc, 2, Hkv, 2 * Hkv, 1);
        if (!ref) {
            y = it_attention(q, k, v);
        } else {
            int64_t r = H / Hkv, s5[5] = {B, T, Hkv, 1, D}, e5[5] = {B, T, Hkv, r, D}, s4[4] = {B, T, H, D};
            it_tensor *kh = it_contiguous(it_permute(it_reshape(it_expand(it_reshape(k, 5, s5), 5, e5), 4, s4), perm4));
            it_tensor *vh = it_contiguous(it_permute(it_reshape(it_expand(it_reshape(v, 5, s5), 5, e5), 4, s4), perm4));
            it_tensor *qh = it_contiguous(it_permute(q, perm4));
            it_tensor *att = it_softmax(it_matmul(qh, kh, false, true), 1.0f / sqrtf((float)D), true);
            y = it_reshape(it_contiguous(it_permute(it_matmul(att, vh, false, false), perm4)), 3, sy);
        }
    }
    it_autocast_set(false, IT_DTYPE_BF16);
    CHECK_MSG(y != NULL, "attention under autocast: %s", it_last_error());
    if (y) {
        CHECK(it_tensor_dtype(y) == IT_DTYPE_FP32);
        CHECK_OK(it_backward(it_sum_all(it_mul(y, R))));
        o.b[0] = bytes_of(y, &o.n[0]);
        o.b[1] = bytes_of(it_tensor_grad(src), &o.n[1]);
        o.count = 2;
        if (kvsrc) o.b[2] = bytes_of(it_tensor_grad(kvsrc), &o.n[2]), o.count = 3;
    }
    it_scope_end();
    return o;
}

static void test_autocast(bool qkv3, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
    char what[128];
    snprintf(what, sizeof what, "%s under bf16 autocast B=%lld T=%lld H=%lld Hkv=%lld D=%lld",
             qkv3 ? "attention" : "causal_self_attention", (long long)B, (long long)T, (long long)H, (long long)Hkv,
             (long long)D);
    int64_t n = qkv3 ? B * T * (H + 2 * Hkv) * D : B * T * 3 * H * D, ny = B * T * H * D;
    float *h = malloc((size_t)n * sizeof(float)), *r = malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = frand() * 2.0f;
    for (int64_t i = 0; i < ny; i++) r[i] = frand();
    uint64_t c0 = slot_calls("cast");
    run_out got = run_autocast(qkv3, false, B, T, H, Hkv, D, h, r);
    uint64_t c1 = slot_calls("cast");
    run_out want = run_autocast(qkv3, true, B, T, H, Hkv, D, h, r);
    uint64_t c2 = slot_calls("cast");
    compare(what, &got, &want, false);
    /* GPT-2's qkv: one rounding for q, k and v each way instead of one per head tensor; q, k, v
     * apart: as many casts, of the same tensors, before the copies instead of after them */
    CHECK_MSG(qkv3 ? c1 - c0 == c2 - c1 : c1 - c0 < c2 - c1, "%s: %llu casts, the per-head composition %llu", what,
              (unsigned long long)(c1 - c0), (unsigned long long)(c2 - c1));
    run_free(&got);
    run_free(&want);
    free(h);
    free(r);
}

int main(void) {
    /* The fused attention slots (which keep the probabilities) and the composition: flash
     * attention, which the CPU backend also has and which is on by default, is kept out of the
     * way here (it is tested in test_flash_attention and e2e_flash). */
    it_flash_attention_set(false);
    cpu = it_device_cpu();
    printf("test_attention: fp32 products through %s\n",
           exact_products() ? "an own sgemm: bitwise comparisons" : "the BLAS: fp32 compared within FP32_TOL");
    test_qkv(2, 5, 12, 3);    /* hd 4 */
    test_qkv(1, 3, 4, 1);     /* one head */
    test_qkv(1, 1, 8, 2);     /* one token */
    test_qkv(2, 9, 30, 3);    /* hd 10: the last vector of each head's row is masked */
    test_qkv(2, 17, 96, 3);   /* hd 32, T not a multiple of the 4-row tiles */
    test_qkv(4, 64, 768, 12); /* GPT-2 124M's attention, T = 64 */
    test_qkv(1, 256, 128, 2); /* T = 256: scores through the packed path */
    test_fp64_composed();
    test_masked_inf();
    test_kernel_offset(20, 37, 4, 2, 8);  /* blocks of rows, 17 keys more than queries */
    test_kernel_offset(40, 40, 3, 1, 16); /* self-attention, one kv head */
    test_kernel_offset(5, 9, 2, 2, 4);    /* one block */
    test_qkv3(2, 7, 3, 3, 8);
    test_qkv3(1, 33, 2, 2, 20);
    /* grouped kv heads: the per-head gradients summed per group as the expand's backward does
     * (groups of 3 and 2 sum in order; 8 and 10 go through the reduce's 8 lanes) */
    test_qkv3(4, 64, 6, 2, 64); /* the LLaMA-3 and Mixtral cases' heads, T = 64 */
    test_qkv3(2, 9, 4, 2, 10);
    test_qkv3(1, 5, 8, 1, 4);
    test_qkv3(1, 6, 20, 2, 8);
    test_autocast(false, 2, 9, 3, 3, 4);
    test_autocast(false, 4, 64, 12, 12, 64); /* GPT-2 124M's */
    test_autocast(true, 2, 9, 4, 4, 8);      /* kv heads as many as query heads */
    test_autocast(true, 4, 64, 6, 2, 64);    /* grouped, the LLaMA-3 and Mixtral cases' */
    test_autocast(true, 1, 5, 8, 1, 4);
    return it_test_report("test_attention");
}
