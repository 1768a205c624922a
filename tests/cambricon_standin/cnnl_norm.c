/* TEST DOUBLE. Softmax, LayerNorm and RMSNorm of the CPU stand-in of libcnnl.so, forward
 * and backward, as cnnl.h documents the calls (data type combinations, shapes of the saved
 * statistics, workspace). Sums run in float, in index order; a real MLU sums in another
 * order, so results agree with it to rounding, not bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cnnl_standin.h"

#define F CNNL_DTYPE_FLOAT
#define L CNNL_DTYPE_INVALID /* in a combination: the low type, half or (MLU500) bfloat16 */

/* True when `got` (n dtypes) matches one of the `combos` rows, L standing for one low type
 * throughout a row: half, or bfloat16 on MLU500. *arch is set when it would match with
 * bfloat16 on a part that is not MLU500. */
static bool combo_ok(const cnnlDataType_t *got, int n, const cnnlDataType_t (*combos)[8], int rows, bool *arch) {
    *arch = false;
    for (int r = 0; r < rows; r++) {
        cnnlDataType_t low = CNNL_DTYPE_INVALID;
        bool match = true;
        for (int i = 0; i < n && match; i++) {
            if (combos[r][i] != L) {
                match = got[i] == combos[r][i];
            } else {
                if (low == CNNL_DTYPE_INVALID) low = got[i];
                match = got[i] == low && (low == CNNL_DTYPE_HALF || low == CNNL_DTYPE_BFLOAT16);
            }
        }
        if (match && low == CNNL_DTYPE_BFLOAT16 && !cs_mlu500())
            *arch = true;
        else if (match)
            return true;
    }
    return false;
}

static cnnlStatus_t check_combo(const char *fn, const cnnlDataType_t *got, int n, const cnnlDataType_t (*combos)[8],
                                int rows, cnnlStatus_t arch_status) {
    bool arch;
    if (combo_ok(got, n, combos, rows, &arch)) return CNNL_STATUS_SUCCESS;
    if (arch) return cs_refuse(fn, arch_status, "bfloat16 is supported only on MLU500 series");
    return cs_refuse(fn, CNNL_STATUS_BAD_PARAM, "unsupported combination of data types");
}

/* The workspace a job scribbles over: as its Get*WorkspaceSize says, given too little, it
 * refuses. */
static cnnlStatus_t check_workspace(const char *fn, const void *ws, size_t size, size_t need) {
    CS_REQUIRE(size >= need, CNNL_STATUS_BAD_PARAM, fn, "workspace_size is less than Get*WorkspaceSize returned");
    CS_REQUIRE(!need || ws, CNNL_STATUS_BAD_PARAM, fn, "workspace is NULL");
    return CNNL_STATUS_SUCCESS;
}

#define RETURN_IF(st)                                                                                                  \
    do {                                                                                                               \
        cnnlStatus_t st_ = (st);                                                                                       \
        if (st_ != CNNL_STATUS_SUCCESS) return st_;                                                                    \
    } while (0)

/* ---------------------------------------------------------------- softmax */

/* A 3-D {N, H, W} tensor reduced over dim `mode` names: HIGH the first, MEDIUM the second,
 * LOW the last. */
static int softmax_dim(cnnlSoftmaxMode_t mode) {
    return mode == CNNL_SOFTMAX_MODE_HIGH_DIMENSION ? 0 : mode == CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION ? 1 : 2;
}

typedef struct softmax_job {
    cnnlSoftmaxAlgorithm_t algo;
    int dim;
    cs_tensor x, dy, y; /* forward: x -> y; backward: x holds y, dy, y holds dx */
    const void *px, *pdy;
    void *py;
} softmax_job;

/* The lines softmax reduces: line `l` starts at element offsets *o of each tensor, its
 * elements `step` apart. */
static void line_start(const softmax_job *j, int64_t l, int64_t o[3], int64_t step[3]) {
    const cs_tensor *t[3] = {&j->x, &j->dy, &j->y};
    int a = j->dim == 0 ? 1 : 0, b = j->dim == 2 ? 1 : 2; /* the two other dims */
    int64_t ia = l / j->x.dims[b], ib = l % j->x.dims[b];
    for (int i = 0; i < 3; i++) {
        o[i] = ia * t[i]->strides[a] + ib * t[i]->strides[b];
        step[i] = t[i]->strides[j->dim];
    }
}

static bool softmax_fwd_run(void *arg) {
    softmax_job *j = arg;
    if (!cs_open(j->px, &j->x) || !cs_open(j->py, &j->y)) return false;
    int64_t n = j->x.dims[j->dim], lines = cs_numel(&j->x) / (n ? n : 1);
    for (int64_t l = 0; n && l < lines; l++) {
        int64_t o[3], s[3];
        line_start(j, l, o, s);
        float max = -INFINITY, sum = 0.0f;
        if (j->algo != CNNL_SOFTMAX_FAST) /* FAST skips the shift: its input range is limited */
            for (int64_t i = 0; i < n; i++) max = fmaxf(max, cs_load(j->x.dtype, j->px, o[0] + i * s[0]));
        float shift = j->algo == CNNL_SOFTMAX_FAST ? 0.0f : max;
        for (int64_t i = 0; i < n; i++) sum += expf(cs_load(j->x.dtype, j->px, o[0] + i * s[0]) - shift);
        for (int64_t i = 0; i < n; i++) {
            float v = cs_load(j->x.dtype, j->px, o[0] + i * s[0]) - shift;
            cs_store(j->y.dtype, j->py, o[2] + i * s[2], j->algo == CNNL_SOFTMAX_LOG ? v - logf(sum) : expf(v) / sum);
        }
    }
    return true;
}

static bool softmax_bwd_run(void *arg) {
    softmax_job *j = arg;
    if (!cs_open(j->px, &j->x) || !cs_open(j->pdy, &j->dy) || !cs_open(j->py, &j->y)) return false;
    int64_t n = j->x.dims[j->dim], lines = cs_numel(&j->x) / (n ? n : 1);
    bool log = j->algo == CNNL_SOFTMAX_LOG;
    for (int64_t l = 0; n && l < lines; l++) {
        int64_t o[3], s[3];
        line_start(j, l, o, s);
        float sum = 0.0f; /* softmax: sum(dy * y); log softmax: sum(dy) */
        for (int64_t i = 0; i < n; i++) {
            float dy = cs_load(j->dy.dtype, j->pdy, o[1] + i * s[1]);
            sum += log ? dy : dy * cs_load(j->x.dtype, j->px, o[0] + i * s[0]);
        }
        for (int64_t i = 0; i < n; i++) {
            float y = cs_load(j->x.dtype, j->px, o[0] + i * s[0]);
            float dy = cs_load(j->dy.dtype, j->pdy, o[1] + i * s[1]);
            cs_store(j->y.dtype, j->py, o[2] + i * s[2], log ? dy - expf(y) * sum : y * (dy - sum));
        }
    }
    return true;
}

static cnnlStatus_t softmax_common(const char *fn, cnnlHandle_t h, cnnlSoftmaxAlgorithm_t algo, cnnlSoftmaxMode_t mode,
                                   const cs_tensor *x, const cs_tensor *y) {
    CS_REQUIRE(h && x && y, CNNL_STATUS_BAD_PARAM, fn, "NULL handle or descriptor");
    CS_REQUIRE(algo == CNNL_SOFTMAX_FAST || algo == CNNL_SOFTMAX_ACCURATE || algo == CNNL_SOFTMAX_LOG,
               CNNL_STATUS_BAD_PARAM, fn, "algorithm is not a cnnlSoftmaxAlgorithm_t");
    CS_REQUIRE(mode == CNNL_SOFTMAX_MODE_HIGH_DIMENSION || mode == CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION ||
                   mode == CNNL_SOFTMAX_MODE_LOW_DIMENSION,
               CNNL_STATUS_BAD_PARAM, fn, "mode is not a cnnlSoftmaxMode_t");
    CS_REQUIRE(x->ndim == 3 && cs_same_shape(x, y), CNNL_STATUS_BAD_PARAM, fn,
               "input and output must be 3-D, of one shape");
    return CNNL_STATUS_SUCCESS;
}

/* alpha and beta are reserved (cnnl.h: set them to NULL); they are not read. */
STANDIN_EXPORT cnnlStatus_t cnnlSoftmaxForward(cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm,
                                               cnnlSoftmaxMode_t mode, const void *alpha,
                                               const cnnlTensorDescriptor_t x_desc, const void *x, const void *beta,
                                               const cnnlTensorDescriptor_t y_desc, void *y) {
    const char *fn = "cnnlSoftmaxForward";
    static const cnnlDataType_t combos[][8] = {{F, F}, {CNNL_DTYPE_HALF, CNNL_DTYPE_HALF}, {CNNL_DTYPE_HALF, F}};
    (void)alpha, (void)beta;
    RETURN_IF(softmax_common(fn, handle, algorithm, mode, x_desc, y_desc));
    cnnlDataType_t got[2] = {x_desc->dtype, y_desc->dtype};
    RETURN_IF(check_combo(fn, got, 2, combos, 3, CNNL_STATUS_BAD_PARAM));
    if (cs_numel(x_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(x && y, CNNL_STATUS_BAD_PARAM, fn, "x or y is NULL");
    softmax_job *j = malloc(sizeof *j);
    if (j) *j = (softmax_job){algorithm, softmax_dim(mode), *x_desc, *x_desc, *y_desc, x, NULL, y};
    return cs_submit(handle, fn, softmax_fwd_run, j);
}

/* alpha 1 and beta 0 are implied (cnnl.h: "not supported currently"); they are not read. */
STANDIN_EXPORT cnnlStatus_t cnnlSoftmaxBackward(cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm,
                                                cnnlSoftmaxMode_t mode, const void *alpha,
                                                const cnnlTensorDescriptor_t y_desc, const void *y,
                                                const cnnlTensorDescriptor_t diff_y_desc, const void *diff_y,
                                                const void *beta, const cnnlTensorDescriptor_t diff_x_desc,
                                                void *diff_x) {
    const char *fn = "cnnlSoftmaxBackward";
    (void)alpha, (void)beta;
    RETURN_IF(softmax_common(fn, handle, algorithm, mode, y_desc, diff_x_desc));
    CS_REQUIRE(diff_y_desc && cs_same_shape(y_desc, diff_y_desc), CNNL_STATUS_BAD_PARAM, fn,
               "diff_y's shape differs from y's");
    cnnlDataType_t yt = y_desc->dtype, xt = diff_x_desc->dtype;
    CS_REQUIRE(diff_y_desc->dtype == yt, CNNL_STATUS_BAD_PARAM, fn, "y and diff_y types differ");
    bool ok = (yt == F && (xt == F || xt == CNNL_DTYPE_HALF)) || (yt == CNNL_DTYPE_HALF && xt == CNNL_DTYPE_HALF) ||
              (yt == CNNL_DTYPE_BFLOAT16 && xt == CNNL_DTYPE_BFLOAT16);
    CS_REQUIRE(ok, CNNL_STATUS_BAD_PARAM, fn, "unsupported combination of data types");
    /* bfloat16: MLU300 and MLU500 for LOG, MLU500 only otherwise */
    CS_REQUIRE(yt != CNNL_DTYPE_BFLOAT16 || algorithm == CNNL_SOFTMAX_LOG || cs_mlu500(), CNNL_STATUS_ARCH_MISMATCH, fn,
               "bfloat16 is supported only on MLU500 series unless the algorithm is LOG");
    if (cs_numel(y_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(y && diff_y && diff_x, CNNL_STATUS_BAD_PARAM, fn, "y, diff_y or diff_x is NULL");
    softmax_job *j = malloc(sizeof *j);
    if (j) *j = (softmax_job){algorithm, softmax_dim(mode), *y_desc, *diff_y_desc, *diff_x_desc, y, diff_y, diff_x};
    return cs_submit(handle, fn, softmax_bwd_run, j);
}

/* ---------------------------------------------------------------- layernorm, rmsnorm
 * x is viewed as rows (its dims before `axis`) of C elements (its dims from `axis` on); the
 * per-column tensors (filter, bias, scale) hold C elements and the per-row ones (mean, rstd)
 * one per row. x, y, diff_z and diff_x may be strided; cnnl.h says nothing of strides for the
 * others, and the stand-in refuses them unless dense. */

typedef struct norm_job {
    bool rms;
    int axis;
    float eps;
    cs_tensor x, dz, w, r, y; /* y: y or dx; r: mean/rstd; w: filter/bias/scale and their grads */
    const void *px, *pdz, *pw, *pb;
    void *pmean, *prstd, *py, *pdw, *pdb, *ws; /* mean and rstd are inputs backward */
    size_t ws_bytes;
} norm_job;

/* Workspace: one row of C floats forward, two (dw and db sums) backward. */
static size_t norm_workspace(const cs_tensor *x, int axis, int rows_of_c) {
    return cs_numel(x) ? (size_t)rows_of_c * (size_t)cs_inner(x, axis) * sizeof(float) : 0;
}

static bool open_norm(const norm_job *j) {
    const cs_tensor *w = &j->w, *r = &j->r;
    return cs_open_workspace(j->ws, j->ws_bytes) && cs_open(j->px, &j->x) && cs_open(j->py, &j->y) &&
           (!j->pdz || cs_open(j->pdz, &j->dz)) && (!j->pw || cs_open(j->pw, w)) && (!j->pb || cs_open(j->pb, w)) &&
           (!j->pdw || cs_open(j->pdw, w)) && (!j->pdb || cs_open(j->pdb, w)) && (!j->pmean || cs_open(j->pmean, r)) &&
           (!j->prstd || cs_open(j->prstd, r));
}

static float weight(const norm_job *j, const void *p, int64_t c, float absent) {
    return p ? cs_load(j->w.dtype, p, cs_offset(&j->w, c)) : absent;
}

static bool norm_fwd_run(void *arg) {
    norm_job *j = arg;
    if (!open_norm(j)) return false;
    int64_t C = cs_inner(&j->x, j->axis), R = cs_outer(&j->x, j->axis);
    for (int64_t r = 0; r < R; r++) {
        float mean = 0.0f, var = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float v = cs_load(j->x.dtype, j->px, cs_offset(&j->x, r * C + c));
            if (j->rms)
                var += v * v;
            else
                mean += v;
        }
        mean = j->rms ? 0.0f : mean / (float)C;
        for (int64_t c = 0; !j->rms && c < C; c++) {
            float d = cs_load(j->x.dtype, j->px, cs_offset(&j->x, r * C + c)) - mean;
            var += d * d;
        }
        float rstd = 1.0f / sqrtf(var / (float)C + j->eps);
        for (int64_t c = 0; c < C; c++) {
            float v = (cs_load(j->x.dtype, j->px, cs_offset(&j->x, r * C + c)) - mean) * rstd;
            cs_store(j->y.dtype, j->py, cs_offset(&j->y, r * C + c),
                     v * weight(j, j->pw, c, 1.0f) + weight(j, j->pb, c, 0.0f));
        }
        if (j->pmean) cs_store(j->r.dtype, j->pmean, cs_offset(&j->r, r), mean);
        cs_store(j->r.dtype, j->prstd, cs_offset(&j->r, r), rstd);
    }
    return true;
}

/* norm = (x - mean) * rstd (mean 0 for rms), g = dz * w:
 *   layernorm  dx = rstd * (g - mean_C(g) - norm * mean_C(g * norm))
 *   rmsnorm    dx = rstd * (g - norm * mean_C(g * norm))
 *   dw = sum_R(dz * norm), db = sum_R(dz): written, not accumulated into. */
static bool norm_bwd_run(void *arg) {
    norm_job *j = arg;
    if (!open_norm(j)) return false;
    int64_t C = cs_inner(&j->x, j->axis), R = cs_outer(&j->x, j->axis);
    float *acc = calloc(2 * (size_t)C, sizeof *acc); /* dw, then db (C > 0: x is not empty) */
    if (!acc) return fprintf(stderr, "cnnl stand-in: norm backward: out of host memory\n"), false;
    for (int64_t r = 0; r < R; r++) {
        float mean = j->pmean ? cs_load(j->r.dtype, j->pmean, cs_offset(&j->r, r)) : 0.0f;
        float rstd = cs_load(j->r.dtype, j->prstd, cs_offset(&j->r, r)), sg = 0.0f, sgn = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            float dz = cs_load(j->dz.dtype, j->pdz, cs_offset(&j->dz, i));
            float norm = (cs_load(j->x.dtype, j->px, cs_offset(&j->x, i)) - mean) * rstd;
            float g = dz * weight(j, j->pw, c, 1.0f);
            sg += g, sgn += g * norm;
            acc[c] += dz * norm, acc[C + c] += dz;
        }
        sg = j->rms ? 0.0f : sg / (float)C, sgn /= (float)C;
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            float dz = cs_load(j->dz.dtype, j->pdz, cs_offset(&j->dz, i));
            float norm = (cs_load(j->x.dtype, j->px, cs_offset(&j->x, i)) - mean) * rstd;
            float g = dz * weight(j, j->pw, c, 1.0f);
            cs_store(j->y.dtype, j->py, cs_offset(&j->y, i), rstd * (g - sg - norm * sgn));
        }
    }
    for (int64_t c = 0; c < C; c++) {
        if (j->pdw) cs_store(j->w.dtype, j->pdw, cs_offset(&j->w, c), acc[c]);
        if (j->pdb) cs_store(j->w.dtype, j->pdb, cs_offset(&j->w, c), acc[C + c]);
    }
    free(acc);
    return true;
}

/* Normalization over dims axis..end of x: 0 <= axis < x's rank. */
static cnnlStatus_t check_axis(const char *fn, cnnlHandle_t h, const cs_tensor *x, int axis) {
    CS_REQUIRE(h && x, CNNL_STATUS_BAD_PARAM, fn, "NULL handle or descriptor");
    CS_REQUIRE(axis >= 0 && axis < x->ndim, CNNL_STATUS_BAD_PARAM, fn, "axis outside [0, x's rank)");
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetLayerNormOpWorkspaceSize(cnnlHandle_t handle, int axis,
                                                            const cnnlTensorDescriptor_t x_desc, size_t *size) {
    RETURN_IF(check_axis("cnnlGetLayerNormOpWorkspaceSize", handle, x_desc, axis));
    CS_REQUIRE(size, CNNL_STATUS_BAD_PARAM, "cnnlGetLayerNormOpWorkspaceSize", "size is NULL");
    *size = norm_workspace(x_desc, axis, 1);
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetLayerNormBackwardWorkspaceSize(cnnlHandle_t handle,
                                                                  const cnnlTensorDescriptor_t x_desc, int axis,
                                                                  size_t *workspace_size) {
    RETURN_IF(check_axis("cnnlGetLayerNormBackwardWorkspaceSize", handle, x_desc, axis));
    CS_REQUIRE(workspace_size, CNNL_STATUS_BAD_PARAM, "cnnlGetLayerNormBackwardWorkspaceSize",
               "workspace_size is NULL");
    *workspace_size = norm_workspace(x_desc, axis, 2);
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetRmsNormOpWorkspaceSize(cnnlHandle_t handle, int axis,
                                                          const cnnlTensorDescriptor_t x_desc, size_t *workspace_size) {
    RETURN_IF(check_axis("cnnlGetRmsNormOpWorkspaceSize", handle, x_desc, axis));
    CS_REQUIRE(workspace_size, CNNL_STATUS_BAD_PARAM, "cnnlGetRmsNormOpWorkspaceSize", "workspace_size is NULL");
    *workspace_size = norm_workspace(x_desc, axis, 1);
    return CNNL_STATUS_SUCCESS;
}

STANDIN_EXPORT cnnlStatus_t cnnlGetRmsNormBackwardWorkspaceSize(cnnlHandle_t handle,
                                                                const cnnlTensorDescriptor_t x_desc, int axis,
                                                                size_t *workspace_size) {
    RETURN_IF(check_axis("cnnlGetRmsNormBackwardWorkspaceSize", handle, x_desc, axis));
    CS_REQUIRE(workspace_size, CNNL_STATUS_BAD_PARAM, "cnnlGetRmsNormBackwardWorkspaceSize", "workspace_size is NULL");
    *workspace_size = norm_workspace(x_desc, axis, 2);
    return CNNL_STATUS_SUCCESS;
}

/* The shapes every norm call shares: y (or dx, dz) as x; w per column; r per row. w may be
 * NULL when no per-column pointer is given. */
static cnnlStatus_t check_norm_shapes(const char *fn, const cs_tensor *x, int axis, const cs_tensor *y,
                                      const cs_tensor *dz, const cs_tensor *w, const cs_tensor *r) {
    CS_REQUIRE(y && r, CNNL_STATUS_BAD_PARAM, fn, "NULL descriptor");
    CS_REQUIRE(cs_same_shape(x, y) && (!dz || cs_same_shape(x, dz)), CNNL_STATUS_BAD_PARAM, fn,
               "x, y (dx) and diff_z must have one shape");
    CS_REQUIRE(!w || (cs_col_shape(w, x, axis) && cs_contiguous(w)), CNNL_STATUS_BAD_PARAM, fn,
               "filter/scale descriptor is not x's dims from axis (dense)");
    CS_REQUIRE(cs_row_shape(r, x, axis) && cs_contiguous(r), CNNL_STATUS_BAD_PARAM, fn,
               "mean/rstd descriptor is not x's dims before axis (dense)");
    return CNNL_STATUS_SUCCESS;
}

static cnnlStatus_t submit_norm(cnnlHandle_t h, const char *fn, bool fwd, const norm_job *proto) {
    norm_job *j = malloc(sizeof *j);
    if (j) *j = *proto;
    return cs_submit(h, fn, fwd ? norm_fwd_run : norm_bwd_run, j);
}

/* filter and bias may be NULL (1 and 0). saved_mean, saved_rstd: one per row. */
STANDIN_EXPORT cnnlStatus_t cnnlLayerNormForward(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,
                                                 const void *x, int axis, const cnnlTensorDescriptor_t filter_bias_desc,
                                                 const void *filter, const void *bias, float eps, void *workspace,
                                                 size_t workspace_size, const cnnlTensorDescriptor_t y_desc, void *y,
                                                 const cnnlTensorDescriptor_t mean_rstd_desc, void *saved_mean,
                                                 void *saved_rstd) {
    const char *fn = "cnnlLayerNormForward";
    /* x - filter/bias - y - saved_mean/saved_rstd */
    static const cnnlDataType_t combos[][8] = {{L, L, L, L}, {L, L, L, F}, {F, F, F, F}};
    RETURN_IF(check_axis(fn, handle, x_desc, axis));
    const cs_tensor *w = filter || bias ? filter_bias_desc : NULL;
    CS_REQUIRE(w || !(filter || bias), CNNL_STATUS_BAD_PARAM, fn, "filter_bias_desc is NULL");
    RETURN_IF(check_norm_shapes(fn, x_desc, axis, y_desc, NULL, w, mean_rstd_desc));
    cnnlDataType_t got[4] = {x_desc->dtype, w ? w->dtype : x_desc->dtype, y_desc->dtype, mean_rstd_desc->dtype};
    RETURN_IF(check_combo(fn, got, 4, combos, 3, CNNL_STATUS_ARCH_MISMATCH));
    size_t need = norm_workspace(x_desc, axis, 1);
    RETURN_IF(check_workspace(fn, workspace, workspace_size, need));
    if (cs_numel(x_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(x && y && saved_mean && saved_rstd, CNNL_STATUS_BAD_PARAM, fn, "x, y, saved_mean or saved_rstd is NULL");
    norm_job j = {.rms = false,
                  .axis = axis,
                  .eps = eps,
                  .x = *x_desc,
                  .w = w ? *w : *x_desc,
                  .r = *mean_rstd_desc,
                  .y = *y_desc,
                  .px = x,
                  .pw = filter,
                  .pb = bias,
                  .py = y,
                  .pmean = saved_mean,
                  .prstd = saved_rstd,
                  .ws = workspace,
                  .ws_bytes = need};
    return submit_norm(handle, fn, true, &j);
}

/* diff_filter and diff_bias are outputs (written); they share filter_bias_desc with filter.
 * With filter NULL (ones), they may be NULL too: not computed then. */
STANDIN_EXPORT cnnlStatus_t cnnlLayerNormBackward_v2(cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,
                                                     const void *x, int axis, const cnnlTensorDescriptor_t diff_z_desc,
                                                     const void *diff_z, const cnnlTensorDescriptor_t filter_bias_desc,
                                                     const void *filter, const cnnlTensorDescriptor_t mean_rstd_desc,
                                                     const void *saved_mean, const void *saved_rstd, void *workspace,
                                                     size_t workspace_size, const cnnlTensorDescriptor_t diff_x_desc,
                                                     void *diff_x, void *diff_filter, void *diff_bias) {
    const char *fn = "cnnlLayerNormBackward_v2";
    /* x - diff_z - scale - saved_mean/saved_rstd - diff_x (diff_scale, diff_bias as scale) */
    static const cnnlDataType_t combos[][8] = {{L, L, L, L, L}, {L, L, L, F, L}, {L, L, F, L, L},
                                               {L, L, F, F, L}, {L, L, F, L, F}, {L, L, F, F, F},
                                               {F, F, F, F, F}, {F, F, L, F, F}, {F, F, L, F, L}};
    RETURN_IF(check_axis(fn, handle, x_desc, axis));
    CS_REQUIRE(diff_z_desc && filter_bias_desc, CNNL_STATUS_BAD_PARAM, fn, "NULL descriptor");
    RETURN_IF(check_norm_shapes(fn, x_desc, axis, diff_x_desc, diff_z_desc, filter_bias_desc, mean_rstd_desc));
    const cs_tensor *t[5] = {x_desc, diff_z_desc, filter_bias_desc, mean_rstd_desc, diff_x_desc};
    cnnlDataType_t got[5];
    for (int i = 0; i < 5; i++) {
        CS_REQUIRE(t[i]->layout == CNNL_LAYOUT_ARRAY, CNNL_STATUS_BAD_PARAM, fn, "layouts must be CNNL_LAYOUT_ARRAY");
        got[i] = t[i]->dtype;
    }
    RETURN_IF(check_combo(fn, got, 5, combos, 9, CNNL_STATUS_ARCH_MISMATCH));
    size_t need = norm_workspace(x_desc, axis, 2);
    RETURN_IF(check_workspace(fn, workspace, workspace_size, need));
    CS_REQUIRE(!diff_filter == !diff_bias && (diff_filter || !filter), CNNL_STATUS_BAD_PARAM, fn,
               "diff_filter or diff_bias is NULL");
    if (cs_numel(x_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(x && diff_z && saved_mean && saved_rstd && diff_x, CNNL_STATUS_BAD_PARAM, fn, "NULL data pointer");
    norm_job j = {.rms = false,
                  .axis = axis,
                  .x = *x_desc,
                  .dz = *diff_z_desc,
                  .w = *filter_bias_desc,
                  .r = *mean_rstd_desc,
                  .y = *diff_x_desc,
                  .px = x,
                  .pdz = diff_z,
                  .pw = filter,
                  .pmean = (void *)saved_mean,
                  .prstd = (void *)saved_rstd,
                  .py = diff_x,
                  .pdw = diff_filter,
                  .pdb = diff_bias,
                  .ws = workspace,
                  .ws_bytes = need};
    return submit_norm(handle, fn, false, &j);
}

/* saved_rms is the reciprocal 1/sqrt(mean(x^2) + eps): cnnl.h calls it "the rms", and what
 * DIOPI's MLU port (impl/camb rms_norm) stores there as invRms and checks against torch's
 * rsqrt. scale may be NULL (ones); bias "must be NULL". */
STANDIN_EXPORT cnnlStatus_t cnnlRmsNormForward(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,
                                               const void *x, const cnnlTensorDescriptor_t scale_bias_desc,
                                               const void *scale, const void *bias, float eps, void *workspace,
                                               size_t workspace_size, const cnnlTensorDescriptor_t y_desc, void *y,
                                               const cnnlTensorDescriptor_t rms_desc, void *saved_rms) {
    const char *fn = "cnnlRmsNormForward";
    /* x - scale - y - saved_rms */
    static const cnnlDataType_t combos[][8] = {{L, L, L, L}, {L, L, L, F}, {L, F, L, L}, {L, F, L, F},
                                               {L, F, F, L}, {L, F, F, F}, {F, L, L, L}, {F, L, L, F},
                                               {F, L, F, L}, {F, L, F, F}, {F, F, F, F}};
    RETURN_IF(check_axis(fn, handle, x_desc, axis));
    CS_REQUIRE(!bias, CNNL_STATUS_BAD_PARAM, fn, "bias is not supported and must be NULL");
    const cs_tensor *w = scale ? scale_bias_desc : NULL;
    CS_REQUIRE(w || !scale, CNNL_STATUS_BAD_PARAM, fn, "scale_bias_desc is NULL");
    RETURN_IF(check_norm_shapes(fn, x_desc, axis, y_desc, NULL, w, rms_desc));
    cnnlDataType_t got[4] = {x_desc->dtype, w ? w->dtype : x_desc->dtype, y_desc->dtype, rms_desc->dtype};
    RETURN_IF(check_combo(fn, got, 4, combos, 11, CNNL_STATUS_ARCH_MISMATCH));
    size_t need = norm_workspace(x_desc, axis, 1);
    RETURN_IF(check_workspace(fn, workspace, workspace_size, need));
    if (cs_numel(x_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(x && y && saved_rms, CNNL_STATUS_BAD_PARAM, fn, "x, y or saved_rms is NULL");
    norm_job j = {.rms = true,
                  .axis = axis,
                  .eps = eps,
                  .x = *x_desc,
                  .w = w ? *w : *x_desc,
                  .r = *rms_desc,
                  .y = *y_desc,
                  .px = x,
                  .pw = scale,
                  .py = y,
                  .prstd = saved_rms,
                  .ws = workspace,
                  .ws_bytes = need};
    return submit_norm(handle, fn, true, &j);
}

/* diff_scale is written (not accumulated); scale and diff_scale are both NULL or both not
 * (the note of cnnlRmsNormBackward_v2); diff_bias must be NULL (the forward has no bias). */
STANDIN_EXPORT cnnlStatus_t cnnlRmsNormBackward(cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,
                                                const void *x, const cnnlTensorDescriptor_t diff_z_desc,
                                                const void *diff_z, const cnnlTensorDescriptor_t scale_desc,
                                                const void *scale, const cnnlTensorDescriptor_t rms_desc,
                                                const void *saved_rms, void *workspace, size_t workspace_size,
                                                const cnnlTensorDescriptor_t diff_x_desc, void *diff_x,
                                                const cnnlTensorDescriptor_t diff_scale_bias_desc, void *diff_scale,
                                                void *diff_bias) {
    const char *fn = "cnnlRmsNormBackward";
    /* x - diff_z - scale - saved_rms - diff_x - diff_scale */
    static const cnnlDataType_t combos[][8] = {{L, L, L, L, L, L}, {F, F, F, F, F, F}, {L, L, L, F, L, L}};
    RETURN_IF(check_axis(fn, handle, x_desc, axis));
    CS_REQUIRE(diff_z_desc, CNNL_STATUS_BAD_PARAM, fn, "diff_z_desc is NULL");
    CS_REQUIRE(!scale == !diff_scale, CNNL_STATUS_BAD_PARAM, fn, "scale and diff_scale must both be NULL or not");
    CS_REQUIRE(!diff_bias, CNNL_STATUS_BAD_PARAM, fn, "diff_bias must be NULL");
    CS_REQUIRE(!scale || (scale_desc && diff_scale_bias_desc), CNNL_STATUS_BAD_PARAM, fn, "NULL scale descriptor");
    const cs_tensor *w = scale ? scale_desc : NULL;
    RETURN_IF(check_norm_shapes(fn, x_desc, axis, diff_x_desc, diff_z_desc, w, rms_desc));
    CS_REQUIRE(!w || (cs_same_shape(w, diff_scale_bias_desc) && cs_contiguous(diff_scale_bias_desc) &&
                      w->dtype == diff_scale_bias_desc->dtype),
               CNNL_STATUS_BAD_PARAM, fn, "diff_scale_bias_desc differs from scale_desc");
    const cs_tensor *t[5] = {x_desc, diff_z_desc, w ? w : x_desc, rms_desc, diff_x_desc};
    cnnlDataType_t got[6];
    for (int i = 0; i < 5; i++) {
        CS_REQUIRE(t[i]->layout == CNNL_LAYOUT_ARRAY, CNNL_STATUS_BAD_PARAM, fn, "layouts must be CNNL_LAYOUT_ARRAY");
        got[i] = t[i]->dtype;
    }
    got[5] = got[2];
    RETURN_IF(check_combo(fn, got, 6, combos, 3, CNNL_STATUS_ARCH_MISMATCH));
    size_t need = norm_workspace(x_desc, axis, 2);
    RETURN_IF(check_workspace(fn, workspace, workspace_size, need));
    if (cs_numel(x_desc) == 0) return CNNL_STATUS_SUCCESS;
    CS_REQUIRE(x && diff_z && saved_rms && diff_x, CNNL_STATUS_BAD_PARAM, fn, "x, diff_z, saved_rms or diff_x is NULL");
    norm_job j = {.rms = true,
                  .axis = axis,
                  .x = *x_desc,
                  .dz = *diff_z_desc,
                  .w = w ? *w : *x_desc,
                  .r = *rms_desc,
                  .y = *diff_x_desc,
                  .px = x,
                  .pdz = diff_z,
                  .pw = scale,
                  .prstd = (void *)saved_rms,
                  .py = diff_x,
                  .pdw = diff_scale,
                  .ws = workspace,
                  .ws_bytes = need};
    return submit_norm(handle, fn, false, &j);
}
