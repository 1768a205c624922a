/* safetensors, read through mmap and written atomically (include/infinitrain/hf.h has the
 * format). The reader trusts nothing: the header length against the file and a cap, the JSON
 * (jansson, duplicate keys refused), every entry's dtype, shape and offsets, and that the
 * entries tile the data exactly. A directory is one file or an index and its shards. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/internal.h"
#include "infinitrain/hf.h"

/* The format's own cap on the header (the Rust reader's MAX_HEADER_SIZE). */
#define MAX_HEADER_BYTES (100u << 20)

typedef struct shard {
    char *path;
    void *map;
    size_t map_bytes;
    json_t *meta; /* __metadata__ or NULL */
} shard;

struct it_safetensors {
    shard *shards;
    int n_shards;
    it_safetensors_tensor *t;
    int n, cap;
};

static const struct {
    const char *name;
    it_dtype dtype;
    size_t size;
} dtypes[] = {
    {"F32", IT_DTYPE_FP32, 4},  {"BF16", IT_DTYPE_BF16, 2},     {"F16", IT_DTYPE_FP16, 2},
    {"F64", IT_DTYPE_FP64, 8},  {"I64", IT_DTYPE_I64, 8},       {"I32", IT_DTYPE_I32, 4},
    {"I16", IT_DTYPE_I16, 2},   {"I8", IT_DTYPE_I8, 1},         {"U64", IT_DTYPE_U64, 8},
    {"U32", IT_DTYPE_U32, 4},   {"U16", IT_DTYPE_U16, 2},       {"U8", IT_DTYPE_U8, 1},
    {"BOOL", IT_DTYPE_BOOL, 1}, {"F8_E4M3", IT_DTYPE_COUNT, 1}, {"F8_E5M2", IT_DTYPE_COUNT, 1},
};

static const char *st_name_of(it_dtype dt) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == dt) return dtypes[i].name;
    return NULL;
}

/* ---------------------------------------------------------------- reading */

static int by_name(const void *a, const void *b) {
    return strcmp(((const it_safetensors_tensor *)a)->name, ((const it_safetensors_tensor *)b)->name);
}

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int by_begin(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static bool json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* s for a one-line message: control bytes and quotes as \xNN, cut at 64 bytes. */
static const char *printable(const char *s, char *buf, size_t n) {
    size_t o = 0;
    for (; *s && o + 5 < n && o < 64; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\'')
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    if (*s && o + 4 < n) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = 0;
    return buf;
}

/* One entry of a header: its dtype, shape and offsets, checked against each other. */
static it_status parse_entry(const char *path, const char *name, json_t *e, it_safetensors_tensor *t, span *sp) {
    if (!json_is_object(e))
        return it_error(IT_ERR_FORMAT, "%s: tensor '%s': its entry is not a JSON object", path, name);
    json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
           *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt)) return it_error(IT_ERR_FORMAT, "%s: tensor '%s': no string \"dtype\"", path, name);
    size_t k = 0, nd = sizeof dtypes / sizeof dtypes[0];
    while (k < nd && strcmp(dtypes[k].name, json_string_value(dt)) != 0) k++;
    char shown[80];
    if (k == nd)
        return it_error(IT_ERR_FORMAT, "%s: tensor '%s': dtype \"%s\" is not a safetensors dtype", path, name,
                        printable(json_string_value(dt), shown, sizeof shown));
    if (!json_is_array(shape) || json_array_size(shape) > IT_SAFETENSORS_MAX_DIMS)
        return it_error(IT_ERR_FORMAT, "%s: tensor '%s': \"shape\" is not an array of at most %d sizes", path, name,
                        IT_SAFETENSORS_MAX_DIMS);
    uint64_t numel = 1;
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++) {
        uint64_t s;
        if (!json_u64(json_array_get(shape, (size_t)d), &s) || s > (uint64_t)INT64_MAX)
            return it_error(IT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a size", path, name, d);
        t->shape[d] = (int64_t)s;
        if (s && numel > UINT64_MAX / s / dtypes[k].size)
            return it_error(IT_ERR_FORMAT, "%s: tensor '%s': its shape overflows 64 bits of bytes", path, name);
        numel *= s;
    }
    uint64_t b, en;
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_u64(json_array_get(off, 0), &b) ||
        !json_u64(json_array_get(off, 1), &en) || b > en)
        return it_error(IT_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not [begin, end] with begin <= end", path,
                        name);
    if (en - b != numel * dtypes[k].size)
        return it_error(IT_ERR_FORMAT,
                        "%s: tensor '%s': shape and dtype %s make %llu bytes, data_offsets [%llu, %llu] hold %llu",
                        path, name, dtypes[k].name, (unsigned long long)(numel * dtypes[k].size), (unsigned long long)b,
                        (unsigned long long)en, (unsigned long long)(en - b));
    t->dtype_name = dtypes[k].name;
    t->dtype = dtypes[k].dtype;
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)(en - b);
    sp->begin = b, sp->end = en, sp->name = name;
    return IT_OK;
}

static it_status grow(it_safetensors *st, int more) {
    if (st->n + more <= st->cap) return IT_OK;
    int cap = st->cap ? st->cap : 64;
    while (cap < st->n + more) cap *= 2;
    it_safetensors_tensor *t = realloc(st->t, sizeof *t * (size_t)cap);
    if (!t) return it_error(IT_ERR_OOM, "safetensors: out of host memory for %d tensor entries", cap);
    st->t = t, st->cap = cap;
    return IT_OK;
}

/* Maps one file and appends its tensors; names are strdup'ed (the JSON is freed). */
static it_status open_shard(it_safetensors *st, const char *path) {
    shard *sh = &st->shards[st->n_shards];
    memset(sh, 0, sizeof *sh);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return it_error(IT_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return it_error(IT_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header length", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return it_error(IT_ERR_IO, "%s: mmap of %zu bytes failed: %s", path, size, strerror(errno));
    sh->path = strdup(path);
    sh->map = map, sh->map_bytes = size;
    st->n_shards++; /* from here on, close() unmaps it */
    if (!sh->path) return it_error(IT_ERR_OOM, "safetensors: out of host memory");
    const unsigned char *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > size - 8)
        return it_error(IT_ERR_FORMAT, "%s: header length %llu runs past the file's %zu bytes", path,
                        (unsigned long long)hlen, size);
    if (hlen > MAX_HEADER_BYTES)
        return it_error(IT_ERR_FORMAT, "%s: header length %llu is over the format's cap of %u bytes", path,
                        (unsigned long long)hlen, MAX_HEADER_BYTES);
    json_error_t jerr;
    json_t *root =
        json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &jerr);
    if (!root) it__one_line(jerr.text);
    if (!root) return it_error(IT_ERR_FORMAT, "%s: header JSON, at byte %d: %s", path, jerr.position + 8, jerr.text);
    /* after the JSON only the writer's padding (spaces) may follow */
    for (size_t i = jerr.position; i < hlen; i++)
        if (p[8 + i] != ' ' && p[8 + i] != '\n' && p[8 + i] != '\t' && p[8 + i] != '\r') {
            json_decref(root);
            return it_error(IT_ERR_FORMAT, "%s: header: bytes after the JSON object (at byte %zu)", path, 8 + i);
        }
    if (!json_is_object(root)) {
        json_decref(root);
        return it_error(IT_ERR_FORMAT, "%s: header: not a JSON object", path);
    }
    const uint64_t data_bytes = size - 8 - hlen;
    const char *data = (const char *)p + 8 + hlen;
    size_t n = json_object_size(root);
    span *sp = calloc(n ? n : 1, sizeof *sp);
    it_status s = sp ? grow(st, (int)n) : it_error(IT_ERR_OOM, "safetensors: out of host memory");
    int first = st->n, got = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (s) break;
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val)) {
                s = it_error(IT_ERR_FORMAT, "%s: \"__metadata__\" is not an object of strings", path);
                break;
            }
            json_object_foreach(val, mk, mv) if (!json_is_string(mv)) {
                char shown[80];
                s = it_error(IT_ERR_FORMAT, "%s: \"__metadata__\" value of \"%s\" is not a string", path,
                             printable(mk, shown, sizeof shown));
                break;
            }
            sh->meta = json_incref(val);
            continue;
        }
        char shown[80];
        if (strcmp(printable(key, shown, sizeof shown), key) != 0 || !*key) {
            s = it_error(IT_ERR_FORMAT, "%s: tensor name \"%s\" is empty or holds control bytes or quotes", path,
                         shown);
            break;
        }
        it_safetensors_tensor *t = &st->t[first + got];
        memset(t, 0, sizeof *t);
        s = parse_entry(path, key, val, t, &sp[got]);
        if (s) break;
        t->name = strdup(key);
        if (!t->name) {
            s = it_error(IT_ERR_OOM, "safetensors: out of host memory");
            break;
        }
        t->file = sh->path;
        t->data = data + sp[got].begin;
        sp[got].name = t->name;
        got++;
        st->n++;
    }
    /* the entries tile [0, data_bytes): sorted by begin, each starts where the last ended */
    if (!s) qsort(sp, (size_t)got, sizeof *sp, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < got && !s; i++) {
        if (sp[i].begin < at)
            s = it_error(IT_ERR_FORMAT, "%s: tensor '%s' at bytes [%llu, %llu) overlaps the one before it", path,
                         sp[i].name, (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
        else if (sp[i].begin > at)
            s = it_error(IT_ERR_FORMAT, "%s: a gap of %llu bytes before tensor '%s' (data_offsets begin %llu)", path,
                         (unsigned long long)(sp[i].begin - at), sp[i].name, (unsigned long long)sp[i].begin);
        at = sp[i].end;
    }
    if (!s && at > data_bytes)
        s = it_error(IT_ERR_FORMAT, "%s: truncated: the tensors need %llu bytes of data, the file holds %llu", path,
                     (unsigned long long)at, (unsigned long long)data_bytes);
    else if (!s && at < data_bytes)
        s = it_error(IT_ERR_FORMAT, "%s: %llu bytes of data after the last tensor (the format has no gaps)", path,
                     (unsigned long long)(data_bytes - at));
    free(sp);
    json_decref(root);
    return s;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* The index's weight_map: the distinct shard names (plain file names), each opened once, and
 * every name it maps found in the shard it names. */
static it_status open_index(it_safetensors *st, const char *dir, const char *index) {
    json_error_t jerr;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) it__one_line(jerr.text);
    if (!root) return it_error(IT_ERR_FORMAT, "%s: line %d: %s", index, jerr.line, jerr.text);
    json_t *wm = json_object_get(root, "weight_map");
    it_status s = IT_OK;
    if (!json_is_object(wm) || json_object_size(wm) == 0)
        s = it_error(IT_ERR_FORMAT, "%s: no \"weight_map\" object naming the tensors' files", index);
    const char *key;
    json_t *val;
    size_t nfiles = 0;
    const char **files = s ? NULL : calloc(json_object_size(wm), sizeof *files);
    if (!s && !files) s = it_error(IT_ERR_OOM, "safetensors: out of host memory");
    if (!s) json_object_foreach(wm, key, val) {
            const char *f = json_string_value(val);
            if (!f || !*f || strchr(f, '/') || strcmp(f, "..") == 0 || strcmp(f, ".") == 0) {
                s = it_error(IT_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a file name in the directory", index, key);
                break;
            }
            size_t i = 0;
            while (i < nfiles && strcmp(files[i], f) != 0) i++;
            if (i == nfiles) files[nfiles++] = f;
        }
    if (!s) {
        st->shards = calloc(nfiles, sizeof *st->shards);
        if (!st->shards) s = it_error(IT_ERR_OOM, "safetensors: out of host memory");
    }
    for (size_t i = 0; i < nfiles && !s; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= (int)sizeof path) {
            s = it_error(IT_ERR_INVALID_ARG, "%s/%s: path too long", dir, files[i]);
            break;
        }
        if (!exists(path)) {
            s = it_error(IT_ERR_NOT_FOUND, "%s: the index names shard '%s', which is missing", index, files[i]);
            break;
        }
        s = open_shard(st, path);
    }
    if (!s) qsort(st->t, (size_t)st->n, sizeof *st->t, by_name);
    for (int i = 1; i < st->n && !s; i++)
        if (strcmp(st->t[i - 1].name, st->t[i].name) == 0)
            s = it_error(IT_ERR_FORMAT, "%s: tensor '%s' is in two shards (%s and %s)", dir, st->t[i].name,
                         st->t[i - 1].file, st->t[i].file);
    if (!s) json_object_foreach(wm, key, val) {
            const it_safetensors_tensor *t = it_safetensors_find(st, key);
            const char *base = t ? strrchr(t->file, '/') : NULL;
            if (!t) {
                s = it_error(IT_ERR_FORMAT, "%s: tensor '%s' is in the weight_map but in no shard (%s named)", index,
                             key, json_string_value(val));
                break;
            }
            if (strcmp(base ? base + 1 : t->file, json_string_value(val)) != 0) {
                s = it_error(IT_ERR_FORMAT, "%s: tensor '%s' is in %s, the weight_map says %s", index, key, t->file,
                             json_string_value(val));
                break;
            }
        }
    if (!s && (size_t)st->n != json_object_size(wm))
        s = it_error(IT_ERR_FORMAT, "%s: the shards hold %d tensors, the weight_map names %zu", index, st->n,
                     json_object_size(wm));
    free(files);
    json_decref(root);
    return s;
}

it_status it_safetensors_open(const char *path, it_safetensors **out) {
    *out = NULL;
    if (!path || !*path) return it_error(IT_ERR_INVALID_ARG, "safetensors: no path");
    it_safetensors *st = calloc(1, sizeof *st);
    if (!st) return it_error(IT_ERR_OOM, "safetensors: out of host memory");
    it_status s;
    if (is_dir(path)) {
        char single[PATH_MAX], index[PATH_MAX];
        snprintf(single, sizeof single, "%s/model.safetensors", path);
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
        if (exists(index)) {
            s = open_index(st, path, index);
        } else if (exists(single)) {
            st->shards = calloc(1, sizeof *st->shards);
            s = st->shards ? open_shard(st, single) : it_error(IT_ERR_OOM, "safetensors: out of host memory");
        } else {
            s = it_error(IT_ERR_NOT_FOUND, "%s: no model.safetensors and no model.safetensors.index.json", path);
        }
    } else {
        st->shards = calloc(1, sizeof *st->shards);
        s = st->shards ? open_shard(st, path) : it_error(IT_ERR_OOM, "safetensors: out of host memory");
    }
    if (!s && st->n_shards == 1) {
        qsort(st->t, (size_t)st->n, sizeof *st->t, by_name);
        /* a single file cannot hold a name twice: the JSON reader refused duplicate keys */
    }
    if (s) {
        it_safetensors_close(st);
        return s;
    }
    *out = st;
    return IT_OK;
}

void it_safetensors_close(it_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (int i = 0; i < st->n_shards; i++) {
        if (st->shards[i].map) munmap(st->shards[i].map, st->shards[i].map_bytes);
        json_decref(st->shards[i].meta);
        free(st->shards[i].path);
    }
    free(st->shards);
    free(st->t);
    free(st);
}

int it_safetensors_count(const it_safetensors *st) { return st ? st->n : 0; }

const it_safetensors_tensor *it_safetensors_at(const it_safetensors *st, int i) {
    return st && i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const it_safetensors_tensor *it_safetensors_find(const it_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(st->t[mid].name, name);
        if (c == 0) return &st->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *it_safetensors_metadata(const it_safetensors *st, const char *key) {
    if (!st || st->n_shards < 1 || !st->shards[0].meta) return NULL;
    return json_string_value(json_object_get(st->shards[0].meta, key));
}

it_status it_safetensors_read_f32(const it_safetensors_tensor *t, int64_t at, int64_t n, float *dst) {
    if (at < 0 || n < 0 || at > t->numel || n > t->numel - at)
        return it_error(IT_ERR_INVALID_ARG, "%s: tensor '%s': elements [%lld, %lld) outside its %lld", t->file, t->name,
                        (long long)at, (long long)(at + n), (long long)t->numel);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case IT_DTYPE_FP32: memcpy(dst, p + 4 * at, sizeof(float) * (size_t)n); return IT_OK;
    case IT_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, p + 2 * (at + i), 2);
            dst[i] = it_bf16_to_fp32(b);
        }
        return IT_OK;
    case IT_DTYPE_FP16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * (at + i), 2);
            dst[i] = it_fp16_to_fp32(h);
        }
        return IT_OK;
    case IT_DTYPE_FP64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * (at + i), 8);
            dst[i] = (float)d;
        }
        return IT_OK;
    default:
        return it_error(IT_ERR_FORMAT, "%s: tensor '%s' has dtype %s; a weight must be F32, BF16, F16 or F64", t->file,
                        t->name, t->dtype_name);
    }
}

void it_safetensors_drop(const it_safetensors_tensor *t) {
    long page = sysconf(_SC_PAGESIZE);
    if (!t || page <= 0) return;
    uintptr_t a = (uintptr_t)t->data, b = a + t->nbytes, p = (uintptr_t)page;
    uintptr_t lo = (a + p - 1) / p * p, hi = b / p * p; /* the pages that hold this tensor alone */
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* ---------------------------------------------------------------- writing */

typedef struct order {
    const it_safetensors_spec *spec;
    int i;
    size_t bytes;
} order;

static int order_by_name(const void *a, const void *b) {
    return strcmp(((const order *)a)->spec->name, ((const order *)b)->spec->name);
}

static it_status spec_bytes(const it_safetensors_spec *s, size_t *bytes) {
    if (!s->name || !*s->name || strcmp(s->name, "__metadata__") == 0)
        return it_error(IT_ERR_INVALID_ARG, "safetensors: tensor name '%s' cannot be written", s->name ? s->name : "");
    if (!st_name_of(s->dtype) || s->dtype >= IT_DTYPE_COUNT)
        return it_error(IT_ERR_INVALID_ARG, "safetensors: tensor '%s': dtype %d has no safetensors name", s->name,
                        (int)s->dtype);
    if (s->ndim < 0 || s->ndim > IT_SAFETENSORS_MAX_DIMS)
        return it_error(IT_ERR_INVALID_ARG, "safetensors: tensor '%s': ndim %d", s->name, s->ndim);
    size_t n = it_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++) {
        if (s->shape[d] < 0) return it_error(IT_ERR_INVALID_ARG, "safetensors: tensor '%s': shape[%d] < 0", s->name, d);
        n *= (size_t)s->shape[d];
    }
    *bytes = n;
    return IT_OK;
}

/* The header of tensors o[0..n) in that order: compact JSON, spaces to a multiple of 8. */
static char *header_json(const order *o, int n, size_t *len) {
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *shape = json_array(), *off = json_array();
        for (int d = 0; d < o[i].spec->ndim; d++) json_array_append_new(shape, json_integer(o[i].spec->shape[d]));
        json_array_append_new(off, json_integer((json_int_t)at));
        json_array_append_new(off, json_integer((json_int_t)(at + o[i].bytes)));
        at += o[i].bytes;
        json_object_set_new(e, "dtype", json_string(st_name_of(o[i].spec->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", off);
        json_object_set_new(root, o[i].spec->name, e);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return NULL;
    size_t l = strlen(text), padded = (8 + l + 7) / 8 * 8 - 8;
    char *out = realloc(text, padded + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + l, ' ', padded - l);
    out[padded] = 0;
    *len = padded;
    return out;
}

static it_status write_file(const char *path, const order *o, int n, it_safetensors_fill fill, void *ctx) {
    size_t hlen = 0;
    char *header = header_json(o, n, &hlen);
    if (!header) return it_error(IT_ERR_OOM, "%s: out of host memory for the header", path);
    it_afile *f;
    it_status s = it_afile_open(path, &f);
    if (s) {
        free(header);
        return s;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    s = it_afile_write(f, len8, 8);
    if (!s) s = it_afile_write(f, header, hlen);
    free(header);
    size_t cap = 0;
    void *buf = NULL;
    for (int i = 0; i < n && !s; i++) {
        if (o[i].bytes > cap) {
            void *b = realloc(buf, o[i].bytes);
            if (!b) {
                s = it_error(IT_ERR_OOM, "%s: %zu bytes of host memory for tensor '%s'", path, o[i].bytes,
                             o[i].spec->name);
                break;
            }
            buf = b, cap = o[i].bytes;
        }
        s = fill(ctx, o[i].i, buf, o[i].bytes);
        if (!s) s = it_afile_write(f, buf, o[i].bytes);
    }
    free(buf);
    if (s) {
        it_afile_abort(f);
        return s;
    }
    return it_afile_commit(f);
}

static it_status sorted(const it_safetensors_spec *t, int n, order **out) {
    order *o = calloc(n > 0 ? (size_t)n : 1, sizeof *o);
    if (!o) return it_error(IT_ERR_OOM, "safetensors: out of host memory");
    for (int i = 0; i < n; i++) {
        o[i].spec = &t[i], o[i].i = i;
        it_status s = spec_bytes(&t[i], &o[i].bytes);
        if (s) {
            free(o);
            return s;
        }
    }
    qsort(o, (size_t)n, sizeof *o, order_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(o[i - 1].spec->name, o[i].spec->name) == 0) {
            it_status s = it_error(IT_ERR_INVALID_ARG, "safetensors: tensor '%s' named twice", o[i].spec->name);
            free(o);
            return s;
        }
    *out = o;
    return IT_OK;
}

it_status it_safetensors_write(const char *path, const it_safetensors_spec *t, int n, it_safetensors_fill fill,
                               void *ctx) {
    order *o;
    it_status s = sorted(t, n, &o);
    if (s) return s;
    s = write_file(path, o, n, fill, ctx);
    free(o);
    return s;
}

/* Shards of an earlier save that the new one does not have (model-NNNNN-of-MMMMM with another
 * MMMMM): removed, as transformers does, so the directory holds one model. */
static it_status remove_stale(const char *dir, int K) {
    DIR *d = opendir(dir);
    if (!d) return it_error(IT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    it_status s = IT_OK;
    while ((e = readdir(d)) && !s) {
        int a, b;
        char tail[32];
        if (sscanf(e->d_name, "model-%5d-of-%5d.%31s", &a, &b, tail) != 3 || strcmp(tail, "safetensors") != 0) continue;
        if (b == K && K > 1) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) s = it_error(IT_ERR_IO, "%s: cannot remove an old shard: %s", path, strerror(errno));
    }
    closedir(d);
    return s;
}

it_status it_safetensors_write_dir(const char *dir, const it_safetensors_spec *t, int n, size_t max_shard_bytes,
                                   it_safetensors_fill fill, void *ctx, int *shards) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return it_error(IT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    if (!is_dir(dir)) return it_error(IT_ERR_IO, "%s: exists and is not a directory", dir);
    order *o;
    it_status s = sorted(t, n, &o);
    if (s) return s;
    /* shard k holds o[first[k], first[k+1]) */
    int *first = calloc((size_t)n + 2, sizeof *first), K = 0;
    size_t total = 0, cur = 0;
    if (!first) {
        free(o);
        return it_error(IT_ERR_OOM, "safetensors: out of host memory");
    }
    for (int i = 0; i < n; i++) {
        if (i == 0 || (max_shard_bytes && cur + o[i].bytes > max_shard_bytes && cur > 0)) first[K++] = i, cur = 0;
        cur += o[i].bytes;
        total += o[i].bytes;
    }
    if (K == 0) first[K++] = 0;
    first[K] = n;
    char path[PATH_MAX], index[PATH_MAX];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (K == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = write_file(path, o, n, fill, ctx);
        if (!s && exists(index) && unlink(index) != 0) /* a stale index would win over the new file */
            s = it_error(IT_ERR_IO, "%s: cannot remove the old index: %s", index, strerror(errno));
    } else {
        json_t *wm = json_object();
        for (int k = 0; k < K && !s; k++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, K);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            s = write_file(path, o + first[k], first[k + 1] - first[k], fill, ctx);
            for (int i = first[k]; i < first[k + 1]; i++) json_object_set_new(wm, o[i].spec->name, json_string(name));
        }
        if (!s) {
            json_t *root = json_object(), *meta = json_object();
            json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
            json_object_set_new(root, "metadata", meta);
            json_object_set(root, "weight_map", wm);
            char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
            json_decref(root);
            it_afile *f = NULL;
            s = text ? it_afile_open(index, &f) : it_error(IT_ERR_OOM, "%s: out of host memory", index);
            if (!s) s = it_afile_write(f, text, strlen(text));
            if (!s) s = it_afile_write(f, "\n", 1);
            if (f) s = s ? (it_afile_abort(f), s) : it_afile_commit(f);
            free(text);
            snprintf(path, sizeof path, "%s/model.safetensors", dir);
            if (!s && exists(path) && unlink(path) != 0)
                s = it_error(IT_ERR_IO, "%s: cannot remove the old single file: %s", path, strerror(errno));
        }
        json_decref(wm);
    }
    free(first);
    free(o);
    if (!s) s = remove_stale(dir, K);
    if (!s && shards) *shards = K;
    return s;
}

it_status it_hf_parse_size(const char *text, size_t *bytes) {
    if (!text || !*text) return it_error(IT_ERR_INVALID_ARG, "size: empty");
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0))
        return it_error(IT_ERR_INVALID_ARG, "size '%s': expected a number with an optional unit (5GB, 500MB)", text);
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
                 {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double b = v * units[i].mult;
            if (b >= 18446744073709551615.0) return it_error(IT_ERR_INVALID_ARG, "size '%s': too large", text);
            *bytes = (size_t)b;
            return IT_OK;
        }
    return it_error(IT_ERR_INVALID_ARG, "size '%s': unknown unit '%s' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text,
                    end);
}
