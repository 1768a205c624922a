/* MLU memory over CNRT (docs/backends/mlu.md C1): cnrtMalloc/cnrtFree, the queue-ordered
 * cnrtMemAllocAsync/cnrtMemFreeAsync where the library has them (CNRT 6.14: optional symbols),
 * cnrtMemcpy[Async] (the _V3 form where present), pinned staging for asynchronous H2D from
 * pageable memory, cnrtMemGetInfo, and an allocation tracker for peak statistics. */
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

/* ---------------------------------------------------------------- tracker */
typedef struct mlu_block {
    void *ptr;
    size_t bytes;
    int device;
    bool queue_ordered; /* from cnrtMemAllocAsync: freed with cnrtMemFreeAsync */
    struct mlu_block *next;
} mlu_block;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mlu_block *blocks;
static size_t live_bytes[MLU_MAX_DEVICES], peak_bytes[MLU_MAX_DEVICES];

static void track_add(int device, void *p, size_t n, bool queue_ordered) {
    mlu_block *b = malloc(sizeof *b);
    pthread_mutex_lock(&mem_lock);
    if (b) {
        *b = (mlu_block){p, n, device, queue_ordered, blocks};
        blocks = b;
    }
    live_bytes[device] += n;
    if (live_bytes[device] > peak_bytes[device]) peak_bytes[device] = live_bytes[device];
    pthread_mutex_unlock(&mem_lock);
}

/* Forget p; false when it is not a live allocation of `device`. *queue_ordered (may be NULL)
 * says how it was allocated. */
static bool track_remove(int device, void *p, bool *queue_ordered) {
    pthread_mutex_lock(&mem_lock);
    for (mlu_block **pp = &blocks; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == p && (*pp)->device == device) {
            mlu_block *b = *pp;
            *pp = b->next;
            live_bytes[device] -= b->bytes;
            pthread_mutex_unlock(&mem_lock);
            if (queue_ordered) *queue_ordered = b->queue_ordered;
            free(b);
            return true;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return false;
}

void mlu_tracker_stats(int device, size_t *live, size_t *peak) {
    pthread_mutex_lock(&mem_lock);
    *live = device >= 0 && device < MLU_MAX_DEVICES ? live_bytes[device] : 0;
    *peak = device >= 0 && device < MLU_MAX_DEVICES ? peak_bytes[device] : 0;
    pthread_mutex_unlock(&mem_lock);
}

it_status mlu_malloc(int device, size_t nbytes, void **ptr) {
    it_status st = mlu_use_device("malloc", device);
    if (st) return st;
    MLU_CNRT(mlu.cnrtMalloc(ptr, nbytes), "nbytes=%zu, dev=%d", nbytes, device);
    track_add(device, *ptr, nbytes, false);
    return IT_OK;
}

it_status mlu_free(int device, void *ptr) {
    it_status st = mlu_use_device("free", device);
    if (st || !ptr) return st;
    bool queue_ordered = false;
    if (!track_remove(device, ptr, &queue_ordered))
        return it_error(IT_ERR_INVALID_ARG, "mlu free: %p is not a live allocation of device %d", ptr, device);
    MLU_CNRT(mlu.cnrtSyncDevice(), "before cnrtFree(%p)", ptr); /* as the sim: free waits for the device */
    if (queue_ordered) { /* the device is idle: freeing on the default queue is immediate */
        it_stream *d = NULL;
        if ((st = mlu_default_stream(device, &d))) return st;
        MLU_CNRT(mlu.cnrtMemFreeAsync(ptr, d->queue), "ptr=%p, dev=%d", ptr, device);
        MLU_CNRT(mlu.cnrtQueueSync(d->queue), "after cnrtMemFreeAsync(%p)", ptr);
    } else {
        MLU_CNRT(mlu.cnrtFree(ptr), "ptr=%p, dev=%d", ptr, device);
    }
    return IT_OK;
}

/* Queue-ordered allocation (cnrtMemAllocAsync) where the library has it, else cnrtMalloc. */
it_status mlu_malloc_async(int device, size_t nbytes, it_stream *s, void **ptr) {
    it_status st = mlu_stream_resolve("malloc_async", s, &s);
    if (!st) st = mlu_use_device("malloc_async", device);
    if (st) return st;
    if (!mlu.cnrtMemAllocAsync || !mlu.cnrtMemFreeAsync) return mlu_malloc(device, nbytes, ptr);
    MLU_CNRT(mlu.cnrtMemAllocAsync(ptr, nbytes, s->queue), "nbytes=%zu, queue=%p", nbytes, s->queue);
    track_add(device, *ptr, nbytes, true);
    return IT_OK;
}

/* Free after the work queued on s: cnrtMemFreeAsync for a queue-ordered block, else a queue
 * sync and cnrtFree. */
it_status mlu_free_async(int device, void *ptr, it_stream *s) {
    it_status st = mlu_stream_resolve("free_async", s, &s);
    if (!st) st = mlu_use_device("free_async", device);
    if (st || !ptr) return st;
    bool queue_ordered = false;
    if (!track_remove(device, ptr, &queue_ordered))
        return it_error(IT_ERR_INVALID_ARG, "mlu free_async: %p is not a live allocation of device %d", ptr, device);
    if (queue_ordered) {
        MLU_CNRT(mlu.cnrtMemFreeAsync(ptr, s->queue), "ptr=%p, queue=%p", ptr, s->queue);
        return IT_OK;
    }
    MLU_CNRT(mlu.cnrtQueueSync(s->queue), "queue=%p before cnrtFree(%p)", s->queue, ptr);
    MLU_CNRT(mlu.cnrtFree(ptr), "ptr=%p, dev=%d", ptr, device);
    return IT_OK;
}

/* ---------------------------------------------------------------- copies */

static int direction(it_memcpy_kind k) {
    switch (k) {
    case IT_MEMCPY_H2D: return MLU_cnrtMemcpyHostToDev;
    case IT_MEMCPY_D2H: return MLU_cnrtMemcpyDevToHost;
    case IT_MEMCPY_D2D: return MLU_cnrtMemcpyDevToDev;
    case IT_MEMCPY_H2H: return MLU_cnrtMemcpyHostToHost;
    }
    return -1;
}

it_status mlu_memcpy(int device, void *dst, const void *src, size_t n, it_memcpy_kind kind) {
    if (n == 0) return IT_OK;
    if (kind == IT_MEMCPY_H2H) {
        memcpy(dst, src, n);
        return IT_OK;
    }
    /* As backend.h asks: after work queued on the default queue. */
    it_stream *s = NULL;
    it_status st = mlu_default_stream(device, &s);
    if (!st) st = mlu_use_device("memcpy", device);
    if (st) return st;
    MLU_CNRT(mlu.cnrtQueueSync(s->queue), "queue=%p before a %zu-byte copy", s->queue, n);
    /* cnrtMemcpy's src is not const in CNRT's prototype */
    MLU_CNRT(mlu.cnrtMemcpy(dst, (void *)(uintptr_t)src, n, direction(kind)), "dst=%p, src=%p, n=%zu, dir=%d", dst, src,
             n, direction(kind));
    return IT_OK;
}

/* Pinned staging buffers of asynchronous H2D copies, released once their notifier completed
 * (PaddleCustomDevice PR #982). */
typedef struct mlu_staging {
    void *host;
    mlu_cnrtNotifier_t done;
    struct mlu_staging *next;
} mlu_staging;
static mlu_staging *staging;

void mlu_staging_poll(bool wait_all) {
    pthread_mutex_lock(&mem_lock);
    for (mlu_staging **pp = &staging; *pp;) {
        mlu_staging *b = *pp;
        mlu_cnrtRet_t r = wait_all ? mlu.cnrtWaitNotifier(b->done) : mlu.cnrtQueryNotifier(b->done);
        if (r == MLU_cnrtSuccess) {
            *pp = b->next;
            mlu.cnrtNotifierDestroy(b->done);
            mlu.cnrtFreeHost(b->host);
            free(b);
        } else {
            if (mlu.cnrtGetLastError) mlu.cnrtGetLastError();
            pp = &b->next;
        }
    }
    pthread_mutex_unlock(&mem_lock);
}

it_status mlu_memcpy_async(int device, void *dst, const void *src, size_t n, it_memcpy_kind kind, it_stream *s) {
    if (n == 0) return IT_OK;
    it_status st = mlu_stream_resolve("memcpy_async", s, &s);
    if (st) return st;
    (void)device;
    mlu_staging_poll(false);
    void *from = (void *)(uintptr_t)src;
    mlu_staging *b = NULL;
    if (kind == IT_MEMCPY_H2D) {
        /* The caller's pageable buffer may change after we return: stage it. */
        b = calloc(1, sizeof *b);
        if (!b) return it_error(IT_ERR_OOM, "mlu memcpy_async: out of host memory");
        mlu_cnrtRet_t r = mlu.cnrtHostMalloc(&b->host, n);
        if (r == MLU_cnrtSuccess) r = mlu.cnrtNotifierCreate(&b->done);
        if (r != MLU_cnrtSuccess) {
            if (b->host) mlu.cnrtFreeHost(b->host);
            free(b);
            return mlu_cnrt_error(r, "cnrtHostMalloc", "staging of %zu bytes", n);
        }
        memcpy(b->host, src, n);
        from = b->host;
    }
    /* queue BEFORE direction; cnrt.h: cnrtMemcpyAsync and _V2 "will be deprecated", use _V3 */
    mlu_cnrtRet_t (*copy)(void *, void *, size_t, mlu_cnrtQueue_t, mlu_cnrtMemTransDir_t) =
        mlu.cnrtMemcpyAsync_V3   ? mlu.cnrtMemcpyAsync_V3
        : mlu.cnrtMemcpyAsync_V2 ? mlu.cnrtMemcpyAsync_V2
                                 : mlu.cnrtMemcpyAsync;
    mlu_cnrtRet_t r = copy(dst, from, n, s->queue, direction(kind));
    if (r == MLU_cnrtSuccess && b) r = mlu.cnrtPlaceNotifier(b->done, s->queue);
    if (r != MLU_cnrtSuccess) {
        if (b) {
            mlu.cnrtQueueSync(s->queue);
            mlu.cnrtNotifierDestroy(b->done);
            mlu.cnrtFreeHost(b->host);
            free(b);
        }
        return mlu_cnrt_error(r, "cnrtMemcpyAsync", "dst=%p, src=%p, n=%zu, queue=%p, dir=%d", dst, src, n, s->queue,
                              direction(kind));
    }
    if (b) {
        pthread_mutex_lock(&mem_lock);
        b->next = staging;
        staging = b;
        pthread_mutex_unlock(&mem_lock);
    }
    return IT_OK;
}

it_status mlu_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    it_status st = mlu_use_device("mem_info", device);
    if (st) return st;
    /* free first */
    MLU_CNRT(mlu.cnrtMemGetInfo(free_bytes, total_bytes), "free=%p, total=%p (dev %d)", (void *)free_bytes,
             (void *)total_bytes, device);
    return IT_OK;
}
