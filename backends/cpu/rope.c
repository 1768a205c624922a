/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                      it_tdesc *y) {
    (void)s; (void)x; (void)cos; (void)sin; (void)inverse; (void)y;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
