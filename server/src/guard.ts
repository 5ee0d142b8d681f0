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
 * only take longer (and hold its memory longer) without more of them finishing per second,
 * until all time out. So new work is refused (Busy, or 503 with Retry-After, with the seconds
 * to wait) when `max` pieces already run, or when the thread is saturated: busy more than
 * `maxLoad` of the last moments (event-loop utilisation, sampled every LOAD_SAMPLE_MS) while
 * MIN_RUNNING or more run. The admitted ones keep near their unloaded speed; the refused ones
 * come back when a place is likely free. While work mostly waits on a store far away, the
 * thread is idle and up to `max` run.
 */
export class Admission {
  running = 0;
  /** a running mean of a piece of work's wall time, ms */
  private meanMs = 0;
  /** the thread's recent utilisation, 0..1 */
  private load = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly max: number,
    readonly maxLoad: number,
  ) {
    if (maxLoad > 0 && maxLoad < 1) {
      let last = performance.eventLoopUtilization();
      this.timer = setInterval(() => {
        const now = performance.eventLoopUtilization();
        // half the weight on the last sample: a burst of work counts at once, a pause soon
        this.load = (this.load + performance.eventLoopUtilization(now, last).utilization) / 2;
        last = now;
      }, LOAD_SAMPLE_MS).unref();
    }
  }

  /** A place for new work (its end, idempotent), or the whole seconds to wait. */
  enter(): (() => void) | number {
    const full = this.max > 0 && this.running >= this.max;
    const saturated = this.timer !== null && this.running >= MIN_RUNNING && this.load > this.maxLoad;
    if (full || saturated) return this.retryAfterS();
    this.running++;
    const t0 = performance.now();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.running--;
      this.meanMs += (performance.now() - t0 - this.meanMs) / 16;
    };
  }

  /** When a place is likely free again: the mean time of a piece of work, in whole seconds, at least 1.
   *  Refused clients wait this long and more (each adds its own share of jitter). */
  retryAfterS(): number {
    return Math.min(60, Math.max(1, Math.ceil(this.meanMs / 1000)));
  }

  close() {
    if (this.timer) clearInterval(this.timer);
  }
}
/** How often Admission samples the thread's utilisation. */
const LOAD_SAMPLE_MS = 50;
/** Pieces of work that run whatever the thread's load: a busy thread with fewer is busy with
 *  something else (a collection, a hash of a sign-in), which refusing work would not relieve. */
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
