/**
 * The Dsync server: express for the web client's files and the REST API, ws on /sync for the
 * three-phase protocol (permessage-deflate on by default).
 *
 *   GET /api/health                       {"ok":true,...}
 *   GET /api/config                       chunking defaults and limits, for clients
 *   GET /api/files                        [{name, latest, size, versions, mtime}]
 *   GET /api/versions?name=N              [{version, size, mtime, root, algo}]
 *   GET /api/download?name=N[&version=V]  the bytes of a version (latest by default)
 */
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import express from 'express';
import { WebSocketServer } from 'ws';
import '../../shared/src/wasm.ts';
import { ALGO_NAMES, DEFAULT_ALGO, DEFAULT_PARAMS, PROTOCOL_VERSION } from '../../shared/src/protocol.ts';
import type { ServerConfig } from './config.ts';
import { Store } from './store.ts';
import { runSession } from './sync.ts';

export interface RunningServer {
  url: string;
  port: number;
  store: Store;
  close(): Promise<void>;
}

export async function startServer(cfg: ServerConfig, log: (e: Record<string, unknown>) => void = () => {}): Promise<RunningServer> {
  const store = await new Store(path.join(cfg.data, 'ns', 'local')).open();
  const app = express();
  app.disable('x-powered-by');

  app.get('/api/health', (_req, res) => {
    res.json({ ok: true, protocol: PROTOCOL_VERSION });
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
  app.get('/api/files', async (_req, res, next) => {
    try {
      res.json(await store.list());
    } catch (e) {
      next(e);
    }
  });
  app.get('/api/versions', async (req, res, next) => {
    try {
      const name = String(req.query.name ?? '');
      const v = await store.versions(name);
      if (!v.length) return void res.status(404).json({ error: `${name} does not exist` });
      res.json(v);
    } catch (e) {
      next(e);
    }
  });
  app.get('/api/download', async (req, res, next) => {
    try {
      const name = String(req.query.name ?? '');
      const version = req.query.version ? Number(req.query.version) : await store.latest(name);
      if (!Number.isInteger(version) || version < 1 || !(await store.versionNumbers(name)).includes(version)) {
        return void res.status(404).json({ error: `${name} has no version ${req.query.version ?? ''}`.trim() });
      }
      res.setHeader('Content-Disposition', `attachment; filename*=UTF-8''${encodeURIComponent(path.basename(name))}`);
      res.sendFile(path.resolve(store.dataPath(name, version)), { dotfiles: 'allow' });
    } catch (e) {
      next(e);
    }
  });
  if (existsSync(cfg.staticDir)) app.use(express.static(cfg.staticDir));
  app.use((err: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    log({ error: 'http', message: err.message });
    res.status(500).json({ error: 'internal error' });
  });

  const server = http.createServer(app);
  const wss = new WebSocketServer({
    server,
    path: '/sync',
    maxPayload: cfg.maxMessage,
    perMessageDeflate: cfg.deflate ? { threshold: 256, serverMaxWindowBits: 15, concurrencyLimit: 4 } : false,
  });
  wss.on('connection', (ws, req) => {
    void runSession(ws, req.socket, store, cfg, log);
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
    store,
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
