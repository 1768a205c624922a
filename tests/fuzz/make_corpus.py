#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora, tests/fuzz/corpus/<harness>/, from tests/fixtures.

Valid seeds are the fixtures shrunk to tiny shapes (the header's shape fields changed, the
weights the first floats of the fixture's own, the shards' first tokens), so that each is a few
KB and libFuzzer's inputs stay small; then a few malformed variants of each. Inputs that made a
fuzzer report a finding are named regress-*; test_bad_inputs.c loads each of them. Standard library only:
    python3 tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
OUT = os.path.join(HERE, "corpus")


def fixture(*parts):
    with open(os.path.join(FIX, *parts), "rb") as f:
        return f.read()


def header(fields):
    h = [0] * 256
    for i, v in fields.items():
        h[i] = v
    return struct.pack("<256i", *h)


def f32bits(x):
    return struct.unpack("<i", struct.pack("<f", x))[0]


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def with_field(data, i, v):
    return data[: 4 * i] + struct.pack("<i", v) + data[4 * i + 4 :]


# ---- GPT-2: block 4, V 5 padded to 8, L 1, 2 heads, C 4 -----------------------------------------
def gpt2_params(T, V, Vp, L, C):
    return Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def gpt2_seeds():
    src = fixture("gpt2", "tiny_gpt2.bin")
    h = list(struct.unpack("<256i", src[:1024]))
    T, V, L, nh, C, Vp = 4, 5, 1, 2, 4, 8
    h[2:8] = [T, V, L, nh, C, Vp]
    n = gpt2_params(T, V, Vp, L, C)
    ok = struct.pack("<256i", *h) + src[1024 : 1024 + 4 * n]
    w = lambda name, d: write("gpt2_ckpt", name, d)
    w("valid_tiny.bin", ok)
    w("truncated.bin", ok[:1500])
    w("header_only.bin", ok[:1024])
    w("trailing_byte.bin", ok + b"\0")
    w("bad_magic.bin", with_field(ok, 0, 20240803))
    w("version5_bf16.bin", with_field(ok, 1, 5))
    w("heads_not_dividing.bin", with_field(ok, 5, 3))
    w("padded_below_vocab.bin", with_field(ok, 7, 4))
    # fuzz_gpt2_ckpt's first finding: a header field out of range came back as IT_ERR_INVALID_ARG
    w("regress-header-field-status.bin", with_field(ok, 4, -1))
    w("short_header.bin", ok[:100])


# ---- LLaMA-3: block 4, V 6, L 1, 2 heads, 1 kv head, C 4, H 12 ----------------------------------
def llama3_hidden(C, mult, multiple_of):
    h = 4 * C
    h = 2 * h // 3
    h = int(struct.unpack("<f", struct.pack("<f", h * mult))[0] + 0.5)
    return (h + multiple_of - 1) // multiple_of * multiple_of


def llama3_seeds():
    src = fixture("llama3", "tiny_llama3.bin")
    h = list(struct.unpack("<256i", src[:1024]))
    T, V, L, nh, nkv, C = 4, 6, 1, 2, 1, 4
    h[2:8] = [T, V, L, nh, nkv, C]
    h[8], h[9] = f32bits(1.0), 4  # ffn_dim_multiplier, multiple_of
    H = llama3_hidden(C, 1.0, 4)
    kvd = nkv * (C // nh)
    n = V * C + L * (C + (C + 2 * kvd) * C + C * C + C + 3 * H * C) + C + V * C
    ok = struct.pack("<256i", *h) + src[1024 : 1024 + 4 * n]
    w = lambda name, d: write("llama3_ckpt", name, d)
    w("valid_tiny.bin", ok)
    w("valid_unscaled_rope.bin", with_field(ok, 12, 0))
    w("truncated.bin", ok[:1100])
    w("bad_version.bin", with_field(ok, 1, 2))
    w("kv_heads_not_dividing.bin", with_field(ok, 6, 3))
    w("odd_head_dim.bin", with_field(with_field(ok, 5, 4), 7, 4))  # hd = 1
    w("nan_eps.bin", with_field(ok, 10, 0x7FC00000))
    w("zero_multiplier.bin", with_field(ok, 8, 0))
    w("huge_block.bin", with_field(ok, 2, 1 << 30))
    # fuzz_llama3_ckpt: block_size 2^20 used to build RoPE tables for every position at load
    w("regress-rope-block-2pow20.bin", with_field(ok, 2, 1 << 20))
    w("gpt2_magic.bin", with_field(ok, 0, 20240326))


# ---- Mixtral: block 4, V 6, L 1, 2 heads, 1 kv head, C 4, 2 experts, top-1, H 4 -----------------
def mixtral_seeds():
    src = fixture("mixtral", "tiny_mixtral.bin")
    h = list(struct.unpack("<256i", src[:1024]))
    T, V, L, nh, nkv, C, E, k, H = 4, 6, 1, 2, 1, 4, 2, 1, 4
    h[2:9] = [T, V, L, nh, nkv, C, E]
    h[15], h[16] = k, H
    kvd = nkv * (C // nh)
    n = V * C + L * (C + C * C + 2 * kvd * C + C * C + C + E * C + E * 3 * H * C) + C + V * C
    ok = struct.pack("<256i", *h) + src[1024 : 1024 + 4 * n]
    w = lambda name, d: write("mixtral_ckpt", name, d)
    w("valid_tiny.bin", ok)
    w("valid_top2.bin", with_field(ok, 15, 2))
    w("topk_above_experts.bin", with_field(ok, 15, 3))
    w("zero_experts.bin", with_field(ok, 8, 0))
    w("many_experts.bin", with_field(ok, 8, 1 << 20))
    w("negative_hidden.bin", with_field(ok, 16, -4))
    w("trailing.bin", ok + b"\1\2\3\4")
    w("llama3_magic.bin", with_field(ok, 0, 20240803))


# ---- token shards ------------------------------------------------------------------------------
def shard_seeds():
    u16 = fixture("gpt2", "tiny_shard.bin")
    u32 = fixture("llama3", "tiny_shard_u32.bin")
    w = lambda name, d: write("shard", name, d)

    # Header bytes 12..16 are unused by the format; the harness takes the loader's B-1, T-1,
    # vocab-1 (2 bytes) and world-1 from them.
    def hdr(magic, count, B=2, T=8, vocab=257, world=1):
        h = bytearray(header({0: magic, 1: 1, 2: count}))
        h[12], h[13] = B - 1, T - 1
        h[14:16] = struct.pack("<H", vocab - 1)
        h[16] = world - 1
        return bytes(h)

    w("u16_64.bin", hdr(20240520, 64) + u16[1024 : 1024 + 128])
    w("u16_64_small_vocab.bin", hdr(20240520, 64, B=1, T=4, vocab=100, world=2) + u16[1024 : 1024 + 128])
    w("u32_48.bin", hdr(20240801, 48, B=3, T=3, vocab=300) + u32[1024 : 1024 + 192])
    w("u32_big_ids.bin", hdr(20240801, 4, B=1, T=1) + struct.pack("<4I", 0, 65536, 0xFFFFFFFF, 7))
    w("empty_shard.bin", hdr(20240520, 0))
    w("claims_2g_tokens.bin", hdr(20240520, 0x7FFFFFFF) + u16[1024:1088])
    w("negative_count.bin", hdr(20240801, -1))
    w("truncated.bin", hdr(20240520, 64) + u16[1024:1100])
    w("trailing.bin", hdr(20240520, 4) + u16[1024:1033])
    w("bad_version.bin", with_field(hdr(20240520, 4), 1, 2) + u16[1024:1032])
    w("short_header.bin", u16[:512])


# ---- tokenizer files ---------------------------------------------------------------------------
def tokenizer_seeds():
    w = lambda name, d: write("tokenizer", name, d)

    def tok(magic, version, tokens, eot=None, vocab=None):
        f = {0: magic, 1: version, 2: len(tokens) if vocab is None else vocab}
        if version == 2:
            f[3] = len(tokens) - 1 if eot is None else eot
        return header(f) + b"".join(bytes([len(t)]) + t for t in tokens)

    byte_tokens = [bytes([b]) for b in range(256)] + [b"<|endoftext|>"]
    w("bytes_v2.bin", tok(20240328, 2, byte_tokens))
    small = [b"a", b"bc", b" the", b"\xc3\xa9", b"<|endoftext|>"]
    w("small_v2.bin", tok(20240328, 2, small))
    w("small_llama3_v2.bin", tok(20240801, 2, small, eot=0))
    w("v1_eot_outside.bin", tok(20240328, 1, small))
    w("zero_length_token.bin", tok(20240328, 2, [b"a", b"", b"c"]))
    w("vocab_beyond_file.bin", tok(20240328, 2, small, vocab=1 << 30))
    w("truncated.bin", tok(20240328, 2, small)[:1030])
    w("trailing.bin", tok(20240328, 2, small) + b"\x01")
    w("bad_magic.bin", tok(20240326, 2, small))


# ---- BPE: '0' + encoder.json, '1' + vocab.bpe, '2' + text (fuzz_bpe.c) ---------------------------
def bpe_seeds():
    w = lambda name, d: write("bpe", name, d)
    enc = (
        '{"a": 0, "b": 1, "c": 2, "\\u0120": 3, "ab": 4, "abc": 5, "\\u0120ab": 6,\n'
        ' "bc": 7, "\u00c3": 8, "\u00a9": 9, "aa": 10, "bcb": 11, "\u00c3\u00a9": 12,\n'
        ' "\u010a": 13, "\\"": 14, "\\\\": 15, "\\u00c4\\u0122": 17}\n'
    ).encode()
    w("encoder_small.json", b"0" + enc)
    w("encoder_escapes.json", b"0" + b'{"\\ud83d\\ude00": 1, "\\/\\b\\f\\n\\r\\t": 2, "x":3}')
    w("encoder_empty_object.json", b"0{}")
    # fuzz_bpe's first finding: one id of 2^31-2 allocated an 8 GiB id table
    w("regress-huge-id.json", b"0" + b'{"a": 2147483646}')
    w("encoder_duplicate_id.json", b"0" + b'{"a": 1, "b": 1}')
    merges = "#version: 0.2\na b\nab c\n\u0120 ab\nbc b\nb c\na  a\n\u00c3 \u00a9\n".encode()
    w("merges_small.bpe", b"1" + merges)
    w("merges_crlf_blank.bpe", b"1" + "#version: 0.2\r\n\u0120 t\r\n\r\nh e\r\n".encode())
    w("merges_three_parts.bpe", b"1" + b"#version: 0.2\na b c\n")
    w("merges_no_version.bpe", b"1" + b"t h")
    texts = []
    for line in fixture("bpe", "expected.txt").decode().splitlines():
        if line.startswith("text "):
            texts.append(bytes.fromhex(line[5:]))
    for i, t in enumerate(texts[:16]):
        w("text_%02d.txt" % i, b"2" + t)
    w("text_invalid_utf8.txt", b"2" + b"a\xff\xfe \xc3 \xe4\xb8 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf end")
    w("text_merges.txt", b"2" + b"the  there's 1212 aaaaa bcbc bcb \xc3\xa9\xe4\xb8\xad\n\n\n\0\xff")
    w("text_long_runs.txt", b"2" + b"a" * 700 + b" " * 300 + b"=" * 300 + b"\n" * 100 + b"1" * 200 + b" the" * 50)


# ---- flags: one argument per line (fuzz_flags.c) -------------------------------------------------
def flags_seeds():
    w = lambda name, d: write("flags", name, "\n".join(d).encode())
    w("cli_base.txt", ["--llmc_filepath", "tiny_gpt2.bin", "--input_bin", "tiny_shard.bin", "--batch_size", "4",
                       "--sequence_length", "32", "--num_iteration", "10"])
    w("cli_eq.txt", ["--optimizer=adamw", "--learning_rate=0.001", "--weight_decay=0.1", "--total_batch_size=512",
                     "--lr_decay_style=cosine", "--lr_warmup_iters=2", "--min_lr=1e-5", "--grad_clip=1.0"])
    w("cli_model.txt", ["--model", "d12", "--n_layer", "2", "--n_head", "4", "--n_embd", "32", "--block_size", "64",
                        "--vocab_size", "257", "--dtype", "float32", "--seed", "7", "--device", "cpu:0"])
    w("cli_misc.txt", ["--tokenizer_bin", "t.bin", "--freq_generate_txt", "5", "--text_length", "16",
                       "--output_checkpoint", "out.bin", "--log_interval", "1", "--max_memory_mb", "64",
                       "--moe_aux_loss_coeff", "0.01", "--backend_report", "--quiet"])
    w("bad_number.txt", ["--batch_size", "4x"])
    w("bad_empty.txt", ["--learning_rate", ""])
    w("bad_overflow.txt", ["--learning_rate", "1e999"])
    w("bad_negative.txt", ["--num_iteration", "-1"])
    w("bad_unknown.txt", ["--no_such_flag", "1"])
    w("bad_missing_value.txt", ["--seed"])
    w("bad_dtype.txt", ["--dtype", "bf16"])
    w("help.txt", ["--batch_size", "2", "--help"])


if __name__ == "__main__":
    gpt2_seeds()
    llama3_seeds()
    mixtral_seeds()
    shard_seeds()
    tokenizer_seeds()
    bpe_seeds()
    flags_seeds()
    total = 0
    for root, _, files in os.walk(OUT):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print("corpus: %d bytes in %s" % (total, OUT))
