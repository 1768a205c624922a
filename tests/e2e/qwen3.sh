#!/usr/bin/env bash
# Qwen3 composes with the rest: each parallel layout against its one-rank equivalent, and the
# single-process mechanisms against their plain run, on the tiny Qwen3 fixtures
# (tests/fixtures/qwen3: a Hugging Face model whose heads are 16 wide on a 32-wide model with
# 4 query and 2 kv heads, its tied twin, and InfiniTrain-Test's llm.c-style file with 4 layers).
#   TP=2, TP=2+SP, TP=4 (kv heads kept): q_norm/k_norm replicated, their gradients summed
#   PP=2 (1f1b), tied PP=2 (the last stage's copy of wte, gradients summed), PP=2 x VPP=2
#   DP=2 ZeRO-2 against one rank with accumulation 2; CP=2 (p2p and a2a); LoRA TP=2;
#   bf16 TP=2; recompute; exact resume; sim; the precision checker and the profiler;
#   it-ckpt from-llmc; HF export and re-import mid-run.
# Tolerances: 1e-5 where a layout changes a summation order (tp.sh says why), bitwise where it
# does not, 1e-2 for bf16 (one bf16 ulp is 2^-8 relative). Under the sanitizers one case per
# mechanism new to Qwen3 runs (TP with head norms, tied PP, CP).
# Usage: qwen3.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "Qwen3 composition tests"
san=0
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  san=1
  echo "note: a sanitizer build: one case per Qwen3 mechanism (the release build runs every case)"
fi
full() { [[ $san -eq 0 ]]; }

q=$src/tests/fixtures/qwen3 shard=$src/tests/fixtures/llama3/tiny_shard_u16.bin
common=(--input_bin "$shard" --batch_size 4 --sequence_length 32 --num_iteration 10 --optimizer adamw
  --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)
hf=(--hf_model "$q/qwen3" "${common[@]}")
tied=(--hf_model "$q/qwen3_tied" "${common[@]}")
deep=(--llmc_filepath "$q/tiny_qwen3_4l.bin" "${common[@]}")

# 1. Tensor parallelism: TP=2 cuts 4 query heads and 2 kv heads in two; TP=4 keeps each kv head
#    on two ranks. q_norm and k_norm see only this rank's heads: without their all-reduce the
#    replicas drift apart and the losses with them (measured: 9.5e-5 by step 5, 10x the bound).
run1 qwen3 "$tmp/h1" "${hf[@]}"
runn 2 qwen3 "$tmp/h2" "${hf[@]}" --tensor_parallel 2
within "qwen3 TP=2 vs TP=1" "$tmp/h1" "$tmp/h2" 1e-5
if full; then
  runn 2 qwen3 "$tmp/hs2" "${hf[@]}" --tensor_parallel 2 --sequence_parallel
  within "qwen3 TP=2+SP vs TP=1" "$tmp/h1" "$tmp/hs2" 1e-5
  runn 4 qwen3 "$tmp/h4" "${hf[@]}" --tensor_parallel 4
  within "qwen3 TP=4 (kv heads kept) vs TP=1" "$tmp/h1" "$tmp/h4" 1e-5
  run1 qwen3 "$tmp/t1" "${tied[@]}"
  runn 2 qwen3 "$tmp/t2" "${tied[@]}" --tensor_parallel 2 --sequence_parallel
  within "qwen3 tied TP=2+SP vs TP=1" "$tmp/t1" "$tmp/t2" 1e-5
fi

# 2. Pipeline parallelism, with accumulation 4 so the schedules interleave micro-batches.
#    Untied, 1f1b and the stage split leave every sum's order as one rank has it: bitwise.
#    Tied: the last stage holds a copy of wte as its head, and the two gradients are summed
#    over the pipeline once all micro-batches are in, where one rank adds head and embedding
#    per micro-batch: another order, 1e-6 (as pp.sh's GPT-2; measured 2.4e-7, one ulp).
run1 qwen3 "$tmp/tp1" "${tied[@]}" --total_batch_size 512 --grad_clip 0
runn 2 qwen3 "$tmp/tp2" "${tied[@]}" --total_batch_size 512 --grad_clip 0 --pipeline_parallel 2 \
  --pipeline_schedule 1f1b
within "qwen3 tied PP=2 1f1b vs 1 rank" "$tmp/tp1" "$tmp/tp2" 1e-6
if full; then
  run1 qwen3 "$tmp/d1" "${deep[@]}" --total_batch_size 512 --grad_clip 0
  runn 2 qwen3 "$tmp/d22" "${deep[@]}" --total_batch_size 512 --grad_clip 0 --pipeline_parallel 2 \
    --virtual_pipeline_parallel 2 --pipeline_schedule 1f1b
  same "4-layer qwen3 PP=2 x VPP=2 interleaved vs 1 rank" "$tmp/d1" "$tmp/d22"
fi

# 3. Data parallelism with ZeRO-2 (the gradients reduce-scattered, the state sharded) against
#    one rank with accumulation 2: the same global batches; the DP mean of two is exact.
if full; then
  run1 qwen3 "$tmp/acc2" "${hf[@]}" --total_batch_size 256
  runn 2 qwen3 "$tmp/z2" "${hf[@]}" --zero_stage 2
  within "qwen3 DP=2 ZeRO-2 vs 1 rank with accumulation 2" "$tmp/acc2" "$tmp/z2" 1e-5
fi

# 4. Context parallelism: each rank's 16 positions, RoPE at their own positions, attention over
#    the group (p2p ring; a2a trades heads for positions). 1e-5: the ring's online softmax adds
#    the blocks' partial sums in another order.
runn 2 qwen3 "$tmp/c2" "${hf[@]}" --context_parallel 2
within "qwen3 CP=2 p2p vs CP=1" "$tmp/h1" "$tmp/c2" 1e-5
if full; then
  runn 2 qwen3 "$tmp/c2a" "${hf[@]}" --context_parallel 2 --cp_comm_type a2a
  within "qwen3 CP=2 a2a vs CP=1" "$tmp/h1" "$tmp/c2a" 1e-5
fi

# 5. LoRA (InfiniTrain's default targets for Qwen3: c_attn, c_proj, c_fc, c_fc2) under TP=2;
#    bf16 autocast under TP=2.
if full; then
  lora=(--lora_rank 4 --lora_alpha 8)
  run1 qwen3 "$tmp/lo1" "${hf[@]}" "${lora[@]}"
  runn 2 qwen3 "$tmp/lo2" "${hf[@]}" "${lora[@]}" --tensor_parallel 2
  within "qwen3 LoRA TP=2 vs TP=1" "$tmp/lo1" "$tmp/lo2" 1e-5
  grep -q '^LoRA: rank 4, alpha 8, 10 linear layers (c_attn,c_proj,c_fc,c_fc2)' "$tmp/lo1.out" && ok ||
    bad "qwen3 LoRA: the banner does not name the default targets: $(grep -m1 lora "$tmp/lo1.out")"
  run1 qwen3 "$tmp/b1" "${hf[@]}" --dtype bfloat16
  runn 2 qwen3 "$tmp/b2" "${hf[@]}" --dtype bfloat16 --tensor_parallel 2
  within "qwen3 bf16 TP=2 vs TP=1" "$tmp/b1" "$tmp/b2" 1e-2
fi

# 6. Recompute (every block's activations dropped and recomputed at backward): bitwise. sim
#    (the reference backend through the full dispatch): bitwise.
if full; then
  run1 qwen3 "$tmp/rc" "${hf[@]}" --activation_recompute
  same "qwen3 recompute vs none" "$tmp/h1" "$tmp/rc"
  run1 qwen3 "$tmp/sim" "${hf[@]}" --device sim
  same "qwen3 sim vs cpu" "$tmp/h1" "$tmp/sim"
fi

# 7. Exact resume: 12 steps saving every 4, resumed from step 8, the last 4 losses the same
#    bytes (tied, so the checkpoint holds the head once).
if full; then
  d=$tmp/res
  mkdir -p "$d"
  run1 qwen3 "$d/full" "${tied[@]}" --num_iteration 12 --save "$d/ck" --save_interval 4
  run1 qwen3 "$d/res" "${tied[@]}" --num_iteration 12 --load "$d/ck/checkpoint_step_000008"
  if [[ $(wc -l <"$d/res") -eq 4 ]] && cmp -s <(tail -n 4 "$d/full") "$d/res"; then
    ok
    echo "qwen3 tied resume from step 8: steps 9-12 bitwise"
  else
    bad "qwen3 resume: the resumed losses differ (uninterrupted | resumed)"
    paste <(tail -n 4 "$d/full") "$d/res"
  fi
fi

# 8. The precision checker (module outputs, q_norm and k_norm among them) and the profiler.
if full; then
  run1 qwen3 "$tmp/pc" "${hf[@]}" --num_iteration 1 --precision_check "path=$tmp/prec,level=1,save_tensors=true"
  grep -rqs 'attn.q_norm' "$tmp/prec" && ok || bad "precision check: no attn.q_norm record under $tmp/prec"
  run1 qwen3 "$tmp/pc2" "${hf[@]}" --num_iteration 1 --device sim \
    --precision_check "path=$tmp/prec2,level=1,save_tensors=true"
  "$build/it-precision-compare" "$tmp/prec" "$tmp/prec2" --atol 0 --rtol 0 >"$tmp/pcmp.txt" 2>&1 && ok ||
    bad "precision check: cpu and sim records differ: $(tail -3 "$tmp/pcmp.txt")"
  run1 qwen3 "$tmp/pf" "${hf[@]}" --num_iteration 2 --profile "$tmp/prof"
  [[ -s $tmp/prof.report.rank0 ]] && grep -q rmsnorm "$tmp/prof.report.rank0" && ok ||
    bad "profiler: no report naming rmsnorm: $(ls "$tmp" | grep prof)"
fi

# 9. Files: InfiniTrain-Test's llm.c-style file through it-ckpt and back; a model read from
#    Hugging Face whose heads are not n_embd / n_head wide refused there (one line, the way out).
if full; then
  "$build/it-ckpt" from-llmc qwen3 "$q/tiny_qwen3_4l.bin" "$tmp/ckd" >"$tmp/ck.out" 2>&1 && ok ||
    bad "it-ckpt from-llmc qwen3: $(tail -2 "$tmp/ck.out")"
  "$build/it-ckpt" to-llmc "$tmp/ckd" "$tmp/back.bin" >"$tmp/ck2.out" 2>&1 && cmp -s "$tmp/back.bin" "$q/tiny_qwen3_4l.bin" &&
    ok || bad "it-ckpt to-llmc: not the same bytes: $(tail -2 "$tmp/ck2.out")"
  "$build/qwen3" "${hf[@]}" --num_iteration 1 --output_checkpoint "$tmp/no.bin" >"$tmp/no.out" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && grep -q 'no head_dim slot.*--output_hf' "$tmp/no.out" && ok ||
    bad "qwen3 --output_checkpoint of 16-wide heads on n_embd 32 / 4: exit $rc: $(tail -2 "$tmp/no.out")"
  "$build/qwen3" "${hf[@]}" --num_iteration 10 --output_hf "$tmp/out_hf" >"$tmp/ohf.out" 2>&1 &&
    "$build/qwen3" --hf_model "$tmp/out_hf" "${common[@]}" --num_iteration 1 --loss_log "$tmp/again" >"$tmp/ag.out" 2>&1 &&
    ok || bad "qwen3 --output_hf and back: $(tail -2 "$tmp/ohf.out" "$tmp/ag.out")"
fi

echo "qwen3: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
