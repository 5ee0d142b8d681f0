/**
 * The sync engine's local side in the CLI (shared/src/sync/engine.ts `LocalTree`): the folder
 * on node:fs (the walk, the hashes and chunk indexes, renames and deletes, kept inside the folder
 * and through no link: contained.ts), the download's write (`replaceLocal`), and a vault
 * folder's files (`NodeFiles`). The server's side: http-folder.ts.
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { type Stats, existsSync, promises as fs } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import '../shared/src/chunking/wasm.ts';
import { type ChunkIndex, type Source, chunkSource } from '../shared/src/chunking/chunk-index.ts';
import { fileSource } from '../shared/src/chunking/file-source.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../shared/src/wire/protocol.ts';
import { type Expected, type LocalTree, type Skipped, type Stat, verifyLocal } from '../shared/src/sync/engine.ts';
import { IGNORE_FILE, ignoreMatcher, ignoredByDefault } from '../shared/src/sync/remote.ts';
import { conflictName } from '../shared/src/sync/conflict.ts';
import type { VaultFolderFiles } from '../shared/src/sync/vault-folder.ts';
import type { Vault } from '../shared/src/vault/vault.ts';
import { hostname } from 'node:os';
import { BULK_FILE_MAX, PLANNED_INDEX_BYTES } from '../shared/src/base/limits.ts';
import { NotContained, checkParents, checkTarget, insideFolder, openNoFollow, setModified, tempName, tempPid } from './contained.ts';
import { walkFolder } from './walk.ts';
import { parentFolder, pruneEmpty, renameVia } from '../shared/src/sync/local-tree.ts';

export { DEFAULT_IGNORES, IGNORE_FILE, TRASH } from '../shared/src/sync/remote.ts';


/** The ignore rules of a folder: the defaults and its .dsyncignore (read again each pass). */
export async function ignoreRules(dir: string): Promise<(p: string, isDir?: boolean) => boolean> {
  return ignoreMatcher(await fs.readFile(path.join(dir, IGNORE_FILE), 'utf8').catch(() => null));
}

/** A moment on a file system's own clock: the mtime of a file made then, on device `dev`. */
export interface FsClock {
  dev: number;
  at: number;
}

/** The file system's time now in `dir` (a temporary file made there and removed, its mtime);
 *  null where none can be made (a read-only folder). */
export async function fsClock(dir: string): Promise<FsClock | null> {
  const f = path.join(dir, tempName());
  try {
    const fh = await fs.open(f, 'wx');
    try {
      const st = await fh.stat();
      return { dev: st.dev, at: st.mtimeMs };
    } finally {
      await fh.close();
    }
  } catch {
    return null;
  } finally {
    await fs.rm(f, { force: true }).catch(() => {});
  }
}

/** When a read of a file with stat `st` began, for the racy rule (engine.ts agreedEntry): the
 *  file system's moment `clock` where the file is on its device (`clock` taken before the read
 *  began), else `wallAt`, this process's clock just before the read. */
export const readMoment = (st: { dev: number }, clock: FsClock | null, wallAt: number): Pick<Stat, 'readAt' | 'fsClock'> =>
  clock && clock.dev === st.dev ? { readAt: clock.at, fsClock: true } : { readAt: wallAt };

/** `fn` of the file's content, read through no link, with its stat when opened and when that
 *  read began (`readMoment`; `clock`: a moment of the file system's taken before this call). */
async function readFile<T>(file: string, clock: FsClock | null, fn: (source: Source) => Promise<T>): Promise<{ got: T } & Stat> {
  const fh = await openNoFollow(file);
  try {
    const wallAt = Date.now();
    const st = await fh.stat();
    return { got: await fn(fileSource(fh, st.size)), size: st.size, mtimeMs: st.mtimeMs, ...readMoment(st, clock, wallAt) };
  } finally {
    await fh.close();
  }
}

/** The root hash of a file's content as the protocol computes it with the default chunking,
 *  and the chunk index it is the root of; `clock` as `readFile`'s. */
export async function indexOf(file: string, clock: FsClock | null = null): Promise<{ hash: string; index: ChunkIndex } & Stat> {
  const { got: index, ...st } = await readFile(file, clock, (source) => chunkSource(source, DEFAULT_PARAMS, DEFAULT_ALGO));
  return { hash: hex(index.root), index, ...st };
}

/** Bytes of a chunk index held in memory: its lengths, FastFps and strong hashes. */
const indexBytes = (index: ChunkIndex) => index.lengths.byteLength + index.fastfps.byteLength + index.hashes.byteLength;

/** Removes `file` if it is a download's temporary file (contained.ts tempName) left by a
 *  process that is gone (killed mid-download). */
async function dropStaleTemp(file: string) {
  const pid = tempPid(file);
  if (pid === undefined || pid === process.pid) return;
  try {
    process.kill(pid, 0);
    return; // still running
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') return;
  }
  await fs.rm(file, { force: true });
}

const ENOENT = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

/** The local folder. Every write, rename and delete stays inside it and passes through no
 *  symbolic link (cli/contained.ts); the scan follows no link (cli/walk.ts). */
export class NodeTree implements LocalTree {
  /** the name each path has on disk (a name not in NFC keeps its own form there) */
  private onDisk = new Map<string, string>();
  /** whether this folder's file system finds a name whatever its case (probed once) */
  private caseless: boolean | undefined;
  ignored: (p: string, isDir?: boolean) => boolean = () => false;
  /** this device's name, in the conflict name of a second Unicode form of one name */
  device = hostname();
  /** the chunk indexes `hash` made this pass of files that go up in a delta session of their
   *  own (above BULK_FILE_MAX), so that their push sends the index rather than reading and
   *  hashing the file again (`takeIndex`); at most PLANNED_INDEX_BYTES of them, the oldest
   *  dropped first, and none kept past the pass (`scan` starts the next) */
  private planned = new Map<string, { index: ChunkIndex } & Stat>();
  private plannedBytes = 0;
  /** the file system's moment at this pass's start (`scan`, `scanFolders`), before any of its
   *  reads: what a read's start is compared with a file's mtime on (`readMoment`) */
  clock: FsClock | null = null;

  /** `root`: the root a file's content has on the other side, where that is not the default
   *  chunking's (a vault's, `Vault.rootOf`); no chunk index is then kept for the push */
  constructor(
    readonly dir: string,
    private readonly o: { root?: (source: Source) => Promise<Uint8Array> } = {},
  ) {}

  /** the path of `p` below the folder as it is on disk ('/'-separated) */
  rel(p: string): string {
    return this.onDisk.get(p) ?? p;
  }

  /** where `p` is on disk (refused when it is not a path inside the folder) */
  file(p: string): string {
    return insideFolder(this.dir, this.rel(p));
  }

  fold(p: string): string {
    return this.caseless === false ? p.normalize('NFC') : p.normalize('NFC').toLowerCase();
  }

  /** Whether the folder's file system ignores case: a probe file (a temporary name the rules
   *  ignore) is made and looked up in the other case. Unknown (a read-only folder): assumed. */
  private async probeCase(): Promise<boolean> {
    const name = `.Dsync-Case.dsync-tmp-${process.pid}`;
    const f = path.join(this.dir, name);
    try {
      await fs.writeFile(f, '', { flag: 'wx' });
    } catch {
      return process.platform === 'darwin' || process.platform === 'win32';
    }
    try {
      return await this.exists(path.join(this.dir, name.toLowerCase()));
    } finally {
      await fs.rm(f, { force: true });
    }
  }

  async scan() {
    this.planned.clear();
    this.plannedBytes = 0;
    this.clock = await fsClock(this.dir);
    this.ignored = await ignoreRules(this.dir);
    this.caseless ??= await this.probeCase();
    let hidden = 0;
    const w = await walkFolder(this.dir, {
      ignored: this.ignored,
      onIgnoredFile: dropStaleTemp,
      // what the folder's own rules hide (the defaults and the rules file are not counted)
      onIgnored: (key, isDir) => void (!ignoredByDefault(key, isDir) && !(key === IGNORE_FILE && !isDir) && hidden++),
    });
    this.onDisk.clear();
    const files = new Map<string, Stat>();
    const skipped = [...w.skipped];
    for (const [key, f] of w.files) {
      files.set(key, { size: f.size, mtimeMs: f.mtimeMs });
      if (key !== f.rel) this.onDisk.set(key, f.rel);
    }
    // a second Unicode form of one name: it cannot sync under that name (the server holds NFC
    // names), so it takes a conflict name of its own here, and goes up as that
    for (const t of w.twins) {
      const folder = t.rel.includes('/') ? t.rel.slice(0, t.rel.lastIndexOf('/') + 1) : '';
      const base = (c: string) => c.slice(c.lastIndexOf('/') + 1);
      const copy = conflictName(t.key, this.device, new Date(), (c) => files.has(c) || existsSync(path.join(this.dir, ...(folder + base(c)).split('/'))));
      try {
        await checkParents(this.dir, folder + base(copy));
        await fs.rename(insideFolder(this.dir, t.rel), insideFolder(this.dir, folder + base(copy)));
        const st = await fs.lstat(insideFolder(this.dir, folder + base(copy)));
        files.set(copy, { size: st.size, mtimeMs: st.mtimeMs });
        if (folder + base(copy) !== copy) this.onDisk.set(copy, folder + base(copy));
        skipped.push({ path: t.key, reason: `two names on disk for one name (Unicode forms): the second is renamed to ${copy}` });
      } catch (err) {
        skipped.push({ path: t.key, reason: `two names on disk for one name (Unicode forms), and the second cannot be renamed: ${(err as Error).message}`, hold: true });
      }
    }
    return { files, dirs: w.dirs, skipped, hidden };
  }

  /**
   * `scan` of the entries directly in `folders` (engine.ts `LocalTree.scanFolders`): each folder
   * is walked shallow, as the whole walk would find it. Null, for a whole scan instead, when a
   * folder cannot be vouched for as named: a name whose Unicode forms differ (its form on disk
   * is known to a whole walk only), a link, a file or another disk on its way, an ignored
   * folder on its way, or two Unicode forms of one name in it. A folder that is not there has
   * nothing in it.
   */
  async scanFolders(folders: readonly string[]) {
    this.planned.clear();
    this.plannedBytes = 0;
    this.clock = await fsClock(this.dir);
    this.ignored = await ignoreRules(this.dir);
    this.caseless ??= await this.probeCase();
    const device = (await fs.stat(this.dir)).dev;
    const files = new Map<string, Stat>();
    const dirs = new Set<string>();
    const skipped: Skipped[] = [];
    const disk = new Map<string, string>();
    for (const f of folders) {
      if (f !== f.normalize('NFC') || f !== f.normalize('NFD')) return null;
      const parts = f ? f.split('/') : [];
      let at = this.dir;
      let there = true;
      for (let i = 0; i < parts.length && there; i++) {
        if (this.ignored(parts.slice(0, i + 1).join('/'), true)) return null;
        at = path.join(at, parts[i]);
        const st = await fs.lstat(at).catch((e) => {
          if (ENOENT(e) || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return null;
          throw e;
        });
        if (!st) there = false;
        else if (!st.isDirectory() || st.dev !== device) return null;
      }
      if (!there) continue;
      const prefix = f ? f + '/' : '';
      const w = await walkFolder(at, { device, shallow: true, ignored: (p, isDir) => this.ignored(prefix + p, isDir), onIgnoredFile: dropStaleTemp });
      if (w.twins.length) return null;
      for (const [key, st] of w.files) {
        files.set(prefix + key, { size: st.size, mtimeMs: st.mtimeMs });
        if (key !== st.rel) disk.set(prefix + key, prefix + st.rel);
      }
      for (const d of w.dirs) dirs.add(prefix + d);
      for (const x of w.skipped) skipped.push({ ...x, path: prefix + x.path });
    }
    // the names on disk of the files in these folders, as found now
    for (const k of this.onDisk.keys()) if (folders.includes(k.includes('/') ? k.slice(0, k.lastIndexOf('/')) : '')) this.onDisk.delete(k);
    for (const [k, rel] of disk) this.onDisk.set(k, rel);
    return { files, dirs, skipped };
  }

  async hash(p: string) {
    await checkParents(this.dir, this.rel(p));
    if (this.o.root) {
      const { got, ...st } = await readFile(this.file(p), this.clock, this.o.root);
      return { hash: hex(got), ...st };
    }
    const { hash, index, ...st } = await indexOf(this.file(p), this.clock);
    this.dropIndex(p);
    if (st.size > BULK_FILE_MAX && indexBytes(index) <= PLANNED_INDEX_BYTES) {
      this.planned.set(p, { index, ...st });
      this.plannedBytes += indexBytes(index);
      for (const [q, old] of this.planned) {
        if (this.plannedBytes <= PLANNED_INDEX_BYTES) break;
        this.dropIndex(q, old.index);
      }
    }
    return { hash, ...st };
  }

  /** The chunk index `hash` made of `p`, once, while the file has the size and mtime it had
   *  then (`st`: a stat of the file the push reads), with when that read began. A change that
   *  keeps both is caught by the server: the root it computes of the bytes it rebuilt is not
   *  the index's (nothing stored). */
  takeIndex(p: string, st: Stat): ({ index: ChunkIndex } & Stat) | undefined {
    const got = this.planned.get(p);
    this.dropIndex(p);
    return got && got.size === st.size && got.mtimeMs === st.mtimeMs ? got : undefined;
  }

  private dropIndex(p: string, index = this.planned.get(p)?.index) {
    if (!index || !this.planned.delete(p)) return;
    this.plannedBytes -= indexBytes(index);
  }

  /** Opens the file `p` to send it (inside the folder, through no link) and runs `use` on it
   *  with its stat and when its read began (`readMoment`); closed after. */
  async sending<T>(p: string, use: (fh: FileHandle, st: Stats, began: Pick<Stat, 'readAt' | 'fsClock'>) => Promise<T>): Promise<T> {
    await checkParents(this.dir, this.rel(p));
    const fh = await openNoFollow(this.file(p));
    try {
      const clock = this.clock;
      const wallAt = Date.now();
      const st = await fh.stat();
      return await use(fh, st, readMoment(st, clock, wallAt));
    } finally {
      await fh.close();
    }
  }

  async stat(p: string): Promise<Stat | null> {
    return fileStat(await checkParents(this.dir, this.rel(p)));
  }

  async rename(from: string, to: string, prune: boolean): Promise<void> {
    const at = this.rel(from);
    await checkTarget(await checkParents(this.dir, at), from);
    await renameVia(
      {
        // each path checked right before the act: no link put in the way since
        move: async (a, b) => fs.rename(await checkParents(this.dir, a), await checkParents(this.dir, b, true)),
        exists: async (p) => this.exists(await checkParents(this.dir, p, true)),
        tempName,
      },
      from,
      to,
      at,
    );
    this.onDisk.delete(from);
    if (prune) await this.pruneUp(parentFolder(at));
  }

  async renameFolder(from: string, to: string, files: ReadonlySet<string>, prune: boolean): Promise<boolean> {
    // names kept on disk in another form, and case-only renames, go file by file
    if (from.toLowerCase() === to.toLowerCase() || [...this.onDisk.keys()].some((p) => p.startsWith(from + '/'))) return false;
    const top = await checkParents(this.dir, from);
    const isDir = async () => (await fs.lstat(top).catch(() => null))?.isDirectory() === true;
    if (!(await isDir())) return false;
    // the folder holds just `files` (regular files) and the folders above them: nothing
    // ignored, no link, no empty folder goes along unseen
    let seen = 0;
    const holds = async (dir: string, rel: string): Promise<boolean> => {
      let any = false;
      for (const e of await fs.readdir(dir, { withFileTypes: true })) {
        const p = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) {
          if (!(await holds(path.join(dir, e.name), p))) return false;
        } else if (!e.isFile() || !files.has(p)) return false;
        else seen++;
        any = true;
      }
      return any;
    };
    if (!(await holds(top, '')) || seen !== files.size) return false;
    const dst = await checkParents(this.dir, to, true);
    if (await this.exists(dst)) return false;
    // again right before the act: no link put in the way since
    await checkParents(this.dir, from);
    if (!(await isDir())) return false;
    await checkParents(this.dir, to);
    await fs.rename(top, dst);
    if (prune) await this.pruneUp(parentFolder(from));
    return true;
  }

  async mkdir(p: string): Promise<void> {
    const full = await checkParents(this.dir, p, true);
    try {
      await fs.mkdir(full);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      if (!(await fs.lstat(full)).isDirectory()) throw new NotContained(`${p} is not a folder here`);
    }
  }

  async rmdir(p: string): Promise<boolean> {
    try {
      const full = await checkParents(this.dir, this.rel(p));
      if ((await fs.lstat(full)).isSymbolicLink()) return false; // a link where the folder was: held, kept
      await fs.rmdir(full);
      return true;
    } catch (e) {
      if (ENOENT(e)) return true;
      if ((e as NodeJS.ErrnoException).code === 'ENOTEMPTY' || (e as NodeJS.ErrnoException).code === 'EEXIST' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return false;
      throw e;
    }
  }

  async remove(p: string, prune: boolean): Promise<void> {
    const f = await checkParents(this.dir, this.rel(p));
    if (await checkTarget(f, p)) await fs.unlink(f);
    const at = this.rel(p);
    this.onDisk.delete(p);
    if (prune) await this.pruneUp(parentFolder(at));
  }

  private async exists(f: string) {
    try {
      await fs.lstat(f);
      return true;
    } catch (e) {
      if (ENOENT(e)) return false;
      throw e;
    }
  }

  /** Removes the folder `folder` (its path on disk below the synced folder) and those above it
   *  while each is left empty, up to (not including) the synced folder. */
  private pruneUp(folder: string) {
    return pruneEmpty(folder, async (d) => (await fs.rmdir(await checkParents(this.dir, d)), true));
  }
}

/** The size and mtime of the regular file at `full` (lstat: a link is not one), or null. */
async function fileStat(full: string): Promise<Stat | null> {
  try {
    const st = await fs.lstat(full);
    return st.isFile() ? { size: st.size, mtimeMs: st.mtimeMs } : null;
  } catch (e) {
    if (ENOENT(e)) return null;
    throw e;
  }
}

/**
 * Writes the local file `p` as a download does: into a temporary file beside it (inside the
 * folder, through no link: cli/contained.ts), which `fill` writes; synced, given the mtime
 * `fill` answers (as rsync -a keeps it, set before the state records the file's stat, whose
 * size and mtime then spare the next pass reading it), and renamed over the file only while
 * it is what the plan read (`verifyLocal(expect)`: its content too), the containment checked
 * again right before the rename. The temporary file never stays. What `fill` answered, with
 * the file's stat after.
 */
export async function replaceLocal<T extends { modified?: number }>(tree: NodeTree, p: string, expect: Expected | null, fill: (out: FileHandle) => Promise<T>): Promise<T & Stat> {
  const target = await checkParents(tree.dir, tree.rel(p), true);
  const tmp = path.join(path.dirname(target), tempName());
  insideFolder(tree.dir, path.relative(tree.dir, tmp).split(path.sep).join('/'));
  const out = await fs.open(tmp, 'wx');
  let closed = false;
  let renamed = false;
  try {
    const got = await fill(out);
    await out.sync();
    await setModified(out, got.modified);
    await out.close();
    closed = true;
    // the file as the plan read it, looked at through the folders checked right after (a link
    // put in their way is refused there, before anything is renamed, and is the reason given
    // when the file looks changed through it)
    await verifyLocal({ stat: () => fileStat(target), hash: (q) => tree.hash(q) }, p, expect).catch(async (e) => {
      await checkParents(tree.dir, tree.rel(p));
      throw e;
    });
    // again right before the rename: no link put in the way since, no folder or link at the name
    await checkParents(tree.dir, tree.rel(p));
    await checkTarget(target, p);
    await fs.rename(tmp, target);
    renamed = true;
    const st = await fs.stat(target);
    return { ...got, size: st.size, mtimeMs: st.mtimeMs };
  } finally {
    if (!closed) await out.close().catch(() => {});
    // renamed: there is no temporary file left to remove
    if (!renamed) await fs.rm(tmp, { force: true });
  }
}

/** The local tree of a folder synced with `vault`: a file's root is the vault's kind of root
 *  (`Vault.rootOf`, over its keyed chunk ids), what the vault's listing carries. */
export const vaultTree = (dir: string, vault: Pick<Vault, 'rootOf'>) => new NodeTree(dir, { root: (source) => vault.rootOf(source) });

/** The local files of a vault's transfers (shared/src/sync/vault-folder.ts): read through no
 *  link, written as every download is (`replaceLocal`). */
export class NodeFiles implements VaultFolderFiles {
  constructor(private readonly tree: NodeTree) {}

  async read<T>(p: string, fn: (source: Source, st: Stat) => Promise<T>): Promise<T> {
    await checkParents(this.tree.dir, this.tree.rel(p));
    const fh = await openNoFollow(this.tree.file(p));
    try {
      const st = await fh.stat();
      return await fn(fileSource(fh, st.size), { size: st.size, mtimeMs: st.mtimeMs });
    } finally {
      await fh.close();
    }
  }

  async write(p: string, expect: Expected | null, basis: string | undefined, fill: (write: (bytes: Uint8Array) => Promise<void>, basis: Source | undefined) => Promise<{ mtime: number }>): Promise<Stat> {
    const basisFh = basis ? await openNoFollow(this.tree.file(basis)).catch(() => null) : null;
    try {
      const local = basisFh ? fileSource(basisFh, (await basisFh.stat()).size) : undefined;
      const r = await replaceLocal(this.tree, p, expect, async (out) => ({ modified: (await fill(async (b) => void (await out.write(b)), local)).mtime }));
      return { size: r.size, mtimeMs: r.mtimeMs };
    } finally {
      await basisFh?.close();
    }
  }
}
