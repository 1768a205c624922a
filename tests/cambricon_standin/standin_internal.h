/* TEST DOUBLE. What the stand-in's libcnnl.so and libcncl.so use of its libcnrt.so beyond the
 * public CNRT API: putting work on a queue and reaching device memory from that work.
 *
 * Device memory (cnrtMalloc) is mapped PROT_NONE: the host cannot read or write it, as on a
 * real MLU, so a copy the backend forgot shows up as a fault, not as a silently right
 * answer. Work on a queue runs in order on the queue's worker thread; only there, and only
 * for the ranges an item has opened with standin_open, is device memory readable. */
#ifndef IT_CAMBRICON_STANDIN_INTERNAL_H
#define IT_CAMBRICON_STANDIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "standin_api.h"

#define STANDIN_EXPORT __attribute__((visibility("default")))

/* Each library defines it_cambricon_test_double (standin_api.h); this keeps those definitions
 * out of AddressSanitizer's one-definition check, which would otherwise abort a sanitized
 * process that loads two of the libraries (GCC leaves globals in an explicit section alone;
 * clang takes no_sanitize). */
#ifdef __clang__
#define STANDIN_MARKER_ATTR __attribute__((no_sanitize("address")))
#else
#define STANDIN_MARKER_ATTR __attribute__((section(".rodata.it_cambricon_test_double")))
#endif

/* Thread-locals in the initial-exec model: the libraries are dlopen'ed, and LeakSanitizer's
 * exit scan misread the dynamic TLS (__tls_get_addr) of their queue threads and crashed
 * ("Tracer caught signal 11"). The few bytes fit glibc's static TLS reserve for dlopen. */
#define STANDIN_TLS __attribute__((tls_model("initial-exec"))) _Thread_local

/* One item of queue work. `run` is called on the queue's worker thread, after every item
 * placed on the queue before it has finished; `release` (may be NULL) frees `arg` afterwards
 * on that thread. A run returning false marks the queue failed: cnrtQueueSync then returns
 * cnrtErrorQueue once (the sticky error a device fault leaves). */
typedef bool (*standin_work_fn)(void *arg);
typedef void (*standin_release_fn)(void *arg);

/* Enqueue on `queue` (NULL: the current device's default queue). Fails with
 * cnrtErrorInvalidResourceHandle for a queue that is not live (cnrtErrorSysNoMem when the item
 * cannot be allocated); on failure nothing runs and `arg` stays the caller's to free. */
STANDIN_EXPORT cnrtRet_t standin_enqueue(cnrtQueue_t queue, standin_work_fn run, void *arg, standin_release_fn release);

/* True when [p, p + bytes) lies inside one live device allocation (bytes 0: p inside or at
 * its end). */
STANDIN_EXPORT bool standin_is_device(const void *p, size_t bytes);

/* On a worker thread, inside a running item: make [p, p + bytes) of device memory readable
 * (and writable) until the item returns. Returns false (and prints why on stderr) when the
 * range is not device memory, so the item can fail the way a device fault would. Host memory
 * needs no opening. */
STANDIN_EXPORT bool standin_open(const void *p, size_t bytes);

/* The CNRT device a queue belongs to (-1 for a bad queue). */
STANDIN_EXPORT int standin_queue_device(cnrtQueue_t queue);

/* The part the stand-in plays: 592 (an MLU590-class device, compute capability 5.9, the
 * default) or 372 (an MLU370, 3.7, without bf16 arithmetic) when IT_CAMBRICON_STANDIN_ARCH=372. */
STANDIN_EXPORT int standin_arch(void);

#endif
