/* File helpers shared by the data readers (see file_util.h). */
#include "data/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

it_status it_data_open_regular(const char *path, const char *what, FILE **fp, int64_t *size) {
    *fp = NULL;
    *size = 0;
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "%s: empty path", what);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it is
     * refused below like any file that is not regular. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return it_error(IT_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return it_error(IT_ERR_IO, "%s %s: cannot stat: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return it_error(IT_ERR_IO, "%s %s: not a regular file: %s", what, path,
                        S_ISDIR(st.st_mode) ? strerror(EISDIR) : "special file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return it_error(IT_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(e));
    }
    *fp = f;
    *size = (int64_t)st.st_size;
    return IT_OK;
}

it_status it_data_read_exact(FILE *fp, const char *path, void *buf, size_t n, int64_t offset) {
    errno = 0;
    size_t got = fread(buf, 1, n, fp);
    if (got != n) {
        int e = errno;
        return it_error(IT_ERR_IO, "%s: reading %zu bytes at offset %lld: got %zu (%s)", path, n, (long long)offset,
                        got, e ? strerror(e) : "unexpected end of file");
    }
    return IT_OK;
}

it_status it_data_read_file(const char *path, const char *what, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *fp;
    int64_t size;
    it_status st = it_data_open_regular(path, what, &fp, &size);
    if (st) return st;
    if ((uint64_t)size >= SIZE_MAX) {
        fclose(fp);
        return it_error(IT_ERR_OOM, "%s %s: %lld bytes do not fit in memory", what, path, (long long)size);
    }
    char *b = malloc((size_t)size + 1);
    if (!b) {
        fclose(fp);
        return it_error(IT_ERR_OOM, "%s %s: out of memory for %lld bytes", what, path, (long long)size);
    }
    st = it_data_read_exact(fp, path, b, (size_t)size, 0);
    fclose(fp);
    if (st) {
        free(b);
        return st;
    }
    b[size] = '\0';
    *buf = b;
    *len = (size_t)size;
    return IT_OK;
}
