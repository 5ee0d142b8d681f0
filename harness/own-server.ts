// A server process of its own (harness; serve-child.ts), for tests and probes that measure it
// or give it a data directory on a small tmpfs (a full disk on purpose).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { onLogLines } from './serve-process.ts';
import { killHard, processMemory } from './child.ts';

const root = new URL('..', import.meta.url).pathname;

export interface OwnServer {
  child: ChildProcess;
  url: string;
  wsUrl: string;
  logs: Record<string, unknown>[];
  /** resident and peak resident memory of the server process, bytes */
  memory(): { rss: number; peak: number };
  stop(): Promise<void>;
}

/** A server process (serve-child.ts) with `flags`; with `tmpfsBytes`, its data directory is a
 *  tmpfs of that size, mounted in a user and mount namespace of its own (`unshare -rm`: no
 *  root needed where user namespaces are allowed). */
export async function ownServer(flags: string[], tmpfsBytes?: number): Promise<OwnServer> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-own-'));
  const node = [process.execPath, '--import', 'tsx', path.join(root, 'harness/serve-child.ts'), '--port', '0', '--host', '127.0.0.1', '--data', data, ...flags];
  const child = tmpfsBytes
    ? spawn('unshare', ['-rm', 'sh', '-c', `mount -t tmpfs -o size=${tmpfsBytes} tmpfs "$0" && exec "$@"`, data, ...node], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(node[0], node.slice(1), { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  const logs: Record<string, unknown>[] = [];
  const url = await new Promise<string>((resolve, reject) => {
    onLogLines(child, (e) => (e.url ? resolve(e.url as string) : logs.push(e)));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  return {
    child,
    url,
    wsUrl: url.replace('http', 'ws') + '/sync',
    logs,
    memory: () => processMemory(child.pid!),
    async stop() {
      await killHard(child);
      rmSync(data, { recursive: true, force: true });
    },
  };
}
