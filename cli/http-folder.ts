/**
 * The sync engine's server side in the CLI (shared/src/sync/remote.ts `ApiFolder`): the server
 * folder through the REST API (listing, versions, moves, the trash, small files in bulk) and the
 * delta push and pull (shared/src/session/delta-client.ts) on shared connections, reading and
 * writing the local files through node-tree.ts.
 */
import { allLimited } from '../shared/src/base/limited.ts';
import { BULK_FILE_MAX, SYNC_RETRIES, SYNC_TRANSFERS } from '../shared/src/base/limits.ts';
import { fileSource } from '../shared/src/chunking/file-source.ts';
import { pull, push } from '../shared/src/session/delta-client.ts';
import type { KnownVersions } from '../shared/src/session/known.ts';
import type { Expected, Settled, Stat } from '../shared/src/sync/engine.ts';
import type { Expect } from '../shared/src/sync/plan.ts';
import { ApiFolder, NoBulk } from '../shared/src/sync/remote.ts';
import type { Values } from './command.ts';
import { openNoFollow } from './contained.ts';
import { type NodeTree, replaceLocal } from './node-tree.ts';
import { ApiError, api, apiBytes, syncUrl, webSocket } from './remote.ts';

/** `fn` of every item, SYNC_TRANSFERS at once (as the engine runs transfers), in order. */
const oneByOne = <I, O>(items: I[], fn: (item: I) => Promise<O>) => allLimited(items, SYNC_TRANSFERS, fn);

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

/** The server folder (shared/src/sync/remote.ts) with the local files on node:fs. */
export class HttpFolder extends ApiFolder {
  constructor(private readonly o: RemoteOptions) {
    super({ call: (method, p, body) => api(o.values, method, p, body), send: (p, body, type) => apiBytes(o.values, p, body, type), statusOf: (e) => (e instanceof ApiError ? e.status : undefined), folder: o.folder, url: syncUrl(o.values), WebSocket: webSocket(o.values), known: o.known, now: o.now, windows: process.platform === 'win32' });
  }

  async push(p: string, expect: Expect) {
    const tree = this.o.tree;
    return tree.sending(p, async (fh, st, began) => {
      const planned = tree.takeIndex(p, st);
      const r = await push(fileSource(fh, st.size), { ...this.pushOptions(p, expect, this.o.retries ?? SYNC_RETRIES), modified: st.mtimeMs, index: planned?.index });
      // a push from the plan's index stores the content the plan read (the server's root check)
      return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs, ...(planned ? { readAt: planned.readAt, fsClock: planned.fsClock } : began) };
    });
  }

  /** Small files up in bulk (ApiFolder.sendMany): each read whole, with its mtime; a file
   *  grown above BULK_FILE_MAX since the plan read it is pushed on its own. */
  async pushMany(items: { path: string; expect: Expect }[]): Promise<Settled<{ version: number; root: string } & Stat>[]> {
    const tree = this.o.tree;
    const alone = (it: { path: string; expect: Expect }) => this.push(it.path, it.expect).then((ok) => ({ ok }), (error) => ({ error }));
    if (this.noBulk) return oneByOne(items, alone);
    const read = await Promise.all(
      items.map(async ({ path: p }): Promise<{ bytes: Uint8Array; st: Stat } | { error: unknown } | null> => {
        try {
          return await tree.sending(p, async (fh, st, began) => {
            if (st.size > BULK_FILE_MAX) return null;
            const bytes = new Uint8Array(st.size);
            for (let o = 0; o < st.size; ) {
              const { bytesRead } = await fh.read(bytes, o, st.size - o, o);
              if (!bytesRead) throw new Error(`${p} shrank while it was read`);
              o += bytesRead;
            }
            // the stat before the read, as a push records it: a change during the read leaves
            // another mtime on disk, so the next pass reads the file again
            return { bytes, st: { size: st.size, mtimeMs: st.mtimeMs, ...began } };
          });
        } catch (error) {
          return { error };
        }
      }),
    );
    const sendable = items.flatMap((it, k) => {
      const r = read[k];
      return r && 'bytes' in r ? [{ k, path: it.path, expect: it.expect, bytes: r.bytes, modified: r.st.mtimeMs }] : [];
    });
    const sent = await this.sendMany(sendable);
    /** where each item's answer is in `sent` */
    const at = new Map(sendable.map((x, i) => [x.k, i]));
    const out: Settled<{ version: number; root: string } & Stat>[] = [];
    for (let k = 0; k < items.length; k++) {
      const r = read[k];
      if (r === null) {
        out.push(await alone(items[k]));
        continue;
      }
      if ('error' in r) {
        out.push({ error: r.error });
        continue;
      }
      const got = sent[at.get(k)!];
      if ('error' in got && got.error instanceof NoBulk) out.push(await alone(items[k]));
      else out.push('error' in got ? got : { ok: { ...got.ok, ...r.st } });
    }
    return out;
  }

  /** Small files down in bulk (ApiFolder.fetchMany), each written as `pull` writes one: into a
   *  temporary file beside it, with the version's mtime, renamed over the file only while it is
   *  what the plan read. */
  async pullMany(items: { path: string; version: number; expect: Expected | null }[]): Promise<Settled<{ version: number; root: string } & Stat>[]> {
    const tree = this.o.tree;
    const alone = (it: { path: string; version: number; expect: Expected | null }) => this.pull(it.path, it.version, it.expect, it.expect ? it.path : undefined).then((ok) => ({ ok }), (error) => ({ error }));
    if (this.noBulk) return oneByOne(items, alone);
    const got = await this.fetchMany(items, async (k, bytes, modified) => {
      const r = await replaceLocal(tree, items[k].path, items[k].expect, async (out) => {
        await out.writeFile(bytes);
        return { modified };
      });
      return { version: items[k].version, size: r.size, mtimeMs: r.mtimeMs };
    });
    const out: Settled<{ version: number; root: string } & Stat>[] = [];
    for (let k = 0; k < items.length; k++) out.push('error' in got[k] && (got[k] as { error: unknown }).error instanceof NoBulk ? await alone(items[k]) : got[k]);
    return out;
  }

  async pull(p: string, version: number, expect: Expected | null, basis?: string) {
    const tree = this.o.tree;
    const basisFh = basis ? await openNoFollow(tree.file(basis)).catch(() => null) : null;
    try {
      const basisSize = basisFh ? (await basisFh.stat()).size : 0;
      return await replaceLocal(tree, p, expect, async (out) => {
        const r = await pull(
          this.pullOptions(p, version, {
            basis: basisFh ? fileSource(basisFh, basisSize) : null,
            // (replaceLocal syncs the file before it renames it in)
            sink: { write: async (b) => void (await out.write(b)), commit: async () => 0, abort: async () => {} },
          }),
        );
        return { version: r.version, root: r.root, modified: r.modified };
      });
    } finally {
      await basisFh?.close();
    }
  }
}

