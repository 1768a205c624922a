/* TEST DOUBLE. Embedding lookup and top-k of the CPU stand-in of libcnnl.so.
 *
 * What cnnl.h leaves to the device, the stand-in decides visibly: an index outside
 * [0, rows of filter) faults the queue (cnnl.h: indices "should be less than the first
 * dimension of filter"); top-k on NaN input faults it on a part before MLU500 ("NaN is
 * supported only on MLU500 series"); unsorted top-k returns the chosen elements in index
 * order, and without lower_index_first equal values come higher index first, so a caller
 * relying on an order it did not ask for is caught. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"

static int64_t load_index(cnnlDataType_t dt, const void *p, int64_t off) {
    if (dt == CNNL_DTYPE_INT32) {
        int32_t v;
        memcpy(&v, (const char *)p + off * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, (const char *)p + off * 8, 8);
    return v;
}

/* ---------------------------------------------------------------- embedding */

typedef struct emb_job {
    cs_tensor filter, indices, out;
    int padding_idx;
    const void *pf, *pi;
    void *po;
} emb_job;

static bool emb_run(void *arg) {
    emb_job *j = arg;
    if (!cs_open(j->pf, &j->filter) || !cs_open(j->pi, &j->indices) || !cs_open(j->po, &j->out)) return false;
    int64_t V = j->filter.dims[0], C = j->filter.dims[1], n = cs_numel(&j->indices);
    int64_t w = (int64_t)cs_dtype_size(j->out.dtype);
    for (int64_t p = 0; p < n; p++) {
        int64_t idx = load_index(j->indices.dtype, j->pi, cs_offset(&j->indices, p));
        if (idx < 0 || idx >= V) {
            fprintf(stderr, "cnnl stand-in: cnnlEmbeddingForward_v2: index %lld outside [0, %lld)\n", (long long)idx,
                    (long long)V);
            return false;
        }
        for (int64_t c = 0; c < C; c++) {
            char *dst = (char *)j->po + cs_offset(&j->out, p * C + c) * w;
            if (idx == j->padding_idx)
                memset(dst, 0, (size_t)w);
            else
                memcpy(dst, (const char *)j->pf + (idx * j->filter.strides[0] + c * j->filter.strides[1]) * w,
                       (size_t)w);
        }
    }
    return true;
}

/* output = filter rows picked by indices, shaped indices' dims + [C]; rows whose index is
 * padding_idx (> -1) are zeros. max_norm and norm_type "needs to be set as null". */
STANDIN_EXPORT cnnlStatus_t cnnlEmbeddingForward_v2(cnnlHandle_t handle, const cnnlTensorDescriptor_t filter_desc,
                                                    const void *filter, const cnnlTensorDescriptor_t indices_desc,
                                                    const void *indices, const int padding_idx, const float *max_norm,
                                                    const float *norm_type, const cnnlTensorDescriptor_t output_desc,
                                                    void *output) {
    const char *fn = "cnnlEmbeddingForward_v2";
    CS_REQUIRE(handle && filter_desc && indices_desc && output_desc, CNNL_STATUS_BAD_PARAM, fn,
               "NULL handle or descriptor");
    CS_REQUIRE(!max_norm && !norm_type, CNNL_STATUS_NOT_SUPPORTED, fn, "max_norm and norm_type must be NULL");
    CS_REQUIRE(filter_desc->layout == CNNL_LAYOUT_ARRAY && indices_desc->layout == CNNL_LAYOUT_ARRAY &&
                   output_desc->layout == CNNL_LAYOUT_ARRAY,
               CNNL_STATUS_BAD_PARAM, fn, "layouts must be CNNL_LAYOUT_ARRAY");
    CS_REQUIRE(filter_desc->ndim == 2, CNNL_STATUS_BAD_PARAM, fn, "filter must have two dims");
    CS_REQUIRE(indices_desc->dtype == CNNL_DTYPE_INT32 || indices_desc->dtype == CNNL_DTYPE_INT64,
               CNNL_STATUS_BAD_PARAM, fn, "indices must be int32 or int64");
    size_t w = cs_dtype_size(filter_desc->dtype);
    CS_REQUIRE(filter_desc->dtype == output_desc->dtype && (w == 1 || w == 2 || w == 4 || w == 8),
               CNNL_STATUS_BAD_PARAM, fn, "filter and output: one type of 1, 2, 4 or 8 bytes");
    bool shape =
        output_desc->ndim == indices_desc->ndim + 1 && output_desc->dims[indices_desc->ndim] == filter_desc->dims[1];
    for (int i = 0; shape && i < indices_desc->ndim; i++) shape = output_desc->dims[i] == indices_desc->dims[i];
    CS_REQUIRE(shape, CNNL_STATUS_BAD_PARAM, fn, "output is not indices' dims followed by filter's columns");
    CS_REQUIRE(padding_idx >= -1 && padding_idx < filter_desc->dims[0], CNNL_STATUS_BAD_PARAM, fn,
               "padding_idx outside [-1, filter rows)");
    if (cs_numel(output_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(filter && indices && output, CNNL_STATUS_BAD_PARAM, fn, "filter, indices or output is NULL");
    emb_job *j = malloc(sizeof *j);
    if (j) *j = (emb_job){*filter_desc, *indices_desc, *output_desc, padding_idx, filter, indices, output};
    return cs_submit(handle, fn, emb_run, j);
}

/* ---------------------------------------------------------------- top-k */

/* The index types cnnl.h lists for each input type. */
static bool topk_types(cnnlDataType_t in, cnnlDataType_t ix) {
    bool i16 = ix == CNNL_DTYPE_INT16 || ix == CNNL_DTYPE_UINT16;
    bool i32 = ix == CNNL_DTYPE_INT32 || ix == CNNL_DTYPE_UINT32;
    bool i64 = ix == CNNL_DTYPE_INT64;
    switch (in) {
    case CNNL_DTYPE_UINT8:
    case CNNL_DTYPE_INT8: return i16 || i32;
    case CNNL_DTYPE_INT16: return i32;
    case CNNL_DTYPE_HALF: return i16 || i32 || i64;
    case CNNL_DTYPE_INT32:
    case CNNL_DTYPE_FLOAT:
    case CNNL_DTYPE_BFLOAT16: return i32 || i64;
    case CNNL_DTYPE_INT64: return ix == CNNL_DTYPE_INT32 || i64;
    default: return false;
    }
}

static int64_t index_max(cnnlDataType_t ix) {
    switch (ix) {
    case CNNL_DTYPE_INT16: return INT16_MAX;
    case CNNL_DTYPE_UINT16: return UINT16_MAX;
    case CNNL_DTYPE_INT32: return INT32_MAX;
    case CNNL_DTYPE_UINT32: return UINT32_MAX;
    default: return INT64_MAX;
    }
}

static cnnlStatus_t topk_check(const char *fn, cnnlHandle_t h, const cs_tensor *in, int k, int dim,
                               const cs_tensor *out, const cs_tensor *ix) {
    CS_REQUIRE(h && in && out && ix, CNNL_STATUS_BAD_PARAM, fn, "NULL handle or descriptor");
    CS_REQUIRE(dim >= 0 && dim < in->ndim, CNNL_STATUS_BAD_PARAM, fn, "dim outside [0, input's rank)");
    CS_REQUIRE(k >= 0 && k <= in->dims[dim], CNNL_STATUS_BAD_PARAM, fn, "k outside [0, input's size on dim]");
    bool shape = out->ndim == in->ndim && cs_same_shape(out, ix);
    for (int i = 0; shape && i < in->ndim; i++) shape = out->dims[i] == (i == dim ? k : in->dims[i]);
    CS_REQUIRE(shape, CNNL_STATUS_BAD_PARAM, fn, "output and index must be input's shape with k on dim");
    CS_REQUIRE(out->dtype == in->dtype && topk_types(in->dtype, ix->dtype), CNNL_STATUS_BAD_PARAM, fn,
               "unsupported combination of data types");
    CS_REQUIRE(in->dtype != CNNL_DTYPE_BFLOAT16 || cs_mlu500(), CNNL_STATUS_NOT_SUPPORTED, fn,
               "bfloat16 is supported only on MLU500 series");
    CS_REQUIRE(in->dims[dim] == 0 || in->dims[dim] - 1 <= index_max(ix->dtype), CNNL_STATUS_BAD_PARAM, fn,
               "the index type cannot hold every index on dim");
    return CNNL_STATUS_SUCCESS;
}

/* Scratch for one line's candidates; never 0 for a non-empty result. */
static size_t topk_workspace(const cs_tensor *in, const cs_tensor *out, int dim) {
    return cs_numel(out) ? (size_t)in->dims[dim] * 2 * sizeof(int64_t) : 0;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetTopKTensorWorkspaceSize(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc,
                                                           const int k, const int dim, const bool largest,
                                                           const cnnlTensorDescriptor_t output_desc,
                                                           const cnnlTensorDescriptor_t index_desc,
                                                           size_t *workspace_size) {
    const char *fn = "cnnlGetTopKTensorWorkspaceSize";
    (void)largest;
    cnnlStatus_t st = topk_check(fn, handle, input_desc, k, dim, output_desc, index_desc);
    if (st != CNNL_STATUS_SUCCESS) return st;
    CS_REQUIRE(workspace_size, CNNL_STATUS_BAD_PARAM, fn, "workspace_size is NULL");
    *workspace_size = topk_workspace(input_desc, output_desc, dim);
    return CNNL_STATUS_SUCCESS;
}

/* One candidate, ordered by (cls, fkey, ikey, tie) ascending: best first. */
typedef struct cand {
    int cls;      /* NaN: -1 when largest (first), 1 when smallest (last); else 0 */
    double fkey;  /* float input: -v when largest, v when smallest */
    int64_t ikey; /* integer input, the same (~v reverses the order without overflow) */
    int64_t tie;  /* idx with lower_index_first, -idx without */
    int64_t idx;
} cand;

static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->cls != b->cls) return a->cls < b->cls ? -1 : 1;
    if (a->fkey != b->fkey) return a->fkey < b->fkey ? -1 : 1;
    if (a->ikey != b->ikey) return a->ikey < b->ikey ? -1 : 1;
    return a->tie < b->tie ? -1 : a->tie > b->tie;
}

static int cmp_idx(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

typedef struct topk_job {
    cs_tensor in, out, ix;
    int k, dim;
    bool largest, sorted, lower_first;
    const void *pin;
    void *pout, *pix, *ws;
    size_t ws_bytes;
} topk_job;

static int64_t load_intval(cnnlDataType_t dt, const char *p) {
    switch (dt) {
    case CNNL_DTYPE_INT8: return *(const int8_t *)p;
    case CNNL_DTYPE_UINT8: return *(const uint8_t *)p;
    case CNNL_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    default: return load_index(dt, p, 0);
    }
}

static void store_index(cnnlDataType_t dt, char *p, int64_t v) {
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    size_t w = cs_dtype_size(dt);
    if (w == 2)
        memcpy(p, &u16, 2);
    else if (w == 4)
        memcpy(p, &u32, 4);
    else
        memcpy(p, &v, 8);
}

/* Fills c with line `base` (element offsets step apart) of n candidates; false on NaN where
 * the part does not support it. */
static bool load_line(const topk_job *j, int64_t base, int64_t step, int64_t n, cand *c) {
    size_t w = cs_dtype_size(j->in.dtype);
    for (int64_t i = 0; i < n; i++) {
        const char *p = (const char *)j->pin + (base + i * step) * (int64_t)w;
        cand x = {0, 0.0, 0, j->lower_first ? i : -i, i};
        if (!cs_is_float(j->in.dtype)) {
            int64_t v = load_intval(j->in.dtype, p);
            x.ikey = j->largest ? ~v : v;
        } else {
            float v = cs_load(j->in.dtype, p, 0);
            if (isnan(v) && !cs_mlu500()) {
                fprintf(stderr, "cnnl stand-in: cnnlTopKTensor_v3: NaN input is supported only on MLU500 series\n");
                return false;
            }
            if (isnan(v))
                x.cls = j->largest ? -1 : 1;
            else
                x.fkey = j->largest ? -(double)v : (double)v;
        }
        c[i] = x;
    }
    return true;
}

/* Offset in t of line l: the l-th position, row-major, over every dim of `shape` but dim. */
static int64_t line_offset(const cs_tensor *shape, const cs_tensor *t, int dim, int64_t l) {
    int64_t off = 0;
    for (int d = shape->ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        off += (l % shape->dims[d]) * t->strides[d];
        l /= shape->dims[d];
    }
    return off;
}

static bool topk_run(void *arg) {
    topk_job *j = arg;
    if (!cs_open_workspace(j->ws, j->ws_bytes) || !cs_open(j->pin, &j->in) || !cs_open(j->pout, &j->out) ||
        !cs_open(j->pix, &j->ix))
        return false;
    int64_t n = j->in.dims[j->dim], lines = cs_numel(&j->out) / j->k;
    int64_t w = (int64_t)cs_dtype_size(j->in.dtype), wi = (int64_t)cs_dtype_size(j->ix.dtype);
    cand *c = malloc(sizeof *c * (size_t)n);
    if (!c) return fprintf(stderr, "cnnl stand-in: cnnlTopKTensor_v3: out of host memory\n"), false;
    bool ok = true;
    for (int64_t l = 0; ok && l < lines; l++) {
        int64_t ib = line_offset(&j->in, &j->in, j->dim, l), ob = line_offset(&j->in, &j->out, j->dim, l);
        int64_t xb = line_offset(&j->in, &j->ix, j->dim, l);
        ok = load_line(j, ib, j->in.strides[j->dim], n, c);
        if (!ok) break;
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        if (!j->sorted) qsort(c, (size_t)j->k, sizeof *c, cmp_idx);
        for (int64_t t = 0; t < j->k; t++) {
            memcpy((char *)j->pout + (ob + t * j->out.strides[j->dim]) * w,
                   (const char *)j->pin + (ib + c[t].idx * j->in.strides[j->dim]) * w, (size_t)w);
            store_index(j->ix.dtype, (char *)j->pix + (xb + t * j->ix.strides[j->dim]) * wi, c[t].idx);
        }
    }
    free(c);
    return ok;
}

/* NaN ranks above every number (torch.topk, cnnl.h's reference): first when largest, last
 * when smallest; equal values lower index first with lower_index_first. */
STANDIN_EXPORT cnnlStatus_t cnnlTopKTensor_v3(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc,
                                              const void *input, const int k, const int dim, const bool largest,
                                              const bool sorted, const bool lower_index_first, void *workspace,
                                              const size_t workspace_size, const cnnlTensorDescriptor_t output_desc,
                                              void *output, const cnnlTensorDescriptor_t index_desc, void *index) {
    const char *fn = "cnnlTopKTensor_v3";
    cnnlStatus_t st = topk_check(fn, handle, input_desc, k, dim, output_desc, index_desc);
    if (st != CNNL_STATUS_SUCCESS) return st;
    size_t need = topk_workspace(input_desc, output_desc, dim);
    CS_REQUIRE(workspace_size >= need, CNNL_STATUS_BAD_PARAM, fn,
               "workspace_size is less than cnnlGetTopKTensorWorkspaceSize returned");
    CS_REQUIRE(!need || workspace, CNNL_STATUS_BAD_PARAM, fn, "workspace is NULL");
    if (cs_numel(output_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(input && output && index, CNNL_STATUS_BAD_PARAM, fn, "input, output or index is NULL");
    topk_job *j = malloc(sizeof *j);
    if (j)
        *j = (topk_job){*input_desc,       *output_desc, *index_desc, k,     dim,       largest, sorted,
                        lower_index_first, input,        output,      index, workspace, need};
    return cs_submit(handle, fn, topk_run, j);
}
