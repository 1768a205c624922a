/* libFuzzer harness: the input is a GPT-2 (llm.c, magic 20240326 version 3) checkpoint file for
 * it_gpt2_load; see fuzz_ckpt.h for what counts as a finding. */
#include "fuzz_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_checkpoint(it_gpt2_load, data, size); }
