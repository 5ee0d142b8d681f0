/**
 * The local folder's walk and its two housekeeping moves, written once for the CLI (node:fs,
 * cli/walk.ts) and the page (the File System Access API, client/src/handle-tree.ts), each
 * through a small adapter (docs/sync.md "The local folder"):
 * - `walkTree`: the regular files (size, mtime) and folders under the folder, by NFC name.
 *   Links are never followed. What the walk cannot vouch for is skipped with a note and
 *   `hold: true`, so that the engine reads nothing under it as deleted and downloads nothing
 *   into it: a symbolic link (held as a file and as a folder, as it may stand where either
 *   was), a folder the adapter refuses to enter (a mount point) or cannot read, a special file,
 *   an entry that changed kind while read. A second name on disk for one NFC name (another
 *   Unicode form) is returned in `twins`: the side decides.
 * - `renameVia`: a file's rename, a case-only one through a temporary name of its own (so that
 *   a case-insensitive file system sees it), another one refused when the name is taken.
 * - `pruneEmpty`: the folders a rename or delete left empty removed, up to the synced folder.
 *
 * The walk calls the adapter synchronously where it answers synchronously (node's readdirSync
 * and lstatSync: a promise per entry costs ~10× the system call, bench/results/walk.md) and
 * awaits where it answers with a promise (the page's handles).
 */
import type { Skipped, Stat } from './engine.ts';

type Maybe<T> = T | Promise<T>;

/** An entry of a folder as its adapter lists it (its kind: `TreeReader.kind`). */
export interface TreeEntry {
  name: string;
}

/** What an entry is: a symbolic link is a `link` (never a file or a folder), a FIFO, socket or
 *  device is `other`. */
export type EntryKind = 'file' | 'directory' | 'link' | 'other';

/** How one kind of file system is read. `rel` is the '/'-separated path below the synced
 *  folder as it is on disk ('' the folder itself; a folder's ends in '/'). A method that
 *  throws makes the entry held (`cannot read: …`); the folder's own listing failing fails the
 *  walk. */
export interface TreeReader<D, E extends TreeEntry> {
  /** the entries of the folder `dir` */
  list(dir: D, rel: string): Maybe<E[]>;
  kind(e: E): EntryKind;
  /** the folder entry `e` of `dir`, looked at again before the walk goes in: the folder to walk,
   *  null when it is gone since listed, or a reason it is held (a mount point; not a folder
   *  any more: 'changed while read') */
  enter(dir: D, e: E, rel: string): Maybe<{ dir: D } | string | null>;
  /** the file entry `e` of `dir`: its stat (a new object, which the walk keeps), null when it is
   *  gone since listed, or a reason it is held ('changed while read') */
  stat(dir: D, e: E, rel: string): Maybe<Stat | string | null>;
}

export interface WalkOptions<D, E> {
  /** paths (NFC) left out, with no note */
  ignored?: (p: string, isDir?: boolean) => boolean;
  /** an ignored file (to drop a stale temporary file of a download) */
  onIgnoredFile?: (dir: D, e: E, rel: string) => Maybe<void>;
  /** every entry `ignored` left out (NFC name; isDir for a folder) */
  onIgnored?: (p: string, isDir: boolean) => void;
  /** the entries directly in `top` only: a subfolder is looked at as the walk would enter it
   *  (and held alike), and listed in `dirs`, but not walked */
  shallow?: boolean;
}

export interface Walked {
  /** by NFC name: the file's stat and its path on disk below the folder */
  files: Map<string, Stat & { rel: string }>;
  /** the folders, by NFC name */
  dirs: Set<string>;
  skipped: Skipped[];
  /** a second name on disk for one NFC name (another Unicode form): by NFC name and path on disk */
  twins: (Stat & { key: string; rel: string })[];
}

const byName = (a: TreeEntry, b: TreeEntry) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
const message = (e: unknown) => (e as Error)?.message ?? String(e);

/** Both the file and the folder reading of `p` held, with one reason. */
const holdBoth = (out: Skipped[], p: string, reason: string) => out.push({ path: p + '/', reason, hold: true }, { path: p, reason, hold: true });

/** Walks the folder `top` (see the header). */
export async function walkTree<D, E extends TreeEntry>(reader: TreeReader<D, E>, top: D, o: WalkOptions<D, E> = {}): Promise<Walked> {
  const ignored = o.ignored ?? (() => false);
  const files = new Map<string, Stat & { rel: string }>();
  const dirs = new Set<string>();
  const skipped: Skipped[] = [];
  const twins: Walked['twins'] = [];
  const walk = async (dir: D, rel: string) => {
    let entries: E[];
    try {
      const listed = reader.list(dir, rel);
      entries = listed instanceof Promise ? await listed : listed;
    } catch (e) {
      if (!rel) throw e; // the folder itself
      return void holdBoth(skipped, rel.slice(0, -1).normalize('NFC'), `cannot read the folder: ${message(e)}`);
    }
    entries.sort(byName);
    for (const e of entries) {
      const p = rel + e.name;
      const key = p.normalize('NFC');
      const kind = reader.kind(e);
      if (kind === 'directory') {
        if (ignored(key, true)) {
          o.onIgnored?.(key, true);
          continue;
        }
        let into: { dir: D } | string | null;
        try {
          const r = reader.enter(dir, e, p);
          into = r instanceof Promise ? await r : r;
        } catch (err) {
          holdBoth(skipped, key, `cannot read: ${message(err)}`);
          continue;
        }
        if (into === null) continue; // gone since the folder was read
        if (typeof into === 'string') holdBoth(skipped, key, into);
        else {
          dirs.add(key);
          if (!o.shallow) await walk(into.dir, p + '/');
        }
      } else if (kind === 'link') {
        if (!ignored(key) && !ignored(key, true)) holdBoth(skipped, key, 'a symbolic link: not followed');
      } else if (ignored(key)) {
        o.onIgnored?.(key, false);
        if (kind === 'file' && o.onIgnoredFile) await o.onIgnoredFile(dir, e, p);
      } else if (kind !== 'file') {
        skipped.push({ path: key, reason: 'not a regular file', hold: true });
      } else {
        let st: Stat | string | null;
        try {
          const r = reader.stat(dir, e, p);
          st = r instanceof Promise ? await r : r;
        } catch (err) {
          skipped.push({ path: key, reason: `cannot read: ${message(err)}`, hold: true });
          continue;
        }
        if (st === null) continue; // gone since the folder was read: deleted
        if (typeof st === 'string') skipped.push({ path: key, reason: st, hold: true });
        else if (files.has(key)) twins.push({ key, rel: p, size: st.size, mtimeMs: st.mtimeMs });
        else {
          const f = st as Stat & { rel: string };
          f.rel = p;
          files.set(key, f);
        }
      }
    }
  };
  await walk(top, '');
  return { files, dirs, skipped, twins };
}

/** The folder a '/'-separated path is in: '' for the top, else its path ending in '/'. */
const folderOf = (p: string) => p.slice(0, p.lastIndexOf('/') + 1);

/**
 * Renames the file `from` to `to` (paths below the synced folder; `at`: where `from` is on
 * disk, when in another Unicode form) with `move`. A case-only rename goes through a temporary
 * name (`tempName`, in `to`'s folder), so that a case-insensitive file system sees it; any
 * other rename is refused when `to` exists.
 */
export async function renameVia(t: { move(from: string, to: string): Promise<void>; exists(p: string): Promise<boolean>; tempName(): string }, from: string, to: string, at = from): Promise<void> {
  if (from.toLowerCase() === to.toLowerCase()) {
    const tmp = folderOf(to) + t.tempName();
    await t.move(at, tmp);
    await t.move(tmp, to);
    return;
  }
  if (await t.exists(to)) throw new Error(`${to} exists here`);
  await t.move(at, to);
}

/** The folder of a path below the synced folder ('' the top), for `pruneEmpty`. */
export const parentFolder = (p: string) => folderOf(p).slice(0, -1);

/** Removes the folder `folder` (a path below the synced folder, '' the top) and each folder
 *  above it while `rmdir` removes it (false: not empty, or not removable), never the synced
 *  folder itself. */
export async function pruneEmpty(folder: string, rmdir: (p: string) => Promise<boolean>): Promise<void> {
  for (let cur = folder.replace(/\/+$/, ''); cur; cur = cur.slice(0, Math.max(0, cur.lastIndexOf('/')))) {
    if (!(await rmdir(cur).catch(() => false))) return;
  }
}
