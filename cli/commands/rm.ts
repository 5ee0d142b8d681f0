/** `dsync rm NAME [--version V]` deletes a file or one of its versions; `dsync rm -r FOLDER/`
 *  deletes a folder: every file under it, and the folder leaves the listing. With --vault ID,
 *  in a vault, whose deletes keep the files' versions; with --purge, forgets deleted files of a
 *  vault with their versions. */
import { type Command, UsageError, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { FolderRemoveAnswer, RemoveAnswer } from '../../shared/src/wire/api.ts';
import { PURGE_HELP, VAULT_OPTS, opened, purgeLine, vaultListing, vaultOf } from '../vaults.ts';

export const command: Command = {
  usage: 'rm NAME [--version V] | rm -r FOLDER --server URL [--vault ID [--purge]] [--json]',
  about: `Deletes the file NAME with all its versions, or only its version V. With -r, deletes the
folder FOLDER (with or without its trailing "/"): every file under it with all its versions,
and the folders under it; the folder is no longer listed. Like rm, a folder needs -r.
With --vault ID, in that vault (docs/vaults.md): the file (or with -r every live file under
FOLDER, in one change of its tree: all or none) leaves the listing and keeps its versions
(dsync log NAME --vault ID, dsync restore NAME --version V --vault ID); a file another device
changed meanwhile refuses it. A vault deletes no single version: --version is refused.
With --vault ID --purge, NAME must be a deleted file of the vault (with -r: every deleted file
under FOLDER) and is forgotten with all its versions (dsync vault purge ID forgets every deleted
file).
${PURGE_HELP}
The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: {
    ...SERVER_OPTS,
    version: { type: 'string', arg: 'V', help: 'delete only this version' },
    recursive: { type: 'boolean', short: 'r', help: 'delete a folder and everything under it' },
    purge: { type: 'boolean', help: 'with --vault: forget the deleted file NAME (-r: the deleted files under FOLDER) with all its versions, for good' },
    ...VAULT_OPTS,
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const vaultId = vaultOf(values, { version: 'a vault deletes whole files, and keeps their versions' });
    const version = intFlag(values, 'version', 0, 1);
    if (values.purge) {
      // a plain folder's deleted files are in its trash: dsync rm .dsync-trash/… deletes them
      if (vaultId === undefined) throw new UsageError('--purge goes with --vault (a plain folder\'s deleted files are in its trash: dsync rm -r .dsync-trash/STAMP)');
      const vault = await opened(values, vaultId);
      const folder = name.replace(/\/+$/, '') + '/';
      let names = [name];
      if (values.recursive) {
        names = (await vault.ls({ deleted: true })).map((f) => f.name).filter((n) => n.startsWith(folder));
        if (!names.length) throw new Error(`vault ${vaultId} has no deleted file under ${folder}`);
      } else if (name.endsWith('/')) throw new UsageError(`${name} is a folder: rm -r ${name} --purge forgets every deleted file under it`);
      const r = await vault.purge(names);
      if (humanOutput(values)) console.log(purgeLine(r.purged));
      else printJson(r);
      return;
    }
    if (values.recursive) {
      if (version) throw new UsageError('-r deletes whole files: --version does not go with it');
      const folder = name.replace(/\/+$/, '');
      let res: FolderRemoveAnswer;
      if (vaultId !== undefined) {
        const vault = await opened(values, vaultId);
        const files = vaultListing(await vault.tree(), folder + '/', true).files;
        if (!files.length) throw new Error(`vault ${vaultId} has no file under ${folder}/`);
        // each file only while its newest version is the one listed
        await vault.rmMany(files.map((f) => ({ name: f.name, version: f.latest })));
        res = { folder, removed: files.map((f) => f.name) };
      } else res = await api<FolderRemoveAnswer>(values, 'DELETE', `/api/folders?${new URLSearchParams({ name: folder })}`);
      if (humanOutput(values)) console.log(`deleted ${res.folder} (${res.removed.length} file${res.removed.length === 1 ? '' : 's'})`);
      else printJson(res);
      return;
    }
    if (name.endsWith('/')) throw new UsageError(`${name} is a folder: rm -r ${name} deletes it and every file in it`);
    if (vaultId !== undefined) {
      const r = await (await opened(values, vaultId)).rm(name);
      if (humanOutput(values)) console.log(`deleted ${name} (its versions are kept: dsync log ${name} --vault ${vaultId})`);
      else printJson({ name, ...r });
      return;
    }
    const q = new URLSearchParams({ name, ...(version && { version: String(version) }) });
    const res = await api<RemoveAnswer>(values, 'DELETE', `/api/files?${q}`);
    if (humanOutput(values)) console.log(`deleted ${name}${version ? ` v${version}` : ''}`);
    else printJson(res ?? { name, ...(version && { version }) });
  },
};
