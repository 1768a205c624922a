/* The precision checker behind `--precision_check "level=1|2,path=DIR,format=simple|md5,
 * save_tensors=true,md5_tolerance=1e-3"` (InfiniTrain's option string and files).
 *
 * While a check is open and a training step runs, every tensor the level asks for is
 * copied to the host and written as one line of the rank's log, one row of its index and,
 * with save_tensors, one .npy file:
 *   level 1 (module): each module's forward output and the gradient of that output in
 *                     backward (InfiniTrain's module hooks), under InfiniTrain's module
 *                     names (transformer.h.3.ln_1, lm_head, ...);
 *   level 2 (op):     each differentiable op's forward inputs and output, and in backward
 *                     the gradient it receives (dy) and the gradients of its inputs after it
 *                     ran (InfiniTrain's function pre/post hooks), under the op's name
 *                     (layernorm, linear, gelu, ...).
 *
 * Files, for rank R of a run started at YYYYMMDD_HHMMSS (one directory per run):
 *   PATH/YYYYMMDD_HHMMSS/precision_check_rank_R.log   InfiniTrain's lines, one per tensor
 *   PATH/YYYYMMDD_HHMMSS/precision_check_rank_R.tsv   the index: one row per tensor, in
 *                                                     execution order (it-precision-compare)
 *   PATH/YYYYMMDD_HHMMSS/rank_R/step_NNNNNN/NAME[_IDX]_forward|backward.npy
 * See docs/precision-check.md for the layouts and where they differ from InfiniTrain's.
 *
 * Closed (the default), the tape pays one predictable branch per node and per backward,
 * and a model one per module boundary. Begin, the step calls and end are meant for the one
 * thread that drives training; records come from that thread. */
#ifndef INFINITRAIN_PRECISION_H
#define INFINITRAIN_PRECISION_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum it_precision_format {
    IT_PRECISION_SIMPLE = 0, /* dtype, shape, min/max/mean, first 6 values, NaN/Inf counts */
    IT_PRECISION_MD5 = 1,    /* dtype, shape, md5 of the data (rounded to md5_tolerance when > 0) */
} it_precision_format;

typedef struct it_precision_config {
    int level;       /* 0 off, 1 module, 2 op */
    char path[1024]; /* output root (default ./log_precision_check) */
    it_precision_format format;
    bool save_tensors;    /* write .npy files (float32) */
    double md5_tolerance; /* > 0: values rounded to multiples of it before md5 */
} it_precision_config;

/* Parse InfiniTrain's "key=value,key=value" string (keys level, path, format, save_tensors,
 * md5_tolerance; an empty string is level 0). Unlike InfiniTrain, an unknown key or a bad
 * value is an IT_ERR_INVALID_ARG naming it, not ignored. */
IT_API it_status it_precision_parse(const char *spec, it_precision_config *out);

/* Open a check: creates cfg->path/<stamp as YYYYMMDD_HHMMSS, local time>/ and the rank's log
 * and index. `stamp` is seconds since the epoch (ranks of one job pass the same one, so
 * they share the directory). A level-0 config opens nothing and returns IT_OK. */
IT_API it_status it_precision_begin(const it_precision_config *cfg, int rank, int64_t stamp);
IT_API bool it_precision_enabled(void);
/* The run directory (PATH/YYYYMMDD_HHMMSS), "" when no check is open. */
IT_API const char *it_precision_run_dir(void);
/* Records are taken between step_begin and step_end only (not during validation or
 * sampling). step_begin resets the per-name file counters, as InfiniTrain's
 * ResetCounters does each iteration; `step` is the 1-based step of the step line. */
IT_API void it_precision_step_begin(int step);
/* Micro-step (InfiniTrain's GAS) of what follows, 0-based. */
IT_API void it_precision_micro_step(int gas);
/* The same under pipeline parallelism, where micro-steps interleave (1F1B: micro-batch i+1's
 * forward before micro-batch i's backward): sets the micro-step of what follows and keeps the
 * step's forward context, so that each backward's records find their forward's names. */
IT_API void it_precision_pipeline_micro_step(int gas);
/* Ends the step: flushes the files; returns the first error a record met since begin
 * (a record that fails stops recording; the error names the file). */
IT_API it_status it_precision_step_end(void);
/* Close the check (IT_OK when none is open); returns the first error met, if any. */
IT_API it_status it_precision_end(void);

/* Records of the open check so far. */
IT_API uint64_t it_precision_record_count(void);

/* ---- helpers the checker, it-precision-compare and the tests share */

/* MD5 of n bytes as 32 lowercase hex digits and a NUL. */
IT_API void it_md5_hex(const void *data, size_t n, char out[33]);
/* InfiniTrain's rounding before md5: each value to (float)(round(v / tol) * tol), computed
 * as round((double)v * (1 / tol)) * tol in double (round half away from zero). */
IT_API void it_precision_quantize(const float *in, float *out, size_t n, double tol);

/* A float32 array read from a .npy file. */
typedef struct it_npy {
    int ndim;
    int64_t shape[IT_MAX_DIMS];
    int64_t numel;
    float *data; /* malloc'ed, numel values, C order */
} it_npy;
/* Write data (C order) as an NPY v1.0 file of dtype '<f4'. */
IT_API it_status it_npy_write_f32(const char *path, int ndim, const int64_t *shape, const float *data);
/* Read an NPY v1.0/2.0 file of dtype '<f4', C order. IT_ERR_IO when it cannot be read,
 * IT_ERR_FORMAT naming the file and what is wrong (magic, version, header, dtype, order,
 * shape, size) otherwise. */
IT_API it_status it_npy_read_f32(const char *path, it_npy *out);
IT_API void it_npy_free(it_npy *a);

#ifdef __cplusplus
}
#endif
#endif
