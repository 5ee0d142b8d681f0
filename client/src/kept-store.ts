/**
 * The page's kept basis (shared/src/kept.ts) on disk: the bytes of the version of each file
 * this browser last synced, in the Origin Private File System, so that the next edit of that
 * file goes up as byte-exact copies of them (kept-push.ts). One file per user, server, name and
 * version in the `dsync-kept` folder; up to a cap in all (`keptMax`), the least recently used
 * dropped first. The page shows what is kept and clears it (components/KeptSettings.tsx).
 *
 * Both the page and the sync worker use these functions on the same folder. Where the browser
 * has no OPFS (old browsers, some private windows) each of them does nothing: the page pushes
 * against the version's chunk index (known-store.ts), as without a kept basis.
 */
import { KEEP_MAX } from '../../shared/src/limits.ts';

const DIR = 'dsync-kept';
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

let root: Promise<FileSystemDirectoryHandle | null> | undefined;

/** The kept folder; null where the browser has no OPFS or refuses it. */
function folder(): Promise<FileSystemDirectoryHandle | null> {
  root ??= (async () => {
    try {
      return await (await navigator.storage.getDirectory()).getDirectoryHandle(DIR, { create: true });
    } catch {
      return null;
    }
  })();
  return root;
}

/** Runs `f` on the kept folder holding its lock (Web Locks: one at a time across the page, its
 *  sync worker and other tabs, so the index loses no change); undefined where there is no OPFS
 *  (then not even crypto.subtle may be there: a page on plain http) or `f` failed. */
async function locked<T>(f: (d: FileSystemDirectoryHandle) => Promise<T>): Promise<T | undefined> {
  const d = await folder();
  if (!d) return undefined;
  try {
    return await (navigator.locks ? navigator.locks.request(DIR, () => f(d)) : f(d));
  } catch {
    return undefined; // the store misbehaves: as if nothing were kept, the sync goes on
  }
}

/** The file name prefix of the kept bytes of `name` on the server at `url` (its /sync URL) for
 *  user `scope`. */
async function keptPrefix(scope: string, url: string, name: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${scope}\n${url}\n${name}`)));
  return Array.from(h, (b) => b.toString(16).padStart(2, '0')).join('') + '.';
}

/** A folder's entries (TypeScript's DOM types leave out its async iteration). */
const entriesOf = (d: FileSystemDirectoryHandle) => (d as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }).entries();

async function readText(d: FileSystemDirectoryHandle, name: string): Promise<string | null> {
  try {
    return await (await (await d.getFileHandle(name)).getFile()).text();
  } catch {
    return null;
  }
}

interface Writer {
  write(bytes: Uint8Array): Promise<void>;
  /** the bytes written are the file's */
  close(): Promise<void>;
  /** stops; what was written may be lost */
  abort(): Promise<void>;
}

/**
 * Writes `h` from its start: through a sync access handle where there is one (a worker, but not
 * WebKitGTK's, which throws NotSupportedError), else through a writable stream (the page; it
 * writes a copy the file becomes on close).
 */
async function writer(h: FileSystemFileHandle): Promise<Writer> {
  if ('createSyncAccessHandle' in h) {
    let a: FileSystemSyncAccessHandle | undefined;
    try {
      a = await h.createSyncAccessHandle();
      a.truncate(0);
      const sah = a;
      let at = 0;
      return {
        write: async (b) => {
          if (sah.write(b, { at }) !== b.length) throw new Error('short write');
          at += b.length;
        },
        close: async () => {
          sah.flush();
          sah.close();
        },
        abort: async () => sah.close(),
      };
    } catch (e) {
      a?.close();
      if (!(e instanceof DOMException && e.name === 'NotSupportedError')) throw e;
    }
  }
  const w = await h.createWritable();
  return { write: (b) => w.write(b as BufferSource), close: () => w.close(), abort: () => w.abort() };
}

/** Writes a small file whole. */
async function writeBytes(d: FileSystemDirectoryHandle, name: string, bytes: Uint8Array) {
  const w = await writer(await d.getFileHandle(name, { create: true }));
  try {
    await w.write(bytes);
  } catch (e) {
    await w.abort().catch(() => {});
    throw e;
  }
  await w.close();
}

/** The kept files in the folder itself, opened one by one (the index made again). */
async function scan(d: FileSystemDirectoryHandle): Promise<Index> {
  const ix: Index = {};
  for await (const [name, h] of entriesOf(d)) {
    if (h.kind !== 'file' || !KEPT_NAME.test(name)) continue;
    try {
      const f = await (h as FileSystemFileHandle).getFile();
      ix[name] = [f.size, f.lastModified];
    } catch {
      /* being written by another tab, or gone */
    }
  }
  return ix;
}

async function readIndex(d: FileSystemDirectoryHandle): Promise<Index> {
  try {
    const ix = JSON.parse((await readText(d, INDEX)) ?? 'null');
    if (ix && typeof ix === 'object' && Object.entries(ix).every(([n, e]) => KEPT_NAME.test(n) && Array.isArray(e) && e.length === 2 && e.every(Number.isFinite))) return ix;
  } catch {
    /* unreadable: made again */
  }
  return scan(d);
}

/** Where every page and worker of this origin hears that what is kept changed ('changed'), or
 *  that a sync's bytes were written or turned away ('written'): components/KeptSettings.tsx. */
export const KEPT_CHANNEL = DIR;
let channel: BroadcastChannel | undefined;
function announce(what: 'changed' | 'written') {
  try {
    (channel ??= new BroadcastChannel(KEPT_CHANNEL)).postMessage(what);
  } catch {
    /* no BroadcastChannel: the panel reads again when it is shown */
  }
}

async function writeIndex(d: FileSystemDirectoryHandle, ix: Index) {
  // not written (a page without writable streams: Safari before 26): removed, so that it is
  // made again from the folder rather than read stale
  await writeBytes(d, INDEX, new TextEncoder().encode(JSON.stringify(ix))).catch(() => d.removeEntry(INDEX).catch(() => {}));
  announce('changed');
}

/** Removes kept files and their index entries; a file already gone counts as removed. */
async function remove(d: FileSystemDirectoryHandle, ix: Index, names: string[]) {
  for (const n of names) {
    const gone = await d.removeEntry(n).then(
      () => true,
      (e) => e instanceof DOMException && e.name === 'NotFoundError',
    );
    if (gone) delete ix[n];
  }
}

/** The cap on kept bytes: the user's choice, or the automatic one (`auto`). */
export async function keptMax(): Promise<{ max: number; auto: boolean }> {
  const d = await folder();
  const set = d && (await readText(d, MAX));
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
async function makeRoom(d: FileSystemDirectoryHandle, ix: Index, room: number, max: number) {
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

/** Sets the cap (null: automatic; 0 keeps none) and drops what no longer fits. */
export async function setKeptMax(max: number | null): Promise<void> {
  await locked(async (d) => {
    if (max === null) await d.removeEntry(MAX).catch(() => {});
    else await writeBytes(d, MAX, new TextEncoder().encode(String(max)));
    const ix = await readIndex(d);
    await makeRoom(d, ix, 0, (await keptMax()).max);
    await writeIndex(d, ix);
  });
}

export interface KeptUsage {
  /** whether this browser can keep copies at all */
  available: boolean;
  bytes: number;
  files: number;
  max: number;
  auto: boolean;
}

export async function keptUsage(): Promise<KeptUsage> {
  const { max, auto } = await keptMax();
  const ix = await locked(readIndex);
  if (!ix) return { available: false, bytes: 0, files: 0, max, auto };
  const sizes = Object.values(ix).map(([size]) => size);
  return { available: true, bytes: sizes.reduce((t, s) => t + s, 0), files: sizes.length, max, auto };
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
 *  version as far as this page knows. */
export async function dropKept(scope: string, url: string, name: string, below = Number.POSITIVE_INFINITY): Promise<void> {
  await locked(async (d) => {
    const prefix = await keptPrefix(scope, url, name);
    const ix = await readIndex(d);
    const names = Object.keys(ix).filter((n) => n.startsWith(prefix) && Number(n.slice(prefix.length)) < below);
    if (!names.length) return;
    await remove(d, ix, names);
    await writeIndex(d, ix);
  });
}

/** The kept bytes of `name`'s version `version` when there are `size` of them (read whole: the
 *  kept basis refines against all of them); undefined: none kept. The caller checks them
 *  against the version's chunk index before using them. */
export async function readKept(scope: string, url: string, name: string, version: number, size: number): Promise<Uint8Array | undefined> {
  const file = await locked(async (d) => {
    const kept = (await keptPrefix(scope, url, name)) + version;
    const ix = await readIndex(d);
    if (!ix[kept]) return undefined;
    try {
      const f = await (await d.getFileHandle(kept)).getFile();
      if (f.size !== size) throw new Error('cut short'); // an interrupted write, or damage
      ix[kept] = [f.size, Date.now()];
      return f;
    } catch {
      await remove(d, ix, [kept]);
      return undefined;
    } finally {
      await writeIndex(d, ix);
    }
  });
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
 * (from the sync worker, written a slice at a time as it is read: `writer`). Not
 * kept when above the cap; others dropped for room, least recently used first. Best effort: a
 * copy that cannot be written only costs the next push its byte-level copies.
 */
export async function writeKept(scope: string, url: string, name: string, version: number, file: Blob): Promise<boolean> {
  const { max } = await keptMax();
  const done = await locked(async (d) => {
    const prefix = await keptPrefix(scope, url, name);
    const ix = await readIndex(d);
    const to = prefix + version;
    try {
      await remove(d, ix, Object.keys(ix).filter((n) => n.startsWith(prefix)));
      if (file.size > max) return false;
      await makeRoom(d, ix, file.size, max);
      const w = await writer(await d.getFileHandle(to, { create: true }));
      try {
        for (let o = 0; o < file.size; o += COPY_SLICE) await w.write(new Uint8Array(await file.slice(o, o + COPY_SLICE).arrayBuffer()));
      } catch (e) {
        await w.abort().catch(() => {});
        throw e;
      }
      await w.close();
      ix[to] = [file.size, Date.now()];
      return true;
    } catch {
      await remove(d, ix, [to]); // quota, or the file went away: nothing half-kept
      return false;
    } finally {
      await writeIndex(d, ix);
    }
  });
  announce('written');
  return done ?? false;
}
