/**
 * The page's kept basis (shared/src/session/kept.ts) on disk: the bytes of the version of each file
 * this browser last synced, in the Origin Private File System, so that the next edit of that
 * file goes up as byte-exact copies of them (kept-push.ts). One file per user, server, name and
 * version in the `dsync-kept` folder; up to a cap in all (`keptMax`), the least recently used
 * dropped first. The page shows what is kept and clears it (components/KeptSettings.tsx).
 *
 * Both the page and the sync worker use these functions on the same folder (kept-dir.ts: in
 * OPFS, or where the origin has none in IndexedDB). Where neither can keep anything (some
 * private windows, a page on plain http) each of them does nothing: the page pushes against
 * the version's chunk index (known-store.ts), as without a kept basis.
 */
import { KEEP_MAX } from '../../shared/src/base/limits.ts';
import { type Dir, KEPT_DIR, describe, openKept } from './kept-dir.ts';

/** The kept files' sizes and when each was last used or written (ms since the epoch), by name:
 *  what the cap and the LRU order go by, without opening every file. Missing or unreadable, it
 *  is made again from the folder. */
const INDEX = 'index.json';
/** the user's cap in bytes (decimal text); absent: automatic */
const MAX = 'max';
/** A kept file's name: 64 hex digits of SHA-256 of user, server and name, a dot, the version. */
const KEPT_NAME = /^([0-9a-f]{64})\.(\d+)$/;

/** The automatic cap: KEEP_MAX (the CLI's --keep-max default), and at most this share of the
 *  origin's storage quota, so that kept copies never take the room the browser gives this site
 *  (a private window gets a small quota, and keeps little). */
export const KEEP_QUOTA_SHARE = 0.1;

type Index = Record<string, [size: number, used: number]>;

/** The last storage error this context met (shown in the panel; a worker's is announced). */
let lastError: string | undefined;

/** Runs `f` on the kept store holding its lock (Web Locks: one at a time across the page, its
 *  sync worker and other tabs, so the index loses no change); undefined where nothing can be
 *  kept (then not even crypto.subtle may be there: a page on plain http). `f`'s error is
 *  thrown. */
async function locked<T>(f: (d: Dir) => Promise<T>): Promise<T | undefined> {
  const { dir } = await openKept();
  if (!dir) return undefined;
  return await (navigator.locks ? navigator.locks.request(KEPT_DIR, () => f(dir)) : f(dir));
}

/** Notes a storage error met on a sync's way (which goes on, as if nothing were kept): the
 *  panel of every page of the origin shows it. */
function report(e: unknown) {
  lastError = describe(e);
  announce({ error: lastError });
}

/** The file name prefix of the kept bytes of `name` on the server at `url` (its /sync URL) for
 *  user `scope`. */
async function keptPrefix(scope: string, url: string, name: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${scope}\n${url}\n${name}`)));
  return Array.from(h, (b) => b.toString(16).padStart(2, '0')).join('') + '.';
}

async function readText(d: Dir, name: string): Promise<string | null> {
  try {
    return await (await d.file(name)).text();
  } catch {
    return null;
  }
}

/** Writes a small file whole. */
async function writeBytes(d: Dir, name: string, bytes: Uint8Array) {
  const w = await d.writer(name);
  try {
    await w.write(bytes);
  } catch (e) {
    await w.abort().catch(() => {});
    throw e;
  }
  await w.close();
}

/** The kept files in the store itself, opened one by one (the index made again). */
async function scan(d: Dir): Promise<Index> {
  const ix: Index = {};
  for (const name of await d.names()) {
    if (!KEPT_NAME.test(name)) continue;
    try {
      const f = await d.file(name);
      ix[name] = [f.size, f.lastModified];
    } catch {
      /* being written by another tab, or gone */
    }
  }
  return ix;
}

async function readIndex(d: Dir): Promise<Index> {
  try {
    const ix = JSON.parse((await readText(d, INDEX)) ?? 'null');
    if (ix && typeof ix === 'object' && Object.entries(ix).every(([n, e]) => KEPT_NAME.test(n) && Array.isArray(e) && e.length === 2 && e.every(Number.isFinite))) return ix;
  } catch {
    /* unreadable: made again */
  }
  return scan(d);
}

/** Where every page and worker of this origin hears that what is kept changed ('changed'), that
 *  a sync's bytes were written or turned away ('written'), or that a storage error happened
 *  (`{ error }`): components/KeptSettings.tsx. */
export const KEPT_CHANNEL = KEPT_DIR;
export type KeptMessage = 'changed' | 'written' | { error: string };
let channel: BroadcastChannel | undefined;
function announce(what: KeptMessage) {
  try {
    (channel ??= new BroadcastChannel(KEPT_CHANNEL)).postMessage(what);
  } catch {
    /* no BroadcastChannel: the panel reads again when it is shown */
  }
}

async function writeIndex(d: Dir, ix: Index) {
  // not written (a page without writable streams: Safari before 26): removed, so that it is
  // made again from the folder rather than read stale
  await writeBytes(d, INDEX, new TextEncoder().encode(JSON.stringify(ix))).catch(() => d.remove(INDEX).catch(() => {}));
  announce('changed');
}

/** Removes kept files and their index entries; a file already gone counts as removed. */
async function remove(d: Dir, ix: Index, names: string[]) {
  for (const n of names) {
    const gone = await d.remove(n).then(
      () => true,
      (e) => e instanceof DOMException && e.name === 'NotFoundError',
    );
    if (gone) delete ix[n];
  }
}

/** The cap on kept bytes: the user's choice, or the automatic one (`auto`). */
export async function keptMax(): Promise<{ max: number; auto: boolean }> {
  const { dir } = await openKept();
  const set = dir && (await readText(dir, MAX));
  if (set && /^\d+$/.test(set.trim())) return { max: Number(set.trim()), auto: false };
  let quota = Number.POSITIVE_INFINITY;
  try {
    quota = (await navigator.storage.estimate()).quota ?? quota;
  } catch {
    /* no estimate: the fixed cap alone */
  }
  return { max: Math.min(KEEP_MAX, Math.floor(quota * KEEP_QUOTA_SHARE)), auto: true };
}

/** Drops the least recently used kept files until `room` more bytes fit under `max`. */
async function makeRoom(d: Dir, ix: Index, room: number, max: number) {
  let total = Object.values(ix).reduce((t, [size]) => t + size, 0);
  const lru = Object.entries(ix).sort((a, b) => a[1][1] - b[1][1]);
  const out: string[] = [];
  for (const [name, [size]] of lru) {
    if (total + room <= max) break;
    out.push(name);
    total -= size;
  }
  await remove(d, ix, out);
}

/** Sets the cap (null: automatic; 0 keeps none) and drops what no longer fits. Rejects with
 *  the storage's error (the panel shows it). */
export async function setKeptMax(max: number | null): Promise<void> {
  await locked(async (d) => {
    if (max === null) await d.remove(MAX).catch((e) => { if (!(e instanceof DOMException && e.name === 'NotFoundError')) throw e; });
    else await writeBytes(d, MAX, new TextEncoder().encode(String(max)));
    const ix = await readIndex(d);
    await makeRoom(d, ix, 0, (await keptMax()).max);
    await writeIndex(d, ix);
  });
}

export interface KeptUsage {
  /** whether this browser can keep copies at all */
  available: boolean;
  /** why nothing can be kept (where not `available`), or why the page itself cannot write
   *  (its worker may) */
  why?: string;
  /** where kept copies go: 'opfs' or 'indexeddb' (where the origin has no OPFS) */
  where?: 'opfs' | 'indexeddb';
  /** the last storage error this page met */
  error?: string;
  bytes: number;
  files: number;
  max: number;
  auto: boolean;
}

export async function keptUsage(): Promise<KeptUsage> {
  const o = await openKept();
  const { max, auto } = await keptMax();
  const ix = await locked(readIndex);
  const common = { max, auto, why: o.why, error: lastError };
  if (!o.dir || !ix) return { available: false, bytes: 0, files: 0, ...common };
  const sizes = Object.values(ix).map(([size]) => size);
  return { available: true, where: o.path === 'indexeddb' ? 'indexeddb' : 'opfs', bytes: sizes.reduce((t, s) => t + s, 0), files: sizes.length, ...common };
}

/** Drops every kept file (a file a sync is writing at that moment may stay). */
export async function clearKept(): Promise<void> {
  await locked(async (d) => {
    const ix = await scan(d);
    await remove(d, ix, Object.keys(ix));
    await writeIndex(d, ix);
  });
}

/** Drops the kept bytes of `name`'s versions below `below` (all: Infinity), e.g. when another
 *  device pushed a newer version: a kept copy is used only while it is the server's latest
 *  version as far as this page knows. A storage error is reported (`report`), not thrown. */
export async function dropKept(scope: string, url: string, name: string, below = Number.POSITIVE_INFINITY): Promise<void> {
  await locked(async (d) => {
    const prefix = await keptPrefix(scope, url, name);
    const ix = await readIndex(d);
    const names = Object.keys(ix).filter((n) => n.startsWith(prefix) && Number(n.slice(prefix.length)) < below);
    if (!names.length) return;
    await remove(d, ix, names);
    await writeIndex(d, ix);
  }).catch(report);
}

/** The kept bytes of `name`'s version `version` when there are `size` of them (read whole: the
 *  kept basis refines against all of them); undefined: none kept. The caller checks them
 *  against the version's chunk index before using them. A copy cut short or unreadable is
 *  dropped; any other storage error is reported (`report`) and the sync goes on without. */
export async function readKept(scope: string, url: string, name: string, version: number, size: number): Promise<Uint8Array | undefined> {
  const file = await locked(async (d) => {
    const kept = (await keptPrefix(scope, url, name)) + version;
    const ix = await readIndex(d);
    if (!ix[kept]) return undefined;
    try {
      const f = await d.file(kept);
      if (f.size !== size) throw new Error('cut short'); // an interrupted write, or damage
      ix[kept] = [f.size, Date.now()];
      return f;
    } catch {
      await remove(d, ix, [kept]);
      return undefined;
    } finally {
      await writeIndex(d, ix);
    }
  }).catch((e) => void report(e));
  try {
    return file && new Uint8Array(await file.arrayBuffer());
  } catch {
    return undefined; // removed since (Clear): none
  }
}

/** Bytes copied per step: a slice of the file is read, then written, so memory stays bounded. */
const COPY_SLICE = 4 << 20;

/**
 * Keeps `file`'s bytes as those of `name`'s version `version`, in place of its other versions'
 * (from the sync worker, written a slice at a time as it is read). Not kept when above the cap;
 * others dropped for room, least recently used first. A copy that cannot be written only costs
 * the next push its byte-level copies: nothing half-kept stays, and the error is reported
 * (`report`: the panel shows it). Where nothing can be kept the panel says why (`keptUsage`).
 */
export async function writeKept(scope: string, url: string, name: string, version: number, file: Blob): Promise<boolean> {
  if (!(await openKept()).dir) {
    announce('written'); // turned away: the panel says why nothing can be kept here
    return false;
  }
  const { max } = await keptMax();
  const done = await locked(async (d) => {
    const prefix = await keptPrefix(scope, url, name);
    const ix = await readIndex(d);
    const to = prefix + version;
    try {
      await remove(d, ix, Object.keys(ix).filter((n) => n.startsWith(prefix)));
      if (file.size > max) return false;
      await makeRoom(d, ix, file.size, max);
      const w = await d.writer(to);
      try {
        for (let o = 0; o < file.size; o += COPY_SLICE) await w.write(new Uint8Array(await file.slice(o, o + COPY_SLICE).arrayBuffer()));
      } catch (e) {
        await w.abort().catch(() => {});
        throw e;
      }
      await w.close();
      ix[to] = [file.size, Date.now()];
      return true;
    } catch (e) {
      await remove(d, ix, [to]); // quota, or the file went away: nothing half-kept
      throw e;
    } finally {
      await writeIndex(d, ix);
    }
  }).catch((e) => void report(e));
  announce('written');
  return done ?? false;
}
