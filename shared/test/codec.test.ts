// Property tests of the wire codec: decode(encode(m)) == m for every message, and truncated,
// extended or garbled frames fail with a ProtocolError (never another exception, never a hang).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { decode, decodeFrame, deltaRunHead, encode } from '../src/wire/codec.ts';
import { type Message } from '../src/wire/messages.ts';
import { MAX_MODIFIED_MS } from '../src/base/limits.ts';
import { DEFAULT_PARAMS, ErrorCode, HelloFlag, Msg, ProtocolError, ROOT_CHECK, ROOT_PREFIX, ReadyFlag } from '../src/wire/protocol.ts';

const u32 = fc.integer({ min: 0, max: 0xffffffff });
const u64 = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
/** a modification time (Hello's and Ready's `modified`), its ends included */
const modified = fc.oneof(fc.constantFrom(0, MAX_MODIFIED_MS), fc.integer({ min: 0, max: MAX_MODIFIED_MS }));
const H = 32;
/** a piece of a refined Delta chunk: literal bytes or a copy of basis bytes (never empty) */
const piece = fc.oneof(fc.uint8Array({ minLength: 1, maxLength: 50 }), fc.record({ offset: fc.oneof(fc.nat(1 << 20), fc.integer({ min: 0, max: 2 ** 52 - (1 << 24) })), length: fc.integer({ min: 1, max: 1 << 24 }) }));
const u32arr = (n: number) => fc.array(u32, { minLength: n, maxLength: n }).map((a) => Uint32Array.from(a));

const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({
    type: fc.constant(Msg.Hello),
    version: fc.integer({ min: 0, max: 255 }),
    op: fc.integer({ min: 0, max: 255 }),
    params: fc.record({ min: u32, avg: u32, max: u32, op: fc.integer({ min: 0, max: 255 }), every: fc.integer({ min: 0, max: 255 }) }),
    algo: fc.integer({ min: 0, max: 15 }),
    size: u64,
    basisVersion: u32,
    name: fc.string({ unit: 'grapheme', maxLength: 60 }),
    resume: fc.constant(true),
    modified,
  }, { requiredKeys: ['type', 'version', 'op', 'params', 'algo', 'size', 'basisVersion', 'name'] }),
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
      known: fc.record({ version: fc.integer({ min: 1, max: 0xffffffff }), root: fc.uint8Array({ minLength: ROOT_PREFIX, maxLength: ROOT_PREFIX }) }),
      modified,
    }, { requiredKeys: ['type', 'version', 'op', 'params', 'algo', 'size', 'basisVersion', 'name', 'known'] }),
  ),
  fc.array(fc.nat(4), { maxLength: 20 }).chain((listed) => {
    const l = listed.reduce((a, x) => a + x, 0);
    return fc.record({ type: fc.constant(Msg.Copies), listed: fc.constant(Uint32Array.from(listed)), fastfps: u32arr(l), lengths: u32arr(l), count: u32arr(listed.length), basisFirst: u32arr(listed.length) });
  }),
  fc.record({ type: fc.constant(Msg.Ready), version: u32, size: u64, modified }, { requiredKeys: ['type', 'version', 'size'] }),
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
    root: fc.option(fc.uint8Array({ minLength: ROOT_CHECK, maxLength: ROOT_CHECK }), { nil: null }),
    failed: fc.array(fc.record({ token: u32, bitmap: fc.option(fc.uint8Array({ maxLength: 16 }), { nil: null }) }), { maxLength: 10 }),
  }),
  fc.nat(10).chain((n) =>
    fc.record({
      type: fc.constant(Msg.Delta),
      indices: fc.oneof(u32arr(n), fc.nat(1000).map((a) => Uint32Array.from({ length: n }, (_, i) => a + i))),
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
  fc.record({ type: fc.constant(Msg.Result), version: u32, root: fc.uint8Array({ minLength: ROOT_PREFIX, maxLength: ROOT_PREFIX }), micros: u64, wireIn: u64, wireOut: u64 }),
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

test("Hello's flags: Resume round-trips, Known, Params and Modified say what follows the name, the high four bits are algo", () => {
  const hello = { type: Msg.Hello, version: 11, op: 1, params: DEFAULT_PARAMS, algo: 3, size: 5, basisVersion: 0, name: 'a/b' } as const;
  const FLAGS = 3;
  // type, version, op, flags (algo 3 in bits 4–7), size, basisVersion, name length, name: the
  // default chunking is left out
  assert.deepEqual(Array.from(encode(hello)), [Msg.Hello, 11, 1, 0x30, 5, 0, 3, 0x61, 0x2f, 0x62]);
  assert.equal((decode(encode(hello)) as { resume?: boolean }).resume, undefined);
  const f = encode({ ...hello, resume: true });
  assert.equal(f[FLAGS], 0x30 | HelloFlag.Resume);
  assert.equal((decode(f) as { resume?: boolean }).resume, true);
  const known = HelloFlag.Known | HelloFlag.Params | HelloFlag.Modified;
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 255 }), (flags) => {
      const g = encode(hello).slice();
      g[FLAGS] = flags;
      // a flag whose field is not there: truncated
      if (flags & known) assert.throws(() => decode(g), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed && /truncated/.test(e.message));
      else {
        const h = decode(g) as { resume?: boolean; algo: number };
        assert.deepEqual([h.resume, h.algo], [flags & HelloFlag.Resume ? true : undefined, flags >> 4]);
      }
    }),
  );
  // other chunking travels after the name (Params); the default given as if it were other is
  // Malformed (one encoding per Hello, as a varint has one form)
  const params = { min: 4096, avg: 16384, max: 131072, op: 1, every: 8 };
  const p = encode({ ...hello, params });
  assert.equal(p[FLAGS], 0x30 | HelloFlag.Params);
  assert.deepEqual(Array.from(p.subarray(10)), [0x80, 0x20, 0x80, 0x80, 0x01, 0x80, 0x80, 0x08, 1, 8]);
  assert.deepEqual((decode(p) as { params: unknown }).params, params);
  const d = Uint8Array.from([...encode(hello), 0x80, 0x10, 0x80, 0x40, 0x80, 0x80, 0x04, 0, 16]);
  d[FLAGS] = 0x30 | HelloFlag.Params;
  assert.throws(() => decode(d), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed && /default/.test(e.message));
  // a known version: its number and the first ROOT_PREFIX bytes of its root (a longer root is cut
  // to them); version 0 is Malformed
  const root = Uint8Array.from({ length: 32 }, (_, i) => i);
  const k = encode({ ...hello, known: { version: 300, root } });
  assert.equal(k[FLAGS], 0x30 | HelloFlag.Known);
  assert.deepEqual(Array.from(k.subarray(10)), [0xac, 0x02, ...root.subarray(0, ROOT_PREFIX)]);
  const z = k.slice();
  z.set([0, ...root.subarray(0, ROOT_PREFIX)], 10);
  assert.throws(() => decode(z.subarray(0, z.length - 1)), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed && /known version 0/.test(e.message));
});

test("Hello's modified: absent, no flag and no bytes; present, the flag and a varint last; beyond MAX_MODIFIED_MS, Malformed", () => {
  const hello = { type: Msg.Hello, version: 11, op: 1, params: DEFAULT_PARAMS, algo: 3, size: 5, basisVersion: 0, name: 'a/b' } as const;
  const FLAGS = 3;
  const plain = encode(hello);
  assert.equal(plain.length, 7 + 3);
  assert.equal('modified' in decode(plain), false);
  const at = Date.UTC(2001, 1, 3, 4, 5, 6, 789);
  const atBytes = Array.from(encode({ type: Msg.ChecksumsEnd, count: 0, size: at }).subarray(2));
  for (const m of [{ ...hello, modified: at }, { ...hello, resume: true, modified: at }, { ...hello, known: { version: 2, root: new Uint8Array(ROOT_PREFIX).fill(9) }, modified: at }]) {
    const f = encode(m);
    assert.equal(f.length, plain.length + ('known' in m ? 1 + ROOT_PREFIX : 0) + atBytes.length);
    assert.equal(f[FLAGS] & HelloFlag.Modified, HelloFlag.Modified);
    // the last bytes, after the name (and the known version)
    assert.deepEqual(Array.from(f.subarray(f.length - atBytes.length)), atBytes);
    assert.deepEqual(norm(decode(f)), norm(m));
    // the frame up to the time is the Hello without it, but for the flag
    const g = f.slice(0, f.length - atBytes.length);
    g[FLAGS] &= ~HelloFlag.Modified;
    assert.deepEqual(Array.from(g), Array.from(encode({ ...m, modified: undefined })));
  }
  fc.assert(
    fc.property(fc.integer({ min: MAX_MODIFIED_MS + 1, max: Number.MAX_SAFE_INTEGER }), (late) => {
      assert.throws(() => encode({ ...hello, modified: late }), RangeError);
      const f = Uint8Array.from([...plain, ...encode({ type: Msg.ChecksumsEnd, count: 0, size: late }).subarray(2)]);
      f[FLAGS] = 0x30 | HelloFlag.Modified;
      assert.throws(() => decode(f), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed && /modification time/.test(e.message));
    }),
  );
  for (const bad of [-1, 1.5, NaN]) assert.throws(() => encode({ ...hello, modified: bad }), RangeError);
});

test("Ready's flags and modified: 4 bytes for a small version without; other bits, a value beyond MAX_MODIFIED_MS or a missing value are Malformed", () => {
  const ready = { type: Msg.Ready, version: 3, size: 10 } as const;
  const FLAGS = 1;
  const plain = encode(ready);
  assert.deepEqual(Array.from(plain), [Msg.Ready, 0, 3, 10]);
  assert.equal('modified' in decode(plain), false);
  const f = encode({ ...ready, modified: MAX_MODIFIED_MS });
  assert.equal(f.length, 4 + 7);
  assert.equal(f[FLAGS], ReadyFlag.Modified);
  assert.equal((decode(f) as { modified?: number }).modified, MAX_MODIFIED_MS);
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 255 }), (flags) => {
      const g = plain.slice();
      g[FLAGS] = flags;
      if (flags) assert.throws(() => decode(g), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed);
      else assert.deepEqual(decode(g), ready);
    }),
  );
  const late = Uint8Array.from([...plain, ...encode({ type: Msg.ChecksumsEnd, count: 0, size: MAX_MODIFIED_MS + 1 }).subarray(2)]);
  late[FLAGS] = ReadyFlag.Modified;
  assert.throws(() => decode(late), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed && /modification time/.test(e.message));
});

test('a frame carries one or more messages: decodeFrame reads them in order with their sizes; decode takes one only', () => {
  fc.assert(
    fc.property(fc.array(message, { minLength: 1, maxLength: 5 }), (ms) => {
      // (a Hello sets H for what follows it: these run on H = 32 only)
      const frames = ms.map((m) => encode(m, H));
      const frame = Uint8Array.from(frames.flatMap((f) => Array.from(f)));
      const got = decodeFrame(frame, H);
      assert.deepEqual(norm(got.map((x) => x.m)), norm(frames.map((f) => decode(f, H))));
      assert.deepEqual(got.map((x) => x.bytes), frames.map((f) => f.length));
      if (ms.length > 1) assert.equal(mustFailCleanly(frame), false);
      // the last message cut short: Malformed, for the whole frame
      if (frames.at(-1)!.length > 1) assert.throws(() => decodeFrame(frame.subarray(0, frame.length - 1), H), (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Malformed);
    }),
    { numRuns: 500 },
  );
  // a Hello of SHA-1: the Tokens after it carry 20-byte run hashes
  const hello = encode({ type: Msg.Hello, version: 11, op: 1, params: DEFAULT_PARAMS, algo: 1, size: 5, basisVersion: 0, name: 'a' });
  const tokens = encode({ type: Msg.Tokens, upTo: 0, first: Uint32Array.of(0), count: Uint32Array.of(1), hashes: new Uint8Array(20).fill(7) }, 20);
  const got = decodeFrame(Uint8Array.from([...hello, ...tokens]), 32, undefined, (m) => (m.type === Msg.Hello ? 20 : 32));
  assert.deepEqual(got.map((x) => [x.m.type, x.bytes]), [[Msg.Hello, hello.length], [Msg.Tokens, tokens.length]]);
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
  const frame = (...b: number[]) => Uint8Array.from(b);
  // n = 0xffffffff as a varint
  const big = [0xff, 0xff, 0xff, 0xff, 0x0f];
  for (const type of [Msg.Checksums, Msg.Copies, Msg.Delta]) assert.throws(() => decode(frame(type, ...big), H), /exceeds the limit/);
  assert.throws(() => decode(frame(Msg.Checksums, 0x80, 0x80, 0x01), H), /truncated checksums/);
  // one Delta chunk: index 0, sent whole, length 0xfffffff0: its bytes are not there
  const d = [Msg.Delta, 1, 0];
  assert.throws(() => decode(frame(...d, 0, 0xf0, 0xff, 0xff, 0xff, 0x0f), H), /truncated chunk bytes/);
  // refined: a piece count above the limit, pieces past 2^32 - 1 bytes in all, a piece of 0
  assert.throws(() => decode(frame(...d, ...big), H), /piece count .* exceeds the limit/);
  assert.throws(() => decode(frame(...d, 2, 0xff, 0xff, 0xff, 0xff, 0x1f, 0, 2 * 5 + 1, 0), H), /a piece of 5 bytes after 4294967295/);
  assert.throws(() => decode(frame(...d, 1, 0, 0), H), /a piece of 0 bytes/);
  // a copy before the start of the basis (−1 relative to 0), an index below 0
  assert.throws(() => decode(frame(...d, 1, 2 * 4 + 1, 1), H), /copy offset -1 is negative/);
  assert.throws(() => decode(frame(Msg.Delta, 1, 1, 0, 0), H), /index -1 is negative/);
  // Copies whose listed chunks add up past the limit across runs
  const copies = [Msg.Copies, 2, 0x80, 0x80, 0x02, ...new Array(5 * 32768).fill(1), 1, 0, 0x81, 0x80, 0x02];
  assert.throws(() => decode(Uint8Array.from(copies), H), /chunks listed in Copies .* exceeds the limit/);
});

test('varints: the shortest form only, at most 8 bytes, at most 2^53 − 1', () => {
  const n = (...b: number[]) => decode(Uint8Array.from([Msg.SplitRequest, 0, 0, 0, 0, Msg.Checksums].slice(5).concat([...b, 0, 0, 0, 0, 1])), H);
  assert.deepEqual(Array.from((n(1) as { lengths: Uint32Array }).lengths), [1]);
  assert.throws(() => n(0x81, 0x00), /shortest form/);
  assert.throws(() => decode(Uint8Array.from([Msg.Checksums, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), H), /more than 8 bytes/);
  // 2^53 in 8 bytes
  assert.throws(() => decode(Uint8Array.from([Msg.Checksums, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]), H), /exceeds 2\^53-1/);
  fc.assert(
    fc.property(fc.oneof(fc.nat(300), u32, u64), (v) => {
      const m = { type: Msg.BasisChecksums, offset: 0, fine: { min: 0, avg: 0, max: 0 }, lengths: Uint32Array.of(v % 2 ** 32), prefixes: new Uint8Array(8) } as Message;
      assert.deepEqual(norm(decode(encode(m, H), H)), norm(m));
    }),
  );
});

test('an edit costs a few bytes of framing: a copy that goes on where the last one ended, a short literal', () => {
  // two chunks in pieces: a copy, 3 literal bytes, the copy going on; then a copy far away
  const m: Message = { type: Msg.Delta, indices: Uint32Array.of(7, 8), chunks: [[{ offset: 1000, length: 100 }, Uint8Array.of(1, 2, 3), { offset: 1100, length: 50 }], [{ offset: 1150, length: 60 }]] };
  const f = encode(m, H);
  // type, n; chunk 7: index, pieces, copy (2 + 2), literal (1 + 3), copy (1 + 1); chunk 8:
  // index (+0), pieces, copy (1 + 1): a chunk in pieces has their length
  assert.equal(f.length, 2 + (1 + 1 + 4 + 4 + 2) + (1 + 1 + 2));
  assert.deepEqual(norm(decode(f, H)), norm(m));
  const c: Message = { type: Msg.Copies, listed: Uint32Array.of(1, 0), fastfps: Uint32Array.of(0xdeadbeef), lengths: Uint32Array.of(9000), count: Uint32Array.of(40, 3), basisFirst: Uint32Array.of(100, 141) };
  // type, n; run 0: listed 1, FastFp, length (2), count, basisFirst (+100, 2); run 1: 0, 3, +1
  assert.equal(encode(c, H).length, 2 + (1 + 4 + 2 + 1 + 2) + 3);
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
