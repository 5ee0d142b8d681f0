// Faults and exhaustion, with a real server process: a full disk (a data directory on a tmpfs of
// a few MiB, mounted in a mount namespace of the server's own), Checksum Lists that would take
// the server's memory, a handshake that never ends.
import assert from 'node:assert/strict';
import { type AddressInfo, connect, createServer } from 'node:net';
import { test } from 'node:test';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { sendChecksumList } from '../../harness/attacks.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { ownServer } from '../../harness/own-server.ts';
import { until } from '../../harness/wait.ts';

test('a full disk: the push gets a clear Error soon after the failure, even while the server is not reading its socket, and is not retried', async () => {
  // 12 MiB of disk; the server pauses its socket once 1 MiB waits to be processed
  const s = await ownServer(['--max-in-flight', String(1 << 20)], 12 << 20);
  try {
    const small = fastRandomBytes(1, 1_000_000);
    assert.equal((await pushBytes(s, 'kept.bin', small)).version, 1);
    const phases: string[] = [];
    const t0 = Date.now();
    const err = await pushBytes(s, 'big.bin', fastRandomBytes(2, 48 << 20), { retries: 3, onProgress: (p) => phases.push(p) }).then(
      () => assert.fail('the push succeeded on a full disk'),
      (e: Error) => e,
    );
    const failedAt = Date.now();
    assert.ok(err instanceof RemoteError, `${err}`);
    assert.equal(err.code, ErrorCode.Internal);
    assert.match(err.message, /disk is full/);
    assert.ok(!phases.includes('retrying'), 'a full disk is not retried');
    // (the server's log line comes through its stdout, which may be read after its Error)
    const find = () => s.logs.find((e) => e.op === 'push' && e.error === ErrorCode.Internal);
    await until(`the server's log line of the failure (${JSON.stringify(s.logs)})`, () => !!find());
    const logged = find()!;
    assert.match(String(logged.message), /ENOSPC|no space/i);
    // a deadline, generous for a loaded machine: a server that sent the Error only once it read
    // its socket again would leave the client blocked on backpressure until a session clock
    // ended it (--idle-timeout-ms, 2 min)
    const lag = failedAt - (logged.t as number);
    assert.ok(lag < 30_000, `the client knew ${lag} ms after the server failed (push took ${failedAt - t0} ms)`);
    // the server still serves, and what it stored is intact
    const res = await fetch(`${s.url}/api/download?name=kept.bin`);
    assert.equal(res.status, 200);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(small));
  } finally {
    await s.stop();
  }
});

test('memory budget: Checksum Lists past a session\'s share, or past what the budget has left, are refused with LimitExceeded; memory stays bounded and is given back', async () => {
  const MiB = 1 << 20;
  const s = await ownServer(['--memory-budget', String(64 * MiB), '--max-session-memory', String(32 * MiB)]);
  try {
    const rss0 = s.memory().rss;
    // 1 M chunks (52 MB at 52 bytes each) is past one session's 32 MiB
    // (the server's log says which it refused: a refusal may come after the client is done)
    const refusals = async (prefix: string, n: number) => {
      const of = () => s.logs.filter((e) => String(e.name).startsWith(prefix) && e.error === ErrorCode.LimitExceeded);
      // each refusal reads a list of up to 52 MB first: waited for, generous for a loaded machine
      await until(`${n} refusals of ${prefix}* (${JSON.stringify(s.logs)})`, () => of().length >= n);
      // (and a moment for any refusal beyond them, which the callers' counts rule out)
      await new Promise((r) => setTimeout(r, 300));
      return of().map((e) => String(e.message));
    };
    const big = await Promise.all(Array.from({ length: 6 }, (_, k) => sendChecksumList(s.wsUrl, 1 << 20, `big${k}`)));
    const bigRefused = await refusals('big', 6);
    assert.equal(bigRefused.length, 6, JSON.stringify(s.logs));
    for (const m of bigRefused) assert.match(m, /its share of the server's memory \(32 MiB, --max-session-memory\)/);
    big.forEach((a) => a.close());
    // 400 k chunks (20.8 MB) fit a share; three such sessions at once do not fit 64 MiB
    const mid = await Promise.all(Array.from({ length: 6 }, (_, k) => sendChecksumList(s.wsUrl, 400_000, `mid${k}`)));
    const midRefused = await refusals('mid', 3);
    assert.equal(midRefused.length, 3, JSON.stringify(s.logs));
    for (const m of midRefused) assert.match(m, /memory for sessions is in use \(64 MiB, --memory-budget\)/);
    const { peak } = s.memory();
    assert.ok(peak - rss0 < 128 * MiB, `peak RSS ${(peak / MiB).toFixed(0)} MiB, from ${(rss0 / MiB).toFixed(0)} MiB`);
    // the shares come back when those sessions end: a real push runs
    mid.forEach((a) => a.close());
    await new Promise((r) => setTimeout(r, 200));
    const data = fastRandomBytes(3, 4_000_000);
    assert.equal((await pushBytes(s, 'after.bin', data)).version, 1);
  } finally {
    await s.stop();
  }
});

test('a connection whose handshake never ends: the push gives it up at its deadline, closes it and retries on a new one', { timeout: 180_000 }, async () => {
  const s = await testServer();
  // a front on loopback: its first connection is taken and never answered (a server or a
  // middlebox that stalls), later ones pass to the server
  let seen = 0;
  let heldClosed = false;
  const front = createServer((c) => {
    c.on('error', () => {});
    if (seen++ === 0) {
      c.on('close', () => (heldClosed = true));
      return c.resume();
    }
    const up = connect(Number(new URL(s.url).port), '127.0.0.1');
    up.on('error', () => c.destroy());
    c.pipe(up).pipe(c);
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  try {
    const bytes = fastRandomBytes(3, 300_000);
    const phases: string[] = [];
    const url = `ws://127.0.0.1:${(front.address() as AddressInfo).port}/sync`;
    const r = await pushBytes({ wsUrl: url }, 'held.bin', bytes, { retries: 1, connectMs: 2000, onProgress: (p) => phases.push(p) });
    assert.equal(r.version, 1);
    assert.ok(phases.includes('retrying'), `phases: ${phases}`);
    assert.equal(seen, 2, 'one held connection, then one that ran the push');
    assert.ok((await s.stored('held.bin', 1)).equals(bytes));
    await until('the held connection closed by the client', () => heldClosed);
  } finally {
    front.close();
    await s.stop();
  }
});
