/**
 * `dsync serve --workers N`: N server processes on one port (node:cluster). The primary process
 * serves nothing itself: it listens, reads the request line of each new connection, and hands
 * the connection, with the bytes it read, to a worker; it restarts a worker that dies, and
 * passes SIGINT/SIGTERM on so that every worker closes cleanly.
 *
 * Which worker: a sync connection with a routing hint (`/sync?route=R`, shared/src/transport/route.ts)
 * goes to worker R mod N, so that one file's pushes and pulls meet the caches of the process
 * that served the last (the version index it wrote, the bytes of its new segment, the ranges
 * it verified: without them, a push costs a worker half as much CPU again,
 * bench/results/load/capacity.md); a hint whose worker is down (dead, restarting) goes to
 * R mod the live ones. Every other connection (no hint, another path, a request line that is
 * not HTTP) goes round-robin, and a worker's parser answers what it is. A connection whose
 * request line is not in within --head-timeout-ms, or longer than MAX_HEAD_BYTES, is closed by
 * the primary. The hint is a hint only: it chooses a process, and nothing else reads it.
 *
 * The hand-over (the socket sent to the worker, the bytes read put back in front of it) is the
 * pattern of @socket.io/sticky, written out here because that package does not fit: it needs a
 * Socket.IO server and routes by its session ids, relays plain HTTP requests through the
 * primary, waits for a first chunk with no bound on time or size, passes it on as text, and
 * leaves the socket reading while it is sent on, so that bytes arriving meanwhile (a request
 * body right behind its head) are lost.
 *
 * Every worker is a whole server: the store is shared through the backend (safe for several
 * processes, docs/store.md), while what a server keeps in memory is its own: the counts behind
 * maxConnections and maxSessionsPerUser, the page's login sessions, and the chunk-index caches.
 *
 * The default is 1 worker, i.e. the plain single process: its limits, memory and logs are those
 * of one process, as an operator who has not asked for more expects. `--workers 0` starts one
 * worker per core.
 */
import cluster, { type Worker } from 'node:cluster';
import type http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { availableParallelism } from 'node:os';
import { ROUTE_PARAM, routeNumber } from '../../shared/src/transport/route.ts';
import { MAX_HEAD_BYTES } from './config.ts';

/** A worker that dies is restarted after this delay, doubled at each death in a row... */
const RESTART_DELAY_MS = 100;
/** ...up to this much, */
const RESTART_DELAY_MAX_MS = 30_000;
/** ...and back to the first delay once a worker has lived this long. */
const HEALTHY_AFTER_MS = 60_000;
/** On SIGINT/SIGTERM, workers still running after this long are killed. */
const STOP_GRACE_MS = 10_000;

/** The number of worker processes `--workers` asks for: 0 is one per core. */
export function workerCount(workers: number): number {
  if (!Number.isSafeInteger(workers) || workers < 0) throw new Error(`--workers must be a whole number, got ${workers}`);
  return workers === 0 ? availableParallelism() : workers;
}

/** True in a process forked by `superviseWorkers`. */
export const inWorker = (): boolean => cluster.isWorker;

/** The environment variable that tells a worker the port its primary listens on. */
const PORT_ENV = 'DSYNC_PRIMARY_PORT';

/** A primary's message to a worker: the connection sent with it, and the bytes read from it. */
interface Handed {
  dsync: 'connection';
  /** base64 */
  head: string;
}

/**
 * In a worker: `server` takes the connections the primary hands it (startServer's `listen`).
 * Each is given to the HTTP server as a new connection with the bytes the primary read put
 * back into its stream (unshift), so that its parser reads the request whole: Node's HTTP
 * server hands the socket's handle to its parser, which reads later bytes from it directly,
 * and the stream's 'data' (the bytes put back) to the same parser on the next tick, before any
 * I/O can bring more. Resolves to the primary's port.
 */
export function takeConnections(server: http.Server): Promise<number> {
  process.on('message', (m: Handed, socket: unknown) => {
    if (m?.dsync !== 'connection' || !(socket instanceof net.Socket)) return;
    try {
      // as a server sets up a connection it accepts itself: an HTTP server's allow half-open
      // ones (a client may end its side after its request and still read the answer) and
      // send without Nagle's delay
      const own = server as unknown as { allowHalfOpen: boolean; noDelay: boolean };
      socket.allowHalfOpen = own.allowHalfOpen;
      if (own.noDelay) socket.setNoDelay(true);
      socket.unshift(Buffer.from(m.head, 'base64'));
      server.emit('connection', socket);
    } catch {
      socket.destroy(); // a socket that closed on its way here
    }
  });
  // Node's HTTP server starts tracking its connections (the head and request timeouts,
  // closeIdleConnections, closeAllConnections) when it listens; this one never does itself
  server.emit('listening');
  return Promise.resolve(Number(process.env[PORT_ENV]));
}

/** In a worker, once it serves: tells the primary, which announces the server once all have. */
export function workerReady(): void {
  process.send?.({ dsync: 'ready' });
}

/**
 * The routing hint of a request's first bytes, if they hold a whole request line: a number
 * for `GET /sync?route=R …` (R: route.ts), null for any other line; undefined until the line
 * is complete.
 */
export function routeOfHead(head: Buffer): number | null | undefined {
  const end = head.indexOf(10);
  if (end < 0) return undefined;
  const line = head.subarray(0, end).toString('latin1').replace(/\r$/, '');
  const m = /^GET (\/[^ ?#]*)(?:\?([^ #]*))?(?:#[^ ]*)? HTTP\/1\.1$/.exec(line);
  if (!m || m[1] !== '/sync') return null;
  return routeNumber(new URLSearchParams(m[2] ?? '').get(ROUTE_PARAM));
}

/**
 * In the first process of `dsync serve --workers N` with N > 1: listens, forks the workers,
 * routes the connections to them and supervises them until SIGINT/SIGTERM, and resolves to
 * true; the caller then serves nothing. Resolves to false in a worker and when one process is
 * asked for: the caller serves. Rejects when the port cannot be listened on.
 */
export async function superviseWorkers(cfg: { workers: number; host: string; port: number; headTimeoutMs: number }, log: (e: Record<string, unknown>) => void): Promise<boolean> {
  const n = workerCount(cfg.workers);
  if (cluster.isWorker || n === 1) return false;

  let stopping = false;
  let failed = false;
  let announced = false;
  /** per worker slot: its worker once it serves, consecutive deaths, when its worker started */
  const slots = Array.from({ length: n }, () => ({ serving: null as Worker | null, deaths: 0, started: 0 }));
  const slotOf = new Map<Worker, number>();
  /** connections whose request line is being read */
  const reading = new Set<net.Socket>();
  let turn = 0;

  /** The worker of a connection: by its hint, else the next in turn; null while none serves. */
  const workerFor = (route: number | null): Worker | null => {
    const live = slots.filter((s) => s.serving);
    if (!live.length) return null;
    if (route === null) return live[turn++ % live.length].serving;
    return slots[route % n].serving ?? live[route % live.length].serving;
  };

  const hand = (socket: net.Socket, head: Buffer, route: number | null) => {
    const w = workerFor(route);
    if (!w) return void socket.destroy();
    w.send({ dsync: 'connection', head: head.toString('base64') } satisfies Handed, socket, (err: Error | null) => err && socket.destroy());
  };

  const take = (socket: net.Socket) => {
    reading.add(socket);
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      clearTimeout(timer);
      reading.delete(socket);
      socket.removeListener('data', onData);
    };
    const timer = setTimeout(() => {
      done();
      socket.destroy();
    }, cfg.headTimeoutMs);
    const onData = (b: Buffer) => {
      chunks.push(b);
      size += b.length;
      if (!b.includes(10) && size < MAX_HEAD_BYTES) return;
      done();
      // Not a byte more may be read here: what the client sends next is the worker's to read
      // (a request body, the next request). A paused socket reads on until its handle stops.
      socket.pause();
      (socket as unknown as { _handle?: { readStop(): number } })._handle?.readStop();
      const head = Buffer.concat(chunks, size);
      const route = routeOfHead(head);
      if (route === undefined) return void socket.end('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n', () => socket.destroy());
      hand(socket, head, route);
    };
    socket.on('data', onData);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      clearTimeout(timer);
      reading.delete(socket);
    });
    socket.resume();
  };

  // pauseOnConnect: nothing is read before `take` listens, and nothing after it hands over
  const server = net.createServer({ pauseOnConnect: true }, take);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(cfg.port, cfg.host, () => resolve());
  });
  server.on('error', (e) => log({ error: 'listen', message: e.message }));
  const port = (server.address() as AddressInfo).port;

  const fork = (slot: number) => {
    const w = cluster.fork({ [PORT_ENV]: String(port) });
    slotOf.set(w, slot);
    slots[slot].started = Date.now();
  };

  cluster.on('message', (w, m: { dsync?: string }) => {
    const slot = slotOf.get(w);
    if (m?.dsync !== 'ready' || slot === undefined) return;
    slots[slot].serving = w;
    if (announced || slots.some((s) => !s.serving)) return;
    announced = true;
    const host = cfg.host === '0.0.0.0' || cfg.host === '::' ? '127.0.0.1' : cfg.host;
    console.log(`dsync server on http://${host}:${port} (${n} workers)`);
  });

  cluster.on('exit', (w, code, signal) => {
    const slot = slotOf.get(w)!;
    slotOf.delete(w);
    if (slots[slot].serving === w) slots[slot].serving = null;
    if (!announced && !stopping) {
      // A worker that cannot start (a bad setting, an unreachable store) has said why on
      // stderr; the others would fail alike, so the command fails as one process would.
      failed = true;
      stop('SIGTERM');
    }
    if (stopping) {
      if (slotOf.size === 0) process.exit(failed ? 1 : 0);
      return;
    }
    const s = slots[slot];
    if (Date.now() - s.started >= HEALTHY_AFTER_MS) s.deaths = 0;
    const delay = Math.min(RESTART_DELAY_MS * 2 ** s.deaths, RESTART_DELAY_MAX_MS);
    s.deaths++;
    log({ event: 'worker-exit', pid: w.process.pid, code, signal, restartInMs: delay });
    setTimeout(() => stopping || fork(slot), delay).unref();
  });

  const stop = (sig: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    server.close();
    for (const s of reading) s.destroy();
    for (const w of slotOf.keys()) w.process.kill(sig);
    if (slotOf.size === 0) process.exit(failed ? 1 : 0);
    setTimeout(() => {
      for (const w of slotOf.keys()) w.process.kill('SIGKILL');
    }, STOP_GRACE_MS).unref();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));

  for (let i = 0; i < n; i++) fork(i);
  return true;
}
