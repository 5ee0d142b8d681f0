// The page where a worker cannot start workers (Safari before 15, some WebViews), made in
// Chromium: `Worker` is taken away in every worker the page starts, so the sync worker's socket
// worker and hash workers cannot start, and it runs its sockets and its hashing itself
// (worker-socket.ts `PageSocket`, worker.ts `hashPool`). The core flows stay byte-exact: a pick
// and sync, an edit as a delta, a delta download; each card's Details says where its socket and
// hashing ran. Files of 64 MiB and more (OFF_THREAD_MIN) are the ones hashed off the sync worker.
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { writePseudoRandomFile } from './data.ts';
import { card, expect, inWorkers, openPage, result, test } from './fixtures.ts';

// the page's CSP (worker-src 'self') refuses the blob: module that inWorkers starts
test.use({ bypassCSP: true });

const SIZE = 66 << 20;

/** What a transfer's Details says of where its socket and hashing ran. */
async function threads(page: Page, name: string, direction: 'up' | 'down' = 'up') {
  const t = card(page, name, direction).getByTestId('threads');
  return { socketWorker: await t.getAttribute('data-socket-worker'), hashWorkers: Number(await t.getAttribute('data-hash-workers')) };
}

test('without workers in workers: pick and sync, an edit as a delta and a delta download run in the sync worker, byte-exact', async ({ page, server, dir }) => {
  // each worker says what it has of Worker: the sync worker none, and it starts no other
  await page.addInitScript(() => {
    const w = window as unknown as { workersSaid: string[] };
    w.workersSaid = [];
    new BroadcastChannel('workers').onmessage = (e) => w.workersSaid.push(e.data);
  });
  await inWorkers(page, `delete globalThis.Worker; new BroadcastChannel('workers').postMessage(typeof Worker);`);
  await openPage(page, server.url);
  const file = path.join(dir, 'film.bin');
  const sha1 = await writePseudoRandomFile(file, SIZE);
  const v1 = readFileSync(file);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'film.bin', { timeout: 180_000 })).version).toBe(1);
  expect(await server.storedSha256('film.bin', 1)).toBe(sha1);
  expect(await threads(page, 'film.bin')).toEqual({ socketWorker: 'false', hashWorkers: 0 });
  await expect(card(page, 'film.bin').getByTestId('threads')).toHaveText('socket in the sync worker, hashed in the sync worker');

  // 16 bytes edited in place: a delta
  const fh = await open(file, 'r+');
  await fh.write(Buffer.alloc(16, 0x21), 0, 16, 40_000_000);
  await fh.close();
  const v2 = readFileSync(file);
  await page.getByTestId('file-input').setInputFiles(file);
  const second = await result(page, 'film.bin', { timeout: 180_000 });
  expect(second.version).toBe(2);
  expect(second.delta).toBeLessThan(1 << 20);
  expect((await server.storedBytes('film.bin', 2)).equals(v2)).toBe(true);
  expect(await threads(page, 'film.bin')).toEqual({ socketWorker: 'false', hashWorkers: 0 });

  // version 1 rebuilt from the edited copy on this device: a delta download
  await page.getByTestId('file-row').filter({ hasText: 'film.bin' }).getByRole('button', { expanded: false }).click();
  const [download] = await Promise.all([page.waitForEvent('download', { timeout: 180_000 }), page.locator('[data-testid=version-row][data-version="1"]').getByTestId('delta-basis').setInputFiles(file)]);
  expect(readFileSync(await download.path()).equals(v1)).toBe(true);
  const down = await result(page, 'film.bin', { direction: 'down' });
  expect(down.sent).toBeLessThan(1 << 20);
  expect(await threads(page, 'film.bin', 'down')).toEqual({ socketWorker: 'false', hashWorkers: 0 });

  // the sync worker ran without Worker, and no worker started from it ran at all
  const said = await page.evaluate(() => (window as unknown as { workersSaid: string[] }).workersSaid);
  expect(said.length).toBeGreaterThanOrEqual(1);
  expect(new Set(said)).toEqual(new Set(['undefined']));
});

test('with workers in workers the same sync runs its socket and hashing in workers of their own', async ({ page, server, dir }) => {
  await openPage(page, server.url);
  const file = path.join(dir, 'film.bin');
  const sha = await writePseudoRandomFile(file, SIZE);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'film.bin', { timeout: 180_000 })).version).toBe(1);
  expect(await server.storedSha256('film.bin', 1)).toBe(sha);
  const cores = await page.evaluate(() => navigator.hardwareConcurrency || 1);
  expect(await threads(page, 'film.bin')).toEqual({ socketWorker: 'true', hashWorkers: Math.min(2, cores - 1) });
});

test('workers that never start (as Firefox ESR now and then leaves one): the sync worker gives them up and syncs by itself, byte-exact', async ({ page, server, dir }) => {
  // every worker the sync worker starts runs an empty script: no message, no error, as the
  // nested module worker Firefox did not start (e2e/engines/first-pick.ts)
  await inWorkers(page, `{ const Real = globalThis.Worker; globalThis.Worker = class extends Real { constructor(url, opts) { super(URL.createObjectURL(new Blob([''], { type: 'text/javascript' })), opts); } }; }`);
  await openPage(page, server.url);
  const file = path.join(dir, 'film.bin');
  const sha = await writePseudoRandomFile(file, SIZE);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'film.bin', { timeout: 180_000 })).version).toBe(1);
  expect(await server.storedSha256('film.bin', 1)).toBe(sha);
  expect(await threads(page, 'film.bin')).toEqual({ socketWorker: 'false', hashWorkers: 0 });
});

test('a sync worker that never runs (as Firefox ESR now and then leaves one): the page starts another, and the file picked meanwhile syncs, byte-exact', async ({ page, server, dir }) => {
  // the page's first worker (the sync worker) runs an empty script: no message, no error
  await page.addInitScript(() => {
    const g = window as unknown as { Worker: typeof Worker; workersMade: number };
    const Real = g.Worker;
    g.workersMade = 0;
    g.Worker = class extends Real {
      constructor(url: string | URL, opts?: WorkerOptions) {
        super(g.workersMade++ === 0 ? URL.createObjectURL(new Blob([''], { type: 'text/javascript' })) : url, opts);
      }
    };
  });
  await openPage(page, server.url);
  const file = path.join(dir, 'notes.txt');
  const sha = await writePseudoRandomFile(file, 1 << 20);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'notes.txt', { timeout: 120_000 })).version).toBe(1);
  expect(await server.storedSha256('notes.txt', 1)).toBe(sha);
  expect(await page.evaluate(() => (window as unknown as { workersMade: number }).workersMade)).toBe(2);
});
