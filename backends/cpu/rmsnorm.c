/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                             it_tdesc *rstd) {
    (void)s; (void)x; (void)w; (void)eps; (void)y; (void)rstd;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                             const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    (void)s; (void)dy; (void)x; (void)w; (void)rstd; (void)dx; (void)dw;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
