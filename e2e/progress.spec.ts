// Progress people read: the batch line, retry-all and dismiss over cancelled transfers, a delta
// download that saved nothing said plainly, and a drop overlay that covers no control.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { content } from './data.ts';
import { card, expect, openPage, result, test } from './fixtures.ts';

test('a batch: its line, cancelled cards retried all at once when the server is back, then dismissed', async ({ page, server, dir }) => {
  const names = ['one.txt', 'two.txt', 'three.txt'];
  for (const n of names) writeFileSync(path.join(dir, n), content(100_000));
  await openPage(page, server.url);
  await server.kill();
  // (generous for a loaded machine: the page's event stream ends with the server)
  await expect(page.getByTestId('server-status')).toContainText('Server unreachable', { timeout: 30_000 });
  await page.getByTestId('file-input').setInputFiles(names.map((n) => path.join(dir, n)));
  await expect(page.getByTestId('batch-line')).toHaveText('0 of 3 · 0 B of 300 KB · waiting for the server');
  for (const n of names) await page.getByRole('button', { name: `Cancel ${n}` }).click();
  for (const n of names) await expect(card(page, n).getByTestId('problem')).toHaveAttribute('data-kind', 'cancelled');
  await expect(page.getByTestId('batch-line')).toHaveText('0 of 3 · 0 B of 300 KB · 3 failed');

  // cancelled ones stay cancelled when the server returns, until "Retry all"
  await server.start();
  // (the page looks again every 5 s at most; generous for a loaded machine)
  await expect(page.getByTestId('server-status')).toContainText('Connected', { timeout: 35_000 });
  await expect(card(page, 'one.txt')).toHaveAttribute('data-status', 'failed');
  await page.getByRole('button', { name: 'Retry all' }).click();
  for (const n of names) expect((await result(page, n)).version).toBe(1);
  await expect(page.getByTestId('batch-line')).toHaveText('3 of 3 · 300 KB of 300 KB');
  await expect(page.getByRole('button', { name: 'Retry all' })).toHaveCount(0);

  // one card dismissed by itself, then the rest
  await page.getByRole('button', { name: 'Dismiss two.txt' }).click();
  await expect(card(page, 'two.txt')).toHaveCount(0);
  await expect(page.getByTestId('batch-line')).toHaveText('2 of 2 · 200 KB of 200 KB');
  await page.getByRole('button', { name: 'Dismiss finished' }).click();
  await expect(page.getByTestId('transfer')).toHaveCount(0);
});

test('a delta download that cost more than a full one says "nothing saved", not "0% saved"', async ({ page, server, dir }) => {
  const file = path.join(dir, 'random.bin');
  writeFileSync(file, content(300_000));
  await openPage(page, server.url);
  await page.getByTestId('file-input').setInputFiles(file);
  await result(page, 'random.bin');
  // an unrelated "older copy": nothing matches, so the Checksum List is pure overhead
  const unrelated = path.join(dir, 'unrelated.bin');
  writeFileSync(unrelated, content(300_000));
  await page.getByTestId('file-row').getByRole('button', { expanded: false }).click();
  await Promise.all([page.waitForEvent('download'), page.getByTestId('delta-basis').setInputFiles(unrelated)]);
  const down = await result(page, 'random.bin', { direction: 'down' });
  expect(down.sent).toBeGreaterThan(down.size);
  const summary = card(page, 'random.bin', 'down').locator('.summary');
  await expect(summary).toContainText('nothing saved');
  await expect(summary).toContainText('more than a full download');
  await expect(summary).not.toContainText('0%');
  await expect(summary.locator('.saved')).toHaveCount(0);
});

test('while files are dragged over the page, the drop overlay is a frame and a faint tint with no text: it covers no control', async ({ page, server }) => {
  await openPage(page, server.url);
  await page.evaluate(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(['x'], 'x.txt'));
    document.querySelector('[data-testid=dropzone]')!.dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  const overlay = page.locator('.drop-overlay.show');
  await expect(overlay).toBeVisible();
  await expect(overlay).toHaveText('');
  await expect(page.getByTestId('dropzone').getByRole('heading')).toContainText('Drop to sync');
  // a tint, not a cover: every control stays readable through it
  const background = await overlay.evaluate((el) => getComputedStyle(el).backgroundColor);
  const alpha = Number(/(?:\/ |, )([\d.]+)\)$/.exec(background)?.[1] ?? 1);
  expect(alpha, background).toBeLessThanOrEqual(0.1);
  await expect(overlay.locator('*')).toHaveCount(0);
});
