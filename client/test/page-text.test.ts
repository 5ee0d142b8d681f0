// What the page writes: decimal sizes, savings said plainly, the progress and batch lines, and
// the grouping of a flat listing into folders.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deviceLabel } from '../src/api.ts';
import { formatBytes, formatLeft, savedPercent } from '../src/format.ts';
import { batchLine, progressLine, statusLine } from '../src/transfer-text.ts';
import type { Transfer } from '../src/transfers.ts';

test('sizes are decimal, one convention: 1 000 000 bytes is 1 MB', () => {
  const cases: [number, string][] = [
    [0, '0 B'],
    [999, '999 B'],
    [1000, '1 KB'],
    [1500, '1.5 KB'],
    [10_000, '10 KB'],
    [49_999, '50 KB'],
    [999_499, '999 KB'],
    [999_999, '1 MB'],
    [1_000_000, '1 MB'],
    [160_000_000, '160 MB'],
    [1_073_741_824, '1.1 GB'],
    [5e12, '5 TB'],
  ];
  for (const [n, text] of cases) assert.equal(formatBytes(n), text, String(n));
});

test('a transfer that saved nothing says so (no "0%"); small and large savings keep their digits', () => {
  assert.equal(savedPercent(1000, 1000), null);
  assert.equal(savedPercent(1200, 1000), null);
  assert.equal(savedPercent(999_999, 1_000_000), 'under 0.1%');
  assert.equal(savedPercent(950, 1000), '5%');
  assert.equal(savedPercent(500, 1000), '50%');
  assert.equal(savedPercent(2300, 1_000_000), '99.7%');
  assert.equal(savedPercent(0, 1000), '100%');
});

test('time left reads as people say it', () => {
  assert.equal(formatLeft(200), '1 s left');
  assert.equal(formatLeft(20_000), '20 s left');
  assert.equal(formatLeft(150_000), '3 min left');
  assert.equal(formatLeft(3_900_000), '1 h 5 min left');
});

const t = (over: Partial<Transfer>): Transfer => ({ id: 1, direction: 'up', name: 'a.bin', size: 3_000_000, status: 'running', ...over });

test('one progress line per transfer: percent, bytes, speed, time left; waiting for the server when it is away', () => {
  const line = progressLine(t({ step: 'sending', done: 1, total: 2, rate: 500_000 }));
  // sending half-way through the file: 0.5 + 0.47 * 0.5 of the bar
  assert.equal(line, '73% · 2.2 MB of 3 MB · 500 KB/s · 2 s left');
  assert.equal(progressLine(t({ step: 'chunking', done: 0, total: 3_000_000 })), '0% · 0 B of 3 MB');
  assert.equal(progressLine(t({ status: 'queued' }), false), 'Waiting for the server · starts by itself when it is back');
  assert.equal(progressLine(t({ status: 'queued' }), true), 'Waiting for its turn');
});

test('the last moments of a sync never read "Starting"', () => {
  for (const step of ['delta-sent', 'committed', undefined] as const) assert.doesNotMatch(statusLine(t({ step })), /Starting/);
  assert.equal(statusLine(t({ step: 'committed' })), 'Committed · finishing');
});

test('the batch line counts files and bytes, the time left at the batch speed, and failures', () => {
  const now = 10_000;
  const list: Transfer[] = [
    t({ id: 1, status: 'done', size: 20_000_000, startedAt: 0 }),
    t({ id: 2, status: 'running', size: 20_000_000, step: 'sending', done: 1, total: 1, startedAt: 5000 }),
    t({ id: 3, status: 'queued', size: 80_000_000 }),
    t({ id: 4, status: 'failed', size: 1000, failure: { kind: 'error', message: 'x' } }),
  ];
  const b = batchLine(list, true, now);
  // done 20 MB + running 0.97 * 20 MB = 39.4 MB in 10 s: 3.94 MB/s; 80.6 MB left: 21 s
  assert.equal(b.line, '1 of 4 · 39 MB of 120 MB · 21 s left · 1 failed');
  assert.equal(b.failed, 1);
  assert.equal(b.settled, 2);
  assert.equal(batchLine(list, false, now).line, '1 of 4 · 39 MB of 120 MB · waiting for the server · 1 failed');
});

test("the device label sent with each sync names the browser and the system", () => {
  assert.equal(deviceLabel('Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36'), 'Chrome on Android');
  assert.equal(deviceLabel('Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1'), 'Safari on iPhone');
  assert.equal(deviceLabel('Mozilla/5.0 (iPad; CPU OS 15_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/15.4 Mobile/15E148 Safari/604.1'), 'Safari on iPad');
  // other browsers on an iPhone are WebKit too, with their own token
  assert.equal(deviceLabel('Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/130.0.6723.90 Mobile/15E148 Safari/604.1'), 'Chrome on iPhone');
  assert.equal(deviceLabel('Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/132.0 Mobile/15E148 Safari/605.1.15'), 'Firefox on iPhone');
  assert.equal(deviceLabel('Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15'), 'Safari on macOS');
  assert.equal(deviceLabel('Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.0.0'), 'Edge on Windows');
  assert.equal(deviceLabel('Mozilla/5.0 (Macintosh; Intel Mac OS X 14.0; rv:130.0) Gecko/20100101 Firefox/130.0'), 'Firefox on macOS');
  // Debian's Firefox ESR and WebKitGTK (MiniBrowser; Epiphany), as the engine tests run them
  assert.equal(deviceLabel('Mozilla/5.0 (X11; Linux x86_64; rv:153.0) Gecko/20100101 Firefox/153.0'), 'Firefox on Linux');
  assert.equal(deviceLabel('Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/60.5 Safari/605.1.15'), 'WebKit on Linux');
  assert.equal(deviceLabel('Mozilla/5.0 (X11; Ubuntu; Linux x86_64) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15 Epiphany/605.1.15'), 'WebKit on Linux');
  assert.equal(deviceLabel('Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36'), 'Chrome on Linux');
  assert.equal(deviceLabel('curl/8'), 'A browser');
});
