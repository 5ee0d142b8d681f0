/** `dsync vault create | passphrase ID | ls ID | push ID FILE [NAME] | pull ID NAME [DEST] | log ID NAME | rm ID
 *  NAME [--purge] | purge ID [NAME] | mv ID OLD NEW | restore ID NAME N | keep ID N | prune ID`:
 *  end-to-end encrypted folders with versions (docs/vaults.md). create, passphrase, purge, keep and
 *  prune are only here; ls --deleted too; the other actions
 *  are also the plain commands with --vault ID (`dsync push FILE --vault ID`, …), and both run
 *  the same code (cli/vaults.ts). */
import { readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { VAULT_KEEP_VERSIONS, VAULT_PRUNE_MAX_UNUSED } from '../../shared/src/base/limits.ts';
import { formatBytes } from '../../shared/src/base/units.ts';
import { createVault } from '../../shared/src/vault/vault.ts';
import { type PruneReport, prune } from '../../shared/src/vault/repack.ts';
import { type Command, UsageError, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS } from '../remote.ts';
import { DEVICE_OPT, PURGE_HELP, SECRET_OPTS, fileHeads, opened, passphrase, pullFile, pullLine, purgeLine, pushFile, pushLine, vaultRemote, versionNumber } from '../vaults.ts';

export const command: Command = {
  usage: 'vault create | passphrase ID | ls ID [--deleted] | push ID FILE [NAME] | pull ID NAME [DEST] [--version N] | log ID NAME | rm ID NAME [--purge] | purge ID [NAME] | mv ID OLD NEW | restore ID NAME N | keep ID N | prune ID [--max-unused P%] [--dry-run] --server URL',
  about: `End-to-end encrypted folders: the server stores padded, sealed packs and one sealed head,
and never sees a name, a byte or a chunk boundary (docs/vaults.md). create makes a vault and prints
its id and its recovery key (shown once: keep it); passphrase sets a new passphrase, opened with the
current one (or --recovery-key-file), the new one from --new-passphrase-file FILE or
$DSYNC_VAULT_NEW_PASSPHRASE: devices already open stay open, the recovery key stays the same, and
a copy of the old keyfile still opens with the old passphrase; ls lists its files (--deleted: the deleted ones);
push uploads FILE as a new version of NAME (default: FILE's name), only the chunks the vault lacks;
pull writes NAME (--version N: that version) to DEST (default: NAME's last component), fetching only
the chunks DEST lacks, through a temporary file renamed at the end; log lists NAME's versions; rm
deletes NAME, keeping its history; purge forgets the deleted file NAME (without NAME: every deleted
file) with all its versions (rm ID NAME --purge: the same for NAME).
${PURGE_HELP}
mv renames OLD to NEW with its history (onto a deleted file's name: OLD's newest version becomes a
new version of that file and OLD is deleted, both histories kept); restore makes version N of NAME
(live or deleted) its newest version, uploading no contents; keep sets how many versions each file
keeps (default ${VAULT_KEEP_VERSIONS}; older ones are forgotten); prune rewrites the packs that hold
mostly forgotten chunks until at most --max-unused of the bytes in use are unused (default
${VAULT_PRUNE_MAX_UNUSED * 100}%; --dry-run: only says what it would do), reading each such pack whole. The passphrase: --passphrase-file FILE or
$DSYNC_VAULT_PASSPHRASE. The plain commands take a vault too, with --vault ID (dsync push FILE
--vault ID, pull, ls, log, restore, rm, mv: each one's --help); they run the same code.`,
  options: {
    ...SERVER_OPTS,
    ...SECRET_OPTS,
    ...DEVICE_OPT,
    version: { type: 'string', arg: 'N', help: 'pull: that version of NAME (see log)' },
    deleted: { type: 'boolean', help: 'ls: the deleted files, whose history is kept' },
    'max-unused': { type: 'string', arg: 'P%', help: `prune: the share of the packs' bytes that may be forgotten chunks, 0 to 100% (default ${VAULT_PRUNE_MAX_UNUSED * 100}%)` },
    'dry-run': { type: 'boolean', help: 'prune: say what it would do, write nothing' },
    'new-passphrase-file': { type: 'string', arg: 'FILE', help: 'passphrase: a file holding the new passphrase (default: $DSYNC_VAULT_NEW_PASSPHRASE)' },
    purge: { type: 'boolean', help: 'rm: forget the deleted file NAME with all its versions (as purge ID NAME)' },
    json: JSON_OPT,
  },
  positionals: [1, 4],
  async run(values, [action, id, a, b]) {
    if (values.version !== undefined && action !== 'pull') throw new UsageError('--version goes with pull');
    if (values.deleted && action !== 'ls') throw new UsageError('--deleted goes with ls');
    if ((values['max-unused'] !== undefined || values['dry-run']) && action !== 'prune') throw new UsageError('--max-unused and --dry-run go with prune');
    if (values['new-passphrase-file'] !== undefined && action !== 'passphrase') throw new UsageError('--new-passphrase-file goes with passphrase');
    if (values.purge && action !== 'rm') throw new UsageError('--purge goes with rm');
    const out = (human: string, json: unknown) => (humanOutput(values) ? console.log(human) : printJson(json));
    if (action === 'create') {
      const { vault, recoveryKey } = await createVault(vaultRemote(values), passphrase(values), fileHeads());
      return void out(`vault ${vault.id}\nrecovery key (shown once; with it the vault opens without the passphrase):\n  ${recoveryKey}`, { id: vault.id, recoveryKey });
    }
    if (action === 'passphrase') {
      if (a) throw new UsageError('passphrase ID');
      // read before the vault is opened: a missing new passphrase changes nothing
      const f = str(values, 'new-passphrase-file');
      const next = f !== undefined ? readFileSync(f, 'utf8').replace(/\r?\n$/, '') : process.env.DSYNC_VAULT_NEW_PASSPHRASE;
      if (!next) throw new UsageError('the new passphrase: --new-passphrase-file FILE or $DSYNC_VAULT_NEW_PASSPHRASE, not empty');
      await (await opened(values, id)).changePassphrase(next);
      return void out(`vault ${id}: passphrase changed (devices already open stay open; the recovery key is the same)`, { id, changed: true });
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
    if (action === 'purge' || (action === 'rm' && values.purge)) {
      if (b || (action === 'rm' && !a)) throw new UsageError(action === 'rm' ? 'rm ID NAME --purge' : 'purge ID [NAME]');
      const r = await (await opened(values, id)).purge(a === undefined ? undefined : [a]);
      return void out(purgeLine(r.purged), r);
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
      const n = versionNumber('the version to restore', b);
      const r = await (await opened(values, id)).restore(a, n);
      return void out(`${a}: version ${n} restored as version ${r.version}`, { name: a, from: n, ...r });
    }
    if (action === 'keep') {
      const n = versionNumber('the versions to keep', a);
      if (b) throw new UsageError('keep ID N');
      const r = await (await opened(values, id)).keep(n);
      return void out(`vault ${id} keeps ${n} version${n === 1 ? '' : 's'} of each file`, { keep: n, ...r });
    }
    if (action === 'push') {
      if (!a) throw new UsageError('push ID FILE [NAME]');
      await stat(a); // a missing FILE fails before the vault is opened
      const r = await pushFile(await opened(values, id), a, b ?? path.basename(a));
      return void out(pushLine(r), r);
    }
    if (action === 'pull') {
      if (!a) throw new UsageError('pull ID NAME [DEST]');
      const dest = b ?? a.split('/').pop()!;
      const version = values.version === undefined ? undefined : versionNumber('--version', str(values, 'version'));
      const vault = await opened(values, id);
      // DEST, if there, is the old copy: only the chunks it lacks are fetched
      const exists = await stat(dest).then(
        () => true,
        (e) => (e.code === 'ENOENT' ? false : Promise.reject(e)),
      );
      const r = await pullFile(vault, a, dest, { version, local: exists ? dest : undefined });
      return void out(pullLine(dest, r), r);
    }
    if (action === 'prune') {
      if (a) throw new UsageError('prune ID');
      const raw = values['max-unused'] === undefined ? undefined : str(values, 'max-unused');
      const m = raw === undefined ? null : /^(\d{1,3}(?:\.\d+)?)%?$/.exec(raw);
      if (raw !== undefined && (!m || Number(m[1]) > 100)) throw new UsageError(`--max-unused is a share from 0 to 100%, not ${JSON.stringify(raw)}`);
      const r = await prune(await opened(values, id), { maxUnused: m ? Number(m[1]) / 100 : undefined, dryRun: !!values['dry-run'] });
      return void out(pruneLine(r), r);
    }
    throw new UsageError(`no vault action ${JSON.stringify(action)}: create, passphrase, ls, push, pull, log, rm, purge, mv, restore, keep or prune`);
  },
};

const percent = (share: number) => `${(share * 100).toFixed(1)}%`;

/** A prune's report for people. */
function pruneLine(r: PruneReport): string {
  if (!r.packsRead) return `nothing to prune: ${percent(r.unusedBefore)} of ${formatBytes(r.bytesBefore)} in ${r.packsBefore} packs unused (at most ${percent(r.maxUnused)})`;
  const what = `${r.packsRead} pack${r.packsRead === 1 ? '' : 's'} (${formatBytes(r.bytesRead)}, ${formatBytes(r.liveBytes)} of it in use)`;
  if (r.dryRun) return `would rewrite ${what}: ${formatBytes(r.bytesBefore)} to some ${formatBytes(r.bytesAfter)}, unused ${percent(r.unusedBefore)} to ${percent(r.unusedAfter)} (dry run: nothing written)`;
  return `rewrote ${what} into ${r.packsWritten} (${formatBytes(r.bytesWritten)}), ${r.versions} manifest${r.versions === 1 ? '' : 's'} written again: ${formatBytes(r.bytesBefore)} in ${r.packsBefore} packs to ${formatBytes(r.bytesAfter)} in ${r.packsAfter}, unused ${percent(r.unusedBefore)} to ${percent(r.unusedAfter)}${r.kept ? `; ${r.kept} still in use by a change made meanwhile` : ''} (the server's gc deletes the old packs after its grace period)`;
}
