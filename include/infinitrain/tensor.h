/* Devices, tensors, views, scopes and the caching allocator.
 *
 * A tensor is a view (dtype, shape, strides, offset) on a refcounted storage that lives on
 * one device. Views share storage.
 *
 * Ownership: every function that returns a new it_tensor* hands it to the innermost open
 * scope (it_scope_begin/it_scope_end), which releases it at its end unless someone retained
 * it. With no scope open, the caller owns the returned reference and releases it.
 * Handle-returning functions return NULL on failure (message in it_last_error()); functions
 * taking tensors accept NULL inputs and then fail at once without a new message, so a chain
 * of calls can be checked once at its end. */
#ifndef INFINITRAIN_TENSOR_H
#define INFINITRAIN_TENSOR_H

#include <stdio.h>

#include "backend.h"
#include "common.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device: a registered backend and an index in it. */
typedef struct it_device {
    const it_backend *backend;
    int index;
} it_device;

/* Parse "NAME" or "NAME:INDEX" (index defaults to 0); loads a plugin if needed, runs the
 * backend's lazy init and checks the index against its device count. */
IT_API it_status it_device_parse(const char *text, it_device *out);
IT_API it_device it_device_cpu(void);
IT_API bool it_device_equal(it_device a, it_device b);
/* "cpu", "sim:1" into buf; returns buf. */
IT_API const char *it_device_str(it_device dev, char *buf, size_t size);
/* Initialize the backend if needed (thread-safe, once) and return its device count. */
IT_API it_status it_device_count(const it_backend *backend, int *count);
/* The stream the core issues work for this device on (the backend's default stream). */
IT_API it_status it_device_stream(it_device dev, it_stream **stream);
IT_API it_status it_device_synchronize(it_device dev);

/* ---- caching allocator statistics (per device) */
typedef struct it_mem_stats {
    size_t used;     /* bytes in live tensors' blocks */
    size_t reserved; /* bytes obtained from the backend (used + cached) */
    size_t peak_used;
    size_t peak_reserved;
    uint64_t backend_mallocs; /* calls to the backend's malloc so far */
    uint64_t backend_frees;
} it_mem_stats;
IT_API it_status it_mem_stats_get(it_device dev, it_mem_stats *out);
/* Reset peaks to the current values. */
IT_API void it_mem_stats_reset_peak(it_device dev);
/* Return every cached (unused) block to the backend (after synchronizing the device, whose
 * pending asynchronous errors are returned). */
IT_API it_status it_mem_empty_cache(it_device dev);
/* Limit on reserved bytes for a device (0 = none); an allocation past it fails as OOM.
 * Cached (free) blocks are given back when they would keep the device over the new limit. */
IT_API void it_mem_set_limit(it_device dev, size_t max_bytes);
/* The limit IT_MAX_MEMORY_MB asks for (0 when unset); an error naming the variable when
 * its value is not a plain decimal MiB count. Every device's allocator starts with it. */
IT_API it_status it_mem_env_limit(size_t *max_bytes);

/* ---- tensors */
typedef struct it_tensor it_tensor;

IT_API it_tensor *it_tensor_new(it_device dev, it_dtype dtype, int ndim, const int64_t *shape);
IT_API it_tensor *it_tensor_zeros(it_device dev, it_dtype dtype, int ndim, const int64_t *shape);
IT_API it_tensor *it_tensor_full(it_device dev, it_dtype dtype, int ndim, const int64_t *shape, it_scalar v);
/* A new tensor holding a copy of `nbytes` host bytes (must equal numel*dtype size). */
IT_API it_tensor *it_tensor_from_host(it_device dev, it_dtype dtype, int ndim, const int64_t *shape, const void *host,
                                      size_t nbytes);

IT_API it_tensor *it_tensor_retain(it_tensor *t);
IT_API void it_tensor_release(it_tensor *t);

IT_API it_dtype it_tensor_dtype(const it_tensor *t);
IT_API int it_tensor_ndim(const it_tensor *t);
IT_API const int64_t *it_tensor_shape(const it_tensor *t);
IT_API const int64_t *it_tensor_strides(const it_tensor *t);
IT_API int64_t it_tensor_dim(const it_tensor *t, int d); /* negative d counts from the end */
IT_API int64_t it_tensor_offset(const it_tensor *t);
IT_API int64_t it_tensor_numel(const it_tensor *t);
IT_API size_t it_tensor_nbytes(const it_tensor *t);
IT_API it_device it_tensor_device(const it_tensor *t);
IT_API bool it_tensor_is_contiguous(const it_tensor *t);
IT_API bool it_tensor_shares_storage(const it_tensor *a, const it_tensor *b);
/* Descriptor of the view, as kernels see it. */
IT_API it_tdesc it_tensor_desc(const it_tensor *t);

/* Views (share storage; no copy). -1 in reshape's shape is inferred. reshape of a
 * non-contiguous tensor that cannot be viewed returns a contiguous copy. */
IT_API it_tensor *it_tensor_view(it_tensor *t, int ndim, const int64_t *shape);
IT_API it_tensor *it_tensor_permute(it_tensor *t, const int *perm);
IT_API it_tensor *it_tensor_transpose(it_tensor *t, int d0, int d1);
/* [start, end) with step along dim. */
IT_API it_tensor *it_tensor_slice(it_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* Broadcast size-1 dims (stride 0); ndim may grow on the left. */
IT_API it_tensor *it_tensor_expand(it_tensor *t, int ndim, const int64_t *shape);

/* Copies and conversions (always a new tensor). */
IT_API it_tensor *it_tensor_contiguous(it_tensor *t); /* returns t itself (retained) when it is */
IT_API it_tensor *it_tensor_clone(it_tensor *t);
IT_API it_tensor *it_tensor_to_device(it_tensor *t, it_device dev);
IT_API it_tensor *it_tensor_to_dtype(it_tensor *t, it_dtype dtype);

IT_API it_status it_tensor_fill(it_tensor *t, it_scalar v);
/* dst = src (same shape; dtypes may differ: converted as cast; devices may differ). */
IT_API it_status it_tensor_copy_(it_tensor *dst, it_tensor *src);
/* Host buffer <-> tensor, in row-major order of the view. Synchronizing. */
IT_API it_status it_tensor_copy_from_host(it_tensor *t, const void *host, size_t nbytes);
IT_API it_status it_tensor_copy_to_host(it_tensor *t, void *host, size_t nbytes);
/* Read one element as double (synchronizing; for tests and logs). */
IT_API it_status it_tensor_item(it_tensor *t, const int64_t *index, double *out);
/* A readable dump (shape, dtype, device, values, long dims elided). */
IT_API it_status it_tensor_print(it_tensor *t, FILE *f, const char *name);

/* ---- scopes (autorelease pools) */
IT_API void it_scope_begin(void);
IT_API void it_scope_end(void);
/* Take `t` out of the innermost scope (the caller now owns that reference). */
IT_API it_tensor *it_scope_keep(it_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
