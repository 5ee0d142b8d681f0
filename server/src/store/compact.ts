/**
 * Bounded read cost (docs/store.md §10, "Compaction"): a version references at most
 * `maxSegments(size)` segments. A commit that leaves one beyond the bound has its file compacted
 * after the commit is answered: the bytes each such version takes from the segments that
 * contribute least move into new segments, and the new index is swapped in as a repack's is
 * (repack.ts: beside the old one, confirmed against gc, then in its place). So a file edited
 * many times does not make its reads touch ever more objects, and no commit waits for it.
 */
import type { Layout } from './format.ts';
import { SEGMENT_BYTES, parseFileHead } from './format.ts';
import { fileHeadKey } from './keys.ts';
import { emptyReport, newRun, repackHead } from './repack.ts';
import type { Repo } from './repo.ts';

/** Segments a version may reference beyond the fewest its size needs. */
export const FRAGMENT_SLACK = 64;

export const maxSegments = (size: number) => Math.ceil(size / SEGMENT_BYTES) + FRAGMENT_SLACK;

/**
 * The segments whose bytes move so that `layout` (of a version of `size` bytes) is down to
 * half the slack, so that the next compactions are many commits away: the least-contributing
 * first. Null within the bound.
 */
export function fragments(layout: Layout, size: number): Set<string> | null {
  if (layout.segments.length <= maxSegments(size)) return null;
  const limit = Math.ceil(size / SEGMENT_BYTES) + FRAGMENT_SLACK / 2;
  const contribution = new Array<number>(layout.segments.length).fill(0);
  for (const e of layout.extents) contribution[e.seg] += e.length;
  const order = contribution.map((c, seg) => ({ c, seg })).sort((a, b) => a.c - b.c);
  // move the smallest until the segments left plus the new ones fit
  const moved = new Set<string>();
  let bytes = 0;
  for (const { c, seg } of order) {
    if (layout.segments.length - moved.size + Math.ceil(bytes / SEGMENT_BYTES) <= limit) break;
    moved.add(layout.segments[seg]);
    bytes += c;
  }
  return moved;
}

/** Compacts every version of `user`'s file `name` beyond the bound. Returns how many versions
 *  got a new index. */
export async function compactFile(repo: Repo, user: string, name: string, log?: (e: Record<string, unknown>) => void): Promise<number> {
  const key = fileHeadKey(user, name);
  const got = await repo.backend.getHead(key);
  if (!got) return 0;
  const report = emptyReport();
  const n = await repackHead(repo, key, user, parseFileHead(got.body, key), fragments, await newRun(repo), report, log);
  log?.({ event: 'compacted', user, name, versions: n, bytes: report.bytes, dropped: report.dropped });
  return n;
}
