// A real Dsync server in a child process with its own data directory, for one test.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

export class TestServer {
  child!: ChildProcess;
  url = '';
  constructor(
    private flags: string[] = [],
    readonly data = mkdtempSync(path.join(tmpdir(), 'dsync-e2e-')),
    private port = 0,
  ) {}

  async start(): Promise<this> {
    this.child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'serve', '--host', '127.0.0.1', '--port', String(this.port), '--data', this.data, ...this.flags], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.url = await new Promise<string>((resolve, reject) => {
      let out = '';
      this.child.stdout!.on('data', (d) => {
        out += d;
        const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
        if (m) resolve(m[1]);
      });
      this.child.once('exit', (c) => reject(new Error(`server exited ${c}: ${out}`)));
    });
    this.child.stdout!.resume();
    this.port = Number(new URL(this.url).port); // a restart keeps the address the page uses
    return this;
  }

  async kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGKILL');
      await exited;
    }
  }

  /** Path of a stored version (latest if not given) in the single-user namespace. */
  stored(name: string, version: number): string {
    let enc = '';
    for (const b of Buffer.from(name)) enc += /[A-Za-z0-9_-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0');
    return path.join(this.data, 'ns/local/files', enc, `v${version}.dat`);
  }

  storedBytes(name: string, version: number): Buffer {
    return readFileSync(this.stored(name, version));
  }

  async storedSha256(name: string, version: number): Promise<string> {
    const h = createHash('sha256');
    for await (const c of createReadStream(this.stored(name, version))) h.update(c as Buffer);
    return h.digest('hex');
  }

  async stop() {
    await this.kill();
    rmSync(this.data, { recursive: true, force: true });
  }
}
