// Faults the server meets on its own machine, with a real server process: a full disk (a data
// directory on a tmpfs of a few MiB, mounted in a mount namespace of the server's own).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { RemoteError } from '../../shared/src/conn.ts';
import { ErrorCode } from '../../shared/src/protocol.ts';
import { fastRandomBytes } from '../../shared/src/testdata.ts';
import { onLogLines } from './child.ts';
import { pushBytes } from './helpers.ts';

const root = new URL('../..', import.meta.url).pathname;

export interface OwnServer {
  child: ChildProcess;
  url: string;
  wsUrl: string;
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

/** A server process (serve-child.ts) with `flags`; with `tmpfsBytes`, its data directory is a
 *  tmpfs of that size, mounted in a user and mount namespace of its own (`unshare -rm`: no
 *  root needed where user namespaces are allowed). */
export async function ownServer(flags: string[], tmpfsBytes?: number): Promise<OwnServer> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-own-'));
  const node = [process.execPath, '--import', 'tsx', path.join(root, 'server/test/serve-child.ts'), '--port', '0', '--host', '127.0.0.1', '--data', data, ...flags];
  const child = tmpfsBytes
    ? spawn('unshare', ['-rm', 'sh', '-c', `mount -t tmpfs -o size=${tmpfsBytes} tmpfs "$0" && exec "$@"`, data, ...node], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(node[0], node.slice(1), { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  const logs: Record<string, unknown>[] = [];
  const url = await new Promise<string>((resolve, reject) => {
    onLogLines(child, (e) => (e.url ? resolve(e.url as string) : logs.push(e)));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  return {
    child,
    url,
    wsUrl: url.replace('http', 'ws') + '/sync',
    logs,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
      rmSync(data, { recursive: true, force: true });
    },
  };
}

test('a full disk: the push gets a clear Error within a second of the failure, even while the server is not reading its socket, and is not retried', async () => {
  // 12 MiB of disk; the server pauses its socket once 1 MiB waits to be processed
  const s = await ownServer(['--max-in-flight', String(1 << 20)], 12 << 20);
  try {
    const small = fastRandomBytes(1, 1_000_000);
    assert.equal((await pushBytes(s, 'kept.bin', small)).version, 1);
    const phases: string[] = [];
    const t0 = Date.now();
    const err = await pushBytes(s, 'big.bin', fastRandomBytes(2, 48 << 20), { retries: 3, onProgress: (p) => phases.push(p) }).then(
      () => assert.fail('the push succeeded on a full disk'),
      (e: Error) => e,
    );
    const failedAt = Date.now();
    assert.ok(err instanceof RemoteError, `${err}`);
    assert.equal(err.code, ErrorCode.Internal);
    assert.match(err.message, /disk is full/);
    assert.ok(!phases.includes('retrying'), 'a full disk is not retried');
    const logged = s.logs.find((e) => e.op === 'push' && e.error === ErrorCode.Internal);
    assert.ok(logged, JSON.stringify(s.logs));
    assert.match(String(logged.message), /ENOSPC|no space/i);
    const lag = failedAt - (logged.t as number);
    assert.ok(lag < 1000, `the client knew ${lag} ms after the server failed (push took ${failedAt - t0} ms)`);
    // the server still serves, and what it stored is intact
    const res = await fetch(`${s.url}/api/download?name=kept.bin`);
    assert.equal(res.status, 200);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(small));
  } finally {
    await s.stop();
  }
});
