/** Dsync: a real `dsync serve --store DIR` on loopback behind the counting proxy; device A runs
 *  `dsync sync A -s URL`, then device B `dsync sync B -s URL` (the compiled CLI, bin/dsync.mjs),
 *  each with its own DSYNC_CACHE_DIR. With `prof` (run.ts --prof DIR), every Dsync process runs
 *  under `node --cpu-prof`: the server's one profile in DIR/server, each step's clients in
 *  DIR/step-N/{A,B}, the watchers in DIR/watch/{A,B}. */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { startServe } from '../../../harness/child.ts';
import { ROOT } from '../../lib/common.ts';
import { type WatchLatency, watchLatency } from '../../lib/watch-latency.ts';
import { type Run, runTimed } from '../measure.ts';
import { type Dirs, ProxiedDaemon, type Tool } from './tool.ts';

const DSYNC = path.join(ROOT, 'bin/dsync.mjs');
const REMOTE = 'tree';

export class Dsync extends ProxiedDaemon implements Tool {
  name = 'Dsync';
  packages: string[] = [];
  binary = process.execPath;
  how = '`dsync serve --store DIR` on 127.0.0.1 behind a counting TCP proxy; `dsync sync DIR -s URL --remote tree` on A, then on B (each its own DSYNC_CACHE_DIR)';
  exclude = ['.dsync*'];

  constructor(private readonly prof?: string) {
    super();
  }

  /** `node --cpu-prof` into prof/where (node's own arguments: NODE_OPTIONS refuses them) */
  private profiled(where: string): string[] {
    return this.prof ? ['--cpu-prof', `--cpu-prof-dir=${path.join(this.prof, where)}`] : [];
  }

  version(): string {
    return execFileSync(process.execPath, [DSYNC, '--version'], { encoding: 'utf8' }).trim();
  }

  private env(dev: 'A' | 'B'): NodeJS.ProcessEnv {
    return { DSYNC_CACHE_DIR: path.join(this.dirs.work, `cache-${dev}`) };
  }

  async start(dirs: Dirs): Promise<void> {
    this.dirs = dirs;
    const server = await startServe(['--store', path.join(dirs.work, 'store')], { nodeArgs: this.profiled('server') });
    await this.behindProxy(server.child, Number(new URL(server.url).port));
  }

  async sync(step: number): Promise<Run[]> {
    const runs: Run[] = [];
    for (const [dev, dir] of [['A', this.dirs.a], ['B', this.dirs.b]] as const) {
      runs.push(await runTimed(process.execPath, [...this.profiled(`step-${step}/${dev}`), DSYNC, 'sync', dir, '-s', this.proxy!.url, '--remote', REMOTE, '--device', dev, '--json'], { env: this.env(dev) }));
    }
    return runs;
  }

  /** A save on A seen on B, both `dsync sync --watch` over the synced tree. */
  watch(saves: number): Promise<WatchLatency> {
    const dev = (d: 'A' | 'B') => ({
      dir: d === 'A' ? this.dirs.a : this.dirs.b,
      env: { ...this.env(d), DSYNC_SERVER: this.proxy!.url },
      name: d,
      args: ['--remote', REMOTE],
      nodeArgs: this.profiled(`watch/${d}`),
    });
    return watchLatency(dev('A'), dev('B'), saves, 'watched-save.txt');
  }
}
