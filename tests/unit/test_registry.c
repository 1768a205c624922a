/* The backend registry: plugin loading by name and by device string, every way a plugin can
 * be refused (and what the message must say), it_backend_register's validation, lazy and
 * thread-safe runtime init, device parsing, discovery and IT_BACKEND_PATH.
 *
 * The test plugins (tests/plugin/NAME.c) are built beside this executable, which is where the
 * loader looks first. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infinitrain/backend.h"
#include "infinitrain/ops.h"
#include "infinitrain/tensor.h"
#include "it_test.h"

/* The message of the last failure contains `s`. */
#define CHECK_HAS(s) CHECK_MSG(strstr(it_last_error(), (s)) != NULL, "message lacks \"%s\": %s", (s), it_last_error())
#define CHECK_LACKS(s) CHECK_MSG(strstr(it_last_error(), (s)) == NULL, "message has \"%s\": %s", (s), it_last_error())

/* Mirror of the stats record tests/plugin/testplug.c exports. */
typedef struct testplug_stats_rec {
    uint64_t init_calls;
    uint64_t memcpy_calls[4];
    uint64_t mallocs, frees;
    uint64_t live_blocks;
    size_t live_bytes;
    uint64_t kernel_calls;
} testplug_stats_rec;

static char bindir[PATH_MAX]; /* IT_BINARY_DIR, resolved as the loader sees it */

static void plugin_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/libit_backend_%s.so", bindir, name);
}

/* The test plugins (testplug and the deliberately broken ones) are built into
 * BUILD/test-plugins (found through IT_BACKEND_PATH), off the search path beside the
 * executables a user runs. */
static void test_plugin_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/test-plugins/libit_backend_%s.so", bindir, name);
}

/* testplug's stats, through the already loaded plugin (RTLD_NOLOAD: never loads it). */
static bool testplug_stats(int device, testplug_stats_rec *out) {
    char path[PATH_MAX + 64];
    test_plugin_path(path, sizeof path, "testplug");
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return false;
    union {
        void *p;
        void (*fn)(int, testplug_stats_rec *);
    } sym;
    sym.p = dlsym(h, "testplug_stats");
    if (sym.p) sym.fn(device, out);
    dlclose(h);
    return sym.p != NULL;
}

/* ------------------------------------------------------------------ lazy init from threads */

#define N_THREADS 8
static pthread_barrier_t start_line;

static void *parse_testplug(void *arg) {
    it_device *dev = arg;
    pthread_barrier_wait(&start_line);
    if (it_device_parse("testplug:1", dev)) dev->backend = NULL;
    return NULL;
}

/* Runs first: the plugin is loaded and initialized by whichever thread wins, once. */
static void test_concurrent_first_use(void) {
    char path[PATH_MAX + 64];
    test_plugin_path(path, sizeof path, "testplug");
    CHECK(dlopen(path, RTLD_NOW | RTLD_NOLOAD) == NULL); /* not loaded yet */
    pthread_t th[N_THREADS];
    it_device devs[N_THREADS];
    memset(devs, 0, sizeof devs);
    pthread_barrier_init(&start_line, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) pthread_create(&th[i], NULL, parse_testplug, &devs[i]);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < N_THREADS; i++) {
        CHECK(devs[i].backend != NULL);
        CHECK(devs[i].backend == devs[0].backend);
        CHECK(devs[i].index == 1);
    }
    testplug_stats_rec s;
    CHECK(testplug_stats(0, &s));
    CHECK_MSG(s.init_calls == 1, "testplug init ran %llu times", (unsigned long long)s.init_calls);
}

/* ------------------------------------------------------------------ loading testplug */

static void test_testplug_by_name(void) {
    const it_backend *b = NULL;
    CHECK_OK(it_backend_find("testplug", &b));
    if (!b) return;
    CHECK(strcmp(b->name, "testplug") == 0);
    CHECK(b->api_version == IT_BACKEND_API_VERSION);
    CHECK(!b->host_memory);
    CHECK(b->default_autocast_dtype == IT_DTYPE_FP16);
    char path[PATH_MAX + 64];
    test_plugin_path(path, sizeof path, "testplug");
    CHECK_MSG(strcmp(it_backend_origin(b), path) == 0, "origin %s, expected %s", it_backend_origin(b), path);
    int n = -1;
    CHECK_OK(it_device_count(b, &n));
    CHECK(n == 2);

    /* Found again without reloading: same pointer, still one registry entry. */
    int count = it_backend_count();
    const it_backend *again = NULL;
    CHECK_OK(it_backend_find("testplug", &again));
    CHECK(again == b);
    CHECK(it_backend_count() == count);
    int found = 0;
    for (int i = 0; i < count; i++) found += it_backend_at(i) == b;
    CHECK(found == 1);
    CHECK(it_backend_at(0) == it_device_cpu().backend);
    CHECK(it_backend_at(count) == NULL);
    CHECK(it_backend_at(-1) == NULL);

    it_device d;
    CHECK_OK(it_device_parse("testplug:1", &d));
    CHECK(d.backend == b && d.index == 1);
    CHECK_OK(it_device_parse("testplug", &d));
    CHECK(d.backend == b && d.index == 0);
    char buf[64];
    it_device d1 = {b, 1};
    CHECK(strcmp(it_device_str(d1, buf, sizeof buf), "testplug:1") == 0);
    CHECK(strcmp(it_device_str(d, buf, sizeof buf), "testplug:0") == 0);
    CHECK(!it_device_equal(d, d1));
    CHECK(!it_device_equal(d, it_device_cpu()));

    CHECK_ERR(it_device_parse("testplug:2", &d), IT_ERR_INVALID_ARG, "index 2");
    CHECK_HAS("2 devices");

    /* Its kernel table: the required slots and some others native, layernorm etc. not. */
    CHECK(b->kernels->cast && b->kernels->fill && b->kernels->copy_strided);
    CHECK(b->kernels->gemm == it_cpu_kernels()->gemm);
    CHECK(b->kernels->layernorm_fwd == NULL);
    CHECK(b->kernels->softmax_fwd == NULL);

    /* Streams and synchronization go through the registry's per-device state. */
    it_stream *s0 = NULL, *s1 = NULL;
    CHECK_OK(it_device_stream(d, &s0));
    CHECK_OK(it_device_stream(d1, &s1));
    CHECK(s0 && s1 && s0 != s1);
    CHECK_OK(it_device_synchronize(d1));
    it_device d9 = {b, 9};
    CHECK_ERR(it_device_stream(d9, &s0), IT_ERR_INVALID_ARG, "index 9");
}

/* The runtime of the test plugin itself: per-thread current device, events, memory info. */
static void *read_device(void *arg) {
    const it_backend *b = arg;
    int dev = -1;
    b->runtime->get_device(&dev);
    return (void *)(intptr_t)dev;
}

static void test_testplug_runtime(void) {
    const it_backend *b = NULL;
    if (it_backend_find("testplug", &b)) return;
    const it_runtime *rt = b->runtime;
    CHECK_OK(rt->set_device(1));
    pthread_t th;
    void *other = NULL;
    pthread_create(&th, NULL, read_device, (void *)b);
    pthread_join(th, &other);
    CHECK_MSG((intptr_t)other == 0, "another thread sees device %d", (int)(intptr_t)other);
    int cur = -1;
    CHECK_OK(rt->get_device(&cur));
    CHECK(cur == 1);
    CHECK_ERR(rt->set_device(2), IT_ERR_INVALID_ARG, "device 2 out of range");
    CHECK_OK(rt->set_device(0));

    it_stream *ds = NULL, *st = NULL;
    CHECK_OK(rt->default_stream(1, &ds));
    CHECK_OK(rt->stream_create(1, -1, &st));
    it_event *e0 = NULL, *e1 = NULL;
    CHECK_OK(rt->event_create(1, &e0));
    CHECK_OK(rt->event_create(1, &e1));
    float ms = -1;
    CHECK_ERR(rt->event_elapsed_ms(e0, e1, &ms), IT_ERR_INVALID_ARG, "never recorded");
    CHECK_OK(rt->event_record(e0, ds));
    CHECK_OK(rt->stream_wait_event(st, e0));
    CHECK_OK(rt->event_record(e1, st));
    bool done = false;
    CHECK_OK(rt->event_query(e1, &done));
    CHECK(done);
    CHECK_OK(rt->event_synchronize(e1));
    CHECK_OK(rt->event_elapsed_ms(e0, e1, &ms));
    CHECK(ms >= 0.0f);
    CHECK_OK(rt->event_destroy(e0));
    CHECK_OK(rt->event_destroy(e1));
    CHECK_OK(rt->stream_destroy(st));
    CHECK_ERR(rt->stream_destroy(ds), IT_ERR_INVALID_ARG, "default stream");

    size_t fr0 = 0, tot = 0, fr1 = 0;
    CHECK_OK(rt->mem_info(1, &fr0, &tot));
    CHECK(tot > 0 && fr0 <= tot);
    void *p = NULL;
    CHECK_OK(rt->malloc(1, 1000, &p));
    CHECK_OK(rt->mem_info(1, &fr1, &tot));
    CHECK(fr0 - fr1 == 1000);
    /* The checks the plugin makes on the core: a wrong kind or device is refused. */
    char host[16] = {0};
    CHECK_ERR(rt->memcpy(0, p, host, sizeof host, IT_MEMCPY_H2D), IT_ERR_INVALID_ARG, "not inside a block");
    CHECK_ERR(rt->memcpy(1, host, p, sizeof host, IT_MEMCPY_H2D), IT_ERR_INVALID_ARG, "not inside a block");
    CHECK_OK(rt->memcpy(1, p, host, sizeof host, IT_MEMCPY_H2D));
    CHECK_ERR(rt->free(0, p), IT_ERR_INVALID_ARG, "not a live block");
    CHECK_OK(rt->free(1, p));
    CHECK_ERR(rt->free(1, p), IT_ERR_INVALID_ARG, "not a live block");
}

/* ------------------------------------------------------------------ device strings */

static void test_device_parse(void) {
    it_device d = {NULL, -1};
    CHECK_OK(it_device_parse("cpu", &d));
    CHECK(d.backend == it_device_cpu().backend && d.index == 0);
    CHECK(strcmp(d.backend->name, "cpu") == 0);
    CHECK(it_device_equal(d, it_device_cpu()));
    d.index = -1;
    CHECK_OK(it_device_parse("cpu:0", &d));
    CHECK(d.index == 0);
    char buf[32];
    CHECK(strcmp(it_device_str(d, buf, sizeof buf), "cpu") == 0);
    it_device none = {NULL, 0};
    CHECK(strcmp(it_device_str(none, buf, sizeof buf), "(no device)") == 0);

    CHECK_ERR(it_device_parse("cpu:1", &d), IT_ERR_INVALID_ARG, "index 1");
    CHECK_HAS("has 1 device");
    CHECK_ERR(it_device_parse("CPU", &d), IT_ERR_INVALID_ARG, "'CPU'");
    CHECK_HAS("registered: cpu");
    CHECK_ERR(it_device_parse("", &d), IT_ERR_INVALID_ARG, "empty device name");
    CHECK_ERR(it_device_parse(NULL, &d), IT_ERR_INVALID_ARG, "empty device name");
    CHECK_ERR(it_device_parse("cpu:", &d), IT_ERR_INVALID_ARG, "index '' is not a non-negative integer");
    CHECK_ERR(it_device_parse("cpu:x", &d), IT_ERR_INVALID_ARG, "index 'x'");
    CHECK_ERR(it_device_parse("cpu:-1", &d), IT_ERR_INVALID_ARG, "index '-1'");
    CHECK_ERR(it_device_parse("cpu:0x", &d), IT_ERR_INVALID_ARG, "index '0x'");
    CHECK_ERR(it_device_parse("cpu:99999999999999999999", &d), IT_ERR_INVALID_ARG, "is not a non-negative integer");
    CHECK_ERR(it_device_parse(":0", &d), IT_ERR_INVALID_ARG, "expected NAME or NAME:INDEX");
    CHECK(d.backend == it_device_cpu().backend && d.index == 0); /* untouched by failures */

    CHECK_ERR(it_device_parse("nosuch", &d), IT_ERR_NOT_FOUND, "unknown backend 'nosuch' (registered");
    CHECK_HAS("registered: cpu");
    CHECK_HAS("discoverable plugins: ");
    CHECK_HAS("testplug");
    CHECK_HAS("badversion");
    char path[PATH_MAX + 64];
    plugin_path(path, sizeof path, "nosuch");
    CHECK_HAS(path);
    CHECK_HAS("no such file");
    /* a name one or two edits from a known one (or a prefix of one) is suggested */
    CHECK_ERR(it_device_parse("cpx", &d), IT_ERR_NOT_FOUND, "unknown backend 'cpx' (did you mean 'cpu'?)");
    CHECK_ERR(it_device_parse("cp", &d), IT_ERR_NOT_FOUND, "(did you mean 'cpu'?)");
}

/* ------------------------------------------------------------------ refused plugins */

static void test_refused_plugins(void) {
    const it_backend *b = NULL;
    char path[PATH_MAX + 64], want[128];
    int before = it_backend_count();

    CHECK(it_backend_find("badversion", &b) != IT_OK);
    snprintf(want, sizeof want, "api_version %d", IT_BACKEND_API_VERSION + 1);
    CHECK_HAS(want);
    snprintf(want, sizeof want, "IT_BACKEND_API_VERSION %d", IT_BACKEND_API_VERSION);
    CHECK_HAS(want);
    test_plugin_path(path, sizeof path, "badversion");
    CHECK_HAS(path);
    /* The same answer the second time (the refused library was closed, nothing cached). */
    CHECK(it_backend_find("badversion", &b) != IT_OK);
    snprintf(want, sizeof want, "api_version %d", IT_BACKEND_API_VERSION + 1);
    CHECK_HAS(want);

    CHECK(it_backend_find("noentry", &b) != IT_OK);
    CHECK_HAS(IT_BACKEND_ENTRY_SYMBOL);
    test_plugin_path(path, sizeof path, "noentry");
    CHECK_HAS(path);

    CHECK(it_backend_find("missingreq", &b) != IT_OK);
    CHECK_HAS("required kernels missing: cast, copy_strided");
    CHECK_LACKS("fill");
    CHECK_LACKS("gemm");

    it_device d;
    CHECK(it_device_parse("wrongname:0", &d) != IT_OK);
    CHECK_HAS("registers the name 'other', not 'wrongname'");
    CHECK_ERR(it_backend_find("other", &b), IT_ERR_NOT_FOUND, "unknown backend 'other'");

    CHECK(it_backend_count() == before); /* nothing half-registered */
    for (int i = 0; i < it_backend_count(); i++) {
        const char *n = it_backend_at(i)->name;
        CHECK_MSG(strcmp(n, "badversion") && strcmp(n, "noentry") && strcmp(n, "missingreq") && strcmp(n, "other"),
                  "refused backend %s is registered", n);
    }
}

/* ------------------------------------------------------------------ a table of fewer slots */

#define SLOT_BYTES sizeof(void (*)(void))
#define SLOT_OF(name) (offsetof(it_kernels, name) / SLOT_BYTES)

/* Each slot's name is the member's at that index, and the fused ones are exactly the
 * attention pair, adam_step_round and the half-logits cross entropy pair. */
static void test_slot_names(void) {
#define NAME_AT_SLOT(name)                                                                                             \
    CHECK_MSG(it_kernel_slot_name(SLOT_OF(name)) && strcmp(it_kernel_slot_name(SLOT_OF(name)), #name) == 0,            \
              "slot %zu is named %s, expected " #name, SLOT_OF(name), it_kernel_slot_name(SLOT_OF(name)));
    IT_KERNEL_SLOTS(NAME_AT_SLOT)
#undef NAME_AT_SLOT
    CHECK(IT_KERNEL_SLOT_COUNT >= 23); /* API version 6's, and any appended since */
    CHECK(strcmp(it_kernel_slot_name(0), "cast") == 0);
    CHECK(it_kernel_slot_name(IT_KERNEL_SLOT_COUNT) == NULL);
    int fused = 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT + 2; i++) fused += it_kernel_slot_fused(i);
    CHECK(fused == 9);
    CHECK(it_kernel_slot_fused(SLOT_OF(attention_fwd)) && it_kernel_slot_fused(SLOT_OF(attention_bwd)));
    CHECK(it_kernel_slot_fused(SLOT_OF(adam_step_round)));
    CHECK(it_kernel_slot_fused(SLOT_OF(cross_entropy_low_fwd)) && it_kernel_slot_fused(SLOT_OF(cross_entropy_low_bwd)));
    CHECK(it_kernel_slot_fused(SLOT_OF(swiglu_low_fwd)) && it_kernel_slot_fused(SLOT_OF(swiglu_low_bwd)));
    CHECK(it_kernel_slot_fused(SLOT_OF(flash_attention_fwd)) && it_kernel_slot_fused(SLOT_OF(flash_attention_bwd)));
    CHECK(!it_kernel_slot_fused(SLOT_OF(topk)));
}

/* tests/plugin/oldtable.c: built as if before topk and the attention pair were appended. */
static void test_old_table(void) {
    const it_backend *b = NULL;
    CHECK_OK(it_backend_find("oldtable", &b));
    if (!b) return;
    CHECK(b->kernels_size == SLOT_OF(topk) * SLOT_BYTES);
    const it_kernels *k = it_backend_kernels(b), *cpu = it_cpu_kernels();
    CHECK(k != NULL && k != b->kernels); /* the registry's full-size copy */
    if (!k) return;
    CHECK(k->cast == cpu->cast && k->gemm == cpu->gemm);
    CHECK(k->rope == cpu->rope); /* the last slot it has is read */
    CHECK(k->layernorm_fwd == NULL);
    CHECK(k->topk == NULL && k->attention_fwd == NULL && k->attention_bwd == NULL);
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    CHECK_OK(it_backend_kernel_stats(b, st));
    int native = 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) native += st[i].native;
    CHECK_MSG(native == 5, "%d native slots, expected 5 (cast fill copy_strided gemm rope)", native);
    CHECK(st[SLOT_OF(rope)].native && !st[SLOT_OF(topk)].native && !st[SLOT_OF(attention_fwd)].native);

    /* topk, past its table, runs on the CPU fallback and gives the CPU's answer. */
    it_device d;
    CHECK_OK(it_device_parse("oldtable", &d));
    it_backend_stats_reset(b);
    const float x[2][4] = {{1, 5, 3, 5}, {-2, 0, 7, 1}};
    it_tensor *t = it_tensor_from_host(d, IT_DTYPE_FP32, 2, (int64_t[]){2, 4}, x, sizeof x);
    it_tensor *idx = NULL, *vals = t ? it_topk(t, 2, &idx) : NULL;
    CHECK(vals != NULL && idx != NULL);
    float v[4] = {0};
    int32_t ix[4] = {0};
    if (vals && idx) {
        CHECK_OK(it_tensor_copy_to_host(vals, v, sizeof v));
        CHECK_OK(it_tensor_copy_to_host(idx, ix, sizeof ix));
    }
    CHECK(v[0] == 5 && v[1] == 5 && v[2] == 7 && v[3] == 1);
    CHECK(ix[0] == 1 && ix[1] == 3 && ix[2] == 2 && ix[3] == 3);
    CHECK_OK(it_backend_kernel_stats(b, st));
    CHECK(st[SLOT_OF(topk)].calls == 1 && st[SLOT_OF(topk)].fallback_calls == 1);
    /* x in (32 bytes), the values and indices out (16 + 16) */
    CHECK_MSG(st[SLOT_OF(topk)].bytes_moved == 64, "topk fallback moved %llu bytes",
              (unsigned long long)st[SLOT_OF(topk)].bytes_moved);
    it_tensor_release(vals);
    it_tensor_release(idx);
    it_tensor_release(t);
}

static void test_discover(void) {
    char names[64][40];
    int n = -1;
    CHECK_OK(it_backend_discover(names, 64, &n));
    const char *want[] = {"testplug", "badversion", "noentry", "missingreq", "wrongname", "oldtable"};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int hits = 0;
        for (int i = 0; i < n; i++) hits += strcmp(names[i], want[w]) == 0;
        CHECK_MSG(hits == 1, "plugin %s discovered %d times", want[w], hits);
    }
    int two = -1;
    CHECK_OK(it_backend_discover(names, 2, &two));
    CHECK(two == 2); /* capped at max */
}

/* ------------------------------------------------------------------ it_backend_register */

static const it_backend *cpu_backend(void) { return it_device_cpu().backend; }

static it_backend named(const char *name) {
    it_backend b = *cpu_backend();
    b.name = name;
    return b;
}

static int lazy_init_calls, fail_init_calls;
static it_status lazy_init(void) {
    lazy_init_calls++;
    return IT_OK;
}
static it_status fail_init(void) {
    fail_init_calls++;
    return it_error(IT_ERR_BACKEND, "no driver here (fail_init)");
}
static it_status thousand_devices(int *n) {
    *n = 1000;
    return IT_OK;
}

static it_runtime lazy_rt, fail_rt, many_rt, norun_rt;
static it_kernels no_kernels;
static it_backend inproc, lazy_b, fail_b, many_b, long_b;

static void test_register(void) {
    int before = it_backend_count();
    it_backend b;
    CHECK_ERR(it_backend_register(NULL), IT_ERR_INVALID_ARG, "NULL backend");
    b = named("");
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "backend name '' is invalid");
    b = named("Bad");
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "backend name 'Bad' is invalid");
    b = named("a-b");
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "backend name 'a-b' is invalid");
    b = named("abcdefghijklmnopqrstuvwxyz0123456"); /* 33 characters */
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "is invalid");
    CHECK_HAS("1-32 characters");
    b = named(NULL);
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "(null)");
    b = named("cpu");
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "'cpu' is already registered");
    CHECK_HAS("built in");
    b = named("testplug");
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "libit_backend_testplug.so");

    b = named("vers");
    b.api_version = 99;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "api_version 99");
    b = named("autocast");
    b.default_autocast_dtype = IT_DTYPE_FP32;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "default_autocast_dtype");
    b = named("nort");
    b.runtime = NULL;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "no runtime table");
    norun_rt = *cpu_backend()->runtime;
    norun_rt.malloc = NULL;
    norun_rt.memcpy = NULL;
    b = named("holes");
    b.runtime = &norun_rt;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "required runtime functions missing: malloc, memcpy");
    b = named("nokern");
    b.kernels = NULL;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "no kernel table");
    b = named("nokern");
    b.kernels = &no_kernels;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "required kernels missing: cast, fill, copy_strided");
    CHECK(it_backend_count() == before);

    /* A valid in-process backend under a new name. */
    inproc = named("inproc");
    CHECK_OK(it_backend_register(&inproc));
    CHECK(it_backend_count() == before + 1);
    CHECK(it_backend_at(before) == &inproc);
    CHECK(strcmp(it_backend_origin(&inproc), "it_backend_register") == 0);
    CHECK(strcmp(it_backend_origin(cpu_backend()), "built in") == 0);
    b = named("unregistered_one");
    CHECK(strcmp(it_backend_origin(&b), "unregistered") == 0);
    const it_backend *found = NULL;
    CHECK_OK(it_backend_find("inproc", &found));
    CHECK(found == &inproc);
    it_device d;
    CHECK_OK(it_device_parse("inproc:0", &d));
    CHECK(d.backend == &inproc && d.index == 0);
    CHECK(!it_device_equal(d, it_device_cpu()));
    char buf[32];
    CHECK(strcmp(it_device_str(d, buf, sizeof buf), "inproc:0") == 0);
    CHECK_ERR(it_backend_register(&inproc), IT_ERR_INVALID_ARG, "'inproc' is already registered");
    CHECK_HAS("it_backend_register");

    /* Its devices get their own allocator, created on first use, which reads
     * IT_MAX_MEMORY_MB then; the cpu's allocator is not affected. */
    setenv("IT_MAX_MEMORY_MB", "1", 1);
    int64_t two_mib[1] = {1 << 19}; /* fp32: 2 MiB */
    CHECK(it_tensor_new(d, IT_DTYPE_FP32, 1, two_mib) == NULL);
    CHECK(it_last_status() == IT_ERR_OOM);
    CHECK_HAS("out of memory on inproc:0: requested 2097152 bytes");
    CHECK_HAS("the limit is 1 MiB");
    unsetenv("IT_MAX_MEMORY_MB");
    it_tensor *small = it_tensor_full(d, IT_DTYPE_I32, 1, two_mib, it_scalar_i64(3));
    CHECK(small == NULL); /* still 2 MiB: the limit was read once, when the allocator was made */
    int64_t quarter[1] = {1 << 16};
    small = it_tensor_full(d, IT_DTYPE_I32, 1, quarter, it_scalar_i64(3));
    double x = 0;
    int64_t last[1] = {(1 << 16) - 1};
    CHECK(small && it_tensor_item(small, last, &x) == IT_OK && x == 3);
    it_mem_stats ms;
    CHECK_OK(it_mem_stats_get(d, &ms));
    CHECK(ms.used == (size_t)1 << 18);
    it_tensor *big_cpu = it_tensor_new(it_device_cpu(), IT_DTYPE_FP32, 1, two_mib);
    CHECK(big_cpu != NULL);
    it_tensor_release(big_cpu);
    it_tensor_release(small);

    long_b = named("abcdefghijklmnopqrstuvwxyz012345"); /* 32 characters: the longest valid */
    CHECK_OK(it_backend_register(&long_b));
    CHECK_OK(it_backend_find("abcdefghijklmnopqrstuvwxyz012345", &found));
    CHECK(found == &long_b);
}

/* kernels_size: what each value is taken to mean, and which are refused. */
static bool extra_slot_called;
static void extra_slot(void) { extra_slot_called = true; }
static struct {
    it_kernels k;
    void (*newer[2])(void); /* slots of a header newer than this core's */
} newer_table;
static it_kernels zero_size_kernels;
static it_backend zero_b, five_b, newer_b;

static void test_kernels_size(void) {
    int before = it_backend_count();
    const it_kernels *cpu = it_cpu_kernels();
    it_backend b = named("ksize");
    b.kernels_size = 2 * SLOT_BYTES; /* cast and fill only */
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "kernels_size 16 is not a table");
    CHECK_HAS("at least copy_strided");
    b.kernels_size = sizeof(it_kernels) + 4;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "whole slots");
    char want[64];
    snprintf(want, sizeof want, "sizeof(it_kernels), %zu", sizeof(it_kernels));
    CHECK_HAS(want);
    CHECK(it_backend_count() == before);

    /* 0: the 23 slots of API version 6, all of this core's table. */
    zero_size_kernels = *cpu;
    zero_b = named("ksize_zero");
    zero_b.kernels = &zero_size_kernels;
    zero_b.kernels_size = 0;
    CHECK_OK(it_backend_register(&zero_b));
    const it_kernels *k = it_backend_kernels(&zero_b);
    CHECK(k && k->cast == cpu->cast && k->topk == cpu->topk && k->attention_bwd == cpu->attention_bwd);

    /* api_version 5 has no kernels_size: whatever lies there is not read. */
    five_b = named("apifive");
    five_b.api_version = 5;
    five_b.kernels_size = 3;
    CHECK_OK(it_backend_register(&five_b));
    k = it_backend_kernels(&five_b);
    CHECK(k && k->attention_bwd == cpu->attention_bwd);
    b = named("apifour");
    b.api_version = 4;
    CHECK_ERR(it_backend_register(&b), IT_ERR_INVALID_ARG, "api_version 4");
    CHECK_HAS("also loads versions 5 to 7");

    /* Larger than the core's: accepted, the tail never read into the table nor called. */
    newer_table.k = *cpu;
    newer_table.k.layernorm_fwd = NULL;
    newer_table.newer[0] = newer_table.newer[1] = extra_slot;
    newer_b = named("newer");
    newer_b.kernels = &newer_table.k;
    newer_b.kernels_size = sizeof newer_table;
    CHECK_OK(it_backend_register(&newer_b));
    k = it_backend_kernels(&newer_b);
    CHECK(k && k != &newer_table.k && k->attention_bwd == cpu->attention_bwd && k->layernorm_fwd == NULL);
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    CHECK_OK(it_backend_kernel_stats(&newer_b, st));
    int native = 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) native += st[i].native;
    CHECK(native == (int)IT_KERNEL_SLOT_COUNT - 1 && !st[SLOT_OF(layernorm_fwd)].native);
    it_device d;
    CHECK_OK(it_device_parse("newer", &d));
    it_tensor *t = it_tensor_full(d, IT_DTYPE_FP32, 1, (int64_t[]){3}, it_scalar_f64(2.5));
    double x = 0;
    CHECK(t && it_tensor_item(t, (int64_t[]){2}, &x) == IT_OK && x == 2.5);
    it_tensor_release(t);
    CHECK(!extra_slot_called);
    CHECK(it_backend_kernels(&b) == NULL); /* not registered */
    CHECK_HAS("not registered");
    CHECK(it_backend_count() == before + 3);
}

/* it_ccl's group_start / group_end (API version 7): both or neither; a version 6 table, which
 * ends before them, is never read there (allocated to its exact size, so ASan sees a read). */
static it_status noop_group(void) { return IT_OK; }
static it_backend six_b, seven_b;
static void test_ccl_groups(void) {
    const it_backend *cpu_b = cpu_backend();
    CHECK(cpu_b->ccl && !it_backend_ccl_groups(cpu_b)); /* the CPU device stages through MPI itself */
    CHECK(!it_backend_ccl_groups(NULL));
    size_t six = offsetof(it_ccl, group_start);
    it_ccl *short_table = malloc(six);
    CHECK(short_table != NULL);
    if (!short_table) return;
    memcpy(short_table, cpu_b->ccl, six);
    six_b = named("cclsix");
    six_b.api_version = 6;
    six_b.ccl = short_table;
    CHECK_OK(it_backend_register(&six_b));
    CHECK(!it_backend_ccl_groups(&six_b));

    static it_ccl full;
    full = *cpu_b->ccl;
    full.group_start = noop_group;
    seven_b = named("cclhalf");
    seven_b.ccl = &full;
    CHECK_ERR(it_backend_register(&seven_b), IT_ERR_INVALID_ARG, "group_start and group_end go together");
    full.group_end = noop_group;
    seven_b.name = "cclgroups";
    CHECK_OK(it_backend_register(&seven_b));
    CHECK(it_backend_ccl_groups(&seven_b));
    full.send = NULL; /* groups without point to point are no use */
    CHECK(!it_backend_ccl_groups(&seven_b));
    full.send = cpu_b->ccl->send;
    /* the registry keeps the pointer: the table stays allocated for the process */
}

/* Init runs once, lazily (not at registration or lookup), and a failure sticks. */
static void test_lazy_init(void) {
    lazy_rt = *cpu_backend()->runtime;
    lazy_rt.init = lazy_init;
    lazy_b = named("lazy");
    lazy_b.runtime = &lazy_rt;
    CHECK_OK(it_backend_register(&lazy_b));
    const it_backend *found = NULL;
    CHECK_OK(it_backend_find("lazy", &found));
    CHECK(lazy_init_calls == 0);
    int n = 0;
    CHECK_OK(it_device_count(&lazy_b, &n));
    CHECK(n == 1);
    CHECK_OK(it_device_count(&lazy_b, &n));
    it_device d;
    CHECK_OK(it_device_parse("lazy", &d));
    CHECK(lazy_init_calls == 1);

    fail_rt = *cpu_backend()->runtime;
    fail_rt.init = fail_init;
    fail_b = named("failinit");
    fail_b.runtime = &fail_rt;
    CHECK_OK(it_backend_register(&fail_b));
    CHECK(fail_init_calls == 0);
    CHECK_ERR(it_device_parse("failinit", &d), IT_ERR_BACKEND, "backend 'failinit' failed to initialize");
    CHECK_HAS("no driver here (fail_init)");
    it_error_clear();
    CHECK_ERR(it_device_count(&fail_b, &n), IT_ERR_BACKEND, "no driver here (fail_init)");
    it_device fd = {&fail_b, 0};
    it_mem_stats ms;
    CHECK_ERR(it_mem_stats_get(fd, &ms), IT_ERR_BACKEND, "failed to initialize");
    int64_t shape[1] = {4};
    CHECK(it_tensor_new(fd, IT_DTYPE_FP32, 1, shape) == NULL);
    CHECK_HAS("failed to initialize");
    CHECK(fail_init_calls == 1);

    many_rt = *cpu_backend()->runtime;
    many_rt.device_count = thousand_devices;
    many_b = named("toomany");
    many_b.runtime = &many_rt;
    CHECK_OK(it_backend_register(&many_b));
    CHECK_ERR(it_device_parse("toomany:3", &d), IT_ERR_BACKEND, "reports 1000 devices");

    it_backend stranger = named("stranger");
    CHECK_ERR(it_device_count(&stranger, &n), IT_ERR_NOT_FOUND, "not registered");
}

/* ------------------------------------------------------------------ IT_BACKEND_PATH */

static void test_backend_path(void) {
    char tmpl[] = "/tmp/it_registry_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return;
    /* A plugin file under another name, reachable only through IT_BACKEND_PATH. */
    char link[PATH_MAX + 64], target[PATH_MAX + 64];
    snprintf(link, sizeof link, "%s/libit_backend_aliasplug.so", dir);
    test_plugin_path(target, sizeof target, "testplug");
    CHECK(symlink(target, link) == 0);
    char env[2 * PATH_MAX];
    snprintf(env, sizeof env, "/nonexistent/it_dir::%s", dir);
    setenv("IT_BACKEND_PATH", env, 1);

    char names[64][40];
    int n = 0;
    CHECK_OK(it_backend_discover(names, 64, &n));
    int hits = 0;
    for (int i = 0; i < n; i++) hits += strcmp(names[i], "aliasplug") == 0;
    CHECK(hits == 1);

    const it_backend *b = NULL;
    CHECK(it_backend_find("aliasplug", &b) != IT_OK);
    CHECK_HAS("registers the name 'testplug', not 'aliasplug'"); /* it was found and opened */
    CHECK_HAS(link);
    CHECK_HAS("/nonexistent/it_dir/libit_backend_aliasplug.so: no such file");
    char beside[PATH_MAX + 64];
    plugin_path(beside, sizeof beside, "aliasplug");
    CHECK_HAS(beside); /* the executable's directory is searched first */
    const char *e = it_last_error(), *p1 = strstr(e, beside), *p2 = strstr(e, "/nonexistent/it_dir/"),
               *p3 = strstr(e, link);
    CHECK(p1 && p2 && p3 && p1 < p2 && p2 < p3);

    CHECK_ERR(it_backend_find("nosuch2", &b), IT_ERR_NOT_FOUND, "searched:");
    CHECK_HAS("/nonexistent/it_dir/libit_backend_nosuch2.so: no such file");
    CHECK_HAS("aliasplug"); /* among the discoverable plugins */

    /* testplug itself is unaffected by the failed alias (same file, still loaded). */
    CHECK_OK(it_backend_find("testplug", &b));

    unsetenv("IT_BACKEND_PATH");
    CHECK(it_backend_find("nosuch3", &b) != IT_OK);
    CHECK_LACKS("/nonexistent/it_dir");
    unlink(link);
    rmdir(dir);
}

int main(void) {
    if (!realpath(IT_BINARY_DIR, bindir)) snprintf(bindir, sizeof bindir, "%s", IT_BINARY_DIR);
    test_concurrent_first_use();
    test_testplug_by_name();
    test_testplug_runtime();
    test_device_parse();
    test_refused_plugins();
    test_slot_names();
    test_old_table();
    test_discover();
    test_register();
    test_kernels_size();
    test_ccl_groups();
    test_lazy_init();
    test_backend_path();
    return it_test_report("test_registry");
}
