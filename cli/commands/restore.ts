/** `dsync restore NAME --version V`: makes an old version the latest again; `dsync restore
 *  .dsync-trash/STAMP/PATH[/]`: puts a file or folder of the trash back, with its history. */
import { type Command, UsageError, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import { TRASH } from '../../shared/src/sync/remote.ts';
import type { RestoreAnswer, TrashRestoreAnswer } from '../../shared/src/wire/api.ts';
import { DEVICE_OPT, VAULT_OPTS, opened, vaultOf } from '../vaults.ts';

export const command: Command = {
  usage: 'restore NAME --version V --server URL [--vault ID] [--json]\n       dsync restore .dsync-trash/STAMP/PATH[/] --server URL [--json]',
  about: `Makes version V of NAME its latest again, as a new version with V's content. No bytes are
sent or copied: the new version shares V's chunks. Prints the new version.

Given a file or a folder (ending in "/") in the trash that dsync sync keeps (${TRASH}/STAMP/PATH;
${TRASH}/STAMP/ for all that one pass deleted), puts every file under it back at PATH with its
history. A file whose name was taken again meanwhile stays in the trash and is named; nothing is
overwritten.

With --vault ID, version V of NAME in that vault (docs/vaults.md), live or deleted (a deleted
file comes back), becomes its newest version the same way: no contents uploaded. A vault keeps
no trash: a file it deleted keeps its versions under its name (dsync log NAME --vault ID). The
passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: {
    ...SERVER_OPTS,
    version: { type: 'string', arg: 'V', help: 'the version to restore (required, except from the trash)' },
    ...VAULT_OPTS,
    ...DEVICE_OPT,
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const vaultId = vaultOf(values);
    if (values.version === undefined && name.startsWith(TRASH + '/') && vaultId === undefined) {
      const res = await api<TrashRestoreAnswer>(values, 'POST', '/api/files/restore', { name });
      if (!humanOutput(values)) return printJson({ name, ...res });
      console.log(`${name}: ${res.restored.length} file${res.restored.length === 1 ? '' : 's'} restored`);
      for (const s of res.skipped) console.log(`  ${s.name}: left in the trash (${s.why})`);
      return;
    }
    if (values.version === undefined) throw new UsageError('--version V is required');
    const version = intFlag(values, 'version', 0, 1);
    const res: RestoreAnswer = vaultId !== undefined ? await (await opened(values, vaultId)).restore(name, version) : await api<RestoreAnswer>(values, 'POST', '/api/files/restore', { name, version });
    if (humanOutput(values)) console.log(`${name}: v${version} restored as v${res.version}`);
    else printJson({ name, restored: version, version: res.version });
  },
};
