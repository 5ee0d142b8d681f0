// `dsync push` with several files: each is stored exactly, and all go over one connection
// (counted by a TCP relay in front of a real server on a loopback port).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { fastRandomBytes, textBytes } from '../../shared/src/testdata.ts';
import { testServer } from '../../server/test/helpers.ts';

const root = new URL('../..', import.meta.url).pathname;

test('dsync push FILE... sends the files over one connection per compression setting and prints a report per file', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-push-'));
  let connections = 0;
  const relay = net.createServer((c) => {
    connections++;
    const up = net.connect(s.port, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  try {
    const files = [
      ['a.txt', textBytes(1, 300_000)],
      ['b.bin', fastRandomBytes(2, 200_000)],
      ['c.bin', fastRandomBytes(3, 10)],
    ] as const;
    for (const [n, b] of files) writeFileSync(path.join(dir, n), b);
    const port = (relay.address() as net.AddressInfo).port;
    const run = () => promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', ...files.map(([n]) => path.join(dir, n)), '--server', `ws://127.0.0.1:${port}`], { encoding: 'utf8' });
    const reports = (await run()).stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(reports.map((r) => [r.name, r.version, r.size]), files.map(([n, b]) => [n, 1, b.length]));
    for (const [n, b] of files) assert.deepEqual(await s.stored(n), Buffer.from(b));
    // the random 200 kB do not compress: that push runs on the endpoint without deflate
    assert.deepEqual(reports.map((r) => r.deflate), [true, false, true]);
    assert.equal(connections, 2, 'one connection with deflate (two files), one without');
    // again: the unchanged files are deltas with no Delta Bytes, over two new connections
    const again = (await run()).stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(again.map((r) => [r.version, r.literalBytes]), files.map(() => [2, 0]));
    assert.equal(connections, 4);
  } finally {
    relay.close();
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
