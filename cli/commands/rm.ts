/** `dsync rm NAME [--version V]` deletes a file or one of its versions; `dsync rm -r FOLDER/`
 *  deletes a folder: every file under it, and the folder leaves the listing. */
import { type Command, UsageError, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { FolderRemoveAnswer, RemoveAnswer } from '../../shared/src/wire/api.ts';

export const command: Command = {
  usage: 'rm NAME [--version V] | rm -r FOLDER --server URL [--json]',
  about: `Deletes the file NAME with all its versions, or only its version V. With -r, deletes the
folder FOLDER (with or without its trailing "/"): every file under it with all its versions,
and the folders under it; the folder is no longer listed. Like rm, a folder needs -r.`,
  options: {
    ...SERVER_OPTS,
    version: { type: 'string', arg: 'V', help: 'delete only this version' },
    recursive: { type: 'boolean', short: 'r', help: 'delete a folder and everything under it' },
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const version = intFlag(values, 'version', 0, 1);
    if (values.recursive) {
      if (version) throw new UsageError('-r deletes whole files: --version does not go with it');
      const folder = name.replace(/\/+$/, '');
      const res = await api<FolderRemoveAnswer>(values, 'DELETE', `/api/folders?${new URLSearchParams({ name: folder })}`);
      if (humanOutput(values)) console.log(`deleted ${res.folder} (${res.removed.length} file${res.removed.length === 1 ? '' : 's'})`);
      else printJson(res);
      return;
    }
    if (name.endsWith('/')) throw new UsageError(`${name} is a folder: rm -r ${name} deletes it and every file in it`);
    const q = new URLSearchParams({ name, ...(version && { version: String(version) }) });
    const res = await api<RemoveAnswer>(values, 'DELETE', `/api/files?${q}`);
    if (humanOutput(values)) console.log(`deleted ${name}${version ? ` v${version}` : ''}`);
    else printJson(res ?? { name, ...(version && { version }) });
  },
};
