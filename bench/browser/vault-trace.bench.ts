// Where a vault push's time goes in the page: a Chromium trace of one first push of MIB (256)
// MiB, summed per thread (its top-level tasks' wall and CPU time, the largest trace events) and
// the V8 sampling profiler's samples by thread and function (self time). Build the page with
// `npx vite build --minify false` (in client/) for functions' own names.
//   MIB=256 npx playwright test -c bench/browser/playwright.config.ts bench/browser/vault-trace.bench.ts
// Prints its report (OUT= also writes it to a file).
import { writeFileSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createVault, expect, test } from '../../e2e/fixtures.ts';

const MiB = 2 ** 20;
const SIZE = Number(process.env.MIB ?? 256) * MiB;
const LONG = { timeout: 600_000 };

test('a vault push, traced', async ({ page, server, dir, browser }) => {
  test.setTimeout(1_800_000);
  await createVault(page, server.url, 'a passphrase');
  const file = path.join(dir, `random.bin`);
  writeFileSync(file, randomBytes(SIZE));
  const tracePath = path.join(dir, 'trace.json');
  await browser.startTracing(page, { path: tracePath, categories: ['toplevel', 'disabled-by-default-devtools.timeline', 'devtools.timeline', 'v8', '__metadata', 'disabled-by-default-v8.cpu_profiler'] });
  const t = Date.now();
  await page.getByTestId('vault-file-input').setInputFiles(file);
  await expect(page.getByTestId('vault-progress')).toContainText(`random.bin stored`, LONG);
  const ms = Date.now() - t;
  await browser.stopTracing();
  const trace = JSON.parse(readFileSync(tracePath, 'utf8'));
  const events: any[] = trace.traceEvents ?? trace;
  const names = new Map<string, string>();
  for (const e of events) if (e.ph === 'M' && e.name === 'thread_name') names.set(`${e.pid}:${e.tid}`, e.args.name);
  const per = new Map<string, { wall: number; cpu: number; n: number; top: Map<string, number> }>();
  for (const e of events) {
    if (e.ph !== 'X' || !/^(ThreadControllerImpl::RunTask|RunTask|ThreadPool_RunTask)$/.test(e.name)) continue;
    const k = `${e.pid}:${e.tid}`;
    const p = per.get(k) ?? { wall: 0, cpu: 0, n: 0, top: new Map() };
    p.wall += e.dur ?? 0;
    p.cpu += e.tdur ?? 0;
    p.n++;
    per.set(k, p);
  }
  const rows = [...per].sort((a, b) => b[1].cpu - a[1].cpu).slice(0, 20);
  const out = [`push ${SIZE / MiB} MiB: ${ms} ms`, ...rows.map(([k, p]) => `${((names.get(k) ?? '') + '#' + k.split(':')[1]).padEnd(40)} wall ${(p.wall / 1000).toFixed(0).padStart(7)} ms cpu ${(p.cpu / 1000).toFixed(0).padStart(7)} ms tasks ${p.n}`)].join('\n');
  // the biggest event kinds on the busiest threads
  const kinds = new Map<string, number>();
  for (const e of events) if (e.ph === 'X' && e.dur && !/RunTask/.test(e.name)) { const key = `${names.get(`${e.pid}:${e.tid}`) ?? ''}#${e.tid} ${e.name}`; kinds.set(key, (kinds.get(key) ?? 0) + (e.tdur ?? e.dur)); }
  const top = [...kinds].sort((a, b) => b[1] - a[1]).slice(0, 45).map(([k, d]) => `${k.padEnd(70)} ${(d / 1000).toFixed(0)} ms`).join('\n');
  // the V8 sampling profiler's samples per thread, by function (self time)
  const nodes = new Map<string, Map<number, string>>();
  const self = new Map<string, number>();
  for (const e of events) {
    if (e.name !== 'ProfileChunk') continue;
    const th = `${names.get(`${e.pid}:${e.tid}`) ?? ''}#${e.tid}`;
    const key = `${e.pid}:${e.id}`;
    const m = nodes.get(key) ?? new Map();
    nodes.set(key, m);
    const prof = e.args?.data?.cpuProfile ?? {};
    for (const n of prof.nodes ?? []) m.set(n.id, `${n.callFrame.functionName || '(anon)'} ${String(n.callFrame.url ?? '').split('/').pop()}:${n.callFrame.lineNumber}`);
    const deltas: number[] = e.args?.data?.timeDeltas ?? [];
    (prof.samples ?? []).forEach((s: number, i: number) => {
      const k = `${th} ${m.get(s) ?? s}`;
      self.set(k, (self.get(k) ?? 0) + (deltas[i + 1] ?? deltas[i] ?? 0));
    });
  }
  const prof = [...self].sort((a, b) => b[1] - a[1]).slice(0, 60).map(([k, d]) => `${k.slice(0, 110).padEnd(110)} ${(d / 1000).toFixed(0)} ms`).join('\n');
  const text = `${out}\n\n${top}\n\nV8 samples (self time) by thread and function:\n${prof}\n`;
  if (process.env.OUT) writeFileSync(process.env.OUT, text);
  console.log(text);
});
