/* Conformance cases of the flash attention slots (flash_attention_fwd / _bwd): the backend's
 * y, lse and gradients against the CPU backend's flash kernels, on the edges the contract
 * names (backend.h): T not a multiple of any block, T = 1, one kv head, grouped kv heads,
 * query offsets (positive, and negative so that rows see no key at all), keys beyond the
 * queries, heads read where they lie in GPT-2's qkv, and a longer T. Optional fused slots: a
 * backend without them is composed by the core, and the suite lists them as absent. */
#include <math.h>
#include <stdlib.h>

#include "conf.h"

it_status conf_call_flash_attention_fwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_flash_args a = c->flash;
    return k->flash_attention_fwd(s, &a, d[0], d[1], d[2], d[3], d[4]);
}

it_status conf_call_flash_attention_bwd(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d) {
    it_flash_args a = c->flash;
    return k->flash_attention_bwd(s, &a, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]);
}

typedef struct flash_shape {
    const char *label;
    int64_t B, H, Hkv, T, S, D, q_offset;
    bool causal;
    int interleave; /* q, k, v stored as in (B, T, interleave, H, D) (3: GPT-2's qkv) */
} flash_shape;

static const flash_shape flash_shapes[] = {
    {"B2 H3 T7 D5 causal", 2, 3, 3, 7, 7, 5, 0, true, 1},
    {"B2 H3 T7 D5 causal, heads in qkv", 2, 3, 3, 7, 7, 5, 0, true, 3},
    {"B1 H1 T1 D4 causal", 1, 1, 1, 1, 1, 4, 0, true, 1},
    {"B2 H2 T5 S9 D8", 2, 2, 2, 5, 9, 8, 0, false, 1},
    {"B1 H4 Hkv1 T3 S6 D5 (one kv head)", 1, 4, 1, 3, 6, 5, 0, false, 1},
    {"B2 H6 Hkv2 T9 D8 causal (grouped kv heads)", 2, 6, 2, 9, 9, 8, 0, true, 1},
    {"B1 H4 Hkv2 T20 S37 D8 causal offset 17 (keys ahead)", 1, 4, 2, 20, 37, 8, 17, true, 1},
    {"B1 H2 T13 S13 D16 causal offset -5 (rows seeing no key)", 1, 2, 2, 13, 13, 16, -5, true, 1},
    {"B1 H2 T65 S130 D16 causal offset 65 (a later slice)", 1, 2, 2, 65, 130, 16, 65, true, 1},
    {"B1 H12 T64 D64 causal, heads in qkv", 1, 12, 12, 64, 64, 64, 0, true, 3},
    {"B1 H2 T300 D32 causal (several blocks, none whole)", 1, 2, 2, 300, 300, 32, 0, true, 1},
    {"B0 H2 T4 D4 causal", 0, 2, 2, 4, 4, 4, 0, true, 1},
};

/* The backward's y and lse: the CPU's forward on the case's q, k, v (host copies). */
static bool prepare_forward(conf_case *c, int y, int lse) {
    const it_kernels *cpu = it_cpu_kernels();
    if (!cpu->flash_attention_fwd) return false;
    it_tdesc q = conf_host_desc(&c->ops[0]), k = conf_host_desc(&c->ops[1]), v = conf_host_desc(&c->ops[2]);
    it_tdesc yd = conf_host_desc(&c->ops[y]), ld = conf_host_desc(&c->ops[lse]);
    it_flash_args a = c->flash;
    return cpu->flash_attention_fwd(NULL, &a, &q, &k, &v, &yd, &ld) == IT_OK;
}

static void flash_cases(conf_ctx *ctx, bool bwd) {
    for (int t = 0; t < 4; t++) {
        it_dtype dt = conf_float_dtypes[t];
        for (size_t i = 0; i < sizeof flash_shapes / sizeof flash_shapes[0]; i++) {
            const flash_shape *e = &flash_shapes[i];
            conf_case c;
            conf_case_init(&c, conf_dtype_short(dt), "%s", e->label);
            conf_case_tol(&c, CONF_TOL_SUM, dt); /* the products' and the exp sums' order is the backend's */
            c.flash.scale = 1.0f / sqrtf((float)e->D);
            c.flash.causal = e->causal;
            c.flash.q_offset = e->q_offset;
            int il = e->interleave;
            conf_add_heads(&c, "q", CONF_IN, dt, e->B, e->H, e->T, e->D, il, 0);
            conf_add_heads(&c, "k", CONF_IN, dt, e->B, e->Hkv, e->S, e->D, il, il > 1 ? 1 : 0);
            conf_add_heads(&c, "v", CONF_IN, dt, e->B, e->Hkv, e->S, e->D, il, il > 1 ? 2 : 0);
            int64_t lsh[3] = {e->B, e->H, e->T};
            bool ok = true;
            if (!bwd) {
                conf_add_heads(&c, "y", CONF_OUT, dt, e->B, e->H, e->T, e->D, 1, 0);
                conf_add(&c, "lse", CONF_OUT, IT_DTYPE_FP32, 3, lsh, CONF_CONTIG, 0);
            } else {
                conf_add_heads(&c, "y", CONF_IN, dt, e->B, e->H, e->T, e->D, 1, 0);
                conf_add_heads(&c, "dy", CONF_IN, dt, e->B, e->H, e->T, e->D, 1, 0);
                conf_add(&c, "lse", CONF_IN, IT_DTYPE_FP32, 3, lsh, CONF_CONTIG, 0);
                ok = prepare_forward(&c, 3, 5);
                conf_add_heads(&c, "dq", CONF_OUT, dt, e->B, e->H, e->T, e->D, il, 0);
                conf_add_heads(&c, "dk", CONF_OUT, dt, e->B, e->Hkv, e->S, e->D, il, il > 1 ? 1 : 0);
                conf_add_heads(&c, "dv", CONF_OUT, dt, e->B, e->Hkv, e->S, e->D, il, il > 1 ? 2 : 0);
            }
            /* a dtype the CPU's forward does not take has no reference either */
            bool noref = !ok || conf_run(ctx, &c) == CONF_SKIP_NOREF;
            conf_case_free(&c);
            if (noref) break;
        }
    }
}

void conf_cases_flash_attention_fwd(conf_ctx *ctx) { flash_cases(ctx, false); }
void conf_cases_flash_attention_bwd(conf_ctx *ctx) { flash_cases(ctx, true); }
