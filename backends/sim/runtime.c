/* The sim runtime: devices, streams and events of a simulated accelerator.
 *
 * Devices. IT_SIM_DEVICES (default 2) devices, sim:0 .. sim:N-1, each with
 * IT_SIM_MEMORY_MB (default 8192) MiB of memory (memory.c). The current device is per
 * thread, as cudaSetDevice / cnrtSetDevice.
 *
 * Streams. Each stream is a FIFO of work items drained by its own worker thread: the
 * software stand-in for a hardware queue. Enqueueing (a kernel, a copy, an event record)
 * returns at once; the item runs later, in order. Nothing on a stream ever runs on the
 * caller's thread, so the core sees the same asynchrony a GPU shows it.
 *
 * Sticky errors. An item that fails on the worker records its status and message; the
 * next stream_synchronize (or synchronous memcpy, which waits on the default stream)
 * returns it and clears it, as CUDA reports an asynchronous launch failure at the next
 * synchronizing call. Later items still run: the sim does not poison the context.
 *
 * Events. event_record enqueues a marker; when the worker reaches it the event completes
 * and takes the time. stream_wait_event enqueues a wait on the latest record made before
 * the call (an event never recorded: no wait), as cudaStreamWaitEvent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

typedef struct sim_device {
    it_stream *default_stream; /* created on first use */
    it_stream *streams;        /* every live stream of this device, default included */
} sim_device;

/* Guards init and the devices' stream lists. Never held while waiting on a stream. */
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_device rt_dev[SIM_MAX_DEVICES];
static int rt_count;
static atomic_bool rt_ready;
static _Thread_local int rt_current; /* the calling thread's device, as cudaSetDevice */

/* Events complete on workers and are waited for by hosts and other workers: one lock and
 * one condition variable for all of them keeps this short (a real driver uses a
 * per-event semaphore the device writes). */
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_done = PTHREAD_COND_INITIALIZER;

struct it_event {
    int device;
    int refs;          /* the creator's + one per queued marker or wait (ev_lock) */
    uint64_t recorded; /* records enqueued so far */
    uint64_t reached;  /* highest record number whose marker a worker reached */
    double t_ms;       /* when that marker was reached */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

it_status sim_check_device(const char *fn, int device) {
    if (!atomic_load(&rt_ready)) return it_error(IT_ERR_BACKEND, "sim: %s called before init", fn);
    if (device < 0 || device >= rt_count)
        return it_error(IT_ERR_INVALID_ARG, "sim: %s: device %d out of range (sim has %d devices, IT_SIM_DEVICES)", fn,
                        device, rt_count);
    return IT_OK;
}

/* ---------------------------------------------------------------- init, devices */

/* A positive integer from the environment, or `def` when unset. */
static it_status env_count(const char *name, long def, long max, long *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return IT_OK;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > max)
        return it_error(IT_ERR_INVALID_ARG, "sim: %s='%s' is not an integer in 1..%ld", name, v, max);
    *out = n;
    return IT_OK;
}

/* Real device: cuInit / cnrtInit, then query the driver for devices and their memory. */
static it_status rt_init(void) {
    pthread_mutex_lock(&rt_lock);
    it_status st = IT_OK;
    if (!atomic_load(&rt_ready)) {
        long n = 0, mb = 0;
        st = env_count("IT_SIM_DEVICES", 2, SIM_MAX_DEVICES, &n);
        if (!st) st = env_count("IT_SIM_MEMORY_MB", 8192, 1L << 30, &mb);
        if (!st) {
            rt_count = (int)n;
            sim_mem_init(rt_count, (size_t)mb << 20);
            atomic_store(&rt_ready, true);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    return st;
}

static it_status rt_device_count(int *count) {
    if (!atomic_load(&rt_ready)) return it_error(IT_ERR_BACKEND, "sim: device_count called before init");
    *count = rt_count;
    return IT_OK;
}

/* Real device: cudaSetDevice makes the device's primary context current on this thread. */
static it_status rt_set_device(int device) {
    it_status st = sim_check_device("set_device", device);
    if (!st) rt_current = device;
    return st;
}

static it_status rt_get_device(int *device) {
    *device = rt_current;
    return IT_OK;
}

/* ---------------------------------------------------------------- streams */

static void stream_unref(it_stream *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    free(s);
}

/* The worker: pop, run, count, repeat. A real device's queue engine does the same with
 * commands; the sticky error is what the driver reads back from the device. */
static void *stream_worker(void *arg) {
    it_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->wake, &s->lock);
        sim_item *item = s->head;
        if (!item) break; /* stop requested and nothing left */
        s->head = item->next;
        if (!s->head) s->tail = NULL;
        pthread_mutex_unlock(&s->lock);

        it_error_clear();
        it_status st = item->run(item);
        char msg[SIM_MSG_BYTES] = "";
        if (st) snprintf(msg, sizeof msg, "%s failed: %s", item->what, it_last_error());
        if (item->drop)
            item->drop(item);
        else
            free(item);

        pthread_mutex_lock(&s->lock);
        if (st && !s->error) { /* keep the first failure: later ones are often its echoes */
            s->error = st;
            memcpy(s->error_msg, msg, sizeof msg);
        }
        s->completed++;
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

uint64_t sim_enqueue(it_stream *s, sim_item *item) {
    item->next = NULL;
    pthread_mutex_lock(&s->lock);
    item->seq = ++s->enqueued;
    if (s->tail)
        s->tail->next = item;
    else
        s->head = item;
    s->tail = item;
    uint64_t seq = item->seq;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return seq;
}

/* Wait for item `seq`; hand back the sticky error (cleared) in st/msg. */
static it_status stream_wait_raw(it_stream *s, uint64_t seq, bool take_error, char *msg) {
    pthread_mutex_lock(&s->lock);
    while (s->completed < seq) pthread_cond_wait(&s->idle, &s->lock);
    it_status st = IT_OK;
    if (take_error && s->error) {
        st = s->error;
        memcpy(msg, s->error_msg, SIM_MSG_BYTES);
        s->error = IT_OK;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

it_status sim_stream_wait(it_stream *s, uint64_t seq, const char *fn) {
    char msg[SIM_MSG_BYTES];
    it_status st = stream_wait_raw(s, seq, true, msg);
    if (st)
        return it_error(st, "sim:%d: %s: asynchronous error from earlier work on %s stream: %s", s->device, fn,
                        s->is_default ? "the default" : "this", msg);
    return IT_OK;
}

static uint64_t stream_tail_seq(it_stream *s) {
    pthread_mutex_lock(&s->lock);
    uint64_t seq = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return seq;
}

/* Real device: cudaStreamCreateWithPriority. Called with rt_lock held. */
static it_status stream_new_locked(int device, int priority, bool is_default, it_stream **out) {
    it_stream *s = calloc(1, sizeof *s);
    if (!s) return it_error(IT_ERR_OOM, "sim:%d: stream_create: out of host memory", device);
    s->device = device;
    s->priority = priority;
    s->is_default = is_default;
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    int rc = pthread_create(&s->worker, NULL, stream_worker, s);
    if (rc) {
        stream_unref(s);
        return it_error(IT_ERR_BACKEND, "sim:%d: stream_create: cannot start the stream's worker thread: %s", device,
                        strerror(rc));
    }
    s->next = rt_dev[device].streams;
    rt_dev[device].streams = s;
    *out = s;
    return IT_OK;
}

it_status sim_default_stream(int device, it_stream **out) {
    it_status st = sim_check_device("default_stream", device);
    if (st) return st;
    pthread_mutex_lock(&rt_lock);
    if (!rt_dev[device].default_stream) st = stream_new_locked(device, 0, true, &rt_dev[device].default_stream);
    if (!st) *out = rt_dev[device].default_stream;
    pthread_mutex_unlock(&rt_lock);
    return st;
}

it_status sim_stream_resolve(const char *fn, it_stream *s, it_stream **out) {
    if (s) {
        *out = s;
        return IT_OK;
    }
    it_status st = sim_default_stream(rt_current, out);
    return st ? it_error_context("sim: %s on the NULL stream: ", fn) : IT_OK;
}

/* As CUDA: 0 is the least priority, -1 the greatest (lower numbers run first). */
static it_status rt_stream_priority_range(int *least, int *greatest) {
    *least = 0;
    *greatest = -1;
    return IT_OK;
}

/* The priority is recorded and clamped to the range, as CUDA does. The sim gives every
 * stream its own worker, so priority changes nothing here; a real device's scheduler
 * prefers blocks of higher-priority streams when both have work. */
static it_status rt_stream_create(int device, int priority, it_stream **stream) {
    it_status st = sim_check_device("stream_create", device);
    if (st) return st;
    if (priority < -1) priority = -1;
    if (priority > 0) priority = 0;
    pthread_mutex_lock(&rt_lock);
    st = stream_new_locked(device, priority, false, stream);
    pthread_mutex_unlock(&rt_lock);
    return st;
}

/* Drain, stop the worker, free. Returns a sticky error the stream still held (the stream
 * is destroyed either way), as cudaStreamDestroy may report earlier async errors. */
static it_status rt_stream_destroy(it_stream *s) {
    if (!s) return IT_OK;
    if (s->is_default)
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: stream_destroy: the default stream is never destroyed", s->device);
    pthread_mutex_lock(&rt_lock);
    for (it_stream **p = &rt_dev[s->device].streams; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&rt_lock);
    it_status st = sim_stream_wait(s, stream_tail_seq(s), "stream_destroy");
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL);
    stream_unref(s);
    return st;
}

static it_status rt_stream_synchronize(it_stream *s) {
    it_status st = sim_stream_resolve("stream_synchronize", s, &s);
    return st ? st : sim_stream_wait(s, stream_tail_seq(s), "stream_synchronize");
}

/* Real device: a cuBLAS / CNNL handle bound to this stream. The sim's kernels need no
 * library state, so the stream itself stands in for it. */
static it_status rt_stream_handle(it_stream *s, void **handle) {
    it_status st = sim_stream_resolve("stream_handle", s, &s);
    if (!st) *handle = s;
    return st;
}

it_status sim_drain_device(int device, bool take_errors, const char *fn) {
    it_status st = sim_check_device(fn, device);
    if (st) return st;
    /* Snapshot the streams (each referenced, so a concurrent destroy cannot free one under
     * us) and the last item each had, then wait without holding rt_lock. */
    enum { CHUNK = 64 };
    it_stream *snap[CHUNK];
    uint64_t seq[CHUNK];
    it_stream **list = snap;
    uint64_t *seqs = seq;
    size_t n = 0, cap = CHUNK;
    pthread_mutex_lock(&rt_lock);
    for (it_stream *s = rt_dev[device].streams; s; s = s->next) n++;
    if (n > cap) {
        list = malloc(n * sizeof *list);
        seqs = malloc(n * sizeof *seqs);
        if (!list || !seqs) {
            pthread_mutex_unlock(&rt_lock);
            free(list);
            free(seqs);
            return it_error(IT_ERR_OOM, "sim:%d: %s: out of host memory", device, fn);
        }
    }
    n = 0;
    for (it_stream *s = rt_dev[device].streams; s; s = s->next) {
        atomic_fetch_add(&s->refs, 1);
        seqs[n] = stream_tail_seq(s);
        list[n++] = s;
    }
    pthread_mutex_unlock(&rt_lock);
    it_status first = IT_OK;
    char msg[SIM_MSG_BYTES];
    for (size_t i = 0; i < n; i++) {
        char m[SIM_MSG_BYTES];
        it_status e = stream_wait_raw(list[i], seqs[i], take_errors, m);
        if (e && !first) {
            first = e;
            memcpy(msg, m, sizeof msg);
        }
        stream_unref(list[i]);
    }
    if (list != snap) {
        free(list);
        free(seqs);
    }
    if (first) return it_error(first, "sim:%d: %s: asynchronous error from earlier work: %s", device, fn, msg);
    return IT_OK;
}

/* Real device: cudaDeviceSynchronize. */
static it_status rt_synchronize_device(int device) { return sim_drain_device(device, true, "synchronize_device"); }

/* ---------------------------------------------------------------- host functions */

typedef struct host_func_item {
    sim_item item;
    void (*fn)(void *);
    void *arg;
} host_func_item;

static it_status run_host_func(sim_item *it) {
    host_func_item *h = (host_func_item *)it;
    h->fn(h->arg);
    return IT_OK;
}

IT_BACKEND_EXPORT it_status it_sim_launch_host_func(it_stream *stream, void (*fn)(void *), void *arg) {
    it_status st = sim_stream_resolve("launch_host_func", stream, &stream);
    if (st) return st;
    if (!fn) return it_error(IT_ERR_INVALID_ARG, "sim: launch_host_func: fn is NULL");
    host_func_item *h = calloc(1, sizeof *h);
    if (!h) return it_error(IT_ERR_OOM, "sim: launch_host_func: out of host memory");
    snprintf(h->item.what, sizeof h->item.what, "host function");
    h->item.run = run_host_func;
    h->fn = fn;
    h->arg = arg;
    sim_enqueue(stream, &h->item);
    return IT_OK;
}

/* ---------------------------------------------------------------- events */

typedef struct event_item {
    sim_item item;
    it_event *event;
    uint64_t target; /* the record number this marker completes, or the wait waits for */
} event_item;

static void event_unref_locked(it_event *e) {
    if (--e->refs == 0) free(e);
}

static void drop_event_item(sim_item *it) {
    event_item *ei = (event_item *)it;
    pthread_mutex_lock(&ev_lock);
    event_unref_locked(ei->event);
    pthread_mutex_unlock(&ev_lock);
    free(ei);
}

/* The marker: everything before it on the stream has finished. */
static it_status run_event_record(sim_item *it) {
    event_item *ei = (event_item *)it;
    pthread_mutex_lock(&ev_lock);
    if (ei->target > ei->event->reached) { /* an older record finishing late changes nothing */
        ei->event->reached = ei->target;
        ei->event->t_ms = now_ms();
    }
    pthread_cond_broadcast(&ev_done);
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

/* The wait: the worker (the stream) blocks until the event's record `target` completed. */
static it_status run_event_wait(sim_item *it) {
    event_item *ei = (event_item *)it;
    pthread_mutex_lock(&ev_lock);
    while (ei->event->reached < ei->target) pthread_cond_wait(&ev_done, &ev_lock);
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

/* Enqueue a marker or a wait on `e`; the item holds a reference on the event, so the
 * user may destroy the event while the item is still queued (as CUDA allows). */
static it_status event_enqueue(it_stream *s, it_event *e, bool record, const char *fn) {
    event_item *ei = calloc(1, sizeof *ei);
    if (!ei) return it_error(IT_ERR_OOM, "sim: %s: out of host memory", fn);
    ei->event = e;
    ei->item.run = record ? run_event_record : run_event_wait;
    ei->item.drop = drop_event_item;
    snprintf(ei->item.what, sizeof ei->item.what, "%s", fn);
    pthread_mutex_lock(&ev_lock);
    if (record) e->recorded++;
    ei->target = e->recorded;
    e->refs++;
    /* Enqueue under ev_lock so that two threads recording one event enqueue their markers
     * in the order of their record numbers. (ev_lock -> stream lock is the only nesting.) */
    sim_enqueue(s, &ei->item);
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

static it_status rt_event_create(int device, it_event **event) {
    it_status st = sim_check_device("event_create", device);
    if (st) return st;
    it_event *e = calloc(1, sizeof *e);
    if (!e) return it_error(IT_ERR_OOM, "sim:%d: event_create: out of host memory", device);
    e->device = device;
    e->refs = 1;
    *event = e;
    return IT_OK;
}

static it_status rt_event_destroy(it_event *e) {
    if (!e) return IT_OK;
    pthread_mutex_lock(&ev_lock);
    event_unref_locked(e);
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

/* Real device: cudaEventRecord. The event and the stream must be on one device. */
static it_status rt_event_record(it_event *e, it_stream *s) {
    it_status st = sim_stream_resolve("event_record", s, &s);
    if (st) return st;
    if (e->device != s->device)
        return it_error(IT_ERR_INVALID_ARG, "sim: event_record: event of sim:%d on a stream of sim:%d", e->device,
                        s->device);
    return event_enqueue(s, e, true, "event_record");
}

/* Real device: cudaStreamWaitEvent (the event may belong to another device). */
static it_status rt_stream_wait_event(it_stream *s, it_event *e) {
    it_status st = sim_stream_resolve("stream_wait_event", s, &s);
    if (st) return st;
    pthread_mutex_lock(&ev_lock);
    bool never = e->recorded == 0;
    pthread_mutex_unlock(&ev_lock);
    if (never) return IT_OK; /* nothing to wait for, as in CUDA */
    return event_enqueue(s, e, false, "stream_wait_event");
}

/* Done when the latest record was reached (an event never recorded counts as done). */
static it_status rt_event_query(it_event *e, bool *done) {
    pthread_mutex_lock(&ev_lock);
    *done = e->reached >= e->recorded;
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

static it_status rt_event_synchronize(it_event *e) {
    pthread_mutex_lock(&ev_lock);
    uint64_t target = e->recorded;
    while (e->reached < target) pthread_cond_wait(&ev_done, &ev_lock);
    pthread_mutex_unlock(&ev_lock);
    return IT_OK;
}

static it_status rt_event_elapsed_ms(it_event *start, it_event *end, float *ms) {
    pthread_mutex_lock(&ev_lock);
    const char *bad = !start->recorded                   ? "start event was never recorded"
                      : !end->recorded                   ? "end event was never recorded"
                      : start->reached < start->recorded ? "start event has not completed yet"
                      : end->reached < end->recorded     ? "end event has not completed yet"
                                                         : NULL;
    double t = end->t_ms - start->t_ms;
    pthread_mutex_unlock(&ev_lock);
    if (bad) return it_error(IT_ERR_INVALID_ARG, "sim: event_elapsed_ms: %s", bad);
    *ms = (float)t;
    return IT_OK;
}

const it_runtime sim_runtime = {
    .init = rt_init,
    .device_count = rt_device_count,
    .set_device = rt_set_device,
    .get_device = rt_get_device,
    .default_stream = sim_default_stream,
    .stream_create = rt_stream_create,
    .stream_destroy = rt_stream_destroy,
    .stream_synchronize = rt_stream_synchronize,
    .stream_priority_range = rt_stream_priority_range,
    .stream_handle = rt_stream_handle,
    .event_create = rt_event_create,
    .event_destroy = rt_event_destroy,
    .event_record = rt_event_record,
    .stream_wait_event = rt_stream_wait_event,
    .event_query = rt_event_query,
    .event_synchronize = rt_event_synchronize,
    .event_elapsed_ms = rt_event_elapsed_ms,
    .malloc = sim_malloc,
    .free = sim_free,
    .malloc_async = sim_malloc_async,
    .free_async = sim_free_async,
    .memcpy = sim_memcpy,
    .memcpy_async = sim_memcpy_async,
    .mem_info = sim_mem_info,
    .synchronize_device = rt_synchronize_device,
};
