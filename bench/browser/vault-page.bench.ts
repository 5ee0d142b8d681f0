// A vault in the page (client/src/components/VaultsPanel.tsx), in headless Chromium against a
// real server on loopback: how long an unlock takes (the vault worker's own time: the keyfile
// read, Argon2id with the default parameters, the sub-keys), and a first push and a pull of a
// file of random bytes, timed from the test (pick to "stored", click to the download); beside
// each push, in the same run, a plain first upload of as many other random bytes from the
// Files view (pick to its card done), the yardstick of issue 46 (a vault within 1.5× of it);
// the pull beside a plain download of the last plain file (its version's link, to the file
// saved); then a 30% edit of each (the first 30% of every MiB rewritten) pushed again. Each timed
// step starts after a `sync` (untimed), so that none pays for the write-back of the files
// written for it or of the upload before it.
//   npx playwright test -c bench/browser/playwright.config.ts bench/browser/vault-page.bench.ts
// Writes bench/results/vault-page.md (OUT= elsewhere); MIB= another size than 32 MiB.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { VAULT_ARGON2 } from '../../shared/src/base/limits.ts';
import { createVault, expect, result, root, test, watchEnd } from '../../e2e/fixtures.ts';

const UNLOCKS = 5;
const MiB = 2 ** 20;
const SIZE = Number(process.env.MIB ?? 32) * MiB;
const LONG = { timeout: 600_000 };
/** Rounds of a plain upload and a vault push, one after the other. */
const ROUNDS = 2;
/** Dirty pages written to the disk before a timed step. */
const settle = () => execFileSync('sync');

test('a vault in the page: unlock, first push, pull', async ({ page, server, dir }) => {
  test.setTimeout(1_800_000);
  const loads = [loadavg()[0]];
  await createVault(page, server.url, 'a passphrase');
  const unlocks: number[] = [];
  for (let i = 0; i < UNLOCKS; i++) {
    await page.getByRole('button', { name: 'Lock' }).click();
    await page.getByRole('button', { name: /^Unlock vault/ }).click();
    await page.getByRole('textbox', { name: 'Passphrase' }).fill('a passphrase');
    await page.evaluate(() => delete document.documentElement.dataset.vaultUnlockMs);
    await page.getByRole('button', { name: 'Unlock', exact: true }).click();
    await expect(page.getByTestId('vault')).toHaveAttribute('data-state', 'unlocked', LONG);
    unlocks.push(Number(await page.evaluate(() => document.documentElement.dataset.vaultUnlockMs)));
    loads.push(loadavg()[0]);
  }
  const plains: number[] = [];
  const pushes: number[] = [];
  let bytes = Buffer.alloc(0);
  for (let i = 0; i < ROUNDS; i++) {
    const plain = path.join(dir, `plain-${i}.bin`);
    writeFileSync(plain, randomBytes(SIZE));
    const file = path.join(dir, `random-${i}.bin`);
    bytes = randomBytes(SIZE);
    writeFileSync(file, bytes);
    await page.getByTestId('view-files').click();
    settle();
    let t = Date.now();
    await page.getByTestId('file-input').setInputFiles(plain);
    await result(page, `plain-${i}.bin`, LONG);
    plains.push(Date.now() - t);
    await page.getByTestId('view-vaults').click();
    settle();
    t = Date.now();
    await page.getByTestId('vault-file-input').setInputFiles(file);
    await expect(page.getByTestId('vault-progress')).toContainText(`random-${i}.bin stored`, LONG);
    pushes.push(Date.now() - t);
    loads.push(loadavg()[0]);
  }
  settle();
  let t = Date.now();
  const [dl] = await Promise.all([page.waitForEvent('download', LONG), page.locator(`[data-testid=vault-file][data-name="random-${ROUNDS - 1}.bin"]`).getByTestId('vault-download').click()]);
  const pull = Date.now() - t;
  expect(readFileSync((await dl.path())!).equals(bytes)).toBe(true);
  loads.push(loadavg()[0]);
  // the plain download of the last plain file (Files view, the version's link, to the file saved)
  await page.getByTestId('view-files').click();
  const last = `plain-${ROUNDS - 1}.bin`;
  await page.getByTestId('file-row').filter({ hasText: last }).getByRole('button', { expanded: false }).click();
  settle();
  t = Date.now();
  const [plainDl] = await Promise.all([page.waitForEvent('download', LONG), page.getByRole('link', { name: `Download ${last} version 1` }).click()]);
  await plainDl.path();
  const plainPull = Date.now() - t;
  loads.push(loadavg()[0]);
  // a 30% edit (the first 30% of every MiB rewritten) of each, pushed again: plain, then vault
  const edit = (b: Buffer) => {
    const out = Buffer.from(b);
    for (let at = 0; at < out.length; at += MiB) randomBytes(Math.min(Math.round(0.3 * MiB), out.length - at)).copy(out, at);
    return out;
  };
  const plainFile = path.join(dir, last);
  writeFileSync(plainFile, edit(readFileSync(plainFile)));
  const ended = await watchEnd(page, last);
  settle();
  t = Date.now();
  await page.getByTestId('file-input').setInputFiles(plainFile);
  await result(page, last, LONG);
  const plainEdit = (await ended()) - t;
  await page.getByTestId('view-vaults').click();
  const vaultFile = path.join(dir, `random-${ROUNDS - 1}.bin`);
  writeFileSync(vaultFile, edit(bytes));
  const before = await page.getByTestId('vault-progress').textContent();
  settle();
  t = Date.now();
  await page.getByTestId('vault-file-input').setInputFiles(vaultFile);
  await page.waitForFunction((old) => {
    const line = document.querySelector('[data-testid=vault-progress]')?.textContent ?? '';
    return line !== old && / stored: /.test(line);
  }, before, { polling: 50, ...LONG });
  const vaultEdit = Date.now() - t;
  loads.push(loadavg()[0]);

  const sorted = [...unlocks].sort((a, b) => a - b);
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const out = `# A vault in the page (Chromium ${page.context().browser()!.version()})

Command: \`${process.env.MIB ? `MIB=${process.env.MIB} ` : ''}npx playwright test -c bench/browser/playwright.config.ts bench/browser/vault-page.bench.ts\` (${new Date().toISOString()}, ${cpus().length} × ${cpus()[0].model}, load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)} during the run: a shared machine).

| what | result |
|---|---|
| unlock with the passphrase (vault worker: keyfile read, Argon2id m = ${VAULT_ARGON2.m} KiB, t = ${VAULT_ARGON2.t}, p = ${VAULT_ARGON2.p} through @noble/hashes, sub-keys), ${UNLOCKS} times | median ${s(sorted[UNLOCKS >> 1])}; ${unlocks.map(s).join(', ')} |
| first push of ${SIZE / MiB} MiB of random bytes (pick to "stored"), ${ROUNDS} files | ${pushes.map((ms) => `${s(ms)} (${(SIZE / MiB / (ms / 1000)).toFixed(1)} MiB/s)`).join(', ')} |
| plain first upload of ${SIZE / MiB} MiB of other random bytes just before each (Files view, pick to done) | ${plains.map((ms) => `${s(ms)} (${(SIZE / MiB / (ms / 1000)).toFixed(1)} MiB/s)`).join(', ')} |
| vault push ÷ plain upload | ${pushes.map((ms, i) => (ms / plains[i]).toFixed(2)).join(', ')} |
| pull of it (click to the download, verified) | ${s(pull)}, ${((SIZE / MiB) / (pull / 1000)).toFixed(1)} MiB/s |
| plain download of the last plain file (Files view, click to the file saved) | ${s(plainPull)}, ${((SIZE / MiB) / (plainPull / 1000)).toFixed(1)} MiB/s |
| vault pull ÷ plain download | ${(pull / plainPull).toFixed(2)} |
| 30% edit (the first 30% of every MiB rewritten) pushed again: vault; plain | ${s(vaultEdit)}; ${s(plainEdit)} |
| vault edit ÷ plain edit | ${(vaultEdit / plainEdit).toFixed(2)} |
`;
  writeFileSync(process.env.OUT ?? path.join(root, 'bench/results/vault-page.md'), out);
  console.log(out);
});
