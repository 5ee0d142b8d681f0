// Two devices on one server (two browser contexts: separate cookies, storage and workers):
// what one does shows on the other by itself (the server's live events); folders, search, sort and restore; and a
// server that stops and starts again, with both pages reconnecting and finishing by themselves.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Browser, Page } from '@playwright/test';
import { pushBytes } from '../harness/helpers.ts';
import { content, insertAt } from './data.ts';
import { card, expect, openPage, result, test } from './fixtures.ts';

/** How long a page is given to show what another did. The page lists again only when told
 *  (a live event, or its stream opening again), never on a timer: whatever shows came by the
 *  live path, so the bound only turns a missed event into a failure, generous for a loaded
 *  machine (it takes well under a second on an idle one). */
const LIVE_MS = 30_000;
/** The page's look at a server it lost (use-server.ts: sooner at first, then every 5 s), and
 *  its watchdog of a silent stream (STALE_MS, 8 s): what a loaded machine may add to either. */
const SLACK_MS = 30_000;

async function twoDevices(browser: Browser, url: string): Promise<[Page, Page]> {
  const pages = await Promise.all([1, 2].map(async () => (await browser.newContext()).newPage()));
  for (const p of pages) await openPage(p, url);
  return pages as [Page, Page];
}

const fileRow = (page: Page, name: string) => page.locator(`[data-testid=file-row][data-name="${name}"]`);
const folderRow = (page: Page, path: string) => page.locator(`[data-testid=folder-row][data-name="${path}"]`);

test('two devices: a push, a rename and a delete on one show on the other by themselves', async ({ browser, server, dir }) => {
  const [a, b] = await twoDevices(browser, server.url);
  mkdirSync(path.join(dir, 'notes'));
  writeFileSync(path.join(dir, 'notes/today.txt'), content(50_000));

  await a.getByTestId('folder-input').setInputFiles(path.join(dir, 'notes'));
  await result(a, 'notes/today.txt');
  await expect(folderRow(b, 'notes/')).toBeVisible({ timeout: LIVE_MS });
  // said to screen readers on B (where it came from elsewhere), not on A
  await expect(b.locator('p[role=status]')).toHaveText('notes/today.txt version 1 arrived from another device.');
  await expect(a.locator('p[role=status]')).toHaveText(/notes\/today\.txt synced as version 1/);
  await b.getByRole('button', { name: 'Open folder notes' }).click();
  await expect(fileRow(b, 'notes/today.txt')).toBeVisible();

  // a rename on A
  await a.getByRole('button', { name: 'Open folder notes' }).click();
  await fileRow(a, 'notes/today.txt').getByRole('button', { expanded: false }).click();
  await a.getByRole('button', { name: 'Rename or move notes/today.txt' }).click();
  await a.getByTestId('dialog').getByRole('textbox').fill('notes/tomorrow.txt');
  await a.getByTestId('dialog').getByRole('button', { name: 'Rename' }).click();
  await expect(fileRow(a, 'notes/tomorrow.txt')).toBeVisible();
  await expect(fileRow(b, 'notes/tomorrow.txt')).toBeVisible({ timeout: LIVE_MS });
  await expect(fileRow(b, 'notes/today.txt')).toHaveCount(0);
  expect(await server.latest('notes/tomorrow.txt')).toBe(1);

  // a delete on A, confirmed
  await fileRow(a, 'notes/tomorrow.txt').getByRole('button', { expanded: false }).click();
  await a.getByRole('button', { name: 'Delete notes/tomorrow.txt' }).click();
  await expect(a.getByTestId('dialog')).toContainText('cannot be undone');
  await a.getByTestId('dialog').getByRole('button', { name: 'Delete' }).click();
  await expect(fileRow(a, 'notes/tomorrow.txt')).toHaveCount(0);
  await expect(fileRow(b, 'notes/tomorrow.txt')).toHaveCount(0, { timeout: LIVE_MS });
  await expect(b.getByText('This folder is empty now.')).toBeVisible();
  expect(await server.latest('notes/tomorrow.txt')).toBe(0);
});

test('folders, search, sort, and a version history whose Restore makes an old version the latest', async ({ page, server, dir }) => {
  const root = path.join(dir, 'work');
  const files: Record<string, Buffer> = {
    'plan.txt': content(20_000),
    'budget.xls': content(300_000),
    'photos/beach.jpg': content(120_000),
    'photos/2025/snow.jpg': content(90_000),
  };
  for (const [n, bytes] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, n)), { recursive: true });
    writeFileSync(path.join(root, n), bytes);
  }
  await openPage(page, server.url);
  await page.getByTestId('folder-input').setInputFiles(root);
  for (const n of Object.keys(files)) await result(page, `work/${n}`);

  await page.getByRole('button', { name: 'Open folder work' }).click();
  await expect(page.getByTestId('folder-row')).toHaveText([/^photos/]);
  await expect(page.getByTestId('file-row')).toHaveText([/^budget\.xls/, /^plan\.txt/]);
  await page.getByTestId('sort').selectOption('size');
  await expect(page.getByTestId('file-row')).toHaveText([/^budget\.xls/, /^plan\.txt/]);
  await page.getByTestId('sort').selectOption('name');
  await page.getByTestId('search').fill('PLA');
  await expect(page.getByTestId('file-row')).toHaveText([/^plan\.txt/]);
  await expect(page.getByTestId('folder-row')).toHaveCount(0);
  await page.getByTestId('search').fill('zzz');
  await expect(page.getByText('No file name in any folder contains')).toBeVisible();
  await page.getByTestId('search').fill('');
  await page.getByRole('button', { name: 'Open folder photos' }).click();
  await page.getByRole('button', { name: 'Open folder 2025' }).click();
  await expect(page.getByTestId('file-row')).toHaveText([/^snow\.jpg/]);
  await page.getByTestId('breadcrumbs').getByRole('button', { name: 'work' }).click();

  // two versions of plan.txt at the top, then version 1 restored as version 3
  const file = path.join(dir, 'plan.txt');
  writeFileSync(file, files['plan.txt']);
  await page.getByTestId('file-input').setInputFiles(file);
  await result(page, 'plan.txt');
  writeFileSync(file, insertAt(files['plan.txt'], 100, 'a second thought'));
  await page.getByTestId('file-input').setInputFiles(file);
  await expect(card(page, 'plan.txt')).toHaveAttribute('data-status', 'done');
  expect((await result(page, 'plan.txt')).version).toBe(2);
  await page.getByRole('button', { name: 'All files' }).click();
  const history = async (name: string) => {
    await fileRow(page, name).getByRole('button', { expanded: false }).click();
    return fileRow(page, name).getByTestId('version-row');
  };
  const versions = await history('plan.txt');
  await expect(versions).toHaveCount(2);
  await page.getByRole('button', { name: 'Restore plan.txt version 1' }).click();
  await page.getByTestId('dialog').getByRole('button', { name: 'Restore' }).click();
  await expect(versions).toHaveCount(3);
  await expect(versions.first()).toContainText('v3');
  await expect(versions.first()).toContainText('latest');
  expect(await server.latest('plan.txt')).toBe(3);
  expect((await server.storedBytes('plan.txt', 3)).equals(files['plan.txt'])).toBe(true);
});

test('the server stops and starts again: both pages say so, reconnect, and finish a queued upload without a click', async ({ browser, server, dir }) => {
  const [a, b] = await twoDevices(browser, server.url);
  await server.kill();
  for (const p of [a, b]) await expect(p.getByTestId('server-status')).toContainText('Server unreachable', { timeout: SLACK_MS });

  const file = path.join(dir, 'while-away.txt');
  writeFileSync(file, content(200_000));
  await a.getByTestId('file-input').setInputFiles(file);
  await expect(card(a, 'while-away.txt')).toHaveAttribute('data-status', 'queued');
  await expect(card(a, 'while-away.txt').getByTestId('status-line')).toContainText('Waiting for the server');
  await a.waitForTimeout(2000); // still waiting: nothing fails while the server is away
  await expect(card(a, 'while-away.txt')).toHaveAttribute('data-status', 'queued');

  await server.start();
  for (const p of [a, b]) await expect(p.getByTestId('server-status')).toContainText('Connected', { timeout: 5000 + SLACK_MS });
  expect((await result(a, 'while-away.txt')).version).toBe(1);
  await expect(fileRow(b, 'while-away.txt')).toBeVisible({ timeout: LIVE_MS });
  expect((await server.storedBytes('while-away.txt', 1)).length).toBe(200_000);
});

test('a server that falls silent (frozen, its sockets open) is shown unreachable within the heartbeat, and connected again when it answers', async ({ page, server }) => {
  await openPage(page, server.url);
  server.freeze();
  try {
    // pings every 3 s; a stream silent for 8 s is dead
    await expect(page.getByTestId('server-status')).toContainText('Server unreachable', { timeout: 8000 + SLACK_MS });
  } finally {
    server.freeze(false);
  }
  await expect(page.getByTestId('server-status')).toContainText('Connected', { timeout: 5000 + SLACK_MS });
});

test('a folder of 250 files: 100 rows at a time, sorted and searched over all of them, and a stream of commits read in a few requests', async ({ page, server }) => {
  await openPage(page, server.url);
  const reads: string[] = [];
  page.on('request', (r) => r.url().includes('/api/files') && r.method() === 'GET' && reads.push(r.url()));
  const target = { wsUrl: `${server.url.replace('http', 'ws')}/sync` };
  const t0 = Date.now();
  for (let i = 1; i <= 250; i++) await pushBytes(target, `many/file-${String(i).padStart(3, '0')}.txt`, new Uint8Array(i * 10).fill(i));
  const seconds = (Date.now() - t0) / 1000;
  await page.getByRole('button', { name: 'Open folder many' }).click();
  const foot = page.getByTestId('list-foot');
  await expect(foot).toContainText('Showing 100 of 250');
  await expect(page.getByTestId('file-row')).toHaveCount(100);
  await page.getByRole('button', { name: 'Show 100 more' }).click();
  await expect(page.getByTestId('file-row')).toHaveCount(200);
  await page.getByRole('button', { name: 'Show 50 more' }).click();
  await expect(page.getByTestId('file-row')).toHaveCount(250);
  await expect(foot).toHaveText('250 items');
  // sorted over all 250, not just the rows shown
  await page.getByTestId('sort').selectOption('size');
  await expect(page.getByTestId('file-row').first()).toHaveAttribute('data-name', 'many/file-250.txt');
  await page.getByTestId('search').fill('file-24');
  await expect(page.getByTestId('file-row')).toHaveCount(10);
  // 250 commits in `seconds` s: read at most every 300 ms, not 250 times
  console.log(`250 commits in ${seconds.toFixed(1)} s; the page read the list ${reads.length} times meanwhile and after`);
  expect(reads.length).toBeLessThanOrEqual(Math.ceil(seconds / 0.3) + 4);
});
