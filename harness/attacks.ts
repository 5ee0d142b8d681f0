// Hostile clients (harness: shared by the tests and bench/hostile/probe.ts, not a test itself):
// a Checksum List of the finest chunking sent as fast as the server takes it, sockets that
// open and say nothing, plain HTTP requests with any method and headers, and reading the
// Error and close a hostile message ends in.
import http from 'node:http';
import WebSocket from 'ws';
import { encode } from '../shared/src/wire/codec.ts';
import { Msg, Op, PROTOCOL_VERSION } from '../shared/src/wire/protocol.ts';

/** The finest chunking a client may ask for (docs/protocol.md §2): the most chunks per byte. */
export const FINEST = { min: 64, avg: 256, max: 1024, op: 0, every: 16 };

export interface ListAttack {
  /** chunks the server took before it refused or the list was out */
  sent: number;
  /** the server's Error, if it sent one */
  error?: { code: number; message: string };
  /** closes the socket */
  close(): void;
}

/**
 * Sends a Checksum List of `chunks` chunks of 256 bytes (the finest chunking) for a new name,
 * 65 536 entries per message, without ChecksumsEnd, and holds the socket open: what a server
 * keeps for a list it has not seen the end of. Resolves once the list is out or the server
 * refused it.
 */
export function sendChecksumList(wsUrl: string, chunks: number, name: string): Promise<ListAttack> {
  return new Promise((resolve) => {
    const ws = new WebSocket(wsUrl + '?deflate=0', { perMessageDeflate: false });
    let sent = 0;
    let error: ListAttack['error'];
    const done = () => resolve({ sent, error, close: () => ws.terminate() });
    ws.on('message', (d: Buffer) => {
      if (d[0] === Msg.Error) error = { code: d.readUInt16LE(1), message: d.subarray(5).toString() };
    });
    ws.on('close', done);
    ws.on('error', () => {});
    ws.on('open', async () => {
      ws.send(encode({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: FINEST, algo: 3, size: chunks * 256, basisVersion: 0, name }));
      const batch = 65_536;
      const lengths = new Uint32Array(batch).fill(256);
      const fastfps = new Uint32Array(batch);
      for (let k = 0; k < batch; k++) fastfps[k] = (Math.random() * 2 ** 32) >>> 0;
      while (sent < chunks && !error && ws.readyState === WebSocket.OPEN) {
        const n = Math.min(batch, chunks - sent);
        fastfps[0] = sent; // no two messages alike
        ws.send(encode({ type: Msg.Checksums, fastfps: fastfps.subarray(0, n), lengths: lengths.subarray(0, n) }));
        sent += n;
        while (ws.bufferedAmount > 4 << 20 && ws.readyState === WebSocket.OPEN) await new Promise((r) => setTimeout(r, 5));
      }
      // the server has read what it will read once its reply or a pause of 300 ms comes
      await new Promise((r) => setTimeout(r, 300));
      done();
    });
  });
}

/** An HTTP request with any headers (Host included) from a chosen local address. */
export function request(url: string, o: { method?: string; headers?: Record<string, string>; body?: unknown; localAddress?: string } = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = http.request(url, { method: o.method ?? (body ? 'POST' : 'GET'), localAddress: o.localAddress, headers: { ...(body && { 'content-type': 'application/json' }), ...o.headers } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The first Error message a socket gets (code and message) and its close code. */
export function errorAndClose(ws: WebSocket): Promise<{ error?: number; message?: string; close: number }> {
  return new Promise((resolve) => {
    let error: number | undefined;
    let message: string | undefined;
    ws.on('message', (d: Buffer) => {
      if (d[0] === Msg.Error && error === undefined) ((error = d.readUInt16LE(1)), (message = d.subarray(5).toString()));
    });
    ws.on('close', (close) => resolve({ error, message, close }));
    ws.on('error', () => {});
  });
}

/** Opens `n` sockets from `localAddress` that never send anything; resolves with the open ones
 *  and how many were refused (their HTTP status). */
export async function silentSockets(wsUrl: string, n: number, localAddress: string) {
  const open: WebSocket[] = [];
  const refused: number[] = [];
  await Promise.all(
    Array.from({ length: n }, () =>
      new Promise<void>((resolve) => {
        const ws = new WebSocket(wsUrl, { localAddress });
        ws.on('open', () => (open.push(ws), resolve()));
        ws.on('unexpected-response', (_q, res) => (refused.push(res.statusCode!), resolve()));
        ws.on('error', () => resolve());
      }),
    ),
  );
  return { open, refused };
}
