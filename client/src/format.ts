/** Formatting of sizes, speeds, durations, percentages and dates for the page. */

/** Decimal units, as the server's size flags count: one convention with the CLI (shared/src/base/units.ts). */
import { formatBytes } from '../../shared/src/base/units.ts';
export { formatBytes };

/** Bytes per second → "2.4 MB/s". */
export const formatRate = (bytesPerSecond: number) => `${formatBytes(Math.round(bytesPerSecond))}/s`;

/** 85 → "85 ms", 2345 → "2.3 s", 125000 → "2 min 5 s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Time left, coarse as people say it: "3 s left", "2 min left", "1 h 5 min left". */
export function formatLeft(ms: number): string {
  const s = Math.max(1, Math.ceil(ms / 1000));
  if (s < 60) return `${s} s left`;
  const m = Math.round(s / 60);
  return m < 60 ? `${m} min left` : `${Math.floor(m / 60)} h ${m % 60} min left`;
}

/**
 * What a transfer saved against sending the whole file: the share, floored so that "100%" is
 * only ever exact, or null when it saved nothing (it cost as much as a full transfer, or more).
 */
export function savedPercent(sent: number, size: number): string | null {
  if (size <= 0 || sent >= size) return null;
  const p = 100 * (1 - sent / size);
  if (p < 0.1) return 'under 0.1%';
  return p >= 99 || p < 10 ? `${Math.floor(p * 10) / 10}%` : `${Math.floor(p)}%`;
}

const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/** "just now", "5 minutes ago", "yesterday", or a date beyond a week. */
export function relativeTime(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  const s = Math.round((t - now) / 1000);
  if (Math.abs(s) < 45) return 'just now';
  if (Math.abs(s) < 3600) return rtf.format(Math.round(s / 60), 'minute');
  if (Math.abs(s) < 86_400) return rtf.format(Math.round(s / 3600), 'hour');
  if (Math.abs(s) < 7 * 86_400) return rtf.format(Math.round(s / 86_400), 'day');
  return new Date(t).toLocaleDateString();
}

/** A full date and time for a tooltip. */
export const exactTime = (iso: string) => new Date(iso).toLocaleString();
