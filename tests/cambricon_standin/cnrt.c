/* TEST DOUBLE. libcnrt.so of the CPU stand-in of Cambricon's SDK: the CNRT runtime subset in
 * standin_api.h, behaving as CNRT 6.14.1's cnrt.h documents, on the host.
 *
 * Devices are numbered 0 .. IT_CAMBRICON_STANDIN_DEVICES - 1 (default 2), each with
 * IT_CAMBRICON_STANDIN_MEM_MB of memory (default 16384). A queue is a worker thread running
 * its items in order. Device memory is mapped PROT_NONE, so the host faults on it as it would
 * on a real MLU; a queue item reaches it through standin_open (standin_internal.h), which
 * opens the whole allocation for the item's duration. Notifiers record CLOCK_MONOTONIC when
 * their queue reaches them.
 *
 * Where cnrt.h leaves behaviour open, the choice is said where it is made. Not modelled: queue
 * priorities (accepted and clamped, without effect), the implicit synchronization of a legacy
 * default queue with other queues (cnrtQueueLegacy and cnrtQueuePerThread both name the
 * current device's default queue, as NULL does), and fork(): a child process must not use
 * queues its parent used before the fork (their worker threads are not in the child). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "standin_internal.h"

STANDIN_EXPORT STANDIN_MARKER_ATTR const char it_cambricon_test_double[] =
    "CPU test double of CNRT (infinitrain-c tests), not Cambricon's library";

#define MAX_DEVICES 16
/* cnrtDeviceGetQueuePriorityRange: lower numbers are greater priorities (cnrt.h). */
#define PRIORITY_LEAST 0
#define PRIORITY_GREATEST (-4)

/* ---------------------------------------------------------------- configuration */

static struct {
    pthread_once_t once;
    int devices;
    size_t mem_total;
    int arch;
    size_t page;
} cfg = {.once = PTHREAD_ONCE_INIT};

/* An integer from the environment; `def` when unset or not a number in [lo, hi]. */
static long env_long(const char *name, long def, long lo, long hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < lo || v > hi ? def : v;
}

static void cfg_read(void) {
    cfg.devices = (int)env_long("IT_CAMBRICON_STANDIN_DEVICES", 2, 0, MAX_DEVICES);
    cfg.mem_total = (size_t)env_long("IT_CAMBRICON_STANDIN_MEM_MB", 16384, 1, 1L << 30) << 20;
    cfg.arch = env_long("IT_CAMBRICON_STANDIN_ARCH", 592, 0, 999) == 372 ? 372 : 592;
    cfg.page = (size_t)sysconf(_SC_PAGESIZE);
}

static void init(void) { pthread_once(&cfg.once, cfg_read); }

STANDIN_EXPORT int standin_arch(void) {
    init();
    return cfg.arch;
}

/* ---------------------------------------------------------------- errors */

static STANDIN_TLS cnrtRet_t tls_last_error = cnrtSuccess;
static STANDIN_TLS int tls_device;

/* Every API function returns through here: a failure becomes the thread's last error
 * (cnrtGetLastError), whatever its code, NotReady and Busy included. */
static cnrtRet_t note(cnrtRet_t r) {
    if (r != cnrtSuccess) tls_last_error = r;
    return r;
}

#define TEXT(s) s " (CNRT CPU test double)"
static const struct {
    cnrtRet_t code;
    const char *name, *text;
} errors[] = {
    {cnrtSuccess, "cnrtSuccess", TEXT("success")},
    {cnrtErrorNotReady, "cnrtErrorNotReady", TEXT("the work asked about has not finished yet")},
    {cnrtErrorInit, "cnrtErrorInit", TEXT("the runtime could not be initialized")},
    {cnrtErrorNoDevice, "cnrtErrorNoDevice", TEXT("there is no MLU device")},
    {cnrtErrorDeviceInvalid, "cnrtErrorDeviceInvalid", TEXT("the device ordinal is out of range")},
    {cnrtErrorArgsInvalid, "cnrtErrorArgsInvalid", TEXT("an argument is invalid or out of range")},
    {cnrtErrorSys, "cnrtErrorSys", TEXT("a system call failed")},
    {cnrtErrorSysNoMem, "cnrtErrorSysNoMem", TEXT("out of host memory")},
    {cnrtErrorInvalidResourceHandle, "cnrtErrorInvalidResourceHandle", TEXT("the handle names no live resource")},
    {cnrtErrorIllegalState, "cnrtErrorIllegalState", TEXT("the resource is in no state to do this")},
    {cnrtErrorNotSupport, "cnrtErrorNotSupport", TEXT("not supported")},
    {cnrtErrorOpsNotPermitted, "cnrtErrorOpsNotPermitted", TEXT("the operation is not permitted")},
    {cnrtErrorQueue, "cnrtErrorQueue", TEXT("an earlier task on the queue failed")},
    {cnrtErrorNoMem, "cnrtErrorNoMem", TEXT("out of MLU device memory")},
    {cnrtErrorNotFound, "cnrtErrorNotFound", TEXT("the resource was not found")},
    {cnrtErrorDevice, "cnrtErrorDevice", TEXT("the resource belongs to another device")},
    {cnrtErrorMemcpyDirectionInvalid, "cnrtErrorMemcpyDirectionInvalid",
     TEXT("the copy direction is not a cnrtMemTransDir_t")},
    {cnrtErrorBusy, "cnrtErrorBusy", TEXT("the work asked about is still running")},
    {cnrtErrorCndrvFuncCall, "cnrtErrorCndrvFuncCall", TEXT("the driver refused the call")},
};
#undef TEXT

static int error_index(cnrtRet_t code) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == code) return (int)i;
    return -1;
}

STANDIN_EXPORT const char *cnrtGetErrorName(cnrtRet_t error) {
    int i = error_index(error);
    return i < 0 ? "cnrtErrorUnknown" : errors[i].name;
}

STANDIN_EXPORT const char *cnrtGetErrorStr(cnrtRet_t error) {
    int i = error_index(error);
    return i < 0 ? "unknown CNRT error code (CNRT CPU test double)" : errors[i].text;
}

STANDIN_EXPORT cnrtRet_t cnrtGetLastError(void) {
    cnrtRet_t r = tls_last_error;
    tls_last_error = cnrtSuccess;
    return r;
}

STANDIN_EXPORT cnrtRet_t cnrtPeekAtLastError(void) { return tls_last_error; }

STANDIN_EXPORT cnrtRet_t cnrtGetLibVersion(int *major, int *minor, int *patch) {
    if (!major || !minor || !patch) return note(cnrtErrorArgsInvalid);
    *major = 6, *minor = 14, *patch = 1;
    return cnrtSuccess;
}

/* ---------------------------------------------------------------- devices */

/* An ordinal out of range is cnrtErrorDeviceInvalid, the code cnrt.h describes as exactly
 * that (the functions' own lists name only ArgsInvalid and NoDevice). */
static cnrtRet_t check_device(int device) {
    init();
    if (cfg.devices == 0) return cnrtErrorNoDevice;
    return device >= 0 && device < cfg.devices ? cnrtSuccess : cnrtErrorDeviceInvalid;
}

STANDIN_EXPORT cnrtRet_t cnrtGetDeviceCount(unsigned int *pCount) {
    if (!pCount) return note(cnrtErrorArgsInvalid);
    init();
    *pCount = (unsigned)cfg.devices;
    return cnrtSuccess;
}

STANDIN_EXPORT cnrtRet_t cnrtSetDevice(int ordinal) {
    cnrtRet_t r = check_device(ordinal);
    if (r == cnrtSuccess) tls_device = ordinal;
    return note(r);
}

STANDIN_EXPORT cnrtRet_t cnrtGetDevice(int *pOrdinal) {
    if (!pOrdinal) return note(cnrtErrorArgsInvalid);
    cnrtRet_t r = check_device(tls_device);
    if (r == cnrtSuccess) *pOrdinal = tls_device;
    return note(r);
}

/* An attribute the stand-in does not model is cnrtErrorNotSupport: it exists on the real part. */
STANDIN_EXPORT cnrtRet_t cnrtDeviceGetAttribute(int *pValue, cnrtDeviceAttr_t attr, int device) {
    if (!pValue) return note(cnrtErrorArgsInvalid);
    cnrtRet_t r = check_device(device);
    if (r != cnrtSuccess) return note(r);
    bool mlu590 = cfg.arch == 592;
    switch (attr) {
    case cnrtAttrComputeCapabilityMajor: *pValue = mlu590 ? 5 : 3; break;
    case cnrtAttrComputeCapabilityMinor: *pValue = mlu590 ? 9 : 7; break;
    case cnrtAttrClusterCount: *pValue = mlu590 ? 12 : 8; break;
    case cnrtAttrMcorePerCluster: *pValue = 4; break;
    default: return note(cnrtErrorNotSupport);
    }
    return cnrtSuccess;
}

STANDIN_EXPORT cnrtRet_t cnrtDeviceGetQueuePriorityRange(int *pMinPriority, int *pMaxPriority) {
    if (!pMinPriority || !pMaxPriority) return note(cnrtErrorArgsInvalid);
    *pMinPriority = PRIORITY_LEAST, *pMaxPriority = PRIORITY_GREATEST;
    return cnrtSuccess;
}

/* ---------------------------------------------------------------- handle sets */

struct ptr_set {
    void **v;
    size_t n, cap;
};

static bool set_add(struct ptr_set *s, void *p) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void **v = realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = p;
    return true;
}

static bool set_has(const struct ptr_set *s, const void *p) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == p) return true;
    return false;
}

static bool set_remove(struct ptr_set *s, const void *p) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i] == p) {
            s->v[i] = s->v[--s->n];
            return true;
        }
    }
    return false;
}

/* ---------------------------------------------------------------- device memory */

struct alloc {
    char *base;
    size_t bytes, mapped; /* asked for; mapped (whole pages) */
    int device;
    int opened; /* items that have it open (PROT_READ | PROT_WRITE while > 0) */
};

/* Live device allocations sorted by base, their bytes per device, and cnrtHostMalloc's. */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mem_cv = PTHREAD_COND_INITIALIZER; /* an allocation was closed */
static struct alloc **allocs;
static size_t nallocs, cap_allocs;
static size_t used[MAX_DEVICES];
static struct ptr_set host_allocs;

/* Number of allocations whose base is <= p (mem_mu held). */
static size_t count_at_or_below(const void *p) {
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)allocs[mid]->base <= (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The allocation holding [p, p + n) (n 0: p inside or at its end), or NULL (mem_mu held). */
static struct alloc *containing(const void *p, size_t n) {
    size_t k = count_at_or_below(p);
    if (k == 0) return NULL;
    struct alloc *a = allocs[k - 1];
    size_t off = (size_t)((uintptr_t)p - (uintptr_t)a->base);
    return off <= a->bytes && n <= a->bytes - off ? a : NULL;
}

/* Whether [p, p + n) touches any device mapping (mem_mu held). Allocations do not overlap, so
 * only the last one starting at or below the range's last byte can reach into it. */
static bool touches_device(const void *p, size_t n) {
    uintptr_t last = (uintptr_t)p + (n ? n - 1 : 0);
    if (last < (uintptr_t)p) return true;
    size_t k = count_at_or_below((const void *)last);
    return k > 0 && (uintptr_t)allocs[k - 1]->base + allocs[k - 1]->mapped > (uintptr_t)p;
}

static bool table_insert(struct alloc *a) {
    if (nallocs == cap_allocs) {
        size_t cap = cap_allocs ? 2 * cap_allocs : 64;
        struct alloc **v = realloc(allocs, cap * sizeof *v);
        if (!v) return false;
        allocs = v, cap_allocs = cap;
    }
    size_t k = count_at_or_below(a->base);
    memmove(allocs + k + 1, allocs + k, (nallocs - k) * sizeof *allocs);
    allocs[k] = a;
    nallocs++;
    return true;
}

static void table_remove(struct alloc *a) {
    size_t k = count_at_or_below(a->base) - 1;
    memmove(allocs + k, allocs + k + 1, (nallocs - k - 1) * sizeof *allocs);
    nallocs--;
}

/* Reserve `mapped` bytes of `device`'s memory; false when it does not have them. */
static bool reserve(int device, size_t mapped) {
    pthread_mutex_lock(&mem_mu);
    bool ok = mapped <= cfg.mem_total - used[device];
    if (ok) used[device] += mapped;
    pthread_mutex_unlock(&mem_mu);
    return ok;
}

/* Free bytes count whole pages, as the mapping takes them. */
static cnrtRet_t device_alloc(int device, size_t bytes, void **out) {
    init();
    if (bytes > SIZE_MAX - cfg.page) return cnrtErrorNoMem;
    size_t mapped = (bytes + cfg.page - 1) / cfg.page * cfg.page;
    if (!reserve(device, mapped)) return cnrtErrorNoMem;
    struct alloc *a = malloc(sizeof *a);
    void *p = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pthread_mutex_lock(&mem_mu);
    bool ok = a && p != MAP_FAILED;
    if (ok) {
        *a = (struct alloc){.base = p, .bytes = bytes, .mapped = mapped, .device = device};
        ok = table_insert(a);
    }
    if (!ok) used[device] -= mapped;
    pthread_mutex_unlock(&mem_mu);
    if (ok) {
        *out = p;
        return cnrtSuccess;
    }
    if (p != MAP_FAILED) munmap(p, mapped);
    free(a);
    return a ? cnrtErrorNoMem : cnrtErrorSysNoMem;
}

/* Unmap the allocation based at `p` once no item has it open; false if there is none. */
static bool device_release(void *p) {
    pthread_mutex_lock(&mem_mu);
    struct alloc *a = containing(p, 0);
    if (!a || a->base != p) {
        pthread_mutex_unlock(&mem_mu);
        return false;
    }
    while (a->opened) pthread_cond_wait(&mem_cv, &mem_mu);
    table_remove(a);
    used[a->device] -= a->mapped;
    pthread_mutex_unlock(&mem_mu);
    munmap(a->base, a->mapped);
    free(a);
    return true;
}

/* The allocation's device if `p` is the base of a live one, else -1. */
static int device_of_base(const void *p) {
    pthread_mutex_lock(&mem_mu);
    struct alloc *a = containing(p, 0);
    int device = a && a->base == p ? a->device : -1;
    pthread_mutex_unlock(&mem_mu);
    return device;
}

STANDIN_EXPORT bool standin_is_device(const void *p, size_t bytes) {
    pthread_mutex_lock(&mem_mu);
    bool r = containing(p, bytes) != NULL;
    pthread_mutex_unlock(&mem_mu);
    return r;
}

/* What a copy's pointer range is: host memory touches no device mapping; a device range lies
 * inside one allocation; anything else (straddling, past an allocation's end) is bad. */
enum mem_kind { MEM_HOST, MEM_DEVICE, MEM_BAD };

static enum mem_kind classify(const void *p, size_t n) {
    pthread_mutex_lock(&mem_mu);
    enum mem_kind k = containing(p, n) ? MEM_DEVICE : touches_device(p, n) ? MEM_BAD : MEM_HOST;
    pthread_mutex_unlock(&mem_mu);
    return k;
}

/* ---------------------------------------------------------------- opening device memory */

/* The allocations the running item has opened (only set on a worker, inside an item). */
struct opened {
    struct alloc **v;
    size_t n, cap;
};
static STANDIN_TLS struct opened *tls_opened;

static bool opened_has(const struct opened *o, const struct alloc *a) {
    for (size_t i = 0; i < o->n; i++)
        if (o->v[i] == a) return true;
    return false;
}

static bool opened_add(struct opened *o, struct alloc *a) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 8;
        struct alloc **v = realloc(o->v, cap * sizeof *v);
        if (!v) return false;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = a;
    return true;
}

STANDIN_EXPORT bool standin_open(const void *p, size_t bytes) {
    struct opened *o = tls_opened;
    if (!o) {
        fprintf(stderr, "CNRT test double: standin_open(%p, %zu) outside a queue item\n", p, bytes);
        return false;
    }
    pthread_mutex_lock(&mem_mu);
    struct alloc *a = containing(p, bytes);
    bool fresh = a && !opened_has(o, a);
    bool ok = a && (!fresh || opened_add(o, a));
    if (ok && fresh && a->opened++ == 0) mprotect(a->base, a->mapped, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&mem_mu);
    if (!ok)
        fprintf(stderr, "CNRT test double: a queue item reached [%p, +%zu), which is %s\n", p, bytes,
                a ? "device memory it could not open (out of host memory)" : "not inside one device allocation");
    return ok;
}

/* After an item: close what it opened; an allocation no item has open is PROT_NONE again. */
static void close_opened(struct opened *o) {
    if (!o->n) return;
    pthread_mutex_lock(&mem_mu);
    for (size_t i = 0; i < o->n; i++)
        if (--o->v[i]->opened == 0) mprotect(o->v[i]->base, o->v[i]->mapped, PROT_NONE);
    o->n = 0;
    pthread_cond_broadcast(&mem_cv);
    pthread_mutex_unlock(&mem_mu);
}

/* ---------------------------------------------------------------- queues */

struct item {
    standin_work_fn run;
    standin_release_fn release;
    void *arg;
    struct item *next;
};

/* A queue outlives its handle: cnrtQueueDestroy returns at once (cnrt.h) and marks it; the
 * worker runs what was placed before, leaves the registry (cnrtSyncDevice waits for it until
 * then) and frees the queue, unless a caller is still inside an API call on it (`users`): the
 * last of them frees it. */
struct cnrtQueue {
    int device, priority;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* an item arrived, or the handle was destroyed */
    pthread_cond_t idle; /* an item finished */
    struct item *head, *tail;
    uint64_t placed, done;
    int users;
    bool failed, destroyed, exited;
};

/* Queues whose worker runs: the live handles, the default queue of each device among them,
 * and destroyed queues still finishing their work. */
static pthread_mutex_t queues_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ptr_set queues;
static struct cnrtQueue *default_queue[MAX_DEVICES];

static void queue_free(struct cnrtQueue *q) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->wake);
    pthread_cond_destroy(&q->idle);
    free(q);
}

static bool run_item(struct item *it, struct opened *opened) {
    tls_opened = opened;
    bool ok = it->run(it->arg);
    close_opened(opened);
    tls_opened = NULL;
    if (it->release) it->release(it->arg);
    free(it);
    return ok;
}

static void *worker(void *arg) {
    struct cnrtQueue *q = arg;
    struct opened opened = {0};
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->destroyed) pthread_cond_wait(&q->wake, &q->mu);
        struct item *it = q->head;
        if (!it) break;
        q->head = it->next;
        if (!q->head) q->tail = NULL;
        pthread_mutex_unlock(&q->mu);
        bool ok = run_item(it, &opened);
        pthread_mutex_lock(&q->mu);
        q->failed |= !ok;
        q->done++;
        pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->mu);
    free(opened.v);
    pthread_mutex_lock(&queues_mu);
    set_remove(&queues, q);
    pthread_mutex_lock(&q->mu);
    q->exited = true;
    bool last = q->users == 0;
    pthread_mutex_unlock(&q->mu);
    pthread_mutex_unlock(&queues_mu);
    if (last) queue_free(q);
    return NULL;
}

/* A new queue with its worker, registered (queues_mu held). */
static cnrtRet_t queue_new(int device, int priority, struct cnrtQueue **out) {
    struct cnrtQueue *q = calloc(1, sizeof *q);
    if (!q) return cnrtErrorSysNoMem;
    q->device = device, q->priority = priority;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->wake, NULL);
    pthread_cond_init(&q->idle, NULL);
    if (!set_add(&queues, q)) {
        queue_free(q);
        return cnrtErrorSysNoMem;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, worker, q);
    pthread_attr_destroy(&attr);
    if (e) {
        set_remove(&queues, q);
        queue_free(q);
        return cnrtErrorSys;
    }
    *out = q;
    return cnrtSuccess;
}

static bool is_default_handle(cnrtQueue_t h) { return !h || h == cnrtQueuePerThread || h == cnrtQueueLegacy; }

static void hold(struct cnrtQueue *q) {
    pthread_mutex_lock(&q->mu);
    q->users++;
    pthread_mutex_unlock(&q->mu);
}

/* A registered queue not yet destroyed (queues_mu held). */
static bool handle_live(cnrtQueue_t h) {
    if (!set_has(&queues, h)) return false;
    pthread_mutex_lock(&h->mu);
    bool live = !h->destroyed;
    pthread_mutex_unlock(&h->mu);
    return live;
}

/* The default queue of `device`, made on first use (queues_mu held). */
static cnrtRet_t default_queue_of(int device, struct cnrtQueue **out) {
    cnrtRet_t r = check_device(device);
    if (r == cnrtSuccess && !default_queue[device]) r = queue_new(device, PRIORITY_LEAST, &default_queue[device]);
    *out = r == cnrtSuccess ? default_queue[device] : NULL;
    return r;
}

/* The queue a handle names, held for the caller (queue_release) so that it is not freed
 * under it: NULL and the implicit handles name the current device's default queue, made on
 * first use. An unknown pointer is never dereferenced. */
static cnrtRet_t queue_acquire(cnrtQueue_t h, struct cnrtQueue **out) {
    cnrtRet_t r = cnrtSuccess;
    struct cnrtQueue *q = NULL;
    pthread_mutex_lock(&queues_mu);
    if (is_default_handle(h))
        r = default_queue_of(tls_device, &q);
    else if (handle_live(h))
        q = h;
    else
        r = cnrtErrorInvalidResourceHandle;
    if (r == cnrtSuccess) hold(q);
    pthread_mutex_unlock(&queues_mu);
    *out = q;
    return r;
}

static void queue_release(struct cnrtQueue *q) {
    pthread_mutex_lock(&q->mu);
    bool last = --q->users == 0 && q->exited;
    pthread_mutex_unlock(&q->mu);
    if (last) queue_free(q);
}

/* Append an item; a queue destroyed since it was acquired takes no more work. */
static cnrtRet_t queue_push(struct cnrtQueue *q, standin_work_fn run, void *arg, standin_release_fn release) {
    struct item *it = malloc(sizeof *it);
    if (!it) return cnrtErrorSysNoMem;
    *it = (struct item){run, release, arg, NULL};
    pthread_mutex_lock(&q->mu);
    bool live = !q->destroyed;
    if (live) {
        *(q->tail ? &q->tail->next : &q->head) = it;
        q->tail = it;
        q->placed++;
        pthread_cond_signal(&q->wake);
    }
    pthread_mutex_unlock(&q->mu);
    if (!live) free(it);
    return live ? cnrtSuccess : cnrtErrorInvalidResourceHandle;
}

/* Wait until every item placed before the call has finished; true if the queue's sticky
 * failure is set (left set). */
static bool queue_wait(struct cnrtQueue *q) {
    pthread_mutex_lock(&q->mu);
    uint64_t target = q->placed;
    while (q->done < target) pthread_cond_wait(&q->idle, &q->mu);
    bool failed = q->failed;
    pthread_mutex_unlock(&q->mu);
    return failed;
}

STANDIN_EXPORT cnrtRet_t standin_enqueue(cnrtQueue_t queue, standin_work_fn run, void *arg,
                                         standin_release_fn release) {
    struct cnrtQueue *q;
    cnrtRet_t r = run ? queue_acquire(queue, &q) : cnrtErrorArgsInvalid;
    if (r != cnrtSuccess) return note(r);
    r = queue_push(q, run, arg, release);
    queue_release(q);
    return note(r);
}

STANDIN_EXPORT int standin_queue_device(cnrtQueue_t queue) {
    struct cnrtQueue *q;
    if (queue_acquire(queue, &q) != cnrtSuccess) return -1;
    int device = q->device;
    queue_release(q);
    return device;
}

/* Out-of-range priorities are clamped (cnrt.h); flags are reserved and ignored. */
STANDIN_EXPORT cnrtRet_t cnrtQueueCreateWithPriority(cnrtQueue_t *pQueue, unsigned int flags, int priority) {
    (void)flags;
    if (!pQueue) return note(cnrtErrorArgsInvalid);
    cnrtRet_t r = check_device(tls_device);
    if (r != cnrtSuccess) return note(r);
    priority = priority > PRIORITY_LEAST ? PRIORITY_LEAST : priority < PRIORITY_GREATEST ? PRIORITY_GREATEST : priority;
    struct cnrtQueue *q = NULL;
    pthread_mutex_lock(&queues_mu);
    r = queue_new(tls_device, priority, &q);
    pthread_mutex_unlock(&queues_mu);
    if (r == cnrtSuccess) *pQueue = q;
    return note(r);
}

STANDIN_EXPORT cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue) {
    return cnrtQueueCreateWithPriority(pQueue, 0, PRIORITY_LEAST);
}

/* Returns at once; queued work still runs (cnrt.h). A default queue cannot be destroyed. */
STANDIN_EXPORT cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue) {
    if (is_default_handle(queue)) return note(cnrtErrorArgsInvalid);
    pthread_mutex_lock(&queues_mu);
    bool live = handle_live(queue);
    if (live) {
        pthread_mutex_lock(&queue->mu);
        queue->destroyed = true;
        pthread_cond_signal(&queue->wake);
        pthread_mutex_unlock(&queue->mu);
    }
    pthread_mutex_unlock(&queues_mu);
    return live ? cnrtSuccess : note(cnrtErrorInvalidResourceHandle);
}

/* Reports a failed item once (cnrt.h: "may also return cnrtErrorQueue from previous and
 * asynchronous operations"), then the queue is usable again. */
STANDIN_EXPORT cnrtRet_t cnrtQueueSync(cnrtQueue_t queue) {
    struct cnrtQueue *q;
    cnrtRet_t r = queue_acquire(queue, &q);
    if (r != cnrtSuccess) return note(r);
    queue_wait(q);
    pthread_mutex_lock(&q->mu);
    if (q->failed) r = cnrtErrorQueue;
    q->failed = false;
    pthread_mutex_unlock(&q->mu);
    queue_release(q);
    return note(r);
}

/* cnrt.h documents cnrtErrorBusy (not NotReady) for a queue still running. */
STANDIN_EXPORT cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue) {
    struct cnrtQueue *q;
    cnrtRet_t r = queue_acquire(queue, &q);
    if (r != cnrtSuccess) return note(r);
    pthread_mutex_lock(&q->mu);
    if (q->done != q->placed) r = cnrtErrorBusy;
    pthread_mutex_unlock(&q->mu);
    queue_release(q);
    return note(r);
}

/* Wait for every queue of `device`, destroyed ones still at work included. cnrtErrorQueue
 * when one has a failed item; the failure stays for that queue's cnrtQueueSync to report. */
static cnrtRet_t sync_device(int device) {
    pthread_mutex_lock(&queues_mu);
    struct cnrtQueue **held = malloc((queues.n + 1) * sizeof *held);
    size_t n = 0;
    for (size_t i = 0; held && i < queues.n; i++) {
        struct cnrtQueue *q = queues.v[i];
        if (q->device != device) continue;
        hold(q);
        held[n++] = q;
    }
    pthread_mutex_unlock(&queues_mu);
    if (!held) return cnrtErrorSysNoMem;
    bool failed = false;
    for (size_t i = 0; i < n; i++) {
        failed |= queue_wait(held[i]);
        queue_release(held[i]);
    }
    free(held);
    return failed ? cnrtErrorQueue : cnrtSuccess;
}

/* cnrt.h lists no cnrtErrorQueue for it; a failed item is reported all the same (and left for
 * cnrtQueueSync), so that a fault cannot pass unseen through a device-wide sync. */
STANDIN_EXPORT cnrtRet_t cnrtSyncDevice(void) {
    cnrtRet_t r = check_device(tls_device);
    return note(r == cnrtSuccess ? sync_device(tls_device) : r);
}

/* ---------------------------------------------------------------- notifiers */

/* A placement is a generation: `placed` counts cnrtPlaceNotifier calls, `reached` is the
 * latest generation a queue has run, `stamp` its time. A notifier outlives its handle while
 * queue items refer to it (cnrt.h: resources go once it completed). */
struct cnrtNotifier {
    uint64_t placed, reached;
    struct timespec stamp;
    int refs; /* the handle, and each pending item */
};

static pthread_mutex_t notifiers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t notifiers_cv = PTHREAD_COND_INITIALIZER; /* a generation was reached */
static struct ptr_set notifiers;

/* A placement or a wait on a queue, holding a reference. */
struct mark {
    struct cnrtNotifier *n;
    uint64_t gen;
};

static void unref(struct cnrtNotifier *n) {
    if (--n->refs == 0) free(n);
}

static bool mark_reach(void *arg) {
    struct mark *m = arg;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&notifiers_mu);
    if (m->gen > m->n->reached) m->n->reached = m->gen, m->n->stamp = now;
    pthread_cond_broadcast(&notifiers_cv);
    pthread_mutex_unlock(&notifiers_mu);
    return true;
}

static bool mark_wait(void *arg) {
    struct mark *m = arg;
    pthread_mutex_lock(&notifiers_mu);
    while (m->n->reached < m->gen) pthread_cond_wait(&notifiers_cv, &notifiers_mu);
    pthread_mutex_unlock(&notifiers_mu);
    return true;
}

static void mark_release(void *arg) {
    struct mark *m = arg;
    pthread_mutex_lock(&notifiers_mu);
    unref(m->n);
    pthread_mutex_unlock(&notifiers_mu);
    free(m);
}

/* Put a mark item for generation `gen` of `n` on `q` (notifiers_mu held, so the item cannot
 * run before the caller has recorded the generation). */
static cnrtRet_t push_mark(struct cnrtQueue *q, struct cnrtNotifier *n, uint64_t gen, standin_work_fn run) {
    struct mark *m = malloc(sizeof *m);
    if (!m) return cnrtErrorSysNoMem;
    *m = (struct mark){n, gen};
    cnrtRet_t r = queue_push(q, run, m, mark_release);
    if (r == cnrtSuccess)
        n->refs++;
    else
        free(m);
    return r;
}

STANDIN_EXPORT cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *pNotifier) {
    if (!pNotifier) return note(cnrtErrorArgsInvalid);
    struct cnrtNotifier *n = calloc(1, sizeof *n);
    if (!n) return note(cnrtErrorSysNoMem);
    n->refs = 1;
    pthread_mutex_lock(&notifiers_mu);
    bool ok = set_add(&notifiers, n);
    pthread_mutex_unlock(&notifiers_mu);
    if (!ok) free(n);
    if (ok) *pNotifier = n;
    return ok ? cnrtSuccess : note(cnrtErrorSysNoMem);
}

STANDIN_EXPORT cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier) {
    pthread_mutex_lock(&notifiers_mu);
    bool live = set_remove(&notifiers, notifier);
    if (live) unref(notifier);
    pthread_mutex_unlock(&notifiers_mu);
    return live ? cnrtSuccess : note(cnrtErrorInvalidResourceHandle);
}

STANDIN_EXPORT cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue) {
    struct cnrtQueue *q;
    cnrtRet_t r = queue_acquire(queue, &q);
    if (r != cnrtSuccess) return note(r);
    pthread_mutex_lock(&notifiers_mu);
    if (!set_has(&notifiers, notifier))
        r = cnrtErrorInvalidResourceHandle;
    else if ((r = push_mark(q, notifier, notifier->placed + 1, mark_reach)) == cnrtSuccess)
        notifier->placed++;
    pthread_mutex_unlock(&notifiers_mu);
    queue_release(q);
    return note(r);
}

/* The queue's later items wait for the placement current at this call, not for later ones
 * (cnrt.h: "the most recent host call of cnrtPlaceNotifier"); a notifier never placed, or
 * already reached, makes no wait. */
STANDIN_EXPORT cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag) {
    (void)flag;
    struct cnrtQueue *q;
    cnrtRet_t r = queue_acquire(queue, &q);
    if (r != cnrtSuccess) return note(r);
    pthread_mutex_lock(&notifiers_mu);
    if (!set_has(&notifiers, notifier))
        r = cnrtErrorInvalidResourceHandle;
    else if (notifier->reached < notifier->placed)
        r = push_mark(q, notifier, notifier->placed, mark_wait);
    pthread_mutex_unlock(&notifiers_mu);
    queue_release(q);
    return note(r);
}

/* A notifier never placed counts as complete, as cnrtWaitNotifier's note in cnrt.h says of
 * waiting on it; a placed one not yet reached is cnrtErrorBusy (cnrt.h). */
STANDIN_EXPORT cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier) {
    cnrtRet_t r = cnrtSuccess;
    pthread_mutex_lock(&notifiers_mu);
    if (!set_has(&notifiers, notifier))
        r = cnrtErrorInvalidResourceHandle;
    else if (notifier->reached < notifier->placed)
        r = cnrtErrorBusy;
    pthread_mutex_unlock(&notifiers_mu);
    return note(r);
}

STANDIN_EXPORT cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier) {
    pthread_mutex_lock(&notifiers_mu);
    bool live = set_has(&notifiers, notifier);
    if (live) {
        uint64_t gen = notifier->placed;
        while (notifier->reached < gen) pthread_cond_wait(&notifiers_cv, &notifiers_mu);
    }
    pthread_mutex_unlock(&notifiers_mu);
    return live ? cnrtSuccess : note(cnrtErrorInvalidResourceHandle);
}

/* cnrt.h: cnrtErrorCndrvFuncCall when either notifier was never placed; cnrtErrorBusy (in its
 * list) while either is not reached. */
static cnrtRet_t elapsed(struct cnrtNotifier *start, struct cnrtNotifier *end, float *ms) {
    if (!start->placed || !end->placed) return cnrtErrorCndrvFuncCall;
    if (start->reached < start->placed || end->reached < end->placed) return cnrtErrorBusy;
    double s = (double)(end->stamp.tv_sec - start->stamp.tv_sec) * 1e3 +
               (double)(end->stamp.tv_nsec - start->stamp.tv_nsec) / 1e6;
    *ms = (float)s;
    return cnrtSuccess;
}

STANDIN_EXPORT cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float *ms) {
    if (!ms) return note(cnrtErrorArgsInvalid);
    pthread_mutex_lock(&notifiers_mu);
    cnrtRet_t r = set_has(&notifiers, start) && set_has(&notifiers, end) ? elapsed(start, end, ms)
                                                                         : cnrtErrorInvalidResourceHandle;
    pthread_mutex_unlock(&notifiers_mu);
    return note(r);
}

/* ---------------------------------------------------------------- memory */

/* cnrtMalloc of 0 bytes is cnrtErrorArgsInvalid (cnrt.h's list has it; no size is not one). */
STANDIN_EXPORT cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes) {
    if (!pPtr || !bytes) return note(cnrtErrorArgsInvalid);
    cnrtRet_t r = check_device(tls_device);
    return note(r == cnrtSuccess ? device_alloc(tls_device, bytes, pPtr) : r);
}

/* cnrt.h: freeing what cnrtMalloc did not return, or freeing twice, is an error, and the only
 * failure its list has for that is cnrtErrorCndrvFuncCall. The allocation's device finishes its
 * queued work first (its failures stay for cnrtQueueSync), so none touches unmapped memory. */
STANDIN_EXPORT cnrtRet_t cnrtFree(void *ptr) {
    if (!ptr) return cnrtSuccess;
    int device = device_of_base(ptr);
    if (device < 0) return note(cnrtErrorCndrvFuncCall);
    sync_device(device);
    return device_release(ptr) ? cnrtSuccess : note(cnrtErrorCndrvFuncCall);
}

/* Ordinary page-aligned host memory, tracked only so that cnrtFreeHost can refuse others. */
STANDIN_EXPORT cnrtRet_t cnrtHostMalloc(void **pPtr, size_t bytes) {
    if (!pPtr || !bytes) return note(cnrtErrorArgsInvalid);
    init();
    void *p = NULL;
    if (posix_memalign(&p, cfg.page, bytes)) return note(cnrtErrorSysNoMem);
    pthread_mutex_lock(&mem_mu);
    bool ok = set_add(&host_allocs, p);
    pthread_mutex_unlock(&mem_mu);
    if (!ok) free(p);
    if (ok) *pPtr = p;
    return ok ? cnrtSuccess : note(cnrtErrorSysNoMem);
}

STANDIN_EXPORT cnrtRet_t cnrtFreeHost(void *ptr) {
    if (!ptr) return cnrtSuccess;
    pthread_mutex_lock(&mem_mu);
    bool live = set_remove(&host_allocs, ptr);
    pthread_mutex_unlock(&mem_mu);
    if (live) free(ptr);
    return live ? cnrtSuccess : note(cnrtErrorCndrvFuncCall);
}

STANDIN_EXPORT cnrtRet_t cnrtMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return note(cnrtErrorArgsInvalid);
    cnrtRet_t r = check_device(tls_device);
    if (r != cnrtSuccess) return note(r);
    pthread_mutex_lock(&mem_mu);
    *total_bytes = cfg.mem_total;
    *free_bytes = cfg.mem_total - used[tls_device];
    pthread_mutex_unlock(&mem_mu);
    return cnrtSuccess;
}

/* Queue-ordered allocation: the memory exists from the call on (using it early is the
 * caller's error, which cnrt.h leaves undefined); the free is a queue item. */
STANDIN_EXPORT cnrtRet_t cnrtMemAllocAsync(void **pPtr, size_t byteSize, cnrtQueue_t queue) {
    if (!pPtr || !byteSize) return note(cnrtErrorArgsInvalid);
    struct cnrtQueue *q;
    cnrtRet_t r = queue_acquire(queue, &q);
    if (r != cnrtSuccess) return note(r);
    r = device_alloc(q->device, byteSize, pPtr);
    queue_release(q);
    return note(r);
}

static bool free_run(void *arg) {
    if (device_release(arg)) return true;
    fprintf(stderr, "CNRT test double: cnrtMemFreeAsync(%p): no longer a live allocation when its turn came\n", arg);
    return false;
}

STANDIN_EXPORT cnrtRet_t cnrtMemFreeAsync(void *mluAddr, cnrtQueue_t hqueue) {
    if (device_of_base(mluAddr) < 0) return note(cnrtErrorArgsInvalid);
    return standin_enqueue(hqueue, free_run, mluAddr, NULL);
}

/* ---------------------------------------------------------------- copies and memset */

struct copy {
    void *dst;
    const void *src;
    size_t n;
    bool dst_dev, src_dev;
    bool *ok; /* cnrtMemcpy's outcome, or NULL */
};

static bool copy_run(void *arg) {
    struct copy *c = arg;
    bool ok = (!c->dst_dev || standin_open(c->dst, c->n)) && (!c->src_dev || standin_open(c->src, c->n));
    if (ok) memmove(c->dst, c->src, c->n);
    if (c->ok) *c->ok = ok;
    return ok;
}

/* What each direction wants of (dst, src); -1: either. */
static const signed char copy_wants[][2] = {
    [cnrtMemcpyHostToDev] = {MEM_DEVICE, MEM_HOST},    [cnrtMemcpyDevToDev] = {MEM_DEVICE, MEM_DEVICE},
    [cnrtMemcpyDevToHost] = {MEM_HOST, MEM_DEVICE},    [cnrtMemcpyHostToHost] = {MEM_HOST, MEM_HOST},
    [cnrtMemcpyPeerToPeer] = {MEM_DEVICE, MEM_DEVICE}, [cnrtMemcpyNoDirection] = {-1, -1},
};

/* A direction outside cnrtMemTransDir_t is cnrtErrorMemcpyDirectionInvalid; pointers that do
 * not match the direction (cnrt.h: "unpredictable behavior") are cnrtErrorArgsInvalid, and
 * nothing is copied. The asynchronous copies take no HostToHost (not in their list in cnrt.h). */
static cnrtRet_t check_copy(struct copy *c, cnrtMemTransDir_t dir, bool async) {
    if ((unsigned)dir > cnrtMemcpyNoDirection) return cnrtErrorMemcpyDirectionInvalid;
    if (async && dir == cnrtMemcpyHostToHost) return cnrtErrorArgsInvalid;
    if (!c->dst || !c->src) return cnrtErrorArgsInvalid;
    int d = (int)classify(c->dst, c->n), s = (int)classify(c->src, c->n);
    const signed char *want = copy_wants[dir];
    if (d == MEM_BAD || s == MEM_BAD || (want[0] >= 0 && want[0] != d) || (want[1] >= 0 && want[1] != s))
        return cnrtErrorArgsInvalid;
    c->dst_dev = d == MEM_DEVICE, c->src_dev = s == MEM_DEVICE;
    return cnrtSuccess;
}

static cnrtRet_t copy_async(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir) {
    struct copy c = {dst, src, bytes, false, false, NULL};
    cnrtRet_t r = check_copy(&c, dir, true);
    if (r != cnrtSuccess || !bytes) return note(r);
    struct copy *item = malloc(sizeof *item);
    if (!item) return note(cnrtErrorSysNoMem);
    *item = c;
    r = standin_enqueue(queue, copy_run, item, free);
    if (r != cnrtSuccess) free(item);
    return r;
}

STANDIN_EXPORT cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir) {
    return copy_async(dst, src, bytes, queue, dir);
}

STANDIN_EXPORT cnrtRet_t cnrtMemcpyAsync_V2(void *dst, void *src, size_t bytes, cnrtQueue_t queue,
                                            cnrtMemTransDir_t dir) {
    return copy_async(dst, src, bytes, queue, dir);
}

STANDIN_EXPORT cnrtRet_t cnrtMemcpyAsync_V3(void *dst, void *src, size_t bytes, cnrtQueue_t queue,
                                            cnrtMemTransDir_t dir) {
    return copy_async(dst, src, bytes, queue, dir);
}

/* Synchronous: an item on the current device's default queue (after the work already there),
 * waited for. A failure of earlier items stays for cnrtQueueSync. */
STANDIN_EXPORT cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir) {
    bool ok = false;
    struct copy c = {dst, src, bytes, false, false, &ok};
    cnrtRet_t r = check_copy(&c, dir, false);
    if (r != cnrtSuccess || !bytes) return note(r);
    struct cnrtQueue *q;
    if ((r = queue_acquire(NULL, &q)) != cnrtSuccess) return note(r);
    r = queue_push(q, copy_run, &c, NULL);
    if (r == cnrtSuccess) queue_wait(q);
    queue_release(q);
    return note(r == cnrtSuccess && !ok ? cnrtErrorCndrvFuncCall : r);
}

struct fill {
    void *p;
    int value;
    size_t n;
};

static bool fill_run(void *arg) {
    struct fill *f = arg;
    if (!standin_open(f->p, f->n)) return false;
    memset(f->p, (unsigned char)f->value, f->n);
    return true;
}

/* Only device memory can be set (cnrt.h: "the device address to be set"). */
STANDIN_EXPORT cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes, cnrtQueue_t queue) {
    if (!bytes) return cnrtSuccess;
    if (!standin_is_device(ptr, bytes)) return note(cnrtErrorArgsInvalid);
    struct fill *f = malloc(sizeof *f);
    if (!f) return note(cnrtErrorSysNoMem);
    *f = (struct fill){ptr, value, bytes};
    cnrtRet_t r = standin_enqueue(queue, fill_run, f, free);
    if (r != cnrtSuccess) free(f);
    return r;
}
