/* Process groups: MPI bootstrap, the world group and its splits, host and device communicators,
 * collectives on tensors (native or staged through host memory), hashes for the start-up
 * checks. Every group, the world included, is built by group_init; grid.c splits the world
 * into DP, TP and PP groups. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "cpu/ccl_mpi.h"
#include "dist/watchdog.h"
#include "infinitrain/autograd.h"
#include "infinitrain/dist.h"

/* A process group: the world (it_dist_new) or a part of it (it_dist_split). rank and world
 * are this process's rank in the group and the group's size. */
struct it_dist {
    int rank, world;
    bool mpi_owned;         /* MPI_Init was ours: finalize in it_dist_free */
    MPI_Comm mpi;           /* the group's MPI communicator; MPI_COMM_NULL when not launched */
    bool mpi_comm_owned;    /* mpi came from MPI_Comm_split: freed with the group */
    it_device dev;          /* this rank's device */
    const it_ccl *host_ccl; /* the CPU backend's collectives */
    it_comm *host_comm;
    const it_ccl *dev_ccl; /* the device backend's, or NULL: staged through the host */
    it_comm *dev_comm;
    uint64_t bytes_sent; /* it_dist_bytes_sent */
    /* point-to-point sends in flight (it_dist_send): MPI requests and their host buffers */
    MPI_Request *sreq;
    void **sbuf;
    int nsend, capsend;
    /* device point to point (it_dist_p2p_on_device): the sends waiting for the next group,
     * each tensor held until then */
    bool p2p_dev;
    it_tensor **pend;
    int *pend_peer;
    int npend, cappend;
    /* the watchdog's view (watchdog.h): the group's id, name and members' world ranks */
    int gid;
    char label[16];
    int *wrank;
    int last_peer; /* the last send's peer, for a wait on the sends */
};

/* The watchdog is told of a wait on a group of more than one rank; returns whether it was. */
static bool watch(const it_dist *d, const char *op, size_t bytes, int peer) {
    if (!d || d->world <= 1) return false;
    it__watch_enter(d->gid, d->label, d->wrank, d->world, d->rank, op, bytes, peer);
    return true;
}

/* return CALL, watched as a wait in OP */
#define WATCHED(d, op, bytes, peer, call)                                                                              \
    do {                                                                                                               \
        bool w_ = watch(d, op, bytes, peer);                                                                           \
        it_status s_ = (call);                                                                                         \
        if (w_) it__watch_leave();                                                                                     \
        return s_;                                                                                                     \
    } while (0)

/* What one rank sends in a ring algorithm for a collective over `bytes` of payload on n ranks:
 * all-reduce 2(n-1)/n of the buffer, reduce-scatter and all-gather (n-1)/n of the full one. */
static void count_sent(it_dist *d, size_t bytes, int kind) {
    double n = d->world, share = kind == 0 ? 2.0 * (n - 1) / n : (n - 1) / n;
    d->bytes_sent += (uint64_t)(share * (double)bytes + 0.5);
}

uint64_t it_dist_bytes_sent(const it_dist *d) { return d ? d->bytes_sent : 0; }
void it_dist_bytes_reset(it_dist *d) {
    if (d) d->bytes_sent = 0;
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

bool it_dist_launched(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

void it_dist_env(int *rank, int *world) {
    *rank = 0;
    *world = 1;
    if (!it_dist_launched()) return;
    *rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", 0));
    *world = env_int("OMPI_COMM_WORLD_SIZE", env_int("SLURM_NTASKS", 1)); /* srun --mpi=pmix sets no OMPI_* */
}

/* Make a device communicator over `ccl` for the group: its rank 0 creates the unique id, the
 * group's MPI communicator carries it to the others (the bootstrap every vendor library
 * needs), each rank joins. One id per group, so groups never share a communicator. */
static it_status comm_create(const it_dist *d, const it_ccl *ccl, int device, it_comm **out) {
    it_ccl_unique_id id;
    memset(&id, 0, sizeof id);
    it_status st = d->rank == 0 ? ccl->get_unique_id(&id) : IT_OK;
    if (st) return it_error_context("ccl get_unique_id: ");
    if (MPI_Bcast(id.bytes, IT_CCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, d->mpi) != MPI_SUCCESS)
        return it_error(IT_ERR_BACKEND, "dist: broadcasting the communicator id failed");
    st = ccl->comm_init(device, &id, d->world, d->rank, out);
    return st ? it_error_context("ccl comm_init: ") : IT_OK;
}

/* The communicators of a group whose MPI communicator d->mpi is set: the host one (the CPU
 * ccl over d->mpi) and the device's own when its backend has a ccl (the host one when the
 * device is the CPU). A group of one communicates nothing and gets none. */
static it_status group_init(it_dist *d) {
    /* MPI errors come back as codes (we turn them into messages) rather than aborting */
    MPI_Comm_set_errhandler(d->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->mpi, &d->rank);
    MPI_Comm_size(d->mpi, &d->world);
    if (d->world == 1) return IT_OK;
    d->wrank = malloc(sizeof(int) * 2 * (size_t)d->world);
    if (!d->wrank) return it_error(IT_ERR_OOM, "dist: out of host memory");
    MPI_Group mine, all;
    MPI_Comm_group(d->mpi, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    for (int i = 0; i < d->world; i++) d->wrank[d->world + i] = i;
    MPI_Group_translate_ranks(mine, d->world, d->wrank + d->world, all, d->wrank);
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
    d->gid = it__watch_register(d->wrank, d->world);
    it_device dev = d->dev;
    d->host_ccl = it_device_cpu().backend->ccl;
    it_status st = IT_OK;
    if (!d->host_ccl) st = it_error(IT_ERR_UNSUPPORTED, "dist: the CPU backend has no collectives");
    if (!st) st = it_cpu_comm_over(d->mpi, &d->host_comm);
    if (!st && dev.backend->ccl && dev.backend != it_device_cpu().backend) {
        d->dev_ccl = dev.backend->ccl;
        st = comm_create(d, d->dev_ccl, dev.index, &d->dev_comm);
    } else if (!st && dev.backend->ccl) {
        d->dev_ccl = d->host_ccl; /* the CPU device: the host communicator serves both */
        d->dev_comm = d->host_comm;
    }
    d->p2p_dev = !st && d->dev_ccl && d->dev_ccl != d->host_ccl && it_backend_ccl_groups(dev.backend);
    return st;
}

it_status it_dist_new(it_device dev, it_dist **out) {
    it_dist *d = calloc(1, sizeof *d);
    if (!d) return it_error(IT_ERR_OOM, "dist: out of host memory");
    d->rank = 0;
    d->world = 1;
    d->mpi = MPI_COMM_NULL;
    d->dev = dev;
    *out = d;
    if (!it_dist_launched()) return IT_OK;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(d);
            *out = NULL;
            return it_error(IT_ERR_BACKEND, "dist: MPI_Init_thread failed");
        }
        d->mpi_owned = true;
    }
    d->mpi = MPI_COMM_WORLD;
    snprintf(d->label, sizeof d->label, "world");
    it_status st = group_init(d);
    if (st) {
        it_dist_free(d);
        *out = NULL;
    }
    return st;
}

it_status it_dist_split(it_dist *parent, int color, int key, it_dist **out) {
    *out = NULL;
    if (!parent || color < 0)
        return it_error(IT_ERR_INVALID_ARG, "dist split: needs a group and a color >= 0 (got %d)", color);
    it_dist *d = calloc(1, sizeof *d);
    if (!d) return it_error(IT_ERR_OOM, "dist: out of host memory");
    d->rank = 0;
    d->world = 1;
    d->mpi = MPI_COMM_NULL;
    d->dev = parent->dev;
    *out = d;
    if (parent->mpi == MPI_COMM_NULL) return IT_OK; /* not launched: a group of one */
    if (MPI_Comm_split(parent->mpi, color, key, &d->mpi) != MPI_SUCCESS) {
        free(d);
        *out = NULL;
        return it_error(IT_ERR_BACKEND, "dist: MPI_Comm_split (color %d, key %d) failed", color, key);
    }
    d->mpi_comm_owned = true;
    snprintf(d->label, sizeof d->label, "a group");
    it_status st = group_init(d);
    if (st) {
        it_dist_free(d);
        *out = NULL;
    }
    return st;
}

void it_dist_free(it_dist *d) {
    if (!d) return;
    it_dist_send_wait(d);
    for (int i = 0; i < d->npend; i++) it_tensor_release(d->pend[i]); /* left by an error */
    free(d->pend);
    free(d->pend_peer);
    free(d->sreq);
    free(d->sbuf);
    free(d->wrank);
    if (d->dev_comm && d->dev_comm != d->host_comm) d->dev_ccl->comm_destroy(d->dev_comm);
    if (d->host_comm) d->host_ccl->comm_destroy(d->host_comm);
    int fin = 0;
    MPI_Finalized(&fin);
    if (d->mpi_comm_owned && !fin) MPI_Comm_free(&d->mpi);
    if (d->mpi_owned && !fin) MPI_Finalize();
    free(d);
}

void it_dist_set_label(it_dist *d, const char *label) {
    if (d) snprintf(d->label, sizeof d->label, "%s", label);
}

it_status it__dist_gather_host(it_dist *d, const void *mine, size_t bytes, void *all) {
    if (!d || d->world == 1) {
        memcpy(all, mine, bytes);
        return IT_OK;
    }
    return d->host_ccl->all_gather(d->host_comm, mine, all, bytes, IT_DTYPE_U8, NULL);
}

int it_dist_rank(const it_dist *d) { return d ? d->rank : 0; }
int it_dist_world(const it_dist *d) { return d ? d->world : 1; }
bool it_dist_staged(const it_dist *d) { return d && d->world > 1 && !d->dev_ccl; }

void it_dist_abort(it_dist *d, int code) {
    /* the whole job stops, whichever group saw the error (a group of one may be part of more) */
    int all = 1;
    if (d && d->mpi != MPI_COMM_NULL) MPI_Comm_size(MPI_COMM_WORLD, &all);
    if (all > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

static it_status need_contiguous(it_tensor *t, const char *what) {
    if (!it_tensor_is_contiguous(t))
        return it_error(IT_ERR_INVALID_ARG, "dist %s: the tensor must be contiguous", what);
    return IT_OK;
}

/* Staging: a host copy of t (malloc'd), or NULL after an error. */
static void *to_host(it_tensor *t) {
    size_t n = it_tensor_nbytes(t);
    void *h = malloc(n ? n : 1);
    if (!h) {
        it_error(IT_ERR_OOM, "dist: staging %zu bytes: out of host memory", n);
        return NULL;
    }
    if (it_tensor_copy_to_host(t, h, n)) {
        free(h);
        return NULL;
    }
    return h;
}

/* t /= world on the device (binary DIV by a broadcast scalar: exactly sum / N, as an AVG). */
static it_status divide_by_world(it_dist *d, it_tensor *t) {
    it_scope_begin();
    float n = (float)d->world;
    it_tensor *w = it_tensor_from_host(d->dev, IT_DTYPE_FP32, 0, NULL, &n, sizeof n);
    if (w && it_tensor_dtype(t) != IT_DTYPE_FP32) w = it_tensor_to_dtype(w, it_tensor_dtype(t));
    it_status st = w ? IT_OK : it_last_status();
    if (!st) {
        it_tdesc td = it_tensor_desc(t), wd = it_tensor_desc(w);
        wd.ndim = td.ndim;
        for (int i = 0; i < td.ndim; i++) wd.shape[i] = td.shape[i], wd.strides[i] = 0;
        st = KCALL(d->dev, binary, IT_BINARY_DIV, &td, &wd, &td);
    }
    it_scope_end();
    return st;
}

/* A device library without an average (CNCL) declines AVG: SUM, then divide on the device. */
static bool avg_declined(it_status st, it_reduce_kind op) {
    if (st != IT_ERR_UNSUPPORTED || op != IT_CCL_AVG) return false;
    it_error_clear();
    return true;
}

static it_status dist_all_reduce_(it_dist *d, it_tensor *t, it_reduce_kind op) {
    if (!d || d->world == 1) return IT_OK;
    it_status st = need_contiguous(t, "all_reduce");
    if (st) return st;
    size_t n = (size_t)it_tensor_numel(t);
    count_sent(d, it_tensor_nbytes(t), 0);
    if (d->dev_ccl) {
        void *p = it_tensor_desc(t).data;
        if ((st = it_device_synchronize(d->dev))) return st;
        st = d->dev_ccl->all_reduce(d->dev_comm, p, p, n, it_tensor_dtype(t), op, it__stream(d->dev));
        if (avg_declined(st, op) &&
            !(st = d->dev_ccl->all_reduce(d->dev_comm, p, p, n, it_tensor_dtype(t), IT_CCL_SUM, it__stream(d->dev))))
            st = divide_by_world(d, t);
        return st;
    }
    void *h = to_host(t);
    if (!h) return it_last_status();
    st = d->host_ccl->all_reduce(d->host_comm, h, h, n, it_tensor_dtype(t), op, NULL);
    if (!st) st = it_tensor_copy_from_host(t, h, it_tensor_nbytes(t));
    free(h);
    return st;
}

static it_status dist_reduce_scatter_(it_dist *d, it_tensor *src, it_tensor *dst, it_reduce_kind op) {
    size_t n = (size_t)it_tensor_numel(dst);
    if (!d || (size_t)it_tensor_numel(src) != n * (size_t)d->world || it_tensor_dtype(src) != it_tensor_dtype(dst))
        return it_error(IT_ERR_INVALID_ARG,
                        "dist reduce_scatter: src must hold world*numel(dst) elements of dst's dtype");
    it_status st = need_contiguous(src, "reduce_scatter");
    if (!st) st = need_contiguous(dst, "reduce_scatter");
    if (st) return st;
    if (d->world == 1) return it_tensor_copy_(dst, src);
    count_sent(d, it_tensor_nbytes(src), 1);
    if (d->dev_ccl) {
        if ((st = it_device_synchronize(d->dev))) return st;
        void *ps = it_tensor_desc(src).data, *pd = it_tensor_desc(dst).data;
        st = d->dev_ccl->reduce_scatter(d->dev_comm, ps, pd, n, it_tensor_dtype(src), op, it__stream(d->dev));
        if (avg_declined(st, op) && !(st = d->dev_ccl->reduce_scatter(d->dev_comm, ps, pd, n, it_tensor_dtype(src),
                                                                      IT_CCL_SUM, it__stream(d->dev))))
            st = divide_by_world(d, dst);
        return st;
    }
    void *hs = to_host(src), *hd = hs ? malloc(it_tensor_nbytes(dst) + 1) : NULL;
    if (!hd) {
        free(hs);
        return hs ? it_error(IT_ERR_OOM, "dist: staging: out of host memory") : it_last_status();
    }
    st = d->host_ccl->reduce_scatter(d->host_comm, hs, hd, n, it_tensor_dtype(src), op, NULL);
    if (!st) st = it_tensor_copy_from_host(dst, hd, it_tensor_nbytes(dst));
    free(hs);
    free(hd);
    return st;
}

static it_status dist_all_gather_(it_dist *d, it_tensor *src, it_tensor *dst) {
    size_t n = (size_t)it_tensor_numel(src);
    if (!d || (size_t)it_tensor_numel(dst) != n * (size_t)d->world || it_tensor_dtype(src) != it_tensor_dtype(dst))
        return it_error(IT_ERR_INVALID_ARG, "dist all_gather: dst must hold world*numel(src) elements of src's dtype");
    it_status st = need_contiguous(src, "all_gather");
    if (!st) st = need_contiguous(dst, "all_gather");
    if (st) return st;
    if (d->world == 1)
        return it_tensor_shares_storage(src, dst) && it_tensor_offset(src) == it_tensor_offset(dst)
                   ? IT_OK
                   : it_tensor_copy_(dst, src);
    count_sent(d, it_tensor_nbytes(dst), 1);
    if (d->dev_ccl) {
        if ((st = it_device_synchronize(d->dev))) return st;
        return d->dev_ccl->all_gather(d->dev_comm, it_tensor_desc(src).data, it_tensor_desc(dst).data, n,
                                      it_tensor_dtype(src), it__stream(d->dev));
    }
    size_t es = it_dtype_size(it_tensor_dtype(src));
    void *hd = malloc(n * (size_t)d->world * es + 1);
    if (!hd) return it_error(IT_ERR_OOM, "dist: staging: out of host memory");
    void *slot = (char *)hd + n * (size_t)d->rank * es;
    st = it_tensor_copy_to_host(src, slot, n * es);
    if (!st) st = d->host_ccl->all_gather(d->host_comm, slot, hd, n, it_tensor_dtype(src), NULL);
    if (!st) st = it_tensor_copy_from_host(dst, hd, it_tensor_nbytes(dst));
    free(hd);
    return st;
}

static it_status dist_broadcast_(it_dist *d, it_tensor *t, int root) {
    if (!d || d->world == 1) return IT_OK;
    it_status st = need_contiguous(t, "broadcast");
    if (st) return st;
    size_t n = (size_t)it_tensor_numel(t);
    if (d->dev_ccl) {
        if ((st = it_device_synchronize(d->dev))) return st;
        return d->dev_ccl->broadcast(d->dev_comm, it_tensor_desc(t).data, n, it_tensor_dtype(t), root,
                                     it__stream(d->dev));
    }
    void *h = to_host(t);
    if (!h) return it_last_status();
    st = d->host_ccl->broadcast(d->host_comm, h, n, it_tensor_dtype(t), root, NULL);
    if (!st) st = it_tensor_copy_from_host(t, h, it_tensor_nbytes(t));
    free(h);
    return st;
}

static it_status dist_all_reduce_host_(it_dist *d, void *buf, size_t count, it_dtype dt, it_reduce_kind op) {
    if (!d || d->world == 1) return IT_OK;
    return d->host_ccl->all_reduce(d->host_comm, buf, buf, count, dt, op, NULL);
}

static it_status dist_all_reduce_buckets_(it_dist *d, it_tensor *flat, size_t bucket_bytes) {
    if (!d || d->world == 1) return IT_OK;
    if (it_tensor_ndim(flat) != 1) return it_error(IT_ERR_INVALID_ARG, "dist: gradient buckets need a flat tensor");
    if (!bucket_bytes) bucket_bytes = (size_t)25 << 20;
    int64_t n = it_tensor_numel(flat), per = (int64_t)(bucket_bytes / it_dtype_size(it_tensor_dtype(flat)));
    if (per < 1) per = 1;
    it_status st = IT_OK;
    for (int64_t i = 0; i < n && !st; i += per) {
        it_scope_begin();
        it_tensor *b = it_tensor_slice(flat, 0, i, i + per < n ? i + per : n, 1);
        st = b ? it_dist_all_reduce(d, b, IT_CCL_SUM) : it_last_status();
        it_scope_end();
    }
    return st;
}

/* ---------------------------------------------------------------- overlapped gradient sync */
struct it_grad_sync {
    it_dist *d;
    it_tensor *flat, *addend;
    int64_t n, per; /* elements in all, per bucket */
    int nb;
    int64_t *ready;       /* per bucket: elements whose gradient is final */
    bool *started;        /* per bucket */
    int next;             /* the next bucket to start (nb-1 down to 0); -1: all started */
    it_ccl_request **req; /* per bucket, in flight (CPU's non-blocking all-reduce) */
    int early;
    bool in_backward;
};

it_status it_grad_sync_new(it_dist *d, it_tensor *flat, size_t bucket_bytes, it_grad_sync **out) {
    *out = NULL;
    if (!d || !flat || it_tensor_ndim(flat) != 1 || !it_tensor_is_contiguous(flat))
        return it_error(IT_ERR_INVALID_ARG, "grad sync: needs the group and a flat contiguous gradient");
    it_grad_sync *g = calloc(1, sizeof *g);
    if (!g) return it_error(IT_ERR_OOM, "grad sync: out of host memory");
    g->d = d;
    g->flat = it_tensor_retain(flat);
    g->n = it_tensor_numel(flat);
    if (!bucket_bytes) bucket_bytes = (size_t)25 << 20;
    g->per = (int64_t)(bucket_bytes / it_dtype_size(it_tensor_dtype(flat)));
    if (g->per < 1) g->per = 1;
    g->nb = (int)((g->n + g->per - 1) / g->per);
    g->ready = calloc((size_t)g->nb + 1, sizeof *g->ready);
    g->started = calloc((size_t)g->nb + 1, sizeof *g->started);
    g->req = calloc((size_t)g->nb + 1, sizeof *g->req);
    if (!g->ready || !g->started || !g->req) {
        it_grad_sync_free(g);
        return it_error(IT_ERR_OOM, "grad sync: out of host memory");
    }
    g->next = -1;
    *out = g;
    return IT_OK;
}

void it_grad_sync_free(it_grad_sync *g) {
    if (!g) return;
    for (int b = 0; b < g->nb && g->req; b++)
        if (g->req[b]) (void)g->d->dev_ccl->request_wait(g->req[b]);
    it_tensor_release(g->flat);
    free(g->ready);
    free(g->started);
    free(g->req);
    free(g);
}

it_status it_grad_sync_begin(it_grad_sync *g, it_tensor *addend) {
    if (addend && (it_tensor_numel(addend) != g->n || it_tensor_dtype(addend) != it_tensor_dtype(g->flat) ||
                   !it_tensor_is_contiguous(addend)))
        return it_error(IT_ERR_INVALID_ARG, "grad sync: the addend must be flat like the gradient");
    g->addend = addend;
    for (int b = 0; b < g->nb; b++) g->ready[b] = 0, g->started[b] = false;
    g->next = g->nb - 1;
    g->early = 0;
    g->in_backward = true;
    return IT_OK;
}

static int64_t bucket_len(const it_grad_sync *g, int b) {
    return (b + 1) * g->per < g->n ? g->per : g->n - (int64_t)b * g->per;
}

/* Bucket b: add the earlier micro-steps' sum, then all-reduce (started, or done, here). */
static it_status bucket_start(it_grad_sync *g, int b) {
    it_dist *d = g->d;
    int64_t lo = (int64_t)b * g->per, hi = lo + bucket_len(g, b);
    it_status st = IT_OK;
    it_scope_begin();
    it_tensor *gb = it_tensor_slice(g->flat, 0, lo, hi, 1);
    if (!gb) st = it_last_status();
    if (!st && g->addend) { /* addend + grads, the order the unbucketed step used */
        it_tensor *ab = it_tensor_slice(g->addend, 0, lo, hi, 1);
        it_tdesc a = ab ? it_tensor_desc(ab) : (it_tdesc){0}, o = it_tensor_desc(gb);
        st = ab ? KCALL(d->dev, binary, IT_BINARY_ADD, &a, &o, &o) : it_last_status();
    }
    if (!st && d->world > 1) {
        if (d->dev_ccl && d->dev_ccl->all_reduce_start) {
            void *p = it_tensor_desc(gb).data;
            count_sent(d, it_tensor_nbytes(gb), 0);
            st = it_device_synchronize(d->dev);
            if (!st)
                st = d->dev_ccl->all_reduce_start(d->dev_comm, p, p, (size_t)(hi - lo), it_tensor_dtype(gb), IT_CCL_SUM,
                                                  it__stream(d->dev), &g->req[b]);
        } else {
            st = it_dist_all_reduce(d, gb, IT_CCL_SUM);
        }
    }
    it_scope_end();
    g->started[b] = true;
    if (g->in_backward) g->early++;
    return st;
}

/* Start every bucket that may start now (ready, and next in the fixed order), then let the
 * ones in flight progress. */
static it_status pump(it_grad_sync *g) {
    it_status st = IT_OK;
    while (!st && g->next >= 0 && g->ready[g->next] == bucket_len(g, g->next)) st = bucket_start(g, g->next--);
    for (int b = 0; b < g->nb && !st; b++) {
        bool done = false;
        if (g->req[b] && !(st = g->d->dev_ccl->request_test(g->req[b], &done)) && done) g->req[b] = NULL;
        if (st) g->req[b] = NULL; /* released on error too */
    }
    return st;
}

it_status it_grad_sync_ready(void *ctx, it_tensor *leaf) {
    it_grad_sync *g = ctx;
    if (g->next < 0) return IT_OK;
    if (leaf) {
        it_tensor *gr = it_tensor_grad(leaf);
        if (!gr || !it_tensor_shares_storage(gr, g->flat) || !it_tensor_is_contiguous(gr)) return IT_OK;
        int64_t a = it_tensor_offset(gr) - it_tensor_offset(g->flat), e = a + it_tensor_numel(gr);
        if (a < 0 || e > g->n) return IT_OK;
        for (int64_t b = a / g->per; b < g->nb && b * g->per < e; b++) {
            int64_t lo = b * g->per, hi = lo + bucket_len(g, (int)b);
            g->ready[b] += (e < hi ? e : hi) - (a > lo ? a : lo);
        }
    }
    return pump(g);
}

static it_status grad_sync_finish_(it_grad_sync *g, int *early, int *buckets) {
    g->in_backward = false;
    it_status st = IT_OK;
    while (!st && g->next >= 0) st = bucket_start(g, g->next--);
    for (int b = 0; b < g->nb; b++) {
        if (!g->req[b]) continue;
        it_status w = g->d->dev_ccl->request_wait(g->req[b]);
        g->req[b] = NULL;
        if (!st) st = w;
    }
    if (early) *early = g->early;
    if (buckets) *buckets = g->nb;
    return st;
}

/* FNV-1a over 8-byte little-endian words (each product's high half folded down), then over the
 * 0..7 tail bytes: the same value for the same bytes wherever they live. A whole model's
 * parameters go through here at start-up (setup's check that the data-parallel ranks hold the
 * same ones), so the words are read in place when the device's memory is the host's and the
 * tensor contiguous, and 8 bytes are taken a step. */
static uint64_t fnv1a_words(const unsigned char *b, size_t n, uint64_t x) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        x = (x ^ w) * 1099511628211ull;
        x ^= x >> 32; /* a multiply only carries upward: fold the high half down, so that a
                       * difference in a word's top bits (a float's sign) reaches every bit
                       * of the hash and two such differences cannot cancel */
    }
    for (; i < n; i++) x = (x ^ b[i]) * 1099511628211ull;
    return x;
}

it_status it_dist_tensor_hash(it_tensor *t, uint64_t *out) {
    if (!t) return it_error(IT_ERR_INVALID_ARG, "dist hash: the tensor is NULL");
    const uint64_t basis = 1469598103934665603ull;
    it_device dev = it_tensor_device(t);
    if (dev.backend->host_memory && it_tensor_is_contiguous(t)) {
        it_status st = it_device_synchronize(dev); /* the kernels that wrote it have finished */
        if (st) return st;
        *out = fnv1a_words(it_tensor_desc(t).data, it_tensor_nbytes(t), basis);
        return IT_OK;
    }
    void *h = to_host(t);
    if (!h) return it_last_status();
    *out = fnv1a_words(h, it_tensor_nbytes(t), basis);
    free(h);
    return IT_OK;
}

it_status it_dist_check_equal(it_dist *d, const uint64_t *hashes, size_t n, bool *differs) {
    for (size_t i = 0; i < n; i++) differs[i] = false;
    if (!d || d->world == 1) return IT_OK;
    /* max(h) == min(h) on every rank, min(h) as ~max(~h) */
    uint64_t *buf = malloc(sizeof(uint64_t) * 2 * n + 1);
    if (!buf) return it_error(IT_ERR_OOM, "dist: out of host memory");
    for (size_t i = 0; i < n; i++) {
        buf[i] = hashes[i];
        buf[n + i] = ~hashes[i];
    }
    it_status st = it_dist_all_reduce_host(d, buf, 2 * n, IT_DTYPE_U64, IT_CCL_MAX);
    for (size_t i = 0; i < n && !st; i++) differs[i] = buf[i] != ~buf[n + i];
    free(buf);
    return st;
}

/* ---------------------------------------------------------------- point to point */

/* Two ways (docs/parallelism.md, "How activations move"):
 *  - staged: a send is copied to host memory and posted non-blocking (MPI_Isend), so two ranks
 *    sending to each other at once (a 1F1B pipeline's activations one way, gradients the
 *    other) cannot deadlock; a receive blocks until its data has arrived. Messages between two
 *    ranks with the same tag arrive in the order sent (MPI's guarantee).
 *  - on the device, when its ccl has group calls: a send is held (the tensor retained) until
 *    the next exchange, which issues the held sends and its receives as one group
 *    (group_start .. group_end), device memory to device memory. A rendezvous send (NCCL's,
 *    CNCL's) then never waits for a receive queued behind another send. The ccl matches
 *    messages by order, not tag: the caller receives from each peer in the order it sent. */
bool it_dist_p2p_on_device(const it_dist *d) { return d && d->p2p_dev; }

/* A point-to-point call's group, peer and tensor checked. */
static it_status check_p2p(const it_dist *d, it_tensor *t, int peer, const char *what) {
    if (!d || d->world == 1) return it_error(IT_ERR_INVALID_ARG, "dist %s: needs a group of more than one rank", what);
    if (peer < 0 || peer >= d->world || peer == d->rank)
        return it_error(IT_ERR_INVALID_ARG, "dist %s: peer %d outside the group of %d (or this rank)", what, peer,
                        d->world);
    return need_contiguous(t, what);
}

it_status it_dist_send(it_dist *d, it_tensor *t, int peer, int tag) {
    it_status st = check_p2p(d, t, peer, "send");
    if (st) return st;
    if (d->p2p_dev) {
        if (d->npend == d->cappend) {
            int cap = d->cappend ? 2 * d->cappend : 8;
            it_tensor **r = realloc(d->pend, sizeof *r * (size_t)cap);
            if (r) d->pend = r;
            int *q = r ? realloc(d->pend_peer, sizeof *q * (size_t)cap) : NULL;
            if (q) d->pend_peer = q;
            if (!r || !q) return it_error(IT_ERR_OOM, "dist send: out of host memory");
            d->cappend = cap;
        }
        d->pend[d->npend] = it_tensor_retain(t);
        d->pend_peer[d->npend++] = peer;
        d->last_peer = peer;
        d->bytes_sent += it_tensor_nbytes(t);
        return IT_OK;
    }
    if (d->nsend == d->capsend) {
        int cap = d->capsend ? 2 * d->capsend : 8;
        MPI_Request *r = realloc(d->sreq, sizeof *r * (size_t)cap);
        if (r) d->sreq = r;
        void **b = r ? realloc(d->sbuf, sizeof *b * (size_t)cap) : NULL;
        if (b) d->sbuf = b;
        if (!r || !b) return it_error(IT_ERR_OOM, "dist send: out of host memory");
        d->capsend = cap;
    }
    size_t n = it_tensor_nbytes(t);
    if (n > (size_t)INT_MAX) return it_error(IT_ERR_INVALID_ARG, "dist send: %zu bytes exceed MPI's int counts", n);
    void *h = to_host(t);
    if (!h) return it_last_status();
    if (MPI_Isend(h, (int)n, MPI_BYTE, peer, tag, d->mpi, &d->sreq[d->nsend]) != MPI_SUCCESS) {
        free(h);
        return it_error(IT_ERR_BACKEND, "dist send: MPI_Isend of %zu bytes to rank %d failed", n, peer);
    }
    d->sbuf[d->nsend++] = h;
    d->bytes_sent += n;
    d->last_peer = peer;
    return IT_OK;
}

/* One group on the device: the held sends, then n receives; every held tensor released. */
static it_status device_group(it_dist *d, int n, it_tensor *const *t, const int *peer) {
    const it_ccl *c = d->dev_ccl;
    it_stream *s = it__stream(d->dev);
    it_status st = c->group_start();
    if (st) st = it_error_context("dist: ccl group_start: ");
    bool open = !st;
    for (int i = 0; i < d->npend && !st; i++) {
        it_tdesc td = it_tensor_desc(d->pend[i]);
        st = c->send(d->dev_comm, td.data, (size_t)it_tensor_numel(d->pend[i]), td.dtype, d->pend_peer[i], s);
        if (st) st = it_error_context("dist: ccl send to rank %d: ", d->pend_peer[i]);
    }
    for (int i = 0; i < n && !st; i++) {
        it_tdesc td = it_tensor_desc(t[i]);
        st = c->recv(d->dev_comm, td.data, (size_t)it_tensor_numel(t[i]), td.dtype, peer[i], s);
        if (st) st = it_error_context("dist: ccl recv from rank %d: ", peer[i]);
    }
    if (open) { /* closed also after an error: the library's group state stays balanced */
        it_status ge = c->group_end();
        if (!st && ge) st = it_error_context("dist: ccl group_end: ");
    }
    for (int i = 0; i < d->npend; i++) it_tensor_release(d->pend[i]);
    d->npend = 0;
    return st;
}

static it_status dist_exchange_(it_dist *d, int n, it_tensor *const *t, const int *peer, const int *tag) {
    if (n < 0 || (n > 0 && (!t || !peer || !tag)))
        return it_error(IT_ERR_INVALID_ARG, "dist exchange: %d receives with no tensors, peers or tags", n);
    for (int i = 0; i < n; i++) {
        it_status st = check_p2p(d, t[i], peer[i], "recv");
        if (st) return st;
    }
    if (d && d->p2p_dev) return n || d->npend ? device_group(d, n, t, peer) : IT_OK;
    for (int i = 0; i < n; i++) {
        it_status st = it_dist_recv(d, t[i], peer[i], tag[i]);
        if (st) return st;
    }
    return IT_OK;
}

static it_status dist_recv_(it_dist *d, it_tensor *t, int peer, int tag) {
    it_status st = check_p2p(d, t, peer, "recv");
    if (st) return st;
    if (d->p2p_dev) return device_group(d, 1, &t, &peer);
    size_t n = it_tensor_nbytes(t);
    void *h = malloc(n ? n : 1);
    if (!h) return it_error(IT_ERR_OOM, "dist recv: %zu bytes of host memory", n);
    MPI_Status ms;
    int got = 0;
    if (MPI_Recv(h, (int)n, MPI_BYTE, peer, tag, d->mpi, &ms) != MPI_SUCCESS ||
        MPI_Get_count(&ms, MPI_BYTE, &got) != MPI_SUCCESS || (size_t)got != n) {
        free(h);
        return it_error(IT_ERR_BACKEND, "dist recv: expected %zu bytes from rank %d, got %d", n, peer, got);
    }
    st = it_tensor_copy_from_host(t, h, n);
    free(h);
    return st;
}

static it_status dist_send_wait_(it_dist *d) {
    if (d && d->npend) return device_group(d, 0, NULL, NULL); /* the held sends, in a group of their own */
    if (!d || !d->nsend) return IT_OK;
    int rc = MPI_Waitall(d->nsend, d->sreq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < d->nsend; i++) free(d->sbuf[i]);
    d->nsend = 0;
    return rc == MPI_SUCCESS ? IT_OK : it_error(IT_ERR_BACKEND, "dist: waiting for point-to-point sends failed");
}

it_status it_dist_all_reduce(it_dist *d, it_tensor *t, it_reduce_kind op) {
    WATCHED(d, "all_reduce", it_tensor_nbytes(t), -1, dist_all_reduce_(d, t, op));
}

it_status it_dist_reduce_scatter(it_dist *d, it_tensor *src, it_tensor *dst, it_reduce_kind op) {
    WATCHED(d, "reduce_scatter", it_tensor_nbytes(src), -1, dist_reduce_scatter_(d, src, dst, op));
}

it_status it_dist_all_gather(it_dist *d, it_tensor *src, it_tensor *dst) {
    WATCHED(d, "all_gather", it_tensor_nbytes(dst), -1, dist_all_gather_(d, src, dst));
}

it_status it_dist_broadcast(it_dist *d, it_tensor *t, int root) {
    WATCHED(d, "broadcast", it_tensor_nbytes(t), -1, dist_broadcast_(d, t, root));
}

it_status it_dist_all_reduce_host(it_dist *d, void *buf, size_t count, it_dtype dt, it_reduce_kind op) {
    WATCHED(d, "all_reduce", count * it_dtype_size(dt), -1, dist_all_reduce_host_(d, buf, count, dt, op));
}

it_status it_dist_all_reduce_buckets(it_dist *d, it_tensor *flat, size_t bucket_bytes) {
    WATCHED(d, "all_reduce (buckets)", it_tensor_nbytes(flat), -1, dist_all_reduce_buckets_(d, flat, bucket_bytes));
}

it_status it_dist_recv(it_dist *d, it_tensor *t, int peer, int tag) {
    WATCHED(d, "recv", it_tensor_nbytes(t), peer, dist_recv_(d, t, peer, tag));
}

it_status it_dist_exchange(it_dist *d, int n, it_tensor *const *t, const int *peer, const int *tag) {
    WATCHED(d, "exchange", n > 0 && t ? it_tensor_nbytes(t[0]) : 0, n > 0 && peer ? peer[0] : (d ? d->last_peer : 0),
            dist_exchange_(d, n, t, peer, tag));
}

it_status it_dist_send_wait(it_dist *d) {
    if (!d || (!d->npend && !d->nsend)) return IT_OK;
    WATCHED(d, "send_wait", 0, d->last_peer, dist_send_wait_(d));
}

it_status it_grad_sync_finish(it_grad_sync *g, int *early, int *buckets) {
    it_dist *d = g->d;
    WATCHED(d, "all_reduce (gradient buckets)", it_tensor_nbytes(g->flat), -1, grad_sync_finish_(g, early, buckets));
}
