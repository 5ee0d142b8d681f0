/**
 * Accounts. Without a users file the server runs in **single-user mode**: no authentication,
 * every file in the namespace `local` (the embedded default for one person's machine). With
 * `--users FILE` every HTTP request and WebSocket upgrade must identify a user, by
 *   - `Authorization: Bearer <token>` (the CLI's `--token`), or
 *   - the session cookie set by `POST /api/login` with a name and password (the page):
 *     `__Host-dsync_session` over https (Secure, Path=/, no Domain: no other host or path can
 *     set one), `dsync_session` over plain http. A request that carries it twice is refused
 *     (`tossed`): another page on this host planted one (docs/deploy.md, "What the server
 *     protects against").
 * The users file stores only SHA-256 digests of tokens and scrypt hashes of passwords; secrets
 * are never logged. It is read again when it changes (checked every second): a removed user or
 * a replaced token is refused from then on, and their open sockets and event streams end.
 * Browser requests (those with an Origin header) must come from the server's own origin or
 * one listed in `--allowed-origins`.
 *
 * Users file: {"users": [{"name": "alice", "tokenSha256": "<hex>", "password": "scrypt$ln=15,r=8,p=3$<salt b64>$<hash b64>"}]}
 * `dsync adduser NAME --users FILE [--password-stdin] [--force]` adds one and prints a new token.
 *
 * Logins: a password is checked with scrypt off the event loop (libuv's thread pool), at most
 * `maxLoginHashes` at once (each ~0.2 s of a core and 32 MiB; the pool's other threads stay
 * free for the store's file I/O), in three fair lanes (`HashLimit`): sign-ins from a device or
 * address that signed in to that name before, sign-ins to existing names, and the rest, so a
 * flood of made-up names cannot starve a user. Attempts per client address and per account
 * name are limited with backoff (guard.ts `LoginLimiter`), except that the name's backoff does
 * not hold back a device (the `dsync_device` cookie) or address that signed in to it before:
 * an attacker guessing bob's password from many addresses does not lock bob out. These limits
 * and what was trusted count per process. Logins live in the store, shared by every process on
 * it (logins.ts); logout ends the login's open sync sockets and event streams on this process
 * at once and on the others within `RECHECK_MS` (`ended`).
 */
import { createHash, randomBytes, scrypt, scryptSync, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, renameSync, unwatchFile, watchFile, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import net from 'node:net';
import { DEFAULTS } from '../config.ts';
import { LoginLimiter } from './guard.ts';
import { Logins } from './logins.ts';
import type { Backend } from '../store/backend.ts';

export interface UserEntry {
  name: string;
  tokenSha256?: string;
  password?: string;
}

export const SINGLE_USER = 'local';
const USER_NAME = /^[a-z0-9_-]{1,64}$/;
export const SESSION_COOKIE = 'dsync_session';
export const DEVICE_COOKIE = 'dsync_device';
/** The prefix of cookies a browser accepts only from https, with Path=/ and no Domain. */
const HOST_PREFIX = '__Host-';
/** A session or device id: 24 random bytes, base64url. */
const RANDOM_ID = /^[A-Za-z0-9_-]{32}$/;

/** scrypt's cost for new passwords: OWASP's N=2^15, r=8, p=3 (the work of N=2^17, r=8, p=1 in
 *  32 MiB instead of 128 MiB, so that `maxLoginHashes` checks at once stay small). */
const SCRYPT = { ln: 15, r: 8, p: 3 };
/** The cost of hashes written before the parameters were stored with them: `scrypt$SALT$HASH`. */
const LEGACY = { ln: 14, r: 8, p: 1 };
const KEYLEN = 32;
/** The most memory one check may take (a users file could name any cost). */
const MAX_SCRYPT_MEMORY = 256 << 20;
/** Shortest password `dsync adduser` accepts (NIST SP 800-63B asks for 8 at least). */
export const MIN_PASSWORD = 12;

const sha256 = (s: string) => createHash('sha256').update(s).digest();

function scryptAsync(password: string, salt: Buffer, cost: typeof SCRYPT): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password, salt, KEYLEN, { N: 2 ** cost.ln, r: cost.r, p: cost.p, maxmem: MAX_SCRYPT_MEMORY }, (e, k) => (e ? reject(e) : resolve(k))),
  );
}

function hashPassword(password: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password, salt, KEYLEN, { N: 2 ** SCRYPT.ln, r: SCRYPT.r, p: SCRYPT.p, maxmem: MAX_SCRYPT_MEMORY });
  return `scrypt$ln=${SCRYPT.ln},r=${SCRYPT.r},p=${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** A stored hash's cost, salt and hash, or null when it is not one this server writes. */
function parseHash(stored: string): { cost: typeof SCRYPT; salt: Buffer; hash: Buffer } | null {
  const parts = stored.split('$');
  if (parts[0] !== 'scrypt') return null;
  let cost = LEGACY;
  if (parts.length === 4) {
    const m = /^ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})$/.exec(parts[1]);
    if (!m) return null;
    cost = { ln: Number(m[1]), r: Number(m[2]), p: Number(m[3]) };
    if (cost.ln < 10 || cost.r < 1 || cost.p < 1 || 128 * 2 ** cost.ln * cost.r > MAX_SCRYPT_MEMORY / 2) return null;
  } else if (parts.length !== 3) return null;
  const [salt, hash] = parts.slice(-2).map((b) => Buffer.from(b, 'base64'));
  return salt.length && hash.length ? { cost, salt, hash } : null;
}

/** A hash of no password, checked for names that have none, so that timing does not tell them. */
const NO_PASSWORD = `scrypt$ln=${SCRYPT.ln},r=${SCRYPT.r},p=${SCRYPT.p}$${Buffer.alloc(16).toString('base64')}$${Buffer.alloc(KEYLEN).toString('base64')}`;

async function checkPassword(password: string, stored: string): Promise<boolean> {
  const h = parseHash(stored);
  if (!h) return false;
  const got = await scryptAsync(password, h.salt, h.cost);
  return got.length === h.hash.length && timingSafeEqual(got, h.hash);
}

/** Passwords (letters only, lower case) too common to accept, whatever digits or signs surround them. */
const COMMON = new Set(['password', 'passwort', 'qwerty', 'qwertyuiop', 'azerty', 'letmein', 'welcome', 'iloveyou', 'admin', 'administrator', 'dsync', 'changeme', 'secret', 'monkey', 'dragon', 'football', 'baseball', 'sunshine', 'princess', 'trustno', 'abc', 'abcdef', 'qwe', 'asdf', 'asdfgh', 'zxcvbn', '']);

/** Why a password is too weak for `dsync adduser`, or null: shorter than MIN_PASSWORD, fewer
 *  than 5 different characters, a run (abcdef…, 123456…), the user's name inside, or a common
 *  password with digits or signs around it. */
export function passwordWeakness(password: string, name: string): string | null {
  const chars = [...password];
  if (chars.length < MIN_PASSWORD) return `a password has at least ${MIN_PASSWORD} characters`;
  if (new Set(chars).size < 5) return 'a password has at least 5 different characters';
  const steps = new Set(chars.slice(1).map((c, i) => c.codePointAt(0)! - chars[i].codePointAt(0)!));
  if (steps.size === 1) return 'a password is not a run of characters';
  const lower = password.toLowerCase();
  if (lower.includes(name.toLowerCase())) return 'a password does not contain the user name';
  if (COMMON.has(lower.replace(/[^a-z]/g, ''))) return 'this password is among the most common ones';
  return null;
}

/** Hashes waiting for their turn, per lane and per hash that may run (beyond: the login is
 *  refused as busy). */
const QUEUED_PER_HASH = 32;

/** Who waits for a password check: a device or address that signed in to the name before,
 *  an existing name, any other name. */
type Lane = 'trusted' | 'known' | 'unknown';

/** Runs at most `limit` password checks at once; behind them one bounded queue per lane,
 *  served in turn, so that no lane starves another. */
class HashLimit {
  private running = 0;
  private lanes: Record<Lane, (() => void)[]> = { trusted: [], known: [], unknown: [] };
  private order: Lane[] = ['trusted', 'known', 'unknown'];
  private turn = 0;
  constructor(private limit: number) {}

  /** Whether a check of this lane may start or queue now. */
  hasRoom(lane: Lane): boolean {
    return this.running < this.limit || this.lanes[lane].length < this.limit * QUEUED_PER_HASH;
  }

  async run<T>(lane: Lane, fn: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((r) => this.lanes[lane].push(r));
    else this.running++;
    try {
      return await fn();
    } finally {
      const next = this.next();
      if (next) next(); // the slot passes on
      else this.running--;
    }
  }

  /** The next waiter, from the lanes in turn. */
  private next(): (() => void) | undefined {
    for (let i = 0; i < this.order.length; i++) {
      const lane = this.order[(this.turn + i) % this.order.length];
      if (this.lanes[lane].length) {
        this.turn = (this.turn + i + 1) % this.order.length;
        return this.lanes[lane].shift();
      }
    }
    return undefined;
  }
}

/** How long a device or address that signed in to a name is trusted to try it again. */
const TRUST_MS = 30 * 24 * 3600_000;
/** Trusted pairs remembered at most (the oldest are forgotten first). */
const MAX_TRUSTED = 100_000;

/** How a login attempt ended; `device`: a new device id to set as the device cookie. */
export type LoginOutcome = { sid: string; device?: string } | { refused: 'password' } | { refused: 'busy'; retryAfterMs: number };

export interface LoginLimits {
  maxLoginAttempts: number;
  loginBackoffMaxMs: number;
  maxLoginHashes: number;
}

function readUsers(file: string): UserEntry[] {
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as { users?: UserEntry[] };
  const users = parsed.users ?? [];
  if (!Array.isArray(users)) throw new Error('users file: "users" is not a list');
  const seen = new Set<string>();
  for (const u of users) {
    if (typeof u?.name !== 'string' || !USER_NAME.test(u.name)) throw new Error(`users file: invalid user name "${u?.name}" (a-z, 0-9, _ and -, up to 64)`);
    if (seen.has(u.name)) throw new Error(`users file: user ${u.name} is listed twice`);
    seen.add(u.name);
    if (!u.tokenSha256 && !u.password) throw new Error(`users file: user ${u.name} has neither a token nor a password`);
    if (u.password !== undefined && (typeof u.password !== 'string' || !parseHash(u.password))) throw new Error(`users file: user ${u.name}'s password is not an scrypt hash this server writes`);
  }
  return users;
}

/** A new token: 24 random bytes in base64url, never starting with '-' (`dsync … --token TOKEN`
 *  would read such a token as an option). */
function newToken(): string {
  for (;;) {
    const t = randomBytes(24).toString('base64url');
    if (t[0] !== '-') return t;
  }
}

/**
 * Adds a user to a users file (created if missing, readable by its owner only, replaced whole
 * so that a server reading it never sees half of it); returns the new token. An existing user
 * is replaced (a new token, the new password) only with `replace`.
 */
export function addUser(file: string, name: string, password?: string, { replace = false } = {}): string {
  if (!USER_NAME.test(name)) throw new Error('user names are 1–64 characters of a-z, 0-9, _ and -');
  const all = existsSync(file) ? readUsers(file) : [];
  if (!replace && all.some((u) => u.name === name)) throw new Error(`${name} already has an account in ${file}; --force replaces its token and password`);
  const users = all.filter((u) => u.name !== name);
  const token = newToken();
  const entry: UserEntry = { name, tokenSha256: sha256(token).toString('hex') };
  if (password) entry.password = hashPassword(password);
  users.push(entry);
  const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
  writeFileSync(tmp, JSON.stringify({ users }, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  renameSync(tmp, file);
  return token;
}

/** Every value of the cookie `name` a request carries. */
function cookies(req: IncomingMessage, name: string): string[] {
  const out: string[] = [];
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) out.push(v.join('='));
  }
  return out;
}

/** Paths at which a cookie sent with a request to `path` may have been set: `path` and each
 *  of its prefixes ending before or at a '/' (RFC 6265 §5.1.4), and the page's /api and /sync. */
function cookiePaths(path: string): string[] {
  const out = new Set(['/', '/api', '/api/', '/sync', '/sync/']);
  const p = path.split('?')[0].slice(0, 256);
  if (p.startsWith('/')) {
    for (let i = 1; i < p.length; i++) if (p[i] === '/') out.add(p.slice(0, i)).add(p.slice(0, i + 1));
    out.add(p);
  }
  return [...out].slice(0, 24);
}

/** The domains above a host name a sibling host may set a cookie for (none for an address). */
function parentDomains(hostHeader: string | undefined): string[] {
  const host = (hostHeader ?? '').replace(/:\d+$/, '').replace(/\.$/, '').toLowerCase();
  if (!host || net.isIP(host.replace(/^\[|\]$/g, '')) || !host.includes('.')) return [];
  const labels = host.split('.');
  return labels.slice(1, -1).map((_, i) => labels.slice(i + 1).join('.')).slice(0, 4);
}

export class Auth {
  private users: UserEntry[] | null;
  /** the page's logins, in the store (null in single-user mode) */
  private sessions: Logins | null;
  private limiter: LoginLimiter;
  private hashes: HashLimit;
  /** "device DIGEST NAME" and "address A NAME" → until when that client may sign in to NAME
   *  without the name's backoff (in order of last sign-in) */
  private trusted = new Map<string, number>();
  /** each open socket or event stream of a user, ended when its identity no longer holds */
  private watchers = new Set<{ req: IncomingMessage; user: string; ended: AbortController }>();
  private onUsersFile?: () => void;

  constructor(
    private usersFile: string,
    /** where logins are kept: the store's backend */
    backend: Backend,
    /** whether a request came over https (directly or through a trusted proxy) */
    private isHttps: (req: IncomingMessage) => boolean,
    private allowedOrigins: string[] = [],
    limits: LoginLimits = DEFAULTS,
    private log: (e: Record<string, unknown>) => void = () => {},
    sessionTtlMs = 7 * 24 * 3600 * 1000,
  ) {
    this.users = usersFile ? readUsers(usersFile) : null;
    this.sessions = this.users ? new Logins(backend, (name) => !!this.users?.some((u) => u.name === name && u.password), sessionTtlMs, log) : null;
    this.limiter = new LoginLimiter(limits.maxLoginAttempts, limits.loginBackoffMaxMs);
    this.hashes = new HashLimit(limits.maxLoginHashes);
    if (usersFile) {
      this.onUsersFile = () => this.reload();
      watchFile(usersFile, { interval: 1000, persistent: false }, this.onUsersFile);
    }
  }

  get singleUser(): boolean {
    return this.users === null;
  }

  /** Reads the users file again; ends what a removed user or a replaced token had open. A file
   *  that does not read is logged and the previous one kept. */
  reload() {
    let users: UserEntry[];
    try {
      users = readUsers(this.usersFile);
    } catch (e) {
      return void this.log({ error: 'users', message: `${(e as Error).message}; the previous users file stays in use` });
    }
    this.users = users;
    this.log({ event: 'users', users: users.length });
    this.sessions?.revalidate();
    for (const w of this.watchers) if (this.identifyCached(w.req) !== w.user) w.ended.abort();
  }

  /** The session cookie's name for this request's scheme. */
  private cookieName(req: IncomingMessage): string {
    return this.isHttps(req) ? HOST_PREFIX + SESSION_COOKIE : SESSION_COOKIE;
  }

  /** The request's session id; '' when it has none, or more than one (`tossed`). */
  private sid(req: IncomingMessage): string {
    const all = cookies(req, this.cookieName(req));
    return all.length === 1 ? all[0] : '';
  }

  /** Whether the request carries the session cookie more than once: a page on another port or
   *  host under this name planted one (at /api, /sync or a parent domain) to make the browser
   *  send the attacker's login with the user's. Such a request is refused, never resolved to
   *  either. */
  tossed(req: IncomingMessage): boolean {
    return !this.singleUser && !req.headers.authorization?.startsWith('Bearer ') && cookies(req, this.cookieName(req)).length > 1;
  }

  /** The user a request belongs to, or null if it does not authenticate. A session cookie
   *  is checked against this process' view of the store's logins (re-read when stale). */
  async identify(req: IncomingMessage): Promise<string | null> {
    if (!this.sessions) return SINGLE_USER;
    const byToken = this.bearer(req);
    return byToken !== undefined ? byToken : this.sessions.user(this.sid(req));
  }

  /** As `identify`, with this process' view of a login as it is, never reading the store:
   *  for each message of an open socket (the sweep keeps the view of its login fresh). */
  identifyCached(req: IncomingMessage): string | null {
    if (!this.sessions) return SINGLE_USER;
    const byToken = this.bearer(req);
    return byToken !== undefined ? byToken : this.sessions.cachedUser(this.sid(req));
  }

  /** A bearer token's user; null for a wrong token; undefined when there is none. */
  private bearer(req: IncomingMessage): string | null | undefined {
    const auth = req.headers.authorization;
    if (auth?.startsWith('Bearer ')) {
      const digest = sha256(auth.slice(7).trim());
      for (const u of this.users ?? []) {
        if (u.tokenSha256 && u.tokenSha256.length === 64 && timingSafeEqual(Buffer.from(u.tokenSha256, 'hex'), digest)) return u.name;
      }
      return null;
    }
    return undefined;
  }

  /** Aborts when what a request of `user` identified with ends: its login (logout here or on
   *  another process, expiry), or its token or account (the users file changed); `socket`
   *  (a sync socket or an event stream) counts as the login's until it closes. Undefined in
   *  single-user mode (nothing to end). */
  ended(req: IncomingMessage, socket: { once(event: 'close', fn: () => void): unknown }, user: string): AbortSignal | undefined {
    if (!this.sessions) return undefined;
    const w = { req, user, ended: new AbortController() };
    this.watchers.add(w);
    socket.once('close', () => this.watchers.delete(w));
    const login = req.headers.authorization?.startsWith('Bearer ') ? undefined : this.sessions.watch(this.sid(req), socket);
    return login ? AbortSignal.any([login, w.ended.signal]) : w.ended.signal;
  }

  /**
   * Checks a name and password from a client address and device (its device cookie). Refused
   * at once, with the time to wait, when that address or that name has made too many attempts
   * lately (the name's count is skipped for a device or address that signed in to it before)
   * or too many checks of its lane wait for their turn.
   */
  async login(name: string, password: string, address: string, device = ''): Promise<LoginOutcome> {
    const n = name.slice(0, 64);
    const now = Date.now();
    const dev = RANDOM_ID.test(device) ? sha256(device).toString('hex') : '';
    const byDevice = !!dev && (this.trusted.get(`device ${dev} ${n}`) ?? 0) > now;
    const byAddress = (this.trusted.get(`address ${address} ${n}`) ?? 0) > now;
    const u = this.users?.find((x) => x.name === name);
    const keys = byDevice ? [`device ${dev}`] : byAddress ? [`address ${address}`] : [`address ${address}`, `name ${n}`];
    const lane: Lane = byDevice || byAddress ? 'trusted' : u ? 'known' : 'unknown';
    const wait = this.hashes.hasRoom(lane) ? this.limiter.admit(keys) : 1000;
    if (wait) return { refused: 'busy', retryAfterMs: wait };
    // hash even for unknown users, so timing does not reveal which names exist
    const ok = await this.hashes.run(lane, () => checkPassword(password, u?.password ?? NO_PASSWORD));
    if (!u?.password || !ok) return { refused: 'password' };
    this.limiter.succeeded(keys);
    // a device id is kept only once it signed in to this name: one planted in the browser by
    // another page never becomes trusted
    const id = byDevice ? device : randomBytes(24).toString('base64url');
    this.trust(`device ${sha256(id).toString('hex')} ${n}`, now);
    this.trust(`address ${address} ${n}`, now);
    return { sid: await this.sessions!.create(u.name), device: byDevice ? undefined : id };
  }

  private trust(key: string, now: number) {
    this.trusted.delete(key); // re-inserted last: the map stays in order of last sign-in
    this.trusted.set(key, now + TRUST_MS);
    for (const [k, until] of this.trusted) {
      if (until > now && this.trusted.size <= MAX_TRUSTED) break;
      this.trusted.delete(k);
    }
  }

  /**
   * The Set-Cookie lines of a response: after a sign-in (`sid`) the session cookie at / and a
   * new device cookie; otherwise (sign-out, a refused tossed request) the session cookie's
   * removal at /. Both also remove every copy of the session cookie another page on this host
   * may have set: at each path the request's cookies may come from, and at /api and /sync,
   * host-only and for each parent domain of the host (a browser ignores removals of cookies it
   * does not hold). Over https the cookies are `__Host-` and Secure.
   */
  cookieLines(req: IncomingMessage, signIn?: { sid: string; device?: string }): string[] {
    const https = this.isHttps(req);
    const flags = `HttpOnly; SameSite=Strict; Path=/${https ? '; Secure' : ''}`;
    const prefix = https ? HOST_PREFIX : '';
    const lines = [signIn ? `${prefix}${SESSION_COOKIE}=${signIn.sid}; ${flags}` : `${prefix}${SESSION_COOKIE}=; ${flags}; Max-Age=0`];
    if (signIn?.device) lines.push(`${prefix}${DEVICE_COOKIE}=${signIn.device}; ${flags}; Max-Age=${TRUST_MS / 1000}`);
    const paths = cookiePaths((req as { originalUrl?: string }).originalUrl ?? req.url ?? '/');
    for (const domain of ['', ...parentDomains(req.headers.host)]) {
      // the host's own cookie at / is the first line's (set by a sign-in, removed otherwise)
      for (const p of paths) if (p !== '/' || domain) lines.push(`${SESSION_COOKIE}=; Path=${p}${domain ? `; Domain=${domain}` : ''}; Max-Age=0`);
    }
    return lines;
  }

  /** The device cookie of a request ('' when none). */
  device(req: IncomingMessage): string {
    return cookies(req, (this.isHttps(req) ? HOST_PREFIX : '') + DEVICE_COOKIE)[0] ?? '';
  }

  /** Ends the request's login on every process (`ended`). */
  async logout(req: IncomingMessage) {
    await this.sessions?.end(this.sid(req));
  }

  close() {
    if (this.onUsersFile) unwatchFile(this.usersFile, this.onUsersFile);
    this.sessions?.close();
  }

  /** Browser requests must come from this server's page (or an allowed origin). */
  originAllowed(req: IncomingMessage): boolean {
    const origin = req.headers.origin;
    if (!origin) return true;
    if (this.allowedOrigins.includes(origin)) return true;
    try {
      return new URL(origin).host === req.headers.host;
    } catch {
      return false;
    }
  }
}
