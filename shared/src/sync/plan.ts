/**
 * The sync engine's decision table (docs/sync.md): from the local tree now, the state (what
 * this device last agreed on with the server, per path) and the server's listing now, what to
 * do with each path. Pure: no I/O, the same in the CLI and the page's worker.
 *
 * A file's content is named by its root hash (hex) as the protocol computes it with the
 * default chunking (chunk-index.ts), or for a vault over its keyed chunk ids (vault/chunks.ts
 * `versionRoot`): the server or the vault lists it with each version, and the push and pull
 * report it, so both sides of a comparison come from one definition.
 *
 *   local \ server | unchanged        | changed                 | deleted
 *   ---------------|------------------|-------------------------|--------------
 *   unchanged      | nothing          | download                | delete here
 *   changed        | upload (basis v) | conflict (same: record) | upload (new)
 *   deleted        | delete there     | download                | forget
 *
 * Without an agreed state: new here → upload (new), new there → download, new on both →
 * record when the contents are the same, else conflict. Renames are found first (a path gone
 * on one side, unchanged on the other, and a new path of the same content on the first side)
 * and done as moves on the other side, never as delete and upload.
 *
 * Types: a path that is a file on one side and a folder on the other (or on the server both)
 * is decided before the table. The folder keeps the name: the file is deleted where it was
 * agreed and unchanged (the other side replaced it by a folder), else it is moved aside to a
 * conflict name on its own side (`asideLocal`, `asideRemote`) and goes across as a new file.
 *
 * Case and normalisation: names that the local file system holds as one (`Shape.fold`) are
 * decided before the table too: one keeps the name (the one here, else the agreed one, else
 * the first), every other one on the server is moved aside there to a conflict name.
 */

import { FOLDER_MOVE_BODY_BYTES, FOLDER_MOVE_FILES, MAX_NAME_BYTES } from '../base/limits.ts';
import { utf8Length } from '../wire/names.ts';

/** What a change on the server expects at the name: its latest version, or no file there. */
export type Expect = { version: number } | 'absent';

/** A file in the local tree now; `hash` is its content's root hash (hex). */
export interface LocalFile {
  size: number;
  mtimeMs: number;
  hash: string;
}

/** A file on the server now: its latest version; its `root` (hex, as the local tree's `hash`)
 *  where the listing gives it. */
export interface RemoteFile {
  version: number;
  size: number;
  root?: string;
}

/** What this device and the server last agreed a path held. */
export interface Agreed {
  version: number;
  hash: string;
  size: number;
  /** the local file's mtime when agreed: a file whose size and mtime still match is not re-read */
  mtimeMs: number;
}

export type Action =
  /** push the local file over the server's `expect` (a version, or no file: a new name) */
  | { op: 'upload'; path: string; expect: Expect }
  /** pull the server's `version` over the local file (its basis, when there is one) */
  | { op: 'download'; path: string; version: number }
  | { op: 'deleteLocal'; path: string }
  | { op: 'deleteRemote'; path: string; version: number }
  /** a local rename, done on the server while `from`'s latest is still `version` */
  | { op: 'moveRemote'; from: string; to: string; version: number }
  /** a rename on the server, done here */
  | { op: 'moveLocal'; from: string; to: string; version: number }
  /** both changed: the server's `version` keeps the name, the local bytes go up as a conflict copy */
  | { op: 'conflict'; path: string; version: number }
  /** both hold the same content: note it as agreed */
  | { op: 'record'; path: string; version: number }
  /** gone on both sides */
  | { op: 'forget'; path: string }
  /** the local file is where the server has a folder: it goes to a conflict name here, and up */
  | { op: 'asideLocal'; path: string }
  /** the server's file `version` is where this device has a folder, or is a name this device's
   *  file system holds as another (`why`): it goes to a conflict name on the server */
  | { op: 'asideRemote'; path: string; version: number; why: 'folder' | 'case' };

/** What a pass knows of the two sides' folders and of the local file system's names. */
export interface Shape {
  /** folders here (the parents of local files are added) */
  dirsHere?: ReadonlySet<string>;
  /** folders on the server (the parents of its files are added) */
  dirsThere?: ReadonlySet<string> | null;
  /** the key under which the local file system finds a name: two names with one key are one
   *  file here (a case-insensitive system: lower case) */
  fold?: (p: string) => string;
}

/** Every folder of `files` (their parents) and `dirs`. */
function foldersOf(files: Iterable<string>, dirs: Iterable<string> | null | undefined): Set<string> {
  const out = new Set(dirs ?? []);
  for (const p of files) for (const d of parentsOf(p)) out.add(d);
  return out;
}

export type Files<T> = ReadonlyMap<string, T>;

/** The keys of `m` whose entries pass `keep`, sorted. */
function sortedWhere<T>(m: Files<T>, keep: (p: string, v: T) => boolean): string[] {
  const out: string[] = [];
  for (const [p, v] of m) if (keep(p, v)) out.push(p);
  return out.sort();
}

/** Strings in the order `Array.prototype.sort` puts them (UTF-16 code units). */
const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The server files whose root the plan needs and the listing does not give: those both sides
 * changed or made (equal contents are not a conflict), and those that may be the new name of a
 * file renamed on the server (same size as an agreed file gone from the server).
 */
export function rootsWanted(local: Files<LocalFile>, state: Files<Agreed>, remote: Files<RemoteFile>): string[] {
  const want = new Set<string>();
  const goneSizes = new Set<number>();
  for (const [p, s] of state) if (!remote.has(p) && local.get(p)?.hash === s.hash) goneSizes.add(s.size);
  for (const [p, r] of remote) {
    if (r.root !== undefined) continue;
    const l = local.get(p);
    const s = state.get(p);
    if (l && (!s || (r.version !== s.version && l.hash !== s.hash))) want.add(p);
    if (!l && !s && goneSizes.has(r.size)) want.add(p);
  }
  return [...want].sort();
}

/** The actions that bring the two sides together, at most one per path (a move names two). */
export function plan(local: Files<LocalFile>, state: Files<Agreed>, remote: Files<RemoteFile>, shape: Shape = {}): Action[] {
  const actions: Action[] = [];
  const done = new Set<string>();
  const dirsHere = foldersOf(local.keys(), shape.dirsHere);
  const dirsThere = foldersOf(remote.keys(), shape.dirsThere);
  /** whether a file can be at `q` on a side with these files and folders (no folder there, no
   *  file above it): a rename is done only to such a name */
  const fits = (q: string, files: Files<unknown>, dirs: ReadonlySet<string>) => !dirs.has(q) && !parentsOf(q).some((d) => files.has(d));

  // Renames on this device: an agreed path gone here and unchanged on the server, and a new
  // local path (unknown to the state and the server) with the same content.
  // (each list filtered before it is sorted: a pass over an unchanged folder sorts nothing)
  const newLocal = byContent(sortedWhere(local, (p) => !state.has(p) && !remote.has(p)), (q) => local.get(q)!.hash);
  for (const p of sortedWhere(state, (p, s) => !local.has(p) && remote.get(p)?.version === s.version)) {
    const s = state.get(p)!;
    const to = newLocal.get(s.hash)?.find((q) => !done.has(q) && fits(q, remote, dirsThere));
    if (to === undefined) continue;
    actions.push({ op: 'moveRemote', from: p, to, version: s.version });
    done.add(p).add(to);
  }
  // Renames on the server: an agreed path gone there and unchanged here, and a new server path
  // (unknown to the state and here) with the same root.
  // (a new server path that this file system finds as another local file is no free name here)
  const localByKey = new Map(shape.fold ? [...local.keys()].map((q) => [shape.fold!(q), q]) : []);
  const freeHere = (q: string, from: string) => !shape.fold || (localByKey.get(shape.fold(q)) ?? from) === from;
  const newRemote = byContent(sortedWhere(remote, (p, r) => !state.has(p) && !local.has(p) && r.root !== undefined), (q) => remote.get(q)!.root!);
  for (const p of sortedWhere(state, (p, s) => !remote.has(p) && local.get(p)?.hash === s.hash)) {
    const s = state.get(p)!;
    if (done.has(p)) continue;
    const to = newRemote.get(s.hash)?.find((q) => !done.has(q) && freeHere(q, p) && fits(q, local, dirsHere) && !dirsThere.has(q));
    if (to === undefined) continue;
    actions.push({ op: 'moveLocal', from: p, to, version: remote.get(to)!.version });
    done.add(p).add(to);
  }

  // Names this file system holds as one: one keeps it, the others on the server move aside.
  if (shape.fold) {
    const groups = new Map<string, string[]>();
    const add = (p: string) => {
      if (done.has(p)) return;
      const k = shape.fold!(p);
      const g = groups.get(k);
      if (g) g.push(p);
      else groups.set(k, [p]);
    };
    for (const p of local.keys()) add(p);
    for (const p of remote.keys()) if (!local.has(p)) add(p);
    // each group's names in order, the groups in the order of their first names
    const many = [...groups.values()].filter((g) => g.length > 1).map((g) => g.sort());
    for (const names of many.sort((a, b) => compare(a[0], b[0]))) {
      const keep = names.find((p) => local.has(p)) ?? names.find((p) => state.has(p) && remote.has(p)) ?? names[0];
      for (const p of names) {
        if (p === keep || !remote.has(p) || local.has(p)) continue;
        actions.push({ op: 'asideRemote', path: p, version: remote.get(p)!.version, why: 'case' });
        done.add(p);
      }
    }
  }

  // Types: a file where the other side (or the server itself) has a folder; then the table.
  // At most one action per path, in the order of their paths.
  const cells: (Action & { path: string })[] = [];
  const cell = (p: string) => {
    if (done.has(p)) return;
    const a = decideType(p, local.get(p), state.get(p), remote.get(p), dirsHere.has(p), dirsThere.has(p)) ?? decide(p, local.get(p), state.get(p), remote.get(p));
    if (a) cells.push(a as Action & { path: string });
  };
  for (const p of local.keys()) cell(p);
  for (const p of state.keys()) if (!local.has(p)) cell(p);
  for (const p of remote.keys()) if (!local.has(p) && !state.has(p)) cell(p);
  actions.push(...cells.sort((a, b) => compare(a.path, b.path)));
  return actions;
}

/** `paths` (in their order) by their content: a rename's new name is looked up by the content
 *  of the old one, not searched for among every new path. */
function byContent(paths: string[], content: (p: string) => string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const p of paths) {
    const c = content(p);
    const list = out.get(c);
    if (list) list.push(p);
    else out.set(c, [p]);
  }
  return out;
}

/** A whole folder renamed on one side, done as one folder rename on the other (folderMoves):
 *  `moveRemoteFolder`, renamed here and moved on the server; `moveLocalFolder`, moved on the
 *  server and renamed here. */
export interface FolderMove {
  op: 'moveRemoteFolder' | 'moveLocalFolder';
  /** the folder's old and new names (no trailing '/'), neither inside the other */
  from: string;
  to: string;
  /** every file under `from` on the side it moves on: its path below the folder → the version
   *  the plan read (moveRemote's, moveLocal's) */
  files: ReadonlyMap<string, number>;
}

/** The JSON bytes one file of a folder move's request takes at most beyond twice its name's
 *  UTF-8 bytes (a '"' is escaped): quotes, colon, comma and the version. */
const MOVE_ENTRY_BYTES = 24;

type FileMove = Extract<Action, { op: 'moveRemote' | 'moveLocal' }>;

/**
 * Groups the file renames of `actions` into folder renames, on each side: where every file a
 * side has under a folder `F` moves to the same path below a folder `T`, and that side has
 * nothing at `T` (no file or folder there or under it, no file above it; `T` not inside `F` nor
 * above it), the files go as one folder move there. The server's side (plan's `moveRemote`):
 * the files the listing has, one `moveRemoteFolder` (the server's folder move, checked against
 * `files`), at most FOLDER_MOVE_FILES files and FOLDER_MOVE_BODY_BYTES of request. This device's
 * side (`moveLocal`): the files this pass sees here, `here.fold` finding names as this file
 * system does, one `moveLocalFolder` (the engine's LocalTree checks again, on disk, that the
 * folder holds just these files). The highest such folder wins; renames with edits, partial
 * moves and single files stay file moves. The same for the server's deletes: where every file
 * the listing has under a folder is deleted here, one `deleteRemoteFolder` (a checked folder
 * move into the trash). Every other action is returned as it was.
 */
export function folderMoves(actions: readonly Action[], remote: Files<RemoteFile>, here?: { files: Files<unknown>; dirs: ReadonlySet<string>; fold?: (p: string) => string }): (Action | FolderMove | FolderDelete)[] {
  const taken = new Set<Action>();
  const groups: (FolderMove | FolderDelete)[] = [];
  const side = (op: FileMove['op'], files: Files<unknown>, dirs: ReadonlySet<string> | null, fold: (p: string) => string, limited: boolean) => {
    const moves = actions.filter((a): a is FileMove => a.op === op);
    if (moves.length < 2) return;
    // the files under each folder of this side, and every name there as it is found
    const under = new Map<string, number>();
    for (const p of files.keys()) for (const d of parentsOf(p)) under.set(d, (under.get(d) ?? 0) + 1);
    const names = new Set([...files.keys(), ...under.keys(), ...(dirs ?? [])].map(fold));
    // candidate folder pairs: each common tail of a move's old and new path
    const pairs = new Map<string, { from: string; to: string; moves: FileMove[] }>();
    for (const m of moves) {
      const f = m.from.split('/');
      const t = m.to.split('/');
      for (let k = 1; k < f.length && k < t.length && f[f.length - k] === t[t.length - k]; k++) {
        const from = f.slice(0, -k).join('/');
        const to = t.slice(0, -k).join('/');
        const key = `${from}\0${to}`;
        const pair = pairs.get(key) ?? pairs.set(key, { from, to, moves: [] }).get(key)!;
        pair.moves.push(m);
      }
    }
    const depth = (p: string) => p.split('/').length;
    for (const { from, to, moves: ms } of [...pairs.values()].sort((a, b) => depth(a.from) - depth(b.from) || (a.from < b.from ? -1 : a.from > b.from ? 1 : 0))) {
      if (ms.length < 2 || ms.length !== under.get(from) || ms.some((m) => taken.has(m))) continue;
      if (fold(from) === fold(to) || to.startsWith(from + '/') || from.startsWith(to + '/')) continue;
      if (names.has(fold(to)) || parentsOf(to).some((d) => files.has(d))) continue;
      const rel = (m: FileMove) => m.from.slice(from.length + 1);
      if (limited && (ms.length > FOLDER_MOVE_FILES || ms.reduce((n, m) => n + 2 * utf8Length(rel(m)) + MOVE_ENTRY_BYTES, 4 * MAX_NAME_BYTES + 1024) > FOLDER_MOVE_BODY_BYTES)) continue;
      for (const m of ms) taken.add(m);
      groups.push({ op: op === 'moveRemote' ? 'moveRemoteFolder' : 'moveLocalFolder', from, to, files: new Map(ms.map((m) => [rel(m), m.version])) });
    }
  };
  side('moveRemote', remote, null, (p) => p, true);
  if (here) side('moveLocal', here.files, here.dirs, here.fold ?? ((p) => p), false);
  // deletes on the server of every file the listing has under a folder: one move of the
  // folder into the trash
  const dels = actions.filter((a): a is Extract<Action, { op: 'deleteRemote' }> => a.op === 'deleteRemote');
  if (dels.length >= 2) {
    const under = new Map<string, number>();
    for (const p of remote.keys()) for (const d of parentsOf(p)) under.set(d, (under.get(d) ?? 0) + 1);
    const byFolder = new Map<string, typeof dels>();
    for (const a of dels) for (const d of parentsOf(a.path)) (byFolder.get(d) ?? byFolder.set(d, []).get(d)!).push(a);
    for (const [path, ds] of [...byFolder].sort((a, b) => a[0].split('/').length - b[0].split('/').length || (a[0] < b[0] ? -1 : 1))) {
      if (ds.length < 2 || ds.length !== under.get(path) || ds.some((a) => taken.has(a))) continue;
      const rel = (a: (typeof dels)[number]) => a.path.slice(path.length + 1);
      if (ds.length > FOLDER_MOVE_FILES || ds.reduce((n, a) => n + 2 * utf8Length(rel(a)) + MOVE_ENTRY_BYTES, 4 * MAX_NAME_BYTES + 1024) > FOLDER_MOVE_BODY_BYTES) continue;
      for (const a of ds) taken.add(a);
      groups.push({ op: 'deleteRemoteFolder', path, files: new Map(ds.map((a) => [rel(a), a.version])) });
    }
  }
  if (!groups.length) return [...actions];
  return [...groups, ...actions.filter((a) => !taken.has(a))];
}

/** Every file the listing has under the server folder `path` deleted here: one move of the
 *  folder into the pass's trash folder, checked against `files` (folderMoves). */
export interface FolderDelete {
  op: 'deleteRemoteFolder';
  path: string;
  /** path below the folder → the latest version the listing showed */
  files: ReadonlyMap<string, number>;
}

/**
 * The type rows of the table, for a path that is a folder here (`dirHere`) or on the server
 * (`dirThere`); null when no file meets a folder there. The folder keeps the name:
 *
 *   file here, folder on the server:  agreed and unchanged here → delete here; else aside here
 *   file on the server, folder here:  agreed and unchanged there → delete there; else aside there
 *   file on the server and a folder there too (an older server): aside there
 */
export function decideType(path: string, l: LocalFile | undefined, s: Agreed | undefined, r: RemoteFile | undefined, dirHere: boolean, dirThere: boolean): Action | null {
  // the local file first (a server with a file and a folder at one name: the server's file
  // goes aside on the next pass)
  if (l && dirThere) return s && l.hash === s.hash ? { op: 'deleteLocal', path } : { op: 'asideLocal', path };
  if (r && (dirHere || dirThere)) {
    if (s && !l && !dirThere && r.version === s.version) return { op: 'deleteRemote', path, version: r.version };
    return { op: 'asideRemote', path, version: r.version, why: 'folder' };
  }
  return null;
}

/** One path's cell of the decision table. */
export function decide(path: string, l: LocalFile | undefined, s: Agreed | undefined, r: RemoteFile | undefined): Action | null {
  const same = () => l !== undefined && r?.root !== undefined && l.hash === r.root;
  if (!s) {
    if (l && r) return same() ? { op: 'record', path, version: r.version } : { op: 'conflict', path, version: r.version };
    if (l) return { op: 'upload', path, expect: 'absent' };
    if (r) return { op: 'download', path, version: r.version };
    return null;
  }
  const localChanged = l !== undefined && l.hash !== s.hash;
  const remoteChanged = r !== undefined && r.version !== s.version;
  if (!l && !r) return { op: 'forget', path };
  if (!l) return remoteChanged ? { op: 'download', path, version: r!.version } : { op: 'deleteRemote', path, version: r!.version };
  if (!r) return localChanged ? { op: 'upload', path, expect: 'absent' } : { op: 'deleteLocal', path };
  if (localChanged && remoteChanged) return same() ? { op: 'record', path, version: r.version } : { op: 'conflict', path, version: r.version };
  if (localChanged) return { op: 'upload', path, expect: { version: s.version } };
  if (remoteChanged) return { op: 'download', path, version: r.version };
  return null;
}

/** How many files one run may delete (both sides together) in a folder of `files` agreed files:
 *  `share` of them, but at least `min` (so that small folders work). */
export function deleteAllowance(files: number, share: number, min: number): number {
  return Math.max(min, Math.floor(files * share));
}

/** The deletes among `actions`: files, and folders (a folder removed on either side). */
export const deletesOf = (actions: readonly (Action | FolderAction)[]) => actions.filter((a) => a.op === 'deleteLocal' || a.op === 'deleteRemote' || a.op === 'rmdirLocal' || a.op === 'rmdirRemote').length;

// ---- folders ---------------------------------------------------------------------------------

/** What to do with a folder (a path without the trailing '/'). Folders that hold files follow
 *  them; these actions are for the folders that are empty on one side. */
export type FolderAction =
  | { op: 'mkdirRemote'; path: string }
  | { op: 'mkdirLocal'; path: string }
  /** removed on the server: remove here when empty */
  | { op: 'rmdirLocal'; path: string }
  /** removed here: remove on the server when nothing is under it there */
  | { op: 'rmdirRemote'; path: string }
  | { op: 'recordFolder'; path: string }
  | { op: 'forgetFolder'; path: string };

/** Every folder above `p` ('a/b/c.txt' → 'a', 'a/b'). */
export function parentsOf(p: string): string[] {
  const out: string[] = [];
  for (let k = p.indexOf('/'); k >= 0; k = p.indexOf('/', k + 1)) out.push(p.slice(0, k));
  return out;
}

/**
 * The folder actions, from the folders here and on the server now (each with the folders that
 * hold its files) and the folders agreed. Nothing is decided for a folder with a file under it
 * on either side: the files' actions make or empty it. A folder made empty on one side is made
 * on the other; one agreed and gone from one side is removed from the other (if it is still
 * empty there when the action runs).
 */
export function planFolders(local: ReadonlySet<string>, agreed: ReadonlySet<string>, remote: ReadonlySet<string>, filesHere: Files<unknown>, filesThere: Files<unknown>): FolderAction[] {
  // the folders that hold a file on either side, asked only of a folder on one side alone
  let holding: Set<string> | undefined;
  const holds = (d: string) => {
    if (!holding) {
      holding = new Set<string>();
      for (const files of [filesHere, filesThere]) for (const p of files.keys()) for (const q of parentsOf(p)) holding.add(q);
    }
    return holding.has(d);
  };
  const out: FolderAction[] = [];
  const all = [...local, ...[...agreed].filter((d) => !local.has(d)), ...[...remote].filter((d) => !local.has(d) && !agreed.has(d))];
  for (const d of all) {
    const l = local.has(d);
    const r = remote.has(d);
    const s = agreed.has(d);
    if (l && r) {
      if (!s) out.push({ op: 'recordFolder', path: d });
    } else if (!l && !r) {
      if (s) out.push({ op: 'forgetFolder', path: d });
    } else if (holds(d)) {
      continue; // its files decide
    } else if (l) {
      out.push(s ? { op: 'rmdirLocal', path: d } : { op: 'mkdirRemote', path: d });
    } else {
      out.push(s ? { op: 'rmdirRemote', path: d } : { op: 'mkdirLocal', path: d });
    }
  }
  // in the order of their paths; removals deepest first, so that each folder is empty when
  // its turn comes
  out.sort((a, b) => compare(a.path, b.path));
  const rm = out.filter((a) => a.op === 'rmdirLocal' || a.op === 'rmdirRemote').reverse();
  return [...out.filter((a) => a.op !== 'rmdirLocal' && a.op !== 'rmdirRemote'), ...rm];
}
