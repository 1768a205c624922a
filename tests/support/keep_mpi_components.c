/* Preloaded (after the ASan runtime) into the ranks of the multi-rank end-to-end tests in a
 * sanitizer build: Open MPI's and PMIx's components (mca_*.so, pmix_mca_*.so) are never
 * unloaded; every other dlclose goes through. See tests/e2e/mpi_common.bash.
 *
 * Why: Open MPI 4.1 dlcloses its components in MPI_Finalize (5.0 has an MCA parameter,
 * mca_base_component_disable_dlclose, for exactly this; 4.1, Debian 12's, has none). The
 * allocations they keep until exit are what tests/e2e/lsan-mpi.supp suppresses by library,
 * and once the library is gone, LeakSanitizer finds no module for those stack frames: it
 * rereads /proc/self/maps for each, thousands of times per rank. Kept loaded, the frames
 * resolve at once: a 2-rank run of 3 tiny steps took 2.0 s and takes 1.0 s (0.4 s without the
 * leak checker), with the same suppressions matching. Our own plugins are still unloaded,
 * so their unload path stays under the sanitizers. */
#include <dlfcn.h> /* dlinfo, RTLD_NEXT: _GNU_SOURCE, defined for every file by the build */
#include <link.h>
#include <string.h>

static int is_mpi_component(void *handle) {
    struct link_map *lm = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name) return 0;
    const char *base = strrchr(lm->l_name, '/');
    base = base ? base + 1 : lm->l_name;
    return strncmp(base, "mca_", 4) == 0 || strncmp(base, "pmix_mca_", 9) == 0;
}

/* exported: the build hides every symbol by default */
__attribute__((visibility("default"))) int dlclose(void *handle) {
    static int (*real_dlclose)(void *);
    if (!real_dlclose) *(void **)&real_dlclose = dlsym(RTLD_NEXT, "dlclose");
    if (is_mpi_component(handle)) return 0;
    return real_dlclose ? real_dlclose(handle) : -1;
}
