/* The `missingreq` test plugin: a complete runtime, but of the three required kernels only
 * fill is present. Loading must fail with one error that names both cast and copy_strided. */
#include <stdlib.h>

#include "infinitrain/backend.h"

static struct it_stream { int unused; } mr_stream;

static it_status mr_ok(void) { return IT_OK; }
static it_status mr_device_count(int *n) {
    *n = 1;
    return IT_OK;
}
static it_status mr_set_device(int d) {
    return d == 0 ? IT_OK : it_error(IT_ERR_INVALID_ARG, "missingreq: device %d", d);
}
static it_status mr_get_device(int *d) {
    *d = 0;
    return IT_OK;
}
static it_status mr_default_stream(int d, it_stream **s) {
    (void)d;
    *s = &mr_stream;
    return IT_OK;
}
static it_status mr_stream_synchronize(it_stream *s) {
    (void)s;
    return IT_OK;
}
static it_status mr_malloc(int d, size_t n, void **p) {
    (void)d;
    *p = malloc(n);
    return *p ? IT_OK : it_error(IT_ERR_OOM, "missingreq: malloc of %zu bytes", n);
}
static it_status mr_free(int d, void *p) {
    (void)d;
    free(p);
    return IT_OK;
}
static it_status mr_memcpy(int d, void *dst, const void *src, size_t n, it_memcpy_kind k) {
    (void)d;
    (void)dst;
    (void)src;
    (void)n;
    (void)k;
    return it_error(IT_ERR_UNSUPPORTED, "missingreq: memcpy is never reached");
}
static it_status mr_mem_info(int d, size_t *fr, size_t *tot) {
    (void)d;
    *fr = *tot = 0;
    return IT_OK;
}
static it_status mr_synchronize_device(int d) {
    (void)d;
    return IT_OK;
}

static const it_runtime mr_runtime = {
    .init = mr_ok,
    .device_count = mr_device_count,
    .set_device = mr_set_device,
    .get_device = mr_get_device,
    .default_stream = mr_default_stream,
    .stream_synchronize = mr_stream_synchronize,
    .malloc = mr_malloc,
    .free = mr_free,
    .memcpy = mr_memcpy,
    .mem_info = mr_mem_info,
    .synchronize_device = mr_synchronize_device,
};

static it_kernels mr_kernels; /* only fill, set by the entry point */

static const it_backend mr_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "missingreq",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = &mr_runtime,
    .kernels = &mr_kernels,
    .ccl = NULL,
    .kernels_size = sizeof(it_kernels),
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    mr_kernels.fill = it_cpu_kernels()->fill;
    mr_kernels.gemm = it_cpu_kernels()->gemm; /* an optional slot, to show only required ones are named */
    return &mr_backend;
}
