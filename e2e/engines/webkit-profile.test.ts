// What Safari sees of kept copies: WebKitGTK in a persistent profile with Safari's storage
// features on (OPFS, sync access handles in workers, writable streams, the Storage API), driven
// by webkit-profile.py (python3-gi, under xvfb-run), against a real server. A 10 MB file is
// picked and synced; its bytes are kept in OPFS (where WebKitGTK's worker refuses sync access
// handles and leaves the file it refused unwritable, the page writes through a writable stream,
// decided on a probe file); the browser is closed and started again on the same profile, and an
// 8-byte edit then goes up as copies of the kept bytes and costs on the wire what the same edit
// costs in Chromium (within 10%, bytes). Run by scripts/test.sh and `npm run test:engines`.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { content } from '../data.ts';
import globalSetup from '../global-setup.ts';
import { TestServer } from '../server.ts';
import { type PageDriver, launch, openPage, result, waitFor } from './drivers.ts';
import { launchWebKitProfile, webkitProfileMissing } from './webkit-profile.ts';

globalSetup(); // the built page, not older than its sources

const SIZE = 10_000_000;
const EDIT_AT = 6_000_000;

/** `b` with 8 bytes overwritten at `at`. */
function edit8(b: Buffer, at: number): Buffer {
  const c = Buffer.from(b);
  for (let i = 0; i < 8; i++) c[at + i] ^= 0xa5;
  return c;
}

/** The newest upload's report (the card's data-report). */
const reportOf = (page: PageDriver, name: string) =>
  page.evaluate((sel) => JSON.parse(document.querySelector(sel)?.querySelector('[data-testid=result]')?.getAttribute('data-report') ?? 'null'), `[data-testid=transfer][data-name="${name}"][data-direction=up]`) as Promise<{ keptBasis?: boolean; knownVersion?: number; literalBytes?: number; traffic: { wire: number } }>;

/** The kept panel's line once it names one kept file (and no error); its `data-where`. */
async function keptOne(page: PageDriver, size: string): Promise<string> {
  const panel = await waitFor(
    page,
    'the kept copy',
    (line) => {
      const err = document.querySelector('[data-testid=kept-error]')?.textContent;
      if (err) return { err };
      const why = document.querySelector('[data-testid=kept-why]')?.textContent;
      if (why) return { err: why };
      if (document.querySelector('[data-testid=kept-usage]')?.textContent !== line) return null;
      return { where: document.querySelector('[data-testid=kept-settings]')?.getAttribute('data-where') ?? '' };
    },
    `${size} kept of 1 file`,
    60_000,
  );
  if (panel.err !== undefined) throw new Error(`nothing kept: ${panel.err}`);
  return panel.where!;
}

/** Picks `file` holding `bytes`; the upload's report once done. */
async function push(page: PageDriver, file: string, bytes: Buffer) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, bytes);
  await page.setInputFiles('[data-testid=file-input]', [file]);
  const r = await result(page, path.basename(file), 'up', 120_000);
  return { ...r, full: await reportOf(page, path.basename(file)) };
}

test('WebKit, persistent profile, OPFS on: a pushed file is kept, still after a restart, and an 8-byte edit costs what it costs in Chromium', { timeout: 600_000 }, async () => {
  const missing = webkitProfileMissing();
  if (missing) throw new Error(`this test needs ${missing}`);
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-webkit-profile-'));
  const v1 = content(SIZE);
  const v2 = edit8(v1, EDIT_AT);
  try {
    // Chromium: the same file and edit against a server of its own
    const chromium = await launch('chromium');
    let chromiumWire: number;
    {
      const server = await new TestServer().start();
      const page = await chromium.newPage();
      try {
        await openPage(page, server.url);
        await push(page, path.join(dir, 'c', 'notes.bin'), v1);
        await keptOne(page, '10 MB');
        const r = await push(page, path.join(dir, 'c', 'notes.bin'), v2);
        assert.equal(r.full.keptBasis, true);
        chromiumWire = r.full.traffic.wire;
      } finally {
        await page.close();
        await chromium.close();
        await server.stop();
      }
    }

    const server = await new TestServer().start();
    const profile = path.join(dir, 'profile');
    const file = path.join(dir, 'w', 'notes.bin');
    try {
      let page = await launchWebKitProfile(profile);
      try {
        console.log(`WebKitGTK ${page.version} with ${page.features.join(', ')}`);
        await openPage(page, server.url);
        assert.equal(await page.evaluate(() => typeof navigator.storage?.getDirectory), 'function');
        const first = await push(page, file, v1);
        assert.equal(first.version, 1);
        assert.equal(await keptOne(page, '10 MB'), 'opfs');
      } finally {
        await page.close();
      }
      // the same profile again: the copy is still kept, and the edit goes up as copies of it
      page = await launchWebKitProfile(profile);
      try {
        await openPage(page, server.url);
        assert.equal(await keptOne(page, '10 MB'), 'opfs');
        const r = await push(page, file, v2);
        assert.equal(r.version, 2);
        assert.equal(r.full.knownVersion, 1);
        assert.equal(r.full.keptBasis, true, 'copied from the kept bytes');
        assert.ok((await server.storedBytes('notes.bin', 2)).equals(v2));
        const wire = r.full.traffic.wire;
        console.log(`an 8-byte edit of a 10 MB file against the kept copy: ${wire} B on the wire in WebKit, ${chromiumWire} B in Chromium`);
        assert.ok(Math.abs(wire - chromiumWire) <= chromiumWire * 0.1, `WebKit ${wire} B, Chromium ${chromiumWire} B`);
      } finally {
        await page.close();
      }
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
