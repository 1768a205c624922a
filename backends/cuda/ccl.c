/* Collectives over NCCL. The core bootstraps the communicator: rank 0 calls get_unique_id
 * (ncclGetUniqueId), the id travels to every rank over MPI, and each rank calls comm_init
 * (ncclCommInitRank on its device). Every collective is enqueued on the stream it is given
 * and returns at once; NCCL's all_reduce already overlaps with backward that way, so the
 * optional all_reduce_start / request_* slots stay NULL. */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

_Static_assert(NCCL_UNIQUE_ID_BYTES <= IT_CCL_UNIQUE_ID_BYTES, "ncclUniqueId must fit it_ccl_unique_id");

struct it_comm {
    ncclComm_t comm;
    int device;
};

static it_status nccl_check(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return IT_OK;
    return it_error(IT_ERR_BACKEND, "cuda: %s: %s", what, ncclGetErrorString(r));
}

static bool nccl_type(it_dtype dt, ncclDataType_t *t) {
    switch (dt) {
    case IT_DTYPE_U8: *t = ncclUint8; return true;
    case IT_DTYPE_I8: *t = ncclInt8; return true;
    case IT_DTYPE_U32: *t = ncclUint32; return true;
    case IT_DTYPE_I32: *t = ncclInt32; return true;
    case IT_DTYPE_U64: *t = ncclUint64; return true;
    case IT_DTYPE_I64: *t = ncclInt64; return true;
    case IT_DTYPE_FP16: *t = ncclFloat16; return true;
    case IT_DTYPE_BF16: *t = ncclBfloat16; return true;
    case IT_DTYPE_FP32: *t = ncclFloat32; return true;
    case IT_DTYPE_FP64: *t = ncclFloat64; return true;
    default: return false; /* bool, u16, i16: NCCL has no such type */
    }
}

/* ncclAvg came with NCCL 2.10; before it AVG is declined and the core runs SUM and divides. */
static it_status nccl_op(const char *fn, it_reduce_kind op, ncclRedOp_t *out) {
    switch (op) {
    case IT_CCL_SUM: *out = ncclSum; return IT_OK;
    case IT_CCL_MAX: *out = ncclMax; return IT_OK;
    case IT_CCL_AVG:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
        *out = ncclAvg;
        return IT_OK;
#else
        return it_error(IT_ERR_UNSUPPORTED, "cuda %s: this NCCL has no ncclAvg", fn);
#endif
    }
    return it_error(IT_ERR_INVALID_ARG, "cuda %s: reduction %d", fn, (int)op);
}

/* Resolve the stream (on the communicator's device) and the dtype. */
static it_status prepare(const char *fn, it_comm *c, it_dtype dt, it_stream **s, ncclDataType_t *t) {
    if (!nccl_type(dt, t)) return it_error(IT_ERR_UNSUPPORTED, "cuda %s: NCCL has no %s type", fn, it_dtype_name(dt));
    it_status st = cu_stream_resolve(fn, *s, s);
    if (st) return st;
    if ((*s)->device != c->device)
        return it_error(IT_ERR_INVALID_ARG, "cuda %s: communicator of device %d, stream of device %d", fn, c->device,
                        (*s)->device);
    return IT_OK;
}

static it_status cu_get_unique_id(it_ccl_unique_id *id) {
    ncclUniqueId u;
    it_status st = nccl_check(ncclGetUniqueId(&u), "ncclGetUniqueId");
    if (st) return st;
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &u, sizeof u);
    return IT_OK;
}

static it_status cu_comm_init(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **out) {
    it_status st = cu_check(cudaSetDevice(device), "comm_init: cudaSetDevice(%d)", device);
    if (st) return st;
    it_comm *c = calloc(1, sizeof *c);
    if (!c) return it_error(IT_ERR_OOM, "cuda comm_init: out of host memory");
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    c->device = device;
    st = nccl_check(ncclCommInitRank(&c->comm, nranks, u, rank), "ncclCommInitRank");
    if (st) {
        free(c);
        return it_error_context("rank %d of %d on device %d: ", rank, nranks, device);
    }
    *out = c;
    return IT_OK;
}

static it_status cu_comm_destroy(it_comm *c) {
    if (!c) return IT_OK;
    it_status st = nccl_check(ncclCommDestroy(c->comm), "ncclCommDestroy");
    free(c);
    return st;
}

static it_status cu_all_reduce(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt, it_reduce_kind op,
                               it_stream *s) {
    ncclDataType_t t;
    ncclRedOp_t o = ncclSum;
    it_status st = nccl_op("all_reduce", op, &o);
    if (!st) st = prepare("all_reduce", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclAllReduce(send, recv, count, t, o, c->comm, s->stream), "ncclAllReduce");
}

static it_status cu_all_gather(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt,
                               it_stream *s) {
    ncclDataType_t t;
    it_status st = prepare("all_gather", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclAllGather(send, recv, count_per_rank, t, c->comm, s->stream), "ncclAllGather");
}

static it_status cu_reduce_scatter(it_comm *c, const void *send, void *recv, size_t count_per_rank, it_dtype dt,
                                   it_reduce_kind op, it_stream *s) {
    ncclDataType_t t;
    ncclRedOp_t o = ncclSum;
    it_status st = nccl_op("reduce_scatter", op, &o);
    if (!st) st = prepare("reduce_scatter", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclReduceScatter(send, recv, count_per_rank, t, o, c->comm, s->stream), "ncclReduceScatter");
}

static it_status cu_broadcast(it_comm *c, void *buf, size_t count, it_dtype dt, int root, it_stream *s) {
    ncclDataType_t t;
    it_status st = prepare("broadcast", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclBroadcast(buf, buf, count, t, root, c->comm, s->stream), "ncclBroadcast");
}

static it_status cu_send(it_comm *c, const void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    ncclDataType_t t;
    it_status st = prepare("send", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclSend(buf, count, t, peer, c->comm, s->stream), "ncclSend");
}

static it_status cu_recv(it_comm *c, void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    ncclDataType_t t;
    it_status st = prepare("recv", c, dt, &s, &t);
    if (st) return st;
    return nccl_check(ncclRecv(buf, count, t, peer, c->comm, s->stream), "ncclRecv");
}

/* NCCL's group calls: the point-to-point calls between them are launched as one operation,
 * so a stage's send to its neighbour and its receive from it cannot wait for each other. */
static it_status cu_group_start(void) { return nccl_check(ncclGroupStart(), "ncclGroupStart"); }
static it_status cu_group_end(void) { return nccl_check(ncclGroupEnd(), "ncclGroupEnd"); }

const it_ccl cu_ccl = {
    .get_unique_id = cu_get_unique_id,
    .comm_init = cu_comm_init,
    .comm_destroy = cu_comm_destroy,
    .all_reduce = cu_all_reduce,
    .all_gather = cu_all_gather,
    .reduce_scatter = cu_reduce_scatter,
    .broadcast = cu_broadcast,
    .send = cu_send,
    .recv = cu_recv,
    .group_start = cu_group_start,
    .group_end = cu_group_end,
};
