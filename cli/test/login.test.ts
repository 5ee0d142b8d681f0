// Credentials like the tools people use (README, cli/commands/login.ts): `dsync login` stores a
// server's token in a file only the user can read, read from stdin so it never shows in the
// process list; commands use it when neither --token nor DSYNC_TOKEN is given; `dsync logout`
// removes it. --token warns that the process list shows it; a token over plain http to a host
// that is not this machine gets a warning, and --require-tls refuses to send it.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { addUser } from '../../server/src/http/auth.ts';
import { testServer } from '../../harness/helpers.ts';
import { dsync } from './run.ts';

test('dsync login stores the token (mode 0600, from stdin), commands use it, logout removes it; --token warns', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-login-'));
  const users = path.join(dir, 'users.json');
  const token = addUser(users, 'ann', undefined);
  const s = await testServer({ users });
  const env = { XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_TOKEN: '' };
  const file = path.join(dir, 'config', 'dsync', 'tokens.json');
  try {
    // without a token: refused
    assert.equal((await dsync(['ls', '--server', s.url], { env })).code, 1);
    // a wrong token is not stored
    const wrong = await dsync(['login', '--server', s.url], { input: 'not-the-token\n', env });
    assert.equal(wrong.code, 1, wrong.stderr);
    assert.match(wrong.stderr, /refused this token/);
    assert.ok(!existsSync(file));
    // the token from stdin: stored for this server, readable by the user only
    const login = await dsync(['login', '--server', s.url], { input: token + '\n', env });
    assert.equal(login.code, 0, login.stderr);
    assert.doesNotMatch(login.stderr, /warning/, 'stdin is the quiet way');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(path.dirname(file)).mode & 0o777, 0o700);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), { [s.url]: token });
    // used when neither --token nor DSYNC_TOKEN is given; the server named another way too
    const ls = await dsync(['ls', '--server', s.url], { env });
    assert.equal(ls.code, 0, ls.stderr);
    assert.equal(ls.stderr, '');
    assert.equal((await dsync(['ls', '--server', s.url.replace('http://', '')], { env })).code, 0);
    // --token still comes first, and warns that the process list shows it
    const given = await dsync(['ls', '--server', s.url, '--token', 'wrong'], { env });
    assert.equal(given.code, 1);
    assert.match(given.stderr, /warning: --token shows the token to everyone who can list processes/);
    // logout removes it
    const logout = await dsync(['logout', '--server', s.url], { env });
    assert.equal(logout.code, 0, logout.stderr);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), {});
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal((await dsync(['ls', '--server', s.url], { env })).code, 1);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a token over plain http to another host: a warning; --require-tls refuses to send it; loopback and https are quiet', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-tls-'));
  const env = { XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_TOKEN: 'secret-token' };
  try {
    // 0.0.0.0 is not a loopback name (it reaches this machine, where nothing listens on port 9)
    const plain = await dsync(['ls', '--server', 'http://0.0.0.0:9'], { env });
    assert.equal(plain.code, 1);
    assert.match(plain.stderr, /warning: the token would go to 0\.0\.0\.0:9 over plain http, readable by anyone on the way/);
    const refused = await dsync(['ls', '--server', 'ws://0.0.0.0:9', '--require-tls'], { env });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /over plain ws.*refused \(--require-tls\)/);
    assert.doesNotMatch(refused.stderr, /cannot reach/, 'refused before any connection');
    // loopback: no warning
    const local = await dsync(['ls', '--server', 'http://127.0.0.1:9'], { env });
    assert.doesNotMatch(local.stderr, /warning/);
    // no token: nothing to warn about
    const none = await dsync(['ls', '--server', 'http://0.0.0.0:9', '--require-tls'], { env: { ...env, DSYNC_TOKEN: '' } });
    assert.doesNotMatch(none.stderr, /warning|refused/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
