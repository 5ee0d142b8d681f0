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
import { type TreeReader, parentFolder, pruneEmpty, renameVia, walkTree } from '../../shared/src/sync/local-tree.ts';
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

/** A folder's entry with its handle. The File System Access API lists files and folders only:
 *  the browser shows no symbolic link of a local folder (Chromium lists none and opens none by
 *  name), so the page never follows one (docs/sync.md "The local folder"). */
type HandleEntry = { name: string; handle: Entry };

/** The picked folder for the shared walk (shared/src/sync/local-tree.ts). */
const handleReader: TreeReader<Dir, HandleEntry> = {
  async list(d) {
    const out: HandleEntry[] = [];
    for await (const e of entries(d)) out.push({ name: e.name, handle: e });
    return out;
  },
  kind: (e) => (e.handle.kind === 'directory' ? 'directory' : e.handle.kind === 'file' ? 'file' : 'other'),
  enter: (_d, e) => ({ dir: e.handle as Dir }),
  async stat(_d, e) {
    try {
      const f = await (e.handle as FileSystemFileHandle).getFile();
      return { size: f.size, mtimeMs: f.lastModified };
    } catch (err) {
      if (named(err, 'NotFoundError')) return null; // gone since the folder was read: deleted
      throw err;
    }
  },
};

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

  /** the handle of the folder `parts` (made when `create`). A folder made here is looked up
   *  again: where the browser made nothing because a link it does not show stands at the name
   *  (Chromium opens no link by name, but makes a folder "through" one), the lookup fails and
   *  nothing is written through the link. */
  private async dir(parts: string[], create = false): Promise<Dir> {
    let d = this.root;
    for (const c of parts) {
      if (!create) {
        d = await d.getDirectoryHandle(c);
        continue;
      }
      const there = await d.getDirectoryHandle(c).catch((e) => (named(e, 'NotFoundError') ? null : Promise.reject(e)));
      if (there) {
        d = there;
        continue;
      }
      const made = await d.getDirectoryHandle(c, { create: true });
      if (!(await d.getDirectoryHandle(c).catch(() => null))) throw new Error(`${c}: something the browser does not show (a link?) is at this name: nothing is written through it`);
      d = made;
    }
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
    const w = await walkTree(handleReader, this.root, {
      ignored: await this.ignoreRules(),
      // a download's temporary file left by a tab closed mid-download
      async onIgnoredFile(d, e) {
        const at = e.name.startsWith(TEMP) ? (await (e.handle as FileSystemFileHandle).getFile().catch(() => null))?.lastModified : undefined;
        if (at !== undefined && Date.now() - at > STALE_TEMP_MS) await d.removeEntry(e.name).catch(() => {});
      },
    });
    this.onDisk.clear();
    const files = new Map<string, Stat>();
    for (const [key, f] of w.files) {
      files.set(key, { size: f.size, mtimeMs: f.mtimeMs });
      if (key !== f.rel) this.onDisk.set(key, f.rel);
    }
    // a second Unicode form of one name: held (the CLI renames it aside; the page leaves the
    // user's folder as it is)
    const skipped: Skipped[] = [...w.skipped, ...w.twins.map((t) => ({ path: t.key, reason: 'two names on disk for one name (Unicode forms)', hold: true }))];
    return { files, dirs: w.dirs, skipped };
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
    const at = this.onDisk.get(from) ?? from;
    await renameVia({ move: (a, b) => this.moveFile(a, b), exists: async (p) => (await this.stat(p)) !== null, tempName }, from, to, at);
    this.onDisk.delete(from);
    if (prune) await this.pruneUp(parentFolder(at));
  }

  /** Moves the file at `from` to `to` (paths on disk), making `to`'s folders. */
  private async moveFile(from: string, to: string) {
    const src = from.split('/');
    const old = src.pop()!;
    const dst = to.split('/');
    const name = dst.pop()!;
    const srcDir = await this.dir(src);
    await moveHandle(await srcDir.getFileHandle(old), await this.dir(dst, true), name, srcDir, old);
  }

  async remove(p: string, prune: boolean): Promise<void> {
    const { parents, name } = this.split(p);
    try {
      await (await this.dir(parents)).removeEntry(name);
    } catch (e) {
      if (!named(e, 'NotFoundError')) throw e;
    }
    this.onDisk.delete(p);
    if (prune) await this.pruneUp(parents.join('/'));
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

  /** Removes the folder `folder` (its path on disk) and those above it while each is left
   *  empty, up to (not including) the synced folder. */
  private pruneUp(folder: string) {
    return pruneEmpty(folder, async (d) => {
      const parts = d.split('/');
      const name = parts.pop()!;
      await (await this.dir(parts)).removeEntry(name);
      return true;
    });
  }
}
