// A bulk read whose bytes do not match their root (docs/sync.md "Small files in bulk"): a real
// Dsync server behind a small real HTTP proxy that flips one byte of every file in a
// `POST /api/files/bulk-read` answer and keeps its header (a damaged store, a man in the middle
// on plain http). `dsync sync` must write none of those bytes (no file is made of them), the
// pass fails naming the mismatch, and a later pass straight to the server brings the true bytes.
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { forwardUpgrades, testServer } from '../../harness/helpers.ts';
import { BULK_ENTRIES, BULK_FILE_MAX } from '../../shared/src/base/limits.ts';
import { bulkFrame, readBulkFrames } from '../../shared/src/wire/bulk.ts';
import { dsync } from './run.ts';

/** A proxy in front of `target` whose bulk-read answers carry every file with its first byte flipped. */
async function flippingProxy(target: string) {
  const up = new URL(target);
  const server = createServer((req, res) => {
    const headers = { ...req.headers, host: up.host };
    delete headers['accept-encoding'];
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, async (r) => {
      if (req.url?.split('?')[0] !== '/api/files/bulk-read' || r.statusCode !== 200) {
        res.writeHead(r.statusCode!, r.headers);
        return void r.pipe(res);
      }
      const out: Uint8Array[] = [];
      for await (const { header, bytes } of readBulkFrames(r, { maxEntries: BULK_ENTRIES, maxBytes: BULK_ENTRIES * BULK_FILE_MAX })) {
        const bad = Uint8Array.from(bytes);
        if (bad.length) bad[0] ^= 0xff;
        out.push(...bulkFrame(header as { size: number }, bad));
      }
      const body = Buffer.concat(out);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.end(body);
    });
    req.pipe(fwd);
  });
  forwardUpgrades(server, up);
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((ok) => server.close(ok)) };
}

test('bytes of a bulk read that do not match their root are never written', { timeout: 300_000 }, async () => {
  const s = await testServer({ 'max-load': '0' });
  const proxy = await flippingProxy(s.url);
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-bulk-hostile-'));
  const [a, b] = [path.join(root, 'A'), path.join(root, 'B')];
  mkdirSync(a);
  mkdirSync(b);
  const env = (dev: string) => ({ env: { DSYNC_CACHE_DIR: path.join(root, `cache-${dev}`) } });
  const sync = (dir: string, dev: string, url: string) => dsync(['sync', dir, '-s', url, '--remote', 'proj', '--device', dev, '--json'], env(dev));
  try {
    writeFileSync(path.join(a, 'one.txt'), 'a file new on the server\n');
    writeFileSync(path.join(a, 'two.txt'), 'another file new on the server\n');
    let r = await sync(a, 'A', s.url);
    assert.equal(r.code, 0, r.stderr + r.stdout);

    // through the proxy: every file of a bulk read comes with a byte flipped
    r = await sync(b, 'B', proxy.url);
    assert.equal(r.code, 1, `the pass fails: ${r.stderr}${r.stdout}`);
    assert.match(r.stdout, /do not match their root hash/);
    assert.deepEqual(readdirSync(b), [], 'no file is made of bytes that are not their root');

    // straight to the server: the true bytes, and nothing bad went up meanwhile
    r = await sync(b, 'B', s.url);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.equal(readFileSync(path.join(b, 'one.txt'), 'utf8'), 'a file new on the server\n');
    assert.equal(readFileSync(path.join(b, 'two.txt'), 'utf8'), 'another file new on the server\n');
    assert.equal((await s.stored('proj/one.txt')).toString(), 'a file new on the server\n');
  } finally {
    await proxy.close();
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
