// `dsync push` keeps the bytes of the version it pushed (cli/known.ts, a kept basis) under its
// cache directory, up to --keep-max bytes in all, least recently used dropped first; an edit
// then goes up as byte-exact copies of them; kept bytes damaged on disk are dropped, never
// used, and the push still stores the exact file. Real server on loopback, real files.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { Rng, applyEdits, textBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';

// the compiled CLI, built by run.ts when a source changed
import { root } from './run.ts';

test('dsync push keeps the pushed bytes, sends an edit as copies of them, drops damaged ones, and keeps within --keep-max', async () => {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-kept-'));
  const cache = path.join(dir, 'known');
  const env = { ...process.env, DSYNC_CACHE_DIR: cache };
  const push = async (file: string, ...flags: string[]) => JSON.parse((await promisify(execFile)(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'push', path.join(dir, file), '--server', s.wsUrl, ...flags], { encoding: 'utf8', env })).stdout);
  const kept = () => readdirSync(cache).filter((f) => f.endsWith('.kept')).map((f) => readFileSync(path.join(cache, f)));
  try {
    const r = new Rng(1);
    let a = textBytes(1, 500_000);
    writeFileSync(path.join(dir, 'a.txt'), a);
    await push('a.txt');
    assert.deepEqual(kept(), [Buffer.from(a)], 'the pushed bytes are kept');
    // an edit of 2 KB in fragments of up to 256 bytes: its own bytes go, the rest is copied
    a = applyEdits(a, r, { kind: 'inverse', total: 2048, maxFragment: 256 });
    writeFileSync(path.join(dir, 'a.txt'), a);
    let rep = await push('a.txt');
    assert.equal(rep.knownVersion, 1);
    assert.ok(rep.literalBytes <= 2048, `${rep.literalBytes} literal bytes`);
    assert.deepEqual(await s.stored('a.txt'), Buffer.from(a));
    assert.deepEqual(kept(), [Buffer.from(a)], 'the new version is kept instead');
    // kept bytes damaged on disk (their hash no longer matches): dropped, the push goes against
    // the version's finer cut, exact; the new version is kept
    const f = readdirSync(cache).find((n) => n.endsWith('.kept'))!;
    writeFileSync(path.join(cache, f), applyEdits(a, r, { kind: 'inverse', total: 100, maxFragment: 10 }));
    a = applyEdits(a, r, { kind: 'insert', total: 2048, maxFragment: 256 });
    writeFileSync(path.join(dir, 'a.txt'), a);
    rep = await push('a.txt');
    assert.equal(rep.knownVersion, 2);
    assert.ok(rep.literalBytes > 2048, 'refined against the finer cut, not the damaged bytes');
    assert.deepEqual(await s.stored('a.txt'), Buffer.from(a));
    assert.deepEqual(kept(), [Buffer.from(a)]);
    // --keep-max: a second file that does not fit beside the first drops the least recently
    // used; one larger than the cap is not kept; 0 keeps none
    writeFileSync(path.join(dir, 'b.txt'), textBytes(2, 400_000));
    await push('b.txt', '--keep-max', '900000');
    assert.deepEqual(kept(), [readFileSync(path.join(dir, 'b.txt'))]);
    writeFileSync(path.join(dir, 'c.txt'), textBytes(3, 300_000));
    await push('c.txt', '--keep-max', '200000');
    assert.equal(kept().length, 1, 'c.txt is above the cap: not kept');
    await push('b.txt', '--keep-max', '0');
    assert.equal(kept().length, 0);
    await assert.rejects(push('a.txt', '--keep-max', 'lots'), /keep-max must be a whole number/);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
