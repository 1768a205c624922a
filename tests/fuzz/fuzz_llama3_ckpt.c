/* libFuzzer harness: the input is a LLaMA-3 (llm.c, magic 20240803 version 3) checkpoint file for
 * it_llama3_load; see fuzz_ckpt.h for what counts as a finding. */
#include "fuzz_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_checkpoint(it_llama3_load, data, size); }
