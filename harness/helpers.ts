// A real server in this process (harness: shared by the tests, e2e/live.spec.ts and bench/):
// on a loopback port the OS picks, with a temporary data directory removed on close, and push /
// pull of bytes through the real client library over a real WebSocket.
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import '../shared/src/chunking/wasm.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { type PullOptions, type PushOptions, pull, push } from '../shared/src/session/delta-client.ts';
import { type ServerConfig, loadConfig } from '../server/src/config.ts';
import { type RunningServer, startServer } from '../server/src/server.ts';

export interface TestServer extends RunningServer {
  data: string;
  wsUrl: string;
  stored(name: string, version?: number): Promise<Buffer>;
  stop(): Promise<void>;
}

export async function testServer(flags: Record<string, string | boolean> = {}, log?: (e: Record<string, unknown>) => void): Promise<TestServer> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-test-'));
  // the store's deadline generous (a loaded machine's disk has taken over 20 s for one write):
  // the tests of a store that does not answer set their own
  const cfg: ServerConfig = loadConfig({ port: '0', host: '127.0.0.1', data, 'store-timeout-ms': '120000', ...flags }, {});
  const s = await startServer(cfg, log);
  return {
    ...s,
    data,
    wsUrl: s.url.replace('http', 'ws') + '/sync',
    async stored(name, version) {
      const store = await s.storeOf('local');
      const v = version ?? (await store.latest(name));
      return store.bytes(name, v);
    },
    async stop() {
      await s.close();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

export function pushBytes(server: { wsUrl: string }, name: string, bytes: Uint8Array, opts: Partial<PushOptions> = {}) {
  return push(bufferSource(bytes), { url: server.wsUrl, name, WebSocket: WebSocket as any, ...opts });
}

/** Pulls into memory; returns the report and the bytes. */
export async function pullBytes(server: { wsUrl: string }, name: string, basis: Uint8Array | null, opts: Partial<PullOptions> = {}) {
  const parts: Uint8Array[] = [];
  let committed = false;
  const report = await pull({
    url: server.wsUrl,
    name,
    WebSocket: WebSocket as any,
    basis: basis ? bufferSource(basis) : null,
    sink: {
      write: async (b) => void parts.push(b.slice()),
      commit: async () => ((committed = true), 0),
      abort: async () => void (parts.length = 0),
    },
    ...opts,
  });
  if (!committed) throw new Error('pull did not commit');
  return { report, bytes: Buffer.concat(parts) };
}

/** Passes the WebSocket upgrades that reach `server` (a test's HTTP proxy) on to `target` as
 *  raw bytes, both ways: the proxy sees and may rewrite the REST calls, not the sessions. */
export function forwardUpgrades(server: Server, target: URL): void {
  server.on('upgrade', (req, socket, head) => {
    const upstream = connect(Number(target.port), target.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`, ...Object.entries(req.headers).map(([k, v]) => `${k}: ${k === 'host' ? target.host : v}`), '', ''];
      upstream.write(lines.join('\r\n'));
      upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  });
}
