/* The generic model object behind include/infinitrain/models.h. */
#ifndef IT_MODEL_IMPL_H
#define IT_MODEL_IMPL_H

#include "core/internal.h"
#include "infinitrain/models.h"

typedef struct it_model_vtable {
    it_tensor *(*forward)(it_model *m, it_tensor *idx);
    it_status (*save)(const it_model *m, const char *path);
    double (*flops_per_token)(const it_model *m, int64_t T);
    void (*free_impl)(void *impl);
} it_model_vtable;

struct it_model {
    const it_model_vtable *vt;
    it_model_info info;
    it_device dev;
    it_tensor *params, *grads; /* flat, owned */
    it_tensor **leaves;        /* every parameter view it__model_param made (borrowed) */
    int n_leaves, cap_leaves;
    /* An auxiliary loss the last forward produced (MoE load balancing), owned by that
     * forward's scope; it_model_loss adds it and clears it. */
    it_tensor *aux_loss;
    void *impl;
};

/* Allocate the flat parameter and gradient buffers (grads zeroed). */
it_status it__model_init(it_model *m, const it_model_vtable *vt, it_device dev, int64_t num_params);
/* A leaf parameter: a view of `shape` at `offset` into the flat params, with its gradient a
 * view at the same offset into the flat grads. Owned by the caller. */
it_tensor *it__model_param(it_model *m, int64_t offset, int ndim, const int64_t *shape);

/* Deterministic normal samples (splitmix64 + Box-Muller), for initialization. */
typedef struct it_rng {
    uint64_t state;
} it_rng;
double it__rng_normal(it_rng *r);
double it__rng_uniform(it_rng *r); /* [0, 1) */

/* Read a checkpoint's 1024-byte header and check the file length; names the file. */
it_status it__read_header(const char *path, int32_t header[256], size_t *file_bytes);
/* Read n fp32 values at byte offset 1024 into the flat params. */
it_status it__read_params(const char *path, it_tensor *params, int64_t n);
/* Write header + the flat params atomically. */
it_status it__write_checkpoint(const char *path, const int32_t header[256], it_tensor *params);

#endif
