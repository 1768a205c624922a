#!/usr/bin/env bash
# Activation recomputation (--activation_recompute, InfiniTrain's --recompute_* flags): every
# method gives bitwise the losses of the run without it (the recomputed forward is the same
# arithmetic), for GPT-2, LLaMA-3 and Mixtral (with its auxiliary loss; also on 2 stages x 2
# chunks), and in 3-D (DP x TP + SP x PP x VPP, counted per chunk); the peak memory of a step
# falls; selective granularity and a method without its layer count are refused in one line.
# Usage: recompute.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
steps=6
. "$src/tests/e2e/mpi_common.bash"
g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3 x=$src/tests/fixtures/mixtral
common=(--batch_size 4 --sequence_length 32 --num_iteration 6 --optimizer adamw --learning_rate 0.001 --grad_clip 1.0)
deep=(--input_bin "$g/tiny_shard.bin" --n_layer 4 --n_head 4 --n_embd 32 --block_size 32 --vocab_size 257 "${common[@]}")
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" "${common[@]}")

run() { # app, log, args...
  local app=$1 log=$2
  shift 2
  "$build/$app" "$@" --loss_log "$log" >"$log.out" 2>&1 || bad "$app $*: exit $?: $(tail -2 "$log.out")"
}
run gpt2 "$tmp/g0" "${deep[@]}"
run gpt2 "$tmp/g_each" "${deep[@]}" --activation_recompute
same "gpt2 full, every block" "$tmp/g0" "$tmp/g_each"
run gpt2 "$tmp/g_uni" "${deep[@]}" --activation_recompute --recompute_method uniform --recompute_num_layers 3
same "gpt2 uniform 3 (groups 3 + 1)" "$tmp/g0" "$tmp/g_uni"
run gpt2 "$tmp/g_blk" "${deep[@]}" --activation_recompute --recompute_method block --recompute_num_layers 2
same "gpt2 block 2" "$tmp/g0" "$tmp/g_blk"
run gpt2 "$tmp/g_off" "${deep[@]}" --activation_recompute --recompute_granularity none
same "gpt2 granularity none (off)" "$tmp/g0" "$tmp/g_off"
run llama3 "$tmp/l0" "${llama[@]}"
run llama3 "$tmp/l1" "${llama[@]}" --activation_recompute --dtype float32
same "llama3 full, every block" "$tmp/l0" "$tmp/l1"
# Mixtral with its auxiliary loss: a recomputed layer counts its routing when it runs again and
# its auxiliary loss's gradient joins there (without that join the losses drift from step 2);
# the routing counts and validation losses printed are the run's without recomputation.
mixtral=(--llmc_filepath "$x/tiny_mixtral.bin" --input_bin "$x/tiny_shard.bin" "${common[@]}" --moe_aux_loss_coeff 0.01
  --log_interval 3 --input_val_bin "$x/tiny_shard.bin" --val_loss_every 3 --val_max_steps 2)
run mixtral "$tmp/x0" "${mixtral[@]}"
run mixtral "$tmp/x1" "${mixtral[@]}" --activation_recompute
same "mixtral full, every block" "$tmp/x0" "$tmp/x1"
run mixtral "$tmp/xb" "${mixtral[@]}" --activation_recompute --recompute_method block --recompute_num_layers 1
same "mixtral block 1 (a recomputed layer, then a kept one)" "$tmp/x0" "$tmp/xb"
a=$(grep -E '^(experts|val loss)' "$tmp/x0.out") b=$(grep -E '^(experts|val loss)' "$tmp/x1.out")
[[ -n $a && $a == "$b" ]] && ok || bad "mixtral: routing counts or validation differ under recomputation: '$a' vs '$b'"

# The memory a step holds: a wider GPT-2, every block recomputed.
wide=(--input_bin "$g/tiny_shard.bin" --n_layer 6 --n_head 4 --n_embd 128 --block_size 64 --vocab_size 257
  --batch_size 8 --sequence_length 64 --num_iteration 2 --optimizer adamw)
peak() { sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' "$1" | tail -1; }
"$build/gpt2" "${wide[@]}" >"$tmp/w0.out" 2>&1
"$build/gpt2" "${wide[@]}" --activation_recompute >"$tmp/w1.out" 2>&1
a=$(peak "$tmp/w0.out") b=$(peak "$tmp/w1.out")
if [[ -n $a && -n $b && $b -lt $a ]]; then echo "peak used: $a MB without, $b MB with recomputation"; ok
else bad "peak used: $a MB without, $b MB with recomputation (expected lower)"; fi

if command -v mpirun >/dev/null 2>&1; then
  # InfiniTrain's recompute case 8 layout: the collectives of the recomputed blocks run again,
  # in the same order on every rank of a TP group.
  three=(--total_batch_size 512 --tensor_parallel 2 --sequence_parallel --pipeline_parallel 2 --virtual_pipeline_parallel 2)
  timeout 120 "${mpi[@]}" -np 8 "$build/gpt2" "${deep[@]}" "${three[@]}" --loss_log "$tmp/d0" >"$tmp/d0.out" 2>&1 ||
    bad "3-D run exited $?"
  timeout 120 "${mpi[@]}" -np 8 "$build/gpt2" "${deep[@]}" "${three[@]}" --activation_recompute --recompute_method uniform \
    --recompute_num_layers 3 --loss_log "$tmp/d1" >"$tmp/d1.out" 2>&1 || bad "3-D recompute run exited $?"
  same "3-D (DP2 x TP2+SP x PP2 x VPP2) with uniform 3" "$tmp/d0" "$tmp/d1"
  # Mixtral with its auxiliary loss on 2 stages x 2 chunks, interleaved 1F1B with 4
  # micro-batches (the 4-layer file: one layer a chunk, every one recomputed): each chunk's
  # recomputation runs while other micro-batches' forwards are pending, attaches its layer's
  # auxiliary loss there and counts its routing once.
  xpp=(--llmc_filepath "$x/tiny_mixtral_4l.bin" "${mixtral[@]:2}" --total_batch_size 512 --pipeline_parallel 2
    --virtual_pipeline_parallel 2 --pipeline_schedule 1f1b)
  timeout 120 "${mpi[@]}" -np 2 "$build/mixtral" "${xpp[@]}" --loss_log "$tmp/xp0" >"$tmp/xp0.out" 2>&1 ||
    bad "mixtral PP2 x VPP2 run exited $?"
  timeout 120 "${mpi[@]}" -np 2 "$build/mixtral" "${xpp[@]}" --activation_recompute --loss_log "$tmp/xp1" \
    >"$tmp/xp1.out" 2>&1 || bad "mixtral PP2 x VPP2 recompute run exited $?"
  same "mixtral PP2 x VPP2 interleaved, every block" "$tmp/xp0" "$tmp/xp1"
  a=$(grep -E '^(experts|val loss)' "$tmp/xp0.out") b=$(grep -E '^(experts|val loss)' "$tmp/xp1.out")
  [[ -n $a && $a == "$b" ]] && ok || bad "mixtral PP2 x VPP2: routing counts or validation differ under recomputation: '$a' vs '$b'"
else
  echo "SKIP: mpirun not found: the 3-D and Mixtral PP x VPP recomputation cases not run"
fi

refuse() { # what, expected substring, app, args...
  local what=$1 want=$2 app=$3
  shift 3
  "$build/$app" "$@" >"$tmp/r.out" 2>&1
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -qF -- "$want" "$tmp/r.out"; then echo "$what: $(grep -F -- "$want" "$tmp/r.out")"; ok
  else bad "$what: exit $rc: $(tail -2 "$tmp/r.out")"; fi
}
refuse "selective" "--recompute_granularity selective: not implemented" gpt2 "${deep[@]}" --activation_recompute \
  --recompute_granularity selective
refuse "uniform without a count" "--recompute_num_layers: 0; methods uniform and block need >= 1" gpt2 "${deep[@]}" \
  --activation_recompute --recompute_method uniform

echo "recompute: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
