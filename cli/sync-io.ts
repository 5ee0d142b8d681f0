/**
 * The sync engine's I/O in the CLI (shared/src/sync-engine.ts): the local folder on node:fs,
 * the server folder through the REST API (listing, versions, moves, the trash) and the delta
 * push and pull (shared/src/sync-client.ts) on shared connections.
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import '../shared/src/wasm.ts';
import { chunkSource } from '../shared/src/chunk-index.ts';
import { fileSource } from '../shared/src/file-source.ts';
import type { KnownVersions } from '../shared/src/known.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../shared/src/protocol.ts';
import { pull, push } from '../shared/src/sync-client.ts';
import { type Expected, type LocalTree, type Stat, verifyLocal } from '../shared/src/sync-engine.ts';
import type { Expect } from '../shared/src/sync-plan.ts';
import { ApiFolder, IGNORE_FILE, ignoreMatcher, ignoredByDefault } from '../shared/src/sync-remote.ts';
import { conflictName } from '../shared/src/conflict.ts';
import { hostname } from 'node:os';
import { SYNC_RETRIES } from '../shared/src/limits.ts';
import type { Values } from './command.ts';
import { ApiError, api, syncUrl, webSocket } from './remote.ts';

export { DEFAULT_IGNORES, IGNORE_FILE, TRASH } from '../shared/src/sync-remote.ts';


/** The ignore rules of a folder: the defaults and its .dsyncignore (read again each pass). */
export async function ignoreRules(dir: string): Promise<(p: string, isDir?: boolean) => boolean> {
  return ignoreMatcher(await fs.readFile(path.join(dir, IGNORE_FILE), 'utf8').catch(() => null));
}

/** The root hash of a file's content as the protocol computes it with the default chunking. */
export async function rootOf(file: string): Promise<{ hash: string } & Stat> {
  const fh = await fs.open(file, 'r');
  try {
    const st = await fh.stat();
    const index = await chunkSource(fileSource(fh, st.size), DEFAULT_PARAMS, DEFAULT_ALGO);
    return { hash: hex(index.root), size: st.size, mtimeMs: st.mtimeMs };
  } finally {
    await fh.close();
  }
}

/** Removes `file` if it is a download's temporary file (`.NAME.dsync-tmp-PID`) left by a
 *  process that is gone (killed mid-download). */
async function dropStaleTemp(file: string) {
  const pid = /\.dsync-tmp-(\d+)$/.exec(file)?.[1];
  if (!pid || Number(pid) === process.pid) return;
  try {
    process.kill(Number(pid), 0);
    return; // still running
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') return;
  }
  await fs.rm(file, { force: true });
}

const ENOENT = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

export class NodeTree implements LocalTree {
  /** the name each path has on disk (a name not in NFC keeps its own form there) */
  private onDisk = new Map<string, string>();
  /** whether this folder's file system finds a name whatever its case (probed once) */
  private caseless: boolean | undefined;
  ignored: (p: string, isDir?: boolean) => boolean = () => false;
  /** this device's name, in the conflict name of a second Unicode form of one name */
  device = hostname();

  constructor(readonly dir: string) {}

  /** where `p` is on disk */
  file(p: string): string {
    return path.join(this.dir, ...(this.onDisk.get(p) ?? p).split('/'));
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
    this.ignored = await ignoreRules(this.dir);
    this.caseless ??= await this.probeCase();
    const files = new Map<string, Stat>();
    const dirs = new Set<string>();
    const skipped: { path: string; reason: string; hold?: boolean }[] = [];
    let hidden = 0;
    this.onDisk.clear();
    const walk = async (rel: string) => {
      let entries;
      try {
        entries = await fs.readdir(path.join(this.dir, ...rel.split('/').filter(Boolean)), { withFileTypes: true });
      } catch (e) {
        if (!rel) throw e; // the synced folder itself
        return void skipped.push({ path: rel, reason: `cannot read the folder: ${(e as Error).message}`, hold: true });
      }
      for (const e of entries) {
        const p = rel + e.name;
        const key = p.normalize('NFC');
        if (e.isDirectory()) {
          if (this.ignored(key, true)) {
            if (!ignoredByDefault(key, true)) hidden++;
            continue;
          }
          dirs.add(key);
          await walk(p + '/');
        } else if (this.ignored(key)) {
          if (!ignoredByDefault(key) && key !== IGNORE_FILE) hidden++;
          await dropStaleTemp(path.join(this.dir, ...p.split('/')));
        } else if (e.isSymbolicLink()) {
          skipped.push({ path: key, reason: 'a symbolic link: not followed' });
        } else if (!e.isFile()) {
          skipped.push({ path: key, reason: 'not a regular file' });
        } else if (files.has(key)) {
          // a second Unicode form of one name: it cannot sync under that name (the server holds
          // NFC names), so it takes a conflict name of its own here, and goes up as that
          const base = (c: string) => c.slice(c.lastIndexOf('/') + 1);
          const raw = (c: string) => path.join(this.dir, ...rel.split('/').filter(Boolean), base(c));
          const copy = conflictName(key, this.device, new Date(), (c) => files.has(c) || existsSync(raw(c)));
          try {
            await fs.rename(path.join(this.dir, ...p.split('/')), raw(copy));
            const st = await fs.lstat(raw(copy));
            files.set(copy, { size: st.size, mtimeMs: st.mtimeMs });
            if (rel + base(copy) !== copy) this.onDisk.set(copy, rel + base(copy));
            skipped.push({ path: key, reason: `two names on disk for one name (Unicode forms): the second is renamed to ${copy}` });
          } catch (err) {
            skipped.push({ path: key, reason: `two names on disk for one name (Unicode forms), and the second cannot be renamed: ${(err as Error).message}`, hold: true });
          }
        } else {
          try {
            const st = await fs.lstat(path.join(this.dir, ...p.split('/')));
            files.set(key, { size: st.size, mtimeMs: st.mtimeMs });
            if (key !== p) this.onDisk.set(key, p);
          } catch (err) {
            if (!ENOENT(err)) skipped.push({ path: key, reason: `cannot read: ${(err as Error).message}`, hold: true });
          }
        }
      }
    };
    await walk('');
    return { files, dirs, skipped, hidden };
  }

  hash(p: string) {
    return rootOf(this.file(p));
  }

  async stat(p: string): Promise<Stat | null> {
    try {
      const st = await fs.lstat(this.file(p));
      return st.isFile() ? { size: st.size, mtimeMs: st.mtimeMs } : null;
    } catch (e) {
      if (ENOENT(e)) return null;
      throw e;
    }
  }

  async rename(from: string, to: string, prune: boolean): Promise<void> {
    const src = this.file(from);
    const dst = path.join(this.dir, ...to.split('/'));
    await fs.mkdir(path.dirname(dst), { recursive: true });
    if (from.toLowerCase() === to.toLowerCase()) {
      // a case-only rename: through a name of its own, so that case-insensitive systems see it
      const tmp = `${dst}.dsync-tmp-${process.pid}`;
      await fs.rename(src, tmp);
      await fs.rename(tmp, dst);
    } else {
      if (await this.exists(dst)) throw new Error(`${to} exists here`);
      await fs.rename(src, dst);
    }
    this.onDisk.delete(from);
    if (prune) await this.pruneUp(path.dirname(src));
  }

  async mkdir(p: string): Promise<void> {
    await fs.mkdir(path.join(this.dir, ...p.split('/')), { recursive: true });
  }

  async rmdir(p: string): Promise<boolean> {
    try {
      await fs.rmdir(path.join(this.dir, ...(this.onDisk.get(p) ?? p).split('/')));
      return true;
    } catch (e) {
      if (ENOENT(e)) return true;
      if ((e as NodeJS.ErrnoException).code === 'ENOTEMPTY' || (e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
  }

  async remove(p: string, prune: boolean): Promise<void> {
    const f = this.file(p);
    await fs.rm(f, { force: true });
    this.onDisk.delete(p);
    if (prune) await this.pruneUp(path.dirname(f));
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

  /** Removes folders left empty, up to (not including) the synced folder. */
  private async pruneUp(d: string) {
    const top = path.resolve(this.dir);
    for (let cur = path.resolve(d); cur.startsWith(top + path.sep); cur = path.dirname(cur)) {
      try {
        await fs.rmdir(cur);
      } catch {
        return;
      }
    }
  }
}

export interface RemoteOptions {
  values: Values;
  /** the server folder, '' for the top */
  folder: string;
  tree: NodeTree;
  device: string;
  known?: KnownVersions;
  /** reconnects of one transfer after a lost connection (default SYNC_RETRIES) */
  retries?: number;
  now?: () => Date;
}

/** The server folder (shared/src/sync-remote.ts) with the local files on node:fs. */
export class HttpFolder extends ApiFolder {
  constructor(private readonly o: RemoteOptions) {
    super({ call: (method, p, body) => api(o.values, method, p, body), statusOf: (e) => (e instanceof ApiError ? e.status : undefined), folder: o.folder, url: syncUrl(o.values), WebSocket: webSocket(o.values), known: o.known, now: o.now });
  }

  async push(p: string, expect: Expect) {
    const fh = await fs.open(this.o.tree.file(p), 'r');
    try {
      const st = await fh.stat();
      const r = await push(fileSource(fh, st.size), this.pushOptions(p, expect, this.o.retries ?? SYNC_RETRIES));
      return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs };
    } finally {
      await fh.close();
    }
  }

  async pull(p: string, version: number, expect: Expected | null, basis?: string) {
    // the name on disk where the file is there (a name not in NFC keeps its own form)
    const target = this.o.tree.file(p);
    await fs.mkdir(path.dirname(target), { recursive: true });
    const tmp = path.join(path.dirname(target), `.${path.basename(target)}.dsync-tmp-${process.pid}`);
    const basisFh = basis ? await fs.open(this.o.tree.file(basis), 'r').catch(() => null) : null;
    const out = await fs.open(tmp, 'w');
    let closed = false;
    try {
      const basisSize = basisFh ? (await basisFh.stat()).size : 0;
      const r = await pull(
        this.pullOptions(p, version, {
          basis: basisFh ? fileSource(basisFh, basisSize) : null,
          sink: {
            write: async (b) => void (await out.write(b)),
            commit: async () => {
              await out.sync();
              await out.close();
              closed = true;
              return 0;
            },
            abort: async () => {},
          },
        }),
      );
      // replace the local file only while it is what the plan read (its content too)
      await verifyLocal(this.o.tree, p, expect);
      await fs.rename(tmp, target);
      const st = await fs.stat(target);
      return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs };
    } finally {
      if (!closed) await out.close().catch(() => {});
      await fs.rm(tmp, { force: true });
      await basisFh?.close();
    }
  }
}
