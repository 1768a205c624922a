/* The precision checker (src/core/precision.c, precision_io.c): the option string and its
 * errors; MD5 against RFC 1321's vectors; InfiniTrain's rounding before the hash; .npy
 * files written, read back here in C, their header byte for byte, and every malformed
 * file refused with a message naming what is wrong; and a check run on the CPU at level 2
 * (InfiniTrain's log lines exactly, NaN/Inf marked `<- ERROR`, the md5 lines, the index and
 * the .npy values of an op's forward and backward). Level 1 (the models' module records) is
 * checked end to end by tests/e2e/precision.sh. */
#include <stdint.h>
#include <unistd.h>

#include "infinitrain/autograd.h"
#include "infinitrain/ops.h"
#include "infinitrain/precision.h"
#include "it_test.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static int count_lines(const char *s, const char *substr) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, substr)); p++) n++;
    return n;
}

static void test_parse(void) {
    it_precision_config c;
    CHECK_OK(it_precision_parse("", &c));
    CHECK(c.level == 0 && !strcmp(c.path, "./log_precision_check") && c.format == IT_PRECISION_SIMPLE &&
          !c.save_tensors && c.md5_tolerance == 0);
    CHECK_OK(it_precision_parse("level=2,path=/tmp/x,format=md5,save_tensors=true,md5_tolerance=1e-3", &c));
    CHECK(c.level == 2 && !strcmp(c.path, "/tmp/x") && c.format == IT_PRECISION_MD5 && c.save_tensors &&
          c.md5_tolerance == 1e-3);
    CHECK_OK(it_precision_parse("level=1,save_tensors=1,,", &c));
    CHECK(c.level == 1 && c.save_tensors);
    CHECK_ERR(it_precision_parse("level=3", &c), IT_ERR_INVALID_ARG, "level=3");
    CHECK_ERR(it_precision_parse("level=1,format=table", &c), IT_ERR_INVALID_ARG, "format=table");
    CHECK_ERR(it_precision_parse("save_tensors=yes", &c), IT_ERR_INVALID_ARG, "save_tensors=yes");
    CHECK_ERR(it_precision_parse("md5_tolerance=-1", &c), IT_ERR_INVALID_ARG, "md5_tolerance=-1");
    CHECK_ERR(it_precision_parse("level=1,output_md5=true", &c), IT_ERR_INVALID_ARG, "unknown key 'output_md5'");
    CHECK_ERR(it_precision_parse("level", &c), IT_ERR_INVALID_ARG, "not key=value");
    CHECK_ERR(it_precision_parse("path=", &c), IT_ERR_INVALID_ARG, "empty");
}

static void test_md5_and_quantize(void) {
    char h[33];
    it_md5_hex("", 0, h);
    CHECK(!strcmp(h, "d41d8cd98f00b204e9800998ecf8427e"));
    it_md5_hex("abc", 3, h);
    CHECK(!strcmp(h, "900150983cd24fb0d6963f7d28e17f72"));
    it_md5_hex("message digest", 14, h);
    CHECK(!strcmp(h, "f96b697d7cb7938d525a2f31aaf161d0"));
    const char *s62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"; /* crosses 56 bytes */
    it_md5_hex(s62, 62, h);
    CHECK(!strcmp(h, "d174ab98d277d9f5a5611c2c9f419d9f"));
    uint8_t big[1000]; /* several blocks: python3 hashlib.md5(bytes(i % 251 for i in range(1000))) */
    for (int i = 0; i < 1000; i++) big[i] = (uint8_t)(i % 251);
    it_md5_hex(big, sizeof big, h);
    CHECK(!strcmp(h, "a24f1e3ef66950e1327f210e3997ba2c"));

    /* InfiniTrain's example: 4.0003 and 4.0004 both become 4.000 at 1e-3; halves round away from 0 */
    float in[5] = {4.0003f, 4.0004f, 0.5f, -0.5f, -2.0f}, out[5];
    it_precision_quantize(in, out, 2, 1e-3);
    CHECK(out[0] == 4.0f && out[1] == 4.0f);
    it_precision_quantize(in + 2, out + 2, 3, 1.0);
    CHECK(out[2] == 1.0f && out[3] == -1.0f && out[4] == -2.0f);
}

static void test_npy(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/a.npy", dir);
    const float v[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    CHECK_OK(it_npy_write_f32(p, 2, (int64_t[]){2, 3}, v));
    char *raw = slurp(p);
    const char *want = "\x93NUMPY\x01\x00"; /* magic, version 1.0 */
    CHECK(raw && !memcmp(raw, want, 8));
    size_t hlen = raw ? (size_t)(uint8_t)raw[8] | (size_t)(uint8_t)raw[9] << 8 : 0;
    CHECK((10 + hlen) % 16 == 0);
    CHECK(raw && !strncmp(raw + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3) }", 58));
    CHECK(raw && raw[10 + hlen - 1] == '\n');
    free(raw);
    it_npy a;
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 && a.numel == 6 && a.data && !memcmp(a.data, v, sizeof v));
    it_npy_free(&a);
    /* 1-D "(5,)" and 0-D "()" */
    CHECK_OK(it_npy_write_f32(p, 1, (int64_t[]){5}, v));
    raw = slurp(p);
    CHECK(raw && strstr(raw + 10, "'shape': (5,) }"));
    free(raw);
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.ndim == 1 && a.shape[0] == 5 && a.data[4] == 1e-30f);
    it_npy_free(&a);
    CHECK_OK(it_npy_write_f32(p, 0, NULL, v));
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.ndim == 0 && a.numel == 1 && a.data[0] == 1.5f);
    it_npy_free(&a);

    /* malformed files: each refused, naming what is wrong */
    char good[256];
    CHECK_OK(it_npy_write_f32(p, 2, (int64_t[]){2, 3}, v));
    raw = slurp(p);
    size_t n = 10 + hlen + sizeof v;
    memcpy(good, raw, n);
    free(raw);
    char bad[256];
    memcpy(bad, good, n);
    bad[1] = 'X';
    spit(p, bad, n);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "magic");
    memcpy(bad, good, n);
    bad[6] = 9;
    spit(p, bad, n);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "version 9.0");
    spit(p, good, n - 4);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "its header (6 float32 values) says");
    spit(p, good, 9);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "truncated");
    memcpy(bad, good, n);
    memcpy(strstr(bad + 10, "<f4"), "<f8", 3);
    spit(p, bad, n);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "dtype '<f8'");
    memcpy(bad, good, n);
    memcpy(strstr(bad + 10, "False"), "True ", 5);
    spit(p, bad, n);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "Fortran");
    memcpy(bad, good, n);
    memcpy(strstr(bad + 10, "(2, 3)"), "(2, x)", 6);
    spit(p, bad, n);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_FORMAT, "shape entry 1");
    snprintf(p, sizeof p, "%s/absent.npy", dir);
    CHECK_ERR(it_npy_read_f32(p, &a), IT_ERR_IO, "absent.npy");
}

/* One micro-step of loss = sum(2 * x) on the CPU, x (2, 4) a leaf. */
static void scale_sum_step(const float *xv, int step) {
    it_precision_step_begin(step);
    it_precision_micro_step(0);
    it_scope_begin();
    it_tensor *x = it_tensor_from_host(it_device_cpu(), IT_DTYPE_FP32, 2, (int64_t[]){2, 4}, xv, 8 * sizeof(float));
    CHECK_OK(it_tensor_set_requires_grad(x, true));
    it_tensor *y = it_scale(x, 2.0f);
    CHECK_OK(it_backward(it_sum_all(y)));
    it_scope_end();
    it_tape_clear();
    CHECK_OK(it_precision_step_end());
}

static void test_check_level2(const char *dir) {
    char spec[600], p[900];
    it_precision_config c;
    snprintf(spec, sizeof spec, "level=2,path=%s/l2,save_tensors=true", dir);
    CHECK_OK(it_precision_parse(spec, &c));
    CHECK_OK(it_precision_begin(&c, 0, 0));
    CHECK(it_precision_enabled());
    char run[800];
    snprintf(run, sizeof run, "%s", it_precision_run_dir());
    CHECK(strlen(run) == strlen(dir) + 3 + 1 + 15); /* DIR/l2/YYYYMMDD_HHMMSS */
    const float x1[8] = {1, 2, 3, 4, 5, 6, 7, -8};
    scale_sum_step(x1, 1);
    const float x2[8] = {1, NAN, INFINITY, 4, 5, 6, 7, 8};
    scale_sum_step(x2, 2);
    CHECK_OK(it_precision_end());
    CHECK(!it_precision_enabled());

    snprintf(p, sizeof p, "%s/precision_check_rank_0.log", run);
    char *log = slurp(p);
    CHECK(log != NULL);
    if (!log) return;
    /* InfiniTrain's lines: inputs and outputs share a per-step counter per (name, stage) */
    CHECK(strstr(log, "[GAS-0] [L-0] scale_forward tensor[0]: dtype=float32 shape=(2,4) min=-8 max=7 mean=2.5 "
                      "[1, 2, 3, 4, 5, 6, ...] [NaN:0 Inf:0]\n"));
    CHECK(strstr(log, "[GAS-0] [L-0] scale_1_forward tensor[0]: dtype=float32 shape=(2,4) min=-16 max=14 mean=5 "
                      "[2, 4, 6, 8, 10, 12, ...] [NaN:0 Inf:0]\n"));
    /* backward: dy (ones) in, then x's gradient (twos) out */
    CHECK(strstr(log, "[GAS-0] [L-0] scale_backward tensor[0]: dtype=float32 shape=(2,4) min=1 max=1 mean=1 "
                      "[1, 1, 1, 1, 1, 1, ...] [NaN:0 Inf:0]\n"));
    CHECK(strstr(log, "[GAS-0] [L-0] scale_1_backward tensor[0]: dtype=float32 shape=(2,4) min=2 max=2 mean=2 "
                      "[2, 2, 2, 2, 2, 2, ...] [NaN:0 Inf:0]\n"));
    /* step 2: the counters restart, and NaN/Inf are counted, left out of min/max/mean, marked */
    CHECK(strstr(log, "[GAS-0] [L-0] scale_forward tensor[0]: dtype=float32 shape=(2,4) min=1 max=8 mean=5.16667 "
                      "[1, nan, inf, 4, 5, 6, ...] [NaN:1 Inf:1] <- ERROR\n"));
    CHECK(count_lines(log, " scale_forward tensor[0]") == 2);
    CHECK(count_lines(log, "<- ERROR") >= 2);
    free(log);

    /* the .npy of step 1's output and input gradient, read back */
    it_npy a;
    snprintf(p, sizeof p, "%s/rank_0/step_000001/scale_1_forward.npy", run);
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 4 && a.data && a.data[0] == 2 && a.data[7] == -16);
    it_npy_free(&a);
    snprintf(p, sizeof p, "%s/rank_0/step_000001/scale_1_backward.npy", run);
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.numel == 8 && a.data && a.data[0] == 2 && a.data[7] == 2);
    it_npy_free(&a);
    snprintf(p, sizeof p, "%s/rank_0/step_000002/scale_forward.npy", run);
    CHECK_OK(it_npy_read_f32(p, &a));
    CHECK(a.numel == 8 && a.data && isnan(a.data[1]) && isinf(a.data[2]));
    it_npy_free(&a);

    /* the index: execution order, kinds, the file of each record */
    snprintf(p, sizeof p, "%s/precision_check_rank_0.tsv", run);
    char *tsv = slurp(p);
    CHECK(tsv && !strncmp(tsv, "# infinitrain precision check v1 level=2", 40));
    CHECK(tsv &&
          strstr(tsv, "\t1\t0\t-1\t0\tfwd_in\t0\tscale\trank_0/step_000001/scale_forward.npy\tfloat32\t(2,4)\t"));
    CHECK(tsv && strstr(tsv, "\tfwd_out\t0\tscale\trank_0/step_000001/scale_1_forward.npy\t"));
    CHECK(tsv && strstr(tsv, "\tbwd_in\t0\tscale\trank_0/step_000001/scale_backward.npy\t"));
    CHECK(tsv && strstr(tsv, "\tbwd_out\t0\tscale\trank_0/step_000001/scale_1_backward.npy\t"));
    const char *fi = tsv ? strstr(tsv, "\tfwd_out\t0\tscale\t") : NULL,
               *bo = tsv ? strstr(tsv, "\tbwd_out\t0\tscale\t") : NULL;
    CHECK(fi && bo && fi < bo);
    free(tsv);
}

static void test_check_md5(const char *dir) {
    char spec[600], p[900], run[800];
    it_precision_config c;
    snprintf(spec, sizeof spec, "level=2,path=%s/md5,format=md5,md5_tolerance=1e-3", dir);
    CHECK_OK(it_precision_parse(spec, &c));
    CHECK_OK(it_precision_begin(&c, 3, 86400));
    snprintf(run, sizeof run, "%s", it_precision_run_dir());
    const float x[8] = {1.00004f, 2, 3, 4, 5, 6, 7, -8};
    scale_sum_step(x, 1);
    CHECK_OK(it_precision_end());
    snprintf(p, sizeof p, "%s/precision_check_rank_3.log", run);
    char *log = slurp(p);
    CHECK(log != NULL);
    if (!log) return;
    float y[8], q[8];
    for (int i = 0; i < 8; i++) y[i] = 2 * x[i];
    it_precision_quantize(y, q, 8, 1e-3);
    CHECK(q[0] == 2.0f);
    char want[300], h[33];
    it_md5_hex(q, sizeof q, h);
    snprintf(want, sizeof want, "[GAS-0] [L-0] scale_1_forward tensor[0]: dtype=float32 shape=(2,4) md5=%s\n", h);
    CHECK_MSG(strstr(log, want), "want %s in\n%s", want, log);
    /* rounded, 1.00004 hashes as 1 does */
    const float x1[8] = {1, 2, 3, 4, 5, 6, 7, -8};
    snprintf(want, sizeof want, "[GAS-0] [L-0] scale_forward tensor[0]: dtype=float32 shape=(2,4) md5=");
    const char *line = strstr(log, want);
    it_md5_hex(x1, sizeof x1, h);
    CHECK(line && !strncmp(line + strlen(want), h, 32));
    CHECK(!strstr(log, "min="));
    free(log);
    /* without save_tensors there is no rank directory */
    snprintf(p, sizeof p, "%s/rank_3", run);
    CHECK(access(p, F_OK) != 0);
}

static void test_off(void) {
    it_precision_config c;
    CHECK_OK(it_precision_parse("level=0", &c));
    CHECK_OK(it_precision_begin(&c, 0, 0)); /* level 0 opens nothing */
    CHECK(!it_precision_enabled());
    it_precision_step_begin(1); /* no-ops */
    CHECK_OK(it_precision_step_end());
    CHECK_OK(it_precision_end());
}

int main(void) {
    char dir[] = "/tmp/it_test_precision_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_parse();
    test_md5_and_quantize();
    test_npy(dir);
    test_off();
    test_check_level2(dir);
    test_check_md5(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("%d checks, %d failures\n", it_test_checks, it_test_failures);
    return it_test_failures ? 1 : 0;
}
