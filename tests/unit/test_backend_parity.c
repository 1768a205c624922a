/* GPT-2, LLaMA-3 and Mixtral train with bitwise-identical fp32 losses on every backend
 * built here:
 *  - sim (asynchronous streams, device memory the host cannot read) runs the CPU kernels on
 *    its stream threads, so any difference is a core bug (a missed synchronization, a host
 *    read of device memory);
 *  - testplug and simhalf leave kernel slots empty, so the core's CPU fallback serves them;
 *    every empty slot must have been exercised, and the coverage report names them.
 * Bitwise, not within a tolerance: the same kernels on the same inputs in the same order. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "infinitrain/train.h"
#include "it_test.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/"
#define STEPS 4
#define NDEV 3

static const char *const devices[NDEV] = {"sim:1", "testplug:1", "simhalf:0"};
static bool fallback_used[NDEV][IT_KERNEL_SLOT_COUNT];

typedef struct run_case {
    const char *app, *ckpt, *shard, *optimizer;
} run_case;

static void run(const run_case *rc, const char *device, double *losses) {
    it_train_config c;
    it_train_config_defaults(&c, rc->app);
    c.flash = false; /* see main */
    c.device = device;
    c.llmc_filepath = rc->ckpt;
    c.input_bin = rc->shard;
    c.batch_size = 4;
    c.sequence_length = 32;
    c.total_batch_size = 256; /* accumulation 2 */
    c.num_iteration = STEPS;
    c.learning_rate = 1e-3f;
    c.weight_decay = 0.1f;
    c.grad_clip = 1.0f;
    it_optim_kind_from_name(rc->optimizer, &c.optimizer);
    c.quiet = true;
    it_train_result r = {.losses = losses};
    CHECK_OK(it_train_run(&c, &r));
}

/* Remember which fallback slots this run used (the driver resets the counts per run). */
static void note_fallbacks(int d) {
    const it_backend *b = NULL;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(devices[d], ":"), devices[d]);
    if (it_backend_find(name, &b)) return;
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(b, st)) return;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        if (!st[i].native && st[i].calls > 0 && st[i].bytes_moved > 0) fallback_used[d][i] = true;
}

int main(void) {
    /* Bitwise across backends: testplug and simhalf compose attention, so flash attention
     * (the CPU's and sim's) is off here; e2e_flash checks sim bitwise cpu with it. */
    it_flash_attention_set(false);
    /* Unbuffered, so a run killed by a timeout still shows how far it got. */
    setvbuf(stdout, NULL, _IONBF, 0);
    const run_case cases[] = {
        {"gpt2", FIX "gpt2/tiny_gpt2.bin", FIX "gpt2/tiny_shard.bin", "adamw"},
        {"gpt2", FIX "gpt2/tiny_gpt2.bin", FIX "gpt2/tiny_shard.bin", "sgd"},
        {"llama3", FIX "llama3/tiny_llama3.bin", FIX "llama3/tiny_shard_u32.bin", "adam"},
        {"mixtral", FIX "mixtral/tiny_mixtral.bin", FIX "mixtral/tiny_shard.bin", "adamw"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double ref[STEPS];
        run(&cases[k], "cpu", ref);
        for (int d = 0; d < NDEV; d++) {
            char so[256], test_so[256]; /* sim beside the apps; testplug and simhalf with the test plugins */
            snprintf(so, sizeof so, "%s/libit_backend_%.*s.so", IT_BINARY_DIR, (int)strcspn(devices[d], ":"),
                     devices[d]);
            snprintf(test_so, sizeof test_so, "%s/test-plugins/libit_backend_%.*s.so", IT_BINARY_DIR,
                     (int)strcspn(devices[d], ":"), devices[d]);
            if (access(so, F_OK) != 0 && access(test_so, F_OK) != 0) {
                /* Every backend this tree builds must be here; a missing one is a failure. */
                CHECK_MSG(0, "%s not built (%s missing)", devices[d], so);
                continue;
            }
            double got[STEPS];
            memset(got, 0, sizeof got);
            run(&cases[k], devices[d], got);
            note_fallbacks(d);
            for (int s = 0; s < STEPS; s++) {
                printf("%-7s %-6s %-11s step %d: cpu %.9f  here %.9f\n", cases[k].app, cases[k].optimizer, devices[d],
                       s + 1, ref[s], got[s]);
                CHECK_MSG(memcmp(&ref[s], &got[s], sizeof(double)) == 0, "%s %s on %s step %d differs: %.17g vs %.17g",
                          cases[k].app, cases[k].optimizer, devices[d], s + 1, ref[s], got[s]);
            }
        }
    }
    /* Every empty slot of the reduced backends was served by the fallback at least once (the
     * optional fused ones were composed instead, never called), and the report lists each as
     * such. */
    for (int d = 1; d < NDEV; d++) {
        const it_backend *b = NULL;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(devices[d], ":"), devices[d]);
        if (it_backend_find(name, &b)) continue;
        it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
        CHECK_OK(it_backend_kernel_stats(b, st));
        int fallbacks = 0;
        for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
            if (st[i].native) continue;
            if (it_kernel_slot_fused(i)) { /* absent: composed by the core, never called */
                CHECK_MSG(st[i].calls == 0, "%s: absent fused slot %s was called %llu times", name, st[i].slot,
                          (unsigned long long)st[i].calls);
                continue;
            }
            fallbacks++;
            CHECK_MSG(fallback_used[d][i], "%s: fallback slot %s never exercised", name, st[i].slot);
        }
        CHECK(fallbacks > 0);
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        CHECK_OK(it_backend_report(b, mem));
        fclose(mem);
        for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) {
            char want[64];
            snprintf(want, sizeof want, "%-21s %-8s", st[i].slot,
                     st[i].native              ? "native"
                     : it_kernel_slot_fused(i) ? "composed"
                                               : "fallback");
            CHECK_MSG(buf && strstr(buf, want), "report of %s lacks '%s'", name, want);
        }
        printf("%s (last run: mixtral):\n%s", name, buf ? buf : "");
        free(buf);
    }
    return it_test_report("test_backend_parity");
}
