/* The `oldtable` test plugin: a backend as built before topk, attention_fwd and attention_bwd
 * were appended to it_kernels. Its kernel table is an object of 20 slots (cast .. rope) and
 * no more, and kernels_size says so; the core must read exactly those, take the three later
 * slots as NULL (topk served by the CPU fallback, the attention pair composed) and load it.
 *
 * Slots: cast, fill, copy_strided, gemm and rope (the last of its table) from the CPU
 * backend, the others NULL. One device whose "device memory" is host memory behind a real
 * memcpy, with host_memory = false, so fallback calls move their bytes through this runtime. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/backend.h"

static struct it_stream { int unused; } ot_stream;

static it_status ot_ok(void) { return IT_OK; }
static it_status ot_device_count(int *n) {
    *n = 1;
    return IT_OK;
}
static it_status ot_set_device(int d) {
    return d == 0 ? IT_OK : it_error(IT_ERR_INVALID_ARG, "oldtable: device %d out of range", d);
}
static it_status ot_get_device(int *d) {
    *d = 0;
    return IT_OK;
}
static it_status ot_default_stream(int d, it_stream **s) {
    (void)d;
    *s = &ot_stream;
    return IT_OK;
}
static it_status ot_stream_synchronize(it_stream *s) {
    (void)s;
    return IT_OK; /* kernels run when they are called */
}
static it_status ot_malloc(int d, size_t n, void **p) {
    (void)d;
    *p = malloc(n);
    return *p ? IT_OK : it_error(IT_ERR_OOM, "oldtable: malloc of %zu bytes", n);
}
static it_status ot_free(int d, void *p) {
    (void)d;
    free(p);
    return IT_OK;
}
static it_status ot_memcpy(int d, void *dst, const void *src, size_t n, it_memcpy_kind k) {
    (void)d;
    (void)k;
    memmove(dst, src, n);
    return IT_OK;
}
static it_status ot_mem_info(int d, size_t *fr, size_t *tot) {
    (void)d;
    *fr = *tot = (size_t)1 << 30;
    return IT_OK;
}
static it_status ot_synchronize_device(int d) {
    (void)d;
    return IT_OK;
}

static const it_runtime ot_runtime = {
    .init = ot_ok,
    .device_count = ot_device_count,
    .set_device = ot_set_device,
    .get_device = ot_get_device,
    .default_stream = ot_default_stream,
    .stream_synchronize = ot_stream_synchronize,
    .malloc = ot_malloc,
    .free = ot_free,
    .memcpy = ot_memcpy,
    .mem_info = ot_mem_info,
    .synchronize_device = ot_synchronize_device,
};

/* The old table's storage: its slots are it_kernels' first OT_SLOTS members, and a read past
 * them leaves this object (AddressSanitizer reports it). */
#define OT_SLOTS (offsetof(it_kernels, topk) / sizeof(void (*)(void)))
static struct { void (*slot[OT_SLOTS])(void); } ot_table;

static const it_backend ot_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "oldtable",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = &ot_runtime,
    .kernels = (const it_kernels *)&ot_table,
    .ccl = NULL,
    .kernels_size = sizeof ot_table,
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    const it_kernels *cpu = it_cpu_kernels();
    it_kernels k;
    memset(&k, 0, sizeof k);
    k.cast = cpu->cast;
    k.fill = cpu->fill;
    k.copy_strided = cpu->copy_strided;
    k.gemm = cpu->gemm;
    k.rope = cpu->rope;
    memcpy(&ot_table, &k, sizeof ot_table); /* the first OT_SLOTS slots, as laid out in it_kernels */
    return &ot_backend;
}
