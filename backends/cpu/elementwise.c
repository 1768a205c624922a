/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    (void)s; (void)op; (void)alpha; (void)x; (void)out;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    (void)s; (void)op; (void)a; (void)b; (void)out;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}

it_status it_cpu_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    (void)s; (void)op; (void)x; (void)out;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
