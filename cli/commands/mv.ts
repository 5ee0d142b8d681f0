/** `dsync mv OLD NEW`: renames a file or a folder on the server (no bytes move), or in a vault
 *  with --vault ID. */
import type { Command } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { MoveAnswer, MoveRequest } from '../../shared/src/wire/api.ts';
import { VAULT_OPTS, opened, vaultListing, vaultOf } from '../vaults.ts';

export const command: Command = {
  usage: 'mv OLD NEW --server URL [--vault ID] [--json]',
  about: `Renames the file (or folder) OLD to NEW, with all its versions. Only names change on the
server: no bytes are sent or copied.
With --vault ID, in that vault (docs/vaults.md): a file, or every live file under the folder
OLD, in one change of its tree (all or none; a file another device changed meanwhile refuses
it). NEW must not name a file the vault holds, live or deleted (a deleted one keeps its history
under its name). The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: { ...SERVER_OPTS, ...VAULT_OPTS, json: JSON_OPT },
  positionals: [2, 2],
  async run(values, [from, to]) {
    const vaultId = vaultOf(values);
    let res: MoveAnswer | undefined;
    if (vaultId !== undefined) {
      const vault = await opened(values, vaultId);
      const tree = await vault.tree();
      const under = tree.files.some((f) => f.name === from) ? [] : vaultListing(tree, from.replace(/\/+$/, '') + '/', true).files;
      const moves = under.length ? under.map((f) => ({ from: f.name, to: to.replace(/\/+$/, '') + f.name.slice(from.replace(/\/+$/, '').length), version: f.latest })) : [{ from, to }];
      await vault.mvMany(moves);
      res = { moved: moves.length };
    } else res = await api<MoveAnswer>(values, 'POST', '/api/files/move', { from, to } satisfies MoveRequest);
    if (humanOutput(values)) console.log(`${from} → ${to}`);
    else printJson(res ?? { from, to });
  },
};
