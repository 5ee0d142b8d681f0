// The web page end to end in headless Chromium against a real server: uploads through the drop
// zone, the file button and the folder button, a delta re-upload, plain and delta downloads,
// the keyboard, a server stopped mid-sync, limits and permissions. Phone: phone.spec.ts;
// a 1 GiB file: large.spec.ts.
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { content, insertAt, writePseudoRandomFile } from './data.ts';
import { card, expect, openPage, result, root, test } from './fixtures.ts';
import { pipeTo, TestServer } from './server.ts';
import WebSocket from 'ws';
import { encode } from '../shared/src/wire/codec.ts';
import { DEFAULT_PARAMS, Msg, Op, PROTOCOL_VERSION } from '../shared/src/wire/protocol.ts';
import { pushBytes } from '../harness/helpers.ts';

/** Bytes a page's upload has sent when a test holds it mid-way (e2e/server.ts pipeTo). */
const MID_UPLOAD_BYTES = 8 << 20;

test('first upload through the drop zone (real drag events with a DataTransfer)', async ({ page, server }) => {
  const files = { 'dropped.bin': content(1_500_000), 'notes.txt': content(40_000) };
  await openPage(page, server.url);
  // a DataTransfer built in the page, carried by dragenter / dragover / drop like a real drag
  await page.evaluate((list) => {
    const dt = new DataTransfer();
    for (const [name, b64] of list) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) as BlobPart], name));
    (window as unknown as { dt: DataTransfer }).dt = dt;
    const zone = document.querySelector('[data-testid=dropzone]')!;
    for (const type of ['dragenter', 'dragover']) zone.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, Object.entries(files).map(([n, b]) => [n, b.toString('base64')]));
  await expect(page.getByText('Drop to sync')).toBeVisible();
  await page.evaluate(() => {
    const zone = document.querySelector('[data-testid=dropzone]')!;
    zone.dispatchEvent(new DragEvent('drop', { dataTransfer: (window as unknown as { dt: DataTransfer }).dt, bubbles: true, cancelable: true }));
  });
  await expect(page.getByText('Drop to sync')).toBeHidden();
  for (const [name, bytes] of Object.entries(files)) {
    expect((await result(page, name)).version).toBe(1);
    expect((await server.storedBytes(name, 1)).equals(bytes)).toBe(true);
    await expect(page.getByTestId('files').getByText(name)).toBeVisible();
  }
});

test('file button; an edited re-upload is a delta; plain and delta downloads return the exact bytes', async ({ page, server, dir }) => {
  const v1 = content(4_000_000);
  const v2 = insertAt(v1, 2_000_000, 'an edit in the middle of the file');
  const file = path.join(dir, 'report.doc');
  writeFileSync(file, v1);
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  const first = await result(page, 'report.doc');
  expect(first.version).toBe(1);
  await expect(card(page, 'report.doc')).toContainText('new content, nothing to reuse');

  writeFileSync(file, v2);
  await page.getByTestId('file-input').setInputFiles(file);
  const second = await result(page, 'report.doc');
  console.log(`edited re-upload of ${v2.length} bytes: ${second.delta} bytes of Delta Bytes, ${second.sent} bytes of protocol traffic in all`);
  expect(second.version).toBe(2);
  // the page remembered version 1 and pushed the edit against it in one round trip
  expect(first.known).toBeUndefined();
  expect(second.known).toBe(1);
  expect(second.delta).toBeLessThan(v2.length / 20);
  expect((await server.storedBytes('report.doc', 2)).equals(v2)).toBe(true);
  await expect(card(page, 'report.doc')).toContainText('saved');

  // plain download of version 1
  await page.getByTestId('file-row').filter({ hasText: 'report.doc' }).getByRole('button', { expanded: false }).click();
  const [plain] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download report.doc version 1' }).click()]);
  expect(readFileSync(await plain.path()).equals(v1)).toBe(true);

  // delta download of version 2 with the old copy (version 1) picked on this device
  const old = path.join(dir, 'report-old.doc');
  writeFileSync(old, v1);
  const [delta] = await Promise.all([page.waitForEvent('download'), page.locator('[data-testid=version-row][data-version="2"]').getByTestId('delta-basis').setInputFiles(old)]);
  expect(readFileSync(await delta.path()).equals(v2)).toBe(true);
  const down = await result(page, 'report.doc', { direction: 'down' });
  console.log(`delta download of ${down.size} bytes: ${down.sent} bytes transferred`);
  expect(down.sent).toBeLessThan(v2.length / 20);

  // after a reload the page still knows version 2 (IndexedDB): the next edit takes one round trip
  const v3 = insertAt(v2, 1_000_000, 'another edit, after a reload');
  writeFileSync(file, v3);
  await page.reload();
  await expect(page.getByTestId('server-status')).toContainText(/Connected|Signed in/);
  await page.getByTestId('file-input').setInputFiles(file);
  const third = await result(page, 'report.doc');
  expect(third.version).toBe(3);
  expect(third.known).toBe(2);
  expect(third.delta).toBeLessThan(v3.length / 20);
  expect((await server.storedBytes('report.doc', 3)).equals(v3)).toBe(true);
});

test('a folder of several files keeps folder-relative names', async ({ page, server, dir }) => {
  const folder = path.join(dir, 'project');
  const files: Record<string, Buffer> = {
    'README.md': content(3000),
    'src/main.c': content(70_000),
    'src/util/strings.c': content(20_000),
    'assets/logo.png': content(300_000),
    'assets/data.bin': content(900_000),
    'empty.txt': Buffer.alloc(0),
  };
  for (const [n, b] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(folder, n)), { recursive: true });
    writeFileSync(path.join(folder, n), b);
  }
  await openPage(page, server.url);
  await page.getByTestId('folder-input').setInputFiles(folder);
  for (const [n, b] of Object.entries(files)) {
    expect((await result(page, `project/${n}`)).version).toBe(1);
    expect((await server.storedBytes(`project/${n}`, 1)).equals(b)).toBe(true);
  }
  // shown as folders: project/ at the top, then its files and its folders
  await expect(page.getByTestId('folder-row')).toHaveCount(1);
  await page.getByRole('button', { name: 'Open folder project' }).click();
  await expect(page.getByTestId('folder-row')).toHaveText([/^assets/, /^src/]);
  await expect(page.getByTestId('file-row')).toHaveText([/^empty\.txt/, /^README\.md/]);
  await page.getByRole('button', { name: 'Open folder src' }).click();
  await expect(page.getByTestId('breadcrumbs')).toHaveText(/All files\s*\/?\s*project\s*\/?\s*src/);
  await expect(page.getByTestId('file-row')).toHaveText([/^main\.c/]);
  await page.getByTestId('breadcrumbs').getByRole('button', { name: 'project' }).click();
  await expect(page.getByTestId('folder-row')).toHaveCount(2);
});

test('keyboard only: pick a file, open its versions, with a visible focus ring', async ({ page, server, dir }) => {
  const file = path.join(dir, 'typed.txt');
  writeFileSync(file, content(30_000));
  await openPage(page, server.url);
  // listen first: Playwright turns on file-chooser interception asynchronously
  const chooser = page.waitForEvent('filechooser');
  await page.keyboard.press('Tab'); // the first stop is the primary action
  await expect(page.getByTestId('file-input')).toBeFocused();
  const ring = await page.locator('label.button.primary').evaluate((el) => getComputedStyle(el).outlineStyle);
  expect(ring).toBe('solid');
  await page.keyboard.press('Enter');
  await (await chooser).setFiles(file);
  await result(page, 'typed.txt');
  const head = page.getByTestId('file-row').getByRole('button', { name: /^typed\.txt/ });
  await head.focus();
  await page.keyboard.press('Enter');
  await expect(head).toHaveAttribute('aria-expanded', 'true');
  await expect(page.getByRole('link', { name: 'Download typed.txt version 1' })).toBeVisible();
});

test('the server stopped mid-sync: the page says so, the old version stays intact, it completes by itself when the server is back', async ({ page, server, dir }) => {
  // the server is killed while the upload is held mid-way, then its connection cut (a kill
  // timed by the page's progress can come after the commit on a fast machine, or never see a
  // short step on a loaded one)
  const through = await pipeTo(server);
  try {
    const v1 = content(2_000_000);
    const file = path.join(dir, 'movie.mp4');
    writeFileSync(file, v1);
    await openPage(page, through.url);
    await page.getByTestId('file-input').setInputFiles(file);
    await result(page, 'movie.mp4');

    const sha = await writePseudoRandomFile(file, 160 << 20);
    const held = through.holdAt(MID_UPLOAD_BYTES);
    await page.getByTestId('file-input').setInputFiles(file);
    const release = await held;
    await server.kill();
    release(true);
    const problem = card(page, 'movie.mp4').getByTestId('problem');
    await expect(problem).toHaveAttribute('data-kind', 'lost', { timeout: 30_000 });
    await expect(problem).toContainText('connection to the server was lost');
    await expect(problem).toContainText('Nothing was half-stored');
    await expect(page.getByTestId('server-status')).toContainText('Server unreachable');
    // nothing was committed and the previous version is intact
    expect(await server.latest('movie.mp4')).toBe(1);
    expect((await server.storedBytes('movie.mp4', 1)).equals(v1)).toBe(true);

    await expect(problem).toContainText('tried again by itself when the server is back');

    // a file picked while the server is down waits for it
    const other = path.join(dir, 'other.txt');
    writeFileSync(other, content(10_000));
    await page.getByTestId('file-input').setInputFiles(other);
    await expect(card(page, 'other.txt')).toHaveAttribute('data-status', 'queued');
    await expect(card(page, 'other.txt').getByTestId('status-line')).toHaveText('Waiting for the server · starts by itself when it is back');

    // the server comes back; the page notices by itself, and both complete without a click
    await server.start();
    // (the page looks again every 5 s at most; generous for a loaded machine)
    await expect(page.getByTestId('server-status')).toContainText('Connected', { timeout: 35_000 });
    expect((await result(page, 'other.txt')).version).toBe(1);
    expect((await result(page, 'movie.mp4', { timeout: 120_000 })).version).toBe(2);
    expect(await server.storedSha256('movie.mp4', 2)).toBe(sha);
  } finally {
    through.close();
  }
});

test('cancelled, or changed on disk while syncing: nothing is stored, and the page says why', async ({ page, server, dir }) => {
  const file = path.join(dir, 'archive.tar');
  await writePseudoRandomFile(file, 256 << 20, 7);
  const through = await pipeTo(server);
  try {
    await openPage(page, through.url);
    let held = through.holdAt(MID_UPLOAD_BYTES);
    await page.getByTestId('file-input').setInputFiles(file);
    let release = await held;
    await page.getByRole('button', { name: 'Cancel archive.tar' }).click();
    await expect(card(page, 'archive.tar').getByTestId('problem')).toHaveAttribute('data-kind', 'cancelled');
    await expect(card(page, 'archive.tar')).toContainText('Nothing was stored');
    release(false);

    // the file is edited on disk while it is being read: the browser refuses further reads
    held = through.holdAt(MID_UPLOAD_BYTES);
    await page.getByTestId('file-input').setInputFiles(file);
    release = await held;
    appendFileSync(file, 'an edit made while syncing');
    release(false);
    await expect(card(page, 'archive.tar').getByTestId('problem')).toHaveAttribute('data-kind', 'unreadable');
    await expect(card(page, 'archive.tar')).toContainText('This file cannot be read');
    expect(await server.latest('archive.tar')).toBe(0);
  } finally {
    through.close();
  }
});

test('changed on disk after it is chunked and before its Delta Runs are sent: the page says it cannot be read, nothing is stored', async ({ page, server, dir }) => {
  // The whole file is chunked and its list sent while the server is frozen (SIGSTOP), so no
  // Match Token has come back and no Delta Run has gone out; then the file is overwritten in
  // place and the server thawed. Chromium's socket cannot read the Delta Runs' slices of the
  // changed file: it fails and closes, with their bytes still counted in bufferedAmount. The
  // sender must not wait for room that never comes (shared/src/session/sender.ts, conn.ended): the
  // push is retried, its chunking read refused, and the card says why.
  const file = path.join(dir, 'archive.tar');
  const size = 128 << 20;
  await writePseudoRandomFile(file, size, 11);
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  // frozen once chunking is under way (the session started on the server), the file large
  // enough that chunking outlasts this look at the page
  await page.waitForFunction(() => {
    const c = document.querySelector('[data-testid=transfer][data-name="archive.tar"][data-step=chunking]');
    return !!c && !/ 0 B of /.test(c.querySelector('[role=progressbar]')?.getAttribute('aria-valuetext') ?? ' 0 B of ');
  }, null, { timeout: 60_000, polling: 'raf' });
  server.freeze();
  try {
    await card(page, 'archive.tar').and(page.locator('[data-step=checksums-sent]')).waitFor({ timeout: 60_000 });
    // the last strong hashes are read after the list ends: give them time to finish
    await new Promise((r) => setTimeout(r, 3000));
    const fh = await open(file, 'r+');
    const other = Buffer.alloc(8 << 20, 0x5a);
    for (let at = 0; at < size; at += other.length) await fh.write(other, 0, other.length, at);
    await fh.close();
  } finally {
    server.freeze(false);
  }
  // well within the server's idle timeout, which a hung sync would wait for
  await expect(card(page, 'archive.tar').getByTestId('problem')).toHaveAttribute('data-kind', 'unreadable', { timeout: 30_000 });
  await expect(card(page, 'archive.tar')).toContainText('This file cannot be read');
  expect(await server.latest('archive.tar')).toBe(0);
});

test('past capacity the listing is refused (503, Retry-After): the page waits the seconds named and shows the files once a place is free', async ({ page }) => {
  const busy = await new TestServer(['--max-sessions', '1']).start();
  try {
    const target = { wsUrl: `${busy.url.replace('http', 'ws')}/sync` };
    await pushBytes(target, 'notes/doc.txt', new Uint8Array(content(5000)));
    // a push session that holds the one place: Hello, then silence once Ready is in
    const held = new WebSocket(target.wsUrl);
    await new Promise((r, j) => (held.on('open', r), held.on('error', j)));
    const ready = new Promise((r) => held.on('message', (d: Buffer) => d[0] === Msg.Ready && r(null)));
    held.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'held.bin' }));
    await ready;
    const refused = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/files' && r.status() === 503);
    await openPage(page, busy.url);
    const r = await refused;
    expect(Number(r.headers()['retry-after'])).toBeGreaterThanOrEqual(1);
    expect((await r.json()).error).toMatch(/^the server is busy; retry in \d+ s$/);
    // while the place stays held the page keeps waiting and asking again: "Loading…", never an error
    await page.waitForTimeout(1500);
    await expect(page.getByTestId('loading')).toBeVisible();
    await expect(page.locator('.form-error')).toHaveCount(0);
    held.terminate();
    await expect(page.locator('[data-testid=folder-row][data-name="notes/"]')).toBeVisible({ timeout: 30_000 });
  } finally {
    await busy.stop();
  }
});

test('a file over the server limit, sign-in, and a session that ends: clear messages', async ({ page, dir }) => {
  const small = await new TestServer(['--max-file-size', '10000']).start();
  try {
    const file = path.join(dir, 'big.bin');
    writeFileSync(file, content(50_000));
    await openPage(page, small.url);
    await page.getByTestId('file-input').setInputFiles(file);
    const problem = card(page, 'big.bin').getByTestId('problem');
    await expect(problem).toHaveAttribute('data-kind', 'too-large');
    await expect(problem).toContainText('Too large for this server: 50 KB');
    await expect(problem).toContainText('up to 10 KB');
    expect(await small.latest('big.bin')).toBe(0);
  } finally {
    await small.stop();
  }

  const usersFile = path.join(dir, 'users.json');
  execFileSync(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'adduser', 'ann', '--users', usersFile, '--password-stdin'], { input: 'quiet-meadow-7142\n' });
  const guarded = await new TestServer(['--users', usersFile]).start();
  try {
    await page.goto(guarded.url);
    await expect(page.getByTestId('server-status')).toContainText('Sign-in required');
    await page.getByLabel('Name').fill('ann');
    await page.getByLabel('Password').fill('wrong');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByRole('alert')).toContainText('Wrong name or password');
    await page.getByLabel('Password').fill('quiet-meadow-7142');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByTestId('server-status')).toContainText('Signed in as ann');
    const file = path.join(dir, 'notes.txt');
    writeFileSync(file, content(20_000));
    await page.getByTestId('file-input').setInputFiles(file);
    await result(page, 'notes.txt');

    // the sign-in ends (logged out elsewhere): the page learns it from its event stream, which
    // the logout ends, or from the server refusing the next sync (the server checks the sign-in
    // again at every session); either way the upload waits for a sign-in, saying so
    expect((await page.request.post(`${guarded.url}/api/logout`)).status()).toBe(200);
    writeFileSync(file, content(20_000));
    await page.getByTestId('file-input').setInputFiles(file);
    await expect(card(page, 'notes.txt')).toContainText('Sign in to upload', { timeout: 30_000 });
    await page.getByLabel('Name').fill('ann');
    await page.getByLabel('Password').fill('quiet-meadow-7142');
    await page.getByRole('button', { name: 'Sign in' }).click();
    // it goes again by itself once signed in
    expect((await result(page, 'notes.txt')).version).toBe(2);
  } finally {
    await guarded.stop();
  }
});
