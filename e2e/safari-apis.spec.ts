// The page without what Safari 15.4–25 lacks (docs/web-client.md, "What the page relies on"),
// taken away in Chromium: AbortSignal.timeout (Safari 16), BYOB readers of a Blob's stream
// (26.4), and writable streams of OPFS files on the page (26; its worker has sync access
// handles). A sync, a delta re-sync against the kept copy, and Clear still work.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { content } from './data.ts';
import { expect, inSyncWorker, openPage, result, test } from './fixtures.ts';

// the page's CSP (worker-src 'self') refuses the blob: module that inSyncWorker starts
test.use({ bypassCSP: true });

const noTimeout = 'delete AbortSignal.timeout;';
const noByob = `{ const get = ReadableStream.prototype.getReader; ReadableStream.prototype.getReader = function (o) { if (o && o.mode === 'byob') throw new TypeError('no BYOB readers here'); return get.call(this, o); }; }`;

test('Safari 15.4: no AbortSignal.timeout, no BYOB readers, no writable streams on the page: syncs, keeps, clears', async ({ page, server, dir }) => {
  await page.addInitScript(`${noTimeout} ${noByob} delete FileSystemFileHandle.prototype.createWritable;`);
  await inSyncWorker(page, `${noTimeout} ${noByob}`);
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

  // Clear from the page, which cannot write the index: the index is made again from the folder
  await page.getByTestId('kept-clear').click();
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
  await page.reload();
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
});
