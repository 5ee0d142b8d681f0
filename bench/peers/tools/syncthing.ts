/** Syncthing: two instances on this machine, device to device (there is no server): each its
 *  own home, GUI/REST on 127.0.0.1, a TCP listener on 127.0.0.1 and the other's address fixed
 *  (no discovery, relays, NAT or usage reports), the folder shared send-receive with the fs
 *  watcher on. Step 1 adds the folder on both; every later step forces a rescan of A through
 *  REST (`POST /rest/db/scan`) instead of waiting for the watcher's 10 s delay; a step ends
 *  when A sees B at 100 % (`/rest/db/completion`) and both are idle with B holding every file.
 *  Bytes on the wire: A's connection totals (`/rest/system/connections`). */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Daemon, type Run, waitFor } from '../measure.ts';
import { type Dirs, type Tool, freePort, listening, spawnDaemon, stopChild } from './tool.ts';

const FOLDER = 'tree';
const TIMEOUT_MS = 3_600_000;

interface Instance {
  home: string;
  id: string;
  gui: number;
  listen: number;
  key: string;
  child?: ChildProcess;
  daemon?: Daemon;
  dir: string;
}

export class Syncthing implements Tool {
  name = 'Syncthing';
  packages = ['syncthing'];
  binary = 'syncthing';
  how = 'two instances, device to device over TCP on 127.0.0.1 (no discovery, relays or NAT), REST on 127.0.0.1, fs watcher on; a rescan of A forced through REST, done when A sees B at 100 % and both are idle';
  exclude = ['.stfolder', '.stversions', '.syncthing.*'];
  private inst: Instance[] = [];

  version(): string {
    return execFileSync('syncthing', ['--version'], { encoding: 'utf8' }).trim();
  }

  private async rest<T>(i: Instance, method: string, p: string, body?: unknown): Promise<T> {
    const r = await fetch(`http://127.0.0.1:${i.gui}${p}`, {
      method,
      headers: { 'X-API-Key': i.key, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`syncthing ${method} ${p}: ${r.status} ${text}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  async start(dirs: Dirs): Promise<void> {
    for (const [dev, dir] of [['A', dirs.a], ['B', dirs.b]]) {
      const home = path.join(dirs.work, `syncthing-${dev}`);
      mkdirSync(home, { recursive: true });
      const out = execFileSync('syncthing', ['generate', `--home=${home}`, '--no-default-folder'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      const id = /Device ID: (\S+)/.exec(out)?.[1] ?? execFileSync('syncthing', [`--home=${home}`, '--device-id'], { encoding: 'utf8' }).trim();
      const [gui, listen] = [await freePort(), await freePort()];
      const key = `bench-${dev}-${Math.random().toString(36).slice(2)}`;
      const cfg = path.join(home, 'config.xml');
      const edits: [RegExp, string][] = [
        [/<listenAddress>default<\/listenAddress>/, `<listenAddress>tcp://127.0.0.1:${listen}</listenAddress>`],
        [/<globalAnnounceEnabled>true</, '<globalAnnounceEnabled>false<'],
        [/<localAnnounceEnabled>true</, '<localAnnounceEnabled>false<'],
        [/<relaysEnabled>true</, '<relaysEnabled>false<'],
        [/<natEnabled>true</, '<natEnabled>false<'],
        [/<startBrowser>true</, '<startBrowser>false<'],
        [/<urAccepted>0</, '<urAccepted>-1<'],
        [/<crashReportingEnabled>true</, '<crashReportingEnabled>false<'],
        [/<autoUpgradeIntervalH>\d+</, '<autoUpgradeIntervalH>0<'],
      ];
      let xml = readFileSync(cfg, 'utf8');
      for (const [re, to] of edits) {
        if (!re.test(xml)) throw new Error(`syncthing config.xml has no ${re}`);
        xml = xml.replace(re, to);
      }
      writeFileSync(cfg, xml);
      this.inst.push({ home, id, gui, listen, key, dir });
    }
    for (const i of this.inst) {
      const d = spawnDaemon('syncthing', ['serve', `--home=${i.home}`, '--no-browser', '--no-restart', `--gui-address=127.0.0.1:${i.gui}`, `--gui-apikey=${i.key}`], {
        STNODEFAULTFOLDER: '1',
        STNOUPGRADE: '1',
      });
      i.child = d.child;
      await listening(i.gui, d.child, d.output);
      await waitFor(async () => (await this.rest<{ myID: string }>(i, 'GET', '/rest/system/status').catch(() => null)) !== null, 'syncthing REST', 60_000, 200);
      i.daemon = new Daemon(d.child.pid!);
    }
    const [a, b] = this.inst;
    for (const [me, other] of [[a, b], [b, a]]) {
      await this.rest(me, 'POST', '/rest/config/devices', { deviceID: other.id, name: other === a ? 'A' : 'B', addresses: [`tcp://127.0.0.1:${other.listen}`], compression: 'metadata' });
    }
    await waitFor(async () => {
      const c = await this.rest<{ connections: Record<string, { connected: boolean }> }>(a, 'GET', '/rest/system/connections');
      return c.connections[b.id]?.connected === true;
    }, 'syncthing A and B connected', 120_000, 200);
  }

  async sync(step: number, files: number): Promise<Run[]> {
    const [a, b] = this.inst;
    if (step === 1) {
      for (const i of this.inst) {
        await this.rest(i, 'POST', '/rest/config/folders', {
          id: FOLDER,
          label: FOLDER,
          path: i.dir,
          type: 'sendreceive',
          devices: this.inst.map((x) => ({ deviceID: x.id })),
          fsWatcherEnabled: true,
          fsWatcherDelayS: 10,
          rescanIntervalS: 3600,
        });
      }
    } else {
      await this.rest(a, 'POST', `/rest/db/scan?folder=${FOLDER}`);
    }
    interface Status {
      state: string;
      localFiles: number;
      needTotalItems: number;
    }
    await waitFor(
      async () => {
        const [sa, sb] = await Promise.all([a, b].map((i) => this.rest<Status>(i, 'GET', `/rest/db/status?folder=${FOLDER}`).catch(() => null)));
        if (!sa || !sb || sa.state !== 'idle' || sb.state !== 'idle' || sa.localFiles !== files || sb.localFiles !== files || sb.needTotalItems !== 0) return false;
        const c = await this.rest<{ completion: number; needItems: number; needDeletes: number }>(a, 'GET', `/rest/db/completion?folder=${FOLDER}&device=${b.id}`);
        return c.completion === 100 && c.needItems === 0 && c.needDeletes === 0;
      },
      'syncthing: B in sync with A',
      TIMEOUT_MS,
      100,
    );
    return [];
  }

  daemons() {
    const [a, b] = this.inst;
    return [
      ...(a?.daemon ? [{ role: 'client' as const, d: a.daemon }] : []),
      ...(b?.daemon ? [{ role: 'server' as const, d: b.daemon }] : []),
    ];
  }

  async wire(): Promise<number> {
    const c = await this.rest<{ total: { inBytesTotal: number; outBytesTotal: number } }>(this.inst[0], 'GET', '/rest/system/connections');
    return c.total.inBytesTotal + c.total.outBytesTotal;
  }

  async stop(): Promise<void> {
    for (const i of this.inst) {
      i.daemon?.stop();
      await stopChild(i.child);
    }
  }
}
