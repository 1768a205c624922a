/* The kernel profiler (infinitrain/profile.h): known kernel calls through the public ops on
 * cpu, on the sim plugin (asynchronous streams) and on testplug (whose softmax the CPU
 * fallback serves), then the three files it_profile_end writes:
 *  - the Chrome trace parses as JSON; its kernel events per name and step equal the calls
 *    made (and the dispatch's own per-slot counters); ts and dur are non-negative; each
 *    stream has its own (pid, tid) track with a name; steps and the memory counter are there;
 *  - the report holds InfiniTrain's header, each step's peak memory and each slot's count;
 *  - the call log has one line per call;
 * and that nothing is recorded while no profile is open, and the API's error cases.
 *
 * The trace is read with jansson, which libinfinitrain loads: its functions are looked up in
 * the process (dlsym) because the test target links only the library. */
#include <dlfcn.h>
#include <jansson.h>

#include "infinitrain/backend.h"
#include "infinitrain/ops.h"
#include "infinitrain/profile.h"
#include "infinitrain/tensor.h"
#include "it_test.h"

static struct {
    json_t *(*load_file)(const char *, size_t, json_error_t *);
    json_t *(*object_get)(const json_t *, const char *);
    size_t (*array_size)(const json_t *);
    json_t *(*array_get)(const json_t *, size_t);
    const char *(*string_value)(const json_t *);
    double (*number_value)(const json_t *);
    void (*del)(json_t *);
} J;

static bool load_jansson(void) {
    J.load_file = (json_t * (*)(const char *, size_t, json_error_t *)) dlsym(RTLD_DEFAULT, "json_load_file");
    J.object_get = (json_t * (*)(const json_t *, const char *)) dlsym(RTLD_DEFAULT, "json_object_get");
    J.array_size = (size_t(*)(const json_t *))dlsym(RTLD_DEFAULT, "json_array_size");
    J.array_get = (json_t * (*)(const json_t *, size_t)) dlsym(RTLD_DEFAULT, "json_array_get");
    J.string_value = (const char *(*)(const json_t *))dlsym(RTLD_DEFAULT, "json_string_value");
    J.number_value = (double (*)(const json_t *))dlsym(RTLD_DEFAULT, "json_number_value");
    J.del = (void (*)(json_t *))dlsym(RTLD_DEFAULT, "json_delete");
    return J.load_file && J.object_get && J.array_size && J.array_get && J.string_value && J.number_value && J.del;
}

static const char *jstr(const json_t *o, const char *k) {
    const json_t *v = J.object_get(o, k);
    return v && json_is_string(v) ? J.string_value(v) : NULL;
}
static double jnum(const json_t *o, const char *k, double dflt) {
    const json_t *v = J.object_get(o, k);
    return v && json_is_number(v) ? J.number_value(v) : dflt;
}

#define PREFIX IT_BINARY_DIR "/test_profile_out"

static uint64_t slot_calls(const it_backend *b, const char *slot) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(b, st)) return 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        if (strcmp(st[i].slot, slot) == 0) return st[i].calls;
    return 0;
}

/* Kernel events in the trace with this name, on device pid `pid` (0: any) in step `step`. */
typedef struct tally {
    int events, bad_times, step0_binary, step0_gemm, step1_fill, untagged_fill;
    int cpu_pid, cpu_tid, sim_pid, sim_tid, tp_pid;
    int sim_events, tp_softmax, tp_softmax_bytes_ok, cpu_event_timed;
    int named_tids, steps, counters;
} tally;

/* The device of a pid, from its process_name metadata event. */
static const char *pid_name(const json_t *ev, int pid) {
    for (size_t i = 0; i < J.array_size(ev); i++) {
        const json_t *e = J.array_get(ev, i);
        const char *ph = jstr(e, "ph"), *nm = jstr(e, "name");
        if (ph && nm && !strcmp(ph, "M") && !strcmp(nm, "process_name") && (int)jnum(e, "pid", -1) == pid)
            return jstr(J.object_get(e, "args"), "name");
    }
    return "";
}

static bool tid_named(const json_t *ev, int pid, int tid) {
    for (size_t i = 0; i < J.array_size(ev); i++) {
        const json_t *e = J.array_get(ev, i);
        const char *ph = jstr(e, "ph"), *nm = jstr(e, "name");
        if (ph && nm && !strcmp(ph, "M") && !strcmp(nm, "thread_name") && (int)jnum(e, "pid", -1) == pid &&
            (int)jnum(e, "tid", -1) == tid)
            return true;
    }
    return false;
}

static void tally_trace(const json_t *ev, tally *t) {
    memset(t, 0, sizeof *t);
    t->cpu_pid = t->cpu_tid = t->sim_pid = t->sim_tid = t->tp_pid = -1;
    for (size_t i = 0; i < J.array_size(ev); i++) {
        const json_t *e = J.array_get(ev, i);
        const char *ph = jstr(e, "ph"), *cat = jstr(e, "cat"), *name = jstr(e, "name");
        if (ph && !strcmp(ph, "C")) t->counters++;
        if (!ph || strcmp(ph, "X") || !cat || !name) continue;
        double ts = jnum(e, "ts", -1), dur = jnum(e, "dur", -1);
        if (ts < 0 || dur < 0) t->bad_times++;
        if (!strcmp(cat, "step")) {
            t->steps++;
            continue;
        }
        t->events++;
        const json_t *args = J.object_get(e, "args");
        int pid = (int)jnum(e, "pid", -1), tid = (int)jnum(e, "tid", -1), step = (int)jnum(args, "step", -99);
        if (jnum(args, "device_us", -1) < 0) t->bad_times++;
        const char *dev = pid_name(ev, pid);
        if (!strcmp(dev, "cpu")) {
            if (t->cpu_pid < 0) t->cpu_pid = pid, t->cpu_tid = tid;
            if (pid != t->cpu_pid || tid != t->cpu_tid) t->cpu_pid = -2; /* one stream, one track */
            const char *how = jstr(args, "device_time");
            t->cpu_event_timed += how && !strcmp(how, "events");
            if (step == 0 && !strcmp(name, "binary")) t->step0_binary++;
            if (step == 0 && !strcmp(name, "gemm")) t->step0_gemm++;
            if (step == 1 && !strcmp(name, "fill")) t->step1_fill++;
            if (step == -1 && !strcmp(name, "fill")) t->untagged_fill++;
        } else if (!strcmp(dev, "sim:0")) {
            if (t->sim_pid < 0) t->sim_pid = pid, t->sim_tid = tid;
            if (pid != t->sim_pid || tid != t->sim_tid) t->sim_pid = -2;
            t->sim_events++;
        } else if (!strcmp(dev, "testplug:0")) {
            t->tp_pid = pid;
            if (!strcmp(name, "softmax_fwd")) {
                const char *path = jstr(args, "path");
                t->tp_softmax += path && !strcmp(path, "cpu fallback");
                /* a 4 x 8 fp32 input staged in, the output copied back: 2 * 128 bytes */
                t->tp_softmax_bytes_ok += jnum(args, "bytes", 0) == 256;
            }
        }
        t->named_tids += tid_named(ev, pid, tid);
    }
}

/* The count column of `slot`'s row under "Tag: <tag>" in a report; -1 when absent. */
static long report_count(const char *path, const char *tag, const char *slot) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512], want[64];
    snprintf(want, sizeof want, "Tag: %s\n", tag);
    bool in = false;
    long count = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "Tag: ", 5)) in = !strcmp(line, want);
        char name[64];
        long c;
        if (in && sscanf(line, "%63s %ld", name, &c) == 2 && !strcmp(name, slot)) {
            count = c;
            break;
        }
    }
    fclose(f);
    return count;
}

static bool file_has(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

static long lines_starting_digit(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    long n = 0;
    while (fgets(line, sizeof line, f)) n += line[0] >= '0' && line[0] <= '9';
    fclose(f);
    return n;
}

int main(void) {
    CHECK(load_jansson());
    it_device cpu = it_device_cpu(), sim, tp;
    bool have_sim = it_device_parse("sim:0", &sim) == IT_OK;
    bool have_tp = it_device_parse("testplug:0", &tp) == IT_OK;
    CHECK(have_sim);
    CHECK(have_tp);
    it_error_clear();
    const int64_t shape[2] = {4, 8}, wshape[2] = {8, 8};

    it_scope_begin();
    it_tensor *a = it_tensor_full(cpu, IT_DTYPE_FP32, 2, shape, it_scalar_f64(1.0));
    it_tensor *b = it_tensor_full(cpu, IT_DTYPE_FP32, 2, shape, it_scalar_f64(2.0));
    it_tensor *w = it_tensor_full(cpu, IT_DTYPE_FP32, 2, wshape, it_scalar_f64(0.5));
    CHECK(a && b && w);

    /* ---- closed: nothing is recorded, the calls still run */
    CHECK(!it_profile_enabled());
    CHECK_OK(it_tensor_fill(a, it_scalar_f64(1.0)));
    CHECK(it_add(a, b) != NULL);
    CHECK(it_profile_call_count() == 0);
    CHECK_ERR(it_profile_end(), IT_ERR_INVALID_ARG, "none is open");
    CHECK_ERR(it_profile_begin("", 0), IT_ERR_INVALID_ARG, "path is empty");
    CHECK_ERR(it_profile_report(stdout, IT_PROFILE_SORT_COUNT), IT_ERR_INVALID_ARG, "none is open");

    /* ---- open: untagged, step 0, step 1, then sim and testplug in step 2 */
    uint64_t fill0 = slot_calls(cpu.backend, "fill"), bin0 = slot_calls(cpu.backend, "binary"),
             gemm0 = slot_calls(cpu.backend, "gemm");
    CHECK_OK(it_profile_begin(PREFIX, 0));
    CHECK(it_profile_enabled());
    CHECK_ERR(it_profile_begin(PREFIX, 0), IT_ERR_INVALID_ARG, "already open");
    CHECK_OK(it_tensor_fill(a, it_scalar_f64(3.0))); /* untagged */

    it_profile_step_begin(0);
    for (int i = 0; i < 3; i++) CHECK(it_add(a, b) != NULL);
    it_tensor *y = it_matmul(a, w, false, false);
    CHECK(y != NULL);
    double v = 0;
    const int64_t at[2] = {1, 2};
    CHECK_OK(it_tensor_item(y, at, &v));
    CHECK_NEAR(v, 8 * 3.0 * 0.5, 0); /* the profiled calls computed what they compute unprofiled */
    it_profile_step_end(0, (size_t)1 << 20, (size_t)3 << 20);

    it_profile_step_begin(1);
    for (int i = 0; i < 2; i++) CHECK_OK(it_tensor_fill(b, it_scalar_f64(i)));
    it_profile_step_end(1, (size_t)2 << 20, (size_t)5 << 20);

    CHECK(slot_calls(cpu.backend, "fill") - fill0 == 3);
    CHECK(slot_calls(cpu.backend, "binary") - bin0 == 3);
    CHECK(slot_calls(cpu.backend, "gemm") - gemm0 == 1);

    int sim_calls = 0;
    it_profile_step_begin(2);
    if (have_sim) {
        uint64_t s0 = 0, s1 = 0;
        it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
        if (!it_backend_kernel_stats(sim.backend, st))
            for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) s0 += st[i].calls;
        it_tensor *sa = it_tensor_to_device(a, sim), *sb = it_tensor_to_device(b, sim);
        it_tensor *sc = it_add(sa, sb);
        CHECK(sc != NULL);
        CHECK_OK(it_tensor_item(sc, at, &v));
        CHECK_NEAR(v, 3.0 + 1.0, 0);
        if (!it_backend_kernel_stats(sim.backend, st))
            for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) s1 += st[i].calls;
        sim_calls = (int)(s1 - s0);
        CHECK(sim_calls >= 1);
    }
    if (have_tp) {
        it_tensor *ta = it_tensor_to_device(a, tp);
        CHECK(it_softmax(ta, 1.0f, false) != NULL);
    }
    it_profile_step_end(2, 0, 0);
    uint64_t recorded = it_profile_call_count();
    CHECK(recorded >= 3 + 3 + 1 + (uint64_t)sim_calls + (have_tp ? 1 : 0));
    CHECK_OK(it_profile_report(stdout, IT_PROFILE_SORT_COUNT));
    CHECK_OK(it_profile_end());
    CHECK(!it_profile_enabled());

    /* ---- closed again: nothing more is recorded */
    CHECK_OK(it_tensor_fill(a, it_scalar_f64(1.0)));
    CHECK(it_profile_call_count() == 0);

    /* ---- the trace */
    json_error_t err;
    json_t *root = J.load_file(PREFIX ".trace.rank0.json", 0, &err);
    CHECK_MSG(root != NULL, "trace is not JSON: line %d: %s", err.line, err.text);
    const json_t *ev = root ? J.object_get(root, "traceEvents") : NULL;
    CHECK(ev && json_is_array(ev));
    if (ev) {
        tally t;
        tally_trace(ev, &t);
        CHECK_MSG(t.events == (int)recorded, "%d kernel events, %llu calls recorded", t.events,
                  (unsigned long long)recorded);
        CHECK(t.bad_times == 0);
        CHECK(t.untagged_fill == 1);
        CHECK(t.step0_binary == 3);
        CHECK(t.step0_gemm == 1);
        CHECK(t.step1_fill == 2);
        CHECK(t.cpu_pid >= 1); /* every cpu call on the one cpu stream's track */
        CHECK(t.cpu_event_timed > 0);
        if (have_sim) {
            CHECK(t.sim_events == sim_calls);
            CHECK(t.sim_pid >= 1);
            CHECK(t.sim_pid != t.cpu_pid);
            CHECK(t.sim_tid != t.cpu_tid); /* tids are unique across streams */
        }
        if (have_tp) {
            CHECK(t.tp_softmax == 1);
            CHECK(t.tp_softmax_bytes_ok == 1);
        }
        CHECK(t.named_tids == t.events);
        CHECK(t.steps == 3);
        CHECK(t.counters == 3);
    }
    if (root) J.del(root);

    /* ---- the report and the call log */
    const char *rep = PREFIX ".report.rank0";
    CHECK(file_has(rep, "=== Profiler Report for Rank 0 ==="));
    CHECK(file_has(rep, "Name                                    Count     Host Total(us)    Host %    "));
    CHECK(report_count(rep, "Untagged", "fill") == 1);
    CHECK(report_count(rep, "Step_0", "binary") == 3);
    CHECK(report_count(rep, "Step_0", "gemm") == 1);
    CHECK(report_count(rep, "Step_0", "fill") == -1);
    CHECK(report_count(rep, "Step_1", "fill") == 2);
    CHECK(file_has(rep, "Peak Device Memory Usage: 3 MB"));
    CHECK(file_has(rep, "Peak Device Memory Usage: 5 MB"));
    if (have_tp) CHECK(report_count(rep, "Step_2", "softmax_fwd") == 1);
    const char *log = PREFIX ".records.log.rank0";
    CHECK(file_has(log, "=== Kernel Call Log for Rank 0 ==="));
    CHECK(lines_starting_digit(log) == (long)recorded);

    /* ---- an unwritable path: the profile still closes, with the file named */
    CHECK_OK(it_profile_begin(IT_BINARY_DIR "/no/such/dir/p", 3));
    CHECK_OK(it_tensor_fill(a, it_scalar_f64(1.0)));
    CHECK_ERR(it_profile_end(), IT_ERR_IO, "no/such/dir/p.");
    CHECK(!it_profile_enabled());

    it_scope_end();
    remove(PREFIX ".trace.rank0.json");
    remove(rep);
    remove(log);
    return it_test_report("test_profile");
}
