/* Per-thread error record: the status and message of the last failure. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "infinitrain/common.h"

#define IT_ERROR_MAX 2048

static _Thread_local char it_err_msg[IT_ERROR_MAX];
static _Thread_local it_status it_err_status;

const char *it_last_error(void) { return it_err_msg; }
it_status it_last_status(void) { return it_err_status; }

void it_error_clear(void) {
    it_err_msg[0] = '\0';
    it_err_status = IT_OK;
}

void it__one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

it_status it_error(it_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it_err_msg, sizeof it_err_msg, fmt, ap);
    va_end(ap);
    it_err_status = status;
    return status;
}

it_status it_error_context(const char *fmt, ...) {
    char prefix[IT_ERROR_MAX], old[IT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, it_err_msg, sizeof old);
    size_t n = strlen(prefix);
    memcpy(it_err_msg, prefix, n + 1);
    if (n < sizeof it_err_msg - 1) {
        size_t room = sizeof it_err_msg - 1 - n, m = strlen(old);
        if (m > room) m = room;
        memcpy(it_err_msg + n, old, m);
        it_err_msg[n + m] = '\0';
    }
    return it_err_status;
}

const char *it_status_name(it_status status) {
    switch (status) {
    case IT_OK: return "ok";
    case IT_ERR_INVALID_ARG: return "invalid argument";
    case IT_ERR_OOM: return "out of memory";
    case IT_ERR_IO: return "I/O error";
    case IT_ERR_FORMAT: return "bad format";
    case IT_ERR_NOT_FOUND: return "not found";
    case IT_ERR_UNSUPPORTED: return "unsupported";
    case IT_ERR_BACKEND: return "backend error";
    case IT_ERR_INTERNAL: return "internal error";
    case IT_ERR_NUMERIC: return "numeric failure";
    }
    return "unknown status";
}
