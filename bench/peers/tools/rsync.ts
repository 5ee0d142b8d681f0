/** rsync: an rsync daemon on loopback behind the counting proxy; A pushes to it
 *  (`rsync -a --delete A/ rsync://…/store/`), then B pulls from it. One-way each time: rsync is
 *  not a two-way sync, but it is the yardstick for bytes and time. */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type CountingProxy, countingProxy } from '../../lib/proxy.ts';
import { Daemon, type Run, runTimed, waitFor } from '../measure.ts';
import { type Dirs, type Tool, freePort, listening, spawnDaemon, stopChild } from './tool.ts';
import type { ChildProcess } from 'node:child_process';

export class Rsync implements Tool {
  name = 'rsync';
  packages = ['rsync'];
  binary = 'rsync';
  how = 'an rsync daemon (`rsync --daemon`, module on a local folder) on 127.0.0.1 behind the counting proxy; `rsync -a --delete A/ rsync://…/store/`, then `rsync -a --delete rsync://…/store/ B/`';
  exclude: string[] = [];
  private child?: ChildProcess;
  private daemon?: Daemon;
  private proxy?: CountingProxy;
  private dirs!: Dirs;

  version(): string {
    return execFileSync('rsync', ['--version'], { encoding: 'utf8' }).split('\n')[0];
  }

  async start(dirs: Dirs): Promise<void> {
    this.dirs = dirs;
    const store = path.join(dirs.work, 'store');
    mkdirSync(store, { recursive: true });
    const conf = path.join(dirs.work, 'rsyncd.conf');
    const id = process.getuid?.() ?? 0;
    writeFileSync(
      conf,
      [`pid file = ${path.join(dirs.work, 'rsyncd.pid')}`, 'use chroot = false', `uid = ${id}`, `gid = ${process.getgid?.() ?? 0}`, '[store]', `path = ${store}`, 'read only = false', ''].join('\n'),
    );
    const port = await freePort();
    const d = spawnDaemon('rsync', ['--daemon', '--no-detach', `--config=${conf}`, `--port=${port}`, '--address=127.0.0.1']);
    this.child = d.child;
    await listening(port, d.child, d.output);
    this.daemon = new Daemon(d.child.pid!);
    this.proxy = await countingProxy({ host: '127.0.0.1', port });
  }

  async sync(): Promise<Run[]> {
    const url = `rsync://127.0.0.1:${this.proxy!.port}/store/`;
    return [await runTimed('rsync', ['-a', '--delete', `${this.dirs.a}/`, url]), await runTimed('rsync', ['-a', '--delete', url, `${this.dirs.b}/`])];
  }

  /** The daemon forks one process per connection; its CPU is in the daemon's once reaped. */
  settle(): Promise<void> {
    return waitFor(() => this.daemon!.descendants() === 0, 'the rsync daemon reaps its children', 60_000, 10);
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
