/**
 * Segment ranges this process has verified against chunk hashes (read through a VersionSource),
 * each segment under the stamp its bytes had when read (Backend.stamp: the ETag on S3; device,
 * inode, size and times on a local directory). A range counts as verified for a commit only
 * while the segment's stamp is still the one it was verified under: the cache never outlives a
 * change of the bytes under it (docs/store.md, "Integrity"). Bounded: least recently used
 * segments go.
 */
const MAX_SEGMENTS = 4096;

export class VerifiedRanges {
  /** per segment: the stamp, and sorted, disjoint [start, end) ranges verified under it */
  private segments = new Map<string, { stamp: string | null; ranges: [number, number][] }>();

  /** Notes [start, end) of `segment` verified, read under `stamp` (null: none could be had;
   *  a new stamp drops what was verified under another). */
  add(segment: string, stamp: string | null, start: number, end: number) {
    const had = this.segments.get(segment);
    const old = had && had.stamp === stamp ? had.ranges : [];
    this.segments.delete(segment);
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
    this.segments.set(segment, { stamp, ranges: out });
    if (this.segments.size > MAX_SEGMENTS) this.segments.delete(this.segments.keys().next().value!);
  }

  /** The stamp [start, end) of `segment` was verified under (null: verified without one), or
   *  undefined when it was not verified. */
  covered(segment: string, start: number, end: number): string | null | undefined {
    const s = this.segments.get(segment);
    return s?.ranges.some((r) => r[0] <= start && end <= r[1]) ? s.stamp : undefined;
  }
}
