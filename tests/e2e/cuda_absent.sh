#!/usr/bin/env bash
# The CUDA plugin on a machine without an NVIDIA GPU or driver: usage: bash cuda_absent.sh BUILD_DIR SOURCE_DIR
# it-info must list cuda as a loaded plugin with 22 native kernel slots and no devices, and say
# why (cudaGetDeviceCount's error, the runtime's CUDA version, the missing driver); `--device cuda`
# must fail with that message instead of crashing. Skipped where the plugin is not built (no nvcc)
# and where a driver is installed (there scripts/validate-backend.sh cuda is the test).
set -u
build=$(cd "${1:?usage: cuda_absent.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
. "$(dirname "${BASH_SOURCE[0]}")/checks.bash"

if [ ! -f "$build/libit_backend_cuda.so" ]; then
    if grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt" 2>/dev/null &&
        ! grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt"; then
        echo "FAIL - nvcc was found but libit_backend_cuda.so was not built"; exit 1
    fi
    echo "skip - libit_backend_cuda.so is not built here (no nvcc, or the sanitizer tree)"; exit 0
fi
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    echo "skip - an NVIDIA driver is installed here: run scripts/validate-backend.sh cuda instead"; exit 0
fi
out=$("$build/it-info" 2>&1)
expect "cuda is a loaded plugin" "$out" "^  cuda +loaded +.*libit_backend_cuda\.so$"
expect "cuda is registered with bf16 autocast, 22 native slots and no devices" "$out" \
    "^  cuda +[0-9]+ +bfloat16 +device +none +22/[0-9]+ native "
expect "it-info shows why, naming the driver" "$out" \
    "^  cuda +- +- +no devices: .*no usable NVIDIA GPU: cudaGetDeviceCount: cudaError[A-Za-z]+ \(.*\); \
runtime CUDA [0-9]+\.[0-9]+, no NVIDIA driver \(libcuda\.so\.1\) found"
out=$("$build/gpt2" --device cuda --input_bin /dev/null 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && ok "--device cuda fails cleanly (exit $rc)" || bad "--device cuda exits $rc" "$out"
expect "--device cuda says why" "$out" "backend 'cuda' failed to initialize: cuda: no usable NVIDIA GPU"
checks_done cuda_absent.sh
