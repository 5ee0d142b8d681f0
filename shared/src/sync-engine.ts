/**
 * The sync engine (docs/sync.md): one pass reads the local tree, the state and the server's
 * listing, plans with sync-plan.ts, checks the delete guard and carries the plan out (moves,
 * then uploads and downloads a few at a time, then the rest); `syncUntilStill` runs passes until
 * one finds nothing to do. All I/O is behind
 * `LocalTree` and `RemoteFolder`, which the CLI implements with node:fs and the delta push and
 * pull (cli/sync-io.ts) and the page's worker with the File System Access API
 * (client/src/folder-sync.ts), so the engine is the same wherever it runs.
 *
 * Nothing is lost: an upload is made against the version it was based on (StaleBasis when the
 * server moved on: the next pass makes it a conflict); a download replaces the local file only
 * while it is still what was read (else the next pass sees a local change); a delete on the
 * server moves the file into the trash folder with its history; a conflict keeps both.
 */
import { conflictName } from './conflict.ts';
import { RemoteError } from './conn.ts';
import { SYNC_TRANSFERS } from './limits.ts';
import { ErrorCode } from './protocol.ts';
import { type Action, type Agreed, type FolderAction, type LocalFile, type RemoteFile, deleteAllowance, deletesOf, plan, planFolders, rootsWanted } from './sync-plan.ts';

/** An entry the engine leaves alone this pass. `hold`: what the server has there must not be
 *  read as deleted here (a file or folder, ending in '/', that could not be read). */
export interface Skipped {
  path: string;
  reason: string;
  hold?: boolean;
}

export interface Stat {
  size: number;
  mtimeMs: number;
}

/** The synced folder on this device. Paths are relative, '/'-separated, NFC. */
export interface LocalTree {
  /** every regular file not ignored, with its size and mtime; what was skipped, and why */
  scan(): Promise<{ files: Map<string, Stat>; dirs: Set<string>; skipped: Skipped[] }>;
  /** the content's root hash (hex), with the size and mtime the file had when it was opened */
  hash(path: string): Promise<{ hash: string } & Stat>;
  /** null when there is no file */
  stat(path: string): Promise<Stat | null>;
  /** renames (making parent folders; a case-only rename works on case-insensitive systems);
   *  `prune`: then removes the folders this leaves empty */
  rename(from: string, to: string, prune: boolean): Promise<void>;
  /** removes a file; `prune`: then the folders this leaves empty */
  remove(path: string, prune: boolean): Promise<void>;
  mkdir(path: string): Promise<void>;
  /** removes a folder if it is empty; false if it is not */
  rmdir(path: string): Promise<boolean>;
}

/** The synced folder on the server. Paths are relative to it. */
export interface RemoteFolder {
  /** the files, and the folders (null: this server does not keep empty folders); `skipped`:
   *  listed names that may not become paths here (sync-remote.ts listedNameFits) */
  list(): Promise<{ files: Map<string, RemoteFile>; folders: Set<string> | null; skipped?: Skipped[] }>;
  /** the root (hex, default chunking) of `version`, or undefined when another chunking made it */
  root(path: string, version: number): Promise<string | undefined>;
  /** the live version numbers of `path` */
  versions(path: string): Promise<number[]>;
  /** pushes the local file against `basisVersion` (0: a new name, which the server refuses
   *  when another device made it meanwhile); RemoteError StaleBasis when the server's latest
   *  is another version (or, for a new name, any version) */
  push(path: string, basisVersion: number): Promise<{ version: number; root: string } & Stat>;
  /** pulls `version` into the local `path` (with `basis`, a local file, as basis), replacing
   *  it only while it still has the stat `expect` (null: no file); LocalChanged otherwise */
  pull(path: string, version: number, expect: Stat | null, basis?: string): Promise<{ version: number; root: string } & Stat>;
  /** a server-side rename; the new name's latest version */
  move(from: string, to: string): Promise<number>;
  /** deletes `path` there, keeping its versions (the trash folder); where it went */
  remove(path: string): Promise<string>;
  /** makes an empty folder; false when the server keeps no empty folders */
  makeFolder(path: string): Promise<boolean>;
  /** removes a folder with nothing under it; false when something is */
  removeFolder(path: string): Promise<boolean>;
}

/** The agreed state of one synced folder, kept by the caller (cli/sync-state.ts). */
export interface SyncState {
  files: Map<string, Agreed>;
  /** the folders agreed (empty or not) */
  folders: Set<string>;
  save(): Promise<void>;
}

/** A download found the local file changed since it was read. */
export class LocalChanged extends Error {}

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
}

/** One action carried out, or failed. */
export type Done = (Action | FolderAction) & { error?: string; conflictCopy?: string; trash?: string; retry?: boolean };

export interface PassReport {
  done: Done[];
  /** local files read to hash them (size or mtime not the agreed ones) */
  hashed: number;
  skipped: Skipped[];
  /** the delete guard stopped the pass before it did anything */
  guard?: { deletes: number; allowed: number; files: number };
}

/**
 * A file whose mtime is this close to the moment its state is recorded may change again within
 * the same mtime tick (a coarse clock, FAT's 2 s) without its size or mtime showing it: its
 * recorded mtime is left unknown (-1), so the next pass reads it again ("racy clean", as git
 * treats its index).
 */
export const RACY_MS = 2000;

/** The agreed entry for content read with stat `st`, at the present time. */
export function agreedEntry(version: number, hash: string, st: Stat): Agreed {
  return { version, hash, size: st.size, mtimeMs: Date.now() - st.mtimeMs < RACY_MS ? -1 : st.mtimeMs };
}

/** The ops of file actions (sync-plan.ts Action). */
const ACTS: Record<Action['op'], true> = { upload: true, download: true, deleteLocal: true, deleteRemote: true, moveRemote: true, moveLocal: true, conflict: true, record: true, forget: true };

const isFileAction = (a: Action | FolderAction): a is Action => a.op in ACTS;

/** Whether two looks at a file saw it unchanged (size and modification time). */
export const sameStat = (a: Stat | null, b: Stat | null) => (a === null ? b === null : b !== null && a.size === b.size && a.mtimeMs === b.mtimeMs);

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** One pass: read both sides, plan, guard, act. */
export async function syncPass(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions): Promise<PassReport> {
  const ignored = opts.ignored ?? (() => false);
  const [scan, { files: listing, folders: remoteFolders, skipped: unlisted = [] }] = await Promise.all([local.scan(), remote.list()]);
  const skipped = [...scan.skipped, ...unlisted];
  // paths left out of this pass entirely (unreadable here): never read as deleted
  const held = new Set<string>();
  const heldFolders = scan.skipped.filter((s) => s.hold && s.path.endsWith('/')).map((s) => s.path);
  for (const s of scan.skipped) if (s.hold && !s.path.endsWith('/')) held.add(s.path);
  for (const p of [...listing.keys(), ...state.files.keys()]) if (heldFolders.some((f) => p.startsWith(f))) held.add(p);

  const localFiles = new Map<string, LocalFile & { stat: Stat }>();
  let hashed = 0;
  for (const [p, st] of scan.files) {
    if (ignored(p)) continue;
    const s = state.files.get(p);
    if (s && s.size === st.size && s.mtimeMs === st.mtimeMs) {
      localFiles.set(p, { ...st, hash: s.hash, stat: st });
      continue;
    }
    try {
      hashed++;
      const h = await local.hash(p);
      localFiles.set(p, { size: h.size, mtimeMs: h.mtimeMs, hash: h.hash, stat: { size: h.size, mtimeMs: h.mtimeMs } });
      // the same content with a new mtime: not re-read next time
      if (s && s.hash === h.hash) state.files.set(p, agreedEntry(s.version, s.hash, h));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue; // gone since the scan: deleted
      held.add(p);
      skipped.push({ path: p, reason: `cannot read: ${message(e)}` });
    }
  }
  const remoteFiles = new Map([...listing].filter(([p]) => !ignored(p)));
  for (const p of held) {
    localFiles.delete(p);
    remoteFiles.delete(p);
  }
  const agreed = new Map([...state.files].filter(([p]) => !held.has(p) && !ignored(p)));
  for (const p of rootsWanted(localFiles, agreed, remoteFiles)) {
    const r = remoteFiles.get(p)!;
    try {
      remoteFiles.set(p, { ...r, root: await remote.root(p, r.version) });
    } catch {
      // unknown root: treated as different content (a conflict copy rather than a loss)
    }
  }

  const actions = plan(localFiles, agreed, remoteFiles);
  const deletes = deletesOf(actions);
  const allowed = deleteAllowance(agreed.size, opts.maxDeleteShare, opts.maxDeleteMin);
  if (deletes > allowed) return { done: [], hashed, skipped, guard: { deletes, allowed, files: agreed.size } };

  // Where the server keeps folders, the folder plan makes and removes empty ones (none under a
  // folder that could not be read); elsewhere folders here follow their files: one left empty
  // by a delete or move from the server goes too.
  const prune = remoteFolders === null;
  const inHeld = (d: string) => heldFolders.some((f) => (d + '/').startsWith(f));
  const folderActions = remoteFolders
    ? planFolders(
        new Set([...scan.dirs].filter((d) => !inHeld(d))),
        new Set([...state.folders].filter((d) => !inHeld(d) && !ignored(d, true))),
        new Set([...remoteFolders].filter((d) => !inHeld(d) && !ignored(d, true))),
        localFiles,
        remoteFiles,
      )
    : [];

  const done: Done[] = [];
  const taken = (c: string) => localFiles.has(c) || remoteFiles.has(c) || state.files.has(c);
  let saved = Date.now();
  let saving: Promise<void> | null = null;
  const one = async (a: Action | FolderAction) => {
    if (opts.signal?.aborted) return;
    const d: Done = { ...a };
    try {
      if (isFileAction(a)) await act(a, d);
      else if (!(await actFolder(a))) return;
    } catch (e) {
      if (e instanceof RemoteError && e.code === ErrorCode.StaleBasis) d.retry = true; // the next pass sees the new version
      // the file changed while it was read (the server found the bytes not matching their
      // list and stored nothing): the next pass reads it again
      else if (e instanceof RemoteError && e.code === ErrorCode.VerifyFailed && (a.op === 'upload' || a.op === 'conflict')) d.retry = true;
      else if (e instanceof LocalChanged) d.retry = true;
      else d.error = message(e);
    }
    done.push(d);
    opts.onAction?.(d);
    if (!saving && Date.now() - saved > 1000) {
      saving = state.save().finally(() => ((saving = null), (saved = Date.now())));
      await saving;
    }
  };
  // moves first, then the uploads and downloads (each its own path) several at a time, then
  // the rest one by one: conflicts name their copies from what is taken, deletes come last
  const transfer = (a: Action) => a.op === 'upload' || a.op === 'download';
  const move = (a: Action) => a.op === 'moveRemote' || a.op === 'moveLocal';
  for (const a of actions.filter(move)) await one(a);
  const queue = actions.filter(transfer);
  await Promise.all(Array.from({ length: Math.min(opts.transfers ?? SYNC_TRANSFERS, queue.length) }, async () => {
    for (let a; (a = queue.shift()); ) await one(a);
  }));
  for (const a of [...actions.filter((x) => !move(x) && !transfer(x)), ...folderActions]) await one(a);
  await saving;
  await state.save();
  return { done, hashed, skipped };

  async function act(a: Action, d: Done) {
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
        const r = await remote.push(a.path, a.basisVersion);
        files.set(a.path, agreedEntry(r.version, r.root, r));
        return;
      }
      case 'download': {
        const l = localFiles.get(a.path);
        const r = await remote.pull(a.path, a.version, l?.stat ?? null, l && a.path);
        files.set(a.path, agreedEntry(r.version, r.root, r));
        return;
      }
      case 'deleteLocal': {
        const l = localFiles.get(a.path)!;
        if (!sameStat(await local.stat(a.path), l.stat)) throw new LocalChanged(`${a.path} changed`);
        await local.remove(a.path, prune);
        files.delete(a.path);
        return;
      }
      case 'deleteRemote': {
        const vs = await remote.versions(a.path);
        // a version landed since the listing: modify beats delete (the next pass downloads it)
        if (vs[vs.length - 1] !== a.version) throw new LocalChanged(`${a.path} changed on the server`);
        d.trash = await remote.remove(a.path);
        files.delete(a.path);
        return;
      }
      case 'moveRemote': {
        const version = await remote.move(a.from, a.to);
        const l = localFiles.get(a.to)!;
        files.set(a.to, agreedEntry(version, l.hash, l.stat));
        files.delete(a.from);
        return;
      }
      case 'moveLocal': {
        const l = localFiles.get(a.from)!;
        if (!sameStat(await local.stat(a.from), l.stat)) throw new LocalChanged(`${a.from} changed`);
        await local.rename(a.from, a.to, prune);
        const st = (await local.stat(a.to))!;
        files.set(a.to, agreedEntry(a.version, l.hash, st));
        files.delete(a.from);
        return;
      }
      case 'conflict': {
        // the server's version keeps the name; this device's bytes go up beside it, then the
        // name gets the server's version with them as basis
        const l = localFiles.get(a.path)!;
        if (!sameStat(await local.stat(a.path), l.stat)) throw new LocalChanged(`${a.path} changed`);
        const copy = conflictName(a.path, opts.device, (opts.now ?? (() => new Date()))(), taken);
        await local.rename(a.path, copy, false);
        localFiles.set(copy, l);
        d.conflictCopy = copy;
        const up = await remote.push(copy, 0);
        files.set(copy, agreedEntry(up.version, up.root, up));
        const down = await remote.pull(a.path, a.version, null, copy);
        files.set(a.path, agreedEntry(down.version, down.root, down));
        return;
      }
    }
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
  skipped: Skipped[];
  guard?: PassReport['guard'];
  /** the last pass found nothing to do and nothing failed */
  agreed: boolean;
  passes: number;
}

/** Passes until one has nothing to do (at most `maxPasses`). */
export async function syncUntilStill(local: LocalTree, remote: RemoteFolder, state: SyncState, opts: EngineOptions, maxPasses = 4): Promise<FolderSyncReport> {
  const done: Done[] = [];
  let last: PassReport = { done: [], hashed: 0, skipped: [] };
  let passes = 0;
  let hashed = 0;
  while (passes < maxPasses && !opts.signal?.aborted) {
    passes++;
    last = await syncPass(local, remote, state, opts);
    done.push(...last.done);
    hashed += last.hashed;
    if (last.guard || !last.done.length || last.done.every((d) => d.error)) break;
  }
  const agreed = !last.guard && !last.done.length;
  return { done, hashed, skipped: last.skipped, ...(last.guard && { guard: last.guard }), agreed, passes };
}
