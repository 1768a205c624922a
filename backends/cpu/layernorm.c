/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                               it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    (void)s; (void)x; (void)w; (void)b; (void)eps; (void)y; (void)mean; (void)rstd;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                               const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                               it_tdesc *db) {
    (void)s; (void)dy; (void)x; (void)w; (void)mean; (void)rstd; (void)dx; (void)dw; (void)db;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
