/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    (void)s; (void)src; (void)dst;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_fill(it_stream *s, it_tdesc *dst, it_scalar value) {
    (void)s; (void)dst; (void)value;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    (void)s; (void)src; (void)dst;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
