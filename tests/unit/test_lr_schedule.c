/* Learning-rate schedules (src/optim/lr_schedule.c) against InfiniTrain's CreateLRScheduler:
 * the PyTorch reference fixture (tests/fixtures/lr/schedules.txt, from make_lr_fixture.py)
 * within 1e-5 relative, because torch computes the same schedule in double and InfiniTrain in
 * float (the float rounding of a chained LinearLR over 12 steps stays near 1e-6); InfiniTrain's
 * own test vectors; bitwise values recomputed here through volatile floats in InfiniTrain's
 * order of operations (so an FMA contraction in the library would show); the validation
 * errors; the state round trip continuing bitwise; and `none` as the constant flag LR. */
#include <stdint.h>

#include "infinitrain/optim.h"
#include "it_test.h"

/* One IEEE float rounding, which no compiler can fuse into a neighbouring operation. */
static float r(float x) {
    volatile float v = x;
    return v;
}

static const float pi_f = 3.14159265358979323846f;

static it_lr_scheduler_config cfg_of(it_lr_decay style, float lr, float min_lr, int64_t w, float init, int64_t decay,
                                     int64_t total) {
    return (it_lr_scheduler_config){style, lr, min_lr, init, w, decay, total};
}

/* The LRs of training steps 1..n (read before each step()). */
static void run(const it_lr_scheduler_config *c, int n, float *out) {
    it_lr_scheduler s;
    CHECK_OK(it_lr_scheduler_init(&s, c));
    for (int k = 0; k < n; k++) {
        out[k] = it_lr_scheduler_lr(&s);
        it_lr_scheduler_step(&s);
    }
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_names(void) {
    const char *names[] = {"none", "constant", "linear", "cosine", "inverse-square-root"};
    const it_lr_decay want[] = {IT_LR_NONE, IT_LR_CONSTANT, IT_LR_LINEAR, IT_LR_COSINE, IT_LR_INVERSE_SQRT};
    for (int i = 0; i < 5; i++) {
        it_lr_decay d = IT_LR_NONE;
        CHECK_OK(it_lr_decay_from_name(names[i], &d));
        CHECK(d == want[i]);
        CHECK(strcmp(it_lr_decay_name(d), names[i]) == 0);
    }
    CHECK(IT_LR_NONE == 0 && IT_LR_LINEAR == 1 && IT_LR_COSINE == 2);
    it_lr_decay d;
    CHECK_ERR(it_lr_decay_from_name("cos", &d), IT_ERR_INVALID_ARG, "--lr_decay_style: unknown style 'cos'");
}

/* Every line of the fixture: same config, LR per step within 1e-5 relative of torch's. */
static void test_pytorch_fixture(void) {
    const char *path = IT_SOURCE_DIR "/tests/fixtures/lr/schedules.txt";
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    char line[4096];
    int cases = 0, values = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char style[32];
        long long w, decay, total;
        float init, lr, min_lr;
        int used = 0;
        int got =
            sscanf(line, "%31s %lld %f %lld %lld %f %f : %n", style, &w, &init, &decay, &total, &lr, &min_lr, &used);
        CHECK_MSG(got == 7 && used > 0 && total > 0 && total <= 64, "bad fixture line: %s", line);
        if (got != 7 || used <= 0 || total <= 0 || total > 64) continue;
        it_lr_decay d;
        CHECK_OK(it_lr_decay_from_name(style, &d));
        it_lr_scheduler_config c = cfg_of(d, lr, min_lr, w, init, decay, total);
        float mine[64];
        run(&c, (int)total, mine);
        const char *p = line + used;
        for (int k = 0; k < total; k++) {
            char *end;
            double ref = strtod(p, &end);
            CHECK_MSG(end != p, "line %d has fewer than %lld values", cases + 1, total);
            if (end == p) break;
            p = end;
            CHECK_MSG(fabs(mine[k] - ref) <= 1e-5 * fabs(ref),
                      "%s W=%lld init=%g decay=%lld min=%g step %d: %.9g vs torch %.9g", style, w, (double)init, decay,
                      (double)min_lr, k + 1, (double)mine[k], ref);
            values++;
        }
        cases++;
    }
    fclose(f);
    CHECK_MSG(cases == 60 && values == 60 * 12, "fixture: %d cases, %d values", cases, values);
}

/* tests/optimizer/test_lr_scheduler.cc (TrainingSchedulerFactoryBuildsCommonDecayStyles): GetLR
 * after construction, then after each Step(). */
static void test_infinitrain_vectors(void) {
    struct {
        it_lr_scheduler_config c;
        int n;
        float want[8];
        double tol;
    } v[] = {
        {cfg_of(IT_LR_CONSTANT, 0.1f, 0, 0, 0, 10, 10), 4, {0.1f, 0.1f, 0.1f, 0.1f}, 1e-6},
        {cfg_of(IT_LR_LINEAR, 1, 0.1f, 2, 0, 6, 6), 7, {0, 0.5f, 1.0f, 0.775f, 0.55f, 0.325f, 0.1f}, 1e-6},
        {cfg_of(IT_LR_COSINE, 1, 0, 0, 0, 4, 4), 5, {1, 0.853553f, 0.5f, 0.146447f, 0}, 1e-5},
        {cfg_of(IT_LR_INVERSE_SQRT, 1, 0.1f, 2, 0, 10, 10), 6, {0, 0.5f, 1, 0.8164966f, 0.7071068f, 0.6324555f}, 1e-5},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        float got[8];
        run(&v[i].c, v[i].n, got);
        for (int k = 0; k < v[i].n; k++) CHECK_NEAR(got[k], v[i].want[k], v[i].tol);
    }
}

/* InfiniTrain's expressions, transcribed with every operation rounded on its own. */
static float warmup_value(float lr, float init, int64_t w, int64_t s) {
    float ratio = r((float)s / (float)w);
    float lambda = r(r(init + r(r(lr - init) * ratio)) / lr);
    return r(lr * lambda);
}
static float cosine_value(float lr, float min_lr, int64_t span, int64_t s) {
    if (s > span) return r(lr * r(min_lr / lr));
    float ratio = r((float)s / (float)span);
    float coeff = r(0.5f * r(cosf(r(pi_f * ratio)) + 1.0f));
    return r(lr * r(r(min_lr + r(coeff * r(lr - min_lr))) / lr));
}
static float isr_value(float lr, float min_lr, int64_t w, int64_t decay, int64_t s) {
    int64_t g = s + w;
    if (g > decay) return r(lr * r(min_lr / lr));
    float v = r(r(lr * sqrtf((float)(w > 1 ? w : 1))) / sqrtf((float)(g > 1 ? g : 1)));
    return r(lr * r((min_lr < v ? v : min_lr) / lr));
}

/* Bitwise: every schedule, with and without warmup, against the transcription. The LinearLR
 * chain multiplies the previous LR by 1 + num / (T + (k-1) num); at k == T by end / prev. */
static void test_bitwise(void) {
    const float lr = 6e-4f, min_lr = 6e-5f, init = 1e-4f;
    const int64_t total = 12, decay = 8;
    int fused_differs = 0;
    for (int64_t w = 0; w <= 3; w += 3) {
        const int64_t span = decay - w;
        for (int st = 0; st < 4; st++) {
            const it_lr_decay style =
                (it_lr_decay[]){IT_LR_CONSTANT, IT_LR_LINEAR, IT_LR_COSINE, IT_LR_INVERSE_SQRT}[st];
            it_lr_scheduler_config c = cfg_of(style, lr, min_lr, w, init, decay, total);
            float got[12], want[12];
            run(&c, (int)total, got);
            float end = r(min_lr / lr), prev_lr = lr;
            for (int64_t k = 0; k < total; k++) {
                float x;
                if (k < w)
                    x = warmup_value(lr, init, w, k);
                else if (style == IT_LR_CONSTANT)
                    x = r(lr * 1.0f);
                else if (style == IT_LR_COSINE)
                    x = cosine_value(lr, min_lr, span, k - w);
                else if (style == IT_LR_INVERSE_SQRT)
                    x = isr_value(lr, min_lr, w, decay, k - w);
                else {
                    int64_t j = k - w; /* LinearLR's last_step */
                    float num = r(end - 1.0f);
                    if (j == 0)
                        x = w > 0 ? r(lr * r(1.0f + r(r(num * 0.0f) / (float)span))) : r(lr * 1.0f);
                    else if (j > span)
                        x = prev_lr;
                    else if (j == span) {
                        float prev = r(1.0f + r(r(num * (float)(span - 1)) / (float)span));
                        x = r(prev_lr * r(end / prev));
                    } else {
                        float den = r(r(1.0f * (float)span) + r((float)(j - 1) * num));
                        x = r(prev_lr * r(1.0f + r(num / den)));
                        float fused = r(prev_lr * r(1.0f + r(num / fmaf((float)(j - 1), num, (float)span))));
                        fused_differs += !same_bits(fused, x);
                    }
                }
                if (k < w) {
                    float fused = r(lr * r(fmaf(r(lr - init), r((float)k / (float)w), init) / lr));
                    fused_differs += !same_bits(fused, x);
                }
                want[k] = x;
                prev_lr = x;
                CHECK_MSG(same_bits(got[k], want[k]), "%s W=%lld step %lld: %a, InfiniTrain's float ops give %a",
                          it_lr_decay_name(style), (long long)w, (long long)k + 1, (double)got[k], (double)want[k]);
            }
        }
    }
    /* the check above can tell an FMA-contracted build from an uncontracted one */
    CHECK_MSG(fused_differs > 0, "no value differs under FMA contraction");
}

static void test_which_step(void) {
    /* step 1 uses the warmup's value at 0, step W+1 the main schedule's first value (lr) */
    float got[6];
    it_lr_scheduler_config c = cfg_of(IT_LR_LINEAR, 1.0f, 0.0f, 3, 0.25f, 5, 6);
    run(&c, 6, got);
    CHECK(got[0] == 0.25f && got[3] == 1.0f);
    CHECK_NEAR(got[1], 0.5f, 1e-7);
    CHECK_NEAR(got[4], 0.5f, 1e-7);
    CHECK(got[5] == 0.0f); /* decay over 5 - 3 = 2 steps reaches min_lr 0 at step 6 */
    /* lr_decay_iters 0 means total_iters */
    float a[12], b[12];
    it_lr_scheduler_config c0 = cfg_of(IT_LR_COSINE, 6e-4f, 6e-5f, 3, 1e-4f, 0, 12);
    it_lr_scheduler_config c12 = cfg_of(IT_LR_COSINE, 6e-4f, 6e-5f, 3, 1e-4f, 12, 12);
    run(&c0, 12, a);
    run(&c12, 12, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

static void test_none(void) {
    /* no scheduler: the flag LR at every step; warmup, decay and bounds are ignored */
    it_lr_scheduler_config c = cfg_of(IT_LR_NONE, 3e-4f, 1.0f, 5, 2.0f, 0, 0);
    it_lr_scheduler s;
    CHECK_OK(it_lr_scheduler_init(&s, &c));
    for (int k = 0; k < 20; k++) {
        CHECK(it_lr_scheduler_lr(&s) == 3e-4f);
        it_lr_scheduler_step(&s);
    }
    it_lr_state_entry e[IT_LR_STATE_MAX];
    CHECK(it_lr_scheduler_state(&s, e) == 0);
    CHECK_OK(it_lr_scheduler_load_state(&s, e, 0));
    c.lr = 0; /* a zero LR is allowed without a scheduler */
    CHECK_OK(it_lr_scheduler_init(&s, &c));
    CHECK(it_lr_scheduler_lr(&s) == 0.0f);
}

static void test_validation(void) {
    it_lr_scheduler s;
    it_lr_scheduler_config c;
#define BAD(expr_cfg, msg)                                                                                             \
    do {                                                                                                               \
        c = (expr_cfg);                                                                                                \
        CHECK_ERR(it_lr_scheduler_init(&s, &c), IT_ERR_INVALID_ARG, msg);                                              \
    } while (0)
    BAD(cfg_of(IT_LR_COSINE, 0, 0, 0, 0, 10, 10), "--learning_rate: 0 must be > 0 with --lr_decay_style cosine");
    BAD(cfg_of(IT_LR_LINEAR, 0.1f, 0, 0, -0.5f, 10, 10), "--lr_warmup_init: -0.5 must be >= 0");
    BAD(cfg_of(IT_LR_LINEAR, 0.1f, -1, 0, 0, 10, 10), "--min_lr: -1 must be >= 0");
    BAD(cfg_of(IT_LR_LINEAR, 0.1f, 0.5f, 0, 0, 10, 10), "--min_lr: 0.5 must be <= --learning_rate 0.1");
    BAD(cfg_of(IT_LR_CONSTANT, 0.5f, 0, 2, 0.75f, 10, 10), "--lr_warmup_init: 0.75 must be <= --learning_rate 0.5");
    BAD(cfg_of(IT_LR_CONSTANT, 0.5f, 0, -1, 0, 10, 10), "--lr_warmup_iters: -1 must be >= 0");
    BAD(cfg_of(IT_LR_CONSTANT, 0.5f, 0, 0, 0, -3, 10), "--lr_decay_iters: -3 must be >= 0 (0 = --num_iteration)");
    BAD(cfg_of(IT_LR_CONSTANT, 0.5f, 0, 0, 0, 0, 0), "--lr_decay_iters: 0 means --num_iteration, which is 0");
    BAD(cfg_of(IT_LR_COSINE, 0.5f, 0, 10, 0, 10, 50), "--lr_warmup_iters: 10 must be < --lr_decay_iters 10");
    BAD(cfg_of(IT_LR_COSINE, 0.5f, 0, 10, 0, 0, 10),
        "--lr_warmup_iters: 10 must be < --lr_decay_iters 10 (--num_iteration, as --lr_decay_iters is 0)");
    BAD(cfg_of((it_lr_decay)9, 0.5f, 0, 0, 0, 10, 10), "--lr_decay_style: unknown style 9");
    BAD(cfg_of(IT_LR_INVERSE_SQRT, NAN, 0, 0, 0, 10, 10), "--learning_rate: nan must be > 0");
#undef BAD
    /* the bounds are inclusive: min_lr = warmup_init = lr, W = decay - 1 */
    c = cfg_of(IT_LR_LINEAR, 0.5f, 0.5f, 9, 0.5f, 10, 10);
    CHECK_OK(it_lr_scheduler_init(&s, &c));
}

/* Stop after k steps, save, restore into a fresh scheduler, continue: bitwise the same LRs. */
static void test_state_round_trip(void) {
    const it_lr_decay styles[] = {IT_LR_CONSTANT, IT_LR_LINEAR, IT_LR_COSINE, IT_LR_INVERSE_SQRT};
    for (int st = 0; st < 4; st++)
        for (int64_t w = 0; w <= 3; w += 3) {
            it_lr_scheduler_config c = cfg_of(styles[st], 6e-4f, 6e-5f, w, 1e-4f, 8, 12);
            float ref[12];
            run(&c, 12, ref);
            for (int stop = 0; stop <= 12; stop++) {
                it_lr_scheduler a, b;
                CHECK_OK(it_lr_scheduler_init(&a, &c));
                for (int k = 0; k < stop; k++) it_lr_scheduler_step(&a);
                it_lr_state_entry e[IT_LR_STATE_MAX];
                int n = it_lr_scheduler_state(&a, e);
                CHECK(n == (w ? 9 : 3));
                CHECK_OK(it_lr_scheduler_init(&b, &c));
                CHECK_OK(it_lr_scheduler_load_state(&b, e, n));
                CHECK(b.top.last_step == stop);
                for (int k = stop; k < 12; k++) {
                    CHECK_MSG(same_bits(it_lr_scheduler_lr(&b), ref[k]), "%s W=%lld stop %d step %d",
                              it_lr_decay_name(styles[st]), (long long)w, stop, k + 1);
                    it_lr_scheduler_step(&b);
                }
            }
        }
    /* InfiniTrain's keys and values after 4 steps of a warmup-3 linear schedule */
    it_lr_scheduler_config c = cfg_of(IT_LR_LINEAR, 0.1f, 0.01f, 2, 0, 8, 10);
    it_lr_scheduler s;
    CHECK_OK(it_lr_scheduler_init(&s, &c));
    for (int k = 0; k < 4; k++) it_lr_scheduler_step(&s);
    it_lr_state_entry e[IT_LR_STATE_MAX];
    CHECK(it_lr_scheduler_state(&s, e) == 9);
    const char *keys[] = {"last_step",
                          "recover_lr",
                          "base_lr",
                          "scheduler_0.last_step",
                          "scheduler_0.recover_lr",
                          "scheduler_0.base_lr",
                          "scheduler_1.last_step",
                          "scheduler_1.recover_lr",
                          "scheduler_1.base_lr"};
    const int64_t steps[] = {4, 1, 2}; /* the warmup stopped at W-1, the main one counts from 0 at W */
    for (int i = 0; i < 9; i++) {
        CHECK_MSG(strcmp(e[i].key, keys[i]) == 0, "key %d is %s", i, e[i].key);
        CHECK(e[i].is_int == (i % 3 == 0));
        if (i % 3 == 0) CHECK(e[i].i == steps[i / 3]);
        if (i % 3 == 1) CHECK(e[i].f == it_lr_scheduler_lr(&s));
        if (i % 3 == 2) CHECK(e[i].f == 0.1f);
    }
    /* a state of another structure or type is refused, naming the key */
    it_lr_scheduler plain;
    it_lr_scheduler_config c0 = c;
    c0.warmup_iters = 0;
    CHECK_OK(it_lr_scheduler_init(&plain, &c0));
    CHECK_ERR(it_lr_scheduler_load_state(&plain, e, 9), IT_ERR_INVALID_ARG,
              "unexpected key 'scheduler_0.last_step' for --lr_decay_style linear with --lr_warmup_iters 0");
    CHECK_ERR(it_lr_scheduler_load_state(&s, e, 3), IT_ERR_INVALID_ARG, "key 'scheduler_0.last_step' missing");
    it_lr_state_entry bad[IT_LR_STATE_MAX];
    memcpy(bad, e, sizeof bad);
    bad[3].is_int = false;
    CHECK_ERR(it_lr_scheduler_load_state(&s, bad, 9), IT_ERR_INVALID_ARG,
              "key 'scheduler_0.last_step' is float, expected int64");
    memcpy(bad, e, sizeof bad);
    bad[0].i = -1;
    CHECK_ERR(it_lr_scheduler_load_state(&s, bad, 9), IT_ERR_INVALID_ARG, "last_step is -1, expected >= 0");
    memcpy(bad, e, sizeof bad);
    bad[2].f = INFINITY;
    CHECK_ERR(it_lr_scheduler_load_state(&s, bad, 9), IT_ERR_INVALID_ARG, "base_lr is inf, expected a finite LR");
    /* a refused load leaves the scheduler as it was */
    CHECK(s.top.last_step == 4 && it_lr_scheduler_lr(&s) == e[1].f);
}

/* it_lr_scheduler_advance(n) is n it_lr_scheduler_step calls, field for field and bit for
 * bit, on both sides of the point where the schedule goes flat; and a resume to step 2e9
 * (the fuzzer's timeout: a checkpoint's global_step replayed one step at a time) is cheap. */
static bool same_sched(const it_lr_scheduler *a, const it_lr_scheduler *b) {
    const it_lr_sched_node *na[3] = {&a->top, &a->child[0], &a->child[1]};
    const it_lr_sched_node *nb[3] = {&b->top, &b->child[0], &b->child[1]};
    for (int i = 0; i < 3; i++)
        if (na[i]->last_step != nb[i]->last_step || !same_bits(na[i]->base_lr, nb[i]->base_lr)) return false;
    return same_bits(a->lr, b->lr);
}

static void test_advance(void) {
    const it_lr_decay styles[] = {IT_LR_NONE, IT_LR_CONSTANT, IT_LR_LINEAR, IT_LR_COSINE, IT_LR_INVERSE_SQRT};
    for (int st = 0; st < 5; st++)
        for (int64_t w = 0; w <= 3; w += 3)
            for (int64_t decay = 0; decay <= 8; decay += 8) {
                it_lr_scheduler_config c = cfg_of(styles[st], 6e-4f, 6e-5f, w, 1e-4f, decay, 12);
                for (int64_t n = 0; n <= 30; n++) {
                    it_lr_scheduler a, b;
                    CHECK_OK(it_lr_scheduler_init(&a, &c));
                    CHECK_OK(it_lr_scheduler_init(&b, &c));
                    for (int64_t k = 0; k < n; k++) it_lr_scheduler_step(&a);
                    it_lr_scheduler_advance(&b, n);
                    CHECK_MSG(same_sched(&a, &b), "%s W=%lld decay %lld n=%lld", it_lr_decay_name(styles[st]),
                              (long long)w, (long long)decay, (long long)n);
                    /* and stepping on from both stays the same */
                    it_lr_scheduler_step(&a);
                    it_lr_scheduler_step(&b);
                    CHECK(same_sched(&a, &b));
                }
                it_lr_scheduler big, ref;
                CHECK_OK(it_lr_scheduler_init(&big, &c));
                CHECK_OK(it_lr_scheduler_init(&ref, &c));
                it_lr_scheduler_advance(&big, 2000000000);
                it_lr_scheduler_advance(&ref, 30);
                CHECK(big.top.last_step == ref.top.last_step - 30 + 2000000000);
                CHECK(same_bits(big.lr, ref.lr));
            }
}

int main(void) {
    test_names();
    test_pytorch_fixture();
    test_infinitrain_vectors();
    test_bitwise();
    test_which_step();
    test_none();
    test_validation();
    test_state_round_trip();
    test_advance();
    return it_test_report("test_lr_schedule");
}
