/* The `testplug` backend: a test plugin that looks to the core like an accelerator.
 *
 * Two devices whose "device memory" is plain host memory, but host_memory = false, so the
 * core must move every byte through this runtime's memcpy and may never hand a device
 * pointer to host code. To catch a core that breaks those rules, the plugin keeps a list of
 * the blocks each device has handed out and checks every call against it:
 *  - memcpy: the device side of H2D / D2H / D2D lies inside a live block of `device`, the
 *    host side of H2D / D2H lies in none (so a wrong kind or a wrong device index fails);
 *  - free: the pointer is a live block of that device (double frees fail);
 *  - cast / fill / copy_strided: every byte a descriptor can reach lies inside one live block
 *    of the stream's device.
 * Each device has a capacity (IT_TESTPLUG_TOTAL_MB, default 4096 MiB); malloc past it fails
 * with IT_ERR_OOM and mem_info reports what is left. Setting IT_TESTPLUG_INIT_FAIL makes init
 * fail as a missing driver would.
 *
 * Kernels: cast, fill and copy_strided (checked wrappers), gemm, unary, binary, reduce and
 * the embedding pair come from the CPU backend via it_cpu_kernels(); layernorm, softmax,
 * cross entropy and the optimizer steps are deliberately left NULL (served by the CPU
 * fallback). Kernels run synchronously, so streams are trivially in order: synchronize
 * returns at once and an event's time is the moment it is recorded.
 *
 * Exported besides it_backend_entry, for tests that dlopen this file (RTLD_NOLOAD):
 *     void testplug_stats(int device, testplug_stats_rec *out)   (layout below) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infinitrain/backend.h"

#define TP_DEVICES 2
#define TP_ALIGN 64

/* Layout shared with tests (copied there; keep in sync). */
typedef struct testplug_stats_rec {
    uint64_t init_calls;      /* process-wide */
    uint64_t memcpy_calls[4]; /* by it_memcpy_kind, on this device */
    uint64_t mallocs, frees;
    uint64_t live_blocks;
    size_t live_bytes;
    uint64_t kernel_calls; /* cast + fill + copy_strided on this device's streams */
} testplug_stats_rec;

struct it_stream {
    int device;
    int priority;
    bool is_default;
    void *handle; /* what stream_handle returns: the stream itself stands in for a library handle */
};
struct it_event {
    int device;
    bool recorded;
    double t_ms;
};

typedef struct tp_block {
    char *ptr;
    size_t size;
} tp_block;

typedef struct tp_device {
    tp_block *blocks;
    size_t n_blocks, cap_blocks;
    size_t used;
    testplug_stats_rec stats;
    struct it_stream default_stream;
} tp_device;

static pthread_mutex_t tp_lock = PTHREAD_MUTEX_INITIALIZER;
static tp_device tp_dev[TP_DEVICES];
static uint64_t tp_init_calls;
static size_t tp_total = (size_t)4096 << 20;
static atomic_bool tp_initialized;
static _Thread_local int tp_current;

static it_status check_device(const char *fn, int device) {
    if (device < 0 || device >= TP_DEVICES)
        return it_error(IT_ERR_INVALID_ARG, "testplug: %s: device %d out of range (testplug has %d devices)", fn,
                        device, TP_DEVICES);
    if (!tp_initialized) return it_error(IT_ERR_BACKEND, "testplug: %s called before init", fn);
    return IT_OK;
}

/* Index of the live block of `dev` holding [p, p + n), or -1; n == 0 asks whether p itself lies in a
 * block, so a pointer one past a block's end (where the host allocator may well put a host buffer)
 * is not device memory. Called with tp_lock held. */
static long find_block_locked(int dev, const void *p, size_t n) {
    uintptr_t c = (uintptr_t)p;
    tp_device *d = &tp_dev[dev];
    for (size_t i = 0; i < d->n_blocks; i++) {
        uintptr_t lo = (uintptr_t)d->blocks[i].ptr, hi = lo + d->blocks[i].size;
        if (c >= lo && (n == 0 ? c < hi : c <= hi && n <= hi - c)) return (long)i;
    }
    return -1;
}

/* Is p inside a live block of any device? Called with tp_lock held. */
static bool is_device_ptr_locked(const void *p) {
    for (int d = 0; d < TP_DEVICES; d++)
        if (find_block_locked(d, p, 0) >= 0) return true;
    return false;
}

/* ---------------------------------------------------------------- runtime */

static it_status tp_init(void) {
    pthread_mutex_lock(&tp_lock);
    tp_init_calls++;
    pthread_mutex_unlock(&tp_lock);
    const char *fail = getenv("IT_TESTPLUG_INIT_FAIL");
    if (fail && *fail) return it_error(IT_ERR_BACKEND, "testplug: driver not found (IT_TESTPLUG_INIT_FAIL=%s)", fail);
    const char *mb = getenv("IT_TESTPLUG_TOTAL_MB");
    if (mb && *mb) tp_total = (size_t)strtoull(mb, NULL, 10) << 20;
    for (int i = 0; i < TP_DEVICES; i++) {
        tp_dev[i].default_stream.device = i;
        tp_dev[i].default_stream.is_default = true;
        tp_dev[i].default_stream.handle = &tp_dev[i].default_stream;
    }
    tp_initialized = true;
    return IT_OK;
}

static it_status tp_device_count(int *count) {
    *count = TP_DEVICES;
    return IT_OK;
}

static it_status tp_set_device(int device) {
    it_status st = check_device("set_device", device);
    if (!st) tp_current = device;
    return st;
}

static it_status tp_get_device(int *device) {
    *device = tp_current;
    return IT_OK;
}

static it_status tp_default_stream(int device, it_stream **stream) {
    it_status st = check_device("default_stream", device);
    if (!st) *stream = &tp_dev[device].default_stream;
    return st;
}

static it_status tp_stream_create(int device, int priority, it_stream **stream) {
    it_status st = check_device("stream_create", device);
    if (st) return st;
    it_stream *s = calloc(1, sizeof *s);
    if (!s) return it_error(IT_ERR_OOM, "testplug: stream_create: out of host memory");
    s->device = device;
    s->priority = priority;
    s->handle = s;
    *stream = s;
    return IT_OK;
}

static it_status tp_stream_destroy(it_stream *stream) {
    if (!stream) return IT_OK;
    if (stream->is_default)
        return it_error(IT_ERR_INVALID_ARG, "testplug: stream_destroy: the default stream of device %d",
                        stream->device);
    free(stream);
    return IT_OK;
}

static it_status tp_stream_synchronize(it_stream *stream) {
    if (!stream) return it_error(IT_ERR_INVALID_ARG, "testplug: stream_synchronize: NULL stream");
    return IT_OK; /* kernels ran when they were enqueued */
}

static it_status tp_stream_priority_range(int *least, int *greatest) {
    *least = 0; /* as in CUDA: lower numbers run first */
    *greatest = -1;
    return IT_OK;
}

static it_status tp_stream_handle(it_stream *stream, void **handle) {
    *handle = stream->handle;
    return IT_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static it_status tp_event_create(int device, it_event **event) {
    it_status st = check_device("event_create", device);
    if (st) return st;
    it_event *e = calloc(1, sizeof *e);
    if (!e) return it_error(IT_ERR_OOM, "testplug: event_create: out of host memory");
    e->device = device;
    *event = e;
    return IT_OK;
}

static it_status tp_event_destroy(it_event *event) {
    free(event);
    return IT_OK;
}

static it_status tp_event_record(it_event *event, it_stream *stream) {
    if (event->device != stream->device)
        return it_error(IT_ERR_INVALID_ARG, "testplug: event_record: event of device %d on a stream of device %d",
                        event->device, stream->device);
    event->t_ms = now_ms();
    event->recorded = true;
    return IT_OK;
}

static it_status tp_stream_wait_event(it_stream *stream, it_event *event) {
    (void)stream;
    (void)event; /* work recorded before the event is already complete */
    return IT_OK;
}

static it_status tp_event_query(it_event *event, bool *done) {
    (void)event;
    *done = true;
    return IT_OK;
}

static it_status tp_event_synchronize(it_event *event) {
    (void)event;
    return IT_OK;
}

static it_status tp_event_elapsed_ms(it_event *start, it_event *end, float *ms) {
    if (!start->recorded || !end->recorded)
        return it_error(IT_ERR_INVALID_ARG, "testplug: event_elapsed_ms: %s event was never recorded",
                        start->recorded ? "end" : "start");
    *ms = (float)(end->t_ms - start->t_ms);
    return IT_OK;
}

static it_status tp_malloc(int device, size_t nbytes, void **ptr) {
    it_status st = check_device("malloc", device);
    if (st) return st;
    if (nbytes == 0) return it_error(IT_ERR_INVALID_ARG, "testplug: malloc of 0 bytes on device %d", device);
    pthread_mutex_lock(&tp_lock);
    tp_device *d = &tp_dev[device];
    if (nbytes > tp_total - d->used) {
        size_t fr = tp_total - d->used;
        pthread_mutex_unlock(&tp_lock);
        return it_error(IT_ERR_OOM, "testplug: malloc of %zu bytes on device %d: only %zu bytes free", nbytes, device,
                        fr);
    }
    if (d->n_blocks == d->cap_blocks) {
        size_t cap = d->cap_blocks ? d->cap_blocks * 2 : 64;
        tp_block *b = realloc(d->blocks, cap * sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&tp_lock);
            return it_error(IT_ERR_OOM, "testplug: malloc: out of host memory for the block list");
        }
        d->blocks = b;
        d->cap_blocks = cap;
    }
    size_t rounded = (nbytes + TP_ALIGN - 1) / TP_ALIGN * TP_ALIGN;
    char *p = aligned_alloc(TP_ALIGN, rounded);
    if (!p) {
        pthread_mutex_unlock(&tp_lock);
        return it_error(IT_ERR_OOM, "testplug: malloc of %zu bytes on device %d: host out of memory", nbytes, device);
    }
    d->blocks[d->n_blocks].ptr = p;
    d->blocks[d->n_blocks].size = nbytes;
    d->n_blocks++;
    d->used += nbytes;
    d->stats.mallocs++;
    pthread_mutex_unlock(&tp_lock);
    *ptr = p;
    return IT_OK;
}

static it_status tp_free(int device, void *ptr) {
    it_status st = check_device("free", device);
    if (st) return st;
    if (!ptr) return IT_OK;
    pthread_mutex_lock(&tp_lock);
    tp_device *d = &tp_dev[device];
    long i = find_block_locked(device, ptr, 0);
    if (i < 0 || d->blocks[i].ptr != (char *)ptr) {
        pthread_mutex_unlock(&tp_lock);
        return it_error(IT_ERR_INVALID_ARG, "testplug: free(%p) on device %d: not a live block of that device", ptr,
                        device);
    }
    d->used -= d->blocks[i].size;
    d->blocks[i] = d->blocks[--d->n_blocks];
    d->stats.frees++;
    pthread_mutex_unlock(&tp_lock);
    free(ptr);
    return IT_OK;
}

static const char *kind_name(it_memcpy_kind kind) {
    switch (kind) {
    case IT_MEMCPY_H2H: return "H2H";
    case IT_MEMCPY_H2D: return "H2D";
    case IT_MEMCPY_D2H: return "D2H";
    case IT_MEMCPY_D2D: return "D2D";
    }
    return "invalid";
}

static it_status tp_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind) {
    it_status st = check_device("memcpy", device);
    if (st) return st;
    if ((int)kind < 0 || (int)kind > 3)
        return it_error(IT_ERR_INVALID_ARG, "testplug: memcpy: invalid kind %d", (int)kind);
    if (nbytes == 0) return IT_OK;
    bool dst_dev = kind == IT_MEMCPY_H2D || kind == IT_MEMCPY_D2D;
    bool src_dev = kind == IT_MEMCPY_D2H || kind == IT_MEMCPY_D2D;
    const char *bad = NULL;
    pthread_mutex_lock(&tp_lock);
    if (dst_dev && find_block_locked(device, dst, nbytes) < 0)
        bad = "dst is not inside a block of this device";
    else if (src_dev && find_block_locked(device, src, nbytes) < 0)
        bad = "src is not inside a block of this device";
    else if (!dst_dev && is_device_ptr_locked(dst))
        bad = "dst is device memory";
    else if (!src_dev && is_device_ptr_locked(src))
        bad = "src is device memory";
    if (!bad) tp_dev[device].stats.memcpy_calls[kind]++;
    pthread_mutex_unlock(&tp_lock);
    if (bad)
        return it_error(IT_ERR_INVALID_ARG, "testplug: memcpy %s of %zu bytes on device %d (dst %p, src %p): %s",
                        kind_name(kind), nbytes, device, dst, src, bad);
    memmove(dst, src, nbytes);
    return IT_OK;
}

static it_status tp_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                                 it_stream *stream) {
    if (stream && stream->device != device)
        return it_error(IT_ERR_INVALID_ARG, "testplug: memcpy_async on device %d with a stream of device %d", device,
                        stream->device);
    return tp_memcpy(device, dst, src, nbytes, kind);
}

static it_status tp_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    it_status st = check_device("mem_info", device);
    if (st) return st;
    pthread_mutex_lock(&tp_lock);
    *free_bytes = tp_total - tp_dev[device].used;
    *total_bytes = tp_total;
    pthread_mutex_unlock(&tp_lock);
    return IT_OK;
}

static it_status tp_synchronize_device(int device) { return check_device("synchronize_device", device); }

static const it_runtime tp_runtime = {
    .init = tp_init,
    .device_count = tp_device_count,
    .set_device = tp_set_device,
    .get_device = tp_get_device,
    .default_stream = tp_default_stream,
    .stream_create = tp_stream_create,
    .stream_destroy = tp_stream_destroy,
    .stream_synchronize = tp_stream_synchronize,
    .stream_priority_range = tp_stream_priority_range,
    .stream_handle = tp_stream_handle,
    .event_create = tp_event_create,
    .event_destroy = tp_event_destroy,
    .event_record = tp_event_record,
    .stream_wait_event = tp_stream_wait_event,
    .event_query = tp_event_query,
    .event_synchronize = tp_event_synchronize,
    .event_elapsed_ms = tp_event_elapsed_ms,
    .malloc = tp_malloc,
    .free = tp_free,
    .malloc_async = NULL, /* optional: the core falls back to malloc / free */
    .free_async = NULL,
    .memcpy = tp_memcpy,
    .memcpy_async = tp_memcpy_async,
    .mem_info = tp_mem_info,
    .synchronize_device = tp_synchronize_device,
};

/* ---------------------------------------------------------------- checked kernels */

static const it_kernels *cpu; /* set by it_backend_entry */

/* Every byte `d` can reach lies in one live block of the stream's device. */
static it_status check_desc(const char *fn, const char *what, it_stream *s, const it_tdesc *d) {
    if (!s || s->device < 0 || s->device >= TP_DEVICES)
        return it_error(IT_ERR_INVALID_ARG, "testplug: %s: not a testplug stream", fn);
    if (d->ndim < 0 || d->ndim > IT_MAX_DIMS || !it_dtype_valid((int)d->dtype))
        return it_error(IT_ERR_INVALID_ARG, "testplug: %s: %s: bad descriptor (ndim %d, dtype %d)", fn, what, d->ndim,
                        (int)d->dtype);
    size_t extent = it_dtype_size(d->dtype);
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) return IT_OK; /* no element is touched */
        if (d->shape[i] < 0 || d->strides[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "testplug: %s: %s: negative shape or stride at dim %d", fn, what, i);
        extent += (size_t)(d->shape[i] - 1) * (size_t)d->strides[i] * it_dtype_size(d->dtype);
    }
    pthread_mutex_lock(&tp_lock);
    long b = find_block_locked(s->device, d->data, extent);
    pthread_mutex_unlock(&tp_lock);
    if (b < 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "testplug: %s: %s (%p, %zu bytes reachable) is not inside a block of device %d", fn, what,
                        d->data, extent, s->device);
    return IT_OK;
}

static void count_kernel(it_stream *s) {
    pthread_mutex_lock(&tp_lock);
    tp_dev[s->device].stats.kernel_calls++;
    pthread_mutex_unlock(&tp_lock);
}

static it_status tp_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st = check_desc("cast", "src", s, src);
    if (!st) st = check_desc("cast", "dst", s, dst);
    if (st) return st;
    count_kernel(s);
    return cpu->cast(s, src, dst);
}

static it_status tp_fill(it_stream *s, it_tdesc *dst, it_scalar value) {
    it_status st = check_desc("fill", "dst", s, dst);
    if (st) return st;
    /* Declines bool (as an accelerator might decline a dtype): the core's per-call fallback
     * must then serve it, and the coverage report count it. */
    if (dst->dtype == IT_DTYPE_BOOL) return it_error(IT_ERR_UNSUPPORTED, "testplug: fill: bool not supported");
    count_kernel(s);
    return cpu->fill(s, dst, value);
}

static it_status tp_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st = check_desc("copy_strided", "src", s, src);
    if (!st) st = check_desc("copy_strided", "dst", s, dst);
    if (st) return st;
    count_kernel(s);
    return cpu->copy_strided(s, src, dst);
}

static it_kernels tp_kernels; /* filled once by it_backend_entry */

static const it_backend tp_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "testplug",
    .default_autocast_dtype = IT_DTYPE_FP16,
    .host_memory = false,
    .runtime = &tp_runtime,
    .kernels = &tp_kernels,
    .ccl = NULL,
    .kernels_size = sizeof(it_kernels),
};

static pthread_once_t tp_once = PTHREAD_ONCE_INIT;

static void fill_kernels(void) {
    cpu = it_cpu_kernels();
    tp_kernels.cast = tp_cast;
    tp_kernels.fill = tp_fill;
    tp_kernels.copy_strided = tp_copy_strided;
    tp_kernels.gemm = cpu->gemm;
    tp_kernels.unary = cpu->unary;
    tp_kernels.binary = cpu->binary;
    tp_kernels.reduce = cpu->reduce;
    tp_kernels.embedding_fwd = cpu->embedding_fwd;
    tp_kernels.embedding_bwd = cpu->embedding_bwd;
    /* layernorm, softmax, cross entropy, sgd, adam: left NULL on purpose. */
}

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    pthread_once(&tp_once, fill_kernels);
    return &tp_backend;
}

IT_BACKEND_EXPORT void testplug_stats(int device, testplug_stats_rec *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&tp_lock);
    if (device >= 0 && device < TP_DEVICES) {
        *out = tp_dev[device].stats;
        out->live_blocks = tp_dev[device].n_blocks;
        out->live_bytes = tp_dev[device].used;
    }
    out->init_calls = tp_init_calls;
    pthread_mutex_unlock(&tp_lock);
}
