/**
 * A stored version's bytes, read through its layout and verified: every read is widened to
 * whole chunks, and each chunk's strong hash is checked against the version index before a
 * byte of it is returned (docs/store.md, "Reading"). Damage is a DamageError (errors.ts) naming the
 * file and version, never data. Segments are read by ranged gets, one at a time, so a read
 * holds no open object between calls.
 */
import type { ChunkIndex, Source } from '../../../shared/src/chunking/chunk-index.ts';
import { hashLength } from '../../../shared/src/wire/protocol.ts';
import { allLimited } from '../../../shared/src/base/limited.ts';
import { hash_chunks } from '../../../shared/src/chunking/wasm.ts';
import { type Backend, NotFoundError } from './backend.ts';
import { DamageError } from './errors.ts';
import type { Layout } from './format.ts';
import { familyPrefix, segmentKey } from './keys.ts';
import type { SegmentBytes, VerifiedRanges } from './verified.ts';

export class VersionSource implements Source {
  readonly size: number;
  /** the file offset where each extent starts, plus the size at the end */
  private starts: Float64Array;
  /** the file offset where each chunk starts, plus the size at the end */
  private chunkStarts: Float64Array;

  constructor(
    readonly backend: Backend,
    readonly layout: Layout,
    readonly index: ChunkIndex,
    /** "<name> version <V>", for errors */
    readonly what: string,
    /** the gc epoch the version's objects are known at (its head entry's `epoch`): a commit
     *  copying these bytes checks they still exist if a collection ended since (gc.ts `guardRefs`) */
    readonly epoch = 0,
    /** where verified segment ranges are noted (the process's set) */
    readonly verified?: VerifiedRanges,
    /** the version index's id, when the source is a stored version */
    readonly id?: string,
    /** bytes of segments this process wrote, read from memory (never to verify the store) */
    readonly written?: SegmentBytes,
  ) {
    this.starts = prefixSums(layout.extents.map((e) => e.length));
    this.size = this.starts[layout.extents.length];
    this.chunkStarts = prefixSums(index.lengths);
  }

  /**
   * Makes sure the stretches `ranges` (whole chunks) of this version match their chunk hashes
   * now: a segment whose pieces this process verified before counts only while its stamp is
   * still the one they were verified under (`Backend.stamps`: a stat per segment, or on S3
   * one listing per segment family);
   * everything else is read and verified. `recheck` false trusts the ranges noted without
   * asking for stamps (one pass of `check`, which notes its own; a push's basis, whose
   * commit verifies what it copies). Throws on damage, and forgets what was verified of a
   * segment whose stamp changed or whose bytes are damaged. `signal` stops it between reads.
   */
  async verify(ranges: { offset: number; length: number }[], recheck = true, signal?: AbortSignal): Promise<void> {
    const STEP = 4 << 20;
    const pieces = ranges.flatMap((r) => this.slice(r.offset, r.length));
    const bySegment = new Map<string, Piece[]>();
    for (const p of pieces) {
      const ps = bySegment.get(p.segment);
      if (ps) ps.push(p);
      else bySegment.set(p.segment, [p]);
    }
    const good = new Set<string>();
    const v = this.verified;
    if (v) {
      // segments whose pieces were all verified under one stamp; asked by family (keys.ts)
      const asked = new Map<string, { segment: string; stamp: string }[]>();
      for (const [segment, ps] of bySegment) {
        const stamps = new Set(ps.map((p) => v.covered(segment, p.offset, p.offset + p.length)));
        if (stamps.size !== 1 || stamps.has(undefined)) continue;
        const [stamp] = stamps as Set<string | null>;
        if (!recheck) good.add(segment);
        // one verified without a stamp counts no more, not even for a verify that asks no
        // stamps (a push's basis, Store.openBasis)
        else if (stamp === null) v.forget(segment);
        else {
          const family = familyPrefix(segment);
          const f = asked.get(family);
          if (f) f.push({ segment, stamp });
          else asked.set(family, [{ segment, stamp }]);
        }
      }
      await allLimited([...asked], STAMP_CHECKS, async ([family, segs]) => {
        const now = await this.backend.stamps(family, segs.map((s) => segmentKey(s.segment)));
        segs.forEach((s, k) => {
          if (now[k] === s.stamp) good.add(s.segment);
          else v.forget(s.segment); // its stamp changed: what was verified of it counts no more
        });
      });
    }
    // the rest, as file stretches in order (merged), read in steps
    const todo = pieces.filter((p) => !good.has(p.segment)).sort((a, b) => a.at - b.at);
    const spans: [number, number][] = [];
    for (const p of todo) {
      const last = spans[spans.length - 1];
      if (last && p.at <= last[1]) last[1] = Math.max(last[1], p.at + p.length);
      else spans.push([p.at, p.at + p.length]);
    }
    // the reads, widened to whole chunks, planned together: a segment's pieces close together
    // are fetched by one ranged read for the whole verify (a small edit's stretches each hold a
    // piece of the segment the previous sync wrote)
    const steps: [number, number][] = [];
    for (const [from, to] of spans) for (let o = from; o < to; o += STEP) steps.push([o, Math.min(STEP, to - o)]);
    const plan = this.plan(
      steps.flatMap(([o, n]) => {
        const [c0, c1] = this.chunksOf(o, n);
        return this.slice(this.chunkStarts[c0], this.chunkStarts[c1] - this.chunkStarts[c0]);
      }),
      PLAN_BYTES,
    );
    for (const [o, n] of steps) {
      signal?.throwIfAborted();
      await this.readChecked(o, n, undefined, true, plan);
    }
  }

  /** The chunks [c0, c1) holding bytes [offset, offset + length) (length > 0). */
  private chunksOf(offset: number, length: number): [number, number] {
    return [findStart(this.chunkStarts, offset), findStart(this.chunkStarts, offset + length - 1) + 1];
  }

  /** Ranged reads for `pieces`: per segment, the stretch from its first piece to its last,
   *  fetched once when it holds more than one piece and at most COALESCE_GAP of it is fetched
   *  in vain; such stretches of at most `maxBytes` in all. */
  private plan(pieces: Piece[], maxBytes: number): Map<string, Span> {
    const spans = new Map<string, Span>();
    for (const p of pieces) {
      const sp = spans.get(p.segment);
      if (!sp) spans.set(p.segment, { lo: p.offset, hi: p.offset + p.length, need: p.length, pieces: 1 });
      else {
        sp.lo = Math.min(sp.lo, p.offset);
        sp.hi = Math.max(sp.hi, p.offset + p.length);
        sp.need += p.length;
        sp.pieces++;
      }
    }
    let bytes = 0;
    for (const [segment, sp] of spans) {
      if (sp.pieces === 1 || sp.hi - sp.lo > sp.need + COALESCE_GAP || bytes + sp.hi - sp.lo > maxBytes) spans.delete(segment);
      else bytes += sp.hi - sp.lo;
    }
    return spans;
  }

  /** The segment pieces holding bytes [offset, offset + length) of this version (`at`: where
   *  each starts in the file). */
  slice(offset: number, length: number): Piece[] {
    const out = [];
    for (let k = findStart(this.starts, offset), pos = offset; pos < offset + length; k++) {
      const e = this.layout.extents[k];
      const skip = pos - this.starts[k];
      const n = Math.min(e.length - skip, offset + length - pos);
      out.push({ segment: this.layout.segments[e.seg], offset: e.offset + skip, length: n, at: pos });
      pos += n;
    }
    return out;
  }

  read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array> {
    return this.readChecked(offset, length, into, false);
  }

  /** `read`; `fromStore`: every byte from the store (to verify it), none from memory; `plan`:
   *  the ranged reads of segments planned for several calls (`verify`), else planned here. */
  private async readChecked(offset: number, length: number, into: Uint8Array | undefined, fromStore: boolean, plan?: Map<string, Span>): Promise<Uint8Array> {
    length = Math.max(0, Math.min(length, this.size - offset));
    if (length === 0) return new Uint8Array(0);
    // widen to whole chunks, read, verify, hand out the asked part
    const [c0, c1] = this.chunksOf(offset, length);
    const from = this.chunkStarts[c0];
    const { bytes: whole, stamped } = await this.readRaw(from, this.chunkStarts[c1] - from, fromStore, plan);
    const H = hashLength(this.index.algo);
    const got = hash_chunks(this.index.algo, whole, this.index.lengths.subarray(c0, c1));
    const want = this.index.hashes.subarray(c0 * H, c1 * H);
    if (!equal(got, want)) {
      // nothing verified of these segments counts any more (a basis opened without asking
      // their stamps, Store.openBasis, reads them)
      for (const { p } of stamped) this.verified?.forget(p.segment);
      let k = 0;
      while (k < c1 - c0 && equal(got.subarray(k * H, (k + 1) * H), want.subarray(k * H, (k + 1) * H))) k++;
      throw this.damage(new DamageError(`damaged store: ${this.what}, chunk ${c0 + k} (bytes ${this.chunkStarts[c0 + k]}..${this.chunkStarts[c0 + k + 1]}) does not match its hash`, false, this.id));
    }
    if (this.verified) for (const { p, stamp } of stamped) this.verified.add(p.segment, stamp, p.offset, p.offset + p.length);
    const part = whole.subarray(offset - from, offset - from + length);
    if (into && into.length >= length) {
      into.set(part);
      return into.subarray(0, length);
    }
    return part;
  }

  /** Bytes [offset, offset + length) through the layout, unverified, with the stamp of each
   *  piece read from the store (pieces read from memory have none: they verify nothing there). */
  private async readRaw(offset: number, length: number, fromStore: boolean, plan?: Map<string, Span>): Promise<{ bytes: Uint8Array; stamped: { p: Piece; stamp: string | null }[] }> {
    const pieces = this.slice(offset, length);
    const stamped: { p: Piece; stamp: string | null }[] = [];
    // pieces of one segment close together are fetched in one ranged read (a refined chunk's
    // pieces alternate between the bytes a sync sent and its basis' segments)
    // (or in the read planned for several calls, whose bytes go once its last piece is used)
    const own = this.plan(pieces, Infinity);
    const one = async (p: Piece) => {
      const kept = fromStore ? null : (this.written?.get(p.segment, p.offset, p.length) ?? null);
      if (kept) return kept;
      const planned = plan?.get(p.segment);
      const sp = planned && planned.lo <= p.offset && p.offset + p.length <= planned.hi ? planned : own.get(p.segment);
      if (!sp) {
        const got = await this.get(p);
        stamped.push({ p, stamp: got.stamp });
        return got.body;
      }
      const whole = { segment: p.segment, offset: sp.lo, length: sp.hi - sp.lo, at: -1 };
      const got = sp.got ?? (sp.got = this.get(whole));
      if (sp === planned && --sp.pieces === 0) plan!.delete(p.segment);
      const { body, stamp } = await got;
      stamped.push({ p, stamp });
      return body.subarray(p.offset - sp.lo, p.offset - sp.lo + p.length);
    };
    if (pieces.length === 1) return { bytes: await one(pieces[0]), stamped };
    const buf = new Uint8Array(length);
    let o = 0;
    for (const p of pieces) {
      buf.set(await one(p), o);
      o += p.length;
    }
    return { bytes: buf, stamped };
  }

  private async get(p: Piece): Promise<{ body: Uint8Array; stamp: string | null }> {
    let got;
    try {
      got = await this.backend.getStamped(segmentKey(p.segment), { offset: p.offset, length: p.length });
    } catch (e) {
      if (e instanceof NotFoundError) throw this.damage(new DamageError(`damaged store: ${this.what}, segment ${p.segment} is missing`, true, this.id));
      throw e;
    }
    if (got.body.length !== p.length) throw this.damage(new DamageError(`damaged store: ${this.what}, segment ${p.segment} is shorter than its layout says`, false, this.id));
    return got;
  }

  /** Notes the damage found in this version (VerifiedRanges.noteDamaged) and returns it. */
  private damage(e: DamageError): DamageError {
    if (this.id) this.verified?.noteDamaged(this.id);
    return e;
  }
}

/** Pieces of one segment within a read are fetched together when this many bytes between
 *  them, at most, are fetched in vain. */
const COALESCE_GAP = 64 << 10;

/** The ranged reads a verify plans for all its stretches hold at most this many bytes in all
 *  (pieces past it are fetched as each read plans them, as `read` does). */
const PLAN_BYTES = 1 << 20;

/** A ranged read of a segment planned for several pieces: [lo, hi), the bytes of the pieces
 *  in it, how many, and the read once started. */
interface Span {
  lo: number;
  hi: number;
  need: number;
  pieces: number;
  got?: Promise<{ body: Uint8Array; stamp: string | null }>;
}

/** Families whose segment stamps `verify` asks for at once. */
const STAMP_CHECKS = 8;

export interface Piece {
  segment: string;
  /** where in the segment */
  offset: number;
  length: number;
  /** where in the file */
  at: number;
}

function prefixSums(lengths: ArrayLike<number>): Float64Array {
  const s = new Float64Array(lengths.length + 1);
  for (let k = 0; k < lengths.length; k++) s[k + 1] = s[k] + lengths[k];
  return s;
}

/** The k with starts[k] <= offset < starts[k + 1] (binary search). */
function findStart(starts: Float64Array, offset: number): number {
  let lo = 0;
  let hi = starts.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= offset) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

function equal(a: Uint8Array, b: Uint8Array) {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}
