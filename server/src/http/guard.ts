/**
 * What the server checks before it does work for a request:
 *   - `HostCheck`: the Host header names this server. A web page on a name its attacker
 *     controls can point that name at this server's address (DNS rebinding); its requests then
 *     carry the attacker's name as Host and as Origin, so the Origin check alone passes them.
 *     Allowed, as Vite's `server.allowedHosts` does: IP addresses (no name can rebind to one),
 *     `localhost` and `*.localhost`, the machine's host name (and `NAME.local`), the listen
 *     address, and `--allowed-hosts` (a leading '.' allows a domain and its subdomains).
 *   - `LoginLimiter`: login attempts per client address and per account name, with backoff.
 *   - `SocketLimits`: open sync sockets, all together, per user and per user's client address.
 *   - `Turns`: how many sync sessions and store requests of one user run at once.
 *   - `clientAddress`, `viaHttps`: the client's address and scheme, through proxies
 *     `--trust-proxy` trusts.
 */
import type express from 'express';
import { busyMessage } from '../../../shared/src/wire/protocol.ts';
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import net from 'node:net';
import { MAX_CLIENT_LABEL } from '../../../shared/src/base/limits.ts';
import os from 'node:os';

/** A Host header: a DNS name or IPv4 address, or a bracketed IPv6 address, then a port. */
const HOST = /^(?:[a-z0-9-]+(?:\.[a-z0-9-]+)*\.?|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i;

export class HostCheck {
  private names = new Set<string>();
  private domains: string[] = [];

  /** `allowed`: `--allowed-hosts`, comma-separated; `listenHost`: `--host`. */
  constructor(allowed: string, listenHost: string) {
    const host = os.hostname().toLowerCase();
    for (const n of ['localhost', host, `${host}.local`, listenHost.toLowerCase()]) this.names.add(n);
    for (const raw of allowed.split(',')) {
      const entry = raw.trim().toLowerCase();
      if (!entry) continue;
      if (!HOST.test(entry.replace(/^\./, ''))) throw new Error(`--allowed-hosts: "${raw.trim()}" is not a host name`);
      if (entry.startsWith('.')) this.domains.push(entry.slice(1));
      else this.names.add(entry);
    }
  }

  /** Why a request with this Host header is refused, or null when the name is this server's. */
  refusal(hostHeader: string | undefined): string | null {
    if (!hostHeader) return 'the request has no Host header';
    if (!HOST.test(hostHeader)) return `the Host header "${hostHeader.slice(0, 100)}" is not a host name`;
    const name = hostHeader.replace(/:\d+$/, '').replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
    if (net.isIP(name) || name === 'localhost' || name.endsWith('.localhost') || this.names.has(name)) return null;
    if (this.domains.some((d) => name === d || name.endsWith('.' + d))) return null;
    return `this server does not answer to the name "${name}" (a page using it may be a DNS rebinding attack); if it is the server's name, start the server with --allowed-hosts ${name}`;
  }
}

/** The first wait after `free` attempts; each further attempt doubles it, up to the maximum. */
const FIRST_BACKOFF_MS = 1000;
/** A key with no attempt for this long starts afresh. */
const FORGET_MS = 15 * 60_000;
/** Keys remembered at most (the oldest are forgotten first): bounds the limiter's memory. */
const MAX_KEYS = 100_000;

/**
 * Login attempts per key (a client address, an account name). The first `free` attempts of a
 * key are let through at once; after them each attempt must wait its turn: 1 s after the
 * previous one, then 2 s, 4 s, … up to `maxBackoffMs`. An attempt is counted when it starts
 * (so parallel attempts count too); a successful login forgets its keys. A person mistyping a
 * password a few times is never held back for more than `maxBackoffMs`; a flood gets 429s.
 */
export class LoginLimiter {
  private keys = new Map<string, { attempts: number; next: number; last: number }>();

  constructor(
    private free: number,
    private maxBackoffMs: number,
  ) {}

  /** 0 if an attempt under these keys may start now (it is counted), else the milliseconds
   *  until one may. */
  admit(keys: string[], now = Date.now()): number {
    this.forget(now);
    let wait = 0;
    for (const k of keys) wait = Math.max(wait, (this.keys.get(k)?.next ?? 0) - now);
    if (wait > 0) return wait;
    for (const k of keys) {
      const r = this.keys.get(k) ?? { attempts: 0, next: 0, last: 0 };
      r.attempts++;
      r.last = now;
      if (r.attempts >= this.free) r.next = now + Math.min(this.maxBackoffMs, FIRST_BACKOFF_MS * 2 ** (r.attempts - this.free));
      this.keys.delete(k); // re-inserted last: the map stays in order of last attempt
      this.keys.set(k, r);
    }
    return 0;
  }

  /** A login succeeded: its keys start afresh. */
  succeeded(keys: string[]) {
    for (const k of keys) this.keys.delete(k);
  }

  private forget(now: number) {
    for (const [k, r] of this.keys) {
      if (r.last > now - FORGET_MS && this.keys.size <= MAX_KEYS) break;
      this.keys.delete(k);
    }
  }
}

/**
 * Open sync sockets, all users together, per user and per client address. An address's count
 * is kept per user (sockets are opened signed in): one user's sockets never take another's
 * share, so people behind one NAT, or a proxy not named by --trust-proxy, do not lock each
 * other out; in single-user mode, the one user, it is the address's.
 */
export class SocketLimits {
  private total = 0;
  private perUser = new Map<string, number>();
  private perAddress = new Map<string, number>();

  constructor(private cfg: { maxConnections: number; maxSessionsPerUser: number; maxSessionsPerAddress: number }) {}

  /** Counts a new socket and returns its release, or the reason it is refused. */
  admit(user: string, address: string): (() => void) | string {
    if (this.total >= this.cfg.maxConnections) return `the server holds its limit of ${this.cfg.maxConnections} sync connections`;
    if ((this.perUser.get(user) ?? 0) >= this.cfg.maxSessionsPerUser) return `this user holds its limit of ${this.cfg.maxSessionsPerUser} sync connections`;
    const at = `${user} ${address}`;
    if ((this.perAddress.get(at) ?? 0) >= this.cfg.maxSessionsPerAddress) return `this address holds its limit of ${this.cfg.maxSessionsPerAddress} sync connections`;
    this.total++;
    bump(this.perUser, user, 1);
    bump(this.perAddress, at, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      bump(this.perUser, user, -1);
      bump(this.perAddress, at, -1);
    };
  }

  /** Open sync sockets of one user. */
  of(user: string): number {
    return this.perUser.get(user) ?? 0;
  }
}

/**
 * Turns of work per user: at most `perKey` pieces of work under one key (a user's sync
 * sessions, or a user's file requests) run at once; the rest wait, in order, for one of that
 * key's to end. A user flooding the server with sessions then competes with any other user's
 * work with `perKey` of them, not with all of them (the process' one thread, the store's
 * reads, writes and fsyncs in libuv's pool), so a heavy user slows mostly themselves; the
 * flood itself goes no slower, as its commits to one folder no longer race each other. Sockets,
 * messages and memory have their own limits (SocketLimits, the memory budget); this bounds the
 * work in progress.
 */
export class Turns {
  private running = new Map<string, number>();
  private waiting = new Map<string, (() => void)[]>();

  constructor(private perKey: number) {}

  /** Waits for a turn under `key`; returns its end (idempotent). */
  async take(key: string): Promise<() => void> {
    const n = this.running.get(key) ?? 0;
    if (n < this.perKey) this.running.set(key, n + 1);
    else {
      const q = this.waiting.get(key) ?? [];
      this.waiting.set(key, q);
      await new Promise<void>((r) => q.push(r)); // the turn passes on with its count
    }
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const q = this.waiting.get(key);
      const next = q?.shift();
      if (q && !q.length) this.waiting.delete(key);
      if (next) next();
      else bump(this.running, key, -1);
    };
  }
}

/**
 * Admission of work, all users together, in this process: sync sessions and the file requests
 * that do store work (files-api.ts), each one place. A piece of work runs on the process' one
 * thread and waits on the store; past what the process can serve, each admitted one would
 * only take longer (and hold its memory longer) without more of them finishing per second.
 * So at most `limit` pieces run at once, and `limit` follows the thread's saturation. Every
 * LOAD_SAMPLE_MS it looks at the thread's recent utilisation (event-loop utilisation) and the
 * process' recent CPU time per wall time, each a running mean with half the weight on the last
 * sample (so saturation counts from its third sample: a burst arriving together, a page's
 * downloads or a folder's pushes, is admitted together):
 *
 *   - the thread busy more than `maxLoad`, with MIN_RUNNING or more running: the limit halves
 *     (from the most that ran, if fewer), so the work admitted next shares the thread with few others;
 *     never below MIN_RUNNING while the process used the thread's time itself (its CPU time
 *     above half of `maxLoad`), and never below BURST_RUNNING while it did not (the
 *     machine's other processes took the time: refusing work would not relieve them);
 *   - otherwise, when the limit was reached, it grows by one, or doubles while the thread was
 *     mostly idle (busy less than half of `maxLoad`), up to `max`; a thread mostly idle with
 *     the limit not reached admits at least BURST_RUNNING again (where it starts).
 *
 * Work waiting on its client (a phone uploading for minutes) or on a store far away leaves the
 * thread idle, so the limit grows past it. Past the limit, new work is refused (Busy, or 503
 * with Retry-After, with the seconds to wait), except while the thread is mostly idle: then up
 * to `limit` pieces wait, in order, up to `maxWaitMs` for a place (one that ends, or the limit
 * growing), so a burst at low load is served, not refused. Past capacity the thread is never
 * idle, nothing waits, and the admitted work keeps near its unloaded speed. `max` bounds all
 * admitted work whatever the thread does (memory, sockets, the store's connections).
 */
export class Admission {
  running = 0;
  /** how many pieces of work may run now: MIN_RUNNING..max (or max, if lower) */
  limit: number;
  /** a running mean of a piece of work's wall time, ms */
  private meanMs = 0;
  /** the thread's recent utilisation, and the process' CPU time per wall time, 0..1 */
  private busy = 0;
  private used = 0;
  /** whether the last sample found the thread mostly idle (busy less than half of `maxLoad`) */
  private room = true;
  /** the most pieces of work running at once since the last sample */
  private peak = 0;
  private waiting: { resolve: (place: (() => void) | number) => void; timer: NodeJS.Timeout }[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly top: number;
  /** the limit of a thread with room, until work reaches it */
  private readonly resting: number;

  constructor(
    readonly max: number,
    readonly maxLoad: number,
    readonly maxWaitMs: number,
  ) {
    this.top = max > 0 ? max : Infinity;
    this.resting = Math.min(this.top, BURST_RUNNING);
    this.limit = this.top;
    if (maxLoad > 0 && maxLoad < 1) {
      this.limit = this.resting;
      let elu = performance.eventLoopUtilization();
      let cpu = process.cpuUsage();
      let t = performance.now();
      this.timer = setInterval(() => {
        const [elu1, cpu1, t1] = [performance.eventLoopUtilization(), process.cpuUsage(), performance.now()];
        // half the weight on the last sample: saturation counts from the third sample of it,
        // so a burst arriving together (a page's downloads, a folder's pushes) is admitted
        // together
        const busy = (this.busy = (this.busy + performance.eventLoopUtilization(elu1, elu).utilization) / 2);
        const used = (this.used = (this.used + (cpu1.user - cpu.user + cpu1.system - cpu.system) / 1000 / Math.max(1, t1 - t)) / 2);
        [elu, cpu, t] = [elu1, cpu1, t1];
        this.room = busy < maxLoad / 2;
        // the least the limit falls to: MIN_RUNNING when the process used most of the
        // thread's busy time itself, BURST_RUNNING when other processes took it
        const least = used > maxLoad / 2 ? MIN_RUNNING : BURST_RUNNING;
        if (busy > maxLoad) {
          if (this.peak >= MIN_RUNNING) this.limit = Math.min(this.limit, Math.max(least, Math.floor(Math.min(this.limit, this.peak) / 2)));
        } else if (this.peak >= this.limit) this.limit = Math.min(this.top, this.room ? this.limit * 2 : this.limit + 1);
        else if (this.room) this.limit = Math.max(this.limit, this.resting);
        this.peak = this.running;
        this.admitWaiting();
      }, LOAD_SAMPLE_MS).unref();
    }
  }

  /** A place for new work (its end, idempotent), or the whole seconds to wait. */
  async enter(): Promise<(() => void) | number> {
    if (this.running < this.limit && !this.waiting.length) return this.take();
    if (!this.room || this.maxWaitMs <= 0 || this.waiting.length >= this.limit) return this.retryAfterS();
    return new Promise((resolve) => {
      const w = {
        resolve,
        timer: setTimeout(() => {
          this.waiting.splice(this.waiting.indexOf(w), 1);
          resolve(this.retryAfterS());
        }, this.maxWaitMs),
      };
      this.waiting.push(w);
    });
  }

  private take(): () => void {
    this.running++;
    this.peak = Math.max(this.peak, this.running);
    const t0 = performance.now();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.running--;
      this.meanMs += (performance.now() - t0 - this.meanMs) / 16;
      this.admitWaiting();
    };
  }

  private admitWaiting() {
    while (this.running < this.limit && this.waiting.length) {
      const w = this.waiting.shift()!;
      clearTimeout(w.timer);
      w.resolve(this.take());
    }
  }

  /** When a place is likely free again: the mean time of a piece of work, in whole seconds, at least 1.
   *  Refused clients wait this long and more (each adds its own share of jitter). */
  retryAfterS(): number {
    return Math.min(60, Math.max(1, Math.ceil(this.meanMs / 1000)));
  }

  close() {
    if (this.timer) clearInterval(this.timer);
    for (const w of this.waiting.splice(0)) {
      clearTimeout(w.timer);
      w.resolve(this.retryAfterS());
    }
  }
}
/** How often Admission samples the thread's utilisation and moves its limit. */
const LOAD_SAMPLE_MS = 50;
/** Pieces of work the limit always allows: a busy thread with fewer is busy with something
 *  else (a collection, a hash of a sign-in), which refusing work would not relieve. */
const MIN_RUNNING = 2;
/** A burst a page or a client makes (a dozen downloads, a folder's pushes), admitted together:
 *  where the limit starts and rests while the thread has room, and the least it falls to while
 *  the thread is held up but the process itself gets little CPU time (the machine's other
 *  processes take it). A sudden flood of sessions starts with no more than this many at once. */
const BURST_RUNNING = 16;

function bump(m: Map<string, number>, k: string, d: number) {
  const n = (m.get(k) ?? 0) + d;
  if (n) m.set(k, n);
  else m.delete(k);
}

/**
 * The client's address: the socket's peer, or, when that is a proxy `trust` accepts, the
 * address it names in X-Forwarded-For (right to left, through every trusted hop), as express
 * computes `req.ip` (`trust` is its compiled 'trust proxy fn').
 */
export function clientAddress(req: IncomingMessage, trust: (addr: string, hop: number) => boolean): string {
  const forwarded = String(req.headers['x-forwarded-for'] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .reverse();
  const hops = [req.socket.remoteAddress ?? '', ...forwarded];
  let i = 0;
  while (i < hops.length - 1 && trust(hops[i], i)) i++;
  return hops[i];
}

/** Whether a request came over https: a TLS socket, or a trusted proxy's X-Forwarded-Proto
 *  (its first value), as express computes `req.protocol`. */
export function viaHttps(req: IncomingMessage, trust: (addr: string, hop: number) => boolean): boolean {
  if ((req.socket as { encrypted?: boolean }).encrypted) return true;
  if (!trust(req.socket.remoteAddress ?? '', 0)) return false;
  return String(req.headers['x-forwarded-proto'] ?? '').split(',')[0].trim() === 'https';
}

/** The label a client gives itself on the upgrade (`/sync?client=…`, or a bulk upload's `?client=`, e.g. "Chrome on Android"),
 *  as stored with the versions it pushes: printable, trimmed, at most MAX_CLIENT_LABEL
 *  characters; anything else is no label. */
export function clientLabel(raw: string | null): string | undefined {
  const t = raw?.trim();
  if (!t || t.length > MAX_CLIENT_LABEL || /[\u0000-\u001f\u007f-\u009f]/.test(t)) return undefined;
  return t;
}

/** A body the server answers before reading it all (a busy refusal, an error) is read and
 *  dropped when its Content-Length is at most this (the largest bulk request and the default
 *  largest vault pack), and the connection kept: a client still sending then gets the answer.
 *  Closed under it, the client's next writes met a reset (EPIPE), it never saw the 503 and its
 *  Retry-After, and a sync pass at load 20 failed instead of waiting. A larger or unsized body
 *  is not waited for: the connection closes after the answer. */
export const DRAIN_MAX = 16 << 20;

/** Before an answer to `req` whose body may be unread: drop the rest as it comes (up to
 *  DRAIN_MAX), or close the connection after the answer. */
export function unreadBody(req: express.Request, res: express.Response): void {
  if (req.complete) return;
  const raw = req.headers['content-length'];
  if (raw !== undefined && /^\d{1,16}$/.test(raw) && Number(raw) <= DRAIN_MAX) req.resume();
  else res.setHeader('Connection', 'close');
}

/** A REST request, with the user the sign-in found (auth.ts). */
export type Req = express.Request & { user?: string };

/**
 * REST routes run in their user's turn (`Turns`) and with a place past capacity (`Admission`):
 * past capacity a request is answered 503 with Retry-After (`busyMessage`) having done nothing.
 * An error a handler throws is logged and answered by `answer` (the connection is cut when the
 * answer has begun). A body left unread is dropped or its connection closed (`unreadBody`).
 */
export function admittedRoutes(
  turn: ((user: string) => Promise<() => void>) | undefined,
  enter: () => Promise<(() => void) | number>,
  log: (e: Record<string, unknown>) => void,
  answer: (err: Error, res: express.Response) => void,
) {
  return (fn: (req: Req, res: express.Response) => Promise<void>) => async (req: Req, res: express.Response) => {
    const endTurn = await turn?.(req.user!);
    const place = await enter();
    if (typeof place === 'number') {
      endTurn?.();
      log({ error: 'busy', path: req.path, retryAfterS: place });
      res.setHeader('Retry-After', String(place));
      unreadBody(req, res);
      return void res.status(503).json({ error: busyMessage(place) });
    }
    try {
      await fn(req, res);
    } catch (e) {
      const err = e as Error;
      log({ error: 'http', user: req.user, path: req.path, message: err.message });
      if (res.headersSent) return void res.destroy(err);
      unreadBody(req, res);
      answer(err, res);
    } finally {
      place();
      endTurn?.();
    }
  };
}
