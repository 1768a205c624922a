/* The CPU backend: always registered, the reference every other backend is tested against. */
#include "cpu/cpu_kernels.h"

static const it_kernels cpu_kernels = {
    .cast = it_cpu_cast,
    .fill = it_cpu_fill,
    .copy_strided = it_cpu_copy_strided,
    .gemm = it_cpu_gemm,
    .unary = it_cpu_unary,
    .binary = it_cpu_binary,
    .reduce = it_cpu_reduce,
    .embedding_fwd = it_cpu_embedding_fwd,
    .embedding_bwd = it_cpu_embedding_bwd,
    .layernorm_fwd = it_cpu_layernorm_fwd,
    .layernorm_bwd = it_cpu_layernorm_bwd,
    .softmax_fwd = it_cpu_softmax_fwd,
    .softmax_bwd = it_cpu_softmax_bwd,
    .cross_entropy_fwd = it_cpu_cross_entropy_fwd,
    .cross_entropy_bwd = it_cpu_cross_entropy_bwd,
    .sgd_step = it_cpu_sgd_step,
    .adam_step = it_cpu_adam_step,
    .rmsnorm_fwd = it_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = it_cpu_rmsnorm_bwd,
    .rope = it_cpu_rope,
    .topk = it_cpu_topk,
    .attention_fwd = it_cpu_attention_fwd,
    .attention_bwd = it_cpu_attention_bwd,
    .adam_step_round = it_cpu_adam_step_round,
    .cross_entropy_low_fwd = it_cpu_cross_entropy_low_fwd,
    .cross_entropy_low_bwd = it_cpu_cross_entropy_low_bwd,
    .swiglu_low_fwd = it_cpu_swiglu_low_fwd,
    .swiglu_low_bwd = it_cpu_swiglu_low_bwd,
    .flash_attention_fwd = it_cpu_flash_attention_fwd,
    .flash_attention_bwd = it_cpu_flash_attention_bwd,
};

const it_kernels *it_cpu_kernels(void) { return &cpu_kernels; }

extern const it_ccl it_cpu_ccl; /* ccl_mpi.c */

/* Registered by the core's registry on first use (see src/core/registry.c); exported for test
 * plugins built on it (backends/cpu/ccl_mpi.h). */
IT_API const it_backend it_cpu_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "cpu",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = true,
    .runtime = &it_cpu_runtime,
    .kernels = &cpu_kernels,
    .ccl = &it_cpu_ccl,
    .kernels_size = sizeof(it_kernels),
};
