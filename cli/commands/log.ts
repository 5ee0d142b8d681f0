/** `dsync log NAME`: the versions of a file (on the server, or in a vault with --vault ID). */
import { formatBytes } from '../../shared/src/base/units.ts';
import type { Command } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { VersionInfo } from '../../shared/src/wire/api.ts';
import { VAULT_OPTS, opened, vaultOf } from '../vaults.ts';

/** A version as listed: a vault's has no root, algorithm or change in its listing. */
type Listed = Omit<VersionInfo, 'root' | 'algo' | 'change'> & Partial<Pick<VersionInfo, 'root' | 'algo' | 'change'>>;

export const command: Command = {
  usage: 'log NAME --server URL [--vault ID] [--json]',
  about: `Lists the versions of NAME, newest first: its size, how many bytes changed from the
version before, when it was made, and by which client or, for a restore, from which version. On a terminal a table; otherwise, or
with --json, each version as GET /api/versions gives it, one per line.
With --vault ID, the versions of NAME in that vault (docs/vaults.md), live or deleted, the same
way: "mtime" when it was pushed, "modified" the file's own, "client" the device that pushed it
(no change in bytes). The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: { ...SERVER_OPTS, ...VAULT_OPTS, json: JSON_OPT },
  positionals: [1, 1],
  async run(values, [name]) {
    const vaultId = vaultOf(values);
    let versions: Listed[];
    let deleted = 0;
    if (vaultId !== undefined) {
      const log = await (await opened(values, vaultId)).log(name);
      versions = log.versions.map((v) => ({ version: v.n, size: v.size, mtime: new Date(v.pushed).toISOString(), modified: v.mtime, client: v.device }));
      deleted = log.deleted;
    } else versions = await api<VersionInfo[]>(values, 'GET', `/api/versions?name=${encodeURIComponent(name)}`);
    versions.sort((a, b) => b.version - a.version);
    if (!humanOutput(values)) return void versions.forEach(printJson);
    const rows = versions.map((v) => [`v${v.version}`, formatBytes(v.size), v.change === undefined ? '' : formatBytes(v.change), shortDate(v.mtime), [v.client, v.restoredFrom && `restored from v${v.restoredFrom}`].filter(Boolean).join(', ')]);
    console.log(table(['VERSION', 'SIZE', 'CHANGED', 'MADE', 'FROM'], rows, [0, 1, 2]));
    if (deleted) console.log(`deleted ${shortDate(deleted)}; its versions are kept (dsync restore ${name} --version V --vault ${vaultId} brings one back)`);
  },
};
