/* Status codes, errors and the export macro shared by every public header.
 *
 * Error convention (one per module, see docs/architecture.md, "Errors"):
 *  - functions that compute into out-params return it_status (IT_OK = 0);
 *  - functions that return a handle return NULL on failure.
 * Either way the failure's message is recorded per thread and read with it_last_error(). */
#ifndef INFINITRAIN_COMMON_H
#define INFINITRAIN_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define IT_API __declspec(dllexport)
#else
#define IT_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__)
#define IT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define IT_PRINTF(fmt, args)
#endif

typedef enum it_status {
    IT_OK = 0,
    IT_ERR_INVALID_ARG = 1, /* a value the caller passed is out of range or inconsistent */
    IT_ERR_OOM = 2,         /* an allocation failed (host or device) */
    IT_ERR_IO = 3,          /* open/read/write/rename failed */
    IT_ERR_FORMAT = 4,      /* a file's contents are not what its format says */
    IT_ERR_NOT_FOUND = 5,   /* a backend, device, file or symbol does not exist */
    IT_ERR_UNSUPPORTED = 6, /* valid request the backend/op cannot serve (dtype, slot) */
    IT_ERR_BACKEND = 7,     /* a vendor runtime call failed */
    IT_ERR_INTERNAL = 8,    /* a bug: an invariant the code relies on did not hold */
    IT_ERR_NUMERIC = 9,     /* training's numbers went bad: non-finite or spiking losses, step after step */
} it_status;

/* The message of the last failure on this thread ("" when none). */
IT_API const char *it_last_error(void);
/* The status of the last failure on this thread (IT_OK when none). */
IT_API it_status it_last_status(void);
/* Record a failure; returns `status` so callers can `return it_error(...)`. */
IT_API it_status it_error(it_status status, const char *fmt, ...) IT_PRINTF(2, 3);
/* Prefix the recorded message with more context ("loading x.bin: " + old message). */
IT_API it_status it_error_context(const char *fmt, ...) IT_PRINTF(1, 2);
IT_API void it_error_clear(void);
IT_API const char *it_status_name(it_status status);

#define IT_MAX_DIMS 8

#ifdef __cplusplus
}
#endif
#endif
