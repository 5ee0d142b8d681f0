// The page's kept basis (client/src/kept-store.ts) on the benchmark's 10 MB pairs: each edited
// file pushed from the page (Chromium, file control) after its basis, once with the basis's
// bytes kept in OPFS and once with its chunk index only (the cap set to Nothing: the page
// without a kept basis), next to `zstd -3 --long=27 --patch-from`. Wire bytes are what the
// server's socket carried (the Result's wireIn + wireOut, after permessage-deflate). Writes
// bench/results/page-kept.md (OUT= elsewhere).
//   npx playwright test -c bench/browser/playwright.config.ts bench/browser/page-kept.bench.ts
//   (the pairs from `node --import tsx bench/datasets/build.ts --no-large`; DATASETS= another folder)
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Page } from '@playwright/test';
import { expect, openPage, result, root, test } from '../../e2e/fixtures.ts';
import { formatBytes } from '../../shared/src/base/units.ts';

const DATASETS = process.env.DATASETS ?? path.join(root, 'bench/tmp/datasets');
const KINDS = ['cut', 'insert', 'inverse'];
const SIZES = [32, 256, 2048, 16384, 131072, 1048576];

/** Pushes `from` from the page as `dir/name`; the wire bytes of the sync and whether it went
 *  against kept bytes. */
async function push(page: Page, from: string, dir: string, name: string): Promise<{ wire: number; kept: boolean }> {
  const file = path.join(dir, name);
  copyFileSync(from, file);
  await page.getByTestId('file-input').setInputFiles(file);
  await result(page, name, { timeout: 120_000 });
  const card = page.locator(`[data-testid=transfer][data-name="${name}"][data-direction=up]`).first();
  const r = JSON.parse((await card.getByTestId('result').getAttribute('data-report'))!);
  return { wire: r.traffic.wire, kept: !!r.keptBasis };
}

test('page kept basis vs chunk index only on the 10 MB pairs', async ({ page, server, dir }) => {
  const basis = path.join(DATASETS, 'mixed-10MB.bin');
  await openPage(page, server.url);
  const rows: { pair: string; size: number; kept: number; known: number; zstd: number }[] = [];
  for (const cap of ['auto', '0']) {
    await page.getByTestId('kept-max').selectOption(cap);
    for (const kind of KINDS) {
      for (const size of SIZES) {
        const pair = `${kind}-${size}`;
        const target = path.join(DATASETS, `mixed-10MB.${pair}.bin`);
        const sub = path.join(dir, cap, pair);
        mkdirSync(sub, { recursive: true });
        await push(page, basis, sub, `${pair}.bin`);
        const r = await push(page, target, sub, `${pair}.bin`);
        expect(r.kept, pair).toBe(cap === 'auto');
        if (cap === 'auto') {
          const patch = execFileSync('zstd', ['-3', '--long=27', '-q', '-c', `--patch-from=${basis}`, target], { maxBuffer: 64 << 20 });
          rows.push({ pair, size: statSync(target).size, kept: r.wire, known: 0, zstd: patch.length });
        } else rows.find((x) => x.pair === pair)!.known = r.wire;
      }
    }
  }
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  const md = [
    '# The page with a kept basis, on the 10 MB pairs',
    '',
    `- date: ${new Date().toISOString()}`,
    '- command: `npx playwright test -c bench/browser/playwright.config.ts bench/browser/page-kept.bench.ts` (bench/browser/page-kept.bench.ts; the pairs of `bench/datasets/build.ts`)',
    "- Debian's Chromium, headless, one `dsync serve` on loopback; each pair's basis pushed from the page, then its target: *page, kept*: the basis's bytes kept in OPFS (automatic cap); *page, chunk index*: the cap set to Nothing, so the page knows the basis's chunk index and finer cut only (the page before the kept basis). Wire bytes: what the server's socket carried in the target's sync (after permessage-deflate). zstd: `zstd -3 --long=27 --patch-from=BASIS TARGET`.",
    '',
    '| pair | size | page, kept | page, chunk index | zstd --patch-from | kept / zstd | chunk index / zstd |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.pair} | ${formatBytes(r.size)} | ${formatBytes(r.kept)} | ${formatBytes(r.known)} | ${formatBytes(r.zstd)} | ${x(r.kept, r.zstd)} | ${x(r.known, r.zstd)} |`),
    '',
  ].join('\n');
  console.log(md);
  writeFileSync(process.env.OUT ?? path.join(root, 'bench/results/page-kept.md'), md);
});
