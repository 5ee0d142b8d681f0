// Property tests of the wire codec: decode(encode(m)) == m for every message, and truncated,
// extended or garbled frames fail with a ProtocolError (never another exception, never a hang).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { decode, deltaRunHead, encode } from '../src/codec.ts';
import { type Message } from '../src/messages.ts';
import { ErrorCode, Msg, ProtocolError } from '../src/protocol.ts';

const u32 = fc.integer({ min: 0, max: 0xffffffff });
const u64 = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const H = 32;
const hash = fc.uint8Array({ minLength: H, maxLength: H });
/** a piece of a refined Delta chunk: literal bytes or a copy of basis bytes (never empty) */
const piece = fc.oneof(fc.uint8Array({ minLength: 1, maxLength: 50 }), fc.record({ offset: u64, length: fc.integer({ min: 1, max: 1 << 24 }) }));
const u32arr = (n: number) => fc.array(u32, { minLength: n, maxLength: n }).map((a) => Uint32Array.from(a));

const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({
    type: fc.constant(Msg.Hello),
    version: fc.integer({ min: 0, max: 255 }),
    op: fc.integer({ min: 0, max: 255 }),
    params: fc.record({ min: u32, avg: u32, max: u32, op: fc.integer({ min: 0, max: 255 }), every: fc.integer({ min: 0, max: 255 }) }),
    algo: fc.integer({ min: 0, max: 255 }),
    size: u64,
    basisVersion: u32,
    name: fc.string({ unit: 'grapheme', maxLength: 60 }),
  }),
  fc.constantFrom(1, 2, 3).chain((algo) =>
    fc.record({
      type: fc.constant(Msg.Hello),
      version: fc.integer({ min: 0, max: 255 }),
      op: fc.integer({ min: 0, max: 255 }),
      params: fc.record({ min: u32, avg: u32, max: u32, op: fc.integer({ min: 0, max: 255 }), every: fc.integer({ min: 0, max: 255 }) }),
      algo: fc.constant(algo),
      size: u64,
      basisVersion: u32,
      name: fc.string({ unit: 'grapheme', maxLength: 60 }),
      known: fc.record({ version: fc.integer({ min: 1, max: 0xffffffff }), root: fc.uint8Array({ minLength: algo === 1 ? 20 : 32, maxLength: algo === 1 ? 20 : 32 }) }),
    }),
  ),
  fc.nat(20).chain((n) => fc.record({ type: fc.constant(Msg.Copies), first: u32arr(n), count: u32arr(n), basisFirst: u32arr(n) })),
  fc.record({ type: fc.constant(Msg.Ready), version: u32, size: u64, maxMessage: u32 }),
  fc.nat(50).chain((n) => fc.record({ type: fc.constant(Msg.Checksums), fastfps: u32arr(n), lengths: u32arr(n) })),
  fc.record({ type: fc.constant(Msg.ChecksumsEnd), count: u32, size: u64 }),
  fc.nat(20).chain((n) =>
    fc.record({ type: fc.constant(Msg.Tokens), upTo: u32, first: u32arr(n), count: u32arr(n), hashes: fc.uint8Array({ minLength: n * H, maxLength: n * H }) }),
  ),
  fc.record({ type: fc.constant(Msg.TokensEnd), count: u32, resumeFrom: u32 }),
  fc.record({ type: fc.constant(Msg.SplitRequest), tokens: fc.array(u32, { maxLength: 20 }).map((a) => Uint32Array.from(a)) }),
  fc.record({ type: fc.constant(Msg.SplitHashes), token: u32, hashes: fc.nat(10).chain((n) => fc.uint8Array({ minLength: n * H, maxLength: n * H })) }),
  fc.record({
    type: fc.constant(Msg.Verdict),
    upTo: u32,
    root: fc.option(hash, { nil: null }),
    failed: fc.array(fc.record({ token: u32, bitmap: fc.option(fc.uint8Array({ maxLength: 16 }), { nil: null }) }), { maxLength: 10 }),
  }),
  fc.nat(10).chain((n) =>
    fc.record({
      type: fc.constant(Msg.Delta),
      indices: u32arr(n),
      chunks: fc.array(fc.oneof(fc.uint8Array({ maxLength: 300 }), fc.array(piece, { minLength: 1, maxLength: 6 })), { minLength: n, maxLength: n }),
    }),
  ),
  fc.nat(20).chain((n) =>
    fc.record({
      type: fc.constant(Msg.BasisChecksums),
      offset: u64,
      fine: fc.record({ min: u32, avg: u32, max: u32 }),
      lengths: u32arr(n),
      prefixes: fc.uint8Array({ minLength: 8 * n, maxLength: 8 * n }),
    }),
  ),
  fc.record({ type: fc.constant(Msg.Result), version: u32, size: u64, root: hash, micros: u64, wireIn: u64, wireOut: u64 }),
  fc.record({ type: fc.constant(Msg.Error), code: fc.integer({ min: 0, max: 0xffff }), message: fc.string({ maxLength: 200 }) }),
) as fc.Arbitrary<Message>;

/** Structural equality that treats typed arrays by content. */
function norm(v: unknown): unknown {
  if (v instanceof Uint8Array || v instanceof Uint32Array) return Array.from(v);
  if (Array.isArray(v)) return v.map(norm);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, norm(x)]));
  return v;
}

function mustFailCleanly(frame: Uint8Array) {
  try {
    decode(frame, H);
  } catch (e) {
    assert.ok(e instanceof ProtocolError, `expected ProtocolError, got ${e}`);
    assert.equal(e.code, ErrorCode.Malformed);
    return false;
  }
  return true;
}

test('decode(encode(m)) == m', () => {
  fc.assert(
    fc.property(message, (m) => {
      assert.deepEqual(norm(decode(encode(m, H), H)), norm(m));
    }),
    { numRuns: 3000 },
  );
});

test('every strict prefix of a frame fails with Malformed', () => {
  fc.assert(
    fc.property(message, (m) => {
      const f = encode(m, H);
      for (let cut = 0; cut < f.length; cut++) assert.equal(mustFailCleanly(f.subarray(0, cut)), false, `prefix ${cut} of ${f.length} decoded`);
    }),
    { numRuns: 500 },
  );
});

test('trailing bytes fail with Malformed', () => {
  fc.assert(
    fc.property(message, fc.uint8Array({ minLength: 1, maxLength: 8 }), (m, extra) => {
      const f = encode(m, H);
      const g = new Uint8Array(f.length + extra.length);
      g.set(f);
      g.set(extra, f.length);
      assert.equal(mustFailCleanly(g), false);
    }),
    { numRuns: 1000 },
  );
});

test('garbled frames decode to a valid message or fail with Malformed', () => {
  fc.assert(
    fc.property(message, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 }), (m, flips) => {
      const f = encode(m, H).slice();
      for (const [pos, val] of flips) f[pos % f.length] = val;
      if (mustFailCleanly(f)) {
        // what decodes must re-encode to the same bytes: no silent misreading
        const again = encode(decode(f, H), H);
        assert.deepEqual(Array.from(again), Array.from(f));
      }
    }),
    { numRuns: 3000 },
  );
});

test('random bytes never crash the decoder', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (f) => {
      mustFailCleanly(f);
    }),
    { numRuns: 5000 },
  );
});

test('counts larger than the limit are refused before allocating', () => {
  const f = new Uint8Array(5);
  f[0] = Msg.Checksums;
  new DataView(f.buffer).setUint32(1, 0xffffffff, true);
  assert.throws(() => decode(f, H), /exceeds the limit/);
  const d = new Uint8Array(14);
  d[0] = Msg.Delta;
  new DataView(d.buffer).setUint32(1, 1, true);
  new DataView(d.buffer).setUint32(9, 0xfffffff0, true);
  assert.throws(() => decode(d, H), /truncated chunk bytes/);
  // a refined chunk: a piece count above the limit, then pieces that do not add up
  d[13] = 1;
  const p = new Uint8Array(18 + 13);
  p.set(d);
  new DataView(p.buffer).setUint32(14, 0xffffffff, true);
  assert.throws(() => decode(p, H), /piece count .* exceeds the limit/);
  new DataView(p.buffer).setUint32(14, 1, true);
  p[18] = 1; // a copy of 5 bytes for a chunk of 0xfffffff0
  new DataView(p.buffer).setUint32(27, 5, true);
  assert.throws(() => decode(p, H), /pieces of 5 bytes for a chunk of 4294967280/);
});

test('a Delta Run (head, then the chunks\' bytes one after another) decodes into the Delta it carries; a cut or extended one fails cleanly', () => {
  const chunks = fc.array(fc.uint8Array({ maxLength: 40 }), { minLength: 1, maxLength: 12 });
  fc.assert(
    fc.property(chunks, fc.integer({ min: 0, max: 1000 }), (cs, first) => {
      const indices = Uint32Array.from(cs, (_, i) => first + i);
      const head = deltaRunHead(indices, Uint32Array.from(cs, (c) => c.length));
      assert.equal(head.length, 5 + 8 * cs.length);
      const frame = Uint8Array.from([...head, ...cs.flatMap((c) => [...c])]);
      const m = decode(frame, H);
      assert.deepEqual(m, { type: Msg.Delta, indices, chunks: cs });
      for (const bad of [frame.subarray(0, frame.length - 1), Uint8Array.from([...frame, 0])]) assert.equal(mustFailCleanly(bad), false);
    }),
    { numRuns: 500 },
  );
});
