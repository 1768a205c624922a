/* The kernel profiler behind `--profile PATH`.
 *
 * While a profile is open, every kernel call the core dispatches (one it_kernels slot call,
 * native or served by the CPU fallback) is recorded: its slot name, the device and stream it
 * ran on, its host time, its device time, the bytes the CPU fallback copied for it, and the
 * step it belongs to. Device time comes from the backend's events (event_record before and
 * after the call, event_elapsed_ms between them) where the runtime has them, else from the
 * host clock after a stream synchronize. Either way the stream is synchronized before and
 * after each call, as InfiniTrain's profiler does, so step times measured while profiling
 * are not the run's real speed.
 *
 * Closed (the default), the dispatch path pays one predictable branch on a global flag.
 *
 * it_profile_end writes, for rank R:
 *   PATH.report.rankR       InfiniTrain's report: per step, the peak device memory and one
 *                           row per kernel (count, host and device totals, shares, averages)
 *   PATH.records.log.rankR  InfiniTrain's call log: one line per call, per step
 *   PATH.trace.rankR.json   a Chrome trace (Trace Event Format) that opens in Perfetto or
 *                           chrome://tracing: one process per device, one track per stream,
 *                           one complete ("X") event per call, a track of steps and a
 *                           memory counter
 * See docs/profiling.md for the layouts.
 *
 * Thread safety: calls are recorded from any thread (each thread's kernel calls are its
 * own); begin, step_begin / step_end and end are meant to be called from the one thread
 * that drives the training loop. */
#ifndef INFINITRAIN_PROFILE_H
#define INFINITRAIN_PROFILE_H

#include <stdio.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The report's row order (all descending; NONE keeps slot order). InfiniTrain's SortBy,
 * without its "percentage" keys, which order rows as the totals do. */
typedef enum it_profile_sort {
    IT_PROFILE_SORT_DEVICE_TOTAL = 0, /* the default */
    IT_PROFILE_SORT_DEVICE_AVG = 1,
    IT_PROFILE_SORT_HOST_TOTAL = 2,
    IT_PROFILE_SORT_HOST_AVG = 3,
    IT_PROFILE_SORT_COUNT = 4,
    IT_PROFILE_SORT_NONE = 5,
} it_profile_sort;

/* Open a profile whose files start with `path` (a path prefix, e.g. "out/gpt2"); `rank`
 * names them (the process's global rank, 0 for a single process). Calls are tagged
 * "Untagged" until the first it_profile_step_begin. IT_ERR_INVALID_ARG when a profile is
 * already open or path is empty; nothing is written until it_profile_end. */
IT_API it_status it_profile_begin(const char *path, int rank);
/* True while a profile is open. */
IT_API bool it_profile_enabled(void);
/* The row order of the report it_profile_end writes (default IT_PROFILE_SORT_DEVICE_TOTAL). */
IT_API void it_profile_set_sort(it_profile_sort sort);
/* Calls from now on belong to step `step`, tagged "Step_<step>" (InfiniTrain's mains tag
 * with the 0-based step index). No-op when no profile is open. */
IT_API void it_profile_step_begin(int step);
/* The step ends: its peak memory (bytes, as it_mem_stats reports them: the report prints
 * the reserved peak in MiB, as InfiniTrain does; the trace holds both), and calls from now
 * on are "Untagged" again. No-op when no profile is open. */
IT_API void it_profile_step_end(int step, size_t peak_used, size_t peak_reserved);
/* Close the profile and write its three files. The profile is closed even when writing
 * fails (IT_ERR_IO naming the file). IT_ERR_INVALID_ARG when none is open. */
IT_API it_status it_profile_end(void);

/* The report of the open profile so far, in the layout of PATH.report.rankR, to f. */
IT_API it_status it_profile_report(FILE *f, it_profile_sort sort);
/* Calls recorded in the open profile so far (0 when none is open). */
IT_API uint64_t it_profile_call_count(void);

#ifdef __cplusplus
}
#endif
#endif
