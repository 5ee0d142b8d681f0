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
  expect(listing).toEqual({ files: [expect.objectContaining({ name: 'a.bin' })], folders: [], next: null });
});
