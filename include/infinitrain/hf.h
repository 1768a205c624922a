/* Hugging Face models in and out: safetensors files (read through mmap, written atomically,
 * sharded with model.safetensors.index.json), config.json, and the weight layouts of
 * GPT2LMHeadModel, LlamaForCausalLM and MixtralForCausalLM. docs/hf.md says what maps to what;
 * docs/formats.md has the two file formats. */
#ifndef INFINITRAIN_HF_H
#define INFINITRAIN_HF_H

#include "dtype.h"
#include "models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors
 *
 * A file is a little-endian u64 N, N bytes of JSON {name: {"dtype", "shape", "data_offsets":
 * [begin, end]}, "__metadata__": {string: string} (optional)}, then the data: offsets count
 * from the data's first byte, and the tensors tile it with no gap and no overlap. The reader
 * checks all of that (and duplicate names, dtypes, shapes against byte counts, a header past
 * the end of the file) and refuses a file with one message naming the file, the tensor and the
 * values; nothing is read past a check. */
#define IT_SAFETENSORS_MAX_DIMS 8

typedef struct it_safetensors it_safetensors;

typedef struct it_safetensors_tensor {
    const char *name;
    const char *dtype_name; /* as in the file: "F32", "BF16", "F16", "I64", ... */
    it_dtype dtype;         /* its element type; F8_E4M3 / F8_E5M2 have none (IT_DTYPE_COUNT) */
    int ndim;
    int64_t shape[IT_SAFETENSORS_MAX_DIMS];
    int64_t numel;
    const void *data; /* mapped read-only, valid until it_safetensors_close */
    size_t nbytes;
    const char *file; /* the file it is in */
} it_safetensors_tensor;

/* path: a .safetensors file; or a directory holding model.safetensors, or
 * model.safetensors.index.json and the shards its weight_map names (each mapped once; a shard
 * the index names that is missing, a tensor the index names that its shard lacks, or a tensor
 * in two shards is an error). The tensors are listed in ascending byte order of their names. */
IT_API it_status it_safetensors_open(const char *path, it_safetensors **out);
IT_API void it_safetensors_close(it_safetensors *st);
IT_API int it_safetensors_count(const it_safetensors *st);
IT_API const it_safetensors_tensor *it_safetensors_at(const it_safetensors *st, int i);
/* NULL when absent (no error recorded). */
IT_API const it_safetensors_tensor *it_safetensors_find(const it_safetensors *st, const char *name);
/* A value of the (first) file's __metadata__, or NULL. */
IT_API const char *it_safetensors_metadata(const it_safetensors *st, const char *key);
/* Elements [at, at + n) of a float tensor (F32, BF16, F16, F64) as fp32: exact for the first
 * three, rounded to nearest for F64. */
IT_API it_status it_safetensors_read_f32(const it_safetensors_tensor *t, int64_t at, int64_t n, float *dst);
/* The tensor's pages are not needed now (madvise DONTNEED on the pages it alone holds): the
 * process's resident memory drops; reading it again reads the file again. */
IT_API void it_safetensors_drop(const it_safetensors_tensor *t);

/* Writing: n tensors, laid out in ascending byte order of their names (the order the reader
 * lists), the JSON compact with "__metadata__": {"format": "pt"} first and padded with spaces
 * to a multiple of 8 bytes. fill(ctx, i, dst, nbytes) writes tensor i's bytes (i indexes the
 * caller's array, not the sorted order). The file is written to a temporary and renamed. */
typedef struct it_safetensors_spec {
    const char *name;
    it_dtype dtype;
    int ndim;
    int64_t shape[IT_SAFETENSORS_MAX_DIMS];
} it_safetensors_spec;
typedef it_status (*it_safetensors_fill)(void *ctx, int i, void *dst, size_t nbytes);
IT_API it_status it_safetensors_write(const char *path, const it_safetensors_spec *t, int n, it_safetensors_fill fill,
                                      void *ctx);
/* Into directory dir (created if missing): model.safetensors when all fits in max_shard_bytes
 * (0: no limit), else model-00001-of-0000K.safetensors ... and model.safetensors.index.json,
 * shards filled in name order and a new one begun when the next tensor would pass the limit
 * (transformers' rule; a tensor larger than the limit gets a shard of its own). Returns the
 * number of shards in *shards (may be NULL). */
IT_API it_status it_safetensors_write_dir(const char *dir, const it_safetensors_spec *t, int n, size_t max_shard_bytes,
                                          it_safetensors_fill fill, void *ctx, int *shards);
/* "5GB", "500MB", "2GiB", "1000" (bytes) -> bytes; transformers' units (GB = 10^9). */
IT_API it_status it_hf_parse_size(const char *text, size_t *bytes);

/* ---- Hugging Face model directories: config.json + safetensors */

/* The model DIR holds (GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM), on dev, under
 * tensor / pipeline parallelism when par says so (each rank reads only its slices). Half
 * precision files load into fp32 exactly. Refused with the key and value: a config the model
 * cannot compute; with the file and tensor: a missing tensor, a shape the config does not make,
 * a tensor nothing would read. */
IT_API it_status it_hf_load(const char *dir, it_device dev, const it_model_parallel *par, it_model **out);
/* "gpt2", "llama3" or "mixtral": the app that trains DIR's model. */
IT_API it_status it_hf_family(const char *dir, const char **family);

typedef struct it_hf_save_options {
    it_dtype dtype;         /* of the written tensors: fp32 (0 = fp32), bf16 or fp16 (rounded to nearest even) */
    size_t max_shard_bytes; /* 0: one model.safetensors */
} it_hf_save_options;
/* config.json and the weights into DIR (created), in HF's names and layouts. Under TP/PP every
 * rank of the model's groups calls it; the first writes. LLaMA / Mixtral are written untied
 * (tie_word_embeddings false), since training here updates lm_head apart from the embedding. */
IT_API it_status it_hf_save(it_model *m, const char *dir, const it_hf_save_options *opt);

/* ---- LoRA adapters in PEFT's form: DIR/adapter_config.json + DIR/adapter_model.safetensors,
 * tensors base_model.model.<HF module>.lora_A.weight (r, in) / .lora_B.weight (out, r). A
 * fused layer of this project that is several HF modules (LLaMA's c_attn: q_proj, k_proj,
 * v_proj) is written as one adapter per module with the same lora_A, and read back only when
 * their lora_A are one. base_model (may be NULL) goes to base_model_name_or_path. Collective
 * under TP/PP as it_model_lora_save. */
IT_API it_status it_hf_lora_save(const it_model *m, const char *dir, const char *base_model);
/* Into the model's adapters (r and lora_alpha must be the run's; every adapter of the run must
 * be in the file and every tensor of the file an adapter of the run). */
IT_API it_status it_hf_lora_load(it_model *m, const char *dir);
/* Whether path is a directory holding adapter_config.json. */
IT_API bool it_hf_lora_is_peft(const char *path);
/* A PEFT directory's adapter_config.json: its r and lora_alpha (what this project's adapters
 * can take: LoRA, no rsLoRA, DoRA, biases or per-module patterns; otherwise a named error). */
IT_API it_status it_hf_lora_config(const char *dir, int *r, double *alpha);

#ifdef __cplusplus
}
#endif
#endif
