/* MLU memory over CNRT (docs/backends/mlu.md C1): cnrtMalloc/cnrtFree, cnrtMemcpy[Async], pinned
 * staging for asynchronous H2D from pageable memory, cnrtMemGetInfo, and an allocation
 * tracker for peak statistics.
 *
 * No async allocator: CNRT offers none in practice (InfiniCore's mallocAsync is cnrtMalloc),
 * so malloc_async stays NULL and free_async = queue sync + cnrtFree. */
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

/* ---------------------------------------------------------------- tracker */
typedef struct mlu_block {
    void *ptr;
    size_t bytes;
    int device;
    struct mlu_block *next;
} mlu_block;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mlu_block *blocks;
static size_t live_bytes[MLU_MAX_DEVICES], peak_bytes[MLU_MAX_DEVICES];

static void track_add(int device, void *p, size_t n) {
    mlu_block *b = malloc(sizeof *b);
    pthread_mutex_lock(&mem_lock);
    if (b) {
        *b = (mlu_block){p, n, device, blocks};
        blocks = b;
    }
    live_bytes[device] += n;
    if (live_bytes[device] > peak_bytes[device]) peak_bytes[device] = live_bytes[device];
    pthread_mutex_unlock(&mem_lock);
}

static bool track_remove(int device, void *p) {
    pthread_mutex_lock(&mem_lock);
    for (mlu_block **pp = &blocks; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == p && (*pp)->device == device) {
            mlu_block *b = *pp;
            *pp = b->next;
            live_bytes[device] -= b->bytes;
            pthread_mutex_unlock(&mem_lock);
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
    track_add(device, *ptr, nbytes);
    return IT_OK;
}

it_status mlu_free(int device, void *ptr) {
    it_status st = mlu_use_device("free", device);
    if (st || !ptr) return st;
    if (!track_remove(device, ptr))
        return it_error(IT_ERR_INVALID_ARG, "mlu free: %p is not a live allocation of device %d", ptr, device);
    MLU_CNRT(mlu.cnrtSyncDevice(), "before cnrtFree(%p)", ptr); /* as the sim: free waits for the device */
    MLU_CNRT(mlu.cnrtFree(ptr), "ptr=%p, dev=%d", ptr, device);
    return IT_OK;
}

it_status mlu_free_async(int device, void *ptr, it_stream *s) {
    it_status st = mlu_stream_resolve("free_async", s, &s);
    if (st) return st;
    MLU_CNRT(mlu.cnrtQueueSync(s->queue), "queue=%p before cnrtFree(%p)", s->queue, ptr);
    return mlu_free(device, ptr);
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
    /* queue BEFORE direction */
    mlu_cnrtRet_t r = mlu.cnrtMemcpyAsync(dst, from, n, s->queue, direction(kind));
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
