// What a page's vault pushes leave in Chromium's blob store (chrome://blob-internals). A pack
// goes up as a Blob (Chromium sends a Blob from its blob store, bytes from the calling thread,
// many times slower); a Blob made for a request body stays in the store while the service
// worker's FetchEvent for that request lives, and the static routes that keep /api/ out of the
// service worker do not cover a worker's requests. When the vault worker sent its packs itself,
// every pack of every push stayed in the store (265 MiB a push of 256 MiB, whatever the vault
// worker's GC), and the store refuses new Blobs at 2 GiB: the eighth push of 256 MiB in one
// page failed ("Failed to fetch"), a second push of 1 GiB stood still. The page now sends them past
// the service worker (client/src/vault-api.ts `VaultUpload`, client/public/sw.js): four pushes
// of 256 MiB are stored and leave less than two pushes' packs in the store.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fastRandomBytes } from '../harness/testdata.ts';
import { createVault, expect, test } from './fixtures.ts';

const MiB = 2 ** 20;
const PUSHES = 4;
const SIZE = 256 * MiB;

test('vault pushes from a page leave their packs out of the blob store', async ({ page, context, server, dir }) => {
  test.setTimeout(1_200_000);
  await createVault(page, server.url, 'a passphrase');
  const internals = await context.newPage();
  const line = page.getByTestId('vault-progress');
  for (let i = 0; i < PUSHES; i++) {
    const name = `random-${i}.bin`;
    const file = path.join(dir, name);
    writeFileSync(file, fastRandomBytes(1000 + i, SIZE));
    await page.getByTestId('vault-file-input').setInputFiles(file);
    // stored, or the failure the page shows instead (a failed push does not wait out the timeout)
    const stored = line.filter({ hasText: `${name} stored` });
    await expect(stored.or(page.getByTestId('vault-error'))).toBeVisible({ timeout: 300_000 });
    await expect(page.getByTestId('vault-error'), `push ${i + 1} of ${PUSHES}`).toHaveCount(0);
    await expect(stored).toBeVisible();
  }
  await expect(page.getByTestId('vault-file')).toHaveCount(PUSHES);
  // the Blobs of bytes in memory (not of files) of a MiB or more: packs of 4 MiB, padded
  await internals.goto('chrome://blob-internals');
  const text = await internals.locator('body').innerText();
  let held = 0;
  for (const m of text.matchAll(/Type: data\s*\|?\s*Length: ([\d,]+)/g)) {
    const n = Number(m[1].replace(/,/g, ''));
    if (n >= MiB) held += n;
  }
  expect(text).toContain('Type: file'); // (the page read what it lists)
  expect(held / MiB, 'MiB of Blobs held in memory after the pushes').toBeLessThan((2 * SIZE) / MiB);
});
