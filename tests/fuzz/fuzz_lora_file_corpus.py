#!/usr/bin/env python3
"""Seeds for fuzz_lora_file (tests/fuzz/corpus/lora_file/): adapter files in InfiniTrain's
format for the harness's model (GPT-2, C 8, L 2, rank-2 adapters on c_attn,c_proj), one valid
and a few near misses. Run: /usr/bin/python3 tests/fuzz/fuzz_lora_file_corpus.py"""

import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "lora_file")
C, L, R = 8, 2, 2
SHAPES = {"attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "mlp.c_proj": (C, 4 * C)}


def tensors(rank=R):
    out = {}
    for l in range(L):
        for mod, (o, i) in SHAPES.items():
            out["transformer.h.%d.%s.lora_A" % (l, mod)] = (rank, i)
            out["transformer.h.%d.%s.lora_B" % (l, mod)] = (o, rank)
    return out


def encode(ts, count=None, version=1, shuffle=False):
    names = sorted(ts)
    if shuffle:
        names = names[::-1]
    b = struct.pack("<III", 0x4C4F5241, version, len(names) if count is None else count)
    for k, name in enumerate(names):
        shape = ts[name]
        b += struct.pack("<I", len(name)) + name.encode() + struct.pack("<Iqq", 2, *shape)
        b += b"".join(struct.pack("<f", 0.01 * ((k * 7 + j) % 13 - 6)) for j in range(shape[0] * shape[1]))
    return b


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "valid.bin": encode(tensors()),
        "valid-reversed.bin": encode(tensors(), shuffle=True),
        "rank4.bin": encode(tensors(4)),
        "count-short.bin": encode(tensors(), count=11),
        "version2.bin": encode(tensors(), version=2),
        "truncated.bin": encode(tensors())[:-7],
        "header-only.bin": struct.pack("<III", 0x4C4F5241, 1, 0),
    }
    for name, b in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
