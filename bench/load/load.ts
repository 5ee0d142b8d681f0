/**
 * Multi-client load harness (the paper's Fig. 16 setup): N clients, each re-syncing an edited
 * file every `interval` seconds, against one server process; reports the server's CPU
 * utilisation and memory (from /proc/<pid>/stat and /status), sync latency p50/p95/p99 and
 * errors. `--find-max` searches the largest N the server sustains with CPU ≤ --cpu-limit,
 * p99 ≤ --p99-bound and no session refused.
 *
 * Past capacity the server refuses sessions as busy (`--max-sessions`, its default unless given
 * here): a refused client waits the seconds the refusal names (and up to half as much again,
 * as the client library does) and tries the same sync again; one whose wait ends after the run
 * syncs no more in it. A trial
 * reports the refusals apart from errors, and latency over the admitted syncs only (a refused
 * attempt's wait is not a sync's time): run fixed-N trials at 2× and 5× the --find-max result
 * to see the server hold its p99 and memory past capacity.
 *
 *   npm run load -- --clients N --interval 10 --duration 60 --approach dsync|dsync-paper|webr2sync+|dedup|full
 *                   [--find-max] [--p99-bound 1000] [--cpu-limit 80] [--edit 2048] [--size 10485760] [--shaping none|100m]
 *                   [--workers N] [--store local|minio] [--max-sessions N] [--set SETTING=VALUE …] [--out DIR]
 *
 * `--set max-load=0.8` gives the server a setting (its DSYNC_ variable; repeat for more);
 * `--out DIR` writes the result file and DIR/summary.md there instead of bench/results/load.
 *   npm run load -- --summary [DIR]   (rewrites DIR/summary.md from the result files there)
 *
 * So that clients do not steal the server's CPU unnoticed on a 2-core machine: the server is
 * pinned to core 0 and this client process to core 1 (taskset), all client-side work (edited
 * files, chunk indexes, block hashes, file hashes) is computed before the timed run, and the
 * client process' own CPU use is measured and reported (a run whose client core is saturated
 * is flagged: its numbers then bound the server from below only).
 *
 * Scale-out (bench/load/scaleout.sh runs the three side by side): `--workers N` runs
 * `dsync serve --workers N` pinned to cores 0..N-1; its CPU is the sum over the worker processes
 * and the limit is --cpu-limit per worker. With N = 2 on a 2-core machine the second worker
 * shares core 1 with the clients: the clients' CPU is reported, and the sum of both is what the
 * machine gives. `--store minio` serves from a MinIO bucket (a fresh MinIO per trial, pinned to
 * core 0 with the server, its CPU reported apart as the store's).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { EDIT_KINDS, Rng, applyEdits } from '../../harness/testdata.ts';
import { buildDatasets } from '../datasets/build.ts';
import type { Prepared } from '../approaches/approach.ts';
import { forgetKnown } from '../approaches/dsync.ts';
import { APPROACHES, approachOf, isDsync } from '../approaches/index.ts';
import { prepare, syncPrepared } from '../eval/clients.ts';
import { linePanels } from '../eval/svg.ts';
import { ROOT, type ServerProc, type Shaping, Toxiproxy, cpuSeconds, describeShaping, log, serverCpuSeconds, serverRssBytes, startBaselines, startDsync } from '../eval/procs.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { setHeapGrowth } from '../../shared/src/base/node-gc.ts';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode, busyRetryS } from '../../shared/src/wire/protocol.ts';
import { DEFAULTS } from '../../server/src/config.ts';

setHeapGrowth(); // the clients of every approach run in this process, as the CLI runs

const argv = process.argv.slice(2);
const opt = (n: string, d: string) => (argv.includes(n) ? argv[argv.indexOf(n) + 1] : d);
const O = {
  clients: Number(opt('--clients', '10')),
  interval: Number(opt('--interval', '10')),
  duration: Number(opt('--duration', '60')),
  approach: opt('--approach', 'dsync') as string,
  findMax: argv.includes('--find-max'),
  p99Bound: Number(opt('--p99-bound', '1000')),
  cpuLimit: Number(opt('--cpu-limit', '80')),
  edit: Number(opt('--edit', '2048')),
  size: Number(opt('--size', String(10 << 20))),
  variants: 4,
  shaping: opt('--shaping', 'none'),
  maxClients: Number(opt('--max-clients', '2000')),
  workers: Number(opt('--workers', '1')),
  store: opt('--store', 'local'),
  /** the server's --max-sessions; '' its default */
  maxSessions: opt('--max-sessions', ''),
  /** server settings, `--set name=value` (repeatable) */
  settings: argv.flatMap((a, i) => (a === '--set' ? [argv[i + 1] ?? ''] : [])),
  out: opt('--out', 'bench/results/load'),
};
for (const s of O.settings) if (!/^[a-z][a-z0-9-]*=./.test(s)) throw new Error(`--set takes SETTING=VALUE (a server flag without its dashes), got "${s}"`);
if (!Number.isSafeInteger(O.workers) || O.workers < 1) throw new Error('--workers must be 1 or more');
if (O.store !== 'local' && O.store !== 'minio') throw new Error('--store local|minio');
if ((O.workers > 1 || O.store !== 'local') && !isDsync(O.approach)) throw new Error('--workers and --store are dsync settings');
/** The server's setup in words, and in the result file's name. */
const SERVER = `${O.workers === 1 ? '1 process' : `${O.workers} workers`}, ${O.store === 'local' ? 'local store' : 'MinIO store'}`;
const SERVER_TAG = `${O.workers > 1 ? `-w${O.workers}` : ''}${O.store === 'minio' ? '-minio' : ''}`;
if (!APPROACHES.includes(O.approach)) throw new Error(`--approach must be one of ${APPROACHES.join(', ')}`);
const SHAPING: Shaping | null = O.shaping === '100m' ? { mbps: 100, rttMs: 30 } : O.shaping === 'none' ? null : (() => { throw new Error('--shaping none|100m'); })();
const OUT = resolve(ROOT, O.out);
const WORK = join(ROOT, 'bench/tmp/load');
const command = `npm run load -- ${argv.join(' ')}`;

const pct = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Edited versions of the file and their client-side work, computed once before any run. */
async function precompute(): Promise<Prepared[]> {
  const ds = await buildDatasets({ large: false });
  const base = new Uint8Array(readFileSync(ds.mixed)).subarray(0, O.size);
  const files: Uint8Array[] = [base];
  // version k+1 is the paper's edit (cut / insert / inverse in turn) of the base with seed k
  for (let k = 0; k < O.variants; k++) files.push(applyEdits(base, new Rng(7000 + k), { kind: EDIT_KINDS[k % 3], total: O.edit }));
  return Promise.all(files.map((f) => prepare(O.approach, bufferSource(f), { hashes: true })));
}

async function startServer(data: string, minio: S3Server | null): Promise<ServerProc> {
  // The session limits per user (default 64) and per address (32) would refuse the clients,
  // all on 127.0.0.1, of the single-user server.
  const env = { DSYNC_MAX_SESSIONS_PER_USER: '1000000', DSYNC_MAX_SESSIONS_PER_ADDRESS: '1000000', DSYNC_MAX_CONNECTIONS: '1000000', ...(O.maxSessions && { DSYNC_MAX_SESSIONS: O.maxSessions }), ...settingsEnv(), ...minio?.env };
  if (!isDsync(O.approach)) return startBaselines({ data, cpu: '0' });
  return startDsync({
    data,
    paperExact: approachOf(O.approach).server === 'dsync-paper',
    cpu: O.workers > 1 ? `0-${O.workers - 1}` : '0',
    env,
    workers: O.workers,
    store: minio ? { url: 's3://load', endpoint: minio.endpoint } : undefined,
  });
}

/** `--set` as the server's DSYNC_ environment variables. */
function settingsEnv(): Record<string, string> {
  return Object.fromEntries(O.settings.map((s) => ['DSYNC_' + s.slice(0, s.indexOf('=')).replace(/-/g, '_').toUpperCase(), s.slice(s.indexOf('=') + 1)]));
}

/** A fresh MinIO for one trial, pinned to the server's core 0. */
async function startStore(): Promise<S3Server | null> {
  if (O.store !== 'minio') return null;
  const m = await startMinio();
  execFileSync('taskset', ['-a', '-p', '-c', '0', String(m.process.pid)], { stdio: 'ignore' });
  return m;
}

/** Runs `fn` again while the server refuses it as busy, after the seconds each refusal names. */
async function whenAdmitted<T>(fn: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof RemoteError && e.code === ErrorCode.Busy)) throw e;
      await sleep(busyRetryS(e.message) * 1000 * (1 + Math.random() / 2));
    }
  }
}

export interface Trial {
  approach: string;
  clients: number;
  intervalS: number;
  durationS: number;
  syncs: number;
  errors: number;
  errorSample?: string;
  /** attempts the server refused as busy (each tried again after the seconds it named) */
  refused?: number;
  late: number;
  latencyMs: { p50: number; p95: number; p99: number; max: number };
  /** each second of the run: syncs that ended in it, their p50 / p99 / max ms, and refusals */
  perSecond?: { s: number; syncs: number; p50: number; p99: number; max: number; refused: number }[];
  serverCpuPct: { mean: number; max5s: number };
  serverRssMiB: { max: number; end: number };
  /** MinIO's CPU over the run (--store minio) */
  storeCpuPct?: number;
  clientCpuPct: number;
  clientBound: boolean;
  pass: boolean;
}

async function trial(n: number, preps: Prepared[], tp: Toxiproxy | null): Promise<Trial> {
  const data = join(WORK, `data-${O.approach}`);
  rmSync(data, { recursive: true, force: true });
  const minio = await startStore();
  const srv = await startServer(data, minio);
  forgetKnown();
  try {
    const url = tp && SHAPING ? `ws://127.0.0.1:${await tp.proxy('load', srv.port, SHAPING)}` : srv.url;
    // Seed every client's basis (unshaped, untimed), four uploads at a time.
    log(`N=${n}: seeding ${n} files of ${O.size} B`);
    for (let i = 0; i < n; i += 4) await Promise.all(Array.from({ length: Math.min(4, n - i) }, (_, k) => whenAdmitted(() => syncPrepared(preps[0], srv.url, `c${i + k}`, false))));
    await sleep(500);
    log(`N=${n}: ${O.duration} s of syncs every ${O.interval} s per client`);
    const lat: number[] = [];
    const bySecond: { lat: number[]; refused: number }[] = [];
    const second = () => (bySecond[Math.floor((performance.now() - t0) / 1000)] ??= { lat: [], refused: 0 });
    let errors = 0;
    let refused = 0;
    let late = 0;
    let errorSample: string | undefined;
    const t0 = performance.now();
    const end = t0 + O.duration * 1000;
    const cpu0 = serverCpuSeconds(srv.pid);
    const store0 = minio ? cpuSeconds(minio.process.pid!) : 0;
    const me0 = process.cpuUsage();
    const windows: number[] = [];
    let rssMax = 0;
    let wc = cpu0;
    let wt = t0;
    const sampler = setInterval(() => {
      try {
        rssMax = Math.max(rssMax, serverRssBytes(srv.pid));
        const c = serverCpuSeconds(srv.pid);
        const t = performance.now();
        if (t - wt >= 5000) {
          windows.push((100 * (c - wc) * 1000) / (t - wt));
          wc = c;
          wt = t;
        }
      } catch {
        /* the server is gone: its clients will report errors */
      }
    }, 250);
    const client = async (i: number) => {
      // Clients start spread over the first interval, then each syncs every interval.
      let next = t0 + (i / n) * O.interval * 1000;
      for (let k = 0; ; k++) {
        const wait = next - performance.now();
        if (next >= end) return;
        if (wait > 0) await sleep(wait);
        else if (k > 0) late++;
        for (;;) {
          try {
            const r = await syncPrepared(preps[1 + (k % O.variants)], url, `c${i}`, false);
            lat.push(r.timeMs.total);
            second().lat.push(r.timeMs.total);
          } catch (e) {
            if (e instanceof RemoteError && e.code === ErrorCode.Busy) {
              refused++;
              second().refused++;
              const wait = busyRetryS(e.message) * 1000 * (1 + Math.random() / 2);
              if (performance.now() + wait < end) {
                await sleep(wait);
                continue;
              }
              return; // still waiting at the end, as a real client would be
            } else {
              errors++;
              errorSample ??= (e as Error).message;
            }
          }
          break;
        }
        next += O.interval * 1000;
      }
    };
    await Promise.all(Array.from({ length: n }, (_, i) => client(i)));
    clearInterval(sampler);
    const elapsed = (performance.now() - t0) / 1000;
    const serverCpu = (100 * (serverCpuSeconds(srv.pid) - cpu0)) / elapsed;
    const storeCpu = minio ? (100 * (cpuSeconds(minio.process.pid!) - store0)) / elapsed : undefined;
    const me = process.cpuUsage(me0);
    const clientCpu = (100 * (me.user + me.system)) / 1e6 / elapsed;
    const latencyMs = { p50: pct(lat, 50), p95: pct(lat, 95), p99: pct(lat, 99), max: pct(lat, 100) };
    for (const k of Object.keys(latencyMs) as (keyof typeof latencyMs)[]) latencyMs[k] = Math.round(latencyMs[k] * 10) / 10;
    const t: Trial = {
      approach: O.approach,
      clients: n,
      intervalS: O.interval,
      durationS: Math.round(elapsed * 10) / 10,
      syncs: lat.length,
      errors,
      errorSample,
      refused,
      late,
      latencyMs,
      perSecond: Array.from(bySecond, (b, s) => ({ s, syncs: b?.lat.length ?? 0, p50: Math.round(pct(b?.lat ?? [], 50)), p99: Math.round(pct(b?.lat ?? [], 99)), max: Math.round(pct(b?.lat ?? [], 100)), refused: b?.refused ?? 0 })),
      serverCpuPct: { mean: Math.round(serverCpu * 10) / 10, max5s: Math.round(Math.max(0, ...windows) * 10) / 10 },
      serverRssMiB: { max: Math.round(rssMax / 2 ** 20), end: Math.round(serverRssBytes(srv.pid) / 2 ** 20) },
      storeCpuPct: storeCpu === undefined ? undefined : Math.round(storeCpu * 10) / 10,
      clientCpuPct: Math.round(clientCpu * 10) / 10,
      clientBound: clientCpu > 85,
      pass: false,
    };
    t.pass = errors === 0 && refused === 0 && serverCpu <= O.cpuLimit * O.workers && latencyMs.p99 <= O.p99Bound;
    log(`N=${n}: ${t.syncs} syncs, ${errors} errors, ${refused} refused as busy, p50/p95/p99 ${latencyMs.p50}/${latencyMs.p95}/${latencyMs.p99} ms, server CPU ${t.serverCpuPct.mean}% (max 5 s ${t.serverCpuPct.max5s}%)${minio ? `, MinIO CPU ${t.storeCpuPct}%` : ''}, RSS ≤ ${t.serverRssMiB.max} MiB, client CPU ${t.clientCpuPct}%${t.clientBound ? ' (client-bound!)' : ''} → ${t.pass ? 'pass' : 'fail'}`);
    return t;
  } finally {
    await srv.stop();
    await minio?.stop();
    rmSync(data, { recursive: true, force: true });
  }
}

async function main() {
  const started = new Date().toISOString();
  mkdirSync(WORK, { recursive: true });
  log(`precomputing ${O.variants + 1} versions of a ${O.size} B file and their ${O.approach} client work`);
  const preps = await precompute();
  const tp = SHAPING ? await Toxiproxy.start('1') : null;
  const trials: Trial[] = [];
  let maxOk: number | null = null;
  try {
    if (!O.findMax) trials.push(await trial(O.clients, preps, tp));
    else {
      // Double until a trial fails, then bisect to within 10%.
      let lo = 0;
      let hi = 0;
      // (the last step is --max-clients itself)
      for (let n = O.clients; ; n = Math.min(2 * n, O.maxClients)) {
        const t = await trial(n, preps, tp);
        trials.push(t);
        if (!t.pass) {
          hi = n;
          break;
        }
        lo = n;
        if (n >= O.maxClients) break;
      }
      if (!hi) hi = lo;
      while (hi - lo > Math.max(2, lo * 0.1)) {
        const mid = Math.round((lo + hi) / 2);
        const t = await trial(mid, preps, tp);
        trials.push(t);
        if (t.pass) lo = mid;
        else hi = mid;
      }
      maxOk = lo;
      log(`${O.approach}: largest N with server CPU ≤ ${O.cpuLimit}%, p99 ≤ ${O.p99Bound} ms and no errors: ${lo}`);
    }
  } finally {
    await tp?.stop();
  }
  const doc = {
    command,
    date: started,
    machine: { cpu: cpus()[0]?.model, cores: cpus().length, memGiB: Math.round(totalmem() / 2 ** 30), node: process.version, loadavgAtStart: loadavg().map((x) => Math.round(x * 100) / 100) },
    setup: {
      approach: O.approach,
      server: SERVER,
      file: `the ${O.size} B prefix of the 10 MB mixed benchmark file; each client syncs, in turn, ${O.variants} edited versions of it (paper generator: ${O.edit} B cut / insert / inverse)`,
      shaping: describeShaping(SHAPING) + (SHAPING ? ' per client connection (toxiproxy pinned to core 1)' : ''),
      transport: 'ws, permessage-deflate on',
      pinning:
        O.workers > 1
          ? `server workers on cores 0-${O.workers - 1}, all clients in one Node process on core 1 (taskset): the clients share core 1 with a worker`
          : `server process on core 0${O.store === 'minio' ? ' with MinIO' : ''}, all clients in one Node process on core 1 (taskset)`,
      precomputed: 'edited files, chunk indexes (dsync: with the chunks\' strong hashes, so its client neither chunks nor hashes during the timed run; dsync-known: and each version\'s finer cut, which its client keeps after a push) / block hashes / file hashes computed before the timed run; latency = the session\'s wall time (connect to Result)',
      maxSessions: O.maxSessions || `the default (${DEFAULTS.maxSessions})`,
      ...(O.settings.length && { settings: O.settings.join(' ') }),
      pass: `no errors, no session refused, server CPU ≤ ${O.cpuLimit}% of ${O.workers > 1 ? `each of its ${O.workers} cores` : 'its core'} (mean over the run), p99 latency ≤ ${O.p99Bound} ms`,
    },
    maxClients: maxOk,
    trials,
  };
  mkdirSync(OUT, { recursive: true });
  const file = `${O.approach}${SERVER_TAG}${O.findMax ? '-find-max' : `-${O.clients}`}${O.interval === 10 ? '' : `-every${O.interval}s`}`;
  writeFileSync(join(OUT, `${file}.json`), JSON.stringify(doc, null, 1) + '\n');
  writeSummary();
  log(`wrote ${O.out}/${file}.json and summary.md`);
}

/** bench/results/load/summary.md from every result file there. */
function writeSummary(OUT = resolve(ROOT, O.out)) {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const docs = readdirSync(OUT).filter((f) => f.endsWith('.json')).sort().map((f) => ({ f, d: JSON.parse(readFileSync(join(OUT, f), 'utf8')) as any }));
  const md = ['# Load: clients one server holds (paper Fig. 16)', ''];
  md.push('Each row is one trial: N clients against one server process for the duration, each syncing every interval. Server CPU is the server process\' user + system time over the run (100% = its one core), from /proc/<pid>/stat; RSS from /proc/<pid>/status.', '');
  const fm = docs.filter((x) => x.d.maxClients !== null && x.d.maxClients !== undefined);
  if (fm.length) {
    md.push('## --find-max', '', '| approach | largest N | limited by | pass condition | command | date |', '|---|---:|---|---|---|---|');
    for (const { d } of fm) {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      // what stopped the search: the failed trial just above the largest N that passed
      const next = d.trials.filter((t: any) => !t.pass && t.clients > d.maxClients).sort((a: any, b: any) => a.clients - b.clients)[0];
      const by = !next ? 'nothing: no trial failed up to where the search stopped (`--max-clients`)' : next.clientBound ? 'the clients\' core (client-bound: a lower bound for the server)' : 'the server';
      md.push(`| ${d.setup.approach}${d.setup.server ? ` (${d.setup.server})` : ''} | **${next ? '' : '≥ '}${d.maxClients}** | ${by} | ${d.setup.pass} | \`${d.command}\` | ${d.date} |`);
    }
    md.push('');
  }
  const maxOf = (a: string) => fm.find(({ d }) => d.setup.approach === a && !d.setup.server?.match(/workers|MinIO/))?.d.maxClients as number | undefined;
  const [ds, w, dd] = [maxOf('dsync'), maxOf('webr2sync+'), maxOf('dedup')];
  if (ds && w && dd) {
    md.push('## Targets', '');
    md.push(`- dsync ≥ 2× the clients of webr2sync+: **${ds >= 2 * w ? 'met' : 'not met'}** (${ds} vs ${w}: ${(ds / w).toFixed(2)}×).`);
    md.push(`- dsync ≥ 1.5× the clients of dedup: **${ds >= 1.5 * dd ? 'met' : 'not met'}** (${ds} vs ${dd}: ${(ds / dd).toFixed(2)}×).`, '');
    md.push('Where the server time goes: [bench/results/eval/profile.md](../eval/profile.md).', '');
  }
  // Fig. 16 analogue: server CPU vs clients, per approach (find-max trials).
  if (fm.length) {
    const ns = [...new Set(fm.flatMap(({ d }) => d.trials.map((t: Trial) => t.clients)))].sort((a, b) => a - b);
    const at = (d: { trials: Trial[] }, n: number) => d.trials.find((t) => t.clients === n)?.serverCpuPct.mean ?? null;
    const d0 = fm[0].d;
    writeFileSync(
      join(OUT, 'fig16-clients.svg'),
      linePanels({
        title: 'Fig. 16 analogue: server CPU vs concurrent clients (each syncs every 10 s)',
        xLabels: ns.map(String),
        xTitle: 'clients',
        yTitle: 'server CPU (% of its core)',
        yMax: 100,
        panels: [{ title: 'server process CPU, mean over the run', series: fm.map(({ d }) => ({ name: d.setup.approach, values: ns.map((n) => at(d, n)) })) }],
        footer: [`machine: ${d0.machine.cpu}, ${d0.machine.cores} cores, Node ${d0.machine.node}; ${d0.setup.pinning}; ${d0.setup.precomputed}`, `shaping: ${d0.setup.shaping}; ${d0.setup.transport}`, `file: ${d0.setup.file}`, ...fm.map(({ d }) => `command: ${d.command}`)],
      }),
    );
    md.push('![Fig. 16](fig16-clients.svg)', '');
  }
  // MinIO against the local store, from one fixed-N trial of each (bench/load/scaleout.sh).
  const fixed = (tag: string) => docs.find(({ f }) => new RegExp(`^dsync${tag}-\\d+\\.json$`).test(f))?.d.trials[0] as Trial | undefined;
  const [onLocal, onMinio] = [fixed(''), fixed('-minio')];
  if (onLocal && onMinio && onLocal.clients === onMinio.clients) {
    const perSync = (t: Trial) => (t.serverCpuPct.mean * t.durationS * 10) / t.syncs;
    md.push('## MinIO against the local store', '', `${onLocal.clients} clients on each, one trial on each right after the other (bench/load/scaleout.sh runs both):`, '');
    md.push(`- server CPU per sync: ${perSync(onMinio).toFixed(1)} ms on MinIO vs ${perSync(onLocal).toFixed(1)} ms local: **${(perSync(onMinio) / perSync(onLocal)).toFixed(2)}×** (MinIO's own CPU: ${onMinio.storeCpuPct}% over the run);`);
    md.push(`- sync time p50 / p99: ${onMinio.latencyMs.p50} / ${onMinio.latencyMs.p99} ms on MinIO vs ${onLocal.latencyMs.p50} / ${onLocal.latencyMs.p99} ms local: **${(onMinio.latencyMs.p50 / onLocal.latencyMs.p50).toFixed(2)}×** at p50.`, '');
  }
  md.push('## Trials', '', 'Server CPU per sync = server CPU time over the run / syncs completed: the measure least disturbed by other jobs on the machine (p99 latency is the most).', '');
  md.push('| file | approach | N | syncs | errors | refused (busy) | p50 / p95 / p99 ms | server CPU % (max 5 s) | server CPU ms per sync | server RSS MiB | MinIO CPU % | client CPU % | pass |', '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const { f, d } of docs)
    for (const t of d.trials as Trial[])
      md.push(`| ${f} | ${t.approach}${d.setup.server ? ` (${d.setup.server})` : ''} | ${t.clients} | ${t.syncs} | ${t.errors} | ${t.refused ?? ''} | ${t.latencyMs.p50} / ${t.latencyMs.p95} / ${t.latencyMs.p99} | ${t.serverCpuPct.mean} (${t.serverCpuPct.max5s}) | ${((t.serverCpuPct.mean * t.durationS * 10) / t.syncs).toFixed(1)} | ${t.serverRssMiB.max} | ${t.storeCpuPct ?? ''} | ${t.clientCpuPct}${t.clientBound ? ' (client-bound)' : ''} | ${t.pass ? 'yes' : 'no'} |`);
  md.push('', '## Setup of each file', '');
  for (const { f, d } of docs) {
    md.push(`- **${f}**: \`${d.command}\` (${d.date}); machine ${d.machine.cpu}, ${d.machine.cores} cores, Node ${d.machine.node}, load average at start ${d.machine.loadavgAtStart.join(' / ')}; ${Object.entries(d.setup).map(([k, v]) => `${k}: ${v}`).join('; ')}.`);
  }
  writeFileSync(join(OUT, 'summary.md'), md.join('\n') + '\n');
}

// --summary [DIR]: rewrite DIR/summary.md (default bench/results/load) from its result files
if (argv.includes('--summary')) writeSummary(argv[argv.indexOf('--summary') + 1] ? join(ROOT, argv[argv.indexOf('--summary') + 1]) : undefined);
else await main();
