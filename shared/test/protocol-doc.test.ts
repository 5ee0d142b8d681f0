// docs/protocol.md and the code agree: message type codes, each message's size formula, the
// Hello field offsets, the error codes, and the values the doc states (version, limits,
// defaults, chunk-size ranges).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { encode } from '../src/codec.ts';
import { type Message } from '../src/messages.ts';
import { CHUNK_SIZE_RANGES, DELTA_MESSAGE_BYTES, LIST_BATCH, MAX_BASIS_CHECKSUMS, MAX_ENTRIES_PER_MESSAGE, MAX_MESSAGE, MAX_NAME_BYTES, MAX_REFINE_BYTES, MAX_SPLIT_CHUNKS, SPLIT_THRESHOLD } from '../src/limits.ts';
import { DEFAULT_FINE, DEFAULT_PARAMS, ErrorCode, Msg, PROTOCOL_VERSION } from '../src/protocol.ts';

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
    ['Hello', { type: Msg.Hello, version: 1, op: 1, params: { min: 1, avg: 2, max: 3, op: 0, every: 16 }, algo: 3, size: 9, basisVersion: 2, name }, { nameLen, k: 0, H }],
    ['Hello', { type: Msg.Hello, version: 1, op: 1, params: { min: 1, avg: 2, max: 3, op: 0, every: 16 }, algo: 3, size: 9, basisVersion: 2, name, known: { version: 4, root: new Uint8Array(H) } }, { nameLen, k: 1, H }],
    ['Copies', { type: Msg.Copies, first: new Uint32Array(n), count: new Uint32Array(n), basisFirst: new Uint32Array(n) }, { n }],
    ['Ready', { type: Msg.Ready, version: 1, size: 2, maxMessage: 3 }, {}],
    ['Checksums', { type: Msg.Checksums, fastfps: new Uint32Array(n), lengths: new Uint32Array(n) }, { n }],
    ['ChecksumsEnd', { type: Msg.ChecksumsEnd, count: 1, size: 2 }, {}],
    ['Tokens', { type: Msg.Tokens, upTo: 5, first: new Uint32Array(n), count: new Uint32Array(n), hashes: new Uint8Array(n * H) }, { n, H }],
    ['TokensEnd', { type: Msg.TokensEnd, count: 3, resumeFrom: 0 }, {}],
    ['SplitRequest', { type: Msg.SplitRequest, tokens: new Uint32Array(n) }, { n }],
    ['SplitHashes', { type: Msg.SplitHashes, token: 1, hashes: new Uint8Array(n * H) }, { n, H }],
    ['Result', { type: Msg.Result, version: 1, size: 2, root: new Uint8Array(H), micros: 3, wireIn: 4, wireOut: 5 }, { H }],
    ['Error', { type: Msg.Error, code: 4, message: 'naïve' }, { len: 6 }],
    ['BasisChecksums', { type: Msg.BasisChecksums, offset: 9, fine: { min: 64, avg: 256, max: 1024 }, lengths: new Uint32Array(n), prefixes: new Uint8Array(8 * n) }, { n }],
  ];
  for (const [label, m, vars] of cases) assert.equal(encode(m, H).length, total(label, vars), label);
});

test('Verdict: size formula and the offsets of its fixed fields', () => {
  const formula = /^Total: ([^.\n]+)\./m.exec(section('Verdict'))![1];
  assert.equal(formula, '10 + fH + Σ(5 + [4 + len]), f = final');
  const failed = [{ token: 2, bitmap: null }, { token: 5, bitmap: Uint8Array.of(1, 2, 3) }];
  const items = 5 + (5 + 4 + 3);
  for (const root of [null, new Uint8Array(H).fill(7)]) {
    const f = encode({ type: Msg.Verdict, upTo: 0x0102, root, failed }, H);
    const fH = root ? H : 0;
    assert.equal(f.length, 10 + fH + items);
    const rows = [...section('Verdict').matchAll(/^\| (\d+|6 \+ fH) \| (\d+|H) \| (\w+)/gm)].map((r) => ({ off: r[1], field: r[3] }));
    const at = (field: string): number => Function('fH', `return ${rows.find((r) => r.field === field)!.off};`)(fH);
    const dv = new DataView(f.buffer);
    assert.equal(f[at('type')], Msg.Verdict);
    assert.equal(dv.getUint32(at('upTo'), true), 0x0102);
    assert.equal(f[at('final')], root ? 1 : 0);
    if (root) assert.deepEqual(f.subarray(6, 6 + H), root);
    assert.equal(dv.getUint32(at('n'), true), 2);
  }
});

test('Delta: a chunk sent whole and a chunk sent in pieces', () => {
  const text = section('Delta');
  assert.match(text, /^Total: 5 \+ Σ\(9 \+ length\) for chunks sent whole; a chunk sent in pieces takes 13 \+ Σ\(5 \+\s+literal length\) \+ 13 per copy instead\./m);
  const whole = new Uint8Array(10);
  const literal = new Uint8Array(7);
  const f = encode({ type: Msg.Delta, indices: Uint32Array.of(3, 4), chunks: [whole, [{ offset: 0x0102, length: 5 }, literal]] }, H);
  assert.equal(f.length, 5 + (9 + 10) + (13 + (5 + 7) + 13));
  const dv = new DataView(f.buffer);
  // the second chunk: index, length (5 + 7), kind 1, two pieces: a copy, then a literal
  const at = 5 + 9 + 10;
  assert.deepEqual([dv.getUint32(at, true), dv.getUint32(at + 4, true), f[at + 8], dv.getUint32(at + 9, true)], [4, 12, 1, 2]);
  assert.deepEqual([f[at + 13], Number(dv.getBigUint64(at + 14, true)), dv.getUint32(at + 22, true)], [1, 0x0102, 5]);
  assert.deepEqual([f[at + 26], dv.getUint32(at + 27, true)], [0, 7]);
});

test('BasisChecksums field offsets', () => {
  const rows = [...section('BasisChecksums').matchAll(/^\| (\d+(?: \+ 12k)?) \| (\d+) \| (.+?) \|$/gm)].map((r) => ({ off: r[1], field: r[3] }));
  const f = encode({ type: Msg.BasisChecksums, offset: 0x0a0b, fine: { min: 64, avg: 256, max: 1024 }, lengths: Uint32Array.of(300, 200), prefixes: new Uint8Array(16).fill(9) }, H);
  const dv = new DataView(f.buffer);
  const at = (field: string, k = 0) => Function('k', `return ${rows.find((r) => r.field.startsWith(field))!.off.replace('12k', '12 * k')};`)(k);
  assert.equal(f[at('type')], Msg.BasisChecksums);
  assert.equal(Number(dv.getBigUint64(at('offset'), true)), 0x0a0b);
  assert.deepEqual([dv.getUint32(at('fine min'), true), dv.getUint32(at('fine avg'), true), dv.getUint32(at('fine max'), true)], [64, 256, 1024]);
  assert.equal(dv.getUint32(at('n'), true), 2);
  assert.equal(dv.getUint32(at('length', 1), true), 200);
  assert.equal(f[at('the first 8 bytes', 1)], 9);
});

test('Hello field offsets', () => {
  const rows = [...section('Hello').matchAll(/^\| (\d+) \| (\d+|nameLen) \| (\w+)/gm)].map((r) => ({ off: +r[1], size: r[2], field: r[3] }));
  const f = encode({ type: Msg.Hello, version: 1, op: 2, params: { min: 0x11, avg: 0x22, max: 0x33, op: 1, every: 32 }, algo: 3, size: 0x44, basisVersion: 0x55, name: 'n' }, H);
  const dv = new DataView(f.buffer);
  const at = (field: string) => rows.find((r) => r.field === field)!.off;
  assert.equal(f[at('type')], Msg.Hello);
  assert.equal(f[at('version')], 1);
  assert.equal(f[at('op')], 2);
  assert.equal(dv.getUint32(at('min'), true), 0x11);
  assert.equal(dv.getUint32(at('avg'), true), 0x22);
  assert.equal(dv.getUint32(at('max'), true), 0x33);
  assert.equal(f[at('fpOp')], 1);
  assert.equal(f[at('every')], 32);
  assert.equal(f[at('algo')], 3);
  assert.equal(Number(dv.getBigUint64(at('size'), true)), 0x44);
  assert.equal(dv.getUint32(at('basisVersion'), true), 0x55);
  assert.equal(dv.getUint16(at('nameLen'), true), 1);
  assert.equal(String.fromCharCode(f[at('name')]), 'n');
  assert.equal(dv.getUint32(at('known'), true), 0);
  const root = new Uint8Array(H).fill(9);
  const g = encode({ type: Msg.Hello, version: 1, op: 1, params: { min: 1, avg: 2, max: 3, op: 0, every: 16 }, algo: 3, size: 1, basisVersion: 0, name: 'n', known: { version: 0x66, root } }, H);
  assert.equal(new DataView(g.buffer).getUint32(at('known'), true), 0x66);
  assert.match(section('Hello'), /^\| 36 \+ nameLen \| H \| root \|/m);
  assert.deepEqual(g.subarray(at('name') + 1), root);
  for (let i = 1; i < rows.length; i++) {
    if (rows[i - 1].size !== 'nameLen') assert.equal(rows[i].off, rows[i - 1].off + Number(rows[i - 1].size), `offset of ${rows[i].field}`);
  }
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
  says(new RegExp(`\\| 34 \\| 2 \\| nameLen \\| ≤ ${MAX_NAME_BYTES} \\|`), 'name length');
  says(new RegExp(`\`splitThreshold\` bytes \\(default ${bytes(SPLIT_THRESHOLD)}`), 'split threshold');
  says(new RegExp(`more than \`maxEntriesPerMessage\` \\(${grouped(MAX_SPLIT_CHUNKS)}\\)\\s+chunks is never\\s+split`), 'split cap');
  says(new RegExp(`n: the token's count, 2 … ${grouped(MAX_SPLIT_CHUNKS)}`), 'Split Hashes count');
  says(new RegExp(`\`maxRefineBytes\` basis bytes per session\\s+\\(server default ${bytes(MAX_REFINE_BYTES)}`), 'refinement budget');
  says(new RegExp(`more than 2\\^${Math.log2(MAX_BASIS_CHECKSUMS)} entries in a session`), 'Basis Checksums per session');
  says(new RegExp(`\\(default ${bytes(MAX_MESSAGE)}\\); a larger frame closes the connection`), 'largest message');
  says(new RegExp(`Defaults ${DEFAULT_PARAMS.min} / ${DEFAULT_PARAMS.avg} / ${DEFAULT_PARAMS.max}\\.`), 'chunk-size defaults');
  says(new RegExp(`default min ${DEFAULT_FINE.min}, avg ${DEFAULT_FINE.avg}, max ${DEFAULT_FINE.max}`), 'finer chunk-size defaults');
  const { min, avg, max } = CHUNK_SIZE_RANGES;
  says(new RegExp(`\`min\` \\(multiple of ${min.multipleOf}, ${min.from}…${bytes(min.to)}\\), \`avg\` \\(even, ${avg.from}…${bytes(avg.to)}\\), \`max\` \\(even,\\s+${bytes(max.from)}…the server's \`maxChunkSize\`\\)`), 'chunk-size ranges');
  assert.equal(avg.multipleOf, 2);
  assert.equal(max.multipleOf, 2);
});
