/**
 * The local-directory backend (docs/store.md, "Local directory"): safe for any number of
 * processes on one machine and against SIGKILL at any point, without locks.
 *
 *   <root>/<key>               a content object, written once: temporary file, fsync, link()
 *                              to its name (EEXIST: it exists), fsync of the directory (also
 *                              when it existed: another writer's link may not be durable yet)
 *   <root>/<key>@h/<gen>       a head: one file per generation, the highest is current; the
 *                              tag is the generation, and a compare-and-swap creates
 *                              generation tag+1 exclusively (link, EEXIST: someone else won).
 *                              An empty generation is a tombstone: the head was deleted. It
 *                              stays, so generations never restart and a writer holding a tag
 *                              from before the delete cannot bring the head back.
 *   <dir>/@tmp-<random>        a temporary file ('@' is in no key): a crash may leave one,
 *                              which gc removes once it is old (`sweepTemporaries`)
 *
 * Files are created readable by the server's user only (0600), folders 0700. A write that made
 * its folder fsyncs the folders above it too (a folder's entry is in its parent), and the
 * fsyncs of one directory asked at about the same time are shared (`syncDir`): the writes of a
 * group commit (commit.ts) into one directory cost one or two directory fsyncs, not one each.
 *
 * Old generations are removed by the writer of a newer one. A writer whose tag is stale may
 * recreate a removed old generation; it then sees a higher one and removes its own, so a
 * reader, who takes the highest, never sees it.
 */
import { randomBytes } from 'node:crypto';
import fsc, { type BigIntStats, constants, promises as fs } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { type Backend, type ListEntry, NotFoundError } from './backend.ts';
import { allLimited } from '../../../shared/src/base/limited.ts';

const HEAD_DIR = '@h';
const TEMP = '@tmp-';

const code = (e: unknown) => (e as NodeJS.ErrnoException).code;

/**
 * A file whose change time is younger than this gets no stamp. A write in place sets the
 * change time from the kernel's clock, truncated to the file system's tick, so a write landing
 * in the same tick as the stat that made a stamp could leave the stamp as it was. Once the
 * change time lies more than a tick before the stat, any later write gives a later one. A
 * change time with a sub-second part comes from a file system that keeps fine times (ext4,
 * XFS, btrfs, tmpfs: a tick of one jiffy, 10 ms at most; exFAT 10 ms): RACY_FINE_MS. One in
 * whole seconds may come from one that keeps seconds, or 2 s on FAT: RACY_MS.
 */
export const RACY_MS = 3_000;
export const RACY_FINE_MS = 100;
/** Stats `stamps` runs at once. */
const STAMPS_AT_ONCE = 8;
/** Heads and files a listing looks at at once (`list`). */
const LIST_AT_ONCE = 16;

/** Descriptor calls (`getStamped`). */
const openFd = promisify(fsc.open);
const fstatFd = promisify(fsc.fstat);
const readFd = promisify(fsc.read);

/** A file's stamp (Backend.stamp): what any write, truncation or replacement changes. */
function stampOf(st: BigIntStats, now: number): string | null {
  const ctimeMs = Number(st.ctimeNs / 1_000_000n);
  const racy = st.ctimeNs % 1_000_000_000n !== 0n ? RACY_FINE_MS : RACY_MS;
  if (!(ctimeMs <= now - racy)) return null;
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** The local directory backend, which removes what crashed writers left (gc calls it). */
export interface LocalBackend extends Backend {
  sweepTemporaries(olderThanMs: number): Promise<number>;
}

export function localBackend(root: string): LocalBackend {
  root = path.resolve(root);
  const file = (key: string) => path.join(root, key);
  const headDir = (key: string) => file(key) + HEAD_DIR;
  /** Folders whose entry, and every one above theirs up to the root, this backend made durable
   *  (no folder of a store is ever removed); forgotten when DURABLE_DIRS_MAX are known. */
  const durableDirs = new Set<string>();
  const stamp = async (key: string): Promise<string | null> => {
    const now = Date.now();
    try {
      const st = await fs.stat(file(key), { bigint: true });
      return st.isFile() ? stampOf(st, now) : null;
    } catch (e) {
      if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return null;
      throw e;
    }
  };

  /** Folders this backend made whose entries (and those above, up to one known durable) are
   *  being fsynced into their parents: the promise of those fsyncs. A write into one of them is
   *  durable once they are too (`durable`). */
  const making = new Map<string, Promise<void>>();

  /**
   * Writes `body` to a new temporary file in `dir` (created if missing), fsynced. When `dir` is
   * missing it is made, and the parent of each folder made (from `dir` up to one this backend
   * knows durable: one another writer, perhaps another process, made a moment ago may not be
   * durable yet either) is fsynced at once (`making`): a folder's entry is in its parent.
   */
  const temp = async (dir: string, body: Uint8Array): Promise<string> => {
    const tmp = path.join(dir, TEMP + randomBytes(8).toString('hex'));
    // the directory is made only when the open finds it missing (most exist: one system call
    // less per put)
    const fh = await fs.open(tmp, 'wx', 0o600).catch(async (e) => {
      if (code(e) !== 'ENOENT') throw e;
      await fs.mkdir(dir, { recursive: true, mode: 0o700 });
      const made: string[] = [];
      for (let d = dir; d !== root && d.startsWith(root) && !durableDirs.has(d); d = path.dirname(d)) made.push(d);
      const parents = syncDirs(made.map((d) => path.dirname(d))).then(() => {
        if (durableDirs.size + made.length > DURABLE_DIRS_MAX) durableDirs.clear();
        for (const d of made) durableDirs.add(d);
      });
      for (const d of made) making.set(d, parents);
      parents
        .finally(() => {
          for (const d of made) if (making.get(d) === parents) making.delete(d);
        })
        .catch(() => {}); // its writes (and those into its folders meanwhile) fail with it
      return fs.open(tmp, 'wx', 0o600);
    });
    try {
      await fh.writeFile(body);
      await fh.sync();
    } catch (e) {
      await fh.close();
      await unlinkFile(tmp);
      throw e;
    }
    await fh.close();
    return tmp;
  };
  /** Makes durable what was linked in `dir`: its fsync, and its entry's if this backend made it
   *  a moment ago (`making`). */
  const durable = (dir: string) => Promise.all([syncDir(dir), making.get(dir)]);
  /** Links `tmp` to `target`; false when `target` exists. Removes `tmp` either way. */
  const linkIn = async (tmp: string, target: string) => {
    try {
      await fs.link(tmp, target);
      return true;
    } catch (e) {
      if (code(e) === 'EEXIST') return false;
      throw e;
    } finally {
      await unlinkFile(tmp);
    }
  };
  const generations = async (key: string): Promise<number[]> => {
    try {
      return (await fs.readdir(headDir(key)))
        .filter((f) => /^[1-9][0-9]*$/.test(f))
        .map(Number)
        .sort((a, b) => b - a);
    } catch (e) {
      if (code(e) === 'ENOENT') return [];
      throw e;
    }
  };

  const isTombstone = async (key: string, gen: number) => {
    const st = await fs.stat(path.join(headDir(key), String(gen))).catch(() => null);
    return st !== null && st.size === 0;
  };
  /** Creates generation `gen` of a head exclusively; the new tag, or null if another won. */
  const writeGeneration = async (key: string, gen: number, body: Uint8Array): Promise<string | null> => {
    const dir = headDir(key);
    const tmp = await temp(dir, body);
    if (!(await linkIn(tmp, path.join(dir, String(gen))))) return null;
    const gens = await generations(key);
    if (gens[0] > gen) {
      // a stale tag recreated a removed generation: it was never current
      await unlinkFile(path.join(dir, String(gen)));
      return null;
    }
    await durable(dir);
    for (const g of gens) if (g < gen) await unlinkFile(path.join(dir, String(g)));
    return String(gen);
  };

  const backend: LocalBackend = {
    where: `dir ${root}`,
    sweepTemporaries: (olderThanMs) => sweepTemporaries(root, olderThanMs),

    async putIfAbsent(key, body) {
      const target = file(key);
      const tmp = await temp(path.dirname(target), body);
      const made = await linkIn(tmp, target);
      // also when it existed: another writer may have linked it and not yet fsynced its
      // directory, and the caller may now reference it
      await durable(path.dirname(target));
      return made;
    },

    async get(key, range) {
      return (await backend.getStamped(key, range)).body;
    },

    async getStamped(key, range) {
      if (range && !(Number.isSafeInteger(range.offset) && range.offset >= 0 && Number.isSafeInteger(range.length) && range.length >= 0)) {
        throw new RangeError(`bad range ${range.offset}+${range.length} of ${key}`);
      }
      // a descriptor, not a FileHandle: a read is four calls through the thread pool, and a
      // FileHandle adds its own bookkeeping to each open (a registered destroy hook; a small
      // edit's listing reads thousands of stretches); the close is not waited for
      let fd: number;
      try {
        fd = await openFd(file(key), constants.O_RDONLY);
      } catch (e) {
        if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') throw new NotFoundError(key);
        throw e;
      }
      try {
        // the stamp is taken before the read: a write after it changes the stamp (or the
        // bytes read fail their hash), never the other way round
        const now = Date.now();
        const st = await fstatFd(fd, { bigint: true });
        const offset = range?.offset ?? 0;
        const length = range ? range.length : Number(st.size) - offset;
        const buf = Buffer.allocUnsafe(Math.max(0, length));
        let done = 0;
        while (done < buf.length) {
          const { bytesRead } = await readFd(fd, buf, done, buf.length - done, offset + done);
          if (bytesRead === 0) break;
          done += bytesRead;
        }
        return { body: buf.subarray(0, done), stamp: stampOf(st, now) };
      } finally {
        fsc.close(fd, () => {});
      }
    },

    stamp,

    async stamps(prefix, keys) {
      const out: (string | null)[] = [];
      for (let k = 0; k < keys.length; k += STAMPS_AT_ONCE) out.push(...(await Promise.all(keys.slice(k, k + STAMPS_AT_ONCE).map(stamp))));
      return out;
    },

    async size(key) {
      try {
        const st = await fs.stat(file(key));
        return st.isFile() ? st.size : null;
      } catch (e) {
        if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return null;
        throw e;
      }
    },

    async getHead(key) {
      // a generation may be removed between the listing and the read: list again
      for (;;) {
        const [gen] = await generations(key);
        if (gen === undefined) return null;
        try {
          const body = await fs.readFile(path.join(headDir(key), String(gen)));
          return body.length ? { body, tag: String(gen) } : null; // empty: a tombstone

        } catch (e) {
          if (code(e) !== 'ENOENT') throw e;
        }
      }
    },

    async putHead(key, body, tag) {
      if (!body.length) throw new Error('a head is never empty (an empty generation is a tombstone)');
      let gen: number;
      if (tag === null) {
        // no head yet: one generation past a tombstone, or the first
        const [top] = await generations(key);
        if (top !== undefined && !(await isTombstone(key, top))) return null;
        gen = (top ?? 0) + 1;
      } else {
        // only over the current generation: not over an absent head, a tombstone or an old one
        const [top] = await generations(key);
        if (top === undefined || String(top) !== tag || (await isTombstone(key, top))) return null;
        gen = top + 1;
      }
      if (!Number.isSafeInteger(gen) || gen < 1) throw new Error(`bad head tag ${tag}`);
      return writeGeneration(key, gen, body);
    },


    async *list(prefix, opts = {}) {
      // the deepest directory wholly inside the prefix, walked in key order; the heads and
      // files of a directory are looked at LIST_AT_ONCE at a time (a folder's catalogs are
      // thousands of heads in one directory, each a readdir of its generations and a stat)
      const slash = prefix.lastIndexOf('/');
      const base = slash < 0 ? '' : prefix.slice(0, slash + 1);
      const out: ListEntry[] = [];
      const walk = async (rel: string): Promise<void> => {
        let entries;
        try {
          entries = await fs.readdir(path.join(root, rel), { withFileTypes: true });
        } catch (e) {
          if (code(e) === 'ENOENT' || code(e) === 'ENOTDIR') return;
          throw e;
        }
        const look: (() => Promise<void>)[] = [];
        for (const d of entries) {
          if (d.name.startsWith(TEMP)) continue;
          const key = rel + d.name;
          if (d.isDirectory() && d.name.endsWith(HEAD_DIR)) {
            const k = key.slice(0, -HEAD_DIR.length);
            if (!k.startsWith(prefix)) continue;
            look.push(async () => {
              const [gen] = await generations(k);
              if (gen === undefined) return;
              const st = await fs.stat(path.join(root, key, String(gen))).catch(() => null);
              if (st && st.size > 0) out.push({ key: k, size: st.size, modified: st.mtimeMs, tag: String(gen) }); // empty: a tombstone
            });
          } else if (d.isDirectory()) {
            if (prefix.startsWith(key + '/') || (key + '/').startsWith(prefix)) await walk(key + '/');
          } else if (d.isFile() && key.startsWith(prefix)) {
            look.push(async () => {
              const st = await fs.stat(path.join(root, key)).catch(() => null);
              if (st) out.push({ key, size: st.size, modified: st.mtimeMs });
            });
          }
        }
        await allLimited(look, LIST_AT_ONCE, (f) => f());
      };
      await walk(base);
      out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      let n = 0;
      for (const e of out) {
        if (opts.after !== undefined && e.key <= opts.after) continue;
        if (opts.limit !== undefined && n++ >= opts.limit) return;
        yield e;
      }
    },

    async delete(key) {
      await fs.rm(file(key), { force: true });
      // a head: a tombstone generation above the current one (retried if a writer got there first)
      for (;;) {
        const [top] = await generations(key);
        if (top === undefined || (await isTombstone(key, top))) return;
        if (await writeGeneration(key, top + 1, new Uint8Array(0))) return;
      }
    },

    async close() {},
  };
  return backend;
}

/** A temporary file younger than this is never swept, whatever gc's min age: a live writer's
 *  is seconds old, but a write may stall (a slow or frozen disk) and must fail on its own, not
 *  because a collection with a small min age took its file. */
export const TEMP_SWEEP_MIN_MS = 10 * 60_000;

/**
 * Removes temporary files older than `olderThanMs`, and than TEMP_SWEEP_MIN_MS (left by a
 * crash). Returns how many. Used by gc, never at start-up: other processes may be writing.
 */
async function sweepTemporaries(root: string, olderThanMs: number): Promise<number> {
  olderThanMs = Math.max(olderThanMs, TEMP_SWEEP_MIN_MS);
  let n = 0;
  const walk = async (dir: string): Promise<void> => {
    let entries;
    try {
      entries = await fs.readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const d of entries) {
      const p = path.join(dir, d.name);
      if (d.isDirectory()) await walk(p);
      else if (d.name.startsWith(TEMP)) {
        const st = await fs.stat(p).catch(() => null);
        if (st && Date.now() - st.mtimeMs >= olderThanMs) {
          await fs.rm(p, { force: true });
          n++;
        }
      }
    }
  };
  await walk(path.resolve(root));
  return n;
}

/** Removes a file the store made, if it is there (one system call: fs.rm stats first). */
async function unlinkFile(file: string) {
  try {
    await fs.unlink(file);
  } catch (e) {
    if (code(e) !== 'ENOENT') throw e;
  }
}

/** Folders a backend remembers as durable (`durableDirs`) at most. */
const DURABLE_DIRS_MAX = 16_384;

/** A directory's fsyncs: whether one is under way, and the callers waiting for the next. */
interface DirSync {
  running: boolean;
  waiting: { ok: () => void; fail: (e: unknown) => void }[];
}
const dirSyncs = new Map<string, DirSync>();

/**
 * Makes durable every entry made in `dir` before the call: an fsync of the directory that
 * starts after the call. Calls made while the directory is being opened for one join it (its
 * fsync is asked after they were made); calls made once its fsync was asked share the next. So
 * the writes of a group commit into one directory wait for one or two fsyncs, not one each; a
 * lone call fsyncs at once.
 */
function syncDir(dir: string): Promise<void> {
  let s = dirSyncs.get(dir);
  if (!s) dirSyncs.set(dir, (s = { running: false, waiting: [] }));
  const st = s;
  return new Promise<void>((ok, fail) => {
    st.waiting.push({ ok, fail });
    if (!st.running) nextSync(dir, st);
  });
}

function nextSync(dir: string, s: DirSync): void {
  const batch = s.waiting.splice(0);
  if (!batch.length) return void dirSyncs.delete(dir);
  s.running = true;
  // the calls made until its fsync is asked join this one
  fsyncDir(dir, () => batch.push(...s.waiting.splice(0)))
    .then(
      () => batch.forEach((w) => w.ok()),
      (e) => batch.forEach((w) => w.fail(e)),
    )
    .finally(() => {
      s.running = false;
      nextSync(dir, s);
    });
}

/** `syncDir` of each of `dirs`, at once. */
const syncDirs = (dirs: string[]) => Promise.all(dirs.map(syncDir));

/** fsyncs `dir`; `asking` is called right before the fsync is asked. */
async function fsyncDir(dir: string, asking: () => void) {
  const fh = await fs.open(dir, constants.O_RDONLY);
  try {
    asking();
    await fh.sync();
  } finally {
    await fh.close();
  }
}
