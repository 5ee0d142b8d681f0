// The page's folder sync (client/src/folder-sync.ts) in headless Chromium against a real server,
// with the real CLI's `dsync sync` as the other device. Playwright cannot drive the native
// folder picker, so the test's picker hands the page a folder of its own storage (OPFS: the same
// kind of FileSystemDirectoryHandle); everything after the pick is the page's own code.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect, openPage, root, test } from './fixtures.ts';
import { put, stubPicker, tree } from './picked-folder.ts';

function cliTree(dir: string, rel = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    if (e.isDirectory()) Object.assign(out, cliTree(dir, rel + e.name + '/'));
    else out[rel + e.name] = readFileSync(path.join(dir, rel, e.name), 'utf8');
  }
  return out;
}

test('a picked folder and `dsync sync` on another device: edits both ways, a conflict copy on both, deletes', async ({ page, server, dir }) => {
  const laptop = path.join(dir, 'laptop', 'proj');
  mkdirSync(path.join(laptop, 'docs'), { recursive: true });
  const cli = () => execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'sync', laptop, '--server', `${server.url.replace('http', 'ws')}/sync`, '--device', 'laptop'], { env: { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'cli-cache') } });
  const local = (p: string, text: string | null) => (text === null ? rmSync(path.join(laptop, p)) : writeFileSync(path.join(laptop, p), text));
  const onServer = async (p: string) => {
    const v = await server.latest(`proj/${p}`);
    return v ? (await server.storedBytes(`proj/${p}`, v)).toString() : null;
  };

  // the laptop has two files; the page's folder one of its own
  local('a.txt', 'a from the laptop');
  local('docs/b.txt', 'b from the laptop');
  cli();
  await stubPicker(page);
  await openPage(page, server.url);
  await put(page, 'c.txt', 'c from the page');

  const panel = page.getByTestId('folder-sync');
  await panel.getByTestId('folder-sync-pick').click();
  await expect(panel.getByTestId('folder-sync-folder')).toHaveAttribute('data-folder', 'proj');
  await expect.poll(() => tree(page)).toEqual({ 'a.txt': 'a from the laptop', 'docs/b.txt': 'b from the laptop', 'c.txt': 'c from the page' });
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'in-sync');
  expect(await onServer('c.txt')).toBe('c from the page');
  await expect(panel).toContainText('changes found as they happen');

  // an edit in the page's folder goes up (found by the observer or the poll); the laptop gets it
  await put(page, 'a.txt', 'a edited in the page');
  await expect.poll(() => onServer('a.txt')).toBe('a edited in the page');
  cli();
  expect(readFileSync(path.join(laptop, 'a.txt'), 'utf8')).toBe('a edited in the page');

  // an edit on the laptop comes down to the page (the server's live event starts a pass)
  local('c.txt', 'c edited on the laptop');
  cli();
  await expect.poll(async () => (await tree(page))['c.txt']).toBe('c edited on the laptop');

  // both edit docs/b.txt while the page is closed: the laptop's lands first; the page, back
  // (its folder remembered, the permission kept), keeps the server's version at the name and
  // puts its own beside it as a conflict copy, which the laptop then gets too
  await page.goto(`${server.url}/api/health`); // the same origin, without the app
  await put(page, 'docs/b.txt', 'b edited in the page');
  local('docs/b.txt', 'b edited on the laptop');
  cli();
  await openPage(page, server.url);
  await expect(panel.getByTestId('folder-sync-conflicts')).toContainText('docs/b (conflict from Chrome on Linux');
  const copy = (await panel.getByTestId('folder-sync-conflicts').locator('li').first().textContent())!;
  expect(copy).toMatch(/^docs\/b \(conflict from Chrome on Linux \d{4}-\d{2}-\d{2} \d{4}\)\.txt$/);
  await expect.poll(async () => (await tree(page))['docs/b.txt']).toBe('b edited on the laptop');
  expect((await tree(page))[copy]).toBe('b edited in the page');
  expect(await onServer(copy)).toBe('b edited in the page');
  cli();
  expect(readFileSync(path.join(laptop, 'docs/b.txt'), 'utf8')).toBe('b edited on the laptop');
  expect(readFileSync(path.join(laptop, copy), 'utf8')).toBe('b edited in the page');

  // a delete on either side deletes on the other (into the server's trash)
  await put(page, 'c.txt', null);
  await expect.poll(() => onServer('c.txt')).toBeNull();
  local('a.txt', null);
  cli();
  expect(existsSync(path.join(laptop, 'c.txt'))).toBe(false);
  await expect.poll(async () => Object.keys(await tree(page)).sort()).toEqual(['docs/b.txt', copy].sort());
  expect(cliTree(laptop)).toEqual(await tree(page));
  await expect(panel.getByTestId('folder-sync-recent')).toContainText('✕ a.txt (here)');
});

test('without the File System Access API the option says why', async ({ page, server }) => {
  await page.addInitScript(() => {
    for (const o of [window, Window.prototype]) delete (o as unknown as { showDirectoryPicker?: unknown }).showDirectoryPicker;
  });
  await openPage(page, server.url);
  await expect(page.getByTestId('folder-sync-pick')).toBeDisabled();
  await expect(page.getByTestId('folder-sync-unsupported')).toContainText('This browser cannot keep a folder in sync: it has no File System Access API; use Chrome or Edge on a computer, or dsync sync.');
});

test('the delete guard stops a pass that would delete most of the folder, until allowed once', async ({ page, server, dir }) => {
  const laptop = path.join(dir, 'laptop', 'proj');
  mkdirSync(laptop, { recursive: true });
  const cli = (...flags: string[]) => execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'sync', laptop, '--server', `${server.url.replace('http', 'ws')}/sync`, '--device', 'laptop', ...flags], { env: { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'cli-cache') } });
  const names = Array.from({ length: 12 }, (_, i) => `f${i}.txt`);
  for (const n of names) writeFileSync(path.join(laptop, n), `file ${n}`);
  cli();
  await stubPicker(page);
  await openPage(page, server.url);
  const panel = page.getByTestId('folder-sync');
  await panel.getByTestId('folder-sync-pick').click();
  await expect.poll(async () => Object.keys(await tree(page)).length).toBe(12);
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'in-sync');

  // while the page is closed, the laptop deletes 11 of the 12 (its own guard allowed with
  // --max-delete); the guard counts per pass, so an open page would see them as they come
  await page.goto(`${server.url}/api/health`);
  for (const n of names.slice(1)) rmSync(path.join(laptop, n));
  cli('--max-delete', '100%');
  await openPage(page, server.url);
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'guard');
  await expect(panel.getByTestId('folder-sync-guard')).toContainText('This pass would delete 11 of 12 files');
  // polls go on, and delete nothing
  await page.waitForTimeout(3000);
  expect(Object.keys(await tree(page)).length).toBe(12);
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'guard');

  await panel.getByTestId('folder-sync-allow').click();
  await expect.poll(async () => Object.keys(await tree(page))).toEqual(['f0.txt']);
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'in-sync');
});

test('a second tab syncing the same folder waits until the first one closes', async ({ page, context, server }) => {
  await stubPicker(page);
  await openPage(page, server.url);
  await put(page, 'one.txt', 'from the first tab');
  await page.getByTestId('folder-sync-pick').click();
  await expect.poll(() => server.latest('proj/one.txt')).toBe(1);

  // the second tab resumes the remembered folder on its own, and waits for the first
  const second = await context.newPage();
  await openPage(second, server.url);
  await expect(second.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'waiting');
  // the first tab closes: the second takes over, and syncs what changes from then on
  await page.close();
  await expect(second.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'in-sync');
  await put(second, 'two.txt', 'after the first tab closed');
  await expect.poll(() => server.latest('proj/two.txt')).toBe(1);
  expect((await server.storedBytes('proj/two.txt', 1)).toString()).toBe('after the first tab closed');
});
