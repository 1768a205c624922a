/* The core's private layouts: tensors, storages and the registry's per-device state.
 * Nothing outside src/ includes this; backends see only backend.h. */
#ifndef IT_CORE_INTERNAL_H
#define IT_CORE_INTERNAL_H

#include <stdatomic.h>

#include "infinitrain/backend.h"
#include "infinitrain/tensor.h"

typedef struct it_storage {
    atomic_int refs;
    it_device dev;
    void *data;    /* from the device's caching allocator */
    size_t nbytes; /* the block's (rounded) size */
} it_storage;

struct it_node; /* autograd */

struct it_tensor {
    atomic_int refs;
    it_storage *storage;
    it_dtype dtype;
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    int64_t strides[IT_MAX_DIMS];
    int64_t offset; /* in elements */
    /* autograd */
    bool requires_grad;
    bool is_leaf;           /* created by the user (parameters), not by an op */
    struct it_tensor *grad; /* owned reference; for leaves it persists across steps */
    int pending_uses;       /* a hooked backward: nodes not yet run that take this leaf */
    bool grad_zero;         /* a leaf whose grad buffer is logically zero, not yet written */
};

/* ---- registry (registry.c) */
/* Levenshtein distance of two names of at most 63 bytes (99 beyond): the nearest name an
 * unknown backend or flag is told of. */
int it__edit_distance(const char *a, const char *b);
/* s made one line for a message: each control character becomes '?' (a parser's error text
 * quoting its input, as jansson's "near '...'" does, may hold the file's newline). */
void it__one_line(char *s);
/* Resolve the backend a device names: runs the lazy init. */
it_status it__backend_ready(const it_backend *backend);
/* Per-device allocator state lives in the registry; alloc.c uses these. */
typedef struct it_allocator it_allocator;
it_allocator *it__allocator(it_device dev);

/* ---- allocator (alloc.c) */
it_status it__alloc(it_device dev, size_t nbytes, void **ptr, size_t *block_bytes);
void it__free(it_device dev, void *ptr, size_t block_bytes);
/* Reads IT_MAX_MEMORY_MB; a malformed value is an error naming it. */
it_status it__allocator_new(it_allocator **out);
void it__allocator_destroy(it_allocator *a, it_device dev);

/* ---- tensors (tensor.c) */
/* A new tensor owned by the caller (not put in any scope). */
it_tensor *it__tensor_new_owned(it_device dev, it_dtype dtype, int ndim, const int64_t *shape);
/* A new view header on t's storage, owned by the caller. */
it_tensor *it__tensor_view_owned(const it_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                                 int64_t offset);
/* A contiguous copy owned by the caller. */
it_tensor *it__clone_owned(it_tensor *t);
/* Hand a caller-owned tensor to the innermost scope (if any); returns t. */
it_tensor *it__scope_add(it_tensor *t);
void it__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
int64_t it__numel(int ndim, const int64_t *shape);

/* The stream work for `dev` goes on (the backend's default stream for that device). */
it_stream *it__stream(it_device dev);

/* ---- kernel dispatch (dispatch.c)
 * KCALL(dev, slot, args...) runs a slot of dev's backend on dev's stream through the
 * effective table (native slot, or the CPU fallback when the backend left it empty),
 * counting calls and time per slot. Evaluates to an it_status. */
typedef struct it__dispatch it__dispatch;
/* kernels_size: the bytes of backend->kernels to read (validated by the registry). */
it__dispatch *it__dispatch_new(const it_backend *backend, size_t kernels_size);
it__dispatch *it__dispatch_of(const it_backend *backend); /* registry.c */
typedef struct it__kcall_ctx {
    it_device dev;
    it_stream *stream;
    const it_kernels *k;
    it__dispatch *d;
    size_t slot;
    uint64_t t0;
    it_status st; /* the native call's status, when it is not retried */
    bool retried; /* the native kernel declined: the fallback ran */
} it__kcall_ctx;
extern _Thread_local it__kcall_ctx it__kc;
bool it__kpre(it_device dev, size_t slot);
/* Counts the call; keeps st in it__kc.st. */
it_status it__kpost(it_status st);
/* Slots with every slot's signature that, called after a failed call with its arguments,
 * prefix the error with the kernel, the device and each tensor's shape and dtype (dispatch.c),
 * and return the failure's status. */
const it_kernels *it__describe_kernels(void);
/* True when a native kernel declined the call (IT_ERR_UNSUPPORTED on a backend other than the
 * CPU): KCALL then runs it on the CPU fallback. Otherwise keeps st in it__kc.st. */
bool it__kretry(it_status st);
const it_kernels *it__fallback_kernels(void);
/* True when dev's backend has its own kernel in the slot (for the optional fused slots, which
 * have no fallback: see it_kernels). */
bool it__kernel_native(it_device dev, size_t slot);
#define IT_SLOT(slot) (offsetof(it_kernels, slot) / sizeof(void (*)(void)))
/* The arguments are evaluated again for a retried call and for a failed one's message: pass
 * no expression with side effects. */
#define KCALL(dev, slot, ...)                                                                                          \
    (it__kpre((dev), IT_SLOT(slot)) ? (it__kpost(it__kretry(it__kc.k->slot(it__kc.stream, __VA_ARGS__))                \
                                                     ? it__fallback_kernels()->slot(it__kc.stream, __VA_ARGS__)        \
                                                     : it__kc.st)                                                      \
                                           ? it__describe_kernels()->slot(NULL, __VA_ARGS__)                           \
                                           : IT_OK)                                                                    \
                                    : it_last_status())

#endif
