#!/usr/bin/env bash
# Flash attention in training (--flash, on by default) against the composition it replaces
# (--flash=false, the reference), 10 steps each:
#   1. GPT-2 (from scratch, block size 1024) and LLaMA-3 with grouped kv heads (the tiny
#      fixture with its context raised to 1024: RoPE has no table in the file) at T = 256
#      (B = 4) and T = 1024 (B = 1): fp32 losses within 1e-5 per step; bf16 autocast within
#      1e-2 (flash does not round the probabilities to bf16 before P V; the composition does);
#   2. sim (device memory the host cannot read, asynchronous streams) bitwise cpu;
#   3. unchanged behaviour under TP=2 with SP, PP=2, recomputation and LoRA: each within 1e-5
#      of the same run composed; the precision checker's level-2 records name the same
#      operators in the same order.
# The kernel itself is checked against fp64 in tests/unit/test_flash_attention.c and against
# every backend in the conformance suite. Usage: flash.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
export OMP_NUM_THREADS=2
sanitized=false
grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && sanitized=true

g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3
# the tiny LLaMA-3 with max_seq_len (header slot 2) 1024: the weights do not depend on it
python3 - "$l/tiny_llama3.bin" "$tmp/llama_1k.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<i", b, 8, 1024)
open(sys.argv[2], "wb").write(b)
PY
gpt2=(--n_layer 2 --n_head 4 --n_embd 64 --block_size 1024 --vocab_size 257 --input_bin "$g/tiny_shard.bin"
  --num_iteration 10 --learning_rate 1e-3)
llama=(--llmc_filepath "$tmp/llama_1k.bin" --input_bin "$l/tiny_shard_u16.bin" --num_iteration 10
  --learning_rate 1e-3)
run() { # log, app, args...
  local log=$1 app=$2
  shift 2
  "$build/$app" "$@" --loss_log "$log" >"$log.out" 2>&1 || bad "$app $* exited $?: $(tail -3 "$log.out")"
}
pair() { # what, tol, app, args...: flash on against --flash=false
  local what=$1 tol=$2 app=$3
  shift 3
  local tag=${what//[^a-zA-Z0-9]/_}
  run "$tmp/$tag.on" "$app" "$@"
  run "$tmp/$tag.off" "$app" "$@" --flash=false
  within "$what: flash vs composed" "$tmp/$tag.on" "$tmp/$tag.off" "$tol"
}

if $sanitized; then # one case per mechanism
  pair "GPT-2 T=256" 1e-5 gpt2 "${gpt2[@]}" --batch_size 2 --sequence_length 256
  pair "LLaMA-3 GQA T=256" 1e-5 llama3 "${llama[@]}" --batch_size 2 --sequence_length 256
  echo "flash.sh (sanitizer build): $pass passed, $fail failed"
  [[ $fail -eq 0 ]]
  exit
fi

# 1. the models at two lengths, fp32 and bf16
for shape in "256 4" "1024 1"; do
  set -- $shape
  pair "GPT-2 T=$1" 1e-5 gpt2 "${gpt2[@]}" --batch_size "$2" --sequence_length "$1"
  pair "LLaMA-3 GQA T=$1" 1e-5 llama3 "${llama[@]}" --batch_size "$2" --sequence_length "$1"
done
pair "GPT-2 T=256 bf16" 1e-2 gpt2 "${gpt2[@]}" --batch_size 4 --sequence_length 256 --dtype bfloat16
pair "LLaMA-3 GQA T=256 bf16" 1e-2 llama3 "${llama[@]}" --batch_size 4 --sequence_length 256 --dtype bfloat16

# 2. sim bitwise cpu (both with flash)
run "$tmp/sim" gpt2 "${gpt2[@]}" --batch_size 4 --sequence_length 256 --device sim
if cmp -s "$tmp/sim" "$tmp/GPT_2_T_256.on"; then ok; else bad "GPT-2 T=256 with flash: sim differs from cpu"; fi

# 3. the same behaviour under the parallel layouts, recomputation, LoRA and the checker
fl=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10)
mrun() { # n, log, args...
  local n=$1 log=$2
  shift 2
  timeout 300 "${mpi[@]}" -np "$n" "$build/gpt2" "$@" --loss_log "$log" >"$log.out" 2>&1 ||
    bad "$n-rank gpt2 $* exited $?: $(tail -3 "$log.out")"
}
for par in "--tensor_parallel 2 --sequence_parallel" "--pipeline_parallel 2"; do
  # shellcheck disable=SC2086
  mrun 2 "$tmp/par_on" "${fl[@]}" $par
  # shellcheck disable=SC2086
  mrun 2 "$tmp/par_off" "${fl[@]}" $par --flash=false
  within "GPT-2 $par: flash vs composed" "$tmp/par_on" "$tmp/par_off" 1e-5
done
pair "LLaMA-3 recomputed" 1e-5 llama3 "${llama[@]}" --batch_size 4 --sequence_length 64 --activation_recompute
pair "GPT-2 LoRA" 1e-5 gpt2 "${fl[@]}" --lora_rank 4 --lora_alpha 8
pc() { # tag, flash: level-2 records of one step
  run "$tmp/pc_$1.log" gpt2 "${fl[@]}" --num_iteration 1 --flash="$2" \
    --precision_check "level=2,path=$tmp/pcdir_$1,format=simple"
  # the (kind, name) of every record, in order: what was recorded, not the values
  cat "$tmp"/pcdir_"$1"/*/precision_check_rank_0.tsv | grep -v '^#' | cut -f6,8 >"$tmp/pc_$1.ops"
}
pc on true
pc off false
if [[ -s $tmp/pc_on.ops ]] && cmp -s "$tmp/pc_on.ops" "$tmp/pc_off.ops"; then ok; else
  bad "the precision checker's operators differ with flash"
  diff "$tmp/pc_on.ops" "$tmp/pc_off.ops" | head
fi

echo "flash.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
