/* bench_train: training-step benchmarks on the CPU backend.
 *
 * For each case (a model, a batch B x T), the step the training driver runs (zero grads,
 * forward, loss, backward, AdamW update, synchronize) is timed for `warmup` + `steps` steps
 * on random tokens from a temporary llm.c shard. Reported per case, over the measured steps:
 *   ms/step      median (min, max)
 *   tokens/s     B*T / median
 *   MFU          model FLOPs/s = it_model_flops_per_token(T) * B*T / median, over the fp32
 *                GEMM peak measured in the same run with the same threads (bench_gemm_peaks:
 *                best large sgemm through the gemm slot, at the start, around every case and
 *                at the end; the best of all of them)
 *   MFU (ideal)  the same over threads x the one-thread peak: the ceiling if the process had
 *                the cores to itself (on a busy machine the first figure is the higher one)
 *   MFU (case's peak)  the same over the better of two peaks measured just before and just
 *                after the case: the machine's speed drifts over a run (a shared host), and
 *                this compares the cases with each other at the speed each one had
 *   MFU (steps' peaks)  after the measured steps, as many more, each between two GEMM peak
 *                probes (best of five 1024^3 sgemms); each step's model FLOPs/s over the
 *                better probe next to it, median over the steps: MFU at the speed the host
 *                had that second
 *   CPU share    process CPU time / (threads x wall time): below 100% when other processes
 *                took the cores (the machine is shared) or threads waited
 *   peak memory  it_mem_stats peak used / reserved during a step (weights, grads and Adam
 *                moments included)
 *   mallocs      backend mallocs per step; after warm-up this must be 0 (the caching
 *                allocator serves every block), and a non-zero count is a bug: the case is
 *                then rerun on "benchprof" (below) to list the sizes it asked the backend for
 * Then a per-kernel breakdown of the first case's measured steps (GPT-2 124M T=64 in a full run)
 * (it_backend_kernel_stats), and a per-shape profile of one step of it on "benchprof", a
 * backend registered here with the CPU backend's runtime and kernels, which times gemm,
 * copy_strided, cast, binary, unary, reduce, fill and the fused attention per argument shape and traces malloc.
 *
 * Lines starting with "RESULT " and "PEAK " are for bench/run.sh. See docs/performance.md. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "infinitrain/data.h"
#include "infinitrain/models.h"
#include "infinitrain/train.h"
#include "models/model_impl.h" /* it__llama_build: a Qwen3 the llm.c-style file cannot hold */

typedef enum { M_GPT2, M_LLAMA3, M_MIXTRAL, M_QWEN3 } model_kind;

typedef struct bench_case {
    const char *name;  /* for --cases and the RESULT lines */
    const char *label; /* for people */
    model_kind kind;
    int64_t B, T;
    int n_layer, n_head, n_embd, vocab; /* GPT-2: 0 keeps d12's value */
    int n_kv_head, n_expert, topk, moe_hidden;
    bool by_name_only; /* not in the default set: run only when --cases names it */
    /* Qwen3 built from its configuration with these (head_dim 0: the llm.c-style file of the
     * case's shape, heads n_embd / n_head wide) */
    int head_dim, ffn;
    bool tied;
} bench_case;

static const bench_case all_cases[] = {
    {"gpt2_124m_t64", "GPT-2 124M (d12)", M_GPT2, 4, 64, 0, 0, 0, 0, 0, 0, 0, 0, false, 0, 0, false},
    {"gpt2_124m_t256", "GPT-2 124M (d12)", M_GPT2, 4, 256, 0, 0, 0, 0, 0, 0, 0, 0, false, 0, 0, false},
    {"gpt2_6l384_t256", "GPT-2 6L/384, V 50257", M_GPT2, 4, 256, 6, 6, 384, 0, 0, 0, 0, 0, false, 0, 0, false},
    {"llama3_6l384_t256", "LLaMA-3 6L/384 GQA 6/2, V 32000", M_LLAMA3, 4, 256, 6, 6, 384, 32000, 2, 0, 0, 0, false, 0,
     0, false},
    {"mixtral_6l384_t256", "Mixtral 6L/384 8 experts top-2, V 32000", M_MIXTRAL, 4, 256, 6, 6, 384, 32000, 2, 8, 2, 768,
     false, 0, 0, false},
    /* LLaMA-3's line with q_norm/k_norm and the half-split RoPE: the same shape, FFN 1024 */
    {"qwen3_6l384_t256", "Qwen3 6L/384 GQA 6/2, V 32000", M_QWEN3, 4, 256, 6, 6, 384, 32000, 2, 0, 0, 0, false, 0, 0,
     false},
    /* Qwen3-0.6B's shape (Qwen/Qwen3-0.6B's config.json): 28 layers, 1024 wide, 16 heads of 128,
     * 8 kv heads, FFN 3072, vocabulary 151936, tied; random weights. make bench runs one step. */
    {"qwen3_0_6b_t256", "Qwen3-0.6B shape: 28L/1024, 16x128 heads, GQA 16/8, FFN 3072, V 151936, tied", M_QWEN3, 1, 256,
     28, 16, 1024, 151936, 8, 0, 0, 0, true, 128, 3072, true},
    /* Tiny shapes for tests/e2e/bench_smoke.sh in a sanitizer build, where a step of the cases
     * above takes 8-12 s: the same code paths (model, AdamW, allocator, RESULT lines). */
    {"gpt2_2l128_t64", "GPT-2 2L/128, V 8192 (smoke)", M_GPT2, 4, 64, 2, 4, 128, 8192, 0, 0, 0, 0, true, 0, 0, false},
    {"llama3_2l128_t64", "LLaMA-3 2L/128 GQA 4/2, V 8192 (smoke)", M_LLAMA3, 4, 64, 2, 4, 128, 8192, 2, 0, 0, 0, true,
     0, 0, false},
    {"mixtral_2l128_t64", "Mixtral 2L/128 8 experts top-2, V 8192 (smoke)", M_MIXTRAL, 4, 64, 2, 4, 128, 8192, 2, 8, 2,
     256, true, 0, 0, false},
};
#define NCASES (int)(sizeof all_cases / sizeof all_cases[0])

/* GPT-2 124M's initial weights, written by the first case that builds it (it_gpt2_new) and
 * loaded by the others: every 124M case starts from the same weights, random initialization
 * of 124M numbers runs once, and bench/peer_pytorch.py trains from this file too. */
#define GPT2_124M_INIT "gpt2_124m.bin"

typedef struct case_result {
    bool ran;
    int64_t params;
    double ms_med, ms_min, ms_max, ms_mean, tok_s, flops_tok, mfu, mfu_ideal;
    double case_peak, mfu_case;   /* the better peak measured just before and just after the case */
    double mfu_steps, steps_peak; /* median over the steps of MFU at the peak probed next to each step, and of
                                     those peaks */
    double cpu_share;             /* CPU time / (threads x wall time) over the measured steps */
    double model_gflops;          /* model FLOPs per second at the median step time */
    size_t peak_used, peak_reserved;
    uint64_t mallocs_max, mallocs_total, warmup_mallocs;
    double loss_first, loss_last;
    double rss_base_mb, rss_peak_mb; /* process RSS before the case's setup, peak through its steps */
} case_result;

static int opt_warmup = 2, opt_steps = 5, opt_profile_steps = 1, opt_top = 30;
/* --dtype bfloat16: every step under autocast to bf16, as the training driver runs --dtype bfloat16 */
static bool opt_bf16;

/* ---------------------------------------------------------------- input files */

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* n random tokens in [0, vocab) (uniform: the loss stays near ln V, which is fine for timing). */
static it_status write_shard(const char *path, int64_t n, int64_t vocab, uint64_t seed) {
    uint32_t *t = malloc(sizeof(uint32_t) * (size_t)n);
    if (!t) return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)(bench_rng_next(&s) % (uint64_t)vocab);
    it_status st = it_shard_write(path, t, n, vocab > 65536);
    free(t);
    return st;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Append n floats to f: N(0, 0.02^2) (Box-Muller), or all 1 (norm weights). */
static int write_params(FILE *f, int64_t n, bool ones, uint64_t *rng) {
    float buf[4096];
    while (n > 0) {
        int64_t k = n < 4096 ? n : 4096;
        for (int64_t i = 0; i < k; i += 2) {
            double u1 = (double)(bench_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
            double u2 = (double)(bench_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
            double r = sqrt(-2.0 * log(u1));
            buf[i] = ones ? 1.0f : (float)(0.02 * r * cos(2.0 * M_PI * u2));
            if (i + 1 < k) buf[i + 1] = ones ? 1.0f : (float)(0.02 * r * sin(2.0 * M_PI * u2));
        }
        if (fwrite(buf, sizeof(float), (size_t)k, f) != (size_t)k) return 1;
        n -= k;
    }
    return 0;
}

/* A synthetic Qwen3 file (InfiniTrain-Test's llm.c-style layout, magic 20240804 v4) of the
 * case's shape: FFN 1024 as LLaMA-3's line, rms_norm_eps 1e-6, rope_theta 1e6. */
static it_status write_qwen3_checkpoint(const bench_case *bc, const char *path) {
    int32_t h[256] = {0};
    int64_t C = bc->n_embd, L = bc->n_layer, V = bc->vocab, hd = C / bc->n_head, kvd = bc->n_kv_head * hd;
    int64_t H = it_llama3_ffn_hidden((int)C, 1.0f, 256);
    int32_t vals[16] = {20240804,
                        4,
                        (int32_t)bc->T,
                        (int32_t)V,
                        (int32_t)L,
                        bc->n_head,
                        bc->n_kv_head,
                        (int32_t)C,
                        (int32_t)H,
                        1,
                        (int32_t)f32_bits(1e-6f),
                        (int32_t)f32_bits(1e6f),
                        0,
                        4,
                        1,
                        0};
    memcpy(h, vals, sizeof vals);
    FILE *f = fopen(path, "wb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot create", path);
    uint64_t rng = 1234;
    int bad = fwrite(h, sizeof h, 1, f) != 1;
    bad |= write_params(f, V * C, false, &rng);                 /* wte */
    bad |= write_params(f, L * C + 2 * L * hd, true, &rng);     /* ln_1, then q_norm and k_norm */
    bad |= write_params(f, L * (C + 2 * kvd) * C, false, &rng); /* c_attn */
    bad |= write_params(f, L * C * C, false, &rng);             /* c_proj */
    bad |= write_params(f, L * C, true, &rng);                  /* ln_2 */
    bad |= write_params(f, 3 * L * H * C, false, &rng);         /* gate, up, down */
    bad |= write_params(f, C, true, &rng);                      /* ln_f */
    bad |= write_params(f, V * C, false, &rng);                 /* lm_head */
    bad |= fclose(f) != 0;
    return bad ? it_error(IT_ERR_IO, "%s: write failed", path) : IT_OK;
}

/* A Qwen3 the llm.c-style file cannot hold (heads not n_embd / n_head wide), built from its
 * configuration: weights N(0, 0.02^2) drawn in blocks, norm weights 1. */
static it_status build_qwen3(const bench_case *bc, it_device dev, it_model **out) {
    it__llama_config c = {.qwen3 = true,
                          .tied = bc->tied,
                          .head_dim = bc->head_dim,
                          .block_size = (int)bc->T,
                          .vocab_size = bc->vocab,
                          .n_layer = bc->n_layer,
                          .n_head = bc->n_head,
                          .n_kv_head = bc->n_kv_head,
                          .n_embd = bc->n_embd,
                          .ffn_hidden = bc->ffn,
                          .norm_eps = 1e-6f,
                          .rope_theta = 1e6f};
    it_status st = it__llama_build(&c, dev, NULL, bc->name, out);
    if (st) return st;
    char *tmp = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&tmp, &len);
    uint64_t rng = 1234;
    enum { BLOCK = 1 << 20 };
    for (int i = 0; i < it_model_param_count(*out) && !st; i++) {
        const it_model_param_info *p = it_model_param_at(*out, i);
        for (int64_t at = 0; at < p->numel && !st; at += BLOCK) {
            int64_t n = p->numel - at < BLOCK ? p->numel - at : BLOCK;
            rewind(mem);
            if (write_params(mem, n, p->ndim == 1, &rng) || fflush(mem)) {
                st = it_error(IT_ERR_OOM, "%s: drawing the weights", bc->name);
                break;
            }
            it_tensor *view = it_tensor_slice(it_model_params(*out), 0, p->offset + at, p->offset + at + n, 1);
            st = view ? it_tensor_copy_from_host(view, tmp, sizeof(float) * (size_t)n) : it_last_status();
            it_tensor_release(view);
        }
    }
    fclose(mem);
    free(tmp);
    if (st) {
        it_model_free(*out);
        *out = NULL;
    }
    return st;
}

/* A synthetic LLaMA-3 (magic 20240803 v3) or Mixtral (20260513 v2) checkpoint of the case's
 * shape, in the layouts of docs/formats.md: weights N(0, 0.02^2), RMSNorm
 * weights 1. LLaMA-3's FFN width comes from ffn_dim_multiplier 1.0 and multiple_of 256
 * (H = 1024 for C = 384). */
static it_status write_llama_checkpoint(const bench_case *bc, const char *path) {
    int32_t h[256] = {0};
    int64_t C = bc->n_embd, L = bc->n_layer, V = bc->vocab, hd = C / bc->n_head, kvd = bc->n_kv_head * hd;
    bool moe = bc->kind == M_MIXTRAL;
    if (bc->kind == M_QWEN3) return write_qwen3_checkpoint(bc, path);
    h[0] = moe ? 20260513 : 20240803;
    h[1] = moe ? 2 : 3;
    h[2] = (int32_t)bc->T;
    h[3] = (int32_t)V;
    h[4] = (int32_t)L;
    h[5] = bc->n_head;
    h[6] = bc->n_kv_head;
    h[7] = (int32_t)C;
    int64_t H;
    if (!moe) {
        h[8] = (int32_t)f32_bits(1.0f);
        h[9] = 256;
        h[10] = (int32_t)f32_bits(1e-5f);
        h[11] = (int32_t)f32_bits(500000.0f);
        h[12] = 1;
        h[13] = 4;
        h[14] = 3;
        h[15] = 1;
        H = it_llama3_ffn_hidden((int)C, 1.0f, 256);
    } else {
        h[8] = bc->n_expert;
        h[12] = (int32_t)f32_bits(1e-5f);
        h[13] = (int32_t)f32_bits(10000.0f);
        h[14] = 0;
        h[15] = bc->topk;
        h[16] = bc->moe_hidden;
        H = bc->moe_hidden;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot create", path);
    uint64_t rng = 1234;
    int bad = fwrite(h, sizeof h, 1, f) != 1;
    bad |= write_params(f, V * C, false, &rng); /* wte */
    if (!moe) {
        bad |= write_params(f, L * C, true, &rng);                  /* ln_1.w */
        bad |= write_params(f, L * (C + 2 * kvd) * C, false, &rng); /* c_attn */
        bad |= write_params(f, L * C * C, false, &rng);             /* c_proj */
        bad |= write_params(f, L * C, true, &rng);                  /* ln_2.w */
        bad |= write_params(f, 3 * L * H * C, false, &rng);         /* c_fc, c_fc2, c_proj */
    } else {
        for (int64_t l = 0; l < L && !bad; l++) {
            bad |= write_params(f, C, true, &rng);                            /* ln_1.w */
            bad |= write_params(f, C * C + 2 * kvd * C + C * C, false, &rng); /* q, k, v, c_proj */
            bad |= write_params(f, C, true, &rng);                            /* ln_2.w */
            /* router, then gate/up/down of each expert */
            bad |= write_params(f, (int64_t)bc->n_expert * C + (int64_t)bc->n_expert * 3 * H * C, false, &rng);
        }
    }
    bad |= write_params(f, C, true, &rng);      /* ln_f.w */
    bad |= write_params(f, V * C, false, &rng); /* lm_head */
    bad |= fclose(f) != 0;
    return bad ? it_error(IT_ERR_IO, "%s: write failed", path) : IT_OK;
}

/* ---------------------------------------------------------------- one case */

static it_status make_model(const bench_case *bc, const char *workdir, it_device dev, it_model **out) {
    char path[4096];
    if (bc->kind == M_GPT2 && bc->n_layer == 0) { /* the d12 preset */
        snprintf(path, sizeof path, "%s/%s", workdir, GPT2_124M_INIT);
        if (file_exists(path)) return it_gpt2_load(path, dev, out);
        it_gpt2_config cfg;
        it_status st = it_gpt2_preset("d12", &cfg);
        if (st || (st = it_gpt2_new(&cfg, dev, 42, out))) return st;
        return it_model_save(*out, path);
    }
    if (bc->kind == M_GPT2) {
        it_gpt2_config cfg;
        it_status st = it_gpt2_preset("d12", &cfg);
        if (st) return st;
        cfg.n_layer = bc->n_layer;
        cfg.n_head = bc->n_head;
        cfg.n_embd = bc->n_embd;
        if (bc->vocab) {
            cfg.vocab_size = bc->vocab;
            cfg.padded_vocab_size = (bc->vocab + 127) / 128 * 128;
        }
        if ((st = it_gpt2_config_check(&cfg))) return st;
        return it_gpt2_new(&cfg, dev, 42, out);
    }
    if (bc->kind == M_QWEN3 && bc->head_dim) return build_qwen3(bc, dev, out);
    snprintf(path, sizeof path, "%s/%s.bin", workdir, bc->name);
    if (!file_exists(path)) {
        it_status st = write_llama_checkpoint(bc, path);
        if (st) return st;
    }
    return bc->kind == M_LLAMA3  ? it_llama3_load(path, dev, out)
           : bc->kind == M_QWEN3 ? it_qwen3_load(path, dev, out)
                                 : it_mixtral_load(path, dev, out);
}

typedef struct trainer {
    it_device dev;
    it_model *model;
    it_optimizer *opt;
    it_loader *loader;
    int32_t *hx, *hy;
    int64_t B, T;
} trainer;

static void trainer_free(trainer *t) {
    free(t->hx);
    free(t->hy);
    it_optimizer_free(t->opt);
    it_loader_free(t->loader);
    it_model_free(t->model);
    memset(t, 0, sizeof *t);
}

/* Model, AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.1) and a loader over a
 * random shard (written on first use). */
static it_status trainer_init(trainer *t, const bench_case *bc, const char *workdir, it_device dev) {
    memset(t, 0, sizeof *t);
    t->dev = dev;
    t->B = bc->B;
    t->T = bc->T;
    it_status st = make_model(bc, workdir, dev, &t->model);
    if (st) return st;
    const it_model_info *info = it_model_get_info(t->model);
    char shard[4096];
    snprintf(shard, sizeof shard, "%s/tokens_%s.bin", workdir, bc->name);
    int64_t ntok = (int64_t)(opt_warmup + opt_steps + opt_profile_steps + 3) * bc->B * bc->T + 1;
    if (!file_exists(shard) && (st = write_shard(shard, ntok, info->vocab_size, 0xB5ED ^ (uint64_t)bc->T))) return st;
    if ((st = it_loader_new(shard, bc->B, bc->T, 0, 1, &t->loader))) return st;
    it_optim_config oc = {IT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.1f};
    if ((st = it_optimizer_new(&oc, it_model_params(t->model), it_model_grads(t->model), &t->opt))) return st;
    t->hx = malloc(sizeof(int32_t) * (size_t)(bc->B * bc->T));
    t->hy = malloc(sizeof(int32_t) * (size_t)(bc->B * bc->T));
    if (!t->hx || !t->hy) return it_error(IT_ERR_OOM, "input buffers: out of host memory");
    return IT_OK;
}

/* One training step exactly as src/train/driver.c runs it (accumulation 1, no clipping). */
static it_status train_step(trainer *t, double *loss) {
    it_status st = it_model_zero_grad(t->model);
    if (st || (st = it_loader_next(t->loader, t->hx, t->hy))) return st;
    size_t nb = sizeof(int32_t) * (size_t)(t->B * t->T);
    int64_t shape[2] = {t->B, t->T};
    it_scope_begin();
    if (opt_bf16) it_autocast_set(true, IT_DTYPE_BF16);
    it_tensor *x = it_tensor_from_host(t->dev, IT_DTYPE_I32, 2, shape, t->hx, nb);
    it_tensor *y = it_tensor_from_host(t->dev, IT_DTYPE_I32, 2, shape, t->hy, nb);
    it_tensor *l = it_model_loss(t->model, x, y);
    st = l ? it_tensor_item(l, NULL, loss) : it_last_status();
    if (!st) st = it_backward(l);
    if (opt_bf16) it_autocast_set(false, IT_DTYPE_BF16);
    it_scope_end();
    it_tape_clear();
    if (!st) st = it_model_grads_final(t->model);
    if (!st) st = it_optimizer_step(t->opt, 1e-4f, 1.0f);
    if (!st) st = it_device_synchronize(t->dev);
    return st;
}

static int cmp_stat_ms(const void *a, const void *b) {
    double x = ((const it_kernel_stat *)a)->ms, y = ((const it_kernel_stat *)b)->ms;
    return (x < y) - (x > y);
}

/* Calls and time per kernel slot over `steps` steps, per step, against the mean step time. */
static void print_breakdown(const it_backend *backend, int steps, double step_ms) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(backend, st)) {
        fprintf(stderr, "kernel stats: %s\n", it_last_error());
        return;
    }
    qsort(st, IT_KERNEL_SLOT_COUNT, sizeof st[0], cmp_stat_ms);
    printf("\n== Per-kernel breakdown of one step (mean of %d measured steps, %.1f ms/step) ==\n", steps, step_ms);
    printf("  %-18s %10s %12s %8s\n", "kernel slot", "calls/step", "ms/step", "% step");
    double total = 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        if (!st[i].calls) continue;
        double ms = st[i].ms / steps;
        total += ms;
        printf("  %-18s %10.1f %12.2f %7.1f%%\n", st[i].slot, (double)st[i].calls / steps, ms, 100.0 * ms / step_ms);
    }
    printf("  %-18s %10s %12.2f %7.1f%%\n", "(all kernels)", "", total, 100.0 * total / step_ms);
    printf("  %-18s %10s %12.2f %7.1f%%\n", "(outside kernels)", "", step_ms - total,
           100.0 * (step_ms - total) / step_ms);
}

/* The GEMM peak probed around the probed steps: best of 5 timed 1024^3 sgemms (~40 ms) */
static double step_probe(void) {
    double ms;
    return bench_gemm_peak(1024, 5, &ms);
}

static it_status run_case(const bench_case *bc, const char *workdir, it_device dev, double peak_gflops, bool breakdown,
                          bool step_peaks, case_result *r) {
    trainer t;
    memset(r, 0, sizeof *r);
    printf("\n== %s: %s, B=%lld T=%lld, AdamW, %s ==\n", bc->name, bc->label, (long long)bc->B, (long long)bc->T,
           opt_bf16 ? "bf16 autocast (fp32 weights and state)" : "fp32");
    fflush(stdout);
    /* Process memory, as the peer measures it: RSS before the model exists, peak RSS through
     * the steps (both include the cached allocator's free blocks, nothing of the files). */
    it_mem_empty_cache(dev);
    bool hwm = bench_reset_peak_rss();
    r->rss_base_mb = bench_proc_mib("VmRSS");
    double t_init = bench_now_ms();
    it_status st = trainer_init(&t, bc, workdir, dev);
    if (st) {
        trainer_free(&t);
        return st;
    }
    const it_model_info *info = it_model_get_info(t.model);
    r->params = info->num_params;
    r->flops_tok = it_model_flops_per_token(t.model, bc->T);
    printf("  %lld parameters (L=%d, C=%d, heads %d", (long long)info->num_params, info->n_layer, info->n_embd,
           info->n_head);
    if (info->n_kv_head) printf("/%d kv", info->n_kv_head);
    if (info->n_expert)
        printf(", %d experts top-%d of width %d", info->n_expert, info->router_topk, info->ffn_hidden);
    else if (info->ffn_hidden)
        printf(", FFN %d", info->ffn_hidden);
    printf(", V %lld), %.3f GFLOP per token (setup %.1f s)\n", (long long)info->padded_vocab, r->flops_tok / 1e9,
           (bench_now_ms() - t_init) / 1e3);
    fflush(stdout);

    int n = opt_warmup + opt_steps, threads = omp_get_max_threads();
    /* the steps' times, then for the probed steps: times, MFUs, peaks (opt_steps each) and the
     * opt_steps + 1 probes around them */
    double *ms = calloc((size_t)n + 4 * (size_t)opt_steps + 1, sizeof(double));
    if (!ms) {
        trainer_free(&t);
        return it_error(IT_ERR_OOM, "out of host memory");
    }
    double cpu_sum = 0;
    for (int i = 0; i < n && !st; i++) {
        bool warm = i < opt_warmup;
        if (i == opt_warmup) it_backend_stats_reset(dev.backend);
        it_mem_stats m0, m1;
        it_mem_stats_get(dev, &m0);
        it_mem_stats_reset_peak(dev);
        double loss = 0, t0 = bench_now_ms(), c0 = bench_cpu_ms();
        st = train_step(&t, &loss);
        ms[i] = bench_now_ms() - t0;
        double cpu = bench_cpu_ms() - c0;
        if (st) break;
        it_mem_stats_get(dev, &m1);
        uint64_t mallocs = m1.backend_mallocs - m0.backend_mallocs, frees = m1.backend_frees - m0.backend_frees;
        printf("  step %d%s %10.1f ms (CPU %3.0f%%) | loss %.4f | backend mallocs %llu, frees %llu | peak used %zu "
               "MB\n",
               i + 1, warm ? " (warm-up)" : "          ", ms[i], 100.0 * cpu / (threads * ms[i]), loss,
               (unsigned long long)mallocs, (unsigned long long)frees, m1.peak_used >> 20);
        fflush(stdout);
        if (i == 0) r->loss_first = loss;
        r->loss_last = loss;
        if (warm) {
            r->warmup_mallocs += mallocs;
        } else {
            cpu_sum += cpu;
            r->mallocs_total += mallocs;
            if (mallocs > r->mallocs_max) r->mallocs_max = mallocs;
            if (m1.peak_used > r->peak_used) r->peak_used = m1.peak_used;
            if (m1.peak_reserved > r->peak_reserved) r->peak_reserved = m1.peak_reserved;
        }
    }
    if (!st) {
        double *meas = ms + opt_warmup, sum = 0;
        r->ms_min = 1e300;
        for (int i = 0; i < opt_steps; i++) {
            sum += meas[i];
            if (meas[i] < r->ms_min) r->ms_min = meas[i];
            if (meas[i] > r->ms_max) r->ms_max = meas[i];
        }
        r->ms_mean = sum / opt_steps;
        r->cpu_share = cpu_sum / (threads * sum);
        r->ms_med = bench_median(meas, opt_steps);
        r->rss_peak_mb = hwm ? bench_proc_mib("VmHWM") : -1;
        double tokens = (double)(bc->B * bc->T);
        r->tok_s = tokens / (r->ms_med * 1e-3);
        r->model_gflops = r->flops_tok * tokens / (r->ms_med * 1e-3) / 1e9;
        r->ran = true;
        printf("  => %.1f ms/step median (min %.1f, max %.1f) | %.1f tok/s | %.2f model GFLOP/s (%.1f%% of the peak "
               "measured at the start) | CPU share %.0f%% | peak used %zu MB, reserved %zu MB | steady-state backend "
               "mallocs/step: %llu%s\n",
               r->ms_med, r->ms_min, r->ms_max, r->tok_s, r->model_gflops,
               peak_gflops > 0 ? 100.0 * r->model_gflops / peak_gflops : 0.0, 100.0 * r->cpu_share, r->peak_used >> 20,
               r->peak_reserved >> 20, (unsigned long long)r->mallocs_max,
               r->mallocs_max ? "  ** NOT ZERO: a steady-state step allocates from the backend **" : "");
        if (breakdown) print_breakdown(dev.backend, opt_steps, r->ms_mean);
    }
    if (!st && step_peaks) {
        /* As many steps again, each between two peak probes, after the measured ones (whose
         * times, memory and breakdown the probes' cold caches and buffers would otherwise
         * touch): each step against the better of the probes just before and just after it. */
        double *tms = ms + n, *mfu = tms + opt_steps, *pk = mfu + opt_steps, *probe = pk + opt_steps;
        double tokens = (double)(bc->B * bc->T);
        probe[0] = step_probe();
        printf("  steps between GEMM peak probes (GFLOP/s): %.1f", probe[0]);
        for (int i = 0; i < opt_steps && !st; i++) {
            double loss = 0, t0 = bench_now_ms();
            st = train_step(&t, &loss);
            tms[i] = bench_now_ms() - t0;
            probe[i + 1] = step_probe();
            printf(" | %.1f ms | %.1f", tms[i], probe[i + 1]);
        }
        printf("\n");
        if (!st) {
            for (int i = 0; i < opt_steps; i++) {
                pk[i] = probe[i] > probe[i + 1] ? probe[i] : probe[i + 1];
                mfu[i] = pk[i] > 0 ? r->flops_tok * tokens / (tms[i] * 1e-3) / 1e9 / pk[i] : 0;
            }
            r->mfu_steps = bench_median(mfu, opt_steps);
            r->steps_peak = bench_median(pk, opt_steps);
            printf("  => MFU at the peak probed next to each step: median %.1f%% (median step %.1f ms, median peak "
                   "%.1f GFLOP/s)\n",
                   100.0 * r->mfu_steps, bench_median(tms, opt_steps), r->steps_peak);
        }
    }
    fflush(stdout);
    free(ms);
    trainer_free(&t);
    it_mem_empty_cache(dev);
    return st;
}

/* ---------------------------------------------------------------- per-shape profile */

#define PROF_MAX 512
#define PROF_KEY 192
typedef struct prof_entry {
    const char *slot;
    char key[PROF_KEY];
    uint64_t calls;
    double ms, flops, bytes;
} prof_entry;

static prof_entry prof[PROF_MAX];
static int prof_n;
static bool prof_on;
static const it_kernels *prof_cpu;
static it_kernels prof_kernels;

static void prof_add(const char *slot, const char *key, double ms, double flops, double bytes) {
    if (!prof_on) return;
    int i = 0;
    while (i < prof_n && !(prof[i].slot == slot && strcmp(prof[i].key, key) == 0)) i++;
    if (i == prof_n) {
        if (prof_n == PROF_MAX) {
            i = PROF_MAX - 1; /* table full: lump into the last entry */
        } else {
            prof_n++;
            prof[i].slot = slot;
            snprintf(prof[i].key, sizeof prof[i].key, "%s", key);
        }
    }
    prof[i].calls++;
    prof[i].ms += ms;
    prof[i].flops += flops;
    prof[i].bytes += bytes;
}

static int64_t desc_numel(const it_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

/* "(4,64,768)" and, when not contiguous, "/s(...)" with the strides. */
static void desc_str(const it_tdesc *d, char *buf, size_t size) {
    size_t o = 0;
    bool contiguous = true;
    int64_t expect = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != expect) contiguous = false;
        expect *= d->shape[i];
    }
    o += (size_t)snprintf(buf + o, size - o, "(");
    for (int i = 0; i < d->ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)d->shape[i]);
    if (o < size) o += (size_t)snprintf(buf + o, size - o, ")");
    if (!contiguous && o < size) {
        o += (size_t)snprintf(buf + o, size - o, "/s(");
        for (int i = 0; i < d->ndim && o < size; i++)
            o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)d->strides[i]);
        if (o < size) snprintf(buf + o, size - o, ")");
    }
}

static it_status prof_gemm(it_stream *s, const it_gemm_args *g) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->gemm(s, g);
    double ms = bench_now_ms() - t0;
    int64_t b = g->c.shape[0], M = g->c.shape[1], N = g->c.shape[2], K = g->trans_a ? g->a.shape[1] : g->a.shape[2];
    char key[PROF_KEY];
    snprintf(key, sizeof key, "%lld x %lldx%lldx%lld%s%s%s", (long long)b, (long long)M, (long long)N, (long long)K,
             g->trans_a ? " tA" : "", g->trans_b ? " tB" : "", g->beta != 0.0f ? " +=" : "");
    prof_add("gemm", key, ms, 2.0 * (double)b * (double)M * (double)N * (double)K, 0);
    return st;
}

static it_status prof_copy(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->copy_strided(s, src, dst);
    double ms = bench_now_ms() - t0;
    char a[64], b[64], key[PROF_KEY];
    desc_str(src, a, sizeof a);
    desc_str(dst, b, sizeof b);
    snprintf(key, sizeof key, "%s -> %s", a, b);
    prof_add("copy_strided", key, ms, 0, 2.0 * (double)desc_numel(dst) * 4.0);
    return st;
}

static it_status prof_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->cast(s, src, dst);
    double ms = bench_now_ms() - t0;
    char a[64], key[PROF_KEY];
    desc_str(src, a, sizeof a);
    snprintf(key, sizeof key, "%s %s -> %s", a, it_dtype_name(src->dtype), it_dtype_name(dst->dtype));
    prof_add("cast", key, ms, 0,
             (double)desc_numel(dst) * (double)(it_dtype_size(src->dtype) + it_dtype_size(dst->dtype)));
    return st;
}

static const char *unary_names[] = {"neg",    "scale", "exp",  "log",  "sqrt",       "rsqrt",
                                    "square", "tanh",  "gelu", "silu", "add_scalar", "recip"};
static const char *binary_names[] = {"add", "sub", "mul", "div", "max", "min", "gelu_bwd", "silu_bwd", "tanh_bwd"};
static const char *reduce_names[] = {"sum", "mean", "max", "sumsq"};

static it_status prof_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->unary(s, op, alpha, x, out);
    double ms = bench_now_ms() - t0;
    char a[64], key[PROF_KEY];
    desc_str(x, a, sizeof a);
    snprintf(key, sizeof key, "%s %s%s", op < IT_UNARY_COUNT ? unary_names[op] : "?", a,
             x->data == out->data ? " in-place" : "");
    prof_add("unary", key, ms, 0, 2.0 * (double)desc_numel(out) * 4.0);
    return st;
}

static it_status prof_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->binary(s, op, a, b, out);
    double ms = bench_now_ms() - t0;
    char sa[48], sb[48], key[PROF_KEY];
    desc_str(a, sa, sizeof sa);
    desc_str(b, sb, sizeof sb);
    snprintf(key, sizeof key, "%s %s %s", op < IT_BINARY_COUNT ? binary_names[op] : "?", sa, sb);
    prof_add("binary", key, ms, 0, 3.0 * (double)desc_numel(out) * 4.0);
    return st;
}

static it_status prof_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->reduce(s, op, x, out);
    double ms = bench_now_ms() - t0;
    char sx[64], so[40], key[PROF_KEY];
    desc_str(x, sx, sizeof sx);
    desc_str(out, so, sizeof so);
    snprintf(key, sizeof key, "%s %s -> %s", op < IT_REDUCE_COUNT ? reduce_names[op] : "?", sx, so);
    prof_add("reduce", key, ms, 0, (double)desc_numel(x) * 4.0);
    return st;
}

static it_status prof_fill(it_stream *s, it_tdesc *dst, it_scalar v) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->fill(s, dst, v);
    double ms = bench_now_ms() - t0;
    char sd[64];
    desc_str(dst, sd, sizeof sd);
    prof_add("fill", sd, ms, 0, (double)desc_numel(dst) * 4.0);
    return st;
}

/* The fused attention: "B4 H12 T64 S64 D64 causal", rated in GFLOP/s of its products. */
static void att_key(const it_softmax_args *a, const it_tdesc *q, const it_tdesc *k, char *key, size_t size) {
    snprintf(key, size, "B%lld H%lld T%lld S%lld D%lld%s", (long long)q->shape[0], (long long)q->shape[1],
             (long long)q->shape[2], (long long)k->shape[2], (long long)q->shape[3], a && a->causal ? " causal" : "");
}
static double att_flops(const it_tdesc *q, const it_tdesc *k) {
    return 2.0 * (double)q->shape[0] * (double)q->shape[1] * (double)q->shape[2] * (double)k->shape[2] *
           (double)q->shape[3];
}

static it_status prof_att_fwd(it_stream *s, const it_softmax_args *a, const it_tdesc *q, const it_tdesc *k,
                              const it_tdesc *v, it_tdesc *att, it_tdesc *y) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->attention_fwd(s, a, q, k, v, att, y);
    double ms = bench_now_ms() - t0;
    char key[PROF_KEY];
    att_key(a, q, k, key, sizeof key);
    prof_add("attention_fwd", key, ms, 2.0 * att_flops(q, k), 0);
    return st;
}

static it_status prof_att_bwd(it_stream *s, const it_softmax_args *a, const it_tdesc *q, const it_tdesc *k,
                              const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq, it_tdesc *dk,
                              it_tdesc *dv, it_tdesc *datt) {
    double t0 = bench_now_ms();
    it_status st = prof_cpu->attention_bwd(s, a, q, k, v, att, dy, dq, dk, dv, datt);
    double ms = bench_now_ms() - t0;
    char key[PROF_KEY];
    att_key(a, q, k, key, sizeof key);
    prof_add("attention_bwd", key, ms, 4.0 * att_flops(q, k), 0);
    return st;
}

static int cmp_prof_ms(const void *a, const void *b) {
    double x = ((const prof_entry *)a)->ms, y = ((const prof_entry *)b)->ms;
    return (x < y) - (x > y);
}

/* Backend mallocs seen on "benchprof" while tracing: count and the first sizes. */
#define TRACE_SIZES 24
static bool trace_on;
static uint64_t trace_count;
static size_t trace_bytes, trace_sizes[TRACE_SIZES];
static it_runtime prof_runtime;

static it_status prof_malloc(int device, size_t nbytes, void **ptr) {
    if (trace_on) {
        if (trace_count < TRACE_SIZES) trace_sizes[trace_count] = nbytes;
        trace_count++;
        trace_bytes += nbytes;
    }
    return it_device_cpu().backend->runtime->malloc(device, nbytes, ptr);
}

/* Register "benchprof" once: the CPU backend's runtime and kernels, with six kernel slots
 * timed per argument shape and malloc traced. */
static it_status prof_device(it_device *dev) {
    static it_backend prof_backend;
    static bool registered;
    if (!registered) {
        const it_backend *cpu = it_device_cpu().backend;
        prof_cpu = it_cpu_kernels();
        prof_kernels = *prof_cpu;
        prof_kernels.gemm = prof_gemm;
        prof_kernels.copy_strided = prof_copy;
        prof_kernels.cast = prof_cast;
        prof_kernels.unary = prof_unary;
        prof_kernels.binary = prof_binary;
        prof_kernels.reduce = prof_reduce;
        prof_kernels.fill = prof_fill;
        prof_kernels.attention_fwd = prof_att_fwd;
        prof_kernels.attention_bwd = prof_att_bwd;
        prof_runtime = *cpu->runtime;
        prof_runtime.malloc = prof_malloc;
        prof_backend = *cpu;
        prof_backend.name = "benchprof";
        prof_backend.runtime = &prof_runtime;
        prof_backend.kernels = &prof_kernels;
        prof_backend.ccl = NULL;
        it_status st = it_backend_register(&prof_backend);
        if (st) return st;
        registered = true;
    }
    return it_device_parse("benchprof", dev);
}

/* `steps` steps of bc (after opt_warmup untimed ones) on "benchprof". With shapes: gemm /
 * copy_strided / elementwise / reduce / fill time by argument shape (top `top`). Always:
 * the backend mallocs of each of those steps, with their sizes. */
static it_status run_profile(const bench_case *bc, const char *workdir, int steps, bool shapes, int top) {
    it_device dev;
    it_status st = prof_device(&dev);
    if (st) return st;
    if (shapes)
        printf("\n== Per-shape profile: %s, B=%lld T=%lld, %d step(s) after %d warm-up, on backend 'benchprof' "
               "(the CPU kernels, timed per call) ==\n",
               bc->name, (long long)bc->B, (long long)bc->T, steps, opt_warmup);
    else
        printf("\n== Backend malloc trace: %s, B=%lld T=%lld, %d step(s) after %d warm-up, on backend 'benchprof' ==\n",
               bc->name, (long long)bc->B, (long long)bc->T, steps, opt_warmup);
    fflush(stdout);
    trainer t;
    if ((st = trainer_init(&t, bc, workdir, dev))) {
        trainer_free(&t);
        return st;
    }
    prof_n = 0;
    double step_ms = 0, loss;
    for (int i = 0; i < opt_warmup + steps && !st; i++) {
        bool measured = i >= opt_warmup;
        prof_on = measured && shapes;
        trace_on = measured;
        trace_count = 0;
        trace_bytes = 0;
        double t0 = bench_now_ms();
        st = train_step(&t, &loss);
        if (measured) step_ms += bench_now_ms() - t0;
        trace_on = false;
        if (!measured || st) continue;
        printf("  step %d: %llu backend mallocs in steady state (%.1f MB)", i + 1, (unsigned long long)trace_count,
               (double)trace_bytes / 1048576.0);
        for (uint64_t j = 0; j < trace_count && j < TRACE_SIZES; j++)
            printf("%s%.1f", j ? ", " : "; sizes in KB: ", (double)trace_sizes[j] / 1024.0);
        printf("%s\n", trace_count > TRACE_SIZES ? ", ..." : "");
    }
    prof_on = false;
    if (!st) {
        it_mem_stats m;
        it_mem_stats_get(dev, &m);
        printf("  device 'benchprof' now: used %zu MB, reserved %zu MB; %llu backend mallocs, %llu frees since it "
               "was registered\n",
               m.used >> 20, m.reserved >> 20, (unsigned long long)m.backend_mallocs,
               (unsigned long long)m.backend_frees);
    }
    trainer_free(&t);
    it_mem_empty_cache(dev);
    if (st || !shapes) return st;
    step_ms /= steps;
    qsort(prof, (size_t)prof_n, sizeof prof[0], cmp_prof_ms);
    double shown = 0, all = 0;
    for (int i = 0; i < prof_n; i++) all += prof[i].ms / steps;
    printf("  step %.1f ms; gemm, copy_strided, cast, unary, binary, reduce, fill and attention: %.1f ms (%.1f%%). Top "
           "%d call "
           "shapes by time:\n",
           step_ms, all, 100.0 * all / step_ms, top);
    printf("  %-13s %-61s %6s %9s %6s %10s\n", "slot", "shape (b x M x N x K for gemm; /s = strides)", "calls",
           "ms/step", "%step", "rate");
    for (int i = 0; i < prof_n && i < top; i++) {
        const prof_entry *e = &prof[i];
        double ms = e->ms / steps;
        shown += ms;
        char rate[32];
        if (e->flops > 0)
            snprintf(rate, sizeof rate, "%.1f GF/s", e->flops / (e->ms * 1e-3) / 1e9);
        else
            snprintf(rate, sizeof rate, "%.2f GB/s", e->bytes / (e->ms * 1e-3) / 1e9);
        printf("  %-13s %-61s %6llu %9.2f %5.1f%% %10s\n", e->slot, e->key,
               (unsigned long long)(e->calls / (uint64_t)steps), ms, 100.0 * ms / step_ms, rate);
    }
    printf("  (these %d: %.1f ms of the step, %.1f%%)\n", top < prof_n ? top : prof_n, shown, 100.0 * shown / step_ms);
    return IT_OK;
}

/* ---------------------------------------------------------------- main */

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--cases a,b,...] [--warmup N] [--steps N] [--workdir DIR] [--no-profile]\n"
            "          [--no-case-peaks] [--profile-steps N] [--top N] [--dtype float32|bfloat16] [--list]\n"
            "  --dtype D      the steps' dtype: bfloat16 runs them under autocast (default float32)\n"
            "  --top N        call shapes listed in the per-shape profile (default 30)\n"
            "  --no-case-peaks  measure the GEMM peak at the start and the end only, not around every\n"
            "                 case nor between steps (quicker: for smoke tests; the MFU (case's peak) and\n"
            "                 MFU (steps' peaks) columns are then empty)\n"
            "  --workdir DIR  where the token shards (tokens_CASE.bin), GPT-2 124M's initial weights\n"
            "                 (" GPT2_124M_INIT ") and the synthetic LLaMA-3/Mixtral checkpoints go; kept\n"
            "                 (default: a temporary directory, removed at exit)\n",
            argv0);
}

static void remove_workdir(const char *workdir) {
    char p[4096];
    for (int c = 0; c < NCASES; c++) {
        snprintf(p, sizeof p, "%s/tokens_%s.bin", workdir, all_cases[c].name);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s.bin", workdir, all_cases[c].name);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/%s", workdir, GPT2_124M_INIT);
    unlink(p);
    rmdir(workdir);
}

int main(int argc, char **argv) {
    const char *cases_arg = NULL, *workdir = NULL;
    bool profile = true, case_peaks = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--list") == 0) {
            for (int c = 0; c < NCASES; c++)
                printf("%-20s %s, B=%lld T=%lld\n", all_cases[c].name, all_cases[c].label, (long long)all_cases[c].B,
                       (long long)all_cases[c].T);
            return 0;
        } else if (strcmp(a, "--no-profile") == 0) {
            profile = false;
        } else if (strcmp(a, "--no-case-peaks") == 0) {
            case_peaks = false;
        } else if (v && strcmp(a, "--cases") == 0) {
            cases_arg = argv[++i];
        } else if (v && strcmp(a, "--workdir") == 0) {
            workdir = argv[++i];
        } else if (v && strcmp(a, "--warmup") == 0 && atoi(v) >= 0) {
            opt_warmup = atoi(argv[++i]);
        } else if (v && strcmp(a, "--steps") == 0 && atoi(v) >= 1) {
            opt_steps = atoi(argv[++i]);
        } else if (v && strcmp(a, "--profile-steps") == 0 && atoi(v) >= 1) {
            opt_profile_steps = atoi(argv[++i]);
        } else if (v && strcmp(a, "--dtype") == 0 && (strcmp(v, "bfloat16") == 0 || strcmp(v, "float32") == 0)) {
            opt_bf16 = strcmp(argv[++i], "bfloat16") == 0;
        } else if (v && strcmp(a, "--top") == 0 && atoi(v) >= 1) {
            opt_top = atoi(argv[++i]);
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    bool selected[NCASES];
    for (int c = 0; c < NCASES; c++) {
        selected[c] = cases_arg == NULL && !all_cases[c].by_name_only;
        if (cases_arg) {
            const char *p = cases_arg;
            size_t len = strlen(all_cases[c].name);
            while ((p = strstr(p, all_cases[c].name)) != NULL) {
                if ((p == cases_arg || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) selected[c] = true;
                p += len;
            }
        }
    }
    char tmpdir[] = "/tmp/it_bench_XXXXXX";
    bool own_dir = workdir == NULL;
    if (own_dir) {
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            return 1;
        }
        workdir = tmpdir;
    }

    int threads = omp_get_max_threads();
    const char *coretype = getenv("OPENBLAS_CORETYPE"), *policy = getenv("OMP_WAIT_POLICY");
    printf("bench_train: %d OpenMP threads (OMP_WAIT_POLICY=%s), load average %.2f, OPENBLAS_CORETYPE=%s; %d warm-up "
           "+ %d measured steps per case\n",
           threads, policy ? policy : "unset", bench_loadavg(), coretype ? coretype : "unset", opt_warmup, opt_steps);
    double one = 0, peak = bench_gemm_peaks(&one);
    printf("fp32 GEMM peak: %.1f GFLOP/s with %d threads (best 2048^3 / 1024^3 sgemm through the CPU gemm slot); one "
           "thread: %.1f (measured again around every case and at the end; MFU uses the best)\nfp32 gemm runs on %s\n",
           peak, threads, one, bench_sgemm_name());
    fflush(stdout);

    it_device dev = it_device_cpu();
    case_result res[NCASES];
    memset(res, 0, sizeof res);
    int failed = 0, first_case = -1; /* the per-kernel breakdown and the profile are of the first case run */
    for (int c = 0; c < NCASES; c++) {
        if (!selected[c]) continue;
        bool first = first_case < 0;
        if (first) first_case = c;
        double one_c = 0, before = case_peaks ? bench_gemm_peaks(&one_c) : 0;
        it_status st = run_case(&all_cases[c], workdir, dev, peak, first, case_peaks, &res[c]);
        double after = case_peaks ? bench_gemm_peaks(&one_c) : 0;
        res[c].case_peak = before > after ? before : after;
        if (!st && case_peaks)
            printf("  fp32 GEMM peak around this case: %.1f GFLOP/s before, %.1f after: %.1f%% of the better\n", before,
                   after, res[c].case_peak > 0 ? 100.0 * res[c].model_gflops / res[c].case_peak : 0.0);
        if (st) {
            fprintf(stderr, "bench_train: case %s: %s\n", all_cases[c].name, it_last_error());
            failed++;
        } else if (res[c].mallocs_max > 0 && (st = run_profile(&all_cases[c], workdir, 2, false, 0))) {
            fprintf(stderr, "bench_train: malloc trace of %s: %s\n", all_cases[c].name, it_last_error());
            failed++;
        }
    }
    if (profile && first_case >= 0) {
        it_status st = run_profile(&all_cases[first_case], workdir, opt_profile_steps, true, opt_top);
        if (st) {
            fprintf(stderr, "bench_train: profile: %s\n", it_last_error());
            failed++;
        }
    }

    double one_end = 0, peak_end = bench_gemm_peaks(&one_end);
    printf("\nfp32 GEMM peak again: %.1f GFLOP/s with %d threads, one thread %.1f (at the start: %.1f and %.1f); MFU "
           "uses the best two-thread peak of the run, around the cases included\n",
           peak_end, threads, one_end, peak, one);
    if (peak_end > peak) peak = peak_end;
    if (one_end > one) one = one_end;
    for (int c = 0; c < NCASES; c++) /* the run's peak is the best of every measurement in it */
        if (res[c].case_peak > peak) peak = res[c].case_peak;
    double ideal = one * threads;
    printf("PEAK gflops=%.2f one_thread_gflops=%.2f threads=%d\n", peak, one, threads);
    for (int c = 0; c < NCASES; c++) {
        case_result *r = &res[c];
        if (!r->ran) continue;
        r->mfu = peak > 0 ? r->model_gflops / peak : 0;
        r->mfu_ideal = ideal > 0 ? r->model_gflops / ideal : 0;
        r->mfu_case = r->case_peak > 0 ? r->model_gflops / r->case_peak : 0;
        printf("RESULT case=%s B=%lld T=%lld params=%lld ms_median=%.2f ms_min=%.2f ms_max=%.2f tok_s=%.2f "
               "model_gflops=%.2f mfu_pct=%.2f mfu_ideal_pct=%.2f case_peak_gflops=%.2f mfu_case_pct=%.2f "
               "steps_peak_gflops=%.2f mfu_steps_pct=%.2f cpu_share_pct=%.0f peak_used_mb=%zu "
               "peak_reserved_mb=%zu mallocs_per_step=%llu loss_step1=%.6f rss_base_mb=%.0f rss_peak_mb=%.0f\n",
               all_cases[c].name, (long long)all_cases[c].B, (long long)all_cases[c].T, (long long)r->params, r->ms_med,
               r->ms_min, r->ms_max, r->tok_s, r->model_gflops, 100.0 * r->mfu, 100.0 * r->mfu_ideal, r->case_peak,
               100.0 * r->mfu_case, r->steps_peak, 100.0 * r->mfu_steps, 100.0 * r->cpu_share, r->peak_used >> 20,
               r->peak_reserved >> 20, (unsigned long long)r->mallocs_max, r->loss_first, r->rss_base_mb,
               r->rss_peak_mb);
    }
    /* MFU here is always against the fp32 GEMM peak; make bench's bf16 block (bench/run.sh) puts
     * the bf16 steps against the bf16 peak that bench_kernels --bf16-peak measures. */
    printf("\n== Summary (%s, AdamW, %d threads; fp32 GEMM peak %.1f GFLOP/s, ideal %d x %.1f; load average now "
           "%.2f) ==\n",
           opt_bf16 ? "bf16 autocast, MFU against the fp32 peak" : "fp32", threads, peak, threads, one,
           bench_loadavg());
    printf("| case | params | B x T | ms/step median (min-max) | tokens/s | model GFLOP/s | MFU | MFU (ideal) | MFU "
           "(case's peak) | MFU (steps' peaks) | CPU share | peak used / reserved MB | mallocs/step |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int c = 0; c < NCASES; c++) {
        const case_result *r = &res[c];
        if (!r->ran) continue;
        char at_case[48] = "not measured";
        char at_steps[48] = "not measured";
        if (r->case_peak > 0) snprintf(at_case, sizeof at_case, "%.1f%% of %.0f", 100.0 * r->mfu_case, r->case_peak);
        if (r->steps_peak > 0)
            snprintf(at_steps, sizeof at_steps, "%.1f%% (peaks ~%.0f)", 100.0 * r->mfu_steps, r->steps_peak);
        printf("| %s | %.1fM | %lldx%lld | %.0f (%.0f-%.0f) | %.1f | %.1f | %.1f%% | %.1f%% | %s | %s | %.0f%% | "
               "%zu / %zu | %llu |\n",
               all_cases[c].name, (double)r->params / 1e6, (long long)all_cases[c].B, (long long)all_cases[c].T,
               r->ms_med, r->ms_min, r->ms_max, r->tok_s, r->model_gflops, 100.0 * r->mfu, 100.0 * r->mfu_ideal,
               at_case, at_steps, 100.0 * r->cpu_share, r->peak_used >> 20, r->peak_reserved >> 20,
               (unsigned long long)r->mallocs_max);
    }
    if (own_dir) remove_workdir(workdir);
    return failed ? 1 : 0;
}
