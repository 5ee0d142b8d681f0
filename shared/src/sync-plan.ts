/**
 * The sync engine's decision table (docs/sync.md): from the local tree now, the state (what
 * this device last agreed on with the server, per path) and the server's listing now, what to
 * do with each path. Pure: no I/O, the same in the CLI and the page's worker.
 *
 * A file's content is named by its root hash (hex) as the protocol computes it with the
 * default chunking (chunk-index.ts): the server lists it with each version, and the push and
 * pull report it, so both sides of a comparison come from one definition.
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
 */

/** A file in the local tree now; `hash` is its content's root hash (hex). */
export interface LocalFile {
  size: number;
  mtimeMs: number;
  hash: string;
}

/** A file on the server now: its latest version; `root` (hex, default chunking) where known. */
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
  /** push the local file; basisVersion 0: the server has no such file (a new name) */
  | { op: 'upload'; path: string; basisVersion: number }
  /** pull the server's `version` over the local file (its basis, when there is one) */
  | { op: 'download'; path: string; version: number }
  | { op: 'deleteLocal'; path: string }
  | { op: 'deleteRemote'; path: string; version: number }
  /** a local rename, done on the server */
  | { op: 'moveRemote'; from: string; to: string }
  /** a rename on the server, done here */
  | { op: 'moveLocal'; from: string; to: string; version: number }
  /** both changed: the server's `version` keeps the name, the local bytes go up as a conflict copy */
  | { op: 'conflict'; path: string; version: number }
  /** both hold the same content: note it as agreed */
  | { op: 'record'; path: string; version: number }
  /** gone on both sides */
  | { op: 'forget'; path: string };

export type Files<T> = ReadonlyMap<string, T>;

const sorted = <T>(m: Files<T>) => [...m.keys()].sort();

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
export function plan(local: Files<LocalFile>, state: Files<Agreed>, remote: Files<RemoteFile>): Action[] {
  const actions: Action[] = [];
  const done = new Set<string>();

  // Renames on this device: an agreed path gone here and unchanged on the server, and a new
  // local path (unknown to the state and the server) with the same content.
  const newLocal = sorted(local).filter((p) => !state.has(p) && !remote.has(p));
  for (const p of sorted(state)) {
    const s = state.get(p)!;
    if (local.has(p) || remote.get(p)?.version !== s.version) continue;
    const to = newLocal.find((q) => !done.has(q) && local.get(q)!.hash === s.hash);
    if (to === undefined) continue;
    actions.push({ op: 'moveRemote', from: p, to });
    done.add(p).add(to);
  }
  // Renames on the server: an agreed path gone there and unchanged here, and a new server path
  // (unknown to the state and here) with the same root.
  const newRemote = sorted(remote).filter((p) => !state.has(p) && !local.has(p));
  for (const p of sorted(state)) {
    const s = state.get(p)!;
    if (done.has(p) || remote.has(p) || local.get(p)?.hash !== s.hash) continue;
    const to = newRemote.find((q) => !done.has(q) && remote.get(q)!.root === s.hash);
    if (to === undefined) continue;
    actions.push({ op: 'moveLocal', from: p, to, version: remote.get(to)!.version });
    done.add(p).add(to);
  }

  const paths = new Set([...local.keys(), ...state.keys(), ...remote.keys()]);
  for (const p of [...paths].sort()) {
    if (done.has(p)) continue;
    const a = decide(p, local.get(p), state.get(p), remote.get(p));
    if (a) actions.push(a);
  }
  return actions;
}

/** One path's cell of the decision table. */
export function decide(path: string, l: LocalFile | undefined, s: Agreed | undefined, r: RemoteFile | undefined): Action | null {
  const same = () => l !== undefined && r?.root !== undefined && l.hash === r.root;
  if (!s) {
    if (l && r) return same() ? { op: 'record', path, version: r.version } : { op: 'conflict', path, version: r.version };
    if (l) return { op: 'upload', path, basisVersion: 0 };
    if (r) return { op: 'download', path, version: r.version };
    return null;
  }
  const localChanged = l !== undefined && l.hash !== s.hash;
  const remoteChanged = r !== undefined && r.version !== s.version;
  if (!l && !r) return { op: 'forget', path };
  if (!l) return remoteChanged ? { op: 'download', path, version: r!.version } : { op: 'deleteRemote', path, version: r!.version };
  if (!r) return localChanged ? { op: 'upload', path, basisVersion: 0 } : { op: 'deleteLocal', path };
  if (localChanged && remoteChanged) return same() ? { op: 'record', path, version: r.version } : { op: 'conflict', path, version: r.version };
  if (localChanged) return { op: 'upload', path, basisVersion: s.version };
  if (remoteChanged) return { op: 'download', path, version: r.version };
  return null;
}

/** How many files one run may delete (both sides together) in a folder of `files` agreed files:
 *  `share` of them, but at least `min` (so that small folders work). */
export function deleteAllowance(files: number, share: number, min: number): number {
  return Math.max(min, Math.floor(files * share));
}

/** The deletes among `actions`. */
export const deletesOf = (actions: Action[]) => actions.filter((a) => a.op === 'deleteLocal' || a.op === 'deleteRemote').length;

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
  const parts = p.split('/');
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

/**
 * The folder actions, from the folders here and on the server now (each with the folders that
 * hold its files) and the folders agreed. Nothing is decided for a folder with a file under it
 * on either side: the files' actions make or empty it. A folder made empty on one side is made
 * on the other; one agreed and gone from one side is removed from the other (if it is still
 * empty there when the action runs).
 */
export function planFolders(local: ReadonlySet<string>, agreed: ReadonlySet<string>, remote: ReadonlySet<string>, filesHere: Files<unknown>, filesThere: Files<unknown>): FolderAction[] {
  const holding = new Set<string>();
  for (const p of [...filesHere.keys(), ...filesThere.keys()]) for (const d of parentsOf(p)) holding.add(d);
  const out: FolderAction[] = [];
  const all = [...new Set([...local, ...agreed, ...remote])].sort();
  for (const d of all) {
    const l = local.has(d);
    const r = remote.has(d);
    const s = agreed.has(d);
    if (l && r) {
      if (!s) out.push({ op: 'recordFolder', path: d });
    } else if (!l && !r) {
      if (s) out.push({ op: 'forgetFolder', path: d });
    } else if (holding.has(d)) {
      continue; // its files decide
    } else if (l) {
      out.push(s ? { op: 'rmdirLocal', path: d } : { op: 'mkdirRemote', path: d });
    } else {
      out.push(s ? { op: 'rmdirRemote', path: d } : { op: 'mkdirLocal', path: d });
    }
  }
  // removals deepest first, so that each folder is empty when its turn comes
  const rm = out.filter((a) => a.op === 'rmdirLocal' || a.op === 'rmdirRemote').reverse();
  return [...out.filter((a) => a.op !== 'rmdirLocal' && a.op !== 'rmdirRemote'), ...rm];
}
