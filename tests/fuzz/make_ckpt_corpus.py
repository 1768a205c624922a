#!/usr/bin/env python3
"""Writes the seeds of fuzz_ckpt_file and fuzz_trainer_state (tests/fuzz/corpus/ckpt_file/,
corpus/trainer_state/).

ckpt_file: small .ckpt files in InfiniTrain's layout (src/train/ckpt_file.h), valid ones of
every dtype and shape kind, then one malformed field each and truncations.

trainer_state: the trainer_state.json of a checkpoint saved by the GPT-2 app with
fuzz_trainer_state.c's configuration (tests/fixtures/gpt2, B=2 T=8 SGD, one step), so that its
files' sizes and CRC-32s match the checkpoint the harness saves; then InfiniTrain's own form
(no "infinitrain_c", no comma after "vocab_size") and variants. Rerun after a change to what a
save writes:
    python3 tests/fuzz/make_ckpt_corpus.py [BUILD_DIR]      (default: build)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
OUT = os.path.join(HERE, "corpus")

MAGIC, VERSION = 0x54504B43, 1
SIZE = {0: 1, 1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 8, 8: 8, 9: 2, 10: 2, 11: 4, 12: 8}
I64, BF16, FP32 = 8, 9, 11


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def entry(name, dtype, dims, data=None, nbytes=None, name_len=None):
    name = name.encode() if isinstance(name, str) else name
    numel = 1
    for d in dims:
        numel *= d
    if data is None:
        data = bytes((i * 37 + 11) & 0xFF for i in range(numel * SIZE.get(dtype, 1)))
    b = struct.pack("<I", len(name) if name_len is None else name_len) + name
    b += struct.pack("<bI", dtype, len(dims)) + struct.pack("<%dq" % len(dims), *dims)
    return b + struct.pack("<Q", len(data) if nbytes is None else nbytes) + data


def ckpt(entries, count=None, magic=MAGIC, version=VERSION):
    return struct.pack("<III", magic, version, len(entries) if count is None else count) + b"".join(entries)


def ckpt_file_seeds():
    w = lambda name, d: write("ckpt_file", name, d)
    two = [entry("b", FP32, [2, 3]), entry("a", I64, [])]
    sorted_two = ckpt(sorted(two, key=lambda e: e[4:5]))
    w("valid_two.ckpt", sorted_two)
    w("valid_unsorted.ckpt", ckpt(two))
    w("valid_no_entries.ckpt", ckpt([]))
    w("valid_every_dtype.ckpt", ckpt([entry("t%02d" % t, t, [2]) for t in range(13)]))
    w("valid_shapes.ckpt", ckpt([entry("empty", FP32, [3, 0]), entry("ndim8", BF16, [1, 1, 1, 1, 1, 1, 1, 2]),
                                 entry("scalar", I64, [])]))
    # an optimizer.ckpt's names: adam.m.N, adam.v.N, adam.t
    w("valid_optimizer_names.ckpt", ckpt([entry("adam.m.0", FP32, [4]), entry("adam.t", I64, []),
                                          entry("adam.v.0", FP32, [4])]))
    w("bad_magic.ckpt", ckpt(two, magic=0x434B5054))
    w("version2.ckpt", ckpt(two, version=2))
    w("count_too_large.ckpt", ckpt(two, count=3))
    w("name_length_0.ckpt", ckpt([entry("", FP32, [1])]))
    w("name_length_4097.ckpt", ckpt([entry("x" * 4097, 0, [1])]))
    w("nul_in_name.ckpt", ckpt([entry("a\0b", FP32, [1])]))
    w("dtype_13.ckpt", ckpt([entry("w", 13, [1], data=b"\0")]))
    w("ndim_9.ckpt", ckpt([entry("w", 0, [1] * 9)]))
    w("negative_dim.ckpt", ckpt([entry("w", FP32, [2, -1], data=b"")]))
    w("dims_overflow.ckpt", ckpt([entry("w", FP32, [1 << 40, 1 << 40], data=b"")]))
    w("nbytes_mismatch.ckpt", ckpt([entry("w", FP32, [2, 3], data=bytes(20))]))
    w("data_past_end.ckpt", ckpt([entry("w", FP32, [2, 3], nbytes=24, data=bytes(23))]))
    w("trailing_byte.ckpt", sorted_two + b"\0")
    w("duplicate_names.ckpt", ckpt([entry("dup", 0, [1]), entry("dup", FP32, [1])]))
    for cut in (0, 11, 12, 15, 17, 22, 30, 38, 50, len(sorted_two) - 1):
        w("truncated_%03d.ckpt" % cut, sorted_two[:cut])


def saved_state(build):
    """The trainer_state.json of a one-step save with fuzz_trainer_state.c's configuration."""
    fix = os.path.join(ROOT, "tests", "fixtures", "gpt2")
    tmp = tempfile.mkdtemp(prefix="it_make_ckpt_corpus_")
    try:
        subprocess.run([os.path.join(build, "gpt2"), "--llmc_filepath", os.path.join(fix, "tiny_gpt2.bin"),
                        "--input_bin", os.path.join(fix, "tiny_shard.bin"), "--batch_size", "2",
                        "--sequence_length", "8", "--optimizer", "adamw", "--num_iteration", "1", "--save", tmp,
                        "--save_interval", "1", "--quiet"], check=True)
        with open(os.path.join(tmp, "checkpoint_step_000001", "trainer_state.json"), "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(tmp)


def trainer_state_seeds(build):
    w = lambda name, d: write("trainer_state", name, d if isinstance(d, bytes) else d.encode())
    text = saved_state(build)
    state = json.loads(text)
    # the run's own paths are not part of the seed (the harness's differ anyway)
    for k in ("llmc_filepath", "input_bin"):
        state["infinitrain_c"]["flags"].pop(k, None)
    dump = lambda s: json.dumps(s, indent=2) + "\n"
    text = dump(state).encode()
    w("valid_saved.json", text)
    ours = state["infinitrain_c"]
    keys = ["n_layer", "n_head", "n_kv_head", "n_embd", "vocab_size", "global_step", "consumed_batches", "last_lr",
            "ddp_size", "tp_size", "sp_size", "pp_size"]
    infinitrain = "{\n" + "".join(
        '  "%s": %s%s\n' % (k, json.dumps(state[k]), "" if k in ("vocab_size", keys[-1]) else ",") for k in keys) + "}\n"
    w("infinitrain_no_comma.json", infinitrain)  # InfiniTrain's writer: no comma after vocab_size
    w("infinitrain_valid.json", dump({k: state[k] for k in keys}))
    w("infinitrain_step0.json", dump(dict({k: state[k] for k in keys}, global_step=0, consumed_batches=0)))
    w("infinitrain_minimal.json", '{"n_layer": 2, "n_head": 4, "n_kv_head": 4, "n_embd": 32, "vocab_size": 257}\n')
    w("no_kv_head.json", '{"n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 257}\n')
    w("infinitrain_crlf.json", infinitrain.replace("\n", "\r\n"))
    w("steps_as_reals.json", dump(dict(state, global_step=1.0, consumed_batches=1.0)))
    w("step_done.json", dump(dict(state, global_step=2)))
    w("wrong_n_layer.json", dump(dict(state, n_layer=3)))
    w("tp_size_2.json", dump(dict(state, tp_size=2)))
    w("ddp_size_2.json", dump(dict(state, ddp_size=2)))
    w("negative_step.json", dump(dict(state, global_step=-1)))
    w("step_not_integer.json", dump(dict(state, global_step="1")))
    w("duplicate_key.json", text.decode().replace('"n_head": 4,', '"n_head": 4, "n_head": 4,', 1))
    w("optimizer_adam.json", dump(dict(state, infinitrain_c=dict(ours, optimizer="adam"))))
    w("app_llama3.json", dump(dict(state, infinitrain_c=dict(ours, app="llama3"))))
    w("no_app.json", dump(dict(state, infinitrain_c={k: v for k, v in ours.items() if k != "app"})))
    w("no_files.json", dump(dict(state, infinitrain_c={k: v for k, v in ours.items() if k != "files"})))
    w("files_empty.json", dump(dict(state, infinitrain_c=dict(ours, files={}))))
    bad_crc = json.loads(json.dumps(ours))
    bad_crc["files"]["model.ckpt"]["crc32"] = "00000000"
    w("bad_crc.json", dump(dict(state, infinitrain_c=bad_crc)))
    bad_size = json.loads(json.dumps(ours))
    bad_size["files"]["model.ckpt"]["bytes"] += 1
    w("bad_size.json", dump(dict(state, infinitrain_c=bad_size)))
    missing = json.loads(json.dumps(ours))
    missing["files"]["gone.ckpt"] = {"bytes": 1, "crc32": "00000000"}
    w("missing_file.json", dump(dict(state, infinitrain_c=missing)))
    flags = json.loads(json.dumps(ours))
    flags["flags"]["learning_rate"] = "0.5"
    flags["flags"]["unknown_flag"] = 1
    w("changed_flags.json", dump(dict(state, infinitrain_c=flags)))
    w("not_object.json", "[1, 2, 3]\n")
    w("empty.json", "")
    w("truncated.json", text[: len(text) // 2])


if __name__ == "__main__":
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    for h in ("ckpt_file", "trainer_state"):
        shutil.rmtree(os.path.join(OUT, h), ignore_errors=True)
    ckpt_file_seeds()
    trainer_state_seeds(build)
