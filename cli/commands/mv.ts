/** `dsync mv OLD NEW`: renames a file or a folder on the server (no bytes move). */
import type { Command } from '../command.ts';
import { JSON_OPT, humanOutput, printJson } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { MoveAnswer, MoveRequest } from '../../shared/src/wire/api.ts';

export const command: Command = {
  usage: 'mv OLD NEW --server URL [--json]',
  about: `Renames the file (or folder) OLD to NEW, with all its versions. Only names change on the
server: no bytes are sent or copied.`,
  options: { ...SERVER_OPTS, json: JSON_OPT },
  positionals: [2, 2],
  async run(values, [from, to]) {
    const res = await api<MoveAnswer>(values, 'POST', '/api/files/move', { from, to } satisfies MoveRequest);
    if (humanOutput(values)) console.log(`${from} → ${to}`);
    else printJson(res ?? { from, to });
  },
};
