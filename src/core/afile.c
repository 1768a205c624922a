/* Atomic file writing (see afile.h). */
#include "core/afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct it_afile {
    FILE *fp;
    char *path; /* final name */
    char *tmp;  /* "<path>.tmp.<pid>.<counter>" */
};

/* Distinguishes temp files of several writers in one process (threads, or one file written
 * twice at once). */
static atomic_uint it_afile_counter;

static void afile_destroy(it_afile *f) {
    if (!f) return;
    free(f->path);
    free(f->tmp);
    free(f);
}

it_status it_afile_open(const char *path, it_afile **out) {
    if (!out) return it_error(IT_ERR_INVALID_ARG, "it_afile_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "it_afile_open: empty path");
    it_afile *f = calloc(1, sizeof *f);
    size_t n = strlen(path);
    size_t tn = n + 64;
    if (f) {
        f->path = malloc(n + 1);
        f->tmp = malloc(tn);
    }
    if (!f || !f->path || !f->tmp) {
        afile_destroy(f);
        return it_error(IT_ERR_OOM, "%s: out of memory opening for writing", path);
    }
    memcpy(f->path, path, n + 1);
    unsigned c = atomic_fetch_add(&it_afile_counter, 1u);
    snprintf(f->tmp, tn, "%s.tmp.%ld.%u", path, (long)getpid(), c);
    /* O_EXCL: never write through a stale temp file or a symlink someone planted. */
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        it_status st = it_error(IT_ERR_IO, "%s: cannot create temp file %s: %s", path, f->tmp, strerror(e));
        afile_destroy(f);
        return st;
    }
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        int e = errno;
        close(fd);
        unlink(f->tmp);
        it_status st = it_error(IT_ERR_IO, "%s: fdopen of temp file %s: %s", path, f->tmp, strerror(e));
        afile_destroy(f);
        return st;
    }
    *out = f;
    return IT_OK;
}

it_status it_afile_write(it_afile *f, const void *data, size_t n) {
    if (!f) return it_error(IT_ERR_INVALID_ARG, "it_afile_write: file is NULL");
    if (n == 0) return IT_OK;
    if (!data) return it_error(IT_ERR_INVALID_ARG, "%s: it_afile_write of %zu bytes from NULL", f->path, n);
    errno = 0;
    if (fwrite(data, 1, n, f->fp) != n) {
        int e = errno ? errno : EIO;
        return it_error(IT_ERR_IO, "%s: writing %zu bytes to temp file %s: %s", f->path, n, f->tmp, strerror(e));
    }
    return IT_OK;
}

const char *it_afile_temp_path(const it_afile *f) { return f ? f->tmp : NULL; }

void it_afile_abort(it_afile *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    unlink(f->tmp);
    afile_destroy(f);
}

/* fsync the directory holding `path` so the rename itself is durable. */
static it_status fsync_dir(const char *path) {
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) return it_error(IT_ERR_OOM, "%s: out of memory", path);
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == dir) {
        dir[1] = '\0';
    } else {
        *slash = '\0';
    }
    it_status st = IT_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        st = it_error(IT_ERR_IO, "%s: opening directory %s to fsync: %s", path, dir, strerror(errno));
    } else {
        /* Some file systems refuse fsync on a directory (EINVAL); the rename is done anyway. */
        if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
            st = it_error(IT_ERR_IO, "%s: fsync of directory %s: %s", path, dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return st;
}

it_status it_afile_commit(it_afile *f) {
    if (!f) return it_error(IT_ERR_INVALID_ARG, "it_afile_commit: file is NULL");
    it_status st = IT_OK;
    if (fflush(f->fp) != 0) {
        st = it_error(IT_ERR_IO, "%s: flushing temp file %s: %s", f->path, f->tmp, strerror(errno));
    } else if (fsync(fileno(f->fp)) != 0) {
        st = it_error(IT_ERR_IO, "%s: fsync of temp file %s: %s", f->path, f->tmp, strerror(errno));
    }
    int rc = fclose(f->fp);
    f->fp = NULL;
    if (st == IT_OK && rc != 0)
        st = it_error(IT_ERR_IO, "%s: closing temp file %s: %s", f->path, f->tmp, strerror(errno));
    if (st == IT_OK && rename(f->tmp, f->path) != 0)
        st = it_error(IT_ERR_IO, "%s: renaming %s over it: %s", f->path, f->tmp, strerror(errno));
    if (st != IT_OK) {
        unlink(f->tmp);
    } else {
        st = fsync_dir(f->path);
    }
    afile_destroy(f);
    return st;
}
