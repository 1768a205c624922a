#!/usr/bin/env bash
# Tensor (and sequence) parallelism under mpirun: GPT-2 with TP = 2 and 4, with and without
# SP, LLaMA-3 with TP = 2 and 4 (kv heads kept), Mixtral with TP = 2 and 4 with and without SP,
# and LoRA under TP, each within a stated
# tolerance of TP = 1 over 10 AdamW steps with clipping; DP2 x TP2 against one rank with
# accumulation 2; sim bitwise equal to cpu; sampling under TP as one rank samples;
# rank 0 alone prints, with the grid in its step lines; a checkpoint written under TP gathers
# the slices exactly (a run without steps writes its input back byte for byte) and loads on
# one rank. Bad grids (a TP that does not divide the heads, the world, the sequence or the
# padded vocabulary; SP without TP; TP differing between ranks) exit 2 with one
# line on stderr naming the flag and the numbers, before any model is built.
# Under the sanitizers one case per mechanism runs (TP=4 repeats of TP=2's, LLaMA-3's TP=2 and
# TP=2+SP (qwen3.sh's TP=2 cuts the same grouped kv heads), Mixtral's bf16 and sim runs (GPT-2's
# take those paths under TP), the 8-rank ZeRO-2
# twin of the 4-rank one are release-only); the release build runs them all.
# Usage: tp.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "tensor-parallel tests"
san=0
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  san=1
  echo "note: a sanitizer build: one case per mechanism (the release build runs every case)"
fi

g=$src/tests/fixtures/gpt2
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --optimizer adamw --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)
l=$src/tests/fixtures/llama3
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --optimizer adamw --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)

# 1. GPT-2 fp32: TP = 2, 4, with and without SP, against TP = 1. Tolerance 1e-5: TP changes
#    the summation order (the row-parallel layers' partial sums are added across ranks, and
#    the cross entropy's log-sum-exp is combined from per-rank partial ones), so the losses
#    agree within rounding, not bitwise; fp32 at a loss of ~5.5 has an ulp of 4.8e-7, and
#    measured differences stay within one ulp. 1e-5 (~20 ulp) leaves room for 10 steps of
#    AdamW to amplify that drift while a wrong slice or a missing reduction (>= 1e-3) fails.
# tp_sweep APP BASE TP_PREFIX SP_PREFIX args...: one rank into BASE, then TP 2 and 4 without and
# with SP (logs TP_PREFIXn, SP_PREFIXn), each within 1e-5 of BASE.
tp_sweep() {
  local app=$1 base=$2 tpp=$3 spp=$4 n
  shift 4
  run1 "$app" "$base" "$@"
  for n in 2 4; do
    [[ $san -eq 1 && $n -eq 4 && $app != gpt2 ]] && continue # (gpt2's TP=4 log is read below)
    runn "$n" "$app" "$tpp$n" "$@" --tensor_parallel "$n"
    within "$app TP=$n vs TP=1" "$base" "$tpp$n" 1e-5
    [[ $san -eq 1 && $n -eq 4 ]] && continue
    runn "$n" "$app" "$spp$n" "$@" --tensor_parallel "$n" --sequence_parallel
    within "$app TP=$n+SP vs TP=1" "$base" "$spp$n" 1e-5
  done
}
tp_sweep gpt2 "$tmp/tp1" "$tmp/tp" "$tmp/sp" "${gpt2[@]}"

# 2. Rank 0 alone prints, and the step line names the grid (SP is printed as TP when on, as
#    InfiniTrain does).
n=$(grep -c '^step ' "$tmp/sp2.out")
m=$(grep -c '^step .*DP=1, TP=2, SP=2, PP=1)' "$tmp/sp2.out")
[[ $n -eq 10 && $m -eq 10 ]] && ok || bad "TP=2+SP: expected 10 step lines with 'DP=1, TP=2, SP=2, PP=1', found $n ($m)"
n=$(grep -c '^step ' "$tmp/tp4.out")
[[ $n -eq 10 ]] && ok || bad "TP=4: expected 10 step lines (rank 0 only), found $n"
[[ $(grep -c '^tensor parallel: TP=4 over 4 ranks' "$tmp/tp4.out") -eq 1 ]] && ok ||
  bad "TP=4: expected one 'tensor parallel' header: $(grep '^tensor parallel' "$tmp/tp4.out")"
grep -q '^gpt2: .* parameters on this rank (' "$tmp/tp4.out" && ok ||
  bad "TP=4: the banner does not say its parameter count is this rank's: $(grep -m1 '^gpt2: ' "$tmp/tp4.out")"

# 3. bf16 autocast: TP = 2 vs TP = 1, both bf16. Tolerance 1e-2: the matmuls round their
#    inputs to bfloat16 (8 bits of mantissa, a relative step of 2^-8 = 3.9e-3), and under TP
#    the partial products are rounded at different points before the sum, so single steps
#    differ by a few bf16 ulps of the logits, diluted in the mean loss.
run1 gpt2 "$tmp/bf1" "${gpt2[@]}" --dtype bfloat16
runn 2 gpt2 "$tmp/bf2" "${gpt2[@]}" --dtype bfloat16 --tensor_parallel 2
within "gpt2 bf16 TP=2 vs TP=1 bf16" "$tmp/bf1" "$tmp/bf2" 1e-2

# 4. DP2 x TP2 (4 ranks) vs one rank with accumulation 2 (the same global batches). Within
#    1e-5 for TP's summation order; the DP sum of two ranks is exact (the 1/2 scale is).
run1 gpt2 "$tmp/acc2" "${gpt2[@]}" --total_batch_size 256
runn 4 gpt2 "$tmp/dp2tp2" "${gpt2[@]}" --tensor_parallel 2
within "gpt2 DP2xTP2 vs 1 rank with accumulation 2" "$tmp/acc2" "$tmp/dp2tp2" 1e-5
n=$(grep -c '^step ' "$tmp/dp2tp2.out")
m=$(grep -c '^step .*DP=2, TP=2, SP=1, PP=1)' "$tmp/dp2tp2.out")
[[ $n -eq 10 && $m -eq 10 ]] && ok || bad "DP2xTP2: expected 10 step lines with 'DP=2, TP=2, SP=1, PP=1', found $n ($m)"

# 4b. ZeRO under TP (the optimizer state and, for stage 2, the reduced gradient sharded over
#     the DP group of each TP rank; the clip norm from the shards, each element counted once
#     over TP): against the same one-rank run, 1e-5 as above.
runn 4 gpt2 "$tmp/z1" "${gpt2[@]}" --tensor_parallel 2 --zero_stage 1
within "gpt2 DP2xTP2 ZeRO-1 vs 1 rank with accumulation 2" "$tmp/acc2" "$tmp/z1" 1e-5
runn 4 gpt2 "$tmp/z2" "${gpt2[@]}" --tensor_parallel 2 --sequence_parallel --zero_stage 2
within "gpt2 DP2xTP2+SP ZeRO-2 vs 1 rank with accumulation 2" "$tmp/acc2" "$tmp/z2" 1e-5

# 5. LLaMA-3 (n_head 4, n_kv_head 2): TP = 2 with and without SP vs TP = 1; TP = 4 with its
#    kv heads kept one per rank (each on 2 ranks, their K/V gradients summed over those);
#    1e-5 as for GPT-2.
#    Under the sanitizers TP=4 alone: qwen3.sh's TP=2 cuts the same grouped kv heads, and GPT-2's
#    and Mixtral's runs take SP's path.
run1 llama3 "$tmp/l1" "${llama[@]}"
if [[ $san -eq 0 ]]; then
  runn 2 llama3 "$tmp/l2" "${llama[@]}" --tensor_parallel 2
  within "llama3 TP=2 vs TP=1" "$tmp/l1" "$tmp/l2" 1e-5
  runn 2 llama3 "$tmp/ls2" "${llama[@]}" --tensor_parallel 2 --sequence_parallel
  within "llama3 TP=2+SP vs TP=1" "$tmp/l1" "$tmp/ls2" 1e-5
fi
runn 4 llama3 "$tmp/l4" "${llama[@]}" --tensor_parallel 4
within "llama3 TP=4 (kv heads kept) vs TP=1" "$tmp/l1" "$tmp/l4" 1e-5
if [[ $san -eq 0 ]]; then
  runn 4 llama3 "$tmp/ls4" "${llama[@]}" --tensor_parallel 4 --sequence_parallel
  within "llama3 TP=4+SP (kv heads kept) vs TP=1" "$tmp/l1" "$tmp/ls4" 1e-5
  # DP2 x TP4 + SP with ZeRO-2 and a clip that acts at every step (0.05), 8 ranks, against one
  # rank with accumulation 2.
  run1 llama3 "$tmp/lacc2" "${llama[@]}" --total_batch_size 256 --grad_clip 0.05
  runn 8 llama3 "$tmp/lz8" "${llama[@]}" --tensor_parallel 4 --sequence_parallel --zero_stage 2 --grad_clip 0.05
  within "llama3 DP2xTP4+SP ZeRO-2, clip 0.05, vs 1 rank with accumulation 2" "$tmp/lacc2" "$tmp/lz8" 1e-5
fi

# 5b. LoRA under TP: GPT-2 on c_attn, c_fc, c_proj (A whole and B cut for the column-parallel
#     layers, A cut and B whole for the row-parallel ones) at TP = 2 + SP, LLaMA-3 with its
#     default targets at TP = 4 (B's rows of a kept kv head summed over its ranks); 1e-5 as
#     above. The adapter file is gathered whole: loading a one-rank file under TP = 2 and
#     saving it again gives the same bytes.
lora=(--lora_rank 4 --lora_alpha 8 --learning_rate 0.01)
run1 gpt2 "$tmp/lo1" "${gpt2[@]}" "${lora[@]}" --lora_target_modules c_attn,c_fc,c_proj --lora_save_path "$tmp/lo1.lora"
runn 2 gpt2 "$tmp/lo2" "${gpt2[@]}" "${lora[@]}" --lora_target_modules c_attn,c_fc,c_proj --tensor_parallel 2 \
  --sequence_parallel
within "gpt2 LoRA TP=2+SP vs TP=1" "$tmp/lo1" "$tmp/lo2" 1e-5
runn 2 gpt2 "$tmp/lo2b" "${gpt2[@]}" "${lora[@]}" --lora_target_modules c_attn,c_fc,c_proj --tensor_parallel 2 \
  --lora_load_path "$tmp/lo1.lora" --num_iteration 0 --lr_decay_iters 1 --lora_save_path "$tmp/lo2b.lora"
[[ -s $tmp/lo2b.lora ]] && cmp -s "$tmp/lo1.lora" "$tmp/lo2b.lora" && ok ||
  bad "LoRA adapter file loaded and saved under TP=2 differs from the one-rank file"
run1 llama3 "$tmp/llo1" "${llama[@]}" "${lora[@]}"
runn 4 llama3 "$tmp/llo4" "${llama[@]}" "${lora[@]}" --tensor_parallel 4
within "llama3 LoRA TP=4 vs TP=1" "$tmp/llo1" "$tmp/llo4" 1e-5

# 5d. Mixtral (n_head 4, n_kv_head 2, 4 experts top-2, FFN 48) under TP: attention cut as
#     LLaMA-3's, each expert's gate/up by columns and down by rows, the router whole. TP = 2
#     and 4 (kv heads kept), each with and without SP (the router reads the gathered sequence,
#     its gradient split back without a sum; a sum there is 4.6e-4 off), DP2 x TP2 with ZeRO-2
#     against one rank with accumulation 2, LoRA
#     at TP = 2: 1e-5 as above (the experts' partial products are summed across ranks before
#     the routing weights scale them: the summation order changes, the routing must not, and
#     a token routed differently would move the loss by ~1e-3). bf16 at TP = 2: 1e-2 as in 3.
#     sim bitwise cpu; the gathered checkpoint with no steps is the input byte for byte; a
#     run resumed at TP = 2 gives the uninterrupted run's losses bitwise.
x=$src/tests/fixtures/mixtral
mixtral=(--llmc_filepath "$x/tiny_mixtral.bin" --input_bin "$x/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --optimizer adamw --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)
tp_sweep mixtral "$tmp/x1" "$tmp/x" "$tmp/xsp" "${mixtral[@]}"
n=$(grep -c '^step .*DP=1, TP=2, SP=1, PP=1)' "$tmp/x2.out")
[[ $n -eq 10 ]] && ok || bad "mixtral TP=2: expected 10 step lines with 'DP=1, TP=2, SP=1, PP=1', found $n"
run1 mixtral "$tmp/xacc2" "${mixtral[@]}" --total_batch_size 256
runn 4 mixtral "$tmp/xz2" "${mixtral[@]}" --tensor_parallel 2 --zero_stage 2
within "mixtral DP2xTP2 ZeRO-2 vs 1 rank with accumulation 2" "$tmp/xacc2" "$tmp/xz2" 1e-5
run1 mixtral "$tmp/xlo1" "${mixtral[@]}" "${lora[@]}"
runn 2 mixtral "$tmp/xlo2" "${mixtral[@]}" "${lora[@]}" --tensor_parallel 2
within "mixtral LoRA TP=2 vs TP=1" "$tmp/xlo1" "$tmp/xlo2" 1e-5
if [[ $san -eq 0 ]]; then # under the sanitizers GPT-2's bf16 and sim runs take these paths under TP
  run1 mixtral "$tmp/xb1" "${mixtral[@]}" --dtype bfloat16
  runn 2 mixtral "$tmp/xb2" "${mixtral[@]}" --dtype bfloat16 --tensor_parallel 2
  within "mixtral bf16 TP=2 vs TP=1 bf16" "$tmp/xb1" "$tmp/xb2" 1e-2
  runn 2 mixtral "$tmp/xs2" "${mixtral[@]}" --tensor_parallel 2 --device sim
  [[ -s $tmp/xs2 ]] && cmp -s "$tmp/x2" "$tmp/xs2" && ok || bad "mixtral sim TP=2 vs cpu TP=2: loss logs differ"
fi
runn 2 mixtral "$tmp/xg" "${mixtral[@]}" --tensor_parallel 2 --num_iteration 0 --lr_decay_iters 1 \
  --output_checkpoint "$tmp/xg.bin"
cmp -s "$x/tiny_mixtral.bin" "$tmp/xg.bin" && ok || bad "mixtral TP=2 with 0 steps: the written checkpoint differs"
runn 2 mixtral "$tmp/xcf" "${mixtral[@]}" --tensor_parallel 2 --save "$tmp/xck" --save_interval 5
runn 2 mixtral "$tmp/xcr" "${mixtral[@]}" --tensor_parallel 2 --load "$tmp/xck/checkpoint_step_000005"
[[ -s $tmp/xcr ]] && tail -n 5 "$tmp/xcf" | cmp -s - "$tmp/xcr" && ok ||
  bad "mixtral TP=2 resumed from step 5 differs: $(paste <(tail -n 5 "$tmp/xcf") "$tmp/xcr")"

# 5c. Sampling under TP: the group gathers its vocabulary columns and every rank draws the
#     same token; rank 0 prints what one rank prints.
gen=(--num_iteration 2 --freq_generate_txt 2 --text_length 12)
"$build/gpt2" "${gpt2[@]}" "${gen[@]}" >"$tmp/gen1.out" 2>&1 || bad "1-rank sampling run exited $?"
timeout 60 "${mpi[@]}" -np 2 "$build/gpt2" "${gpt2[@]}" "${gen[@]}" --tensor_parallel 2 --sequence_parallel \
  >"$tmp/gen2.out" 2>&1 || bad "TP=2 sampling run exited $?"
a=$(grep '^generated: ' "$tmp/gen1.out") b=$(grep '^generated: ' "$tmp/gen2.out")
[[ -n $a && $a == "$b" && $(grep -c '^generated: ' "$tmp/gen2.out") -eq 2 ]] && ok ||
  bad "TP=2+SP samples differ from one rank's: '$a' vs '$b'"

# 6. A backend without collectives (sim: staged through host memory) runs the same kernels'
#    arithmetic as the CPU: bitwise the same losses.
runn 2 gpt2 "$tmp/sim2" "${gpt2[@]}" --tensor_parallel 2 --device sim
if [[ -s $tmp/sim2 ]] && cmp -s "$tmp/tp2" "$tmp/sim2"; then ok; else
  bad "sim TP=2 vs cpu TP=2: loss logs differ"
  paste "$tmp/tp2" "$tmp/sim2"
fi

# 7. Checkpoints. With no steps the gathered slices are the input, byte for byte. (0 steps
#    need an explicit --lr_decay_iters: its default is --num_iteration, which must be > 0.)
none=(--num_iteration 0 --lr_decay_iters 1)
runn 2 gpt2 "$tmp/ck0" "${gpt2[@]}" --tensor_parallel 2 "${none[@]}" --output_checkpoint "$tmp/ck0.bin"
cmp -s "$g/tiny_gpt2.bin" "$tmp/ck0.bin" && ok || bad "TP=2 with 0 steps: the written checkpoint differs from its input"
# After 3 steps under TP = 2, the file loads on one rank and writes back unchanged.
runn 2 gpt2 "$tmp/ck3" "${gpt2[@]}" --tensor_parallel 2 --num_iteration 3 --output_checkpoint "$tmp/ck3.bin"
"$build/gpt2" "${gpt2[@]}" --llmc_filepath "$tmp/ck3.bin" "${none[@]}" --output_checkpoint "$tmp/ck3b.bin" \
  >"$tmp/ck3b.out" 2>&1 || bad "loading the TP=2 checkpoint on 1 rank exited $?: $(tail -3 "$tmp/ck3b.out")"
if [[ -s $tmp/ck3.bin ]] && cmp -s "$tmp/ck3.bin" "$tmp/ck3b.bin" && ! cmp -s "$g/tiny_gpt2.bin" "$tmp/ck3.bin"; then
  ok
else
  bad "TP=2 checkpoint after 3 steps: missing, unchanged from the input, or not round-tripped by 1 rank"
fi

# 7b. Checkpoint directories under TP: each TP rank of DP replica 0 writes its shard into
#     rank_%06d/ (InfiniTrain's layout); a run resumed from step 5 at the same grid gives the
#     uninterrupted run's last 5 losses bitwise (DP2 x TP2 with ZeRO-1, and LoRA under TP+SP);
#     another TP size is refused naming tp_size.
runn 4 gpt2 "$tmp/cfull" "${gpt2[@]}" --tensor_parallel 2 --zero_stage 1 --save "$tmp/ck" --save_interval 5
[[ -f $tmp/ck/checkpoint_step_000005/rank_000000/model.ckpt && -f $tmp/ck/checkpoint_step_000005/rank_000001/optimizer.ckpt &&
  ! -e $tmp/ck/checkpoint_step_000005/rank_000002 ]] && ok || bad "TP=2 checkpoint: rank_000000/ and rank_000001/ expected: $(find "$tmp/ck" | head)"
runn 4 gpt2 "$tmp/cres" "${gpt2[@]}" --tensor_parallel 2 --zero_stage 1 --load "$tmp/ck/checkpoint_step_000005"
[[ -s $tmp/cres ]] && tail -n 5 "$tmp/cfull" | cmp -s - "$tmp/cres" && ok ||
  bad "DP2xTP2 ZeRO-1 resumed from step 5 differs from the uninterrupted run: $(paste <(tail -n 5 "$tmp/cfull") "$tmp/cres")"
loraopt=(--lora_rank 4 --lora_alpha 8 --tensor_parallel 2 --sequence_parallel)
runn 2 gpt2 "$tmp/clf" "${gpt2[@]}" "${loraopt[@]}" --save "$tmp/ckl" --save_interval 5
runn 2 gpt2 "$tmp/clr" "${gpt2[@]}" "${loraopt[@]}" --load "$tmp/ckl/checkpoint_step_000005"
[[ -s $tmp/clr ]] && tail -n 5 "$tmp/clf" | cmp -s - "$tmp/clr" && ok || bad "LoRA TP=2+SP resumed from step 5 differs"
"$build/gpt2" "${gpt2[@]}" --load "$tmp/ck/checkpoint_step_000005" >"$tmp/c1.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q 'tp_size: expected 1 (this run: no tensor parallelism), found 2' "$tmp/c1.out" && ok ||
  bad "a TP=2 checkpoint loaded without TP: exit $rc: $(tail -2 "$tmp/c1.out")"

# 8. Bad grids: exit 2, one line on stderr naming the flag and the numbers, no model built.
custom=(--input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32 --num_iteration 1
  --n_layer 2 --n_embd 48 --block_size 32 --vocab_size 257)
expect_refuse "TP not dividing n_head" "--tensor_parallel: 2 does not divide GPT-2's n_head 3" \
  -np 2 "$build/gpt2" "${custom[@]}" --n_head 3 --tensor_parallel 2
expect_refuse "TP not dividing the world" "--tensor_parallel: 2 does not divide the 3 ranks" \
  -np 3 "$build/gpt2" "${gpt2[@]}" --tensor_parallel 2
expect_refuse "SP with T not divisible by TP" \
  "--sequence_parallel: --sequence_length 30 is not divisible by --tensor_parallel 4" \
  -np 4 "$build/gpt2" "${gpt2[@]}" --sequence_length 30 --tensor_parallel 4 --sequence_parallel
expect_refuse "SP without TP" "--sequence_parallel: needs --tensor_parallel N > 1" \
  -np 2 "$build/gpt2" "${gpt2[@]}" --sequence_parallel
expect_refuse "TP differs between ranks" "the ranks were given different flags: --tensor_parallel differs" \
  -np 1 "$build/gpt2" "${gpt2[@]}" --tensor_parallel 2 : -np 1 "$build/gpt2" "${gpt2[@]}" --tensor_parallel 1
# n_head 6 and n_embd 48 divide by 3; the vocabulary 257 pads to 320, which does not.
expect_refuse "TP not dividing the padded vocabulary" \
  "--tensor_parallel: 3 does not divide GPT-2's padded vocabulary 320" \
  -np 3 "$build/gpt2" "${custom[@]}" --n_head 6 --tensor_parallel 3
# The same check from an llm.c file's header (read before the model is built).
expect_refuse "TP not dividing a checkpoint's n_head" "--tensor_parallel: 3 does not divide GPT-2's n_head 4" \
  -np 3 "$build/gpt2" "${gpt2[@]}" --tensor_parallel 3
# Mixtral: TP 3 against its header.
expect_refuse "TP not dividing a Mixtral header's n_head" "--tensor_parallel: 3 does not divide Mixtral's n_head 4" \
  -np 3 "$build/mixtral" "${mixtral[@]}" --tensor_parallel 3

# The same flag, different files: each rank reads ck.bin in its own working directory, rank 0
# a model TP 2 divides, rank 1 one it does not (n_head 3). The verdicts are agreed: one line.
mkdir -p "$tmp/a" "$tmp/b"
cp "$g/tiny_gpt2.bin" "$tmp/a/ck.bin"
"$build/gpt2" "${custom[@]}" --n_head 3 --output_checkpoint "$tmp/b/ck.bin" >/dev/null 2>&1 ||
  bad "writing an n_head 3 model"
ck=(--llmc_filepath ck.bin --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32 --tensor_parallel 2)
expect_refuse "checkpoint header differs between ranks" \
  "--tensor_parallel 2: 1 of 2 ranks read a model it does not divide (ck.bin differs between ranks" \
  -np 1 -wdir "$tmp/a" "$build/gpt2" "${ck[@]}" : -np 1 -wdir "$tmp/b" "$build/gpt2" "${ck[@]}"

echo "tp: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
