/* libFuzzer harness: a command line for it_train_parse_args. The input is split into arguments at
 * NUL and newline bytes (so no argument holds a newline; the seeds are one argument per line).
 * A refusal must be IT_ERR_INVALID_ARG (IT_ERR_UNSUPPORTED for a known but unimplemented value)
 * with a one-line message naming the flag; an accepted command line must leave every numeric
 * field inside the range --help documents. */
#include "fuzz_common.h"
#include "infinitrain/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2] = {"gpt2"};
    int argc = 1;
    for (size_t i = 0, start = 0; i <= size && argc <= MAX_ARGS; i++) {
        if (i == size || buf[i] == '\0' || buf[i] == '\n') {
            buf[i] = '\0';
            if (i > start || i < size) argv[argc++] = buf + start; /* keep empty arguments */
            start = i + 1;
        }
    }
    argv[argc] = NULL;
    it_train_config c;
    it_train_config_defaults(&c, "gpt2");
    bool help = false;
    it_error_clear();
    it_status st = it_train_parse_args(&c, argc, argv, &help);
    if (st) {
        const char *msg = it_last_error();
        FUZZ_ASSERT(st == IT_ERR_INVALID_ARG || st == IT_ERR_UNSUPPORTED, "status %s", it_status_name(st));
        FUZZ_ASSERT(*msg && strchr(msg, '\n') == NULL, "message empty or spans lines: %s", msg);
        FUZZ_ASSERT(strstr(msg, "--") != NULL || strstr(msg, "argument") != NULL, "message names no flag: %s", msg);
    } else if (!help) {
        FUZZ_ASSERT(c.batch_size >= 1 && c.batch_size <= (1 << 20), "batch_size %lld", (long long)c.batch_size);
        FUZZ_ASSERT(c.sequence_length >= 1 && c.sequence_length <= (1 << 20), "sequence_length");
        FUZZ_ASSERT(c.total_batch_size >= 0 && c.total_batch_size <= ((int64_t)1 << 40), "total_batch_size");
        FUZZ_ASSERT(c.num_iteration >= 0 && c.text_length >= 1 && c.log_interval >= 1, "counts");
        FUZZ_ASSERT(c.n_layer >= 0 && c.n_layer <= 1024 && c.n_head >= 0 && c.n_head <= 1024, "shape");
        FUZZ_ASSERT(c.n_embd >= 0 && c.n_embd <= 65536 && c.block_size >= 0 && c.vocab_size >= 0, "shape");
        FUZZ_ASSERT(c.learning_rate >= 0 && c.learning_rate <= 1e3f && c.weight_decay >= 0 && c.min_lr >= 0, "lr");
        FUZZ_ASSERT(c.grad_clip >= 0 && c.max_memory_mb >= 0 && c.moe_aux_loss_coeff >= 0, "ranges");
        FUZZ_ASSERT(c.device && c.model, "strings");
        FUZZ_ASSERT(c.dtype == IT_DTYPE_FP32 || c.dtype == IT_DTYPE_BF16, "dtype"); /* bf16: autocast */
        FUZZ_ASSERT(c.ddp_bucket_kb >= 1 && c.ddp_bucket_kb <= ((int64_t)1 << 30), "ddp_bucket_kb");
    }
    it_train_config_release(&c);
    free(buf);
    return 0;
}
