/* Kernel dispatch, the CPU fallback and per-kernel statistics.
 *
 * Every kernel the core runs goes through KCALL (internal.h): it looks up the effective
 * table of the device's backend, in which each slot the backend left empty is filled by a
 * fallback wrapper, times the call and counts it. A fallback wrapper synchronizes the
 * stream, copies every input's memory span to the host, runs the CPU kernel there, and
 * copies every output's span back, counting the bytes moved. Results are bitwise those of
 * the CPU backend, so a backend with half its slots empty still trains identically, only
 * slower; the report says where the time goes. The optional fused slots (attention, adam_step_round)
 * have no fallback: an op asks it__kernel_native first and composes itself from the other
 * slots when the backend lacks one. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "core/profile_hooks.h"

_Thread_local it__kcall_ctx it__kc;

typedef void (*it_fnptr)(void);

typedef struct slot_stats {
    atomic_ullong calls, ns, bytes, fb_calls;
    atomic_ullong fb_ns; /* time of the calls the fallback served (all of them for an empty slot) */
} slot_stats;

struct it__dispatch {
    it_kernels table;     /* the backend's own slots, full size: NULL past its kernels_size */
    it_kernels effective; /* table with each NULL slot but the fused ones a fallback wrapper */
    bool is_cpu;          /* the reference: never falls back */
    bool native[IT_KERNEL_SLOT_COUNT];
    slot_stats stats[IT_KERNEL_SLOT_COUNT];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- staging for fallbacks */

typedef struct stage {
    it_tdesc host;    /* the descriptor with data pointing into buf */
    const void *dptr; /* device address of the span's start */
    size_t bytes;
    void *buf;
} stage;

/* Elements from element 0 to the last addressed element + 1 (0 when empty). */
static int64_t span_elems(const it_tdesc *d) {
    int64_t last = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) return 0;
        last += (d->shape[i] - 1) * d->strides[i];
    }
    return last + 1;
}

static bool dense(const it_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n == span_elems(d);
}

static it_status dev_copy(void *dst, const void *src, size_t n, it_memcpy_kind kind) {
    if (!n) return IT_OK;
    it_status st = it__kc.dev.backend->runtime->memcpy(it__kc.dev.index, dst, src, n, kind);
    if (!st) {
        atomic_fetch_add(&it__kc.d->stats[it__kc.slot].bytes, n);
        if (it__prof_armed) it__prof_bytes(n);
    }
    return st;
}

/* Bring a descriptor's span to the host. `read` = its current contents are needed (inputs,
 * and outputs that are accumulated into or not fully overwritten). */
static it_status stage_in(const it_tdesc *d, stage *s, bool read) {
    memset(s, 0, sizeof *s);
    if (!d) return IT_OK;
    s->host = *d;
    s->dptr = d->data;
    s->bytes = (size_t)span_elems(d) * it_dtype_size(d->dtype);
    s->buf = malloc(s->bytes ? s->bytes : 1);
    if (!s->buf) return it_error(IT_ERR_OOM, "cpu fallback: %zu bytes of host staging memory", s->bytes);
    s->host.data = s->buf;
    return read ? dev_copy(s->buf, d->data, s->bytes, IT_MEMCPY_D2H) : IT_OK;
}

static it_status stage_out(stage *s) {
    return s->buf ? dev_copy((void *)s->dptr, s->buf, s->bytes, IT_MEMCPY_H2D) : IT_OK;
}

/* One fallback call's staged arguments (at most FRAME_ARGS), and the first error. */
#define FRAME_ARGS 8
typedef struct fallback_frame {
    stage s[FRAME_ARGS];
    bool out[FRAME_ARGS];
    int n;
    it_status st;
} fallback_frame;

static void frame_begin(fallback_frame *f, it_stream *stream) {
    memset(f, 0, sizeof *f);
    /* Inputs may still be written by queued native kernels. */
    f->st = it__kc.dev.backend->runtime->stream_synchronize(stream);
}
/* Stage one descriptor; returns the host descriptor (NULL for a NULL input). */
static it_tdesc *frame_arg(fallback_frame *f, const it_tdesc *d, bool is_out, bool read) {
    if (!d || f->st) return NULL;
    stage *s = &f->s[f->n];
    f->out[f->n++] = is_out;
    f->st = stage_in(d, s, read);
    return &s->host;
}
#define IN(d) frame_arg(&f, (d), false, true)
#define OUT(d) frame_arg(&f, (d), true, !dense(d))
#define INOUT(d) frame_arg(&f, (d), true, true)

static it_status frame_end(fallback_frame *f, it_status kst) {
    it_status st = f->st ? f->st : kst;
    for (int i = 0; i < f->n; i++) {
        if (!st && f->out[i]) st = stage_out(&f->s[i]);
        free(f->s[i].buf);
    }
    return st;
}
#define CPU (it_cpu_kernels())
#define RUN(call) frame_end(&f, f.st ? f.st : (call))

static it_status fb_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *a = IN(src);
    it_tdesc *o = OUT(dst);
    return RUN(CPU->cast(NULL, a, o));
}
static it_status fb_fill(it_stream *s, it_tdesc *dst, it_scalar v) {
    fallback_frame f;
    frame_begin(&f, s);
    it_tdesc *o = OUT(dst);
    return RUN(CPU->fill(NULL, o, v));
}
static it_status fb_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *a = IN(src);
    it_tdesc *o = OUT(dst);
    return RUN(CPU->copy_strided(NULL, a, o));
}
static it_status fb_gemm(it_stream *s, const it_gemm_args *args) {
    fallback_frame f;
    frame_begin(&f, s);
    it_gemm_args h = *args;
    const it_tdesc *a = IN(&args->a), *b = IN(&args->b);
    it_tdesc *c = args->beta != 0.0f ? INOUT(&args->c) : OUT(&args->c); /* beta != 0 reads C */
    if (!f.st) {
        h.a = *a;
        h.b = *b;
        h.c = *c;
    }
    return RUN(CPU->gemm(NULL, &h));
}
static it_status fb_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *a = IN(x);
    it_tdesc *o = OUT(out);
    return RUN(CPU->unary(NULL, op, alpha, a, o));
}
static it_status fb_binary(it_stream *s, it_binary_op op, const it_tdesc *x, const it_tdesc *y, it_tdesc *out) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *a = IN(x), *b = IN(y);
    it_tdesc *o = OUT(out);
    return RUN(CPU->binary(NULL, op, a, b, o));
}
static it_status fb_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *a = IN(x);
    it_tdesc *o = OUT(out);
    return RUN(CPU->reduce(NULL, op, a, o));
}
static it_status fb_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *w, it_tdesc *out) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *i = IN(idx), *a = IN(w);
    it_tdesc *o = OUT(out);
    return RUN(CPU->embedding_fwd(NULL, i, a, o));
}
static it_status fb_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dw) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *i = IN(idx), *d = IN(dout);
    it_tdesc *o = INOUT(dw); /* accumulated into */
    return RUN(CPU->embedding_bwd(NULL, i, d, o));
}
static it_status fb_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                  it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hx = IN(x), *hw = IN(w), *hb = IN(b);
    it_tdesc *hy = OUT(y), *hm = OUT(mean), *hr = OUT(rstd);
    return RUN(CPU->layernorm_fwd(NULL, hx, hw, hb, eps, hy, hm, hr));
}
static it_status fb_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                  const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                  it_tdesc *db) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hdy = IN(dy), *hx = IN(x), *hw = IN(w), *hm = IN(mean), *hr = IN(rstd);
    it_tdesc *hdx = OUT(dx), *hdw = OUT(dw), *hdb = OUT(db);
    return RUN(CPU->layernorm_bwd(NULL, hdy, hx, hw, hm, hr, hdx, hdw, hdb));
}
static it_status fb_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hx = IN(x);
    it_tdesc *hy = OUT(y);
    return RUN(CPU->softmax_fwd(NULL, args, hx, hy));
}
static it_status fb_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                                it_tdesc *dx) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hy = IN(y), *hdy = IN(dy);
    it_tdesc *hdx = OUT(dx);
    return RUN(CPU->softmax_bwd(NULL, args, hy, hdy, hdx));
}
static it_status fb_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                      it_tdesc *losses) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hl = IN(logits), *ht = IN(targets);
    it_tdesc *ho = OUT(losses);
    return RUN(CPU->cross_entropy_fwd(NULL, hl, ht, valid, ho));
}
static it_status fb_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                      const it_tdesc *dlosses, it_tdesc *dlogits) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hl = IN(logits), *ht = IN(targets), *hd = IN(dlosses);
    it_tdesc *ho = OUT(dlogits);
    return RUN(CPU->cross_entropy_bwd(NULL, hl, ht, valid, hd, ho));
}
static it_status fb_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    fallback_frame f;
    frame_begin(&f, s);
    it_tdesc *hp = INOUT(param);
    const it_tdesc *hg = IN(grad);
    return RUN(CPU->sgd_step(NULL, lr, grad_scale, hp, hg));
}
static it_status fb_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                              it_tdesc *m, it_tdesc *v) {
    fallback_frame f;
    frame_begin(&f, s);
    it_tdesc *hp = INOUT(param), *hm = INOUT(m), *hv = INOUT(v);
    const it_tdesc *hg = IN(grad);
    return RUN(CPU->adam_step(NULL, args, hp, hg, hm, hv));
}

static it_status fb_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                                it_tdesc *rstd) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hx = IN(x), *hw = IN(w);
    it_tdesc *hy = OUT(y), *hr = OUT(rstd);
    return RUN(CPU->rmsnorm_fwd(NULL, hx, hw, eps, hy, hr));
}
static it_status fb_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hdy = IN(dy), *hx = IN(x), *hw = IN(w), *hr = IN(rstd);
    it_tdesc *hdx = OUT(dx), *hdw = OUT(dw);
    return RUN(CPU->rmsnorm_bwd(NULL, hdy, hx, hw, hr, hdx, hdw));
}
static it_status fb_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                         it_tdesc *y) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hx = IN(x), *hc = IN(cos), *hs = IN(sin);
    it_tdesc *hy = OUT(y);
    return RUN(CPU->rope(NULL, hx, hc, hs, inverse, hy));
}
static it_status fb_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices) {
    fallback_frame f;
    frame_begin(&f, s);
    const it_tdesc *hx = IN(x);
    it_tdesc *hv = OUT(values), *hi = OUT(indices);
    return RUN(CPU->topk(NULL, hx, k, hv, hi));
}

/* A wrapper for every slot but the fused ones (it_kernel_slot_fused): a slot appended to
 * it_kernels needs one here, since an older plugin's table reads it as NULL. */
static const it_kernels fallback_kernels = {
    .cast = fb_cast,
    .fill = fb_fill,
    .copy_strided = fb_copy_strided,
    .gemm = fb_gemm,
    .unary = fb_unary,
    .binary = fb_binary,
    .reduce = fb_reduce,
    .embedding_fwd = fb_embedding_fwd,
    .embedding_bwd = fb_embedding_bwd,
    .layernorm_fwd = fb_layernorm_fwd,
    .layernorm_bwd = fb_layernorm_bwd,
    .softmax_fwd = fb_softmax_fwd,
    .softmax_bwd = fb_softmax_bwd,
    .cross_entropy_fwd = fb_cross_entropy_fwd,
    .cross_entropy_bwd = fb_cross_entropy_bwd,
    .sgd_step = fb_sgd_step,
    .adam_step = fb_adam_step,
    .rmsnorm_fwd = fb_rmsnorm_fwd,
    .rmsnorm_bwd = fb_rmsnorm_bwd,
    .rope = fb_rope,
    .topk = fb_topk,
};

/* ---------------------------------------------------------------- failure messages
 * A failed call's message names the kernel, the device and every tensor it was given:
 *   kernel 'layernorm_fwd' on sim:0 (x (4,64,768) fp32, w (768) fp32, ...): <backend's message>
 * KCALL evaluates the call's arguments once more into the slot's describer below (only on
 * failure), which knows the slot's signature and so which arguments are tensors. */

typedef struct named_desc {
    const char *name;
    const it_tdesc *d;
} named_desc;

static it_status describe_failure(int n, const named_desc *args) {
    char what[1024];
    size_t off = 0;
    for (int i = 0; i < n && off < sizeof what; i++) {
        const it_tdesc *d = args[i].d;
        off += (size_t)snprintf(what + off, sizeof what - off, "%s%s ", i ? ", " : "", args[i].name);
        if (off >= sizeof what) break;
        if (!d) {
            off += (size_t)snprintf(what + off, sizeof what - off, "NULL");
            continue;
        }
        off += (size_t)snprintf(what + off, sizeof what - off, "(");
        for (int k = 0; k < d->ndim && k < IT_MAX_DIMS && off < sizeof what; k++)
            off += (size_t)snprintf(what + off, sizeof what - off, "%s%lld", k ? "," : "", (long long)d->shape[k]);
        if (off < sizeof what) {
            bool contiguous = dense(d);
            int64_t want = 1;
            for (int k = d->ndim - 1; k >= 0 && contiguous; k--) {
                contiguous = d->shape[k] <= 1 || d->strides[k] == want;
                want *= d->shape[k];
            }
            off += (size_t)snprintf(what + off, sizeof what - off, ") %s%s", it_dtype_name(d->dtype),
                                    contiguous ? "" : " strided");
        }
    }
    if (off >= sizeof what) memcpy(what + sizeof what - 4, "...", 4);
    char dev[64];
    it_device_str(it__kc.dev, dev, sizeof dev);
    it_status st = it__kc.st;
    const char *slot = it_kernel_slot_name(it__kc.slot);
    /* a backend that returned a status without it_error left no message of its own */
    if (it_last_status() != st || !it_last_error()[0])
        return it_error(st, "kernel '%s' on %s (%s): the backend returned status %d (%s) without a message", slot, dev,
                        what, (int)st, it_status_name(st));
    return it_error_context("kernel '%s' on %s (%s): ", slot, dev, what);
}
#define DESCRIBE(...)                                                                                                  \
    do {                                                                                                               \
        (void)s;                                                                                                       \
        const named_desc args_[] = {__VA_ARGS__};                                                                      \
        return describe_failure((int)(sizeof args_ / sizeof args_[0]), args_);                                         \
    } while (0)
#define T(name)                                                                                                        \
    { #name, name }

static it_status ds_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) { DESCRIBE(T(src), T(dst)); }
static it_status ds_fill(it_stream *s, it_tdesc *dst, it_scalar v) {
    (void)v;
    DESCRIBE(T(dst));
}
static it_status ds_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) { DESCRIBE(T(src), T(dst)); }
static it_status ds_gemm(it_stream *s, const it_gemm_args *args) {
    DESCRIBE({"a", args ? &args->a : NULL}, {"b", args ? &args->b : NULL}, {"c", args ? &args->c : NULL});
}
static it_status ds_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    (void)op, (void)alpha;
    DESCRIBE(T(x), T(out));
}
static it_status ds_binary(it_stream *s, it_binary_op op, const it_tdesc *x, const it_tdesc *y, it_tdesc *out) {
    (void)op;
    DESCRIBE(T(x), T(y), T(out));
}
static it_status ds_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    (void)op;
    DESCRIBE(T(x), T(out));
}
static it_status ds_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *w, it_tdesc *out) {
    DESCRIBE(T(idx), T(w), T(out));
}
static it_status ds_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dw) {
    DESCRIBE(T(idx), T(dout), T(dw));
}
static it_status ds_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                  it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    (void)eps;
    DESCRIBE(T(x), T(w), T(b), T(y), T(mean), T(rstd));
}
static it_status ds_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                  const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                  it_tdesc *db) {
    DESCRIBE(T(dy), T(x), T(w), T(mean), T(rstd), T(dx), T(dw), T(db));
}
static it_status ds_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    (void)args;
    DESCRIBE(T(x), T(y));
}
static it_status ds_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                                it_tdesc *dx) {
    (void)args;
    DESCRIBE(T(y), T(dy), T(dx));
}
static it_status ds_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                      it_tdesc *losses) {
    (void)valid;
    DESCRIBE(T(logits), T(targets), T(losses));
}
static it_status ds_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                      const it_tdesc *dlosses, it_tdesc *dlogits) {
    (void)valid;
    DESCRIBE(T(logits), T(targets), T(dlosses), T(dlogits));
}
static it_status ds_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    (void)lr, (void)grad_scale;
    DESCRIBE(T(param), T(grad));
}
static it_status ds_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                              it_tdesc *m, it_tdesc *v) {
    (void)args;
    DESCRIBE(T(param), T(grad), T(m), T(v));
}
static it_status ds_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                                it_tdesc *rstd) {
    (void)eps;
    DESCRIBE(T(x), T(w), T(y), T(rstd));
}
static it_status ds_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    DESCRIBE(T(dy), T(x), T(w), T(rstd), T(dx), T(dw));
}
static it_status ds_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                         it_tdesc *y) {
    (void)inverse;
    DESCRIBE(T(x), T(cos), T(sin), T(y));
}
static it_status ds_topk(it_stream *s, const it_tdesc *x, int64_t k, it_tdesc *values, it_tdesc *indices) {
    (void)k;
    DESCRIBE(T(x), T(values), T(indices));
}
static it_status ds_attention_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, it_tdesc *att, it_tdesc *y) {
    (void)args;
    DESCRIBE(T(q), T(k), T(v), T(att), T(y));
}
static it_status ds_attention_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *k,
                                  const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq,
                                  it_tdesc *dk, it_tdesc *dv, it_tdesc *datt) {
    (void)args;
    DESCRIBE(T(q), T(k), T(v), T(att), T(dy), T(dq), T(dk), T(dv), T(datt));
}
static it_status ds_adam_step_round(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                    it_tdesc *m, it_tdesc *v, it_tdesc *low) {
    (void)args;
    DESCRIBE(T(param), T(grad), T(m), T(v), T(low));
}
static it_status ds_cross_entropy_low_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                          it_tdesc *losses) {
    (void)valid;
    DESCRIBE(T(logits), T(targets), T(losses));
}
static it_status ds_cross_entropy_low_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                          const it_tdesc *dlosses, it_tdesc *dlogits) {
    (void)valid;
    DESCRIBE(T(logits), T(targets), T(dlosses), T(dlogits));
}
static it_status ds_swiglu_low_fwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, it_tdesc *y) {
    DESCRIBE(T(a), T(b), T(y));
}
static it_status ds_swiglu_low_bwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, const it_tdesc *dy, it_tdesc *da,
                                   it_tdesc *db) {
    DESCRIBE(T(a), T(b), T(dy), T(da), T(db));
}
static it_status ds_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                        const it_tdesc *v, it_tdesc *y, it_tdesc *lse) {
    (void)args;
    DESCRIBE(T(q), T(k), T(v), T(y), T(lse));
}
static it_status ds_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q, const it_tdesc *k,
                                        const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy, const it_tdesc *lse,
                                        it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    (void)args;
    DESCRIBE(T(q), T(k), T(v), T(y), T(dy), T(lse), T(dq), T(dk), T(dv));
}
#undef T
#undef DESCRIBE

/* Every slot, the fused ones included: a slot appended to it_kernels needs one here. */
static const it_kernels describe_kernels = {
    .cast = ds_cast,
    .fill = ds_fill,
    .copy_strided = ds_copy_strided,
    .gemm = ds_gemm,
    .unary = ds_unary,
    .binary = ds_binary,
    .reduce = ds_reduce,
    .embedding_fwd = ds_embedding_fwd,
    .embedding_bwd = ds_embedding_bwd,
    .layernorm_fwd = ds_layernorm_fwd,
    .layernorm_bwd = ds_layernorm_bwd,
    .softmax_fwd = ds_softmax_fwd,
    .softmax_bwd = ds_softmax_bwd,
    .cross_entropy_fwd = ds_cross_entropy_fwd,
    .cross_entropy_bwd = ds_cross_entropy_bwd,
    .sgd_step = ds_sgd_step,
    .adam_step = ds_adam_step,
    .rmsnorm_fwd = ds_rmsnorm_fwd,
    .rmsnorm_bwd = ds_rmsnorm_bwd,
    .rope = ds_rope,
    .topk = ds_topk,
    .attention_fwd = ds_attention_fwd,
    .attention_bwd = ds_attention_bwd,
    .adam_step_round = ds_adam_step_round,
    .cross_entropy_low_fwd = ds_cross_entropy_low_fwd,
    .cross_entropy_low_bwd = ds_cross_entropy_low_bwd,
    .swiglu_low_fwd = ds_swiglu_low_fwd,
    .swiglu_low_bwd = ds_swiglu_low_bwd,
    .flash_attention_fwd = ds_flash_attention_fwd,
    .flash_attention_bwd = ds_flash_attention_bwd,
};

const it_kernels *it__describe_kernels(void) { return &describe_kernels; }

/* ---------------------------------------------------------------- tables and stats */

it__dispatch *it__dispatch_new(const it_backend *b, size_t kernels_size) {
    it__dispatch *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    /* The backend's slots up to kernels_size, NULL past them (the calloc), and nothing of a
     * larger table's tail: those slots are newer than this core. */
    memcpy(&d->table, b->kernels, kernels_size < sizeof d->table ? kernels_size : sizeof d->table);
    /* The table is a struct of function pointers only: walk it as an array of them. */
    it_fnptr slots[IT_KERNEL_SLOT_COUNT], fallbacks[IT_KERNEL_SLOT_COUNT];
    _Static_assert(sizeof(it_kernels) == sizeof slots, "it_kernels must hold only function pointers");
    memcpy(slots, &d->table, sizeof slots);
    memcpy(fallbacks, &fallback_kernels, sizeof fallbacks);
    /* The CPU backend is the reference: its table is used as is. */
    bool is_cpu = b->kernels == it_cpu_kernels();
    d->is_cpu = is_cpu;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        d->native[i] = slots[i] != NULL;
        if (!slots[i] && !is_cpu) slots[i] = fallbacks[i];
    }
    memcpy(&d->effective, slots, sizeof slots);
    return d;
}

const it_kernels *it_backend_kernels(const it_backend *b) {
    it__dispatch *d = it__dispatch_of(b);
    return d ? &d->table : NULL;
}

bool it__kpre(it_device dev, size_t slot) {
    it__dispatch *d = it__dispatch_of(dev.backend);
    it_stream *s = d ? it__stream(dev) : NULL;
    if (!d || !s) return false;
    it_fnptr fns[IT_KERNEL_SLOT_COUNT];
    memcpy(fns, &d->effective, sizeof fns);
    if (!fns[slot]) {
        it_error(IT_ERR_UNSUPPORTED, "backend '%s' has no kernel '%s'", dev.backend->name, it_kernel_slot_name(slot));
        return false;
    }
    it__kc.dev = dev;
    it__kc.stream = s;
    it__kc.k = &d->effective;
    it__kc.d = d;
    it__kc.slot = slot;
    it__kc.retried = false;
    /* The profiler's one branch on the dispatch path when it is off. */
    if (IT_PROFILING() && it__prof_pre()) return false;
    it__kc.t0 = now_ns();
    return true;
}

const it_kernels *it__fallback_kernels(void) { return &fallback_kernels; }

bool it__kernel_native(it_device dev, size_t slot) {
    it__dispatch *d = it__dispatch_of(dev.backend);
    return d != NULL && slot < IT_KERNEL_SLOT_COUNT && d->native[slot];
}

bool it__kretry(it_status st) {
    it__kc.st = st;
    it__dispatch *d = it__kc.d;
    /* a fused slot that declines is composed by its op instead (no fallback to retry on) */
    if (st != IT_ERR_UNSUPPORTED || d->is_cpu || !d->native[it__kc.slot] || it_kernel_slot_fused(it__kc.slot))
        return false;
    it_error_clear();
    it__kc.retried = true;
    return true;
}

it_status it__kpost(it_status st) {
    if (it__prof_armed) st = it__prof_post(st);
    slot_stats *s = &it__kc.d->stats[it__kc.slot];
    uint64_t ns = now_ns() - it__kc.t0;
    atomic_fetch_add(&s->calls, 1);
    if (!it__kc.d->native[it__kc.slot] || it__kc.retried) {
        atomic_fetch_add(&s->fb_calls, 1);
        atomic_fetch_add(&s->fb_ns, ns);
    }
    atomic_fetch_add(&s->ns, ns);
    it__kc.st = st; /* for the slot's describer, which KCALL runs next when st != IT_OK */
    return st;
}

it_status it_backend_kernel_stats(const it_backend *b, it_kernel_stat *out) {
    it__dispatch *d = it__dispatch_of(b);
    if (!d) return it_last_status();
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        out[i].slot = it_kernel_slot_name(i);
        out[i].native = d->native[i];
        out[i].calls = atomic_load(&d->stats[i].calls);
        out[i].ms = (double)atomic_load(&d->stats[i].ns) * 1e-6;
        out[i].bytes_moved = atomic_load(&d->stats[i].bytes);
        out[i].fallback_calls = atomic_load(&d->stats[i].fb_calls);
    }
    return IT_OK;
}

void it_backend_stats_reset(const it_backend *b) {
    it__dispatch *d = it__dispatch_of(b);
    if (!d) return;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        atomic_store(&d->stats[i].calls, 0);
        atomic_store(&d->stats[i].ns, 0);
        atomic_store(&d->stats[i].bytes, 0);
        atomic_store(&d->stats[i].fb_calls, 0);
        atomic_store(&d->stats[i].fb_ns, 0);
    }
}

it_status it_backend_report(const it_backend *b, FILE *f) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    it_status s = it_backend_kernel_stats(b, st);
    if (s) return s;
    const it__dispatch *d = it__dispatch_of(b);
    int native = 0, composed = 0;
    double total = 0, fb_ms = 0;
    uint64_t bytes = 0, calls = 0, fb_calls = 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        native += st[i].native;
        composed += !st[i].native && it_kernel_slot_fused(i);
        total += st[i].ms;
        /* the calls the CPU served: every call of an empty slot, and those a native slot declined */
        fb_ms += (double)atomic_load(&d->stats[i].fb_ns) * 1e-6;
        calls += st[i].calls;
        fb_calls += st[i].fallback_calls;
        bytes += st[i].bytes_moved;
    }
    fprintf(f,
            "backend '%s': %d of %zu kernel slots native, %zu empty ones served by the CPU fallback, %d fused ones "
            "composed by the core from the others; %llu of %llu calls (%.1f%%) ran on the CPU fallback\n",
            b->name, native, (size_t)IT_KERNEL_SLOT_COUNT, (size_t)IT_KERNEL_SLOT_COUNT - (size_t)native - composed,
            composed, (unsigned long long)fb_calls, (unsigned long long)calls,
            calls ? 100.0 * (double)fb_calls / (double)calls : 0.0);
    fprintf(f, "  %-21s %-10s %10s %10s %12s %7s %14s\n", "kernel", "path", "calls", "on CPU", "time ms", "time%",
            "fallback MB");
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
        /* "native+cpu": a native slot that declined some calls (IT_ERR_UNSUPPORTED) */
        const char *path = "native";
        if (!st[i].native)
            path = it_kernel_slot_fused(i) ? "composed" : "fallback";
        else if (st[i].fallback_calls)
            path = "native+cpu";
        fprintf(f, "  %-21s %-10s %10llu %10llu %12.2f %6.1f%% %14.2f\n", st[i].slot, path,
                (unsigned long long)st[i].calls, (unsigned long long)st[i].fallback_calls, st[i].ms,
                total > 0 ? 100.0 * st[i].ms / total : 0.0, (double)st[i].bytes_moved / (1024.0 * 1024.0));
    }
    fprintf(f,
            "  total %.2f ms in kernels (host-side time: enqueue for native asynchronous kernels), %.2f ms in "
            "calls the CPU fallback served, %.2f MB moved by fallbacks\n",
            total, fb_ms, (double)bytes / (1024.0 * 1024.0));
    return IT_OK;
}
