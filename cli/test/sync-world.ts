// Devices for the sync engine's tests: each a local folder, its own state and known-version
// directories, and the engine wired to the CLI's real I/O (cli/sync-io.ts) against a real
// server on a loopback port.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { FileKnown } from '../known.ts';
import { HttpFolder, NodeTree } from '../sync-io.ts';
import { FileState } from '../sync-state.ts';
import { type EngineOptions, type FolderSyncReport, syncUntilStill } from '../../shared/src/sync-engine.ts';
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
      const remote = new HttpFolder({ values, folder, tree, device: name, known: new FileKnown(path.join(cache, 'known')), retries: 0 });
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

/** Every file under `dir` (relative '/' paths) and its content's hash. */
export function treeOf(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string) => {
    for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.set(p, sha(readFileSync(path.join(dir, p))));
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
