/* The Hugging Face module's inside: config.json read into a model configuration and written
 * back (hf_config.c), the weight layouts (hf_model.c). docs/hf.md. */
#ifndef IT_HF_INTERNAL_H
#define IT_HF_INTERNAL_H

#include "infinitrain/hf.h"
#include "models/model_impl.h"

typedef enum hf_arch { HF_GPT2, HF_LLAMA, HF_MIXTRAL } hf_arch;

typedef struct hf_config {
    hf_arch arch;
    it_gpt2_config gpt2;    /* HF_GPT2: the vocabulary padded to a multiple of 128 (llm.c's) */
    it__llama_config llama; /* HF_LLAMA, HF_MIXTRAL */
    bool tied;              /* tie_word_embeddings: LLaMA's lm_head read from embed_tokens */
    char torch_dtype[16];   /* as the file says ("" when absent) */
} hf_config;

/* DIR/config.json (or a config.json path) into *c; anything the models cannot represent is
 * refused naming the key and its value. */
it_status hf_config_read(const char *dir, hf_config *c);
/* The config.json of model m (its family and info) into dir, torch_dtype `dtype`. */
it_status hf_config_write(const it_model *m, const char *dir, it_dtype dtype);
/* A model's configuration as hf_config (for the export's tensor names and shapes). */
it_status hf_config_of_model(const it_model *m, hf_config *c);

#endif
