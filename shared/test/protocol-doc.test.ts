// docs/protocol.md and the code agree: message type codes, each message's size formula, the
// Hello field offsets, the error codes, and the values the doc states (version, limits,
// defaults, chunk-size ranges).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { encode } from '../src/wire/codec.ts';
import { type Message } from '../src/wire/messages.ts';
import { CHUNK_SIZE_RANGES, COPY_END_MAX, MAX_MODIFIED_MS, DELTA_MESSAGE_BYTES, LIST_BATCH, MAX_BASIS_CHECKSUMS, MAX_ENTRIES_PER_MESSAGE, MAX_MESSAGE, MAX_NAME_BYTES, MAX_REFINE_BYTES, MAX_SPLIT_CHUNKS, RESUME_MIN_FILE, SPLIT_THRESHOLD } from '../src/base/limits.ts';
import { DEFAULT_FINE, DEFAULT_PARAMS, ErrorCode, HelloFlag, Msg, PROTOCOL_VERSION, ROOT_CHECK, ROOT_PREFIX, ReadyFlag } from '../src/wire/protocol.ts';

const doc = readFileSync(new URL('../../docs/protocol.md', import.meta.url), 'utf8');
const sections = doc.split(/^### /m).slice(1);
const H = 32;

function section(name: string): string {
  const s = sections.find((x) => new RegExp(`^0x[0-9A-F]{2} ${name}\\b`).test(x));
  assert.ok(s, `docs/protocol.md has a section for ${name}`);
  return s;
}

/** Evaluates the section's "Total: …" formula with the given variables. */
function total(name: string, vars: Record<string, number>): number {
  const m = /^Total: ([^.\n]+)\./m.exec(section(name));
  assert.ok(m, `${name} states its total size`);
  const expr = m[1].replace(/\b([nk])H\b/g, '$1*H').replace(/(\d)([a-zA-Z(])/g, '$1*$2').replace(/\)\(/g, ')*(').replace(/([a-zA-Z]+)\(/g, '$1*(');
  return Function(...Object.keys(vars), `return ${expr};`)(...Object.values(vars));
}

/** The size of a varint as §4 defines it: 7 bits a byte. */
const v = (x: number) => Math.max(1, Math.ceil(Math.log2(x + 1) / 7));
const z = (d: number) => v(d >= 0 ? 2 * d : -2 * d - 1);
const e = (length: number) => 4 + v(length);
const sum = (a: ArrayLike<number>, f: (x: number) => number) => Array.from(a).reduce((t, x) => t + f(x), 0);
/** A section's Total formula, as written. */
const formula = (name: string) => /^Total: ([^.\n]+)\./m.exec(section(name))![1];

test('every message type has a section with its code', () => {
  for (const [name, code] of Object.entries(Msg)) {
    const s = section(name);
    assert.equal(parseInt(s.slice(2, 4), 16), code, name);
  }
});

test('documented sizes equal encoded sizes', () => {
  const name = 'dir/ünï.txt';
  const nameLen = new TextEncoder().encode(name).length;
  const n = 7;
  const cases: [string, Message, Record<string, number>][] = [
    ['SplitHashes', { type: Msg.SplitHashes, token: 1, hashes: new Uint8Array(n * H) }, { n, H }],
    ['Error', { type: Msg.Error, code: 4, message: 'naïve' }, { len: 6 }],
  ];
  for (const [label, m, vars] of cases) if (label === 'Error') assert.equal(encode(m, H).length, total(label, vars), label);
  assert.equal(formula('SplitHashes'), '1 + v(token) + v(n) + nH');
  assert.equal(encode(cases[0][1], H).length, 1 + v(1) + v(n) + n * H);
  // the messages whose fields are varints: their formulas as written, evaluated by hand
  const params = { min: 4096, avg: 16384, max: 131072, op: 0, every: 16 };
  assert.equal(formula('Hello'), '4 + v(size) + v(basisVersion) + v(nameLen) + nameLen + p(v(min) + v(avg) + v(max) + 2) + k(v(known) + 8) + m v(modified)');
  for (const [p, k, m] of [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]) {
    const hello: Message = { type: Msg.Hello, version: 1, op: 1, params: p ? params : DEFAULT_PARAMS, algo: 3, size: 20_000_000, basisVersion: 0xffffffff, name, ...(k && { known: { version: 300, root: new Uint8Array(H) } }), ...(m && { modified: 1_800_000_000_000 }) };
    const want = 4 + v(20_000_000) + v(0xffffffff) + v(nameLen) + nameLen + p * (v(4096) + v(16384) + v(131072) + 2) + k * (v(300) + ROOT_PREFIX) + m * v(1_800_000_000_000);
    assert.equal(encode(hello, H).length, want, JSON.stringify({ p, k, m }));
  }
  assert.equal(formula('Ready'), '2 + v(version) + v(size) + m v(modified)');
  assert.equal(encode({ type: Msg.Ready, version: 200, size: 20_000_000 }, H).length, 2 + v(200) + v(20_000_000));
  assert.equal(encode({ type: Msg.Ready, version: 200, size: 20_000_000, modified: 5 }, H).length, 2 + v(200) + v(20_000_000) + v(5));
  assert.equal(formula('ChecksumsEnd'), '1 + v(count) + v(size)');
  assert.equal(encode({ type: Msg.ChecksumsEnd, count: 2500, size: 20_000_000 }, H).length, 1 + v(2500) + v(20_000_000));
  assert.equal(formula('Tokens'), '1 + v(upTo) + v(n) + Σ(v(first) + v(count) + H)');
  const first = Uint32Array.of(0, 200, 70_000);
  const count = Uint32Array.of(100, 1, 3);
  assert.equal(encode({ type: Msg.Tokens, upTo: 70_003, first, count, hashes: new Uint8Array(3 * H) }, H).length, 1 + v(70_003) + v(3) + sum(first, v) + sum(count, v) + 3 * H);
  assert.equal(formula('TokensEnd'), '1 + v(count) + v(resumeFrom)');
  assert.equal(encode({ type: Msg.TokensEnd, count: 300, resumeFrom: 0 }, H).length, 1 + v(300) + v(0));
  assert.equal(formula('SplitRequest'), '1 + v(n) + Σ v(token)');
  assert.equal(encode({ type: Msg.SplitRequest, tokens: first }, H).length, 1 + v(3) + sum(first, v));
  assert.equal(formula('Result'), '9 + v(version) + v(micros) + v(wireIn) + v(wireOut)');
  assert.equal(encode({ type: Msg.Result, version: 2, root: new Uint8Array(H), micros: 30_000, wireIn: 200, wireOut: 9 }, H).length, 9 + v(2) + v(30_000) + v(200) + v(9));
});

test('Verdict: size formula and the order of its fields', () => {
  assert.equal(formula('Verdict'), '1 + v(upTo) + v(nf) + 16f + Σ(v(token) + 1 + [v(len) + len]), f = final');
  assert.equal(ROOT_CHECK, 16);
  const failed = [{ token: 2, bitmap: null }, { token: 500, bitmap: Uint8Array.of(1, 2, 3) }];
  const items = v(2) + 1 + (v(500) + 1 + v(3) + 3);
  for (const root of [null, Uint8Array.from({ length: H }, (_, i) => i)]) {
    const f = encode({ type: Msg.Verdict, upTo: 0x0102, root, failed }, H);
    const f16 = root ? ROOT_CHECK : 0;
    assert.equal(f.length, 1 + v(0x0102) + v(2 * 2 + 1) + f16 + items);
    const fields = [...section('Verdict').matchAll(/^\| (\d+|…) \| (\d+|v|H|len) \| (?:\(\w+ \d\) )?(\w+)/gm)].map((r) => r[3]);
    assert.deepEqual(fields, ['type', 'upTo', 'nf', 'root', 'token', 'kind', 'bitmap', 'bit']);
    // type, upTo (0x0102: 0x82 0x02), nf (n = 2, final), the root's first 16 bytes
    assert.deepEqual(Array.from(f.subarray(0, 4)), [Msg.Verdict, 0x82, 0x02, 2 * 2 + (root ? 1 : 0)]);
    if (root) assert.deepEqual(f.subarray(4, 4 + ROOT_CHECK), root.subarray(0, ROOT_CHECK));
    assert.equal(f[4 + f16], 2);
  }
});

test('varints: sizes and the zigzag order the doc gives', () => {
  assert.match(doc, /1 byte\s+below 128, 2 below 16 384, 3 below 2\^21, at most 8/);
  assert.deepEqual([0, 127, 128, 16383, 16384, 2 ** 21 - 1, 2 ** 21, 2 ** 53 - 1].map(v), [1, 1, 2, 2, 3, 3, 4, 8]);
  const f = encode({ type: Msg.Checksums, fastfps: Uint32Array.of(0), lengths: Uint32Array.of(300) }, H);
  // 300 = 0b10_0101100: 0xac (low 7 bits, high bit set), then 0x02
  assert.deepEqual(Array.from(f.subarray(6)), [0xac, 0x02]);
  // a Copies run at basis chunk 5 after one ending at 7: −2, zigzagged to 3
  const c = encode({ type: Msg.Copies, listed: Uint32Array.of(0, 0), fastfps: new Uint32Array(0), lengths: new Uint32Array(0), count: Uint32Array.of(7, 1), basisFirst: Uint32Array.of(0, 5) }, H);
  assert.deepEqual(Array.from(c), [Msg.Copies, 2, 0, 7, 0, 0, 1, 3]);
});

test('Checksums, Basis Checksums and Copies: the sizes the doc gives', () => {
  const lengths = Uint32Array.of(5, 300, 70_000, 2 ** 32 - 1, 127, 128, 16_384);
  const fastfps = new Uint32Array(lengths.length).fill(0xffffffff);
  const n = lengths.length;
  assert.equal(formula('Checksums'), '1 + v(n) + Σ e(length)');
  assert.equal(encode({ type: Msg.Checksums, fastfps, lengths }, H).length, 1 + v(n) + sum(lengths, e));
  assert.equal(formula('BasisChecksums'), '21 + v(n) + Σ(v(length) + 8)');
  assert.equal(encode({ type: Msg.BasisChecksums, offset: 9, fine: { min: 64, avg: 256, max: 1024 }, lengths, prefixes: new Uint8Array(8 * n) }, H).length, 21 + v(n) + sum(lengths, (l) => v(l) + 8));
  assert.equal(formula('Copies'), '1 + v(n) + Σ(v(listed) + Σ e(length) + v(count) + z(ΔbasisFirst))');
  const listed = Uint32Array.of(3, 0, 4);
  const count = Uint32Array.of(1, 200, 20_000);
  const basisFirst = Uint32Array.of(1000, 0, 300_000);
  const c = encode({ type: Msg.Copies, listed, fastfps, lengths, count, basisFirst }, H);
  let size = 1 + v(3);
  for (let k = 0, at = 0, end = 0; k < 3; at += listed[k], end = basisFirst[k] + count[k], k++) size += v(listed[k]) + sum(lengths.subarray(at, at + listed[k]), e) + v(count[k]) + z(basisFirst[k] - end);
  assert.equal(c.length, size);
});

test('Delta: a chunk sent whole and a chunk sent in pieces', () => {
  const text = section('Delta');
  assert.ok(text.includes('Total: 1 + v(n) + Σ(z(Δindex) + 1 + v(length) + length) for chunks sent whole; a chunk sent in\npieces takes z(Δindex) + v(p) + Σ v(2 × length) + literal lengths + Σ z(Δoffset)\nover its copies instead.'), 'the Delta total');
  assert.match(text, /^\| … \| v \| · \(p ≥ 1\) each piece: 2 × its length \(≥ 1\) \+ tag, tag `0` literal, `1` copy \|$/m);
  const whole = new Uint8Array(200);
  const literal = new Uint8Array(7);
  // chunk 3 whole; chunk 4: a copy at 0x0102, literal bytes, a copy going on where it ended;
  // chunk 9: a copy before the last one's end
  const f = encode({ type: Msg.Delta, indices: Uint32Array.of(3, 4, 9), chunks: [whole, [{ offset: 0x0102, length: 5 }, literal, { offset: 0x0107, length: 300 }], [{ offset: 10, length: 4 }]] }, H);
  const chunk4 = z(0) + v(3) + v(2 * 5 + 1) + z(0x0102) + v(2 * 7) + 7 + v(2 * 300 + 1) + z(0);
  assert.equal(f.length, 1 + v(3) + (z(3) + 1 + v(200) + 200) + chunk4 + (z(4) + v(1) + v(2 * 4 + 1) + z(10 - 0x0107 - 300)));
  // chunk 3: index, p = 0, length 200 (0xc8 0x01); the second chunk's bytes: index +0, 3 pieces,
  // copy of 5 at +0x0102 (zigzag 0x0204), a literal of 7
  assert.deepEqual(Array.from(f.subarray(2, 5)), [6, 0, 0xc8]);
  const at = 1 + 1 + 1 + 1 + 2 + 200;
  assert.deepEqual(Array.from(f.subarray(at, at + 6)), [0, 3, 11, 0x84, 0x04, 14]);
});

test('BasisChecksums field offsets', () => {
  const rows = [...section('BasisChecksums').matchAll(/^\| (\d+) \| (\d+|v) \| (.+?) \|$/gm)].map((r) => ({ off: r[1], field: r[3] }));
  const f = encode({ type: Msg.BasisChecksums, offset: 0x0a0b, fine: { min: 64, avg: 256, max: 1024 }, lengths: Uint32Array.of(300, 200), prefixes: new Uint8Array(16).fill(9) }, H);
  const dv = new DataView(f.buffer);
  const at = (field: string) => +rows.find((r) => r.field.startsWith(field))!.off;
  assert.equal(f[at('type')], Msg.BasisChecksums);
  assert.equal(Number(dv.getBigUint64(at('offset'), true)), 0x0a0b);
  assert.deepEqual([dv.getUint32(at('fine min'), true), dv.getUint32(at('fine avg'), true), dv.getUint32(at('fine max'), true)], [64, 256, 1024]);
  assert.equal(f[at('n')], 2);
  // entry 1: its length (200: 0xc8 0x01) after entry 0's (2 bytes) and prefix
  assert.deepEqual(Array.from(f.subarray(at('n') + 1 + 10, at('n') + 1 + 13)), [0xc8, 0x01, 9]);
});

test('Hello: the order of its fields, its flags\' bits', () => {
  const rows = [...section('Hello').matchAll(/^\| (\d+|…) \| (\d+|v|nameLen) \| (\w+)/gm)].map((r) => ({ off: r[1], size: r[2], field: r[3] }));
  assert.deepEqual(rows.map((r) => r.field), ['type', 'version', 'op', 'flags', 'size', 'basisVersion', 'nameLen', 'name', 'min', 'avg', 'max', 'fpOp', 'every', 'known', 'root', 'modified']);
  const root = Uint8Array.from({ length: H }, (_, i) => i + 1);
  const f = encode({ type: Msg.Hello, version: 1, op: 2, params: { min: 0x11, avg: 0x22, max: 0x33, op: 1, every: 32 }, algo: 3, size: 0x44, basisVersion: 0x55, name: 'n', known: { version: 0x66, root }, modified: 0x77 }, H);
  const at = (field: string) => +rows.find((r) => r.field === field)!.off;
  assert.equal(f[at('type')], Msg.Hello);
  assert.equal(f[at('version')], 1);
  assert.equal(f[at('op')], 2);
  // the flags in bits 0–3, algo in bits 4–7
  assert.equal(f[at('flags')], (3 << 4) | HelloFlag.Params | HelloFlag.Known | HelloFlag.Modified);
  assert.match(section('Hello'), /bits 4–7: `algo`/);
  // from `size` on, one byte each here (small values), in the documented order
  assert.deepEqual(Array.from(f.subarray(at('size'))), [0x44, 0x55, 1, 'n'.charCodeAt(0), 0x11, 0x22, 0x33, 1, 32, 0x66, ...root.subarray(0, ROOT_PREFIX), 0x77]);
  assert.equal(ROOT_PREFIX, 8);
  for (const [bit, name] of Object.entries({ 0: 'Resume', 1: 'Modified', 2: 'Known', 3: 'Params' })) {
    const flag = HelloFlag[name as keyof typeof HelloFlag];
    assert.equal(flag, 1 << +bit);
    assert.match(section('Hello'), new RegExp(`[bB]it ${bit} \\(\`0x0${flag}\`, \`${name}\`\\)`), name);
  }
  assert.match(doc, new RegExp(`\`MAX_MODIFIED_MS\` \\(${grouped(MAX_MODIFIED_MS)}`));
});

test('Ready: the order of its fields, its flag', () => {
  const rows = [...section('Ready').matchAll(/^\| (\d+|…) \| (\d+|v) \| (\w+)/gm)].map((r) => r[3]);
  assert.deepEqual(rows, ['type', 'flags', 'version', 'size', 'modified']);
  const f = encode({ type: Msg.Ready, version: 0x11, size: 0x22, modified: 0x44 }, H);
  assert.deepEqual(Array.from(f), [Msg.Ready, ReadyFlag.Modified, 0x11, 0x22, 0x44]);
  assert.match(section('Ready'), new RegExp(`bit 0 \\(\`0x0${ReadyFlag.Modified}\`, \`Modified\`\\)`));
});

test('error code table', () => {
  for (const [name, code] of Object.entries(ErrorCode)) {
    assert.match(doc, new RegExp(`^\\| ${code} \\| ${name} \\|`, 'm'), name);
  }
});

/** A number as the doc writes it: groups of three digits apart (65 536), or in KiB / MiB. */
const grouped = (n: number) => n.toLocaleString('en-US').replace(/,/g, ' ');
const bytes = (n: number) => (n >= 1 << 20 && n % (1 << 20) === 0 ? `${n >> 20} MiB` : n >= 1024 && n % 1024 === 0 ? `${n >> 10} KiB` : String(n));

test('the version the doc specifies is the one the code speaks', () => {
  assert.match(doc, new RegExp(`^# The Dsync wire protocol, version ${PROTOCOL_VERSION}$`, 'm'));
  assert.match(section('Hello'), new RegExp(`^\\| 1 \\| 1 \\| version \\| protocol version, \`${PROTOCOL_VERSION}\` \\|`, 'm'));
});

test('the limits and defaults the doc states are the code\'s', () => {
  const says = (re: RegExp, what: string) => assert.match(doc, re, what);
  says(new RegExp(`\`maxEntriesPerMessage\` \\(${grouped(MAX_ENTRIES_PER_MESSAGE)}\\); senders batch at ${grouped(LIST_BATCH)} entries`), 'entries per message, batch');
  says(new RegExp(`at most ${bytes(DELTA_MESSAGE_BYTES)} of chunk bytes per Delta message`), 'Delta message size');
  says(new RegExp(`\\| … \\| v \\| nameLen \\| ≤ ${MAX_NAME_BYTES} \\|`), 'name length');
  says(new RegExp(`files? of \`RESUME_MIN_FILE\` \\(${bytes(RESUME_MIN_FILE)}\\)`), 'the smallest file a push says may resume');
  says(new RegExp(`\`splitThreshold\` bytes \\(default ${bytes(SPLIT_THRESHOLD)}`), 'split threshold');
  says(new RegExp(`more than \`maxEntriesPerMessage\` \\(${grouped(MAX_SPLIT_CHUNKS)}\\)\\s+chunks is never\\s+split`), 'split cap');
  says(new RegExp(`n: the token's count, 2 … ${grouped(MAX_SPLIT_CHUNKS)}`), 'Split Hashes count');
  says(new RegExp(`\`maxRefineBytes\` basis bytes per session\\s+\\(server default ${bytes(MAX_REFINE_BYTES)}`), 'refinement budget');
  says(new RegExp(`more than 2\\^${Math.log2(MAX_BASIS_CHECKSUMS)} entries in a session`), 'Basis Checksums per session');
  says(new RegExp(`\\(default ${bytes(MAX_MESSAGE)}\\); a larger frame closes the connection`), 'largest message');
  says(new RegExp(`a copy ends at or below\\s+2\\^${Math.log2(COPY_END_MAX)}`), 'where a copy ends');
  says(new RegExp(`copy before offset 0 or ending beyond 2\\^${Math.log2(COPY_END_MAX)}`), 'where a copy ends, decoding');
  says(new RegExp(`Defaults ${DEFAULT_PARAMS.min} / ${DEFAULT_PARAMS.avg} / ${DEFAULT_PARAMS.max}\\.`), 'chunk-size defaults');
  says(new RegExp(`default min ${DEFAULT_FINE.min}, avg ${DEFAULT_FINE.avg}, max ${DEFAULT_FINE.max}`), 'finer chunk-size defaults');
  const { min, avg, max } = CHUNK_SIZE_RANGES;
  says(new RegExp(`\`min\` \\(multiple of ${min.multipleOf}, ${min.from}…${bytes(min.to)}\\), \`avg\` \\(even, ${avg.from}…${bytes(avg.to)}\\), \`max\` \\(even,\\s+${bytes(max.from)}…the server's \`maxChunkSize\`\\)`), 'chunk-size ranges');
  assert.equal(avg.multipleOf, 2);
  assert.equal(max.multipleOf, 2);
});
