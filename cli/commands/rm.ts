/** `dsync rm NAME [--version V]`: deletes a file, or one of its versions. */
import { type Command, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';

export const command: Command = {
  usage: 'rm NAME [--version V] --server URL [--json]',
  about: 'Deletes the file NAME with all its versions, or only its version V.',
  options: {
    ...SERVER_OPTS,
    version: { type: 'string', arg: 'V', help: 'delete only this version' },
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const version = intFlag(values, 'version', 0, 1);
    const q = new URLSearchParams({ name, ...(version && { version: String(version) }) });
    const res = await api(values, 'DELETE', `/api/files?${q}`);
    if (humanOutput(values)) console.log(`deleted ${name}${version ? ` v${version}` : ''}`);
    else printJson(res ?? { name, ...(version && { version }) });
  },
};
