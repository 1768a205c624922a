/* The profiler's hooks in the dispatch path (dispatch.c calls them, profile.c defines
 * them). Off, a kernel call tests it__profiling once in it__kpre; the post hook runs only for
 * a call its pre hook armed, so a profile opened or closed mid-call records nothing torn. */
#ifndef IT_CORE_PROFILE_HOOKS_H
#define IT_CORE_PROFILE_HOOKS_H

#include <stdatomic.h>

#include "core/internal.h"

extern atomic_bool it__profiling;
/* The calling thread has a call armed (its pre hook ran): set by the pre hook, cleared by
 * the post hook. */
extern _Thread_local bool it__prof_armed;

#define IT_PROFILING() __builtin_expect(atomic_load_explicit(&it__profiling, memory_order_relaxed), 0)

/* Before the call it__kc describes: synchronizes its stream (a pending asynchronous error
 * surfaces here, as the call's) and records the start. */
it_status it__prof_pre(void);
/* After it: records the end (waits for the device), appends the record and returns st, or
 * the device's error when the call failed there. */
it_status it__prof_post(it_status st);
/* Bytes the CPU fallback moved for the armed call. */
void it__prof_bytes(size_t n);

#endif
