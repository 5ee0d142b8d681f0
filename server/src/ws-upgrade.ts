/**
 * The WebSocket side of the server: the upgrades to /sync (permessage-deflate unless
 * --no-deflate; /sync?deflate=0 without it, for a client whose file does not compress:
 * docs/protocol.md §1). Each upgrade is checked for its path, Host, origin and sign-in
 * (http/auth.ts) and for the socket limits (http/guard.ts SocketLimits); an accepted socket
 * runs its sessions (sessions.ts runConnection) in its user's namespace, each session admitted
 * past capacity or refused as Busy (guard.ts Admission), and a push's commit announced to the
 * user's open pages (http/events.ts).
 */
import type http from 'node:http';
import type { Socket } from 'node:net';
import { type WebSocket, WebSocketServer } from 'ws';
import type { WebSocketLike } from '../../shared/src/transport/conn.ts';
import { ErrorCode, ProtocolError, busyMessage } from '../../shared/src/wire/protocol.ts';
import type { ServerConfig } from './config.ts';
import type { Auth } from './http/auth.ts';
import type { Events } from './http/events.ts';
import { type Admission, type HostCheck, type SocketLimits, clientAddress } from './http/guard.ts';
import type { MemoryBudget } from './memory.ts';
import { type SessionHooks, clientLabel, runConnection } from './sessions.ts';
import type { Store } from './store/store.ts';

/** What the sync sockets run with: the parts startServer (server.ts) makes and shares with the
 *  HTTP app. */
export interface UpgradeParts {
  cfg: ServerConfig;
  auth: Auth;
  hosts: HostCheck;
  /** the store of a user's namespace */
  storeOf: (user: string) => Promise<Store>;
  /** a push's commit is announced to the user's open pages */
  events: Pick<Events, 'changed'>;
  sockets: Pick<SocketLimits, 'admit'>;
  admission: Pick<Admission, 'enter'>;
  budget: MemoryBudget;
  /** a turn of one user's sync sessions (guard.ts Turns), or none */
  turn?: (user: string) => Promise<() => void>;
  /** which proxies are trusted for a client's address (http/app.ts proxyTrust) */
  trusted: (addr: string, hop: number) => boolean;
  log: (e: Record<string, unknown>) => void;
}

/** Answers an upgrade request with a plain HTTP refusal and ends the socket. */
function refuse(socket: Socket, status: number, text: string, why = '', cookies: string[] = []) {
  const set = cookies.map((c) => `Set-Cookie: ${c}\r\n`).join('');
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\n${set}Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(why)}\r\n\r\n${why}`);
}

export class SyncSockets {
  private wss: WebSocketServer;
  private wssRaw: WebSocketServer;
  /** each open sync WebSocket, and whether it is in a session (between its start and end hooks) */
  private open = new Map<WebSocket, { busy: boolean }>();
  private closing = false;

  constructor(private parts: UpgradeParts) {
    const { cfg } = parts;
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: cfg.maxMessage,
      perMessageDeflate: cfg.deflate ? { threshold: 256, serverMaxWindowBits: 15, concurrencyLimit: 4 } : false,
    });
    this.wssRaw = new WebSocketServer({ noServer: true, maxPayload: cfg.maxMessage, perMessageDeflate: false });
  }

  /** The HTTP server's 'upgrade' handler. */
  readonly upgrade = (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
    const { auth, hosts, log } = this.parts;
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname !== '/sync') return refuse(socket, 404, 'Not Found');
    const wrongHost = hosts.refusal(req.headers.host);
    if (wrongHost) return refuse(socket, 403, 'Forbidden', wrongHost);
    if (!auth.originAllowed(req)) return refuse(socket, 403, 'Forbidden');
    if (auth.tossed(req)) return refuse(socket, 401, 'Unauthorized', 'two session cookies: sign in again', auth.cookieLines(req));
    auth.identify(req).then(
      (user) => (user ? this.accept(req, socket, head, url, user) : refuse(socket, 401, 'Unauthorized')),
      (e) => {
        log({ error: 'upgrade', message: (e as Error).message });
        refuse(socket, 503, 'Service Unavailable');
      },
    );
  };

  /** Admits `user`'s socket and runs its sessions. */
  private accept(req: http.IncomingMessage, socket: Socket, head: Buffer, url: URL, user: string) {
    const { cfg, auth, storeOf, events, sockets, admission, budget, turn, trusted, log } = this.parts;
    const release = sockets.admit(user, clientAddress(req, trusted));
    if (typeof release === 'string') return refuse(socket, 503, 'Service Unavailable', release);
    socket.once('close', release);
    (url.searchParams.get('deflate') === '0' ? this.wssRaw : this.wss).handleUpgrade(req, socket, head, (ws) => {
      const state = { busy: false };
      this.open.set(ws, state);
      ws.once('close', () => this.open.delete(ws));
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
          if (this.closing) ws.close(1001, 'server stopping');
          if (ended.op === 'push' && ended.version !== undefined) events.changed(user, { kind: 'commit', name: ended.name, version: ended.version });
        },
      };
      void runConnection(ws as unknown as WebSocketLike, socket, storeOf(user), cfg, (e) => log({ user, ...e }), {
        authorized: () => auth.identifyCached(req) === user,
        signedOut: auth.ended(req, ws, user),
        budget,
        turn: turn && (() => turn(user)),
        client: clientLabel(url.searchParams.get('client')),
        hooks,
      });
    });
  }

  /** Sockets in a session now. */
  private busy(): number {
    return [...this.open.values()].filter((st) => st.busy).length;
  }

  /** Closes every socket: one between sessions at once, one in a session when its session ends
   *  or after `graceMs`, whichever comes first (then it is cut off). How many open sessions
   *  finished and how many were cut off. */
  async close(graceMs: number): Promise<{ finished: number; abandoned: number }> {
    this.closing = true;
    for (const [ws, st] of this.open) if (!st.busy) ws.close(1001, 'server stopping');
    const inSession = this.busy();
    const deadline = performance.now() + graceMs;
    while (this.busy() && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const abandoned = this.busy();
    for (const c of [...this.wss.clients, ...this.wssRaw.clients]) c.terminate();
    this.wss.close();
    this.wssRaw.close();
    return { finished: inSession - abandoned, abandoned };
  }
}
