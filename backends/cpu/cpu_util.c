/* Descriptor checks shared by the CPU kernels (see cpu_util.h). Messages name the kernel,
 * the tensor, the field and the value; tests match parts of them. */
#include "cpu/cpu_util.h"

it_status it_cpu_check_desc(const char *kernel, const char *name, const it_tdesc *t, int min_ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim < min_ndim || t->ndim > IT_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d outside [%d, %d]", kernel, name, t->ndim, min_ndim,
                        IT_MAX_DIMS);
    return it_cpu_check_layout(kernel, name, t);
}

it_status it_cpu_check_layout(const char *kernel, const char *name, const it_tdesc *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld is negative", kernel, name, d,
                            (long long)t->shape[d]);
        if (t->strides[d] < 0)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] = %lld is negative", kernel, name, d,
                            (long long)t->strides[d]);
        n *= t->shape[d];
    }
    if (n > 0 && t->data == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s.data is NULL", kernel, name);
    return IT_OK;
}

it_status it_cpu_check_same(const char *kernel, const char *name, const it_tdesc *t, const char *rname,
                            const it_tdesc *ref, bool output) {
    if (t->ndim != ref->ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim %d != %s.ndim %d", kernel, name, t->ndim, rname, ref->ndim);
    for (int d = 0; d < ref->ndim; d++) {
        if (t->shape[d] != ref->shape[d])
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.shape[%d] = %lld != %s.shape[%d] = %lld", kernel, name, d,
                            (long long)t->shape[d], rname, d, (long long)ref->shape[d]);
        if (output && t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    }
    return it_cpu_check_dtype(kernel, name, t, rname, ref->dtype);
}

it_status it_cpu_check_like(const char *kernel, const char *name, const it_tdesc *t, int min_ndim, const char *rname,
                            const it_tdesc *ref, bool output) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, name, t, min_ndim))) return st;
    return it_cpu_check_same(kernel, name, t, rname, ref, output);
}

it_status it_cpu_check_dtype(const char *kernel, const char *name, const it_tdesc *t, const char *rname, it_dtype dt) {
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s != %s dtype %s", kernel, name, it_dtype_name(t->dtype),
                        rname, it_dtype_name(dt));
    return IT_OK;
}

it_status it_cpu_check_writable(const char *kernel, const char *name, const it_tdesc *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[%d] is 0 on a dim of size %lld", kernel, name, d,
                            (long long)t->shape[d]);
    return IT_OK;
}

it_status it_cpu_check_fp32_fp64(const char *kernel, const it_tdesc *t) {
    if (t->dtype != IT_DTYPE_FP32 && t->dtype != IT_DTYPE_FP64)
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", kernel, it_dtype_name(t->dtype));
    return IT_OK;
}

it_status it_cpu_check_count(const char *kernel, const char *name, const it_tdesc *t, const char *sym, int64_t n) {
    if (numel(t) != n)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s has %lld elements, expected %s = %lld", kernel, name,
                        (long long)numel(t), sym, (long long)n);
    return IT_OK;
}

it_status it_cpu_check_per_row(const char *kernel, const char *name, const it_tdesc *t, const char *sym, int64_t n,
                               it_dtype dt, const char *owner, bool output) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, name, t, 0)) || (st = it_cpu_check_count(kernel, name, t, sym, n))) return st;
    if (t->dtype != dt)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s dtype %s, expected %s (%s)", kernel, name, it_dtype_name(t->dtype),
                        it_dtype_name(dt), owner);
    return output ? it_cpu_check_writable(kernel, name, t) : IT_OK;
}

it_status it_cpu_check_norm_x(const char *kernel, const it_tdesc *x, int64_t *R, int64_t *C) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, "x", x, 0))) return st;
    if (x->ndim < 1) return it_error(IT_ERR_INVALID_ARG, "%s: x must have at least 1 dim, got ndim 0", kernel);
    if ((st = it_cpu_check_fp32_fp64(kernel, x))) return st;
    *C = x->shape[x->ndim - 1];
    *R = rows_of(x);
    return IT_OK;
}

it_status it_cpu_check_norm_vec(const char *kernel, const char *name, const it_tdesc *t, int64_t C, it_dtype dt,
                                bool output) {
    it_status st;
    if ((st = it_cpu_check_desc(kernel, name, t, 0))) return st;
    if (t->ndim != 1 || t->shape[0] != C)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be (%lld), got ndim %d shape[0] %lld", kernel, name,
                        (long long)C, t->ndim, t->ndim > 0 ? (long long)t->shape[0] : -1LL);
    if ((st = it_cpu_check_dtype(kernel, name, t, "x", dt))) return st;
    if (output && t->strides[0] == 0 && C > 1)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.strides[0] is 0", kernel, name);
    return IT_OK;
}
