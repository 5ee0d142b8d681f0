// `dsync push` timed from start to exit, for the benchmarks that set the page beside the CLI.
import { spawn } from 'node:child_process';
import path from 'node:path';
import type { TestServer } from '../../e2e/server.ts';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');

/** `dsync push` of `file` as `name`: wall time from start to exit, and its JSON report. */
export function cliPush(server: TestServer, file: string, name: string, cache: string): Promise<{ ms: number; report: any }> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', file, '--server', server.url, '--name', name, '--json'], {
    env: { ...process.env, DSYNC_CACHE_DIR: cache },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  return new Promise((resolve, reject) =>
    child.on('exit', (code) => (code === 0 ? resolve({ ms: Date.now() - t0, report: JSON.parse(out.trim().split('\n').pop()!) }) : reject(new Error(`dsync push exited ${code}: ${out}`)))),
  );
}
