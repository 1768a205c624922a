#!/usr/bin/env bash
# The bad-step guard (src/train/guard.c): a NaN planted in one micro-step by the `faulty` test
# backend (tests/plugin/faulty.c: the CPU's kernels; IT_FAULTY_KERNEL=embedding_nan makes the
# IT_FAULTY_AT-th embedding forward write NaN) never reaches the weights:
#  1. one rank: step 4's update is skipped, said on one line and in its step line; the steps
#     after it equal, bitwise, a run that never saw that batch (the same run on cpu saved at
#     step 3 and resumed with its data position moved past batch 4);
#  2. two ranks, the NaN on rank 1 only: both skip (they read the same reduced loss), and the
#     run equals the 2-rank run that never saw that step's batches;
#  3. --max_skipped_steps 3 with three poisoned steps in a row stops the run after the third
#     with exit status 1, one line, and a checkpoint of the last good step's weights;
#  4. --loss_spike_zscore 3 on a shard whose batch 150 is random tokens: that step (z = 4.0; no
#     other step is above 1.5), and no other, is skipped (llm.c's detector: the mean and
#     deviation of the last 128 steps).
# Usage: bad_steps.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
export IT_BACKEND_PATH=$build/test-plugins
g=$src/tests/fixtures/gpt2
args=(--llmc_filepath "$g/tiny_gpt2.bin" --batch_size 4 --sequence_length 32 --optimizer adamw --learning_rate 0.001
  --grad_clip 1.0)

# resumed_past LOADDIR SKIP: a copy of checkpoint LOADDIR whose data position is SKIP batches on
# (per rank), printed as its path
resumed_past() {
  local dst=$tmp/moved.$RANDOM
  cp -r "$1" "$dst"
  /usr/bin/python3 - "$dst/trainer_state.json" "$2" <<'PY' || return 1
import json, sys
p, skip = sys.argv[1], int(sys.argv[2])
s = json.load(open(p))
ours = s["infinitrain_c"]
world = s["consumed_batches"] // max(ours["loader_step"], 1) if ours["loader_step"] else 1
s["consumed_batches"] += skip * world
ours["consumed_batches_all_ranks"] += skip * world
ours["loader_step"] += skip
json.dump(s, open(p, "w"), indent=2)
PY
  echo "$dst"
}
losses() { awk '{print $2}' "$1"; }

# 1. one rank
IT_FAULTY_KERNEL=embedding_nan IT_FAULTY_AT=4 "$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" \
  --device faulty --num_iteration 10 --loss_log "$tmp/a" >"$tmp/a.out" 2>&1
rc=$?
[[ $rc -eq 0 ]] && ok || bad "poisoned run exited $rc: $(tail -3 "$tmp/a.out")"
line=$(grep '^step 4: update skipped' "$tmp/a.out")
[[ $line == "step 4: update skipped: the loss is nan (1 skipped so far, 1 in a row)" ]] && ok ||
  bad "no skip line for step 4: '$line'"
[[ $(grep -c 'update skipped' "$tmp/a.out") -eq 2 ]] && grep -q '^step    4/10 .* | update skipped, 1 skipped$' "$tmp/a.out" &&
  grep -q '^step   10/10 .* | updated, 1 skipped$' "$tmp/a.out" && ok || bad "the step lines do not count the skip: $(grep '^step' "$tmp/a.out" | sed -n '4p;10p')"
"$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" --num_iteration 3 --save "$tmp/ck1" \
  --save_interval 3 >"$tmp/b0.out" 2>&1 || bad "the 3-step run exited $?: $(tail -3 "$tmp/b0.out")"
moved=$(resumed_past "$tmp/ck1/checkpoint_step_000003" 1) || bad "could not move the checkpoint's data position"
"$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" --num_iteration 9 --load "$moved" --loss_log "$tmp/b" \
  >"$tmp/b.out" 2>&1 || bad "the resumed run exited $?: $(tail -3 "$tmp/b.out")"
if [[ -s $tmp/b ]] && cmp -s <(losses "$tmp/a" | sed -n '5,10p') <(losses "$tmp/b"); then
  echo "one rank: steps 5-10 after the skipped step 4 equal, bitwise, the run that never saw batch 4"
  ok
else
  bad "one rank: after the skip the losses differ from the run without batch 4: $(paste <(losses "$tmp/a" | sed -n '5,10p') <(losses "$tmp/b"))"
fi
grep -q '^4 nan$' "$tmp/a" && ok || bad "the loss log's step 4 is not nan: $(sed -n 4p "$tmp/a")"

# 2. two ranks, rank 1 poisoned
if command -v mpirun >/dev/null 2>&1; then
  mpi+=(-x IT_BACKEND_PATH -x IT_FAULTY_KERNEL -x IT_FAULTY_AT -x IT_FAULTY_RANK)
  IT_FAULTY_KERNEL=embedding_nan IT_FAULTY_AT=4 IT_FAULTY_RANK=1 timeout 120 "${mpi[@]}" -np 2 "$build/gpt2" \
    "${args[@]}" --input_bin "$g/tiny_shard.bin" --device faulty --num_iteration 8 --loss_log "$tmp/a2" \
    >"$tmp/a2.out" 2>&1 || bad "2-rank poisoned run exited $?: $(tail -3 "$tmp/a2.out")"
  grep -q '^step 4: update skipped: the loss is nan' "$tmp/a2.out" && ok || bad "2 ranks: no skip at step 4"
  timeout 120 "${mpi[@]}" -np 2 "$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" --num_iteration 3 \
    --save "$tmp/ck2" --save_interval 3 >"$tmp/b20.out" 2>&1 || bad "2-rank 3-step run exited $?"
  moved=$(resumed_past "$tmp/ck2/checkpoint_step_000003" 1) || bad "could not move the 2-rank checkpoint's data position"
  timeout 120 "${mpi[@]}" -np 2 "$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" --num_iteration 7 \
    --load "$moved" --loss_log "$tmp/b2" >"$tmp/b2.out" 2>&1 || bad "2-rank resumed run exited $?: $(tail -3 "$tmp/b2.out")"
  if [[ -s $tmp/b2 ]] && cmp -s <(losses "$tmp/a2" | sed -n '5,8p') <(losses "$tmp/b2"); then
    echo "two ranks, NaN on rank 1: both skipped; steps 5-8 equal the 2-rank run that never saw those batches"
    ok
  else
    bad "two ranks: after the skip the losses differ: $(paste <(losses "$tmp/a2" | sed -n '5,8p') <(losses "$tmp/b2"))"
  fi
else
  echo "SKIP: mpirun not found (scripts/setup.sh installs openmpi-bin): the 2-rank case not run"
fi

# 3. three poisoned steps in a row with --max_skipped_steps 3
IT_FAULTY_KERNEL=embedding_nan IT_FAULTY_AT=4 IT_FAULTY_COUNT=3 "$build/gpt2" "${args[@]}" \
  --input_bin "$g/tiny_shard.bin" --device faulty --num_iteration 10 --max_skipped_steps 3 --save "$tmp/ck3" \
  --save_interval 100 --loss_log "$tmp/c" >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
want="gpt2: stopped after step 6 of 10: 3 updates in a row were skipped (--max_skipped_steps 3); the weights are the last good step's; saved $tmp/ck3/checkpoint_step_000006"
[[ $rc -eq 1 && $(cat "$tmp/c.err") == "$want" ]] && ok || bad "--max_skipped_steps 3: exit $rc, stderr '$(cat "$tmp/c.err")'"
[[ $(grep -c '^step [456]: update skipped' "$tmp/c.out") -eq 3 ]] && ! grep -q '^step    7/10' "$tmp/c.out" && ok ||
  bad "--max_skipped_steps 3: expected skips at steps 4-6 and no step 7"
"$build/gpt2" "${args[@]}" --input_bin "$g/tiny_shard.bin" --num_iteration 3 --output_checkpoint "$tmp/w3.bin" \
  >/dev/null 2>&1 || bad "3-step run with --output_checkpoint exited $?"
"$build/it-ckpt" to-llmc "$tmp/ck3/checkpoint_step_000006" "$tmp/w6.bin" >"$tmp/conv.out" 2>&1 ||
  bad "it-ckpt to-llmc of the stop's checkpoint: $(tail -2 "$tmp/conv.out")"
cmp -s "$tmp/w3.bin" "$tmp/w6.bin" && ok || bad "the stop's checkpoint does not hold step 3's weights"

# 4. a loss spike: batch 150 of 160 is random tokens
/usr/bin/python3 - "$g/tiny_shard.bin" "$tmp/spike.bin" <<'PY'
import random, struct, sys
raw = open(sys.argv[1], "rb").read()
h = list(struct.unpack("<256i", raw[:1024]))
toks = list(struct.unpack("<%dH" % h[2], raw[1024:1024 + 2 * h[2]]))
bt = 4 * 32
out = []
while len(out) < 160 * bt + 1:
    out += toks
out = out[:160 * bt + 1]
rng = random.Random(7)
for i in range(149 * bt, 150 * bt + 1):
    out[i] = rng.randrange(257)
h[2] = len(out)
open(sys.argv[2], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(out), *out))
PY
"$build/gpt2" "${args[@]}" --input_bin "$tmp/spike.bin" --num_iteration 155 --loss_spike_zscore 3 \
  --log_interval 1000 >"$tmp/s.out" 2>&1 || bad "spike run exited $?: $(tail -3 "$tmp/s.out")"
got=$(grep 'update skipped:' "$tmp/s.out")
if [[ $(grep -c 'update skipped:' "$tmp/s.out") -eq 1 && $got == "step 150: update skipped: the loss "*" standard deviations above the mean "*" of the last 128 steps (1 skipped so far, 1 in a row)" ]]; then
  echo "spike: $got"
  ok
else
  bad "--loss_spike_zscore 3: expected one skip, at step 150: '$got'"
fi

echo "bad_steps: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
