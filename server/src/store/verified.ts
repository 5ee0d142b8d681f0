/**
 * Segment ranges this process has verified against chunk hashes (read through a VersionSource),
 * each segment under the stamp its bytes had when read (Backend.stamp: the ETag on S3; device,
 * inode, size and times on a local directory). A range counts as verified for a commit only
 * while the segment's stamp is still the one it was verified under: the cache never outlives a
 * change of the bytes under it (docs/store.md, "Integrity"). Bounded: least recently used
 * segments go.
 */
const MAX_SEGMENTS = 4096;
/** Versions found damaged that are remembered (oldest forgotten first). */
const MAX_DAMAGED = 1024;

export class VerifiedRanges {
  /** per segment: the stamp, and sorted, disjoint [start, end) ranges verified under it */
  private segments = new Map<string, { stamp: string | null; ranges: [number, number][] }>();
  /** versions (index ids) a read of this process found damaged, until one verifies whole */
  private damaged = new Set<string>();

  /** Notes that a read of `version` (its index id) found damage. */
  noteDamaged(version: string) {
    this.damaged.delete(version);
    this.damaged.add(version);
    if (this.damaged.size > MAX_DAMAGED) this.damaged.delete(this.damaged.values().next().value!);
  }

  /** Notes that `version` verified whole: whatever was damaged in it is good again. */
  noteWhole(version: string) {
    this.damaged.delete(version);
  }

  /** Whether a read of `version` found damage since it last verified whole. */
  foundDamaged(version: string): boolean {
    return this.damaged.has(version);
  }

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

  /** Forgets what was verified of `segment` (its stamp changed, or its bytes are damaged). */
  forget(segment: string) {
    this.segments.delete(segment);
  }

  /** The stamp [start, end) of `segment` was verified under (null: verified without one), or
   *  undefined when it was not verified. */
  covered(segment: string, start: number, end: number): string | null | undefined {
    const s = this.segments.get(segment);
    return s?.ranges.some((r) => r[0] <= start && end <= r[1]) ? s.stamp : undefined;
  }
}

/**
 * Bytes of segments this process wrote, kept in memory (least recently used dropped beyond
 * `maxBytes`), so that the next sync's reads of them (a refined chunk's basis bytes, the
 * listing of basis checksums) ask nothing of the store. A segment id is never written twice,
 * and every read through a VersionSource checks its chunk hashes, so these bytes are always
 * right for what they are read for. They never count as verifying the store's copy: a commit
 * referencing a segment verifies the stored object (VersionSource.verify reads the store).
 */
export class SegmentBytes {
  private segments = new Map<string, Uint8Array>();
  private bytes = 0;

  constructor(private maxBytes: number) {}

  add(segment: string, body: Uint8Array) {
    if (body.length > this.maxBytes) return;
    this.drop(segment);
    this.segments.set(segment, body);
    this.bytes += body.length;
    for (const [k, b] of this.segments) {
      if (this.bytes <= this.maxBytes) break;
      this.segments.delete(k);
      this.bytes -= b.length;
    }
  }

  /** Bytes [offset, offset + length) of `segment`, or null when not kept (or shorter). */
  get(segment: string, offset: number, length: number): Uint8Array | null {
    const b = this.segments.get(segment);
    if (!b || offset + length > b.length) return null;
    this.segments.delete(segment);
    this.segments.set(segment, b);
    return b.subarray(offset, offset + length);
  }

  /** All the bytes kept of `segment`, or null. */
  whole(segment: string): Uint8Array | null {
    const b = this.segments.get(segment);
    return b ? this.get(segment, 0, b.length) : null;
  }

  drop(segment: string) {
    const b = this.segments.get(segment);
    if (b) this.bytes -= b.length;
    this.segments.delete(segment);
  }
}
