/** `dsync restore NAME --version V`: makes an old version the latest again. */
import { type Command, UsageError, intFlag } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';

export const command: Command = {
  usage: 'restore NAME --version V --server URL [--json]',
  about: `Makes version V of NAME its latest again, as a new version with V's content. No bytes are
sent or copied: the new version shares V's chunks. Prints the new version.`,
  options: {
    ...SERVER_OPTS,
    version: { type: 'string', arg: 'V', help: 'the version to restore (required)' },
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    if (values.version === undefined) throw new UsageError('--version V is required');
    const version = intFlag(values, 'version', 0, 1);
    const res = await api<{ version: number }>(values, 'POST', '/api/files/restore', { name, version });
    if (humanOutput(values)) console.log(`${name}: v${version} restored as v${res.version}`);
    else printJson({ name, restored: version, version: res.version });
  },
};
