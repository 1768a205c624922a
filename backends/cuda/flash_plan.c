/* Flash attention calls -> the CUDA kernels' launches (see flash_plan.h). */
#include "flash_plan.h"

#include <stdint.h>

#define FP_GRID_X_MAX 2147483647LL /* CUDA's grid limits */
#define FP_GRID_YZ_MAX 65535LL

/* A descriptor the planner reads: non-NULL, `ndim` dims, no negative size or stride, data
 * when it has elements. */
static it_status fp_desc(const char *k, const char *name, const it_tdesc *t, int ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s is NULL", k, name);
    if (t->ndim != ndim)
        return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s must be %d-D, got ndim %d", k, name, ndim, t->ndim);
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (t->shape[d] < 0 || t->strides[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.shape[%d] = %lld, strides[%d] = %lld: negative", k, name,
                            d, (long long)t->shape[d], d, (long long)t->strides[d]);
        empty = empty || t->shape[d] == 0;
    }
    if (!empty && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: %s.data is NULL", k, name);
    return IT_OK;
}

/* t has the shape (b, h, r, d). */
static it_status fp_shape(const char *k, const char *name, const it_tdesc *t, int64_t b, int64_t h, int64_t r,
                          int64_t d, const char *want) {
    if (t->shape[0] != b || t->shape[1] != h || t->shape[2] != r || t->shape[3] != d)
        return it_error(IT_ERR_INVALID_ARG,
                        "cuda: %s: %s is (%lld, %lld, %lld, %lld), expected %s = (%lld, %lld, %lld, %lld)", k, name,
                        (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3],
                        want, (long long)b, (long long)h, (long long)r, (long long)d);
    return IT_OK;
}

/* t's dtype is q's; its last stride is 1 (any when D <= 1); an output writes no element twice
 * through a 0 stride. The view's offsets. */
static it_status fp_view(const char *k, const char *name, const it_tdesc *t, it_dtype dt, bool output,
                         cu_flash_view *v) {
    if (t->dtype != dt)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: %s dtype %s differs from q's %s (one dtype for all)", k, name,
                        it_dtype_name(t->dtype), it_dtype_name(dt));
    if (t->shape[3] > 1 && t->strides[3] != 1)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: %s has last stride %lld: the kernels read rows with a unit one",
                        k, name, (long long)t->strides[3]);
    bool empty = t->shape[0] == 0 || t->shape[1] == 0 || t->shape[2] == 0 || t->shape[3] == 0;
    if (output && !empty)
        for (int d = 0; d < 3; d++)
            if (t->strides[d] == 0 && t->shape[d] > 1)
                return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: output %s has stride 0 on dim %d of size %lld", k, name,
                                d, (long long)t->shape[d]);
    *v = (cu_flash_view){.data = t->data, .sb = t->strides[0], .sh = t->strides[1], .sr = t->strides[2]};
    return IT_OK;
}

static size_t fp_bytes(int64_t floats) { return (size_t)floats * sizeof(float); }

/* One kernel's launch: tile (rows, cols, tpr), grid.x blocks over grid (y, z) = (heads, B),
 * shared floats; declined past CUDA's grid limits or the device's shared memory. */
static it_status fp_launch(const char *k, const char *kernel, cu_flash_launch *l, int rows, int cols, int tpr,
                           int64_t gx, int64_t gy, int64_t gz, int64_t floats, size_t smem_limit) {
    *l = (cu_flash_launch){.rows = rows, .cols = cols, .tpr = tpr, .threads = rows * tpr};
    if (gx > FP_GRID_X_MAX || gy > FP_GRID_YZ_MAX || gz > FP_GRID_YZ_MAX)
        return it_error(IT_ERR_UNSUPPORTED,
                        "cuda: %s: the %s grid (%lld, %lld, %lld) is beyond CUDA's (2^31 - 1, 65535, 65535)", k, kernel,
                        (long long)gx, (long long)gy, (long long)gz);
    if (gx > 0 && gy > 0 && gz > 0) {
        l->grid_x = (unsigned)gx, l->grid_y = (unsigned)gy, l->grid_z = (unsigned)gz;
    }
    l->smem = fp_bytes(floats);
    l->opt_in = l->smem > CU_FLASH_SMEM_DEFAULT;
    if (l->smem > smem_limit)
        return it_error(IT_ERR_UNSUPPORTED,
                        "cuda: %s: the %s kernel needs %zu bytes of shared memory per block, the device allows %zu", k,
                        kernel, l->smem, smem_limit);
    return IT_OK;
}

static int64_t fp_blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

/* The checks and the plan common to both directions: q, k, v, y (and lse) described. */
static it_status fp_common(const char *k, const it_flash_args *a, const it_tdesc *q, const it_tdesc *kk,
                           const it_tdesc *v, const it_tdesc *y, const it_tdesc *lse, bool y_output, size_t smem_limit,
                           cu_flash_plan *p) {
    it_status st;
    if (a == NULL) return it_error(IT_ERR_INVALID_ARG, "cuda: %s: args is NULL", k);
    if ((st = fp_desc(k, "q", q, 4)) || (st = fp_desc(k, "k", kk, 4)) || (st = fp_desc(k, "v", v, 4)) ||
        (st = fp_desc(k, "y", y, 4)) || (st = fp_desc(k, "lse", lse, 3)))
        return st;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = kk->shape[1], S = kk->shape[2];
    if ((st = fp_shape(k, "k", kk, B, Hkv, S, D, "(B, Hkv, S, D)")) ||
        (st = fp_shape(k, "v", v, B, Hkv, S, D, "k's (B, Hkv, S, D)")) ||
        (st = fp_shape(k, "y", y, B, H, T, D, "q's (B, H, T, D)")))
        return st;
    if (lse->shape[0] != B || lse->shape[1] != H || lse->shape[2] != T)
        return it_error(IT_ERR_INVALID_ARG,
                        "cuda: %s: lse is (%lld, %lld, %lld), expected (B, H, T) = (%lld, %lld, %lld)", k,
                        (long long)lse->shape[0], (long long)lse->shape[1], (long long)lse->shape[2], (long long)B,
                        (long long)H, (long long)T);
    it_dtype dt = q->dtype;
    if (dt != IT_DTYPE_FP32 && dt != IT_DTYPE_BF16 && dt != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: dtype %s (the kernels take float32, bfloat16, float16)", k,
                        it_dtype_name(dt));
    if (lse->dtype != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: lse dtype %s, expected float32", k, it_dtype_name(lse->dtype));
    if ((T > 1 && lse->strides[2] != 1) || (H > 1 && lse->strides[1] != T) || (B > 1 && lse->strides[0] != H * T))
        return it_error(IT_ERR_UNSUPPORTED,
                        "cuda: %s: lse (%lld, %lld, %lld) with strides (%lld, %lld, %lld) is not contiguous", k,
                        (long long)B, (long long)H, (long long)T, (long long)lse->strides[0],
                        (long long)lse->strides[1], (long long)lse->strides[2]);
    if (Hkv == 0 ? H != 0 : H % Hkv != 0)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: Hkv = %lld kv heads do not divide H = %lld query heads", k,
                        (long long)Hkv, (long long)H);
    if (D > CU_FLASH_MAX_D)
        return it_error(IT_ERR_UNSUPPORTED, "cuda: %s: head size D = %lld is larger than the kernels' %d", k,
                        (long long)D, CU_FLASH_MAX_D);
    *p = (cu_flash_plan){.dtype = dt, .B = B, .H = H, .Hkv = Hkv, .T = T, .S = S, .D = D, .ld = D + 1};
    p->group = Hkv > 0 ? H / Hkv : 1;
    p->dmax = CU_FLASH_DMAX(D);
    p->scale = a->scale;
    p->causal = a->causal;
    /* Beyond [-T, S] the mask is the same: q_offset >= S shows every key to every row,
     * q_offset <= -T none to any. Clamped, t + q_offset never overflows. */
    p->q_offset = a->q_offset > S ? S : a->q_offset < -T ? -T : a->q_offset;
    p->lse = (float *)lse->data;
    if ((st = fp_view(k, "q", q, dt, false, &p->q)) || (st = fp_view(k, "k", kk, dt, false, &p->k)) ||
        (st = fp_view(k, "v", v, dt, false, &p->v)) || (st = fp_view(k, "y", y, dt, y_output, &p->y)))
        return st;

    /* The three launches, for the bucket's tiles (smem from the actual D). */
    int dm = p->dmax;
    int fbr = CU_FLASH_FWD_BR(dm), fbc = CU_FLASH_FWD_BC(dm), qbr = CU_FLASH_DQ_BR(dm), qbc = CU_FLASH_DQ_BC(dm);
    int kbc = CU_FLASH_KV_BC(dm), kbr = CU_FLASH_KV_BR(dm);
    if ((st = fp_launch(k, "forward", &p->launch_fwd, fbr, fbc, CU_FLASH_FWD_TPR(dm), fp_blocks(T, fbr), H, B,
                        cu_flash_fwd_smem_floats(fbr, fbc, p->ld), smem_limit)) ||
        (st = fp_launch(k, "dq", &p->launch_dq, qbr, qbc, CU_FLASH_DQ_TPR(dm), fp_blocks(T, qbr), H, B,
                        cu_flash_dq_smem_floats(qbr, qbc, p->ld), smem_limit)) ||
        (st = fp_launch(k, "dk/dv", &p->launch_kv, kbc, kbr, CU_FLASH_KV_TPR(dm), fp_blocks(S, kbc), Hkv, B,
                        cu_flash_kv_smem_floats(kbr, kbc, p->ld), smem_limit)))
        return st;
    /* D == 0: no gradient has an element (the forward still writes lse) */
    if (D == 0) p->launch_kv.grid_x = p->launch_dq.grid_x = 0;
    return IT_OK;
}

it_status cu_flash_plan_fwd(const it_flash_args *args, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                            const it_tdesc *y, const it_tdesc *lse, size_t smem_limit, cu_flash_plan *p) {
    return fp_common("flash_attention_fwd", args, q, k, v, y, lse, true, smem_limit, p);
}

it_status cu_flash_plan_bwd(const it_flash_args *args, const it_tdesc *q, const it_tdesc *k, const it_tdesc *v,
                            const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse, const it_tdesc *dq,
                            const it_tdesc *dk, const it_tdesc *dv, size_t smem_limit, cu_flash_plan *p) {
    const char *kn = "flash_attention_bwd";
    it_status st = fp_common(kn, args, q, k, v, y, lse, false, smem_limit, p);
    if (st) return st;
    if ((st = fp_desc(kn, "dy", dy, 4)) || (st = fp_desc(kn, "dq", dq, 4)) || (st = fp_desc(kn, "dk", dk, 4)) ||
        (st = fp_desc(kn, "dv", dv, 4)))
        return st;
    int64_t B = p->B, H = p->H, Hkv = p->Hkv, T = p->T, S = p->S, D = p->D;
    if ((st = fp_shape(kn, "dy", dy, B, H, T, D, "q's (B, H, T, D)")) ||
        (st = fp_shape(kn, "dq", dq, B, H, T, D, "q's (B, H, T, D)")) ||
        (st = fp_shape(kn, "dk", dk, B, Hkv, S, D, "k's (B, Hkv, S, D)")) ||
        (st = fp_shape(kn, "dv", dv, B, Hkv, S, D, "k's (B, Hkv, S, D)")))
        return st;
    if ((st = fp_view(kn, "dy", dy, p->dtype, false, &p->dy)) || (st = fp_view(kn, "dq", dq, p->dtype, true, &p->dq)) ||
        (st = fp_view(kn, "dk", dk, p->dtype, true, &p->dk)) || (st = fp_view(kn, "dv", dv, p->dtype, true, &p->dv)))
        return st;
    return IT_OK;
}
