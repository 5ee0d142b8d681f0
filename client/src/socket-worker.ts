/**
 * The socket worker: the sync worker's WebSockets, each opened, fed and read here
 * (worker-socket.ts is the sync worker's side). A browser moves a WebSocket's bytes only when
 * the thread that owns it turns its event loop; in the sync worker those turns wait for the
 * chunking, so the socket stood still while the file was chunked. Here nothing else runs.
 */
import { DrainRate } from '../../shared/src/transport/drain-rate.ts';
import type { FromSocket, ToSocket } from './worker-socket.ts';
import { WORKER_READY } from './worker-start.ts';

const scope = self as unknown as Worker;
const post = (m: FromSocket, transfer: Transferable[] = []) => scope.postMessage(m, transfer);
scope.postMessage(WORKER_READY);

/** How often a socket holding bytes reports how many it still holds (`WorkerSocket.bufferedAmount`). */
const REPORT_MS = 4;

interface Socket {
  ws: WebSocket;
  /** bytes taken from the sync worker */
  got: number;
  reporting: boolean;
  /** the rate it sends at, sampled at each report */
  drain: DrainRate;
}
const sockets = new Map<number, Socket>();

/** Reports the bytes `s` took and still holds, and the rate it sends at, again every REPORT_MS
 *  while it holds some. */
function report(id: number, s: Socket) {
  const buffered = s.ws.bufferedAmount;
  s.drain.see(s.got, buffered);
  post({ ev: 'sent', id, got: s.got, buffered, rate: s.drain.rate() });
  s.reporting = buffered > 0 && sockets.has(id);
  if (s.reporting) setTimeout(() => report(id, s), REPORT_MS);
}

scope.onmessage = (e: MessageEvent<ToSocket>) => {
  const m = e.data;
  if (m.op === 'open') {
    let ws: WebSocket;
    try {
      ws = new WebSocket(m.url);
    } catch (err) {
      post({ ev: 'error', id: m.id, message: (err as Error).message });
      post({ ev: 'close', id: m.id, code: 1006, reason: '' });
      return;
    }
    ws.binaryType = 'arraybuffer';
    const s: Socket = { ws, got: 0, reporting: false, drain: new DrainRate() };
    sockets.set(m.id, s);
    ws.onopen = () => post({ ev: 'open', id: m.id, extensions: ws.extensions });
    ws.onmessage = (ev: MessageEvent<ArrayBuffer | string>) => post({ ev: 'message', id: m.id, data: ev.data }, typeof ev.data === 'string' ? [] : [ev.data]);
    ws.onerror = () => post({ ev: 'error', id: m.id });
    ws.onclose = (ev) => {
      sockets.delete(m.id);
      post({ ev: 'close', id: m.id, code: ev.code, reason: ev.reason });
    };
    return;
  }
  const s = sockets.get(m.id);
  if (!s) return; // closed meanwhile: the sync worker learns it from the close
  try {
    if (m.op === 'send') {
      s.ws.send(m.data);
      s.got += m.data instanceof Blob ? m.data.size : m.data.byteLength;
      if (!s.reporting) report(m.id, s);
    } else s.ws.close(m.code, m.reason);
  } catch (err) {
    // (a close code the browser refuses): that socket fails, the others go on
    post({ ev: 'error', id: m.id, message: (err as Error).message });
    s.ws.close();
  }
};
