/* The CPU runtime: one device ("cpu:0") whose memory is host memory.
 *
 * Kernels run synchronously on the calling thread, so a CPU stream has no pending work
 * once a call returns: synchronize is a no-op, an event is complete as soon as it is
 * recorded, and an event's timestamp is the moment all work enqueued before it finished
 * (which is the moment of recording). These are the real semantics of an in-order stream
 * whose enqueue is execution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu_kernels.h"
#include "cpu/sgemm_select.h"

/* Alignment of every block: a cache line, and enough for AVX-512 loads. */
#define CPU_ALIGN 64
#define CPU_HUGE ((size_t)2 << 20) /* x86-64's transparent huge page */

struct it_stream {
    int priority;
};
struct it_event {
    double t_ms;
    bool recorded;
};

static struct it_stream cpu_default_stream = {0};

static it_status check_device(int device) {
    if (device != 0)
        return it_error(IT_ERR_INVALID_ARG, "cpu: device index %d out of range (the cpu backend has 1 device)", device);
    return IT_OK;
}

/* Runs once, when the backend is first used: says so when IT_CPU_SGEMM has a value the fp32
 * GEMM choice (sgemm_select.h) does not know, and sets the thread count (threads.c). */
static it_status cpu_init(void) {
    it_cpu_threads_default();
    if (!it_cpu_sgemm_env_valid())
        fprintf(stderr, "infinitrain: IT_CPU_SGEMM='%s' is not blas, avx512, avx2 or auto: using auto\n",
                getenv("IT_CPU_SGEMM"));
    return IT_OK;
}
static it_status cpu_device_count(int *count) {
    *count = 1;
    return IT_OK;
}
static it_status cpu_set_device(int device) { return check_device(device); }
static it_status cpu_get_device(int *device) {
    *device = 0;
    return IT_OK;
}

static it_status cpu_default_stream_get(int device, it_stream **stream) {
    if (check_device(device)) return IT_ERR_INVALID_ARG;
    *stream = &cpu_default_stream;
    return IT_OK;
}
static it_status cpu_stream_create(int device, int priority, it_stream **stream) {
    if (check_device(device)) return IT_ERR_INVALID_ARG;
    it_stream *s = calloc(1, sizeof *s);
    if (!s) return it_error(IT_ERR_OOM, "cpu: stream_create: out of host memory");
    s->priority = priority;
    *stream = s;
    return IT_OK;
}
static it_status cpu_stream_destroy(it_stream *stream) {
    if (stream && stream != &cpu_default_stream) free(stream);
    return IT_OK;
}
static it_status cpu_stream_synchronize(it_stream *stream) {
    (void)stream;
    return IT_OK;
}
static it_status cpu_stream_priority_range(int *least, int *greatest) {
    *least = 0;
    *greatest = 0;
    return IT_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static it_status cpu_event_create(int device, it_event **event) {
    if (check_device(device)) return IT_ERR_INVALID_ARG;
    it_event *e = calloc(1, sizeof *e);
    if (!e) return it_error(IT_ERR_OOM, "cpu: event_create: out of host memory");
    *event = e;
    return IT_OK;
}
static it_status cpu_event_destroy(it_event *event) {
    free(event);
    return IT_OK;
}
static it_status cpu_event_record(it_event *event, it_stream *stream) {
    (void)stream;
    event->t_ms = now_ms();
    event->recorded = true;
    return IT_OK;
}
static it_status cpu_stream_wait_event(it_stream *stream, it_event *event) {
    (void)stream;
    (void)event; /* everything recorded before is already complete */
    return IT_OK;
}
static it_status cpu_event_query(it_event *event, bool *done) {
    (void)event;
    *done = true; /* an unrecorded event is complete too, as in CUDA */
    return IT_OK;
}
static it_status cpu_event_synchronize(it_event *event) {
    (void)event;
    return IT_OK;
}
static it_status cpu_event_elapsed_ms(it_event *start, it_event *end, float *ms) {
    if (!start->recorded || !end->recorded)
        return it_error(IT_ERR_INVALID_ARG, "cpu: event_elapsed_ms: %s event was never recorded",
                        start->recorded ? "end" : "start");
    *ms = (float)(end->t_ms - start->t_ms);
    return IT_OK;
}

static it_status cpu_malloc(int device, size_t nbytes, void **ptr) {
    if (check_device(device)) return IT_ERR_INVALID_ARG;
    size_t rounded = (nbytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (nbytes == 0 || rounded < nbytes) return it_error(IT_ERR_INVALID_ARG, "cpu: malloc of %zu bytes", nbytes);
    /* Blocks of a huge page or more start on one and ask the kernel for huge pages (Linux
     * THP in "madvise" mode gives them only when asked): a GEMM's packing reads its operand
     * rows pages apart, and the optimizer streams gigabytes, so 4 KB pages cost TLB misses.
     * The alignment costs address space only; the caching allocator keeps the blocks. */
    bool huge = rounded >= CPU_HUGE && !getenv("IT_CPU_NO_HUGEPAGES");
    void *p =
        aligned_alloc(huge ? CPU_HUGE : CPU_ALIGN, huge ? (rounded + CPU_HUGE - 1) / CPU_HUGE * CPU_HUGE : rounded);
    if (!p) return it_error(IT_ERR_OOM, "cpu: malloc of %zu bytes failed (host out of memory)", nbytes);
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, rounded / CPU_HUGE * CPU_HUGE, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    *ptr = p;
    return IT_OK;
}
static it_status cpu_free(int device, void *ptr) {
    (void)device;
    free(ptr);
    return IT_OK;
}
static it_status cpu_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind) {
    (void)device;
    (void)kind;
    if (nbytes) memmove(dst, src, nbytes);
    return IT_OK;
}
static it_status cpu_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                                  it_stream *stream) {
    (void)stream;
    return cpu_memcpy(device, dst, src, nbytes, kind);
}
static it_status cpu_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    if (check_device(device)) return IT_ERR_INVALID_ARG;
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    *total_bytes = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize : 0;
    *free_bytes = avail > 0 && psize > 0 ? (size_t)avail * (size_t)psize : 0;
    return IT_OK;
}
static it_status cpu_synchronize_device(int device) { return check_device(device); }

const it_runtime it_cpu_runtime = {
    .init = cpu_init,
    .device_count = cpu_device_count,
    .set_device = cpu_set_device,
    .get_device = cpu_get_device,
    .default_stream = cpu_default_stream_get,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_priority_range = cpu_stream_priority_range,
    .stream_handle = NULL,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .malloc = cpu_malloc,
    .free = cpu_free,
    .malloc_async = NULL,
    .free_async = NULL,
    .memcpy = cpu_memcpy,
    .memcpy_async = cpu_memcpy_async,
    .mem_info = cpu_mem_info,
    .synchronize_device = cpu_synchronize_device,
};
