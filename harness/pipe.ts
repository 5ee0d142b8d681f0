// A TCP pipe between a client and a server (harness: shared by the tests). On a loopback port
// the OS picks, it passes each connection's bytes both ways to the server `to` names for it,
// with backpressure, and lets a test count the connections and the bytes from the client, cut
// a connection after some of them, or hold a connection's bytes after its first ones (the
// WebSocket upgrade) until a promise resolves: a network that fails mid-upload, a load
// balancer that sends a retry to another server, or a slow link, at a moment the test chooses.
import net from 'node:net';

export interface PipeOptions {
  /** the server's port for the n-th connection (0: the first) */
  to: (n: number) => number;
  /** called with each piece of bytes from the client once connection n has sent `seen` bytes
   *  in all (this piece included): true cuts the connection, both sides, before the piece is
   *  passed on; a promise holds the piece and the connection's further bytes until it
   *  settles, then cuts on true */
  cut?: (n: number, seen: number) => boolean | Promise<boolean>;
  /** read once connection n's first bytes are passed on: a promise to hold its further bytes
   *  until, or null */
  hold?: (n: number) => Promise<void> | null;
}

export interface Pipe {
  port: number;
  /** `ws://127.0.0.1:PORT/sync`, for the client library */
  wsUrl: string;
  /** connections so far */
  connections: number;
  /** bytes from clients so far (all connections) */
  fromClient: number;
  close(): void;
}

/** Opens a pipe in front of the servers `o.to` names. */
export async function socketPipe(o: PipeOptions): Promise<Pipe> {
  const server = net.createServer((c) => {
    const n = pipe.connections++;
    const up = net.connect(o.to(n), '127.0.0.1');
    let seen = 0;
    let held = false;
    const cutNow = () => (c.destroy(), up.destroy());
    const pass = (d: Buffer, first: boolean) => {
      if (!up.write(d)) c.pause();
      const hold = first ? o.hold?.(n) : null;
      if (hold) {
        held = true;
        c.pause();
        void hold.then(() => {
          held = false;
          c.resume();
        });
      }
    };
    c.on('data', (d: Buffer) => {
      const first = seen === 0;
      seen += d.length;
      pipe.fromClient += d.length;
      const cut = o.cut?.(n, seen) ?? false;
      if (cut === true) return cutNow();
      if (cut === false) return pass(d, first);
      // held until the test's event: no 'data' while paused
      held = true;
      c.pause();
      void cut.then(
        (yes) => {
          held = false;
          if (yes) return cutNow();
          pass(d, first);
          if (!held && !up.writableNeedDrain) c.resume();
        },
        () => cutNow(),
      );
    });
    up.on('drain', () => held || c.resume());
    up.on('data', (d) => c.write(d) || up.pause());
    c.on('drain', () => up.resume());
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
    c.on('close', () => up.destroy());
    up.on('close', () => c.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const pipe: Pipe = { port, wsUrl: `ws://127.0.0.1:${port}/sync`, connections: 0, fromClient: 0, close: () => server.close() };
  return pipe;
}

/**
 * A pipe in front of the server `to` names that can hold a connection mid-upload: `holdAt`
 * resolves once the next connection to have sent `bytes` in all (an upload's, well into its
 * Delta Bytes) is held right there, with its release: false passes the held bytes on, true
 * cuts the connection. A test acts mid-upload on every machine, however fast or loaded.
 */
export async function holdingPipe(to: () => number): Promise<Pipe & { holdAt(bytes: number): Promise<(cut: boolean) => void> }> {
  let waiting: { bytes: number; reached: (release: (cut: boolean) => void) => void } | undefined;
  const pipe = await socketPipe({
    to,
    cut: (_n, seen) => {
      const w = waiting;
      if (!w || seen < w.bytes) return false;
      waiting = undefined;
      return new Promise<boolean>((r) => w.reached(r));
    },
  });
  return Object.assign(pipe, { holdAt: (bytes: number) => new Promise<(cut: boolean) => void>((reached) => (waiting = { bytes, reached })) });
}
