/* Cross entropy over half-precision logits (src/ops/crossentropy.c and the fused
 * cross_entropy_low_fwd / _bwd slots), the path autocast's LM head takes inside
 * it_model_loss: the logits stay bf16 and the loss reads them widened, instead of an fp32
 * copy of them being made, read, and its gradient rounded back. It must change no bit:
 *  - the op: it_cross_entropy on bf16 / fp16 logits against it_cross_entropy on
 *    it_cast(logits, fp32) (the former path): the loss and the logits' gradient bitwise, on
 *    cpu, on sim, and on a backend with the CPU's kernels but without the two slots (the core
 *    composes them: it casts);
 *  - the models: GPT-2's and LLaMA-3's tiny fixtures under bf16 autocast, it_model_loss (half
 *    logits) against it_model_forward then it_cross_entropy (fp32 logits): the loss and every
 *    parameter's gradient bitwise, with the fused slots called once each (and not at all by
 *    the former path). */
#include <stdlib.h>
#include <string.h>

#include "infinitrain/autograd.h"
#include "infinitrain/models.h"
#include "infinitrain/ops.h"
#include "it_test.h"

static uint64_t slot_calls(it_device dev, const char *name) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(dev.backend, st)) return 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        if (st[i].slot && strcmp(st[i].slot, name) == 0) return st[i].calls;
    return 0;
}

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

enum { N = 12, VP = 72, VALID = 67 };

/* loss and dlogits (the logits' dtype, N x VP) of it_cross_entropy on `dt` logits, through
 * the half path (`widen` false) or on an fp32 cast of them (`widen` true). */
static void op_run(it_device dev, it_dtype dt, bool widen, float *loss, uint16_t *grad) {
    it_scope_begin();
    float h[N * VP];
    int32_t t[N];
    uint64_t s = 7;
    for (int i = 0; i < N * VP; i++) h[i] = (float)((int)(next(&s) % 2001) - 1000) / 125.0f;
    for (int i = 0; i < N; i++) t[i] = (int32_t)(i == 0 ? VALID - 1 : next(&s) % VALID);
    int64_t shape[3] = {3, N / 3, VP}, ts[2] = {3, N / 3};
    it_tensor *wide = it_tensor_from_host(dev, IT_DTYPE_FP32, 3, shape, h, sizeof h);
    it_tensor *lg = it_tensor_to_dtype(wide, dt);
    it_tensor *tg = it_tensor_from_host(dev, IT_DTYPE_I32, 2, ts, t, sizeof t);
    CHECK_OK(it_tensor_set_requires_grad(lg, true));
    it_tensor *l = it_cross_entropy(widen ? it_cast(lg, IT_DTYPE_FP32) : lg, tg, VALID);
    CHECK_MSG(l != NULL, "cross_entropy on %s logits: %s", it_dtype_name(dt), it_last_error());
    if (l) {
        CHECK(it_tensor_dtype(l) == IT_DTYPE_FP32);
        CHECK_OK(it_tensor_copy_to_host(l, loss, sizeof *loss));
        CHECK_OK(it_backward(l));
        it_tensor *g = it_tensor_grad(lg);
        CHECK(g && it_tensor_dtype(g) == dt);
        if (g) CHECK_OK(it_tensor_copy_to_host(g, grad, sizeof(uint16_t) * N * VP));
    }
    it_scope_end();
}

static void op_compare(const char *name, it_device dev, bool native) {
    const it_dtype dts[2] = {IT_DTYPE_BF16, IT_DTYPE_FP16};
    for (int i = 0; i < 2; i++) {
        float la = 0, lb = 1;
        static uint16_t ga[N * VP], gb[N * VP];
        memset(ga, 0, sizeof ga), memset(gb, 0xff, sizeof gb);
        uint64_t f0 = slot_calls(dev, "cross_entropy_low_fwd"), b0 = slot_calls(dev, "cross_entropy_low_bwd");
        op_run(dev, dts[i], false, &la, ga);
        uint64_t f1 = slot_calls(dev, "cross_entropy_low_fwd"), b1 = slot_calls(dev, "cross_entropy_low_bwd");
        op_run(dev, dts[i], true, &lb, gb);
        CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0, "%s %s: loss %.9g, through an fp32 copy %.9g", name,
                  it_dtype_name(dts[i]), la, lb);
        CHECK_MSG(memcmp(ga, gb, sizeof ga) == 0, "%s %s: the logits' gradients differ", name, it_dtype_name(dts[i]));
        CHECK_MSG(f1 - f0 == (native ? 1u : 0u) && b1 - b0 == (native ? 1u : 0u),
                  "%s %s: %llu fused forward and %llu fused backward calls", name, it_dtype_name(dts[i]),
                  (unsigned long long)(f1 - f0), (unsigned long long)(b1 - b0));
        CHECK_MSG(slot_calls(dev, "cross_entropy_low_fwd") == f1, "%s: the fp32 path called the fused slot", name);
    }
}

typedef struct model_result {
    float loss;
    float *grads;
    uint64_t low_fwd, low_bwd;
} model_result;

/* One forward and backward of m under bf16 autocast on a fixed batch: through
 * it_model_loss (`via_loss`) or it_model_forward then it_cross_entropy. */
static void model_run(it_model *m, bool via_loss, model_result *r) {
    const it_model_info *info = it_model_get_info(m);
    enum { B = 2, T = 8 };
    int32_t x[B * T], y[B * T];
    uint64_t s = 11;
    for (int i = 0; i < B * T; i++) x[i] = (int32_t)(next(&s) % (uint64_t)info->vocab_size);
    for (int i = 0; i < B * T; i++) y[i] = (int32_t)(next(&s) % (uint64_t)info->vocab_size);
    it_device dev = it_model_device(m);
    it_scope_begin();
    int64_t shape[2] = {B, T};
    it_tensor *tx = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof x);
    it_tensor *ty = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof y);
    CHECK_OK(it_model_zero_grad(m));
    uint64_t f0 = slot_calls(dev, "cross_entropy_low_fwd"), b0 = slot_calls(dev, "cross_entropy_low_bwd");
    it_autocast_set(true, IT_DTYPE_BF16);
    it_tensor *loss =
        via_loss ? it_model_loss(m, tx, ty) : it_cross_entropy(it_model_forward(m, tx), ty, info->vocab_size);
    it_autocast_set(false, IT_DTYPE_BF16);
    CHECK_MSG(loss != NULL, "the loss: %s", it_last_error());
    if (loss) {
        CHECK_OK(it_tensor_copy_to_host(loss, &r->loss, sizeof r->loss));
        CHECK_OK(it_backward(loss));
    }
    it_scope_end();
    r->low_fwd = slot_calls(dev, "cross_entropy_low_fwd") - f0;
    r->low_bwd = slot_calls(dev, "cross_entropy_low_bwd") - b0;
    CHECK_OK(it_model_grads_final(m));
    r->grads = malloc(sizeof(float) * (size_t)info->num_params);
    CHECK_OK(it_tensor_copy_to_host(it_model_grads(m), r->grads, sizeof(float) * (size_t)info->num_params));
}

static void model_compare(const char *name, it_model *m) {
    if (!m) return;
    model_result a, b;
    model_run(m, true, &a);
    model_run(m, false, &b);
    size_t n = (size_t)it_model_get_info(m)->num_params, diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0;
    CHECK_MSG(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0, "%s: loss %.9g with half logits, %.9g with fp32 ones", name,
              a.loss, b.loss);
    CHECK_MSG(diff == 0, "%s: %zu of %zu gradients differ between half and fp32 logits", name, diff, n);
    CHECK_MSG(a.low_fwd == 1 && a.low_bwd == 1, "%s: it_model_loss made %llu / %llu fused cross entropy calls", name,
              (unsigned long long)a.low_fwd, (unsigned long long)a.low_bwd);
    CHECK_MSG(b.low_fwd == 0 && b.low_bwd == 0, "%s: fp32 logits took the fused slots", name);
    free(a.grads), free(b.grads);
    it_model_free(m);
}

/* A backend with the CPU's kernels and runtime but without the two fused slots. */
static it_kernels nofused;
static it_backend nofused_backend;

int main(void) {
    it_device cpu = it_device_cpu(), sim;
    op_compare("cpu", cpu, true);
    if (it_device_parse("sim", &sim) == IT_OK)
        op_compare("sim", sim, true);
    else
        CHECK_MSG(false, "the sim backend did not load: %s", it_last_error());
    const it_backend *c = NULL;
    CHECK_OK(it_backend_find("cpu", &c));
    if (c) {
        nofused = *it_cpu_kernels();
        nofused.cross_entropy_low_fwd = NULL;
        nofused.cross_entropy_low_bwd = NULL;
        nofused_backend = *c;
        nofused_backend.name = "nofusedce";
        nofused_backend.kernels = &nofused;
        nofused_backend.kernels_size = sizeof nofused;
        it_device d;
        CHECK_OK(it_backend_register(&nofused_backend));
        CHECK_OK(it_device_parse("nofusedce", &d));
        op_compare("a backend without the fused slots", d, false);
    }
    it_model *m = NULL;
    CHECK_OK(it_gpt2_load(IT_SOURCE_DIR "/tests/fixtures/gpt2/tiny_gpt2.bin", cpu, &m));
    model_compare("GPT-2", m);
    m = NULL;
    CHECK_OK(it_llama3_load(IT_SOURCE_DIR "/tests/fixtures/llama3/tiny_llama3.bin", cpu, &m));
    model_compare("LLaMA-3", m);
    return it_test_report("test_ce_low");
}
