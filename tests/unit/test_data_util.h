/* Helpers shared by the data tests: a temp directory, whole-file I/O, little-endian fields, and
 * CHECK_ERR_ALL (status and every listed substring of the message). Include after it_test.h. */
#ifndef IT_TEST_DATA_UTIL_H
#define IT_TEST_DATA_UTIL_H

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "it_test.h"

static char tmpdir[256];

static inline const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static inline void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* The whole file, malloc'd; *n its size; NULL if unreadable. */
static inline unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static inline int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
static inline void put32(unsigned char *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* A file with a shard header (magic, version, count) followed by `payload` zero bytes. */
static inline void write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, size_t payload) {
    unsigned char *b = calloc(1, 1024 + payload);
    put32(b, magic);
    put32(b + 4, version);
    put32(b + 8, count);
    write_bytes(path, b, 1024 + payload);
    free(b);
}

/* status == want and the message contains every string of the NULL-terminated list. */
static inline void check_err_all(const char *file, int line, const char *expr, it_status st, it_status want, ...) {
    va_list ap;
    va_start(ap, want);
    int ok = st == want;
    const char *missing = NULL;
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(it_last_error(), s)) {
            ok = 0;
            if (!missing) missing = s;
        }
    va_end(ap);
    it_test_checks++;
    if (!ok) {
        it_test_failures++;
        fprintf(stderr, "%s:%d: %s: expected %s, got %s; missing \"%s\" in \"%s\"\n", file, line, expr,
                it_status_name(want), it_status_name(st), missing ? missing : "", it_last_error());
    }
}
#define CHECK_ERR_ALL(expr, status, ...) check_err_all(__FILE__, __LINE__, #expr, (expr), (status), __VA_ARGS__, NULL)

static inline int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Creates tmpdir ("/tmp/<name>.XXXXXX"); exits on failure. */
static inline void make_tmpdir(const char *name) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static inline void remove_tmpdir(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

#endif
