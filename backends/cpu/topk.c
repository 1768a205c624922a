/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices) {
    (void)s; (void)x; (void)k; (void)values; (void)indices;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
