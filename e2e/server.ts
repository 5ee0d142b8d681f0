// A real Dsync server for one test: `dsync serve` in a child process on a loopback port with its
// own data directory, so a test can SIGKILL it mid-sync and start it again on the same port.
// Stored bytes are read back through the store's own paths (server/src/store/store.ts).
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Store } from '../server/src/store/store.ts';
import { onLogLines, serveEnv } from '../harness/serve-process.ts';
import { Repo } from '../server/src/store/repo.ts';
import { localBackend } from '../server/src/store/local.ts';
import { holdingPipe } from '../harness/pipe.ts';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
/** Log events a TestServer keeps. */
const LOG_LINES = 200;

export class TestServer {
  private child: ChildProcess | null = null;
  url = '';
  readonly data = mkdtempSync(path.join(tmpdir(), 'dsync-e2e-'));
  /** the single-user namespace's store (read-only use: version numbers and bytes) */
  readonly store = new Store(new Repo(localBackend(this.data)), 'local');
  private port = 0;
  /** the server's last log events, across restarts (every one with `keepLog`) */
  readonly log: Record<string, unknown>[] = [];
  /** with `keepLog`: every byte the server wrote to its stdout and stderr, across restarts */
  readonly output: Buffer[] = [];

  constructor(
    private flags: string[] = [],
    private opts: { keepLog?: boolean } = {},
  ) {}

  /** the server process's id (0 before it starts) */
  get pid(): number {
    return this.child?.pid ?? 0;
  }

  async start(): Promise<this> {
    const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'serve', '--host', '127.0.0.1', '--port', String(this.port), '--data', this.data, ...this.flags], {
      stdio: ['ignore', 'pipe', this.opts.keepLog ? 'pipe' : 'inherit'],
      env: serveEnv(),
    });
    this.child = child;
    if (this.opts.keepLog) {
      child.stdout!.on('data', (d: Buffer) => this.output.push(d));
      child.stderr!.on('data', (d: Buffer) => (this.output.push(d), process.stderr.write(d)));
    }
    this.url = await new Promise<string>((resolve, reject) => {
      let out = '';
      const onData = (d: Buffer) => {
        out += d;
        const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
        if (m) {
          child.stdout!.off('data', onData);
          child.off('exit', onExit);
          resolve(m[1]);
        }
      };
      const onExit = (code: number | null) => reject(new Error(`dsync serve exited (${code}): ${out}`));
      child.stdout!.on('data', onData);
      child.once('exit', onExit);
    });
    // (its log events are kept, the last LOG_LINES of them, for a test's message on failure)
    onLogLines(child, (e) => {
      this.log.push(e);
      if (this.log.length > LOG_LINES && !this.opts.keepLog) this.log.shift();
    });
    this.port = Number(new URL(this.url).port); // a restart keeps the address the page uses
    return this;
  }

  /** Stops the server the hard way (SIGKILL), as a crash or a pulled cable would. */
  async kill() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }

  /** Freezes the server (SIGSTOP): its sockets stay open and silent, as behind a dead link. */
  freeze(frozen = true) {
    this.child?.kill(frozen ? 'SIGSTOP' : 'SIGCONT');
  }

  latest(name: string): Promise<number> {
    return this.store.latest(name);
  }

  storedBytes(name: string, version: number): Promise<Buffer> {
    return this.store.bytes(name, version);
  }

  async storedSha256(name: string, version: number): Promise<string> {
    const h = createHash('sha256');
    for await (const piece of this.store.stream(name, version)) h.update(piece);
    return h.digest('hex');
  }

  async stop() {
    await this.kill();
    rmSync(this.data, { recursive: true, force: true });
  }
}

/** A way to `server` for a page opened at `url`, through a pipe that can hold an upload
 *  mid-way (harness/pipe.ts `holdingPipe`); a restarted server is reached on its port. */
export async function pipeTo(server: TestServer) {
  const pipe = await holdingPipe(() => Number(new URL(server.url).port));
  return { url: `http://127.0.0.1:${pipe.port}`, holdAt: pipe.holdAt, close: pipe.close };
}
