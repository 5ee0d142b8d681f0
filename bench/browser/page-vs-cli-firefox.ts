// The page against the CLI in Firefox ESR (puppeteer-core over WebDriver BiDi, the driver of
// e2e/engines): the same files as bench/browser/page-vs-cli.bench.ts (same seeds): a 1 GiB first
// upload, 30% of every MiB rewritten, then random edits of 1%, 10% and 30%, each pushed from the
// page and then with `dsync push`, each against its own server. Prints the rows.
//   npm run bench:page-vs-cli-firefox      (GIB=0.25 for a quick run; EDITS as there)
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomEdits, rewriteEveryMiB, writePseudoRandomFile } from '../../e2e/data.ts';
import { launch, openPage, result } from '../../e2e/engines/drivers.ts';
import globalSetup from '../../e2e/global-setup.ts';
import { TestServer } from '../../e2e/server.ts';
import { cliPush } from './cli-push.ts';

const MiB = 2 ** 20;
const SIZE = Math.round(Number(process.env.GIB ?? 1) * 1024) * MiB;
const EDITS = (process.env.EDITS ?? '0.01,0.1,0.3').split(',').filter(Boolean).map(Number);
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;

globalSetup();
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-ff-bench-'));
const cache = path.join(dir, 'cli-cache');
mkdirSync(cache);
const pageServer = await new TestServer().start();
const cliServer = await new TestServer().start();
const browser = await launch('firefox');
try {
  console.log(`Firefox ${browser.version}`);
  const page = await browser.newPage();
  await openPage(page, pageServer.url);
  const name = 'big-0.img';
  const file = path.join(dir, name);
  async function both(what: string, version: number, sha: string) {
    const t0 = Date.now();
    await page.setInputFiles('[data-testid=file-input]', [file]);
    const r = await result(page, name, 'up', 900_000);
    const pageMs = Date.now() - t0;
    if (r.version !== version || (await pageServer.storedSha256(name, version)) !== sha) throw new Error(`page: ${what}: version ${r.version} stored wrong`);
    const cli = await cliPush(cliServer, file, name, cache);
    if (cli.report.version !== version || (await cliServer.storedSha256(name, version)) !== sha) throw new Error(`CLI: ${what}: version ${cli.report.version} stored wrong`);
    console.log(`| ${what} | ${s(pageMs)} | ${s(cli.ms)} | **${(cli.ms / pageMs).toFixed(2)}** | ${(r.delta / MiB).toFixed(1)} / ${(cli.report.traffic.delta / MiB).toFixed(1)} MiB |`);
  }
  await both(`${mib(SIZE)} first upload`, 1, await writePseudoRandomFile(file, SIZE, 0x9e3779b9));
  await both(`${mib(SIZE)}, 30% of every MiB rewritten`, 2, await rewriteEveryMiB(file, SIZE, 0x2545f491));
  for (const [i, fraction] of EDITS.entries()) {
    const e = await randomEdits(file, fraction, 0x6a09e667 + i);
    await both(`${mib(e.size)}, random edits of ${Math.round(fraction * 100)}%`, 3 + i, e.sha256);
  }
} finally {
  await browser.close();
  await pageServer.stop();
  await cliServer.stop();
  rmSync(dir, { recursive: true, force: true });
}
