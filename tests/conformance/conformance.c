/* it-conformance: every kernel slot of a backend against the CPU backend's kernel.
 *
 *   it-conformance [--backend NAME]... [--device NAME:I]... [--slot NAME] [--grad]
 *                  [--list] [--verbose] [--self-test] [--skip-unavailable]
 *
 * Without --backend/--device: every registered backend and every discoverable plugin that
 * loads and has a device, on device 0 (a plugin on the search path that does not load fails the run).
 * Prints one line per (backend, slot, dtype, case) and a closing "N passed, M failed" that
 * names each failing slot and its dtypes;
 * exits 1 on any failure. docs/conformance.md describes the checks and their bounds. */
#include <stdlib.h>
#include <string.h>

#include "conf.h"

/* Every slot of it_kernels, in order, with its --grad check. A new slot in backend.h breaks
 * the assertion below until it has cases here: the suite never silently skips a slot. The
 * table is read through its named members (generated accessors): no assumption about the
 * struct's layout. */
#define CONF_SLOTS(X)                                                                                                  \
    X(cast, NULL)                                                                                                      \
    X(fill, NULL)                                                                                                      \
    X(copy_strided, NULL)                                                                                              \
    X(gemm, NULL)                                                                                                      \
    X(unary, NULL)                                                                                                     \
    X(binary, conf_grad_binary)                                                                                        \
    X(reduce, NULL)                                                                                                    \
    X(embedding_fwd, NULL)                                                                                             \
    X(embedding_bwd, conf_grad_embedding_bwd)                                                                          \
    X(layernorm_fwd, NULL)                                                                                             \
    X(layernorm_bwd, conf_grad_layernorm_bwd)                                                                          \
    X(softmax_fwd, NULL)                                                                                               \
    X(softmax_bwd, conf_grad_softmax_bwd)                                                                              \
    X(cross_entropy_fwd, NULL)                                                                                         \
    X(cross_entropy_bwd, conf_grad_cross_entropy_bwd)                                                                  \
    X(sgd_step, NULL)                                                                                                  \
    X(adam_step, NULL)                                                                                                 \
    X(rmsnorm_fwd, NULL)                                                                                               \
    X(rmsnorm_bwd, conf_grad_rmsnorm_bwd)                                                                              \
    X(rope, conf_grad_rope)                                                                                            \
    X(topk, NULL)                                                                                                      \
    X(attention_fwd, NULL)                                                                                             \
    X(attention_bwd, NULL)                                                                                             \
    X(adam_step_round, NULL)                                                                                           \
    X(cross_entropy_low_fwd, NULL)                                                                                     \
    X(cross_entropy_low_bwd, NULL)                                                                                     \
    X(swiglu_low_fwd, NULL)                                                                                            \
    X(swiglu_low_bwd, NULL)                                                                                            \
    X(flash_attention_fwd, NULL)                                                                                       \
    X(flash_attention_bwd, NULL)

#define PRESENT_FN(name, grad)                                                                                         \
    static bool present_##name(const it_kernels *k) { return k->name != NULL; }
CONF_SLOTS(PRESENT_FN)
#undef PRESENT_FN

#define SLOT_ENTRY(name, grad) {#name, present_##name, conf_call_##name, conf_cases_##name, grad},
const conf_slot conf_slots[] = {CONF_SLOTS(SLOT_ENTRY)};
#undef SLOT_ENTRY
const size_t conf_slot_count = sizeof conf_slots / sizeof conf_slots[0];
_Static_assert(sizeof conf_slots / sizeof conf_slots[0] == IT_KERNEL_SLOT_COUNT,
               "every it_kernels slot needs an entry (and cases) in the conformance suite");

static void usage(FILE *f) {
    fprintf(f, "usage: it-conformance [--backend NAME]... [--device NAME:I]... [--slot NAME] [--grad]\n"
               "                      [--list] [--verbose] [--self-test] [--skip-unavailable]\n"
               "  --backend NAME  test device 0 of backend NAME (loads libit_backend_NAME.so if needed)\n"
               "  --device NAME:I test device I of backend NAME\n"
               "                  (default: every registered and discoverable backend, device 0)\n"
               "  --slot NAME     only this kernel slot\n"
               "  --grad          check the backward slots against central finite differences (fp64)\n"
               "  --list          print backend x slot: native / fallback, and exit\n"
               "  --verbose       describe every case's operands and bound\n"
               "  --self-test     run the suite on a deliberately broken backend; succeed if it catches it\n"
               "  --skip-unavailable  exit 77 (ctest: skipped) when the named backends load but none can run\n"
               "                  here (no driver, no such device)\n");
}

#define MAX_TARGETS 32

typedef struct targets {
    conf_target t[MAX_TARGETS];
    int n;
    int errors;      /* named backends or devices that could not be used */
    int unavailable; /* of which: loaded, but no driver or no such device */
    int load_failed; /* plugins on the search path that did not load (a run without --backend) */
} targets;

static void add_target(targets *ts, const it_backend *b, int index) {
    if (ts->n >= MAX_TARGETS) return;
    for (int i = 0; i < ts->n; i++)
        if (ts->t[i].backend == b && ts->t[i].index == index) return;
    conf_target *t = &ts->t[ts->n++];
    memset(t, 0, sizeof *t);
    t->backend = b;
    t->index = index;
    snprintf(t->name, sizeof t->name, "%s:%d", b->name, index);
}

/* Every registered backend and every plugin on the search path that loads. For the test
 * run, backends without a usable device are noted and left out; for --list they are kept
 * (index -1) so the table shows their kernels. */
static void discover_all(bool for_list, targets *ts) {
    char names[64][40];
    int n = 0;
    it_backend_discover(names, 64, &n);
    for (int i = 0; i < n; i++) {
        const it_backend *b = NULL;
        /* a plugin on the search path that does not load fails the run: a user would meet it */
        if (it_backend_find(names[i], &b)) {
            printf("it-conformance: FAIL: plugin '%s' on the search path does not load: %s\n", names[i],
                   it_last_error());
            ts->errors++;
            ts->load_failed++;
        }
    }
    for (int i = 0; i < it_backend_count(); i++) {
        const it_backend *b = it_backend_at(i);
        if (!b || strcmp(b->name, "selftest") == 0) continue;
        int count = 0;
        it_status st = it_device_count(b, &count);
        if (st || count < 1) {
            if (for_list)
                add_target(ts, b, -1);
            else if (st)
                printf("# note: backend '%s' not tested: %s\n", b->name, it_last_error());
            else
                printf("# note: backend '%s' has no device, not tested\n", b->name);
            continue;
        }
        add_target(ts, b, 0);
    }
}

static void list_table(const targets *ts) {
    printf("%-23s", "slot");
    for (int i = 0; i < ts->n; i++) printf(" %-10s", ts->t[i].backend->name);
    printf("\n");
    for (size_t s = 0; s < conf_slot_count; s++) {
        printf("%-23s", conf_slots[s].name);
        for (int i = 0; i < ts->n; i++) {
            bool cpu = strcmp(ts->t[i].backend->name, "cpu") == 0;
            bool native = conf_slots[s].present(conf_kernels(ts->t[i].backend));
            /* an empty cpu slot has nothing to fall back to */
            printf(" %-10s", native ? "native" : cpu ? "(NULL)" : it_kernel_slot_fused(s) ? "composed" : "fallback");
        }
        printf("\n");
    }
    printf("%-23s", "devices");
    for (int i = 0; i < ts->n; i++) {
        int count = 0;
        char buf[16] = "init failed";
        if (!it_device_count(ts->t[i].backend, &count)) snprintf(buf, sizeof buf, "%d", count);
        printf(" %-10s", buf);
    }
    printf("\n");
}

/* Run every (or one) slot of one target; per-slot counts go to stats[slot]. */
static void run_target(conf_ctx *ctx, const char *only_slot, bool grad, conf_slot_stats *stats) {
    for (size_t s = 0; s < conf_slot_count; s++) {
        const conf_slot *sl = &conf_slots[s];
        if (only_slot && strcmp(only_slot, sl->name) != 0) continue;
        if (grad && !sl->grad) continue;
        ctx->slot = sl->name;
        ctx->call = sl->call;
        ctx->stats = &stats[s];
        if (!sl->present(conf_kernels(ctx->dev.backend)) && it_kernel_slot_fused(s)) {
            conf_line(ctx, "-", "-", "-", "absent (an optional fused kernel: the core composes the op)");
            continue;
        }
        if (!sl->present(conf_kernels(ctx->dev.backend))) {
            conf_line(ctx, "-", "-", "-", "fallback (not native: the core runs the CPU kernel)");
            ctx->fallback++;
            stats[s].fallback = true;
            continue;
        }
        if (grad)
            sl->grad(ctx);
        else
            sl->cases(ctx);
    }
}

/* --backend NAME (device 0) or --device NAME:I. A backend that does not load is an error;
 * one that loads but cannot initialize (no driver) or lacks that device is "unavailable":
 * an error too, unless --skip-unavailable turns a run with nothing else to test into ctest's
 * "skipped" (exit 77). */
static void add_named(targets *ts, const char *spec, bool device) {
    char name[64];
    long index = 0;
    const char *colon = device ? strchr(spec, ':') : NULL;
    size_t nl = colon ? (size_t)(colon - spec) : strlen(spec);
    char *end = NULL;
    if (colon) index = strtol(colon + 1, &end, 10);
    if (nl == 0 || nl >= sizeof name || (colon && (end == colon + 1 || *end || index < 0 || index > 1000000))) {
        printf("it-conformance: '%s' is not %s\n", spec, device ? "NAME or NAME:INDEX" : "a backend name");
        ts->errors++;
        return;
    }
    memcpy(name, spec, nl);
    name[nl] = '\0';
    const it_backend *b = NULL;
    int count = 0;
    if (it_backend_find(name, &b)) {
        printf("it-conformance: %s\n", it_last_error());
        ts->errors++;
    } else if (it_device_count(b, &count)) {
        printf("it-conformance: backend '%s' is unavailable: %s\n", name, it_last_error());
        ts->errors++;
        ts->unavailable++;
    } else if (index >= count) {
        printf("it-conformance: backend '%s' has %d device%s: no device %ld\n", name, count, count == 1 ? "" : "s",
               index);
        ts->errors++;
        ts->unavailable++;
    } else {
        add_target(ts, b, (int)index);
    }
}

static bool find_slot(const char *name) {
    for (size_t s = 0; s < conf_slot_count; s++)
        if (strcmp(conf_slots[s].name, name) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    targets ts = {0};
    bool list = false, grad = false, verbose = false, self_test = false, named = false, skip_unavailable = false;
    const char *only_slot = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--list")) {
            list = true;
        } else if (!strcmp(a, "--grad")) {
            grad = true;
        } else if (!strcmp(a, "--verbose")) {
            verbose = true;
        } else if (!strcmp(a, "--self-test")) {
            self_test = true;
        } else if (!strcmp(a, "--slot") && has_val) {
            only_slot = argv[++i];
        } else if ((!strcmp(a, "--backend") || !strcmp(a, "--device")) && has_val) {
            named = true;
            add_named(&ts, argv[++i], !strcmp(a, "--device"));
        } else if (!strcmp(a, "--skip-unavailable")) {
            skip_unavailable = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "it-conformance: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (only_slot && !find_slot(only_slot)) {
        fprintf(stderr, "it-conformance: unknown slot '%s'; slots:", only_slot);
        for (size_t s = 0; s < conf_slot_count; s++) fprintf(stderr, " %s", conf_slots[s].name);
        fprintf(stderr, "\n");
        return 2;
    }
    /* The table above must match the core's slot names, in order. */
    for (size_t s = 0; s < conf_slot_count; s++)
        if (strcmp(conf_slots[s].name, it_kernel_slot_name(s)) != 0) {
            fprintf(stderr, "it-conformance: slot %zu is '%s' here but '%s' in the core\n", s, conf_slots[s].name,
                    it_kernel_slot_name(s));
            return 2;
        }

    conf_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.verbose = verbose;
    const it_backend *cpu = NULL;
    int cpu_count = 0;
    if (it_backend_find("cpu", &cpu) || it_device_count(cpu, &cpu_count) ||
        cpu->runtime->default_stream(0, &ctx.cpu.stream)) {
        printf("it-conformance: the cpu reference is not usable: %s\n", it_last_error());
        return 1;
    }
    ctx.cpu.backend = cpu;
    snprintf(ctx.cpu.name, sizeof ctx.cpu.name, "cpu:0");

    if (self_test) {
        const it_backend *b = conf_selftest_backend();
        if (!b || it_backend_register(b)) {
            printf("it-conformance: cannot register the self-test backend: %s\n", it_last_error());
            return 1;
        }
        ts.n = 0;
        add_target(&ts, b, 0);
    } else if (!named) {
        discover_all(list, &ts);
    }

    if (list) {
        list_table(&ts);
        return ts.errors ? 1 : 0;
    }

    if (skip_unavailable && ts.n == 0 && ts.errors > 0 && ts.errors == ts.unavailable) {
        printf("it-conformance: nothing available to test: skipped\n");
        return 77; /* ctest's SKIP_RETURN_CODE */
    }

    conf_slot_stats stats[IT_KERNEL_SLOT_COUNT], gstats[IT_KERNEL_SLOT_COUNT];
    char failed[4096] = ""; /* "sim:0 layernorm_fwd (fp32, bf16)" per failing slot */
    size_t foff = 0;
    for (int i = 0; i < ts.n; i++) {
        conf_target *t = &ts.t[i];
        /* Kernels run on a stream of their own where the backend can make one: the harness's
         * copies are ordered after the default stream only, so a stream_synchronize that does
         * not wait, or a kernel that ignores its stream, shows as a wrong result. */
        const it_runtime *rt = t->backend->runtime;
        it_stream *own = NULL;
        if (rt->stream_create && rt->stream_create(t->index, 0, &own)) {
            printf("%-12s FAIL: stream_create(%d): %s\n", t->name, t->index, it_last_error());
            ctx.fail++;
            continue;
        }
        if (!own && rt->default_stream(t->index, &t->stream)) {
            printf("%-12s FAIL: default_stream(%d): %s\n", t->name, t->index, it_last_error());
            ctx.fail++;
            continue;
        }
        if (own) t->stream = own;
        printf("# %s (%s): %s\n", t->name, it_backend_origin(t->backend),
               grad ? "backward slots against central differences, fp64" : "every slot against the cpu kernel");
        ctx.dev = *t;
        memset(stats, 0, sizeof stats);
        memset(gstats, 0, sizeof gstats);
        if (!grad || self_test) run_target(&ctx, only_slot, false, stats);
        if (grad || self_test) run_target(&ctx, only_slot, true, gstats);
        for (size_t s = 0; s < conf_slot_count; s++)
            for (int g = 0; g < 2; g++) {
                const conf_slot_stats *st = g ? &gstats[s] : &stats[s];
                if (st->fail && foff < sizeof failed)
                    foff += (size_t)snprintf(failed + foff, sizeof failed - foff, "\n  %s %s%s (%d case%s: %s)",
                                             t->name, conf_slots[s].name, g ? " --grad" : "", st->fail,
                                             st->fail == 1 ? "" : "s", st->fail_dtypes[0] ? st->fail_dtypes : "-");
            }
        if (own && rt->stream_destroy(own)) {
            printf("%-12s FAIL: stream_destroy: %s\n", t->name, it_last_error());
            ctx.fail++;
        }
    }
    int failures = ctx.fail + ts.errors;
    printf("%d passed, %d failed (%d skipped: declined by the backend; %d without a cpu reference; %d slots "
           "fallback; %d backends)\n",
           ctx.pass, failures, ctx.skip, ctx.noref, ctx.fallback, ts.n);
    if (failed[0]) printf("failed slots (backend slot, cases, dtypes):%s\n", failed);
    if (ts.load_failed)
        printf("%d plugin%s on the search path did not load (above): fix or remove %s\n", ts.load_failed,
               ts.load_failed == 1 ? "" : "s", ts.load_failed == 1 ? "it" : "them");
    if (ctx.skip && !verbose) printf("(--verbose shows each declined case's operands)\n");
    if (self_test) {
        int unmet = conf_selftest_check(stats, false) + conf_selftest_check(gstats, true);
        if (only_slot) unmet = 0; /* a partial run cannot meet every expectation */
        printf("self-test: %s\n", unmet ? "the suite MISSED defects it must catch" : "every planted defect was caught");
        return unmet ? 1 : 0;
    }
    return failures ? 1 : 0;
}
