/* The CUDA runtime table over cudart: lazy init, devices, streams, events, memory.
 *
 * The interface was modelled on CUDA, so most slots are one cudart call:
 *  - the current device is per thread in cudart as in backend.h (cudaSetDevice);
 *  - every stream, each device's default one included, is a non-blocking stream
 *    (cudaStreamNonBlocking): the legacy default stream would serialize with all of them, and
 *    a gradient all-reduce on its own stream could not overlap the backward. The synchronous
 *    memcpy, which backend.h orders after all work queued on the device, is therefore
 *    cudaDeviceSynchronize + cudaMemcpy;
 *  - a kernel that fails after it was enqueued is reported by the next synchronizing call,
 *    which is cudart's own behaviour;
 *  - each stream has a cuBLAS handle bound to it, made on first use (gemm.c). */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

static int device_count;
static it_stream *default_streams[CU_MAX_DEVICES];
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- errors */

it_status cu_check(cudaError_t e, const char *fmt, ...) {
    if (e == cudaSuccess) return IT_OK;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* A failed call that is not sticky leaves its code as the thread's last error; clear it
     * so that the next launch check does not report it again. */
    (void)cudaGetLastError();
    it_status st = e == cudaErrorMemoryAllocation ? IT_ERR_OOM : IT_ERR_BACKEND;
    return it_error(st, "cuda: %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

it_status cu_launch_check(const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return IT_OK;
    return it_error(IT_ERR_BACKEND, "cuda: kernel '%s' failed to launch: %s (%s)", kernel, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

/* ---------------------------------------------------------------- init, devices */

static it_status cu_init(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        int rt = 0, drv = 0;
        cudaRuntimeGetVersion(&rt);
        cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
        (void)cudaGetLastError();
        char driver[64];
        if (drv)
            snprintf(driver, sizeof driver, "driver supports CUDA %d.%d", drv / 1000, drv % 1000 / 10);
        else
            snprintf(driver, sizeof driver, "no NVIDIA driver (libcuda.so.1) found");
        if (e == cudaSuccess) e = cudaErrorNoDevice;
        return it_error(IT_ERR_BACKEND,
                        "cuda: no usable NVIDIA GPU: cudaGetDeviceCount: %s (%s); runtime CUDA %d.%d, %s",
                        cudaGetErrorName(e), cudaGetErrorString(e), rt / 1000, rt % 1000 / 10, driver);
    }
    if (n > CU_MAX_DEVICES) n = CU_MAX_DEVICES;
    /* The plugin holds code for IT_CUDA_MIN_ARCH and up (CMAKE_CUDA_ARCHITECTURES): an older
     * GPU would fail its first kernel with cudaErrorNoKernelImageForDevice; say so here. */
    for (int d = 0; d < n; d++) {
        int major = 0, minor = 0;
        it_status st = cu_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d),
                                "cudaDeviceGetAttribute(compute capability, device %d)", d);
        if (!st)
            st = cu_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d),
                          "cudaDeviceGetAttribute(compute capability, device %d)", d);
        if (st) return st;
        if (major * 10 + minor < IT_CUDA_MIN_ARCH)
            return it_error(IT_ERR_UNSUPPORTED,
                            "cuda: device %d has compute capability %d.%d; this build has code for sm_%d and up "
                            "(CMAKE_CUDA_ARCHITECTURES=%s): rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                            d, major, minor, IT_CUDA_MIN_ARCH, IT_CUDA_ARCHS, major, minor);
    }
    device_count = n;
    return IT_OK;
}

static it_status cu_device_count(int *count) {
    *count = device_count;
    return IT_OK;
}

static it_status check_device(const char *fn, int device) {
    if (device < 0 || device >= device_count)
        return it_error(IT_ERR_INVALID_ARG, "cuda %s: device %d out of range (%d devices)", fn, device, device_count);
    return IT_OK;
}

/* Make `device` current on this thread (cudaSetDevice only when it changes). */
static it_status use_device(const char *fn, int device) {
    it_status st = check_device(fn, device);
    if (st) return st;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == device) return IT_OK;
    (void)cudaGetLastError(); /* a failed query must not be blamed on the next launch */
    return cu_check(cudaSetDevice(device), "%s: cudaSetDevice(%d)", fn, device);
}

static it_status cu_set_device(int device) { return use_device("set_device", device); }

static it_status cu_get_device(int *device) { return cu_check(cudaGetDevice(device), "get_device: cudaGetDevice"); }

/* ---------------------------------------------------------------- streams */

static it_status default_stream(int device, it_stream **out) {
    it_status st = check_device("default_stream", device);
    if (st) return st;
    pthread_mutex_lock(&rt_lock);
    if (!default_streams[device]) {
        it_stream *s = calloc(1, sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&rt_lock);
            return it_error(IT_ERR_OOM, "cuda default_stream: out of host memory");
        }
        s->device = device;
        s->is_default = true;
        int prev = -1;
        cudaGetDevice(&prev);
        it_status st = cu_check(cudaSetDevice(device), "default_stream: cudaSetDevice(%d)", device);
        if (!st)
            st = cu_check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                          "default_stream: cudaStreamCreateWithFlags(device %d)", device);
        if (prev >= 0 && prev != device) cudaSetDevice(prev);
        (void)cudaGetLastError(); /* the unchecked query and restore above */
        if (st) {
            free(s);
            pthread_mutex_unlock(&rt_lock);
            return st;
        }
        default_streams[device] = s;
    }
    *out = default_streams[device];
    pthread_mutex_unlock(&rt_lock);
    return IT_OK;
}

it_status cu_stream_resolve(const char *fn, it_stream *s, it_stream **out) {
    if (!s) {
        int dev = 0;
        it_status st = cu_check(cudaGetDevice(&dev), "%s: cudaGetDevice", fn);
        if (!st) st = default_stream(dev, &s);
        if (st) return st;
    }
    it_status st = use_device(fn, s->device);
    if (st) return st;
    *out = s;
    return IT_OK;
}

static it_status cu_stream_create(int device, int priority, it_stream **out) {
    it_status st = use_device("stream_create", device);
    if (st) return st;
    it_stream *s = calloc(1, sizeof *s);
    if (!s) return it_error(IT_ERR_OOM, "cuda stream_create: out of host memory");
    s->device = device;
    s->priority = priority;
    st = cu_check(cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, priority),
                  "stream_create: cudaStreamCreateWithPriority(device %d, priority %d)", device, priority);
    if (st) {
        free(s);
        return st;
    }
    *out = s;
    return IT_OK;
}

static it_status cu_stream_destroy(it_stream *s) {
    if (!s || s->is_default) return IT_OK; /* default streams live as long as the process */
    it_status st = use_device("stream_destroy", s->device);
    if (!st) st = cu_check(cudaStreamSynchronize(s->stream), "stream_destroy: cudaStreamSynchronize");
    if (s->blas) cublasDestroy((cublasHandle_t)s->blas);
    (void)cudaGetLastError();
    it_status st2 = cu_check(cudaStreamDestroy(s->stream), "stream_destroy: cudaStreamDestroy");
    free(s);
    return st ? st : st2;
}

static it_status cu_stream_synchronize(it_stream *s) {
    it_status st = cu_stream_resolve("stream_synchronize", s, &s);
    if (st) return st;
    return cu_check(cudaStreamSynchronize(s->stream), "stream_synchronize: cudaStreamSynchronize(device %d)",
                    s->device);
}

static it_status cu_stream_priority_range(int *least, int *greatest) {
    return cu_check(cudaDeviceGetStreamPriorityRange(least, greatest), "cudaDeviceGetStreamPriorityRange");
}

it_status cu_blas_handle(it_stream *s, void **handle) {
    it_status st = cu_stream_resolve("stream_handle", s, &s);
    if (st) return st;
    pthread_mutex_lock(&rt_lock); /* default streams are shared between threads */
    if (!s->blas) {
        cublasHandle_t h = NULL;
        cublasStatus_t b = cublasCreate(&h);
        if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetStream(h, s->stream);
        /* The default math mode: fp32 products stay fp32 (TF32 only on request), bf16 and
         * fp16 ones use the tensor cores; without reduced-precision reductions, split-K
         * partial sums stay fp32 too (backend.h: accumulation in fp32). */
        if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasSetMathMode(
                h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
        if (b != CUBLAS_STATUS_SUCCESS) {
            if (h) cublasDestroy(h);
            pthread_mutex_unlock(&rt_lock);
            return it_error(IT_ERR_BACKEND, "cuda: cuBLAS handle for a stream of device %d: %s (%s)", s->device,
                            cublasGetStatusName(b), cublasGetStatusString(b));
        }
        s->blas = h;
    }
    *handle = s->blas;
    pthread_mutex_unlock(&rt_lock);
    return IT_OK;
}

/* ---------------------------------------------------------------- events */

static it_status cu_event_create(int device, it_event **out) {
    it_status st = use_device("event_create", device);
    if (st) return st;
    it_event *e = calloc(1, sizeof *e);
    if (!e) return it_error(IT_ERR_OOM, "cuda event_create: out of host memory");
    e->device = device;
    st = cu_check(cudaEventCreate(&e->event), "event_create: cudaEventCreate(device %d)", device);
    if (st) {
        free(e);
        return st;
    }
    *out = e;
    return IT_OK;
}

static it_status cu_event_destroy(it_event *e) {
    if (!e) return IT_OK;
    it_status st = use_device("event_destroy", e->device);
    if (!st) st = cu_check(cudaEventDestroy(e->event), "event_destroy: cudaEventDestroy");
    free(e);
    return st;
}

static it_status cu_event_record(it_event *e, it_stream *s) {
    it_status st = cu_stream_resolve("event_record", s, &s);
    if (st) return st;
    if (s->device != e->device)
        return it_error(IT_ERR_INVALID_ARG, "cuda event_record: event of device %d on a stream of device %d", e->device,
                        s->device);
    st = cu_check(cudaEventRecord(e->event, s->stream), "event_record: cudaEventRecord(device %d)", s->device);
    if (!st) e->recorded = true;
    return st;
}

static it_status cu_stream_wait_event(it_stream *s, it_event *e) {
    it_status st = cu_stream_resolve("stream_wait_event", s, &s);
    if (st) return st;
    return cu_check(cudaStreamWaitEvent(s->stream, e->event, 0), "stream_wait_event: cudaStreamWaitEvent");
}

static it_status cu_event_query(it_event *e, bool *done) {
    cudaError_t r = cudaEventQuery(e->event);
    if (r == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return IT_OK;
    }
    *done = r == cudaSuccess;
    return cu_check(r, "event_query: cudaEventQuery");
}

static it_status cu_event_synchronize(it_event *e) {
    return cu_check(cudaEventSynchronize(e->event), "event_synchronize: cudaEventSynchronize");
}

static it_status cu_event_elapsed_ms(it_event *start, it_event *end, float *ms) {
    if (!start->recorded || !end->recorded)
        return it_error(IT_ERR_INVALID_ARG, "cuda event_elapsed_ms: %s event was never recorded",
                        start->recorded ? "end" : "start");
    return cu_check(cudaEventElapsedTime(ms, start->event, end->event), "event_elapsed_ms: cudaEventElapsedTime");
}

/* ---------------------------------------------------------------- memory */

static it_status cu_malloc(int device, size_t nbytes, void **ptr) {
    it_status st = use_device("malloc", device);
    if (st) return st;
    return cu_check(cudaMalloc(ptr, nbytes), "malloc: cudaMalloc of %zu bytes on device %d", nbytes, device);
}

static it_status cu_free(int device, void *ptr) {
    if (!ptr) return IT_OK;
    it_status st = use_device("free", device);
    if (st) return st;
    return cu_check(cudaFree(ptr), "free: cudaFree(%p) on device %d", ptr, device);
}

static enum cudaMemcpyKind copy_kind(it_memcpy_kind kind) {
    switch (kind) {
    case IT_MEMCPY_H2H: return cudaMemcpyHostToHost;
    case IT_MEMCPY_H2D: return cudaMemcpyHostToDevice;
    case IT_MEMCPY_D2H: return cudaMemcpyDeviceToHost;
    case IT_MEMCPY_D2D: return cudaMemcpyDeviceToDevice;
    }
    return cudaMemcpyDefault;
}

static const char *const kind_names[] = {"H2H", "H2D", "D2H", "D2D"};

static it_status cu_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind) {
    if ((int)kind < 0 || (int)kind > 3) return it_error(IT_ERR_INVALID_ARG, "cuda memcpy: invalid kind %d", (int)kind);
    if (nbytes == 0) return IT_OK;
    if (kind == IT_MEMCPY_H2H) {
        memmove(dst, src, nbytes);
        return IT_OK;
    }
    it_status st = use_device("memcpy", device);
    if (st) return st;
    /* After all work queued on the device (every stream is non-blocking, see the top), and
     * complete when it returns: cudaMemcpy alone may return before a pageable H2D or a D2D
     * copy has landed, and the non-blocking streams would not wait for it. */
    it_stream *ds = NULL;
    st = default_stream(device, &ds);
    if (!st)
        st = cu_check(cudaDeviceSynchronize(), "memcpy %s: cudaDeviceSynchronize(device %d)", kind_names[kind], device);
    if (!st)
        st = cu_check(cudaMemcpyAsync(dst, src, nbytes, copy_kind(kind), ds->stream),
                      "memcpy %s of %zu bytes on device %d", kind_names[kind], nbytes, device);
    if (!st)
        st = cu_check(cudaStreamSynchronize(ds->stream), "memcpy %s of %zu bytes on device %d: cudaStreamSynchronize",
                      kind_names[kind], nbytes, device);
    return st;
}

static it_status cu_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                                 it_stream *s) {
    if ((int)kind < 0 || (int)kind > 3)
        return it_error(IT_ERR_INVALID_ARG, "cuda memcpy_async: invalid kind %d", (int)kind);
    if (nbytes == 0) return IT_OK;
    it_status st = cu_stream_resolve("memcpy_async", s, &s);
    if (st) return st;
    if (s->device != device)
        return it_error(IT_ERR_INVALID_ARG, "cuda memcpy_async: device %d on a stream of device %d", device, s->device);
    return cu_check(cudaMemcpyAsync(dst, src, nbytes, copy_kind(kind), s->stream),
                    "memcpy_async %s of %zu bytes on device %d", kind_names[kind], nbytes, device);
}

static it_status cu_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    it_status st = use_device("mem_info", device);
    if (st) return st;
    return cu_check(cudaMemGetInfo(free_bytes, total_bytes), "mem_info: cudaMemGetInfo(device %d)", device);
}

static it_status cu_synchronize_device(int device) {
    it_status st = use_device("synchronize_device", device);
    if (st) return st;
    return cu_check(cudaDeviceSynchronize(), "synchronize_device: cudaDeviceSynchronize(device %d)", device);
}

const it_runtime cu_runtime = {
    .init = cu_init,
    .device_count = cu_device_count,
    .set_device = cu_set_device,
    .get_device = cu_get_device,
    .default_stream = default_stream,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .stream_priority_range = cu_stream_priority_range,
    .stream_handle = cu_blas_handle,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .event_elapsed_ms = cu_event_elapsed_ms,
    .malloc = cu_malloc,
    .free = cu_free,
    .memcpy = cu_memcpy,
    .memcpy_async = cu_memcpy_async,
    .mem_info = cu_mem_info,
    .synchronize_device = cu_synchronize_device,
};
