/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    (void)s; (void)lr; (void)grad_scale; (void)param; (void)grad;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                           it_tdesc *m, it_tdesc *v) {
    (void)s; (void)args; (void)param; (void)grad; (void)m; (void)v;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
