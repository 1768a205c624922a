/* Run-time resolution of the Cambricon libraries (no SDK at build time, docs/backends/mlu.md C6).
 *
 * Each library is tried at $NEUWARE_HOME/lib64/<lib> (NEUWARE_HOME defaults to
 * /usr/local/neuware, the SDK's install root), then by bare name, which the dynamic loader
 * looks up on LD_LIBRARY_PATH and in ld.so.cache. libcnrt.so and libcnnl.so are required;
 * libcncl.so only serves the collectives. On failure init reports ONE message naming every
 * library, every path tried and the loader's reason, which `--device mlu` and `it-info`
 * show. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlu.h"

#define MLU_DEFAULT_NEUWARE "/usr/local/neuware"

int mlu_library_candidates(const char *lib, char paths[][512], int max) {
    int n = 0;
    const char *home = getenv("NEUWARE_HOME");
    if (!home || !*home) home = MLU_DEFAULT_NEUWARE;
    if (n < max) snprintf(paths[n++], 512, "%s/lib64/%s", home, lib);
    if (n < max) snprintf(paths[n++], 512, "%s", lib); /* LD_LIBRARY_PATH, ld.so.cache */
    return n;
}

/* Append printf output to msg (bounded). */
static void append(char *msg, size_t cap, const char *fmt, ...) IT_PRINTF(3, 4);
static void append(char *msg, size_t cap, const char *fmt, ...) {
    size_t len = strlen(msg);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + len, cap - len, fmt, ap);
    va_end(ap);
}

/* dlopen the first candidate that loads. On failure append the library's name to
 * `missing`, and the loader's reason to `why` unless it is plain "not there". */
static void *open_lib(const char *lib, char *missing, size_t mcap, char *why, size_t wcap) {
    char paths[4][512];
    int n = mlu_library_candidates(lib, paths, 4);
    char reason[256] = "";
    for (int i = 0; i < n; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        const char *e = dlerror();
        if (e && !strstr(e, "No such file or directory") && !reason[0]) snprintf(reason, sizeof reason, "%s", e);
    }
    append(missing, mcap, "%s%s", missing[0] ? ", " : "", lib);
    if (reason[0]) append(why, wcap, "; %s", reason);
    return NULL;
}

it_status mlu_api_load(mlu_api *api, char *note, size_t note_bytes) {
    memset(api, 0, sizeof *api);
    if (note_bytes) note[0] = '\0';
    char missing[128] = "", why[MLU_MSG_BYTES] = "", cncl_missing_lib[64] = "", cncl_why[MLU_MSG_BYTES] = "";
    void *cnrt = open_lib("libcnrt.so", missing, sizeof missing, why, sizeof why);
    void *cnnl = open_lib("libcnnl.so", missing, sizeof missing, why, sizeof why);
    void *cncl = open_lib("libcncl.so", cncl_missing_lib, sizeof cncl_missing_lib, cncl_why, sizeof cncl_why);
    const char *home = getenv("NEUWARE_HOME");
    bool home_set = home && *home;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/lib64", home_set ? home : MLU_DEFAULT_NEUWARE);
    if (!cnrt || !cnnl) {
        if (cnrt) dlclose(cnrt);
        if (cnnl) dlclose(cnnl);
        if (cncl) dlclose(cncl);
        return it_error(IT_ERR_NOT_FOUND,
                        "mlu: Cambricon runtime not found: libcnrt.so, libcnnl.so (and libcncl.so for collectives) "
                        "searched in %s (%s) and on the library path (LD_LIBRARY_PATH, ld.so.cache); missing: "
                        "%s%s%s%s (set NEUWARE_HOME to the SDK root)",
                        dir, home_set ? "NEUWARE_HOME" : "NEUWARE_HOME unset", missing, cncl ? "" : ", ",
                        cncl ? "" : cncl_missing_lib, why);
    }
    /* Resolve every symbol; a missing required one fails naming it and its library. */
#define MLU_RESOLVE(lib, ret, name, params, req)                                                                       \
    if (lib) {                                                                                                         \
        *(void **)&api->name = dlsym(lib, #name);                                                                      \
        if (!api->name && req) {                                                                                       \
            if (strcmp(#lib, "cncl") == 0) {                                                                           \
                cncl_missing = #name;                                                                                  \
            } else {                                                                                                   \
                return it_error(IT_ERR_NOT_FOUND,                                                                      \
                                "mlu: lib%s.so has no symbol %s (this backend targets CNRT >= 6, CNNL >= "             \
                                "1.25; check the SDK version)",                                                        \
                                #lib, #name);                                                                          \
            }                                                                                                          \
        }                                                                                                              \
    }
    const char *cncl_missing = NULL;
    MLU_CNRT_CALLS(MLU_RESOLVE)
    MLU_CNNL_CALLS(MLU_RESOLVE)
    MLU_CNCL_CALLS(MLU_RESOLVE)
#undef MLU_RESOLVE
    api->have_cncl = cncl && !cncl_missing;
    api->test_double = dlsym(cnrt, "it_cambricon_test_double");
    if (!cncl)
        snprintf(note, note_bytes, "collectives unavailable: libcncl.so not found in %s or on the library path%s", dir,
                 cncl_why);
    else if (cncl_missing)
        snprintf(note, note_bytes, "collectives unavailable: libcncl.so has no symbol %s", cncl_missing);
    return IT_OK;
}
