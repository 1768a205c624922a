// The npm package tiktoken (OpenAI's tiktoken compiled to WebAssembly) as the reference for
// tests/e2e/tiktoken.sh:
//   node tiktoken_ref.js table ENCODING OUT      its rank table as a tiktoken rank file
//   node tiktoken_ref.js compare ENCODING TEXT SHARD
//                                                 encode_ordinary(TEXT read as UTF-8) against the
//                                                 llm.c shard our tokenize wrote; prints the first
//                                                 difference, exits 1 on one
'use strict';
const fs = require('fs');
const path = require('path');
const [mode, encoding, a, b] = process.argv.slice(2);
const pkg = process.env.TIKTOKEN_DIR;
const enc = require(path.join(pkg, 'encoders', `${encoding}.json`));
if (mode === 'table') {
  const f = enc.bpe_ranks.split(/\s+/);
  const out = [];
  let rank = 0;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '!') { rank = parseInt(f[++i], 10); continue; } // "! N": ranks continue from N
    if (f[i] !== '') out.push(`${f[i]} ${rank++}`);
  }
  fs.writeFileSync(a, out.join('\n') + '\n');
  process.exit(0);
}
const { Tiktoken } = require(path.join(pkg, 'lite', 'tiktoken.cjs'));
const t = new Tiktoken(enc.bpe_ranks, enc.special_tokens, enc.pat_str);
const text = fs.readFileSync(a, 'utf8');
const t0 = process.hrtime.bigint();
const want = t.encode_ordinary(text);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
t.free();
const buf = fs.readFileSync(b);
const magic = buf.readInt32LE(0), n = buf.readInt32LE(8), wide = magic === 20240801;
const got = new Uint32Array(n);
for (let i = 0; i < n; i++) got[i] = wide ? buf.readUInt32LE(1024 + 4 * i) : buf.readUInt16LE(1024 + 2 * i);
let bad = -1;
for (let i = 0; i < Math.max(n, want.length) && bad < 0; i++) if (got[i] !== want[i]) bad = i;
if (bad >= 0) {
  console.log(`${encoding} ${path.basename(a)}: ours ${n} tokens, tiktoken ${want.length}; first difference at ` +
              `token ${bad}: ours ${Array.from(got.slice(bad, bad + 6))} tiktoken ${Array.from(want.slice(bad, bad + 6))}`);
  process.exit(1);
}
const mb = Buffer.byteLength(text) / 1048576;
console.log(`${encoding} ${path.basename(a)}: ${n} tokens identical to tiktoken ` +
            `${require(path.join(pkg, 'package.json')).version} (${mb.toFixed(2)} MB; tiktoken ${(mb / secs).toFixed(1)} MB/s)`);
