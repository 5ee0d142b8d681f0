// docker-compose.yml's three programs without Docker: MinIO, two `dsync serve` on one bucket,
// and HAProxy (Debian's) in front with deploy/haproxy.cfg, all on loopback ports.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { s3Backend } from '../src/store/s3.ts';
import { type Child, startServe } from '../../harness/child.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { freePort, type S3Server, startMinio } from '../../harness/minio.ts';

const root = new URL('../..', import.meta.url).pathname;
const BUCKET = 'dsync';

interface Server extends Child {
  logs: Record<string, unknown>[];
  /** the server's working directory: a store given as s3:// leaves nothing here */
  cwd: string;
  stop(): Promise<void>;
}

async function startServer(minio: S3Server): Promise<Server> {
  const cwd = mkdtempSync(path.join(tmpdir(), 'dsync-scaleout-'));
  const logs: Record<string, unknown>[] = [];
  const s = await startServe(['--store', `s3://${BUCKET}`, '--s3-endpoint', minio.endpoint], {
    cwd,
    env: { ...process.env, ...minio.env },
    onLog: (e) => logs.push(e),
  });
  return {
    ...s,
    logs,
    cwd,
    async stop() {
      await s.kill();
      rmSync(cwd, { recursive: true, force: true });
    },
  };
}

/** HAProxy with deploy/haproxy.cfg, its listener and servers moved to loopback ports. */
async function startHaproxy(servers: Server[]): Promise<{ wsUrl: string; stop(): Promise<void> }> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-haproxy-'));
  let cfg = readFileSync(path.join(root, 'deploy/haproxy.cfg'), 'utf8').replace(/^(\s*bind) :8080$/m, `$1 127.0.0.1:${port}`);
  servers.forEach((s, i) => {
    const at = new URL(s.wsUrl).host;
    cfg = cfg.replace(new RegExp(`^(\\s*server dsync${i + 1}) dsync${i + 1}:8080$`, 'm'), `$1 ${at}`);
  });
  assert.equal((cfg.match(/127\.0\.0\.1:\d+/g) ?? []).length, 3, 'the listener and both servers were moved');
  writeFileSync(path.join(dir, 'haproxy.cfg'), cfg);
  const child = spawn('haproxy', ['-db', '-f', path.join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'inherit', 'inherit'] });
  const exited = new Promise((r) => child.once('exit', r));
  const url = `http://127.0.0.1:${port}`;
  const end = Date.now() + 30_000;
  while (!(await fetch(`${url}/api/health`).then((r) => r.ok, () => false))) {
    if (child.exitCode !== null || Date.now() > end) throw new Error(`haproxy did not answer on ${url}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    wsUrl: `ws://127.0.0.1:${port}/sync`,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let minio: S3Server;
let servers: Server[] = [];
let lb: { wsUrl: string; stop(): Promise<void> };

before(async () => {
  minio = await startMinio();
  servers = await Promise.all([startServer(minio), startServer(minio)]);
  lb = await startHaproxy(servers);
});
after(async () => {
  await lb?.stop();
  for (const s of servers) await s.stop();
  await minio?.stop();
});

const pushesOn = (s: Server) => s.logs.filter((e) => e.op === 'push' && e.version !== undefined);

/** The servers log a push just after its Result has gone out: waits for `n` logged pushes
 *  (generous for a loaded machine: the log comes through a pipe). */
async function loggedPushes(on: Server[], n: number): Promise<number[]> {
  const end = Date.now() + 120_000;
  for (;;) {
    const counts = on.map((s) => pushesOn(s).length);
    if (counts.reduce((a, b) => a + b, 0) >= n || Date.now() > end) return counts;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('pushes through HAProxy are spread over both servers and read back byte-exact through either', { timeout: 180_000 }, async () => {
  const files = Array.from({ length: 8 }, (_, i) => ({ name: `spread-${i}.bin`, bytes: randomBytes((1 + (i % 3)) << 20) }));
  const reports = await Promise.all(files.map((f) => pushBytes(lb, f.name, f.bytes)));
  for (const [i, r] of reports.entries()) assert.equal(r.version, 1, files[i].name);
  const landed = await loggedPushes(servers, files.length);
  assert.equal(landed[0] + landed[1], files.length);
  assert.ok(landed[0] > 0 && landed[1] > 0, `pushes per server: ${landed}`);

  // Every file reads back through each server directly.
  for (const f of files) {
    for (const s of servers) {
      const { bytes } = await pullBytes(s, f.name, null);
      assert.ok(bytes.equals(f.bytes), `${f.name} through ${s.wsUrl}`);
    }
  }
  // The store is the bucket: the servers wrote nothing where they run.
  for (const s of servers) assert.deepEqual(readdirSync(s.cwd), [], `${s.cwd} stays empty`);
  const bucket = await s3Backend(`s3://${BUCKET}`, minio.endpoint, minio.env);
  try {
    let objects = 0;
    for await (const _ of bucket.list('')) objects++;
    assert.ok(objects > 0, 'the bucket holds the store');
  } finally {
    await bucket.close();
  }
});

test('an edit pushed through the other server goes as a delta', { timeout: 120_000 }, async () => {
  const v1 = randomBytes(4 << 20);
  const v2 = Buffer.from(v1);
  v2.write('an edit in the middle', 2 << 20);
  assert.equal((await pushBytes(servers[0], 'edited.bin', v1)).version, 1);
  const r = await pushBytes(servers[1], 'edited.bin', v2);
  assert.equal(r.version, 2);
  assert.ok(r.matchedBytes > v2.length * 0.9, `matched ${r.matchedBytes} of ${v2.length}`);
  assert.ok(r.literalBytes < v2.length * 0.1, `literal ${r.literalBytes} of ${v2.length}`);
  const { bytes } = await pullBytes(servers[0], 'edited.bin', v1);
  assert.ok(bytes.equals(v2), 'version 2 reads back through the first server');
});

test('a server SIGKILLed mid-push: HAProxy routes around it, and the other serves every committed version', { timeout: 120_000 }, async () => {
  const committed = { name: 'before-kill.bin', bytes: randomBytes(1 << 20) };
  await pushBytes(servers[0], committed.name, committed.bytes);
  const readBytes = () => Number(/rchar: (\d+)/.exec(readFileSync(`/proc/${servers[0].child.pid}/io`, 'utf8'))![1]);
  const start = readBytes();
  const inFlight = pushBytes(servers[0], 'in-flight.bin', randomBytes(32 << 20)).then(() => null, (e: Error) => e);
  // Kill it once 8 MiB of the upload have arrived.
  const end = Date.now() + 30_000;
  while (readBytes() - start < 8 << 20 && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
  await servers[0].stop();
  assert.ok((await inFlight) instanceof Error, 'the push on the killed server fails');

  // New sessions through HAProxy land on the survivor (a refused connection is redispatched,
  // and the health check takes the dead server out).
  const before = pushesOn(servers[1]).length;
  for (let i = 0; i < 4; i++) {
    const bytes = randomBytes(256 << 10);
    assert.equal((await pushBytes(lb, `after-kill-${i}.bin`, bytes)).version, 1);
    const { bytes: back } = await pullBytes(lb, `after-kill-${i}.bin`, null);
    assert.ok(back.equals(bytes));
  }
  assert.deepEqual(await loggedPushes([servers[1]], before + 4), [before + 4]);
  const { bytes } = await pullBytes(servers[1], committed.name, null);
  assert.ok(bytes.equals(committed.bytes), 'a version committed through the killed server');
});
