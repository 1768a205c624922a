/* it_ccl over CNCL (docs/backends/mlu.md C3), resolved from libcncl.so like the rest.
 * Multi-process init as Paddle's XcclCommInitRank: rank 0 cnclGetCliqueId, the id travels out
 * of band (the core's it_ccl_unique_id), every rank cnclInitComms(&comm, 1, {dev}, {rank},
 * nranks, &id). CNCL has no average (see all_reduce). */
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

struct it_comm {
    mlu_cnclComm_t comm;
    int device, rank, nranks;
};

static it_status need_cncl(const char *fn) {
    if (!mlu.have_cncl)
        return it_error(IT_ERR_UNSUPPORTED, "mlu %s: libcncl.so not loaded (collectives unavailable)", fn);
    return IT_OK;
}

static it_status cncl_error(mlu_cnclResult_t r, const char *call, const char *args) {
    char msg[MLU_MSG_BYTES];
    const char *t = mlu.cnclGetErrorStr ? mlu.cnclGetErrorStr(r) : NULL;
    mlu_format_error(msg, sizeof msg, call, args, t ? t : "unknown CNCL error", r);
    return it_error(IT_ERR_BACKEND, "mlu: %s", msg);
}
#define CNCL(call, args)                                                                                               \
    do {                                                                                                               \
        mlu_cnclResult_t r_ = (call);                                                                                  \
        if (r_ != MLU_CNCL_RET_SUCCESS) return cncl_error(r_, #call, args);                                            \
    } while (0)

static int cncl_dtype(it_dtype dt) {
    switch (dt) {
    case IT_DTYPE_I8: return MLU_cnclInt8;
    case IT_DTYPE_U8: return MLU_cnclUint8;
    case IT_DTYPE_I16: return MLU_cnclInt16;
    case IT_DTYPE_I32: return MLU_cnclInt32;
    case IT_DTYPE_I64: return MLU_cnclInt64;
    case IT_DTYPE_FP16: return MLU_cnclFloat16;
    case IT_DTYPE_BF16: return MLU_cnclBfloat16;
    case IT_DTYPE_FP32: return MLU_cnclFloat32;
    default: return -1;
    }
}

static it_status get_unique_id(it_ccl_unique_id *id) {
    it_status st = need_cncl("get_unique_id");
    if (st) return st;
    _Static_assert(sizeof(mlu_cnclCliqueId) <= IT_CCL_UNIQUE_ID_BYTES, "clique id (136 bytes) must fit the core's id");
    mlu_cnclCliqueId cid;
    memset(&cid, 0, sizeof cid);
    CNCL(mlu.cnclGetCliqueId(&cid), "");
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &cid, sizeof cid);
    return IT_OK;
}

static it_status comm_init(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **out) {
    it_status st = need_cncl("comm_init");
    if (!st) st = mlu_use_device("comm_init", device);
    if (st) return st;
    it_comm *c = calloc(1, sizeof *c);
    if (!c) return it_error(IT_ERR_OOM, "mlu comm_init: out of host memory");
    mlu_cnclCliqueId cid;
    memcpy(&cid, id->bytes, sizeof cid);
    int devs[1] = {device}, ranks[1] = {rank};
    mlu_cnclResult_t r = mlu.cnclInitComms(&c->comm, 1, devs, ranks, nranks, &cid);
    if (r != MLU_CNCL_RET_SUCCESS) {
        free(c);
        char args[128];
        snprintf(args, sizeof args, "n=1, dev=%d, rank=%d, nranks=%d", device, rank, nranks);
        return cncl_error(r, "cnclInitComms", args);
    }
    c->device = device, c->rank = rank, c->nranks = nranks;
    *out = c;
    return IT_OK;
}

static it_status comm_destroy(it_comm *c) {
    if (!c) return IT_OK;
    mlu_cnclResult_t r = mlu.cnclFreeComm(c->comm);
    free(c);
    if (r != MLU_CNCL_RET_SUCCESS) return cncl_error(r, "cnclFreeComm", "");
    return IT_OK;
}

static it_status prep(const char *fn, it_comm *c, it_dtype dt, it_stream **s, int *cdt) {
    it_status st = need_cncl(fn);
    if (!st) st = mlu_stream_resolve(fn, *s, s);
    if (st) return st;
    *cdt = cncl_dtype(dt);
    if (*cdt < 0) return it_error(IT_ERR_UNSUPPORTED, "mlu %s: no CNCL type for %s", fn, it_dtype_name(dt));
    (void)c;
    return IT_OK;
}

/* AVG: CNCL has no average, so it is declined (IT_ERR_UNSUPPORTED, nothing written) and the
 * core runs SUM, then divides by the rank count with the binary kernel (backend.h). */
static it_status all_reduce(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_reduce_kind op,
                            it_stream *s) {
    int cdt;
    it_status st = prep("all_reduce", c, dt, &s, &cdt);
    if (st) return st;
    if (op == IT_CCL_AVG)
        return it_error(IT_ERR_UNSUPPORTED, "mlu all_reduce: CNCL has no average; use SUM and scale (see ccl.c)");
    CNCL(mlu.cnclAllReduce(send, recv, n, cdt, op == IT_CCL_MAX ? MLU_cnclMax : MLU_cnclSum, c->comm, s->queue),
         "all_reduce");
    return IT_OK;
}

static it_status all_gather(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_stream *s) {
    int cdt;
    it_status st = prep("all_gather", c, dt, &s, &cdt);
    if (st) return st;
    CNCL(mlu.cnclAllGather(send, recv, n, cdt, c->comm, s->queue), "all_gather");
    return IT_OK;
}

static it_status reduce_scatter(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_reduce_kind op,
                                it_stream *s) {
    int cdt;
    it_status st = prep("reduce_scatter", c, dt, &s, &cdt);
    if (st) return st;
    if (op == IT_CCL_AVG) return it_error(IT_ERR_UNSUPPORTED, "mlu reduce_scatter: CNCL has no average");
    CNCL(mlu.cnclReduceScatter(send, recv, n, cdt, op == IT_CCL_MAX ? MLU_cnclMax : MLU_cnclSum, c->comm, s->queue),
         "reduce_scatter");
    return IT_OK;
}

static it_status broadcast(it_comm *c, void *buf, size_t n, it_dtype dt, int root, it_stream *s) {
    int cdt;
    it_status st = prep("broadcast", c, dt, &s, &cdt);
    if (st) return st;
    CNCL(mlu.cnclBroadcast(buf, buf, n, cdt, root, c->comm, s->queue), "broadcast");
    return IT_OK;
}

static it_status send_(it_comm *c, const void *buf, size_t n, it_dtype dt, int peer, it_stream *s) {
    int cdt;
    it_status st = prep("send", c, dt, &s, &cdt);
    if (st) return st;
    /* cnclSend's buffer is not const in cncl.h; CNCL only reads it */
    CNCL(mlu.cnclSend((void *)(uintptr_t)buf, n, cdt, peer, c->comm, s->queue), "send");
    return IT_OK;
}

static it_status recv_(it_comm *c, void *buf, size_t n, it_dtype dt, int peer, it_stream *s) {
    int cdt;
    it_status st = prep("recv", c, dt, &s, &cdt);
    if (st) return st;
    CNCL(mlu.cnclRecv(buf, n, cdt, peer, c->comm, s->queue), "recv");
    return IT_OK;
}

/* CNCL's group calls (torch_mlu's AutoCnclGroup): the sends and receives between them are
 * one operation, so two stages sending to each other cannot wait for each other. */
static it_status group_start(void) {
    CNCL(mlu.cnclGroupStart(), "group_start");
    return IT_OK;
}

static it_status group_end(void) {
    CNCL(mlu.cnclGroupEnd(), "group_end");
    return IT_OK;
}

const it_ccl mlu_ccl = {
    .get_unique_id = get_unique_id,
    .comm_init = comm_init,
    .comm_destroy = comm_destroy,
    .all_reduce = all_reduce,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .broadcast = broadcast,
    .send = send_,
    .recv = recv_,
    .group_start = group_start,
    .group_end = group_end,
};
