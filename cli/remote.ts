/**
 * Talking to a server: its address from `--server` (or DSYNC_SERVER) in any of the forms people
 * type, the bearer token from `--token` (or DSYNC_TOKEN, or the one `dsync login` stored for the
 * server, cli/commands/login.ts), the sync WebSocket and the REST API. A token on its way to a
 * host that is not this machine over plain http/ws gets a warning (`--require-tls` refuses).
 */
import { readFileSync } from 'node:fs';
import { homedir, hostname } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { fetchWhileBusy } from '../shared/src/transport/busy.ts';
import { RemoteError } from '../shared/src/transport/conn.ts';
import { ErrorCode } from '../shared/src/wire/protocol.ts';
import { type Opts, UsageError, type Values, str } from './command.ts';

export const SERVER_OPTS: Opts = {
  server: { type: 'string', short: 's', arg: 'URL', help: 'the server: ws://HOST:PORT, http://HOST:PORT or HOST:PORT (default: $DSYNC_SERVER)' },
  token: { type: 'string', arg: 'T', help: 'bearer token, when the server has accounts (default: $DSYNC_TOKEN, else the one dsync login stored); visible in the process list' },
  'require-tls': { type: 'boolean', help: 'refuse to send a token over plain http/ws to a host other than this machine' },
};

function serverOf(values: Values): URL {
  const s = str(values, 'server') ?? process.env.DSYNC_SERVER;
  if (!s) throw new UsageError('--server URL is required (or set DSYNC_SERVER)');
  try {
    return new URL(s.includes('://') ? s : `ws://${s}`);
  } catch {
    throw new UsageError(`--server ${s} is not an address`);
  }
}

/** ws://host:port/sync from whatever form the user gave (http://host:port, host:port, ws://…). */
export function syncUrl(values: Values): string {
  const url = serverOf(values);
  url.protocol = url.protocol.replace(/^http/, 'ws');
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/sync';
  // the label the server records with each version this client pushes (its history's "client")
  if (!url.searchParams.has('client')) url.searchParams.set('client', `dsync on ${hostname()}`);
  return url.toString();
}

/** http://host:port of the server, for the REST API. */
export function httpBase(values: Values): string {
  const url = serverOf(values);
  url.protocol = url.protocol.replace(/^ws/, 'http');
  return url.origin;
}

/** The file of the tokens `dsync login` stored, by server (readable by the user only). */
export function tokensFile(): string {
  const base = process.env.XDG_CONFIG_HOME || path.join(homedir(), '.config');
  return path.join(base, 'dsync', 'tokens.json');
}

/** The stored tokens, by server origin (http://host:port); none when there is no file. */
export function storedTokens(): Record<string, string> {
  let text;
  try {
    text = readFileSync(tokensFile(), 'utf8');
  } catch (e) {
    // none stored, or none this user can read (a command run as another user): none to use
    if (['ENOENT', 'ENOTDIR', 'EACCES', 'EPERM'].includes((e as NodeJS.ErrnoException).code ?? '')) return {};
    throw e;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`${tokensFile()} is damaged (not JSON): dsync login again, or delete it`);
  }
  if (!json || typeof json !== 'object' || Array.isArray(json) || !Object.values(json).every((t) => typeof t === 'string')) throw new Error(`${tokensFile()} is damaged: dsync login again, or delete it`);
  return json as Record<string, string>;
}

/** Whether `host` (a URL's hostname) is this machine. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h.endsWith('.localhost') || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::1' || h === '::ffff:127.0.0.1' || h === '::ffff:7f00:1';
}

/** Warnings already printed in this process (each is said once). */
const warned = new Set<string>();
const warnOnce = (text: string) => {
  if (warned.has(text)) return;
  warned.add(text);
  console.error(`dsync: warning: ${text}`);
};

/** The bearer token for the server: --token, DSYNC_TOKEN, or the one `dsync login` stored for
 *  it. Warns that --token shows in the process list, and that a token over plain http/ws to
 *  another machine can be read on the way (with --require-tls: refuses). */
export function tokenOf(values: Values): string | undefined {
  const given = str(values, 'token');
  if (given !== undefined) warnOnce('--token shows the token to everyone who can list processes on this machine; dsync login stores it in a file only you can read');
  const token = given ?? (process.env.DSYNC_TOKEN || undefined) ?? storedTokens()[httpBase(values)];
  if (token) checkTls(values);
  return token || undefined;
}

/** A token is about to go to the server: over plain http/ws to a host that is not this machine
 *  it is readable on the way: a warning, or with --require-tls a refusal. */
export function checkTls(values: Values) {
  const url = serverOf(values);
  if (/^(https|wss):$/.test(url.protocol) || isLoopback(url.hostname)) return;
  const what = `the token would go to ${url.host} over plain ${url.protocol.replace(':', '')}, readable by anyone on the way`;
  if (values['require-tls']) throw new Error(`${what}: refused (--require-tls); use https:// or wss://`);
  warnOnce(`${what}; use https:// or wss:// (--require-tls refuses)`);
}

/** The `ws` WebSocket, sending the bearer token on the upgrade when there is one. */
export function webSocket(values: Values): any {
  const token = tokenOf(values);
  if (!token) return WebSocket;
  return class extends WebSocket {
    constructor(url: string) {
      super(url, { headers: { Authorization: `Bearer ${token}` } });
    }
  };
}

/** What a refused sign-in means and what to do, by whether a token was given. */
export function tokenProblem(values: Values): string {
  return tokenOf(values)
    ? 'the server refused the token (from --token or DSYNC_TOKEN): it is mistyped, or the account or its token is gone; ask for a current one (dsync adduser prints a new token) and try again'
    : 'this server has accounts: give your token with --token T or DSYNC_TOKEN (dsync adduser prints one)';
}

/** An error in the user's words: a refused sign-in (REST 401, or the WebSocket upgrade's 401,
 *  which Conn.open reports as Unauthorized) says what to do; the rest keep their message. */
export function explain(e: unknown, values: Values): string {
  if ((e instanceof ApiError && e.status === 401) || (e instanceof RemoteError && e.code === ErrorCode.Unauthorized)) return tokenProblem(values);
  return e instanceof Error ? e.message : String(e);
}

/** A refusal by the server's REST API, with its message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Calls the REST API (`path` with its query); the parsed JSON answer. A busy server (503 with
 *  Retry-After) is waited for and asked again (shared/src/transport/busy.ts). */
export async function api<T = unknown>(values: Values, method: string, path: string, body?: unknown): Promise<T> {
  const res = await request(values, method, path, body === undefined ? undefined : { body: JSON.stringify(body), type: 'application/json' });
  const text = await res.text();
  try {
    return (text ? JSON.parse(text) : null) as T;
  } catch {
    return null as T;
  }
}

/** A REST request with a body of bytes (a bulk transfer, docs/protocol.md): its answer, to be
 *  read by the caller; a refusal throws as `api`'s do. The parts are joined into one buffer,
 *  which fetch writes as it is (a Blob's would be copied again, piece by piece, through a
 *  stream: ~0.4 s of CPU for a 5 000-file first upload, bench/results/first-sync.md). */
export function apiBytes(values: Values, path: string, body: Uint8Array[], type: string): Promise<Response> {
  return request(values, 'POST', path, { body: Buffer.concat(body), type });
}

/** Sends a REST request; its answer when it is a success, else an ApiError with the server's
 *  reason. A busy server is waited for and asked again. */
async function request(values: Values, method: string, path: string, body?: { body: string | Uint8Array<ArrayBuffer>; type: string }): Promise<Response> {
  const base = httpBase(values);
  const token = tokenOf(values);
  let res: Response;
  try {
    res = await fetchWhileBusy(
      () =>
        fetch(base + path, {
          method,
          headers: { ...(token && { Authorization: `Bearer ${token}` }), ...(body && { 'Content-Type': body.type }) },
          body: body?.body,
        }),
      { onBusy: (s) => console.error(`dsync: the server is busy; trying again in ${s} s`) },
    );
  } catch (e) {
    throw new Error(`cannot reach ${base}: ${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message}`);
  }
  if (res.ok) return res;
  const text = await res.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  throw new ApiError(res.status, json?.error ?? `${method} ${path}: HTTP ${res.status}`);
}
