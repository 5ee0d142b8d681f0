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
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import net from 'node:net';
import os from 'node:os';
import { stat } from 'node:fs';
import path from 'node:path';

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
 * thread and on libuv's threads (the store's file operations and fsyncs, permessage-deflate),
 * and waits on the store and on its client; past what those threads can serve, each admitted
 * piece only waits longer for the others (and holds its memory longer) without more of them
 * finishing per second. So new work is refused (Busy, or 503 with Retry-After, with the seconds
 * to wait) when `limit` pieces already run, and `limit` follows the threads' queue:
 *
 *   - a probe (a stat of the file system's root, every PROBE_MS) goes through both queues, as
 *     a session's file operation does: its time is how long ready work waits there;
 *   - every QUEUE_INTERVAL_MS its mean (or the age of a probe still out, if longer) is compared
 *     with `maxQueueMs`; above it (a queue formed), the limit falls to three quarters of what
 *     ran in that interval (at least MIN_RUNNING), so the work admitted next waits for fewer;
 *   - at or below it, and the limit was reached (work was refused, or as much ran as it
 *     allows), the limit grows by one, up to `max`.
 *
 * Work waiting for its client's bytes (a phone uploading for minutes) or for a store far away
 * queues nowhere: it holds a place but the limit grows past it, so only work that competes for
 * the threads is held back. `max` bounds all admitted work whatever the threads do (memory,
 * sockets, the store's connections).
 *
 * A refusal costs the thread too (a WebSocket handshake and a Hello, ~2 ms, a tenth of a small
 * sync): refused clients coming back every second would take the thread from the admitted
 * work. So the seconds a refusal names follow the refusals: about as many seconds as work was
 * refused per piece admitted in the last seconds (at least a piece of work's mean time, at
 * most MAX_RETRY_S), the time the places take to serve those refused before them.
 */
export class Admission {
  running = 0;
  /** how many pieces of work may run now, MIN_RUNNING..max (or max, if lower) */
  limit: number;
  /** a running mean of a piece of work's wall time, ms */
  private meanMs = 0;
  /** the most pieces of work running at once in this interval, and whether the limit was reached */
  private peak = 0;
  private reached = false;
  /** the probes' times in this interval, and when the probe out now left (null: none out) */
  private probed = { sum: 0, n: 0 };
  /** the probe out now: when its wait counts from (null: none out); the next: when it is late */
  private probeFrom: number | null = null;
  private probeLate = Infinity;
  private probeTimer: NodeJS.Timeout | null = null;
  private timer: NodeJS.Timeout;
  /** the seconds a refusal names, beyond a piece of work's mean time */
  private retryS = 1;
  /** work admitted and refused since the last look at them, and the ticks until the next */
  private admitted = 0;
  private refused = 0;
  private ticks = 0;
  private closed = false;

  constructor(
    readonly max: number,
    readonly maxQueueMs: number,
  ) {
    const top = max > 0 ? max : Infinity;
    this.limit = top;
    if (maxQueueMs > 0) this.probe();
    this.timer = setInterval(() => {
      if (maxQueueMs > 0) {
        const out = Math.max(0, performance.now() - (this.probeFrom ?? this.probeLate));
        const queueMs = Math.max(out, this.probed.n ? this.probed.sum / this.probed.n : 0);
        this.probed = { sum: 0, n: 0 };
        if (queueMs > maxQueueMs) this.limit = Math.min(top, Math.max(MIN_RUNNING, Math.floor(Math.min(this.limit, this.peak) * 0.75)));
        else if (this.reached) this.limit = Math.min(top, this.limit + 1);
        this.peak = this.running;
        this.reached = this.running >= this.limit;
      }
      if (++this.ticks < 1000 / QUEUE_INTERVAL_MS) return;
      // (the mean with the last: one second's burst moves it halfway)
      this.retryS = (this.retryS + Math.min(MAX_RETRY_S, Math.max(1, this.refused / Math.max(1, this.admitted)))) / 2;
      this.ticks = this.admitted = this.refused = 0;
    }, QUEUE_INTERVAL_MS).unref();
  }

  /** Sends the next probe through libuv's threads and back to this thread. Its wait counts
   *  from when it went, or from when its timer was late if it was (a thread held by one long
   *  task delays the timer, not a probe's round trip). */
  private probe() {
    const from = (this.probeFrom = Math.min(performance.now(), this.probeLate));
    stat(PROBE_PATH, () => {
      this.probed.sum += performance.now() - from;
      this.probed.n++;
      this.probeFrom = null;
      if (this.closed) return;
      this.probeLate = performance.now() + PROBE_MS + TIMER_SLACK_MS;
      this.probeTimer = setTimeout(() => this.probe(), PROBE_MS).unref();
    });
  }

  /** A place for new work (its end, idempotent), or the whole seconds to wait. */
  enter(): (() => void) | number {
    if (this.running >= this.limit) {
      this.reached = true;
      this.refused++;
      return this.retryAfterS();
    }
    this.running++;
    this.admitted++;
    this.peak = Math.max(this.peak, this.running);
    if (this.running >= this.limit) this.reached = true;
    const t0 = performance.now();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.running--;
      this.meanMs += (performance.now() - t0 - this.meanMs) / 16;
    };
  }

  /** When a place is likely free again, in whole seconds: the mean time of a piece of work, or
   *  longer while more is refused than admitted; 1 to MAX_RETRY_S. Refused clients wait this
   *  long and more (each adds its own share of jitter). */
  retryAfterS(): number {
    return Math.min(MAX_RETRY_S, Math.max(1, Math.ceil(this.meanMs / 1000), Math.round(this.retryS)));
  }

  close() {
    this.closed = true;
    clearInterval(this.timer);
    if (this.probeTimer) clearTimeout(this.probeTimer);
  }
}
/** The longest wait a refusal names. */
const MAX_RETRY_S = 60;
/** How often Admission looks at the queue and moves its limit. */
const QUEUE_INTERVAL_MS = 100;
/** How often, at most, the probe goes out, and where (a path every file system has). */
const PROBE_MS = 10;
const PROBE_PATH = path.parse(process.cwd()).root;
/** How late a timer may fire on an idle thread (millisecond granularity). */
const TIMER_SLACK_MS = 1;
/** Pieces of work the limit always allows: the threads busy with fewer are busy with something
 *  else (a collection, a hash of a sign-in), which refusing work would not relieve. */
const MIN_RUNNING = 2;

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
