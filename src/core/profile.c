/* The kernel profiler (infinitrain/profile.h): per-call records taken in the dispatch path
 * (the hooks of core/profile_hooks.h) and the three files it_profile_end writes.
 *
 * Records are appended under one mutex to a growing array; the stream and device tables
 * that give the trace its tracks are filled as calls meet new streams. Times are
 * CLOCK_MONOTONIC nanoseconds from it_profile_begin; the call log's wall-clock stamps are
 * derived from the wall clock read at begin. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/profile_hooks.h"
#include "infinitrain/profile.h"
#include "infinitrain/tensor.h"

atomic_bool it__profiling;
_Thread_local bool it__prof_armed;

#define UNTAGGED (-1)
#define MAX_STREAMS 64
#define MAX_DEVICES 32

typedef struct prof_rec {
    uint64_t ts_ns;   /* start, after the stream drained, from begin */
    uint64_t host_ns; /* start to after the device finished the call */
    uint64_t dev_ns;  /* between the backend's events, or host_ns without them */
    uint64_t bytes;   /* moved by the CPU fallback */
    int32_t step;     /* UNTAGGED before the first step and between steps */
    uint16_t slot;
    uint16_t stream; /* index in prof.streams */
    bool fallback;   /* the CPU fallback served it */
    bool events;     /* dev_ns from events */
} prof_rec;

typedef struct prof_stream {
    const it_stream *stream;
    int device; /* index in prof.devices */
} prof_stream;

typedef struct prof_step {
    int step;
    uint64_t begin_ns, end_ns; /* end_ns 0: not ended */
    size_t peak_used, peak_reserved;
} prof_step;

static struct {
    pthread_mutex_t mu;
    bool open;
    char *path;
    int rank;
    it_profile_sort sort;
    uint64_t t0_ns;
    struct timespec t0_wall;
    int cur_step;
    prof_rec *recs;
    size_t n, cap;
    prof_step *steps;
    size_t nsteps, capsteps;
    prof_stream streams[MAX_STREAMS];
    int nstreams;
    it_device devices[MAX_DEVICES];
    int ndevices;
    bool overflow; /* more streams or devices than the tables hold: merged into the last */
} prof = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The armed call of this thread. */
typedef struct prof_call {
    uint64_t t0_ns;
    it_event *ev0, *ev1;
    uint64_t bytes;
} prof_call;
static _Thread_local prof_call pc;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- the dispatch hooks */

static bool has_events(const it_runtime *rt) {
    return rt->event_create && rt->event_destroy && rt->event_record && rt->event_synchronize && rt->event_elapsed_ms;
}

static void drop_events(const it_runtime *rt) {
    if (pc.ev0) rt->event_destroy(pc.ev0);
    if (pc.ev1) rt->event_destroy(pc.ev1);
    pc.ev0 = pc.ev1 = NULL;
}

it_status it__prof_pre(void) {
    const it_runtime *rt = it__kc.dev.backend->runtime;
    /* Only this call's own work is timed: what was queued before it finishes first. */
    it_status st = rt->stream_synchronize(it__kc.stream);
    if (st) return st;
    memset(&pc, 0, sizeof pc);
    if (has_events(rt)) {
        /* A runtime that cannot make or record an event times this call on the host. */
        if (rt->event_create(it__kc.dev.index, &pc.ev0) || rt->event_create(it__kc.dev.index, &pc.ev1) ||
            rt->event_record(pc.ev0, it__kc.stream)) {
            drop_events(rt);
            it_error_clear();
        }
    }
    pc.t0_ns = mono_ns();
    it__prof_armed = true;
    return IT_OK;
}

void it__prof_bytes(size_t n) {
    if (it__prof_armed) pc.bytes += n;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 4096;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Index of the stream in the track table (prof.mu held). */
static int stream_index(const it_stream *s, it_device dev) {
    for (int i = 0; i < prof.nstreams; i++)
        if (prof.streams[i].stream == s && it_device_equal(prof.devices[prof.streams[i].device], dev)) return i;
    int d = 0;
    while (d < prof.ndevices && !it_device_equal(prof.devices[d], dev)) d++;
    if (d == prof.ndevices) {
        if (d == MAX_DEVICES) {
            prof.overflow = true;
            d = MAX_DEVICES - 1;
        } else
            prof.devices[prof.ndevices++] = dev;
    }
    if (prof.nstreams == MAX_STREAMS) {
        prof.overflow = true;
        return MAX_STREAMS - 1;
    }
    prof.streams[prof.nstreams] = (prof_stream){s, d};
    return prof.nstreams++;
}

it_status it__prof_post(it_status st) {
    it__prof_armed = false;
    const it_runtime *rt = it__kc.dev.backend->runtime;
    uint64_t dev_ns = 0;
    bool events = false;
    it_status dst;
    if (pc.ev0 && !rt->event_record(pc.ev1, it__kc.stream)) {
        float ms = 0;
        /* the wait fails with the device's error when the call failed there: kept as the call's */
        dst = rt->event_synchronize(pc.ev1);
        if (!dst && !rt->event_elapsed_ms(pc.ev0, pc.ev1, &ms)) {
            events = true;
            dev_ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
        } else if (!dst)
            it_error_clear(); /* no elapsed time: the host clock stands in */
    } else {
        if (pc.ev0) it_error_clear(); /* the stop event would not record: time on the host */
        dst = rt->stream_synchronize(it__kc.stream);
    }
    drop_events(rt);
    uint64_t t1 = mono_ns(), host_ns = t1 - pc.t0_ns;
    if (!events) dev_ns = host_ns;
    if (!st && dst) st = dst; /* the call failed on the device: it is this call's error */

    pthread_mutex_lock(&prof.mu);
    if (prof.open && grow((void **)&prof.recs, &prof.cap, prof.n + 1, sizeof *prof.recs)) {
        prof.recs[prof.n++] = (prof_rec){
            .ts_ns = pc.t0_ns - prof.t0_ns,
            .host_ns = host_ns,
            .dev_ns = dev_ns,
            .bytes = pc.bytes,
            .step = prof.cur_step,
            .slot = (uint16_t)it__kc.slot,
            .stream = (uint16_t)stream_index(it__kc.stream, it__kc.dev),
            .fallback = !it__kernel_native(it__kc.dev, it__kc.slot) || it__kc.retried,
            .events = events,
        };
    }
    pthread_mutex_unlock(&prof.mu);
    return st;
}

/* ---------------------------------------------------------------- the session */

static void reset_locked(void) {
    free(prof.recs);
    free(prof.steps);
    free(prof.path);
    prof.recs = NULL;
    prof.steps = NULL;
    prof.path = NULL;
    prof.n = prof.cap = prof.nsteps = prof.capsteps = 0;
    prof.nstreams = prof.ndevices = 0;
    prof.overflow = false;
}

it_status it_profile_begin(const char *path, int rank) {
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "profile: the path is empty");
    if (rank < 0) return it_error(IT_ERR_INVALID_ARG, "profile: rank %d is negative", rank);
    pthread_mutex_lock(&prof.mu);
    if (prof.open) {
        pthread_mutex_unlock(&prof.mu);
        return it_error(IT_ERR_INVALID_ARG, "profile: one is already open (writing to '%s')", prof.path);
    }
    reset_locked();
    prof.path = strdup(path);
    if (!prof.path) {
        pthread_mutex_unlock(&prof.mu);
        return it_error(IT_ERR_OOM, "profile: out of host memory");
    }
    prof.rank = rank;
    prof.cur_step = UNTAGGED;
    prof.t0_ns = mono_ns();
    clock_gettime(CLOCK_REALTIME, &prof.t0_wall);
    prof.open = true;
    pthread_mutex_unlock(&prof.mu);
    atomic_store(&it__profiling, true);
    return IT_OK;
}

bool it_profile_enabled(void) { return atomic_load(&it__profiling); }

void it_profile_set_sort(it_profile_sort sort) {
    pthread_mutex_lock(&prof.mu);
    prof.sort = sort;
    pthread_mutex_unlock(&prof.mu);
}

void it_profile_step_begin(int step) {
    pthread_mutex_lock(&prof.mu);
    if (prof.open && grow((void **)&prof.steps, &prof.capsteps, prof.nsteps + 1, sizeof *prof.steps)) {
        prof.steps[prof.nsteps++] = (prof_step){.step = step, .begin_ns = mono_ns() - prof.t0_ns};
        prof.cur_step = step;
    }
    pthread_mutex_unlock(&prof.mu);
}

void it_profile_step_end(int step, size_t peak_used, size_t peak_reserved) {
    pthread_mutex_lock(&prof.mu);
    if (prof.open) {
        for (size_t i = prof.nsteps; i-- > 0;)
            if (prof.steps[i].step == step && !prof.steps[i].end_ns) {
                prof.steps[i].end_ns = mono_ns() - prof.t0_ns;
                if (!prof.steps[i].end_ns) prof.steps[i].end_ns = 1;
                prof.steps[i].peak_used = peak_used;
                prof.steps[i].peak_reserved = peak_reserved;
                break;
            }
        prof.cur_step = UNTAGGED;
    }
    pthread_mutex_unlock(&prof.mu);
}

uint64_t it_profile_call_count(void) {
    pthread_mutex_lock(&prof.mu);
    uint64_t n = prof.open ? prof.n : 0;
    pthread_mutex_unlock(&prof.mu);
    return n;
}

/* ---------------------------------------------------------------- the report */

/* Distinct tags in report order: steps by number (InfiniTrain's std::map orders the strings,
 * so Step_10 before Step_2: numbers read better), then Untagged. */
static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (x == UNTAGGED || y == UNTAGGED) return (x == UNTAGGED) - (y == UNTAGGED);
    return (x > y) - (x < y);
}

static int *tags_of(size_t *ntags) {
    int *t = malloc((prof.n ? prof.n : 1) * sizeof *t);
    if (!t) return NULL;
    for (size_t i = 0; i < prof.n; i++) t[i] = prof.recs[i].step;
    qsort(t, prof.n, sizeof *t, cmp_int);
    size_t k = 0;
    for (size_t i = 0; i < prof.n; i++)
        if (k == 0 || t[k - 1] != t[i]) t[k++] = t[i];
    *ntags = k;
    return t;
}

static void tag_name(int step, char *buf, size_t n) {
    if (step == UNTAGGED)
        snprintf(buf, n, "Untagged");
    else
        snprintf(buf, n, "Step_%d", step);
}

/* The step's reserved peak in MiB (the last record of the step wins; 0 when untagged). */
static uint64_t step_peak_mb(int step) {
    if (step == UNTAGGED) return 0;
    for (size_t i = prof.nsteps; i-- > 0;)
        if (prof.steps[i].step == step) return (uint64_t)(prof.steps[i].peak_reserved >> 20);
    return 0;
}

typedef struct slot_row {
    size_t slot;
    uint64_t count, host_us, dev_us;
} slot_row;

static it_profile_sort g_sort; /* qsort's key (prof.mu held) */

static int cmp_row(const void *pa, const void *pb) {
    const slot_row *a = pa, *b = pb;
    uint64_t x = 0, y = 0;
    switch (g_sort) {
    case IT_PROFILE_SORT_DEVICE_TOTAL: x = a->dev_us, y = b->dev_us; break;
    case IT_PROFILE_SORT_DEVICE_AVG: x = a->dev_us / a->count, y = b->dev_us / b->count; break;
    case IT_PROFILE_SORT_HOST_TOTAL: x = a->host_us, y = b->host_us; break;
    case IT_PROFILE_SORT_HOST_AVG: x = a->host_us / a->count, y = b->host_us / b->count; break;
    case IT_PROFILE_SORT_COUNT: x = a->count, y = b->count; break;
    case IT_PROFILE_SORT_NONE: break;
    }
    if (x != y) return x < y ? 1 : -1;
    return (a->slot > b->slot) - (a->slot < b->slot); /* equal keys: slot order, for a stable report */
}

/* InfiniTrain's Profiler::Report layout (profiler.cc): per tag a peak line and a table with
 * left-aligned columns of widths 40 10 18 10 20 10 16 18; times are whole microseconds
 * (each call's, truncated, summed), shares with two decimals, averages truncated. */
static it_status report_locked(FILE *f, it_profile_sort sort) {
    size_t ntags;
    int *tags = tags_of(&ntags);
    if (!tags) return it_error(IT_ERR_OOM, "profile: out of host memory");
    fprintf(f, "\n=== Profiler Report for Rank %d ===\n", prof.rank);
    for (size_t t = 0; t < ntags; t++) {
        slot_row rows[IT_KERNEL_SLOT_COUNT];
        for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++) rows[i] = (slot_row){.slot = i};
        uint64_t host_sum = 0, dev_sum = 0;
        for (size_t i = 0; i < prof.n; i++) {
            const prof_rec *r = &prof.recs[i];
            if (r->step != tags[t]) continue;
            slot_row *w = &rows[r->slot];
            w->count++;
            w->host_us += r->host_ns / 1000;
            w->dev_us += r->dev_ns / 1000;
            host_sum += r->host_ns / 1000;
            dev_sum += r->dev_ns / 1000;
        }
        size_t nr = 0;
        for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
            if (rows[i].count) rows[nr++] = rows[i];
        g_sort = sort;
        qsort(rows, nr, sizeof *rows, cmp_row);
        char tag[32];
        tag_name(tags[t], tag, sizeof tag);
        fprintf(f, "\nTag: %s\n", tag);
        fprintf(f, "Peak Device Memory Usage: %llu MB\n", (unsigned long long)step_peak_mb(tags[t]));
        fprintf(f, "%-40s%-10s%-18s%-10s%-20s%-10s%-16s%-18s\n", "Name", "Count", "Host Total(us)", "Host %",
                "Device Total(us)", "Device %", "Avg Host(us)", "Avg Device(us)");
        for (size_t i = 0; i < nr; i++) {
            const slot_row *w = &rows[i];
            fprintf(f, "%-40s%-10llu%-18llu%-10.2f%-20llu%-10.2f%-16llu%-18llu\n", it_kernel_slot_name(w->slot),
                    (unsigned long long)w->count, (unsigned long long)w->host_us,
                    host_sum ? 100.0 * (double)w->host_us / (double)host_sum : 0.0, (unsigned long long)w->dev_us,
                    dev_sum ? 100.0 * (double)w->dev_us / (double)dev_sum : 0.0,
                    (unsigned long long)(w->host_us / w->count), (unsigned long long)(w->dev_us / w->count));
        }
    }
    free(tags);
    return ferror(f) ? it_error(IT_ERR_IO, "profile: writing the report failed") : IT_OK;
}

it_status it_profile_report(FILE *f, it_profile_sort sort) {
    pthread_mutex_lock(&prof.mu);
    it_status st = prof.open ? report_locked(f, sort) : it_error(IT_ERR_INVALID_ARG, "profile: none is open");
    pthread_mutex_unlock(&prof.mu);
    return st;
}

static const char *device_name(int stream, char *buf, size_t n) {
    return it_device_str(prof.devices[prof.streams[stream].device], buf, n);
}

/* InfiniTrain's Profiler::PrintRecords layout: per tag, one line per call in call order,
 * columns 8 24 40 10 12 12 16. */
static void records_locked(FILE *f) {
    size_t ntags;
    int *tags = tags_of(&ntags);
    if (!tags) return;
    fprintf(f, "\n=== Kernel Call Log for Rank %d ===\n", prof.rank);
    for (size_t t = 0; t < ntags; t++) {
        char tag[32];
        tag_name(tags[t], tag, sizeof tag);
        fprintf(f, "\nTag: %s\n", tag);
        fprintf(f, "%-8s%-24s%-40s%-10s%-12s%-12s%-16s\n", "Idx", "Timestamp", "Name", "Device", "Host(us)",
                "Device(us)", "Peak Mem(MB)");
        uint64_t peak = step_peak_mb(tags[t]);
        size_t idx = 0;
        for (size_t i = 0; i < prof.n; i++) {
            const prof_rec *r = &prof.recs[i];
            if (r->step != tags[t]) continue;
            time_t sec = prof.t0_wall.tv_sec + (time_t)((r->ts_ns + (uint64_t)prof.t0_wall.tv_nsec) / 1000000000ull);
            struct tm tm;
            char stamp[24] = "", dev[32];
            if (localtime_r(&sec, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
            fprintf(f, "%-8zu%-24s%-40s%-10s%-12llu%-12llu%-16llu\n", idx++, stamp, it_kernel_slot_name(r->slot),
                    device_name(r->stream, dev, sizeof dev), (unsigned long long)(r->host_ns / 1000),
                    (unsigned long long)(r->dev_ns / 1000), (unsigned long long)peak);
        }
    }
    free(tags);
}

/* ---------------------------------------------------------------- the Chrome trace */

/* Trace Event Format (the JSON Array form inside an object): times in microseconds. pid 0
 * is the training loop (a track of steps, the memory counter); pid 1 + d is device d, with
 * one tid per stream (1 + the stream's index). Names are slot names, device names and
 * "Step_N": none needs escaping. */
static void trace_locked(FILE *f) {
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d},\"traceEvents\":[\n", prof.rank);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"training\"}},\n");
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"steps\"}}");
    char dev[32];
    for (int d = 0; d < prof.ndevices; d++)
        fprintf(f, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}", 1 + d,
                it_device_str(prof.devices[d], dev, sizeof dev));
    for (int s = 0; s < prof.nstreams; s++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"stream %d\"}}",
                1 + prof.streams[s].device, 1 + s, s);
    for (size_t i = 0; i < prof.nsteps; i++) {
        const prof_step *p = &prof.steps[i];
        uint64_t end = p->end_ns ? p->end_ns : p->begin_ns;
        char tag[32];
        tag_name(p->step, tag, sizeof tag);
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":0,"
                "\"args\":{\"step\":%d,\"peak_used_bytes\":%zu,\"peak_reserved_bytes\":%zu}}",
                tag, (double)p->begin_ns / 1e3, (double)(end - p->begin_ns) / 1e3, p->step, p->peak_used,
                p->peak_reserved);
        if (p->end_ns)
            fprintf(f,
                    ",\n{\"name\":\"peak memory (MiB)\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":0,\"tid\":0,"
                    "\"args\":{\"used\":%.3f,\"reserved\":%.3f}}",
                    (double)p->end_ns / 1e3, (double)p->peak_used / 1048576.0, (double)p->peak_reserved / 1048576.0);
    }
    for (size_t i = 0; i < prof.n; i++) {
        const prof_rec *r = &prof.recs[i];
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"step\":%d,\"device_us\":%.3f,\"device_time\":\"%s\",\"path\":\"%s\",\"bytes\":%llu}}",
                it_kernel_slot_name(r->slot), (double)r->ts_ns / 1e3, (double)r->host_ns / 1e3,
                1 + prof.streams[r->stream].device, 1 + r->stream, r->step, (double)r->dev_ns / 1e3,
                r->events ? "events" : "host", r->fallback ? "cpu fallback" : "native", (unsigned long long)r->bytes);
    }
    fprintf(f, "\n]}\n");
}

/* Write one of the files: PATH<suffix> with the rank in it. */
static it_status write_file(const char *fmt, void (*body)(FILE *), it_status (*rbody)(FILE *, it_profile_sort)) {
    size_t n = strlen(prof.path) + 64;
    char *name = malloc(n);
    if (!name) return it_error(IT_ERR_OOM, "profile: out of host memory");
    snprintf(name, n, fmt, prof.path, prof.rank);
    FILE *f = fopen(name, "w");
    it_status st = IT_OK;
    if (!f)
        st = it_error(IT_ERR_IO, "profile: cannot open '%s' for writing", name);
    else {
        if (body)
            body(f);
        else
            st = rbody(f, prof.sort);
        if (fclose(f) != 0 && !st) st = it_error(IT_ERR_IO, "profile: writing '%s' failed", name);
    }
    free(name);
    return st;
}

it_status it_profile_end(void) {
    pthread_mutex_lock(&prof.mu);
    if (!prof.open) {
        pthread_mutex_unlock(&prof.mu);
        return it_error(IT_ERR_INVALID_ARG, "profile: none is open");
    }
    /* Calls armed before this point and finishing after it see !prof.open and are dropped. */
    atomic_store(&it__profiling, false);
    prof.open = false;
    it_status st = write_file("%s.report.rank%d", NULL, report_locked);
    it_status s2 = write_file("%s.records.log.rank%d", records_locked, NULL);
    it_status s3 = write_file("%s.trace.rank%d.json", trace_locked, NULL);
    if (!st) st = s2 ? s2 : s3;
    reset_locked();
    pthread_mutex_unlock(&prof.mu);
    return st;
}
