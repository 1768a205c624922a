#!/usr/bin/env bash
# LoRA through the gpt2 app: 2 ranks (DDP, and ZeRO-1) reproduce one rank with accumulation 2
# BITWISE, all-reducing only the adapters' gradients (the bytes printed); --device sim is
# bitwise --device cpu; the written adapters restart a run; --lora_merge_output trains like any
# llm.c checkpoint; bad adapter files and LoRA-only flags without --lora_rank stop with a
# message naming the cause. Checkpoints of a LoRA run: lora_ckpt.sh.
# Usage: lora.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
export OMP_NUM_THREADS=1 # one summation order in every process (bitwise comparisons)

g=$src/tests/fixtures/gpt2
run=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --total_batch_size 256 --num_iteration 4 --optimizer adamw --learning_rate 0.001 --lora_rank 4
  --lora_target_modules c_attn,c_proj --lora_load_path "$src/tests/fixtures/lora/gpt2_7.init.bin")

same() { # name, a, b: identical loss logs
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok; else bad "$1: $(paste "$2" "$3" 2>/dev/null | head -3)"; fi
}
refuse() { # name, expected message, args...: exit 2 with the message
  local name=$1 want=$2
  shift 2
  "$build/gpt2" "$@" >"$tmp/r.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/r.out"; then ok; else bad "$name: exit $rc: $(tail -2 "$tmp/r.out")"; fi
}

"$build/gpt2" "${run[@]}" --loss_log "$tmp/cpu.txt" --lora_save_path "$tmp/a.bin" --lora_merge_output "$tmp/m.bin" \
  >"$tmp/cpu.out" 2>&1 || bad "cpu run: $(tail -3 "$tmp/cpu.out")"
grep -q "^trainable params: 2,816 || all params: 37,536 || trainable%: 7.5021$" "$tmp/cpu.out" && ok ||
  bad "trainable line: $(grep trainable "$tmp/cpu.out")"
"$build/gpt2" "${run[@]}" --device sim --loss_log "$tmp/sim.txt" --quiet >"$tmp/sim.out" 2>&1 ||
  bad "sim run: $(tail -3 "$tmp/sim.out")"
same "sim vs cpu" "$tmp/cpu.txt" "$tmp/sim.txt"

# the written adapters and the merged checkpoint: step 1 of a run from either is the same
"$build/gpt2" "${run[@]}" --lora_load_path "$tmp/a.bin" --num_iteration 1 --total_batch_size 128 \
  --loss_log "$tmp/from_a.txt" --quiet >"$tmp/fa.out" 2>&1 || bad "restart from adapters: $(tail -3 "$tmp/fa.out")"
"$build/gpt2" --llmc_filepath "$tmp/m.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32 \
  --num_iteration 1 --loss_log "$tmp/from_m.txt" --quiet >"$tmp/fm.out" 2>&1 || bad "merged: $(tail -3 "$tmp/fm.out")"
la=$(cut -d' ' -f2 "$tmp/from_a.txt" 2>/dev/null) lm=$(cut -d' ' -f2 "$tmp/from_m.txt" 2>/dev/null)
# merged W + s B A rounds once per weight where the adapted forward rounds its two products apart
awk -v a="$la" -v b="$lm" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6) }' && ok ||
  bad "merged loss $lm vs adapted $la"

if command -v mpirun >/dev/null 2>&1; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS)
  . "$src/tests/e2e/mpi_asan.bash" # the sanitizer build's rank setup
  mpi_asan_setup
  "${mpi[@]}" -np 2 "$build/gpt2" "${run[@]}" --loss_log "$tmp/ddp.txt" >"$tmp/ddp.out" 2>&1 ||
    bad "ddp run: $(tail -3 "$tmp/ddp.out")"
  same "ddp 2 ranks vs 1 rank accum 2" "$tmp/cpu.txt" "$tmp/ddp.txt"
  # 2 layers x (c_attn 4*32 + 96*4, attn.c_proj 4*32 + 32*4, mlp.c_proj 4*128 + 32*4) floats
  grep -q "DDP all-reduces 11264 bytes of adapter gradients per step" "$tmp/ddp.out" && ok ||
    bad "ddp bytes: $(grep -i 'all-reduces' "$tmp/ddp.out")"
  "${mpi[@]}" -np 2 "$build/gpt2" "${run[@]}" --zero_stage 1 --loss_log "$tmp/zero.txt" >"$tmp/zero.out" 2>&1 ||
    bad "zero run: $(tail -3 "$tmp/zero.out")"
  same "zero-1 2 ranks vs 1 rank accum 2" "$tmp/cpu.txt" "$tmp/zero.txt"
else
  echo "note: mpirun not found; the data-parallel LoRA checks did not run"
fi

refuse "shape" "tensor 'transformer.h.0.attn.c_attn.lora_A': shape [4, 32] in the file, the model's is [8, 32]" \
  "${run[@]}" --lora_rank 8 --lora_load_path "$tmp/a.bin"
refuse "targets" "holds 12 tensors, the model has 8" "${run[@]}" --lora_target_modules c_attn,attn.c_proj \
  --lora_load_path "$tmp/a.bin"
printf 'LORX' >"$tmp/bad.bin"
refuse "magic" "shorter than the 12-byte LoRA header" "${run[@]}" --lora_load_path "$tmp/bad.bin"
refuse "no rank" "needs --lora_rank R > 0 (LoRA is off)" "${run[@]}" --lora_rank 0 --lora_save_path "$tmp/x.bin"
refuse "no match" "matches no linear layer" "${run[@]}" --lora_target_modules c_fc2

echo "lora.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
