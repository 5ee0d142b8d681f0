/** `dsync ls [-R] [FOLDER]`: the files and folders on the server, a folder at a time or all
 *  below it. */
import { compareNames } from '../../shared/src/base/natural.ts';
import { formatBytes } from '../../shared/src/base/units.ts';
import type { Command } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, shortDate, table } from '../output.ts';
import { SERVER_OPTS, api } from '../remote.ts';
import type { FileInfo, ListingPage } from '../../shared/src/wire/api.ts';
import { VAULT_OPTS, opened, vaultListing, vaultOf } from '../vaults.ts';

/** Entries asked per request; the command follows `next` until the listing ends. */
const PAGE = 1000;

export const command: Command = {
  usage: 'ls [-R] [FOLDER] --server URL [--vault ID] [--json]',
  about: `Lists the files and folders in FOLDER (default: the top), folders first; with -R every
file and folder below it, each by its path from FOLDER. On a terminal a
table of name, size, the latest version's number, how many versions are kept and when the
latest was made (numbers are never reused: a name keeps counting after deletes, and a file
moved onto a name used before continues that name's numbers, so "v4" may have 1 version); otherwise, or with --json, one
JSON object per line: each file as GET /api/files gives it, and {"folder": "NAME/"} per folder.
With --vault ID, the live files and folders of that vault (docs/vaults.md), the same way (its
time: when the version was pushed; "modified": the file's own); dsync vault ls ID --deleted
lists its deleted files. The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE.`,
  options: { ...SERVER_OPTS, recursive: { type: 'boolean', short: 'R', help: 'list every file and folder below FOLDER' }, ...VAULT_OPTS, json: JSON_OPT },
  positionals: [0, 1],
  async run(values, [folder]) {
    const prefix = folder ? folder.replace(/\/*$/, '/') : '';
    const files: FileInfo[] = [];
    const folders: string[] = [];
    const vaultId = vaultOf(values);
    if (vaultId !== undefined) {
      const listed = vaultListing(await (await opened(values, vaultId)).tree(), prefix, !!values.recursive);
      files.push(...listed.files);
      folders.push(...listed.folders);
    } else {
      let cursor: string | null | undefined;
      do {
        const q = new URLSearchParams({ prefix, limit: String(PAGE), ...(cursor && { cursor }), ...(values.recursive && { recursive: '1' }) });
        const page = await api<ListingPage>(values, 'GET', `/api/files?${q}`);
        if (!Array.isArray(page?.files) || !Array.isArray(page.folders)) throw new Error('the server does not list files by folder (GET /api/files?prefix=…): it needs an update');
        files.push(...page.files);
        folders.push(...page.folders);
        cursor = page.next;
      } while (cursor);
    }
    const asFolder = (f: string) => (f.endsWith('/') ? f : f + '/');
    folders.sort(compareNames);
    files.sort((a, b) => compareNames(a.name, b.name));
    if (!humanOutput(values)) {
      for (const f of folders) printJson({ folder: asFolder(f) });
      for (const f of files) printJson(f);
      return;
    }
    if (!files.length && !folders.length) return void console.log(prefix ? `nothing in ${prefix}` : 'no files yet');
    const rows = [
      ...folders.map((f) => [asFolder(f).slice(prefix.length), '', '', '', '']),
      ...files.map((f) => [f.name.slice(prefix.length), formatBytes(f.size), `v${f.latest}`, String(f.versions), shortDate(f.mtime)]),
    ];
    // a tree reads in name order, each folder just before what it holds
    if (values.recursive) rows.sort((a, b) => compareNames(a[0], b[0]));
    console.log(table(['NAME', 'SIZE', 'LATEST', 'VERSIONS', 'MODIFIED'], rows, [1, 2, 3]));
    console.log(`${files.length} file${files.length === 1 ? '' : 's'}, ${formatBytes(files.reduce((a, f) => a + f.size, 0))}${folders.length ? `; ${folders.length} folder${folders.length === 1 ? '' : 's'}` : ''}`);
  },
};
