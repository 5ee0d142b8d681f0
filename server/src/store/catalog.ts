/**
 * Folder catalogs (docs/store.md, "Listing"): one head per folder, `ns/<user>/folders/<encoded
 * folder>`, holding its files (name, latest, size, versions, mtime) and its subfolders, so a
 * page of a listing reads one object. A catalog is a cache derived from the file heads: it is
 * updated by compare-and-swap after each file head changes, merged by the head's `seq` (the
 * newest state of a file wins whatever order updates land in), and repaired by gc from the
 * heads (a crash between the two swaps leaves it behind until then).
 *
 * A folder is listed while it is linked into its parent's catalog. It is linked when a file
 * or subfolder lands in it, or when it is made on purpose (`kept`: an empty folder a user or
 * the sync engine created, store.ts `makeFolder`). It is unlinked when its last live file and
 * subfolder go and it is not kept (`pruneFolder`): the folder's own catalog is first marked
 * `gone` by compare-and-swap, then the link is removed from the parent. A writer that lands in
 * a `gone` catalog clears the mark and links the folder again, whatever its process believed
 * linked; the pruner reads the catalog once more after unlinking and links it back if anything
 * landed meanwhile. Every link a writer needs is so made by it or by the pruner.
 *
 * Every catalog swap is followed by a write of the namespace's **change marker**
 * (`changed/<user>`, `markChanged`) before it resolves, so that whether anything in a namespace
 * changed is one read of one head (`Store.changeToken`), whatever the number of folders.
 */
import { randomBytes } from 'node:crypto';
import type { Backend, ListEntry } from './backend.ts';
import { type FileHead, isModified } from './format.ts';
import { type Change, updateHead } from './heads.ts';
import { changeMarkerKey, encodeName, nsPrefix } from './keys.ts';
import { damagedObject } from './errors.ts';

export interface CatalogEntry {
  /** the file head's seq this entry reflects */
  seq: number;
  latest: number;
  size: number;
  /** live versions; 0: deleted (kept so that an older update cannot bring the file back) */
  versions: number;
  mtime: string;
  /** the latest version's modification time as its pusher gave it (ms since the epoch), if it did */
  modified?: number;
  /** the latest version's index id ('' when deleted): the similarity traits' key */
  index?: string;
}
/** A file as the store's listings and searches give it: the listing's own shape (the REST API
 *  answers it as it is). */
import type { FileInfo } from '../../../shared/src/wire/api.ts';
export type { FileInfo };
/** A catalog entry as listings show it. */
export const fileInfo = (name: string, e: CatalogEntry): FileInfo => ({ name, latest: e.latest, size: e.size, versions: e.versions, mtime: e.mtime, ...(e.modified !== undefined && { modified: e.modified }) });

export interface Catalog {
  /** by the file's last name component */
  files: Record<string, CatalogEntry>;
  /** subfolders by last component */
  folders: Record<string, 1>;
  /** made on purpose: listed while empty (store.ts makeFolder) */
  kept?: true;
  /** unlinked from its parent (or being unlinked) since it went empty: a writer landing here
   *  links it again */
  gone?: true;
}

/** The folder of a name ('' for the top) and its last component. */
export function splitName(name: string): [string, string] {
  const k = name.lastIndexOf('/');
  return k < 0 ? ['', name] : [name.slice(0, k), name.slice(k + 1)];
}

export const catalogKey = (user: string, folder: string) => `${nsPrefix(user)}folders/${encodeName(folder)}`;
/** The prefix of the catalog keys of `folder` ('' for the top) and of every folder under it
 *  (and of a few others whose names begin as it does): the key of a name under it begins with
 *  the encoding of `folder` (keys.ts: encoded bytes cut into components). */
export const catalogsPrefix = (user: string, folder: string) => `${nsPrefix(user)}folders/${folder ? encodeName(folder).slice(0, -2) : ''}`;

/**
 * What this process read of folder catalogs, by key, each with the listing entry it was read
 * under (its tag, size and time: `Backend.list`): a walk of the tree lists the catalogs first
 * (one listing, no object read) and reads again only those whose entry is not the one kept, so
 * a walk over an unchanged tree reads no catalog, and a catalog another process swapped is read
 * on the next walk (its generation or ETag is new). An entry is kept only when the bytes read
 * came under the listed tag and size. Least recently used out first past `maxBytes` of catalog
 * bytes.
 */
export class CatalogCache<V> {
  private kept = new Map<string, { at: ListEntry; value: V }>();
  private bytes = 0;
  constructor(private readonly maxBytes: number) {}

  /** What was kept for `at.key` when it was read under `at` (tag, size and time), else undefined. */
  get(at: ListEntry): V | undefined {
    const hit = this.kept.get(at.key);
    if (!hit || at.tag === undefined || hit.at.tag !== at.tag || hit.at.size !== at.size || hit.at.modified !== at.modified) return undefined;
    this.kept.delete(at.key);
    this.kept.set(at.key, hit);
    return hit.value;
  }

  /** Keeps `value`, what was made of the catalog `at.key` read with tag `tag` and `size` bytes,
   *  when that is the listed `at`; else drops what was kept of it. */
  set(at: ListEntry, tag: string, size: number, value: V): void {
    const old = this.kept.get(at.key);
    if (old) {
      this.kept.delete(at.key);
      this.bytes -= old.at.size;
    }
    if (at.tag === undefined || at.tag !== tag || at.size !== size || size > this.maxBytes) return;
    this.kept.set(at.key, { at, value });
    this.bytes += size;
    for (const [k, e] of this.kept) {
      if (this.bytes <= this.maxBytes) break;
      this.kept.delete(k);
      this.bytes -= e.at.size;
    }
  }
}

/** An empty catalog. Its maps have no prototype: a file may be named "__proto__". */
const empty = (): Catalog => ({ files: Object.create(null), folders: Object.create(null) });

export function parseCatalog(body: Uint8Array | null, key: string): Catalog {
  if (!body) return empty();
  let c: any;
  try {
    c = JSON.parse(Buffer.from(body).toString('utf8'));
  } catch {
    c = null;
  }
  const ok =
    c && typeof c.files === 'object' && typeof c.folders === 'object' &&
    Object.values(c.files).every((e: any) => e && [e.seq, e.latest, e.size, e.versions].every((x) => Number.isSafeInteger(x) && x >= 0) && typeof e.mtime === 'string' && isModified(e.modified) && (e.index === undefined || (typeof e.index === 'string' && /^([0-9a-f]{64})?$/.test(e.index))));
  if (!ok) throw damagedObject(`${key}: not a folder catalog`);
  const out = empty();
  for (const [k, v] of Object.entries(c.files)) out.files[k] = v as CatalogEntry;
  for (const k of Object.keys(c.folders)) out.folders[k] = 1;
  if (c.kept === true) out.kept = true;
  if (c.gone === true) out.gone = true;
  return out;
}

export function entryOf(head: FileHead): CatalogEntry {
  const last = head.versions[head.versions.length - 1];
  return { seq: head.seq ?? 0, latest: last?.version ?? 0, size: last?.size ?? 0, versions: head.versions.length, mtime: last?.mtime ?? '', ...(last?.modified !== undefined && { modified: last.modified }), index: last?.index ?? '' };
}

const body = (c: Catalog) => Buffer.from(JSON.stringify(c));

/** Whether a catalog lists nothing: no live file, no subfolder, not kept. */
const isEmpty = (c: Catalog) => !c.kept && !Object.keys(c.folders).length && !Object.values(c.files).some((e) => e.versions > 0);

const linkKey = (user: string, folder: string) => user + '\0' + folder;

/** A compare-and-swap of one of `user`'s catalogs (`updateHead`); once a change landed, the
 *  namespace's change marker is written after it (`markChanged`) before this resolves. */
async function swapCatalog<T>(backend: Backend, user: string, key: string, change: (body: Uint8Array | null) => Change<T>, o: { guess?: boolean; merge?: boolean } = {}): Promise<T> {
  let wrote = false;
  const result = await updateHead(
    backend,
    key,
    (b) => {
      const out = change(b);
      // sticky: an attempt whose outcome was unknown may have landed
      wrote ||= out.body !== null;
      return out;
    },
    o,
  );
  if (wrote) await markChanged(backend, user);
  return result;
}

/** Per backend and user: the marker write under way, and the one queued to start after it. */
const markers = new WeakMap<Backend, Map<string, { running: Promise<void> | null; queued: Promise<void> | null }>>();

/**
 * Writes `user`'s change marker after a change of one of its catalogs landed: a head whose tag
 * changes at every write (its body: 16 random bytes). A change waits for a write that starts
 * after it: the one queued behind a write under way, which every change meanwhile shares, so a
 * burst of changes makes two writes, not one each. A write refused by compare-and-swap leaves
 * the marker newer than the change (another writer read and wrote it after this change
 * landed), and a write that fails only delays the news until the next change's: the marker is
 * a hint that something changed, never what changed, so neither is an error.
 */
export function markChanged(backend: Backend, user: string): Promise<void> {
  let byUser = markers.get(backend);
  if (!byUser) markers.set(backend, (byUser = new Map()));
  let m = byUser.get(user);
  if (!m) byUser.set(user, (m = { running: null, queued: null }));
  const state = m;
  if (state.queued) return state.queued;
  const write = (): Promise<void> => {
    const key = changeMarkerKey(user);
    const run = backend
      .getHead(key)
      .then((h) => backend.putHead(key, randomBytes(16), h?.tag ?? null))
      .then(
        () => {},
        () => {},
      )
      .finally(() => {
        if (state.running === run) state.running = null;
        if (!state.running && !state.queued) byUser.delete(user);
      });
    state.running = run;
    return run;
  };
  if (!state.running) return write();
  const queued = state.running.then(() => {
    state.queued = null;
    return write();
  });
  state.queued = queued;
  return queued;
}

/** A change of a folder's catalog that waits for its next swap: a file head's new state, or a
 *  subfolder to link. */
type Note = { head: FileHead } | { sub: string };

/** Notes waiting for a catalog's next swap, per backend, linked set and catalog key. */
interface NoteGroup {
  running: boolean;
  soon: boolean;
  queue: { note: Note; ok: () => void; fail: (e: unknown) => void }[];
}
const noteGroups = new WeakMap<Backend, WeakMap<Set<string>, Map<string, NoteGroup>>>();

/** Notes a file head's new state in its folder's catalog; a new file's folder is linked into
 *  its ancestors, and a folder its last file left is unlinked (`pruneFolder`). `linked`:
 *  folders this process knows are linked already.
 *
 *  Notes of one folder asked for while its catalog is being swapped share the next swap (a
 *  group, docs/store.md §4 "Commits at once"): one compare-and-swap carries all their entries,
 *  each merged by seq as alone, and the subfolders linked into it (`linkFolder`); each resolves
 *  once that swap landed (or fails with it). No timer: a lone note is swapped at once. */
export function noteInCatalog(backend: Backend, user: string, head: FileHead, linked: Set<string>): Promise<void> {
  return queueNote(backend, user, splitName(head.name)[0], { head }, linked);
}

/** Queues `note` for the next swap of `folder`'s catalog (`noteInCatalog`). */
function queueNote(backend: Backend, user: string, folder: string, note: Note, linked: Set<string>): Promise<void> {
  const key = catalogKey(user, folder);
  let byLinked = noteGroups.get(backend);
  if (!byLinked) noteGroups.set(backend, (byLinked = new WeakMap()));
  let byKey = byLinked.get(linked);
  if (!byKey) byLinked.set(linked, (byKey = new Map()));
  let g = byKey.get(key);
  if (!g) byKey.set(key, (g = { running: false, soon: false, queue: [] }));
  const group = g;
  const run = (): void => {
    if (group.running || group.soon) return;
    if (!group.queue.length) return void byKey.delete(key);
    const batch = group.queue.splice(0);
    group.running = true;
    noteAll(backend, user, folder, batch.map((w) => w.note), linked)
      .then(
        () => batch.forEach((w) => w.ok()),
        (e) => batch.forEach((w) => w.fail(e)),
      )
      .finally(() => {
        group.running = false;
        run();
      });
  };
  return new Promise<void>((ok, fail) => {
    group.queue.push({ note, ok, fail });
    // once the notes asked for in this turn of the event loop are in (setImmediate: no wait
    // beyond it), unless a swap is under way: then once it is done
    if (group.running || group.soon) return;
    group.soon = true;
    setImmediate(() => {
      group.soon = false;
      run();
    });
  });
}

/** Notes the heads of files of one folder and links its subfolders `notes` name in its catalog
 *  in one compare-and-swap (each file entry merged by seq), then links the folder if one of
 *  them lives (or is a subfolder), or prunes it if one went. */
async function noteAll(backend: Backend, user: string, folder: string, notes: Note[], linked: Set<string>): Promise<void> {
  const entries = new Map<string, CatalogEntry>();
  const subs = new Set<string>();
  for (const n of notes) {
    if ('sub' in n) {
      subs.add(n.sub);
      continue;
    }
    const base = splitName(n.head.name)[1];
    const e = entryOf(n.head);
    if ((entries.get(base)?.seq ?? -1) < e.seq) entries.set(base, e);
  }
  const key = catalogKey(user, folder);
  // whether the catalog was `gone` (unlinked from its parent) and something live landed: then
  // it is linked again whatever this process believes linked
  const wasGone = await swapCatalog(backend, user, key, (b) => {
    const c = parseCatalog(b, key);
    let changed = false;
    let gone = false;
    for (const [base, entry] of entries) {
      const had = c.files[base];
      if (had && had.seq >= entry.seq) continue;
      c.files[base] = entry;
      changed = true;
      if (c.gone && entry.versions > 0) gone = true;
    }
    for (const base of subs) {
      if (c.folders[base] && !c.gone) continue;
      c.folders[base] = 1;
      changed = true;
      if (c.gone) gone = true;
    }
    if (!changed) return { body: null, result: false };
    if (gone) delete c.gone;
    return { body: body(c), result: gone };
  }, { guess: true, merge: true });
  for (const base of subs) linked.add(linkKey(user, folder ? `${folder}/${base}` : base));
  const all = [...entries.values()];
  if (subs.size || all.some((e) => e.versions)) await linkFolder(backend, user, folder, linked, wasGone);
  if (all.some((e) => !e.versions)) await pruneFolder(backend, user, folder, linked);
}

/** Makes `folder` a subfolder of its parent, and so on up to the top (each link a note of the
 *  parent's catalog: the links into one folder asked at once share its swap). `force`: link it
 *  even if this process believes it linked (its catalog was `gone`). */
export async function linkFolder(backend: Backend, user: string, folder: string, linked: Set<string>, force = false): Promise<void> {
  if (!folder || (!force && linked.has(linkKey(user, folder)))) return;
  const [parent, base] = splitName(folder);
  await queueNote(backend, user, parent, { sub: base }, linked);
}

/** Unlinks `folder` from its parent if it is empty and not kept, then its parent likewise
 *  (see the module comment for why this is safe against writers landing meanwhile). */
export async function pruneFolder(backend: Backend, user: string, folder: string, linked: Set<string>): Promise<void> {
  while (folder) {
    const key = catalogKey(user, folder);
    const marked = await swapCatalog(backend, user, key, (b) => {
      const c = parseCatalog(b, key);
      if (!isEmpty(c)) return { body: null, result: false };
      // (already gone: unlinked again, e.g. after gc's repair linked it from an old view)
      if (c.gone) return { body: null, result: true };
      c.gone = true;
      return { body: body(c), result: true };
    }, { merge: true });
    if (!marked) return;
    const [parent, base] = splitName(folder);
    const pkey = catalogKey(user, parent);
    await swapCatalog(backend, user, pkey, (b) => {
      const c = parseCatalog(b, pkey);
      if (!c.folders[base]) return { body: null, result: undefined };
      delete c.folders[base];
      return { body: body(c), result: undefined };
    }, { merge: true });
    linked.delete(linkKey(user, folder));
    // something landed between the mark and the unlink: its writer may have found the link
    // still there, so the link is made again here
    const now = parseCatalog((await backend.getHead(key))?.body ?? null, key);
    if (!now.gone || !isEmpty(now)) return linkFolder(backend, user, folder, linked, true);
    folder = parent;
  }
}

/** Marks `folder` kept (listed while empty) and links it; `kept` false unmarks it and prunes
 *  it if it is empty. */
export async function keepFolder(backend: Backend, user: string, folder: string, kept: boolean, linked: Set<string>): Promise<void> {
  const key = catalogKey(user, folder);
  const wasGone = await swapCatalog(backend, user, key, (b) => {
    const c = parseCatalog(b, key);
    if (!!c.kept === kept && !(kept && c.gone)) return { body: null, result: false };
    const gone = kept && !!c.gone;
    if (kept) c.kept = true;
    else delete c.kept;
    if (gone) delete c.gone;
    return { body: body(c), result: gone };
  }, { merge: true });
  if (kept) await linkFolder(backend, user, folder, linked, wasGone || !linked.has(linkKey(user, folder)));
  else await pruneFolder(backend, user, folder, linked);
}

/** A folder's catalog ('' for the top). */
export async function readCatalog(backend: Backend, user: string, folder: string): Promise<Catalog> {
  const key = catalogKey(user, folder);
  return parseCatalog((await backend.getHead(key))?.body ?? null, key);
}

/** Brings a catalog up to the given entries (by seq) and subfolders (added, never removed: a
 *  commit may be linking one right now). Returns whether it changed. */
export async function repairCatalog(backend: Backend, user: string, folder: string, files: Map<string, CatalogEntry>, folders: Set<string>): Promise<boolean> {
  const key = catalogKey(user, folder);
  return swapCatalog(backend, user, key, (b) => {
    let c: Catalog;
    let changed = false;
    try {
      c = parseCatalog(b, key);
    } catch {
      c = empty(); // damaged: rebuilt from the heads
      changed = true;
    }
    for (const [base, e] of files) {
      if ((c.files[base]?.seq ?? -1) < e.seq || (c.files[base]?.seq === e.seq && c.files[base].versions !== e.versions)) {
        c.files[base] = e;
        changed = true;
      }
    }
    for (const f of folders) {
      if (!c.folders[f]) {
        c.folders[f] = 1;
        changed = true;
      }
    }
    return { body: changed ? body(c) : null, result: changed };
  }, { merge: true });
}
