/* The sim backend (backends/sim, plugin libit_backend_sim.so): a simulated accelerator
 * whose memory the host cannot read, whose streams run on worker threads and whose kernels
 * are asynchronous. Checked here through its runtime and kernel tables and through the
 * core's tensors and ops:
 *  - the backend table (every slot filled), devices, the per-thread current device;
 *  - memory: accounting per device, OOM messages, bad frees, free_async in stream order,
 *    a host read or write of device memory killing the process with SIGSEGV;
 *  - streams: in-order execution, memcpy_async returning before the copy ran, events
 *    (record / query / synchronize / elapsed_ms, cross-stream waits), destroy draining,
 *    two devices independent, enqueue-time checks naming the kernel and argument, sticky
 *    asynchronous errors surfacing at the next synchronize;
 *  - tensors on sim:1 through add / matmul / softmax, bit for bit equal to the cpu's.
 *
 * Streams are held at known points with a "gate": a host function (the sim's exported
 * it_sim_launch_host_func, cudaLaunchHostFunc's analogue) that blocks the stream's worker
 * until the test opens it. So every "not yet done" check is deterministic, never timed. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "infinitrain/ops.h"
#include "infinitrain/tensor.h"
#include "it_test.h"

#define CHECK_HAS(s) CHECK_MSG(strstr(it_last_error(), (s)) != NULL, "message lacks \"%s\": %s", (s), it_last_error())

static it_device cpu, sim0, sim1;
static const it_backend *sim;
static const it_runtime *rt;
static const it_kernels *kt;
static it_status (*launch_host_func)(it_stream *, void (*)(void *), void *);

/* ---------------------------------------------------------------- helpers */

/* A gate holds a stream's worker until opened. */
typedef struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool open;
} gate;

static void gate_init(gate *g) {
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    g->open = false;
}
static void gate_pass(void *p) { /* runs on the worker */
    gate *g = p;
    pthread_mutex_lock(&g->m);
    while (!g->open) pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}
static void gate_open(gate *g) {
    pthread_mutex_lock(&g->m);
    g->open = true;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}
static void gate_destroy(gate *g) {
    pthread_mutex_destroy(&g->m);
    pthread_cond_destroy(&g->c);
}
/* Close `g` on stream s: everything enqueued on s after this waits for gate_open. */
static void gate_put(gate *g, it_stream *s) {
    gate_init(g);
    CHECK_OK(launch_host_func(s, gate_pass, g));
}

/* A contiguous 1-D descriptor. */
static it_tdesc vec(void *p, it_dtype dt, int64_t n) {
    it_tdesc d;
    memset(&d, 0, sizeof d);
    d.data = p;
    d.dtype = dt;
    d.ndim = 1;
    d.shape[0] = n;
    d.strides[0] = 1;
    return d;
}

static bool all_equal(const float *v, size_t n, float want) {
    for (size_t i = 0; i < n; i++)
        if (v[i] != want) return false;
    return true;
}

static size_t free_bytes(int device) {
    size_t fr = 0, tot = 0;
    rt->mem_info(device, &fr, &tot);
    return fr;
}

/* ---------------------------------------------------------------- the backend table */

static void test_table(void) {
    CHECK(strcmp(sim->name, "sim") == 0);
    CHECK(sim->api_version == IT_BACKEND_API_VERSION);
    CHECK(!sim->host_memory);
    CHECK(sim->default_autocast_dtype == IT_DTYPE_BF16);
    CHECK(sim->ccl == NULL);
    CHECK_MSG(strstr(it_backend_origin(sim), "libit_backend_sim.so") != NULL, "origin %s", it_backend_origin(sim));
    /* Every kernel slot and every runtime slot, optional ones included, is provided. */
    void (*slots[IT_KERNEL_SLOT_COUNT])(void);
    memcpy(slots, kt, sizeof slots);
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        CHECK_MSG(slots[i] != NULL, "kernel slot %s is NULL", it_kernel_slot_name(i));
    enum { NRT = sizeof(it_runtime) / sizeof(void (*)(void)) };
    void (*rslots[NRT])(void);
    memcpy(rslots, rt, sizeof rslots);
    for (int i = 0; i < NRT; i++) CHECK_MSG(rslots[i] != NULL, "runtime slot %d is NULL", i);
    int n = 0;
    CHECK_OK(it_device_count(sim, &n));
    CHECK(n == 2);
    int least = 7, greatest = 7;
    CHECK_OK(rt->stream_priority_range(&least, &greatest));
    CHECK(least == 0 && greatest == -1);
    it_device d;
    CHECK_ERR(it_device_parse("sim:2", &d), IT_ERR_INVALID_ARG, "out of range");
    CHECK(launch_host_func != NULL);
}

/* ---------------------------------------------------------------- current device */

static void *other_thread(void *arg) {
    int *seen = arg;
    rt->get_device(&seen[0]); /* a new thread starts on device 0 */
    rt->set_device(0);
    rt->get_device(&seen[1]);
    return NULL;
}

static void test_current_device(void) {
    CHECK_OK(rt->set_device(1));
    int seen[2] = {-1, -1}, mine = -1;
    pthread_t t;
    pthread_create(&t, NULL, other_thread, seen);
    pthread_join(t, NULL);
    CHECK(seen[0] == 0 && seen[1] == 0);
    CHECK_OK(rt->get_device(&mine));
    CHECK(mine == 1); /* the other thread's set_device did not touch ours */
    CHECK_ERR(rt->set_device(2), IT_ERR_INVALID_ARG, "out of range");
    CHECK_ERR(rt->set_device(-1), IT_ERR_INVALID_ARG, "out of range");
    CHECK_OK(rt->get_device(&mine));
    CHECK(mine == 1);
    /* The NULL stream means the current device's default stream (CUDA's stream 0). */
    it_stream *d1 = NULL, *h = NULL;
    CHECK_OK(rt->default_stream(1, &d1));
    CHECK_OK(rt->stream_handle(NULL, (void **)&h));
    CHECK(h == d1);
    CHECK_OK(rt->set_device(0));
}

/* ---------------------------------------------------------------- memory */

static void test_memory(void) {
    size_t fr = 0, tot = 0;
    CHECK_OK(rt->mem_info(0, &fr, &tot));
    CHECK(tot == (size_t)8192 << 20); /* IT_SIM_MEMORY_MB's default */
    size_t free0 = free_bytes(0), free1 = free_bytes(1);

    /* Accounting in pages, per device. */
    void *p = NULL;
    CHECK_OK(rt->malloc(0, ((size_t)1 << 20) + 1, &p));
    CHECK(p != NULL && (uintptr_t)p % 4096 == 0);
    long page = sysconf(_SC_PAGESIZE);
    CHECK(free_bytes(0) == free0 - ((size_t)1 << 20) - (size_t)page);
    CHECK(free_bytes(1) == free1);

    /* OOM: one request past the total, then one past what is left. */
    void *q = NULL;
    CHECK_ERR(rt->malloc(1, tot + 1, &q), IT_ERR_OOM, "sim:1");
    CHECK_HAS("out of device memory");
    CHECK_HAS("8589934593 bytes"); /* the request */
    CHECK_HAS("of 8589934592 bytes free");
    void *big = NULL;
    CHECK_OK(rt->malloc(0, (size_t)6 << 30, &big)); /* address space only: pages are never touched */
    CHECK_ERR(rt->malloc(0, (size_t)3 << 30, &q), IT_ERR_OOM, "sim:0");
    char want[96];
    snprintf(want, sizeof want, "%zu of %zu bytes free", free_bytes(0), tot);
    CHECK_HAS(want);
    CHECK_OK(rt->malloc(1, (size_t)3 << 30, &q)); /* sim:1 has its own memory */
    CHECK_OK(rt->free(1, q));
    CHECK_OK(rt->free(0, big));

    /* Bad frees and copies name the problem. */
    CHECK_ERR(rt->malloc(0, 0, &q), IT_ERR_INVALID_ARG, "0 bytes");
    int host = 0;
    CHECK_ERR(rt->free(0, &host), IT_ERR_INVALID_ARG, "not the start of a live allocation");
    CHECK_ERR(rt->free(1, p), IT_ERR_INVALID_ARG, "another device");
    CHECK_ERR(rt->free(0, (char *)p + 64), IT_ERR_INVALID_ARG, "not the start");
    float buf[4] = {0};
    CHECK_ERR(rt->memcpy(1, p, buf, sizeof buf, IT_MEMCPY_H2D), IT_ERR_INVALID_ARG, "sim:0");
    CHECK_ERR(rt->memcpy(0, buf, p, sizeof buf, IT_MEMCPY_H2D), IT_ERR_INVALID_ARG, "not device memory");
    CHECK_ERR(rt->memcpy(0, p, buf, sizeof buf, IT_MEMCPY_D2H), IT_ERR_INVALID_ARG, "kind D2H says host");
    char *below = (char *)p - 8; /* a "host" range running into the allocation */
    CHECK_ERR(rt->memcpy(0, below, p, 16, IT_MEMCPY_D2H), IT_ERR_INVALID_ARG, "overlaps");
    CHECK_ERR(rt->memcpy(0, (char *)p + ((size_t)1 << 20) - 7, buf, 16, IT_MEMCPY_H2D), IT_ERR_INVALID_ARG,
              "past the end");

    /* Round trip H2D -> D2D -> D2H, and H2H. */
    float in[4] = {1, 2, 3, 4}, out[4] = {0}, hh[4] = {0};
    CHECK_OK(rt->memcpy(0, p, in, sizeof in, IT_MEMCPY_H2D));
    CHECK_OK(rt->memcpy(0, (char *)p + 4096, p, sizeof in, IT_MEMCPY_D2D));
    CHECK_OK(rt->memcpy(0, out, (char *)p + 4096, sizeof out, IT_MEMCPY_D2H));
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK_OK(rt->memcpy(0, hh, in, sizeof in, IT_MEMCPY_H2H));
    CHECK(memcmp(in, hh, sizeof in) == 0);

    CHECK_OK(rt->free(0, p));
    CHECK_ERR(rt->free(0, p), IT_ERR_INVALID_ARG, "double free");
    CHECK(free_bytes(0) == free0);
    CHECK_OK(rt->free(0, NULL));
}

/* A host access of device memory must kill the process with SIGSEGV. The child restores
 * the default SIGSEGV action first (sanitizers install their own handler). */
static int host_touch_status(void *dev_ptr, bool write) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none); /* no core file */
        signal(SIGSEGV, SIG_DFL);
        volatile float *v = dev_ptr;
        if (write)
            *v = 1.0f;
        else
            (void)*v;
        _exit(0); /* the read succeeded: the sim leaked device memory to the host */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void test_host_access_crashes(void) {
    void *p = NULL;
    CHECK_OK(rt->malloc(0, 4096, &p));
    int st = host_touch_status(p, false);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "host read of device memory: status %#x", st);
    st = host_touch_status(p, true);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "host write of device memory: status %#x", st);
    /* Still protected after a kernel and a copy used it (the worker re-protects). */
    it_stream *s = NULL;
    CHECK_OK(rt->default_stream(0, &s));
    it_tdesc d = vec(p, IT_DTYPE_FP32, 1024);
    CHECK_OK(kt->fill(s, &d, it_scalar_f64(2.0)));
    float back[1024];
    CHECK_OK(rt->memcpy(0, back, p, sizeof back, IT_MEMCPY_D2H));
    CHECK(all_equal(back, 1024, 2.0f));
    st = host_touch_status(p, false);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "host read after a kernel: status %#x", st);
    CHECK_OK(rt->free(0, p));

    /* A tensor's data pointer, as the core holds it. */
    it_scope_begin();
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t shape[1] = {8};
    it_tensor *t = it_tensor_from_host(sim1, IT_DTYPE_FP32, 1, shape, v, sizeof v);
    CHECK(t != NULL);
    if (t) {
        st = host_touch_status(it_tensor_desc(t).data, false);
        CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "host read of a sim tensor: status %#x", st);
    }
    it_scope_end();
}

/* ---------------------------------------------------------------- streams */

/* x = 1; 20 times x = 2x + 1: only the enqueue order gives 2^21 - 1 everywhere. */
static void test_stream_order(void) {
    enum { N = 1 << 16, ROUNDS = 20 };
    it_stream *s = NULL;
    CHECK_OK(rt->stream_create(0, -1, &s));
    void *p = NULL;
    CHECK_OK(rt->malloc(0, N * sizeof(float), &p));
    it_tdesc x = vec(p, IT_DTYPE_FP32, N);
    CHECK_OK(kt->fill(s, &x, it_scalar_f64(1.0)));
    for (int r = 0; r < ROUNDS; r++) {
        CHECK_OK(kt->unary(s, IT_UNARY_SCALE, 2.0f, &x, &x));
        CHECK_OK(kt->unary(s, IT_UNARY_ADD_SCALAR, 1.0f, &x, &x));
    }
    float *host = malloc(N * sizeof(float));
    CHECK_OK(rt->memcpy_async(0, host, p, N * sizeof(float), IT_MEMCPY_D2H, s));
    CHECK_OK(rt->stream_synchronize(s));
    CHECK_MSG(all_equal(host, N, (float)((1 << (ROUNDS + 1)) - 1)), "host[0] = %g, host[N-1] = %g", host[0],
              host[N - 1]);

    /* H2D async, a kernel, D2H async: the host buffer is read when the stream gets there. */
    for (int i = 0; i < N; i++) host[i] = (float)i;
    CHECK_OK(rt->memcpy_async(0, p, host, N * sizeof(float), IT_MEMCPY_H2D, s));
    CHECK_OK(kt->unary(s, IT_UNARY_NEG, 0.0f, &x, &x));
    CHECK_OK(rt->stream_synchronize(s)); /* host is the source of the queued H2D until here */
    CHECK_OK(rt->memcpy_async(0, host, p, N * sizeof(float), IT_MEMCPY_D2H, s));
    CHECK_OK(rt->stream_synchronize(s));
    CHECK(host[0] == 0.0f && host[1] == -1.0f && host[N - 1] == -(float)(N - 1));
    free(host);
    CHECK_OK(rt->free(0, p));
    CHECK_OK(rt->stream_destroy(s));
}

/* memcpy_async really returns before the copy ran: stream A waits on an event recorded on
 * stream B behind a closed gate, so A's kernel and copy cannot have run yet. */
static void test_async_copy_and_events(void) {
    enum { N = 4096 };
    it_stream *a = NULL, *b = NULL;
    CHECK_OK(rt->stream_create(0, 0, &a));
    CHECK_OK(rt->stream_create(0, 0, &b));
    it_event *e = NULL, *done = NULL, *never = NULL, *other = NULL;
    CHECK_OK(rt->event_create(0, &e));
    CHECK_OK(rt->event_create(0, &done));
    CHECK_OK(rt->event_create(0, &never));
    CHECK_OK(rt->event_create(1, &other));
    void *p = NULL;
    CHECK_OK(rt->malloc(0, N * sizeof(float), &p));
    float *host = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = -1.0f;

    gate g;
    gate_put(&g, b);
    CHECK_OK(rt->event_record(e, b));
    CHECK_OK(rt->stream_wait_event(a, e));
    it_tdesc x = vec(p, IT_DTYPE_FP32, N);
    CHECK_OK(kt->fill(a, &x, it_scalar_f64(5.0)));
    CHECK_OK(rt->memcpy_async(0, host, p, N * sizeof(float), IT_MEMCPY_D2H, a));
    CHECK_OK(rt->event_record(done, a));

    bool q = true;
    CHECK_OK(rt->event_query(e, &q));
    CHECK(!q);
    q = true;
    CHECK_OK(rt->event_query(done, &q));
    CHECK(!q);
    CHECK(all_equal(host, N, -1.0f)); /* the copy has not run: the worker of A is waiting */
    float ms = -1;
    CHECK_ERR(rt->event_elapsed_ms(e, done, &ms), IT_ERR_INVALID_ARG, "not completed");

    gate_open(&g);
    CHECK_OK(rt->event_synchronize(done));
    CHECK_OK(rt->event_query(done, &q));
    CHECK(q);
    CHECK_OK(rt->event_query(e, &q));
    CHECK(q);
    CHECK(all_equal(host, N, 5.0f));
    CHECK_OK(rt->event_elapsed_ms(e, done, &ms));
    CHECK_MSG(ms >= 0.0f, "elapsed %g ms", ms);

    /* Never recorded: complete for query and synchronize, refused by elapsed_ms; waiting on
     * it is a no-op. */
    CHECK_OK(rt->event_query(never, &q));
    CHECK(q);
    CHECK_OK(rt->event_synchronize(never));
    CHECK_ERR(rt->event_elapsed_ms(never, done, &ms), IT_ERR_INVALID_ARG, "start event was never recorded");
    CHECK_ERR(rt->event_elapsed_ms(done, never, &ms), IT_ERR_INVALID_ARG, "end event was never recorded");
    CHECK_OK(rt->stream_wait_event(a, never));
    CHECK_ERR(rt->event_record(other, a), IT_ERR_INVALID_ARG, "event of sim:1 on a stream of sim:0");

    /* Record twice: the event refers to the latest record. */
    gate g2;
    gate_put(&g2, b);
    CHECK_OK(rt->event_record(e, b));
    CHECK_OK(rt->event_query(e, &q));
    CHECK(!q);
    gate_open(&g2);
    CHECK_OK(rt->event_synchronize(e));
    CHECK_OK(rt->event_query(e, &q));
    CHECK(q);

    /* An event destroyed while its marker is still queued stays valid for the stream. */
    gate g3;
    it_event *tmp = NULL;
    gate_put(&g3, b);
    CHECK_OK(rt->event_create(0, &tmp));
    CHECK_OK(rt->event_record(tmp, b));
    CHECK_OK(rt->stream_wait_event(a, tmp));
    CHECK_OK(rt->event_destroy(tmp));
    gate_open(&g3);
    CHECK_OK(rt->stream_synchronize(a));

    CHECK_OK(rt->stream_synchronize(b));
    gate_destroy(&g);
    gate_destroy(&g2);
    gate_destroy(&g3);
    free(host);
    CHECK_OK(rt->free(0, p));
    CHECK_OK(rt->event_destroy(e));
    CHECK_OK(rt->event_destroy(done));
    CHECK_OK(rt->event_destroy(never));
    CHECK_OK(rt->event_destroy(other));
    CHECK_OK(rt->stream_destroy(a));
    CHECK_OK(rt->stream_destroy(b));
}

/* B copies what A wrote only because it waits on A's event: A is held by a gate, so
 * without the wait B would copy the zeros of fresh memory. A third stream is not held. */
static void test_cross_stream_wait(void) {
    enum { N = 1000 };
    it_stream *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(rt->stream_create(0, 0, &a));
    CHECK_OK(rt->stream_create(0, 0, &b));
    CHECK_OK(rt->stream_create(0, -1, &c));
    it_event *e = NULL, *bdone = NULL;
    CHECK_OK(rt->event_create(0, &e));
    CHECK_OK(rt->event_create(0, &bdone));
    void *p = NULL, *p2 = NULL, *p3 = NULL;
    CHECK_OK(rt->malloc(0, N * sizeof(float), &p));
    CHECK_OK(rt->malloc(0, N * sizeof(float), &p2));
    CHECK_OK(rt->malloc(0, N * sizeof(float), &p3));
    it_tdesc x = vec(p, IT_DTYPE_FP32, N), y = vec(p2, IT_DTYPE_FP32, N), z = vec(p3, IT_DTYPE_FP32, N);

    gate g;
    gate_put(&g, a);
    CHECK_OK(kt->fill(a, &x, it_scalar_f64(3.0)));
    CHECK_OK(rt->event_record(e, a));
    CHECK_OK(rt->stream_wait_event(b, e));
    CHECK_OK(kt->copy_strided(b, &x, &y));
    CHECK_OK(rt->event_record(bdone, b));

    /* c is independent of the held stream. */
    float host[N];
    CHECK_OK(kt->fill(c, &z, it_scalar_f64(9.0)));
    CHECK_OK(rt->memcpy_async(0, host, p3, sizeof host, IT_MEMCPY_D2H, c));
    CHECK_OK(rt->stream_synchronize(c));
    CHECK(all_equal(host, N, 9.0f));
    bool q = true;
    CHECK_OK(rt->event_query(bdone, &q));
    CHECK(!q); /* b is still waiting for a */

    gate_open(&g);
    CHECK_OK(rt->stream_synchronize(b));
    CHECK_OK(rt->memcpy(0, host, p2, sizeof host, IT_MEMCPY_D2H));
    CHECK(all_equal(host, N, 3.0f));
    CHECK_OK(rt->synchronize_device(0));

    gate_destroy(&g);
    CHECK_OK(rt->free(0, p));
    CHECK_OK(rt->free(0, p2));
    CHECK_OK(rt->free(0, p3));
    CHECK_OK(rt->event_destroy(e));
    CHECK_OK(rt->event_destroy(bdone));
    CHECK_OK(rt->stream_destroy(a));
    CHECK_OK(rt->stream_destroy(b));
    CHECK_OK(rt->stream_destroy(c));
    CHECK_OK(rt->stream_destroy(NULL));
    it_stream *d = NULL;
    CHECK_OK(rt->default_stream(0, &d));
    CHECK_ERR(rt->stream_destroy(d), IT_ERR_INVALID_ARG, "default stream");
}

static void *open_later(void *arg) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    gate_open(arg);
    return NULL;
}

/* stream_destroy drains: the work queued behind a gate is done when it returns. */
static void test_destroy_drains(void) {
    enum { N = 1 << 14 };
    it_stream *s = NULL;
    CHECK_OK(rt->stream_create(1, 0, &s));
    void *p = NULL;
    CHECK_OK(rt->malloc(1, N * sizeof(float), &p));
    float *host = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = -1.0f;
    gate g;
    gate_put(&g, s);
    it_tdesc x = vec(p, IT_DTYPE_FP32, N);
    CHECK_OK(kt->fill(s, &x, it_scalar_f64(4.0)));
    CHECK_OK(rt->memcpy_async(1, host, p, N * sizeof(float), IT_MEMCPY_D2H, s));
    pthread_t t;
    pthread_create(&t, NULL, open_later, &g);
    CHECK_OK(rt->stream_destroy(s));
    CHECK(all_equal(host, N, 4.0f));
    pthread_join(t, NULL);
    gate_destroy(&g);
    free(host);
    CHECK_OK(rt->free(1, p));
}

/* Two devices: one held does not hold the other; pointers and streams do not mix. */
static void test_two_devices(void) {
    it_stream *d0 = NULL, *d1 = NULL;
    CHECK_OK(rt->default_stream(0, &d0));
    CHECK_OK(rt->default_stream(1, &d1));
    CHECK(d0 != d1);
    void *p0 = NULL, *p1 = NULL;
    CHECK_OK(rt->malloc(0, 64 * sizeof(float), &p0));
    CHECK_OK(rt->malloc(1, 64 * sizeof(float), &p1));

    gate g;
    gate_put(&g, d0);
    float in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
    CHECK_OK(rt->memcpy(1, p1, in, sizeof in, IT_MEMCPY_H2D)); /* sync copies on sim:1 run */
    it_tdesc x1 = vec(p1, IT_DTYPE_FP32, 64);
    CHECK_OK(kt->unary(d1, IT_UNARY_SQUARE, 0.0f, &x1, &x1));
    CHECK_OK(rt->memcpy(1, out, p1, sizeof out, IT_MEMCPY_D2H));
    CHECK(out[3] == 2.25f && out[63] == 992.25f);
    CHECK_OK(rt->synchronize_device(1));
    it_stream *other = NULL;
    CHECK_OK(rt->stream_create(0, 0, &other)); /* other streams of sim:0 are not held either */
    CHECK_OK(rt->stream_synchronize(other));
    CHECK_OK(rt->stream_destroy(other));
    gate_open(&g);
    CHECK_OK(rt->synchronize_device(0));
    gate_destroy(&g);

    /* Enqueue-time checks name the kernel and the argument. */
    it_tdesc x0 = vec(p0, IT_DTYPE_FP32, 64);
    CHECK_ERR(kt->fill(d1, &x0, it_scalar_f64(1)), IT_ERR_INVALID_ARG, "fill: argument 'dst'");
    CHECK_HAS("allocation of sim:0");
    float host[64];
    it_tdesc h = vec(host, IT_DTYPE_FP32, 64);
    CHECK_ERR(kt->copy_strided(d0, &h, &x0), IT_ERR_INVALID_ARG, "copy_strided: argument 'src'");
    CHECK_HAS("not device memory");
    it_tdesc over = vec(p0, IT_DTYPE_FP32, 65);
    CHECK_ERR(kt->unary(d0, IT_UNARY_EXP, 0, &x0, &over), IT_ERR_INVALID_ARG, "unary: argument 'out'");
    CHECK_HAS("4 bytes past the end");
    it_gemm_args ga;
    memset(&ga, 0, sizeof ga);
    ga.a = x0;
    ga.b = x0;
    ga.c = x1;
    CHECK_ERR(kt->gemm(d0, &ga), IT_ERR_INVALID_ARG, "gemm: argument 'c'");
    CHECK_ERR(kt->layernorm_fwd(d0, &x0, &x0, NULL, 1e-5f, &x0, &x0, NULL), IT_ERR_INVALID_ARG,
              "layernorm_fwd: argument 'rstd' is NULL");
    it_tdesc strided = x0;
    strided.ndim = 2;
    strided.shape[0] = 8;
    strided.shape[1] = 8;
    strided.strides[0] = 9; /* reaches element 7*9 + 7 = 70 of 64 */
    strided.strides[1] = 1;
    CHECK_ERR(kt->reduce(d0, IT_REDUCE_SUM, &strided, &x0), IT_ERR_INVALID_ARG, "reduce: argument 'x'");
    it_tdesc empty = x0;
    empty.data = host; /* no element is reachable: the pointer is never looked at */
    empty.shape[0] = 0;
    CHECK_OK(kt->fill(d0, &empty, it_scalar_f64(1)));
    CHECK_OK(rt->synchronize_device(0));

    CHECK_OK(rt->free(0, p0));
    CHECK_OK(rt->free(1, p1));
}

/* malloc_async / free_async: the memory counts as used until the stream reaches the free;
 * new work on it is refused at once. */
static void test_stream_ordered_memory(void) {
    it_stream *s = NULL;
    CHECK_OK(rt->stream_create(0, 0, &s));
    size_t free0 = free_bytes(0);
    gate g;
    gate_put(&g, s);
    void *p = NULL;
    CHECK_OK(rt->malloc_async(0, 1 << 20, s, &p));
    it_tdesc x = vec(p, IT_DTYPE_FP32, 1 << 18);
    CHECK_OK(kt->fill(s, &x, it_scalar_f64(1)));
    CHECK_OK(rt->free_async(0, p, s));
    CHECK(free_bytes(0) == free0 - (1 << 20));
    CHECK_ERR(kt->fill(s, &x, it_scalar_f64(2)), IT_ERR_INVALID_ARG, "already released with free_async");
    CHECK_ERR(rt->free_async(0, p, s), IT_ERR_INVALID_ARG, "already released");
    CHECK_ERR(rt->free(0, p), IT_ERR_INVALID_ARG, "already released");
    it_stream *s1 = NULL;
    CHECK_OK(rt->default_stream(1, &s1));
    CHECK_ERR(rt->malloc_async(0, 64, s1, &p), IT_ERR_INVALID_ARG, "stream of sim:1");
    gate_open(&g);
    CHECK_OK(rt->stream_synchronize(s));
    CHECK(free_bytes(0) == free0);
    gate_destroy(&g);

    /* A free on another stream without an event wait: the held stream's kernel finds its
     * memory gone when it runs, and says so at the next synchronize (a GPU would fault). */
    it_stream *t = NULL;
    CHECK_OK(rt->stream_create(0, 0, &t));
    CHECK_OK(rt->malloc(0, 4096, &p));
    x = vec(p, IT_DTYPE_FP32, 1024);
    gate g2;
    gate_put(&g2, s);
    CHECK_OK(kt->fill(s, &x, it_scalar_f64(1)));
    CHECK_OK(rt->free_async(0, p, t));
    CHECK_OK(rt->stream_synchronize(t));
    gate_open(&g2);
    CHECK_ERR(rt->stream_synchronize(s), IT_ERR_BACKEND, "kernel 'fill' failed");
    CHECK_HAS("argument 'dst'");
    CHECK_HAS("freed before the stream reached it");
    CHECK_OK(rt->stream_synchronize(s));
    gate_destroy(&g2);
    CHECK(free_bytes(0) == free0);
    CHECK_OK(rt->stream_destroy(t));
    CHECK_OK(rt->stream_destroy(s));
}

/* A failure the CPU kernel detects is not returned by the launch: it is the stream's
 * sticky error, returned (once) by its next synchronize or synchronous memcpy. */
static void test_sticky_errors(void) {
    it_stream *s = NULL;
    CHECK_OK(rt->stream_create(0, 0, &s));
    void *pf = NULL, *pi = NULL;
    CHECK_OK(rt->malloc(0, 16 * sizeof(float), &pf));
    CHECK_OK(rt->malloc(0, 16 * sizeof(int32_t), &pi));
    it_tdesc f = vec(pf, IT_DTYPE_FP32, 16), i32 = vec(pi, IT_DTYPE_I32, 16);
    CHECK_OK(kt->copy_strided(s, &f, &i32));       /* dtypes differ: the CPU kernel refuses */
    CHECK_OK(kt->fill(s, &f, it_scalar_f64(6.0))); /* later work still runs */
    CHECK_ERR(rt->stream_synchronize(s), IT_ERR_INVALID_ARG, "kernel 'copy_strided' failed");
    CHECK_HAS("dtype mismatch");
    CHECK_HAS("sim:0");
    CHECK_OK(rt->stream_synchronize(s)); /* reported once */
    float host[16];
    CHECK_OK(rt->memcpy(0, host, pf, sizeof host, IT_MEMCPY_D2H));
    CHECK(all_equal(host, 16, 6.0f));

    /* On the default stream, the synchronous memcpy reports it. */
    it_stream *d = NULL;
    CHECK_OK(rt->default_stream(0, &d));
    CHECK_OK(kt->cast(d, &f, &i32)); /* fine: fp32 -> i32 */
    it_tdesc bad = f;
    bad.shape[0] = 8; /* shape mismatch with i32 (16) */
    CHECK_OK(kt->cast(d, &bad, &i32));
    CHECK_ERR(rt->memcpy(0, host, pf, sizeof host, IT_MEMCPY_D2H), IT_ERR_INVALID_ARG, "kernel 'cast' failed");
    CHECK_HAS("shape mismatch");
    CHECK_OK(rt->memcpy(0, host, pf, sizeof host, IT_MEMCPY_D2H));

    /* synchronize_device reports any stream's; stream_destroy reports what is left. */
    CHECK_OK(kt->copy_strided(s, &f, &i32));
    CHECK_ERR(rt->synchronize_device(0), IT_ERR_INVALID_ARG, "dtype mismatch");
    CHECK_OK(rt->stream_synchronize(s));
    CHECK_OK(kt->copy_strided(s, &f, &i32));
    CHECK_ERR(rt->stream_destroy(s), IT_ERR_INVALID_ARG, "dtype mismatch");

    /* The core's synchronize surfaces it too. */
    CHECK_OK(kt->copy_strided(d, &f, &i32));
    CHECK_ERR(it_device_synchronize(sim0), IT_ERR_INVALID_ARG, "dtype mismatch");
    CHECK_OK(it_device_synchronize(sim0));
    CHECK_OK(rt->free(0, pf));
    CHECK_OK(rt->free(0, pi));
}

/* ---------------------------------------------------------------- every kernel slot
 * Each slot runs once on the cpu table (host buffers) and once on the sim (device copies of
 * the same buffers); afterwards every buffer must be equal bit for bit, and the sim's
 * status (a sticky error at synchronize) must be the cpu's. This pins the argument order
 * of every wrapper in backends/sim/kernels.c. */

typedef struct kbuf {
    it_dtype dt;
    int64_t n;
    void *h, *d;
} kbuf;
static kbuf kb[8];
static int nkb;
static it_tdesc kpool[16];
static int npool;
static uint32_t krand = 2024;

/* A buffer of n elements: floats uniform in [lo, hi), integers in [lo, hi). */
static int newbuf(it_dtype dt, int64_t n, double lo, double hi) {
    kbuf *b = &kb[nkb];
    b->dt = dt;
    b->n = n;
    size_t es = it_dtype_size(dt);
    b->h = calloc((size_t)n, es);
    for (int64_t i = 0; i < n; i++) {
        krand = krand * 1664525u + 1013904223u;
        double u = lo + (hi - lo) * (double)(krand >> 8) / (double)(1u << 24);
        if (dt == IT_DTYPE_FP32)
            ((float *)b->h)[i] = (float)u;
        else if (dt == IT_DTYPE_BF16)
            ((uint16_t *)b->h)[i] = it_fp32_to_bf16((float)u);
        else if (dt == IT_DTYPE_I32)
            ((int32_t *)b->h)[i] = (int32_t)u;
    }
    CHECK_OK(rt->malloc(0, (size_t)n * es, &b->d));
    CHECK_OK(rt->memcpy(0, b->d, b->h, (size_t)n * es, IT_MEMCPY_H2D));
    return nkb++;
}

/* A descriptor of buffer i (host side for dev 0, device side for dev 1), strides given or
 * contiguous (NULL). Lives in kpool until the next slot. */
static it_tdesc *pd(int i, int dev, int nd, const int64_t *shape, const int64_t *strides) {
    it_tdesc *d = &kpool[npool++ % 16];
    memset(d, 0, sizeof *d);
    d->data = dev ? kb[i].d : kb[i].h;
    d->dtype = kb[i].dt;
    d->ndim = nd;
    int64_t st = 1;
    for (int k = nd - 1; k >= 0; k--) {
        d->shape[k] = shape[k];
        d->strides[k] = strides ? strides[k] : st;
        st *= shape[k];
    }
    return d;
}
#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define PD(i, nd, ...) pd(i, dev, nd, SH(__VA_ARGS__), NULL)
/* Run `call` with K/S bound to the cpu table (dev 0) and the sim's (dev 1). */
#define BOTH(call)                                                                                                     \
    for (int dev = 0; dev < 2; dev++) {                                                                                \
        const it_kernels *K = dev ? kt : it_cpu_kernels();                                                             \
        it_stream *S = dev ? kstream : NULL;                                                                           \
        kst[dev] = (call);                                                                                             \
    }

static it_stream *kstream;
static it_status kst[2];

/* Compare and release the slot's buffers. `must_run`: the cpu kernel has to succeed (else
 * the case itself is wrong); otherwise (slots whose CPU kernel may not exist yet) only
 * the statuses have to agree. */
static void slot_done(const char *name, bool must_run) {
    it_status sync = rt->stream_synchronize(kstream);
    CHECK_MSG(kst[1] == IT_OK, "%s: launch returned %s: %s", name, it_status_name(kst[1]), it_last_error());
    CHECK_MSG(sync == kst[0], "%s: cpu returned %s, the sim's synchronize %s", name, it_status_name(kst[0]),
              it_status_name(sync));
    if (must_run) CHECK_MSG(kst[0] == IT_OK, "%s: the cpu kernel refused the case", name);
    for (int i = 0; i < nkb; i++) {
        size_t bytes = (size_t)kb[i].n * it_dtype_size(kb[i].dt);
        void *back = malloc(bytes);
        CHECK_OK(rt->memcpy(0, back, kb[i].d, bytes, IT_MEMCPY_D2H));
        CHECK_MSG(memcmp(back, kb[i].h, bytes) == 0, "%s: buffer %d differs between cpu and sim", name, i);
        free(back);
        free(kb[i].h);
        CHECK_OK(rt->free(0, kb[i].d));
    }
    nkb = 0;
}

static void test_every_slot_bitwise(void) {
    CHECK_OK(rt->stream_create(0, 0, &kstream));
    const it_kernels *cpuk = it_cpu_kernels();
    { /* cast fp32 (4, 8) -> bf16 */
        int x = newbuf(IT_DTYPE_FP32, 32, -2, 2), y = newbuf(IT_DTYPE_BF16, 32, 0, 0);
        BOTH(K->cast(S, PD(x, 2, 4, 8), PD(y, 2, 4, 8)));
        slot_done("cast", true);
    }
    { /* fill */
        int y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        BOTH(K->fill(S, PD(y, 1, 32), it_scalar_f64(1.5)));
        slot_done("fill", true);
    }
    { /* copy_strided: a transposed (8, 4) view of a (4, 8) into a contiguous (8, 4) */
        int x = newbuf(IT_DTYPE_FP32, 32, -1, 1), y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        BOTH(K->copy_strided(S, pd(x, dev, 2, SH(8, 4), SH(1, 8)), PD(y, 2, 8, 4)));
        slot_done("copy_strided", true);
    }
    { /* gemm: C (2, 4, 5) = 0.5 A (2, 4, 8) @ B^T (2, 5, 8)^T + 1.0 C */
        int a = newbuf(IT_DTYPE_FP32, 64, -1, 1), b = newbuf(IT_DTYPE_FP32, 80, -1, 1);
        int c = newbuf(IT_DTYPE_FP32, 40, -1, 1);
        it_gemm_args g;
        memset(&g, 0, sizeof g);
        g.trans_b = true;
        g.alpha = 0.5f;
        g.beta = 1.0f;
        BOTH((g.a = *PD(a, 3, 2, 4, 8), g.b = *PD(b, 3, 2, 5, 8), g.c = *PD(c, 3, 2, 4, 5), K->gemm(S, &g)));
        slot_done("gemm", true);
    }
    { /* unary gelu */
        int x = newbuf(IT_DTYPE_FP32, 32, -3, 3), y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        BOTH(K->unary(S, IT_UNARY_GELU, 0.0f, PD(x, 1, 32), PD(y, 1, 32)));
        slot_done("unary", true);
    }
    { /* binary: (4, 8) * (8) broadcast over rows */
        int a = newbuf(IT_DTYPE_FP32, 32, -1, 1), b = newbuf(IT_DTYPE_FP32, 8, -1, 1);
        int y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        BOTH(K->binary(S, IT_BINARY_MUL, PD(a, 2, 4, 8), pd(b, dev, 2, SH(4, 8), SH(0, 1)), PD(y, 2, 4, 8)));
        slot_done("binary", true);
    }
    { /* reduce: sum over the last dim of (4, 8) */
        int x = newbuf(IT_DTYPE_FP32, 32, -1, 1), y = newbuf(IT_DTYPE_FP32, 4, 0, 0);
        BOTH(K->reduce(S, IT_REDUCE_SUM, PD(x, 2, 4, 8), PD(y, 2, 4, 1)));
        slot_done("reduce", true);
    }
    { /* embedding: idx (6) in [0, 10), weight (10, 8) */
        int idx = newbuf(IT_DTYPE_I32, 6, 0, 10), w = newbuf(IT_DTYPE_FP32, 80, -1, 1);
        int out = newbuf(IT_DTYPE_FP32, 48, 0, 0), dout = newbuf(IT_DTYPE_FP32, 48, -1, 1);
        BOTH(K->embedding_fwd(S, PD(idx, 1, 6), PD(w, 2, 10, 8), PD(out, 2, 6, 8)));
        slot_done("embedding_fwd", true);
        idx = newbuf(IT_DTYPE_I32, 6, 0, 10), w = newbuf(IT_DTYPE_FP32, 80, -1, 1);
        dout = newbuf(IT_DTYPE_FP32, 48, -1, 1);
        BOTH(K->embedding_bwd(S, PD(idx, 1, 6), PD(dout, 2, 6, 8), PD(w, 2, 10, 8)));
        slot_done("embedding_bwd", true);
    }
    { /* layernorm (4, 8) */
        int x = newbuf(IT_DTYPE_FP32, 32, -2, 2), w = newbuf(IT_DTYPE_FP32, 8, 0.5, 1.5);
        int b = newbuf(IT_DTYPE_FP32, 8, -1, 1), y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        int mean = newbuf(IT_DTYPE_FP32, 4, 0, 0), rstd = newbuf(IT_DTYPE_FP32, 4, 0, 0);
        BOTH(K->layernorm_fwd(S, PD(x, 2, 4, 8), PD(w, 1, 8), PD(b, 1, 8), 1e-5f, PD(y, 2, 4, 8), PD(mean, 1, 4),
                              PD(rstd, 1, 4)));
        slot_done("layernorm_fwd", true);
        int dy = newbuf(IT_DTYPE_FP32, 32, -1, 1);
        x = newbuf(IT_DTYPE_FP32, 32, -2, 2), w = newbuf(IT_DTYPE_FP32, 8, 0.5, 1.5);
        mean = newbuf(IT_DTYPE_FP32, 4, -0.1, 0.1), rstd = newbuf(IT_DTYPE_FP32, 4, 0.5, 2);
        int dx = newbuf(IT_DTYPE_FP32, 32, 0, 0), dw = newbuf(IT_DTYPE_FP32, 8, 0, 0);
        int db = newbuf(IT_DTYPE_FP32, 8, 0, 0);
        BOTH(K->layernorm_bwd(S, PD(dy, 2, 4, 8), PD(x, 2, 4, 8), PD(w, 1, 8), PD(mean, 1, 4), PD(rstd, 1, 4),
                              PD(dx, 2, 4, 8), PD(dw, 1, 8), PD(db, 1, 8)));
        slot_done("layernorm_bwd", true);
    }
    { /* softmax, causal (4, 4) */
        it_softmax_args sa = {0.5f, true};
        int x = newbuf(IT_DTYPE_FP32, 16, -3, 3), y = newbuf(IT_DTYPE_FP32, 16, 0, 0);
        BOTH(K->softmax_fwd(S, &sa, PD(x, 2, 4, 4), PD(y, 2, 4, 4)));
        slot_done("softmax_fwd", true);
        y = newbuf(IT_DTYPE_FP32, 16, 0, 0.5);
        int dy = newbuf(IT_DTYPE_FP32, 16, -1, 1), dx = newbuf(IT_DTYPE_FP32, 16, 0, 0);
        BOTH(K->softmax_bwd(S, &sa, PD(y, 2, 4, 4), PD(dy, 2, 4, 4), PD(dx, 2, 4, 4)));
        slot_done("softmax_bwd", true);
    }
    { /* cross entropy: logits (4, 10), 8 valid columns */
        int lg = newbuf(IT_DTYPE_FP32, 40, -2, 2), tg = newbuf(IT_DTYPE_I32, 4, 0, 8);
        int loss = newbuf(IT_DTYPE_FP32, 4, 0, 0);
        BOTH(K->cross_entropy_fwd(S, PD(lg, 2, 4, 10), PD(tg, 1, 4), 8, PD(loss, 1, 4)));
        slot_done("cross_entropy_fwd", true);
        lg = newbuf(IT_DTYPE_FP32, 40, -2, 2), tg = newbuf(IT_DTYPE_I32, 4, 0, 8);
        int dl = newbuf(IT_DTYPE_FP32, 4, 0.1, 1), dlg = newbuf(IT_DTYPE_FP32, 40, 0, 0);
        BOTH(K->cross_entropy_bwd(S, PD(lg, 2, 4, 10), PD(tg, 1, 4), 8, PD(dl, 1, 4), PD(dlg, 2, 4, 10)));
        slot_done("cross_entropy_bwd", true);
    }
    { /* optimizers on 32 parameters */
        int p = newbuf(IT_DTYPE_FP32, 32, -1, 1), g = newbuf(IT_DTYPE_FP32, 32, -1, 1);
        BOTH(K->sgd_step(S, 0.1f, 0.5f, PD(p, 1, 32), PD(g, 1, 32)));
        slot_done("sgd_step", true);
        it_adam_args aa = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 3, true};
        p = newbuf(IT_DTYPE_FP32, 32, -1, 1), g = newbuf(IT_DTYPE_FP32, 32, -1, 1);
        int m = newbuf(IT_DTYPE_FP32, 32, -0.1, 0.1), v = newbuf(IT_DTYPE_FP32, 32, 0, 0.01);
        BOTH(K->adam_step(S, &aa, PD(p, 1, 32), PD(g, 1, 32), PD(m, 1, 32), PD(v, 1, 32)));
        slot_done("adam_step", true);
    }
    /* Newer slots: checked when the CPU kernel exists, statuses compared either way. */
    if (cpuk->rmsnorm_fwd) {
        int x = newbuf(IT_DTYPE_FP32, 32, -2, 2), w = newbuf(IT_DTYPE_FP32, 8, 0.5, 1.5);
        int y = newbuf(IT_DTYPE_FP32, 32, 0, 0), rstd = newbuf(IT_DTYPE_FP32, 4, 0, 0);
        BOTH(K->rmsnorm_fwd(S, PD(x, 2, 4, 8), PD(w, 1, 8), 1e-5f, PD(y, 2, 4, 8), PD(rstd, 1, 4)));
        slot_done("rmsnorm_fwd", false);
    }
    if (cpuk->rmsnorm_bwd) {
        int dy = newbuf(IT_DTYPE_FP32, 32, -1, 1), x = newbuf(IT_DTYPE_FP32, 32, -2, 2);
        int w = newbuf(IT_DTYPE_FP32, 8, 0.5, 1.5), rstd = newbuf(IT_DTYPE_FP32, 4, 0.5, 2);
        int dx = newbuf(IT_DTYPE_FP32, 32, 0, 0), dw = newbuf(IT_DTYPE_FP32, 8, 0, 0);
        BOTH(K->rmsnorm_bwd(S, PD(dy, 2, 4, 8), PD(x, 2, 4, 8), PD(w, 1, 8), PD(rstd, 1, 4), PD(dx, 2, 4, 8),
                            PD(dw, 1, 8)));
        slot_done("rmsnorm_bwd", false);
    }
    if (cpuk->rope) { /* x, y (B=1, T=2, H=2, D=8); cos, sin (T, D/2) */
        int x = newbuf(IT_DTYPE_FP32, 32, -1, 1), c = newbuf(IT_DTYPE_FP32, 8, -1, 1);
        int sn = newbuf(IT_DTYPE_FP32, 8, -1, 1), y = newbuf(IT_DTYPE_FP32, 32, 0, 0);
        BOTH(K->rope(S, PD(x, 4, 1, 2, 2, 8), PD(c, 2, 2, 4), PD(sn, 2, 2, 4), true, PD(y, 4, 1, 2, 2, 8)));
        slot_done("rope", false);
    }
    if (cpuk->topk) { /* x (4, 8), k = 3 */
        int x = newbuf(IT_DTYPE_FP32, 32, -1, 1), v = newbuf(IT_DTYPE_FP32, 12, 0, 0);
        int ix = newbuf(IT_DTYPE_I32, 12, 0, 0);
        BOTH(K->topk(S, PD(x, 2, 4, 8), 3, PD(v, 2, 4, 3), PD(ix, 2, 4, 3)));
        slot_done("topk", false);
    }
    CHECK_OK(rt->stream_destroy(kstream));
}

/* ---------------------------------------------------------------- through the core */

/* Run the same ops on `dev` and read every result back. */
static bool core_ops(it_device dev, const float *av, const float *bv, const float *mv, float *out, size_t *n_out) {
    int64_t sab[2] = {4, 8}, sm[2] = {8, 5};
    it_tensor *a = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, sab, av, 32 * sizeof(float));
    it_tensor *b = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, sab, bv, 32 * sizeof(float));
    it_tensor *m = it_tensor_from_host(dev, IT_DTYPE_FP32, 2, sm, mv, 40 * sizeof(float));
    it_tensor *sum = it_add(a, b);                        /* (4, 8) */
    it_tensor *mm = it_matmul(sum, m, false, false);      /* (4, 5) */
    it_tensor *abt = it_matmul(a, b, false, true);        /* (4, 4) */
    it_tensor *sm1 = it_softmax(mm, 0.5f, false);         /* (4, 5) */
    it_tensor *sm2 = it_softmax(abt, 0.25f, true);        /* (4, 4), causal */
    it_tensor *tr = it_tensor_transpose(sum, 0, 1);       /* (8, 4) strided view */
    it_tensor *mt = it_matmul(tr, a, false, false);       /* (8, 8) from a strided operand */
    it_tensor *bf = it_tensor_to_dtype(a, IT_DTYPE_BF16); /* bf16 matmul, rounding included */
    it_tensor *bfm = it_matmul(bf, it_tensor_to_dtype(b, IT_DTYPE_BF16), false, true);
    it_tensor *bff = it_tensor_to_dtype(bfm, IT_DTYPE_FP32);
    it_tensor *outs[] = {sum, mm, abt, sm1, sm2, tr, mt, bff};
    size_t off = 0;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        if (!outs[i]) return false;
        size_t n = (size_t)it_tensor_numel(outs[i]);
        if (it_tensor_copy_to_host(outs[i], out + off, n * sizeof(float))) return false;
        off += n;
    }
    *n_out = off;
    return true;
}

static void test_core_tensors(void) {
    float av[32], bv[32], mv[40];
    uint32_t r = 12345;
    for (int i = 0; i < 40; i++) {
        r = r * 1664525u + 1013904223u;
        float u = (float)(r >> 8) / (float)(1u << 24) - 0.5f;
        if (i < 32) av[i] = u * 3.0f;
        if (i < 32) bv[i] = u * u - 0.1f * (float)i;
        mv[i] = u + 0.01f * (float)i;
    }
    enum { MAXN = 512 };
    float on_cpu[MAXN], on_sim[MAXN];
    size_t n_cpu = 0, n_sim = 0;
    memset(on_sim, 0xff, sizeof on_sim);
    it_scope_begin();
    bool ok_cpu = core_ops(cpu, av, bv, mv, on_cpu, &n_cpu);
    it_scope_end();
    CHECK_MSG(ok_cpu, "ops on cpu: %s", it_last_error());
    it_scope_begin();
    bool ok_sim = core_ops(sim1, av, bv, mv, on_sim, &n_sim);
    it_scope_end();
    CHECK_MSG(ok_sim, "ops on sim:1: %s", it_last_error());
    CHECK(n_cpu == n_sim && n_cpu == 32 + 20 + 16 + 20 + 16 + 32 + 64 + 16);
    CHECK_MSG(memcmp(on_cpu, on_sim, n_cpu * sizeof(float)) == 0, "sim:1 results differ from cpu's");
    CHECK(on_sim[0] == av[0] + bv[0]);

    /* Across devices: sim:1 -> sim:0 (through host staging) -> cpu. */
    it_scope_begin();
    int64_t shape[2] = {4, 8};
    it_tensor *t1 = it_tensor_from_host(sim1, IT_DTYPE_FP32, 2, shape, av, sizeof av);
    it_tensor *t0 = it_tensor_to_device(it_tensor_transpose(t1, 0, 1), sim0);
    it_tensor *tc = it_tensor_to_device(t0, cpu);
    float back[32];
    CHECK(tc != NULL && it_tensor_copy_to_host(tc, back, sizeof back) == IT_OK);
    bool same = true;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) same &= back[j * 4 + i] == av[i * 8 + j];
    CHECK_MSG(same, "transpose moved across sim:1 -> sim:0 -> cpu differs");
    double item = 0;
    int64_t idx[2] = {7, 3};
    CHECK_OK(it_tensor_item(t0, idx, &item));
    CHECK(item == av[3 * 8 + 7]);
    it_scope_end();
    CHECK_OK(it_device_synchronize(sim0));
    CHECK_OK(it_device_synchronize(sim1));
}

/* Nothing leaked in the sim's accounting: with the core's cache emptied, every byte is free. */
static void test_all_memory_returned(void) {
    CHECK_OK(it_mem_empty_cache(sim0));
    CHECK_OK(it_mem_empty_cache(sim1));
    size_t fr = 0, tot = 0;
    CHECK_OK(rt->mem_info(0, &fr, &tot));
    CHECK_MSG(fr == tot, "sim:0: %zu of %zu bytes free", fr, tot);
    CHECK_OK(rt->mem_info(1, &fr, &tot));
    CHECK_MSG(fr == tot, "sim:1: %zu of %zu bytes free", fr, tot);
}

/* ---------------------------------------------------------------- configuration
 * IT_SIM_DEVICES / IT_SIM_MEMORY_MB are read once, at the backend's init, so each setting
 * is checked in a fresh process: this executable run again with --env-child MODE. */

static int env_child(const char *mode) {
    it_device d;
    if (strcmp(mode, "custom") == 0) { /* IT_SIM_DEVICES=3 IT_SIM_MEMORY_MB=16 */
        CHECK_OK(it_device_parse("sim:2", &d));
        if (it_test_failures) return 1;
        CHECK_ERR(it_device_parse("sim:3", &d), IT_ERR_INVALID_ARG, "has 3 devices");
        size_t fr = 0, tot = 0;
        CHECK_OK(d.backend->runtime->mem_info(2, &fr, &tot));
        CHECK(tot == (size_t)16 << 20 && fr == tot);
        void *p = NULL;
        CHECK_ERR(d.backend->runtime->malloc(2, (size_t)17 << 20, &p), IT_ERR_OOM, "16777216 of 16777216 bytes free");
        CHECK_OK(d.backend->runtime->malloc(2, (size_t)16 << 20, &p));
        CHECK_OK(d.backend->runtime->free(2, p));
    } else if (strcmp(mode, "bad_devices") == 0) { /* IT_SIM_DEVICES=0 */
        CHECK_ERR(it_device_parse("sim:0", &d), IT_ERR_INVALID_ARG, "IT_SIM_DEVICES='0' is not an integer in 1..64");
        CHECK_HAS("backend 'sim' failed to initialize");
    } else if (strcmp(mode, "bad_memory") == 0) { /* IT_SIM_MEMORY_MB=8g */
        CHECK_ERR(it_device_parse("sim", &d), IT_ERR_INVALID_ARG, "IT_SIM_MEMORY_MB='8g'");
    } else {
        CHECK_MSG(false, "unknown child mode %s", mode);
    }
    return it_test_failures ? 1 : 0;
}

/* Run this test in `mode` with two environment settings; true when the child passed. */
static bool run_env_child(const char *mode, const char *devices, const char *memory_mb) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("IT_SIM_DEVICES", devices, 1);
        setenv("IT_SIM_MEMORY_MB", memory_mb, 1);
        execl("/proc/self/exe", "test_sim", "--env-child", mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_configuration(void) {
    CHECK_MSG(run_env_child("custom", "3", "16"), "IT_SIM_DEVICES=3 IT_SIM_MEMORY_MB=16 (child output above)");
    CHECK_MSG(run_env_child("bad_devices", "0", "16"), "IT_SIM_DEVICES=0 (child output above)");
    CHECK_MSG(run_env_child("bad_memory", "2", "8g"), "IT_SIM_MEMORY_MB=8g (child output above)");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--env-child") == 0) return env_child(argv[2]);
    setenv("IT_SIM_DEVICES", "2", 1);
    unsetenv("IT_SIM_MEMORY_MB"); /* the defaults are part of what is tested */
    cpu = it_device_cpu();
    if (it_device_parse("sim:0", &sim0) || it_device_parse("sim:1", &sim1)) {
        fprintf(stderr, "cannot load the sim backend: %s\n", it_last_error());
        return 1;
    }
    sim = sim0.backend;
    rt = sim->runtime;
    kt = sim->kernels;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/libit_backend_sim.so", IT_BINARY_DIR);
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        union {
            void *p;
            it_status (*fn)(it_stream *, void (*)(void *), void *);
        } sym;
        sym.p = dlsym(h, "it_sim_launch_host_func");
        launch_host_func = sym.fn;
        dlclose(h); /* the registry keeps its own handle open */
    }
    if (!launch_host_func) {
        fprintf(stderr, "it_sim_launch_host_func not found in %s\n", path);
        return 1;
    }

    test_table();
    test_current_device();
    test_memory();
    test_host_access_crashes();
    test_stream_order();
    test_async_copy_and_events();
    test_cross_stream_wait();
    test_destroy_drains();
    test_two_devices();
    test_stream_ordered_memory();
    test_sticky_errors();
    test_every_slot_bitwise();
    test_core_tensors();
    test_all_memory_returned();
    test_configuration();
    return it_test_report("test_sim");
}
