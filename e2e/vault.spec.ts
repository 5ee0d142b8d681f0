// Vaults in the page (client/src/components/VaultsPanel.tsx, docs/web-client.md "Vaults") in
// headless Chromium against a real server: a vault created in the page shows its recovery key
// once; two dropped files go in; locked, the vault is unlocked in another browser context
// with its passphrase (a wrong one refused), both files download byte-exact; a file the CLI
// pushes appears after a refresh and downloads byte-exact; the server's data folder holds no
// file name and no plaintext; a server whose vault head is rolled back is refused; a page
// hidden for 5 minutes forgets the keys.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Page } from '@playwright/test';
import { pushBytes } from '../harness/helpers.ts';
import { content } from './data.ts';
import { expect, openPage, root, test } from './fixtures.ts';

const PASSPHRASE = 'correct horse battery staple';
/** Argon2id takes seconds, more on a loaded machine: unlocks are waited for generously. */
const UNLOCK = { timeout: 120_000 };

async function vaultsView(page: Page, url: string) {
  await openPage(page, url);
  await page.getByTestId('view-vaults').click();
  await expect(page.getByTestId('vaults')).toBeVisible();
}

/** Unlocks vault `id` with `secret`; resolves once the attempt has ended (unlocked or refused). */
async function unlock(page: Page, id: string, secret: string) {
  const v = page.locator(`[data-testid=vault][data-id="${id}"]`);
  if (await v.getByRole('button', { name: /^Unlock vault/ }).isVisible()) await v.getByRole('button', { name: /^Unlock vault/ }).click();
  await v.getByRole('textbox', { name: 'Passphrase' }).fill(secret);
  await v.getByRole('button', { name: 'Unlock', exact: true }).click();
  await expect(page.getByText(/Checking the passphrase/)).toBeHidden(UNLOCK);
}

/** Clicks `name` in the unlocked vault and reads the file the browser saves. */
async function download(page: Page, name: string): Promise<Buffer> {
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60_000 }), page.locator(`[data-testid=vault-file][data-name="${name}"] button`).click()]);
  expect(dl.suggestedFilename()).toBe(name.split('/').pop());
  return readFileSync((await dl.path())!);
}

/** Every file under `dir`, with its bytes. */
function everyFile(dir: string): { file: string; bytes: Buffer }[] {
  const out: { file: string; bytes: Buffer }[] = [];
  const walk = (p: string) => {
    for (const n of readdirSync(p)) {
      const q = path.join(p, n);
      if (statSync(q).isDirectory()) walk(q);
      else out.push({ file: path.relative(dir, q), bytes: readFileSync(q) });
    }
  };
  walk(dir);
  return out;
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
  await expect(key).toHaveText(/^([A-Z2-7]{5}-){10}[A-Z2-7]{5}$/, UNLOCK);
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
    await unlock(page2, id, 'not the passphrase');
    await expect(page2.getByTestId('vault-error')).toHaveText('Wrong passphrase: it does not open this vault.');
    await expect(page2.getByTestId('vault')).toHaveAttribute('data-state', 'locked');
    await unlock(page2, id, PASSPHRASE);
    await expect(page2.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked');
    test.info().annotations.push({ type: 'unlock (Argon2id) ms', description: String(await page2.evaluate(() => document.documentElement.dataset.vaultUnlockMs)) });
    for (const [name, bytes] of Object.entries(files)) expect((await download(page2, name)).equals(bytes), name).toBe(true);

    // the CLI pushes a file; the page shows it after a refresh, byte-exact
    const cliFile = path.join(dir, 'from-the-cli.bin');
    const cliBytes = content(300_000);
    writeFileSync(cliFile, cliBytes);
    mkdirSync(path.join(dir, 'config'));
    await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'vault', 'push', id, cliFile, 'cli/from-the-cli.bin'], {
      env: { ...process.env, DSYNC_SERVER: server.url, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE },
    });
    await page2.getByRole('button', { name: 'Refresh' }).click();
    await expect(page2.locator('[data-testid=vault-file][data-name="cli/from-the-cli.bin"]')).toBeVisible();
    expect((await download(page2, 'cli/from-the-cli.bin')).equals(cliBytes)).toBe(true);

    // the server's data folder: no file name, no 16-byte run of any file's bytes (a plain file
    // of random bytes, stored to show that the search finds what is there, is found)
    const plain = randomBytes(50_000);
    await pushBytes({ wsUrl: server.url.replace('http', 'ws') + '/sync' }, 'plain-control.txt', plain);
    const stored = everyFile(server.data);
    const holds = (needle: Buffer) => stored.some((f) => f.bytes.includes(needle) || f.file.includes(needle.toString('latin1')));
    expect(holds(Buffer.from('plain-control.txt')) && holds(plain.subarray(30_000, 30_016))).toBe(true);
    expect(stored.some((f) => f.file.includes('vaults'))).toBe(true);
    const needles: Buffer[] = [...Object.keys(files), 'from-the-cli', 'diary-entry', 'vault-secret'].map((n) => Buffer.from(n));
    for (const bytes of [...Object.values(files), cliBytes]) for (let at = 0; at + 16 <= bytes.length; at += 4093) needles.push(bytes.subarray(at, at + 16));
    expect(needles.filter(holds).map((n) => n.toString('latin1'))).toEqual([]);
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
async function createInPage(page: Page, url: string): Promise<string> {
  await vaultsView(page, url);
  await page.getByRole('button', { name: 'New vault' }).click();
  const form = page.getByTestId('vault-create');
  await form.getByLabel('Passphrase', { exact: true }).fill(PASSPHRASE);
  await form.getByLabel('Passphrase again').fill(PASSPHRASE);
  await form.getByRole('button', { name: 'Create' }).click();
  const recoveryKey = (await page.getByTestId('recovery-key').textContent(UNLOCK))!;
  await page.getByRole('button', { name: 'I saved it' }).click();
  return recoveryKey;
}

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
  await expect(page.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked', UNLOCK);
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
