/* Autocast's weights from the optimizer's pass (src/optim/optim.c, src/ops/matmul.c): after
 * an optimizer step the bf16 copy of the parameters is written by adam_step_round (or the
 * step then one cast, on a backend without that slot, and for SGD), and every product reads
 * its weight from it instead of casting the weight itself. A small MLP under bf16 autocast,
 * its parameters views of one flat buffer as a model's are, trained for 5 steps of 2
 * micro-steps: the losses and the final parameters must be bitwise those of the per-use casts
 * (IT_AUTOCAST_OPTIMIZER_COPY=0), on cpu, on sim and on a cpu-kernel backend without the
 * slot; the copy must be taken (adam_step_round calls, fewer casts); parameters outside the
 * optimizer's buffer keep the per-use cast; SGD composes the step with one cast. */
#include <stdlib.h>
#include <string.h>

#include "infinitrain/autograd.h"
#include "infinitrain/ops.h"
#include "infinitrain/optim.h"
#include "it_test_backend.h"

enum { IN = 24, HID = 32, OUT = 8, ROWS = 16, STEPS = 5, MICRO = 2 };
enum { N_W1 = HID * IN, N_B1 = HID, N_W2 = OUT * HID, N_PARAMS = N_W1 + N_B1 + N_W2 };

static float hval(uint64_t *s) { /* deterministic values in [-0.5, 0.5) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

typedef struct result {
    double loss[STEPS];
    float params[N_PARAMS];
    uint64_t rounds, casts, adams;
} result;

/* Trains the MLP on dev; `outside`: W2 is its own tensor, not in the optimizer's buffer (and
 * not trained), so that its product must cast it per use. */
static void train(it_device dev, it_optim_kind kind, bool outside, result *r) {
    memset(r, 0, sizeof *r);
    it_scope_begin();
    int64_t n[1] = {N_PARAMS};
    float h[N_PARAMS];
    uint64_t s = 42;
    for (int i = 0; i < N_PARAMS; i++) h[i] = hval(&s) * 0.5f;
    it_tensor *flat = it_tensor_from_host(dev, IT_DTYPE_FP32, 1, n, h, sizeof h);
    it_tensor *grads = it_tensor_zeros(dev, IT_DTYPE_FP32, 1, n);
    const int64_t sw1[2] = {HID, IN}, sb1[1] = {HID}, sw2[2] = {OUT, HID};
    const int64_t off[4] = {0, N_W1, N_W1 + N_B1, N_PARAMS};
    const int64_t *shapes[3] = {sw1, sb1, sw2};
    int nd[3] = {2, 1, 2};
    it_tensor *p[3];
    for (int k = 0; k < 3; k++) {
        if (outside && k == 2) {
            p[k] = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, sw2, h + off[2], sizeof(float) * N_W2);
        } else {
            p[k] = it_tensor_view(it_tensor_slice(flat, 0, off[k], off[k + 1], 1), nd[k], shapes[k]);
            CHECK_OK(it_tensor_set_grad(
                p[k], it_tensor_view(it_tensor_slice(grads, 0, off[k], off[k + 1], 1), nd[k], shapes[k])));
        }
        CHECK_OK(it_tensor_set_requires_grad(p[k], true));
    }
    it_optim_config cfg = {kind, 0.9f, 0.95f, 1e-8f, 0.1f};
    it_optimizer *opt = NULL;
    CHECK_OK(it_optimizer_new(&cfg, flat, grads, &opt));
    uint64_t r0 = it_test_slot_calls(dev, "adam_step_round"), c0 = it_test_slot_calls(dev, "cast"),
             a0 = it_test_slot_calls(dev, "adam_step");
    for (int step = 0; step < STEPS && opt; step++) {
        CHECK_OK(it_zero_grad(p, 3));
        double total = 0;
        for (int micro = 0; micro < MICRO; micro++) {
            it_scope_begin();
            float xh[ROWS * IN], th[ROWS * OUT];
            uint64_t ds = 7 + (uint64_t)micro; /* the same two batches every step */
            for (int i = 0; i < ROWS * IN; i++) xh[i] = hval(&ds);
            for (int i = 0; i < ROWS * OUT; i++) th[i] = hval(&ds);
            it_tensor *x = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, (int64_t[]){ROWS, IN}, xh, sizeof xh);
            it_tensor *t = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, (int64_t[]){ROWS, OUT}, th, sizeof th);
            it_autocast_set(true, IT_DTYPE_BF16);
            it_tensor *y = it_linear(it_gelu(it_linear(x, p[0], p[1])), p[2], NULL);
            it_autocast_set(false, IT_DTYPE_BF16);
            it_tensor *d = it_sub(y, t);
            it_tensor *loss = it_scale(it_sum_all(it_mul(d, d)), 1.0f / (ROWS * OUT * MICRO));
            CHECK(loss != NULL);
            if (loss) {
                float lv = 0;
                CHECK_OK(it_tensor_copy_to_host(loss, &lv, sizeof lv));
                total += lv;
                CHECK_OK(it_backward(loss));
            }
            it_scope_end();
        }
        r->loss[step] = total;
        CHECK_OK(it_optimizer_step(opt, kind == IT_OPTIM_SGD ? 0.2f : 1e-2f, 1.0f));
    }
    r->rounds = it_test_slot_calls(dev, "adam_step_round") - r0;
    r->casts = it_test_slot_calls(dev, "cast") - c0;
    r->adams = it_test_slot_calls(dev, "adam_step") - a0;
    CHECK_OK(it_tensor_copy_to_host(flat, r->params, sizeof r->params));
    it_optimizer_free(opt);
    it_scope_end();
}

static void same(const char *what, const result *a, const result *b) {
    CHECK_MSG(memcmp(a->loss, b->loss, sizeof a->loss) == 0, "%s: losses differ (%.9g vs %.9g at the last step)", what,
              a->loss[STEPS - 1], b->loss[STEPS - 1]);
    CHECK_MSG(memcmp(a->params, b->params, sizeof a->params) == 0, "%s: parameters differ", what);
}

static void compare(const char *name, it_device dev, bool native) {
    result with, without;
    for (int kind = 0; kind < 2; kind++) {
        it_optim_kind k = kind ? IT_OPTIM_SGD : IT_OPTIM_ADAMW;
        unsetenv("IT_AUTOCAST_OPTIMIZER_COPY");
        train(dev, k, false, &with);
        setenv("IT_AUTOCAST_OPTIMIZER_COPY", "0", 1);
        train(dev, k, false, &without);
        unsetenv("IT_AUTOCAST_OPTIMIZER_COPY");
        char what[96];
        snprintf(what, sizeof what, "%s %s: optimizer's copy vs per-use casts", name, kind ? "sgd" : "adamw");
        same(what, &with, &without);
        CHECK_MSG(with.loss[STEPS - 1] < with.loss[0], "%s: the loss did not fall (%g -> %g)", what, with.loss[0],
                  with.loss[STEPS - 1]);
        /* the copy is made from the first step on (its forward asked for one): steps 2..5 read
         * it, so their 3 weight casts per micro-step are gone; step 1 casts each weight once */
        if (!kind) {
            CHECK_MSG(with.rounds == (native ? STEPS : 0), "%s: %llu adam_step_round calls, expected %d", what,
                      (unsigned long long)with.rounds, native ? STEPS : 0);
            CHECK_MSG(with.adams == (native ? 0 : STEPS), "%s: %llu adam_step calls", what,
                      (unsigned long long)with.adams);
        }
        CHECK_MSG(without.rounds == 0, "%s: adam_step_round ran with the copy off", what);
        CHECK_MSG(with.casts + 3 * (STEPS - 1) - (native && !kind ? 0 : STEPS) == without.casts,
                  "%s: %llu casts with the copy, %llu without", what, (unsigned long long)with.casts,
                  (unsigned long long)without.casts);
    }
    /* a weight outside the optimizer's buffer: cast per use, the others from the copy */
    train(dev, IT_OPTIM_ADAMW, true, &with);
    setenv("IT_AUTOCAST_OPTIMIZER_COPY", "0", 1);
    train(dev, IT_OPTIM_ADAMW, true, &without);
    unsetenv("IT_AUTOCAST_OPTIMIZER_COPY");
    char what[96];
    snprintf(what, sizeof what, "%s: a weight outside the optimizer's buffer", name);
    same(what, &with, &without);
    CHECK_MSG(with.casts + 2 * (STEPS - 1) - (native ? 0 : STEPS) == without.casts,
              "%s: %llu casts with the copy, %llu without", what, (unsigned long long)with.casts,
              (unsigned long long)without.casts);
}

/* A backend with the CPU's kernels and runtime but no adam_step_round: the core composes. */
static it_kernels nofused;
static it_backend nofused_backend;

int main(void) {
    it_device cpu = it_device_cpu(), sim, d = {0};
    compare("cpu", cpu, true);
    if (it_device_parse("sim", &sim) == IT_OK)
        compare("sim", sim, true);
    else
        CHECK_MSG(false, "the sim backend did not load: %s", it_last_error());
    nofused = *it_cpu_kernels();
    nofused.adam_step_round = NULL;
    CHECK_OK(it_test_cpu_variant("nofused", &nofused, &nofused_backend, &d));
    if (d.backend) compare("a backend without adam_step_round", d, false);
    return it_test_report("test_autocast_copy");
}
