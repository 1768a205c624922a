/* How many OpenMP threads the CPU backend uses when OMP_NUM_THREADS does not say.
 *
 * libgomp's threads spin a while at each barrier before they sleep. When another busy
 * process shares the cores, the thread that lands on its core is descheduled for whole time
 * slices, and every barrier of every kernel waits for it while the others spin: measured on 2
 * cores (make run's model, a busy loop beside it), a step took 402 ms with 2 threads against
 * 158 ms with 1 (84 ms with 2 on the quiet machine; OMP_WAIT_POLICY=PASSIVE: 177 loaded, 114
 * quiet). So the default is the cores other processes leave free, read once when the backend
 * starts: the host's runnable tasks (procs_running in /proc/stat, the least of a few readings
 * 2 ms apart, less this process) taken from the cores this process may use. Only when it may
 * use every online CPU: under a cpuset (taskset, a container's cpus) the host's load is not
 * on our cores and the count stays libgomp's. OMP_NUM_THREADS, when set, always wins. */
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu_kernels.h"

static char note[160];

/* Runnable tasks on the host now (this one included), or -1. */
static int procs_running(void) {
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "procs_running ", 14) == 0) n = atoi(line + 14);
    if (f) fclose(f);
    return n;
}

void it_cpu_threads_default(void) {
    if (getenv("OMP_NUM_THREADS")) return;
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != online || online < 2) return;
    int least = -1;
    for (int i = 0; i < 5; i++) {
        int n = procs_running();
        if (n >= 1 && (least < 0 || n < least)) least = n;
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    int cores = omp_get_max_threads(), others = least - 1;
    if (least < 1 || others < 1 || cores < 2) return;
    int n = cores - others < 1 ? 1 : cores - others;
    if (n >= cores) return;
    omp_set_num_threads(n);
    snprintf(note, sizeof note, "%d of %d (%d other process%s running at start; OMP_NUM_THREADS sets it)", n, cores,
             others, others == 1 ? "" : "es");
}

const char *it_cpu_threads_note(void) { return note[0] ? note : NULL; }
