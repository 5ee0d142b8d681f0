// The page's upload never puts an older copy over a newer version pushed by another device
// (shared/src/sync/guarded-push.ts): headless Chromium against a real server, the real CLI as the
// other device. Unchanged since the version the page knew: nothing is sent. Edited: the bytes
// go up as a conflict copy beside the CLI's version, which keeps the name.
import { execFileSync } from 'node:child_process';
import { mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { content } from './data.ts';
import { card, expect, openPage, result, root, test } from './fixtures.ts';

test('an upload from a page whose copy is older than the server makes a conflict copy, never a new version', async ({ page, server, dir }) => {
  const file = path.join(dir, 'notes.txt');
  const v1 = content(300_000);
  writeFileSync(file, v1);
  // the upload sends the file's modification time (File.lastModified), kept with the version
  const modified = Date.UTC(2001, 1, 3, 4, 5, 6, 789);
  utimesSync(file, new Date(modified), new Date(modified));
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'notes.txt')).version).toBe(1);
  const [first] = await (await fetch(`${server.url}/api/versions?name=notes.txt`)).json();
  expect(first.modified).toBe(modified);

  // another device (the CLI) pushes version 2
  const other = path.join(dir, 'other', 'notes.txt');
  mkdirSync(path.dirname(other), { recursive: true });
  const v2 = Buffer.concat([v1, Buffer.from('an edit on the laptop\n')]);
  writeFileSync(other, v2);
  execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', other, '--server', `${server.url.replace('http', 'ws')}/sync`, '--force'], { env: { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'cli-cache') } });
  expect(await server.latest('notes.txt')).toBe(2);

  // the page's file, unchanged since version 1: nothing is sent, and the card says why
  await page.getByTestId('file-input').setInputFiles(file);
  const behind = card(page, 'notes.txt');
  await expect(behind).toHaveAttribute('data-status', 'done');
  await expect(behind.getByTestId('guard')).toHaveAttribute('data-kind', 'behind');
  await expect(behind.getByTestId('guard')).toContainText('Nothing sent: the server has version 2 from dsync on');
  expect(await server.latest('notes.txt')).toBe(2);

  // edited on the page: a conflict copy beside version 2, which keeps the name
  const mine = Buffer.concat([Buffer.from('an edit in the browser\n'), v1]);
  writeFileSync(file, mine);
  await page.getByTestId('file-input').setInputFiles(file);
  const c = card(page, 'notes.txt');
  await expect(c.getByTestId('guard')).toHaveAttribute('data-kind', 'conflict');
  const savedAs = (await c.getByTestId('guard').getAttribute('data-saved-as'))!;
  expect(savedAs).toMatch(/^notes \(conflict from .+ \d{4}-\d{2}-\d{2} \d{4}\)\.txt$/);
  await expect(c.getByTestId('guard')).toContainText(`Conflict: the server has version 2 from dsync on`);
  await expect(c.getByTestId('guard')).toContainText(`saved beside it as “${savedAs}”`);
  expect(await server.latest('notes.txt')).toBe(2);
  expect((await server.storedBytes('notes.txt', 2)).equals(v2)).toBe(true);
  expect((await server.storedBytes(savedAs, 1)).equals(mine)).toBe(true);
  await expect(page.getByTestId('files').getByText(savedAs)).toBeVisible();
});
