/* The sim backend: a simulated accelerator, built as the plugin libit_backend_sim.so and
 * selected with `--device sim` / it_device_parse("sim:1").
 *
 * It is the template for porting a real chip (see README.md): device memory the host
 * cannot read (memory.c), asynchronous streams and events (runtime.c), every kernel slot
 * launched asynchronously on a stream (kernels.c). The arithmetic is the CPU backend's, so
 * results match the cpu device bit for bit; everything around the arithmetic behaves as a
 * discrete accelerator does, so core code that only works on host memory fails here. */
#include "sim.h"

static const it_backend sim_backend = {
    .api_version = IT_BACKEND_API_VERSION,
#ifndef IT_SIM_HALF
    .name = "sim",
#else
    .name = "simhalf", /* the reduced test build, see kernels.c */
#endif
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false, /* device pointers are never host-readable */
    .runtime = &sim_runtime,
    .kernels = &sim_kernels,
    .ccl = NULL, /* a real backend plugs NCCL / CNCL in here */
    .kernels_size = sizeof(it_kernels),
};

/* The one symbol the core looks up (dlsym "it_backend_entry"). No work happens here: the
 * driver is touched in runtime.init, which the core calls lazily on first use. */
IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) { return &sim_backend; }
