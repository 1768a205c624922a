/* Helpers shared by the op families: argument checks, kernel calls, broadcasting. */
#ifndef IT_OPS_COMMON_H
#define IT_OPS_COMMON_H

#include "autograd/node.h"
#include "infinitrain/ops.h"

/* Fail (return NULL) from an op when any input is NULL: its error is already recorded. */
#define OP_REQUIRE(cond)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) return NULL;                                                                                      \
    } while (0)

/* Check that tensors share a device and a dtype; name the op in the message. */
it_status it__check_same(const char *op, int n, it_tensor *const *ts);

/* The broadcast shape of a and b (numpy rules) into out; error names the op. */
it_status it__broadcast_shape(const char *op, const it_tensor *a, const it_tensor *b, int *ndim, int64_t *shape);
/* A descriptor of t expanded to (ndim, shape) with stride 0 on broadcast dims. */
it_tdesc it__broadcast_desc(const it_tensor *t, int ndim, const int64_t *shape);
/* Sum g (shape S) down to `like`'s shape (S broadcast from it). New tensor in the scope. */
it_tensor *it__sum_to(it_tensor *g, const it_tensor *like);
/* A new scope-owned contiguous tensor like t (same device, dtype, shape), uninitialized. */
it_tensor *it__empty_like(const it_tensor *t);

/* c = alpha * op(a) @ op(b) + beta * c through the gemm slot, over the leading dims as one
 * batch (a 2-D operand broadcasts); an operand that cannot be seen so is copied first. */
it_status it__gemm(it_tensor *a, it_tensor *b, it_tensor *c, bool ta, bool tb, float alpha, float beta);

#endif
