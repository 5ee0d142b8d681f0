// The page resumes an upload after its server was killed and started again: headless Chromium,
// a real `dsync serve` child. The server checkpoints the upload as it writes it (docs/store.md
// §6): once a checkpoint is listed the server is killed; the page retries by itself when the
// server is back, and the retry sends only what the server lacks.
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { content, writePseudoRandomFile } from './data.ts';
import { card, expect, openPage, result, test } from './fixtures.ts';

test('an upload interrupted by a server restart resumes from what the server had written', async ({ page, server, dir }) => {
  const size = 160 << 20;
  const file = path.join(dir, 'film.bin');
  writeFileSync(file, content(1000));
  const sha = await writePseudoRandomFile(file, size);
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  // a checkpoint of the upload is listed (a generation of the name's uploads head, `<key>@h/<n>`,
  // server/src/store/local.ts; its folder and temporary file come before it): kill the server then
  const uploads = path.join(server.data, 'ns', 'local', 'uploads');
  const listed = () => existsSync(uploads) && readdirSync(uploads).some((h) => h.endsWith('@h') && readdirSync(path.join(uploads, h)).some((g) => /^\d+$/.test(g)));
  await expect.poll(listed, { timeout: 60_000, intervals: [20] }).toBe(true);
  const atKill = JSON.stringify(readdirSync(uploads).map((h) => [h, readdirSync(path.join(uploads, h))]));
  await server.kill();
  await expect(page.getByTestId('server-status')).toContainText('Server unreachable', { timeout: 30_000 });
  await server.start();
  const r = await result(page, 'film.bin', { timeout: 120_000 });
  expect(r.version).toBe(1);
  const report = JSON.parse((await card(page, 'film.bin').getByTestId('result').getAttribute('data-report'))!);
  // the chunks the server had written by its first checkpoint (16 MiB) were not sent again by
  // the attempt that stored the file (the report's traffic counts every attempt)
  expect(report.literalBytes, `uploads at the kill: ${atKill}; the server's log:\n${server.log.map((e) => JSON.stringify(e)).join('\n')}`).toBeLessThan(size - (8 << 20));
  expect(await server.storedSha256('film.bin', 1)).toBe(sha);
});
