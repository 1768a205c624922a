/* bench_profile: what the kernel profiler costs per dispatched call.
 *
 * N fills of a one-element fp32 tensor on cpu (the cheapest kernel there is, so the figures
 * are the dispatch path's own cost), timed three ways:
 *   direct       the CPU backend's fill slot called as a function (no dispatch at all)
 *   profile off  it_tensor_fill through the dispatch, no profile open (the default)
 *   profile on   the same with a profile open (two stream synchronizes, two events and one
 *                record per call)
 * Each is run `reps` times; the median and best ns per call are printed, with the host's CPU
 * model. "off - direct" is the whole dispatch (table lookup, statistics, the profiler's
 * flag test); the flag test alone is one relaxed load and a never-taken branch in it__kpre
 * and a thread-local test in it__kpost.
 *
 * Usage: bench_profile [--quick] [N]   (--quick: fewer calls, for smoke runs) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "infinitrain/profile.h"
#include "infinitrain/tensor.h"

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            const char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                snprintf(buf, n, "%s", p);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    fclose(f);
}

enum mode { DIRECT, OFF, ON };

/* ns per call of one run of n calls; -1 on failure. */
static double run(enum mode m, it_tensor *t, long n, const char *prefix) {
    it_tdesc d = it_tensor_desc(t);
    const it_kernels *k = it_cpu_kernels();
    if (m == ON && it_profile_begin(prefix, 0)) return -1;
    double t0 = bench_now_ms();
    for (long i = 0; i < n; i++) {
        it_scalar v = it_scalar_f64((double)(i & 7));
        it_status st = m == DIRECT ? k->fill(NULL, &d, v) : it_tensor_fill(t, v);
        if (st) return -1;
    }
    double ms = bench_now_ms() - t0;
    if (m == ON) {
        if (it_profile_call_count() != (uint64_t)n) return -1;
        /* ending writes the files: not part of the per-call figure */
        if (it_profile_end()) return -1;
        char path[512];
        snprintf(path, sizeof path, "%s.report.rank0", prefix);
        remove(path);
        snprintf(path, sizeof path, "%s.records.log.rank0", prefix);
        remove(path);
        snprintf(path, sizeof path, "%s.trace.rank0.json", prefix);
        remove(path);
    }
    return ms * 1e6 / (double)n;
}

int main(int argc, char **argv) {
    bool quick = false;
    long n = 200000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else
            n = atol(argv[i]);
    }
    if (quick) n = 20000;
    if (n <= 0) {
        fprintf(stderr, "bench_profile: N must be positive\n");
        return 2;
    }
    const int reps = quick ? 3 : 7;
    char model[256], prefix[64];
    cpu_model(model, sizeof model);
    snprintf(prefix, sizeof prefix, "/tmp/bench_profile_%ld", (long)getpid());

    it_scope_begin();
    const int64_t shape[1] = {1};
    it_tensor *t = it_tensor_zeros(it_device_cpu(), IT_DTYPE_FP32, 1, shape);
    if (!t) {
        fprintf(stderr, "bench_profile: %s\n", it_last_error());
        return 1;
    }
    static const char *const names[] = {"direct", "profile off", "profile on"};
    printf("bench_profile: %ld one-element fills per run, %d runs, on %s\n", n, reps, model);
    printf("  %-12s %12s %12s\n", "path", "median ns", "best ns");
    double med[3] = {0}, best[3] = {0};
    bool ok = true;
    for (int m = DIRECT; m <= ON && ok; m++) {
        double v[16];
        run((enum mode)m, t, n / 10 + 1, prefix); /* warm-up */
        for (int r = 0; r < reps && ok; r++) {
            v[r] = run((enum mode)m, t, n, prefix);
            if (v[r] < 0) {
                fprintf(stderr, "bench_profile: %s: %s\n", names[m], it_last_error());
                ok = false;
            }
        }
        if (!ok) break;
        best[m] = v[0];
        for (int r = 1; r < reps; r++)
            if (v[r] < best[m]) best[m] = v[r];
        med[m] = bench_median(v, reps);
        printf("  %-12s %12.1f %12.1f\n", names[m], med[m], best[m]);
    }
    it_scope_end();
    if (!ok) return 1;
    printf("  dispatch with the profiler off: %.1f ns over the direct call (median); profiling on adds %.1f ns "
           "(x%.1f)\n",
           med[OFF] - med[DIRECT], med[ON] - med[OFF], med[ON] / med[OFF]);
    return 0;
}
