/**
 * Dsync side by side with rsync, Unison, rclone bisync and Syncthing (issue 45, "Measure"): the
 * same seeded tree (bench/peers/data.ts) and the same five steps for every tool, one tool after
 * another in one run, two devices each (A and B; through a server except for Syncthing, which
 * syncs device to device):
 *   1. first sync of the tree   2. 2 KB changed in place in the middle of the 200 MB file
 *   3. 1 % of the small files edited   4. nothing changed   5. a folder of 1 000 files renamed
 * Per tool and step: wall time of A's and B's sync together, CPU of all its processes (clients
 * through /usr/bin/time, daemons as the delta of /proc/PID/stat), bytes on the wire (a counting
 * TCP proxy in front of every server; Syncthing's own connection totals), max RSS of client and
 * server, and whether B equals A (`diff -r`) with A's mtimes. Then, for Dsync, a `--watch` save
 * on A seen on B (bench/lib/watch-latency.ts). Tools missing here are installed from Debian
 * (`apt-get install -y`) first; a tool that fails to install or run is reported as such.
 *
 * Usage (from the repository root):
 *   node --import tsx bench/peers/run.ts [--scale 1] [--seed 45] [--saves 20]
 *     [--tools dsync,rsync,unison,rclone,syncthing] [--out peers] [--prof DIR]
 *
 * --prof DIR (with --tools dsync): every Dsync process under `node --cpu-prof` (profiles in DIR,
 * bench/peers/tools/dsync.ts), and DIR/steps.json: each step's window on the monotonic clock,
 * for `bench/profile-steps.ts server DIR/server --windows DIR/steps.json`. The profiler slows
 * what it watches: such a run shows where the time goes; its table is printed, not written to
 * bench/results.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { arg, log, machine, table, writeResults } from '../lib/common.ts';
import { proxyRoundTrip } from '../lib/proxy.ts';
import type { WatchLatency } from '../lib/watch-latency.ts';
import { EDIT_BYTES, RENAMED_FROM, RENAMED_TO, type Tree, buildTree, copyTree, editBinary, editSmall, renameFolder } from './data.ts';
import { type Check, compare, killRunning } from './measure.ts';
import { Dsync } from './tools/dsync.ts';
import { Rclone } from './tools/rclone.ts';
import { Rsync } from './tools/rsync.ts';
import { Syncthing } from './tools/syncthing.ts';
import type { Tool } from './tools/tool.ts';
import { Unison } from './tools/unison.ts';

const scale = Number(arg('--scale', '1'));
const seed = Number(arg('--seed', '45'));
const saves = Number(arg('--saves', '20'));
const out = arg('--out', 'peers');
const only = arg('--tools', 'dsync,rsync,unison,rclone,syncthing').split(',');
const profArg = arg('--prof', '');
const prof = profArg ? path.resolve(profArg) : undefined;
if (prof !== undefined && only.join() !== 'dsync') throw new Error('--prof profiles Dsync alone: give --tools dsync');
if (!(scale > 0 && scale <= 10) || !Number.isInteger(seed) || !(saves >= 1)) throw new Error('--scale must be in (0, 10], --seed an integer, --saves ≥ 1');

const ALL: Record<string, () => Tool> = {
  dsync: () => new Dsync(prof),
  rsync: () => new Rsync(),
  unison: () => new Unison(),
  rclone: () => new Rclone(),
  syncthing: () => new Syncthing(),
};
for (const t of only) if (!ALL[t]) throw new Error(`unknown tool ${t}; known: ${Object.keys(ALL).join(', ')}`);
const tools = only.map((t) => ALL[t]());

interface Step {
  n: number;
  title: string;
  /** the change on device A before the sync; returns a note */
  change(dir: string, tree: Tree): string;
}
const renamed = (tree: Tree) => tree.small.filter((p) => p.startsWith(`${RENAMED_FROM}/`)).length;
const STEPS: Step[] = [
  { n: 1, title: 'first sync of the tree', change: (_d, t) => `${t.small.length} small files + ${t.binaries.length} binaries, ${(t.bytes / 1e6).toFixed(0)} MB` },
  { n: 2, title: `${EDIT_BYTES / 1024} KB changed in the largest file`, change: (d, t) => `${EDIT_BYTES} bytes in place in the middle of ${editBinary(d, t, seed)}, ${(statSync(path.join(d, t.binaries.at(-1)!)).size / 1e6).toFixed(0)} MB` },
  { n: 3, title: '1 % of the small files edited', change: (d, t) => `${editSmall(d, t, seed)} files` },
  { n: 4, title: 'nothing changed', change: () => '' },
  { n: 5, title: 'a folder renamed', change: (d, t) => (renameFolder(d), `${RENAMED_FROM} → ${RENAMED_TO}, ${renamed(t)} files`) },
];

interface Result {
  tool: string;
  step: number;
  ok: boolean;
  error?: string;
  wallMs?: number;
  cpuMs?: number;
  wire?: number;
  clientRss?: number;
  serverRss?: number;
  check?: Check;
}

/** Installs what is missing from Debian; returns an error text when it cannot. */
function install(tool: Tool): string | null {
  if (spawnSync('sh', ['-c', `command -v ${tool.binary}`]).status === 0) return null;
  log(`apt-get install -y ${tool.packages.join(' ')}`);
  const r = spawnSync('apt-get', ['install', '-y', ...tool.packages], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0) return `apt-get install ${tool.packages.join(' ')} failed: ${(r.stderr || r.stdout || String(r.error)).trim().split('\n').slice(-3).join(' ')}`;
  return spawnSync('sh', ['-c', `command -v ${tool.binary}`]).status === 0 ? null : `${tool.binary} not found after apt-get install`;
}

const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-peers-'));
// Ctrl-C: stop the servers and daemons of the tool running and remove the scratch folder
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    log(`${sig}: stopping`);
    killRunning();
    void Promise.allSettled(tools.map((t) => t.stop())).then(() => {
      rmSync(work, { recursive: true, force: true });
      process.exit(130);
    });
  });
}
const results: Result[] = [];
/** each Dsync step's window (µs, monotonic clock), written to --prof DIR/steps.json */
const windows: { name: string; from: number; to: number }[] = [];
const now = () => Number(process.hrtime.bigint() / 1000n);
const versions: Record<string, string> = {};
let watch: WatchLatency | string | undefined;
const mach = machine();
const t0 = performance.now();
const hop = await proxyRoundTrip();
log(`a round trip over loopback: ${hop.directMs.toFixed(3)} ms direct, ${hop.proxiedMs.toFixed(3)} ms through the counting proxy`);
log(`building the tree (seed ${seed}, scale ${scale}) in ${work}`);
const seedDir = path.join(work, 'seed');
const tree = buildTree(seedDir, seed, scale);
log(`${tree.small.length} small files + ${tree.binaries.length} binaries, ${(tree.bytes / 1e6).toFixed(1)} MB`);
const files = tree.small.length + tree.binaries.length;
const notes: Record<number, string> = {};

const ONE_RUN = [
  '- note: 2 cores shared with other work running concurrently on this machine (see loadavg);',
  '  one run: every figure is one measurement, every tool measured one after another.',
].join('\n');

const fmt = {
  s: (ms?: number) => (ms === undefined ? '–' : ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${(ms / 1000).toFixed(2)} s`),
  mb: (b?: number) => (b === undefined ? '–' : b >= 10e6 ? `${(b / 1e6).toFixed(0)} MB` : b >= 1e5 ? `${(b / 1e6).toFixed(2)} MB` : `${(b / 1e3).toFixed(1)} KB`),
  ratio: (x?: number, d?: number) => (x === undefined || !d ? '' : ` (${(x / d).toFixed(x / d < 0.1 ? 3 : 2)}×)`),
};

try {
  for (const tool of tools) {
    const err = install(tool);
    if (err) {
      log(`${tool.name}: ${err}`);
      for (const s of STEPS) results.push({ tool: tool.name, step: s.n, ok: false, error: err });
      continue;
    }
    try {
      versions[tool.name] = tool.version();
    } catch (e) {
      versions[tool.name] = `unknown (${(e as Error).message.split('\n')[0]})`;
    }
    const tw = path.join(work, tool.name.replace(/\W+/g, '-'));
    const dirs = { work: tw, a: path.join(tw, 'A'), b: path.join(tw, 'B') };
    copyTree(seedDir, dirs.a);
    mkdirSync(dirs.b, { recursive: true });
    let failed: string | undefined;
    try {
      await tool.start(dirs);
    } catch (e) {
      failed = `did not start: ${(e as Error).message.slice(0, 500)}`;
    }
    for (const step of STEPS) {
      if (failed) {
        results.push({ tool: tool.name, step: step.n, ok: false, error: failed });
        continue;
      }
      const note = step.change(dirs.a, tree);
      notes[step.n] ??= note;
      try {
        const ds = tool.daemons();
        const cpu0 = ds.map((x) => x.d.cpuMs());
        const wire0 = await tool.wire();
        const s0 = performance.now();
        const from = now();
        const runs = await tool.sync(step.n, files);
        const wallMs = performance.now() - s0;
        windows.push({ name: `${step.n}. ${step.title}`, from, to: now() });
        await tool.settle?.();
        for (const x of ds) x.d.sample();
        const wire = (await tool.wire()) - wire0;
        const cpuMs = runs.reduce((s, r) => s + r.cpuMs, 0) + ds.reduce((s, x, i) => s + x.d.cpuMs() - cpu0[i], 0);
        const peak = (role: string) => Math.max(0, ...ds.filter((x) => x.role === role).map((x) => x.d.peak));
        const clientRss = Math.max(peak('client'), ...runs.map((r) => r.maxRss));
        const check = compare(dirs.a, dirs.b, tool.exclude);
        const r: Result = { tool: tool.name, step: step.n, ok: check.same, wallMs, cpuMs, wire, clientRss, serverRss: peak('server') || undefined, check };
        if (!check.same) r.error = `A and B differ: ${check.diff}`;
        results.push(r);
        const dsRow = results.find((x) => x.tool === 'Dsync' && x.step === step.n);
        log(
          `${tool.name} step ${step.n} (${step.title}): ${fmt.s(wallMs)}${fmt.ratio(wallMs, dsRow?.wallMs)}, CPU ${fmt.s(cpuMs)}, wire ${fmt.mb(wire)}, RSS ${fmt.mb(clientRss)} / ${fmt.mb(r.serverRss)}, ` +
            `${check.same ? 'same' : 'DIFFERENT'}, mtimes ${check.mtimesKept}/${check.files}`,
        );
      } catch (e) {
        failed = `step ${step.n} failed: ${(e as Error).message.slice(0, 1000)}`;
        log(`${tool.name}: ${failed}`);
        results.push({ tool: tool.name, step: step.n, ok: false, error: failed });
      }
    }
    if (tool instanceof Dsync && !failed) {
      try {
        const from = now();
        watch = await tool.watch(saves);
        windows.push({ name: `--watch, ${saves} saves`, from, to: now() });
        log(`Dsync --watch: median ${watch.median.toFixed(0)} ms, p99 ${watch.p99.toFixed(0)} ms`);
      } catch (e) {
        watch = `failed: ${(e as Error).message.slice(0, 500)}`;
      }
    }
    await tool.stop().catch((e) => log(`${tool.name}: stop: ${(e as Error).message}`));
    rmSync(tw, { recursive: true, force: true });
  }
} finally {
  for (const t of tools) await t.stop().catch(() => {});
  rmSync(work, { recursive: true, force: true });
  if (prof) {
    mkdirSync(prof, { recursive: true });
    writeFileSync(path.join(prof, 'steps.json'), JSON.stringify(windows, null, 1));
  }
}

// ---------------------------------------------------------------------------------------------
// The results

const get = (tool: string, step: number) => results.find((r) => r.tool === tool && r.step === step);
const names = tools.map((t) => t.name);
const cell = (r: Result | undefined, d: Result | undefined, what: 'wall' | 'cpu' | 'wire' | 'rss') => {
  if (!r) return '–';
  if (r.wallMs === undefined) return `failed: ${(r.error ?? '').replace(/\|/g, '/').replace(/\s+/g, ' ').slice(0, 160)}`;
  const bad = r.ok ? '' : ' **B ≠ A**';
  if (what === 'wall') return `${fmt.s(r.wallMs)}${r.tool === 'Dsync' ? '' : fmt.ratio(r.wallMs, d?.wallMs)}${bad}`;
  if (what === 'cpu') return `${fmt.s(r.cpuMs)}${r.tool === 'Dsync' ? '' : fmt.ratio(r.cpuMs, d?.cpuMs)}`;
  if (what === 'wire') return `${fmt.mb(r.wire)}${r.tool === 'Dsync' ? '' : fmt.ratio(r.wire, d?.wire)}`;
  return `${fmt.mb(r.clientRss)} / ${fmt.mb(r.serverRss)}`;
};
const rowsFor = (what: 'wall' | 'cpu' | 'wire' | 'rss') => STEPS.map((s) => [`${s.n}. ${s.title}`, ...names.map((n) => cell(get(n, s.n), get('Dsync', s.n), what))]);
const mtimeRow = names.map((n) => {
  const rs = results.filter((r) => r.tool === n && r.check);
  if (!rs.length) return '–';
  const kept = rs.reduce((s, r) => s + r.check!.mtimesKept, 0);
  const all = rs.reduce((s, r) => s + r.check!.files, 0);
  return kept === all ? 'kept' : `**not kept** (${kept}/${all} within 1 s)`;
});
const sameRow = names.map((n) => {
  const rs = results.filter((r) => r.tool === n);
  const bad = rs.filter((r) => !r.ok);
  const empty = rs.filter((r) => r.check?.emptyFolders).map((r) => `step ${r.step}: ${r.check!.emptyFolders}`);
  return (bad.length ? `**${bad.length} of ${rs.length} steps not same**` : `same after every step`) + (empty.length ? ` (empty folders left on one side: ${empty.join(', ')})` : '');
});

// The issue's targets, as ratios in this run
const D = (s: number) => get('Dsync', s);
const R = (s: number) => get('rsync', s);
const U = (s: number) => get('Unison', s);
type Target = [string, number | undefined, number];
const q = (x?: number, y?: number) => (x === undefined || y === undefined || !y ? undefined : x / y);
const targets: Target[] = [
  ['first sync: wall ≤ 2× rsync', q(D(1)?.wallMs, R(1)?.wallMs), 2],
  ['first sync: CPU ≤ 3× rsync', q(D(1)?.cpuMs, R(1)?.cpuMs), 3],
  ['1 % edited: wall ≤ 1× Unison', q(D(3)?.wallMs, U(3)?.wallMs), 1],
  ['nothing changed: wall ≤ 1× Unison', q(D(4)?.wallMs, U(4)?.wallMs), 1],
  ['folder rename: wall ≤ 1× Unison', q(D(5)?.wallMs, U(5)?.wallMs), 1],
  ['2 KB edit of the large file: wall ≤ 1× rsync', q(D(2)?.wallMs, R(2)?.wallMs), 1],
  ['2 KB edit of the large file: wire ≤ 1× rsync', q(D(2)?.wire, R(2)?.wire), 1],
];
const w = typeof watch === 'object' ? watch : undefined;
const dsyncRssAt = results.filter((r) => r.tool === 'Dsync' && r.clientRss).sort((x, y) => y.clientRss! - x.clientRss!)[0];
const dsyncRss = dsyncRssAt?.clientRss ?? 0;
const targetRows: (string | number)[][] = [
  ...targets.map(([t, x, lim]) => [t, x === undefined ? 'not measured' : `${x.toFixed(2)}×`, x === undefined ? '–' : x <= lim ? 'met' : '**missed**']),
  ['--watch save on the other device: median ≤ 0.5 s', w ? `${(w.median / 1000).toFixed(2)} s` : String(watch ?? 'not measured'), w ? (w.median <= 500 ? 'met' : '**missed**') : '–'],
  ['--watch save on the other device: p99 ≤ 1 s', w ? `${(w.p99 / 1000).toFixed(2)} s` : String(watch ?? 'not measured'), w ? (w.p99 <= 1000 ? 'met' : '**missed**') : '–'],
  ['client RSS ≤ 150 MB for the tree (the largest of the steps)', dsyncRss ? `${fmt.mb(dsyncRss)} (step ${dsyncRssAt!.step})` : 'not measured', dsyncRss ? (dsyncRss <= 150e6 ? 'met' : '**missed**') : '–'],
];

const howRows = tools.map((t) => [t.name, versions[t.name] ?? 'not installed', t.how]);
const md = `
Issue 45's comparison: the same seeded tree and the same steps for every tool, one tool after
another in this one run, two devices (A and B) on this machine. Read the ratios, not the
seconds: the machine is shared (see loadavg). In brackets: the ratio to Dsync in the same step.

- data: seed ${seed}, scale ${scale}: ${tree.small.length} small files (source-like text, ${(tree.smallBytes / 1e6).toFixed(1)} MB) in nested folders and ${tree.binaries.length} binaries (${tree.binaries.join(', ')}), ${(tree.bytes / 1e6).toFixed(0)} MB in all
- steps: ${STEPS.map((s) => `${s.n}. ${s.title}${notes[s.n] ? ` (${notes[s.n]})` : ''}`).join('; ')}
- wall: A's sync then B's, both together (Syncthing: from the forced rescan of A, or from adding
  the folder in step 1, until A sees B at 100 %); CPU: user + sys of every process of the tool
  (clients through /usr/bin/time, daemons as their /proc/PID/stat delta); wire: bytes both ways
  through a counting TCP proxy in front of the server (Syncthing: its connection totals, TLS
  included); RSS: max of the client processes / of the server's process tree (Syncthing: A / B)
  so far in the run
- the counting proxy (Nagle off on both its sockets) costs every tool but Syncthing a hop per
  round trip: a 1-byte echo took ${hop.directMs.toFixed(3)} ms direct and ${hop.proxiedMs.toFixed(3)} ms through it (medians of 200,
  at the start of the run), so a protocol of many round trips pays more for it

### Wall time (A + B)

${table(['step', ...names], rowsFor('wall'))}

### CPU, all processes

${table(['step', ...names], rowsFor('cpu'))}

### Bytes on the wire

${table(['step', ...names], rowsFor('wire'))}

### Max RSS, client / server

${table(['step', ...names], rowsFor('rss'))}

### Correctness

${table(['', ...names], [['B = A (diff -r)', ...sameRow], ['mtimes', ...mtimeRow]])}

### Dsync: a \`--watch\` save on A seen on B

${w ? `${saves} saves of a 1 KB file on A (300 ms apart), both devices running \`dsync sync --watch\` over the synced tree (${files} files watched): median ${w.median.toFixed(0)} ms, p99 ${w.p99.toFixed(0)} ms, min ${w.min.toFixed(0)} ms, max ${w.max.toFixed(0)} ms.` : `not measured: ${watch ?? 'Dsync did not run'}`}

### The issue's targets, as ratios in this run

${table(['target', 'this run', ''], targetRows)}

### How each tool ran

${table(['tool', 'version', 'how'], howRows)}

Run time: ${((performance.now() - t0) / 60_000).toFixed(1)} min; load average at the end ${loadavg().map((x) => x.toFixed(2)).join(' ')}.
`;
console.log(md);
// a profiled run's figures are the profiler's: printed, not kept as a result
if (!prof) writeResults(out, 'Dsync side by side with rsync, Unison, rclone bisync and Syncthing (bench/peers)', mach, md, { scale, seed, saves, proxyRoundTrip: hop, tree: { small: tree.small.length, binaries: tree.binaries, bytes: tree.bytes }, versions, results, watch }, ONE_RUN);
