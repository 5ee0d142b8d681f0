/**
 * `dsync push FILE|DIR...`: each file goes up as a new version, over one connection. A
 * directory goes up whole, each file named by its path from the directory's parent (`push
 * photos` stores `photos/a.jpg`), as the page's folder upload names them. Two files of one name
 * are refused before anything is sent; a file that cannot be read is reported and the rest
 * still go, and the exit status is 1.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import '../../shared/src/wasm.ts';
import { Connection, push } from '../../shared/src/sync-client.ts';
import { fileSource } from '../../shared/src/file-source.ts';
import { OFF_THREAD_MIN } from '../../shared/src/hash-pool.ts';
import { nodeHashPool } from '../../shared/src/hash-workers-node.ts';
import { type Command, EXIT_FAILED, EXIT_OK, UsageError, type Values, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, progressBar, syncSummary } from '../output.ts';
import { SERVER_OPTS, explain, syncUrl, webSocket } from '../remote.ts';
import { SYNC_OPTS, algoOf, chunkParams, knownOf } from '../sync-options.ts';

interface Entry {
  file: string;
  name: string;
  size: number;
}

/** The files under `dir` (symbolic links to directories are not followed). */
async function walk(dir: string, base: string, out: Entry[], failed: (what: string, e: unknown) => void) {
  let entries;
  try {
    entries = await fs.readdir(dir, { withFileTypes: true });
  } catch (e) {
    return failed(dir, e);
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const d of entries) {
    const file = path.join(dir, d.name);
    if (d.isDirectory()) await walk(file, base, out, failed);
    else if (d.isFile() || d.isSymbolicLink()) {
      try {
        const st = await fs.stat(file);
        if (st.isFile()) out.push({ file, name: path.relative(base, file).split(path.sep).join('/'), size: st.size });
      } catch (e) {
        failed(file, e);
      }
    }
  }
}

const reason = (e: unknown, values: Values) => ((e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : explain(e, values));

export const command: Command = {
  usage: 'push FILE|DIR... --server URL [--name NAME] [--basis-version V] [--json]',
  about: `Pushes each FILE as a new version of the file of its name on the server: only the bytes
the server lacks go up. A DIR goes up whole, each file named by its path from DIR's parent
(push photos stores photos/a.jpg). Several files share one connection. Two files of one name
are refused before anything is sent. A file that cannot be read is reported and the rest
still go. The version last pushed or pulled of each file is remembered (in $DSYNC_CACHE_DIR,
else ~/.cache/dsync/known), so the next push of a small change takes one round trip.
Files of 64 MiB and more are hashed by worker threads while they are chunked.

Prints one line per file: on a terminal "report.pdf → v3: 23 KB sent of 20 MB (99.8% saved)
in 0.15 s", with a progress bar for large files; otherwise, or with --json, its JSON report.
Exit status: 0 all pushed, 1 any file failed, 2 a wrong command line.`,
  options: {
    ...SERVER_OPTS,
    name: { type: 'string', arg: 'NAME', help: 'store the one FILE under this name' },
    'basis-version': { type: 'string', arg: 'V', help: 'refuse (StaleBasis) if the latest version is no longer V' },
    ...SYNC_OPTS,
    json: JSON_OPT,
  },
  positionals: [1, Infinity],
  async run(values, args) {
    const url = syncUrl(values);
    const params = chunkParams(values);
    const algo = algoOf(values);
    const retries = intFlag(values, 'retries', 3);
    const basisVersion = intFlag(values, 'basis-version', 0);
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
        if (st.isDirectory()) await walk(arg, path.dirname(path.resolve(arg)), entries, failed);
        else entries.push({ file: arg, name: path.basename(arg), size: st.size });
      } catch (e) {
        failed(arg, e);
      }
    }
    const asName = str(values, 'name');
    if (asName !== undefined) {
      if (args.length !== 1 || entries.length !== 1 || entries[0].file !== args[0]) throw new UsageError('--name takes a single file');
      entries[0].name = asName;
    }
    // the server keeps names in NFC (server/src/names.ts): "café" typed two ways is one name
    const byName = new Map<string, string[]>();
    for (const e of entries) byName.set(e.name.normalize('NFC'), [...(byName.get(e.name.normalize('NFC')) ?? []), e.file]);
    const twice = [...byName].filter(([, files]) => files.length > 1);
    if (twice.length) throw new UsageError(`two files of one name, nothing sent:\n${twice.map(([n, files]) => `  ${n}: ${files.join(', ')}`).join('\n')}`);

    // One connection for all the files (two when some compress and some do not, as each kind
    // runs on its own endpoint): each push is a session on it (docs/protocol.md §3); a push
    // whose connection was lost retries on a new one, and the next file opens another.
    const WebSocket = webSocket(values);
    const connections = new Map<string, Connection>();
    const connectionTo = async (u: string) => {
      const c = connections.get(u);
      if (c?.usable) return c;
      const opened = await Connection.open(u, WebSocket);
      connections.set(u, opened);
      return opened;
    };
    // hash workers for large files, started before the first push so they are up when it hashes
    const pool = entries.some((e) => e.size >= OFF_THREAD_MIN) ? nodeHashPool() : null;
    const known = knownOf(values);
    try {
      for (const { file, name } of entries) {
        let fh;
        try {
          fh = await fs.open(file, 'r');
        } catch (e) {
          failed(file, e);
          continue;
        }
        const { size } = await fh.stat();
        const bar = progressBar(name, size, values);
        try {
          const report = await push(fileSource(fh, size, pool), {
            url,
            name,
            WebSocket,
            connection: connectionTo,
            params,
            algo,
            basisVersion,
            retries,
            known,
            onProgress: (phase, done) => {
              if (phase === 'chunking' && done !== undefined) bar.update(done);
            },
          });
          bar.stop();
          pushed++;
          if (human) console.log(syncSummary(report, 'push'));
          else printJson({ ...report, hashWorkers: size >= OFF_THREAD_MIN ? (pool?.size ?? 0) : 0 });
        } catch (e) {
          bar.stop();
          failed(name, e);
        } finally {
          await fh.close();
        }
      }
    } finally {
      for (const c of connections.values()) c.close();
      pool?.close();
    }
    if (failures && human) console.error(`dsync push: ${pushed} pushed, ${failures} failed`);
    return failures ? EXIT_FAILED : EXIT_OK;
  },
};
