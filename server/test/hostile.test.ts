// What an attacker on the network can do to a server, round two: text frames, Host names,
// silent sockets, metrics, logout, cookies behind a TLS proxy (logins: logins.test.ts).
// A real server on a loopback port each time.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { encode } from '../../shared/src/wire/codec.ts';
import { DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/wire/protocol.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { addUser } from '../src/http/auth.ts';
import { RECHECK_MS } from '../src/http/logins.ts';
import { errorAndClose, request, silentSockets } from '../../harness/attacks.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { until } from '../../harness/wait.ts';

/** A users file with alice and bob (passwords "alice-pw", "bob-pw"); returns it and their tokens. */
function users() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dsync-users-'));
  const file = path.join(dir, 'users.json');
  return { file, alice: addUser(file, 'alice', 'alice-pw'), bob: addUser(file, 'bob', 'bob-pw'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

test('a text frame gets the Malformed Error (docs/protocol.md §1), first thing or mid-session', async () => {
  const s = await testServer();
  try {
    const hello = encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'f' });
    const list = encode({ type: Msg.Checksums, fastfps: Uint32Array.of(1, 2), lengths: Uint32Array.of(4096, 4096) });
    for (const before of [[], [hello, list]]) {
      const ws = new WebSocket(s.wsUrl);
      const got = errorAndClose(ws);
      ws.on('open', () => [...before, 'hello'].forEach((f) => ws.send(f)));
      const r = await got;
      assert.equal(r.error, ErrorCode.Malformed, JSON.stringify(r));
      assert.match(r.message!, /text frame/);
      assert.equal(r.close, 1000);
    }
  } finally {
    await s.stop();
  }
});

test('Host names: a foreign Host is refused on REST and on the upgrade (DNS rebinding); the server\'s own names and --allowed-hosts pass', async () => {
  const s = await testServer({ 'allowed-hosts': '.example.org, files.test' });
  try {
    const port = new URL(s.url).port;
    await pushBytes(s, 'private.txt', fastRandomBytes(1, 10_000));
    const as = (host: string) => ({ headers: { Host: `${host}:${port}`, Origin: `http://${host}:${port}` } });
    for (const host of ['rebind.attacker.example', 'notexample.org', 'files.test.attacker.example']) {
      for (const p of ['/api/files', '/api/download?name=private.txt', '/']) {
        const r = await request(s.url + p, as(host));
        assert.equal(r.status, 403, `${host}${p}`);
        assert.match(r.text, /does not answer to the name.*--allowed-hosts/);
      }
      // the health check tells nothing, and load balancers send it with any Host or none
      assert.equal((await request(s.url + '/api/health', as(host))).status, 200);
      const up = await new Promise<number>((resolve) => {
        const ws = new WebSocket(s.wsUrl, as(host));
        ws.on('unexpected-response', (_q, res) => resolve(res.statusCode!));
        ws.on('open', () => resolve(101));
        ws.on('error', () => {});
      });
      assert.equal(up, 403, `upgrade with Host ${host}`);
    }
    assert.equal((await request(s.url + '/api/files', { headers: { Host: 'evil.example\r\nX: y' } }).catch(() => ({ status: 400 }))).status >= 400, true);
    for (const host of ['localhost', '127.0.0.1', '[::1]', 'app.localhost', os.hostname(), '192.168.1.20', 'example.org', 'a.b.example.org', 'files.test']) {
      const r = await request(s.url + '/api/files', as(host));
      assert.equal(r.status, 200, `${host}: ${r.text}`);
    }
    assert.equal((await request(s.url + '/api/files', { headers: { Host: 'FILES.Test.' } })).status, 200);
  } finally {
    await s.stop();
  }
});

test('silent sockets: 300 from one address take only its share, a real push from another completes, and each is closed at the Hello deadline', async () => {
  // the share on a server whose Hello deadline no loaded machine reaches while the test runs
  const s = await testServer({ 'hello-timeout-ms': '600000' });
  try {
    const { open, refused } = await silentSockets(s.wsUrl, 300, '127.0.0.2');
    assert.equal(open.length, 32, 'the default --max-sessions-per-address');
    assert.ok(refused.length === 268 && refused.every((x) => x === 503), `refused ${refused.length}`);
    const data = fastRandomBytes(4, 2_000_000);
    assert.equal((await pushBytes(s, 'real.bin', data)).version, 1);
    assert.ok(open.every((ws) => ws.readyState === WebSocket.OPEN), 'the push ran while they were open');
    open.forEach((ws) => ws.terminate());
  } finally {
    await s.stop();
  }
  // the deadline on a server of its own: each is closed no sooner than it, with the Error
  const quick = await testServer({ 'hello-timeout-ms': '1500' });
  try {
    const ends = await Promise.all(
      [0, 1, 2].map(() => {
        const t0 = performance.now();
        return errorAndClose(new WebSocket(quick.wsUrl, { localAddress: '127.0.0.2' })).then((e) => ({ ...e, ms: performance.now() - t0 }));
      }),
    );
    for (const e of ends) {
      assert.equal(e.error, ErrorCode.LimitExceeded, JSON.stringify(e));
      assert.match(e.message!, /no message for 1500 ms/);
      // (less a millisecond that timers round away)
      assert.ok(e.ms >= 1499, `closed ${e.ms.toFixed(0)} ms after it was opened`);
    }
  } finally {
    await quick.stop();
  }
});

test('metrics: a user sees their own sockets, never another user\'s name', async () => {
  const u = users();
  const s = await testServer({ users: u.file });
  try {
    const bobWs = new WebSocket(s.wsUrl, { headers: { Authorization: `Bearer ${u.bob}` } });
    await new Promise((r) => bobWs.on('open', r));
    const mine = (token: string) => request(`${s.url}/api/metrics`, { headers: { Authorization: `Bearer ${token}` } });
    const alice = await mine(u.alice);
    assert.equal(alice.status, 200);
    assert.ok(!/bob/.test(alice.text), alice.text);
    assert.equal(JSON.parse(alice.text).connections, 0);
    assert.equal(JSON.parse((await mine(u.bob)).text).connections, 1);
    bobWs.terminate();
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('logout ends every open socket of that login at once, a session under way included; other logins keep theirs', async () => {
  const u = users();
  const s = await testServer({ users: u.file });
  try {
    const login = await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } });
    const cookie = String(login.headers['set-cookie']).split(';')[0];
    const other = String((await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } })).headers['set-cookie']).split(';')[0];
    const opened = (headers: Record<string, string>) =>
      new Promise<WebSocket>((resolve) => {
        const ws = new WebSocket(s.wsUrl, { headers });
        ws.on('open', () => resolve(ws));
      });
    const idle = await opened({ cookie });
    const busy = await opened({ cookie });
    const kept = [await opened({ cookie: other }), await opened({ Authorization: `Bearer ${u.alice}` })];
    // a push under way: Hello and part of its Checksum List
    busy.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'f' }));
    busy.send(encode({ type: Msg.Checksums, fastfps: Uint32Array.of(1, 2), lengths: Uint32Array.of(4096, 4096) }));
    await new Promise((r) => setTimeout(r, 100));
    const ends = [errorAndClose(idle), errorAndClose(busy)];
    const t0 = performance.now();
    assert.equal((await request(`${s.url}/api/logout`, { method: 'POST', headers: { cookie } })).status, 200);
    for (const e of await Promise.all(ends)) {
      assert.equal(e.error, ErrorCode.Unauthorized, JSON.stringify(e));
      assert.match(e.message!, /signed out/);
    }
    // at once: sooner than the re-check that ends them on every process (RECHECK_MS)
    assert.ok(performance.now() - t0 < RECHECK_MS, `ended ${(performance.now() - t0).toFixed(0)} ms after the logout`);
    assert.ok(kept.every((ws) => ws.readyState === WebSocket.OPEN));
    kept.forEach((ws) => ws.terminate());
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('--trust-proxy: a login through a trusted TLS proxy gets a Secure cookie; without the proxy setting, or over plain http, not', async () => {
  const u = users();
  const body = { name: 'alice', password: 'alice-pw' };
  const https = { 'X-Forwarded-Proto': 'https', 'X-Forwarded-For': '203.0.113.9' };
  const s = await testServer({ users: u.file, 'trust-proxy': 'loopback' });
  try {
    const secure = await request(`${s.url}/api/login`, { body, headers: https });
    assert.equal(secure.status, 200);
    assert.match(String(secure.headers['set-cookie']), /; Secure/);
    const cookie = String(secure.headers['set-cookie']).split(';')[0];
    assert.match(String((await request(`${s.url}/api/logout`, { method: 'POST', headers: { ...https, cookie } })).headers['set-cookie']), /; Secure/);
    assert.doesNotMatch(String((await request(`${s.url}/api/login`, { body })).headers['set-cookie']), /Secure/);
  } finally {
    await s.stop();
  }
  const plain = await testServer({ users: u.file });
  try {
    assert.doesNotMatch(String((await request(`${plain.url}/api/login`, { body, headers: https })).headers['set-cookie']), /Secure/);
  } finally {
    await plain.stop();
    u.cleanup();
  }
});

// ---- issue 32: what one user, or one page on the same host, can do to another ----

/** Opens GET /api/events; `ended` resolves when the server ends the stream. */
function eventStream(url: string, headers: Record<string, string>) {
  return new Promise<{ status: number; ended: Promise<number>; close(): void }>((resolve, reject) => {
    const req = http.get(`${url}/api/events`, { headers }, (res) => {
      const t0 = performance.now();
      const ended = new Promise<number>((r) => {
        res.on('end', () => r(performance.now() - t0));
        res.on('close', () => r(performance.now() - t0));
      });
      res.resume();
      resolve({ status: res.statusCode!, ended, close: () => req.destroy() });
    });
    req.on('error', reject);
  });
}

/** The status and Set-Cookie lines of a WebSocket upgrade's answer. */
function upgradeAnswer(wsUrl: string, headers: Record<string, string>) {
  return new Promise<{ status: number; cookies: string[] }>((resolve) => {
    const ws = new WebSocket(wsUrl, { headers });
    ws.on('unexpected-response', (_q, res) => resolve({ status: res.statusCode!, cookies: res.headers['set-cookie'] ?? [] }));
    ws.on('open', () => (resolve({ status: 101, cookies: [] }), ws.terminate()));
    ws.on('error', () => {});
  });
}

/** `p`, or a failure after `ms` (what should end at once must not hang the test). */
const within = <T,>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))]);

const sessionOf = (r: { headers: http.IncomingHttpHeaders }) => (r.headers['set-cookie'] ?? [])[0].split(';')[0];

test('cookie tossing: a request carrying the session cookie twice is refused and the planted copies removed, at the paths and domains a tosser can use; a logout then ends nobody\'s login', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'allowed-hosts': '.example.org' });
  try {
    const alice = sessionOf(await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } }));
    const bob = sessionOf(await request(`${s.url}/api/login`, { body: { name: 'bob', password: 'bob-pw' } }));
    assert.match(alice, /^dsync_session=[A-Za-z0-9_-]{32}$/);
    // bob's page on another port ran document.cookie = "dsync_session=<bob's>; path=/api" (and
    // /sync): alice's browser sends the longer path first
    const both = { cookie: `${bob}; ${alice}` };
    for (const p of ['/api/whoami', '/api/files?prefix=', '/api/logout']) {
      const r = await request(`${s.url}${p}`, { method: p === '/api/logout' ? 'POST' : 'GET', headers: both });
      assert.equal(r.status, 401, `${p}: ${r.text}`);
      assert.match(JSON.parse(r.text).error, /two session cookies.*sign in again/);
      const set = r.headers['set-cookie']!;
      assert.match(set[0], /^dsync_session=; HttpOnly; SameSite=Strict; Path=\/; Max-Age=0$/);
      for (const path of ['/api', '/api/', '/sync', '/sync/']) assert.ok(set.includes(`dsync_session=; Path=${path}; Max-Age=0`), `${p} clears at ${path}: ${set.join(' | ')}`);
      if (p.startsWith('/api/files')) assert.ok(set.includes('dsync_session=; Path=/api/files; Max-Age=0'));
    }
    // the logout ended neither login: each alone still works, as its own user
    const who = async (cookie: string) => JSON.parse((await request(`${s.url}/api/whoami`, { headers: { cookie } })).text).user;
    assert.equal(await who(alice), 'alice');
    assert.equal(await who(bob), 'bob');
    // the sync socket: refused too, with the removals
    const up = await upgradeAnswer(s.wsUrl, both);
    assert.equal(up.status, 401);
    assert.ok(up.cookies.includes('dsync_session=; Path=/sync; Max-Age=0'), up.cookies.join(' | '));
    assert.equal((await upgradeAnswer(s.wsUrl, { cookie: alice })).status, 101);
    // a sibling host under the same domain may set it for the domain: removed there too
    const sib = await request(`${s.url}/api/whoami`, { headers: { ...both, Host: `app.dsync.example.org:${s.port}` } });
    assert.equal(sib.status, 401);
    for (const d of ['dsync.example.org', 'example.org']) assert.ok(sib.headers['set-cookie']!.includes(`dsync_session=; Path=/api; Domain=${d}; Max-Age=0`), d);
    // signing in again sets the cookie at / and removes planted copies at /api and /sync
    const again = await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' }, headers: both });
    assert.equal(again.status, 200);
    const set = again.headers['set-cookie']!;
    assert.match(set[0], /^dsync_session=[A-Za-z0-9_-]{32}; HttpOnly; SameSite=Strict; Path=\/$/);
    for (const path of ['/api', '/sync']) assert.ok(set.includes(`dsync_session=; Path=${path}; Max-Age=0`));
    assert.ok(!set.some((c) => /^dsync_session=;.* Path=\/;/.test(c) && !/Domain/.test(c)), 'the new cookie at / stays');
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('over https (a trusted proxy) the session cookie is __Host- (Secure, Path=/, no Domain), and a plain-named one is not a login there', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'trust-proxy': 'loopback' });
  const https = { 'X-Forwarded-Proto': 'https' };
  try {
    const login = await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' }, headers: https });
    const set = login.headers['set-cookie']!;
    assert.match(set[0], /^__Host-dsync_session=[A-Za-z0-9_-]{32}; HttpOnly; SameSite=Strict; Path=\/; Secure$/);
    assert.match(set[1], /^__Host-dsync_device=[A-Za-z0-9_-]{32}; HttpOnly; SameSite=Strict; Path=\/; Secure; Max-Age=\d+$/);
    const sid = set[0].split(';')[0].split('=')[1];
    assert.equal((await request(`${s.url}/api/whoami`, { headers: { ...https, cookie: `__Host-dsync_session=${sid}` } })).status, 200);
    assert.equal((await request(`${s.url}/api/whoami`, { headers: { ...https, cookie: `dsync_session=${sid}` } })).status, 401, 'the name a plain-http page can set is no login over https');
    assert.equal((await request(`${s.url}/api/whoami`, { headers: { ...https, cookie: `__Host-dsync_session=${sid}; __Host-dsync_session=${sid}` } })).status, 401);
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('every response forbids framing, sniffing and other sites\' loads, and sends no referrer; HSTS only over https through a trusted proxy', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'trust-proxy': 'loopback' });
  try {
    const auth = { Authorization: `Bearer ${u.alice}` };
    const pushed = await pushBytes(s, 'leak.js', Buffer.from('window.secret = 1;'), { WebSocket: class extends WebSocket { constructor(url: string) { super(url, { headers: auth }); } } as any });
    assert.equal(pushed.version, 1);
    for (const [p, headers] of [['/api/health', {}], ['/api/download?name=leak.js', auth], ['/api/files', {}], ['/api/nothing', auth], ['/', {}], ['/nothing.js', {}]] as const) {
      const r = await request(`${s.url}${p}`, { headers });
      assert.equal(r.headers['x-frame-options'], 'DENY', p);
      assert.match(String(r.headers['content-security-policy']), /frame-ancestors 'none'/, p);
      assert.match(String(r.headers['content-security-policy']), /script-src 'self' 'wasm-unsafe-eval'(;|$)/, p);
      assert.equal(r.headers['x-content-type-options'], 'nosniff', p);
      assert.equal(r.headers['cross-origin-resource-policy'], 'same-origin', p);
      assert.equal(r.headers['referrer-policy'], 'no-referrer', p);
      assert.equal(r.headers['strict-transport-security'], undefined, `${p}: no HSTS over plain http`);
    }
    const dl = await request(`${s.url}/api/download?name=leak.js`, { headers: auth });
    assert.equal(dl.headers['content-type'], 'application/octet-stream');
    assert.match(String(dl.headers['content-disposition']), /^attachment/);
    assert.equal((await request(`${s.url}/api/health`, { headers: { 'X-Forwarded-Proto': 'https' } })).headers['strict-transport-security'], 'max-age=31536000');
  } finally {
    await s.stop();
  }
  const plain = await testServer({ users: u.file });
  try {
    assert.equal((await request(`${plain.url}/api/health`, { headers: { 'X-Forwarded-Proto': 'https' } })).headers['strict-transport-security'], undefined, 'no trusted proxy: no HSTS');
  } finally {
    await plain.stop();
    u.cleanup();
  }
});

test('logout ends the login\'s event streams at once; other logins keep theirs', async () => {
  const u = users();
  const s = await testServer({ users: u.file });
  try {
    const cookie = sessionOf(await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } }));
    const other = sessionOf(await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } }));
    const mine = await eventStream(s.url, { cookie });
    const kept = await eventStream(s.url, { cookie: other });
    assert.equal(mine.status, 200);
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    assert.equal((await request(`${s.url}/api/logout`, { method: 'POST', headers: { cookie } })).status, 200);
    await within(mine.ended, 60_000, 'the stream ends');
    // at once: sooner than the re-check that ends it on every process (RECHECK_MS)
    assert.ok(performance.now() - t0 < RECHECK_MS, `the stream ended ${(performance.now() - t0).toFixed(0)} ms after the logout`);
    const still = await Promise.race([kept.ended.then(() => 'ended'), new Promise((r) => setTimeout(() => r('open'), 500))]);
    assert.equal(still, 'open');
    kept.close();
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('the users file is read again when it changes: a removed user and a replaced token are refused, and their sockets and event streams end, without a restart', async () => {
  const u = users();
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({ users: u.file }, (e) => logs.push(e));
  try {
    const bobAuth = { Authorization: `Bearer ${u.bob}` };
    const bobCookie = sessionOf(await request(`${s.url}/api/login`, { body: { name: 'bob', password: 'bob-pw' } }));
    const ws = new WebSocket(s.wsUrl, { headers: bobAuth });
    await new Promise((r) => ws.on('open', r));
    const wsEnd = errorAndClose(ws);
    const byToken = await eventStream(s.url, bobAuth);
    const byCookie = await eventStream(s.url, { cookie: bobCookie });
    // alice's token is replaced (adduser --force), bob is removed
    const newAlice = addUser(u.file, 'alice', 'alice-pw', { replace: true });
    const file = JSON.parse(readFileSync(u.file, 'utf8'));
    writeFileSync(u.file, JSON.stringify({ users: file.users.filter((x: { name: string }) => x.name !== 'bob') }));
    const e = await within(wsEnd, 60_000, "bob's socket ends");
    assert.equal(e.error, ErrorCode.Unauthorized, JSON.stringify(e));
    await within(byToken.ended, 60_000, "bob's event stream (token) ends");
    await within(byCookie.ended, 60_000, "bob's event stream (cookie) ends");
    for (const headers of [bobAuth, { cookie: bobCookie }, { Authorization: `Bearer ${u.alice}` }]) assert.equal((await request(`${s.url}/api/whoami`, { headers })).status, 401);
    assert.equal((await request(`${s.url}/api/whoami`, { headers: { Authorization: `Bearer ${newAlice}` } })).status, 200);
    // a file that does not read keeps the previous one (once the server has read it: its log says so)
    const badFiles = () => logs.filter((l) => l.error === 'users').length;
    const before = badFiles();
    writeFileSync(u.file, '{"users": [');
    await until('the bad file is logged', () => badFiles() > before, 60_000);
    assert.equal((await request(`${s.url}/api/whoami`, { headers: { Authorization: `Bearer ${newAlice}` } })).status, 200);
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('a 5 MB JSON body gets 413 (not 500, no error log); sign-ins and failures are logged without secrets; metrics show no process internals to users', async () => {
  const u = users();
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({ users: u.file }, (e) => logs.push(e));
  try {
    const big = { name: 'alice', password: 'x'.repeat(5_000_000) };
    assert.equal((await request(`${s.url}/api/login`, { body: big })).status, 413);
    const moved = await request(`${s.url}/api/files/move`, { body: { from: 'x'.repeat(5_000_000), to: 'y' }, headers: { Authorization: `Bearer ${u.alice}` } });
    assert.equal(moved.status, 413);
    assert.deepEqual(logs.filter((l) => l.error), [], 'no error logged');
    assert.equal((await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'wrong-secret-1' }, localAddress: '127.0.0.2' })).status, 401);
    assert.equal((await request(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' }, localAddress: '127.0.0.2' })).status, 200);
    assert.deepEqual(logs.filter((l) => String(l.event).startsWith('login')).map((l) => [l.event, l.name ?? l.user, l.address]), [
      ['login-refused', 'alice', '127.0.0.2'],
      ['login', 'alice', '127.0.0.2'],
    ]);
    const all = JSON.stringify(logs);
    for (const secret of ['wrong-secret-1', 'alice-pw', u.alice]) assert.ok(!all.includes(secret), 'a secret reached the log');
    const m = JSON.parse((await request(`${s.url}/api/metrics`, { headers: { Authorization: `Bearer ${u.alice}` } })).text);
    assert.deepEqual(Object.keys(m).sort(), ['connections', 'user']);
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('store files are created readable by the server\'s user only (0600), folders 0700', async () => {
  const s = await testServer();
  try {
    await pushBytes(s, 'a/b.bin', fastRandomBytes(9, 300_000));
    const entries = readdirSync(s.data, { recursive: true, withFileTypes: true });
    assert.ok(entries.length > 5);
    for (const d of entries) {
      const p = path.join(d.parentPath ?? (d as any).path, d.name);
      const mode = statSync(p).mode & 0o777;
      assert.equal(mode & 0o077, 0, `${p} is ${mode.toString(8)}`);
    }
  } finally {
    await s.stop();
  }
});

test('turns: one user\'s sessions beyond --max-running-per-user wait for their own, never another user\'s; file requests take turns apart', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'max-running-per-user': '1' });
  const as = (token: string) => class extends WebSocket {
    constructor(url: string) {
      super(url, { headers: { Authorization: `Bearer ${token}` } });
    }
  } as any;
  const list = (token: string) => request(`${s.url}/api/files`, { headers: { Authorization: `Bearer ${token}` } });
  try {
    assert.equal((await pushBytes(s, 'big.bin', fastRandomBytes(3, 32 << 20), { WebSocket: as(u.alice) })).version, 1);
    // alice's first session holds her one sync turn: Hello and part of a Checksum List, no more
    const held = new WebSocket(s.wsUrl, { headers: { Authorization: `Bearer ${u.alice}` } });
    await new Promise((r) => held.on('open', r));
    held.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: DEFAULT_PARAMS, algo: 3, size: 1 << 20, basisVersion: 0, name: 'slow.bin' }));
    held.send(encode({ type: Msg.Checksums, fastfps: Uint32Array.of(1, 2), lengths: Uint32Array.of(4096, 4096) }));
    await new Promise((r) => setTimeout(r, 200));
    let second = false;
    const waiting = pushBytes(s, 'a.bin', fastRandomBytes(1, 5000), { WebSocket: as(u.alice) }).then((r) => ((second = true), r));
    // her file requests do not wait for her sessions; bob's push runs while hers is held (it
    // is held until the test ends it: any bound tells a wait for it, so a generous one)
    assert.equal((await within(list(u.alice), 60_000, "alice's listing")).status, 200);
    assert.equal((await within(pushBytes(s, 'b.bin', fastRandomBytes(2, 5000), { WebSocket: as(u.bob) }), 60_000, "bob's push")).version, 1);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(second, false, "alice's second push waits for her first");
    held.terminate();
    assert.equal((await within(waiting, 60_000, "alice's second push")).version, 1);

    // a download alice does not read holds her one file turn: her listing waits, bob's does not
    let listed = false;
    const download = http.get(`${s.url}/api/download?name=big.bin`, { headers: { Authorization: `Bearer ${u.alice}` } }, (res) => res.pause());
    download.on('error', () => {});
    await new Promise((r) => setTimeout(r, 500));
    const hers = list(u.alice).then((r) => ((listed = true), r));
    assert.equal((await within(list(u.bob), 60_000, "bob's listing")).status, 200);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(listed, false, "alice's listing waits for her download");
    download.destroy();
    assert.equal((await within(hers, 60_000, "alice's listing after the download")).status, 200);
  } finally {
    await s.stop();
    u.cleanup();
  }
});

test('the per-address socket limit counts per user: one user holding it from an address leaves another user at that address their own', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'max-sessions-per-address': '4' });
  try {
    const open = (token: string) =>
      new Promise<{ status: number; ws?: WebSocket }>((resolve) => {
        const ws = new WebSocket(s.wsUrl, { headers: { Authorization: `Bearer ${token}` }, localAddress: '127.0.0.1' });
        ws.on('unexpected-response', (_q, res) => resolve({ status: res.statusCode! }));
        ws.on('open', () => resolve({ status: 101, ws }));
      });
    const alice = await Promise.all(Array.from({ length: 5 }, () => open(u.alice)));
    assert.deepEqual(alice.map((a) => a.status).sort(), [101, 101, 101, 101, 503]);
    const bob = await Promise.all(Array.from({ length: 4 }, () => open(u.bob)));
    assert.deepEqual(bob.map((a) => a.status), [101, 101, 101, 101]);
    [...alice, ...bob].forEach((a) => a.ws?.terminate());
  } finally {
    await s.stop();
    u.cleanup();
  }
});
