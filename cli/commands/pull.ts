/**
 * `dsync pull NAME --out FILE`: fetches a version; with `--basis OLDFILE` only the chunks the
 * old copy lacks come down. The file is written beside FILE and renamed over it once it
 * verified; an existing FILE is replaced only with --force.
 *
 * `dsync pull FOLDER/ --out DIR`: every file under FOLDER, each to its path under DIR, over one
 * connection; a file DIR already holds is replaced only with --force, and is then the basis of
 * its own pull (only the chunks it lacks come down). Each name the server lists is checked
 * before it becomes a path, and nothing is written through a symbolic link or outside DIR
 * (cli/contained.ts, the rule of `dsync sync`; docs/sync.md "Containment"), --force too.
 */
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import '../../shared/src/chunking/wasm.ts';
import { type SyncReport, pull } from '../../shared/src/session/delta-client.ts';
import { ConnectionPool } from '../../shared/src/transport/connection-pool.ts';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { nodeHashPool } from '../../shared/src/chunking/hash-workers-node.ts';
import { type Command, EXIT_FAILED, EXIT_OK, UsageError, type Values, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, progressBar, stdoutFile, syncSummary } from '../output.ts';
import { SERVER_OPTS, api, syncUrl, webSocket } from '../remote.ts';
import { SYNC_OPTS, algoOf, chunkParams, knownOf } from '../sync-options.ts';
import { checkParents, checkTarget, openNoFollow, setModified, tempName } from '../contained.ts';
import { listedNameFits } from '../../shared/src/sync/remote.ts';
import type { Skipped } from '../../shared/src/sync/engine.ts';
import type { FileInfo, ListingPage, VersionInfo } from '../../shared/src/wire/api.ts';
import { VaultError } from '../../shared/src/vault/format.ts';
import { KEYED_CHUNKING, VAULT_OPTS, opened, pullFile, pullLine, vaultListing, vaultOf } from '../vaults.ts';

/** The size of the version to come, for the progress bar (0 when the server does not say). */
async function sizeOf(values: Values, name: string, version: number): Promise<number> {
  try {
    const versions = await api<VersionInfo[]>(values, 'GET', `/api/versions?name=${encodeURIComponent(name)}`);
    const v = version ? versions.find((x) => x.version === version) : versions.reduce((a, b) => (b.version > a.version ? b : a));
    return v?.size ?? 0;
  } catch {
    return 0;
  }
}

/** Whether the server lists anything under `name/`. */
async function isFolder(values: Values, name: string): Promise<boolean> {
  const page = await api<ListingPage>(values, 'GET', `/api/files?${new URLSearchParams({ prefix: name.replace(/\/+$/, '') + '/', limit: '1' })}`).catch(() => null);
  return !!page && page.files.length + page.folders.length > 0;
}

/** One pull of `name` into `outFile` (via a temporary file beside it, renamed over it once
 *  verified; `-`: stdout as it arrives), against `basisPath` if given. `check`: runs right
 *  before the rename (a folder pull checks again that no link is in the way). */
async function pullOne(values: Values, name: string, outFile: string, basisPath: string | undefined, o: { version: number; connection?: ConnectionPool; check?: () => Promise<unknown> }): Promise<SyncReport> {
  const human = humanOutput(values);
  const basisFh = basisPath ? await (o.check ? openNoFollow(basisPath) : fs.open(basisPath, 'r')) : null;
  const basisSize = basisFh ? (await basisFh.stat()).size : 0;
  const pool = basisSize >= OFF_THREAD_MIN ? nodeHashPool() : null;
  const bar = progressBar(name, human && process.stderr.isTTY ? await sizeOf(values, name, o.version) : 0, values);
  let written = 0;
  const toStdout = outFile === '-';
  // a short temporary name, so that it fits beside any name (contained.ts tempName)
  const tmp = path.join(path.dirname(outFile), tempName());
  const out = toStdout ? stdoutFile() : await fs.open(tmp, 'wx');
  let closed = toStdout;
  let modified: number | undefined;
  try {
    const report = await pull({
      url: syncUrl(values),
      name,
      WebSocket: webSocket(values),
      connection: o.connection,
      params: chunkParams(values),
      algo: algoOf(values),
      version: o.version,
      known: knownOf(values),
      basis: basisFh ? fileSource(basisFh, basisSize, pool) : null,
      onProgress: (phase, seconds) => phase === 'busy' && console.error(`dsync pull: ${name}: the server is busy; trying again in ${seconds} s`),
      onReady: (r) => void (modified = r.modified),
      sink: {
        write: async (b) => {
          await out.write(b);
          bar.update((written += b.length));
        },
        commit: async () => {
          if (toStdout) return 0;
          await out.sync();
          // the version's modification time, as rsync -a keeps it
          await setModified(out as fs.FileHandle, modified); // (not stdout: returned above)
          await out.close();
          closed = true;
          await o.check?.();
          await fs.rename(tmp, outFile);
          return 0;
        },
        abort: async () => {
          if (!closed) await out.close();
          closed = true;
          await fs.rm(tmp, { force: true });
        },
      },
    });
    bar.stop();
    return report;
  } finally {
    bar.stop();
    if (!closed) {
      await out.close().catch(() => {});
      await fs.rm(tmp, { force: true });
    }
    await basisFh?.close();
    pool?.close();
  }
}

/** Every file and folder the server lists under `prefix` (GET /api/files?recursive=1). */
async function serverListing(values: Values, prefix: string): Promise<{ files: FileInfo[]; folders: string[] }> {
  const files: FileInfo[] = [];
  const folders: string[] = [];
  let cursor: string | null = null;
  do {
    const q = new URLSearchParams({ prefix, recursive: '1', limit: '10000', ...(cursor && { cursor }) });
    const page: ListingPage = await api(values, 'GET', `/api/files?${q}`);
    if (!Array.isArray(page?.files) || !Array.isArray(page.folders) || (page.next !== null && typeof page.next !== 'string')) throw new Error('the server sent a malformed listing');
    files.push(...page.files);
    folders.push(...page.folders);
    cursor = page.next;
  } while (cursor);
  return { files, folders };
}

/** One file of a folder pull: `name` into `to`, against `basis` (the file there, when --force
 *  replaces it), `check` right before the rename; its line for people and its JSON report. */
type PullTo = (name: string, to: string, basis: string | undefined, check: () => Promise<unknown>) => Promise<{ line: string; json: unknown }>;

/** `pull FOLDER/ --out DIR`: every file listed under `prefix` ('…/'), and its empty folders,
 *  under DIR, each file by `pullTo` (from the server or from a vault). */
async function pullFolder(values: Values, prefix: string, dir: string, { files, folders }: { files: FileInfo[]; folders: string[] }, pullTo: PullTo): Promise<number> {
  const human = humanOutput(values);
  if (!files.length && !folders.length) {
    console.error(`dsync pull: nothing under ${prefix} ${str(values, 'vault') === undefined ? 'on the server' : 'in the vault'}`);
    return EXIT_FAILED;
  }
  await fs.mkdir(dir, { recursive: true }); // DIR itself as the user named it (a link or not)
  // every listed name checked before it becomes a path (the rule of `dsync sync`)
  const unlisted: Skipped[] = [];
  const fits = (name: string) => listedNameFits(name, name.slice(prefix.length), { windows: process.platform === 'win32' }, unlisted) && name.length > prefix.length;
  const rel = (name: string) => name.slice(prefix.length);
  let failures = 0;
  const failed = (what: string, e: unknown) => {
    failures++;
    console.error(`dsync pull: ${what}: ${(e as Error).message}`);
  };
  for (const f of folders) {
    if (typeof f !== 'string' || !f.startsWith(prefix) || !f.endsWith('/') || !fits(f.slice(0, -1))) continue;
    try {
      const full = await checkParents(dir, rel(f.slice(0, -1)), true);
      await fs.mkdir(full).catch((e) => {
        if (e.code !== 'EEXIST') throw e;
      });
      if (!(await fs.lstat(full)).isDirectory()) throw new Error(`${full} is not a folder`);
    } catch (e) {
      failed(f, e);
    }
  }
  for (const { name } of files) {
    if (typeof name !== 'string' || !name.startsWith(prefix) || !fits(name)) continue;
    try {
      const to = await checkParents(dir, rel(name), true);
      // a link at the name is refused even with --force: it is not replaced, nor written through
      const exists = await checkTarget(to, rel(name));
      if (exists && !values.force) {
        failures++;
        console.error(`dsync pull: ${to} exists; --force replaces it`);
        continue;
      }
      const check = async () => {
        await checkParents(dir, rel(name));
        await checkTarget(to, rel(name));
      };
      const { line, json } = await pullTo(name, to, exists ? to : undefined, check);
      if (human) console.log(line);
      else printJson(json);
    } catch (e) {
      failed(name, e);
    }
  }
  for (const s of unlisted) {
    failures++;
    console.error(`dsync pull: skipped ${s.path}: ${s.reason}`);
  }
  return failures ? EXIT_FAILED : EXIT_OK;
}

export const command: Command = {
  usage: 'pull NAME --server URL --out FILE [--version V] [--basis OLDFILE] [--force] [--vault ID] [--json]\n       pull FOLDER/ --server URL --out DIR [--force] [--vault ID] [--json]',
  about: `Fetches NAME (its latest version, or V) into FILE. With --basis, an older copy of the file,
only the chunks it lacks come down. The file is verified before it replaces FILE; an existing
FILE is replaced only with --force; FILE's folder must exist. --out - writes the file to
stdout as it arrives (the report goes to stderr; if it fails verification the status is 1).
A FOLDER/ (ending in "/") comes down whole into DIR: each file to its path under DIR, over one
connection; a file DIR already has is replaced only with --force, and then only the chunks it
lacks come down. Empty folders are made too.
Prints on a terminal "report.pdf ← v3: 23 KB received of 20 MB (99.8% saved) in 0.15 s",
with a progress bar for large files; otherwise, or with --json, its JSON report.
With --vault ID, NAME (or FOLDER/) comes from that vault (docs/vaults.md) the same way: the
chunks --basis (or, in a folder, the file --force replaces) holds are not fetched, every chunk
is verified before it is written, a deleted file only by --version; it prints "notes.txt (v3):
20 MB, 2398 of 2400 chunks from the old copy, 30 KB fetched" (with --json, the vault's report).
The passphrase: --passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE (or --recovery-key-file), as
dsync vault takes it; a wrong one fails before anything is written. The chunking flags are
refused (a vault chunks with its own keys).
Exit status: 0 pulled, 1 failed (or FILE exists), 2 a wrong command line.`,
  options: {
    ...SERVER_OPTS,
    out: { type: 'string', short: 'o', arg: 'FILE', help: 'where the file (or the folder) goes (required; - for stdout)' },
    version: { type: 'string', arg: 'V', help: 'the version to fetch (default: the latest)' },
    basis: { type: 'string', arg: 'OLDFILE', help: 'a local older copy: only the chunks it lacks come down' },
    force: { type: 'boolean', short: 'f', help: 'replace FILE (or files under DIR) if it exists' },
    ...SYNC_OPTS,
    ...VAULT_OPTS,
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const vaultId = vaultOf(values, Object.fromEntries(Object.keys(SYNC_OPTS).map((f) => [f, KEYED_CHUNKING])));
    const outFile = str(values, 'out');
    if (!outFile) throw new UsageError('--out FILE is required');
    const version = intFlag(values, 'version', 0);
    if (name.endsWith('/')) {
      if (version || str(values, 'basis')) throw new UsageError('a folder pull takes the latest of each file, against the file under DIR: no --version or --basis');
      const prefix = name.replace(/\/+$/, '') + '/';
      if (vaultId !== undefined) {
        const vault = await opened(values, vaultId);
        return pullFolder(values, prefix, outFile, vaultListing(await vault.tree(), prefix, true), async (n, to, basis, check) => {
          const r = await pullFile(vault, n, to, { local: basis, check });
          return { line: pullLine(to, r), json: { ...r, path: to } };
        });
      }
      const listing = await serverListing(values, prefix);
      const connections = new ConnectionPool(webSocket(values));
      try {
        return await pullFolder(values, prefix, outFile, listing, async (n, to, basis, check) => {
          const r = await pullOne(values, n, to, basis, { version: 0, connection: connections, check });
          return { line: syncSummary(r, 'pull'), json: { ...r, path: to } };
        });
      } finally {
        connections.close();
      }
    }
    chunkParams(values);
    algoOf(values);
    const toStdout = outFile === '-';
    if (!toStdout && existsSync(outFile) && !values.force) {
      console.error(`dsync pull: ${outFile} exists; --force replaces it`);
      return EXIT_FAILED;
    }
    if (!toStdout && !existsSync(path.dirname(path.resolve(outFile)))) {
      console.error(`dsync pull: the folder ${path.dirname(outFile)} does not exist; create it first (mkdir -p ${path.dirname(outFile)})`);
      return EXIT_FAILED;
    }
    if (vaultId !== undefined) {
      const vault = await opened(values, vaultId);
      let r;
      try {
        r = await pullFile(vault, name, outFile, { version: version || undefined, local: str(values, 'basis') });
      } catch (e) {
        const under = e instanceof VaultError && !version ? vaultListing(await vault.tree(), name.replace(/\/+$/, '') + '/', false) : null;
        if (under && under.files.length + under.folders.length) throw new UsageError(`${name} is a folder: pull ${name}/ --out DIR fetches every file in it`);
        throw e;
      }
      if (toStdout) console.error(humanOutput(values) ? pullLine(outFile, r) : JSON.stringify(r));
      else if (humanOutput(values)) console.log(pullLine(outFile, r));
      else printJson(r);
      return;
    }
    let report;
    try {
      report = await pullOne(values, name, outFile, str(values, 'basis'), { version });
    } catch (e) {
      // a folder named without its '/': say how to pull it
      if (e instanceof RemoteError && e.code === ErrorCode.NotFound && !version && (await isFolder(values, name))) throw new UsageError(`${name} is a folder: pull ${name}/ --out DIR fetches every file in it`);
      throw e;
    }
    // with --out - the file is stdout: the report goes to stderr
    const human = humanOutput(values);
    if (toStdout) console.error(human ? syncSummary(report, 'pull') : JSON.stringify(report));
    else if (human) console.log(syncSummary(report, 'pull'));
    else printJson(report);
  },
};
