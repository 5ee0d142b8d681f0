/**
 * The sync worker's use of the page's kept basis (kept-store.ts): before a push, the kept bytes
 * of the version the page knows of that file are read and checked against its chunk index
 * (shared/src/session/known.ts chunksTo); only then does the push refine against them at byte
 * granularity (shared/src/session/kept.ts), as the CLI does. Bytes that do not chunk to the index
 * (damaged on disk, cut short) are dropped, never used. After a push or pull the synced bytes
 * are kept in place of the old ones. The server verifies the root as always.
 */
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { KNOWN_MAX_FILE, type KnownVersions, chunksTo, knownKey } from '../../shared/src/session/known.ts';
import type { SyncReport } from '../../shared/src/session/delta-client.ts';
import { dropKept, readKept, writeKept } from './kept-store.ts';

/** The known versions a sync of `name` runs with: those of `known`, with the kept bytes of the
 *  version of `name` attached where they are kept and sound. Forgetting that version (the
 *  server refused it) drops its kept bytes too. */
export async function withKept(known: KnownVersions, scope: string, url: string, name: string): Promise<KnownVersions> {
  const key = knownKey(url, name);
  await writing.get(key);
  const v = known.get(key);
  if (!v || v.lengths.length === 0) return known;
  const size = v.lengths.reduce((a, l) => a + l, 0);
  if (size > KNOWN_MAX_FILE) return known;
  const bytes = await readKept(scope, url, name, v.version, size);
  if (!bytes) return known;
  if (!(await chunksTo(bufferSource(bytes), v).catch(() => false))) {
    await dropKept(scope, url, name);
    return known;
  }
  return {
    get: (k) => {
      const w = known.get(k);
      return k === key && w?.version === v.version ? { ...w, kept: bytes } : w;
    },
    set: (k, w) => known.set(k, w),
    delete: (k) => {
      known.delete(k);
      if (k === key) void dropKept(scope, url, name);
    },
  };
}

/** Kept bytes being written, by knownKey: another sync of that file (transfers run in
 *  parallel) waits for them. */
const writing = new Map<string, Promise<unknown>>();

/** Keeps the bytes of the version a sync of `name` stored or fetched (`file`, the pushed file
 *  or the rebuilt one) when the page now knows that version, up to the cap: after the Result,
 *  a copy of 4 MiB slices (~100 ms per 10 MB here) before the sync is reported done. A file
 *  above KNOWN_MAX_FILE is known by its version only and never pushed against (`withKept`), so
 *  its bytes are not kept (the copies of its older versions are dropped): a 256 MiB upload
 *  spent about as long again writing them (bench/results/page-vs-cli.md, the phone row). */
export async function keepSynced(known: KnownVersions, scope: string, url: string, name: string, report: SyncReport, file: Blob): Promise<void> {
  const key = knownKey(url, name);
  if (known.get(key)?.version !== report.version || file.size !== report.size || !file.size) return;
  const w = file.size > KNOWN_MAX_FILE ? dropKept(scope, url, name) : writeKept(scope, url, name, report.version, file);
  writing.set(key, w);
  await w;
  if (writing.get(key) === w) writing.delete(key);
}
