// One server process holds 2 000 open sync WebSockets plus 50 concurrent active syncs without
// errors; its memory is printed (and recorded in bench/results/hardening.md).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { holdConnections } from '../../harness/trials.ts';

test('2 000 open connections plus 50 active syncs', async () => {
  const { open, reports, metrics, after } = await holdConnections(2000, 50);
  assert.equal(open, 2000);
  assert.equal(reports.length, 50);
  for (const rep of reports) assert.equal(rep.version, 2);
  assert.ok(metrics.connections >= 2000);
  assert.ok(after.peak < 2 * 2 ** 30, `peak RSS ${after.peak}`);
});
