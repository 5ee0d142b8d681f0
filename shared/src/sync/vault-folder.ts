/**
 * A vault as the two-way engine's server side (engine.ts `RemoteFolder`; docs/vaults.md,
 * "Folder sync"), so `dsync sync DIR --vault ID` runs the same engine as a plain folder:
 * - the listing is the tree's live files, each with its newest version's number, size and
 *   root (over its chunks' keyed ids, kept sealed in the tree: the engine compares it with the
 *   local file's, which the CLI's tree computes with the vault's keys, `Vault.rootOf`; a
 *   version an earlier dsync wrote has its root from its manifest, asked for when needed);
 * - a push is `Vault.push` with the engine's expectation (that version, or no live file),
 *   checked against every head it reads: another device's version there first is StaleBasis;
 * - a pull is `Vault.pull` into a temporary file that replaces the local file only while it
 *   is what the plan read (`VaultFolderFiles.write`, the CLI's write path); every chunk
 *   written was checked against its keyed id, and the ids against the tree's root;
 * - a delete is `Vault.rm` (the versions stay in the vault's history, no trash folder); a
 *   rename `Vault.mv` (onto a deleted file's name: a new version of it, `from` deleted); a
 *   folder's rename or delete one change of the tree (`mvMany`, `rmMany`: one head, all or
 *   none); a vault keeps no empty folders.
 * - small files go up in one change of the tree (`pushMany`: shared packs, one head; a file
 *   whose expectation fails is StaleBasis, the others land) and come down together
 *   (`pullMany`: their manifests and chunks fetched together, each checked as a pull checks
 *   it before it is written).
 * One change at a time: each reads the head and writes one, and two at once would only race
 * each other's compare-and-swap.
 */
import { BULK_FILE_MAX } from '../base/limits.ts';
import { type Source, bufferSource } from '../chunking/chunk-index.ts';
import { RemoteError } from '../transport/conn.ts';
import { ErrorCode } from '../wire/protocol.ts';
import { type Tree, VaultChanged, VaultError, hex } from '../vault/format.ts';
import { byName, last } from '../vault/tree.ts';
import type { Vault } from '../vault/vault.ts';
import { type Expected, type RemoteFolder, RemoteChanged, type Settled, type Skipped, type Stat } from './engine.ts';
import type { Expect, RemoteFile } from './plan.ts';
import { listedNameFits } from './remote.ts';

/** The local files of a vault's transfers: each side's own (cli/node-tree.ts `NodeFiles`). */
export interface VaultFolderFiles {
  /** runs `fn` with the local file `path` open (through no link) and its stat when opened */
  read<T>(path: string, fn: (source: Source, st: Stat) => Promise<T>): Promise<T>;
  /** writes the local `path` through a temporary file beside it: `fill` writes the bytes in
   *  order (given the local file `basis` open, if any) and answers their mtime; the temporary
   *  file replaces `path` only while `verifyLocal(expect)` holds (LocalChanged otherwise);
   *  the stat after */
  write(path: string, expect: Expected | null, basis: string | undefined, fill: (write: (bytes: Uint8Array) => Promise<void>, basis: Source | undefined) => Promise<{ mtime: number }>): Promise<Stat>;
}

/** A vault's refusal because another device changed it first, as the engine reads one. */
function changed<T>(e: unknown, as: (m: string) => T): T | unknown {
  return e instanceof VaultChanged ? as(e.message) : e;
}

export class VaultFolder implements RemoteFolder {
  /** the tree of the last listing, for `root` */
  private last: Tree | null = null;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly vault: Vault,
    private readonly files: VaultFolderFiles,
    private readonly o: { windows?: boolean } = {},
  ) {}

  /** `fn` after every change asked before it */
  private one<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => {});
    return run;
  }

  async list(): Promise<{ files: Map<string, RemoteFile>; folders: null; skipped: Skipped[] }> {
    const tree = await this.one(() => this.vault.tree());
    this.last = tree;
    const files = new Map<string, RemoteFile>();
    const skipped: Skipped[] = [];
    for (const f of tree.files) {
      if (f.deleted || !listedNameFits(f.name, f.name, this.o, skipped)) continue;
      const v = last(f);
      files.set(f.name, { version: v.n, size: v.size, ...(v.root && { root: hex(v.root) }) });
    }
    return { files, folders: null, skipped };
  }

  async root(path: string, version: number): Promise<string | undefined> {
    const find = (t: Tree | null) => t && byName(t, path)?.versions.find((v) => v.n === version);
    const v = find(this.last) ?? find((this.last = await this.one(() => this.vault.tree())));
    if (!v) throw new RemoteChanged(`${path} has no version ${version} in the vault`);
    return hex(v.root ?? (await this.one(() => this.vault.versionRoot(path, version))));
  }

  async versions(path: string): Promise<number[]> {
    const f = byName(await this.one(() => this.vault.tree()), path);
    return f && !f.deleted ? f.versions.map((v) => v.n) : [];
  }

  push(path: string, expect: Expect) {
    return this.one(() =>
      this.files.read(path, async (source, st) => {
        try {
          const r = await this.vault.push(path, source, st.mtimeMs, { expect });
          return { version: r.version, root: r.root, size: st.size, mtimeMs: st.mtimeMs };
        } catch (e) {
          throw changed(e, (m) => new RemoteError(ErrorCode.StaleBasis, m));
        }
      }),
    );
  }

  /** Small files up in one change of the vault (`Vault.pushMany`: shared packs, one head):
   *  each read whole first, its stat taken as it was opened (a file grown above BULK_FILE_MAX
   *  since the plan read it is pushed on its own); each outcome as `push` gives it. */
  async pushMany(items: { path: string; expect: Expect }[]): Promise<Settled<{ version: number; root: string } & Stat>[]> {
    const read = await Promise.all(
      items.map((it) =>
        this.files
          .read(it.path, async (source, st) => {
            if (st.size > BULK_FILE_MAX) return null;
            const bytes = (await source.read(0, st.size)).slice();
            if (bytes.length !== st.size) throw new VaultError(`${JSON.stringify(it.path)} shrank while it was read`);
            return { bytes, st };
          })
          .catch((error: unknown) => ({ error })),
      ),
    );
    const batch = items.flatMap((it, k) => {
      const r = read[k];
      return r && 'bytes' in r ? [{ k, name: it.path, source: bufferSource(r.bytes), mtime: r.st.mtimeMs, expect: it.expect }] : [];
    });
    const sent = batch.length ? await this.one(() => this.vault.pushMany(batch)).catch((error: unknown) => batch.map(() => ({ error }))) : [];
    const at = new Map(batch.map((b, i) => [b.k, i]));
    const out: Settled<{ version: number; root: string } & Stat>[] = [];
    for (const [k, it] of items.entries()) {
      const r = read[k];
      if (r === null) out.push(await this.push(it.path, it.expect).then((ok) => ({ ok }), (error: unknown) => ({ error })));
      else if ('error' in r) out.push(r);
      else {
        const got = sent[at.get(k)!];
        out.push('error' in got ? { error: changed(got.error, (m) => new RemoteError(ErrorCode.StaleBasis, m)) } : { ok: { version: got.ok.version, root: got.ok.root, size: r.st.size, mtimeMs: r.st.mtimeMs } });
      }
    }
    return out;
  }

  /** Small files down in one batch (`Vault.pullMany`: their manifests and chunks fetched
   *  together), each written as `pull` writes one: through a temporary file, its bytes hashed
   *  and refused unless they are the tree's root, renamed over the local file only while it is
   *  what the plan read. */
  async pullMany(items: { path: string; version: number; expect: Expected | null }[]): Promise<Settled<{ version: number; root: string } & Stat>[]> {
    const { files } = await this.one(() =>
      this.vault.pullMany(
        items.map((it) => ({ name: it.path, version: it.version })),
        async (k, bytes, file) => {
          const st = await this.files.write(items[k].path, items[k].expect, undefined, async (write) => {
            await write(bytes);
            return { mtime: file.mtime };
          });
          return { version: file.version, root: file.root, ...st };
        },
      ),
    ).catch((error: unknown) => ({ files: items.map(() => ({ error })) }));
    return files;
  }

  pull(path: string, version: number, expect: Expected | null, basis?: string) {
    return this.one(async () => {
      let root = '';
      const st = await this.files.write(path, expect, basis, async (write, local) => {
        const r = await this.vault.pull(path, write, local, { version });
        root = r.root;
        return { mtime: r.mtime };
      });
      return { version, root, ...st };
    });
  }

  /** `to`'s newest version and root in the tree now */
  private async latest(to: string): Promise<{ version: number; root: string }> {
    const f = byName(await this.vault.tree(), to);
    if (!f || f.deleted) throw new RemoteChanged(`${to} is not in the vault after its rename`);
    const v = last(f);
    return { version: v.n, root: hex(v.root ?? (await this.vault.versionRoot(to, v.n))) };
  }

  /** A rename (`Vault.mv`: onto the name of a deleted file, `from`'s newest version becomes a
   *  new version of that file and `from` is deleted, both histories kept, in one change). */
  move(from: string, to: string, expect: { version: number }) {
    return this.one(async () => {
      try {
        await this.vault.mv(from, to, { version: expect.version });
      } catch (e) {
        throw changed(e, (m) => new RemoteChanged(m));
      }
      return this.latest(to);
    });
  }

  moveFolder(from: string, to: string, versions: ReadonlyMap<string, number>) {
    return this.one(async () => {
      try {
        await this.vault.mvMany([...versions].map(([rel, version]) => ({ from: `${from}/${rel}`, to: `${to}/${rel}`, version })));
      } catch (e) {
        throw changed(e, (m) => new RemoteChanged(m));
      }
      const tree = await this.vault.tree();
      const got = new Map<string, number>();
      for (const rel of versions.keys()) {
        const f = byName(tree, `${to}/${rel}`);
        if (f && !f.deleted) got.set(rel, last(f).n);
      }
      return got;
    });
  }

  /** The files deleted in one change; their versions stay in the vault's history (no trash
   *  folder: '' says so). */
  trashFolder(path: string, versions: ReadonlyMap<string, number>, _trashStamp?: string) {
    return this.one(async () => {
      try {
        await this.vault.rmMany([...versions].map(([rel, version]) => ({ name: `${path}/${rel}`, version })));
      } catch (e) {
        throw changed(e, (m) => new RemoteChanged(m));
      }
      return '';
    });
  }

  remove(path: string, expect: { version: number }, _trashStamp?: string) {
    return this.one(async () => {
      try {
        await this.vault.rm(path, { version: expect.version });
      } catch (e) {
        throw changed(e, (m) => new RemoteChanged(m));
      }
      return '';
    });
  }

  /** a vault keeps no empty folders */
  async makeFolder(): Promise<boolean> {
    return false;
  }

  async removeFolder(): Promise<boolean> {
    return false;
  }
}
