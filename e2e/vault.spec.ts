// Vaults in the page (client/src/components/VaultsPanel.tsx, docs/web-client.md "Vaults") in
// headless Chromium against a real server: a vault created in the page shows its recovery key
// once; two dropped files go in; locked, the vault is unlocked in another browser context
// with its passphrase (a wrong one refused), both files download byte-exact; a file the CLI
// pushes appears after a refresh and downloads byte-exact; the server's data folder holds no
// file name and no plaintext; a server whose vault head is rolled back is refused; a page
// hidden for 5 minutes forgets the keys; at a phone's width, a file's history downloads and
// restores an old version, and a file is renamed, deleted (`dsync vault ls --deleted` lists
// it), brought back from its history, deleted again and forgotten (Forget); a CLI push, rename and delete while the page is open
// show without a reload or a click; after a reload the vault lists from the pieces kept in
// IndexedDB, and a damaged kept piece is fetched again.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Page } from '@playwright/test';
import { pushBytes } from '../harness/helpers.ts';
import { storedFiles } from '../harness/stored-files.ts';
import { content } from './data.ts';
import { ARGON, createVault, expect, openPage, root, test, unlockVault } from './fixtures.ts';

const PASSPHRASE = 'correct horse battery staple';

async function vaultsView(page: Page, url: string) {
  await openPage(page, url);
  await page.getByTestId('view-vaults').click();
  await expect(page.getByTestId('vaults')).toBeVisible();
}

/** Clicks `name` in the unlocked vault (or the button `button`) and reads the file the browser saves. */
async function download(page: Page, name: string, button = page.locator(`[data-testid=vault-file][data-name="${name}"]`).getByTestId('vault-download')): Promise<Buffer> {
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60_000 }), button.click()]);
  expect(dl.suggestedFilename()).toBe(name.split('/').pop());
  return readFileSync((await dl.path())!);
}

/** Runs `dsync vault ARGS` with the vault's passphrase against `url`; its standard output. */
async function cli(url: string, dir: string, ...args: string[]): Promise<string> {
  mkdirSync(path.join(dir, 'config'), { recursive: true });
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'vault', ...args], {
    env: { ...process.env, DSYNC_SERVER: url, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE },
  });
  return stdout;
}

/** `dsync vault ls ID [--deleted]`: its files, one JSON object a line (standard output is no terminal). */
async function ls(url: string, dir: string, id: string, ...flags: string[]): Promise<{ name: string; deleted?: number }[]> {
  return (await cli(url, dir, 'ls', id, ...flags))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { name: string; deleted?: number });
}

/** The needles the server's data folder must not hold: each name, and a 16-byte run of every
 *  file's bytes every 4093 bytes. A plain file of random bytes, stored beside them to show that
 *  the search finds what is there, is found. */
async function expectNothingInTheClear(server: { url: string; data: string }, names: string[], contents: Buffer[]) {
  const plain = randomBytes(50_000);
  await pushBytes({ wsUrl: server.url.replace('http', 'ws') + '/sync' }, 'plain-control.txt', plain);
  const stored = storedFiles(server.data);
  const holds = (needle: Buffer) => stored.some((f) => f.bytes.includes(needle) || f.file.includes(needle.toString('latin1')));
  expect(holds(Buffer.from('plain-control.txt')) && holds(plain.subarray(30_000, 30_016))).toBe(true);
  expect(stored.some((f) => f.file.includes('vaults'))).toBe(true);
  const needles: Buffer[] = names.map((n) => Buffer.from(n));
  for (const bytes of contents) for (let at = 0; at + 16 <= bytes.length; at += 4093) needles.push(bytes.subarray(at, at + 16));
  expect(needles.filter(holds).map((n) => n.toString('latin1'))).toEqual([]);
}


test('a vault in the page: create, recovery key once, drop, lock, unlock elsewhere, download, a CLI push, nothing in the clear on the server', async ({ page, browser, server, dir }) => {
  test.setTimeout(600_000);
  const files = { 'vault-secret-plan.bin': content(700_000), 'diary-entry-tuesday.txt': content(90_000) };
  // the page's CSP (server/src/http/app.ts) holds for the vault worker, its wasm and downloads
  await page.addInitScript(() => {
    const seen: string[] = ((window as unknown as { cspViolations: string[] }).cspViolations = []);
    document.addEventListener('securitypolicyviolation', (e) => seen.push(`${e.violatedDirective} ${e.blockedURI}`));
  });

  // create: the passphrase twice, the recovery key shown once
  await vaultsView(page, server.url);
  await page.getByRole('button', { name: 'New vault' }).click();
  const form = page.getByTestId('vault-create');
  await form.getByLabel('Passphrase', { exact: true }).fill(PASSPHRASE);
  await form.getByLabel('Passphrase again').fill(PASSPHRASE + ' typo');
  await form.getByRole('button', { name: 'Create' }).click();
  await expect(page.getByTestId('vault-error')).toHaveText('The two passphrases differ.');
  await form.getByLabel('Passphrase again').fill(PASSPHRASE);
  await form.getByRole('button', { name: 'Create' }).click();
  const key = page.getByTestId('recovery-key');
  await expect(key).toHaveText(/^([A-Z2-7]{5}-){10}[A-Z2-7]{5}$/, ARGON);
  const recoveryKey = await key.textContent();
  const vault = page.getByTestId('vault');
  await expect(vault).toHaveAttribute('data-state', 'unlocked');
  const id = (await vault.getAttribute('data-id'))!;
  await page.getByRole('button', { name: 'I saved it' }).click();
  await expect(page.getByTestId('vault-recovery')).toHaveCount(0);
  expect(await page.content()).not.toContain(recoveryKey);
  await expect(page.getByText('This vault is empty.')).toBeVisible();

  // two files dropped on the page (real drag events with a DataTransfer) go into the vault
  await page.evaluate((list) => {
    const dt = new DataTransfer();
    for (const [name, b64] of list) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) as BlobPart], name));
    for (const type of ['dragenter', 'dragover', 'drop']) document.body.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, Object.entries(files).map(([n, b]) => [n, b.toString('base64')]));
  for (const name of Object.keys(files)) await expect(page.locator(`[data-testid=vault-file][data-name="${name}"]`)).toBeVisible({ timeout: 60_000 });
  await expect(page.getByTestId('vault-progress')).toContainText('stored');
  // nothing went to the plain folder
  expect((await (await page.request.get(`${server.url}/api/files?prefix=&recursive=1`)).json()).files).toEqual([]);

  expect(await page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations)).toEqual([]);

  // lock: the files are gone from the page
  await page.getByRole('button', { name: 'Lock' }).click();
  await expect(vault).toHaveAttribute('data-state', 'locked');
  await expect(page.getByTestId('vault-file')).toHaveCount(0);

  // another browser: a wrong passphrase refused, the right one opens, both files byte-exact
  const other = await browser.newContext({ acceptDownloads: true });
  try {
    const page2 = await other.newPage();
    await vaultsView(page2, server.url);
    await unlockVault(page2, id, 'not the passphrase');
    await expect(page2.getByTestId('vault-error')).toHaveText('Wrong passphrase: it does not open this vault.');
    await expect(page2.getByTestId('vault')).toHaveAttribute('data-state', 'locked');
    await unlockVault(page2, id, PASSPHRASE);
    await expect(page2.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked');
    test.info().annotations.push({ type: 'unlock (Argon2id) ms', description: String(await page2.evaluate(() => document.documentElement.dataset.vaultUnlockMs)) });
    for (const [name, bytes] of Object.entries(files)) expect((await download(page2, name)).equals(bytes), name).toBe(true);

    // the CLI pushes a file; the page shows it after a refresh, byte-exact
    const cliFile = path.join(dir, 'from-the-cli.bin');
    const cliBytes = content(300_000);
    writeFileSync(cliFile, cliBytes);
    await cli(server.url, dir, 'push', id, cliFile, 'cli/from-the-cli.bin');
    await page2.getByRole('button', { name: 'Refresh' }).click();
    await expect(page2.locator('[data-testid=vault-file][data-name="cli/from-the-cli.bin"]')).toBeVisible();
    expect((await download(page2, 'cli/from-the-cli.bin')).equals(cliBytes)).toBe(true);

    // the server's data folder: no file name, no 16-byte run of any file's bytes
    await expectNothingInTheClear(server, [...Object.keys(files), 'from-the-cli', 'diary-entry', 'vault-secret'], [...Object.values(files), cliBytes]);
  } finally {
    await other.close();
  }
});

/** The store's head of vault `id`: a directory of generations, the newest holding the head
 *  (server/src/store/local.ts; shared/test/vault-cli.test.ts reads it the same way). */
function headGenerations(data: string, id: string): { dir: string; newest: number } {
  const found: string[] = [];
  const walk = (p: string) => {
    for (const n of readdirSync(p)) {
      const q = path.join(p, n);
      if (!statSync(q).isDirectory()) continue;
      if (q.endsWith(path.join('heads', id) + '@h')) found.push(q);
      else walk(q);
    }
  };
  walk(data);
  expect(found).toHaveLength(1);
  return { dir: found[0], newest: Math.max(...readdirSync(found[0]).filter((n) => /^\d+$/.test(n)).map(Number)) };
}

/** Creates a vault in the page's Vaults view with PASSPHRASE: its recovery key, once seen. */
const createInPage = (page: Page, url: string) => createVault(page, url, PASSPHRASE);

test('at 390 px, by keyboard: a server that rolls a vault back is refused in the page, after a reload too; a recovery key unlocks', async ({ page, server, dir }) => {
  test.setTimeout(600_000);
  await page.setViewportSize({ width: 390, height: 844 });
  const recoveryKey = await createInPage(page, server.url);
  const id = (await page.getByTestId('vault').getAttribute('data-id'))!;
  const first = path.join(dir, 'first.txt');
  writeFileSync(first, content(20_000));
  await page.getByTestId('vault-file-input').setInputFiles(first);
  await expect(page.locator('[data-testid=vault-file][data-name="first.txt"]')).toBeVisible({ timeout: 60_000 });
  const { dir: heads, newest } = headGenerations(server.data, id);
  const oldHead = readFileSync(path.join(heads, String(newest)));
  const second = path.join(dir, 'second.txt');
  writeFileSync(second, content(20_000));
  await page.getByTestId('vault-file-input').setInputFiles(second);
  await expect(page.locator('[data-testid=vault-file][data-name="second.txt"]')).toBeVisible({ timeout: 60_000 });

  // the store's operator puts the older head back: the page refuses it and keeps what it showed
  writeFileSync(path.join(heads, String(headGenerations(server.data, id).newest + 1)), oldHead);
  await page.getByRole('button', { name: 'Refresh' }).click();
  await expect(page.getByTestId('vault-error')).toContainText(/^Refused: .*a rollback/);
  // after a reload (the keys forgotten, the last head seen kept), unlocked with the recovery key
  await page.reload();
  await page.getByTestId('view-vaults').click();
  await expect(page.getByTestId('vault')).toHaveAttribute('data-state', 'locked');
  await page.getByRole('button', { name: /^Unlock vault/ }).focus();
  await page.keyboard.press('Enter');
  await page.getByRole('radio', { name: 'Passphrase' }).focus();
  await page.keyboard.press('ArrowRight');
  await expect(page.getByRole('radio', { name: 'Recovery key' })).toBeChecked();
  await page.getByRole('textbox', { name: 'Recovery key' }).focus();
  await page.keyboard.type(recoveryKey.toLowerCase());
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked', ARGON);
  await expect(page.getByTestId('vault-error')).toContainText(/^Refused: .*a rollback/);
  await expect(page.getByTestId('vault-file')).toHaveCount(0);
  // nothing is wider than the phone's screen
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
});

test('a page hidden for 5 minutes forgets the unlocked vault; hidden for 1 minute it does not', async ({ page, server }) => {
  test.setTimeout(600_000);
  await page.clock.install();
  await page.clock.resume();
  await createInPage(page, server.url);
  const vault = page.getByTestId('vault');
  await expect(vault).toHaveAttribute('data-state', 'unlocked');
  const visibility = (state: 'hidden' | 'visible') =>
    page.evaluate((s) => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => s });
      document.dispatchEvent(new Event('visibilitychange'));
    }, state);
  await visibility('hidden');
  await page.clock.fastForward('01:00');
  await visibility('visible');
  await expect(vault).toHaveAttribute('data-state', 'unlocked');
  await visibility('hidden');
  await page.clock.fastForward('05:01');
  await expect(vault).toHaveAttribute('data-state', 'locked');
  await visibility('visible');
  await expect(page.getByTestId('vault-file')).toHaveCount(0);
  await expect(page.getByRole('button', { name: /^Unlock vault/ })).toBeVisible();
});

/** The row of `name` in the unlocked vault (a live file), or among its deleted files. */
const row = (page: Page, name: string, deleted = false) => page.locator(`[data-testid=${deleted ? 'vault-deleted-file' : 'vault-file'}][data-name="${name}"]`);

/** Confirms the open dialog with `action` (a new name typed first, for a rename). */
async function confirm(page: Page, action: string, value?: string) {
  const dialog = page.getByTestId('dialog');
  if (value !== undefined) await dialog.getByRole('textbox').fill(value);
  await dialog.getByRole('button', { name: action, exact: true }).click();
  await expect(dialog).toHaveCount(0, { timeout: 60_000 });
}

test("at 390 px: a file's history downloads and restores an old version; a rename; a delete kept in the history (dsync vault ls --deleted) and brought back; Forget purges it; nothing in the clear", async ({ page, server, dir }) => {
  test.setTimeout(600_000);
  await page.setViewportSize({ width: 390, height: 844 });
  await createInPage(page, server.url);
  const id = (await page.getByTestId('vault').getAttribute('data-id'))!;
  const one = content(120_000);
  const two = Buffer.concat([one.subarray(0, 60_000), content(5_000), one.subarray(60_000)]);
  const file = path.join(dir, 'quarterly-report.txt');
  writeFileSync(file, one);
  await page.getByTestId('vault-file-input').setInputFiles(file);
  await expect(page.getByTestId('vault-progress')).toContainText('quarterly-report.txt stored', { timeout: 60_000 });
  writeFileSync(file, two);
  await page.getByTestId('vault-file-input').setInputFiles(file);
  await expect(page.getByTestId('vault-progress')).toContainText(/quarterly-report.txt stored: \d+ of \d+ chunks new/, { timeout: 60_000 });

  // the history: two versions, newest first, this browser's label on each
  await page.getByRole('button', { name: 'History of quarterly-report.txt' }).click();
  const versions = row(page, 'quarterly-report.txt').getByTestId('vault-version');
  await expect(versions).toHaveCount(2, { timeout: 60_000 });
  await expect(versions.first()).toHaveAttribute('data-version', '2');
  await expect(versions.first()).toContainText('latest');
  await expect(versions.first()).toContainText('from Chrome on');
  // an old version downloads byte-exact; restored, it is the newest (version 3)
  expect((await download(page, 'quarterly-report.txt', page.getByRole('button', { name: 'Download quarterly-report.txt version 1' }))).equals(one)).toBe(true);
  expect((await download(page, 'quarterly-report.txt', page.getByRole('button', { name: 'Download quarterly-report.txt version 2' }))).equals(two)).toBe(true);
  await page.getByRole('button', { name: 'Restore quarterly-report.txt version 1' }).click();
  await confirm(page, 'Restore');
  await expect(versions).toHaveCount(3, { timeout: 60_000 });
  await expect(versions.first()).toHaveAttribute('data-version', '3');
  expect((await download(page, 'quarterly-report.txt')).equals(one)).toBe(true);
  // nothing is wider than the phone's screen, the history open
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);

  // a rename takes the history along
  await page.getByRole('button', { name: 'Rename quarterly-report.txt' }).click();
  await confirm(page, 'Rename', 'reports/final-numbers.txt');
  await expect(row(page, 'reports/final-numbers.txt')).toBeVisible({ timeout: 60_000 });
  await expect(row(page, 'quarterly-report.txt')).toHaveCount(0);
  await page.getByRole('button', { name: 'History of reports/final-numbers.txt' }).click();
  await expect(row(page, 'reports/final-numbers.txt').getByTestId('vault-version')).toHaveCount(3, { timeout: 60_000 });

  // a delete keeps the history: the CLI lists the file as deleted, and the page brings it back
  await page.getByRole('button', { name: 'Delete reports/final-numbers.txt' }).click();
  await confirm(page, 'Delete');
  await expect(page.getByTestId('vault-file')).toHaveCount(0, { timeout: 60_000 });
  const deleted = await ls(server.url, dir, id, '--deleted');
  expect(deleted.map((f) => f.name)).toEqual(['reports/final-numbers.txt']);
  expect(deleted[0].deleted).toBeGreaterThan(0);
  expect(await ls(server.url, dir, id)).toEqual([]);
  await page.getByTestId('vault-show-deleted').click();
  await row(page, 'reports/final-numbers.txt', true).getByRole('button', { name: 'History of reports/final-numbers.txt' }).click();
  await expect(row(page, 'reports/final-numbers.txt', true).getByTestId('vault-version')).toHaveCount(3, { timeout: 60_000 });
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  await page.getByRole('button', { name: 'Restore reports/final-numbers.txt version 2' }).click();
  await confirm(page, 'Restore');
  await expect(row(page, 'reports/final-numbers.txt')).toBeVisible({ timeout: 60_000 });
  await expect(page.getByTestId('vault-deleted-file')).toHaveCount(0);
  expect((await download(page, 'reports/final-numbers.txt')).equals(two)).toBe(true);
  expect((await ls(server.url, dir, id)).map((f) => f.name)).toEqual(['reports/final-numbers.txt']);
  expect(await ls(server.url, dir, id, '--deleted')).toEqual([]);

  // deleted again and forgotten (after a confirm): it leaves the deleted files with its history
  await row(page, 'reports/final-numbers.txt').getByRole('button', { name: 'History of reports/final-numbers.txt' }).click();
  await page.getByRole('button', { name: 'Delete reports/final-numbers.txt' }).click();
  await confirm(page, 'Delete');
  const showDeleted = page.getByTestId('vault-show-deleted');
  await expect(showDeleted).toBeVisible({ timeout: 60_000 });
  if ((await showDeleted.getAttribute('aria-expanded')) !== 'true') await showDeleted.click();
  await row(page, 'reports/final-numbers.txt', true).getByRole('button', { name: 'History of reports/final-numbers.txt' }).click();
  await page.getByRole('button', { name: 'Forget reports/final-numbers.txt' }).click();
  await expect(page.getByTestId('dialog')).toContainText('cannot be restored');
  await confirm(page, 'Forget');
  await expect(showDeleted).toHaveCount(0, { timeout: 60_000 });
  await expect(page.getByTestId('vault-progress')).toContainText('reports/final-numbers.txt forgotten');
  expect(await ls(server.url, dir, id, '--deleted')).toEqual([]);
  expect(await ls(server.url, dir, id)).toEqual([]);

  await expectNothingInTheClear(server, ['quarterly-report', 'final-numbers', 'reports/'], [one, two]);
});

test("live: the CLI's push, rename and delete show in the open vault without a reload or a click, and another page's push too", async ({ page, browser, server, dir }) => {
  test.setTimeout(600_000);
  await createInPage(page, server.url);
  const id = (await page.getByTestId('vault').getAttribute('data-id'))!;
  await expect(page.getByText('This vault is empty.')).toBeVisible();
  const bytes = content(200_000);
  const file = path.join(dir, 'pushed-from-cli.bin');
  writeFileSync(file, bytes);
  await cli(server.url, dir, 'push', id, file);
  await expect(row(page, 'pushed-from-cli.bin')).toBeVisible({ timeout: 60_000 });
  expect((await download(page, 'pushed-from-cli.bin')).equals(bytes)).toBe(true);
  await cli(server.url, dir, 'mv', id, 'pushed-from-cli.bin', 'moved-by-cli.bin');
  await expect(row(page, 'moved-by-cli.bin')).toBeVisible({ timeout: 60_000 });
  await expect(row(page, 'pushed-from-cli.bin')).toHaveCount(0);
  await cli(server.url, dir, 'rm', id, 'moved-by-cli.bin');
  await expect(page.getByTestId('vault-file')).toHaveCount(0, { timeout: 60_000 });
  await expect(page.getByTestId('vault-show-deleted')).toHaveText('Deleted files (1)');

  // another page (another browser) adds a file: this one shows it
  const other = await browser.newContext();
  try {
    const page2 = await other.newPage();
    await vaultsView(page2, server.url);
    await unlockVault(page2, id, PASSPHRASE);
    await expect(page2.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked');
    const second = path.join(dir, 'from-another-page.txt');
    writeFileSync(second, content(30_000));
    await page2.getByTestId('vault-file-input').setInputFiles(second);
    await expect(row(page, 'from-another-page.txt')).toBeVisible({ timeout: 60_000 });
  } finally {
    await other.close();
  }
  await expect(page.getByTestId('vault-error')).toHaveCount(0);
  // no reload happened: the vault stayed unlocked in this page all along
  await expect(page.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked');
});

test('after a reload the vault lists from the pieces kept in IndexedDB, fetching no pack; a damaged kept piece is dropped and fetched again', async ({ page, server, dir }) => {
  test.setTimeout(600_000);
  await createInPage(page, server.url);
  const id = (await page.getByTestId('vault').getAttribute('data-id'))!;
  const bytes = content(80_000);
  const file = path.join(dir, 'kept-notes.txt');
  writeFileSync(file, bytes);
  await page.getByTestId('vault-file-input').setInputFiles(file);
  await expect(page.getByTestId('vault-progress')).toContainText('kept-notes.txt stored', { timeout: 60_000 });
  // the vault worker's reads of packs (its tree's and manifests' pieces, a file's chunks)
  const packReads: string[] = [];
  page.on('request', (r) => r.method() === 'GET' && /\/api\/vaults\/[0-9a-f]+\/packs\/[0-9a-f]{64}$/.test(new URL(r.url()).pathname) && packReads.push(r.url()));
  const reopen = async () => {
    await page.reload();
    await page.getByTestId('view-vaults').click();
    await unlockVault(page, id, PASSPHRASE);
    await expect(row(page, 'kept-notes.txt')).toBeVisible({ timeout: 60_000 });
  };

  await reopen();
  expect(packReads).toEqual([]);
  expect((await download(page, 'kept-notes.txt')).equals(bytes)).toBe(true);
  expect(packReads.length).toBeGreaterThan(0); // the file's contents are fetched: they are not kept

  // every kept piece damaged (one bit): each is refused, dropped and fetched again
  const damaged = await page.evaluate(async () => {
    const db = await new Promise<IDBDatabase>((resolve, reject) => {
      const r = indexedDB.open('dsync-vault-pieces', 1);
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const tx = db.transaction('pieces', 'readwrite');
    let n = 0;
    await new Promise<void>((resolve, reject) => {
      const r = tx.objectStore('pieces').openCursor();
      r.onerror = () => reject(r.error);
      r.onsuccess = () => {
        const c = r.result;
        if (!c) return resolve();
        const v = c.value as { sealed: Uint8Array; at: number };
        v.sealed[v.sealed.length >> 1] ^= 1;
        c.update(v);
        n++;
        c.continue();
      };
    });
    await new Promise<void>((resolve) => (tx.oncomplete = () => resolve()));
    return n;
  });
  expect(damaged).toBeGreaterThan(0);
  packReads.length = 0;
  await reopen();
  expect(packReads.length).toBeGreaterThan(0);
  await expect(page.getByTestId('vault-error')).toHaveCount(0);
  expect((await download(page, 'kept-notes.txt')).equals(bytes)).toBe(true);
  // fetched again, they are kept again: the next reload fetches no pack to list
  packReads.length = 0;
  await reopen();
  expect(packReads).toEqual([]);
});
