/**
 * Live updates for open pages: `GET /api/events` is a stream of server-sent events of the
 * signed-in user's namespace.
 *
 *   event: change   data: {"kind":"commit","name":"a.txt","version":3}   (or rename/delete/restore;
 *                         kind "changed" with no name when another process changed the store)
 *   event: vault    data: {"id":"<vault id>","counter":7}   a vault's head was written (its
 *                         counter: the head's number); nothing else of the vault is named
 *   event: ping     data: {}     every heartbeatMs, so the page can tell a dead connection
 *
 * Changes come from two places, so that several server processes can serve one store:
 * - in this process, at once: `changed(user, change)` (the sync connection's commits, the REST
 *   endpoints' renames and deletes), `vaultHead(user, id, counter)` (a vault head written);
 * - from other processes: while a namespace has subscribers, its store's change marker is
 *   read every pollMs, and a new marker is announced as kind "changed". The marker is the
 *   store's `changeToken()`, a cheap value that changes on every commit, rename and delete.
 */
import type express from 'express';
import type { Change, VaultHeadEvent } from '../../../shared/src/wire/api.ts';

export type { Change, VaultHeadEvent };

/** What events.ts uses of a store (Store.changeToken). */
export interface ChangeHooks {
  /** a namespace-wide marker that changes whenever any process commits, renames or deletes */
  changeToken(): Promise<string>;
}

export interface EventsOptions {
  pollMs?: number;
  heartbeatMs?: number;
  /** open event streams per user; more are refused with 503 */
  maxSubscribersPerUser?: number;
}

interface Namespace {
  subscribers: Set<express.Response>;
  timer: NodeJS.Timeout;
  token: string | null;
}

export class Events {
  private namespaces = new Map<string, Namespace>();
  private readonly pollMs: number;
  private readonly heartbeatMs: number;
  private readonly maxSubscribers: number;
  private heartbeat: NodeJS.Timeout | null = null;

  constructor(
    private readonly storeOf: (user: string) => Promise<ChangeHooks>,
    opts: EventsOptions = {},
  ) {
    this.pollMs = opts.pollMs ?? 1000;
    this.heartbeatMs = opts.heartbeatMs ?? 3000;
    this.maxSubscribers = opts.maxSubscribersPerUser ?? 16;
  }

  /** Tells `user`'s open pages about a change made in this process. */
  changed(user: string, change: Change) {
    const ns = this.namespaces.get(user);
    if (ns) this.send(ns, 'change', change);
  }

  /** Tells `user`'s open pages that vault `id`'s head is now head `counter` (this process wrote
   *  it); the pages with that vault unlocked read the head and check it themselves. */
  vaultHead(user: string, id: string, counter: number) {
    const ns = this.namespaces.get(user);
    if (ns) this.send(ns, 'vault', { id, counter } satisfies VaultHeadEvent);
  }

  /** The express handler of GET /api/events (after authentication: `req.user` is set);
   *  `signedOut` ends the stream (logout, a revoked account). */
  readonly handler = async (req: express.Request & { user?: string }, res: express.Response, signedOut?: AbortSignal) => {
    const user = req.user!;
    let ns = this.namespaces.get(user);
    if (ns && ns.subscribers.size >= this.maxSubscribers) return void res.status(503).json({ error: 'too many open event streams' });
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' });
    // the page reconnects a second after a lost stream
    res.write(`retry: 1000\nevent: ping\ndata: {}\n\n`);
    try {
      ns ??= await this.open(user);
    } catch {
      return void res.end(); // the store cannot be opened: the page reconnects later
    }
    if (res.destroyed || signedOut?.aborted) {
      if (!res.destroyed) res.end();
      if (!ns.subscribers.size) this.drop(user, ns);
      return;
    }
    ns.subscribers.add(res);
    req.socket.setNoDelay(true);
    res.on('close', () => this.leave(user, res));
    signedOut?.addEventListener('abort', () => res.end(), { once: true });
  };

  /** Ends every stream (the server is closing). */
  close() {
    for (const [user, ns] of this.namespaces) {
      for (const res of ns.subscribers) res.end();
      this.drop(user, ns);
    }
  }

  private async open(user: string): Promise<Namespace> {
    const store = await this.storeOf(user);
    const existing = this.namespaces.get(user);
    if (existing) return existing;
    const ns: Namespace = { subscribers: new Set(), token: null, timer: setInterval(() => void this.poll(ns, store), this.pollMs) };
    this.namespaces.set(user, ns);
    void this.poll(ns, store);
    this.heartbeat ??= setInterval(() => {
      for (const n of this.namespaces.values()) this.send(n, 'ping', {});
    }, this.heartbeatMs);
    return ns;
  }

  private async poll(ns: Namespace, store: ChangeHooks) {
    let token: string;
    try {
      token = await store.changeToken();
    } catch {
      return; // the next poll tries again; the page keeps what it shows
    }
    if (ns.token !== null && token !== ns.token) this.send(ns, 'change', { kind: 'changed' });
    ns.token = token;
  }

  private leave(user: string, res: express.Response) {
    const ns = this.namespaces.get(user);
    if (!ns) return;
    ns.subscribers.delete(res);
    if (!ns.subscribers.size) this.drop(user, ns);
  }

  private drop(user: string, ns: Namespace) {
    clearInterval(ns.timer);
    this.namespaces.delete(user);
    if (!this.namespaces.size && this.heartbeat) {
      clearInterval(this.heartbeat);
      this.heartbeat = null;
    }
  }

  private send(ns: Namespace, event: string, data: object) {
    const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const res of ns.subscribers) res.write(frame);
  }
}

