// What an attacker on the network can do to a server, round two: text frames, logins, Host
// names, silent sockets, metrics, logout, cookies behind a TLS proxy. A real server on a
// loopback port each time.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { encode } from '../../shared/src/codec.ts';
import { DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION } from '../../shared/src/protocol.ts';
import { fastRandomBytes } from '../../shared/src/testdata.ts';
import { addUser } from '../src/auth.ts';
import { errorAndClose, request, silentSockets } from '../../harness/attacks.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';

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

test('logins: hashing leaves the server answering, a flood gets 429 with Retry-After, a person typing gets in', async () => {
  const u = users();
  // no attempt limit here: 100 password checks must not stall /api/health (scrypt off the loop)
  const s = await testServer({ users: u.file, 'max-login-attempts': '1000' });
  try {
    const wrong = (name: string, localAddress?: string) => request(`${s.url}/api/login`, { body: { name, password: 'nope' }, localAddress });
    const flood = Array.from({ length: 100 }, () => wrong('alice'));
    await new Promise((r) => setTimeout(r, 20));
    const t0 = performance.now();
    assert.equal((await request(`${s.url}/api/health`)).status, 200);
    const healthMs = performance.now() - t0;
    const statuses = (await Promise.all(flood)).map((r) => r.status);
    assert.ok(healthMs < 1000, `/api/health took ${healthMs.toFixed(0)} ms during 100 logins`);
    assert.ok(statuses.every((x) => x === 401 || x === 429), String(statuses));
  } finally {
    await s.stop();
  }
  const s2 = await testServer({ users: u.file, 'login-backoff-max-ms': '2000' });
  try {
    const login = (name: string, password: string, localAddress?: string) => request(`${s2.url}/api/login`, { body: { name, password }, localAddress });
    // 100 parallel wrong logins from one address: only the first few are checked
    const flood = await Promise.all(Array.from({ length: 100 }, () => login('alice', 'nope')));
    const refused = flood.filter((r) => r.status === 429);
    assert.ok(refused.length >= 90, `${refused.length} of 100 refused`);
    for (const r of refused) assert.ok(Number(r.headers['retry-after']) >= 1 && Number(r.headers['retry-after']) <= 2, `Retry-After ${r.headers['retry-after']}`);
    assert.match(refused[0].text, /too many login attempts/);
    // bob, typing from another address, mistypes three times and gets in
    for (let k = 0; k < 3; k++) assert.equal((await login('bob', 'bob-pq', '127.0.0.2')).status, 401);
    assert.equal((await login('bob', 'bob-pw', '127.0.0.2')).status, 200);
    // alice's account is held back too (from any address), for at most the longest wait
    const held = await login('alice', 'alice-pw', '127.0.0.3');
    assert.equal(held.status, 429);
    await new Promise((r) => setTimeout(r, Number(held.headers['retry-after']) * 1000));
    assert.equal((await login('alice', 'alice-pw', '127.0.0.3')).status, 200);
  } finally {
    await s2.stop();
    u.cleanup();
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
  const s = await testServer({ 'hello-timeout-ms': '1500' });
  try {
    const { open, refused } = await silentSockets(s.wsUrl, 300, '127.0.0.2');
    assert.equal(open.length, 32, 'the default --max-sessions-per-address');
    assert.ok(refused.length === 268 && refused.every((x) => x === 503), `refused ${refused.length}`);
    const closed = open.map((ws) => errorAndClose(ws));
    const data = fastRandomBytes(4, 2_000_000);
    assert.equal((await pushBytes(s, 'real.bin', data)).version, 1);
    assert.ok(open.every((ws) => ws.readyState === WebSocket.OPEN), 'the push ran while they were open');
    const t0 = performance.now();
    const ends = await Promise.all(closed);
    assert.ok(performance.now() - t0 < 3000);
    for (const e of ends) assert.equal(e.error, ErrorCode.LimitExceeded, JSON.stringify(e));
    assert.match(ends[0].message!, /no message for 1500 ms/);
  } finally {
    await s.stop();
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
    assert.ok(performance.now() - t0 < 1000);
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
