/**
 * The Dsync server: express for the web client's files and the REST API, ws on /sync for the
 * three-phase protocol (permessage-deflate on by default). Every request and upgrade is
 * checked for origin and identity (server/src/http/auth.ts) and served from its user's namespace.
 *
 *   GET  /api/health                       {"ok":true,...} (no authentication); 503 {"ok":false,
 *        "error"} when the store fails a small read within healthTimeoutMs or a small write
 *        within healthWriteTimeoutMs
 *   POST /api/login  {"name","password"}   sets the session cookie      POST /api/logout
 *   GET  /api/whoami                       {"user", "singleUser"}
 *   GET  /api/config                       chunking defaults and limits, for clients
 *   GET  /api/files?prefix=P&cursor=C&limit=L[&recursive=1]
 *        {files: [{name, latest, size, versions, mtime, modified?}], folders: ["P/sub/", …], next, complete: true}
 *        (mtime: the latest version's commit time; modified: its file's modification time, ms)
 *        one folder P ('' or ending in '/'; one store read per page) in name order after C,
 *        at most L (default 1000, at most 10 000) files and folders together; next: the
 *        cursor of the next page or null. recursive=1: every file and folder below P. A page is
 *        whole (complete: true) or the request fails with 503 {error: "the store failed: …"};
 *        a stored name the server would refuse is left out (and logged). The last page of a
 *        recursive listing carries {cursor, digest} (docs/protocol.md §9).
 *   POST /api/files/changes {prefix, since} {changes: [{folder, files, folders}], cursor,
 *        digest, complete: true, held} or {reset: true}: the folders below prefix changed
 *        since the cursor `since` (docs/protocol.md §9); 400 for a malformed cursor
 *   GET  /api/search?q=Q[&cursor=C&limit=L] {files, next}: files whose path contains Q
 *        (store/search.ts); 503 "the store failed: …" when a catalog cannot be read
 *   POST /api/files/bulk[?client=L]        bulk frames of small files up, {results: [{name, version} |
 *        {name, error, code, conflict?}]}: one group commit (docs/protocol.md §10, http/bulk.ts)
 *   POST /api/files/bulk-read {files: [{name, version}]} bulk frames of their bytes (§10)
 *   GET  /api/versions?name=N              [{version, size, mtime, modified?, root, algo, change, client?}]
 *   GET  /api/download?name=N[&version=V]  the bytes of a version (latest by default), verified
 *   DELETE /api/files?name=N[&version=V][&latest=L] {removed: [versions]}: one version, or the
 *        file; latest=L: only while its latest version is L (409 otherwise, checked in the swap)
 *   POST /api/files/move {from, to[, version | versions]} {moved: n[, versions]}: a
 *        file, or a folder ("a/" to "b/"); version: the file moves only while its latest
 *        version is that (409 otherwise); `to` must not exist, be a folder that lists
 *        something, or lie under a file (409); versions {rel: version} (a folder): only while
 *        the folder holds exactly those files at those latest versions and nothing is at `to`
 *        (409, nothing moved); the answer's versions: the numbers the latest got at `to`
 *   POST /api/files/restore {name, version} {version}: a new version with those bytes;
 *        {name} of a file or folder in the trash (".dsync-trash/STAMP/PATH[/]"): {restored,
 *        skipped}: each file back at PATH with its history, unless that name is taken again
 *   POST /api/folders {name}               {folder: "F/"}: an empty folder, listed while empty
 *        (409 when F or a parent of it is a file)
 *   DELETE /api/folders?name=F[/]          {folder, removed: [names]}: every file under F
 * (files-api.ts). Errors are {error, code?} (code: the refusal's name, e.g. StaleBasis for a
 * stale version, Inconsistent for a name that exists): 400 bad request, 404 no such file or
 * version, 409 a name that exists, a file where a folder is (or the reverse) or a stale
 * basis, 500 a damaged store or a failing backend, 503 "the store failed: …" for a listing the
 * store could not answer whole, 503 with Retry-After "the server is busy; retry in N s" past
 * capacity (guard.ts Admission).
 *   GET  /api/metrics                      the caller's open sync sockets (and in single-user
 *                                          mode, where the user runs the server, its memory)
 *   GET  /api/events                       live changes of the namespace (server/src/http/events.ts)
 * JSON answers of COMPRESS_JSON_MIN_BYTES or more go compressed (br or gzip) to a client that
 * accepts it (`compressJson`); the event stream and downloads never. Every response carries SECURITY_HEADERS: no page may frame this one, no response is read
 * as another type than it says or loaded by another site's page, and the page runs only its
 * own scripts. docs/deploy.md, "What the server protects against", says what each is for.
 */
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import zlib from 'node:zlib';
import express from 'express';
import { WebSocketServer } from 'ws';
import '../../shared/src/chunking/wasm.ts';
import type { WebSocketLike } from '../../shared/src/transport/conn.ts';
import { ALGO_NAMES, DEFAULT_ALGO, DEFAULT_PARAMS, ErrorCode, PROTOCOL_VERSION, ProtocolError, busyMessage } from '../../shared/src/wire/protocol.ts';
import { COMPRESS_JSON_BROTLI_QUALITY, COMPRESS_JSON_MIN_BYTES } from '../../shared/src/base/limits.ts';
import { Auth } from './http/auth.ts';
import { HEALTH_CACHE_MS, HEALTH_WRITE_CACHE_MS, type ServerConfig, headCheckIntervalMs } from './config.ts';
import { filesApi } from './http/files-api.ts';
import { Store } from './store/store.ts';
import { type Repo, openStore } from './store/repo.ts';
import { runGc } from './store/gc.ts';
import { MARK_REPAIR_INTERVAL_MS, MARK_SETTLE_MS, repairMarked } from './store/journal.ts';
import { StoreTimeoutError, withTimeout } from './store/backend.ts';
import { GC_STATE, healthKey } from './store/keys.ts';
import { Events } from './http/events.ts';
import { type SessionHooks, clientLabel, runConnection } from './sessions.ts';
import { Admission, HostCheck, SocketLimits, Turns, clientAddress, viaHttps } from './http/guard.ts';
import { MemoryBudget } from './memory.ts';

export interface RunningServer {
  url: string;
  port: number;
  /** the store of a user's namespace (`local` in single-user mode) */
  storeOf(user: string): Promise<Store>;
  repo: Repo;
  /** Stops listening and closes every connection: one between sessions at once, one in a
   *  session when its session ends or after `graceMs` (default 0), whichever comes first.
   *  Tells how many open sessions finished and how many were cut off. */
  close(graceMs?: number): Promise<{ finished: number; abandoned: number }>;
}

type Req = express.Request & { user?: string };

/** What the page needs: its own scripts, styles, worker and WebSocket ('self' covers ws: and
 *  wss: of its own host), WebAssembly compiled from its own fetched module ('wasm-unsafe-eval',
 *  no eval of strings), the data: icon and blob: URLs of downloaded files; nothing may frame it. */
export const PAGE_CSP = [
  "default-src 'self'",
  "script-src 'self' 'wasm-unsafe-eval'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "worker-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Headers of every response. */
export const SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy': PAGE_CSP,
  // for browsers without CSP's frame-ancestors
  'X-Frame-Options': 'DENY',
  // a download is never run as a script or style because of what its bytes look like
  'X-Content-Type-Options': 'nosniff',
  // no other site's page may load a response (<script src>, <img>), not even to tell whether it exists
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Referrer-Policy': 'no-referrer',
};
/** HSTS on https responses through a trusted proxy: a year, this host only. */
const HSTS = 'max-age=31536000';

/**
 * The REST API's JSON answers (`res.json`) of COMPRESS_JSON_MIN_BYTES or more, compressed for a
 * client that accepts it: br (at COMPRESS_JSON_BROTLI_QUALITY) or else gzip, in zlib's thread
 * pool, as any HTTP API's (a recursive listing of 5 000 files: 6–8 % of its bytes,
 * bench/results/listing-wire.md). Only `res.json` answers: the event stream and downloads write
 * their bytes themselves, and are never buffered nor compressed. A compression that fails sends
 * the answer plain.
 */
function compressJson(req: express.Request, res: express.Response, next: express.NextFunction): void {
  const json = res.json.bind(res);
  res.json = (body: unknown) => {
    const text = JSON.stringify(body);
    if (text === undefined) return json(body);
    // as express' res.json sends it, from the text made once
    const plain = () => (res.get('Content-Type') || res.type('json'), res.send(text));
    if (Buffer.byteLength(text) < COMPRESS_JSON_MIN_BYTES) return plain();
    res.vary('Accept-Encoding');
    const encoding = (['br', 'gzip'] as const).find((e) => req.acceptsEncodings(e) === e);
    if (!encoding) return plain();
    const raw = Buffer.from(text);
    const send = (err: Error | null, packed: Buffer) => {
      if (err) return void plain();
      res.setHeader('Content-Encoding', encoding);
      if (!res.get('Content-Type')) res.setHeader('Content-Type', 'application/json; charset=utf-8');
      res.send(packed);
    };
    if (encoding === 'br') zlib.brotliCompress(raw, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: COMPRESS_JSON_BROTLI_QUALITY, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: raw.length } }, send);
    else zlib.gzip(raw, send);
    return res;
  };
  next();
}

/** `repo`: a store opened by the caller (tests over a faulty backend); by default `cfg.store`'s.
 *  `listen`: how the HTTP server takes its connections, resolving to the port they come to
 *  (a worker of `--workers N`: from its primary, cluster.ts); by default it listens on
 *  `cfg.port` at `cfg.host`. */
export async function startServer(cfg: ServerConfig, log: (e: Record<string, unknown>) => void = () => {}, repo?: Repo, listen?: (server: http.Server) => Promise<number>): Promise<RunningServer> {
  const ours = !repo;
  repo ??= await openStore(cfg);
  repo.log = log;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', cfg.trustProxy === 'true' ? 'loopback' : cfg.trustProxy || false);
  const trusted = app.get('trust proxy fn') as (addr: string, hop: number) => boolean;
  let auth: Auth;
  try {
    auth = new Auth(cfg.users, repo.backend, (req) => viaHttps(req, trusted), cfg.allowedOrigins.split(',').filter(Boolean), cfg, log);
  } catch (e) {
    if (ours) await repo.close(); // a bad users file: the process exits with nothing left open
    throw e;
  }
  const hosts = new HostCheck(cfg.allowedHosts, cfg.host);
  // one Store a user, kept for its caches (similarity traits)
  const stores = new Map<string, Store>();
  const storeOf = async (user: string) => {
    let s = stores.get(user);
    if (!s) stores.set(user, (s = new Store(repo, user)));
    return s;
  };
  // background garbage collection; safe with other processes' commits and collectors (gc.ts)
  let collecting: Promise<unknown> | null = null;
  const gcTimer = cfg.gcIntervalMs
    ? setInterval(() => {
        collecting ??= runGc(repo, { minAgeMs: cfg.gcMinAgeMs, windowMs: cfg.gcWindowMs, repackPercent: cfg.gcRepackPercent, log })
          .catch((e) => log({ gc: 'failed', message: (e as Error).message }))
          .finally(() => (collecting = null));
      }, cfg.gcIntervalMs).unref()
    : null;
  // the marks of head changes a killed process left unlisted (store/journal.ts): noted in
  // their folder catalogs when this server starts, then every minute (those old enough that
  // their change is no longer under way)
  let marking: Promise<unknown> | null = null;
  const noteMarks = (minAgeMs: number) => {
    marking ??= repairMarked(repo, { minAgeMs, log })
      .then(
        (r) => r.noted && log({ event: 'catalogs repaired', ...r }),
        (e) => log({ error: 'journal', message: (e as Error).message }),
      )
      .finally(() => (marking = null));
  };
  noteMarks(0);
  const markTimer = setInterval(() => noteMarks(MARK_SETTLE_MS), MARK_REPAIR_INTERVAL_MS).unref();
  const events = new Events(storeOf);
  const sockets = new SocketLimits(cfg);
  // one user's sync sessions run a few at a time, and so do their file requests, apart, so
  // that the page's listing never waits for its own uploads (single-user mode: one user,
  // nobody to be fair to)
  const turns = !auth.singleUser && cfg.maxRunningPerUser ? new Turns(cfg.maxRunningPerUser) : null;
  const turn = turns ? (user: string, work: 'sync' | 'files') => turns.take(`${work} ${user}`) : undefined;
  const budget = new MemoryBudget(cfg.memoryBudget, cfg.maxSessionMemory);
  // sync sessions and file requests at work at once, all users together: past --max-sessions,
  // or with the thread saturated (--max-load), a new one is refused as busy (docs/deploy.md
  // says which requests count and why)
  const admission = new Admission(cfg.maxSessions, cfg.maxLoad, cfg.maxAdmissionWaitMs);
  // each open sync WebSocket, and whether it is in a session (between its start and end hooks)
  const open = new Map<import('ws').WebSocket, { busy: boolean }>();
  let closing = false;

  app.use((req, res, next) => {
    res.set(SECURITY_HEADERS);
    if (cfg.trustProxy && req.secure) res.setHeader('Strict-Transport-Security', HSTS);
    next();
  });
  app.use('/api', compressJson);

  // The health check's looks at the store (docs/deploy.md): one small read (the gc state, a
  // head every store has or lacks) within healthTimeoutMs, reused for HEALTH_CACHE_MS, and one
  // small write (this server's own probe head, `healthKey`) within healthWriteTimeoutMs,
  // reused for HEALTH_WRITE_CACHE_MS: a store that answers reads while every write fails or
  // hangs (a full disk, a read-only mount, a frozen write path) is not healthy. While a look
  // runs, every check waits for it. Null: the store answers; else why not (for a load
  // balancer: no detail of the store's whereabouts).
  const reader = withTimeout(repo.backend, cfg.healthTimeoutMs);
  const writer = withTimeout(repo.backend, cfg.healthWriteTimeoutMs);
  const cached = (cacheMs: number, run: () => Promise<unknown>, timeoutMs: number, failing: string) => {
    let look: { until: number; trouble: Promise<string | null> } | null = null;
    return (): Promise<string | null> => {
      if (look && performance.now() < look.until) return look.trouble;
      const trouble = run().then(
        () => null,
        (e: Error) => {
          log({ error: 'health', message: e.message });
          return e instanceof StoreTimeoutError ? `the store did not answer within ${timeoutMs} ms` : failing;
        },
      );
      const mine = (look = { until: Infinity, trouble });
      void trouble.then(() => (mine.until = performance.now() + cacheMs));
      return trouble;
    };
  };
  // the probe head's tag as this process last wrote it: the next write swaps it in one request
  let probeTag: string | null = null;
  const writeProbe = async () => {
    const key = healthKey(port);
    const body = Buffer.from(JSON.stringify({ at: new Date().toISOString() }));
    // another process on this host and port (a --workers sibling) may have swapped it since
    for (let k = 0; k < 3; k++) {
      const tag = await writer.putHead(key, body, probeTag);
      if (tag !== null) return void (probeTag = tag);
      probeTag = (await writer.getHead(key))?.tag ?? null;
    }
    throw new Error(`the health probe head ${key} changed under every write`);
  };
  const readTrouble = cached(HEALTH_CACHE_MS, () => reader.getHead(GC_STATE), cfg.healthTimeoutMs, 'the store fails');
  const writeTrouble = cached(HEALTH_WRITE_CACHE_MS, writeProbe, cfg.healthWriteTimeoutMs, 'the store cannot write');
  const storeTrouble = async (): Promise<string | null> => {
    const [r, w] = await Promise.all([readTrouble(), writeTrouble()]);
    return r ?? (w && (w.startsWith('the store did not') ? w.replace('answer', 'finish a write') : w));
  };
  // health before the Host check: load balancers' checks often send no Host (HAProxy's), and
  // the answer tells a rebinding page nothing
  app.get('/api/health', async (_req, res) => {
    const trouble = await storeTrouble();
    if (trouble) return void res.status(503).json({ ok: false, protocol: PROTOCOL_VERSION, error: trouble });
    res.json({ ok: true, protocol: PROTOCOL_VERSION });
  });
  app.use((req, res, next) => {
    const why = hosts.refusal(req.headers.host);
    if (why) return void res.status(403).json({ error: why });
    next();
  });
  app.use('/api', (req: Req, res, next) => {
    if (!auth.originAllowed(req)) return void res.status(403).json({ error: 'cross-origin request refused' });
    if (req.path === '/login') return next();
    if (auth.tossed(req)) return void refuseTossed(req, res);
    auth.identify(req).then((user) => {
      if (!user) return void res.status(401).json({ error: 'authentication required' });
      req.user = user;
      next();
    }, next);
  });
  // a rename, delete or restore that succeeded is announced to the user's open pages at once
  // (not POST /api/files/changes nor /bulk-read: reads, which change nothing)
  app.use(['/api/files', '/api/folders'], (req: Req, res, next) => {
    if (req.method !== 'GET' && !(req.baseUrl === '/api/files' && (req.path === '/changes' || req.path === '/bulk-read'))) res.on('finish', () => res.statusCode < 400 && events.changed(req.user!, { kind: 'changed' }));
    next();
  });
  const refuseTossed = (req: express.Request, res: express.Response) => {
    log({ event: 'cookie-tossed', address: req.ip, path: req.path });
    res.setHeader('Set-Cookie', auth.cookieLines(req));
    res.status(401).json({ error: 'your browser sent two session cookies: another page on this host has set one to sign you in as someone else. They are removed now; sign in again' });
  };
  app.post('/api/login', express.json({ limit: '4kb' }), async (req, res, next) => {
    try {
      const { name, password } = (req.body ?? {}) as { name?: unknown; password?: unknown };
      if (typeof name !== 'string' || typeof password !== 'string') return void res.status(400).json({ error: 'a name and a password are required' });
      const address = req.ip ?? '';
      const out = await auth.login(name, password, address, auth.device(req));
      // names only, never a password; a name is cut to what an account name may be
      const who = { name: name.slice(0, 64), address };
      if ('refused' in out && out.refused === 'busy') {
        const s = Math.ceil(out.retryAfterMs / 1000);
        log({ event: 'login-refused', ...who, reason: 'too many attempts', retryAfterS: s });
        res.setHeader('Retry-After', String(s));
        return void res.status(429).json({ error: `too many login attempts; try again in ${s} s` });
      }
      if (!('sid' in out)) {
        log({ event: 'login-refused', ...who, reason: 'wrong name or password' });
        return void res.status(401).json({ error: 'wrong name or password' });
      }
      log({ event: 'login', user: name, address });
      res.setHeader('Set-Cookie', auth.cookieLines(req, out));
      res.json({ user: name });
    } catch (e) {
      next(e);
    }
  });
  app.post('/api/logout', async (req, res, next) => {
    try {
      await auth.logout(req);
      res.setHeader('Set-Cookie', auth.cookieLines(req));
      res.json({ ok: true });
    } catch (e) {
      next(e);
    }
  });
  app.get('/api/whoami', (req: Req, res) => {
    res.json({ user: req.user, singleUser: auth.singleUser });
  });
  app.get('/api/config', (_req, res) => {
    res.json({
      protocol: PROTOCOL_VERSION,
      params: DEFAULT_PARAMS,
      algo: ALGO_NAMES[DEFAULT_ALGO],
      maxFileSize: cfg.maxFileSize,
      maxMessage: cfg.maxMessage,
      deflate: cfg.deflate,
    });
  });
  // the caller's own sockets only: no user learns another's name or activity; the process'
  // memory only in single-user mode, whose one user is the one who runs the server
  app.get('/api/metrics', (req: Req, res) => {
    if (!auth.singleUser) return void res.json({ user: req.user, connections: sockets.of(req.user!) });
    const m = process.memoryUsage();
    res.json({ user: req.user, connections: sockets.of(req.user!), rssBytes: m.rss, heapUsedBytes: m.heapUsed });
  });
  app.get('/api/events', (req: Req, res) => events.handler(req, res, auth.ended(req, res, req.user!)));
  app.use('/api', filesApi(storeOf, log, turn && ((user) => turn(user, 'files')), () => admission.enter()));
  if (existsSync(cfg.staticDir)) app.use(express.static(cfg.staticDir));
  // express' own 404 page would replace the security headers' CSP with its own
  app.use((_req, res) => void res.status(404).json({ error: 'not found' }));
  app.use((err: Error & { status?: number; expose?: boolean }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    // a request the body parser refuses (413 too large, 400 not JSON) is the client's error
    if (err.status && err.status >= 400 && err.status < 500) return void res.status(err.status).json({ error: err.expose ? err.message : 'bad request' });
    log({ error: 'http', message: err.message });
    res.status(500).json({ error: 'internal error' });
  });

  const server = http.createServer({ headersTimeout: cfg.headTimeoutMs, connectionsCheckingInterval: headCheckIntervalMs(cfg) }, app);
  // /sync with permessage-deflate (unless --no-deflate), and /sync?deflate=0 without it, for
  // a client whose file does not compress (docs/protocol.md §1)
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: cfg.maxMessage,
    perMessageDeflate: cfg.deflate ? { threshold: 256, serverMaxWindowBits: 15, concurrencyLimit: 4 } : false,
  });
  const wssRaw = new WebSocketServer({ noServer: true, maxPayload: cfg.maxMessage, perMessageDeflate: false });
  const refuse = (socket: Socket, status: number, text: string, why = '', cookies: string[] = []) => {
    const set = cookies.map((c) => `Set-Cookie: ${c}\r\n`).join('');
    socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\n${set}Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(why)}\r\n\r\n${why}`);
  };
  server.on('upgrade', (req, socket: Socket, head) => {
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname !== '/sync') return refuse(socket, 404, 'Not Found');
    const wrongHost = hosts.refusal(req.headers.host);
    if (wrongHost) return refuse(socket, 403, 'Forbidden', wrongHost);
    if (!auth.originAllowed(req)) return refuse(socket, 403, 'Forbidden');
    if (auth.tossed(req)) return refuse(socket, 401, 'Unauthorized', 'two session cookies: sign in again', auth.cookieLines(req));
    auth.identify(req).then(
      (user) => (user ? upgrade(req, socket, head, url, user) : refuse(socket, 401, 'Unauthorized')),
      (e) => {
        log({ error: 'upgrade', message: (e as Error).message });
        refuse(socket, 503, 'Service Unavailable');
      },
    );
  });
  const upgrade = (req: http.IncomingMessage, socket: Socket, head: Buffer, url: URL, user: string) => {
    const release = sockets.admit(user, clientAddress(req, trusted));
    if (typeof release === 'string') return refuse(socket, 503, 'Service Unavailable', release);
    socket.once('close', release);
    (url.searchParams.get('deflate') === '0' ? wssRaw : wss).handleUpgrade(req, socket, head, (ws) => {
      const state = { busy: false };
      open.set(ws, state);
      ws.once('close', () => open.delete(ws));
      let leave: (() => void) | undefined;
      const hooks: SessionHooks = {
        start: async () => {
          state.busy = true;
          const place = await admission.enter();
          if (typeof place === 'number') throw new ProtocolError(ErrorCode.Busy, busyMessage(place));
          leave = place;
        },
        end: (ended) => {
          leave?.();
          leave = undefined;
          state.busy = false;
          if (closing) ws.close(1001, 'server stopping');
          if (ended.op === 'push' && ended.version !== undefined) events.changed(user, { kind: 'commit', name: ended.name, version: ended.version });
        },
      };
      void runConnection(ws as unknown as WebSocketLike, socket, storeOf(user), cfg, (e) => log({ user, ...e }), {
        authorized: () => auth.identifyCached(req) === user,
        signedOut: auth.ended(req, ws, user),
        budget,
        turn: turn && (() => turn(user, 'sync')),
        client: clientLabel(url.searchParams.get('client')),
        hooks,
      });
    });
  };

  const port = listen
    ? await listen(server)
    : await new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        server.listen(cfg.port, cfg.host, () => resolve((server.address() as AddressInfo).port));
      });
  const host = cfg.host === '0.0.0.0' || cfg.host === '::' ? '127.0.0.1' : cfg.host;
  return {
    url: `http://${host}:${port}`,
    port,
    storeOf,
    repo,
    async close(graceMs = 0) {
      closing = true;
      if (gcTimer) clearInterval(gcTimer);
      clearInterval(markTimer);
      auth.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      for (const [ws, st] of open) if (!st.busy) ws.close(1001, 'server stopping');
      const busy = () => [...open.values()].filter((st) => st.busy).length;
      const inSession = busy();
      const deadline = performance.now() + graceMs;
      while (busy() && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const abandoned = busy();
      for (const c of [...wss.clients, ...wssRaw.clients]) c.terminate();
      events.close();
      admission.close();
      wss.close();
      wssRaw.close();
      server.closeAllConnections();
      await closed;
      await collecting;
      await marking;
      await repo.close();
      return { finished: inSession - abandoned, abandoned };
    },
  };
}
