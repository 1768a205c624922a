#!/usr/bin/env python3
"""A LLaMA-3 style Hugging Face directory of random weights, for the benchmarks (numpy only).

    make_llama_hf.py OUT L C N_HEAD N_KV_HEAD FFN VOCAB BLOCK DTYPE SHARDS

DTYPE bf16 (by truncation: a benchmark) or f32; SHARDS files with an index when more than one.
Norm weights are ones, the rest N(0, 0.02) from a fixed seed. Used by bench/hf_bench.sh and
bench/cp_bench.sh."""
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
L, C, nh, nkv, F, V, T = map(int, sys.argv[2:9])
dtype, shards = sys.argv[9], int(sys.argv[10])
hd = C // nh
os.makedirs(out)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
       "num_attention_heads": nh, "num_key_value_heads": nkv, "num_hidden_layers": L, "vocab_size": V,
       "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
       "hidden_act": "silu", "torch_dtype": "bfloat16" if dtype == "bf16" else "float32"}
open(out + "/config.json", "w").write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
for l in range(L):
    p = "model.layers.%d." % l
    shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                   p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (nkv * hd, C),
                   p + "self_attn.v_proj.weight": (nkv * hd, C), p + "self_attn.o_proj.weight": (C, C),
                   p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                   p + "mlp.down_proj.weight": (C, F)})
names = sorted(shapes)
esize, tag = (2, "BF16") if dtype == "bf16" else (4, "F32")
rng = np.random.default_rng(1)
index, total = {}, 0
per = (len(names) + shards - 1) // shards
for k in range(shards):
    part = names[k * per:(k + 1) * per]
    fname = "model.safetensors" if shards == 1 else "model-%05d-of-%05d.safetensors" % (k + 1, shards)
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for n in part:
        b = esize * int(np.prod(shapes[n]))
        head[n] = {"dtype": tag, "shape": list(shapes[n]), "data_offsets": [off, off + b]}
        off += b
        index[n] = fname
    total += off
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(out + "/" + fname, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for n in part:
            if n.endswith("norm.weight"):
                w = np.ones(shapes[n], np.float32)
            else:
                w = rng.standard_normal(shapes[n], dtype=np.float32) * 0.02
            f.write((w.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "bf16" else w.astype("<f4").tobytes())
if shards > 1:
    open(out + "/model.safetensors.index.json", "w").write(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=2, sort_keys=True) + "\n")
