// SIGKILL of the server process in the middle of Phase 3 leaves the previous version intact and
// readable, start-up removes the partial upload, and the next push succeeds.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Rng, applyEdits, fastRandomBytes } from '../../shared/src/testdata.ts';
import { pushBytes } from './helpers.ts';

const root = new URL('../..', import.meta.url).pathname;

async function startChild(data: string): Promise<{ child: ChildProcess; url: string; wsUrl: string }> {
  const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'serve', '--port', '0', '--host', '127.0.0.1', '--data', data], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
  });
  child.stdout!.resume();
  return { child, url, wsUrl: url.replace('http', 'ws') + '/sync' };
}

async function download(url: string, name: string, version?: number): Promise<Buffer> {
  const res = await fetch(`${url}/api/download?name=${encodeURIComponent(name)}${version ? `&version=${version}` : ''}`);
  assert.equal(res.status, 200);
  return Buffer.from(await res.arrayBuffer());
}

test('SIGKILL mid-Phase 3 keeps the previous version and the next push works', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-crash-'));
  try {
    const v1 = fastRandomBytes(1, 24 << 20);
    const v2 = applyEdits(v1, new Rng(3), { kind: 'inverse', total: 12 << 20, maxFragment: 64 << 10 });
    let s = await startChild(data);
    await pushBytes(s, 'big.bin', v1);
    for (const delayMs of [0, 30, 120]) {
      const child = s.child;
      let killedInPhase3 = false;
      const attempt = pushBytes(s, 'big.bin', v2, {
        onProgress: (phase) => {
          if (phase === 'tokens-received') {
            setTimeout(() => {
              killedInPhase3 = true;
              child.kill('SIGKILL');
            }, delayMs);
          }
        },
      });
      await assert.rejects(attempt, /closed|connection|ECONNRESET|socket/i);
      assert.ok(killedInPhase3, 'the kill happened after Match Tokens arrived');
      if (child.exitCode === null && child.signalCode === null) await new Promise((r) => child.once('exit', r));
      // A restart removes what the killed upload left and serves version 1 unchanged.
      s = await startChild(data);
      assert.deepEqual(readdirSync(path.join(data, 'ns/local/tmp')), []);
      const versions = (await (await fetch(`${s.url}/api/versions?name=big.bin`)).json()) as { version: number }[];
      assert.deepEqual(versions.map((v) => v.version), [1]);
      assert.ok(!existsSync(path.join(data, 'ns/local/files/big%2Ebin/v2.dat')));
      assert.deepEqual(await download(s.url, 'big.bin'), Buffer.from(v1));
    }
    const rep = await pushBytes(s, 'big.bin', v2);
    assert.equal(rep.version, 2);
    assert.deepEqual(await download(s.url, 'big.bin', 2), Buffer.from(v2));
    assert.deepEqual(await download(s.url, 'big.bin', 1), Buffer.from(v1));
    s.child.kill('SIGKILL');
  } finally {
    rmSync(data, { recursive: true, force: true });
  }
});
