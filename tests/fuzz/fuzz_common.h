/* Shared by the libFuzzer harnesses (tests/fuzz/README.md).
 *
 * The loaders take paths, so each input is written to an in-memory file (memfd_create, named
 * /proc/self/fd/N; a file under /dev/shm where memfd is missing) that is reused from run to run.
 * A finding is a sanitizer report, a leak, a timeout, or FUZZ_ASSERT: a property every parser
 * promises (a refusal is IT_ERR_FORMAT/IT_ERR_IO with a one-line message naming the file; an
 * accepted file reads back what it holds). */
#ifndef IT_FUZZ_COMMON_H
#define IT_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "infinitrain/common.h"

#define FUZZ_ASSERT(cond, ...)                                                                                         \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: FUZZ_ASSERT failed: %s: ", __FILE__, __LINE__, #cond);                             \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n(last error: %s)\n", it_last_error());                                                  \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { FUZZ_SLOTS = 2 };

/* Writes data[0..size) as the whole content of in-memory file `slot` and returns its path. */
static inline const char *fuzz_file(int slot, const uint8_t *data, size_t size) {
    static int fds[FUZZ_SLOTS] = {-1, -1};
    static char paths[FUZZ_SLOTS][64];
    if (fds[slot] < 0) {
        int fd = memfd_create("it_fuzz", MFD_CLOEXEC);
        if (fd >= 0) {
            snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fd);
        } else {
            snprintf(paths[slot], sizeof paths[slot], "/dev/shm/it_fuzz_%ld_%d", (long)getpid(), slot);
            fd = open(paths[slot], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0) {
                perror(paths[slot]);
                abort();
            }
            unlink(paths[slot]); /* reopened through /proc below, gone when the process is */
            snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fd);
        }
        fds[slot] = fd;
    }
    int fd = fds[slot];
    if (ftruncate(fd, 0) != 0) abort();
    for (size_t off = 0; off < size;) {
        ssize_t w = pwrite(fd, data + off, size - off, (off_t)off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    return paths[slot];
}

/* A refusal must be a user-facing error: IT_ERR_FORMAT or IT_ERR_IO (IT_ERR_OOM for a size the
 * checks allow but this machine cannot hold), on one line, naming the file. */
static inline void fuzz_check_refusal(it_status st, const char *path) {
    const char *msg = it_last_error();
    FUZZ_ASSERT(st == IT_ERR_FORMAT || st == IT_ERR_IO || st == IT_ERR_OOM, "status %s", it_status_name(st));
    FUZZ_ASSERT(it_last_status() == st, "recorded status %s, returned %s", it_status_name(it_last_status()),
                it_status_name(st));
    FUZZ_ASSERT(strstr(msg, path) != NULL, "message does not name %s: %s", path, msg);
    FUZZ_ASSERT(strchr(msg, '\n') == NULL, "message spans lines: %s", msg);
}

static inline int32_t fuzz_le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

#endif
