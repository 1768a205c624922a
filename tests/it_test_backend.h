/* Test helpers around backends: a slot's call count, and a copy of the CPU backend with some
 * kernel slots left empty (to check what the core composes or falls back to). */
#ifndef IT_TEST_BACKEND_H
#define IT_TEST_BACKEND_H

#include <string.h>

#include "infinitrain/backend.h"
#include "infinitrain/tensor.h"
#include "it_test.h"

/* Calls of kernel slot `name` on dev's backend so far (0 when unknown). */
static inline uint64_t it_test_slot_calls(it_device dev, const char *name) {
    it_kernel_stat st[IT_KERNEL_SLOT_COUNT];
    if (it_backend_kernel_stats(dev.backend, st)) return 0;
    for (size_t i = 0; i < IT_KERNEL_SLOT_COUNT; i++)
        if (st[i].slot && strcmp(st[i].slot, name) == 0) return st[i].calls;
    return 0;
}

/* Registers `name`: the CPU backend with `table` as its kernels (the caller's copy of
 * it_cpu_kernels() with the slots under test set to NULL; it and *b must outlive the
 * backend), and sets *dev to its device 0. */
static inline it_status it_test_cpu_variant(const char *name, it_kernels *table, it_backend *b, it_device *dev) {
    const it_backend *cpu = NULL;
    it_status st = it_backend_find("cpu", &cpu);
    if (st) return st;
    *b = *cpu;
    b->name = name;
    b->kernels = table;
    b->kernels_size = sizeof *table;
    return (st = it_backend_register(b)) ? st : it_device_parse(name, dev);
}

#endif
