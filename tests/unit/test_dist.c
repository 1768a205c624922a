/* The process group and ZeRO-1.
 *
 * Run alone (as ctest does) it checks the group of one: no MPI, every collective is the
 * identity, ZeRO-1 equals the plain optimizer bitwise. Run under mpirun (tests/e2e/ddp.sh
 * runs it with 3 ranks, so that chunks are uneven) it checks the collectives' values on
 * every rank: sums bitwise equal to the rank-ordered sum computed here, MAX/AVG, reduce-
 * scatter, all-gather (in place too), broadcast, the hash check, the staged path through
 * host memory on the sim device, and ZeRO-1 against all-reduce + a full optimizer step; with
 * IT_TEST_DIST_DEVICE=NAME, the same over that device's own collectives. */
#include "infinitrain/dist.h"
#include "infinitrain/ops.h"
#include "it_test.h"

enum { LEN = 37 }; /* not a multiple of 2, 3 or 4: uneven chunks */

/* Rank r's value i: magnitudes far apart, so that the order of the sum matters in fp32. */
static float val(int r, int i) { return (float)((r * 7919 + i * 104729) % 1000 + 1) * (r % 2 ? 1e-4f : 37.f); }

static it_tensor *make(it_device dev, int r, int n) {
    float h[4 * LEN];
    for (int i = 0; i < n; i++) h[i] = val(r, i);
    return it_tensor_from_host(dev, IT_DTYPE_FP32, 1, (int64_t[]){n}, h, sizeof(float) * (size_t)n);
}

static void check_collectives(it_dist *d, it_device dev, const char *what) {
    int rank = it_dist_rank(d), world = it_dist_world(d);
    float got[4 * LEN];
    it_scope_begin();
    /* SUM: bitwise the rank-ordered sum */
    it_tensor *t = make(dev, rank, LEN);
    CHECK_OK(it_dist_all_reduce(d, t, IT_CCL_SUM));
    CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * LEN));
    int bad = 0;
    for (int i = 0; i < LEN; i++) {
        float acc = val(0, i);
        for (int r = 1; r < world; r++) acc += val(r, i);
        bad += memcmp(&acc, &got[i], sizeof acc) != 0;
    }
    CHECK_MSG(bad == 0, "%s: all_reduce SUM: %d of %d elements differ from the rank-ordered sum", what, bad, LEN);
    /* MAX and AVG */
    t = make(dev, rank, LEN);
    CHECK_OK(it_dist_all_reduce(d, t, IT_CCL_MAX));
    CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * LEN));
    bad = 0;
    for (int i = 0; i < LEN; i++) {
        float m = val(0, i);
        for (int r = 1; r < world; r++) m = val(r, i) > m ? val(r, i) : m;
        bad += got[i] != m;
    }
    CHECK_MSG(bad == 0, "%s: all_reduce MAX: %d elements wrong", what, bad);
    t = make(dev, rank, LEN);
    CHECK_OK(it_dist_all_reduce(d, t, IT_CCL_AVG));
    CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * LEN));
    bad = 0;
    for (int i = 0; i < LEN; i++) {
        float acc = val(0, i);
        for (int r = 1; r < world; r++) acc += val(r, i);
        bad += got[i] != acc / (float)world;
    }
    CHECK_MSG(bad == 0, "%s: all_reduce AVG: %d elements wrong", what, bad);
    /* reduce-scatter: rank r gets elements [r*n, (r+1)*n) of the sum */
    int n = LEN / world;
    it_tensor *src = make(dev, rank, n * world), *dst = it_tensor_new(dev, IT_DTYPE_FP32, 1, (int64_t[]){n});
    CHECK_OK(it_dist_reduce_scatter(d, src, dst, IT_CCL_SUM));
    CHECK_OK(it_tensor_copy_to_host(dst, got, sizeof(float) * (size_t)n));
    bad = 0;
    for (int i = 0; i < n; i++) {
        float acc = val(0, rank * n + i);
        for (int r = 1; r < world; r++) acc += val(r, rank * n + i);
        bad += memcmp(&acc, &got[i], sizeof acc) != 0;
    }
    CHECK_MSG(bad == 0, "%s: reduce_scatter: %d elements wrong", what, bad);
    /* all-gather, out of place then in place (src = this rank's slice of dst) */
    it_tensor *full = it_tensor_zeros(dev, IT_DTYPE_FP32, 1, (int64_t[]){n * world});
    it_tensor *mine = make(dev, rank, n);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            CHECK_OK(it_tensor_fill(full, it_scalar_f64(0)));
            mine = it_tensor_slice(full, 0, rank * n, (rank + 1) * n, 1);
            float h[LEN];
            for (int i = 0; i < n; i++) h[i] = val(rank, i);
            CHECK_OK(it_tensor_copy_from_host(mine, h, sizeof(float) * (size_t)n));
        }
        CHECK_OK(it_dist_all_gather(d, mine, full));
        CHECK_OK(it_tensor_copy_to_host(full, got, sizeof(float) * (size_t)(n * world)));
        bad = 0;
        for (int r = 0; r < world; r++)
            for (int i = 0; i < n; i++) bad += got[r * n + i] != val(r, i);
        CHECK_MSG(bad == 0, "%s: all_gather (%s): %d elements wrong", what, pass ? "in place" : "out of place", bad);
    }
    /* broadcast from the last rank */
    t = make(dev, rank, LEN);
    CHECK_OK(it_dist_broadcast(d, t, world - 1));
    CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * LEN));
    bad = 0;
    for (int i = 0; i < LEN; i++) bad += got[i] != val(world - 1, i);
    CHECK_MSG(bad == 0, "%s: broadcast: %d elements wrong", what, bad);
    /* buckets: any split gives the same sums */
    t = make(dev, rank, LEN);
    CHECK_OK(it_dist_all_reduce_buckets(d, t, 5 * sizeof(float)));
    CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * LEN));
    bad = 0;
    for (int i = 0; i < LEN; i++) {
        float acc = val(0, i);
        for (int r = 1; r < world; r++) acc += val(r, i);
        bad += memcmp(&acc, &got[i], sizeof acc) != 0;
    }
    CHECK_MSG(bad == 0, "%s: bucketed all_reduce: %d elements wrong", what, bad);
    it_scope_end();
}

/* ZeRO stages 1 and 2 against DDP's path: all-reduce the gradient, full AdamW step. Bitwise
 * parameters; the moments gathered for a checkpoint are DDP's, in flat order, and load into
 * the other stage (any layout) unchanged. bucket_bytes small: many staging chunks (stage 1)
 * or buckets with a tail (stage 2). */
static void check_zero(it_dist *d, it_device dev, int stage, size_t bucket_bytes) {
    int rank = it_dist_rank(d);
    it_optim_config cfg = {IT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.1f};
    it_scope_begin();
    it_tensor *p_ref = make(dev, 0, LEN), *g_ref = make(dev, rank, LEN);
    it_tensor *p_z = make(dev, 0, LEN), *g_z = make(dev, rank, LEN);
    it_optimizer *opt = NULL;
    it_zero *z = NULL, *z2 = NULL;
    CHECK_OK(it_optimizer_new(&cfg, p_ref, g_ref, &opt));
    CHECK_OK(it_zero_new(d, stage, bucket_bytes, &cfg, p_z, g_z, &z));
    if (opt && z) {
        int N = it_dist_world(d);
        if (stage == 1) CHECK(it_zero_state_bytes(z) == 2 * sizeof(float) * (size_t)((LEN + N - 1) / N));
        CHECK(it_zero_state_bytes(z) <= 2 * sizeof(float) * (size_t)(LEN / N + N));
        for (int step = 0; step < 3; step++) {
            CHECK_OK(it_dist_all_reduce(d, g_ref, IT_CCL_SUM));
            CHECK_OK(it_optimizer_step(opt, 1e-2f, 1.0f));
            CHECK_OK(it_zero_reduce_grads(z));
            CHECK_OK(it_zero_step(z, 1e-2f, 1.0f));
            CHECK_OK(it_tensor_copy_(g_ref, g_z)); /* the same raw gradients again next step */
        }
        float a[LEN], b[LEN], m[LEN], v[LEN], m2[LEN], v2[LEN];
        CHECK_OK(it_tensor_copy_to_host(p_ref, a, sizeof a));
        CHECK_OK(it_tensor_copy_to_host(p_z, b, sizeof b));
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "ZeRO-%d parameters differ from all-reduce + AdamW", stage);
        it_tensor *mr, *vr;
        int64_t *tr, t = 0, t2 = 0;
        it_optimizer_state(opt, &mr, &vr, &tr);
        CHECK_OK(it_zero_state_gather(z, m, v, &t));
        CHECK_OK(it_tensor_copy_to_host(mr, a, sizeof a));
        CHECK_OK(it_tensor_copy_to_host(vr, b, sizeof b));
        CHECK_MSG(memcmp(a, m, sizeof a) == 0 && memcmp(b, v, sizeof b) == 0 && t == *tr,
                  "ZeRO-%d gathered moments differ from AdamW's (step %lld vs %lld)", stage, (long long)t,
                  (long long)*tr);
        CHECK_OK(it_zero_new(d, 3 - stage, 24, &cfg, p_z, g_z, &z2));
        if (z2) {
            CHECK_OK(it_zero_state_scatter(z2, m, v, t));
            CHECK_OK(it_zero_state_gather(z2, m2, v2, &t2));
            CHECK_MSG(memcmp(m, m2, sizeof m) == 0 && memcmp(v, v2, sizeof v) == 0 && t2 == t,
                      "ZeRO-%d moments loaded into ZeRO-%d do not gather back unchanged", stage, 3 - stage);
        }
        double nz = 0, nr = 0;
        CHECK_OK(it_zero_reduce_grads(z));
        CHECK_OK(it_zero_grad_norm(z, &nz));
        CHECK_OK(it_dist_all_reduce(d, g_ref, IT_CCL_SUM));
        CHECK_OK(it_grad_norm(g_ref, &nr));
        CHECK_NEAR(nz, nr, 1e-6 * nr); /* shard-by-shard sum of squares: fp32 order */
        if (rank == 0 && bucket_bytes == 0)
            printf("ZeRO-%d on %d ranks: clip norm %.17g, all-reduced gradient's %.17g (relative difference %.2e)\n",
                   stage, N, nz, nr, fabs(nz - nr) / nr);
    }
    it_zero_free(z2);
    it_zero_free(z);
    it_optimizer_free(opt);
    it_scope_end();
}

static void check_zero_stages(it_dist *d, it_device dev) {
    check_zero(d, dev, 1, 0);
    check_zero(d, dev, 1, 8);  /* 2 elements per chunk of every row */
    check_zero(d, dev, 2, 0);  /* one bucket */
    check_zero(d, dev, 2, 40); /* buckets of 10 elements rounded to a multiple of N, a tail */
}

/* "avgless": the CPU's runtime and kernels with collectives that decline AVG, as CNCL has no
 * average: the core must run SUM and divide (bitwise sum / N). */
static const it_ccl *cpu_ccl;
static it_status avgless_all_reduce(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt,
                                    it_reduce_kind op, it_stream *s) {
    if (op == IT_CCL_AVG) return it_error(IT_ERR_UNSUPPORTED, "avgless: no average");
    return cpu_ccl->all_reduce(c, send, recv, count, dt, op, s);
}
static it_status avgless_reduce_scatter(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt,
                                        it_reduce_kind op, it_stream *s) {
    if (op == IT_CCL_AVG) return it_error(IT_ERR_UNSUPPORTED, "avgless: no average");
    return cpu_ccl->reduce_scatter(c, send, recv, count, dt, op, s);
}
static it_ccl avgless_ccl;
static it_backend avgless;

static void check_avg_declined(void) {
    cpu_ccl = it_device_cpu().backend->ccl;
    avgless_ccl = *cpu_ccl;
    avgless_ccl.all_reduce = avgless_all_reduce;
    avgless_ccl.reduce_scatter = avgless_reduce_scatter;
    avgless_ccl.all_reduce_start = NULL, avgless_ccl.request_test = NULL, avgless_ccl.request_wait = NULL;
    avgless = *it_device_cpu().backend;
    avgless.name = "avgless";
    avgless.ccl = &avgless_ccl;
    CHECK_OK(it_backend_register(&avgless));
    it_device dev;
    CHECK_OK(it_device_parse("avgless", &dev));
    it_dist *d = NULL;
    CHECK_OK(it_dist_new(dev, &d));
    if (!d) return;
    CHECK(!it_dist_staged(d));
    check_collectives(d, dev, "avgless (AVG = SUM then divide)");
    /* reduce-scatter AVG: this rank's chunk of sum / N */
    int rank = it_dist_rank(d), world = it_dist_world(d), n = LEN / world;
    float got[LEN];
    it_scope_begin();
    it_tensor *src = make(dev, rank, n * world), *dst = it_tensor_new(dev, IT_DTYPE_FP32, 1, (int64_t[]){n});
    CHECK_OK(it_dist_reduce_scatter(d, src, dst, IT_CCL_AVG));
    CHECK_OK(it_tensor_copy_to_host(dst, got, sizeof(float) * (size_t)n));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float acc = val(0, rank * n + i);
        for (int r = 1; r < world; r++) acc += val(r, rank * n + i);
        bad += got[i] != acc / (float)world;
    }
    CHECK_MSG(bad == 0, "avgless: reduce_scatter AVG: %d elements wrong", bad);
    it_scope_end();
    it_dist_free(d);
}

int main(void) {
    int rank = -1, world = -1;
    it_dist_env(&rank, &world);
    it_dist *d = NULL;
    CHECK_OK(it_dist_new(it_device_cpu(), &d));
    if (!d) return it_test_report("test_dist");
    CHECK(it_dist_rank(d) == rank && it_dist_world(d) == world);
    CHECK(!it_dist_staged(d));
    CHECK(it_device_cpu().backend->ccl != NULL); /* the CPU backend has the table */
    if (world == 1) CHECK(!it_dist_launched());

    check_collectives(d, it_device_cpu(), "cpu");
    check_zero_stages(d, it_device_cpu());

    /* hashes: equal tensors hash equal, one changed bit does not */
    it_scope_begin();
    it_tensor *t = make(it_device_cpu(), 0, LEN);
    uint64_t h1 = 0, h2 = 0;
    CHECK_OK(it_dist_tensor_hash(t, &h1));
    float one = 1.0f;
    CHECK_OK(it_tensor_copy_from_host(it_tensor_slice(t, 0, 3, 4, 1), &one, sizeof one));
    CHECK_OK(it_dist_tensor_hash(t, &h2));
    CHECK(h1 != h2);
    /* the value for five known floats (20 bytes: two 8-byte words and a 4-byte tail), from an
     * independent Python FNV-1a over little-endian 64-bit words (x = (x ^ w) * P; x ^= x >> 32),
     * then the tail bytes */
    const float five[5] = {1.0f, 2.0f, -3.5f, 0.25f, 7.0f};
    it_tensor *f5 = it_tensor_from_host(it_device_cpu(), IT_DTYPE_FP32, 1, (int64_t[]){5}, five, sizeof five);
    uint64_t hf = 0;
    CHECK_OK(it_dist_tensor_hash(f5, &hf));
    CHECK(hf == 0x90739e9fad6feeb8ull);
    /* sign flips in the top bits of two words do not cancel (a plain word-wise FNV-1a, whose
     * multiply only carries upward, hashes these three buffers alike) */
    float buf[1000];
    uint64_t hb[3];
    for (int i = 0; i < 1000; i++) buf[i] = (float)(i % 13) - 5.5f;
    for (int round = 0; round < 3; round++) {
        if (round == 1) buf[1] = -buf[1], buf[7] = -buf[7];
        if (round == 2)
            for (int i = 3; i < 1000; i += 2) buf[i] = i == 7 ? buf[i] : -buf[i]; /* every odd one flipped once */
        it_tensor *tb = it_tensor_from_host(it_device_cpu(), IT_DTYPE_FP32, 1, (int64_t[]){1000}, buf, sizeof buf);
        CHECK_OK(it_dist_tensor_hash(tb, &hb[round]));
    }
    CHECK(hb[0] != hb[1] && hb[0] != hb[2] && hb[1] != hb[2]);
    /* a strided view (read through a staged copy) hashes as its contiguous copy; so does a
     * tensor on a device whose memory is not the host's (sim) */
    it_tensor *v = it_tensor_slice(t, 0, 1, LEN, 2), *vc = it_tensor_contiguous(v);
    uint64_t hv = 0, hvc = 1;
    CHECK_OK(it_dist_tensor_hash(v, &hv));
    CHECK_OK(it_dist_tensor_hash(vc, &hvc));
    CHECK(hv == hvc);
    it_device simd;
    if (it_device_parse("sim", &simd) == IT_OK) {
        CHECK(!simd.backend->host_memory);
        it_tensor *ts = it_tensor_to_device(t, simd);
        uint64_t hs_ = 0;
        CHECK_OK(it_dist_tensor_hash(ts, &hs_));
        CHECK(hs_ == h2);
    }
    it_scope_end();
    uint64_t hs[2] = {42, (uint64_t)(rank == world - 1 ? 7 : 8)};
    bool differs[2] = {true, false};
    CHECK_OK(it_dist_check_equal(d, hs, 2, differs));
    CHECK(!differs[0]);
    CHECK(differs[1] == (world > 1));
    double x = rank + 0.5;
    CHECK_OK(it_dist_all_reduce_host(d, &x, 1, IT_DTYPE_FP64, IT_CCL_SUM));
    CHECK(x == world * (world - 1) / 2.0 + 0.5 * world);

    /* a device whose backend has no collectives: staged through host memory */
    it_device sim;
    if (world > 1 && it_device_parse("sim", &sim) == IT_OK && !sim.backend->ccl) {
        it_dist *ds = NULL;
        CHECK_OK(it_dist_new(sim, &ds));
        if (ds) {
            CHECK(it_dist_staged(ds));
            check_collectives(ds, sim, "sim (staged)");
            check_zero_stages(ds, sim);
            /* the second group must not finalize MPI: the first one owns it */
            it_dist_free(ds);
        }
    }
    /* IT_TEST_DIST_DEVICE=NAME (tests/e2e/mlu_standin.sh: mlu on the Cambricon stand-in): the
     * same checks over that backend's own collectives */
    const char *devname = getenv("IT_TEST_DIST_DEVICE");
    it_device dd;
    if (world > 1 && devname && *devname) {
        CHECK_OK(it_device_parse(devname, &dd));
        it_dist *dx = NULL;
        if (dd.backend) CHECK_OK(it_dist_new(dd, &dx));
        if (dx) {
            CHECK_MSG(!it_dist_staged(dx), "%s: expected its own collectives, not staging", devname);
            check_collectives(dx, dd, devname);
            check_zero_stages(dx, dd);
            it_dist_free(dx);
        }
    }
    check_avg_declined();
    it_dist_free(d);
    if (world > 1) printf("rank %d of %d: ", rank, world);
    return it_test_report("test_dist");
}
