/* libFuzzer harness: the input is a tiny Mixtral (InfiniTrain, magic 20260513 version 2) checkpoint file for
 * it_mixtral_load; see fuzz_ckpt.h for what counts as a finding. */
#include "fuzz_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_checkpoint(it_mixtral_load, data, size); }
