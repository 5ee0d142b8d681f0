// The page's chunk workers (shared/src/vault/spans.ts: a push of more than a span cut, named and
// sealed in spans) cut a file exactly as the CLI does. A 40 MiB file of random bytes, zeros
// across the first span border (16 MiB), a short period across the second and random bytes again
// is pushed from the page; the CLI pulls it with the same bytes as its old copy: every chunk of
// the page's manifest is one the CLI cut from them (keyed chunking and ids), so no byte is
// fetched, and the root the page recorded (over the chunk ids) is the one the CLI computes of
// the bytes. The page pulls it back
// byte-exact (its ranges opened by the chunk workers). The page's CSP holds for the chunk workers.
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import '../shared/src/chunking/wasm.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { hex } from '../shared/src/vault/format.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { memoryHeads, openVault } from '../shared/src/vault/vault.ts';
import { fastRandomBytes } from '../harness/testdata.ts';
import { createVault, expect, root, test } from './fixtures.ts';

const PASSPHRASE = 'correct horse battery staple';
const MiB = 2 ** 20;

function contents(): Buffer {
  const out = Buffer.alloc(40 * MiB);
  out.set(fastRandomBytes(46, 15.5 * MiB), 0);
  // [15.5, 17) MiB zeros: no cut but every 64 KiB, so lists of the two spans meet only where
  // their 64 KiB steps do
  const period = fastRandomBytes(47, 1000);
  for (let i = 17 * MiB; i < 33 * MiB; i++) out[i] = period[i % 1000];
  out.set(fastRandomBytes(48, 7 * MiB), 33 * MiB);
  return out;
}

test('a file pushed from the page through its chunk workers is cut, named and rooted as the CLI cuts it', async ({ page, server, dir }) => {
  test.setTimeout(600_000);
  await page.addInitScript(() => {
    const seen: string[] = ((window as unknown as { cspViolations: string[] }).cspViolations = []);
    document.addEventListener('securitypolicyviolation', (e) => seen.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  await createVault(page, server.url, PASSPHRASE);
  const id = (await page.getByTestId('vault').getAttribute('data-id'))!;

  const bytes = contents();
  const file = path.join(dir, 'big.bin');
  writeFileSync(file, bytes);
  await page.getByTestId('vault-file-input').setInputFiles(file);
  await expect(page.getByTestId('vault-progress')).toContainText('big.bin stored', { timeout: 300_000 });
  // the page pulls it back through the chunk workers (each range opened and checked there)
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 300_000 }), page.locator('[data-testid=vault-file][data-name="big.bin"]').getByTestId('vault-download').click()]);
  expect(readFileSync((await dl.path())!).equals(bytes)).toBe(true);
  expect(await page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations)).toEqual([]);

  // the CLI pulls it onto a copy of the same bytes
  const copy = path.join(dir, 'copy.bin');
  writeFileSync(copy, bytes);
  mkdirSync(path.join(dir, 'config'), { recursive: true });
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'vault', 'pull', id, 'big.bin', copy], {
    env: { ...process.env, DSYNC_SERVER: server.url, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_CACHE_DIR: path.join(dir, 'cache'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE },
  });
  const r = JSON.parse(stdout) as { chunks: number; local: number; fetchedBytes: number; root: string; size: number };
  expect(r.size).toBe(bytes.length);
  expect(r.chunks).toBeGreaterThan(1000);
  expect(r.local).toBe(r.chunks);
  expect(r.fetchedBytes).toBe(0);
  expect(readFileSync(copy).equals(bytes)).toBe(true);
  // the tree's root (the page's) is the one the CLI computes of the bytes (the pull checked the
  // tree's root against the manifest's ids, and reports it)
  const vault = await openVault(httpVaultRemote(server.url), id, { passphrase: PASSPHRASE }, memoryHeads());
  const want = hex(await vault.rootOf(bufferSource(bytes)));
  expect(r.root).toBe(want);
  const recorded = (await vault.tree()).files.find((f) => f.name === 'big.bin')!.versions[0].root;
  expect(recorded && hex(recorded)).toBe(want);
});
