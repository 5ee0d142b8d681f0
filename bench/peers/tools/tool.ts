/**
 * The common interface of bench/peers' tool adapters: each starts its server(s) in `start`
 * (not timed), syncs device A and then device B in `sync` (timed by the step driver), and says
 * what its daemons use and what went over the wire; the driver (bench/peers/run.ts) writes a
 * step once for all of them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { type CountingProxy, countingProxy } from '../../lib/proxy.ts';
import { Daemon, type Run } from '../measure.ts';

export interface Dirs {
  /** this tool's scratch folder */
  work: string;
  /** device A's folder (holds the tree before step 1) */
  a: string;
  /** device B's folder (empty before step 1) */
  b: string;
}

export interface Tool {
  name: string;
  /** Debian packages it needs, and the command whose presence says they are installed */
  packages: string[];
  binary: string;
  /** how it runs here, for the results: its server and its options */
  how: string;
  /** names diff -r leaves out (the tool's own files in a synced folder) */
  exclude: string[];
  start(dirs: Dirs): Promise<void>;
  /** Syncs A's changes to the server and the server's to B (for Syncthing: A to B). `files`:
   *  how many regular files A holds, for a tool that must know when it is done. */
  sync(step: number, files: number): Promise<Run[]>;
  /** After the timed sync, before the daemons' CPU is read: waits for work that finishes after
   *  the clients exit (an rsync daemon's per-connection process being reaped). */
  settle?(): Promise<void>;
  /** the daemons: `client` counts towards the client's RSS, `server` the server's */
  daemons(): { role: 'client' | 'server'; d: Daemon }[];
  /** bytes on the wire so far, both ways */
  wire(): Promise<number>;
  stop(): Promise<void>;
  /** the tool's version line */
  version(): string;
}

/** A free TCP port on 127.0.0.1 (asked of the kernel, then released). */
export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

/** Spawns a daemon with its output kept (the last 20 KB) for the error when it dies. */
export function spawnDaemon(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): { child: ChildProcess; output(): string } {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer) => (out = (out + d).slice(-20_000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  return { child, output: () => out };
}

/** SIGTERMs a child and waits for it to exit (SIGKILL after 10 s). */
export function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => {
    child.once('exit', () => r());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
  });
}

/** Resolves once something accepts connections on 127.0.0.1:port. */
export async function listening(port: number, child: ChildProcess, output: () => string, timeoutMs = 60_000): Promise<void> {
  const { connect } = await import('node:net');
  const t0 = performance.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}: ${output()}`);
    const ok = await new Promise<boolean>((r) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), r(true)));
      s.once('error', () => r(false));
    });
    if (ok) return;
    if (performance.now() - t0 > timeoutMs) throw new Error(`nothing listens on ${port} after ${timeoutMs} ms: ${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A tool whose server is one daemon on loopback behind the counting proxy (Dsync, rsync,
 * Unison, rclone): `serve` starts it (or `behindProxy` takes one started otherwise); its CPU and RSS count as the server's, its bytes are the proxy's.
 */
export abstract class ProxiedDaemon {
  protected dirs!: Dirs;
  protected proxy?: CountingProxy;
  private child?: ChildProcess;
  private daemon?: Daemon;

  /** Starts `cmd args` (listening on `port`), waits until it accepts connections, and puts the
   *  counting proxy in front of it. */
  protected async serve(cmd: string, args: string[], port: number, env: NodeJS.ProcessEnv = {}): Promise<CountingProxy> {
    const d = spawnDaemon(cmd, args, env);
    await listening(port, d.child, d.output);
    return this.behindProxy(d.child, port);
  }

  /** Takes `child`, listening on `port`, for the server, behind the counting proxy. */
  protected async behindProxy(child: ChildProcess, port: number): Promise<CountingProxy> {
    this.child = child;
    this.daemon = new Daemon(child.pid!);
    return (this.proxy = await countingProxy({ host: '127.0.0.1', port }));
  }

  protected descendants(): number {
    return this.daemon?.descendants() ?? 0;
  }

  daemons() {
    return this.daemon ? [{ role: 'server' as const, d: this.daemon }] : [];
  }

  async wire(): Promise<number> {
    return this.proxy ? this.proxy.counts.up + this.proxy.counts.down : 0;
  }

  async stop(): Promise<void> {
    this.daemon?.stop();
    await this.proxy?.close();
    await stopChild(this.child);
  }
}
