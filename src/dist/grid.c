/* The TP x CP x DP x PP process grid: the layout (pure arithmetic, InfiniTrain's order) and
 * its groups, split from the world group by it_dist_split, with the DP x CP group that takes
 * DP's place for the gradients when the sequence is cut (context parallelism). */
#include <stdlib.h>

#include "infinitrain/dist.h"

const char *it_dist_axis_name(it_dist_axis ax) {
    switch (ax) {
    case IT_DIST_DP: return "DP";
    case IT_DIST_TP: return "TP";
    case IT_DIST_PP: return "PP";
    case IT_DIST_CP: return "CP";
    }
    return "?";
}

it_status it_dist_layout_init(it_dist_layout *l, int world, int dp, int tp, int pp) {
    return it_dist_layout_init_cp(l, world, dp, tp, 1, pp);
}

it_status it_dist_layout_init_cp(it_dist_layout *l, int world, int dp, int tp, int cp, int pp) {
    /* the product in 64 bits: sizes that overflow int are still reported as what they are */
    long long prod = (long long)dp * tp * cp * pp;
    bool below = world < 1 || dp < 1 || tp < 1 || cp < 1 || pp < 1;
    if (below || prod != world) {
        const char *why = below ? " (every size must be >= 1)" : "";
        if (cp == 1)
            return it_error(IT_ERR_INVALID_ARG,
                            "process grid: the world of %d ranks is not DP x TP x PP = %d x %d x %d = %lld%s", world,
                            dp, tp, pp, prod, why);
        return it_error(IT_ERR_INVALID_ARG,
                        "process grid: the world of %d ranks is not DP x TP x CP x PP = %d x %d x %d x %d = %lld%s",
                        world, dp, tp, cp, pp, prod, why);
    }
    l->world = world;
    l->size[IT_DIST_DP] = dp;
    l->size[IT_DIST_TP] = tp;
    l->size[IT_DIST_CP] = cp;
    l->size[IT_DIST_PP] = pp;
    /* TP varies fastest, then CP, DP, PP */
    l->stride[IT_DIST_TP] = 1;
    l->stride[IT_DIST_CP] = tp;
    l->stride[IT_DIST_DP] = tp * cp;
    l->stride[IT_DIST_PP] = tp * cp * dp;
    return IT_OK;
}

int it_dist_layout_rank(const it_dist_layout *l, const int coord[IT_DIST_AXES]) {
    int r = 0;
    for (int a = 0; a < IT_DIST_AXES; a++) r += coord[a] * l->stride[a];
    return r;
}

void it_dist_layout_coords(const it_dist_layout *l, int rank, int coord[IT_DIST_AXES]) {
    for (int a = 0; a < IT_DIST_AXES; a++) coord[a] = rank / l->stride[a] % l->size[a];
}

int it_dist_layout_group_id(const it_dist_layout *l, it_dist_axis ax, int rank) {
    int c[IT_DIST_AXES];
    it_dist_layout_coords(l, rank, c);
    /* InfiniTrain's numbering: the other coordinates, the outer axis of the tp-cp-dp-pp order
     * varying fastest (PP, then DP, CP, TP); a CP of one adds nothing to any id */
    static const it_dist_axis outer_first[IT_DIST_AXES] = {IT_DIST_PP, IT_DIST_DP, IT_DIST_CP, IT_DIST_TP};
    int id = 0, mult = 1;
    for (int i = 0; i < IT_DIST_AXES; i++) {
        it_dist_axis a = outer_first[i];
        if (a == ax) continue;
        id += c[a] * mult;
        mult *= l->size[a];
    }
    return id;
}

void it_dist_layout_group_ranks(const it_dist_layout *l, it_dist_axis ax, int rank, int *out) {
    int c[IT_DIST_AXES];
    it_dist_layout_coords(l, rank, c);
    for (int v = 0; v < l->size[ax]; v++) {
        c[ax] = v;
        out[v] = it_dist_layout_rank(l, c);
    }
}

struct it_dist_grid {
    it_dist_layout layout;
    int rank;
    int coord[IT_DIST_AXES];
    int id[IT_DIST_AXES];
    int *members[IT_DIST_AXES]; /* size[a] world ranks each */
    it_dist *group[IT_DIST_AXES];
    it_dist *dp_cp; /* DP x CP (NULL when CP is 1: the DP group serves) */
    int dp_cp_id;
};

it_status it_dist_grid_new(it_dist *world, int dp, int tp, int pp, it_dist_grid **out) {
    return it_dist_grid_new_cp(world, dp, tp, 1, pp, out);
}

it_status it_dist_grid_new_cp(it_dist *world, int dp, int tp, int cp, int pp, it_dist_grid **out) {
    *out = NULL;
    it_dist_layout l;
    it_status st = it_dist_layout_init_cp(&l, it_dist_world(world), dp, tp, cp, pp);
    if (st) return st;
    it_dist_grid *g = calloc(1, sizeof *g);
    if (!g) return it_error(IT_ERR_OOM, "process grid: out of host memory");
    g->layout = l;
    g->rank = it_dist_rank(world);
    it_dist_layout_coords(&l, g->rank, g->coord);
    for (int a = 0; a < IT_DIST_AXES && !st; a++) {
        g->id[a] = it_dist_layout_group_id(&l, (it_dist_axis)a, g->rank);
        g->members[a] = malloc(sizeof(int) * (size_t)l.size[a]);
        if (!g->members[a]) {
            st = it_error(IT_ERR_OOM, "process grid: out of host memory");
            break;
        }
        it_dist_layout_group_ranks(&l, (it_dist_axis)a, g->rank, g->members[a]);
        /* one split per axis, in the same order on every rank: the group id as the color
         * (unique within the axis), the coordinate as the key, so the rank in the group is
         * the coordinate */
        st = it_dist_split(world, g->id[a], g->coord[a], &g->group[a]);
        if (!st) it_dist_set_label(g->group[a], it_dist_axis_name((it_dist_axis)a));
        if (!st && (it_dist_world(g->group[a]) != l.size[a] || it_dist_rank(g->group[a]) != g->coord[a]))
            st = it_error(IT_ERR_BACKEND, "process grid: the %s group has rank %d of %d, the layout says %d of %d",
                          it_dist_axis_name((it_dist_axis)a), it_dist_rank(g->group[a]), it_dist_world(g->group[a]),
                          g->coord[a], l.size[a]);
    }
    /* DP x CP: the ranks that share tp and pp, ranked dp-major as the layout orders them
     * (cp + CP*dp); InfiniTrain's id tp*PP + pp */
    g->dp_cp_id = g->coord[IT_DIST_TP] * pp + g->coord[IT_DIST_PP];
    if (!st && cp > 1)
        st = it_dist_split(world, g->dp_cp_id, g->coord[IT_DIST_CP] + cp * g->coord[IT_DIST_DP], &g->dp_cp);
    if (!st && cp > 1) it_dist_set_label(g->dp_cp, "DPxCP");
    if (st) {
        it_dist_grid_free(g);
        return st;
    }
    *out = g;
    return IT_OK;
}

void it_dist_grid_free(it_dist_grid *g) {
    if (!g) return;
    /* the reverse of creation */
    it_dist_free(g->dp_cp);
    for (int a = IT_DIST_AXES - 1; a >= 0; a--) {
        it_dist_free(g->group[a]);
        free(g->members[a]);
    }
    free(g);
}

const it_dist_layout *it_dist_grid_layout(const it_dist_grid *g) { return &g->layout; }
int it_dist_grid_rank(const it_dist_grid *g) { return g->rank; }
int it_dist_grid_coord(const it_dist_grid *g, it_dist_axis ax) { return g->coord[ax]; }
it_dist *it_dist_grid_group(const it_dist_grid *g, it_dist_axis ax) { return g->group[ax]; }
int it_dist_grid_group_id(const it_dist_grid *g, it_dist_axis ax) { return g->id[ax]; }
const int *it_dist_grid_members(const it_dist_grid *g, it_dist_axis ax) { return g->members[ax]; }
it_dist *it_dist_grid_dp_cp(const it_dist_grid *g) { return g->dp_cp ? g->dp_cp : g->group[IT_DIST_DP]; }
int it_dist_grid_dp_cp_id(const it_dist_grid *g) { return g->dp_cp_id; }
