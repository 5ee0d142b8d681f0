/**
 * Accounts. Without a users file the server runs in **single-user mode**: no authentication,
 * every file in the namespace `local` (the embedded default for one person's machine). With
 * `--users FILE` every HTTP request and WebSocket upgrade must identify a user, by
 *   - `Authorization: Bearer <token>` (the CLI's `--token`), or
 *   - the `dsync_session` cookie set by `POST /api/login` with a name and password (the page).
 * The users file stores only SHA-256 digests of tokens and scrypt hashes of passwords; secrets
 * are never logged. Browser requests (those with an Origin header) must come from the server's
 * own origin or one listed in `--allowed-origins`.
 *
 * Users file: {"users": [{"name": "alice", "tokenSha256": "<hex>", "password": "scrypt$<salt b64>$<hash b64>"}]}
 * `dsync adduser NAME --users FILE [--password PW]` adds one and prints a new token.
 *
 * Logins: a password is checked with scrypt off the event loop (libuv's thread pool), at most
 * `maxLoginHashes` at once (each takes ~50 ms of a core and 16 MiB; the pool's other threads
 * stay free for the store's file I/O), and attempts per client address and per account name
 * are limited with backoff (guard.ts `LoginLimiter`); these limits count per process. Logins
 * live in the store, shared by every process on it (logins.ts); logout ends the login's open
 * sync sockets on this process at once and on the others within `RECHECK_MS` (`ended`).
 */
import { createHash, randomBytes, scrypt, scryptSync, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { LoginLimiter } from './guard.ts';
import { Logins } from './logins.ts';
import type { Backend } from './store/backend.ts';

export interface UserEntry {
  name: string;
  tokenSha256?: string;
  password?: string;
}

export const SINGLE_USER = 'local';
const USER_NAME = /^[a-z0-9_-]{1,64}$/;
const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 };
export const SESSION_COOKIE = 'dsync_session';

const sha256 = (s: string) => createHash('sha256').update(s).digest();

function hashPassword(password: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password, salt, SCRYPT.keylen, SCRYPT);
  return `scrypt$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Hashes waiting for their turn, per hash that may run (beyond: the login is refused as busy). */
const QUEUED_PER_HASH = 32;

/** Runs at most `limit` password checks at once, with a bounded queue behind them. */
class HashLimit {
  private running = 0;
  private waiting: (() => void)[] = [];
  constructor(private limit: number) {}

  /** Whether a check may start or queue now. */
  get hasRoom(): boolean {
    return this.running < this.limit || this.waiting.length < this.limit * QUEUED_PER_HASH;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((r) => this.waiting.push(r));
    else this.running++;
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next(); // the slot passes on
      else this.running--;
    }
  }
}

async function checkPassword(password: string, stored: string): Promise<boolean> {
  const [kind, salt, hash] = stored.split('$');
  if (kind !== 'scrypt' || !salt || !hash) return false;
  const want = Buffer.from(hash, 'base64');
  const got = await new Promise<Buffer>((resolve, reject) => scrypt(password, Buffer.from(salt, 'base64'), want.length, SCRYPT, (e, k) => (e ? reject(e) : resolve(k))));
  return timingSafeEqual(got, want);
}

/** How a login attempt ended. */
export type LoginOutcome = { sid: string } | { refused: 'password' } | { refused: 'busy'; retryAfterMs: number };

export interface LoginLimits {
  maxLoginAttempts: number;
  loginBackoffMaxMs: number;
  maxLoginHashes: number;
}

function readUsers(file: string): UserEntry[] {
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as { users?: UserEntry[] };
  const users = parsed.users ?? [];
  for (const u of users) {
    if (!USER_NAME.test(u.name)) throw new Error(`users file: invalid user name "${u.name}" (a-z, 0-9, _ and -, up to 64)`);
    if (!u.tokenSha256 && !u.password) throw new Error(`users file: user ${u.name} has neither a token nor a password`);
  }
  return users;
}

/** Adds (or replaces) a user in a users file; returns the new token. */
export function addUser(file: string, name: string, password?: string): string {
  if (!USER_NAME.test(name)) throw new Error('user names are 1–64 characters of a-z, 0-9, _ and -');
  const users = existsSync(file) ? readUsers(file).filter((u) => u.name !== name) : [];
  const token = randomBytes(24).toString('base64url');
  const entry: UserEntry = { name, tokenSha256: sha256(token).toString('hex') };
  if (password) entry.password = hashPassword(password);
  users.push(entry);
  writeFileSync(file, JSON.stringify({ users }, null, 2) + '\n', { mode: 0o600 });
  return token;
}

function cookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return undefined;
}

export class Auth {
  private users: UserEntry[] | null;
  /** the page's logins, in the store (null in single-user mode) */
  private sessions: Logins | null;
  private limiter: LoginLimiter;
  private hashes: HashLimit;

  constructor(
    usersFile: string,
    /** where logins are kept: the store's backend */
    backend: Backend,
    private allowedOrigins: string[] = [],
    limits: LoginLimits = { maxLoginAttempts: 5, loginBackoffMaxMs: 30_000, maxLoginHashes: 2 },
    log: (e: Record<string, unknown>) => void = () => {},
    sessionTtlMs = 7 * 24 * 3600 * 1000,
  ) {
    const users = (this.users = usersFile ? readUsers(usersFile) : null);
    this.sessions = users ? new Logins(backend, (name) => users.some((u) => u.name === name && u.password), sessionTtlMs, log) : null;
    this.limiter = new LoginLimiter(limits.maxLoginAttempts, limits.loginBackoffMaxMs);
    this.hashes = new HashLimit(limits.maxLoginHashes);
  }

  get singleUser(): boolean {
    return this.users === null;
  }

  /** The user a request belongs to, or null if it does not authenticate. A session cookie
   *  is checked against this process' view of the store's logins (re-read when stale). */
  async identify(req: IncomingMessage): Promise<string | null> {
    if (!this.sessions) return SINGLE_USER;
    const byToken = this.bearer(req);
    return byToken !== undefined ? byToken : this.sessions.user(cookie(req, SESSION_COOKIE) ?? '');
  }

  /** As `identify`, with this process' view of a login as it is, never reading the store:
   *  for each message of an open socket (the sweep keeps the view of its login fresh). */
  identifyCached(req: IncomingMessage): string | null {
    if (!this.sessions) return SINGLE_USER;
    const byToken = this.bearer(req);
    return byToken !== undefined ? byToken : this.sessions.cachedUser(cookie(req, SESSION_COOKIE) ?? '');
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

  /** Aborts when the login a request carries (its session cookie) ends: logout (here or on
   *  another process) or expiry; `socket` counts as the login's open socket until it closes.
   *  Undefined for a bearer token or single-user mode (nothing to end). */
  ended(req: IncomingMessage, socket: { once(event: 'close', fn: () => void): unknown }): AbortSignal | undefined {
    if (!this.sessions || req.headers.authorization?.startsWith('Bearer ')) return undefined;
    return this.sessions.watch(cookie(req, SESSION_COOKIE) ?? '', socket);
  }

  /**
   * Checks a name and password from a client address. Refused at once, with the time to wait,
   * when that address or that name has made too many attempts lately or too many checks wait
   * for their turn.
   */
  async login(name: string, password: string, address: string): Promise<LoginOutcome> {
    const keys = [`address ${address}`, `name ${name.slice(0, 64)}`];
    const wait = this.hashes.hasRoom ? this.limiter.admit(keys) : 1000;
    if (wait) return { refused: 'busy', retryAfterMs: wait };
    const u = this.users?.find((x) => x.name === name);
    // hash even for unknown users, so timing does not reveal which names exist
    const ok = await this.hashes.run(() => checkPassword(password, u?.password ?? 'scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='));
    if (!u?.password || !ok) return { refused: 'password' };
    this.limiter.succeeded(keys);
    return { sid: await this.sessions!.create(u.name) };
  }

  /** Ends the request's login on every process (`ended`). */
  async logout(req: IncomingMessage) {
    await this.sessions?.end(cookie(req, SESSION_COOKIE) ?? '');
  }

  close() {
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
