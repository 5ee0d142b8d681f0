// ls, log, mv, rm and restore against a real server's REST API, and gc and check on its store:
// what they change on the server, what they print (tables on a terminal, JSON lines when
// piped), and their exit statuses.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { addUser } from '../../server/src/http/auth.ts';
import { testServer } from '../../harness/helpers.ts';
import { DSYNC, dsync, dsyncOnTerminal, jsonLines, spawnOnTerminal } from './run.ts';

test('ls, log, mv, restore and rm', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-manage-'));
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known'), DSYNC_SERVER: s.url };
  const run = (...args: string[]) => dsync(args, { env });
  try {
    mkdirSync(path.join(dir, 'photos'));
    writeFileSync(path.join(dir, 'photos', 'a.jpg'), 'a'.repeat(1500));
    writeFileSync(path.join(dir, 'photos', 'b.jpg'), 'b');
    writeFileSync(path.join(dir, 'notes.txt'), 'first notes');
    assert.equal((await run('push', path.join(dir, 'photos'), path.join(dir, 'notes.txt'))).code, 0);
    writeFileSync(path.join(dir, 'notes.txt'), 'second notes, longer');
    assert.equal((await run('push', path.join(dir, 'notes.txt'))).code, 0);

    // ls: the top level, then a folder; JSON lines when piped
    const top = await run('ls');
    assert.equal(top.code, 0, top.stderr);
    const entries = jsonLines(top.stdout);
    assert.deepEqual(entries.filter((e) => e.folder).map((e) => e.folder), ['photos/']);
    assert.deepEqual(entries.filter((e) => !e.folder).map((e) => [e.name, e.latest, e.versions]), [['notes.txt', 2, 2]]);
    const inPhotos = jsonLines((await run('ls', 'photos')).stdout);
    assert.deepEqual(inPhotos.map((e) => [e.name, e.size]), [['photos/a.jpg', 1500], ['photos/b.jpg', 1]]);
    // on a terminal: a table, folders first, and a total
    const table = await dsyncOnTerminal(['ls'], { env });
    assert.match(table.out, /^NAME +SIZE +LATEST +VERSIONS +MODIFIED/m);
    assert.match(table.out, /^photos\/ /m);
    assert.match(table.out, /^notes\.txt +20 B +v2 +2 +\d{4}-\d\d-\d\d \d\d:\d\d/m);
    assert.match(table.out, /^1 file, 20 B; 1 folder$/m);
    assert.match((await dsyncOnTerminal(['ls', 'photos/'], { env })).out, /^a\.jpg +1\.5 KB +v1 +1 /m);

    // log: newest first
    const log = jsonLines((await run('log', 'notes.txt')).stdout);
    assert.deepEqual(log.map((v) => [v.version, v.size]), [[2, 20], [1, 11]]);
    assert.match((await dsyncOnTerminal(['log', 'notes.txt'], { env })).out, /^VERSION +SIZE +CHANGED +MADE +FROM\n +v2 +20 B /m);

    // mv: a rename with its versions, no bytes sent
    const mv = await run('mv', 'notes.txt', 'docs/notes.txt');
    assert.equal(mv.code, 0, mv.stderr);
    assert.deepEqual(jsonLines((await run('log', 'docs/notes.txt')).stdout).map((v) => v.version), [2, 1]);
    assert.equal((await run('log', 'notes.txt')).code, 1, 'the old name is gone');

    // restore: version 1 becomes the latest, as version 3
    const restored = await run('restore', 'docs/notes.txt', '--version', '1');
    assert.equal(restored.code, 0, restored.stderr);
    assert.deepEqual(jsonLines(restored.stdout), [{ name: 'docs/notes.txt', restored: 1, version: 3 }]);
    assert.equal((await s.stored('docs/notes.txt')).toString(), 'first notes');
    assert.match((await dsyncOnTerminal(['restore', 'docs/notes.txt', '--version', '2'], { env })).out, /docs\/notes\.txt: v2 restored as v4/);
    const out = path.join(dir, 'pulled.txt');
    assert.equal((await run('pull', 'docs/notes.txt', '--out', out)).code, 0);
    assert.equal(readFileSync(out, 'utf8'), 'second notes, longer');

    // rm: one version, then the file
    assert.equal((await run('rm', 'docs/notes.txt', '--version', '2')).code, 0);
    assert.deepEqual(jsonLines((await run('log', 'docs/notes.txt')).stdout).map((v) => v.version), [4, 3, 1]);
    assert.equal((await run('rm', 'docs/notes.txt')).code, 0);
    assert.equal((await run('log', 'docs/notes.txt')).code, 1);

    // refusals: status 1 with the server's message; a wrong command line: 2
    const nope = await run('mv', 'nope.txt', 'x.txt');
    assert.equal(nope.code, 1);
    assert.match(nope.stderr, /^dsync mv: .*nope\.txt/);
    assert.equal((await run('restore', 'photos/a.jpg')).code, 2, '--version is required');
    assert.equal((await run('rm', 'photos/a.jpg', '--version', 'x')).code, 2);
    assert.equal((await dsync(['ls'], { env: { DSYNC_SERVER: '' } })).code, 2, 'no server given');
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a new token never starts with "-": `--token TOKEN` reads it as the value, not as an option', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-tokens-'));
  try {
    const users = path.join(dir, 'users.json');
    // one in 64 base64url tokens would start with '-': 500 draws miss that with odds under 1e-3
    const tokens = Array.from({ length: 500 }, () => addUser(users, 'ann', undefined, { replace: true }));
    assert.deepEqual(tokens.filter((t) => t.startsWith('-')), []);
    assert.equal(new Set(tokens).size, 500);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('with accounts: the REST commands send --token (or DSYNC_TOKEN) and fail with status 1 without it', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-manage-'));
  const users = path.join(dir, 'users.json');
  const token = addUser(users, 'ann', 'pw-ann-123');
  const s = await testServer({ users });
  try {
    const no = await dsync(['ls', '--server', s.url]);
    assert.equal(no.code, 1);
    assert.match(no.stderr, /this server has accounts: give your token/);
    assert.equal((await dsync(['ls', '--server', s.url, '--token', token])).code, 0);
    assert.equal((await dsync(['ls', '--server', s.url], { env: { DSYNC_TOKEN: token } })).code, 0);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('gc repacks a segment mostly dead and says how much; the next gc deletes the old one', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-repack-'));
  try {
    const env = { DSYNC_CACHE_DIR: path.join(dir, 'known') };
    const a = randomBytes(1_000_000);
    writeFileSync(path.join(dir, 'a.bin'), a);
    assert.equal((await dsync(['push', path.join(dir, 'a.bin'), '--server', s.url], { env })).code, 0);
    // a third cut from the middle: version 2 copies the rest of version 1's segment
    const b = Buffer.concat([a.subarray(0, 300_000), a.subarray(650_000)]);
    writeFileSync(path.join(dir, 'a.bin'), b);
    assert.equal((await dsync(['push', path.join(dir, 'a.bin'), '--server', s.url], { env })).code, 0);
    const gc = await dsyncOnTerminal(['gc', '--store', s.data, '--keep-versions', '1', '--min-age-ms', '0', '--window-ms', '50']);
    assert.equal(gc.code, 0, gc.out);
    assert.match(gc.out, /repacked \d+(\.\d+)? KB out of 1 mostly dead segments \(the next collection deletes them\)/);
    const next = await dsync(['gc', '--store', s.data, '--min-age-ms', '0', '--window-ms', '50']);
    const report = jsonLines(next.stdout)[0];
    assert.ok(report.bytes >= 1_000_000 && report.repacked === 0, JSON.stringify(report));
    assert.deepEqual(jsonLines((await dsync(['check', '--store', s.data, '--read-data'])).stdout)[0].errors, []);
    assert.ok((await s.stored('a.bin')).equals(b), 'the kept version is whole');
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('gc and check run on a store directory, and check says whether it is whole', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-gc-'));
  try {
    writeFileSync(path.join(dir, 'a.bin'), 'a'.repeat(100_000));
    const env = { DSYNC_CACHE_DIR: path.join(dir, 'known') };
    assert.equal((await dsync(['push', path.join(dir, 'a.bin'), '--server', s.url], { env })).code, 0);
    writeFileSync(path.join(dir, 'a.bin'), 'b'.repeat(100_000));
    assert.equal((await dsync(['push', path.join(dir, 'a.bin'), '--server', s.url], { env })).code, 0);
    const gc = await dsync(['gc', '--store', s.data, '--keep-versions', '1', '--keep-days', '0', '--min-age-ms', '0', '--window-ms', '50']);
    assert.equal(gc.code, 0, gc.stderr);
    assert.equal(jsonLines(gc.stdout).length, 1);
    const check = await dsync(['check', '--data', s.data, '--read-data']);
    assert.equal(check.code, 0, check.stderr + check.stdout);
    assert.deepEqual(jsonLines(check.stdout)[0].errors, []);
    assert.equal((await s.stored('a.bin')).toString(), 'b'.repeat(100_000), 'the kept version is whole');
    // a flipped byte in a segment (the store's data/ objects): found by --read-data, status 1
    const segments = readdirSync(path.join(s.data, 'data'), { recursive: true, withFileTypes: true }).filter((d) => d.isFile());
    const seg = path.join(segments[0].parentPath ?? (segments[0] as any).path, segments[0].name);
    const b = readFileSync(seg);
    b[b.length >> 1] ^= 1;
    writeFileSync(seg, b);
    const bad = await dsync(['check', '--store', s.data, '--read-data']);
    assert.equal(bad.code, 1, bad.stderr);
    assert.ok(jsonLines(bad.stdout)[0].errors.length > 0);
    const human = await dsyncOnTerminal(['check', '--store', s.data, '--read-data']);
    assert.equal(human.code, 1);
    assert.match(human.out, /: \d+ problems?\n/);
    assert.equal((await dsync(['gc', '--store', s.data, '--keep-versions', 'all'])).code, 2);
    // settings that cannot be made safe or do not fit a timer are refused
    for (const bad of [['--window-ms', '300001'], ['--min-age-ms', '1.5'], ['--window-ms', '-1'], ['--repack-percent', '0'], ['--repack-percent', '101'], ['--repack-percent', '2.5']]) assert.equal((await dsync(['gc', '--store', s.data, ...bad])).code, 2, bad.join(' '));
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('adduser: a password from a hidden prompt or stdin, never the command line; a weak one or an existing name (without --force) is refused', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-adduser-'));
  const file = path.join(dir, 'users.json');
  const add = (args: string[], input?: string) => spawnSync(process.execPath, [DSYNC, 'adduser', ...args, '--users', file], { input, encoding: 'utf8' });
  try {
    const argv = add(['ann', '--password', 'plum-harbour-kettle-9']);
    assert.equal(argv.status, 2);
    assert.match(argv.stderr, /never taken on the command line.*--password-stdin/);
    for (const [pw, why] of [['short', /at least 12/], ['my-name-is-ann!', /user name/], ['password2024!', /common/]] as const) {
      const weak = add(['ann', '--password-stdin'], `${pw}\n`);
      assert.equal(weak.status, 1, pw);
      assert.match(weak.stderr, why);
    }
    assert.equal(existsSync(file), false, 'nothing written');
    const good = add(['ann', '--password-stdin'], 'plum-harbour-kettle-9\n');
    assert.equal(good.status, 0, good.stderr);
    const token = good.stdout.trim();
    assert.match(token, /^[A-Za-z0-9_-]{32}$/);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const again = add(['ann', '--password-stdin'], 'another-fine-phrase-3\n');
    assert.equal(again.status, 1);
    assert.match(again.stderr, /already has an account.*--force/);
    const forced = add(['ann', '--password-stdin', '--force'], 'another-fine-phrase-3\n');
    assert.equal(forced.status, 0, forced.stderr);
    assert.notEqual(forced.stdout.trim(), token);
    // on a terminal: asked twice, not echoed
    const tty = spawnOnTerminal([process.execPath, DSYNC, 'adduser', 'bea', '--users', file, '--password']);
    let out = '';
    tty.stdout.on('data', (d) => {
      out += d;
      if (/password for bea: $/.test(out) || /again: $/.test(out)) tty.stdin.write('velvet-orbit-lantern-4\r');
    });
    const code = await new Promise((r) => tty.on('close', r));
    assert.equal(code, 0, out);
    assert.ok(!out.includes('velvet-orbit'), 'the password is not echoed');
    const s = await testServer({ users: file });
    try {
      const login = await fetch(`${s.url}/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bea', password: 'velvet-orbit-lantern-4' }) });
      assert.equal(login.status, 200);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
