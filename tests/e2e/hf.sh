#!/usr/bin/env bash
# Hugging Face models through the apps and it-ckpt (tests/fixtures/hf; test_hf checks the
# logits, the fixtures' losses and the byte round trips on one rank):
#   1. the same weights from the HF directory or from the llm.c file it-ckpt from-hf writes
#      train bitwise the same (--loss_log), GPT-2 and LLaMA-3;
#   2. --hf_model under TP=2, PP=2 (each rank reading its slices) and DP=2 with ZeRO-2 against
#      one rank within 1e-5 per step, and --output_hf from TP=2 and PP=2 ranks (no step) byte-identical to what
#      one rank writes;
#   3. it-ckpt to-hf of a checkpoint directory (shaped as its run's --hf_model), and the refusals a user meets first: the wrong
#      app, --hf_model with --llmc_filepath, --output_hf on --hf_model's directory;
#   4. LoRA adapters saved in PEFT's form and loaded by the next run (--lora_load_path DIR),
#      which saves them again, with no step between: the same bytes.
# In a sanitizer build: 1 (LLaMA-3) and the TP=2 load.
# Usage: hf.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
sanitized=false
grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && sanitized=true
F=$src/tests/fixtures
common=(--batch_size 4 --sequence_length 32 --num_iteration 10 --optimizer adamw --learning_rate 0.001
  --weight_decay 0.1 --grad_clip 0)

# 1. HF directory and its llm.c file: bitwise the same training
for m in llama3 gpt2; do
  $sanitized && [[ $m == gpt2 ]] && continue
  shard=$F/llama3/tiny_shard_u16.bin
  [[ $m == gpt2 ]] && shard=$F/gpt2/tiny_shard.bin
  "$build/it-ckpt" from-hf "$F/hf/$m" "$tmp/$m.bin" >/dev/null || bad "it-ckpt from-hf $m exited $?"
  "$build/$m" --hf_model "$F/hf/$m" --input_bin "$shard" "${common[@]}" --loss_log "$tmp/$m.hf" >"$tmp/$m.hf.out" 2>&1 ||
    bad "$m --hf_model exited $?: $(tail -2 "$tmp/$m.hf.out")"
  "$build/$m" --llmc_filepath "$tmp/$m.bin" --input_bin "$shard" "${common[@]}" --loss_log "$tmp/$m.llmc" \
    >"$tmp/$m.llmc.out" 2>&1 || bad "$m --llmc_filepath exited $?: $(tail -2 "$tmp/$m.llmc.out")"
  same "$m from HF vs from its llm.c file" "$tmp/$m.hf" "$tmp/$m.llmc"
done

# 2. tensor and pipeline parallel loads; --output_hf from two TP ranks
require_mpirun "the TP/PP loads"
shard=$F/llama3/tiny_shard_u16.bin
one=(--hf_model "$F/hf/llama3" --input_bin "$shard" "${common[@]}")
"$build/llama3" "${one[@]}" --loss_log "$tmp/one" >"$tmp/one.out" 2>&1 ||
  bad "llama3 --hf_model, one rank, exited $?: $(tail -2 "$tmp/one.out")"
for par in "--tensor_parallel 2" "--pipeline_parallel 2"; do
  $sanitized && [[ $par == --pipeline* ]] && continue
  tag=${par//[- ]/}
  # shellcheck disable=SC2086
  timeout 300 "${mpi[@]}" -np 2 "$build/llama3" "${one[@]}" $par --loss_log "$tmp/$tag" \
    >"$tmp/$tag.out" 2>&1 || bad "llama3 --hf_model $par exited $?: $(tail -3 "$tmp/$tag.out")"
  within "llama3 --hf_model $par vs one rank" "$tmp/$tag" "$tmp/one" 1e-5
done
# data parallel with ZeRO-2: each rank reads the whole model; against one rank accumulating 2
if ! $sanitized; then
  timeout 300 "${mpi[@]}" -np 2 "$build/llama3" "${one[@]}" --zero_stage 2 --loss_log "$tmp/z2" >"$tmp/z2.out" 2>&1 ||
    bad "llama3 --hf_model DP=2 ZeRO-2 exited $?: $(tail -3 "$tmp/z2.out")"
  "$build/llama3" "${one[@]}" --total_batch_size 256 --loss_log "$tmp/acc2" >"$tmp/acc2.out" 2>&1 ||
    bad "llama3 --hf_model accumulation 2 exited $?"
  within "llama3 --hf_model DP=2 ZeRO-2 vs one rank accumulating 2" "$tmp/z2" "$tmp/acc2" 1e-5
fi

# HF -> TP=2 or PP=2 ranks -> HF, no step between: the fixture's weights written back byte for
# byte as one rank writes them (it-ckpt to-hf of the llm.c file of section 1)
"$build/it-ckpt" from-hf "$F/hf/llama3" "$tmp/l.bin" >/dev/null && "$build/it-ckpt" to-hf "$tmp/l.bin" "$tmp/ref" >/dev/null ||
  bad "it-ckpt from-hf / to-hf of llama3"
for par in "--tensor_parallel 2" "--pipeline_parallel 2"; do
  $sanitized && [[ $par == --pipeline* ]] && continue
  # shellcheck disable=SC2086
  timeout 300 "${mpi[@]}" -np 2 "$build/llama3" "${one[@]}" $par --num_iteration 0 --lr_decay_iters 1 --output_hf "$tmp/zero" \
    >"$tmp/zero.out" 2>&1 || bad "llama3 --output_hf $par, no step, exited $?: $(tail -3 "$tmp/zero.out")"
  if cmp -s "$tmp/zero/model.safetensors" "$tmp/ref/model.safetensors" && cmp -s "$tmp/zero/config.json" "$tmp/ref/config.json"
  then
    echo "--output_hf from $par: byte-identical to one rank's"
    ok
  else bad "--output_hf from $par differs from one rank's"; fi
  rm -rf "$tmp/zero"
done

# 3. a checkpoint directory to HF; the refusals
if ! $sanitized; then
  "$build/llama3" "${one[@]}" --num_iteration 2 --save "$tmp/ck" --save_interval 2 >/dev/null 2>&1 &&
    "$build/it-ckpt" to-hf "$tmp/ck/checkpoint_step_000002" "$tmp/ck_hf" >/dev/null &&
    "$build/llama3" --hf_model "$tmp/ck_hf" --input_bin "$shard" --batch_size 4 --sequence_length 32 --num_iteration 1 \
      --quiet >/dev/null 2>&1 && ok || bad "it-ckpt to-hf of a checkpoint directory, then --hf_model on it"
  expect() { # WHAT STATUS PATTERN CMD...
    local what=$1 want=$2 pat=$3
    shift 3
    "$@" >"$tmp/x.out" 2>&1
    local rc=$?
    if [[ $rc -eq $want ]] && grep -q -- "$pat" "$tmp/x.out"; then ok; else bad "$what: exit $rc, $(cat "$tmp/x.out")"; fi
  }
  expect "an llama model in the gpt2 app" 2 "a llama3 model; train it with the llama3 app" \
    "$build/gpt2" --hf_model "$F/hf/llama3" --input_bin "$shard"
  expect "--hf_model with --llmc_filepath" 2 "give one model to start from" \
    "$build/llama3" --hf_model "$F/hf/llama3" --llmc_filepath "$tmp/llama3.bin" --input_bin "$shard"
  expect "--output_hf on the input" 2 "is --hf_model's directory" \
    "$build/llama3" --hf_model "$F/hf/llama3" --output_hf "$F/hf/llama3" --input_bin "$shard"
  expect "a directory without a model" 2 "config.json: cannot open" \
    "$build/llama3" --hf_model "$tmp" --input_bin "$shard"
fi
# 4. LoRA adapters in PEFT's form: saved by one run, resumed by the next with --lora_load_path
lora=(--hf_model "$F/hf/llama3" --input_bin "$shard" --batch_size 4 --sequence_length 32 --optimizer adamw
  --learning_rate 0.01 --lora_rank 4 --lora_alpha 8)
"$build/llama3" "${lora[@]}" --num_iteration 3 --lora_save_path "$tmp/peft" --lora_save_format peft >"$tmp/p1.out" 2>&1 &&
  "$build/llama3" "${lora[@]}" --num_iteration 0 --lr_decay_iters 1 --lora_load_path "$tmp/peft" \
    --lora_save_path "$tmp/peft2" --lora_save_format peft >"$tmp/p2.out" 2>&1 &&
  cmp -s "$tmp/peft/adapter_model.safetensors" "$tmp/peft2/adapter_model.safetensors" && ok ||
  bad "PEFT adapters: saved, loaded and saved again differ: $(tail -n 2 "$tmp/p1.out" "$tmp/p2.out")"
echo "hf.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
