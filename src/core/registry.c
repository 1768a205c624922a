/* The backend registry: registration and validation, plugin discovery and loading, lazy
 * runtime init, device naming, and the per-device state (allocator, stream).
 *
 * The registry is one of the two pieces of global mutable state the architecture allows;
 * every access holds `reg_lock`. Entries are never removed, so a pointer to an entry (and
 * to the backend it holds) stays valid for the life of the process. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

#define IT_MAX_BACKENDS 32
#define IT_MAX_DEVICES 64

typedef struct reg_entry {
    const it_backend *backend;
    char origin[PATH_MAX]; /* "built in" or the plugin's path */
    bool init_done;
    it_status init_status;
    char init_error[512];
    int device_count;
    it_allocator *alloc[IT_MAX_DEVICES];
    it_stream *stream[IT_MAX_DEVICES];
    it__dispatch *dispatch; /* effective kernel table + statistics */
} reg_entry;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_entry reg[IT_MAX_BACKENDS];
static int reg_count;

extern const it_backend it_cpu_backend;

/* IT_KERNEL_SLOTS lists the members of it_kernels in order, each once: entry i names
 * member i. A slot inserted, moved or appended in one and not the other fails here. */
enum {
#define SLOT_POS(slot) slot_pos_##slot,
    IT_KERNEL_SLOTS(SLOT_POS)
#undef SLOT_POS
        slots_listed
};
_Static_assert((size_t)slots_listed == IT_KERNEL_SLOT_COUNT, "IT_KERNEL_SLOTS must list every it_kernels slot");
#define SLOT_AT_POS(slot)                                                                                              \
    _Static_assert(IT_SLOT(slot) == (size_t)slot_pos_##slot, "IT_KERNEL_SLOTS lists " #slot " out of order");
IT_KERNEL_SLOTS(SLOT_AT_POS)
#undef SLOT_AT_POS

/* Each name keyed by its member's index, so it cannot land on another slot. */
#define SLOT_NAME(slot) [IT_SLOT(slot)] = #slot,
static const char *const slot_names[IT_KERNEL_SLOT_COUNT] = {IT_KERNEL_SLOTS(SLOT_NAME)};
#undef SLOT_NAME

const char *it_kernel_slot_name(size_t slot) { return slot < IT_KERNEL_SLOT_COUNT ? slot_names[slot] : NULL; }

bool it_kernel_slot_fused(size_t slot) {
    return slot == IT_SLOT(attention_fwd) || slot == IT_SLOT(attention_bwd) || slot == IT_SLOT(adam_step_round) ||
           slot == IT_SLOT(cross_entropy_low_fwd) || slot == IT_SLOT(cross_entropy_low_bwd) ||
           slot == IT_SLOT(swiglu_low_fwd) || slot == IT_SLOT(swiglu_low_bwd) || slot == IT_SLOT(flash_attention_fwd) ||
           slot == IT_SLOT(flash_attention_bwd);
}

/* The table of API version 6 (cast .. attention_bwd, 23 slots): what kernels_size 0 and
 * api_version 5 stand for. Pinned to attention_bwd, so slots appended later leave it be. */
#define KERNELS_SIZE_API6 (offsetof(it_kernels, attention_bwd) + sizeof(void (*)(void)))
/* The smallest table a backend may declare: the required slots. */
#define KERNELS_SIZE_MIN (offsetof(it_kernels, copy_strided) + sizeof(void (*)(void)))

/* The bytes of b->kernels the backend was built with. */
static size_t declared_kernels_size(const it_backend *b) {
    /* a version 5 it_backend ends before kernels_size: it is not read there */
    if (b->api_version == 5 || b->kernels_size == 0) return KERNELS_SIZE_API6;
    return b->kernels_size;
}

static bool valid_name(const char *name) {
    if (!name || !*name || strlen(name) > 32) return false;
    for (const char *p = name; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_')) return false;
    return true;
}

static reg_entry *find_locked(const char *name) {
    for (int i = 0; i < reg_count; i++)
        if (strcmp(reg[i].backend->name, name) == 0) return &reg[i];
    return NULL;
}

/* Validate everything about a backend before it becomes visible. */
static it_status validate(const it_backend *b) {
    if (!b) return it_error(IT_ERR_INVALID_ARG, "backend registration: NULL backend");
    if (b->api_version < 5 || b->api_version > IT_BACKEND_API_VERSION)
        return it_error(IT_ERR_INVALID_ARG,
                        "backend '%s': api_version %d does not match this core's IT_BACKEND_API_VERSION %d "
                        "(which also loads versions 5 to 7; rebuild the backend against this version of backend.h)",
                        b->name ? b->name : "(null)", b->api_version, IT_BACKEND_API_VERSION);
    if (!valid_name(b->name))
        return it_error(IT_ERR_INVALID_ARG, "backend name '%s' is invalid: use 1-32 characters of lowercase [a-z0-9_]",
                        b->name ? b->name : "(null)");
    if (b->default_autocast_dtype != IT_DTYPE_BF16 && b->default_autocast_dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_INVALID_ARG, "backend '%s': default_autocast_dtype must be bf16 or fp16, got %d",
                        b->name, (int)b->default_autocast_dtype);
    const it_runtime *r = b->runtime;
    if (!r) return it_error(IT_ERR_INVALID_ARG, "backend '%s': no runtime table", b->name);
    char missing[512] = "";
#define NEED_RT(slot)                                                                                                  \
    if (!r->slot) strncat(missing, missing[0] ? ", " #slot : #slot, sizeof missing - strlen(missing) - 1)
    NEED_RT(init);
    NEED_RT(device_count);
    NEED_RT(set_device);
    NEED_RT(get_device);
    NEED_RT(default_stream);
    NEED_RT(stream_synchronize);
    NEED_RT(malloc);
    NEED_RT(free);
    NEED_RT(memcpy);
    NEED_RT(mem_info);
    NEED_RT(synchronize_device);
#undef NEED_RT
    if (missing[0])
        return it_error(IT_ERR_INVALID_ARG, "backend '%s': required runtime functions missing: %s", b->name, missing);
    const it_kernels *k = b->kernels;
    if (!k) return it_error(IT_ERR_INVALID_ARG, "backend '%s': no kernel table", b->name);
    size_t ksize = declared_kernels_size(b);
    if (ksize < KERNELS_SIZE_MIN || ksize % sizeof(void (*)(void)))
        return it_error(IT_ERR_INVALID_ARG,
                        "backend '%s': kernels_size %zu is not a table of whole slots from cast to at least "
                        "copy_strided (set it to sizeof(it_kernels), %zu in this core)",
                        b->name, ksize, sizeof(it_kernels));
    if (!k->cast) strcat(missing, "cast");
    if (!k->fill) strcat(missing, missing[0] ? ", fill" : "fill");
    if (!k->copy_strided) strcat(missing, missing[0] ? ", copy_strided" : "copy_strided");
    if (missing[0]) return it_error(IT_ERR_INVALID_ARG, "backend '%s': required kernels missing: %s", b->name, missing);
    const it_ccl *c = b->ccl;
    if (c && b->api_version >= 7 && !c->group_start != !c->group_end)
        return it_error(IT_ERR_INVALID_ARG,
                        "backend '%s': ccl group_start and group_end go together: set both or neither", b->name);
    return IT_OK;
}

bool it_backend_ccl_groups(const it_backend *b) {
    /* a table of version 6 or 5 ends at request_wait: the slots after it are not read */
    const it_ccl *c = b ? b->ccl : NULL;
    return c && b->api_version >= 7 && c->group_start && c->group_end && c->send && c->recv;
}

static it_status register_locked(const it_backend *b, const char *origin) {
    it_status st = validate(b);
    if (st) return st;
    reg_entry *old = find_locked(b->name);
    if (old)
        return it_error(IT_ERR_INVALID_ARG, "backend name '%s' is already registered (by %s)", b->name, old->origin);
    if (reg_count == IT_MAX_BACKENDS)
        return it_error(IT_ERR_INVALID_ARG, "cannot register backend '%s': %d backends already registered", b->name,
                        IT_MAX_BACKENDS);
    reg_entry *e = &reg[reg_count];
    memset(e, 0, sizeof *e);
    e->dispatch = it__dispatch_new(b, declared_kernels_size(b));
    if (!e->dispatch) return it_error(IT_ERR_OOM, "registering backend '%s': out of host memory", b->name);
    e->backend = b;
    snprintf(e->origin, sizeof e->origin, "%s", origin);
    reg_count++;
    return IT_OK;
}

/* The CPU backend is entry 0, before any other. Its registration fails only for want of
 * host memory (the core's own table passes validation); callers then return that error and
 * register nothing else, the next call tries again, and those that return no status see an
 * empty registry (no backends, a cpu device that fails at first use). */
static it_status ensure_cpu_locked(void) {
    if (reg_count > 0) return IT_OK;
    it_status st = register_locked(&it_cpu_backend, "built in");
    return st ? it_error_context("registering the built-in cpu backend: ") : IT_OK;
}

it_status it_backend_register(const it_backend *backend) {
    pthread_mutex_lock(&reg_lock);
    it_status st = ensure_cpu_locked();
    if (!st) st = register_locked(backend, "it_backend_register");
    pthread_mutex_unlock(&reg_lock);
    return st;
}

/* ---------------------------------------------------------------- plugin discovery */

/* Directories searched for plugins, in order: beside the executable, the installed plugin
 * directory of an installed executable (PREFIX/bin/../lib/infinitrain, when it exists), then
 * IT_BACKEND_PATH. */
static int plugin_dirs_from(char dirs[][PATH_MAX], int max, int *n_exe, int *n_installed) {
    int n = 0;
    *n_exe = *n_installed = 0;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dirs[n++], PATH_MAX, "%s", exe[0] ? exe : "/");
            *n_exe = 1;
#ifdef IT_PLUGIN_RELDIR
            char installed[PATH_MAX + 64];
            snprintf(installed, sizeof installed, "%s/%s", exe, IT_PLUGIN_RELDIR);
            char real[PATH_MAX];
            DIR *d = opendir(installed);
            if (d) {
                closedir(d);
                if (realpath(installed, real) && strcmp(real, dirs[0]) != 0) {
                    snprintf(dirs[n++], PATH_MAX, "%s", real);
                    *n_installed = 1;
                }
            }
#endif
        }
    }
    const char *env = getenv("IT_BACKEND_PATH");
    if (env) {
        const char *p = env;
        while (*p && n < max) {
            const char *colon = strchr(p, ':');
            size_t l = colon ? (size_t)(colon - p) : strlen(p);
            if (l > 0 && l < PATH_MAX) {
                memcpy(dirs[n], p, l);
                dirs[n][l] = '\0';
                n++;
            }
            if (!colon) break;
            p = colon + 1;
        }
    }
    return n;
}

static int plugin_dirs(char dirs[][PATH_MAX], int max) {
    int n_exe, n_installed;
    return plugin_dirs_from(dirs, max, &n_exe, &n_installed);
}

void it_backend_search_path(char *buf, size_t size) {
    char dirs[16][PATH_MAX];
    int n_exe, n_installed;
    int nd = plugin_dirs_from(dirs, 16, &n_exe, &n_installed);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < nd && used + 1 < size; i++) {
        const char *kind = i < n_exe                 ? "beside the executable"
                           : i < n_exe + n_installed ? "installed plugins"
                                                     : "IT_BACKEND_PATH";
        int w = snprintf(buf + used, size - used, "%s%s (%s)", i ? ", " : "", dirs[i], kind);
        if (w < 0) break;
        used += (size_t)w < size - used ? (size_t)w : size - used - 1;
    }
    if (nd == 0) snprintf(buf, size, "(none)");
}

it_status it_backend_discover(char names[][40], int max, int *count) {
    char dirs[16][PATH_MAX];
    int nd = plugin_dirs(dirs, 16), n = 0;
    for (int i = 0; i < nd; i++) {
        DIR *d = opendir(dirs[i]);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            const char *nm = de->d_name;
            size_t l = strlen(nm);
            if (strncmp(nm, "libit_backend_", 14) != 0 || l < 18 || strcmp(nm + l - 3, ".so") != 0) continue;
            size_t bl = l - 17;
            if (bl == 0 || bl >= 40) continue;
            char bname[40];
            memcpy(bname, nm + 14, bl);
            bname[bl] = '\0';
            bool dup = false;
            for (int j = 0; j < n; j++) dup |= strcmp(names[j], bname) == 0;
            if (!dup && n < max) snprintf(names[n++], 40, "%s", bname);
        }
        closedir(d);
    }
    *count = n;
    return IT_OK;
}

/* Describe what is available, for "not found" messages. */
static void describe_available(char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "registered: ");
    for (int i = 0; i < reg_count && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", reg[i].backend->name);
    char names[32][40];
    int n = 0;
    it_backend_discover(names, 32, &n);
    if (off < size) off += (size_t)snprintf(buf + off, size - off, "; discoverable plugins: ");
    if (n == 0 && off < size) off += (size_t)snprintf(buf + off, size - off, "none");
    for (int i = 0; i < n && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", names[i]);
}

int it__edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* " (did you mean 'x'?)" for the registered or discoverable name nearest to `name` (at most 2
 * edits, or a prefix of it), else "". */
static void nearest_backend(const char *name, char *buf, size_t size) {
    char names[64][40];
    int n = 0, best = 3;
    for (int i = 0; i < reg_count && n < 32; i++) snprintf(names[n++], 40, "%s", reg[i].backend->name);
    int found = 0;
    it_backend_discover(names + n, 32, &found);
    n += found;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        int d = it__edit_distance(name, names[i]);
        if (d < best || (best > 1 && strncmp(names[i], name, strlen(name)) == 0 && *name)) {
            best = d < best ? d : 1;
            snprintf(buf, size, " (did you mean '%.39s'?)", names[i]);
        }
    }
}

/* The source tree this core was built from has backends/<name>/ but no plugin came of it:
 * the build tree was configured before the directory existed (or its build failed). */
static void unbuilt_hint(const char *name, char *buf, size_t size) {
#ifdef IT_CORE_SOURCE_DIR
    char list[PATH_MAX];
    snprintf(list, sizeof list, "%s/backends/%.40s/CMakeLists.txt", IT_CORE_SOURCE_DIR, name);
    if (access(list, F_OK) == 0)
        snprintf(buf, size,
                 "\n  the source directory %s/backends/%s exists but its plugin was not built: run "
                 "`cmake --build %s` again (it re-runs the configure step and builds libit_backend_%s.so; "
                 "a build tree configured by an older checkout needs `cmake -S %s -B %s` once)",
                 IT_CORE_SOURCE_DIR, name, IT_CORE_BINARY_DIR, name, IT_CORE_SOURCE_DIR, IT_CORE_BINARY_DIR);
#else
    (void)name;
    (void)buf;
    (void)size;
#endif
}

/* Load libit_backend_<name>.so from the search path. Called with reg_lock held. */
static it_status load_plugin_locked(const char *name) {
    char dirs[16][PATH_MAX];
    int nd = plugin_dirs(dirs, 16);
    char tried[2048] = "";
    size_t off = 0;
    for (int i = 0; i < nd; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%.4000s/libit_backend_%.40s.so", dirs[i], name);
        const char *why = NULL;
        char whybuf[600];
        if (access(path, F_OK) != 0) {
            why = "no such file";
        } else {
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                snprintf(whybuf, sizeof whybuf, "dlopen failed: %s", dlerror());
                why = whybuf;
            } else {
                union {
                    void *p;
                    it_backend_entry_fn fn;
                } sym;
                sym.p = dlsym(h, IT_BACKEND_ENTRY_SYMBOL);
                if (!sym.p) {
                    snprintf(whybuf, sizeof whybuf, "no entry symbol %s: %s", IT_BACKEND_ENTRY_SYMBOL, dlerror());
                    why = whybuf;
                } else {
                    const it_backend *b = sym.fn();
                    if (!b) {
                        why = "entry returned NULL";
                    } else if (b->name && strcmp(b->name, name) != 0 && valid_name(b->name)) {
                        snprintf(whybuf, sizeof whybuf, "plugin registers the name '%s', not '%s'", b->name, name);
                        why = whybuf;
                    } else if (register_locked(b, path) != IT_OK) {
                        snprintf(whybuf, sizeof whybuf, "%s", it_last_error());
                        why = whybuf;
                    } else {
                        return IT_OK; /* the handle stays open for the life of the process */
                    }
                }
                dlclose(h);
            }
        }
        if (off < sizeof tried) off += (size_t)snprintf(tried + off, sizeof tried - off, "\n  %s: %s", path, why);
    }
    char avail[1024], hint[PATH_MAX + 512] = "", near[80];
    describe_available(avail, sizeof avail);
    nearest_backend(name, near, sizeof near);
    if (nd == 0) snprintf(tried, sizeof tried, "\n  (no search directories)");
    unbuilt_hint(name, hint, sizeof hint);
    return it_error(IT_ERR_NOT_FOUND, "unknown backend '%s'%s (%s); searched:%s%s", name, near, avail, tried, hint);
}

it_status it_backend_find(const char *name, const it_backend **out) {
    if (!name || !*name) return it_error(IT_ERR_INVALID_ARG, "empty backend name");
    pthread_mutex_lock(&reg_lock);
    it_status st = ensure_cpu_locked();
    reg_entry *e = st ? NULL : find_locked(name);
    if (!e && !st) {
        if (!valid_name(name)) {
            char avail[1024];
            describe_available(avail, sizeof avail);
            st =
                it_error(IT_ERR_INVALID_ARG, "'%s' is not a valid backend name (lowercase [a-z0-9_]; %s)", name, avail);
        } else {
            st = load_plugin_locked(name);
            if (!st) e = find_locked(name);
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (st) return st;
    *out = e->backend;
    return IT_OK;
}

int it_backend_count(void) {
    pthread_mutex_lock(&reg_lock);
    int n = ensure_cpu_locked() == IT_OK ? reg_count : 0; /* the error says why there are none */
    pthread_mutex_unlock(&reg_lock);
    return n;
}

const it_backend *it_backend_at(int i) {
    pthread_mutex_lock(&reg_lock);
    bool ok = ensure_cpu_locked() == IT_OK;
    const it_backend *b = ok && i >= 0 && i < reg_count ? reg[i].backend : NULL;
    pthread_mutex_unlock(&reg_lock);
    return b;
}

const char *it_backend_origin(const it_backend *b) {
    const char *o = "unregistered";
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < reg_count; i++)
        if (reg[i].backend == b) o = reg[i].origin;
    pthread_mutex_unlock(&reg_lock);
    return o;
}

/* ---------------------------------------------------------------- lazy init, devices */

static reg_entry *entry_of_locked(const it_backend *b) {
    for (int i = 0; i < reg_count; i++)
        if (reg[i].backend == b) return &reg[i];
    return NULL;
}

/* Run init once; remember a failure (and its message) so every later use reports it. */
static it_status ready_locked(reg_entry *e) {
    if (!e->init_done) {
        e->init_done = true;
        const it_runtime *r = e->backend->runtime;
        it_status st = r->init();
        int n = 0;
        if (!st) st = r->device_count(&n);
        if (!st && (n < 0 || n > IT_MAX_DEVICES)) {
            st = it_error(IT_ERR_BACKEND, "backend '%s' reports %d devices (supported: 0..%d)", e->backend->name, n,
                          IT_MAX_DEVICES);
        }
        e->init_status = st;
        e->device_count = st ? 0 : n;
        if (st) snprintf(e->init_error, sizeof e->init_error, "%s", it_last_error());
    }
    if (e->init_status)
        return it_error(e->init_status, "backend '%s' failed to initialize: %s", e->backend->name, e->init_error);
    return IT_OK;
}

it_status it__backend_ready(const it_backend *backend) {
    pthread_mutex_lock(&reg_lock);
    it_status st = ensure_cpu_locked();
    reg_entry *e = st ? NULL : entry_of_locked(backend);
    if (!st) st = e ? ready_locked(e) : it_error(IT_ERR_NOT_FOUND, "backend %p is not registered", (void *)backend);
    pthread_mutex_unlock(&reg_lock);
    return st;
}

it_status it_device_count(const it_backend *backend, int *count) {
    pthread_mutex_lock(&reg_lock);
    it_status st = ensure_cpu_locked();
    reg_entry *e = st ? NULL : entry_of_locked(backend);
    if (!st) st = e ? ready_locked(e) : it_error(IT_ERR_NOT_FOUND, "backend is not registered");
    if (!st) *count = e->device_count;
    pthread_mutex_unlock(&reg_lock);
    return st;
}

it_status it_device_parse(const char *text, it_device *out) {
    if (!text || !*text) return it_error(IT_ERR_INVALID_ARG, "empty device name (expected NAME or NAME:INDEX)");
    char name[64];
    const char *colon = strchr(text, ':');
    size_t nl = colon ? (size_t)(colon - text) : strlen(text);
    if (nl == 0 || nl >= sizeof name)
        return it_error(IT_ERR_INVALID_ARG, "device '%s': expected NAME or NAME:INDEX (e.g. cpu, sim:1)", text);
    memcpy(name, text, nl);
    name[nl] = '\0';
    long index = 0;
    if (colon) {
        char *end = NULL;
        const char *digits = colon + 1;
        if (!isdigit((unsigned char)*digits))
            return it_error(IT_ERR_INVALID_ARG, "device '%s': index '%s' is not a non-negative integer", text, digits);
        index = strtol(digits, &end, 10);
        if (*end || index > 1000000)
            return it_error(IT_ERR_INVALID_ARG, "device '%s': index '%s' is not a non-negative integer", text, digits);
    }
    const it_backend *b = NULL;
    it_status st = it_backend_find(name, &b);
    if (st) return st;
    int count = 0;
    st = it_device_count(b, &count);
    if (st) return st;
    if (index >= count)
        return it_error(IT_ERR_INVALID_ARG, "device '%s': index %ld out of range (backend '%s' has %d device%s)", text,
                        index, name, count, count == 1 ? "" : "s");
    out->backend = b;
    out->index = (int)index;
    return IT_OK;
}

it_device it_device_cpu(void) {
    pthread_mutex_lock(&reg_lock);
    /* without an entry the device fails at first use, with the registration's message */
    if (ensure_cpu_locked() == IT_OK && !reg[0].init_done) ready_locked(&reg[0]);
    pthread_mutex_unlock(&reg_lock);
    it_device d = {&it_cpu_backend, 0};
    return d;
}

bool it_device_equal(it_device a, it_device b) { return a.backend == b.backend && a.index == b.index; }

const char *it_device_str(it_device dev, char *buf, size_t size) {
    if (!dev.backend)
        snprintf(buf, size, "(no device)");
    else if (dev.index == 0 && dev.backend == &it_cpu_backend)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "%s:%d", dev.backend->name, dev.index);
    return buf;
}

/* Per-device state, created on first use. Fails when the device is not usable. */
static it_status device_state_locked(it_device dev, reg_entry **out) {
    it_status st = ensure_cpu_locked();
    if (st) return st;
    reg_entry *e = entry_of_locked(dev.backend);
    if (!e) return it_error(IT_ERR_NOT_FOUND, "device's backend is not registered");
    if ((st = ready_locked(e))) return st;
    if (dev.index < 0 || dev.index >= e->device_count)
        return it_error(IT_ERR_INVALID_ARG, "device index %d out of range (backend '%s' has %d devices)", dev.index,
                        dev.backend->name, e->device_count);
    if (!e->alloc[dev.index]) {
        it_stream *s = NULL;
        st = dev.backend->runtime->default_stream(dev.index, &s);
        if (st) return it_error_context("%s:%d default stream: ", dev.backend->name, dev.index);
        if ((st = it__allocator_new(&e->alloc[dev.index]))) return st;
        e->stream[dev.index] = s;
    }
    *out = e;
    return IT_OK;
}

it_allocator *it__allocator(it_device dev) {
    pthread_mutex_lock(&reg_lock);
    reg_entry *e = NULL;
    it_allocator *a = device_state_locked(dev, &e) ? NULL : e->alloc[dev.index];
    pthread_mutex_unlock(&reg_lock);
    return a;
}

it_stream *it__stream(it_device dev) {
    pthread_mutex_lock(&reg_lock);
    reg_entry *e = NULL;
    it_stream *s = device_state_locked(dev, &e) ? NULL : e->stream[dev.index];
    pthread_mutex_unlock(&reg_lock);
    return s;
}

it_status it_device_stream(it_device dev, it_stream **stream) {
    pthread_mutex_lock(&reg_lock);
    reg_entry *e = NULL;
    it_status st = device_state_locked(dev, &e);
    if (!st) *stream = e->stream[dev.index];
    pthread_mutex_unlock(&reg_lock);
    return st;
}

it_status it_device_synchronize(it_device dev) {
    it_stream *s = NULL;
    it_status st = it_device_stream(dev, &s);
    if (st) return st;
    st = dev.backend->runtime->stream_synchronize(s);
    if (st) return it_error_context("%s:%d synchronize: ", dev.backend->name, dev.index);
    return IT_OK;
}

it__dispatch *it__dispatch_of(const it_backend *backend) {
    pthread_mutex_lock(&reg_lock);
    it_status st = ensure_cpu_locked();
    reg_entry *e = st ? NULL : entry_of_locked(backend);
    it__dispatch *d = e ? e->dispatch : NULL;
    pthread_mutex_unlock(&reg_lock);
    if (!d && !st) it_error(IT_ERR_NOT_FOUND, "backend '%s' is not registered", backend ? backend->name : "(null)");
    return d;
}
