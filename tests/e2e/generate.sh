#!/usr/bin/env bash
# it-generate end to end. A tiny GPT-2 learns a few verses byte by byte (a 256-rank tiktoken
# file: each byte its own token) and is saved; then, from that checkpoint (--load):
#   - greedy text is the same run to run, and streamed text is the text printed at the end;
#   - a batch of prompts (two lengths, one prompt twice) gives each prompt its own run's text;
#   - --stop ends a row before the stop string, which is not printed;
#   - the seed decides the sampled text;
# and from the other ways in, the same tokens for the same model:
#   - --llmc_filepath FILE and --load of that file as a checkpoint (it-ckpt from-llmc); --device
#     sim and cpu (GPT-2 and LLaMA-3);
#   - --hf_model DIR and --llmc_filepath of its conversion (it-ckpt from-hf);
#   - --lora_load_path (InfiniTrain's file with --lora_rank, and a PEFT directory whose
#     adapter_config.json gives the rank) and the merged model (--lora_merge_output);
# and bad input stops with exit 2 and a message naming it.
# Usage: generate.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/e2e/checks.bash"
export OMP_NUM_THREADS=1
gen() { "$build/it-generate" "$@" 2>"$tmp/gen.err"; }
same() { # name, a, b
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "$(head -c 300 "$2") | $(head -c 300 "$3")"; fi
}
refuse() { # name, expected message, args...
  local name=$1 want=$2
  shift 2
  "$build/it-generate" "$@" >"$tmp/r.out" 2>&1 </dev/null
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/r.out"; then ok "$name"; else bad "$name: exit $rc" "$(tail -2 "$tmp/r.out")"; fi
}

# ---- a byte-level tokenizer and a model that has learned two verses (loss < 0.3 a byte)
python3 -c '
import base64, sys
with open(sys.argv[1], "w") as f:
    for i in range(256): f.write(base64.b64encode(bytes([i])).decode() + " %d\n" % i)
' "$tmp/bytes.tiktoken"
for i in $(seq 1 40); do
  echo "In the beginning God created the heaven and the earth. And the earth was without form, and void;"
  echo "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters."
done >"$tmp/text.txt"
"$build/tokenize" --tokenizer "$tmp/bytes.tiktoken" --eot none --input "$tmp/text.txt" --output "$tmp/train.bin" \
  >/dev/null 2>&1 || bad "tokenize: $("$build/tokenize" --tokenizer "$tmp/bytes.tiktoken" --eot none \
  --input "$tmp/text.txt" --output "$tmp/train.bin" 2>&1 | tail -1)"
"$build/gpt2" --input_bin "$tmp/train.bin" --n_layer 2 --n_head 2 --n_embd 64 --block_size 64 --vocab_size 256 \
  --batch_size 8 --sequence_length 64 --num_iteration 400 --optimizer adamw --learning_rate 3e-3 \
  --save "$tmp/ck" --save_interval 400 >"$tmp/train.out" 2>&1 || bad "train: $(tail -2 "$tmp/train.out")"
ck=$tmp/ck/checkpoint_step_000400
loss=$(grep -o 'train loss [0-9.]*' "$tmp/train.out" | tail -1 | awk '{print $3}')
awk -v l="$loss" 'BEGIN { exit !(l < 0.3) }' && ok "the model learned (last loss $loss)" || bad "the model did not learn: last loss $loss"

m=(--load "$ck" --tokenizer "$tmp/bytes.tiktoken" --max_new_tokens 40)
gen "${m[@]}" --prompt "And the" --temperature 0 >"$tmp/g1.txt" && ok "greedy" || bad "greedy" "$(cat "$tmp/gen.err")"
gen "${m[@]}" --prompt "And the" --temperature 0 >"$tmp/g2.txt"
same "greedy run to run" "$tmp/g1.txt" "$tmp/g2.txt"
gen "${m[@]}" --prompt "And the" --temperature 0 --stream false >"$tmp/g3.txt"
same "streamed = printed at the end" "$tmp/g1.txt" "$tmp/g3.txt"
verse=$(gen "${m[@]}" --prompt "In the beginning God created the heaven and the" --temperature 0 --max_new_tokens 7)
[ "$verse" = " earth." ] && ok "greedy goes on with the verse" || bad "greedy does not go on with the verse: '$verse'"
grep -q "tok/s" "$tmp/gen.err" && ok "the rate is printed" || bad "no rate" "$(cat "$tmp/gen.err")"
echo "And the" | gen "${m[@]}" --temperature 0 >"$tmp/g4.txt"
same "prompt from standard input" "$tmp/g1.txt" "$tmp/g4.txt"

# the byte-level llm.c tokenizer `tokenize` writes (it encodes byte by byte) gives the same text
"$build/tokenize" --input "$tmp/text.txt" --output "$tmp/bytes.bin" --tokenizer_out "$tmp/bytes_tok.bin" >/dev/null 2>&1
gen --load "$ck" --tokenizer "$tmp/bytes_tok.bin" --max_new_tokens 40 --prompt "And the" --temperature 0 \
  >"$tmp/g5.txt" || bad "llm.c byte-level tokenizer: $(cat "$tmp/gen.err")"
same "llm.c's byte-level tokenizer = the byte rank file" "$tmp/g1.txt" "$tmp/g5.txt"

# a batch: [0] and [2] are the prompt above, [1] another length
gen "${m[@]}" --prompt "And the" --prompt "In the beginning" --prompt "And the" --temperature 0 >"$tmp/b.txt" ||
  bad "batch: $(cat "$tmp/gen.err")"
gen "${m[@]}" --prompt "In the beginning" --temperature 0 >"$tmp/s1.txt"
sed -n 's/^\[0\] //p' "$tmp/b.txt" >"$tmp/b0.txt"
sed -n 's/^\[1\] //p' "$tmp/b.txt" >"$tmp/b1.txt"
sed -n 's/^\[2\] //p' "$tmp/b.txt" >"$tmp/b2.txt"
same "batch row 0 = its own run" "$tmp/g1.txt" "$tmp/b0.txt"
same "batch row 1 = its own run" "$tmp/s1.txt" "$tmp/b1.txt"
same "batch row 2 = row 0" "$tmp/b0.txt" "$tmp/b2.txt"
printf '%s\n' "And the" "In the beginning" >"$tmp/prompts.txt"
gen "${m[@]}" --prompt_file "$tmp/prompts.txt" --temperature 0 | sed -n 's/^\[1\] //p' >"$tmp/f1.txt"
same "--prompt_file" "$tmp/s1.txt" "$tmp/f1.txt"

# --stop: the text up to the stop string's first place
full=$(head -c 40 "$tmp/g1.txt")
stop=${full:12:3}
want=${full%%"$stop"*}
got=$(gen "${m[@]}" --prompt "And the" --temperature 0 --stop "$stop" --stop "@@@")
[ "$got" = "$want" ] && ok "--stop cuts before the string" || bad "--stop '$stop': got '$got', want '$want'"

# the seed decides the draws
gen "${m[@]}" --prompt "And" --temperature 1.5 --top_k 0 --top_p 1 --seed 1 >"$tmp/r1.txt"
gen "${m[@]}" --prompt "And" --temperature 1.5 --top_k 0 --top_p 1 --seed 1 >"$tmp/r2.txt"
gen "${m[@]}" --prompt "And" --temperature 1.5 --top_k 0 --top_p 1 --seed 2 >"$tmp/r3.txt"
same "same seed" "$tmp/r1.txt" "$tmp/r2.txt"
cmp -s "$tmp/r1.txt" "$tmp/r3.txt" && bad "seeds 1 and 2 drew the same text" || ok "another seed, other text"

# ---- the same model by every way in: the same greedy ids
g=$src/tests/fixtures/gpt2
ids=(--prompt_ids 5,17,3,99 --max_new_tokens 12 --temperature 0)
gen --llmc_filepath "$g/tiny_gpt2.bin" "${ids[@]}" >"$tmp/l.txt" || bad "llmc: $(cat "$tmp/gen.err")"
"$build/it-ckpt" from-llmc gpt2 "$g/tiny_gpt2.bin" "$tmp/fromllmc" >/dev/null
gen --load "$tmp/fromllmc" "${ids[@]}" >"$tmp/lc.txt" || bad "load: $(cat "$tmp/gen.err")"
same "--llmc_filepath = --load of it" "$tmp/l.txt" "$tmp/lc.txt"
gen --llmc_filepath "$g/tiny_gpt2.bin" "${ids[@]}" --device sim >"$tmp/ls.txt" || bad "sim: $(cat "$tmp/gen.err")"
same "--device sim = cpu" "$tmp/l.txt" "$tmp/ls.txt"
gen --llmc_filepath "$src/tests/fixtures/llama3/tiny_llama3.bin" "${ids[@]}" >"$tmp/ll.txt" ||
  bad "llama3: $(cat "$tmp/gen.err")"
gen --llmc_filepath "$src/tests/fixtures/llama3/tiny_llama3.bin" "${ids[@]}" --device sim >"$tmp/lls.txt"
same "LLaMA-3 --device sim = cpu" "$tmp/ll.txt" "$tmp/lls.txt"
h=$src/tests/fixtures/hf/gpt2
gen --hf_model "$h" "${ids[@]}" >"$tmp/h.txt" || bad "hf: $(cat "$tmp/gen.err")"
"$build/it-ckpt" from-hf "$h" "$tmp/hf.bin" >/dev/null
gen --llmc_filepath "$tmp/hf.bin" "${ids[@]}" >"$tmp/hl.txt"
same "--hf_model = its llm.c conversion" "$tmp/h.txt" "$tmp/hl.txt"

# LoRA: the adapters on the base = the merged model
lr=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 20 --optimizer adamw --learning_rate 0.01 --lora_rank 4 --lora_alpha 8)
"$build/gpt2" "${lr[@]}" --lora_save_path "$tmp/a.bin" --lora_merge_output "$tmp/merged.bin" >"$tmp/lt.out" 2>&1 ||
  bad "lora train: $(tail -2 "$tmp/lt.out")"
"$build/gpt2" "${lr[@]}" --lora_save_path "$tmp/peft" --lora_save_format peft >"$tmp/lt2.out" 2>&1 ||
  bad "lora train (peft): $(tail -2 "$tmp/lt2.out")"
gen --llmc_filepath "$tmp/merged.bin" "${ids[@]}" >"$tmp/mg.txt"
gen --llmc_filepath "$g/tiny_gpt2.bin" --lora_load_path "$tmp/a.bin" --lora_rank 4 --lora_alpha 8 "${ids[@]}" \
  >"$tmp/la.txt" || bad "lora: $(cat "$tmp/gen.err")"
same "adapters = merged" "$tmp/mg.txt" "$tmp/la.txt"
gen --llmc_filepath "$g/tiny_gpt2.bin" --lora_load_path "$tmp/peft" "${ids[@]}" >"$tmp/lp.txt" ||
  bad "peft: $(cat "$tmp/gen.err")"
same "PEFT adapters = merged" "$tmp/mg.txt" "$tmp/lp.txt"
cmp -s "$tmp/l.txt" "$tmp/mg.txt" && bad "the adapters changed nothing" || ok "the adapters change the tokens"

# ---- bad input
refuse "no model" "give one model" --prompt_ids 1
refuse "two models" "give one model" --llmc_filepath "$g/tiny_gpt2.bin" --load "$ck" --prompt_ids 1
refuse "no tokenizer" "no tokenizer for the text" --llmc_filepath "$g/tiny_gpt2.bin" --prompt hello
refuse "id range" "expected ids in 0..$(($(od -An -t d4 -j 12 -N 4 "$g/tiny_gpt2.bin") - 1))" \
  --llmc_filepath "$g/tiny_gpt2.bin" --prompt_ids 1,99999
refuse "unknown flag" "--frobnicate: unknown flag" --llmc_filepath "$g/tiny_gpt2.bin" --frobnicate 1
refuse "bad temperature" "--temperature: \"-1\"" --llmc_filepath "$g/tiny_gpt2.bin" --prompt_ids 1 --temperature -1
refuse "missing file" "--llmc_filepath: " --llmc_filepath "$tmp/none.bin" --prompt_ids 1
refuse "lora without rank" "give its --lora_rank" --llmc_filepath "$g/tiny_gpt2.bin" --prompt_ids 1 \
  --lora_load_path "$tmp/a.bin"

checks_done generate.sh
