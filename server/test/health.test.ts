// A server on a real MinIO that freezes (SIGSTOP) or dies: /api/health tells a load balancer
// the truth within a bounded time, a request to the frozen store ends with a clear error
// instead of hanging, and everything works again once the store is back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { HEALTH_CACHE_MS, loadConfig } from '../src/config.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';

const STORE_TIMEOUT_MS = 3_000;
const HEALTH_TIMEOUT_MS = 1_000;
/** What a loaded machine may add to a deadline (timers fire late, answers wait for the CPU);
 *  below the S3 client's own socket timeout (30 s), which is what an unbounded wait would meet. */
const SLACK_MS = 10_000;

let minio: S3Server;
let s: RunningServer & { wsUrl: string };
before(async () => {
  minio = await startMinio();
  // the server reads the store's credentials from its environment, as `dsync serve` does
  Object.assign(process.env, minio.env);
  const cfg = loadConfig({ port: '0', host: '127.0.0.1', store: 's3://health/store', 's3-endpoint': minio.endpoint, 'store-timeout-ms': String(STORE_TIMEOUT_MS), 'health-timeout-ms': String(HEALTH_TIMEOUT_MS) }, {});
  const started = await startServer(cfg);
  s = { ...started, wsUrl: started.url.replace('http', 'ws') + '/sync' };
});
after(async () => {
  minio.process.kill('SIGCONT');
  await s?.close();
  await minio?.stop();
});

async function health(): Promise<{ status: number; body: { ok: boolean; error?: string }; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${s.url}/api/health`);
  return { status: res.status, body: (await res.json()) as { ok: boolean; error?: string }, ms: performance.now() - t0 };
}

/** Polls health until it answers `status`; returns how long that took. Each answer must come
 *  within the health timeout (plus SLACK_MS). */
async function healthBecomes(status: number, withinMs: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const h = await health();
    assert.ok(h.ms < HEALTH_TIMEOUT_MS + SLACK_MS, `one health answer took ${Math.round(h.ms)} ms`);
    if (h.status === status) return performance.now() - t0;
    assert.ok(performance.now() - t0 < withinMs, `health still answers ${h.status} after ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('a frozen store: health says 503 within its bound, a listing fails with a clear error, all is well after it resumes', async () => {
  const bytes = fastRandomBytes(41, 500_000);
  assert.equal((await health()).status, 200);
  await pushBytes(s, 'a.bin', bytes);
  minio.process.kill('SIGSTOP');
  try {
    // the cached answer may stand for HEALTH_CACHE_MS, then the look at the store times out
    const took = await healthBecomes(503, HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + SLACK_MS);
    const h = await health();
    assert.equal(h.status, 503);
    assert.equal(h.body.ok, false);
    assert.match(h.body.error!, new RegExp(`the store did not answer within ${HEALTH_TIMEOUT_MS} ms`));
    assert.ok(took < HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + SLACK_MS, `503 after ${Math.round(took)} ms`);
    // a listing ends with a clear error after the store timeout, not minutes later
    const t0 = performance.now();
    const res = await fetch(`${s.url}/api/files`);
    const ms = performance.now() - t0;
    // 503: the listing is not whole (the store failed), never an empty 200
    assert.equal(res.status, 503);
    assert.match(((await res.json()) as { error: string }).error, new RegExp(`^the store failed: the store did not answer within ${STORE_TIMEOUT_MS} ms .*try again`));
    assert.ok(ms >= STORE_TIMEOUT_MS - 100 && ms < STORE_TIMEOUT_MS + SLACK_MS, `the listing failed after ${Math.round(ms)} ms`);
    // a listing of keys (gc, check, the live-updates poll) too: each page's request
    const t1 = performance.now();
    await assert.rejects(
      (async () => {
        for await (const _ of s.repo.backend.list('ns/')) void _;
      })(),
      new RegExp(`the store did not answer within ${STORE_TIMEOUT_MS} ms \\(list `),
    );
    assert.ok(performance.now() - t1 < STORE_TIMEOUT_MS + SLACK_MS);
  } finally {
    minio.process.kill('SIGCONT');
  }
  await healthBecomes(200, HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + SLACK_MS);
  const list = (await (await fetch(`${s.url}/api/files`)).json()) as { files: { name: string }[] };
  assert.deepEqual(list.files.map((f) => f.name), ['a.bin']);
  assert.ok((await pullBytes(s, 'a.bin', null)).bytes.equals(bytes));
  assert.equal((await pushBytes(s, 'b.bin', bytes)).version, 1);
});

test('a store that is gone: health says 503 at once', async () => {
  await minio.stop();
  const took = await healthBecomes(503, HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + SLACK_MS);
  assert.ok(took < HEALTH_CACHE_MS + HEALTH_TIMEOUT_MS + SLACK_MS);
  assert.match((await health()).body.error!, /the store (fails|did not answer)/);
});
