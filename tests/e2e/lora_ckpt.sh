#!/usr/bin/env bash
# LoRA runs through --save / --load: 6 steps straight against 3 steps, a checkpoint, and 3
# resumed steps print BITWISE the same step losses (%.17g strings from --loss_log) and write
# byte-identical adapter files (--lora_save_path), on 1 rank (GPT-2 with accumulation 2,
# LLaMA-3) and on 2 ranks under ZeRO-1 (whose sharded adapter moments are gathered into the
# checkpoint); a 2-rank checkpoint resumes on 1 rank. The checkpoint holds the adapters in
# model.ckpt, their moments in optimizer.ckpt and LoRA's settings in trainer_state.json; a
# --load whose LoRA settings differ stops with exit 2 and one line naming both.
# Usage: lora_ckpt.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
export OMP_NUM_THREADS=1 # one summation order in every process (bitwise comparisons)

mpi=()
if command -v mpirun >/dev/null 2>&1; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS)
  . "$src/tests/e2e/mpi_asan.bash" # the sanitizer build's rank setup
  mpi_asan_setup
fi

g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3 f=$src/tests/fixtures/lora
# from adapters with non-zero B, so that every LoRA path carries state from the first step;
# a warmup + cosine schedule over 6 steps (the 3-step run too), so that the scheduler's state
# matters
gpt2=(gpt2 --llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --total_batch_size 256 --optimizer adamw --learning_rate 0.001 --lr_warmup_iters 2 --lr_decay_style cosine
  --lr_decay_iters 6 --lora_rank 4 --lora_alpha 8 --lora_target_modules c_attn,c_proj)
gpt2_base=("${gpt2[@]}") # adapters from --seed: the refusals below change their shapes
gpt2+=(--lora_load_path "$f/gpt2_7.init.bin")
llama=(llama3 --llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" --batch_size 4
  --sequence_length 32 --optimizer adamw --learning_rate 0.001 --lora_rank 8 --lora_alpha 16
  --lora_load_path "$f/llama3_default.init.bin")

run() { # np (0: no mpirun), out, app, args...: one run, its stdout and stderr in out
  local np=$1 out=$2
  shift 2
  local cmd=("$build/$1" "${@:2}")
  ((np > 0)) && cmd=(timeout 120 "${mpi[@]}" -np "$np" "${cmd[@]}")
  "${cmd[@]}" >"$out" 2>&1 && return 0
  bad "exited $?: ${cmd[*]}: $(tail -3 "$out")"
  return 1
}

# name, np of the saving run, np of the resumed run, app args...
resume() {
  local name=$1 np=$2 np2=$3 d=$tmp/$1
  shift 3
  mkdir -p "$d"
  run "$np" "$d/full.out" "$@" --num_iteration 6 --loss_log "$d/full.txt" --lora_save_path "$d/full.bin" || return
  run "$np" "$d/first.out" "$@" --num_iteration 3 --save "$d/ck" --save_interval 3 --loss_log "$d/first.txt" || return
  local ck=$d/ck/checkpoint_step_000003
  run "$np2" "$d/res.out" "$@" --num_iteration 6 --load "$ck" --loss_log "$d/res.txt" \
    --lora_save_path "$d/res.bin" || return
  if [ "$(wc -l <"$d/full.txt")" -eq 6 ] && cmp -s <(head -3 "$d/full.txt") "$d/first.txt" &&
    cmp -s <(tail -n +4 "$d/full.txt") "$d/res.txt"; then ok; else
    bad "$name: resumed losses differ: $(paste <(tail -n +4 "$d/full.txt") "$d/res.txt" | head -3)"
  fi
  if cmp -s "$d/full.bin" "$d/res.bin"; then ok; else bad "$name: the final adapter files differ"; fi
  grep -q "resumed from $ck: step 3" "$d/res.out" && ok || bad "$name: no resume line: $(tail -2 "$d/res.out")"
  # what the checkpoint holds: adapters in model.ckpt, their moments in optimizer.ckpt, settings
  grep -aq "transformer.h.1.attn.c_attn.lora_B" "$ck/model.ckpt" && grep -aq "adam.m.0" "$ck/optimizer.ckpt" &&
    grep -q '"lora": {' "$ck/trainer_state.json" && ok || bad "$name: the checkpoint lacks LoRA's entries"
}

resume gpt2_accum2 0 0 "${gpt2[@]}"
resume llama3 0 0 "${llama[@]}"
if ((${#mpi[@]})); then
  resume gpt2_zero1_np2 2 2 "${gpt2[@]}" --zero_stage 1
  resume gpt2_zero1_np2_to_np1 2 0 "${gpt2[@]}" --zero_stage 1
else
  echo "note: mpirun not found; the ZeRO-1 checks did not run"
fi

# the adapters' moments: 2 layers x (c_attn A 4x32 + B 96x4, attn.c_proj 4x32 + 32x4, mlp.c_proj
# 4x128 + 32x4) = 2816 floats, m and v, and adam.t; the base parameters have none
ck=$tmp/gpt2_accum2/ck/checkpoint_step_000003
n=$(grep -ac "adam\.[mv]\." "$ck/optimizer.ckpt")
sed -n '/"lora": {/,/}/p' "$ck/trainer_state.json" | tr -d ' \n' >"$tmp/lora.json"
if grep -qF '"lora":{"rank":4,"alpha":8.0,"target_modules":"c_attn,c_proj"}' "$tmp/lora.json"; then ok; else
  bad "trainer_state.json's lora block: $(cat "$tmp/lora.json")"
fi
size=$(stat -c %s "$ck/optimizer.ckpt")
((size > 2 * 2816 * 4 && size < 2 * 2816 * 4 + 4096)) && ok || bad "optimizer.ckpt: $size bytes ($n entries)"

refuse() { # name, expected message, args...: exit 2 with the message on one line
  local name=$1 want=$2
  shift 2
  "$build/$1" "${@:2}" >"$tmp/r.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/r.out"; then ok; else bad "$name: exit $rc: $(tail -2 "$tmp/r.out")"; fi
}
load=(--num_iteration 6 --load "$ck")
refuse "rank" "the checkpoint was saved with LoRA rank 4, alpha 8, targets c_attn,c_proj, this run has LoRA rank 8, alpha 8, targets c_attn,c_proj" \
  "${gpt2_base[@]}" --lora_rank 8 "${load[@]}"
refuse "alpha" "this run has LoRA rank 4, alpha 16, targets c_attn,c_proj" "${gpt2_base[@]}" --lora_alpha 16 "${load[@]}"
refuse "targets" "this run has LoRA rank 4, alpha 8, targets c_attn,attn.c_proj" "${gpt2_base[@]}" \
  --lora_target_modules c_attn,attn.c_proj "${load[@]}"
refuse "no lora" "this run has no LoRA" gpt2 --llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" \
  --batch_size 4 --sequence_length 32 --total_batch_size 256 --optimizer adamw "${load[@]}"
# a full fine-tuning checkpoint into a LoRA run
run 0 "$tmp/plain.out" gpt2 --llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 \
  --sequence_length 32 --optimizer adamw --num_iteration 1 --save "$tmp/plain" --save_interval 1
refuse "into lora" "the checkpoint was saved with no LoRA, this run has LoRA rank 4" "${gpt2[@]}" --num_iteration 2 \
  --load "$tmp/plain/checkpoint_step_000001"
# the same list written differently is the same list
run 0 "$tmp/blanks.out" "${gpt2[@]}" --lora_target_modules " c_attn , c_proj," "${load[@]}" --quiet

echo "lora_ckpt.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
