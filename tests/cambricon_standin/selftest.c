/* TEST DOUBLE self-test: the CPU stand-in's libcnrt.so and libcncl.so checked directly against
 * what cnrt.h and cncl.h document (and what the stand-in chose where they leave it open).
 *
 * CNRT runs in this process. CNCL runs between two ranks forked at the start, before this
 * process has any queue (a forked child has none of its parent's worker threads), and between
 * two communicators of this process. The environment is set here, so the expectations hold
 * whatever the caller's: 2 devices, 64 MiB each, a 3 s timeout here and 120 s in the ranks. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "standin_internal.h"

static int checks, failures;
static const char *who = "selftest";

#define CHECK(cond) check((cond), __LINE__, #cond)
#define CHECK_RET(expr, want) check_ret((expr), (want), __LINE__, #expr)
#define CHECK_CNCL(expr, want) check_cncl((expr), (want), __LINE__, #expr)

static bool check(bool ok, int line, const char *what) {
    checks++;
    if (ok) return true;
    failures++;
    fprintf(stderr, "%s: selftest.c:%d: CHECK failed: %s\n", who, line, what);
    return false;
}

static void check_ret(cnrtRet_t got, cnrtRet_t want, int line, const char *what) {
    if (!check(got == want, line, what))
        fprintf(stderr, "    returned %s, expected %s\n", cnrtGetErrorName(got), cnrtGetErrorName(want));
}

static void check_cncl(cnclResult_t got, cnclResult_t want, int line, const char *what) {
    if (!check(got == want, line, what)) fprintf(stderr, "    returned %#x, expected %#x\n", got, want);
}

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL); }

/* ---------------------------------------------------------------- queue items */

/* Holds its queue until opened. */
static bool gate_run(void *arg) {
    while (!atomic_load((atomic_bool *)arg)) sleep_ms(1);
    return true;
}

static void gate(cnrtQueue_t q, atomic_bool *open) { CHECK_RET(standin_enqueue(q, gate_run, open, NULL), cnrtSuccess); }

struct record {
    int *log;
    int *n;
    int value;
};

static bool record_run(void *arg) {
    struct record *r = arg;
    r->log[(*r->n)++] = r->value;
    return true;
}

static void record(cnrtQueue_t q, int *log, int *n, int value) {
    struct record *r = malloc(sizeof *r);
    *r = (struct record){log, n, value};
    CHECK_RET(standin_enqueue(q, record_run, r, free), cnrtSuccess);
}

static bool fail_run(void *arg) {
    (void)arg;
    return false;
}

/* Reads a byte of device memory after opening it; *arg: {pointer, result}. */
struct peek {
    const unsigned char *p;
    int value;
};

static bool peek_run(void *arg) {
    struct peek *k = arg;
    if (!standin_open(k->p, 1)) return false;
    k->value = *k->p;
    return true;
}

static bool open_outside_item(void) {
    void *d = NULL;
    cnrtMalloc(&d, 16);
    fprintf(stderr, "(expected below: standin_open outside a queue item)\n");
    bool r = standin_open(d, 16);
    cnrtFree(d);
    return r;
}

/* ---------------------------------------------------------------- CNRT */

static void test_identity(void) {
    int major = 0, minor = 0, patch = 0;
    CHECK_RET(cnrtGetLibVersion(&major, &minor, &patch), cnrtSuccess);
    CHECK(major == 6 && minor == 14 && patch == 1);
    CHECK(strstr(it_cambricon_test_double, "test double") != NULL);
    CHECK(strcmp(cnrtGetErrorName(cnrtErrorNoMem), "cnrtErrorNoMem") == 0);
    CHECK(strcmp(cnrtGetErrorName(cnrtErrorQueue), "cnrtErrorQueue") == 0);
    CHECK(strstr(cnrtGetErrorStr(cnrtErrorNoMem), "device memory") != NULL);
    CHECK(strstr(cnrtGetErrorStr(cnrtErrorNoMem), "test double") != NULL);
    CHECK(strstr(cnrtGetErrorStr((cnrtRet_t)424242), "unknown") != NULL);
    CHECK(strcmp(cnrtGetErrorName((cnrtRet_t)424242), "cnrtErrorUnknown") == 0);
}

static void test_devices(void) {
    unsigned count = 0;
    int dev = -1, value = 0;
    CHECK_RET(cnrtGetDeviceCount(&count), cnrtSuccess);
    CHECK(count == 2);
    CHECK_RET(cnrtGetDevice(&dev), cnrtSuccess);
    CHECK(dev == 0);
    CHECK_RET(cnrtSetDevice(2), cnrtErrorDeviceInvalid);
    CHECK_RET(cnrtSetDevice(-1), cnrtErrorDeviceInvalid);
    CHECK_RET(cnrtDeviceGetAttribute(&value, cnrtAttrComputeCapabilityMajor, 0), cnrtSuccess);
    CHECK(value == 5);
    CHECK_RET(cnrtDeviceGetAttribute(&value, cnrtAttrComputeCapabilityMinor, 1), cnrtSuccess);
    CHECK(value == 9);
    CHECK(standin_arch() == 592);
    CHECK_RET(cnrtDeviceGetAttribute(&value, cnrtAttrClusterCount, 0), cnrtSuccess);
    CHECK(value > 0);
    CHECK_RET(cnrtDeviceGetAttribute(&value, cnrtAttrClusterCount, 7), cnrtErrorDeviceInvalid);
    int least = 99, greatest = 99;
    CHECK_RET(cnrtDeviceGetQueuePriorityRange(&least, &greatest), cnrtSuccess);
    CHECK(least == 0 && greatest < least);
}

static void test_last_error(void) {
    cnrtGetLastError();
    CHECK_RET(cnrtPeekAtLastError(), cnrtSuccess);
    CHECK_RET(cnrtSetDevice(9), cnrtErrorDeviceInvalid);
    CHECK_RET(cnrtGetDeviceCount(NULL), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtPeekAtLastError(), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtPeekAtLastError(), cnrtErrorArgsInvalid);
    unsigned count;
    CHECK_RET(cnrtGetDeviceCount(&count), cnrtSuccess); /* success leaves it */
    CHECK_RET(cnrtGetLastError(), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtGetLastError(), cnrtSuccess);
    CHECK_RET(cnrtPeekAtLastError(), cnrtSuccess);
}

static void test_queue_order(void) {
    enum { N = 5000 };
    int *log = calloc(N, sizeof *log), n = 0;
    cnrtQueue_t q;
    CHECK_RET(cnrtQueueCreate(&q), cnrtSuccess);
    for (int i = 0; i < N; i++) record(q, log, &n, i);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    int in_order = n == N;
    for (int i = 0; in_order && i < N; i++) in_order = log[i] == i;
    CHECK(in_order);
    CHECK_RET(cnrtQueueQuery(q), cnrtSuccess);
    atomic_bool open = false;
    gate(q, &open);
    CHECK_RET(cnrtQueueQuery(q), cnrtErrorBusy); /* cnrt.h's code for "still executing" */
    atomic_store(&open, true);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    CHECK_RET(cnrtQueueQuery(q), cnrtSuccess);
    /* a failed item: reported once by the next sync */
    CHECK_RET(standin_enqueue(q, fail_run, NULL, NULL), cnrtSuccess);
    CHECK_RET(cnrtQueueSync(q), cnrtErrorQueue);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    CHECK_RET(cnrtQueueDestroy(q), cnrtSuccess);
    CHECK_RET(cnrtQueueSync(q), cnrtErrorInvalidResourceHandle);
    CHECK_RET(cnrtQueueDestroy(q), cnrtErrorInvalidResourceHandle);
    CHECK_RET(standin_enqueue((cnrtQueue_t)&n, record_run, NULL, NULL), cnrtErrorInvalidResourceHandle);
    CHECK(standin_queue_device((cnrtQueue_t)&n) == -1);
    CHECK(standin_queue_device(NULL) == 0);
    CHECK(!open_outside_item());
    free(log);
}

static bool open_later_run(void *arg) {
    sleep_ms(30);
    atomic_store((atomic_bool *)arg, true);
    return true;
}

/* cnrtQueueDestroy and cnrtNotifierDestroy return at once; the work queued before still runs,
 * and cnrtSyncDevice waits for it. */
static void test_destroy_busy_queue(void) {
    int log[2], n = 0;
    atomic_bool open = false;
    cnrtQueue_t q, other;
    cnrtNotifier_t done;
    CHECK_RET(cnrtQueueCreateWithPriority(&q, 0, -100), cnrtSuccess); /* clamped */
    CHECK_RET(cnrtQueueCreate(&other), cnrtSuccess);
    CHECK_RET(cnrtNotifierCreate(&done), cnrtSuccess);
    gate(q, &open);
    record(q, log, &n, 7);
    CHECK_RET(cnrtPlaceNotifier(done, q), cnrtSuccess);
    CHECK_RET(cnrtQueueDestroy(q), cnrtSuccess);
    CHECK_RET(cnrtNotifierDestroy(done), cnrtSuccess);
    CHECK_RET(standin_enqueue(other, open_later_run, &open, NULL), cnrtSuccess);
    CHECK_RET(cnrtSyncDevice(), cnrtSuccess);
    CHECK(n == 1 && log[0] == 7);
    CHECK_RET(cnrtQueueDestroy(other), cnrtSuccess);
}

static void test_notifiers(void) {
    cnrtQueue_t q;
    cnrtNotifier_t a, b;
    float ms = -1;
    atomic_bool open = false;
    CHECK_RET(cnrtQueueCreate(&q), cnrtSuccess);
    CHECK_RET(cnrtNotifierCreate(&a), cnrtSuccess);
    CHECK_RET(cnrtNotifierCreate(&b), cnrtSuccess);
    CHECK_RET(cnrtQueryNotifier(a), cnrtSuccess); /* never placed */
    CHECK_RET(cnrtWaitNotifier(a), cnrtSuccess);
    CHECK_RET(cnrtNotifierElapsedTime(a, b, &ms), cnrtErrorCndrvFuncCall);
    CHECK_RET(cnrtPlaceNotifier(a, q), cnrtSuccess);
    gate(q, &open);
    CHECK_RET(cnrtPlaceNotifier(b, q), cnrtSuccess);
    CHECK_RET(cnrtQueryNotifier(b), cnrtErrorBusy);
    CHECK_RET(cnrtNotifierElapsedTime(a, b, &ms), cnrtErrorBusy);
    sleep_ms(30);
    atomic_store(&open, true);
    CHECK_RET(cnrtWaitNotifier(b), cnrtSuccess);
    CHECK_RET(cnrtQueryNotifier(b), cnrtSuccess);
    CHECK_RET(cnrtNotifierElapsedTime(a, b, &ms), cnrtSuccess);
    CHECK(ms >= 20 && ms < 10000);
    CHECK_RET(cnrtNotifierDestroy(a), cnrtSuccess);
    CHECK_RET(cnrtNotifierDestroy(b), cnrtSuccess);
    CHECK_RET(cnrtQueryNotifier(a), cnrtErrorInvalidResourceHandle);
    CHECK_RET(cnrtQueueDestroy(q), cnrtSuccess);
}

/* q2 waits for the placement current when cnrtQueueWaitNotifier was called: after the first
 * gate of q1 opens, not for the later placement behind the second gate. */
static void test_queue_wait_notifier(void) {
    cnrtQueue_t q1, q2;
    cnrtNotifier_t n;
    atomic_bool open1 = false, open2 = false;
    int log[4], count = 0;
    CHECK_RET(cnrtQueueCreate(&q1), cnrtSuccess);
    CHECK_RET(cnrtQueueCreate(&q2), cnrtSuccess);
    CHECK_RET(cnrtNotifierCreate(&n), cnrtSuccess);
    gate(q1, &open1);
    record(q1, log, &count, 1);
    CHECK_RET(cnrtPlaceNotifier(n, q1), cnrtSuccess);
    CHECK_RET(cnrtQueueWaitNotifier(n, q2, 0), cnrtSuccess);
    record(q2, log, &count, 2);
    gate(q1, &open2);
    CHECK_RET(cnrtPlaceNotifier(n, q1), cnrtSuccess);
    sleep_ms(20);
    CHECK_RET(cnrtQueueQuery(q2), cnrtErrorBusy); /* held by the notifier */
    atomic_store(&open1, true);
    int waited = 0;
    while (cnrtQueueQuery(q2) != cnrtSuccess && waited++ < 5000) sleep_ms(1);
    CHECK(count == 2 && log[0] == 1 && log[1] == 2);
    CHECK_RET(cnrtQueueQuery(q1), cnrtErrorBusy); /* the second gate still closed */
    atomic_store(&open2, true);
    CHECK_RET(cnrtQueueSync(q1), cnrtSuccess);
    CHECK_RET(cnrtNotifierDestroy(n), cnrtSuccess);
    CHECK_RET(cnrtQueueDestroy(q1), cnrtSuccess);
    CHECK_RET(cnrtQueueDestroy(q2), cnrtSuccess);
}

/* A child process that reads device memory dies of SIGSEGV. */
static void test_host_cannot_read(void) {
    void *d = NULL;
    CHECK_RET(cnrtMalloc(&d, 4097), cnrtSuccess);
    CHECK(standin_is_device(d, 4097) && standin_is_device((char *)d + 4097, 0) && !standin_is_device(d, 4098));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
        signal(SIGSEGV, SIG_DFL); /* not AddressSanitizer's report-and-exit handler */
        volatile unsigned char c = *(volatile unsigned char *)d;
        _exit(c == 255 ? 3 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    struct peek k = {d, -1};
    CHECK_RET(standin_enqueue(NULL, peek_run, &k, NULL), cnrtSuccess);
    CHECK_RET(cnrtQueueSync(NULL), cnrtSuccess);
    CHECK(k.value == 0); /* fresh device memory reads as zeros from inside an item */
    CHECK_RET(cnrtFree(d), cnrtSuccess);
}

static void test_copies(void) {
    enum { N = 10000 };
    unsigned char *host = malloc(N), *back = malloc(N), *pinned = NULL;
    void *d = NULL, *d2 = NULL;
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7);
    CHECK_RET(cnrtMalloc(&d, N), cnrtSuccess);
    CHECK_RET(cnrtMalloc(&d2, N), cnrtSuccess);
    CHECK_RET(cnrtHostMalloc((void **)&pinned, N), cnrtSuccess);
    CHECK_RET(cnrtMemcpy(d, host, N, cnrtMemcpyHostToDev), cnrtSuccess);
    /* mismatched directions: nothing copied */
    CHECK_RET(cnrtMemcpy(d2, d, N, cnrtMemcpyHostToDev), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtMemcpy(back, host, N, cnrtMemcpyDevToHost), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtMemcpy(d, back, N, cnrtMemcpyDevToDev), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtMemcpy(back, d, N, cnrtMemcpyHostToHost), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtMemcpy(back, d, N + 1, cnrtMemcpyDevToHost), cnrtErrorArgsInvalid); /* past the allocation */
    CHECK_RET(cnrtMemcpy(back, d, N, (cnrtMemTransDir_t)17), cnrtErrorMemcpyDirectionInvalid);
    CHECK_RET(cnrtMemcpyAsync(back, host, N, NULL, cnrtMemcpyHostToHost), cnrtErrorArgsInvalid);
    memset(back, 0, N);
    CHECK_RET(cnrtMemcpy(back, d2, N, cnrtMemcpyDevToHost), cnrtSuccess);
    CHECK(back[1] == 0 && back[N - 1] == 0);
    /* round trips, D2D, the inferred direction, asynchronous copies and memset */
    cnrtQueue_t q;
    CHECK_RET(cnrtQueueCreate(&q), cnrtSuccess);
    CHECK_RET(cnrtMemcpyAsync(d2, d, N, q, cnrtMemcpyDevToDev), cnrtSuccess);
    CHECK_RET(cnrtMemsetAsync((char *)d2 + 100, 0xab, 50, q), cnrtSuccess);
    CHECK_RET(cnrtMemcpyAsync_V2(pinned, d2, N, q, cnrtMemcpyNoDirection), cnrtSuccess);
    CHECK_RET(cnrtMemsetAsync(pinned, 0, 10, q), cnrtErrorArgsInvalid); /* host memory */
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    CHECK(pinned[99] == host[99] && pinned[100] == 0xab && pinned[149] == 0xab && pinned[150] == host[150]);
    CHECK(pinned[N - 1] == host[N - 1]);
    CHECK_RET(cnrtMemcpy(back, d, N, cnrtMemcpyNoDirection), cnrtSuccess);
    CHECK(memcmp(back, host, N) == 0);
    CHECK_RET(cnrtFree(d2), cnrtSuccess);
    CHECK_RET(cnrtFree(d2), cnrtErrorCndrvFuncCall); /* twice */
    CHECK_RET(cnrtFree(host), cnrtErrorCndrvFuncCall);
    CHECK_RET(cnrtFree((char *)d + 1), cnrtErrorCndrvFuncCall);
    CHECK_RET(cnrtFreeHost(host), cnrtErrorCndrvFuncCall);
    CHECK_RET(cnrtFreeHost(pinned), cnrtSuccess);
    CHECK_RET(cnrtFree(d), cnrtSuccess);
    CHECK_RET(cnrtQueueDestroy(q), cnrtSuccess);
    free(host);
    free(back);
}

static void test_memory_limit(void) {
    size_t free0 = 0, total = 0, free1 = 0;
    void *big = NULL, *none = NULL, *async = NULL;
    CHECK_RET(cnrtMalloc(&none, 0), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtMemGetInfo(&free0, &total), cnrtSuccess);
    CHECK(total == (size_t)64 << 20 && free0 == total);
    CHECK_RET(cnrtMalloc(&big, (size_t)65 << 20), cnrtErrorNoMem);
    CHECK_RET(cnrtMalloc(&big, (size_t)40 << 20), cnrtSuccess);
    CHECK_RET(cnrtMemGetInfo(&free1, &total), cnrtSuccess);
    CHECK(free1 == free0 - ((size_t)40 << 20));
    CHECK_RET(cnrtMalloc(&none, (size_t)30 << 20), cnrtErrorNoMem);
    CHECK_RET(cnrtSetDevice(1), cnrtSuccess); /* each device has its own */
    CHECK_RET(cnrtMalloc(&none, (size_t)30 << 20), cnrtSuccess);
    CHECK_RET(cnrtFree(none), cnrtSuccess);
    CHECK_RET(cnrtSetDevice(0), cnrtSuccess);
    CHECK_RET(cnrtMemAllocAsync(&async, 4096, NULL), cnrtSuccess);
    CHECK_RET(cnrtMemsetAsync(async, 1, 4096, NULL), cnrtSuccess);
    CHECK_RET(cnrtMemFreeAsync(async, NULL), cnrtSuccess);
    CHECK_RET(cnrtMemFreeAsync((char *)big + 1, NULL), cnrtErrorArgsInvalid);
    CHECK_RET(cnrtSyncDevice(), cnrtSuccess);
    CHECK(!standin_is_device(async, 1));
    CHECK_RET(cnrtFree(big), cnrtSuccess);
    CHECK_RET(cnrtMemGetInfo(&free1, &total), cnrtSuccess);
    CHECK(free1 == total);
}

/* ---------------------------------------------------------------- CNCL */

static void *to_device(const void *host, size_t bytes) {
    void *d = NULL;
    CHECK_RET(cnrtMalloc(&d, bytes), cnrtSuccess);
    CHECK_RET(cnrtMemcpy(d, (void *)host, bytes, cnrtMemcpyHostToDev), cnrtSuccess);
    return d;
}

static void from_device(void *host, void *d, size_t bytes) {
    CHECK_RET(cnrtMemcpy(host, d, bytes, cnrtMemcpyDevToHost), cnrtSuccess);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Ranks' inputs: rank r's element i. */
static float f32_input(int r, size_t i) { return (float)(i % 1000) * (float)(r + 1) + 0.25f * (float)r; }

static void test_all_reduce_f32(cnclComm_t comm, cnrtQueue_t q, int rank) {
    enum { N = 300000 }; /* more than one exchange slot */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (size_t i = 0; i < N; i++) x[i] = f32_input(rank, i);
    if (rank == 1) x[7] = NAN;
    void *dx = to_device(x, N * sizeof *x), *dy = NULL;
    CHECK_RET(cnrtMalloc(&dy, N * sizeof *y), cnrtSuccess);
    const cnclReduceOp_t ops[] = {cnclSum, cnclMax, cnclMin};
    for (int k = 0; k < 3; k++) {
        CHECK_CNCL(cnclAllReduce(dx, dy, N, cnclFloat32, ops[k], comm, q), CNCL_RET_SUCCESS);
        CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
        from_device(y, dy, N * sizeof *y);
        int bad = 0;
        for (size_t i = 0; i < N; i++) {
            float a = f32_input(0, i), b = i == 7 ? NAN : f32_input(1, i);
            float want = ops[k] == cnclSum ? a + b : ops[k] == cnclMax ? (isnan(b) ? b : fmaxf(a, b)) : fminf(a, b);
            if (i == 7) want = NAN; /* max and min propagate NaN too */
            bad += isnan(want) ? !isnan(y[i]) : fbits(y[i]) != fbits(want);
        }
        CHECK(bad == 0);
    }
    /* in place */
    CHECK_CNCL(cnclAllReduce(dx, dx, N, cnclFloat32, cnclMax, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(x, dx, N * sizeof *x);
    CHECK(x[N - 1] == f32_input(1, N - 1) && isnan(x[7]));
    cnrtFree(dx);
    cnrtFree(dy);
    free(x);
    free(y);
}

static void test_all_reduce_small(cnclComm_t comm, cnrtQueue_t q, int rank) {
    int32_t xi[3] = {INT32_MAX, 5 * (rank + 1), -7 * rank}, yi[3];
    void *di = to_device(xi, sizeof xi);
    CHECK_CNCL(cnclAllReduce(di, di, 3, cnclInt32, cnclSum, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(yi, di, sizeof yi);
    CHECK(yi[0] == -2 && yi[1] == 15 && yi[2] == -7); /* sums wrap */
    /* bf16: 1 + 2^-8 ties to 1; (1 + 2^-7) + 2^-8 ties to 1 + 2^-6; 3 + 0.5; -2 + 2 */
    uint16_t b0[4] = {0x3f80, 0x3f81, 0x4040, 0xc000}, b1[4] = {0x3b80, 0x3b80, 0x3f00, 0x4000}, bs[4];
    void *db = to_device(rank ? b1 : b0, sizeof b0);
    CHECK_CNCL(cnclAllReduce(db, db, 4, cnclBfloat16, cnclSum, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(bs, db, sizeof bs);
    CHECK(bs[0] == 0x3f80 && bs[1] == 0x3f82 && bs[2] == 0x4060 && bs[3] == 0x0000);
    CHECK_RET(cnrtMemcpy(db, rank ? b1 : b0, sizeof b0, cnrtMemcpyHostToDev), cnrtSuccess);
    CHECK_CNCL(cnclAllReduce(db, db, 4, cnclBfloat16, cnclMax, comm, q), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclAllReduce(db, db, 4, cnclBfloat16, cnclMin, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(bs, db, sizeof bs);
    CHECK(bs[0] == 0x3f80 && bs[1] == 0x3f81 && bs[2] == 0x4040 && bs[3] == 0x4000);
    /* fp16: 1 + 2^-11 ties to 1; (1 + 2^-10) + 2^-11 ties to 1 + 2^-9 */
    uint16_t h0[2] = {0x3c00, 0x3c01}, h1[2] = {0x1000, 0x1000}, hs[2];
    void *dh = to_device(rank ? h1 : h0, sizeof h0);
    CHECK_CNCL(cnclAllReduce(dh, dh, 2, cnclFloat16, cnclSum, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(hs, dh, sizeof hs);
    CHECK(hs[0] == 0x3c00 && hs[1] == 0x3c02);
    cnrtFree(di);
    cnrtFree(db);
    cnrtFree(dh);
}

static void test_gather_scatter_broadcast(cnclComm_t comm, cnrtQueue_t q, int rank) {
    enum { N = 300000 };
    int32_t *x = malloc(2 * N * sizeof *x), *y = malloc(2 * N * sizeof *y);
    for (int i = 0; i < 2 * N; i++) x[i] = rank * 1000000 + i;
    void *dx = to_device(x, 2 * N * sizeof *x), *dy = NULL;
    CHECK_RET(cnrtMalloc(&dy, 2 * N * sizeof *y), cnrtSuccess);
    CHECK_CNCL(cnclAllGather(dx, dy, N, cnclInt32, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(y, dy, 2 * N * sizeof *y);
    int bad = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++) bad += y[r * N + i] != r * 1000000 + i;
    CHECK(bad == 0);
    /* rank r gets block r of the sum */
    CHECK_CNCL(cnclReduceScatter(dx, dy, N, cnclInt32, cnclSum, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(y, dy, N * sizeof *y);
    bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != 1000000 + 2 * (rank * N + i);
    CHECK(bad == 0);
    /* in place, from rank 1 */
    CHECK_CNCL(cnclBroadcast(dx, dx, N, cnclInt32, 1, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(y, dx, N * sizeof *y);
    bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != 1000000 + i;
    CHECK(bad == 0);
    cnrtFree(dx);
    cnrtFree(dy);
    free(x);
    free(y);
}

/* Both ranks send to each other in one group, more than a mailbox holds, two messages each
 * way, matched in order. */
static void test_send_recv(cnclComm_t comm, cnrtQueue_t q, int rank) {
    enum { N = 600000 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; i < N; i++) a[i] = (float)(rank * 10 + i), b[i] = (float)(-rank - i);
    void *da = to_device(a, N * sizeof *a), *db = to_device(b, N * sizeof *b), *ra = NULL, *rb = NULL;
    CHECK_RET(cnrtMalloc(&ra, N * sizeof *a), cnrtSuccess);
    CHECK_RET(cnrtMalloc(&rb, N * sizeof *b), cnrtSuccess);
    int peer = 1 - rank;
    CHECK_CNCL(cnclGroupStart(), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclGroupStart(), CNCL_RET_SUCCESS); /* nested */
    CHECK_CNCL(cnclSend(da, N, cnclFloat32, peer, comm, q), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclRecv(ra, N, cnclFloat32, peer, comm, q), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclGroupEnd(), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclSend(db, N, cnclFloat32, peer, comm, q), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclRecv(rb, N, cnclFloat32, peer, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueQuery(q), cnrtSuccess); /* nothing queued before the outer end */
    CHECK_CNCL(cnclGroupEnd(), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(a, ra, N * sizeof *a);
    from_device(b, rb, N * sizeof *b);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += a[i] != (float)(peer * 10 + i) || b[i] != (float)(-peer - i);
    CHECK(bad == 0);
    /* outside a group: 0 -> 1 */
    int8_t s[5] = {1, -2, 3, -4, 5}, got[5] = {0};
    void *ds = to_device(s, sizeof s);
    if (rank == 0) CHECK_CNCL(cnclSend(ds, 5, cnclInt8, 1, comm, q), CNCL_RET_SUCCESS);
    if (rank == 1) CHECK_CNCL(cnclRecv(ds, 5, cnclInt8, 0, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtSuccess);
    from_device(got, ds, sizeof got);
    CHECK(memcmp(got, s, sizeof s) == 0);
    void *frees[] = {da, db, ra, rb, ds};
    for (int i = 0; i < 5; i++) CHECK_RET(cnrtFree(frees[i]), cnrtSuccess);
    free(a);
    free(b);
}

/* Refused at the call, nothing queued. */
static void test_cncl_errors(cnclComm_t comm, cnrtQueue_t q) {
    void *d = NULL;
    float host[4];
    CHECK_RET(cnrtMalloc(&d, 64), cnrtSuccess);
    fprintf(stderr, "(expected below from %s: 11 calls refused)\n", who);
    CHECK_CNCL(cnclAllReduce(d, d, 4, (cnclDataType_t)0x99, cnclSum, comm, q), CNCL_RET_ERR_UNSUPPORTED);
    CHECK_CNCL(cnclAllReduce(d, d, 4, cnclFloat32, (cnclReduceOp_t)9, comm, q), CNCL_RET_ERR_UNSUPPORTED);
    CHECK_CNCL(cnclAllGather(d, d, 4, (cnclDataType_t)0x99, comm, q), CNCL_RET_ERR_ARGUMENTS);
    CHECK_CNCL(cnclAllReduce(host, d, 4, cnclFloat32, cnclSum, comm, q), CNCL_RET_ERR_ARGUMENTS);
    CHECK_CNCL(cnclAllReduce(d, d, 17, cnclFloat32, cnclSum, comm, q), CNCL_RET_ERR_ARGUMENTS);
    CHECK_CNCL(cnclAllReduce(d, d, 4, cnclFloat32, cnclSum, (cnclComm_t)host, q), CNCL_RET_ERR_NOT_INIT);
    CHECK_CNCL(cnclAllReduce(d, d, 4, cnclFloat32, cnclSum, comm, (cnrtQueue_t)host), CNCL_RET_ERR_MLU_RUNTIME);
    CHECK_CNCL(cnclBroadcast(d, d, 4, cnclFloat32, 2, comm, q), CNCL_RET_ERR_ARGUMENTS);
    CHECK_CNCL(cnclSend(d, 4, cnclFloat32, 5, comm, q), CNCL_RET_ERR_ARGUMENTS);
    CHECK_CNCL(cnclRecv(d, 4, (cnclDataType_t)0x99, 0, comm, q), CNCL_RET_ERR_UNSUPPORTED);
    CHECK_CNCL(cnclGroupEnd(), CNCL_RET_ERR_ARGUMENTS);
    CHECK_RET(cnrtQueueQuery(q), cnrtSuccess);
    CHECK_RET(cnrtFree(d), cnrtSuccess);
}

/* The ranks call different collectives: both fail (the communicator is then failed for good). */
static void test_mismatch(cnclCliqueId_t id, cnrtQueue_t q, int rank) {
    int dev = rank, r = rank;
    cnclComm_t comm = NULL;
    void *d = NULL;
    CHECK_CNCL(cnclInitComms(&comm, 1, &dev, &r, 2, id), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtMalloc(&d, 64), cnrtSuccess);
    if (rank == 0) fprintf(stderr, "(expected below: both ranks report that rank 1 / rank 0 is at another call)\n");
    if (rank == 0) CHECK_CNCL(cnclAllReduce(d, d, 4, cnclFloat32, cnclSum, comm, q), CNCL_RET_SUCCESS);
    if (rank == 1) CHECK_CNCL(cnclAllGather(d, d, 4, cnclFloat32, comm, q), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(q), cnrtErrorQueue);
    CHECK_CNCL(cnclFreeComm(comm), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtFree(d), cnrtSuccess);
}

static int rank_main(int rank, cnclCliqueId_t id, cnclCliqueId_t id2) {
    char name[24];
    snprintf(name, sizeof name, "rank %d", rank);
    who = name;
    setenv("IT_CAMBRICON_STANDIN_TIMEOUT_S", "120", 1);
    int dev = rank, r = rank, major = 0, minor = 0, patch = 0;
    cnclComm_t comm = NULL;
    cnrtQueue_t q;
    CHECK_CNCL(cnclGetLibVersion(&major, &minor, &patch), CNCL_RET_SUCCESS);
    CHECK(major == 1 && minor == 25 && patch == 0);
    CHECK_RET(cnrtSetDevice(dev), cnrtSuccess);
    CHECK_RET(cnrtQueueCreate(&q), cnrtSuccess);
    CHECK_CNCL(cnclInitComms(&comm, 1, &dev, &r, 2, id), CNCL_RET_SUCCESS);
    if (comm) {
        test_all_reduce_f32(comm, q, rank);
        test_all_reduce_small(comm, q, rank);
        test_gather_scatter_broadcast(comm, q, rank);
        test_send_recv(comm, q, rank);
        test_cncl_errors(comm, q);
        CHECK_CNCL(cnclFreeComm(comm), CNCL_RET_SUCCESS);
        CHECK_CNCL(cnclFreeComm(comm), CNCL_RET_ERR_ARGUMENTS);
        test_mismatch(id2, q, rank);
    }
    CHECK_RET(cnrtQueueDestroy(q), cnrtSuccess);
    printf("%s: %d passed, %d failed\n", who, checks - failures, failures);
    return failures;
}

/* Two ranks in this process: one call makes both communicators; their queues run the ranks. */
static void test_ranks_in_one_process(void) {
    cnclComm_t comms[2] = {NULL, NULL};
    cnrtQueue_t q[2];
    void *d[2];
    int devs[2] = {0, 1}, ranks[2] = {0, 1};
    CHECK_CNCL(cnclInitComms(comms, 2, devs, ranks, 2, NULL), CNCL_RET_SUCCESS);
    for (int r = 0; r < 2; r++) {
        int64_t v[3] = {r + 1, -(r + 1), 1LL << (40 + r)};
        CHECK_RET(cnrtSetDevice(r), cnrtSuccess);
        CHECK_RET(cnrtQueueCreate(&q[r]), cnrtSuccess);
        d[r] = to_device(v, sizeof v);
        CHECK_CNCL(cnclAllReduce(d[r], d[r], 3, cnclInt64, cnclProd, comms[r], q[r]), CNCL_RET_SUCCESS);
    }
    for (int r = 0; r < 2; r++) {
        int64_t v[3];
        CHECK_RET(cnrtQueueSync(q[r]), cnrtSuccess);
        from_device(v, d[r], sizeof v);
        CHECK(v[0] == 2 && v[1] == 2 && v[2] == 0); /* 2^40 * 2^41 wraps to 0 */
        CHECK_RET(cnrtFree(d[r]), cnrtSuccess);
        CHECK_RET(cnrtQueueDestroy(q[r]), cnrtSuccess);
        CHECK_CNCL(cnclFreeComm(comms[r]), CNCL_RET_SUCCESS);
    }
    CHECK_RET(cnrtSetDevice(0), cnrtSuccess);
}

/* A rank that never comes: cnclInitComms gives up after the timeout (3 s here). */
static void test_missing_rank(void) {
    struct cnclCliqueId id;
    cnclComm_t comm = NULL;
    int dev = 0, rank = 0;
    CHECK_CNCL(cnclGetCliqueId(&id), CNCL_RET_SUCCESS);
    fprintf(stderr, "(expected below: cnclInitComms on rank 0 of 2 failed, waiting for rank 1)\n");
    CHECK_CNCL(cnclInitComms(&comm, 1, &dev, &rank, 2, &id), CNCL_RET_ERR_INIT);
    id.data[20] ^= 1;
    CHECK_CNCL(cnclInitComms(&comm, 1, &dev, &rank, 2, &id), CNCL_RET_ERR_ARGUMENTS); /* hash mismatch */
}

/* A peer that exits after joining: the collective fails within seconds, not at the timeout. */
static void test_dead_peer(void) {
    struct cnclCliqueId id;
    cnclComm_t comm = NULL;
    int dev = 0, rank = 0;
    CHECK_CNCL(cnclGetCliqueId(&id), CNCL_RET_SUCCESS);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) { /* no queue is used here: the parent's workers are not in this process */
        int peer = 1;
        _exit(cnclInitComms(&comm, 1, &dev, &peer, 2, &id) == CNCL_RET_SUCCESS ? 0 : 1);
    }
    CHECK_CNCL(cnclInitComms(&comm, 1, &dev, &rank, 2, &id), CNCL_RET_SUCCESS);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    void *d = NULL;
    CHECK_RET(cnrtMalloc(&d, 64), cnrtSuccess);
    fprintf(stderr, "(expected below: cnclAllReduce on rank 0 of 2 failed, rank 1 has exited)\n");
    CHECK_CNCL(cnclAllReduce(d, d, 16, cnclFloat32, cnclSum, comm, NULL), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(NULL), cnrtErrorQueue);
    CHECK_CNCL(cnclAllReduce(d, d, 16, cnclFloat32, cnclSum, comm, NULL), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtQueueSync(NULL), cnrtErrorQueue); /* the communicator stays failed */
    CHECK_CNCL(cnclFreeComm(comm), CNCL_RET_SUCCESS);
    CHECK_RET(cnrtFree(d), cnrtSuccess);
}

/* Fork the two ranks (before this process makes any queue), test CNRT meanwhile, then reap. */
int main(void) {
    setenv("IT_CAMBRICON_STANDIN_DEVICES", "2", 1);
    setenv("IT_CAMBRICON_STANDIN_MEM_MB", "64", 1);
    setenv("IT_CAMBRICON_STANDIN_ARCH", "592", 1);
    setenv("IT_CAMBRICON_STANDIN_TIMEOUT_S", "3", 1);
    struct cnclCliqueId id, id2;
    CHECK_CNCL(cnclGetCliqueId(&id), CNCL_RET_SUCCESS);
    CHECK_CNCL(cnclGetCliqueId(&id2), CNCL_RET_SUCCESS);
    CHECK(strcmp(id.data, id2.data) != 0);
    fflush(stdout);
    pid_t ranks[2];
    for (int r = 0; r < 2; r++)
        if ((ranks[r] = fork()) == 0) exit(rank_main(r, &id, &id2) ? 1 : 0);
    test_identity();
    test_devices();
    test_last_error();
    test_queue_order();
    test_destroy_busy_queue();
    test_notifiers();
    test_queue_wait_notifier();
    test_host_cannot_read();
    test_copies();
    test_memory_limit();
    test_ranks_in_one_process();
    test_missing_rank();
    test_dead_peer();
    for (int r = 0; r < 2; r++) {
        int status = 0;
        waitpid(ranks[r], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}
