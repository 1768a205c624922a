/* Context parallelism: the sequence cut over a CP group (InfiniTrain's feat/context_parallel
 * branch; Megatron-LM's and torchtitan's context parallel).
 *
 * Each rank of the group holds T/CP rows of every sequence: InfiniTrain's contiguous slice
 * [r*T/CP, (r+1)*T/CP), or with load balancing (Megatron's and torchtitan's) two chunks of
 * T/(2CP), chunk r and chunk 2CP-1-r, so that every rank has as much causal work as the
 * others. Everything but attention is per token and runs on the rank's rows alone; attention
 * sees every earlier key, brought in one of three ways (--cp_comm_type):
 *   p2p         ring attention: the K/V blocks go round the ring, each rank attends its
 *               queries to each block it may see with the backend's flash kernel, and merges
 *               the partial outputs by their log-sum-exps; backward sends the blocks round
 *               again with their K/V gradients, which end at their owner;
 *   all_gather  the whole K and V gathered (backward: their gradients reduce-scattered), the
 *               local queries attend to the keys before them;
 *   a2a         Ulysses: an all-to-all turns sequence-cut q, k, v into head-cut ones over the
 *               whole sequence, attention runs on CP-th of the heads, and a second all-to-all
 *               turns the output back.
 * Every chunk pair a rank computes is either wholly visible or a diagonal one (equal chunks
 * at the same positions): the flash kernel's q_offset (query position minus key position)
 * gives both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/dist.h"
#include "ops/ops_common.h"

const char *it_cp_comm_name(it_cp_comm c) {
    switch (c) {
    case IT_CP_P2P: return "p2p";
    case IT_CP_ALL_GATHER: return "all_gather";
    case IT_CP_A2A: return "a2a";
    }
    return "?";
}

/* The first global position of chunk i (0, or 1 when balanced) of rank r. */
static int64_t chunk_start(int64_t T, int cp, int r, bool balance, int i) {
    if (!balance) return (int64_t)r * (T / cp);
    int64_t c = T / (2 * cp);
    return (i == 0 ? (int64_t)r : (int64_t)(2 * cp - 1 - r)) * c;
}

int it_cp_runs(int64_t T, int cp, int r, bool balance, int64_t lo, int64_t n, int64_t start[2], int64_t len[2]) {
    int nc = balance ? 2 : 1, k = 0;
    int64_t c = T / cp / nc;
    for (int i = 0; i < nc; i++) {
        int64_t a = lo > i * c ? lo : i * c, b = lo + n < (i + 1) * c ? lo + n : (i + 1) * c;
        if (a >= b) continue;
        start[k] = chunk_start(T, cp, r, balance, i) + (a - i * c);
        len[k++] = b - a;
    }
    return k;
}

void it_cp_slice_host(const int32_t *src, int32_t *dst, int64_t B, int64_t T, int cp, int r, bool balance) {
    int64_t Tl = T / cp, st[2], ln[2];
    int n = it_cp_runs(T, cp, r, balance, 0, Tl, st, ln);
    for (int64_t b = 0; b < B; b++) { /* in place too: every row moves towards the start */
        int32_t *o = dst + b * Tl;
        for (int k = 0; k < n; k++) {
            memmove(o, src + b * T + st[k], sizeof(int32_t) * (size_t)ln[k]);
            o += ln[k];
        }
    }
}

/* ---------------------------------------------------------------- helpers */

/* (B, L, H, D) rows [r0, r0 + n) as the kernels' (B, H, n, D) view. */
static it_tdesc bhtd(const it_tensor *t, int64_t r0, int64_t n) {
    it_tdesc d = it_tensor_desc(t);
    d.data = (char *)d.data + (size_t)(r0 * t->strides[1]) * it_dtype_size(t->dtype);
    d.ndim = 4;
    int64_t shape[4] = {t->shape[0], t->shape[2], n, t->shape[3]};
    int64_t strides[4] = {t->strides[0], t->strides[2], t->strides[1], t->strides[3]};
    for (int i = 0; i < 4; i++) d.shape[i] = shape[i], d.strides[i] = strides[i];
    return d;
}

/* (B, H, n) contiguous as (B, H, n, D) with stride 0 on D. */
static it_tdesc rows_bcast(const it_tensor *t, int64_t D) {
    it_tdesc d = it_tensor_desc(t);
    d.ndim = 4;
    d.shape[3] = D;
    d.strides[3] = 0;
    return d;
}

static it_tensor *new_t(it_device dev, it_dtype dt, int nd, const int64_t *shape) {
    return it__scope_add(it__tensor_new_owned(dev, dt, nd, shape));
}

/* o (fp32) += x (any float dtype, x's shape): x widened first when it is not fp32. */
static it_status add_into(it_device dev, const it_tdesc *o, const it_tdesc *x) {
    if (x->dtype == IT_DTYPE_FP32) return KCALL(dev, binary, IT_BINARY_ADD, o, x, (it_tdesc *)o);
    it_tensor *w = new_t(dev, IT_DTYPE_FP32, x->ndim, x->shape);
    if (!w) return it_last_status();
    it_tdesc wd = it_tensor_desc(w);
    it_status st = KCALL(dev, cast, x, &wd);
    return st ? st : KCALL(dev, binary, IT_BINARY_ADD, o, &wd, (it_tdesc *)o);
}

/* The chunk pairs a rank computes at a ring step: local query chunk i against chunk j of the
 * block from rank src, when any of its keys is visible (then q_offset >= 0). */
typedef struct ring {
    it_dist *g;
    int cp, r, nc;
    bool balance;
    int64_t T, c; /* the whole length, the chunk length */
} ring;

static bool pair_offset(const ring *R, int src, int i, int j, int64_t *q_offset) {
    *q_offset = chunk_start(R->T, R->cp, R->r, R->balance, i) - chunk_start(R->T, R->cp, src, R->balance, j);
    return *q_offset >= 0;
}

/* Send this step's tensors on to the next rank and receive the previous rank's into `in`. */
static it_status ring_pass(const ring *R, int n, it_tensor *const *out, it_tensor *const *in, int tag) {
    int next = (R->r + 1) % R->cp, prev = (R->r + R->cp - 1) % R->cp;
    int peers[8], tags[8];
    it_status st = IT_OK;
    for (int k = 0; k < n && !st; k++) st = it_dist_send(R->g, out[k], next, tag + k);
    for (int k = 0; k < n; k++) peers[k] = prev, tags[k] = tag + k;
    /* the receives in one group with the held sends (a device ccl's sends wait for theirs) */
    if (!st) st = it_dist_exchange(R->g, n, in, peers, tags);
    return st ? st : it_dist_send_wait(R->g);
}

/* ---------------------------------------------------------------- p2p: ring attention */

/* acc (B, H, c, D) fp32 and lacc (B, H, c) fp32 merged with a block's yb ((B, c, H, D) rows,
 * its dtype) and lb: lse = log(e^lacc + e^lb), acc = acc e^(lacc-lse) + yb e^(lb-lse), with the
 * maximum taken out first. */
static it_status merge(it_device dev, it_tensor *acc, it_tensor *lacc, it_tensor *yb, it_tensor *lb) {
    int64_t B = acc->shape[0], H = acc->shape[1], c = acc->shape[2], D = acc->shape[3];
    const int64_t s3[3] = {B, H, c};
    it_tensor *m = new_t(dev, IT_DTYPE_FP32, 3, s3), *a = new_t(dev, IT_DTYPE_FP32, 3, s3),
              *b = new_t(dev, IT_DTYPE_FP32, 3, s3), *s = new_t(dev, IT_DTYPE_FP32, 3, s3),
              *t = new_t(dev, IT_DTYPE_FP32, 4, (int64_t[]){B, H, c, D});
    if (!m || !a || !b || !s || !t) return it_last_status();
    it_tdesc L = it_tensor_desc(lacc), Lb = it_tensor_desc(lb), M = it_tensor_desc(m), A = it_tensor_desc(a),
             Bd = it_tensor_desc(b), S = it_tensor_desc(s), Y = it_tensor_desc(acc), Tt = it_tensor_desc(t),
             Yb = bhtd(yb, 0, c), Ab = rows_bcast(a, D), Bb = rows_bcast(b, D);
    it_status st;
    if ((st = KCALL(dev, binary, IT_BINARY_MAX, &L, &Lb, &M)) || (st = KCALL(dev, binary, IT_BINARY_SUB, &L, &M, &A)) ||
        (st = KCALL(dev, unary, IT_UNARY_EXP, 1.0f, &A, &A)) ||
        (st = KCALL(dev, binary, IT_BINARY_SUB, &Lb, &M, &Bd)) ||
        (st = KCALL(dev, unary, IT_UNARY_EXP, 1.0f, &Bd, &Bd)) ||
        (st = KCALL(dev, binary, IT_BINARY_ADD, &A, &Bd, &S)) || (st = KCALL(dev, unary, IT_UNARY_LOG, 1.0f, &S, &L)) ||
        (st = KCALL(dev, binary, IT_BINARY_ADD, &L, &M, &L)) || (st = KCALL(dev, binary, IT_BINARY_DIV, &A, &S, &A)) ||
        (st = KCALL(dev, binary, IT_BINARY_DIV, &Bd, &S, &Bd)))
        return st;
    if (yb->dtype != IT_DTYPE_FP32 && (st = KCALL(dev, cast, &Yb, &Tt))) return st;
    const it_tdesc *ybf = yb->dtype == IT_DTYPE_FP32 ? &Yb : &Tt;
    if ((st = KCALL(dev, binary, IT_BINARY_MUL, ybf, &Bb, &Tt)) ||
        (st = KCALL(dev, binary, IT_BINARY_MUL, &Y, &Ab, &Y)))
        return st;
    return KCALL(dev, binary, IT_BINARY_ADD, &Y, &Tt, &Y);
}

static it_status ring_backward(it_node *n, it_tensor *dy);

/* q (B, Tl, H, D), k and v (B, Tl, Hkv, D) contiguous, one dtype -> (B, Tl, H * D). NULL with
 * *declined when the backend declines the first flash call (before anything was sent: every
 * rank has the same shapes and declines alike), its error cleared: the caller gathers. */
static it_tensor *ring_attention(const ring *R, it_tensor *q, it_tensor *k, it_tensor *v, bool *declined) {
    it_device dev = it_tensor_device(q);
    int64_t B = q->shape[0], Tl = q->shape[1], H = q->shape[2], D = q->shape[3], c = R->c;
    float scale = 1.0f / sqrtf((float)D);
    it_tensor *y = new_t(dev, q->dtype, 4, (int64_t[]){B, Tl, H, D});
    it_tensor *yb = new_t(dev, q->dtype, 4, (int64_t[]){B, c, H, D}),
              *lb = new_t(dev, IT_DTYPE_FP32, 3, (int64_t[]){B, H, c});
    it_tensor *acc[2] = {NULL, NULL}, *lse[2] = {NULL, NULL};
    bool have[2] = {false, false};
    /* the block held: k, v (this rank's) at step 0, then two receive buffers in turn */
    it_tensor *buf[2][2] = {{it__empty_like(k), it__empty_like(v)}, {NULL, NULL}}, *cur[2] = {k, v};
    if (R->cp > 2) buf[1][0] = it__empty_like(k), buf[1][1] = it__empty_like(v);
    OP_REQUIRE(y && yb && lb && buf[0][0] && buf[0][1] && (R->cp <= 2 || (buf[1][0] && buf[1][1])));
    for (int i = 0; i < R->nc; i++) {
        acc[i] = new_t(dev, IT_DTYPE_FP32, 4, (int64_t[]){B, H, c, D});
        lse[i] = new_t(dev, IT_DTYPE_FP32, 3, (int64_t[]){B, H, c});
        OP_REQUIRE(acc[i] && lse[i]);
    }
    it_status st = IT_OK;
    for (int s = 0; s < R->cp && !st; s++) {
        int src = (R->r - s + R->cp) % R->cp;
        for (int i = 0; i < R->nc && !st; i++)
            for (int j = 0; j < R->nc && !st; j++) {
                it_flash_args a = {scale, true, 0};
                if (!pair_offset(R, src, i, j, &a.q_offset)) continue;
                it_tdesc qd = bhtd(q, i * c, c), kd = bhtd(cur[0], j * c, c), vd = bhtd(cur[1], j * c, c);
                it_tdesc yd = bhtd(have[i] ? yb : y, have[i] ? 0 : i * c, c),
                         ld = it_tensor_desc(have[i] ? lb : lse[i]);
                if ((st = KCALL(dev, flash_attention_fwd, &a, &qd, &kd, &vd, &yd, &ld))) {
                    if (st == IT_ERR_UNSUPPORTED && s == 0 && !have[0] && !have[1]) {
                        it__flash_note_declined();
                        it_error_clear();
                        *declined = true;
                        return NULL;
                    }
                    break;
                }
                if (!have[i]) { /* the first block of these queries: taken as it is */
                    it_tdesc ad = it_tensor_desc(acc[i]);
                    st = KCALL(dev, cast, &yd, &ad);
                    have[i] = true;
                } else {
                    st = merge(dev, acc[i], lse[i], yb, lb);
                }
            }
        if (!st && s + 1 < R->cp) {
            st = ring_pass(R, 2, cur, buf[s % 2], 16 * s);
            cur[0] = buf[s % 2][0], cur[1] = buf[s % 2][1];
        }
    }
    for (int i = 0; i < R->nc && !st; i++) { /* the merged output, rounded once to q's dtype */
        it_tdesc ad = it_tensor_desc(acc[i]), yd = bhtd(y, i * c, c);
        st = KCALL(dev, cast, &ad, &yd);
    }
    if (st) return NULL;
    it_tensor *out = it_tensor_view(y, 3, (int64_t[]){B, Tl, H * D});
    OP_REQUIRE(out);
    it_tensor *in[3] = {q, k, v};
    if (it__needs_grad(3, in)) {
        it_node *nd = it__node_record("attention", ring_backward, out, 3, in);
        OP_REQUIRE(nd);
        it__node_save(nd, y);
        for (int i = 0; i < R->nc; i++) it__node_save(nd, lse[i]);
        nd->ctx = R->g;
        nd->i[0] = R->balance;
        nd->i[1] = R->T;
    }
    return out;
}

static it_status ring_backward(it_node *n, it_tensor *dy) {
    it_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *y = n->saved[0];
    ring R = {n->ctx, it_dist_world(n->ctx), it_dist_rank(n->ctx), n->i[0] ? 2 : 1, n->i[0] != 0, n->i[1], 0};
    R.c = R.T / R.cp / R.nc;
    it_device dev = it_tensor_device(q);
    int64_t B = q->shape[0], Tl = q->shape[1], H = q->shape[2], D = q->shape[3], Hkv = k->shape[2], c = R.c;
    float scale = 1.0f / sqrtf((float)D);
    it_tensor *dyc = it_tensor_contiguous(dy);
    it_tensor *g = dyc ? it_tensor_view(dyc, 4, (int64_t[]){B, Tl, H, D}) : NULL;
    if (!g) return it_last_status();
    const int64_t skv[4] = {B, Tl, Hkv, D}, sq[4] = {B, Tl, H, D};
    /* fp32 sums; the kernel's parts in q's dtype first */
    it_tensor *dq = new_t(dev, IT_DTYPE_FP32, 4, sq), *pq = new_t(dev, q->dtype, 4, (int64_t[]){B, c, H, D}),
              *pk = new_t(dev, q->dtype, 4, (int64_t[]){B, c, Hkv, D}),
              *pv = new_t(dev, q->dtype, 4, (int64_t[]){B, c, Hkv, D});
    /* travelling with each block: k, v and their gradients so far; received into two sets of
     * buffers in turn */
    it_tensor *cur[4] = {k, v, new_t(dev, IT_DTYPE_FP32, 4, skv), new_t(dev, IT_DTYPE_FP32, 4, skv)}, *buf[2][4];
    bool ok = dq && pq && pk && pv && cur[2] && cur[3];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++) ok = ok && (buf[b][t] = new_t(dev, t < 2 ? k->dtype : IT_DTYPE_FP32, 4, skv));
    if (!ok) return it_last_status();
    it_status st;
    if ((st = it_tensor_fill(dq, it_scalar_f64(0))) || (st = it_tensor_fill(cur[2], it_scalar_f64(0))) ||
        (st = it_tensor_fill(cur[3], it_scalar_f64(0))))
        return st;
    for (int s = 0; s < R.cp && !st; s++) {
        int src = (R.r - s + R.cp) % R.cp;
        for (int i = 0; i < R.nc && !st; i++)
            for (int j = 0; j < R.nc && !st; j++) {
                it_flash_args a = {scale, true, 0};
                if (!pair_offset(&R, src, i, j, &a.q_offset)) continue;
                it_tdesc qd = bhtd(q, i * c, c), kd = bhtd(cur[0], j * c, c), vd = bhtd(cur[1], j * c, c),
                         yd = bhtd(y, i * c, c), gd = bhtd(g, i * c, c), ld = it_tensor_desc(n->saved[1 + i]),
                         dqd = bhtd(pq, 0, c), dkd = bhtd(pk, 0, c), dvd = bhtd(pv, 0, c);
                if ((st = KCALL(dev, flash_attention_bwd, &a, &qd, &kd, &vd, &yd, &gd, &ld, &dqd, &dkd, &dvd))) break;
                it_tdesc oq = bhtd(dq, i * c, c), ok_ = bhtd(cur[2], j * c, c), ov = bhtd(cur[3], j * c, c);
                if ((st = add_into(dev, &oq, &dqd)) || (st = add_into(dev, &ok_, &dkd)) ||
                    (st = add_into(dev, &ov, &dvd)))
                    break;
            }
        if (st || R.cp == 1) break;
        /* on round the ring: the block and its gradients; after the last step the gradients
         * alone, to the next rank, the block's owner */
        int m = s + 1 < R.cp ? 4 : 2, off = 4 - m;
        st = ring_pass(&R, m, cur + off, buf[s % 2] + off, 16 * s + 8);
        for (int t = off; t < 4; t++) cur[t] = buf[s % 2][t];
    }
    it_tensor *in[3] = {q, k, v}, *sums[3] = {dq, cur[2], cur[3]};
    for (int t = 0; t < 3 && !st; t++) {
        if (!in[t]->requires_grad) continue;
        it_tensor *gt = in[t]->dtype == IT_DTYPE_FP32 ? sums[t] : it_tensor_to_dtype(sums[t], in[t]->dtype);
        st = gt ? it__accum_grad(in[t], gt) : it_last_status();
    }
    return st;
}

/* ---------------------------------------------------------------- all_gather and a2a */

/* Rank-major rows (rank rr's Tl rows at rr*Tl, its two chunks when balanced) in the global
 * order of the positions, and back. */
static it_tensor *rank_to_global(it_tensor *x, int cp, bool balance) {
    if (!balance || !x) return x;
    int64_t c = x->shape[1] / (2 * cp);
    it_tensor *parts[128];
    for (int g = 0; g < 2 * cp; g++) {
        int rr = g < cp ? g : 2 * cp - 1 - g, half = g < cp ? 0 : 1;
        parts[g] = it_slice(x, 1, (rr * 2 + half) * c, (rr * 2 + half + 1) * c, 1);
    }
    return it_cat(2 * cp, parts, 1);
}

static it_tensor *global_to_rank(it_tensor *x, int cp, bool balance) {
    if (!balance || !x) return x;
    int64_t c = x->shape[1] / (2 * cp);
    it_tensor *parts[128];
    for (int rr = 0; rr < cp; rr++)
        for (int half = 0; half < 2; half++) {
            int g = half ? 2 * cp - 1 - rr : rr;
            parts[rr * 2 + half] = it_slice(x, 1, g * c, (g + 1) * c, 1);
        }
    return it_cat(2 * cp, parts, 1);
}

typedef it_tensor *(*attend_fn)(it_tensor *q, it_tensor *k, it_tensor *v);

/* The whole K and V on every rank; each local chunk of queries attends to the keys up to its
 * end (it_attention's S >= T: query t at key position S - T + t). */
static it_tensor *gathered_attention(const ring *R, it_tensor *q, it_tensor *k, it_tensor *v, attend_fn attend) {
    it_tensor *kg = rank_to_global(it_sp_gather(R->g, k), R->cp, R->balance);
    it_tensor *vg = rank_to_global(it_sp_gather(R->g, v), R->cp, R->balance);
    OP_REQUIRE(kg && vg);
    it_tensor *ys[2];
    for (int i = 0; i < R->nc; i++) {
        int64_t end = chunk_start(R->T, R->cp, R->r, R->balance, i) + R->c;
        ys[i] =
            attend(it_slice(q, 1, i * R->c, (i + 1) * R->c, 1), it_slice(kg, 1, 0, end, 1), it_slice(vg, 1, 0, end, 1));
    }
    return it_cat(R->nc, ys, 1);
}

/* Ulysses' all-to-all, differentiable; each the other's backward.
 * to_heads: x (B, Tl, Hx, D) -> (B, CP*Tl, Hx/CP, D): rows of rank j at j*Tl, heads of this
 *           rank's group (r*Hx/CP ...);
 * to_rows:  x (B, CP*Tl, Hl, D) -> (B, Tl, CP*Hl, D): heads of group j from rank j, this
 *           rank's rows. */
static it_tensor *a2a(it_dist *g, it_tensor *x, bool to_heads);

static it_status a2a_backward(it_node *n, it_tensor *dy) {
    it_tensor *g = a2a(n->ctx, dy, n->i[0] == 0);
    return g ? it__accum_grad(n->in[0], g) : it_last_status();
}

static it_tensor *a2a(it_dist *g, it_tensor *x, bool to_heads) {
    OP_REQUIRE(x);
    int cp = it_dist_world(g), r = it_dist_rank(g);
    int64_t B = x->shape[0], L = x->shape[1], Hx = x->shape[2], D = x->shape[3];
    int64_t shape[4] = {B, to_heads ? L * cp : L / cp, to_heads ? Hx / cp : Hx * cp, D};
    int out_dim = to_heads ? 1 : 2, in_dim = to_heads ? 2 : 1; /* pieces land along out_dim */
    int64_t in_len = x->shape[in_dim] / cp, out_len = shape[out_dim] / cp;
    it_tensor *out = new_t(it_tensor_device(x), x->dtype, 4, shape);
    OP_REQUIRE(out);
    it_tensor *recv[64] = {0};
    it_status st = IT_OK;
    for (int j = 0; j < cp && !st; j++) { /* piece j of x goes to rank j */
        it_tensor *piece = it_tensor_contiguous(it_tensor_slice(x, in_dim, j * in_len, (j + 1) * in_len, 1));
        if (!piece) return NULL;
        if (j == r) {
            it_tensor *w = it_tensor_slice(out, out_dim, j * out_len, (j + 1) * out_len, 1);
            st = w ? it_tensor_copy_(w, piece) : it_last_status();
        } else {
            st = it_dist_send(g, piece, j, 40);
        }
    }
    /* every receive in one group with the held sends (a device ccl's sends wait for theirs) */
    it_tensor *win[64] = {0}, *rv[64];
    int peers[64], tags[64], nr = 0;
    for (int j = 0; j < cp && !st; j++) {
        if (j == r) continue;
        win[j] = it_tensor_slice(out, out_dim, j * out_len, (j + 1) * out_len, 1);
        recv[j] = win[j] ? new_t(it_tensor_device(x), x->dtype, 4, win[j]->shape) : NULL;
        if (!recv[j]) return NULL;
        rv[nr] = recv[j], peers[nr] = j, tags[nr++] = 40;
    }
    if (!st && nr) st = it_dist_exchange(g, nr, rv, peers, tags);
    for (int j = 0; j < cp && !st; j++)
        if (j != r) st = it_tensor_copy_(win[j], recv[j]);
    if (!st) st = it_dist_send_wait(g);
    if (st) return NULL;
    if (it__needs_grad(1, &x)) {
        it_node *n = it__node_record(to_heads ? "cp_a2a_heads" : "cp_a2a_rows", a2a_backward, out, 1, &x);
        OP_REQUIRE(n);
        n->ctx = g;
        n->i[0] = to_heads;
    }
    return out;
}

static it_tensor *ulysses_attention(const ring *R, it_tensor *q, it_tensor *k, it_tensor *v, attend_fn attend) {
    int64_t B = q->shape[0], Tl = q->shape[1], H = q->shape[2], D = q->shape[3];
    it_tensor *qh = rank_to_global(a2a(R->g, q, true), R->cp, R->balance);
    it_tensor *kh = rank_to_global(a2a(R->g, k, true), R->cp, R->balance);
    it_tensor *vh = rank_to_global(a2a(R->g, v, true), R->cp, R->balance);
    it_tensor *y = attend(qh, kh, vh); /* (B, T, H/CP * D), global order */
    y = y ? it_reshape(y, 4, (int64_t[]){B, Tl * R->cp, H / R->cp, D}) : NULL;
    y = a2a(R->g, global_to_rank(y, R->cp, R->balance), false); /* (B, Tl, H, D) */
    return y ? it_reshape(y, 3, (int64_t[]){B, Tl, H * D}) : NULL;
}

/* ---------------------------------------------------------------- the entry point */

bool it_cp_ring_available(it_device dev) { return it_flash_attention_enabled() && it_flash_attention_available(dev); }

static it_tensor *attend_keep(it_tensor *q, it_tensor *k, it_tensor *v) { return it__attention_low(q, k, v); }

it_tensor *it__cp_attention(it_dist *g, int comm, bool balance, it_tensor *q, it_tensor *k, it_tensor *v, bool keep) {
    OP_REQUIRE(q && k && v);
    int cp = it_dist_world(g);
    int64_t Tl = q->shape[1];
    ring R = {g, cp, it_dist_rank(g), balance ? 2 : 1, balance, Tl * cp, balance ? Tl / 2 : Tl};
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[1] != Tl || v->shape[1] != Tl ||
        q->shape[2] % k->shape[2] || (balance && Tl % 2)) {
        it_error(IT_ERR_INVALID_ARG, "context parallel attention: q (B, Tl, H, D), k and v (B, Tl, Hkv, D)%s",
                 balance ? " with Tl even (two chunks)" : "");
        return NULL;
    }
    if (cp > 64) {
        it_error(IT_ERR_INVALID_ARG, "context parallel attention: at most 64 ranks (%d)", cp);
        return NULL;
    }
    attend_fn attend = keep ? attend_keep : it_attention;
    if (comm == IT_CP_A2A) {
        if (q->shape[2] % cp || k->shape[2] % cp) {
            it_error(IT_ERR_INVALID_ARG, "--cp_comm_type a2a: %lld query and %lld kv heads are not divisible by CP %d",
                     (long long)q->shape[2], (long long)k->shape[2], cp);
            return NULL;
        }
        return ulysses_attention(&R, q, k, v, attend);
    }
    if (comm == IT_CP_ALL_GATHER || !it__flash_wanted(q)) return gathered_attention(&R, q, k, v, attend);
    /* the ring: the flash kernels on q, k, v in one dtype (autocast's, as it_attention's) */
    it_dtype ac;
    bool low = it_autocast_enabled(&ac) && ac != IT_DTYPE_FP32 && q->dtype == IT_DTYPE_FP32;
    it_tensor *qx = it_contiguous(low ? it_cast(q, ac) : q), *kx = it_contiguous(low ? it_cast(k, ac) : k),
              *vx = it_contiguous(low ? it_cast(v, ac) : v);
    OP_REQUIRE(qx && kx && vx);
    if (kx->dtype != qx->dtype || vx->dtype != qx->dtype) {
        it_error(IT_ERR_INVALID_ARG, "context parallel attention: q, k and v in different dtypes");
        return NULL;
    }
    bool declined = false;
    it_tensor *y = ring_attention(&R, qx, kx, vx, &declined);
    if (declined) return gathered_attention(&R, q, k, v, attend); /* the kernel's reason: it_flash_attention_declined */
    return low && !keep ? it_cast(y, IT_DTYPE_FP32) : y;
}

it_tensor *it_cp_attention(it_dist *g, it_cp_comm comm, bool balance, it_tensor *q, it_tensor *k, it_tensor *v) {
    return it__cp_attention(g, comm, balance, q, k, v, false);
}
