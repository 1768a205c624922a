/* The tape and the backward engine. One tape per thread, like grad mode. */
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "core/precision_hooks.h"
#include "infinitrain/ops.h"

static _Thread_local bool grad_disabled;
static _Thread_local it_node **tape;
static _Thread_local size_t tape_len, tape_cap;

void it_grad_set_enabled(bool enabled) { grad_disabled = !enabled; }

static _Thread_local int recomputing; /* checkpoint backwards running their region again */
static _Thread_local bool autocast_on;
static _Thread_local it_dtype autocast_dtype = IT_DTYPE_BF16;

void it_autocast_set(bool enabled, it_dtype dtype) {
    autocast_on = enabled && (dtype == IT_DTYPE_BF16 || dtype == IT_DTYPE_FP16);
    if (autocast_on) autocast_dtype = dtype;
}

bool it_autocast_enabled(it_dtype *dtype) {
    if (dtype) *dtype = autocast_dtype;
    return autocast_on;
}

/* Bumped by every in-place update of the parameters (an optimizer step): autocast's rounded
 * copies of them (matmul.c) are valid for one version. Shared by all threads. */
static _Atomic unsigned long long weights_version;

unsigned long long it__weights_version(void) { return weights_version; }

void it__weights_written(void) { weights_version++; }
bool it_grad_enabled(void) { return !grad_disabled; }

it_status it_tensor_set_requires_grad(it_tensor *t, bool requires_grad) {
    if (!t) return it_error(IT_ERR_INVALID_ARG, "set_requires_grad: NULL tensor");
    if (requires_grad && !it_dtype_is_float(t->dtype))
        return it_error(IT_ERR_INVALID_ARG, "set_requires_grad: %s tensors cannot require grad",
                        it_dtype_name(t->dtype));
    t->requires_grad = requires_grad;
    t->is_leaf = true;
    return IT_OK;
}

bool it_tensor_requires_grad(const it_tensor *t) { return t && t->requires_grad; }
/* A lazily zeroed gradient gets its zeros when someone looks at it. */
static it_status grad_materialize(it_tensor *t) {
    if (!t->grad_zero) return IT_OK;
    t->grad_zero = false;
    return it_tensor_fill(t->grad, it_scalar_f64(0.0));
}

it_tensor *it_tensor_grad(const it_tensor *t) {
    if (!t) return NULL;
    if (t->grad_zero && grad_materialize((it_tensor *)t)) return NULL;
    return t->grad;
}

it_status it__grad_zero_lazy(it_tensor *t) {
    if (t && t->grad) t->grad_zero = true;
    return IT_OK;
}

it_status it__grad_materialize(it_tensor *t) { return t && t->grad ? grad_materialize(t) : IT_OK; }

it_status it_tensor_set_grad(it_tensor *t, it_tensor *grad) {
    if (!t || !grad) return it_error(IT_ERR_INVALID_ARG, "set_grad: NULL tensor");
    if (grad->dtype != t->dtype || grad->ndim != t->ndim ||
        memcmp(grad->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0 || !it_tensor_is_contiguous(grad))
        return it_error(IT_ERR_INVALID_ARG, "set_grad: the gradient buffer must be contiguous with the tensor's "
                                            "shape and dtype");
    it_tensor_retain(grad);
    it_tensor_release(t->grad);
    t->grad = grad;
    t->grad_zero = false;
    return IT_OK;
}

bool it__needs_grad(int n, it_tensor *const *inputs) {
    if (grad_disabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

it_node *it__node_record(const char *name, it_backward_fn fn, it_tensor *out, int n_in, it_tensor *const *inputs) {
    if (tape_len == tape_cap) {
        size_t cap = tape_cap ? tape_cap * 2 : 256;
        it_node **t = realloc(tape, cap * sizeof *t);
        if (!t) {
            it_error(IT_ERR_OOM, "autograd: out of host memory for the tape");
            return NULL;
        }
        tape = t;
        tape_cap = cap;
    }
    it_node *n = calloc(1, sizeof *n);
    if (!n) {
        it_error(IT_ERR_OOM, "autograd: out of host memory for a node");
        return NULL;
    }
    n->in = n_in <= IT_NODE_INLINE_IN ? n->in_inline : calloc((size_t)n_in, sizeof *n->in);
    if (!n->in) {
        free(n);
        it_error(IT_ERR_OOM, "autograd: out of host memory for a node's %d inputs", n_in);
        return NULL;
    }
    n->name = name;
    n->backward = fn;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = it_tensor_retain(inputs[i]);
    n->out = it_tensor_retain(out);
    out->requires_grad = true;
    out->is_leaf = false;
    tape[tape_len++] = n;
    if (IT_PREC_ON()) it__prec_node_forward(n); /* the op computed out before recording */
    return n;
}

void it__node_save(it_node *node, it_tensor *t) {
    if (node && node->n_saved < IT_NODE_MAX_SAVED) node->saved[node->n_saved++] = it_tensor_retain(t);
}

it_status it__node_set_ivec(it_node *node, const int64_t *v, size_t n) {
    int64_t *c = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!c) return it_error(IT_ERR_OOM, "autograd: out of host memory for %zu node parameters", n);
    if (n) memcpy(c, v, sizeof(int64_t) * n);
    free(node->iv);
    node->iv = c;
    node->n_iv = n;
    return IT_OK;
}

it_status it__node_set_blob(it_node *node, const void *data, size_t bytes) {
    void *c = malloc(bytes ? bytes : 1);
    if (!c) return it_error(IT_ERR_OOM, "autograd: out of host memory for %zu bytes of node data", bytes);
    if (bytes) memcpy(c, data, bytes);
    free(node->blob);
    node->blob = c;
    return IT_OK;
}

static void node_free(it_node *n) {
    if (IT_PREC_ON()) it__prec_node_free(n);
    for (int i = 0; i < n->n_in; i++) it_tensor_release(n->in[i]);
    for (int i = 0; i < n->n_saved; i++) it_tensor_release(n->saved[i]);
    if (n->out) {
        /* An intermediate's gradient is only needed by its own node. */
        if (!n->out->is_leaf) {
            it_tensor_release(n->out->grad);
            n->out->grad = NULL;
        }
        it_tensor_release(n->out);
    }
    if (n->in != n->in_inline) free(n->in);
    free(n->iv);
    free(n->blob);
    free(n);
}

void it_tape_clear(void) {
    for (size_t i = tape_len; i-- > 0;) node_free(tape[i]);
    tape_len = 0;
    free(tape);
    tape = NULL;
    tape_cap = 0;
}

size_t it_tape_size(void) { return tape_len; }

static bool same_shape(const it_tensor *a, const it_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

it_tensor *it__grad_buffer(it_tensor *t, float *beta) {
    if (!t || !t->requires_grad) return NULL;
    if (t->grad) {
        /* lazily zeroed: the first write overwrites (beta 0: nothing read) */
        *beta = t->grad_zero ? 0.0f : 1.0f;
        t->grad_zero = false;
        return t->grad;
    }
    t->grad = it__tensor_new_owned(it_tensor_device(t), t->dtype, t->ndim, t->shape);
    *beta = 0.0f;
    return t->grad;
}

bool it__grad_owned(const it_tensor *dy) {
    return dy && atomic_load(&dy->refs) == 1 && atomic_load(&dy->storage->refs) == 1 && it_tensor_is_contiguous(dy);
}

it_status it__accum_grad(it_tensor *t, it_tensor *g) {
    if (!t || !t->requires_grad) return IT_OK;
    if (!g) return it_last_status() ? it_last_status() : it_error(IT_ERR_INTERNAL, "autograd: NULL gradient");
    if (!same_shape(t, g) || g->dtype != t->dtype)
        return it_error(IT_ERR_INTERNAL, "autograd: gradient shape/dtype does not match its tensor");
    it_device dev = it_tensor_device(t);
    if (!t->grad) {
        /* Take g over when nothing else holds it (it__grad_owned): a new tensor of the
         * current backward's scope, or the dy the engine handed it. A gradient held
         * elsewhere too (a leaf's, one given to two inputs, a view) is copied, so that later
         * in-place accumulation cannot change another tensor's gradient. */
        if (it__grad_owned(g)) {
            t->grad = it_tensor_retain(g);
            return IT_OK;
        }
        t->grad = it__clone_owned(g);
        return t->grad ? IT_OK : it_last_status();
    }
    if (t->grad_zero) { /* lazily zeroed: 0 + g is g */
        t->grad_zero = false;
        return it_tensor_copy_(t->grad, g);
    }
    it_tdesc a = it_tensor_desc(t->grad), b = it_tensor_desc(g), o = it_tensor_desc(t->grad);
    return KCALL(dev, binary, IT_BINARY_ADD, &a, &b, &o);
}

it_status it__accum_grad_taken(it_tensor *t, it_tensor *g) {
    if (!t || !t->requires_grad || !g || t->grad || !same_shape(t, g) || g->dtype != t->dtype ||
        !it_tensor_is_contiguous(g))
        return it__accum_grad(t, g);
    t->grad = it_tensor_retain(g);
    return IT_OK;
}

static bool hooked_leaf(const it_tensor *t) { return t && t->is_leaf && t->requires_grad; }

/* The leaves of node n whose last pending use this was: report them. */
static it_status leaves_done(it_node *n, it_grad_ready_fn fn, void *ctx) {
    it_status st = IT_OK;
    for (int i = 0; i < n->n_in; i++) {
        it_tensor *t = n->in[i];
        /* (a node that skipped its backward leaves a lazily zeroed gradient unwritten) */
        if (hooked_leaf(t) && --t->pending_uses == 0 && !st && !(st = it__grad_materialize(t))) st = fn(ctx, t);
    }
    return st;
}

it_status it_backward(it_tensor *loss) { return it_backward_hooked(loss, NULL, NULL); }

it_status it_backward_hooked(it_tensor *loss, it_grad_ready_fn fn, void *ctx) {
    if (!loss) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "backward: NULL loss");
    if (it_tensor_numel(loss) != 1) {
        return it_error(IT_ERR_INVALID_ARG, "backward: the loss must have one element, it has %lld",
                        (long long)it_tensor_numel(loss));
    }
    if (!loss->requires_grad) return it_error(IT_ERR_INVALID_ARG, "backward: the loss does not require grad");
    it_status st = IT_OK;
    it_tensor_release(loss->grad);
    loss->grad = it__tensor_new_owned(it_tensor_device(loss), loss->dtype, loss->ndim, loss->shape);
    if (!loss->grad || (st = it_tensor_fill(loss->grad, it_scalar_f64(1.0)))) {
        it_tape_clear();
        return st ? st : it_last_status();
    }
    if (fn) /* every use of a leaf counts, also twice in one node */
        for (size_t k = 0; k < tape_len; k++)
            for (int i = 0; i < tape[k]->n_in; i++)
                if (hooked_leaf(tape[k]->in[i])) tape[k]->in[i]->pending_uses++;
    for (size_t k = tape_len; k-- > 0;) {
        it_node *n = tape[k];
        it_tensor *dy = n->out->grad;
        if (dy) {
            /* An intermediate's gradient is needed by its own node only: the backward gets the
             * reference, so that when nothing else holds dy, it__accum_grad takes a
             * passed-through dy over instead of copying it, and a backward may write its
             * result over dy (it__grad_owned). A leaf's gradient stays (and is then never
             * taken over: refs > 1). */
            if (n->out->is_leaf)
                it_tensor_retain(dy);
            else
                n->out->grad = NULL;
            if (IT_PREC_ON()) it__prec_node_backward_pre(n, dy);
            it_scope_begin();
            st = n->backward(n, dy);
            it_scope_end();
            if (!st && IT_PREC_ON()) it__prec_node_backward_post(n);
            it_tensor_release(dy);
            if (st) {
                it_error_context("backward of %s: ", n->name);
                break;
            }
        }
        if (fn && ((st = leaves_done(n, fn, ctx)) || (st = fn(ctx, NULL)))) {
            tape[k] = NULL;
            tape_len = k;
            node_free(n);
            break;
        }
        tape[k] = NULL;
        tape_len = k;
        node_free(n);
    }
    if (fn) /* stopped early: the counts of the nodes not run go, for the next backward */
        for (size_t k = 0; k < tape_len; k++)
            for (int i = 0; i < tape[k]->n_in; i++)
                if (hooked_leaf(tape[k]->in[i])) tape[k]->in[i]->pending_uses = 0;
    it_tape_clear();
    return st;
}

it_status it_backward_range(it_tensor *root, it_tensor *grad, size_t lo, size_t hi) {
    if (!root) return it_last_status() ? it_last_status() : it_error(IT_ERR_INVALID_ARG, "backward: NULL root");
    if (lo > hi || hi > tape_len)
        return it_error(IT_ERR_INVALID_ARG, "backward: segment [%zu, %zu) outside the tape's %zu nodes", lo, hi,
                        tape_len);
    if (!root->requires_grad) return it_error(IT_ERR_INVALID_ARG, "backward: the root does not require grad");
    if (grad && (!same_shape(root, grad) || grad->dtype != root->dtype))
        return it_error(IT_ERR_INVALID_ARG, "backward: the root's gradient does not match its shape/dtype");
    if (!grad && it_tensor_numel(root) != 1)
        return it_error(IT_ERR_INVALID_ARG, "backward: a root of %lld elements needs its gradient",
                        (long long)it_tensor_numel(root));
    it_tensor_release(root->grad);
    root->grad = grad ? it__clone_owned(grad)
                      : it__tensor_new_owned(it_tensor_device(root), root->dtype, root->ndim, root->shape);
    it_status st = root->grad ? IT_OK : it_last_status();
    if (!st && !grad) st = it_tensor_fill(root->grad, it_scalar_f64(1.0));
    for (size_t k = hi; k-- > lo;) {
        it_node *n = tape[k];
        it_tensor *dy = n->out->grad;
        if (dy && !st) {
            if (n->out->is_leaf)
                it_tensor_retain(dy);
            else
                n->out->grad = NULL;
            if (IT_PREC_ON()) it__prec_node_backward_pre(n, dy);
            it_scope_begin();
            st = n->backward(n, dy);
            it_scope_end();
            if (!st && IT_PREC_ON()) it__prec_node_backward_post(n);
            it_tensor_release(dy);
            if (st) it_error_context("backward of %s: ", n->name);
        }
        node_free(n);
        tape[k] = NULL;
    }
    memmove(tape + lo, tape + hi, sizeof *tape * (tape_len - hi));
    tape_len -= hi - lo;
    return st;
}

it_status it_zero_grad(it_tensor *const *params, int n) {
    for (int i = 0; i < n; i++) {
        if (params[i] && params[i]->grad) {
            params[i]->grad_zero = false;
            it_status st = it_tensor_fill(params[i]->grad, it_scalar_f64(0.0));
            if (st) return st;
        }
    }
    return IT_OK;
}

/* ---------------------------------------------------------------- activation recomputation */

/* The checkpoint node keeps fn in n->ctx and its context in n->blob. Its backward records fn's
 * graph again (appended after the nodes the engine has yet to run) over a fresh leaf sharing
 * x's data, runs that segment's backward with dy and removes it, then passes the leaf's
 * gradient to x. */
static it_status checkpoint_backward(it_node *n, it_tensor *dy) {
    it_checkpoint_fn fn = (it_checkpoint_fn)n->ctx;
    it_tensor *x = n->in[0];
    it_tensor *leaf = it_tensor_view(x, x->ndim, x->shape); /* no node: a leaf over x's data */
    if (!leaf) return it_last_status();
    it_status st = it_tensor_set_requires_grad(leaf, x->requires_grad);
    if (st) return st;
    bool was = it_grad_enabled();
    it_grad_set_enabled(true);
    size_t lo = tape_len;
    recomputing++;
    it_tensor *y = fn(n->blob, leaf);
    recomputing--;
    size_t hi = tape_len;
    it_grad_set_enabled(was);
    if (!y) return it_last_status();
    if (!y->requires_grad) return IT_OK; /* nothing in the region needs a gradient */
    st = it_backward_range(y, dy, lo, hi);
    if (!st && x->requires_grad && leaf->grad) st = it__accum_grad(x, leaf->grad);
    return st;
}

bool it__recomputing(void) { return recomputing > 0; }

it_tensor *it_checkpoint(it_checkpoint_fn fn, const void *ctx, size_t ctx_bytes, it_tensor *x) {
    if (!x) return NULL;
    if (!it_grad_enabled()) return fn((void *)ctx, x);
    /* the region's intermediates go with its own scope: only y outlives it */
    it_grad_set_enabled(false);
    it_scope_begin();
    it_tensor *y = fn((void *)ctx, x);
    if (y) it_scope_keep(y);
    it_scope_end();
    it_grad_set_enabled(true);
    if (!y || !it__scope_add(y)) return NULL;
    /* recorded whatever x needs: the region's parameters may want gradients when x does not */
    it_tensor *in[1] = {x};
    it_node *n = it__node_record("checkpoint", checkpoint_backward, y, 1, in);
    if (!n || it__node_set_blob(n, ctx, ctx_bytes)) return NULL;
    n->ctx = (void *)fn;
    return y;
}
