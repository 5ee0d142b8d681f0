// Property tests of a kept basis (kept.ts): whatever the kept bytes, the edit and the chunk
// boundaries, a run refined against them puts itself back together exactly from its pieces;
// an edit costs about its own bytes in literals, and an edit in place exactly its own bytes;
// nothing found leaves the run whole; Basis Checksums in a push against a kept basis are
// refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { KeptBasis, keptBasisOf } from '../src/session/kept.ts';
import { BasisCopies } from '../src/session/refine.ts';
import { Msg, ProtocolError } from '../src/wire/protocol.ts';
import type { Piece } from '../src/wire/messages.ts';
import { EDIT_KINDS, Rng, applyEdits, randomBytes, textBytes } from '../../harness/testdata.ts';

async function rebuild(basis: Uint8Array, chunks: (Uint8Array | Piece[])[]): Promise<Uint8Array> {
  const copies = new BasisCopies(async (o, n) => basis.slice(o, o + n), basis.length, new Uint8Array(128 << 10));
  const parts: Uint8Array[] = [];
  for (const c of chunks) for (const p of c instanceof Uint8Array ? [c] : c) parts.push(p instanceof Uint8Array ? p : (await copies.copy(p)).slice());
  return Buffer.concat(parts);
}

const literal = (chunks: (Uint8Array | Piece[])[]) => chunks.reduce((a, c) => a + (c instanceof Uint8Array ? c.length : c.reduce((b, p) => b + (p instanceof Uint8Array ? p.length : 0), 0)), 0);

test('a run refined against a kept basis rebuilds exactly from its pieces', async () => {
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 2 ** 31 }), fc.integer({ min: 0, max: 100_000 }), fc.constantFrom(...EDIT_KINDS), fc.integer({ min: 1, max: 20_000 }), fc.array(fc.nat(), { maxLength: 8 }), fc.boolean(), async (seed, size, kind, total, cuts, random) => {
      const r = new Rng(seed);
      const basis = random ? randomBytes(seed, size) : textBytes(seed, size);
      const target = size ? applyEdits(basis, r, { kind, total: Math.min(total, size), maxFragment: 256 }) : randomBytes(seed + 1, 1 + r.int(500));
      if (!target.length) return;
      const ends = [...new Set([...cuts.map((c) => 1 + (c % target.length)), target.length])].sort((x, y) => x - y);
      const { chunks, copied } = new KeptBasis(basis).refine(target, ends, 0);
      assert.equal(chunks.length, ends.length);
      for (let k = 0; k < ends.length; k++) {
        const c = chunks[k];
        const len = c instanceof Uint8Array ? c.length : c.reduce((a, p) => a + p.length, 0);
        assert.equal(len, ends[k] - (k ? ends[k - 1] : 0), `chunk ${k} length`);
        if (!(c instanceof Uint8Array)) assert.ok(c.length >= 1 && c.every((p) => p.length > 0 && (p instanceof Uint8Array || p.offset + p.length <= basis.length)));
      }
      assert.deepEqual(await rebuild(basis, chunks), Buffer.from(target));
      assert.equal(copied + literal(chunks), target.length);
    }),
    { numRuns: 200 },
  );
});

test('an edit costs about its own bytes: scattered fragments, an insertion, a deletion', () => {
  const basis = textBytes(7, 1 << 20);
  for (const kind of EDIT_KINDS) {
    const target = applyEdits(basis, new Rng(11), { kind, total: 16 << 10, maxFragment: 256 });
    const { chunks } = keptBasisOf(basis).refine(target, [target.length], 0);
    const lit = literal(chunks);
    // the bytes inserted or overwritten (a deletion inserts none), and hardly more
    assert.ok(lit <= (kind === 'cut' ? 1 << 10 : (16 << 10) + 1024), `${kind}: ${lit} literal bytes for 16 KiB of edits`);
  }
  const moved = Buffer.concat([basis.subarray(600_000, 700_000), basis.subarray(0, 600_000), basis.subarray(700_000)]);
  assert.equal(literal(new KeptBasis(basis).refine(moved, [moved.length], 0).chunks), 0, 'a moved block is copied from where it was');
});

test('a run of a file edited in place costs the bytes of the edit alone, wherever it starts and wherever the edit lies in it', () => {
  // the run starts aligned with the kept bytes at its offset, so its first bytes are copied
  // from there, not from a repeat of them elsewhere (text repeats its words); the bytes before
  // and after the edit are copied down to EDGE (6) of them at the run's edges
  const EDGE = 6;
  const bases = [textBytes(21, 1 << 20), randomBytes(22, 1 << 20)];
  fc.assert(
    fc.property(fc.nat(1), fc.nat(), fc.integer({ min: 2 * EDGE + 8, max: 20_000 }), fc.nat(), (b, a0, length, d0) => {
      const basis = bases[b];
      const at = a0 % (basis.length - length);
      const d = EDGE + (d0 % (length - 2 * EDGE - 8 + 1));
      const run = basis.slice(at, at + length);
      for (let i = d; i < d + 8; i++) run[i] ^= 0xa5;
      const { chunks, copied } = new KeptBasis(basis).refine(run, [length], at);
      assert.equal(literal(chunks), 8, `run at ${at}, ${length} bytes, edit at ${d}`);
      assert.equal(copied, length - 8);
    }),
    { numRuns: 300 },
  );
});

test('bytes not found in the kept basis go whole', () => {
  const basis = randomBytes(3, 100_000);
  const target = randomBytes(4, 50_000);
  const { chunks, copied } = new KeptBasis(basis).refine(target, [20_000, 50_000], 0);
  assert.equal(copied, 0);
  assert.ok(chunks.every((c) => c instanceof Uint8Array));
});

test('Basis Checksums in a push against a kept basis are refused', () => {
  assert.throws(() => new KeptBasis(new Uint8Array(10)).add({ type: Msg.BasisChecksums, offset: 0, fine: { min: 64, avg: 256, max: 1024 }, lengths: new Uint32Array(0), prefixes: new Uint8Array(0) }), ProtocolError);
});

test('bytes repeated across the kept basis are copied from where the edit left them, in order', () => {
  // 200 sections, each the same 2 KB header before 20 KB of its own text (licence headers,
  // boilerplate): a cut shifts what follows, and the header's bytes are found at every section
  const header = textBytes(99, 2048);
  const basis = Buffer.concat(Array.from({ length: 200 }, (_, i) => [header, textBytes(1000 + i, 20_000)]).flat());
  const target = applyEdits(basis, new Rng(5), { kind: 'cut', total: 64 << 10, maxFragment: 256 });
  const { chunks } = new KeptBasis(basis).refine(target, [target.length], 0);
  let end = 0;
  let far = 0;
  for (const c of chunks) for (const p of c instanceof Uint8Array ? [c] : c) {
    if (p instanceof Uint8Array) continue;
    if (Math.abs(p.offset - end) > 4096) far++;
    end = p.offset + p.length;
  }
  assert.equal(far, 0, `${far} copies jump away from where the one before ended`);
});
