// The web client end to end in headless Chromium against a real server: uploads through the
// drop zone, the file button and the folder button, deltas, downloads, a server stopped
// mid-sync, a throttled phone, and a 1 GB file.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type Page, expect, test } from '@playwright/test';
import { TestServer } from './server.ts';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
let server: TestServer;
let dir: string;

test.beforeEach(async () => {
  server = await new TestServer().start();
  dir = mkdtempSync(path.join(tmpdir(), 'dsync-e2e-files-'));
});
test.afterEach(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const WORDS = ['delta', 'sync', 'chunk', 'the', 'server', 'browser', 'file', 'and', 'weak', 'strong', 'hash', 'version', 'match', 'token', 'basis', 'target'];

/** Half random bytes, half random words, so the file looks like a document with a binary part. */
function content(size: number): Buffer {
  const pick = randomBytes(size);
  let text = '';
  for (let i = 0; text.length < size >> 1; i++) text += WORDS[pick[i] & 15] + (i % 11 === 10 ? '\n' : ' ');
  return Buffer.concat([randomBytes(size - (size >> 1)), Buffer.from(text)]).subarray(0, size);
}

function insertAt(b: Buffer, at: number, what: string): Buffer {
  return Buffer.concat([b.subarray(0, at), Buffer.from(what), b.subarray(at)]);
}

const committed = (page: Page, name: string) => page.locator(`[data-testid=sync-item][data-name="${name}"][data-phase=committed]`).first();

async function resultOf(page: Page, name: string) {
  const r = committed(page, name).getByTestId('sync-result');
  await expect(r).toBeVisible({ timeout: 120_000 });
  return { sent: Number(await r.getAttribute('data-sent')), delta: Number(await r.getAttribute('data-delta')), version: Number(await r.getAttribute('data-version')) };
}

test('first upload through the drop zone (real drag events with a DataTransfer)', async ({ page }) => {
  const bytes = content(1_500_000);
  await page.goto(server.url);
  await expect(page.getByText('Connected')).toBeVisible();
  await page.evaluate(async (b64) => {
    const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bin as BlobPart], 'dropped.bin'));
    const zone = document.querySelector('[data-testid=dropzone]')!;
    for (const type of ['dragenter', 'dragover', 'drop']) zone.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, bytes.toString('base64'));
  const r = await resultOf(page, 'dropped.bin');
  expect(r.version).toBe(1);
  expect(server.storedBytes('dropped.bin', 1).equals(bytes)).toBe(true);
  await expect(page.getByTestId('files').getByText('dropped.bin')).toBeVisible();
});

test('file button; an edited re-upload is a delta; download and delta download return the exact bytes', async ({ page }) => {
  const v1 = content(4_000_000);
  const v2 = insertAt(v1, 2_000_000, 'an edit in the middle of the file');
  const file = path.join(dir, 'report.doc');
  writeFileSync(file, v1);
  await page.goto(server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  expect((await resultOf(page, 'report.doc')).version).toBe(1);

  writeFileSync(file, v2);
  await page.getByTestId('file-input').setInputFiles(file);
  await expect(page.locator('[data-testid=sync-result][data-version="2"]')).toBeVisible({ timeout: 60_000 });
  const delta = Number(await page.locator('[data-testid=sync-result][data-version="2"]').getAttribute('data-delta'));
  console.log(`edited re-upload of ${v2.length} bytes: ${delta} bytes of Delta Bytes`);
  expect(delta).toBeLessThan(v2.length / 20);
  expect(server.storedBytes('report.doc', 2).equals(v2)).toBe(true);
  await page.screenshot({ path: path.join(root, 'docs/screenshot-desktop.png'), fullPage: true });

  // plain download of version 1
  await page.getByTestId('file-row').filter({ hasText: 'report.doc' }).getByRole('button').click();
  const v1row = page.locator('[data-testid=version-row][data-version="1"]');
  const [dl] = await Promise.all([page.waitForEvent('download'), v1row.getByTestId('download').click()]);
  expect(readFileSync(await dl.path()).equals(v1)).toBe(true);

  // delta download of version 2, with the local version 1 as basis
  const old = path.join(dir, 'old-copy.doc');
  writeFileSync(old, v1);
  const v2row = page.locator('[data-testid=version-row][data-version="2"]');
  const [dl2] = await Promise.all([page.waitForEvent('download'), v2row.getByTestId('delta-basis').setInputFiles(old)]);
  expect(readFileSync(await dl2.path()).equals(v2)).toBe(true);
  await expect(page.getByTestId('notice')).toContainText('saved');
  console.log(await page.getByTestId('notice').innerText());
});

test('a folder of several files keeps folder-relative names', async ({ page }) => {
  const folder = path.join(dir, 'project');
  mkdirSync(path.join(folder, 'src'), { recursive: true });
  const files: Record<string, Buffer> = { 'README.md': content(3000), 'src/main.c': content(70_000), 'src/data.bin': content(300_000) };
  for (const [n, b] of Object.entries(files)) writeFileSync(path.join(folder, n), b);
  await page.goto(server.url);
  await page.getByTestId('folder-input').setInputFiles(folder);
  for (const n of Object.keys(files)) {
    await resultOf(page, `project/${n}`);
    expect(server.storedBytes(`project/${n}`, 1).equals(files[n])).toBe(true);
  }
});

test('the server stopped mid-sync: the page says so and the old version is intact', async ({ page }) => {
  const v1 = content(2_000_000);
  const big = randomBytes(300 << 20);
  const file = path.join(dir, 'movie.mp4');
  writeFileSync(file, v1);
  await page.goto(server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  await resultOf(page, 'movie.mp4');
  writeFileSync(file, big);
  await page.getByTestId('file-input').setInputFiles(file);
  // kill the server once Match Tokens have arrived (Delta Bytes are flowing)
  await page.locator('[data-testid=sync-item][data-phase="tokens-received"]').waitFor({ timeout: 60_000 });
  await server.kill();
  const error = page.getByTestId('sync-error');
  await expect(error).toBeVisible({ timeout: 60_000 });
  await expect(error).toContainText('Nothing was half-stored');
  await expect(page.getByText('Server unreachable')).toBeVisible();
  // the previous version is intact, and nothing else was committed
  expect(server.storedBytes('movie.mp4', 1).equals(v1)).toBe(true);
  await server.start();
  const versions = await (await fetch(`${server.url}/api/versions?name=movie.mp4`)).json();
  expect(versions.map((v: { version: number }) => v.version)).toEqual([1]);
  // and a retry from the page completes
  await error.getByRole('button', { name: 'Retry' }).click();
  await expect(page.locator('[data-testid=sync-result][data-version="2"]')).toBeVisible({ timeout: 120_000 });
});

test('a file over the server limit and a server that requires sign-in get clear messages', async ({ page }) => {
  const small = await new TestServer(['--max-file-size', '10000']).start();
  try {
    const file = path.join(dir, 'big.bin');
    writeFileSync(file, content(50_000));
    await page.goto(small.url);
    await page.getByTestId('file-input').setInputFiles(file);
    await expect(page.getByTestId('sync-error')).toContainText('Too large for this server');
  } finally {
    await small.stop();
  }
  const usersFile = path.join(dir, 'users.json');
  execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'adduser', 'ann', '--users', usersFile, '--password', 'pw-ann-123']);
  const guarded = await new TestServer(['--users', usersFile]).start();
  try {
    await page.goto(guarded.url);
    await expect(page.getByText('Sign in required')).toBeVisible();
    await page.getByLabel('Name').fill('ann');
    await page.getByLabel('Password').fill('wrong');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByRole('alert')).toContainText('wrong name or password');
    await page.getByLabel('Password').fill('pw-ann-123');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByText('Connected')).toBeVisible();
    const file = path.join(dir, 'notes.txt');
    writeFileSync(file, content(20_000));
    await page.getByTestId('file-input').setInputFiles(file);
    await resultOf(page, 'notes.txt');
  } finally {
    await guarded.stop();
  }
});

test.describe('phone', () => {
  // a current Android phone: 390 px wide, touch, mobile viewport
  test.use({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2.6,
    isMobile: true,
    hasTouch: true,
    userAgent: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Mobile Safari/537.36',
  });

  test('CPU throttled 4×, file picked with the button, sync completes', async ({ page }) => {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Emulation.setCPUThrottlingRate', { rate: 4 });
    const file = path.join(dir, 'photo.jpg');
    const v1 = content(3_000_000);
    writeFileSync(file, v1);
    await page.goto(server.url);
    const t0 = Date.now();
    await page.getByTestId('file-input').setInputFiles(file);
    await resultOf(page, 'photo.jpg');
    writeFileSync(file, insertAt(v1, 100, 'edited on the phone'));
    await page.getByTestId('file-input').setInputFiles(file);
    await expect(page.locator('[data-testid=sync-result][data-version="2"]')).toBeVisible({ timeout: 120_000 });
    console.log(`phone (4× CPU throttling): two syncs of a 3 MB file in ${Date.now() - t0} ms`);
    expect(server.storedBytes('photo.jpg', 2).equals(insertAt(v1, 100, 'edited on the phone'))).toBe(true);
    // nothing overflows the 390 px viewport
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.getByTestId('file-row').first().getByRole('button').tap();
    await page.screenshot({ path: path.join(root, 'docs/screenshot-phone.png'), fullPage: true });
  });
});

/** Resident memory of Chromium's renderer processes (the tab, its worker and its wasm). */
function rendererRss(): number {
  let total = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.includes('--type=renderer')) continue;
      const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) total += Number(m[1]) * 1024;
    } catch {
      /* the process ended */
    }
  }
  return total;
}

test('a 1 GB file syncs without the tab growing with the file', async ({ page }) => {
  const size = 1 << 30;
  const file = path.join(dir, 'disk.img');
  const h = createHash('sha256');
  const fd = openSync(file, 'w');
  for (let o = 0; o < size; o += 16 << 20) {
    const b = randomBytes(16 << 20);
    h.update(b);
    writeSync(fd, b);
  }
  closeSync(fd);
  const sha = h.digest('hex');
  await page.goto(server.url);
  await page.evaluate(() => {
    (window as any).longTasks = [];
    new PerformanceObserver((l) => (window as any).longTasks.push(...l.getEntries().map((e) => e.duration))).observe({ type: 'longtask', buffered: false });
  });
  const before = rendererRss();
  let peak = before;
  const poll = setInterval(() => (peak = Math.max(peak, rendererRss())), 200);
  const t0 = Date.now();
  await page.getByTestId('file-input').setInputFiles(file);
  const r = await resultOf(page, 'disk.img');
  const ms = Date.now() - t0;
  clearInterval(poll);
  const longTasks: number[] = await page.evaluate(() => (window as any).longTasks);
  const mib = (b: number) => (b / 2 ** 20).toFixed(0);
  const line = `1 GiB upload from the page in ${(ms / 1000).toFixed(1)} s; renderer RSS ${mib(before)} MiB before, peak ${mib(peak)} MiB (+${mib(peak - before)} MiB); main-thread long tasks: ${longTasks.length}, longest ${Math.round(Math.max(0, ...longTasks))} ms`;
  console.log(line);
  expect(r.version).toBe(1);
  expect(await server.storedSha256('disk.img', 1)).toBe(sha);
  expect(peak - before).toBeLessThan(512 << 20);
  mkdirSync(path.join(root, 'bench/results'), { recursive: true });
  writeFileSync(
    path.join(root, 'bench/results/browser-memory.md'),
    `# Browser memory and responsiveness during a 1 GiB sync

- date: ${new Date().toISOString()}
- command: \`npx playwright test -c e2e/playwright.config.ts -g "1 GB"\` (part of \`npm test\`)
- Chromium headless (Debian), the page on a loopback server, a 1 GiB random file picked with the file button

${line}.

The file is read in 4 MiB slices inside the Web Worker (chunking and hashing in wasm), so the tab
holds one slice plus the chunk index (about 40 bytes per chunk), never the file.
`,
  );
});
