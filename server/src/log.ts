/**
 * What `dsync serve` tells the person who started it: a start banner (the URLs, the LAN
 * address a phone should open, whether accounts are on, the store), one line per event, and a
 * goodbye. Events are human lines or JSON objects (`--log-format`; by default human on a
 * terminal and JSON otherwise, one object a line, as tools read them). The banner's first line,
 * "dsync server on http://HOST:PORT", is the same in both forms: scripts wait for it.
 */
import { networkInterfaces } from 'node:os';
import { formatBytes, savedPercent } from '../../shared/src/base/units.ts';
import type { ServerConfig } from './config.ts';

export const LOG_FORMATS = ['human', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Whether a listen address lets other machines in. */
export const isLoopback = (host: string) => host === 'localhost' || host === '::1' || host.startsWith('127.');
const isWildcard = (host: string) => host === '0.0.0.0' || host === '::';

/** The machine's IPv4 addresses on its networks (what a phone on the same Wi-Fi opens). */
export function lanAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && a.family === 'IPv4' && !a.internal)
    .map((a) => a!.address);
}

/** The start banner, and a warning (for stderr) when it listens beyond this machine with no accounts. */
export function banner(cfg: ServerConfig, url: string, port: number, format: LogFormat, store: string): { text: string; warning?: string } {
  const accounts = Boolean(cfg.users);
  const open = !isLoopback(cfg.host);
  const warning =
    open && !accounts
      ? `warning: listening on ${cfg.host} with no accounts: anyone who can reach this machine can read, change and delete every file.\n         Add accounts (dsync adduser NAME --users users.json, then --users users.json), or listen on this machine only (the default, --host 127.0.0.1).`
      : undefined;
  const first = `dsync server on ${url} (store: ${store}, permessage-deflate ${cfg.deflate ? 'on' : 'off'}${cfg.paperExact ? ', paper-exact' : ''})`;
  if (format === 'json') return { text: first, warning };
  const lan = isWildcard(cfg.host) ? lanAddresses().map((a) => `http://${a}:${port}`) : open ? [url] : [];
  const lines = [
    first,
    `  on this computer:  http://localhost:${port}`,
    lan.length ? `  on your network:   ${lan.join('  ')}   (open this on a phone)` : `  on your network:   not reachable (listening on ${cfg.host} only; --host 0.0.0.0 lets a phone in)`,
    `  accounts:          ${accounts ? `on (${cfg.users})` : 'off (one user, no password)'}`,
    'Ctrl-C stops it.',
  ];
  return { text: lines.join('\n'), warning };
}

const clock = (d: Date) => d.toTimeString().slice(0, 8);

/** One event as a human line: "13:07:12 push report.pdf v3: 20 MB, 23 KB new (99.8% saved) in 150 ms". */
export function humanLine(e: Record<string, unknown>, now = new Date()): string {
  const who = e.user && e.user !== 'local' ? ` [${e.user}]` : '';
  const what = `${e.op ?? ''} ${e.name ?? ''}`.trim();
  let s: string;
  if (e.error !== undefined) s = what ? `${what} failed: ${e.error}${e.message ? ` ${e.message}` : ''}` : `error (${e.error})${e.message ? `: ${e.message}` : ''}`;
  else if (e.aborted !== undefined) s = `${what} abandoned: ${e.aborted}`;
  else if ((e.op === 'push' || e.op === 'pull') && typeof e.size === 'number') {
    const moved = Number(e.literalBytes ?? 0);
    const saved = savedPercent(moved, e.size);
    s = `${what} v${e.version}: ${formatBytes(e.size)}, ${formatBytes(moved)} ${e.op === 'push' ? 'new' : 'sent'} (${saved ? `${saved} saved` : 'nothing saved'}) in ${e.ms} ms`;
  } else {
    const rest = Object.entries(e).filter(([k]) => k !== 'op' && k !== 'name' && k !== 'user');
    s = `${what} ${rest.map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ')}`.trim();
  }
  return `${clock(now)} ${s}${who}`;
}

/** The event logger handed to startServer: one line per event on stdout. */
export function logger(format: LogFormat, write: (line: string) => void = (l) => console.log(l)): (e: Record<string, unknown>) => void {
  return format === 'json' ? (e) => write(JSON.stringify({ t: new Date().toISOString(), ...e })) : (e) => write(humanLine(e));
}

/** The last line: what happened to the sessions open when the server was stopped. */
export function goodbye(r: { finished: number; abandoned: number }): string {
  const parts = [r.finished && `${r.finished} open session${r.finished === 1 ? '' : 's'} finished`, r.abandoned && `${r.abandoned} abandoned`].filter(Boolean);
  return `dsync server stopped${parts.length ? `: ${parts.join(', ')}` : ''}. Goodbye.`;
}
