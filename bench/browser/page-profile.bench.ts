// Where a large push's CPU goes, per thread: the page (every process of its Chromium) and the CLI,
// each against its own server process, for a first upload and a 30% edit of the same file.
// CPU seconds (user + system) from /proc, grouped by process and thread name; prints a table.
//   npm run bench:page-profile    (GIB=0.5 by default; PROFILE=/assets/worker adds the sync
//   worker's V8 CPU profile, the functions with the most self time; RANDOM_EDIT=0.1 makes the
//   edit random edits of 10% of the file, `randomEdits` in e2e/data.ts, instead of 30% of every MiB;
//   RANDOM_EDIT=0.01,0.1,0.3 one after another; SEQUENCE=1 after the 30% rewrite, with the seeds
//   of bench:page-vs-cli, as it pushes them)
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { randomEdits, rewriteEveryMiB, writePseudoRandomFile } from '../../e2e/data.ts';
import { openPage, result, root, test, watchEnd } from '../../e2e/fixtures.ts';
import { WorkerTarget } from '../../e2e/metrics.ts';
import { TestServer } from '../../e2e/server.ts';


const MiB = 2 ** 20;
const SIZE = Math.round(Number(process.env.GIB ?? 0.5) * 1024) * MiB;
const RANDOM_EDITS = (process.env.RANDOM_EDIT ?? '').split(',').filter(Boolean).map(Number);

type Cpu = Map<string, number>;

/** CPU seconds per "process/thread name" of the processes whose command line matches `match`. */
function cpuOf(match: (cmd: string, pid: number) => string | null): Cpu {
  const out: Cpu = new Map();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    let label: string | null;
    try {
      label = match(readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' '), Number(p));
    } catch {
      continue;
    }
    if (!label) continue;
    let tids: string[] = [];
    try {
      tids = readdirSync(`/proc/${p}/task`);
    } catch {}
    for (const t of tids) {
      try {
        const st = readFileSync(`/proc/${p}/task/${t}/stat`, 'utf8');
        const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
        const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
        // threads of one name told apart where it matters (the workers)
        const key = /^(DedicatedWorker|node)/.test(name) ? `${label}/${name} ${t}` : `${label}/${name.replace(/\d+$/, '#')}`;
        out.set(key, (out.get(key) ?? 0) + (Number(f[11]) + Number(f[12])) / 100);
      } catch {}
    }
  }
  return out;
}

function chromiumLabel(cmd: string): string | null {
  if (!/chrom/i.test(cmd.split(' ')[0])) return null;
  const t = /--type=(\S+)/.exec(cmd)?.[1];
  if (!t) return 'browser';
  if (t === 'utility') return /NetworkService/i.test(cmd) ? 'network' : 'utility';
  return t;
}

const diff = (a: Cpu, b: Cpu): Cpu => new Map([...b].map(([k, v]) => [k, v - (a.get(k) ?? 0)]).filter(([, v]) => (v as number) >= 0.05) as [string, number][]);

function print(title: string, ms: number, c: Cpu) {
  const total = [...c.values()].reduce((s, v) => s + v, 0);
  console.log(`\n${title}: ${(ms / 1000).toFixed(1)} s wall, ${total.toFixed(1)} s CPU`);
  for (const [k, v] of [...c].sort((x, y) => y[1] - x[1])) console.log(`  ${v.toFixed(2).padStart(6)}  ${k}`);
}

/** Self time per function of a V8 CPU profile, the top `n`. */
function topFunctions(profile: { nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[]; samples: number[]; timeDeltas: number[] }, n = 25) {
  const byId = new Map(profile.nodes.map((x) => [x.id, x]));
  const self = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id)!.callFrame;
    const key = `${f.functionName || '(anon)'} ${f.url.split('/').pop()}:${f.lineNumber}`;
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1e6);
  });
  for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log(`  ${v.toFixed(3).padStart(7)} s  ${k}`);
}

test('page and CLI, per-thread CPU of a first upload and a 30% edit', async ({ page, browser, server, dir }) => {
  const cliServer = await new TestServer().start();
  const cache = path.join(dir, 'cli-cache');
  mkdirSync(cache);
  const pageServer = (cmd: string) => (cmd.includes(server.data) ? 'server' : null);
  let cliPid = -1;
  const cliSide = (cmd: string, pid: number) => (cmd.includes(cliServer.data) ? 'server' : pid === cliPid ? 'cli' : null);
  // this browser's processes only (other Chromiums may run on the machine)
  const cdp = await browser.newBrowserCDPSession();
  const ours = async () => new Set((await cdp.send('SystemInfo.getProcessInfo')).processInfo.map((p) => p.id));
  let pids = await ours();
  const pageSide = (cmd: string, pid: number) => (pids.has(pid) ? chromiumLabel(cmd) : null) ?? pageServer(cmd);
  try {
    await openPage(page, server.url);
    const file = path.join(dir, 'big.img');
    await writePseudoRandomFile(file, SIZE, 0x9e3779b9);
    // (the random edits in turn, with bench:page-vs-cli's seeds; after the 30% rewrite too with SEQUENCE=1)
    const edits: [string, () => Promise<unknown>][] = [['first upload', async () => {}]];
    if (!RANDOM_EDITS.length || process.env.SEQUENCE) edits.push(['30% edit', () => rewriteEveryMiB(file, SIZE, 0x2545f491)]);
    RANDOM_EDITS.forEach((f, i) => edits.push([`random edits of ${f * 100}%`, () => randomEdits(file, f, 0x6a09e667 + (process.env.SEQUENCE ? i : 0))]));
    for (const [step, edit] of edits) {
      await edit();
      pids = await ours();
      let a = cpuOf(pageSide);
      const worker = process.env.PROFILE ? await WorkerTarget.attach(await browser.newBrowserCDPSession(), process.env.PROFILE) : null;
      if (worker) {
        await worker.call('Profiler.enable');
        await worker.call('Profiler.setSamplingInterval', { interval: 200 });
        await worker.call('Profiler.start');
      }
      const ended = await watchEnd(page, 'big.img');
      let t0 = Date.now();
      await page.getByTestId('file-input').setInputFiles(file);
      await result(page, 'big.img', { timeout: 900_000 });
      const ms = (await ended()) - t0;
      pids = new Set([...pids, ...(await ours())]);
      print(`page ${step}`, ms, diff(a, cpuOf(pageSide)));
      if (worker) topFunctions((await worker.call('Profiler.stop')).profile as never);
      a = cpuOf(cliSide);
      t0 = Date.now();
      const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', file, '--server', cliServer.url, '--name', 'big.img', '--json'], {
        env: { ...process.env, DSYNC_CACHE_DIR: cache },
        stdio: 'ignore',
      });
      cliPid = child.pid!;
      // the CLI's threads are read while it runs (they are gone once it exits)
      let last: Cpu = new Map();
      const poll = setInterval(() => (last = cpuOf(cliSide)), 50);
      await new Promise((r) => child.on('exit', r));
      clearInterval(poll);
      const b = cpuOf(cliSide);
      for (const [k, v] of last) if (k.startsWith('cli/')) b.set(k, v);
      print(`CLI ${step}`, Date.now() - t0, diff(a, b));
    }
  } finally {
    await cliServer.stop();
  }
});
