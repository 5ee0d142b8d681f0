/**
 * The sender's side of refinement (refine.ts): the Basis Checksums the receiver listed, looked
 * up by hash prefix and length, and the refinement of a run of chunks about to be sent into
 * literal bytes and copies of basis bytes.
 */
import { type BasisChecksums, type Copy, PREFIX, type Piece } from '../wire/messages.ts';
import { MAX_BASIS_CHECKSUMS } from '../base/limits.ts';
import { ErrorCode, type FineParams, ProtocolError, checkParams, inconsistent as bad } from '../wire/protocol.ts';
import { fineCut } from './refine.ts';

/** The sender refines its Delta Bytes in windows of this size... */
const WINDOW = 64 << 10;
/** ...and after two windows without a single match (new bytes, not an edit of old ones), only
 *  every PROBE-th window and a run's last one, where the old bytes resume. */
const PROBE = 8;

/**
 * The Basis Checksums a sender received, looked up by hash prefix and length, and
 * the refinement of a run of chunks about to be sent.
 *
 * The listed chunks are kept one entry per distinct (prefix, length) — a *kind* — found
 * through an open-addressing table. A kind listed at several offsets (the same bytes repeated
 * in the basis: zeros, padding) keeps all of them in a list of its own, sorted when it
 * is searched. The table's hash is seeded per session, so a hostile receiver cannot choose
 * prefixes that all land in one probe sequence. Plain arrays, not typed ones: a large push
 * lists hundreds of thousands of chunks, and typed arrays grown by doubling are memory outside
 * the JavaScript heap, whose growth makes V8 run many more full collections
 * (bench/results/README.md).
 */
export class BasisChecksumTable implements Refiner {
  fine: FineParams | null = null;
  count = 0;
  /** basis bytes the entries list: the most that refinement can copy */
  bytes = 0;

  get copyable(): number {
    return this.bytes;
  }
  private kinds = 0;
  /** per kind: the prefix's two words, the length, the first offset listed */
  private key0: number[] = [];
  private key1: number[] = [];
  private lengths: number[] = [];
  private offsets: number[] = [];
  /** per kind listed more than once: all its offsets (sorted while `sorted` says so) */
  private more = new Map<number, { offsets: number[]; sorted: boolean }>();
  /** kind + 1 per slot, 0 for an empty slot; a power of two, at most half full */
  private slots: number[] = new Array(2048).fill(0);
  private seedA = 1 | (Math.random() * 2 ** 32);
  private seedB = 1 | (Math.random() * 2 ** 32);
  private seedC = (Math.random() * 2 ** 32) | 0;

  constructor(private algo: number) {}

  private slot(k0: number, k1: number, length: number): number {
    const h = Math.imul(k0 ^ this.seedC, this.seedA) ^ Math.imul(k1 + length, this.seedB);
    return (h ^ (h >>> 15)) & (this.slots.length - 1);
  }

  /** The kind with this prefix and length, or -1. */
  private kind(k0: number, k1: number, length: number): number {
    const mask = this.slots.length - 1;
    for (let i = this.slot(k0, k1, length); ; i = (i + 1) & mask) {
      const e = this.slots[i] - 1;
      if (e < 0) return -1;
      if (this.key0[e] === k0 && this.key1[e] === k1 && this.lengths[e] === length) return e;
    }
  }

  private insert(e: number): void {
    const mask = this.slots.length - 1;
    let i = this.slot(this.key0[e], this.key1[e], this.lengths[e]);
    while (this.slots[i]) i = (i + 1) & mask;
    this.slots[i] = e + 1;
  }

  add(m: BasisChecksums): void {
    if (this.fine) {
      if (m.fine.min !== this.fine.min || m.fine.avg !== this.fine.avg || m.fine.max !== this.fine.max) throw bad('Basis Checksums change their chunk sizes within a session');
    } else {
      // the rules of Hello's sizes (§2), up to 16 MiB
      checkParams({ ...m.fine, op: 0, every: 16 });
      this.fine = { ...m.fine };
    }
    if (this.count + m.lengths.length > MAX_BASIS_CHECKSUMS) throw new ProtocolError(ErrorCode.LimitExceeded, `more than ${MAX_BASIS_CHECKSUMS} Basis Checksums`);
    const view = new DataView(m.prefixes.buffer, m.prefixes.byteOffset, m.prefixes.byteLength);
    let offset = m.offset;
    for (let k = 0; k < m.lengths.length; k++) {
      const length = m.lengths[k];
      if (length === 0 || length > m.fine.max) throw bad(`a Basis Checksums chunk of ${length} bytes, outside 1..${m.fine.max}`);
      if (!Number.isSafeInteger(offset + length)) throw bad('Basis Checksums beyond 2^53 bytes');
      this.count++;
      this.bytes += length;
      const k0 = view.getUint32(k * PREFIX, true);
      const k1 = view.getUint32(k * PREFIX + 4, true);
      const e = this.kind(k0, k1, length);
      if (e >= 0) {
        const more = this.more.get(e);
        if (!more) this.more.set(e, { offsets: [this.offsets[e], offset], sorted: this.offsets[e] < offset });
        else {
          more.sorted &&= more.offsets[more.offsets.length - 1] < offset;
          more.offsets.push(offset);
        }
      } else this.newKind(k0, k1, length, offset);
      offset += length;
    }
  }

  private newKind(k0: number, k1: number, length: number, offset: number): void {
    const e = this.kinds++;
    this.key0.push(k0);
    this.key1.push(k1);
    this.lengths.push(length);
    this.offsets.push(offset);
    if (2 * this.kinds > this.slots.length) {
      this.slots = new Array(2 * this.slots.length).fill(0);
      for (let i = 0; i < this.kinds; i++) this.insert(i);
    } else this.insert(e);
  }

  /** The basis offset of a listed chunk with this prefix and length, or -1; of several (the
   *  same bytes repeated in the basis), the one at `near` or else the first after it (else the
   *  last before it): the copy then continues the one before, and the receiver reads the basis
   *  in order. */
  private find(prefixes: DataView, k: number, length: number, near: number): number {
    const e = this.kind(prefixes.getUint32(k * PREFIX, true), prefixes.getUint32(k * PREFIX + 4, true), length);
    if (e < 0) return -1;
    const more = this.more.get(e);
    if (!more) return this.offsets[e]; // the usual case
    if (!more.sorted) {
      more.offsets.sort((x, y) => x - y);
      more.sorted = true;
    }
    const o = more.offsets;
    let lo = 0;
    let hi = o.length; // the first offset >= near
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (o[mid] < near) lo = mid + 1;
      else hi = mid;
    }
    return lo < o.length ? o[lo] : o[o.length - 1];
  }

  /**
   * Refines consecutive chunks whose bytes are `run`, chunk k ending at `ends[k]` (relative to
   * the run): each becomes its bytes (nothing matched in it) or pieces — literal bytes (views
   * of `run`) and copies of basis bytes, consecutive copies merged. Returns them with the
   * bytes copied. `at` is the run's offset in the file: of equal basis chunks, the first
   * copy takes the one nearest it.
   */
  refine(run: Uint8Array, ends: number[], at: number): { chunks: (Uint8Array | Piece[])[]; copied: number } {
    const fine = this.fine!;
    // Stretches of the run: [start, end) copied from basis offset `from`, or literal (-1).
    const starts: number[] = [];
    const froms: number[] = [];
    let copied = 0;
    const add = (start: number, from: number) => {
      const n = starts.length;
      if (n && (from < 0 ? froms[n - 1] < 0 : froms[n - 1] >= 0 && froms[n - 1] + start - starts[n - 1] === from)) return; // extends the last one
      starts.push(start);
      froms.push(from);
    };
    let dry = 0; // windows in a row without a match
    let next = at; // the basis offset after the last copy
    for (let w = 0, nth = 0; w < run.length; w += WINDOW, nth++) {
      const end = Math.min(run.length, w + WINDOW);
      if (dry >= 2 && nth % PROBE && end < run.length) {
        add(w, -1);
        continue;
      }
      const { lengths, prefixes } = fineCut(run.subarray(w, end), fine, this.algo);
      const view = new DataView(prefixes.buffer, prefixes.byteOffset, prefixes.byteLength);
      let hit = false;
      for (let k = 0, o = w; k < lengths.length; o += lengths[k++]) {
        const n = starts.length - 1;
        const from = this.find(view, k, lengths[k], n >= 0 && froms[n] >= 0 ? froms[n] + o - starts[n] : next);
        if (from >= 0) {
          next = from + lengths[k];
          hit = true;
          copied += lengths[k];
        }
        add(o, from);
      }
      dry = hit ? 0 : dry + 1;
    }
    return { chunks: cutAtEnds(run, ends, starts, froms), copied };
  }
}


/**
 * Cuts a run's stretches — `[starts[t], starts[t + 1])` copied from basis offset `froms[t]`, or
 * literal where it is -1 — at the chunks' `ends` (relative to the run): each chunk becomes its
 * bytes (all literal) or its pieces.
 */
export function cutAtEnds(run: Uint8Array, ends: number[], starts: number[], froms: number[]): (Uint8Array | Piece[])[] {
  starts.push(run.length);
  const chunks: (Uint8Array | Piece[])[] = [];
  let s = 0;
  for (let k = 0, begin = 0; k < ends.length; begin = ends[k++]) {
    const end = ends[k];
    const pieces: Piece[] = [];
    while (starts[s + 1] <= begin) s++;
    for (let t = s; t < froms.length && starts[t] < end; t++) {
      const a = Math.max(begin, starts[t]);
      const b = Math.min(end, starts[t + 1]);
      pieces.push(froms[t] < 0 ? run.subarray(a, b) : ({ offset: froms[t] + a - starts[t], length: b - a } satisfies Copy));
    }
    chunks.push(pieces.length === 1 && pieces[0] instanceof Uint8Array ? pieces[0] : pieces);
  }
  starts.pop();
  return chunks;
}

/** What a sender refines its Delta Bytes against: the Basis Checksums a receiver listed
 *  (`BasisChecksumTable`), or the bytes of a kept basis (kept.ts). */
export interface Refiner {
  /** nothing to refine against while 0 */
  readonly count: number;
  /** basis bytes refinement can copy from (the most it can save) */
  readonly copyable: number;
  /** it holds every byte of the basis (a kept basis), so chunks inside a run of lacking ones
   *  may hold old bytes too (an edit in fragments) and are refined as well */
  readonly whole?: boolean;
  /** Basis Checksums from the receiver */
  add(m: BasisChecksums): void;
  /** see BasisChecksumTable.refine */
  refine(run: Uint8Array, ends: number[], at: number): { chunks: (Uint8Array | Piece[])[]; copied: number };
}
