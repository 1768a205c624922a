/* TEST DOUBLE. Batched matrix multiplication of the CPU stand-in of libcnnl.so:
 * cnnlBatchMatMulBCast_v2 with its descriptor, algorithm and heuristic calls.
 *
 *   c[batch] = alpha * op(a)[batch'] op(b)[batch''] (+ beta * c[batch] with USE_BETA)
 *
 * As cnnl.h documents it: a, b, c of one floating type (half, float; bfloat16 on MLU500
 * only); at least two dims, the last two the matrix, the others broadcast numpy-style
 * (aligned from the right, size 1 against any size); descriptor strides read only when
 * CNNL_MATMUL_USE_STRIDE is on, and then TRANSA/TRANSB are ignored (the strides say it);
 * CNNL_MATMUL_DESC_COMPUTE_TYPE must be set; TF32 is on by default.
 *
 * Arithmetic: the operands are widened to float (fp32 ones first rounded to TF32, 10
 * mantissa bits to nearest even, when CNNL_MATMUL_ALLOW_TF32 is on), each element of the
 * product is accumulated in float in k order from 0, then scaled by alpha, beta*c added,
 * and the result rounded once to c's type. A real MLU accumulates in another order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"

struct cnnlMatMulStruct {
    bool compute_type_set;
    int32_t compute_type; /* a cnnlDataType_t */
    int32_t trans_a, trans_b, use_beta, allow_tf32, use_stride;
};

struct cnnlMatMulAlgoStruct {
    int id;
};

/* Filled by cnnlGetBatchMatMulAlgoHeuristic for one set of descriptors. */
struct cnnlMatMulHeuristicResult {
    bool filled;
    size_t workspace;
};

/* ---------------------------------------------------------------- descriptors, algorithms */

STANDIN_EXPORT cnnlStatus_t cnnlMatMulDescCreate(cnnlMatMulDescriptor_t *matmul_desc) {
    CS_REQUIRE(matmul_desc, CNNL_STATUS_BAD_PARAM, "cnnlMatMulDescCreate", "matmul_desc is NULL");
    *matmul_desc = calloc(1, sizeof **matmul_desc);
    if (!*matmul_desc) return CNNL_STATUS_ALLOC_FAILED;
    (*matmul_desc)->allow_tf32 = 1; /* "TensorFloat-32 is enabled by default" */
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlMatMulDescDestroy(cnnlMatMulDescriptor_t matmul_desc) {
    CS_REQUIRE(matmul_desc, CNNL_STATUS_BAD_PARAM, "cnnlMatMulDescDestroy", "matmul_desc is NULL");
    free(matmul_desc);
    return CNNL_STATUS_SUCCESS;
}

/* Every attribute the stand-in takes is one int32; flags are 0 or 1. */
STANDIN_EXPORT cnnlStatus_t cnnlSetMatMulDescAttr(cnnlMatMulDescriptor_t matmul_desc, cnnlMatMulDescAttribute_t attr,
                                                  const void *buf, size_t size_in_bytes) {
    const char *fn = "cnnlSetMatMulDescAttr";
    CS_REQUIRE(matmul_desc && buf, CNNL_STATUS_BAD_PARAM, fn, "matmul_desc or buf is NULL");
    CS_REQUIRE(size_in_bytes == sizeof(int32_t), CNNL_STATUS_BAD_PARAM, fn, "size_in_bytes is not sizeof(int32_t)");
    int32_t v;
    memcpy(&v, buf, sizeof v);
    if (attr == CNNL_MATMUL_DESC_COMPUTE_TYPE) {
        CS_REQUIRE(cs_dtype_size((cnnlDataType_t)v) > 0, CNNL_STATUS_BAD_PARAM, fn, "compute type is not a dtype");
        matmul_desc->compute_type = v;
        matmul_desc->compute_type_set = true;
        return CNNL_STATUS_SUCCESS;
    }
    int32_t *flag = attr == CNNL_MATMUL_DESC_TRANSA   ? &matmul_desc->trans_a
                    : attr == CNNL_MATMUL_DESC_TRANSB ? &matmul_desc->trans_b
                    : attr == CNNL_MATMUL_USE_BETA    ? &matmul_desc->use_beta
                    : attr == CNNL_MATMUL_ALLOW_TF32  ? &matmul_desc->allow_tf32
                    : attr == CNNL_MATMUL_USE_STRIDE  ? &matmul_desc->use_stride
                                                      : NULL;
    /* TRANSC and SCALE_TYPE are "not supported now"; TRANSC 0 is its default */
    if (attr == CNNL_MATMUL_DESC_TRANSC && v == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(flag, CNNL_STATUS_BAD_PARAM, fn, "attribute not supported");
    CS_REQUIRE(v == 0 || v == 1, CNNL_STATUS_BAD_PARAM, fn, "flag attribute is not 0 or 1");
    *flag = v;
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlMatMulAlgoCreate(cnnlMatMulAlgo_t *algo) {
    CS_REQUIRE(algo, CNNL_STATUS_BAD_PARAM, "cnnlMatMulAlgoCreate", "algo is NULL");
    *algo = calloc(1, sizeof **algo);
    return *algo ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

STANDIN_EXPORT cnnlStatus_t cnnlMatMulAlgoDestroy(cnnlMatMulAlgo_t algo) {
    CS_REQUIRE(algo, CNNL_STATUS_BAD_PARAM, "cnnlMatMulAlgoDestroy", "algo is NULL");
    free(algo);
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlCreateMatMulHeuristicResult(cnnlMatMulHeuristicResult_t *result) {
    CS_REQUIRE(result, CNNL_STATUS_BAD_PARAM, "cnnlCreateMatMulHeuristicResult", "result is NULL");
    *result = calloc(1, sizeof **result);
    return *result ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

STANDIN_EXPORT cnnlStatus_t cnnlDestroyMatMulHeuristicResult(cnnlMatMulHeuristicResult_t result) {
    CS_REQUIRE(result, CNNL_STATUS_BAD_PARAM, "cnnlDestroyMatMulHeuristicResult", "result is NULL");
    free(result);
    return CNNL_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- geometry */

/* Element strides of the three operands, as the product walks them. */
typedef struct mm_geo {
    int64_t M, N, K, batches;
    int nb;                                                 /* batch dims of c */
    int bdims[CS_DIM_MAX];                                  /* c's batch dims */
    int64_t sa[CS_DIM_MAX], sb[CS_DIM_MAX], sc[CS_DIM_MAX]; /* per batch dim; 0 where broadcast */
    int64_t a_i, a_k, b_k, b_j, c_i, c_j;                   /* op(a)[i][k], op(b)[k][j], c[i][j] */
    cs_tensor a, b, c;                                      /* as read: dense without USE_STRIDE */
} mm_geo;

static cs_tensor dense(const cs_tensor *t) {
    cs_tensor d = *t;
    int64_t s = 1;
    for (int i = d.ndim - 1; i >= 0; i--) d.strides[i] = (int)s, s *= d.dims[i];
    return d;
}

/* t's size and stride on c's batch dim d (batch dims aligned from the right): size 1 and
 * stride 0 where t has no such dim or broadcasts it. */
static int batch_dim(const cs_tensor *t, int nb, int d, int64_t *stride) {
    int td = d - (nb - (t->ndim - 2));
    if (td < 0 || t->dims[td] == 1) return *stride = 0, 1;
    *stride = t->strides[td];
    return t->dims[td];
}

static cnnlStatus_t mm_geometry(const char *fn, const struct cnnlMatMulStruct *md, const cs_tensor *a,
                                const cs_tensor *b, const cs_tensor *c, mm_geo *g) {
    CS_REQUIRE(a->ndim >= 2 && b->ndim >= 2 && c->ndim >= 2, CNNL_STATUS_BAD_PARAM, fn,
               "a, b and c need at least two dims");
    CS_REQUIRE(a->dtype != CNNL_DTYPE_INT8 && a->dtype != CNNL_DTYPE_INT16, CNNL_STATUS_NOT_SUPPORTED, fn,
               "quantized (int8, int16) products are not modelled");
    CS_REQUIRE(cs_is_float(a->dtype) && a->dtype == b->dtype && a->dtype == c->dtype, CNNL_STATUS_BAD_PARAM, fn,
               "a, b and c must share one type: half, float or bfloat16");
    CS_REQUIRE(a->dtype != CNNL_DTYPE_BFLOAT16 || cs_mlu500(), CNNL_STATUS_ARCH_MISMATCH, fn,
               "bfloat16 is supported only on MLU500 series");
    CS_REQUIRE(md->compute_type_set, CNNL_STATUS_BAD_PARAM, fn,
               "CNNL_MATMUL_DESC_COMPUTE_TYPE must be set before doing matrix multiplication");
    CS_REQUIRE(md->compute_type == CNNL_DTYPE_FLOAT, CNNL_STATUS_NOT_SUPPORTED, fn,
               "the stand-in models compute type CNNL_DTYPE_FLOAT only");
    g->a = md->use_stride ? *a : dense(a);
    g->b = md->use_stride ? *b : dense(b);
    g->c = md->use_stride ? *c : dense(c);
    bool ta = md->trans_a && !md->use_stride, tb = md->trans_b && !md->use_stride;
    int ar = g->a.ndim - 2, br = g->b.ndim - 2, cr = g->c.ndim - 2; /* row dims */
    g->M = g->a.dims[ar + ta], g->K = g->a.dims[ar + !ta];
    g->a_i = g->a.strides[ar + ta], g->a_k = g->a.strides[ar + !ta];
    g->b_k = g->b.strides[br + tb], g->b_j = g->b.strides[br + !tb];
    g->N = g->b.dims[br + !tb];
    g->c_i = g->c.strides[cr], g->c_j = g->c.strides[cr + 1];
    CS_REQUIRE(g->b.dims[br + tb] == g->K, CNNL_STATUS_BAD_PARAM, fn, "columns of op(a) differ from rows of op(b)");
    CS_REQUIRE(g->c.dims[cr] == g->M && g->c.dims[cr + 1] == g->N, CNNL_STATUS_BAD_PARAM, fn,
               "c's matrix is not op(a)'s rows by op(b)'s columns");
    g->nb = cr;
    CS_REQUIRE(cr == (ar > br ? ar : br), CNNL_STATUS_BAD_PARAM, fn, "c's batch rank is not a's and b's broadcast");
    g->batches = 1;
    for (int d = 0; d < cr; d++) {
        g->bdims[d] = g->c.dims[d];
        g->sc[d] = g->c.strides[d];
        g->batches *= g->bdims[d];
        int da = batch_dim(&g->a, cr, d, &g->sa[d]), db = batch_dim(&g->b, cr, d, &g->sb[d]);
        bool ok = (da == 1 || db == 1 || da == db) && g->bdims[d] == (da == 1 ? db : da);
        CS_REQUIRE(ok, CNNL_STATUS_BAD_PARAM, fn, "batch dims do not broadcast to c's");
    }
    if (md->use_stride) {
        CS_REQUIRE(g->c_j == 1 || g->N == 1, CNNL_STATUS_BAD_PARAM, fn, "c's last stride must be 1 with strides");
        CS_REQUIRE(g->c.ndim <= 3 || cs_contiguous(&g->c), CNNL_STATUS_BAD_PARAM, fn,
                   "c with more than three dims must be contiguous");
    }
    return CNNL_STATUS_SUCCESS;
}

/* The workspace asked for: one batch's op(a) and op(b) as floats. It is not 0 for a product
 * with K > 0, so a caller that skips the heuristic calls is caught; the job scribbles over
 * it and computes in host memory. */
static size_t mm_workspace(const mm_geo *g) {
    if (g->batches * g->M * g->N == 0) return 0;
    return (size_t)(g->M * g->K + g->K * g->N) * sizeof(float);
}

STANDIN_EXPORT cnnlStatus_t cnnlGetBatchMatMulAlgoHeuristic(
    cnnlHandle_t handle, const cnnlMatMulDescriptor_t bmm_bcast_desc, const cnnlTensorDescriptor_t a_desc,
    const cnnlTensorDescriptor_t b_desc, const cnnlTensorDescriptor_t c_desc, const cnnlMatMulPrefer_t preference,
    int requested_algo_count, cnnlMatMulHeuristicResult_t *result_array, int *return_algo_count) {
    const char *fn = "cnnlGetBatchMatMulAlgoHeuristic";
    CS_REQUIRE(handle && bmm_bcast_desc && a_desc && b_desc && c_desc, CNNL_STATUS_BAD_PARAM, fn,
               "NULL handle or descriptor");
    CS_REQUIRE(!preference, CNNL_STATUS_BAD_PARAM, fn, "preference is not supported and should be NULL");
    CS_REQUIRE(requested_algo_count == 1, CNNL_STATUS_BAD_PARAM, fn, "requested_algo_count only supports 1");
    CS_REQUIRE(result_array && result_array[0] && return_algo_count, CNNL_STATUS_BAD_PARAM, fn,
               "result_array or return_algo_count is NULL");
    mm_geo g;
    cnnlStatus_t st = mm_geometry(fn, bmm_bcast_desc, a_desc, b_desc, c_desc, &g);
    if (st != CNNL_STATUS_SUCCESS) return st;
    result_array[0]->filled = true;
    result_array[0]->workspace = mm_workspace(&g);
    *return_algo_count = 1;
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetBatchMatMulHeuristicResult(cnnlMatMulHeuristicResult_t result, cnnlMatMulAlgo_t algo,
                                                              size_t *workspace_size) {
    const char *fn = "cnnlGetBatchMatMulHeuristicResult";
    CS_REQUIRE(result && algo && workspace_size, CNNL_STATUS_BAD_PARAM, fn, "NULL result, algo or workspace_size");
    CS_REQUIRE(result->filled, CNNL_STATUS_BAD_PARAM, fn, "result was not filled by cnnlGetBatchMatMulAlgoHeuristic");
    algo->id = 1;
    *workspace_size = result->workspace;
    return CNNL_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- the product */

typedef struct mm_job {
    mm_geo g;
    bool tf32, use_beta;
    float alpha, beta;
    const void *a, *b;
    void *c, *ws;
    size_t ws_bytes;
} mm_job;

/* fp32 -> TF32: 10 mantissa bits, to nearest even; Inf and NaN unchanged. */
static float tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000) != 0x7f800000) u = (u + 0xfff + ((u >> 13) & 1)) & ~0x1fffu;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* op(t) of one batch, rows x cols with element (r, k) at base + r*sr + k*sk, as floats. */
static void widen(const mm_job *j, const void *base, int64_t rows, int64_t cols, int64_t sr, int64_t sk, float *out) {
    cnnlDataType_t dt = j->g.c.dtype;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            float v = cs_load(dt, base, r * sr + k * sk);
            out[r * cols + k] = j->tf32 ? tf32(v) : v;
        }
}

static void mm_batch(const mm_job *j, int64_t ao, int64_t bo, int64_t co, float *pa, float *pb, float *row) {
    const mm_geo *g = &j->g;
    cnnlDataType_t dt = g->c.dtype;
    size_t w = cs_dtype_size(dt);
    widen(j, (const char *)j->a + ao * (int64_t)w, g->M, g->K, g->a_i, g->a_k, pa);
    widen(j, (const char *)j->b + bo * (int64_t)w, g->K, g->N, g->b_k, g->b_j, pb);
    for (int64_t i = 0; i < g->M; i++) {
        for (int64_t n = 0; n < g->N; n++) row[n] = 0.0f;
        for (int64_t k = 0; k < g->K; k++) /* row[n] sums its products in k order */
            for (int64_t n = 0; n < g->N; n++) row[n] += pa[i * g->K + k] * pb[k * g->N + n];
        for (int64_t n = 0; n < g->N; n++) {
            int64_t at = co + i * g->c_i + n * g->c_j;
            float r = j->alpha * row[n];
            if (j->use_beta) r += j->beta * cs_load(dt, j->c, at);
            cs_store(dt, j->c, at, r);
        }
    }
}

static bool mm_run(void *arg) {
    mm_job *j = arg;
    const mm_geo *g = &j->g;
    if (!cs_open_workspace(j->ws, j->ws_bytes) || !cs_open(j->a, &g->a) || !cs_open(j->b, &g->b) ||
        !cs_open(j->c, &g->c))
        return false;
    float *pa = malloc(sizeof(float) * (size_t)(g->M * g->K + 1)); /* + 1: K may be 0 */
    float *pb = malloc(sizeof(float) * (size_t)(g->K * g->N + 1));
    float *row = malloc(sizeof(float) * (size_t)g->N);
    bool ok = pa && pb && row;
    if (!ok) fprintf(stderr, "cnnl stand-in: cnnlBatchMatMulBCast_v2: out of host memory\n");
    for (int64_t t = 0; ok && t < g->batches; t++) {
        int64_t ao = 0, bo = 0, co = 0, rest = t;
        for (int d = g->nb - 1; d >= 0; d--) {
            int64_t idx = rest % g->bdims[d];
            rest /= g->bdims[d];
            ao += idx * g->sa[d], bo += idx * g->sb[d], co += idx * g->sc[d];
        }
        mm_batch(j, ao, bo, co, pa, pb, row);
    }
    free(pa), free(pb), free(row);
    return ok;
}

/* alpha and beta are host floats (the scale type is the compute type, FLOAT). Without
 * USE_BETA, beta is not applied and c is only written; with it, beta 0 still reads c. */
STANDIN_EXPORT cnnlStatus_t cnnlBatchMatMulBCast_v2(cnnlHandle_t handle, const cnnlMatMulDescriptor_t bmm_bcast_desc,
                                                    cnnlMatMulAlgo_t algo, const void *alpha,
                                                    const cnnlTensorDescriptor_t a_desc, const void *a,
                                                    const cnnlTensorDescriptor_t b_desc, const void *b,
                                                    const void *beta, const cnnlTensorDescriptor_t c_desc, void *c,
                                                    void *workspace, size_t workspace_size) {
    const char *fn = "cnnlBatchMatMulBCast_v2";
    CS_REQUIRE(handle && bmm_bcast_desc && algo && a_desc && b_desc && c_desc, CNNL_STATUS_BAD_PARAM, fn,
               "NULL handle, descriptor or algo");
    CS_REQUIRE(alpha && beta, CNNL_STATUS_BAD_PARAM, fn, "alpha or beta is NULL");
    mm_job *j = calloc(1, sizeof *j);
    if (!j) return cs_refuse(fn, CNNL_STATUS_ALLOC_FAILED, "out of host memory");
    cnnlStatus_t st = mm_geometry(fn, bmm_bcast_desc, a_desc, b_desc, c_desc, &j->g);
    size_t need = st == CNNL_STATUS_SUCCESS ? mm_workspace(&j->g) : 0;
    if (st == CNNL_STATUS_SUCCESS && workspace_size < need)
        st = cs_refuse(fn, CNNL_STATUS_BAD_PARAM, "workspace_size is less than the heuristic result's");
    if (st == CNNL_STATUS_SUCCESS && need && !workspace) st = cs_refuse(fn, CNNL_STATUS_BAD_PARAM, "workspace is NULL");
    bool empty = j->g.batches * j->g.M * j->g.N == 0;
    if (st == CNNL_STATUS_SUCCESS && !empty && !(a && b && c))
        st = cs_refuse(fn, CNNL_STATUS_BAD_PARAM, "a, b or c is NULL");
    if (st != CNNL_STATUS_SUCCESS || empty) {
        free(j);
        return st;
    }
    j->tf32 = bmm_bcast_desc->allow_tf32 && j->g.c.dtype == CNNL_DTYPE_FLOAT;
    j->use_beta = bmm_bcast_desc->use_beta;
    memcpy(&j->alpha, alpha, sizeof j->alpha);
    memcpy(&j->beta, beta, sizeof j->beta);
    j->a = a, j->b = b, j->c = c, j->ws = workspace, j->ws_bytes = need;
    return cs_submit(handle, fn, mm_run, j);
}
