// Devices for the sync engine's tests: each a local folder, its own state and known-version
// directories, and the engine wired to the CLI's real I/O (cli/node-tree.ts, cli/http-folder.ts) against a real
// server on a loopback port.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { FileKnown } from '../known.ts';
import { NodeTree } from '../node-tree.ts';
import { HttpFolder } from '../http-folder.ts';
import { FileState } from '../sync-state.ts';
import { type EngineOptions, type Expected, type FolderSyncReport, type LocalTree, type Stat, type SyncState, syncUntilStill, verifyLocal } from '../../shared/src/sync/engine.ts';
import { bytesToHex as hex } from '@noble/hashes/utils';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { pull, push } from '../../shared/src/session/delta-client.ts';
import { ApiFolder } from '../../shared/src/sync/remote.ts';
import type { Agreed, Expect } from '../../shared/src/sync/plan.ts';
import { ApiError, api, syncUrl, webSocket } from '../remote.ts';
import type { TestServer } from '../../harness/helpers.ts';

export interface Device {
  name: string;
  dir: string;
  cache: string;
  sync(o?: Partial<EngineOptions> & { interruptAfterMs?: number }): Promise<FolderSyncReport>;
}

export function device(s: { url: string }, root: string, name: string, folder = 'proj'): Device {
  const dir = path.join(root, name, 'files');
  const cache = path.join(root, name, 'cache');
  mkdirSync(dir, { recursive: true });
  return {
    name,
    dir,
    cache,
    async sync(o = {}) {
      const values = { server: s.url };
      const tree = new NodeTree(dir);
      const remote = new HttpFolder({ values, folder, tree, device: name, known: new FileKnown(path.join(cache, 'known')), retries: 0, now: o.now });
      const state = new FileState({ server: s.url, folder, dir }, path.join(cache, 'sync'));
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      if (o.interruptAfterMs !== undefined) {
        // cut the sync off: stop between actions, and drop the connections mid-transfer
        timer = setTimeout(() => {
          controller.abort();
          remote.close();
        }, o.interruptAfterMs);
      }
      try {
        return await syncUntilStill(tree, remote, state, { device: name, maxDeleteShare: 1, maxDeleteMin: 0, ignored: (p) => tree.ignored(p), signal: controller.signal, ...o });
      } finally {
        clearTimeout(timer);
        remote.close();
      }
    },
  };
}

export const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex').slice(0, 16);

/** Every file under `dir` (relative '/' paths, NFC as the server names them; `raw`: as on disk)
 *  and its content's hash. */
export function treeOf(dir: string, raw = false): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string) => {
    for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.set(raw ? p : p.normalize('NFC'), sha(readFileSync(path.join(dir, p))));
    }
  };
  if (statSync(dir, { throwIfNoEntry: false })) walk('');
  return out;
}

/** The latest content of every file under `folder` on the server, and every content any version
 *  of any file holds (trash included). */
export async function serverOf(s: TestServer, folder = 'proj'): Promise<{ latest: Map<string, string>; ever: Set<string> }> {
  const store = await s.storeOf('local');
  const latest = new Map<string, string>();
  const ever = new Set<string>();
  for (const f of await store.list('')) {
    for (const v of await store.versionNumbers(f.name)) {
      const h = sha(await store.bytes(f.name, v));
      ever.add(h);
      if (v === f.latest && f.name.startsWith(folder + '/')) latest.set(f.name.slice(folder.length + 1), h);
    }
  }
  return { latest, ever };
}

/** A seeded generator (mulberry32). */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
    bytes(n: number) {
      const b = Buffer.alloc(n);
      for (let i = 0; i < n; i++) b[i] = Math.floor(next() * 256);
      return b;
    },
  };
}

// ---- a case-insensitive local tree in memory ---------------------------------------------------
// This machine's kernel mounts neither a casefold ext4 (no CONFIG_UNICODE) nor vfat, so the
// case-insensitive file system of the tests is this tree: names keep their case, and a lookup,
// write or rename finds a name whatever its case (as APFS and NTFS do); its server folder is the
// real one (REST and the delta push and pull against the real server).

interface MemEntry {
  name: string;
  bytes: Buffer;
  mtimeMs: number;
}

export class CaselessTree implements LocalTree {
  readonly files = new Map<string, MemEntry>();
  readonly dirs = new Map<string, string>();
  private clock = 1_000_000;
  fold(p: string) {
    return p.normalize('NFC').toLowerCase();
  }
  /** writes `p` as a program would: an existing name (in any case) keeps its own case */
  write(p: string, bytes: Buffer) {
    const k = this.fold(p);
    const e = this.files.get(k);
    this.files.set(k, { name: e?.name ?? p, bytes, mtimeMs: (this.clock += 1000) });
    const parts = p.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/');
      if (!this.dirs.has(this.fold(d))) this.dirs.set(this.fold(d), d);
    }
  }
  contents(): Map<string, string> {
    return new Map([...this.files.values()].map((e) => [e.name, sha(e.bytes)]));
  }
  async scan() {
    return { files: new Map([...this.files.values()].map((e) => [e.name, { size: e.bytes.length, mtimeMs: e.mtimeMs }])), dirs: new Set(this.dirs.values()), skipped: [] };
  }
  async hash(p: string) {
    const e = this.files.get(this.fold(p));
    if (!e) throw Object.assign(new Error(`${p}: no such file`), { code: 'ENOENT' });
    const index = await chunkSource(bufferSource(e.bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
    return { hash: hex(index.root), size: e.bytes.length, mtimeMs: e.mtimeMs };
  }
  async stat(p: string): Promise<Stat | null> {
    const e = this.files.get(this.fold(p));
    return e ? { size: e.bytes.length, mtimeMs: e.mtimeMs } : null;
  }
  async rename(from: string, to: string) {
    const e = this.files.get(this.fold(from));
    if (!e) throw new Error(`${from}: no such file`);
    if (this.fold(from) !== this.fold(to) && this.files.has(this.fold(to))) throw new Error(`${to} exists here`);
    this.files.delete(this.fold(from));
    this.files.set(this.fold(to), { ...e, name: to });
  }
  async remove(p: string) {
    this.files.delete(this.fold(p));
  }
  async mkdir(p: string) {
    if (!this.dirs.has(this.fold(p))) this.dirs.set(this.fold(p), p);
  }
  async rmdir(p: string) {
    const under = this.fold(p) + '/';
    if ([...this.files.keys(), ...this.dirs.keys()].some((k) => k.startsWith(under))) return false;
    this.dirs.delete(this.fold(p));
    return true;
  }
}

/** The real server folder, with the local files in a CaselessTree. */
export class CaselessFolder extends ApiFolder {
  constructor(
    private readonly tree: CaselessTree,
    url: string,
    folder: string,
  ) {
    const values = { server: url };
    super({ call: (method, p, body) => api(values, method, p, body), statusOf: (e) => (e instanceof ApiError ? e.status : undefined), folder, url: syncUrl(values), WebSocket: webSocket(values) });
  }
  async push(p: string, expect: Expect) {
    const e = this.tree.files.get(this.tree.fold(p));
    if (!e) throw new Error(`${p}: no such file`);
    const r = await push(bufferSource(e.bytes), this.pushOptions(p, expect, 0));
    return { version: r.version, root: r.root, size: e.bytes.length, mtimeMs: e.mtimeMs };
  }
  async pull(p: string, version: number, expect: Expected | null, basis?: string) {
    const parts: Buffer[] = [];
    const b = basis ? this.tree.files.get(this.tree.fold(basis)) : undefined;
    const r = await pull(this.pullOptions(p, version, { basis: b ? bufferSource(b.bytes) : null, sink: { write: async (x) => void parts.push(Buffer.from(x)), commit: async () => 0, abort: async () => {} } }));
    await verifyLocal(this.tree, p, expect);
    this.tree.write(p, Buffer.concat(parts));
    return { version: r.version, root: r.root, ...(await this.tree.stat(p))! };
  }
}

/** A device whose folder is a CaselessTree. */
export function caselessDevice(s: { url: string }, name: string, folder = 'proj') {
  const tree = new CaselessTree();
  const files = new Map<string, Agreed>();
  const folders = new Set<string>();
  const state: SyncState = { files, folders, save: async () => {} };
  return {
    tree,
    async sync(o: Partial<EngineOptions> = {}) {
      const remote = new CaselessFolder(tree, s.url, folder);
      try {
        return await syncUntilStill(tree, remote, state, { device: name, maxDeleteShare: 1, maxDeleteMin: 0, ...o });
      } finally {
        remote.close();
      }
    },
  };
}
