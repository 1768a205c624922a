/* TEST DOUBLE. The CPU stand-in of Cambricon's libcnnl.so: handles, error strings, the
 * version, tensor descriptors, cnnlCopy, and what the other cnnl*.c files share
 * (cnnl_standin.h). It behaves as CNNL 1.28.6's cnnl.h documents the calls, for the subset
 * the MLU backend uses; it is not Cambricon's library and proves nothing about the device's
 * rounding or speed (docs/backends/mlu.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"

STANDIN_EXPORT STANDIN_MARKER_ATTR const char it_cambricon_test_double[] =
    "CPU test double of CNNL (infinitrain-c tests), not Cambricon's library";

/* ---------------------------------------------------------------- handles, status, version */

static const char *status_name(cnnlStatus_t st) {
    switch (st) {
    case CNNL_STATUS_SUCCESS: return "CNNL_STATUS_SUCCESS";
    case CNNL_STATUS_NOT_INITIALIZED: return "CNNL_STATUS_NOT_INITIALIZED";
    case CNNL_STATUS_ALLOC_FAILED: return "CNNL_STATUS_ALLOC_FAILED";
    case CNNL_STATUS_BAD_PARAM: return "CNNL_STATUS_BAD_PARAM";
    case CNNL_STATUS_INTERNAL_ERROR: return "CNNL_STATUS_INTERNAL_ERROR";
    case CNNL_STATUS_ARCH_MISMATCH: return "CNNL_STATUS_ARCH_MISMATCH";
    case CNNL_STATUS_EXECUTION_FAILED: return "CNNL_STATUS_EXECUTION_FAILED";
    case CNNL_STATUS_NOT_SUPPORTED: return "CNNL_STATUS_NOT_SUPPORTED";
    case CNNL_STATUS_NUMERICAL_OVERFLOW: return "CNNL_STATUS_NUMERICAL_OVERFLOW";
    default: return NULL;
    }
}

/* The status's own name; an unknown value gives "CNNL_STATUS_BAD_PARAM" (cnnl.h). */
STANDIN_EXPORT const char *cnnlGetErrorString(cnnlStatus_t status) {
    const char *name = status_name(status);
    return name ? name : "CNNL_STATUS_BAD_PARAM";
}

STANDIN_EXPORT void cnnlGetLibVersion(int *major, int *minor, int *patch) {
    if (major) *major = 1;
    if (minor) *minor = 28;
    if (patch) *patch = 6;
}

cnnlStatus_t cs_refuse(const char *fn, cnnlStatus_t st, const char *why) {
    fprintf(stderr, "cnnl stand-in: %s: %s: %s\n", fn, status_name(st), why);
    return st;
}

bool cs_mlu500(void) { return standin_arch() >= 500; }

STANDIN_EXPORT cnnlStatus_t cnnlCreate(cnnlHandle_t *handle) {
    CS_REQUIRE(handle, CNNL_STATUS_BAD_PARAM, "cnnlCreate", "handle is NULL");
    *handle = calloc(1, sizeof **handle);
    return *handle ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

STANDIN_EXPORT cnnlStatus_t cnnlDestroy(cnnlHandle_t handle) {
    CS_REQUIRE(handle, CNNL_STATUS_BAD_PARAM, "cnnlDestroy", "handle is NULL");
    free(handle);
    return CNNL_STATUS_SUCCESS;
}

/* NULL selects the default queue (cnnl.h); any other queue must be live. */
STANDIN_EXPORT cnnlStatus_t cnnlSetQueue(cnnlHandle_t handle, cnrtQueue_t queue) {
    CS_REQUIRE(handle, CNNL_STATUS_BAD_PARAM, "cnnlSetQueue", "handle is NULL");
    CS_REQUIRE(!queue || standin_queue_device(queue) >= 0, CNNL_STATUS_BAD_PARAM, "cnnlSetQueue",
               "queue is not a live CNRT queue");
    handle->queue = queue;
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetQueue(cnnlHandle_t handle, cnrtQueue_t *queue) {
    CS_REQUIRE(handle && queue, CNNL_STATUS_BAD_PARAM, "cnnlGetQueue", "handle or queue is NULL");
    *queue = handle->queue;
    return CNNL_STATUS_SUCCESS;
}

static void free_job(void *job) { free(job); }

cnnlStatus_t cs_submit(cnnlHandle_t h, const char *fn, standin_work_fn run, void *job) {
    if (!job) return cs_refuse(fn, CNNL_STATUS_ALLOC_FAILED, "out of host memory");
    if (standin_enqueue(h->queue, run, job, free_job) != cnrtSuccess) {
        free(job);
        return cs_refuse(fn, CNNL_STATUS_EXECUTION_FAILED, "the handle's queue refused the work");
    }
    return CNNL_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- tensor descriptors */

size_t cs_dtype_size(cnnlDataType_t dt) {
    switch (dt) {
    case CNNL_DTYPE_INT8:
    case CNNL_DTYPE_UINT8:
    case CNNL_DTYPE_BOOL:
    case CNNL_DTYPE_INT4X2: /* two 4-bit integers in one byte */
    case CNNL_DTYPE_FLOAT8_E4M3FN:
    case CNNL_DTYPE_FLOAT8_E5M2: return 1;
    case CNNL_DTYPE_HALF:
    case CNNL_DTYPE_BFLOAT16:
    case CNNL_DTYPE_INT16:
    case CNNL_DTYPE_UINT16: return 2;
    case CNNL_DTYPE_FLOAT:
    case CNNL_DTYPE_INT31: /* 31 significant bits in a 32-bit word */
    case CNNL_DTYPE_INT32:
    case CNNL_DTYPE_UINT32:
    case CNNL_DTYPE_COMPLEX_HALF: return 4;
    case CNNL_DTYPE_INT64:
    case CNNL_DTYPE_UINT64:
    case CNNL_DTYPE_DOUBLE:
    case CNNL_DTYPE_COMPLEX_FLOAT: return 8;
    case CNNL_DTYPE_COMPLEX_DOUBLE: return 16;
    default: return 0;
    }
}

static bool layout_valid(cnnlTensorLayout_t layout) {
    return (int)layout >= (int)CNNL_LAYOUT_NCHW && (int)layout <= (int)CNNL_LAYOUT_NGC;
}

/* A new descriptor is in cnnlResetTensorDescriptor's state: ARRAY, FLOAT, no dims. */
STANDIN_EXPORT cnnlStatus_t cnnlCreateTensorDescriptor(cnnlTensorDescriptor_t *desc) {
    CS_REQUIRE(desc, CNNL_STATUS_BAD_PARAM, "cnnlCreateTensorDescriptor", "desc is NULL");
    *desc = calloc(1, sizeof **desc);
    if (!*desc) return CNNL_STATUS_ALLOC_FAILED;
    (*desc)->layout = CNNL_LAYOUT_ARRAY;
    (*desc)->dtype = CNNL_DTYPE_FLOAT;
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlDestroyTensorDescriptor(cnnlTensorDescriptor_t desc) {
    CS_REQUIRE(desc, CNNL_STATUS_BAD_PARAM, "cnnlDestroyTensorDescriptor", "desc is NULL");
    free(desc);
    return CNNL_STATUS_SUCCESS;
}

/* dimNb 0 is a scalar; up to CNNL_DIM_MAX dims, none negative (cnnlSetTensorDescriptor's
 * note). Negative strides are refused: the stand-in does not model them. */
STANDIN_EXPORT cnnlStatus_t cnnlSetTensorDescriptorEx(cnnlTensorDescriptor_t desc, cnnlTensorLayout_t layout,
                                                      cnnlDataType_t dtype, int dimNb, const int dimSize[],
                                                      const int dimStride[]) {
    const char *fn = "cnnlSetTensorDescriptorEx";
    CS_REQUIRE(desc, CNNL_STATUS_BAD_PARAM, fn, "desc is NULL");
    CS_REQUIRE(dimNb >= 0 && dimNb <= CS_DIM_MAX, CNNL_STATUS_BAD_PARAM, fn, "dimNb outside [0, CNNL_DIM_MAX]");
    CS_REQUIRE(dimNb == 0 || (dimSize && dimStride), CNNL_STATUS_BAD_PARAM, fn, "dimSize or dimStride is NULL");
    CS_REQUIRE(layout_valid(layout), CNNL_STATUS_BAD_PARAM, fn, "layout is not a cnnlTensorLayout_t");
    CS_REQUIRE(cs_dtype_size(dtype) > 0, CNNL_STATUS_BAD_PARAM, fn, "dtype is not a valid cnnlDataType_t");
    for (int i = 0; i < dimNb; i++) {
        CS_REQUIRE(dimSize[i] >= 0, CNNL_STATUS_BAD_PARAM, fn, "negative dimension");
        CS_REQUIRE(dimStride[i] >= 0, CNNL_STATUS_BAD_PARAM, fn, "negative stride (not modelled)");
    }
    desc->layout = layout;
    desc->dtype = dtype;
    desc->ndim = dimNb;
    for (int i = 0; i < dimNb; i++) desc->dims[i] = dimSize[i], desc->strides[i] = dimStride[i];
    return CNNL_STATUS_SUCCESS;
}

int64_t cs_numel(const cs_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

size_t cs_span(const cs_tensor *t) {
    if (cs_numel(t) == 0) return 0;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (int64_t)(t->dims[i] - 1) * t->strides[i];
    return (size_t)(last + 1) * cs_dtype_size(t->dtype);
}

bool cs_same_shape(const cs_tensor *a, const cs_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

bool cs_contiguous(const cs_tensor *t) {
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != 1 && t->strides[i] != want) return false;
        want *= t->dims[i];
    }
    return true;
}

int64_t cs_offset(const cs_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->dims[d]) * t->strides[d];
        i /= t->dims[d];
    }
    return off;
}

bool cs_open(const void *p, const cs_tensor *t) {
    size_t bytes = cs_span(t);
    return bytes == 0 || standin_open(p, bytes);
}

bool cs_open_workspace(void *ws, size_t bytes) {
    if (bytes == 0) return true;
    if (!standin_open(ws, bytes)) return false;
    memset(ws, 0xff, bytes);
    return true;
}

int64_t cs_inner(const cs_tensor *t, int axis) {
    int64_t n = 1;
    for (int i = axis; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

int64_t cs_outer(const cs_tensor *t, int axis) {
    int64_t n = 1;
    for (int i = 0; i < axis; i++) n *= t->dims[i];
    return n;
}

bool cs_row_shape(const cs_tensor *r, const cs_tensor *x, int axis) {
    if (r->ndim != axis && r->ndim != x->ndim) return false;
    for (int i = 0; i < r->ndim; i++)
        if (r->dims[i] != (i < axis ? x->dims[i] : 1)) return false;
    return true;
}

bool cs_col_shape(const cs_tensor *c, const cs_tensor *x, int axis) {
    int lead = c->ndim - (x->ndim - axis); /* leading dims of c before x's normalized ones */
    if (lead != 0 && lead != axis) return false;
    for (int i = 0; i < c->ndim; i++)
        if (c->dims[i] != (i < lead ? 1 : x->dims[axis + i - lead])) return false;
    return true;
}

/* ---------------------------------------------------------------- half, bfloat16, float */

float cs_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalize */
        int e = 113;
        while (!(man & 0x400)) man <<= 1, e--;
        u = sign | ((uint32_t)e << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* m >> s rounded to nearest, ties to even. */
static uint32_t shift_rne(uint32_t m, int s) {
    if (s >= 32) return 0;
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t cs_half_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff); /* NaN stays NaN, quiet */
    if (a >= 0x477ff000) return sign | 0x7c00;                                /* >= 65520: Inf */
    if (a < 0x38800000) {                                                     /* below 2^-14: subnormal */
        int e = (int)(a >> 23);
        uint32_t m = (a & 0x7fffff) | (e ? 0x800000u : 0);
        return sign | (uint16_t)shift_rne(m, 126 - (e ? e : 1)); /* in units of 2^-24 */
    }
    return sign | (uint16_t)shift_rne(a - (112u << 23), 13); /* rebias 127 -> 15; a carry bumps the exponent */
}

float cs_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t cs_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

bool cs_is_float(cnnlDataType_t dt) {
    return dt == CNNL_DTYPE_HALF || dt == CNNL_DTYPE_BFLOAT16 || dt == CNNL_DTYPE_FLOAT;
}

float cs_load(cnnlDataType_t dt, const void *p, int64_t off) {
    if (dt == CNNL_DTYPE_FLOAT) {
        float f;
        memcpy(&f, (const char *)p + off * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + off * 2, 2);
    return dt == CNNL_DTYPE_HALF ? cs_half_to_float(h) : cs_bf16_to_float(h);
}

void cs_store(cnnlDataType_t dt, void *p, int64_t off, float v) {
    if (dt == CNNL_DTYPE_FLOAT) {
        memcpy((char *)p + off * 4, &v, 4);
        return;
    }
    uint16_t h = dt == CNNL_DTYPE_HALF ? cs_half_from_float(v) : cs_bf16_from_float(v);
    memcpy((char *)p + off * 2, &h, 2);
}

/* ---------------------------------------------------------------- cnnlCopy */

typedef struct copy_job {
    cs_tensor in, out;
    const void *x;
    void *y;
} copy_job;

static bool copy_run(void *arg) {
    copy_job *j = arg;
    if (!cs_open(j->x, &j->in) || !cs_open(j->y, &j->out)) return false;
    size_t w = cs_dtype_size(j->in.dtype);
    int64_t n = cs_numel(&j->in);
    for (int64_t i = 0; i < n; i++)
        memmove((char *)j->y + cs_offset(&j->out, i) * (int64_t)w,
                (const char *)j->x + cs_offset(&j->in, i) * (int64_t)w, w);
    return true;
}

/* Strided input to strided output; same dtype, layout and shape (cnnl.h's Requirements). */
STANDIN_EXPORT cnnlStatus_t cnnlCopy(cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc, const void *input,
                                     const cnnlTensorDescriptor_t output_desc, void *output) {
    const char *fn = "cnnlCopy";
    CS_REQUIRE(handle && input_desc && output_desc, CNNL_STATUS_BAD_PARAM, fn, "NULL handle or descriptor");
    CS_REQUIRE(input_desc->dtype == output_desc->dtype, CNNL_STATUS_BAD_PARAM, fn, "input and output dtypes differ");
    CS_REQUIRE(input_desc->layout == output_desc->layout, CNNL_STATUS_BAD_PARAM, fn, "input and output layouts differ");
    CS_REQUIRE(cs_same_shape(input_desc, output_desc), CNNL_STATUS_BAD_PARAM, fn, "input and output shapes differ");
    if (cs_numel(input_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(input && output, CNNL_STATUS_BAD_PARAM, fn, "input or output is NULL");
    copy_job *j = malloc(sizeof *j);
    if (j) *j = (copy_job){*input_desc, *output_desc, input, output};
    return cs_submit(handle, fn, copy_run, j);
}
