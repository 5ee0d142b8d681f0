// Real S3 servers for the tests and benchmarks, each on a free loopback port with a temporary
// data directory and random credentials, for `--s3-endpoint`: MinIO (the S3 tests and
// bench/load/load.ts; ~/go/bin/minio, MINIO_BIN overrides it) and versitygw's posix gateway (a
// second implementation of conditional writes, so that the backend contract does not rest on
// MinIO alone; ~/go/bin/versitygw, VERSITYGW_BIN overrides it). `scripts/setup.sh test`
// installs both from the Go module proxy.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';

export interface S3Server {
  /** http://127.0.0.1:PORT, for `--s3-endpoint` */
  endpoint: string;
  /** the credentials, as the variables an S3 client reads */
  env: { AWS_ACCESS_KEY_ID: string; AWS_SECRET_ACCESS_KEY: string; AWS_REGION: string };
  process: ChildProcess;
  stop(): Promise<void>;
}

/** A server's binary: $VAR, else ~/go/bin/NAME (where `go install` puts it). */
function goBin(name: string, variable: string): string {
  const bin = process.env[variable] || path.join(homedir(), 'go/bin', name);
  if (!existsSync(bin)) throw new Error(`${name} is not installed at ${bin}: run scripts/setup.sh test`);
  return bin;
}

/** The MinIO binary: $MINIO_BIN, else ~/go/bin/minio. */
export const minioBin = () => goBin('minio', 'MINIO_BIN');

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

/** How to run one kind of S3 server in `dir` on `port` with `env`'s credentials, and whether it
 *  is live yet. */
interface Kind {
  name: string;
  bin: string;
  args(dir: string, port: number): string[];
  env(dir: string, creds: S3Server['env']): NodeJS.ProcessEnv;
  live(endpoint: string): Promise<boolean>;
}


/** Starts MinIO and waits until /minio/health/live answers 200. */
export const startMinio = (): Promise<S3Server> =>
  start({
    name: 'minio',
    bin: minioBin(),
    args: (dir, port) => ['server', path.join(dir, 'data'), '--address', `127.0.0.1:${port}`, '--certs-dir', path.join(dir, 'certs'), '--quiet'],
    env: (dir, c) => ({ HOME: dir, MINIO_ROOT_USER: c.AWS_ACCESS_KEY_ID, MINIO_ROOT_PASSWORD: c.AWS_SECRET_ACCESS_KEY, MINIO_BROWSER: 'off', MINIO_UPDATE: 'off' }),
    live: (endpoint) => fetch(`${endpoint}/minio/health/live`).then((r) => r.ok, () => false),
  });

/** Starts versitygw's posix gateway (objects as files under the data directory, their metadata
 *  in extended attributes) and waits until it answers. Not with `--sidecar`: metadata in files
 *  of their own is not replaced with the object, and a GET racing a PUT of a head then answers
 *  one body with another's checksum (the contract's concurrent compare-and-swap fails). */
export const startVersitygw = (): Promise<S3Server> =>
  start({
    name: 'versitygw',
    bin: goBin('versitygw', 'VERSITYGW_BIN'),
    args: (dir, port) => ['--port', `127.0.0.1:${port}`, '--quiet', 'posix', path.join(dir, 'data')],
    env: (dir, c) => ({ HOME: dir, ROOT_ACCESS_KEY_ID: c.AWS_ACCESS_KEY_ID, ROOT_SECRET_ACCESS_KEY: c.AWS_SECRET_ACCESS_KEY }),
    // any HTTP answer (an unsigned request is refused with 403) means it serves
    live: (endpoint) => fetch(endpoint).then(() => true, () => false),
  });

const READY_TIMEOUT_MS = 60_000;

async function start(kind: Kind): Promise<S3Server> {
  // The port is free when chosen and the server binds it a moment later; another process may
  // take it in between, so a server that exits before it is live is started again on another
  // port.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(kind);
    } catch (e) {
      if (attempt === 3) throw e;
    }
  }
}

async function startOnce(kind: Kind): Promise<S3Server> {
  const dir = mkdtempSync(path.join(tmpdir(), `dsync-${kind.name}-`));
  mkdirSync(path.join(dir, 'data'));
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  const env = {
    AWS_ACCESS_KEY_ID: 'test' + randomBytes(8).toString('hex'),
    AWS_SECRET_ACCESS_KEY: randomBytes(20).toString('hex'),
    AWS_REGION: 'us-east-1',
  };
  const child = spawn(kind.bin, kind.args(dir, port), { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH, ...kind.env(dir, env) } });
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
      throw new Error(`${kind.name} exited (${child.exitCode ?? child.signalCode}) before it was live: ${output}`);
    }
    if (await kind.live(endpoint)) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${kind.name} was not live after ${READY_TIMEOUT_MS} ms: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { endpoint, env, process: child, stop };
}
