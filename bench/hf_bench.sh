#!/usr/bin/env bash
# Loading a Hugging Face model, for `make bench`: a LLaMA-3 style model of about 1.1 billion
# parameters (16 layers, 2048 wide, 32 heads, 8 kv heads, FFN 8192, vocabulary 32000; random
# weights) written as HF's bf16 safetensors in two shards with an index (numpy), then loaded by
# bench_hf from it (--hf_model's path: the shards mapped, each tensor converted into the
# parameters through one buffer of its own size) and from the llm.c file it-ckpt from-hf
# makes of it (fread straight into the parameters). The peak RSS of each against the model's
# own buffers (fp32 parameters and their gradients): loading from HF should cost the mapped
# file's pages (2.2 GB of bf16, page cache the kernel can drop) and one tensor's buffer, not a
# second copy of the parameters. Figures only. Needs numpy (else HF_BENCH_SKIPPED says so).
# Usage: bench/hf_bench.sh [BUILD_DIR]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "HF_BENCH_SKIPPED reason=numpy does not import for /usr/bin/python3"
  exit 0
fi
/usr/bin/python3 "$(dirname "$0")/make_llama_hf.py" "$work/hf" 16 2048 32 8 8192 32000 2048 bf16 2
"$build/it-ckpt" from-hf "$work/hf" "$work/model.bin" >/dev/null
echo "HF_BENCH host=\"$cpu\" model=llama3-16L-2048-gqa32/8-ffn8192-v32000 files: bf16 $(du -sm "$work/hf" | cut -f1) MB," \
  "llm.c fp32 $(du -sm "$work/model.bin" | cut -f1) MB"
sync
"$build/bench_hf" llmc "$work/model.bin"
"$build/bench_hf" hf "$work/hf"
