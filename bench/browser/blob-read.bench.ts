// What reading a picked File costs in a worker, by the way it is read: slices of 1, 4, 16 and
// 64 MiB (`slice(a, b).arrayBuffer()`, the next one asked for while the last is taken, as the
// chunking does), one stream of the whole file (`Blob.stream()`, default and BYOB readers),
// and the per-call cost of slices and Blobs. Wall time in the worker and CPU seconds of every
// process of this Chromium (/proc), per 256 MiB; each way twice, interleaved.
//   npm run bench:blob-read
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from '../../e2e/fixtures.ts';
import { cpu } from './proc-cpu.ts';

const MiB = 2 ** 20;
const SIZE = 256 * MiB;

// the worker: reads its Blob (a slice of the File) as `mode` says, or times `slice` and `new Blob`
const WORKER = `let b;
onmessage = async ({ data: m }) => {
  if (m.file) { b = m.file.slice(0, m.file.size); return postMessage(0); }
  const t = performance.now();
  if (m.mode === 'calls') {
    const r = {}; const s = b.slice(0, 1000); const h = new Uint8Array(20);
    let t0 = performance.now(); for (let i = 0; i < 500; i++) b.slice(i, i + 1000); r.slice = (performance.now() - t0) / 500;
    t0 = performance.now(); for (let i = 0; i < 500; i++) new Blob([h, s]); r.blob = (performance.now() - t0) / 500;
    t0 = performance.now(); for (let i = 0; i < 100; i++) await b.slice(i << 16, (i << 16) + 8192).arrayBuffer(); r.read8k = (performance.now() - t0) / 100;
    return postMessage(r);
  }
  if (m.mode === 'stream') {
    const rd = b.stream().getReader();
    for (;;) if ((await rd.read()).done) break;
  } else if (m.mode === 'byob') {
    const rd = b.stream().getReader({ mode: 'byob' });
    let buf = new ArrayBuffer(4 << 20);
    for (;;) { const x = await rd.read(new Uint8Array(buf)); if (x.done) break; buf = x.value.buffer; }
  } else {
    const s = m.mode << 20;
    let next = b.slice(0, s).arrayBuffer();
    for (let o = 0; o < b.size; o += s) { await next; next = o + s < b.size ? b.slice(o + s, o + 2 * s).arrayBuffer() : null; }
  }
  postMessage(performance.now() - t);
};`;

test('reading a File in a worker: slices against one stream', async ({ page, browser, dir }) => {
  const file = path.join(dir, 'f.bin');
  writeFileSync(file, new Uint8Array(SIZE).fill(7));
  await page.setContent('<input type=file id=f>');
  await page.setInputFiles('#f', file);
  await page.evaluate(async (src) => {
    const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })));
    const run = (m: unknown) => new Promise((res) => ((w.onmessage = (e) => res(e.data)), w.postMessage(m)));
    (window as unknown as { run: typeof run }).run = run;
    await run({ file: (document.getElementById('f') as HTMLInputElement).files![0] });
  }, WORKER);
  const cdp = await browser.newBrowserCDPSession();
  const pids = new Set((await cdp.send('SystemInfo.getProcessInfo')).processInfo.map((p) => p.id));
  const run = (m: unknown) => page.evaluate((x) => (window as unknown as { run(m: unknown): Promise<unknown> }).run(x), m);
  const rows = new Map<string, string[]>();
  for (const round of [0, 1])
    for (const mode of [1, 4, 16, 64, 'stream', 'byob']) {
      const c0 = cpu(pids);
      const ms = (await run({ mode })) as number;
      const label = typeof mode === 'number' ? `slices of ${mode} MiB` : mode === 'byob' ? 'one stream, BYOB reader' : 'one stream, default reader';
      rows.set(label, [...(rows.get(label) ?? []), `${Math.round(ms)} ms, ${(cpu(pids) - c0).toFixed(2)} s`]);
      if (round === 1) console.log(`| ${label} | ${rows.get(label)!.join(' · ')} |`);
    }
  console.log('per call (ms):', JSON.stringify(await run({ mode: 'calls' })));
});
