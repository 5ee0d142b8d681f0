// Property tests of the finer level (refine.ts): whatever the basis, the edit and the chunk
// boundaries, a run of chunks refined against the receiver's Basis Checksums puts itself back
// together exactly from its pieces and the basis bytes they copy; scattered edits leave most
// of the bytes to copy; hostile Basis Checksums are refused; the receiver lists the middles of
// gaps while they pay, reading several basis stretches at once and listing them in order.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { BasisChecksumTable } from '../src/session/basis-checksums.ts';
import { BasisCopies, BasisListing, MiddleYield, fineCut } from '../src/session/refine.ts';
import { ChecksumList } from '../src/session/checksum-list.ts';
import { type Source, chunkSource, offsetsOf } from '../src/chunking/chunk-index.ts';
import { matchRuns } from '../src/session/matcher.ts';
import { DEFAULT_ALGO, DEFAULT_FINE, DEFAULT_PARAMS, Msg, ProtocolError, hashLength } from '../src/wire/protocol.ts';
import { type BasisChecksums, PREFIX, type Piece } from '../src/wire/messages.ts';
import { EDIT_KINDS, Rng, applyEdits, fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import '../src/chunking/wasm.ts';

const FINE = { min: 64, avg: 256, max: 1024 };

function hintsFor(basis: Uint8Array, stretches: [number, number][]): BasisChecksumTable {
  const hints = new BasisChecksumTable(3);
  for (const [p, q] of stretches) {
    const { lengths, prefixes } = fineCut(basis.subarray(p, q), FINE, 3);
    hints.add({ type: Msg.BasisChecksums, offset: p, fine: FINE, lengths, prefixes });
  }
  return hints;
}

async function rebuild(basis: Uint8Array, chunks: (Uint8Array | Piece[])[]): Promise<Uint8Array> {
  const copies = new BasisCopies(async (o, n) => basis.slice(o, o + n), basis.length, new Uint8Array(128 << 10));
  const parts: Uint8Array[] = [];
  for (const c of chunks) for (const p of c instanceof Uint8Array ? [c] : c) parts.push(p instanceof Uint8Array ? p : (await copies.copy(p)).slice());
  return Buffer.concat(parts);
}

test('a refined run rebuilds exactly from its pieces', async () => {
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 2 ** 31 }), fc.integer({ min: 1, max: 200_000 }), fc.constantFrom(...EDIT_KINDS), fc.integer({ min: 1, max: 20_000 }), fc.array(fc.nat(), { maxLength: 8 }), async (seed, size, kind, total, cuts) => {
      const r = new Rng(seed);
      const basis = textBytes(seed, size);
      const target = applyEdits(basis, r, { kind, total: Math.min(total, size), maxFragment: 256 });
      if (!target.length) return;
      // listed: the whole basis, or stretches of it
      const stretches: [number, number][] = r.int(2) ? [[0, basis.length]] : [[0, r.int(basis.length)], [r.int(basis.length), basis.length]].filter(([p, q]) => q > p) as [number, number][];
      const hints = hintsFor(basis, stretches);
      const ends = [...new Set([...cuts.map((c) => 1 + (c % target.length)), target.length])].sort((x, y) => x - y);
      const { chunks, copied } = hints.refine(target, ends, 0);
      assert.equal(chunks.length, ends.length);
      for (let k = 0; k < ends.length; k++) {
        const c = chunks[k];
        const len = c instanceof Uint8Array ? c.length : c.reduce((a, p) => a + p.length, 0);
        assert.equal(len, ends[k] - (k ? ends[k - 1] : 0), `chunk ${k} length`);
        if (!(c instanceof Uint8Array)) assert.ok(c.length >= 1 && c.every((p) => p.length > 0));
      }
      assert.deepEqual(await rebuild(basis, chunks), Buffer.from(target));
      assert.ok(copied <= target.length);
    }),
    { numRuns: 150 },
  );
});

test('scattered small edits leave most bytes to copy', () => {
  const basis = textBytes(9, 1 << 20);
  const target = applyEdits(basis, new Rng(4), { kind: 'insert', total: 16_384, maxFragment: 256, placement: [0, 1, 0] });
  const { copied } = hintsFor(basis, [[0, basis.length]]).refine(target, [target.length], 0);
  // about 128 fragments of at most 256 bytes spread over the middle third (350 KB, every 8 KB
  // chunk of it dirty): each leaves its own bytes and one or two finer chunks to send
  const literal = target.length - copied;
  assert.ok(literal < 8 * 16_384, `literal ${literal} of ${target.length}`);
});

test('hostile Basis Checksums are refused', () => {
  const ok = { type: Msg.BasisChecksums, offset: 0, fine: FINE, lengths: Uint32Array.of(100), prefixes: new Uint8Array(PREFIX) } as const;
  for (const [m, why] of [
    [{ ...ok, fine: { min: 64, avg: 256, max: 100 } }, /max 100 must be even in 1024/],
    [{ ...ok, lengths: Uint32Array.of(0) }, /outside 1..1024/],
    [{ ...ok, lengths: Uint32Array.of(2000) }, /outside 1..1024/],
    [{ ...ok, offset: 2 ** 53 - 10 }, /beyond 2\^53/],
  ] as const) {
    assert.throws(() => new BasisChecksumTable(3).add(m as any), (e: unknown) => e instanceof ProtocolError && why.test(e.message));
  }
  const h = new BasisChecksumTable(3);
  h.add(ok);
  assert.throws(() => h.add({ ...ok, fine: { min: 128, avg: 512, max: 2048 } }), /change their chunk sizes/);
});

test('bytes repeated in the basis are copied in order, however they were listed', async () => {
  // zeros and a repeated 3000-byte pattern: the same finer chunks listed at many offsets
  const pattern = textBytes(5, 3000);
  const parts = [textBytes(6, 5000), new Uint8Array(40_000), pattern, pattern, textBytes(7, 2000), pattern, new Uint8Array(20_000), pattern];
  const basis = new Uint8Array(Buffer.concat(parts));
  const third = Math.floor(basis.length / 3);
  for (const stretches of [[[0, basis.length]], [[2 * third, basis.length], [third, 2 * third], [0, third]]] as [number, number][][]) {
    const { chunks, copied } = hintsFor(basis, stretches).refine(basis, [basis.length], 0);
    assert.deepEqual(await rebuild(basis, chunks), Buffer.from(basis));
    // the copies go forward through the basis (the receiver reads it in order), each from the
    // repeat at or after the end of the one before
    let end = 0;
    for (const p of chunks[0] as Piece[]) {
      if (p instanceof Uint8Array) continue;
      assert.ok(p.offset >= end, `a copy at ${p.offset} goes back before ${end}`);
      end = p.offset + p.length;
    }
    assert.ok(copied > basis.length - 4 * 1024, `copied ${copied} of ${basis.length}`);
  }
});

test('one chunk listed many times: each lookup finds the repeat that continues the copy', () => {
  // 2^18 listings of the same 1 KiB chunk of zeros (a sparse file, or a receiver that lists one
  // chunk over and over), then 4 MiB of zeros to refine: 4096 lookups among all of them
  const zero = fineCut(new Uint8Array(1024), FINE, 3);
  assert.deepEqual([...zero.lengths], [1024]);
  const n = 1 << 18;
  const prefixes = new Uint8Array(n * PREFIX);
  for (let i = 0; i < n; i++) prefixes.set(zero.prefixes, i * PREFIX);
  const h = new BasisChecksumTable(3);
  h.add({ type: Msg.BasisChecksums, offset: 0, fine: FINE, lengths: new Uint32Array(n).fill(1024), prefixes });
  const target = new Uint8Array(4 << 20);
  const { chunks, copied } = h.refine(target, [target.length], 0);
  assert.equal(copied, target.length);
  assert.deepEqual(chunks[0], [{ offset: 0, length: target.length }]);
});

test('the middles of gaps are listed while copies of them come back', () => {
  const MiB = 1 << 20;
  const y = new MiddleYield();
  // gap g: target chunks [10g, 10g + 8), its middle basis bytes [g MiB + 8 KiB, (g + 1) MiB - 8 KiB)
  const from = (g: number) => g * MiB + 8192;
  const to = (g: number) => (g + 1) * MiB - 8192;
  const list = (g: number) => y.listedMiddle(10 * g, 10 * g + 8, from(g), to(g), to(g) - from(g));
  let g = 0;
  // new bytes: 16 middles listed, none copied; the Delta Bytes have not come yet, so every
  // middle is listed still
  for (; g < 16; g++) {
    assert.equal(y.listMiddle(), true);
    list(g);
  }
  // the Delta Bytes of those gaps: copies of their ends only (outside the middles)
  for (let k = 0; k < g; k++) y.copy(10 * k + 1, from(k) - 4096, 4096);
  y.reached(10 * g);
  // now only probes are listed: the 8th middle, then one 16 gaps later, 32, 64, and every
  // 128th from there on
  const decisions: boolean[] = [];
  for (let k = 0; k < 400; k++) decisions.push(y.listMiddle());
  assert.deepEqual(decisions.map((d, k) => (d ? k : -1)).filter((k) => k >= 0), [7, 23, 55, 119, 247, 375]);
  // a probed middle that pays (scattered edits: most of it copied) turns listing back on
  list(g);
  y.copy(10 * g + 2, from(g), to(g) - from(g) - 100_000);
  y.reached(10 * g + 10);
  g++;
  for (let k = 0; k < 8; k++) assert.equal(y.listMiddle(), true);
  // and when middles stop paying again, the probes start over at every 8th
  for (let k = 0; k < 16; k++, g++) list(g);
  y.reached(10 * g);
  const again: boolean[] = [];
  for (let k = 0; k < 24; k++) again.push(y.listMiddle());
  assert.deepEqual(again.map((d, k) => (d ? k : -1)).filter((k) => k >= 0), [7, 23]);
});

test('a listing reads several basis stretches at once and lists them in order, as one read at a time would', async () => {
  const rng = new Rng(31);
  const basis = fastRandomBytes(31, 6 << 20);
  const target = applyEdits(basis, rng, { kind: 'inverse', total: 40_000, placement: [1 / 3, 1 / 3, 1 / 3] });
  const memory = (bytes: Uint8Array): Source => ({ size: bytes.length, read: async (o, n) => bytes.slice(o, o + n) });
  const index = await chunkSource(memory(basis), DEFAULT_PARAMS, DEFAULT_ALGO);
  const t = await chunkSource(memory(target), DEFAULT_PARAMS, DEFAULT_ALGO);
  const list = new ChecksumList(hashLength(DEFAULT_ALGO));
  list.append(t.lengths, t.fastfps);
  const runs = matchRuns(list.weak(), index);
  /** the Basis Checksums a listing sends over `source`, and the most reads it had running */
  const listed = async (source: Source) => {
    let running = 0;
    let most = 0;
    const counted: Source = {
      size: source.size,
      read: async (o, n, into) => {
        most = Math.max(most, ++running);
        try {
          return await source.read(o, n, into);
        } finally {
          running--;
        }
      },
    };
    const sent: BasisChecksums[] = [];
    const listing = new BasisListing({ index, source: counted }, () => offsetsOf(index.lengths), async (m) => void sent.push(m), DEFAULT_ALGO, DEFAULT_FINE);
    // the list's runs come in parts, as the Checksums messages do
    for (let r = 1; r <= runs.length; r += 7) await listing.listGaps(list, runs.slice(0, r), list.count, false);
    await listing.listGaps(list, runs, list.count, true);
    return { sent, most };
  };
  // reads answered after random delays, so they end out of order
  const slow: Source = { size: basis.length, read: async (o, n) => {
    await new Promise((r) => setTimeout(r, rng.int(5)));
    return basis.slice(o, o + n);
  } };
  const one = await listed({ size: basis.length, read: async (o, n) => basis.slice(o, o + n) });
  const many = await listed(slow);
  assert.ok(one.sent.length > 50, `${one.sent.length} Basis Checksums`);
  assert.ok(many.most > 1 && many.most <= 8, `${many.most} reads at once`);
  assert.deepEqual(many.sent, one.sent);
});
