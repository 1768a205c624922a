/* placeholder until the real kernels land */
#include "cpu/cpu_kernels.h"

it_status it_cpu_gemm(it_stream *s, const it_gemm_args *args) {
    (void)s; (void)args;
    return it_error(IT_ERR_UNSUPPORTED, "%s: not implemented yet", __func__);
}
