/**
 * Segment ranges this process has verified against chunk hashes (read through a VersionSource,
 * or written by a commit from bytes it hashed), so that a commit referencing copied chunks
 * reads only those it has not seen good (docs/store.md, "Integrity"). Segments are immutable,
 * so a verified range stays verified; the set is bounded (least recently used segments go).
 */
const MAX_SEGMENTS = 4096;

export class VerifiedRanges {
  /** per segment: sorted, disjoint [start, end) ranges */
  private ranges = new Map<string, [number, number][]>();

  add(segment: string, start: number, end: number) {
    const old = this.ranges.get(segment) ?? [];
    this.ranges.delete(segment);
    const out: [number, number][] = [];
    for (const r of old) {
      if (r[1] < start || r[0] > end) out.push(r);
      else {
        start = Math.min(start, r[0]);
        end = Math.max(end, r[1]);
      }
    }
    out.push([start, end]);
    out.sort((a, b) => a[0] - b[0]);
    this.ranges.set(segment, out);
    if (this.ranges.size > MAX_SEGMENTS) this.ranges.delete(this.ranges.keys().next().value!);
  }

  has(segment: string, start: number, end: number): boolean {
    const rs = this.ranges.get(segment);
    return !!rs?.some((r) => r[0] <= start && end <= r[1]);
  }
}
