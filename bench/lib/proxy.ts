/**
 * A counting TCP proxy on loopback (bench/sync-folder.ts, bench/peers): every byte between a
 * client and `target` passes through it and is counted each way, with the HTTP requests (request
 * lines seen at the start of a client chunk on a connection that is not a WebSocket) and the
 * WebSocket upgrades. It speaks no protocol itself, so it counts rsync, Unison or SFTP as well.
 */
import { type Server, createServer, connect } from 'node:net';
import { tapProxy } from '../../harness/tap-proxy.ts';

export interface WireCounts {
  up: number;
  down: number;
  requests: number;
  upgrades: number;
  connections: number;
  /** requests by "METHOD /path" (the query left out) */
  routes: Record<string, number>;
}

export interface CountingProxy {
  server: Server;
  port: number;
  url: string;
  counts: WireCounts;
  reset(): void;
  close(): Promise<void>;
}

export async function countingProxy(target: { host: string; port: number }): Promise<CountingProxy> {
  const counts: WireCounts = { up: 0, down: 0, requests: 0, upgrades: 0, connections: 0, routes: {} };
  const proxy = await tapProxy(target, () => {
    counts.connections++;
    let ws = false;
    return {
      up: (d) => {
        counts.up += d.length;
        if (ws) return;
        const text = d.toString('latin1');
        const reqs = text.match(/(^|\r\n)(GET|POST|DELETE|PUT) \/[^ ]* HTTP\/1\.1\r\n/g) ?? [];
        counts.requests += reqs.length;
        for (const r of reqs) {
          const [method, path] = r.trim().split(' ');
          const route = `${method} ${path.split('?')[0]}`;
          counts.routes[route] = (counts.routes[route] ?? 0) + 1;
        }
        if (/\r\nupgrade: websocket\r\n/i.test(text)) {
          ws = true;
          counts.upgrades++;
        }
      },
      down: (d) => void (counts.down += d.length),
    };
  });
  return {
    server: proxy.server,
    port: proxy.port,
    url: `http://127.0.0.1:${proxy.port}`,
    counts,
    reset: () => Object.assign(counts, { up: 0, down: 0, requests: 0, upgrades: 0, connections: 0, routes: {} }),
    close: () => proxy.close(),
  };
}

/** What the proxy adds to a round trip here: the median of `n` sequential 1-byte echoes over
 *  loopback, direct and through a counting proxy, ms. A chatty protocol pays it per round trip. */
export async function proxyRoundTrip(n = 200): Promise<{ directMs: number; proxiedMs: number }> {
  const echo = createServer((s) => s.on('data', (d) => s.write(d)).on('error', () => s.destroy()));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
  const port = (echo.address() as { port: number }).port;
  const px = await countingProxy({ host: '127.0.0.1', port });
  const time = async (p: number): Promise<number> => {
    const s = connect(p, '127.0.0.1');
    await new Promise((r) => s.once('connect', r));
    s.setNoDelay(true);
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await new Promise<void>((r) => (s.once('data', () => r()), s.write('x')));
      ms.push(performance.now() - t0);
    }
    s.destroy();
    ms.sort((a, b) => a - b);
    return ms[ms.length >> 1];
  };
  try {
    return { directMs: await time(port), proxiedMs: await time(px.port) };
  } finally {
    await px.close();
    echo.close();
  }
}
