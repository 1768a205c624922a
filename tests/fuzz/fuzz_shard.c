/* libFuzzer harness: the input is an llm.c token shard for it_shard_open, then the data loader
 * over it. An accepted shard must hold exactly the file's tokens; the loader, with B and T taken
 * from two unused header bytes, must hand out the windows InfiniTrain's sampling defines and
 * check ids against a vocabulary taken from two more. */
#include "fuzz_common.h"
#include "infinitrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_loader(const char *path, const uint8_t *data, size_t size, const it_shard *s) {
    /* header bytes 12.. are unused by the format: B in 1..4, T in 1..16, vocab in 1..65536 */
    int64_t B = 1 + data[12] % 4, T = 1 + data[13] % 16, vocab = 1 + (data[14] | data[15] << 8);
    int64_t n = it_shard_num_tokens(s);
    it_loader *l = NULL;
    it_error_clear();
    it_status st = it_loader_new(path, B, T, 0, 1 + data[16] % 3, &l);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(st == IT_ERR_FORMAT && n < (B + 1) * T, "loader refused %lld tokens for B=%lld T=%lld",
                    (long long)n, (long long)B, (long long)T);
        return;
    }
    FUZZ_ASSERT(it_loader_num_batches(l) == (n / T - 1) / B, "num_batches %lld for n=%lld B=%lld T=%lld",
                (long long)it_loader_num_batches(l), (long long)n, (long long)B, (long long)T);
    const uint32_t *t = it_shard_tokens(s);
    uint32_t mx = 0;
    int64_t first_bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (t[i] > mx) mx = t[i];
        if (first_bad < 0 && t[i] >= vocab) first_bad = i;
    }
    it_error_clear();
    st = it_loader_check_vocab(l, vocab);
    if (first_bad < 0) {
        FUZZ_ASSERT(st == IT_OK, "vocab check refused a shard whose ids are all < %lld", (long long)vocab);
    } else {
        fuzz_check_refusal(st, path);
        char pos[64];
        snprintf(pos, sizeof pos, "position %lld", (long long)first_bad);
        FUZZ_ASSERT(strstr(it_last_error(), pos) != NULL, "vocab error does not name %s", pos);
    }
    int32_t x[64], y[64];
    int64_t nb = it_loader_num_batches(l), world = 1 + data[16] % 3;
    for (int64_t k = 0; k < nb + 2 && k < 8; k++) {
        FUZZ_ASSERT(it_loader_next(l, x, y) == IT_OK, "loader_next");
        int64_t g = (k * world) % nb;
        for (int64_t i = 0; i < B * T; i++)
            FUZZ_ASSERT((uint32_t)x[i] == t[g * B * T + i] && (uint32_t)y[i] == t[g * B * T + i + 1],
                        "batch %lld element %lld", (long long)g, (long long)i);
    }
    it_loader_free(l);
    (void)size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    it_shard *s = NULL;
    it_error_clear();
    it_status st = it_shard_open(path, &s);
    if (st) {
        fuzz_check_refusal(st, path);
        FUZZ_ASSERT(s == NULL, "a refused open set *out");
        return 0;
    }
    int32_t magic = fuzz_le32(data);
    int width = magic == IT_SHARD_MAGIC_U16 ? 2 : 4;
    int64_t n = it_shard_num_tokens(s);
    FUZZ_ASSERT(magic == IT_SHARD_MAGIC_U16 || magic == IT_SHARD_MAGIC_U32, "accepted magic %d", magic);
    FUZZ_ASSERT(fuzz_le32(data + 4) == IT_SHARD_VERSION ||
                    (fuzz_le32(data) == IT_SHARD_MAGIC_U32 && fuzz_le32(data + 4) == IT_SHARD_VERSION_U32),
                "accepted version %d", fuzz_le32(data + 4));
    FUZZ_ASSERT(n == fuzz_le32(data + 8) && size == 1024 + (size_t)n * (size_t)width,
                "accepted %lld tokens from a %zu-byte file", (long long)n, size);
    uint32_t mx = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = data + 1024 + i * width;
        uint32_t v = width == 2 ? (uint32_t)(p[0] | p[1] << 8) : (uint32_t)fuzz_le32(p);
        FUZZ_ASSERT(it_shard_tokens(s)[i] == v, "token %lld", (long long)i);
        if (v > mx) mx = v;
    }
    FUZZ_ASSERT(it_shard_max_token(s) == mx, "max token %u, expected %u", it_shard_max_token(s), mx);
    check_loader(path, data, size, s);
    it_shard_free(s);
    return 0;
}
