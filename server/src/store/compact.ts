/**
 * Bounded read cost (docs/store.md, "Compaction"): a version references at most
 * `maxSegments(size)` segments. A commit whose layout would reference more rewrites the bytes
 * it takes from the segments that contribute least into new segments of its own, so a file
 * edited many times does not make its reads touch ever more objects.
 */
import type { ChunkIndex } from '../../../shared/src/chunk-index.ts';
import { type Backend, putNew } from './backend.ts';
import type { Extent, Layout } from './format.ts';
import { newSegmentId, segmentKey } from './keys.ts';
import { VersionSource } from './source.ts';
import type { VerifiedRanges } from './verified.ts';

/** Segments a version may reference beyond the fewest its size needs. */
export const FRAGMENT_SLACK = 64;

export const maxSegments = (size: number, segmentBytes: number) => Math.ceil(size / segmentBytes) + FRAGMENT_SLACK;

/**
 * Returns `layout` within the bound: beyond it, the extents of the least-contributing segments
 * are read (verified against `index`) and written into new segments until the layout is down
 * to half the slack. `own` gets the new segment ids, in `family`.
 */
export async function compact(backend: Backend, layout: Layout, index: ChunkIndex, segmentBytes: number, own: string[], verified: VerifiedRanges, family: string): Promise<Layout> {
  if (layout.segments.length <= maxSegments(index.size, segmentBytes)) return layout;
  // down to half the slack, so that the next compactions are many commits away
  const limit = Math.ceil(index.size / segmentBytes) + FRAGMENT_SLACK / 2;
  const contribution = new Array<number>(layout.segments.length).fill(0);
  for (const e of layout.extents) contribution[e.seg] += e.length;
  const order = contribution.map((c, seg) => ({ c, seg })).sort((a, b) => a.c - b.c);
  // move the smallest until the segments left plus the new ones fit
  const moved = new Set<number>();
  let bytes = 0;
  for (const { c, seg } of order) {
    if (layout.segments.length - moved.size + Math.ceil(bytes / segmentBytes) <= limit) break;
    moved.add(seg);
    bytes += c;
  }
  const src = new VersionSource(backend, layout, index, 'the version being compacted', 0, verified);
  const segments: string[] = [];
  const segOf = new Map<string, number>();
  const ref = (id: string) => {
    let k = segOf.get(id);
    if (k === undefined) segOf.set(id, (k = segments.push(id) - 1));
    return k;
  };
  const extents: Extent[] = [];
  const push = (seg: number, offset: number, length: number) => {
    const last = extents[extents.length - 1];
    if (last && last.seg === seg && last.offset + last.length === offset) last.length += length;
    else extents.push({ seg, offset, length });
  };
  let buf = new Uint8Array(Math.min(segmentBytes, bytes));
  let used = 0;
  let id = '';
  const put = async () => {
    if (!used) return;
    await putNew(backend, segmentKey(id), buf.subarray(0, used));
    buf = new Uint8Array(Math.min(segmentBytes, Math.max(1, bytes)));
    used = 0;
  };
  let pos = 0;
  for (const e of layout.extents) {
    if (!moved.has(e.seg)) push(ref(layout.segments[e.seg]), e.offset, e.length);
    else {
      const data = await src.read(pos, e.length);
      for (let o = 0; o < data.length; ) {
        if (!used) {
          id = newSegmentId(family);
          own.push(id);
        }
        const n = Math.min(data.length - o, segmentBytes - used);
        buf.set(data.subarray(o, o + n), used);
        push(ref(id), used, n);
        used += n;
        o += n;
        bytes -= n;
        if (used === segmentBytes) await put();
      }
    }
    pos += e.length;
  }
  await put();
  return { segments, extents };
}
