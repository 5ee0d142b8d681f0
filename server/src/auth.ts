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
 */
import { createHash, randomBytes, scryptSync, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';

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

function checkPassword(password: string, stored: string): boolean {
  const [kind, salt, hash] = stored.split('$');
  if (kind !== 'scrypt' || !salt || !hash) return false;
  const want = Buffer.from(hash, 'base64');
  const got = scryptSync(password, Buffer.from(salt, 'base64'), want.length, SCRYPT);
  return timingSafeEqual(got, want);
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
  private sessions = new Map<string, { user: string; expires: number }>();

  constructor(
    usersFile: string,
    private allowedOrigins: string[] = [],
    private sessionTtlMs = 7 * 24 * 3600 * 1000,
  ) {
    this.users = usersFile ? readUsers(usersFile) : null;
  }

  get singleUser(): boolean {
    return this.users === null;
  }

  /** The user a request belongs to, or null if it does not authenticate. */
  identify(req: IncomingMessage): string | null {
    if (!this.users) return SINGLE_USER;
    const auth = req.headers.authorization;
    if (auth?.startsWith('Bearer ')) {
      const digest = sha256(auth.slice(7).trim());
      for (const u of this.users) {
        if (u.tokenSha256 && u.tokenSha256.length === 64 && timingSafeEqual(Buffer.from(u.tokenSha256, 'hex'), digest)) return u.name;
      }
      return null;
    }
    const sid = cookie(req, SESSION_COOKIE);
    const s = sid ? this.sessions.get(sid) : undefined;
    if (s && s.expires > Date.now()) return s.user;
    if (s) this.sessions.delete(sid!);
    return null;
  }

  /** Checks a name and password; returns a new session id, or null. */
  login(name: string, password: string): string | null {
    const u = this.users?.find((x) => x.name === name);
    // hash even for unknown users, so timing does not reveal which names exist
    const ok = checkPassword(password, u?.password ?? 'scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
    if (!u?.password || !ok) return null;
    const sid = randomBytes(24).toString('base64url');
    this.sessions.set(sid, { user: u.name, expires: Date.now() + this.sessionTtlMs });
    return sid;
  }

  logout(req: IncomingMessage) {
    const sid = cookie(req, SESSION_COOKIE);
    if (sid) this.sessions.delete(sid);
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
