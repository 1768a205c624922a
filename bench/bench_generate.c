/* Generation speed over the KV cache, for `make bench`: GPT-2 124M (d12) and a small LLaMA-3
 * (8 layers, 768 wide, 12 heads, 4 kv heads, FFN 2048, LLaMA-3's 128256-id vocabulary;
 * random weights: the speed does not depend on them) each generate 1024 tokens greedily from
 * a one-token prompt. Printed: the time a token takes in each band of 128 positions (flat when
 * the prefix is not recomputed: only the attention over the cached keys grows, and it is a
 * small part of a step at these lengths), tokens per second over the whole run, and for
 * comparison one forward of the whole sequence at T = 128, 512 and 1024, what generating one
 * token at that position costs without a cache. Figures only.
 *
 *   bench_generate [--tokens N] [--model gpt2|llama3|all] [--no-full]   (--no-full: no uncached forwards) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "infinitrain/generate.h"
#include "models/model_impl.h"

static const char *cpu_model(void) {
    static char name[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) snprintf(name, sizeof name, "%s", v + 2);
            name[strcspn(name, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    return name;
}

static it_status small_llama3(it_model **m) {
    it__llama_config c = {.block_size = 1024,
                          .vocab_size = 128256,
                          .n_layer = 8,
                          .n_head = 12,
                          .n_kv_head = 4,
                          .n_embd = 768,
                          .ffn_hidden = 2048,
                          .norm_eps = 1e-5f,
                          .rope_theta = 500000.0f};
    it_status st = it__llama_build(&c, it_device_cpu(), NULL, "bench LLaMA-3", m);
    if (st) return st;
    it_tensor *p = it_model_params(*m); /* N(0, 0.02)-like values: uniform of that spread */
    int64_t n = it_tensor_numel(p);
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return it_error(IT_ERR_OOM, "bench: host memory");
    uint64_t s = 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = (float)(((double)(s >> 11) * 0x1.0p-53 - 0.5) * 0.07);
    }
    st = it_tensor_copy_from_host(p, h, (size_t)n * sizeof *h);
    free(h);
    return st;
}

/* One forward of the whole (1, T) sequence, the cost of a token at position T without a cache:
 * the median of 3, in ms. */
static double full_forward_ms(it_model *m, int64_t T) {
    int32_t *x = calloc((size_t)T, sizeof *x);
    double t[3];
    it_grad_set_enabled(false);
    for (int r = 0; r < 3; r++) {
        it_scope_begin();
        it_tensor *idx = it_tensor_from_host(it_device_cpu(), IT_DTYPE_I32, 2, (int64_t[]){1, T}, x, (size_t)T * 4);
        double t0 = bench_now_ms();
        it_tensor *y = it_model_forward(m, idx);
        double v;
        if (y) it_tensor_item(y, (int64_t[]){0, 0, 0}, &v); /* synchronize */
        t[r] = bench_now_ms() - t0;
        it_scope_end();
    }
    it_grad_set_enabled(true);
    free(x);
    double a = fmin(t[0], t[1]), b = fmax(t[0], t[1]);
    return fmax(a, fmin(b, t[2]));
}

static bool no_full;

static int run(const char *name, it_model *m, int64_t tokens) {
    const it_model_info *in = it_model_get_info(m);
    if (tokens > in->block_size) tokens = in->block_size;
    double *sec = calloc((size_t)tokens, sizeof *sec);
    uint32_t prompt = 1, *out = malloc((size_t)tokens * sizeof *out);
    int64_t n_out = 0;
    it_generate_options o = {.max_new_tokens = tokens, .sampling = {.temperature = 0}, .step_seconds = sec};
    it_generate_result r;
    it_status st = it_generate(m, &prompt, 1, 1, &o, out, &n_out, &r);
    if (st) {
        fprintf(stderr, "bench_generate: %s: %s\n", name, it_last_error());
        return 1;
    }
    int64_t steps = tokens; /* step s >= 1 feeds the token at position s */
    printf("GENERATE model=%s params=%lld vocab=%lld new_tokens=%lld tok_per_s=%.1f\n", name, (long long)in->num_params,
           (long long)in->vocab_size, (long long)n_out, (double)(n_out - 1) / r.decode_seconds);
    double first = 0;
    for (int64_t lo = 1; lo < steps; lo += 128) {
        int64_t hi = lo + 128 < steps ? lo + 128 : steps;
        double sum = 0;
        for (int64_t s = lo; s < hi; s++) sum += sec[s];
        double ms = 1e3 * sum / (double)(hi - lo);
        if (lo == 1) first = ms;
        printf("GENERATE_BAND model=%s positions=%lld-%lld ms_per_token=%.2f tok_per_s=%.1f vs_first=%.2f\n", name,
               (long long)lo + 1, (long long)hi, ms, 1e3 / ms, ms / first);
    }
    const int64_t at[3] = {128, 512, 1024};
    for (int i = 0; !no_full && i < 3 && at[i] <= in->block_size; i++)
        printf("GENERATE_NOCACHE model=%s position=%lld full_forward_ms=%.1f\n", name, (long long)at[i],
               full_forward_ms(m, at[i]));
    free(sec);
    free(out);
    return 0;
}

int main(int argc, char **argv) {
    int64_t tokens = 1024;
    const char *which = "all";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-full") == 0)
            no_full = true;
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            tokens = atoll(argv[++i]);
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            which = argv[++i];
        else {
            fprintf(stderr, "usage: bench_generate [--tokens N] [--model gpt2|llama3|all] [--no-full]\n");
            return 2;
        }
    }
    if (tokens < 2) tokens = 2;
    printf("GENERATE_HOST cpu=\"%s\" threads=%d\n", cpu_model(), omp_get_max_threads());
    int rc = 0;
    if (strcmp(which, "all") == 0 || strcmp(which, "gpt2") == 0) {
        it_gpt2_config cfg;
        it_model *m = NULL;
        if (it_gpt2_preset("d12", &cfg) || it_gpt2_new(&cfg, it_device_cpu(), 1, &m)) {
            fprintf(stderr, "bench_generate: %s\n", it_last_error());
            return 1;
        }
        rc |= run("gpt2_124m", m, tokens);
        it_model_free(m);
    }
    if (strcmp(which, "all") == 0 || strcmp(which, "llama3") == 0) {
        it_model *m = NULL;
        if (small_llama3(&m)) {
            fprintf(stderr, "bench_generate: %s\n", it_last_error());
            return 1;
        }
        rc |= run("llama3_small", m, tokens);
        it_model_free(m);
    }
    return rc;
}
