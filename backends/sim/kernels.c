/* The sim's kernel table: every slot of it_kernels, each an asynchronous launch.
 *
 * A slot call does what a real backend's launch does, and no more:
 *   1. check cheaply, on the host, that every descriptor's span lies inside one live
 *      allocation of the stream's device (error: IT_ERR_INVALID_ARG naming the kernel and
 *      the argument) -- the host never reads device data to do so;
 *   2. copy the descriptors and by-value arguments (it_gemm_args, it_softmax_args,
 *      it_adam_args, scalars) into a queued item: the caller's structs may be gone by the
 *      time the kernel runs, exactly like kernel parameters copied at cudaLaunchKernel;
 *   3. enqueue the item on the stream and return IT_OK.
 * The stream's worker then unprotects the allocations the item touches, runs the CPU
 * kernel from it_cpu_kernels() (stream argument NULL: it runs synchronously on the
 * worker, using OpenMP inside), and protects them again.
 *
 * So, as with CUDA, errors the kernel itself detects (a dtype it does not support,
 * mismatched shapes) are not returned by the launch: they surface as the stream's sticky
 * error at the next stream_synchronize / synchronous memcpy.
 *
 * A vendor replaces step 3's payload: instead of a CPU kernel, the item (or the launch
 * itself) calls the device library (cublasGemmStridedBatchedEx, cnnlSoftmaxForward, ...)
 * or a hand-written kernel on the stream; the checks and the copying of arguments stay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Marks each slot's launcher: a launcher left out of the table at the end of this file (a
 * slot a port has not written yet, left to the core's CPU fallback) still compiles under
 * -Werror, so taking a slot out of the table is a one-line change. */
#define SIM_SLOT static __attribute__((unused))

#define SIM_MAX_ARGS 9 /* attention_bwd and flash_attention_bwd have the most descriptors */

typedef struct sim_kernel sim_kernel;
/* Runs the CPU kernel on the item's copies. */
typedef it_status (*sim_call_fn)(sim_kernel *k, const it_kernels *cpu);

struct sim_kernel {
    sim_item item; /* first: the queue sees a sim_item */
    const char *name;
    sim_call_fn call;
    int device;
    int n;
    const char *arg_name[SIM_MAX_ARGS];
    it_tdesc d[SIM_MAX_ARGS];
    bool present[SIM_MAX_ARGS]; /* false: an optional argument passed as NULL */
    bool missing;               /* a required argument was NULL */
    const char *missing_name;
    union { /* by-value arguments */
        struct {
            int op;
            float alpha;
        } ew; /* unary (op, alpha), binary and reduce (op) */
        it_scalar value;
        it_gemm_args gemm;
        it_softmax_args softmax;
        it_flash_args flash;
        float eps;
        int64_t valid;
        struct {
            float lr, grad_scale;
        } sgd;
        it_adam_args adam;
        bool inverse; /* rope */
        int64_t k;    /* topk */
    } a;
};

/* Descriptor i as the CPU kernel takes it: the item's copy (NULL for an absent optional
 * argument). */
#define D(k, i) ((k)->present[i] ? &(k)->d[i] : NULL)

/* On the worker: make the touched allocations accessible, run, protect them again. */
static it_status kernel_run(sim_item *it) {
    sim_kernel *k = (sim_kernel *)it;
    sim_alloc *held[SIM_MAX_ARGS] = {0};
    it_status st = IT_OK;
    for (int i = 0; i < k->n && !st; i++)
        if (k->present[i]) st = sim_mem_acquire(k->device, k->item.what, k->arg_name[i], &k->d[i], &held[i]);
    if (!st) st = k->call(k, it_cpu_kernels());
    for (int i = 0; i < k->n; i++) sim_mem_release(held[i]);
    return st;
}

static sim_kernel *kernel_new(const char *name, sim_call_fn call) {
    sim_kernel *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->name = name;
    k->call = call;
    k->item.run = kernel_run;
    snprintf(k->item.what, sizeof k->item.what, "kernel '%s'", name);
    return k;
}

/* Add a descriptor argument (copied); a NULL `d` is allowed only when `optional`. */
static void kernel_arg(sim_kernel *k, const char *name, const it_tdesc *d, bool optional) {
    if (!k) return;
    if (!d && !optional && !k->missing) {
        k->missing = true;
        k->missing_name = name;
    }
    k->arg_name[k->n] = name;
    if (d) {
        k->d[k->n] = *d;
        k->present[k->n] = true;
    }
    k->n++;
}
#define ARG(k, name, d) kernel_arg(k, name, d, false)
#define OPT(k, name, d) kernel_arg(k, name, d, true)

/* Validate on the host and enqueue; frees k on failure. */
static it_status kernel_launch(it_stream *s, sim_kernel *k, const char *name) {
    if (!k) return it_error(IT_ERR_OOM, "sim: %s: out of host memory for the launch", name);
    it_status st = sim_stream_resolve(name, s, &s);
    if (!st && k->missing) st = it_error(IT_ERR_INVALID_ARG, "sim: %s: argument '%s' is NULL", name, k->missing_name);
    for (int i = 0; i < k->n && !st; i++)
        if (k->present[i]) st = sim_mem_check_desc(s->device, name, k->arg_name[i], &k->d[i]);
    if (st) {
        free(k);
        return st;
    }
    k->device = s->device;
    sim_enqueue(s, &k->item); /* cudaLaunchKernel(..., stream) */
    return IT_OK;
}

/* ---------------------------------------------------------------- required */

static it_status call_cast(sim_kernel *k, const it_kernels *cpu) { return cpu->cast(NULL, D(k, 0), D(k, 1)); }
SIM_SLOT it_status sim_cast(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    sim_kernel *k = kernel_new("cast", call_cast);
    ARG(k, "src", src);
    ARG(k, "dst", dst);
    return kernel_launch(s, k, "cast");
}

static it_status call_fill(sim_kernel *k, const it_kernels *cpu) { return cpu->fill(NULL, D(k, 0), k->a.value); }
SIM_SLOT it_status sim_fill(it_stream *s, it_tdesc *dst, it_scalar value) {
    sim_kernel *k = kernel_new("fill", call_fill);
    ARG(k, "dst", dst);
    if (k) k->a.value = value;
    return kernel_launch(s, k, "fill");
}

static it_status call_copy_strided(sim_kernel *k, const it_kernels *cpu) {
    return cpu->copy_strided(NULL, D(k, 0), D(k, 1));
}
SIM_SLOT it_status sim_copy_strided(it_stream *s, const it_tdesc *src, it_tdesc *dst) {
    sim_kernel *k = kernel_new("copy_strided", call_copy_strided);
    ARG(k, "src", src);
    ARG(k, "dst", dst);
    return kernel_launch(s, k, "copy_strided");
}

/* ---------------------------------------------------------------- linear algebra */

/* The descriptors travel inside the args copy; d[0..2] are the same spans, for checks. */
static it_status call_gemm(sim_kernel *k, const it_kernels *cpu) { return cpu->gemm(NULL, &k->a.gemm); }
SIM_SLOT it_status sim_gemm(it_stream *s, const it_gemm_args *args) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: gemm: args is NULL");
    sim_kernel *k = kernel_new("gemm", call_gemm);
    ARG(k, "a", &args->a);
    ARG(k, "b", &args->b);
    ARG(k, "c", &args->c);
    if (k) k->a.gemm = *args;
    return kernel_launch(s, k, "gemm");
}

/* ---------------------------------------------------------------- elementwise */

static it_status call_unary(sim_kernel *k, const it_kernels *cpu) {
    return cpu->unary(NULL, (it_unary_op)k->a.ew.op, k->a.ew.alpha, D(k, 0), D(k, 1));
}
SIM_SLOT it_status sim_unary(it_stream *s, it_unary_op op, float alpha, const it_tdesc *x, it_tdesc *out) {
    sim_kernel *k = kernel_new("unary", call_unary);
    ARG(k, "x", x);
    ARG(k, "out", out);
    if (k) {
        k->a.ew.op = (int)op;
        k->a.ew.alpha = alpha;
    }
    return kernel_launch(s, k, "unary");
}

static it_status call_binary(sim_kernel *k, const it_kernels *cpu) {
    return cpu->binary(NULL, (it_binary_op)k->a.ew.op, D(k, 0), D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_binary(it_stream *s, it_binary_op op, const it_tdesc *a, const it_tdesc *b, it_tdesc *out) {
    sim_kernel *k = kernel_new("binary", call_binary);
    ARG(k, "a", a);
    ARG(k, "b", b);
    ARG(k, "out", out);
    if (k) k->a.ew.op = (int)op;
    return kernel_launch(s, k, "binary");
}

static it_status call_reduce(sim_kernel *k, const it_kernels *cpu) {
    return cpu->reduce(NULL, (it_reduce_op)k->a.ew.op, D(k, 0), D(k, 1));
}
SIM_SLOT it_status sim_reduce(it_stream *s, it_reduce_op op, const it_tdesc *x, it_tdesc *out) {
    sim_kernel *k = kernel_new("reduce", call_reduce);
    ARG(k, "x", x);
    ARG(k, "out", out);
    if (k) k->a.ew.op = (int)op;
    return kernel_launch(s, k, "reduce");
}

/* ---------------------------------------------------------------- embedding */

static it_status call_embedding_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->embedding_fwd(NULL, D(k, 0), D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_embedding_fwd(it_stream *s, const it_tdesc *idx, const it_tdesc *weight, it_tdesc *out) {
    sim_kernel *k = kernel_new("embedding_fwd", call_embedding_fwd);
    ARG(k, "idx", idx);
    ARG(k, "weight", weight);
    ARG(k, "out", out);
    return kernel_launch(s, k, "embedding_fwd");
}

static it_status call_embedding_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->embedding_bwd(NULL, D(k, 0), D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_embedding_bwd(it_stream *s, const it_tdesc *idx, const it_tdesc *dout, it_tdesc *dweight) {
    sim_kernel *k = kernel_new("embedding_bwd", call_embedding_bwd);
    ARG(k, "idx", idx);
    ARG(k, "dout", dout);
    ARG(k, "dweight", dweight);
    return kernel_launch(s, k, "embedding_bwd");
}

/* ---------------------------------------------------------------- layernorm */

static it_status call_layernorm_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->layernorm_fwd(NULL, D(k, 0), D(k, 1), D(k, 2), k->a.eps, D(k, 3), D(k, 4), D(k, 5));
}
SIM_SLOT it_status sim_layernorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, const it_tdesc *b, float eps,
                                     it_tdesc *y, it_tdesc *mean, it_tdesc *rstd) {
    sim_kernel *k = kernel_new("layernorm_fwd", call_layernorm_fwd);
    ARG(k, "x", x);
    ARG(k, "w", w);
    OPT(k, "b", b);
    ARG(k, "y", y);
    ARG(k, "mean", mean);
    ARG(k, "rstd", rstd);
    if (k) k->a.eps = eps;
    return kernel_launch(s, k, "layernorm_fwd");
}

static it_status call_layernorm_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->layernorm_bwd(NULL, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4), D(k, 5), D(k, 6), D(k, 7));
}
SIM_SLOT it_status sim_layernorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                     const it_tdesc *mean, const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw,
                                     it_tdesc *db) {
    sim_kernel *k = kernel_new("layernorm_bwd", call_layernorm_bwd);
    ARG(k, "dy", dy);
    ARG(k, "x", x);
    ARG(k, "w", w);
    ARG(k, "mean", mean);
    ARG(k, "rstd", rstd);
    ARG(k, "dx", dx);
    ARG(k, "dw", dw);
    OPT(k, "db", db);
    return kernel_launch(s, k, "layernorm_bwd");
}

/* ---------------------------------------------------------------- softmax */

static it_status call_softmax_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->softmax_fwd(NULL, &k->a.softmax, D(k, 0), D(k, 1));
}
SIM_SLOT it_status sim_softmax_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *x, it_tdesc *y) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: softmax_fwd: args is NULL");
    sim_kernel *k = kernel_new("softmax_fwd", call_softmax_fwd);
    ARG(k, "x", x);
    ARG(k, "y", y);
    if (k) k->a.softmax = *args;
    return kernel_launch(s, k, "softmax_fwd");
}

static it_status call_softmax_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->softmax_bwd(NULL, &k->a.softmax, D(k, 0), D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_softmax_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *y, const it_tdesc *dy,
                                   it_tdesc *dx) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: softmax_bwd: args is NULL");
    sim_kernel *k = kernel_new("softmax_bwd", call_softmax_bwd);
    ARG(k, "y", y);
    ARG(k, "dy", dy);
    ARG(k, "dx", dx);
    if (k) k->a.softmax = *args;
    return kernel_launch(s, k, "softmax_bwd");
}

/* ---------------------------------------------------------------- fused attention
 * (optional slots: a port may leave them NULL and the core composes attention from gemm and
 * softmax). A fused kernel that declines must do so at launch, before anything is queued:
 * here, what the CPU kernel declines (not fp32, rows not row-major) is declined up front. */

static it_status att_declines(const char *name, int n, const it_tdesc *const *d) {
    for (int i = 0; i < n; i++) {
        if (!d[i]) return it_error(IT_ERR_INVALID_ARG, "sim: %s: argument %d is NULL", name, i);
        if (d[i]->dtype != IT_DTYPE_FP32)
            return it_error(IT_ERR_UNSUPPORTED, "sim: %s: takes fp32 only (got %s)", name, it_dtype_name(d[i]->dtype));
        if (d[i]->ndim == 4 &&
            (d[i]->strides[0] < 0 || d[i]->strides[1] < 0 || (d[i]->shape[3] > 1 && d[i]->strides[3] != 1) ||
             (d[i]->shape[2] > 1 && d[i]->strides[2] < d[i]->shape[3])))
            return it_error(IT_ERR_UNSUPPORTED, "sim: %s: rows that are not row-major", name);
    }
    /* d[0] is q (B, H, T, D), d[1] k (B, H, S, D): keys and a head dimension are needed */
    const it_tdesc *q = d[0], *k = d[1];
    if (q->ndim == 4 && k->ndim == 4 && q->shape[0] * q->shape[1] * q->shape[2] > 0 &&
        (k->shape[2] == 0 || q->shape[3] == 0))
        return it_error(IT_ERR_UNSUPPORTED, "sim: %s: no keys or an empty head dimension", name);
    return IT_OK;
}

static it_status call_attention_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->attention_fwd(NULL, &k->a.softmax, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4));
}
SIM_SLOT it_status sim_attention_fwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *kk,
                                     const it_tdesc *v, it_tdesc *att, it_tdesc *y) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: attention_fwd: args is NULL");
    const it_tdesc *all[5] = {q, kk, v, att, y};
    it_status st = att_declines("attention_fwd", 5, all);
    if (st) return st;
    sim_kernel *k = kernel_new("attention_fwd", call_attention_fwd);
    ARG(k, "q", q);
    ARG(k, "k", kk);
    ARG(k, "v", v);
    ARG(k, "att", att);
    ARG(k, "y", y);
    if (k) k->a.softmax = *args;
    return kernel_launch(s, k, "attention_fwd");
}

static it_status call_attention_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->attention_bwd(NULL, &k->a.softmax, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4), D(k, 5), D(k, 6),
                              D(k, 7), D(k, 8));
}
SIM_SLOT it_status sim_attention_bwd(it_stream *s, const it_softmax_args *args, const it_tdesc *q, const it_tdesc *kk,
                                     const it_tdesc *v, const it_tdesc *att, const it_tdesc *dy, it_tdesc *dq,
                                     it_tdesc *dk, it_tdesc *dv, it_tdesc *datt) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: attention_bwd: args is NULL");
    const it_tdesc *all[9] = {q, kk, v, att, dy, dq, dk, dv, datt};
    it_status st = att_declines("attention_bwd", 9, all);
    if (st) return st;
    sim_kernel *k = kernel_new("attention_bwd", call_attention_bwd);
    ARG(k, "q", q);
    ARG(k, "k", kk);
    ARG(k, "v", v);
    ARG(k, "att", att);
    ARG(k, "dy", dy);
    ARG(k, "dq", dq);
    ARG(k, "dk", dk);
    ARG(k, "dv", dv);
    ARG(k, "datt", datt);
    if (k) k->a.softmax = *args;
    return kernel_launch(s, k, "attention_bwd");
}

/* ---------------------------------------------------------------- flash attention
 * (optional slots as the fused attention's): what the CPU kernel would decline (a dtype, a
 * head size, a last stride) is declined here, before anything is queued. */

static it_status call_flash_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->flash_attention_fwd(NULL, &k->a.flash, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4));
}
SIM_SLOT it_status sim_flash_attention_fwd(it_stream *s, const it_flash_args *args, const it_tdesc *q,
                                           const it_tdesc *kk, const it_tdesc *v, it_tdesc *y, it_tdesc *lse) {
    it_status st =
        it_cpu_flash_attention_check("sim: flash_attention_fwd", args, q, kk, v, y, NULL, lse, NULL, NULL, NULL);
    if (st) return st;
    sim_kernel *k = kernel_new("flash_attention_fwd", call_flash_fwd);
    ARG(k, "q", q);
    ARG(k, "k", kk);
    ARG(k, "v", v);
    ARG(k, "y", y);
    ARG(k, "lse", lse);
    if (k) k->a.flash = *args;
    return kernel_launch(s, k, "flash_attention_fwd");
}

static it_status call_flash_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->flash_attention_bwd(NULL, &k->a.flash, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4), D(k, 5), D(k, 6),
                                    D(k, 7), D(k, 8));
}
SIM_SLOT it_status sim_flash_attention_bwd(it_stream *s, const it_flash_args *args, const it_tdesc *q,
                                           const it_tdesc *kk, const it_tdesc *v, const it_tdesc *y, const it_tdesc *dy,
                                           const it_tdesc *lse, it_tdesc *dq, it_tdesc *dk, it_tdesc *dv) {
    it_status st = it_cpu_flash_attention_check("sim: flash_attention_bwd", args, q, kk, v, y, dy, lse, dq, dk, dv);
    if (st) return st;
    sim_kernel *k = kernel_new("flash_attention_bwd", call_flash_bwd);
    ARG(k, "q", q);
    ARG(k, "k", kk);
    ARG(k, "v", v);
    ARG(k, "y", y);
    ARG(k, "dy", dy);
    ARG(k, "lse", lse);
    ARG(k, "dq", dq);
    ARG(k, "dk", dk);
    ARG(k, "dv", dv);
    if (k) k->a.flash = *args;
    return kernel_launch(s, k, "flash_attention_bwd");
}

/* ---------------------------------------------------------------- cross entropy */

static it_status call_cross_entropy_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->cross_entropy_fwd(NULL, D(k, 0), D(k, 1), k->a.valid, D(k, 2));
}
SIM_SLOT it_status sim_cross_entropy_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                         it_tdesc *losses) {
    sim_kernel *k = kernel_new("cross_entropy_fwd", call_cross_entropy_fwd);
    ARG(k, "logits", logits);
    ARG(k, "targets", targets);
    ARG(k, "losses", losses);
    if (k) k->a.valid = valid;
    return kernel_launch(s, k, "cross_entropy_fwd");
}

static it_status call_cross_entropy_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->cross_entropy_bwd(NULL, D(k, 0), D(k, 1), k->a.valid, D(k, 2), D(k, 3));
}
SIM_SLOT it_status sim_cross_entropy_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets, int64_t valid,
                                         const it_tdesc *dlosses, it_tdesc *dlogits) {
    sim_kernel *k = kernel_new("cross_entropy_bwd", call_cross_entropy_bwd);
    ARG(k, "logits", logits);
    ARG(k, "targets", targets);
    ARG(k, "dlosses", dlosses);
    ARG(k, "dlogits", dlogits);
    if (k) k->a.valid = valid;
    return kernel_launch(s, k, "cross_entropy_bwd");
}

/* The optional fused forms over half logits (a port may leave them NULL: the core casts the
 * logits to fp32 and back around the two above). */
static it_status call_cross_entropy_low_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->cross_entropy_low_fwd(NULL, D(k, 0), D(k, 1), k->a.valid, D(k, 2));
}
SIM_SLOT it_status sim_cross_entropy_low_fwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets,
                                             int64_t valid, it_tdesc *losses) {
    sim_kernel *k = kernel_new("cross_entropy_low_fwd", call_cross_entropy_low_fwd);
    ARG(k, "logits", logits);
    ARG(k, "targets", targets);
    ARG(k, "losses", losses);
    if (k) k->a.valid = valid;
    return kernel_launch(s, k, "cross_entropy_low_fwd");
}

static it_status call_cross_entropy_low_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->cross_entropy_low_bwd(NULL, D(k, 0), D(k, 1), k->a.valid, D(k, 2), D(k, 3));
}
SIM_SLOT it_status sim_cross_entropy_low_bwd(it_stream *s, const it_tdesc *logits, const it_tdesc *targets,
                                             int64_t valid, const it_tdesc *dlosses, it_tdesc *dlogits) {
    sim_kernel *k = kernel_new("cross_entropy_low_bwd", call_cross_entropy_low_bwd);
    ARG(k, "logits", logits);
    ARG(k, "targets", targets);
    ARG(k, "dlosses", dlosses);
    ARG(k, "dlogits", dlogits);
    if (k) k->a.valid = valid;
    return kernel_launch(s, k, "cross_entropy_low_bwd");
}

/* The optional fused SwiGLU over half inputs (a port may leave it NULL: the core widens the
 * products and runs silu and mul in fp32 around the unary and binary slots). */
static it_status call_swiglu_low_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->swiglu_low_fwd(NULL, D(k, 0), D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_swiglu_low_fwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, it_tdesc *y) {
    sim_kernel *k = kernel_new("swiglu_low_fwd", call_swiglu_low_fwd);
    ARG(k, "a", a);
    ARG(k, "b", b);
    ARG(k, "y", y);
    return kernel_launch(s, k, "swiglu_low_fwd");
}

static it_status call_swiglu_low_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->swiglu_low_bwd(NULL, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4));
}
SIM_SLOT it_status sim_swiglu_low_bwd(it_stream *s, const it_tdesc *a, const it_tdesc *b, const it_tdesc *dy,
                                      it_tdesc *da, it_tdesc *db) {
    sim_kernel *k = kernel_new("swiglu_low_bwd", call_swiglu_low_bwd);
    ARG(k, "a", a);
    ARG(k, "b", b);
    ARG(k, "dy", dy);
    ARG(k, "da", da);
    ARG(k, "db", db);
    return kernel_launch(s, k, "swiglu_low_bwd");
}

/* ---------------------------------------------------------------- optimizers */

static it_status call_sgd_step(sim_kernel *k, const it_kernels *cpu) {
    return cpu->sgd_step(NULL, k->a.sgd.lr, k->a.sgd.grad_scale, D(k, 0), D(k, 1));
}
SIM_SLOT it_status sim_sgd_step(it_stream *s, float lr, float grad_scale, it_tdesc *param, const it_tdesc *grad) {
    sim_kernel *k = kernel_new("sgd_step", call_sgd_step);
    ARG(k, "param", param);
    ARG(k, "grad", grad);
    if (k) {
        k->a.sgd.lr = lr;
        k->a.sgd.grad_scale = grad_scale;
    }
    return kernel_launch(s, k, "sgd_step");
}

static it_status call_adam_step(sim_kernel *k, const it_kernels *cpu) {
    return cpu->adam_step(NULL, &k->a.adam, D(k, 0), D(k, 1), D(k, 2), D(k, 3));
}
SIM_SLOT it_status sim_adam_step(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                 it_tdesc *m, it_tdesc *v) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: adam_step: args is NULL");
    sim_kernel *k = kernel_new("adam_step", call_adam_step);
    ARG(k, "param", param);
    ARG(k, "grad", grad);
    ARG(k, "m", m);
    ARG(k, "v", v);
    if (k) k->a.adam = *args;
    return kernel_launch(s, k, "adam_step");
}

static it_status call_adam_step_round(sim_kernel *k, const it_kernels *cpu) {
    return cpu->adam_step_round(NULL, &k->a.adam, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4));
}
/* The optional fused optimizer step (a port may leave it NULL: the core calls adam_step,
 * then cast). */
SIM_SLOT it_status sim_adam_step_round(it_stream *s, const it_adam_args *args, it_tdesc *param, const it_tdesc *grad,
                                       it_tdesc *m, it_tdesc *v, it_tdesc *low) {
    if (!args) return it_error(IT_ERR_INVALID_ARG, "sim: adam_step_round: args is NULL");
    sim_kernel *k = kernel_new("adam_step_round", call_adam_step_round);
    ARG(k, "param", param);
    ARG(k, "grad", grad);
    ARG(k, "m", m);
    ARG(k, "v", v);
    ARG(k, "low", low);
    if (k) k->a.adam = *args;
    return kernel_launch(s, k, "adam_step_round");
}

/* ---------------------------------------------------------------- LLaMA-3 / Mixtral */

static it_status call_rmsnorm_fwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->rmsnorm_fwd(NULL, D(k, 0), D(k, 1), k->a.eps, D(k, 2), D(k, 3));
}
SIM_SLOT it_status sim_rmsnorm_fwd(it_stream *s, const it_tdesc *x, const it_tdesc *w, float eps, it_tdesc *y,
                                   it_tdesc *rstd) {
    sim_kernel *k = kernel_new("rmsnorm_fwd", call_rmsnorm_fwd);
    ARG(k, "x", x);
    ARG(k, "w", w);
    ARG(k, "y", y);
    ARG(k, "rstd", rstd);
    if (k) k->a.eps = eps;
    return kernel_launch(s, k, "rmsnorm_fwd");
}

static it_status call_rmsnorm_bwd(sim_kernel *k, const it_kernels *cpu) {
    return cpu->rmsnorm_bwd(NULL, D(k, 0), D(k, 1), D(k, 2), D(k, 3), D(k, 4), D(k, 5));
}
SIM_SLOT it_status sim_rmsnorm_bwd(it_stream *s, const it_tdesc *dy, const it_tdesc *x, const it_tdesc *w,
                                   const it_tdesc *rstd, it_tdesc *dx, it_tdesc *dw) {
    sim_kernel *k = kernel_new("rmsnorm_bwd", call_rmsnorm_bwd);
    ARG(k, "dy", dy);
    ARG(k, "x", x);
    ARG(k, "w", w);
    ARG(k, "rstd", rstd);
    ARG(k, "dx", dx);
    ARG(k, "dw", dw);
    return kernel_launch(s, k, "rmsnorm_bwd");
}

static it_status call_rope(sim_kernel *k, const it_kernels *cpu) {
    return cpu->rope(NULL, D(k, 0), D(k, 1), D(k, 2), k->a.inverse, D(k, 3));
}
SIM_SLOT it_status sim_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                            it_tdesc *y) {
    sim_kernel *k = kernel_new("rope", call_rope);
    ARG(k, "x", x);
    ARG(k, "cos", cos);
    ARG(k, "sin", sin);
    ARG(k, "y", y);
    if (k) k->a.inverse = inverse;
    return kernel_launch(s, k, "rope");
}

static it_status call_topk(sim_kernel *k, const it_kernels *cpu) {
    return cpu->topk(NULL, D(k, 0), k->a.k, D(k, 1), D(k, 2));
}
SIM_SLOT it_status sim_topk(it_stream *s, const it_tdesc *x, int64_t kk, it_tdesc *values, it_tdesc *indices) {
    sim_kernel *k = kernel_new("topk", call_topk);
    ARG(k, "x", x);
    ARG(k, "values", values);
    ARG(k, "indices", indices);
    if (k) k->a.k = kk;
    return kernel_launch(s, k, "topk");
}

#ifndef IT_SIM_HALF
const it_kernels sim_kernels = {
    .cast = sim_cast,
    .fill = sim_fill,
    .copy_strided = sim_copy_strided,
    .gemm = sim_gemm,
    .unary = sim_unary,
    .binary = sim_binary,
    .reduce = sim_reduce,
    .embedding_fwd = sim_embedding_fwd,
    .embedding_bwd = sim_embedding_bwd,
    .layernorm_fwd = sim_layernorm_fwd,
    .layernorm_bwd = sim_layernorm_bwd,
    .softmax_fwd = sim_softmax_fwd,
    .softmax_bwd = sim_softmax_bwd,
    .cross_entropy_fwd = sim_cross_entropy_fwd,
    .cross_entropy_bwd = sim_cross_entropy_bwd,
    .sgd_step = sim_sgd_step,
    .adam_step = sim_adam_step,
    .rmsnorm_fwd = sim_rmsnorm_fwd,
    .rmsnorm_bwd = sim_rmsnorm_bwd,
    .rope = sim_rope,
    .topk = sim_topk,
    .attention_fwd = sim_attention_fwd,
    .attention_bwd = sim_attention_bwd,
    .adam_step_round = sim_adam_step_round,
    .cross_entropy_low_fwd = sim_cross_entropy_low_fwd,
    .cross_entropy_low_bwd = sim_cross_entropy_low_bwd,
    .swiglu_low_fwd = sim_swiglu_low_fwd,
    .swiglu_low_bwd = sim_swiglu_low_bwd,
    .flash_attention_fwd = sim_flash_attention_fwd,
    .flash_attention_bwd = sim_flash_attention_bwd,
};
#else
/* simhalf (a test build of this backend, libit_backend_simhalf.so): 10 of the 28 slots,
 * the rest left empty so the core's CPU fallback serves them. It shows that a backend
 * with half its kernels trains identically, and what the coverage report says about it. */
const it_kernels sim_kernels = {
    .cast = sim_cast,
    .fill = sim_fill,
    .copy_strided = sim_copy_strided,
    .gemm = sim_gemm,
    .unary = sim_unary,
    .binary = sim_binary,
    .softmax_fwd = sim_softmax_fwd,
    .rmsnorm_fwd = sim_rmsnorm_fwd,
    .rope = sim_rope,
    .topk = sim_topk,
};
#endif
