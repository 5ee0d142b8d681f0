// The page's folder sync where the browser has the File System Access API but no
// FileSystemObserver (Chromium before 129; other browsers as they gain the API): the folder is
// polled. This Chromium has the observer, so it is started with the Blink feature turned off.
import { expect, openPage, test } from './fixtures.ts';
import { put, stubPicker } from './picked-folder.ts';
import { CHROMIUM_ARGS } from './playwright.config.ts';

test.use({ launchOptions: { executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: [...CHROMIUM_ARGS, '--disable-blink-features=FileSystemObserver'] } });

test('the folder is polled: changes go up', async ({ page, server }) => {
  await stubPicker(page);
  await openPage(page, server.url);
  await put(page, 'one.txt', 'one from the page');
  const panel = page.getByTestId('folder-sync');
  await panel.getByTestId('folder-sync-pick').click();
  await expect.poll(() => server.latest('proj/one.txt')).toBe(1);
  await expect(panel.getByTestId('folder-sync-state')).toHaveAttribute('data-state', 'in-sync');
  expect(await page.evaluate(() => typeof (self as { FileSystemObserver?: unknown }).FileSystemObserver)).toBe('undefined');
  await expect(panel).toContainText('changes found by looking every few seconds');
  // a later save is found by the poll alone (nothing else tells this browser: any bound shows
  // it, so a generous one for a loaded machine)
  await put(page, 'one.txt', 'one edited in the page');
  await expect.poll(() => server.latest('proj/one.txt'), { timeout: 60_000 }).toBe(2);
  expect((await server.storedBytes('proj/one.txt', 2)).toString()).toBe('one edited in the page');
  await put(page, 'two.txt', 'two');
  await expect.poll(() => server.latest('proj/two.txt'), { timeout: 60_000 }).toBe(1);
});
