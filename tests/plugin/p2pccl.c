/* p2pccl: the CPU's runtime and kernels under another name, with a ccl whose point to point
 * behaves as NCCL's and CNCL's do where a pipeline could deadlock on it: a send outside a
 * group waits until the peer has posted the matching receive (MPI_Ssend: nothing is
 * buffered), messages between two ranks match by order alone (one tag), and the sends and
 * receives of a group progress together and complete as one (MPI_Issend / MPI_Irecv, then
 * MPI_Waitall). A schedule that relied on buffered sends hangs here; tests/e2e/pp.sh trains
 * on it and checks the losses bitwise against the cpu device's.
 *
 * Collectives are the CPU backend's over the group's communicator (it_cpu_comm_over), so
 * sums are the cpu device's to the bit. Communicators join by unique id alone, as NCCL's do:
 * the id names the world rank that made it (the group's rank 0) and a count; each other
 * member tells the maker its group rank, the maker answers with the members' world ranks, and
 * the members make their communicator with MPI_Comm_create_group (collective over them only).
 *
 * P2PCCL_NO_GROUPS=1 leaves group_start / group_end out of the table (the core then stages
 * activations through host memory). Each communicator prints what it moved when destroyed
 * ("p2pccl: rank R of N: S sends, V receives, G groups"), so a test sees which path ran. */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ccl_mpi.h"
#include "infinitrain/backend.h"

#define JOIN_TAG 20000 /* + the id's count: one tag per communicator being made */

struct it_comm {
    MPI_Comm comm;
    it_comm *cpu; /* the CPU ccl's communicator over comm */
    int rank, nranks;
    long sends, recvs, groups;
};

static const it_ccl *cpu_ccl;
static int ids_made;

static it_status mpi_err(int rc, const char *what) {
    return rc == MPI_SUCCESS ? IT_OK : it_error(IT_ERR_BACKEND, "p2pccl: %s failed (MPI error %d)", what, rc);
}

static it_status pc_get_unique_id(it_ccl_unique_id *id) {
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    memset(id, 0, sizeof *id);
    snprintf((char *)id->bytes, sizeof id->bytes, "p2pccl %d %d", wr, ids_made++);
    return IT_OK;
}

static it_status pc_comm_init(int device, const it_ccl_unique_id *id, int nranks, int rank, it_comm **out) {
    (void)device;
    *out = NULL;
    int maker = -1, count = -1, wr = 0, ws = 0;
    if (sscanf((const char *)id->bytes, "p2pccl %d %d", &maker, &count) != 2 || count < 0 || count > 9000)
        return it_error(IT_ERR_INVALID_ARG, "p2pccl: not an id of ours: '%.32s'", (const char *)id->bytes);
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (nranks < 1 || nranks > ws || rank < 0 || rank >= nranks || (rank == 0) != (wr == maker))
        return it_error(IT_ERR_INVALID_ARG, "p2pccl: rank %d of %d (world rank %d) with an id made by %d", rank, nranks,
                        wr, maker);
    int *world_of = malloc(sizeof *world_of * (size_t)nranks);
    it_comm *c = calloc(1, sizeof *c);
    if (!world_of || !c) {
        free(world_of);
        free(c);
        return it_error(IT_ERR_OOM, "p2pccl: out of memory");
    }
    int tag = JOIN_TAG + count;
    it_status st = IT_OK;
    if (rank == 0) { /* hear every member's group rank, answer with the list */
        world_of[0] = wr;
        for (int k = 1; k < nranks && !st; k++) {
            int r = -1;
            MPI_Status ms;
            st = mpi_err(MPI_Recv(&r, 1, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &ms), "join recv");
            if (!st && (r <= 0 || r >= nranks))
                st = it_error(IT_ERR_INVALID_ARG, "p2pccl: world rank %d joined as rank %d of %d", ms.MPI_SOURCE, r,
                              nranks);
            if (!st) world_of[r] = ms.MPI_SOURCE;
        }
        for (int k = 1; k < nranks && !st; k++)
            st = mpi_err(MPI_Send(world_of, nranks, MPI_INT, world_of[k], tag, MPI_COMM_WORLD), "join send");
    } else {
        st = mpi_err(MPI_Send(&rank, 1, MPI_INT, maker, tag, MPI_COMM_WORLD), "join send");
        if (!st)
            st = mpi_err(MPI_Recv(world_of, nranks, MPI_INT, maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                         "join recv");
    }
    MPI_Group wg, gg;
    if (!st) {
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_incl(wg, nranks, world_of, &gg);
        st = mpi_err(MPI_Comm_create_group(MPI_COMM_WORLD, gg, tag, &c->comm), "MPI_Comm_create_group");
        MPI_Group_free(&gg);
        MPI_Group_free(&wg);
    }
    free(world_of);
    if (!st) st = it_cpu_comm_over(c->comm, &c->cpu);
    if (st) {
        free(c);
        return st;
    }
    c->rank = rank, c->nranks = nranks;
    *out = c;
    return IT_OK;
}

static it_status pc_comm_destroy(it_comm *c) {
    if (c->sends || c->recvs)
        fprintf(stderr, "p2pccl: rank %d of %d: %ld sends, %ld receives, %ld groups\n", c->rank, c->nranks, c->sends,
                c->recvs, c->groups);
    it_status st = cpu_ccl->comm_destroy(c->cpu);
    MPI_Comm_free(&c->comm);
    free(c);
    return st;
}

static it_status pc_all_reduce(it_comm *c, const void *send, void *recv, size_t count, it_dtype dt, it_reduce_kind op,
                               it_stream *s) {
    return cpu_ccl->all_reduce(c->cpu, send, recv, count, dt, op, s);
}
static it_status pc_all_gather(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_stream *s) {
    return cpu_ccl->all_gather(c->cpu, send, recv, n, dt, s);
}
static it_status pc_reduce_scatter(it_comm *c, const void *send, void *recv, size_t n, it_dtype dt, it_reduce_kind op,
                                   it_stream *s) {
    return cpu_ccl->reduce_scatter(c->cpu, send, recv, n, dt, op, s);
}
static it_status pc_broadcast(it_comm *c, void *buf, size_t count, it_dtype dt, int root, it_stream *s) {
    return cpu_ccl->broadcast(c->cpu, buf, count, dt, root, s);
}

/* ---- point to point: one open group at a time, as NCCL's (the core never nests them) */
typedef struct p2p_op {
    it_comm *c;
    void *buf;
    int bytes, peer;
    bool send;
} p2p_op;
static bool in_group;
static p2p_op *queue;
static int nqueue, capqueue;

static it_status p2p_args(it_comm *c, size_t count, it_dtype dt, int peer, const char *what, int *bytes) {
    size_t n = count * it_dtype_size(dt);
    if (peer < 0 || peer >= c->nranks || peer == c->rank || n > (size_t)1 << 30)
        return it_error(IT_ERR_INVALID_ARG, "p2pccl %s: peer %d of %d (this rank %d), %zu bytes", what, peer, c->nranks,
                        c->rank, n);
    *bytes = (int)n;
    return IT_OK;
}

static it_status enqueue(it_comm *c, void *buf, int bytes, int peer, bool send) {
    if (nqueue == capqueue) {
        int cap = capqueue ? 2 * capqueue : 16;
        p2p_op *q = realloc(queue, sizeof *q * (size_t)cap);
        if (!q) return it_error(IT_ERR_OOM, "p2pccl: out of memory");
        queue = q, capqueue = cap;
    }
    queue[nqueue++] = (p2p_op){c, buf, bytes, peer, send};
    return IT_OK;
}

static it_status pc_send(it_comm *c, const void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    (void)s;
    int bytes = 0;
    it_status st = p2p_args(c, count, dt, peer, "send", &bytes);
    if (st) return st;
    c->sends++;
    if (in_group) return enqueue(c, (void *)buf, bytes, peer, true);
    return mpi_err(MPI_Ssend(buf, bytes, MPI_BYTE, peer, 0, c->comm), "MPI_Ssend");
}

static it_status pc_recv(it_comm *c, void *buf, size_t count, it_dtype dt, int peer, it_stream *s) {
    (void)s;
    int bytes = 0;
    it_status st = p2p_args(c, count, dt, peer, "recv", &bytes);
    if (st) return st;
    c->recvs++;
    if (in_group) return enqueue(c, buf, bytes, peer, false);
    MPI_Status ms;
    int got = -1;
    st = mpi_err(MPI_Recv(buf, bytes, MPI_BYTE, peer, 0, c->comm, &ms), "MPI_Recv");
    if (!st) MPI_Get_count(&ms, MPI_BYTE, &got);
    return st || got == bytes ? st : it_error(IT_ERR_BACKEND, "p2pccl recv: %d bytes arrived, %d expected", got, bytes);
}

static it_status pc_group_start(void) {
    if (in_group) return it_error(IT_ERR_INVALID_ARG, "p2pccl: group_start inside a group");
    in_group = true;
    nqueue = 0;
    return IT_OK;
}

static it_status pc_group_end(void) {
    if (!in_group) return it_error(IT_ERR_INVALID_ARG, "p2pccl: group_end without group_start");
    in_group = false;
    if (!nqueue) return IT_OK;
    MPI_Request *req = malloc(sizeof *req * (size_t)nqueue);
    MPI_Status *ms = malloc(sizeof *ms * (size_t)nqueue);
    if (!req || !ms) {
        free(req);
        free(ms);
        return it_error(IT_ERR_OOM, "p2pccl: out of memory");
    }
    it_status st = IT_OK;
    int posted = 0;
    for (int i = 0; i < nqueue && !st; i++, posted++) {
        p2p_op *o = &queue[i];
        st = o->send ? mpi_err(MPI_Issend(o->buf, o->bytes, MPI_BYTE, o->peer, 0, o->c->comm, &req[i]), "MPI_Issend")
                     : mpi_err(MPI_Irecv(o->buf, o->bytes, MPI_BYTE, o->peer, 0, o->c->comm, &req[i]), "MPI_Irecv");
        if (st) break;
        o->c->groups += i == 0;
    }
    if (posted) {
        it_status w = mpi_err(MPI_Waitall(posted, req, ms), "MPI_Waitall");
        if (!st) st = w;
    }
    for (int i = 0; i < posted && !st; i++) {
        int got = -1;
        MPI_Get_count(&ms[i], MPI_BYTE, &got);
        if (!queue[i].send && got != queue[i].bytes)
            st = it_error(IT_ERR_BACKEND, "p2pccl group: %d bytes arrived, %d expected", got, queue[i].bytes);
    }
    free(req);
    free(ms);
    nqueue = 0;
    return st;
}

static it_ccl pc_ccl;
static it_backend pc_backend;

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) {
    if (pc_backend.name) return &pc_backend;
    const it_backend *cpu = &it_cpu_backend; /* not it_device_cpu(): the registry's lock is held */
    cpu_ccl = cpu->ccl;
    pc_ccl = (it_ccl){
        .get_unique_id = pc_get_unique_id,
        .comm_init = pc_comm_init,
        .comm_destroy = pc_comm_destroy,
        .all_reduce = pc_all_reduce,
        .all_gather = pc_all_gather,
        .reduce_scatter = pc_reduce_scatter,
        .broadcast = pc_broadcast,
        .send = pc_send,
        .recv = pc_recv,
    };
    const char *no = getenv("P2PCCL_NO_GROUPS");
    if (!no || !*no || *no == '0') pc_ccl.group_start = pc_group_start, pc_ccl.group_end = pc_group_end;
    pc_backend = *cpu;
    pc_backend.api_version = IT_BACKEND_API_VERSION;
    pc_backend.ccl = &pc_ccl;
    pc_backend.name = "p2pccl";
    return &pc_backend;
}
