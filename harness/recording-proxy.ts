/**
 * A loopback TCP proxy that keeps every byte a server receives (client → server) on every
 * connection, for tests that search what the server was sent (e2e/vault-leak.spec.ts). A
 * connection that upgrades to a WebSocket also keeps its client frames' messages, unmasked and
 * inflated (ws-tap.ts's FrameReader), since a masked frame hides its payload from a search of
 * the raw bytes. It adds and changes nothing on the wire.
 */
import { tapProxy } from './tap-proxy.ts';
import { FrameReader, type TappedFrame } from './ws-tap.ts';

export interface RecordedConnection {
  /** every byte the client sent, in order */
  up: Buffer[];
  /** a WebSocket's client → server frames, their messages readable (empty for plain HTTP) */
  frames: TappedFrame[];
}

export interface RecordingProxy {
  /** http://127.0.0.1:PORT: the target's address through the proxy */
  url: string;
  connections: RecordedConnection[];
  /** what each connection received: its raw bytes, then each WebSocket message once settled */
  received(): Promise<Buffer[]>;
  close(): Promise<void>;
}

/** Starts a recording proxy in front of `target` (an `http://host:port` URL). */
export async function recordingProxy(target: string): Promise<RecordingProxy> {
  const t = new URL(target);
  const connections: RecordedConnection[] = [];
  const readers: FrameReader[] = [];
  const proxy = await tapProxy({ host: t.hostname, port: Number(t.port) }, () => {
    const rec: RecordedConnection = { up: [], frames: [] };
    connections.push(rec);
    let up: FrameReader | null = null;
    let down: FrameReader | null = null;
    return {
      up: (d) => {
        // a WebSocket is asked for by the connection's first request (RFC 6455 §4.1)
        if (rec.up.length === 0 && /\r\nupgrade: *websocket\r\n/i.test(d.toString('latin1'))) {
          up = new FrameReader('up', rec.frames, () => {});
          down = new FrameReader('down', [], (head) => {
            const ext = /^sec-websocket-extensions:(.*)$/im.exec(head)?.[1] ?? '';
            up!.noTakeover = /client_no_context_takeover/.test(ext);
            down!.noTakeover = /server_no_context_takeover/.test(ext);
          });
          readers.push(up, down);
        }
        rec.up.push(d);
        up?.push(d);
      },
      down: (d) => down?.push(d),
    };
  });
  return {
    url: `http://127.0.0.1:${proxy.port}`,
    connections,
    received: async () => {
      await Promise.all(readers.map((r) => r.done));
      return connections.flatMap((c) => [Buffer.concat(c.up), ...c.frames.map((f) => Buffer.from(f.message))]);
    },
    close: () => proxy.close(),
  };
}
