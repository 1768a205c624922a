/* bf16 GEMM through oneDNN's matmul (Debian's libdnnl-dev), the CPU backend's choice for
 * bf16 products on CPUs with bf16 units when it is built in (gemm.c; IT_CPU_SBGEMM,
 * sgemm_select.h, forces a path).
 *
 *   C[i] (m, n) = alpha op(A[i]) op(B[i]) + beta C[i],   i < batch
 *   A, B, C bf16, row-major with lda / ldb / ldc, batch strides sa / sb / sc in elements
 *   (0: the one matrix broadcast over the batch); fp32 sums, C rounded once, to nearest even.
 *
 * Two ways of asking, chosen once from a probe product's implementation name:
 *  - shape-free (CPUs with AVX512_BF16, oneDNN's "brg:avx512_core_bf16"): products with a
 *    dim that is not a multiple of 64 (Mixtral's tokens per expert, a new row count every
 *    step, where a shaped primitive would be compiled anew each time: 3-4 ms) take one
 *    primitive per layout (2-D or batched, op(A), op(B), beta) with every dim, leading
 *    dimension and alpha given at run time, which oneDNN serves with its jit bf16 GEMM
 *    (vdpbf16ps). A model's own sizes (every dim a multiple of 64, repeated every step) are
 *    asked shaped, on the brgemm, which is faster for them (GPT-2's 256 x 3072 x 768 tB:
 *    393 against 311 GFLOP/s on Zen 4), except the largest untransposed ones (below).
 *  - shaped (AMX, "brg:avx512_core_amx"): a primitive per call, of the call's shape, since
 *    only the shaped brgemm reaches the tiles; oneDNN's primitive cache keeps repeats at ~2 us.
 *    Only for products whose every dim is a multiple of 64 (a model's own sizes, which repeat
 *    every step); the others (Mixtral's tokens per expert, new every step) go shape-free
 *    when oneDNN serves that with a bf16 kernel, instead of compiling a kernel per call (3-4
 *    ms each; docs/performance.md has the figures). A rule of the call alone, so a resumed
 *    run takes the path the uninterrupted one took.
 * A build whose oneDNN would take neither (an fp32 emulation) is not used.
 *
 * Why oneDNN and not only the own kernel (sbgemm_avx512bf16.c): it measures faster on every
 * GPT-2 shape (docs/performance.md has both). Results are deterministic for a given thread
 * count (oneDNN fixes its partitioning from it); unlike the own kernel's they may differ
 * between thread counts in the last bits. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/sgemm_select.h"

#ifdef IT_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.h>

enum { MODE_NONE, MODE_SHAPE_FREE, MODE_SHAPED };

/* Products of at least this many multiply-adds ("big") are asked shaped with a transposed
 * operand whatever their dims, and shape-free without one, on AVX512_BF16 (below). */
#define SHAPED_MACS 1073741824.0 /* 2^30 */

static dnnl_engine_t g_engine;
static char g_impl[64];
static int g_mode;
static bool g_free_too; /* MODE_SHAPED: irregular shapes may go shape-free (a bf16 kernel serves them) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_stream_key; /* a stream per calling thread (never shared), gone with it */

/* The shape-free primitives, one per layout, made at first use and kept. */
enum { N_LAYOUTS = 32 };
static struct {
    bool batched, ta, tb;
    float beta;
    dnnl_primitive_t p;
} g_layouts[N_LAYOUTS];
static int g_n_layouts;
static pthread_mutex_t g_layouts_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* A matrix operand op(X) (rows, cols), stored row-major with ld or as its transpose:
 * dims {batch, rows, cols} (2-D when flat). sbatch 0 broadcasts it (batch 1). With `free`,
 * every dim and stride but the unit one is DNNL_RUNTIME_DIM_VAL. */
static bool operand_desc(dnnl_memory_desc_t *d, bool free, bool flat, int64_t batch, int64_t rows, int64_t cols,
                         bool trans, int64_t ld, int64_t sbatch) {
    const int64_t R = DNNL_RUNTIME_DIM_VAL;
    int64_t srow = trans ? 1 : ld, scol = trans ? ld : 1;
    int64_t b = sbatch == 0 ? 1 : batch;
    /* a broadcast (batch 1) matrix's batch stride is never followed: any value past it */
    int64_t sb = sbatch == 0 ? (trans ? ld * cols : ld * rows) : sbatch;
    if (free) {
        rows = cols = b = sb = R;
        srow = trans ? 1 : R, scol = trans ? R : 1;
    }
    if (flat) {
        dnnl_dims_t dims = {rows, cols}, st = {srow, scol};
        return dnnl_memory_desc_init_by_strides(d, 2, dims, dnnl_bf16, st) == dnnl_success;
    }
    dnnl_dims_t dims = {b, rows, cols}, st = {sb, srow, scol};
    return dnnl_memory_desc_init_by_strides(d, 3, dims, dnnl_bf16, st) == dnnl_success;
}

typedef struct call {
    int64_t batch, m, n, k, lda, sa, ldb, sb, ldc, sc;
    bool ta, tb;
    float alpha, beta;
} call;

static bool descs(const call *c, bool free, dnnl_memory_desc_t md[3]) {
    bool flat = c->batch == 1;
    return operand_desc(&md[0], free, flat, c->batch, c->m, c->k, c->ta, c->lda, c->sa) &&
           operand_desc(&md[1], free, flat, c->batch, c->k, c->n, c->tb, c->ldb, c->sb) &&
           operand_desc(&md[2], free, flat, c->batch, c->m, c->n, false, c->ldc, c->sc);
}

/* The primitive for c's layout (free: alpha at run time) or for c itself; NULL when oneDNN
 * refuses it. name (64 bytes, may be NULL) gets its implementation's name. */
static dnnl_primitive_t make(const call *c, bool free, char *name) {
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t mm;
    if (!descs(c, free, md) || dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) != dnnl_success) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    float scale = free ? DNNL_RUNTIME_F32_VAL : c->alpha;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && (free || c->alpha != 1.0f))
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale) == dnnl_success;
    if (ok && c->beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, c->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (ok) ok = dnnl_primitive_desc_create(&pd, &mm, attr, g_engine, NULL) == dnnl_success;
    const char *impl = NULL;
    if (ok && name) {
        ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success;
        if (ok) snprintf(name, 64, "%s", impl); /* (the string lives in pd) */
    }
    if (ok) ok = dnnl_primitive_create(&p, pd) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok ? p : NULL;
}

static bool fast_name(const char *impl, const char *isa) {
    return strstr(impl, isa) != NULL && strncmp(impl, "ref", 3) != 0;
}

static void init_once(void) {
    if (!it_cpu_has_avx512_bf16() && !it_cpu_has_amx_bf16()) return;
    if (pthread_key_create(&g_stream_key, stream_free) != 0) return;
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
    /* the kernel oneDNN would take for a GPT-2-like product of known shape */
    const call probe = {1, 256, 768, 768, 768, 0, 768, 0, 768, 0, false, true, 1.0f, 0.0f};
    dnnl_primitive_t p = make(&probe, false, g_impl);
    if (p == NULL) return;
    dnnl_primitive_destroy(p);
    bool amx = fast_name(g_impl, "amx");
    if (!amx && !fast_name(g_impl, "bf16")) return;
    /* and for the same product asked shape-free: its jit bf16 GEMM, or not at all */
    char free_impl[64];
    p = make(&probe, true, free_impl);
    bool free_ok = p != NULL && strncmp(free_impl, "ref", 3) != 0;
    if (p) dnnl_primitive_destroy(p);
    if (amx || !free_ok) {
        g_mode = MODE_SHAPED;
        g_free_too = amx && free_ok;
        if (g_free_too) { /* "brg:avx512_core_amx+gemm:jit" */
            char both[64];
            snprintf(both, sizeof both, "%.30s+%.32s", g_impl, free_impl);
            memcpy(g_impl, both, sizeof both);
        }
        return;
    }
    /* named for both: "gemm:jit/avx512_core_bf16" */
    const char *isa = strchr(g_impl, ':') ? strchr(g_impl, ':') + 1 : g_impl;
    char both[64];
    snprintf(both, sizeof both, "%.24s/%.32s", free_impl, isa);
    memcpy(g_impl, both, sizeof both);
    g_mode = MODE_SHAPE_FREE;
}

/* (this file's own state: the exported names below may resolve to another copy of them, a
 * test's that includes this source) */
static bool ready(void) {
    pthread_once(&g_once, init_once);
    return g_mode != MODE_NONE;
}

bool it_cpu_onednn_bf16_ready(void) { return ready(); }

const char *it_cpu_onednn_bf16_impl(void) { return ready() ? g_impl : "none"; }

/* The shape-free primitive of c's layout (kept; NULL when oneDNN refuses it). */
static dnnl_primitive_t layout_primitive(const call *c) {
    bool batched = c->batch > 1;
    dnnl_primitive_t p = NULL;
    pthread_mutex_lock(&g_layouts_lock);
    for (int i = 0; i < g_n_layouts && !p; i++)
        if (g_layouts[i].batched == batched && g_layouts[i].ta == c->ta && g_layouts[i].tb == c->tb &&
            memcmp(&g_layouts[i].beta, &c->beta, sizeof c->beta) == 0)
            p = g_layouts[i].p;
    if (!p && g_n_layouts < N_LAYOUTS && (p = make(c, true, NULL)) != NULL)
        g_layouts[g_n_layouts++] = (__typeof__(g_layouts[0])){batched, c->ta, c->tb, c->beta, p};
    pthread_mutex_unlock(&g_layouts_lock);
    return p;
}

bool it_cpu_sbgemm_onednn(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const uint16_t *a, int64_t lda, int64_t sa, const uint16_t *b, int64_t ldb, int64_t sb,
                          float beta, uint16_t *c, int64_t ldc, int64_t sc) {
    if (!ready() || batch <= 0 || m <= 0 || n <= 0 || k <= 0) return false;
    dnnl_stream_t stream = thread_stream();
    if (stream == NULL) return false;
    const call cl = {batch, m, n, k, lda, sa, ldb, sb, ldc, sc, ta, tb, alpha, beta};
    /* AVX512_BF16: shaped where every dim is a multiple of 64, shape-free otherwise, but for
     * the big products, whose shapes (an LM head's) repeat every step and dwarf one compile
     * (~3 ms): oneDNN's shape-free GEMM is slow for them with a transposed operand (50304 x
     * 768 x 256 tA at a quarter of its brgemm's speed, 1024 x 32000 x 384 tB at half) and
     * the faster one without (1024 x 384 x 32000: 851 against 665 GFLOP/s on Zen 5).
     * AMX: shaped where every dim is a multiple of 64 (the tiles), else shape-free when a
     * bf16 kernel serves that. */
    bool big = (double)batch * (double)m * (double)n * (double)k >= SHAPED_MACS;
    bool irregular = m % 64 || n % 64 || k % 64;
    bool free = g_mode == MODE_SHAPE_FREE ? (big ? !(ta || tb) : irregular) : g_free_too && irregular;
    /* a layout past the table's room is asked shaped */
    dnnl_primitive_t p = free ? layout_primitive(&cl) : NULL, owned = NULL;
    if (p == NULL) {
        free = false;
        p = owned = make(&cl, false, NULL);
    }
    dnnl_memory_desc_t md[4];
    if (p == NULL || !descs(&cl, false, md)) {
        if (owned) dnnl_primitive_destroy(owned);
        return false;
    }
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    void *ptr[4] = {(void *)a, (void *)b, c, &alpha};
    int nargs = free ? 4 : 3;
    bool ok = !free || dnnl_memory_desc_init_by_tag(&md[3], 1, (dnnl_dims_t){1}, dnnl_f32, dnnl_a) == dnnl_success;
    for (int i = 0; i < nargs && ok; i++) ok = dnnl_memory_create(&mem[i], &md[i], g_engine, ptr[i]) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                                   {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]},
                                   {DNNL_ARG_ATTR_OUTPUT_SCALES, mem[3]}};
        ok = dnnl_primitive_execute(p, stream, nargs, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
    }
    for (int i = 0; i < 4; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (owned) dnnl_primitive_destroy(owned);
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
