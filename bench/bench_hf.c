/* How much memory loading a model takes: bench_hf hf DIR | llmc FILE loads it on the CPU
 * (it_hf_load, it_llama3_load) and prints the process's peak RSS against the model's own
 * buffers (parameters and their gradients, fp32), and the load's time. Run once per process
 * (bench/hf_bench.sh), so each peak is its own. Figures only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infinitrain/hf.h"

static double vm_mb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') v = atof(line + n + 1) / 1024.0;
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "hf") != 0 && strcmp(argv[1], "llmc") != 0)) {
        fprintf(stderr, "usage: bench_hf hf DIR | llmc FILE\n");
        return 2;
    }
    double base = vm_mb("VmRSS");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    it_model *m = NULL;
    it_status st = strcmp(argv[1], "hf") == 0 ? it_hf_load(argv[2], it_device_cpu(), NULL, &m)
                                              : it_llama3_load(argv[2], it_device_cpu(), &m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st) {
        fprintf(stderr, "bench_hf: %s\n", it_last_error());
        return 1;
    }
    double params = (double)it_tensor_nbytes(it_model_params(m)) / 1048576.0;
    printf("HF_LOAD from=%s params=%lld params_mb=%.0f grads_mb=%.0f rss_before_mb=%.0f rss_peak_mb=%.0f "
           "rss_after_mb=%.0f seconds=%.2f\n",
           argv[1], (long long)it_model_get_info(m)->num_params, params, params, base, vm_mb("VmHWM"), vm_mb("VmRSS"),
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    it_model_free(m);
    return 0;
}
