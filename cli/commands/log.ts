/** `dsync log NAME`: the versions of a file. */
import { formatBytes } from '../../shared/src/base/units.ts';
import type { Command } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { VersionInfo } from '../../shared/src/wire/api.ts';

export const command: Command = {
  usage: 'log NAME --server URL [--json]',
  about: `Lists the versions of NAME, newest first: its size, how many bytes changed from the
version before, when it was made, and by which client or, for a restore, from which version. On a terminal a table; otherwise, or
with --json, each version as GET /api/versions gives it, one per line.`,
  options: { ...SERVER_OPTS, json: JSON_OPT },
  positionals: [1, 1],
  async run(values, [name]) {
    const versions = (await api<VersionInfo[]>(values, 'GET', `/api/versions?name=${encodeURIComponent(name)}`)).sort((a, b) => b.version - a.version);
    if (!humanOutput(values)) return void versions.forEach(printJson);
    const rows = versions.map((v) => [`v${v.version}`, formatBytes(v.size), v.change === undefined ? '' : formatBytes(v.change), shortDate(v.mtime), [v.client, v.restoredFrom && `restored from v${v.restoredFrom}`].filter(Boolean).join(', ')]);
    console.log(table(['VERSION', 'SIZE', 'CHANGED', 'MADE', 'FROM'], rows, [0, 1, 2]));
  },
};
