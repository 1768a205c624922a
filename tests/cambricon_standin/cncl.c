/* TEST DOUBLE. libcncl.so of the CPU stand-in of Cambricon's SDK: the CNCL 1.25.0 subset in
 * standin_api.h between the processes of one machine (mpirun's ranks), or between several
 * communicators of one process.
 *
 * cnclGetCliqueId names a POSIX shared-memory segment; cnclInitComms maps it (whichever rank
 * comes first creates it) and waits for every rank. A segment holds a header (rendezvous,
 * barrier, the collective each rank is at), one exchange slot of SLOT_BYTES per rank and one
 * mailbox ring of MBOX_BYTES per ordered pair of ranks. Every wait is a poll of lock-free
 * atomics with a growing sleep, and gives up, naming the call and the ranks it waited for,
 * after IT_CAMBRICON_STANDIN_TIMEOUT_S seconds (default 300), when an awaited rank's process
 * has exited, or when another rank gave up; the communicator then fails every later call.
 *
 * Collectives and point-to-point calls are queue items (standin_enqueue). A collective moves
 * its data through the slots in chunks, two barriers a chunk, and reduces in rank order
 * 0 .. n-1, so every rank gets the same bits. Floating-point reductions compute each step in
 * float and round the result to the element type (fp16, bf16: to nearest even) after every
 * step; a float holds every fp16 or bf16 sum and product of two exactly enough for that to be
 * the correctly rounded result. Max and min propagate NaN (either operand NaN: the result is
 * NaN). Integer sums and products wrap. Sends and receives are matched in issue order per
 * pair of ranks; a message carries its byte count, which the receive checks. Each direction
 * of a pair is one ring with one writer and one reader: a rank must not send to one peer on
 * one communicator from two queues at once (nor receive). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "standin_internal.h"

STANDIN_EXPORT STANDIN_MARKER_ATTR const char it_cambricon_test_double[] =
    "CPU test double of CNCL (infinitrain-c tests), not Cambricon's library";

#define MAX_RANKS 64 /* a rank set fits a uint64_t */
#define SLOT_BYTES ((size_t)1 << 20)
#define MBOX_BYTES ((size_t)256 << 10) /* a multiple of 8: a message header never wraps */
#define CLIQUE_TAG "/it-cncl-standin."
#define CLIQUE_MAGIC 0x69742d636e636c31ULL

/* Processes share these atomics through the mapping: they must not be locks in disguise. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "lock-free atomics needed");

/* ---------------------------------------------------------------- the shared segment */

enum kind { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST };
static const char *const kind_names[] = {"cnclAllReduce", "cnclAllGather", "cnclReduceScatter", "cnclBroadcast"};

/* The collective a rank is at: every rank must be at the same one. */
struct desc {
    int kind, dtype, op, root;
    uint64_t count;
};

struct clique {
    _Atomic uint64_t magic; /* set last by the creator */
    uint64_t hash;
    int nranks;
    _Atomic int joined;
    _Atomic int aborted;        /* 1 + the rank that gave up first, or 0 */
    _Atomic int pid[MAX_RANKS]; /* 0 until the rank joined */
    _Atomic uint64_t bar_count, bar_gen;
    _Atomic uint64_t entered[MAX_RANKS]; /* barriers each rank has entered */
    struct desc desc[2][MAX_RANKS];      /* by collective number parity */
};

/* A single-producer single-consumer byte ring; MBOX_BYTES of data follow it. */
struct mbox {
    _Atomic uint64_t head, tail;
    char pad[48];
};

static size_t header_bytes(void) { return (sizeof(struct clique) + 4095) / 4096 * 4096; }
static size_t mbox_stride(void) { return sizeof(struct mbox) + MBOX_BYTES; }
static size_t clique_bytes(int n) {
    return header_bytes() + (size_t)n * SLOT_BYTES + (size_t)n * (size_t)n * mbox_stride();
}

struct cnclComm {
    struct clique *shm;
    int rank, nranks, device;
    uint64_t seq;        /* collectives this communicator has run (touched by its items only) */
    atomic_bool broken;  /* a wait gave up: every later item fails (items of two queues may set it) */
    _Atomic int pending; /* items queued and not finished */
};

static char *slot(const struct cnclComm *m, int r) { return (char *)m->shm + header_bytes() + (size_t)r * SLOT_BYTES; }

static struct mbox *mbox(const struct cnclComm *m, int src, int dst) {
    size_t at = header_bytes() + (size_t)m->nranks * SLOT_BYTES + ((size_t)src * m->nranks + dst) * mbox_stride();
    return (struct mbox *)((char *)m->shm + at);
}

/* ---------------------------------------------------------------- waiting */

static int timeout_s;
static pthread_once_t timeout_once = PTHREAD_ONCE_INIT;

static void timeout_read(void) {
    const char *s = getenv("IT_CAMBRICON_STANDIN_TIMEOUT_S");
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    timeout_s = s && *s && !*end && v > 0 && v <= 86400 ? (int)v : 300;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct waiter {
    double start, checked;
    unsigned pauses;
};

static void waiter_start(struct waiter *w) {
    pthread_once(&timeout_once, timeout_read);
    w->start = w->checked = now_s();
    w->pauses = 0;
}

/* Yield at first, then sleep longer: a short wait stays short, a long one costs no CPU. */
static void pause_once(struct waiter *w) {
    unsigned k = w->pauses++;
    if (k < 64) {
        sched_yield();
        return;
    }
    struct timespec t = {0, k < 256 ? 20000 : 1000000};
    nanosleep(&t, NULL);
}

static void format_ranks(char *out, size_t cap, uint64_t ranks) {
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < MAX_RANKS && len < cap; r++)
        if (ranks >> r & 1) len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? ", " : "", r);
}

/* Fail the communicator, and the clique with it so that the other ranks stop waiting. */
static bool give_up(struct cnclComm *m, const char *what, const char *why, uint64_t ranks) {
    char list[MAX_RANKS * 4];
    format_ranks(list, sizeof list, ranks);
    fprintf(stderr, "CNCL test double: %s on rank %d of %d failed: %s%s\n", what, m->rank, m->nranks, why, list);
    m->broken = true;
    int none = 0;
    atomic_compare_exchange_strong(&m->shm->aborted, &none, m->rank + 1);
    return false;
}

/* The ranks among `ranks` whose process has exited. */
static uint64_t exited(const struct cnclComm *m, uint64_t ranks) {
    uint64_t gone = 0;
    for (int r = 0; r < m->nranks; r++) {
        pid_t pid = atomic_load(&m->shm->pid[r]);
        if (ranks >> r & 1 && pid > 0 && pid != getpid() && kill(pid, 0) < 0 && errno == ESRCH) gone |= 1ULL << r;
    }
    return gone;
}

/* Between two polls of a condition that `awaited` ranks must make true: false (said on
 * stderr) once it is hopeless, else pause. */
static bool keep_waiting(struct cnclComm *m, struct waiter *w, const char *what, uint64_t awaited) {
    int by = atomic_load(&m->shm->aborted);
    char why[96];
    if (by && by != m->rank + 1) {
        snprintf(why, sizeof why, "rank %d gave up first", by - 1);
        return give_up(m, what, why, 0);
    }
    double t = now_s();
    if (t - w->start > timeout_s) {
        snprintf(why, sizeof why, "no progress for %d s (IT_CAMBRICON_STANDIN_TIMEOUT_S); waiting for rank(s) ",
                 timeout_s);
        return give_up(m, what, why, awaited);
    }
    if (t - w->checked >= 1.0) {
        w->checked = t;
        uint64_t gone = exited(m, awaited);
        if (gone) return give_up(m, what, "the process of rank(s) it waits for has exited: ", gone);
    }
    pause_once(w);
    return true;
}

/* The ranks that have entered fewer barriers than `mine`. */
static uint64_t behind(const struct cnclComm *m, uint64_t mine) {
    uint64_t ranks = 0;
    for (int r = 0; r < m->nranks; r++)
        if (atomic_load(&m->shm->entered[r]) < mine) ranks |= 1ULL << r;
    return ranks;
}

/* A generation-counted barrier: the generation is read before arriving, and the last to
 * arrive resets the count before it advances the generation. */
static bool barrier(struct cnclComm *m, const char *what) {
    struct clique *c = m->shm;
    uint64_t gen = atomic_load(&c->bar_gen);
    uint64_t mine = atomic_fetch_add(&c->entered[m->rank], 1) + 1;
    if (atomic_fetch_add(&c->bar_count, 1) == (uint64_t)m->nranks - 1) {
        atomic_store(&c->bar_count, 0);
        atomic_store(&c->bar_gen, gen + 1);
        return true;
    }
    struct waiter w;
    waiter_start(&w);
    while (atomic_load(&c->bar_gen) == gen)
        if (!keep_waiting(m, &w, what, behind(m, mine))) return false;
    return true;
}

/* ---------------------------------------------------------------- element types */

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bf16_load(uint16_t h) { return bits_float((uint32_t)h << 16); }

static uint16_t bf16_store(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); /* NaN stays a quiet NaN */
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

static float fp16_load(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | man << 13);
    if (exp) return bits_float(sign | (exp + 112) << 23 | man << 13);
    return bits_float(sign | float_bits((float)man * 0x1p-24f)); /* subnormal */
}

static uint16_t fp16_store(float f) {
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | (u >> 13 & 0x3ff)); /* NaN */
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                    /* rounds to infinity */
    if (u < 0x38800000u) {
        /* below the least normal half: adding 0.5f rounds to a multiple of 2^-24 (half's
         * subnormal step) to nearest even; the bits above 0.5f's are the result */
        return (uint16_t)(sign | (float_bits(bits_float(u) + 0.5f) - 0x3f000000u));
    }
    return (uint16_t)(sign | (u - 0x38000000u + 0xfffu + (u >> 13 & 1)) >> 13);
}

static float f32_load(float f) { return f; }
static float f32_store(float f) { return f; }

static float float_op(float a, float b, int op) {
    switch (op) {
    case cnclSum: return a + b;
    case cnclProd: return a * b;
    case cnclMax: return isnan(a) ? a : isnan(b) ? b : a > b ? a : b;
    default: return isnan(a) ? a : isnan(b) ? b : a < b ? a : b;
    }
}

/* dst[i] = src[0][i] op src[1][i] op ... in rank order, rounding to T after every step. */
#define FLOAT_REDUCE(name, T, load, store)                                                                             \
    static void name(void *dst, const void *const *src, int n, size_t len, int op) {                                   \
        T *d = dst;                                                                                                    \
        for (size_t i = 0; i < len; i++) {                                                                             \
            T a = ((const T *)src[0])[i];                                                                              \
            for (int r = 1; r < n; r++) a = store(float_op(load(a), load(((const T *)src[r])[i]), op));                \
            d[i] = a;                                                                                                  \
        }                                                                                                              \
    }
FLOAT_REDUCE(reduce_fp16, uint16_t, fp16_load, fp16_store)
FLOAT_REDUCE(reduce_bf16, uint16_t, bf16_load, bf16_store)
FLOAT_REDUCE(reduce_f32, float, f32_load, f32_store)

/* Sums and products wrap (computed modulo 2^64, then narrowed). */
#define INT_REDUCE(name, T)                                                                                            \
    static void name(void *dst, const void *const *src, int n, size_t len, int op) {                                   \
        T *d = dst;                                                                                                    \
        for (size_t i = 0; i < len; i++) {                                                                             \
            T a = ((const T *)src[0])[i];                                                                              \
            for (int r = 1; r < n; r++) {                                                                              \
                T b = ((const T *)src[r])[i];                                                                          \
                a = op == cnclSum    ? (T)((uint64_t)a + (uint64_t)b)                                                  \
                    : op == cnclProd ? (T)((uint64_t)a * (uint64_t)b)                                                  \
                    : op == cnclMax  ? (a > b ? a : b)                                                                 \
                                     : (a < b ? a : b);                                                                 \
            }                                                                                                          \
            d[i] = a;                                                                                                  \
        }                                                                                                              \
    }
INT_REDUCE(reduce_i8, int8_t)
INT_REDUCE(reduce_i16, int16_t)
INT_REDUCE(reduce_i32, int32_t)
INT_REDUCE(reduce_i64, int64_t)
INT_REDUCE(reduce_u8, uint8_t)
INT_REDUCE(reduce_u16, uint16_t)
INT_REDUCE(reduce_u32, uint32_t)
INT_REDUCE(reduce_u64, uint64_t)

typedef void (*reduce_fn)(void *dst, const void *const *src, int n, size_t len, int op);

static const struct dtype {
    int code;
    size_t size;
    reduce_fn reduce;
} dtypes[] = {
    {cnclFloat16, 2, reduce_fp16}, {cnclBfloat16, 2, reduce_bf16}, {cnclFloat32, 4, reduce_f32},
    {cnclInt8, 1, reduce_i8},      {cnclInt16, 2, reduce_i16},     {cnclInt32, 4, reduce_i32},
    {cnclInt64, 8, reduce_i64},    {cnclUint8, 1, reduce_u8},      {cnclUint16, 2, reduce_u16},
    {cnclUint32, 4, reduce_u32},   {cnclUint64, 8, reduce_u64},
};

static const struct dtype *dtype_of(int code) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].code == code) return &dtypes[i];
    return NULL;
}

static bool op_known(int op) { return op == cnclSum || op == cnclProd || op == cnclMax || op == cnclMin; }

/* ---------------------------------------------------------------- communicators */

/* The live communicators of this process: a handle is checked here before it is used. */
static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cnclComm **live;
static size_t nlive, cap_live;

static bool comm_register(struct cnclComm *m) {
    pthread_mutex_lock(&comms_mu);
    if (nlive == cap_live) {
        size_t cap = cap_live ? 2 * cap_live : 8;
        struct cnclComm **v = realloc(live, cap * sizeof *v);
        if (v) live = v, cap_live = cap;
    }
    bool ok = nlive < cap_live;
    if (ok) live[nlive++] = m;
    pthread_mutex_unlock(&comms_mu);
    return ok;
}

static ssize_t comm_index(const struct cnclComm *m) {
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == m) return (ssize_t)i;
    return -1;
}

static bool comm_unregister(struct cnclComm *m) {
    pthread_mutex_lock(&comms_mu);
    ssize_t i = comm_index(m);
    if (i >= 0) live[i] = live[--nlive];
    pthread_mutex_unlock(&comms_mu);
    return i >= 0;
}

static bool comm_live(const struct cnclComm *m) {
    pthread_mutex_lock(&comms_mu);
    bool ok = comm_index(m) >= 0;
    pthread_mutex_unlock(&comms_mu);
    return ok;
}

/* Count an item of a live communicator, so that cnclFreeComm waits for it. */
static bool comm_hold(struct cnclComm *m) {
    pthread_mutex_lock(&comms_mu);
    bool ok = comm_index(m) >= 0;
    if (ok) atomic_fetch_add(&m->pending, 1);
    pthread_mutex_unlock(&comms_mu);
    return ok;
}

static void comm_drop(struct cnclComm *m) { atomic_fetch_sub(&m->pending, 1); }

/* ---------------------------------------------------------------- collectives */

struct coll {
    enum kind kind;
    struct cnclComm *m;
    const void *send; /* NULL on a broadcast's other ranks */
    void *recv;
    size_t count;
    int dtype, op, root; /* op -1 unless a reduction, root -1 unless a broadcast */
};

/* Elements a collective reads from send and writes to recv. */
static void extents(const struct coll *c, size_t *send, size_t *recv) {
    size_t all = c->count * (size_t)c->m->nranks;
    *send = c->kind == REDUCE_SCATTER ? all : c->count;
    *recv = c->kind == ALL_GATHER ? all : c->count;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Every rank publishes the collective it is at; all must be at the same one. */
static bool agree(struct cnclComm *m, const struct coll *c, const char *what) {
    struct desc mine = {(int)c->kind, c->dtype, c->op, c->root, c->count};
    struct desc *at = m->shm->desc[m->seq & 1];
    at[m->rank] = mine;
    if (!barrier(m, what)) return false;
    for (int r = 0; r < m->nranks; r++) {
        if (memcmp(&at[r], &mine, sizeof mine) == 0) continue;
        fprintf(stderr,
                "CNCL test double: %s on rank %d: rank %d is at %s(count %llu, data type %#x, op %d, root %d) "
                "instead (ranks must call the same collectives in the same order)\n",
                what, m->rank, r, kind_names[at[r].kind], (unsigned long long)at[r].count, (unsigned)at[r].dtype,
                at[r].op, at[r].root);
        m->broken = true;
        return false;
    }
    m->seq++;
    return true;
}

static bool all_reduce(const struct coll *c, const char *what) {
    struct cnclComm *m = c->m;
    const struct dtype *t = dtype_of(c->dtype);
    const void *src[MAX_RANKS];
    for (int r = 0; r < m->nranks; r++) src[r] = slot(m, r);
    for (size_t off = 0, per = SLOT_BYTES / t->size; off < c->count; off += per) {
        size_t len = min_size(per, c->count - off);
        memcpy(slot(m, m->rank), (const char *)c->send + off * t->size, len * t->size);
        if (!barrier(m, what)) return false;
        t->reduce((char *)c->recv + off * t->size, src, m->nranks, len, c->op);
        if (!barrier(m, what)) return false;
    }
    return true;
}

/* A chunk's slot holds the rank's piece of every block; rank r reduces the r-th pieces. */
static bool reduce_scatter(const struct coll *c, const char *what) {
    struct cnclComm *m = c->m;
    const struct dtype *t = dtype_of(c->dtype);
    const void *src[MAX_RANKS];
    for (size_t off = 0, per = SLOT_BYTES / t->size / (size_t)m->nranks; off < c->count; off += per) {
        size_t len = min_size(per, c->count - off), piece = len * t->size;
        for (int r = 0; r < m->nranks; r++)
            memcpy(slot(m, m->rank) + r * piece, (const char *)c->send + (r * c->count + off) * t->size, piece);
        if (!barrier(m, what)) return false;
        for (int r = 0; r < m->nranks; r++) src[r] = slot(m, r) + m->rank * piece;
        t->reduce((char *)c->recv + off * t->size, src, m->nranks, len, c->op);
        if (!barrier(m, what)) return false;
    }
    return true;
}

static bool all_gather(const struct coll *c, const char *what) {
    struct cnclComm *m = c->m;
    size_t size = dtype_of(c->dtype)->size;
    for (size_t off = 0, per = SLOT_BYTES / size; off < c->count; off += per) {
        size_t len = min_size(per, c->count - off);
        memcpy(slot(m, m->rank), (const char *)c->send + off * size, len * size);
        if (!barrier(m, what)) return false;
        for (int r = 0; r < m->nranks; r++)
            memcpy((char *)c->recv + (r * c->count + off) * size, slot(m, r), len * size);
        if (!barrier(m, what)) return false;
    }
    return true;
}

static bool broadcast(const struct coll *c, const char *what) {
    struct cnclComm *m = c->m;
    size_t size = dtype_of(c->dtype)->size;
    for (size_t off = 0, per = SLOT_BYTES / size; off < c->count; off += per) {
        size_t len = min_size(per, c->count - off);
        if (m->rank == c->root) memcpy(slot(m, m->rank), (const char *)c->send + off * size, len * size);
        if (!barrier(m, what)) return false;
        memcpy((char *)c->recv + off * size, slot(m, c->root), len * size);
        if (!barrier(m, what)) return false;
    }
    return true;
}

static bool coll_run(void *arg) {
    const struct coll *c = arg;
    struct cnclComm *m = c->m;
    char what[96];
    snprintf(what, sizeof what, "%s (collective #%llu of the communicator)", kind_names[c->kind],
             (unsigned long long)m->seq);
    if (m->broken) return give_up(m, what, "the communicator failed before", 0);
    size_t size = dtype_of(c->dtype)->size, send, recv;
    extents(c, &send, &recv);
    if ((c->send && !standin_open(c->send, send * size)) || !standin_open(c->recv, recv * size))
        return give_up(m, what, "its buffers are not device memory", 0);
    if (!agree(m, c, what)) return false;
    static bool (*const run[])(const struct coll *, const char *) = {all_reduce, all_gather, reduce_scatter, broadcast};
    return run[c->kind](c, what);
}

static void coll_release(void *arg) {
    struct coll *c = arg;
    comm_drop(c->m);
    free(c);
}

static cnclResult_t enqueue_coll(const struct coll *c, cnrtQueue_t queue) {
    struct coll *item = malloc(sizeof *item);
    if (!item) return CNCL_RET_ERR_SYS_MALLOC;
    *item = *c;
    if (!comm_hold(c->m)) {
        free(item);
        return CNCL_RET_ERR_NOT_INIT;
    }
    if (standin_enqueue(queue, coll_run, item, coll_release) == cnrtSuccess) return CNCL_RET_SUCCESS;
    coll_release(item);
    return CNCL_RET_ERR_MLU_RUNTIME;
}

/* ---------------------------------------------------------------- send and receive */

/* One send or receive. Its message in the pair's ring: an 8-byte header (the payload's byte
 * count), the payload, zeros up to a multiple of 8. */
struct p2p {
    struct cnclComm *m;
    void *buf;
    size_t bytes;
    int peer;
    bool send;
    size_t pos; /* bytes of the message moved so far */
};

static size_t message_bytes(const struct p2p *o) { return 8 + (o->bytes + 7) / 8 * 8; }

static size_t ring_room(struct mbox *b) { return MBOX_BYTES - (size_t)(atomic_load(&b->head) - atomic_load(&b->tail)); }

static size_t ring_filled(struct mbox *b) { return (size_t)(atomic_load(&b->head) - atomic_load(&b->tail)); }

/* Write up to n bytes of src (NULL: zeros) into the ring; the bytes written. */
static size_t ring_put(struct mbox *b, const char *src, size_t n) {
    uint64_t head = atomic_load(&b->head);
    n = min_size(n, ring_room(b));
    char *data = (char *)(b + 1);
    for (size_t done = 0; done < n;) {
        size_t at = (size_t)((head + done) % MBOX_BYTES), k = min_size(n - done, MBOX_BYTES - at);
        if (src)
            memcpy(data + at, src + done, k);
        else
            memset(data + at, 0, k);
        done += k;
    }
    atomic_store(&b->head, head + n);
    return n;
}

/* Read up to n bytes from the ring into dst (NULL: drop them); the bytes read. */
static size_t ring_get(struct mbox *b, char *dst, size_t n) {
    uint64_t tail = atomic_load(&b->tail);
    n = min_size(n, ring_filled(b));
    const char *data = (const char *)(b + 1);
    for (size_t done = 0; done < n;) {
        size_t at = (size_t)((tail + done) % MBOX_BYTES), k = min_size(n - done, MBOX_BYTES - at);
        if (dst) memcpy(dst + done, data + at, k);
        done += k;
    }
    atomic_store(&b->tail, tail + n);
    return n;
}

/* The header moves whole; false when a receive's header is not the send's size. */
static bool move_header(struct p2p *o, struct mbox *b, size_t *moved) {
    uint64_t h = o->bytes;
    if (o->send)
        *moved = ring_room(b) >= 8 ? ring_put(b, (const char *)&h, 8) : 0;
    else
        *moved = ring_filled(b) >= 8 ? ring_get(b, (char *)&h, 8) : 0;
    if (h == o->bytes) return true;
    fprintf(stderr,
            "CNCL test double: cnclRecv on rank %d from rank %d: the matching cnclSend has %llu bytes, the "
            "receive %zu\n",
            o->m->rank, o->peer, (unsigned long long)h, o->bytes);
    return false;
}

/* Move what the ring allows of one operation's message: *moved bytes; false on a mismatch. */
static bool p2p_step(struct p2p *o, size_t *moved) {
    struct mbox *b = o->send ? mbox(o->m, o->m->rank, o->peer) : mbox(o->m, o->peer, o->m->rank);
    *moved = 0;
    if (o->pos == 0 && !move_header(o, b, moved)) return false;
    if (o->pos == 0) {
        o->pos = *moved;
        return true;
    }
    size_t at = o->pos - 8, want = message_bytes(o) - o->pos;
    char *p = at < o->bytes ? (char *)o->buf + at : NULL; /* NULL: the padding */
    if (p) want = o->bytes - at;
    *moved = o->send ? ring_put(b, p, want) : ring_get(b, p, want);
    o->pos += *moved;
    return true;
}

/* Operations of one queue from one group (or a single call), as one item. */
struct batch {
    size_t n;
    struct p2p op[];
};

/* An operation waits for the earlier unfinished ones on its channel (communicator, peer,
 * direction): messages of a pair are matched in issue order. */
static bool blocked(const struct batch *b, size_t i) {
    const struct p2p *o = &b->op[i];
    for (size_t j = 0; j < i; j++) {
        const struct p2p *e = &b->op[j];
        if (e->m == o->m && e->peer == o->peer && e->send == o->send && e->pos < message_bytes(e)) return true;
    }
    return false;
}

/* The ranks the unfinished operations of communicator m wait for. */
static uint64_t peers_waited(const struct batch *b, const struct cnclComm *m) {
    uint64_t ranks = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->op[i].m == m && b->op[i].pos < message_bytes(&b->op[i])) ranks |= 1ULL << b->op[i].peer;
    return ranks;
}

static bool batch_open(const struct batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        const struct p2p *o = &b->op[i];
        const char *what = o->send ? "cnclSend" : "cnclRecv";
        if (o->m->broken) return give_up(o->m, what, "the communicator failed before", 0);
        if (!standin_open(o->buf, o->bytes)) return give_up(o->m, what, "its buffer is not device memory", 0);
    }
    return true;
}

/* One pass over the operations; *progress when bytes moved. The first unfinished one (NULL
 * when all are done), or the one whose message was not the size expected (*mismatch). */
static struct p2p *batch_pass(struct batch *b, bool *progress, bool *mismatch) {
    struct p2p *first = NULL;
    for (size_t i = 0; i < b->n; i++) {
        struct p2p *o = &b->op[i];
        size_t moved = 0;
        if (o->pos == message_bytes(o)) continue;
        if (!first) first = o;
        if (!blocked(b, i) && !p2p_step(o, &moved)) {
            *mismatch = true;
            return o;
        }
        *progress |= moved > 0;
    }
    return first;
}

/* Every send is pushed as far as its ring allows and every receive drained as far as data has
 * come, in turns, so two ranks sending to each other in one group cannot wait on each other
 * whatever the message sizes. */
static bool batch_run(void *arg) {
    struct batch *b = arg;
    if (!batch_open(b)) return false;
    struct waiter w;
    waiter_start(&w);
    for (;;) {
        bool progress = false, mismatch = false;
        struct p2p *first = batch_pass(b, &progress, &mismatch);
        const char *what = first && first->send ? "cnclSend" : "cnclRecv";
        if (mismatch) return give_up(first->m, what, "the sizes of a send and its receive differ", 0);
        if (!first) return true;
        if (progress)
            waiter_start(&w);
        else if (!keep_waiting(first->m, &w, what, peers_waited(b, first->m)))
            return false;
    }
}

static void batch_release(void *arg) {
    struct batch *b = arg;
    for (size_t i = 0; i < b->n; i++) comm_drop(b->op[i].m);
    free(b);
}

/* A call as made: a collective, or one send or receive; kept until cnclGroupEnd in a group. */
struct call {
    cnrtQueue_t queue;
    bool is_p2p;
    struct coll coll;
    struct p2p p2p;
};

/* Queue the sends and receives among calls[0 .. n) made on `queue` as one item. */
static cnclResult_t enqueue_batch(const struct call *calls, size_t n, cnrtQueue_t queue) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += calls[i].is_p2p && calls[i].queue == queue;
    if (!k) return CNCL_RET_SUCCESS;
    struct batch *b = malloc(sizeof *b + k * sizeof b->op[0]);
    if (!b) return CNCL_RET_ERR_SYS_MALLOC;
    b->n = 0;
    for (size_t i = 0; i < n; i++)
        if (calls[i].is_p2p && calls[i].queue == queue && comm_hold(calls[i].p2p.m)) b->op[b->n++] = calls[i].p2p;
    cnclResult_t r = b->n == k ? CNCL_RET_SUCCESS : CNCL_RET_ERR_NOT_INIT;
    if (r == CNCL_RET_SUCCESS && standin_enqueue(queue, batch_run, b, batch_release) != cnrtSuccess)
        r = CNCL_RET_ERR_MLU_RUNTIME;
    if (r != CNCL_RET_SUCCESS) batch_release(b);
    return r;
}

/* ---------------------------------------------------------------- groups */

/* The calls between this thread's cnclGroupStart and its outermost cnclGroupEnd. */
static STANDIN_TLS struct {
    int depth;
    struct call *v;
    size_t n, cap;
} group;

static cnclResult_t submit(const struct call *c) {
    if (!group.depth) return c->is_p2p ? enqueue_batch(c, 1, c->queue) : enqueue_coll(&c->coll, c->queue);
    if (group.n == group.cap) {
        size_t cap = group.cap ? 2 * group.cap : 16;
        struct call *v = realloc(group.v, cap * sizeof *v);
        if (!v) return CNCL_RET_ERR_SYS_MALLOC;
        group.v = v, group.cap = cap;
    }
    group.v[group.n++] = *c;
    return CNCL_RET_SUCCESS;
}

static bool first_on_queue(size_t i) {
    for (size_t j = 0; j < i; j++)
        if (group.v[j].queue == group.v[i].queue) return false;
    return true;
}

/* Per queue, in the order of first use: its collectives in call order, then one item for all
 * its sends and receives. The first failure is returned; the rest is still queued. */
static cnclResult_t group_flush(void) {
    cnclResult_t r = CNCL_RET_SUCCESS, e;
    for (size_t i = 0; i < group.n; i++) {
        if (!first_on_queue(i)) continue;
        cnrtQueue_t q = group.v[i].queue;
        for (size_t j = i; j < group.n; j++) {
            if (group.v[j].queue != q || group.v[j].is_p2p) continue;
            e = enqueue_coll(&group.v[j].coll, q);
            if (r == CNCL_RET_SUCCESS) r = e;
        }
        e = enqueue_batch(group.v, group.n, q);
        if (r == CNCL_RET_SUCCESS) r = e;
    }
    free(group.v);
    group.v = NULL, group.n = group.cap = 0;
    return r;
}

STANDIN_EXPORT cnclResult_t cnclGroupStart(void) {
    group.depth++;
    return CNCL_RET_SUCCESS;
}

/* Groups nest: only the outermost cnclGroupEnd queues the work. An unmatched one is
 * CNCL_RET_ERR_ARGUMENTS (cncl.h: the two "must be used together"). */
STANDIN_EXPORT cnclResult_t cnclGroupEnd(void) {
    if (!group.depth) {
        fprintf(stderr, "CNCL test double: cnclGroupEnd without cnclGroupStart\n");
        return CNCL_RET_ERR_ARGUMENTS;
    }
    return --group.depth ? CNCL_RET_SUCCESS : group_flush();
}

/* ---------------------------------------------------------------- calls */

static cnclResult_t refuse(const char *call, cnclResult_t r, const char *why) {
    fprintf(stderr, "CNCL test double: %s: %s\n", call, why);
    return r;
}

/* The communicator, and the queue on its device. */
static cnclResult_t check_comm(const char *call, const struct cnclComm *m, cnrtQueue_t queue) {
    if (!comm_live(m)) return refuse(call, CNCL_RET_ERR_NOT_INIT, "not a live communicator");
    int device = standin_queue_device(queue);
    if (device < 0) return refuse(call, CNCL_RET_ERR_MLU_RUNTIME, "not a live CNRT queue");
    if (device != m->device)
        return refuse(call, CNCL_RET_ERR_ARGUMENTS, "the queue is not on the communicator's device");
    return CNCL_RET_SUCCESS;
}

/* [p, p + count * size) in one device allocation, without overflow. */
static bool device_range(const void *p, size_t count, size_t size) {
    return count <= SIZE_MAX / size && standin_is_device(p, count * size);
}

/* cncl.h lists CNCL_RET_ERR_UNSUPPORTED ("communication with unsupported data type") for the
 * reductions, sends and receives, not for cnclAllGather and cnclBroadcast: an unknown data
 * type is CNCL_RET_ERR_ARGUMENTS there. An unknown reduction op is unsupported. */
static cnclResult_t check_coll(const struct coll *c) {
    const char *call = kind_names[c->kind];
    bool reduction = c->kind == ALL_REDUCE || c->kind == REDUCE_SCATTER;
    const struct dtype *t = dtype_of(c->dtype);
    if (!t) return refuse(call, reduction ? CNCL_RET_ERR_UNSUPPORTED : CNCL_RET_ERR_ARGUMENTS, "unknown data type");
    if (reduction && !op_known(c->op)) return refuse(call, CNCL_RET_ERR_UNSUPPORTED, "unknown reduction op");
    if (c->kind == BROADCAST && (c->root < 0 || c->root >= c->m->nranks))
        return refuse(call, CNCL_RET_ERR_ARGUMENTS, "root out of range");
    size_t send, recv;
    extents(c, &send, &recv);
    if (c->count && (c->send && !device_range(c->send, send, t->size)))
        return refuse(call, CNCL_RET_ERR_ARGUMENTS, "send_buffer is not that much device memory");
    if (c->count && !device_range(c->recv, recv, t->size))
        return refuse(call, CNCL_RET_ERR_ARGUMENTS, "recv_buffer is not that much device memory");
    return CNCL_RET_SUCCESS;
}

/* A count of 0 queues nothing (on every rank alike). */
static cnclResult_t collective(struct coll c, cnrtQueue_t queue) {
    cnclResult_t r = check_comm(kind_names[c.kind], c.m, queue);
    if (r == CNCL_RET_SUCCESS) {
        if (c.kind == BROADCAST && c.m->rank != c.root) c.send = NULL; /* read on the root only */
        if (c.kind == BROADCAST && c.m->rank == c.root && !c.send && c.count)
            return refuse("cnclBroadcast", CNCL_RET_ERR_ARGUMENTS, "no send_buffer on the root");
        r = check_coll(&c);
    }
    if (r != CNCL_RET_SUCCESS || !c.count) return r;
    struct call call = {.queue = queue, .coll = c};
    return submit(&call);
}

STANDIN_EXPORT cnclResult_t cnclAllReduce(const void *send_buffer, void *recv_buffer, size_t count,
                                          cnclDataType_t data_type, cnclReduceOp_t reduce_op, cnclComm_t comm,
                                          cnrtQueue_t queue) {
    return collective((struct coll){ALL_REDUCE, comm, send_buffer, recv_buffer, count, data_type, reduce_op, -1},
                      queue);
}

STANDIN_EXPORT cnclResult_t cnclReduceScatter(const void *send_buffer, void *recv_buffer, size_t count,
                                              cnclDataType_t data_type, cnclReduceOp_t reduce_op, cnclComm_t comm,
                                              cnrtQueue_t queue) {
    return collective((struct coll){REDUCE_SCATTER, comm, send_buffer, recv_buffer, count, data_type, reduce_op, -1},
                      queue);
}

STANDIN_EXPORT cnclResult_t cnclAllGather(const void *send_buffer, void *recv_buffer, size_t count,
                                          cnclDataType_t data_type, cnclComm_t comm, cnrtQueue_t queue) {
    return collective((struct coll){ALL_GATHER, comm, send_buffer, recv_buffer, count, data_type, -1, -1}, queue);
}

STANDIN_EXPORT cnclResult_t cnclBroadcast(const void *send_buffer, void *recv_buffer, size_t count,
                                          cnclDataType_t data_type, int root, cnclComm_t comm, cnrtQueue_t queue) {
    return collective((struct coll){BROADCAST, comm, send_buffer, recv_buffer, count, data_type, -1, root}, queue);
}

static cnclResult_t point_to_point(struct p2p o, size_t count, int dtype, cnrtQueue_t queue) {
    const char *call = o.send ? "cnclSend" : "cnclRecv";
    cnclResult_t r = check_comm(call, o.m, queue);
    if (r != CNCL_RET_SUCCESS) return r;
    const struct dtype *t = dtype_of(dtype);
    if (!t) return refuse(call, CNCL_RET_ERR_UNSUPPORTED, "unknown data type");
    if (o.peer < 0 || o.peer >= o.m->nranks) return refuse(call, CNCL_RET_ERR_ARGUMENTS, "peer rank out of range");
    if (!count) return CNCL_RET_SUCCESS;
    if (!device_range(o.buf, count, t->size))
        return refuse(call, CNCL_RET_ERR_ARGUMENTS, "buffer is not that much device memory");
    o.bytes = count * t->size;
    struct call c = {.queue = queue, .is_p2p = true, .p2p = o};
    return submit(&c);
}

STANDIN_EXPORT cnclResult_t cnclSend(void *buffer, const size_t count, cnclDataType_t data_type, const int dest,
                                     const cnclComm_t comm, cnrtQueue_t queue) {
    return point_to_point((struct p2p){.m = comm, .buf = buffer, .peer = dest, .send = true}, count, data_type, queue);
}

STANDIN_EXPORT cnclResult_t cnclRecv(void *buffer, const size_t count, cnclDataType_t data_type, const int source,
                                     const cnclComm_t comm, cnrtQueue_t queue) {
    return point_to_point((struct p2p){.m = comm, .buf = buffer, .peer = source}, count, data_type, queue);
}

/* ---------------------------------------------------------------- cliques */

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

/* The id names a shared-memory segment unique to this call: pid, time and random bits. */
STANDIN_EXPORT cnclResult_t cnclGetCliqueId(cnclCliqueId_t clique_id) {
    if (!clique_id) return CNCL_RET_ERR_ARGUMENTS;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t noise = 0;
    if (getrandom(&noise, sizeof noise, 0) != (ssize_t)sizeof noise)
        noise = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ULL;
    memset(clique_id, 0, sizeof *clique_id);
    snprintf(clique_id->data, sizeof clique_id->data, CLIQUE_TAG "%d.%llx.%llx", (int)getpid(),
             (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec, (unsigned long long)noise);
    clique_id->hash = fnv1a(clique_id->data, sizeof clique_id->data);
    return CNCL_RET_SUCCESS;
}

static bool id_valid(const struct cnclCliqueId *id) {
    return memchr(id->data, '\0', sizeof id->data) && strncmp(id->data, CLIQUE_TAG, strlen(CLIQUE_TAG)) == 0 &&
           fnv1a(id->data, sizeof id->data) == id->hash;
}

/* Create the segment (the first rank) or open the one another rank created. */
static int open_segment(const char *name, size_t bytes, bool *creator) {
    for (;;) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
            int e = errno;
            close(fd);
            shm_unlink(name);
            errno = e;
            return -1;
        }
        *creator = fd >= 0;
        if (fd >= 0 || errno != EEXIST) return fd;
        if ((fd = shm_open(name, O_RDWR, 0)) >= 0 || errno != ENOENT) return fd;
    }
}

static off_t segment_size(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : -1;
}

static void nap(void) { nanosleep(&(struct timespec){0, 100000}, NULL); }

/* Map the segment once its creator has sized it, and (not the creator) once it is set up. */
static cnclResult_t map_clique(const struct cnclCliqueId *id, struct cnclComm *m) {
    size_t bytes = clique_bytes(m->nranks);
    bool creator;
    int fd = open_segment(id->data, bytes, &creator);
    if (fd < 0) return refuse("cnclInitComms", CNCL_RET_ERR_SYSTEM, strerror(errno));
    double deadline = now_s() + timeout_s;
    off_t size;
    while ((size = segment_size(fd)) == 0 && now_s() < deadline) nap();
    void *p = size == (off_t)bytes ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED)
        return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "the clique was made for another rank count");
    m->shm = p;
    if (creator) {
        m->shm->hash = id->hash;
        m->shm->nranks = m->nranks;
        atomic_store(&m->shm->magic, CLIQUE_MAGIC);
    }
    while (atomic_load(&m->shm->magic) != CLIQUE_MAGIC && now_s() < deadline) nap();
    if (atomic_load(&m->shm->magic) == CLIQUE_MAGIC && m->shm->hash == id->hash) return CNCL_RET_SUCCESS;
    munmap(p, bytes);
    return refuse("cnclInitComms", CNCL_RET_ERR_INIT, "the clique's creator never set it up");
}

static void comm_free(struct cnclComm *m) {
    if (m->shm) munmap(m->shm, clique_bytes(m->nranks));
    free(m);
}

/* Map the clique and take `rank` in it; the last rank to arrive removes the name. */
static cnclResult_t join(const struct cnclCliqueId *id, int nrank, int rank, int device, struct cnclComm **out) {
    struct cnclComm *m = calloc(1, sizeof *m);
    if (!m) return CNCL_RET_ERR_SYS_MALLOC;
    *m = (struct cnclComm){.rank = rank, .nranks = nrank, .device = device};
    cnclResult_t r = map_clique(id, m);
    int none = 0;
    if (r == CNCL_RET_SUCCESS && !atomic_compare_exchange_strong(&m->shm->pid[rank], &none, (int)getpid()))
        r = refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "a rank of the clique was taken twice");
    if (r != CNCL_RET_SUCCESS) {
        comm_free(m);
        return r;
    }
    if (atomic_fetch_add(&m->shm->joined, 1) + 1 == nrank) shm_unlink(id->data);
    *out = m;
    return CNCL_RET_SUCCESS;
}

static uint64_t not_joined(const struct cnclComm *m) {
    uint64_t ranks = 0;
    for (int r = 0; r < m->nranks; r++)
        if (!atomic_load(&m->shm->pid[r])) ranks |= 1ULL << r;
    return ranks;
}

static cnclResult_t wait_joined(struct cnclComm *m) {
    struct waiter w;
    waiter_start(&w);
    while (atomic_load(&m->shm->joined) < m->nranks)
        if (!keep_waiting(m, &w, "cnclInitComms", not_joined(m))) return CNCL_RET_ERR_INIT;
    return CNCL_RET_SUCCESS;
}

static cnclResult_t check_members(int num_comm, const int *dev_list, const int *rank_list, int nrank) {
    unsigned devices = 0;
    cnrtGetDeviceCount(&devices);
    for (int i = 0; i < num_comm; i++) {
        if (rank_list[i] < 0 || rank_list[i] >= nrank)
            return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "a rank is out of [0, nrank)");
        if (dev_list[i] < 0 || (unsigned)dev_list[i] >= devices)
            return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "a device is not a CNRT device");
    }
    return CNCL_RET_SUCCESS;
}

/* Join each communicator, then wait for the whole clique. A NULL clique_id is one made here,
 * for cliques all in this process (cncl.h). */
static cnclResult_t init_comms(struct cnclComm **made, int num_comm, const int *dev_list, const int *rank_list,
                               int nrank, const struct cnclCliqueId *id) {
    int k = 0;
    cnclResult_t r = CNCL_RET_SUCCESS;
    for (; k < num_comm && r == CNCL_RET_SUCCESS; k++) r = join(id, nrank, rank_list[k], dev_list[k], &made[k]);
    if (r != CNCL_RET_SUCCESS) k--; /* the failed join made nothing */
    for (int i = 0; r == CNCL_RET_SUCCESS && i < num_comm; i++) r = wait_joined(made[i]);
    for (int i = 0; r == CNCL_RET_SUCCESS && i < num_comm; i++)
        if (!comm_register(made[i])) r = CNCL_RET_ERR_SYS_MALLOC;
    if (r == CNCL_RET_SUCCESS) return r;
    for (int i = 0; i < k; i++) {
        comm_unregister(made[i]);
        comm_free(made[i]);
    }
    shm_unlink(id->data);
    return r;
}

STANDIN_EXPORT cnclResult_t cnclInitComms(cnclComm_t *comms, int num_comm, const int *dev_list, const int *rank_list,
                                          int nrank, const cnclCliqueId_t clique_id) {
    if (!comms || !dev_list || !rank_list) return CNCL_RET_ERR_NULL_POINTER;
    if (nrank < 1 || nrank > MAX_RANKS || num_comm < 1 || num_comm > nrank)
        return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "nrank or num_comm out of range (at most 64 ranks)");
    if (!clique_id && num_comm != nrank)
        return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "no clique_id, yet not every rank is in this call");
    struct cnclCliqueId own;
    if (!clique_id) cnclGetCliqueId(&own);
    const struct cnclCliqueId *id = clique_id ? clique_id : &own;
    if (!id_valid(id)) return refuse("cnclInitComms", CNCL_RET_ERR_ARGUMENTS, "clique_id not from cnclGetCliqueId");
    pthread_once(&timeout_once, timeout_read);
    cnclResult_t r = check_members(num_comm, dev_list, rank_list, nrank);
    struct cnclComm *made[MAX_RANKS];
    if (r == CNCL_RET_SUCCESS) r = init_comms(made, num_comm, dev_list, rank_list, nrank, id);
    for (int i = 0; r == CNCL_RET_SUCCESS && i < num_comm; i++) comms[i] = made[i];
    return r;
}

/* Waits for the communicator's queued items; the clique needs no other rank for this. */
STANDIN_EXPORT cnclResult_t cnclFreeComm(cnclComm_t comm) {
    if (!comm_unregister(comm)) return refuse("cnclFreeComm", CNCL_RET_ERR_ARGUMENTS, "not a live communicator");
    while (atomic_load(&comm->pending)) nap();
    comm_free(comm);
    return CNCL_RET_SUCCESS;
}

/* ---------------------------------------------------------------- errors, version */

#define TEXT(s) s " (CNCL CPU test double)"
static const struct {
    cnclResult_t code;
    const char *text;
} results[] = {
    {CNCL_RET_SUCCESS, TEXT("CNCL_RET_SUCCESS: success")},
    {CNCL_RET_ERR_INTERNAL, TEXT("CNCL_RET_ERR_INTERNAL: internal error")},
    {CNCL_RET_ERR_UNSUPPORTED, TEXT("CNCL_RET_ERR_UNSUPPORTED: unsupported operation or data type")},
    {CNCL_RET_ERR_NULL_POINTER, TEXT("CNCL_RET_ERR_NULL_POINTER: a pointer argument is NULL")},
    {CNCL_RET_ERR_INIT, TEXT("CNCL_RET_ERR_INIT: the communicators could not be initialized")},
    {CNCL_RET_ERR_NOT_INIT, TEXT("CNCL_RET_ERR_NOT_INIT: the communicator is not initialized")},
    {CNCL_RET_ERR_SYSTEM, TEXT("CNCL_RET_ERR_SYSTEM: a system call failed")},
    {CNCL_RET_ERR_SYS_MALLOC, TEXT("CNCL_RET_ERR_SYS_MALLOC: out of host memory")},
    {CNCL_RET_ERR_MLU_RUNTIME, TEXT("CNCL_RET_ERR_MLU_RUNTIME: a CNRT call failed")},
    {CNCL_RET_ERR_ARGUMENTS, TEXT("CNCL_RET_ERR_ARGUMENTS: invalid arguments")},
};
#undef TEXT

STANDIN_EXPORT const char *cnclGetErrorStr(cnclResult_t ret) {
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++)
        if (results[i].code == ret) return results[i].text;
    return "unknown CNCL result code (CNCL CPU test double)";
}

STANDIN_EXPORT cnclResult_t cnclGetLibVersion(int *major, int *minor, int *patch) {
    if (!major || !minor || !patch) return CNCL_RET_ERR_INTERNAL;
    *major = 1, *minor = 25, *patch = 0;
    return CNCL_RET_SUCCESS;
}
