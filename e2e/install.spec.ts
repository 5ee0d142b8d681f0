// The installable page in Chromium, against a real server: the rules Lighthouse's
// installability audit applies (a manifest that parses, with a name, a start URL, `display:
// standalone` and PNG icons of 192 and 512 px that load; a service worker that controls the
// page and serves it offline), what the service worker must never cache (/api/: listings and
// file bytes; /sync), and the Web Share Target: a file POSTed to the share target URL as
// Android's share sheet does is queued and synced as a drop.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { content } from './data.ts';
import { expect, openPage, result, test } from './fixtures.ts';

/** The width and height of a PNG (its IHDR), or null when `b` is no PNG. */
function pngSize(b: Buffer): { w: number; h: number } | null {
  if (!b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) || b.toString('latin1', 12, 16) !== 'IHDR') return null;
  return { w: b.readUInt32BE(16), h: b.readUInt32BE(20) };
}

/** Opens the page and waits until the service worker controls it (the first visit installs
 *  it; it claims the pages open when it activates). A page that loaded while the worker was
 *  still activating is controlled from its next load on (a CI run's page stayed uncontrolled
 *  for 15 s): it is loaded again once the worker is ready. */
async function controlled(page: Page, url: string) {
  await openPage(page, url);
  await page.evaluate(() => navigator.serviceWorker.ready);
  if (!(await page.evaluate(() => navigator.serviceWorker.controller))) await openPage(page, url);
  await expect.poll(() => page.evaluate(() => navigator.serviceWorker.controller?.scriptURL ?? null)).toMatch(/\/sw\.js$/);
}

/** Every URL in the page's caches. */
const cachedUrls = (page: Page) =>
  page.evaluate(async () => {
    const out: string[] = [];
    for (const k of await caches.keys()) for (const r of await (await caches.open(k)).keys()) out.push(new URL(r.url).pathname);
    return out.sort();
  });

test('installable: the manifest and its icons, a service worker that controls the page and serves its shell offline, and never caches /api/', async ({ page, context, server, dir }) => {
  await page.goto(server.url);
  // the manifest the page links, as Lighthouse reads it
  const href = await page.evaluate(() => document.querySelector<HTMLLinkElement>('link[rel=manifest]')?.href);
  expect(href).toBe(`${server.url}/manifest.webmanifest`);
  const res = await page.request.get(href!);
  expect(res.ok()).toBe(true);
  expect(res.headers()['content-type']).toMatch(/^application\/manifest\+json/);
  const m = JSON.parse(await res.text());
  expect(m).toMatchObject({ name: expect.any(String), short_name: expect.any(String), start_url: '/', display: 'standalone', theme_color: expect.stringMatching(/^#/), background_color: expect.stringMatching(/^#/) });
  expect(m.short_name.length).toBeLessThanOrEqual(12); // shown under the home screen icon
  const sizes = new Set<string>();
  for (const icon of m.icons) {
    const b = Buffer.from(await (await page.request.get(new URL(icon.src, server.url).href)).body());
    const s = pngSize(b);
    expect(s, icon.src).not.toBeNull();
    expect(`${s!.w}x${s!.h}`).toBe(icon.sizes);
    expect(icon.type).toBe('image/png');
    if (icon.purpose !== 'maskable') sizes.add(icon.sizes);
  }
  expect([...sizes].sort()).toEqual(['192x192', '512x512']);
  expect(m.share_target).toEqual({ action: '/share', method: 'POST', enctype: 'multipart/form-data', params: { files: [{ name: 'file', accept: ['*/*'] }] } });
  // the page's CSP lets the manifest and the service worker in ('self')
  const csp = res.headers()['content-security-policy'];
  expect(csp).toContain("default-src 'self'");
  expect(csp).toContain("worker-src 'self'");

  await controlled(page, server.url);
  // a sync and a download while controlled: the listing, the file bytes and /sync pass by
  const file = path.join(dir, 'kept-out.bin');
  writeFileSync(file, content(300_000));
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'kept-out.bin')).version).toBe(1);
  await page.evaluate(async (u) => {
    await (await fetch(`${u}/api/config`)).json();
    await (await fetch(`${u}/api/files`)).json();
  }, server.url);
  const cached = await cachedUrls(page);
  expect(cached).toContain('/');
  expect(cached.filter((p) => p !== '/' && !p.startsWith('/assets/'))).toEqual([]);

  // offline: the shell loads from the cache, and says the server is out of reach
  await context.setOffline(true);
  await page.reload();
  await expect(page.locator('h1, header').first()).toBeVisible();
  await expect(page.getByTestId('server-status')).toBeVisible();
  expect(await page.evaluate(() => document.querySelectorAll('script[src^="/assets/"]').length)).toBeGreaterThan(0);
  await context.setOffline(false);
});

test('share target: a file POSTed to /share as the share sheet does is queued and synced as a drop', async ({ page, server, dir }) => {
  await controlled(page, server.url);
  const file = path.join(dir, 'from another app.txt');
  const bytes = content(200_000);
  writeFileSync(file, bytes);
  // the share sheet's request: a navigation POSTing multipart/form-data to the manifest's action
  await page.evaluate(() => {
    const f = document.createElement('form');
    f.method = 'post';
    f.enctype = 'multipart/form-data';
    f.action = '/share';
    const i = document.createElement('input');
    i.type = 'file';
    i.name = 'file';
    i.id = 'share-file';
    f.append(i);
    document.body.append(f);
  });
  await page.locator('#share-file').setInputFiles(file);
  await page.evaluate(() => document.querySelector<HTMLFormElement>('form[action="/share"]')!.submit());
  await page.waitForURL(`${server.url}/`);
  expect((await result(page, 'from another app.txt')).version).toBe(1);
  expect((await server.storedBytes('from another app.txt', 1)).equals(readFileSync(file))).toBe(true);
  // taken out of the queue: a reload syncs nothing again
  await page.reload();
  await openPage(page, server.url);
  expect(await page.evaluate(() => location.search)).toBe('');
  await expect(page.locator('[data-testid=transfer][data-name="from another app.txt"]')).toHaveCount(0);
});
