// Sizes, durations and savings as people read them (decimal units, as the server's flags).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { formatBytes, formatDuration, savedPercent } from '../src/base/units.ts';

test('formatBytes: decimal units at their edges', () => {
  const cases: [number, string][] = [[0, '0 B'], [999, '999 B'], [1000, '1 KB'], [1536, '1.5 KB'], [9_949, '9.9 KB'], [9_950, '10 KB'], [23_000, '23 KB'], [999_499, '999 KB'], [999_500, '1 MB'], [1_000_000, '1 MB'], [20_000_000, '20 MB'], [64 * 2 ** 30, '69 GB'], [1e18, '1000 PB']];
  for (const [n, s] of cases) assert.equal(formatBytes(n), s, String(n));
});

test('formatBytes reads back within 5% of the number (property)', () => {
  const scale: Record<string, number> = { B: 1, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12, PB: 1e15 };
  fc.assert(
    fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), (n) => {
      const [v, u] = formatBytes(n).split(' ');
      const back = Number(v) * scale[u];
      return n === 0 ? back === 0 : Math.abs(back - n) / n <= 0.05;
    }),
    { numRuns: 5000 },
  );
});

test('formatDuration and savedPercent', () => {
  assert.deepEqual([85, 150, 2345, 12_345, 125_000].map(formatDuration), ['85 ms', '0.15 s', '2.35 s', '12.3 s', '2 min 5 s']);
  assert.equal(savedPercent(23_000, 20_000_000), '99.8%');
  assert.equal(savedPercent(19_999_999, 20_000_000), '0%');
  assert.equal(savedPercent(5_000_000, 20_000_000), '75%');
  assert.equal(savedPercent(20_000_000, 20_000_000), null, 'sending it all saved nothing');
  assert.equal(savedPercent(21_000_000, 20_000_000), null, 'nor did sending more');
  assert.equal(savedPercent(0, 0), null);
  assert.equal(savedPercent(0, 10), '100%');
});
