/** The Match Tokens a sender received (or, with a known basis, found itself), in order. */
import type { Run } from './matcher.ts';

/** The run hash of a token of this side's own (a known basis): never compared. */
const NO_HASH = new Uint8Array(0);

/** The Match Tokens received (or, with a known basis, found), in order. */
export class MatchTokens {
  first: number[] = [];
  count: number[] = [];
  /** the receiver's run hash of each (NO_HASH for this side's own) */
  hash: Uint8Array[] = [];
  /** with a known basis: the basis chunk each starts at, for the Copies */
  basisFirst: number[] = [];
  /** whether token k's run hash equals this side's, computed once per token */
  ok: boolean[] = [];

  get length(): number {
    return this.first.length;
  }
  /** where token k ends (the chunk after it) */
  end(k: number): number {
    return this.first[k] + this.count[k];
  }
  /** where the last token ends, 0 without one */
  lastEnd(): number {
    return this.length ? this.end(this.length - 1) : 0;
  }
  push(first: number, count: number, hash: Uint8Array): void {
    this.first.push(first);
    this.count.push(count);
    this.hash.push(hash);
  }
  /** runs of this side's own, confirmed */
  pushOwn(runs: Run[]): void {
    for (const r of runs) {
      this.ok[this.length] = true;
      this.push(r.first, r.count, NO_HASH);
      this.basisFirst.push(r.basisFirst);
    }
  }
}
