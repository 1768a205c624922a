/* Small helpers shared by the data readers: open a regular file and read it whole or in part,
 * little-endian int32 fields. Private to src/data. */
#ifndef IT_DATA_FILE_UTIL_H
#define IT_DATA_FILE_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "infinitrain/common.h"

/* Opens `path` for reading and returns its size; IT_ERR_IO naming path and strerror when it
 * cannot be opened or is not a regular file (a directory, a FIFO). `what` names the kind of
 * file in messages ("token shard"). */
it_status it_data_open_regular(const char *path, const char *what, FILE **fp, int64_t *size);
/* Reads exactly n bytes; IT_ERR_IO naming path, offset, expected and found byte counts. */
it_status it_data_read_exact(FILE *fp, const char *path, void *buf, size_t n, int64_t offset);
/* Reads a whole regular file into a malloc'd buffer (NUL-terminated; *len excludes the NUL). */
it_status it_data_read_file(const char *path, const char *what, char **buf, size_t *len);

static inline int32_t it_data_le_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
static inline void it_data_put_le_i32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

#endif
