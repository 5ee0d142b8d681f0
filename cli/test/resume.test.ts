// Resume across processes: a `dsync push` killed at about half of a large file (SIGINT as
// Ctrl-C sends it, and SIGKILL), then the same push by a new process, sends only what the
// server lacks: told so by its record of uploads not seen commit (cli/known.ts), or, with
// --no-known (no record), by the file's size. A push whose record has no such upload does not
// say it may resume (one store request less). The real CLI as a child process, a real server
// on a loopback port, and a TCP pipe in front of it that counts the bytes from the client.
// Each step waits for the server's event it needs (the cut session ended, a checkpoint listed),
// not for a byte count: on a loaded machine the server works behind the bytes the pipe passed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { DSYNC, dsync, jsonLines } from './run.ts';
import { TestServer } from '../../e2e/server.ts';
import { KNOWN_MAX_FILE } from '../../shared/src/session/known.ts';
import { RESUME_CHECKPOINT_BYTES } from '../../shared/src/base/limits.ts';
import { until } from '../../harness/wait.ts';
import type { Store } from '../../server/src/store/store.ts';
import { segmentKey, uploadsKey } from '../../server/src/store/keys.ts';

const SIZE = 96 << 20;

/** The records of uploads not seen commit in a cache folder (cli/known.ts). */
const records = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.upload')) : []);

/** The most bytes of `name` an upload checkpoint listed in `store` holds (0: none listed). */
async function checkpointed(store: Store, name: string): Promise<number> {
  const head = await store.backend.getHead(uploadsKey('local', name));
  let most = 0;
  for (const u of head ? (JSON.parse(Buffer.from(head.body).toString()).uploads as { state: string }[]) : []) {
    // (a state replaced by the next checkpoint is deleted: read what is there)
    const state = await store.backend.get(segmentKey(u.state)).catch(() => null);
    if (state) most = Math.max(most, JSON.parse(Buffer.from(state).toString()).written);
  }
  return most;
}

for (const [signal, existing, noKnown] of [
  ['SIGINT', false, false],
  ['SIGKILL', true, false],
  ['SIGKILL', false, true],
] as const) {
  test(`a push killed by ${signal} at half of ${SIZE >> 20} MiB (${existing ? 'a new version of a stored file' : 'a new file'}${noKnown ? ', --no-known: no record, the size rule' : ''}): run again, it says it may resume and sends less than 60% of the file`, async () => {
    const logs: Record<string, unknown>[] = [];
    const s = await testServer({}, (e) => void (e.op === 'push' && logs.push(e)));
    const pipe = await socketPipe({ to: () => s.port });
    const dir = mkdtempSync(path.join(tmpdir(), 'dsync-resume-'));
    try {
      const file = path.join(dir, 'big.bin');
      writeFileSync(file, fastRandomBytes(5, SIZE));
      if (existing) await pushBytes(s, 'big.bin', fastRandomBytes(6, 1 << 20));
      const cache = path.join(dir, 'known');
      const env = { ...process.env, DSYNC_CACHE_DIR: cache };
      const run = () => spawn(process.execPath, [DSYNC, 'push', file, '--server', pipe.wsUrl, noKnown ? '--no-known' : '--force'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      const first = run();
      const exited = new Promise((r) => first.on('close', r));
      await new Promise<void>((r) => {
        const t = setInterval(() => pipe.fromClient > SIZE / 2 && (clearInterval(t), r()), 10);
      });
      first.kill(signal);
      await exited;
      const firstSent = pipe.fromClient;
      assert.ok(firstSent < SIZE, 'killed before the end');
      // the server has ended the cut session (its upload suspended and listed) before the next run
      await until('the cut session logged', () => logs.some((e) => e.name === 'big.bin' && e.aborted));
      // the killed upload is on record, under its server and name (none kept with --no-known)
      assert.equal(records(cache).length, noKnown ? 0 : 1, 'the record of the upload');
      if (!noKnown) assert.match(JSON.parse(readFileSync(path.join(cache, records(cache)[0]), 'utf8')).key, /^ws:\/\/127\.0\.0\.1:\d+\/sync.*\nbig\.bin$/s);
      const second = run();
      let out = '';
      second.stdout.on('data', (d) => (out += d));
      const code = await new Promise((r) => second.on('close', r));
      assert.equal(code, 0);
      const sent = pipe.fromClient - firstSent;
      assert.ok(sent < 0.6 * SIZE, `the second run sent ${sent} bytes of ${SIZE}`);
      assert.equal(jsonLines(out)[0].version, existing ? 2 : 1);
      assert.equal(logs[logs.length - 1].resume, true, 'the second run says it may resume');
      assert.ok((logs[logs.length - 1].resumedChunks as number) > 0, JSON.stringify(logs));
      assert.deepEqual(records(cache), [], 'the record ends at the commit');
      assert.ok((await s.stored('big.bin')).equals(Buffer.from(fastRandomBytes(5, SIZE))), 'stored exactly');
    } finally {
      pipe.close();
      await s.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('a server killed after three checkpoints of an upload and started again: the push run again resumes from the last one listed', async () => {
  const size = 128 << 20;
  const server = await new TestServer().start();
  const pipe = await socketPipe({ to: () => Number(new URL(server.url).port) });
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-resume-kill-'));
  try {
    const file = path.join(dir, 'big.bin');
    const bytes = fastRandomBytes(7, size);
    writeFileSync(file, bytes);
    const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'known') };
    const run = () => spawn(process.execPath, [DSYNC, 'push', file, '--server', pipe.wsUrl, '--retries', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const first = run();
    const exited = new Promise((r) => first.on('close', r));
    // killed once a checkpoint of three RESUME_CHECKPOINT_BYTES is listed (of the eight)
    await until('three checkpoints listed', async () => (await checkpointed(server.store, 'big.bin')) >= 3 * RESUME_CHECKPOINT_BYTES, 300_000, 10);
    await server.kill();
    assert.equal(await exited, 1, 'the push failed with its server');
    const firstSent = pipe.fromClient;
    await server.start();
    const second = run();
    let out = '';
    second.stdout.on('data', (d) => (out += d));
    assert.equal(await new Promise((r) => second.on('close', r)), 0);
    const sent = pipe.fromClient - firstSent;
    // what was written past the last checkpoint listed is lost; at least three were listed
    assert.ok(sent < size - 2.5 * RESUME_CHECKPOINT_BYTES, `the second run sent ${sent} bytes of ${size}`);
    assert.ok(jsonLines(out)[0].matchedBytes >= 3 * RESUME_CHECKPOINT_BYTES, out);
    assert.equal(jsonLines(out)[0].version, 1);
    assert.ok((await server.storedBytes('big.bin', 1)).equals(Buffer.from(bytes)), 'stored exactly');
  } finally {
    pipe.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test(`pushes of a file of ${(KNOWN_MAX_FILE >> 20) + 1} MiB (above KNOWN_MAX_FILE: the three phases) that were not cut off: the next does not say it may resume, and a small edit goes as its changed bytes`, async () => {
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({}, (e) => void (e.op === 'push' && logs.push(e)));
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-resume-none-'));
  try {
    const file = path.join(dir, 'big.bin');
    const cache = path.join(dir, 'known');
    const bytes = fastRandomBytes(9, KNOWN_MAX_FILE + (1 << 20));
    writeFileSync(file, bytes);
    const run = async () => {
      const r = await dsync(['push', file, '--server', s.wsUrl, '--json'], { env: { DSYNC_CACHE_DIR: cache } });
      assert.equal(r.code, 0, r.stderr);
      return jsonLines(r.stdout)[0];
    };
    assert.equal((await run()).version, 1);
    assert.equal(logs.at(-1)!.resume, false, 'nothing on record: the first push does not say it may resume');
    assert.deepEqual(records(cache), [], 'the record ends at the commit');
    // a small edit: 2 KB in the middle
    bytes.set(fastRandomBytes(10, 2048), bytes.length >> 1);
    writeFileSync(file, bytes);
    const rep = await run();
    assert.equal(rep.version, 2);
    assert.equal(rep.knownVersion, undefined, 'the three phases');
    assert.ok(rep.literalBytes < 64 << 10, JSON.stringify(rep));
    assert.equal(logs.at(-1)!.resume, false, 'the second push does not say it may resume');
    assert.deepEqual(records(cache), []);
    assert.ok((await s.stored('big.bin')).equals(Buffer.from(bytes)), 'stored exactly');
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
