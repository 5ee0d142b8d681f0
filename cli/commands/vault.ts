/** `dsync vault create | ls ID | push ID FILE [NAME] | pull ID NAME [DEST] | log ID NAME | rm ID
 *  NAME | mv ID OLD NEW | restore ID NAME N | keep ID N`: end-to-end encrypted folders with
 *  versions (docs/vaults.md). The passphrase comes from --passphrase-file or
 *  $DSYNC_VAULT_PASSPHRASE (a recovery key from --recovery-key-file instead); the last head seen
 *  of each vault is kept in ~/.config/dsync/vault-heads.json, so a server that rolls a vault
 *  back or forks it is refused. */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { homedir, hostname } from 'node:os';
import path from 'node:path';
import '../../shared/src/chunking/wasm.ts';
import { VAULT_KEEP_VERSIONS, VAULT_PIECE_CACHE_MAX } from '../../shared/src/base/limits.ts';
import { formatBytes } from '../../shared/src/base/units.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import type { PieceCache } from '../../shared/src/vault/cache.ts';
import { VAULT_ID } from '../../shared/src/vault/keys.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type HeadMemory, type SeenHead, createVault, openVault } from '../../shared/src/vault/vault.ts';
import { type Command, type Opts, UsageError, type Values, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS, httpBase, tokenOf } from '../remote.ts';

/** The heads this user's devices saw, by vault id: a JSON file written whole, then renamed. */
function fileHeads(): HeadMemory {
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

/** A vault's PieceCache in `dir`: one file per piece, named by its chunk id, written whole then
 *  renamed; beyond `cap` bytes the least recently used are deleted. The vault opens and checks
 *  every entry as if fetched, so a damaged one costs a fetch; a cache that cannot be read or
 *  written costs the same. */
function dirPieceCache(dir: string, cap = VAULT_PIECE_CACHE_MAX): PieceCache {
  const file = (id: string) => {
    if (!/^[0-9a-f]{64}$/.test(id)) throw new RangeError(`bad piece id ${JSON.stringify(id)}`);
    return path.join(dir, id);
  };
  let total: number | null = null; // bytes in dir, counted on the first put
  const trim = async () => {
    const entries: { name: string; size: number; used: number }[] = [];
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const st = await stat(path.join(dir, name)).catch(() => null);
      if (st?.isFile()) entries.push({ name, size: st.size, used: st.mtimeMs });
    }
    total = entries.reduce((n, e) => n + e.size, 0);
    entries.sort((a, b) => a.used - b.used);
    for (const e of entries) {
      if (total <= cap) break;
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

function passphrase(values: Values): string {
  const f = str(values, 'passphrase-file');
  const p = f !== undefined ? readFileSync(f, 'utf8').replace(/\r?\n$/, '') : process.env.DSYNC_VAULT_PASSPHRASE;
  if (!p) throw new UsageError('the vault passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE');
  return p;
}

function remoteOf(values: Values) {
  const token = tokenOf(values);
  return httpVaultRemote(httpBase(values), undefined, token ? { Authorization: `Bearer ${token}` } : {});
}

/** The vault `id` opened with the secret the flags or the environment give (--recovery-key-file,
 *  else --passphrase-file or $DSYNC_VAULT_PASSPHRASE), with this user's head memory and the
 *  device's cache of pieces. */
export async function opened(values: Values, id: string | undefined) {
  if (!id) throw new UsageError('which vault: its id (dsync vault create prints it)');
  const rk = str(values, 'recovery-key-file');
  const secret = rk !== undefined ? { recoveryKey: readFileSync(rk, 'utf8') } : { passphrase: passphrase(values) };
  return openVault(remoteOf(values), id, secret, fileHeads(), { device: str(values, 'device') ?? hostname(), cache: dirPieceCache(vaultCacheDir(id)) });
}

/** A version number given as a positional (restore) or --version: a whole number ≥ 1. */
function number(what: string, v: string | undefined): number {
  const n = Number(v);
  if (!v || !/^[0-9]+$/.test(v) || !Number.isSafeInteger(n) || n < 1) throw new UsageError(`${what} is a whole number of at least 1, got ${JSON.stringify(v ?? '')}`);
  return n;
}

/** How a vault is opened: its passphrase, or its recovery key (`opened`). */
export const SECRET_OPTS: Opts = {
  'passphrase-file': { type: 'string', arg: 'FILE', help: 'a file holding the vault passphrase (default: $DSYNC_VAULT_PASSPHRASE)' },
  'recovery-key-file': { type: 'string', arg: 'FILE', help: 'open the vault with its recovery key instead of the passphrase' },
};

export const command: Command = {
  usage: 'vault create | ls ID [--deleted] | push ID FILE [NAME] | pull ID NAME [DEST] [--version N] | log ID NAME | rm ID NAME | mv ID OLD NEW | restore ID NAME N | keep ID N --server URL',
  about: `End-to-end encrypted folders: the server stores padded, sealed packs and one sealed head,
and never sees a name, a byte or a chunk boundary (docs/vaults.md). create makes a vault and prints
its id and its recovery key (shown once: keep it); ls lists its files (--deleted: the deleted ones);
push uploads FILE as a new version of NAME (default: FILE's name), only the chunks the vault lacks;
pull writes NAME (--version N: that version) to DEST (default: NAME's last component), fetching only
the chunks DEST lacks, through a temporary file renamed at the end; log lists NAME's versions; rm
deletes NAME, keeping its history; mv renames OLD to NEW with its history; restore makes version N
of NAME (live or deleted) its newest version, uploading no contents; keep sets how many versions
each file keeps (default ${VAULT_KEEP_VERSIONS}; older ones are forgotten). The passphrase: --passphrase-file FILE or
$DSYNC_VAULT_PASSPHRASE.`,
  options: {
    ...SERVER_OPTS,
    ...SECRET_OPTS,
    device: { type: 'string', arg: 'LABEL', help: "the device label recorded with each version pushed (default: this machine's host name)" },
    version: { type: 'string', arg: 'N', help: 'pull: that version of NAME (see log)' },
    deleted: { type: 'boolean', help: 'ls: the deleted files, whose history is kept' },
    json: JSON_OPT,
  },
  positionals: [1, 4],
  async run(values, [action, id, a, b]) {
    if (values.version !== undefined && action !== 'pull') throw new UsageError('--version goes with pull');
    if (values.deleted && action !== 'ls') throw new UsageError('--deleted goes with ls');
    const out = (human: string, json: unknown) => (humanOutput(values) ? console.log(human) : printJson(json));
    if (action === 'create') {
      const { vault, recoveryKey } = await createVault(remoteOf(values), passphrase(values), fileHeads());
      return void out(`vault ${vault.id}\nrecovery key (shown once; with it the vault opens without the passphrase):\n  ${recoveryKey}`, { id: vault.id, recoveryKey });
    }
    if (action === 'ls') {
      const vault = await opened(values, id);
      const files: { name: string; size: number; mtime: number; deleted?: number }[] = values.deleted ? await vault.ls({ deleted: true }) : await vault.ls();
      if (!humanOutput(values)) return void files.forEach((f) => printJson(f));
      for (const f of files) console.log(`${f.name}\t${formatBytes(f.size)}\t${new Date(f.mtime).toISOString()}${f.deleted ? `\tdeleted ${new Date(f.deleted).toISOString()}` : ''}`);
      return void console.log(`${files.length} ${values.deleted ? 'deleted ' : ''}file${files.length === 1 ? '' : 's'}`);
    }
    if (action === 'log') {
      if (!a) throw new UsageError('log ID NAME');
      const log = await (await opened(values, id)).log(a);
      const versions = [...log.versions].reverse();
      if (!humanOutput(values)) return void versions.forEach((v) => printJson(v));
      console.log(table(['VERSION', 'SIZE', 'MODIFIED', 'PUSHED', 'DEVICE'], versions.map((v) => [`v${v.n}`, formatBytes(v.size), shortDate(v.mtime), shortDate(v.pushed), v.device]), [0, 1]));
      if (log.deleted) console.log(`deleted ${shortDate(log.deleted)} (dsync vault restore ${id} ${a} N brings a version back)`);
      return;
    }
    if (action === 'rm') {
      if (!a || b) throw new UsageError('rm ID NAME');
      const r = await (await opened(values, id)).rm(a);
      return void out(`deleted ${a} (its versions are kept: dsync vault log)`, { name: a, ...r });
    }
    if (action === 'mv') {
      if (!a || !b) throw new UsageError('mv ID OLD NEW');
      const r = await (await opened(values, id)).mv(a, b);
      return void out(`renamed ${a} to ${b}`, { from: a, to: b, ...r });
    }
    if (action === 'restore') {
      if (!a) throw new UsageError('restore ID NAME N');
      const n = number('the version to restore', b);
      const r = await (await opened(values, id)).restore(a, n);
      return void out(`${a}: version ${n} restored as version ${r.version}`, { name: a, from: n, ...r });
    }
    if (action === 'keep') {
      const n = number('the versions to keep', a);
      if (b) throw new UsageError('keep ID N');
      const r = await (await opened(values, id)).keep(n);
      return void out(`vault ${id} keeps ${n} version${n === 1 ? '' : 's'} of each file`, { keep: n, ...r });
    }
    if (action === 'push') {
      if (!a) throw new UsageError('push ID FILE [NAME]');
      const st = await stat(a);
      const fh = await open(a, 'r');
      try {
        const r = await (await opened(values, id)).push(b ?? path.basename(a), fileSource(fh, st.size), st.mtimeMs);
        return void out(`${r.name} v${r.version}: ${formatBytes(r.size)}, ${r.chunks - r.reused} of ${r.chunks} chunks new, ${formatBytes(r.packBytes)} uploaded in ${r.packs} packs`, r);
      } finally {
        await fh.close();
      }
    }
    if (action === 'pull') {
      if (!a) throw new UsageError('pull ID NAME [DEST]');
      const dest = b ?? a.split('/').pop()!;
      const version = values.version === undefined ? undefined : number('--version', str(values, 'version'));
      const vault = await opened(values, id);
      const old = await open(dest, 'r').catch((e) => (e.code === 'ENOENT' ? null : Promise.reject(e)));
      const tmp = path.join(path.dirname(dest), `.${path.basename(dest)}.dsync-${randomBytes(4).toString('hex')}`);
      const fh = await open(tmp, 'wx', 0o600);
      try {
        const r = await vault.pull(a, async (bytes) => void (await fh.write(bytes)), old ? fileSource(old, (await old.stat()).size) : undefined, { version });
        await fh.close();
        await utimes(tmp, new Date(), new Date(r.mtime));
        await rename(tmp, dest);
        return void out(`${dest} (v${r.version}): ${formatBytes(r.size)}, ${r.local} of ${r.chunks} chunks from the old copy, ${formatBytes(r.fetchedBytes)} fetched`, r);
      } catch (e) {
        await fh.close().catch(() => {});
        await rm(tmp, { force: true });
        throw e;
      } finally {
        await old?.close();
      }
    }
    throw new UsageError(`no vault action ${JSON.stringify(action)}: create, ls, push, pull, log, rm, mv, restore or keep`);
  },
};
