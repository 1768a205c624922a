/* TEST DOUBLE. What the files of the stand-in libcnnl.so (cnnl*.c) share: the handle and
 * tensor descriptor structs, element access, and the one way every compute call reaches its
 * queue. Nothing here is exported (the library builds with -fvisibility=hidden).
 *
 * Model of a call: validate synchronously and return the status cnnl.h documents without
 * touching memory; copy the descriptors (by value), scalars and pointers into one heap job;
 * enqueue it on the handle's queue. On the queue's worker thread the job opens every device
 * range it touches (standin_open), computes on the CPU and returns false (a queue fault)
 * when a range is not device memory or the data break a rule only the device can see. */
#ifndef IT_CAMBRICON_CNNL_STANDIN_H
#define IT_CAMBRICON_CNNL_STANDIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "standin_internal.h"

#define CS_DIM_MAX 8 /* CNNL_DIM_MAX */

struct cnnlContext {
    cnrtQueue_t queue; /* NULL: the calling thread's default queue (cnnlSetQueue) */
};

/* A tensor descriptor; jobs hold copies, so a descriptor may be destroyed after the call. */
struct cnnlTensorStruct {
    cnnlTensorLayout_t layout;
    cnnlDataType_t dtype;
    int ndim;
    int dims[CS_DIM_MAX];
    int strides[CS_DIM_MAX]; /* in elements */
};
typedef struct cnnlTensorStruct cs_tensor;

/* ---------------------------------------------------------------- refusals */

/* Prints "cnnl stand-in: <fn>: <why>" on stderr, as the real library logs a refused call,
 * and returns `st`. */
cnnlStatus_t cs_refuse(const char *fn, cnnlStatus_t st, const char *why);
#define CS_REQUIRE(cond, st, fn, why)                                                                                  \
    do {                                                                                                               \
        if (!(cond)) return cs_refuse(fn, st, why);                                                                    \
    } while (0)

/* True on an MLU500-class part (standin_arch() 592), false on an MLU370. */
bool cs_mlu500(void);

/* ---------------------------------------------------------------- descriptors */

size_t cs_dtype_size(cnnlDataType_t dt); /* 0 for a type the stand-in does not know */
int64_t cs_numel(const cs_tensor *t);
/* Bytes from the first element to the end of the last one (0 when empty). */
size_t cs_span(const cs_tensor *t);
bool cs_same_shape(const cs_tensor *a, const cs_tensor *b);
bool cs_contiguous(const cs_tensor *t);
/* Element offset (in elements) of the i-th element in row-major order of the dims. */
int64_t cs_offset(const cs_tensor *t, int64_t i);
/* Opens t's span at p on the running job; an empty tensor needs nothing. */
bool cs_open(const void *p, const cs_tensor *t);
/* Opens `bytes` of workspace and scribbles over them (0xff: NaN in every float type), as a
 * device kernel may leave its scratch: memory the caller still needs must not lie there. */
bool cs_open_workspace(void *ws, size_t bytes);

/* x's dims from `axis` on: the normalized length (layernorm, rmsnorm) and the rows. */
int64_t cs_inner(const cs_tensor *t, int axis);
int64_t cs_outer(const cs_tensor *t, int axis);
/* A per-row tensor of layernorm/rmsnorm (saved mean, rstd): x's dims before `axis`, or those
 * followed by ones up to x's rank (cnnl.h's example: [64, 78] or [64, 78, 1]). */
bool cs_row_shape(const cs_tensor *r, const cs_tensor *x, int axis);
/* A per-column tensor (filter, bias, scale): x's dims from `axis` on, or those after leading
 * ones up to x's rank ([1024] or [1, 1, 1024]). */
bool cs_col_shape(const cs_tensor *c, const cs_tensor *x, int axis);

/* ---------------------------------------------------------------- numbers */

float cs_half_to_float(uint16_t h);
uint16_t cs_half_from_float(float f); /* round to nearest even; overflow -> Inf */
float cs_bf16_to_float(uint16_t b);
uint16_t cs_bf16_from_float(float f); /* round to nearest even */
/* HALF, BFLOAT16 and FLOAT elements as float: p is the tensor's base, off in elements. */
float cs_load(cnnlDataType_t dt, const void *p, int64_t off);
void cs_store(cnnlDataType_t dt, void *p, int64_t off, float v); /* rounds once to dt */
bool cs_is_float(cnnlDataType_t dt);                             /* HALF, BFLOAT16, FLOAT */

/* ---------------------------------------------------------------- the queue */

/* Enqueues `job` (malloc'd, freed after it ran) on h's queue. A NULL job (failed malloc)
 * gives CNNL_STATUS_ALLOC_FAILED; a queue CNRT refuses, CNNL_STATUS_EXECUTION_FAILED. */
cnnlStatus_t cs_submit(cnnlHandle_t h, const char *fn, standin_work_fn run, void *job);

#endif
