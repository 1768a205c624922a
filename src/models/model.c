/* The generic model: flat parameter storage, checkpoint file plumbing, forward + loss. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
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

/* Frozen leaves (LoRA) have no gradient: both skip them. */
it_status it_model_zero_grad(it_model *m) {
    for (int i = 0; i < m->n_leaves; i++) it__grad_zero_lazy(m->leaves[i]);
    for (int i = 0; i < it_model_lora_count(m); i++) it__grad_zero_lazy(it_model_lora_at(m, i)->param);
    return IT_OK;
}

it_status it_model_grads_final(it_model *m) {
    it_status st = IT_OK;
    for (int i = 0; i < m->n_leaves && !st; i++) st = it__grad_materialize(m->leaves[i]);
    for (int i = 0; i < it_model_lora_count(m) && !st; i++) st = it__grad_materialize(it_model_lora_at(m, i)->param);
    return st;
}

/* ---------------------------------------------------------------- releasing the flat gradient
 * Between steps ZeRO-2 needs only its shard of the reduced gradient: the flat gradient's bytes
 * go back to the caching allocator after backward and are taken again before the next one.
 * Only the bytes go: the flat tensor, every leaf's gradient view of it (the storage is shared)
 * and any reference to it (a DDP/ZeRO reducer's) stay valid objects, and read the new bytes
 * once acquired. Reading a gradient while released is the caller's bug: it_model_grads_held
 * says which state the buffer is in. */
it_status it_model_grads_release(it_model *m) {
    it_storage *s = m && m->grads ? m->grads->storage : NULL;
    if (!s || !s->data) return IT_OK;
    it__free(s->dev, s->data, s->nbytes);
    s->data = NULL;
    s->nbytes = 0;
    return IT_OK;
}

bool it_model_grads_held(const it_model *m) { return m && m->grads && m->grads->storage->data; }

/* New bytes, lazily zero (it_model_zero_grad): the next backward writes them. */
it_status it_model_grads_acquire(it_model *m) {
    it_storage *s = m && m->grads ? m->grads->storage : NULL;
    if (!s || s->data) return IT_OK;
    it_status st = it__alloc(s->dev, it_tensor_nbytes(m->grads), &s->data, &s->nbytes);
    if (st) {
        s->data = NULL;
        s->nbytes = 0;
        return st;
    }
    return it_model_zero_grad(m);
}

void it_model_free(it_model *m) {
    if (!m) return;
    if (m->vt && m->vt->free_impl) m->vt->free_impl(m->impl);
    it__lora_free(m->lora);
    for (int i = 0; i < m->n_entries; i++) {
        it__param_entry *e = &m->entries[i];
        free((char *)e->info.name); /* the module string shares this allocation */
        if (e->alias) {
            it_tensor_release(e->info.param);
            it_tensor_release(e->info.grad);
        }
    }
    free(m->entries);
    for (int i = 0; i < m->n_leaves; i++) it_tensor_release(m->leaves[i]);
    free(m->leaves);
    it_tensor_release(m->params);
    it_tensor_release(m->grads);
    free(m);
}

/* ---------------------------------------------------------------- the layout walk */

/* Megatron's cut of each role (InfiniTrain's Column/RowParallelLinear, VocabParallelEmbedding):
 * a row-parallel layer adds its bias after the reduction, whole, so that bias is replicated. */
static it_param_split role_split(it_param_role role, bool is_bias) {
    switch (role) {
    case IT_PARAM_ROLE_TOKEN_EMBEDDING: return IT_PARAM_SPLIT_VOCAB;
    case IT_PARAM_ROLE_ATTN_QKV:
    case IT_PARAM_ROLE_MLP_UP:
    case IT_PARAM_ROLE_MLP_GATE:
    case IT_PARAM_ROLE_LM_HEAD: return IT_PARAM_SPLIT_COLUMN;
    case IT_PARAM_ROLE_ATTN_OUT:
    case IT_PARAM_ROLE_MLP_DOWN: return is_bias ? IT_PARAM_SPLIT_NONE : IT_PARAM_SPLIT_ROW;
    default: return IT_PARAM_SPLIT_NONE;
    }
}

static bool role_is_linear(it_param_role role) {
    return role != IT_PARAM_ROLE_TOKEN_EMBEDDING && role != IT_PARAM_ROLE_POSITION_EMBEDDING &&
           role != IT_PARAM_ROLE_NORM;
}

/* Append the entry for `spec` at lo->off (views left to the caller). */
static it__param_entry *add_entry(it__layout *lo, int64_t at, const it__param_spec *spec, const char *fmt, va_list ap) {
    it_model *m = lo->m;
    char name[256];
    int len = vsnprintf(name, sizeof name, fmt, ap);
    if (len < 0 || (size_t)len >= sizeof name) {
        lo->st = it_error(IT_ERR_INTERNAL, "model: parameter name too long: %s", name);
        return NULL;
    }
    if (m->n_entries == m->cap_entries) {
        int cap = m->cap_entries ? 2 * m->cap_entries : 64;
        it__param_entry *e = realloc(m->entries, sizeof *e * (size_t)cap);
        if (!e) {
            lo->st = it_error(IT_ERR_OOM, "model: parameter names: out of host memory");
            return NULL;
        }
        m->entries = e;
        m->cap_entries = cap;
    }
    /* name and module in one allocation: "a.b.weight\0a.b\0" */
    const char *dot = strrchr(name, '.');
    size_t mlen = dot ? (size_t)(dot - name) : 0;
    char *buf = malloc((size_t)len + 1 + mlen + 1);
    if (!buf) {
        lo->st = it_error(IT_ERR_OOM, "model: parameter names: out of host memory");
        return NULL;
    }
    memcpy(buf, name, (size_t)len + 1);
    memcpy(buf + len + 1, name, mlen);
    buf[len + 1 + mlen] = '\0';
    int64_t numel = spec->ndim == 1 ? spec->shape[0] : spec->shape[0] * spec->shape[1];
    it__param_entry *e = &m->entries[m->n_entries++];
    *e = (it__param_entry){{.name = buf,
                            .module = buf + len + 1,
                            .tied_name = spec->tied_name,
                            .role = spec->role,
                            .split = role_split(spec->role, spec->is_bias),
                            .is_bias = spec->is_bias,
                            .is_linear = role_is_linear(spec->role),
                            .layer = spec->layer,
                            .expert = spec->expert,
                            .ndim = spec->ndim,
                            .shape = {spec->shape[0], spec->ndim == 1 ? 0 : spec->shape[1]},
                            .offset = at,
                            .numel = numel},
                           false};
    if (spec->role == IT_PARAM_ROLE_ATTN_QKV) {
        const it_model_info *in = &m->info;
        int64_t hd = in->n_embd / in->n_head;
        e->info.head_dim = hd;
        e->info.q_rows = (int64_t)in->n_head * hd;
        e->info.kv_rows = (int64_t)in->n_kv_head * hd;
        if (spec->shape[0] != e->info.q_rows + 2 * e->info.kv_rows) {
            lo->st = it_error(IT_ERR_INTERNAL, "model: %s has %lld rows, not Q+K+V = %lld", name,
                              (long long)spec->shape[0], (long long)(e->info.q_rows + 2 * e->info.kv_rows));
            return NULL;
        }
    }
    return e;
}

it_tensor *it__layout_take(it__layout *lo, it__param_spec spec, const char *fmt, ...) {
    int64_t at = lo->off;
    lo->off += spec.ndim == 1 ? spec.shape[0] : spec.shape[0] * spec.shape[1];
    if (!lo->m || lo->st) return NULL;
    it_tensor *t = it__model_param(lo->m, at, spec.ndim, spec.shape);
    if (!t) {
        lo->st = it_last_status() ? it_last_status() : IT_ERR_OOM;
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    it__param_entry *e = add_entry(lo, at, &spec, fmt, ap);
    va_end(ap);
    if (!e) return NULL;
    e->info.param = t;
    e->info.grad = it_tensor_grad(t);
    return t;
}

it_tensor *it__layout_alias(it__layout *lo, it__param_spec spec, const char *fmt, ...) {
    if (!lo->m || lo->st) return NULL;
    va_list ap;
    va_start(ap, fmt);
    it__param_entry *e = add_entry(lo, lo->off, &spec, fmt, ap);
    va_end(ap);
    if (!e) return NULL;
    int64_t strides[IT_MAX_DIMS];
    it__contiguous_strides(spec.ndim, spec.shape, strides);
    e->alias = true;
    e->info.param = it__tensor_view_owned(lo->m->params, spec.ndim, spec.shape, strides, lo->off);
    e->info.grad = it__tensor_view_owned(lo->m->grads, spec.ndim, spec.shape, strides, lo->off);
    if (!e->info.param || !e->info.grad) {
        lo->st = it_last_status() ? it_last_status() : IT_ERR_OOM;
        return NULL;
    }
    return e->info.param;
}

it_tensor *it__layout_leaf(it__layout *lo, int ndim, int64_t a, int64_t b) {
    int64_t shape[2] = {a, b}, at = lo->off;
    lo->off += ndim == 1 ? a : a * b;
    if (!lo->m || lo->st) return NULL;
    it_tensor *t = it__model_param(lo->m, at, ndim, shape);
    if (!t) lo->st = it_last_status() ? it_last_status() : IT_ERR_OOM;
    return t;
}

int it_model_param_count(const it_model *m) { return m ? m->n_entries : 0; }

const it_model_param_info *it_model_param_at(const it_model *m, int i) {
    return m && i >= 0 && i < m->n_entries ? &m->entries[i].info : NULL;
}

const it_model_param_info *it_model_param_find(const it_model *m, const char *name) {
    for (int i = 0; m && name && i < m->n_entries; i++)
        if (strcmp(m->entries[i].info.name, name) == 0) return &m->entries[i].info;
    return NULL;
}

bool it_model_name_matches(const char *name, const char *suffix) {
    if (!name || !suffix || !*suffix) return false;
    size_t n = strlen(name), k = strlen(suffix);
    if (k > n || strcmp(name + n - k, suffix) != 0) return false;
    return k == n || name[n - k - 1] == '.';
}

int it_model_param_match(const it_model *m, const char *suffix, const it_model_param_info **out, int max) {
    int count = 0;
    for (int i = 0; m && i < m->n_entries; i++) {
        if (!it_model_name_matches(m->entries[i].info.name, suffix)) continue;
        if (out && count < max) out[count] = &m->entries[i].info;
        count++;
    }
    return count;
}

void it_model_set_aux_loss_coeff(it_model *m, float coeff) {
    if (m->vt->set_aux_loss_coeff) m->vt->set_aux_loss_coeff(m, coeff);
}

int it_model_expert_tokens(it_model *m, int64_t *counts, int max, bool reset) {
    return m->vt->expert_tokens ? m->vt->expert_tokens(m, counts, max, reset) : 0;
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
        if (st)
            it_afile_abort(f);
        else
            st = it_afile_commit(f);
    }
    free(host);
    return st;
}
