/* The precision checker's hooks (precision.c defines them): in the tape (each node recorded,
 * each backward run) and at the models' module boundaries. Off, each costs one predictable
 * branch on it__prec_on, which is true only while a check is open and a step runs. */
#ifndef IT_CORE_PRECISION_HOOKS_H
#define IT_CORE_PRECISION_HOOKS_H

#include <stdatomic.h>

#include "core/internal.h"

struct it_node;

extern atomic_bool it__prec_on;

#define IT_PREC_ON() __builtin_expect(atomic_load_explicit(&it__prec_on, memory_order_relaxed), 0)

/* Level 2: the node's op just computed n->out from n->in (forward inputs and output). */
void it__prec_node_forward(struct it_node *n);
/* Level 2: dy is about to go into n's backward (backward input); level 1: dy is the
 * gradient of a module output when n->out is one. */
void it__prec_node_backward_pre(struct it_node *n, it_tensor *dy);
/* Level 2: n's backward ran; its inputs' gradients (backward outputs). */
void it__prec_node_backward_post(struct it_node *n);
/* A node is freed: its forward context goes (its address may come back as another node's). */
void it__prec_node_free(const struct it_node *n);

/* Level 1: `t` is the forward output of module `name`, inside block `layer` (the name is
 * then relative to transformer.h.<layer>.) or outside the blocks (layer < 0, full name). */
void it__prec_module(it_tensor *t, int layer, const char *name);
/* The block that the ops from here on belong to (-1: none). */
void it__prec_layer(int layer);

/* For the models: one expression per module boundary, returning t. */
static inline it_tensor *IT_PREC_MODULE(it_tensor *t, int layer, const char *name) {
    if (IT_PREC_ON()) it__prec_module(t, layer, name);
    return t;
}
static inline void IT_PREC_LAYER(int layer) {
    if (IT_PREC_ON()) it__prec_layer(layer);
}

#endif
