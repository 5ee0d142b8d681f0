/**
 * `dsync pull NAME --out FILE`: fetches a version; with `--basis OLDFILE` only the chunks the
 * old copy lacks come down. The file is written beside FILE and renamed over it once it
 * verified; an existing FILE is replaced only with --force.
 */
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import '../../shared/src/wasm.ts';
import { pull } from '../../shared/src/sync-client.ts';
import { fileSource } from '../../shared/src/file-source.ts';
import { OFF_THREAD_MIN } from '../../shared/src/hash-pool.ts';
import { nodeHashPool } from '../../shared/src/hash-workers-node.ts';
import { type Command, EXIT_FAILED, UsageError, type Values, intFlag, str } from '../command.ts';
import { JSON_OPT, humanOutput, printJson, progressBar, stdoutFile, syncSummary } from '../output.ts';
import { SERVER_OPTS, api, syncUrl, webSocket } from '../remote.ts';
import { SYNC_OPTS, algoOf, chunkParams, knownOf } from '../sync-options.ts';

/** The size of the version to come, for the progress bar (0 when the server does not say). */
async function sizeOf(values: Values, name: string, version: number): Promise<number> {
  try {
    const versions = await api<{ version: number; size: number }[]>(values, 'GET', `/api/versions?name=${encodeURIComponent(name)}`);
    const v = version ? versions.find((x) => x.version === version) : versions.reduce((a, b) => (b.version > a.version ? b : a));
    return v?.size ?? 0;
  } catch {
    return 0;
  }
}

export const command: Command = {
  usage: 'pull NAME --server URL --out FILE [--version V] [--basis OLDFILE] [--force] [--json]',
  about: `Fetches NAME (its latest version, or V) into FILE. With --basis, an older copy of the file,
only the chunks it lacks come down. The file is verified before it replaces FILE; an existing
FILE is replaced only with --force; FILE's folder must exist. --out - writes the file to
stdout as it arrives (the report goes to stderr; if it fails verification the status is 1).
Prints on a terminal "report.pdf ← v3: 23 KB received of 20 MB (99.8% saved) in 0.15 s",
with a progress bar for large files; otherwise, or with --json, its JSON report.
Exit status: 0 pulled, 1 failed (or FILE exists), 2 a wrong command line.`,
  options: {
    ...SERVER_OPTS,
    out: { type: 'string', short: 'o', arg: 'FILE', help: 'where the file goes (required; - for stdout)' },
    version: { type: 'string', arg: 'V', help: 'the version to fetch (default: the latest)' },
    basis: { type: 'string', arg: 'OLDFILE', help: 'a local older copy: only the chunks it lacks come down' },
    force: { type: 'boolean', short: 'f', help: 'replace FILE if it exists' },
    ...SYNC_OPTS,
    json: JSON_OPT,
  },
  positionals: [1, 1],
  async run(values, [name]) {
    const outFile = str(values, 'out');
    if (!outFile) throw new UsageError('--out FILE is required');
    const url = syncUrl(values);
    const version = intFlag(values, 'version', 0);
    const params = chunkParams(values);
    const algo = algoOf(values);
    const toStdout = outFile === '-';
    if (!toStdout && existsSync(outFile) && !values.force) {
      console.error(`dsync pull: ${outFile} exists; --force replaces it`);
      return EXIT_FAILED;
    }
    if (!toStdout && !existsSync(path.dirname(path.resolve(outFile)))) {
      console.error(`dsync pull: the folder ${path.dirname(outFile)} does not exist; create it first (mkdir -p ${path.dirname(outFile)})`);
      return EXIT_FAILED;
    }
    const human = humanOutput(values);
    const basisPath = str(values, 'basis');
    const basisFh = basisPath ? await fs.open(basisPath, 'r') : null;
    const basisSize = basisFh ? (await basisFh.stat()).size : 0;
    const pool = basisSize >= OFF_THREAD_MIN ? nodeHashPool() : null;
    const bar = progressBar(name, human && process.stderr.isTTY ? await sizeOf(values, name, version) : 0, values);
    let written = 0;
    const tmp = `${outFile}.dsync-${process.pid}.tmp`;
    const out = toStdout ? stdoutFile() : await fs.open(tmp, 'w');
    let closed = toStdout;
    try {
      const report = await pull({
        url,
        name,
        WebSocket: webSocket(values),
        params,
        algo,
        version,
        known: knownOf(values),
        basis: basisFh ? fileSource(basisFh, basisSize, pool) : null,
        sink: {
          write: async (b) => {
            await out.write(b);
            bar.update((written += b.length));
          },
          commit: async () => {
            if (toStdout) return 0;
            await out.sync();
            await out.close();
            closed = true;
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
      // with --out - the file is stdout: the report goes to stderr
      if (human || toStdout) (toStdout ? console.error : console.log)(human ? syncSummary(report, 'pull') : JSON.stringify(report));
      else printJson(report);
    } finally {
      bar.stop();
      if (!closed) {
        await out.close().catch(() => {});
        await fs.rm(tmp, { force: true });
      }
      await basisFh?.close();
      pool?.close();
    }
  },
};
