/** Formatting of sizes, durations, percentages and dates for the page. */

/** 1536 → "1.5 KB" (binary units, as file managers show them). */
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

/** 85 → "85 ms", 2345 → "2.3 s", 125000 → "2 min 5 s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Share saved against a full transfer, floored so that "100%" is only ever exact. */
export function savedPercent(sent: number, size: number): string {
  if (size <= 0 || sent >= size) return '0%';
  const p = 100 * (1 - sent / size);
  return p >= 99 ? `${Math.floor(p * 10) / 10}%` : `${Math.floor(p)}%`;
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
