/* The `wrongname` test plugin: the file is libit_backend_wrongname.so, but the backend it
 * returns calls itself "other". Otherwise a valid backend, so the name mismatch is the only
 * reason the loader can give for refusing it. */
#include <stdlib.h>

#include "infinitrain/backend.h"

static struct it_stream { int unused; } wn_stream;

static it_status wn_ok(void) { return IT_OK; }
static it_status wn_device_count(int *n) {
    *n = 1;
    return IT_OK;
}
static it_status wn_set_device(int d) {
    return d == 0 ? IT_OK : it_error(IT_ERR_INVALID_ARG, "wrongname: device %d", d);
}
static it_status wn_get_device(int *d) {
    *d = 0;
    return IT_OK;
}
static it_status wn_default_stream(int d, it_stream **s) {
    (void)d;
    *s = &wn_stream;
    return IT_OK;
}
static it_status wn_stream_synchronize(it_stream *s) {
    (void)s;
    return IT_OK;
}
static it_status wn_malloc(int d, size_t n, void **p) {
    (void)d;
    *p = malloc(n);
    return *p ? IT_OK : it_error(IT_ERR_OOM, "wrongname: malloc of %zu bytes", n);
}
static it_status wn_free(int d, void *p) {
    (void)d;
    free(p);
    return IT_OK;
}
static it_status wn_memcpy(int d, void *dst, const void *src, size_t n, it_memcpy_kind k) {
    (void)d;
    (void)dst;
    (void)src;
    (void)n;
    (void)k;
    return it_error(IT_ERR_UNSUPPORTED, "wrongname: memcpy is never reached");
}
static it_status wn_mem_info(int d, size_t *fr, size_t *tot) {
    (void)d;
    *fr = *tot = 0;
    return IT_OK;
}
static it_status wn_synchronize_device(int d) {
    (void)d;
    return IT_OK;
}

static const it_runtime wn_runtime = {
    .init = wn_ok,
    .device_count = wn_device_count,
    .set_device = wn_set_device,
    .get_device = wn_get_device,
    .default_stream = wn_default_stream,
    .stream_synchronize = wn_stream_synchronize,
    .malloc = wn_malloc,
    .free = wn_free,
    .memcpy = wn_memcpy,
    .mem_info = wn_mem_info,
    .synchronize_device = wn_synchronize_device,
};

static it_kernels wn_kernels; /* the three required kernels, set by the entry point */

static const it_backend wn_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "other",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = &wn_runtime,
    .kernels = &wn_kernels,
    .ccl = NULL,
    .kernels_size = sizeof(it_kernels),
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    wn_kernels.cast = it_cpu_kernels()->cast;
    wn_kernels.fill = it_cpu_kernels()->fill;
    wn_kernels.copy_strided = it_cpu_kernels()->copy_strided;
    return &wn_backend;
}
