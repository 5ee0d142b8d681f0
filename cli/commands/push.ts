/**
 * `dsync push FILE|DIR...`: each file goes up as a new version, over one connection. A file or
 * directory is named by its path as typed when that path lies inside the current directory
 * (`push proj/docs/a.txt` stores `proj/docs/a.txt`, `push photos` stores `photos/b.jpg`), else
 * by its path from its parent (`push /tmp/x.txt` stores `x.txt`). Two files of one name are
 * refused before anything is sent; a file that cannot be read is reported and the rest still
 * go, and the exit status is 1.
 *
 * A push never puts an older copy over a newer version (shared/src/sync/guarded-push.ts): each file
 * goes against the version this client last pushed or pulled of it, or expects no file at its
 * name; when another device moved it on, an unchanged file is not sent and an edited one goes
 * up as a conflict copy beside it.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import '../../shared/src/chunking/wasm.ts';
import { hostname } from 'node:os';
import { type SyncReport, push } from '../../shared/src/session/delta-client.ts';
import { ConnectionPool } from '../../shared/src/transport/connection-pool.ts';
import { type GuardedOutcome, type LatestInfo, guardedPush } from '../../shared/src/sync/guarded-push.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { PUSH_RETRIES } from '../../shared/src/base/limits.ts';
import { nodeHashPool } from '../../shared/src/chunking/hash-workers-node.ts';
import { type Command, EXIT_FAILED, EXIT_OK, UsageError, type Values, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, progressBar, syncSummary } from '../output.ts';
import { SERVER_OPTS, api, explain, syncUrl, webSocket } from '../remote.ts';
import { SYNC_OPTS, algoOf, chunkParams, knownOf } from '../sync-options.ts';
import { openNoFollow } from '../contained.ts';
import { walkFolder } from '../walk.ts';
import { DEVICE_OPT, KEYED_CHUNKING, VAULT_OPTS, opened, pushFiles, pushLine, vaultOf } from '../vaults.ts';

interface Entry {
  file: string;
  name: string;
  size: number;
  /** found by walking a folder: opened without following a link */
  noFollow?: boolean;
}

/** The files under `dir`, whose name on the server is `name`, by the walk of `dsync sync`
 *  (cli/walk.ts): links are never followed (a link to ~/.ssh/id_ed25519 is not uploaded), nor
 *  mount points; they and special files are skipped with a note. A folder that cannot be
 *  read, or a second name on disk for one name, is a failure. */
async function walk(dir: string, name: string, out: Entry[], failed: (what: string, e: unknown) => void) {
  let w;
  try {
    w = await walkFolder(dir);
  } catch (e) {
    return failed(dir, e);
  }
  for (const f of w.files.values()) out.push({ file: path.join(dir, ...f.rel.split('/')), name: `${name}/${f.rel}`, size: f.size, noFollow: true });
  for (const s of w.skipped) {
    // a link or folder is noted once (the walk holds it as a file and as a folder)
    if (s.path.endsWith('/') && w.skipped.some((t) => t.path === s.path.slice(0, -1))) continue;
    const where = path.join(dir, ...s.path.split('/').filter(Boolean));
    if (/^(a symbolic link|a mount point|not a regular file)/.test(s.reason)) console.error(`dsync push: skipped ${where}: ${s.reason}`);
    else failed(where, new Error(s.reason));
  }
}

/** The name of a file or directory given as `arg`: its path as typed when inside the current
 *  directory, else its path from its parent. */
export function nameOf(arg: string, cwd = process.cwd()): string {
  const rel = path.relative(cwd, path.resolve(cwd, arg));
  const inside = rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
  return (inside ? rel : path.basename(path.resolve(cwd, arg))).split(path.sep).join('/');
}

/** The server's latest version of `name`, as GET /api/versions lists it (null: none). */
async function latestOf(values: Values, name: string): Promise<LatestInfo | null> {
  const vs = await api<LatestInfo[]>(values, 'GET', `/api/versions?${new URLSearchParams({ name })}`).catch(() => []);
  return vs.length ? vs[vs.length - 1] : null;
}

/** "v3 from laptop" */
const serverVersion = (s: LatestInfo | null) => (s ? `v${s.version}${s.client ? ` from ${s.client}` : ''}` : 'a newer version');

/** What a guarded push did, in words, for a terminal; its report for --json. */
function outcomeLine(name: string, o: GuardedOutcome): string {
  if (o.kind === 'pushed') return syncSummary(o.report, 'push');
  if (o.kind === 'behind') return `${name}: server has a newer version (${serverVersion(o.server)}); nothing pushed (your copy is v${o.known}: pull to update it)`;
  return `${name}: conflict: server has ${serverVersion(o.server)}; your copy saved as ${o.report.name}\n  ${syncSummary(o.report, 'push')}`;
}

function outcomeJson(name: string, o: GuardedOutcome): Record<string, unknown> {
  const server = o.kind === 'pushed' ? undefined : o.server && { version: o.server.version, ...(o.server.client && { client: o.server.client }) };
  if (o.kind === 'pushed') return { ...o.report };
  if (o.kind === 'behind') return { name, pushed: false, behind: true, knownVersion: o.known, server };
  return { ...o.report, conflict: { name, savedAs: o.report.name, knownVersion: o.known, server } };
}

const reason = (e: unknown, values: Values) => ((e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : explain(e, values));

export const command: Command = {
  usage: 'push FILE|DIR... --server URL [--name NAME] [--basis-version V | --force] [--json]\n       push FILE|DIR... --vault ID --server URL [--name NAME] [--device LABEL] [--json]',
  about: `Pushes each FILE as a new version of the file of its name on the server: only the bytes
the server lacks go up. A FILE or DIR inside the current directory is named by its path as
typed (push proj/docs/a.txt stores proj/docs/a.txt; push photos stores photos/b.jpg); one
outside it by its path from its parent (push /tmp/x.txt stores x.txt). Several files share
one connection. Two files of one name are refused before anything is sent. A file that
cannot be read is reported and the rest still go. In a DIR, symbolic links (to files or
folders) and mount points are never followed: they are skipped with a note. The version last pushed or pulled of each
file is remembered (in $DSYNC_CACHE_DIR, else ~/.cache/dsync/known), so the next push of a
small change takes one round trip. Files of ${OFF_THREAD_MIN >> 20} MiB and more are hashed by worker threads
while they are chunked.

A push never puts an older copy over a newer version: each file goes against the version this
client last pushed or pulled of it (or, never seen, expects no file at its name). When another
device changed it since, a file unchanged here is not pushed ("server has a newer version
(v3); nothing pushed": pull it), and an edited one goes up beside it as
"name (conflict from HOST DATE).ext", the server's version keeping the name. --force pushes
as a new version whatever the server has (the versions before stay in the history); so does
--no-known, which remembers nothing to check against.

Prints one line per file: on a terminal "report.pdf → v3: 23 KB sent of 20 MB (99.8% saved)
in 0.15 s", with a progress bar for large files; otherwise, or with --json, its JSON report.
With --vault ID the files go to that vault (docs/vaults.md), named the same way, each as a
new version that uploads only the chunks the vault lacks; it prints "notes.txt v3: 20 MB, 2 of
2400 chunks new, 30 KB uploaded in 5 packs" (with --json, the vault's report). The passphrase:
--passphrase-file FILE or $DSYNC_VAULT_PASSPHRASE (or --recovery-key-file), as dsync vault takes
it; a wrong one fails before anything is read or sent. A vault keeps the versions before in its
history, so its push has no guard: --force and --basis-version are refused, as are --retries
and the chunking flags (a vault chunks with its own keys).

Exit status: 0 all pushed, 1 any file failed, 2 a wrong command line.`,
  options: {
    ...SERVER_OPTS,
    name: { type: 'string', arg: 'NAME', help: 'store the one FILE under this name' },
    'basis-version': { type: 'string', arg: 'V', help: 'refuse (StaleBasis) if the latest version is no longer V' },
    force: { type: 'boolean', help: 'push as a new version even if the server has a version this client has not seen' },
    retries: { type: 'string', arg: 'N', help: `reconnect this many times after a lost connection (default ${PUSH_RETRIES})` },
    ...SYNC_OPTS,
    ...VAULT_OPTS,
    ...DEVICE_OPT,
    json: JSON_OPT,
  },
  positionals: [1, Infinity],
  async run(values, args) {
    const vaultId = vaultOf(values, {
      'basis-version': 'a vault push always adds a version (those before stay in its history)',
      force: 'a vault push always adds a version (those before stay in its history)',
      retries: 'a vault push does not reconnect; run it again',
      ...Object.fromEntries(Object.keys(SYNC_OPTS).map((f) => [f, KEYED_CHUNKING])),
    });
    const url = vaultId === undefined ? syncUrl(values) : '';
    const params = chunkParams(values);
    const algo = algoOf(values);
    const retries = intFlag(values, 'retries', PUSH_RETRIES);
    const basisVersion = intFlag(values, 'basis-version', 0);
    if (basisVersion && values.force) throw new UsageError('--basis-version and --force contradict each other');
    const human = humanOutput(values);
    let failures = 0;
    let pushed = 0;
    const failed = (what: string, e: unknown) => {
      failures++;
      console.error(`dsync push: ${what}: ${reason(e, values)}`);
    };

    const entries: Entry[] = [];
    for (const arg of args) {
      try {
        const st = await fs.stat(arg);
        if (st.isDirectory()) await walk(arg, nameOf(arg), entries, failed);
        else entries.push({ file: arg, name: nameOf(arg), size: st.size });
      } catch (e) {
        failed(arg, e);
      }
    }
    const asName = str(values, 'name');
    if (asName !== undefined) {
      if (args.length !== 1 || entries.length !== 1 || entries[0].file !== args[0]) throw new UsageError('--name takes a single file');
      entries[0].name = asName;
    }
    // the server keeps names in NFC (shared/src/wire/names.ts): "café" typed two ways is one name
    const byName = new Map<string, string[]>();
    for (const e of entries) byName.set(e.name.normalize('NFC'), [...(byName.get(e.name.normalize('NFC')) ?? []), e.file]);
    const twice = [...byName].filter(([, files]) => files.length > 1);
    if (twice.length) throw new UsageError(`two files of one name, nothing sent:\n${twice.map(([n, files]) => `  ${n}: ${files.join(', ')}`).join('\n')}`);

    if (vaultId !== undefined) {
      // opened before a file is opened: a wrong passphrase reads and sends nothing
      const vault = await opened(values, vaultId);
      await pushFiles(vault, entries, (name, r, batch) => {
        if ('error' in r) return failed(name, r.error);
        pushed++;
        if (human) console.log(pushLine(r.ok, batch));
        else printJson(r.ok);
      });
      if (failures && human) console.error(`dsync push: ${pushed} pushed, ${failures} failed`);
      return failures ? EXIT_FAILED : EXIT_OK;
    }

    // One connection for all the files (two when some compress and some do not, as each kind
    // runs on its own endpoint): each push is a session on it (docs/protocol.md §3); a push
    // whose connection was lost retries on a new one, and the next file opens another.
    const WebSocket = webSocket(values);
    const connections = new ConnectionPool(WebSocket);
    // hash workers for large files, started before the first push so they are up when it hashes
    const pool = entries.some((e) => e.size >= OFF_THREAD_MIN) ? nodeHashPool() : null;
    const known = knownOf(values);
    try {
      for (const { file, name, noFollow } of entries) {
        let fh;
        try {
          fh = await (noFollow ? openNoFollow(file) : fs.open(file, 'r'));
        } catch (e) {
          failed(file, e);
          continue;
        }
        const { size, mtimeMs } = await fh.stat();
        const bar = progressBar(name, size, values);
        try {
          const source = fileSource(fh, size, pool);
          const opts = {
            url,
            name,
            WebSocket,
            connection: connections,
            params,
            algo,
            retries,
            known,
            // kept with the version, and set on the file where it is pulled (rsync -a's times)
            modified: mtimeMs,
            onProgress: (phase: string, done?: number) => {
              if (phase === 'chunking' && done !== undefined) bar.update(done);
              if (phase === 'busy') console.error(`dsync push: ${name}: the server is busy; trying again in ${done} s`);
            },
          };
          // an explicit basis, --force or nothing remembered: the push as asked; else guarded
          const outcome: GuardedOutcome =
            basisVersion || values.force || !known
              ? { kind: 'pushed', report: await push(source, { ...opts, ...(basisVersion && { expect: { version: basisVersion } }) }) }
              : await guardedPush(source, { ...opts, device: hostname(), latestOf: (n) => latestOf(values, n) });
          bar.stop();
          pushed++;
          const report: SyncReport | null = outcome.kind === 'behind' ? null : outcome.report;
          if (human) console.log(outcomeLine(name, outcome));
          else printJson({ ...outcomeJson(name, outcome), ...(report && { hashWorkers: size >= OFF_THREAD_MIN ? (pool?.size ?? 0) : 0 }) });
        } catch (e) {
          bar.stop();
          failed(name, e);
        } finally {
          await fh.close();
        }
      }
    } finally {
      connections.close();
      pool?.close();
    }
    if (failures && human) console.error(`dsync push: ${pushed} pushed, ${failures} failed`);
    return failures ? EXIT_FAILED : EXIT_OK;
  },
};
