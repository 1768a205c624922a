/* GPT-2 on the CPU backend against PyTorch (fixtures made by
 * tests/fixtures/gpt2/make_fixtures.py): the step-1 logits, loss and every gradient; the
 * 10-step loss trajectory of every case (SGD, Adam, AdamW, accumulation 1/2/4, clipping)
 * through the same driver and flags as apps/gpt2; a byte-identical checkpoint round trip.
 * Tolerances and their reasons: tests/exact_common.h. */
#include "exact_common.h"

#define FIX IT_SOURCE_DIR "/tests/fixtures/gpt2/"

int main(void) {
    it_model *m = NULL;
    CHECK_OK(it_gpt2_load(FIX "tiny_gpt2.bin", it_device_cpu(), &m));
    if (!m) return it_test_report("test_gpt2_exact");
    const it_model_info *info = it_model_get_info(m);
    int64_t L = info->n_layer, C = info->n_embd, Vp = info->padded_vocab, T = info->block_size, V = info->vocab_size;
    exact_segment segs[16] = {{"wte", Vp * C},
                              {"wpe", T * C},
                              {"ln_1.w", L * C},
                              {"ln_1.b", L * C},
                              {"c_attn.w", L * 3 * C * C},
                              {"c_attn.b", L * 3 * C},
                              {"attn.c_proj.w", L * C * C},
                              {"attn.c_proj.b", L * C},
                              {"ln_2.w", L * C},
                              {"ln_2.b", L * C},
                              {"c_fc.w", L * 4 * C * C},
                              {"c_fc.b", L * 4 * C},
                              {"mlp.c_proj.w", L * 4 * C * C},
                              {"mlp.c_proj.b", L * C},
                              {"ln_f.w", C},
                              {"ln_f.b", C}};
    exact_debug_state(m, FIX "debug_state.bin", segs, 16);
    /* Padded wte rows get no gradient from the loss (softmax over the first V columns). */
    float *g = malloc(sizeof(float) * (size_t)(Vp * C));
    it_tensor *wte_grad = it_tensor_slice(it_model_grads(m), 0, 0, Vp * C, 1);
    CHECK_OK(it_tensor_copy_to_host(wte_grad, g, sizeof(float) * (size_t)(Vp * C)));
    it_tensor_release(wte_grad);
    double pad = 0;
    for (int64_t i = V * C; i < Vp * C; i++) pad = fmax(pad, fabs(g[i]));
    CHECK(pad == 0.0);
    free(g);
    exact_roundtrip(m, FIX "tiny_gpt2.bin");
    it_model_free(m);
    CHECK(exact_trajectories("gpt2", FIX "expected_losses.txt", FIX "tiny_gpt2.bin", FIX "tiny_shard.bin") >= 6);
    return it_test_report("test_gpt2_exact");
}
