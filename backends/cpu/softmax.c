/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    (void)s; (void)args; (void)x; (void)y;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                             it_tdesc *dx) {
    (void)s; (void)args; (void)y; (void)dy; (void)dx;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
