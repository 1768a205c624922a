/* --self-test: the suite must catch a broken backend.
 *
 * "selftest" is the CPU backend with one deliberate defect per slot it breaks (listed in
 * `expect` below): a write past the end of an output, double rounding, a wrong value, a NaN
 * turned into a number, an error status, an input modified, an output left unwritten,
 * strides ignored, a scaled gradient. Other slots pass the CPU kernel through, a few are left NULL (fallback)
 * and binary refuses fp16 (skipped). Its kernels run synchronously on the CPU runtime with
 * host_memory = false, so the harness moves every byte through the runtime as for any
 * accelerator. conf_selftest_check then compares what the run counted with what each
 * defect must produce: a suite that passes a broken kernel fails the self-test. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

static const it_kernels *cpu;

static int64_t numel(const it_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

static bool contiguous(const it_tdesc *d) {
    int64_t st = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != st) return false;
        st *= d->shape[i];
    }
    return true;
}

/* cast to int16: one element written past the end of a contiguous dst */
static it_status bad_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_status st = cpu->cast(s, src, dst);
    int64_t n = numel(dst);
    if (!st && dst->dtype == IT_DTYPE_I16 && n > 0 && contiguous(dst)) ((int16_t *)dst->data)[n] = 0x1234;
    return st;
}

/* fill bf16/fp16 from a double: rounded through fp32 first (double rounding) */
static it_status bad_fill(it_stream *s, it_tdesc *dst, it_scalar v) {
    if (v.kind == IT_SCALAR_F64 && (dst->dtype == IT_DTYPE_BF16 || dst->dtype == IT_DTYPE_FP16) && isfinite(v.v.f64) &&
        fabs(v.v.f64) < 1e38)
        v.v.f64 = (double)(float)v.v.f64;
    return cpu->fill(s, dst, v);
}

/* copy_strided: dst's strides ignored (written as if contiguous) */
static it_status bad_copy(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    it_tdesc d = *dst;
    int64_t st = 1;
    for (int i = d.ndim - 1; i >= 0; i--) {
        d.strides[i] = st;
        st *= d.shape[i];
    }
    return cpu->copy_strided(s, src, &d);
}

/* gemm fp32: C[0,0,0] off by 0.1% */
static it_status bad_gemm(it_stream *s, const it_gemm_args *a) {
    it_status st = cpu->gemm(s, a);
    if (!st && a->c.dtype == IT_DTYPE_FP32 && numel(&a->c) > 0) ((float *)a->c.data)[0] *= 1.001f;
    return st;
}

/* unary exp fp32: NaN results replaced by 0 */
static it_status bad_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    it_status st = cpu->unary(s, op, alpha, x, out);
    if (!st && op == IT_UNARY_EXP && out->dtype == IT_DTYPE_FP32 && contiguous(out))
        for (int64_t i = 0; i < numel(out); i++)
            if (isnan(((float *)out->data)[i])) ((float *)out->data)[i] = 0;
    return st;
}

/* binary: fp16 refused (a legitimate "unsupported dtype", counted as skipped) */
static it_status bad_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    if (out->dtype == IT_DTYPE_FP16) return it_error(IT_ERR_UNSUPPORTED, "selftest: binary: no fp16");
    return cpu->binary(s, op, a, b, out);
}

/* reduce to a single element: a spurious error */
static it_status bad_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    if (numel(out) == 1 && numel(x) > 1)
        return it_error(IT_ERR_INVALID_ARG, "selftest: reduce: refused a full reduction");
    return cpu->reduce(s, op, x, out);
}

/* embedding_fwd: flips a bit of the weight (an input) */
static it_status bad_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *w, it_tdesc *out) {
    it_status st = cpu->embedding_fwd(s, idx, w, out);
    if (!st && numel(w) > 0) ((unsigned char *)w->data)[0] ^= 1;
    return st;
}

/* layernorm_fwd fp32: rstd left unwritten (fp64 is left intact so that the --grad check of
 * layernorm_bwd, which takes mean/rstd from this forward, sees only the backward's defect) */
static it_status bad_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                   it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    if (x->dtype != IT_DTYPE_FP32) return cpu->layernorm_fwd(s, x, w, b, eps, y, mean, rstd);
    int64_t n = numel(rstd);
    it_tdesc r = *rstd;
    r.data = malloc((size_t)(n ? n : 1) * it_dtype_size(rstd->dtype));
    if (!r.data) return it_error(IT_ERR_OOM, "selftest: out of memory");
    int64_t st = 1;
    for (int i = r.ndim - 1; i >= 0; i--) {
        r.strides[i] = st;
        st *= r.shape[i];
    }
    it_status res = cpu->layernorm_fwd(s, x, w, b, eps, y, mean, &r);
    free(r.data);
    return res;
}

/* layernorm_bwd: dx scaled by 1.01 (a wrong gradient: caught by --grad as well) */
static it_status bad_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                   const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                   it_tdesc *db) {
    it_status st = cpu->layernorm_bwd(s, dy, x, w, mean, rstd, dx, dw, db);
    if (st || !contiguous(dx)) return st;
    for (int64_t i = 0; i < numel(dx); i++) {
        if (dx->dtype == IT_DTYPE_FP32) ((float *)dx->data)[i] *= 1.01f;
        if (dx->dtype == IT_DTYPE_FP64) ((double *)dx->data)[i] *= 1.01;
    }
    return st;
}

static it_kernels broken;
static it_backend backend;

const it_backend *conf_selftest_backend(void) {
    const it_backend *c = NULL;
    if (it_backend_find("cpu", &c)) return NULL;
    cpu = it_cpu_kernels();
    broken = *cpu;
    broken.cast = bad_cast;
    broken.fill = bad_fill;
    broken.copy_strided = bad_copy;
    broken.gemm = bad_gemm;
    broken.unary = bad_unary;
    broken.binary = bad_binary;
    broken.reduce = bad_reduce;
    broken.embedding_fwd = bad_embedding_fwd;
    broken.layernorm_fwd = bad_layernorm_fwd;
    broken.layernorm_bwd = bad_layernorm_bwd;
    broken.softmax_fwd = NULL; /* fallback */
    broken.adam_step = NULL;   /* fallback */
    backend.api_version = IT_BACKEND_API_VERSION;
    backend.name = "selftest";
    backend.default_autocast_dtype = IT_DTYPE_BF16;
    backend.host_memory = false;
    backend.runtime = c->runtime;
    backend.kernels = &broken;
    backend.kernels_size = sizeof broken;
    backend.ccl = NULL;
    return &backend;
}

typedef enum { EXPECT_PASS, EXPECT_NO_FAIL, EXPECT_FAIL, EXPECT_SKIPS, EXPECT_FALLBACK, EXPECT_NONE } expectation;

static const struct {
    const char *slot;
    expectation diff, grad;
} expect[] = {
    {"cast", EXPECT_FAIL, EXPECT_NONE},
    {"fill", EXPECT_FAIL, EXPECT_NONE}, /* only the double-rounding traps catch it */
    {"copy_strided", EXPECT_FAIL, EXPECT_NONE},
    {"gemm", EXPECT_FAIL, EXPECT_NONE},
    {"unary", EXPECT_FAIL, EXPECT_NONE},
    {"binary", EXPECT_SKIPS, EXPECT_PASS},
    {"reduce", EXPECT_FAIL, EXPECT_NONE},
    {"embedding_fwd", EXPECT_FAIL, EXPECT_NONE},
    {"embedding_bwd", EXPECT_PASS, EXPECT_PASS},
    {"layernorm_fwd", EXPECT_FAIL, EXPECT_NONE},
    {"layernorm_bwd", EXPECT_FAIL, EXPECT_FAIL},
    {"softmax_fwd", EXPECT_FALLBACK, EXPECT_NONE},
    {"softmax_bwd", EXPECT_PASS, EXPECT_PASS}, /* its grad check runs softmax_fwd on the cpu */
    {"cross_entropy_fwd", EXPECT_PASS, EXPECT_NONE},
    {"cross_entropy_bwd", EXPECT_PASS, EXPECT_PASS},
    {"sgd_step", EXPECT_PASS, EXPECT_NONE},
    {"adam_step", EXPECT_FALLBACK, EXPECT_NONE},
    /* passed through; "no failure" holds whether or not the cpu kernels exist yet */
    {"rmsnorm_fwd", EXPECT_NO_FAIL, EXPECT_NONE},
    {"rmsnorm_bwd", EXPECT_NO_FAIL, EXPECT_NO_FAIL},
    {"rope", EXPECT_NO_FAIL, EXPECT_NO_FAIL},
    {"topk", EXPECT_NO_FAIL, EXPECT_NONE},
};

int conf_selftest_check(const conf_slot_stats *stats, bool grad) {
    int unmet = 0;
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        size_t k = 0;
        while (k < conf_slot_count && strcmp(conf_slots[k].name, expect[i].slot) != 0) k++;
        if (k == conf_slot_count) continue;
        const conf_slot_stats *s = &stats[k];
        expectation e = grad ? expect[i].grad : expect[i].diff;
        bool ok = true;
        const char *want = "";
        switch (e) {
        case EXPECT_PASS: ok = s->pass > 0 && s->fail == 0, want = "passes and no failure"; break;
        case EXPECT_NO_FAIL: ok = s->fail == 0, want = "no failure"; break;
        case EXPECT_FAIL: ok = s->fail > 0, want = "at least one failure"; break;
        case EXPECT_SKIPS: ok = s->skip > 0 && s->fail == 0 && s->pass > 0, want = "skips, passes, no failure"; break;
        case EXPECT_FALLBACK: ok = s->fallback, want = "reported as fallback"; break;
        case EXPECT_NONE: continue;
        }
        printf("self-test %-5s %-18s expected %-28s got %d passed, %d failed, %d skipped%s: %s\n",
               grad ? "grad" : "diff", expect[i].slot, want, s->pass, s->fail, s->skip, s->fallback ? ", fallback" : "",
               ok ? "ok" : "UNMET");
        if (!ok) unmet++;
    }
    return unmet;
}
