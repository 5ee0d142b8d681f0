// The page's core flows in every engine (Chromium, Firefox ESR, WebKitGTK), written once against
// the small driver of drivers.ts, each test against its own real server (e2e/server.ts) in a
// fresh profile: pick and sync, a delta re-sync, a delta download, a drop, the kept panel, the
// file browser with a live update from a CLI push, a file changed under the sync, and phone
// size; and WebKit without wasm SIMD (as Safari before 16.4). Run by node:test (scripts/test.sh,
// npm run test:engines): `DSYNC_ENGINES=firefox,webkit` picks engines.
//
// What the drivers cannot do in every engine, and where it is tested instead:
// - picking a folder (<input webkitdirectory>): WebDriver (classic and BiDi) picks files only;
//   e2e/sync.spec.ts and live.spec.ts pick folders in Chromium;
// - a drag from the desktop: no driver makes an OS drag with files; the drop here is a
//   DataTransfer the page builds, carried by real DragEvents (a synthesised DataTransfer's
//   entries cannot be read in WebKit, so its drop goes through getAsFile: client/src/drop.ts);
// - a touch screen and CPU throttling: Chromium's DevTools protocol only (e2e/phone.spec.ts);
//   here phone size is a 390 px viewport with a mouse;
// - a browser download: the delta download's bytes are read back from the page's kept copy
//   (the page's CSP keeps fetch off its blob: URLs), and in WebKit only the page's own check;
// - OPFS in WebKit: WebKitGTK as Debian ships it has no Storage API (its kept test keeps the
//   copy in IndexedDB), and its automation sessions are ephemeral and refuse OPFS even with the
//   feature on: webkit-profile.test.ts runs the kept copy in WebKitGTK with a persistent
//   profile and OPFS on; e2e/kept.spec.ts fakes WebKit's sync access handle failure in
//   Chromium, and e2e/safari-apis.spec.ts what Safari 15.4–25 lacks.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { promisify } from 'node:util';
import { content, insertAt, writePseudoRandomFile } from '../data.ts';
import globalSetup from '../global-setup.ts';
import { TestServer } from '../server.ts';
import { ENGINES, type Engine, type EngineDriver, type PageDriver, cardSelector, launch, openPage, result, waitFor } from './drivers.ts';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const engines = (process.env.DSYNC_ENGINES ?? ENGINES.join(',')).split(',').filter(Boolean) as Engine[];
for (const e of engines) if (!ENGINES.includes(e)) throw new Error(`DSYNC_ENGINES: unknown engine ${e} (${ENGINES.join(', ')})`);
globalSetup(); // the built page, not older than its sources

/** How each engine's uploads are labelled in a version's history (client/src/api.ts deviceLabel). */
const LABEL: Record<Engine, string> = { chromium: 'Chrome on Linux', firefox: 'Firefox on Linux', webkit: 'WebKit on Linux' };

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The text of the first element at `sel` ('' when there is none). */
const textOf = (page: PageDriver, sel: string) => page.evaluate((s) => document.querySelector(s)?.textContent ?? '', sel);

/** SHA-256 (hex) of what the server serves the page at `url`. */
const shaInPage = (page: PageDriver, url: string) =>
  page.evaluate(async (u) => {
    const h = new Uint8Array(await crypto.subtle.digest('SHA-256', await (await fetch(u)).arrayBuffer()));
    return Array.from(h, (b) => b.toString(16).padStart(2, '0')).join('');
  }, url);

const fileRow = (name: string) => `[data-testid=file-row][data-name="${name}"]`;

/** Opens the version history of the file row `name`. */
async function openHistory(page: PageDriver, name: string) {
  // the listing shows the row once it has read the folder again after the sync (a live event,
  // at most every 300 ms): a click before then finds no row
  await waitFor(page, `the row of ${name}`, (s) => !!document.querySelector(s), `${fileRow(name)} button[aria-expanded=false]`);
  await page.click(`${fileRow(name)} button[aria-expanded=false]`);
  await waitFor(page, `the versions of ${name}`, (s) => !!document.querySelector(s), `${fileRow(name)} [data-testid=version-row]`);
}

/** `dsync push` from the command line (another client). */
async function cliPush(server: TestServer, dir: string, file: string, name: string) {
  const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'cli-cache') };
  await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', file, '--name', name, '--server', `${server.url.replace('http', 'ws')}/sync`, '--no-known'], { env });
}

/** `b` with `n` bytes overwritten at each of `at`. */
function overwrite(b: Buffer, at: number[], n: number): Buffer {
  const c = Buffer.from(b);
  for (const a of at) for (let i = 0; i < n; i++) c[a + i] ^= 0xa5;
  return c;
}

interface Fresh {
  page: PageDriver;
  server: TestServer;
  dir: string;
}

/** Runs `body` with a fresh server, scratch folder and page, all gone after it. */
async function fresh(browser: EngineDriver, body: (p: Fresh) => Promise<void>) {
  const server = await new TestServer().start();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-engines-'));
  const page = await browser.newPage();
  try {
    await body({ page, server, dir });
  } finally {
    await page.close().catch(() => {});
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const engine of engines) {
  describe(engine, { concurrency: 1 }, () => {
    let browser: EngineDriver;
    before(async () => {
      browser = await launch(engine);
      console.log(`${engine}: ${browser.version}`);
    });
    after(() => browser?.close());

    const flow = (name: string, body: (p: Fresh) => Promise<void>) => test(name, { timeout: 180_000 }, () => fresh(browser, body));

    flow('pick a file and sync it; an edit re-syncs as a delta; downloads return the exact bytes; the history names this browser', async ({ page, server, dir }) => {
      const v1 = content(4_000_000);
      const v2 = insertAt(v1, 2_000_000, 'an edit in the middle of the file');
      const file = path.join(dir, 'report.doc');
      writeFileSync(file, v1);
      await openPage(page, server.url);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      const first = await result(page, 'report.doc');
      assert.equal(first.version, 1);
      assert.ok((await server.storedBytes('report.doc', 1)).equals(v1));

      writeFileSync(file, v2);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      const second = await result(page, 'report.doc');
      console.log(`${engine}: edited re-sync of ${v2.length} B: ${second.delta} B of Delta Bytes, ${second.sent} B in all`);
      assert.equal(second.version, 2);
      assert.equal(second.report?.knownVersion, 1, 'pushed against the version the page knew');
      assert.ok(second.delta < v2.length / 20, `delta ${second.delta}`);
      assert.ok((await server.storedBytes('report.doc', 2)).equals(v2));

      await openHistory(page, 'report.doc');
      assert.match(await textOf(page, '[data-testid=version-row][data-version="2"] .client'), new RegExp(`from ${LABEL[engine]}$`));
      const plain = await page.evaluate((s) => document.querySelector(s)!.getAttribute('href')!, '[data-testid=version-row][data-version="1"] [data-testid=download]');
      assert.equal(await shaInPage(page, plain), sha256(v1));

      // delta download of version 2 against the old copy picked on this device (what the
      // page kept of its push cleared first: what it keeps next is what it downloads)
      const opfs = await page.evaluate(() => typeof navigator.storage?.getDirectory === 'function');
      if (opfs) {
        await page.click('[data-testid=kept-clear]');
        await waitFor(page, 'Clear', () => document.querySelector('[data-testid=kept-usage]')?.textContent === 'Nothing kept');
      }
      const old = path.join(dir, 'report-old.doc');
      writeFileSync(old, v1);
      await page.setInputFiles('[data-testid=version-row][data-version="2"] [data-testid=delta-basis]', [old]);
      const down = await result(page, 'report.doc', 'down');
      console.log(`${engine}: delta download of ${down.size} B: ${down.sent} B transferred`);
      assert.ok(down.sent < v2.length / 20, `sent ${down.sent}`);
      // the page verified the bytes it rebuilt (the result above); they are the file's saved
      // and, where there is OPFS, kept: read back there (the page's CSP keeps fetch off blob: URLs)
      if (opfs) {
        await waitFor(
          page,
          'the downloaded bytes kept',
          async (want) => {
            const d = await (await navigator.storage.getDirectory()).getDirectoryHandle('dsync-kept', { create: true });
            for await (const [name, h] of (d as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }).entries()) {
              if (h.kind !== 'file' || !/\.2$/.test(name)) continue;
              const sha = new Uint8Array(await crypto.subtle.digest('SHA-256', await (await (h as FileSystemFileHandle).getFile()).arrayBuffer()));
              if (Array.from(sha, (b) => b.toString(16).padStart(2, '0')).join('') === want) return true;
            }
            return false;
          },
          sha256(v2),
        );
      }

      // after a reload the page still knows version 2: the next edit takes one round trip
      const v3 = insertAt(v2, 1_000_000, 'another edit, after a reload');
      writeFileSync(file, v3);
      await page.reload();
      await waitFor(page, 'the page to reach the server', () => /Connected/.test(document.querySelector('[data-testid=server-status]')?.textContent ?? ''));
      await page.setInputFiles('[data-testid=file-input]', [file]);
      const third = await result(page, 'report.doc');
      assert.equal(third.version, 3);
      assert.equal(third.report?.knownVersion, 2);
      assert.ok((await server.storedBytes('report.doc', 3)).equals(v3));
    });

    flow('a drop (a DataTransfer carried by drag events) syncs every file in it', async ({ page, server }) => {
      const files = { 'dropped.bin': content(1_500_000), 'notes.txt': content(40_000) };
      await openPage(page, server.url);
      await page.evaluate((list) => {
        const dt = new DataTransfer();
        for (const [name, b64] of list) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name));
        const zone = document.querySelector('[data-testid=dropzone]')!;
        for (const type of ['dragenter', 'dragover', 'drop']) zone.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
      }, Object.entries(files).map(([n, b]) => [n, b.toString('base64')]));
      for (const [name, bytes] of Object.entries(files)) {
        assert.equal((await result(page, name)).version, 1);
        assert.ok((await server.storedBytes(name, 1)).equals(bytes));
      }
      const errors = await page.evaluate(() => document.querySelectorAll('[data-testid=problem]').length);
      assert.equal(errors, 0);
    });

    flow('kept on this device: an edit goes up as copies of the kept bytes; Clear empties them (OPFS, else IndexedDB)', async ({ page, server, dir }) => {
      await openPage(page, server.url);
      const file = path.join(dir, 'mixed.bin');
      const v1 = content(4_000_000);
      writeFileSync(file, v1);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      await result(page, 'mixed.bin');
      // every engine keeps copies: in OPFS, or where there is none (WebKitGTK as Debian ships
      // it) in IndexedDB
      await waitFor(page, 'the kept copy', () => document.querySelector('[data-testid=kept-usage]')?.textContent === '4 MB kept of 1 file');
      const where = await page.evaluate(() => document.querySelector('[data-testid=kept-settings]')?.getAttribute('data-where'));
      assert.equal(where, engine === 'webkit' ? 'indexeddb' : 'opfs');
      const v2 = overwrite(v1, [1_000_000, 3_000_000], 8);
      writeFileSync(file, v2);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      const r = await result(page, 'mixed.bin');
      assert.equal(r.report?.knownVersion, 1);
      assert.ok((await server.storedBytes('mixed.bin', 2)).equals(v2));
      assert.equal(r.report?.keptBasis, true, 'copied from the kept bytes');
      // Each 8-byte overwrite costs its own bytes, plus the old bytes beside it where a chunk
      // boundary leaves them a stretch shorter than a copy's minimum (32 bytes) at either side;
      // without the kept bytes each would cost whole chunks (kilobytes).
      assert.ok(r.report!.literalBytes! <= 2 * (8 + 2 * 31), `literal ${r.report!.literalBytes}`);
      await waitFor(page, 'the new version kept in place of the old', () => document.querySelector('[data-testid=kept-usage]')?.textContent === '4 MB kept of 1 file');
      await page.click('[data-testid=kept-clear]');
      await waitFor(page, 'Clear', () => document.querySelector('[data-testid=kept-usage]')?.textContent === 'Nothing kept');
    });

    flow('the file browser: a push from the CLI shows within seconds; folders open; the history says where each version came from', async ({ page, server, dir }) => {
      await openPage(page, server.url);
      const file = path.join(dir, 'today.txt');
      writeFileSync(file, content(50_000));
      await cliPush(server, dir, file, 'notes/today.txt');
      const t0 = Date.now();
      // (the page lists again only when an event tells it: the bound is generous for a loaded machine)
      await waitFor(page, 'the folder row', () => !!document.querySelector('[data-testid=folder-row][data-name="notes/"]'), undefined, 60_000);
      console.log(`${engine}: a CLI push shown after ${Date.now() - t0} ms`);
      assert.match(await textOf(page, 'p[role=status]'), /notes\/today\.txt version 1 arrived from another device/);
      await page.click('button[aria-label="Open folder notes"]');
      await waitFor(page, 'the file row', (s) => !!document.querySelector(s), fileRow('notes/today.txt'));
      assert.match(await textOf(page, '[data-testid=breadcrumbs]'), /All files\s*\/?\s*notes/);

      // the history of the CLI's version, open while the CLI pushes another: it shows at once
      await openHistory(page, 'notes/today.txt');
      assert.match(await textOf(page, `${fileRow('notes/today.txt')} [data-testid=version-row] .client`), /from dsync on /);
      writeFileSync(file, insertAt(content(50_000), 10, 'x'));
      await cliPush(server, dir, file, 'notes/today.txt');
      await waitFor(page, 'version 2 in the open history', (s) => !!document.querySelector(s), `${fileRow('notes/today.txt')} [data-testid=version-row][data-version="2"]`, 60_000);
    });

    flow('a file overwritten in place while it syncs: nothing is stored, and the page says it cannot be read', async ({ page, server, dir }) => {
      const file = path.join(dir, 'archive.tar');
      await writePseudoRandomFile(file, 256 << 20, 7);
      await openPage(page, server.url);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      // While it is chunked, the whole file is overwritten in place with other bytes, the
      // server frozen (SIGSTOP) for a moment first, so that the page chunks ahead of what it can
      // send. Chromium refuses to read a file changed since it was picked: its next read fails,
      // and so does its socket's read of a Delta Run of it (the socket closes; the push is
      // retried and its chunking refused). Firefox and WebKit read the new bytes, so only bytes
      // hashed before the change and sent after it show it (the server refuses to commit them).
      // Waits for the sync to be under way (chunking, or past it on a fast engine that a slow
      // poll under load sees only later): every step before the commit reads the file again.
      await waitFor(page, 'the sync under way', (s) => /^(chunking|sending|checksums-sent|tokens-received)$/.test(document.querySelector(s)?.getAttribute('data-step') ?? ''), cardSelector('archive.tar', 'up'), 60_000);
      server.freeze();
      try {
        await new Promise((r) => setTimeout(r, 1000));
        const fh = await open(file, 'r+');
        const other = Buffer.alloc(16 << 20, 0x5a);
        for (let at = 0; at < 256 << 20; at += other.length) await fh.write(other, 0, other.length, at);
        await fh.close();
      } finally {
        server.freeze(false);
      }
      const problem = await waitFor(
        page,
        'the sync to fail',
        (s) => {
          const card = document.querySelector(s);
          if (card?.getAttribute('data-status') === 'done') return { kind: 'done', text: 'the sync was committed' };
          const p = card?.querySelector('[data-testid=problem]');
          return p ? { kind: p.getAttribute('data-kind'), text: p.textContent } : null;
        },
        cardSelector('archive.tar', 'up'),
        120_000,
      );
      assert.equal(problem.kind, 'unreadable', problem.text ?? '');
      assert.match(problem.text ?? '', /This file cannot be read/);
      assert.equal(await server.latest('archive.tar'), 0);
    });

    flow('phone size (390 px): a sync and a delta re-sync; nothing overflows sideways; the rename dialog fits', async ({ page, server, dir }) => {
      await page.setViewport(390, 844);
      await openPage(page, server.url);
      assert.equal(await page.evaluate(() => innerWidth), 390);
      const v1 = content(3_000_000);
      const file = path.join(dir, 'photo.jpg');
      writeFileSync(file, v1);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      await result(page, 'photo.jpg');
      const v2 = insertAt(v1, 100, 'edited on the phone');
      writeFileSync(file, v2);
      await page.setInputFiles('[data-testid=file-input]', [file]);
      assert.equal((await result(page, 'photo.jpg')).version, 2);
      assert.ok((await server.storedBytes('photo.jpg', 2)).equals(v2));
      await openHistory(page, 'photo.jpg');
      const fits = () => page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok((await fits()) <= 390, `page width ${await fits()}`);
      // the narrow layout: each version's actions share the row's width
      const actions = await page.evaluate(() => {
        const r = document.querySelector('[data-testid=version-row] .version-actions')!.getBoundingClientRect();
        return { left: r.left, right: r.right };
      });
      assert.ok(actions.left >= 0 && actions.right <= 390, JSON.stringify(actions));
      await page.click('button[aria-label="Rename or move photo.jpg"]');
      const box = await waitFor(page, 'the rename dialog', () => {
        const d = document.querySelector('[data-testid=dialog][open]');
        const r = d?.getBoundingClientRect();
        return r && r.width > 0 ? { left: r.left, right: r.right } : null;
      });
      assert.ok(box.left >= 0 && box.right <= 390, JSON.stringify(box));
      assert.ok((await fits()) <= 390);
    });
  });
}

// The page in a browser without wasm SIMD (Safari before 16.4), as WebKit with it turned off:
// the sync worker and its hash workers load the module built without it (client/src/wasm-init.ts).
if (engines.includes('webkit')) {
  describe('webkit without wasm SIMD', () => {
    let browser: EngineDriver;
    before(async () => {
      browser = await launch('webkit', { webkitEnv: { JSC_useWasmSIMD: '0' } });
    });
    after(() => browser?.close());

    test('a sync, a large file hashed by the hash workers, and a delta re-sync, with the module built without SIMD', { timeout: 300_000 }, () =>
      fresh(browser, async ({ page, server, dir }) => {
        await openPage(page, server.url);
        // the probe of client/src/wasm-init.ts: a function returning a v128 constant
        const simd = await page.evaluate(() => WebAssembly.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 22, 1, 20, 0, 253, 12, ...new Array(16).fill(0), 11])));
        assert.equal(simd, false, 'wasm SIMD is off');
        const v1 = content(4_000_000);
        const file = path.join(dir, 'notes.bin');
        writeFileSync(file, v1);
        await page.setInputFiles('[data-testid=file-input]', [file]);
        assert.equal((await result(page, 'notes.bin')).version, 1);
        const v2 = insertAt(v1, 1_000_000, 'an edit');
        writeFileSync(file, v2);
        await page.setInputFiles('[data-testid=file-input]', [file]);
        const second = await result(page, 'notes.bin');
        assert.equal(second.report?.knownVersion, 1);
        assert.ok(second.delta < v2.length / 20, `delta ${second.delta}`);
        assert.ok((await server.storedBytes('notes.bin', 2)).equals(v2));
        // 70 MB: its chunks' strong hashes come from the hash workers (OFF_THREAD_MIN)
        const big = path.join(dir, 'big.bin');
        const sha = await writePseudoRandomFile(big, 70 << 20, 3);
        await page.setInputFiles('[data-testid=file-input]', [big]);
        assert.equal((await result(page, 'big.bin', 'up', 180_000)).version, 1);
        assert.equal(await server.storedSha256('big.bin', 1), sha);
      }),
    );
  });
}
