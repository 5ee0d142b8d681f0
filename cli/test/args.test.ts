// The command line itself, as a process: strict flags (an unknown or misspelt one is exit
// status 2 with a hint, never ignored), serve's flags derived from the config's DEFAULTS,
// every command's --help, and the exit statuses.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { DEFAULTS, kebab } from '../../server/src/config.ts';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';

const COMMANDS = ['push', 'pull', 'ls', 'log', 'mv', 'rm', 'restore', 'serve', 'adduser', 'gc', 'check', 'chunk'];

test('a misspelt flag is exit status 2 with the nearest flag as a hint, and nothing runs', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-args-'));
  try {
    const r = await dsync(['serve', '--max-file-szie', '1000', '--port', '0', '--data', dir]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown option --max-file-szie \(did you mean --max-file-size\?\)/);
    assert.equal(r.stdout, '', 'no server started');
    const p = await dsync(['push', path.join(dir, 'x'), '--nmae', 'y', '--server', '127.0.0.1:1']);
    assert.equal(p.code, 2);
    assert.match(p.stderr, /unknown option --nmae \(did you mean --name\?\)/);
    assert.match(p.stderr, /usage: dsync push/);
    // a flag of another command is unknown here too
    assert.equal((await dsync(['ls', '--force', '--server', '127.0.0.1:1'])).code, 2);
    // a value that is not a number, a flag without its value, a switch given a value
    assert.match((await dsync(['serve', '--max-file-size', 'lots'])).stderr, /--max-file-size must be a non-negative number/);
    assert.match((await dsync(['serve', '--gc-window-ms', '300001'])).stderr, /--gc-window-ms must be a whole number of milliseconds from 0 to 300000/);
    assert.match((await dsync(['serve', '--gc-min-age-ms', '0.5'])).stderr, /--gc-min-age-ms must be a whole number/);
    // a PUT held in the network may land 15 minutes late on S3: shorter ages cannot be made safe
    for (const cmd of [['serve', '--store', 's3://b', '--gc-min-age-ms', '60000'], ['gc', '--store', 's3://b/p', '--min-age-ms', '0']]) assert.match((await dsync(cmd)).stderr, /--gc-min-age-ms must be at least 1200000 on an s3:\/\/ store/, cmd.join(' '));
    assert.match((await dsync(['serve', '--gc-interval-ms', '3e9'])).stderr, /--gc-interval-ms must be a whole number of milliseconds from 0 to 2147483647/);
    assert.match((await dsync(['serve', '--head-timeout-ms', '300001'])).stderr, /--head-timeout-ms must be a whole number of milliseconds from 0 to 300000/);
    assert.match((await dsync(['serve', '--head-timeout-ms', '0'])).stderr, /--head-timeout-ms must be at least 1/);
    assert.match((await dsync(['push', 'f', '--server'])).stderr, /--server needs a value/);
    assert.match((await dsync(['push', 'f', '--json=yes', '--server', 'x:1'])).stderr, /--json is a switch/);
    assert.equal((await dsync(['pull', 'a', 'b', '--out', 'x', '--server', 'x:1'])).code, 2, 'one NAME only');
    assert.equal((await dsync(['serve', '--data', dir, '--store', dir])).code, 2, '--data and --store name one setting');
    const both = await dsync(['check', '--data', dir, '--store', dir]);
    assert.equal(both.code, 2, 'check: --data and --store name one setting');
    assert.match(both.stderr, /--data and --store name the same setting/);
    assert.equal((await dsync(['serve', '--deflate', '--no-deflate'])).code, 2);
    assert.equal((await dsync(['serve', '--log-format', 'xml', '--port', '0', '--data', dir])).code, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('unknown commands, no command, and the overview', async () => {
  const none = await dsync([]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /usage: dsync COMMAND/);
  const typo = await dsync(['pusj']);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /no command pusj \(did you mean push\?\)/);
  const help = await dsync(['--help']);
  assert.equal(help.code, 0);
  for (const c of COMMANDS) assert.match(help.stdout, new RegExp(`^  ${c} `, 'm'), c);
  assert.equal((await dsync(['help', 'nope'])).code, 2);
  assert.match((await dsync(['--version'])).stdout, /^dsync \d+\.\d+\.\d+\n$/);
});

test('every command has a full --help, the same as dsync help CMD, listing each of its flags', async () => {
  for (const c of COMMANDS) {
    const a = await dsync([c, '--help']);
    const b = await dsync(['help', c]);
    assert.equal(a.code, 0, c);
    assert.equal(a.stdout, b.stdout, c);
    assert.match(a.stdout, new RegExp(`^usage: dsync ${c}`), c);
    assert.match(a.stdout, /-h, --help/);
  }
  const push = (await dsync(['push', '--help'])).stdout;
  for (const f of ['--server', '--token', '--name', '--basis-version', '--algo', '--retries', '--no-known', '--json']) assert.ok(push.includes(f), f);
  assert.match(push, /Exit status: 0 all pushed, 1 any file failed, 2 a wrong command line/);
  // serve: one flag per setting of the config, so a new setting is a flag at once
  const serve = (await dsync(['serve', '--help'])).stdout;
  for (const [k, v] of Object.entries(DEFAULTS)) {
    assert.ok(serve.includes(`--${kebab(k)}`), k);
    if (typeof v === 'boolean') assert.ok(serve.includes(`--no-${kebab(k)}`), `--no-${kebab(k)}`);
  }
});

test('serve --max-file-size is enforced (a setting given as a flag reaches the server), and push reports the refusal with status 1', async () => {
  const s = await testServer({ 'max-file-size': '1000' });
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-args-'));
  try {
    writeFileSync(path.join(dir, 'small.txt'), 'x'.repeat(1000));
    writeFileSync(path.join(dir, 'big.txt'), 'x'.repeat(1001));
    const r = await dsync(['push', path.join(dir, 'big.txt'), path.join(dir, 'small.txt'), '--server', s.wsUrl, '--no-known']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /big\.txt: .*exceeds the limit of 1000/);
    assert.deepEqual(jsonLines(r.stdout).map((x) => x.name), ['small.txt'], 'the rest still went');
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
