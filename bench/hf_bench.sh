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
/usr/bin/python3 - "$work/hf" <<'PY'
import json, os, struct, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out)
L, C, nh, nkv, F, V, T = 16, 2048, 32, 8, 8192, 32000, 2048
hd = C // nh
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
       "num_attention_heads": nh, "num_key_value_heads": nkv, "num_hidden_layers": L, "vocab_size": V,
       "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
       "hidden_act": "silu", "torch_dtype": "bfloat16"}
open(out + "/config.json", "w").write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
for l in range(L):
    p = "model.layers.%d." % l
    shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                   p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (nkv * hd, C),
                   p + "self_attn.v_proj.weight": (nkv * hd, C), p + "self_attn.o_proj.weight": (C, C),
                   p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C), p + "mlp.down_proj.weight": (C, F)})
names = sorted(shapes)
half = len(names) // 2
rng = np.random.default_rng(1)
index, total = {}, 0
for k, part in enumerate((names[:half], names[half:])):
    fname = "model-%05d-of-00002.safetensors" % (k + 1)
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for n in part:
        b = 2 * int(np.prod(shapes[n]))
        head[n] = {"dtype": "BF16", "shape": list(shapes[n]), "data_offsets": [off, off + b]}
        off += b
        index[n] = fname
    total += off
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(out + "/" + fname, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for n in part:
            w = rng.standard_normal(shapes[n], dtype=np.float32) * 0.02
            f.write((w.view(np.uint32) >> 16).astype("<u2").tobytes())  # bf16 by truncation: a bench
open(out + "/model.safetensors.index.json", "w").write(
    json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=2, sort_keys=True) + "\n")
PY
"$build/it-ckpt" from-hf "$work/hf" "$work/model.bin" >/dev/null
echo "HF_BENCH host=\"$cpu\" model=llama3-16L-2048-gqa32/8-ffn8192-v32000 files: bf16 $(du -sm "$work/hf" | cut -f1) MB," \
  "llm.c fp32 $(du -sm "$work/model.bin" | cut -f1) MB"
sync
"$build/bench_hf" llmc "$work/model.bin"
"$build/bench_hf" hf "$work/hf"
