/**
 * One first sync of a tree, two devices through a server (bench/peers' step 1 without the other
 * tools): a fresh `dsync serve --store DIR` on loopback, device A's `dsync sync A -s URL --remote
 * tree` over a copy of the tree, then device B's over an empty folder; B's folder is then checked
 * to hold the same bytes. Prints one JSON line: the CPU (user + sys), wall and peak RSS of each
 * client, the server's CPU (from /proc before it is stopped), and appends it to --out.
 *
 *   node --import tsx bench/first-sync.ts --tree DIR [--root CHECKOUT] [--prof DIR] [--out FILE]
 *
 * --root: the checkout whose bin/dsync.mjs runs (default this one: a second checkout measures an
 * older build with the same script). --prof: `node --cpu-prof` of the server and each client,
 * written to DIR/server, DIR/A and DIR/B. --keep: the work folder (under the system's temporary
 * folder, `dsync-first-*`) is left for the caller to remove: removing 2 × 5 000 files and a
 * store can take longer than the sync on a busy disk, and would be timed with it. Build the
 * tree with bench/peers/data.ts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { bannerOf } from '../harness/child.ts';
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { tree: { type: 'string' }, root: { type: 'string' }, prof: { type: 'string' }, out: { type: 'string' }, keep: { type: 'boolean' } },
});
if (!values.tree) throw new Error('--tree DIR is needed');
const root = path.resolve(values.root ?? new URL('..', import.meta.url).pathname);
const dsync = path.join(root, 'bin/dsync.mjs');
const prof = (who: string) => (values.prof ? ['--cpu-prof', `--cpu-prof-dir=${path.join(path.resolve(values.prof), who)}`] : []);
const TICK = 100; // USER_HZ: /proc/PID/stat counts CPU in 1/100 s

const work = mkdtempSync(path.join(tmpdir(), 'dsync-first-'));
const a = path.join(work, 'A');
const b = path.join(work, 'B');
cpSync(values.tree, a, { recursive: true, preserveTimestamps: true });
mkdirSync(b);

const server = spawn(process.execPath, [...prof('server'), dsync, 'serve', '--port', '0', '--host', '127.0.0.1', '--store', path.join(work, 'store'), '--max-load', '0', '--log-format', 'json'], {
  stdio: ['ignore', 'pipe', 'inherit'],
});
const [, url] = await bannerOf(server);
server.stdout!.resume();

function client(dev: 'A' | 'B', dir: string) {
  const stats = path.join(work, `time-${dev}`);
  const t0 = performance.now();
  const r = spawnSync('/usr/bin/time', ['-o', stats, '-f', '%U %S %M', process.execPath, ...prof(dev), dsync, 'sync', dir, '-s', url, '--remote', 'tree', '--device', dev, '--json'], {
    env: { ...process.env, DSYNC_CACHE_DIR: path.join(work, `cache-${dev}`) },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  const wall = (performance.now() - t0) / 1000;
  if (r.status !== 0) throw new Error(`sync ${dev} exited with ${r.status}: ${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`);
  const [user, sys, rssKb] = readFileSync(stats, 'utf8').trim().split('\n').pop()!.split(' ').map(Number);
  return { cpu: +(user + sys).toFixed(2), user, sys, wall: +wall.toFixed(2), rssMb: Math.round(rssKb / 1024) };
}

const A = client('A', a);
const B = client('B', b);
const stat = readFileSync(`/proc/${server.pid}/stat`, 'utf8');
const st = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
const serverCpu = +((Number(st[11]) + Number(st[12])) / TICK).toFixed(2);
const serverRssMb = Math.round(Number(/^VmHWM:\s+(\d+)/m.exec(readFileSync(`/proc/${server.pid}/status`, 'utf8'))![1]) / 1024);
const stopped = new Promise((r) => server.once('exit', r));
server.kill('SIGTERM');
await stopped;
const diff = spawnSync('diff', ['-rq', '--exclude=.dsync*', a, b], { encoding: 'utf8' });
const same = diff.status === 0;
if (!values.keep) rmSync(work, { recursive: true, force: true });
const line = JSON.stringify({ root, A, B, server: { cpu: serverCpu, rssMb: serverRssMb }, cpu: +(A.cpu + B.cpu + serverCpu).toFixed(2), wall: +(A.wall + B.wall).toFixed(2), same, load: readFileSync('/proc/loadavg', 'utf8').split(' ')[0] });
console.log(line);
if (values.out) appendFileSync(values.out, line + '\n');
if (!same) {
  console.error(diff.stdout.slice(0, 4000));
  process.exit(1);
}
