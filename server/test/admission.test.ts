// Admission past capacity (--max-sessions, guard.ts Admission): a real server on a loopback
// port that runs one session at a time refuses the next with Busy and the seconds to wait, and
// a file request (a download, a listing) with 503 and Retry-After; the client library and the
// CLI wait that long and try again, and once the place is free a push is admitted and stored
// byte-exact, a download and a folder pull served byte-exact.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type Socket, connect } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { fetchWhileBusy, retryAfterS } from '../../shared/src/transport/busy.ts';
import { encode } from '../../shared/src/wire/codec.ts';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION, busyRetryS } from '../../shared/src/wire/protocol.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { dsync } from '../../cli/test/run.ts';

/** A push session that holds its place: Hello, then silence once Ready is in. */
async function heldSession(wsUrl: string, name: string): Promise<WebSocket> {
  const ws = new WebSocket(wsUrl);
  await new Promise((r, j) => (ws.on('open', r), ws.on('error', j)));
  const ready = new Promise<void>((resolve, reject) =>
    ws.on('message', (d: Buffer) => (d[0] === Msg.Ready ? resolve() : reject(new Error(`held session got message ${d[0]}: ${d.subarray(5).toString()}`)))),
  );
  ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name }));
  await ready;
  return ws;
}

const closed = (ws: WebSocket) => new Promise((r) => (ws.readyState === WebSocket.CLOSED ? r(null) : ws.once('close', r)));

/** A connection whose push of `c.bin` starts once `hold` has held the server's thread for
 *  600 ms (~97% of the time, 30 ms at a stretch): resolves with the Hello's answer, its error
 *  code, or minus the type of any other message (-Msg.Ready: admitted). */
async function helloAfter(wsUrl: string, hold: () => void): Promise<{ ws: WebSocket; answer: number }> {
  const ws = new WebSocket(wsUrl);
  await new Promise((r) => ws.on('open', r));
  const reply = new Promise<number>((resolve) => ws.on('message', (d: Buffer) => resolve(d[0] === Msg.Error ? d.readUInt16LE(1) : -d[0])));
  for (let end = performance.now() + 600; performance.now() < end; ) {
    hold();
    await new Promise((r) => setTimeout(r, 1));
  }
  ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'c.bin' }));
  return { ws, answer: await reply };
}

test('past --max-sessions a new session is refused as busy with the seconds to wait; the library waits, tries again and is admitted once a place is free', async () => {
  const s = await testServer({ 'max-sessions': '1' });
  try {
    const held = await heldSession(s.wsUrl, 'held.bin');
    // refused at once when told not to wait: Busy, with "retry in N s", nothing stored
    const refused = await pushBytes(s, 'a.bin', fastRandomBytes(1, 50_000), { busyWaitMs: 0 }).then(
      () => assert.fail('a push past --max-sessions was admitted'),
      (e) => e,
    );
    assert.ok(refused instanceof RemoteError, String(refused));
    assert.equal(refused.code, ErrorCode.Busy);
    assert.match(refused.message, /busy; retry in \d+ s$/);
    assert.ok(busyRetryS(refused.message) >= 1);
    assert.equal(await (await s.storeOf('local')).latest('a.bin'), 0);

    // the library waits while busy; the place frees up while it waits: admitted and stored
    const bytes = fastRandomBytes(2, 300_000);
    const busy: number[] = [];
    const t0 = performance.now();
    const waiting = pushBytes(s, 'a.bin', bytes, { onProgress: (phase, secs) => phase === 'busy' && busy.push(secs!) });
    while (!busy.length) await new Promise((r) => setTimeout(r, 20));
    held.terminate();
    await closed(held);
    const r = await waiting;
    assert.equal(r.version, 1);
    assert.ok(busy.every((x) => x >= 1), String(busy));
    assert.ok(performance.now() - t0 >= 1000 * busy[0], 'the client waited the seconds it was told');
    assert.ok(Buffer.from(bytes).equals(await s.stored('a.bin')), 'stored byte-exact');

    // a free server admits at once again, and the held session's name was never stored
    assert.equal((await pushBytes(s, 'b.bin', fastRandomBytes(3, 10_000), { busyWaitMs: 0 })).version, 1);
    assert.equal(await (await s.storeOf('local')).latest('held.bin'), 0);
  } finally {
    await s.stop();
  }
});

test('a session on an open connection is refused as busy too, and the connection closes', async () => {
  const s = await testServer({ 'max-sessions': '1' });
  try {
    // a connection opened while the server was free; then another session takes the one place
    const ws = new WebSocket(s.wsUrl);
    await new Promise((r) => ws.on('open', r));
    const held = await heldSession(s.wsUrl, 'held.bin');
    const error = new Promise<{ code: number; message: string }>((resolve) => ws.on('message', (d: Buffer) => d[0] === Msg.Error && resolve({ code: d.readUInt16LE(1), message: d.subarray(5).toString() })));
    ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Pull, params: DEFAULT_PARAMS, algo: 3, size: 0, basisVersion: 0, name: 'x.bin' }));
    const e = await error;
    assert.equal(e.code, ErrorCode.Busy);
    assert.match(e.message, /retry in \d+ s$/);
    await closed(ws);
    held.terminate();
  } finally {
    await s.stop();
  }
});

test('dsync push waits for a busy server, says so, and pushes once admitted', async () => {
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({ 'max-sessions': '1' }, (e) => logs.push(e));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dsync-busy-'));
  try {
    const file = path.join(dir, 'f.bin');
    const bytes = fastRandomBytes(4, 200_000);
    writeFileSync(file, bytes);
    const held = await heldSession(s.wsUrl, 'held.bin');
    const run = dsync(['push', file, '--server', s.wsUrl, '--name', 'f.bin', '--no-known']);
    // the place frees once the CLI's push was refused
    for (const t0 = performance.now(); !logs.some((e) => e.name === 'f.bin' && e.error === ErrorCode.Busy); ) {
      assert.ok(performance.now() - t0 < 60_000, 'the CLI was never refused');
      await new Promise((r) => setTimeout(r, 20));
    }
    held.terminate();
    const out = await run;
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stderr, /f\.bin: the server is busy; trying again in \d+ s/);
    assert.ok(Buffer.from(bytes).equals(await s.stored('f.bin')));
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('with the thread saturated (--max-load) and two sessions running, a new session is refused as busy at once (no wait for a place); once the load is gone it is admitted', async () => {
  const s = await testServer({ 'max-sessions': '0', 'max-load': '0.5', 'max-admission-wait-ms': '600000' });
  try {
    const held = [await heldSession(s.wsUrl, 'a.bin'), await heldSession(s.wsUrl, 'b.bin')];
    // this process is the server's: its thread kept busy, with CPU time of its own. That is so
    // only while the machine gives the process the CPU: a hold that got less than half of
    // --max-load of its wall time is the starved thread of the next test (admitted, rightly),
    // one between that and --max-load may go either way; such holds are tried again.
    const saturated = async () => {
      const [cpu0, w0] = [process.cpuUsage(), performance.now()];
      const { ws, answer } = await helloAfter(s.wsUrl, () => {
        for (const t = performance.now() + 30; performance.now() < t; );
      });
      const cpu = process.cpuUsage(cpu0);
      return { ws, answer, share: (cpu.user + cpu.system) / 1000 / (performance.now() - w0) };
    };
    const shares: number[] = [];
    for (;;) {
      const t0 = performance.now();
      const { ws, answer, share } = await saturated();
      shares.push(share);
      if (answer === ErrorCode.Busy) {
        assert.ok(performance.now() - t0 < 60_000, 'refused at once, not after --max-admission-wait-ms');
        await closed(ws);
        break;
      }
      assert.equal(answer, -Msg.Ready, `answered ${answer}`);
      assert.ok(share < 0.5, `admitted with the thread saturated by this process (CPU shares of the holds: ${shares.map((x) => x.toFixed(2))})`);
      assert.ok(shares.length < 30, `the machine never gave this process the CPU for a hold (CPU shares: ${shares.map((x) => x.toFixed(2))})`);
      ws.terminate();
      await closed(ws);
    }
    // the thread idle again: admitted, with the two sessions still running (the client waits
    // out a refusal while the server still measures itself busy: on a loaded machine it may)
    assert.equal((await pushBytes(s, 'd.bin', fastRandomBytes(5, 10_000))).version, 1);
    for (const h of held) h.terminate();
  } finally {
    await s.stop();
  }
});

test('a thread held up while the process gets no CPU time (the machine\'s other processes starve it) refuses nothing: a session with two running is admitted', async () => {
  const s = await testServer({ 'max-sessions': '0', 'max-load': '0.5', 'max-admission-wait-ms': '0' });
  try {
    const held = [await heldSession(s.wsUrl, 'a.bin'), await heldSession(s.wsUrl, 'b.bin')];
    // the thread blocked as by a starved core, using no CPU itself
    const blocker = new Int32Array(new SharedArrayBuffer(4));
    const { ws, answer } = await helloAfter(s.wsUrl, () => Atomics.wait(blocker, 0, 0, 30));
    assert.equal(answer, -Msg.Ready, 'admitted: Ready, not Busy');
    for (const h of [...held, ws]) h.terminate();
  } finally {
    await s.stop();
  }
});

test('past the limit, on a thread with room, a session waits (--max-admission-wait-ms) for a place instead of being refused: admitted and stored once one frees; with no wait it is refused at once', async () => {
  // --max-load 0: the thread always has room, whatever else loads the machine (the saturated
  // thread's refusals are the tests above)
  const s = await testServer({ 'max-sessions': '1', 'max-load': '0', 'max-admission-wait-ms': '20000' });
  try {
    const held = await heldSession(s.wsUrl, 'held.bin');
    const bytes = fastRandomBytes(7, 200_000);
    const busy: number[] = [];
    const waiting = pushBytes(s, 'w.bin', bytes, { busyWaitMs: 0, onProgress: (phase, secs) => phase === 'busy' && busy.push(secs!) });
    await new Promise((r) => setTimeout(r, 500));
    held.terminate();
    await closed(held);
    assert.equal((await waiting).version, 1);
    assert.deepEqual(busy, [], 'never refused');
    assert.ok(Buffer.from(bytes).equals(await s.stored('w.bin')), 'stored byte-exact');
  } finally {
    await s.stop();
  }
  const t = await testServer({ 'max-sessions': '1', 'max-load': '0', 'max-admission-wait-ms': '0' });
  try {
    const held = await heldSession(t.wsUrl, 'held.bin');
    const t0 = performance.now();
    const refused = await pushBytes(t, 'r.bin', fastRandomBytes(8, 10_000), { busyWaitMs: 0 }).then(
      () => assert.fail('admitted past --max-sessions'),
      (e) => e,
    );
    assert.equal((refused as RemoteError).code, ErrorCode.Busy);
    // at once, not held until the session ahead ends (never, here): generous for a loaded machine
    assert.ok(performance.now() - t0 < 30_000);
    held.terminate();
  } finally {
    await t.stop();
  }
});

test('past --max-sessions a file request is refused with 503, Retry-After and "busy; retry in N s", having done nothing; health and the event stream still answer; the clients\' wait gets the download once the place is free', async () => {
  const s = await testServer({ 'max-sessions': '1' });
  try {
    const bytes = fastRandomBytes(6, 2_500_000);
    await pushBytes(s, 'dir/a.bin', bytes);
    const held = await heldSession(s.wsUrl, 'held.bin');
    const get = (p: string, init?: RequestInit) => fetch(s.url + p, init);

    const refused = await get('/api/download?name=dir%2Fa.bin');
    assert.equal(refused.status, 503);
    const after = refused.headers.get('Retry-After');
    assert.match(after ?? '', /^\d+$/);
    assert.ok(Number(after) >= 1);
    assert.deepEqual(await refused.json(), { error: `the server is busy; retry in ${after} s` });
    assert.equal(retryAfterS(refused), Number(after));
    for (const [method, p] of [
      ['GET', '/api/files?prefix=dir%2F'],
      ['GET', '/api/versions?name=dir%2Fa.bin'],
      ['GET', '/api/search?q=a'],
      ['DELETE', '/api/files?name=dir%2Fa.bin'],
    ]) {
      const r = await get(p, { method });
      assert.equal(r.status, 503, `${method} ${p}`);
      assert.match(r.headers.get('Retry-After') ?? '', /^\d+$/);
      assert.match(((await r.json()) as { error: string }).error, /^the server is busy; retry in \d+ s$/);
    }
    assert.equal(await (await s.storeOf('local')).latest('dir/a.bin'), 1, 'the refused delete did nothing');

    // outside the count: the health check, who am I, the event stream
    const health = await get('/api/health');
    assert.equal(health.status, 200, await health.text());
    assert.equal((await get('/api/whoami')).status, 200);
    const stream = new AbortController();
    const events = await get('/api/events', { signal: stream.signal });
    assert.equal(events.status, 200);
    stream.abort();

    // the clients' wait (shared/src/transport/busy.ts): refused, told the seconds, then served once the place is free
    const waits: number[] = [];
    const t0 = performance.now();
    const waiting = fetchWhileBusy(() => get('/api/download?name=dir%2Fa.bin'), { onBusy: (secs) => waits.push(secs) });
    while (!waits.length) await new Promise((r) => setTimeout(r, 20));
    held.terminate();
    await closed(held);
    const served = await waiting;
    assert.equal(served.status, 200);
    assert.ok(Buffer.from(bytes).equals(Buffer.from(await served.arrayBuffer())), 'downloaded byte-exact');
    assert.ok(performance.now() - t0 >= 1000 * waits[0], 'the client waited the seconds it was told');

    // a wait of 0 answers the refusal itself
    const again = await heldSession(s.wsUrl, 'held.bin');
    const r = await fetchWhileBusy(() => get('/api/files'), { busyWaitMs: 0 });
    assert.equal(r.status, 503);
    again.terminate();
  } finally {
    await s.stop();
  }
});

test('dsync pull of a folder waits for a busy server (its listing and its sessions), says so, and pulls once admitted', async () => {
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({ 'max-sessions': '1' }, (e) => logs.push(e));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dsync-busy-'));
  try {
    const files = { 'docs/x.bin': fastRandomBytes(7, 300_000), 'docs/sub/y.bin': fastRandomBytes(8, 40_000) };
    for (const [name, b] of Object.entries(files)) await pushBytes(s, name, b);
    const held = await heldSession(s.wsUrl, 'held.bin');
    const out = path.join(dir, 'out');
    const run = dsync(['pull', 'docs/', '--server', s.url, '--out', out]);
    // the place frees once the CLI's listing was refused
    for (const t0 = performance.now(); !logs.some((e) => e.error === 'busy' && e.path === '/files'); ) {
      assert.ok(performance.now() - t0 < 60_000, 'the CLI was never refused');
      await new Promise((r) => setTimeout(r, 20));
    }
    held.terminate();
    const ran = await run;
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stderr, /the server is busy; trying again in \d+ s/);
    for (const [name, b] of Object.entries(files)) assert.ok(Buffer.from(b).equals(readFileSync(path.join(out, name.slice('docs/'.length)))), name);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** Sends `head` and `body` on a raw connection, the body's second half 300 ms after its first
 *  (a client still sending when the answer comes), then reads: the answer's head, or the error
 *  the connection met. */
async function sendSlowly(port: number, head: string, bodyBytes: number): Promise<{ socket: Socket; answer: string }> {
  const c = connect(port, '127.0.0.1');
  await new Promise((r) => c.on('connect', r));
  let got = '';
  const answer = new Promise<string>((resolve) => {
    c.on('data', (d) => {
      got += d;
      if (got.includes('\r\n\r\n')) resolve(got);
    });
    c.on('error', (e) => resolve(`error ${(e as NodeJS.ErrnoException).code} after ${got.length} bytes`));
    c.on('close', () => resolve(`closed after ${got.length} bytes: ${got}`));
  });
  c.pause();
  c.write(head + `Content-Length: ${bodyBytes}\r\n\r\n`);
  c.write(Buffer.alloc(bodyBytes >> 1));
  await new Promise((r) => setTimeout(r, 300));
  c.write(Buffer.alloc(bodyBytes - (bodyBytes >> 1)));
  c.resume();
  return { socket: c, answer: await answer };
}

test('a request refused as busy while its body is still coming: the client gets the 503 and its Retry-After, not a reset, and the connection serves the next request', async () => {
  const s = await testServer({ 'max-sessions': '1', 'max-admission-wait-ms': '0' });
  const port = Number(new URL(s.url).port);
  try {
    const held = await heldSession(s.wsUrl, 'held.bin');
    for (const [what, head, bytes] of [
      ['a vault pack', `PUT /api/vaults/${'a'.repeat(32)}/packs/${'b'.repeat(64)} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`, 8 << 20],
      ['a bulk upload', `POST /api/files/bulk HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/octet-stream\r\n`, 4 << 20],
    ] as const) {
      const { socket, answer } = await sendSlowly(port, head, bytes);
      try {
        assert.match(answer, /^HTTP\/1\.1 503 /, `${what}: ${answer.slice(0, 200)}`);
        assert.match(answer, /\r\nretry-after: \d+\r\n/i, what);
        assert.doesNotMatch(answer, /\r\nconnection: close\r\n/i, what);
        // the body was read and dropped: the same connection answers the next request
        let more = '';
        const next = new Promise<string>((resolve) => socket.on('data', (d) => (more += d).includes('\r\n\r\n') && resolve(more)).on('close', () => resolve(`closed: ${more}`)));
        socket.write(`GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
        assert.match(await next, /^HTTP\/1\.1 (200|503) /, `${what}: the next request on the connection`);
      } finally {
        socket.destroy();
      }
    }
    // a body above guard.ts DRAIN_MAX is not waited for: the answer, then the connection closes
    const big = await sendSlowly(port, `PUT /api/vaults/${'a'.repeat(32)}/packs/${'b'.repeat(64)} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`, 64 << 20).catch((e) => ({ socket: null, answer: String(e) }));
    big.socket?.destroy();
    assert.doesNotMatch(big.answer, /^HTTP\/1\.1 2/, 'a body above DRAIN_MAX was never taken in');
    held.terminate();
  } finally {
    await s.stop();
  }
});
