/* bf16 GEMM through oneDNN's matmul (Debian's libdnnl-dev), the CPU backend's choice for
 * bf16 products on CPUs with bf16 units when it is built in (gemm.c; IT_CPU_SBGEMM,
 * sgemm_select.h, forces a path). oneDNN picks its kernel from cpuid: brgemm on
 * AVX512_BF16 (vdpbf16ps) or on AMX tiles, fp32 sums in both; that choice is read once, from
 * a probe product's implementation name, and a build whose oneDNN would take neither (an
 * fp32 emulation) is not used.
 *
 *   C[i] (m, n) = alpha op(A[i]) op(B[i]) + beta C[i],   i < batch
 *   A, B, C bf16, row-major with lda / ldb / ldc, batch strides sa / sb / sc in elements
 *   (0: the one matrix broadcast over the batch); C rounded once, to nearest even.
 *
 * Why oneDNN and not only the own kernel (sbgemm_avx512bf16.c): it measures faster on every
 * GPT-2 shape (docs/performance.md has both). A primitive is created per call: with oneDNN's
 * primitive cache that costs about 2 us, against the millisecond a product takes. Results are
 * deterministic for a given thread count (oneDNN fixes its partitioning from it); unlike the
 * own kernel's they may differ between thread counts in the last bits. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/sgemm_select.h"

#ifdef IT_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.h>

static dnnl_engine_t g_engine;
static char g_impl[64];
static bool g_ready;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_stream_key; /* a stream per calling thread (never shared), gone with it */

static void stream_free(void *s) { dnnl_stream_destroy((dnnl_stream_t)s); }

static dnnl_stream_t thread_stream(void) {
    dnnl_stream_t s = pthread_getspecific(g_stream_key);
    if (s == NULL && dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags) == dnnl_success &&
        pthread_setspecific(g_stream_key, s) != 0) {
        dnnl_stream_destroy(s);
        s = NULL;
    }
    return s;
}

/* A matrix operand of the product: dims {batch, rows, cols} (2-D when flat). */
static bool desc3(dnnl_memory_desc_t *d, bool flat, int64_t batch, int64_t rows, int64_t cols, bool trans, int64_t ld,
                  int64_t sbatch) {
    /* op(X) (rows, cols); stored row-major with ld, or its transpose */
    int64_t srow = trans ? 1 : ld, scol = trans ? ld : 1;
    if (flat) {
        dnnl_dims_t dims = {rows, cols}, st = {srow, scol};
        return dnnl_memory_desc_init_by_strides(d, 2, dims, dnnl_bf16, st) == dnnl_success;
    }
    int64_t b = sbatch == 0 ? 1 : batch;
    /* a broadcast (batch 1) matrix's batch stride is never followed: any value past it */
    int64_t sb = sbatch == 0 ? (trans ? ld * cols : ld * rows) : sbatch;
    dnnl_dims_t dims = {b, rows, cols}, st = {sb, srow, scol};
    return dnnl_memory_desc_init_by_strides(d, 3, dims, dnnl_bf16, st) == dnnl_success;
}

/* The primitive for the product, or NULL; *impl gets its implementation name. */
static dnnl_primitive_t make(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda,
                             int64_t sa, int64_t ldb, int64_t sb, float beta, int64_t ldc, int64_t sc,
                             dnnl_memory_desc_t md[3], const char **impl) {
    bool flat = batch == 1;
    if (!desc3(&md[0], flat, batch, m, k, ta, lda, sa) || !desc3(&md[1], flat, batch, k, n, tb, ldb, sb) ||
        !desc3(&md[2], flat, batch, m, n, false, ldc, sc))
        return NULL;
    dnnl_matmul_desc_t mm;
    if (dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok) ok = dnnl_primitive_desc_create(&pd, &mm, attr, g_engine, NULL) == dnnl_success;
    if (ok && impl) ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl) == dnnl_success;
    if (ok && impl) { /* (the name lives in pd: copied before pd goes) */
        snprintf(g_impl, sizeof g_impl, "%s", *impl);
        *impl = g_impl;
    }
    if (ok) ok = dnnl_primitive_create(&p, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok ? p : NULL;
}

static void init_once(void) {
    if (!it_cpu_has_avx512_bf16() && !it_cpu_has_amx_bf16()) return;
    if (pthread_key_create(&g_stream_key, stream_free) != 0) return;
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
    /* the kernel oneDNN would take for a GPT-2-like product */
    dnnl_memory_desc_t md[3];
    const char *impl = NULL;
    dnnl_primitive_t p = make(1, false, true, 256, 768, 768, 1.0f, 768, 0, 768, 0, 0.0f, 768, 0, md, &impl);
    if (p == NULL) return;
    dnnl_primitive_destroy(p);
    g_ready = strstr(g_impl, "bf16") != NULL || strstr(g_impl, "amx") != NULL;
}

/* (this file's own state: the exported names below may resolve to another copy of them, a
 * test's that includes this source) */
static bool ready(void) {
    pthread_once(&g_once, init_once);
    return g_ready;
}

bool it_cpu_onednn_bf16_ready(void) { return ready(); }

const char *it_cpu_onednn_bf16_impl(void) { return ready() ? g_impl : "none"; }

bool it_cpu_sbgemm_onednn(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const uint16_t *a, int64_t lda, int64_t sa, const uint16_t *b, int64_t ldb, int64_t sb,
                          float beta, uint16_t *c, int64_t ldc, int64_t sc) {
    if (!ready() || batch <= 0 || m <= 0 || n <= 0 || k <= 0) return false;
    dnnl_stream_t stream = thread_stream();
    if (stream == NULL) return false;
    dnnl_memory_desc_t md[3];
    dnnl_primitive_t p = make(batch, ta, tb, m, n, k, alpha, lda, sa, ldb, sb, beta, ldc, sc, md, NULL);
    if (p == NULL) return false;
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    void *ptr[3] = {(void *)a, (void *)b, c};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) ok = dnnl_memory_create(&mem[i], &md[i], g_engine, ptr[i]) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        ok = dnnl_primitive_execute(p, stream, 3, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
    }
    for (int i = 0; i < 3; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    dnnl_primitive_destroy(p);
    return ok;
}

#else /* built without oneDNN */

bool it_cpu_onednn_bf16_ready(void) { return false; }
const char *it_cpu_onednn_bf16_impl(void) { return "none"; }
bool it_cpu_sbgemm_onednn(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const uint16_t *a, int64_t lda, int64_t sa, const uint16_t *b, int64_t ldb, int64_t sb,
                          float beta, uint16_t *c, int64_t ldc, int64_t sc) {
    (void)batch, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)sa, (void)b,
        (void)ldb, (void)sb, (void)beta, (void)c, (void)ldc, (void)sc;
    return false;
}

#endif
