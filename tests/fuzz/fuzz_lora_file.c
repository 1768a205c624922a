/* libFuzzer harness: the input is InfiniTrain's LoRA adapter file for it_model_lora_load, into
 * a tiny GPT-2 made in memory (block 8, V 16, L 2, 2 heads, C 8) with rank-2 adapters on
 * c_attn,c_proj (6 adapted layers, 12 tensors). A refusal must be a clean error
 * (fuzz_check_refusal) that leaves the adapters as they were. An accepted file must hold every
 * adapter once with its shape and nothing else: written back with it_model_lora_save it has the
 * same size, and loads to the same values bit for bit. */
#include "fuzz_common.h"
#include "infinitrain/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static it_model *model(void) {
    static it_model *m;
    if (m) return m;
    it_gpt2_config cfg = {8, 16, 16, 2, 2, 8};
    FUZZ_ASSERT(it_gpt2_new(&cfg, it_device_cpu(), 1, &m) == IT_OK, "building the model");
    it_lora_config lc = {2, 16.0f, "c_attn,c_proj", 1};
    FUZZ_ASSERT(it_model_lora_apply(m, &lc) == IT_OK, "applying LoRA");
    FUZZ_ASSERT(it_model_lora_count(m) == 12, "%d adapter tensors", it_model_lora_count(m));
    return m;
}

static float *values(it_model *m) {
    size_t n = sizeof(float) * (size_t)it_model_lora_numel(m);
    float *v = malloc(n);
    FUZZ_ASSERT(v && it_tensor_copy_to_host(it_model_trainable(m), v, n) == IT_OK, "reading the adapters");
    return v;
}

static const char *copy_path;
static void remove_copy(void) { unlink(copy_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    it_model *m = model();
    size_t bytes = sizeof(float) * (size_t)it_model_lora_numel(m);
    float *before = values(m);
    const char *path = fuzz_file(0, data, size);
    it_status st = it_model_lora_load(m, path);
    float *after = values(m);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(memcmp(before, after, bytes) == 0, "a refused file changed the adapters");
    } else {
        static char copy[64]; /* a real file: the save is atomic (a temporary, then a rename) */
        if (!copy[0]) {
            snprintf(copy, sizeof copy, "/tmp/it_fuzz_lora_%ld.bin", (long)getpid());
            atexit(remove_copy);
            copy_path = copy;
        }
        FUZZ_ASSERT(it_model_lora_save(m, copy) == IT_OK, "saving the accepted adapters");
        FILE *f = fopen(copy, "rb");
        FUZZ_ASSERT(f != NULL, "reopening %s", copy);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fclose(f);
        FUZZ_ASSERT((size_t)n == size, "written back: %ld bytes, the input had %zu", n, size);
        FUZZ_ASSERT(it_model_lora_load(m, copy) == IT_OK, "reloading the written adapters");
        float *again = values(m);
        FUZZ_ASSERT(memcmp(after, again, bytes) == 0, "reloaded adapters differ");
        free(again);
    }
    free(before);
    free(after);
    return 0;
}
