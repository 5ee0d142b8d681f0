/** rsync: an rsync daemon on loopback behind the counting proxy; A pushes to it
 *  (`rsync -a --delete A/ rsync://…/store/`), then B pulls from it. One-way each time: rsync is
 *  not a two-way sync, but it is the yardstick for bytes and time. */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type Run, runTimed, waitFor } from '../measure.ts';
import { type Dirs, ProxiedDaemon, type Tool, freePort } from './tool.ts';

export class Rsync extends ProxiedDaemon implements Tool {
  name = 'rsync';
  packages = ['rsync'];
  binary = 'rsync';
  how = 'an rsync daemon (`rsync --daemon`, module on a local folder) on 127.0.0.1 behind the counting proxy; `rsync -a --delete A/ rsync://…/store/`, then `rsync -a --delete rsync://…/store/ B/`';
  exclude: string[] = [];

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
    await this.serve('rsync', ['--daemon', '--no-detach', `--config=${conf}`, `--port=${port}`, '--address=127.0.0.1'], port);
  }

  async sync(): Promise<Run[]> {
    const url = `rsync://127.0.0.1:${this.proxy!.port}/store/`;
    return [await runTimed('rsync', ['-a', '--delete', `${this.dirs.a}/`, url]), await runTimed('rsync', ['-a', '--delete', url, `${this.dirs.b}/`])];
  }

  /** The daemon forks one process per connection; its CPU is in the daemon's once reaped. */
  settle(): Promise<void> {
    return waitFor(() => this.descendants() === 0, 'the rsync daemon reaps its children', 60_000, 10);
  }

}
