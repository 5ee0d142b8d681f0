/** `dsync vault create | ls ID | push ID FILE [NAME] | pull ID NAME [DEST]`: end-to-end encrypted
 *  folders (docs/vaults.md). The passphrase comes from --passphrase-file or
 *  $DSYNC_VAULT_PASSPHRASE (a recovery key from --recovery-key-file instead); the last head seen
 *  of each vault is kept in ~/.config/dsync/vault-heads.json, so a server that rolls a vault
 *  back or forks it is refused. */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { open, rename, rm, stat, utimes } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import '../../shared/src/chunking/wasm.ts';
import { formatBytes } from '../../shared/src/base/units.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type HeadMemory, type SeenHead, createVault, openVault } from '../../shared/src/vault/vault.ts';
import { type Command, UsageError, type Values, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
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

async function opened(values: Values, id: string | undefined) {
  if (!id) throw new UsageError('which vault: its id (dsync vault create prints it)');
  const rk = str(values, 'recovery-key-file');
  const secret = rk !== undefined ? { recoveryKey: readFileSync(rk, 'utf8') } : { passphrase: passphrase(values) };
  return openVault(remoteOf(values), id, secret, fileHeads());
}

export const command: Command = {
  usage: 'vault create | ls ID | push ID FILE [NAME] | pull ID NAME [DEST] --server URL',
  about: `End-to-end encrypted folders: the server stores padded, sealed packs and one sealed head,
and never sees a name, a byte or a chunk boundary (docs/vaults.md). create makes a vault and prints
its id and its recovery key (shown once: keep it); ls lists its files; push uploads FILE as NAME
(default: FILE's name), only the chunks the vault lacks; pull writes NAME to DEST (default: NAME's
last component), fetching only the chunks DEST lacks, through a temporary file renamed at the end.
The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: {
    ...SERVER_OPTS,
    'passphrase-file': { type: 'string', arg: 'FILE', help: 'a file holding the passphrase (default: $DSYNC_VAULT_PASSPHRASE)' },
    'recovery-key-file': { type: 'string', arg: 'FILE', help: 'open the vault with its recovery key instead of the passphrase' },
    json: JSON_OPT,
  },
  positionals: [1, 4],
  async run(values, [action, id, a, b]) {
    const out = (human: string, json: unknown) => (humanOutput(values) ? console.log(human) : printJson(json));
    if (action === 'create') {
      const { vault, recoveryKey } = await createVault(remoteOf(values), passphrase(values), fileHeads());
      return void out(`vault ${vault.id}\nrecovery key (shown once; with it the vault opens without the passphrase):\n  ${recoveryKey}`, { id: vault.id, recoveryKey });
    }
    if (action === 'ls') {
      const files = await (await opened(values, id)).ls();
      if (!humanOutput(values)) return void files.forEach((f) => printJson(f));
      for (const f of files) console.log(`${f.name}\t${formatBytes(f.size)}\t${new Date(f.mtime).toISOString()}`);
      return void console.log(`${files.length} file${files.length === 1 ? '' : 's'}`);
    }
    if (action === 'push') {
      if (!a) throw new UsageError('push ID FILE [NAME]');
      const st = await stat(a);
      const fh = await open(a, 'r');
      try {
        const r = await (await opened(values, id)).push(b ?? path.basename(a), fileSource(fh, st.size), st.mtimeMs);
        return void out(`${r.name}: ${formatBytes(r.size)}, ${r.chunks - r.reused} of ${r.chunks} chunks new, ${formatBytes(r.packBytes)} uploaded in ${r.packs} packs`, r);
      } finally {
        await fh.close();
      }
    }
    if (action === 'pull') {
      if (!a) throw new UsageError('pull ID NAME [DEST]');
      const dest = b ?? a.split('/').pop()!;
      const vault = await opened(values, id);
      const old = await open(dest, 'r').catch((e) => (e.code === 'ENOENT' ? null : Promise.reject(e)));
      const tmp = path.join(path.dirname(dest), `.${path.basename(dest)}.dsync-${randomBytes(4).toString('hex')}`);
      const fh = await open(tmp, 'wx', 0o600);
      try {
        const r = await vault.pull(a, async (bytes) => void (await fh.write(bytes)), old ? fileSource(old, (await old.stat()).size) : undefined);
        await fh.close();
        await utimes(tmp, new Date(), new Date(r.mtime));
        await rename(tmp, dest);
        return void out(`${dest}: ${formatBytes(r.size)}, ${r.local} of ${r.chunks} chunks from the old copy, ${formatBytes(r.fetchedBytes)} fetched`, r);
      } catch (e) {
        await fh.close().catch(() => {});
        await rm(tmp, { force: true });
        throw e;
      } finally {
        await old?.close();
      }
    }
    throw new UsageError(`no vault action ${JSON.stringify(action)}: create, ls, push or pull`);
  },
};
