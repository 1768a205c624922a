/* ZeRO-1: Adam/AdamW state sharded over the data-parallel ranks.
 *
 * The model's flat buffers hold P elements; here they are mirrored into padded buffers of
 * world*S elements (S = ceil(P/world), zeros past P) so that every rank owns an equal
 * shard [r*S, (r+1)*S). The reduce-scatter computes each element's sum exactly as DDP's
 * all-reduce does (rank order), and the update is the same elementwise kernel, so the
 * parameters match plain DDP's bitwise, except that the clipping norm is summed shard by
 * shard (a different order: equal within fp32 rounding). */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"
#include "infinitrain/dist.h"

struct it_zero1 {
    it_dist *d;
    it_tensor *params, *grads;    /* the model's flat buffers (retained) */
    it_tensor *pad_p, *pad_g;     /* (world*S) mirrors, owned */
    it_tensor *p_head, *g_head;   /* views [0, P) of the mirrors */
    it_tensor *p_shard, *g_shard; /* this rank's [r*S, (r+1)*S) of pad_p; the reduced gradient (S) */
    it_optimizer *opt;            /* over p_shard / g_shard */
};

void it_zero1_free(it_zero1 *z) {
    if (!z) return;
    it_optimizer_free(z->opt);
    it_tensor *ts[] = {z->params, z->grads, z->pad_p, z->pad_g, z->p_head, z->g_head, z->p_shard, z->g_shard};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) it_tensor_release(ts[i]);
    free(z);
}

it_status it_zero1_new(it_dist *d, const it_optim_config *cfg, it_tensor *params, it_tensor *grads, it_zero1 **out) {
    if (it_tensor_ndim(params) != 1 || it_tensor_numel(params) != it_tensor_numel(grads))
        return it_error(IT_ERR_INVALID_ARG, "zero1: params and grads must be flat tensors of one length");
    it_zero1 *z = calloc(1, sizeof *z);
    if (!z) return it_error(IT_ERR_OOM, "zero1: out of host memory");
    z->d = d;
    z->params = it_tensor_retain(params);
    z->grads = it_tensor_retain(grads);
    int64_t P = it_tensor_numel(params), N = it_dist_world(d), r = it_dist_rank(d);
    int64_t S = (P + N - 1) / N, full[1] = {N * S}, shard[1] = {S};
    it_device dev = it_tensor_device(params);
    it_dtype dt = it_tensor_dtype(params);
    it_status st = IT_OK;
    z->pad_p = it__tensor_new_owned(dev, dt, 1, full);
    z->pad_g = it__tensor_new_owned(dev, dt, 1, full);
    z->g_shard = it__tensor_new_owned(dev, dt, 1, shard);
    if (!z->pad_p || !z->pad_g || !z->g_shard) st = it_last_status();
    if (!st) st = it_tensor_fill(z->pad_p, it_scalar_f64(0));
    if (!st) st = it_tensor_fill(z->pad_g, it_scalar_f64(0));
    if (!st) {
        it_scope_begin();
        z->p_head = it_scope_keep(it_tensor_slice(z->pad_p, 0, 0, P, 1));
        z->g_head = it_scope_keep(it_tensor_slice(z->pad_g, 0, 0, P, 1));
        z->p_shard = it_scope_keep(it_tensor_slice(z->pad_p, 0, r * S, (r + 1) * S, 1));
        it_scope_end();
        if (!z->p_head || !z->g_head || !z->p_shard) st = it_last_status();
    }
    if (!st) st = it_tensor_copy_(z->p_head, params);
    if (!st) st = it_optimizer_new(cfg, z->p_shard, z->g_shard, &z->opt);
    if (st) {
        it_zero1_free(z);
        return st;
    }
    *out = z;
    return IT_OK;
}

it_status it_zero1_reduce_grads(it_zero1 *z) {
    it_status st = it_tensor_copy_(z->g_head, z->grads);
    return st ? st : it_dist_reduce_scatter(z->d, z->pad_g, z->g_shard, IT_CCL_SUM);
}

it_status it_zero1_grad_norm(it_zero1 *z, double *norm) {
    double local = 0;
    it_status st = it_grad_norm(z->g_shard, &local);
    if (st) return st;
    double sumsq = local * local;
    st = it_dist_all_reduce_host(z->d, &sumsq, 1, IT_DTYPE_FP64, IT_CCL_SUM);
    if (!st) *norm = sqrt(sumsq);
    return st;
}

it_status it_zero1_step(it_zero1 *z, float lr, float grad_scale) {
    it_status st = it_optimizer_step(z->opt, lr, grad_scale);
    if (!st) st = it_dist_all_gather(z->d, z->p_shard, z->pad_p);
    if (!st) st = it_tensor_copy_(z->params, z->p_head);
    return st;
}

size_t it_zero1_state_bytes(const it_zero1 *z) { return it_optimizer_state_bytes(z->opt); }

/* One moment, whole: every rank's shard gathered into a (world*S) buffer, its first P
 * elements copied to the host. */
static it_status gather_moment(it_zero1 *z, it_tensor *shard, void *host) {
    int64_t P = it_tensor_numel(z->params), full[1] = {it_tensor_numel(z->pad_p)};
    it_scope_begin();
    it_tensor *all = it_tensor_new(it_tensor_device(shard), it_tensor_dtype(shard), 1, full);
    it_tensor *head = all ? it_tensor_slice(all, 0, 0, P, 1) : NULL;
    it_status st = head ? it_dist_all_gather(z->d, shard, all) : it_last_status();
    if (!st) st = it_tensor_copy_to_host(head, host, it_tensor_nbytes(head));
    it_scope_end();
    return st;
}

it_status it_zero1_state_gather(it_zero1 *z, void *m, void *v, int64_t *step) {
    it_tensor *ms, *vs;
    int64_t *t;
    it_optimizer_state(z->opt, &ms, &vs, &t);
    *step = *t;
    if (!ms) return IT_OK;
    it_status st = gather_moment(z, ms, m);
    return st ? st : gather_moment(z, vs, v);
}

/* This rank's shard [r*S, (r+1)*S) of a whole moment, zeros past P. */
static it_status scatter_moment(it_zero1 *z, it_tensor *shard, const void *host) {
    int64_t P = it_tensor_numel(z->params), S = it_tensor_numel(shard), r = it_dist_rank(z->d);
    int64_t lo = r * S < P ? r * S : P, hi = (r + 1) * S < P ? (r + 1) * S : P;
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

it_status it_zero1_state_scatter(it_zero1 *z, const void *m, const void *v, int64_t step) {
    it_tensor *ms, *vs;
    int64_t *t;
    it_optimizer_state(z->opt, &ms, &vs, &t);
    *t = step;
    if (!ms) return IT_OK;
    it_status st = scatter_moment(z, ms, m);
    return st ? st : scatter_moment(z, vs, v);
}

it_optimizer *it_zero1_optimizer(it_zero1 *z) { return z->opt; }
