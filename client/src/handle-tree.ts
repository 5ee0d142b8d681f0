/**
 * The picked folder of the page's folder sync as the sync engine's LocalTree
 * (shared/src/sync/engine.ts): a FileSystemDirectoryHandle, read, written through temporary
 * files and moved, in the sync worker (docs/web-client.md, "Keeping a folder in sync").
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { LocalChanged, type LocalTree, type Skipped, type Stat, sameStat } from '../../shared/src/sync/engine.ts';
import { IGNORE_FILE, ignoreMatcher } from '../../shared/src/sync/remote.ts';
import { blobSource } from './blob-source.ts';

export const named = (e: unknown, ...names: string[]) => e instanceof DOMException && names.includes(e.name);

/** An error the engine reads as "gone since the scan". */
const gone = (p: string) => Object.assign(new Error(`${p}: gone`), { code: 'ENOENT' });

export type Dir = FileSystemDirectoryHandle;
type Entry = FileSystemFileHandle | FileSystemDirectoryHandle;
const entries = (d: Dir) => (d as unknown as { values(): AsyncIterable<Entry> }).values();

/** The start of a temporary file's name (ignored: `*.dsync-tmp-*`): short and of a fixed
 *  length, so that it fits beside any name the server accepts. */
const TEMP = '.dsync-tmp-page-';
/** A new temporary name in the folder it is used in. */
const tempName = () => TEMP + Array.from(crypto.getRandomValues(new Uint8Array(4)), (b) => b.toString(16).padStart(2, '0')).join('');

/** A temporary file not written for this long is left over (no tab writes it now). */
const STALE_TEMP_MS = 3600_000;

/** Moves a file: FileSystemHandle.move where the browser has it, else a copy and then the
 *  original (in `from`, named `old`) removed. */
async function moveHandle(h: FileSystemFileHandle, dst: Dir, name: string, from?: Dir, old?: string) {
  const move = (h as unknown as { move?: (d: Dir, n: string) => Promise<void> }).move;
  if (move) return move.call(h, dst, name);
  const copy = await dst.getFileHandle(name, { create: true });
  const w = await copy.createWritable();
  await w.write(await h.getFile());
  await w.close();
  await (from ?? dst).removeEntry(old ?? h.name);
}

/** The picked folder. Paths are '/'-separated, NFC (a name on disk in another form keeps it). */
export class HandleTree implements LocalTree {
  private onDisk = new Map<string, string>();

  constructor(readonly root: Dir) {}

  /** the handle of the folder `parts` (made when `create`) */
  private async dir(parts: string[], create = false): Promise<Dir> {
    let d = this.root;
    for (const c of parts) d = await d.getDirectoryHandle(c, { create });
    return d;
  }

  private split(p: string) {
    const parts = (this.onDisk.get(p) ?? p).split('/');
    return { parents: parts.slice(0, -1), name: parts[parts.length - 1] };
  }

  /** the handle of the file `p` */
  async fileHandle(p: string, create = false): Promise<FileSystemFileHandle> {
    const { parents, name } = this.split(p);
    return (await this.dir(parents, create)).getFileHandle(name, { create });
  }

  async file(p: string): Promise<File> {
    try {
      return await (await this.fileHandle(p)).getFile();
    } catch (e) {
      if (named(e, 'NotFoundError', 'TypeMismatchError')) throw gone(p);
      throw e;
    }
  }

  async ignoreRules() {
    const text = await this.root
      .getFileHandle(IGNORE_FILE)
      .then((h) => h.getFile())
      .then((f) => f.text())
      .catch(() => null);
    return ignoreMatcher(text);
  }

  async scan() {
    const ignored = await this.ignoreRules();
    const files = new Map<string, Stat>();
    const dirs = new Set<string>();
    const skipped: Skipped[] = [];
    this.onDisk.clear();
    const walk = async (d: Dir, rel: string) => {
      let list: Entry[] = [];
      try {
        for await (const e of entries(d)) list.push(e);
      } catch (e) {
        if (!rel) throw e; // the synced folder itself
        return void skipped.push({ path: rel, reason: `cannot read the folder: ${(e as Error).message}`, hold: true });
      }
      for (const e of list) {
        const p = rel + e.name;
        const key = p.normalize('NFC');
        if (e.kind === 'directory') {
          if (ignored(key, true)) continue;
          dirs.add(key);
          await walk(e, p + '/');
        } else if (ignored(key)) {
          // a download's temporary file left by a tab closed mid-download
          const at = e.name.startsWith(TEMP) ? (await e.getFile().catch(() => null))?.lastModified : undefined;
          if (at !== undefined && Date.now() - at > STALE_TEMP_MS) await d.removeEntry(e.name).catch(() => {});
        } else if (files.has(key)) {
          skipped.push({ path: key, reason: 'two names on disk for one name (Unicode forms)', hold: true });
        } else {
          try {
            const f = await e.getFile();
            files.set(key, { size: f.size, mtimeMs: f.lastModified });
            if (key !== p) this.onDisk.set(key, p);
          } catch (err) {
            if (!named(err, 'NotFoundError')) skipped.push({ path: key, reason: `cannot read: ${(err as Error).message}`, hold: true });
          }
        }
      }
    };
    await walk(this.root, '');
    return { files, dirs, skipped };
  }

  async hash(p: string) {
    const f = await this.file(p);
    const index = await chunkSource(blobSource(f), DEFAULT_PARAMS, DEFAULT_ALGO);
    return { hash: hex(index.root), size: f.size, mtimeMs: f.lastModified };
  }

  async stat(p: string): Promise<Stat | null> {
    try {
      const f = await this.file(p);
      return { size: f.size, mtimeMs: f.lastModified };
    } catch (e) {
      if ((e as { code?: string }).code === 'ENOENT') return null;
      throw e;
    }
  }

  /**
   * A writer of the file `p` that replaces it at `commit` only while it still has the stat
   * `expect` (null: no file), else LocalChanged. An existing file is written with createWritable,
   * which writes to a file of the browser's own beside it and puts it in place at close(): the
   * file is never seen half written, and abort() leaves it as it was. A new file is written
   * under a temporary name (`.dsync-tmp-page-RAND`, which the ignore rules leave alone) and
   * moved to its name once complete.
   */
  async writer(p: string, expect: Stat | null) {
    const { parents, name } = this.split(p);
    const dir = await this.dir(parents, true);
    const tmpName = tempName();
    const target = expect ? await dir.getFileHandle(name) : await dir.getFileHandle(tmpName, { create: true });
    const w = await target.createWritable({ keepExistingData: false });
    let open = true;
    const discard = async () => {
      if (open) await w.abort().catch(() => {});
      open = false;
      if (!expect) await dir.removeEntry(tmpName).catch(() => {});
    };
    return {
      write: (b: Uint8Array) => w.write(b as Uint8Array<ArrayBuffer>),
      abort: discard,
      commit: async (): Promise<Stat> => {
        try {
          if (!sameStat(await this.stat(p), expect)) throw new LocalChanged(`${p} changed here during the download`);
          await w.close();
          open = false;
          if (!expect) await moveHandle(target, dir, name);
          return (await this.stat(p))!;
        } catch (e) {
          await discard();
          throw e;
        }
      },
    };
  }

  async rename(from: string, to: string, prune: boolean): Promise<void> {
    const parts = to.split('/');
    const name = parts.pop()!;
    const dst = await this.dir(parts, true);
    if (from.toLowerCase() === to.toLowerCase()) {
      // a case-only rename: through a name of its own, so that case-insensitive systems see it
      const tmpName = tempName();
      const tmp = [...parts, tmpName].join('/');
      await this.moveFile(from, dst, tmpName);
      await this.moveFile(tmp, dst, name);
    } else {
      if (await this.stat(to)) throw new Error(`${to} exists here`);
      await this.moveFile(from, dst, name);
    }
    this.onDisk.delete(from);
    if (prune) await this.pruneUp(this.split(from).parents);
  }

  private async moveFile(from: string, dst: Dir, name: string) {
    const { parents, name: old } = this.split(from);
    const src = await this.dir(parents);
    await moveHandle(await src.getFileHandle(old), dst, name, src, old);
  }

  async remove(p: string, prune: boolean): Promise<void> {
    const { parents, name } = this.split(p);
    try {
      await (await this.dir(parents)).removeEntry(name);
    } catch (e) {
      if (!named(e, 'NotFoundError')) throw e;
    }
    this.onDisk.delete(p);
    if (prune) await this.pruneUp(parents);
  }

  async mkdir(p: string): Promise<void> {
    await this.dir(p.split('/'), true);
  }

  async rmdir(p: string): Promise<boolean> {
    const { parents, name } = this.split(p);
    try {
      await (await this.dir(parents)).removeEntry(name);
      return true;
    } catch (e) {
      if (named(e, 'NotFoundError')) return true;
      if (named(e, 'InvalidModificationError')) return false;
      throw e;
    }
  }

  /** Removes folders left empty, up to (not including) the synced folder. */
  private async pruneUp(parents: string[]) {
    for (let n = parents.length; n > 0; n--) {
      try {
        await (await this.dir(parents.slice(0, n - 1))).removeEntry(parents[n - 1]);
      } catch {
        return;
      }
    }
  }
}
