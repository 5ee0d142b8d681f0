/**
 * The sync engine (docs/sync.md): one pass reads the local tree, the state and the server's
 * listing, plans with sync/plan.ts, checks the delete guard and carries the plan out (moves
 * aside and deletes, then moves, then uploads and downloads a few at a time, then the rest);
 * `syncUntilStill` runs passes until one finds nothing to do. All I/O is behind
 * `LocalTree` and `RemoteFolder`, which the CLI implements with node:fs and the delta push and
 * pull (cli/node-tree.ts, cli/http-folder.ts) and the page's worker with the File System Access API
 * (client/src/folder-sync.ts), so the engine is the same wherever it runs.
 *
 * Nothing is lost: every change on the server names what it expects there (`Expect`: a
 * version, or no file) and is refused when the server moved on (the next pass decides again);
 * a download, a local delete and a conflict rename first check the local file against the hash
 * the plan read (`verifyLocal`: size and mtime are not enough, `cp -p` keeps both), and a
 * mismatch is a local change for the next pass; a delete on the server moves the file into the
 * pass's trash folder with its history; a conflict keeps both.
 */
import { allLimited } from '../base/limited.ts';
import { conflictName } from './conflict.ts';
import { RemoteError } from '../transport/conn.ts';
import { BULK_ENTRIES, BULK_FILE_MAX, BULK_IN_FLIGHT, BULK_REQUEST_BYTES, SYNC_REFUSALS, SYNC_ROOT_LOOKUPS, SYNC_TRANSFERS } from '../base/limits.ts';
import { ErrorCode } from '../wire/protocol.ts';
import { type Action, type Agreed, type Expect, type FolderAction, type FolderDelete, type FolderMove, type LocalFile, type RemoteFile, deleteAllowance, deletesOf, folderMoves, parentsOf, plan, planFolders, rootsWanted } from './plan.ts';

/** The ignore file in a synced folder (gitignore syntax): this device's own, never synced. */
export const IGNORE_FILE = '.dsyncignore';

/** An entry the engine leaves alone this pass. `hold`: what the server has there must not be
 *  read as deleted here (a file or folder, ending in '/', that could not be read). */
export interface Skipped {
  path: string;
  reason: string;
  hold?: boolean;
  /** (set by the pass) a held entry that keeps the sides from agreeing: it could not be read,
   *  or the server or the last agreement has something at its path */
  blocks?: boolean;
}

export interface Stat {
  size: number;
  mtimeMs: number;
  /** when the content this stat goes with began to be read (ms since the epoch, the stat made
   *  just before the read); absent: the stat's own moment (`agreedEntry` then takes now) */
  readAt?: number;
  /** `readAt` is on the file system's own clock (a moment no later than the read's start, as
   *  the mtime of a file the tree made then on the same device shows it), not this process's */
  fsClock?: boolean;
}

/** The synced folder on this device. Paths are relative, '/'-separated, NFC. */
export interface LocalTree {
  /** every regular file not ignored, with its size and mtime; what was skipped, and why;
   *  `hidden`: how many files and folders the folder's own ignore rules hide (not the defaults) */
  scan(): Promise<{ files: Map<string, Stat>; dirs: Set<string>; skipped: Skipped[]; hidden?: number }>;
  /** `scan` of the entries directly in `folders` ('' the top) only: their files, and their
   *  subfolders as `dirs` (not walked); null when it cannot tell them as a whole scan would
   *  (the pass then scans the whole folder). Optional: without it every pass scans it whole */
  scanFolders?(folders: readonly string[]): Promise<{ files: Map<string, Stat>; dirs: Set<string>; skipped: Skipped[] } | null>;
  /** the content's root hash (hex), with the size and mtime the file had when it was opened */
  hash(path: string): Promise<{ hash: string } & Stat>;
  /** null when there is no file */
  stat(path: string): Promise<Stat | null>;
  /** renames (making parent folders; a case-only rename works on case-insensitive systems);
   *  `prune`: then removes the folders this leaves empty */
  rename(from: string, to: string, prune: boolean): Promise<void>;
  /** renames the folder `from` to `to` (making the parents of `to`) when `to` does not exist
   *  and `from` holds just `files` (paths below it: regular files, and folders holding them)
   *  and nothing else (no other file, ignored or not, no link, no empty folder); false, having
   *  done nothing, otherwise. `prune`: then removes the folders this leaves empty. Optional:
   *  without it a folder moved on the server is renamed here file by file */
  renameFolder?(from: string, to: string, files: ReadonlySet<string>, prune: boolean): Promise<boolean>;
  /** removes a file; `prune`: then the folders this leaves empty */
  remove(path: string, prune: boolean): Promise<void>;
  mkdir(path: string): Promise<void>;
  /** removes a folder if it is empty; false if it is not */
  rmdir(path: string): Promise<boolean>;
  /** the key under which this file system finds a name (lower case where it ignores case);
   *  without it, the engine takes the file system to ignore case (macOS and Windows do) */
  fold?(path: string): string;
}

/** What the plan read of a local file: a download, a delete or a rename aside goes ahead only
 *  while the file still has this stat and this content (null: no file). */
export interface Expected extends Stat {
  hash: string;
}

/** The synced folder on the server. Paths are relative to it. */
export interface RemoteFolder {
  /** the files, and the folders (null: this server does not keep empty folders); `skipped`:
   *  listed names that may not become paths here (sync/remote.ts listedNameFits); `changed`:
   *  the folders ('' the top) whose entries may differ from the last listing's (those gone
   *  included), when the listing is known to differ from it nowhere else (absent: anywhere) */
  list(): Promise<{ files: Map<string, RemoteFile>; folders: Set<string> | null; skipped?: Skipped[]; changed?: ReadonlySet<string> }>;
  /** the root (hex, default chunking) of `version`, or undefined when another chunking made it */
  root(path: string, version: number): Promise<string | undefined>;
  /** the live version numbers of `path` */
  versions(path: string): Promise<number[]>;
  /** pushes the local file over `expect` (a version, or no file at the name); RemoteError
   *  StaleBasis when the server holds something else */
  push(path: string, expect: Expect): Promise<{ version: number; root: string } & Stat>;
  /** pulls `version` into the local `path` (with `basis`, a local file, as basis), replacing
   *  it only while `verifyLocal(expect)` holds (null: no file); LocalChanged otherwise */
  pull(path: string, version: number, expect: Expected | null, basis?: string): Promise<{ version: number; root: string } & Stat>;
  /** uploads of small files (at most BULK_FILE_MAX bytes each) in bulk requests: each one's
   *  outcome, as `push` gives or throws it; absent: each file is pushed on its own */
  pushMany?(items: { path: string; expect: Expect }[]): Promise<Settled<{ version: number; root: string } & Stat>[]>;
  /** downloads of small files in bulk requests, each replacing the local file as `pull` does
   *  (only while `verifyLocal(expect)` holds); absent: each file is pulled on its own */
  pullMany?(items: { path: string; version: number; expect: Expected | null }[]): Promise<Settled<{ version: number; root: string } & Stat>[]>;
  /** a server-side rename while `from`'s latest is `expect`; `to`'s latest then (its root where
   *  the default chunking made it); RemoteChanged when the server holds another version */
  move(from: string, to: string, expect: { version: number }): Promise<{ version: number; root?: string }>;
  /** the server's folder move of `from` to `to` (folder paths, no trailing '/') while the server
   *  holds exactly `versions` under `from` (path below it → latest) and nothing at `to`: the
   *  numbers the latest versions got at `to` (those the answer gave). RemoteChanged when
   *  refused (nothing moved, or some files before a file's own check refused) */
  moveFolder(from: string, to: string, versions: ReadonlyMap<string, number>): Promise<Map<string, number>>;
  /** deletes the folder `path` there while the server holds exactly `versions` under it (path
   *  below it → latest), keeping every file's versions under the trash folder
   *  `.dsync-trash/STAMP/`; where it went (ending in '/'; '' where the server keeps the
   *  versions of what it deletes itself: a vault's history). RemoteChanged when refused */
  trashFolder(path: string, versions: ReadonlyMap<string, number>, trashStamp: string): Promise<string>;
  /** deletes `path` there while its latest is `expect`, keeping its versions under the trash
   *  folder `.dsync-trash/STAMP/` (one stamp per pass); where it went ('' as `trashFolder`);
   *  RemoteChanged when the server holds another version */
  remove(path: string, expect: { version: number }, trashStamp: string): Promise<string>;
  /** makes an empty folder; false when the server keeps no empty folders */
  makeFolder(path: string): Promise<boolean>;
  /** removes a folder with nothing under it; false when something is */
  removeFolder(path: string): Promise<boolean>;
}

/** An upload or a download of the plan. */
type Transfer = Extract<Action, { op: 'upload' | 'download' }>;

/** One outcome of many: what the call gave, or what it threw. */
export type Settled<T> = { ok: T } | { error: unknown };

/** The agreed state of one synced folder, kept by the caller (cli/sync-state.ts). */
export interface SyncState {
  files: Map<string, Agreed>;
  /** the folders agreed (empty or not) */
  folders: Set<string>;
  save(): Promise<void>;
}

/** A download, delete or rename found the local file changed since it was read. */
export class LocalChanged extends Error {}

/** A change on the server found another version there than the one it expected. */
export class RemoteChanged extends Error {}

/**
 * Throws LocalChanged unless the local `path` is still what the plan read: no file for null,
 * else the same size and mtime and the same content hash. The hash is read again because size
 * and mtime say too little (`cp -p`, a restore, an editor that keeps the time): this check
 * stands before every action that would destroy local bytes.
 */
export async function verifyLocal(tree: Pick<LocalTree, 'stat' | 'hash'>, path: string, expect: Expected | null): Promise<void> {
  const st = await tree.stat(path);
  if (!sameStat(st, expect)) throw new LocalChanged(`${path} changed here`);
  if (expect && (await tree.hash(path)).hash !== expect.hash) throw new LocalChanged(`${path} changed here (same size and time, other content)`);
}

/** The trash folder's stamp for deletes at `when` (local time): `YYYY-MM-DD HHMMSS`. */
export function trashStamp(when: Date): string {
  const q = (n: number) => String(n).padStart(2, '0');
  return `${when.getFullYear()}-${q(when.getMonth() + 1)}-${q(when.getDate())} ${q(when.getHours())}${q(when.getMinutes())}${q(when.getSeconds())}`;
}

/** The key of a name on a file system that ignores case and Unicode form. */
export const foldCase = (p: string) => p.normalize('NFC').toLowerCase();

export interface EngineOptions {
  /** this device's name, in conflict copies' names */
  device: string;
  /** the delete guard: a pass may delete this share of the agreed files… */
  maxDeleteShare: number;
  /** …or this many, whichever is more */
  maxDeleteMin: number;
  /** paths the engine leaves alone on both sides (ignore rules) */
  ignored?: (path: string, isDir?: boolean) => boolean;
  now?: () => Date;
  /** each action as it is done */
  onAction?: (done: Done) => void;
  signal?: AbortSignal;
  /** uploads and downloads at once (default SYNC_TRANSFERS) */
  transfers?: number;
  /** a file this pass wrote here (a download), with its stat right after: `--watch` takes the
   *  watcher's event of that write for its own, not for a change */
  wrote?: (path: string, st: Stat) => void;
  /** the folders ('' the top) a pass looks at (`--watch`: those the watcher named): the pass
   *  scans only the entries directly in them and in the folders the server's listing says
   *  changed (`RemoteFolder.list` `changed`), and decides only on the files directly in those,
   *  with every check of a whole pass. A pass looks at the whole folder instead when the
   *  listing does not say what changed, or `LocalTree.scanFolders` is absent, and does it over
   *  whole when the delete guard would stop it (the guard judges whole passes only). Absent:
   *  the whole folder */
  scope?: ReadonlySet<string>;
  /** every change made while a pass runs starts another (`--watch`: the watcher and the live
   *  events): a pass whose actions were all uploads and downloads that landed is not followed
   *  by one that would only find them done */
  watched?: boolean;
}

/** One action carried out, or failed. */
export type Done = (Action | FolderAction) & { error?: string; conflictCopy?: string; trash?: string; retry?: boolean };

export interface PassReport {
  done: Done[];
  /** local files read to hash them (size or mtime not the agreed ones) */
  hashed: number;
  skipped: Skipped[];
  /** local files and folders the folder's own ignore rules hide */
  hidden: number;
  /** local files the pass looked at (all of them, unless it had a `scope`) */
  looked: number;
  /** the delete guard stopped the pass before it did anything. `deletes` counts files and
   *  folders, `allowed` is of the agreed `files` and `folders`; `errors`: entries this pass
   *  could not read on either side (deletes may then come from what was not seen, and a higher
   *  limit is no answer) */
  guard?: { deletes: number; allowed: number; files: number; folders: number; errors: number };
}

/**
 * A file whose mtime is this close to the moment its content began to be read may change again
 * within the same mtime tick (a coarse clock, FAT's 2 s) after the read, without its size or
 * mtime showing it: its recorded mtime is left unknown (-1), so the next pass reads it again
 * ("racy clean", as git treats its index). The moment is the read's start, not the record's: a
 * push that takes longer than the tick would otherwise make a write during it look settled.
 * Where the moment is on the file system's own clock (`Stat.fsClock`), the tick is the file
 * system's, whatever it is: racy is an mtime at or after that moment, as git compares with its
 * index file's mtime, so a file saved just before a pass is read once, not again by the next.
 */
export const RACY_MS = 2000;

/** The agreed entry for content read with stat `st` (from `st.readAt`, else now). */
export function agreedEntry(version: number, hash: string, st: Stat): Agreed {
  const racy = st.fsClock && st.readAt !== undefined ? st.mtimeMs >= st.readAt : (st.readAt ?? Date.now()) - st.mtimeMs < RACY_MS;
  return { version, hash, size: st.size, mtimeMs: racy ? -1 : st.mtimeMs };
}

/** The ops of file actions (sync/plan.ts Action). */
const ACTS: Record<Action['op'], true> = { upload: true, download: true, deleteLocal: true, deleteRemote: true, moveRemote: true, moveLocal: true, conflict: true, record: true, forget: true, asideLocal: true, asideRemote: true };

const isFileAction = (a: Action | FolderAction): a is Action => a.op in ACTS;

/** The path an action is about (a move: where it starts). */
const pathOf = (a: Action | FolderAction) => ('path' in a ? a.path : a.from);

/** The kinds of file actions, by when a pass carries them out (`carryOut`). */
const transfer = (a: Action) => a.op === 'upload' || a.op === 'download';
const aside = (a: Action) => a.op === 'asideLocal' || a.op === 'asideRemote';
const del = (a: Action) => a.op === 'deleteLocal' || a.op === 'deleteRemote';
const move = (a: Action) => a.op === 'moveRemote' || a.op === 'moveLocal';
const first = (a: Action) => aside(a) || del(a) || move(a);

/** Whether two looks at a file saw it unchanged (size and modification time). */
export const sameStat = (a: Stat | null, b: Stat | null) => (a === null ? b === null : b !== null && a.size === b.size && a.mtimeMs === b.mtimeMs);

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** The uploads the server refused in a row, per state (one state lives through a --watch): by
 *  path, expectation and content, so that a change on either side starts the count again. */
const refusals = new WeakMap<SyncState, Map<string, { n: number; why: string }>>();

/**
 * One pass, in its steps: read both sides (`readSides`), plan (`planPass`), check the delete
 * guard (`deleteGuard`: a pass that would delete too much does nothing), then carry the plan
 * out (`carryOut`: moves aside and deletes first, then moves, then transfers, then the rest;
 * the state is recorded as actions finish and at the end).
 */
export async function syncPass(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions): Promise<PassReport> {
  const sides = await readSides(local, remote, state, opts);
  const planned = planPass(local, state, sides, opts);
  const read = { hashed: sides.hashed, skipped: sides.skipped, hidden: sides.hidden, looked: sides.looked };
  const guard = deleteGuard(sides, planned, opts);
  // the guard judges a whole pass: a pass that looked at some folders only does it over whole
  if (guard && sides.scoped) return syncPass(local, remote, state, { ...opts, scope: undefined });
  if (guard) return { done: [], ...read, guard };
  return { done: await carryOut(local, remote, state, opts, sides, planned), ...read };
}

/** What a pass read of both sides. */
interface Sides {
  /** the local files the pass decides on (none held, none ignored), with their root hashes */
  localFiles: Map<string, LocalFile & { stat: Stat }>;
  /** the server's files the pass decides on, with their roots where the plan needs them */
  remoteFiles: Map<string, RemoteFile>;
  /** the agreed files the pass decides on */
  agreed: Map<string, Agreed>;
  /** the local folders, and the server's (null: it keeps no empty folders) */
  dirs: Set<string>;
  remoteFolders: Set<string> | null;
  /** folders (ending in '/') left out of this pass entirely */
  heldFolders: string[];
  skipped: Skipped[];
  /** local files read to hash them */
  hashed: number;
  /** the server's roots that could not be read */
  unreadable: number;
  /** local files and folders the folder's own ignore rules hide */
  hidden: number;
  /** local files scanned */
  looked: number;
  /** only the files directly in some folders were looked at (`EngineOptions.scope`) */
  scoped: boolean;
}

/** Reads both sides: the local scan and the server's listing side by side; the hash of each
 *  local file whose size or mtime differ from its agreed entry; the server's roots where the
 *  plan needs them. Paths that could not be read are held out of the pass (never read as
 *  deleted). */
async function readSides(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions): Promise<Sides> {
  const ignored = opts.ignored ?? (() => false);
  const want = opts.scope && local.scanFolders ? opts.scope : undefined;
  const [first, listed] = await Promise.all([want ? local.scanFolders!([...want]) : local.scan(), remote.list()]);
  // a pass with a scope looks at its folders and at those the listing says changed; where the
  // listing does not say, or the tree cannot tell those folders alone, at the whole folder
  let scan: { files: Map<string, Stat>; dirs: Set<string>; skipped: Skipped[]; hidden?: number } | null = first;
  let scope: Set<string> | undefined;
  if (want && scan && listed.changed) {
    scope = new Set(want);
    const more = [...listed.changed].filter((f) => !scope!.has(f));
    const extra = more.length ? await local.scanFolders!(more) : { files: new Map(), dirs: new Set<string>(), skipped: [] };
    if (!extra) scope = undefined;
    else {
      for (const [p, st] of extra.files) scan.files.set(p, st);
      for (const d of extra.dirs) scan.dirs.add(d);
      scan.skipped.push(...extra.skipped);
      for (const f of more) scope.add(f);
    }
  }
  if (!scan || (want && !scope)) scan = await local.scan();
  /** the paths the pass decides on: those directly in a folder of its scope (all without one) */
  const inScope = (p: string) => !scope || scope.has(p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '');
  const listing = scope ? new Map([...listed.files].filter(([p]) => inScope(p))) : listed.files;
  const stateFiles = scope ? new Map([...state.files].filter(([p]) => inScope(p))) : state.files;
  const remoteFolders = listed.folders;
  const unlisted = (listed.skipped ?? []).filter((s) => inScope(s.path.replace(/\/$/, '')));
  const skipped = [...scan.skipped, ...unlisted];
  // paths left out of this pass entirely (unreadable here): never read as deleted
  const held = new Set<string>();
  const heldFolders = skipped.filter((s) => s.hold && s.path.endsWith('/')).map((s) => s.path);
  for (const s of skipped) if (s.hold && !s.path.endsWith('/')) held.add(s.path);
  if (heldFolders.length) for (const p of [...listing.keys(), ...stateFiles.keys()]) if (heldFolders.some((f) => p.startsWith(f))) held.add(p);
  // a link or special file with nothing at its path on either side is only noted; one where the
  // server or the last agreement has something (or that could not be read, or that the server
  // holds) keeps the sides from agreeing
  let known: string[] | undefined;
  for (const s of skipped) {
    if (!s.hold) continue;
    known ??= [...listing.keys(), ...stateFiles.keys(), ...(remoteFolders ?? []), ...state.folders];
    const there = s.path.endsWith('/') ? known.some((q) => (q + '/').startsWith(s.path)) : known.includes(s.path);
    if (there || unlisted.includes(s) || s.reason.startsWith('cannot read')) s.blocks = true;
  }

  const localFiles = new Map<string, LocalFile & { stat: Stat }>();
  let hashed = 0;
  let unreadable = 0;
  for (const [p, st] of scan.files) {
    if (ignored(p)) continue;
    const s = stateFiles.get(p);
    if (s && s.size === st.size && s.mtimeMs === st.mtimeMs) {
      localFiles.set(p, { ...st, hash: s.hash, stat: st });
      continue;
    }
    try {
      hashed++;
      const h = await local.hash(p);
      localFiles.set(p, { size: h.size, mtimeMs: h.mtimeMs, hash: h.hash, stat: { size: h.size, mtimeMs: h.mtimeMs, readAt: h.readAt, fsClock: h.fsClock } });
      // the same content with a new mtime: not re-read next time
      if (s && s.hash === h.hash) state.files.set(p, agreedEntry(s.version, s.hash, h));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue; // gone since the scan: deleted
      held.add(p);
      skipped.push({ path: p, reason: `cannot read: ${message(e)}`, hold: true, blocks: true });
    }
  }
  // files synced before that the ignore rules hide now: said, never taken for deletes
  const hidden = [...stateFiles.keys()].filter((p) => p !== IGNORE_FILE && ignored(p) && !held.has(p)).sort();
  if (hidden.length) skipped.push({ path: hidden[0] + (hidden.length > 1 ? ` and ${hidden.length - 1} more` : ''), reason: `synced before, hidden now by the ignore rules: changes to ${hidden.length > 1 ? 'them' : 'it'} no longer sync either way` });
  const remoteFiles = new Map([...listing].filter(([p]) => !ignored(p)));
  for (const p of held) {
    localFiles.delete(p);
    remoteFiles.delete(p);
  }
  const agreed = new Map([...stateFiles].filter(([p]) => !held.has(p) && !ignored(p)));
  // each root is a request of its own (a folder renamed on the server asks one per file): a
  // few at once, not one after another
  const wanted = rootsWanted(localFiles, agreed, remoteFiles);
  const roots = await allLimited(wanted, SYNC_ROOT_LOOKUPS, async (p) => {
    try {
      return { root: await remote.root(p, remoteFiles.get(p)!.version) };
    } catch {
      return null;
    }
  });
  wanted.forEach((p, k) => {
    const r = roots[k];
    // unknown root: treated as different content (a conflict copy rather than a loss)
    if (r === null) unreadable++;
    else remoteFiles.set(p, { ...remoteFiles.get(p)!, root: r.root });
  });

  return { localFiles, remoteFiles, agreed, dirs: scan.dirs, remoteFolders, heldFolders, skipped, hashed, unreadable, hidden: scan.hidden ?? 0, looked: scan.files.size, scoped: !!scope };
}

/** What a pass means to do (`planPass`). */
interface Planned {
  /** the file actions (sync/plan.ts plan) */
  actions: Action[];
  /** the empty folders' actions (planFolders), where the server keeps folders */
  folderActions: FolderAction[];
  /** the file actions with the renames and deletes of whole folders grouped (folderMoves) */
  grouped: (Action | FolderMove | FolderDelete)[];
  /** the file actions a group carries out */
  inFolderMove: Set<Action>;
  /** the agreed folders the pass decides on */
  agreedFolders: Set<string>;
  /** folders here follow their files (the server keeps no folders): one left empty by a
   *  delete or move from the server goes too */
  prune: boolean;
  /** the key under which the local file system finds a name */
  fold: (p: string) => string;
}

/** Plans the pass from what it read (sync/plan.ts: the decision table). */
function planPass(local: LocalTree, state: SyncState, sides: Sides, opts: EngineOptions): Planned {
  const ignored = opts.ignored ?? (() => false);
  const { localFiles, remoteFiles, agreed, remoteFolders, heldFolders } = sides;
  const inHeld = (d: string) => heldFolders.some((f) => (d + '/').startsWith(f));
  const dirsHere = new Set([...sides.dirs].filter((d) => !inHeld(d) && !ignored(d, true)));
  const dirsThere = remoteFolders && new Set([...remoteFolders].filter((d) => !inHeld(d) && !ignored(d, true)));
  const agreedFolders = new Set([...state.folders].filter((d) => !inHeld(d) && !ignored(d, true)));
  const fold = local.fold ? (p: string) => local.fold!(p) : foldCase;
  const actions = plan(localFiles, agreed, remoteFiles, { dirsHere, dirsThere, fold });

  // Where the server keeps folders, the folder plan makes and removes empty ones (none under a
  // folder that could not be read); elsewhere folders here follow their files: one left empty
  // by a delete or move from the server goes too.
  const prune = remoteFolders === null;
  // a pass that looked at some folders only (`EngineOptions.scope`) leaves folders, and the
  // renames and deletes of whole folders, to the whole passes: it does not see them whole
  const folderActions = dirsThere && !sides.scoped ? planFolders(dirsHere, agreedFolders, dirsThere, localFiles, remoteFiles) : [];

  // the renames of whole folders here: one folder move each on the server
  const grouped = sides.scoped ? actions : folderMoves(actions, remoteFiles, local.renameFolder ? { files: localFiles, dirs: dirsHere, fold } : undefined);
  const kept = new Set<Action | FolderMove | FolderDelete>(grouped);
  const inFolderMove = new Set<Action>(actions.filter((a) => !kept.has(a)));
  return { actions, folderActions, grouped, inFolderMove, agreedFolders, prune, fold };
}

/** The delete guard: what stops a pass that would delete more than `maxDeleteShare` of the
 *  agreed files and folders (or `maxDeleteMin`, whichever is more); undefined when it may go. */
function deleteGuard(sides: Sides, planned: Planned, opts: EngineOptions): PassReport['guard'] | undefined {
  const { agreed, skipped, unreadable } = sides;
  const { agreedFolders } = planned;
  const deletes = deletesOf([...planned.actions, ...planned.folderActions]);
  const allowed = deleteAllowance(agreed.size + agreedFolders.size, opts.maxDeleteShare, opts.maxDeleteMin);
  const errors = skipped.filter((s) => s.hold || s.reason.startsWith('cannot read')).length + unreadable;
  if (deletes > allowed) return { deletes, allowed, files: agreed.size, folders: agreedFolders.size, errors };
}

/** Carries the plan out and records each finished action in the state; what was done. */
async function carryOut(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions, sides: Sides, planned: Planned): Promise<Done[]> {
  const now = opts.now ?? (() => new Date());
  const { localFiles, remoteFiles } = sides;
  const { actions, folderActions, grouped, inFolderMove, prune, fold } = planned;
  const done: Done[] = [];
  // names taken for conflict copies: on either side, as this file system finds names
  const takenKeys = new Set([...localFiles.keys(), ...remoteFiles.keys(), ...state.files.keys()].map(fold));
  const taken = (c: string) => takenKeys.has(fold(c));
  const copyName = (p: string) => {
    const c = conflictName(p, opts.device, now(), taken);
    takenKeys.add(fold(c));
    return c;
  };
  // every delete of this pass on the server goes under one trash folder
  const stamp = trashStamp(now());
  const refused = refusals.get(state) ?? new Map<string, { n: number; why: string }>();
  refusals.set(state, refused);
  /** paths whose clearing (a move aside or a delete before a folder comes) did not happen: no
   *  transfer goes under them this pass */
  const blocked: string[] = [];
  let saved = Date.now();
  let saving: Promise<void> | null = null;
  /** `got`: the outcome of the action's transfer, made in bulk (`bulkTransfers`) */
  /** an upload's key among the refusals: the same file, expectation and content */
  const uploadKey = (a: Action & { op: 'upload' }) => `${a.path}\0${JSON.stringify(a.expect)}\0${localFiles.get(a.path)?.hash}`;
  const one = async (a: Action | FolderAction, got?: Settled<{ version: number; root: string } & Stat>) => {
    if (opts.signal?.aborted) return;
    const d: Done = { ...a };
    const p = pathOf(a);
    const refusalKey = a.op === 'upload' ? uploadKey(a) : '';
    const before = refused.get(refusalKey);
    try {
      if (blocked.some((b) => p.startsWith(b + '/') || ('to' in a && a.to.startsWith(b + '/')))) d.retry = true; // its folder is not clear yet
      else if (before && before.n >= SYNC_REFUSALS) d.error = before.why;
      else {
        if (isFileAction(a)) await act(a, d, got);
        else if (!(await actFolder(a))) return;
        if (refusalKey) refused.delete(refusalKey);
      }
    } catch (e) {
      if (e instanceof RemoteError && e.code === ErrorCode.StaleBasis) {
        // the next pass sees the new version; an upload refused again and again against the
        // same listing means the listing lacks what the server holds: said, and not sent again
        d.retry = true;
        if (refusalKey) {
          const n = (before?.n ?? 0) + 1;
          const expect = a.op === 'upload' && a.expect !== 'absent' ? `its version ${a.expect.version}` : 'no file there';
          const why = `the server refused this upload ${n} times (${message(e)}) while its listing shows ${expect}: the server's listing is missing what it holds. Not sent again until either side changes; \`dsync check\` names the file, and the server's gc repairs its listing`;
          refused.set(refusalKey, { n, why });
          if (n >= SYNC_REFUSALS) (d.retry = false), (d.error = why);
        }
      }
      // the file changed while it was read (the server found the bytes not matching their
      // list and stored nothing): the next pass reads it again
      else if (e instanceof RemoteError && e.code === ErrorCode.VerifyFailed && (a.op === 'upload' || a.op === 'conflict' || a.op === 'asideLocal')) d.retry = true;
      else if (e instanceof LocalChanged) {
        // the next pass reads the file again, whatever its size and mtime say
        d.retry = true;
        const s = state.files.get(p);
        if (s) state.files.set(p, { ...s, mtimeMs: -1 });
      } else if (e instanceof RemoteChanged) d.retry = true;
      else d.error = message(e);
    }
    if ((d.retry || d.error) && (a.op === 'asideLocal' || a.op === 'asideRemote' || a.op === 'deleteLocal' || a.op === 'deleteRemote')) blocked.push(p);
    await report(d);
  };
  /** notes an action done (or failed), saving the state at most about once a second */
  const report = async (d: Done) => {
    done.push(d);
    opts.onAction?.(d);
    if (!saving && Date.now() - saved > 1000) {
      saving = state.save().finally(() => ((saving = null), (saved = Date.now())));
      await saving;
    }
  };
  /** Every file under a server folder deleted here: one checked move of the folder into the
   *  trash (reported file by file, as `deleteRemote`s). Refused (a file under it changed or
   *  came since the listing, one this pass does not see, or that place in the trash taken),
   *  its files are deleted one by one as any delete, each checked on its own: a changed file
   *  stays (modify beats delete). */
  const trashFolder = async (g: FolderDelete) => {
    if (opts.signal?.aborted) return;
    const dels = [...g.files].map(([rel, version]) => ({ rel, a: { op: 'deleteRemote' as const, path: `${g.path}/${rel}`, version } }));
    let where: string;
    try {
      where = await remote.trashFolder(g.path, g.files, stamp);
    } catch (e) {
      if (e instanceof RemoteChanged) {
        for (const { a } of dels) await one(a);
        return;
      }
      for (const { a } of dels) {
        blocked.push(a.path);
        await report({ ...a, error: message(e) });
      }
      return;
    }
    for (const { rel, a } of dels) {
      state.files.delete(a.path);
      await report({ ...a, ...(where && { trash: where + rel }) });
    }
  };
  /** A folder renamed here, as one folder move on the server (reported file by file, as
   *  `moveRemote`s). Refused (the folder changed there since the listing, or its new name is
   *  taken), its files move one by one, each checked against its own version, as if it had
   *  never been grouped: the server's check is of the whole folder, so a file under it that
   *  this pass does not see (ignored, held) refuses it every time. */
  const moveFolder = async (g: FolderMove) => {
    if (opts.signal?.aborted) return;
    const moves = [...g.files].map(([rel, version]) => ({ rel, a: { op: 'moveRemote' as const, from: `${g.from}/${rel}`, to: `${g.to}/${rel}`, version } }));
    if (moves.some(({ a }) => blocked.some((b) => a.from.startsWith(b + '/') || a.to.startsWith(b + '/')))) {
      for (const m of moves) await one(m.a);
      return;
    }
    let got: Map<string, number>;
    try {
      got = await remote.moveFolder(g.from, g.to, g.files);
    } catch (e) {
      if (!(e instanceof RemoteChanged)) {
        for (const m of moves) await report({ ...m.a, error: message(e) });
        return;
      }
      for (const m of moves) await one(m.a);
      return;
    }
    for (const { rel, a } of moves) {
      const d: Done = { ...a };
      // the server moved the version this device agreed on (its check): that version, under
      // the number it got at the new name, is the local content
      const l = localFiles.get(a.to)!;
      const v = got.get(rel);
      state.files.delete(a.from);
      if (v !== undefined) state.files.set(a.to, agreedEntry(v, l.hash, l.stat));
      else d.retry = true;
      await report(d);
    }
  };
  // the order: the moves aside and the deletes first (a file out of a folder's way), then the
  // moves, then the uploads and downloads (each its own path) several at a time, then the rest
  // one by one (conflicts name their copies from what is taken); the state is saved last
  await clearTheWay();
  await moves();
  await transfers();
  await theRest();
  await saving;
  await state.save();
  return done;

  /** The moves aside, the folders deleted on the server as one, then the other deletes. */
  async function clearTheWay() {
    for (const a of actions.filter(aside)) await one(a);
    for (const a of grouped) if (a.op === 'deleteRemoteFolder') await trashFolder(a);
    for (const a of actions.filter((x) => del(x) && !inFolderMove.has(x))) await one(a);
  }

  /** The folders renamed as one (on the server, then here), then the other renames. */
  async function moves() {
    for (const a of grouped) if (a.op === 'moveRemoteFolder') await moveFolder(a);
    for (const a of grouped) if (a.op === 'moveLocalFolder') await renameFolder(a);
    for (const a of actions.filter((x) => move(x) && !inFolderMove.has(x))) await one(a);
  }

  /** The conflicts, records and forgets, then the folder actions, one by one. */
  async function theRest() {
    for (const a of [...actions.filter((x) => !first(x) && !transfer(x)), ...folderActions]) await one(a);
  }

  /** The uploads and downloads: small files in bulk requests (BULK_IN_FLIGHT at once), the rest
   *  in delta sessions beside them, `opts.transfers` (SYNC_TRANSFERS) at a time. */
  async function transfers() {
    const bulk = bulkBatches(actions.filter((a): a is Transfer => transfer(a)));
    const queue = actions.filter((a) => transfer(a) && !bulk.has(a));
    await Promise.all([
      ...Array.from({ length: Math.min(opts.transfers ?? SYNC_TRANSFERS, queue.length) }, async () => {
        for (let a; (a = queue.shift()); ) await one(a);
      }),
      ...Array.from({ length: Math.min(BULK_IN_FLIGHT, bulk.batches.length) }, async () => {
        for (let b; (b = bulk.batches.shift()); ) await bulkTransfers(b);
      }),
    ]);
  }

  /** A folder moved on the server, renamed here as one folder (reported file by file, as
   *  `moveLocal`s): each file is first verified as the plan read it (a file changed here
   *  since is a local change: then, as when the folder holds anything else, its files are
   *  renamed one by one as any rename, each verified on its own). */
  async function renameFolder(g: FolderMove) {
    if (opts.signal?.aborted) return;
    const moves = [...g.files].map(([rel, version]) => ({ rel, a: { op: 'moveLocal' as const, from: `${g.from}/${rel}`, to: `${g.to}/${rel}`, version } }));
    const oneByOne = async () => {
      for (const m of moves) await one(m.a);
    };
    if (moves.some(({ a }) => blocked.some((b) => a.from.startsWith(b + '/') || a.to.startsWith(b + '/')))) return oneByOne();
    let renamed: boolean;
    try {
      for (const { a } of moves) await verifyLocal(local, a.from, expected(a.from));
      renamed = await local.renameFolder!(g.from, g.to, new Set(g.files.keys()), prune);
    } catch (e) {
      if (e instanceof LocalChanged) return oneByOne();
      for (const m of moves) await report({ ...m.a, error: message(e) });
      return;
    }
    if (!renamed) return oneByOne();
    for (const { a } of moves) {
      const d: Done = { ...a };
      const l = localFiles.get(a.from)!;
      const st = await local.stat(a.to);
      state.files.delete(a.from);
      if (st) state.files.set(a.to, agreedEntry(a.version, l.hash, st));
      else d.retry = true;
      await report(d);
    }
  }

  /**
   * The uploads and downloads of files of at most BULK_FILE_MAX bytes (as the plan read them),
   * when the remote side takes them in bulk, in batches of one direction of at most
   * BULK_ENTRIES files and BULK_REQUEST_BYTES: each batch is one request (and, uploads, one
   * group commit on the server). A file with a basis on the other side goes too: a delta of
   * so small a file saves little.
   */
  function bulkBatches(transfers: Transfer[]) {
    const batches: Transfer[][] = [];
    const taken = new Set<Action>();
    for (const op of ['upload', 'download'] as const) {
      if (op === 'upload' ? !remote.pushMany : !remote.pullMany) continue;
      const sizeOf = (a: Transfer) => (op === 'upload' ? localFiles.get(a.path)?.stat.size : remoteFiles.get(a.path)?.size);
      const small = transfers.filter((a) => a.op === op && (sizeOf(a) ?? Infinity) <= BULK_FILE_MAX);
      for (const a of small) taken.add(a);
      batches.push(...inBulkBatches(small, (a) => sizeOf(a)!));
    }
    return { batches, has: (a: Action) => taken.has(a) };
  }

  /** One batch of `bulkBatches` in one request, each action then reported as `one` does with
   *  its own outcome. An action `one` would not run now (under a folder not cleared, or refused
   *  too often) is left to it. */
  async function bulkTransfers(batch: Transfer[]) {
    if (opts.signal?.aborted) return;
    const runs = batch.filter((a) => !blocked.some((b) => a.path.startsWith(b + '/')) && (a.op !== 'upload' || (refused.get(uploadKey(a))?.n ?? 0) < SYNC_REFUSALS));
    for (const a of batch) if (!runs.includes(a)) await one(a);
    if (!runs.length) return;
    let got: Settled<{ version: number; root: string } & Stat>[];
    try {
      got = await (runs[0].op === 'upload'
        ? remote.pushMany!(runs.flatMap((a) => (a.op === 'upload' ? [{ path: a.path, expect: a.expect }] : [])))
        : remote.pullMany!(runs.flatMap((a) => (a.op === 'download' ? [{ path: a.path, version: a.version, expect: localFiles.has(a.path) ? expected(a.path) : null }] : []))));
    } catch (error) {
      got = runs.map(() => ({ error }));
    }
    for (let k = 0; k < runs.length; k++) await one(runs[k], got[k] ?? { error: new Error('the bulk request answered fewer files than it was sent') });
  }

  /** what the plan read of a local file, for verifyLocal */
  function expected(p: string): Expected {
    const l = localFiles.get(p)!;
    return { ...l.stat, hash: l.hash };
  }

  async function act(a: Action, d: Done, got?: Settled<{ version: number; root: string } & Stat>) {
    const outcome = (g: Settled<{ version: number; root: string } & Stat>) => {
      if ('error' in g) throw g.error;
      return g.ok;
    };
    const files = state.files;
    switch (a.op) {
      case 'record': {
        const l = localFiles.get(a.path)!;
        files.set(a.path, agreedEntry(a.version, l.hash, l.stat));
        return;
      }
      case 'forget':
        files.delete(a.path);
        return;
      case 'upload': {
        // StaleBasis (another device's version landed first, or made this new name at the same
        // time) is retried: the next pass finds the conflict
        const r = got ? outcome(got) : await remote.push(a.path, a.expect);
        files.set(a.path, agreedEntry(r.version, r.root, r));
        return;
      }
      case 'download': {
        const l = localFiles.has(a.path);
        const r = got ? outcome(got) : await remote.pull(a.path, a.version, l ? expected(a.path) : null, l ? a.path : undefined);
        files.set(a.path, agreedEntry(r.version, r.root, r));
        opts.wrote?.(a.path, r);
        return;
      }
      case 'deleteLocal': {
        await verifyLocal(local, a.path, expected(a.path));
        await local.remove(a.path, prune);
        files.delete(a.path);
        return;
      }
      case 'deleteRemote': {
        const vs = await remote.versions(a.path);
        // a version landed since the listing: modify beats delete (the next pass downloads it)
        if (vs[vs.length - 1] !== a.version) throw new RemoteChanged(`${a.path} changed on the server`);
        const where = await remote.remove(a.path, { version: a.version }, stamp);
        if (where) d.trash = where;
        files.delete(a.path);
        return;
      }
      case 'moveRemote': {
        const l = localFiles.get(a.to)!;
        const moved = await remote.move(a.from, a.to, { version: a.version });
        files.delete(a.from);
        // recorded only as verified: the moved file's latest is the version the local content
        // is (another device's edit that landed before the move is compared by the next pass)
        if (moved.version === a.version && moved.root === l.hash) files.set(a.to, agreedEntry(moved.version, l.hash, l.stat));
        else d.retry = true;
        return;
      }
      case 'moveLocal': {
        const l = localFiles.get(a.from)!;
        await verifyLocal(local, a.from, expected(a.from));
        await local.rename(a.from, a.to, prune);
        const st = (await local.stat(a.to))!;
        files.set(a.to, agreedEntry(a.version, l.hash, st));
        files.delete(a.from);
        return;
      }
      case 'conflict': {
        // the server's version keeps the name; this device's bytes go up beside it, then the
        // name gets the server's version with them as basis
        const copy = await asideHere(a.path, d);
        const down = await remote.pull(a.path, a.version, null, copy);
        files.set(a.path, agreedEntry(down.version, down.root, down));
        return;
      }
      case 'asideLocal':
        // a folder on the server has the name: this device's file goes beside it
        await asideHere(a.path, d);
        files.delete(a.path);
        return;
      case 'asideRemote': {
        // a folder (or a name this file system holds as another) has the name here: the
        // server's file goes beside it there, with its history, and comes down next pass
        const to = copyName(a.path);
        await remote.move(a.path, to, { version: a.version });
        d.conflictCopy = to;
        files.delete(a.path);
        return;
      }
    }
  }

  /** Renames the local file `p` to a conflict name (while it is what the plan read) and pushes
   *  it there as a new file; the copy's name. */
  async function asideHere(p: string, d: Done): Promise<string> {
    const l = localFiles.get(p)!;
    await verifyLocal(local, p, expected(p));
    const copy = copyName(p);
    await local.rename(p, copy, false);
    localFiles.set(copy, l);
    d.conflictCopy = copy;
    const up = await remote.push(copy, 'absent');
    state.files.set(copy, agreedEntry(up.version, up.root, up));
    return copy;
  }

  /** A folder action; false when it turned out to be nothing to report. */
  async function actFolder(a: FolderAction): Promise<boolean> {
    const folders = state.folders;
    switch (a.op) {
      case 'recordFolder':
        folders.add(a.path);
        return false;
      case 'forgetFolder':
        folders.delete(a.path);
        return false;
      case 'mkdirLocal':
        await local.mkdir(a.path);
        folders.add(a.path);
        return true;
      case 'mkdirRemote':
        if (!(await remote.makeFolder(a.path))) return false;
        folders.add(a.path);
        return true;
      case 'rmdirLocal':
        // not empty (something landed, or files the rules ignore): kept here, and made on the
        // server again by the next pass
        folders.delete(a.path);
        return local.rmdir(a.path);
      case 'rmdirRemote':
        folders.delete(a.path);
        return remote.removeFolder(a.path);
    }
  }
}

/** What a whole sync did: every pass's actions, and whether the two sides now agree. */
export interface FolderSyncReport {
  done: Done[];
  hashed: number;
  /** local files the passes looked at, all passes together */
  looked: number;
  skipped: Skipped[];
  /** local files and folders the folder's own ignore rules hide (the last pass) */
  hidden: number;
  guard?: PassReport['guard'];
  /** the last pass found nothing to do, nothing failed and nothing held kept the sides apart */
  agreed: boolean;
  passes: number;
}

/** An action that changed the state only (both sides already agreed: `record`, `forget`). */
const stateOnly = (d: Done) => (d.op === 'record' || d.op === 'forget') && !d.error && !d.retry;

/** `items` in order, in batches of at most BULK_ENTRIES items and BULK_REQUEST_BYTES of their
 *  `size`s (an item larger than that alone): one bulk request each. */
export function inBulkBatches<T>(items: readonly T[], size: (t: T) => number): T[][] {
  const batches: T[][] = [];
  let cur: T[] = [];
  let bytes = 0;
  for (const t of items) {
    if (cur.length && (cur.length >= BULK_ENTRIES || bytes + size(t) > BULK_REQUEST_BYTES)) (batches.push(cur), (cur = []), (bytes = 0));
    cur.push(t);
    bytes += size(t);
  }
  if (cur.length) batches.push(cur);
  return batches;
}

/** Passes until one changes nothing on either side (at most `maxPasses`). */
export async function syncUntilStill(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions, maxPasses = 4): Promise<FolderSyncReport> {
  const done: Done[] = [];
  /** what leaves the sides agreeing: a state change only, or a transfer that landed, where
   *  every change made meanwhile starts a pass of its own (`watched`) or where the folders it
   *  went into are agreed ones (a transfer into a new folder leaves the folder to record) */
  const settled = (d: Done) => stateOnly(d) || (isFileAction(d) && transfer(d) && !d.error && !d.retry && (!!opts.watched || parentsOf(d.path).every((f) => state.folders.has(f))));
  let last: PassReport = { done: [], hashed: 0, skipped: [], hidden: 0, looked: 0 };
  let passes = 0;
  let hashed = 0;
  let looked = 0;
  while (passes < maxPasses && !opts.signal?.aborted) {
    passes++;
    last = await syncPass(local, remote, state, opts);
    done.push(...last.done);
    hashed += last.hashed;
    looked += last.looked;
    // a pass that changed neither side (nothing done, or only agreements noted in the state,
    // or only failures) leaves nothing for another pass to find; nor one that only moved files
    // across as they were (another pass would find them agreed: a change made meanwhile starts
    // a pass of its own in --watch, and is found by the next run otherwise, as one made after)
    if (last.guard || last.done.every((d) => d.error || stateOnly(d)) || last.done.every(settled)) break;
  }
  // a pass that left something out (held where the other side has something, or unreadable)
  // has not made the two sides agree
  const agreed = !last.guard && last.done.every(settled) && !last.skipped.some((s) => s.blocks);
  return { done, hashed, looked, skipped: last.skipped, hidden: last.hidden, ...(last.guard && { guard: last.guard }), agreed, passes };
}
