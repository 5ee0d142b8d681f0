/**
 * The server's HTTP app (express): the web client's files and the REST API. Every request is
 * checked for its Host, origin and identity (auth.ts) and served from its user's namespace;
 * the WebSocket upgrades to /sync are not its part (server/src/ws-upgrade.ts).
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
 *   /api/vaults/…                           a vault's wrapped key, packs and head (http/vaults.ts,
 *                                          docs/vaults.md "The server")
 * JSON answers of COMPRESS_JSON_MIN_BYTES or more go compressed (br or gzip) to a client that
 * accepts it (`compressJson`); the event stream and downloads never. Every response carries SECURITY_HEADERS: no page may frame this one, no response is read
 * as another type than it says or loaded by another site's page, and the page runs only its
 * own scripts. docs/deploy.md, "What the server protects against", says what each is for.
 */
import { existsSync } from 'node:fs';
import zlib from 'node:zlib';
import express from 'express';
import { ALGO_NAMES, DEFAULT_ALGO, DEFAULT_PARAMS, PROTOCOL_VERSION } from '../../../shared/src/wire/protocol.ts';
import { COMPRESS_JSON_BROTLI_QUALITY, COMPRESS_JSON_MIN_BYTES } from '../../../shared/src/base/limits.ts';
import type { ServerConfig } from '../config.ts';
import type { Store } from '../store/store.ts';
import type { Auth } from './auth.ts';
import type { Events } from './events.ts';
import { filesApi } from './files-api.ts';
import { vaultsApi } from './vaults.ts';
import type { Backend } from '../store/backend.ts';
import type { Admission, HostCheck, SocketLimits } from './guard.ts';

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

/** What the HTTP app serves with: the parts startServer (server.ts) makes and shares with the
 *  WebSocket sessions. */
export interface AppParts {
  cfg: ServerConfig;
  auth: Auth;
  hosts: HostCheck;
  /** the store of a user's namespace */
  storeOf: (user: string) => Promise<Store>;
  /** the store's backend, where the vaults' objects are (http/vaults.ts) */
  backend: Backend;
  /** the live changes; a rename, delete or restore here is announced to the user's pages */
  events: Events;
  /** the store's health: null, or why not (health.ts storeHealth) */
  health: () => Promise<string | null>;
  /** the open sync sockets, for GET /api/metrics */
  sockets: Pick<SocketLimits, 'of'>;
  /** file requests, like sync sessions, enter past capacity as busy (guard.ts) */
  admission: Pick<Admission, 'enter'>;
  /** a turn of one user's file requests (guard.ts Turns), or none */
  turn?: (user: string) => Promise<() => void>;
  log: (e: Record<string, unknown>) => void;
}

/** How express reads --trust-proxy ('true': the loopback proxies). */
const trustSetting = (cfg: Pick<ServerConfig, 'trustProxy'>) => (cfg.trustProxy === 'true' ? 'loopback' : cfg.trustProxy || false);

/** Which proxies the app trusts for a client's address and scheme (express compiles the
 *  setting), for the parts that read a request outside the app: the WebSocket upgrade and
 *  Auth's https check use the app's own rule. */
export function proxyTrust(cfg: Pick<ServerConfig, 'trustProxy'>): (addr: string, hop: number) => boolean {
  return express().set('trust proxy', trustSetting(cfg)).get('trust proxy fn');
}

/** The HTTP app: security headers, compressed JSON, the health check, the Host and sign-in
 *  guard, the REST API (the routes at the head of this file), the page's files, then 404 and the
 *  error answer. */
export function httpApp({ cfg, auth, hosts, storeOf, backend, events, health, sockets, admission, turn, log }: AppParts): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', trustSetting(cfg));

  app.use((req, res, next) => {
    res.set(SECURITY_HEADERS);
    if (cfg.trustProxy && req.secure) res.setHeader('Strict-Transport-Security', HSTS);
    next();
  });
  app.use('/api', compressJson);

  // health before the Host check: load balancers' checks often send no Host (HAProxy's), and
  // the answer tells a rebinding page nothing
  app.get('/api/health', async (_req, res) => {
    const trouble = await health();
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
  app.use('/api', filesApi(storeOf, log, turn, () => admission.enter()));
  app.use('/api', vaultsApi(backend, cfg, log, turn, () => admission.enter(), (user, id, counter) => events.vaultHead(user, id, counter)));
  if (existsSync(cfg.staticDir)) app.use(express.static(cfg.staticDir));
  // express' own 404 page would replace the security headers' CSP with its own
  app.use((_req, res) => void res.status(404).json({ error: 'not found' }));
  app.use((err: Error & { status?: number; expose?: boolean }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    // a request the body parser refuses (413 too large, 400 not JSON) is the client's error
    if (err.status && err.status >= 400 && err.status < 500) return void res.status(err.status).json({ error: err.expose ? err.message : 'bad request' });
    log({ error: 'http', message: err.message });
    res.status(500).json({ error: 'internal error' });
  });
  return app;
}
