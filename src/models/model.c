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
#include "infinitrain/dist.h"
#include "models/model_impl.h"

it_status it__model_init(it_model *m, const it_model_vtable *vt, it_device dev, int64_t num_params) {
    m->vt = vt;
    m->dev = dev;
    m->loss_scale = 1.0f;
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
           role != IT_PARAM_ROLE_NORM && role != IT_PARAM_ROLE_HEAD_NORM;
}

/* The K (= V) rows one TP rank keeps of kv_rows: its share when TP divides the kv heads, else
 * (TP a multiple of them) the one head its query heads attend with; 0: neither. */
static int64_t kv_rows_kept(int64_t kv_rows, int64_t head_dim, int tp) {
    int64_t heads = head_dim ? kv_rows / head_dim : 0;
    if (heads && heads % tp == 0) return kv_rows / tp;
    if (heads && tp % heads == 0) return head_dim;
    return 0;
}

/* name <- fmt's expansion; false (lo->st set) when it does not fit. */
static bool format_name(it__layout *lo, char name[256], const char *fmt, va_list ap) {
    int len = vsnprintf(name, 256, fmt, ap);
    if (len >= 0 && len < 256) return true;
    lo->st = it_error(IT_ERR_INTERNAL, "model: parameter name too long: %s", name);
    return false;
}

/* Append the entry for `spec` at `at` (views left to the caller). */
static it__param_entry *add_entry(it__layout *lo, int64_t at, const it__param_spec *spec, const char *name) {
    it_model *m = lo->m;
    int len = (int)strlen(name);
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
                            .numel = numel,
                            .full_shape = {spec->shape[0], spec->ndim == 1 ? 0 : spec->shape[1]},
                            .full_offset = at},
                           false};
    if (spec->role == IT_PARAM_ROLE_ATTN_QKV) {
        const it_model_info *in = &m->info;
        int64_t hd = spec->head_dim ? spec->head_dim : in->n_embd / in->n_head, tp = m->tp_size > 1 ? m->tp_size : 1;
        e->info.head_dim = hd;
        e->info.q_rows = (int64_t)in->n_head * hd / tp; /* this rank's heads: [Q_r | K_r | V_r] */
        e->info.kv_rows = tp > 1 ? kv_rows_kept((int64_t)in->n_kv_head * hd, hd, (int)tp) : (int64_t)in->n_kv_head * hd;
        if (spec->shape[0] != e->info.q_rows + 2 * e->info.kv_rows) {
            lo->st = it_error(IT_ERR_INTERNAL, "model: %s has %lld rows, not Q+K+V = %lld", name,
                              (long long)spec->shape[0], (long long)(e->info.q_rows + 2 * e->info.kv_rows));
            return NULL;
        }
    }
    return e;
}

/* spec's shape cut for tp ranks by its split (the caller checked divisibility; a misfit is a
 * model bug, reported). */
static bool cut_spec(it__param_spec *spec, int tp, it_status *st) {
    if (tp <= 1) return true;
    it_param_split split = role_split(spec->role, spec->is_bias);
    int d = split == IT_PARAM_SPLIT_ROW ? 1 : split == IT_PARAM_SPLIT_NONE ? -1 : 0;
    if (d < 0) return true;
    if (spec->role == IT_PARAM_ROLE_ATTN_QKV && spec->kv_rows) { /* [Q_r | K_r | V_r] */
        int64_t q = spec->shape[0] - 2 * spec->kv_rows, kv = kv_rows_kept(spec->kv_rows, spec->head_dim, tp);
        if (q % tp == 0 && kv) {
            spec->shape[0] = q / tp + 2 * kv;
            return true;
        }
    } else if (spec->shape[d] % tp == 0) {
        spec->shape[d] /= tp;
        return true;
    }
    *st = it_error(IT_ERR_INTERNAL, "model: a parameter's dim %d (%lld) does not cut into %d", d,
                   (long long)spec->shape[d], tp);
    return false;
}

static int64_t spec_numel(const it__param_spec *spec) {
    return spec->ndim == 1 ? spec->shape[0] : spec->shape[0] * spec->shape[1];
}

void it__model_set_stages(it_model *m, int n_layer) {
    int P = m->pp_size, V = m->nchunk, q = n_layer / (P * V), rem = n_layer % (P * V);
    for (int v = 0; v < V; v++) {
        int g = v * P + m->pp_rank;
        m->chunk_l0[v] = g < rem ? g * (q + 1) : rem * (q + 1) + (g - rem) * q;
        m->chunk_l1[v] = m->chunk_l0[v] + q + (g < rem ? 1 : 0);
    }
    it_model_set_chunk(m, 0);
}

void it_model_set_chunk(it_model *m, int v) {
    if (m->pp_size <= 1) return;
    m->l0 = m->chunk_l0[v];
    m->l1 = m->chunk_l1[v];
    m->first = m->stage_first && v == 0;
    m->last = m->stage_last && v == m->nchunk - 1;
}

bool it__layout_owns(const it__layout *lo, const it__param_spec *spec) {
    const it_model *m = lo->m ? lo->m : lo->par;
    if (!m || m->pp_size <= 1) return true;
    if (spec->layer >= 0) {
        for (int v = 0; v < m->nchunk; v++)
            if (spec->layer >= m->chunk_l0[v] && spec->layer < m->chunk_l1[v]) return true;
        return false;
    }
    if (spec->role == IT_PARAM_ROLE_TOKEN_EMBEDDING || spec->role == IT_PARAM_ROLE_POSITION_EMBEDDING)
        return m->stage_first;
    return m->stage_last; /* ln_f, lm_head */
}

static int layout_tp(const it__layout *lo) {
    const it_model *m = lo->m ? lo->m : lo->par;
    return m ? m->tp_size : 1;
}

/* What take and alias share: the name, the one-rank layout's visit and offset, and this
 * rank's cut. *spec becomes this rank's shape; false when lo holds none of it (counting,
 * another pipeline stage's, a failure). */
static bool layout_enter(it__layout *lo, it__param_spec *spec, int64_t *full_at, char name[256], const char *fmt,
                         va_list ap) {
    *full_at = lo->full_off;
    if (!format_name(lo, name, fmt, ap)) return false;
    if (lo->visit) lo->visit(lo->visit_ctx, spec, *full_at, name);
    lo->full_off += spec_numel(spec);
    if (!it__layout_owns(lo, spec)) return false; /* another pipeline stage's */
    return cut_spec(spec, layout_tp(lo), &lo->st);
}

/* The entry's full (one-rank) shape and offset beside this rank's. */
static void set_full(it__param_entry *e, const it__param_spec *full, int64_t full_at) {
    e->info.full_shape[0] = full->shape[0];
    e->info.full_shape[1] = full->ndim == 1 ? 0 : full->shape[1];
    e->info.full_offset = full_at;
}

it_tensor *it__layout_take(it__layout *lo, it__param_spec spec, const char *fmt, ...) {
    int64_t at = lo->off, full_at;
    it__param_spec full = spec;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    bool mine = layout_enter(lo, &spec, &full_at, name, fmt, ap);
    va_end(ap);
    if (!mine) return NULL;
    lo->off += spec_numel(&spec);
    if (!lo->m || lo->st) return NULL;
    it_tensor *t = it__model_param(lo->m, at, spec.ndim, spec.shape);
    if (!t) {
        lo->st = it_last_status() ? it_last_status() : IT_ERR_OOM;
        return NULL;
    }
    it__param_entry *e = add_entry(lo, at, &spec, name);
    if (!e) return NULL;
    e->info.param = t;
    e->info.grad = it_tensor_grad(t);
    set_full(e, &full, full_at);
    return t;
}

it_tensor *it__layout_tied_copy(it__layout *lo, it__param_spec spec, const char *name, int64_t full_offset) {
    int64_t full_off = lo->full_off;
    void (*visit)(void *, const it__param_spec *, int64_t, const char *) = lo->visit;
    lo->visit = NULL; /* not in the one-rank layout: the file's rows are the tied tensor's */
    it_tensor *t = it__layout_take(lo, spec, "%s", name);
    lo->visit = visit;
    lo->full_off = full_off;
    if (t && lo->m) {
        it_model_param_info *p = &lo->m->entries[lo->m->n_entries - 1].info;
        p->full_offset = full_offset;
        p->pp_copy = true;
    }
    return t;
}

it_tensor *it__layout_alias(it__layout *lo, it__param_spec spec, const char *fmt, ...) {
    int64_t full_at;
    it__param_spec full = spec;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    lo->leaves_elsewhere = !it__layout_owns(lo, &spec);
    bool mine = layout_enter(lo, &spec, &full_at, name, fmt, ap);
    va_end(ap);
    if (!mine || !lo->m || lo->st) return NULL;
    it__param_entry *e = add_entry(lo, lo->off, &spec, name);
    if (!e) return NULL;
    set_full(e, &full, full_at);
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

void it__layout_qkv_rows(const it__layout *lo, int64_t q_rows, int64_t kv_rows, int64_t head_dim, int64_t *q,
                         int64_t *kv) {
    int tp = layout_tp(lo);
    *q = tp > 1 ? q_rows / tp : q_rows;
    *kv = tp > 1 ? kv_rows_kept(kv_rows, head_dim, tp) : kv_rows;
}

it_tensor *it__layout_leaf(it__layout *lo, int ndim, int64_t a, int64_t b) {
    if (lo->leaves_elsewhere) return NULL;
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
    m->loss_forward = true;
    m->loss_targets = targets;
    m->loss_valid = m->info.vocab_size;
    m->loss_fused = false;
    it_tensor *logits = it_model_forward(m, idx), *loss;
    m->loss_forward = false;
    m->loss_targets = NULL;
    if (m->loss_fused) { /* the LM head gave the loss itself (ops/linear_ce.c) */
        m->loss_fused = false;
        loss = logits;
    } else if (m->tp_size > 1) { /* this rank's vocabulary columns [lo, lo + Vl), the first `valid` of them real */
        int64_t vl = m->info.padded_vocab / m->tp_size, lo = (int64_t)m->tp_rank * vl;
        int64_t valid = m->info.vocab_size - lo;
        valid = valid < 0 ? 0 : valid > vl ? vl : valid;
        loss = it_tp_cross_entropy(m->tp, logits, targets, lo, valid);
    } else {
        loss = it__cross_entropy_last_use(logits, targets, m->info.vocab_size);
    }
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
    it__weights_written(); /* autocast's copies of the parameters are stale */
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

/* ---------------------------------------------------------------- tensor parallelism */

void it__model_set_parallel(it_model *m, const it_model_parallel *par) {
    m->tp = par && par->tp && it_dist_world(par->tp) > 1 ? par->tp : NULL;
    m->tp_size = m->tp ? it_dist_world(m->tp) : 1;
    m->tp_rank = m->tp ? it_dist_rank(m->tp) : 0;
    m->sp = m->tp && par->sequence_parallel;
    m->pp = par && par->pp && it_dist_world(par->pp) > 1 ? par->pp : NULL;
    m->pp_size = m->pp ? it_dist_world(m->pp) : 1;
    m->pp_rank = m->pp ? it_dist_rank(m->pp) : 0;
    m->first = m->stage_first = m->pp_rank == 0;
    m->last = m->stage_last = m->pp_rank == m->pp_size - 1;
    m->nchunk = m->pp && par->virtual_stages > 1 ? par->virtual_stages : 1;
    m->mp = par && par->mp && it_dist_world(par->mp) > 1 ? par->mp : m->tp;
    m->cp = par && par->cp && it_dist_world(par->cp) > 1 ? par->cp : NULL;
    m->cp_size = m->cp ? it_dist_world(m->cp) : 1;
    m->cp_rank = m->cp ? it_dist_rank(m->cp) : 0;
    m->cp_comm = m->cp ? par->cp_comm : 0;
    m->cp_balance = m->cp && par->cp_balance;
    m->l0 = 0;
    m->l1 = 1 << 30; /* set by the model once it knows n_layer (it__model_set_stages) */
}

void it_model_set_stage_input(it_model *m, it_tensor *act) { m->stage_in = act; }

void it_model_set_loss_scale(it_model *m, float scale) { m->loss_scale = scale; }

it_tensor *it_model_take_stage_aux(it_model *m) {
    it_tensor *a = m->stage_aux;
    m->stage_aux = NULL;
    return a;
}
int it_model_pp_size(const it_model *m) { return m && m->pp_size > 1 ? m->pp_size : 1; }
int it_model_pp_rank(const it_model *m) { return m ? m->pp_rank : 0; }

int it_model_tp_size(const it_model *m) { return m && m->tp_size > 1 ? m->tp_size : 1; }
int it_model_tp_rank(const it_model *m) { return m ? m->tp_rank : 0; }
bool it_model_sequence_parallel(const it_model *m) { return m && m->sp; }

bool it_model_set_sequence_parallel(it_model *m, bool on) {
    bool was = m->sp;
    m->sp = m->tp && on;
    return was;
}

it_status it__tp_check(const it_model_parallel *par, const char *what, int n_head, int n_kv_head, int64_t ffn,
                       int64_t vocab) {
    int tp = par && par->tp ? it_dist_world(par->tp) : 1;
    if (tp <= 1) return IT_OK;
    const struct {
        const char *name;
        int64_t n;
    } dims[] = {{"n_head", n_head}, {"n_kv_head", n_kv_head}, {"the FFN width", ffn}, {"the padded vocabulary", vocab}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].n % tp && !(i == 1 && tp % dims[i].n == 0)) /* kv heads: kept whole when TP is a multiple */
            return it_error(IT_ERR_INVALID_ARG, "--tensor_parallel: %d does not divide %s's %s %lld%s", tp, what,
                            dims[i].name, (long long)dims[i].n,
                            i == 1 ? " (nor is it a multiple of it: kv heads are cut, or kept one per rank)" : "");
    return IT_OK;
}

it_tensor *it__tp_enter(it_model *m, it_tensor *x) {
    if (!m->tp) return x;
    return m->sp ? it_sp_gather(m->tp, x) : it_tp_copy(m->tp, x);
}

it_tensor *it__tp_leave(it_model *m, it_tensor *x, it_tensor *bias) {
    if (m->tp) x = m->sp ? it_sp_reduce_scatter(m->tp, x) : it_tp_reduce(m->tp, x);
    return bias ? it_add(x, bias) : x;
}

it_tensor *it__tp_row_linear(it_model *m, it_tensor *x, it_tensor *w, it_tensor *b) {
    if (!m->tp) return it__linear(m, x, w, b);
    return it__tp_leave(m, it__linear(m, x, w, NULL), b); /* the bias once, after the sum */
}

it_tensor *it__tp_embed(it_model *m, it_tensor *idx, it_tensor *wte) {
    if (!m->tp) return it_embedding(idx, wte);
    it_tensor *e = it_tp_embedding(idx, wte, (int64_t)m->tp_rank * it_tensor_dim(wte, 0));
    return m->sp ? it_sp_reduce_scatter(m->tp, e) : it_tp_reduce(m->tp, e);
}

void it__param_runs(const it_model_param_info *p, int tp, int r, it__run_fn fn, void *ctx) {
    if (tp <= 1 || p->split == IT_PARAM_SPLIT_NONE) {
        fn(ctx, p->full_offset, p->offset, p->numel);
    } else if (p->split == IT_PARAM_SPLIT_ROW) { /* columns [r*lc, (r+1)*lc) of every row */
        int64_t lc = p->shape[1], fc = p->full_shape[1];
        for (int64_t i = 0; i < p->shape[0]; i++) fn(ctx, p->full_offset + i * fc + r * lc, p->offset + i * lc, lc);
    } else if (p->role == IT_PARAM_ROLE_ATTN_QKV) { /* [Q_r | K_r | V_r] from the Q, K and V blocks */
        int64_t cols = p->ndim == 2 ? p->shape[1] : 1, lq = p->q_rows, lkv = p->kv_rows;
        int64_t fq = lq * tp, fkv = (p->full_shape[0] - fq) / 2;
        int64_t kvb = lkv * tp == fkv ? r : r / (lkv * tp / fkv); /* a kept kv head: the one of r's queries */
        fn(ctx, p->full_offset + r * lq * cols, p->offset, lq * cols);
        fn(ctx, p->full_offset + (fq + kvb * lkv) * cols, p->offset + lq * cols, lkv * cols);
        fn(ctx, p->full_offset + (fq + fkv + kvb * lkv) * cols, p->offset + (lq + lkv) * cols, lkv * cols);
    } else { /* rows [r*n, (r+1)*n) */
        fn(ctx, p->full_offset + r * p->numel, p->offset, p->numel);
    }
}

/* The one-rank layout's length: the end of its last tensor (under PP the last stage holds it;
 * the others learn it from the group). */
static int64_t full_numel(const it_model *m) {
    int64_t end = 0;
    for (int i = 0; i < m->n_entries; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        int64_t e = p->full_offset + (p->ndim == 1 ? p->full_shape[0] : p->full_shape[0] * p->full_shape[1]);
        if (!p->pp_copy && e > end) end = e;
    }
    if (m->pp) it_dist_all_reduce_host(m->pp, &end, 1, IT_DTYPE_I64, IT_CCL_MAX);
    return end;
}

typedef struct copy_ctx {
    float *local;
    const float *full_in;
    float *full_out;
    FILE *f;
    const char *path;
    it_status st;
} copy_ctx;

static void run_from_full(void *p, int64_t full_at, int64_t local_at, int64_t n) {
    copy_ctx *c = p;
    memcpy(c->local + local_at, c->full_in + full_at, sizeof(float) * (size_t)n);
}

static void run_to_full(void *p, int64_t full_at, int64_t local_at, int64_t n) {
    copy_ctx *c = p;
    memcpy(c->full_out + full_at, c->local + local_at, sizeof(float) * (size_t)n);
}

static void run_read(void *p, int64_t full_at, int64_t local_at, int64_t n) {
    copy_ctx *c = p;
    if (c->st) return;
    if (fseeko(c->f, 1024 + (off_t)full_at * (off_t)sizeof(float), SEEK_SET) != 0 ||
        fread(c->local + local_at, sizeof(float), (size_t)n, c->f) != (size_t)n)
        c->st = it_error(IT_ERR_IO, "%s: reading %lld parameters at element %lld failed", c->path, (long long)n,
                         (long long)full_at);
}

static it_status host_params(const it_model *m, float **out) {
    size_t bytes = it_tensor_nbytes(m->params);
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return it_error(IT_ERR_OOM, "model: %zu bytes of host memory for the parameters", bytes);
    return IT_OK;
}

it_status it__model_from_full(it_model *m, const float *full) {
    copy_ctx c = {.full_in = full};
    it_status st = host_params(m, &c.local);
    if (st) return st;
    for (int i = 0; i < m->n_entries; i++)
        it__param_runs(&m->entries[i].info, m->tp_size, m->tp_rank, run_from_full, &c);
    st = it_tensor_copy_from_host(m->params, c.local, it_tensor_nbytes(m->params));
    it__weights_written();
    free(c.local);
    return st;
}

it_status it__model_read_sliced(it_model *m, const char *path) {
    copy_ctx c = {.path = path};
    it_status st = host_params(m, &c.local);
    if (st) return st;
    c.f = fopen(path, "rb");
    if (!c.f) {
        free(c.local);
        return it_error(IT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    for (int i = 0; i < m->n_entries && !c.st; i++)
        it__param_runs(&m->entries[i].info, m->tp_size, m->tp_rank, run_read, &c);
    fclose(c.f);
    st = c.st ? c.st : it_tensor_copy_from_host(m->params, c.local, it_tensor_nbytes(m->params));
    it__weights_written();
    free(c.local);
    return st;
}

typedef struct entry_ctx {
    const it_model_param_info *p;
    float *buf; /* the entry's local elements */
    it__entry_read_fn fn;
    void *fn_ctx;
    it_status st;
} entry_ctx;

static void run_entry(void *c_, int64_t full_at, int64_t local_at, int64_t n) {
    entry_ctx *c = c_;
    if (!c->st) c->st = c->fn(c->fn_ctx, c->p, full_at - c->p->full_offset, n, c->buf + (local_at - c->p->offset));
}

it_status it__model_read_entries(it_model *m, it__entry_read_fn fn, void *ctx) {
    int64_t most = 0;
    for (int i = 0; i < m->n_entries; i++)
        if (m->entries[i].info.numel > most) most = m->entries[i].info.numel;
    entry_ctx c = {.fn = fn, .fn_ctx = ctx, .buf = malloc(sizeof(float) * (size_t)(most ? most : 1))};
    if (!c.buf) return it_error(IT_ERR_OOM, "model: %lld floats of host memory to read a tensor", (long long)most);
    for (int i = 0; i < m->n_entries && !c.st; i++) {
        c.p = &m->entries[i].info;
        it__param_runs(c.p, m->tp_size, m->tp_rank, run_entry, &c);
        if (!c.st) c.st = it_tensor_copy_from_host(c.p->param, c.buf, sizeof(float) * (size_t)c.p->numel);
    }
    it__weights_written();
    free(c.buf);
    return c.st;
}

it_status it__model_gather_full(const it_model *m, float **full, int64_t *full_num_params) {
    int64_t P = it_tensor_numel(m->params), F = full_numel(m), tp = m->tp_size;
    *full = malloc(sizeof(float) * (size_t)F + 1);
    float *all = malloc(sizeof(float) * (size_t)(P * tp) + 1);
    if (!*full || !all) {
        free(*full);
        free(all);
        *full = NULL;
        return it_error(IT_ERR_OOM, "model: %lld parameters of host memory to gather the slices", (long long)(P * tp));
    }
    it_scope_begin();
    int64_t shape[1] = {P * tp};
    it_tensor *dev_all = tp > 1 ? it_tensor_new(m->dev, IT_DTYPE_FP32, 1, shape) : NULL;
    it_status st = tp > 1 ? (dev_all ? it_dist_all_gather(m->tp, m->params, dev_all) : it_last_status()) : IT_OK;
    if (!st) st = it_tensor_copy_to_host(tp > 1 ? dev_all : m->params, all, sizeof(float) * (size_t)(P * tp));
    it_scope_end();
    if (m->pp) memset(*full, 0, sizeof(float) * (size_t)F); /* each stage fills its own tensors */
    for (int r = 0; r < tp && !st; r++) {
        copy_ctx c = {.local = all + r * P, .full_out = *full};
        for (int i = 0; i < m->n_entries; i++)
            if (!m->entries[i].info.pp_copy) it__param_runs(&m->entries[i].info, (int)tp, r, run_to_full, &c);
    }
    free(all);
    if (!st && m->pp) { /* the stages' disjoint tensors: a sum over PP (x + 0 = x) is their union */
        for (int64_t at = 0; at < F && !st; at += 1 << 26) { /* within MPI's int counts */
            int64_t n = F - at < (1 << 26) ? F - at : 1 << 26;
            st = it_dist_all_reduce_host(m->pp, *full + at, (size_t)n, IT_DTYPE_FP32, IT_CCL_SUM);
        }
    }
    if (st) {
        free(*full);
        *full = NULL;
        return st;
    }
    *full_num_params = F;
    return IT_OK;
}

/* How many TP ranks keep each K and V row of a c_attn slice (1: they are cut). */
static int64_t kv_copies(const it_model *m, const it_model_param_info *p) {
    if (!m->tp || p->role != IT_PARAM_ROLE_ATTN_QKV) return 1;
    int64_t fkv = (p->full_shape[0] - p->q_rows * m->tp_size) / 2;
    return p->kv_rows * m->tp_size / fkv;
}

/* Trainable tensor i (an entry, or with LoRA an adapter: B of c_attn has its weight's rows)
 * as far as kv_copies and sync_kept_kv look at it. */
static it_model_param_info kv_view(const it_model *m, int i) {
    return m->lora ? it__lora_param_view(it_model_lora_at(m, i)) : m->entries[i].info;
}

/* A kept kv head's K and V rows saw only this rank's query heads: their gradients are summed
 * over the ranks that keep the same head (through one all-reduce over the group of a buffer
 * of every kv head's rows, each rank adding its own at its head's place). */
/* p's K (half 0) or V (half 1) rows, flat, and their place in a buffer of every kv head's. */
static it_status kv_views(const it_model_param_info *p, it_tensor *buf, int half, int64_t kvb, int64_t fkv,
                          it_tensor **mine, it_tensor **at) {
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1, lkv = p->kv_rows, n = lkv * cols;
    it_tensor *rows = it_tensor_slice(p->grad, 0, p->q_rows + half * lkv, p->q_rows + (half + 1) * lkv, 1);
    it_tensor *row = it_tensor_slice(buf, 0, half, half + 1, 1);
    *mine = rows ? it_tensor_view(rows, 1, &n) : NULL;
    *at = row ? it_tensor_slice(it_tensor_view(row, 1, (int64_t[]){fkv * cols}), 0, kvb * n, (kvb + 1) * n, 1) : NULL;
    return *mine && *at ? IT_OK : it_last_status();
}

static it_status sync_kept_kv(it_model *m, const it_model_param_info *p) {
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1, lkv = p->kv_rows, fkv = lkv * m->tp_size / kv_copies(m, p);
    int64_t kvb = m->tp_rank / kv_copies(m, p), shape[2] = {2, fkv * cols};
    it_tensor *mine, *at;
    it_scope_begin();
    it_tensor *buf = it_tensor_zeros(m->dev, IT_DTYPE_FP32, 2, shape);
    it_status st = buf ? IT_OK : it_last_status();
    for (int half = 0; half < 2 && !st; half++) /* K, then V, at this rank's head */
        if (!(st = kv_views(p, buf, half, kvb, fkv, &mine, &at))) st = it_tensor_copy_(at, mine);
    if (!st) st = it_dist_all_reduce(m->tp, buf, IT_CCL_SUM);
    for (int half = 0; half < 2 && !st; half++)
        if (!(st = kv_views(p, buf, half, kvb, fkv, &mine, &at))) st = it_tensor_copy_(mine, at);
    it_scope_end();
    return st;
}

/* GPT-2 under PP: wte's gradient (first stage) and its lm_head copy's (last stage) summed, as
 * Megatron's embedding group does: one all-reduce over the PP group, the middle stages adding
 * zeros (x + 0 = x: the first and last stage end with the same bits). */
static it_status sync_tied_copy(it_model *m) {
    const it_model_param_info *mine = NULL;
    int64_t shape[2] = {0, 0};
    bool tied = false;
    for (int i = 0; i < m->n_entries; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        if (p->pp_copy || (p->role == IT_PARAM_ROLE_TOKEN_EMBEDDING && p->tied_name)) tied = true;
        if (p->pp_copy || (m->stage_first && p->role == IT_PARAM_ROLE_TOKEN_EMBEDDING)) mine = p;
    }
    /* every stage learns the shape (it_model_info) and whether the model is tied */
    double flag = tied ? 1 : 0;
    it_status st = it_dist_all_reduce_host(m->pp, &flag, 1, IT_DTYPE_FP64, IT_CCL_MAX);
    if (st || flag == 0) return st;
    shape[0] = m->info.padded_vocab / m->tp_size;
    shape[1] = m->info.n_embd;
    it_scope_begin();
    it_tensor *buf = mine ? it_tensor_contiguous(mine->grad) : it_tensor_zeros(m->dev, IT_DTYPE_FP32, 2, shape);
    st = buf ? it_dist_all_reduce(m->pp, buf, IT_CCL_SUM) : it_last_status();
    it_scope_end();
    return st;
}

it_status it_model_tp_sync_grads(it_model *m) {
    it_status st = IT_OK;
    if (m->pp && !m->lora && (st = sync_tied_copy(m))) return st;
    if (!m->tp) return IT_OK;
    if (m->lora) { /* the adapters' whole factors saw this rank's part of the layer: summed */
        for (int i = 0; i < it_model_lora_count(m) && !st; i++) {
            it_model_param_info p = kv_view(m, i);
            if (it_model_lora_at(m, i)->split == IT_PARAM_SPLIT_NONE)
                st = it_dist_all_reduce(m->tp, it_model_lora_at(m, i)->grad, IT_CCL_SUM);
            else if (kv_copies(m, &p) > 1) /* B of c_attn: the rows of a kept kv head */
                st = sync_kept_kv(m, &p);
        }
        return st; /* the base is frozen */
    }
    for (int i = 0; i < m->n_entries && !st; i++) {
        const it_model_param_info *p = &m->entries[i].info;
        /* replicated: under SP each rank saw its rows; a head norm (Qwen3's q_norm, k_norm) saw
         * this rank's heads, SP or not */
        if (p->split == IT_PARAM_SPLIT_NONE && (m->sp || p->role == IT_PARAM_ROLE_HEAD_NORM))
            st = it_dist_all_reduce(m->tp, p->grad, IT_CCL_SUM);
        if (!st && kv_copies(m, p) > 1) st = sync_kept_kv(m, p);
    }
    return st;
}

/* Adds to *acc the squares of g's elements [a, b) (flat positions, g's first at base), weighted. */
static it_status add_span(it_tensor *g, int64_t base, int64_t a, int64_t b, double weight, double *acc) {
    if (a >= b || weight == 0) return IT_OK;
    double v = 0;
    it_tensor *view = it_tensor_slice(g, 0, a - base, b - base, 1);
    it_status st = view ? it_grad_norm(view, &v) : it_last_status();
    *acc += weight * v * v;
    return st;
}

it_status it_model_grad_shared_sumsq(it_model *m, it_tensor *g, int64_t flat_lo, double *over) {
    double acc = 0;
    it_status st = IT_OK;
    int64_t lo = flat_lo, hi = flat_lo + it_tensor_numel(g);
    int n = m->lora ? it_model_lora_count(m) : m->n_entries; /* what it_model_grads holds */
    it_scope_begin();
    for (int i = 0; (m->tp || m->pp) && i < n && !st; i++) {
        const it_lora_tensor_info *t = m->lora ? it_model_lora_at(m, i) : NULL;
        const it_model_param_info *p = t ? NULL : &m->entries[i].info;
        int64_t off = t ? t->offset : p->offset, numel = t ? t->numel : p->numel;
        if (off >= hi || off + numel <= lo) continue;
        if (p && p->pp_copy) { /* the first stage counts the tied embedding's gradient */
            st = add_span(g, flat_lo, off > lo ? off : lo, off + numel < hi ? off + numel : hi, 1.0, &acc);
            continue;
        }
        if (!m->tp) continue;
        if ((t ? t->split : p->split) == IT_PARAM_SPLIT_NONE) { /* on every rank of the group */
            st = add_span(g, flat_lo, off > lo ? off : lo, off + numel < hi ? off + numel : hi, 1.0 - 1.0 / m->tp_size,
                          &acc);
            continue;
        }
        it_model_param_info v = kv_view(m, i);
        int64_t copies = kv_copies(m, &v);
        if (copies == 1) continue;
        int64_t cols = v.ndim == 2 ? v.shape[1] : 1, a = off + v.q_rows * cols, b = a + 2 * v.kv_rows * cols;
        st = add_span(g, flat_lo, a > lo ? a : lo, b < hi ? b : hi, 1.0 - 1.0 / (double)copies, &acc); /* kept K, V */
    }
    it_scope_end();
    *over = acc;
    return st;
}

it_status it_model_grad_norm(it_model *m, double *norm) {
    double total = 0, over = 0;
    it_tensor *g = it_model_grads(m);
    it_status st = it_grad_norm(g, &total);
    if (st || !m->mp) {
        *norm = total;
        return st;
    }
    /* every element's square once: this rank's, less what its TP peers (or, for GPT-2's tied
     * head, the first stage) count too, summed over the model-parallel group */
    if ((st = it_model_grad_shared_sumsq(m, g, 0, &over))) return st;
    double mine = total * total - over;
    if ((st = it_dist_all_reduce_host(m->mp, &mine, 1, IT_DTYPE_FP64, IT_CCL_SUM))) return st;
    *norm = sqrt(fmax(mine, 0.0));
    return IT_OK;
}

it_status it__save_checkpoint(const it_model *m, const char *path, const int32_t header[256]) {
    return it__save_checkpoint_tail(m, path, header, 0, 0);
}

it_status it__save_checkpoint_tail(const it_model *m, const char *path, const int32_t header[256], int64_t tail_at,
                                   int64_t tail_n) {
    if (!m->tp && !m->pp && !tail_n) return it__write_checkpoint(path, header, m->params);
    float *full = NULL;
    int64_t n = 0;
    it_status st;
    if (!m->tp && !m->pp) { /* the whole buffer is this rank's */
        n = it_tensor_numel(m->params);
        full = malloc(sizeof(float) * (size_t)n + 1);
        st = full ? it_tensor_copy_to_host(m->params, full, sizeof(float) * (size_t)n)
                  : it_error(IT_ERR_OOM, "%s: %lld parameters of host memory to save", path, (long long)n);
    } else {
        st = it__model_gather_full(m, &full, &n);
    }
    if (st || m->tp_rank != 0 || m->pp_rank != 0) { /* the group's first rank writes */
        free(full);
        return st;
    }
    if (tail_at < 0 || tail_n < 0 || tail_at + tail_n > n) {
        free(full);
        return it_error(IT_ERR_INTERNAL, "%s: the tail [%lld, +%lld) is outside the %lld parameters", path,
                        (long long)tail_at, (long long)tail_n, (long long)n);
    }
    it_afile *f = NULL;
    st = it_afile_open(path, &f);
    if (!st) st = it_afile_write(f, header, 256 * sizeof(int32_t));
    if (!st) st = it_afile_write(f, full, sizeof(float) * (size_t)n);
    if (!st && tail_n) st = it_afile_write(f, full + tail_at, sizeof(float) * (size_t)tail_n);
    if (f) st = st ? (it_afile_abort(f), st) : it_afile_commit(f);
    free(full);
    return st;
}

/* ---------------------------------------------------------------- activation recomputation */

it_status it_model_set_recompute(it_model *m, it_recompute how, int layers) {
    if ((how == IT_RECOMPUTE_UNIFORM || how == IT_RECOMPUTE_BLOCK) && layers < 1)
        return it_error(IT_ERR_INVALID_ARG, "--recompute_num_layers: %d; methods uniform and block need >= 1", layers);
    m->recompute = how;
    m->recompute_layers = layers;
    return IT_OK;
}

typedef struct region {
    it_model *m;
    it__layer_fn fn;
    int a, b;
} region;

static it_tensor *region_run(void *ctx, it_tensor *x) {
    const region *r = ctx;
    for (int l = r->a; l < r->b && x; l++) x = r->fn(r->m, l, x);
    return x;
}

it_tensor *it__run_layers(it_model *m, it_tensor *x, int l0, int l1, it__layer_fn fn) {
    int k = m->recompute_layers;
    for (int a = l0; a < l1 && x;) {
        int b = a + 1; /* this region's end, or a kept block's */
        bool ckpt = m->recompute != IT_RECOMPUTE_OFF && it_grad_enabled();
        if (m->recompute == IT_RECOMPUTE_UNIFORM) b = a + k < l1 ? a + k : l1;
        if (m->recompute == IT_RECOMPUTE_BLOCK) ckpt = ckpt && a - l0 < k;
        if (ckpt) {
            region r = {m, fn, a, b};
            x = it_checkpoint(region_run, &r, sizeof r, x);
        } else {
            x = fn(m, a, x);
        }
        a = b;
    }
    return x;
}

/* The model families: their names (the apps'), their llm.c-style files' magics and loaders, and
 * InfiniTrain's default --lora_target_modules for each (example/gpt2, example/llama3; Qwen3 as
 * LLaMA-3, the same module names; Mixtral's attention only, its experts are refused). */
static const struct {
    const char *family;
    int32_t magic;
    it_status (*load)(const char *path, it_device dev, const it_model_parallel *par, it_model **out);
    const char *lora_targets;
} FAMILIES[] = {{"gpt2", 20240326, it_gpt2_load_tp, "c_attn,c_proj"},
                {"llama3", 20240803, it_llama3_load_tp, "c_attn,c_proj,c_fc,c_fc2"},
                {"mixtral", 20260513, it_mixtral_load_tp, "c_attn,attn.c_proj"},
                {"qwen3", 20240804, it_qwen3_load_tp, "c_attn,c_proj,c_fc,c_fc2"}};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

it_status it_model_load(const char *path, it_device dev, it_model **out) {
    int32_t h[256];
    size_t bytes;
    it_status st = it__read_header(path, h, &bytes);
    if (st) return st;
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (h[0] == FAMILIES[i].magic) return FAMILIES[i].load(path, dev, NULL, out);
    return it_error(IT_ERR_FORMAT,
                    "%s: header[0] magic %d is none of llm.c GPT-2 (20240326), LLaMA-3 (20240803), "
                    "Mixtral (20260513) or Qwen3 (20240804)",
                    path, h[0]);
}

it_status it_model_load_family(const char *family, const char *path, it_device dev, const it_model_parallel *par,
                               it_model **out) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(family, FAMILIES[i].family) == 0) return FAMILIES[i].load(path, dev, par, out);
    return it_error(IT_ERR_INVALID_ARG, "model family '%s': expected gpt2, llama3, mixtral or qwen3", family);
}

const char *it_model_lora_default_targets(const char *family) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(family, FAMILIES[i].family) == 0) return FAMILIES[i].lora_targets;
    return "c_attn,c_proj";
}

bool it_model_family_known(const char *family) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(family, FAMILIES[i].family) == 0) return true;
    return false;
}
