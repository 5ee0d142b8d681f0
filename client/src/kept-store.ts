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
const DIR = 'dsync-kept';
/** when each kept file was last used or written (ms since the epoch), by name: the LRU order */
const USED = 'used.json';
/** the user's cap in bytes (decimal text); absent: automatic */
const MAX = 'max';
/** A kept file's name: 64 hex digits of SHA-256 of user, server and name, a dot, the version. */
const KEPT_NAME = /^([0-9a-f]{64})\.(\d+)$/;

/** The automatic cap: at most this many bytes (as the CLI's --keep-max default, cli/known.ts)… */
export const KEEP_MAX = 1_000_000_000;
/** …and at most this share of the origin's storage quota, so that kept copies never take the
 *  room the browser gives this site (a private window gets a small quota, and keeps little). */
export const KEEP_QUOTA_SHARE = 0.1;

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

/** The file name prefix of a known version's kept bytes: `key` is shared/src/known.ts knownKey. */
export async function keptPrefix(scope: string, key: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${scope}\n${key}`)));
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

/** Writes a small file whole (a worker has sync access handles; the page, writable streams). */
async function writeBytes(d: FileSystemDirectoryHandle, name: string, bytes: Uint8Array) {
  const h = await d.getFileHandle(name, { create: true });
  if ('createSyncAccessHandle' in h) {
    const a = await h.createSyncAccessHandle();
    try {
      a.truncate(0);
      a.write(bytes, { at: 0 });
      a.flush();
    } finally {
      a.close();
    }
  } else {
    const w = await (h as FileSystemFileHandle).createWritable();
    await w.write(bytes as BufferSource);
    await w.close();
  }
}

async function readUsed(d: FileSystemDirectoryHandle): Promise<Record<string, number>> {
  try {
    const u = JSON.parse((await readText(d, USED)) ?? '{}');
    return u && typeof u === 'object' ? u : {};
  } catch {
    return {}; // unreadable: every file counts as used when it was last written
  }
}

async function markUsed(d: FileSystemDirectoryHandle, names: string[], dropped: string[] = []) {
  const used = await readUsed(d);
  for (const n of dropped) delete used[n];
  for (const n of names) used[n] = Date.now();
  await writeBytes(d, USED, new TextEncoder().encode(JSON.stringify(used))).catch(() => {});
}

/** The kept files, with their sizes and when each was last used, least recently used first. */
async function listKept(d: FileSystemDirectoryHandle): Promise<{ name: string; size: number; used: number }[]> {
  const used = await readUsed(d);
  const out: { name: string; size: number; used: number }[] = [];
  for await (const [name, h] of entriesOf(d)) {
    if (h.kind !== 'file' || !KEPT_NAME.test(name)) continue;
    try {
      const f = await (h as FileSystemFileHandle).getFile();
      out.push({ name, size: f.size, used: used[name] ?? f.lastModified });
    } catch {
      /* being written by another tab, or gone */
    }
  }
  return out.sort((a, b) => a.used - b.used);
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

/** Sets the cap (null: automatic; 0 keeps none) and drops what no longer fits. */
export async function setKeptMax(max: number | null): Promise<void> {
  const d = await folder();
  if (!d) return;
  if (max === null) await d.removeEntry(MAX).catch(() => {});
  else await writeBytes(d, MAX, new TextEncoder().encode(String(max)));
  await makeRoom(d, 0, (await keptMax()).max);
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
  const d = await folder();
  const { max, auto } = await keptMax();
  if (!d) return { available: false, bytes: 0, files: 0, max, auto };
  const kept = await listKept(d);
  return { available: true, bytes: kept.reduce((t, k) => t + k.size, 0), files: kept.length, max, auto };
}

/** Drops every kept file (a file a sync is writing at that moment may stay). */
export async function clearKept(): Promise<void> {
  const d = await folder();
  if (!d) return;
  for (const k of await listKept(d)) await d.removeEntry(k.name).catch(() => {});
  await d.removeEntry(USED).catch(() => {});
}

/** Drops the kept bytes of `key`'s versions below `below` (all: Infinity), e.g. when another
 *  device pushed a newer version: a kept copy is used only while it is the server's latest
 *  version as far as this page knows. */
export async function dropKept(scope: string, key: string, below = Number.POSITIVE_INFINITY): Promise<void> {
  const d = await folder();
  if (!d) return;
  const prefix = await keptPrefix(scope, key);
  const names: string[] = [];
  for await (const [name] of entriesOf(d)) {
    const m = KEPT_NAME.exec(name);
    if (m && name.startsWith(prefix) && Number(m[2]) < below) names.push(name);
  }
  const gone: string[] = [];
  for (const name of names) if (await d.removeEntry(name).then(() => true, () => false)) gone.push(name);
  if (gone.length) await markUsed(d, [], gone);
}

/** The kept bytes of `key`'s version `version` when there are `size` of them (read whole: the
 *  kept basis refines against all of them); undefined: none kept. The caller checks them
 *  against the version's chunk index before using them. */
export async function readKept(scope: string, key: string, version: number, size: number): Promise<Uint8Array | undefined> {
  const d = await folder();
  if (!d) return undefined;
  const name = (await keptPrefix(scope, key)) + version;
  try {
    const f = await (await d.getFileHandle(name)).getFile();
    if (f.size !== size) throw new Error('cut short'); // an interrupted write, or damage
    const bytes = new Uint8Array(await f.arrayBuffer());
    await markUsed(d, [name]);
    return bytes;
  } catch (e) {
    if (!(e instanceof DOMException && e.name === 'NotFoundError')) await dropKept(scope, key, version + 1);
    return undefined;
  }
}

/** Drops the least recently used kept files until `room` more bytes fit under `max`. */
async function makeRoom(d: FileSystemDirectoryHandle, room: number, max: number) {
  const kept = await listKept(d);
  let total = kept.reduce((t, k) => t + k.size, 0);
  const gone: string[] = [];
  for (const k of kept) {
    if (total + room <= max) break;
    if (await d.removeEntry(k.name).then(() => true, () => false)) {
      total -= k.size;
      gone.push(k.name);
    }
  }
  if (gone.length) await markUsed(d, [], gone);
}

/** Bytes copied per step: a slice of the file is read, then written, so memory stays bounded. */
const COPY_SLICE = 4 << 20;

/**
 * Keeps `file`'s bytes as those of `key`'s version `version`, in place of its other versions'
 * (from the sync worker: a sync access handle, written a slice at a time as it is read). Not
 * kept when above the cap; others dropped for room, least recently used first. Best effort: a
 * copy that cannot be written only costs the next push its byte-level copies.
 */
export async function writeKept(scope: string, key: string, version: number, file: Blob): Promise<boolean> {
  const d = await folder();
  if (!d) return false;
  const name = (await keptPrefix(scope, key)) + version;
  try {
    await dropKept(scope, key);
    const { max } = await keptMax();
    if (file.size > max) return false;
    await makeRoom(d, file.size, max);
    const h = await d.getFileHandle(name, { create: true });
    if (!('createSyncAccessHandle' in h)) throw new Error('no sync access handles here');
    const a = await h.createSyncAccessHandle();
    try {
      a.truncate(0);
      for (let o = 0; o < file.size; o += COPY_SLICE) {
        const bytes = new Uint8Array(await file.slice(o, o + COPY_SLICE).arrayBuffer());
        if (a.write(bytes, { at: o }) !== bytes.length) throw new Error('short write');
      }
      a.flush();
    } finally {
      a.close();
    }
    await markUsed(d, [name]);
    return true;
  } catch {
    await d.removeEntry(name).catch(() => {}); // quota, or the file went away: nothing half-kept
    return false;
  }
}
