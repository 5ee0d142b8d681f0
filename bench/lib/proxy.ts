// A TCP proxy for the benches that run `dsync` against a real `dsync serve`: it counts bytes
// each way, HTTP requests (by "METHOD /path" too) and WebSocket upgrades.
import { type Server, type Socket, createServer, connect } from 'node:net';

export interface ProxyCounts {
  up: number;
  down: number;
  requests: number;
  upgrades: number;
  /** requests by "METHOD /path" (the query left out) */
  routes: Record<string, number>;
}

/** A TCP proxy to `target` counting bytes each way and HTTP requests (request lines seen at the
 *  start of a client chunk on a connection that is not a WebSocket). */
export function proxy(target: URL): Promise<{ server: Server; url: string; counts: ProxyCounts; reset(): void }> {
  const counts: ProxyCounts = { up: 0, down: 0, requests: 0, upgrades: 0, routes: {} };
  const server = createServer((client: Socket) => {
    const upstream = connect(Number(target.port), target.hostname);
    let ws = false;
    client.on('data', (d) => {
      counts.up += d.length;
      if (!ws) {
        const text = d.toString('latin1');
        const reqs = text.match(/(^|\r\n)(GET|POST|DELETE|PUT) \/[^ ]* HTTP\/1\.1\r\n/g) ?? [];
        counts.requests += reqs.length;
        for (const r of reqs) {
          const [method, target] = r.trim().split(' ');
          const route = `${method} ${target.split('?')[0]}`;
          counts.routes[route] = (counts.routes[route] ?? 0) + 1;
        }
        if (/\r\nupgrade: websocket\r\n/i.test(text)) {
          ws = true;
          counts.upgrades++;
        }
      }
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      counts.down += d.length;
      client.write(d);
    });
    const end = () => (client.destroy(), upstream.destroy());
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      ok({ server, url: `http://127.0.0.1:${port}`, counts, reset: () => Object.assign(counts, { up: 0, down: 0, requests: 0, upgrades: 0, routes: {} }) });
    }),
  );
}
