/**
 * The Dsync server: startServer composes its parts and listens. The parts, each of which a
 * test can start alone:
 *   - the store (stores.ts Stores): one Store per user's namespace over the opened repo, with
 *     its background gc and journal repair;
 *   - the guard (http/guard.ts): the Host check, the socket limits, the turns of each user's
 *     work, the admission past capacity; with the memory budget (memory.ts) and the sign-in
 *     (http/auth.ts Auth);
 *   - the live events (http/events.ts Events);
 *   - the HTTP app (http/app.ts httpApp): the page's files and the REST API, which its head
 *     lists, with the health check (http/health.ts);
 *   - the WebSocket sessions (ws-upgrade.ts SyncSockets): the upgrades to /sync and the
 *     protocol sessions they run (sessions.ts).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import '../../shared/src/chunking/wasm.ts';
import { type ServerConfig, headCheckIntervalMs } from './config.ts';
import { httpApp, proxyTrust } from './http/app.ts';
import { Auth } from './http/auth.ts';
import { Events } from './http/events.ts';
import { Admission, HostCheck, SocketLimits, Turns, viaHttps } from './http/guard.ts';
import { storeHealth } from './http/health.ts';
import { MemoryBudget } from './memory.ts';
import { type Repo, openStore } from './store/repo.ts';
import type { Store } from './store/store.ts';
import { Stores } from './stores.ts';
import { SyncSockets } from './ws-upgrade.ts';

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

/** `repo`: a store opened by the caller (tests over a faulty backend); by default `cfg.store`'s.
 *  `listen`: how the HTTP server takes its connections, resolving to the port they come to
 *  (a worker of `--workers N`: from its primary, cluster.ts); by default it listens on
 *  `cfg.port` at `cfg.host`. */
export async function startServer(cfg: ServerConfig, log: (e: Record<string, unknown>) => void = () => {}, repo?: Repo, listen?: (server: http.Server) => Promise<number>): Promise<RunningServer> {
  const ours = !repo;
  repo ??= await openStore(cfg);
  repo.log = log;
  const trusted = proxyTrust(cfg);
  let auth: Auth;
  try {
    auth = new Auth(cfg.users, repo.backend, (req) => viaHttps(req, trusted), cfg.allowedOrigins.split(',').filter(Boolean), cfg, log);
  } catch (e) {
    if (ours) await repo.close(); // a bad users file: the process exits with nothing left open
    throw e;
  }
  const stores = new Stores(repo, cfg, log);
  const storeOf = stores.of;
  const hosts = new HostCheck(cfg.allowedHosts, cfg.host);
  const events = new Events(storeOf);
  const sockets = new SocketLimits(cfg);
  // one user's sync sessions run a few at a time, and so do their file requests, apart, so
  // that the page's listing never waits for its own uploads (single-user mode: one user,
  // nobody to be fair to)
  const turns = !auth.singleUser && cfg.maxRunningPerUser ? new Turns(cfg.maxRunningPerUser) : null;
  const turnOf = (work: 'sync' | 'files') => (turns ? (user: string) => turns.take(`${work} ${user}`) : undefined);
  const budget = new MemoryBudget(cfg.memoryBudget, cfg.maxSessionMemory);
  // sync sessions and file requests at work at once, all users together: past --max-sessions,
  // or with the thread saturated (--max-load), a new one is refused as busy (docs/deploy.md
  // says which requests count and why)
  const admission = new Admission(cfg.maxSessions, cfg.maxLoad, cfg.maxAdmissionWaitMs);
  let port = 0;
  const health = storeHealth(repo.backend, cfg, () => port, log);
  const app = httpApp({ cfg, auth, hosts, storeOf, backend: repo.backend, events, health, sockets, admission, turn: turnOf('files'), log });
  const sync = new SyncSockets({ cfg, auth, hosts, storeOf, events, sockets, admission, budget, turn: turnOf('sync'), trusted, log });

  const server = http.createServer({ headersTimeout: cfg.headTimeoutMs, connectionsCheckingInterval: headCheckIntervalMs(cfg) }, app);
  server.on('upgrade', sync.upgrade);
  port = listen
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
      stores.stop();
      auth.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const ended = await sync.close(graceMs);
      events.close();
      admission.close();
      server.closeAllConnections();
      await closed;
      await stores.close();
      return ended;
    },
  };
}
