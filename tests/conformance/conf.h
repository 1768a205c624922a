/* it-conformance: the differential suite every backend gets for free by registering.
 *
 * A case is a list of operands (tensors as a kernel sees them: dtype, shape, strides, an
 * element offset into a storage of known size) plus the slot's scalar parameters. The
 * harness runs the case twice from the same host-generated storage contents: once with the
 * CPU backend's kernel (the reference) and once with the backend under test, whose memory is
 * touched only through its runtime (malloc, memcpy H2D / D2H, stream_synchronize). Every
 * storage is surrounded on the device by SENTINEL bytes; after the call the harness checks
 * the sentinels, that inputs are unchanged, that storage elements outside an output's view
 * are unchanged, and compares each output with the reference (bitwise or by normalized MSE,
 * with NaN/Inf positions required to match exactly).
 *
 * Files: harness.c (buffers, running, comparing, reporting), cases_data.c (cast, fill,
 * copy_strided, embedding), cases_math.c (gemm, unary, binary, reduce), cases_nn.c
 * (layernorm, softmax, cross entropy, optimizers), grad.c (--grad: backward slots against
 * finite differences), selftest.c (--self-test: a deliberately broken backend the suite must
 * catch), conformance.c (command line, slot table, backends). */
#ifndef IT_CONFORMANCE_CONF_H
#define IT_CONFORMANCE_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "infinitrain/backend.h"
#include "infinitrain/tensor.h"

/* A backend's kernel table as the registry holds it: full size, NULL past the slots a plugin
 * built against an older backend.h declares. (A backend not registered: its own table.) */
static inline const it_kernels *conf_kernels(const it_backend *b) {
    const it_kernels *k = it_backend_kernels(b);
    return k ? k : b->kernels;
}

#define CONF_MAX_OPS 10        /* attention_bwd has nine */
#define CONF_SENTINEL_BYTES 64 /* before and after every storage; a multiple of 64 keeps alignment */
#define CONF_SENTINEL 0xA5

/* ---------------------------------------------------------------- deterministic PRNG */
typedef struct conf_rng {
    uint64_t s;
} conf_rng;
conf_rng conf_rng_seed(const char *label, uint64_t n);
uint64_t conf_rng_next(conf_rng *r);
double conf_rng_uniform(conf_rng *r, double lo, double hi);
int64_t conf_rng_int(conf_rng *r, int64_t lo, int64_t hi_incl);

/* ---------------------------------------------------------------- operands and cases */
typedef enum conf_role {
    CONF_IN,     /* read only: must be bitwise unchanged after the call */
    CONF_OUT,    /* written: compared with the reference */
    CONF_INOUT,  /* read and written (accumulators, in-place): compared */
    CONF_ABSENT, /* passed as a NULL descriptor (an optional argument) */
    CONF_ALIAS,  /* the very descriptor of operand `alias` (in-place calls) */
} conf_role;

typedef enum conf_cmp {
    CONF_CMP_NMSE, /* normalized MSE <= tol; NaN/Inf positions (and Inf signs) equal */
    CONF_CMP_BITS, /* every byte equal */
    CONF_CMP_CAST, /* every byte equal, except that any two NaNs of the same sign are equal:
                    * the contract keeps NaN quiet and its sign, not its payload */
} conf_cmp;

/* Layouts of an operand's view over its storage. */
typedef enum conf_layout {
    CONF_CONTIG,     /* row-major contiguous, offset 0 */
    CONF_TRANSPOSED, /* the last two dims are swapped in storage (a transposed view) */
    CONF_STEPPED,    /* innermost stride 2, every outer row padded by 3 elements, offset 3 */
    CONF_BCAST,      /* dims in bcast_mask have stride 0; others contiguous */
    CONF_OFFSET,     /* contiguous, but element [0,...,0] is 5 elements into the storage */
} conf_layout;

typedef struct conf_operand {
    const char *name;
    conf_role role;
    it_dtype dtype;
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    int64_t strides[IT_MAX_DIMS];
    int64_t offset;      /* elements from the storage start to element [0,...,0] */
    int64_t storage;     /* elements in the storage */
    int alias;           /* for CONF_ALIAS */
    unsigned char *init; /* storage contents before the call */
} conf_operand;

typedef enum conf_tol {
    CONF_TOL_EXACT, /* bitwise */
    CONF_TOL_ELEM,  /* elementwise maps: a few roundings per element */
    CONF_TOL_SUM,   /* kernels with sums whose order the backend may choose */
} conf_tol;

typedef struct conf_case {
    char dtype_label[32]; /* "fp32", "fp32->int8", "fp16/idx=int64" */
    char label[96];       /* the shape case: "7x13 x^T", "2x4099" */
    int nops;
    conf_operand ops[CONF_MAX_OPS];
    conf_cmp cmp;
    double tol;      /* NMSE bound for CONF_CMP_NMSE */
    const char *why; /* the reason for tol */
    /* slot parameters */
    int op;
    float alpha, beta, eps, lr, grad_scale;
    bool trans_a, trans_b;
    it_softmax_args sm;
    it_flash_args flash;
    it_adam_args adam;
    int64_t valid;
    it_scalar value;
} conf_case;

/* Start a case (frees nothing: call conf_case_free after running it). */
void conf_case_init(conf_case *c, const char *dtype_label, const char *fmt, ...) IT_PRINTF(3, 4);
void conf_case_free(conf_case *c);
/* Set the comparison from a tolerance class and the outputs' dtype (see harness.c). */
void conf_case_tol(conf_case *c, conf_tol cls, it_dtype dt);

/* Add an operand with a layout; its storage starts as: random uniform [-1, 1] (inputs),
 * the poison pattern (outputs: NaN with a payload for floats, 0x5A bytes otherwise). */
conf_operand *conf_add(conf_case *c, const char *name, conf_role role, it_dtype dt, int ndim, const int64_t *shape,
                       conf_layout layout, unsigned bcast_mask);
conf_operand *conf_add_absent(conf_case *c, const char *name);
/* A (B, H, R, D) view of attention heads stored as in a (B, R, interleave, H, D) buffer, at
 * part `part` (interleave 3: GPT-2's qkv; 1: plain (B, R, H, D)). */
conf_operand *conf_add_heads(conf_case *c, const char *name, conf_role role, it_dtype dt, int64_t B, int64_t H,
                             int64_t R, int64_t D, int interleave, int part);
conf_operand *conf_add_alias(conf_case *c, const char *name, int target);

int64_t conf_numel(const conf_operand *o);
/* Storage element offset of the view element with row-major index i. */
int64_t conf_view_offset(const conf_operand *o, int64_t i);
/* Fill every storage element with uniform [lo, hi) values stored in o's dtype. */
void conf_fill_uniform(conf_operand *o, conf_rng *r, double lo, double hi);
/* Fill every storage element with random bits (bool: 0 or 1). */
void conf_fill_bits(conf_operand *o, conf_rng *r);
/* Set view element i (row-major) to v, converted to o's dtype (floats: through fp32 for
 * bf16/fp16, overflow to Inf; integers: truncated toward zero and wrapped). */
void conf_set(conf_operand *o, int64_t i, double v);
void conf_set_i64(conf_operand *o, int64_t i, int64_t v); /* integers: low bits of v */
void conf_set_raw(conf_operand *o, int64_t i, const void *bytes);
double conf_get(const conf_operand *o, const unsigned char *storage, int64_t i);
/* A descriptor of o's view over its host init storage (to prepare inputs with the CPU
 * kernels, e.g. softmax_bwd's y from softmax_fwd). */
it_tdesc conf_host_desc(conf_operand *o);

/* "fp32", "bf16", "i64", ... */
const char *conf_dtype_short(it_dtype dt);

/* Element load/store by dtype (any of the 13), as double. */
double conf_load(it_dtype dt, const void *p);
void conf_store(it_dtype dt, void *p, double v);

/* ---------------------------------------------------------------- running */
typedef struct conf_target {
    const it_backend *backend;
    int index;
    it_stream *stream;
    char name[64]; /* "sim:0" */
} conf_target;

/* Calls one slot with descriptors d[i] (NULL for absent operands). */
typedef it_status (*conf_call_fn)(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d);

typedef enum conf_outcome {
    CONF_PASS,
    CONF_FAIL,
    CONF_SKIP_UNSUPPORTED, /* the backend said IT_ERR_UNSUPPORTED */
    CONF_SKIP_NOREF,       /* the CPU reference does not support the case */
} conf_outcome;

typedef struct conf_slot_stats {
    int pass, fail, skip, noref;
    bool fallback;
    char fail_dtypes[160]; /* the dtype labels of the failed cases, "fp32, bf16", for the summary */
} conf_slot_stats;

typedef struct conf_ctx {
    conf_target dev, cpu;
    const char *slot;  /* the slot being tested */
    conf_call_fn call; /* the slot's caller */
    bool verbose;
    conf_slot_stats *stats; /* of the current (backend, slot) */
    int pass, fail, skip, noref, fallback;
} conf_ctx;

/* Run a case on the reference and on the device, compare, print one line, count it. */
conf_outcome conf_run(conf_ctx *ctx, conf_case *c);

/* One run of a case on a target: storages after the call (out[i] = storage bytes of operand
 * i, NULL for absent/alias). Returns false with msg set on any failure; *st is the slot's
 * status (so callers can tell IT_ERR_UNSUPPORTED apart). */
typedef struct conf_exec {
    it_status st;
    char msg[768];
    unsigned char *out[CONF_MAX_OPS];
} conf_exec;
bool conf_exec_run(const conf_target *t, const it_kernels *k, conf_call_fn call, const conf_case *c, conf_exec *e);
void conf_exec_free(conf_exec *e);

/* Print a result line in the common format. */
void conf_line(const conf_ctx *ctx, const char *dtype, const char *label, const char *measure, const char *verdict);

/* ---------------------------------------------------------------- slots */
typedef struct conf_slot {
    const char *name;
    bool (*present)(const it_kernels *k); /* is the slot non-NULL in k? */
    conf_call_fn call;
    void (*cases)(conf_ctx *ctx);
    void (*grad)(conf_ctx *ctx); /* --grad check, or NULL */
} conf_slot;

/* The float dtypes every float slot is tried with (the reference decides which exist). */
extern const it_dtype conf_float_dtypes[4];

/* Case generators and callers (cases_*.c). */
#define CONF_DECLARE_SLOT(name)                                                                                        \
    it_status conf_call_##name(const it_kernels *k, it_stream *s, const conf_case *c, it_tdesc *const *d);             \
    void conf_cases_##name(conf_ctx *ctx);
CONF_DECLARE_SLOT(cast)
CONF_DECLARE_SLOT(fill)
CONF_DECLARE_SLOT(copy_strided)
CONF_DECLARE_SLOT(gemm)
CONF_DECLARE_SLOT(unary)
CONF_DECLARE_SLOT(binary)
CONF_DECLARE_SLOT(reduce)
CONF_DECLARE_SLOT(embedding_fwd)
CONF_DECLARE_SLOT(embedding_bwd)
CONF_DECLARE_SLOT(layernorm_fwd)
CONF_DECLARE_SLOT(layernorm_bwd)
CONF_DECLARE_SLOT(softmax_fwd)
CONF_DECLARE_SLOT(softmax_bwd)
CONF_DECLARE_SLOT(cross_entropy_fwd)
CONF_DECLARE_SLOT(cross_entropy_bwd)
CONF_DECLARE_SLOT(sgd_step)
CONF_DECLARE_SLOT(adam_step)
CONF_DECLARE_SLOT(rmsnorm_fwd)
CONF_DECLARE_SLOT(rmsnorm_bwd)
CONF_DECLARE_SLOT(rope)
CONF_DECLARE_SLOT(topk)
CONF_DECLARE_SLOT(attention_fwd)
CONF_DECLARE_SLOT(attention_bwd)
CONF_DECLARE_SLOT(adam_step_round)
CONF_DECLARE_SLOT(cross_entropy_low_fwd)
CONF_DECLARE_SLOT(cross_entropy_low_bwd)
CONF_DECLARE_SLOT(swiglu_low_fwd)
CONF_DECLARE_SLOT(swiglu_low_bwd)
CONF_DECLARE_SLOT(flash_attention_fwd)
CONF_DECLARE_SLOT(flash_attention_bwd)

/* cos / sin (T, D/2) tables of LLaMA's rotary angles (cases_llama.c). */
void conf_rope_tables(conf_operand *cos_t, conf_operand *sin_t, int64_t D);

/* Gradient checks (grad.c). */
void conf_grad_embedding_bwd(conf_ctx *ctx);
void conf_grad_layernorm_bwd(conf_ctx *ctx);
void conf_grad_softmax_bwd(conf_ctx *ctx);
void conf_grad_cross_entropy_bwd(conf_ctx *ctx);
void conf_grad_binary(conf_ctx *ctx);
void conf_grad_rmsnorm_bwd(conf_ctx *ctx);
void conf_grad_rope(conf_ctx *ctx);

/* The slot table, in it_kernels order (conformance.c). */
extern const conf_slot conf_slots[];
extern const size_t conf_slot_count;

/* --self-test (selftest.c): the broken backend, registered on demand. */
const it_backend *conf_selftest_backend(void);
/* Expected outcome per slot for the broken backend; returns the number of unmet
 * expectations (printed). */
int conf_selftest_check(const conf_slot_stats *stats, bool grad);

#endif
