/* The CPU backend's collectives, over MPI (one process per rank).
 *
 * Sums are deterministic: every element's sum is formed in rank order,
 *     s = x[0]; s += x[1]; ...; s += x[N-1]
 * by the rank that owns the element's chunk (a reduce-scatter over MPI_Alltoallv), then the
 * owners' results are all-gathered. So an all-reduce SUM gives bitwise the same result on
 * every rank, for any buffer split (buckets), and the same result as one process adding the
 * N contributions in order. MAX goes through MPI_Allreduce (exact whatever the order).
 *
 * comm_init's communicator is a duplicate of MPI_COMM_WORLD; the unique id carries no address
 * (MPI has already wired the processes) but takes the same path as NCCL's or CNCL's: rank 0
 * makes it, the core broadcasts it, comm_init checks that every rank got the same one. The
 * core's groups over part of the world (DP, TP, PP) get theirs from it_cpu_comm_over
 * (ccl_mpi.h) on their own MPI communicator.
 * CPU kernels have finished when a call is made, so `stream` is ignored. All-reduce also comes
 * non-blocking (MPI_Ialltoallv, then MPI_Iallgatherv: MPI progresses them inside request_test),
 * and the blocking one is that one waited for. */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl_mpi.h"
#include "cpu_kernels.h"

struct it_comm {
    MPI_Comm comm;  /* every collective, and the first phase of a non-blocking all-reduce */
    MPI_Comm gcomm; /* the second phase (all-gather) of non-blocking all-reduces */
    int rank, size;
    /* Non-blocking all-reduces still in their first phase, in the order they started. MPI
     * matches collectives by the order each rank starts them on a communicator, so every
     * rank must start them in one order: first phases start in the caller's order (the same
     * on every rank) on comm, second phases in that same order on gcomm, which is why a
     * first phase is only ever completed at the head of this queue. */
    it_ccl_request *head, *tail;
    /* Receive buffers kept for the next collectives: a fresh 25 MB malloc per bucket is mmap'd,
     * page-faulted and unmapped every step, which cost more than the transfer (2 ranks, GPT-2
     * 124M: 3.4 s/step with 8 kept, 2.55 s with 32). At most one per bucket in flight. */
    struct {
        void *p;
        size_t n;
    } pool[32];
    int npool;
};

/* A scratch buffer of at least n bytes: the smallest pooled one that fits, or a new one. */
static void *scratch_get(it_comm *c, size_t n, size_t *got) {
    int best = -1;
    for (int i = 0; i < c->npool; i++)
        if (c->pool[i].n >= n && (best < 0 || c->pool[i].n < c->pool[best].n)) best = i;
    if (best >= 0) {
        void *p = c->pool[best].p;
        *got = c->pool[best].n;
        c->pool[best] = c->pool[--c->npool];
        return p;
    }
    *got = n ? n : 1;
    return malloc(*got);
}

/* Back to the pool; when it is full the smallest buffer goes. */
static void scratch_put(it_comm *c, void *p, size_t n) {
    if (!p) return;
    if (c->npool == (int)(sizeof c->pool / sizeof c->pool[0])) {
        int small = 0;
        for (int i = 1; i < c->npool; i++)
            if (c->pool[i].n < c->pool[small].n) small = i;
        if (c->pool[small].n >= n) {
            free(p);
            return;
        }
        free(c->pool[small].p);
        c->pool[small] = c->pool[--c->npool];
    }
    c->pool[c->npool].p = p;
    c->pool[c->npool++].n = n;
}

static it_status mpi_status(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return IT_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return it_error(IT_ERR_BACKEND, "cpu ccl: %s failed: %s", what, msg);
}

static it_status mpi_type(it_dtype dt, MPI_Datatype *t) {
    switch (dt) {
    case IT_DTYPE_FP32: *t = MPI_FLOAT; return IT_OK;
    case IT_DTYPE_FP64: *t = MPI_DOUBLE; return IT_OK;
    case IT_DTYPE_I32: *t = MPI_INT32_T; return IT_OK;
    case IT_DTYPE_I64: *t = MPI_INT64_T; return IT_OK;
    case IT_DTYPE_U64: *t = MPI_UINT64_T; return IT_OK;
    case IT_DTYPE_U8: *t = MPI_UINT8_T; return IT_OK;
    default: return it_error(IT_ERR_UNSUPPORTED, "cpu ccl: dtype %s not supported", it_dtype_name(dt));
    }
}

static it_status check_count(size_t count, const char *what) {
    if (count > (size_t)INT_MAX)
        return it_error(IT_ERR_INVALID_ARG, "cpu ccl: %s of %zu elements exceeds MPI's int counts (split it)", what,
                        count);
    return IT_OK;
}

/* The MPI type of dt, and count checked against MPI's int counts. */
static it_status mpi_args(it_dtype dt, size_t count, const char *what, MPI_Datatype *t) {
    it_status st = mpi_type(dt, t);
    return st ? st : check_count(count, what);
}

/* dst[i] = op over r of src[r][i], r = 0..n-1 in order, for i < len. dst may be src[r]. Each
 * element's order is fixed, so the result does not depend on the thread count. */
#define REDUCE_LOOP(T)                                                                                                 \
    do {                                                                                                               \
        const T *const *s = (const T *const *)src;                                                                     \
        T *d = (T *)dst;                                                                                               \
        if (op == IT_CCL_MAX) {                                                                                        \
            _Pragma("omp parallel for schedule(static) if (len >= (1 << 16))") for (size_t i = 0; i < len; i++) {      \
                T acc = s[0][i];                                                                                       \
                for (int r = 1; r < n; r++) acc = s[r][i] > acc || s[r][i] != s[r][i] ? s[r][i] : acc;                 \
                d[i] = acc;                                                                                            \
            }                                                                                                          \
        } else {                                                                                                       \
            _Pragma("omp parallel for schedule(static) if (len >= (1 << 16))") for (size_t i = 0; i < len; i++) {      \
                T acc = s[0][i];                                                                                       \
                for (int r = 1; r < n; r++) acc += s[r][i];                                                            \
                d[i] = op == IT_CCL_AVG ? (T)(acc / (T)n) : acc;                                                       \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static it_status reduce_ordered(const void *const *src, int n, size_t len, void *dst, it_dtype dt, it_reduce_kind op) {
    switch (dt) {
    case IT_DTYPE_FP32: REDUCE_LOOP(float); break;
    case IT_DTYPE_FP64: REDUCE_LOOP(double); break;
    case IT_DTYPE_I32: REDUCE_LOOP(int32_t); break;
    case IT_DTYPE_I64: REDUCE_LOOP(int64_t); break;
    case IT_DTYPE_U64: REDUCE_LOOP(uint64_t); break;
    case IT_DTYPE_U8: REDUCE_LOOP(uint8_t); break;
    default: return it_error(IT_ERR_UNSUPPORTED, "cpu ccl: dtype %s not supported", it_dtype_name(dt));
    }
    return IT_OK;
}

static it_status ccl_comm_destroy(it_comm *c);

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static it_status ccl_get_unique_id(it_ccl_unique_id *id) {
    memset(id, 0, sizeof *id);
    snprintf((char *)id->bytes, sizeof id->bytes, "infinitrain-mpi pid %ld", (long)getpid());
    return IT_OK;
}

it_status it_cpu_comm_over(MPI_Comm parent, it_comm **out) {
    it_comm *c = calloc(1, sizeof *c);
    if (!c) return it_error(IT_ERR_OOM, "cpu ccl: out of host memory");
    it_status st = mpi_status(MPI_Comm_dup(parent, &c->comm), "MPI_Comm_dup");
    if (st) {
        free(c);
        return st;
    }
    if ((st = mpi_status(MPI_Comm_dup(parent, &c->gcomm), "MPI_Comm_dup"))) {
        MPI_Comm_free(&c->comm);
        free(c);
        return st;
    }
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    *out = c;
    return IT_OK;
}

static it_status ccl_comm_init(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **out) {
    (void)device;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        it_status st = mpi_status(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        if (st) return st;
    }
    it_comm *c = NULL;
    it_status st = it_cpu_comm_over(MPI_COMM_WORLD, &c);
    if (st) return st;
    if (c->rank != rank || c->size != nranks) {
        int mr = c->rank, ms = c->size;
        ccl_comm_destroy(c);
        return it_error(IT_ERR_INVALID_ARG, "cpu ccl: comm_init as rank %d of %d, but MPI says rank %d of %d", rank,
                        nranks, mr, ms);
    }
    /* every rank must hold the id rank 0 made */
    uint64_t h[2] = {fnv1a(id->bytes, sizeof id->bytes), 0}, mx[2];
    h[1] = ~h[0];
    st = mpi_status(MPI_Allreduce(h, mx, 2, MPI_UINT64_T, MPI_MAX, c->comm), "MPI_Allreduce");
    if (!st && mx[0] != ~mx[1]) st = it_error(IT_ERR_INVALID_ARG, "cpu ccl: ranks passed different unique ids");
    if (st) {
        ccl_comm_destroy(c);
        return st;
    }
    *out = c;
    return IT_OK;
}

static it_status ccl_comm_destroy(it_comm *c) {
    if (!c) return IT_OK;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        MPI_Comm_free(&c->comm);
        MPI_Comm_free(&c->gcomm);
    }
    for (int i = 0; i < c->npool; i++) free(c->pool[i].p);
    free(c);
    return IT_OK;
}

/* Chunk r of `count` elements: [r*count/N, (r+1)*count/N). */
static size_t chunk_off(size_t count, int n, int r) {
    return count / (size_t)n * (size_t)r + (count % (size_t)n < (size_t)r ? count % (size_t)n : (size_t)r);
}

/* An all-reduce in flight. SUM/AVG: phase 0 the MPI_Ialltoallv that brings every rank's
 * copy of this rank's chunk here, then the rank-ordered reduction, phase 1 the in-place
 * MPI_Iallgatherv of the owners' chunks; MAX: one MPI_Iallreduce (phase 1). */
struct it_ccl_request {
    it_comm *c;
    MPI_Datatype t;
    it_dtype dt;
    it_reduce_kind op;
    void *recv;
    const void *send;
    size_t mine;     /* this rank's chunk, elements */
    int *cnt;        /* all-to-all send counts/displacements, receive counts/displacements, then
                        the all-gather's counts/displacements (n each) */
    void *tmp;       /* the other ranks' copies of this rank's chunk (n - 1 slots, in rank order) */
    size_t tmp_size; /* bytes, for the pool */
    MPI_Request mreq;
    int phase;                   /* 0, 1, 2 = done */
    struct it_ccl_request *next; /* in c's queue while in phase 0 */
};

static void request_free(it_ccl_request *r) {
    if (!r) return;
    free(r->cnt);
    scratch_put(r->c, r->tmp, r->tmp_size);
    free(r);
}

static it_status ccl_all_reduce_start(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt,
                                      it_reduce_kind op, it_stream *s, it_ccl_request **out) {
    (void)s;
    *out = NULL;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count, "all_reduce", &t);
    if (st) return st;
    size_t es = it_dtype_size(dt);
    int n = c->size, me = c->rank;
    it_ccl_request *r = calloc(1, sizeof *r);
    if (!r) return it_error(IT_ERR_OOM, "cpu ccl: all_reduce: out of host memory");
    *r = (it_ccl_request){.c = c, .t = t, .dt = dt, .op = op, .recv = recv, .mreq = MPI_REQUEST_NULL, .phase = 2};
    if (op == IT_CCL_MAX) { /* exact whatever the order */
        r->phase = 1;
        st = mpi_status(
            MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, MPI_MAX, c->comm, &r->mreq),
            "MPI_Iallreduce");
    } else if (n == 1) {
        if (send != recv) memcpy(recv, send, count * es);
    } else {
        r->send = send;
        r->mine = chunk_off(count, n, me + 1) - chunk_off(count, n, me);
        r->cnt = malloc(sizeof(int) * 6 * (size_t)n);
        r->tmp = scratch_get(c, r->mine * (size_t)(n - 1) * es, &r->tmp_size);
        if (!r->cnt || !r->tmp) {
            request_free(r);
            return it_error(IT_ERR_OOM, "cpu ccl: all_reduce: out of host memory");
        }
        int *scnt = r->cnt, *sdis = r->cnt + n, *rcnt = r->cnt + 2 * n, *rdis = r->cnt + 3 * n;
        int *gcnt = r->cnt + 4 * n, *gdis = r->cnt + 5 * n;
        for (int k = 0; k < n; k++) {
            gcnt[k] = (int)(chunk_off(count, n, k + 1) - chunk_off(count, n, k));
            gdis[k] = (int)chunk_off(count, n, k);
            /* every rank sends chunk k to rank k; its own chunk it reads in place */
            scnt[k] = k == me ? 0 : gcnt[k];
            sdis[k] = gdis[k];
            rcnt[k] = k == me ? 0 : (int)r->mine;
            rdis[k] = (int)(r->mine * (size_t)(k < me ? k : k - 1));
        }
        r->phase = 0;
        st =
            mpi_status(MPI_Ialltoallv(send, scnt, sdis, t, r->tmp, rcnt, rdis, t, c->comm, &r->mreq), "MPI_Ialltoallv");
        if (!st) {
            if (c->tail)
                c->tail->next = r;
            else
                c->head = r;
            c->tail = r;
        }
    }
    if (st) {
        request_free(r);
        return st;
    }
    *out = r;
    return IT_OK;
}

/* The queue's head finished its first phase: the owner reduces its chunk in rank order, then
 * the second phase gathers the owners' chunks (in place). */
static it_status head_advance(it_comm *c) {
    it_ccl_request *r = c->head;
    c->head = r->next;
    if (!c->head) c->tail = NULL;
    r->next = NULL;
    int n = c->size, me = c->rank, *gcnt = r->cnt + 4 * n, *gdis = r->cnt + 5 * n;
    size_t es = it_dtype_size(r->dt);
    r->phase = 1;
    const void *srcs[64], **src = n <= 64 ? srcs : malloc(sizeof(void *) * (size_t)n);
    if (!src) return it_error(IT_ERR_OOM, "cpu ccl: all_reduce: out of host memory");
    for (int k = 0; k < n; k++)
        src[k] = k == me ? (const char *)r->send + (size_t)gdis[me] * es
                         : (const char *)r->tmp + r->mine * (size_t)(k < me ? k : k - 1) * es;
    it_status st = reduce_ordered(src, n, r->mine, (char *)r->recv + (size_t)gdis[me] * es, r->dt, r->op);
    if (src != srcs) free((void *)src);
    scratch_put(c, r->tmp, r->tmp_size); /* the next bucket's first phase may use it now */
    r->tmp = NULL;
    if (!st)
        st = mpi_status(MPI_Iallgatherv(MPI_IN_PLACE, 0, r->t, r->recv, gcnt, gdis, r->t, c->gcomm, &r->mreq),
                        "MPI_Iallgatherv");
    if (st) r->phase = 2; /* failed: nothing of it is in flight any more */
    return st;
}

/* Moves first phases along in start order: blocking, until r has left the queue; otherwise
 * as far as they have completed. */
static it_status queue_progress(it_comm *c, it_ccl_request *r, bool block) {
    while (c->head && (block ? r->phase == 0 : true)) {
        int flag = 1;
        it_status st = block ? mpi_status(MPI_Wait(&c->head->mreq, MPI_STATUS_IGNORE), "MPI_Wait (all_reduce)")
                             : mpi_status(MPI_Test(&c->head->mreq, &flag, MPI_STATUS_IGNORE), "MPI_Test (all_reduce)");
        if (st) return st;
        if (!flag) break;
        if ((st = head_advance(c))) return st;
    }
    return IT_OK;
}

/* A request that failed is taken out of the queue before it is freed. */
static void request_drop(it_ccl_request *r) {
    it_comm *c = r->c;
    for (it_ccl_request **p = &c->head, *prev = NULL; *p; prev = *p, p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            if (c->tail == r) c->tail = prev;
            break;
        }
    request_free(r);
}

static it_status ccl_request_test(it_ccl_request *r, bool *done) {
    *done = false;
    it_status st = r->phase == 0 ? queue_progress(r->c, r, false) : IT_OK;
    if (!st && r->phase == 1) {
        int flag = 0;
        st = mpi_status(MPI_Test(&r->mreq, &flag, MPI_STATUS_IGNORE), "MPI_Test (all_reduce)");
        if (!st && flag) r->phase = 2;
    }
    if (st || r->phase == 2) {
        *done = true;
        request_drop(r);
    }
    return st;
}

static it_status ccl_request_wait(it_ccl_request *r) {
    it_status st = r->phase == 0 ? queue_progress(r->c, r, true) : IT_OK;
    if (!st && r->phase == 1) st = mpi_status(MPI_Wait(&r->mreq, MPI_STATUS_IGNORE), "MPI_Wait (all_reduce)");
    request_drop(r);
    return st;
}

/* The blocking all-reduce is the non-blocking one waited for: one code path, one result. */
static it_status ccl_all_reduce(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt, it_reduce_kind op,
                                it_stream *s) {
    it_ccl_request *r = NULL;
    it_status st = ccl_all_reduce_start(c, send, recv, count, dt, op, s, &r);
    return st ? st : ccl_request_wait(r);
}

static it_status ccl_all_gather(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt,
                                it_stream *s) {
    (void)s;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count_per_rank, "all_gather", &t);
    if (st) return st;
    /* in place when send is this rank's slot of recv (NCCL's convention) */
    const char *slot = (const char *)recv + count_per_rank * (size_t)c->rank * it_dtype_size(dt);
    return mpi_status(MPI_Allgather(send == slot ? MPI_IN_PLACE : send, (int)count_per_rank, t, recv,
                                    (int)count_per_rank, t, c->comm),
                      "MPI_Allgather");
}

static it_status ccl_reduce_scatter(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt,
                                    it_reduce_kind op, it_stream *s) {
    (void)s;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count_per_rank, "reduce_scatter", &t);
    if (st) return st;
    size_t es = it_dtype_size(dt), n = (size_t)c->size;
    size_t got = 0;
    void *tmp = scratch_get(c, count_per_rank * n * es, &got);
    const void **src = malloc(sizeof(void *) * n);
    if (!tmp || !src) {
        scratch_put(c, tmp, got);
        free(src);
        return it_error(IT_ERR_OOM, "cpu ccl: reduce_scatter: out of host memory");
    }
    st = mpi_status(MPI_Alltoall(send, (int)count_per_rank, t, tmp, (int)count_per_rank, t, c->comm), "MPI_Alltoall");
    for (size_t k = 0; k < n; k++) src[k] = (const char *)tmp + count_per_rank * k * es;
    if (!st) st = reduce_ordered(src, c->size, count_per_rank, recv, dt, op);
    free(src);
    scratch_put(c, tmp, got);
    return st;
}

static it_status ccl_broadcast(it_comm *c, void *buf, size_t count, it_dtype dt, int root, it_stream *s) {
    (void)s;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count, "broadcast", &t);
    if (st) return st;
    return mpi_status(MPI_Bcast(buf, (int)count, t, root, c->comm), "MPI_Bcast");
}

static it_status ccl_send(it_comm *c, const void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    (void)s;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count, "send", &t);
    if (st) return st;
    return mpi_status(MPI_Send(buf, (int)count, t, peer, 0, c->comm), "MPI_Send");
}

static it_status ccl_recv(it_comm *c, void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    (void)s;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    it_status st = mpi_args(dt, count, "recv", &t);
    if (st) return st;
    return mpi_status(MPI_Recv(buf, (int)count, t, peer, 0, c->comm, MPI_STATUS_IGNORE), "MPI_Recv");
}

const it_ccl it_cpu_ccl = {
    .get_unique_id = ccl_get_unique_id,
    .comm_init = ccl_comm_init,
    .comm_destroy = ccl_comm_destroy,
    .all_reduce = ccl_all_reduce,
    .all_gather = ccl_all_gather,
    .reduce_scatter = ccl_reduce_scatter,
    .broadcast = ccl_broadcast,
    .send = ccl_send,
    .recv = ccl_recv,
    .all_reduce_start = ccl_all_reduce_start,
    .request_test = ccl_request_test,
    .request_wait = ccl_request_wait,
};
