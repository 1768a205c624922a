/* The two memory plans of a model's loss (it_model_loss) against the plain composition.
 *
 * 1. The gradient written over the logits (their last use; what runs under bf16 autocast and
 *    wherever the fused head below does not): the tiny GPT-2 and LLaMA-3 fixtures on the
 *    debug batch, fp32 and bf16 autocast, loss and every parameter gradient with the
 *    overwrite one chunk of rows at a time (IT_CE_OVERWRITE_ROWS = 1, 7, and the default, 32 MB
 *    of rows: one chunk here) against IT_CE_OVERWRITE_ROWS=0 (a second buffer of the logits'
 *    size). Bitwise: rows are independent in every cross entropy kernel, so a chunk boundary
 *    changes no arithmetic.
 * 2. The LM head and the loss as one op (ops/linear_ce.c, float32): the same models, chunks of
 *    1, 7 and the default rows (IT_LINEAR_CE_ROWS), against IT_LINEAR_CE=0 with no overwrite.
 *    Within fp32 rounding: the loss to 2e-7 relative (the logits' products are the same
 *    rows; only the mean's order may differ), each gradient to 1e-5 of its tensor's largest
 *    entry plus 1e-7 (dw is summed over the chunks in another order than one product over
 *    all rows: a few ulp of sums over B*T terms).
 *
 * Memory, on a model whose logits are most of its memory (one layer 32 wide, vocabulary 8000,
 * B=4, T=64: logits 8.3 MB), where the loss's backward is the peak: the overwrite's peak must
 * be below the plain one's by at least 3/4 of the logits' size less its chunk buffer (the
 * second buffer is what is saved, but once it is gone the peak moves to the next highest
 * point of the step, measured: 8.19 MB of 8.26 saved; the quarter leaves room for that and
 * the allocator's rounding, up to 1/8 of a block), and the fused head's (7 rows a chunk)
 * below the plain one's by at least the logits' size (it holds neither of their buffers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/train.h"
#include "it_test.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/"

typedef struct batch {
    int B, T;
    int32_t *x, *y;
    unsigned char *buf;
} batch;

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static batch read_batch(const char *path) {
    batch b = {0};
    size_t n = 0;
    b.buf = read_file(path, &n);
    CHECK_MSG(b.buf && n >= 1024, "cannot read %s", path);
    if (!b.buf) return b;
    int32_t *h = (int32_t *)b.buf;
    b.B = h[2];
    b.T = h[3];
    b.x = (int32_t *)(b.buf + 1024);
    b.y = b.x + b.B * b.T;
    return b;
}

/* Loss, gradients (host copy, malloc'ed) and the peak used of one forward + backward, with the
 * loss's knobs set as given ("": the default). */
static float *run(it_model *m, const batch *b, const char *ow_rows, const char *linear_ce, const char *lin_rows,
                  float *loss, size_t *peak) {
    setenv("IT_CE_OVERWRITE_ROWS", ow_rows, 1);
    setenv("IT_LINEAR_CE", linear_ce, 1);
    setenv("IT_LINEAR_CE_ROWS", lin_rows, 1);
    it_device dev = it_model_device(m);
    CHECK_OK(it_model_zero_grad(m));
    CHECK_OK(it_device_synchronize(dev));
    it_mem_stats_reset_peak(dev);
    it_scope_begin();
    int64_t shape[2] = {b->B, b->T};
    it_tensor *x = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, b->x, sizeof(int32_t) * (size_t)(b->B * b->T));
    it_tensor *y = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, b->y, sizeof(int32_t) * (size_t)(b->B * b->T));
    it_tensor *L = it_model_loss(m, x, y);
    CHECK(L != NULL);
    double v = 0;
    if (L) {
        CHECK_OK(it_tensor_item(L, NULL, &v));
        CHECK_OK(it_backward(L));
    }
    it_scope_end();
    CHECK_OK(it_model_grads_final(m));
    it_mem_stats s = {0};
    CHECK_OK(it_mem_stats_get(dev, &s));
    *peak = s.peak_used;
    *loss = (float)v;
    it_tensor *g = it_model_grads(m);
    size_t bytes = it_tensor_nbytes(g);
    float *host = malloc(bytes);
    CHECK_OK(it_tensor_copy_to_host(g, host, bytes));
    unsetenv("IT_CE_OVERWRITE_ROWS");
    unsetenv("IT_LINEAR_CE");
    unsetenv("IT_LINEAR_CE_ROWS");
    return host;
}

static void check_model(const char *name, it_model *m, const batch *b, bool bf16, bool memory) {
    if (!m || !b->buf) return;
    it_autocast_set(bf16, IT_DTYPE_BF16);
    const it_model_info *info = it_model_get_info(m);
    size_t n = (size_t)it_tensor_numel(it_model_grads(m));
    size_t logits_bytes = (size_t)b->B * b->T * info->padded_vocab * (bf16 ? 2 : 4);
    float loss0 = 0;
    size_t peak0 = 0;
    float *g0 = run(m, b, "0", "0", "", &loss0, &peak0);
    const char *rows[] = {"1", "7", ""};
    for (int k = 0; k < 3; k++) {
        float loss = 0;
        size_t peak = 0;
        float *g = run(m, b, rows[k], "0", "", &loss, &peak);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(&g[i], &g0[i], sizeof(float)) != 0;
        CHECK_MSG(memcmp(&loss, &loss0, sizeof loss) == 0 && diff == 0,
                  "%s%s, %s rows a chunk: loss %.9g vs %.9g, %zu of %zu gradients differ in their bits", name,
                  bf16 ? " bf16" : "", *rows[k] ? rows[k] : "default", loss, loss0, diff, n);
        /* the chunk buffer: rows[k] rows (the default: all B*T rows here) */
        size_t chunk = *rows[k] ? (size_t)atoi(rows[k]) * logits_bytes / ((size_t)b->B * b->T) : logits_bytes;
        CHECK_MSG(!memory || chunk >= logits_bytes || peak + (logits_bytes - chunk) * 3 / 4 <= peak0,
                  "%s%s, %s rows a chunk: peak %zu bytes, without the overwrite %zu (logits %zu bytes)", name,
                  bf16 ? " bf16" : "", *rows[k] ? rows[k] : "default", peak, peak0, logits_bytes);
        printf("%s%s: %s rows a chunk: same bits (loss %.9g), peak %zu bytes vs %zu without the overwrite\n", name,
               bf16 ? " bf16" : "", *rows[k] ? rows[k] : "default", loss, peak, peak0);
        free(g);
    }
    if (!bf16) { /* 2. the fused head, float32 */
        for (int k = 0; k < 3; k++) {
            float loss = 0;
            size_t peak = 0;
            float *g = run(m, b, "0", "1", rows[k], &loss, &peak);
            size_t bad = 0, at = 0;
            for (int p = 0; p < it_model_param_count(m); p++) { /* per tensor: 1e-5 of its largest + 1e-7 */
                const it_model_param_info *pi = it_model_param_at(m, p);
                size_t len = (size_t)pi->numel;
                double big = 0;
                for (size_t i = 0; i < len; i++) big = fmax(big, fabs(g0[pi->offset + i]));
                for (size_t i = 0; i < len; i++)
                    if (fabs((double)g[pi->offset + i] - g0[pi->offset + i]) > 1e-5 * big + 1e-7) bad++;
                at += len;
            }
            CHECK_MSG(at == n && bad == 0, "%s, fused head, %s rows a chunk: %zu of %zu gradients off", name,
                      *rows[k] ? rows[k] : "default", bad, at);
            CHECK_MSG(fabs((double)loss - loss0) <= 2e-7 * fabs((double)loss0),
                      "%s, fused head, %s rows a chunk: loss %.9g vs %.9g", name, *rows[k] ? rows[k] : "default", loss,
                      loss0);
            CHECK_MSG(!memory || k != 1 || peak + logits_bytes <= peak0,
                      "%s, fused head, %s rows a chunk: peak %zu bytes, composed %zu (logits %zu bytes)", name,
                      *rows[k] ? rows[k] : "default", peak, peak0, logits_bytes);
            printf("%s: fused head, %s rows a chunk: loss %.9g (composed %.9g), peak %zu bytes vs %zu composed\n", name,
                   *rows[k] ? rows[k] : "default", loss, loss0, peak, peak0);
            free(g);
        }
    }
    free(g0);
    it_autocast_set(false, IT_DTYPE_BF16);
}

int main(void) {
    const char *models[2] = {"gpt2", "llama3"};
    for (int k = 0; k < 2; k++) {
        char path[512], dbg[512];
        snprintf(path, sizeof path, FIX "%s/tiny_%s.bin", models[k], models[k]);
        snprintf(dbg, sizeof dbg, FIX "%s/debug_state.bin", models[k]);
        it_model *m = NULL;
        CHECK_OK(k ? it_llama3_load(path, it_device_cpu(), &m) : it_gpt2_load(path, it_device_cpu(), &m));
        batch b = read_batch(dbg);
        check_model(models[k], m, &b, false, false);
        check_model(models[k], m, &b, true, false);
        free(b.buf);
        it_model_free(m);
    }
    /* A model whose logits are most of its memory, so that the peak is the loss's backward:
     * one layer 32 wide, vocabulary 8000 (padded to 8064), B = 4, T = 64 (logits 8.3 MB). */
    it_gpt2_config cfg = {64, 8000, 8064, 1, 2, 32};
    it_model *m = NULL;
    CHECK_OK(it_gpt2_new(&cfg, it_device_cpu(), 7, &m));
    batch b = {.B = 4, .T = 64};
    b.buf = malloc(sizeof(int32_t) * 2 * 4 * 64);
    b.x = (int32_t *)b.buf;
    b.y = b.x + 4 * 64;
    uint32_t r = 12345;
    for (int i = 0; i < 2 * 4 * 64; i++) b.x[i] = (int32_t)((r = r * 1664525u + 1013904223u) >> 8) % 8000;
    check_model("gpt2 (1 layer, vocabulary 8000)", m, &b, false, true);
    check_model("gpt2 (1 layer, vocabulary 8000)", m, &b, true, true);
    free(b.buf);
    it_model_free(m);
    return it_test_report("test_loss_memory");
}
