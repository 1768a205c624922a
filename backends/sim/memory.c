/* Device memory of the sim: memory the host cannot touch.
 *
 * Every allocation is its own page-aligned anonymous mapping (plus one guard page after
 * it), kept PROT_NONE at all times except while a stream worker runs a copy or kernel
 * that uses it. So a host read or write of device data dies with SIGSEGV at the faulting
 * instruction, which is what a core bug that dereferences a device pointer would do on a
 * discrete GPU (where the pointer is not even mapped in the process). The worker makes an
 * allocation READ|WRITE for the duration of one item; two streams may use one allocation
 * at once, so the protection is refcounted per allocation (`users`).
 *
 * The allocation table is an array sorted by address (binary search), guarded by
 * mem_lock; it answers "which live allocation of which device holds these bytes?" for
 * the enqueue-time checks and for the workers.
 *
 * Real device: malloc is cudaMalloc / cnrtMalloc, free cudaFree, the stream-ordered pair
 * cudaMallocAsync / cudaFreeAsync, memcpy cudaMemcpy (a DMA from pageable memory through
 * a staging buffer), memcpy_async cudaMemcpyAsync, mem_info cudaMemGetInfo. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim.h"

struct sim_alloc {
    char *base;    /* page aligned; what malloc returned */
    size_t size;   /* bytes requested: the checks allow exactly [base, base + size) */
    size_t mapped; /* size rounded up to pages: charged to the device; + 1 guard page mapped */
    int device;
    int users;    /* items running on it now; > 0 means READ|WRITE */
    bool freeing; /* free_async enqueued: no new work may be enqueued on it */
    bool retired; /* out of the table; the last user unmaps it */
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_alloc **mem_table; /* sorted by base */
static size_t mem_n, mem_cap;
static size_t mem_used[SIM_MAX_DEVICES]; /* mapped bytes of live allocations */
static size_t mem_total;                 /* per device */
static size_t mem_page;

void sim_mem_init(int devices, size_t bytes_per_device) {
    (void)devices;
    mem_total = bytes_per_device;
    long p = sysconf(_SC_PAGESIZE);
    mem_page = p > 0 ? (size_t)p : 4096;
}

/* Index of the first entry whose base is > p. Called with mem_lock held. */
static size_t upper_bound_locked(const void *p) {
    size_t lo = 0, hi = mem_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((const char *)mem_table[mid]->base <= (const char *)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The live allocation whose [base, base + size) contains p, or NULL. mem_lock held. */
static sim_alloc *find_locked(const void *p) {
    size_t i = upper_bound_locked(p);
    if (i == 0) return NULL;
    sim_alloc *a = mem_table[i - 1];
    return (uintptr_t)p - (uintptr_t)a->base < a->size ? a : NULL;
}

/* A live allocation sharing a byte with [p, p + n) (n > 0), or NULL. mem_lock held.
 * Allocations never overlap, so only the last one starting before p + n can. */
static sim_alloc *overlap_locked(const void *p, size_t n) {
    size_t i = upper_bound_locked((const char *)p + (n - 1));
    if (i == 0) return NULL;
    sim_alloc *a = mem_table[i - 1];
    return (uintptr_t)a->base + a->size > (uintptr_t)p ? a : NULL;
}

/* Why [p, p + n) is not usable device memory of `device`, or NULL when it is. With
 * for_new_work, an allocation already handed to free_async does not count. mem_lock held. */
static const char *span_problem_locked(int device, const void *p, size_t n, bool for_new_work, char *buf, size_t size,
                                       sim_alloc **out) {
    sim_alloc *a = find_locked(p);
    *out = a;
    if (!a) return "it is not device memory (host memory, or freed)";
    if (a->device != device) {
        snprintf(buf, size, "it lies in an allocation of sim:%d", a->device);
        return buf;
    }
    size_t room = a->size - (size_t)((const char *)p - a->base);
    if (n > room) {
        snprintf(buf, size, "it runs %zu bytes past the end of the %zu-byte allocation at %p", n - room, a->size,
                 (void *)a->base);
        return buf;
    }
    if (for_new_work && a->freeing) return "its allocation was already released with free_async";
    return NULL;
}

/* Bytes a descriptor can reach: (1 + sum((shape-1)*stride)) elements, 0 when a dim is 0. */
static it_status desc_span(const char *fn, const char *arg, const it_tdesc *d, size_t *bytes) {
    if (d->ndim < 0 || d->ndim > IT_MAX_DIMS || !it_dtype_valid((int)d->dtype))
        return it_error(IT_ERR_INVALID_ARG, "sim: %s: argument '%s': bad descriptor (ndim %d, dtype %d)", fn, arg,
                        d->ndim, (int)d->dtype);
    uint64_t last = 0; /* index of the furthest element */
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 0 || d->strides[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "sim: %s: argument '%s': negative shape or stride at dim %d", fn, arg,
                            i);
        if (d->shape[i] == 0) {
            *bytes = 0;
            return IT_OK;
        }
    }
    for (int i = 0; i < d->ndim; i++) {
        uint64_t step = 0;
        if (__builtin_mul_overflow((uint64_t)(d->shape[i] - 1), (uint64_t)d->strides[i], &step) ||
            __builtin_add_overflow(last, step, &last))
            return it_error(IT_ERR_INVALID_ARG, "sim: %s: argument '%s': extent overflows at dim %d", fn, arg, i);
    }
    uint64_t n = 0;
    if (__builtin_add_overflow(last, 1, &n) || __builtin_mul_overflow(n, (uint64_t)it_dtype_size(d->dtype), &n) ||
        n > SIZE_MAX)
        return it_error(IT_ERR_INVALID_ARG, "sim: %s: argument '%s': byte extent overflows", fn, arg);
    *bytes = (size_t)n;
    return IT_OK;
}

it_status sim_mem_check_desc(int device, const char *fn, const char *arg, const it_tdesc *d) {
    size_t n = 0;
    it_status st = desc_span(fn, arg, d, &n);
    if (st || n == 0) return st;
    char buf[160];
    sim_alloc *a = NULL;
    pthread_mutex_lock(&mem_lock);
    const char *bad = span_problem_locked(device, d->data, n, true, buf, sizeof buf, &a);
    pthread_mutex_unlock(&mem_lock);
    if (bad)
        return it_error(IT_ERR_INVALID_ARG,
                        "sim: %s: argument '%s' (%p, %zu bytes) is not inside a live allocation of sim:%d: %s", fn, arg,
                        d->data, n, device, bad);
    return IT_OK;
}

/* ---------------------------------------------------------------- protection (workers) */

/* The real device needs none of this: its memory is simply not the host's. mprotect fails
 * only when the kernel runs out of memory maps (vm.max_map_count). */
static bool protect_locked(sim_alloc *a, int prot) { return mprotect(a->base, a->mapped, prot) == 0; }

static void unmap(sim_alloc *a) {
    munmap(a->base, a->mapped + mem_page);
    free(a);
}

it_status sim_mem_acquire(int device, const char *what, const char *arg, const it_tdesc *d, sim_alloc **out) {
    size_t n = 0;
    *out = NULL;
    it_status st = desc_span(what, arg, d, &n);
    if (st || n == 0) return st;
    char buf[160];
    sim_alloc *a = NULL;
    pthread_mutex_lock(&mem_lock);
    const char *bad = span_problem_locked(device, d->data, n, false, buf, sizeof buf, &a);
    bool ok = bad || a->users > 0 || protect_locked(a, PROT_READ | PROT_WRITE); /* the first user opens it */
    if (!bad && ok) {
        a->users++;
        *out = a;
    }
    int err = errno;
    size_t mapped = ok ? 0 : a->mapped;
    pthread_mutex_unlock(&mem_lock);
    if (!ok)
        return it_error(IT_ERR_BACKEND, "sim:%d: %s: argument '%s': mprotect of %zu bytes failed: %s", device, what,
                        arg, mapped, strerror(err));
    if (bad) /* what a GPU reports as an illegal address: freed before the work ran */
        return it_error(IT_ERR_BACKEND,
                        "sim:%d: %s: argument '%s' (%p, %zu bytes) is no longer valid when the "
                        "work runs: %s (freed before the stream reached it?)",
                        device, what, arg, d->data, n, bad);
    return IT_OK;
}

void sim_mem_release(sim_alloc *a) {
    if (!a) return;
    pthread_mutex_lock(&mem_lock);
    bool gone = false, closed = true;
    if (--a->users == 0) { /* the last user closes it again */
        gone = a->retired;
        closed = gone || protect_locked(a, PROT_NONE);
    }
    int err = errno;
    void *base = a->base;
    size_t mapped = a->mapped;
    pthread_mutex_unlock(&mem_lock);
    if (!closed) /* the work itself succeeded; only host reads of this block go unnoticed now */
        fprintf(stderr, "sim: warning: cannot re-protect %zu bytes at %p: %s\n", mapped, base, strerror(err));
    if (gone) unmap(a);
}

/* Take `a` out of the table and give its bytes back to the device; unmap it now or, when
 * an item on another stream still uses it (a missing event wait in the caller), when that
 * item ends. mem_lock held; returns true when the caller must unmap. */
static bool retire_locked(sim_alloc *a) {
    size_t i = upper_bound_locked(a->base) - 1;
    memmove(&mem_table[i], &mem_table[i + 1], (mem_n - i - 1) * sizeof *mem_table);
    mem_n--;
    mem_used[a->device] -= a->mapped;
    a->retired = true;
    return a->users == 0;
}

/* ---------------------------------------------------------------- malloc / free */

it_status sim_malloc(int device, size_t nbytes, void **ptr) {
    it_status st = sim_check_device("malloc", device);
    if (st) return st;
    if (nbytes == 0) return it_error(IT_ERR_INVALID_ARG, "sim:%d: malloc of 0 bytes", device);
    size_t mapped = (nbytes + mem_page - 1) / mem_page * mem_page;
    if (mapped < nbytes || mapped > SIZE_MAX - mem_page)
        return it_error(IT_ERR_OOM, "sim:%d: malloc of %zu bytes: impossible size", device, nbytes);
    sim_alloc *a = calloc(1, sizeof *a);
    if (!a) return it_error(IT_ERR_OOM, "sim:%d: malloc: out of host memory for the allocation record", device);
    pthread_mutex_lock(&mem_lock);
    if (mapped > mem_total - mem_used[device]) {
        size_t fr = mem_total - mem_used[device];
        pthread_mutex_unlock(&mem_lock);
        free(a);
        return it_error(IT_ERR_OOM,
                        "sim:%d: out of device memory: malloc of %zu bytes (%zu MiB), %zu of %zu bytes free "
                        "(%zu of %zu MiB; IT_SIM_MEMORY_MB)",
                        device, nbytes, nbytes >> 20, fr, mem_total, fr >> 20, mem_total >> 20);
    }
    if (mem_n == mem_cap) {
        size_t cap = mem_cap ? mem_cap * 2 : 256;
        sim_alloc **t = realloc(mem_table, cap * sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&mem_lock);
            free(a);
            return it_error(IT_ERR_OOM, "sim:%d: malloc: out of host memory for the allocation table", device);
        }
        mem_table = t;
        mem_cap = cap;
    }
    /* Reserve address space only: pages get host memory when a kernel first writes them. */
    void *p = mmap(NULL, mapped + mem_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&mem_lock);
        free(a);
        return it_error(IT_ERR_OOM, "sim:%d: malloc of %zu bytes: mmap failed: %s", device, nbytes, strerror(errno));
    }
    a->base = p;
    a->size = nbytes;
    a->mapped = mapped;
    a->device = device;
    size_t i = upper_bound_locked(p);
    memmove(&mem_table[i + 1], &mem_table[i], (mem_n - i) * sizeof *mem_table);
    mem_table[i] = a;
    mem_n++;
    mem_used[device] += mapped;
    pthread_mutex_unlock(&mem_lock);
    *ptr = p;
    return IT_OK;
}

/* The allocation `ptr` starts, if it is a live one of `device`. mem_lock held. */
static const char *owned_problem_locked(int device, void *ptr, sim_alloc **out) {
    sim_alloc *a = find_locked(ptr);
    *out = a;
    if (!a || a->base != (char *)ptr) return "not the start of a live allocation (double free, or never allocated)";
    if (a->device != device) return "it belongs to another device";
    if (a->freeing) return "already released with free_async";
    return NULL;
}

/* As cudaFree: waits for the device's queued work first (every stream of the device), so
 * nothing still queued can touch the memory once it is unmapped. */
it_status sim_free(int device, void *ptr) {
    it_status st = sim_check_device("free", device);
    if (st || !ptr) return st;
    sim_alloc *a = NULL;
    pthread_mutex_lock(&mem_lock); /* a bad pointer fails at once, without waiting */
    const char *bad = owned_problem_locked(device, ptr, &a);
    pthread_mutex_unlock(&mem_lock);
    if (!bad) st = sim_drain_device(device, false, "free"); /* sticky errors stay for the next synchronize */
    if (st) return st;
    pthread_mutex_lock(&mem_lock); /* again: another thread may have freed it meanwhile */
    if (!bad) bad = owned_problem_locked(device, ptr, &a);
    bool now = !bad && retire_locked(a);
    pthread_mutex_unlock(&mem_lock);
    if (bad) return it_error(IT_ERR_INVALID_ARG, "sim:%d: free(%p): %s", device, ptr, bad);
    if (now) unmap(a);
    return IT_OK;
}

/* The sim maps at once: memory usable by all work ordered after the call is a valid
 * stream-ordered allocation. A real backend takes it from a per-device pool
 * (cudaMallocAsync's mempool) that free_async refills in stream order. */
it_status sim_malloc_async(int device, size_t nbytes, it_stream *stream, void **ptr) {
    it_status st = sim_check_device("malloc_async", device);
    if (st) return st;
    st = sim_stream_resolve("malloc_async", stream, &stream);
    if (st) return st;
    if (stream->device != device)
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: malloc_async with a stream of sim:%d", device, stream->device);
    return sim_malloc(device, nbytes, ptr);
}

typedef struct free_item {
    sim_item item;
    sim_alloc *alloc;
} free_item;

static it_status run_free(sim_item *it) {
    sim_alloc *a = ((free_item *)it)->alloc;
    pthread_mutex_lock(&mem_lock);
    bool now = retire_locked(a);
    pthread_mutex_unlock(&mem_lock);
    if (now) unmap(a);
    return IT_OK;
}

/* Stream-ordered free: the unmap is an item on `stream`, so work enqueued on it earlier
 * still sees the memory; the bytes count as used until the stream reaches the item. */
it_status sim_free_async(int device, void *ptr, it_stream *stream) {
    it_status st = sim_check_device("free_async", device);
    if (st || !ptr) return st;
    st = sim_stream_resolve("free_async", stream, &stream);
    if (st) return st;
    if (stream->device != device)
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: free_async with a stream of sim:%d", device, stream->device);
    free_item *f = calloc(1, sizeof *f);
    if (!f) return it_error(IT_ERR_OOM, "sim:%d: free_async: out of host memory", device);
    sim_alloc *a = NULL;
    pthread_mutex_lock(&mem_lock);
    const char *bad = owned_problem_locked(device, ptr, &a);
    if (!bad) a->freeing = true;
    pthread_mutex_unlock(&mem_lock);
    if (bad) {
        free(f);
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: free_async(%p): %s", device, ptr, bad);
    }
    f->alloc = a;
    f->item.run = run_free;
    snprintf(f->item.what, sizeof f->item.what, "free_async(%p)", ptr);
    sim_enqueue(stream, &f->item);
    return IT_OK;
}

it_status sim_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    it_status st = sim_check_device("mem_info", device);
    if (st) return st;
    pthread_mutex_lock(&mem_lock);
    *free_bytes = mem_total - mem_used[device];
    *total_bytes = mem_total;
    pthread_mutex_unlock(&mem_lock);
    return IT_OK;
}

/* ---------------------------------------------------------------- copies */

static const char *kind_name(it_memcpy_kind kind) {
    switch (kind) {
    case IT_MEMCPY_H2H: return "H2H";
    case IT_MEMCPY_H2D: return "H2D";
    case IT_MEMCPY_D2H: return "D2H";
    case IT_MEMCPY_D2D: return "D2D";
    }
    return "invalid";
}

typedef struct copy_item {
    sim_item item;
    int device;
    void *dst;
    const void *src;
    size_t n;
    bool dst_dev, src_dev;
} copy_item;

/* A flat byte span as a 1-D u8 descriptor, to share the span checks with kernels. */
static it_tdesc bytes_desc(const void *p, size_t n) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = (void *)p;
    d.dtype = IT_DTYPE_U8;
    d.ndim = 1;
    d.shape[0] = (int64_t)n;
    d.strides[0] = 1;
    return d;
}

/* The DMA engine's work. Host memory is the caller's: the sim reads or writes it here,
 * on the worker, which is why memcpy_async needs the host buffer alive until then. */
static it_status run_copy(sim_item *it) {
    copy_item *c = (copy_item *)it;
    sim_alloc *held_dst = NULL, *held_src = NULL;
    it_tdesc dd = bytes_desc(c->dst, c->n), sd = bytes_desc(c->src, c->n);
    it_status st = IT_OK;
    if (c->dst_dev) st = sim_mem_acquire(c->device, c->item.what, "dst", &dd, &held_dst);
    if (!st && c->src_dev) st = sim_mem_acquire(c->device, c->item.what, "src", &sd, &held_src);
    if (!st) memmove(c->dst, c->src, c->n);
    sim_mem_release(held_src);
    sim_mem_release(held_dst);
    return st;
}

/* Check the pointers against the kind and build the item (not yet enqueued). */
static it_status copy_prepare(const char *fn, int device, void *dst, const void *src, size_t nbytes,
                              it_memcpy_kind kind, copy_item **out) {
    *out = NULL;
    if ((int)kind < IT_MEMCPY_H2H || (int)kind > IT_MEMCPY_D2D)
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: %s: invalid kind %d", device, fn, (int)kind);
    if (nbytes == 0) return IT_OK;
    if (!dst || !src) return it_error(IT_ERR_INVALID_ARG, "sim:%d: %s: NULL %s", device, fn, dst ? "src" : "dst");
    bool dst_dev = kind == IT_MEMCPY_H2D || kind == IT_MEMCPY_D2D;
    bool src_dev = kind == IT_MEMCPY_D2H || kind == IT_MEMCPY_D2D;
    char what[64];
    snprintf(what, sizeof what, "%s %s of %zu bytes", fn, kind_name(kind), nbytes);
    const void *ends[2] = {dst, src};
    bool on_dev[2] = {dst_dev, src_dev};
    for (int i = 0; i < 2; i++) {
        it_tdesc d = bytes_desc(ends[i], nbytes);
        const char *arg = i == 0 ? "dst" : "src";
        if (on_dev[i]) {
            it_status st = sim_mem_check_desc(device, what, arg, &d);
            if (st) return st;
        } else {
            pthread_mutex_lock(&mem_lock);
            sim_alloc *a = overlap_locked(ends[i], nbytes);
            int owner = a ? a->device : -1;
            pthread_mutex_unlock(&mem_lock);
            if (a)
                return it_error(IT_ERR_INVALID_ARG,
                                "sim: %s: %s %p is (or overlaps) device memory of sim:%d, but kind %s says host", what,
                                arg, ends[i], owner, kind_name(kind));
        }
    }
    copy_item *c = calloc(1, sizeof *c);
    if (!c) return it_error(IT_ERR_OOM, "sim:%d: %s: out of host memory", device, fn);
    memcpy(c->item.what, what, sizeof what);
    c->item.run = run_copy;
    c->device = device;
    c->dst = dst;
    c->src = src;
    c->n = nbytes;
    c->dst_dev = dst_dev;
    c->src_dev = src_dev;
    *out = c;
    return IT_OK;
}

/* Synchronous copy: ordered on the device's default stream (after everything queued on
 * it, so a D2H sees the results of earlier kernels) and waited for. Like cudaMemcpy it
 * also returns a sticky error left by earlier work on that stream. Other streams are not
 * waited for (as a non-blocking CUDA stream): order them with events. */
it_status sim_memcpy(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind) {
    it_status st = sim_check_device("memcpy", device);
    if (st) return st;
    copy_item *c = NULL;
    st = copy_prepare("memcpy", device, dst, src, nbytes, kind, &c);
    if (st || !c) return st;
    it_stream *s = NULL;
    st = sim_default_stream(device, &s);
    if (st) {
        free(c);
        return st;
    }
    return sim_stream_wait(s, sim_enqueue(s, &c->item), "memcpy");
}

/* Asynchronous copy: returns once the copy is queued; it runs when the stream reaches it.
 * The host buffer must stay valid (and, for H2D, unchanged) until then: synchronize the
 * stream or an event recorded after the copy before reusing it. (CUDA gives truly async
 * copies only from pinned memory; the sim is async for any host memory, the stricter
 * case for the caller.) */
it_status sim_memcpy_async(int device, void *dst, const void *src, size_t nbytes, it_memcpy_kind kind,
                           it_stream *stream) {
    it_status st = sim_check_device("memcpy_async", device);
    if (st) return st;
    st = sim_stream_resolve("memcpy_async", stream, &stream);
    if (st) return st;
    if (stream->device != device)
        return it_error(IT_ERR_INVALID_ARG, "sim:%d: memcpy_async with a stream of sim:%d", device, stream->device);
    copy_item *c = NULL;
    st = copy_prepare("memcpy_async", device, dst, src, nbytes, kind, &c);
    if (st || !c) return st;
    sim_enqueue(stream, &c->item);
    return IT_OK;
}
