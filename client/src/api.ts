/** The server's REST API (server/src/server.ts). */
import type { FileInfo, VersionInfo } from '../../server/src/store.ts';

export type { FileInfo, VersionInfo };
export interface ServerConfig {
  maxFileSize: number;
}

export class HttpError extends Error {
  constructor(
    public status: number,
    message: string,
  ) {
    super(message);
  }
}

async function get<T>(path: string): Promise<T> {
  const res = await fetch(path, { credentials: 'same-origin' });
  if (!res.ok) throw new HttpError(res.status, ((await res.json().catch(() => ({}))) as { error?: string }).error ?? res.statusText);
  return res.json() as Promise<T>;
}

export const api = {
  health: () => get<{ ok: boolean }>('/api/health'),
  whoami: () => get<{ user: string; singleUser: boolean }>('/api/whoami'),
  config: () => get<ServerConfig>('/api/config'),
  files: () => get<FileInfo[]>('/api/files'),
  versions: (name: string) => get<VersionInfo[]>(`/api/versions?name=${encodeURIComponent(name)}`),
  downloadUrl: (name: string, version: number) => `/api/download?name=${encodeURIComponent(name)}&version=${version}`,
  async login(name: string, password: string) {
    const res = await fetch('/api/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, password }) });
    if (!res.ok) throw new HttpError(res.status, 'wrong name or password');
  },
};

/** ws(s)://this-host/sync */
export const syncUrl = () => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/sync`;

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}
