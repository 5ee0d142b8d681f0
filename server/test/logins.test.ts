// What an attacker on the network can do to a server's sign-in: a flood of logins, rotating
// addresses against one name, weak and old password hashes. A real server on a loopback port
// each time. (Apart from hostile.test.ts: scrypt's work makes these the long ones.)
import assert from 'node:assert/strict';
import { scryptSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { addUser, passwordWeakness } from '../src/http/auth.ts';
import { request } from '../../harness/attacks.ts';
import { testServer } from '../../harness/helpers.ts';
import { until } from '../../harness/wait.ts';

/** A users file with alice and bob (passwords "alice-pw", "bob-pw"); returns it and their tokens. */
function users() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dsync-users-'));
  const file = path.join(dir, 'users.json');
  return { file, alice: addUser(file, 'alice', 'alice-pw'), bob: addUser(file, 'bob', 'bob-pw'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

test('logins: hashing leaves the server answering, a flood gets 429 with Retry-After, a person typing gets in', async () => {
  const u = users();
  // no attempt limit here: 100 password checks must not stall /api/health (scrypt off the loop)
  // (the store's health probe has all the time it needs: this is about the event loop; one
  // password check at a time, 33 in all, keeps the test's work within a loaded machine's means)
  const s = await testServer({ users: u.file, 'max-login-attempts': '1000', 'max-login-hashes': '1', 'health-timeout-ms': '600000', 'health-write-timeout-ms': '600000' });
  try {
    // measured against this machine in this run, not against a number: /api/health during
    // 100 logins (sent once the first password check has answered, so that the rest are
    // queued or refused) takes less than twice one password check alone (~0.2 s of a core);
    // a check on the event loop would hold it behind at least one whole check, in practice many
    const wrong = (name: string, localAddress?: string) => request(`${s.url}/api/login`, { body: { name, password: 'nope' }, localAddress });
    const timed = async <T,>(p: Promise<T>) => {
      const t0 = performance.now();
      return { got: await p, ms: performance.now() - t0 };
    };
    const alone = await timed(wrong('alice'));
    assert.equal(alone.got.status, 401);
    let checked = 0;
    const flood = Array.from({ length: 100 }, () => wrong('alice').then((r) => ((checked += r.status === 401 ? 1 : 0), r)));
    await until('a first password checked', () => checked > 0, 600_000);
    const health = await timed(request(`${s.url}/api/health`));
    assert.equal(health.got.status, 200, health.got.text);
    const checkedBeforeHealth = checked;
    const statuses = (await Promise.all(flood)).map((r) => r.status);
    assert.ok(statuses.every((x) => x === 401 || x === 429), String(statuses));
    assert.ok(health.ms < 2 * alone.ms, `/api/health took ${health.ms.toFixed(0)} ms during 100 logins (${checkedBeforeHealth} of ${checked} checked by then), one check alone ${alone.ms.toFixed(0)} ms`);
  } finally {
    await s.stop();
  }
  const s2 = await testServer({ users: u.file, 'login-backoff-max-ms': '2000' });
  try {
    const login = (name: string, password: string, localAddress?: string) => request(`${s2.url}/api/login`, { body: { name, password }, localAddress });
    // 100 parallel wrong logins from one address: only the first few are checked
    let refusedYet = false;
    const flooding = Promise.all(Array.from({ length: 100 }, () => login('alice', 'nope').then((r) => ((refusedYet ||= r.status === 429), r))));
    // the name is held back once the flood has been refused: waited for, not timed
    await until('a login of the flood refused', () => refusedYet, 600_000, 5);
    // alice's account is held back too (from any address that never signed in to it), for at
    // most the longest wait
    const held = await login('alice', 'alice-pw', '127.0.0.3');
    assert.equal(held.status, 429);
    const retry = new Promise((r) => setTimeout(r, Number(held.headers['retry-after']) * 1000));
    const flood = await flooding;
    const refused = flood.filter((r) => r.status === 429);
    assert.ok(refused.length >= 90, `${refused.length} of 100 refused`);
    for (const r of refused) assert.ok(Number(r.headers['retry-after']) >= 1 && Number(r.headers['retry-after']) <= 2, `Retry-After ${r.headers['retry-after']}`);
    assert.match(refused[0].text, /too many login attempts/);
    // bob, typing from another address, mistypes three times and gets in
    for (let k = 0; k < 3; k++) assert.equal((await login('bob', 'bob-pq', '127.0.0.2')).status, 401);
    assert.equal((await login('bob', 'bob-pw', '127.0.0.2')).status, 200);
    await retry;
    assert.equal((await login('alice', 'alice-pw', '127.0.0.3')).status, 200);
  } finally {
    await s2.stop();
    u.cleanup();
  }
});

test('login backoff by name does not lock out the owner: his usual address or device gets in while an attacker rotates addresses; unknown names cannot starve a known one', async () => {
  const u = users();
  const s = await testServer({ users: u.file, 'login-backoff-max-ms': '30000' });
  try {
    const login = (name: string, password: string, localAddress: string, cookie?: string) =>
      request(`${s.url}/api/login`, { body: { name, password }, localAddress, headers: cookie ? { cookie } : {} });
    // bob signed in from his usual address, and from his laptop (its device cookie), before
    assert.equal((await login('bob', 'bob-pw', '127.0.0.2')).status, 200);
    const laptop = await login('bob', 'bob-pw', '127.0.0.3');
    const device = laptop.headers['set-cookie']!.find((c) => c.startsWith('dsync_device='))!.split(';')[0];
    assert.match(device, /^dsync_device=[A-Za-z0-9_-]{32}$/);
    // an attacker rotates addresses (a new one for every guess) against bob's name, until the
    // name is held back: then its wait has just begun
    let guess = 0;
    const lockName = async () => {
      while ((await login('bob', `guess-${guess}`, `127.0.2.${++guess}`)).status !== 429) assert.ok(guess < 60);
    };
    await lockName();
    assert.equal((await login('bob', 'bob-pw', '127.0.0.9')).status, 429, 'the name is in backoff for new addresses');
    let ok = 0;
    for (let k = 0; k < 5; k++) {
      await lockName();
      ok += (await login('bob', 'bob-pw', '127.0.0.2')).status === 200 ? 1 : 0;
    }
    assert.equal(ok, 5, 'bob from his usual address signs in every time');
    await lockName();
    assert.equal((await login('bob', 'bob-pw', '127.0.0.4', device)).status, 200, 'bob from a new address with his device cookie signs in');
    // a device cookie that never signed in to bob (planted, or made up) trusts nothing
    await lockName();
    assert.equal((await login('bob', 'bob-pw', '127.0.0.5', 'dsync_device=' + 'A'.repeat(32))).status, 429);
  } finally {
    await s.stop();
  }
  const s2 = await testServer({ users: u.file });
  try {
    // 100 new names from 100 addresses fill the password checks' queue; alice, a known name
    // from an address she never used, still gets her turn
    // alice's wait is measured against one sign-in alone on this machine in this run: behind
    // the flood's queue (64 checks, two at a time) she would wait some 30 of them
    const signIn = async (localAddress: string) => {
      const t0 = performance.now();
      return { got: await request(`${s2.url}/api/login`, { body: { name: 'alice', password: 'alice-pw' }, localAddress }), ms: performance.now() - t0 };
    };
    const alone = await signIn('127.0.0.8');
    assert.equal(alone.got.status, 200, alone.got.text);
    let answered = 0;
    const flood = Array.from({ length: 100 }, (_, k) => request(`${s2.url}/api/login`, { body: { name: `nobody${k}`, password: 'x' }, localAddress: `127.0.3.${k + 1}` }).then((r) => (answered++, r)));
    // the flood is in: its overflow has been refused
    await until('the flood overflowed its lane', () => answered > 0, 600_000);
    const alice = await signIn('127.0.0.7');
    const statuses = (await Promise.all(flood)).map((r) => r.status);
    assert.ok(statuses.filter((x) => x === 429).length > 0, 'the flood overflowed its lane');
    assert.equal(alice.got.status, 200, alice.got.text);
    assert.ok(alice.ms < 8 * alone.ms, `alice waited ${alice.ms.toFixed(0)} ms, a sign-in alone takes ${alone.ms.toFixed(0)} ms`);
  } finally {
    await s2.stop();
    u.cleanup();
  }
});

test('passwords: new hashes cost scrypt N=2^15, r=8, p=3; a hash written before (N=2^14, p=1) still signs in; weak ones are named', async () => {
  const u = users();
  try {
    const entry = JSON.parse(readFileSync(u.file, 'utf8')).users[0];
    assert.match(entry.password, /^scrypt\$ln=15,r=8,p=3\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]{44}$/);
    const salt = Buffer.from('0123456789abcdef');
    const legacy = `scrypt$${salt.toString('base64')}$${scryptSync('old-pw', salt, 32, { N: 16384, r: 8, p: 1 }).toString('base64')}`;
    writeFileSync(u.file, JSON.stringify({ users: [{ name: 'old', password: legacy }] }));
    const s = await testServer({ users: u.file });
    try {
      assert.equal((await request(`${s.url}/api/login`, { body: { name: 'old', password: 'old-pw' } })).status, 200);
      assert.equal((await request(`${s.url}/api/login`, { body: { name: 'old', password: 'old-pq' } })).status, 401);
    } finally {
      await s.stop();
    }
    assert.throws(() => addUser(u.file, 'old', 'another-password-1'), /already has an account.*--force/);
    for (const [pw, why] of [['short-pw', /at least 12/], ['aaaaaaaaaaaaaaaa', /5 different/], ['abcdefghijklmnop', /run/], ['my-name-is-alice', /user name/], ['Password123456!', /common/]] as const) {
      assert.match(String(passwordWeakness(pw, 'alice')), why, pw);
    }
    assert.equal(passwordWeakness('correct horse battery staple', 'alice'), null);
  } finally {
    u.cleanup();
  }
});

