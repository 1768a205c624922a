/* it_model_grads_release / it_model_grads_acquire (ZeRO-2 between steps): the flat gradient's
 * bytes go back to the allocator (used memory drops by exactly its block), every leaf keeps
 * its gradient view, and after acquire a backward writes the same gradient as before the
 * release (bitwise), into the views, which share the new bytes. Both are no-ops when
 * repeated. */
#include <stdlib.h>
#include <string.h>

#include "infinitrain/autograd.h"
#include "infinitrain/models.h"
#include "it_test.h"

enum { B = 2, T = 8 };

/* One forward + backward on a fixed batch; the flat gradient copied to host g. */
static void grads_of(it_model *m, float *g, size_t bytes) {
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 7) % 64, y[i] = (i * 5 + 3) % 64;
    int64_t shape[2] = {B, T};
    it_device dev = it_model_device(m);
    CHECK_OK(it_model_zero_grad(m));
    it_scope_begin();
    it_tensor *l = it_model_loss(m, it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof x),
                                 it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof y));
    CHECK(l != NULL);
    if (l) CHECK_OK(it_backward(l));
    it_scope_end();
    it_tape_clear();
    CHECK_OK(it_model_grads_final(m));
    CHECK_OK(it_tensor_copy_to_host(it_model_grads(m), g, bytes));
}

int main(void) {
    it_gpt2_config cfg = {
        .block_size = 16, .vocab_size = 64, .padded_vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 16};
    it_device dev = it_device_cpu();
    it_model *m = NULL;
    CHECK_OK(it_gpt2_new(&cfg, dev, 7, &m));
    if (!m) return it_test_report("test_model_grads_release");
    it_tensor *flat = it_model_grads(m);
    size_t bytes = it_tensor_nbytes(flat);
    float *g0 = malloc(bytes), *g1 = malloc(bytes);
    grads_of(m, g0, bytes);
    const it_model_param_info *p = it_model_param_find(m, "transformer.h.1.mlp.c_fc.weight");
    CHECK(p != NULL);
    it_tensor *view = p ? it_tensor_grad(p->param) : NULL;

    CHECK(it_model_grads_held(m));
    it_mem_stats before, after;
    it_mem_stats_get(dev, &before);
    CHECK_OK(it_model_grads_release(m));
    it_mem_stats_get(dev, &after);
    CHECK(!it_model_grads_held(m));
    CHECK_MSG(before.used - after.used >= bytes && before.used - after.used < bytes + (1u << 20),
              "release gave back %zu bytes of a %zu-byte gradient", before.used - after.used, bytes);
    CHECK_OK(it_model_grads_release(m)); /* again: nothing */
    it_mem_stats_get(dev, &before);
    CHECK(before.used == after.used);
    CHECK(it_model_grads(m) == flat); /* the same objects */

    CHECK_OK(it_model_grads_acquire(m));
    CHECK_OK(it_model_grads_acquire(m));
    CHECK(it_model_grads_held(m));
    memset(g1, 0xff, bytes);
    grads_of(m, g1, bytes);
    CHECK_MSG(memcmp(g0, g1, bytes) == 0, "the gradient after release + acquire differs from before");
    if (p && view) { /* the leaf's view reads the new bytes */
        CHECK(it_tensor_grad(p->param) == view && it_tensor_shares_storage(view, flat));
        float *v = malloc(it_tensor_nbytes(view));
        CHECK_OK(it_tensor_copy_to_host(view, v, it_tensor_nbytes(view)));
        CHECK(memcmp(v, g1 + p->offset, it_tensor_nbytes(view)) == 0);
        free(v);
    }
    free(g0);
    free(g1);
    it_model_free(m);
    return it_test_report("test_model_grads_release");
}
