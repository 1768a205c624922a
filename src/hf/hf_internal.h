/* The Hugging Face module's inside: config.json read into a model configuration and written
 * back (hf_config.c), the weight layouts (hf_model.c). docs/hf.md. */
#ifndef IT_HF_INTERNAL_H
#define IT_HF_INTERNAL_H

#include "infinitrain/hf.h"
#include "models/model_impl.h"

typedef enum hf_arch { HF_GPT2, HF_LLAMA, HF_MIXTRAL, HF_QWEN3 } hf_arch;

typedef struct hf_config {
    hf_arch arch;
    it_gpt2_config gpt2;    /* HF_GPT2: the vocabulary padded to a multiple of 128 (llm.c's) */
    it__llama_config llama; /* HF_LLAMA, HF_MIXTRAL, HF_QWEN3 */
    bool tied;              /* tie_word_embeddings: LLaMA's lm_head read from embed_tokens (and
                               trained apart); Qwen3's head is the embedding (llama.tied) */
    char torch_dtype[16];   /* as the file says ("" when absent) */
} hf_config;

/* DIR/config.json (or a config.json path) into *c; anything the models cannot represent is
 * refused naming the key and its value. */
it_status hf_config_read(const char *dir, hf_config *c);
/* The config.json of model m (its family and info) into dir, torch_dtype `dtype`. */
it_status hf_config_write(const it_model *m, const char *dir, it_dtype dtype);
/* A model's configuration as hf_config (for the export's tensor names and shapes). */
it_status hf_config_of_model(const it_model *m, hf_config *c);

/* ---- the weight layouts (hf_model.c) */
typedef enum map_kind {
    MAP_COPY,      /* rows as they are */
    MAP_TRANSPOSE, /* the HF tensor is [cols, rows] (Conv1D) */
    MAP_UNPERMUTE, /* rows in HF's half-split rotary order, `heads` heads */
    MAP_ZERO,      /* no HF rows: zeros in, nothing out (GPT-2's vocabulary padding) */
} map_kind;

/* Rows [row0, row0 + rows) of one of our tensors come from HF tensor `hf`. */
typedef struct seg {
    int64_t row0, rows;
    map_kind kind;
    int heads;
    char hf[192];
} seg;

typedef struct tmap {
    int64_t rows, cols; /* our whole tensor: (rows, cols), or (n) as (n, 1) */
    int ns;
    seg s[3];
} tmap;

/* The map of our whole tensor `name` of shape (rows, cols) (a 1-D one as (n, 1)); an unknown
 * name is IT_ERR_INTERNAL. */
it_status hf_map_of(const hf_config *c, const char *name, int64_t rows, int64_t cols, tmap *t);
/* Row r of segment s (of its rows) in its HF tensor: r itself, or un-permuted (MAP_UNPERMUTE). */
int64_t hf_row(const seg *s, int64_t r);

#endif
