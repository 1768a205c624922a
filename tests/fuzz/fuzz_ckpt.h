/* The checkpoint harnesses' common body: load the input as a checkpoint; a refusal must be a
 * clean error (fuzz_check_refusal), an accepted file must be exactly header + parameters, read
 * back bit for bit, and (up to 64 layers x experts) train one tiny step (forward, loss, backward)
 * without a sanitizer report -- shapes the header checks let through must be shapes the model can
 * run. A refusal for the file's size is retried once at the size the header implies
 * (fuzz_resized), so that mutated shapes reach the model too. */
#ifndef IT_FUZZ_CKPT_H
#define IT_FUZZ_CKPT_H

#include "fuzz_common.h"
#include "infinitrain/autograd.h"
#include "infinitrain/models.h"

typedef it_status (*fuzz_loader)(const char *path, it_device dev, it_model **out);

static inline void fuzz_train_step(it_model *m, const uint8_t *data, size_t size) {
    const it_model_info *in = it_model_get_info(m);
    int64_t T = in->block_size < 4 ? in->block_size : 4, shape[2] = {1, T};
    int32_t x[4], y[4];
    for (int64_t t = 0; t < T; t++) { /* ids from the input's last bytes: any valid id */
        x[t] = (int32_t)(data[size - 1 - (size_t)t] % (uint64_t)in->vocab_size);
        y[t] = (int32_t)(data[size - 1 - (size_t)t - 4] % (uint64_t)in->vocab_size);
    }
    it_device dev = it_model_device(m);
    it_scope_begin();
    it_tensor *xi = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, x, sizeof(int32_t) * (size_t)T);
    it_tensor *yi = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, y, sizeof(int32_t) * (size_t)T);
    it_tensor *loss = it_model_loss(m, xi, yi);
    FUZZ_ASSERT(loss != NULL, "loss of an accepted checkpoint failed");
    FUZZ_ASSERT(it_backward(loss) == IT_OK, "backward of an accepted checkpoint failed");
    it_scope_end();
    it_tape_clear();
}

/* Most header mutations change the implied size, and the load stops at the size check. To reach
 * the model with those shapes too, a refusal that names the implied size ("parameters = N
 * bytes", up to 1 MiB) is retried once with the input cut or padded (repeating its own bytes)
 * to that size. */
static inline const uint8_t *fuzz_resized(const uint8_t *data, size_t size, size_t *new_size, uint8_t **owned) {
    size_t want = 0;
    const char *m = strstr(it_last_error(), "parameters = ");
    if (!m || sscanf(m, "parameters = %zu bytes", &want) != 1 || want == size || want > (1u << 20) || want < 1024)
        return NULL;
    uint8_t *b = malloc(want);
    if (!b) return NULL;
    for (size_t i = 0; i < want; i++) b[i] = i < size ? data[i] : data[1024 + (i - size) % (size - 1024)];
    *owned = b;
    *new_size = want;
    return b;
}

static inline int fuzz_checkpoint(fuzz_loader load, const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    it_model *m = NULL;
    uint8_t *owned = NULL;
    it_error_clear();
    it_status st = load(path, it_device_cpu(), &m);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(m == NULL, "a refused load set *out");
        size_t resized = 0;
        const uint8_t *again = size > 1024 ? fuzz_resized(data, size, &resized, &owned) : NULL;
        if (again) {
            data = again;
            size = resized;
            path = fuzz_file(0, data, size);
            it_error_clear();
            st = load(path, it_device_cpu(), &m);
            if (st) {
                fuzz_check_refusal(st, path);
                FUZZ_ASSERT(m == NULL, "a refused load set *out");
            }
        }
    }
    if (!st) {
        const it_model_info *in = it_model_get_info(m);
        size_t bytes = (size_t)in->num_params * sizeof(float);
        FUZZ_ASSERT(size == 1024 + bytes, "accepted a file of %zu bytes for %lld parameters", size,
                    (long long)in->num_params);
        float *host = malloc(bytes ? bytes : 1);
        FUZZ_ASSERT(host && it_tensor_copy_to_host(it_model_params(m), host, bytes) == IT_OK, "reading params");
        FUZZ_ASSERT(memcmp(host, data + 1024, bytes) == 0, "parameters differ from the file's bytes");
        free(host);
        /* The step costs per layer and expert in fixed op overhead: keep each input fast. */
        if ((int64_t)in->n_layer * (1 + in->n_expert) <= 64) fuzz_train_step(m, data, size);
        it_model_free(m);
    }
    free(owned);
    /* The caching allocator keeps freed blocks; without this every new shape would add some. */
    it_mem_empty_cache(it_device_cpu());
    return 0;
}

#endif
