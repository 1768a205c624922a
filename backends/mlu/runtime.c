/* The MLU runtime over CNRT >= 6 (docs/backends/mlu.md C1): lazy init (dlopen), devices, queues as
 * streams, notifiers as events, one CNNL handle per (device, queue).
 *
 * Current device is per thread (a thread-local cache; cnrtSetDevice only on change, as
 * Paddle's SetDevice). Every device has a default queue created on first use and never
 * destroyed. Priorities follow CUDA's convention (lower runs first) as CNRT's
 * cnrtDeviceGetQueuePriorityRange(&least, &greatest) reports them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

mlu_api mlu;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static int device_count;
static it_stream *default_streams[MLU_MAX_DEVICES];
static _Thread_local int current_device = -1;

/* ---------------------------------------------------------------- errors */

static const char *cnrt_text(mlu_cnrtRet_t ret) {
    const char *s = mlu.cnrtGetErrorStr ? mlu.cnrtGetErrorStr(ret) : NULL;
    return s ? s : "unknown CNRT error";
}

it_status mlu_cnrt_error(mlu_cnrtRet_t ret, const char *call, const char *fmt, ...) {
    char args[256] = "", msg[MLU_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    /* Drop the "mlu.": the call reads as the CNRT function it is. */
    if (strncmp(call, "mlu.", 4) == 0) call += 4;
    const char *paren = strchr(call, '(');
    char name[64];
    snprintf(name, sizeof name, "%.*s", paren ? (int)(paren - call) : (int)strlen(call), call);
    mlu_format_error(msg, sizeof msg, name, args, cnrt_text(ret), ret);
    if (mlu.cnrtGetLastError) mlu.cnrtGetLastError(); /* clear the sticky code */
    return it_error(ret == MLU_cnrtSuccess ? IT_ERR_INTERNAL : IT_ERR_BACKEND, "mlu: %s", msg);
}

it_status mlu_cnnl_error(mlu_cnnlStatus_t st, const char *call, const char *fmt, ...) {
    char args[256] = "", msg[MLU_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *text = mlu.cnnlGetErrorString ? mlu.cnnlGetErrorString(st) : NULL;
    mlu_format_error(msg, sizeof msg, call, args, text ? text : "unknown CNNL status", st);
    /* A call this part or library cannot do is declined, not failed: the CPU fallback serves it. */
    bool declined = st == MLU_CNNL_STATUS_ARCH_MISMATCH || st == MLU_CNNL_STATUS_NOT_SUPPORTED;
    return it_error(declined ? IT_ERR_UNSUPPORTED : IT_ERR_BACKEND, "mlu: %s", msg);
}

/* ---------------------------------------------------------------- init, devices */

/* Compute capability per device (cnrtAttrComputeCapabilityMajor/Minor: 5.x is the MLU500
 * series, 3.x the MLU300); 0.0 when CNRT cannot say. */
static int capability_major[MLU_MAX_DEVICES], capability_minor[MLU_MAX_DEVICES];

static void query_capability(int device) {
    int major = 0, minor = 0;
    if (mlu.cnrtDeviceGetAttribute &&
        (mlu.cnrtDeviceGetAttribute(&major, MLU_cnrtAttrComputeCapabilityMajor, device) != MLU_cnrtSuccess ||
         mlu.cnrtDeviceGetAttribute(&minor, MLU_cnrtAttrComputeCapabilityMinor, device) != MLU_cnrtSuccess)) {
        major = minor = 0;
        if (mlu.cnrtGetLastError) mlu.cnrtGetLastError();
    }
    capability_major[device] = major;
    capability_minor[device] = minor;
}

it_status mlu_need_bf16(const char *fn, int device) {
    int major = device >= 0 && device < device_count ? capability_major[device] : 0;
    if (major == 0 || major >= 5) return IT_OK; /* unknown: CNNL's own status decides */
    return it_error(IT_ERR_UNSUPPORTED,
                    "mlu %s: bfloat16 needs an MLU500-series part (cnnl.h: bfloat16 matmul and casts are MLU500 only); "
                    "device %d is compute capability %d.%d, so the CPU fallback serves this call",
                    fn, device, major, capability_minor[device]);
}

static it_status mlu_init(void) {
    char note[MLU_MSG_BYTES];
    it_status st = mlu_api_load(&mlu, note, sizeof note);
    if (st) return st;
    unsigned int n = 0; /* CNRT's out-param is unsigned */
    MLU_CNRT(mlu.cnrtGetDeviceCount(&n), "count=%p", (void *)&n);
    if (n > MLU_MAX_DEVICES) n = MLU_MAX_DEVICES;
    device_count = (int)n;
    for (int d = 0; d < device_count; d++) query_capability(d);
    if (note[0] && getenv("IT_MLU_VERBOSE")) fprintf(stderr, "mlu: %s\n", note);
    if (mlu.test_double) fprintf(stderr, "mlu: %s: no Cambricon device is used\n", mlu.test_double);
    return IT_OK;
}

static it_status mlu_device_count(int *count) {
    *count = device_count;
    return IT_OK;
}

it_status mlu_check_device(const char *fn, int device) {
    if (device < 0 || device >= device_count)
        return it_error(IT_ERR_INVALID_ARG, "mlu %s: device %d out of range (%d devices)", fn, device, device_count);
    return IT_OK;
}

it_status mlu_use_device(const char *fn, int device) {
    it_status st = mlu_check_device(fn, device);
    if (st) return st;
    if (current_device != device) {
        MLU_CNRT(mlu.cnrtSetDevice(device), "dev=%d", device);
        current_device = device;
    }
    return IT_OK;
}

static it_status mlu_set_device(int device) { return mlu_use_device("set_device", device); }

static it_status mlu_get_device(int *device) {
    if (current_device < 0) {
        int d = 0;
        MLU_CNRT(mlu.cnrtGetDevice(&d), "dev=%p", (void *)&d);
        current_device = d;
    }
    *device = current_device;
    return IT_OK;
}

/* ---------------------------------------------------------------- queues */

static it_status stream_new(int device, int priority, bool with_priority, bool is_default, it_stream **out) {
    it_status st = mlu_use_device("stream_create", device);
    if (st) return st;
    it_stream *s = calloc(1, sizeof *s);
    if (!s) return it_error(IT_ERR_OOM, "mlu stream_create: out of host memory");
    s->device = device;
    s->priority = priority;
    s->is_default = is_default;
    pthread_mutex_init(&s->ws_lock, NULL);
    mlu_cnrtRet_t r = with_priority && mlu.cnrtQueueCreateWithPriority
                          ? mlu.cnrtQueueCreateWithPriority(&s->queue, 0, priority)
                          : mlu.cnrtQueueCreate(&s->queue);
    if (r != MLU_cnrtSuccess) {
        free(s);
        return mlu_cnrt_error(r, "cnrtQueueCreate", "dev=%d, priority=%d", device, priority);
    }
    /* One CNNL handle per queue, bound once (Paddle's mluStream). */
    mlu_cnnlStatus_t c = mlu.cnnlCreate(&s->cnnl);
    if (c == MLU_CNNL_STATUS_SUCCESS) c = mlu.cnnlSetQueue(s->cnnl, s->queue);
    if (c != MLU_CNNL_STATUS_SUCCESS) {
        if (s->cnnl) mlu.cnnlDestroy(s->cnnl);
        mlu.cnrtQueueDestroy(s->queue);
        free(s);
        return mlu_cnnl_error(c, "cnnlCreate/cnnlSetQueue", "dev=%d", device);
    }
    *out = s;
    return IT_OK;
}

it_status mlu_default_stream(int device, it_stream **out) {
    it_status st = mlu_check_device("default_stream", device);
    if (st) return st;
    pthread_mutex_lock(&rt_lock);
    if (!default_streams[device]) st = stream_new(device, 0, false, true, &default_streams[device]);
    *out = default_streams[device];
    pthread_mutex_unlock(&rt_lock);
    return st;
}

it_status mlu_stream_resolve(const char *fn, it_stream *s, it_stream **out) {
    if (s) {
        *out = s;
        return mlu_use_device(fn, s->device);
    }
    int dev = 0;
    it_status st = mlu_get_device(&dev);
    if (!st) st = mlu_default_stream(dev, out);
    return st;
}

static it_status mlu_priority_range(int *least, int *greatest) {
    if (!mlu.cnrtDeviceGetQueuePriorityRange) {
        *least = *greatest = 0;
        return IT_OK;
    }
    MLU_CNRT(mlu.cnrtDeviceGetQueuePriorityRange(least, greatest), "least=%p, greatest=%p", (void *)least,
             (void *)greatest);
    return IT_OK;
}

static it_status mlu_stream_create(int device, int priority, it_stream **out) {
    int least = 0, greatest = 0;
    it_status st = mlu_priority_range(&least, &greatest);
    if (st) return st;
    /* clamp as CUDA does; "greatest" is the numerically lower bound */
    int lo = least < greatest ? least : greatest, hi = least < greatest ? greatest : least;
    if (priority < lo) priority = lo;
    if (priority > hi) priority = hi;
    return stream_new(device, priority, true, false, out);
}

static it_status mlu_stream_synchronize(it_stream *s) {
    it_status st = mlu_stream_resolve("stream_synchronize", s, &s);
    if (st) return st;
    MLU_CNRT(mlu.cnrtQueueSync(s->queue), "queue=%p (dev %d)", s->queue, s->device);
    mlu_staging_poll(false);
    return IT_OK;
}

static it_status mlu_stream_destroy(it_stream *s) {
    if (!s || s->is_default) return it_error(IT_ERR_INVALID_ARG, "mlu stream_destroy: NULL or default stream");
    int dev = s->device;
    it_status st = mlu_stream_synchronize(s);
    if (s->ws) mlu.cnrtFree(s->ws);
    mlu.cnnlDestroy(s->cnnl);
    mlu_cnrtRet_t r = mlu.cnrtQueueDestroy(s->queue);
    pthread_mutex_destroy(&s->ws_lock);
    free(s);
    if (!st && r != MLU_cnrtSuccess) st = mlu_cnrt_error(r, "cnrtQueueDestroy", "dev=%d", dev);
    return st;
}

static it_status mlu_stream_handle(it_stream *s, void **handle) {
    it_status st = mlu_stream_resolve("stream_handle", s, &s);
    if (!st) *handle = s->cnnl;
    return st;
}

it_status mlu_workspace(it_stream *s, size_t need, void **ws) {
    pthread_mutex_lock(&s->ws_lock);
    it_status st = IT_OK;
    if (need > s->ws_bytes) {
        size_t n = mlu_workspace_grow(s->ws_bytes, need);
        mlu_cnrtRet_t r = mlu.cnrtQueueSync(s->queue); /* earlier kernels may still use the old one */
        if (r == MLU_cnrtSuccess && s->ws) r = mlu.cnrtFree(s->ws);
        s->ws = NULL;
        s->ws_bytes = 0;
        if (r == MLU_cnrtSuccess) r = mlu.cnrtMalloc(&s->ws, n);
        if (r != MLU_cnrtSuccess)
            st = mlu_cnrt_error(r, "cnrtMalloc", "workspace of %zu bytes on dev %d", n, s->device);
        else
            s->ws_bytes = n;
    }
    *ws = s->ws;
    pthread_mutex_unlock(&s->ws_lock);
    return st;
}

/* ---------------------------------------------------------------- notifiers */

static it_status mlu_event_create(int device, it_event **out) {
    it_status st = mlu_use_device("event_create", device);
    if (st) return st;
    it_event *e = calloc(1, sizeof *e);
    if (!e) return it_error(IT_ERR_OOM, "mlu event_create: out of host memory");
    e->device = device;
    mlu_cnrtRet_t r = mlu.cnrtNotifierCreate(&e->notifier);
    if (r != MLU_cnrtSuccess) {
        free(e);
        return mlu_cnrt_error(r, "cnrtNotifierCreate", "dev=%d", device);
    }
    *out = e;
    return IT_OK;
}

static it_status mlu_event_destroy(it_event *e) {
    if (!e) return IT_OK;
    mlu_cnrtRet_t r = mlu.cnrtNotifierDestroy(e->notifier);
    free(e);
    if (r != MLU_cnrtSuccess) return mlu_cnrt_error(r, "cnrtNotifierDestroy", "%s", "");
    return IT_OK;
}

static it_status mlu_event_record(it_event *e, it_stream *s) {
    it_status st = mlu_stream_resolve("event_record", s, &s);
    if (st) return st;
    MLU_CNRT(mlu.cnrtPlaceNotifier(e->notifier, s->queue), "notifier=%p, queue=%p", e->notifier, s->queue);
    e->recorded = true;
    return IT_OK;
}

static it_status mlu_stream_wait_event(it_stream *s, it_event *e) {
    it_status st = mlu_stream_resolve("stream_wait_event", s, &s);
    if (st || !e->recorded) return st; /* never recorded: complete */
    /* NOTIFIER first, queue second, flags 0 (docs/backends/mlu.md C1) */
    MLU_CNRT(mlu.cnrtQueueWaitNotifier(e->notifier, s->queue, 0), "notifier=%p, queue=%p, flags=0", e->notifier,
             s->queue);
    return IT_OK;
}

/* "Not ready": cnrtErrorNotReady (cnrt.h:61); older callers also saw cnrtErrorBusy (cnrt.h:141,
 * "deprecated"), so both mean not done. */
static bool not_ready(mlu_cnrtRet_t r) { return r == MLU_cnrtErrorNotReady || r == MLU_cnrtErrorBusy; }

static it_status mlu_event_query(it_event *e, bool *done) {
    if (!e->recorded) {
        *done = true;
        return IT_OK;
    }
    mlu_cnrtRet_t r = mlu.cnrtQueryNotifier(e->notifier);
    if (r == MLU_cnrtSuccess) {
        *done = true;
        return IT_OK;
    }
    if (not_ready(r)) {
        if (mlu.cnrtGetLastError) mlu.cnrtGetLastError(); /* clear it (torch_mlu guard_impl) */
        *done = false;
        return IT_OK;
    }
    return mlu_cnrt_error(r, "cnrtQueryNotifier", "notifier=%p", e->notifier);
}

static it_status mlu_event_synchronize(it_event *e) {
    if (!e->recorded) return IT_OK;
    MLU_CNRT(mlu.cnrtWaitNotifier(e->notifier), "notifier=%p", e->notifier);
    return IT_OK;
}

static it_status mlu_event_elapsed_ms(it_event *a, it_event *b, float *ms) {
    if (!mlu.cnrtNotifierElapsedTime)
        return it_error(IT_ERR_UNSUPPORTED, "mlu event_elapsed_ms: libcnrt.so has no cnrtNotifierElapsedTime");
    if (!a->recorded || !b->recorded)
        return it_error(IT_ERR_INVALID_ARG, "mlu event_elapsed_ms: both events must be recorded");
    MLU_CNRT(mlu.cnrtNotifierElapsedTime(a->notifier, b->notifier, ms), "start=%p, end=%p", a->notifier, b->notifier);
    return IT_OK;
}

static it_status mlu_synchronize_device(int device) {
    it_status st = mlu_use_device("synchronize_device", device);
    if (st) return st;
    MLU_CNRT(mlu.cnrtSyncDevice(), "dev=%d", device);
    mlu_staging_poll(false);
    return IT_OK;
}

static it_status mlu_default_stream_slot(int device, it_stream **out) { return mlu_default_stream(device, out); }

const it_runtime mlu_runtime = {
    .init = mlu_init,
    .device_count = mlu_device_count,
    .set_device = mlu_set_device,
    .get_device = mlu_get_device,
    .default_stream = mlu_default_stream_slot,
    .stream_create = mlu_stream_create,
    .stream_destroy = mlu_stream_destroy,
    .stream_synchronize = mlu_stream_synchronize,
    .stream_priority_range = mlu_priority_range,
    .stream_handle = mlu_stream_handle,
    .event_create = mlu_event_create,
    .event_destroy = mlu_event_destroy,
    .event_record = mlu_event_record,
    .stream_wait_event = mlu_stream_wait_event,
    .event_query = mlu_event_query,
    .event_synchronize = mlu_event_synchronize,
    .event_elapsed_ms = mlu_event_elapsed_ms,
    .malloc = mlu_malloc,
    .free = mlu_free,
    .malloc_async = mlu_malloc_async, /* cnrtMemAllocAsync where present, else cnrtMalloc */
    .free_async = mlu_free_async,
    .memcpy = mlu_memcpy,
    .memcpy_async = mlu_memcpy_async,
    .mem_info = mlu_mem_info,
    .synchronize_device = mlu_synchronize_device,
};
