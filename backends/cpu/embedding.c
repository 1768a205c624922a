/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    (void)s; (void)idx; (void)weight; (void)out;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {
    (void)s; (void)idx; (void)dout; (void)dweight;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
