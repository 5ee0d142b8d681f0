// The screenshots in docs/ (run by `npm run screenshots`, e2e/screenshots.config.ts): a desktop
// and a phone each sync a folder (caught mid-batch), then show the file browser and a file's
// version history.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type Page, devices } from '@playwright/test';
import { content, insertAt, writePseudoRandomFile } from './data.ts';
import { expect, openPage, root, screenshotWholePage, test } from './fixtures.ts';

const docs = (name: string) => path.join(root, 'docs', name);

/** A project folder: small documents, and `big` files of `bigSize` bytes that take a moment. */
async function project(dir: string, seed: number, big: number, bigSize: number) {
  const folder = path.join(dir, 'Holiday 2026');
  const small: Record<string, number> = { 'itinerary.pdf': 240_000, 'budget.xlsx': 48_000, 'notes/packing.md': 3_200, 'notes/contacts.txt': 1_900, 'tickets/train.pdf': 130_000 };
  for (const [n, size] of Object.entries(small)) {
    mkdirSync(path.dirname(path.join(folder, n)), { recursive: true });
    writeFileSync(path.join(folder, n), content(size));
  }
  mkdirSync(path.join(folder, 'photos'), { recursive: true });
  for (let i = 1; i <= big; i++) await writePseudoRandomFile(path.join(folder, `photos/IMG_${String(4000 + i)}.jpg`), bigSize + i * 37_000, seed + i);
  return folder;
}

/** Syncs the folder, and photographs the batch once a few files are done and more run. */
async function batch(page: Page, folder: string, shot: string) {
  await page.getByTestId('folder-input').setInputFiles(folder);
  const line = page.getByTestId('batch-line');
  await expect(line).toHaveText(/^([3-9]|1\d) of /, { timeout: 120_000 });
  await page.getByTestId('batch').scrollIntoViewIfNeeded();
  await page.screenshot({ path: shot });
  await expect(line).toHaveText(/^(\d+) of \1 /, { timeout: 300_000 });
}

/** Three versions of report.docx, the last one a small edit. */
async function versions(page: Page, dir: string) {
  const file = path.join(dir, 'report.docx');
  let bytes = content(1_800_000);
  for (const edit of ['', 'a new paragraph', 'a corrected figure']) {
    if (edit) bytes = insertAt(bytes, 600_000, edit);
    writeFileSync(file, bytes);
    await page.getByTestId('file-input').setInputFiles(file);
    await expect(page.locator('[data-testid=transfer][data-name="report.docx"][data-status=done]')).toHaveCount(edit === '' ? 1 : edit === 'a new paragraph' ? 2 : 3, { timeout: 60_000 });
  }
}

test('desktop: batch, file browser, version history', async ({ page, server, dir }) => {
  await openPage(page, server.url);
  await batch(page, await project(dir, 1, 16, 6_000_000), docs('screenshot-batch.png'));
  await versions(page, dir);
  await page.getByRole('button', { name: 'Open folder Holiday 2026' }).click();
  await expect(page.getByTestId('folder-row')).toHaveCount(3);
  await page.mouse.move(0, 0);
  await screenshotWholePage(page, docs('screenshot-desktop.png'));
  await page.getByRole('button', { name: 'All files' }).click();
  const row = page.locator('[data-testid=file-row][data-name="report.docx"]');
  await row.getByRole('button', { expanded: false }).click();
  await expect(row.getByTestId('version-row')).toHaveCount(3);
  await row.scrollIntoViewIfNeeded();
  await page.screenshot({ path: docs('screenshot-history.png') });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.getByRole('button', { name: 'Restore report.docx version 1' }).click();
  await page.screenshot({ path: docs('screenshot-dark.png') });
});

const { defaultBrowserType: _, ...pixel } = devices['Pixel 7'];
test.describe('phone', () => {
  test.use({ ...pixel, viewport: { width: 390, height: 844 }, screen: { width: 390, height: 844 } });
  test('phone: batch, file browser, version history', async ({ page, server, dir }) => {
    await openPage(page, server.url);
    await batch(page, await project(dir, 100, 12, 5_000_000), docs('screenshot-batch-phone.png'));
    await versions(page, dir);
    await page.getByRole('button', { name: 'Dismiss finished' }).tap();
    await page.getByRole('button', { name: 'Open folder Holiday 2026' }).tap();
    await page.locator('#files-title').evaluate((el) => el.scrollIntoView({ block: 'start' }));
    await page.screenshot({ path: docs('screenshot-phone.png') });
    await page.getByRole('button', { name: 'All files' }).click();
    const row = page.locator('[data-testid=file-row][data-name="report.docx"]');
    await row.getByRole('button', { expanded: false }).tap();
    await expect(row.getByTestId('version-row')).toHaveCount(3);
    await row.scrollIntoViewIfNeeded();
    await page.screenshot({ path: docs('screenshot-history-phone.png') });
  });
});
