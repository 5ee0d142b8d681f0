/** rclone bisync: `rclone serve sftp` of a local folder on loopback behind the counting proxy
 *  (SFTP keeps mtimes and answers hashes); `rclone bisync A srv:` then `rclone bisync B srv:`,
 *  the first run of each device with --resync, each device its own --workdir. */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { type Run, runTimed } from '../measure.ts';
import { type Dirs, ProxiedDaemon, type Tool, freePort } from './tool.ts';

export class Rclone extends ProxiedDaemon implements Tool {
  name = 'rclone bisync';
  packages = ['rclone'];
  binary = 'rclone';
  how = '`rclone serve sftp` of a local folder on 127.0.0.1 behind the counting proxy; `rclone bisync A srv:` (sftp remote), then `rclone bisync B srv:`; the first run of each with --resync';
  exclude: string[] = [];
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
    const proxy = await this.serve('rclone', ['serve', 'sftp', store, '--addr', `127.0.0.1:${port}`, '--user', 'bench', '--pass', 'bench'], port, base);
    const pass = execFileSync('rclone', ['obscure', 'bench'], { encoding: 'utf8', env: { ...process.env, ...base } }).trim();
    this.env = {
      ...base,
      RCLONE_CONFIG_SRV_TYPE: 'sftp',
      RCLONE_CONFIG_SRV_HOST: '127.0.0.1',
      RCLONE_CONFIG_SRV_PORT: String(proxy.port),
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

}
