/** The server's REST API (server/src/http/app.ts lists them; its shapes: shared/src/wire/api.ts), as the page uses it. */
import type { ApiErrorBody, ClientConfig, FileInfo, FolderRemoveAnswer, Health, ListingPage, MoveAnswer, RemoveAnswer, RestoreAnswer, SearchPage, TrashRestoreAnswer, VersionInfo, WhoAmI } from '../../shared/src/wire/api.ts';
import { fetchWhileBusy } from '../../shared/src/transport/busy.ts';
import { SEARCH_PAGE, SEARCH_REQUESTS } from '../../shared/src/base/limits.ts';

export type { Change, FileInfo, VersionInfo } from '../../shared/src/wire/api.ts';

/** A folder of the listing: its full path, ending in '/' (the server's listing names folders only). */
export interface FolderInfo {
  path: string;
}
export interface Folder {
  files: FileInfo[];
  folders: FolderInfo[];
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A REST request unanswered this long fails. */
const TIMEOUT_MS = 15_000;

/** A signal that aborts after `ms` (AbortSignal.timeout, which Safari has only from 16). */
function timeoutSignal(ms: number): AbortSignal {
  if (typeof AbortSignal.timeout === 'function') return AbortSignal.timeout(ms);
  const c = new AbortController();
  setTimeout(() => c.abort(new DOMException('signal timed out', 'TimeoutError')), ms);
  return c.signal;
}

/** A REST request; a busy server (503 with Retry-After) is waited for and asked again
 *  (shared/src/transport/busy.ts). */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetchWhileBusy(() =>
    fetch(path, {
      method,
      credentials: 'same-origin',
      cache: 'no-store',
      // a server that hangs is reported as one that does not answer, not waited for forever
      signal: timeoutSignal(TIMEOUT_MS),
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  );
  if (!res.ok) {
    const said = ((await res.json().catch(() => ({}))) as Partial<ApiErrorBody>).error;
    throw new HttpError(res.status, said ?? (res.status === 404 && method !== 'GET' ? 'this server does not offer that yet' : res.statusText));
  }
  return res.json() as Promise<T>;
}
const get = <T>(path: string) => call<T>('GET', path);
const q = encodeURIComponent;

/** Entries fetched per request of a folder listing; a folder of more takes several. */
const PAGE = 1000;
/** A folder lists at most this many entries (the page shows them 100 at a time). */
export const MAX_ENTRIES = 20 * PAGE;

/**
 * Every file and folder directly in `prefix` ('' or a path ending in '/'), through the server's
 * paged listing (server/src/http/files-api.ts: `{ files, folders, next }`, each folder its full path
 * ending in '/').
 */
async function folder(prefix: string): Promise<Folder & { truncated: boolean }> {
  const out: Folder = { files: [], folders: [] };
  let cursor: string | null = null;
  do {
    const page: ListingPage = await get(`/api/files?prefix=${q(prefix)}&limit=${PAGE}${cursor ? `&cursor=${q(cursor)}` : ''}`);
    out.files.push(...page.files);
    for (const path of page.folders) out.folders.push({ path });
    cursor = page.next;
  } while (cursor && out.files.length + out.folders.length < MAX_ENTRIES);
  return { ...out, truncated: cursor !== null };
}

/** Every file and folder below `prefix` (a path ending in '/'), in name order: the server's
 *  recursive listing, followed page by page. */
async function tree(prefix: string): Promise<{ files: FileInfo[]; folders: string[] }> {
  const out: { files: FileInfo[]; folders: string[] } = { files: [], folders: [] };
  let cursor: string | null = null;
  do {
    const page: ListingPage = await get(`/api/files?prefix=${q(prefix)}&recursive=1&limit=${PAGE}${cursor ? `&cursor=${q(cursor)}` : ''}`);
    out.files.push(...page.files);
    out.folders.push(...page.folders);
    cursor = page.next;
  } while (cursor);
  return out;
}

/**
 * Files whose path contains `text`, in any folder (GET /api/search): pages from `cursor` until
 * `want` hits, the end, or SEARCH_REQUESTS requests (each bounded by the server). `stop()`
 * true ends it early.
 */
async function search(text: string, cursor: string, want: number, stop: () => boolean): Promise<SearchPage> {
  const files: FileInfo[] = [];
  let next: string | null = cursor;
  let requests = 0;
  do {
    const page: SearchPage = await get(`/api/search?q=${q(text)}&limit=${Math.min(SEARCH_PAGE, want - files.length)}${next ? `&cursor=${q(next)}` : ''}`);
    files.push(...page.files);
    next = page.next;
  } while (next !== null && files.length < want && ++requests < SEARCH_REQUESTS && !stop());
  return { files, next };
}

/** Why a sign-in failed, in words: a wrong password, too many tries (with the wait the server
 *  asks for in Retry-After, seconds or a date), or the server's trouble. */
export function signInFailure(status: number, retryAfter: string | null, now = Date.now()): string {
  if (status === 401) return 'Wrong name or password.';
  if (status === 429) {
    const secs = retryAfter === null ? NaN : /^\d+$/.test(retryAfter.trim()) ? Number(retryAfter) : Math.ceil((Date.parse(retryAfter) - now) / 1000);
    const wait = Number.isFinite(secs) && secs > 0 ? (secs < 60 ? `${secs} second${secs === 1 ? '' : 's'}` : `${Math.ceil(secs / 60)} minute${Math.ceil(secs / 60) === 1 ? '' : 's'}`) : 'a moment';
    return `Too many sign-in attempts. Try again in ${wait}.`;
  }
  return status >= 500 ? `The server could not sign you in just now (HTTP ${status}); try again shortly.` : `Sign-in failed (HTTP ${status}).`;
}

export const api = {
  search,
  health: () => get<Health>('/api/health'),
  whoami: () => get<WhoAmI>('/api/whoami'),
  config: () => get<ClientConfig>('/api/config'),
  folder,
  versions: (name: string) => get<VersionInfo[]>(`/api/versions?name=${q(name)}`),
  downloadUrl: (name: string, version: number) => `/api/download?name=${q(name)}&version=${version}`,
  /** deletes a file (every version), or one version of it */
  remove: (name: string, version?: number) => call<RemoveAnswer>('DELETE', `/api/files?name=${q(name)}${version === undefined ? '' : `&version=${version}`}`),
  tree,
  /** deletes a folder (a path ending in '/'): every file under it, each with every version */
  removeFolder: (path: string) => call<FolderRemoveAnswer>('DELETE', `/api/folders?name=${q(path)}`),
  /** renames a file, or a folder (both names ending in '/'): metadata only, no bytes move */
  move: (from: string, to: string) => call<MoveAnswer>('POST', '/api/files/move', { from, to }),
  /** makes an old version the new latest one; answers its number */
  restore: (name: string, version: number) => call<RestoreAnswer>('POST', '/api/files/restore', { name, version }),
  /** puts a file or folder of the trash (".dsync-trash/STAMP/PATH[/]") back at PATH, each file
   *  with its history; names taken again meanwhile stay in the trash (`skipped`) */
  restoreFromTrash: (path: string) => call<TrashRestoreAnswer>('POST', '/api/files/restore', { name: path }),
  async login(name: string, password: string) {
    const res = await fetch('/api/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, password }) });
    if (!res.ok) throw new HttpError(res.status, signInFailure(res.status, res.headers.get('Retry-After')));
  },
};

/** What the page knows about its server. */
export type ServerState =
  | { status: 'checking' }
  | { status: 'unreachable' }
  | { status: 'signin' }
  | { status: 'ok'; user: string; singleUser: boolean; maxFileSize: number };

/** Asks the server whether it is there, whether we are signed in, and its limits. */
export async function probe(): Promise<ServerState> {
  try {
    await api.health();
  } catch {
    return { status: 'unreachable' };
  }
  try {
    const [who, config] = await Promise.all([api.whoami(), api.config()]);
    return { status: 'ok', user: who.user, singleUser: who.singleUser, maxFileSize: config.maxFileSize };
  } catch (e) {
    return e instanceof HttpError && (e.status === 401 || e.status === 403) ? { status: 'signin' } : { status: 'unreachable' };
  }
}

/** The namespace's live changes (server/src/http/events.ts). */
export const eventsUrl = '/api/events';

/** This device, as a version's history names it: "Chrome on Android", "Safari on iPhone",
 *  "WebKit on Linux". Safari is Apple's browser only: the WebKit browsers of other systems
 *  (Epiphany, MiniBrowser) say "Safari" in their user agent too, and are named by their engine.
 *  On an iPhone or iPad every browser is WebKit, named by its own token (CriOS is Chrome). */
export function deviceLabel(ua = navigator.userAgent): string {
  const os = /Android/.test(ua) ? 'Android' : /iPhone|iPod/.test(ua) ? 'iPhone' : /iPad/.test(ua) ? 'iPad' : /Mac OS X/.test(ua) ? 'macOS' : /Windows/.test(ua) ? 'Windows' : /CrOS/.test(ua) ? 'ChromeOS' : /Linux/.test(ua) ? 'Linux' : '';
  const apple = os === 'iPhone' || os === 'iPad' || os === 'macOS';
  const browser = /Edg(e|A|iOS)?\//.test(ua)
    ? 'Edge'
    : /Firefox\/|FxiOS\//.test(ua)
      ? 'Firefox'
      : /Chrome\/|CriOS\//.test(ua)
        ? 'Chrome'
        : /AppleWebKit\//.test(ua)
          ? apple && /Safari\//.test(ua) ? 'Safari' : 'WebKit'
          : 'A browser';
  return os ? `${browser} on ${os}` : browser;
}

/** ws(s)://this-host/sync?client=<this device>: the server records the label with each version. */
export const syncUrl = () => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/sync?client=${encodeURIComponent(deviceLabel())}`;
