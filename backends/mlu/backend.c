/* The Cambricon MLU backend: plugin libit_backend_mlu.so, `--device mlu`.
 * Nothing is loaded here: runtime.init (called lazily by the core) dlopens libcnrt.so,
 * libcnnl.so and libcncl.so, and fails with one message when they are absent. */
#include "mlu.h"

static const it_backend mlu_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "mlu",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = &mlu_runtime,
    .kernels = &mlu_kernels,
    .ccl = &mlu_ccl,
    .kernels_size = sizeof(it_kernels),
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) { return &mlu_backend; }
