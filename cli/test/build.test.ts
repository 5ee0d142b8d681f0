// The compiled CLI (scripts/build-cli.mjs, cli/dist): the tests run it, it needs no TypeScript
// compiler, and bin/dsync.mjs runs it only while it is current: in a copy of the repository's
// sources, a checkout without a build runs from the sources with a note, a build makes the
// compiled one run (with tsx gone from node_modules), a changed source falls back to the sources
// until `build-cli.mjs --if-stale` (setup's step) builds again, and a second one does nothing.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { compiledCli } from '../../scripts/build-cli.mjs';
import { dsync, root } from './run.ts';

const NOTE = /^dsync: running from the TypeScript sources, slower to start: (.*) \(node scripts\/build-cli\.mjs builds it\)$/m;

test('the tests run the compiled CLI: current, and dsync says nothing of the sources', async () => {
  assert.ok(compiledCli(root).entry, 'run.ts built cli/dist');
  const r = await dsync(['--version']);
  assert.deepEqual([r.code, r.stderr], [0, '']);
  assert.match(r.stdout, /^dsync \d+\.\d+\.\d+\n$/);
});

test('bin/dsync.mjs runs cli/dist while it is current and the sources otherwise; --if-stale builds only a stale one', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-build-'));
  try {
    for (const d of ['bin', 'cli', 'shared/src', 'server/src', 'scripts'])
      cpSync(path.join(root, d), path.join(dir, d), { recursive: true, filter: (src) => !/\/cli\/dist[^/]*$/.test(src) });
    cpSync(path.join(root, 'package.json'), path.join(dir, 'package.json'));
    mkdirSync(path.join(dir, 'wasm'));
    symlinkSync(path.join(root, 'wasm/pkg'), path.join(dir, 'wasm/pkg'));
    const allModules = () => symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
    allModules();
    const run = (file: string, args: string[]) =>
      promisify(execFile)(process.execPath, [path.join(dir, file), ...args], { encoding: 'utf8', env: { ...process.env, DSYNC_FROM_SOURCES: '' } });
    const version = (await run('bin/dsync.mjs', ['--version'])).stdout;
    assert.match(version, /^dsync \d/);

    // a checkout without a build
    let r = await run('bin/dsync.mjs', ['--version']);
    assert.equal(r.stdout, version);
    assert.equal(NOTE.exec(r.stderr)?.[1], 'cli/dist is missing');

    // setup's step builds it; a second run finds it current and does nothing
    r = await run('scripts/build-cli.mjs', ['--if-stale']);
    assert.match(r.stderr, /^\[build-cli\] cli\/dist from \d+ files in \d+ ms \(cli\/dist is missing\)\n$/);
    assert.ok(compiledCli(dir).entry);
    r = await run('scripts/build-cli.mjs', ['--if-stale']);
    assert.equal(r.stderr, '');

    // the compiled CLI with no TypeScript compiler in node_modules: the version, the help, and
    // the wasm module (`dsync chunk`) from cli/dist
    unlinkSync(path.join(dir, 'node_modules'));
    mkdirSync(path.join(dir, 'node_modules'));
    for (const m of readdirSync(path.join(root, 'node_modules'))) if (m !== 'tsx' && m !== '.bin') symlinkSync(path.join(root, 'node_modules', m), path.join(dir, 'node_modules', m));
    r = await run('bin/dsync.mjs', ['--version']);
    assert.deepEqual([r.stdout, r.stderr], [version, '']);
    r = await run('bin/dsync.mjs', ['help', 'sync']);
    assert.match(r.stdout, /^usage: dsync sync /);
    assert.equal(r.stderr, '');
    const file = path.join(dir, 'data.bin');
    writeFileSync(file, randomBytes(300_000));
    r = await run('bin/dsync.mjs', ['chunk', file]);
    assert.equal(r.stdout, (await dsync(['chunk', file])).stdout);
    assert.match(r.stdout, /^0 \d+ [0-9a-f]{8}\n/);
    assert.equal(r.stderr, '');

    // a source changed since the build: the sources run (tsx back in node_modules), with a note
    rmSync(path.join(dir, 'node_modules'), { recursive: true });
    allModules();
    const earlier = new Date(Date.now() - 60_000);
    utimesSync(path.join(dir, 'cli/command.ts'), earlier, earlier);
    assert.equal(compiledCli(dir).stale, 'cli/command.ts changed since it was built');
    r = await run('bin/dsync.mjs', ['--version']);
    assert.equal(r.stdout, version);
    assert.equal(NOTE.exec(r.stderr)?.[1], 'cli/command.ts changed since it was built');

    // --if-stale builds it again, and the compiled CLI runs
    r = await run('scripts/build-cli.mjs', ['--if-stale']);
    assert.match(r.stderr, /\(cli\/command\.ts changed since it was built\)\n$/);
    r = await run('bin/dsync.mjs', ['--version']);
    assert.deepEqual([r.stdout, r.stderr], [version, '']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
