/**
 * Phase 2 matching (Dsync paper §IV-D, Fig. 9): look up each target chunk's FastFp (and
 * length) among the basis chunks and merge runs of consecutive weak-matched chunks —
 * consecutive in the target and in the basis — into one Match Token.
 *
 * We walk the target's Checksum List in order and keep the basis in a hash table, so tokens
 * come out ascending and non-overlapping, which lets the receiver rebuild the target in one
 * sequential pass. A weak match also requires equal length (free: the length is in the
 * Checksum List), which removes collisions between chunks of different sizes.
 */

/** A merged run: target chunks [first, first + count) match basis chunks [basisFirst, basisFirst + count). */
export interface Run {
  first: number;
  count: number;
  basisFirst: number;
}

export interface WeakList {
  fastfps: Uint32Array;
  lengths: Uint32Array;
}

/**
 * Matches a target whose Checksum List arrives in pieces: `feed` takes the chunks up to a new
 * count (the list's arrays must hold them) and returns the runs it closed. A run still open at
 * the end of what was fed may grow, so the matching is final only below `frontier`; `end`
 * closes it once the list is complete.
 */
export class Matcher {
  /** FastFp -> basis chunk index, or a list for the rare repeated FastFp (e.g. runs of zeros) */
  private table = new Map<number, number | number[]>();
  private cur: Run | null = null;
  private fed = 0;

  constructor(private basis: WeakList) {
    for (let j = 0; j < basis.fastfps.length; j++) {
      const fp = basis.fastfps[j];
      const e = this.table.get(fp);
      if (e === undefined) this.table.set(fp, j);
      else if (typeof e === 'number') this.table.set(fp, [e, j]);
      else e.push(j);
    }
  }

  /** Chunks below this are matched for good: every run that lies below it is returned. */
  get frontier(): number {
    return this.cur && this.cur.first + this.cur.count === this.fed ? this.cur.first : this.fed;
  }

  /** Matches target chunks [fed, count) and returns the runs closed by them, in order. */
  feed(target: WeakList, count: number): Run[] {
    const { basis, table } = this;
    const weakEq = (i: number, j: number) =>
      j < basis.fastfps.length && basis.fastfps[j] === target.fastfps[i] && basis.lengths[j] === target.lengths[i];
    const closed: Run[] = [];
    for (let i = this.fed; i < count; i++) {
      const cur = this.cur;
      if (cur && cur.first + cur.count === i && weakEq(i, cur.basisFirst + cur.count)) {
        cur.count++;
        continue;
      }
      if (cur) closed.push(cur);
      this.cur = null;
      const e = table.get(target.fastfps[i]);
      if (e === undefined) continue;
      let j = -1;
      if (typeof e === 'number') {
        if (weakEq(i, e)) j = e;
      } else {
        for (const c of e) {
          if (weakEq(i, c)) {
            j = c;
            break;
          }
        }
      }
      if (j >= 0) this.cur = { first: i, count: 1, basisFirst: j };
    }
    this.fed = count;
    return closed;
  }

  /** The list is complete: returns the run still open, if any. */
  end(): Run[] {
    const last = this.cur;
    this.cur = null;
    return last ? [last] : [];
  }
}

/** Matches a whole Checksum List at once. */
export function matchRuns(target: WeakList, basis: WeakList): Run[] {
  const m = new Matcher(basis);
  return [...m.feed(target, target.fastfps.length), ...m.end()];
}
