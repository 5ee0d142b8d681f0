/**
 * A kept basis: a client that holds the bytes of the version it last synced (not only its chunk
 * index, known.ts) refines the chunks it sends against those bytes at byte granularity, as a
 * delta compressor holding both versions does. Each chunk goes as copies of kept bytes and
 * literal pieces (docs/protocol.md §3 "A known basis"), so a 32-byte edit costs its own bytes
 * and two copies instead of a finer chunk of 64–1024 bytes, and an insertion or deletion costs
 * only what it inserts.
 *
 * The kept bytes are indexed in blocks of BLOCK bytes at block-aligned offsets (a rolling hash
 * of each, blocks of one hash slot chained); the sender slides a window of BLOCK bytes over
 * what it sends and, on a block found, extends the match both ways byte by byte. Of the blocks
 * that match (bytes repeated in the file: text, padding), it takes the one nearest where the
 * last copy would continue, so the copies follow the kept bytes in order, as the receiver
 * reads its basis best. At each offset it first tries the alignment of the last copy (an edit
 * that overwrote bytes in place resumes there) with RESUME bytes; a run starts aligned with
 * the kept bytes at its own offset in the file. The receiver checks every copy's bounds and
 * the root covers the bytes: a kept copy gone wrong costs a VerifyFailed and a retry, never a
 * wrong file.
 */
import { type Refiner, cutAtEnds } from './basis-checksums.ts';
import type { BasisChecksums, Piece } from '../wire/messages.ts';
import { inconsistent as bad } from '../wire/protocol.ts';

/** Bytes per indexed block of the kept basis: the shortest match found anywhere. */
export const BLOCK = 32;
/** Bytes that must agree to resume at the last copy's alignment. */
const RESUME = 16;
/** Bytes that agree at a run's edge, fewer than RESUME, that are copied, not sent: a copy piece
 *  costs 2–6 bytes (docs/protocol.md §4 Delta). */
const EDGE = 6;
/** Blocks of one hash slot looked at, at most, for the one nearest the last copy. */
const CHAIN = 64;
/** A block found farther than this from where the last copy would continue (the same bytes
 *  repeated elsewhere) is taken only if those bytes are not within this distance of it, at
 *  any offset (an edit shifted what follows by less). */
const LOCAL = 1024;
const P = 0x01000193; // the rolling hash's multiplier (FNV's prime)
const POW = (() => {
  let x = 1;
  for (let i = 1; i < BLOCK; i++) x = Math.imul(x, P);
  return x;
})();

const hashAt = (b: Uint8Array, at: number) => {
  let h = 0;
  for (let i = at; i < at + BLOCK; i++) h = (Math.imul(h, P) + b[i]) | 0;
  return h;
};

/** Bytes equal at `a[i..]` and `b[j..]`, from the front, at most `max`. */
function agree(a: Uint8Array, i: number, b: Uint8Array, j: number, max: number): number {
  let n = 0;
  while (n < max && a[i + n] === b[j + n]) n++;
  return n;
}

export class KeptBasis implements Refiner {
  /** by hash slot: the last block (number + 1) in it, 0: none */
  private heads: Int32Array | null = null;
  /** by block: the block before it in its slot (number + 1), 0: none */
  private chain = new Int32Array(0);
  private shift = 0;

  constructor(readonly bytes: Uint8Array) {}

  get count(): number {
    return this.bytes.length;
  }

  get copyable(): number {
    return this.bytes.length;
  }

  readonly whole = true;

  add(m: BasisChecksums): void {
    throw bad(`Basis Checksums (at ${m.offset}) in a push against a known version`);
  }

  private slot(h: number): number {
    return Math.imul(h, 0x9e3779b1) >>> this.shift;
  }

  /** Indexes the kept bytes, once (~20 ms per 10 MB; 4 bytes of table per 8 kept bytes). */
  index(): Int32Array {
    if (this.heads) return this.heads;
    const blocks = Math.floor(this.bytes.length / BLOCK);
    let bits = 10;
    while (1 << bits < 2 * blocks) bits++;
    this.shift = 32 - bits;
    const heads = new Int32Array(1 << bits);
    this.chain = new Int32Array(blocks);
    for (let k = 0; k < blocks; k++) {
      const s = this.slot(hashAt(this.bytes, k * BLOCK));
      this.chain[k] = heads[s];
      heads[s] = k + 1;
    }
    return (this.heads = heads);
  }

  /** The kept offset of a block equal to `run[p, p + BLOCK)` with hash `h`, nearest `near`;
   *  -1: none. */
  private find(run: Uint8Array, p: number, h: number, near: number): number {
    let best = -1;
    for (let e = this.heads![this.slot(h)], n = 0; e && n < CHAIN; e = this.chain[e - 1], n++) {
      const q = (e - 1) * BLOCK;
      if ((best < 0 || Math.abs(q - near) < Math.abs(best - near)) && agree(run, p, this.bytes, q, BLOCK) === BLOCK) best = q;
    }
    if (best < 0 || Math.abs(best - near) <= LOCAL) return best;
    for (let d = 0; d <= LOCAL; d++) {
      for (const q of [near - d, near + d]) if (q >= 0 && q + BLOCK <= this.bytes.length && agree(run, p, this.bytes, q, BLOCK) === BLOCK) return q;
    }
    return best;
  }

  /**
   * Refines consecutive chunks whose bytes are `run`, chunk k ending at `ends[k]` (relative to
   * the run), against the kept bytes: each becomes its bytes or its pieces. `at` is the run's
   * offset in the file: the run starts aligned with the kept bytes there (an edit in place)
   * until a copy says otherwise.
   */
  refine(run: Uint8Array, ends: number[], at: number): { chunks: (Uint8Array | Piece[])[]; copied: number } {
    const basis = this.bytes;
    this.index();
    const n = run.length;
    const starts: number[] = [];
    const froms: number[] = [];
    let copied = 0;
    let lit = 0; // where the literal bytes not sent yet begin
    let delta = at; // basis offset − run offset of the last copy
    let h = 0;
    let hashed = -1; // the run offset `h` is the hash of a block at
    // Where the run starts or ends within RESUME bytes of an edit, the bytes between agree at
    // `delta` for fewer than RESUME: from EDGE of them on they are copied all the same (a copy
    // is cheaper than their bytes).
    for (let p = 0; p < n; ) {
      let from = -1;
      const q = p + delta;
      const need = p === 0 || n - p < RESUME ? EDGE : RESUME;
      const k = q >= 0 ? agree(run, p, basis, q, Math.min(RESUME, n - p, basis.length - q)) : 0;
      if (k >= need && (k === RESUME || k === n - p || p === 0)) from = q;
      else if (p + BLOCK <= n) {
        if (hashed !== p) h = hashAt(run, p);
        from = this.find(run, p, h, p + delta);
        if (from < 0 && p + BLOCK < n) {
          h = (Math.imul(h - Math.imul(run[p], POW), P) + run[p + BLOCK]) | 0;
          hashed = p + 1;
        }
      }
      if (from < 0) {
        p++;
        continue;
      }
      let back = 0;
      while (p - back > lit && from - back > 0 && run[p - back - 1] === basis[from - back - 1]) back++;
      const s = p - back;
      const f = from - back;
      const length = back + agree(run, p, basis, from, Math.min(n - p, basis.length - from));
      if (s > lit) {
        starts.push(lit);
        froms.push(-1);
      }
      starts.push(s);
      froms.push(f);
      copied += length;
      p = lit = s + length;
      delta = f - s;
    }
    if (lit < n || !starts.length) {
      starts.push(lit);
      froms.push(-1);
    }
    return { chunks: cutAtEnds(run, ends, starts, froms), copied };
  }
}

const kept = new WeakMap<Uint8Array, KeptBasis>();

/** The refiner of a kept basis's bytes, indexed once per kept copy. */
export function keptBasisOf(bytes: Uint8Array): KeptBasis {
  let k = kept.get(bytes);
  if (!k) kept.set(bytes, (k = new KeptBasis(bytes)));
  return k;
}
