/**
 * A stored version's bytes, read through its layout and verified: every read is widened to
 * whole chunks, and each chunk's strong hash is checked against the version index before a
 * byte of it is returned (docs/store.md, "Reading"). Damage is a ProtocolError naming the
 * file and version, never data. Segments are read by ranged gets, one at a time, so a read
 * holds no open object between calls.
 */
import type { ChunkIndex, Source } from '../../../shared/src/chunk-index.ts';
import { ErrorCode, ProtocolError, hashLength } from '../../../shared/src/protocol.ts';
import { hash_chunks } from '../../../shared/src/wasm.ts';
import { type Backend, NotFoundError } from './backend.ts';
import type { Layout } from './format.ts';
import { segmentKey } from './keys.ts';
import type { VerifiedRanges } from './verified.ts';

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
  ) {
    this.starts = prefixSums(layout.extents.map((e) => e.length));
    this.size = this.starts[layout.extents.length];
    this.chunkStarts = prefixSums(index.lengths);
  }

  /**
   * Makes sure bytes [offset, offset + length) (whole chunks) match their chunk hashes: reads
   * and verifies the pieces not verified by this process before. Throws on damage.
   */
  async verify(offset: number, length: number): Promise<void> {
    const STEP = 4 << 20;
    const pieces = this.slice(offset, length);
    if (this.verified && pieces.every((p) => this.verified!.has(p.segment, p.offset, p.offset + p.length))) return;
    for (let o = offset; o < offset + length; o += STEP) await this.read(o, Math.min(STEP, offset + length - o));
  }

  /** The segment pieces holding bytes [offset, offset + length) of this version. */
  slice(offset: number, length: number): { segment: string; offset: number; length: number }[] {
    const out = [];
    for (let k = findStart(this.starts, offset), pos = offset; pos < offset + length; k++) {
      const e = this.layout.extents[k];
      const skip = pos - this.starts[k];
      const n = Math.min(e.length - skip, offset + length - pos);
      out.push({ segment: this.layout.segments[e.seg], offset: e.offset + skip, length: n });
      pos += n;
    }
    return out;
  }

  async read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array> {
    length = Math.max(0, Math.min(length, this.size - offset));
    if (length === 0) return new Uint8Array(0);
    // widen to whole chunks, read, verify, hand out the asked part
    const c0 = findStart(this.chunkStarts, offset);
    const c1 = findStart(this.chunkStarts, offset + length - 1) + 1;
    const from = this.chunkStarts[c0];
    const whole = await this.readRaw(from, this.chunkStarts[c1] - from);
    const H = hashLength(this.index.algo);
    const got = hash_chunks(this.index.algo, whole, this.index.lengths.subarray(c0, c1));
    const want = this.index.hashes.subarray(c0 * H, c1 * H);
    if (!equal(got, want)) {
      let k = 0;
      while (k < c1 - c0 && equal(got.subarray(k * H, (k + 1) * H), want.subarray(k * H, (k + 1) * H))) k++;
      throw new ProtocolError(ErrorCode.Internal, `damaged store: ${this.what}, chunk ${c0 + k} (bytes ${this.chunkStarts[c0 + k]}..${this.chunkStarts[c0 + k + 1]}) does not match its hash`);
    }
    if (this.verified) for (const p of this.slice(from, whole.length)) this.verified.add(p.segment, p.offset, p.offset + p.length);
    const part = whole.subarray(offset - from, offset - from + length);
    if (into && into.length >= length) {
      into.set(part);
      return into.subarray(0, length);
    }
    return part;
  }

  /** Bytes [offset, offset + length) through the layout, unverified. */
  private async readRaw(offset: number, length: number): Promise<Uint8Array> {
    const pieces = this.slice(offset, length);
    if (pieces.length === 1) return this.get(pieces[0]);
    const buf = new Uint8Array(length);
    let o = 0;
    for (const p of pieces) {
      buf.set(await this.get(p), o);
      o += p.length;
    }
    return buf;
  }

  private async get(p: { segment: string; offset: number; length: number }): Promise<Uint8Array> {
    let b: Uint8Array;
    try {
      b = await this.backend.get(segmentKey(p.segment), { offset: p.offset, length: p.length });
    } catch (e) {
      if (e instanceof NotFoundError) throw new ProtocolError(ErrorCode.Internal, `damaged store: ${this.what}, segment ${p.segment} is missing`);
      throw e;
    }
    if (b.length !== p.length) throw new ProtocolError(ErrorCode.Internal, `damaged store: ${this.what}, segment ${p.segment} is shorter than its layout says`);
    return b;
  }
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
