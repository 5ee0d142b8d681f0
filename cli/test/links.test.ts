// Links are never followed and what cannot be vouched for is held (docs/sync.md "What is
// synced", "Containment"), with the real CLI on two devices against a real server: a folder
// moved to another disk and replaced by a link deletes nothing anywhere; a `cfg -> ../.config`
// link gets nothing written into its target; `dsync push DIR` does not upload what a link in it
// points to; a mount point where a synced folder was deletes nothing; a name of 255 bytes
// downloads (its temporary name does not grow with it).
import assert from 'node:assert/strict';
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { DSYNC, dsync, jsonLines, run } from './run.ts';
import { treeOf } from './sync-world.ts';

function devices(url: string, n = 2) {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-links-'));
  const devs = Array.from({ length: n }, (_, i) => {
    const dir = path.join(root, `dev${i}`, 'proj');
    mkdirSync(dir, { recursive: true });
    const env = { DSYNC_CACHE_DIR: path.join(root, `dev${i}`, 'cache'), DSYNC_SERVER: url, XDG_CONFIG_HOME: path.join(root, `dev${i}`, 'config') };
    return {
      dir,
      home: path.join(root, `dev${i}`),
      env,
      sync: () => dsync(['sync', dir, '--device', `dev${i}`, '--json'], { env }),
      write(p: string, body: string) {
        mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
        writeFileSync(path.join(dir, p), body);
      },
    };
  });
  return { devs, root, done: () => rmSync(root, { recursive: true, force: true }) };
}

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return jsonLines(r.stdout);
};

/** The server's files under proj/ (name → latest version), through the CLI. */
async function serverFiles(url: string): Promise<string[]> {
  const r = await dsync(['ls', '-R', 'proj', '--server', url, '--json']);
  assert.equal(r.code, 0, r.stderr);
  return jsonLines(r.stdout)
    .flatMap((x) => (Array.isArray(x) ? x : Array.isArray(x.files) ? x.files : [x]))
    .map((f: any) => f.name)
    .filter((n: unknown) => typeof n === 'string' && !n.endsWith('/'))
    .sort();
}

test('a folder moved to another disk and replaced by a link to it deletes nothing on the server or the other device', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    const names = Array.from({ length: 6 }, (_, i) => `photos/p${i}.jpg`);
    for (const n of names) a.write(n, `photo ${n}`);
    a.write('notes.txt', 'notes');
    ok(await a.sync());
    ok(await b.sync());
    assert.deepEqual([...treeOf(b.dir).keys()].sort(), ['notes.txt', ...names]);
    const before = await serverFiles(s.url);
    // the disk filled: photos/ moves to another disk and a link takes its place
    const moved = path.join(a.home, 'other-disk', 'photos');
    mkdirSync(path.dirname(moved), { recursive: true });
    cpSync(path.join(a.dir, 'photos'), moved, { recursive: true });
    rmSync(path.join(a.dir, 'photos'), { recursive: true });
    symlinkSync(moved, path.join(a.dir, 'photos'));
    const r = await a.sync();
    const lines = jsonLines(r.stdout);
    assert.deepEqual(lines.filter((l) => l.op), [], 'nothing done: ' + r.stdout + r.stderr);
    assert.ok(lines.some((l) => l.skipped === 'photos/' && l.reason === 'a symbolic link: not followed'), r.stdout);
    assert.deepEqual(await serverFiles(s.url), before, 'nothing deleted on the server');
    await b.sync();
    assert.deepEqual([...treeOf(b.dir).keys()].sort(), ['notes.txt', ...names], 'nothing deleted on the other device');
    // the moved files are untouched, and the link is still a link
    assert.deepEqual(readdirSync(moved).sort(), names.map((n) => n.slice('photos/'.length)).sort());
    assert.ok(lstatSync(path.join(a.dir, 'photos')).isSymbolicLink());
  } finally {
    done();
    await s.stop();
  }
});

test('a cfg -> ../.config link gets nothing written into its target, and the other device keeps its cfg/', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    b.write('cfg/settings.ini', 'b settings');
    b.write('cfg/deep/more.ini', 'more');
    ok(await b.sync());
    // device a: cfg is a link to its own ~/.config
    const config = path.join(a.home, '.config');
    mkdirSync(config, { recursive: true });
    writeFileSync(path.join(config, 'app.conf'), 'a config');
    symlinkSync('../.config', path.join(a.dir, 'cfg'));
    const r = await a.sync();
    assert.equal(r.code, 1, 'a held link is reported: ' + r.stdout + r.stderr);
    assert.ok(jsonLines(r.stdout).some((l) => l.skipped === 'cfg/' && /symbolic link/.test(l.reason)), r.stdout);
    assert.deepEqual(readdirSync(config), ['app.conf'], 'nothing written through the link');
    assert.ok(!existsSync(path.join(a.home, 'settings.ini')));
    assert.deepEqual(await serverFiles(s.url), ['proj/cfg/deep/more.ini', 'proj/cfg/settings.ini'], 'nothing deleted or uploaded through it');
    ok(await b.sync());
    assert.equal(readFileSync(path.join(b.dir, 'cfg/settings.ini'), 'utf8'), 'b settings');
    assert.equal(readFileSync(path.join(b.dir, 'cfg/deep/more.ini'), 'utf8'), 'more');
  } finally {
    done();
    await s.stop();
  }
});

test('push DIR skips a link to a secret (and a linked folder) with a note, and pushes the rest', { timeout: 120_000 }, async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-links-push-'));
  try {
    const dir = path.join(root, 'proj');
    mkdirSync(path.join(dir, 'sub'), { recursive: true });
    writeFileSync(path.join(dir, 'a.txt'), 'a');
    writeFileSync(path.join(dir, 'sub', 'b.txt'), 'b');
    mkdirSync(path.join(root, '.ssh'));
    writeFileSync(path.join(root, '.ssh', 'id_ed25519'), 'PRIVATE KEY');
    symlinkSync('../.ssh/id_ed25519', path.join(dir, 'key'));
    symlinkSync('../.ssh', path.join(dir, 'ssh'));
    const r = await dsync(['push', 'proj', '--server', s.url], { cwd: root, env: { DSYNC_CACHE_DIR: path.join(root, 'cache') } });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stderr, /skipped proj\/key: a symbolic link: not followed/);
    assert.match(r.stderr, /skipped proj\/ssh: a symbolic link: not followed/);
    assert.deepEqual(await serverFiles(s.url), ['proj/a.txt', 'proj/sub/b.txt']);
  } finally {
    rmSync(root, { recursive: true, force: true });
    await s.stop();
  }
});

test('a name of 255 bytes downloads: the temporary name does not grow with it', { timeout: 120_000 }, async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    const long = 'é'.repeat(125) + 'x.txt'; // 250 + 5 = 255 bytes
    assert.equal(Buffer.byteLength(long), 255);
    a.write(`deep/${long}`, 'long name');
    ok(await a.sync());
    const r = ok(await b.sync());
    assert.ok(r.some((l) => l.op === 'download' && l.path === `deep/${long}`), JSON.stringify(r));
    assert.equal(readFileSync(path.join(b.dir, 'deep', long), 'utf8'), 'long name');
    assert.deepEqual(readdirSync(path.join(b.dir, 'deep')), [long], 'no temporary file left');
  } finally {
    done();
    await s.stop();
  }
});

test('a mount point where a synced folder was is held: nothing under it is deleted on the server', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const { devs: [a], done } = devices(s.url, 1);
  try {
    for (let i = 0; i < 4; i++) a.write(`disk/f${i}.txt`, `file ${i}`);
    a.write('top.txt', 'top');
    ok(await a.sync());
    // an empty disk mounted over disk/ (tmpfs, in a mount namespace of the sync's own, so
    // nothing stays mounted): what the server has there must not read as deleted
    const argv = [process.execPath, DSYNC, 'sync', a.dir, '--device', 'dev0', '--json'];
    // (not spawnSync: the server runs in this process)
    const r = await run('unshare', ['-rm', 'sh', '-c', `mount -t tmpfs tmpfs "$0" && exec "$@"`, path.join(a.dir, 'disk'), ...argv], { env: a.env });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const lines = jsonLines(r.stdout);
    assert.ok(lines.some((l) => l.skipped === 'disk/' && /mount point/.test(l.reason)), r.stdout + r.stderr);
    assert.deepEqual(lines.filter((l) => l.op), [], 'nothing done');
    assert.deepEqual(await serverFiles(s.url), ['proj/disk/f0.txt', 'proj/disk/f1.txt', 'proj/disk/f2.txt', 'proj/disk/f3.txt', 'proj/top.txt']);
  } finally {
    done();
    await s.stop();
  }
});
