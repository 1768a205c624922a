/* InfiniTrain's tensor file: writer and checked reader (layout in ckpt_file.h). */
#include "train/ckpt_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/internal.h"

/* ---- writing */

typedef struct writer {
    FILE *f;
    const char *path;
    uint32_t crc;
    uint64_t bytes;
    int err; /* errno of the first failed write */
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->err || n == 0) return;
    if (fwrite(p, 1, n, w->f) != n) {
        w->err = errno ? errno : EIO;
        return;
    }
    /* zlib's crc32 takes a uInt length: feed large buffers in pieces */
    for (const unsigned char *b = p; n;) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        w->crc = (uint32_t)crc32(w->crc, b, k);
        b += k;
        n -= k;
        w->bytes += k;
    }
}

static void put_u32(writer *w, uint32_t x) { put(w, &x, 4); }

static int by_name(const void *a, const void *b) {
    return strcmp(((const it_ckpt_item *)a)->name, ((const it_ckpt_item *)b)->name);
}

static it_status item_nbytes(const it_ckpt_item *it, uint64_t *out) {
    if (!it_dtype_valid((int)it->dtype) || it->ndim > IT_CKPT_MAX_NDIM)
        return it_error(IT_ERR_INVALID_ARG, "checkpoint entry '%s': bad dtype or ndim", it->name);
    uint64_t n = it_dtype_size(it->dtype);
    for (uint32_t d = 0; d < it->ndim; d++) {
        if (it->dims[d] < 0) return it_error(IT_ERR_INVALID_ARG, "checkpoint entry '%s': negative dim", it->name);
        n *= (uint64_t)it->dims[d];
    }
    *out = n;
    return IT_OK;
}

it_status it_ckpt_write(const char *path, it_ckpt_item *items, size_t n, uint32_t *crc, uint64_t *bytes) {
    if (n > UINT32_MAX) return it_error(IT_ERR_INVALID_ARG, "%s: %zu entries do not fit the format", path, n);
    if (n > 1) qsort(items, n, sizeof *items, by_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(items[i - 1].name, items[i].name) == 0)
            return it_error(IT_ERR_INTERNAL, "%s: entry name '%s' appears twice", path, items[i].name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        return it_error(IT_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    writer w = {f, path, 0, 0, 0};
    put_u32(&w, IT_CKPT_MAGIC);
    put_u32(&w, IT_CKPT_VERSION);
    put_u32(&w, (uint32_t)n);
    it_status st = IT_OK;
    for (size_t i = 0; i < n && !st && !w.err; i++) {
        const it_ckpt_item *it = &items[i];
        uint64_t nb;
        if ((st = item_nbytes(it, &nb))) break;
        size_t len = strlen(it->name);
        int8_t dt = (int8_t)it->dtype;
        put_u32(&w, (uint32_t)len);
        put(&w, it->name, len);
        put(&w, &dt, 1);
        put_u32(&w, it->ndim);
        put(&w, it->dims, sizeof(int64_t) * it->ndim);
        put(&w, &nb, 8);
        put(&w, it->data, (size_t)nb);
    }
    if (!w.err && (fflush(f) != 0 || fsync(fileno(f)) != 0)) w.err = errno;
    if (fclose(f) != 0 && !w.err) w.err = errno;
    if (!st && w.err) st = it_error(IT_ERR_IO, "%s: writing: %s", path, strerror(w.err));
    if (st) {
        unlink(path);
        return st;
    }
    if (crc) *crc = w.crc;
    if (bytes) *bytes = w.bytes;
    return IT_OK;
}

/* ---- reading */

struct it_ckpt {
    char *path;
    int fd;
    uint64_t size;
    size_t n;
    it_ckpt_entry *e; /* sorted by name */
};

typedef struct reader {
    const char *path;
    int fd;
    uint64_t size, pos;
} reader;

static it_status get(reader *r, void *dst, uint64_t n, const char *what, uint32_t entry) {
    if (n > r->size - r->pos)
        return it_error(IT_ERR_FORMAT,
                        "%s: truncated: entry %u: %s needs %llu bytes at offset %llu, file is %llu bytes", r->path,
                        entry, what, (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
    if (n && pread(r->fd, dst, (size_t)n, (off_t)r->pos) != (ssize_t)n)
        return it_error(IT_ERR_IO, "%s: reading %s at offset %llu: %s", r->path, what, (unsigned long long)r->pos,
                        strerror(errno ? errno : EIO));
    r->pos += n;
    return IT_OK;
}

static int entry_by_name(const void *a, const void *b) {
    return strcmp(((const it_ckpt_entry *)a)->name, ((const it_ckpt_entry *)b)->name);
}

void it_ckpt_close(it_ckpt *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->e[i].name);
    free(c->e);
    if (c->fd >= 0) close(c->fd);
    free(c->path);
    free(c);
}

static it_status read_entry(reader *r, uint32_t i, it_ckpt_entry *e) {
    uint32_t len, ndim;
    int8_t dt;
    it_status st;
    if ((st = get(r, &len, 4, "the name length", i))) return st;
    if (len == 0 || len > 4096)
        return it_error(IT_ERR_FORMAT, "%s: entry %u: name length %u (expected 1..4096)", r->path, i, len);
    if (!(e->name = malloc(len + 1))) return it_error(IT_ERR_OOM, "%s: out of host memory", r->path);
    if ((st = get(r, e->name, len, "the name", i))) return st;
    e->name[len] = '\0';
    for (uint32_t k = 0; k < len; k++) /* names go into messages: one line, no terminal controls */
        if ((unsigned char)e->name[k] < 0x20 || e->name[k] == 0x7f)
            return it_error(IT_ERR_FORMAT, "%s: entry %u: the name holds control byte 0x%02x at %u", r->path, i,
                            (unsigned char)e->name[k], k);
    if ((st = get(r, &dt, 1, "the dtype", i))) return st;
    if (!it_dtype_valid(dt))
        return it_error(IT_ERR_FORMAT, "%s: entry %u ('%s'): dtype %d is not a DataType (0..12)", r->path, i, e->name,
                        dt);
    e->dtype = (it_dtype)dt;
    if ((st = get(r, &ndim, 4, "ndim", i))) return st;
    if (ndim > IT_CKPT_MAX_NDIM)
        return it_error(IT_ERR_FORMAT, "%s: entry %u ('%s'): ndim %u (expected 0..%d)", r->path, i, e->name, ndim,
                        IT_CKPT_MAX_NDIM);
    e->ndim = ndim;
    if ((st = get(r, e->dims, 8ull * ndim, "the dims", i))) return st;
    uint64_t need = it_dtype_size(e->dtype);
    for (uint32_t d = 0; d < ndim; d++) {
        if (e->dims[d] < 0 || (e->dims[d] > 0 && need > UINT64_MAX / (uint64_t)e->dims[d]))
            return it_error(IT_ERR_FORMAT, "%s: entry %u ('%s'): dim %u is %lld", r->path, i, e->name, d,
                            (long long)e->dims[d]);
        need *= (uint64_t)e->dims[d];
    }
    if ((st = get(r, &e->nbytes, 8, "nbytes", i))) return st;
    if (e->nbytes != need)
        return it_error(IT_ERR_FORMAT, "%s: entry %u ('%s'): nbytes is %llu, its dims and %s need %llu", r->path, i,
                        e->name, (unsigned long long)e->nbytes, it_dtype_name(e->dtype), (unsigned long long)need);
    if (e->nbytes > r->size - r->pos)
        return it_error(
            IT_ERR_FORMAT, "%s: truncated: entry %u ('%s') needs %llu data bytes at offset %llu, file is %llu", r->path,
            i, e->name, (unsigned long long)e->nbytes, (unsigned long long)r->pos, (unsigned long long)r->size);
    e->offset = r->pos;
    r->pos += e->nbytes;
    return IT_OK;
}

it_status it_ckpt_open(const char *path, it_ckpt **out) {
    *out = NULL;
    it_ckpt *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    c->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    int statted = c->fd >= 0 ? fstat(c->fd, &sb) : -1;
    if (statted != 0 || !S_ISREG(sb.st_mode)) {
        it_status st = c->fd < 0 && errno == ENOENT ? IT_ERR_NOT_FOUND : IT_ERR_IO;
        int e = statted == 0 ? 0 : errno; /* opened and statted: not a regular file */
        it_ckpt_close(c);
        return it_error(st, "%s: %s", path, st == IT_ERR_IO && !e ? "not a regular file" : strerror(e));
    }
    reader r = {path, c->fd, (uint64_t)sb.st_size, 0};
    uint32_t head[3];
    it_status st = get(&r, head, 12, "the header", 0);
    if (!st && head[0] != IT_CKPT_MAGIC)
        st = it_error(IT_ERR_FORMAT, "%s: magic is 0x%08X, expected 0x%08X (an InfiniTrain .ckpt file)", path, head[0],
                      IT_CKPT_MAGIC);
    if (!st && head[1] != IT_CKPT_VERSION)
        st = it_error(IT_ERR_FORMAT, "%s: version is %u, expected %u", path, head[1], IT_CKPT_VERSION);
    /* each entry takes at least 4 + 1 + 1 + 4 + 8 bytes: a count beyond that is a lie */
    if (!st && head[2] > (r.size - 12) / 18)
        st = it_error(IT_ERR_FORMAT, "%s: entry count %u does not fit in %llu bytes", path, head[2],
                      (unsigned long long)r.size);
    if (!st && !(c->e = calloc(head[2] ? head[2] : 1, sizeof *c->e)))
        st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    for (uint32_t i = 0; !st && i < head[2]; i++) {
        st = read_entry(&r, i, &c->e[i]);
        c->n = i + 1;
    }
    if (!st && r.pos != r.size)
        st = it_error(IT_ERR_FORMAT, "%s: %llu bytes after the last entry", path, (unsigned long long)(r.size - r.pos));
    if (!st) {
        qsort(c->e, c->n, sizeof *c->e, entry_by_name);
        for (size_t i = 1; i < c->n; i++)
            if (strcmp(c->e[i - 1].name, c->e[i].name) == 0) {
                st = it_error(IT_ERR_FORMAT, "%s: entry '%s' appears twice", path, c->e[i].name);
                break;
            }
    }
    if (st) {
        it_ckpt_close(c);
        return st;
    }
    c->size = r.size;
    *out = c;
    return IT_OK;
}

size_t it_ckpt_count(const it_ckpt *c) { return c->n; }
const it_ckpt_entry *it_ckpt_at(const it_ckpt *c, size_t i) { return i < c->n ? &c->e[i] : NULL; }
const char *it_ckpt_path(const it_ckpt *c) { return c->path; }

const it_ckpt_entry *it_ckpt_find(const it_ckpt *c, const char *name) {
    it_ckpt_entry key = {.name = (char *)name};
    return bsearch(&key, c->e, c->n, sizeof *c->e, entry_by_name);
}

it_status it_ckpt_read(const it_ckpt *c, const it_ckpt_entry *e, void *dst, size_t nbytes) {
    if (nbytes != e->nbytes)
        return it_error(IT_ERR_INTERNAL, "%s: '%s': reading %zu bytes of %llu", c->path, e->name, nbytes,
                        (unsigned long long)e->nbytes);
    unsigned char *p = dst;
    for (uint64_t done = 0; done < nbytes;) {
        size_t k = nbytes - done > (1u << 30) ? (1u << 30) : (size_t)(nbytes - done);
        ssize_t got = pread(c->fd, p + done, k, (off_t)(e->offset + done));
        if (got <= 0)
            return it_error(IT_ERR_IO, "%s: reading '%s': %s", c->path, e->name,
                            got < 0 ? strerror(errno) : "the file shrank while open");
        done += (uint64_t)got;
    }
    return IT_OK;
}

static void fmt_shape(char *buf, size_t n, uint32_t ndim, const int64_t *dims) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

it_status it_ckpt_expect(const it_ckpt *c, const char *name, it_dtype dtype, uint32_t ndim, const int64_t *dims,
                         const it_ckpt_entry **out) {
    const it_ckpt_entry *e = it_ckpt_find(c, name);
    if (!e) return it_error(IT_ERR_FORMAT, "%s: no entry '%s'", c->path, name);
    if (e->dtype != dtype)
        return it_error(IT_ERR_FORMAT, "%s: '%s': dtype is %s, expected %s", c->path, name, it_dtype_name(e->dtype),
                        it_dtype_name(dtype));
    bool same = e->ndim == ndim;
    for (uint32_t d = 0; same && d < ndim; d++) same = e->dims[d] == dims[d];
    if (!same) {
        char want[160], found[160];
        fmt_shape(want, sizeof want, ndim, dims);
        fmt_shape(found, sizeof found, e->ndim, e->dims);
        return it_error(IT_ERR_FORMAT, "%s: '%s': shape is %s, expected %s", c->path, name, found, want);
    }
    if (out) *out = e;
    return IT_OK;
}

it_status it_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return it_error(errno == ENOENT ? IT_ERR_NOT_FOUND : IT_ERR_IO, "%s: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return it_error(IT_ERR_OOM, "%s: out of host memory", path);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    uint64_t total = 0;
    ssize_t got;
    while ((got = read(fd, buf, CHUNK)) > 0) {
        c = crc32(c, buf, (uInt)got);
        total += (uint64_t)got;
    }
    int e = errno;
    free(buf);
    close(fd);
    if (got < 0) return it_error(IT_ERR_IO, "%s: reading: %s", path, strerror(e));
    *crc = (uint32_t)c;
    if (bytes) *bytes = total;
    return IT_OK;
}
