// The page without what Safari 15.4–25 lacks (docs/web-client.md, "What the page relies on"),
// taken away in Chromium: AbortSignal.timeout (Safari 16), BYOB readers of a Blob's stream
// (26.4), and writable streams of OPFS files (26; the worker has sync access handles), taken
// away on the page and in every worker it starts. A sync, a delta re-sync against the kept copy,
// and Clear still work; the cap, a file the page cannot write, fails aloud.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { content } from './data.ts';
import { expect, inWorkers, openPage, result, test } from './fixtures.ts';

// the page's CSP (worker-src 'self') refuses the blob: module that inWorkers starts
test.use({ bypassCSP: true });

const noTimeout = 'delete AbortSignal.timeout;';
const noByob = `{ const get = ReadableStream.prototype.getReader; ReadableStream.prototype.getReader = function (o) { if (o && o.mode === 'byob') throw new TypeError('no BYOB readers here'); return get.call(this, o); }; }`;

const noWritable = 'delete FileSystemFileHandle.prototype.createWritable;';

test('Safari 15.4: no AbortSignal.timeout, no BYOB readers, no writable streams: syncs, keeps, clears', async ({ page, server, dir }) => {
  await page.addInitScript(`${noTimeout} ${noByob} ${noWritable}`);
  // each worker (the sync worker, and the hash and socket workers it starts) says it ran so
  const told = `new BroadcastChannel('workers').postMessage(typeof FileSystemFileHandle.prototype.createWritable);`;
  await page.addInitScript(() => {
    const w = window as unknown as { workersSaid: string[] };
    w.workersSaid = [];
    new BroadcastChannel('workers').onmessage = (e) => w.workersSaid.push(e.data);
  });
  await inWorkers(page, `${noTimeout} ${noByob} ${noWritable} ${told}`);
  await openPage(page, server.url);
  expect(await page.evaluate(() => typeof AbortSignal.timeout)).toBe('undefined');
  const file = path.join(dir, 'notes.bin');
  const v1 = content(5_000_000);
  writeFileSync(file, v1);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'notes.bin')).version).toBe(1);
  await expect(page.getByTestId('kept-usage')).toHaveText('5 MB kept of 1 file');

  const v2 = Buffer.from(v1);
  v2.fill(0x21, 2_000_000, 2_000_016);
  writeFileSync(file, v2);
  await page.getByTestId('file-input').setInputFiles(file);
  const r = await result(page, 'notes.bin');
  expect(r.version).toBe(2);
  expect(JSON.parse((await page.locator('[data-testid=transfer][data-name="notes.bin"] [data-testid=result]').first().getAttribute('data-report'))!).keptBasis).toBe(true);
  expect((await server.storedBytes('notes.bin', 2)).equals(v2)).toBe(true);
  // the sync worker and the workers it starts ran without them too
  const said = await page.evaluate(() => (window as unknown as { workersSaid: string[] }).workersSaid);
  expect(said.length).toBeGreaterThanOrEqual(2);
  expect(new Set(said)).toEqual(new Set(['undefined']));

  // the cap is a file the page writes: here it cannot, and says so
  await page.getByTestId('kept-max').selectOption('0');
  await expect(page.getByTestId('kept-error')).toContainText('cannot write private files');
  await expect(page.getByTestId('kept-usage')).toHaveText('5 MB kept of 1 file');

  // Clear from the page, which cannot write the index: the index is made again from the folder
  await page.getByTestId('kept-clear').click();
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
  await page.reload();
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
});
