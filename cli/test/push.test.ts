// `dsync push` with several files: each is stored exactly, and all go over one connection
// (counted by a TCP relay in front of a real server on a loopback port).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';

// the compiled CLI, built by run.ts when a source changed
import { root } from './run.ts';

test('dsync push FILE... sends the files over one connection per compression setting and prints a report per file', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-push-'));
  const relay = await socketPipe({ to: () => s.port });
  try {
    const files = [
      ['a.txt', textBytes(1, 300_000)],
      ['b.bin', fastRandomBytes(2, 200_000)],
      ['c.bin', fastRandomBytes(3, 10)],
    ] as const;
    for (const [n, b] of files) writeFileSync(path.join(dir, n), b);
    const { port } = relay;
    const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'known') };
    const run = () => promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', ...files.map(([n]) => path.join(dir, n)), '--server', `ws://127.0.0.1:${port}`], { encoding: 'utf8', env });
    const reports = (await run()).stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(reports.map((r) => [r.name, r.version, r.size]), files.map(([n, b]) => [n, 1, b.length]));
    for (const [n, b] of files) assert.deepEqual(await s.stored(n), Buffer.from(b));
    // the random 200 kB do not compress: that push runs on the endpoint without deflate
    assert.deepEqual(reports.map((r) => r.deflate), [true, false, true]);
    assert.equal(relay.connections, 2, 'one connection with deflate (two files), one without');
    // again: the unchanged files are deltas with no Delta Bytes, over two new connections, each
    // pushed against the version the first run stored and remembered (one round trip); the
    // server stores nothing for unchanged content: the version stays 1
    const again = (await run()).stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(again.map((r) => [r.version, r.literalBytes, r.knownVersion]), files.map(() => [1, 0, 1]));
    assert.equal(relay.connections, 4);
    // a third run that forgot nothing but is told not to use it: the three phases
    const third = (await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', path.join(dir, 'a.txt'), '--server', `ws://127.0.0.1:${port}`, '--no-known'], { encoding: 'utf8', env })).stdout;
    assert.equal(JSON.parse(third).knownVersion, undefined);
    assert.equal(JSON.parse(third).version, 1);
    // a cache file cut short is ignored: the three phases, and the file is remembered anew
    for (const f of readdirSync(path.join(dir, 'known'))) truncateSync(path.join(dir, 'known', f), 40);
    const one = async () => JSON.parse((await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', path.join(dir, 'a.txt'), '--server', `ws://127.0.0.1:${port}`], { encoding: 'utf8', env })).stdout);
    assert.deepEqual([(await one()).knownVersion, (await one()).knownVersion], [undefined, 1]);
  } finally {
    relay.close();
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a file of OFF_THREAD_MIN bytes and more: the CLI hashes it in worker threads, and its edit goes up as a delta, stored exactly', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-large-'));
  try {
    const file = path.join(dir, 'big.bin');
    const bytes = fastRandomBytes(9, OFF_THREAD_MIN + (3 << 20) + 777);
    writeFileSync(file, bytes);
    const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'known') };
    const push = async () => JSON.parse((await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', file, '--server', s.wsUrl, '--no-known'], { encoding: 'utf8', env, maxBuffer: 1 << 20 })).stdout);
    const first = await push();
    assert.equal(first.hashWorkers, Math.min(2, availableParallelism() - 1), 'one worker per spare core, at most 2');
    assert.deepEqual(await s.stored('big.bin'), Buffer.from(bytes));
    // 64 KiB rewritten in three places: a delta of a few chunks, every other chunk matched by
    // the strong hashes the workers computed
    for (const at of [5 << 20, 40 << 20, bytes.length - 70_000]) bytes.set(fastRandomBytes(at, 65_536), at);
    writeFileSync(file, bytes);
    const second = await push();
    assert.equal(second.version, 2);
    assert.ok(second.literalBytes < 1 << 20, `a delta (${second.literalBytes} literal bytes)`);
    assert.deepEqual(await s.stored('big.bin'), Buffer.from(bytes));
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
