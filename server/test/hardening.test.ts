// Accounts, names, limits, concurrent writers, disconnects and resumed uploads, against a real
// server on a loopback port.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { unreferenced } from '../src/store/gc.ts';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { encode } from '../../shared/src/wire/codec.ts';
import { Conn, RemoteError } from '../../shared/src/transport/conn.ts';
import { ConnectionPool } from '../../shared/src/transport/connection-pool.ts';
import { sessionUrl } from '../../shared/src/session/delta-client.ts';
import { DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/wire/protocol.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { addUser } from '../src/http/auth.ts';
import { validateName } from '../../shared/src/wire/names.ts';
import { pullBytes, pushBytes, testServer } from '../../harness/helpers.ts';
import { holdingPipe, socketPipe } from '../../harness/pipe.ts';
import { until } from '../../harness/wait.ts';

const hello = (name: string, extra: Partial<Parameters<typeof encode>[0]> = {}) =>
  encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 10, basisVersion: 0, name, ...extra } as any);

/** Opens a raw WebSocket, sends frames, and returns the first reply (decoded type + code) or the close. */
async function raw(url: string, frames: Uint8Array[], headers: Record<string, string> = {}): Promise<{ error?: number; message?: string; close?: number; status?: number }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { headers });
    ws.on('unexpected-response', (_req, res) => resolve({ status: res.statusCode }));
    ws.on('open', () => frames.forEach((f) => ws.send(f)));
    ws.on('message', (d: Buffer) => {
      if (d[0] === Msg.Error) resolve({ error: d.readUInt16LE(1), message: d.subarray(5).toString() });
    });
    ws.on('close', (code) => resolve({ close: code }));
    ws.on('error', () => {});
  });
}

test('file names: accepted and refused', () => {
  for (const ok of ['a.txt', 'dir/sub/file.bin', 'Übersicht.pdf', '日本語/ファイル', 'a b', '.hidden', 'x'.repeat(255)]) assert.equal(validateName(ok), ok.normalize('NFC'));
  assert.equal(validateName('e\u0301'), '\u00e9', 'NFC');
  for (const bad of ['', '/etc/passwd', '../x', 'a/../b', 'a/./b', 'a//b', 'a/', 'a\\b', 'nul\0', 'tab\there', 'CON', 'con.txt', 'dir/LPT1', 'trail.', 'trail ', 'x'.repeat(256), ('a/'.repeat(600) + 'b')]) {
    assert.throws(() => validateName(bad), /invalid file name/, JSON.stringify(bad));
  }
});

test('bad names are refused over the protocol and the REST API', async () => {
  const s = await testServer();
  try {
    const r = await raw(s.wsUrl, [hello('../escape')]);
    assert.equal(r.error, ErrorCode.BadName);
    const res = await fetch(`${s.url}/api/versions?name=${encodeURIComponent('../../etc/passwd')}`);
    assert.equal(res.status, 400);
  } finally {
    await s.stop();
  }
});

test('accounts: tokens, password sessions, namespaces, origins, no secrets in logs', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-users-'));
  const usersFile = path.join(dir, 'users.json');
  const alice = addUser(usersFile, 'alice');
  const bob = addUser(usersFile, 'bob', 'correct horse battery staple');
  const logs: string[] = [];
  const s = await testServer({ users: usersFile }, (e) => logs.push(JSON.stringify(e)));
  const as = (token: string) => class extends WebSocket {
    constructor(url: string) {
      super(url, { headers: { Authorization: `Bearer ${token}` } });
    }
  };
  try {
    // no identity: refused everywhere
    assert.equal((await raw(s.wsUrl, [])).status, 401);
    assert.equal((await fetch(`${s.url}/api/files`)).status, 401);
    assert.equal((await raw(s.wsUrl, [], { Authorization: 'Bearer wrong' })).status, 401);
    // alice pushes; bob cannot see, read or pull it
    const data = fastRandomBytes(5, 100_000);
    const rep = await pushBytes(s, 'secret.txt', data, { WebSocket: as(alice) as any });
    assert.equal(rep.version, 1);
    const get = (p: string, token: string) => fetch(`${s.url}${p}`, { headers: { Authorization: `Bearer ${token}` } });
    assert.deepEqual(((await (await get('/api/files', alice)).json()) as { files: { name: string }[] }).files.map((f) => f.name), ['secret.txt']);
    assert.deepEqual(await (await get('/api/files', bob)).json(), { files: [], folders: [], next: null, complete: true, held: [] });
    assert.equal((await get('/api/download?name=secret.txt', bob)).status, 404);
    assert.equal((await get('/api/versions?name=secret.txt', bob)).status, 404);
    await assert.rejects(pullBytes(s, 'secret.txt', null, { WebSocket: as(bob) as any }), (e: Error) => e instanceof RemoteError && e.code === ErrorCode.NotFound);
    // bob logs in with his password and gets a session cookie that works for REST and sync
    assert.equal((await fetch(`${s.url}/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bob', password: 'wrong' }) })).status, 401);
    const login = await fetch(`${s.url}/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bob', password: 'correct horse battery staple' }) });
    assert.equal(login.status, 200);
    const cookie = login.headers.get('set-cookie')!.split(';')[0];
    assert.deepEqual(await (await fetch(`${s.url}/api/whoami`, { headers: { cookie } })).json(), { user: 'bob', singleUser: false });
    const cookieWs = class extends WebSocket {
      constructor(url: string) {
        super(url, { headers: { cookie } });
      }
    };
    assert.equal((await pushBytes(s, 'mine.txt', data, { WebSocket: cookieWs as any })).version, 1);
    // a page from another origin is refused, even with valid credentials
    assert.equal((await raw(s.wsUrl, [], { cookie, Origin: 'http://evil.example' })).status, 403);
    assert.equal((await fetch(`${s.url}/api/files`, { headers: { cookie, Origin: 'http://evil.example' } })).status, 403);
    assert.equal((await fetch(`${s.url}/api/files`, { headers: { cookie, Origin: s.url } })).status, 200);
    // a socket opened with that login serves sessions until the login ends (logout), which
    // ends it at once with Unauthorized (hostile.test.ts: mid-session too)
    const open = await Conn.open(s.wsUrl, cookieWs as any);
    assert.equal((await pushBytes(s, 'mine.txt', data.subarray(1), { connection: open })).version, 2);
    assert.equal((await fetch(`${s.url}/api/logout`, { method: 'POST', headers: { cookie } })).status, 200);
    await assert.rejects(open.recv(), (e: Error) => e instanceof RemoteError && e.code === ErrorCode.Unauthorized);
    assert.equal(open.usable, false);
    assert.equal((await raw(s.wsUrl, [], { cookie })).status, 401);
    const all = logs.join('\n');
    for (const secret of [alice, bob, 'correct horse battery staple', cookie.split('=')[1]]) assert.ok(!all.includes(secret), 'a secret reached the log');
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('limits: file size, chunk count, chunk size, sessions per user, idle time', async () => {
  const s = await testServer({ 'max-file-size': '1000000', 'max-chunks': '20', 'max-message': String(1 << 20), 'max-sessions-per-user': '3' });
  // idle time on a server of its own: short timeouts would also close the sockets held open
  // below, or a push, on a machine too loaded to send within them
  const quick = await testServer({ 'idle-timeout-ms': '400', 'hello-timeout-ms': '400' });
  try {
    assert.equal((await raw(s.wsUrl, [hello('big', { size: 2_000_000 })])).error, ErrorCode.LimitExceeded);
    await assert.rejects(pushBytes(s, 'many', fastRandomBytes(1, 400_000), { params: { min: 64, avg: 256, max: 1024, op: 0, every: 16 } }), (e: Error) => e instanceof RemoteError && e.code === ErrorCode.LimitExceeded);
    assert.equal((await raw(s.wsUrl, [hello('huge-chunks', { params: { ...DEFAULT_PARAMS, max: 64 << 20 } })])).error, ErrorCode.BadParams);
    // sessions per user: a fourth concurrent socket is refused, the others are fine
    const open = await Promise.all([0, 1, 2].map(() => new Promise<WebSocket>((r) => { const w = new WebSocket(s.wsUrl); w.on('open', () => r(w)); })));
    assert.equal((await raw(s.wsUrl, [])).status, 503);
    open.forEach((w) => w.terminate());
    await until('the server saw the three sockets close', async () => ((await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number }).connections === 0);
    // idle: a session that stops talking gets LimitExceeded
    const idle = await raw(quick.wsUrl, []);
    assert.equal(idle.error, ErrorCode.LimitExceeded);
    assert.match(idle.message!, /no message for 400 ms/);
    // and after all this the server still syncs
    assert.equal((await pushBytes(s, 'ok', fastRandomBytes(2, 50_000))).version, 1);
  } finally {
    await s.stop();
    await quick.stop();
  }
});

test('a permessage-deflate bomb is cut off at the message limit, measured after inflation', async () => {
  // its own server: compressing 64 MiB takes longer than the other test's short idle timeout
  const s = await testServer({ 'max-message': String(1 << 20) });
  try {
    // 64 MiB of zeros deflate to ~64 KiB; the server must refuse it at 1 MiB inflated (close 1009)
    const bomb = await new Promise<number>((resolve) => {
      const ws = new WebSocket(s.wsUrl, { perMessageDeflate: { threshold: 0 } });
      ws.on('open', () => ws.send(new Uint8Array(64 << 20), { compress: true }));
      ws.on('close', (code) => resolve(code));
      ws.on('error', () => {});
    });
    assert.equal(bomb, 1009);
    const m = (await (await fetch(`${s.url}/api/metrics`)).json()) as { rssBytes: number };
    assert.ok(m.rssBytes < 512 << 20, `server RSS ${m.rssBytes}`);
    assert.equal((await pushBytes(s, 'after-bomb', fastRandomBytes(3, 50_000))).version, 1);
  } finally {
    await s.stop();
  }
});

test('concurrent writers: both stored as versions without a claim, one refused as stale with a claim', async () => {
  const s = await testServer();
  try {
    const base = fastRandomBytes(7, 2_000_000);
    await pushBytes(s, 'shared.doc', base);
    const a = applyEdits(base, new Rng(1), { kind: 'insert', total: 2048 });
    const b = applyEdits(base, new Rng(2), { kind: 'cut', total: 2048 });
    const [ra, rb] = await Promise.all([pushBytes(s, 'shared.doc', a), pushBytes(s, 'shared.doc', b)]);
    assert.deepEqual([ra.version, rb.version].sort(), [2, 3]);
    assert.deepEqual(await s.stored('shared.doc', ra.version), Buffer.from(a));
    assert.deepEqual(await s.stored('shared.doc', rb.version), Buffer.from(b));
    // both claim to edit version 3 (with new content: content equal to the latest would be
    // unchanged, no commit): exactly one wins, the other is told it is stale
    const a2 = applyEdits(a, new Rng(3), { kind: 'insert', total: 512 });
    const b2 = applyEdits(b, new Rng(4), { kind: 'insert', total: 512 });
    const results = await Promise.allSettled([pushBytes(s, 'shared.doc', a2, { expect: { version: 3 } }), pushBytes(s, 'shared.doc', b2, { expect: { version: 3 } })]);
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
    assert.equal(won.length, 1);
    assert.equal(lost.length, 1);
    assert.ok(lost[0].reason instanceof RemoteError && lost[0].reason.code === ErrorCode.StaleBasis);
    const winner = results[0].status === 'fulfilled' ? a2 : b2;
    assert.deepEqual(await s.stored('shared.doc'), Buffer.from(winner));
    assert.equal((await (await s.storeOf('local')).versionNumbers('shared.doc')).length, 4);
  } finally {
    await s.stop();
  }
});

test('hostile Verdicts and Delta Bytes: each is refused as Inconsistent and nothing is stored', async () => {
  const s = await testServer();
  try {
    const a = fastRandomBytes(5, 200_000);
    await pushBytes(s, 'kept', a);
    // 'kept' is stored: its one Match Token covers every chunk of `a`; `b` is like no stored file
    const b = fastRandomBytes(6, 200_000);
    const lists = new Map([[a, await chunkSource(bufferSource(a), DEFAULT_PARAMS, 3)], [b, await chunkSource(bufferSource(b), DEFAULT_PARAMS, 3)]]);
    const n = lists.get(b)!.lengths.length;
    // the whole Checksum List, or (end = false) all of it but ChecksumsEnd
    const phase1 = (name: string, bytes: Uint8Array, end = true) => {
      const list = lists.get(bytes)!;
      return [
        hello(name, { size: bytes.length }),
        encode({ type: Msg.Checksums, fastfps: list.fastfps, lengths: list.lengths }),
        ...(end ? [encode({ type: Msg.ChecksumsEnd, count: list.lengths.length, size: bytes.length })] : []),
      ];
    };
    const verdict = (upTo: number, withRoot = false) => encode({ type: Msg.Verdict, upTo, root: withRoot ? new Uint8Array(32) : null, failed: [] }, 32);
    const delta = (...ix: number[]) => {
      const offs = [0];
      for (const l of lists.get(b)!.lengths) offs.push(offs[offs.length - 1] + l);
      return encode({ type: Msg.Delta, indices: Uint32Array.from(ix), chunks: ix.map((i) => b.subarray(offs[i], offs[i + 1])) });
    };
    const na = lists.get(a)!.lengths.length;
    const cases: [string, Uint8Array, Uint8Array[], RegExp, boolean?][] = [
      ['kept', a, [verdict(5)], /ends inside token 0/],
      // a Verdict up to the end without the root is not the last: the next must bring it
      ['kept', a, [verdict(na), verdict(na)], /does not advance/],
      ['new', b, [verdict(3, true)], /root comes with the last verdict/],
      ['new', b, [verdict(2), delta(0, 1, 2)], /not below the verdict's 2/],
      ['new', b, [verdict(2), delta(0, 1), verdict(2)], /does not advance/],
      ['new', b, [verdict(n + 1)], /goes beyond the Match Tokens' /],
      // before the list ends: 'kept' is matched as it arrives, its one run still open (nothing
      // final yet); 'new' waits for the whole list (its basis is picked from it)
      ['kept', a, [verdict(5)], /goes beyond the Match Tokens' 0/, false],
      ['kept', a, [verdict(na, true)], /root comes with the last verdict/, false],
      ['new', b, [verdict(2)], /goes beyond the Match Tokens' 0/, false],
      ['kept', a, [encode({ type: Msg.SplitRequest, tokens: Uint32Array.of(0) })], /SplitRequest comes after TokensEnd/, false],
      ['new', b, [encode({ type: Msg.Verdict, upTo: 2, root: null, failed: [{ token: 0, bitmap: null }] }, 32)], /verdict for token 0 out of order or range/],
    ];
    // refined chunks (docs/protocol.md §3): copies of basis bytes that do not exist, or that
    // exist but are not the target's (the root check refuses those)
    const len0 = lists.get(a)!.lengths[0];
    const resendAll = (root: Uint8Array) => encode({ type: Msg.Verdict, upTo: na, root, failed: [{ token: 0, bitmap: null }] }, 32);
    const copyAt = (offset: number, length = len0) => encode({ type: Msg.Delta, indices: Uint32Array.of(0), chunks: [[{ offset, length }]] });
    cases.push(
      ['new', b, [verdict(2), encode({ type: Msg.Delta, indices: Uint32Array.of(0), chunks: [[{ offset: 0, length: lists.get(b)!.lengths[0] }]] })], /copies basis bytes, and there is no basis/],
      ['kept', a, [resendAll(lists.get(a)!.root), copyAt(a.length - len0 + 1)], /beyond its 200000 bytes/],
    );
    for (const [name, bytes, frames, why, end] of cases) {
      const r = await raw(s.wsUrl, [...phase1(name, bytes, end), ...frames]);
      assert.equal(r.error, ErrorCode.Inconsistent, `${why}: ${JSON.stringify(r)}`);
      assert.match(r.message!, why);
    }
    // chunk 0 rebuilt from basis bytes one byte further on: well-formed, and refused by the root
    const la = lists.get(a)!.lengths;
    const copies = Array.from(la, (length, i) => [{ offset: la.subarray(0, i).reduce((x, y) => x + y, 0) + (i === 0 ? 1 : 0), length }]);
    const wrong = await raw(s.wsUrl, [...phase1('kept', a), resendAll(lists.get(a)!.root), encode({ type: Msg.Delta, indices: Uint32Array.from(la.keys()), chunks: copies })]);
    assert.equal(wrong.error, ErrorCode.VerifyFailed, JSON.stringify(wrong));
    assert.deepEqual(await s.stored('kept'), Buffer.from(a));
    const store = await s.storeOf('local');
    assert.equal(await store.latest('kept'), 1);
    assert.equal(await store.latest('new'), 0);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind but versions and resumable uploads');
  } finally {
    await s.stop();
  }
});

test('a client that disconnects mid-phase frees its session at once', async () => {
  const s = await testServer();
  try {
    await pushBytes(s, 'f', fastRandomBytes(3, 1_000_000));
    const ws = new WebSocket(s.wsUrl);
    await new Promise((r) => ws.on('open', r));
    ws.send(hello('f', { size: 1_000_000 }));
    ws.send(encode({ type: Msg.Checksums, fastfps: Uint32Array.of(1, 2), lengths: Uint32Array.of(4096, 4096) }));
    await new Promise((r) => setTimeout(r, 50));
    const m = (await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number };
    assert.equal(m.connections, 1);
    ws.terminate();
    // at once: long before the idle timeout (120 s) could end it
    await until('the session freed', async () => ((await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number }).connections === 0, 30_000);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind but versions and resumable uploads');
  } finally {
    await s.stop();
  }
});

test('a push cancelled while it waits on a stalled link fails at once with the cancel, and nothing is stored', async () => {
  const s = await testServer();
  const pipe = await holdingPipe(() => s.port);
  let release: ((cut: boolean) => void) | undefined;
  try {
    // the connection is held once it has sent 4 MiB of the 64 MiB: the sender then waits for
    // room in a socket that no longer drains
    const held = pipe.holdAt(4 << 20);
    const stop = new AbortController();
    const pushed = pushBytes(pipe, 'big.bin', fastRandomBytes(3, 64 << 20), { signal: stop.signal });
    release = await held;
    const reason = new Error('cancelled by the user');
    stop.abort(reason);
    // (a deadline is the behaviour here: without the signal the push waits as long as the link)
    const ended = await Promise.race([pushed.then(() => 'stored', (e: unknown) => e), new Promise((r) => setTimeout(r, 60_000, 'still waiting').unref())]);
    assert.equal(ended, reason);
    release(true);
    const store = await s.storeOf('local');
    assert.equal(await store.latest('big.bin'), 0, 'nothing stored');
  } finally {
    release?.(true);
    pipe.close();
    await s.stop();
  }
});

test('a push cancelled once its last message went out is not stopped: it ends stored, as the server answers', async () => {
  const s = await testServer();
  try {
    const stop = new AbortController();
    const bytes = fastRandomBytes(4, 4 << 20);
    const report = await pushBytes(s, 'late.bin', bytes, { signal: stop.signal, onProgress: (p) => void (p === 'delta-sent' && stop.abort(new Error('too late'))) });
    assert.ok(stop.signal.aborted);
    assert.equal(report.version, 1);
    assert.ok((await s.stored('late.bin', 1)).equals(Buffer.from(bytes)));
  } finally {
    await s.stop();
  }
});

test('a connection cut mid-upload: the client retries and the server resumes without the bytes it already wrote', async () => {
  const logs: Record<string, unknown>[] = [];
  // (a retry waits for the cut session's end before its Hello: no Hello deadline meanwhile)
  const s = await testServer({ 'hello-timeout-ms': '600000' }, (e) => logs.push(e));
  // A TCP proxy that cuts the first connection after 3 MB from the client, then passes through.
  // With `hold` set, it forwards the WebSocket upgrade and then holds the client's bytes until
  // `hold` resolves. The retry after a cut is held until the server has ended the cut session
  // (its suspend listed): on a loaded machine the retry can otherwise come first.
  let cutOnce = false;
  let cutAt = -1;
  let hold: Promise<void> | null = null;
  const cut = (n: number, seen: number) => !cutOnce && seen > 3_000_000 && ((cutAt = n), (cutOnce = true));
  const ended = (n: number) => until('the cut session logged', () => logs.filter((e) => e.op === 'push' && e.aborted).length > n);
  let cuts = 0;
  const proxy = await socketPipe({ to: () => s.port, cut, hold: (n) => hold ?? (cutAt >= 0 && n === cutAt + 1 ? ended(cuts++) : null) });
  try {
    const data = fastRandomBytes(11, 8_000_000);
    const phases: string[] = [];
    // 1 MiB slices: the list goes out in parts, with Verdicts and Delta Bytes between them
    const rep = await pushBytes(proxy, 'resumed.bin', data, { retries: 3, sliceBytes: 1 << 20, onProgress: (p) => phases.push(p) });
    assert.ok(cutOnce && phases.includes('retrying'));
    assert.deepEqual(await s.stored('resumed.bin'), Buffer.from(data));
    // the second session started from the chunks the first one had written
    const done = logs.find((e) => e.op === 'push' && e.version === 1)!;
    assert.ok((done.resumedChunks as number) > 50, JSON.stringify(logs));
    assert.equal(rep.version, 1);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind but versions and resumable uploads');

    // An edit of the stored file: the server matches its Checksum List as it arrives. The proxy
    // holds the client's bytes until the whole list is out, so that the list arrives before the
    // cut; the server suspends the upload under the list's digest, and the retry (whose list
    // the server now matches only once it is whole) resumes it.
    const edited = data.slice();
    edited.set(fastRandomBytes(12, 6_000_000), 1_000_000);
    let listOut!: () => void;
    hold = new Promise<void>((r) => (listOut = r));
    cutOnce = false;
    const phases2: string[] = [];
    const onProgress = (p: string) => {
      phases2.push(p);
      if (p === 'checksums-sent') {
        hold = null;
        listOut();
      }
    };
    const rep2 = await pushBytes(proxy, 'resumed.bin', edited, { retries: 3, onProgress });
    assert.ok(cutOnce && phases2.includes('retrying'));
    assert.deepEqual(await s.stored('resumed.bin'), Buffer.from(edited));
    assert.equal(rep2.version, 2);
    const done2 = logs.find((e) => e.op === 'push' && e.version === 2)!;
    assert.ok((done2.resumedChunks as number) > 50, JSON.stringify(logs));
    assert.ok(rep2.literalBytes < 6_100_000, `literal ${rep2.literalBytes}`);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind but versions and resumable uploads');
  } finally {
    proxy.close();
    await s.stop();
  }
});

test('several sessions on one connection: pushes and a pull share a socket; an error or idle time ends it, the stored versions stay', async () => {
  const s = await testServer();
  // idle time ends a connection on a server of its own: a short idle timeout would also end a
  // session that a loaded machine leaves without a message for that long
  const quick = await testServer({ 'idle-timeout-ms': '2000' });
  try {
    const r = new Rng(11);
    const v1 = fastRandomBytes(3, 600_000);
    const v2 = applyEdits(v1, r, { kind: 'insert', total: 2000 });
    const connection = await Conn.open(s.wsUrl, WebSocket as any);
    const sockets = async () => ((await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number }).connections;
    const a = await pushBytes(s, 'keep/a.bin', v1, { connection });
    const b = await pushBytes(s, 'keep/a.bin', v2, { connection });
    const c = await pushBytes(s, 'keep/b.bin', v1, { connection });
    assert.deepEqual([a.version, b.version, c.version], [1, 2, 1]);
    assert.ok(b.literalBytes < v2.length / 3, `the second push is a delta (${b.literalBytes} literal bytes)`);
    // per-session traffic: the delta push reports its own bytes, not the connection's
    assert.ok(b.traffic.total < a.traffic.total / 2 && b.traffic.wire < a.traffic.wire / 2);
    const { bytes } = await pullBytes(s, 'keep/a.bin', v1, { connection, version: 2 });
    assert.deepEqual(bytes, Buffer.from(v2));
    assert.ok(connection.usable, 'still open after four sessions');
    assert.equal(await sockets(), 1);
    // a bad message in the next session gets its error and closes this connection only
    await assert.rejects(pushBytes(s, '../bad', v1, { connection }), (e: Error) => e instanceof RemoteError && e.code === ErrorCode.BadName);
    assert.equal(connection.usable, false);
    assert.deepEqual(await s.stored('keep/a.bin', 2), Buffer.from(v2));
    // a push handed the closed connection opens its own
    assert.equal((await pushBytes(s, 'keep/b.bin', v2, { connection })).version, 2);
    // idle between sessions: the server closes quietly (1000, no Error message)
    const idle = await Conn.open(quick.wsUrl, WebSocket as any);
    await pushBytes(quick, 'keep/c.bin', v1.subarray(0, 1000), { connection: idle });
    const closed = await new Promise<{ code: number; errors: number }>((resolve) => {
      let errors = 0;
      (idle.ws as unknown as WebSocket).on('message', (d: Buffer) => void (d[0] === Msg.Error && errors++));
      (idle.ws as unknown as WebSocket).on('close', (code: number) => resolve({ code, errors }));
    });
    assert.deepEqual(closed, { code: 1000, errors: 0 });
    assert.equal(idle.usable, false);
  } finally {
    await s.stop();
    await quick.stop();
  }
});

test('a connection pool: sessions one after another share a socket, transfers at once never do, a closed one is dropped, at most keepIdle stay', async () => {
  const s = await testServer();
  const pool = new ConnectionPool(WebSocket as any, 1);
  try {
    const sockets = async () => ((await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number }).connections;
    // random bytes do not compress: their sessions run on the no-compression endpoint
    const v1 = fastRandomBytes(4, 200_000);
    const raw = sessionUrl(s.wsUrl, false);
    await pushBytes(s, 'pool/a.bin', v1, { connection: pool });
    await pushBytes(s, 'pool/b.bin', v1, { connection: pool });
    await pullBytes(s, 'pool/a.bin', v1, { connection: pool });
    assert.equal(await sockets(), 1, 'three sessions, one socket');
    // two at once take two sockets; given back, one is kept (keepIdle 1) and the other closed
    const [a, b] = await Promise.all([pool.take(raw), pool.take(raw)]);
    assert.notEqual(a, b);
    pool.give(a);
    pool.give(b);
    assert.equal(b.usable, false, 'the second one given back closes');
    assert.equal(await pool.take(raw), a, 'the idle one is taken again');
    // a session that fails closes its connection: the pool drops it and opens a new one
    await assert.rejects(a.session(async (conn) => conn.send({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1, basisVersion: 0, name: '../bad' }).then(() => conn.recv())), (e: Error) => e instanceof RemoteError && e.code === ErrorCode.BadName);
    pool.give(a);
    assert.equal((await pushBytes(s, 'pool/c.bin', v1, { connection: pool })).version, 1);
    assert.equal(a.usable, false);
    // another URL (the endpoint that compresses) is a socket of its own
    const deflating = await pool.take(s.wsUrl);
    assert.equal(deflating.url, s.wsUrl);
    // (the server counts a closed socket until it has seen its close)
    await until('the server counts two sockets', async () => (await sockets()) === 2);
    pool.give(deflating);
    pool.close();
    assert.equal(deflating.usable, false);
    assert.deepEqual(await s.stored('pool/c.bin'), Buffer.from(v1));
  } finally {
    pool.close();
    await s.stop();
  }
});

test("a connection pool and routing hints: a session takes an idle socket opened with its file's hint first, else one opened for another file", async () => {
  const s = await testServer();
  const pool = new ConnectionPool(WebSocket as any, 2);
  try {
    const url = (name: string) => sessionUrl(s.wsUrl, true, name);
    const [a, b] = await Promise.all([pool.take(url('a')), pool.take(url('b'))]);
    assert.equal(a.url, url('a'));
    pool.give(a);
    pool.give(b);
    assert.equal(await pool.take(url('b')), b);
    assert.equal(await pool.take(url('a')), a);
    pool.give(b);
    assert.equal(await pool.take(url('c')), b, 'another file: the idle socket of the same endpoint');
    const raw = await pool.take(sessionUrl(s.wsUrl, false, 'a'));
    assert.ok(raw !== a && raw !== b, 'the other endpoint: a socket of its own');
    // the sessions of several files run one after another on one socket
    pool.give(a);
    for (const name of ['x/1.txt', 'x/2.txt', 'x/3.txt']) await pushBytes(s, name, new TextEncoder().encode(name), { connection: pool });
    assert.equal(await pool.take(url('d')), a);
  } finally {
    pool.close();
    await s.stop();
  }
});

test('hostile pushes against a known basis: refused with a clear code, nothing stored', async () => {
  const s = await testServer();
  try {
    const a = fastRandomBytes(8, 300_000);
    await pushBytes(s, 'k', a);
    const ia = await chunkSource(bufferSource(a), DEFAULT_PARAMS, 3);
    // the target: `a` with its first 1 KiB replaced; FastCDC looks for no cut below `min`, so the
    // chunks stay, and chunks 1.. equal a's
    const b = a.slice();
    b.fill(7, 0, 1024);
    const ib = await chunkSource(bufferSource(b), DEFAULT_PARAMS, 3);
    const n = ib.lengths.length;
    assert.equal(n, ia.lengths.length);
    const known = { version: 1, root: ia.root };
    const list = [encode({ type: Msg.Checksums, fastfps: ib.fastfps, lengths: ib.lengths }), encode({ type: Msg.ChecksumsEnd, count: n, size: b.length })];
    // chunk 0 alone: the chunks a Copies run covers are not listed (the server takes them from
    // the basis index)
    const list0 = encode({ type: Msg.Checksums, fastfps: ib.fastfps.subarray(0, 1), lengths: ib.lengths.subarray(0, 1) });
    // Copies whose runs [listed, count, basisFirst] list b's chunks from `at` on before each run
    const copies = (at: number, ...runs: [number, number, number][]) => {
      const listed = runs.reduce((a, x) => a + x[0], 0);
      return encode({ type: Msg.Copies, listed: Uint32Array.from(runs, (x) => x[0]), fastfps: ib.fastfps.slice(at, at + listed), lengths: ib.lengths.slice(at, at + listed), count: Uint32Array.from(runs, (x) => x[1]), basisFirst: Uint32Array.from(runs, (x) => x[2]) });
    };
    const verdict = (root: Uint8Array) => encode({ type: Msg.Verdict, upTo: n, root, failed: [] }, 32);
    const first = encode({ type: Msg.Delta, indices: Uint32Array.of(0), chunks: [b.subarray(0, ib.lengths[0])] });
    const push = (extra: object, ...frames: Uint8Array[]) => raw(s.wsUrl, [hello('k', { size: b.length, ...extra }), ...frames]);
    const cases: [number, RegExp, object, Uint8Array[]][] = [
      [ErrorCode.UnexpectedMessage, /Copies/, {}, [list0, copies(1, [0, n - 1, 1])]],
      // after the list's end: the last Verdict ends it (no ChecksumsEnd against a known basis)
      [ErrorCode.UnexpectedMessage, /unexpected Copies/, { known }, [list[0], verdict(ib.root), copies(n, [0, 1, 1])]],
      [ErrorCode.UnexpectedMessage, /unexpected ChecksumsEnd/, { known }, [...list]],
      // listed by Copies and again by Checksums: the list goes on past the file's last, short chunk
      [ErrorCode.Inconsistent, /below min/, { known }, [list0, copies(1, [0, n - 1, 1]), encode({ type: Msg.Checksums, fastfps: ib.fastfps.subarray(1), lengths: ib.lengths.subarray(1) }), list[1]]],
      // a client of the protocol version before (its Copies say where each run starts)
      [ErrorCode.Version, /version/, { version: PROTOCOL_VERSION - 1 }, [...list]],
      // a Verdict that ends inside a run
      [ErrorCode.Inconsistent, /ends inside token 0/, { known }, [list0, copies(1, [0, n - 1, 1]), encode({ type: Msg.Verdict, upTo: 3, root: null, failed: [] }, 32)]],
      [ErrorCode.Inconsistent, /is empty/, { known }, [list0, copies(1, [0, 0, 1])]],
      [ErrorCode.Inconsistent, /ends beyond the basis/, { known }, [list0, copies(1, [0, n, 1])]],
      [ErrorCode.Inconsistent, /ends beyond the basis/, { known }, [copies(0, [1, 1, n])]],
      [ErrorCode.UnknownBasis, /not the one the client knows/, { known: { version: 1, root: ib.root } }, []],
      [ErrorCode.UnknownBasis, /has no version 2/, { known: { version: 2, root: ia.root } }, []],
      [ErrorCode.Malformed, /with a push only/, { known, op: Op.Pull }, []],
      // Hello's resume flag: a push with the three phases only
      [ErrorCode.Malformed, /three phases only/, { known, resume: true }, []],
      [ErrorCode.Malformed, /three phases only/, { op: Op.Pull, resume: true }, []],
      // Hello's modification time: a push only
      [ErrorCode.Malformed, /modification time comes with a push only/, { op: Op.Pull, modified: 5 }, []],
      // chunk 0 claimed from the basis (the basis' length and FastFp, not the file's bytes): the
      // root check refuses it
      [ErrorCode.VerifyFailed, /does not match/, { known }, [copies(0, [0, n, 0]), verdict(ib.root)]],
      [ErrorCode.VerifyFailed, /does not match/, { known }, [list0, copies(1, [0, n - 1, 1]), verdict(ia.root), first]],
    ];
    for (const [code, why, extra, frames] of cases) {
      const r = await push(extra, ...frames);
      assert.equal(r.error, code, `${why}: ${JSON.stringify(r)}`);
      assert.match(r.message!, why);
    }
    // an algo this version gives no meaning (byte 3: the flags, algo in bits 4–7, docs/protocol.md §4)
    for (const algo of [0, 4, 15]) {
      const f = hello('k', { size: b.length, resume: true });
      f[3] = (algo << 4) | (f[3] & 0x0f);
      const r = await raw(s.wsUrl, [f, ...list]);
      assert.equal(r.error, ErrorCode.BadParams, JSON.stringify(r));
      assert.match(r.message!, /unknown strong hash algorithm/);
    }
    // the well-formed push of the same frames is stored
    const ws = await Conn.open(s.wsUrl, WebSocket as any);
    const done = await ws.session(async (conn) => {
      // (no Ready against a known version: the Result is the first answer)
      for (const f of [hello('k', { size: b.length, known }), list0, copies(1, [0, n - 1, 1]), verdict(ib.root), first]) conn.ws.send(f);
      return conn.expect(Msg.Result);
    });
    ws.close();
    assert.equal(done.version, 2);
    assert.deepEqual(await s.stored('k'), Buffer.from(b));
    // and with the chunk no run covers listed in the Copies, and two runs, against version 1 again
    const ws2 = await Conn.open(s.wsUrl, WebSocket as any);
    const done2 = await ws2.session(async (conn) => {
      for (const f of [hello('k', { size: b.length, known }), copies(0, [1, 1, 1], [0, n - 2, 2]), verdict(ib.root), first]) conn.ws.send(f);
      return conn.expect(Msg.Result);
    });
    ws2.close();
    assert.equal(done2.version, 2, 'the same content as version 2: no new version');
    assert.deepEqual(await s.stored('k'), Buffer.from(b));
    const store = await s.storeOf('local');
    assert.equal(await store.latest('k'), 2);
    assert.deepEqual(await unreferenced(s.repo), [], 'nothing left behind but versions and resumable uploads');
  } finally {
    await s.stop();
  }
});
