/* libFuzzer harness: the input is a safetensors file for it_safetensors_open. A refusal must
 * be a clean error naming the file (fuzz_check_refusal). An accepted file must list its tensors
 * in strictly ascending name order, each with nbytes = numel x its dtype's size, its data inside
 * the file, and all of them together exactly the bytes after the header; every float tensor is
 * read whole through it_safetensors_read_f32 (so ASan sees any read past the mapping). */
#include "fuzz_common.h"
#include "infinitrain/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    it_safetensors *st = NULL;
    it_status s = it_safetensors_open(path, &st);
    if (s) {
        fuzz_check_refusal(s, path);
        FUZZ_ASSERT(st == NULL, "a refused file returned a handle");
        return 0;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    size_t total = 0;
    static float buf[1 << 16];
    for (int i = 0; i < it_safetensors_count(st); i++) {
        const it_safetensors_tensor *t = it_safetensors_at(st, i);
        if (i > 0) FUZZ_ASSERT(strcmp(it_safetensors_at(st, i - 1)->name, t->name) < 0, "names not strictly sorted");
        FUZZ_ASSERT(it_safetensors_find(st, t->name) == t, "find('%s') is not the listed tensor", t->name);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        FUZZ_ASSERT(numel == t->numel, "numel %lld, shape makes %lld", (long long)t->numel, (long long)numel);
        size_t esize = t->dtype < IT_DTYPE_COUNT ? it_dtype_size(t->dtype) : 1;
        FUZZ_ASSERT(t->nbytes == (size_t)t->numel * esize, "nbytes %zu", t->nbytes);
        total += t->nbytes;
        bool f = t->dtype == IT_DTYPE_FP32 || t->dtype == IT_DTYPE_BF16 || t->dtype == IT_DTYPE_FP16 ||
                 t->dtype == IT_DTYPE_FP64;
        for (int64_t at = 0; f && at < t->numel; at += 1 << 16) {
            int64_t n = t->numel - at < (1 << 16) ? t->numel - at : (1 << 16);
            FUZZ_ASSERT(it_safetensors_read_f32(t, at, n, buf) == IT_OK, "reading '%s': %s", t->name, it_last_error());
        }
        if (!f) FUZZ_ASSERT(it_safetensors_read_f32(t, 0, 0, buf) == IT_ERR_FORMAT, "non-float '%s' read", t->name);
    }
    FUZZ_ASSERT(total == size - 8 - hlen, "tensors hold %zu bytes, the file %zu after its header", total,
                (size_t)(size - 8 - hlen));
    it_safetensors_close(st);
    return 0;
}
