/**
 * The Dsync server: express for the web client's files and the REST API, ws on /sync for the
 * three-phase protocol (permessage-deflate on by default). Every request and upgrade is
 * checked for origin and identity (server/src/auth.ts) and served from its user's namespace.
 *
 *   GET  /api/health                       {"ok":true,...} (no authentication)
 *   POST /api/login  {"name","password"}   sets the session cookie      POST /api/logout
 *   GET  /api/whoami                       {"user", "singleUser"}
 *   GET  /api/config                       chunking defaults and limits, for clients
 *   GET  /api/files                        [{name, latest, size, versions, mtime}]
 *   GET  /api/versions?name=N              [{version, size, mtime, root, algo}]
 *   GET  /api/download?name=N[&version=V]  the bytes of a version (latest by default)
 *   GET  /api/metrics                      the caller's open sync sockets, the server's memory
 */
import { existsSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import path from 'node:path';
import express from 'express';
import { WebSocketServer } from 'ws';
import '../../shared/src/wasm.ts';
import type { WebSocketLike } from '../../shared/src/conn.ts';
import { ALGO_NAMES, DEFAULT_ALGO, DEFAULT_PARAMS, PROTOCOL_VERSION, ProtocolError } from '../../shared/src/protocol.ts';
import { Auth, SESSION_COOKIE } from './auth.ts';
import type { ServerConfig } from './config.ts';
import { HostCheck, SocketLimits, clientAddress } from './guard.ts';
import { MemoryBudget } from './memory.ts';
import { validateName } from './names.ts';
import { Store } from './store.ts';
import { runConnection } from './sync.ts';

export interface RunningServer {
  url: string;
  port: number;
  /** the store of a user's namespace (`local` in single-user mode) */
  storeOf(user: string): Promise<Store>;
  close(): Promise<void>;
}

type Req = express.Request & { user?: string };

export async function startServer(cfg: ServerConfig, log: (e: Record<string, unknown>) => void = () => {}): Promise<RunningServer> {
  const auth = new Auth(cfg.users, cfg.allowedOrigins.split(',').filter(Boolean), cfg);
  const hosts = new HostCheck(cfg.allowedHosts, cfg.host);
  const stores = new Map<string, Promise<Store>>();
  const storeOf = (user: string) => {
    let s = stores.get(user);
    if (!s) stores.set(user, (s = new Store(path.join(cfg.data, 'ns', user), cfg.resumeWindowMs).open()));
    return s;
  };
  if (auth.singleUser) await storeOf('local'); // fail at start-up if the data directory is unusable
  const sockets = new SocketLimits(cfg);
  const budget = new MemoryBudget(cfg.memoryBudget, cfg.maxSessionMemory);

  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', cfg.trustProxy === 'true' ? 'loopback' : cfg.trustProxy || false);
  const trusted = app.get('trust proxy fn') as (addr: string, hop: number) => boolean;
  app.use((req, res, next) => {
    const why = hosts.refusal(req.headers.host);
    if (why) return void res.status(403).json({ error: why });
    next();
  });
  app.get('/api/health', (_req, res) => {
    res.json({ ok: true, protocol: PROTOCOL_VERSION });
  });
  app.use('/api', (req: Req, res, next) => {
    if (!auth.originAllowed(req)) return void res.status(403).json({ error: 'cross-origin request refused' });
    if (req.path === '/login') return next();
    const user = auth.identify(req);
    if (!user) return void res.status(401).json({ error: 'authentication required' });
    req.user = user;
    next();
  });
  // Secure behind a TLS proxy (--trust-proxy): the browser then sends it over https only
  const cookieFlags = (req: express.Request) => `HttpOnly; SameSite=Strict; Path=/${req.secure ? '; Secure' : ''}`;
  app.post('/api/login', express.json({ limit: '4kb' }), async (req, res, next) => {
    try {
      const { name, password } = (req.body ?? {}) as { name?: unknown; password?: unknown };
      if (typeof name !== 'string' || typeof password !== 'string') return void res.status(400).json({ error: 'a name and a password are required' });
      const out = await auth.login(name, password, req.ip ?? '');
      if ('refused' in out && out.refused === 'busy') {
        const s = Math.ceil(out.retryAfterMs / 1000);
        res.setHeader('Retry-After', String(s));
        return void res.status(429).json({ error: `too many login attempts; try again in ${s} s` });
      }
      if (!('sid' in out)) return void res.status(401).json({ error: 'wrong name or password' });
      res.setHeader('Set-Cookie', `${SESSION_COOKIE}=${out.sid}; ${cookieFlags(req)}`);
      res.json({ user: name });
    } catch (e) {
      next(e);
    }
  });
  app.post('/api/logout', (req, res) => {
    auth.logout(req);
    res.setHeader('Set-Cookie', `${SESSION_COOKIE}=; ${cookieFlags(req)}; Max-Age=0`);
    res.json({ ok: true });
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
  // the caller's own sockets only: no user learns another's name or activity
  app.get('/api/metrics', (req: Req, res) => {
    const m = process.memoryUsage();
    res.json({ user: req.user, connections: sockets.of(req.user!), rssBytes: m.rss, heapUsedBytes: m.heapUsed });
  });
  const named = (fn: (req: Req, res: express.Response, store: Store, name: string) => Promise<void>) => async (req: Req, res: express.Response, next: express.NextFunction) => {
    try {
      const name = validateName(String(req.query.name ?? ''));
      await fn(req, res, await storeOf(req.user!), name);
    } catch (e) {
      if (e instanceof ProtocolError) return void res.status(400).json({ error: e.message });
      next(e);
    }
  };
  app.get('/api/files', async (req: Req, res, next) => {
    try {
      res.json(await (await storeOf(req.user!)).list());
    } catch (e) {
      next(e);
    }
  });
  app.get(
    '/api/versions',
    named(async (_req, res, store, name) => {
      const v = await store.versions(name);
      if (!v.length) return void res.status(404).json({ error: `${name} does not exist` });
      res.json(v);
    }),
  );
  app.get(
    '/api/download',
    named(async (req, res, store, name) => {
      const version = req.query.version ? Number(req.query.version) : await store.latest(name);
      if (!Number.isInteger(version) || version < 1 || !(await store.versionNumbers(name)).includes(version)) {
        return void res.status(404).json({ error: `${name} has no version ${req.query.version ?? ''}`.trim() });
      }
      res.setHeader('Content-Disposition', `attachment; filename*=UTF-8''${encodeURIComponent(path.basename(name))}`);
      res.setHeader('Content-Type', 'application/octet-stream');
      res.setHeader('Content-Length', String((await store.readIndex(name, version)).size));
      await pipeline(Readable.from(store.stream(name, version)), res);
    }),
  );
  if (existsSync(cfg.staticDir)) app.use(express.static(cfg.staticDir));
  app.use((err: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    log({ error: 'http', message: err.message });
    res.status(500).json({ error: 'internal error' });
  });

  const server = http.createServer(app);
  // /sync with permessage-deflate (unless --no-deflate), and /sync?deflate=0 without it, for
  // a client whose file does not compress (docs/protocol.md §1)
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: cfg.maxMessage,
    perMessageDeflate: cfg.deflate ? { threshold: 256, serverMaxWindowBits: 15, concurrencyLimit: 4 } : false,
  });
  const wssRaw = new WebSocketServer({ noServer: true, maxPayload: cfg.maxMessage, perMessageDeflate: false });
  const refuse = (socket: Socket, status: number, text: string, why = '') => {
    socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(why)}\r\n\r\n${why}`);
  };
  server.on('upgrade', (req, socket: Socket, head) => {
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname !== '/sync') return refuse(socket, 404, 'Not Found');
    const wrongHost = hosts.refusal(req.headers.host);
    if (wrongHost) return refuse(socket, 403, 'Forbidden', wrongHost);
    if (!auth.originAllowed(req)) return refuse(socket, 403, 'Forbidden');
    const user = auth.identify(req);
    if (!user) return refuse(socket, 401, 'Unauthorized');
    const release = sockets.admit(user, clientAddress(req, trusted));
    if (typeof release === 'string') return refuse(socket, 503, 'Service Unavailable', release);
    socket.once('close', release);
    (url.searchParams.get('deflate') === '0' ? wssRaw : wss).handleUpgrade(req, socket, head, (ws) => {
      void runConnection(ws as unknown as WebSocketLike, socket, storeOf(user), cfg, (e) => log({ user, ...e }), { authorized: () => auth.identify(req) === user, signedOut: auth.ended(req), budget });
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(cfg.port, cfg.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = cfg.host === '0.0.0.0' || cfg.host === '::' ? '127.0.0.1' : cfg.host;
  return {
    url: `http://${host}:${port}`,
    port,
    storeOf,
    close: () =>
      new Promise<void>(async (resolve) => {
        for (const c of [...wss.clients, ...wssRaw.clients]) c.terminate();
        for (const st of stores.values()) await (await st).dropSuspended();
        wss.close();
        wssRaw.close();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
