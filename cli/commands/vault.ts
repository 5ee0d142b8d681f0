/** `dsync vault create | ls ID | push ID FILE [NAME] | pull ID NAME [DEST] | log ID NAME | rm ID
 *  NAME [--purge] | purge ID [NAME] | mv ID OLD NEW | restore ID NAME N | keep ID N`: end-to-end
 *  encrypted folders with versions (docs/vaults.md). create, purge and keep are only here; ls
 *  --deleted too; the other actions
 *  are also the plain commands with --vault ID (`dsync push FILE --vault ID`, …), and both run
 *  the same code (cli/vaults.ts). */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { VAULT_KEEP_VERSIONS } from '../../shared/src/base/limits.ts';
import { formatBytes } from '../../shared/src/base/units.ts';
import { createVault } from '../../shared/src/vault/vault.ts';
import { type Command, UsageError, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS } from '../remote.ts';
import { DEVICE_OPT, PURGE_HELP, SECRET_OPTS, fileHeads, opened, passphrase, pullFile, pullLine, purgeLine, pushFile, pushLine, vaultRemote, versionNumber } from '../vaults.ts';

export const command: Command = {
  usage: 'vault create | ls ID [--deleted] | push ID FILE [NAME] | pull ID NAME [DEST] [--version N] | log ID NAME | rm ID NAME [--purge] | purge ID [NAME] | mv ID OLD NEW | restore ID NAME N | keep ID N --server URL',
  about: `End-to-end encrypted folders: the server stores padded, sealed packs and one sealed head,
and never sees a name, a byte or a chunk boundary (docs/vaults.md). create makes a vault and prints
its id and its recovery key (shown once: keep it); ls lists its files (--deleted: the deleted ones);
push uploads FILE as a new version of NAME (default: FILE's name), only the chunks the vault lacks;
pull writes NAME (--version N: that version) to DEST (default: NAME's last component), fetching only
the chunks DEST lacks, through a temporary file renamed at the end; log lists NAME's versions; rm
deletes NAME, keeping its history; purge forgets the deleted file NAME (without NAME: every deleted
file) with all its versions (rm ID NAME --purge: the same for NAME).
${PURGE_HELP}
mv renames OLD to NEW with its history (onto a deleted file's name: OLD's newest version becomes a
new version of that file and OLD is deleted, both histories kept); restore makes version N of NAME
(live or deleted) its newest version, uploading no contents; keep sets how many versions each file
keeps (default ${VAULT_KEEP_VERSIONS}; older ones are forgotten). The passphrase: --passphrase-file FILE or
$DSYNC_VAULT_PASSPHRASE. The plain commands take a vault too, with --vault ID (dsync push FILE
--vault ID, pull, ls, log, restore, rm, mv: each one's --help); they run the same code.`,
  options: {
    ...SERVER_OPTS,
    ...SECRET_OPTS,
    ...DEVICE_OPT,
    version: { type: 'string', arg: 'N', help: 'pull: that version of NAME (see log)' },
    deleted: { type: 'boolean', help: 'ls: the deleted files, whose history is kept' },
    purge: { type: 'boolean', help: 'rm: forget the deleted file NAME with all its versions (as purge ID NAME)' },
    json: JSON_OPT,
  },
  positionals: [1, 4],
  async run(values, [action, id, a, b]) {
    if (values.version !== undefined && action !== 'pull') throw new UsageError('--version goes with pull');
    if (values.deleted && action !== 'ls') throw new UsageError('--deleted goes with ls');
    if (values.purge && action !== 'rm') throw new UsageError('--purge goes with rm');
    const out = (human: string, json: unknown) => (humanOutput(values) ? console.log(human) : printJson(json));
    if (action === 'create') {
      const { vault, recoveryKey } = await createVault(vaultRemote(values), passphrase(values), fileHeads());
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
    throw new UsageError(`no vault action ${JSON.stringify(action)}: create, ls, push, pull, log, rm, purge, mv, restore or keep`);
  },
};
