// A vault's passphrase changed in the page (client/src/components/VaultsPanel.tsx, Change
// passphrase; docs/vaults.md "Changing the passphrase") in headless Chromium against a real
// server: the new passphrase typed twice (two that differ refused), the vault locked, the old
// passphrase refused, the new one unlocks and both files download byte-exact; the CLI opens the
// vault with the new passphrase and not with the old one.
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { content } from './data.ts';
import { ARGON, createVault, expect, root, test, unlockVault } from './fixtures.ts';

const OLD = 'correct horse battery staple';
const NEW = 'a new passphrase for the page test';

/** `dsync vault ls ID` with `passphrase`: its exit code and output. */
async function cliLs(url: string, dir: string, id: string, passphrase: string): Promise<{ code: number; out: string }> {
  mkdirSync(path.join(dir, 'config'), { recursive: true });
  return promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'vault', 'ls', id], {
    env: { ...process.env, DSYNC_SERVER: url, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_CACHE_DIR: path.join(dir, 'cache'), DSYNC_VAULT_PASSPHRASE: passphrase },
  }).then(
    (r) => ({ code: 0, out: r.stdout }),
    (e: { code: number; stderr: string }) => ({ code: e.code, out: e.stderr }),
  );
}

test('a vault\'s passphrase changed in the page: lock, the old one refused, the new one unlocks and the files are there', async ({ page, server, dir }) => {
  test.setTimeout(600_000);
  const files = { 'ledger-2026.bin': content(400_000), 'letter-to-the-bank.txt': content(30_000) };

  await createVault(page, server.url, OLD);
  const vault = page.getByTestId('vault');
  const id = (await vault.getAttribute('data-id'))!;

  await page.evaluate((list) => {
    const dt = new DataTransfer();
    for (const [name, b64] of list) dt.items.add(new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) as BlobPart], name));
    for (const type of ['dragenter', 'dragover', 'drop']) document.body.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, Object.entries(files).map(([n, b]) => [n, b.toString('base64')]));
  for (const name of Object.keys(files)) await expect(page.locator(`[data-testid=vault-file][data-name="${name}"]`)).toBeVisible({ timeout: 60_000 });

  // the new passphrase twice, as for a new vault: two that differ are refused
  await vault.getByRole('button', { name: 'Change passphrase' }).click();
  const form = page.getByTestId('vault-passphrase');
  await form.getByLabel('New passphrase', { exact: true }).fill(NEW);
  await form.getByLabel('New passphrase again').fill(NEW + ' typo');
  await form.getByRole('button', { name: 'Change passphrase' }).click();
  await expect(page.getByTestId('vault-error')).toHaveText('The two passphrases differ.');
  await form.getByLabel('New passphrase again').fill(NEW);
  await form.getByRole('button', { name: 'Change passphrase' }).click();
  await expect(page.getByText(/The passphrase of vault \w+ changed/)).toBeVisible(ARGON);
  await expect(page.getByTestId('vault-passphrase')).toHaveCount(0);
  await expect(page.getByTestId('vault-error')).toHaveCount(0);

  // locked, the old passphrase no longer opens it; the new one does, with every file
  await page.getByRole('button', { name: 'Lock' }).click();
  await expect(vault).toHaveAttribute('data-state', 'locked');
  await unlockVault(page, id, OLD);
  await expect(page.getByTestId('vault-error')).toHaveText('Wrong passphrase: it does not open this vault.');
  await expect(vault).toHaveAttribute('data-state', 'locked');
  await unlockVault(page, id, NEW);
  await expect(vault).toHaveAttribute('data-state', 'unlocked');
  for (const [name, bytes] of Object.entries(files)) {
    const row = page.locator(`[data-testid=vault-file][data-name="${name}"]`);
    const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60_000 }), row.getByTestId('vault-download').click()]);
    expect(readFileSync((await dl.path())!).equals(bytes), name).toBe(true);
  }

  // the CLI agrees
  const old = await cliLs(server.url, dir, id, OLD);
  expect(old.code).toBe(1);
  expect(old.out).toContain('the passphrase does not open vault');
  const now = await cliLs(server.url, dir, id, NEW);
  expect(now.code, now.out).toBe(0);
  expect(now.out).toContain('ledger-2026.bin');
});
