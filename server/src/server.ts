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
 *   GET  /api/metrics                      open connections, sessions, memory
 *   GET  /api/events                       live changes of the namespace (server/src/events.ts)
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
import { Events } from './events.ts';
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
  const auth = new Auth(cfg.users, cfg.allowedOrigins.split(',').filter(Boolean));
  const stores = new Map<string, Promise<Store>>();
  const storeOf = (user: string) => {
    let s = stores.get(user);
    if (!s) stores.set(user, (s = new Store(path.join(cfg.data, 'ns', user), cfg.resumeWindowMs).open()));
    return s;
  };
  if (auth.singleUser) await storeOf('local'); // fail at start-up if the data directory is unusable
  const events = new Events(storeOf);
  const sessionsOf = new Map<string, number>();
  let connections = 0;

  const app = express();
  app.disable('x-powered-by');
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
  // a rename, delete or restore that succeeded is announced to the user's open pages at once
  app.use('/api/files', (req: Req, res, next) => {
    if (req.method !== 'GET') res.on('finish', () => res.statusCode < 400 && events.changed(req.user!, { kind: 'changed' }));
    next();
  });
  app.post('/api/login', express.json({ limit: '4kb' }), (req, res) => {
    const { name, password } = (req.body ?? {}) as { name?: unknown; password?: unknown };
    const sid = typeof name === 'string' && typeof password === 'string' ? auth.login(name, password) : null;
    if (!sid) return void res.status(401).json({ error: 'wrong name or password' });
    res.setHeader('Set-Cookie', `${SESSION_COOKIE}=${sid}; HttpOnly; SameSite=Strict; Path=/`);
    res.json({ user: name });
  });
  app.post('/api/logout', (req, res) => {
    auth.logout(req);
    res.setHeader('Set-Cookie', `${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`);
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
  app.get('/api/metrics', (_req, res) => {
    const m = process.memoryUsage();
    res.json({ connections, sessions: Object.fromEntries(sessionsOf), rssBytes: m.rss, heapUsedBytes: m.heapUsed });
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
  app.get('/api/events', events.handler);
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
  const refuse = (socket: Socket, status: number, text: string) => {
    socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };
  server.on('upgrade', (req, socket: Socket, head) => {
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname !== '/sync') return refuse(socket, 404, 'Not Found');
    if (!auth.originAllowed(req)) return refuse(socket, 403, 'Forbidden');
    const user = auth.identify(req);
    if (!user) return refuse(socket, 401, 'Unauthorized');
    if (connections >= cfg.maxConnections || (sessionsOf.get(user) ?? 0) >= cfg.maxSessionsPerUser) {
      return refuse(socket, 503, 'Service Unavailable');
    }
    connections++;
    sessionsOf.set(user, (sessionsOf.get(user) ?? 0) + 1);
    const release = () => {
      connections--;
      const n = (sessionsOf.get(user) ?? 1) - 1;
      if (n) sessionsOf.set(user, n);
      else sessionsOf.delete(user);
    };
    socket.once('close', release);
    (url.searchParams.get('deflate') === '0' ? wssRaw : wss).handleUpgrade(req, socket, head, (ws) => {
      void runConnection(ws as unknown as WebSocketLike, socket, storeOf(user), cfg, (e) => {
        if (e.op === 'push' && typeof e.version === 'number') events.changed(user, { kind: 'commit', name: String(e.name), version: e.version });
        log({ user, ...e });
      }, () => auth.identify(req) === user);
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
        events.close();
        for (const st of stores.values()) await (await st).dropSuspended();
        wss.close();
        wssRaw.close();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
