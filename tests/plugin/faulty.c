/* The `faulty` backend: the CPU's kernels with one of them made slightly wrong, so that a
 * test can check that it-precision-compare names that op and no other.
 *
 * One device of plain host memory (host_memory = true, like the CPU backend); every kernel
 * is the CPU backend's (it_cpu_kernels()), so with no fault a run is bitwise the CPU's.
 * IT_FAULTY_KERNEL picks the fault, IT_FAULTY_DELTA its size (default 1e-3):
 *   gelu            the GELU forward (unary GELU): out[0] += delta * (1 + |out[0]|)
 *   layernorm_bwd   LayerNorm backward: dx[0] += delta * (1 + |dx[0]|)
 *   rmsnorm_bwd     RMSNorm backward:   dx[0] += delta * (1 + |dx[0]|)
 *   embedding_nan   the IT_FAULTY_AT-th call (from 1) of the embedding forward, and the next
 *                   IT_FAULTY_COUNT - 1 (default 1 call in all), write NaN into out[0] (a
 *                   poisoned micro-step: its loss and gradients become NaN), on the rank
 *                   IT_FAULTY_RANK only when that is set (mpirun's OMPI_COMM_WORLD_RANK)
 *   embedding_slow  every embedding forward sleeps IT_FAULTY_SLOW_MS (default 50) ms first, on
 *                   the rank IT_FAULTY_RANK only when that is set: a straggler, values unchanged
 * Unset (or empty), nothing is changed; an unknown name makes init fail, naming it. Only the
 * first element changes: a wrong value at one place, as a port's bug would leave it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infinitrain/backend.h"

struct it_stream {
    int device;
};
static struct it_stream fs_stream;

enum { FAULT_NONE, FAULT_GELU, FAULT_LAYERNORM_BWD, FAULT_RMSNORM_BWD, FAULT_EMBEDDING_NAN, FAULT_EMBEDDING_SLOW };
static long nan_at, nan_count = 1, embedding_calls, slow_ms = 50;
static int fault = FAULT_NONE;
static float delta = 1e-3f;
static it_kernels fs_kernels;
static const it_kernels *cpu;

static void perturb(const it_tdesc *t) {
    float *p = t->data;
    if (t->dtype != IT_DTYPE_FP32 || !p) return;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return;
    p[0] += delta * (1.0f + (p[0] < 0 ? -p[0] : p[0]));
}

static it_status fs_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    it_status st = cpu->unary(s, op, alpha, x, out);
    if (!st && fault == FAULT_GELU && op == IT_UNARY_GELU) perturb(out);
    return st;
}

static it_status fs_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    if (fault == FAULT_EMBEDDING_SLOW) {
        struct timespec t = {slow_ms / 1000, slow_ms % 1000 * 1000000L};
        nanosleep(&t, NULL);
    }
    it_status st = cpu->embedding_fwd(s, idx, weight, out);
    long call = fault == FAULT_EMBEDDING_NAN ? ++embedding_calls : 0;
    if (!st && call > 0 && call >= nan_at && call < nan_at + nan_count && out->dtype == IT_DTYPE_FP32 && out->data)
        ((float *)out->data)[0] = NAN;
    return st;
}

static it_status fs_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                  const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                  it_tdesc *db) {
    it_status st = cpu->layernorm_bwd(s, dy, x, w, mean, rstd, dx, dw, db);
    if (!st && fault == FAULT_LAYERNORM_BWD) perturb(dx);
    return st;
}

static it_status fs_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    it_status st = cpu->rmsnorm_bwd(s, dy, x, w, rstd, dx, dw);
    if (!st && fault == FAULT_RMSNORM_BWD) perturb(dx);
    return st;
}

static it_status fs_init(void) {
    const char *k = getenv("IT_FAULTY_KERNEL"), *d = getenv("IT_FAULTY_DELTA");
    if (!k || !*k)
        fault = FAULT_NONE;
    else if (!strcmp(k, "gelu"))
        fault = FAULT_GELU;
    else if (!strcmp(k, "layernorm_bwd"))
        fault = FAULT_LAYERNORM_BWD;
    else if (!strcmp(k, "rmsnorm_bwd"))
        fault = FAULT_RMSNORM_BWD;
    else if (!strcmp(k, "embedding_slow")) {
        const char *rank = getenv("IT_FAULTY_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK"),
                   *ms = getenv("IT_FAULTY_SLOW_MS");
        fault = rank && *rank && strcmp(rank, me ? me : "0") != 0 ? FAULT_NONE : FAULT_EMBEDDING_SLOW;
        if (ms && *ms) slow_ms = strtol(ms, NULL, 10);
        if (slow_ms < 0 || slow_ms > 60000)
            return it_error(IT_ERR_INVALID_ARG, "faulty: IT_FAULTY_SLOW_MS=%s, expected 0..60000", ms);
    } else if (!strcmp(k, "embedding_nan")) {
        const char *at = getenv("IT_FAULTY_AT"), *rank = getenv("IT_FAULTY_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK");
        fault = rank && *rank && strcmp(rank, me ? me : "0") != 0 ? FAULT_NONE : FAULT_EMBEDDING_NAN;
        const char *count = getenv("IT_FAULTY_COUNT");
        nan_at = at ? strtol(at, NULL, 10) : 0;
        nan_count = count && *count ? strtol(count, NULL, 10) : 1;
        if (nan_at < 1) return it_error(IT_ERR_INVALID_ARG, "faulty: embedding_nan needs IT_FAULTY_AT=N >= 1");
    } else
        return it_error(IT_ERR_INVALID_ARG,
                        "faulty: IT_FAULTY_KERNEL=%s, expected gelu, layernorm_bwd, rmsnorm_bwd, embedding_nan or "
                        "embedding_slow",
                        k);
    if (d && *d) delta = strtof(d, NULL);
    return IT_OK;
}
static it_status fs_device_count(int *count) {
    *count = 1;
    return IT_OK;
}
static it_status fs_set_device(int device) {
    return device == 0 ? IT_OK : it_error(IT_ERR_INVALID_ARG, "faulty: device %d (it has 1)", device);
}
static it_status fs_get_device(int *device) {
    *device = 0;
    return IT_OK;
}
static it_status fs_default_stream(int device, it_stream **s) {
    (void)device;
    *s = &fs_stream;
    return IT_OK;
}
static it_status fs_sync_stream(it_stream *s) {
    (void)s;
    return IT_OK; /* kernels run synchronously */
}
static it_status fs_malloc(int device, size_t n, void **p) {
    (void)device;
    *p = aligned_alloc(64, (n + 63) / 64 * 64);
    return *p ? IT_OK : it_error(IT_ERR_OOM, "faulty: malloc of %zu bytes failed", n);
}
static it_status fs_free(int device, void *p) {
    (void)device;
    free(p);
    return IT_OK;
}
static it_status fs_memcpy(int device, void *dst, const void *src, size_t n, it_memcpy_kind kind) {
    (void)device;
    (void)kind;
    memmove(dst, src, n);
    return IT_OK;
}
static it_status fs_mem_info(int device, size_t *free_bytes, size_t *total) {
    (void)device;
    *free_bytes = *total = (size_t)16 << 30;
    return IT_OK;
}
static it_status fs_sync_device(int device) {
    (void)device;
    return IT_OK;
}

static const it_runtime fs_runtime = {
    .init = fs_init,
    .device_count = fs_device_count,
    .set_device = fs_set_device,
    .get_device = fs_get_device,
    .default_stream = fs_default_stream,
    .stream_synchronize = fs_sync_stream,
    .malloc = fs_malloc,
    .free = fs_free,
    .memcpy = fs_memcpy,
    .mem_info = fs_mem_info,
    .synchronize_device = fs_sync_device,
};

static it_backend fs_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "faulty",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = true,
    .runtime = &fs_runtime,
    .kernels = &fs_kernels,
    .ccl = NULL,
    .kernels_size = sizeof(it_kernels),
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    cpu = it_cpu_kernels();
    fs_kernels = *cpu;
    fs_kernels.unary = fs_unary;
    fs_kernels.layernorm_bwd = fs_layernorm_bwd;
    fs_kernels.rmsnorm_bwd = fs_rmsnorm_bwd;
    fs_kernels.embedding_fwd = fs_embedding_fwd;
    return &fs_backend;
}
