/**
 * The paper's evaluation (§V), reproduced: every approach over the same WebSocket transport
 * and the same toxiproxy-shaped link, on the same file pairs, in the same run; the real rsync
 * binary beside them. Writes bench/results/eval/results.json, then report.ts turns it into
 * the markdown summary and SVG figures.
 *
 *   npm run bench [-- --quick] [--reps N] [--warmup N] [--sections synthetic,real,large] [--no-rsync] [--large-deflate] [--approaches a,b] [--out DIR] [--cold]
 *
 * Each timed sync runs on a WebSocket opened just before it (untimed, its opening reported
 * apart), as a page holds its socket open: the paper's setting. `--cold` times the opening
 * (TCP + upgrade, 2 round trips, the same for every approach) as part of every sync.
 *
 * Servers run pinned to core 0 (taskset); this client process and toxiproxy are not pinned, so
 * the client may use a hash worker (hash-pool.ts) on the second core for files of 64 MiB and
 * more, as a page or the CLI on a machine with more than one core does. dsync and dedup chunk
 * large files through it; the webr2sync+ client hashes fixed blocks on its one thread (its
 * time is the server's rolling search). Every timed sync starts from the same basis: the
 * basis is uploaded over an unshaped port before the first repetition and synced back (also
 * unshaped, untimed) after each.
 *
 * Warm starts, the same for every approach. Each approach first runs `--warmup` untimed syncs
 * of the pair (default 1) through the shaped port: V8 runs a wasm function's first call in its
 * baseline tier to the end, and the baselines' rolling search is one call per sync, so an
 * unwarmed first sync of a large pair runs it several times slower. And before every sync the
 * target, the basis and the approach's server directory are read through (untimed), because
 * this VM drops cached file pages all the time and a cold read of a large file costs seconds
 * of CPU, which would fall on whichever approach read it first (bench/results/README.md). Dirty
 * pages are written out first (`sync`): the baselines' basis is put back by a file copy, whose
 * writeback would otherwise run during their next sync.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, copyFileSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type ChunkIndex, type Source, bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { matchRuns } from '../../shared/src/session/matcher.ts';
import { Algo, DEFAULT_PARAMS, hashLength } from '../../shared/src/wire/protocol.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { buildDatasets } from '../datasets/build.ts';
import { median } from '../lib/common.ts';
import type { Prepared } from '../approaches/approach.ts';
import { forgetKnown } from '../approaches/dsync.ts';
import { APPROACHES, approachOf, isDsync } from '../approaches/index.ts';
import { prepare, syncPrepared } from './clients.ts';
import { nodeHashPool } from '../../shared/src/chunking/hash-workers-node.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { ROOT, type ServerProc, type Shaping, Toxiproxy, describeShaping, log, startBaselines, startDsync, startRsyncd } from './procs.ts';
import { writeReport } from './report.ts';
import type { PairResult, RsyncRun } from './results.ts';
import { setHeapGrowth } from '../../shared/src/base/node-gc.ts';

setHeapGrowth(); // the clients of every approach run in this process, as the CLI runs

const argv = process.argv.slice(2);
const flag = (n: string) => argv.includes(n);
const opt = (n: string, d: string) => (argv.includes(n) ? argv[argv.indexOf(n) + 1] : d);
const QUICK = flag('--quick');
const REPS = Number(opt('--reps', QUICK ? '1' : '3'));
const WARMUP = Number(opt('--warmup', QUICK ? '0' : '1'));
const SECTIONS = opt('--sections', QUICK ? 'synthetic,real' : 'synthetic,real,large').split(',');
const RSYNC = !flag('--no-rsync');
const LARGE_DEFLATE = flag('--large-deflate');
const WARM = !flag('--cold');
const ONLY = opt('--approaches', APPROACHES.join(',')).split(',') as string[];
// a smoke run (--quick) does not overwrite the real results
const OUT = resolve(ROOT, opt('--out', QUICK ? 'bench/tmp/eval-quick' : 'bench/results/eval'));
const WORK = join(ROOT, 'bench/tmp/eval');

export const SHAPE_100M: Shaping = { mbps: 100, rttMs: 30 };
export const SHAPE_1G: Shaping = { mbps: 1000, rttMs: 30 };

/** Servers and shaped proxies of one shaping, every approach. */
class Rig {
  servers = new Map<string, ServerProc>();
  shaped = new Map<string, number>();
  constructor(
    private tp: Toxiproxy,
    private dataDir: string,
    readonly deflate = true,
  ) {}
  async start() {
    rmSync(this.dataDir, { recursive: true, force: true });
    const deflate = this.deflate;
    const ds = await startDsync({ data: join(this.dataDir, 'dsync'), paperExact: false, cpu: '0', deflate });
    const dp = await startDsync({ data: join(this.dataDir, 'dsync-paper'), paperExact: true, cpu: '0', deflate });
    const bl = await startBaselines({ data: join(this.dataDir, 'baselines'), cpu: '0', deflate });
    forgetKnown();
    const byKind = { dsync: ds, 'dsync-paper': dp, baselines: bl };
    for (const a of APPROACHES) this.servers.set(a, byKind[approachOf(a).server]);
  }
  /** Where the approach's server keeps its files. */
  dataOf(a: string): string {
    return join(this.dataDir, approachOf(a).server);
  }
  /** Puts the basis back as the server's copy of `name`, untimed: the baselines' server keeps
   *  nothing but the file, so a copy will do; Dsync's store gets it by a push (unshaped). */
  async restore(a: string, name: string, basisPath: string, basisPrep: Prepared) {
    if (isDsync(a)) await syncPrepared(basisPrep, this.servers.get(a)!.url, name);
    else copyFileSync(basisPath, join(this.dataOf(a), encodeURIComponent(name)));
  }
  async port(a: string, upstream: number, s: Shaping) {
    const key = `${a}-${s.mbps}-${s.rttMs}`;
    if (!this.shaped.has(key)) this.shaped.set(key, await this.tp.proxy(key.replace('+', 'p'), upstream, s));
    return this.shaped.get(key)!;
  }
  async stop() {
    await Promise.all([...new Set(this.servers.values())].map((s) => s.stop()));
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Before a timed sync: writes every dirty page out (`sync`), so that no writeback of an
 *  earlier step (a restored basis copy, say) runs during it, then reads the files involved. */
function settle(paths: string[]) {
  execFileSync('sync');
  warmPageCache(paths);
}

/** Reads files (directories: every file under them) through, so that their pages are cached. */
function warmPageCache(paths: string[]) {
  const buf = Buffer.allocUnsafe(8 << 20);
  for (const p of paths) {
    if (statSync(p, { throwIfNoEntry: false })?.isDirectory()) {
      warmPageCache(readdirSync(p).map((f) => join(p, f)));
      continue;
    }
    let fd: number;
    try {
      fd = openSync(p, 'r');
    } catch {
      continue; // gone in between (a server's temporary file)
    }
    try {
      while (readSync(fd, buf, 0, buf.length, null) > 0);
    } finally {
      closeSync(fd);
    }
  }
}

/** Hash workers for the client's large files (dsync and dedup chunk them with `chunkParts`),
 *  started once: as many as the client's cores allow beyond its own thread (one here). */
const hashPool = nodeHashPool();

async function sourceOf(path: string): Promise<{ source: Source; close(): Promise<void> }> {
  const size = statSync(path).size;
  if (size <= 256 << 20) return { source: bufferSource(new Uint8Array(readFileSync(path))), close: async () => {} };
  const fh = await open(path, 'r');
  return { source: fileSource(fh, size, hashPool), close: () => fh.close() };
}

/** rsync the target onto a fresh copy of the basis, through `port` (`-z`: compressed). */
function rsyncOnce(rsyncd: { module: string }, port: number, basis: string, target: string, compress = false): RsyncRun {
  const dest = join(rsyncd.module, 'f');
  copyFileSync(basis, dest);
  utimesSync(dest, new Date(0), new Date(0));
  settle([dest, target]);
  const t0 = performance.now();
  // -I: never skip by size and mtime; --no-whole-file: the delta algorithm even locally
  const out = execFileSync('rsync', ['-I', '--no-whole-file', '--stats', ...(compress ? ['-z'] : []), target, `rsync://127.0.0.1:${port}/m/f`], { encoding: 'utf8' });
  const timeMs = performance.now() - t0;
  const num = (re: RegExp) => Number((out.match(re)?.[1] ?? '0').replace(/,/g, ''));
  if (statSync(dest).size !== statSync(target).size) throw new Error('rsync left a file of the wrong size');
  return { timeMs: Math.round(timeMs * 10) / 10, sent: num(/Total bytes sent: ([\d,]+)/), received: num(/Total bytes received: ([\d,]+)/), literal: num(/Literal data: ([\d,]+)/), matched: num(/Matched data: ([\d,]+)/) };
}

/**
 * The pair's floors (results.ts `floors`): zstd's patch (written to a temporary file, as a 1 GiB
 * patch may not fit in a buffer) and one `rsync -z` over the unshaped port (its bytes do not
 * depend on the link).
 */
function floors(rsyncd: { port: number; module: string } | null, basis: string, target: string): NonNullable<PairResult['floors']> {
  const patch = join(WORK, 'patch.zst');
  execFileSync('zstd', ['-q', '-f', '-3', '--long=27', `--patch-from=${basis}`, target, '-o', patch]);
  const zstdPatch = statSync(patch).size;
  rmSync(patch);
  if (!rsyncd) return { zstdPatch };
  const z = rsyncOnce(rsyncd, rsyncd.port, basis, target, true);
  return { zstdPatch, rsyncZ: z.sent + z.received };
}

/** Fig. 11: Match Token bytes with merging (as the protocol sends them) and without. */
function merging(basis: ChunkIndex, target: ChunkIndex) {
  const runs = matchRuns(target, basis);
  const m = runs.reduce((s, r) => s + r.count, 0);
  const H = hashLength(target.algo);
  const bytes = (n: number) => 5 * Math.max(1, Math.ceil(n / 8192)) + n * (8 + H) + 9; // Tokens headers + entries + TokensEnd
  return { tokens: runs.length, matchedChunks: m, mergedTokenBytes: bytes(runs.length), unmergedTokenBytes: bytes(m) };
}

async function runPair(
  rig: Rig,
  rsyncd: Awaited<ReturnType<typeof startRsyncd>> | null,
  shaping: Shaping,
  res: PairResult,
  basisPath: string,
  targetPath: string,
  approaches: readonly string[],
  reps: number,
  rsyncReps: number,
) {
  const b = await sourceOf(basisPath);
  const t = await sourceOf(targetPath);
  try {
    for (const a of approaches) {
      const srv = rig.servers.get(a)!;
      const port = await rig.port(a, srv.port, shaping);
      const name = `${res.section}/${res.pair.replace(/[^\w.-]+/g, '_')}`;
      const basisPrep: Prepared = await prepare(a, b.source);
      await syncPrepared(basisPrep, srv.url, name); // seed (unshaped)
      res.runs[a] = [];
      for (let r = -WARMUP; r < reps; r++) {
        settle([basisPath, targetPath, rig.dataOf(a)]);
        const rep = await syncPrepared(await prepare(a, t.source), `ws://127.0.0.1:${port}`, name, true, WARM);
        if (r >= 0) res.runs[a].push(rep);
        await rig.restore(a, name, basisPath, basisPrep); // back to the basis (untimed)
      }
      const med = median(res.runs[a].map((x) => x.timeMs.total));
      log(`${res.pair} ${a}: ${med} ms, ${res.runs[a][0].traffic.total} B (wire ${res.runs[a][0].traffic.wire} B)`);
    }
    if (rsyncd && rsyncReps) {
      const port = await rig.port('rsync', rsyncd.port, shaping);
      res.rsync = [];
      for (let r = 0; r < rsyncReps; r++) res.rsync.push(rsyncOnce(rsyncd, port, basisPath, targetPath));
      log(`${res.pair} rsync: ${median(res.rsync.map((x) => x.timeMs))} ms, ${res.rsync[0].sent + res.rsync[0].received} B`);
    }
    res.floors = floors(rsyncd, basisPath, targetPath);
    log(`${res.pair} zstd --patch-from: ${res.floors.zstdPatch} B; rsync -z: ${res.floors.rsyncZ ?? '—'} B`);
  } finally {
    await b.close();
    await t.close();
  }
}

async function main() {
  const t0 = Date.now();
  const command = `npm run bench${argv.length ? ' -- ' + argv.join(' ') : ''}`;
  const machine = {
    cpu: cpus()[0]?.model ?? '?',
    cores: cpus().length,
    memGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadavgAtStart: loadavg().map((x) => Math.round(x * 100) / 100),
    pinning: `servers (dsync serve, baseline server, rsync daemon) on core 0 (taskset); the benchmark client and toxiproxy unpinned; ${hashPool?.size ?? 0} hash worker thread(s) in the client for files of ${OFF_THREAD_MIN >> 20} MiB and more`,
    note: 'a shared 2-core machine: other engineers\' jobs may run at the same time (see loadavgAtStart)',
  };
  log(`datasets (${SECTIONS.includes('large') ? 'with' : 'without'} the 1 GiB file)`);
  const ds = await buildDatasets({ large: SECTIONS.includes('large') });
  mkdirSync(WORK, { recursive: true });
  const tp = await Toxiproxy.start();
  const rsyncd = RSYNC ? await startRsyncd(join(WORK, 'rsyncd'), '0') : null;
  const results: PairResult[] = [];
  const save = () => {
    mkdirSync(OUT, { recursive: true });
    const doc = { command, date: new Date().toISOString(), reps: REPS, warmup: WARMUP, machine, warm: WARM, shaping: { default: describeShaping(SHAPE_100M) + '; permessage-deflate on for every approach', large: describeShaping(SHAPE_1G) + `; permessage-deflate ${LARGE_DEFLATE ? 'on' : 'off'} for every approach` }, datasets: { mixedParts: ds.parts }, elapsedS: Math.round((Date.now() - t0) / 1000), results };
    writeFileSync(join(OUT, 'results.json'), JSON.stringify(doc, null, 1) + '\n');
    writeReport(doc, OUT);
  };
  try {
    if (SECTIONS.includes('synthetic')) {
      const rig = new Rig(tp, join(WORK, 'data-synthetic'));
      await rig.start();
      const basisIx = { dsync: await chunkSource(bufferSource(readFileSync(ds.mixed)), DEFAULT_PARAMS, 3), paper: await chunkSource(bufferSource(readFileSync(ds.mixed)), DEFAULT_PARAMS, 1) };
      const edits = QUICK ? ds.edits.filter((e) => e.kind === 'insert' || e.size === 2048) : ds.edits;
      for (const e of edits) {
        const res: PairResult = { section: 'synthetic', pair: `${e.kind}-${e.size}`, kind: e.kind, modSize: e.size, basisSize: statSync(ds.mixed).size, targetSize: statSync(e.path).size, shaping: describeShaping(SHAPE_100M), runs: {} };
        await runPair(rig, rsyncd, SHAPE_100M, res, ds.mixed, e.path, ONLY, REPS, REPS);
        const tb = bufferSource(readFileSync(e.path));
        res.merging = {
          dsync: merging(basisIx.dsync, await chunkSource(tb, DEFAULT_PARAMS, Algo.Blake3)),
          'dsync-paper': merging(basisIx.paper, await chunkSource(tb, DEFAULT_PARAMS, Algo.Sha1)),
        };
        results.push(res);
        save();
      }
      await rig.stop();
    }
    if (SECTIONS.includes('real')) {
      const rig = new Rig(tp, join(WORK, 'data-real'));
      await rig.start();
      for (const s of ds.series) {
        const vs = QUICK ? s.versions.slice(0, 2) : s.versions;
        for (let k = 1; k < vs.length; k++) {
          const res: PairResult = { section: 'real', pair: `${s.name} ${vs[k - 1].label}→${vs[k].label}`, basisSize: statSync(vs[k - 1].path).size, targetSize: statSync(vs[k].path).size, shaping: describeShaping(SHAPE_100M), runs: {} };
          await runPair(rig, rsyncd, SHAPE_100M, res, vs[k - 1].path, vs[k].path, ONLY, REPS, REPS);
          results.push(res);
          save();
        }
      }
      await rig.stop();
    }
    if (SECTIONS.includes('large') && ds.large) {
      // A fresh rig per ratio keeps at most a few 1 GiB versions on disk.
      for (const tg of ds.large.targets) {
        // permessage-deflate (~45 MB/s on this machine) would cap every approach below 1 Gbps;
        // the paper found it pays only below 100 Mbps, so the large files run without it.
        const rig = new Rig(tp, join(WORK, 'data-large'), LARGE_DEFLATE);
        await rig.start();
        const res: PairResult = { section: 'large', pair: `1 GiB, ${Math.round(tg.ratio * 100)}% modified`, ratio: tg.ratio, basisSize: statSync(ds.large.basis).size, targetSize: statSync(tg.path).size, shaping: describeShaping(SHAPE_1G) + `; permessage-deflate ${LARGE_DEFLATE ? 'on' : 'off'}`, runs: {} };
        // a file above KNOWN_MAX_FILE is pushed with the three phases: dsync-known and
        // dsync-kept would be dsync
        await runPair(rig, rsyncd, SHAPE_1G, res, ds.large.basis, tg.path, ONLY.filter((a) => a !== 'dsync-known' && a !== 'dsync-kept'), REPS, 1);
        results.push(res);
        save();
        await rig.stop();
      }
    }
  } finally {
    await hashPool?.close();
    await tp.stop();
    await rsyncd?.stop();
    rmSync(join(WORK, 'rsyncd'), { recursive: true, force: true });
  }
  save();
  log(`done in ${Math.round((Date.now() - t0) / 1000)} s; results in ${OUT}`);
}

// runs when started (npm run bench), not when imported
if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
