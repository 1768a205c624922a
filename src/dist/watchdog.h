/* The collective watchdog's side in the process groups (dist.c): every group registers its
 * members, every collective and point-to-point wait says when it starts and ends. The rest of
 * the watchdog (the flags, the threads, the report) is watchdog.c's; its public calls are in
 * infinitrain/dist.h. */
#ifndef IT_DIST_WATCHDOG_H
#define IT_DIST_WATCHDOG_H

#include <stddef.h>

#include "infinitrain/common.h"

/* A group of n ranks whose world ranks are wrank[0..n-1], made by this process's k-th group
 * creation: its id (k, the same on every member, since groups are made collectively in one
 * order), or -1 when the table is full (its waits are then reported without peers). */
int it__watch_register(const int *wrank, int n);

/* This rank (group rank `me` of group gid, world ranks wrank) starts waiting in `op` over
 * `bytes`: on every member (peer < 0: a collective, counted) or on group rank `peer`. Nested
 * waits belong to the outermost. `label` and `wrank` must outlive the wait. */
void it__watch_enter(int gid, const char *label, const int *wrank, int n, int me, const char *op, size_t bytes,
                     int peer);
void it__watch_leave(void);

/* Every rank's `bytes` bytes at `mine`, gathered into all[world * bytes] in rank order.
 * Collective over d (dist.c). */
struct it_dist;
it_status it__dist_gather_host(struct it_dist *d, const void *mine, size_t bytes, void *all);

#endif
