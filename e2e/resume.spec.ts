// The page resumes an upload after its server was killed and started again, and after the
// phone was locked while its link died: headless Chromium, a real `dsync serve` child. The
// server checkpoints the upload as it writes it (docs/store.md §6): once a checkpoint is listed
// the server is killed, or the page goes away (hidden, then frozen) while a proxy between it
// and the server stops carrying every connection it had (a dead link: no byte, no close). The
// page retries by itself when the server is back, or when it is visible again, and the retry
// sends only what the server lacks.
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { content, writePseudoRandomFile } from './data.ts';
import { card, expect, openPage, result, test } from './fixtures.ts';
import type { TestServer } from './server.ts';

/** Whether the server lists a checkpoint of an upload (a generation of the name's uploads head,
 *  `<key>@h/<n>`, server/src/store/local.ts; its folder and temporary file come before it). */
function checkpointed(server: TestServer): boolean {
  const uploads = path.join(server.data, 'ns', 'local', 'uploads');
  return existsSync(uploads) && readdirSync(uploads).some((h) => h.endsWith('@h') && readdirSync(path.join(uploads, h)).some((g) => /^\d+$/.test(g)));
}

test('an upload interrupted by a server restart resumes from what the server had written', async ({ page, server, dir }) => {
  const size = 160 << 20;
  const file = path.join(dir, 'film.bin');
  writeFileSync(file, content(1000));
  const sha = await writePseudoRandomFile(file, size);
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  // a checkpoint of the upload is listed: kill the server then
  const uploads = path.join(server.data, 'ns', 'local', 'uploads');
  await expect.poll(() => checkpointed(server), { timeout: 60_000, intervals: [20] }).toBe(true);
  const atKill = JSON.stringify(readdirSync(uploads).map((h) => [h, readdirSync(path.join(uploads, h))]));
  await server.kill();
  await expect(page.getByTestId('server-status')).toContainText('Server unreachable', { timeout: 30_000 });
  await server.start();
  const r = await result(page, 'film.bin', { timeout: 120_000 });
  expect(r.version).toBe(1);
  const report = JSON.parse((await card(page, 'film.bin').getByTestId('result').getAttribute('data-report'))!);
  // the chunks the server had written by its first checkpoint (16 MiB) were not sent again by
  // the attempt that stored the file (the report's traffic counts every attempt)
  expect(report.literalBytes, `uploads at the kill: ${atKill}; the server's log:\n${server.log.map((e) => JSON.stringify(e)).join('\n')}`).toBeLessThan(size - (8 << 20));
  expect(await server.storedSha256('film.bin', 1)).toBe(sha);
});

/** A TCP proxy to `port` on loopback; `deaden(swallowMs)` stops every connection it carries
 *  now, both ways, without closing it (as a link that died while the phone was locked: nothing
 *  arrives, no close either), and carries new ones as before. For `swallowMs` the page's bytes
 *  still leave it and are lost on the way (as on a dead link while the sender's window is open),
 *  then they stop leaving. */
async function proxyTo(port: number) {
  const pairs = new Set<[net.Socket, net.Socket]>();
  const dead = new Set<net.Socket>();
  const proxy = net.createServer((page) => {
    const server = net.connect(port, '127.0.0.1');
    const pair: [net.Socket, net.Socket] = [page, server];
    pairs.add(pair);
    page.pipe(server);
    server.pipe(page);
    for (const s of pair)
      s.on('error', () => {}).on('close', () => {
        pairs.delete(pair);
        // a dead link carries no close: the other side stays open
        if (!dead.has(s)) for (const o of pair) o.destroy();
      });
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
    deaden(swallowMs = 0) {
      for (const [page, server] of pairs) {
        page.unpipe(server);
        server.unpipe(page);
        server.pause();
        const lost = () => {};
        page.on('data', lost).resume();
        setTimeout(() => page.off('data', lost).pause(), swallowMs);
        for (const s of [page, server]) dead.add(s);
      }
      return dead.size / 2;
    },
    close() {
      for (const s of dead) s.destroy();
      for (const p of pairs) for (const s of p) s.destroy();
      proxy.close();
    },
  };
}

/** The page hidden (another app in front, the screen locked) or visible again, as the browser
 *  says it: `document.visibilityState` and a visibilitychange event. */
async function setVisible(page: Page, visible: boolean) {
  await page.evaluate((visible) => {
    const state = visible ? 'visible' : 'hidden';
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => state });
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => !visible });
    document.dispatchEvent(new Event('visibilitychange'));
  }, visible);
}

test('an upload whose link died while the page was hidden and frozen resumes when the page is visible again', async ({ page, server, dir }) => {
  test.setTimeout(300_000);
  const size = 256 << 20;
  const file = path.join(dir, 'film.bin');
  const sha = await writePseudoRandomFile(file, size);
  const proxy = await proxyTo(Number(new URL(server.url).port));
  try {
    await openPage(page, proxy.url);
    await page.getByTestId('file-input').setInputFiles(file);
    await expect.poll(() => checkpointed(server), { timeout: 60_000, intervals: [20] }).toBe(true);
    // the phone locks: the page is hidden, then frozen, and its link dies under it
    await setVisible(page, false);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Page.setWebLifecycleState', { state: 'frozen' });
    // the page's bytes go on leaving it for longer than the worker's first look after the
    // wake (worker.ts WAKE_GRACE_MS), then stop
    expect(proxy.deaden(8000)).toBeGreaterThanOrEqual(1);
    await expect(card(page, 'film.bin')).toHaveAttribute('data-status', 'running');
    // unlocked: the page is active and visible again, with the same File, no pick
    await cdp.send('Page.setWebLifecycleState', { state: 'active' });
    await setVisible(page, true);
    const r = await result(page, 'film.bin', { timeout: 150_000 });
    expect(r.version).toBe(1);
    expect(await server.storedSha256('film.bin', 1)).toBe(sha);
    const report = JSON.parse((await card(page, 'film.bin').getByTestId('result').getAttribute('data-report'))!);
    const push = server.log.find((e) => e.op === 'push' && e.name === 'film.bin');
    // the try that stored it took what the server had checkpointed (16 MiB and more) from the
    // cut upload: the report's traffic counts every try
    expect(push?.resumedChunks, `the server's log:\n${server.log.map((e) => JSON.stringify(e)).join('\n')}`).toBeGreaterThan(0);
    expect(report.literalBytes).toBeLessThan(size - (8 << 20));
  } finally {
    proxy.close();
  }
});
