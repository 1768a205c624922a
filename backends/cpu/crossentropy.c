/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   it_tdesc *losses) {
    (void)s; (void)logits; (void)targets; (void)valid; (void)losses;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                   const it_tdesc *dlosses, it_tdesc *dlogits) {
    (void)s; (void)logits; (void)targets; (void)valid; (void)dlosses; (void)dlogits;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
