/* Scratch buffers kept between calls, for the CPU kernels that need working memory of their
 * own (the GEMMs' packing buffers, gemm.c's widened copies): a training step's kernels must
 * not go to malloc, and the page faults of fresh memory would cost more than small products
 * take. Each file that includes this keeps its own SLOTS buffers. Callers on several threads
 * at once (a batch shared out, several devices in one process) each take a free slot, the
 * smallest index that is large enough or else the first free one (grown); when every slot is
 * taken the call allocates for itself, and scratch_give frees that. 64-byte aligned. */
#ifndef IT_CPU_SCRATCH_H
#define IT_CPU_SCRATCH_H

#include <pthread.h>
#include <stdlib.h>

enum { SCRATCH_SLOTS = 8 };
static struct {
    void *p;
    size_t cap;
    int busy;
} g_scratch[SCRATCH_SLOTS];
static pthread_mutex_t g_scratch_lock = PTHREAD_MUTEX_INITIALIZER;

/* At least `bytes` bytes; *slot says where they came from (for scratch_give). NULL when
 * out of memory. */
static void *scratch_take(size_t bytes, int *slot) {
    bytes = (bytes + 63) / 64 * 64;
    void *p = NULL;
    int pick = -1;
    pthread_mutex_lock(&g_scratch_lock);
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        if (g_scratch[i].busy) continue;
        if (g_scratch[i].cap >= bytes) {
            pick = i;
            break;
        }
        if (pick < 0) pick = i;
    }
    if (pick >= 0) {
        g_scratch[pick].busy = 1;
        if (g_scratch[pick].cap < bytes) {
            free(g_scratch[pick].p);
            g_scratch[pick].p = aligned_alloc(64, bytes);
            g_scratch[pick].cap = g_scratch[pick].p ? bytes : 0;
        }
        p = g_scratch[pick].p;
        if (p == NULL) g_scratch[pick].busy = 0, pick = -1;
    }
    pthread_mutex_unlock(&g_scratch_lock);
    *slot = pick;
    return p ? p : aligned_alloc(64, bytes);
}

static void scratch_give(void *p, int slot) {
    if (slot < 0) {
        free(p);
        return;
    }
    pthread_mutex_lock(&g_scratch_lock);
    g_scratch[slot].busy = 0;
    pthread_mutex_unlock(&g_scratch_lock);
}

#endif
