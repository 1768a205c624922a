#!/usr/bin/env bash
# Pipeline parallelism under mpirun: LLaMA-3 with 2 and 4 stages and 2 x 2 virtual (1F1B and
# interleaved, no clipping) bitwise equal to one rank with the same accumulation, GPipe within
# 1e-6; GPT-2 (tied embedding: the last stage's copy of wte and the first stage's summed) with
# 2 stages and a 4-layer GPT-2 with 4, within 1e-6; Mixtral with 2 stages (its auxiliary loss
# carried across them), alone and under TP + SP, and a 4-layer Mixtral on 2 stages x 2 chunks
# (interleaved; bitwise without the auxiliary loss, its parameters bitwise with it); 3-D (DP2 x
# TP2 + SP x PP2, ZeRO-1, 8 ranks) within 1e-5; every schedule, case 8 and validation on
# p2pccl (activations on a device ccl with NCCL's rendezvous) bitwise the cpu device's;
# validation and the precision checker's records (every op's, equal to one rank's) under PP; a
# 3-D checkpoint resumed bitwise; the gathered llm.c file exact; bad grids refused in one line;
# a stage killed mid-schedule stops the job instead of hanging it.
# Under the sanitizers one case per mechanism runs (`full` marks the repeats: other stage counts,
# the other schedule, p2pccl's twins of cases the cpu device runs); the release build runs all.
# Usage: pp.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "pipeline-parallel tests"
san=0
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  san=1
  echo "note: a sanitizer build: one case per mechanism (the release build runs every case)"
fi
full() { [[ $san -eq 0 ]]; }

g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3
common=(--batch_size 4 --sequence_length 32 --num_iteration 10 --optimizer adamw --learning_rate 0.001
  --weight_decay 0.1 --grad_clip 1.0)
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" "${common[@]}")
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" "${common[@]}")
deep=(--input_bin "$g/tiny_shard.bin" --n_layer 4 --n_head 4 --n_embd 32 --block_size 32 --vocab_size 257 "${common[@]}")

# 1. LLaMA-3 (no tied weights). Each micro-batch's gradient is computed alone and added to the
#    earlier ones' sum in the order the backwards run: 1F1B's (and interleaved 1F1B's) run
#    B0 .. B(M-1), one rank's accumulation order, so without clipping (whose norm is summed
#    stage by stage, another order) the losses are one rank's bitwise: 2 stages of the 2-layer
#    model, 4 stages of the 4-layer one, 2 stages x 2 chunks. GPipe's backwards run B(M-1) ..
#    B0, the same sums in the other order: within 1e-6; and with clipping 1e-6 too.
noclip=(--grad_clip 0)
run1 llama3 "$tmp/l1" "${llama[@]}" "${noclip[@]}" --total_batch_size 512
runn 2 llama3 "$tmp/l_1f1b" "${llama[@]}" "${noclip[@]}" --total_batch_size 512 --pipeline_parallel 2 \
  --pipeline_schedule 1f1b
same "llama3 PP=2 1f1b vs 1 rank" "$tmp/l1" "$tmp/l_1f1b"
if full; then # under the sanitizers GPT-2's PP=2 runs GPipe
  runn 2 llama3 "$tmp/l_gpipe" "${llama[@]}" "${noclip[@]}" --total_batch_size 512 --pipeline_parallel 2
  within "llama3 PP=2 gpipe vs 1 rank" "$tmp/l1" "$tmp/l_gpipe" 1e-6
fi
deepl=(--llmc_filepath "$l/tiny_llama3_4l.bin" --input_bin "$l/tiny_shard_u32.bin" "${common[@]}" --total_batch_size 1024)
run1 llama3 "$tmp/ll1" "${deepl[@]}" "${noclip[@]}"
if full; then
  runn 4 llama3 "$tmp/ll4" "${deepl[@]}" "${noclip[@]}" --pipeline_parallel 4 --pipeline_schedule 1f1b
  same "4-layer llama3 PP=4 1f1b vs 1 rank" "$tmp/ll1" "$tmp/ll4"
fi
runn 2 llama3 "$tmp/ll22" "${deepl[@]}" "${noclip[@]}" --pipeline_parallel 2 --virtual_pipeline_parallel 2 \
  --pipeline_schedule 1f1b
same "4-layer llama3 PP=2 x VPP=2 interleaved vs 1 rank" "$tmp/ll1" "$tmp/ll22"
if full; then
  run1 llama3 "$tmp/llc1" "${deepl[@]}"
  runn 4 llama3 "$tmp/llc4" "${deepl[@]}" --pipeline_parallel 4
  within "4-layer llama3 PP=4 gpipe, clip 1.0, vs 1 rank" "$tmp/llc1" "$tmp/llc4" 1e-6
fi
grep -q 'DP=1, TP=1, SP=1, PP=2)$' "$tmp/l_1f1b.out" && ok || bad "PP=2: the step line lacks PP=2"

# 1b. Activations device to device: the p2pccl test backend (tests/plugin/p2pccl.c: the CPU's
#     kernels, a ccl whose sends wait for their receives and match by order, as NCCL's do)
#     moves them with its send/recv in groups. Each schedule's losses are the cpu device's
#     (staged through host memory) bitwise: Megatron's 1F1B, GPipe, interleaved 1F1B on
#     2 x 2 chunks (the last stage sending to stage 0), 4 stages. Every stage reports sends,
#     receives and groups on the device ccl. Without group calls (P2PCCL_NO_GROUPS=1) the
#     core stages them through host memory: the same losses, no point-to-point on the ccl.
export IT_BACKEND_PATH=$build/test-plugins P2PCCL_NO_GROUPS=0
mpi+=(-x IT_BACKEND_PATH -x P2PCCL_NO_GROUPS)
dev=(--device p2pccl)
p2p_used() { # log.out, ranks [stages]: every rank moved messages on its PP group's device ccl, in groups
  local n pp=${3:-$2}
  n=$(grep -cE '^p2pccl: rank [0-9]+ of '"$pp"': [1-9][0-9]* sends, [1-9][0-9]* receives, [1-9][0-9]* groups$' "$1")
  [[ $n -eq $2 ]] && ok || bad "$1: $n of $2 ranks report point-to-point on the device ccl: $(grep p2pccl "$1" | head -3)"
}
p2p_case() { # name, the cpu device's loss log, ranks, log, llama3 args...: same losses, the device ccl used
  local name=$1 ref=$2 n=$3 log=$4
  shift 4
  runn "$n" llama3 "$log" "$@" "${dev[@]}"
  same "p2pccl $name vs the cpu device" "$ref" "$log"
  p2p_used "$log.out" "$n"
}
full && p2p_case "llama3 PP=2 1f1b" "$tmp/l_1f1b" 2 "$tmp/p_1f1b" "${llama[@]}" "${noclip[@]}" \
  --total_batch_size 512 --pipeline_parallel 2 --pipeline_schedule 1f1b
full && p2p_case "llama3 PP=2 gpipe" "$tmp/l_gpipe" 2 "$tmp/p_gpipe" "${llama[@]}" "${noclip[@]}" \
  --total_batch_size 512 --pipeline_parallel 2
p2p_case "4-layer llama3 PP=2 x VPP=2 interleaved" "$tmp/ll22" 2 "$tmp/p22" "${deepl[@]}" "${noclip[@]}" \
  --pipeline_parallel 2 --virtual_pipeline_parallel 2 --pipeline_schedule 1f1b
full && p2p_case "4-layer llama3 PP=4 1f1b" "$tmp/ll4" 4 "$tmp/p4" "${deepl[@]}" "${noclip[@]}" \
  --pipeline_parallel 4 --pipeline_schedule 1f1b
full && p2p_case "4-layer llama3 PP=4 gpipe, clip 1.0," "$tmp/llc4" 4 "$tmp/pc4" "${deepl[@]}" --pipeline_parallel 4
P2PCCL_NO_GROUPS=1 runn 2 llama3 "$tmp/pn22" "${deepl[@]}" "${noclip[@]}" --pipeline_parallel 2 \
  --virtual_pipeline_parallel 2 --pipeline_schedule 1f1b "${dev[@]}"
same "p2pccl without group calls (staged) PP=2 x VPP=2 vs the cpu device" "$tmp/ll22" "$tmp/pn22"
grep -q '^p2pccl: .* sends' "$tmp/pn22.out" && bad "p2pccl without groups still sent on the device ccl" || ok

# 2. GPT-2: the first stage's wte and the last stage's copy sum their gradients (a different
#    order than one rank's single tensor): within 1e-6 (a few fp32 ulp at loss 5.5).
run1 gpt2 "$tmp/g1" "${gpt2[@]}" --total_batch_size 512
runn 2 gpt2 "$tmp/g2" "${gpt2[@]}" --total_batch_size 512 --pipeline_parallel 2
within "gpt2 PP=2 (tied) vs 1 rank" "$tmp/g1" "$tmp/g2" 1e-6
run1 gpt2 "$tmp/d1" "${deep[@]}" --total_batch_size 512
for s in gpipe 1f1b; do
  full || continue
  runn 4 gpt2 "$tmp/d4_$s" "${deep[@]}" --total_batch_size 512 --pipeline_parallel 4 --pipeline_schedule "$s"
  within "4-layer gpt2 PP=4 $s vs 1 rank" "$tmp/d1" "$tmp/d4_$s" 1e-6
done

# bf16 autocast: the stages' products round as one rank's do, the tied sum differs: 1e-2.
run1 gpt2 "$tmp/gb1" "${gpt2[@]}" --total_batch_size 512 --dtype bfloat16
runn 2 gpt2 "$tmp/gb2" "${gpt2[@]}" --total_batch_size 512 --pipeline_parallel 2 --dtype bfloat16
within "gpt2 PP=2 bf16 vs 1 rank bf16" "$tmp/gb1" "$tmp/gb2" 1e-2

# 2b. Virtual stages: the 4-layer GPT-2 on 2 stages x 2 chunks (stage 0 holds layers 0 and 2),
#     GPipe's and the interleaved 1F1B's task orders; 1e-6 as above.
for s in gpipe 1f1b; do
  [[ $s == gpipe ]] && ! full && continue
  runn 2 gpt2 "$tmp/v2_$s" "${deep[@]}" --total_batch_size 512 --pipeline_parallel 2 --virtual_pipeline_parallel 2 \
    --pipeline_schedule "$s"
  within "4-layer gpt2 PP=2 x VPP=2 $s vs 1 rank" "$tmp/d1" "$tmp/v2_$s" 1e-6
done

# 2c. Mixtral (2 layers, 4 experts top-2) on 2 stages. Without its auxiliary loss, 1F1B is one
#     rank's accumulation order: bitwise. With it (--moe_aux_loss_coeff 0.01), stage 0's
#     layers' share joins the backward through it_attach_loss (without it: 1.7e-4 off) and the
#     step's loss as an fp64 sum over the stages (one rank adds it in fp32): within 1e-6, for
#     1F1B, GPipe and TP2 + SP x PP2 (1e-5: TP's order). The routing counts are one rank's
#     (each stage counts its layers; the sum over PP is printed), validation prints one rank's
#     losses, the gathered file with no steps is the input, a resumed run is bitwise.
x=$src/tests/fixtures/mixtral
mixtral=(--llmc_filepath "$x/tiny_mixtral.bin" --input_bin "$x/tiny_shard.bin" "${common[@]}" --grad_clip 0
  --total_batch_size 256)
aux=(--moe_aux_loss_coeff 0.01)
run1 mixtral "$tmp/x1" "${mixtral[@]}"
runn 2 mixtral "$tmp/x2" "${mixtral[@]}" --pipeline_parallel 2 --pipeline_schedule 1f1b
same "mixtral PP=2 1f1b vs 1 rank" "$tmp/x1" "$tmp/x2"
xval=(--input_val_bin "$x/tiny_shard.bin" --val_loss_every 5 --val_max_steps 2)
run1 mixtral "$tmp/xa1" "${mixtral[@]}" "${aux[@]}" "${xval[@]}"
for s in 1f1b gpipe; do
  [[ $s == gpipe ]] && ! full && continue
  runn 2 mixtral "$tmp/xa2_$s" "${mixtral[@]}" "${aux[@]}" --pipeline_parallel 2 --pipeline_schedule "$s" "${xval[@]}"
  within "mixtral PP=2 $s with its auxiliary loss vs 1 rank" "$tmp/xa1" "$tmp/xa2_$s" 1e-6
done
# the routing counts exactly; the validation losses within the training losses' 1e-6 (the
# auxiliary loss is summed in fp64 over the stages there too, so the sixth decimal may turn),
# plus the 1e-6 of the printed value's last decimal: 2e-6
a=$(grep -E '^experts' "$tmp/xa1.out") b=$(grep -E '^experts' "$tmp/xa2_1f1b.out")
[[ -n $a && $a == "$b" ]] && ok || bad "mixtral PP=2: routing counts differ from one rank's: '$a' vs '$b'"
a=$(grep -E '^val loss' "$tmp/xa1.out" | awk '{print $3}') b=$(grep -E '^val loss' "$tmp/xa2_1f1b.out" | awk '{print $3}')
if [[ -n $a && $(wc -w <<<"$a") == $(wc -w <<<"$b") ]] &&
  paste <(tr ' ' '\n' <<<"$a") <(tr ' ' '\n' <<<"$b") | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-6) exit 1 }'; then
  ok
else
  bad "mixtral PP=2: validation losses differ from one rank's by more than 2e-6: '$a' vs '$b'"
fi
if full; then
  runn 4 mixtral "$tmp/xa4" "${mixtral[@]}" "${aux[@]}" --tensor_parallel 2 --sequence_parallel --pipeline_parallel 2 \
    --pipeline_schedule 1f1b
  within "mixtral TP2+SP x PP2 with its auxiliary loss vs 1 rank" "$tmp/xa1" "$tmp/xa4" 1e-5
fi
# The 4-layer Mixtral (tiny_mixtral_4l.bin: layers 0, 1, 0, 1) on 2 stages x 2 chunks, interleaved
# 1F1B with 4 micro-batches: three of the four chunks carry their layer's auxiliary loss on their
# output, two of them on stage 0. Without the auxiliary loss bitwise. With it the trained
# parameters are one rank's bitwise (the --output_checkpoint files are the same bytes), and the
# printed losses differ only in how the step's loss is summed: one rank adds the cross entropy
# and the auxiliary loss in fp32, the pipeline adds its chunks' parts in fp64; measured at most
# 2.1e-7 (under one fp32 ulp, 4.8e-7, at loss 5.7): within 1e-6. Routing counts and validation
# losses are one rank's.
xdeep=(--llmc_filepath "$x/tiny_mixtral_4l.bin" --input_bin "$x/tiny_shard.bin" "${common[@]}" --grad_clip 0
  --total_batch_size 512)
xvpp=(--pipeline_parallel 2 --virtual_pipeline_parallel 2 --pipeline_schedule 1f1b)
if full; then
  run1 mixtral "$tmp/xd1" "${xdeep[@]}"
  runn 2 mixtral "$tmp/xd2" "${xdeep[@]}" "${xvpp[@]}"
  same "4-layer mixtral PP=2 x VPP=2 interleaved vs 1 rank" "$tmp/xd1" "$tmp/xd2"
fi
run1 mixtral "$tmp/xda1" "${xdeep[@]}" "${aux[@]}" "${xval[@]}" --output_checkpoint "$tmp/xda1.bin"
runn 2 mixtral "$tmp/xda2" "${xdeep[@]}" "${aux[@]}" "${xval[@]}" "${xvpp[@]}" --output_checkpoint "$tmp/xda2.bin"
within "4-layer mixtral PP=2 x VPP=2 interleaved with its auxiliary loss vs 1 rank" "$tmp/xda1" "$tmp/xda2" 1e-6
[[ -s $tmp/xda1.bin ]] && cmp -s "$tmp/xda1.bin" "$tmp/xda2.bin" && ok ||
  bad "4-layer mixtral PP=2 x VPP=2 with its auxiliary loss: the trained parameters differ from one rank's"
a=$(grep -E '^(experts|val loss)' "$tmp/xda1.out") b=$(grep -E '^(experts|val loss)' "$tmp/xda2.out")
[[ -n $a && $a == "$b" ]] && ok ||
  bad "4-layer mixtral PP=2 x VPP=2: routing counts or validation differ from one rank's: '$a' vs '$b'"
runn 2 mixtral "$tmp/xg" "${mixtral[@]}" --pipeline_parallel 2 --num_iteration 0 --lr_decay_iters 1 \
  --output_checkpoint "$tmp/xg.bin"
cmp -s "$x/tiny_mixtral.bin" "$tmp/xg.bin" && ok || bad "mixtral PP=2 with 0 steps: the gathered file differs"
runn 2 mixtral "$tmp/xcf" "${mixtral[@]}" "${aux[@]}" --pipeline_parallel 2 --save "$tmp/xck" --save_interval 5
runn 2 mixtral "$tmp/xcr" "${mixtral[@]}" "${aux[@]}" --pipeline_parallel 2 --load "$tmp/xck/checkpoint_step_000005"
[[ -s $tmp/xcr ]] && tail -n 5 "$tmp/xcf" | cmp -s - "$tmp/xcr" && ok || bad "mixtral PP=2 resumed from step 5 differs"

# 3. 3-D, InfiniTrain's case 8: DP2 x TP2 + SP x PP2 x VPP2 with ZeRO-1 on 8 ranks, interleaved
#    1F1B, against one rank with the same global batch; 1e-5 for TP's summation order.
run1 gpt2 "$tmp/d2" "${deep[@]}" --total_batch_size 1024
three=(--total_batch_size 1024 --tensor_parallel 2 --sequence_parallel --pipeline_parallel 2 --virtual_pipeline_parallel 2
  --pipeline_schedule 1f1b --zero_stage 1)
runn 8 gpt2 "$tmp/d8" "${deep[@]}" "${three[@]}" --save "$tmp/ck" --save_interval 5
within "gpt2 DP2xTP2+SPxPP2xVPP2 ZeRO-1 (InfiniTrain's case 8) vs 1 rank" "$tmp/d2" "$tmp/d8" 1e-5
[[ $(ls "$tmp/ck/checkpoint_step_000005" 2>/dev/null | tr '\n' ' ') == "rank_000000 rank_000001 rank_000004 rank_000005 " ]] &&
  ok || bad "3-D checkpoint: expected rank_000000 1 4 5: $(ls "$tmp/ck/checkpoint_step_000005" 2>&1)"
runn 8 gpt2 "$tmp/d8r" "${deep[@]}" "${three[@]}" --load "$tmp/ck/checkpoint_step_000005"
[[ -s $tmp/d8r ]] && tail -n 5 "$tmp/d8" | cmp -s - "$tmp/d8r" && ok || bad "3-D run resumed from step 5 differs"
# the same on p2pccl: DP's, TP's and the tied embedding's collectives and PP's messages all on
# the device ccl, the cpu device's losses bitwise
if full; then
  runn 8 gpt2 "$tmp/p8" "${deep[@]}" "${three[@]}" "${dev[@]}"
  same "p2pccl case 8 (DP2xTP2+SPxPP2xVPP2 ZeRO-1) vs the cpu device" "$tmp/d8" "$tmp/p8"
  p2p_used "$tmp/p8.out" 8 2
fi

# 3b. Validation under PP: each batch goes through the stages without autograd; the last
#     stage's loss is every stage's. A 4-stage run prints one rank's validation losses.
val=(--total_batch_size 512 --num_iteration 6 --input_val_bin "$g/tiny_shard.bin" --val_loss_every 3 --val_max_steps 3)
"$build/gpt2" "${deep[@]}" "${val[@]}" >"$tmp/val1.out" 2>&1 || bad "1-rank validation run exited $?"
timeout 120 "${mpi[@]}" -np 4 "$build/gpt2" "${deep[@]}" "${val[@]}" --pipeline_parallel 4 >"$tmp/val4.out" 2>&1 ||
  bad "PP=4 validation run exited $?"
a=$(grep '^val loss' "$tmp/val1.out") b=$(grep '^val loss' "$tmp/val4.out")
[[ -n $a && $a == "$b" && $(grep -c '^val loss' "$tmp/val4.out") -eq 2 ]] && ok ||
  bad "PP=4 validation losses differ from one rank's: '$a' vs '$b'"
# on p2pccl, 2 stages x 2 chunks (the evaluation's messages go round the ring too)
if full; then
  timeout 120 "${mpi[@]}" -np 2 "$build/gpt2" "${deep[@]}" "${val[@]}" --pipeline_parallel 2 \
    --virtual_pipeline_parallel 2 "${dev[@]}" >"$tmp/valp.out" 2>&1 || bad "p2pccl PP=2 x VPP=2 validation run exited $?"
  b=$(grep '^val loss' "$tmp/valp.out")
  [[ -n $a && $a == "$b" ]] && ok || bad "p2pccl PP=2 x VPP=2 validation losses differ from one rank's: '$a' vs '$b'"
fi

# 3c. The precision checker under PP: each stage records its own modules and ops, each
#     micro-batch's backward named by its own forward although 1F1B interleaves them. Level 2
#     (every op) with md5s, the 4-layer LLaMA-3 on 2 stages x 2 chunks (interleaved, bitwise
#     equal to one rank): every record of the two ranks' files has its twin, same md5, among
#     the one-rank run's (step, micro-step, layer, kind, tensor, name and the occurrence of
#     that key), and together they cover all of them.
pcargs=("${deepl[@]}" "${noclip[@]}" --num_iteration 2)
"$build/llama3" "${pcargs[@]}" --precision_check "level=2,path=$tmp/pc1,format=md5" >"$tmp/pc1.out" 2>&1 ||
  bad "1-rank precision-check run exited $?: $(tail -3 "$tmp/pc1.out")"
timeout 120 "${mpi[@]}" -np 2 "$build/llama3" "${pcargs[@]}" --pipeline_parallel 2 --virtual_pipeline_parallel 2 \
  --pipeline_schedule 1f1b --precision_check "level=2,path=$tmp/pc2,format=md5" >"$tmp/pc2.out" 2>&1 ||
  bad "PP=2 x VPP=2 precision-check run exited $?: $(tail -3 "$tmp/pc2.out")"
pc_verdict=$(awk '
  FNR == 1 { nf++ }
  /^#/ { next }
  { k = $2 SUBSEP $3 SUBSEP $4 SUBSEP $6 SUBSEP $7 SUBSEP $8
    if (nf == 1) { one[k, ++n1[k]] = $17; total++; next }
    if (FILENAME != cur) { cur = FILENAME; delete nr }
    c = ++nr[k]; seen++
    if (!((k, c) in one)) missing++
    else if (one[k, c] != $17) differ++
    else { matched++; got[k, c] = 1 } }
  END { for (x in one) if (!(x in got)) uncovered++
    printf "%d %d %d %d %d %d", total, seen, matched, differ + 0, missing + 0, uncovered + 0 }' \
  "$tmp"/pc1/*/precision_check_rank_0.tsv "$tmp"/pc2/*/precision_check_rank_0.tsv "$tmp"/pc2/*/precision_check_rank_1.tsv)
read -r pc_total pc_seen pc_matched pc_differ pc_missing pc_uncovered <<<"$pc_verdict"
if [[ ${pc_total:-0} -gt 1000 && $pc_matched -eq $pc_total && $pc_seen -eq $pc_total && $pc_uncovered -eq 0 ]]; then
  echo "precision check under PP=2 x VPP=2: all $pc_total level-2 records equal to one rank's"; ok
else
  bad "precision check under PP=2 x VPP=2: one rank $pc_total records, PP $pc_seen: $pc_matched equal, $pc_differ differ, $pc_missing missing, $pc_uncovered not covered"
fi

# 4. --output_checkpoint gathers every stage's (and TP rank's) tensors: with no steps the
#    file is the input, byte for byte.
none=(--num_iteration 0 --lr_decay_iters 1)
runn 4 gpt2 "$tmp/ck0" "${gpt2[@]}" "${none[@]}" --pipeline_parallel 2 --tensor_parallel 2 --output_checkpoint "$tmp/ck0.bin"
cmp -s "$g/tiny_gpt2.bin" "$tmp/ck0.bin" && ok || bad "PP=2 x TP=2 with 0 steps: the written checkpoint differs from its input"

# 4b. LoRA under PP: the adapters' initial draws follow the whole model's adapter list (a stage
#     draws past the other stages'), and the adapter file gathers every stage's: LLaMA-3 on 2
#     stages gives one rank's losses and file bitwise.
lora=(--lora_rank 4 --lora_alpha 8 --learning_rate 0.01 --total_batch_size 256)
run1 llama3 "$tmp/lo1" "${llama[@]}" "${lora[@]}" --lora_save_path "$tmp/lo1.lora"
runn 2 llama3 "$tmp/lo2" "${llama[@]}" "${lora[@]}" --pipeline_parallel 2 --lora_save_path "$tmp/lo2.lora"
same "llama3 LoRA PP=2 vs 1 rank" "$tmp/lo1" "$tmp/lo2"
cmp -s "$tmp/lo1.lora" "$tmp/lo2.lora" && ok || bad "LoRA PP=2: the adapter file differs from one rank's"

# 5. Bad grids: exit 2, one line naming the flag and the numbers (expect_refuse: mpi_common.bash).
expect_refuse "more stages than layers" "--pipeline_parallel: 4 stages for GPT-2's 2 layers" \
  -np 4 "$build/gpt2" "${gpt2[@]}" --pipeline_parallel 4
expect_refuse "TP x PP not dividing the world" "--tensor_parallel 2 x --pipeline_parallel 2: 4 does not divide the 6 ranks" \
  -np 6 "$build/gpt2" "${deep[@]}" --tensor_parallel 2 --pipeline_parallel 2
expect_refuse "more chunks than layers" \
  "--pipeline_parallel 2 x --virtual_pipeline_parallel 2: 4 chunks for GPT-2's 2 layers" \
  -np 2 "$build/gpt2" "${gpt2[@]}" --pipeline_parallel 2 --virtual_pipeline_parallel 2
expect_refuse "virtual stages without stages" "--virtual_pipeline_parallel 2: needs --pipeline_parallel P > 1" \
  -np 2 "$build/gpt2" "${deep[@]}" --virtual_pipeline_parallel 2

# 6. A stage that dies mid-schedule (killed with SIGKILL after a second) stops the job: mpirun
#    exits non-zero well before the timeout instead of leaving the other stage waiting.
start=$(date +%s)
timeout 60 "${mpi[@]}" -np 2 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 1; kill -9 $$) & fi; exec "$0" "$@"' \
  "$build/gpt2" "${deep[@]}" --num_iteration 100000 --pipeline_parallel 2 >"$tmp/kill.out" 2>&1
rc=$? took=$(($(date +%s) - start))
if [[ $rc -ne 0 && $rc -ne 124 && $took -lt 50 ]]; then echo "killed stage: the job stopped (exit $rc) in $took s"; ok
else bad "killed stage: exit $rc after $took s (124: hung until the timeout)"; fi

echo "pp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
