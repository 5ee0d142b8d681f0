// What a new user meets in the page (issue #34): search over all files, Cancel all, a bar that
// reads what its line says, sign-in waits and refusals in words, "unchanged", a keep setting of
// nothing, and a restored version that says where it came from.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { content } from './data.ts';
import { card, expect, openPage, result, root, test } from './fixtures.ts';
import { TestServer } from './server.ts';
import { pushBytes } from '../harness/helpers.ts';

const fileRow = (page: Page, name: string) => page.locator(`[data-testid=file-row][data-name="${name}"]`);

test('search finds a name in every folder, from the top or from inside a folder, and shows its folder', async ({ page, server, dir }) => {
  const files = ['proj/bin/blob3mb.bin', 'proj/readme.md', 'notes/blob-ideas.txt', 'top.txt'];
  for (const n of files) {
    mkdirSync(path.dirname(path.join(dir, 'w', n)), { recursive: true });
    writeFileSync(path.join(dir, 'w', n), content(2000));
  }
  await openPage(page, server.url);
  await page.getByTestId('folder-input').setInputFiles(path.join(dir, 'w'));
  for (const n of files) await result(page, `w/${n}`);
  await page.getByTestId('search').fill('BLOB');
  await expect(page.getByTestId('file-row')).toHaveCount(2);
  await expect(fileRow(page, 'w/proj/bin/blob3mb.bin').getByTestId('in-folder')).toHaveText('in w/proj/bin/');
  await expect(fileRow(page, 'w/notes/blob-ideas.txt').getByTestId('in-folder')).toHaveText('in w/notes/');
  await expect(page.getByTestId('list-foot')).toContainText('2 found in all files');
  // from inside another folder: still every folder
  await page.getByTestId('search').fill('');
  await page.getByRole('button', { name: 'Open folder w' }).click();
  await page.getByRole('button', { name: 'Open folder notes' }).click();
  await page.getByTestId('search').fill('blob3');
  await expect(page.getByTestId('file-row')).toHaveCount(1);
  await expect(fileRow(page, 'w/proj/bin/blob3mb.bin')).toBeVisible();
  // a hit opens like any file row: its history
  await fileRow(page, 'w/proj/bin/blob3mb.bin').getByRole('button', { expanded: false }).click();
  await expect(fileRow(page, 'w/proj/bin/blob3mb.bin').getByTestId('version-row')).toHaveCount(1);
  // more than a page of hits: the first 100, then Search further
  const target = { wsUrl: `${server.url.replace('http', 'ws')}/sync` };
  for (let i = 0; i < 130; i++) await pushBytes(target, `many/hit-${String(i).padStart(3, '0')}.txt`, new Uint8Array([i]));
  await page.getByTestId('search').fill('hit-');
  await expect(page.getByTestId('list-foot')).toContainText('100 found in all files so far');
  await expect(page.getByTestId('file-row')).toHaveCount(100);
  await page.getByRole('button', { name: 'Search further' }).click();
  await expect(page.getByTestId('list-foot')).toContainText('130 found in all files');
  await expect(page.getByTestId('file-row')).toHaveCount(130);
  await expect(page.getByRole('button', { name: 'Search further' })).toHaveCount(0);
  await page.getByTestId('search').fill('nothing-like-this');
  await expect(page.getByText('No file name in any folder contains')).toBeVisible();
  await page.getByTestId('search').fill('');
  await expect(page.getByTestId('file-row')).toHaveText([/^blob-ideas\.txt/]);
});

test('Cancel all stops the queued and running transfers of a batch; the page uploads again after', async ({ page, server, dir }) => {
  const names = Array.from({ length: 60 }, (_, i) => `f${i}.bin`);
  for (const n of names) writeFileSync(path.join(dir, n), content(400_000));
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(names.map((n) => path.join(dir, n)));
  await expect(page.locator('[data-testid=transfer][data-status=running]').first()).toBeVisible();
  await page.getByRole('button', { name: 'Cancel all' }).click();
  await expect(page.locator('[data-testid=transfer][data-status=running], [data-testid=transfer][data-status=queued]')).toHaveCount(0, { timeout: 60_000 });
  await expect(page.getByRole('button', { name: 'Cancel all' })).toHaveCount(0);
  const line = await page.getByTestId('batch-line').textContent();
  const done = Number(/^(\d+) of 60/.exec(line ?? '')![1]);
  expect(done).toBeLessThan(60);
  await expect(page.getByTestId('batch-line')).toContainText(`${60 - done} failed`);
  // what was stopped is not stored; the page goes on working
  let stored = 0;
  for (const n of names) stored += (await server.latest(n)) ? 1 : 0;
  expect(stored).toBe(done);
  await page.getByRole('button', { name: 'Dismiss finished' }).click();
  writeFileSync(path.join(dir, 'after.txt'), content(5000));
  await page.getByTestId('file-input').setInputFiles(path.join(dir, 'after.txt'));
  expect((await result(page, 'after.txt')).version).toBe(1);
});

test('a card\'s bar shows the number its line reads, at every update', async ({ page, server, dir }) => {
  const names = Array.from({ length: 6 }, (_, i) => `tiny${i}.txt`);
  for (const n of names) writeFileSync(path.join(dir, n), `${n} holds 21 B.....`.slice(0, 21));
  await openPage(page, server.url);
  // at each change of a card's line, the bar's drawn width against the line's percentage
  await page.evaluate(() => {
    const w = window as unknown as { mismatches: string[]; seen: number };
    w.mismatches = [];
    w.seen = 0;
    new MutationObserver(() => {
      for (const c of document.querySelectorAll('[data-testid=transfer]')) {
        const text = c.querySelector('[data-testid=status-line]')?.textContent ?? '';
        const fill = c.querySelector('.progress .fill') as HTMLElement | null;
        const m = /^(\d+)%/.exec(text);
        if (!m || !fill) continue;
        w.seen++;
        const t = getComputedStyle(fill).transform;
        const drawn = t === 'none' ? 1 : Number(/matrix\(([^,]+)/.exec(t)?.[1] ?? 'NaN');
        if (Math.abs(100 * drawn - Number(m[1])) > 1.5) w.mismatches.push(`${text} drawn ${(100 * drawn).toFixed(1)}%`);
      }
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.getByTestId('file-input').setInputFiles(names.map((n) => path.join(dir, n)));
  for (const n of names) await result(page, n);
  const { mismatches, seen } = await page.evaluate(() => {
    const w = window as unknown as { mismatches: string[]; seen: number };
    return { mismatches: w.mismatches, seen: w.seen };
  });
  expect(seen).toBeGreaterThan(0);
  expect(mismatches).toEqual([]);
});

test('an unchanged file says "unchanged"; "Keep up to: Nothing" says it keeps nothing; a restore says what it came from', async ({ page, server, dir }) => {
  const file = path.join(dir, 'same.bin');
  writeFileSync(file, content(1_000_000));
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'same.bin')).version).toBe(1);
  await page.getByTestId('file-input').setInputFiles(file);
  await expect(card(page, 'same.bin')).toHaveAttribute('data-status', 'done');
  const summary = card(page, 'same.bin').getByTestId('result');
  await expect(summary).toContainText('Unchanged');
  await expect(summary).toContainText('version 1');
  await expect(summary).not.toContainText('saved');
  expect(await server.latest('same.bin')).toBe(1);

  await page.getByTestId('kept-max').selectOption('0');
  await expect(page.getByTestId('kept-settings')).toContainText('Set to keep nothing');
  await expect(page.getByTestId('kept-settings')).not.toContainText('Up to 0 B');

  writeFileSync(file, content(1_000_000));
  await page.getByTestId('file-input').setInputFiles(file);
  await expect(card(page, 'same.bin').getByTestId('result')).toHaveAttribute('data-version', '2');
  await fileRow(page, 'same.bin').getByRole('button', { expanded: false }).click();
  await page.getByRole('button', { name: 'Restore same.bin version 1' }).click();
  await page.getByTestId('dialog').getByRole('button', { name: 'Restore' }).click();
  const v3 = fileRow(page, 'same.bin').locator('[data-testid=version-row][data-version="3"]');
  await expect(v3).toContainText('restored from v1');
  await expect(fileRow(page, 'same.bin').locator('[data-testid=version-row][data-version="2"]')).not.toContainText('restored');
  // the row shows the latest version's number beside the count
  await expect(fileRow(page, 'same.bin')).toContainText('v3 (3 versions)');
});

test('sign-in: too many tries says how long to wait; a file dropped while signed out waits for the sign-in and then goes', async ({ page, dir }) => {
  const usersFile = path.join(dir, 'users.json');
  execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'adduser', 'ann', '--users', usersFile, '--password-stdin'], { input: 'quiet-meadow-7142\n' });
  // the tries below may take the name's backoff to its longest (30 s) on a loaded machine
  test.setTimeout(300_000);
  const guarded = await new TestServer(['--users', usersFile]).start();
  try {
    await page.goto(guarded.url);
    await expect(page.getByTestId('server-status')).toContainText('Sign-in required');
    const file = path.join(dir, 'early.txt');
    writeFileSync(file, content(3000));
    await page.getByTestId('file-input').setInputFiles(file);
    await expect(card(page, 'early.txt').getByTestId('status-line')).toHaveText(/^Sign in to upload · starts by itself once you are signed in$/);
    await expect(card(page, 'early.txt')).toHaveAttribute('data-status', 'queued');
    await expect(page.getByText('Your session has ended')).toHaveCount(0);

    await page.getByLabel('Name').fill('ann');
    let said = '';
    for (let i = 0; i < 10 && !/Too many/.test(said); i++) {
      await page.getByLabel('Password').fill(`wrong-${i}`);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect(page.getByRole('alert')).toBeVisible();
      said = (await page.getByRole('alert').textContent()) ?? '';
    }
    expect(said).toMatch(/Too many sign-in attempts\. Try again in \d+ seconds?\./);
    expect(said).not.toContain('HTTP');

    // signed in (once the wait is over, up to the longest backoff; a password check takes
    // seconds on a loaded machine): the file goes by itself
    await expect(async () => {
      await page.getByLabel('Password').fill('quiet-meadow-7142');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect(page.getByTestId('server-status')).toContainText('Signed in as ann', { timeout: 15_000 });
    }).toPass({ timeout: 180_000 });
    expect((await result(page, 'early.txt')).version).toBe(1);
  } finally {
    await guarded.stop();
  }
});

test('a reload during an upload: the page says what did not finish, and finishes one whose file handle it kept', async ({ page, server, dir }) => {
  const big = path.join(dir, 'big.bin');
  writeFileSync(big, content(60_000_000));
  page.on('dialog', (d) => void d.accept()); // "leave the page?" while a sync runs
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(big);
  await expect(card(page, 'big.bin')).toHaveAttribute('data-status', 'running');
  await page.reload();
  await expect(page.getByTestId('server-status')).toContainText('Connected');
  const notice = page.getByTestId('unfinished');
  await expect(notice).toContainText('1 upload did not finish when this page was last closed or reloaded');
  await expect(notice).toContainText('big.bin (60 MB)');
  await expect(notice).toContainText('Drop or choose them again');
  expect(await server.latest('big.bin')).toBe(0);

  // a handle kept for a dropped file (Chromium gives one; here a file of the page's own
  // storage, the same kind of handle): Finish uploads it after the reload
  const bytes = content(30_000);
  await page.evaluate(async (b64) => {
    const dir = await navigator.storage.getDirectory();
    const h = await dir.getFileHandle('kept-by-handle.txt', { create: true });
    const w = await h.createWritable();
    await w.write(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
    await w.close();
    const db = await new Promise<IDBDatabase>((ok) => (indexedDB.open('dsync-unfinished', 1).onsuccess = (e) => ok((e.target as IDBOpenDBRequest).result)));
    const store = db.transaction('uploads', 'readwrite').objectStore('uploads');
    const keys = await new Promise<IDBValidKey[]>((ok) => (store.getAllKeys().onsuccess = (e) => ok((e.target as IDBRequest<IDBValidKey[]>).result)));
    const scope = String(keys[0]).split('\n')[0];
    store.put({ name: 'kept-by-handle.txt', size: 30_000, at: Date.now(), handle: h }, `${scope}\nkept-by-handle.txt`);
    await new Promise((ok) => (store.transaction.oncomplete = ok));
  }, bytes.toString('base64'));
  await page.reload();
  await expect(notice).toContainText('2 uploads did not finish');
  await expect(notice).toContainText('This browser kept access to 1 of them');
  await notice.getByRole('button', { name: 'Finish it' }).click();
  expect((await result(page, 'kept-by-handle.txt')).version).toBe(1);
  expect((await server.storedBytes('kept-by-handle.txt', 1)).equals(bytes)).toBe(true);
  await expect(notice).toContainText('1 upload did not finish');
  await notice.getByRole('button', { name: 'Forget' }).click();
  await expect(notice).toHaveCount(0);
  await page.reload();
  await expect(page.getByTestId('server-status')).toContainText('Connected');
  await expect(page.getByTestId('file-row').first()).toBeVisible();
  await expect(notice).toHaveCount(0);
});
