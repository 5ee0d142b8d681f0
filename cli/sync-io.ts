/**
 * The sync engine's I/O in the CLI (shared/src/sync-engine.ts): the local folder on node:fs,
 * the server folder through the REST API (listing, versions, moves, the trash) and the delta
 * push and pull (shared/src/sync-client.ts) on shared connections.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import ignore from 'ignore';
import '../shared/src/wasm.ts';
import { chunkSource } from '../shared/src/chunk-index.ts';
import { fileSource } from '../shared/src/file-source.ts';
import type { KnownVersions } from '../shared/src/known.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../shared/src/protocol.ts';
import { Connection, pull, push } from '../shared/src/sync-client.ts';
import { LocalChanged, type LocalTree, type RemoteFolder, type Stat } from '../shared/src/sync-engine.ts';
import type { RemoteFile } from '../shared/src/sync-plan.ts';
import { SYNC_RETRIES } from '../shared/src/limits.ts';
import type { Values } from './command.ts';
import { ApiError, api, syncUrl, webSocket } from './remote.ts';

/** The folder on the server that holds what sync deletes, with its history (docs/sync.md). */
export const TRASH = '.dsync-trash';

/** The ignore file in a synced folder (gitignore syntax). */
export const IGNORE_FILE = '.dsyncignore';

/** Always ignored: temporary files of editors and systems, and the engine's own. */
export const DEFAULT_IGNORES = ['.DS_Store', 'Thumbs.db', 'desktop.ini', '*.tmp', '*.swp', '*.swo', '*~', '~$*', '.#*', '.~lock.*#', '*.dsync-tmp-*', `/${TRASH}/`];

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** The ignore rules of a folder: the defaults and its .dsyncignore (read again each pass). */
export async function ignoreRules(dir: string): Promise<(p: string, isDir?: boolean) => boolean> {
  const ig = ignore().add(DEFAULT_IGNORES);
  try {
    ig.add(await fs.readFile(path.join(dir, IGNORE_FILE), 'utf8'));
  } catch {
    // no ignore file
  }
  return (p, isDir) => ig.ignores(isDir ? p + '/' : p);
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
  ignored: (p: string, isDir?: boolean) => boolean = () => false;

  constructor(readonly dir: string) {}

  /** where `p` is on disk */
  file(p: string): string {
    return path.join(this.dir, ...(this.onDisk.get(p) ?? p).split('/'));
  }

  async scan() {
    this.ignored = await ignoreRules(this.dir);
    const files = new Map<string, Stat>();
    const dirs = new Set<string>();
    const skipped: { path: string; reason: string; hold?: boolean }[] = [];
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
          if (this.ignored(key, true)) continue;
          dirs.add(key);
          await walk(p + '/');
        } else if (this.ignored(key)) {
          await dropStaleTemp(path.join(this.dir, ...p.split('/')));
        } else if (e.isSymbolicLink()) {
          skipped.push({ path: key, reason: 'a symbolic link: not followed' });
        } else if (!e.isFile()) {
          skipped.push({ path: key, reason: 'not a regular file' });
        } else if (files.has(key)) {
          skipped.push({ path: key, reason: 'two names on disk for one name (Unicode forms)', hold: true });
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
    return { files, dirs, skipped };
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

/** Files per page of the server's recursive listing. */
const LIST_PAGE = 5000;

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

export class HttpFolder implements RemoteFolder {
  private readonly url: string;
  private readonly WebSocket: any;
  /** open connections not in use; a transfer takes one (or opens one) and gives it back */
  private idle: Connection[] = [];
  private all = new Set<Connection>();
  /** the server refused to make a folder: it keeps no empty folders */
  private noFolders = false;

  constructor(private readonly o: RemoteOptions) {
    this.url = syncUrl(o.values);
    this.WebSocket = webSocket(o.values);
  }

  /** the name on the server of a path in the folder */
  full(p: string) {
    return this.o.folder ? `${this.o.folder}/${p}` : p;
  }

  /** Runs `fn` with a connection function of its own: transfers at once never share one. */
  private async leased<T>(fn: (connection: (u: string) => Promise<Connection>) => Promise<T>): Promise<T> {
    const mine: Connection[] = [];
    const connection = async (u: string) => {
      const own = mine.find((c) => c.url === u && c.usable);
      if (own) return own;
      const i = this.idle.findIndex((c) => c.url === u && c.usable);
      const c = i >= 0 ? this.idle.splice(i, 1)[0] : await Connection.open(u, this.WebSocket);
      this.all.add(c);
      mine.push(c);
      return c;
    };
    try {
      return await fn(connection);
    } finally {
      for (const c of mine) {
        if (c.usable) this.idle.push(c);
        else this.all.delete(c); // closed by a failed session
      }
    }
  }

  close() {
    for (const c of this.all) c.close();
    this.all.clear();
    this.idle = [];
  }

  async list(): Promise<{ files: Map<string, RemoteFile>; folders: Set<string> | null }> {
    const prefix = this.o.folder ? this.o.folder + '/' : '';
    const out = new Map<string, RemoteFile>();
    let folders: Set<string> | null = new Set<string>();
    const inTrash = (p: string) => !prefix && (p === TRASH || p.startsWith(TRASH + '/'));
    let cursor: string | null = '';
    do {
      const q: URLSearchParams = new URLSearchParams({ prefix, recursive: '1', limit: String(LIST_PAGE), ...(cursor && { cursor }) });
      const page: { files: { name: string; latest: number; size: number }[]; folders?: unknown; next: string | null } = await api(this.o.values, 'GET', `/api/files?${q}`);
      if (!Array.isArray(page?.files)) throw new Error('the server does not list folders recursively: it needs an update');
      for (const f of page.files) {
        if (typeof f.name !== 'string' || !f.name.startsWith(prefix) || !Number.isSafeInteger(f.latest) || !Number.isSafeInteger(f.size)) throw new Error('the server sent a malformed listing');
        const p = f.name.slice(prefix.length);
        if (!inTrash(p)) out.set(p, { version: f.latest, size: f.size });
      }
      if (!Array.isArray(page.folders)) folders = null;
      for (const d of folders ? (page.folders as unknown[]) : []) {
        if (typeof d !== 'string' || !d.startsWith(prefix) || !d.endsWith('/') || d.length <= prefix.length + 1) throw new Error('the server sent a malformed listing');
        const p = d.slice(prefix.length, -1);
        if (!inTrash(p)) folders!.add(p);
      }
      cursor = page.next;
    } while (cursor);
    // a server that lists no folders beside files in folders keeps no empty folders either
    if (this.noFolders || (folders && !folders.size && [...out.keys()].some((p) => p.includes('/')))) folders = null;
    return { files: out, folders };
  }

  private async versionList(p: string): Promise<{ version: number; root: string; algo: number }[]> {
    let list: unknown;
    try {
      list = await api(this.o.values, 'GET', `/api/versions?${new URLSearchParams({ name: this.full(p) })}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return [];
      throw e;
    }
    const ok = (v: any) => Number.isSafeInteger(v?.version) && v.version > 0 && typeof v.root === 'string' && Number.isSafeInteger(v.algo);
    if (!Array.isArray(list) || !list.every(ok)) throw new Error(`the server sent a malformed version list of ${p}`);
    return list;
  }

  async root(p: string, version: number) {
    const v = (await this.versionList(p)).find((x) => x.version === version);
    return v && v.algo === DEFAULT_ALGO ? v.root : undefined;
  }

  async versions(p: string) {
    return (await this.versionList(p)).map((v) => v.version).sort((a, b) => a - b);
  }

  async push(p: string, basisVersion: number) {
    const fh = await fs.open(this.o.tree.file(p), 'r');
    try {
      const st = await fh.stat();
      const r = await this.leased((connection) => push(fileSource(fh, st.size), { url: this.url, name: this.full(p), WebSocket: this.WebSocket, connection, expect: basisVersion ? { version: basisVersion } : 'absent', retries: this.o.retries ?? SYNC_RETRIES, known: this.o.known }));
      return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs };
    } finally {
      await fh.close();
    }
  }

  async pull(p: string, version: number, expect: Stat | null, basis?: string) {
    const target = path.join(this.o.tree.dir, ...p.split('/'));
    await fs.mkdir(path.dirname(target), { recursive: true });
    const tmp = path.join(path.dirname(target), `.${path.basename(target)}.dsync-tmp-${process.pid}`);
    const basisFh = basis ? await fs.open(this.o.tree.file(basis), 'r').catch(() => null) : null;
    const out = await fs.open(tmp, 'w');
    let closed = false;
    try {
      const basisSize = basisFh ? (await basisFh.stat()).size : 0;
      const r = await this.leased((connection) => pull({
        url: this.url,
        name: this.full(p),
        version,
        WebSocket: this.WebSocket,
        connection,
        known: this.o.known,
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
      }));
      // replace the local file only while it is what the plan read
      if (!sameStat(await this.o.tree.stat(p), expect)) throw new LocalChanged(`${p} changed here during the download`);
      await fs.rename(tmp, target);
      const st = await fs.stat(target);
      return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs };
    } finally {
      if (!closed) await out.close().catch(() => {});
      await fs.rm(tmp, { force: true });
      await basisFh?.close();
    }
  }

  async move(from: string, to: string) {
    await api(this.o.values, 'POST', '/api/files/move', { from: this.full(from), to: this.full(to) });
    const vs = await this.versions(to);
    return vs[vs.length - 1];
  }

  async remove(p: string) {
    const when = (this.o.now ?? (() => new Date()))();
    const q = (n: number) => String(n).padStart(2, '0');
    const stamp = `${when.getFullYear()}-${q(when.getMonth() + 1)}-${q(when.getDate())} ${q(when.getHours())}${q(when.getMinutes())}${q(when.getSeconds())}`;
    for (let n = 1; ; n++) {
      const to = `${TRASH}/${stamp}${n > 1 ? ` ${n}` : ''}/${this.full(p)}`;
      try {
        await api(this.o.values, 'POST', '/api/files/move', { from: this.full(p), to });
        return to;
      } catch (e) {
        // the same name deleted twice in one second: the next slot
        if (!(e instanceof ApiError && e.status === 409) || n >= 100) throw e;
      }
    }
  }

  async makeFolder(p: string) {
    try {
      await api(this.o.values, 'POST', '/api/folders', { name: this.full(p) });
      return true;
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404)) throw e;
      this.noFolders = true; // a server without empty folders
      return false;
    }
  }

  async removeFolder(p: string) {
    // only while nothing is under it: a subfolder is looked for here; a file, by the server
    // (empty=1 removes no file, and refuses with 409 while one is there)
    const q = new URLSearchParams({ prefix: this.full(p) + '/', recursive: '1', limit: '1' });
    const under = await api<{ files: unknown[]; folders?: unknown[] }>(this.o.values, 'GET', `/api/files?${q}`);
    if (under.files.length || under.folders?.length) return false;
    try {
      await api(this.o.values, 'DELETE', `/api/folders?${new URLSearchParams({ name: this.full(p), empty: '1' })}`);
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) return false; // a file landed meanwhile
      if (!(e instanceof ApiError && e.status === 404)) throw e; // gone already
    }
    return true;
  }
}

const sameStat = (a: Stat | null, b: Stat | null) => (a === null ? b === null : b !== null && a.size === b.size && a.mtimeMs === b.mtimeMs);
