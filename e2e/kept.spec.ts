// The page's kept basis (client/src/kept-store.ts) in headless Chromium against a real server:
// the bytes of a pushed version are kept in the Origin Private File System, an edit then goes
// up as byte-exact copies of them; Clear empties them; a kept copy made stale by another
// client's push, or damaged on disk, is dropped and the exact bytes are stored all the same;
// the cap drops the least recently used; the control works on a 390 px phone; a delta download
// keeps the bytes it fetched; where a worker's sync access handles fail as WebKit's do, writable
// streams keep them, and where it can write nothing the panel says why; without OPFS, IndexedDB keeps them;
// a file above KNOWN_MAX_FILE (never pushed against) is not kept.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { content } from './data.ts';
import { expect, inWorkers, openPage, result, root, test } from './fixtures.ts';
import { KNOWN_MAX_FILE } from '../shared/src/session/known.ts';
import type { SyncReport } from '../shared/src/session/delta-client.ts';
import type { TestServer } from './server.ts';

/** The kept files in the page's OPFS folder: name, size and SHA-256 (hex). */
function keptFiles(page: Page): Promise<{ name: string; size: number; sha256: string }[]> {
  return page.evaluate(async () => {
    const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('dsync-kept', { create: true });
    const out: { name: string; size: number; sha256: string }[] = [];
    for await (const [name, h] of (d as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }).entries()) {
      if (h.kind !== 'file' || !/\.\d+$/.test(name)) continue;
      try {
        const f = await (h as FileSystemFileHandle).getFile();
        const sha = new Uint8Array(await crypto.subtle.digest('SHA-256', await f.arrayBuffer()));
        out.push({ name, size: f.size, sha256: Array.from(sha, (b) => b.toString(16).padStart(2, '0')).join('') });
      } catch {
        /* removed while it was read: not kept */
      }
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  });
}

/** `dsync push` of `file` from another client (the CLI, no known versions). */
function cliPush(server: TestServer, dir: string, file: string) {
  const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'cli-cache') };
  execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', file, '--server', `${server.url.replace('http', 'ws')}/sync`, '--no-known'], { env });
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The full report of the newest upload of `name`, once it is done. */
async function report(page: Page, name: string): Promise<SyncReport> {
  await result(page, name);
  const card = page.locator(`[data-testid=transfer][data-name="${name}"][data-direction=up]`).first();
  return JSON.parse((await card.getByTestId('result').getAttribute('data-report'))!);
}

/** `b` with `n` bytes overwritten at each of `at`. */
function overwrite(b: Buffer, at: number[], n: number): Buffer {
  const c = Buffer.from(b);
  for (const a of at) for (let i = 0; i < n; i++) c[a + i] ^= 0xa5;
  return c;
}

/** Resolves when the page next writes (or turns away) the bytes of a sync. */
function keptWritten(page: Page): Promise<void> {
  return page.evaluate(
    () =>
      new Promise<void>((resolve) => {
        const c = new BroadcastChannel('dsync-kept');
        c.onmessage = (e) => e.data === 'written' && (c.close(), resolve());
      }),
  );
}

/** Pushes `bytes` as `file` from the page; its report once the sync is done and its bytes are
 *  kept, or turned away (the page announces it on the kept store's channel). */
async function pushFile(page: Page, file: string, bytes: Buffer): Promise<SyncReport> {
  writeFileSync(file, bytes);
  const written = keptWritten(page);
  await page.getByTestId('file-input').setInputFiles(file);
  const r = await report(page, path.basename(file));
  await written;
  return r;
}

test('an edit goes up as copies of the kept bytes; Clear empties them', async ({ page, server, dir }) => {
  const file = path.join(dir, 'mixed.bin');
  const v1 = content(10_000_000);
  await openPage(page, server.url);
  const first = await pushFile(page, file, v1);
  expect(first.keptBasis).toBeUndefined();
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ size: v1.length, sha256: sha256(v1) })]);
  await expect(page.getByTestId('kept-usage')).toHaveText('10 MB kept of 1 file');

  // a few bytes overwritten in three places: the kept bytes make everything else a copy
  const v2 = overwrite(v1, [1_000_000, 5_000_000, 9_000_000], 8);
  const viaKept = await pushFile(page, file, v2);
  expect(viaKept.knownVersion).toBe(1);
  expect(viaKept.keptBasis).toBe(true);
  // each edit's 8 bytes; where a message splits a run of chunks within 6 bytes of an edit, the
  // 1–5 bytes between are cheaper sent than copied (kept.ts EDGE)
  expect(viaKept.literalBytes).toBeLessThanOrEqual(3 * (8 + 2 * 5));
  expect((await server.storedBytes('mixed.bin', 2)).equals(v2)).toBe(true);
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v2) })]);

  // Clear, by keyboard: nothing kept; the next edit goes against the version's chunk index
  await page.getByTestId('kept-clear').focus();
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
  expect(await keptFiles(page)).toEqual([]);
  const v3 = overwrite(v2, [2_000_000, 6_000_000, 8_000_000], 8);
  const viaIndex = await pushFile(page, file, v3);
  expect(viaIndex.knownVersion).toBe(2);
  expect(viaIndex.keptBasis).toBeUndefined();
  expect((await server.storedBytes('mixed.bin', 3)).equals(v3)).toBe(true);
  console.log(`24 bytes edited in a 10 MB file: ${viaKept.traffic.wire} bytes on the wire with the kept copy (${viaKept.literalBytes} literal), ${viaIndex.traffic.wire} with the chunk index only (${viaIndex.literalBytes} literal)`);
  expect(viaKept.traffic.wire).toBeLessThan(viaIndex.traffic.wire / 2);
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v3) })]);
});

test('a kept copy made stale by another client is dropped; the exact bytes are stored', async ({ page, server, dir }) => {
  const file = path.join(dir, 'shared.txt');
  const v1 = content(2_000_000);
  await openPage(page, server.url);
  await pushFile(page, file, v1);
  expect(await keptFiles(page)).toHaveLength(1);

  // another client (the CLI) pushes version 2: the page hears of it and drops its copy of 1
  const other = path.join(dir, 'other', 'shared.txt');
  mkdirSync(path.dirname(other), { recursive: true });
  writeFileSync(other, overwrite(v1, [100_000], 64));
  cliPush(server, dir, other);
  expect(await server.latest('shared.txt')).toBe(2);
  await expect.poll(() => keptFiles(page)).toEqual([]);
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');

  // the page's edit of version 1 is no new version over 2: it goes up as a conflict copy
  // beside it (guarded-push.ts), and the copy is kept for its next edit
  const v3 = overwrite(v1, [1_500_000], 16);
  const rep = await pushFile(page, file, v3);
  expect(rep.name).toMatch(/^shared \(conflict from .*\)\.txt$/);
  expect(rep.version).toBe(1);
  expect(rep.keptBasis).toBeUndefined();
  expect(await server.latest('shared.txt')).toBe(2);
  expect((await server.storedBytes(rep.name, 1)).equals(v3)).toBe(true);
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v3) })]);
});

test('a delta download keeps the fetched bytes: the next edit goes up as copies of them', async ({ page, server, dir }) => {
  const v1 = content(3_000_000);
  const v2 = overwrite(v1, [1_000_000], 64);
  const file = path.join(dir, 'book.bin');
  writeFileSync(file, v1);
  cliPush(server, dir, file);
  writeFileSync(file, v2);
  cliPush(server, dir, file);
  await openPage(page, server.url);
  // version 2 rebuilt from the copy of version 1 on this device
  writeFileSync(file, v1);
  await page.getByTestId('file-row').filter({ hasText: 'book.bin' }).getByRole('button', { expanded: false }).click();
  const written = keptWritten(page);
  await Promise.all([page.waitForEvent('download'), page.locator('[data-testid=version-row][data-version="2"]').getByTestId('delta-basis').setInputFiles(file)]);
  await written;
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v2) })]);
  const v3 = overwrite(v2, [2_000_000], 8);
  const rep = await pushFile(page, file, v3);
  expect(rep.knownVersion).toBe(2);
  expect(rep.keptBasis).toBe(true);
  expect(rep.literalBytes).toBeLessThanOrEqual(8);
  expect((await server.storedBytes('book.bin', 3)).equals(v3)).toBe(true);
});

test('a damaged kept copy is dropped, never copied from; the exact bytes are stored', async ({ page, server, dir }) => {
  const file = path.join(dir, 'notes.txt');
  const v1 = content(3_000_000);
  await openPage(page, server.url);
  await pushFile(page, file, v1);
  // damage the kept copy where the edit does not touch it (same size, other bytes)
  await page.evaluate(async () => {
    const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('dsync-kept');
    for await (const [name, h] of (d as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }).entries()) {
      if (!/\.\d+$/.test(name)) continue;
      const w = await (h as FileSystemFileHandle).createWritable({ keepExistingData: true });
      await w.write({ type: 'write', position: 700_000, data: new Uint8Array(64).fill(0x21) });
      await w.close();
    }
  });
  const v2 = overwrite(v1, [2_000_000], 16);
  const rep = await pushFile(page, file, v2);
  expect(rep.knownVersion).toBe(1);
  expect(rep.keptBasis).toBeUndefined();
  expect((await server.storedBytes('notes.txt', 2)).equals(v2)).toBe(true);
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v2) })]);
});

test('the cap drops the least recently used copy and keeps none above it, on a 390 px phone', async ({ page, server, dir }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await openPage(page, server.url);
  const [a, b, c] = [content(4_000_000), content(4_000_000), content(4_000_000)];
  await pushFile(page, path.join(dir, 'a.bin'), a);
  const settings = page.getByTestId('kept-settings');
  await settings.scrollIntoViewIfNeeded();
  const box = (await settings.boundingBox())!;
  expect(box.x).toBeGreaterThanOrEqual(0);
  expect(box.x + box.width).toBeLessThanOrEqual(390);
  await expect(page.getByTestId('kept-clear')).toBeInViewport();
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);

  // 10 MB: a and b fit; a pushed again (an edit) is the most recently used, so c drops b
  await page.getByTestId('kept-max').selectOption('10000000');
  await pushFile(page, path.join(dir, 'b.bin'), b);
  const a2 = overwrite(a, [1_000_000], 8);
  expect((await pushFile(page, path.join(dir, 'a.bin'), a2)).keptBasis).toBe(true);
  await pushFile(page, path.join(dir, 'c.bin'), c);
  expect((await keptFiles(page)).map((k) => k.sha256).sort()).toEqual([sha256(a2), sha256(c)].sort());
  await expect(page.getByTestId('kept-usage')).toHaveText('8 MB kept of 2 files');
  // larger than the cap: not kept, and what is kept stays
  await pushFile(page, path.join(dir, 'd.bin'), content(11_000_000));
  expect(await keptFiles(page)).toHaveLength(2);
  // a cap below what is kept drops it at once
  await page.getByTestId('kept-max').selectOption('0');
  await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
  expect(await keptFiles(page)).toEqual([]);
});

test.describe(() => {
  // the page's CSP (worker-src 'self') refuses the blob: module that inWorkers starts
  test.use({ bypassCSP: true });

  /** WebKitGTK's workers (2.50): createSyncAccessHandle fails with NotSupportedError and leaves
   *  that file unwritable: createWritable on it then fails with InvalidStateError. */
  const webkitWorker = `{
    const P = FileSystemFileHandle.prototype, writable = P.createWritable, broken = new Set();
    P.createSyncAccessHandle = function () { broken.add(this.name); return Promise.reject(new DOMException('not supported', 'NotSupportedError')); };
    P.createWritable = function (...a) { return broken.has(this.name) ? Promise.reject(new DOMException('not usable', 'InvalidStateError')) : writable.apply(this, a); };
  }`;

  test("where a worker's sync access handle fails and leaves its file unwritable (WebKitGTK), the probe file breaks and kept copies are written through writable streams", async ({ page, server, dir }) => {
    await inWorkers(page, webkitWorker);
    const file = path.join(dir, 'report.bin');
    const v1 = content(6_000_000);
    await openPage(page, server.url);
    await pushFile(page, file, v1);
    expect(await keptFiles(page)).toEqual([expect.objectContaining({ size: v1.length, sha256: sha256(v1) })]);
    await expect(page.getByTestId('kept-usage')).toHaveText('6 MB kept of 1 file');
    const v2 = overwrite(v1, [1_000_000, 5_000_000], 8);
    const rep = await pushFile(page, file, v2);
    expect(rep.keptBasis).toBe(true);
    expect(rep.literalBytes).toBeLessThanOrEqual(16);
    expect((await server.storedBytes('report.bin', 2)).equals(v2)).toBe(true);
    expect(await keptFiles(page)).toEqual([expect.objectContaining({ sha256: sha256(v2) })]);
    await expect(page.getByTestId('kept-error')).toHaveCount(0);
  });

  test('where a worker can write no private file at all, the panel says why nothing was kept', async ({ page, server, dir }) => {
    await inWorkers(page, `${webkitWorker} delete FileSystemFileHandle.prototype.createWritable;`);
    await openPage(page, server.url);
    await pushFile(page, path.join(dir, 'lost.bin'), content(1_000_000));
    await expect(page.getByTestId('kept-error')).toContainText('cannot write private files (sync access handle: NotSupportedError: not supported)');
    await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
    expect(await keptFiles(page)).toEqual([]);
  });

  test('where the origin has no OPFS, kept copies are in IndexedDB: an edit goes up as copies of them; Clear empties them', async ({ page, server, dir }) => {
    const noOpfs = 'delete StorageManager.prototype.getDirectory;';
    await page.addInitScript(noOpfs);
    await inWorkers(page, noOpfs);
    await openPage(page, server.url);
    const file = path.join(dir, 'idb.bin');
    const v1 = content(3_000_000);
    await pushFile(page, file, v1);
    await expect(page.getByTestId('kept-usage')).toHaveText('3 MB kept of 1 file');
    await expect(page.getByTestId('kept-settings')).toHaveAttribute('data-where', 'indexeddb');
    const v2 = overwrite(v1, [2_000_000], 8);
    const rep = await pushFile(page, file, v2);
    expect(rep.keptBasis).toBe(true);
    expect(rep.literalBytes).toBeLessThanOrEqual(8 + 2 * 5);
    expect((await server.storedBytes('idb.bin', 2)).equals(v2)).toBe(true);
    await expect(page.getByTestId('kept-usage')).toHaveText('3 MB kept of 1 file');
    await page.getByTestId('kept-clear').click();
    await expect(page.getByTestId('kept-usage')).toHaveText('Nothing kept');
    await expect(page.getByTestId('kept-error')).toHaveCount(0);
  });
});

test('a file above KNOWN_MAX_FILE is not kept (never pushed against), and the copy of its smaller version is dropped', async ({ page, server, dir }) => {
  const file = path.join(dir, 'grows.bin');
  const v1 = content(1_000_000);
  await openPage(page, server.url);
  await pushFile(page, file, v1);
  expect(await keptFiles(page)).toEqual([expect.objectContaining({ size: v1.length, sha256: sha256(v1) })]);
  // grown past KNOWN_MAX_FILE: known by its version only; its bytes would be written and never read
  const v2 = Buffer.concat([v1, randomBytes(KNOWN_MAX_FILE)]);
  writeFileSync(file, v2);
  await page.getByTestId('file-input').setInputFiles(file);
  await expect(page.locator('[data-testid=transfer][data-name="grows.bin"][data-status=done]')).toHaveCount(2, { timeout: 120_000 });
  expect((await report(page, 'grows.bin')).version).toBe(2);
  expect(await server.storedSha256('grows.bin', 2)).toBe(sha256(v2));
  expect(await keptFiles(page)).toEqual([]);
});
