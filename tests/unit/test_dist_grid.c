/* The TP x CP x DP x PP process grid.
 *
 * Alone (as ctest runs it): the pure layout against tables written from InfiniTrain's Layout
 * (infini_train/src/nn/parallel/global.cc: order {TP, DP, PP}, RankOf, CoordOf, GroupId,
 * GroupRanks) for several grids, the size checks' messages, and the grid of one on the group
 * of one. Under mpirun (tests/e2e/dist_grid.sh, 8 ranks): for every DP x TP x PP that makes
 * the world, the grid on the CPU device and on sim (no collectives: staged through host
 * memory), each rank's world rank all-reduced (SUM, device and host) and all-gathered over
 * each of its three groups against the sums and member lists the layout predicts; and on
 * "idccl", a device whose collectives join by unique id as NCCL's do, which checks that each
 * group gets an id of its own, made by the group's rank 0 and shared over that group only. */
#include <mpi.h>

#include "infinitrain/dist.h"
#include "it_test.h"

/* One grid: for each axis (DP, TP, PP), its groups in id order, each the member ranks in
 * group-rank order, flattened: group i is groups[ax][i*size[ax] .. (i+1)*size[ax]). */
typedef struct {
    int world, dp, tp, pp;
    int groups[IT_DIST_AXES][12]; /* DP, TP, PP, CP rows; CP's only where cp > 1 */
    int cp;                       /* 1: each rank its own CP group */
} grid_case;

static const grid_case CASES[] = {
    /* 8 = DP2 x TP2 x PP2: rank = tp + 2dp + 4pp */
    {8, 2, 2, 2, {{0, 2, 4, 6, 1, 3, 5, 7}, {0, 1, 4, 5, 2, 3, 6, 7}, {0, 4, 2, 6, 1, 5, 3, 7}}, 1},
    /* 8 = TP4 x DP2: rank = tp + 4dp; the PP groups of one are numbered dp + 2tp */
    {8, 2, 4, 1, {{0, 4, 1, 5, 2, 6, 3, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 4, 1, 5, 2, 6, 3, 7}}, 1},
    /* 4 = PP4 */
    {4, 1, 1, 4, {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}, 1},
    /* 1 = 1 x 1 x 1 */
    {1, 1, 1, 1, {{0}, {0}, {0}}, 1},
    /* 12 = DP3 x TP2 x PP2: rank = tp + 2dp + 6pp, every axis a different size */
    {12,
     3,
     2,
     2,
     {{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11},
      {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11},
      {0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}},
     1},
    /* 8 = TP2 x CP2 x DP2 (the context-parallel branch): rank = tp + 2cp + 4dp; ids: TP dp + 2cp,
     * CP dp + 2tp, DP cp + 2tp, PP dp + 2cp + 4tp */
    {8,
     2,
     2,
     1,
     {{0, 4, 2, 6, 1, 5, 3, 7}, {0, 1, 4, 5, 2, 3, 6, 7}, {0, 4, 2, 6, 1, 5, 3, 7}, {0, 2, 4, 6, 1, 3, 5, 7}},
     2},
};

static void check_layout_case(const grid_case *c) {
    it_dist_layout l;
    int cp = c->cp ? c->cp : 1;
    CHECK_OK(it_dist_layout_init_cp(&l, c->world, c->dp, c->tp, cp, c->pp));
    CHECK(l.size[IT_DIST_DP] == c->dp && l.size[IT_DIST_TP] == c->tp && l.size[IT_DIST_PP] == c->pp &&
          l.size[IT_DIST_CP] == cp);
    CHECK(l.stride[IT_DIST_TP] == 1 && l.stride[IT_DIST_CP] == c->tp && l.stride[IT_DIST_DP] == c->tp * cp &&
          l.stride[IT_DIST_PP] == c->tp * cp * c->dp);
    if (cp == 1) /* each rank alone in its CP group, at coordinate 0 */
        for (int r = 0; r < c->world; r++) {
            int got[1] = {-1}, coord[IT_DIST_AXES];
            it_dist_layout_group_ranks(&l, IT_DIST_CP, r, got);
            it_dist_layout_coords(&l, r, coord);
            CHECK_MSG(got[0] == r && coord[IT_DIST_CP] == 0, "%d ranks: rank %d's CP group of one is {%d}", c->world, r,
                      got[0]);
        }
    for (int ax = 0; ax < (cp > 1 ? IT_DIST_AXES : IT_DIST_CP); ax++) {
        int n = l.size[ax], ngroups = c->world / n;
        for (int id = 0; id < ngroups; id++) {
            const int *want = &c->groups[ax][id * n];
            for (int k = 0; k < n; k++) {
                int r = want[k], got[12] = {0}, coord[IT_DIST_AXES];
                it_dist_layout_coords(&l, r, coord);
                CHECK_MSG(it_dist_layout_rank(&l, coord) == r, "%d ranks: rank %d's coordinates map back to %d",
                          c->world, r, it_dist_layout_rank(&l, coord));
                /* the rank's index in its group is its coordinate along that axis */
                CHECK_MSG(coord[ax] == k, "%dx%dx%d: rank %d is member %d of %s%d, its coordinate is %d", c->dp, c->tp,
                          c->pp, r, k, it_dist_axis_name((it_dist_axis)ax), id, coord[ax]);
                CHECK_MSG(it_dist_layout_group_id(&l, (it_dist_axis)ax, r) == id,
                          "%dx%dx%d: rank %d: %s id %d, want %d", c->dp, c->tp, c->pp, r,
                          it_dist_axis_name((it_dist_axis)ax), it_dist_layout_group_id(&l, (it_dist_axis)ax, r), id);
                it_dist_layout_group_ranks(&l, (it_dist_axis)ax, r, got);
                int bad = 0;
                for (int j = 0; j < n; j++) bad += got[j] != want[j];
                CHECK_MSG(bad == 0, "%dx%dx%d: rank %d: %d of %d members of its %s group differ", c->dp, c->tp, c->pp,
                          r, bad, n, it_dist_axis_name((it_dist_axis)ax));
            }
        }
    }
}

static void check_bad_sizes(void) {
    it_dist_layout l = {.world = -7};
    CHECK_ERR(it_dist_layout_init(&l, 8, 2, 3, 1), IT_ERR_INVALID_ARG,
              "process grid: the world of 8 ranks is not DP x TP x PP = 2 x 3 x 1 = 6");
    CHECK_ERR(it_dist_layout_init(&l, 4, 1, 2, 1), IT_ERR_INVALID_ARG, "4 ranks is not DP x TP x PP = 1 x 2 x 1 = 2");
    CHECK_ERR(it_dist_layout_init(&l, 4, 4, 0, 1), IT_ERR_INVALID_ARG,
              "4 ranks is not DP x TP x PP = 4 x 0 x 1 = 0 (every size must be >= 1)");
    CHECK_ERR(it_dist_layout_init(&l, 4, -2, -2, 1), IT_ERR_INVALID_ARG,
              "DP x TP x PP = -2 x -2 x 1 = 4 (every size must be >= 1)");
    /* products beyond int are named as they are, not wrapped */
    CHECK_ERR(it_dist_layout_init(&l, 8, 65536, 65536, 2), IT_ERR_INVALID_ARG, "= 65536 x 65536 x 2 = 8589934592");
    CHECK_ERR(it_dist_layout_init_cp(&l, 8, 2, 2, 3, 1), IT_ERR_INVALID_ARG,
              "the world of 8 ranks is not DP x TP x CP x PP = 2 x 2 x 3 x 1 = 12");
    CHECK(l.world == -7); /* untouched */
}

/* "idccl": the CPU's runtime and kernels with collectives that, like NCCL's, know nothing of
 * MPI's groups: comm_init joins the ranks that hold the same unique id. The id names the world
 * rank that made it and a count, so ids of different groups differ; comm_init splits the world
 * by it (every rank of the world builds a group of the same axis at once, as the grid does)
 * and checks that the ranks it joined are nranks with distinct ranks 0..nranks-1. Sums of
 * integer-valued floats are exact in any order, so MPI's own reductions serve. */
struct it_comm {
    MPI_Comm comm;
};
static int idccl_made;
static it_status idccl_get_unique_id(it_ccl_unique_id *id) {
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    memset(id, 0, sizeof *id);
    snprintf((char *)id->bytes, sizeof id->bytes, "idccl %d %d", wr, idccl_made++);
    return IT_OK;
}
static it_status idccl_comm_init(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **out) {
    (void)device;
    int maker = -1, count = -1;
    if (sscanf((const char *)id->bytes, "idccl %d %d", &maker, &count) != 2)
        return it_error(IT_ERR_INVALID_ARG, "idccl: not an id of ours: '%.32s'", (const char *)id->bytes);
    it_comm *c = malloc(sizeof *c);
    if (!c) return it_error(IT_ERR_OOM, "idccl: out of memory");
    MPI_Comm_split(MPI_COMM_WORLD, maker, rank, &c->comm);
    int r = -1, n = -1, lo = 0, hi = 0;
    MPI_Comm_rank(c->comm, &r);
    MPI_Comm_size(c->comm, &n);
    /* the same count from every member: one id, not two that name the same maker */
    MPI_Allreduce(&count, &lo, 1, MPI_INT, MPI_MIN, c->comm);
    MPI_Allreduce(&count, &hi, 1, MPI_INT, MPI_MAX, c->comm);
    if (r != rank || n != nranks || lo != hi) {
        MPI_Comm_free(&c->comm);
        free(c);
        return it_error(IT_ERR_INVALID_ARG, "idccl: joined as rank %d of %d (ids %d..%d), asked %d of %d", r, n, lo, hi,
                        rank, nranks);
    }
    *out = c;
    return IT_OK;
}
static it_status idccl_comm_destroy(it_comm *c) {
    MPI_Comm_free(&c->comm);
    free(c);
    return IT_OK;
}
static MPI_Datatype mpi_type(it_dtype dt) {
    return dt == IT_DTYPE_FP32 ? MPI_FLOAT : dt == IT_DTYPE_I64 ? MPI_INT64_T : MPI_DATATYPE_NULL;
}
static it_status idccl_all_reduce(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt,
                                  it_reduce_kind op, it_stream *s) {
    (void)s;
    if (op != IT_CCL_SUM || mpi_type(dt) == MPI_DATATYPE_NULL) return it_error(IT_ERR_UNSUPPORTED, "idccl: SUM only");
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(dt), MPI_SUM, c->comm);
    return IT_OK;
}
static it_status idccl_all_gather(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_stream *s) {
    (void)s;
    if (mpi_type(dt) == MPI_DATATYPE_NULL) return it_error(IT_ERR_UNSUPPORTED, "idccl: fp32 and i64 only");
    MPI_Allgather(send, (int)n, mpi_type(dt), recv, (int)n, mpi_type(dt), c->comm);
    return IT_OK;
}
static it_ccl idccl_table;
static it_backend idccl;

/* The grid on `world` for dp x tp x cp x pp, checked on device dev. */
static void check_grid(it_dist *world, it_device dev, int dp, int tp, int cp, int pp, const char *what) {
    int wr = it_dist_rank(world), w = it_dist_world(world);
    it_dist_grid *g = NULL;
    CHECK_OK(it_dist_grid_new_cp(world, dp, tp, cp, pp, &g));
    if (!g) return;
    it_dist_layout l;
    CHECK_OK(it_dist_layout_init_cp(&l, w, dp, tp, cp, pp));
    int coord[IT_DIST_AXES];
    it_dist_layout_coords(&l, wr, coord);
    CHECK(it_dist_grid_rank(g) == wr);
    for (int ax = 0; ax < IT_DIST_AXES; ax++) {
        const char *name = it_dist_axis_name((it_dist_axis)ax);
        it_dist *grp = it_dist_grid_group(g, (it_dist_axis)ax);
        int n = l.size[ax], want[64];
        it_dist_layout_group_ranks(&l, (it_dist_axis)ax, wr, want);
        CHECK_MSG(it_dist_world(grp) == n && it_dist_rank(grp) == coord[ax],
                  "%s %dx%dx%d rank %d: %s group rank %d of %d, want %d of %d", what, dp, tp, pp, wr, name,
                  it_dist_rank(grp), it_dist_world(grp), coord[ax], n);
        CHECK(it_dist_grid_coord(g, (it_dist_axis)ax) == coord[ax]);
        CHECK(it_dist_grid_group_id(g, (it_dist_axis)ax) == it_dist_layout_group_id(&l, (it_dist_axis)ax, wr));
        CHECK(it_dist_staged(grp) == (n > 1 && !dev.backend->ccl));
        const int *members = it_dist_grid_members(g, (it_dist_axis)ax);
        int sum = 0, sq = 0, bad = 0;
        for (int k = 0; k < n; k++) {
            bad += members[k] != want[k];
            sum += want[k];
            sq += want[k] * want[k];
        }
        CHECK_MSG(bad == 0, "%s %dx%dx%d rank %d: %s members differ from the layout", what, dp, tp, pp, wr, name);
        it_scope_begin();
        /* SUM of the world rank and its square over the group: integers in fp32, exact */
        float v[2] = {(float)wr, (float)(wr * wr)}, got[64];
        it_tensor *t = it_tensor_from_host(dev, IT_DTYPE_FP32, 1, (int64_t[]){2}, v, sizeof v);
        CHECK_OK(it_dist_all_reduce(grp, t, IT_CCL_SUM));
        CHECK_OK(it_tensor_copy_to_host(t, got, sizeof(float) * 2));
        CHECK_MSG(got[0] == (float)sum && got[1] == (float)sq,
                  "%s %dx%dx%d rank %d: %s all_reduce gave %g, %g, want %d, %d", what, dp, tp, pp, wr, name,
                  (double)got[0], (double)got[1], sum, sq);
        /* all-gather: the members' world ranks, in group-rank order */
        it_tensor *dst = it_tensor_new(dev, IT_DTYPE_FP32, 1, (int64_t[]){n});
        it_tensor *src = it_tensor_from_host(dev, IT_DTYPE_FP32, 1, (int64_t[]){1}, v, sizeof(float));
        CHECK_OK(it_dist_all_gather(grp, src, dst));
        CHECK_OK(it_tensor_copy_to_host(dst, got, sizeof(float) * (size_t)n));
        bad = 0;
        for (int k = 0; k < n; k++) bad += got[k] != (float)want[k];
        CHECK_MSG(bad == 0, "%s %dx%dx%d rank %d: %s all_gather: %d of %d ranks out of place", what, dp, tp, pp, wr,
                  name, bad, n);
        it_scope_end();
        /* the host communicator: the same sum */
        int64_t h = wr;
        CHECK_OK(it_dist_all_reduce_host(grp, &h, 1, IT_DTYPE_I64, IT_CCL_SUM));
        CHECK_MSG(h == sum, "%s %dx%dx%d rank %d: %s host all_reduce gave %lld, want %d", what, dp, tp, pp, wr, name,
                  (long long)h, sum);
    }
    /* DP x CP: the ranks sharing tp and pp, ranked cp + CP*dp */
    it_dist *dc = it_dist_grid_dp_cp(g);
    int64_t h = wr, want = 0;
    for (int d = 0; d < dp; d++)
        for (int c = 0; c < cp; c++)
            want += it_dist_layout_rank(&l, (int[IT_DIST_AXES]){[IT_DIST_DP] = d,
                                                                [IT_DIST_TP] = coord[IT_DIST_TP],
                                                                [IT_DIST_PP] = coord[IT_DIST_PP],
                                                                [IT_DIST_CP] = c});
    CHECK_MSG(it_dist_world(dc) == dp * cp && it_dist_rank(dc) == coord[IT_DIST_CP] + cp * coord[IT_DIST_DP],
              "%s %dx%dx%dx%d rank %d: DP x CP group rank %d of %d", what, dp, tp, cp, pp, wr, it_dist_rank(dc),
              it_dist_world(dc));
    CHECK_OK(it_dist_all_reduce_host(dc, &h, 1, IT_DTYPE_I64, IT_CCL_SUM));
    CHECK_MSG(h == want, "%s %dx%dx%dx%d rank %d: DP x CP sum %lld, want %lld", what, dp, tp, cp, pp, wr, (long long)h,
              (long long)want);
    CHECK(it_dist_grid_dp_cp_id(g) == coord[IT_DIST_TP] * pp + coord[IT_DIST_PP]);
    it_dist_grid_free(g);
}

/* Every DP x TP x CP x PP that makes the world, in one fixed order (the same on every rank). */
static void check_all_grids(it_dist *world, it_device dev, const char *what) {
    int w = it_dist_world(world), grids = 0;
    for (int tp = 1; tp <= w; tp++)
        for (int cp = 1; cp <= w / tp; cp++)
            for (int pp = 1; pp <= w / (tp * cp); pp++)
                if (w % (tp * cp * pp) == 0) {
                    check_grid(world, dev, w / (tp * cp * pp), tp, cp, pp, what);
                    grids++;
                }
    CHECK(grids >= 1);
}

int main(void) {
    int n = (int)(sizeof CASES / sizeof CASES[0]);
    for (int i = 0; i < n; i++) check_layout_case(&CASES[i]);
    check_bad_sizes();

    int rank = -1, world = -1;
    it_dist_env(&rank, &world);
    it_dist *d = NULL;
    CHECK_OK(it_dist_new(it_device_cpu(), &d));
    if (!d) return it_test_report("test_dist_grid");
    CHECK(it_dist_world(d) == world && it_dist_rank(d) == rank);
    /* a grid that does not make the world fails on every rank before any communication */
    it_dist_grid *g = (it_dist_grid *)&d;
    CHECK_ERR(it_dist_grid_new(d, world, 2, 1, &g), IT_ERR_INVALID_ARG, "is not DP x TP x PP");
    CHECK(g == NULL);
    check_all_grids(d, it_device_cpu(), "cpu");
    it_device sim;
    if (it_device_parse("sim", &sim) == IT_OK) {
        it_dist *ds = NULL;
        CHECK_OK(it_dist_new(sim, &ds));
        if (ds) {
            check_all_grids(ds, sim, "sim");
            it_dist_free(ds);
        }
    } else {
        CHECK_MSG(false, "the sim device is not available: %s", it_last_error());
    }
    if (world > 1) {
        idccl = *it_device_cpu().backend;
        idccl.name = "idccl";
        idccl_table = (it_ccl){.get_unique_id = idccl_get_unique_id,
                               .comm_init = idccl_comm_init,
                               .comm_destroy = idccl_comm_destroy,
                               .all_reduce = idccl_all_reduce,
                               .all_gather = idccl_all_gather};
        idccl.ccl = &idccl_table;
        it_device dev;
        CHECK_OK(it_backend_register(&idccl));
        CHECK_OK(it_device_parse("idccl", &dev));
        it_dist *di = NULL;
        CHECK_OK(it_dist_new(dev, &di));
        if (di) {
            check_all_grids(di, dev, "idccl");
            it_dist_free(di);
        }
    }
    it_dist_free(d);
    if (world > 1) printf("rank %d of %d: ", rank, world);
    return it_test_report("test_dist_grid");
}
