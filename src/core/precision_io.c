/* What the precision checker, it-precision-compare and the tests share: MD5 (RFC 1321),
 * InfiniTrain's rounding before it, and float32 .npy files (NPY format v1.0 written, v1.0
 * and v2.0 read). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/precision.h"

/* ---------------------------------------------------------------- MD5 */

typedef struct md5_ctx {
    uint32_t s[4];
    uint8_t buf[64];
    size_t buf_len;
    uint64_t total;
} md5_ctx;

static const uint32_t md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const uint8_t md5_r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void md5_block(md5_ctx *c, const uint8_t *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = c->s[0], b = c->s[1], cc = c->s[2], d = c->s[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & cc) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & cc);
            g = (5 * i + 1) % 16;
        } else if (i < 48) {
            f = b ^ cc ^ d;
            g = (3 * i + 5) % 16;
        } else {
            f = cc ^ (b | ~d);
            g = (7 * i) % 16;
        }
        uint32_t t = d;
        d = cc;
        cc = b;
        b = b + rotl(a + f + md5_k[i] + m[g], md5_r[i]);
        a = t;
    }
    c->s[0] += a;
    c->s[1] += b;
    c->s[2] += cc;
    c->s[3] += d;
}

static void md5_update(md5_ctx *c, const uint8_t *p, size_t n) {
    c->total += n;
    while (n) {
        size_t take = 64 - c->buf_len < n ? 64 - c->buf_len : n;
        memcpy(c->buf + c->buf_len, p, take);
        c->buf_len += take;
        p += take;
        n -= take;
        if (c->buf_len == 64) {
            md5_block(c, c->buf);
            c->buf_len = 0;
        }
    }
}

void it_md5_hex(const void *data, size_t n, char out[33]) {
    md5_ctx c = {{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}, {0}, 0, 0};
    md5_update(&c, data, n);
    uint64_t bits = c.total * 8;
    uint8_t pad[72] = {0x80};
    size_t padn = c.buf_len < 56 ? 56 - c.buf_len : 120 - c.buf_len;
    for (int i = 0; i < 8; i++) pad[padn + (size_t)i] = (uint8_t)(bits >> (8 * i));
    md5_update(&c, pad, padn + 8);
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned)((c.s[i / 4] >> (8 * (i % 4))) & 0xff));
}

void it_precision_quantize(const float *in, float *out, size_t n, double tol) {
    double inv = 1.0 / tol;
    for (size_t i = 0; i < n; i++) out[i] = (float)(round((double)in[i] * inv) * tol);
}

/* ---------------------------------------------------------------- .npy */

it_status it_npy_write_f32(const char *path, int ndim, const int64_t *shape, const float *data) {
    char hdr[512];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%s%lld", i ? ", " : "", (long long)shape[i]);
        numel *= shape[i];
    }
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%s) }", ndim == 1 ? "," : "");
    /* magic (6) + version (2) + length (2) + header + '\n': a multiple of 16, as NPY asks */
    while ((10 + len + 1) % 16) hdr[len++] = ' ';
    hdr[len++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(len & 0xff), (uint8_t)(len >> 8)};
    bool ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre && fwrite(hdr, 1, (size_t)len, f) == (size_t)len &&
              (numel == 0 || fwrite(data, sizeof(float), (size_t)numel, f) == (size_t)numel);
    if (fclose(f) != 0) ok = false;
    return ok ? IT_OK : it_error(IT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
}

/* The value of key `key` in the header dict, as the text after "'key':" (spaces skipped). */
static const char *dict_value(const char *hdr, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static it_status npy_parse_header(const char *path, const char *hdr, it_npy *out) {
    const char *d = dict_value(hdr, "descr");
    if (!d) return it_error(IT_ERR_FORMAT, "%s: .npy header has no 'descr'", path);
    if (strncmp(d, "'<f4'", 5) != 0) {
        int n = (int)strcspn(d, ",}");
        return it_error(IT_ERR_FORMAT, "%s: .npy dtype %.*s, expected '<f4' (little-endian float32)", path, n, d);
    }
    const char *fo = dict_value(hdr, "fortran_order");
    if (!fo) return it_error(IT_ERR_FORMAT, "%s: .npy header has no 'fortran_order'", path);
    if (strncmp(fo, "False", 5) != 0)
        return it_error(IT_ERR_FORMAT, "%s: .npy is Fortran-ordered, expected C order", path);
    const char *s = dict_value(hdr, "shape");
    if (!s || *s != '(') return it_error(IT_ERR_FORMAT, "%s: .npy header has no 'shape' tuple", path);
    s++;
    out->ndim = 0;
    out->numel = 1;
    for (;;) {
        while (*s == ' ') s++;
        if (*s == ')') break;
        if (out->ndim == IT_MAX_DIMS)
            return it_error(IT_ERR_FORMAT, "%s: .npy shape has more than %d dimensions", path, IT_MAX_DIMS);
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || errno || (v > 0 && out->numel > INT64_MAX / v))
            return it_error(IT_ERR_FORMAT, "%s: .npy shape entry %d is not a valid size", path, out->ndim);
        out->shape[out->ndim++] = v;
        out->numel *= v;
        s = end;
        while (*s == ' ') s++;
        if (*s == ',')
            s++;
        else if (*s != ')')
            return it_error(IT_ERR_FORMAT, "%s: .npy shape tuple is malformed", path);
    }
    return IT_OK;
}

it_status it_npy_read_f32(const char *path, it_npy *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    it_status st = IT_OK;
    char *hdr = NULL;
    uint8_t pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = it_error(IT_ERR_FORMAT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
        goto done;
    }
    size_t hlen, pre_len;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        pre_len = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4) goto truncated;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        pre_len = 12;
    } else {
        st = it_error(IT_ERR_FORMAT, "%s: .npy version %d.%d, expected 1.0 or 2.0", path, pre[6], pre[7]);
        goto done;
    }
    if (hlen == 0 || hlen > (1u << 20)) {
        st = it_error(IT_ERR_FORMAT, "%s: .npy header length %zu out of range", path, hlen);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        st = it_error(IT_ERR_OOM, "%s: out of host memory for the header", path);
        goto done;
    }
    if (fread(hdr, 1, hlen, f) != hlen) goto truncated;
    hdr[hlen] = 0;
    if (hdr[0] != '{' || !strchr(hdr, '}')) {
        st = it_error(IT_ERR_FORMAT, "%s: .npy header is not a dict", path);
        goto done;
    }
    if ((st = npy_parse_header(path, hdr, out))) goto done;
    if (fseek(f, 0, SEEK_END) != 0) goto truncated;
    long size = ftell(f);
    uint64_t want = (uint64_t)pre_len + hlen + (uint64_t)out->numel * sizeof(float);
    if (size < 0 || (uint64_t)size != want) {
        st = it_error(IT_ERR_FORMAT, "%s: .npy is %ld bytes, its header (%lld float32 values) says %llu", path, size,
                      (long long)out->numel, (unsigned long long)want);
        goto done;
    }
    out->data = malloc(sizeof(float) * (size_t)(out->numel ? out->numel : 1));
    if (!out->data) {
        st = it_error(IT_ERR_OOM, "%s: out of host memory for %lld values", path, (long long)out->numel);
        goto done;
    }
    if (fseek(f, (long)(pre_len + hlen), SEEK_SET) != 0 ||
        fread(out->data, sizeof(float), (size_t)out->numel, f) != (size_t)out->numel)
        goto truncated;
    goto done;
truncated:
    st = it_error(IT_ERR_FORMAT, "%s: .npy file is truncated", path);
done:
    free(hdr);
    fclose(f);
    if (st) it_npy_free(out);
    return st;
}

void it_npy_free(it_npy *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
}
