#!/usr/bin/env bash
# Data-parallel training under mpirun (issue 8): N ranks with B per rank reproduce one rank
# with B and accumulation N BITWISE (N = 2, 4; losses compared as %.17g strings from
# --loss_log); ZeRO-1 within 1e-6 of DDP; a device without collectives (sim: staged through
# host memory) gives the same losses; rank 0 alone prints the step lines, with DP=N; flags or
# checkpoints that differ between ranks, a world size that does not divide the batch and a
# rank that dies all stop the job with a message naming the cause. Plus LLaMA-3 on 2 ranks
# and the collectives' unit test on 3 ranks (uneven chunks).
# Usage: ddp.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "data-parallel tests"

g=$src/tests/fixtures/gpt2
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --optimizer adamw --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)

run1() { # log, args...: one process, no MPI
  local log=$1
  shift
  "$build/gpt2" "$@" --loss_log "$log" >"$log.out" 2>&1 || bad "1-rank run exited $?: $(tail -3 "$log.out")"
}
runn() { # n, log, app, args...
  local n=$1 log=$2 app=$3
  shift 3
  timeout 120 "${mpi[@]}" -np "$n" "$build/$app" "$@" --loss_log "$log" >"$log.out" 2>&1 ||
    bad "$n-rank $app run exited $?: $(tail -5 "$log.out")"
}
same() { # what, a, b: identical loss logs (10 lines)
  if [[ -s $2 && $(wc -l <"$2") -eq 10 ]] && cmp -s "$2" "$3"; then ok; else
    bad "$1: losses differ"
    paste "$2" "$3" | head -10
  fi
}
near() { # what, a, b, tol
  if [[ -s $3 ]] && paste "$2" "$3" | awk -v t="$4" '{d=$2-$4; if (d<0) d=-d; if (d>t) {print "step " $1 ": " $2 " vs " $4; e=1}} END {exit e}'; then
    ok
  else
    bad "$1: losses differ by more than $4"
  fi
}

# 1. Bitwise: N ranks x B == 1 rank x B with accumulation N (the same global batches).
run1 "$tmp/one2" "${gpt2[@]}" --total_batch_size 256
runn 2 "$tmp/dp2" gpt2 "${gpt2[@]}"
same "2 ranks vs 1 rank with accumulation 2" "$tmp/one2" "$tmp/dp2"
run1 "$tmp/one4" "${gpt2[@]}" --total_batch_size 512
runn 4 "$tmp/dp4" gpt2 "${gpt2[@]}"
same "4 ranks vs 1 rank with accumulation 4" "$tmp/one4" "$tmp/dp4"
echo "losses, 1 rank accum 4 | 4 ranks (step 1, 10): $(sed -n '1p;10p' "$tmp/one4" | tr '\n' ' ')| $(sed -n '1p;10p' "$tmp/dp4" | tr '\n' ' ')"

# 2. Rank 0 alone prints: 10 step lines, all with DP=4, one header.
n=$(grep -c '^step ' "$tmp/dp4.out")
m=$(grep -c '^step .*DP=4, TP=1' "$tmp/dp4.out")
[[ $n -eq 10 && $m -eq 10 ]] && ok || bad "expected 10 step lines with DP=4 (rank 0 only), found $n ($m with DP=4)"
[[ $(grep -c '^data parallel: 4 ranks' "$tmp/dp4.out") -eq 1 ]] && ok || bad "expected one 'data parallel' header"

# 3. ZeRO-1: the same losses as DDP within 1e-6 (the clipping norm is summed per shard), and
#    a quarter of the optimizer state per rank.
runn 4 "$tmp/z4" gpt2 "${gpt2[@]}" --zero_stage 1
near "ZeRO-1 vs DDP, 4 ranks" "$tmp/dp4" "$tmp/z4" 1e-6
grep -q 'optimizer state per rank: 0.073 MB (unsharded 0.294 MB), ZeRO-1' "$tmp/z4.out" && ok ||
  bad "ZeRO-1 header lacks the per-rank optimizer memory: $(grep '^data parallel' "$tmp/z4.out")"

# 4. A backend without collectives (sim): staged through host memory, the CPU's collectives.
runn 2 "$tmp/sim2" gpt2 "${gpt2[@]}" --device sim
grep -q 'staged through host memory' "$tmp/sim2.out" && ok || bad "sim run does not say it stages through the host"
grep -q ' on sim:0,' "$tmp/sim2.out" && ok || bad "rank 0 should drive sim:0"
same "2 ranks on sim (staged) vs 1 rank on cpu with accumulation 2" "$tmp/one2" "$tmp/sim2"

# 5. LLaMA-3, 2 ranks.
l=$src/tests/fixtures/llama3
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --learning_rate 0.001)
"$build/llama3" "${llama[@]}" --total_batch_size 256 --loss_log "$tmp/lone2" >"$tmp/lone2.out" 2>&1 ||
  bad "llama3 1-rank run exited $?"
runn 2 "$tmp/ldp2" llama3 "${llama[@]}"
same "llama3: 2 ranks vs 1 rank with accumulation 2" "$tmp/lone2" "$tmp/ldp2"

# 5b. Mixtral, 2 ranks (experts' token counts differ per rank; the buckets still start in one
#     order on every rank).
m=$src/tests/fixtures/mixtral
mixtral=(--llmc_filepath "$m/tiny_mixtral.bin" --input_bin "$m/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10 --learning_rate 0.001 --ddp_bucket_kb 16)
"$build/mixtral" "${mixtral[@]}" --total_batch_size 256 --loss_log "$tmp/mone2" >"$tmp/mone2.out" 2>&1 ||
  bad "mixtral 1-rank run exited $?"
runn 2 "$tmp/mdp2" mixtral "${mixtral[@]}"
same "mixtral: 2 ranks vs 1 rank with accumulation 2" "$tmp/mone2" "$tmp/mdp2"

# 5c. Buckets all-reduced while backward runs: small buckets (8 KiB, 18 of them for this
#     model), with and without accumulation on each rank, still bitwise equal to one rank.
runn 2 "$tmp/ov2" gpt2 "${gpt2[@]}" --ddp_bucket_kb 8
same "2 ranks, 8 KiB buckets overlapped with backward, vs 1 rank" "$tmp/one2" "$tmp/ov2"
line=$(grep '^DDP: ' "$tmp/ov2.out")
early=$(echo "$line" | sed -n 's/^DDP: \([0-9]*\) of \([0-9]*\) gradient buckets.*/\1/p')
total=$(echo "$line" | sed -n 's/^DDP: \([0-9]*\) of \([0-9]*\) gradient buckets.*/\2/p')
if [[ -n $early && $total -gt 1 && $early -ge $((total / 2)) ]]; then ok; else
  bad "expected most of the buckets to start during backward: '$line'"
fi
echo "overlap: $line"
# With accumulation on each rank the sum is (g0 + g2) + (g1 + g3), not one rank's
# ((g0 + g1) + g2) + g3: equal within rounding, and bitwise whatever the bucket size (the
# earlier micro-steps' sum is added bucket by bucket as each becomes final).
runn 2 "$tmp/ova" gpt2 "${gpt2[@]}" --ddp_bucket_kb 8 --total_batch_size 512
runn 2 "$tmp/ovb" gpt2 "${gpt2[@]}" --total_batch_size 512
same "2 ranks with accumulation 2 each: 8 KiB buckets vs one bucket" "$tmp/ovb" "$tmp/ova"
near "2 ranks with accumulation 2 each vs 1 rank with accumulation 4" "$tmp/one4" "$tmp/ova" 1e-6

# 6. The collectives, on 3 ranks (chunks of uneven length).
timeout 120 "${mpi[@]}" -np 3 "$build/test_dist" >"$tmp/td.out" 2>&1 && ok || bad "test_dist on 3 ranks: $(tail -5 "$tmp/td.out")"

# 7. Bad input stops every rank with a message naming the cause, never a hang.
expect_stop() { # name, expected substring, mpirun args...
  local name=$1 want=$2
  shift 2
  local t0=$SECONDS
  timeout 60 "${mpi[@]}" "$@" >"$tmp/bad.out" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then bad "$name: exit status 0"; return; fi
  if [[ $rc -eq 124 ]]; then bad "$name: still running after 60 s (hang)"; return; fi
  if ! grep -qF -- "$want" "$tmp/bad.out"; then bad "$name: output lacks '$want': $(tail -5 "$tmp/bad.out")"; return; fi
  ! grep -q '^step ' "$tmp/bad.out" || [[ $name == "dead rank" ]] || { bad "$name: a step ran"; return; }
  echo "$name: stopped in $((SECONDS - t0)) s: $(grep -F -- "$want" "$tmp/bad.out" | head -1)"
  ok
}
expect_stop "flags differ" "the ranks were given different flags: --learning_rate differs" \
  -np 1 "$build/gpt2" "${gpt2[@]}" : -np 1 "$build/gpt2" "${gpt2[@]}" --learning_rate 0.002
# The same flag, different files: each rank reads ck.bin in its own working directory.
mkdir -p "$tmp/a" "$tmp/b"
cp "$g/tiny_gpt2.bin" "$tmp/a/ck.bin"
"$build/gpt2" "${gpt2[@]}" --num_iteration 1 --output_checkpoint "$tmp/b/ck.bin" >/dev/null 2>&1 || bad "writing a checkpoint"
ck=(--llmc_filepath ck.bin --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32)
expect_stop "checkpoints differ" "the ranks hold different initial parameters (the checkpoint ck.bin differs" \
  -np 1 -wdir "$tmp/a" "$build/gpt2" "${ck[@]}" : -np 1 -wdir "$tmp/b" "$build/gpt2" "${ck[@]}"
expect_stop "batch not divisible" "is not a multiple of batch_size*sequence_length*ranks = 4*32*4 = 512" \
  -np 4 "$build/gpt2" "${gpt2[@]}" --total_batch_size 256
# A rank killed mid-training: mpirun aborts the job (OpenMPI's default on a non-zero exit).
expect_stop "dead rank" "exited on signal 9" \
  -np 1 "$build/gpt2" "${gpt2[@]}" --num_iteration 1000000 --quiet : \
  -np 1 timeout -s KILL 3 "$build/gpt2" "${gpt2[@]}" --num_iteration 1000000 --quiet

echo "ddp: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
