// Page logins shared through the store by every process on it: `dsync serve --workers 2`, two
// independent servers on one store directory, and login objects in the store that are expired,
// damaged or not this server's. Real processes, a real store directory.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import WebSocket from 'ws';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { addUser } from '../src/http/auth.ts';
import { RECHECK_MS } from '../src/http/logins.ts';
import { until } from '../../harness/wait.ts';
import { runCheck } from '../src/store/check.ts';
import { runGc } from '../src/store/gc.ts';
import { errorAndClose } from '../../harness/attacks.ts';
import { startServe } from '../../harness/child.ts';
import { testServer } from '../../harness/helpers.ts';

/** What a loaded machine may add to the re-check's deadline (timers fire late, answers wait for
 *  the CPU); a process that never re-checked would miss it by forever. */
const SLACK_MS = 10_000;

/** One request on a connection of its own (a kept-alive one would stay with one worker). */
function call(url: string, o: { method?: string; cookie?: string; body?: unknown } = {}) {
  return new Promise<{ status: number; cookie: string; text: string }>((resolve, reject) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const headers: Record<string, string> = { ...(body && { 'content-type': 'application/json' }), ...(o.cookie && { cookie: o.cookie }) };
    const req = http.request(url, { method: o.method ?? (body ? 'POST' : 'GET'), agent: false, headers }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, cookie: String(res.headers['set-cookie'] ?? '').split(';')[0], text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A store directory and a users file with alice (password "alice-pw"). */
function setup() {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-sessions-'));
  const users = path.join(dir, 'users.json');
  addUser(users, 'alice', 'alice-pw');
  const data = path.join(dir, 'data');
  return { dir, users, data, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

const sessionDir = (data: string) => path.join(data, 'auth', 'sessions');
const statuses = async (url: string, cookie: string, n: number) => {
  const got: number[] = [];
  for (let i = 0; i < n; i++) got.push((await call(`${url}/api/whoami`, { cookie })).status);
  return got;
};
const opened = (wsUrl: string, cookie: string) =>
  new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { headers: { cookie } });
    ws.on('open', () => resolve(ws));
    ws.on('error', reject);
  });

/** Logout through `via` ends `sockets` (on any process) within the re-check interval and makes
 *  the cookie fail everywhere in `urls`. */
async function logoutEndsEverywhere(via: string, urls: string[], cookie: string, sockets: WebSocket[]) {
  const ends = sockets.map((ws) => errorAndClose(ws));
  const t0 = performance.now();
  assert.equal((await call(`${via}/api/logout`, { method: 'POST', cookie })).status, 200);
  for (const e of await Promise.all(ends)) {
    assert.equal(e.error, ErrorCode.Unauthorized, JSON.stringify(e));
    assert.match(e.message!, /signed out/);
  }
  const took = performance.now() - t0;
  // the sweep runs every RECHECK_MS and may find a login checked just before: twice the interval, plus a loaded machine's slack
  assert.ok(took < 2 * RECHECK_MS + SLACK_MS, `the sockets ended ${took.toFixed(0)} ms after the logout`);
  for (const url of urls) await until(`the cookie fails on ${url} after a logout`, async () => (await statuses(url, cookie, 10)).every((x) => x === 401), 2 * RECHECK_MS + SLACK_MS);
}

test('--workers 2 --users: every request of a login succeeds on either worker; a logout ends its sockets on both', { timeout: 90_000 }, async () => {
  const t = setup();
  const s = await startServe(['--data', t.data, '--workers', '2', '--users', t.users]);
  try {
    const login = await call(`${s.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } });
    assert.equal(login.status, 200);
    assert.deepEqual(await statuses(s.url, login.cookie, 40), Array(40).fill(200), 'each worker knows the login');

    // the store holds the login under the SHA-256 of its id, never the id
    const sid = login.cookie.split('=')[1];
    const stored = path.join(sessionDir(t.data), createHash('sha256').update(sid).digest('hex'));
    assert.ok(existsSync(stored), `${stored} after login`);
    assert.ok(!readFileSync(stored, 'utf8').includes(sid));
    assert.equal(JSON.parse(readFileSync(stored, 'utf8')).user, 'alice');

    // six sockets on new connections: round-robin puts three on each worker
    const sockets = [];
    for (let i = 0; i < 6; i++) sockets.push(await opened(s.wsUrl, login.cookie));
    await logoutEndsEverywhere(s.url, [s.url], login.cookie, sockets);
    assert.ok(!existsSync(stored), 'logout deletes the login object');
  } finally {
    await s.kill();
    t.cleanup();
  }
});

test('two servers on one store directory: a login on one is known to the other; a logout on either ends it on both', { timeout: 90_000 }, async () => {
  const t = setup();
  const a = await startServe(['--data', t.data, '--users', t.users]);
  const b = await startServe(['--data', t.data, '--users', t.users]);
  try {
    const login = await call(`${a.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } });
    assert.equal(login.status, 200);
    assert.deepEqual(await statuses(b.url, login.cookie, 20), Array(20).fill(200));
    const onA = await opened(a.wsUrl, login.cookie);
    const onB = await opened(b.wsUrl, login.cookie);
    // the logout goes through B; A's socket ends by A's sweep
    await logoutEndsEverywhere(b.url, [a.url, b.url], login.cookie, [onA, onB]);

    // and the other way round, with a new login
    const again = await call(`${b.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } });
    assert.deepEqual(await statuses(a.url, again.cookie, 5), Array(5).fill(200));
    await logoutEndsEverywhere(a.url, [a.url, b.url], again.cookie, [await opened(b.wsUrl, again.cookie)]);
  } finally {
    await a.kill();
    await b.kill();
    t.cleanup();
  }
});

test('login objects that are expired, damaged or not of a current user are refused and deleted; a valid one is honoured, and gc and check leave it', async () => {
  const t = setup();
  const s = await testServer({ users: t.users, data: t.data });
  try {
    mkdirSync(sessionDir(t.data), { recursive: true });
    let n = 0;
    /** A made-up session id whose login object in the store is `body`; its cookie. */
    const plant = (body: string | Buffer) => {
      const sid = String(n++).padStart(32, 'x');
      const file = path.join(sessionDir(t.data), createHash('sha256').update(sid).digest('hex'));
      writeFileSync(file, body);
      return { cookie: `dsync_session=${sid}`, file, body: String(body) };
    };
    const future = Date.now() + 3_600_000;
    const bad = [
      JSON.stringify({ user: 'alice', expires: Date.now() - 1 }),
      JSON.stringify({ user: 'mallory', expires: future }),
      JSON.stringify({ user: 'alice', expires: future, admin: true }),
      JSON.stringify({ user: 'alice', expires: String(future) }),
      JSON.stringify({ user: 'alice', expires: 1e300 }),
      JSON.stringify(['alice', future]),
      JSON.stringify({ user: 'alice', expires: future, pad: 'x'.repeat(300) }),
      'null',
      '{"user":"alice",',
      Buffer.from([0xff, 0xfe, 0x00]),
    ].map(plant);
    for (const p of bad) {
      assert.equal((await call(`${s.url}/api/whoami`, { cookie: p.cookie })).status, 401, p.body);
      assert.ok(!existsSync(p.file), 'refused and deleted');
    }
    const good = plant(JSON.stringify({ user: 'alice', expires: future }));
    const who = await call(`${s.url}/api/whoami`, { cookie: good.cookie });
    assert.equal(who.status, 200);
    assert.equal(JSON.parse(who.text).user, 'alice');
    // a cookie of another shape is never looked up, and unknown ids leave no object behind
    for (const c of ['dsync_session=short', `dsync_session=${'a'.repeat(31)}/`, 'dsync_session=' + 'y'.repeat(32)]) {
      assert.equal((await call(`${s.url}/api/whoami`, { cookie: c })).status, 401);
    }
    assert.deepEqual(readdirSync(sessionDir(t.data)), [path.basename(good.file)]);
    // gc and check leave logins alone: outside what they list
    const gc = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 1000 });
    assert.ok(!gc.skipped, JSON.stringify(gc));
    assert.deepEqual((await runCheck(s.repo)).errors, []);
    assert.ok(existsSync(good.file), 'gc keeps the login');
    assert.equal((await call(`${s.url}/api/whoami`, { cookie: good.cookie })).status, 200);
  } finally {
    await s.stop();
    t.cleanup();
  }
});

test('two servers on one store directory: a logout on one ends the login\'s event streams on the other within the re-check interval', { timeout: 90_000 }, async () => {
  const t = setup();
  const a = await startServe(['--data', t.data, '--users', t.users]);
  const b = await startServe(['--data', t.data, '--users', t.users]);
  try {
    const login = await call(`${a.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' } });
    const { ended } = await new Promise<{ ended: Promise<number> }>((resolve, reject) => {
      http.get(`${b.url}/api/events`, { headers: { cookie: login.cookie } }, (res) => {
        assert.equal(res.statusCode, 200);
        res.resume();
        resolve({ ended: new Promise<number>((r) => res.on('close', () => r(performance.now()))) });
      }).on('error', reject);
    });
    await new Promise((r) => setTimeout(r, 200));
    const t0 = performance.now();
    assert.equal((await call(`${a.url}/api/logout`, { method: 'POST', cookie: login.cookie })).status, 200);
    const at = await Promise.race([ended, new Promise<null>((r) => setTimeout(() => r(null), 2 * RECHECK_MS + SLACK_MS))]);
    assert.ok(at !== null, 'the stream on the other server ended');
    assert.ok(at - t0 < 2 * RECHECK_MS + SLACK_MS, `it ended ${(at - t0).toFixed(0)} ms after the logout`);
  } finally {
    await a.kill();
    await b.kill();
    t.cleanup();
  }
});
