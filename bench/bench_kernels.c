/* bench_kernels: the CPU backend's kernels one at a time, through it_cpu_kernels(), on the
 * shapes of one GPT-2 124M training step (B=4, T=64: B*T = 256 rows, C = 768, 12 heads of
 * 64, padded vocabulary 50304) and on its 124M-parameter AdamW update.
 *
 * Each kernel runs once untimed, then until it has run at least `min_reps` times and
 * `min_ms` milliseconds; the median and the best call time are reported, each with its
 * achieved rate (on a busy machine the best is the kernel's own speed, the median what a
 * step saw):
 * GFLOP/s for GEMMs (2*M*N*K per matrix, and the share of the large-sgemm peak measured at
 * the start), GB/s for memory-bound kernels (bytes = each input read once + each output
 * written once: the least traffic the kernel can do, so the figure is a lower bound on
 * what the memory system delivered).
 *
 * Usage: bench_kernels [--quick]     (--quick: fewer repetitions, for smoke tests) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "infinitrain/backend.h"

enum kind {
    K_GEMM,
    K_LN_FWD,
    K_LN_BWD,
    K_RMS_FWD,
    K_RMS_BWD,
    K_SM_FWD,
    K_SM_BWD,
    K_CE_FWD,
    K_CE_BWD,
    K_CE_LOW_FWD,
    K_CE_LOW_BWD,
    K_ADAM,
    K_ADAM_ROUND,
    K_GELU,
    K_GELU_BWD,
    K_ADD,
    K_SILU,
    K_SILU_BWD,
    K_MUL,
    K_SWIGLU,
    K_SWIGLU_BWD,
    K_COPY,
    K_CAST,
    K_ATT_FWD,
    K_ATT_BWD,
    K_FLASH_FWD,
    K_FLASH_BWD
};

/* One benchmark: a kernel call with its arguments (descriptors over buffers it owns). */
typedef struct kbench {
    enum kind kind;
    char name[48], shape[96];
    it_tdesc d[6];
    it_gemm_args g;
    it_softmax_args sm;
    it_adam_args adam;
    it_flash_args fa;
    int64_t valid; /* cross entropy */
    int64_t heads; /* attention */
    int max_reps;  /* timed calls at most (0: as min_reps and min_ms say) */
    void *buf[6];
    double flops, bytes; /* per call */
} kbench;

/* The (B, H, T, D) heads of GPT-2's layout for the attention kernels: d[0] qkv (B, T, 3C) ->
 * h[0..2] q, k, v; d[2] (B, T, C) -> h[3] (y or dy); d[3] dqkv (B, T, 3C) -> h[4], h[5] (dq, dk;
 * dv is h[4] moved by 2C). */
static void gpt2_heads(const kbench *b, it_tdesc h[6]) {
    const it_tdesc *d = b->d;
    int64_t H = b->heads, C = d[0].shape[2] / 3, D = C / H;
    const it_tdesc *src[6] = {&d[0], &d[0], &d[0], &d[2], &d[3], &d[3]};
    const int64_t col[6] = {0, C, 2 * C, 0, 0, C};
    for (int i = 0; i < 6; i++) {
        it_tdesc x = *src[i];
        x.data = (float *)x.data + col[i];
        x.ndim = 4;
        int64_t sh[4] = {x.shape[0], H, x.shape[1], D}, st[4] = {x.strides[0], D, x.strides[1], 1};
        for (int j = 0; j < 4; j++) x.shape[j] = sh[j], x.strides[j] = st[j];
        h[i] = x;
    }
}

static it_status kb_call(const it_kernels *k, kbench *b) {
    it_tdesc *d = b->d;
    switch (b->kind) {
    case K_GEMM: return k->gemm(NULL, &b->g);
    case K_LN_FWD: return k->layernorm_fwd(NULL, &d[0], &d[1], &d[2], 1e-5f, &d[3], &d[4], &d[5]);
    /* dy x w mean rstd -> dx dw db: dy reuses the y buffer of the forward layout */
    case K_LN_BWD: {
        it_tdesc dx = d[3], dw = d[1], db = d[2];
        dx.data = b->buf[5];
        dw.data = (float *)b->buf[5] + d[0].shape[0] * d[0].shape[1];
        db.data = (float *)dw.data + d[0].shape[1];
        return k->layernorm_bwd(NULL, &d[3], &d[0], &d[1], &d[4], &d[5], &dx, &dw, &db);
    }
    case K_RMS_FWD: return k->rmsnorm_fwd(NULL, &d[0], &d[1], 1e-5f, &d[2], &d[3]);
    case K_RMS_BWD: {
        it_tdesc dx = d[2], dw = d[1];
        dx.data = b->buf[5];
        dw.data = (float *)b->buf[5] + d[0].shape[0] * d[0].shape[1];
        return k->rmsnorm_bwd(NULL, &d[2], &d[0], &d[1], &d[3], &dx, &dw);
    }
    case K_SM_FWD: return k->softmax_fwd(NULL, &b->sm, &d[0], &d[1]);
    case K_SM_BWD: return k->softmax_bwd(NULL, &b->sm, &d[1], &d[0], &d[2]);
    case K_CE_FWD: return k->cross_entropy_fwd(NULL, &d[0], &d[1], b->valid, &d[2]);
    case K_CE_BWD: return k->cross_entropy_bwd(NULL, &d[0], &d[1], b->valid, &d[2], &d[3]);
    case K_CE_LOW_FWD: return k->cross_entropy_low_fwd(NULL, &d[0], &d[1], b->valid, &d[2]);
    case K_CE_LOW_BWD: return k->cross_entropy_low_bwd(NULL, &d[0], &d[1], b->valid, &d[2], &d[3]);
    case K_ADAM: return k->adam_step(NULL, &b->adam, &d[0], &d[1], &d[2], &d[3]);
    case K_ADAM_ROUND: return k->adam_step_round(NULL, &b->adam, &d[0], &d[1], &d[2], &d[3], &d[4]);
    case K_GELU: return k->unary(NULL, IT_UNARY_GELU, 0.0f, &d[0], &d[1]);
    case K_GELU_BWD: return k->binary(NULL, IT_BINARY_GELU_BWD, &d[0], &d[1], &d[2]);
    case K_ADD: return k->binary(NULL, IT_BINARY_ADD, &d[0], &d[1], &d[2]);
    case K_SILU: return k->unary(NULL, IT_UNARY_SILU, 0.0f, &d[0], &d[1]);
    case K_SILU_BWD: return k->binary(NULL, IT_BINARY_SILU_BWD, &d[0], &d[1], &d[2]);
    case K_MUL: return k->binary(NULL, IT_BINARY_MUL, &d[0], &d[1], &d[2]);
    case K_SWIGLU: return k->swiglu_low_fwd(NULL, &d[0], &d[1], &d[2]);
    case K_SWIGLU_BWD: return k->swiglu_low_bwd(NULL, &d[0], &d[1], &d[2], &d[3], &d[4]);
    case K_COPY: return k->copy_strided(NULL, &d[0], &d[1]);
    case K_CAST: return k->cast(NULL, &d[0], &d[1]);
    case K_ATT_FWD:
    case K_ATT_BWD: { /* d[0] qkv (B, T, 3C), d[1] att (B, H, T, T), d[2] y or dy (B, T, C), d[3] dqkv */
        int64_t C = d[0].shape[2] / 3;
        it_tdesc h[6];
        gpt2_heads(b, h);
        if (b->kind == K_ATT_FWD) return k->attention_fwd(NULL, &b->sm, &h[0], &h[1], &h[2], &d[1], &h[3]);
        it_tdesc dv = h[4], datt = d[1];
        dv.data = (float *)d[3].data + 2 * C;
        datt.data = b->buf[4];
        return k->attention_bwd(NULL, &b->sm, &h[0], &h[1], &h[2], &d[1], &h[3], &h[4], &h[5], &dv, &datt);
    }
    case K_FLASH_FWD:
    case K_FLASH_BWD: { /* d[0] qkv, d[1] lse (B, H, T), d[2] y (B, T, C), d[3] dqkv, buf[4] dy (B, T, C) */
        int64_t C = d[0].shape[2] / 3;
        it_tdesc h[6];
        gpt2_heads(b, h);
        if (b->kind == K_FLASH_FWD) return k->flash_attention_fwd(NULL, &b->fa, &h[0], &h[1], &h[2], &h[3], &d[1]);
        it_tdesc dy = h[3], dv = h[4];
        dy.data = b->buf[4];
        dv.data = (float *)d[3].data + 2 * C;
        return k->flash_attention_bwd(NULL, &b->fa, &h[0], &h[1], &h[2], &h[3], &dy, &d[1], &h[4], &h[5], &dv);
    }
    }
    return IT_ERR_INTERNAL;
}

static void kb_free(kbench *b) {
    for (int i = 0; i < 6; i++) free(b->buf[i]);
    memset(b->buf, 0, sizeof b->buf);
}

/* Buffer i of b: n floats of scale*U[-1,1). */
static float *kb_buf(kbench *b, int i, size_t n, float scale) {
    b->buf[i] = bench_alloc_floats(n, scale, 1000 + (uint64_t)i);
    return b->buf[i];
}

static int min_reps = 5;
static double min_ms = 250.0, peak_gflops = 0.0;

/* Time b and print its line; frees its buffers. Returns 0 on success. */
static int kb_run(kbench *b) {
    const it_kernels *k = it_cpu_kernels();
    if (kb_call(k, b)) { /* untimed: first-call effects (BLAS buffers, page faults) */
        fprintf(stderr, "%s %s: %s\n", b->name, b->shape, it_last_error());
        kb_free(b);
        return 1;
    }
    double times[1000];
    int n = 0;
    double t_start = bench_now_ms();
    while (n < 1000 && (b->max_reps == 0 || n < b->max_reps) && (n < min_reps || bench_now_ms() - t_start < min_ms)) {
        if (b->kind == K_ADAM || b->kind == K_ADAM_ROUND) b->adam.step++;
        double t0 = bench_now_ms();
        kb_call(k, b);
        times[n++] = bench_now_ms() - t0;
    }
    double med = bench_median(times, n), best = times[0]; /* sorted by bench_median */
    if (b->flops > 0) {
        double gf = b->flops / (med * 1e-3) / 1e9, gfb = b->flops / (best * 1e-3) / 1e9;
        printf("  %-24s %-30s %9.3f %9.3f %8.1f %8.1f GFLOP/s %4.0f%% %4.0f%%\n", b->name, b->shape, med, best, gf, gfb,
               100.0 * gf / peak_gflops, 100.0 * gfb / peak_gflops);
    } else {
        printf("  %-24s %-30s %9.3f %9.3f %8.2f %8.2f GB/s\n", b->name, b->shape, med, best,
               b->bytes / (med * 1e-3) / 1e9, b->bytes / (best * 1e-3) / 1e9);
    }
    fflush(stdout);
    kb_free(b);
    return 0;
}

/* C (batch, M, N) = op(A) op(B) (+ C when accumulate), with A, B stored as BLAS sees them. */
static int bench_gemm(const char *name, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                      bool accumulate) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = K_GEMM;
    snprintf(b.name, sizeof b.name, "%s", name);
    char mnk[48];
    snprintf(mnk, sizeof mnk, "%lldx%lldx%lld%s%s%s", (long long)M, (long long)N, (long long)K, ta ? " tA" : "",
             tb ? " tB" : "", accumulate ? " +=" : "");
    if (batch > 1)
        snprintf(b.shape, sizeof b.shape, "%lld x [%s]", (long long)batch, mnk);
    else
        snprintf(b.shape, sizeof b.shape, "%s", mnk);
    int64_t sa[3] = {batch, ta ? K : M, ta ? M : K}, sb[3] = {batch, tb ? N : K, tb ? K : N}, sc[3] = {batch, M, N};
    float *a = kb_buf(&b, 0, (size_t)(batch * M * K), 0.5f), *bb = kb_buf(&b, 1, (size_t)(batch * K * N), 0.5f);
    float *c = kb_buf(&b, 2, (size_t)(batch * M * N), 0.5f);
    if (!a || !bb || !c) {
        kb_free(&b);
        fprintf(stderr, "%s: out of memory\n", name);
        return 1;
    }
    b.g.a = bench_desc(a, IT_DTYPE_FP32, 3, sa);
    b.g.b = bench_desc(bb, IT_DTYPE_FP32, 3, sb);
    b.g.c = bench_desc(c, IT_DTYPE_FP32, 3, sc);
    b.g.trans_a = ta;
    b.g.trans_b = tb;
    b.g.alpha = 1.0f;
    b.g.beta = accumulate ? 1.0f : 0.0f;
    b.flops = 2.0 * (double)batch * (double)M * (double)N * (double)K;
    return kb_run(&b);
}

/* A linear layer x (R, IC) -> y (R, OC) with weight w (OC, IC), as src/ops/matmul.c issues it:
 *   forward  y  = x w^T          (R, OC, IC)  trans_b
 *   backward dx = dy w           (R, IC, OC)
 *            dw += dy^T x        (OC, IC, R)  trans_a, accumulated into the gradient buffer */
static int bench_linear(const char *layer, int64_t R, int64_t IC, int64_t OC) {
    char n[48];
    int fails = 0;
    snprintf(n, sizeof n, "%s fwd", layer);
    fails += bench_gemm(n, 1, R, OC, IC, false, true, false);
    snprintf(n, sizeof n, "%s bwd dx", layer);
    fails += bench_gemm(n, 1, R, IC, OC, false, false, false);
    snprintf(n, sizeof n, "%s bwd dw", layer);
    fails += bench_gemm(n, 1, OC, IC, R, true, false, true);
    return fails;
}

/* Attention's batched GEMMs for (B*nh) heads of T x hd:
 *   scores = q k^T (T, T, hd) tB; y = att v (T, hd, T); and the backward products
 *   datt = dy v^T (T, T, hd) tB; dv = att^T dy (T, hd, T) tA; dq = ds k (T, hd, T);
 *   dk = ds^T q (T, hd, T) tA. */
static int bench_attention(int64_t BH, int64_t T, int64_t hd) {
    int fails = 0;
    char n[48];
    snprintf(n, sizeof n, "attn q@k^T T=%lld", (long long)T);
    fails += bench_gemm(n, BH, T, T, hd, false, true, false);
    snprintf(n, sizeof n, "attn att@v T=%lld", (long long)T);
    fails += bench_gemm(n, BH, T, hd, T, false, false, false);
    snprintf(n, sizeof n, "attn bwd ds@k T=%lld", (long long)T);
    fails += bench_gemm(n, BH, T, hd, T, false, false, false);
    snprintf(n, sizeof n, "attn bwd att^T@dy T=%lld", (long long)T);
    fails += bench_gemm(n, BH, T, hd, T, true, false, false);
    return fails;
}

/* The fused attention slots on GPT-2's layout: the heads read where they lie in qkv (B, T, 3C),
 * y written into (B, T, C); the backward writes dqkv the same way. What the composition does
 * instead is the split and merge copies, the four or six GEMMs above and the softmax. */
static int bench_fused_attention(bool bwd, int64_t B, int64_t T, int64_t H, int64_t D) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = bwd ? K_ATT_BWD : K_ATT_FWD;
    snprintf(b.name, sizeof b.name, "attention %s (fused)", bwd ? "bwd" : "fwd");
    snprintf(b.shape, sizeof b.shape, "B%lld H%lld T%lld D%lld causal", (long long)B, (long long)H, (long long)T,
             (long long)D);
    int64_t C = H * D, sq[3] = {B, T, 3 * C}, sa[4] = {B, H, T, T}, sy[3] = {B, T, C};
    float *qkv = kb_buf(&b, 0, (size_t)(B * T * 3 * C), 0.5f), *att = kb_buf(&b, 1, (size_t)(B * H * T * T), 0.0f);
    float *y = kb_buf(&b, 2, (size_t)(B * T * C), 0.5f), *dqkv = kb_buf(&b, 3, (size_t)(B * T * 3 * C), 0.0f);
    float *datt = kb_buf(&b, 4, (size_t)(B * H * T * T), 0.0f);
    if (!qkv || !att || !y || !dqkv || !datt) {
        kb_free(&b);
        fprintf(stderr, "fused attention: out of memory\n");
        return 1;
    }
    b.d[0] = bench_desc(qkv, IT_DTYPE_FP32, 3, sq);
    b.d[1] = bench_desc(att, IT_DTYPE_FP32, 4, sa);
    b.d[2] = bench_desc(y, IT_DTYPE_FP32, 3, sy);
    b.d[3] = bench_desc(dqkv, IT_DTYPE_FP32, 3, sq);
    b.heads = H;
    b.sm = (it_softmax_args){1.0f / sqrtf((float)D), true};
    if (bwd) { /* att as the forward leaves it */
        b.kind = K_ATT_FWD;
        if (kb_call(it_cpu_kernels(), &b)) {
            fprintf(stderr, "fused attention: %s\n", it_last_error());
            kb_free(&b);
            return 1;
        }
        b.kind = K_ATT_BWD;
    }
    /* the composition's products, masked half included (the CPU's kernel skips most of that
     * half: its rate here is the composition's work per second) */
    b.flops = (bwd ? 4.0 : 2.0) * 2.0 * (double)(B * H) * (double)T * (double)T * (double)D;
    return kb_run(&b);
}

/* Flash attention on GPT-2's layout, as the fused slots above read it (the heads in place in
 * qkv, y into (B, T, C)), with lse (B, H, T): nothing of T x S is kept, so T reaches 8192.
 * FLOPs as FlashAttention-2 counts them: the forward's two products, 4 B H T^2 D, halved for
 * causal; the backward 2.5 times that (its five products; the CPU kernel runs seven, as its
 * dq pass recomputes S and dP: see backends/cpu/flash_attention.c). max_reps caps the timed
 * calls of the long ones. */
static int bench_flash(bool bwd, int64_t B, int64_t T, int64_t H, int64_t D, int max_reps) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = bwd ? K_FLASH_BWD : K_FLASH_FWD;
    snprintf(b.name, sizeof b.name, "flash attention %s", bwd ? "bwd" : "fwd");
    snprintf(b.shape, sizeof b.shape, "B%lld H%lld T%lld D%lld causal", (long long)B, (long long)H, (long long)T,
             (long long)D);
    int64_t C = H * D, sq[3] = {B, T, 3 * C}, sl[3] = {B, H, T}, sy[3] = {B, T, C};
    float *qkv = kb_buf(&b, 0, (size_t)(B * T * 3 * C), 0.5f), *lse = kb_buf(&b, 1, (size_t)(B * H * T), 0.0f);
    float *y = kb_buf(&b, 2, (size_t)(B * T * C), 0.0f), *dqkv = kb_buf(&b, 3, (size_t)(B * T * 3 * C), 0.0f);
    float *dy = kb_buf(&b, 4, (size_t)(B * T * C), 0.5f);
    if (!qkv || !lse || !y || !dqkv || !dy) {
        kb_free(&b);
        fprintf(stderr, "flash attention: out of memory\n");
        return 1;
    }
    b.d[0] = bench_desc(qkv, IT_DTYPE_FP32, 3, sq);
    b.d[1] = bench_desc(lse, IT_DTYPE_FP32, 3, sl);
    b.d[2] = bench_desc(y, IT_DTYPE_FP32, 3, sy);
    b.d[3] = bench_desc(dqkv, IT_DTYPE_FP32, 3, sq);
    b.heads = H;
    b.max_reps = max_reps;
    b.fa = (it_flash_args){1.0f / sqrtf((float)D), true, 0};
    if (bwd) { /* y and lse as the forward leaves them */
        b.kind = K_FLASH_FWD;
        if (kb_call(it_cpu_kernels(), &b)) {
            fprintf(stderr, "flash attention: %s\n", it_last_error());
            kb_free(&b);
            return 1;
        }
        b.kind = K_FLASH_BWD;
    }
    b.flops = (bwd ? 2.5 : 1.0) * 4.0 * (double)(B * H) * (double)T * (double)T * (double)D / 2.0;
    return kb_run(&b);
}

static int bench_norm(bool rms, bool bwd, int64_t R, int64_t C) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = rms ? (bwd ? K_RMS_BWD : K_RMS_FWD) : (bwd ? K_LN_BWD : K_LN_FWD);
    snprintf(b.name, sizeof b.name, "%s %s", rms ? "rmsnorm" : "layernorm", bwd ? "bwd" : "fwd");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld)", (long long)R, (long long)C);
    int64_t sx[2] = {R, C}, sw[1] = {C}, sr[1] = {R};
    float *x = kb_buf(&b, 0, (size_t)(R * C), 1.0f), *w = kb_buf(&b, 1, (size_t)C, 1.0f);
    float *bias = kb_buf(&b, 2, (size_t)C, 0.1f), *y = kb_buf(&b, 3, (size_t)(R * C), 1.0f);
    float *st = kb_buf(&b, 4, (size_t)(2 * R), 0.5f), *out = kb_buf(&b, 5, (size_t)(R * C + 2 * C), 0.0f);
    if (!x || !w || !bias || !y || !st || !out) {
        kb_free(&b);
        return 1;
    }
    for (int64_t r = 0; r < 2 * R; r++) st[r] = 1.0f + 0.5f * st[r]; /* rstd > 0 */
    b.d[0] = bench_desc(x, IT_DTYPE_FP32, 2, sx);
    b.d[1] = bench_desc(w, IT_DTYPE_FP32, 1, sw);
    if (rms) {
        b.d[2] = bench_desc(y, IT_DTYPE_FP32, 2, sx);
        b.d[3] = bench_desc(st, IT_DTYPE_FP32, 1, sr);
    } else {
        b.d[2] = bench_desc(bias, IT_DTYPE_FP32, 1, sw);
        b.d[3] = bench_desc(y, IT_DTYPE_FP32, 2, sx);
        b.d[4] = bench_desc(st, IT_DTYPE_FP32, 1, sr);
        b.d[5] = bench_desc(st + R, IT_DTYPE_FP32, 1, sr);
    }
    double rc = (double)R * (double)C * 4.0;
    /* fwd: x in, y out; bwd: dy and x in, dx out (the (R) and (C) vectors are noise) */
    b.bytes = bwd ? 3.0 * rc : 2.0 * rc;
    return kb_run(&b);
}

/* Causal softmax over (BH, T, T) attention scores, scaled by 1/sqrt(64). */
static int bench_softmax(bool bwd, int64_t BH, int64_t T) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = bwd ? K_SM_BWD : K_SM_FWD;
    snprintf(b.name, sizeof b.name, "softmax causal %s", bwd ? "bwd" : "fwd");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld, %lld)", (long long)BH, (long long)T, (long long)T);
    int64_t s[3] = {BH, T, T};
    size_t n = (size_t)(BH * T * T);
    float *x = kb_buf(&b, 0, n, 2.0f), *y = kb_buf(&b, 1, n, 0.0f), *dx = kb_buf(&b, 2, n, 0.0f);
    if (!x || !y || !dx) {
        kb_free(&b);
        return 1;
    }
    b.d[0] = bench_desc(x, IT_DTYPE_FP32, 3, s);
    b.d[1] = bench_desc(y, IT_DTYPE_FP32, 3, s);
    b.d[2] = bench_desc(dx, IT_DTYPE_FP32, 3, s);
    b.sm.scale = 0.125f;
    b.sm.causal = true;
    if (bwd && it_cpu_kernels()->softmax_fwd(NULL, &b.sm, &b.d[0], &b.d[1])) { /* y: real probabilities */
        kb_free(&b);
        return 1;
    }
    b.bytes = (bwd ? 3.0 : 2.0) * (double)n * 4.0;
    return kb_run(&b);
}

/* Cross entropy over (N, Vp) logits, the first V columns valid; `low`: bf16 logits (and
 * dlogits) through the fused cross_entropy_low_* slots, autocast's LM head (an fp32 buffer
 * holds them, its values rounded in place as bench_elementwise's are). */
static int bench_ce(bool bwd, bool low, int64_t N, int64_t V, int64_t Vp) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = low ? (bwd ? K_CE_LOW_BWD : K_CE_LOW_FWD) : bwd ? K_CE_BWD : K_CE_FWD;
    snprintf(b.name, sizeof b.name, "cross_entropy%s %s%s", low ? "_low" : "", bwd ? "bwd" : "fwd",
             low ? ", bf16" : "");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld) valid %lld", (long long)N, (long long)Vp, (long long)V);
    int64_t sl[2] = {N, Vp}, sn[1] = {N};
    float *logits = kb_buf(&b, 0, (size_t)(N * Vp), 3.0f), *losses = kb_buf(&b, 2, (size_t)N, 1.0f / (float)N);
    float *dlogits = kb_buf(&b, 3, (size_t)(N * Vp), 0.0f);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
    b.buf[1] = tg;
    if (!logits || !losses || !dlogits || !tg) {
        kb_free(&b);
        return 1;
    }
    uint64_t rs = 7;
    for (int64_t i = 0; i < N; i++) tg[i] = (int32_t)(bench_rng_next(&rs) % (uint64_t)V);
    for (size_t i = 0; low && i < (size_t)(N * Vp); i++) { /* ascending: half i lands where float i/2 was read */
        uint16_t h = it_fp32_to_bf16(logits[i]);
        memcpy((char *)logits + 2 * i, &h, 2);
    }
    it_dtype lt = low ? IT_DTYPE_BF16 : IT_DTYPE_FP32;
    b.d[0] = bench_desc(logits, lt, 2, sl);
    b.d[1] = bench_desc(tg, IT_DTYPE_I32, 1, sn);
    b.d[2] = bench_desc(losses, IT_DTYPE_FP32, 1, sn);
    b.d[3] = bench_desc(dlogits, lt, 2, sl);
    b.valid = V;
    b.bytes = (bwd ? 2.0 : 1.0) * (double)N * (double)Vp * (double)it_dtype_size(lt);
    return kb_run(&b);
}

/* AdamW on n parameters: p, g, m, v read, p, m, v written; with `round`, adam_step_round's
 * bf16 copy of p written too (autocast's weights). */
static int bench_adam(int64_t n, bool round) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = round ? K_ADAM_ROUND : K_ADAM;
    snprintf(b.name, sizeof b.name, round ? "adam_step_round (AdamW, bf16)" : "adam_step (AdamW)");
    snprintf(b.shape, sizeof b.shape, "%lld params", (long long)n);
    int64_t s[1] = {n};
    float *p = kb_buf(&b, 0, (size_t)n, 0.02f), *g = kb_buf(&b, 1, (size_t)n, 1e-3f);
    float *m = kb_buf(&b, 2, (size_t)n, 0.0f), *v = kb_buf(&b, 3, (size_t)n, 0.0f);
    if (!p || !g || !m || !v) {
        kb_free(&b);
        fprintf(stderr, "adam_step: out of memory\n");
        return 1;
    }
    for (int i = 0; i < 4; i++) b.d[i] = bench_desc(b.buf[i], IT_DTYPE_FP32, 1, s);
    if (round) {
        float *low = kb_buf(&b, 4, (size_t)(n + 1) / 2, 0.0f); /* n bf16 */
        if (!low) {
            kb_free(&b);
            fprintf(stderr, "adam_step_round: out of memory\n");
            return 1;
        }
        b.d[4] = bench_desc(low, IT_DTYPE_BF16, 1, s);
    }
    b.adam = (it_adam_args){.lr = 1e-4f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.1f,
                            .grad_scale = 1.0f,
                            .step = 1,
                            .decoupled = true};
    b.bytes = 7.0 * (double)n * 4.0 + (round ? 2.0 * (double)n : 0.0);
    int save = min_reps;
    min_reps = 3; /* each call moves ~3.5 GB */
    int r = kb_run(&b);
    min_reps = save;
    return r;
}

/* Elementwise kernels of the MLP and residual stream: GELU fwd/bwd on (R, 4C), x + y on
 * (R, C); in bf16 too, as autocast runs them on bf16 products (an fp32 buffer of n floats
 * holds the bf16 operand: its first n halves, the floats' values rounded in place, so the
 * inputs are the same numbers as the fp32 rows', not random bit patterns). */
static int bench_elementwise(enum kind kind, it_dtype dt, int64_t R, int64_t C) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = kind;
    snprintf(b.name, sizeof b.name, "%s",
             kind == K_GELU       ? "gelu fwd (unary)"
             : kind == K_GELU_BWD ? "gelu bwd (binary)"
                                  : "add (binary)");
    if (dt == IT_DTYPE_BF16) snprintf(b.name + strlen(b.name), sizeof b.name - strlen(b.name), ", bf16");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld)", (long long)R, (long long)C);
    int64_t s[2] = {R, C};
    size_t n = (size_t)(R * C);
    float *x = kb_buf(&b, 0, n, 2.0f), *y = kb_buf(&b, 1, n, 1.0f), *z = kb_buf(&b, 2, n, 0.0f);
    if (!x || !y || !z) {
        kb_free(&b);
        return 1;
    }
    float *bufs[3] = {x, y, z};
    for (int q = 0; dt == IT_DTYPE_BF16 && q < 3; q++) /* ascending: half i lands where float i/2 was read */
        for (size_t i = 0; i < n; i++) {
            uint16_t h = it_fp32_to_bf16(bufs[q][i]);
            memcpy((char *)bufs[q] + 2 * i, &h, 2);
        }
    b.d[0] = bench_desc(x, dt, 2, s);
    b.d[1] = bench_desc(kind == K_GELU ? z : y, dt, 2, s);
    b.d[2] = bench_desc(z, dt, 2, s);
    b.bytes = (kind == K_GELU ? 2.0 : 3.0) * (double)n * (double)it_dtype_size(dt);
    return kb_run(&b);
}

/* LLaMA's / Mixtral's SwiGLU on (R, F) products: the fp32 pieces the widened composition runs
 * (silu, mul, silu_bwd; the casts around them are the cast rows below) and the fused bf16
 * slots that replace them with their casts (fwd: a, b -> y; bwd: a, b, dy -> da, db). */
static int bench_swiglu(enum kind kind, int64_t R, int64_t F) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = kind;
    bool fused = kind == K_SWIGLU || kind == K_SWIGLU_BWD;
    it_dtype dt = fused ? IT_DTYPE_BF16 : IT_DTYPE_FP32;
    snprintf(b.name, sizeof b.name, "%s",
             kind == K_SILU       ? "silu fwd (unary)"
             : kind == K_SILU_BWD ? "silu bwd (binary)"
             : kind == K_MUL      ? "mul (binary)"
             : kind == K_SWIGLU   ? "swiglu_low fwd, bf16"
                                  : "swiglu_low bwd, bf16");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld)", (long long)R, (long long)F);
    int64_t s[2] = {R, F};
    size_t n = (size_t)(R * F);
    int nops = kind == K_SILU ? 2 : kind == K_SWIGLU_BWD ? 5 : 3;
    for (int i = 0; i < nops; i++) {
        float *x = kb_buf(&b, i, n, i < 2 ? 3.0f : 1.0f);
        if (!x) {
            kb_free(&b);
            return 1;
        }
        if (fused) /* ascending: half j lands where float j/2 was read */
            for (size_t j = 0; j < n; j++) {
                uint16_t h = it_fp32_to_bf16(x[j]);
                memcpy((char *)x + 2 * j, &h, 2);
            }
        b.d[i] = bench_desc(x, dt, 2, s);
    }
    b.bytes = (double)nops * (double)n * (double)it_dtype_size(dt);
    return kb_run(&b);
}

/* GPT-2 attention's head split: qkv (B, T, 3, nh, hd) permuted to (3, B, nh, T, hd) and
 * made contiguous (src/ops/attention.c), and the merge (B, nh, T, hd) -> (B, T, nh, hd). */
/* Autocast's roundings: a contiguous (R, C) cast between fp32 and bf16 (an fp32 buffer of
 * n floats holds the bf16 side too; its contents are rounded values either way). */
static int bench_cast(bool to_bf16, int64_t R, int64_t C) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = K_CAST;
    snprintf(b.name, sizeof b.name, "cast %s", to_bf16 ? "fp32 -> bf16" : "bf16 -> fp32");
    snprintf(b.shape, sizeof b.shape, "(%lld, %lld)", (long long)R, (long long)C);
    int64_t s[2] = {R, C};
    size_t n = (size_t)(R * C);
    float *f = kb_buf(&b, 0, n, 1.0f), *h = kb_buf(&b, 1, n, 1.0f);
    if (!f || !h) {
        kb_free(&b);
        return 1;
    }
    it_tdesc fd = bench_desc(f, IT_DTYPE_FP32, 2, s), hd = bench_desc(h, IT_DTYPE_BF16, 2, s);
    b.d[0] = to_bf16 ? fd : hd;
    b.d[1] = to_bf16 ? hd : fd;
    b.bytes = 6.0 * (double)n;
    return kb_run(&b);
}

static int bench_copy(bool split, int64_t B, int64_t T, int64_t nh, int64_t hd) {
    kbench b;
    memset(&b, 0, sizeof b);
    b.kind = K_COPY;
    snprintf(b.name, sizeof b.name, "copy_strided %s", split ? "qkv split" : "head merge");
    int64_t parts = split ? 3 : 1;
    size_t n = (size_t)(parts * B * T * nh * hd);
    float *src = kb_buf(&b, 0, n, 1.0f), *dst = kb_buf(&b, 1, n, 0.0f);
    if (!src || !dst) {
        kb_free(&b);
        return 1;
    }
    if (split) {
        snprintf(b.shape, sizeof b.shape, "(%lld,%lld,3,%lld,%lld)->(3,B,nh,T,hd)", (long long)B, (long long)T,
                 (long long)nh, (long long)hd);
        /* source viewed as (3, B, nh, T, hd) over storage (B, T, 3, nh, hd) */
        int64_t shape[5] = {3, B, nh, T, hd};
        b.d[0] = bench_desc(src, IT_DTYPE_FP32, 5, shape);
        int64_t st[5] = {nh * hd, T * 3 * nh * hd, hd, 3 * nh * hd, 1};
        memcpy(b.d[0].strides, st, sizeof st);
        b.d[1] = bench_desc(dst, IT_DTYPE_FP32, 5, shape);
    } else {
        snprintf(b.shape, sizeof b.shape, "(%lld,%lld,%lld,%lld)->(B,T,nh,hd)", (long long)B, (long long)nh,
                 (long long)T, (long long)hd);
        int64_t shape[4] = {B, T, nh, hd};
        b.d[0] = bench_desc(src, IT_DTYPE_FP32, 4, shape);
        int64_t st[4] = {nh * T * hd, hd, T * hd, 1};
        memcpy(b.d[0].strides, st, sizeof st);
        b.d[1] = bench_desc(dst, IT_DTYPE_FP32, 4, shape);
    }
    b.bytes = 2.0 * (double)n * 4.0;
    return kb_run(&b);
}

/* Best-of-`reps` GFLOP/s of one n x n x n product of bf16 matrices (bf16 C, fp32 sums)
 * through the gemm slot, after one untimed call: the bf16 GEMM peak bf16 MFU is taken
 * against. 0 on failure (message printed). */
static double bf16_gemm_peak(int64_t n, int reps) {
    size_t cnt = (size_t)(n * n);
    uint16_t *m[3] = {malloc(cnt * 2), malloc(cnt * 2), malloc(cnt * 2)};
    double best = 1e300;
    if (m[0] && m[1] && m[2]) {
        for (int q = 0; q < 3; q++)
            for (size_t e = 0; e < cnt; e++)
                m[q][e] = it_fp32_to_bf16((float)((e * 2654435761u + (unsigned)q) % 997) / 997.0f);
        int64_t sh[3] = {1, n, n};
        it_gemm_args g;
        memset(&g, 0, sizeof g);
        g.a = bench_desc(m[0], IT_DTYPE_BF16, 3, sh);
        g.b = bench_desc(m[1], IT_DTYPE_BF16, 3, sh);
        g.c = bench_desc(m[2], IT_DTYPE_BF16, 3, sh);
        g.alpha = 1.0f;
        for (int r = 0; r <= reps; r++) {
            double t0 = bench_now_ms();
            if (it_cpu_kernels()->gemm(NULL, &g)) {
                fprintf(stderr, "bf16 gemm peak: %s\n", it_last_error());
                best = 1e300;
                break;
            }
            double ms = bench_now_ms() - t0;
            if (r > 0 && ms < best) best = ms;
        }
    }
    for (int q = 0; q < 3; q++) free(m[q]);
    return best >= 1e300 ? 0.0 : 2.0 * (double)n * (double)n * (double)n / (best * 1e-3) / 1e9;
}

/* The best of a 2048^3 (5 calls) and a 1024^3 (20 calls) bf16 product, as the fp32 peak. */
static double bf16_gemm_peaks(void) {
    double p = bf16_gemm_peak(2048, 5), q = bf16_gemm_peak(1024, 20);
    return p > q ? p : q;
}

int main(int argc, char **argv) {
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
            min_reps = 2;
            min_ms = 20.0;
        } else if (strcmp(argv[i], "--bf16-peak") == 0) { /* make bench's bf16 line: the peak alone */
            int isa = it_cpu_sbgemm_isa();
            if (isa == IT_CPU_SBGEMM_FP32) {
                printf("BF16PEAK gflops=0 kernel=none\n");
                return 0;
            }
            double p = bf16_gemm_peaks();
            printf("BF16PEAK gflops=%.2f threads=%d kernel=%s%s%s\n", p, omp_get_max_threads(), it_cpu_sbgemm_name(isa),
                   isa == IT_CPU_SBGEMM_ONEDNN ? ":" : "",
                   isa == IT_CPU_SBGEMM_ONEDNN ? it_cpu_onednn_bf16_impl() : "");
            return p > 0 ? 0 : 1;
        } else {
            fprintf(stderr, "usage: %s [--quick | --bf16-peak]\n", argv[0]);
            return 2;
        }
    }
    const int64_t B = 4, T = 64, R = B * T, C = 768, NH = 12, HD = 64, V = 50257, VP = 50304, L = 12;
    const int64_t params = VP * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C; /* GPT-2 124M: 124475904 */
    double one = 0;
    peak_gflops = bench_gemm_peaks(&one);
    printf("== CPU kernels, one at a time (it_cpu_kernels(); %d OpenMP threads; load %.2f) ==\n", omp_get_max_threads(),
           bench_loadavg());
    printf("fp32 GEMM peak: %.1f GFLOP/s with %d threads (best 2048^3 / 1024^3 sgemm through the gemm slot); one "
           "thread: %.1f\nfp32 gemm runs on %s\n",
           peak_gflops, omp_get_max_threads(), one, bench_sgemm_name());
    if (peak_gflops <= 0) return 1;
    if (it_cpu_sbgemm_isa() != IT_CPU_SBGEMM_FP32) {
        int isa = it_cpu_sbgemm_isa();
        double bp = bf16_gemm_peaks();
        printf("bf16 GEMM peak: %.1f GFLOP/s with %d threads (best 2048^3 / 1024^3 bf16 product, fp32 sums, through "
               "the gemm slot, on %s%s%s): %.2fx the fp32 peak\n",
               bp, omp_get_max_threads(), it_cpu_sbgemm_name(isa), isa == IT_CPU_SBGEMM_ONEDNN ? " " : "",
               isa == IT_CPU_SBGEMM_ONEDNN ? it_cpu_onednn_bf16_impl() : "", bp / peak_gflops);
    } else
        printf("bf16 GEMM peak: not measured: no avx512_bf16/amx\n");
    printf("  %-24s %-30s %9s %9s %8s %8s %-7s %s\n", "kernel", "shape", "ms med", "ms best", "med", "best", "rate",
           "of peak (med, best)");
    int fails = 0;
    printf("-- GPT-2 124M linear layers, B*T = %lld (M x N x K; dw accumulates into the gradient)\n", (long long)R);
    fails += bench_linear("qkv", R, C, 3 * C);
    fails += bench_linear("attn proj", R, C, C);
    fails += bench_linear("fc", R, C, 4 * C);
    fails += bench_linear("fc proj", R, 4 * C, C);
    fails += bench_linear("lm_head", R, C, VP);
    printf("-- attention's batched GEMMs, B*nh = %lld heads of hd = %lld\n", (long long)(B * NH), (long long)HD);
    fails += bench_attention(B * NH, T, HD);
    fails += bench_attention(B * NH, 256, HD);
    printf("-- the fused attention slots (heads read in place in qkv; the composition is the GEMMs above, the softmax\n"
           "   and the head split / merge copies below)\n");
    fails += bench_fused_attention(false, B, T, NH, HD);
    fails += bench_fused_attention(true, B, T, NH, HD);
    fails += bench_fused_attention(false, B, 256, NH, HD);
    fails += bench_fused_attention(true, B, 256, NH, HD);
    printf("-- flash attention (heads in place in qkv as above, lse (B, H, T); nothing of T x S kept). GFLOP/s by\n"
           "   FlashAttention-2's count: fwd 4 B H T^2 D / 2 (causal), bwd 2.5x fwd; %% of the fp32 GEMM peak\n");
    fails += bench_flash(false, B, 1024, NH, HD, quick ? 2 : 0);
    fails += bench_flash(true, B, 1024, NH, HD, quick ? 2 : 0);
    for (int64_t t = 1024; t <= (quick ? 2048 : 8192); t *= 2) { /* one sequence: the cost grows as T^2 */
        fails += bench_flash(false, 1, t, NH, HD, quick ? 1 : t >= 4096 ? 2 : 0);
        fails += bench_flash(true, 1, t, NH, HD, quick ? 1 : t >= 4096 ? 2 : 0);
    }
    printf("-- memory-bound kernels (GB/s = least bytes moved / time)\n");
    fails += bench_norm(false, false, R, C);
    fails += bench_norm(false, true, R, C);
    fails += bench_norm(true, false, R, C);
    fails += bench_norm(true, true, R, C);
    fails += bench_softmax(false, B * NH, T);
    fails += bench_softmax(true, B * NH, T);
    fails += bench_softmax(false, B * NH, 256);
    fails += bench_softmax(true, B * NH, 256);
    fails += bench_ce(false, false, R, V, VP);
    fails += bench_ce(true, false, R, V, VP);
    fails += bench_ce(false, true, R, V, VP);
    fails += bench_ce(true, true, R, V, VP);
    fails += bench_elementwise(K_GELU, IT_DTYPE_FP32, R, 4 * C);
    fails += bench_elementwise(K_GELU_BWD, IT_DTYPE_FP32, R, 4 * C);
    fails += bench_elementwise(K_ADD, IT_DTYPE_FP32, R, C);
    fails += bench_elementwise(K_GELU, IT_DTYPE_BF16, R, 4 * C);
    fails += bench_elementwise(K_GELU_BWD, IT_DTYPE_BF16, R, 4 * C);
    fails += bench_elementwise(K_ADD, IT_DTYPE_BF16, B * NH * T, T); /* attention's scores */
    fails += bench_swiglu(K_SILU, 2048, 768);                        /* Mixtral 6L/384's experts, B=4 T=256 top-2 */
    fails += bench_swiglu(K_MUL, 2048, 768);
    fails += bench_swiglu(K_SILU_BWD, 2048, 768);
    fails += bench_swiglu(K_SWIGLU, 2048, 768);
    fails += bench_swiglu(K_SWIGLU_BWD, 2048, 768);
    fails += bench_cast(true, 2048, 768);
    fails += bench_cast(false, 2048, 768);
    fails += bench_copy(true, B, T, NH, HD);
    fails += bench_copy(false, B, T, NH, HD);
    fails += bench_cast(true, C, 4 * C); /* a weight */
    fails += bench_cast(false, C, 4 * C);
    fails += bench_cast(true, R, 4 * C); /* an activation */
    fails += bench_cast(false, R, 4 * C);
    fails += bench_cast(true, B * NH * T, T); /* attention's scores */
    fails += bench_cast(false, B * NH * T, T);
    fails += bench_cast(true, VP, C); /* the LM head's weight */
    fails += bench_cast(false, VP, C);
    fails += bench_cast(true, params / C, C); /* every parameter, as one flat cast after the step */
    fails += bench_adam(params, false);
    fails += bench_adam(params, true);
    if (fails) fprintf(stderr, "bench_kernels: %d benchmark(s) failed\n", fails);
    return fails ? 1 : 0;
}
