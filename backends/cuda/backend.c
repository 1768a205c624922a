/* The CUDA backend: NVIDIA GPUs through cudart, cuBLAS and NCCL, built as the plugin
 * libit_backend_cuda.so when CMake finds nvcc, and selected with `--device cuda`.
 *
 * Its kernel slots (kernels_ew.cu, kernels_nn.cu, gemm.c) take fp32, bf16 and fp16 (and
 * decline other dtypes, which the core then runs on the CPU fallback); topk and the fused
 * attention are left empty: topk is served by the CPU fallback, the attention composed by the
 * core from gemm and softmax. The flash attention slots are native (flash_attention.cu, head
 * sizes up to 256; a call they decline is composed). The coverage report (`--backend_report`)
 * shows which calls fell back and what they cost. */
#include "cuda_backend.h"

static const it_kernels cu_kernels = {
    .cast = cu_cast,
    .fill = cu_fill,
    .copy_strided = cu_copy_strided,
    .gemm = cu_gemm,
    .unary = cu_unary,
    .binary = cu_binary,
    .reduce = cu_reduce,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .softmax_fwd = cu_softmax_fwd,
    .softmax_bwd = cu_softmax_bwd,
    .cross_entropy_fwd = cu_cross_entropy_fwd,
    .cross_entropy_bwd = cu_cross_entropy_bwd,
    .sgd_step = cu_sgd_step,
    .adam_step = cu_adam_step,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .rope = cu_rope,
    .topk = NULL,
    .attention_fwd = NULL,
    .attention_bwd = NULL,
    .flash_attention_fwd = cu_flash_attention_fwd,
    .flash_attention_bwd = cu_flash_attention_bwd,
};

static const it_backend cu_backend = {
    .api_version = IT_BACKEND_API_VERSION,
    .name = "cuda",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = &cu_runtime,
    .kernels = &cu_kernels,
#ifdef IT_CUDA_HAVE_NCCL
    .ccl = &cu_ccl,
#else
    .ccl = NULL,
#endif
    .kernels_size = sizeof(it_kernels),
};

/* The one symbol the core looks up. No CUDA call happens here: the driver is first touched
 * in runtime.init, which the core calls lazily on first use. */
IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) { return &cu_backend; }
