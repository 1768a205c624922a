/* Flash attention: the models' attention as one autograd node over the backend's
 * flash_attention_fwd / _bwd slots (backend.h), which keep the per-row log-sum-exp (B, H, T)
 * instead of the (B, H, T, T) probabilities. The backward recomputes the probabilities block
 * by block from q, k, v, y and lse, so what stays alive for it grows linearly in T.
 *
 * It is tried first wherever attention runs (ops/attention.c), when --flash is on (the
 * default; InfiniTrain's flag, default false there) and the device's backend has both slots;
 * a call the backend declines, or a backend without them, falls through to the fused
 * attention slots and then to the composition, which stays the reference the tests compare
 * with. Under autocast q, k and v go to the kernel in the autocast dtype (rounded once, as
 * the composition's products would read them); the kernel accumulates in fp32 and does not
 * round the probabilities before P V, where the composition does: the two differ by that
 * rounding, within bf16 training's 1e-2. The node is named "attention", as the others, so
 * the precision checker and the profiler see the same operator. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

static atomic_bool flash_on = true;

/* The first decline since it_flash_attention_set: its message, written once by the thread
 * that wins `declined_claim` and published by `declined_ready` (ranks may be threads). */
static atomic_flag declined_claim = ATOMIC_FLAG_INIT;
static atomic_bool declined_ready = false;
static char declined_msg[512];

void it_flash_attention_set(bool enabled) {
    atomic_store(&flash_on, enabled);
    atomic_store(&declined_ready, false);
    atomic_flag_clear(&declined_claim);
}
bool it_flash_attention_enabled(void) { return atomic_load(&flash_on); }

bool it_flash_attention_available(it_device dev) {
    return it__kernel_native(dev, IT_SLOT(flash_attention_fwd)) && it__kernel_native(dev, IT_SLOT(flash_attention_bwd));
}

const char *it_flash_attention_declined(void) { return atomic_load(&declined_ready) ? declined_msg : NULL; }

void it__flash_note_declined(void) {
    if (atomic_flag_test_and_set(&declined_claim)) return;
    snprintf(declined_msg, sizeof declined_msg, "%s", it_last_error());
    atomic_store(&declined_ready, true);
}

bool it__flash_wanted(const it_tensor *x) {
    if (!atomic_load(&flash_on)) return false;
    const char *env = getenv("IT_FUSED_KERNELS"); /* 0: compose everything (test_attention) */
    if (env && strcmp(env, "0") == 0) return false;
    return it_flash_attention_available(it_tensor_device(x));
}

/* y (B, T, H * D) and lse (B, H, T) from the forward; NULL with *declined when the backend
 * declined (its error cleared: the caller composes). */
static it_tensor *forward(const it_tensor *src, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                          const it_flash_args *a, it_tensor **lse, bool *declined) {
    *declined = false;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    it_device dev = it_tensor_device(src);
    it_tensor *y = it__scope_add(it__tensor_new_owned(dev, src->dtype, 3, (int64_t[]){B, T, H * D}));
    *lse = it__scope_add(it__tensor_new_owned(dev, IT_DTYPE_FP32, 3, (int64_t[]){B, H, T}));
    OP_REQUIRE(y && *lse);
    it_tdesc yd = it__heads_of(y, H, D, 0, D, 1), ld = it_tensor_desc(*lse);
    it_status st = KCALL(dev, flash_attention_fwd, a, q, k, v, &yd, &ld);
    if (st == IT_ERR_UNSUPPORTED) {
        it__flash_note_declined();
        it_error_clear();
        *declined = true;
        return NULL;
    }
    return st ? NULL : y;
}

static void save(it_node *n, it_tensor *y, it_tensor *lse, const it_flash_args *a, int64_t H) {
    it__node_save(n, y);
    it__node_save(n, lse);
    n->f[0] = a->scale;
    n->i[0] = H;
    n->i[1] = a->q_offset;
}

/* The backward kernel on the node's saved y and lse, dy made contiguous. */
static it_status backward(it_node *n, it_tensor *dy, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                          it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    it_tensor *y = n->saved[0], *lse = n->saved[1], *dyc = it_tensor_contiguous(dy);
    if (!dyc) return it_last_status();
    int64_t H = q->shape[1], D = q->shape[3];
    it_tdesc yd = it__heads_of(y, H, D, 0, D, 1), dyd = it__heads_of(dyc, H, D, 0, D, 1), ld = it_tensor_desc(lse);
    it_flash_args a = {(float)n->f[0], true, n->i[1]};
    return KCALL(it_tensor_device(y), flash_attention_bwd, &a, q, k, v, &yd, &dyd, &ld, dq, dk, dv);
}

/* ---------------------------------------------------------------- GPT-2: qkv (B, T, 3C) */

static it_status qkv_backward(it_node *n, it_tensor *dy) {
    it_tensor *qkv = n->in[0], *dqkv = it__empty_like(qkv);
    if (!dqkv) return it_last_status();
    int64_t H = n->i[0], C = qkv->shape[2] / 3, D = C / H;
    it_tdesc q = it__heads_of(qkv, H, D, 0, D, 1), k = it__heads_of(qkv, H, D, C, D, 1),
             v = it__heads_of(qkv, H, D, 2 * C, D, 1);
    it_tdesc dq = it__heads_of(dqkv, H, D, 0, D, 1), dk = it__heads_of(dqkv, H, D, C, D, 1),
             dv = it__heads_of(dqkv, H, D, 2 * C, D, 1);
    it_status st = backward(n, dy, &q, &k, &v, &dq, &dk, &dv);
    return st ? st : it__accum_grad(qkv, dqkv);
}

it_tensor *it__flash_qkv(it_tensor *qkv, int64_t H, bool *declined) {
    int64_t C = qkv->shape[2] / 3, D = C / H;
    it_tdesc q = it__heads_of(qkv, H, D, 0, D, 1), k = it__heads_of(qkv, H, D, C, D, 1),
             v = it__heads_of(qkv, H, D, 2 * C, D, 1);
    it_flash_args a = {1.0f / sqrtf((float)D), true, 0};
    it_tensor *lse = NULL, *y = forward(qkv, &q, &k, &v, &a, &lse, declined);
    OP_REQUIRE(y);
    if (it__needs_grad(1, &qkv)) {
        it_node *n = it__node_record("attention", qkv_backward, y, 1, &qkv);
        OP_REQUIRE(n);
        save(n, y, lse, &a, H);
    }
    return y;
}

/* ---------------------------------------------------------------- LLaMA: q (B, T, H, D), k, v (B, T, Hkv, D) */

#define BHTD(t, h) it__heads_of((t), (h), (t)->shape[3], 0, (t)->strides[2], (t)->strides[3])

static it_status qkv3_backward(it_node *n, it_tensor *dy) {
    it_tensor *qt = n->in[0], *kt = n->in[1], *vt = n->in[2];
    it_tensor *dqt = it__empty_like(qt), *dkt = it__empty_like(kt), *dvt = it__empty_like(vt);
    if (!dqt || !dkt || !dvt) return it_last_status();
    int64_t H = qt->shape[2], Hkv = kt->shape[2];
    /* the kernel sums each kv head's gradient over its group: no expand, no group sum */
    it_tdesc q = BHTD(qt, H), k = BHTD(kt, Hkv), v = BHTD(vt, Hkv), dq = BHTD(dqt, H), dk = BHTD(dkt, Hkv),
             dv = BHTD(dvt, Hkv);
    it_status st = backward(n, dy, &q, &k, &v, &dq, &dk, &dv);
    if (!st && qt->requires_grad) st = it__accum_grad(qt, dqt);
    if (!st && kt->requires_grad) st = it__accum_grad(kt, dkt);
    if (!st && vt->requires_grad) st = it__accum_grad(vt, dvt);
    return st;
}

/* k and v may hold more positions than q (S >= T: a KV cache's keys): query t sits at key
 * position S - T + t. */
it_tensor *it__flash_qkv3(it_tensor *q, it_tensor *k, it_tensor *v, bool *declined) {
    int64_t H = q->shape[2], Hkv = k->shape[2], D = q->shape[3];
    it_tdesc qd = BHTD(q, H), kd = BHTD(k, Hkv), vd = BHTD(v, Hkv);
    it_flash_args a = {1.0f / sqrtf((float)D), true, k->shape[1] - q->shape[1]};
    it_tensor *lse = NULL, *y = forward(q, &qd, &kd, &vd, &a, &lse, declined);
    OP_REQUIRE(y);
    it_tensor *in[3] = {q, k, v};
    if (it__needs_grad(3, in)) {
        it_node *n = it__node_record("attention", qkv3_backward, y, 3, in);
        OP_REQUIRE(n);
        save(n, y, lse, &a, H);
    }
    return y;
}

#undef BHTD
