// Looks for the rare hang of the first pick (issue 47: in Firefox ESR, once in about nine runs
// of core.test.ts's "a file overwritten in place while it syncs", the first pick of a 256 MiB
// file never got under way in 60 s). Runs that first pick N times in one browser through the
// engines' driver, each against a fresh server in a fresh profile, and records every step the
// card goes through with its time; a run that is not under way in 60 s is written out whole
// (the card, its status line, the server's log), and the loop goes on.
//
//   node --import tsx e2e/engines/first-pick.ts [runs=50] [engine=firefox] [MiB=256]
//
// Not part of `npm test`: a search, not an assertion. Prints one line per run and a summary.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { writePseudoRandomFile } from '../data.ts';
import globalSetup from '../global-setup.ts';
import { TestServer } from '../server.ts';
import { type Engine, cardSelector, launch, openPage } from './drivers.ts';

const runs = Number(process.argv[2] ?? 50);
const engine = (process.argv[3] ?? 'firefox') as Engine;
const mib = Number(process.argv[4] ?? 256);
const UNDER_WAY = /^(chunking|sending|checksums-sent|tokens-received|delta-sent|committed)$/;
const LIMIT_MS = 60_000;

globalSetup();
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-first-pick-'));
const file = path.join(dir, 'archive.tar');
await writePseudoRandomFile(file, mib << 20, 7);
const browser = await launch(engine);
console.log(`${engine} ${browser.version}: ${runs} first picks of ${mib} MiB`);
const hung: number[] = [];
const took: number[] = [];
try {
  for (let run = 1; run <= runs; run++) {
    const server = await new TestServer().start();
    const page = await browser.newPage();
    try {
      await openPage(page, server.url);
      const t0 = Date.now();
      await page.setInputFiles('[data-testid=file-input]', [file]);
      const picked = Date.now() - t0;
      const seen: string[] = [];
      let last = '';
      let underWay = false;
      while (Date.now() - t0 < LIMIT_MS) {
        const now = await page.evaluate((sel) => {
          const c = document.querySelector(sel);
          return c ? `${c.getAttribute('data-status')}/${c.getAttribute('data-step')}` : 'no card';
        }, cardSelector('archive.tar', 'up'));
        if (now !== last) seen.push(`${now}@${Date.now() - t0}ms`);
        last = now;
        if (UNDER_WAY.test(now.split('/')[1] ?? '') || now.startsWith('done') || now.startsWith('failed')) {
          underWay = true;
          break;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      const ms = Date.now() - t0;
      if (underWay) took.push(ms);
      else hung.push(run);
      console.log(`run ${run}: ${underWay ? 'under way' : 'HUNG'} in ${ms} ms (pick ${picked} ms): ${seen.join(' → ')}`);
      if (!underWay) {
        const state = await page.evaluate((sel) => ({
          card: document.querySelector(sel)?.outerHTML.slice(0, 2000) ?? null,
          server: document.querySelector('[data-testid=server-status]')?.textContent,
          inputFiles: (document.querySelector('[data-testid=file-input]') as HTMLInputElement | null)?.files?.length,
        }), cardSelector('archive.tar', 'up'));
        console.log(JSON.stringify(state, null, 1));
        console.log(`the server's log:\n${server.log.map((e) => JSON.stringify(e)).join('\n')}`);
      }
    } finally {
      await page.close().catch(() => {});
      await server.stop();
    }
  }
} finally {
  await browser.close();
  rmSync(dir, { recursive: true, force: true });
}
took.sort((a, b) => a - b);
console.log(`${runs - hung.length} of ${runs} under way (median ${took[took.length >> 1] ?? '-'} ms, slowest ${took.at(-1) ?? '-'} ms); hung: ${hung.length ? hung.join(', ') : 'none'}`);
process.exit(hung.length ? 1 : 0);
