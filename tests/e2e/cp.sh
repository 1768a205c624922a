#!/usr/bin/env bash
# Context parallelism under mpirun (src/dist/context.c, src/models/context.c):
#  1. test_cp_attention on 2 and 4 ranks: every comm type, balanced or not, MHA and GQA, fp32
#     and bf16, against attention on the whole sequence (outputs and q/k/v gradients);
#  2. GPT-2 and LLaMA-3 (GQA) with CP = 2 and 4, each comm type (a2a where the heads divide),
#     with and without --cp_load_balance, against CP = 1 on the same global batch over 10
#     AdamW steps with clipping: fp32 within 1e-5;
#  3. InfiniTrain's case 10 layout (TP2 + SP + PP2 + VPP2 + CP2, 8 ranks) against one rank;
#     DP2 x CP2 with ZeRO-1 and ZeRO-2 against one rank with the same global batch; LoRA and
#     recompute under CP; bf16 within 1e-2;
#  4. sim (no collectives: staged through host memory) bitwise the cpu's, and a device ccl's
#     send/recv (p2pccl) bitwise too;
#  5. a checkpoint saved under DP2 x CP2 resumes bitwise at the same layout;
#  6. the step line's CP; bad input: one line naming the flag and the numbers, exit 2.
# Tolerance 1e-5 (fp32): CP changes only summation orders (the ring's log-sum-exp merge, the
# chunked attention, the gradient sum over DP x CP), measured at one or two ulps of a loss of
# ~5.5 (4.8e-7); 1e-5 leaves 10 AdamW steps room while a wrong position, chunk or missing
# gradient is >= 1e-3. bf16 1e-2: the ring rounds each block's output to bf16 before merging.
# Under the sanitizers one case per mechanism runs (each comm type once, the ring balanced;
# ZeRO, bf16, sim, the checkpoint and the bad inputs once); the release build runs them all.
# Usage: cp.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "context-parallel tests"
runn_timeout=180
san=0
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  san=1
  echo "note: a sanitizer build: one case per mechanism (the release build runs every case)"
fi

for n in 2 $((san ? 0 : 4)); do
  [[ $n -eq 0 ]] && continue
  if timeout 120 "${mpi[@]}" -np "$n" "$build/test_cp_attention" >"$tmp/u$n.out" 2>&1 &&
    [[ $(grep -c "^rank [0-9]* of $n: test_cp_attention: [0-9]* passed, 0 failed" "$tmp/u$n.out") -eq $n ]]; then
    echo "attention on $n ranks: $(grep -m1 '^rank 0 ' "$tmp/u$n.out")"
    ok
  else
    bad "test_cp_attention on $n ranks: $(grep -m3 FAIL "$tmp/u$n.out")"
  fi
done

g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3
common=(--batch_size 4 --sequence_length 32 --num_iteration 10 --optimizer adamw --learning_rate 0.001
  --weight_decay 0.1 --grad_clip 1.0)
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" "${common[@]}")
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" "${common[@]}")

# 2. each model, CP 2 and 4, every comm type, balanced or not
san_skip() { # n, comm, bal: under the sanitizers CP 2 alone, the ring balanced, the others contiguous
  [[ $san -eq 1 ]] || return 1
  [[ $1 -ne 2 ]] && return 0
  if [[ $2 == p2p ]]; then [[ -z $3 ]]; else [[ -n $3 ]]; fi
}
sweep() { # app, tag, a2a's largest CP, args...
  local app=$1 tag=$2 a2a_max=$3 n comm bal
  shift 3
  run1 "$app" "$tmp/${tag}1" "$@"
  for n in 2 4; do
    for comm in p2p all_gather a2a; do
      [[ $comm == a2a && $n -gt $a2a_max ]] && continue
      for bal in "" --cp_load_balance; do
        san_skip "$n" "$comm" "$bal" && continue
        runn "$n" "$app" "$tmp/$tag$n$comm$bal" "$@" --context_parallel "$n" --cp_comm_type "$comm" $bal
        within "$app CP=$n $comm${bal:+ balanced} vs CP=1" "$tmp/${tag}1" "$tmp/$tag$n$comm$bal" 1e-5
      done
    done
  done
}
sweep gpt2 g 4 "${gpt2[@]}"      # 4 heads
[[ $san -eq 0 ]] && sweep llama3 l 2 "${llama[@]}" # 4 query heads, 2 kv heads: a2a up to CP 2

# 3. case 10's layout, DP x CP with ZeRO, LoRA, recompute, bf16
deepl=(--llmc_filepath "$l/tiny_llama3_4l.bin" --input_bin "$l/tiny_shard_u32.bin" "${common[@]}"
  --total_batch_size 256)
if [[ $san -eq 0 ]]; then
  run1 llama3 "$tmp/d1" "${deepl[@]}"
  runn 8 llama3 "$tmp/d8" "${deepl[@]}" --tensor_parallel 2 --sequence_parallel --pipeline_parallel 2 \
    --virtual_pipeline_parallel 2 --context_parallel 2
  within "llama3 TP2+SP+PP2+VPP2+CP2 (case 10) vs one rank" "$tmp/d1" "$tmp/d8" 1e-5
  grep -q 'DP=1, TP=2, SP=2, CP=2, PP=2)$' "$tmp/d8.out" && ok || bad "case 10: the step line lacks CP=2"
fi
acc=(--total_batch_size 256)
run1 gpt2 "$tmp/z1" "${gpt2[@]}" "${acc[@]}"
zs=(1 2)
[[ $san -eq 1 ]] && zs=(2)
for z in "${zs[@]}"; do
  runn 4 gpt2 "$tmp/z$z-4" "${gpt2[@]}" "${acc[@]}" --context_parallel 2 --cp_load_balance --zero_stage "$z"
  within "gpt2 DP2 x CP2 ZeRO-$z vs one rank" "$tmp/z1" "$tmp/z$z-4" 1e-5
done
if [[ $san -eq 0 ]]; then
  lora=(--lora_rank 4 --lora_alpha 8)
  run1 llama3 "$tmp/lo1" "${llama[@]}" "${lora[@]}"
  runn 2 llama3 "$tmp/lo2" "${llama[@]}" "${lora[@]}" --context_parallel 2
  within "llama3 LoRA CP=2 vs CP=1" "$tmp/lo1" "$tmp/lo2" 1e-5
  rc=(--activation_recompute)
  runn 2 gpt2 "$tmp/rc2" "${gpt2[@]}" "${rc[@]}" --context_parallel 2 --cp_load_balance
  within "gpt2 recompute CP=2 balanced vs CP=1" "$tmp/g1" "$tmp/rc2" 1e-5
fi
run1 llama3 "$tmp/b1" "${llama[@]}" --dtype bfloat16
bf_comms=(p2p a2a)
[[ $san -eq 1 ]] && bf_comms=(p2p)
for comm in "${bf_comms[@]}"; do
  runn 2 llama3 "$tmp/b2$comm" "${llama[@]}" --dtype bfloat16 --context_parallel 2 --cp_comm_type "$comm"
  within "llama3 bf16 CP=2 $comm vs CP=1" "$tmp/b1" "$tmp/b2$comm" 1e-2
done

# 4. sim staged through host memory: the cpu's bits
runn 2 gpt2 "$tmp/s2" "${gpt2[@]}" --context_parallel 2 --cp_load_balance --device sim
same "gpt2 CP=2 on sim vs cpu" "$tmp/g2p2p--cp_load_balance" "$tmp/s2"

# 4b. on a device ccl (the p2pccl test backend: the CPU's kernels, sends that wait for their
#     receives as NCCL's do): the ring's K/V and Ulysses' all-to-all move by its send/recv in
#     groups, and the losses are the cpu device's bitwise
export IT_BACKEND_PATH=$build/test-plugins P2PCCL_NO_GROUPS=0
mpi+=(-x IT_BACKEND_PATH -x P2PCCL_NO_GROUPS)
for comm in p2p a2a; do
  [[ $san -eq 1 && $comm == a2a ]] && continue
  runn 2 gpt2 "$tmp/pc$comm" "${gpt2[@]}" --context_parallel 2 --cp_load_balance --cp_comm_type "$comm" --device p2pccl
  [[ -s $tmp/g2$comm--cp_load_balance ]] || runn 2 gpt2 "$tmp/g2$comm--cp_load_balance" "${gpt2[@]}" \
    --context_parallel 2 --cp_load_balance --cp_comm_type "$comm"
  same "gpt2 CP=2 $comm balanced on p2pccl vs cpu" "$tmp/g2$comm--cp_load_balance" "$tmp/pc$comm"
  n=$(grep -cE '^p2pccl: rank [0-9]+ of 2: [1-9][0-9]* sends, [1-9][0-9]* receives, [1-9][0-9]* groups$' "$tmp/pc$comm.out")
  [[ $n -eq 2 ]] && ok || bad "p2pccl $comm: $n of 2 ranks report sends on the device ccl"
done

# 5. saved under DP2 x CP2, resumed at the same layout: the uninterrupted run's last 5 losses
cpz=(--context_parallel 2 --zero_stage 1 --total_batch_size 256)
runn 4 gpt2 "$tmp/cf" "${gpt2[@]}" "${cpz[@]}" --save "$tmp/ck" --save_interval 5
runn 4 gpt2 "$tmp/cr" "${gpt2[@]}" "${cpz[@]}" --load "$tmp/ck/checkpoint_step_000005"
[[ -s $tmp/cr ]] && tail -n 5 "$tmp/cf" | cmp -s - "$tmp/cr" && ok ||
  bad "DP2 x CP2 resumed from step 5 differs: $(paste <(tail -n 5 "$tmp/cf") "$tmp/cr")"
grep -q '"cp_size": 2' "$tmp/ck/checkpoint_step_000005/trainer_state.json" && ok ||
  bad "trainer_state.json lacks cp_size 2"

# 5b. validation on each rank's rows gives the whole sequence's loss; the precision checker and
#     the profiler write every rank's files
val=(--input_val_bin "$g/tiny_shard.bin" --val_loss_every 5)
run1 gpt2 "$tmp/v1" "${gpt2[@]}" "${val[@]}"
runn 2 gpt2 "$tmp/v2" "${gpt2[@]}" "${val[@]}" --context_parallel 2 --cp_load_balance
a=$(grep '^val loss' "$tmp/v1.out" | awk '{print $3}' | tr '\n' ' ') b=$(grep '^val loss' "$tmp/v2.out" | awk '{print $3}' | tr '\n' ' ')
[[ -n $a && $a == "$b" ]] && ok || bad "val loss under CP=2 '$b', one rank '$a'"
runn 2 gpt2 "$tmp/pc" "${gpt2[@]}" --num_iteration 2 --context_parallel 2 --precision_check "level=1,path=$tmp/pcd" \
  --profile "$tmp/prof"
n=$(find "$tmp/pcd" -name 'precision_check_rank_*.tsv' | wc -l)
[[ $n -eq 2 && -s $tmp/prof.report.rank1 ]] && grep -q flash_attention_fwd "$tmp/prof.report.rank1" && ok ||
  bad "precision check and profile under CP=2: $n rank files, report: $(head -3 "$tmp/prof.report.rank1" 2>&1)"

# 6. bad input: exit 2, one line naming the flag and the numbers, before any step
expect_refuse "T not divisible by CP" "--context_parallel 4: --sequence_length 30 is not divisible by 4" \
  -np 4 "$build/gpt2" "${gpt2[@]}" --sequence_length 30 --context_parallel 4
expect_refuse "T not divisible by 2 CP balanced" \
  "--context_parallel 2 --cp_load_balance (2 x CP chunks): --sequence_length 30 is not divisible by 4" \
  -np 2 "$build/gpt2" "${gpt2[@]}" --sequence_length 30 --context_parallel 2 --cp_load_balance
expect_refuse "T/CP not divisible by TP under SP" \
  "--context_parallel 2 --sequence_parallel: each rank's 10 rows (--sequence_length 20 / CP) are not divisible by --tensor_parallel 4" \
  -np 8 "$build/gpt2" "${gpt2[@]}" --sequence_length 20 --context_parallel 2 --tensor_parallel 4 --sequence_parallel
expect_refuse "a2a heads" "--cp_comm_type a2a: each rank's 4 query and 2 kv heads" \
  -np 4 "$build/llama3" "${llama[@]}" --context_parallel 4 --cp_comm_type a2a
expect_refuse "world not DP x TP x CP x PP" \
  "--context_parallel 2: TP x CP x PP = 2 x 2 x 1 = 4 does not divide the 6 ranks" \
  -np 6 "$build/gpt2" "${gpt2[@]}" --context_parallel 2 --tensor_parallel 2
expect_refuse "Mixtral" "--context_parallel 2: not supported for Mixtral" \
  -np 2 "$build/mixtral" --llmc_filepath "$src/tests/fixtures/mixtral/tiny_mixtral.bin" \
  --input_bin "$l/tiny_shard_u32.bin" --batch_size 4 --sequence_length 32 --context_parallel 2
expect_refuse "balance without CP" "--cp_load_balance: needs --context_parallel N > 1" \
  -np 1 "$build/gpt2" "${gpt2[@]}" --cp_load_balance

echo "cp: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
