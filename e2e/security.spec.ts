// What a page on another origin of the same host can do to the signed-in page (issue 32), in
// Chromium: the page runs whole under its Content-Security-Policy (no violation while it
// uploads through its worker and wasm); another origin's page cannot frame it, and cannot
// run a user's file as a script (nor tell that it exists).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { pushBytes } from '../harness/helpers.ts';
import { content } from './data.ts';
import { expect, openPage, result, test } from './fixtures.ts';

test('the page runs under its CSP without a violation: an upload (worker, wasm) and the file list', async ({ page, server, dir }) => {
  await page.addInitScript(() => {
    const seen: string[] = ((window as unknown as { cspViolations: string[] }).cspViolations = []);
    document.addEventListener('securitypolicyviolation', (e) => seen.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const res = await page.goto(server.url);
  expect(res!.headers()['content-security-policy']).toContain("script-src 'self' 'wasm-unsafe-eval'");
  await openPage(page, server.url);
  const file = path.join(dir, 'notes.txt');
  writeFileSync(file, content(300_000));
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await result(page, 'notes.txt')).version).toBe(1);
  await page.getByTestId('files').getByText('notes.txt').click();
  await page.waitForTimeout(500);
  expect(await page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations)).toEqual([]);
});

test('another origin on the same host cannot frame the page, nor run or probe a user\'s file with <script src>', async ({ page, server }) => {
  await pushBytes({ wsUrl: server.url.replace('http', 'ws') + '/sync' }, 'leak.js', Buffer.from('window.leaked = "the file ran";'));
  const attacker = http.createServer((_req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<!doctype html><iframe id="f" src="${server.url}/"></iframe>
      <script>window.loaded = 'pending';</script>
      <script src="${server.url}/api/download?name=leak.js" onload="window.loaded='load'" onerror="window.loaded='error'"></script>
      <script src="${server.url}/api/download?name=missing.js" onload="window.missing='load'" onerror="window.missing='error'"></script>`);
  });
  await new Promise<void>((r) => attacker.listen(0, '127.0.0.1', r));
  try {
    await page.goto(`http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`);
    await page.waitForTimeout(1500);
    const framed = page.frames().find((f) => f !== page.mainFrame())!;
    expect(await framed.locator('[data-testid=server-status]').count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { leaked?: string }).leaked)).toBeUndefined();
    // an existing name and a missing one look the same: both blocked
    expect(await page.evaluate(() => [(window as unknown as { loaded: string }).loaded, (window as unknown as { missing: string }).missing])).toEqual(['error', 'error']);
  } finally {
    attacker.close();
  }
});
