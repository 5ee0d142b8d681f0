// 200 tiny files: the page against the CLI, same server build, one run (issue 34). A folder of
// FILES files of 20 B to 2 KB goes up from the page (Chromium, the folder control) and with
// `dsync push DIR`, each against its own fresh server process; the pair runs ROUNDS times,
// alternating, so the machine's load hits both alike. Page time: from handing the folder to
// the control until every card is done; CLI time: the process's start to exit (its Node start
// included). Writes bench/results/tiny-files.md (OUT= elsewhere).
//   npx playwright test -c bench/browser/playwright.config.ts tiny-files   (FILES=n, ROUNDS=n)
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { expect, openPage, root, test } from '../../e2e/fixtures.ts';
import { TestServer } from '../../e2e/server.ts';

const FILES = Number(process.env.FILES ?? 200);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

function cliPush(server: TestServer, dir: string, cache: string): Promise<number> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', dir, '--server', server.url, '--json'], { env: { ...process.env, DSYNC_CACHE_DIR: cache }, stdio: ['ignore', 'ignore', 'inherit'] });
  return new Promise((resolve, reject) => child.on('exit', (code) => (code === 0 ? resolve(Date.now() - t0) : reject(new Error(`dsync push exited ${code}`)))));
}

test(`page vs CLI: ${FILES} tiny files`, async ({ page, dir }) => {
  const load = loadavg()[0];
  const rows: string[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const folder = path.join(dir, `r${round}`, 'tiny');
    mkdirSync(folder, { recursive: true });
    for (let i = 0; i < FILES; i++) writeFileSync(path.join(folder, `f${i}.txt`), `file ${i} of round ${round} `.repeat(1 + ((i * 37) % 100)));

    const pageServer = await new TestServer().start();
    const cliServer = await new TestServer().start();
    try {
      await openPage(page, pageServer.url);
      const t0 = Date.now();
      await page.getByTestId('folder-input').setInputFiles(folder);
      await expect(page.getByTestId('batch-line')).toContainText(`${FILES} of ${FILES} ·`, { timeout: 600_000 });
      const pageMs = Date.now() - t0;
      const cache = path.join(dir, `r${round}`, 'cache');
      mkdirSync(cache);
      const cliMs = await cliPush(cliServer, folder, cache);
      for (const [srv, what] of [[pageServer, 'page'], [cliServer, 'CLI']] as const) {
        expect(await srv.latest(`tiny/f${FILES - 1}.txt`), `${what} stored the last file`).toBe(1);
      }
      console.log(`round ${round}: page ${s(pageMs)}, CLI ${s(cliMs)}`);
      rows.push(`| ${round} | ${s(pageMs)} | ${s(cliMs)} | ${(pageMs / cliMs).toFixed(2)} |`);
    } finally {
      await pageServer.stop();
      await cliServer.stop();
    }
  }
  const out = process.env.OUT ?? path.join(root, 'bench/results/tiny-files.md');
  writeFileSync(
    out,
    `# ${FILES} tiny files: the page against the CLI

\`npx playwright test -c bench/browser/playwright.config.ts tiny-files\` (bench/browser/tiny-files.bench.ts;
FILES=${FILES}, ROUNDS=${ROUNDS}), ${new Date().toISOString().slice(0, 10)}, a 2-core VM shared with other jobs
(load average ${load.toFixed(1)} at the start). A folder of ${FILES} files of 20 B to 2 KB, pushed from the page
(headless Chromium, the folder control, until every card is done) and with \`dsync push DIR\` (process start
to exit), each against its own fresh server; page and CLI alternate.

| round | page | CLI | page / CLI |
|---|---|---|---|
${rows.join('\n')}
`,
  );
});
