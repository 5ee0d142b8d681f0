/** Unison: a socket server (`unison -socket PORT -listen 127.0.0.1`) behind the counting proxy,
 *  whose root is a local folder; A ↔ server root, then B ↔ server root
 *  (`unison A socket://…//ROOT -batch -times`), each device with its own archive folder
 *  ($UNISON). */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { type Run, runTimed } from '../measure.ts';
import { type Dirs, ProxiedDaemon, type Tool, freePort } from './tool.ts';

export class Unison extends ProxiedDaemon implements Tool {
  name = 'Unison';
  packages = ['unison'];
  binary = 'unison';
  how = 'a socket server (`unison -socket PORT -listen 127.0.0.1`, root a local folder) behind the counting proxy; `unison A socket://…//ROOT -batch -times -ui text`, then the same for B (archives per device in $UNISON)';
  exclude: string[] = [];
  private root = '';

  version(): string {
    return execFileSync('unison', ['-version'], { encoding: 'utf8' }).trim();
  }

  async start(dirs: Dirs): Promise<void> {
    this.dirs = dirs;
    this.root = path.join(dirs.work, 'store');
    mkdirSync(this.root, { recursive: true });
    const home = path.join(dirs.work, 'unison-server');
    mkdirSync(home, { recursive: true });
    const port = await freePort();
    await this.serve('unison', ['-socket', String(port), '-listen', '127.0.0.1'], port, { UNISON: home, HOME: home });
  }

  async sync(): Promise<Run[]> {
    const runs: Run[] = [];
    for (const [dev, dir] of [['A', this.dirs.a], ['B', this.dirs.b]]) {
      const home = path.join(this.dirs.work, `unison-${dev}`);
      mkdirSync(home, { recursive: true });
      runs.push(
        await runTimed('unison', [dir, `socket://127.0.0.1:${this.proxy!.port}/${this.root}`, '-batch', '-times', '-ui', 'text', '-confirmbigdel=false'], {
          env: { UNISON: home, HOME: home },
        }),
      );
    }
    return runs;
  }

}
