/* ZeRO stages 1 and 2: the optimizer's state (stage 1), and the reduced gradient (stage 2),
 * sharded over the data-parallel ranks, without full-size copies of the parameters or the
 * gradients.
 *
 * Stage 1, rows. The flat buffers (P elements) are seen as N rows of S = ceil(P/N); rank r
 * owns row r, [r*S, (r+1)*S) clipped to P. When N divides P the gradient is reduce-scattered
 * straight from the model's flat buffer and the parameters all-gathered straight into it (the
 * owned row of the parameters is a view the optimizer updates in place). Otherwise the rows
 * go through a staging buffer of N*w elements (w columns of every row at a time, zeros past
 * P, N*w*4 bytes at most the bucket size), and the short row's owner keeps its row of the
 * parameters in an S-element copy padded with zeros. The partition, and so the clipping
 * norm's order of summation, is the one the first implementation (two padded full-size
 * mirrors) had: the results are bitwise its results.
 *
 * Stage 2, buckets. The flat gradient is cut into buckets of per elements, per a multiple of
 * N (about the bucket size): every bucket but the last splits evenly, rank r owning
 * [lo + r*c, lo + (r+1)*c) of a bucket [lo, lo + N*c); the last bucket's t = len mod N
 * elements past its head, the tail, are all-reduced and updated by every rank alike. A
 * bucket is reduce-scattered as soon as its gradients are final during the step's last
 * backward (it_zero_ready), in one fixed order, last first, on every rank, like DDP's
 * it_grad_sync; the result lands in this rank's g_shard. One optimizer per bucket runs over
 * the owned piece of the model's parameters (a view) and its piece of g_shard, so nothing
 * but g_shard and Adam's moments is kept, and the caller may release the model's flat
 * gradient after backward (it_model_grads_release).
 *
 * Every element's sum is DDP's: the CPU's reduce-scatter and all-reduce both add the ranks
 * in order 0..N-1; the update is the same elementwise kernel. So the parameters are DDP's
 * bitwise, except that the clipping norm is summed shard by shard (equal within fp32
 * rounding). */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "infinitrain/autograd.h"
#include "infinitrain/dist.h"

/* Stage 2: one bucket's evenly split head [lo, lo + N*c), or the tail [lo, lo + n). */
typedef struct zero_piece {
    int64_t lo, n, c; /* flat range [lo, lo+n); c: elements per rank (head), 0 for the tail */
    it_tensor *p, *g; /* this rank's part: a view of the parameters, a view of g_shard */
    it_optimizer *opt;
} zero_piece;

struct it_zero {
    it_dist *d;
    int stage;
    int64_t P, N, r;
    it_tensor *params, *grads; /* the model's flat buffers (retained) */
    it_tensor *g_shard;        /* the reduced gradient this rank owns */
    /* stage 1 */
    int64_t S, w;       /* row length; staging columns per collective (rows not even) */
    it_tensor *p_shard; /* row r of the parameters: a view, or a zero-padded copy (short row) */
    it_optimizer *opt;
    /* stage 2 */
    int64_t per, heads; /* bucket length; g_shard elements of the heads (the tail's follow) */
    int nb;             /* buckets; head[b] is bucket b's head (c may be 0 in the last one) */
    zero_piece *head, tail;
    int64_t *ready; /* per bucket: elements whose gradient is final */
    int next, early;
    bool armed, in_backward; /* it_zero_begin ran (until it_zero_finish); backward runs */
    it_tensor *addend;
};

static void piece_free(zero_piece *p) {
    it_optimizer_free(p->opt);
    it_tensor_release(p->p);
    it_tensor_release(p->g);
}

void it_zero_free(it_zero *z) {
    if (!z) return;
    it_optimizer_free(z->opt);
    for (int b = 0; b < z->nb && z->head; b++) piece_free(&z->head[b]);
    piece_free(&z->tail);
    free(z->head);
    free(z->ready);
    it_tensor *ts[] = {z->params, z->grads, z->g_shard, z->p_shard};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) it_tensor_release(ts[i]);
    free(z);
}

/* A kept view [lo, hi) of flat t. */
static it_tensor *kept_slice(it_tensor *t, int64_t lo, int64_t hi) {
    it_scope_begin();
    it_tensor *s = it_scope_keep(it_tensor_slice(t, 0, lo, hi, 1));
    it_scope_end();
    return s;
}

static it_status new_stage1(it_zero *z, const it_optim_config *cfg) {
    int64_t P = z->P, N = z->N, r = z->r, S = (P + N - 1) / N, one[1] = {S};
    z->S = S;
    it_dtype dt = it_tensor_dtype(z->params);
    if (!(z->g_shard = it__tensor_new_owned(it_tensor_device(z->params), dt, 1, one))) return it_last_status();
    if ((r + 1) * S <= P) {
        z->p_shard = kept_slice(z->params, r * S, (r + 1) * S);
    } else { /* the short row (or an empty one): zeros past P, which Adam leaves zero */
        z->p_shard = it__tensor_new_owned(it_tensor_device(z->params), dt, 1, one);
        it_status st = z->p_shard ? it_tensor_fill(z->p_shard, it_scalar_f64(0)) : it_last_status();
        if (!st && r * S < P) {
            it_scope_begin();
            st = it_tensor_copy_(it_tensor_slice(z->p_shard, 0, 0, P - r * S, 1),
                                 it_tensor_slice(z->params, 0, r * S, P, 1));
            it_scope_end();
        }
        if (st) return st;
    }
    if (!z->p_shard) return it_last_status();
    return it_optimizer_new(cfg, z->p_shard, z->g_shard, &z->opt);
}

static it_status new_stage2(it_zero *z, const it_optim_config *cfg, int64_t per) {
    int64_t P = z->P, N = z->N, r = z->r;
    per = per / N * N;
    if (per < N) per = N;
    z->per = per;
    z->nb = (int)((P + per - 1) / per);
    z->head = calloc((size_t)z->nb + 1, sizeof *z->head);
    z->ready = calloc((size_t)z->nb + 1, sizeof *z->ready);
    if (!z->head || !z->ready) return it_error(IT_ERR_OOM, "zero: out of host memory");
    for (int b = 0; b < z->nb; b++) {
        int64_t lo = (int64_t)b * per, len = lo + per < P ? per : P - lo;
        z->head[b] = (zero_piece){.lo = lo, .n = len / N * N, .c = len / N};
        z->heads += len / N;
        if (b == z->nb - 1) z->tail = (zero_piece){.lo = lo + len / N * N, .n = len % N};
    }
    int64_t one[1] = {z->heads + z->tail.n};
    if (!(z->g_shard = it__tensor_new_owned(it_tensor_device(z->params), it_tensor_dtype(z->params), 1, one)))
        return it_last_status();
    it_status st = it_tensor_fill(z->g_shard, it_scalar_f64(0));
    int64_t off = 0;
    for (int b = 0; b <= z->nb && !st; b++) {
        zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
        int64_t lo = b < z->nb ? pc->lo + r * pc->c : pc->lo, n = b < z->nb ? pc->c : pc->n;
        if (!n) continue;
        pc->p = kept_slice(z->params, lo, lo + n);
        pc->g = kept_slice(z->g_shard, off, off + n);
        off += n;
        st = pc->p && pc->g ? it_optimizer_new(cfg, pc->p, pc->g, &pc->opt) : it_last_status();
    }
    z->next = -1;
    return st;
}

it_status it_zero_new(it_dist *d, int stage, size_t bucket_bytes, const it_optim_config *cfg, it_tensor *params,
                      it_tensor *grads, it_zero **out) {
    *out = NULL;
    if (stage != 1 && stage != 2) return it_error(IT_ERR_INVALID_ARG, "zero: stage %d (supported: 1, 2)", stage);
    if (it_tensor_ndim(params) != 1 || it_tensor_numel(params) != it_tensor_numel(grads) ||
        !it_tensor_is_contiguous(params) || !it_tensor_is_contiguous(grads))
        return it_error(IT_ERR_INVALID_ARG, "zero: params and grads must be flat contiguous tensors of one length");
    it_zero *z = calloc(1, sizeof *z);
    if (!z) return it_error(IT_ERR_OOM, "zero: out of host memory");
    z->d = d;
    z->stage = stage;
    z->params = it_tensor_retain(params);
    z->grads = it_tensor_retain(grads);
    z->P = it_tensor_numel(params);
    z->N = it_dist_world(d);
    z->r = it_dist_rank(d);
    if (!bucket_bytes) bucket_bytes = (size_t)25 << 20;
    int64_t per = (int64_t)(bucket_bytes / it_dtype_size(it_tensor_dtype(params)));
    z->w = per / z->N > 0 ? per / z->N : 1;
    it_status st = stage == 1 ? new_stage1(z, cfg) : new_stage2(z, cfg, per);
    if (st) {
        it_zero_free(z);
        return st;
    }
    *out = z;
    return IT_OK;
}

int it_zero_stage(const it_zero *z) { return z ? z->stage : 0; }

/* ---------------------------------------------------------------- stage 1: rows */

/* Row q's elements in columns [j0, j0 + n): flat [a, e), e <= a when none. */
static void row_span(const it_zero *z, int64_t q, int64_t j0, int64_t n, int64_t *a, int64_t *e) {
    *a = q * z->S + j0;
    *e = *a + n < z->P ? *a + n : z->P;
}

static it_status rows_reduce(it_zero *z) {
    if (z->N * z->S == z->P) return it_dist_reduce_scatter(z->d, z->grads, z->g_shard, IT_CCL_SUM);
    it_status st = IT_OK;
    for (int64_t j0 = 0; j0 < z->S && !st; j0 += z->w) {
        int64_t n = j0 + z->w < z->S ? z->w : z->S - j0, len[1] = {z->N * n};
        it_scope_begin();
        it_tensor *tmp = it_tensor_zeros(it_tensor_device(z->grads), it_tensor_dtype(z->grads), 1, len);
        st = tmp ? IT_OK : it_last_status();
        for (int64_t q = 0, a, e; q < z->N && !st; q++) {
            row_span(z, q, j0, n, &a, &e);
            if (e > a)
                st = it_tensor_copy_(it_tensor_slice(tmp, 0, q * n, q * n + e - a, 1),
                                     it_tensor_slice(z->grads, 0, a, e, 1));
        }
        if (!st) st = it_dist_reduce_scatter(z->d, tmp, it_tensor_slice(z->g_shard, 0, j0, j0 + n, 1), IT_CCL_SUM);
        it_scope_end();
    }
    return st;
}

/* Every rank's row of `shard` (S elements) into flat dst (P). */
static it_status rows_gather(it_zero *z, it_tensor *shard, it_tensor *dst) {
    if (z->N * z->S == z->P) return it_dist_all_gather(z->d, shard, dst);
    it_status st = IT_OK;
    for (int64_t j0 = 0; j0 < z->S && !st; j0 += z->w) {
        int64_t n = j0 + z->w < z->S ? z->w : z->S - j0, len[1] = {z->N * n};
        it_scope_begin();
        it_tensor *tmp = it_tensor_new(it_tensor_device(dst), it_tensor_dtype(dst), 1, len);
        st = tmp ? it_dist_all_gather(z->d, it_tensor_slice(shard, 0, j0, j0 + n, 1), tmp) : it_last_status();
        for (int64_t q = 0, a, e; q < z->N && !st; q++) {
            row_span(z, q, j0, n, &a, &e);
            if (e > a)
                st =
                    it_tensor_copy_(it_tensor_slice(dst, 0, a, e, 1), it_tensor_slice(tmp, 0, q * n, q * n + e - a, 1));
        }
        it_scope_end();
    }
    return st;
}

/* ---------------------------------------------------------------- stage 2: buckets */

static int64_t bucket_len(const it_zero *z, int b) {
    return (int64_t)(b + 1) * z->per < z->P ? z->per : z->P - (int64_t)b * z->per;
}

/* Bucket b: add the earlier micro-steps' sum, reduce-scatter the head, all-reduce the tail. */
static it_status bucket_reduce(it_zero *z, int b) {
    int64_t lo = (int64_t)b * z->per, hi = lo + bucket_len(z, b);
    zero_piece *h = &z->head[b];
    it_status st = IT_OK;
    it_scope_begin();
    if (z->addend) { /* addend + grads, the order DDP's buckets use */
        it_tensor *gb = it_tensor_slice(z->grads, 0, lo, hi, 1), *ab = it_tensor_slice(z->addend, 0, lo, hi, 1);
        if (gb && ab) {
            it_tdesc a = it_tensor_desc(ab), o = it_tensor_desc(gb);
            st = KCALL(it_tensor_device(gb), binary, IT_BINARY_ADD, &a, &o, &o);
        } else {
            st = it_last_status();
        }
    }
    if (!st && h->c)
        st = it_dist_reduce_scatter(z->d, it_tensor_slice(z->grads, 0, h->lo, h->lo + h->n, 1), h->g, IT_CCL_SUM);
    if (!st && b == z->nb - 1 && z->tail.n) {
        st = it_tensor_copy_(z->tail.g, it_tensor_slice(z->grads, 0, z->tail.lo, z->tail.lo + z->tail.n, 1));
        if (!st) st = it_dist_all_reduce(z->d, z->tail.g, IT_CCL_SUM);
    }
    it_scope_end();
    if (z->in_backward) z->early++;
    return st;
}

it_status it_zero_begin(it_zero *z, it_tensor *addend) {
    if (z->stage != 2)
        return it_error(IT_ERR_INVALID_ARG, "zero: it_zero_begin is stage 2's (this is stage %d)", z->stage);
    if (addend && (it_tensor_numel(addend) != z->P || it_tensor_dtype(addend) != it_tensor_dtype(z->grads) ||
                   !it_tensor_is_contiguous(addend)))
        return it_error(IT_ERR_INVALID_ARG, "zero: the addend must be flat like the gradient");
    z->addend = addend;
    for (int b = 0; b < z->nb; b++) z->ready[b] = 0;
    z->next = z->nb - 1;
    z->early = 0;
    z->armed = z->in_backward = true;
    return IT_OK;
}

it_status it_zero_ready(void *ctx, it_tensor *leaf) {
    it_zero *z = ctx;
    if (z->next < 0 || !leaf) return IT_OK;
    it_tensor *gr = it_tensor_grad(leaf);
    if (!gr || !it_tensor_shares_storage(gr, z->grads) || !it_tensor_is_contiguous(gr)) return IT_OK;
    int64_t a = it_tensor_offset(gr) - it_tensor_offset(z->grads), e = a + it_tensor_numel(gr);
    if (a < 0 || e > z->P) return IT_OK;
    for (int64_t b = a / z->per; b < z->nb && b * z->per < e; b++) {
        int64_t lo = b * z->per, hi = lo + bucket_len(z, (int)b);
        z->ready[b] += (e < hi ? e : hi) - (a > lo ? a : lo);
    }
    it_status st = IT_OK;
    while (!st && z->next >= 0 && z->ready[z->next] == bucket_len(z, z->next)) st = bucket_reduce(z, z->next--);
    return st;
}

it_status it_zero_finish(it_zero *z, int *early, int *buckets) {
    if (z->stage != 2)
        return it_error(IT_ERR_INVALID_ARG, "zero: it_zero_finish is stage 2's (this is stage %d)", z->stage);
    if (!z->armed) { /* no hooked backward this step: the whole gradient, now */
        z->next = z->nb - 1;
        z->early = 0;
    }
    z->armed = z->in_backward = false;
    it_status st = IT_OK;
    while (!st && z->next >= 0) st = bucket_reduce(z, z->next--);
    z->next = -1;
    z->addend = NULL;
    if (early) *early = z->early;
    if (buckets) *buckets = z->nb;
    return st;
}

/* The shard of `which` (0: parameters, 1: Adam's m, 2: v) that piece pc's optimizer holds. */
static it_tensor *piece_part(const zero_piece *pc, int which) {
    if (which == 0) return pc->p;
    it_tensor *m = NULL, *v = NULL;
    int64_t *t;
    it_optimizer_state(pc->opt, &m, &v, &t);
    return which == 1 ? m : v;
}

/* Every rank's pieces of `which` into flat dst (P elements). */
static it_status buckets_gather(it_zero *z, int which, it_tensor *dst) {
    it_status st = IT_OK;
    for (int b = 0; b < z->nb && !st; b++) {
        zero_piece *h = &z->head[b];
        if (!h->c) continue;
        it_scope_begin();
        st = it_dist_all_gather(z->d, piece_part(h, which), it_tensor_slice(dst, 0, h->lo, h->lo + h->n, 1));
        it_scope_end();
    }
    if (!st && z->tail.n && which) { /* the tail's parameters are every rank's already */
        it_scope_begin();
        st = it_tensor_copy_(it_tensor_slice(dst, 0, z->tail.lo, z->tail.lo + z->tail.n, 1),
                             piece_part(&z->tail, which));
        it_scope_end();
    }
    return st;
}

/* ---------------------------------------------------------------- the step */

it_status it_zero_reduce_grads(it_zero *z) {
    if (z->stage == 1) return rows_reduce(z);
    z->armed = false; /* the whole gradient, now */
    z->addend = NULL;
    return it_zero_finish(z, NULL, NULL);
}

it_status it_zero_grad_norm(it_zero *z, double *norm) {
    double local = 0;
    it_status st = IT_OK;
    /* stage 2: the tail is every rank's; rank 0 counts it */
    int64_t n = z->stage == 1 || z->r == 0 ? it_tensor_numel(z->g_shard) : z->heads;
    it_scope_begin();
    if (n) st = it_grad_norm(it_tensor_slice(z->g_shard, 0, 0, n, 1), &local);
    it_scope_end();
    if (st) return st;
    double sumsq = local * local;
    st = it_dist_all_reduce_host(z->d, &sumsq, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    if (!st) *norm = sqrt(sumsq);
    return st;
}

it_status it_zero_grad_norm_shared(it_zero *z, it_zero_shared_fn shared, void *ctx, it_dist *also, double *norm) {
    double local = 0;
    it_status st = IT_OK;
    it_scope_begin();
    if (z->stage == 1) { /* row r: flat [r*S, min((r+1)*S, P)) */
        int64_t lo = z->r * z->S, n = lo < z->P ? (z->P - lo < z->S ? z->P - lo : z->S) : 0;
        double v = 0, over = 0;
        it_tensor *g = n ? it_tensor_slice(z->g_shard, 0, 0, n, 1) : NULL;
        if (g) st = it_grad_norm(g, &v);
        if (g && !st) st = shared(ctx, g, lo, &over);
        local = v * v - over;
    } else { /* each bucket's part, and the tail on rank 0 (every rank holds it) */
        for (int b = 0; b <= z->nb && !st; b++) {
            zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
            if (!pc->g || (b == z->nb && z->r != 0)) continue;
            double v = 0, over = 0;
            st = it_grad_norm(pc->g, &v);
            if (!st) st = shared(ctx, pc->g, b < z->nb ? pc->lo + z->r * pc->c : pc->lo, &over);
            local += v * v - over;
        }
    }
    it_scope_end();
    if (!st) st = it_dist_all_reduce_host(z->d, &local, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    if (!st && also) st = it_dist_all_reduce_host(also, &local, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    if (!st) *norm = sqrt(local > 0 ? local : 0);
    return st;
}

it_status it_zero_step(it_zero *z, float lr, float grad_scale) {
    it_status st = IT_OK;
    if (z->stage == 1) {
        st = it_optimizer_step(z->opt, lr, grad_scale);
        return st ? st : rows_gather(z, z->p_shard, z->params);
    }
    for (int b = 0; b <= z->nb && !st; b++) {
        zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
        if (pc->opt) st = it_optimizer_step(pc->opt, lr, grad_scale);
    }
    return st ? st : buckets_gather(z, 0, z->params);
}

size_t it_zero_state_bytes(const it_zero *z) {
    if (z->stage == 1) return it_optimizer_state_bytes(z->opt);
    size_t n = 0;
    for (int b = 0; b <= z->nb; b++) {
        const zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
        if (pc->opt) n += it_optimizer_state_bytes(pc->opt);
    }
    return n;
}

size_t it_zero_shard_bytes(const it_zero *z) {
    size_t n = it_tensor_nbytes(z->g_shard);
    if (z->p_shard && !it_tensor_shares_storage(z->p_shard, z->params)) n += it_tensor_nbytes(z->p_shard);
    return n;
}

/* ---------------------------------------------------------------- checkpoints */

/* The optimizer holding the step count (every one of them counts alike). */
static it_optimizer *first_opt(const it_zero *z) {
    if (z->stage == 1) return z->opt;
    for (int b = 0; b <= z->nb; b++) {
        const zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
        if (pc->opt) return pc->opt;
    }
    return NULL;
}

/* One moment (which: 1 m, 2 v), whole: gathered on the device, its P elements copied out. */
static it_status gather_moment(it_zero *z, int which, void *host) {
    int64_t len[1] = {z->P};
    it_scope_begin();
    it_tensor *all = it_tensor_new(it_tensor_device(z->params), it_tensor_dtype(z->params), 1, len);
    it_status st = all ? IT_OK : it_last_status();
    if (!st && z->stage == 1) {
        it_tensor *m, *v;
        int64_t *t;
        it_optimizer_state(z->opt, &m, &v, &t);
        st = rows_gather(z, which == 1 ? m : v, all);
    } else if (!st) {
        st = buckets_gather(z, which, all);
    }
    if (!st) st = it_tensor_copy_to_host(all, host, it_tensor_nbytes(all));
    it_scope_end();
    return st;
}

it_status it_zero_state_gather(it_zero *z, void *m, void *v, int64_t *step) {
    it_tensor *ms, *vs;
    int64_t *t;
    it_optimizer *o = first_opt(z);
    *step = 0;
    if (!o) return IT_OK;
    it_optimizer_state(o, &ms, &vs, &t);
    *step = *t;
    if (!ms) return IT_OK;
    it_status st = gather_moment(z, 1, m);
    return st ? st : gather_moment(z, 2, v);
}

/* shard[0, hi - lo) = host[lo, hi), zeros past it. */
static it_status put_part(it_tensor *shard, const void *host, int64_t lo, int64_t hi) {
    size_t esz = it_dtype_size(it_tensor_dtype(shard));
    it_status st = it_tensor_fill(shard, it_scalar_f64(0));
    if (st || hi <= lo) return st;
    it_scope_begin();
    it_tensor *mine = it_tensor_slice(shard, 0, 0, hi - lo, 1);
    st = mine ? it_tensor_copy_from_host(mine, (const char *)host + (size_t)lo * esz, (size_t)(hi - lo) * esz)
              : it_last_status();
    it_scope_end();
    return st;
}

it_status it_zero_state_scatter(it_zero *z, const void *m, const void *v, int64_t step) {
    it_status st = IT_OK;
    for (int b = z->stage == 1 ? z->nb : 0; b <= z->nb && !st; b++) {
        const zero_piece *pc = b < z->nb ? &z->head[b] : &z->tail;
        it_optimizer *o = z->stage == 1 ? z->opt : pc->opt;
        if (!o) continue;
        it_tensor *ms, *vs;
        int64_t *t, lo, hi;
        it_optimizer_state(o, &ms, &vs, &t);
        *t = step;
        if (!ms) continue;
        if (z->stage == 1) { /* row r, clipped to P */
            lo = z->r * z->S < z->P ? z->r * z->S : z->P;
            hi = (z->r + 1) * z->S < z->P ? (z->r + 1) * z->S : z->P;
        } else {
            lo = b < z->nb ? pc->lo + z->r * pc->c : pc->lo;
            hi = lo + (b < z->nb ? pc->c : pc->n);
        }
        st = put_part(ms, m, lo, hi);
        if (!st) st = put_part(vs, v, lo, hi);
    }
    return st;
}
