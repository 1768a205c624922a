/* Tensors: refcounted storage, views, copies across devices and dtypes, and scopes.
 *
 * Host code never dereferences a tensor's data pointer unless the device's backend is
 * host_memory; every other read goes through the backend's synchronous memcpy. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* ---------------------------------------------------------------- shapes */

int64_t it__numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void it__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

static it_status check_shape(int ndim, const int64_t *shape, it_dtype dtype, size_t *nbytes) {
    if (ndim < 0 || ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "tensor: ndim %d out of range 0..%d", ndim, IT_MAX_DIMS);
    if (!it_dtype_valid((int)dtype)) return it_error(IT_ERR_INVALID_ARG, "tensor: invalid dtype %d", (int)dtype);
    uint64_t n = 1;
    const uint64_t max_elems = ((uint64_t)1 << 56) / it_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return it_error(IT_ERR_INVALID_ARG, "tensor: dimension %d has negative size %" PRId64, i, shape[i]);
        if (shape[i] && n > max_elems / (uint64_t)shape[i])
            return it_error(IT_ERR_OOM, "tensor: shape too large (dimension %d = %" PRId64 " overflows)", i, shape[i]);
        n *= (uint64_t)shape[i];
    }
    *nbytes = (size_t)n * it_dtype_size(dtype);
    return IT_OK;
}

/* ---------------------------------------------------------------- scopes */

typedef struct scope {
    it_tensor **items;
    size_t n, cap;
} scope;

static _Thread_local scope *scopes;
static _Thread_local int n_scopes, cap_scopes;

void it_scope_begin(void) {
    if (n_scopes == cap_scopes) {
        int cap = cap_scopes ? cap_scopes * 2 : 8;
        scope *s = realloc(scopes, (size_t)cap * sizeof *s);
        if (!s) abort(); /* cannot even record a scope: nothing sane to return */
        scopes = s;
        cap_scopes = cap;
    }
    memset(&scopes[n_scopes], 0, sizeof(scope));
    n_scopes++;
}

void it_scope_end(void) {
    if (n_scopes == 0) return;
    scope *s = &scopes[--n_scopes];
    for (size_t i = s->n; i-- > 0;) it_tensor_release(s->items[i]);
    free(s->items);
    if (n_scopes == 0) {
        free(scopes);
        scopes = NULL;
        cap_scopes = 0;
    }
}

it_tensor *it__scope_add(it_tensor *t) {
    if (!t || n_scopes == 0) return t;
    scope *s = &scopes[n_scopes - 1];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        it_tensor **items = realloc(s->items, cap * sizeof *items);
        if (!items) {
            it_tensor_release(t);
            it_error(IT_ERR_OOM, "scope: out of host memory");
            return NULL;
        }
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = t;
    return t;
}

it_tensor *it_scope_keep(it_tensor *t) {
    if (!t || n_scopes == 0) return t;
    scope *s = &scopes[n_scopes - 1];
    for (size_t i = s->n; i-- > 0;) {
        if (s->items[i] == t) {
            s->items[i] = s->items[--s->n];
            return t;
        }
    }
    /* Not in the innermost scope: give the caller a reference of its own. */
    return it_tensor_retain(t);
}

/* ---------------------------------------------------------------- creation */

static void storage_release(it_storage *st) {
    if (st && atomic_fetch_sub(&st->refs, 1) == 1) {
        it__free(st->dev, st->data, st->nbytes);
        free(st);
    }
}

it_tensor *it__tensor_new_owned(it_device dev, it_dtype dtype, int ndim, const int64_t *shape) {
    size_t nbytes = 0;
    if (!dev.backend) {
        it_error(IT_ERR_INVALID_ARG, "tensor: no device");
        return NULL;
    }
    if (check_shape(ndim, shape, dtype, &nbytes)) return NULL;
    it_storage *st = calloc(1, sizeof *st);
    it_tensor *t = calloc(1, sizeof *t);
    if (!st || !t) {
        free(st);
        free(t);
        it_error(IT_ERR_OOM, "tensor: out of host memory");
        return NULL;
    }
    if (it__alloc(dev, nbytes, &st->data, &st->nbytes)) {
        free(st);
        free(t);
        return NULL;
    }
    atomic_init(&st->refs, 1);
    st->dev = dev;
    atomic_init(&t->refs, 1);
    t->storage = st;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    it__contiguous_strides(ndim, shape, t->strides);
    return t;
}

it_tensor *it__tensor_view_owned(const it_tensor *src, int ndim, const int64_t *shape, const int64_t *strides,
                                 int64_t offset) {
    it_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        it_error(IT_ERR_OOM, "tensor view: out of host memory");
        return NULL;
    }
    atomic_init(&t->refs, 1);
    atomic_fetch_add(&src->storage->refs, 1);
    t->storage = src->storage;
    t->dtype = src->dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = strides[i];
    }
    t->offset = offset;
    return t;
}

it_tensor *it_tensor_new(it_device dev, it_dtype dtype, int ndim, const int64_t *shape) {
    return it__scope_add(it__tensor_new_owned(dev, dtype, ndim, shape));
}

it_tensor *it_tensor_full(it_device dev, it_dtype dtype, int ndim, const int64_t *shape, it_scalar v) {
    it_tensor *t = it__tensor_new_owned(dev, dtype, ndim, shape);
    if (t && it_tensor_fill(t, v)) {
        it_tensor_release(t);
        return NULL;
    }
    return it__scope_add(t);
}

it_tensor *it_tensor_zeros(it_device dev, it_dtype dtype, int ndim, const int64_t *shape) {
    return it_tensor_full(dev, dtype, ndim, shape, it_scalar_i64(0));
}

it_tensor *it_tensor_from_host(it_device dev, it_dtype dtype, int ndim, const int64_t *shape, const void *host,
                               size_t nbytes) {
    it_tensor *t = it__tensor_new_owned(dev, dtype, ndim, shape);
    if (t && it_tensor_copy_from_host(t, host, nbytes)) {
        it_tensor_release(t);
        return NULL;
    }
    return it__scope_add(t);
}

it_tensor *it_tensor_retain(it_tensor *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
    return t;
}

void it_tensor_release(it_tensor *t) {
    if (!t) return;
    if (atomic_fetch_sub(&t->refs, 1) == 1) {
        it_tensor_release(t->grad);
        storage_release(t->storage);
        free(t);
    }
}

/* ---------------------------------------------------------------- accessors */

it_dtype it_tensor_dtype(const it_tensor *t) { return t->dtype; }
int it_tensor_ndim(const it_tensor *t) { return t->ndim; }
const int64_t *it_tensor_shape(const it_tensor *t) { return t->shape; }
const int64_t *it_tensor_strides(const it_tensor *t) { return t->strides; }
int64_t it_tensor_dim(const it_tensor *t, int d) {
    if (d < 0) d += t->ndim;
    return d >= 0 && d < t->ndim ? t->shape[d] : -1;
}
int64_t it_tensor_offset(const it_tensor *t) { return t->offset; }
int64_t it_tensor_numel(const it_tensor *t) { return it__numel(t->ndim, t->shape); }
size_t it_tensor_nbytes(const it_tensor *t) { return (size_t)it_tensor_numel(t) * it_dtype_size(t->dtype); }
it_device it_tensor_device(const it_tensor *t) { return t->storage->dev; }
bool it_tensor_shares_storage(const it_tensor *a, const it_tensor *b) { return a && b && a->storage == b->storage; }

bool it_tensor_is_contiguous(const it_tensor *t) {
    /* No elements: nothing to lay out (a size-0 dim anywhere makes any strides dense). */
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return true;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

it_tdesc it_tensor_desc(const it_tensor *t) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = (char *)t->storage->data + t->offset * (int64_t)it_dtype_size(t->dtype);
    d.dtype = t->dtype;
    d.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        d.shape[i] = t->shape[i];
        d.strides[i] = t->strides[i];
    }
    return d;
}

/* ---------------------------------------------------------------- views */

it_tensor *it_tensor_view(it_tensor *t, int ndim, const int64_t *shape_in) {
    if (!t) return NULL;
    if (ndim < 0 || ndim > IT_MAX_DIMS) {
        it_error(IT_ERR_INVALID_ARG, "view: ndim %d out of range 0..%d", ndim, IT_MAX_DIMS);
        return NULL;
    }
    int64_t shape[IT_MAX_DIMS], known = 1, numel = it_tensor_numel(t);
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                it_error(IT_ERR_INVALID_ARG, "view: more than one -1 in the new shape");
                return NULL;
            }
            infer = i;
        } else if (shape[i] < 0) {
            it_error(IT_ERR_INVALID_ARG, "view: negative size %" PRId64 " at dimension %d", shape[i], i);
            return NULL;
        } else {
            if (shape[i] && known > INT64_MAX / shape[i]) {
                it_error(IT_ERR_INVALID_ARG, "view: size %" PRId64 " at dimension %d overflows the element count",
                         shape[i], i);
                return NULL;
            }
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known) {
            it_error(IT_ERR_INVALID_ARG, "view: cannot infer dimension %d: %" PRId64 " elements into %" PRId64 "s",
                     infer, numel, known);
            return NULL;
        }
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        it_error(IT_ERR_INVALID_ARG, "view: %" PRId64 " elements cannot be viewed as %" PRId64, numel, known);
        return NULL;
    }
    int64_t strides[IT_MAX_DIMS];
    it__contiguous_strides(ndim, shape, strides);
    if (!it_tensor_is_contiguous(t)) {
        /* Non-contiguous: view a contiguous copy (documented in tensor.h). */
        it_tensor *c = it__clone_owned(t);
        if (!c) return NULL;
        it_tensor *v = it__tensor_view_owned(c, ndim, shape, strides, 0);
        it_tensor_release(c);
        return it__scope_add(v);
    }
    return it__scope_add(it__tensor_view_owned(t, ndim, shape, strides, t->offset));
}

it_tensor *it_tensor_permute(it_tensor *t, const int *perm) {
    if (!t) return NULL;
    int64_t shape[IT_MAX_DIMS], strides[IT_MAX_DIMS];
    bool seen[IT_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        int p = perm[i];
        if (p < 0 || p >= t->ndim || seen[p]) {
            it_error(IT_ERR_INVALID_ARG, "permute: entry %d (= %d) is not a permutation of 0..%d", i, p, t->ndim - 1);
            return NULL;
        }
        seen[p] = true;
        shape[i] = t->shape[p];
        strides[i] = t->strides[p];
    }
    return it__scope_add(it__tensor_view_owned(t, t->ndim, shape, strides, t->offset));
}

it_tensor *it_tensor_transpose(it_tensor *t, int d0, int d1) {
    if (!t) return NULL;
    if (d0 < 0) d0 += t->ndim;
    if (d1 < 0) d1 += t->ndim;
    if (d0 < 0 || d0 >= t->ndim || d1 < 0 || d1 >= t->ndim) {
        it_error(IT_ERR_INVALID_ARG, "transpose: dimensions %d, %d out of range for a %d-D tensor", d0, d1, t->ndim);
        return NULL;
    }
    int perm[IT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    return it_tensor_permute(t, perm);
}

it_tensor *it_tensor_slice(it_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
    if (!t) return NULL;
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim) {
        it_error(IT_ERR_INVALID_ARG, "slice: dimension %d out of range for a %d-D tensor", dim, t->ndim);
        return NULL;
    }
    int64_t n = t->shape[dim];
    if (step <= 0 || start < 0 || end > n || start > end) {
        it_error(IT_ERR_INVALID_ARG,
                 "slice: [%" PRId64 ", %" PRId64 ") step %" PRId64 " invalid for dimension %d of size %" PRId64, start,
                 end, step, dim, n);
        return NULL;
    }
    int64_t shape[IT_MAX_DIMS], strides[IT_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    /* ceil((end - start) / step) without overflow; a stride only matters for 2+ elements, and
     * then step < n, so stride * step stays within the storage. */
    shape[dim] = end == start ? 0 : (end - start - 1) / step + 1;
    strides[dim] = shape[dim] > 1 ? t->strides[dim] * step : t->strides[dim];
    return it__scope_add(it__tensor_view_owned(t, t->ndim, shape, strides, t->offset + start * t->strides[dim]));
}

it_tensor *it_tensor_expand(it_tensor *t, int ndim, const int64_t *shape) {
    if (!t) return NULL;
    if (ndim < t->ndim || ndim > IT_MAX_DIMS) {
        it_error(IT_ERR_INVALID_ARG, "expand: cannot expand a %d-D tensor to %d dimensions", t->ndim, ndim);
        return NULL;
    }
    int64_t strides[IT_MAX_DIMS], shp[IT_MAX_DIMS], numel = 1;
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < lead ? 1 : t->shape[i - lead];
        int64_t st = i < lead ? 0 : t->strides[i - lead];
        int64_t want = shape[i] == -1 ? have : shape[i];
        if (want < 0 || (want && numel > INT64_MAX / want)) {
            it_error(IT_ERR_INVALID_ARG, "expand: size %" PRId64 " at dimension %d is %s", shape[i], i,
                     want < 0 ? "negative" : "too large (the element count overflows)");
            return NULL;
        }
        numel *= want;
        if (have == want) {
            strides[i] = st;
        } else if (have == 1) {
            strides[i] = 0;
        } else {
            it_error(IT_ERR_INVALID_ARG, "expand: dimension %d of size %" PRId64 " cannot become %" PRId64, i, have,
                     want);
            return NULL;
        }
        shp[i] = want;
    }
    return it__scope_add(it__tensor_view_owned(t, ndim, shp, strides, t->offset));
}

/* ---------------------------------------------------------------- copies */

/* Synchronous byte copy between a device buffer and host memory. */
static it_status dev_memcpy(it_device dev, void *dst, const void *src, size_t n, it_memcpy_kind kind) {
    if (n == 0) return IT_OK;
    /* Work queued on the stream may still be writing the source (D2H) or reading the
     * destination (H2D): order the copy after it. */
    it_stream *s = it__stream(dev);
    if (!s) return it_last_status();
    const it_runtime *rt = dev.backend->runtime;
    it_status st = rt->stream_synchronize(s);
    if (!st) st = rt->memcpy(dev.index, dst, src, n, kind);
    if (st) {
        char name[64];
        return it_error_context("%s: memcpy of %zu bytes: ", it_device_str(dev, name, sizeof name), n);
    }
    return IT_OK;
}

/* dst = src on one device: copy_strided for equal dtypes, cast otherwise. */
static it_status same_device_copy(it_tensor *dst, it_tensor *src) {
    it_device dev = it_tensor_device(dst);
    it_tdesc s = it_tensor_desc(src), d = it_tensor_desc(dst);
    if (src->dtype == dst->dtype) return KCALL(dev, copy_strided, &s, &d);
    return KCALL(dev, cast, &s, &d);
}

it_status it_tensor_copy_(it_tensor *dst, it_tensor *src) {
    if (!dst || !src) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "copy: NULL tensor");
    if (dst->ndim != src->ndim || memcmp(dst->shape, src->shape, (size_t)dst->ndim * sizeof(int64_t)) != 0)
        return it_error(IT_ERR_INVALID_ARG, "copy: shapes differ (%d-D vs %d-D or sizes differ)", dst->ndim, src->ndim);
    it_device dd = it_tensor_device(dst), sd = it_tensor_device(src);
    if (it_device_equal(dd, sd)) return same_device_copy(dst, src);
    /* Across devices: make a contiguous source in the destination's dtype on the source
     * device, move bytes through the host when neither side is host memory, then place. */
    it_status st = IT_OK;
    it_tensor *csrc = NULL, *cdst = NULL;
    void *staging = NULL;
    if (it_tensor_is_contiguous(src) && src->dtype == dst->dtype) {
        csrc = it_tensor_retain(src);
    } else {
        csrc = it__tensor_new_owned(sd, dst->dtype, src->ndim, src->shape);
        if (!csrc || (st = same_device_copy(csrc, src))) goto done;
    }
    if (it_tensor_is_contiguous(dst)) {
        cdst = it_tensor_retain(dst);
    } else {
        cdst = it__tensor_new_owned(dd, dst->dtype, dst->ndim, dst->shape);
        if (!cdst) goto done;
    }
    size_t n = it_tensor_nbytes(csrc);
    it_tdesc sdsc = it_tensor_desc(csrc), ddsc = it_tensor_desc(cdst);
    if (sd.backend->host_memory) {
        st = dev_memcpy(dd, ddsc.data, sdsc.data, n, IT_MEMCPY_H2D);
    } else if (dd.backend->host_memory) {
        st = dev_memcpy(sd, ddsc.data, sdsc.data, n, IT_MEMCPY_D2H);
    } else {
        staging = malloc(n ? n : 1);
        if (!staging) {
            st = it_error(IT_ERR_OOM, "copy: %zu bytes of host staging memory", n);
            goto done;
        }
        st = dev_memcpy(sd, staging, sdsc.data, n, IT_MEMCPY_D2H);
        if (!st) st = dev_memcpy(dd, ddsc.data, staging, n, IT_MEMCPY_H2D);
    }
    if (!st && cdst != dst) st = same_device_copy(dst, cdst);
done:
    if (!st && (!csrc || !cdst)) st = it_last_status();
    free(staging);
    it_tensor_release(csrc);
    it_tensor_release(cdst);
    return st;
}

it_tensor *it_tensor_contiguous(it_tensor *t) {
    if (!t) return NULL;
    if (it_tensor_is_contiguous(t)) return it__scope_add(it_tensor_retain(t));
    return it_tensor_clone(t);
}

it_tensor *it__clone_owned(it_tensor *t) {
    if (!t) return NULL;
    it_tensor *c = it__tensor_new_owned(it_tensor_device(t), t->dtype, t->ndim, t->shape);
    if (c && same_device_copy(c, t)) {
        it_tensor_release(c);
        return NULL;
    }
    return c;
}

it_tensor *it_tensor_clone(it_tensor *t) { return it__scope_add(it__clone_owned(t)); }

it_tensor *it_tensor_to_device(it_tensor *t, it_device dev) {
    if (!t) return NULL;
    it_tensor *c = it__tensor_new_owned(dev, t->dtype, t->ndim, t->shape);
    if (c && it_tensor_copy_(c, t)) {
        it_tensor_release(c);
        return NULL;
    }
    return it__scope_add(c);
}

it_tensor *it_tensor_to_dtype(it_tensor *t, it_dtype dtype) {
    if (!t) return NULL;
    it_tensor *c = it__tensor_new_owned(it_tensor_device(t), dtype, t->ndim, t->shape);
    if (c && same_device_copy(c, t)) {
        it_tensor_release(c);
        return NULL;
    }
    return it__scope_add(c);
}

it_status it_tensor_fill(it_tensor *t, it_scalar v) {
    if (!t) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "fill: NULL tensor");
    it_tdesc d = it_tensor_desc(t);
    return KCALL(it_tensor_device(t), fill, &d, v);
}

static it_status host_size_check(const char *what, it_tensor *t, size_t nbytes) {
    if (nbytes != it_tensor_nbytes(t))
        return it_error(IT_ERR_INVALID_ARG, "%s: buffer has %zu bytes, the tensor needs %zu (%" PRId64 " x %s)", what,
                        nbytes, it_tensor_nbytes(t), it_tensor_numel(t), it_dtype_name(t->dtype));
    return IT_OK;
}

it_status it_tensor_copy_from_host(it_tensor *t, const void *host, size_t nbytes) {
    if (!t) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "copy_from_host: NULL tensor");
    it_status st = host_size_check("copy_from_host", t, nbytes);
    if (st) return st;
    it_device dev = it_tensor_device(t);
    if (it_tensor_is_contiguous(t)) return dev_memcpy(dev, it_tensor_desc(t).data, host, nbytes, IT_MEMCPY_H2D);
    it_tensor *c = it__tensor_new_owned(dev, t->dtype, t->ndim, t->shape);
    if (!c) return it_last_status();
    st = dev_memcpy(dev, it_tensor_desc(c).data, host, nbytes, IT_MEMCPY_H2D);
    if (!st) st = same_device_copy(t, c);
    it_tensor_release(c);
    return st;
}

it_status it_tensor_copy_to_host(it_tensor *t, void *host, size_t nbytes) {
    if (!t) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "copy_to_host: NULL tensor");
    it_status st = host_size_check("copy_to_host", t, nbytes);
    if (st) return st;
    it_device dev = it_tensor_device(t);
    if (it_tensor_is_contiguous(t)) return dev_memcpy(dev, host, it_tensor_desc(t).data, nbytes, IT_MEMCPY_D2H);
    it_tensor *c = it__tensor_new_owned(dev, t->dtype, t->ndim, t->shape);
    if (!c) return it_last_status();
    st = same_device_copy(c, t);
    if (!st) st = dev_memcpy(dev, host, it_tensor_desc(c).data, nbytes, IT_MEMCPY_D2H);
    it_tensor_release(c);
    return st;
}

/* Convert one element at `p` to double (host memory). */
static double elem_to_double(const void *p, it_dtype dt) {
    switch (dt) {
    case IT_DTYPE_BOOL: return *(const uint8_t *)p != 0;
    case IT_DTYPE_U8: return *(const uint8_t *)p;
    case IT_DTYPE_I8: return *(const int8_t *)p;
    case IT_DTYPE_U16: return *(const uint16_t *)p;
    case IT_DTYPE_I16: return *(const int16_t *)p;
    case IT_DTYPE_U32: return *(const uint32_t *)p;
    case IT_DTYPE_I32: return *(const int32_t *)p;
    case IT_DTYPE_U64: return (double)*(const uint64_t *)p;
    case IT_DTYPE_I64: return (double)*(const int64_t *)p;
    case IT_DTYPE_BF16: return it_bf16_to_fp32(*(const uint16_t *)p);
    case IT_DTYPE_FP16: return it_fp16_to_fp32(*(const uint16_t *)p);
    case IT_DTYPE_FP32: return *(const float *)p;
    case IT_DTYPE_FP64: return *(const double *)p;
    }
    return NAN;
}

it_status it_tensor_item(it_tensor *t, const int64_t *index, double *out) {
    if (!t) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "item: NULL tensor");
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i])
            return it_error(IT_ERR_INVALID_ARG,
                            "item: index %" PRId64 " out of range for dimension %d of size %" PRId64, index[i], i,
                            t->shape[i]);
        off += index[i] * t->strides[i];
    }
    if (t->ndim > 0 && it_tensor_numel(t) == 0) return it_error(IT_ERR_INVALID_ARG, "item: empty tensor");
    unsigned char buf[8];
    size_t es = it_dtype_size(t->dtype);
    it_device dev = it_tensor_device(t);
    it_status st = dev_memcpy(dev, buf, (char *)t->storage->data + off * (int64_t)es, es, IT_MEMCPY_D2H);
    if (st) return st;
    *out = elem_to_double(buf, t->dtype);
    return IT_OK;
}

it_status it_tensor_print(it_tensor *t, FILE *f, const char *name) {
    if (!t) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "print: NULL tensor");
    char dev[64];
    fprintf(f, "%s: tensor(shape=[", name ? name : "tensor");
    for (int i = 0; i < t->ndim; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    fprintf(f, "], dtype=%s, device=%s%s)\n", it_dtype_name(t->dtype),
            it_device_str(it_tensor_device(t), dev, sizeof dev), it_tensor_is_contiguous(t) ? "" : ", strided");
    int64_t n = it_tensor_numel(t);
    size_t es = it_dtype_size(t->dtype);
    unsigned char *host = malloc(n ? (size_t)n * es : 1);
    if (!host) return it_error(IT_ERR_OOM, "print: %" PRId64 " elements of host memory", n);
    it_status st = it_tensor_copy_to_host(t, host, (size_t)n * es);
    if (st) {
        free(host);
        return st;
    }
    /* Rows of the last dimension; at most 6 rows and 8 values per row shown. */
    int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1, rows = cols ? n / cols : 0;
    for (int64_t r = 0; r < rows; r++) {
        if (rows > 6 && r == 3) {
            fprintf(f, "  ... (%" PRId64 " rows)\n", rows - 6);
            r = rows - 3;
        }
        fprintf(f, "  [");
        for (int64_t c = 0; c < cols; c++) {
            if (cols > 8 && c == 4) {
                fprintf(f, " ...");
                c = cols - 4;
            }
            double v = elem_to_double(host + (size_t)(r * cols + c) * es, t->dtype);
            if (it_dtype_is_float(t->dtype))
                fprintf(f, "%s%.6g", c ? ", " : "", v);
            else
                fprintf(f, "%s%.0f", c ? ", " : "", v);
        }
        fprintf(f, "]\n");
    }
    free(host);
    return IT_OK;
}
