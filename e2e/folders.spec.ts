// Folders on the page, headless Chromium against a real server: a folder downloads as one zip
// (every file by its path in the folder, empty folders too, the bytes exact), and a folder is
// deleted after a confirmation, leaving the listing.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { content } from './data.ts';
import { expect, openPage, result, test } from './fixtures.ts';

test('a folder downloads as a zip of its files and empty folders, and is deleted after a confirmation', async ({ page, server, dir }) => {
  const proj = path.join(dir, 'proj');
  mkdirSync(path.join(proj, 'docs'), { recursive: true });
  const files: Record<string, Buffer> = { 'a.bin': content(700_000), 'docs/b.txt': content(20_000) };
  for (const [n, b] of Object.entries(files)) writeFileSync(path.join(proj, n), b);
  await openPage(page, server.url);
  await page.getByTestId('folder-input').setInputFiles(proj);
  for (const n of Object.keys(files)) await result(page, `proj/${n}`);
  // an empty folder made on purpose (the sync engine's POST /api/folders)
  expect((await page.request.post(`${server.url}/api/folders`, { data: { name: 'proj/empty/' } })).status()).toBe(200);
  await page.getByTestId('file-input').setInputFiles(path.join(proj, 'a.bin')); // a top-level file stays
  await result(page, 'a.bin');

  const row = page.locator('[data-testid=folder-row][data-name="proj/"]');
  const [download] = await Promise.all([page.waitForEvent('download'), row.getByTestId('folder-zip').click()]);
  expect(download.suggestedFilename()).toBe('proj.zip');
  const zip = path.join(dir, 'proj.zip');
  await download.saveAs(zip);
  const listed = execFileSync('unzip', ['-Z1', zip], { encoding: 'utf8' }).trim().split('\n').sort();
  expect(listed).toEqual(['a.bin', 'docs/', 'docs/b.txt', 'empty/']);
  const out = path.join(dir, 'unzipped');
  execFileSync('unzip', ['-q', zip, '-d', out]);
  for (const [n, b] of Object.entries(files)) expect(readFileSync(path.join(out, n)).equals(b)).toBe(true);

  await row.getByTestId('folder-delete').click();
  await expect(page.getByTestId('dialog')).toContainText('Every file in proj/, with all of its versions, is deleted');
  await page.getByTestId('dialog').getByRole('button', { name: 'Delete' }).click();
  await expect(row).toHaveCount(0);
  for (const n of Object.keys(files)) expect(await server.latest(`proj/${n}`)).toBe(0);
  expect(await server.latest('a.bin')).toBe(1);
  const listing = await (await page.request.get(`${server.url}/api/files?recursive=1`)).json();
  expect(listing).toEqual({ files: [expect.objectContaining({ name: 'a.bin' })], folders: [], next: null, complete: true, held: [], cursor: expect.any(String), digest: expect.stringMatching(/^[0-9a-f]{64}$/) });
});

test('a folder in the trash comes back in one click, every file at its old path with its history', async ({ page, server, dir }) => {
  const proj = path.join(dir, 'proj');
  mkdirSync(path.join(proj, 'docs'), { recursive: true });
  const files: Record<string, Buffer> = { 'a.bin': content(300_000), 'docs/b.txt': content(20_000) };
  for (const [n, b] of Object.entries(files)) writeFileSync(path.join(proj, n), b);
  await openPage(page, server.url);
  await page.getByTestId('folder-input').setInputFiles(proj);
  for (const n of Object.keys(files)) await result(page, `proj/${n}`);
  // a pass of `dsync sync` deletes the folder's files on the server: each into one trash stamp
  const stamp = '.dsync-trash/2026-11-29 101500';
  for (const n of Object.keys(files)) {
    const moved = await page.request.post(`${server.url}/api/files/move`, { data: { from: `proj/${n}`, to: `${stamp}/proj/${n}`, version: 1 } });
    expect(moved.status()).toBe(200);
  }
  await expect(page.locator('[data-testid=folder-row][data-name="proj/"]')).toHaveCount(0);
  await page.locator('[data-testid=folder-row][data-name=".dsync-trash/"]').getByRole('button', { name: 'Open folder .dsync-trash' }).click();
  const row = page.locator(`[data-testid=folder-row][data-name="${stamp}/"]`);
  // the restore's answer comes once every file is moved (each copied to its name, then taken out
  // of the trash): a file's name showing up alone does not say its trash entry is gone yet
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/api/files/restore') && r.request().method() === 'POST'),
    row.getByTestId('folder-restore').click(),
  ]);
  expect(answer.status()).toBe(200);
  const body = await answer.json();
  expect([...body.restored].sort()).toEqual(Object.keys(files).map((n) => `proj/${n}`).sort());
  expect(body.skipped).toEqual([]);
  for (const n of Object.keys(files)) expect(await server.latest(`proj/${n}`)).toBeGreaterThan(0);
  // the bytes and the history came back with the name; the trash holds nothing of it
  for (const [n, b] of Object.entries(files)) {
    const got = await page.request.get(`${server.url}/api/download?name=${encodeURIComponent(`proj/${n}`)}`);
    expect(Buffer.from(await got.body()).equals(b)).toBe(true);
  }
  const left = await (await page.request.get(`${server.url}/api/files?recursive=1&prefix=${encodeURIComponent('.dsync-trash/')}`)).json();
  expect(left.files).toEqual([]);
});
