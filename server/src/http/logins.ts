/**
 * The page's logins (session cookies), kept in the store so that every process on it knows them
 * (`--workers N`, several servers on one bucket). A login is the object
 *   auth/sessions/<SHA-256 hex of the session id>   {"user": NAME, "expires": MS SINCE EPOCH}
 * written once at login and deleted at logout or once expired. The id itself is never stored:
 * whoever can read the store cannot sign in with what they read. gc and check list only `ns/`,
 * `data/` and `index/`, so they never see this prefix (docs/store.md, "Keys").
 *
 * Each process caches what it has read: a login is re-read from the store at most every
 * RECHECK_MS, and an id the store does not know is remembered as unknown for as long, so a
 * request costs no store read most of the time and a flood of made-up cookies costs at most
 * one read per distinct id. A logout on another process is therefore seen within RECHECK_MS;
 * a per-process sweep re-reads the logins that hold open sync sockets, which then end.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Backend } from '../store/backend.ts';
import { NotFoundError } from '../store/backend.ts';
import { SESSIONS_PREFIX, sessionKey } from '../store/keys.ts';

/** How stale a process' view of a login may be: the longest a logout on another process takes
 *  to reach this one, and, per login and process, at most one store read per period (a GET of
 *  10–50 ms on S3, so a page's burst of requests costs one). */
export const RECHECK_MS = 2_000;
/** How often each process deletes expired logins from the store (they are refused anyway). */
const EXPIRED_SWEEP_MS = 3_600_000;
/** Ids remembered as unknown at once; beyond, the oldest are forgotten (a flood costs reads, not memory). */
const MAX_UNKNOWN = 10_000;
/** A login object's largest size: a name of 64 characters and a time fit in far less. */
const MAX_OBJECT = 256;
/** A session id: 24 random bytes, base64url. */
const SESSION_ID = /^[A-Za-z0-9_-]{32}$/;
const KEY = /^auth\/sessions\/[0-9a-f]{64}$/;

const keyOf = (sid: string) => sessionKey(createHash('sha256').update(sid).digest('hex'));

interface Login {
  user: string;
  expires: number;
  /** when the store last confirmed it */
  checked: number;
  /** open sync sockets of this login on this process */
  sockets: number;
  /** aborts when the login ends (logout, expiry), here or seen from another process */
  ended: AbortController;
}

export class Logins {
  private known = new Map<string, Login>();
  /** key → until when it is taken as unknown without asking the store */
  private unknown = new Map<string, number>();
  /** reads under way, so that concurrent requests with one cookie make one */
  private reading = new Map<string, Promise<Login | null>>();
  private timers: NodeJS.Timeout[];

  constructor(
    private backend: Backend,
    /** whether a name still is an account (the users file); other logins are refused */
    private isUser: (name: string) => boolean,
    private ttlMs: number,
    private log: (e: Record<string, unknown>) => void = () => {},
  ) {
    this.timers = [
      setInterval(() => void this.recheckOpen().catch((e) => log({ error: 'logins', message: (e as Error).message })), RECHECK_MS).unref(),
      setInterval(() => void this.sweepExpired().catch((e) => log({ error: 'logins', message: (e as Error).message })), EXPIRED_SWEEP_MS).unref(),
    ];
  }

  /** Records a new login of `user`; returns its session id once every process can see it. */
  async create(user: string): Promise<string> {
    const sid = randomBytes(24).toString('base64url');
    const expires = Date.now() + this.ttlMs;
    if (!(await this.backend.putIfAbsent(keyOf(sid), Buffer.from(JSON.stringify({ user, expires }))))) throw new Error('a new session id is already taken');
    this.known.set(keyOf(sid), { user, expires, checked: Date.now(), sockets: 0, ended: new AbortController() });
    return sid;
  }

  /** The user of a session id, or null when it is no live login. */
  async user(sid: string): Promise<string | null> {
    return (await this.lookup(sid))?.user ?? null;
  }

  /** The user of a session id as this process last saw it, without a store read (the sweep
   *  keeps the logins of open sockets fresh). */
  cachedUser(sid: string): string | null {
    const l = SESSION_ID.test(sid) ? this.known.get(keyOf(sid)) : undefined;
    return l && l.expires > Date.now() ? l.user : null;
  }

  /** Aborts when the login ends; counts `socket` among the login's open sockets until it closes. */
  watch(sid: string, socket: { once(event: 'close', fn: () => void): unknown }): AbortSignal | undefined {
    const l = SESSION_ID.test(sid) ? this.known.get(keyOf(sid)) : undefined;
    if (!l) return undefined;
    l.sockets++;
    socket.once('close', () => l.sockets--);
    return l.ended.signal;
  }

  /** Ends a login everywhere: its object is deleted; its sockets here end at once, elsewhere
   *  within RECHECK_MS. */
  async end(sid: string): Promise<void> {
    if (!SESSION_ID.test(sid)) return;
    const key = keyOf(sid);
    this.forget(key);
    await this.backend.delete(key);
  }

  /** Ends at once every login this process knows whose name is no longer an account (the
   *  users file changed); the store's objects of those logins are refused and deleted when read. */
  revalidate() {
    for (const [key, l] of [...this.known]) if (!this.isUser(l.user)) this.forget(key);
  }

  close() {
    for (const t of this.timers) clearInterval(t);
  }

  private async lookup(sid: string): Promise<Login | null> {
    if (!SESSION_ID.test(sid)) return null;
    const key = keyOf(sid);
    const now = Date.now();
    const l = this.known.get(key);
    if (l && now - l.checked < RECHECK_MS) {
      if (l.expires > now) return l;
    } else if (!l && (this.unknown.get(key) ?? 0) > now) return null;
    return this.read(key);
  }

  /** Reads a login from the store and brings the cache up to date (one read per key at once). */
  private read(key: string): Promise<Login | null> {
    let r = this.reading.get(key);
    if (!r) {
      r = this.readOnce(key).finally(() => this.reading.delete(key));
      this.reading.set(key, r);
    }
    return r;
  }

  private async readOnce(key: string): Promise<Login | null> {
    let body: Uint8Array | null;
    try {
      body = await this.backend.get(key);
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
      body = null;
    }
    const now = Date.now();
    const found = body && this.parse(body, key);
    if (!found || found.expires <= now) {
      this.forget(key);
      if (found || body) await this.backend.delete(key); // expired, or not a login this server wrote
      return null;
    }
    let l = this.known.get(key);
    if (!l || l.user !== found.user) {
      if (l) l.ended.abort();
      l = { user: found.user, expires: found.expires, checked: now, sockets: 0, ended: new AbortController() };
      this.known.set(key, l);
    }
    l.checked = now;
    l.expires = found.expires;
    return l;
  }

  /** A login object's content, or null (logged) when it is not one this server writes. */
  private parse(body: Uint8Array, key: string): { user: string; expires: number } | null {
    let v: unknown;
    try {
      if (body.length > MAX_OBJECT) throw new Error(`${body.length} bytes`);
      v = JSON.parse(Buffer.from(body).toString('utf8'));
    } catch (e) {
      this.log({ error: 'logins', key, message: `not a login object: ${(e as Error).message}` });
      return null;
    }
    const o = v as { user?: unknown; expires?: unknown };
    const ok =
      typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 2 &&
      typeof o.user === 'string' && this.isUser(o.user) && Number.isSafeInteger(o.expires) && (o.expires as number) > 0;
    if (!ok) {
      this.log({ error: 'logins', key, message: 'not a login object of a current user' });
      return null;
    }
    return { user: o.user as string, expires: o.expires as number };
  }

  /** Drops a login from this process' view, ending its sockets here, and remembers it as unknown. */
  private forget(key: string) {
    const l = this.known.get(key);
    if (l) {
      l.ended.abort();
      this.known.delete(key);
    }
    this.unknown.delete(key);
    this.unknown.set(key, Date.now() + RECHECK_MS);
    if (this.unknown.size > MAX_UNKNOWN) this.unknown.delete(this.unknown.keys().next().value!);
  }

  /** Re-reads the logins with open sockets here whose last check is due (a logout elsewhere
   *  then ends them); drops idle logins not used for a while from the cache. */
  private async recheckOpen() {
    const now = Date.now();
    for (const [key, l] of [...this.known]) {
      if (l.sockets > 0) {
        if (now - l.checked >= RECHECK_MS || l.expires <= now) await this.read(key);
      } else if (now - l.checked > 30 * RECHECK_MS) this.known.delete(key);
    }
    for (const [key, until] of this.unknown) if (until <= now) this.unknown.delete(key);
  }

  /** Deletes expired (and unreadable) login objects, so that the prefix stays small. */
  private async sweepExpired() {
    for await (const e of this.backend.list(SESSIONS_PREFIX)) {
      if (KEY.test(e.key)) await this.read(e.key);
      else this.log({ error: 'logins', key: e.key, message: 'not a key this server makes' });
    }
  }
}
