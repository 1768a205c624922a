/* Shared pieces of the PyTorch exactness tests (test_*_exact.c): fixture files, the
 * debug-state comparison and the 10-step trajectories run through the apps' driver.
 *
 * Tolerances (the issues' bounds, with their reasons): both sides compute in fp32 but sum
 * in different orders (BLAS blocking, reduction trees), so single results differ by a few
 * ulp: logits within 1e-5, the step-1 loss within 2e-6. Over 10 updates the differences
 * grow through the optimizer, so later steps get 1e-5. Gradients: per tensor,
 * |a - b| <= 1e-4 * max|ref| + 1e-7, since fp32 gradients summed over B*T positions carry
 * ~1e-6 relative noise and some entries are exactly 0 in exact arithmetic. */
#ifndef IT_EXACT_COMMON_H
#define IT_EXACT_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infinitrain/train.h"
#include "it_test.h"

static inline void *exact_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* Whether two files hold the same bytes (false when either cannot be read). */
static inline bool exact_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    void *x = exact_read_file(a, &na), *y = exact_read_file(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* A named run of parameters in checkpoint order. */
typedef struct exact_segment {
    char name[48];
    int64_t n;
} exact_segment;

/* Forward + backward of the debug batch; compare logits (first `vocab` of `vp` columns),
 * loss and the gradients segment by segment. */
static inline void exact_debug_state(it_model *m, const char *debug_path, const exact_segment *segs, int nseg) {
    size_t n = 0;
    unsigned char *buf = exact_read_file(debug_path, &n);
    CHECK_MSG(buf != NULL, "cannot read %s", debug_path);
    if (!buf || !m) {
        free(buf);
        return;
    }
    int32_t *h = (int32_t *)buf;
    CHECK(h[0] == 20240327 && h[1] == 2);
    int B = h[2], T = h[3], V = h[4], Vp = h[5];
    const it_model_info *info = it_model_get_info(m);
    CHECK(info->vocab_size == V && info->padded_vocab == Vp);
    int32_t *x = (int32_t *)(buf + 1024), *y = x + B * T;
    float *logits_ref = (float *)(y + B * T), *loss_ref = logits_ref + (size_t)B * T * Vp, *grads_ref = loss_ref + 1;
    CHECK(n == 1024 + sizeof(int32_t) * 2 * (size_t)(B * T) +
                   sizeof(float) * ((size_t)B * T * Vp + 1 + (size_t)info->num_params));

    it_scope_begin();
    int64_t shape[2] = {B, T};
    it_tensor *tx = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, x, sizeof(int32_t) * B * T);
    it_tensor *ty = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, y, sizeof(int32_t) * B * T);
    it_tensor *logits = it_model_forward(m, tx);
    it_tensor *loss = it_cross_entropy(logits, ty, V);
    CHECK(logits && loss);
    float *lg = malloc(sizeof(float) * (size_t)B * T * Vp);
    CHECK_OK(it_tensor_copy_to_host(logits, lg, sizeof(float) * (size_t)B * T * Vp));
    double maxdiff = 0;
    for (size_t i = 0; i < (size_t)B * T * Vp; i++) maxdiff = fmax(maxdiff, fabs((double)lg[i] - logits_ref[i]));
    printf("logits: max |ours - torch| = %.3g\n", maxdiff);
    CHECK(maxdiff < 1e-5);
    double lv = 0;
    CHECK_OK(it_tensor_item(loss, NULL, &lv));
    printf("loss: ours %.9f torch %.9f\n", lv, *loss_ref);
    CHECK_NEAR(lv, *loss_ref, 2e-6);
    CHECK_OK(it_tensor_fill(it_model_grads(m), it_scalar_f64(0)));
    CHECK_OK(it_backward(loss));
    it_scope_end();

    float *g = malloc(sizeof(float) * (size_t)info->num_params);
    CHECK_OK(it_tensor_copy_to_host(it_model_grads(m), g, sizeof(float) * (size_t)info->num_params));
    int64_t off = 0;
    for (int k = 0; k < nseg; k++) {
        double refmax = 0, worst = 0;
        for (int64_t i = 0; i < segs[k].n; i++) refmax = fmax(refmax, fabs(grads_ref[off + i]));
        for (int64_t i = 0; i < segs[k].n; i++) worst = fmax(worst, fabs((double)g[off + i] - grads_ref[off + i]));
        double tol = 1e-4 * refmax + 1e-7;
        if (nseg <= 24 || worst > tol)
            printf("grad %-22s max|ref| %.3e  max|diff| %.3e  (tol %.1e)\n", segs[k].name, refmax, worst, tol);
        CHECK_MSG(worst <= tol, "gradient of %s differs from PyTorch by %.3g", segs[k].name, worst);
        off += segs[k].n;
    }
    CHECK_MSG(off == info->num_params, "segments cover %lld of %lld parameters", (long long)off,
              (long long)info->num_params);
    free(g);
    free(lg);
    free(buf);
}

/* Run every case of expected_losses.txt through the driver of `app`, the model from the llm.c
 * file ckpt or the Hugging Face directory hf; step 1 within tol1, later steps within tol. */
static inline int exact_trajectories_tol(const char *app, const char *expected, const char *ckpt, const char *hf,
                                         const char *shard, double tol1, double tol) {
    FILE *f = fopen(expected, "r");
    CHECK_MSG(f != NULL, "cannot read %s", expected);
    if (!f) return 0;
    char line[1024], name[128] = "", flags[1024] = "";
    double want[64];
    int nexp = 0, cases = 0;
    for (;;) {
        char *got = fgets(line, sizeof line, f);
        bool flush = !got || strncmp(line, "case ", 5) == 0;
        if (flush && name[0]) {
            char buf[1024], *argv[64];
            int argc = 0;
            snprintf(buf, sizeof buf, "%s", flags);
            argv[argc++] = (char *)app;
            for (char *t = strtok(buf, " \n"); t && argc < 64; t = strtok(NULL, " \n")) argv[argc++] = t;
            it_train_config cfg;
            it_train_config_defaults(&cfg, app);
            bool help = false;
            CHECK_OK(it_train_parse_args(&cfg, argc, argv, &help));
            cfg.llmc_filepath = ckpt;
            cfg.hf_model = hf;
            cfg.input_bin = shard;
            cfg.quiet = true;
            double losses[64] = {0};
            it_train_result res = {.losses = losses};
            CHECK(cfg.num_iteration == nexp);
            CHECK_OK(it_train_run(&cfg, &res));
            printf("%-18s step  ours          torch         diff\n", name);
            for (int s = 0; s < nexp; s++) {
                double t = s == 0 ? tol1 : tol;
                printf("%-18s %4d  %.9f  %.9f  %+.2e\n", "", s + 1, losses[s], want[s], losses[s] - want[s]);
                CHECK_MSG(fabs(losses[s] - want[s]) <= t, "%s %s step %d: ours %.9f torch %.9f", app, name, s + 1,
                          losses[s], want[s]);
            }
            cases++;
        }
        if (!got) break;
        if (line[0] == '#') continue;
        if (strncmp(line, "case ", 5) == 0) {
            char *p = line + 5, *sp = strchr(p, ' ');
            if (!sp) break;
            *sp = '\0';
            snprintf(name, sizeof name, "%.100s", p);
            snprintf(flags, sizeof flags, "%s", sp + 1);
            nexp = 0;
        } else if (name[0] && nexp < 64) {
            int step;
            double v;
            if (sscanf(line, "%d %lf", &step, &v) == 2) want[nexp++] = v;
        }
    }
    fclose(f);
    return cases;
}

/* ... with the fp32 tolerances (the header comment). */
static inline int exact_trajectories_from(const char *app, const char *expected, const char *ckpt, const char *hf,
                                          const char *shard) {
    return exact_trajectories_tol(app, expected, ckpt, hf, shard, 2e-6, 1e-5);
}

static inline int exact_trajectories(const char *app, const char *expected, const char *ckpt, const char *shard) {
    return exact_trajectories_from(app, expected, ckpt, NULL, shard);
}

/* Save and compare bytes with the file that was loaded. */
static inline void exact_roundtrip(it_model *m, const char *original) {
    char path[] = "/tmp/it_exact_rt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(it_model_save(m, path));
    size_t n1 = 0, n2 = 0;
    void *a = exact_read_file(original, &n1), *b = exact_read_file(path, &n2);
    CHECK_MSG(a && b && n1 == n2 && memcmp(a, b, n1) == 0, "%s: written checkpoint differs from the original",
              original);
    free(a);
    free(b);
    unlink(path);
}

#endif
