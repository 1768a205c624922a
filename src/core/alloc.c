/* The caching allocator: one per device, over the backend's malloc/free.
 *
 * Sizes are rounded up (512 B granules below 1 MiB, then 1/8 of the size's power of two),
 * and a freed block goes to a cache keyed by its rounded size instead of back to the
 * backend. A request takes the smallest cached block of at least its rounded size and at
 * most 25% larger; otherwise it calls the backend. A training step that repeats the same
 * shapes therefore makes no backend allocation after its first iteration.
 *
 * All work for a device is issued on its one core stream, so a block freed by the host is
 * safe to hand out again at once: any kernel using the new owner is ordered after every
 * kernel that used the old one (the stream-ordered reuse rule).
 *
 * When the backend runs out of memory the cache is emptied and the call retried once; a
 * second failure reports the request, the device and its free/total memory. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

typedef struct cached_block {
    size_t size;
    void *ptr;
} cached_block;

struct it_allocator {
    pthread_mutex_t lock;
    cached_block *cache; /* sorted by size */
    size_t n_cache, cap_cache;
    size_t limit; /* 0 = none */
    it_mem_stats stats;
};

it_status it__allocator_new(it_allocator **out) {
    *out = NULL;
    size_t limit;
    it_status st = it_mem_env_limit(&limit);
    if (st) return st;
    it_allocator *a = calloc(1, sizeof *a);
    if (!a) return it_error(IT_ERR_OOM, "allocator state: out of host memory");
    pthread_mutex_init(&a->lock, NULL);
    a->limit = limit;
    *out = a;
    return IT_OK;
}

it_status it_mem_env_limit(size_t *max_bytes) {
    *max_bytes = 0;
    const char *env = getenv("IT_MAX_MEMORY_MB");
    if (!env || !*env) return IT_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long mb = strtoull(env, &end, 10);
    /* strtoull accepts a sign and leading blanks; a limit is a plain decimal MiB count. */
    if (*env < '0' || *env > '9' || *end != '\0' || errno == ERANGE || mb > ((unsigned long long)1 << 40))
        return it_error(IT_ERR_INVALID_ARG,
                        "IT_MAX_MEMORY_MB: '%s' is not a whole number of MiB in [0, 2^40] (0 = no limit)", env);
    *max_bytes = (size_t)mb << 20;
    return IT_OK;
}

static size_t round_size(size_t n) {
    if (n < ((size_t)1 << 20)) return (n + 511) & ~(size_t)511;
    size_t p = (size_t)1 << 20;
    while (p < n / 2 + 1 && p < ((size_t)1 << 62)) p <<= 1; /* p = largest power of two <= n (roughly) */
    size_t g = p / 8;
    size_t r = (n + g - 1) / g * g;
    return r < n ? n : r;
}

/* Index of the first cached block with size >= want. */
static size_t lower_bound(const it_allocator *a, size_t want) {
    size_t lo = 0, hi = a->n_cache;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->cache[mid].size < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Returns the device synchronization's status: an asynchronous kernel failure reported
 * there must reach the caller, not vanish here. Blocks are released either way. */
static it_status release_cache_locked(it_allocator *a, it_device dev) {
    if (a->n_cache == 0) return IT_OK;
    /* A cached block may still be read by queued kernels of its last owner. */
    it_status st = dev.backend->runtime->synchronize_device(dev.index);
    for (size_t i = 0; i < a->n_cache; i++) {
        dev.backend->runtime->free(dev.index, a->cache[i].ptr);
        a->stats.reserved -= a->cache[i].size;
        a->stats.backend_frees++;
    }
    a->n_cache = 0;
    return st;
}

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* The largest cached block that may serve a request of `want` bytes (best fit: the smallest
 * block >= want is taken if it is <= this). Requests whose size changes from step to step (a
 * MoE expert's rows are the tokens routed to it) must find a block among those the earlier
 * steps left, or every step calls the backend's malloc: small blocks serve any small request,
 * mid-sized ones up to twice their size. Big blocks keep a tight 25%, so that a large
 * buffer is not tied up by a request half its size. */
static size_t reuse_limit(size_t want) {
    if (want < ((size_t)1 << 20)) return (size_t)2 << 20;
    if (want < ((size_t)64 << 20)) return 2 * want;
    return want + want / 4;
}

static void bump_peaks(it_allocator *a) {
    if (a->stats.used > a->stats.peak_used) a->stats.peak_used = a->stats.used;
    if (a->stats.reserved > a->stats.peak_reserved) a->stats.peak_reserved = a->stats.reserved;
}

it_status it__alloc(it_device dev, size_t nbytes, void **ptr, size_t *block_bytes) {
    it_allocator *a = it__allocator(dev);
    if (!a) return it_last_status();
    char name[64];
    it_device_str(dev, name, sizeof name);
    if (nbytes == 0) nbytes = 1; /* empty tensors still get a unique, valid pointer */
    size_t want = round_size(nbytes);
    if (want < nbytes || nbytes > ((size_t)1 << 62))
        return it_error(IT_ERR_OOM, "%s: cannot allocate %zu bytes (impossible size)", name, nbytes);
    pthread_mutex_lock(&a->lock);
    size_t i = lower_bound(a, want);
    if (i < a->n_cache && a->cache[i].size <= reuse_limit(want)) {
        *ptr = a->cache[i].ptr;
        *block_bytes = a->cache[i].size;
        memmove(&a->cache[i], &a->cache[i + 1], (a->n_cache - i - 1) * sizeof *a->cache);
        a->n_cache--;
        a->stats.used += *block_bytes;
        bump_peaks(a);
        pthread_mutex_unlock(&a->lock);
        return IT_OK;
    }
    const it_runtime *rt = dev.backend->runtime;
    it_status st = IT_OK;
    if (a->limit && a->stats.reserved + want > a->limit) {
        if ((st = release_cache_locked(a, dev))) {
            pthread_mutex_unlock(&a->lock);
            return st;
        }
        if (a->stats.reserved + want > a->limit) st = IT_ERR_OOM;
    }
    void *p = NULL;
    if (!st) {
        st = rt->malloc(dev.index, want, &p);
        if (st) {
            if ((st = release_cache_locked(a, dev))) {
                pthread_mutex_unlock(&a->lock);
                return st;
            }
            st = rt->malloc(dev.index, want, &p);
        }
    }
    if (st) {
        size_t fr = 0, tot = 0;
        rt->mem_info(dev.index, &fr, &tot);
        size_t used = a->stats.used, reserved = a->stats.reserved, limit = a->limit;
        pthread_mutex_unlock(&a->lock);
        if (limit)
            return it_error(IT_ERR_OOM,
                            "out of memory on %s: requested %zu bytes with %.1f MiB in use and %.1f MiB reserved; "
                            "the limit is %zu MiB (--max_memory_mb / IT_MAX_MEMORY_MB); device free %zu MiB of %zu MiB",
                            name, nbytes, mib(used), mib(reserved), limit >> 20, fr >> 20, tot >> 20);
        return it_error(IT_ERR_OOM,
                        "out of memory on %s: requested %zu bytes with %.1f MiB in use and %.1f MiB reserved; "
                        "device free %zu MiB of %zu MiB",
                        name, nbytes, mib(used), mib(reserved), fr >> 20, tot >> 20);
    }
    a->stats.backend_mallocs++;
    a->stats.reserved += want;
    a->stats.used += want;
    bump_peaks(a);
    pthread_mutex_unlock(&a->lock);
    *ptr = p;
    *block_bytes = want;
    return IT_OK;
}

void it__free(it_device dev, void *ptr, size_t block_bytes) {
    if (!ptr) return;
    it_allocator *a = it__allocator(dev);
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stats.used -= block_bytes;
    if (a->n_cache == a->cap_cache) {
        size_t cap = a->cap_cache ? a->cap_cache * 2 : 64;
        cached_block *c = realloc(a->cache, cap * sizeof *c);
        if (!c) { /* cannot cache: give it back */
            dev.backend->runtime->free(dev.index, ptr);
            a->stats.reserved -= block_bytes;
            a->stats.backend_frees++;
            pthread_mutex_unlock(&a->lock);
            return;
        }
        a->cache = c;
        a->cap_cache = cap;
    }
    size_t i = lower_bound(a, block_bytes);
    memmove(&a->cache[i + 1], &a->cache[i], (a->n_cache - i) * sizeof *a->cache);
    a->cache[i].size = block_bytes;
    a->cache[i].ptr = ptr;
    a->n_cache++;
    pthread_mutex_unlock(&a->lock);
}

it_status it_mem_stats_get(it_device dev, it_mem_stats *out) {
    it_allocator *a = it__allocator(dev);
    if (!a) return it_last_status();
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
    return IT_OK;
}

void it_mem_stats_reset_peak(it_device dev) {
    it_allocator *a = it__allocator(dev);
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stats.peak_used = a->stats.used;
    a->stats.peak_reserved = a->stats.reserved;
    pthread_mutex_unlock(&a->lock);
}

it_status it_mem_empty_cache(it_device dev) {
    it_allocator *a = it__allocator(dev);
    if (!a) return it_last_status();
    pthread_mutex_lock(&a->lock);
    it_status st = release_cache_locked(a, dev);
    pthread_mutex_unlock(&a->lock);
    return st;
}

void it_mem_set_limit(it_device dev, size_t max_bytes) {
    it_allocator *a = it__allocator(dev);
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->limit = max_bytes;
    /* Cached blocks count against the limit: give them back when they alone exceed it. */
    if (max_bytes && a->stats.reserved > max_bytes) (void)release_cache_locked(a, dev);
    pthread_mutex_unlock(&a->lock);
}

void it__allocator_destroy(it_allocator *a, it_device dev) {
    if (!a) return;
    release_cache_locked(a, dev);
    free(a->cache);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
