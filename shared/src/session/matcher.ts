/**
 * Matching (Dsync paper §IV-D, Fig. 9): find each target chunk among the basis chunks and
 * merge runs of matched chunks — consecutive in the target and in the basis — into one Match
 * Token. Two kinds share one shape (`RunMatcher`):
 *
 * - `WeakMatcher`, the receiver's Phase 2: a chunk matches by FastFp and length (the length is
 *   in the Checksum List, so the check is free and removes collisions between chunks of
 *   different sizes); the run hash confirms the match in Phase 3.
 * - `KnownMatcher`, a sender that holds the basis' index (a known basis, known.ts): a chunk
 *   matches by strong hash and length; the root check at the end covers the result.
 *
 * The target's chunks are walked in order, so runs come out ascending and non-overlapping,
 * which lets the receiver rebuild the target in one sequential pass. A chunk that continues
 * the open run is preferred to a match elsewhere.
 */

/** A merged run: target chunks [first, first + count) match basis chunks [basisFirst, basisFirst + count). */
export interface Run {
  first: number;
  count: number;
  basisFirst: number;
}

/** A Checksum List's weak part: what the weak matching reads. */
export interface WeakList {
  fastfps: Uint32Array;
  lengths: Uint32Array;
}

/** Chunk lengths and strong hashes (H bytes each): what the known-basis matching reads. */
export interface StrongList {
  lengths: Uint32Array;
  hashes: Uint8Array;
}

/**
 * Matches a target whose chunks arrive in pieces: `feed` takes the chunks up to a new count
 * (the target's arrays must hold them) and returns the runs it closed. The run still open at
 * the end of what was fed may grow, so the matching is final only below `frontier`; `end`
 * closes it once the target is complete.
 */
export abstract class RunMatcher<T> {
  private open: Run | null = null;
  /** target chunks below this are fed */
  private fed = 0;

  /** Whether target chunk i matches basis chunk b. */
  protected abstract same(target: T, i: number, b: number): boolean;
  /** A basis chunk target chunk i matches, or -1. */
  protected abstract find(target: T, i: number): number;
  /** Target chunk i matches nothing. */
  protected missed(_target: T, _i: number): void {}

  /** Chunks below this are matched for good: every run that lies below it is returned. */
  get frontier(): number {
    return this.open ? this.open.first : this.fed;
  }

  /** Matches target chunks [fed, count) and returns the runs closed by them, in order. */
  feed(target: T, count: number): Run[] {
    const closed: Run[] = [];
    for (let i = this.fed; i < count; i++) {
      const o = this.open;
      if (o && this.same(target, i, o.basisFirst + o.count)) {
        o.count++;
        continue;
      }
      if (o) closed.push(o);
      this.open = null;
      const b = this.find(target, i);
      if (b >= 0) this.open = { first: i, count: 1, basisFirst: b };
      else this.missed(target, i);
    }
    this.fed = Math.max(this.fed, count);
    return closed;
  }

  /** The target is complete: returns the run still open, if any. */
  end(): Run[] {
    const last = this.open;
    this.open = null;
    return last ? [last] : [];
  }

  /** Matches a whole target at once. */
  all(target: T, count: number): Run[] {
    return [...this.feed(target, count), ...this.end()];
  }
}

/** The receiver's matching: FastFp and length against the basis' Checksum List. */
export class WeakMatcher extends RunMatcher<WeakList> {
  /** FastFp -> basis chunk index, or a list for the rare repeated FastFp (e.g. runs of zeros) */
  private table = new Map<number, number | number[]>();

  constructor(private basis: WeakList) {
    super();
    for (let j = 0; j < basis.fastfps.length; j++) {
      const fp = basis.fastfps[j];
      const e = this.table.get(fp);
      if (e === undefined) this.table.set(fp, j);
      else if (typeof e === 'number') this.table.set(fp, [e, j]);
      else e.push(j);
    }
  }

  protected same(target: WeakList, i: number, j: number): boolean {
    const { basis } = this;
    return j < basis.fastfps.length && basis.fastfps[j] === target.fastfps[i] && basis.lengths[j] === target.lengths[i];
  }

  protected find(target: WeakList, i: number): number {
    const e = this.table.get(target.fastfps[i]);
    if (e === undefined) return -1;
    if (typeof e === 'number') return this.same(target, i, e) ? e : -1;
    for (const c of e) if (this.same(target, i, c)) return c;
    return -1;
  }
}

/** Matches a whole Checksum List at once. */
export function matchRuns(target: WeakList, basis: WeakList): Run[] {
  return new WeakMatcher(basis).all(target, target.fastfps.length);
}

/** A known basis' matching: strong hash and length, as the target's hashes come. */
export class KnownMatcher extends RunMatcher<StrongList> {
  /** the first 6 bytes of a strong hash -> the first basis chunk with them */
  private first = new Map<number, number>();
  /** target bytes fed and found nowhere in the basis */
  uncovered = 0;

  constructor(
    private basis: StrongList,
    private H: number,
  ) {
    super();
    for (let b = basis.lengths.length - 1; b >= 0; b--) this.first.set(this.keyOf(basis.hashes, b), b);
  }

  // the first 6 bytes of a hash, as a number
  private keyOf(h: Uint8Array, i: number) {
    const o = i * this.H;
    return h[o] + h[o + 1] * 2 ** 8 + h[o + 2] * 2 ** 16 + h[o + 3] * 2 ** 24 + h[o + 4] * 2 ** 32 + h[o + 5] * 2 ** 40;
  }

  protected same(target: StrongList, ti: number, bi: number): boolean {
    const { basis, H } = this;
    if (bi >= basis.lengths.length || target.lengths[ti] !== basis.lengths[bi]) return false;
    for (let k = 0; k < H; k++) if (target.hashes[ti * H + k] !== basis.hashes[bi * H + k]) return false;
    return true;
  }

  protected find(target: StrongList, i: number): number {
    const b = this.first.get(this.keyOf(target.hashes, i));
    return b !== undefined && this.same(target, i, b) ? b : -1;
  }

  protected override missed(target: StrongList, i: number): void {
    this.uncovered += target.lengths[i];
  }
}

/** A whole target's chunks found in a known basis, and the bytes left uncovered. */
export function matchKnown(target: StrongList, basis: StrongList, H: number): { runs: Run[]; uncovered: number } {
  const m = new KnownMatcher(basis, H);
  const runs = m.all(target, target.lengths.length);
  return { runs, uncovered: m.uncovered };
}
