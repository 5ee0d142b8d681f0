// What the CLI says where a new user used to meet raw errors and misleading numbers: a refused
// token, a missing output folder, `--out -`, an unchanged push, the progress line before a
// rate is known, natural order in ls, version numbers after a move, and restores.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { addUser } from '../../server/src/http/auth.ts';
import { testServer } from '../../harness/helpers.ts';
import { fastRandomBytes } from '../../harness/testdata.ts';
import { PROGRESS_MIN, rateAndLeft } from '../output.ts';
import { dsync, dsyncOnTerminal, jsonLines, screen } from './run.ts';

const tmp = () => mkdtempSync(path.join(tmpdir(), 'dsync-cli-words-'));

test('a missing or refused token says what happened and what to do, for the sync socket and the REST API', async () => {
  const dir = tmp();
  const users = path.join(dir, 'users.json');
  addUser(users, 'ann', 'pw-ann-123');
  const s = await testServer({ users });
  try {
    writeFileSync(path.join(dir, 'f.txt'), 'hello');
    for (const cmd of [['push', path.join(dir, 'f.txt')], ['ls'], ['pull', 'f.txt', '--out', path.join(dir, 'g.txt')]]) {
      const none = await dsync([...cmd, '--server', s.url], { env: { DSYNC_TOKEN: '' } });
      assert.equal(none.code, 1);
      assert.doesNotMatch(none.stderr, /Unexpected server response|HTTP 401/);
      assert.match(none.stderr, /this server has accounts: give your token with --token T or DSYNC_TOKEN/, none.stderr);
      const stale = await dsync([...cmd, '--server', s.url, '--token', 'not-a-token']);
      assert.equal(stale.code, 1);
      assert.doesNotMatch(stale.stderr, /Unexpected server response|HTTP 401/);
      assert.match(stale.stderr, /the server refused the token \(from --token or DSYNC_TOKEN\).*try again/, stale.stderr);
    }
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('pull --out into a folder that does not exist says so and leaves nothing; --out - writes the file to stdout', async () => {
  const s = await testServer();
  const dir = tmp();
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known'), DSYNC_SERVER: s.url };
  try {
    const bytes = fastRandomBytes(3, 300_000);
    writeFileSync(path.join(dir, 'a.bin'), bytes);
    assert.equal((await dsync(['push', path.join(dir, 'a.bin')], { env })).code, 0);
    const r = await dsync(['pull', 'a.bin', '--out', path.join(dir, 'newdir', 'f')], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /the folder .*newdir does not exist; create it first/);
    assert.doesNotMatch(r.stderr, /ENOENT|\.tmp/);
    assert.equal(existsSync(path.join(dir, 'newdir')), false);

    // stdout: the bytes, and the report on stderr (not a file named "-")
    const out = await new Promise<{ code: number | null; stdout: Buffer; stderr: string }>((resolve) => {
      import('node:child_process').then(({ spawn }) => {
        const c = spawn(process.execPath, [path.join(import.meta.dirname, '../../bin/dsync.mjs'), 'pull', 'a.bin', '--out', '-'], { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
        const parts: Buffer[] = [];
        let stderr = '';
        c.stdout.on('data', (d) => parts.push(d));
        c.stderr.on('data', (d) => (stderr += d));
        c.on('close', (code) => resolve({ code, stdout: Buffer.concat(parts), stderr }));
      });
    });
    assert.equal(out.code, 0, out.stderr);
    assert.ok(out.stdout.equals(Buffer.from(bytes)), 'stdout carries the file');
    assert.equal(jsonLines(out.stderr)[0].name, 'a.bin', 'the report goes to stderr');
    assert.equal(existsSync(path.join(dir, '-')), false);
    assert.deepEqual(readdirSync(dir).filter((f) => f.includes('dsync-')), []);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a push of unchanged content says "unchanged", on a terminal and in the JSON report', async () => {
  const s = await testServer();
  const dir = tmp();
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known'), DSYNC_SERVER: s.url };
  try {
    const f = path.join(dir, 'big.bin');
    writeFileSync(f, fastRandomBytes(4, 5_000_000));
    assert.equal((await dsync(['push', f], { env })).code, 0);
    const again = await dsyncOnTerminal(['push', f], { env });
    assert.equal(again.code, 0, again.out);
    assert.match(screen(again.out), /^big\.bin → v1: unchanged, nothing stored \([\d.]+ K?B sent to compare\) in /m);
    assert.doesNotMatch(again.out, /saved/);
    // a fresh cache: the three phases, still unchanged
    const json = await dsync(['push', f], { env: { ...env, DSYNC_CACHE_DIR: path.join(dir, 'known2') } });
    const [report] = jsonLines(json.stdout);
    assert.equal(report.unchanged, true);
    assert.equal(report.version, 1);
    // a changed file is not
    writeFileSync(f, fastRandomBytes(5, 5_000_000));
    const [changed] = jsonLines((await dsync(['push', f], { env })).stdout);
    assert.equal(changed.unchanged, undefined);
    assert.equal(changed.version, 2);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the progress line shows no rate and no time left until a rate is measured', async () => {
  assert.equal(rateAndLeft(0, 20_000_000, 0), '');
  assert.equal(rateAndLeft(1_000_000, 20_000_000, 0.01), '', 'too early to tell');
  assert.equal(rateAndLeft(2_000_000, 20_000_000, 1), ' · 2 MB/s · 9 s left');
  assert.equal(rateAndLeft(1_000_000, 200_000_000, 1), ' · 1 MB/s · 3 min 19 s left');
  const s = await testServer();
  const dir = tmp();
  try {
    const f = path.join(dir, 'big.bin');
    writeFileSync(f, fastRandomBytes(6, PROGRESS_MIN + 2_000_000));
    const r = await dsyncOnTerminal(['push', f, '--server', s.url], { env: { DSYNC_CACHE_DIR: path.join(dir, 'known') } });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /big\.bin .*\d+% /, 'a bar was drawn');
    assert.doesNotMatch(r.out, /\b0 B\/s|\b0s left/);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('ls sorts names naturally and shows the latest version number beside the count; log says what a restore came from', async () => {
  const s = await testServer();
  const dir = tmp();
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known'), DSYNC_SERVER: s.url };
  const run = (...args: string[]) => dsync(args, { env });
  try {
    for (const n of ['f100', 'f2', 'f10', 'f1']) writeFileSync(path.join(dir, n), n);
    assert.equal((await run('push', ...['f100', 'f2', 'f10', 'f1'].map((n) => path.join(dir, n)))).code, 0);
    assert.deepEqual(jsonLines((await run('ls')).stdout).map((e) => e.name), ['f1', 'f2', 'f10', 'f100']);
    const table = screen((await dsyncOnTerminal(['ls'], { env })).out);
    assert.deepEqual(table.split('\n').filter((l) => /^f\d/.test(l)).map((l) => l.split(' ')[0]), ['f1', 'f2', 'f10', 'f100']);

    // a name used before keeps counting: a file moved onto it continues its numbers
    writeFileSync(path.join(dir, 'old'), 'o1');
    assert.equal((await run('push', path.join(dir, 'old'))).code, 0);
    writeFileSync(path.join(dir, 'old'), 'o2');
    assert.equal((await run('push', path.join(dir, 'old'))).code, 0);
    assert.equal((await run('rm', 'old')).code, 0);
    assert.equal((await run('mv', 'f1', 'old')).code, 0);
    assert.match(screen((await dsyncOnTerminal(['ls'], { env })).out), /^old +2 B +v3 +1 /m);

    // restore: the log names the version it came from
    writeFileSync(path.join(dir, 'n'), 'one');
    await run('push', path.join(dir, 'n'));
    writeFileSync(path.join(dir, 'n'), 'two');
    await run('push', path.join(dir, 'n'));
    assert.equal((await run('restore', 'n', '--version', '1')).code, 0);
    assert.deepEqual(jsonLines((await run('log', 'n')).stdout).map((v) => [v.version, v.restoredFrom]), [[3, 1], [2, undefined], [1, undefined]]);
    assert.match(screen((await dsyncOnTerminal(['log', 'n'], { env })).out), /^ +v3 .*restored from v1$/m);
    // a move renumbers it with the versions it moves
    assert.equal((await run('rm', 'old')).code, 0);
    assert.equal((await run('mv', 'n', 'old')).code, 0);
    assert.deepEqual(jsonLines((await run('log', 'old')).stdout).map((v) => [v.version, v.restoredFrom]), [[6, 4], [5, undefined], [4, undefined]]);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
