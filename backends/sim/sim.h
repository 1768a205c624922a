/* The sim backend's private layouts, shared by its four files:
 *
 *   runtime.c  devices, streams (one worker thread each), events, the runtime table
 *   memory.c   device memory: one PROT_NONE mapping per allocation, the allocation table,
 *              malloc/free (sync and stream-ordered), memcpy (sync and async), mem_info
 *   kernels.c  the kernel table: every slot enqueues a closure that runs a CPU kernel
 *   backend.c  the it_backend struct and the plugin entry point
 *
 * A vendor porting a real chip keeps this split: runtime.c wraps the driver's context,
 * stream and event calls, memory.c its allocator and DMA, kernels.c its kernel launches.
 * Nothing here is seen by the core; the core sees only backend.h. */
#ifndef IT_SIM_H
#define IT_SIM_H

#include <pthread.h>
#include <stdatomic.h>

#include "infinitrain/backend.h"

/* The registry's limit (src/core/registry.c); IT_SIM_DEVICES may not exceed it. */
#define SIM_MAX_DEVICES 64
/* Longest message kept for an asynchronous (sticky) error. */
#define SIM_MSG_BYTES 768

/* ---------------------------------------------------------------- stream work items
 * Everything a stream does is a sim_item in its FIFO: a copy, a kernel, an event marker,
 * an event wait, a stream-ordered free, a host function. On a real device these are the
 * commands the driver writes into the stream's hardware queue (a push buffer / ring). */
typedef struct sim_item sim_item;
struct sim_item {
    sim_item *next;
    uint64_t seq;  /* position in its stream (1, 2, ...), set by sim_enqueue */
    char what[64]; /* "kernel 'gemm'", "memcpy D2H of 64 bytes": names it in errors */
    /* Runs on the stream's worker thread. A failure returns its status after it_error(...);
     * the worker keeps it as the stream's sticky error. */
    it_status (*run)(sim_item *item);
    /* Frees the item after it ran (NULL: free(item)). */
    void (*drop)(sim_item *item);
};

struct it_stream {
    int device;
    int priority;
    bool is_default;
    atomic_int refs;      /* the creator's + one per device-wide synchronize in progress */
    pthread_t worker;     /* the "hardware queue" draining this stream */
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;  /* worker: work arrived or stop requested */
    pthread_cond_t idle;  /* waiters: an item completed */
    sim_item *head, *tail;
    uint64_t enqueued, completed; /* items ever enqueued / ever finished (in order) */
    bool stop;
    it_status error; /* first asynchronous failure not yet reported (sticky error) */
    char error_msg[SIM_MSG_BYTES];
    it_stream *next; /* in its device's list of live streams (runtime.c's lock) */
};

/* ---------------------------------------------------------------- runtime.c */
/* IT_OK when init ran and 0 <= device < device count; else an error naming `fn`. */
it_status sim_check_device(const char *fn, int device);
/* The stream work goes on: `s` itself, or for NULL the current device's default stream
 * (CUDA's stream 0). Fails naming `fn` when the default stream cannot be created. */
it_status sim_stream_resolve(const char *fn, it_stream *s, it_stream **out);
/* The default stream of `device`, created on first use. */
it_status sim_default_stream(int device, it_stream **out);
/* Append `item` to `s`'s queue and wake its worker; returns the item's sequence number.
 * Ownership of the item passes to the stream. Never blocks on device work. */
uint64_t sim_enqueue(it_stream *s, sim_item *item);
/* Block until item `seq` of `s` completed, then report (and clear) the stream's sticky
 * error, if any, as an it_error naming `fn`. */
it_status sim_stream_wait(it_stream *s, uint64_t seq, const char *fn);
/* Wait until every stream of `device` finished the work enqueued before the call. With
 * take_errors, the first sticky error found is reported and every one is cleared; without,
 * sticky errors stay for the streams' next synchronize. */
it_status sim_drain_device(int device, bool take_errors, const char *fn);

/* ---------------------------------------------------------------- memory.c */
typedef struct sim_alloc sim_alloc; /* one device allocation (opaque outside memory.c) */

void sim_mem_init(int devices, size_t bytes_per_device);
/* Enqueue-time check: every byte descriptor `d` can reach lies inside one live allocation
 * of `device`. An error names the kernel `fn` and the argument `arg`. Cheap: a binary
 * search in the allocation table; no device access. */
it_status sim_mem_check_desc(int device, const char *fn, const char *arg, const it_tdesc *d);
/* Worker side: make the allocation holding d's span readable and writable for the
 * duration of one item (refcounted per allocation; the first user unprotects it) and
 * return it in *out (NULL for an empty span). Fails when the memory was freed before the
 * item ran (what a real device reports as an illegal address). */
it_status sim_mem_acquire(int device, const char *what, const char *arg, const it_tdesc *d, sim_alloc **out);
/* Undo one sim_mem_acquire: the last user puts the allocation back to PROT_NONE. */
void sim_mem_release(sim_alloc *a);

it_status sim_malloc(int device, size_t nbytes, void **ptr);
it_status sim_free(int device, void *ptr);
it_status sim_malloc_async(int device, size_t nbytes, it_stream *stream, void **ptr);
it_status sim_free_async(int device, void *ptr, it_stream *stream);
it_status sim_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind);
it_status sim_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                           it_stream *stream);
it_status sim_mem_info(int device, size_t *free_bytes, size_t *total_bytes);

/* ---------------------------------------------------------------- runtime.c / kernels.c */
extern const it_runtime sim_runtime;
extern const it_kernels sim_kernels;

/* ---------------------------------------------------------------- extension (exported)
 * Enqueue `fn(arg)` on `stream`: it runs on the stream's worker after all earlier work and
 * before any later work, like cudaLaunchHostFunc / cnrtInvokeHostFunc. backend.h has no
 * slot for it; tests reach it with dlsym (see tests/unit/test_sim.c) to hold a stream at a
 * known point. `fn` must not call back into the sim runtime for the same stream. */
IT_BACKEND_EXPORT it_status it_sim_launch_host_func(it_stream *stream, void (*fn)(void *), void *arg);

#endif
