// Health that means it (issue 44): /api/health answers 503 with a reason while the store cannot
// write, not only while it cannot read: its write probe (one small head of the server's own,
// within --health-write-timeout-ms, reused for HEALTH_WRITE_CACHE_MS). A MinIO whose writes hang
// while its reads answer (a proxy holding every PUT), a frozen MinIO (SIGSTOP), and a local
// store on a full disk (a tiny tmpfs filled up).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type IncomingMessage, type ServerResponse, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { HEALTH_CACHE_MS, HEALTH_WRITE_CACHE_MS, loadConfig } from '../src/config.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';

const TIMEOUT_MS = 1_000;

let minio: S3Server;
/** PUTs wait while this is set (a write path that hangs; reads pass) */
let holding: Promise<void> | null = null;
let release = () => {};
const proxy = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    if (req.method === 'PUT' && holding) await holding;
    const target = new URL(minio.endpoint);
    const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode!, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    up.end(Buffer.concat(chunks));
  });
});

before(async () => {
  minio = await startMinio();
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  Object.assign(process.env, minio.env);
});
after(async () => {
  release();
  minio?.process.kill('SIGCONT');
  proxy.closeAllConnections();
  await new Promise((r) => proxy.close(r));
  await minio?.stop();
});

async function health(s: RunningServer): Promise<{ status: number; error?: string }> {
  const res = await fetch(`${s.url}/api/health`);
  return { status: res.status, error: ((await res.json()) as { error?: string }).error };
}

/** Polls health until it answers `status` (generous bound: a loaded machine). */
async function healthBecomes(s: RunningServer, status: number): Promise<{ status: number; error?: string }> {
  const end = Date.now() + HEALTH_CACHE_MS + HEALTH_WRITE_CACHE_MS + 4 * TIMEOUT_MS + 30_000;
  for (;;) {
    const h = await health(s);
    if (h.status === status) return h;
    assert.ok(Date.now() < end, `health still answers ${h.status} (${h.error ?? 'ok'})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const settings = (store: string, extra: Record<string, string> = {}) =>
  loadConfig({ port: '0', host: '127.0.0.1', store, 'health-timeout-ms': String(TIMEOUT_MS), 'health-write-timeout-ms': String(TIMEOUT_MS), 'store-timeout-ms': '5000', ...extra }, {});

test('a store whose writes hang while its reads answer: health answers 503 with the reason, and 200 again once writes go through', { timeout: 180_000 }, async () => {
  const endpoint = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  const s = await startServer(settings('s3://healthw/store', { 's3-endpoint': endpoint }));
  try {
    assert.equal((await healthBecomes(s, 200)).status, 200);
    holding = new Promise((r) => (release = r));
    try {
      // reads still answer: the listing works
      assert.equal((await fetch(`${s.url}/api/files`)).status, 200);
      const h = await healthBecomes(s, 503);
      assert.equal(h.error, `the store did not finish a write within ${TIMEOUT_MS} ms`);
    } finally {
      holding = null;
      release();
    }
    await healthBecomes(s, 200);
  } finally {
    await s.close();
  }
});

test('a frozen MinIO (SIGSTOP): health answers 503, and 200 once it runs again', { timeout: 180_000 }, async () => {
  const s = await startServer(settings('s3://healthf/store', { 's3-endpoint': minio.endpoint }));
  try {
    await healthBecomes(s, 200);
    minio.process.kill('SIGSTOP');
    try {
      const h = await healthBecomes(s, 503);
      assert.match(h.error!, /^the store did not (answer|finish a write) within 1000 ms$/);
    } finally {
      minio.process.kill('SIGCONT');
    }
    await healthBecomes(s, 200);
  } finally {
    await s.close();
  }
});

/** A directory on a tmpfs of `kb` KiB (unmounted by the returned function), or null where this
 *  process may not mount one. */
function tinyDisk(kb: number): { dir: string; done(): void } | null {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-tiny-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${kb}k`, 'tmpfs', dir], { stdio: 'ignore' });
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return null;
  }
  return {
    dir,
    done() {
      execFileSync('umount', [dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('a local store that cannot be written (a full disk, or the probe\'s folder replaced by a file): health answers 503, and 200 once it can', { timeout: 180_000 }, async () => {
  const disk = tinyDisk(512);
  // without the right to mount (tests here run as root, whom permissions do not stop), the
  // folder the probe writes into is replaced by a file: its writes fail as a full disk's do
  const dir = disk?.dir ?? mkdtempSync(path.join(tmpdir(), 'dsync-unwritable-'));
  const store = path.join(dir, 'store');
  mkdirSync(store);
  const s = await startServer(settings(store));
  const filler = path.join(dir, 'filler');
  try {
    await healthBecomes(s, 200);
    if (disk) {
      // fill the disk to its last byte
      try {
        for (let i = 0; ; i++) writeFileSync(`${filler}${i}`, Buffer.alloc(64 << 10));
      } catch (e) {
        assert.equal((e as NodeJS.ErrnoException).code, 'ENOSPC');
      }
    } else {
      rmSync(path.join(store, 'health'), { recursive: true, force: true });
      writeFileSync(path.join(store, 'health'), 'not a folder');
    }
    assert.equal((await fetch(`${s.url}/api/files`)).status, 200, 'reads still answer');
    const h = await healthBecomes(s, 503);
    assert.equal(h.error, 'the store cannot write');
    if (disk) for (let i = 0; ; i++) {
      try {
        rmSync(`${filler}${i}`);
      } catch {
        break;
      }
    }
    else rmSync(path.join(store, 'health'));
    await healthBecomes(s, 200);
  } finally {
    await s.close();
    if (disk) disk.done();
    else rmSync(dir, { recursive: true, force: true });
  }
});
