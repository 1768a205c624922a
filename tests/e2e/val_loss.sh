#!/usr/bin/env bash
# --input_val_bin / --val_loss_every / --val_max_steps, as llm.c computes the validation loss:
#  - the training losses are bitwise the same with and without validation;
#  - the value is right: with --learning_rate 0 --lr_decay_style none the parameters never change, so with the
#    training shard as the validation shard the validation loss over K batches is the mean of
#    the first K steps' training losses (one batch each), within the 6 printed decimals;
#  - under DDP (2 ranks) each rank evaluates its share and the mean is printed once;
#  - --val_loss_every without --input_val_bin stops before training with exit 2;
#  - --input_val_bin without --val_loss_every trains as without it, and says the file is not read.
# Usage: val_loss.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
fix=$src/tests/fixtures/gpt2
gpt2=$build/gpt2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

base=(--llmc_filepath "$fix/tiny_gpt2.bin" --input_bin "$fix/tiny_shard.bin" --batch_size 2 --sequence_length 16
  --optimizer adamw --learning_rate 1e-3 --num_iteration 12)
val=(--input_val_bin "$fix/tiny_shard.bin" --val_loss_every 4 --val_max_steps 3)

# 1. Validation does not touch training.
"$gpt2" "${base[@]}" --quiet --loss_log "$tmp/plain.txt" || bad "plain run exited $?"
"$gpt2" "${base[@]}" "${val[@]}" --loss_log "$tmp/val.txt" >"$tmp/out.txt" 2>&1 || bad "validated run exited $?"
cmp -s "$tmp/plain.txt" "$tmp/val.txt" && ok || bad "training losses differ with validation on"
n=$(grep -c '^val loss [0-9]*\.[0-9]\{6\} | step  *[0-9]*/12$' "$tmp/out.txt")
[[ $n -eq 3 ]] && ok || bad "expected 3 'val loss' lines (steps 4, 8, 12), found $n"
[[ $(grep '^val loss' "$tmp/out.txt" | sed 's/.*step *//' | tr '\n' ' ') == "4/12 8/12 12/12 " ]] && ok ||
  bad "the val loss lines do not name steps 4, 8, 12: $(grep '^val loss' "$tmp/out.txt")"
# after step 4's line and before step 5's
awk '/^step +4\//{s=1} /^val loss/{if (s==1) s=2} /^step +5\//{exit !(s==2)}' "$tmp/out.txt" && ok ||
  bad "the first val loss is not printed after step 4"

# 2. The value, against the training losses of a run that does not learn.
check_mean() { # name K losses_file printed_val_loss
  awk -v k="$2" -v v="$4" 'NR <= k {s += $2} END {m = s / k; d = m - v; if (d < 0) d = -d; exit !(d <= 1e-6)}' "$3" &&
    ok || bad "$1: val loss $4 is not the mean of the first $2 training losses of $3"
}
"$gpt2" "${base[@]}" --learning_rate 0 --lr_decay_style none --input_val_bin "$fix/tiny_shard.bin" --val_loss_every 12 --val_max_steps 5 \
  --loss_log "$tmp/lr0.txt" >"$tmp/lr0_out.txt" 2>&1 || bad "lr 0 run exited $?"
v=$(sed -n 's/^val loss //p' "$tmp/lr0_out.txt")
[[ -n $v ]] && check_mean "1 rank" 5 "$tmp/lr0.txt" "$v" || bad "1 rank: no val loss"

# 3. DDP: 2 ranks, K=3 batches each = batches 0..5 = the first 3 steps' mean losses.
if command -v mpirun >/dev/null 2>&1; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS)
  . "$src/tests/e2e/mpi_asan.bash" # the sanitizer build's rank setup
  mpi_asan_setup
  export OMP_NUM_THREADS=1
  "${mpi[@]}" "$gpt2" "${base[@]}" --learning_rate 0 --lr_decay_style none --total_batch_size 64 \
    --input_val_bin "$fix/tiny_shard.bin" --val_loss_every 12 --val_max_steps 3 --loss_log "$tmp/ddp.txt" \
    >"$tmp/ddp_out.txt" 2>&1 || bad "DDP run exited $?"
  n=$(grep -c '^val loss' "$tmp/ddp_out.txt")
  [[ $n -eq 1 ]] && ok || bad "DDP: expected one val loss line (rank 0), found $n"
  v=$(sed -n 's/^val loss //p' "$tmp/ddp_out.txt")
  [[ -n $v ]] && check_mean "2 ranks" 3 "$tmp/ddp.txt" "$v" || bad "2 ranks: no val loss"
else
  echo "note: mpirun not found: the DDP case was not run"
fi

# 4. A bad combination stops before training.
"$gpt2" "${base[@]}" --val_loss_every 4 >"$tmp/e.txt" 2>"$tmp/err.txt"
rc=$?
[[ $rc -eq 2 ]] && grep -q -- '--val_loss_every: 4 needs --input_val_bin' "$tmp/err.txt" && ! grep -q '^step' "$tmp/e.txt" &&
  ok || bad "--val_loss_every without --input_val_bin: exit $rc, $(cat "$tmp/err.txt")"

# 5. --input_val_bin with --val_loss_every 0 (its default) trains and says the file is not read.
"$gpt2" "${base[@]}" --input_val_bin "$fix/tiny_shard.bin" --loss_log "$tmp/noval.txt" >"$tmp/nv.txt" 2>&1 ||
  bad "--input_val_bin alone exited $?"
grep -q -- '^validation: --input_val_bin .* is not read: --val_loss_every is 0' "$tmp/nv.txt" &&
  ! grep -q '^val loss' "$tmp/nv.txt" && cmp -s "$tmp/plain.txt" "$tmp/noval.txt" && ok ||
  bad "--input_val_bin without --val_loss_every: no note, or validation ran, or the losses differ"

echo "val_loss: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
