#!/usr/bin/env bash
# Flash attention (--flash, the default) against the composition (--flash=false), for
# `make bench`:
#   1. GPT-2 124M (d12, random weights, random tokens), B=4, T=1024 (its context), fp32: the
#      driver's peak used, the process's peak RSS and the median step time of steps 2..N for
#      each, and their ratios against the targets (peak at most 60% of the composition's, step
#      time no slower); then PyTorch (bench/peer_pytorch.py, Debian's python3-torch) on the same
#      weights and tokens, its peak RSS and step time, where torch imports (else a
#      FLASH_PEER_SKIPPED line says why). The weights are an llm.c checkpoint written with numpy
#      when it imports (ours and PyTorch's read it), else ours start from --model d12.
#   2. A LLaMA-3 style model (6 layers, 384 wide, 6 heads, 2 kv heads, vocabulary 512; random
#      weights), B=1: the peak used at T = 1k, 2k, 4k and 8k with flash and composed (flash
#      should grow linearly in T, the composition quadratically), then T = 32768 with flash
#      alone (one step), where the composition's probabilities alone would need 6 layers x 6
#      heads x T^2 x 4 bytes (two copies kept for backward: 2 x 155 GB).
# The attention kernel's GFLOP/s against the GEMM peak is bench_kernels' flash lines.
# Figures only; nothing is asserted. Every figure line names the host CPU.
# Usage: bench/flash_bench.sh [BUILD_DIR] [STEPS]   (STEPS for part 1, default 3)
#   FLASH_BENCH_LONG=0 skips the T = 32768 run (minutes on 2 cores).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-3}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu=${cpu:-unknown CPU}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# Random tokens (llm.c shard, uint16) and a random LLaMA-3 style checkpoint (llm.c layout of
# src/models/llama.c, version 3), both from the standard library, deterministic.
python3 - "$work" <<'PY'
import array, random, struct, sys
work = sys.argv[1]
random.seed(1234)
def shard(path, n, vocab):
    h = [0] * 256
    h[0], h[1], h[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *h))
        array.array("H", (random.randrange(vocab) for _ in range(n))).tofile(f)
shard(work + "/gpt2_tokens.bin", 4 * 1024 * 8 + 1, 50257)
shard(work + "/llama_tokens.bin", 32768 * 2 + 1, 512)
V, L, nh, nkv, C, T = 512, 6, 6, 2, 384, 32768
mult, multiple_of = 1.0, 256
F = int(2 * 4 * C // 3)
F = int(round(F * mult))
F = (F + multiple_of - 1) // multiple_of * multiple_of
kv = nkv * (C // nh)
h = [0] * 256
h[:10] = [20240803, 3, T, V, L, nh, nkv, C, struct.unpack("<i", struct.pack("<f", mult))[0], multiple_of]
h[10] = struct.unpack("<i", struct.pack("<f", 1e-5))[0]   # norm eps
h[11] = struct.unpack("<i", struct.pack("<f", 500000.0))[0]  # rope theta
sizes = [V * C] + [L * n for n in (C, (C + 2 * kv) * C, C * C, C, F * C, F * C, C * F)] + [C, V * C]
with open(work + "/llama.bin", "wb") as f:
    f.write(struct.pack("<256i", *h))
    for n in sizes:
        array.array("f", (random.gauss(0.0, 0.02) for _ in range(n))).tofile(f)
PY

# GPT-2 124M's initial weights as an llm.c checkpoint (version 3, fp32), N(0, 0.02), when
# numpy imports: both sides of the PyTorch comparison read it
gpt2_init=(--model d12)
if /usr/bin/python3 - "$work/gpt2_124m.bin" 2>/dev/null <<'PY'; then gpt2_init=(--llmc_filepath "$work/gpt2_124m.bin"); fi
import sys
import numpy as np
maxT, V, L, NH, C, Vp = 1024, 50257, 12, 12, 768, 50304
h = np.zeros(256, np.int32)
h[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
n = Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
w = np.random.default_rng(1234).normal(0.0, 0.02, n).astype(np.float32)
with open(sys.argv[1], "wb") as f:
    h.tofile(f)
    w.tofile(f)
PY

# run OUT CMD...: CMD's output to OUT, then its peak RSS (MB, getrusage of the child) appended
run_rss() {
  local out=$1
  shift
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT).returncode
print("RSS_PEAK_MB %.0f" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024), file=open(sys.argv[1], "a"))
sys.exit(r)' "$out" "$@"
}
rss() { sed -n 's/^RSS_PEAK_MB //p' "$1"; }

# the peak used (MB) and median step ms of steps 2.. from the step lines of a log
peak() { sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' "$1" | sort -n | tail -1; }
med() { sed -n 's/^step *\([0-9]*\)\/.*| (\([0-9.]*\) ms .*/\1 \2/p' "$1" | awk '$1 > 1 { print $2 }' | sort -n |
  awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'; }

echo "FLASH host=\"$cpu\" threads=$OMP_NUM_THREADS"
# ---- 1. GPT-2 124M at its context
for f in true false; do
  run_rss "$work/gpt2_$f.log" "$build/gpt2" "${gpt2_init[@]}" --input_bin "$work/gpt2_tokens.bin" --batch_size 4 \
    --sequence_length 1024 --num_iteration $((steps + 1)) --flash=$f ||
    { echo "FLASH_GPT2 flash=$f FAILED: $(tail -2 "$work/gpt2_$f.log")"; continue; }
  echo "FLASH_GPT2 model=d12 B=4 T=1024 flash=$f peak_used_mb=$(peak "$work/gpt2_$f.log")" \
    "rss_peak_mb=$(rss "$work/gpt2_$f.log") step_ms=$(med "$work/gpt2_$f.log")" \
    "loss1=$(sed -n 's/^step *1\/.*train loss \([0-9.]*\).*/\1/p' "$work/gpt2_$f.log")"
done
# PyTorch 1.13 on the same weights and tokens: its attention is the composition (torch 1.13's
# CPU _scaled_dot_product_attention is the math path, keeping the probabilities likewise)
if [ "${gpt2_init[0]}" != --llmc_filepath ]; then
  echo "FLASH_PEER_SKIPPED reason=numpy does not import for /usr/bin/python3 (Debian's python3-torch brings it)"
elif ! why=$(/usr/bin/python3 -c 'import torch' 2>&1); then
  echo "FLASH_PEER_SKIPPED reason=/usr/bin/python3 cannot import torch: $(echo "$why" | tail -n1)"
else
  root=$(cd "$(dirname "$0")/.." && pwd)
  run_rss "$work/peer.log" env OPENBLAS_NUM_THREADS="$OMP_NUM_THREADS" /usr/bin/python3 "$root/bench/peer_pytorch.py" \
    --checkpoint "$work/gpt2_124m.bin" --shard "$work/gpt2_tokens.bin" --case gpt2_124m_t1024 --B 4 --T 1024 \
    --warmup 1 --steps "$steps" --threads "$OMP_NUM_THREADS" || true
  if line=$(grep '^PEER ' "$work/peer.log"); then
    echo "FLASH_PEER model=d12 B=4 T=1024 torch=$(sed -n 's/.* torch=\([^ ]*\).*/\1/p' <<<"$line")" \
      "rss_peak_mb=$(rss "$work/peer.log") step_ms=$(sed -n 's/.* ms_median=\([^ ]*\).*/\1/p' <<<"$line")" \
      "loss1=$(sed -n 's/.* loss_check=\([^ ]*\).*/\1/p' <<<"$line") (steps 2..$((steps + 1)); attention composed)"
  else
    echo "FLASH_PEER_SKIPPED reason=peer_pytorch.py: $(tail -n2 "$work/peer.log" | tr '\n' ' ')"
  fi
fi
if [ -s "$work/gpt2_true.log" ] && [ -s "$work/gpt2_false.log" ]; then
  awk -v a="$(peak "$work/gpt2_true.log")" -v b="$(peak "$work/gpt2_false.log")" \
    -v s="$(med "$work/gpt2_true.log")" -v t="$(med "$work/gpt2_false.log")" 'BEGIN {
      if (b > 0 && t > 0) printf "FLASH_GPT2_RATIO peak=%.2f (target <= 0.60) step_time=%.2f (target <= 1.00)\n", a / b, s / t }'
fi

# ---- 2. memory against T, a LLaMA-3 style model
for T in 1024 2048 4096 8192; do
  for f in true false; do
    "$build/llama3" --llmc_filepath "$work/llama.bin" --input_bin "$work/llama_tokens.bin" --batch_size 1 \
      --sequence_length $T --num_iteration 1 --flash=$f >"$work/llama_${T}_$f.log" 2>&1 ||
      { echo "FLASH_MEMORY T=$T flash=$f FAILED: $(tail -1 "$work/llama_${T}_$f.log")"; continue; }
    echo "FLASH_MEMORY model=llama3-6L-384-gqa6/2 B=1 T=$T flash=$f peak_used_mb=$(peak "$work/llama_${T}_$f.log")" \
      "step_ms=$(sed -n 's/.*| (\([0-9.]*\) ms .*/\1/p' "$work/llama_${T}_$f.log" | tail -1)"
  done
done
if [ "${FLASH_BENCH_LONG:-1}" != 0 ]; then
  "$build/llama3" --llmc_filepath "$work/llama.bin" --input_bin "$work/llama_tokens.bin" --batch_size 1 \
    --sequence_length 32768 --num_iteration 1 >"$work/llama_32k.log" 2>&1 &&
    echo "FLASH_LONG model=llama3-6L-384-gqa6/2 B=1 T=32768 flash=true peak_used_mb=$(peak "$work/llama_32k.log")" \
      "step_ms=$(sed -n 's/.*| (\([0-9.]*\) ms .*/\1/p' "$work/llama_32k.log" | tail -1)" ||
    echo "FLASH_LONG T=32768 FAILED: $(tail -2 "$work/llama_32k.log")"
fi
