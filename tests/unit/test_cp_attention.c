/* Context parallelism's pieces (src/dist/context.c).
 *
 * Alone (as ctest runs it): the rows each rank keeps (it_cp_runs, it_cp_slice_host) against
 * tables written by hand, contiguous and load-balanced. Under mpirun (tests/e2e/cp.sh, 2 and 4
 * ranks): it_cp_attention for each comm type, with and without load balancing, multi-head and
 * grouped-query, fp32 and under bf16 autocast, against it_attention on the whole sequence,
 * which every rank computes from the same inputs: this rank's rows of the output and of the
 * q, k and v gradients. Tolerances: fp32 2e-6 (the same products summed in another order:
 * the ring merges partial softmaxes, all_gather and a2a attend chunk by chunk); bf16 1e-2
 * relative to the largest value (the ring rounds each block's output to bf16 before merging,
 * the reference rounds once). */
#include "infinitrain/dist.h"
#include "infinitrain/ops.h"
#include "it_test.h"

static void check_rows(void) {
    int64_t st[2], ln[2];
    /* T = 16 over CP = 4: contiguous slices of 4; balanced chunks of 2: rank r has r and 7-r */
    CHECK(it_cp_runs(16, 4, 1, false, 0, 4, st, ln) == 1 && st[0] == 4 && ln[0] == 4);
    CHECK(it_cp_runs(16, 4, 1, true, 0, 4, st, ln) == 2 && st[0] == 2 && ln[0] == 2 && st[1] == 12 && ln[1] == 2);
    CHECK(it_cp_runs(16, 4, 3, true, 0, 4, st, ln) == 2 && st[0] == 6 && st[1] == 8);
    /* a sub-range (SP's rows within the rank's): rows 1..2 cross from chunk 0 to chunk 1 */
    CHECK(it_cp_runs(16, 4, 0, true, 1, 2, st, ln) == 2 && st[0] == 1 && ln[0] == 1 && st[1] == 14 && ln[1] == 1);
    CHECK(it_cp_runs(16, 4, 0, true, 2, 2, st, ln) == 1 && st[0] == 14 && ln[0] == 2);
    int32_t tok[2 * 16], want[2][8] = {{2, 3, 12, 13, 18, 19, 28, 29}, {4, 5, 6, 7, 20, 21, 22, 23}};
    for (int i = 0; i < 32; i++) tok[i] = i;
    int32_t out[8];
    it_cp_slice_host(tok, out, 2, 16, 4, 1, true);
    CHECK(memcmp(out, want[0], sizeof out) == 0);
    it_cp_slice_host(tok, tok, 2, 16, 4, 1, false); /* in place */
    CHECK(memcmp(tok, want[1], sizeof out) == 0);
}

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* A (B, T, H, D) leaf of random values (the same on every rank: one generator, one order). */
static it_tensor *leaf(int64_t B, int64_t T, int64_t H, int64_t D, float *host) {
    int64_t n = B * T * H * D;
    for (int64_t i = 0; i < n; i++) host[i] = urand();
    it_tensor *t = it_tensor_from_host(it_device_cpu(), IT_DTYPE_FP32, 4, (int64_t[]){B, T, H, D}, host,
                                       sizeof(float) * (size_t)n);
    it_tensor_set_requires_grad(t, true);
    return t;
}

/* This rank's rows of x (B, T, ...) as a new leaf. */
static it_tensor *local_rows(it_tensor *x, int cp, int r, bool balance) {
    int64_t T = it_tensor_dim(x, 1), st[2], ln[2];
    int n = it_cp_runs(T, cp, r, balance, 0, T / cp, st, ln);
    it_tensor *parts[2];
    for (int k = 0; k < n; k++) parts[k] = it_tensor_slice(x, 1, st[k], st[k] + ln[k], 1);
    it_tensor *t = it_tensor_clone(it_cat(n, parts, 1));
    it_tensor_set_requires_grad(t, true);
    return t;
}

static double max_diff(it_tensor *a, it_tensor *b, double *scale) {
    int64_t n = it_tensor_numel(a);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    it_tensor_copy_to_host(it_tensor_contiguous(it_tensor_to_dtype(a, IT_DTYPE_FP32)), x, sizeof(float) * (size_t)n);
    it_tensor_copy_to_host(it_tensor_contiguous(it_tensor_to_dtype(b, IT_DTYPE_FP32)), y, sizeof(float) * (size_t)n);
    double m = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        m = d > m || d != d ? d : m;
        *scale = fabs(y[i]) > *scale ? fabs(y[i]) : *scale;
    }
    free(x);
    free(y);
    return m;
}

static void check_case(it_dist *g, it_cp_comm comm, bool balance, int64_t H, int64_t Hkv, bool bf16) {
    int cp = it_dist_world(g), r = it_dist_rank(g);
    const int64_t B = 2, T = 8 * cp, D = 8;
    it_scope_begin();
    float *hq = malloc(sizeof(float) * (size_t)(B * T * H * D)),
          *hk = malloc(sizeof(float) * (size_t)(B * T * Hkv * D)),
          *hv = malloc(sizeof(float) * (size_t)(B * T * Hkv * D)),
          *hw = malloc(sizeof(float) * (size_t)(B * T * H * D));
    it_tensor *q = leaf(B, T, H, D, hq), *k = leaf(B, T, Hkv, D, hk), *v = leaf(B, T, Hkv, D, hv);
    it_tensor *w = leaf(B, T, H, D, hw); /* the loss: sum(y * w) */
    it_tensor *ql = local_rows(q, cp, r, balance), *kl = local_rows(k, cp, r, balance),
              *vl = local_rows(v, cp, r, balance), *wl = local_rows(w, cp, r, balance);
    int64_t s3[3] = {B, T, H * D}, s3l[3] = {B, T / cp, H * D};
    if (bf16) it_autocast_set(true, IT_DTYPE_BF16);
    it_tensor *y = it_attention(q, k, v);
    CHECK_OK(it_backward(it_sum_all(it_mul(y, it_reshape(w, 3, s3))))); /* (backward clears the tape) */
    it_tensor *yl = it_cp_attention(g, comm, balance, ql, kl, vl);
    it_autocast_set(false, IT_DTYPE_BF16);
    CHECK_MSG(yl != NULL, "%s: %s", it_cp_comm_name(comm), it_last_error());
    if (!yl) {
        it_scope_end();
        return;
    }
    CHECK_OK(it_backward(it_sum_all(it_mul(yl, it_reshape(wl, 3, s3l)))));
    double tol = bf16 ? 1e-2 : 2e-6, sc;
    it_tensor *want[4] = {local_rows(y, cp, r, balance), local_rows(it_tensor_grad(q), cp, r, balance),
                          local_rows(it_tensor_grad(k), cp, r, balance), local_rows(it_tensor_grad(v), cp, r, balance)};
    it_tensor *got[4] = {yl, it_tensor_grad(ql), it_tensor_grad(kl), it_tensor_grad(vl)};
    const char *what[4] = {"y", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(got[i] != NULL, "%s: no %s", it_cp_comm_name(comm), what[i]);
        if (!got[i]) continue;
        double d = max_diff(got[i], want[i], &sc);
        CHECK_MSG(d <= tol * (bf16 ? sc : 1.0), "rank %d of %d, %s%s, H %lld/%lld%s: %s differs by %.3g (largest %.3g)",
                  r, cp, it_cp_comm_name(comm), balance ? " balanced" : "", (long long)H, (long long)Hkv,
                  bf16 ? " bf16" : "", what[i], d, sc);
    }
    free(hq), free(hk), free(hv), free(hw);
    it_scope_end();
}

int main(void) {
    check_rows();
    int rank = 0, world = 1;
    it_dist_env(&rank, &world);
    if (world > 1) {
        it_dist *g = NULL;
        CHECK_OK(it_dist_new(it_device_cpu(), &g));
        for (int comm = 0; comm < 3; comm++)
            for (int bal = 0; bal < 2; bal++)
                for (int gqa = 0; gqa < 2; gqa++)
                    for (int bf = 0; bf < 2; bf++) {
                        it_flash_attention_set(true);
                        check_case(g, (it_cp_comm)comm, bal, 4 * world / 2 * 2, gqa ? world : 4 * world / 2 * 2, bf);
                    }
        /* the ring's fallback with flash off: all_gather's way through the composition */
        it_flash_attention_set(false);
        check_case(g, IT_CP_P2P, true, 8, 4, false);
        it_flash_attention_set(true);
        it_dist_free(g);
        printf("rank %d of %d: ", rank, world);
    }
    return it_test_report("test_cp_attention");
}
