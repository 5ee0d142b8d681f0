/**
 * A loopback TCP proxy that passes every byte between a client and `target` both ways as it is
 * (Nagle off on both sockets) and shows each piece to its connection's taps first: what the
 * counting proxy (bench/lib/proxy.ts), the WebSocket tap (ws-tap.ts) and the recording proxy
 * (recording-proxy.ts) share.
 */
import { type Server, type Socket, connect, createServer } from 'node:net';

/** One connection's taps: each piece of bytes from the client (`up`) or the target (`down`). */
export interface Taps {
  up?(d: Buffer): void;
  down?(d: Buffer): void;
}

export interface TapProxy {
  server: Server;
  port: number;
  close(): Promise<void>;
}

/** Starts a proxy in front of `target`; `taps` is called once per connection. */
export function tapProxy(target: { host: string; port: number }, taps: () => Taps): Promise<TapProxy> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    open.add(client).add(upstream);
    const t = taps();
    client.on('data', (d: Buffer) => {
      t.up?.(d);
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      t.down?.(d);
      client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        server,
        port: (server.address() as { port: number }).port,
        close: () =>
          new Promise<void>((r) => {
            for (const s of open) s.destroy();
            server.close(() => r());
          }),
      }),
    ),
  );
}
