// The page against the CLI on large files, same server build, one run (issue 25): a 1 GiB
// pseudo-random file pushed first from the page (Chromium, file control) and then with
// `dsync push`, then 30% of every MiB rewritten and both pushed again, then random edits (offsets
// and lengths at random: `randomEdits` in e2e/data.ts) of 1%, 10% and 30% of the file, each pushed
// by both in turn; then 256 MiB from the page
// on the 4×-throttled phone profile, next to the CLI. Page and CLI alternate step by step, each
// against its own server process (same build, own store), so the machine's load hits both alike.
// Each random edit's row is PAIRS pairs (default 3), each a fresh random edit of that share made
// to the version before and pushed by both, page first then the CLI, then the CLI first: one
// pair's ratio moves by a third with the shared machine's speed (the same push's CPU varies so on
// every thread, bench/results/page-vs-cli.md), so the row's ratio is the median pair's.
// Prints the page/CLI speed ratios and writes bench/results/page-vs-cli.md (OUT= elsewhere).
//   npm run bench:page-vs-cli        (ROUNDS=n repeats the 1 GiB pair; GIB=0.25 for a quick run;
//                                     EDITS=0.01,0.1,0.3 the random edits' fractions, EDITS= none;
//                                     PAIRS=n pairs per random edit)
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { devices } from '@playwright/test';
import { randomEdits, rewriteEveryMiB, writePseudoRandomFile } from '../../e2e/data.ts';
import { card, expect, openPage, result, root, test, watchEnd } from '../../e2e/fixtures.ts';
import { TabMetrics } from '../../e2e/metrics.ts';
import { TestServer } from '../../e2e/server.ts';
import { cliPush } from './cli-push.ts';
import { settle } from './proc-cpu.ts';

const MiB = 2 ** 20;
const SIZE = Math.round(Number(process.env.GIB ?? 1) * 1024) * MiB;
const ROUNDS = Number(process.env.ROUNDS ?? 1);
const EDITS = (process.env.EDITS ?? '0.01,0.1,0.3').split(',').filter(Boolean).map(Number);
const PAIRS = Math.max(1, Number(process.env.PAIRS ?? 3));
const PHONE_SIZE = 256 * MiB;
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;
const rate = (bytes: number, ms: number) => `${(bytes / MiB / (ms / 1000)).toFixed(0)} MiB/s`;

interface PageRun {
  ms: number;
  report: any;
  peak: { rss: number; worker: number };
  longTasks: number;
  maxTimerLag: number;
}

test('page vs CLI: 1 GiB first upload, 30% edit and random edits, 256 MiB on the throttled phone', async ({ page, browser, server, dir }) => {
  const cliServer = await new TestServer().start();
  const cache = path.join(dir, 'cli-cache');
  mkdirSync(cache);
  const load = loadavg()[0];
  const rows: string[] = [];
  const memRows: string[] = [];
  // each sync starts once both servers are idle: one's work after an answer (a compaction of
  // the file's segments, docs/store.md §10) does not land on the other's sync
  const quiet = async () => {
    const ms = await settle(new Set([server.pid, cliServer.pid]));
    if (ms > 300) console.log(`  (the servers were busy for ${ms} ms before this sync)`);
  };

  async function pageRun(p: typeof page, metrics: TabMetrics, file: string, name: string, version: number, sha: string, size: number): Promise<PageRun> {
    await quiet();
    metrics.peak = await metrics.sample();
    await TabMetrics.responsiveness(p);
    metrics.poll(250);
    const ended = await watchEnd(p, name);
    const t0 = Date.now();
    await p.getByTestId('file-input').setInputFiles(file);
    const r = await result(p, name, { timeout: 900_000 });
    const polled = Date.now() - t0;
    const ms = (await ended()) - t0;
    console.log(`  page ${name}: ${ms} ms to its result (${polled} ms when the assertion saw it)`);
    metrics.stop();
    const { longTasks, maxTimerLag } = await TabMetrics.responsiveness(p);
    expect(r.version).toBe(version);
    expect(await server.storedSha256(name, version)).toBe(sha);
    const report = JSON.parse((await card(p, name).getByTestId('result').getAttribute('data-report'))!);
    const b = metrics.baseline;
    const pk = metrics.peak;
    return { ms, report, peak: { rss: pk.rendererRss - b.rendererRss, worker: pk.workerHeap + pk.workerBuffers }, longTasks: longTasks.length, maxTimerLag };
  }
  async function cliRun(file: string, name: string, version: number, sha: string) {
    await quiet();
    const r = await cliPush(cliServer, file, name, cache);
    expect(r.report.version).toBe(version);
    expect(await cliServer.storedSha256(name, version)).toBe(sha);
    return r;
  }
  /** A row of one pair, or of several (the median pair's ratio, every pair's beside it). */
  function row(what: string, size: number, pairs: { pg: PageRun; cli: { ms: number; report: any } }[]) {
    const ratio = (x: (typeof pairs)[number]) => x.cli.ms / x.pg.ms;
    const median = [...pairs].sort((a, b) => ratio(a) - ratio(b))[(pairs.length - 1) >> 1];
    const each = (f: (x: (typeof pairs)[number]) => string) => pairs.map(f).join(' · ');
    const delta = (f: (x: (typeof pairs)[number]) => any) => each((x) => (f(x).traffic.delta / MiB).toFixed(1));
    const speed = pairs.length > 1 ? `**${ratio(median).toFixed(2)}** (${each((x) => ratio(x).toFixed(2))})` : `**${ratio(median).toFixed(2)}**`;
    const line = `| ${what} | ${each((x) => s(x.pg.ms))} (${rate(size, median.pg.ms)}) | ${each((x) => s(x.cli.ms))} (${rate(size, median.cli.ms)}) | ${speed} | ${delta((x) => x.pg.report)} / ${delta((x) => x.cli.report)} MiB |`;
    const max = (f: (x: PageRun) => number) => Math.max(...pairs.map((x) => f(x.pg)));
    const runBytes = Math.max(...pairs.map((x) => x.pg.report.runBytes ?? 0));
    const mem = `| ${what} | ${mib(max((p) => p.peak.rss))} | ${mib(max((p) => p.peak.worker))} | ${max((p) => p.longTasks)} | ${Math.round(max((p) => p.maxTimerLag))} ms | ${runBytes ? `Delta Runs (${each((x) => mib(x.pg.report.runBytes))})` : 'read in JS'} |`;
    console.log(`${line}\n  page memory/responsiveness: ${mem}`);
    rows.push(line);
    memRows.push(mem);
  }
  const pair = async (pg: () => Promise<PageRun>, cli: () => Promise<{ ms: number; report: any }>, cliFirst = false) => {
    if (!cliFirst) return { pg: await pg(), cli: await cli() };
    const c = await cli();
    return { pg: await pg(), cli: c };
  };

  try {
    await TabMetrics.prepare(page);
    await openPage(page, server.url);
    const metrics = await TabMetrics.attach(page, browser);
    for (let round = 0; round < ROUNDS; round++) {
      const name = `big-${round}.img`;
      const file = path.join(dir, name);
      const sha1 = await writePseudoRandomFile(file, SIZE, 0x9e3779b9 + round);
      row(`${mib(SIZE)} first upload`, SIZE, [await pair(() => pageRun(page, metrics, file, name, 1, sha1, SIZE), () => cliRun(file, name, 1, sha1))]);
      const sha2 = await rewriteEveryMiB(file, SIZE, 0x2545f491 + round);
      row(`${mib(SIZE)}, 30% of every MiB rewritten`, SIZE, [await pair(() => pageRun(page, metrics, file, name, 2, sha2, SIZE), () => cliRun(file, name, 2, sha2))]);
      let version = 2;
      for (const [i, fraction] of EDITS.entries()) {
        const pairs: Awaited<ReturnType<typeof pair>>[] = [];
        const edits: Awaited<ReturnType<typeof randomEdits>>[] = [];
        for (let k = 0; k < PAIRS; k++) {
          // (the first pair's seed is the one bench:page-vs-cli-firefox and bench:page-profile use)
          const e = await randomEdits(file, fraction, 0x6a09e667 + 16 * round + i + 256 * k);
          const v = ++version;
          edits.push(e);
          pairs.push(await pair(() => pageRun(page, metrics, file, name, v, e.sha256, e.size), () => cliRun(file, name, v, e.sha256), k % 2 === 1));
        }
        const sum = (f: (e: (typeof edits)[number]) => number) => edits.reduce((t, e) => t + f(e), 0);
        const what = `${mib(edits[0].size)}, random edits of ${Math.round(fraction * 100)}%${PAIRS > 1 ? `, ${PAIRS} in turn` : ''} (${sum((e) => e.overwrites)} overwrites, ${sum((e) => e.inserts)} inserts, ${sum((e) => e.deletes)} deletes; ${mib(sum((e) => e.editBytes))})`;
        row(what, edits[0].size, pairs);
      }
    }

    await page.close(); // (the phone's metrics attach to the one sync worker left)
    // The phone: Pixel 7 profile, the page's CPU throttled 4× (Chromium throttles pages, not workers).
    const { defaultBrowserType: _, ...pixel } = devices['Pixel 7'];
    const phoneContext = await browser.newContext({ ...pixel, viewport: { width: 390, height: 844 } });
    const phone = await phoneContext.newPage();
    await TabMetrics.prepare(phone);
    await (await phoneContext.newCDPSession(phone)).send('Emulation.setCPUThrottlingRate', { rate: 4 });
    await openPage(phone, server.url);
    const phoneMetrics = await TabMetrics.attach(phone, browser);
    const name = 'phone.img';
    const file = path.join(dir, name);
    const sha = await writePseudoRandomFile(file, PHONE_SIZE, 0x1234567);
    row(`${mib(PHONE_SIZE)} first upload, phone profile (4× throttled)`, PHONE_SIZE, [await pair(() => pageRun(phone, phoneMetrics, file, name, 1, sha, PHONE_SIZE), () => cliRun(file, name, 1, sha))]);
    await phoneContext.close();
  } finally {
    await cliServer.stop();
  }

  const out = process.env.OUT ?? path.join(root, 'bench/results/page-vs-cli.md');
  writeFileSync(
    out,
    `# The page against the CLI on large files

- date: ${new Date().toISOString()}
- command: \`npm run bench:page-vs-cli\` (bench/browser/page-vs-cli.bench.ts)
- one build, two \`dsync serve\` processes on loopback (one for the page, one for the CLI, each
  its own store), each sync started once both are idle (\`settle\`: the other's compaction after
  an answer, docs/store.md §10, lands on no sync); Debian's Chromium, headless, the file picked with the file control and timed
  to its card showing the result (\`watchEnd\` in e2e/fixtures.ts); the CLI is
  \`dsync push FILE --json\`, timed from start to exit. Pseudo-random (incompressible) files;
  the aligned edit rewrites the first 30% of every MiB; each random edit (\`randomEdits\` in
  e2e/data.ts, seeded) applies, to the version before, overwrites, inserts and deletes with equal
  odds at offsets uniform over the file, of lengths log-uniform from 1 B to 1 MiB, until their
  lengths add up to the given share of the file. Page and CLI alternate step by step on a 2-core
  machine shared with other jobs (1-minute load average ${load.toFixed(1)} at the start).
- speed ratio = CLI time / page time (1.0: the page as fast as the CLI). Each random edit's row
  is ${PAIRS} pair${PAIRS > 1 ? 's' : ''}: ${PAIRS > 1 ? `${PAIRS} fresh random edits of that share, one after another, each pushed by both (page first, then
  the CLI first, in turn); its ratio is the median pair's, each pair's beside it (times and Delta
  Bytes pair by pair; MiB/s of the median pair)` : 'one random edit pushed by both'}.

| sync | page | CLI | page / CLI speed | Delta Bytes, page / CLI |
|---|---|---|---|---|
${rows.join('\n')}

The page during each sync (peaks over the renderer's RSS when the page had loaded; the sync
worker's V8 heap + ArrayBuffer backing stores; main-thread long tasks > 50 ms and the worst
lateness of a 50 ms timer; how many of the Delta Bytes went as Delta Runs of file slices):

| sync | renderer RSS | sync worker heap + buffers | long tasks | worst timer delay | Delta Bytes as |
|---|---|---|---|---|---|
${memRows.join('\n')}
`,
  );
  console.log(`wrote ${path.relative(root, out)}`);
});
