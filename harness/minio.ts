// A real MinIO server (harness: shared by the S3 tests and bench/load/load.ts; installed by
// `scripts/setup.sh test` as ~/go/bin/minio, MINIO_BIN overrides it): on a free loopback port,
// with a temporary data directory and random credentials, for `--s3-endpoint`.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';

export interface Minio {
  /** http://127.0.0.1:PORT, for `--s3-endpoint` */
  endpoint: string;
  /** the credentials, as the variables an S3 client reads */
  env: { AWS_ACCESS_KEY_ID: string; AWS_SECRET_ACCESS_KEY: string; AWS_REGION: string };
  process: ChildProcess;
  stop(): Promise<void>;
}

/** The MinIO binary: $MINIO_BIN, else ~/go/bin/minio (where `go install` puts it). */
export function minioBin(): string {
  const bin = process.env.MINIO_BIN || path.join(homedir(), 'go/bin/minio');
  if (!existsSync(bin)) throw new Error(`MinIO is not installed at ${bin}: run scripts/setup.sh test`);
  return bin;
}

/** A loopback TCP port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

const READY_TIMEOUT_MS = 60_000;

/** Starts MinIO and waits until /minio/health/live answers 200. */
export async function startMinio(): Promise<Minio> {
  const bin = minioBin();
  // The port is free when chosen and MinIO binds it a moment later; another process may take it
  // in between, so a MinIO that exits before it is live is started again on another port.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(bin);
    } catch (e) {
      if (attempt === 3) throw e;
    }
  }
}

async function startOnce(bin: string): Promise<Minio> {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-minio-'));
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  const env = {
    AWS_ACCESS_KEY_ID: 'test' + randomBytes(8).toString('hex'),
    AWS_SECRET_ACCESS_KEY: randomBytes(20).toString('hex'),
    AWS_REGION: 'us-east-1',
  };
  const child = spawn(bin, ['server', path.join(dir, 'data'), '--address', `127.0.0.1:${port}`, '--certs-dir', path.join(dir, 'certs'), '--quiet'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH,
      HOME: dir,
      MINIO_ROOT_USER: env.AWS_ACCESS_KEY_ID,
      MINIO_ROOT_PASSWORD: env.AWS_SECRET_ACCESS_KEY,
      MINIO_BROWSER: 'off',
      MINIO_UPDATE: 'off',
    },
  });
  let output = '';
  child.stdout!.on('data', (d) => (output = (output + d).slice(-4000)));
  child.stderr!.on('data', (d) => (output = (output + d).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`minio exited (${child.exitCode ?? child.signalCode}) before it was live: ${output}`);
    }
    const live = await fetch(`${endpoint}/minio/health/live`).then((r) => r.ok, () => false);
    if (live) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`minio was not live after ${READY_TIMEOUT_MS} ms: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { endpoint, env, process: child, stop };
}
