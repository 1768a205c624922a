/* The flash attention tasks for one ISA (flash_attention.c includes this once per ISA, with
 * FA_TARGET the functions' target attribute, FA_SFX their names' suffix and FA_MM the block
 * product). The loops are plain C that the compiler vectorizes for the target; their
 * arithmetic is elementwise or in a fixed order, so every ISA gives the same bits.
 *
 * A task's scratch is its shared blocks (fa_*_shared floats), then each block's state
 * (fa_*_blk_floats). Tasks are numbered head by head, the heaviest of a head first (with
 * causal: the last query blocks, the first key blocks), so that a thread's next task mostly
 * reads the same head and the short tasks come last. */

#define FA_FN(name) FA_CAT(name, FA_SFX)

/* ---------------------------------------------------------------- forward */

/* Query block qb of head (b, h) at w: q^T, m = -inf, l = 0, O^T = 0. */
FA_TARGET static void FA_FN(fwd_start)(const fa_ctx *c, fa_fwd_blk *k, float *w, int64_t b, int64_t h, int64_t qb,
                                       float *tmp) {
    const int64_t Dp = c->Dp;
    k->ot = w, k->qt = w + FA_BR * Dp, k->m = k->qt + FA_BR * Dp, k->l = k->m + FA_BR, k->mu = k->l + FA_BR;
    k->al = k->mu + FA_BR, k->sum = k->al + FA_BR;
    k->t0 = qb * FA_BR, k->nr = fa_min(FA_BR, c->T - k->t0), k->nrp = (int)fa_pad(k->nr);
    k->kend = fa_vis_end(c, k->t0 + k->nr - 1);
    fa_rows_t(c, &c->q, b, h, k->t0, k->nr, k->nrp, k->qt, FA_BR, tmp);
    for (int i = 0; i < k->nrp; i++) k->m[i] = -INFINITY, k->l[i] = 0.0f;
    memset(k->ot, 0, (size_t)(c->D * FA_BR) * sizeof(float));
}

/* Keys [s0, s0 + nc) (kp, vp: their rows) for a query block: S^T = scale K Q^T masked, the
 * running max m, P^T = exp(S^T - m), l = al l + column sums, O^T = O^T diag(al) + V^T P^T
 * with al = exp(m_old - m_new). st: (FA_BC, FA_BR) scratch. */
FA_TARGET static void FA_FN(fwd_block)(const fa_ctx *c, fa_fwd_blk *k, const float *kp, int64_t ldk, const float *vp,
                                       int64_t ldv, int64_t s0, int64_t nc, float *st) {
    const int nrp = k->nrp;
    float *m = k->m, *l = k->l, *mu = k->mu, *al = k->al, *sum = k->sum;
    FA_MM(FA_SET, nc, nrp, c->D, c->scale, kp, ldk, 1, k->qt, FA_BR, st, FA_BR, NULL);
    /* mu = each query's (column's) new running max; keys a query does not see are -inf */
    for (int i = 0; i < nrp; i++) mu[i] = m[i];
    if (c->causal && s0 + nc - 1 > k->t0 + c->off) { /* the block's last key is past the first row's */
        for (int64_t j = 0; j < nc; j++) {
            float *row = st + j * FA_BR;
            const int th = (int)fa_clamp(s0 + j - k->t0 - c->off, 0, nrp); /* the first query that sees key j */
#pragma omp simd
            for (int i = 0; i < nrp; i++) {
                float sv = i >= th ? row[i] : -INFINITY;
                row[i] = sv;
                mu[i] = sv > mu[i] ? sv : mu[i];
            }
        }
    } else {
        for (int64_t j = 0; j < nc; j++) {
            const float *row = st + j * FA_BR;
#pragma omp simd
            for (int i = 0; i < nrp; i++) mu[i] = row[i] > mu[i] ? row[i] : mu[i];
        }
    }
    /* a query that has seen only masked keys keeps m = -inf and subtracts 0 instead, so that
     * its exps are exp(-inf) = 0 rather than NaN */
#pragma omp simd
    for (int i = 0; i < nrp; i++) {
        float mn = mu[i], use = mn == -INFINITY ? 0.0f : mn;
        al[i] = fa_exp(m[i] - use);
        m[i] = mn;
        mu[i] = use;
        sum[i] = 0.0f;
    }
    for (int64_t j = 0; j < nc; j++) {
        float *row = st + j * FA_BR;
#pragma omp simd
        for (int i = 0; i < nrp; i++) {
            float p = fa_exp(row[i] - mu[i]);
            row[i] = p;
            sum[i] += p;
        }
    }
#pragma omp simd
    for (int i = 0; i < nrp; i++) l[i] = al[i] * l[i] + sum[i];
    FA_MM(FA_SCALE, c->D, nrp, nc, 1.0f, vp, 1, ldv, st, FA_BR, k->ot, FA_BR, al);
}

/* y = O / l and lse = m + log l for the block's rows (y = 0, lse = -inf for a row that sees
 * no key). */
FA_TARGET static void FA_FN(fwd_finish)(const fa_ctx *c, const fa_fwd_blk *k, int64_t b, int64_t h, float *tmp) {
    float *lse = c->lse + (b * c->H + h) * c->T + k->t0;
    for (int64_t i = 0; i < k->nr; i++) {
        bool none = fa_vis_end(c, k->t0 + i) == 0;
        float li = k->l[i];
        for (int64_t d = 0; d < c->D; d++) tmp[d] = none ? 0.0f : k->ot[d * FA_BR + i] / li;
        lse[i] = none ? -INFINITY : k->m[i] + logf(li);
        fa_narrow(c->dt, tmp, fa_at(c, &c->y, b, h, k->t0 + i), c->D);
    }
}

/* Up to gq query blocks of head (b, h), the key blocks they see read once for all. */
FA_TARGET static void FA_FN(fwd_task)(const fa_ctx *c, float *ws, int64_t task) {
    const int64_t ng = fa_ceil(c->nqb, c->gq), bh = task / ng, q0 = (ng - 1 - task % ng) * c->gq;
    const int64_t b = bh / c->H, h = bh % c->H, g = h / c->r, Dp = c->Dp, nb = fa_min(c->gq, c->nqb - q0);
    float *kc = ws, *vc = kc + FA_BC * Dp, *st = vc + FA_BC * Dp, *tmp = st + FA_BC * FA_BR, *w = tmp + Dp;
    fa_fwd_blk blk[FA_GMAX];
    int64_t kend = 0;
    for (int64_t u = 0; u < nb; u++) {
        FA_FN(fwd_start)(c, &blk[u], w + u * fa_fwd_blk_floats(Dp), b, h, q0 + u, tmp);
        kend = fa_max(kend, blk[u].kend);
    }
    for (int64_t s0 = 0; s0 < kend; s0 += FA_BC) {
        const int64_t nc = fa_min(FA_BC, kend - s0);
        int64_t ldk, ldv;
        const float *kp = fa_rows(c, &c->k, b, g, s0, nc, kc, &ldk), *vp = fa_rows(c, &c->v, b, g, s0, nc, vc, &ldv);
        for (int64_t u = 0; u < nb; u++)
            if (s0 < blk[u].kend) FA_FN(fwd_block)(c, &blk[u], kp, ldk, vp, ldv, s0, fa_min(nc, blk[u].kend - s0), st);
    }
    for (int64_t u = 0; u < nb; u++) FA_FN(fwd_finish)(c, &blk[u], b, h, tmp);
}

/* ---------------------------------------------------------------- backward */

/* delta_t = dy_t . y_t for the T rows of head bh = b H + h (fa_dot16's order). */
FA_TARGET static void FA_FN(delta_task)(const fa_ctx *c, float *ws, int64_t bh) {
    const int64_t b = bh / c->H, h = bh % c->H, D = c->D, Dp = c->Dp;
    float *yr = ws, *dyr = ws + Dp;
    for (int64_t d = D; d < Dp; d++) yr[d] = dyr[d] = 0.0f;
    for (int64_t t = 0; t < c->T; t++) {
        fa_widen(c->dt, fa_at(c, &c->y, b, h, t), yr, D);
        fa_widen(c->dt, fa_at(c, &c->dy, b, h, t), dyr, D);
        c->delta[bh * c->T + t] = fa_dot16(dyr, yr, Dp);
    }
}

/* Query block qb of head (b, h) at w for the dq pass: q^T, dy^T, lse, delta, dQ^T = 0. */
FA_TARGET static void FA_FN(dq_start)(const fa_ctx *c, fa_dq_blk *k, float *w, int64_t b, int64_t h, int64_t qb,
                                      float *tmp) {
    const int64_t Dp = c->Dp;
    k->qt = w, k->dyt = w + FA_BR * Dp, k->dqt = k->dyt + FA_BR * Dp, k->ls = k->dqt + FA_BR * Dp;
    k->de = k->ls + FA_BR;
    k->t0 = qb * FA_BR, k->nr = fa_min(FA_BR, c->T - k->t0), k->nrp = (int)fa_pad(k->nr);
    k->kend = fa_vis_end(c, k->t0 + k->nr - 1);
    fa_rows_t(c, &c->q, b, h, k->t0, k->nr, k->nrp, k->qt, FA_BR, tmp);
    fa_rows_t(c, &c->dy, b, h, k->t0, k->nr, k->nrp, k->dyt, FA_BR, tmp);
    const float *lse = c->lse + (b * c->H + h) * c->T + k->t0, *delta = c->delta + (b * c->H + h) * c->T + k->t0;
    for (int i = 0; i < k->nrp; i++) k->ls[i] = i < k->nr ? lse[i] : 0.0f, k->de[i] = i < k->nr ? delta[i] : 0.0f;
    memset(k->dqt, 0, (size_t)(c->D * FA_BR) * sizeof(float));
}

/* Keys [s0, s0 + nc) for a query block's dq: S^T = scale K Q^T, dP^T = V dY^T, dS^T = scale
 * P^T (dP^T - delta) with P^T = exp(S^T - lse) (0 where masked), dQ^T += K^T dS^T. st, dpt:
 * (FA_BC, FA_BR) scratch. */
FA_TARGET static void FA_FN(dq_block)(const fa_ctx *c, fa_dq_blk *k, const float *kp, int64_t ldk, const float *vp,
                                      int64_t ldv, int64_t s0, int64_t nc, float *st, float *dpt) {
    const int nrp = k->nrp, nri = (int)k->nr;
    const float scale = c->scale, *ls = k->ls, *de = k->de;
    FA_MM(FA_SET, nc, nrp, c->D, scale, kp, ldk, 1, k->qt, FA_BR, st, FA_BR, NULL);
    FA_MM(FA_SET, nc, nrp, c->D, 1.0f, vp, ldv, 1, k->dyt, FA_BR, dpt, FA_BR, NULL);
    const bool masked = c->causal && s0 + nc - 1 > k->t0 + c->off;
    for (int64_t j = 0; j < nc; j++) {
        const float *srow = st + j * FA_BR;
        float *drow = dpt + j * FA_BR;
        const int th = masked ? (int)fa_clamp(s0 + j - k->t0 - c->off, 0, nrp) : 0; /* the first query seeing key j */
#pragma omp simd
        for (int i = 0; i < nrp; i++) {
            float p = fa_exp(srow[i] - ls[i]);
            float ds = p * (drow[i] - de[i]) * scale;
            drow[i] = i >= th && i < nri ? ds : 0.0f;
        }
    }
    FA_MM(FA_ADD, c->D, nrp, nc, 1.0f, kp, 1, ldk, dpt, FA_BR, k->dqt, FA_BR, NULL);
}

/* dq for up to gq query blocks of head (b, h), numbered as the forward's tasks. */
FA_TARGET static void FA_FN(dq_task)(const fa_ctx *c, float *ws, int64_t task) {
    const int64_t ng = fa_ceil(c->nqb, c->gq), bh = task / ng, q0 = (ng - 1 - task % ng) * c->gq;
    const int64_t b = bh / c->H, h = bh % c->H, g = h / c->r, Dp = c->Dp, nb = fa_min(c->gq, c->nqb - q0);
    float *kc = ws, *vc = kc + FA_BC * Dp, *st = vc + FA_BC * Dp, *dpt = st + FA_BC * FA_BR, *tmp = dpt + FA_BC * FA_BR;
    float *w = tmp + Dp;
    fa_dq_blk blk[FA_GMAX];
    int64_t kend = 0;
    for (int64_t u = 0; u < nb; u++) {
        FA_FN(dq_start)(c, &blk[u], w + u * fa_dq_blk_floats(Dp), b, h, q0 + u, tmp);
        kend = fa_max(kend, blk[u].kend);
    }
    for (int64_t s0 = 0; s0 < kend; s0 += FA_BC) {
        const int64_t nc = fa_min(FA_BC, kend - s0);
        int64_t ldk, ldv;
        const float *kp = fa_rows(c, &c->k, b, g, s0, nc, kc, &ldk), *vp = fa_rows(c, &c->v, b, g, s0, nc, vc, &ldv);
        for (int64_t u = 0; u < nb; u++)
            if (s0 < blk[u].kend)
                FA_FN(dq_block)(c, &blk[u], kp, ldk, vp, ldv, s0, fa_min(nc, blk[u].kend - s0), st, dpt);
    }
    for (int64_t u = 0; u < nb; u++)
        for (int64_t i = 0; i < blk[u].nr; i++) fa_store_t(c, blk[u].dqt, FA_BR, i, &c->dq, b, h, blk[u].t0 + i, tmp);
}

/* Key block kb of kv head (b, g) at w for the dk/dv pass: k^T, v^T, dK^T = dV^T = 0. */
FA_TARGET static void FA_FN(dkv_start)(const fa_ctx *c, fa_dkv_blk *k, float *w, int64_t b, int64_t g, int64_t kb,
                                       float *tmp) {
    const int64_t Dp = c->Dp;
    k->kt = w, k->vt = w + FA_BC * Dp, k->dkt = k->vt + FA_BC * Dp, k->dvt = k->dkt + FA_BC * Dp;
    k->s0 = kb * FA_BC, k->nc = fa_min(FA_BC, c->S - k->s0), k->ncp = (int)fa_pad(k->nc);
    k->first = c->causal ? fa_clamp(k->s0 - c->off, 0, c->T) : 0; /* the first row that sees key s0 */
    fa_rows_t(c, &c->k, b, g, k->s0, k->nc, k->ncp, k->kt, FA_BC, tmp);
    fa_rows_t(c, &c->v, b, g, k->s0, k->nc, k->ncp, k->vt, FA_BC, tmp);
    memset(k->dkt, 0, (size_t)(c->D * FA_BC) * sizeof(float));
    memset(k->dvt, 0, (size_t)(c->D * FA_BC) * sizeof(float));
}

/* Query rows [t0, t0 + nr) (qp, dyp: their rows; ls, de: their lse and delta) for a key
 * block: S = scale Q K^T, dP = dY V^T, P = exp(S - lse) and dS = scale P (dP - delta) (0
 * where masked), dV^T += dY^T P, dK^T += Q^T dS. sp, dp: (FA_BR, FA_BC) scratch. */
FA_TARGET static void FA_FN(dkv_block)(const fa_ctx *c, fa_dkv_blk *k, const float *qp, int64_t ldq, const float *dyp,
                                       int64_t lddy, const float *ls, const float *de, int64_t t0, int64_t nr,
                                       float *sp, float *dp) {
    const int ncp = k->ncp;
    const float scale = c->scale;
    FA_MM(FA_SET, nr, ncp, c->D, scale, qp, ldq, 1, k->kt, FA_BC, sp, FA_BC, NULL);
    FA_MM(FA_SET, nr, ncp, c->D, 1.0f, dyp, lddy, 1, k->vt, FA_BC, dp, FA_BC, NULL);
    for (int64_t i = 0; i < nr; i++) {
        float *srow = sp + i * FA_BC, *drow = dp + i * FA_BC;
        const float li = ls[i], di = de[i];
        /* row t0 + i sees the block's keys j <= lim */
        const int lim = (int)(c->causal ? fa_clamp(t0 + i + c->off - k->s0, -1, k->nc - 1) : k->nc - 1);
#pragma omp simd
        for (int j = 0; j < ncp; j++) {
            float p = fa_exp(srow[j] - li);
            float ds = p * (drow[j] - di) * scale;
            srow[j] = j <= lim ? p : 0.0f;
            drow[j] = j <= lim ? ds : 0.0f;
        }
    }
    FA_MM(FA_ADD, c->D, ncp, nr, 1.0f, dyp, 1, lddy, sp, FA_BC, k->dvt, FA_BC, NULL);
    FA_MM(FA_ADD, c->D, ncp, nr, 1.0f, qp, 1, ldq, dp, FA_BC, k->dkt, FA_BC, NULL);
}

/* dk and dv for up to gk key blocks of kv head (b, g), summed over the group's query heads
 * and the query blocks that see them, each q and dy block read once for all. */
FA_TARGET static void FA_FN(dkv_task)(const fa_ctx *c, float *ws, int64_t task) {
    const int64_t ng = fa_ceil(c->nkb, c->gk), bg = task / ng, k0 = task % ng * c->gk, b = bg / c->Hkv;
    const int64_t g = bg % c->Hkv, Dp = c->Dp, nb = fa_min(c->gk, c->nkb - k0);
    float *qc = ws, *dyc = qc + FA_BR * Dp, *sp = dyc + FA_BR * Dp, *dp = sp + FA_BR * FA_BC, *tmp = dp + FA_BR * FA_BC;
    float *w = tmp + Dp;
    fa_dkv_blk blk[FA_GMAX];
    for (int64_t u = 0; u < nb; u++) FA_FN(dkv_start)(c, &blk[u], w + u * fa_dkv_blk_floats(Dp), b, g, k0 + u, tmp);
    for (int64_t h = g * c->r; h < (g + 1) * c->r; h++) {
        const float *lse = c->lse + (b * c->H + h) * c->T, *delta = c->delta + (b * c->H + h) * c->T;
        /* rows before blk[0].first (the group's smallest) see none of its keys */
        for (int64_t t0 = blk[0].first / FA_BR * FA_BR; t0 < c->T; t0 += FA_BR) {
            const int64_t nr = fa_min(FA_BR, c->T - t0);
            int64_t ldq, lddy;
            const float *qp = fa_rows(c, &c->q, b, h, t0, nr, qc, &ldq);
            const float *dyp = fa_rows(c, &c->dy, b, h, t0, nr, dyc, &lddy);
            for (int64_t u = 0; u < nb; u++)
                if (t0 + nr > blk[u].first)
                    FA_FN(dkv_block)(c, &blk[u], qp, ldq, dyp, lddy, lse + t0, delta + t0, t0, nr, sp, dp);
        }
    }
    for (int64_t u = 0; u < nb; u++)
        for (int64_t j = 0; j < blk[u].nc; j++) {
            fa_store_t(c, blk[u].dkt, FA_BC, j, &c->dk, b, g, blk[u].s0 + j, tmp);
            fa_store_t(c, blk[u].dvt, FA_BC, j, &c->dv, b, g, blk[u].s0 + j, tmp);
        }
}

#undef FA_FN
