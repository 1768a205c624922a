/* Autocast's products kept in bf16 where the next op would only round a widened copy back:
 * the LM head's logits inside it_model_loss, which cross entropy reads widened
 * (src/ops/crossentropy.c, the fused cross_entropy_low_fwd / _bwd slots), GPT-2's qkv into
 * attention, attention's y into an unadapted projection (GPT-2, LLaMA, Mixtral), and the
 * gate and up products of LLaMA's MLP and Mixtral's experts into the fused SwiGLU
 * (swiglu_low_fwd / _bwd), whose common input is rounded once for both. It must change no
 * bit:
 *  - the op: it_cross_entropy on bf16 / fp16 logits against it_cross_entropy on
 *    it_cast(logits, fp32) (the former path): the loss and the logits' gradient bitwise, on
 *    cpu, on sim, and on a backend with the CPU's kernels but without the two slots (the core
 *    composes them: it casts);
 *  - the models: GPT-2's, LLaMA-3's and Mixtral's tiny fixtures under bf16 autocast, three
 *    AdamW steps through it_model_loss, against IT_AUTOCAST_KEEP_LOW=0 (every product widened,
 *    the former dataflow): every loss and the final parameters bitwise, with the fused slots
 *    called once a step each (SwiGLU once a layer; never with the knob off) and exactly the
 *    expected casts gone (main's table); and on a backend without the fused slots, where the
 *    core composes them, the same bits with only the casts the composition does not make
 *    saved. */
#include <stdlib.h>
#include <string.h>

#include "infinitrain/autograd.h"
#include "infinitrain/models.h"
#include "infinitrain/ops.h"
#include "infinitrain/optim.h"
#include "it_test_backend.h"

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
        uint64_t f0 = it_test_slot_calls(dev, "cross_entropy_low_fwd"),
                 b0 = it_test_slot_calls(dev, "cross_entropy_low_bwd");
        op_run(dev, dts[i], false, &la, ga);
        uint64_t f1 = it_test_slot_calls(dev, "cross_entropy_low_fwd"),
                 b1 = it_test_slot_calls(dev, "cross_entropy_low_bwd");
        op_run(dev, dts[i], true, &lb, gb);
        CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0, "%s %s: loss %.9g, through an fp32 copy %.9g", name,
                  it_dtype_name(dts[i]), la, lb);
        CHECK_MSG(memcmp(ga, gb, sizeof ga) == 0, "%s %s: the logits' gradients differ", name, it_dtype_name(dts[i]));
        CHECK_MSG(f1 - f0 == (native ? 1u : 0u) && b1 - b0 == (native ? 1u : 0u),
                  "%s %s: %llu fused forward and %llu fused backward calls", name, it_dtype_name(dts[i]),
                  (unsigned long long)(f1 - f0), (unsigned long long)(b1 - b0));
        CHECK_MSG(it_test_slot_calls(dev, "cross_entropy_low_fwd") == f1, "%s: the fp32 path called the fused slot",
                  name);
    }
}

enum { STEPS = 3 };

typedef struct model_result {
    float loss[STEPS];
    float *params;
    uint64_t low_fwd, low_bwd, glu_fwd, glu_bwd, casts;
} model_result;

/* STEPS AdamW steps of m (loaded afresh by `load`) under bf16 autocast through
 * it_model_loss on fixed batches, the products kept low or (`widen`) all widened. */
static void model_run(it_status (*load)(const char *, it_device, it_model **), const char *path, it_device dev,
                      bool widen, model_result *r) {
    memset(r, 0, sizeof *r);
    it_model *m = NULL;
    CHECK_OK(load(path, dev, &m));
    if (!m) return;
    if (widen) setenv("IT_AUTOCAST_KEEP_LOW", "0", 1);
    const it_model_info *info = it_model_get_info(m);
    it_optimizer *opt = NULL;
    it_optim_config oc = {IT_OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
    CHECK_OK(it_optimizer_new(&oc, it_model_params(m), it_model_grads(m), &opt));
    enum { B = 2, T = 8 };
    uint64_t s = 11;
    uint64_t f0 = it_test_slot_calls(dev, "cross_entropy_low_fwd"),
             b0 = it_test_slot_calls(dev, "cross_entropy_low_bwd");
    uint64_t c0 = it_test_slot_calls(dev, "cast");
    uint64_t g0 = it_test_slot_calls(dev, "swiglu_low_fwd"), h0 = it_test_slot_calls(dev, "swiglu_low_bwd");
    for (int step = 0; step < STEPS && opt; step++) {
        int32_t x[B * T], y[B * T];
        for (int i = 0; i < B * T; i++) x[i] = (int32_t)(next(&s) % (uint64_t)info->vocab_size);
        for (int i = 0; i < B * T; i++) y[i] = (int32_t)(next(&s) % (uint64_t)info->vocab_size);
        it_scope_begin();
        int64_t shape[2] = {B, T};
        it_tensor *tx = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof x);
        it_tensor *ty = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof y);
        CHECK_OK(it_model_zero_grad(m));
        it_autocast_set(true, IT_DTYPE_BF16);
        it_tensor *loss = it_model_loss(m, tx, ty);
        it_autocast_set(false, IT_DTYPE_BF16);
        CHECK_MSG(loss != NULL, "the loss: %s", it_last_error());
        if (loss) {
            CHECK_OK(it_tensor_copy_to_host(loss, &r->loss[step], sizeof r->loss[step]));
            CHECK_OK(it_backward(loss));
        }
        it_scope_end();
        CHECK_OK(it_model_grads_final(m));
        CHECK_OK(it_optimizer_step(opt, 1e-3f, 1.0f));
    }
    r->low_fwd = it_test_slot_calls(dev, "cross_entropy_low_fwd") - f0;
    r->low_bwd = it_test_slot_calls(dev, "cross_entropy_low_bwd") - b0;
    r->casts = it_test_slot_calls(dev, "cast") - c0;
    r->glu_fwd = it_test_slot_calls(dev, "swiglu_low_fwd") - g0;
    r->glu_bwd = it_test_slot_calls(dev, "swiglu_low_bwd") - h0;
    r->params = malloc(sizeof(float) * (size_t)info->num_params);
    CHECK_OK(it_tensor_copy_to_host(it_model_params(m), r->params, sizeof(float) * (size_t)info->num_params));
    unsetenv("IT_AUTOCAST_KEEP_LOW");
    it_optimizer_free(opt);
    it_model_free(m);
}

/* `per_layer` casts a layer saves a step, with n_layer layers, and `per_step` more (the
 * logits'); `glu`: the model has a SwiGLU per layer. `fused`: dev has the fused slots. */
static void model_compare(const char *name, it_status (*load)(const char *, it_device, it_model **), const char *path,
                          it_device dev, bool fused, int n_layer, int per_layer, int per_step, bool glu) {
    model_result a, b;
    model_run(load, path, dev, false, &a);
    model_run(load, path, dev, true, &b);
    if (!a.params || !b.params) {
        free(a.params), free(b.params);
        return;
    }
    it_model *m = NULL;
    CHECK_OK(load(path, it_device_cpu(), &m));
    size_t n = m ? (size_t)it_model_get_info(m)->num_params : 0, diff = 0;
    it_model_free(m);
    for (size_t i = 0; i < n; i++) diff += memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0;
    CHECK_MSG(memcmp(a.loss, b.loss, sizeof a.loss) == 0,
              "%s: step losses %.9g %.9g %.9g kept low, %.9g %.9g %.9g widened", name, a.loss[0], a.loss[1], a.loss[2],
              b.loss[0], b.loss[1], b.loss[2]);
    CHECK_MSG(diff == 0, "%s: %zu of %zu parameters differ after %d steps", name, diff, n, STEPS);
    uint64_t ce = fused ? STEPS : 0, gl = fused && glu ? (uint64_t)(STEPS * n_layer) : 0;
    CHECK_MSG(a.low_fwd == ce && a.low_bwd == ce, "%s: %llu / %llu fused cross entropy calls in %d steps", name,
              (unsigned long long)a.low_fwd, (unsigned long long)a.low_bwd, STEPS);
    CHECK_MSG(a.glu_fwd == gl && a.glu_bwd == gl, "%s: %llu / %llu fused SwiGLU calls in %d steps, expected %llu", name,
              (unsigned long long)a.glu_fwd, (unsigned long long)a.glu_bwd, STEPS, (unsigned long long)gl);
    CHECK_MSG(b.low_fwd == 0 && b.low_bwd == 0 && b.glu_fwd == 0 && b.glu_bwd == 0,
              "%s: the widened run took the fused slots", name);
    uint64_t saved = (uint64_t)STEPS * (uint64_t)(n_layer * per_layer + per_step);
    CHECK_MSG(b.casts - a.casts == saved, "%s: %llu casts kept low, %llu widened: %llu saved, expected %llu", name,
              (unsigned long long)a.casts, (unsigned long long)b.casts, (unsigned long long)(b.casts - a.casts),
              (unsigned long long)saved);
    free(a.params), free(b.params);
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
    it_device d = {0};
    nofused = *it_cpu_kernels();
    nofused.cross_entropy_low_fwd = NULL;
    nofused.cross_entropy_low_bwd = NULL;
    nofused.swiglu_low_fwd = NULL;
    nofused.swiglu_low_bwd = NULL;
    CHECK_OK(it_test_cpu_variant("nofusedce", &nofused, &nofused_backend, &d));
    if (d.backend) op_compare("a backend without the fused slots", d, false);
    const char *fx = IT_SOURCE_DIR "/tests/fixtures/";
    char path[3][512];
    snprintf(path[0], sizeof path[0], "%sgpt2/tiny_gpt2.bin", fx);
    snprintf(path[1], sizeof path[1], "%sllama3/tiny_llama3.bin", fx);
    snprintf(path[2], sizeof path[2], "%smixtral/tiny_mixtral.bin", fx);
    it_model *m = NULL;
    int layers[3] = {0, 0, 0};
    it_status (*loads[3])(const char *, it_device, it_model **) = {it_gpt2_load, it_llama3_load, it_mixtral_load};
    for (int i = 0; i < 3; i++) {
        m = NULL;
        CHECK_OK(loads[i](path[i], cpu, &m));
        layers[i] = m ? it_model_get_info(m)->n_layer : 0;
        it_model_free(m);
    }
    /* Casts saved per layer: GPT-2 8 (qkv and y, widened and rounded again, forward and
     * backward); LLaMA and Mixtral 4 for y, 1 for the MLP's input rounded once for its two
     * products (its second rounding), and 6 for the SwiGLU where fused (the gate's and up's
     * widening and the product's rounding, and their gradients' back). 2 a step for the logits
     * where fused. */
    model_compare("GPT-2", it_gpt2_load, path[0], cpu, true, layers[0], 8, 2, false);
    model_compare("LLaMA-3", it_llama3_load, path[1], cpu, true, layers[1], 11, 2, true);
    model_compare("Mixtral", it_mixtral_load, path[2], cpu, true, layers[2], 11, 2, true);
    if (d.backend) { /* composed: the same bits, only the casts the composition does not make saved */
        model_compare("GPT-2 without the fused slots", it_gpt2_load, path[0], d, false, layers[0], 8, 0, false);
        model_compare("LLaMA-3 without the fused slots", it_llama3_load, path[1], d, false, layers[1], 5, 0, true);
        model_compare("Mixtral without the fused slots", it_mixtral_load, path[2], d, false, layers[2], 5, 0, true);
    }
    return it_test_report("test_autocast_low");
}
