/** rclone bisync: `rclone serve sftp` of a local folder on loopback behind the counting proxy
 *  (SFTP keeps mtimes and answers hashes); `rclone bisync A srv:` then `rclone bisync B srv:`,
 *  the first run of each device with --resync, each device its own --workdir. */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type CountingProxy, countingProxy } from '../../lib/proxy.ts';
import { Daemon, type Run, runTimed } from '../measure.ts';
import { type Dirs, type Tool, freePort, listening, spawnDaemon, stopChild } from './tool.ts';

export class Rclone implements Tool {
  name = 'rclone bisync';
  packages = ['rclone'];
  binary = 'rclone';
  how = '`rclone serve sftp` of a local folder on 127.0.0.1 behind the counting proxy; `rclone bisync A srv:` (sftp remote), then `rclone bisync B srv:`; the first run of each with --resync';
  exclude: string[] = [];
  private child?: ChildProcess;
  private daemon?: Daemon;
  private proxy?: CountingProxy;
  private dirs!: Dirs;
  private env: NodeJS.ProcessEnv = {};

  version(): string {
    return execFileSync('rclone', ['version'], { encoding: 'utf8' }).split('\n')[0];
  }

  async start(dirs: Dirs): Promise<void> {
    this.dirs = dirs;
    const store = path.join(dirs.work, 'store');
    mkdirSync(store, { recursive: true });
    const config = path.join(dirs.work, 'rclone.conf');
    writeFileSync(config, '');
    const base = { RCLONE_CONFIG: config, RCLONE_CACHE_DIR: path.join(dirs.work, 'rclone-cache') };
    const port = await freePort();
    const d = spawnDaemon('rclone', ['serve', 'sftp', store, '--addr', `127.0.0.1:${port}`, '--user', 'bench', '--pass', 'bench'], base);
    this.child = d.child;
    await listening(port, d.child, d.output);
    this.daemon = new Daemon(d.child.pid!);
    this.proxy = await countingProxy({ host: '127.0.0.1', port });
    const pass = execFileSync('rclone', ['obscure', 'bench'], { encoding: 'utf8', env: { ...process.env, ...base } }).trim();
    this.env = {
      ...base,
      RCLONE_CONFIG_SRV_TYPE: 'sftp',
      RCLONE_CONFIG_SRV_HOST: '127.0.0.1',
      RCLONE_CONFIG_SRV_PORT: String(this.proxy.port),
      RCLONE_CONFIG_SRV_USER: 'bench',
      RCLONE_CONFIG_SRV_PASS: pass,
    };
  }

  async sync(step: number): Promise<Run[]> {
    const runs: Run[] = [];
    for (const [dev, dir] of [['A', this.dirs.a], ['B', this.dirs.b]]) {
      const args = ['bisync', dir, 'srv:', '--workdir', path.join(this.dirs.work, `bisync-${dev}`), ...(step === 1 ? ['--resync'] : [])];
      runs.push(await runTimed('rclone', args, { env: this.env }));
    }
    return runs;
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
