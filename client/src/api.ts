/** The server's REST API (server/src/server.ts), as the page uses it. */
import type { FileInfo, VersionInfo } from '../../server/src/store.ts';

export type { FileInfo, VersionInfo };

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function get<T>(path: string): Promise<T> {
  const res = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (!res.ok) throw new HttpError(res.status, ((await res.json().catch(() => ({}))) as { error?: string }).error ?? res.statusText);
  return res.json() as Promise<T>;
}

export const api = {
  health: () => get<{ ok: boolean }>('/api/health'),
  whoami: () => get<{ user: string; singleUser: boolean }>('/api/whoami'),
  config: () => get<{ maxFileSize: number }>('/api/config'),
  /** every file, following the listing's pages */
  async files(): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    for (let cursor = ''; ; ) {
      const page = await get<{ files: FileInfo[]; next: string | null }>(`/api/files?recursive=1&limit=10000&cursor=${encodeURIComponent(cursor)}`);
      out.push(...page.files);
      if (!page.next) return out;
      cursor = page.next;
    }
  },
  versions: (name: string) => get<VersionInfo[]>(`/api/versions?name=${encodeURIComponent(name)}`),
  downloadUrl: (name: string, version: number) => `/api/download?name=${encodeURIComponent(name)}&version=${version}`,
  async login(name: string, password: string) {
    const res = await fetch('/api/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, password }) });
    if (!res.ok) throw new HttpError(res.status, res.status === 401 ? 'Wrong name or password.' : `Sign-in failed (HTTP ${res.status}).`);
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

/** ws(s)://this-host/sync */
export const syncUrl = () => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/sync`;
