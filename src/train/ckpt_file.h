/* InfiniTrain's tensor file, `model.ckpt` / `optimizer.ckpt` (docs/formats.md):
 *
 *   u32 magic 0x54504B43 ("CKPT" on disk), u32 version 1, u32 count, then per entry:
 *   u32 name length L, L bytes of name, i8 dtype (it_dtype's values are InfiniTrain's DataType),
 *   u32 ndim, ndim x i64 dims, u64 nbytes, nbytes of row-major data.
 *
 * Little-endian, no padding. We write the entries sorted by name (InfiniTrain writes them in
 * hash-map order and reads them into a map, so any order loads there). The reader checks
 * every field against the file's size before it trusts it, and reads data on demand. */
#ifndef IT_TRAIN_CKPT_FILE_H
#define IT_TRAIN_CKPT_FILE_H

#include <stdio.h>

#include "infinitrain/common.h"
#include "infinitrain/dtype.h"

#define IT_CKPT_MAGIC 0x54504B43u
#define IT_CKPT_VERSION 1u
#define IT_CKPT_MAX_NDIM 8

/* One tensor to write; `data` is host memory of nbytes = numel * element size. */
typedef struct it_ckpt_item {
    const char *name;
    it_dtype dtype;
    uint32_t ndim;
    int64_t dims[IT_CKPT_MAX_NDIM];
    const void *data;
} it_ckpt_item;

/* Write `items` (sorted by name here; names must be unique) to `path`, flushed and fsynced.
 * *crc and *bytes (may be NULL) get the file's CRC-32 and size. */
IT_API it_status it_ckpt_write(const char *path, it_ckpt_item *items, size_t n, uint32_t *crc, uint64_t *bytes);

typedef struct it_ckpt_entry {
    char *name;
    it_dtype dtype;
    uint32_t ndim;
    int64_t dims[IT_CKPT_MAX_NDIM];
    uint64_t nbytes, offset; /* the data's size and position in the file */
} it_ckpt_entry;

typedef struct it_ckpt it_ckpt;

/* Read and check the whole index: magic, version, each entry's fields, its data inside the
 * file, nbytes = numel * element size, no duplicate names, nothing after the last entry.
 * Errors are IT_ERR_FORMAT naming the file, the entry and the field. */
IT_API it_status it_ckpt_open(const char *path, it_ckpt **out);
IT_API void it_ckpt_close(it_ckpt *c);
IT_API size_t it_ckpt_count(const it_ckpt *c);
IT_API const it_ckpt_entry *it_ckpt_at(const it_ckpt *c, size_t i); /* sorted by name */
IT_API const it_ckpt_entry *it_ckpt_find(const it_ckpt *c, const char *name);
IT_API const char *it_ckpt_path(const it_ckpt *c);
/* Copy entry e's data into dst (exactly e->nbytes). */
IT_API it_status it_ckpt_read(const it_ckpt *c, const it_ckpt_entry *e, void *dst, size_t nbytes);
/* Check that `name` exists with this dtype and shape (IT_ERR_FORMAT naming what differs). */
IT_API it_status it_ckpt_expect(const it_ckpt *c, const char *name, it_dtype dtype, uint32_t ndim, const int64_t *dims,
                                const it_ckpt_entry **out);

/* CRC-32 (zlib's) of a whole file; IT_ERR_IO naming it when it cannot be read. */
IT_API it_status it_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes);

#endif
