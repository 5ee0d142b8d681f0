// The page on a phone: a current Android profile (touch, mobile viewport 390 px wide), the CPU
// throttled 4× through the DevTools protocol, opened by a LAN name over plain http (no secure
// context, no crypto.subtle), files picked with the button (phones have no drag-and-drop), then
// the layout and the file browser's controls checked at 390 and 360 px.
import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { devices } from '@playwright/test';
import { content, insertAt } from './data.ts';
import { card, expect, openPage, result, test } from './fixtures.ts';
import { WorkerTarget } from './metrics.ts';
import { CHROMIUM_ARGS } from './playwright.config.ts';

// the computer's mDNS name, which the server answers to (server/src/http/guard.ts HostCheck)
const LAN_NAME = `${hostname().toLowerCase()}.local`;

const { defaultBrowserType: _, ...pixel } = devices['Pixel 7'];
test.use({
  ...pixel,
  viewport: { width: 390, height: 844 },
  screen: { width: 390, height: 844 },
  // A phone opens the page by the computer's LAN name over plain http: not a secure context, so
  // no crypto.subtle. Here that name leads to the loopback server.
  launchOptions: { executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: [...CHROMIUM_ARGS, `--host-resolver-rules=MAP ${LAN_NAME} 127.0.0.1`] },
});

test('phone: plain http by a LAN name (no crypto.subtle), CPU throttled 4×, file picked with the button, sync and a delta re-sync complete', async ({ page, browser, server, dir }) => {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Emulation.setCPUThrottlingRate', { rate: 4 });
  const v1 = content(3_000_000);
  const v2 = insertAt(v1, 100, 'edited on the phone');
  const file = path.join(dir, 'photo.jpg');
  writeFileSync(file, v1);
  await openPage(page, server.url.replace('127.0.0.1', LAN_NAME));
  expect(await page.evaluate(() => ({ secure: isSecureContext, subtle: typeof crypto.subtle }))).toEqual({ secure: false, subtle: 'undefined' });
  // The page's throttling covers its main thread. Ask the sync worker too; Chromium answers
  // whether it can (at the time of writing: "only supported for pages, not workers").
  const worker = await WorkerTarget.attach(await browser.newBrowserCDPSession(), '/assets/worker');
  const workerThrottle = await worker.call('Emulation.setCPUThrottlingRate', { rate: 4 }).then(
    () => 'worker throttled 4× too',
    (e: Error) => `worker not throttled: ${e.message}`,
  );
  await expect(page.getByRole('heading', { name: 'Choose files to sync' })).toBeVisible(); // no "drop" on a touch screen

  const pick = async () => {
    const chooser = page.waitForEvent('filechooser');
    await page.getByText('Choose files', { exact: true }).tap();
    const t0 = Date.now();
    await (await chooser).setFiles(file);
    return t0;
  };
  let t0 = await pick();
  const first = await result(page, 'photo.jpg');
  const firstMs = Date.now() - t0;
  writeFileSync(file, v2);
  t0 = await pick();
  const second = await result(page, 'photo.jpg');
  const secondMs = Date.now() - t0;
  console.log(`phone (Pixel 7 profile, main thread 4× slower; ${workerThrottle}): first sync of 3 MB in ${firstMs} ms (${first.sent} B sent), edited re-sync in ${secondMs} ms (${second.sent} B sent)`);
  expect(second.version).toBe(2);
  // nothing can be kept without crypto.subtle, and the kept panel says why (no service worker
  // either: plain http is no secure context)
  await expect(page.getByTestId('kept-why')).toContainText('only on https');
  expect(await page.evaluate(() => 'serviceWorker' in navigator && navigator.serviceWorker.controller !== null)).toBe(false);
  expect((await server.storedBytes('photo.jpg', 2)).equals(v2)).toBe(true);

  // the file browser's controls are there and big enough to tap: search, sort, and in the open
  // version history Restore and Delete
  await page.getByTestId('file-row').getByRole('button', { expanded: false }).tap();
  await expect(page.getByTestId('version-row')).toHaveCount(2);
  const controls = [
    page.getByTestId('search'),
    page.getByTestId('sort'),
    page.getByRole('button', { name: 'Rename or move photo.jpg' }),
    page.getByRole('button', { name: 'Restore photo.jpg version 1' }),
    page.getByRole('button', { name: 'Delete photo.jpg version 1' }),
  ];
  for (const c of controls) expect((await c.boundingBox())!.height, await c.evaluate((el) => el.outerHTML.slice(0, 60))).toBeGreaterThanOrEqual(40);
  await page.getByTestId('search').fill('pho');
  await expect(page.getByTestId('file-row')).toHaveCount(1);
  // a hit of the search (every folder's) is a row of its own: opened again
  await page.getByTestId('file-row').getByRole('button', { expanded: false }).tap();

  // nothing overflows sideways, at 390 px and at 360 px, with the versions open, and with the
  // rename dialog open
  const fits = async () => {
    for (const width of [390, 360]) {
      await page.setViewportSize({ width, height: 800 });
      expect(await page.evaluate(() => document.documentElement.scrollWidth), `page width at ${width} px`).toBeLessThanOrEqual(width);
    }
    await page.setViewportSize({ width: 390, height: 844 });
  };
  await fits();
  await page.getByRole('button', { name: 'Rename or move photo.jpg' }).tap();
  const dialog = page.getByTestId('dialog');
  await expect(dialog.getByRole('textbox')).toHaveValue('photo.jpg');
  await page.setViewportSize({ width: 360, height: 800 });
  const box = (await dialog.boundingBox())!;
  expect(box.x).toBeGreaterThanOrEqual(0);
  expect(box.x + box.width).toBeLessThanOrEqual(360);
  await fits();
  await dialog.getByRole('button', { name: 'Cancel' }).tap();
  await expect(dialog).toHaveCount(0);
  await expect(card(page, 'photo.jpg')).toContainText('saved');
});
