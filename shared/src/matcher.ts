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

export function matchRuns(target: WeakList, basis: WeakList): Run[] {
  // FastFp -> basis chunk index, or a list for the rare repeated FastFp (e.g. runs of zeros).
  const table = new Map<number, number | number[]>();
  for (let j = 0; j < basis.fastfps.length; j++) {
    const fp = basis.fastfps[j];
    const e = table.get(fp);
    if (e === undefined) table.set(fp, j);
    else if (typeof e === 'number') table.set(fp, [e, j]);
    else e.push(j);
  }
  const weakEq = (i: number, j: number) =>
    j < basis.fastfps.length && basis.fastfps[j] === target.fastfps[i] && basis.lengths[j] === target.lengths[i];

  const runs: Run[] = [];
  let cur: Run | null = null;
  for (let i = 0; i < target.fastfps.length; i++) {
    if (cur && cur.first + cur.count === i && weakEq(i, cur.basisFirst + cur.count)) {
      cur.count++;
      continue;
    }
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
    if (j < 0) continue;
    cur = { first: i, count: 1, basisFirst: j };
    runs.push(cur);
  }
  return runs;
}
