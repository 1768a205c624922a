/* The generic model: flat parameter storage, checkpoint file plumbing, forward + loss. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autograd/node.h"
#include "core/afile.h"
#include "models/model_impl.h"

it_status it__model_init(it_model *m, const it_model_vtable *vt, it_device dev, int64_t num_params) {
    m->vt = vt;
    m->dev = dev;
    m->info.num_params = num_params;
    int64_t shape[1] = {num_params};
    m->params = it__tensor_new_owned(dev, IT_DTYPE_FP32, 1, shape);
    m->grads = it__tensor_new_owned(dev, IT_DTYPE_FP32, 1, shape);
    if (!m->params || !m->grads) return it_last_status();
    return it_tensor_fill(m->grads, it_scalar_f64(0.0));
}

it_tensor *it__model_param(it_model *m, int64_t offset, int ndim, const int64_t *shape) {
    int64_t strides[IT_MAX_DIMS];
    it__contiguous_strides(ndim, shape, strides);
    it_tensor *p = it__tensor_view_owned(m->params, ndim, shape, strides, offset);
    it_tensor *g = it__tensor_view_owned(m->grads, ndim, shape, strides, offset);
    if (!p || !g || it_tensor_set_requires_grad(p, true) || it_tensor_set_grad(p, g)) {
        it_tensor_release(p);
        it_tensor_release(g);
        return NULL;
    }
    it_tensor_release(g); /* p holds it */
    if (m->n_leaves == m->cap_leaves) {
        int cap = m->cap_leaves ? 2 * m->cap_leaves : 64;
        it_tensor **l = realloc(m->leaves, sizeof *l * (size_t)cap);
        if (!l) {
            it_tensor_release(p);
            it_error(IT_ERR_OOM, "model: parameter list: out of host memory");
            return NULL;
        }
        m->leaves = l;
        m->cap_leaves = cap;
    }
    m->leaves[m->n_leaves++] = p;
    return p;
}

it_status it_model_zero_grad(it_model *m) {
    for (int i = 0; i < m->n_leaves; i++) it__grad_zero_lazy(m->leaves[i]);
    return IT_OK;
}

it_status it_model_grads_final(it_model *m) {
    it_status st = IT_OK;
    for (int i = 0; i < m->n_leaves && !st; i++) st = it__grad_materialize(m->leaves[i]);
    return st;
}

void it_model_free(it_model *m) {
    if (!m) return;
    if (m->vt && m->vt->free_impl) m->vt->free_impl(m->impl);
    free(m->leaves);
    it_tensor_release(m->params);
    it_tensor_release(m->grads);
    free(m);
}

const it_model_info *it_model_get_info(const it_model *m) { return &m->info; }
it_device it_model_device(const it_model *m) { return m->dev; }
it_tensor *it_model_params(it_model *m) { return m->params; }
it_tensor *it_model_grads(it_model *m) { return m->grads; }
it_tensor *it_model_forward(it_model *m, it_tensor *idx) { return m->vt->forward(m, idx); }
it_status it_model_save(const it_model *m, const char *path) { return m->vt->save(m, path); }
double it_model_flops_per_token(const it_model *m, int64_t T) { return m->vt->flops_per_token(m, T); }

it_tensor *it_model_loss(it_model *m, it_tensor *idx, it_tensor *targets) {
    m->aux_loss = NULL;
    it_tensor *loss = it_cross_entropy(it_model_forward(m, idx), targets, m->info.vocab_size);
    if (loss && m->aux_loss) loss = it_add(loss, m->aux_loss);
    m->aux_loss = NULL;
    return loss;
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double it__rng_uniform(it_rng *r) { return (double)(splitmix64(&r->state) >> 11) * (1.0 / 9007199254740992.0); }

double it__rng_normal(it_rng *r) {
    double u1 = it__rng_uniform(r), u2 = it__rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---------------------------------------------------------------- checkpoint files */

it_status it__read_header(const char *path, int32_t header[256], size_t *file_bytes) {
    struct stat sb;
    if (stat(path, &sb) != 0) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return it_error(IT_ERR_IO, "%s: not a regular file", path);
    if ((size_t)sb.st_size < 1024)
        return it_error(IT_ERR_FORMAT, "%s: file is %lld bytes, shorter than the 1024-byte header", path,
                        (long long)sb.st_size);
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t got = fread(header, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256) return it_error(IT_ERR_IO, "%s: reading the header failed", path);
    *file_bytes = (size_t)sb.st_size;
    return IT_OK;
}

it_status it__read_params(const char *path, it_tensor *params, int64_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    it_status st = IT_OK;
    size_t bytes = (size_t)n * sizeof(float);
    void *host = NULL;
    it_device dev = it_tensor_device(params);
    /* On a host-memory backend read straight into the tensor; otherwise stage. */
    void *dst = dev.backend->host_memory ? it_tensor_desc(params).data : (host = malloc(bytes ? bytes : 1));
    if (!dst) {
        fclose(f);
        return it_error(IT_ERR_OOM, "%s: %zu bytes of host memory for the parameters", path, bytes);
    }
    if (fseek(f, 1024, SEEK_SET) != 0 || fread(dst, 1, bytes, f) != bytes)
        st = it_error(IT_ERR_IO, "%s: reading %zu bytes of parameters failed", path, bytes);
    fclose(f);
    if (!st && host) st = it_tensor_copy_from_host(params, host, bytes);
    free(host);
    return st;
}

it_status it__write_checkpoint(const char *path, const int32_t header[256], it_tensor *params) {
    size_t bytes = it_tensor_nbytes(params);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return it_error(IT_ERR_OOM, "%s: %zu bytes of host memory to save the parameters", path, bytes);
    it_status st = it_tensor_copy_to_host(params, host, bytes);
    it_afile *f = NULL;
    if (!st) st = it_afile_open(path, &f);
    if (!st) st = it_afile_write(f, header, 256 * sizeof(int32_t));
    if (!st) st = it_afile_write(f, host, bytes);
    if (f) {
        if (st) it_afile_abort(f);
        else st = it_afile_commit(f);
    }
    free(host);
    return st;
}
