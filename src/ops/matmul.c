/* Matrix products: batched matmul and linear layers, forward and backward, all through the
 * backend's gemm slot. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_common.h"

/* A 3-D (batch, rows, cols) descriptor of t's last two dims, flattening the leading dims.
 * Returns false when the leading dims cannot be flattened into one stride. A 2-D tensor
 * gets batch 1 (stride 0, so it also broadcasts over a batch). */
static bool desc3(const it_tensor *t, it_tdesc *d) {
    it_tdesc s = it_tensor_desc(t);
    int nd = t->ndim;
    int64_t batch = 1, bstride = 0, expect = -1;
    for (int i = nd - 3; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if (expect < 0)
            bstride = t->strides[i];
        else if (t->strides[i] != expect)
            return false;
        expect = t->strides[i] * t->shape[i];
        batch *= t->shape[i];
    }
    memset(d, 0, sizeof *d);
    d->data = s.data;
    d->dtype = s.dtype;
    d->ndim = 3;
    d->shape[0] = batch;
    d->strides[0] = batch > 1 ? bstride : 0;
    d->shape[1] = t->shape[nd - 2];
    d->strides[1] = t->strides[nd - 2];
    d->shape[2] = t->shape[nd - 1];
    d->strides[2] = t->strides[nd - 1];
    return true;
}

/* Ensure `*t` has a 3-D descriptor, replacing it by a contiguous copy when needed. */
static it_status flat3(it_tensor **t, it_tdesc *d) {
    if (desc3(*t, d)) return IT_OK;
    *t = it_tensor_clone(*t);
    if (!*t) return it_last_status();
    desc3(*t, d);
    return IT_OK;
}

/* c = alpha * op(a) @ op(b) + beta * c over the batch. */
it_status it__gemm(it_tensor *a, it_tensor *b, it_tensor *c, bool ta, bool tb, float alpha, float beta) {
    it_gemm_args g;
    memset(&g, 0, sizeof g);
    it_status st = flat3(&a, &g.a);
    if (!st) st = flat3(&b, &g.b);
    if (st) return st;
    if (!desc3(c, &g.c)) return it_error(IT_ERR_INTERNAL, "gemm: output is not flattenable");
    /* A 2-D operand broadcasts over the output's batch. */
    if (g.a.shape[0] == 1 && g.c.shape[0] > 1) g.a.shape[0] = g.c.shape[0];
    if (g.b.shape[0] == 1 && g.c.shape[0] > 1) g.b.shape[0] = g.c.shape[0];
    g.trans_a = ta;
    g.trans_b = tb;
    g.alpha = alpha;
    g.beta = beta;
    return KCALL(it_tensor_device(c), gemm, &g);
}

/* ---------------------------------------------------------------- cast, autocast */

static it_status cast_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0];
    if (x->requires_grad && x->grad && x->grad_zero) {
        /* a lazily zeroed gradient buffer (a parameter's, from the step before): dy cast
         * straight into it rather than into a copy that is then copied in (the same bits) */
        float beta;
        it_tensor *buf = it__grad_buffer(x, &beta);
        return buf ? it_tensor_copy_(buf, dy) : it_last_status();
    }
    it_tensor *g = it_tensor_to_dtype(dy, x->dtype);
    return g ? it__accum_grad(x, g) : it_last_status();
}

it_tensor *it_cast(it_tensor *x, it_dtype dtype) {
    OP_REQUIRE(x);
    if (x->dtype == dtype) return x;
    if (!it_dtype_valid((int)dtype)) {
        it_error(IT_ERR_INVALID_ARG, "cast: invalid dtype %d", (int)dtype);
        return NULL;
    }
    it_tensor *y = it_tensor_to_dtype(x, dtype);
    OP_REQUIRE(y);
    if (it__needs_grad(1, &x)) {
        if (!it_dtype_is_float(dtype)) {
            it_error(IT_ERR_INVALID_ARG, "cast: a tensor that requires grad cannot be cast to %s",
                     it_dtype_name(dtype));
            return NULL;
        }
        OP_REQUIRE(it__node_record("cast", cast_backward, y, 1, &x));
    }
    return y;
}

/* Autocast's copy of a parameter (a leaf that requires grad) in the autocast dtype is made
 * once per version of the parameters (it__weights_version, bumped by every optimizer step)
 * and reused by every product until then: by repeated uses in a step and by the micro-steps
 * of gradient accumulation. Each use gets its own view of the copy and its own cast node, so
 * that each use's gradient reaches the fp32 parameter as it__cast's would. An entry holds a
 * reference to the parameter, so that no other tensor is created at its address while the
 * entry lives; the entries of an older version are dropped at the first lookup after it. */
typedef struct wcopy {
    it_tensor *param, *copy;   /* both retained */
    const it_storage *storage; /* the parameter's storage when the copy was made */
} wcopy;
static struct {
    pthread_mutex_t lock;
    unsigned long long version;
    wcopy *e;
    size_t n, cap;
} g_wcopies = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0};

/* Room for one more entry (under the lock). */
static bool wcopy_room(void) {
    if (g_wcopies.n < g_wcopies.cap) return true;
    size_t cap = g_wcopies.cap ? 2 * g_wcopies.cap : 64;
    wcopy *e = realloc(g_wcopies.e, cap * sizeof *e);
    if (!e) return false;
    g_wcopies.e = e;
    g_wcopies.cap = cap;
    return true;
}

/* The optimizers' copies of their whole flat parameter buffers, written in their pass over
 * them (adam_step_round, or the step then one cast): a parameter that lies inside one is read
 * from it, with no cast of its own. `wanted` marks the storages autocast asked copies of
 * since the owning optimizer's last step, so that an optimizer keeps a copy only while
 * autocast reads one. All under g_wcopies.lock. */
enum { N_SHADOWS = 16 };
static struct {
    it_tensor *flat, *low; /* retained */
    unsigned long long version;
} g_shadows[N_SHADOWS];
static struct {
    const it_storage *storage;
    it_dtype dt;
} g_wanted[N_SHADOWS];
static int g_n_shadows, g_n_wanted;

static void wcopies_drop(void) {
    for (size_t i = 0; i < g_wcopies.n; i++) {
        it_tensor_release(g_wcopies.e[i].copy);
        it_tensor_release(g_wcopies.e[i].param);
    }
    g_wcopies.n = 0;
}

static void want(const it_tensor *t, it_dtype dt) {
    for (int i = 0; i < g_n_wanted; i++)
        if (g_wanted[i].storage == t->storage) {
            g_wanted[i].dt = dt;
            return;
        }
    if (g_n_wanted == N_SHADOWS) { /* the oldest mark goes (a storage no optimizer steps) */
        memmove(&g_wanted[0], &g_wanted[1], sizeof g_wanted[0] * (N_SHADOWS - 1));
        g_n_wanted--;
    }
    g_wanted[g_n_wanted++] = (__typeof__(g_wanted[0])){t->storage, dt};
}

bool it__autocast_wants_copy(const it_tensor *flat, it_dtype *dt) {
    bool found = false;
    pthread_mutex_lock(&g_wcopies.lock);
    /* called in an optimizer step: the per-parameter copies are stale, their memory goes
     * before the step makes its own */
    if (g_wcopies.version != it__weights_version()) wcopies_drop();
    for (int i = 0; i < g_n_wanted && !found; i++)
        if (g_wanted[i].storage == flat->storage) {
            *dt = g_wanted[i].dt;
            g_wanted[i] = g_wanted[--g_n_wanted];
            found = true;
        }
    pthread_mutex_unlock(&g_wcopies.lock);
    return found;
}

static void shadow_remove(int i) {
    it_tensor_release(g_shadows[i].low);
    it_tensor_release(g_shadows[i].flat);
    g_shadows[i] = g_shadows[--g_n_shadows];
}

static int shadow_find(const it_tensor *flat) {
    for (int i = 0; i < g_n_shadows; i++)
        if (g_shadows[i].flat == flat) return i;
    return -1;
}

it_status it__autocast_stepped(it_tensor *flat, it_tensor *low) {
    pthread_mutex_lock(&g_wcopies.lock);
    unsigned long long ver = it__weights_version();
    /* the step changed flat only: the other optimizers' copies that were current before it
     * still are */
    for (int k = 0; k < g_n_shadows; k++)
        if (g_shadows[k].flat != flat && g_shadows[k].version + 1 == ver) g_shadows[k].version = ver;
    int i = shadow_find(flat);
    if (!low && i >= 0) {
        shadow_remove(i);
    } else if (low && (i >= 0 || g_n_shadows < N_SHADOWS)) { /* past N_SHADOWS optimizers: cast per use */
        if (i < 0) {
            i = g_n_shadows++;
            g_shadows[i].flat = it_tensor_retain(flat);
            g_shadows[i].low = NULL;
        }
        if (g_shadows[i].low != low) {
            it_tensor_release(g_shadows[i].low);
            g_shadows[i].low = it_tensor_retain(low);
        }
        g_shadows[i].version = ver;
    }
    /* the per-parameter copies are of an older version: their memory goes now, not at the
     * next forward's first lookup */
    if (g_wcopies.version != ver) wcopies_drop();
    pthread_mutex_unlock(&g_wcopies.lock);
    return IT_OK;
}

void it__autocast_forget(const it_tensor *flat) {
    pthread_mutex_lock(&g_wcopies.lock);
    int i = shadow_find(flat);
    if (i >= 0) shadow_remove(i);
    for (int k = 0; k < g_n_wanted; k++)
        if (g_wanted[k].storage == flat->storage) g_wanted[k--] = g_wanted[--g_n_wanted];
    pthread_mutex_unlock(&g_wcopies.lock);
}

/* t's view of an optimizer's copy of this version that holds all of t, or NULL. */
static it_tensor *shadow_view(const it_tensor *t, it_dtype dt, unsigned long long ver) {
    int64_t lo = t->offset, hi = t->offset; /* t's elements span [lo, hi] of its storage */
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0 || t->strides[d] < 0) return NULL;
        hi += (t->shape[d] - 1) * t->strides[d];
    }
    for (int i = 0; i < g_n_shadows; i++) {
        const it_tensor *f = g_shadows[i].flat, *low = g_shadows[i].low;
        if (g_shadows[i].version != ver || low->dtype != dt || f->storage != t->storage || lo < f->offset ||
            hi >= f->offset + f->shape[0])
            continue;
        return it__tensor_view_owned(low, t->ndim, t->shape, t->strides, low->offset + (t->offset - f->offset));
    }
    return NULL;
}

static it_tensor *autocast_operand(it_tensor *t, it_dtype dt) {
    if (!t || t->dtype == dt || !t->is_leaf || !t->requires_grad || !it_dtype_valid((int)dt)) return it_cast(t, dt);
    unsigned long long ver = it__weights_version();
    it_tensor *copy = NULL;
    pthread_mutex_lock(&g_wcopies.lock);
    want(t, dt);
    /* the optimizer's copy when it holds t, else this version's copy of t (made here) */
    it_tensor *view = shadow_view(t, dt, ver);
    if (view) goto found;
    if (g_wcopies.version != ver) {
        wcopies_drop();
        g_wcopies.version = ver;
    }
    for (size_t i = 0; i < g_wcopies.n && !copy; i++) {
        const wcopy *e = &g_wcopies.e[i];
        if (e->param == t && e->storage == t->storage && e->copy->dtype == dt) copy = e->copy;
    }
    if (!copy && wcopy_room()) {
        /* made outside any grad recording: the cast node is per use, below */
        it_tensor *c = it_tensor_to_dtype(t, dt);
        if (c) {
            copy = it_tensor_retain(c);
            g_wcopies.e[g_wcopies.n++] = (wcopy){it_tensor_retain(t), copy, t->storage};
        }
    }
    if (copy) view = it__tensor_view_owned(copy, copy->ndim, copy->shape, copy->strides, copy->offset);
found:
    pthread_mutex_unlock(&g_wcopies.lock);
    if (!copy && !view) return it_cast(t, dt);
    it_tensor *y = it__scope_add(view);
    OP_REQUIRE(y);
    if (it__needs_grad(1, &t)) OP_REQUIRE(it__node_record("cast", cast_backward, y, 1, &t));
    return y;
}

bool it__autocast_share(it_tensor *x, int n, it_tensor **out) {
    for (int i = 0; i < n; i++) out[i] = x;
    if (!x) return false;
    it_dtype ac;
    if (n < 2 || x->dtype != IT_DTYPE_FP32 || !it_autocast_enabled(&ac) || ac == IT_DTYPE_FP32 ||
        !it__autocast_keep_low())
        return true;
    it_tensor *first = it_cast(x, ac);
    if (!first) return false;
    out[0] = first;
    /* the later uses' cast nodes come before the products' nodes, in the order the uses'
     * own casts had: the gradients reach x in the same order as well */
    for (int i = 1; i < n; i++) {
        out[i] = it__scope_add(it__tensor_view_owned(first, first->ndim, first->shape, first->strides, first->offset));
        if (!out[i]) return false;
        if (it__needs_grad(1, &x) && !it__node_record("cast", cast_backward, out[i], 1, &x)) return false;
    }
    return true;
}

/* The autocast dtype when a product of these operands should run in it (b fp32, a fp32 or
 * already in it). */
static bool autocast_for(const it_tensor *a, const it_tensor *b, it_dtype *dt) {
    /* a may already be in the autocast dtype: another product's own output (it__linear_low,
     * attention's y) that it would otherwise round again after its widening */
    return it_autocast_enabled(dt) && a && b &&
           (a->dtype == IT_DTYPE_FP32 || (a->dtype == *dt && *dt != IT_DTYPE_FP32)) && b->dtype == IT_DTYPE_FP32;
}

/* ---------------------------------------------------------------- matmul */

static it_tensor *matmul_new(it_tensor *a, it_tensor *b, bool ta, bool tb) {
    int nd = a->ndim;
    int64_t shape[IT_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[nd - 2] = ta ? a->shape[nd - 1] : a->shape[nd - 2];
    shape[nd - 1] = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    it_tensor *c = it__scope_add(it__tensor_new_owned(it_tensor_device(a), a->dtype, nd, shape));
    if (!c || it__gemm(a, b, c, ta, tb, 1.0f, 0.0f)) return NULL;
    return c;
}

/* C = op(A) op(B):
 *   dA = dC op(B)^T            (A not transposed)   or  op(B) dC^T   (A transposed)
 *   dB = op(A)^T dC            (B not transposed)   or  dC^T op(A)   (B transposed)
 * A 2-D B shared by every batch gets the sum of the per-batch gradients. */
static it_status matmul_backward(it_node *n, it_tensor *dy) {
    it_tensor *a = n->in[0], *b = n->in[1];
    bool ta = n->i[0], tb = n->i[1];
    if (a->requires_grad) {
        it_tensor *ga;
        if (!ta)
            ga = matmul_new(dy, b, false, !tb);
        else if (b->ndim == 2 && a->ndim > 2) /* dA = (dC op(B)^T)^T, batched from dC's side */
            ga = it_tensor_transpose(matmul_new(dy, b, false, !tb), -2, -1);
        else
            ga = matmul_new(b, dy, tb, true);
        it_status st = it__accum_grad(a, ga);
        if (st) return st;
    }
    if (b->requires_grad) {
        it_tensor *gb;
        if (b->ndim == 2 && a->ndim > 2) {
            /* per-batch gradient, then summed over the batch */
            it_tensor *per = tb ? matmul_new(dy, a, true, ta) : matmul_new(a, dy, !ta, false);
            int dims[IT_MAX_DIMS];
            for (int k = 0; k < a->ndim - 2; k++) dims[k] = k;
            gb = it_sum(per, a->ndim - 2, dims, false);
        } else {
            gb = tb ? matmul_new(dy, a, true, ta) : matmul_new(a, dy, !ta, false);
        }
        return it__accum_grad(b, gb);
    }
    return IT_OK;
}

it_tensor *it_matmul(it_tensor *a, it_tensor *b, bool ta, bool tb) {
    OP_REQUIRE(a && b);
    it_dtype ac;
    if (autocast_for(a, b, &ac)) { /* in ac, then back to float32 */
        it_autocast_set(false, ac);
        it_tensor *r = it_matmul(autocast_operand(a, ac), autocast_operand(b, ac), ta, tb);
        it_autocast_set(true, ac);
        return r ? it_cast(r, IT_DTYPE_FP32) : NULL;
    }
    it_tensor *ab[2] = {a, b};
    if (it__check_same("matmul", 2, ab)) return NULL;
    if (a->ndim < 2 || b->ndim < 2) {
        it_error(IT_ERR_INVALID_ARG, "matmul: operands must be at least 2-D (got %d-D and %d-D)", a->ndim, b->ndim);
        return NULL;
    }
    if (b->ndim != 2 && (b->ndim != a->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)(a->ndim - 2)))) {
        it_error(IT_ERR_INVALID_ARG, "matmul: leading dimensions of the operands differ (b must be 2-D or match a)");
        return NULL;
    }
    int64_t ka = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t kb = tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    if (ka != kb) {
        it_error(IT_ERR_INVALID_ARG, "matmul: inner dimensions differ (%lld vs %lld)", (long long)ka, (long long)kb);
        return NULL;
    }
    it_tensor *c = matmul_new(a, b, ta, tb);
    OP_REQUIRE(c);
    if (it__needs_grad(2, ab)) {
        it_node *n = it__node_record("matmul", matmul_backward, c, 2, ab);
        OP_REQUIRE(n);
        n->i[0] = ta;
        n->i[1] = tb;
    }
    return c;
}

/* ---------------------------------------------------------------- linear */

/* x (N, in) viewed from (..., in). */
static it_tensor *rows2d(it_tensor *x) {
    int64_t shape[2] = {-1, x->shape[x->ndim - 1]};
    return it_tensor_view(x, 2, shape);
}

/* y = x w^T + b:  dx = dy w;  dw += dy^T x;  db += sum over rows of dy. dx and dw are
 * written by gemm straight into the gradient buffers (beta = 1 accumulates). */
static it_status linear_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    it_tensor *dy2 = rows2d(dy);
    if (!dy2) return it_last_status();
    float beta = 0.0f;
    it_tensor *gx = it__grad_buffer(x, &beta);
    if (gx) {
        it_tensor *gx2 = rows2d(gx);
        it_status st = gx2 ? it__gemm(dy2, w, gx2, false, false, 1.0f, beta) : it_last_status();
        if (st) return st;
    } else if (x->requires_grad) {
        return it_last_status();
    }
    it_tensor *gw = it__grad_buffer(w, &beta);
    if (gw) {
        it_tensor *x2 = rows2d(n->saved[0]);
        it_status st = x2 ? it__gemm(dy2, x2, gw, true, false, 1.0f, beta) : it_last_status();
        if (st) return st;
    } else if (w->requires_grad) {
        return it_last_status();
    }
    if (bias && bias->requires_grad) {
        int d0 = 0;
        /* a half-precision dy (autocast) is summed in float32, rounded once */
        bool half = dy2->dtype == IT_DTYPE_BF16 || dy2->dtype == IT_DTYPE_FP16;
        it_tensor *gb = it_sum(half ? it_tensor_to_dtype(dy2, IT_DTYPE_FP32) : dy2, 1, &d0, false);
        if (half && gb) gb = it_tensor_to_dtype(gb, dy2->dtype);
        return it__accum_grad(bias, gb);
    }
    return IT_OK;
}

/* Under autocast (autocast_for), y = x w^T + b in ac: the operands rounded, the product's
 * own output, not yet widened. */
static it_tensor *linear_in(it_tensor *x, it_tensor *w, it_tensor *bias, it_dtype ac) {
    it_autocast_set(false, ac);
    it_tensor *xc = it_cast(x, ac), *wc = autocast_operand(w, ac), *bc = bias ? autocast_operand(bias, ac) : NULL;
    it_tensor *y = xc && wc && (!bias || bc) ? it_linear(xc, wc, bc) : NULL;
    it_autocast_set(true, ac);
    return y;
}

bool it__autocast_keep_low(void) {
    const char *env = getenv("IT_AUTOCAST_KEEP_LOW");
    return !(env && strcmp(env, "0") == 0);
}

it_tensor *it__linear_low(it_tensor *x, it_tensor *w, it_tensor *bias) {
    it_dtype ac;
    if (it__autocast_keep_low() && autocast_for(x, w, &ac) && (!bias || bias->dtype == IT_DTYPE_FP32))
        return linear_in(x, w, bias, ac);
    return it_linear(x, w, bias);
}

it_tensor *it_linear(it_tensor *x, it_tensor *w, it_tensor *bias) {
    it_dtype ac;
    if (autocast_for(x, w, &ac) && (!bias || bias->dtype == IT_DTYPE_FP32)) { /* in ac, then back to float32 */
        it_tensor *y = linear_in(x, w, bias, ac);
        return y ? it_cast(y, IT_DTYPE_FP32) : NULL;
    }
    OP_REQUIRE(x && w);
    it_tensor *in[3] = {x, w, bias};
    if (it__check_same("linear", 3, in)) return NULL;
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        it_error(IT_ERR_INVALID_ARG, "linear: x's last dimension (%lld) must equal w's in-features (w is %d-D, %lld)",
                 (long long)x->shape[x->ndim - 1], w->ndim, (long long)(w->ndim == 2 ? w->shape[1] : -1));
        return NULL;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0])) {
        it_error(IT_ERR_INVALID_ARG, "linear: bias must be (%lld)", (long long)w->shape[0]);
        return NULL;
    }
    int64_t shape[IT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    it_tensor *y = it__scope_add(it__tensor_new_owned(it_tensor_device(x), x->dtype, x->ndim, shape));
    it_tensor *x2 = rows2d(x);
    it_tensor *y2 = y ? rows2d(y) : NULL;
    OP_REQUIRE(y2 && x2);
    /* fp32 and fp64: y = x w^T, then the bias added in place while y is still in cache
     * (a broadcast of the bias into y before the gemm would write a block the gemm then
     * reads cold); either order rounds the bias's sum once in y's type. A half-precision y
     * takes the bias inside the gemm, which sums in fp32 and rounds once. */
    bool half = y->dtype != IT_DTYPE_FP32 && y->dtype != IT_DTYPE_FP64;
    it_tdesc yd = it_tensor_desc(y2), bd = bias ? it__broadcast_desc(bias, 2, y2->shape) : yd;
    if (bias && half && KCALL(it_tensor_device(y), copy_strided, &bd, &yd)) return NULL;
    if (it__gemm(x2, w, y2, false, true, 1.0f, bias && half ? 1.0f : 0.0f)) return NULL;
    if (bias && !half && KCALL(it_tensor_device(y), binary, IT_BINARY_ADD, &yd, &bd, &yd)) return NULL;
    if (it__needs_grad(3, in)) {
        it_node *n = it__node_record("linear", linear_backward, y, bias ? 3 : 2, in);
        OP_REQUIRE(n);
        it__node_save(n, x2);
    }
    return y;
}

/* ---------------------------------------------------------------- grouped linear */

/* Rows [r0, r1) of the 2-D t, a view in the current scope. */
static it_tensor *rows_of(it_tensor *t, int64_t r0, int64_t r1) { return it_tensor_slice(t, 0, r0, r1, 1); }

/* Per group g with rows [o_g, o_g+1):  dx[rows] = dy[rows] w_g;  dw_g += dy[rows]^T x[rows].
 * Every row belongs to one group, so dx's buffer is written whole (beta as it__grad_buffer
 * says) and each weight's gradient takes one product. */
static it_status grouped_linear_backward(it_node *n, it_tensor *dy) {
    it_tensor *x = n->in[0], *xs = n->saved[0];
    int G = n->n_in - 1;
    const int64_t *off = n->iv;
    float bx = 0.0f;
    it_tensor *gx = it__grad_buffer(x, &bx);
    if (!gx && x->requires_grad) return it_last_status();
    for (int g = 0; g < G; g++) {
        int64_t r0 = off[g], r1 = off[g + 1];
        if (r0 == r1) continue;
        it_tensor *w = n->in[1 + g], *dyg = rows_of(dy, r0, r1);
        if (!dyg) return it_last_status();
        if (gx) {
            it_tensor *gxg = rows_of(gx, r0, r1);
            it_status st = gxg ? it__gemm(dyg, w, gxg, false, false, 1.0f, bx) : it_last_status();
            if (st) return st;
        }
        float bw = 0.0f;
        it_tensor *gw = it__grad_buffer(w, &bw);
        if (gw) {
            it_tensor *xg = rows_of(xs, r0, r1);
            it_status st = xg ? it__gemm(dyg, xg, gw, true, false, 1.0f, bw) : it_last_status();
            if (st) return st;
        } else if (w->requires_grad) {
            return it_last_status();
        }
    }
    return IT_OK;
}

/* Under autocast (autocast_for), the grouped product in ac: x and the weights rounded, the
 * output as the products give it. */
static it_tensor *grouped_in(it_tensor *x, int n_group, it_tensor *const *w, const int64_t *offsets, it_dtype ac) {
    it_tensor **wc = malloc(sizeof *wc * (size_t)n_group);
    if (!wc) {
        it_error(IT_ERR_OOM, "grouped_linear: %d weight pointers", n_group);
        return NULL;
    }
    it_autocast_set(false, ac);
    bool ok = true;
    for (int g = 0; g < n_group; g++) ok = (wc[g] = autocast_operand(w[g], ac)) != NULL && ok;
    it_tensor *xc = it_cast(x, ac), *y = ok && xc ? it_grouped_linear(xc, n_group, wc, offsets) : NULL;
    it_autocast_set(true, ac);
    free(wc);
    return y;
}

it_tensor *it__grouped_linear_low(it_tensor *x, int n_group, it_tensor *const *w, const int64_t *offsets) {
    it_dtype ac;
    if (it__autocast_keep_low() && x && n_group >= 1 && w && autocast_for(x, w[0], &ac))
        return grouped_in(x, n_group, w, offsets, ac);
    return it_grouped_linear(x, n_group, w, offsets);
}

it_tensor *it_grouped_linear(it_tensor *x, int n_group, it_tensor *const *w, const int64_t *offsets) {
    OP_REQUIRE(x);
    if (n_group < 1 || !w || !offsets) {
        it_error(IT_ERR_INVALID_ARG, "grouped_linear: needs at least one group, its weights and its offsets");
        return NULL;
    }
    it_dtype ac;
    if (autocast_for(x, w[0], &ac)) { /* in ac, then back to float32, like it_linear */
        it_tensor *y = grouped_in(x, n_group, w, offsets, ac);
        return y ? it_cast(y, IT_DTYPE_FP32) : NULL;
    }
    if (x->ndim != 2) {
        it_error(IT_ERR_INVALID_ARG, "grouped_linear: x must be 2-D (rows, in), got %d-D", x->ndim);
        return NULL;
    }
    int64_t R = x->shape[0], in = x->shape[1];
    OP_REQUIRE(w[0]);
    if (w[0]->ndim != 2 || w[0]->shape[1] != in) {
        it_error(IT_ERR_INVALID_ARG, "grouped_linear: weight 0 must be (out, %lld)", (long long)in);
        return NULL;
    }
    int64_t out = w[0]->shape[0];
    if (offsets[0] != 0 || offsets[n_group] != R) {
        it_error(IT_ERR_INVALID_ARG, "grouped_linear: offsets must run from 0 to the %lld rows (got %lld to %lld)",
                 (long long)R, (long long)offsets[0], (long long)offsets[n_group]);
        return NULL;
    }
    for (int g = 0; g < n_group; g++) {
        OP_REQUIRE(w[g]);
        it_tensor *xw[2] = {x, w[g]};
        if (it__check_same("grouped_linear", 2, xw)) return NULL;
        if (w[g]->ndim != 2 || w[g]->shape[0] != out || w[g]->shape[1] != in) {
            it_error(IT_ERR_INVALID_ARG, "grouped_linear: weight %d must be (%lld, %lld) like weight 0", g,
                     (long long)out, (long long)in);
            return NULL;
        }
        if (offsets[g + 1] < offsets[g]) {
            it_error(IT_ERR_INVALID_ARG, "grouped_linear: offsets decrease at group %d (%lld after %lld)", g,
                     (long long)offsets[g + 1], (long long)offsets[g]);
            return NULL;
        }
    }
    it_tensor *y = it__scope_add(it__tensor_new_owned(it_tensor_device(x), x->dtype, 2, (int64_t[]){R, out}));
    OP_REQUIRE(y);
    for (int g = 0; g < n_group; g++) {
        if (offsets[g] == offsets[g + 1]) continue;
        it_tensor *xg = rows_of(x, offsets[g], offsets[g + 1]), *yg = rows_of(y, offsets[g], offsets[g + 1]);
        if (!xg || !yg || it__gemm(xg, w[g], yg, false, true, 1.0f, 0.0f)) return NULL;
    }
    if (it__needs_grad(1, &x) || it__needs_grad(n_group, w)) {
        it_tensor **in_ = malloc(sizeof *in_ * (size_t)(n_group + 1));
        if (!in_) {
            it_error(IT_ERR_OOM, "grouped_linear: %d node inputs", n_group + 1);
            return NULL;
        }
        in_[0] = x;
        memcpy(in_ + 1, w, sizeof *in_ * (size_t)n_group);
        it_node *n = it__node_record("grouped_linear", grouped_linear_backward, y, n_group + 1, in_);
        free(in_);
        OP_REQUIRE(n);
        it__node_save(n, x);
        if (it__node_set_ivec(n, offsets, (size_t)n_group + 1)) return NULL;
    }
    return y;
}
