/**
 * What an open live-updates stream costs a server while nothing changes (issue 45, `--watch`):
 * a namespace of --folders folders (one small file each, synced once by `dsync sync`), one
 * `GET /api/events` stream open, the server's CPU over --seconds seconds (/proc). Each checkout
 * of --roots in turn, --rounds times (A B A B), so builds compare in one run.
 *
 *   node --import tsx bench/events-idle.ts [--folders 2000] [--seconds 20] [--rounds 2]
 *     [--roots CHECKOUT,CHECKOUT (default: this one)] [--out events-idle]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { bannerOf } from '../harness/child.ts';
import { ROOT, arg, log, machine, table, writeResults } from './lib/common.ts';
import { processCpuMs } from './peers/measure.ts';

const folders = Number(arg('--folders', '2000'));
const seconds = Number(arg('--seconds', '20'));
const rounds = Number(arg('--rounds', '2'));
const roots = arg('--roots', ROOT).split(',').map((r) => path.resolve(r));
const out = arg('--out', 'events-idle');
if (!(folders >= 1 && seconds > 0 && rounds >= 1)) throw new Error('--folders ≥ 1, --seconds > 0, --rounds ≥ 1');

const work = mkdtempSync(path.join(tmpdir(), 'dsync-events-idle-'));
const rows: { root: string; round: number; cpuMs: number; perSecondMs: number; load: string }[] = [];
try {
  const tree = path.join(work, 'tree');
  for (let k = 0; k < folders; k++) {
    const dir = path.join(tree, `d${k >> 5}`, `e${k}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'f.txt'), `file ${k}\n`);
  }
  for (let round = 1; round <= rounds; round++) {
    for (const root of roots) {
      const run = mkdtempSync(path.join(work, 'run-'));
      const dsync = path.join(root, 'bin/dsync.mjs');
      const server = spawn(process.execPath, [dsync, 'serve', '--port', '0', '--host', '127.0.0.1', '--store', path.join(run, 'store'), '--max-load', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        const [, url] = await bannerOf(server);
        server.stdout!.resume();
        const synced = spawnSync(process.execPath, [dsync, 'sync', tree, '-s', url, '--remote', 'tree', '--device', 'A'], { env: { ...process.env, DSYNC_CACHE_DIR: path.join(run, 'cache') }, encoding: 'utf8' });
        if (synced.status !== 0) throw new Error(`dsync sync failed: ${synced.stderr.slice(-2000)}`);
        const stream = new AbortController();
        const res = await fetch(`${url}/api/events`, { signal: stream.signal });
        void res.body!.pipeTo(new WritableStream()).catch(() => {});
        await new Promise((r) => setTimeout(r, 2000)); // the stream's first poll
        const c0 = processCpuMs(server.pid!);
        await new Promise((r) => setTimeout(r, seconds * 1000));
        const used = Math.round(processCpuMs(server.pid!) - c0);
        stream.abort();
        const row = { root, round, cpuMs: used, perSecondMs: +(used / seconds).toFixed(1), load: loadavg()[0].toFixed(1) };
        log(JSON.stringify(row));
        rows.push(row);
      } finally {
        server.kill('SIGTERM');
        await new Promise((r) => server.once('exit', r));
      }
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

const md = `${folders} folders of one small file each, one \`GET /api/events\` stream open, nothing changing: the
server's CPU over ${seconds} s (after 2 s for the stream's first poll), each checkout in turn.

${table(['checkout', 'round', 'server CPU (ms)', 'per second (ms)', 'load'], rows.map((r) => [r.root, String(r.round), String(r.cpuMs), String(r.perSecondMs), r.load]))}
`;
console.log(md);
writeResults(out, 'An open live-updates stream while nothing changes: the server\'s CPU (bench/events-idle.ts)', machine(), md, { folders, seconds, rows });
