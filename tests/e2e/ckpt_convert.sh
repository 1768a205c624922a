#!/usr/bin/env bash
# it-ckpt: llm.c file -> checkpoint directory -> llm.c file gives back the same bytes (GPT-2,
# LLaMA-3, Mixtral); the model of a trained run's checkpoint converts to exactly the file
# --output_checkpoint writes at the same step; `show` lists InfiniTrain's names; bad input
# stops with exit 2 and one line.
# Usage: ckpt_convert.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
tool=$build/it-ckpt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

for m in gpt2:gpt2/tiny_gpt2.bin llama3:llama3/tiny_llama3.bin mixtral:mixtral/tiny_mixtral.bin; do
  app=${m%%:*} f=$src/tests/fixtures/${m#*:}
  "$tool" from-llmc "$app" "$f" "$tmp/$app" >/dev/null || bad "$app: from-llmc exited $?"
  "$tool" to-llmc "$tmp/$app" "$tmp/$app.bin" >/dev/null || bad "$app: to-llmc exited $?"
  cmp -s "$f" "$tmp/$app.bin" && ok || bad "$app: the round trip changed the llm.c file"
done
"$tool" show "$tmp/gpt2" >"$tmp/show.txt" || bad "show exited $?"
for name in transformer.wte.weight lm_head.weight transformer.h.1.attn.c_proj.weight transformer.h.0.attn.bias \
  '"global_step": 0'; do
  grep -q -- "$name" "$tmp/show.txt" && ok || bad "show does not list $name"
done

fix=$src/tests/fixtures/gpt2
run=(--llmc_filepath "$fix/tiny_gpt2.bin" --input_bin "$fix/tiny_shard.bin" --batch_size 2 --sequence_length 16
  --optimizer adamw --learning_rate 1e-3 --num_iteration 6 --quiet)
"$build/gpt2" "${run[@]}" --save "$tmp/ck" --save_interval 6 --output_checkpoint "$tmp/out.bin" || bad "training exited $?"
"$tool" to-llmc "$tmp/ck/checkpoint_step_000006" "$tmp/ck6.bin" >/dev/null || bad "to-llmc of a trained run exited $?"
cmp -s "$tmp/out.bin" "$tmp/ck6.bin" && ok || bad "the step-6 checkpoint differs from --output_checkpoint's file"
# a model-only checkpoint resumes as a fresh start: the same losses as starting from the llm.c file
"$build/gpt2" "${run[@]}" --loss_log "$tmp/a.txt" || bad "run from llm.c exited $?"
"$build/gpt2" "${run[@]}" --load "$tmp/gpt2" --loss_log "$tmp/b.txt" || bad "run from the converted checkpoint exited $?"
cmp -s "$tmp/a.txt" "$tmp/b.txt" && ok || bad "training from the converted checkpoint differs"

expect_fail() { # what message args...
  local what=$1 msg=$2
  shift 2
  "$tool" "$@" >/dev/null 2>"$tmp/err.txt"
  local rc=$?
  [[ $rc -eq 2 && $(wc -l <"$tmp/err.txt") -eq 1 ]] && grep -qF -- "$msg" "$tmp/err.txt" && ok ||
    bad "$what: exit $rc, stderr: $(cat "$tmp/err.txt")"
}
expect_fail "existing output dir" "exists" from-llmc gpt2 "$fix/tiny_gpt2.bin" "$tmp/gpt2"
expect_fail "wrong app" "magic" from-llmc llama3 "$fix/tiny_gpt2.bin" "$tmp/x"
expect_fail "not a checkpoint" "trainer_state.json" to-llmc "$tmp" "$tmp/y.bin"
expect_fail "show a missing path" "$tmp/nosuch: No such file or directory" show "$tmp/nosuch"
expect_fail "show a regular file" "not a checkpoint directory (a file" show "$fix/tiny_gpt2.bin"
"$tool" frobnicate >/dev/null 2>"$tmp/err.txt"
[[ $? -eq 2 ]] && grep -q '^usage: it-ckpt' "$tmp/err.txt" && ok || bad "an unknown command does not print the usage"

echo "ckpt_convert: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
