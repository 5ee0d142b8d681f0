/**
 * The CLI's side of a vault (docs/vaults.md), shared by `dsync vault`, `dsync sync --vault` and
 * the plain commands with `--vault ID` (push, pull, ls, log, restore, rm, mv): opening one with
 * its secret, this user's memory of the heads seen and the device's cache of list pieces, and
 * the file work around `Vault.push` and `Vault.pull`.
 *
 * The passphrase comes from --passphrase-file or $DSYNC_VAULT_PASSPHRASE (a recovery key from
 * --recovery-key-file instead); the last head seen of each vault is kept in
 * ~/.config/dsync/vault-heads.json, so a server that rolls a vault back or forks it is refused.
 */
import { randomBytes } from 'node:crypto';
import { type Stats, mkdirSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { type FileHandle, mkdir, open, readFile, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { homedir, hostname } from 'node:os';
import path from 'node:path';
import '../shared/src/chunking/wasm.ts';
import { BULK_FILE_MAX, VAULT_PIECE_CACHE_MAX } from '../shared/src/base/limits.ts';
import { inBulkBatches } from '../shared/src/sync/engine.ts';
import { formatBytes } from '../shared/src/base/units.ts';
import { fileSource } from '../shared/src/chunking/file-source.ts';
import type { FileInfo } from '../shared/src/wire/api.ts';
import type { PieceCache } from '../shared/src/vault/cache.ts';
import type { Tree } from '../shared/src/vault/format.ts';
import { VAULT_ID } from '../shared/src/vault/keys.ts';
import { hashed } from '../shared/src/vault/pack-hasher.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { SPAN_BYTES, openInWorkers, spanChunks } from '../shared/src/vault/spans.ts';
import { type FdFile, type NodeSpanWorkers, nodeSpanWorkers } from '../shared/src/vault/spans-node.ts';
import { last } from '../shared/src/vault/tree.ts';
import { type HeadMemory, type Outcome, type SeenHead, type Vault, type VaultPullReport, type VaultPushReport, openVault } from '../shared/src/vault/vault.ts';
import { bytesFetch } from './bytes-fetch.ts';
import { type Opts, UsageError, type Values, str } from './command.ts';
import { openNoFollow, tempName } from './contained.ts';
import { stdoutFile } from './output.ts';
import { httpBase, tokenOf } from './remote.ts';

/** The heads this user's devices saw, by vault id: a JSON file written whole, then renamed. */
export function fileHeads(): HeadMemory {
  const file = path.join(process.env.XDG_CONFIG_HOME || path.join(homedir(), '.config'), 'dsync', 'vault-heads.json');
  const all = (): Record<string, SeenHead> => {
    try {
      return JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return {};
      throw new Error(`${file} is damaged: ${(e as Error).message}`);
    }
  };
  return {
    get: async (id) => all()[id] ?? null,
    async set(id, seen) {
      const before = all();
      // another process may have seen a newer head meanwhile: never remember an older one
      if ((before[id]?.seq ?? 0) > seen.seq) return;
      const next = { ...before, [id]: seen };
      mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify(next), { mode: 0o600 });
      renameSync(tmp, file);
    },
  };
}

/** Where the sealed list pieces of vault `id` are kept: $DSYNC_CACHE_DIR/vaults/<id>, else
 *  $XDG_CACHE_HOME/dsync/vaults/<id>, else ~/.cache/dsync/vaults/<id>. */
export function vaultCacheDir(id: string, env = process.env): string {
  if (!VAULT_ID.test(id)) throw new UsageError(`bad vault id ${JSON.stringify(id)}: 32 lowercase hex digits`);
  const root = env.DSYNC_CACHE_DIR || path.join(env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'dsync');
  return path.join(root, 'vaults', id);
}

/** What a trim of a piece cache leaves of its cap: a trim reads every entry's stat (some 30 000
 *  at the cap), so the next one is a quarter of the cap of pieces away, not one piece (a full
 *  cache then cost a 256 MiB push minutes of stats: bench/results/vault-cli.md). */
const TRIM_TO = 3 / 4;

/** A vault's PieceCache in `dir`: one file per piece, named by its chunk id, written whole then
 *  renamed; beyond `cap` bytes the least recently used are deleted, down to TRIM_TO of it. The
 *  vault opens and checks every entry as if fetched, so a damaged one costs a fetch; a cache
 *  that cannot be read or written costs the same. */
export function dirPieceCache(dir: string, cap = VAULT_PIECE_CACHE_MAX): PieceCache {
  const file = (id: string) => {
    if (!/^[0-9a-f]{64}$/.test(id)) throw new RangeError(`bad piece id ${JSON.stringify(id)}`);
    return path.join(dir, id);
  };
  let total: number | null = null; // bytes in dir, counted on the first put
  const trim = async () => {
    // every entry's stat, synchronously: through the thread pool each is a promise and a
    // wake-up, and 13 000 take 0.25 s of CPU, synchronously 0.1 s (bench/results/vault-cli.md)
    const entries: { name: string; size: number; used: number }[] = [];
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      // no cache yet, or one that cannot be read: nothing to count
    }
    for (const name of names) {
      let st: Stats | undefined;
      try {
        st = statSync(path.join(dir, name), { throwIfNoEntry: false });
      } catch {
        continue; // (as one deleted meanwhile)
      }
      if (st?.isFile()) entries.push({ name, size: st.size, used: st.mtimeMs });
    }
    total = entries.reduce((n, e) => n + e.size, 0);
    if (total <= cap) return;
    entries.sort((a, b) => a.used - b.used);
    for (const e of entries) {
      if (total <= cap * TRIM_TO) break;
      await rm(path.join(dir, e.name), { force: true });
      total -= e.size;
    }
  };
  return {
    async get(id) {
      try {
        const b = await readFile(file(id));
        const now = new Date();
        await utimes(file(id), now, now).catch(() => {}); // recently used: dropped last
        return new Uint8Array(b.buffer, b.byteOffset, b.length);
      } catch {
        return null;
      }
    },
    async put(id, sealed) {
      const tmp = `${file(id)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
      try {
        await mkdir(dir, { recursive: true, mode: 0o700 });
        await writeFile(tmp, sealed, { mode: 0o600 });
        await rename(tmp, file(id));
      } catch {
        await rm(tmp, { force: true }).catch(() => {});
        return;
      }
      if (total === null) await trim();
      else if ((total += sealed.length) > cap) await trim();
    },
    async drop(id) {
      await rm(file(id), { force: true }).catch(() => {});
    },
  };
}

/** The vault passphrase: --passphrase-file FILE (its last line break dropped), else
 *  $DSYNC_VAULT_PASSPHRASE. */
export function passphrase(values: Values): string {
  const f = str(values, 'passphrase-file');
  const p = f !== undefined ? readFileSync(f, 'utf8').replace(/\r?\n$/, '') : process.env.DSYNC_VAULT_PASSPHRASE;
  if (!p) throw new UsageError('the vault passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE');
  return p;
}

/** The server's vault routes, with the token the flags or the environment give; bodies of bytes
 *  (packs) go out without undici's copies (bytes-fetch.ts). */
export function vaultRemote(values: Values) {
  const token = tokenOf(values);
  return httpVaultRemote(httpBase(values), bytesFetch, token ? { Authorization: `Bearer ${token}` } : {});
}

/** The vault `id` opened with the secret the flags or the environment give (--recovery-key-file,
 *  else --passphrase-file or $DSYNC_VAULT_PASSPHRASE), with this user's head memory and the
 *  device's cache of pieces. */
export async function opened(values: Values, id: string | undefined) {
  if (!id) throw new UsageError('which vault: its id (dsync vault create prints it)');
  const rk = str(values, 'recovery-key-file');
  const secret = rk !== undefined ? { recoveryKey: readFileSync(rk, 'utf8') } : { passphrase: passphrase(values) };
  return openVault(vaultRemote(values), id, secret, fileHeads(), { device: str(values, 'device') ?? hostname(), cache: dirPieceCache(vaultCacheDir(id)), packId: (bytes) => hashed(bytes).id });
}

/** A version number given as a positional or --version: a whole number ≥ 1. */
export function versionNumber(what: string, v: string | undefined): number {
  const n = Number(v);
  if (!v || !/^[0-9]+$/.test(v) || !Number.isSafeInteger(n) || n < 1) throw new UsageError(`${what} is a whole number of at least 1, got ${JSON.stringify(v ?? '')}`);
  return n;
}

/** How a vault is opened: its passphrase, or its recovery key (`opened`). */
export const SECRET_OPTS: Opts = {
  'passphrase-file': { type: 'string', arg: 'FILE', help: 'a file holding the vault passphrase (default: $DSYNC_VAULT_PASSPHRASE)' },
  'recovery-key-file': { type: 'string', arg: 'FILE', help: 'open the vault with its recovery key instead of the passphrase' },
};

/** The device label a push records (`--device`). */
export const DEVICE_OPT: Opts = {
  device: { type: 'string', arg: 'LABEL', help: "the device label recorded with each version pushed (default: this machine's host name)" },
};

/** The flags of a plain command that reach a vault instead of the server's files. */
export const VAULT_OPTS: Opts = {
  vault: { type: 'string', arg: 'ID', help: 'work on this vault (its id, as dsync vault create printed it) instead of the server\'s files' },
  ...SECRET_OPTS,
};

/** The vault a plain command works on (--vault ID), or undefined for the server's files. The
 *  vault's flags need --vault; with it, each flag of `plainOnly` (a flag that means nothing on
 *  a vault, with why) is refused, never ignored. */
export function vaultOf(values: Values, plainOnly: Record<string, string> = {}): string | undefined {
  const id = str(values, 'vault');
  if (id === undefined) {
    for (const f of [...Object.keys(SECRET_OPTS), 'device']) if (values[f] !== undefined) throw new UsageError(`--${f} goes with --vault`);
    return undefined;
  }
  vaultCacheDir(id); // a bad id is a usage error before anything is read
  for (const [f, why] of Object.entries(plainOnly)) if (values[f] !== undefined) throw new UsageError(`--${f} does not go with --vault: ${why}`);
  return id;
}

/** Why the chunking flags mean nothing on a vault. */
export const KEYED_CHUNKING = 'a vault chunks with its own keys';

/** Pushes `file` as a new version of `name` (the file's mtime kept with it); `noFollow`: a link
 *  at the file's own name is refused (a file found by walking a folder). */
export async function pushFile(vault: Vault, file: string, name: string, o: { noFollow?: boolean } = {}): Promise<VaultPushReport> {
  const fh = await (o.noFollow ? openNoFollow(file) : open(file, 'r'));
  try {
    const { size, mtimeMs } = await fh.stat();
    // more than a span: cut, named and sealed by chunk workers of its own (ended with it, and
    // their memory with them: a watching sync lives long), which read the file through this
    // descriptor, a span each at a time, while this thread packs and uploads
    const pool = size > SPAN_BYTES ? nodeSpanWorkers(vault.keys) : null;
    const cut = pool ? spanChunks<FdFile>(pool.workers, { fd: fh.fd }, size) : undefined;
    try {
      return await vault.push(name, fileSource(fh, size), mtimeMs, { cut });
    } finally {
      // no worker reads through the descriptor once it is closed
      await cut?.settled();
      await pool?.end();
    }
  } finally {
    await fh.close();
  }
}

/** Pushes each file as `pushFile` does, `done` called with each one's outcome as it ends: the
 *  small ones (up to BULK_FILE_MAX) together in batches of up to BULK_ENTRIES files and
 *  BULK_REQUEST_BYTES (`Vault.pushMany`: their chunks in shared packs, one head a batch, so a
 *  small file's size hides among the others'), the others one by one. */
export async function pushFiles(vault: Vault, files: { file: string; name: string; size: number; noFollow?: boolean }[], done: (name: string, r: Outcome<VaultPushReport>, batch: number) => void): Promise<void> {
  for (const batch of inBulkBatches(
    files.filter((f) => f.size <= BULK_FILE_MAX),
    (f) => f.size,
  )) {
    const opened: { f: (typeof batch)[number]; fh: FileHandle; size: number; mtime: number }[] = [];
    try {
      for (const f of batch) {
        try {
          const fh = await (f.noFollow ? openNoFollow(f.file) : open(f.file, 'r'));
          const st = await fh.stat().catch(async (e) => (await fh.close(), Promise.reject(e)));
          opened.push({ f, fh, size: st.size, mtime: st.mtimeMs });
        } catch (e) {
          done(f.name, { error: e }, 1);
        }
      }
      const out = await vault.pushMany(opened.map((o) => ({ name: o.f.name, source: fileSource(o.fh, o.size), mtime: o.mtime }))).catch((error: unknown) => opened.map(() => ({ error })));
      opened.forEach((o, k) => done(o.f.name, out[k], opened.length));
    } finally {
      for (const o of opened) await o.fh.close();
    }
  }
  for (const f of files.filter((f) => f.size > BULK_FILE_MAX)) done(f.name, await pushFile(vault, f.file, f.name, { noFollow: f.noFollow }).then((ok) => ({ ok }), (error: unknown) => ({ error })), 1);
}

/** "notes.txt v3: 20 MB, 2 of 2400 chunks new, 30 KB uploaded in 5 packs"; pushed in a batch of
 *  `batch` files, whose packs the report counts: "… (with 41 other files)" */
export const pushLine = (r: VaultPushReport, batch = 1) =>
  `${r.name} v${r.version}: ${formatBytes(r.size)}, ${r.chunks - r.reused} of ${r.chunks} chunks new, ${formatBytes(r.packBytes)} uploaded in ${r.packs} packs${batch > 1 ? ` (with ${batch - 1} other files)` : ''}`;

/** Pulls `name` (`version`, else its newest) into `outFile` ('-': stdout, as each verified
 *  window arrives): through a temporary file beside it, synced, given the version's mtime and
 *  renamed over it only once every chunk verified. `local`: the device's copy, whose chunks are
 *  not fetched (opened without following a link with `check`); `check` runs right before the
 *  rename (a folder pull checks again that no link is in the way). */
export async function pullFile(vault: Vault, name: string, outFile: string, o: { version?: number; local?: string; check?: () => Promise<unknown> } = {}): Promise<VaultPullReport> {
  const old: FileHandle | null = o.local === undefined ? null : await (o.check ? openNoFollow(o.local) : open(o.local, 'r'));
  // more than a span: its ranges opened by chunk workers of its own (`openInWorkers`: each
  // chunk checked against its keyed id there, as `openVerified` checks it)
  let pool: NodeSpanWorkers | null = null;
  const openRanges = async (size: number) => ((pool = size > SPAN_BYTES ? nodeSpanWorkers(vault.keys) : null) ? openInWorkers(pool.workers) : undefined);
  try {
    const local = old ? fileSource(old, (await old.stat()).size) : undefined;
    if (outFile === '-') {
      const out = stdoutFile();
      return await vault.pull(name, (b) => out.write(b).then(() => {}), local, { version: o.version, open: openRanges });
    }
    const tmp = path.join(path.dirname(outFile), tempName());
    const out = await open(tmp, 'wx', 0o600);
    let closed = false;
    try {
      const r = await vault.pull(name, async (b) => void (await out.write(b)), local, { version: o.version, open: openRanges });
      await out.sync();
      await out.utimes(new Date(), new Date(r.mtime));
      await out.close();
      closed = true;
      await o.check?.();
      await rename(tmp, outFile);
      return r;
    } catch (e) {
      if (!closed) await out.close().catch(() => {});
      await rm(tmp, { force: true });
      throw e;
    }
  } finally {
    await (pool as NodeSpanWorkers | null)?.end();
    await old?.close();
  }
}

/** What --help says of a purge (dsync rm --purge, dsync vault purge). */
export const PURGE_HELP = `A purge is for good, however recently the file was deleted, and nothing asks again (you
asked): the server's gc deletes the packs only those versions used once older than its grace
period (--vault-gc-grace-ms); chunks other files share stay. A live file is refused: delete it
first.`;

/** "purged a.txt, b.txt: every version forgotten" */
export const purgeLine = (names: string[]) => (names.length ? `purged ${names.join(', ')}: every version forgotten (the server's gc frees their packs)` : 'no deleted file to purge');

/** "notes.txt (v3): 20 MB, 2398 of 2400 chunks from the old copy, 30 KB fetched" */
export const pullLine = (dest: string, r: VaultPullReport) => `${dest} (v${r.version}): ${formatBytes(r.size)}, ${r.local} of ${r.chunks} chunks from the old copy, ${formatBytes(r.fetchedBytes)} fetched`;

/** The live files and folders of a vault's tree under `prefix` ('' or ending in '/') as the
 *  server lists a plain folder (GET /api/files): each file's newest version as a FileInfo
 *  (mtime: when it was pushed; modified: the file's own mtime), the folders (ending in '/')
 *  that hold one; with `recursive`, every file and folder below, else those right in it. A
 *  vault keeps no empty folders: its folders follow its files. */
export function vaultListing(tree: Tree, prefix: string, recursive: boolean): { files: FileInfo[]; folders: string[] } {
  const files: FileInfo[] = [];
  const folders = new Set<string>();
  for (const f of tree.files) {
    if (f.deleted || !f.name.startsWith(prefix) || f.name.length === prefix.length) continue;
    const parts = f.name.slice(prefix.length).split('/');
    for (let i = 1; i < parts.length && (recursive || i === 1); i++) folders.add(prefix + parts.slice(0, i).join('/') + '/');
    if (!recursive && parts.length > 1) continue;
    const v = last(f);
    files.push({ name: f.name, latest: v.n, size: v.size, versions: f.versions.length, mtime: new Date(v.pushed).toISOString(), modified: v.mtime });
  }
  return { files, folders: [...folders] };
}
